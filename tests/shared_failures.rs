#![allow(clippy::unwrap_used)] // tests: a failed unwrap is the failure report
//! The failure paths of the shared protocol (docs/shared-protocol.md): real writer and consumer
//! processes SIGKILLed at every fail point of the append, roll, repair, commit and claim paths in
//! turn, an I/O error injected at every I/O step of the repair, the roll and the commit, and the
//! defects found one step off the common path (a damaged or replaced control page, a joiner of
//! another PID namespace, readers behind a held lock, a consumer past the recovered end).
//!
//! After each fault the invariants are checked: every acknowledged record exact, no lock left
//! unusable (the next open and append within a bound, in another process too), no consumer
//! position past the log's end, and the same after a reboot (the control page gone, recovery).
#![cfg(feature = "failpoints")]

mod common;

use common::{check_store, tagged};

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rmqlog::{CommitLog, ConsumerOptions, Error, FlushMode, Options, Start};

const DIRS_ENV: &str = "RMQLOG_FAILURES_DIRS";
const WHAT_ENV: &str = "RMQLOG_FAILURES_WHAT";
const SEGMENT: u64 = 64 * 1024;
/// How long any step may take before the test fails saying what it waited for (generous: CI
/// runs builds beside the tests).
const BOUND: Duration = Duration::from_secs(60);

/// Fail points are global to the process: the tests of this file take turns.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    let guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    fail::teardown_all();
    guard
}

/// Removes every fail point when a test ends, passed or not.
struct NoFailPoints;

impl Drop for NoFailPoints {
    fn drop(&mut self) {
        fail::teardown_all();
    }
}

mod fail {
    pub use ::fail::*;

    /// Removes every configured fail point (the `fail` crate's `list` names them).
    pub fn teardown_all() {
        for (name, _) in ::fail::list() {
            ::fail::remove(name);
        }
    }
}

fn opts() -> Options {
    Options::default()
        .segment_size(SEGMENT)
        .flush(FlushMode::Async)
        .exclusive(false)
}

/// Options of an exclusive consumer.
fn exclusive() -> ConsumerOptions {
    ConsumerOptions {
        exclusive: true,
        ..ConsumerOptions::default()
    }
}

/// Runs `f` on a thread; fails naming `what` if it takes longer than [`BOUND`].
fn within<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(BOUND) {
        Ok(v) => v,
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            panic!("{what}: still blocked after {BOUND:?}")
        }
        Err(_) => panic!("{what}: failed (see the panic above)"),
    }
}

/// A child process, killed (SIGKILL) when dropped, its output read by a thread.
struct Proc {
    child: Child,
    lines: Receiver<String>,
}

impl Proc {
    fn spawn(dirs: &[PathBuf], what: &str) -> Proc {
        Proc::spawn_with(Command::new(std::env::current_exe().unwrap()), dirs, what)
    }

    fn spawn_with(mut cmd: Command, dirs: &[PathBuf], what: &str) -> Proc {
        let joined: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
        let mut child = cmd
            .args(["--exact", "child", "--nocapture", "--test-threads=1"])
            .env(DIRS_ENV, joined.join(":"))
            .env(WHAT_ENV, what)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                if tx.send(line.unwrap_or_default()).is_err() {
                    return;
                }
            }
        });
        Proc { child, lines }
    }

    /// Reads lines until one ends with `until`; returns the `acked` end if one was said.
    fn wait_for(&mut self, until: &str) -> Option<u64> {
        let mut acked = None;
        let mut said = Vec::new();
        loop {
            let line = self.lines.recv_timeout(BOUND).unwrap_or_else(|_| {
                panic!("the child did not say {until:?} within {BOUND:?}; it said {said:?}")
            });
            said.push(line.clone());
            // libtest prints the test's name on the same line before the first output.
            if let Some(end) = line.split("acked ").nth(1) {
                acked = Some(end.trim().parse().unwrap());
            }
            if line.ends_with(until) {
                return acked;
            }
        }
    }

    /// The whole output until the child exits.
    fn rest(&mut self) -> Vec<String> {
        let mut out = Vec::new();
        while let Ok(line) = self.lines.recv_timeout(BOUND) {
            out.push(line);
        }
        out
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Makes fail point `name` say "paused" and hold its thread until the process is killed.
fn pause_forever_at(name: &str) {
    fail::cfg_callback(name, || {
        println!("paused");
        loop {
            std::thread::sleep(Duration::from_secs(1));
        }
    })
    .unwrap();
}

/// The child process: what `WHAT_ENV` says.
#[test]
fn child() {
    let (Ok(dirs), Ok(what)) = (std::env::var(DIRS_ENV), std::env::var(WHAT_ENV)) else {
        return; // run by the tests below
    };
    let dirs: Vec<PathBuf> = dirs.split(':').map(PathBuf::from).collect();
    // `task[:kind]@fail_point`
    let (task, point) = what.split_once('@').unwrap_or((what.as_str(), "none"));
    let parts: Vec<&str> = task.split(':').collect();
    let log = match CommitLog::open(&dirs, opts().flush_interval(Duration::from_secs(600))) {
        Ok(log) => log,
        Err(e) => {
            println!("open failed: {e}");
            return;
        }
    };
    match parts.as_slice() {
        ["keep"] => {
            println!("keeping");
            loop {
                std::thread::sleep(Duration::from_secs(1));
            }
        }
        // 50 acknowledged records, then a batch that rolls, paused at `point`.
        ["batch"] => {
            for i in 0..50 {
                log.append(&tagged(9, i, 100)).unwrap();
            }
            println!("acked {}", log.max_offset().unwrap());
            pause_forever_at(point);
            let bodies: Vec<Vec<u8>> = (50..140).map(|i| tagged(9, i, 1000)).collect();
            log.append_batch(&bodies).unwrap();
            println!("done");
            pause_forever_at("never");
            loop {
                std::thread::sleep(Duration::from_secs(1));
            }
        }
        // The next taker of a dead holder's lock, paused at a step of its repair.
        ["repair"] => {
            pause_forever_at(point);
            log.append(&tagged(8, 0, 100)).unwrap();
            println!("done");
        }
        // A consumer that polls the 50 records and commits, paused at `point`.
        ["consume", kind] => {
            for i in 0..50 {
                log.append(&tagged(9, i, 100)).unwrap();
            }
            println!("acked {}", log.max_offset().unwrap());
            let exclusive = *kind == "exclusive";
            let copts = ConsumerOptions {
                exclusive,
                ..ConsumerOptions::default()
            };
            let mut c = log.consumer("c", copts).unwrap();
            if *kind == "claim" {
                pause_forever_at(point); // in the poll's claim
            }
            let polled = c.poll(30, Some(std::time::Instant::now())).unwrap();
            assert_eq!(polled.len(), 30);
            pause_forever_at(point);
            c.commit(None).unwrap();
            println!("done");
        }
        // A shared writer joining a store: opened above; says so.
        ["join"] => println!("joined"),
        other => panic!("unknown child task {other:?}"),
    }
}

fn two_dirs(root: &Path) -> Vec<PathBuf> {
    vec![root.join("d0"), root.join("d1")]
}

/// The invariants after a fault: another open appends within the bound (the lock usable), every
/// record is whole and in its writer's order, writer 9's acknowledged records are there, no
/// consumer lies past the end and each polls from where it is; then the same after a reboot.
fn check_invariants(dirs: &[PathBuf], acked9: u32, keeper: Proc) {
    let d = dirs.to_vec();
    let (counts, end) = within(
        "a shared writer's open and append after the fault",
        move || {
            let log = CommitLog::open(&d, opts()).unwrap();
            log.append(&tagged(7, 0, 100)).unwrap();
            check_consumers(&log);
            (check_store(&log), log.max_offset().unwrap())
        },
    );
    let nine = counts.get(&9).copied().unwrap_or(0);
    assert!(
        nine >= acked9,
        "writer 9 acknowledged {acked9}, the store has {nine}"
    );
    // Another process joins and appends too.
    let mut joiner = Proc::spawn(dirs, "join");
    joiner.wait_for("joined");
    drop(keeper);
    drop(joiner);
    // A reboot: the page is gone; recovery validates what is on disk.
    for d in dirs {
        let _ = std::fs::remove_file(d.join("rmqlog.ctl"));
    }
    let d = dirs.to_vec();
    within("the open after a reboot", move || {
        let log = CommitLog::open(&d, opts()).unwrap();
        assert!(log.verify().unwrap().is_empty());
        assert!(
            log.max_offset().unwrap() >= end,
            "nothing acknowledged lost"
        );
        let counts = check_store(&log);
        assert!(counts.get(&9).copied().unwrap_or(0) >= acked9);
        check_consumers(&log);
        log.append(&tagged(7, 1, 100)).unwrap();
    });
}

/// No consumer position past the end; each polls from a record boundary.
fn check_consumers(log: &CommitLog) {
    let end = log.max_offset().unwrap();
    for info in log.consumers().unwrap() {
        assert!(
            info.position <= end,
            "consumer {} at {} past the end {end}",
            info.name,
            info.position
        );
        let mut c = log
            .consumer(&info.name, ConsumerOptions::default())
            .unwrap();
        c.poll(1000, Some(std::time::Instant::now())).unwrap();
    }
}

/// A child killed at `point` while it does `task`; a keeper process holds the store open
/// throughout, so that the next writers join (the dead holder's lock is taken over, not
/// re-made).
fn killed_at(task: &str, point: &str) {
    let _serial = serial();
    let t = tempfile::tempdir().unwrap();
    let dirs = two_dirs(t.path());
    let mut keeper = Proc::spawn(&dirs, "keep");
    keeper.wait_for("keeping");
    let acked9 = if task == "repair" {
        // A holder dies first; the next taker is killed in its repair.
        let mut holder = Proc::spawn(&dirs, "batch@append::before_publish");
        holder.wait_for("paused");
        drop(holder);
        let mut repairer = Proc::spawn(&dirs, &format!("repair@{point}"));
        repairer.wait_for("paused");
        50
    } else {
        let mut child = Proc::spawn(&dirs, &format!("{task}@{point}"));
        assert!(child.wait_for("paused").is_some(), "the child said its end");
        50
    };
    check_invariants(&dirs, acked9, keeper);
}

/// The crash matrix: every fail point of the append, roll, repair, commit and claim paths, a
/// process SIGKILLed there.
#[test]
fn a_process_killed_at_every_step_leaves_the_store_usable() {
    let _clean = NoFailPoints;
    for point in [
        "append::reserved",
        "roll::created",
        "roll::listed",
        "append::before_publish",
        "append::published",
    ] {
        eprintln!("killed at {point}");
        killed_at("batch", point);
    }
    for point in [
        "repair::list",
        "repair::remove",
        "repair::open",
        "repair::zero",
        "repair::sync",
        "repair::cut",
    ] {
        eprintln!("killed at {point}");
        killed_at("repair", point);
    }
    // An exclusive commit writes its slot alone: one step.
    eprintln!("killed at consumer::records_durable (exclusive)");
    killed_at("consume:exclusive", "consumer::records_durable");
    for point in ["consumer::table_locked", "consumer::claimed"] {
        eprintln!("killed at {point} (claiming)");
        killed_at("consume:claim", point);
    }
    for point in [
        "consumer::table_locked",
        "consumer::claimed",
        "consumer::records_durable",
        "consumer::committing",
        "consumer::slot_written",
    ] {
        eprintln!("killed at {point} (shared)");
        killed_at("consume:shared", point);
    }
}

/// An I/O error (EIO) at each I/O step of the repair after a dead holder: the append that
/// repairs fails with it, the lock stays usable, and once the cause is gone the next append in
/// this process and an open in another succeed, the tail repaired.
#[test]
fn an_io_error_in_the_repair_leaves_the_lock_usable_and_the_repair_pending() {
    for point in [
        "repair::list",
        "repair::remove",
        "repair::open",
        "repair::zero",
        "repair::sync",
    ] {
        let _serial = serial();
        let _clean = NoFailPoints;
        let t = tempfile::tempdir().unwrap();
        let dirs = two_dirs(t.path());
        let mut keeper = Proc::spawn(&dirs, "keep");
        keeper.wait_for("keeping");
        let mut holder = Proc::spawn(&dirs, "batch@append::before_publish");
        let acked = holder.wait_for("paused").unwrap();
        drop(holder); // SIGKILL, the lock held
        let log = Arc::new(CommitLog::open(&dirs, opts()).unwrap());
        fail::cfg(point, "return").unwrap();
        let l = Arc::clone(&log);
        let failed = within("the append meeting the failing repair", move || {
            l.append(&tagged(0, 0, 100))
        });
        match failed {
            Err(Error::Io { source, .. }) => assert_eq!(source.raw_os_error(), Some(libc::EIO)),
            other => panic!("{point}: the repair's error, got {other:?}"),
        }
        fail::remove(point);
        // Another process takes the lock and repairs.
        let mut joiner = Proc::spawn(&dirs, "repair");
        assert!(
            joiner.rest().iter().any(|l| l.ends_with("done")),
            "{point}: another process appends after the failed repair"
        );
        let l = Arc::clone(&log);
        let at = within("the append after the cause is gone", move || {
            l.append(&tagged(0, 0, 100)).unwrap()
        });
        assert!(at > acked, "{point}: appended after the repaired end");
        let counts = check_store(&log);
        assert_eq!(
            (counts.get(&9), counts.get(&8), counts.get(&0)),
            (Some(&50), Some(&1), Some(&1)),
            "{point}: the dead writer's unpublished batch is gone"
        );
        drop(log);
        check_invariants(&dirs, 50, keeper);
    }
}

/// An I/O error creating a segment at a roll, writing a claim, and committing a consumer: the call
/// fails, and the next succeeds with nothing lost.
#[test]
fn an_io_error_at_a_roll_or_a_commit_fails_that_call_only() {
    let _serial = serial();
    let _clean = NoFailPoints;
    let t = tempfile::tempdir().unwrap();
    let dirs = two_dirs(t.path());
    let mut keeper = Proc::spawn(&dirs, "keep");
    keeper.wait_for("keeping");
    let log = CommitLog::open(&dirs, opts()).unwrap();
    for i in 0..50 {
        log.append(&tagged(9, i, 100)).unwrap();
    }
    fail::cfg("roll::create", "return").unwrap();
    let bodies: Vec<Vec<u8>> = (50..140).map(|i| tagged(9, i, 1000)).collect();
    assert!(matches!(log.append_batch(&bodies), Err(Error::Io { .. })));
    fail::remove("roll::create");
    log.append_batch(&bodies).unwrap();
    // A claim whose table write fails: the poll fails, the records stay unclaimed.
    let mut shared = log.consumer("s", ConsumerOptions::default()).unwrap();
    fail::cfg("consumer::table_write", "return").unwrap();
    let now = || Some(std::time::Instant::now());
    assert!(matches!(shared.poll(10, now()), Err(Error::Io { .. })));
    fail::remove("consumer::table_write");
    let first = shared.poll(10, now()).unwrap();
    assert_eq!(
        first.first().map(|r| r.offset()),
        Some(0),
        "the same records, claimed now"
    );
    shared.commit(None).unwrap();
    drop(shared);
    let mut c = log.consumer("c", exclusive()).unwrap();
    c.poll(100, Some(std::time::Instant::now())).unwrap();
    fail::cfg("consumer::records_durable", "return").unwrap();
    assert!(matches!(c.commit(None), Err(Error::Io { .. })));
    assert_eq!(c.committed(), 0);
    fail::remove("consumer::records_durable");
    let committed = c.commit(None).unwrap();
    assert!(committed > 0 && committed <= log.flushed_offset().unwrap());
    drop(c);
    assert_eq!(check_store(&log).get(&9), Some(&140));
    drop(log);
    check_invariants(&dirs, 140, keeper);
}

/// The reproduction of the review: a consumer committed records the log had not made durable;
/// a power loss then ended the log below its position, and it skipped every record appended
/// after. A commit makes the records below it durable first, in every flush mode.
#[test]
fn a_commit_makes_the_records_below_it_durable_first() {
    let _serial = serial();
    for flush in [FlushMode::None, FlushMode::Async, FlushMode::Sync] {
        let t = tempfile::tempdir().unwrap();
        let o = Options::default()
            .flush(flush)
            .flush_interval(Duration::from_secs(600));
        let log = CommitLog::open(&[t.path()], o.clone()).unwrap();
        for i in 0..100 {
            log.append(&tagged(1, i, 100)).unwrap();
        }
        let mut c = log.consumer("k", exclusive()).unwrap();
        assert_eq!(c.poll(100, None).unwrap().len(), 100);
        let committed = c.commit(None).unwrap();
        assert!(
            log.flushed_offset().unwrap() >= committed,
            "{flush:?}: committed {committed}, durable only below {}",
            log.flushed_offset().unwrap()
        );
        // A read-only open's consumer makes them durable too (its own syncs).
        let more: Vec<Vec<u8>> = (100..150).map(|i| tagged(1, i, 100)).collect();
        log.append_batch(&more).unwrap();
        let reader = CommitLog::open(&[t.path()], Options::default().read_only(true)).unwrap();
        let mut r = reader.consumer("r", exclusive()).unwrap();
        assert_eq!(r.poll(1000, None).unwrap().len(), 150);
        let committed = r.commit(None).unwrap();
        reader.refresh().unwrap();
        assert!(
            reader.flushed_offset().unwrap() >= committed,
            "{flush:?}: read-only"
        );
    }
}

/// A position found past the end (a store written before commits synced the log, then a power
/// loss; or a store restored from an older copy): the consumer resumes at the end and polls
/// every record appended since, exclusive or shared.
#[test]
fn a_position_past_the_recovered_end_resumes_at_the_end() {
    let _serial = serial();
    for exclusive in [true, false] {
        let t = tempfile::tempdir().unwrap();
        let o = Options::default().flush_interval(Duration::from_secs(600));
        let (kept, seg) = {
            let log = CommitLog::open(&[t.path()], o.clone()).unwrap();
            for i in 0..10 {
                log.append(&tagged(1, i, 100)).unwrap();
            }
            log.flush().unwrap();
            let kept = log.max_offset().unwrap();
            // The metadata as the power loss leaves it: of the last sync before the records
            // below the position (no commit synced them: the store of an earlier version).
            let saved = t.path().join("saved");
            std::fs::create_dir(&saved).unwrap();
            for e in std::fs::read_dir(t.path()).unwrap() {
                let e = e.unwrap();
                let name = e.file_name().to_string_lossy().into_owned();
                if name.starts_with("rmqlog.meta") || name.starts_with("rmqlog.tail") {
                    std::fs::copy(e.path(), saved.join(&name)).unwrap();
                }
            }
            for i in 10..100 {
                log.append(&tagged(1, i, 100)).unwrap();
            }
            let copts = ConsumerOptions {
                exclusive,
                ..Default::default()
            };
            let mut c = log.consumer("k", copts).unwrap();
            assert_eq!(c.poll(100, None).unwrap().len(), 100);
            c.commit(None).unwrap();
            let seg = log.segments().unwrap()[0].path.clone();
            (kept, seg)
        };
        // The power loss: what the log had past `kept` never reached the disk.
        let saved = t.path().join("saved");
        for e in std::fs::read_dir(&saved).unwrap() {
            let e = e.unwrap();
            std::fs::copy(e.path(), t.path().join(e.file_name())).unwrap();
        }
        std::fs::remove_dir_all(&saved).unwrap();
        let len = std::fs::metadata(&seg).unwrap().len();
        common::write_at(&seg, kept, &vec![0u8; (len - kept) as usize]);
        std::fs::remove_file(t.path().join("rmqlog.ctl")).unwrap();
        let log = CommitLog::open(&[t.path()], o).unwrap();
        assert_eq!(log.max_offset().unwrap(), kept);
        let new: Vec<u64> = (0..50)
            .map(|i| log.append(&tagged(2, i, 100)).unwrap())
            .collect();
        let copts = ConsumerOptions {
            exclusive,
            ..Default::default()
        };
        let mut c = log.consumer("k", copts).unwrap();
        assert_eq!(c.committed(), kept, "resumes at the recovered end");
        let polled: Vec<u64> = c
            .poll(1000, Some(std::time::Instant::now()))
            .unwrap()
            .iter()
            .map(|r| r.offset())
            .collect();
        assert_eq!(polled, new, "every record appended after the power loss");
    }
}

/// A read-only open takes no record past the writers' published end: a batch shows whole or not
/// at all, however it looks (refresh, read past its view).
#[test]
fn a_follower_never_sees_part_of_a_batch() {
    let _serial = serial();
    let _clean = NoFailPoints;
    let t = tempfile::tempdir().unwrap();
    let log = Arc::new(CommitLog::open(&[t.path()], opts().exclusive(true)).unwrap());
    log.append(&tagged(1, 0, 100)).unwrap();
    let acked = log.max_offset().unwrap();
    let (paused, release) = pause_once("append::before_publish");
    let writer = {
        let log = Arc::clone(&log);
        std::thread::spawn(move || {
            let bodies: Vec<Vec<u8>> = (1..9).map(|i| tagged(1, i, 4000)).collect();
            log.append_batch(&bodies).unwrap();
        })
    };
    paused
        .recv_timeout(BOUND)
        .expect("the writer paused before publishing");
    let follower = CommitLog::open(&[t.path()], Options::default().read_only(true)).unwrap();
    assert_eq!(follower.max_offset().unwrap(), acked, "open");
    assert_eq!(follower.refresh().unwrap(), acked, "refresh");
    assert!(
        follower.read(acked).is_err(),
        "a read past the published end"
    );
    release.send(()).unwrap();
    writer.join().unwrap();
    assert_eq!(follower.refresh().unwrap(), log.max_offset().unwrap());
}

/// Pauses fail point `name` the first time any thread reaches it, until released.
fn pause_once(name: &str) -> (Receiver<()>, std::sync::mpsc::Sender<()>) {
    let (paused_tx, paused) = channel();
    let (release, release_rx) = channel::<()>();
    let (paused_tx, release_rx) = (Mutex::new(paused_tx), Mutex::new(release_rx));
    let once = std::sync::atomic::AtomicBool::new(false);
    fail::cfg_callback(name, move || {
        if !once.swap(true, std::sync::atomic::Ordering::AcqRel) {
            paused_tx.lock().unwrap().send(()).unwrap();
            let _ = release_rx.lock().unwrap().recv_timeout(BOUND);
        }
    })
    .unwrap();
    (paused, release)
}

/// A writer process holds the append lock (paused mid-batch, after its roll changed the segment
/// list): another open of the store joins, reads, waits and catches up without it.
#[test]
fn readers_never_take_the_append_lock() {
    let _serial = serial();
    let t = tempfile::tempdir().unwrap();
    let dirs = two_dirs(t.path());
    let first = CommitLog::open(&dirs, opts()).unwrap();
    let mut holder = Proc::spawn(&dirs, "batch@append::before_publish");
    let acked = holder.wait_for("paused").unwrap();
    let d = dirs.clone();
    within(
        "a join, a read and a catch-up while the lock is held",
        move || {
            let log = CommitLog::open(&d, opts()).unwrap();
            assert_eq!(log.max_offset().unwrap(), acked);
            assert_eq!(
                log.segments().unwrap().len(),
                1,
                "the holder's new segment is not listed"
            );
            let last = log.scan(None, None).unwrap().last().unwrap().unwrap();
            assert_eq!(last.next_offset(), acked);
            assert_eq!(log.wait(0, Some(Duration::ZERO)).unwrap(), acked);
        },
    );
    assert_eq!(first.max_offset().unwrap(), acked);
    drop(holder);
}

/// A catch-up (no lock) of one thread of an open, while another thread of it has rolled and not
/// published, and another open deleted the head (the generation moved): the listing leaves the
/// roll's segment out, and the view keeps it (found by a review of the lock-free catch-up: the
/// view lost it, and the published records were out of range).
#[test]
fn a_catch_up_during_a_roll_of_its_own_open_keeps_the_rolled_segment() {
    let _serial = serial();
    let _clean = NoFailPoints;
    let t = tempfile::tempdir().unwrap();
    let dirs = two_dirs(t.path());
    let o = opts()
        .flush_interval(Duration::from_secs(3600))
        .clean_interval(Duration::ZERO);
    let a = Arc::new(CommitLog::open(&dirs, o.clone()).unwrap());
    let b = CommitLog::open(&dirs, o).unwrap();
    for i in 0..200 {
        a.append(&tagged(1, i, 1000)).unwrap();
    }
    let (paused, release) = pause_once("append::reserved");
    let appender = {
        let a = Arc::clone(&a);
        std::thread::spawn(move || {
            let bodies: Vec<Vec<u8>> = (200..270).map(|i| tagged(1, i, 1000)).collect();
            a.append_batch(&bodies)
        })
    };
    paused
        .recv_timeout(BOUND)
        .expect("the appender rolled and paused");
    assert_eq!(b.truncate_before(SEGMENT).unwrap(), SEGMENT);
    let starts = |log: &CommitLog| -> Vec<u64> {
        log.segments()
            .unwrap()
            .iter()
            .map(|s| s.start_offset)
            .collect()
    };
    let end = a.max_offset().unwrap();
    assert_eq!(
        starts(&a).first(),
        Some(&SEGMENT),
        "the deletion is taken in"
    );
    assert!(
        starts(&a).last().unwrap() >= &end,
        "the roll's segment stays in the view"
    );
    release.send(()).unwrap();
    let offsets = appender.join().unwrap().unwrap();
    let last = *offsets.last().unwrap();
    assert_eq!(&*a.read(last).unwrap(), tagged(1, 269, 1000));
    for i in 270..370 {
        a.append(&tagged(1, i, 1000)).unwrap();
    }
    assert_eq!(b.max_offset().unwrap(), a.max_offset().unwrap());
    assert_eq!(&*b.read(last).unwrap(), tagged(1, 269, 1000));
    assert!(b.verify().unwrap().is_empty());
}

/// A shared writer closing beside another one finds it is not alone without letting go of its
/// lock (a flock conversion unlocks first): when the other dies meanwhile, an exclusive open is
/// still refused until the close is done.
#[test]
fn no_exclusive_open_slips_in_beside_a_closing_shared_writer() {
    let _serial = serial();
    let _clean = NoFailPoints;
    let t = tempfile::tempdir().unwrap();
    let dirs = vec![t.path().join("d0")];
    let mut keeper = Proc::spawn(&dirs, "keep");
    keeper.wait_for("keeping");
    let log = CommitLog::open(&dirs, opts()).unwrap();
    log.append(b"x").unwrap();
    let (paused, release) = pause_once("close::alone_checked");
    let closer = std::thread::spawn(move || log.close());
    paused
        .recv_timeout(BOUND)
        .expect("the close checked whether it is alone");
    drop(keeper); // SIGKILL: the closing writer is the last one now
    match CommitLog::open(&dirs, opts().exclusive(true)) {
        Err(Error::StoreLocked { .. }) => {}
        other => panic!(
            "refused while a shared writer closes, got {:?}",
            other.map(|_| ())
        ),
    }
    release.send(()).unwrap();
    closer.join().unwrap().unwrap();
    let log = CommitLog::open(&dirs, opts().exclusive(true)).unwrap();
    assert_eq!(log.read(log.min_offset().unwrap()).unwrap().len(), 1);
}

/// A shared writer naming a directory through a symlink joins the writers that name it directly
/// (the directory's identity decides), and they serialise on one join lock.
#[test]
fn a_writer_naming_a_directory_through_a_symlink_joins() {
    let _serial = serial();
    let t = tempfile::tempdir().unwrap();
    let dirs = two_dirs(t.path());
    let a = CommitLog::open(&dirs, opts()).unwrap();
    a.append(&tagged(1, 0, 100)).unwrap();
    let link = t.path().join("z-link-to-d0");
    std::os::unix::fs::symlink(&dirs[0], &link).unwrap();
    let b = CommitLog::open(&[dirs[1].clone(), link], opts()).unwrap();
    b.append(&tagged(2, 0, 100)).unwrap();
    a.append(&tagged(1, 1, 100)).unwrap();
    assert_eq!(check_store(&b), HashMap::from([(1, 2), (2, 1)]));
    drop(a);
    drop(b);
    let log = CommitLog::open(&dirs, opts().exclusive(true)).unwrap();
    assert_eq!(check_store(&log), HashMap::from([(1, 2), (2, 1)]));
}

/// In `flush="sync"` a reader sees a record once it is durable, as its producer does: not while
/// the append's sync is under way (the review: the append published, then synced, and a follower
/// and a consumer took records a power loss could still take).
#[test]
fn in_sync_mode_readers_see_a_record_once_it_is_durable() {
    let _serial = serial();
    let _clean = NoFailPoints;
    let t = tempfile::tempdir().unwrap();
    let o = Options::default().flush(FlushMode::Sync);
    let log = Arc::new(CommitLog::open(&[t.path()], o).unwrap());
    let first = log.append(b"durable").unwrap();
    let end = log.max_offset().unwrap();
    let follower = CommitLog::open(&[t.path()], Options::default().read_only(true)).unwrap();
    let (paused, release) = pause_once("flush::listed");
    let appender = {
        let log = Arc::clone(&log);
        std::thread::spawn(move || log.append(b"syncing"))
    };
    paused.recv_timeout(BOUND).expect("the append's sync began");
    let short = Some(Duration::from_millis(200));
    for (who, reader) in [("writer", &*log), ("follower", &follower)] {
        assert_eq!(
            reader.wait(end, short).unwrap(),
            end,
            "{who}: a wait sees no new record"
        );
        let offsets: Vec<u64> = reader
            .scan(None, None)
            .unwrap()
            .map(|r| r.unwrap().offset())
            .collect();
        assert_eq!(
            offsets,
            vec![first],
            "{who}: a scan sees the durable record only"
        );
        let copts = exclusive();
        let mut c = reader.consumer(who, copts).unwrap();
        assert_eq!(
            c.poll(10, Some(std::time::Instant::now())).unwrap().len(),
            1,
            "{who}"
        );
    }
    release.send(()).unwrap();
    let second = appender.join().unwrap().unwrap();
    for reader in [&*log, &follower] {
        assert!(reader.wait(end, short).unwrap() > end);
        assert_eq!(reader.read(second).unwrap().offset(), second);
    }
}

/// A control page made on a full disk: `DiskFull` at the open, never SIGBUS at the first touch
/// of a page the filesystem had no block for.
#[test]
fn a_control_page_on_a_full_disk_is_disk_full_not_sigbus() {
    let _serial = serial();
    let t = tempfile::tempdir().unwrap();
    let mnt = t.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=1m", "tmpfs"])
        .arg(&mnt)
        .status()
        .is_ok_and(|s| s.success());
    if !mounted {
        skip("mounting a tmpfs is not permitted here");
        return;
    }
    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }
    let _unmount = Unmount(mnt.clone());
    let dirs = vec![mnt.join("s")];
    let o = opts().segment_size(64 * 1024);
    CommitLog::open(&dirs, o.clone().exclusive(true))
        .unwrap()
        .append(b"x")
        .unwrap();
    std::fs::remove_file(dirs[0].join("rmqlog.ctl")).unwrap();
    let ballast = mnt.join("ballast");
    {
        use std::io::Write;
        let mut f = std::fs::File::create(&ballast).unwrap();
        while f.write_all(&[1u8; 4096]).is_ok() {}
    }
    match CommitLog::open(&dirs, o.clone()) {
        Err(Error::DiskFull { tried, .. }) => assert!(tried.contains("rmqlog.ctl"), "{tried}"),
        other => panic!("DiskFull naming the page, got {:?}", other.map(|_| ())),
    }
    std::fs::remove_file(&ballast).unwrap();
    let log = CommitLog::open(&dirs, o).unwrap();
    let at = log.append(b"y").unwrap();
    assert_eq!(&*log.read(at).unwrap(), b"y");
}

/// Opens sharing a name in read-only opens: one takes over claims another (whose view was ahead)
/// left at its close; it looks at the log again and delivers them (it failed every poll with an
/// internal error: "claimed records ... read as none").
#[test]
fn a_follower_takes_over_claims_past_its_view() {
    let _serial = serial();
    let t = tempfile::tempdir().unwrap();
    let writer = CommitLog::open(&[t.path()], opts()).unwrap();
    writer.append(b"first").unwrap();
    let ro = || CommitLog::open(&[t.path()], Options::default().read_only(true)).unwrap();
    let (lx, ly) = (ro(), ro());
    let now = || Some(std::time::Instant::now());
    let mut y = ly.consumer("c", ConsumerOptions::default()).unwrap();
    assert_eq!(y.poll(100, now()).unwrap().len(), 1);
    y.commit(None).unwrap();
    let later: Vec<u64> = (0..5).map(|i| writer.append(&[i; 10]).unwrap()).collect();
    let mut x = lx.consumer("c", ConsumerOptions::default()).unwrap();
    assert_eq!(x.poll(100, now()).unwrap().len(), 5);
    drop(x); // closes without committing: its claims go to the next poll
    let got: Vec<u64> = y
        .poll(100, now())
        .unwrap()
        .iter()
        .map(|r| r.offset())
        .collect();
    assert_eq!(got, later, "the closed open's claims, delivered again");
    y.commit(None).unwrap();
    assert_eq!(y.committed(), writer.max_offset().unwrap());
}

/// A directory where one directory's `rmqlog.consumers` should be: the log opens (a consumer's
/// open says what is wrong), writers too.
#[test]
fn a_damaged_positions_file_does_not_stop_the_log_opening() {
    let _serial = serial();
    let t = tempfile::tempdir().unwrap();
    let dirs = two_dirs(t.path());
    {
        let log = CommitLog::open(&dirs, opts().exclusive(true)).unwrap();
        log.append(b"x").unwrap();
        let mut c = log.consumer("k", ConsumerOptions::default()).unwrap();
        c.poll(1, None).unwrap();
        c.commit(None).unwrap();
    }
    let file = dirs[1].join(rmqlog::POSITIONS_FILE);
    std::fs::remove_file(&file).unwrap();
    std::fs::create_dir(&file).unwrap();
    for exclusive in [true, false] {
        let log = CommitLog::open(&dirs, opts().exclusive(exclusive)).unwrap();
        log.append(b"y").unwrap();
    }
}

/// A holder stopped (SIGSTOP) while it holds the append lock: an append waits `lock_timeout`,
/// then fails naming the holder's process; once the holder runs again, appends go on.
#[test]
fn a_stopped_holder_fails_the_wait_at_its_bound_naming_it() {
    let _serial = serial();
    let t = tempfile::tempdir().unwrap();
    let dirs = two_dirs(t.path());
    let log = CommitLog::open(&dirs, opts().lock_timeout(Duration::from_millis(300))).unwrap();
    let mut holder = Proc::spawn(&dirs, "batch@append::before_publish");
    holder.wait_for("paused");
    let pid = holder.child.id();
    // SAFETY: signals a child process this test started and still owns.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGSTOP) }, 0);
    let started = std::time::Instant::now();
    match log.append(b"waits") {
        Err(e @ Error::LockTimeout { .. }) => {
            let Error::LockTimeout { holder, .. } = &e else {
                unreachable!()
            };
            assert_eq!(*holder, Some(pid), "names the holder: {e}");
            assert!(e.to_string().contains(&pid.to_string()), "{e}");
        }
        other => panic!("a timeout naming the holder, got {other:?}"),
    }
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert!(started.elapsed() < Duration::from_secs(10));
    // A close while another thread waits for the lock ends that wait (Closed), not at its bound.
    let waiting = CommitLog::open(&dirs, opts().lock_timeout(Duration::from_secs(60))).unwrap();
    let waiting = Arc::new(waiting);
    let appender = {
        let log = Arc::clone(&waiting);
        std::thread::spawn(move || log.append(b"waits"))
    };
    std::thread::sleep(Duration::from_millis(300));
    let closing = std::time::Instant::now();
    waiting.close().unwrap();
    assert!(matches!(appender.join().unwrap(), Err(Error::Closed)));
    assert!(
        closing.elapsed() < Duration::from_secs(10),
        "{:?}",
        closing.elapsed()
    );
    // SAFETY: as above.
    unsafe { libc::kill(pid as i32, libc::SIGCONT) };
    drop(holder); // dies holding the lock: the next append repairs and goes on
    let end = log.max_offset().unwrap();
    assert_eq!(log.append(b"after").unwrap(), end);
}

/// A zeroed control page under a shared writer: its next append is refused as corruption naming
/// the page, never written over record 0; nothing acknowledged is lost.
#[test]
fn a_zeroed_control_page_is_refused_not_trusted() {
    let _serial = serial();
    let t = tempfile::tempdir().unwrap();
    let dirs = two_dirs(t.path());
    let log = CommitLog::open(&dirs, opts()).unwrap();
    let acked: Vec<u64> = (0..20)
        .map(|i| log.append(&tagged(1, i, 100)).unwrap())
        .collect();
    let ctl = dirs[0].join("rmqlog.ctl");
    common::write_at(&ctl, 0, &[0u8; 4096]);
    match log.append(&tagged(1, 20, 100)) {
        Err(Error::Corruption { path, reason, .. }) => {
            assert_eq!(path.as_deref(), Some(ctl.as_path()));
            assert!(reason.contains("rmqlog.ctl"), "{reason}");
        }
        other => panic!("a damaged page is refused, got {other:?}"),
    }
    drop(log);
    let log = CommitLog::open(&dirs, opts()).unwrap();
    assert_eq!(check_store(&log).get(&1), Some(&20));
    assert_eq!(
        log.read(*acked.last().unwrap()).unwrap().offset(),
        acked[19]
    );
    assert!(log.append(&tagged(1, 20, 100)).unwrap() > acked[19]);
    // The open that made the page, appending alone (nothing else changed the page): its next
    // append checks the page too. A word of the page: the version; then the lock's bytes alone.
    common::write_at(&ctl, 8, &4u32.to_le_bytes());
    assert!(
        matches!(log.append(b"v"), Err(Error::Corruption { .. })),
        "version"
    );
    drop(log);
    let log = CommitLog::open(&dirs, opts()).unwrap();
    log.append(b"ok").unwrap();
    common::write_at(&ctl, 1024, &[0xff; 40]);
    match log.append(b"lock") {
        Err(Error::Corruption { reason, .. }) => assert!(reason.contains("lock"), "{reason}"),
        other => panic!("a lock of garbage is corruption of the page, got {other:?}"),
    }
}

/// A joiner that may write the store but not its control page (here: immutable) is refused with
/// the error opening it for writing names, not killed by SIGSEGV taking the lock.
#[test]
fn a_joiner_that_cannot_write_the_page_is_refused() {
    let _serial = serial();
    let t = tempfile::tempdir().unwrap();
    let dirs = two_dirs(t.path());
    let first = CommitLog::open(&dirs, opts()).unwrap();
    first.append(b"x").unwrap();
    let ctl = dirs[0].join("rmqlog.ctl");
    if !chattr(&ctl, "+i") {
        return;
    }
    let joined = CommitLog::open(&dirs, opts());
    chattr(&ctl, "-i");
    match joined {
        Err(Error::Io { path, source, .. }) => {
            assert_eq!(path, ctl);
            assert_eq!(source.raw_os_error(), Some(libc::EPERM));
        }
        other => panic!("refused naming rmqlog.ctl, got {:?}", other.map(|_| ())),
    }
    first.append(b"y").unwrap();
}

/// `chattr` on `path`; false (the test skips) where the filesystem or the user cannot.
fn chattr(path: &Path, flag: &str) -> bool {
    let ok = Command::new("chattr")
        .arg(flag)
        .arg(path)
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        skip(&format!("chattr {flag} failed on {}", path.display()));
    }
    ok
}

fn skip(why: &str) {
    let required =
        std::env::var("RMQLOG_REQUIRE_ALL_TESTS").is_ok_and(|v| !v.is_empty() && v != "0");
    assert!(!required, "RMQLOG_REQUIRE_ALL_TESTS=1: may not skip: {why}");
    eprintln!("skipped: {why}");
}

/// A writer in another PID namespace is refused at its join: the append lock names its holder
/// by thread id, which a process of another namespace can share with a live holder.
#[test]
fn a_writer_in_another_pid_namespace_is_refused() {
    let _serial = serial();
    let t = tempfile::tempdir().unwrap();
    let dirs = two_dirs(t.path());
    let first = CommitLog::open(&dirs, opts()).unwrap();
    let probe = Command::new("unshare")
        .args(["--pid", "--fork", "true"])
        .status();
    if !probe.is_ok_and(|s| s.success()) {
        skip("unshare --pid --fork is not permitted here");
        return;
    }
    let mut cmd = Command::new("unshare");
    cmd.args(["--pid", "--fork", "--"])
        .arg(std::env::current_exe().unwrap());
    let mut other = Proc::spawn_with(cmd, &dirs, "join");
    let said = other.rest();
    assert!(
        said.iter()
            .any(|l| l.contains("open failed") && l.contains("PID namespace")),
        "refused naming the PID namespace: {said:?}"
    );
    // In this namespace, a joiner is welcome.
    let mut same = Proc::spawn(&dirs, "join");
    same.wait_for("joined");
    first.append(b"x").unwrap();
}

/// A follower asleep on a control page whose file was removed, and a writer that made a new one:
/// the follower looks at its file while it waits, and follows the new page.
#[test]
fn a_follower_follows_a_replaced_control_page() {
    let _serial = serial();
    let t = tempfile::tempdir().unwrap();
    let o = Options::default();
    let log = CommitLog::open(&[t.path()], o.clone()).unwrap();
    let end = log
        .append(b"first")
        .map(|_| log.max_offset().unwrap())
        .unwrap();
    let follower = Arc::new(CommitLog::open(&[t.path()], o.clone().read_only(true)).unwrap());
    let f = Arc::clone(&follower);
    let waiter = std::thread::spawn(move || f.wait(end, Some(Duration::from_secs(30))));
    std::thread::sleep(Duration::from_millis(100));
    drop(log);
    std::fs::remove_file(t.path().join("rmqlog.ctl")).unwrap();
    let log = CommitLog::open(&[t.path()], o).unwrap();
    let started = std::time::Instant::now();
    log.append(b"second").unwrap();
    let woke = waiter.join().unwrap().unwrap();
    assert!(woke > end, "the follower saw the new record");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "woken within a few seconds, not at its timeout ({:?})",
        started.elapsed()
    );
}

/// Positions damaged in every directory's copy are an error naming them, not a silent reset
/// of every consumer to its start.
#[test]
fn positions_damaged_in_every_copy_are_an_error() {
    let _serial = serial();
    let t = tempfile::tempdir().unwrap();
    let dirs = two_dirs(t.path());
    let o = opts().exclusive(true);
    {
        let log = CommitLog::open(&dirs, o.clone()).unwrap();
        for i in 0..10 {
            log.append(&tagged(1, i, 100)).unwrap();
        }
        let mut c = log.consumer("k", ConsumerOptions::default()).unwrap();
        c.poll(5, None).unwrap();
        c.commit(None).unwrap();
    }
    for d in &dirs {
        common::write_at(&d.join(rmqlog::POSITIONS_FILE), 0, b"garbage!");
    }
    let log = CommitLog::open(&dirs, o).unwrap();
    let copts = ConsumerOptions {
        start: Start::Latest,
        ..Default::default()
    };
    match log.consumer("k", copts) {
        Err(Error::Corruption { reason, .. }) => {
            for d in &dirs {
                let name = d.join(rmqlog::POSITIONS_FILE).display().to_string();
                assert!(reason.contains(&name), "names {name}: {reason}");
            }
        }
        other => panic!("an error, got {:?}", other.map(|c| c.committed())),
    }
    for d in &dirs {
        assert!(
            d.join(rmqlog::POSITIONS_FILE).exists(),
            "nothing renamed or re-made"
        );
    }
    // Copies zeroed, or cut short, in every directory read as holding no name (as a file its
    // creator died in before writing does): the count of names made says otherwise.
    for damage in ["zeroed", "cut short"] {
        for d in &dirs {
            let file = d.join(rmqlog::POSITIONS_FILE);
            let len = std::fs::metadata(&file).unwrap().len();
            match damage {
                "zeroed" => common::write_at(&file, 0, &vec![0u8; len as usize]),
                _ => std::fs::File::options()
                    .write(true)
                    .open(&file)
                    .unwrap()
                    .set_len(0)
                    .unwrap(),
            }
        }
        let copts = ConsumerOptions {
            start: Start::Latest,
            ..Default::default()
        };
        match log.consumer("k", copts) {
            Err(Error::Corruption { reason, .. }) => assert!(reason.contains("gone"), "{reason}"),
            other => panic!("{damage}: an error, got {:?}", other.map(|c| c.committed())),
        }
        assert!(
            log.consumers().is_err(),
            "{damage}: the listing says so too"
        );
    }
}

/// The segment list changes under every listing an append takes, with and without the append
/// lock (`shared::changed_while_listed` moves the generation as another open's deletion does:
/// a tier deleting local copies needs no append lock). The append still goes through: under
/// the append lock no roll runs, so a listing consistent in itself is taken. It failed with
/// "kept changing ... try again" after eight listings (a review found it under tier churn).
#[test]
fn an_append_goes_through_while_the_segment_list_changes_under_every_listing() {
    let _serial = serial();
    let t = tempfile::tempdir().unwrap();
    let dirs = two_dirs(t.path());
    let a = CommitLog::open(&dirs, opts()).unwrap();
    let b = CommitLog::open(&dirs, opts()).unwrap();
    for i in 0..200u32 {
        b.append(&tagged(9, i, 1000)).unwrap(); // b rolls: a's view is behind, it lists
    }
    fail::cfg("shared::changed_while_listed", "return").unwrap();
    let appended = a.append(b"through");
    fail::remove("shared::changed_while_listed");
    let at = appended.unwrap();
    assert_eq!(&*a.read(at).unwrap(), b"through");
    assert_eq!(&*b.read(at).unwrap(), b"through");
}

/// A maintenance call behind another open holding the maintenance lock and not letting go
/// (paused inside `truncate_before`, as a SIGSTOPped process is): it fails with a lock timeout
/// after `lock_timeout`, changing nothing. It waited without a bound.
#[test]
fn a_maintenance_call_behind_a_holder_that_does_not_let_go_times_out() {
    use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
    static RELEASE: AtomicBool = AtomicBool::new(false);
    let _serial = serial();
    let t = tempfile::tempdir().unwrap();
    let dirs = two_dirs(t.path());
    let a = CommitLog::open(&dirs, opts().lock_timeout(Duration::from_millis(300))).unwrap();
    let b = CommitLog::open(&dirs, opts()).unwrap();
    for i in 0..300u32 {
        a.append(&tagged(9, i, 1000)).unwrap();
    }
    let starts: Vec<u64> = a
        .segments()
        .unwrap()
        .iter()
        .map(|s| s.start_offset)
        .collect();
    assert!(starts.len() > 3);
    RELEASE.store(false, SeqCst);
    let (tx, rx) = channel();
    let tx = Mutex::new(tx);
    fail::cfg_callback("truncate::planning", move || {
        let _ = tx.lock().unwrap().send(());
        while !RELEASE.load(SeqCst) {
            std::thread::sleep(Duration::from_millis(5));
        }
    })
    .unwrap();
    let first = starts[1];
    let holder = std::thread::spawn(move || b.truncate_before(first).map(|_| ()));
    rx.recv_timeout(BOUND)
        .expect("b holds the maintenance lock");
    let started = std::time::Instant::now();
    match a.truncate_before(starts[2]) {
        Err(Error::LockTimeout { lock, .. }) => assert_eq!(lock, "maintenance lock"),
        other => panic!("a lock timeout, got {other:?}"),
    }
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(300) && waited < BOUND,
        "{waited:?}"
    );
    RELEASE.store(true, SeqCst);
    holder.join().unwrap().unwrap();
    fail::remove("truncate::planning");
    // b's truncation alone: a's changed nothing.
    assert_eq!(a.segments().unwrap()[0].start_offset, first);
}
