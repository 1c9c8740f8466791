#![allow(clippy::unwrap_used)] // tests: a failed unwrap is the failure report
//! Stores of both record formats: a new store writes format 2; a format-1 store (made by rmqlog
//! 0.1, or with `record_format(V1)`) keeps opening, reading, appending and verifying in format 1,
//! across clean closes, crashes and lost metadata; no record is ever rewritten.

use std::fs;
use std::path::Path;

use rmqlog::{CommitLog, FlushMode, Options, RecordFormat, HEADER_LEN};

const SEG: u64 = 16 * 1024;

fn opts() -> Options {
    Options::default().segment_size(SEG).flush(FlushMode::None)
}

fn body(i: usize) -> Vec<u8> {
    format!("record {i} ").repeat(i % 13 + 1).into_bytes()
}

/// The magic of the record at `offset`, read from its segment file.
fn magic_at(dir: &Path, offset: u64) -> u32 {
    let start = offset / SEG * SEG;
    let bytes = fs::read(dir.join(format!("{start:020}"))).unwrap();
    let at = (offset - start) as usize + 4;
    u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap())
}

const MAGIC_V1: u32 = 0x524D_5101;
const MAGIC_V2: u32 = 0x524D_5102;

/// Appends records `from..to` and returns their offsets.
fn append(log: &CommitLog, from: usize, to: usize) -> Vec<(usize, u64)> {
    (from..to)
        .map(|i| (i, log.append(&body(i)).unwrap()))
        .collect()
}

fn check_all(log: &CommitLog, written: &[(usize, u64)]) {
    for &(i, off) in written {
        assert_eq!(&*log.read(off).unwrap(), body(i).as_slice(), "record {i}");
    }
    let scanned: Vec<_> = log.scan(None, None).unwrap().map(|r| r.unwrap()).collect();
    assert_eq!(scanned.len(), written.len());
    assert!(log.verify().unwrap().is_empty());
}

#[test]
fn a_new_store_writes_format_2() {
    let t = tempfile::tempdir().unwrap();
    let log = CommitLog::open(&[t.path()], opts()).unwrap();
    let written = append(&log, 0, 300);
    check_all(&log, &written);
    log.close().unwrap();
    for &(_, off) in &written {
        assert_eq!(magic_at(t.path(), off), MAGIC_V2);
    }
    // The metadata names the record format, under a file format older rmqlogs refuse.
    let meta = fs::read_to_string(t.path().join("rmqlog.meta")).unwrap();
    assert!(
        meta.contains(r#""format":4"#) && meta.contains(r#""record_format":2"#),
        "{meta}"
    );
}

#[test]
fn a_format_1_store_stays_format_1_through_reopens_crashes_and_lost_metadata() {
    let t = tempfile::tempdir().unwrap();
    let v1 = || opts().record_format(RecordFormat::V1);
    let log = CommitLog::open(&[t.path()], v1()).unwrap();
    let mut written = append(&log, 0, 200);
    log.close().unwrap();
    let meta = fs::read_to_string(t.path().join("rmqlog.meta")).unwrap();
    assert!(
        meta.contains(r#""format":2"#) && !meta.contains("record_format"),
        "{meta}"
    );

    // Reopened by an open that asks for nothing (format 2 for new stores): the store's own
    // format wins, for the records appended now too.
    let log = CommitLog::open(&[t.path()], opts()).unwrap();
    written.extend(append(&log, 200, 400));
    check_all(&log, &written);
    drop(log); // no clean close: recovery scans the tail

    let log = CommitLog::open(&[t.path()], opts()).unwrap();
    check_all(&log, &written);
    log.close().unwrap();

    // Metadata lost in every directory: the records themselves say the format.
    fs::remove_file(t.path().join("rmqlog.meta")).unwrap();
    let log = CommitLog::open(&[t.path()], opts()).unwrap();
    written.extend(append(&log, 400, 500));
    check_all(&log, &written);
    log.close().unwrap();
    for &(i, off) in &written {
        assert_eq!(magic_at(t.path(), off), MAGIC_V1, "record {i}");
    }
    // And a read-only follower of it.
    let ro = CommitLog::open(&[t.path()], opts().read_only(true)).unwrap();
    check_all(&ro, &written);
}

/// rmqlog 0.1's metadata (file format 2, no `record_format`) opens as a format-1 store.
#[test]
fn metadata_without_a_record_format_is_a_format_1_store() {
    let t = tempfile::tempdir().unwrap();
    let log = CommitLog::open(&[t.path()], opts().record_format(RecordFormat::V1)).unwrap();
    let first = append(&log, 0, 10);
    log.close().unwrap();
    let meta = fs::read_to_string(t.path().join("rmqlog.meta")).unwrap();
    assert!(!meta.contains("record_format"));
    let log = CommitLog::open(&[t.path()], opts()).unwrap();
    let next = append(&log, 10, 11);
    log.close().unwrap();
    assert_eq!(magic_at(t.path(), next[0].1), MAGIC_V1);
    assert_eq!(next[0].1, first[9].1 + (HEADER_LEN + body(9).len()) as u64);
}
