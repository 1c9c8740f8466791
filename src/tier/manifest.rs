//! The manifest: which segments are in the object store, and the log's head there.
//!
//! Every change writes a new object `manifest/<version, 20 digits>.json`, then the pointer
//! `manifest/CURRENT` (the version, in decimal). A reader follows the pointer, so it never sees a
//! segment object before it is listed, and never a listed one that was not verified first: an
//! upload interrupted anywhere leaves the pointer at the old version. The writer also keeps a
//! copy in each directory of the store (`rmqlog.tier`, written atomically), so opening and
//! following a local store never need the network.

// Without the feature `tier` only the types are used (a segment's remote copy, none ever made).
#![cfg_attr(not(feature = "tier"), allow(dead_code))]

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::storage::fs::{atomic_write, parse_segment_name, segment_name};
use crate::storage::record::HEADER_LEN;

/// Name of the local copy of the manifest, in every directory of the store.
pub(crate) const LOCAL_COPY: &str = "rmqlog.tier";
const FORMAT: u32 = 1;

/// One segment in the object store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// Start offset: the object's name.
    pub start: u64,
    /// Length of the object (the segment file's length).
    pub size: u64,
    /// End of the segment's records and filler, relative to `start`.
    pub written: u64,
    /// CRC32C (Castagnoli) of the whole object.
    pub crc32c: u32,
    /// When the segment was last written (its file's mtime), in ms since the epoch: its age for
    /// retention.
    pub modified_ms: u64,
    /// Where records start, relative to `start`: the first record at or after each multiple of
    /// [`SPLIT_EVERY`] past the first, so a reader can split the segment into byte ranges
    /// without reading it. Absent from entries written before it existed (such a segment is read
    /// whole); a reader that predates it ignores it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub splits: Vec<u64>,
    /// How many records the segment holds, counted by the upload's walk of its headers (for
    /// `len()` without reading the object). Absent from entries written before it existed (such
    /// a segment is counted by reading it); a reader that predates it ignores it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub records: Option<u64>,
}

/// The spacing of a remote segment's [`Entry::splits`]: a 1 GiB segment has 32.
pub const SPLIT_EVERY: u64 = 32 << 20;

impl Entry {
    /// One past the last offset the segment can hold.
    pub fn end(&self) -> u64 {
        self.start + self.size
    }

    /// The last known record start at or before `at` (relative): a split, or the segment's
    /// start.
    pub fn split_at_or_before(&self, at: u64) -> u64 {
        let i = self.splits.partition_point(|&s| s <= at);
        i.checked_sub(1).map_or(0, |i| self.splits[i])
    }

    /// What makes the entry unusable without reading its object, if anything.
    fn defect(&self) -> Option<String> {
        if self.written > self.size {
            return Some(format!(
                "its records end at {}, past its {} bytes",
                self.written, self.size
            ));
        }
        if let Some(n) = self
            .records
            .filter(|&n| n > self.written / HEADER_LEN as u64)
        {
            return Some(format!(
                "it counts {n} records in {} bytes, more than {HEADER_LEN}-byte headers fit",
                self.written
            ));
        }
        let increasing = self.splits.first() != Some(&0)
            && self.splits.last().is_none_or(|&s| s < self.written)
            && self.splits.windows(2).all(|w| w[0] < w[1]);
        (!increasing).then(|| {
            format!(
                "its {} splits are not increasing offsets inside its records (0 < split < {})",
                self.splits.len(),
                self.written
            )
        })
    }

    /// Whether a record is known to start at `at` (relative), or the records end there.
    pub fn is_boundary(&self, at: u64) -> bool {
        at == 0 || at >= self.written || self.splits.binary_search(&at).is_ok()
    }
}

/// The remote part of one log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    pub format: u32,
    /// The store this tier belongs to: another store's tier is refused.
    pub store_id: String,
    /// Incremented on every change; 0 for a tier that holds nothing yet.
    pub version: u64,
    /// First offset of the log (remote retention moves it).
    pub min_offset: u64,
    /// The segments, in offset order, each with a verified object.
    pub segments: Vec<Entry>,
}

impl Manifest {
    pub fn empty(store_id: &str) -> Manifest {
        Manifest {
            format: FORMAT,
            store_id: store_id.to_string(),
            version: 0,
            min_offset: 0,
            segments: Vec::new(),
        }
    }

    /// The entry of the segment starting at `start`.
    pub fn get(&self, start: u64) -> Option<&Entry> {
        self.segments
            .binary_search_by_key(&start, |e| e.start)
            .ok()
            .map(|i| &self.segments[i])
    }

    /// The next version, with `entry` added (or replacing the entry of the same start).
    pub fn with(&self, entry: Entry) -> Manifest {
        let mut next = self.clone();
        next.version += 1;
        match next
            .segments
            .binary_search_by_key(&entry.start, |e| e.start)
        {
            Ok(i) => next.segments[i] = entry,
            Err(i) => next.segments.insert(i, entry),
        }
        next
    }

    /// The next version, with the head moved to `min` and the entries wholly below it dropped;
    /// returns them too (their objects may go once this version is current).
    pub fn without_head(&self, min: u64) -> (Manifest, Vec<Entry>) {
        let mut next = self.clone();
        next.version += 1;
        next.min_offset = next.min_offset.max(min);
        let keep = next.segments.partition_point(|e| e.end() <= min);
        let gone = next.segments.drain(..keep).collect();
        (next, gone)
    }

    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut v = serde_json::to_vec_pretty(self).unwrap_or_default();
        v.push(b'\n');
        v
    }

    pub(crate) fn decode(bytes: &[u8], what: &str) -> Result<Manifest> {
        let m: Manifest = serde_json::from_slice(bytes)
            .map_err(|e| Error::corruption(None, None, format!("manifest {what}: {e}")))?;
        if m.format != FORMAT {
            return Err(Error::corruption(
                None,
                None,
                format!(
                    "manifest {what} has format {}; this rmqlog reads {FORMAT}",
                    m.format
                ),
            ));
        }
        // What a reader can check without reading the objects, it checks here: it maps `size`
        // bytes and reads up to `written`, and trusts the splits as record starts.
        if let Some((e, defect)) = m.segments.iter().find_map(|e| Some((e, e.defect()?))) {
            return Err(Error::corruption(
                None,
                Some(e.start),
                format!("manifest {what}: segment {}: {defect}", e.start),
            ));
        }
        Ok(m)
    }
}

/// The name of a segment's object.
pub(crate) fn object_name(start: u64) -> String {
    segment_name(start)
}

pub(crate) fn version_name(version: u64) -> String {
    format!("manifest/{}.json", segment_name(version))
}

/// What the name of an object under the prefix says it is.
pub(crate) enum Named {
    /// A segment's object, by its start offset.
    Segment(u64),
    /// A manifest version.
    Version(u64),
    Other,
}

/// Classifies an object by its name relative to the prefix (`00000000000000000000`,
/// `manifest/00000000000000000003.json`).
pub(crate) fn named(relative: &str) -> Named {
    if let Some(v) = relative
        .strip_prefix("manifest/")
        .and_then(|n| n.strip_suffix(".json"))
        .and_then(parse_segment_name)
    {
        return Named::Version(v);
    }
    match parse_segment_name(relative) {
        Some(start) => Named::Segment(start),
        None => Named::Other,
    }
}

/// The newest local copy among `dirs`, if any.
pub(crate) fn load_local(dirs: &[PathBuf]) -> Option<Manifest> {
    let mut newest: Option<Manifest> = None;
    for dir in dirs {
        let path = dir.join(LOCAL_COPY);
        let Ok(bytes) = std::fs::read(&path) else {
            continue;
        };
        match Manifest::decode(&bytes, &path.display().to_string()) {
            Ok(m) if newest.as_ref().is_none_or(|n| n.version < m.version) => newest = Some(m),
            Ok(_) => {}
            Err(e) => log::warn!("ignoring {}: {e}", path.display()),
        }
    }
    newest
}

/// Writes the local copy into each of `dirs` (atomically); fails only if no directory took it.
pub(crate) fn save_local(dirs: &[PathBuf], m: &Manifest, mode: u32) -> Result<()> {
    let bytes = m.encode();
    let mut first_error = None;
    let mut written = 0;
    for dir in dirs {
        match atomic_write(&dir.join(LOCAL_COPY), &bytes, mode) {
            Ok(()) => written += 1,
            Err(e) => {
                log::warn!("tier manifest copy not updated in {}: {e}", dir.display());
                first_error.get_or_insert(e);
            }
        }
    }
    match first_error {
        Some(e) if written == 0 => Err(e),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_splits(splits: Vec<u64>) -> Vec<u8> {
        let mut m = Manifest::empty("id");
        m.segments.push(Entry {
            start: 0,
            size: 1000,
            written: 900,
            crc32c: 0,
            modified_ms: 0,
            splits,
            records: None,
        });
        m.encode()
    }

    #[test]
    fn splits_must_be_increasing_offsets_inside_the_records() {
        for good in [vec![], vec![1], vec![10, 20, 899]] {
            assert!(
                Manifest::decode(&with_splits(good.clone()), "m").is_ok(),
                "{good:?}"
            );
        }
        for bad in [
            vec![0],
            vec![20, 10],
            vec![10, 10],
            vec![900],
            vec![10, 1 << 40],
        ] {
            let err = Manifest::decode(&with_splits(bad.clone()), "m").unwrap_err();
            assert!(
                err.to_string().contains("not increasing offsets"),
                "{bad:?}: {err}"
            );
        }
    }

    #[test]
    fn records_past_the_object_are_refused() {
        let mut m: Manifest = serde_json::from_slice(&with_splits(vec![])).unwrap();
        m.segments[0].written = 1001;
        let err = Manifest::decode(&m.encode(), "m").unwrap_err();
        assert!(err.to_string().contains("past its 1000 bytes"), "{err}");
    }

    #[test]
    fn a_manifest_without_splits_reads_and_writes_none() {
        let bytes = with_splits(vec![]);
        assert!(!String::from_utf8_lossy(&bytes).contains("splits"));
        let m = Manifest::decode(&bytes, "m").unwrap();
        assert_eq!(m.segments[0].splits, Vec::<u64>::new());
    }
}
