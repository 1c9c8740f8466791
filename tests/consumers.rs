#![allow(clippy::unwrap_used)] // tests: a failed unwrap is the failure report
//! Named consumers sharing a name across processes, with a process SIGKILLed at chosen steps
//! (fail points that pause it until it is killed): holding the name's table lock, between its
//! commit's write to the store and its write of the claims table, and before that write.
#![cfg(feature = "failpoints")]

mod common;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{dirs, fill};
use rmqlog::{CommitLog, ConsumerOptions, FlushMode, Options};

/// Set in a child: the store's directories, joined by ':'.
const DIRS_ENV: &str = "RMQLOG_CONSUMER_DIRS";
/// Set in a child: the fail point where it pauses (until killed), and what it does first.
const WHAT_ENV: &str = "RMQLOG_CONSUMER_WHAT";

fn opts() -> Options {
    Options::default()
        .segment_size(64 * 1024)
        .flush(FlushMode::Async)
        .exclusive(false)
        .clean_interval(Duration::ZERO)
}

fn shared() -> ConsumerOptions {
    ConsumerOptions::default()
}

/// A child process: opens consumer "x" shared, polls 10 records, says where they end, then
/// commits with fail point `WHAT_ENV` pausing it (or, for `consumer::table_locked`, polls).
#[test]
fn consumer_process() {
    let (Ok(dirs), Ok(point)) = (std::env::var(DIRS_ENV), std::env::var(WHAT_ENV)) else {
        return; // run by the tests below
    };
    let dirs: Vec<PathBuf> = dirs.split(':').map(PathBuf::from).collect();
    let log = CommitLog::open(&dirs, opts()).unwrap();
    let mut c = log.consumer("x", shared()).unwrap();
    let got = c.poll(10, None).unwrap();
    println!("polled {}", got.last().unwrap().next_offset());
    pause_at(&point);
    let offsets: Vec<u64> = got.iter().map(|r| r.offset()).collect();
    match (point.as_str(), std::env::var(ACK_ENV).is_ok()) {
        ("consumer::table_locked", _) => drop(c.poll(10, None)),
        // Acks out of order: the last five first (the position stays), then the first five.
        // "prefix": the first five only (the position moves into the claim).
        (_, true) => {
            fail::cfg(&point, "off").unwrap();
            if std::env::var(ACK_ENV).as_deref() == Ok("prefix") {
                pause_at(&point);
                drop(c.ack(&offsets[..5]));
                unreachable!("paused until killed");
            }
            c.ack(&offsets[5..]).unwrap();
            pause_at(&point);
            drop(c.ack(&offsets[..5]));
        }
        _ => drop(c.commit(None)),
    }
    unreachable!("paused until killed");
}

/// Set in a child that acknowledges its records instead of committing them.
const ACK_ENV: &str = "RMQLOG_CONSUMER_ACK";

/// Set in a dead-letter child: the dead-letter store's directories, joined by ':'.
const DEAD_ENV: &str = "RMQLOG_CONSUMER_DEAD";

fn dead_lettering(dead: &[PathBuf]) -> ConsumerOptions {
    ConsumerOptions {
        max_deliveries: Some(1),
        dead_letter: Some(dead.to_vec()),
        ..ConsumerOptions::default()
    }
}

/// A child process: opens consumer "x" with `max_deliveries=1` and a dead-letter store, and
/// polls with fail point `WHAT_ENV` pausing it (until killed) while it dead-letters.
#[test]
fn dead_letter_process() {
    let (Ok(dirs), Ok(dead), Ok(point)) = (
        std::env::var(DIRS_ENV),
        std::env::var(DEAD_ENV),
        std::env::var(WHAT_ENV),
    ) else {
        return; // run by the tests below
    };
    let split = |s: &str| -> Vec<PathBuf> { s.split(':').map(PathBuf::from).collect() };
    let log = CommitLog::open(&split(&dirs), opts()).unwrap();
    let mut c = log.consumer("x", dead_lettering(&split(&dead))).unwrap();
    println!("polled 0");
    pause_at(&point);
    drop(c.poll(10, None));
    unreachable!("paused until killed");
}

/// Makes fail point `point` say "paused" and wait there until the process is killed.
fn pause_at(point: &str) {
    fail::cfg_callback(point, || {
        println!("paused");
        loop {
            std::thread::sleep(Duration::from_secs(1));
        }
    })
    .unwrap();
}

/// A child SIGKILLed and reaped when dropped.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs a child pausing at `point`; returns it (paused) and the end of the records it polled.
fn paused_child(dirs: &[PathBuf], point: &str) -> (Killed, u64) {
    child_at(dirs, point, "consumer_process", &[])
}

fn child_at(dirs: &[PathBuf], point: &str, test: &str, env: &[(&str, String)]) -> (Killed, u64) {
    let joined: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(DIRS_ENV, joined.join(":"))
        .env(WHAT_ENV, point)
        .stdout(Stdio::piped());
    for (k, v) in env {
        command.env(k, v);
    }
    let mut child = Killed(command.spawn().unwrap());
    let mut polled = None;
    for line in BufReader::new(child.0.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        // The harness may print its "test ... " before the child's first line.
        if let Some((_, end)) = line.split_once("polled ") {
            polled = Some(end.trim().parse().unwrap());
        }
        if line.ends_with("paused") {
            return (child, polled.expect("it polled first"));
        }
    }
    panic!("the child ended before it paused at {point}");
}

/// The offsets of the records the next polls of `log`'s consumer "x" get, to the log's end.
fn drain(log: &CommitLog) -> Vec<u64> {
    let mut c = log.consumer("x", shared()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut got = Vec::new();
    loop {
        let r = c
            .poll(1000, Some(Instant::now() + Duration::from_millis(300)))
            .unwrap();
        if r.is_empty() {
            break;
        }
        got.extend(r.iter().map(|r| r.offset()));
        assert!(Instant::now() < deadline, "records keep coming: {got:?}");
    }
    c.commit(None).unwrap();
    got.sort_unstable();
    got
}

#[test]
fn a_commit_killed_after_its_write_to_the_store_counts_and_nothing_is_delivered_again() {
    let (_root, d) = dirs(2);
    let log = CommitLog::open(&d, opts()).unwrap();
    let offs: Vec<u64> = fill(&log, 100, 200).into_iter().map(|(o, _)| o).collect();
    let (child, end) = paused_child(&d, "consumer::slot_written");
    drop(child);
    let listed = log.consumers().unwrap();
    assert_eq!(listed[0].position, end, "the commit reached the store");
    // The claims table still shows the dead open's claim: the store's position wins.
    let rest = drain(&log);
    assert_eq!(rest, offs[10..].to_vec(), "nothing below the commit again");
}

#[test]
fn a_commit_killed_before_its_write_to_the_store_has_its_records_delivered_again() {
    let (_root, d) = dirs(2);
    let log = CommitLog::open(&d, opts()).unwrap();
    let offs: Vec<u64> = fill(&log, 100, 200).into_iter().map(|(o, _)| o).collect();
    let (child, _) = paused_child(&d, "consumer::committing");
    drop(child);
    assert_eq!(log.consumers().unwrap()[0].position, 0, "nothing committed");
    assert_eq!(
        drain(&log),
        offs,
        "the dead open's claim again, then the rest"
    );
}

#[test]
fn an_open_killed_holding_the_names_table_lock_blocks_no_other() {
    let (_root, d) = dirs(2);
    let log = CommitLog::open(&d, opts()).unwrap();
    let offs: Vec<u64> = fill(&log, 100, 200).into_iter().map(|(o, _)| o).collect();
    let (child, _) = paused_child(&d, "consumer::table_locked");
    // While it holds the lock, another open's poll waits for it ...
    let waiting = std::thread::spawn({
        let d = d.clone();
        move || {
            let log = CommitLog::open(&d, opts()).unwrap();
            let started = Instant::now();
            let got = drain(&log);
            (got, started.elapsed())
        }
    });
    std::thread::sleep(Duration::from_millis(300));
    assert!(!waiting.is_finished(), "the table lock is held");
    drop(child); // ... and the kernel lets it go with the process
    let (got, took) = waiting.join().unwrap();
    assert_eq!(got, offs, "its uncommitted claim again, then the rest");
    assert!(took < Duration::from_secs(5), "{took:?}");
    assert_eq!(
        log.consumers().unwrap()[0].position,
        log.max_offset().unwrap()
    );
}

/// A poll dead-letters a claim delivered `max_deliveries` times, killed at each step of it: the
/// next poll finishes the job, and the dead-letter store holds each record once, with its origin.
#[test]
fn a_dead_lettering_killed_at_any_step_leaves_each_record_in_the_dead_letter_store_once() {
    for point in [
        "consumer::dead_letter_marked",
        "consumer::dead_letter_appended",
        "consumer::dead_letters_synced",
        "consumer::dead_lettered",
    ] {
        let (_root, d) = dirs(2);
        let (_dead_root, dead) = dirs(1);
        let log = CommitLog::open(&d, opts()).unwrap();
        let offs: Vec<u64> = fill(&log, 30, 200).into_iter().map(|(o, _)| o).collect();
        // A delivery without a commit (the open closes, as a crashed worker's would), by an open
        // without a limit: the next, with max_deliveries=1, dead-letters the claim's ten at once.
        let mut c = log.consumer("x", shared()).unwrap();
        assert_eq!(c.poll(10, None).unwrap().len(), 10, "{point}");
        drop(c);
        let joined = dead[0].display().to_string();
        let (child, _) = child_at(&d, point, "dead_letter_process", &[(DEAD_ENV, joined)]);
        drop(child);

        let mut c = log.consumer("x", dead_lettering(&dead)).unwrap();
        let rest = c.poll(100, None).unwrap();
        let rest: Vec<u64> = rest.iter().map(|r| r.offset()).collect();
        assert_eq!(rest, offs[10..].to_vec(), "{point}: the others flow");
        assert_eq!(c.deliveries(), 1, "{point}");
        c.commit(None).unwrap();
        let dlq = CommitLog::open(&dead, Options::default().read_only(true)).unwrap();
        let mut there = Vec::new();
        for r in dlq.scan(None, None).unwrap() {
            let r = r.unwrap();
            let (origin, body) = rmqlog::parse_dead_letter(r.body()).expect("a dead letter");
            assert_eq!((origin.consumer.as_str(), origin.deliveries), ("x", 1));
            let original = log.read(origin.offset).unwrap();
            assert_eq!(body, original.body(), "{point}");
            there.push(origin.offset);
        }
        assert_eq!(there, offs[..10].to_vec(), "{point}: each once, in order");
        let info = &log.consumers().unwrap()[0];
        assert_eq!(info.position, log.max_offset().unwrap(), "{point}");
        assert_eq!(info.dead_lettered, 10, "{point}: {info:?}");
    }
}

/// Acks out of order, killed as the second ack moves the position: before its write to the store
/// the unacknowledged half comes again (only it); after, nothing of the ten.
#[test]
fn acks_killed_as_they_move_the_position_never_pass_a_record_not_acknowledged() {
    for (point, again) in [
        ("consumer::committing", true),
        ("consumer::slot_written", false),
    ] {
        let (_root, d) = dirs(2);
        let log = CommitLog::open(&d, opts()).unwrap();
        let offs: Vec<u64> = fill(&log, 100, 200).into_iter().map(|(o, _)| o).collect();
        let (child, end) = child_at(&d, point, "consumer_process", &[(ACK_ENV, "1".into())]);
        assert_eq!(end, offs[10]);
        drop(child);
        let position = log.consumers().unwrap()[0].position;
        assert_eq!(position, if again { 0 } else { offs[10] }, "{point}");
        let expected = if again {
            [&offs[..5], &offs[10..]].concat()
        } else {
            offs[10..].to_vec()
        };
        assert_eq!(drain(&log), expected, "{point}");
    }
}

/// An ack that moves the position into the middle of a claim, killed between the position's write
/// and the claims table's: the claim's records above the position come again, none below.
#[test]
fn an_ack_killed_after_moving_the_position_inside_a_claim_loses_none_of_the_rest() {
    for (point, from) in [("consumer::committing", 0), ("consumer::slot_written", 5)] {
        let (_root, d) = dirs(2);
        let log = CommitLog::open(&d, opts()).unwrap();
        let offs: Vec<u64> = fill(&log, 100, 200).into_iter().map(|(o, _)| o).collect();
        let (child, _) = child_at(&d, point, "consumer_process", &[(ACK_ENV, "prefix".into())]);
        drop(child);
        assert_eq!(log.consumers().unwrap()[0].position, offs[from], "{point}");
        assert_eq!(drain(&log), offs[from..].to_vec(), "{point}");
    }
}
