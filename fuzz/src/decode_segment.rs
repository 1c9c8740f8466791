//! Target `decode_segment`: the fuzz input is the bytes of a segment file.
//!
//! The input, zero-padded up to a multiple of 4096 (at least 4096) and cut at [`MAX_SEGMENT`],
//! becomes segment `00000000000000000000`, alone in a directory with no `rmqlog.meta`, and the
//! segment size is its length. Then:
//!
//! 1. Read-only open. If it opens: `scan(None, None)` to the end, `read()` at offsets from the
//!    input and from the scan, `scan(Some(_), None)` from a few of them, `verify()`,
//!    `offset_for_timestamp` for a few timestamps. Everything must return `Ok` or `Err`.
//!    Properties: the scan of a read-only log ends without error (its end was found by validating
//!    every record); each scanned record reads back the same; `verify()` is empty;
//!    `offset_for_timestamp` answers `max_offset` or a record at or after the timestamp.
//! 2. Writer open (recovery cuts the invalid tail). Properties: it opens; it finds the same end as
//!    the reader; every record the reader scanned reads back the same; `verify()` is empty.
//!    Then one record is appended and the log closed.
//! 3. Read-only reopen: the appended record reads back, the scanned ones too, `verify()` is empty.

use rmqlog::CommitLog;

use crate::{open_reader, open_writer, scratch, u16_at, u64_at, FIRST_SEGMENT, META, PAGE};

/// Largest segment built from an input (longer inputs are cut).
pub const MAX_SEGMENT: usize = 16 * PAGE;

/// Segment length for an input of `n` bytes: a multiple of [`PAGE`], in `PAGE..=MAX_SEGMENT`.
pub fn segment_len(n: usize) -> usize {
    n.div_ceil(PAGE).clamp(1, MAX_SEGMENT / PAGE) * PAGE
}

/// A record as a scan returned it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    offset: u64,
    timestamp_ms: u64,
    body: Vec<u8>,
}

/// Runs the target on one input.
pub fn run(data: &[u8]) {
    let len = segment_len(data.len());
    let mut segment = vec![0u8; len];
    let n = data.len().min(len);
    segment[..n].copy_from_slice(&data[..n]);

    let tmp = scratch();
    let dir = tmp.path().join("store");
    std::fs::create_dir(&dir).expect("creating the store directory");
    std::fs::write(dir.join(FIRST_SEGMENT), &segment).expect("writing the segment");
    let _ = std::fs::remove_file(dir.join(META));
    let dirs = [dir];
    let size = len as u64;

    // 1. Read-only.
    let reader = open_reader(&dirs, size);
    let mut seen = Vec::new();
    let mut reader_end = None;
    if let Ok(log) = &reader {
        reader_end = Some(exercise_reader(log, data, size, &mut seen));
        log.close().expect("closing a read-only log");
    }
    drop(reader);

    // 2. Writer: recovery.
    let writer = match open_writer(&dirs, size) {
        Ok(w) => w,
        Err(e) => {
            // A lone segment of the configured size, without metadata, is always recoverable:
            // damage is cut, never a reason to refuse the store (docs/recovery.md).
            panic!("the writer cannot open a single {len}-byte segment without metadata: {e}");
        }
    };
    let end = writer.max_offset().expect("max_offset of an open writer");
    if let Some(r) = reader_end {
        assert_eq!(
            end, r,
            "the writer's recovery found another end of the log than the read-only open"
        );
    }
    for s in &seen {
        check_reads_back(&writer, s, "after recovery");
    }
    let bad = writer.verify().expect("verify after recovery");
    assert!(bad.is_empty(), "verify after recovery: {bad:?}");

    let body: Vec<u8> = data.iter().rev().take(97).copied().collect();
    let appended = writer.append(&body).expect("appending to a recovered log");
    writer.close().expect("closing the writer");
    drop(writer);

    // 3. Read-only reopen.
    let log = open_reader(&dirs, size).expect("reopening the recovered log read-only");
    let rec = log.read(appended).expect("reading the appended record");
    assert_eq!(&*rec, body.as_slice(), "the appended record reads back");
    for s in &seen {
        check_reads_back(&log, s, "after the append and reopen");
    }
    let bad = log.verify().expect("verify after reopen");
    assert!(
        bad.is_empty(),
        "recovery must leave a clean log, verify says {bad:?}"
    );
    log.close().expect("closing the reopened log");
}

fn check_reads_back(log: &CommitLog, s: &Seen, when: &str) {
    match log.read(s.offset) {
        Ok(r) => {
            assert_eq!(r.offset(), s.offset);
            assert_eq!(
                r.timestamp_ms(),
                s.timestamp_ms,
                "timestamp at {} {when}",
                s.offset
            );
            assert_eq!(&*r, s.body.as_slice(), "body at {} {when}", s.offset);
        }
        Err(e) => panic!(
            "record at {} (scanned read-only before recovery) is lost {when}: {e}",
            s.offset
        ),
    }
}

/// Exercises a read-only log; fills `seen` with its records and returns its end.
fn exercise_reader(log: &CommitLog, data: &[u8], size: u64, seen: &mut Vec<Seen>) -> u64 {
    let min = log.min_offset().expect("min_offset");
    let max = log.max_offset().expect("max_offset");
    assert!(min <= max, "min_offset {min} > max_offset {max}");
    assert!(
        max <= size,
        "max_offset {max} past the only segment ({size} bytes)"
    );
    let _ = log.segments();
    let _ = log.flushed_offset();

    // The whole log. Its end was found by validating every record, so the scan must not fail.
    let scan = log
        .scan(None, None)
        .expect("scan(None, None) of a read-only log");
    let mut next = min;
    for r in scan {
        let r = r.unwrap_or_else(|e| panic!("scan of a read-only log failed after {next}: {e}"));
        assert!(
            r.offset() >= next,
            "scan went backwards: {} after {next}",
            r.offset()
        );
        assert!(r.next_offset() > r.offset() && r.next_offset() <= max);
        next = r.next_offset();
        seen.push(Seen {
            offset: r.offset(),
            timestamp_ms: r.timestamp_ms(),
            body: r.to_vec(),
        });
    }
    for s in seen.iter() {
        check_reads_back(log, s, "in the same read-only log");
    }

    // Reads and scans at offsets taken from the input: anything, as long as it is Ok or Err.
    let tail = data.len().saturating_sub(8);
    let mut probes = vec![
        0,
        1,
        8,
        32,
        max,
        max.wrapping_sub(1),
        size,
        size + 1,
        u64::MAX,
    ];
    probes.extend((0..4).map(|i| u64::from(u16_at(data, tail + 2 * i)) % (size + 64)));
    probes.push(u64_at(data, 0) & 0xffff_ffff); // the first header's length, as an offset
    probes.extend(seen.iter().take(4).map(|s| s.offset + 1));
    for &off in &probes {
        if let Ok(r) = log.read(off) {
            assert_eq!(r.offset(), off);
            assert!(
                off >= min && off < max,
                "read({off}) outside [{min}, {max})"
            );
        }
        if let Ok(scan) = log.scan(Some(off), None) {
            for r in scan.take(64) {
                if r.is_err() {
                    break;
                }
            }
        }
    }

    let bad = log.verify().expect("verify of a read-only log");
    assert!(
        bad.is_empty(),
        "read-only open ended the log before a damaged range, yet verify says {bad:?}"
    );

    // Timestamps: the answer is max_offset or a record at or after the timestamp.
    let mut stamps = vec![0, 1, u64::MAX];
    let first_ts = u64_at(data, 24);
    stamps.extend([first_ts, first_ts.wrapping_add(1), first_ts.wrapping_sub(1)]);
    stamps.extend(seen.iter().take(8).map(|s| s.timestamp_ms));
    for ts in stamps {
        let Ok(off) = log.offset_for_timestamp(ts) else {
            continue;
        };
        assert!(
            off >= min && off <= max,
            "offset_for_timestamp({ts}) = {off}"
        );
        if off < max {
            let r = log
                .read(off)
                .unwrap_or_else(|e| panic!("offset_for_timestamp({ts}) = {off}, unreadable: {e}"));
            assert!(
                r.timestamp_ms() >= ts,
                "offset_for_timestamp({ts}) = {off}, older record"
            );
        }
    }
    max
}
