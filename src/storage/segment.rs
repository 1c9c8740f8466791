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
//!
//! A segment also carries what is known of its record count ([`Counted`]): how many records
//! start below a position. The writer raises it as it appends, recovery and a follower's view
//! as they walk new records, and `storage::counts` when it walks the rest or reads the counts a
//! writer recorded (`rmqlog.counts`). Every value it holds is true; a later one only reaches
//! further.

use std::fs::OpenOptions;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use crate::error::{Error, IoContext, Result};
use crate::storage::boundaries::{self, Boundaries, FileId, FileKey};
pub use crate::storage::mapping::Mapping;
use crate::storage::record::{decode, Header, Slot};
use crate::sync::locked;
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

/// What is known of a segment's record count: `records` records start below position `upto`
/// (relative to the segment's start, a record boundary). `upto == size` is the whole segment's
/// count (its filler holds none). `(0, 0)` is always true.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counted {
    /// A record boundary, or the segment's size.
    pub upto: u64,
    /// Records starting below `upto`.
    pub records: u64,
}

/// Of two true counts, the one reaching further.
fn further(a: Counted, b: Counted) -> Counted {
    if a.upto >= b.upto {
        a
    } else {
        b
    }
}

/// Counts a segment keeps besides the one reaching furthest: where counts inside it were asked
/// for (consumers' positions), so that asking again walks nothing.
const MARKS: usize = 4;

/// What walks, recovery and recorded counts know of a segment's count: the pair reaching
/// furthest, and a few marks inside it.
#[derive(Debug, Default)]
struct Counts {
    known: Counted,
    marks: [Counted; MARKS],
    next_mark: usize,
}

/// The count the writer keeps of the segment it appends to: stored only by the thread holding
/// the writer's cursor, read by any (a seqlock: an append batch stores four words and takes no
/// lock; a reader retries while a store is under way).
#[derive(Debug, Default)]
struct Appended {
    /// Odd while a store is under way.
    seq: AtomicU64,
    upto: AtomicU64,
    records: AtomicU64,
}

impl Appended {
    fn load(&self) -> Counted {
        loop {
            let seq = self.seq.load(Ordering::Acquire);
            let c = Counted {
                upto: self.upto.load(Ordering::Relaxed),
                records: self.records.load(Ordering::Relaxed),
            };
            fence(Ordering::Acquire);
            if seq & 1 == 0 && self.seq.load(Ordering::Relaxed) == seq {
                return c;
            }
            std::hint::spin_loop();
        }
    }

    /// The count as the one thread that stores it sees it (no retry: nothing else stores).
    #[inline]
    fn own(&self) -> Counted {
        Counted {
            upto: self.upto.load(Ordering::Relaxed),
            records: self.records.load(Ordering::Relaxed),
        }
    }

    /// One thread at a time: the writer's (under its cursor), or an open before it has one.
    #[inline]
    fn store(&self, c: Counted) {
        let seq = self.seq.load(Ordering::Relaxed);
        self.seq.store(seq + 1, Ordering::Relaxed);
        fence(Ordering::Release);
        self.upto.store(c.upto, Ordering::Relaxed);
        self.records.store(c.records, Ordering::Relaxed);
        self.seq.store(seq + 2, Ordering::Release);
    }
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
    /// The identity of its file when it was mapped (a local file's).
    file: OnceLock<FileId>,
    /// Its known record starts (a local file's, once it holds a record).
    boundaries: OnceLock<Arc<Boundaries>>,
    /// Its record count as far as it is known: the writer's (no lock per append) and what
    /// anything else learnt (a walk holds the mutex only to read or store a pair).
    appended: Appended,
    count: Mutex<Counts>,
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
            file: OnceLock::new(),
            boundaries: OnceLock::new(),
            appended: Appended::default(),
            count: Mutex::new(Counts::default()),
        }
    }

    /// A segment whose only copy is `entry` in `tier`.
    pub(crate) fn remote(entry: Entry, tier: Arc<Tier>) -> Segment {
        let url = PathBuf::from(tier.object_url(entry.start));
        let mut s = Segment::new(entry.start, entry.size, url, usize::MAX, false);
        s.written = AtomicU64::new(entry.written);
        s.place = Place::Remote(tier);
        s.set_remote_copy(entry);
        s
    }

    /// A hole standing for offsets `[start, start + size)` that lived in the lost directory
    /// `dir_path` (opened with `accept_lost`).
    pub fn hole(start: u64, size: u64, dir_path: PathBuf) -> Segment {
        let mut s = Segment::new(start, size, dir_path, usize::MAX, false);
        s.place = Place::Lost;
        s.written = AtomicU64::new(size);
        // Its records cannot be read: none is counted.
        s.note_counted(Counted {
            upto: size,
            records: 0,
        });
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

    /// Records that `entry` in the tier is a verified copy of this (local) segment; the count
    /// its upload made is the segment's.
    pub(crate) fn set_remote_copy(&self, entry: Entry) {
        if let Some(records) = entry.records.filter(|_| entry.size == self.size) {
            self.note_counted(Counted {
                upto: self.size,
                records,
            });
        }
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

    /// The same file as a writer's active segment: mapped for writing, as written and as
    /// counted as this one.
    pub(crate) fn writable_copy(&self) -> Segment {
        let seg = Segment::new(self.start, self.size, self.path.clone(), self.dir, true);
        seg.set_written(self.written());
        seg.note_counted(self.counted());
        seg
    }

    /// What is known of its record count, reaching furthest.
    pub fn counted(&self) -> Counted {
        let walked = locked(&self.count).known;
        further(self.appended.load(), walked)
    }

    /// Whether its whole count is known.
    pub fn is_counted(&self) -> bool {
        self.counted().upto == self.size
    }

    /// The known counts nearest `p`: the one reaching furthest at or below it (`(0, 0)` at
    /// worst), and the one reaching least at or above it, if any.
    pub(crate) fn counts_around(&self, p: u64) -> (Counted, Option<Counted>) {
        let appended = self.appended.load();
        let c = locked(&self.count);
        let all = || std::iter::once(c.known).chain(c.marks).chain([appended]);
        let below = all().filter(|k| k.upto <= p).max_by_key(|k| k.upto);
        let above = all().filter(|k| k.upto >= p).min_by_key(|k| k.upto);
        (below.unwrap_or_default(), above)
    }

    /// Takes `c` (true of this segment's bytes) if it reaches further than what is known.
    pub(crate) fn note_counted(&self, c: Counted) {
        let appended = self.appended.load().upto;
        let mut counts = locked(&self.count);
        if c.upto > counts.known.upto.max(appended) && c.upto <= self.size {
            counts.known = c;
        }
    }

    /// Keeps `c` (true of this segment's bytes): as the count reaching furthest if it does,
    /// else as a mark inside the segment.
    pub(crate) fn note_count_at(&self, c: Counted) {
        let appended = self.appended.load().upto;
        let mut counts = locked(&self.count);
        let furthest = counts.known.upto.max(appended);
        if c.upto > self.size || counts.marks.contains(&c) {
            return;
        }
        if c.upto > furthest {
            counts.known = c;
        } else if c.upto < furthest {
            let i = counts.next_mark;
            counts.marks[i] = c;
            counts.next_mark = (i + 1) % MARKS;
        }
    }

    /// The writer (holding its cursor) appended `records` records in `[from, to)`, published;
    /// with `sealed`, the segment is closed at `to` (its filler follows). Counted when what is
    /// known reaches `from` exactly: the writer's own count (two loads and four stores, no
    /// lock), else what a walk or recovery learnt (then the writer's count starts from it).
    /// Otherwise another shared writer's records lie before them, counted when asked for.
    #[inline]
    pub(crate) fn count_appended(&self, from: u64, to: u64, records: u64, sealed: bool) {
        // Only the cursor's holder stores the writer's count: it reads its own stores.
        let own = self.appended.own();
        if own.upto == from {
            self.appended.store(Counted {
                upto: if sealed { self.size } else { to },
                records: own.records + records,
            });
        } else {
            self.count_appended_after_others(from, to, records, sealed);
        }
    }

    /// [`Segment::count_appended`] when the writer's own count does not reach `from`.
    #[cold]
    fn count_appended_after_others(&self, from: u64, to: u64, records: u64, sealed: bool) {
        let walked = locked(&self.count).known;
        let base = match walked.upto {
            upto if upto == from => walked.records,
            // A walk counted these records already (they were published).
            upto if upto == to && sealed => walked.records.saturating_sub(records),
            _ => return,
        };
        self.appended.store(Counted {
            upto: if sealed { self.size } else { to },
            records: base + records,
        });
    }

    /// Forgets what is known of its count (it reached past the end recovery found). Before the
    /// open has a writer.
    pub(crate) fn forget_count(&self) {
        self.appended.store(Counted::default());
        *locked(&self.count) = Counts::default();
    }

    /// The copy of `other` (a moved segment, its remote copy) has its count.
    pub(crate) fn take_count(&self, other: &Segment) {
        if other.size == self.size && other.start == self.start {
            self.note_counted(other.counted());
        }
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
        let meta = file.metadata().ctx("reading length of", &self.path)?;
        let len = meta.len();
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
        self.file.get_or_init(|| FileId {
            dev: meta.dev(),
            ino: meta.ino(),
            ctime: meta.ctime(),
            ctime_nsec: meta.ctime_nsec(),
        });
        Ok(Arc::clone(m))
    }

    /// The header of the record at `at` (a record start in this segment, `map` its mapping), no
    /// CRC checked; none at the end of its records (a filler). A header that does not decode is
    /// corruption: walks over headers (recovery's, a follower's, a search's) stop there.
    pub(crate) fn header_at(&self, map: &Mapping, at: u64) -> Result<Option<Header>> {
        let rest = map.bytes((at - self.start) as usize, self.size as usize);
        match decode(rest, at, u32::MAX as usize) {
            Slot::Record(h) => Ok(Some(h)),
            Slot::EndOfSegment => Ok(None),
            other => Err(Error::corruption(
                Some(self.path.clone()),
                Some(at),
                format!(
                    "no valid record header while walking the segment: {}",
                    other.defect().unwrap_or("?")
                ),
            )),
        }
    }

    /// Its known record starts (`boundaries.rs`): a local segment's, once mapped (as `map`) and
    /// holding a record at its start, whose header is part of the key.
    pub(crate) fn boundaries(&self, map: &Mapping) -> Option<&Arc<Boundaries>> {
        if let Some(b) = self.boundaries.get() {
            return Some(b);
        }
        let file = *self.file.get()?;
        let Slot::Record(first) = decode(map.bytes(0, self.size as usize), self.start, usize::MAX)
        else {
            return None;
        };
        Some(self.boundaries.get_or_init(|| {
            boundaries::of_file(FileKey {
                file,
                size: self.size,
                start: self.start,
                first: (first.timestamp_ms, first.crc),
            })
        }))
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

#[cfg(test)]
mod tests {
    use super::*;

    fn seg() -> Segment {
        Segment::new(0, 4096, PathBuf::new(), 0, true)
    }

    fn c(upto: u64, records: u64) -> Counted {
        Counted { upto, records }
    }

    #[test]
    fn appends_count_from_what_is_known() {
        let s = seg();
        s.count_appended(0, 100, 3, false);
        s.count_appended(100, 250, 2, false);
        assert_eq!(s.counted(), c(250, 5));
        // Another writer's records in [250, 400): not counted until something walks them.
        s.count_appended(400, 500, 1, false);
        assert_eq!(s.counted(), c(250, 5));
        s.note_counted(c(400, 9));
        s.count_appended(400, 500, 1, false);
        assert_eq!(s.counted(), c(500, 10));
        // Sealed at 600: the whole segment's count.
        s.count_appended(500, 600, 2, true);
        assert_eq!(s.counted(), c(4096, 12));
        assert!(s.is_counted());
        // A walk that counted a sealing batch already: the count is whole all the same.
        let t = seg();
        t.note_counted(c(300, 4));
        t.count_appended(200, 300, 1, true);
        assert_eq!(t.counted(), c(4096, 4));
    }

    #[test]
    fn marks_answer_counts_inside() {
        let s = seg();
        s.count_appended(0, 1000, 10, false);
        s.note_count_at(c(500, 6));
        s.note_count_at(c(2000, 20)); // further: the count reaching furthest
        assert_eq!(s.counts_around(700), (c(500, 6), Some(c(1000, 10))));
        assert_eq!(s.counts_around(2500), (c(2000, 20), None));
        s.forget_count();
        assert_eq!(s.counts_around(700), (Counted::default(), None));
    }

    #[test]
    fn a_reader_never_sees_half_a_store() {
        let s = Arc::new(seg());
        let writer = {
            let s = Arc::clone(&s);
            std::thread::spawn(move || {
                for k in 1..200_000u64 {
                    s.appended.store(c(k * 7, k));
                }
            })
        };
        while !writer.is_finished() {
            let got = s.appended.load();
            assert_eq!(got.upto, got.records * 7, "{got:?}");
        }
        writer.join().unwrap();
    }
}
