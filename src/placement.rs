//! Choosing the directory of each new segment. Pure functions of the candidates and the offset.

use crate::options::Strategy;

/// The directories to try for a new segment at `start`, best first. `writable` are indices into
/// the store's directory list, in configuration order. The creator walks the list and takes the
/// first directory where creation succeeds (Kafka's KAFKA-8526 fallback), so a full disk costs
/// one failed attempt, not the append.
pub fn candidates(
    strategy: Strategy,
    writable: &[usize],
    start: u64,
    segment_size: u64,
) -> Vec<usize> {
    let n = writable.len();
    if n == 0 {
        return Vec::new();
    }
    match strategy {
        Strategy::RoundRobin => {
            // The segment number, not a hash of the offset: a hash of 1 GiB-aligned offsets modulo
            // 2 or 4 would always pick the same directory.
            let first = ((start / segment_size) % n as u64) as usize;
            (0..n).map(|k| writable[(first + k) % n]).collect()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_robin_spreads_evenly_for_any_count() {
        for n in 1..=5usize {
            let dirs: Vec<usize> = (0..n).collect();
            let mut counts = vec![0; n];
            for seg in 0..(n as u64 * 20) {
                let c = candidates(Strategy::RoundRobin, &dirs, seg << 30, 1 << 30);
                assert_eq!(c.len(), n);
                counts[c[0]] += 1;
            }
            assert!(counts.iter().all(|&c| c == 20), "n={n}: {counts:?}");
        }
    }

    #[test]
    fn rip7_mapping_and_fallback_order() {
        let dirs = [0, 1, 2];
        assert_eq!(
            candidates(Strategy::RoundRobin, &dirs, 0, 1024),
            vec![0, 1, 2]
        );
        assert_eq!(
            candidates(Strategy::RoundRobin, &dirs, 4096, 1024),
            vec![1, 2, 0]
        );
        assert_eq!(
            candidates(Strategy::RoundRobin, &[], 0, 1024),
            Vec::<usize>::new()
        );
    }
}
