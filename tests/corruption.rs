#![allow(clippy::unwrap_used)] // tests: a failed unwrap is the failure report
//! A corrupted byte in every field of a record, of both record formats, and in the segment
//! filler: cut when in the unflushed tail, reported (never returned as data) when in the middle
//! of the log, by read, scan, scan_batches and verify.

mod common;

use std::fs::{self, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use common::write_at;
use rmqlog::{CommitLog, Error, FlushMode, Options, RecordFormat, HEADER_LEN};

const SEG: u64 = 8192;

/// Byte positions inside a record of each format, one per field (docs/format.md).
fn classes(format: RecordFormat) -> [(&'static str, u64); 7] {
    let (crc, word) = match format {
        RecordFormat::V1 => ("body_crc", "header_crc"),
        RecordFormat::V2 => ("crc", "attributes"),
    };
    [
        ("length", 1),
        ("magic", 5),
        (crc, 9),
        (word, 13),
        ("offset", 18),
        ("timestamp", 26),
        ("body", HEADER_LEN as u64 + 3),
    ]
}

const FORMATS: [RecordFormat; 2] = [RecordFormat::V1, RecordFormat::V2];

fn opts() -> Options {
    Options::default().segment_size(SEG).flush(FlushMode::None)
}

/// The records of `log` from `scan_batches`, or its error.
#[cfg(feature = "arrow")]
fn batched(log: &CommitLog) -> Result<usize, String> {
    let reader = log
        .scan_batches(None, None, rmqlog::arrow::BatchOptions::default())
        .map_err(|e| e.to_string())?;
    let mut n = 0;
    for b in reader {
        n += b.map_err(|e| e.to_string())?.num_rows();
    }
    Ok(n)
}

fn body(i: usize) -> Vec<u8> {
    format!("body-{i:04}-").repeat(10).into_bytes()
}

fn fill(dir: &Path, n: usize, format: RecordFormat) -> Vec<u64> {
    let log = CommitLog::open(&[dir], opts().record_format(format)).unwrap();
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
    for (format, (class, at)) in FORMATS.iter().flat_map(|&f| classes(f).map(|c| (f, c))) {
        let class = format!("{format:?} {class}");
        let t = tempfile::tempdir().unwrap();
        let offs = fill(t.path(), 120, format);
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
            Err(Error::InvalidOffset { .. }) if class.ends_with("magic") => {}
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
        #[cfg(feature = "arrow")]
        assert!(batched(&log).is_err(), "{class}: scan_batches took it");
    }
}

#[test]
fn a_damaged_record_in_the_unflushed_tail_is_cut() {
    for (format, (class, at)) in FORMATS.iter().flat_map(|&f| classes(f).map(|c| (f, c))) {
        let t = tempfile::tempdir().unwrap();
        let offs = fill(t.path(), 120, format);
        let _ = fs::remove_file(t.path().join("rmqlog.meta")); // crashed before any checkpoint
        let victim = 117;
        let (path, pos) = locate(t.path(), offs[victim]);
        flip(&path, pos + at);
        let log = CommitLog::open(&[t.path()], opts()).unwrap();
        assert_eq!(
            log.max_offset().unwrap(),
            offs[victim],
            "{format:?} {class}"
        );
        assert!(log.verify().unwrap().is_empty(), "{format:?} {class}");
        for (i, &o) in offs[..victim].iter().enumerate() {
            assert_eq!(&*log.read(o).unwrap(), body(i).as_slice());
        }
        #[cfg(feature = "arrow")]
        assert_eq!(batched(&log), Ok(victim), "{format:?} {class}");
    }
}

#[test]
fn a_damaged_filler() {
    let t = tempfile::tempdir().unwrap();
    let offs = fill(t.path(), 120, RecordFormat::default());
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

/// A record of an older store, cut away by a crash and written again at the same offset, must not
/// be taken for the new one: its stored offset refuses it where another record starts.
#[test]
fn a_record_from_before_a_cut_is_refused_by_its_offset() {
    for format in FORMATS {
        let t = tempfile::tempdir().unwrap();
        let offs = fill(t.path(), 40, format);
        let (path, pos) = locate(t.path(), offs[10]);
        let len = (HEADER_LEN + body(10).len()) as u64;
        // Record 10's bytes, intact, copied over record 20's place (same length): a stale
        // record at an offset that is not its own.
        let bytes = fs::read(&path).unwrap();
        let stale = bytes[pos as usize..(pos + len) as usize].to_vec();
        let (path20, pos20) = locate(t.path(), offs[20]);
        let mut f = OpenOptions::new().write(true).open(&path20).unwrap();
        f.seek(SeekFrom::Start(pos20)).unwrap();
        f.write_all(&stale).unwrap();
        drop(f);
        let log = CommitLog::open(&[t.path()], opts()).unwrap();
        assert!(
            matches!(log.read(offs[20]), Err(Error::Corruption { .. })),
            "{format:?}"
        );
        let bad = log.verify().unwrap();
        assert_eq!(
            bad.iter().map(|b| b.start).collect::<Vec<_>>(),
            [offs[20]],
            "{format:?}"
        );
        assert!(bad[0].reason.contains("offset"), "{format:?}: {bad:?}");
    }
}

/// A record whose magic is damaged into the filler's (`0x524D51FF`, one byte away from either
/// record magic) but whose "length" does not reach the segment's end is damage: the scan ends
/// there with an error, rather than skipping the rest of the segment as if a filler closed it.
#[test]
fn a_magic_damaged_into_the_filler_s_is_not_a_filler() {
    for format in FORMATS {
        let t = tempfile::tempdir().unwrap();
        let offs = fill(t.path(), 120, format);
        let victim = 10;
        let (path, pos) = locate(t.path(), offs[victim]);
        let mut f = OpenOptions::new().write(true).open(&path).unwrap();
        f.seek(SeekFrom::Start(pos + 4)).unwrap();
        f.write_all(&[0xff]).unwrap();
        drop(f);
        let log = CommitLog::open(&[t.path()], opts()).unwrap();
        let scanned: Vec<_> = log.scan(None, None).unwrap().collect();
        assert_eq!(
            scanned.len(),
            victim + 1,
            "{format:?}: the scan went on or skipped"
        );
        assert!(
            matches!(scanned[victim], Err(Error::Corruption { .. })),
            "{format:?}: {:?}",
            scanned[victim]
        );
        #[cfg(feature = "arrow")]
        assert!(
            batched(&log).is_err(),
            "{format:?}: scan_batches skipped records"
        );
        assert_eq!(log.verify().unwrap().len(), 1, "{format:?}");
        for (i, &o) in offs.iter().enumerate().filter(|&(i, _)| i != victim) {
            assert_eq!(&*log.read(o).unwrap(), body(i).as_slice(), "{format:?} {i}");
        }
    }
}

/// `offset_for_timestamp` walks headers without CRCs and checks whole the two records that
/// decide its answer: damage elsewhere does not move the answer; damage that could (the deciding
/// records' timestamps, a length that jumps over the answer) is an error, never a wrong offset.
#[test]
fn a_timestamp_lookup_is_never_moved_by_damage() {
    for format in FORMATS {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("d");
        let log = CommitLog::open(&[&dir], opts().record_format(format)).unwrap();
        let mut offs = Vec::new();
        for group in 0..3 {
            offs.extend((0..20).map(|i| log.append(&body(group * 20 + i)).unwrap()));
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let ts: Vec<u64> = offs
            .iter()
            .map(|&o| log.read(o).unwrap().timestamp_ms())
            .collect();
        log.close().unwrap();
        let (target, answer) = (ts[40], offs[40]);
        assert!(ts[39] < target && locate(&dir, offs[39]).0 == locate(&dir, offs[41]).0);
        let lookup = || {
            let log = CommitLog::open(&[&dir], opts().read_only(true)).unwrap();
            log.offset_for_timestamp(target)
        };
        assert_eq!(lookup().unwrap(), answer);
        let cases: [(&str, usize, Vec<u8>); 4] = [
            // A body byte of an earlier record: not a deciding record, the answer stands.
            ("an earlier body", 10, vec![b'#']),
            // The answer's timestamp lowered: the walk passes it, then checks it whole.
            ("the answer's timestamp", 40, 0u64.to_le_bytes().to_vec()),
            // An earlier timestamp raised: the walk stops there and checks it whole.
            ("an earlier timestamp", 20, u64::MAX.to_le_bytes().to_vec()),
            // The length before the answer jumps three records: onto a real record start.
            ("a length over the answer", 39, {
                let len = (offs[42] - offs[39]) as u32;
                len.to_le_bytes().to_vec()
            }),
        ];
        for (what, i, bytes) in cases {
            let (path, pos) = locate(&dir, offs[i]);
            let at = match what {
                "an earlier body" => pos + HEADER_LEN as u64 + 3,
                "a length over the answer" => pos,
                _ => pos + 24,
            };
            let original = fs::read(&path).unwrap();
            write_at(&path, at, &bytes);
            match (what, lookup()) {
                ("an earlier body", got) => assert_eq!(got.unwrap(), answer, "{format:?}"),
                (_, Ok(got)) => panic!("{format:?}, {what}: answered {got}, not an error"),
                (_, Err(e)) => assert!(
                    matches!(e, Error::Corruption { .. }),
                    "{format:?}, {what}: {e}"
                ),
            }
            fs::write(&path, original).unwrap();
        }
        assert_eq!(lookup().unwrap(), answer);
    }
}

/// One byte turning a record's magic into the filler's must not read as a filler, in two places
/// where the record's own length can pass for a filler's: the last record of the log (its end is
/// the published end) and a record that ends exactly at its segment's end. Every reader reports
/// it; `offset_for_timestamp` gives an error, never the offset after it.
#[test]
fn one_byte_of_magic_never_makes_a_record_a_filler() {
    for format in FORMATS {
        for case in ["the last record", "a record ending its segment"] {
            let root = tempfile::tempdir().unwrap();
            let dir = root.path().join("d");
            let log = CommitLog::open(&[&dir], opts().record_format(format)).unwrap();
            let first = log.append(&body(0)).unwrap();
            std::thread::sleep(std::time::Duration::from_millis(3)); // the victim's own timestamp
            let (victim, after) = match case {
                "the last record" => (log.append(&body(1)).unwrap(), None),
                _ => {
                    // The rest of the first segment exactly, then one record in the next.
                    let fill = SEG as usize - (first as usize + body(0).len() + HEADER_LEN);
                    let v = log.append(&vec![b'f'; fill - HEADER_LEN]).unwrap();
                    (v, Some(log.append(&body(2)).unwrap()))
                }
            };
            let ts = log.read(victim).unwrap().timestamp_ms();
            log.close().unwrap();
            let (path, pos) = locate(&dir, victim);
            write_at(&path, pos + 4, &[0xFF]); // the magic's low byte: 0x524D51FF, the filler's
            let log = CommitLog::open(&[&dir], opts().read_only(true)).unwrap();
            let what = format!("{format:?}, {case}");
            let scanned: Vec<_> = log.scan(None, None).unwrap().collect();
            assert!(
                scanned.iter().any(|r| r.is_err()),
                "{what}: the scan skipped the record silently"
            );
            assert!(
                !log.verify().unwrap().is_empty(),
                "{what}: verify found nothing"
            );
            match log.offset_for_timestamp(ts) {
                Ok(got) => panic!("{what}: answered {got} (victim {victim}, next {after:?})"),
                Err(e) => assert!(matches!(e, Error::Corruption { .. }), "{what}: {e}"),
            }
        }
    }
}
