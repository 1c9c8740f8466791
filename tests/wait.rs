#![allow(clippy::unwrap_used)] // tests: a failed unwrap is the failure report
//! Waiting for records: `wait`, `wait_durable`, following scans and batches, in the writer's log
//! and in followers (read-only opens, which see the writer only through the store's files and its
//! control page, as a follower in another process does). Real processes are in
//! tests/test_wait.py.

mod common;

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::{body, check_body, dirs, quiet};
use rmqlog::{CommitLog, Error, FlushMode, Follow, Options};

fn follower(paths: &[std::path::PathBuf]) -> CommitLog {
    CommitLog::open(paths, Options::default().read_only(true)).unwrap()
}

const LONG: Option<Duration> = Some(Duration::from_secs(30));

#[test]
fn wait_returns_when_another_thread_appends_and_times_out_otherwise() {
    let (_t, d) = dirs(2);
    let log = Arc::new(CommitLog::open(&d, quiet()).unwrap());
    let end = log.max_offset().unwrap();
    let t = Instant::now();
    assert_eq!(log.wait(end, Some(Duration::from_millis(50))).unwrap(), end);
    assert!(t.elapsed() >= Duration::from_millis(45));

    let appender = {
        let log = Arc::clone(&log);
        thread::spawn(move || {
            thread::sleep(Duration::from_millis(50));
            log.append(b"x").unwrap()
        })
    };
    let now = log.wait(end, LONG).unwrap();
    let off = appender.join().unwrap();
    assert!(now > off, "end {now} after the record at {off}");
    assert_eq!(&*log.read(off).unwrap(), b"x");
}

#[test]
fn a_follower_wakes_for_appends_rolls_and_truncations() {
    let (_t, d) = dirs(2);
    let log = Arc::new(CommitLog::open(&d, quiet()).unwrap());
    let first = log.append(&body(0, 100)).unwrap();
    let ro = Arc::new(follower(&d[1..]));
    assert_eq!(ro.max_offset().unwrap(), log.max_offset().unwrap());

    // 200 records of 100 B cross several 4 KiB segments in both directories.
    let writer = {
        let log = Arc::clone(&log);
        thread::spawn(move || {
            for i in 1..200 {
                log.append(&body(i, 100)).unwrap();
                if i % 50 == 0 {
                    thread::sleep(Duration::from_millis(5));
                }
            }
        })
    };
    let mut next = first;
    let mut seen = 0u64;
    while seen < 200 {
        let end = ro.wait(next, LONG).unwrap();
        assert!(end > next, "no timeout expected");
        for rec in ro.scan(Some(next), None).unwrap() {
            let rec = rec.unwrap();
            assert_eq!(check_body(&rec), Some(seen));
            seen += 1;
            next = rec.next_offset();
        }
    }
    writer.join().unwrap();
    assert!(
        ro.segments().unwrap().len() > 2,
        "the follower saw the rolls"
    );

    // A truncation is a change of the segment list: the next wait takes it in.
    let head = log.truncate_before(log.max_offset().unwrap()).unwrap();
    let end = log.max_offset().unwrap();
    log.append(b"after").unwrap();
    ro.wait(end, LONG).unwrap();
    assert_eq!(ro.min_offset().unwrap(), head);
    assert_eq!(&*ro.read(end).unwrap(), b"after");
}

#[test]
fn close_ends_a_wait_in_progress() {
    let (_t, d) = dirs(1);
    let log = Arc::new(CommitLog::open(&d, quiet()).unwrap());
    let ro = Arc::new(follower(&d));
    for waiting in [Arc::clone(&log), Arc::clone(&ro)] {
        let end = waiting.max_offset().unwrap();
        let waiter = {
            let w = Arc::clone(&waiting);
            thread::spawn(move || w.wait(end, None))
        };
        thread::sleep(Duration::from_millis(50));
        waiting.close().unwrap();
        assert!(matches!(waiter.join().unwrap(), Err(Error::Closed)));
    }
}

#[test]
fn a_durable_wait_returns_once_the_record_is_flushed() {
    let (_t, d) = dirs(1);
    let log = Arc::new(CommitLog::open(&d, quiet()).unwrap());
    let ro = Arc::new(follower(&d));
    let off = log.append(b"r").unwrap();
    let short = Some(Duration::from_millis(50));
    assert!(log.wait_durable(off, short).unwrap() <= off);
    assert!(ro.wait_durable(off, short).unwrap() <= off);
    assert!(ro.wait(off, short).unwrap() > off, "visible, not durable");
    let flusher = {
        let log = Arc::clone(&log);
        thread::spawn(move || {
            thread::sleep(Duration::from_millis(50));
            log.flush().unwrap()
        })
    };
    assert!(ro.wait_durable(off, LONG).unwrap() > off);
    flusher.join().unwrap();
    assert!(log.wait_durable(off, LONG).unwrap() > off);
}

#[test]
fn a_durable_wait_in_sync_mode_sees_each_record_once_appended() {
    let (_t, d) = dirs(1);
    let log = CommitLog::open(&d, quiet().flush(FlushMode::Sync)).unwrap();
    let ro = follower(&d);
    let off = log.append(b"r").unwrap();
    assert!(ro.wait_durable(off, Some(Duration::ZERO)).unwrap() > off);
}

#[test]
fn a_following_scan_yields_records_as_they_come_and_ends_when_idle() {
    let (_t, d) = dirs(2);
    let log = Arc::new(CommitLog::open(&d, quiet()).unwrap());
    for reader in [Arc::clone(&log), Arc::new(follower(&d))] {
        let start = log.max_offset().unwrap();
        let follow = Follow {
            idle_timeout: Some(Duration::from_millis(500)),
            durable: false,
        };
        let scan = reader.follow(Some(start), None, follow).unwrap();
        let writer = {
            let log = Arc::clone(&log);
            thread::spawn(move || {
                for i in 0..100 {
                    log.append(&body(i, 200)).unwrap();
                    if i % 10 == 0 {
                        thread::sleep(Duration::from_millis(2));
                    }
                }
            })
        };
        let t = Instant::now();
        let got: Vec<u64> = scan.map(|r| check_body(&r.unwrap()).unwrap()).collect();
        writer.join().unwrap();
        assert_eq!(got, (0..100).collect::<Vec<_>>());
        assert!(t.elapsed() >= Duration::from_millis(450), "ended idle");
    }
}

#[test]
fn a_following_scan_from_past_the_end_reports_a_start_inside_a_record_as_a_bad_offset() {
    let (_t, d) = dirs(2);
    let log = CommitLog::open(&d, quiet()).unwrap();
    let start = log.max_offset().unwrap() + 5; // inside the next record, once it comes
    let follow = Follow {
        idle_timeout: Some(Duration::from_secs(5)),
        durable: false,
    };
    let mut scan = log.follow(Some(start), None, follow).unwrap();
    log.append(&body(0, 200)).unwrap();
    match scan.next() {
        Some(Err(Error::InvalidOffset { offset, .. })) => assert_eq!(offset, start),
        other => panic!("expected InvalidOffset at {start}, got {other:?}"),
    }
}

#[test]
fn a_following_scan_with_an_end_stops_there_and_one_ends_with_close() {
    let (_t, d) = dirs(1);
    let log = Arc::new(CommitLog::open(&d, quiet()).unwrap());
    let start = log.max_offset().unwrap();
    let a = log.append(b"a").unwrap();
    let b = log.append(b"b").unwrap();
    let scan = log.follow(Some(start), Some(b), Follow::default()).unwrap();
    let offs: Vec<u64> = scan.map(|r| r.unwrap().offset()).collect();
    assert_eq!(offs, vec![a]);

    let ro = Arc::new(follower(&d));
    let mut scan = ro.follow(Some(start), None, Follow::default()).unwrap();
    assert_eq!(scan.next().unwrap().unwrap().offset(), a);
    assert_eq!(scan.next().unwrap().unwrap().offset(), b);
    let closer = {
        let ro = Arc::clone(&ro);
        thread::spawn(move || {
            thread::sleep(Duration::from_millis(50));
            ro.close().unwrap();
        })
    };
    assert!(scan.next().is_none(), "the close ends the following scan");
    closer.join().unwrap();
}

#[test]
fn a_follower_opened_before_the_first_writer_finds_its_control_page() {
    let (_t, d) = dirs(1);
    drop(CommitLog::open(&d, quiet()).unwrap());
    std::fs::remove_file(d[0].join("rmqlog.ctl")).unwrap();
    let ro = Arc::new(follower(&d));
    let end = ro.max_offset().unwrap();
    let log = CommitLog::open(&d, quiet()).unwrap();
    log.append(b"late").unwrap();
    assert!(ro.wait(end, LONG).unwrap() > end);
    assert_eq!(&*ro.read(end).unwrap(), b"late");
}

#[cfg(feature = "arrow")]
#[test]
fn following_batches_hold_what_came_and_wait_for_more() {
    use rmqlog::arrow::BatchOptions;
    let (_t, d) = dirs(1);
    let log = Arc::new(CommitLog::open(&d, quiet()).unwrap());
    let ro = follower(&d);
    log.append_batch(&[b"a".as_slice(), b"b"]).unwrap();
    let follow = Follow {
        idle_timeout: Some(Duration::from_millis(200)),
        durable: false,
    };
    let mut reader = ro
        .follow_batches(None, None, follow, BatchOptions::default())
        .unwrap();
    assert_eq!(reader.next_batch().unwrap().unwrap().num_rows(), 2);
    assert!(reader.next_batch_now().unwrap().is_none());
    assert!(!reader.is_done());
    let writer = {
        let log = Arc::clone(&log);
        thread::spawn(move || {
            thread::sleep(Duration::from_millis(30));
            log.append_batch(&[b"c".as_slice(), b"d", b"e"]).unwrap();
        })
    };
    assert_eq!(reader.next_batch().unwrap().unwrap().num_rows(), 3);
    writer.join().unwrap();
    assert!(reader.next_batch().unwrap().is_none(), "idle timeout");
    assert!(reader.is_done());
}

#[test]
fn a_follower_without_a_control_page_polls_for_records_and_durability() {
    let (_t, d) = dirs(1);
    let log = CommitLog::open(&d, quiet()).unwrap();
    // The writer keeps its page, which no other open can find any more.
    std::fs::remove_file(d[0].join("rmqlog.ctl")).unwrap();
    let ro = follower(&d);
    let off = log.append(b"x").unwrap();
    assert!(ro.wait(off, LONG).unwrap() > off, "found by polling");
    let short = Some(Duration::from_millis(300));
    assert!(
        ro.wait_durable(off, short).unwrap() <= off,
        "not flushed yet"
    );
    log.flush().unwrap();
    assert!(
        ro.wait_durable(off, LONG).unwrap() > off,
        "the metadata says it is durable"
    );
}
