#![allow(clippy::unwrap_used)] // tests: a failed unwrap is the failure report
//! `record_count()` and `records_between()` against a scan of the same log, through rolls,
//! batches, `truncate_before`, retention, reopens, a lost or wrong `rmqlog.counts`, a torn tail,
//! damage that recovery cuts, a follower, and consumers' lag.

mod common;

use std::fs;
use std::path::{Path, PathBuf};

use common::{body, dirs, quiet, segment_of, write_at};
use rmqlog::{CommitLog, ConsumerOptions, Options, Start};

const COUNTS: &str = "rmqlog.counts";

/// The offsets of every record, by a scan.
fn scanned(log: &CommitLog) -> Vec<u64> {
    log.scan(None, None)
        .unwrap()
        .map(|r| r.unwrap().offset())
        .collect()
}

/// The log's count, and the count of `[a, b)` for pairs of record offsets and odd offsets
/// around them, are what a scan finds.
fn check(log: &CommitLog) -> usize {
    let offs = scanned(log);
    assert_eq!(
        log.record_count().unwrap(),
        offs.len() as u64,
        "record_count"
    );
    let end = log.max_offset().unwrap();
    let between = |a: u64, b: u64| offs.iter().filter(|&&o| a <= o && o < b).count() as u64;
    let step = (offs.len() / 9).max(1);
    let mut points: Vec<u64> = offs.iter().step_by(step).copied().collect();
    points.extend(points.clone().iter().map(|o| o + 3)); // inside a record
    points.extend([0, end, end + 100, u64::MAX]);
    for &a in &points {
        for &b in &points {
            assert_eq!(
                log.records_between(a, b).unwrap(),
                between(a, b),
                "records_between({a}, {b})"
            );
        }
    }
    offs.len()
}

fn append_mixed(log: &CommitLog, from: u64, n: u64) {
    let mut i = from;
    while i < from + n {
        if i.is_multiple_of(5) {
            let batch: Vec<Vec<u8>> = (i..i + 4)
                .map(|k| body(k, 100 + (k as usize * 53) % 900))
                .collect();
            log.append_batch(&batch).unwrap();
            i += 4;
        } else {
            log.append(&body(i, 8 + (i as usize * 37) % 700)).unwrap();
            i += 1;
        }
    }
}

fn counts_file(dir: &Path) -> PathBuf {
    dir.join(COUNTS)
}

#[test]
fn appends_rolls_and_batches_are_counted() {
    let (_t, d) = dirs(2);
    let log = CommitLog::open(&d, quiet()).unwrap();
    assert_eq!(log.record_count().unwrap(), 0);
    assert_eq!(log.records_between(0, u64::MAX).unwrap(), 0);
    append_mixed(&log, 0, 60);
    let segs = log.segments().unwrap();
    assert!(segs.len() > 4, "several rolls: {segs:?}");
    assert_eq!(check(&log), 60);
    // A batch that fills several segments at once.
    let big: Vec<Vec<u8>> = (0..12).map(|k| body(k, 1500)).collect();
    log.append_batch(&big).unwrap();
    assert_eq!(check(&log), 72);
    // A record that leaves less than a filler's room: the segment is full without one.
    let seg = log.segments().unwrap().pop().unwrap();
    let room = seg.size - seg.written;
    log.append(&body(1, room as usize - 32 - 4)).unwrap();
    log.append(b"next segment").unwrap();
    assert_eq!(check(&log), 74);
}

#[test]
fn truncation_and_retention_take_their_records_out() {
    let (_t, d) = dirs(1);
    let log = CommitLog::open(&d, quiet()).unwrap();
    append_mixed(&log, 0, 80);
    let segs = log.segments().unwrap();
    let min = log.truncate_before(segs[3].start_offset).unwrap();
    assert_eq!(min, segs[3].start_offset);
    let left = check(&log);
    assert!(left < 80, "{left}");
    log.close().unwrap();
    // Retention by size, on a reopened writer (the counts of the segments it deletes come from
    // rmqlog.counts).
    let log = CommitLog::open(&d, quiet().retention_bytes(Some(3 * 4096))).unwrap();
    assert_eq!(check(&log), left);
    assert!(log.clean(true).unwrap() > 0);
    assert!(check(&log) < left);
}

#[test]
fn a_reopened_store_counts_from_rmqlog_counts_and_verify_checks_them() {
    let (_t, d) = dirs(2);
    let log = CommitLog::open(&d, quiet()).unwrap();
    append_mixed(&log, 0, 100);
    log.close().unwrap();
    assert!(d.iter().all(|d| counts_file(d).is_file()));
    for opts in [quiet().read_only(true), quiet()] {
        let log = CommitLog::open(&d, opts).unwrap();
        assert_eq!(check(&log), 100);
        let v = log.verify_counted(false, |_, _| {}).unwrap();
        assert_eq!((v.records, v.damaged.len()), (100, 0));
    }
    // A counts file that says one record less for the first segment (its CRC redone): a read
    // takes it as it is, without walking the segment, and verify reports the difference.
    let path = counts_file(&d[0]);
    let mut b = fs::read(&path).unwrap();
    let records_at = 88 + 24; // the first entry's record count
    let n = u64::from_le_bytes(b[records_at..records_at + 8].try_into().unwrap());
    b[records_at..records_at + 8].copy_from_slice(&(n - 1).to_le_bytes());
    let crc = crc32fast::hash(&b[16..]);
    b[12..16].copy_from_slice(&crc.to_le_bytes());
    for dir in &d {
        fs::write(counts_file(dir), &b).unwrap();
    }
    let ro = CommitLog::open(&d, quiet().read_only(true)).unwrap();
    assert_eq!(ro.record_count().unwrap(), 99);
    let v = ro.verify_counted(false, |_, _| {}).unwrap();
    assert_eq!(v.records, 100);
    assert_eq!(v.damaged.len(), 1, "{:?}", v.damaged);
    assert!(v.damaged[0].reason.contains("counts"), "{:?}", v.damaged);
}

#[test]
fn a_store_without_counts_is_counted_once_and_then_records_them() {
    let (_t, d) = dirs(2);
    let log = CommitLog::open(&d, quiet()).unwrap();
    append_mixed(&log, 0, 90);
    log.close().unwrap();
    // As a store of an older rmqlog: no counts file, or a damaged one.
    fs::remove_file(counts_file(&d[0])).unwrap();
    fs::write(counts_file(&d[1]), b"RMQLCNTS garbage").unwrap();
    let ro = CommitLog::open(&d, quiet().read_only(true)).unwrap();
    assert_eq!(check(&ro), 90);
    drop(ro);
    assert!(
        !counts_file(&d[0]).exists(),
        "a read-only open writes nothing"
    );
    let log = CommitLog::open(&d, quiet()).unwrap();
    assert_eq!(check(&log), 90);
    log.close().unwrap();
    assert!(
        counts_file(&d[0]).is_file(),
        "the writer recorded what it counted"
    );
    let log = CommitLog::open(&d, quiet()).unwrap();
    assert_eq!(check(&log), 90);
}

/// Turns a closed store into one that looks crashed with nothing flushed: the checkpoint is
/// gone, so recovery scans from the head.
fn forget_checkpoint(dirs: &[PathBuf]) {
    for d in dirs {
        let _ = fs::remove_file(d.join("rmqlog.meta"));
    }
}

#[test]
fn a_torn_tail_is_not_counted() {
    let (_t, d) = dirs(1);
    let log = CommitLog::open(&d, quiet()).unwrap();
    append_mixed(&log, 0, 40);
    let end = log.max_offset().unwrap();
    let (path, pos) = segment_of(&log, end);
    log.close().unwrap();
    forget_checkpoint(&d);
    // Half a record's header after the last one, as a crash mid-append leaves it.
    write_at(&path, pos, &[200, 0, 0, 0, 0x02, 0x51, 0x4D, 0x52, 9, 9, 9]);
    let log = CommitLog::open(&d, quiet()).unwrap();
    assert_eq!(log.max_offset().unwrap(), end);
    assert_eq!(check(&log), 40);
    log.append(b"after the cut").unwrap();
    assert_eq!(check(&log), 41);
}

#[test]
fn counts_recorded_past_a_cut_are_forgotten_before_the_offsets_are_written_again() {
    let (_t, d) = dirs(1);
    let log = CommitLog::open(&d, quiet()).unwrap();
    append_mixed(&log, 0, 100);
    let offs = scanned(&log);
    log.close().unwrap();
    forget_checkpoint(&d);
    // Damage in the third segment: recovery ends the log there and removes the later segments,
    // whose counts rmqlog.counts recorded.
    let victim = offs[offs.len() / 3];
    let (path, pos) = {
        let ro = CommitLog::open(&d, quiet().read_only(true)).unwrap();
        segment_of(&ro, victim)
    };
    write_at(&path, pos + 4, b"\xEE");
    let log = CommitLog::open(&d, quiet()).unwrap();
    assert_eq!(log.max_offset().unwrap(), victim);
    let kept = check(&log);
    assert_eq!(kept, offs.len() / 3);
    // The same offsets again, with other records: no count of the old ones may come back.
    for i in 0..60 {
        log.append(&body(i, 50 + i as usize)).unwrap();
    }
    log.close().unwrap();
    for opts in [quiet().read_only(true), quiet()] {
        let log = CommitLog::open(&d, opts).unwrap();
        assert_eq!(check(&log), kept + 60);
        assert!(log.verify().unwrap().is_empty());
    }
}

#[test]
fn a_follower_counts_what_the_writer_appends() {
    let (_t, d) = dirs(2);
    let log = CommitLog::open(&d, quiet()).unwrap();
    append_mixed(&log, 0, 30);
    log.flush().unwrap();
    let ro = CommitLog::open(&d, quiet().read_only(true)).unwrap();
    assert_eq!(check(&ro), 30);
    for round in 1..4 {
        append_mixed(&log, 100 * round, 25);
        ro.refresh().unwrap();
        assert_eq!(check(&ro), 30 + 25 * round as usize);
    }
    log.truncate_before(log.segments().unwrap()[2].start_offset)
        .unwrap();
    ro.refresh().unwrap();
    assert_eq!(check(&ro), check(&log));
}

#[test]
fn consumers_lag_in_records() {
    let (_t, d) = dirs(1);
    let log = CommitLog::open(&d, quiet().retain_unconsumed(true)).unwrap();
    append_mixed(&log, 0, 50);
    let opts = ConsumerOptions {
        start: Start::Earliest,
        exclusive: true,
        ..ConsumerOptions::default()
    };
    let mut c = log.consumer("c", opts).unwrap();
    assert_eq!(c.lag().unwrap().records, 50);
    let got = c.poll(17, None).unwrap().len() as u64;
    assert!(got > 0);
    c.commit(None).unwrap();
    assert_eq!(c.lag().unwrap().records, 50 - got);
    append_mixed(&log, 50, 10);
    assert_eq!(c.lag().unwrap().records, 60 - got);
    let info = log.consumers().unwrap();
    assert_eq!(info[0].lag_records, 60 - got);
    let holder = log.retention_holder().unwrap().unwrap();
    assert_eq!((holder.name.as_str(), holder.lag_records), ("c", 60 - got));
    assert_eq!(info[0].lag_bytes, log.max_offset().unwrap() - c.committed());
    // Past its records (they were deleted): the lag is what is left.
    log.truncate_before(log.max_offset().unwrap()).unwrap();
    let left = log.record_count().unwrap();
    assert_eq!(log.consumers().unwrap()[0].lag_records, left);
}

#[test]
fn a_new_store_opened_with_options_keeps_counting() {
    // The defaults (64 MiB segments, async flush, a background thread): one segment, its count
    // kept by the appends alone.
    let (_t, d) = dirs(1);
    let log = CommitLog::open(&d, Options::default()).unwrap();
    append_mixed(&log, 0, 500);
    assert_eq!(check(&log), 500);
    log.close().unwrap();
    let log = CommitLog::open(&d, Options::default().read_only(true)).unwrap();
    assert_eq!(check(&log), 500);
}

#[test]
fn a_follower_counting_segments_deleted_under_it_counts_the_log_as_it_is() {
    let (_t, d) = dirs(1);
    let log = CommitLog::open(&d, quiet()).unwrap();
    append_mixed(&log, 0, 80);
    log.flush().unwrap();
    // The follower knows no count of the sealed segments: it would walk them.
    fs::remove_file(counts_file(&d[0])).unwrap();
    let ro = CommitLog::open(&d, quiet().read_only(true)).unwrap();
    let segs = log.segments().unwrap();
    log.truncate_before(segs[3].start_offset).unwrap();
    assert!(!Path::new(&segs[0].path).exists());
    // Its view still lists the deleted segments: their files are gone when it walks them, and
    // the count starts again on the log as it is now.
    assert_eq!(ro.record_count().unwrap(), log.record_count().unwrap());
    assert_eq!(ro.min_offset().unwrap(), segs[3].start_offset);
    assert_eq!(check(&ro), check(&log));
}
