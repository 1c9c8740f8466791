//! One segment file and its memory map.
//!
//! Invariants that make the maps safe to hand out:
//! - a segment file is created at full length with its blocks allocated before it is mapped, and
//!   this crate never truncates or shrinks a file (recovery writes zeros instead), so no access
//!   through a map can fault past the end of the file;
//! - bytes below a segment's published end are never written again while the segment is live;
//!   the only writer (serialised by the writer mutex) writes above it, then publishes;
//! - a [`Mapping`] is unmapped only when its last `Arc` goes, so a slice handed to a reader stays
//!   valid after the log is closed or the file is deleted.

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use crate::error::{Error, IoContext, Result};
pub use crate::storage::mapping::Mapping;
use crate::tier::{Entry, Manifest, Tier};

/// The largest offset a log holds: `i64::MAX`. Offsets are unsigned in the file format, but signed
/// 64-bit integers in Arrow, Spark and Java, so no segment may end past this; a store whose files
/// would is refused at open, and an append that would need such a segment fails.
pub const MAX_OFFSET: u64 = i64::MAX as u64;

/// Where a segment's bytes are.
#[derive(Debug)]
enum Place {
    /// A file in one of the store's directories.
    File,
    /// A hole left by a lost directory: no file, reads fail naming the directory.
    Lost,
    /// Only in the remote tier: read through its cache.
    Remote(Arc<Tier>),
}

/// One fixed-size segment file named by its start offset.
#[derive(Debug)]
pub struct Segment {
    start: u64,
    size: u64,
    path: PathBuf,
    dir: usize,
    writable: bool,
    place: Place,
    /// The verified copy in the remote tier, once there is one (always, for a remote segment).
    remote: OnceLock<Entry>,
    /// End of the records in this segment, relative to `start` (the filler is not counted).
    written: AtomicU64,
    map: OnceLock<Arc<Mapping>>,
}

impl Segment {
    /// A segment of `size` bytes at `start`, stored at `path` in directory number `dir`; mapped
    /// lazily, for writing only if `writable` (the writer's active segment).
    pub fn new(start: u64, size: u64, path: PathBuf, dir: usize, writable: bool) -> Segment {
        Segment {
            start,
            size,
            path,
            dir,
            writable,
            place: Place::File,
            remote: OnceLock::new(),
            written: AtomicU64::new(0),
            map: OnceLock::new(),
        }
    }

    /// A segment whose only copy is `entry` in `tier`.
    pub(crate) fn remote(entry: Entry, tier: Arc<Tier>) -> Segment {
        let url = PathBuf::from(tier.object_url(entry.start));
        let mut s = Segment::new(entry.start, entry.size, url, usize::MAX, false);
        s.written = AtomicU64::new(entry.written);
        s.place = Place::Remote(tier);
        let _ = s.remote.set(entry);
        s
    }

    /// A hole standing for offsets `[start, start + size)` that lived in the lost directory
    /// `dir_path` (opened with `accept_lost`).
    pub fn hole(start: u64, size: u64, dir_path: PathBuf) -> Segment {
        let mut s = Segment::new(start, size, dir_path, usize::MAX, false);
        s.place = Place::Lost;
        s.written = AtomicU64::new(size);
        s
    }

    /// Whether this is a hole left by a lost directory.
    pub fn is_lost(&self) -> bool {
        matches!(self.place, Place::Lost)
    }

    /// Whether the segment's bytes are in a file of the store (not a hole, not remote-only).
    pub fn is_local(&self) -> bool {
        matches!(self.place, Place::File)
    }

    /// Whether the segment's only copy is in the remote tier.
    pub fn is_remote(&self) -> bool {
        matches!(self.place, Place::Remote(_))
    }

    /// The segment's verified copy in the remote tier, if it has one.
    pub(crate) fn remote_copy(&self) -> Option<&Entry> {
        self.remote.get()
    }

    /// The tier's copy: this open's own record of one, or the entry in the tier's manifest `m`
    /// (which another open of the store may have shipped to first).
    pub(crate) fn remote_in<'a>(&'a self, m: Option<&'a Manifest>) -> Option<&'a Entry> {
        self.remote_copy()
            .or_else(|| m.and_then(|m| m.get(self.start())))
    }

    /// Whether the tier holds a copy (see [`Segment::remote_in`]).
    pub(crate) fn is_remote_in(&self, m: Option<&Manifest>) -> bool {
        self.remote_in(m).is_some()
    }

    /// Records that `entry` in the tier is a verified copy of this (local) segment.
    pub(crate) fn set_remote_copy(&self, entry: Entry) {
        let _ = self.remote.set(entry);
    }

    /// The segment's map with the record at `offset` readable: for a remote segment only that
    /// record's bytes are fetched (a range read), unless the segment is cached whole.
    pub fn map_for(&self, offset: u64) -> Result<Arc<Mapping>> {
        match (&self.place, self.remote.get()) {
            (Place::Remote(tier), Some(e)) => tier.map_range(e, offset),
            _ => self.map(),
        }
    }

    /// First physical offset of the segment.
    pub fn start(&self) -> u64 {
        self.start
    }

    /// Length of the segment file.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// One past the last physical offset the segment can hold.
    pub fn end(&self) -> u64 {
        self.start + self.size
    }

    /// Whether `offset` falls inside the segment.
    pub fn contains(&self, offset: u64) -> bool {
        self.start <= offset && offset < self.end()
    }

    /// Full path of the file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Index of the directory holding the file, in the store's directory list.
    pub fn dir(&self) -> usize {
        self.dir
    }

    /// End of the records, relative to the start.
    pub fn written(&self) -> u64 {
        self.written.load(Ordering::Acquire)
    }

    pub(crate) fn set_written(&self, pos: u64) {
        self.written.store(pos, Ordering::Release);
    }

    /// Raises the end of the records to `pos` (never lowers it).
    pub(crate) fn advance_written(&self, pos: u64) {
        self.written.fetch_max(pos, Ordering::AcqRel);
    }

    /// The same file as a writer's active segment: mapped for writing, as written as this one.
    pub(crate) fn writable_copy(&self) -> Segment {
        let seg = Segment::new(self.start, self.size, self.path.clone(), self.dir, true);
        seg.set_written(self.written());
        seg
    }

    /// Whether it maps for writing (the writer's active segment).
    pub fn is_writable(&self) -> bool {
        self.writable
    }

    /// The segment's map if it is mapped already (no reference count touched).
    pub fn mapped(&self) -> Option<&Arc<Mapping>> {
        self.map.get()
    }

    /// The segment's map with the records starting in `[from, to)` readable: for a remote
    /// segment that a scan reads only part of, those records' bytes are fetched (one range
    /// read, checked by the records' own CRCs); otherwise as [`Segment::map`].
    pub fn map_span(&self, from: u64, to: u64) -> Result<Arc<Mapping>> {
        match (&self.place, self.remote.get()) {
            (Place::Remote(tier), Some(e)) if !self.spans_whole(e, from, to) => {
                tier.map_span(e, from.max(self.start) - self.start, to - self.start)
            }
            _ => self.map(),
        }
    }

    /// Whether `[from, to)` holds every record of the remote segment `e`.
    fn spans_whole(&self, e: &Entry, from: u64, to: u64) -> bool {
        from <= self.start && to >= self.start + e.written
    }

    /// Starts downloading a remote-only segment into the tier's cache in the background, when a
    /// scan will read the whole of it next (up to `to`); nothing for any other.
    pub(crate) fn prefetch(&self, to: u64) {
        if let (Place::Remote(tier), Some(e)) = (&self.place, self.remote.get()) {
            if self.spans_whole(e, self.start, to) {
                tier.prefetch(e);
            }
        }
    }

    /// The last offset at or before `offset` where a record is known to start: the segment's
    /// start or a split.
    pub(crate) fn split_at_or_before(&self, offset: u64) -> u64 {
        self.remote.get().map_or(self.start, |e| {
            self.start + e.split_at_or_before(offset.saturating_sub(self.start))
        })
    }

    /// The segment's map, created on first use; the file descriptor is closed once mapped.
    pub fn map(&self) -> Result<Arc<Mapping>> {
        if let Some(m) = self.map.get() {
            return Ok(Arc::clone(m));
        }
        if let (Place::Remote(tier), Some(e)) = (&self.place, self.remote.get()) {
            return tier.map_whole(e);
        }
        if self.is_lost() {
            return Err(Error::corruption(
                Some(self.path.clone()),
                Some(self.start),
                format!(
                    "offsets [{}, {}) were in the lost directory {} (opened with accept_lost)",
                    self.start,
                    self.end(),
                    self.path.display()
                ),
            ));
        }
        let file = OpenOptions::new()
            .read(true)
            .write(self.writable)
            .open(&self.path)
            .ctx("opening segment", &self.path)?;
        let len = file.metadata().ctx("reading length of", &self.path)?.len();
        if len != self.size {
            // Mapping past the end of a file would SIGBUS on access, and a longer file overlaps
            // the next segment (the listing took its length from the names): refuse both.
            return Err(Error::corruption(
                Some(self.path.clone()),
                Some(self.start),
                format!(
                    "segment file has length {len}, expected {} (a truncated or foreign file?)",
                    self.size
                ),
            ));
        }
        let map = Mapping::of_file(&file, self.size, self.writable, &self.path)?;
        let m = self.map.get_or_init(|| Arc::new(map));
        Ok(Arc::clone(m))
    }

    /// Makes bytes `[lo, hi)` of the file durable: through the map where it is writable (msync
    /// of the range), through the file otherwise (fdatasync). A map of a file opened read-only
    /// is no shared mapping to msync (the kernel syncs nothing), and the bytes may be dirty all
    /// the same: another process wrote them (a shared writer's records, a crashed writer's tail).
    pub fn sync(&self, lo: usize, hi: usize) -> Result<()> {
        if self.writable {
            let map = self.map()?;
            return map
                .flush(lo, hi)
                .map_err(|e| Error::io("syncing segment", &self.path, e));
        }
        let file = OpenOptions::new()
            .read(true)
            .open(&self.path)
            .ctx("opening segment", &self.path)?;
        file.sync_data().ctx("syncing segment", &self.path)
    }
}
