//! A segment's key index, `NAME.keys` beside the segment `NAME` (RocketMQ's IndexFile, per
//! segment): a hash table of the keys and message ids of the records in the segment, mapped,
//! written by whichever process appends (under the append lock) and read by every process without
//! a lock. Made with the segment's first record with a key or an id: a store without them has
//! none. A record with both has two entries; an id's hash is taken in another domain than a
//! key's ([`Needle`]), and every candidate is compared whole anyway.
//!
//! ```text
//! 0       8        16      20       24      28       32        40          48        64
//! +-------+--------+-------+--------+-------+--------+---------+-----------+---------+
//! | magic | start  | slots | capac. | flags | hdrcrc | entries | indexed_to| (zeros) |  header
//! +-------+--------+-------+--------+-------+--------+---------+-----------+---------+
//! slots x u32           head of each chain: entry number + 1, 0 for none
//! capacity x 16 bytes   entries: hash u32, next u32 (entry number + 1 of the older entry in the
//!                       chain, or 0), pos u64 (position in the segment, low 40 bits; a 24-bit
//!                       check of the entry in the high bits)
//! ```
//! Little-endian. `hdrcrc` is the CRC-32C of bytes 0..24; `flags` bit 0 says the index is complete
//! (the segment is sealed and every record is in it, synced). `entries` and `indexed_to` (every
//! record below this position is in the index) move forward only, with Release stores after the
//! entry and its slot; a reader takes them with Acquire and reads nothing past them.
//!
//! The index is a cache over the records, never an authority: a lookup walks the records from
//! `indexed_to` on, reads every candidate it names and compares its key, so a hash collision, a
//! stale entry (left by records that recovery cut) or a damaged one never yields a wrong record.
//! A failed entry check makes a lookup walk the whole segment. The file is sparse: its header page
//! is allocated when it is made and the rest chunk by chunk as entries come (`posix_fallocate`),
//! so a full disk stops the indexing (lookups walk what it missed), never faults a write.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::error::{IoContext, Result};
use crate::failpoint::fail_point;
use crate::storage::mapping::Mapping;
use crate::storage::props;
use crate::storage::record::{decode, Slot};

const MAGIC: &[u8; 8] = b"RMQLKEY1";
const HEADER: usize = 64;
const ENTRY: usize = 16;
/// Space is allocated in chunks of this many bytes as entries grow.
const CHUNK: u64 = 256 << 10;
const COMPLETE: u32 = 1;
const POS_BITS: u32 = 40;
const POS_MASK: u64 = (1 << POS_BITS) - 1;

/// The index file of the segment at `segment`.
pub fn path_of(segment: &Path) -> PathBuf {
    let mut name = segment.as_os_str().to_owned();
    name.push(".keys");
    PathBuf::from(name)
}

/// Removes the index of the segment at `segment`, if there is one (a segment deleted, moved or
/// never published).
pub fn remove_beside(segment: &Path) {
    let path = path_of(segment);
    match std::fs::remove_file(&path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => log::warn!("cannot remove {}: {e}", path.display()),
    }
}

/// The disk bytes the index of the segment at `segment` holds (0 without one).
pub fn allocated_beside(segment: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path_of(segment)).map_or(0, |m| m.blocks() * 512)
}

/// What a probe looks for: the records with a key, or with a message id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Needle<'a> {
    Key(&'a [u8]),
    Id(&'a [u8]),
}

impl Needle<'_> {
    /// The hash its entries carry, the same in every process and build.
    pub fn hash(self) -> u32 {
        fail_point!("key_index::collide", |_| 7);
        match self {
            Needle::Key(key) => crc32c::crc32c(key),
            // Seeded: a key and an id of the same bytes mostly fall in different chains.
            Needle::Id(id) => crc32c::crc32c_append(0x6d73_6769, id),
        }
    }

    /// Whether a record with this key and id is one it looks for.
    pub fn matches(self, key: Option<&[u8]>, id: Option<&[u8]>) -> bool {
        match self {
            Needle::Key(k) => key.is_some_and(|key| props::same(key, k)),
            Needle::Id(i) => id.is_some_and(|id| props::same(id, i)),
        }
    }
}

/// The table's shape for a segment of `segment_size` bytes: room for one entry per 128 bytes of
/// segment (a segment of smaller records indexes its first ones and leaves the rest to walks),
/// four entries per slot on average.
fn shape(segment_size: u64) -> (u32, u32) {
    let capacity = (segment_size / 128).clamp(64, u32::MAX as u64 / 2) as u32;
    let slots = (capacity / 4).next_power_of_two().max(16);
    (slots, capacity)
}

fn file_len(slots: u32, capacity: u32) -> u64 {
    HEADER as u64 + 4 * u64::from(slots) + ENTRY as u64 * u64::from(capacity)
}

/// Why an index cannot answer: the lookup walks the segment instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Damaged;

/// What [`KeyIndex::open`] found.
#[derive(Debug)]
pub enum Opened {
    Missing,
    /// A file that is not this segment's index (its header fails its checks).
    Damaged,
    Index(KeyIndex),
}

/// One segment's key index, mapped.
#[derive(Debug)]
pub struct KeyIndex {
    map: Mapping,
    file: Option<File>,
    path: PathBuf,
    slots: u32,
    capacity: u32,
    /// Bytes of the file allocated so far (the writer's view).
    allocated: u64,
    /// Growing it failed once (said once, not at every append).
    stopped: bool,
}

impl KeyIndex {
    /// Makes the index of the segment starting at `start` at `path` (an existing file is
    /// truncated: only for a path no other process maps).
    fn create(path: &Path, start: u64, segment_size: u64, mode: u32) -> Result<KeyIndex> {
        let (slots, capacity) = shape(segment_size);
        let len = file_len(slots, capacity);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .mode(mode)
            .open(path)
            .ctx("creating", path)?;
        file.set_len(len).ctx("sizing", path)?;
        let mut header = [0u8; HEADER];
        header[..8].copy_from_slice(MAGIC);
        header[8..16].copy_from_slice(&start.to_le_bytes());
        header[16..20].copy_from_slice(&slots.to_le_bytes());
        header[20..24].copy_from_slice(&capacity.to_le_bytes());
        let crc = crc32c::crc32c(&header[..24]);
        header[28..32].copy_from_slice(&crc.to_le_bytes());
        // Only the header is allocated: the slots and entries get theirs with the first entry
        // (a segment without keys costs one block). Holes read as zeros.
        allocate(&file, 0, HEADER as u64, path)?;
        std::os::unix::fs::FileExt::write_all_at(&file, &header, 0).ctx("writing", path)?;
        let map = Mapping::of_file(&file, len, true, path)?;
        Ok(KeyIndex {
            map,
            file: Some(file),
            path: path.to_path_buf(),
            slots,
            capacity,
            allocated: HEADER as u64,
            stopped: false,
        })
    }

    /// Opens the index at `path` of the segment starting at `start`, writable (for the
    /// appender) or not.
    pub fn open(path: &Path, start: u64, writable: bool) -> Result<Opened> {
        let file = match OpenOptions::new().read(true).write(writable).open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Opened::Missing),
            Err(e) => return Err(e).ctx("opening", path),
        };
        let mut header = [0u8; HEADER];
        if std::os::unix::fs::FileExt::read_exact_at(&file, &mut header, 0).is_err() {
            return Ok(Opened::Damaged);
        }
        let u32_at =
            |at: usize| u32::from_le_bytes(header[at..at + 4].try_into().unwrap_or_default());
        let (slots, capacity) = (u32_at(16), u32_at(20));
        let len = file.metadata().ctx("reading length of", path)?.len();
        let sound = &header[..8] == MAGIC
            && header[8..16] == start.to_le_bytes()
            && crc32c::crc32c(&header[..24]) == u32_at(28)
            && slots.is_power_of_two()
            && capacity <= u32::MAX / 2
            && len == file_len(slots, capacity);
        if !sound {
            return Ok(Opened::Damaged);
        }
        let map = Mapping::of_file(&file, len, writable, path)?;
        let mut index = KeyIndex {
            map,
            file: writable.then_some(file),
            path: path.to_path_buf(),
            slots,
            capacity,
            allocated: HEADER as u64,
            stopped: false,
        };
        // Allocated at least up to the last entry (the next insert allocates on from there;
        // allocating an allocated range again changes nothing).
        if index.entries() > 0 {
            index.allocated = index.entry_at(index.entries());
        }
        Ok(Opened::Index(index))
    }

    fn word(&self, at: usize) -> &AtomicU32 {
        debug_assert!(at.is_multiple_of(4) && at + 4 <= self.map.len());
        // SAFETY: `at` is 4-aligned (the map is page-aligned) and inside the map, which lives as
        // long as `self`; every process touches these words only through atomics.
        unsafe { AtomicU32::from_ptr(self.map.as_ptr().add(at) as *mut u32) }
    }

    fn dword(&self, at: usize) -> &AtomicU64 {
        debug_assert!(at.is_multiple_of(8) && at + 8 <= self.map.len());
        // SAFETY: as for `word`, 8-aligned.
        unsafe { AtomicU64::from_ptr(self.map.as_ptr().add(at) as *mut u64) }
    }

    /// Entries in the index.
    pub fn entries(&self) -> u32 {
        self.word(32).load(Ordering::Acquire).min(self.capacity)
    }

    /// Every record below this position of the segment is in the index.
    pub fn indexed_to(&self) -> u64 {
        self.dword(40).load(Ordering::Acquire)
    }

    /// Whether the index is complete and synced (its segment sealed).
    pub fn is_complete(&self) -> bool {
        self.word(24).load(Ordering::Acquire) & COMPLETE != 0
    }

    fn slot_at(&self, slot: u32) -> usize {
        HEADER + 4 * slot as usize
    }

    fn entry_at(&self, n: u32) -> u64 {
        HEADER as u64 + 4 * u64::from(self.slots) + ENTRY as u64 * u64::from(n)
    }

    fn check(hash: u32, next: u32, pos: u64, n: u32) -> u64 {
        let mut b = [0u8; 20];
        b[..4].copy_from_slice(&hash.to_le_bytes());
        b[4..8].copy_from_slice(&next.to_le_bytes());
        b[8..16].copy_from_slice(&pos.to_le_bytes());
        b[16..].copy_from_slice(&n.to_le_bytes());
        u64::from(crc32c::crc32c(&b) & 0xFF_FFFF)
    }

    /// Positions of the entries whose hash is `hash`, newest first, below `limit`.
    /// `Err(Damaged)` when an entry fails its check or a link points where no entry can be.
    pub fn probe(&self, hash: u32, limit: u64) -> std::result::Result<Vec<u64>, Damaged> {
        let entries = self.entries();
        let slot = hash & (self.slots - 1);
        let mut next = self.word(self.slot_at(slot)).load(Ordering::Acquire);
        let mut found = Vec::new();
        let mut below = entries;
        while next != 0 {
            let n = next - 1;
            // Links go to older entries only: a chain ends, whatever the bytes.
            if n >= below {
                return Err(Damaged);
            }
            below = n;
            let at = self.entry_at(n) as usize;
            let h = self.word(at).load(Ordering::Relaxed);
            let link = self.word(at + 4).load(Ordering::Relaxed);
            let packed = self.dword(at + 8).load(Ordering::Relaxed);
            let pos = packed & POS_MASK;
            if packed >> POS_BITS != KeyIndex::check(h, link, pos, n) {
                return Err(Damaged);
            }
            if h & (self.slots - 1) != slot {
                return Err(Damaged); // a link into another slot's chain
            }
            if h == hash && pos < limit {
                found.push(pos);
            }
            next = link;
        }
        Ok(found)
    }

    /// Whether every entry passes its check and links only to older ones (a writer checks an
    /// index it takes over: a power loss may have dropped some of its pages).
    pub fn is_sound(&self) -> bool {
        let n = self.entries();
        (0..n).all(|i| {
            let at = self.entry_at(i) as usize;
            let h = self.word(at).load(Ordering::Relaxed);
            let link = self.word(at + 4).load(Ordering::Relaxed);
            let packed = self.dword(at + 8).load(Ordering::Relaxed);
            link <= i && packed >> POS_BITS == KeyIndex::check(h, link, packed & POS_MASK, i)
        }) && (0..self.slots).all(|s| self.word(self.slot_at(s)).load(Ordering::Relaxed) <= n)
    }

    /// Sets every slot to its newest entry, from the entries alone (a writer taking an index
    /// over: a power loss may have kept an entry's page and lost its slot's). Entries are written
    /// once, each with the link it was given, so the chains come back whole.
    pub fn relink(&self) {
        let mut heads = vec![0u32; self.slots as usize];
        for i in 0..self.entries() {
            let h = self.word(self.entry_at(i) as usize).load(Ordering::Relaxed);
            heads[(h & (self.slots - 1)) as usize] = i + 1;
        }
        for (s, head) in heads.into_iter().enumerate() {
            let w = self.word(self.slot_at(s as u32));
            if w.load(Ordering::Relaxed) != head {
                w.store(head, Ordering::Release);
            }
        }
    }

    /// Adds the record at `pos` whose key hashes to `hash` (the caller holds the append lock).
    /// False when the index is full or its space could not be allocated: indexing stops there.
    fn insert(&mut self, hash: u32, pos: u64) -> bool {
        let n = self.word(32).load(Ordering::Relaxed);
        if n >= self.capacity || pos > POS_MASK {
            return false;
        }
        let end = self.entry_at(n) + ENTRY as u64;
        if end > self.allocated {
            let Some(file) = &self.file else { return false };
            let to = (end.div_ceil(CHUNK) * CHUNK).min(self.map.len() as u64);
            if let Err(e) = allocate(file, self.allocated, to - self.allocated, &self.path) {
                if !self.stopped {
                    log::warn!("key index {} stops growing: {e}", self.path.display());
                    self.stopped = true;
                }
                return false;
            }
            self.allocated = to;
        }
        let slot = self.slot_at(hash & (self.slots - 1));
        let head = self.word(slot).load(Ordering::Relaxed);
        let at = self.entry_at(n) as usize;
        self.word(at).store(hash, Ordering::Relaxed);
        self.word(at + 4).store(head, Ordering::Relaxed);
        let packed = pos | KeyIndex::check(hash, head, pos, n) << POS_BITS;
        self.dword(at + 8).store(packed, Ordering::Relaxed);
        self.word(slot).store(n + 1, Ordering::Release);
        self.word(32).store(n + 1, Ordering::Release);
        true
    }

    fn set_indexed_to(&self, pos: u64) {
        self.dword(40).store(pos, Ordering::Release);
    }

    /// Indexes the records of `segment` (the segment's bytes, from its start) in
    /// `[indexed_to, to)`: walked by their headers. `[fresh, to)` are records just published
    /// (record boundaries both); the caller holds the append lock. Returns false when the index
    /// could not take them all (full, or a header it could not read): it then stays at the first
    /// one it missed.
    pub fn catch_up(&mut self, segment: &[u8], start: u64, fresh: u64, to: u64) -> bool {
        let mut at = self.indexed_to();
        if at > fresh {
            // Past records just written: recovery cut records it had indexed, and these took
            // their place. Their entries stay in the chains (lookups compare every candidate's
            // key); the new ones go on top.
            self.set_indexed_to(fresh);
            at = fresh;
        }
        let mut ok = true;
        let indexed = walk_props(segment, start, at, to, |pos, key, id| {
            if let Some(key) = key {
                ok = ok && self.insert(Needle::Key(key).hash(), pos);
            }
            if let Some(id) = id {
                ok = ok && self.insert(Needle::Id(id).hash(), pos);
            }
            ok
        });
        self.set_indexed_to(indexed);
        ok && indexed == to
    }

    /// Marks the index complete (its segment is sealed and every record is in it), after syncing
    /// it; the caller has caught it up to the segment's end.
    pub fn complete(&self) -> Result<()> {
        self.map
            .flush(0, self.map.len())
            .ctx("syncing", &self.path)?;
        self.word(24).fetch_or(COMPLETE, Ordering::AcqRel);
        self.map.flush(0, HEADER).ctx("syncing", &self.path)
    }
}

/// Makes an index at `path` in place of whatever was there: made under a temporary name, then
/// renamed, so that a process mapping the old file keeps valid pages (a truncation in place
/// would fault its reads). `fill` indexes the records before the rename.
fn replace(
    path: &Path,
    start: u64,
    segment_size: u64,
    mode: u32,
    fill: impl FnOnce(&mut KeyIndex) -> Result<()>,
) -> Result<KeyIndex> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".{}.tmp", std::process::id()));
    let tmp = PathBuf::from(tmp);
    let made = (|| {
        let mut ix = KeyIndex::create(&tmp, start, segment_size, mode)?;
        fill(&mut ix)?;
        std::fs::rename(&tmp, path).ctx("renaming", &tmp)?;
        ix.path = path.to_path_buf();
        Ok(ix)
    })();
    if made.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    made
}

/// A new, empty index at `path` for the segment at `start` (a writer's, for the segment it
/// appends to), in place of a missing or damaged one.
pub fn make(path: &Path, start: u64, segment_size: u64, mode: u32) -> Result<KeyIndex> {
    replace(path, start, segment_size, mode, |_| Ok(()))
}

/// Builds the complete index of a sealed segment (`segment`: its bytes) at `path`, synced.
pub fn build(
    path: &Path,
    start: u64,
    segment_size: u64,
    mode: u32,
    segment: &[u8],
) -> Result<KeyIndex> {
    replace(path, start, segment_size, mode, |ix| {
        ix.catch_up(segment, start, 0, segment.len() as u64);
        ix.complete()
    })
}

fn allocate(file: &File, from: u64, len: u64, path: &Path) -> Result<()> {
    if len == 0 {
        return Ok(());
    }
    rustix::fs::fallocate(file, rustix::fs::FallocateFlags::empty(), from, len)
        .map_err(std::io::Error::from)
        .ctx("allocating", path)
}

/// Calls `f(pos, key, id)` for each record with a key or a message id of the segment bytes
/// `segment` (starting at offset `start`) in `[from, to)`, walking headers only, until `f` says
/// stop. Returns where the walk stopped: `to`, or the first record it could not read or that `f`
/// refused.
pub fn walk_props(
    segment: &[u8],
    start: u64,
    from: u64,
    to: u64,
    mut f: impl FnMut(u64, Option<&[u8]>, Option<&[u8]>) -> bool,
) -> u64 {
    let mut at = from;
    let to = to.min(segment.len() as u64);
    while at < to {
        let rest = &segment[at as usize..to as usize];
        let Slot::Record(h) = decode(rest, start + at, u32::MAX as usize) else {
            return at;
        };
        if h.props_len > 0 {
            let block = &rest[crate::storage::record::HEADER_LEN..h.body_from()];
            match props::key_and_id(block) {
                Some((None, None)) => {}
                Some((key, id)) if !f(at, key, id) => return at,
                Some(_) => {}
                None => return at,
            }
        }
        at += u64::from(h.len);
    }
    at
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_chain_by_hash_and_a_flipped_bit_is_damage() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("00000000000000000000.keys");
        let mut ix = KeyIndex::create(&path, 0, 1 << 20, 0o640).unwrap();
        for pos in 0..1000u64 {
            assert!(ix.insert((pos % 37) as u32, pos * 40));
        }
        ix.set_indexed_to(40_000);
        let got = ix.probe(5, u64::MAX).unwrap();
        let want: Vec<u64> = (0..1000u64)
            .rev()
            .filter(|p| p % 37 == 5)
            .map(|p| p * 40)
            .collect();
        assert_eq!(got, want);
        assert_eq!(ix.probe(5, 1000).unwrap(), vec![200]);
        drop(ix);
        let Opened::Index(ro) = KeyIndex::open(&path, 0, false).unwrap() else {
            panic!("not opened")
        };
        assert_eq!((ro.entries(), ro.indexed_to()), (1000, 40_000));
        assert!(matches!(
            KeyIndex::open(&path, 4096, false).unwrap(),
            Opened::Damaged
        ));
        drop(ro);
        let mut bytes = std::fs::read(&path).unwrap();
        let e = HEADER + 4 * shape(1 << 20).0 as usize + ENTRY * 5 + 9;
        bytes[e] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        let Opened::Index(ro) = KeyIndex::open(&path, 0, false).unwrap() else {
            panic!("not opened")
        };
        assert_eq!(ro.probe(5, u64::MAX), Err(Damaged));
    }

    #[test]
    fn a_full_index_stops_taking_entries() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.keys");
        let mut ix = KeyIndex::create(&path, 0, 4096, 0o640).unwrap();
        let cap = shape(4096).1;
        for pos in 0..cap {
            assert!(ix.insert(pos, u64::from(pos)));
        }
        assert!(!ix.insert(1, 1));
        assert_eq!(ix.entries(), cap);
    }
}
