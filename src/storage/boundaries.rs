//! Where records start inside a segment, learnt by the walks that step over them: a sparse index
//! of record starts, about one a `stride`, each with its record's timestamp. A walk to a position
//! (`record_start_at_or_after`) or to a time (`offset_for_timestamp`) starts at the known start
//! nearest before its target instead of at the segment's start.
//!
//! The index of a segment file lives in a process-wide cache keyed by the file's identity
//! (device, inode, ctime, size, start, and its first record's timestamp and CRC), so every log
//! this process opens on the file shares it: a
//! Spark executor's tasks, and its queries, each open the store anew and walk a segment once
//! between them. An entry is a record start below an end a reader saw published, and such bytes
//! do not change while the file exists (an append writes past them; a recovery cuts only what was
//! never published); a file rewritten or touched (write, chmod, rename) has another ctime, so
//! another index. At most `CAPACITY` files are kept; the least recently opened goes first.
//!
//! The key is a hint, not a proof. A store deleted and written again within one tick of a
//! coarse ctime (a file system that keeps seconds) gets its files' inodes and ctimes again: its
//! first record's timestamp and CRC tell it apart (its bodies may even hold the old records, at
//! their old positions). A record can be damaged after it was noted: a walk starts from a known
//! start only once the record there is checked again, whole, at that offset, with the noted
//! timestamp (`read/walk.rs`); a record that fails drops the file's index. A walk notes only
//! timestamps that do not go back, so a damaged one does not mislead a search.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

use crate::sync::locked;

/// Files whose index the cache keeps.
const CAPACITY: usize = 1024;
/// Entries a segment's index holds at most (about; two walkers may each note one in a stride).
const ENTRIES: u64 = 1024;
/// The least stride: a walk of 64 KiB of headers costs microseconds.
const MIN_STRIDE: u64 = 64 << 10;

/// A file as `fstat` saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct FileId {
    pub dev: u64,
    pub ino: u64,
    pub ctime: i64,
    pub ctime_nsec: i64,
}

/// A segment file as the cache knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct FileKey {
    pub file: FileId,
    pub size: u64,
    /// The segment's start offset (its name).
    pub start: u64,
    /// Its first record's timestamp and stored CRC.
    pub first: (u64, u32),
}

/// The known record starts of one segment.
#[derive(Debug)]
pub(crate) struct Boundaries {
    stride: u64,
    /// (position from the segment's start, the record's timestamp), ascending positions; the
    /// segment's own start is implied.
    starts: Mutex<Vec<(u64, u64)>>,
}

impl Boundaries {
    fn new(size: u64) -> Boundaries {
        Boundaries {
            stride: (size / ENTRIES).max(MIN_STRIDE),
            starts: Mutex::new(Vec::new()),
        }
    }

    /// Between two entries a walk notes.
    pub fn stride(&self) -> u64 {
        self.stride
    }

    /// The furthest known record start at or before `pos`, with its timestamp, if any.
    pub fn at_or_before(&self, pos: u64) -> Option<(u64, u64)> {
        let starts = locked(&self.starts);
        let i = starts.partition_point(|&(p, _)| p <= pos);
        i.checked_sub(1).map(|i| starts[i])
    }

    /// The furthest known record start whose timestamp is below `timestamp_ms` (timestamps never
    /// decrease along a log), with its timestamp, if any.
    pub fn last_older(&self, timestamp_ms: u64) -> Option<(u64, u64)> {
        let starts = locked(&self.starts);
        let i = starts.partition_point(|&(_, ts)| ts < timestamp_ms);
        i.checked_sub(1).map(|i| starts[i])
    }

    /// Drops every entry: one of them no longer holds (see the module's doc).
    pub fn forget(&self) {
        locked(&self.starts).clear();
    }

    /// Notes the record start `pos` and its timestamp, unless a known start lies less than a
    /// stride before it.
    pub fn note(&self, pos: u64, timestamp_ms: u64) {
        let mut starts = locked(&self.starts);
        let i = starts.partition_point(|&(p, _)| p <= pos);
        let near = i
            .checked_sub(1)
            .is_some_and(|j| pos - starts[j].0 < self.stride);
        if !near && pos >= self.stride {
            starts.insert(i, (pos, timestamp_ms));
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        locked(&self.starts).len()
    }
}

#[derive(Default)]
struct Cache {
    files: HashMap<FileKey, (Arc<Boundaries>, u64)>,
    tick: u64,
}

static CACHE: LazyLock<Mutex<Cache>> = LazyLock::new(Mutex::default);

/// The index of the segment file `key`, shared by every log of this process that maps it.
pub(crate) fn of_file(key: FileKey) -> Arc<Boundaries> {
    let mut cache = locked(&CACHE);
    cache.tick += 1;
    let tick = cache.tick;
    if let Some((b, used)) = cache.files.get_mut(&key) {
        *used = tick;
        return Arc::clone(b);
    }
    if cache.files.len() >= CAPACITY {
        let oldest = cache.files.iter().min_by_key(|(_, (_, used))| *used);
        if let Some(k) = oldest.map(|(k, _)| *k) {
            cache.files.remove(&k);
        }
    }
    let b = Arc::new(Boundaries::new(key.size));
    cache.files.insert(key, (Arc::clone(&b), tick));
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(ino: u64) -> FileKey {
        FileKey {
            file: FileId {
                dev: 1,
                ino,
                ctime: 2,
                ctime_nsec: 3,
            },
            size: 1 << 30,
            start: 0,
            first: (4, 5),
        }
    }

    #[test]
    fn notes_one_start_a_stride_and_finds_the_nearest() {
        let b = Boundaries::new(1 << 30);
        assert_eq!(b.stride(), 1 << 20);
        assert_eq!(b.at_or_before(5 << 20), None);
        b.note(100, 1); // within the first stride: the segment's start is as near
        b.note(1 << 20, 10);
        b.note((1 << 20) + 5000, 11); // less than a stride after a known start
        b.note(3 << 20, 30);
        b.note(2 << 20, 20);
        assert_eq!(b.len(), 3);
        assert_eq!(b.at_or_before((2 << 20) + 7), Some((2 << 20, 20)));
        assert_eq!(b.at_or_before((1 << 20) - 1), None);
        assert_eq!(b.last_older(20), Some((1 << 20, 10)));
        assert_eq!(b.last_older(21), Some((2 << 20, 20)));
        assert_eq!(b.last_older(10), None);
        b.forget();
        assert_eq!(b.at_or_before(5 << 20), None);
    }

    #[test]
    fn one_index_a_file_and_a_touched_file_gets_another() {
        let a = of_file(key(1_000_001));
        a.note(1 << 20, 5);
        assert_eq!(
            of_file(key(1_000_001)).at_or_before(2 << 20),
            Some((1 << 20, 5))
        );
        let touched = FileKey {
            file: FileId {
                ctime_nsec: 4,
                ..key(1_000_001).file
            },
            ..key(1_000_001)
        };
        assert_eq!(of_file(touched).at_or_before(2 << 20), None);
        let other_first = FileKey {
            first: (4, 6),
            ..key(1_000_001)
        };
        assert_eq!(of_file(other_first).at_or_before(2 << 20), None);
    }
}
