//! The local cache of remote segments: a directory of this process's own, bounded in bytes, least
//! recently used out first.
//!
//! A scan's segment is cached whole (downloaded once, checked against the manifest's CRC32C; or,
//! from a local `file://` tier, the object mapped where it lies and checked). A point read, or a
//! scan of part of a segment, caches only the bytes it fetched, in a sparse file of the segment's
//! full length, so the same map serves later reads. Evicting deletes the file; a map already
//! handed out stays valid (the kernel keeps an unlinked file's pages while they are mapped).
//!
//! Invariants: cached bytes are never rewritten while mapped (a sparse file's fetched ranges are
//! written once, before they are recorded; a whole download goes to a new file that is renamed
//! into place), and every cache file has its segment's full length before it is mapped.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::error::{Error, IoContext, Result};
use crate::storage::fs::segment_name;
use crate::storage::identity::random_id;
use crate::storage::mapping::Mapping;
use crate::sync::locked;

#[derive(Debug)]
pub(crate) struct Cache {
    dir: PathBuf,
    limit: u64,
    inner: Mutex<Inner>,
    /// One download at a time: a second reader of the same segment waits, then finds it cached.
    pub fetching: Mutex<()>,
}

#[derive(Debug, Default)]
struct Inner {
    slots: BTreeMap<u64, Slot>,
    tick: u64,
    bytes: u64,
}

#[derive(Debug)]
struct Slot {
    map: Arc<Mapping>,
    held: Held,
    charged: u64,
    used: u64,
}

/// What backs a slot's map.
#[derive(Debug)]
enum Held {
    /// A checked download of the whole segment, in this file.
    Whole(PathBuf),
    /// A sparse file of the segment's length: the ranges fetched into it, and its handle.
    Ranges {
        path: PathBuf,
        have: Vec<Range<u64>>,
        file: File,
    },
    /// The object itself, mapped where it lies (a local `file://` tier): no file of the cache's.
    InPlace,
}

impl Held {
    /// Deletes the cache's file, if it has one (a map of it stays valid).
    fn remove(&self) {
        if let Held::Whole(path) | Held::Ranges { path, .. } = self {
            let _ = std::fs::remove_file(path);
        }
    }
}

impl Cache {
    /// A new cache in a fresh directory under `parent` (the system's temp directory if `None`),
    /// holding at most `limit` bytes (but always the segment in use).
    pub fn create(parent: Option<&Path>, limit: u64) -> Result<Cache> {
        let parent = parent.map_or_else(std::env::temp_dir, Path::to_path_buf);
        let dir = parent.join(format!(
            "rmqlog-cache-{}-{}",
            std::process::id(),
            random_id()
        ));
        std::fs::create_dir_all(&dir).ctx("creating the tier cache directory", &dir)?;
        Ok(Cache {
            dir,
            limit,
            inner: Mutex::new(Inner::default()),
            fetching: Mutex::new(()),
        })
    }

    /// Bytes cached now.
    pub fn bytes(&self) -> u64 {
        locked(&self.inner).bytes
    }

    /// Where a download of segment `start` is written before it is checked.
    pub fn download_path(&self, start: u64) -> PathBuf {
        self.dir.join(format!("{}.download", segment_name(start)))
    }

    /// The map of segment `start` if it is cached whole, or if its cached part covers `range`.
    pub fn get(&self, start: u64, range: Option<Range<u64>>) -> Option<Arc<Mapping>> {
        let mut inner = locked(&self.inner);
        inner.tick += 1;
        let tick = inner.tick;
        let slot = inner.slots.get_mut(&start)?;
        let hit = match (&slot.held, &range) {
            (Held::Whole(_) | Held::InPlace, _) => true,
            (Held::Ranges { have, .. }, Some(r)) => uncovered(have, r.clone()).is_empty(),
            (Held::Ranges { .. }, None) => false,
        };
        if hit {
            slot.used = tick;
            Some(Arc::clone(&slot.map))
        } else {
            None
        }
    }

    /// Takes the checked download of segment `start` (`size` bytes) into the cache.
    pub fn put_whole(&self, start: u64, size: u64) -> Result<Arc<Mapping>> {
        let path = self.dir.join(segment_name(start));
        let download = self.download_path(start);
        std::fs::rename(&download, &path).ctx("caching", &download)?;
        let map = Arc::new(Mapping::open_read_only(&path, size)?);
        self.insert(
            start,
            Slot {
                map: Arc::clone(&map),
                held: Held::Whole(path),
                charged: size,
                used: 0,
            },
        );
        Ok(map)
    }

    /// Takes segment `start`'s object, mapped where it lies and checked, as its whole copy. It
    /// counts against the limit as a download would: evicting it unmaps it (once no reader holds
    /// it), so a reader never pins more deleted objects' space than the limit.
    pub fn put_mapped(&self, start: u64, map: Arc<Mapping>) -> Arc<Mapping> {
        self.insert(
            start,
            Slot {
                map: Arc::clone(&map),
                held: Held::InPlace,
                charged: map.len() as u64,
                used: 0,
            },
        );
        map
    }

    /// Writes `bytes` fetched at `at` (relative to the segment's start) into segment `start`'s
    /// sparse file, creating it at `size` bytes if need be.
    pub fn put_range(&self, start: u64, size: u64, at: u64, bytes: &[u8]) -> Result<Arc<Mapping>> {
        let mut inner = locked(&self.inner);
        inner.tick += 1;
        let tick = inner.tick;
        if let Some(slot) = inner.slots.get_mut(&start) {
            if let Held::Ranges { path, have, file } = &mut slot.held {
                // Only bytes not fetched before: a reader may hold a slice over those.
                let mut added = 0;
                for part in uncovered(have, at..at + bytes.len() as u64) {
                    let from = (part.start - at) as usize;
                    let to = (part.end - at) as usize;
                    file.write_all_at(&bytes[from..to], part.start)
                        .ctx("writing to the tier cache", &*path)?;
                    added += part.end - part.start;
                    have.push(part);
                }
                slot.charged += added;
                inner.bytes += added;
            }
            let slot = inner
                .slots
                .get_mut(&start)
                .ok_or_else(|| Error::Internal("cache slot gone".into()))?;
            slot.used = tick;
            let map = Arc::clone(&slot.map);
            drop(inner);
            self.evict(start);
            return Ok(map);
        }
        drop(inner);
        // A name of its own: two first reads of one segment must not truncate each other's
        // mapped file (the loser's slot is replaced, its file unlinked, its map still valid).
        let path = self
            .dir
            .join(format!("{}.{}.part", segment_name(start), random_id()));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .ctx("creating a tier cache file", &path)?;
        file.set_len(size).ctx("sizing a tier cache file", &path)?;
        file.write_all_at(bytes, at)
            .ctx("writing to the tier cache", &path)?;
        let map = Arc::new(Mapping::open_read_only(&path, size)?);
        let range = at..at + bytes.len() as u64;
        self.insert(
            start,
            Slot {
                map: Arc::clone(&map),
                held: Held::Ranges {
                    path,
                    have: vec![range],
                    file,
                },
                charged: bytes.len() as u64,
                used: 0,
            },
        );
        Ok(map)
    }

    fn insert(&self, start: u64, mut slot: Slot) {
        let mut inner = locked(&self.inner);
        inner.tick += 1;
        slot.used = inner.tick;
        inner.bytes += slot.charged;
        if let Some(old) = inner.slots.insert(start, slot) {
            inner.bytes -= old.charged;
            old.held.remove();
        }
        drop(inner);
        self.evict(start);
    }

    /// Deletes the least recently used files while over the limit, never `keep`.
    fn evict(&self, keep: u64) {
        let mut inner = locked(&self.inner);
        while inner.bytes > self.limit {
            let victim = inner
                .slots
                .iter()
                .filter(|(s, _)| **s != keep)
                .min_by_key(|(_, slot)| slot.used)
                .map(|(s, _)| *s);
            let Some(victim) = victim else { break };
            if let Some(slot) = inner.slots.remove(&victim) {
                inner.bytes -= slot.charged;
                slot.held.remove();
            }
        }
    }

    /// Forgets segment `start` (its object is gone or damaged).
    pub fn forget(&self, start: u64) {
        let mut inner = locked(&self.inner);
        if let Some(slot) = inner.slots.remove(&start) {
            inner.bytes -= slot.charged;
            slot.held.remove();
        }
    }
}

/// The parts of `r` that no range of `have` covers, in order.
fn uncovered(have: &[Range<u64>], r: Range<u64>) -> Vec<Range<u64>> {
    let mut overlapping: Vec<&Range<u64>> = have
        .iter()
        .filter(|h| h.end > r.start && h.start < r.end)
        .collect();
    overlapping.sort_by_key(|h| h.start);
    let mut out = Vec::new();
    let mut at = r.start;
    for h in overlapping {
        if h.start > at {
            out.push(at..h.start);
        }
        at = at.max(h.end);
    }
    if at < r.end {
        out.push(at..r.end);
    }
    out
}

impl Drop for Cache {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::uncovered;

    #[test]
    fn uncovered_is_what_no_fetched_range_holds() {
        assert_eq!(uncovered(&[], 5..10), vec![5..10]);
        assert_eq!(
            uncovered(&[0..20, 30..40], 5..10),
            Vec::<std::ops::Range<u64>>::new()
        );
        assert_eq!(uncovered(&[0..6, 8..9], 5..10), vec![6..8, 9..10]);
        assert_eq!(uncovered(&[7..8, 0..3], 5..10), vec![5..7, 8..10]);
        assert_eq!(
            uncovered(&[0..5, 5..10], 0..10),
            Vec::<std::ops::Range<u64>>::new()
        );
    }
}
