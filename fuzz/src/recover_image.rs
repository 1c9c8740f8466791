//! Target `recover_image`: a valid log, damaged, then recovered.
//!
//! Input layout (missing bytes read as zero):
//!
//! | bytes | meaning |
//! |---|---|
//! | 0 | flags: bits 0-1 the metadata ([`Meta`]), bit 2 two directories instead of one |
//! | 1 | number of records, modulo [`MAX_RECORDS`] + 1 |
//! | 2 | which record boundary an unclean metadata names as `flushed_offset` |
//! | 3 .. 3+n | one byte per record: body length = byte * 3 (0..=765) |
//! | rest | corruptions, 3 bytes each: position (u16 LE, modulo the image length), new byte |
//!
//! The log is written with segment size 4096 (so records spread over several segments, and over
//! two directories round robin when bit 2 is set) and closed cleanly. The segment files, in offset
//! order, form the image: image position = physical offset. The corruptions are applied to the
//! image (a position is *damaged* when its byte really changed), the metadata is kept, rewritten
//! as after a crash, or deleted, and the store is reopened as the writer.
//!
//! Properties after the reopen:
//! - it opens (damage in segment bytes is never a reason to refuse a store);
//! - `read()` of a record never returns other bytes than were appended: it returns the exact
//!   body, or an error;
//! - a record that is not damaged reads back when it lies below the metadata's flushed offset
//!   `F` (for a clean close, the recorded end; without metadata, 0), or when it ends before the
//!   first damaged position at or after `F` (recovery's scan from `F` reaches it);
//! - `verify()` lists only ranges that contain a damaged position;
//! - an append after recovery reads back.

use std::path::{Path, PathBuf};

use rmqlog::CommitLog;

use crate::{open_writer, scratch, u16_at, META, PAGE};

/// Most records a run appends.
pub const MAX_RECORDS: usize = 40;
/// Most corruptions a run applies.
pub const MAX_CORRUPTIONS: usize = 64;
const SEGMENT: u64 = PAGE as u64;
const HEADER: u64 = 32;

/// What happens to `rmqlog.meta` (in every directory) before the reopen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Meta {
    /// As the clean close wrote it: the end is trusted, no scan.
    KeepClean,
    /// Rewritten as the flusher would have left it before a crash: `clean = false` and
    /// `flushed_offset` at a record boundary chosen by byte 2. Recovery scans from there.
    Unclean,
    /// Deleted: recovery scans the whole log.
    Delete,
}

impl Meta {
    fn from_bits(b: u8) -> Meta {
        match b & 3 {
            0 => Meta::KeepClean,
            1 => Meta::Unclean,
            _ => Meta::Delete,
        }
    }
}

/// A record as appended.
#[derive(Debug)]
struct Appended {
    offset: u64,
    body: Vec<u8>,
}

impl Appended {
    fn end(&self) -> u64 {
        self.offset + HEADER + self.body.len() as u64
    }
}

fn body(i: usize, len: usize) -> Vec<u8> {
    (0..len)
        .map(|j| (i.wrapping_mul(31) ^ j.wrapping_mul(7) ^ (j >> 8)) as u8)
        .collect()
}

/// Segment files of `dirs`, by start offset.
fn segment_files(dirs: &[PathBuf]) -> Vec<(u64, PathBuf)> {
    let mut out = Vec::new();
    for d in dirs {
        for e in std::fs::read_dir(d).expect("listing a store directory") {
            let e = e.expect("listing a store directory");
            let name = e.file_name();
            let name = name.to_string_lossy();
            if name.len() == 20 && name.bytes().all(|b| b.is_ascii_digit()) {
                let start: u64 = name.parse().expect("a 20-digit name is a number");
                out.push((start, e.path()));
            }
        }
    }
    out.sort();
    out
}

/// The metadata's first line, as JSON.
fn read_meta(dir: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(dir.join(META)).expect("reading rmqlog.meta");
    let line = text.lines().next().unwrap_or_default();
    serde_json::from_str(line).expect("rmqlog.meta's first line is JSON")
}

/// Writes metadata the way rmqlog does: the JSON line, its CRC32 in hex, padded to 4 KiB.
fn write_meta(dir: &Path, meta: &serde_json::Value) {
    let json = serde_json::to_string(meta).expect("serialising metadata");
    let mut bytes = format!("{json}\n{:08x}\n", crc32fast::hash(json.as_bytes())).into_bytes();
    if bytes.len() < PAGE {
        bytes.resize(PAGE, b'\n');
    }
    std::fs::write(dir.join(META), bytes).expect("writing rmqlog.meta");
}

fn field(meta: &serde_json::Value, key: &str) -> u64 {
    meta[key]
        .as_u64()
        .unwrap_or_else(|| panic!("rmqlog.meta has no number {key}: {meta}"))
}

/// Runs the target on one input.
pub fn run(data: &[u8]) {
    let byte = |i: usize| data.get(i).copied().unwrap_or(0);
    let flags = byte(0);
    let meta_mode = Meta::from_bits(flags);
    let two_dirs = flags & 4 != 0;
    let n = usize::from(byte(1)) % (MAX_RECORDS + 1);
    let boundary_pick = usize::from(byte(2));
    let lens: Vec<usize> = (0..n).map(|i| usize::from(byte(3 + i)) * 3).collect();
    let corruptions = data.get(3 + n..).unwrap_or_default();

    let tmp = scratch();
    let dirs: Vec<PathBuf> = (0..if two_dirs { 2 } else { 1 })
        .map(|i| tmp.path().join(format!("disk{i}")))
        .collect();

    // A valid log, closed cleanly.
    let log = open_writer(&dirs, SEGMENT).expect("creating a new store");
    let mut records = Vec::with_capacity(n);
    for (i, &len) in lens.iter().enumerate() {
        let b = body(i, len);
        let offset = log.append(&b).expect("appending to a new store");
        records.push(Appended { offset, body: b });
    }
    let written_end = log.max_offset().expect("max_offset");
    log.close().expect("closing the new store");
    drop(log);

    // The metadata's flushed offset, and what happens to the metadata.
    let meta = read_meta(&dirs[0]);
    let clean = meta["clean"].as_bool().expect("rmqlog.meta has clean");
    let flushed = if clean {
        field(&meta, "max_offset").max(field(&meta, "flushed_offset"))
    } else {
        field(&meta, "flushed_offset")
    };
    assert!(clean, "a clean close wrote clean = false: {meta}");
    assert_eq!(
        flushed, written_end,
        "a clean close recorded another end: {meta}"
    );
    let bound = match meta_mode {
        Meta::KeepClean => flushed,
        Meta::Unclean => {
            let mut boundaries: Vec<u64> = records.iter().map(|r| r.offset).collect();
            boundaries.push(written_end);
            let f = boundaries[boundary_pick % boundaries.len()];
            let mut m = meta.clone();
            m["clean"] = serde_json::Value::Bool(false);
            m["flushed_offset"] = f.into();
            for d in &dirs {
                write_meta(d, &m);
            }
            f
        }
        Meta::Delete => {
            for d in &dirs {
                let _ = std::fs::remove_file(d.join(META));
            }
            0
        }
    };

    // The image: the segment files end to end (position = offset), then the corruptions.
    let files = segment_files(&dirs);
    let mut image = Vec::new();
    for (i, (start, path)) in files.iter().enumerate() {
        assert_eq!(
            *start,
            i as u64 * SEGMENT,
            "segments of a new store are contiguous"
        );
        let bytes = std::fs::read(path).expect("reading a segment");
        assert_eq!(
            bytes.len() as u64,
            SEGMENT,
            "{} has the segment size",
            path.display()
        );
        image.extend_from_slice(&bytes);
    }
    let original = image.clone();
    if !image.is_empty() {
        for c in corruptions.chunks_exact(3).take(MAX_CORRUPTIONS) {
            let pos = usize::from(u16_at(c, 0)) % image.len();
            image[pos] = c[2];
        }
    }
    let damaged: Vec<u64> = (0..image.len())
        .filter(|&p| image[p] != original[p])
        .map(|p| p as u64)
        .collect();
    for (start, path) in &files {
        let range = *start as usize..(*start + SEGMENT) as usize;
        if image[range.clone()] != original[range.clone()] {
            std::fs::write(path, &image[range]).expect("writing a damaged segment");
        }
    }

    // Recovery.
    let log = match open_writer(&dirs, SEGMENT) {
        Ok(log) => log,
        Err(e) => panic!(
            "reopening after damage at {damaged:?} (metadata {meta_mode:?}, flushed {bound}) \
             failed: {e}"
        ),
    };
    check_records(&log, &records, &damaged, bound, meta_mode);

    let bad = log.verify().expect("verify after recovery");
    for r in &bad {
        assert!(
            damaged.iter().any(|&p| r.start <= p && p < r.end),
            "verify reports {r:?}, which holds no damaged position (damaged: {damaged:?}, \
             metadata {meta_mode:?}, flushed {bound})"
        );
    }

    let extra = body(n, 5 + n);
    let at = log.append(&extra).expect("appending after recovery");
    let r = log
        .read(at)
        .expect("reading the record appended after recovery");
    assert_eq!(
        &*r,
        extra.as_slice(),
        "the record appended after recovery reads back"
    );
    drop(r);
    log.close().expect("closing after recovery");
}

fn check_records(log: &CommitLog, records: &[Appended], damaged: &[u64], bound: u64, meta: Meta) {
    // Recovery's scan starts at `bound` and stops at the first invalid record: records ending
    // before the first damaged position at or after `bound` are reached.
    let first_damage_after = damaged
        .iter()
        .copied()
        .find(|&p| p >= bound)
        .unwrap_or(u64::MAX);
    for (i, rec) in records.iter().enumerate() {
        let hit = damaged.iter().any(|&p| rec.offset <= p && p < rec.end());
        let protected = !hit && (rec.end() <= bound || rec.end() <= first_damage_after);
        match log.read(rec.offset) {
            Ok(r) => {
                assert_eq!(r.offset(), rec.offset);
                assert!(
                    &*r == rec.body.as_slice(),
                    "record {i} at {} reads back other bytes than were appended ({} bytes \
                     instead of {}; damaged: {damaged:?}, metadata {meta:?}, flushed {bound})",
                    rec.offset,
                    r.len(),
                    rec.body.len()
                );
            }
            Err(e) => assert!(
                !protected,
                "record {i} at {} (end {}) is intact and below the recovered bound, but read \
                 fails: {e} (damaged: {damaged:?}, metadata {meta:?}, flushed {bound})",
                rec.offset,
                rec.end()
            ),
        }
    }
}
