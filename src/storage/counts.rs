//! Record counts: the walk that counts a segment's records, and `rmqlog.counts`, where a writer
//! records the counts it knows so that no later open walks those segments again.
//!
//! A segment's count is known as a [`Counted`] pair (records below a position). The writer raises
//! it with each append; whatever is not known yet (records another shared writer appended, a
//! segment an open found without a recorded count) is walked here, once per open, header by
//! header without CRCs, from where the known count stops. How many records `[a, b)` holds inside
//! one segment therefore costs at most a walk of part of that segment.
//!
//! `rmqlog.counts` is a cache: little-endian, in every directory that keeps metadata, replaced
//! (temp file, rename; not synced) when the checkpoint is written and the counts it would hold
//! changed:
//!
//! ```text
//!  0          8          12         16                24                        88
//!  +----------+----------+----------+-----------------+-------------------------+---- - -
//!  | RMQLCNTS | version  |  CRC-32  | entries (u64)   | store id (UTF-8, zeros) | entries
//!  +----------+----------+----------+-----------------+-------------------------+---- - -
//!  entry (32 bytes): segment start (u64), segment size (u64), upto (u64), records (u64)
//! ```
//!
//! The CRC-32 (IEEE) covers bytes 16 to the end. An entry says that `records` records start in
//! the segment below `upto` (relative; `upto == size`: the whole segment). Only counts of bytes
//! below `flushed_offset` are written, so a power loss never leaves a count of records it took
//! (records below it are never cut). A missing, damaged or foreign copy, or a segment without an
//! entry, costs only a walk: its records are counted when first asked for. Every copy that reads
//! is taken (they are all true); an entry whose segment has another size, or lies past the log's
//! end, is not.

use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::storage::fs::{atomic_write, replace_unsynced};
use crate::storage::record::{decode, Slot};
use crate::storage::segment::{Counted, Mapping, Segment};
use crate::storage::segments::SegmentList;

/// Name of the counts file in every directory that keeps metadata.
pub const COUNTS_FILE: &str = "rmqlog.counts";
const MAGIC: &[u8; 8] = b"RMQLCNTS";
const VERSION: u32 = 1;
const STORE_ID_LEN: usize = 64;
const HEAD_LEN: usize = 24 + STORE_ID_LEN;
const ENTRY_LEN: usize = 32;
/// The largest file read: 2 million segments (a 64 TiB log of 32 MiB segments).
const READ_LIMIT: usize = HEAD_LEN + ENTRY_LEN * (1 << 21);

/// One segment's count, as recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recorded {
    pub start: u64,
    pub size: u64,
    pub upto: u64,
    pub records: u64,
}

impl Recorded {
    /// `seg`'s count as known now, if it is worth recording: known past its start.
    pub fn of(seg: &Segment) -> Option<Recorded> {
        let c = seg.counted();
        (c.upto > 0 && !seg.is_lost()).then_some(Recorded {
            start: seg.start(),
            size: seg.size(),
            upto: c.upto,
            records: c.records,
        })
    }
}

/// The file's bytes for `entries` (sorted by start) of the store `store_id`.
pub fn encode_file(store_id: &str, entries: &[Recorded]) -> Vec<u8> {
    let mut b = Vec::with_capacity(HEAD_LEN + ENTRY_LEN * entries.len());
    b.extend_from_slice(MAGIC);
    b.extend_from_slice(&VERSION.to_le_bytes());
    b.extend_from_slice(&[0; 4]); // the CRC, below
    b.extend_from_slice(&(entries.len() as u64).to_le_bytes());
    let mut id = [0u8; STORE_ID_LEN];
    let n = store_id.len().min(STORE_ID_LEN);
    id[..n].copy_from_slice(&store_id.as_bytes()[..n]);
    b.extend_from_slice(&id);
    for e in entries {
        for v in [e.start, e.size, e.upto, e.records] {
            b.extend_from_slice(&v.to_le_bytes());
        }
    }
    let crc = crc32fast::hash(&b[16..]);
    b[12..16].copy_from_slice(&crc.to_le_bytes());
    b
}

/// The entries of a file of the store `store_id`, or why it holds none to take.
pub fn decode_file(b: &[u8], store_id: &str) -> std::result::Result<Vec<Recorded>, String> {
    if b.len() < HEAD_LEN || &b[..8] != MAGIC {
        return Err("not a counts file".into());
    }
    let u32_at = |at: usize| u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"));
    let u64_at = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"));
    if u32_at(8) != VERSION {
        return Err(format!(
            "version {} (this rmqlog reads {VERSION})",
            u32_at(8)
        ));
    }
    if crc32fast::hash(&b[16..]) != u32_at(12) {
        return Err("CRC mismatch".into());
    }
    let n = usize::try_from(u64_at(16)).unwrap_or(usize::MAX);
    if n.checked_mul(ENTRY_LEN)
        .and_then(|l| l.checked_add(HEAD_LEN))
        != Some(b.len())
    {
        return Err(format!("{} bytes do not hold {n} entries", b.len()));
    }
    let id = &b[24..HEAD_LEN];
    let id = &id[..id.iter().position(|&c| c == 0).unwrap_or(STORE_ID_LEN)];
    let ours = &store_id.as_bytes()[..store_id.len().min(STORE_ID_LEN)];
    if id != ours {
        return Err(format!(
            "of store {:?}, not of this one ({store_id:?})",
            String::from_utf8_lossy(id)
        ));
    }
    Ok(b[HEAD_LEN..]
        .chunks_exact(ENTRY_LEN)
        .map(|e| {
            let at = |i: usize| u64::from_le_bytes(e[i..i + 8].try_into().expect("8 bytes"));
            Recorded {
                start: at(0),
                size: at(8),
                upto: at(16),
                records: at(24),
            }
        })
        .filter(|r| r.upto <= r.size && r.records <= r.upto)
        .collect())
}

/// Reads a counts file of at most [`READ_LIMIT`] bytes; anything else (larger, not a regular
/// file) is an error, never a hang.
fn read_file(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::{Error, ErrorKind};
    let f = std::fs::File::options()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    let meta = f.metadata()?;
    if !meta.is_file() || meta.len() > READ_LIMIT as u64 {
        return Err(Error::new(ErrorKind::InvalidData, "not a counts file"));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    f.take(READ_LIMIT as u64).read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// The entries of every copy in `dirs` that belongs to `store_id`, by start, the furthest
/// reaching of each segment's. A damaged or foreign copy is skipped (its counts are walked
/// instead).
pub fn read(dirs: &[PathBuf], store_id: &str) -> Vec<Recorded> {
    let mut out: Vec<Recorded> = Vec::new();
    for dir in dirs {
        let path = dir.join(COUNTS_FILE);
        match read_file(&path).map_err(|e| e.to_string()) {
            Err(_) if !path.exists() => {}
            Err(why) => log::warn!("ignoring {}: {why}", path.display()),
            Ok(b) => match decode_file(&b, store_id) {
                Ok(entries) => out.extend(entries),
                Err(why) => log::warn!("ignoring {}: {why}", path.display()),
            },
        }
    }
    out.sort_by_key(|r| (r.start, std::cmp::Reverse(r.upto)));
    out.dedup_by_key(|r| r.start);
    out
}

/// Writes `entries` into every directory in `dirs`; only when none took it is it an error (a
/// directory that refused keeps an older copy, whose entries are still true). Without `durable`
/// the files are replaced but not synced: an older copy coming back after a power loss holds
/// true counts too (only an entry past a cut is not: that rewrite is `durable`).
pub fn write(
    dirs: &[PathBuf],
    store_id: &str,
    entries: &[Recorded],
    mode: u32,
    durable: bool,
) -> Result<()> {
    let bytes = encode_file(store_id, entries);
    let mut first_error = None;
    let mut written = 0;
    for dir in dirs {
        let path = dir.join(COUNTS_FILE);
        let replaced = match durable {
            true => atomic_write(&path, &bytes, mode),
            false => replace_unsynced(&path, &bytes, mode),
        };
        match replaced {
            Ok(()) => written += 1,
            Err(e) => {
                log::warn!("record counts not updated in {}: {e}", dir.display());
                first_error.get_or_insert(e);
            }
        }
    }
    match first_error {
        Some(e) if written == 0 => Err(e),
        _ => Ok(()),
    }
}

/// Gives the segments of `list` the recorded counts that fit them: the same start and size, and
/// reaching no further than `end`, the log's end.
pub fn apply(list: &SegmentList, recorded: &[Recorded], end: u64) {
    for r in recorded {
        let Some(seg) = list.find(r.start).filter(|s| s.start() == r.start) else {
            continue;
        };
        if seg.size() == r.size && !seg.is_lost() && r.start + r.upto <= end {
            seg.note_counted(Counted {
                upto: r.upto,
                records: r.records,
            });
        }
    }
}

/// Forgets the counts that reach past `end`, the end recovery found (damage below the flushed
/// offset cut records a count was recorded for).
pub fn forget_past(list: &SegmentList, end: u64) {
    for seg in list.as_slice() {
        if seg.start() + seg.counted().upto > end {
            seg.forget_count();
        }
    }
}

/// Walks the headers of `seg` (mapped by `map`) from `from`, a record start, while below `to`
/// (positions relative to the segment); `limit` is where its published records end (its size
/// when sealed). Returns how many records start in `[from, to)` and the boundary the walk
/// stopped at: at or past `to`, or the segment's size at its filler.
pub fn walk(seg: &Segment, map: &Mapping, from: u64, to: u64, limit: u64) -> Result<(u64, u64)> {
    let size = seg.size();
    let (mut pos, mut n) = (from, 0u64);
    while pos < to.min(limit) {
        let rest = map.bytes(pos as usize, size as usize);
        match decode(rest, seg.start() + pos, u32::MAX as usize) {
            Slot::Record(h) => {
                n += 1;
                pos += u64::from(h.len);
            }
            // A filler closes a sealed segment; one below the published end of the active
            // segment is a damaged record.
            Slot::EndOfSegment if limit == size => return Ok((n, size)),
            other => {
                return Err(Error::corruption(
                    Some(seg.path().to_path_buf()),
                    Some(seg.start() + pos),
                    format!(
                        "no valid record header while counting records: {}",
                        other
                            .defect()
                            .unwrap_or("a filler before the published end")
                    ),
                ))
            }
        }
    }
    Ok((n, pos))
}

/// How many records of `seg` start below `p` (relative), its records published up to `limit`
/// (its size when sealed; `p <= limit`). Walks from the nearest count known below `p`, or back
/// from the nearest above it when that is shorter and `p` is a record start: at most part of the
/// segment. What it learns is kept (a mark at `p`, or the count reaching further).
pub fn below(seg: &Segment, p: u64, limit: u64) -> Result<u64> {
    if seg.is_lost() {
        return Ok(0);
    }
    let (from, back) = seg.counts_around(p);
    if from.upto == p {
        return Ok(from.records);
    }
    if let Some(b) = back.filter(|b| b.upto == p) {
        return Ok(b.records);
    }
    let map = seg.map()?;
    let is_start = || {
        let rest = map.bytes(p as usize, seg.size() as usize);
        matches!(
            decode(rest, seg.start() + p, u32::MAX as usize),
            Slot::Record(_)
        )
    };
    let counted = match back.filter(|b| b.upto - p < p - from.upto) {
        Some(b) if is_start() => {
            // The records between are known to be there (counted up to `b`), also past `limit`
            // (a sync store's readers stop at the durable end, below what recovery counted).
            let (n, _) = walk(seg, &map, p, b.upto, b.upto.max(limit))?;
            Counted {
                upto: p,
                records: b.records.saturating_sub(n),
            }
        }
        _ => {
            let (n, at, base) = match walk(seg, &map, from.upto, p, limit) {
                Ok((n, at)) => (n, at, from.records),
                // A count that does not end on a record is not this segment's (a counts file
                // of another copy of the store): the segment is counted from its start.
                Err(e @ Error::Corruption { .. }) if from.upto > 0 => {
                    log::warn!(
                        "{}: a known record count ({} below {}) does not end on a record ({e}; \
                         a wrong rmqlog.counts?): counting from the segment's start",
                        seg.path().display(),
                        from.records,
                        from.upto
                    );
                    let (n, at) = walk(seg, &map, 0, p, limit)?;
                    (n, at, 0)
                }
                Err(e) => return Err(e),
            };
            // `at` is the boundary at or past `p`: the record across `p` starts below it.
            Counted {
                upto: at,
                records: base + n,
            }
        }
    };
    seg.note_count_at(counted);
    Ok(counted.records)
}

/// How many records `seg` holds (sealed: all its records are published).
pub fn whole(seg: &Segment) -> Result<u64> {
    below(seg, seg.size(), seg.size())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries() -> Vec<Recorded> {
        vec![
            Recorded {
                start: 0,
                size: 4096,
                upto: 4096,
                records: 12,
            },
            Recorded {
                start: 4096,
                size: 8192,
                upto: 640,
                records: 20,
            },
        ]
    }

    #[test]
    fn round_trip_and_damage() {
        let b = encode_file("0123456789abcdef", &entries());
        assert_eq!(b.len(), HEAD_LEN + 2 * ENTRY_LEN);
        assert_eq!(decode_file(&b, "0123456789abcdef").unwrap(), entries());
        assert!(decode_file(&b, "another")
            .unwrap_err()
            .contains("not of this one"));
        for at in [12, 20, 30, HEAD_LEN + 3, b.len() - 1] {
            let mut bad = b.clone();
            bad[at] ^= 1;
            assert!(decode_file(&bad, "0123456789abcdef").is_err(), "byte {at}");
        }
        assert!(decode_file(&b[..b.len() - 8], "0123456789abcdef").is_err());
        assert!(decode_file(b"RMQLCNTS", "x").is_err());
        assert_eq!(decode_file(&encode_file("s", &[]), "s").unwrap(), []);
    }

    #[test]
    fn impossible_entries_are_not_taken() {
        let mut e = entries();
        e[0].upto = 5000; // past its size
        e[1].records = 641; // more records than bytes
        assert_eq!(decode_file(&encode_file("s", &e), "s").unwrap(), []);
    }

    #[test]
    fn every_readable_copy_counts() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        let dirs = vec![a.path().to_path_buf(), b.path().to_path_buf()];
        write(&dirs[..1], "s", &entries()[..1], 0o640, true).unwrap();
        let mut shorter = entries()[1..].to_vec();
        shorter.push(Recorded {
            upto: 32,
            records: 1,
            ..entries()[0]
        });
        write(&dirs[1..], "s", &shorter, 0o640, false).unwrap();
        assert_eq!(read(&dirs, "s"), entries());
        std::fs::write(b.path().join(COUNTS_FILE), b"garbage").unwrap();
        assert_eq!(read(&dirs, "s"), &entries()[..1]);
        assert_eq!(read(&dirs, "t"), []);
    }
}
