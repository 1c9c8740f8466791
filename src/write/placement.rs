//! Choosing the directory of each new segment among the eligible ones. Pure functions of the
//! directories' state and the segment's start offset.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;

use crate::options::Strategy;
use crate::state::dirs::DirInfo;

/// The eligible directories (indices into `eligible`) to try for a new segment at `start`, best
/// first. The creator takes the first where creation succeeds (Kafka's KAFKA-8526 fallback), so a
/// directory failing costs one attempt, not the append. `shares[i]` is how many eligible
/// directories share `eligible[i]`'s filesystem (its free space counts once). A `Custom` strategy
/// is asked by the caller, with no lock held; here it falls back to round robin.
pub fn order(
    strategy: &Strategy,
    eligible: &[DirInfo],
    shares: &[usize],
    start: u64,
    segment_size: u64,
) -> Vec<usize> {
    let n = eligible.len();
    let mut idx: Vec<usize> = (0..n).collect();
    if n <= 1 {
        return idx;
    }
    match strategy {
        Strategy::RoundRobin | Strategy::Custom(_) => {
            // The segment number, not a hash of the offset: a hash of 1 GiB-aligned offsets modulo
            // 2 or 4 would always pick the same directory.
            let first = ((start / segment_size) % n as u64) as usize;
            idx.rotate_left(first);
        }
        // Kafka KIP-178: where some free space is unknown, free-space strategies count segments
        // (the directory said why once, when its usage was first unknown).
        Strategy::MostFree | Strategy::WeightedFree
            if eligible.iter().any(|d| d.free_bytes.is_none()) =>
        {
            idx.sort_by_key(|&i| eligible[i].segments);
        }
        Strategy::FewestSegments => idx.sort_by_key(|&i| eligible[i].segments),
        Strategy::MostFree => {
            idx.sort_by_key(|&i| std::cmp::Reverse(eligible[i].free_bytes));
        }
        Strategy::WeightedFree => {
            let weights: Vec<u64> = eligible
                .iter()
                .zip(shares)
                .map(|(d, &share)| d.free_bytes.unwrap_or(0) / share.max(1) as u64)
                .collect();
            let total: u64 = weights.iter().sum();
            if total > 0 {
                let mut pick = RandomState::new().hash_one(start) % total;
                let chosen = weights
                    .iter()
                    .position(|&w| {
                        if pick < w {
                            true
                        } else {
                            pick -= w;
                            false
                        }
                    })
                    .unwrap_or(0);
                idx.remove(chosen);
                idx.insert(0, chosen);
            }
        }
    }
    idx
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::dirs::DirState;
    use std::path::PathBuf;

    fn dirs(free: &[u64], segments: &[usize]) -> Vec<DirInfo> {
        free.iter()
            .zip(segments)
            .enumerate()
            .map(|(i, (&free_bytes, &segments))| DirInfo {
                path: PathBuf::from(format!("/d{i}")),
                state: DirState::Writable,
                total_bytes: Some(1000),
                free_bytes: Some(free_bytes),
                used_ratio: Some(0.5),
                segments,
                error: None,
            })
            .collect()
    }

    #[test]
    fn round_robin_spreads_evenly_for_any_count() {
        for n in 1..=5usize {
            let d = dirs(&vec![1; n], &vec![0; n]);
            let mut counts = vec![0; n];
            for seg in 0..(n as u64 * 20) {
                let o = order(&Strategy::RoundRobin, &d, &vec![1; n], seg << 30, 1 << 30);
                assert_eq!(o.len(), n);
                counts[o[0]] += 1;
            }
            assert!(counts.iter().all(|&c| c == 20), "n={n}: {counts:?}");
        }
    }

    #[test]
    fn rip7_mapping_and_fallback_order() {
        let d = dirs(&[1, 1, 1], &[0, 0, 0]);
        let s = [1, 1, 1];
        assert_eq!(order(&Strategy::RoundRobin, &d, &s, 0, 1024), vec![0, 1, 2]);
        assert_eq!(
            order(&Strategy::RoundRobin, &d, &s, 4096, 1024),
            vec![1, 2, 0]
        );
    }

    #[test]
    fn most_free_and_fewest_segments_break_ties_by_configuration_order() {
        let d = dirs(&[50, 90, 90], &[3, 1, 1]);
        let s = [1, 1, 1];
        assert_eq!(order(&Strategy::MostFree, &d, &s, 0, 1), vec![1, 2, 0]);
        assert_eq!(
            order(&Strategy::FewestSegments, &d, &s, 0, 1),
            vec![1, 2, 0]
        );
    }

    #[test]
    fn free_space_strategies_count_segments_where_free_space_is_unknown() {
        // Directory 0 reports no size: it has the fewest segments, so it goes first, and
        // directory 2 (most free) does not take every segment.
        let mut d = dirs(&[50, 90, 900], &[1, 3, 2]);
        d[0].free_bytes = None;
        d[0].total_bytes = None;
        d[0].used_ratio = None;
        let s = [1, 1, 1];
        for strategy in [Strategy::MostFree, Strategy::WeightedFree] {
            for start in 0..50 {
                assert_eq!(order(&strategy, &d, &s, start, 1), vec![0, 2, 1]);
            }
        }
    }

    #[test]
    fn weighted_free_follows_free_space_without_taking_everything() {
        let d = dirs(&[100, 300], &[0, 0]);
        let mut firsts = [0; 2];
        for start in 0..4000u64 {
            firsts[order(&Strategy::WeightedFree, &d, &[1, 1], start, 1)[0]] += 1;
        }
        // About 1:3; the smaller disk still gets a share.
        assert!(firsts[0] > 700 && firsts[0] < 1300, "{firsts:?}");
        // Two directories on one filesystem split its weight.
        let d = dirs(&[300, 300, 300], &[0, 0, 0]);
        let mut firsts = [0; 3];
        for start in 0..6000u64 {
            firsts[order(&Strategy::WeightedFree, &d, &[2, 2, 1], start, 1)[0]] += 1;
        }
        assert!(firsts[2] > 2500, "{firsts:?}");
    }
}
