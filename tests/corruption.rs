#![allow(clippy::unwrap_used)] // tests: a failed unwrap is the failure report
//! A corrupted byte in every field of a record and in the segment filler: cut when in the
//! unflushed tail, reported (never returned as data) when in the middle of the log.

use std::fs::{self, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use rmqlog::{CommitLog, Error, FlushMode, Options, HEADER_LEN};

const SEG: u64 = 8192;

/// Byte positions inside a record: length, magic, body CRC, header CRC, offset, timestamp, body.
const CLASSES: [(&str, u64); 7] = [
    ("length", 1),
    ("magic", 5),
    ("body_crc", 9),
    ("header_crc", 13),
    ("offset", 18),
    ("timestamp", 26),
    ("body", HEADER_LEN as u64 + 3),
];

fn opts() -> Options {
    Options::default().segment_size(SEG).flush(FlushMode::None)
}

fn body(i: usize) -> Vec<u8> {
    format!("body-{i:04}-").repeat(10).into_bytes()
}

fn fill(dir: &Path, n: usize) -> Vec<u64> {
    let log = CommitLog::open(&[dir], opts()).unwrap();
    let offs = (0..n).map(|i| log.append(&body(i)).unwrap()).collect();
    log.close().unwrap();
    offs
}

fn locate(dir: &Path, offset: u64) -> (PathBuf, u64) {
    let start = offset / SEG * SEG;
    (dir.join(format!("{start:020}")), offset - start)
}

fn flip(path: &Path, pos: u64) {
    let mut f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let mut b = [0u8; 1];
    f.seek(SeekFrom::Start(pos)).unwrap();
    f.read_exact(&mut b).unwrap();
    f.seek(SeekFrom::Start(pos)).unwrap();
    f.write_all(&[b[0] ^ 0x5a]).unwrap();
}

#[test]
fn a_damaged_record_in_the_middle_is_reported_never_returned() {
    for (class, at) in CLASSES {
        let t = tempfile::tempdir().unwrap();
        let offs = fill(t.path(), 120);
        let victim = 30;
        let (path, pos) = locate(t.path(), offs[victim]);
        flip(&path, pos + at);
        let log = CommitLog::open(&[t.path()], opts()).unwrap();
        assert_eq!(
            log.max_offset().unwrap(),
            offs[119] + (HEADER_LEN + body(119).len()) as u64
        );
        match log.read(offs[victim]) {
            Err(Error::Corruption { .. }) => {}
            // A damaged magic leaves nothing that says a record starts here.
            Err(Error::InvalidOffset { .. }) if class == "magic" => {}
            other => panic!("{class}: read of the damaged record gave {other:?}"),
        }
        let bad = log.verify().unwrap();
        assert_eq!(bad.len(), 1, "{class}: {bad:?}");
        assert_eq!(
            (bad[0].start, bad[0].end),
            (offs[victim], offs[victim + 1]),
            "{class}"
        );
        for (i, &o) in offs.iter().enumerate().filter(|&(i, _)| i != victim) {
            assert_eq!(
                &*log.read(o).unwrap(),
                body(i).as_slice(),
                "{class}: record {i}"
            );
        }
        let scanned: Vec<_> = log.scan(None, None).unwrap().collect();
        assert!(
            scanned[victim].is_err(),
            "{class}: the scan returned damaged data"
        );
    }
}

#[test]
fn a_damaged_record_in_the_unflushed_tail_is_cut() {
    for (class, at) in CLASSES {
        let t = tempfile::tempdir().unwrap();
        let offs = fill(t.path(), 120);
        let _ = fs::remove_file(t.path().join("rmqlog.meta")); // crashed before any checkpoint
        let victim = 117;
        let (path, pos) = locate(t.path(), offs[victim]);
        flip(&path, pos + at);
        let log = CommitLog::open(&[t.path()], opts()).unwrap();
        assert_eq!(log.max_offset().unwrap(), offs[victim], "{class}");
        assert!(log.verify().unwrap().is_empty(), "{class}");
        for (i, &o) in offs[..victim].iter().enumerate() {
            assert_eq!(&*log.read(o).unwrap(), body(i).as_slice());
        }
    }
}

#[test]
fn a_damaged_filler() {
    let t = tempfile::tempdir().unwrap();
    let offs = fill(t.path(), 120);
    // The filler closing the first segment sits right after its last record.
    let last_in_first = offs.iter().rposition(|&o| o < SEG).unwrap();
    let filler = offs[last_in_first] + (HEADER_LEN + body(last_in_first).len()) as u64;
    assert!(filler < SEG && offs[last_in_first + 1] == SEG);
    flip(&t.path().join(format!("{:020}", 0)), filler + 5);
    // In the middle of the log: reported from the filler to the segment's end; records intact.
    {
        let log = CommitLog::open(&[t.path()], opts()).unwrap();
        let bad = log.verify().unwrap();
        assert_eq!(bad.len(), 1);
        assert_eq!((bad[0].start, bad[0].end), (filler, SEG));
        for (i, &o) in offs.iter().enumerate() {
            assert_eq!(&*log.read(o).unwrap(), body(i).as_slice());
        }
    }
    // In the unflushed tail (no checkpoint): the log ends at the damaged filler.
    let _ = fs::remove_file(t.path().join("rmqlog.meta"));
    let log = CommitLog::open(&[t.path()], opts()).unwrap();
    assert_eq!(log.max_offset().unwrap(), filler);
    assert_eq!(log.segments().unwrap().len(), 1);
}
