#![allow(clippy::unwrap_used)] // tests: a failed unwrap is the failure report
//! Helpers shared by the integration tests: stores in temporary directories, recognisable bodies.
#![allow(dead_code)]

use std::path::PathBuf;
use std::time::Duration;

use rmqlog::{CommitLog, FlushMode, Options};

/// Writes `bytes` at `pos` of the file at `path` (damage, garbage, forged fields).
pub fn write_at(path: &std::path::Path, pos: u64, bytes: &[u8]) {
    use std::io::{Seek, SeekFrom, Write};
    let mut f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    f.seek(SeekFrom::Start(pos)).unwrap();
    f.write_all(bytes).unwrap();
}

/// `n` store directories under one temporary directory (kept alive by the returned guard).
pub fn dirs(n: usize) -> (tempfile::TempDir, Vec<PathBuf>) {
    let root = tempfile::tempdir().expect("temporary directory");
    let dirs = (0..n).map(|i| root.path().join(format!("d{i}"))).collect();
    (root, dirs)
}

/// A writer's options for tests: 4 KiB segments, no background thread (syncs and cleaning happen
/// only when a test calls them), nothing expires by age.
pub fn quiet() -> Options {
    Options::default()
        .segment_size(4096)
        .flush(FlushMode::None)
        .clean_interval(Duration::ZERO)
        .retention_hours(None)
}

/// The body of record `i`: its number, then bytes derived from it; `len` bytes in all (>= 8).
pub fn body(i: u64, len: usize) -> Vec<u8> {
    let mut b = i.to_le_bytes().to_vec();
    let mut x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    while b.len() < len.max(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        b.push(x as u8);
    }
    b
}

/// Whether `bytes` is the body of some record (`Some(its number)`), checked byte for byte.
pub fn check_body(bytes: &[u8]) -> Option<u64> {
    let i = u64::from_le_bytes(bytes.get(..8)?.try_into().ok()?);
    (body(i, bytes.len()) == bytes).then_some(i)
}

/// Appends records `0..n` of `len` bytes; returns `(offset, number)` of each.
pub fn fill(log: &CommitLog, n: u64, len: usize) -> Vec<(u64, u64)> {
    (0..n)
        .map(|i| (log.append(&body(i, len)).expect("append"), i))
        .collect()
}

/// Every record in `acked` at or above the log's `min_offset` reads back with its content.
pub fn assert_readable(log: &CommitLog, acked: &[(u64, u64)]) {
    let min = log.min_offset().expect("min_offset");
    for &(offset, i) in acked.iter().filter(|(o, _)| *o >= min) {
        let rec = log
            .read(offset)
            .unwrap_or_else(|e| panic!("record {i} at {offset}: {e}"));
        assert_eq!(check_body(&rec), Some(i), "record {i} at {offset}");
    }
}

/// The file of the segment holding `offset`, and the offset's position in it.
pub fn segment_of(log: &CommitLog, offset: u64) -> (PathBuf, u64) {
    let s = log
        .segments()
        .unwrap()
        .into_iter()
        .find(|s| s.start_offset <= offset && offset < s.start_offset + s.size)
        .unwrap();
    (s.path, offset - s.start_offset)
}

/// A small deterministic random number generator (xorshift64*).
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number in `[lo, hi)`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo).max(1)
    }

    /// True with probability `1 / n`.
    pub fn one_in(&mut self, n: u64) -> bool {
        self.next().is_multiple_of(n)
    }
}

/// The seed of a randomized test: `var` from the environment (to replay a failure), else the
/// time. The caller prints it.
pub fn seed(var: &str) -> u64 {
    std::env::var(var).map_or_else(
        |_| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        },
        |s| {
            s.parse()
                .unwrap_or_else(|_| panic!("{var}={s:?} is not a u64"))
        },
    )
}

/// A body naming its writer and its number in that writer's sequence.
pub fn tagged(writer: u32, i: u32, len: usize) -> Vec<u8> {
    let mut b = Vec::with_capacity(len.max(8));
    b.extend_from_slice(&writer.to_le_bytes());
    b.extend_from_slice(&i.to_le_bytes());
    b.resize(len.max(8), (writer as u8).wrapping_mul(31) ^ (i as u8));
    b
}

pub fn untag(b: &[u8]) -> (u32, u32) {
    let w = u32::from_le_bytes(b[..4].try_into().unwrap());
    let i = u32::from_le_bytes(b[4..8].try_into().unwrap());
    assert_eq!(b, tagged(w, i, b.len()), "a record's bytes are whole");
    (w, i)
}

/// Every record of the store: dense offsets from `min_offset`, and each writer's records in its
/// own order without gaps or repeats, as many as the log counts. Returns how many each writer
/// has.
pub fn check_store(log: &CommitLog) -> std::collections::HashMap<u32, u32> {
    let mut next: std::collections::HashMap<u32, u32> = Default::default();
    let mut at = log.min_offset().unwrap();
    let mut records = 0u64;
    for rec in log.scan(None, None).unwrap() {
        let rec = rec.unwrap();
        records += 1;
        assert_eq!(rec.offset(), at, "offsets are dense");
        at = rec.next_offset();
        let (w, i) = untag(&rec);
        let n = next.entry(w).or_default();
        assert_eq!(
            i, *n,
            "writer {w}'s records in its order, none lost or repeated"
        );
        *n += 1;
    }
    assert_eq!(at, log.max_offset().unwrap(), "the scan reaches the end");
    assert_eq!(
        log.record_count().unwrap(),
        records,
        "the log counts its records"
    );
    next
}
