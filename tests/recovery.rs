#![allow(clippy::unwrap_used)] // tests: a failed unwrap is the failure report
//! Recovery and layout checks through the public Rust API, on real files.

mod common;

use std::fs::{self, OpenOptions};
use std::path::{Path, PathBuf};

use common::{segment_of, write_at};
use rmqlog::{CommitLog, Error, FlushMode, Options, HEADER_LEN};

const SEG: u64 = 8192;

fn opts() -> Options {
    Options::default().segment_size(SEG).flush(FlushMode::None)
}

fn dirs(root: &Path, n: usize) -> Vec<PathBuf> {
    (0..n).map(|i| root.join(format!("d{i}"))).collect()
}

fn body(i: usize) -> Vec<u8> {
    format!("record-{i}-").repeat(i % 7 + 1).into_bytes()
}

/// Writes `n` records, closes cleanly, returns their offsets.
fn fill(dirs: &[PathBuf], n: usize) -> Vec<u64> {
    let log = CommitLog::open(dirs, opts()).unwrap();
    let offs = (0..n).map(|i| log.append(&body(i)).unwrap()).collect();
    log.close().unwrap();
    offs
}

/// Turns a clean store into one that looks crashed with nothing flushed: the checkpoint is gone.
fn forget_checkpoint(dirs: &[PathBuf]) {
    for d in dirs {
        let _ = fs::remove_file(d.join("rmqlog.meta"));
    }
}

#[test]
fn random_bytes_after_the_tail_are_cut() {
    // Kafka LogLoaderTest.testCorruptLog: garbage appended to the active segment.
    let t = tempfile::tempdir().unwrap();
    let d = dirs(t.path(), 3);
    let offs = fill(&d, 300);
    let (end, path, pos) = {
        let log = CommitLog::open(&d, opts().read_only(true)).unwrap();
        let end = log.max_offset().unwrap();
        let (path, pos) = segment_of(&log, end);
        (end, path, pos)
    };
    forget_checkpoint(&d);
    let garbage: Vec<u8> = (0..500u32).map(|i| (i * 7919 % 251) as u8).collect();
    let room = (SEG - pos) as usize;
    // Enough garbage to look like a header and more: with no room the test would check nothing.
    assert!(
        room >= 64,
        "only {room} bytes after the tail in its segment"
    );
    write_at(&path, pos, &garbage[..garbage.len().min(room)]);
    let log = CommitLog::open(&d, opts()).unwrap();
    assert_eq!(log.max_offset().unwrap(), end);
    for (i, &o) in offs.iter().enumerate() {
        assert_eq!(&*log.read(o).unwrap(), body(i).as_slice());
    }
}

#[test]
fn corruption_from_a_random_record_keeps_exactly_the_records_before() {
    // Kafka LogSegmentTest.testRecoveryWithCorruptMessage, repeated.
    for round in 0..10usize {
        let t = tempfile::tempdir().unwrap();
        let d = dirs(t.path(), 2);
        let offs = fill(&d, 200);
        forget_checkpoint(&d);
        let victim = 37 + round * 13;
        {
            let log = CommitLog::open(&d, opts().read_only(true)).unwrap();
            let (path, pos) = segment_of(&log, offs[victim]);
            // Damage one byte of the body, so only the body CRC can tell.
            write_at(&path, pos + HEADER_LEN as u64 + 1, b"\xff");
        }
        let log = CommitLog::open(&d, opts()).unwrap();
        assert_eq!(log.max_offset().unwrap(), offs[victim], "round {round}");
        for (i, &o) in offs[..victim].iter().enumerate() {
            assert_eq!(&*log.read(o).unwrap(), body(i).as_slice());
        }
        assert!(matches!(
            log.read(offs[victim]),
            Err(Error::OffsetOutOfRange { .. })
        ));
        // Later segments were removed; the cut segment continues.
        let o = log.append(b"again").unwrap();
        assert_eq!(o, offs[victim]);
    }
}

#[test]
fn corruption_below_the_flushed_offset_is_reported_not_cut() {
    let t = tempfile::tempdir().unwrap();
    let d = dirs(t.path(), 1);
    let offs = fill(&d, 50);
    let log = CommitLog::open(&d, opts().read_only(true)).unwrap();
    let (path, pos) = segment_of(&log, offs[10]);
    drop(log);
    write_at(&path, pos + HEADER_LEN as u64, b"\x00\x01");
    let log = CommitLog::open(&d, opts()).unwrap();
    assert!(matches!(log.read(offs[10]), Err(Error::Corruption { .. })));
    assert_eq!(&*log.read(offs[49]).unwrap(), body(49).as_slice());
    let scanned: Vec<_> = log.scan(None, None).unwrap().collect();
    assert_eq!(scanned.len(), 11);
    assert!(matches!(scanned[10], Err(Error::Corruption { .. })));
}

#[test]
fn a_left_out_directory_is_named() {
    let t = tempfile::tempdir().unwrap();
    let d = dirs(t.path(), 3);
    fill(&d, 400);
    let err = CommitLog::open(&d[..2], opts()).unwrap_err().to_string();
    assert!(err.contains("left out"), "{err}");
    assert!(err.contains("d2"), "{err}");
    // A reader given any one directory finds the others.
    let ro = CommitLog::open(&d[2..], opts().read_only(true)).unwrap();
    assert_eq!(ro.dirs().unwrap().len(), 3);
    assert!(ro.read(0).is_ok());
}

#[test]
fn a_missing_head_or_tail_is_reported_even_without_the_directory() {
    let t = tempfile::tempdir().unwrap();
    let d = dirs(t.path(), 3);
    fill(&d, 400);
    // The directory vanished entirely (a failed disk): nothing to list there.
    fs::rename(&d[0], t.path().join("elsewhere")).unwrap();
    let err = CommitLog::open(&d[1..], opts()).unwrap_err();
    assert!(matches!(err, Error::Configuration(_)), "{err:?}");
    let err = err.to_string();
    assert!(
        err.contains("not found") && err.contains("needs offsets ["),
        "{err}"
    );
    assert!(err.contains(&*d[0].to_string_lossy()), "{err}");
}

#[test]
fn the_same_segment_with_data_in_two_directories_fails_closed() {
    let t = tempfile::tempdir().unwrap();
    let d = dirs(t.path(), 2);
    fill(&d, 100);
    let first = d[0].join("00000000000000000000");
    fs::copy(&first, d[1].join("00000000000000000000")).unwrap();
    let err = CommitLog::open(&d, opts()).unwrap_err().to_string();
    assert!(err.contains("several directories"), "{err}");
    assert!(err.contains("d0") && err.contains("d1"), "{err}");
}

#[test]
fn a_never_written_duplicate_is_removed_by_a_writer() {
    let t = tempfile::tempdir().unwrap();
    let d = dirs(t.path(), 2);
    let offs = fill(&d, 100);
    let dup = d[1].join("00000000000000000000");
    fs::write(&dup, vec![0u8; SEG as usize]).unwrap();
    let ro = CommitLog::open(&d, opts().read_only(true)).unwrap();
    assert_eq!(&*ro.read(offs[3]).unwrap(), body(3).as_slice());
    drop(ro);
    assert!(dup.exists(), "a reader never deletes");
    let log = CommitLog::open(&d, opts()).unwrap();
    assert!(!dup.exists());
    assert_eq!(&*log.read(offs[3]).unwrap(), body(3).as_slice());
}

#[test]
fn a_truncated_segment_file_is_named() {
    let t = tempfile::tempdir().unwrap();
    let d = dirs(t.path(), 1);
    let offs = fill(&d, 400);
    let victim = d[0].join("00000000000000008192");
    let f = OpenOptions::new().write(true).open(&victim).unwrap();
    f.set_len(5000).unwrap();
    // A sealed segment's length is checked when it is first mapped (the listing takes lengths
    // from the names): the open succeeds, reads there fail naming the file, the rest reads.
    let log = CommitLog::open(&d, opts()).unwrap();
    let inside = offs
        .iter()
        .copied()
        .find(|&o| (8192..16384).contains(&o))
        .unwrap();
    let err = log.read(inside).unwrap_err().to_string();
    assert!(err.contains("00000000000000008192"), "{err}");
    assert!(err.contains("5000"), "{err}");
    assert_eq!(&*log.read(offs[0]).unwrap(), body(0).as_slice());
    assert_eq!(&*log.read(offs[399]).unwrap(), body(399).as_slice());
    // The last segment's length is still checked at open.
    drop(log);
    let last = d[0].join("00000000000000024576");
    OpenOptions::new()
        .write(true)
        .open(&last)
        .unwrap()
        .set_len(6000)
        .unwrap();
    let err = CommitLog::open(&d, opts()).unwrap_err().to_string();
    assert!(err.contains("6000"), "{err}");
}

#[test]
fn foreign_files_are_left_alone() {
    let t = tempfile::tempdir().unwrap();
    let d = dirs(t.path(), 1);
    fs::create_dir_all(&d[0]).unwrap();
    fs::write(d[0].join("README"), b"not ours").unwrap();
    fs::write(d[0].join("123"), b"not ours either").unwrap();
    let offs = fill(&d, 10);
    let log = CommitLog::open(&d, opts()).unwrap();
    assert_eq!(log.segments().unwrap().len(), 1);
    assert_eq!(&*log.read(offs[9]).unwrap(), body(9).as_slice());
    assert_eq!(fs::read(d[0].join("README")).unwrap(), b"not ours");
}

#[test]
fn leftover_temp_segments_are_removed() {
    let t = tempfile::tempdir().unwrap();
    let d = dirs(t.path(), 1);
    fill(&d, 10);
    let tmp = d[0].join("00000000000000008192.tmp");
    fs::write(&tmp, b"").unwrap();
    let log = CommitLog::open(&d, opts()).unwrap();
    assert!(!tmp.exists());
    assert_eq!(log.segments().unwrap().len(), 1);
}

#[test]
fn segment_size_change_keeps_old_segments_and_offsets_contiguous() {
    let t = tempfile::tempdir().unwrap();
    let d = dirs(t.path(), 2);
    let offs = fill(&d, 300);
    let log = CommitLog::open(&d, opts().segment_size(3 * 4096)).unwrap();
    let more: Vec<u64> = (300..600).map(|i| log.append(&body(i)).unwrap()).collect();
    let segs = log.segments().unwrap();
    assert!(segs.iter().any(|s| s.size == SEG) && segs.iter().any(|s| s.size == 3 * 4096));
    for w in segs.windows(2) {
        assert_eq!(w[0].start_offset + w[0].size, w[1].start_offset);
    }
    let before = log.fallback_lookups();
    for (i, &o) in offs.iter().chain(&more).enumerate() {
        assert_eq!(&*log.read(o).unwrap(), body(i).as_slice());
    }
    assert!(log.fallback_lookups() > before);
    log.close().unwrap();
    let log = CommitLog::open(&d, opts().segment_size(4096)).unwrap();
    for (i, &o) in offs.iter().chain(&more).enumerate() {
        assert_eq!(&*log.read(o).unwrap(), body(i).as_slice());
    }
}

#[test]
fn stale_bytes_past_a_cut_never_come_back() {
    let t = tempfile::tempdir().unwrap();
    let d = dirs(t.path(), 1);
    let offs = fill(&d, 30);
    forget_checkpoint(&d);
    // Break record 20's length word: recovery ends the log there and zeroes the rest.
    let (path, pos) = {
        let log = CommitLog::open(&d, opts().read_only(true)).unwrap();
        segment_of(&log, offs[20])
    };
    write_at(&path, pos, b"\x01");
    {
        let log = CommitLog::open(&d, opts()).unwrap();
        assert_eq!(log.max_offset().unwrap(), offs[20]);
        // Same size as the old record 20: the next one would sit exactly on old record 21.
        assert_eq!(log.append(&body(20)).unwrap(), offs[20]);
        log.close().unwrap();
    }
    forget_checkpoint(&d);
    let log = CommitLog::open(&d, opts()).unwrap();
    assert_eq!(log.max_offset().unwrap(), offs[21]);
}
