#![allow(clippy::unwrap_used)] // tests: a failed unwrap is the failure report
//! Shared writers (`exclusive=False`): several opens, in one process and in several, appending to
//! one store. Offsets stay unique and dense, batches whole, and a writer process killed while it
//! holds the append lock (after copying its records, before publishing them; mid-roll) neither
//! blocks the others nor leaves a byte any reader or recovery takes for a record.
#![cfg(feature = "failpoints")]

mod common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmqlog::{CommitLog, Error, FlushMode, Options, TierOptions};

/// Set in a child: the store's directories, joined by ':'.
const DIRS_ENV: &str = "RMQLOG_SHARED_DIRS";
/// Set in a child: what it does (`append:<writer>:<n>`, `pause-single`, `pause-batch`).
const WHAT_ENV: &str = "RMQLOG_SHARED_WHAT";
const SEGMENT: u64 = 64 * 1024;
/// Set in a child: the `file://` URL of the store's remote tier.
const TIER_ENV: &str = "RMQLOG_SHARED_TIER";

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

/// A body naming its writer and its number in that writer's sequence.
fn tagged(writer: u32, i: u32, len: usize) -> Vec<u8> {
    let mut b = Vec::with_capacity(len.max(8));
    b.extend_from_slice(&writer.to_le_bytes());
    b.extend_from_slice(&i.to_le_bytes());
    b.resize(len.max(8), (writer as u8).wrapping_mul(31) ^ (i as u8));
    b
}

fn untag(b: &[u8]) -> (u32, u32) {
    let w = u32::from_le_bytes(b[..4].try_into().unwrap());
    let i = u32::from_le_bytes(b[4..8].try_into().unwrap());
    assert_eq!(b, tagged(w, i, b.len()), "a record's bytes are whole");
    (w, i)
}

/// Every record of the store: dense offsets from `min_offset`, and each writer's records in its
/// own order without gaps or repeats. Returns how many each writer has.
fn check_store(log: &CommitLog) -> HashMap<u32, u32> {
    let mut next: HashMap<u32, u32> = HashMap::new();
    let mut at = log.min_offset().unwrap();
    for rec in log.scan(None, None).unwrap() {
        let rec = rec.unwrap();
        assert_eq!(rec.offset(), at, "offsets are dense");
        at = rec.next_offset();
        let (w, i) = untag(&rec);
        let n = next.entry(w).or_default();
        assert_eq!(
            i, *n,
            "writer {w}'s records in its order, none lost or repeated"
        );
        *n += 1;
    }
    assert_eq!(at, log.max_offset().unwrap(), "the scan reaches the end");
    next
}

/// A child process: appends as `WHAT_ENV` says.
#[test]
fn writer_process() {
    let (Ok(dirs), Ok(what)) = (std::env::var(DIRS_ENV), std::env::var(WHAT_ENV)) else {
        return; // run by the tests below
    };
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

fn spawn(dirs: &[PathBuf], what: &str) -> Child {
    spawn_env(dirs, what, &[])
}

fn spawn_env(dirs: &[PathBuf], what: &str, env: &[(&str, &str)]) -> Child {
    let joined: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
    Command::new(std::env::current_exe().unwrap())
        .envs(env.iter().copied())
        .args([
            "--exact",
            "writer_process",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(DIRS_ENV, joined.join(":"))
        .env(WHAT_ENV, what)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Reads a child's output until a line ends with `until`; returns the `acked` end if it said one.
fn read_until(child: &mut Child, until: &str) -> Option<u64> {
    let mut acked = None;
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        // libtest prints the test's name on the same line before the first output.
        if let Some(end) = line.split("acked ").nth(1) {
            acked = Some(end.trim().parse().unwrap());
        }
        if line.ends_with(until) {
            return acked;
        }
    }
    panic!("the child ended before saying {until:?}");
}

fn two_dirs(root: &Path) -> Vec<PathBuf> {
    vec![root.join("d0"), root.join("d1")]
}

#[test]
fn four_processes_append_to_one_log_with_dense_offsets() {
    let t = tempfile::tempdir().unwrap();
    let dirs = two_dirs(t.path());
    // The parent holds the store open too, and appends meanwhile.
    let log = CommitLog::open(&dirs, opts()).unwrap();
    let n = 3000;
    let mut children: Vec<Child> = (1..=4)
        .map(|w| spawn(&dirs, &format!("append:{w}:{n}")))
        .collect();
    for i in 0..n {
        log.append(&tagged(0, i, 80)).unwrap();
    }
    for c in &mut children {
        let out: Vec<String> = BufReader::new(c.stdout.take().unwrap())
            .lines()
            .map(Result::unwrap)
            .collect();
        assert!(c.wait().unwrap().success(), "{out:?}");
        assert!(out.iter().any(|l| l.ends_with("done")), "{out:?}");
    }
    let counts = check_store(&log);
    assert_eq!(counts.len(), 5);
    assert!(counts.values().all(|&c| c == n), "{counts:?}");
    assert!(
        log.segments().unwrap().len() > 10,
        "the writers rolled many segments between them"
    );
    log.close().unwrap();
    // The last one out left a store an exclusive writer opens as it was.
    let log = CommitLog::open(&dirs, opts().exclusive(true)).unwrap();
    assert_eq!(check_store(&log).values().sum::<u32>(), 5 * n);
}

#[test]
fn opens_in_one_process_append_together_and_see_each_other() {
    let t = tempfile::tempdir().unwrap();
    let dirs = two_dirs(t.path());
    let a = CommitLog::open(&dirs, opts()).unwrap();
    // Another order of the same directories joins the same store.
    let rev: Vec<PathBuf> = dirs.iter().rev().cloned().collect();
    let b = CommitLog::open(&rev, opts()).unwrap();
    std::thread::scope(|s| {
        for (w, log) in [(1u32, &a), (2, &b)] {
            s.spawn(move || {
                for i in 0..2000 {
                    log.append(&tagged(w, i, 100 + (i as usize % 300))).unwrap();
                }
            });
        }
    });
    // Each open reads what the other wrote.
    for log in [&a, &b] {
        let counts = check_store(log);
        assert_eq!(counts.get(&1).copied(), Some(2000));
        assert_eq!(counts.get(&2).copied(), Some(2000));
    }
    // A wait in one open wakes for an append of the other.
    let end = a.max_offset().unwrap();
    std::thread::scope(|s| {
        let waiter = s.spawn(|| b.wait(end, Some(Duration::from_secs(10))).unwrap());
        std::thread::sleep(Duration::from_millis(50));
        a.append(&tagged(1, 2000, 10)).unwrap();
        assert!(waiter.join().unwrap() > end);
    });
}

#[test]
fn a_joiner_reads_and_keeps_the_records_from_before_it_joined() {
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
    b.close().unwrap();
    let log = CommitLog::open(&dirs, opts().exclusive(true)).unwrap();
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

/// Waits (at most 20 s) until a checkpoint newer than sequence number `seq` is written.
fn wait_for_checkpoint_after(dirs: &[PathBuf], seq: u64) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while *checkpoint_seqs(dirs).iter().max().unwrap() <= seq {
        assert!(
            std::time::Instant::now() < deadline,
            "no checkpoint written"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn checkpoint_seqs(dirs: &[PathBuf]) -> Vec<u64> {
    checkpoint_field(dirs, "seq")
}

#[test]
fn a_new_owner_outranks_the_checkpoints_its_predecessor_wrote() {
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
    let t = tempfile::tempdir().unwrap();
    let dirs = two_dirs(t.path());
    let shared = CommitLog::open(&dirs, opts()).unwrap();
    let refused = CommitLog::open(&dirs, opts().exclusive(true)).unwrap_err();
    assert!(matches!(refused, Error::StoreLocked { .. }), "{refused}");
    shared.close().unwrap();
    let exclusive = CommitLog::open(&dirs, opts().exclusive(true)).unwrap();
    let refused = CommitLog::open(&dirs, opts()).unwrap_err();
    assert!(matches!(refused, Error::StoreLocked { .. }), "{refused}");
    drop(exclusive);
    // A joiner gives the same directories as the writers open.
    let a = CommitLog::open(&dirs, opts()).unwrap();
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
    let log = CommitLog::open(&dirs, opts().exclusive(true)).unwrap();
    assert_eq!(log.min_offset().unwrap(), SEGMENT * 3);
}

/// Starts a writer process, lets it pause holding the append lock, kills it; returns the end it
/// acknowledged.
fn kill_holding_the_lock(dirs: &[PathBuf], kind: &str) -> u64 {
    let mut child = spawn(dirs, &format!("pause:{kind}"));
    let acked = read_until(&mut child, "paused").expect("the child said its end");
    child.kill().unwrap(); // SIGKILL, the append lock held
    child.wait().unwrap();
    acked
}

fn killed_holder(kind: &str) {
    let t = tempfile::tempdir().unwrap();
    let dirs = two_dirs(t.path());
    // A writer that stays open throughout: the next ones join the store rather than recover it.
    let mut keeper = spawn(&dirs, "keep");
    read_until(&mut keeper, "keeping");
    let acked = kill_holding_the_lock(&dirs, kind);
    // The next writer takes the lock from the dead holder, cuts its tail, appends one record as
    // long as the dead writer's first (1000 bytes in a batch: what follows it would be the dead
    // writer's next record, whole, were the tail not cut), syncs, and is killed in turn.
    let mut survivor = spawn(&dirs, "survive");
    let next = read_until(&mut survivor, "survived").expect("the survivor's offset");
    survivor.kill().unwrap();
    survivor.wait().unwrap();
    assert_eq!(
        next, acked,
        "the dead writer's unpublished records are gone"
    );
    keeper.kill().unwrap();
    keeper.wait().unwrap();
    let expected = HashMap::from([(9, 50), (0, 1)]);
    let follower = CommitLog::open(&dirs, opts().read_only(true)).unwrap();
    assert_eq!(check_store(&follower), expected);
    drop(follower);
    // After a reboot no published end is trusted: recovery validates records from the last
    // sync on, and must find only the acknowledged ones.
    for d in &dirs {
        let _ = std::fs::remove_file(d.join("rmqlog.ctl"));
    }
    let log = CommitLog::open(&dirs, opts()).unwrap();
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
    killed_holder("single");
}

#[test]
fn a_writer_killed_holding_the_lock_mid_roll_leaves_nothing() {
    killed_holder("batch");
}

/// Seen once in the process chaos test: the repair after a dead holder lists the store while
/// other processes' maintenance deletes and moves segments, and an append failed with "opening
/// segment: No such file" for a copy deleted between the directory read and the read of its
/// head. A copy deleted meanwhile is gone, not an error, and the append goes on.
#[test]
fn a_repair_listing_a_copy_deleted_under_it_goes_on() {
    let t = tempfile::tempdir().unwrap();
    let dirs = two_dirs(t.path());
    let mut keeper = Killed(spawn(&dirs, "keep"));
    read_until(&mut keeper.0, "keeping");
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
    let (found, release) = pause_in("layout::duplicates_found", "appender");
    let appender = {
        let log = Arc::clone(&log);
        std::thread::Builder::new()
            .name("appender".into())
            .spawn(move || log.append(&tagged(0, 200, 1000)))
            .unwrap()
    };
    found.recv().unwrap(); // the repair listed both copies
    std::fs::remove_file(&spare).unwrap();
    release.send(()).unwrap();
    let at = appender.join().unwrap();
    fail::remove("layout::duplicates_found");
    assert_eq!(at.expect("the append after the repair"), acked);
    drop(keeper);
    assert_eq!(check_store(&log), HashMap::from([(9, 50), (0, 201)]));
}

#[test]
fn the_open_doing_the_background_work_syncs_everyones_records() {
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
    let durable = b.wait_durable(at, Some(Duration::from_secs(10))).unwrap();
    assert!(durable > at, "a synced b's record: {durable} <= {at}");
    assert!(a.stats().unwrap().syncs > 0);
    assert_eq!(b.stats().unwrap().syncs, 0, "b never synced itself");
}

#[test]
fn an_async_writer_syncs_its_records_when_the_background_work_does_not() {
    let t = tempfile::tempdir().unwrap();
    let dirs = two_dirs(t.path());
    // a does the background work and syncs nothing by itself (flush "none").
    let a = CommitLog::open(&dirs, opts().flush(FlushMode::None)).unwrap();
    a.append(&tagged(1, 0, 100)).unwrap();
    let o = opts().flush_interval(Duration::from_millis(20));
    let b = CommitLog::open(&dirs, o).unwrap();
    let at = b.append(&tagged(2, 0, 100)).unwrap();
    let durable = b.wait_durable(at, Some(Duration::from_secs(10))).unwrap();
    assert!(
        durable > at,
        "b's record is durable within its flush interval"
    );
    assert!(b.stats().unwrap().syncs > 0);
    assert_eq!(a.stats().unwrap().syncs, 0);
}

#[test]
fn one_sync_serves_every_shared_writer_it_covers() {
    let t = tempfile::tempdir().unwrap();
    let dirs = two_dirs(t.path());
    let o = opts().flush_interval(Duration::from_secs(3600)); // syncs: the calls below only
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
    let t = tempfile::tempdir().unwrap();
    let dirs = two_dirs(t.path());
    let mut mover = spawn(&dirs, "move");
    let acked = read_until(&mut mover, "paused").unwrap();
    let log = CommitLog::open(&dirs, opts());
    let _ = mover.kill(); // between the copy's rename and the switch: two copies, intent set
    mover.wait().unwrap();
    let log = log.unwrap();
    let name = format!("{:020}", SEGMENT);
    let copies = |name: &str| dirs.iter().filter(|d| d.join(name).exists()).count();
    assert_eq!(
        copies(&name),
        2,
        "killed between the copy's rename and the source's removal"
    );
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
    let log = CommitLog::open(&dirs, opts().exclusive(true)).unwrap();
    check(&log);
    assert!(log.verify().unwrap().is_empty());
    assert_eq!(copies(&name), 1, "one copy of the moved segment");
}

#[test]
fn a_move_a_joiner_died_in_is_finished_before_a_checkpoint_drops_its_intent() {
    let t = tempfile::tempdir().unwrap();
    let dirs = two_dirs(t.path());
    // This open does the background work (it writes the checkpoints); the mover joins.
    let log = CommitLog::open(&dirs, opts()).unwrap();
    let mut mover = Killed(spawn(&dirs, "move"));
    let acked = read_until(&mut mover.0, "paused").unwrap();
    drop(mover); // SIGKILL between the copy's rename and the switch: two copies, intent set
    let name = format!("{:020}", SEGMENT);
    let copies = || dirs.iter().filter(|d| d.join(&name).exists()).count();
    assert_eq!(
        copies(),
        2,
        "killed between the copy's rename and the switch"
    );
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
    let log = CommitLog::open(&dirs, opts().exclusive(true)).unwrap();
    check(&log);
    assert!(log.verify().unwrap().is_empty());
    assert!(!dirs.iter().any(|d| d.join(format!("{name}.tmp")).exists()));
}

#[test]
fn a_deletion_a_joiner_died_in_is_taken_in_before_a_checkpoint_undoes_it() {
    let t = tempfile::tempdir().unwrap();
    let dirs = two_dirs(t.path());
    let log = CommitLog::open(&dirs, opts()).unwrap();
    let mut truncating = Killed(spawn(&dirs, "truncate"));
    // This view takes in the child's 300 records (and its rolls), so that nothing but the
    // truncation is left for it to learn.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while log.segments().unwrap().len() < 5 || log.max_offset().unwrap() < 300 * 1032 {
        assert!(
            std::time::Instant::now() < deadline,
            "the child's records never came"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    std::fs::write(t.path().join("go"), b"").unwrap();
    let acked = read_until(&mut truncating.0, "paused").unwrap();
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
    let log = CommitLog::open(&dirs, opts().exclusive(true)).unwrap();
    check(&log);
    assert!(log.verify().unwrap().is_empty());
}

#[test]
fn background_work_moves_on_when_its_process_dies() {
    let t = tempfile::tempdir().unwrap();
    let dirs = two_dirs(t.path());
    // The first open does the background work: the child's.
    let mut owner = spawn(&dirs, "own");
    read_until(&mut owner, "owning");
    let log = CommitLog::open(&dirs, opts().clean_interval(Duration::ZERO)).unwrap();
    let acked: Vec<u64> = (0..300)
        .map(|i| log.append(&tagged(0, i, 1000)).unwrap())
        .collect();
    // Maintenance runs in any open, the owner alive or not.
    assert_eq!(log.truncate_before(SEGMENT).unwrap(), SEGMENT);
    owner.kill().unwrap(); // SIGKILL: its lock on rmqlog.owner goes with it
    owner.wait().unwrap();
    assert_eq!(log.truncate_before(SEGMENT * 2).unwrap(), SEGMENT * 2);
    // Every acknowledged record above the new head reads back, here and after a reopen.
    let check = |log: &CommitLog| assert_reads_back_from(log, 0, &acked, SEGMENT * 2);
    check(&log);
    drop(log);
    let reopened = CommitLog::open(&dirs, opts().exclusive(true)).unwrap();
    check(&reopened);
    assert!(reopened.verify().unwrap().is_empty());
}

/// Pauses the thread named `thread` the first time it reaches fail point `name`, until `release`
/// gets a message, after telling `paused`; other threads, and later visits, pass.
fn pause_in(name: &str, thread: &'static str) -> (Receiver<()>, Sender<()>) {
    let (paused_tx, paused) = channel();
    let (release, release_rx) = channel::<()>();
    let paused_tx = Mutex::new(paused_tx);
    let release_rx = Mutex::new(release_rx);
    let once = std::sync::atomic::AtomicBool::new(false);
    fail::cfg_callback(name, move || {
        let first = || !once.swap(true, std::sync::atomic::Ordering::AcqRel);
        if std::thread::current().name() == Some(thread) && first() {
            paused_tx.lock().unwrap().send(()).unwrap();
            release_rx.lock().unwrap().recv().unwrap();
        }
    })
    .unwrap();
    (paused, release)
}

/// The race the hostile review found: the owner's cleaner deletes the head while another thread
/// of the same open lists the store (another open rolled); the listing, taken before the
/// deletion's checkpoint, was applied after it and brought the deleted head back, and the next
/// checkpoint recorded a head whose files were gone: the store no longer opened.
#[test]
fn maintenance_runs_in_any_open_one_at_a_time() {
    let t = tempfile::tempdir().unwrap();
    let dirs = two_dirs(t.path());
    let o = opts()
        .clean_interval(Duration::ZERO)
        .flush_interval(Duration::from_secs(3600));
    let owner = CommitLog::open(&dirs, o.clone()).unwrap();
    owner.flush().unwrap(); // takes the background work
    let other = CommitLog::open(&dirs, o).unwrap();
    let acked: Vec<u64> = (0..400)
        .map(|i| other.append(&tagged(2, i, 1000)).unwrap())
        .collect();
    // The other open truncates, and pauses after recording the new head, before its files go.
    let (paused, resume) = pause_in("delete::before_unlink", "truncating");
    std::thread::scope(|s| {
        let truncating = std::thread::Builder::new()
            .name("truncating".into())
            .spawn_scoped(s, || other.truncate_before(SEGMENT * 3).unwrap())
            .unwrap();
        paused.recv().unwrap();
        // The owner's checkpoint waits for the truncation: written now, from a view that has not
        // seen the deletion, it would record the old head above files about to go.
        let (done_tx, done) = std::sync::mpsc::channel();
        let owner = &owner;
        let flushing = s.spawn(move || {
            owner.flush().unwrap();
            done_tx.send(()).unwrap();
        });
        let waited = done.recv_timeout(Duration::from_millis(300)).is_err();
        resume.send(()).unwrap();
        assert_eq!(truncating.join().unwrap(), SEGMENT * 3);
        flushing.join().unwrap();
        assert!(
            waited,
            "the owner's checkpoint waits for the maintenance under way"
        );
    });
    // The head the checkpoint records is the one on disk.
    assert_eq!(
        checkpoint_field(&dirs, "min_offset"),
        [SEGMENT * 3, SEGMENT * 3]
    );
    fail::remove("delete::before_unlink");
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
    drop(owner);
    drop(other);
    let log = CommitLog::open(&dirs, opts().exclusive(true)).unwrap();
    assert_eq!(log.min_offset().unwrap(), SEGMENT * 3);
    check(&log);
    assert!(log.verify().unwrap().is_empty());
}

#[test]
fn a_listing_taken_before_a_deletion_never_brings_the_head_back() {
    let t = tempfile::tempdir().unwrap();
    let dirs = two_dirs(t.path());
    let o = opts().clean_interval(Duration::ZERO);
    let a = Arc::new(CommitLog::open(&dirs, o.clone()).unwrap()); // does the background work
    let b = CommitLog::open(&dirs, o).unwrap();
    for i in 0..300 {
        a.append(&tagged(1, i, 1000)).unwrap();
    }
    a.max_offset().unwrap(); // a's view is current: its deletion needs no listing
    let (deleting, release_delete) = pause_in("delete::before_checkpoint", "deleter");
    let (reloading, release_reload) = pause_in("list::lock", "reloader");
    let head = SEGMENT * 3;
    let deleter = {
        let a = Arc::clone(&a);
        std::thread::Builder::new()
            .name("deleter".into())
            .spawn(move || a.truncate_before(head).unwrap())
            .unwrap()
    };
    deleting.recv().unwrap(); // the head left a's list; the checkpoint is not written yet
                              // Another open rolls: a's next look lists the store, which still holds the head's files.
    for i in 0..70 {
        b.append(&tagged(2, i, 1000)).unwrap();
    }
    let reloader = {
        let a = Arc::clone(&a);
        std::thread::Builder::new()
            .name("reloader".into())
            // A look at the store (a listing), then a checkpoint from that view.
            .spawn(move || a.flush().unwrap())
            .unwrap()
    };
    reloading.recv().unwrap(); // listed, about to apply; the deletion goes on first
    release_delete.send(()).unwrap();
    assert_eq!(deleter.join().unwrap(), head);
    release_reload.send(()).unwrap();
    reloader.join().unwrap();
    fail::remove("delete::before_checkpoint");
    fail::remove("list::lock");
    drop(b);
    drop(Arc::try_unwrap(a).unwrap());
    // The checkpoint the flush wrote records the head that is on disk: the store opens.
    let log = CommitLog::open(&dirs, opts().exclusive(true)).unwrap();
    assert_eq!(log.min_offset().unwrap(), head);
    assert!(log.verify().unwrap().is_empty());
}

#[test]
fn a_listing_taken_between_a_moves_switch_and_its_unlink_is_listed_again() {
    let t = tempfile::tempdir().unwrap();
    let dirs = two_dirs(t.path());
    let o = opts().clean_interval(Duration::ZERO);
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
    let (switched, release) = pause_in("move::switched", "mover");
    let mover = {
        let (a, to) = (Arc::clone(&a), to.clone());
        std::thread::Builder::new()
            .name("mover".into())
            .spawn(move || a.move_segment(seg.start_offset, &to).unwrap())
            .unwrap()
    };
    switched.recv().unwrap(); // the list has the copy; the source and the intent are still there
    for i in 0..70 {
        b.append(&tagged(2, i, 1000)).unwrap(); // b rolls: a's next look lists the store
    }
    a.max_offset().unwrap(); // listed: two copies, and the intent names the source
    release.send(()).unwrap();
    mover.join().unwrap();
    fail::remove("move::switched");
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
    let acked: Mutex<Vec<(u64, u32, u32, usize)>> = Mutex::new(Vec::new());
    let deadline = std::time::Instant::now() + Duration::from_secs(secs);
    std::thread::scope(|s| {
        for w in 0..3u32 {
            let (dirs, base, acked) = (&dirs, &base, &acked);
            s.spawn(move || {
                let mut rng = seed ^ (u64::from(w) + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                let mut next = || {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    rng
                };
                let mut seq = 0u32;
                while std::time::Instant::now() < deadline {
                    let flush =
                        [FlushMode::Async, FlushMode::None, FlushMode::Sync][(next() % 3) as usize];
                    let log = CommitLog::open(dirs, base.clone().flush(flush)).unwrap();
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
            });
        }
    });
    let log = CommitLog::open(&dirs, base.clone().exclusive(true)).unwrap();
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
    let acked = acked.into_inner().unwrap();
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

/// A child process SIGKILLed and reaped when dropped: a failing test leaves none behind.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Polls `log`'s tier status until `done` holds (at most 60 s).
#[cfg(feature = "tier")]
fn wait_for_tier(
    log: &CommitLog,
    what: &str,
    done: impl Fn(&rmqlog::TierStatus) -> bool,
) -> rmqlog::TierStatus {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let status = log.tier_status().unwrap().expect("the log has a tier");
        if done(&status) {
            return status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}: {status:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[cfg(feature = "tier")]
#[test]
fn the_tier_ships_from_one_open_and_moves_on_when_its_process_dies() {
    let t = tempfile::tempdir().unwrap();
    let dirs = two_dirs(t.path());
    let url = format!("file://{}", t.path().join("tier").display());
    let tiered = || opts().tier(Some(tier_options(&url)));
    // The first open ships: the child's. This open joins and ships nothing while it lives.
    let mut shipper = Killed(spawn_env(&dirs, "ship", &[(TIER_ENV, url.as_str())]));
    let first = read_until(&mut shipper.0, "shipping").unwrap();
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
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while remote_only() < 4 {
        assert!(std::time::Instant::now() < deadline, "no local copies went");
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
    let log = CommitLog::open(&dirs, tiered().exclusive(true)).unwrap();
    check(&log);
    assert!(log.verify_remote_with(|_, _| {}).unwrap().is_empty());
    let status = log.tier_status().unwrap().unwrap();
    assert!(status.remote_segments >= 6, "{status:?}");
}
