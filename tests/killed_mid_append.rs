#![allow(clippy::unwrap_used)] // tests: a failed unwrap is the failure report
//! A writer process killed (SIGKILL) in the middle of an append, after copying its records into
//! the segment maps and before publishing them (fail point `append::before_publish`): whatever
//! it copied was never acknowledged, so neither the next writer's recovery nor a follower opened
//! before it may take any of it, and an `append_batch` is all or nothing. The records it copied
//! are whole and valid (the page cache keeps them after the kill), which is what a recovery that
//! only validates records would accept; the end the writer published in `rmqlog.ctl` is what
//! tells them apart.
#![cfg(feature = "failpoints")]

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{body, check_body};
use rmqlog::{CommitLog, FlushMode, Options};

/// Set in the child: the store's directory.
const CHILD_ENV: &str = "RMQLOG_KILLED_MID_APPEND_DIR";
/// Set in the child: append one record (`single`) or a batch that rolls (`batch`).
const WHAT_ENV: &str = "RMQLOG_KILLED_MID_APPEND_WHAT";
const SEGMENT: u64 = 64 * 1024;
const ACKED: u64 = 500;

fn opts(flush: FlushMode) -> Options {
    Options::default().segment_size(SEGMENT).flush(flush)
}

/// The writer in its own process: appends `ACKED` records, reports the end, then pauses its next
/// append (one record or a batch crossing into a new segment) after the copy, before the publish.
#[test]
fn writer_process() {
    let (Ok(dir), Ok(what)) = (std::env::var(CHILD_ENV), std::env::var(WHAT_ENV)) else {
        return; // run by the tests below
    };
    let flush = if what.ends_with("sync") {
        FlushMode::Sync
    } else {
        FlushMode::Async
    };
    let log = CommitLog::open(&[PathBuf::from(dir)], opts(flush)).unwrap();
    for i in 0..ACKED {
        log.append(&body(i, 100)).unwrap();
    }
    println!("acked {}", log.max_offset().unwrap());
    fail::cfg_callback("append::before_publish", || {
        println!("paused");
        loop {
            std::thread::sleep(Duration::from_secs(1));
        }
    })
    .unwrap();
    if what.starts_with("batch") {
        // About 1.5 segments: the batch rolls into a new segment before the pause.
        let bodies: Vec<Vec<u8>> = (ACKED..ACKED + 90).map(|i| body(i, 1000)).collect();
        log.append_batch(&bodies).unwrap();
    } else {
        log.append(&body(ACKED, 100)).unwrap();
    }
    unreachable!("the append pauses until the process is killed");
}

/// Starts the writer process, waits for its pause, kills it; returns the end it acknowledged.
fn kill_mid_append(dir: &Path, what: &str) -> u64 {
    let mut child: Child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "writer_process",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, dir)
        .env(WHAT_ENV, what)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut acked = None;
    let lines = BufReader::new(child.stdout.take().unwrap()).lines();
    for line in lines {
        let line = line.unwrap();
        // libtest prints the test's name on the same line before the first output.
        if let Some(end) = line.split("acked ").nth(1) {
            acked = Some(end.trim().parse().unwrap());
        }
        if line.ends_with("paused") {
            break;
        }
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    acked.expect("the writer reported its acknowledged end before pausing")
}

/// Exactly the acknowledged records, whole and in order.
fn assert_only_acked(log: &CommitLog, acked_end: u64) {
    assert_eq!(log.max_offset().unwrap(), acked_end);
    let mut n = 0;
    for rec in log.scan(None, None).unwrap() {
        let rec = rec.unwrap();
        assert_eq!(check_body(&rec), Some(n), "record {n}");
        n += 1;
    }
    assert_eq!(n, ACKED, "every acknowledged record reads back");
}

fn check(what: &str) {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("store");
    let acked_end = kill_mid_append(&dir, what);
    // The copied records are there, valid: a follower or a recovery that only checked records
    // would take them.
    let follower = CommitLog::open(&[&dir], opts(FlushMode::Async).read_only(true)).unwrap();
    assert_only_acked(&follower, acked_end);
    let log = CommitLog::open(&[&dir], opts(FlushMode::Async)).unwrap();
    assert_only_acked(&log, acked_end);
    // The log goes on from there, and the follower opened before the recovery follows it.
    let next = log.append(b"after the crash").unwrap();
    assert_eq!(next, acked_end);
    assert!(log.wait(acked_end, Some(Duration::ZERO)).unwrap() > acked_end);
    assert!(
        follower
            .wait(acked_end, Some(Duration::from_secs(10)))
            .unwrap()
            > acked_end
    );
    log.close().unwrap();
    let log = CommitLog::open(&[&dir], opts(FlushMode::Async)).unwrap();
    assert_eq!(log.read(next).unwrap().body(), b"after the crash");
}

#[test]
fn a_record_copied_but_not_published_is_cut() {
    check("single");
}

#[test]
fn a_batch_copied_into_two_segments_but_not_published_is_cut_whole() {
    check("batch");
}

#[test]
fn a_sync_batch_copied_but_not_published_is_cut_whole() {
    check("batch-sync");
}
