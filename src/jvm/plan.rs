//! A read planned as partitions: byte spans of the log, one Spark task each. The same plan as the
//! Python source's (`rmqlog/spark/batch.py`: `_byte_ranges`, `_pieces`, `_packed`).

use crate::log::SegmentInfo;
use crate::tier::SPLIT_EVERY;

/// `[lo, hi)` byte spans of the log.
pub(super) type Span = (u64, u64);

/// Records a key lookup found (one-byte spans) go this many to a partition, whatever their
/// segments.
const KEY_SPANS: usize = 1024;

/// Partitions over `ranges` (sorted, disjoint): per segment, the parts of the ranges in it,
/// grouped into partitions of at most `limit` bytes (`None`: one partition per segment). A local
/// segment is split anywhere; a remote-only one at its `splits` (so that a task fetches only its
/// part), a split weighing as its place on the `SPLIT_EVERY` grid.
pub(super) fn partitions(
    segments: &[SegmentInfo],
    ranges: &[Span],
    limit: Option<u64>,
) -> Vec<Vec<Span>> {
    let mut parts = Vec::new();
    for seg in segments {
        let mut spans: Vec<Span> = Vec::new();
        let mut size = 0;
        let end = seg.start_offset + seg.size;
        for &(lo, hi) in ranges {
            let (a, b) = (lo.max(seg.start_offset), hi.min(end));
            if a >= b {
                continue;
            }
            for (x, y, weight) in pieces(seg, a, b, limit) {
                if limit.is_some_and(|l| !spans.is_empty() && size + weight > l) {
                    parts.push(std::mem::take(&mut spans));
                    size = 0;
                }
                match spans.last_mut() {
                    Some(last) if last.1 == x => last.1 = y, // one scan, one range read
                    _ => spans.push((x, y)),
                }
                size += weight;
            }
        }
        if !spans.is_empty() {
            parts.push(spans);
        }
    }
    parts
}

/// The spans of `parts`, in offset order, regrouped `KEY_SPANS` to a partition.
pub(super) fn packed(parts: Vec<Vec<Span>>) -> Vec<Vec<Span>> {
    let spans: Vec<Span> = parts.into_iter().flatten().collect();
    spans.chunks(KEY_SPANS).map(<[Span]>::to_vec).collect()
}

/// `[a, b)` of `seg` cut where a partition may end, each piece with its weight.
fn pieces(seg: &SegmentInfo, a: u64, b: u64, limit: Option<u64>) -> Vec<(u64, u64, u64)> {
    if seg.local {
        let step = limit.unwrap_or(b - a).max(1);
        return (0..)
            .map(|i| a + i * step)
            .take_while(|&x| x < b)
            .map(|x| (x, (x + step).min(b), (x + step).min(b) - x))
            .collect();
    }
    let place = |v: u64| match seg.splits.contains(&v) {
        true => v - (v - seg.start_offset) % SPLIT_EVERY,
        false => v,
    };
    let mut cuts = vec![a];
    cuts.extend(seg.splits.iter().copied().filter(|&s| a < s && s < b));
    cuts.push(b);
    // (A piece from inside a split's record to that split lies before its place: it weighs 0.)
    cuts.windows(2)
        .map(|w| (w[0], w[1], place(w[1]).saturating_sub(place(w[0]))))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(start: u64, size: u64, local: bool, splits: Vec<u64>) -> SegmentInfo {
        SegmentInfo {
            start_offset: start,
            path: Default::default(),
            size,
            written: size,
            sealed: true,
            local,
            remote: !local,
            splits,
        }
    }

    #[test]
    fn local_segments_split_by_the_limit_and_never_across_segments() {
        let segs = [seg(0, 100, true, vec![]), seg(100, 100, true, vec![])];
        assert_eq!(
            partitions(&segs, &[(10, 150)], None),
            vec![vec![(10, 100)], vec![(100, 150)]]
        );
        assert_eq!(
            partitions(&segs, &[(0, 100)], Some(40)),
            vec![vec![(0, 40)], vec![(40, 80)], vec![(80, 100)]]
        );
        // Two ranges in one segment under the limit: one partition, two spans.
        assert_eq!(
            partitions(&segs, &[(0, 10), (20, 30)], Some(40)),
            vec![vec![(0, 10), (20, 30)]]
        );
    }

    #[test]
    fn remote_segments_split_only_at_their_splits() {
        let s = SPLIT_EVERY;
        let segs = [seg(0, 4 * s, false, vec![s + 7, 2 * s + 3, 3 * s + 1])];
        // Each piece weighs about SPLIT_EVERY: a limit of two grid steps takes two pieces.
        let parts = partitions(&segs, &[(0, 4 * s)], Some(2 * s));
        assert_eq!(parts, vec![vec![(0, 2 * s + 3)], vec![(2 * s + 3, 4 * s)]]);
        assert_eq!(packed(parts).len(), 1);
    }
}
