//! The ordered, contiguous list of a log's segments and the O(1) offset lookup.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::storage::segment::Segment;

/// An immutable snapshot of the segments, in offset order, each starting where the previous ends.
/// Changes build a new snapshot, so readers never wait for the writer.
#[derive(Debug, Clone, Default)]
pub struct SegmentList {
    segments: Vec<Arc<Segment>>,
    /// The configured segment size, used for the O(1) guess.
    segment_size: u64,
    /// Lookups that missed the O(1) guess and searched; shared by all snapshots of one log.
    fallbacks: Arc<AtomicU64>,
}

impl SegmentList {
    /// A list of contiguous segments; `segment_size` is the size new segments get.
    pub fn new(segments: Vec<Arc<Segment>>, segment_size: u64) -> SegmentList {
        debug_assert!(segments.windows(2).all(|w| w[0].end() == w[1].start()));
        SegmentList {
            segments,
            segment_size,
            fallbacks: Arc::default(),
        }
    }

    fn derive(&self, segments: Vec<Arc<Segment>>) -> SegmentList {
        debug_assert!(segments.windows(2).all(|w| w[0].end() == w[1].start()));
        SegmentList {
            segments,
            segment_size: self.segment_size,
            fallbacks: Arc::clone(&self.fallbacks),
        }
    }

    /// How many lookups missed the O(1) guess and fell back to the search.
    pub fn fallback_lookups(&self) -> u64 {
        self.fallbacks.load(Ordering::Relaxed)
    }

    /// All segments in offset order.
    pub fn as_slice(&self) -> &[Arc<Segment>] {
        &self.segments
    }

    /// The first segment.
    pub fn first(&self) -> Option<&Arc<Segment>> {
        self.segments.first()
    }

    /// The last segment.
    pub fn last(&self) -> Option<&Arc<Segment>> {
        self.segments.last()
    }

    /// A copy with `new` appended at the end.
    pub fn with_appended(&self, new: Vec<Arc<Segment>>) -> SegmentList {
        let mut segments = Vec::with_capacity(self.segments.len() + new.len());
        segments.extend(self.segments.iter().cloned());
        segments.extend(new);
        self.derive(segments)
    }

    /// A copy with the segment of the same start replaced by `segment` (a moved segment, its
    /// remote copy), which takes the old one's record count.
    pub fn with_replaced(&self, segment: Arc<Segment>) -> SegmentList {
        let segments = self
            .segments
            .iter()
            .map(|s| {
                if s.start() == segment.start() {
                    segment.take_count(s);
                    Arc::clone(&segment)
                } else {
                    Arc::clone(s)
                }
            })
            .collect();
        self.derive(segments)
    }

    /// A copy without the segments that end at or before `offset` (deleted from the head).
    pub fn without_head_before(&self, offset: u64) -> SegmentList {
        let skip = self.segments.partition_point(|s| s.end() <= offset);
        self.derive(self.segments[skip..].to_vec())
    }

    /// A copy without the segments that start at or after `start`.
    pub fn truncated_before(&self, start: u64) -> SegmentList {
        let keep = self.segments.partition_point(|s| s.start() < start);
        self.derive(self.segments[..keep].to_vec())
    }

    /// Index of the segment holding `offset`: `offset / size - first.start / size` (RocketMQ's
    /// O(1) arithmetic), checked against that segment's range; when the check fails (segments of
    /// another size from before a `segment_size` change), a binary search over the starts.
    pub fn index_of(&self, offset: u64) -> Option<usize> {
        let first = self.segments.first()?;
        let size = self.segment_size;
        if let Some(guess) = (offset / size).checked_sub(first.start() / size) {
            if let Some(s) = self.segments.get(guess as usize) {
                if s.contains(offset) {
                    return Some(guess as usize);
                }
            }
        }
        self.fallbacks.fetch_add(1, Ordering::Relaxed);
        let after = self.segments.partition_point(|s| s.start() <= offset);
        let i = after.checked_sub(1)?;
        self.segments[i].contains(offset).then_some(i)
    }

    /// The segment holding `offset`.
    pub fn find(&self, offset: u64) -> Option<&Arc<Segment>> {
        self.index_of(offset).map(|i| &self.segments[i])
    }

    /// The sealed segments when the published end is `end`: a prefix of the list, each wholly
    /// below `end`, never the last one (records are written into it, or will be once the end
    /// reaches it). Only these may be deleted or moved.
    pub fn sealed(&self, end: u64) -> &[Arc<Segment>] {
        let below = self.segments.partition_point(|s| s.end() <= end);
        &self.segments[..below.min(self.segments.len().saturating_sub(1))]
    }

    /// Whether `segment` (this very one, not a copy of it) is in the list.
    pub fn holds(&self, segment: &Arc<Segment>) -> bool {
        self.index_of(segment.start())
            .is_some_and(|i| Arc::ptr_eq(&self.segments[i], segment))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn list(sizes: &[u64], first_start: u64, configured: u64) -> SegmentList {
        let mut start = first_start;
        let segs = sizes
            .iter()
            .map(|&size| {
                let s = Arc::new(Segment::new(start, size, PathBuf::new(), 0, false));
                start += size;
                s
            })
            .collect();
        SegmentList::new(segs, configured)
    }

    #[test]
    fn rocketmq_find_cases() {
        // RocketMQ's MappedFileQueue test: 1 KiB files.
        let l = list(&[1024; 4], 0, 1024);
        assert_eq!(l.find(0).unwrap().start(), 0);
        assert_eq!(l.find(100).unwrap().start(), 0);
        assert_eq!(l.find(1024).unwrap().start(), 1024);
        assert_eq!(l.find(1124).unwrap().start(), 1024);
        assert!(l.find(4096).is_none());
    }

    #[test]
    fn head_deleted_lookup_is_o1() {
        let l = list(&[4096; 5], 3 * 4096, 4096);

        for off in (3 * 4096..8 * 4096).step_by(1000) {
            let s = l.find(off).unwrap();
            assert!(s.contains(off));
        }
        assert!(l.find(3 * 4096 - 1).is_none());
        // The miss below the head used the fallback once; the hits did not.
        assert_eq!(l.fallback_lookups(), 1);
    }

    #[test]
    fn mixed_sizes_fall_back_to_search() {
        // Two old 8 KiB segments, then new ones of 12 KiB.
        let l = list(&[8192, 8192, 12288, 12288], 0, 12288);
        for (off, start) in [
            (0, 0),
            (8191, 0),
            (8192, 8192),
            (16384, 16384),
            (28671, 16384),
        ] {
            assert_eq!(l.find(off).unwrap().start(), start, "offset {off}");
        }
        assert_eq!(l.find(28672).unwrap().start(), 28672);
        assert!(l.find(40960).is_none());
        assert_eq!(l.fallback_lookups(), 4);
    }
}
