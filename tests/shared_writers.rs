#![allow(clippy::unwrap_used)] // tests: a failed unwrap is the failure report
//! Shared writers (`exclusive=False`): several opens, in one process and in several, appending to
//! one store. Offsets stay unique and dense, batches whole, and a writer process killed while it
//! holds the append lock (after copying its records, before publishing them; mid-roll) neither
//! blocks the others nor leaves a byte any reader or recovery takes for a record.
//!
//! The tests run on threads of one process, several at once, and must not disturb each other:
//! - every wait has a bound ([`WAIT`], and a [`watchdog`] per test for what the library itself
//!   might wait for) and says what it waited for;
//! - a child process is a [`Killed`], gone with its test, even one that fails;
//! - a child holds copies of every descriptor of this process from its spawn until it runs, the
//!   `flock`s of opens other tests close meanwhile among them: a test that counts on the locks of
//!   the opens it closed being gone waits for the spawns under way first ([`spawns_done`]);
//! - fail points are global to the process: a test that configures some holds the
//!   [`fail::FailScenario`] (one such test at a time, and every fail point removed when it ends,
//!   panicking or not), and pauses only threads of its own, by name ([`pause_in`]).
#![cfg(feature = "failpoints")]

mod common;

use common::{check_store, tagged, untag};

use std::collections::HashMap;
use std::fmt::Debug;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rmqlog::{CommitLog, Error, FlushMode, Options, TierOptions};

/// Set in a child: the store's directories, joined by ':'.
const DIRS_ENV: &str = "RMQLOG_SHARED_DIRS";
/// Set in a child: what it does (`append:<writer>:<n>`, `pause-single`, `pause-batch`).
const WHAT_ENV: &str = "RMQLOG_SHARED_WHAT";
const SEGMENT: u64 = 64 * 1024;
/// Set in a child: the `file://` URL of the store's remote tier.
const TIER_ENV: &str = "RMQLOG_SHARED_TIER";
/// The longest any one wait of these tests lasts: generous, so that a slow, loaded machine never
/// trips it; bounded, so that a hang fails the run saying what was awaited.
const WAIT: Duration = Duration::from_secs(60);
/// The longest a test runs before its [`watchdog`] ends the test binary.
const TEST_BOUND: Duration = Duration::from_secs(300);

/// The tier of the shared-tier tests: local copies go once two segments' worth are uploaded.
fn tier_options(url: &str) -> TierOptions {
    let mut t = TierOptions::new(url);
    t.local_retention_bytes = Some(2 * SEGMENT);
    t
}

fn opts() -> Options {
    Options::default()
        .segment_size(SEGMENT)
        .flush(FlushMode::Async)
        .exclusive(false)
}

/// A child process: appends as `WHAT_ENV` says.
#[test]
fn writer_process() {
    let (Ok(dirs), Ok(what)) = (std::env::var(DIRS_ENV), std::env::var(WHAT_ENV)) else {
        return; // run by the tests below
    };
    // The parent gone (its end of stdin closed, even by a crash or the watchdog's exit), no one
    // waits for this child, nor will kill it: it ends.
    std::thread::spawn(|| {
        let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
        std::process::exit(0);
    });
    let dirs: Vec<PathBuf> = dirs.split(':').map(PathBuf::from).collect();
    let opts = match what.as_str() {
        "own" => opts().clean_interval(Duration::ZERO),
        _ => opts(),
    };
    let opts = match std::env::var(TIER_ENV) {
        Ok(url) => opts.tier(Some(tier_options(&url))),
        Err(_) => opts,
    };
    let log = CommitLog::open(&dirs, opts).unwrap();
    let parts: Vec<&str> = what.split(':').collect();
    match parts.as_slice() {
        ["append", w, n] => {
            let (w, n): (u32, u32) = (w.parse().unwrap(), n.parse().unwrap());
            let mut i = 0;
            while i < n {
                // Singles and batches, mixed.
                if i % 7 == 3 && i + 5 <= n {
                    let bodies: Vec<Vec<u8>> = (i..i + 5).map(|k| tagged(w, k, 300)).collect();
                    log.append_batch(&bodies).unwrap();
                    i += 5;
                } else {
                    log.append(&tagged(w, i, 60 + (i as usize % 200))).unwrap();
                    i += 1;
                }
            }
            log.close().unwrap();
            println!("done");
        }
        ["pause", kind] => {
            for i in 0..50 {
                log.append(&tagged(9, i, 100)).unwrap();
            }
            println!("acked {}", log.max_offset().unwrap());
            pause_forever_at("append::before_publish");
            if *kind == "batch" {
                // About 1.5 segments: the batch rolls into a new segment before the pause.
                let bodies: Vec<Vec<u8>> = (50..140).map(|i| tagged(9, i, 1000)).collect();
                log.append_batch(&bodies).unwrap();
            } else {
                log.append(&tagged(9, 50, 100)).unwrap();
            }
            unreachable!("the append pauses until the process is killed");
        }
        ["move"] => {
            // The first open: it does the background work, and is killed in the middle of a move.
            append_300_and_say_acked(&log);
            pause_forever_at("move::copied");
            let seg = &log.segments().unwrap()[1];
            let to = dirs.iter().find(|d| !seg.path.starts_with(d)).unwrap();
            log.move_segment(seg.start_offset, to).unwrap();
            unreachable!("the move pauses until the process is killed");
        }
        ["ship"] => {
            // The first open: it does the background work, so its thread ships the segments.
            append_300_and_say_acked(&log);
            println!("shipping");
            loop {
                std::thread::sleep(Duration::from_secs(1));
            }
        }
        ["truncate"] => {
            // A joiner: it truncates and is killed after its files went, before it announced it.
            append_300_and_say_acked(&log);
            // The parent's view takes these records in before the truncation.
            let go = dirs[0].parent().unwrap().join("go");
            while !go.exists() {
                std::thread::sleep(Duration::from_millis(5));
            }
            pause_forever_at("delete::unlinked");
            log.truncate_before(SEGMENT * 3).unwrap();
            unreachable!("the truncation pauses until the process is killed");
        }
        ["own"] => {
            log.clean(false).unwrap(); // takes the background work
            println!("owning");
            loop {
                std::thread::sleep(Duration::from_secs(1));
            }
        }
        ["keep"] => {
            println!("keeping");
            loop {
                std::thread::sleep(Duration::from_secs(1));
            }
        }
        ["survive"] => {
            let offset = log.append(&tagged(0, 0, 1000)).unwrap();
            log.flush().unwrap();
            println!("acked {offset}");
            println!("survived");
            loop {
                std::thread::sleep(Duration::from_secs(1));
            }
        }
        other => panic!("unknown child task {other:?}"),
    }
}

/// A child's preamble: 300 records of 1000 B from writer 0, flushed, and their end said.
fn append_300_and_say_acked(log: &CommitLog) {
    for i in 0..300 {
        log.append(&tagged(0, i, 1000)).unwrap();
    }
    log.flush().unwrap();
    println!("acked {}", log.max_offset().unwrap());
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

/// Every record `acked[i]` (writer `writer`'s record `i`, 1000 B) at or above `head` reads back.
fn assert_reads_back_from(log: &CommitLog, writer: u32, acked: &[u64], head: u64) {
    for (i, &at) in acked.iter().enumerate().filter(|(_, &at)| at >= head) {
        assert_eq!(
            &*log.read(at).unwrap(),
            tagged(writer, i as u32, 1000),
            "record {i}"
        );
    }
}

fn spawn(dirs: &[PathBuf], what: &str) -> Killed {
    spawn_env(dirs, what, &[])
}

/// Held for writing from a child's spawn until it runs (it said its first line): until it
/// execs, a child holds copies of every descriptor of this process, among them the `flock`s of
/// opens other tests close meanwhile (their store would stay locked for that long).
static SPAWNING: RwLock<()> = RwLock::new(());

/// Returns once no child spawned by any test still holds this process's descriptors: after it,
/// the locks of the opens this test closed are gone (another open may take them).
fn spawns_done() {
    drop(SPAWNING.read().unwrap_or_else(PoisonError::into_inner));
}

/// Opens `dirs` with `opts` after this test's earlier opens of them closed (see [`spawns_done`]).
fn reopen(dirs: &[PathBuf], opts: Options) -> CommitLog {
    spawns_done();
    CommitLog::open(dirs, opts).unwrap()
}

fn spawn_env(dirs: &[PathBuf], what: &str, env: &[(&str, &str)]) -> Killed {
    let joined: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
    let _spawning = SPAWNING.write().unwrap_or_else(PoisonError::into_inner);
    let mut child = Command::new(std::env::current_exe().unwrap())
        .envs(env.iter().copied())
        .args([
            "--exact",
            "writer_process",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(DIRS_ENV, joined.join(":"))
        .env(WHAT_ENV, what)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, lines) = channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut child = Killed {
        child,
        what: what.to_string(),
        lines,
        said: Vec::new(),
        read: 0,
    };
    // libtest's first line ("running 1 test"): the child runs, no descriptor of ours in it.
    let deadline = Instant::now() + WAIT;
    let first = child.next_line(deadline, "its first line");
    child.said.push(first);
    child
}

/// A child process running [`writer_process`], SIGKILLed and reaped when dropped (a failing
/// test leaves none behind). Its output is read by a thread of its own, so that every wait for
/// a line of it has a bound.
struct Killed {
    child: Child,
    /// What it does (`WHAT_ENV`), for the messages.
    what: String,
    lines: Receiver<String>,
    /// What it said so far, line by line.
    said: Vec<String>,
    /// How many lines of `said` [`Killed::read_until`] went through.
    read: usize,
}

impl Killed {
    /// The child's next line, waiting at most until `deadline` (else a panic naming `awaited`).
    fn next_line(&mut self, deadline: Instant, awaited: &str) -> String {
        match self
            .lines
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
        {
            Ok(line) => line,
            Err(RecvTimeoutError::Timeout) => panic!(
                "child {:?} did not say {awaited} within {WAIT:?}; it said {:?}",
                self.what, self.said
            ),
            Err(RecvTimeoutError::Disconnected) => panic!(
                "child {:?} ended ({:?}) before it said {awaited}; it said {:?}",
                self.what,
                self.child.wait(),
                self.said
            ),
        }
    }

    /// Reads the child's output (at most [`WAIT`]) until a line ends with `until`; returns the
    /// `acked` end if it said one.
    fn read_until(&mut self, until: &str) -> Option<u64> {
        let deadline = Instant::now() + WAIT;
        let awaited = format!("{until:?}");
        let mut acked = None;
        loop {
            if self.read == self.said.len() {
                let line = self.next_line(deadline, &awaited);
                self.said.push(line);
            }
            let line = &self.said[self.read];
            self.read += 1;
            // libtest prints the test's name on the same line before the first output.
            if let Some(end) = line.split("acked ").nth(1) {
                acked = Some(end.trim().parse().unwrap());
            }
            if line.ends_with(until) {
                return acked;
            }
        }
    }

    /// Waits (at most [`WAIT`]) for the child to end by itself; returns how it ended. What it
    /// said is in `said`.
    fn finish(&mut self) -> ExitStatus {
        let deadline = Instant::now() + WAIT;
        loop {
            match self
                .lines
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            {
                Ok(line) => self.said.push(line),
                Err(RecvTimeoutError::Disconnected) => break,
                Err(RecvTimeoutError::Timeout) => panic!(
                    "child {:?} did not end within {WAIT:?}; it said {:?}",
                    self.what, self.said
                ),
            }
        }
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "child {:?} closed its output and did not end within {WAIT:?}",
                self.what
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Ends the test binary (its children end with it: see [`writer_process`]) if the test that
/// holds the result is still running after [`TEST_BOUND`]: a deadlock fails the run in bounded
/// time, naming the test, rather than hanging it.
fn watchdog() -> Watchdog {
    let test = std::thread::current()
        .name()
        .unwrap_or("a test")
        .to_string();
    let (done, until_done) = channel::<()>();
    std::thread::spawn(move || {
        if let Err(RecvTimeoutError::Timeout) = until_done.recv_timeout(TEST_BOUND) {
            eprintln!("{test} still runs after {TEST_BOUND:?}: ending the test binary");
            std::process::exit(101);
        }
    });
    Watchdog(done)
}

/// Held by a test while it runs ([`watchdog`]); its drop tells the watchdog the test ended.
struct Watchdog(#[allow(dead_code)] Sender<()>);

/// Joins `thread` (doing `what`) within [`WAIT`]; its panic is the caller's.
fn join<T>(thread: JoinHandle<T>, what: &str) -> T {
    join_by(thread, what, Instant::now() + WAIT)
}

/// Joins `thread` (doing `what`) by `deadline`; its panic is the caller's.
fn join_by<T>(thread: JoinHandle<T>, what: &str, deadline: Instant) -> T {
    let start = Instant::now();
    while !thread.is_finished() {
        assert!(
            Instant::now() < deadline,
            "{what}: not done after {:?}",
            start.elapsed()
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    thread
        .join()
        .unwrap_or_else(|e| std::panic::resume_unwind(e))
}

/// Runs `f` on a thread named `name` (fail points pause threads by name: [`pause_in`]).
fn on_thread<L: Send + Sync + 'static, T: Send + 'static>(
    name: &str,
    log: &Arc<L>,
    f: impl FnOnce(&L) -> T + Send + 'static,
) -> JoinHandle<T> {
    let log = Arc::clone(log);
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || f(&log))
        .unwrap()
}

fn two_dirs(root: &Path) -> Vec<PathBuf> {
    vec![root.join("d0"), root.join("d1")]
}

#[test]
fn four_processes_append_to_one_log_with_dense_offsets() {
    let _watchdog = watchdog();
    let t = tempfile::tempdir().unwrap();
    let dirs = two_dirs(t.path());
    // The parent holds the store open too, and appends meanwhile.
    let log = CommitLog::open(&dirs, opts()).unwrap();
    let n = 3000;
    let mut children: Vec<Killed> = (1..=4)
        .map(|w| spawn(&dirs, &format!("append:{w}:{n}")))
        .collect();
    for i in 0..n {
        log.append(&tagged(0, i, 80)).unwrap();
    }
    for c in &mut children {
        let status = c.finish();
        let out = &c.said;
        assert!(status.success(), "{status}: {out:?}");
        assert!(out.iter().any(|l| l.ends_with("done")), "{out:?}");
    }
    // check_store compares the log's record count with a scan: here the count of segments and
    // records the other processes wrote.
    let counts = check_store(&log);
    assert_eq!(counts.len(), 5);
    assert!(counts.values().all(|&c| c == n), "{counts:?}");
    assert!(
        log.segments().unwrap().len() > 10,
        "the writers rolled many segments between them"
    );
    let mid = log.segments().unwrap()[5].start_offset;
    let below = log.scan(None, Some(mid)).unwrap().count() as u64;
    assert_eq!(log.records_between(0, mid).unwrap(), below);
    log.close().unwrap();
    // The last one out left a store an exclusive writer opens as it was, its counts recorded.
    let log = reopen(&dirs, opts().exclusive(true));
    assert_eq!(check_store(&log).values().sum::<u32>(), 5 * n);
    let verified = log.verify_counted(false, |_, _| {}).unwrap();
    assert_eq!(verified.records, u64::from(5 * n));
    assert!(verified.damaged.is_empty(), "{:?}", verified.damaged);
}

#[test]
fn opens_in_one_process_append_together_and_see_each_other() {
    let _watchdog = watchdog();
    let t = tempfile::tempdir().unwrap();
    let dirs = two_dirs(t.path());
    let a = Arc::new(CommitLog::open(&dirs, opts()).unwrap());
    // Another order of the same directories joins the same store.
    let rev: Vec<PathBuf> = dirs.iter().rev().cloned().collect();
    let b = Arc::new(CommitLog::open(&rev, opts()).unwrap());
    let appenders: Vec<_> = [(1u32, &a), (2, &b)]
        .into_iter()
        .map(|(w, log)| {
            on_thread(&format!("writer {w}"), log, move |log| {
                for i in 0..2000 {
                    log.append(&tagged(w, i, 100 + (i as usize % 300))).unwrap();
                }
            })
        })
        .collect();
    for appender in appenders {
        join(appender, "2000 appends");
    }
    // Each open reads what the other wrote.
    for log in [&a, &b] {
        let counts = check_store(log);
        assert_eq!(counts.get(&1).copied(), Some(2000));
        assert_eq!(counts.get(&2).copied(), Some(2000));
    }
    // A wait in one open wakes for an append of the other.
    let end = a.max_offset().unwrap();
    let waiter = on_thread("waiter", &b, move |b| b.wait(end, Some(WAIT)).unwrap());
    std::thread::sleep(Duration::from_millis(50));
    a.append(&tagged(1, 2000, 10)).unwrap();
    let woke = join(waiter, "b's wait for a's record");
    assert!(woke > end, "b's wait ended at {woke}, without a's record");
}

#[test]
fn a_joiner_reads_and_keeps_the_records_from_before_it_joined() {
    let _watchdog = watchdog();
    let t = tempfile::tempdir().unwrap();
    let dirs = two_dirs(t.path());
    let a = CommitLog::open(&dirs, opts()).unwrap();
    let acked: Vec<u64> = (0..300)
        .map(|i| a.append(&tagged(0, i, 1000)).unwrap())
        .collect();
    assert!(
        acked[299] > 3 * SEGMENT,
        "the records span several segments"
    );
    let b = CommitLog::open(&dirs, opts()).unwrap();
    assert_eq!(b.min_offset().unwrap(), 0);
    assert_eq!(&*b.read(0).unwrap(), tagged(0, 0, 1000));
    // b is the last one out: its clean checkpoint records its head, which must be the store's.
    a.close().unwrap();
    spawns_done(); // a's locks are gone: b knows it is the last
    b.close().unwrap();
    let log = reopen(&dirs, opts().exclusive(true));
    assert_eq!(log.min_offset().unwrap(), 0);
    for (i, &at) in acked.iter().enumerate() {
        assert_eq!(
            &*log.read(at).unwrap(),
            tagged(0, i as u32, 1000),
            "record {i}"
        );
    }
}

/// Each directory's checkpoint field `name` (a number).
fn checkpoint_field(dirs: &[PathBuf], name: &str) -> Vec<u64> {
    dirs.iter()
        .map(|d| {
            let text = std::fs::read_to_string(d.join("rmqlog.meta")).unwrap();
            let c: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
            c[name].as_u64().unwrap()
        })
        .collect()
}

/// Waits (at most [`WAIT`]) until a checkpoint newer than sequence number `seq` is written.
fn wait_for_checkpoint_after(dirs: &[PathBuf], seq: u64) {
    let deadline = Instant::now() + WAIT;
    while *checkpoint_seqs(dirs).iter().max().unwrap() <= seq {
        assert!(
            Instant::now() < deadline,
            "no checkpoint after number {seq} written within {WAIT:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn checkpoint_seqs(dirs: &[PathBuf]) -> Vec<u64> {
    checkpoint_field(dirs, "seq")
}

#[test]
fn a_new_owner_outranks_the_checkpoints_its_predecessor_wrote() {
    let _watchdog = watchdog();
    let t = tempfile::tempdir().unwrap();
    let dirs = two_dirs(t.path());
    let o = opts().clean_interval(Duration::ZERO);
    let a = CommitLog::open(&dirs, o.clone()).unwrap();
    let b = CommitLog::open(&dirs, o).unwrap(); // reads the checkpoint as it is now
    for i in 0..5 {
        a.append(&tagged(1, i, 100)).unwrap();
        a.flush().unwrap(); // a does the background work: each flush writes a checkpoint
    }
    let before = checkpoint_seqs(&dirs);
    a.close().unwrap();
    spawns_done(); // a's lock on rmqlog.owner is gone: b can take it
    b.append(&tagged(2, 0, 100)).unwrap();
    b.flush().unwrap(); // b takes the work over and writes the next checkpoint
    let after = checkpoint_seqs(&dirs);
    for (was, is) in before.iter().zip(&after) {
        assert!(
            is > was,
            "b's checkpoint outranks a's: {before:?} -> {after:?}"
        );
    }
}

#[test]
fn exclusive_and_shared_writers_exclude_each_other() {
    let _watchdog = watchdog();
    let t = tempfile::tempdir().unwrap();
    let dirs = two_dirs(t.path());
    let shared = CommitLog::open(&dirs, opts()).unwrap();
    let refused = CommitLog::open(&dirs, opts().exclusive(true)).unwrap_err();
    assert!(matches!(refused, Error::StoreLocked { .. }), "{refused}");
    shared.close().unwrap();
    let exclusive = reopen(&dirs, opts().exclusive(true));
    let refused = CommitLog::open(&dirs, opts()).unwrap_err();
    assert!(matches!(refused, Error::StoreLocked { .. }), "{refused}");
    drop(exclusive);
    // A joiner gives the same directories as the writers open.
    let a = reopen(&dirs, opts());
    let refused = CommitLog::open(&dirs[..1], opts()).unwrap_err();
    assert!(
        refused.to_string().contains("same directories"),
        "{refused}"
    );
    // And one segment size.
    let refused = CommitLog::open(&dirs, opts().segment_size(SEGMENT * 2)).unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("segment_size is 65536 there, 131072 here"),
        "{refused}"
    );
    let refused = CommitLog::open(&dirs, opts().retention_bytes(Some(1 << 20))).unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("retention_bytes is None there"),
        "{refused}"
    );
    drop(a);
}

#[test]
fn background_work_runs_in_one_open_and_moves_on_when_it_closes() {
    let _watchdog = watchdog();
    let t = tempfile::tempdir().unwrap();
    let dirs = two_dirs(t.path());
    let o = opts().clean_interval(Duration::ZERO);
    let a = CommitLog::open(&dirs, o.clone()).unwrap();
    let b = CommitLog::open(&dirs, o).unwrap();
    for i in 0..400 {
        b.append(&tagged(2, i, 1000)).unwrap();
    }
    a.clean(false).unwrap(); // a takes the work
                             // Either open deletes; the other one's view follows.
    assert_eq!(b.truncate_before(SEGMENT).unwrap(), SEGMENT);
    assert_eq!(a.min_offset().unwrap(), SEGMENT);
    assert_eq!(a.truncate_before(SEGMENT * 2).unwrap(), SEGMENT * 2);
    assert_eq!(b.min_offset().unwrap(), SEGMENT * 2);
    a.close().unwrap();
    assert_eq!(b.truncate_before(SEGMENT * 3).unwrap(), SEGMENT * 3);
    b.append(&tagged(2, 400, 10)).unwrap();
    b.close().unwrap();
    let log = reopen(&dirs, opts().exclusive(true));
    assert_eq!(log.min_offset().unwrap(), SEGMENT * 3);
}

/// Starts a writer process, lets it pause holding the append lock, kills it; returns the end it
/// acknowledged.
fn kill_holding_the_lock(dirs: &[PathBuf], kind: &str) -> u64 {
    let mut child = spawn(dirs, &format!("pause:{kind}"));
    let acked = child.read_until("paused").expect("the child said its end");
    drop(child); // SIGKILL, the append lock held
    acked
}

fn killed_holder(kind: &str) {
    let t = tempfile::tempdir().unwrap();
    let dirs = two_dirs(t.path());
    // A writer that stays open throughout: the next ones join the store rather than recover it.
    let mut keeper = spawn(&dirs, "keep");
    keeper.read_until("keeping");
    let acked = kill_holding_the_lock(&dirs, kind);
    // The next writer takes the lock from the dead holder, cuts its tail, appends one record as
    // long as the dead writer's first (1000 bytes in a batch: what follows it would be the dead
    // writer's next record, whole, were the tail not cut), syncs, and is killed in turn.
    let mut survivor = spawn(&dirs, "survive");
    let next = survivor
        .read_until("survived")
        .expect("the survivor's offset");
    drop(survivor);
    assert_eq!(
        next, acked,
        "the dead writer's unpublished records are gone"
    );
    drop(keeper);
    let expected = HashMap::from([(9, 50), (0, 1)]);
    let follower = CommitLog::open(&dirs, opts().read_only(true)).unwrap();
    assert_eq!(check_store(&follower), expected);
    drop(follower);
    // After a reboot no published end is trusted: recovery validates records from the last
    // sync on, and must find only the acknowledged ones.
    for d in &dirs {
        let _ = std::fs::remove_file(d.join("rmqlog.ctl"));
    }
    let log = reopen(&dirs, opts());
    assert_eq!(check_store(&log), expected);
    assert!(log.verify().unwrap().is_empty());
    // The log rolls on through the segments the dead writer had created.
    for i in 1..200 {
        log.append(&tagged(0, i, 1000)).unwrap();
    }
    assert_eq!(check_store(&log).get(&0).copied(), Some(200));
}

#[test]
fn a_writer_killed_holding_the_lock_mid_record_leaves_nothing() {
    let _watchdog = watchdog();
    killed_holder("single");
}

#[test]
fn a_writer_killed_holding_the_lock_mid_roll_leaves_nothing() {
    let _watchdog = watchdog();
    killed_holder("batch");
}

/// Seen once in the process chaos test: the repair after a dead holder lists the store while
/// other processes' maintenance deletes and moves segments, and an append failed with "opening
/// segment: No such file" for a copy deleted between the directory read and the read of its
/// head. A copy deleted meanwhile is gone, not an error, and the append goes on.
///
/// The repair is this test's append's: only a taker of the append lock repairs, and only appends
/// take it (a catch-up of any open, the keeper's background passes among them, lists without
/// it), so no other open repairs first and leaves the append nothing to list.
#[test]
fn a_repair_listing_a_copy_deleted_under_it_goes_on() {
    let _watchdog = watchdog();
    let _scenario = fail::FailScenario::setup();
    let t = tempfile::tempdir().unwrap();
    let dirs = two_dirs(t.path());
    let mut keeper = spawn(&dirs, "keep");
    keeper.read_until("keeping");
    let log = Arc::new(CommitLog::open(&dirs, opts()).unwrap());
    for i in 0..200 {
        log.append(&tagged(0, i, 1000)).unwrap();
    }
    let acked = kill_holding_the_lock(&dirs, "single");
    // A spare, never written copy of a sealed segment in the other directory (what a roll
    // interrupted by a crash leaves), which another open deletes while the repair lists.
    let seg = log.segments().unwrap()[0].clone();
    let other = dirs.iter().find(|d| !seg.path.starts_with(d)).unwrap();
    let spare = other.join(seg.path.file_name().unwrap());
    std::fs::write(&spare, vec![0u8; SEGMENT as usize]).unwrap();
    let found = pause_in("layout::duplicates_found", "appender");
    let appender = on_thread("appender", &log, |log| log.append(&tagged(0, 200, 1000)));
    let appender = found.wait(appender); // the repair listed both copies
    std::fs::remove_file(&spare).unwrap();
    found.release();
    let at = join(appender, "the append after the repair");
    assert_eq!(at.expect("the append after the repair"), acked);
    drop(keeper);
    assert_eq!(check_store(&log), HashMap::from([(9, 50), (0, 201)]));
}

#[test]
fn the_open_doing_the_background_work_syncs_everyones_records() {
    let _watchdog = watchdog();
    let t = tempfile::tempdir().unwrap();
    let dirs = two_dirs(t.path());
    let o = opts()
        .flush_interval(Duration::from_millis(20))
        .clean_interval(Duration::ZERO);
    let a = CommitLog::open(&dirs, o.clone()).unwrap();
    a.clean(false).unwrap(); // a does the background work
                             // b would sync what a left unsynced for a whole interval of its own: an hour.
    let b = CommitLog::open(&dirs, o.flush_interval(Duration::from_secs(3600))).unwrap();
    let at = b.append(&tagged(2, 0, 100)).unwrap();
    // b's own flusher leaves it to a's; b learns of the sync through the control page.
    let durable = b.wait_durable(at, Some(WAIT)).unwrap();
    assert!(durable > at, "a synced b's record: {durable} <= {at}");
    assert!(a.stats().unwrap().syncs > 0);
    assert_eq!(b.stats().unwrap().syncs, 0, "b never synced itself");
}

#[test]
fn an_async_writer_syncs_its_records_when_the_background_work_does_not() {
    let _watchdog = watchdog();
    let t = tempfile::tempdir().unwrap();
    let dirs = two_dirs(t.path());
    // a does the background work and syncs nothing by itself (flush "none"), nor cleans.
    let o = opts().clean_interval(Duration::ZERO);
    let a = CommitLog::open(&dirs, o.clone().flush(FlushMode::None)).unwrap();
    a.append(&tagged(1, 0, 100)).unwrap();
    let b = CommitLog::open(&dirs, o.flush_interval(Duration::from_millis(20))).unwrap();
    let at = b.append(&tagged(2, 0, 100)).unwrap();
    let durable = b.wait_durable(at, Some(WAIT)).unwrap();
    assert!(
        durable > at,
        "b's record is durable within its flush interval"
    );
    assert!(b.stats().unwrap().syncs > 0);
    assert_eq!(a.stats().unwrap().syncs, 0);
}

#[test]
fn one_sync_serves_every_shared_writer_it_covers() {
    let _watchdog = watchdog();
    let t = tempfile::tempdir().unwrap();
    let dirs = two_dirs(t.path());
    // Syncs: the calls below only (no background pass, no cleaner).
    let o = opts()
        .flush_interval(Duration::from_secs(3600))
        .clean_interval(Duration::ZERO);
    let a = CommitLog::open(&dirs, o.clone()).unwrap();
    let b = CommitLog::open(&dirs, o.clone()).unwrap();
    let sync = CommitLog::open(&dirs, o.flush(FlushMode::Sync)).unwrap();
    let at_a = a.append(&tagged(1, 0, 100)).unwrap();
    let at_b = b.append(&tagged(2, 0, 100)).unwrap();
    // a's flush takes in b's record (which a's view had not seen) and syncs it with a's own.
    let flushed = a.flush().unwrap();
    assert!(flushed > at_a && flushed > at_b, "{flushed}");
    assert_eq!(a.stats().unwrap().syncs, 1);
    assert_eq!(b.flush().unwrap(), flushed, "b takes a's sync as its own");
    assert_eq!(b.stats().unwrap().syncs, 0, "b had nothing left to sync");
    // A durable append syncs once; another writer's flush then has nothing to do.
    sync.append(&tagged(3, 0, 100)).unwrap();
    assert_eq!(sync.stats().unwrap().syncs, 1);
    assert_eq!(b.flush().unwrap(), sync.max_offset().unwrap());
    assert_eq!(b.stats().unwrap().syncs, 0);
}

#[test]
fn a_move_its_process_died_in_is_finished_by_the_next_owner() {
    let _watchdog = watchdog();
    let t = tempfile::tempdir().unwrap();
    let dirs = two_dirs(t.path());
    let mut mover = spawn(&dirs, "move");
    let acked = mover.read_until("paused").unwrap();
    let name = format!("{:020}", SEGMENT);
    let copies = |name: &str| dirs.iter().filter(|d| d.join(name).exists()).count();
    // Counted before the kill: once the mover is dead, this open's background work (its first
    // checkpoint) may finish the move at any moment.
    assert_eq!(
        copies(&name),
        2,
        "paused between the copy's rename and the source's removal"
    );
    let log = CommitLog::open(&dirs, opts()).unwrap();
    drop(mover); // SIGKILL between the copy's rename and the switch: two copies, intent set
    log.clean(false).unwrap(); // takes the background work over
    log.append(&tagged(1, 0, 100)).unwrap();
    log.flush().unwrap();
    let check = |log: &CommitLog| {
        let counts = check_store(log);
        assert_eq!(counts.get(&0).copied(), Some(300));
        assert!(log.max_offset().unwrap() > acked);
    };
    check(&log);
    log.close().unwrap();
    let log = reopen(&dirs, opts().exclusive(true));
    check(&log);
    assert!(log.verify().unwrap().is_empty());
    assert_eq!(copies(&name), 1, "one copy of the moved segment");
}

#[test]
fn a_move_a_joiner_died_in_is_finished_before_a_checkpoint_drops_its_intent() {
    let _watchdog = watchdog();
    let t = tempfile::tempdir().unwrap();
    let dirs = two_dirs(t.path());
    // This open does the background work (it writes the checkpoints); the mover joins.
    let log = CommitLog::open(&dirs, opts()).unwrap();
    let mut mover = spawn(&dirs, "move");
    let acked = mover.read_until("paused").unwrap();
    let name = format!("{:020}", SEGMENT);
    let copies = || dirs.iter().filter(|d| d.join(&name).exists()).count();
    // Counted before the kill: this open's background pass, waiting for the mover's maintenance
    // lock to write its checkpoint, finishes the move the moment the mover is dead.
    assert_eq!(
        copies(),
        2,
        "paused between the copy's rename and the switch"
    );
    drop(mover); // SIGKILL between the copy's rename and the switch: two copies, intent set
    let seq = *checkpoint_seqs(&dirs).iter().max().unwrap();
    log.append(&tagged(1, 0, 100)).unwrap();
    log.flush().unwrap();
    // The owner's next checkpoint (it writes one a second once the flushed end moved) would drop
    // the intent the listings need to pick a copy: the move is finished first.
    wait_for_checkpoint_after(&dirs, seq);
    assert_eq!(copies(), 1, "the dead mover's move finished");
    let check = |log: &CommitLog| {
        let counts = check_store(log);
        assert_eq!(counts.get(&0).copied(), Some(300));
        assert_eq!(counts.get(&1).copied(), Some(1));
        assert!(log.max_offset().unwrap() > acked);
    };
    check(&log);
    log.close().unwrap();
    let log = reopen(&dirs, opts().exclusive(true));
    check(&log);
    assert!(log.verify().unwrap().is_empty());
    assert!(!dirs.iter().any(|d| d.join(format!("{name}.tmp")).exists()));
}

#[test]
fn a_deletion_a_joiner_died_in_is_taken_in_before_a_checkpoint_undoes_it() {
    let _watchdog = watchdog();
    let t = tempfile::tempdir().unwrap();
    let dirs = two_dirs(t.path());
    let log = CommitLog::open(&dirs, opts()).unwrap();
    let mut truncating = spawn(&dirs, "truncate");
    // This view takes in the child's 300 records (and its rolls), so that nothing but the
    // truncation is left for it to learn.
    let deadline = Instant::now() + WAIT;
    while log.segments().unwrap().len() < 5 || log.max_offset().unwrap() < 300 * 1032 {
        assert!(
            Instant::now() < deadline,
            "the child's 300 records did not come within {WAIT:?}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    std::fs::write(t.path().join("go"), b"").unwrap();
    let acked = truncating.read_until("paused").unwrap();
    drop(truncating); // SIGKILL: the new head recorded, the files gone, no view told
    let head = SEGMENT * 3;
    assert_eq!(
        checkpoint_field(&dirs, "min_offset").iter().max(),
        Some(&head)
    );
    let seq = *checkpoint_seqs(&dirs).iter().max().unwrap();
    log.append(&tagged(1, 0, 100)).unwrap();
    log.flush().unwrap();
    // The owner's next checkpoint, from a view that kept the old head, would record it again
    // below files that are gone: the store would no longer open.
    wait_for_checkpoint_after(&dirs, seq);
    assert!(checkpoint_field(&dirs, "min_offset")
        .iter()
        .all(|&m| m == head));
    let check = |log: &CommitLog| {
        assert_eq!(log.min_offset().unwrap(), head);
        let mut at = head;
        for rec in log.scan(None, None).unwrap() {
            let rec = rec.unwrap();
            assert_eq!(rec.offset(), at, "offsets are dense from the head");
            at = rec.next_offset();
            untag(&rec);
        }
        assert!(at > acked);
    };
    check(&log);
    log.close().unwrap();
    let log = reopen(&dirs, opts().exclusive(true));
    check(&log);
    assert!(log.verify().unwrap().is_empty());
}

#[test]
fn background_work_moves_on_when_its_process_dies() {
    let _watchdog = watchdog();
    let t = tempfile::tempdir().unwrap();
    let dirs = two_dirs(t.path());
    // The first open does the background work: the child's.
    let mut owner = spawn(&dirs, "own");
    owner.read_until("owning");
    let log = CommitLog::open(&dirs, opts().clean_interval(Duration::ZERO)).unwrap();
    let acked: Vec<u64> = (0..300)
        .map(|i| log.append(&tagged(0, i, 1000)).unwrap())
        .collect();
    // Maintenance runs in any open, the owner alive or not.
    assert_eq!(log.truncate_before(SEGMENT).unwrap(), SEGMENT);
    drop(owner); // SIGKILL: its lock on rmqlog.owner goes with it
    assert_eq!(log.truncate_before(SEGMENT * 2).unwrap(), SEGMENT * 2);
    // Every acknowledged record above the new head reads back, here and after a reopen.
    let check = |log: &CommitLog| assert_reads_back_from(log, 0, &acked, SEGMENT * 2);
    check(&log);
    drop(log);
    let reopened = reopen(&dirs, opts().exclusive(true));
    check(&reopened);
    assert!(reopened.verify().unwrap().is_empty());
}

/// Pauses the thread named `thread` the first time it reaches fail point `name`, until released;
/// other threads, and later visits, pass. The caller holds the [`fail::FailScenario`]: the fail
/// point goes with it, however the test ends.
fn pause_in(name: &'static str, thread: &'static str) -> Paused {
    let (reached_tx, reached) = channel();
    let (release, release_rx) = channel::<()>();
    let reached_tx = Mutex::new(reached_tx);
    let release_rx = Mutex::new(release_rx);
    let once = AtomicBool::new(false);
    fail::cfg_callback(name, move || {
        let first = || !once.swap(true, Ordering::AcqRel);
        if std::thread::current().name() == Some(thread) && first() {
            let _ = reached_tx.lock().unwrap().send(());
            // A failed test drops its end: the thread goes on.
            let _ = release_rx.lock().unwrap().recv();
        }
    })
    .unwrap();
    Paused {
        name,
        thread,
        reached,
        release,
    }
}

/// A fail point a thread is to pause at ([`pause_in`]).
struct Paused {
    name: &'static str,
    thread: &'static str,
    reached: Receiver<()>,
    release: Sender<()>,
}

impl Paused {
    /// Returns `worker` (the thread to pause) once it is paused at the fail point. Panics if it
    /// ends without reaching it (saying what it returned), or does not reach it within [`WAIT`].
    fn wait<T: Debug>(&self, worker: JoinHandle<T>) -> JoinHandle<T> {
        let deadline = Instant::now() + WAIT;
        loop {
            match self.reached.recv_timeout(Duration::from_millis(20)) {
                Ok(()) => return worker,
                Err(RecvTimeoutError::Disconnected) => unreachable!("the fail point holds it"),
                Err(RecvTimeoutError::Timeout) => {}
            }
            if worker.is_finished() {
                if self.reached.try_recv().is_ok() {
                    return worker;
                }
                let (name, thread) = (self.name, self.thread);
                match worker.join() {
                    Ok(out) => panic!("thread {thread} ended without reaching {name}: {out:?}"),
                    Err(e) => std::panic::resume_unwind(e),
                }
            }
            assert!(
                Instant::now() < deadline,
                "thread {} did not reach fail point {} within {WAIT:?}",
                self.thread,
                self.name
            );
        }
    }

    /// Lets the paused thread go on; later visits of the fail point pass.
    fn release(self) {
        let _ = self.release.send(());
        fail::remove(self.name);
    }
}

/// The race the hostile review found: the owner's cleaner deletes the head while another thread
/// of the same open lists the store (another open rolled); the listing, taken before the
/// deletion's checkpoint, was applied after it and brought the deleted head back, and the next
/// checkpoint recorded a head whose files were gone: the store no longer opened.
#[test]
fn maintenance_runs_in_any_open_one_at_a_time() {
    let _watchdog = watchdog();
    let _scenario = fail::FailScenario::setup();
    let t = tempfile::tempdir().unwrap();
    let dirs = two_dirs(t.path());
    let o = opts()
        .clean_interval(Duration::ZERO)
        .flush_interval(Duration::from_secs(3600));
    let owner = Arc::new(CommitLog::open(&dirs, o.clone()).unwrap());
    owner.flush().unwrap(); // takes the background work
    let other = Arc::new(CommitLog::open(&dirs, o).unwrap());
    let acked: Vec<u64> = (0..400)
        .map(|i| other.append(&tagged(2, i, 1000)).unwrap())
        .collect();
    // The other open truncates, and pauses after recording the new head, before its files go.
    let paused = pause_in("delete::before_unlink", "truncating");
    let truncating = on_thread("truncating", &other, |o| o.truncate_before(SEGMENT * 3));
    let truncating = paused.wait(truncating);
    // The owner's checkpoint waits for the truncation: written now, from a view that has not
    // seen the deletion, it would record the old head above files about to go.
    let (done_tx, done) = channel();
    let flushing = on_thread("flushing", &owner, move |owner| {
        owner.flush().unwrap();
        done_tx.send(()).unwrap();
    });
    let waited = done.recv_timeout(Duration::from_millis(300)).is_err();
    paused.release();
    let truncated = join(truncating, "the truncation");
    assert_eq!(truncated.unwrap(), SEGMENT * 3);
    join(flushing, "the owner's flush");
    assert!(
        waited,
        "the owner's checkpoint waits for the maintenance under way"
    );
    // The head the checkpoint records is the one on disk.
    assert_eq!(
        checkpoint_field(&dirs, "min_offset"),
        [SEGMENT * 3, SEGMENT * 3]
    );
    assert_eq!(owner.min_offset().unwrap(), SEGMENT * 3);
    // A move and a rebalance from the open that is not the owner.
    let seg = other.segments().unwrap()[1].clone();
    let to = dirs.iter().find(|d| !seg.path.starts_with(d)).unwrap();
    other.move_segment(seg.start_offset, to).unwrap();
    other.rebalance(None).unwrap();
    assert_eq!(other.clean(true).unwrap(), 0);
    let check = |log: &CommitLog| assert_reads_back_from(log, 2, &acked, SEGMENT * 3);
    check(&owner);
    check(&other);
    owner.close().unwrap();
    other.close().unwrap();
    let log = reopen(&dirs, opts().exclusive(true));
    assert_eq!(log.min_offset().unwrap(), SEGMENT * 3);
    check(&log);
    assert!(log.verify().unwrap().is_empty());
}

/// A shared writer's listing, taken before a deletion of its own open was recorded and applied
/// after it, never brings the deleted head back (nor has a checkpoint record it).
///
/// The listing is the reloader's alone: no background pass runs (an hour's flush interval, no
/// cleaner), so none takes in the other open's roll before it (it would have nothing to list).
#[test]
fn a_listing_taken_before_a_deletion_never_brings_the_head_back() {
    let _watchdog = watchdog();
    let _scenario = fail::FailScenario::setup();
    let t = tempfile::tempdir().unwrap();
    let dirs = two_dirs(t.path());
    let o = opts()
        .clean_interval(Duration::ZERO)
        .flush_interval(Duration::from_secs(3600));
    let a = Arc::new(CommitLog::open(&dirs, o.clone()).unwrap()); // does the background work
    let b = CommitLog::open(&dirs, o).unwrap();
    for i in 0..300 {
        a.append(&tagged(1, i, 1000)).unwrap();
    }
    a.max_offset().unwrap(); // a's view is current: its deletion needs no listing
    let deleting = pause_in("delete::before_checkpoint", "deleter");
    let reloading = pause_in("list::lock", "reloader");
    let head = SEGMENT * 3;
    let deleter = on_thread("deleter", &a, move |a| a.truncate_before(head));
    // The head left a's list; the checkpoint is not written yet.
    let deleter = deleting.wait(deleter);
    // Another open rolls: a's next look lists the store, which still holds the head's files.
    for i in 0..70 {
        b.append(&tagged(2, i, 1000)).unwrap();
    }
    // A look at the store (a listing), then a checkpoint from that view.
    let reloader = on_thread("reloader", &a, |a| a.flush());
    let reloader = reloading.wait(reloader); // listed, about to apply; the deletion goes on first
    deleting.release();
    assert_eq!(join(deleter, "the deletion").unwrap(), head);
    reloading.release();
    join(reloader, "the reloader's flush").unwrap();
    drop(b);
    Arc::try_unwrap(a).unwrap().close().unwrap();
    // The checkpoint the flush wrote records the head that is on disk: the store opens.
    let log = reopen(&dirs, opts().exclusive(true));
    assert_eq!(log.min_offset().unwrap(), head);
    assert!(log.verify().unwrap().is_empty());
}

#[test]
fn a_listing_taken_between_a_moves_switch_and_its_unlink_is_listed_again() {
    let _watchdog = watchdog();
    let _scenario = fail::FailScenario::setup();
    let t = tempfile::tempdir().unwrap();
    let dirs = two_dirs(t.path());
    // No background pass: the listing below is the test's.
    let o = opts()
        .clean_interval(Duration::ZERO)
        .flush_interval(Duration::from_secs(3600));
    let a = Arc::new(CommitLog::open(&dirs, o.clone()).unwrap());
    let b = CommitLog::open(&dirs, o).unwrap();
    for i in 0..300 {
        a.append(&tagged(1, i, 1000)).unwrap();
    }
    let seg = a.segments().unwrap()[1].clone();
    let to = dirs
        .iter()
        .find(|d| !seg.path.starts_with(d))
        .unwrap()
        .clone();
    let switched = pause_in("move::switched", "mover");
    let mover = {
        let to = to.clone();
        on_thread("mover", &a, move |a| a.move_segment(seg.start_offset, &to))
    };
    // The list has the copy; the source and the intent are still there.
    let mover = switched.wait(mover);
    for i in 0..70 {
        b.append(&tagged(2, i, 1000)).unwrap(); // b rolls: a's next look lists the store
    }
    a.max_offset().unwrap(); // listed: two copies, and the intent names the source
    switched.release();
    join(mover, "the move").unwrap();
    // The source is gone: a's view lists again and finds the copy (a move of it to where it is
    // does nothing; from the source it would fail).
    a.move_segment(seg.start_offset, &to).unwrap();
    let now = a.segments().unwrap();
    let moved = now
        .iter()
        .find(|s| s.start_offset == seg.start_offset)
        .unwrap();
    assert!(moved.path.starts_with(&to), "{moved:?}");
    check_store(&a);
}

/// Randomized: three threads, each opening the store as a shared writer again and again (flush
/// modes mixed), appending singles and batches, reading back, waiting, truncating where it does
/// the background work, with retention deleting the head meanwhile. At the end an exclusive open
/// finds every acknowledged record above the head, dense offsets and each writer's records in
/// its order. `RMQLOG_SHARED_CHAOS_SECS` (default 4) sets the length; the seed is printed.
#[test]
fn chaos_of_shared_opens() {
    let _watchdog = watchdog();
    let secs: u64 = std::env::var("RMQLOG_SHARED_CHAOS_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(4);
    let seed = common::seed("RMQLOG_SHARED_CHAOS_SEED");
    println!("shared chaos: {secs} s, RMQLOG_SHARED_CHAOS_SEED={seed}");
    let t = tempfile::tempdir().unwrap();
    let dirs = two_dirs(t.path());
    let base = opts()
        .retention_bytes(Some(SEGMENT * 6))
        .clean_interval(Duration::from_millis(20));
    /// (offset, writer, number, length) of each acknowledged record.
    type Acked = Vec<(u64, u32, u32, usize)>;
    let acked: Arc<Mutex<Acked>> = Arc::default();
    let deadline = Instant::now() + Duration::from_secs(secs);
    let writers: Vec<JoinHandle<()>> = (0..3u32)
        .map(|w| {
            let (dirs, base, acked) = (dirs.clone(), base.clone(), Arc::clone(&acked));
            std::thread::spawn(move || {
                let mut rng = seed ^ (u64::from(w) + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                let mut next = || {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    rng
                };
                let mut seq = 0u32;
                while Instant::now() < deadline {
                    let flush =
                        [FlushMode::Async, FlushMode::None, FlushMode::Sync][(next() % 3) as usize];
                    let log = CommitLog::open(&dirs, base.clone().flush(flush)).unwrap();
                    for _ in 0..(next() % 200) {
                        match next() % 10 {
                            0..=4 => {
                                let len = 8 + (next() % 2000) as usize;
                                let at = log.append(&tagged(w, seq, len)).unwrap();
                                acked.lock().unwrap().push((at, w, seq, len));
                                seq += 1;
                            }
                            5 | 6 => {
                                let n = 1 + (next() % 20) as u32;
                                let bodies: Vec<Vec<u8>> = (seq..seq + n)
                                    .map(|i| tagged(w, i, 8 + (next() % 900) as usize))
                                    .collect();
                                let offs = log.append_batch(&bodies).unwrap();
                                let mut a = acked.lock().unwrap();
                                for (k, (o, b)) in offs.iter().zip(&bodies).enumerate() {
                                    a.push((*o, w, seq + k as u32, b.len()));
                                }
                                seq += n;
                            }
                            7 => {
                                let pick = {
                                    let a = acked.lock().unwrap();
                                    (!a.is_empty()).then(|| a[(next() as usize) % a.len()])
                                };
                                if let Some((at, ww, ss, len)) = pick {
                                    match log.read(at) {
                                        Ok(rec) => assert_eq!(&*rec, tagged(ww, ss, len)),
                                        Err(Error::OffsetOutOfRange { .. }) => {
                                            assert!(at < log.min_offset().unwrap())
                                        }
                                        Err(e) => panic!("read {at}: {e}"),
                                    }
                                }
                            }
                            8 => {
                                let end = log.max_offset().unwrap();
                                log.wait(end, Some(Duration::from_millis(2))).unwrap();
                            }
                            _ => {
                                let to = log.max_offset().unwrap().saturating_sub(SEGMENT * 4);
                                match log.truncate_before(to) {
                                    Ok(_) => {}
                                    Err(Error::Unsupported(m)) if m.contains("background") => {}
                                    Err(e) => panic!("truncate_before: {e}"),
                                }
                            }
                        }
                    }
                    log.close().unwrap();
                }
            })
        })
        .collect();
    for writer in writers {
        join_by(writer, "a writer's last round", deadline + WAIT);
    }
    let log = reopen(&dirs, base.clone().exclusive(true));
    assert!(log.verify().unwrap().is_empty());
    // Dense offsets; each writer's records consecutive from its first above the head.
    let mut at = log.min_offset().unwrap();
    let mut next: HashMap<u32, u32> = HashMap::new();
    for rec in log.scan(None, None).unwrap() {
        let rec = rec.unwrap();
        assert_eq!(rec.offset(), at, "offsets are dense");
        at = rec.next_offset();
        let (w, i) = untag(&rec);
        let n = next.entry(w).or_insert(i);
        assert_eq!(i, *n, "writer {w}'s records in its order");
        *n += 1;
    }
    assert_eq!(at, log.max_offset().unwrap());
    let counts = next;
    let min = log.min_offset().unwrap();
    let acked = Arc::try_unwrap(acked).unwrap().into_inner().unwrap();
    println!(
        "shared chaos: {} records acknowledged; head {min}, end {at}; next number per writer {counts:?}",
        acked.len()
    );
    for (at, w, seq, len) in acked.into_iter().filter(|a| a.0 >= min) {
        assert_eq!(
            &*log.read(at).unwrap(),
            tagged(w, seq, len),
            "record {w}/{seq} at {at}"
        );
    }
}

/// Polls `log`'s tier status until `done` holds (at most [`WAIT`]).
#[cfg(feature = "tier")]
fn wait_for_tier(
    log: &CommitLog,
    what: &str,
    done: impl Fn(&rmqlog::TierStatus) -> bool,
) -> rmqlog::TierStatus {
    let deadline = Instant::now() + WAIT;
    loop {
        let status = log.tier_status().unwrap().expect("the log has a tier");
        if done(&status) {
            return status;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}: {status:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[cfg(feature = "tier")]
#[test]
fn the_tier_ships_from_one_open_and_moves_on_when_its_process_dies() {
    let _watchdog = watchdog();
    let t = tempfile::tempdir().unwrap();
    let dirs = two_dirs(t.path());
    let url = format!("file://{}", t.path().join("tier").display());
    let tiered = || opts().tier(Some(tier_options(&url)));
    // The first open ships: the child's. This open joins and ships nothing while it lives.
    let mut shipper = spawn_env(&dirs, "ship", &[(TIER_ENV, url.as_str())]);
    let first = shipper.read_until("shipping").unwrap();
    let log = CommitLog::open(&dirs, tiered()).unwrap();
    let mut acked: Vec<(u64, Vec<u8>)> = (0..300)
        .map(|i| {
            let body = tagged(1, i, 1000);
            (log.append(&body).unwrap(), body)
        })
        .collect();
    log.flush().unwrap();
    // The shipper uploads the sealed segments of both processes and deletes local copies; this
    // open reads those from the tier (a listing takes in the local copy of the manifest).
    let remote_only = || {
        log.segments()
            .unwrap()
            .iter()
            .filter(|s| !s.local && s.remote)
            .count()
    };
    let deadline = Instant::now() + WAIT;
    while remote_only() < 4 {
        assert!(
            Instant::now() < deadline,
            "4 segments remote only: not within {WAIT:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // Only the open doing the background work ships (two would refuse each other's manifest
    // versions: upload errors).
    let status = log.tier_status().unwrap().unwrap();
    assert_eq!((status.uploads, status.upload_errors), (0, 0), "{status:?}");
    assert_eq!(status.last_error, None);
    // The child's records, the first 300, are in segments this open reads from the tier only.
    let segs = log.segments().unwrap();
    assert!(!segs[0].local && segs[0].start_offset < first, "{segs:?}");
    check_store(&log);
    drop(shipper); // SIGKILL: the background work, uploads included, moves here
    for i in 300..600 {
        let body = tagged(1, i, 1000);
        acked.push((log.append(&body).unwrap(), body));
    }
    log.flush().unwrap();
    let status = wait_for_tier(&log, "this open to ship", |s| {
        s.uploads >= 3 && s.local_deleted >= 3 && s.pending_segments == 0
    });
    assert_eq!(status.last_error, None);
    let check = |log: &CommitLog| {
        for (at, body) in &acked {
            assert_eq!(&*log.read(*at).unwrap(), body.as_slice(), "record at {at}");
        }
        let counts = check_store(log);
        assert_eq!(counts.get(&0).copied(), Some(300));
        assert_eq!(counts.get(&1).copied(), Some(600));
    };
    check(&log);
    log.close().unwrap();
    // An exclusive reopen: every record, from both tiers, and every object as the manifest says.
    let log = reopen(&dirs, tiered().exclusive(true));
    check(&log);
    assert!(log.verify_remote_with(|_, _| {}).unwrap().is_empty());
    let status = log.tier_status().unwrap().unwrap();
    assert!(status.remote_segments >= 6, "{status:?}");
}
