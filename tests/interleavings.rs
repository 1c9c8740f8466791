#![allow(clippy::unwrap_used)] // tests: a failed unwrap is the failure report
//! Interleavings of maintenance calls, the writer and followers, made deterministic by fail points
//! (`cargo test --features failpoints`): one operation is paused at its critical step while
//! another runs, so each race of issue 12 happens on every run, not by luck.
#![cfg(feature = "failpoints")]

mod common;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use common::{assert_readable, body, check_body, dirs, quiet};
use rmqlog::{CommitLog, Error, FlushMode, Options};

/// Pauses the first thread that reaches fail point `name`, until released.
struct Pause {
    name: &'static str,
    reached: Receiver<()>,
    release: Sender<()>,
}

impl Pause {
    fn at(name: &'static str) -> Pause {
        let (reached_tx, reached) = channel();
        let (release, release_rx) = channel::<()>();
        let (reached_tx, release_rx) = (Mutex::new(reached_tx), Mutex::new(release_rx));
        let first = AtomicBool::new(true);
        fail::cfg_callback(name, move || {
            if first.swap(false, Ordering::SeqCst) {
                let _ = reached_tx.lock().unwrap().send(());
                let _ = release_rx.lock().unwrap().recv();
            }
        })
        .unwrap();
        Pause {
            name,
            reached,
            release,
        }
    }

    /// Returns once a thread is paused here.
    fn wait(&self) {
        self.reached
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| panic!("no thread reached fail point {}", self.name));
    }

    fn release(self) {
        let _ = self.release.send(());
        fail::remove(self.name);
    }
}

/// Runs `f` with `log` on a thread of its own.
fn on_thread<L: Send + Sync + 'static, T: Send + 'static>(
    log: &Arc<L>,
    f: impl FnOnce(&L) -> T + Send + 'static,
) -> thread::JoinHandle<T> {
    let log = Arc::clone(log);
    thread::spawn(move || f(&log))
}

/// Reports the first time a thread reaches fail point `name` (without stopping it).
fn signal_at(name: &'static str) -> Receiver<()> {
    let (tx, rx) = channel();
    let tx = Mutex::new(Some(tx));
    fail::cfg_callback(name, move || {
        if let Some(tx) = tx.lock().unwrap().take() {
            let _ = tx.send(());
        }
    })
    .unwrap();
    rx
}

fn wait_for(rx: &Receiver<()>, what: &str) {
    rx.recv_timeout(Duration::from_secs(60))
        .unwrap_or_else(|_| panic!("timed out waiting for {what}"));
}

/// A writer over `dirs` with about `segments` full 4 KiB segments of 100-byte records.
fn writer_with_segments(
    dirs: &[PathBuf],
    opts: Options,
    segments: usize,
) -> (Arc<CommitLog>, Vec<(u64, u64)>) {
    let log = Arc::new(CommitLog::open(dirs, opts).unwrap());
    let mut acked = Vec::new();
    let mut i = 0;
    while log.segments().unwrap().len() < segments {
        acked.push((log.append(&body(i, 100)).unwrap(), i));
        i += 1;
    }
    (log, acked)
}

/// End offset of the `i`th segment.
fn seg_end(log: &CommitLog, i: usize) -> u64 {
    let s = &log.segments().unwrap()[i];
    s.start_offset + s.size
}

/// After the maintenance of a test: the active segment is intact, the log goes on, and every
/// acknowledged record at or above the head reads back, also after a reopen.
fn assert_intact(log: Arc<CommitLog>, dirs: &[PathBuf], opts: Options, mut acked: Vec<(u64, u64)>) {
    let (min, max) = (log.min_offset().unwrap(), log.max_offset().unwrap());
    assert!(min < max, "the log lost its active segment: [{min}, {max})");
    let last = acked.last().unwrap().0;
    log.read(last).expect("the last acknowledged record");
    for i in 1_000_000..1_000_003 {
        acked.push((log.append(&body(i, 100)).unwrap(), i));
    }
    assert_readable(&log, &acked);
    drop(Arc::try_unwrap(log).expect("the test's threads are done"));
    let log = CommitLog::open(dirs, opts).unwrap();
    assert_eq!(log.min_offset().unwrap(), min);
    assert_readable(&log, &acked);
    assert!(log.verify().unwrap().is_empty());
}

/// Defect 1: two `truncate_before` calls at once delete past their targets, up to the active
/// segment. Call A is paused while it plans; call B starts; A goes on.
#[test]
fn concurrent_truncates_delete_exactly_to_the_furthest_target() {
    let _scenario = fail::FailScenario::setup();
    let (_root, dirs) = dirs(2);
    let (log, acked) = writer_with_segments(&dirs, quiet(), 10);
    let (t1, t2) = (seg_end(&log, 3), seg_end(&log, 5));
    let pause = Pause::at("truncate::planning");
    let a = on_thread(&log, move |log| log.truncate_before(t1));
    pause.wait();
    let b_locking = signal_at("list::lock");
    let b = on_thread(&log, move |log| log.truncate_before(t2));
    wait_for(&b_locking, "the second truncate to reach the list lock");
    pause.release();
    a.join().unwrap().unwrap();
    b.join().unwrap().unwrap();
    fail::remove("list::lock");
    assert_eq!(
        log.min_offset().unwrap(),
        t2,
        "deleted past the furthest target"
    );
    assert_eq!(log.segments().unwrap().len(), 4);
    assert_intact(log, &dirs, quiet(), acked);
}

/// Defect 2: `truncate_before` racing `clean(force=True)` deletes more than either asked:
/// `retention_bytes` no longer holds.
#[test]
fn truncate_racing_a_forced_clean_keeps_retention_bytes() {
    let _scenario = fail::FailScenario::setup();
    let (_root, dirs) = dirs(2);
    let keep = 5 * 4096;
    let opts = quiet().retention_bytes(Some(keep));
    let (log, acked) = writer_with_segments(&dirs, opts.clone(), 10);
    let t = seg_end(&log, 2);
    let pause = Pause::at("truncate::planning");
    let a = on_thread(&log, move |log| log.truncate_before(t));
    pause.wait();
    let b_locking = signal_at("list::lock");
    let b = on_thread(&log, move |log| log.clean(true));
    wait_for(&b_locking, "the cleaning pass to reach the list lock");
    pause.release();
    a.join().unwrap().unwrap();
    b.join().unwrap().unwrap();
    fail::remove("list::lock");
    // The log's size is its bytes in use (the active segment counts what it holds): at least
    // `keep`, and one segment fewer would be below it.
    let held = log.max_offset().unwrap() - log.min_offset().unwrap();
    let first = log.segments().unwrap()[0].size;
    assert!(
        held >= keep,
        "retention_bytes is {keep}, the log holds {held}"
    );
    assert!(
        held - first < keep,
        "the log holds {held}: a segment more than it needs"
    );
    assert_intact(log, &dirs, opts, acked);
}

/// The directory of `dirs` the segment at `start` is not in.
fn other_dir(log: &CommitLog, dirs: &[PathBuf], start: u64) -> PathBuf {
    let seg = log
        .segments()
        .unwrap()
        .into_iter()
        .find(|s| s.start_offset == start)
        .unwrap();
    let now = std::path::absolute(seg.path.parent().unwrap()).unwrap();
    dirs.iter()
        .find(|d| std::path::absolute(d).unwrap() != now)
        .unwrap()
        .clone()
}

/// Defect 3: a sync that began before two moves of an unflushed segment found the file of the
/// first copy gone, took that for a failed sync and poisoned the writer.
#[test]
fn a_sync_racing_moves_does_not_poison_the_writer() {
    let _scenario = fail::FailScenario::setup();
    let (_root, dirs) = dirs(2);
    let (log, acked) = writer_with_segments(&dirs, quiet(), 3);
    assert_eq!(log.flushed_offset().unwrap(), 0, "nothing synced yet");
    let there = other_dir(&log, &dirs, 0);
    log.move_segment(0, &there).unwrap();
    let pause = Pause::at("flush::listed");
    let flush = on_thread(&log, move |log| log.flush());
    pause.wait();
    let back = other_dir(&log, &dirs, 0);
    log.move_segment(0, &back).unwrap();
    pause.release();
    let flushed = flush.join().unwrap().expect("a sync that raced a move");
    assert_eq!(flushed, log.max_offset().unwrap());
    log.append(b"after the race")
        .expect("the writer is not poisoned");
    assert_intact(log, &dirs, quiet(), acked);
}

/// A move whose segment retention deletes during the copy reports it, and leaves no copy.
#[test]
fn a_segment_deleted_during_its_move_leaves_no_copy() {
    let _scenario = fail::FailScenario::setup();
    let (_root, dirs) = dirs(2);
    let (log, acked) = writer_with_segments(&dirs, quiet(), 4);
    let there = other_dir(&log, &dirs, 0);
    let pause = Pause::at("move::copied");
    let mover = on_thread(&log, {
        let there = there.clone();
        move |log| log.move_segment(0, there)
    });
    pause.wait();
    let end = seg_end(&log, 0);
    assert_eq!(log.truncate_before(end).unwrap(), end);
    pause.release();
    let err = mover.join().unwrap().expect_err("the segment went away");
    assert!(matches!(err, Error::OffsetOutOfRange { .. }), "{err}");
    let name = format!("{:020}", 0);
    for d in &dirs {
        assert!(
            !d.join(&name).exists(),
            "a copy of segment 0 is left in {}",
            d.display()
        );
    }
    assert_intact(log, &dirs, quiet(), acked);
}

/// A panic in the background flush thread poisons the writer (appends would otherwise go on
/// with nothing making them durable); reads go on.
#[test]
fn a_panic_in_the_flusher_poisons_the_writer() {
    let _scenario = fail::FailScenario::setup();
    let (_root, dirs) = dirs(1);
    let opts = quiet()
        .flush(FlushMode::Async)
        .flush_interval(Duration::from_millis(5));
    let log = CommitLog::open(&dirs, opts).unwrap();
    let first = log.append(b"before").unwrap();
    fail::cfg("flush::pass", "panic").unwrap();
    let mut waited = 0;
    let err = loop {
        match log.append(b"more") {
            Err(e) => break e,
            Ok(_) if waited < 6000 => {
                thread::sleep(Duration::from_millis(5));
                waited += 1;
            }
            Ok(_) => panic!("appends still succeed 30 s after the flusher panicked"),
        }
    };
    fail::remove("flush::pass");
    assert!(
        matches!(&err, Error::WriterPoisoned { cause } if cause.contains("panicked")),
        "{err}"
    );
    assert_eq!(&*log.read(first).unwrap(), b"before");
}

/// A follower opened before the writer's changes, that has mapped no segment yet.
fn follower(dirs: &[PathBuf]) -> CommitLog {
    CommitLog::open(dirs, Options::default().segment_size(4096).read_only(true)).unwrap()
}

fn assert_follows(f: &CommitLog, w: &CommitLog, acked: &[(u64, u64)]) {
    let starts = |l: &CommitLog| -> Vec<u64> {
        l.segments()
            .unwrap()
            .iter()
            .map(|s| s.start_offset)
            .collect()
    };
    assert_eq!(starts(f), starts(w), "the follower's segments");
    assert_readable(f, acked);
}

/// Defect 7: a follower's refresh that read the metadata before a move's intent, and lists both
/// copies of the segment, reported corruption.
#[test]
fn a_refresh_racing_a_move_sees_no_corruption() {
    let _scenario = fail::FailScenario::setup();
    let (_root, dirs) = dirs(2);
    let (log, acked) = writer_with_segments(&dirs, quiet(), 4);
    let f = Arc::new(follower(&dirs));
    let read_meta = Pause::at("listing::metadata_read");
    let refresh = on_thread(&f, move |f| f.refresh());
    read_meta.wait();
    let copied = Pause::at("move::copied");
    let there = other_dir(&log, &dirs, 0);
    let mover = on_thread(&log, move |log| log.move_segment(0, there));
    copied.wait();
    read_meta.release();
    let refreshed = refresh.join().unwrap();
    copied.release();
    mover.join().unwrap().unwrap();
    assert_eq!(
        refreshed.expect("a refresh during a move"),
        log.max_offset().unwrap()
    );
    f.refresh().unwrap();
    assert_follows(&f, &log, &acked);
}

/// Defect 7, for a read-only open.
#[test]
fn a_read_only_open_racing_a_move_sees_no_corruption() {
    let _scenario = fail::FailScenario::setup();
    let (_root, dirs) = dirs(2);
    let (log, acked) = writer_with_segments(&dirs, quiet(), 4);
    let read_meta = Pause::at("listing::metadata_read");
    let opening = thread::spawn({
        let dirs = dirs.clone();
        move || CommitLog::open(&dirs, Options::default().segment_size(4096).read_only(true))
    });
    read_meta.wait();
    let copied = Pause::at("move::copied");
    let there = other_dir(&log, &dirs, 0);
    let mover = on_thread(&log, move |log| log.move_segment(0, there));
    copied.wait();
    read_meta.release();
    let opened = opening.join().unwrap();
    copied.release();
    mover.join().unwrap().unwrap();
    let f = opened.expect("a read-only open during a move");
    assert_readable(&f, &acked);
}

/// Defect 7: a listing that read one directory before a move and the other after it missed the
/// segment, and the follower's log became shorter than it was.
#[test]
fn a_refresh_that_misses_a_moving_segment_keeps_the_log_whole() {
    let _scenario = fail::FailScenario::setup();
    let (_root, dirs) = dirs(2);
    let (log, acked) = writer_with_segments(&dirs, quiet(), 4);
    // Round robin: segment 1 is in the second directory; it moves to the first, which the
    // listing has read already.
    let seg1 = log.segments().unwrap()[1].start_offset;
    assert_eq!(other_dir(&log, &dirs, seg1), dirs[0]);
    let f = Arc::new(follower(&dirs));
    let known = f.max_offset().unwrap();
    let listed_first = Pause::at("layout::dir_listed");
    let refresh = on_thread(&f, move |f| f.refresh());
    listed_first.wait();
    log.move_segment(seg1, &dirs[0]).unwrap();
    listed_first.release();
    refresh.join().unwrap().expect("a refresh during a move");
    assert!(
        f.max_offset().unwrap() >= known,
        "the follower's log became shorter"
    );
    assert_follows(&f, &log, &acked);
}

/// Defect 6, between two refreshes: the follower has not mapped a segment the writer then moves,
/// and another it then deletes. The moved records read from the new copy; the deleted ones are
/// out of range.
#[test]
fn a_follower_reads_moved_records_and_reports_deleted_ones_out_of_range() {
    let _scenario = fail::FailScenario::setup();
    let (_root, dirs) = dirs(2);
    let (log, acked) = writer_with_segments(&dirs, quiet(), 5);
    let f = follower(&dirs);
    let seg1 = log.segments().unwrap()[1].start_offset;
    log.move_segment(seg1, other_dir(&log, &dirs, seg1))
        .unwrap();
    let in_seg1: Vec<_> = acked
        .iter()
        .filter(|(o, _)| (seg1..seg1 + 4096).contains(o))
        .copied()
        .collect();
    assert_readable(&f, &in_seg1);
    let end0 = seg_end(&log, 0);
    log.truncate_before(end0).unwrap();
    let err = f.read(0).expect_err("segment 0 was deleted");
    assert!(matches!(err, Error::OffsetOutOfRange { .. }), "{err}");
    assert_follows(&f, &log, &acked);
}

/// The store's newest checkpoint, as JSON.
fn checkpoint(dirs: &[PathBuf]) -> serde_json::Value {
    dirs.iter()
        .filter_map(|d| std::fs::read_to_string(d.join("rmqlog.meta")).ok())
        .map(|text| {
            serde_json::from_str::<serde_json::Value>(text.lines().next().unwrap()).unwrap()
        })
        .max_by_key(|c| c["seq"].as_u64().unwrap())
        .expect("a checkpoint")
}

/// Blocks until `log` is marked closed by another thread's `close()` (its first step).
fn until_closed(log: &CommitLog) {
    let mut waited = 0;
    while !log.is_closed() {
        assert!(waited < 60_000, "close() never marked the log closed");
        thread::sleep(Duration::from_millis(1));
        waited += 1;
    }
}

/// `close()` racing a move: the move stops at its next chunk, leaves no copy and clears its
/// intent, and only then does the close write its last, clean checkpoint and release the lock;
/// nothing of the closed log is written after that.
#[test]
fn close_waits_for_a_move_and_the_move_leaves_nothing_behind() {
    let _scenario = fail::FailScenario::setup();
    let (_root, dirs) = dirs(2);
    let (log, acked) = writer_with_segments(&dirs, quiet(), 4);
    let there = other_dir(&log, &dirs, 0);
    let copying = Pause::at("move::copying");
    let mover = on_thread(&log, {
        let there = there.clone();
        move |log| log.move_segment(0, there)
    });
    copying.wait();
    assert!(
        checkpoint(&dirs)["moving"].is_object(),
        "the intent is recorded"
    );
    let closer = on_thread(&log, move |log| log.close());
    until_closed(&log);
    copying.release();
    let moved = mover.join().unwrap();
    assert!(matches!(moved, Err(Error::Closed)), "{moved:?}");
    closer.join().unwrap().expect("close");
    let c = checkpoint(&dirs);
    assert_eq!(c["clean"], true, "{c}");
    assert!(
        c["moving"].is_null(),
        "a closed log's checkpoint names a move: {c}"
    );
    for name in [format!("{:020}", 0), format!("{:020}.tmp", 0)] {
        assert!(
            !there.join(&name).exists(),
            "{name} left in {}",
            there.display()
        );
    }
    drop(Arc::try_unwrap(log).expect("threads are done"));
    let log = CommitLog::open(&dirs, quiet()).unwrap();
    assert_readable(&log, &acked);
    assert!(log.verify().unwrap().is_empty());
}

/// `close()` racing `truncate_before`: the deletion in flight finishes (its checkpoint before the
/// close's), one that starts after the close is refused, and the close's checkpoint is the last.
#[test]
fn close_waits_for_a_deletion_in_flight_and_refuses_later_ones() {
    let _scenario = fail::FailScenario::setup();
    let (_root, dirs) = dirs(2);
    let (log, acked) = writer_with_segments(&dirs, quiet(), 6);
    let (t, later) = (seg_end(&log, 1), seg_end(&log, 2));
    let planning = Pause::at("truncate::planning");
    let truncate = on_thread(&log, move |log| log.truncate_before(t));
    planning.wait();
    let closer = on_thread(&log, move |log| log.close());
    until_closed(&log);
    planning.release();
    assert_eq!(
        truncate.join().unwrap().expect("the truncation in flight"),
        t
    );
    closer.join().unwrap().expect("close");
    assert!(matches!(log.truncate_before(later), Err(Error::Closed)));
    let c = checkpoint(&dirs);
    assert_eq!(
        (c["clean"].as_bool(), c["min_offset"].as_u64()),
        (Some(true), Some(t)),
        "{c}"
    );
    drop(Arc::try_unwrap(log).expect("threads are done"));
    let log = CommitLog::open(&dirs, quiet()).unwrap();
    assert_eq!(log.min_offset().unwrap(), t);
    assert_readable(&log, &acked);
}

/// A writer whose `rmqlog-warm` thread is paused at `warm::zeros`, holding the warm edge of the
/// active segment (1 MiB): the first append warmed `[0, 256 KiB)` inline, the thread is about to
/// write zeros over `[256 KiB, 512 KiB)`.
fn writer_with_paused_warmer(
    dirs: &[PathBuf],
    opts: Options,
) -> (Arc<CommitLog>, Vec<(u64, u64)>, Pause) {
    let pause = Pause::at("warm::zeros");
    let log = Arc::new(CommitLog::open(dirs, opts).unwrap());
    let acked = vec![(log.append(&body(0, 1000)).unwrap(), 0)];
    pause.wait(); // the writer is idle: the thread's next pass warms ahead
    (log, acked, pause)
}

fn warm_opts() -> Options {
    quiet().segment_size(1 << 20).warm_ahead(512 << 10)
}

/// Runs `f` on a thread, checks it is still blocked after 200 ms (waiting for the warmer's
/// chunk), releases the warmer and returns what `f` returned.
fn blocked_until_released<T: Send + 'static>(
    log: &Arc<CommitLog>,
    pause: Pause,
    f: impl FnOnce(&CommitLog) -> T + Send + 'static,
) -> T {
    let t = on_thread(log, f);
    thread::sleep(Duration::from_millis(200));
    assert!(
        !t.is_finished(),
        "the writer went past the warm edge while the warmer held it"
    );
    pause.release();
    t.join().unwrap()
}

/// Appends crossing the warm edge wait for the thread's chunk of zeros instead of writing under
/// it: no record is zeroed.
#[test]
fn appends_past_the_edge_wait_for_the_warmers_chunk() {
    let _scenario = fail::FailScenario::setup();
    let (_root, dirs) = dirs(1);
    let (log, mut acked, pause) = writer_with_paused_warmer(&dirs, warm_opts());
    let more = blocked_until_released(&log, pause, |log| {
        (1..400)
            .map(|i| (log.append(&body(i, 1000)).unwrap(), i))
            .collect::<Vec<_>>()
    });
    acked.extend(more);
    assert!(
        acked.last().unwrap().0 > 256 << 10,
        "the appends crossed the edge"
    );
    assert_intact(log, &dirs, warm_opts(), acked);
}

/// A large record (written with `pwritev`, not through the map) reserves its range first.
#[test]
fn a_direct_write_past_the_edge_waits_for_the_warmers_chunk() {
    let _scenario = fail::FailScenario::setup();
    let (_root, dirs) = dirs(1);
    let (log, mut acked, pause) = writer_with_paused_warmer(&dirs, warm_opts());
    let mut at = acked[0].0;
    for i in 1..13 {
        at = log.append(&body(i, 20_000)).unwrap(); // 12 x 20 KB: up to the edge, not past it
        acked.push((at, i));
    }
    assert!(at < 256 << 10);
    let big = blocked_until_released(&log, pause, |log| log.append(&body(99, 60_000)).unwrap());
    acked.push((big, 99));
    assert_intact(log, &dirs, warm_opts(), acked);
}

/// A roll seals the segment (a filler at the writer's position) only once the thread let go of
/// its edge; the log goes on in the new segment.
#[test]
fn a_roll_waits_for_the_warmers_chunk_before_the_filler() {
    let _scenario = fail::FailScenario::setup();
    let (_root, dirs) = dirs(1);
    let (log, mut acked, pause) = writer_with_paused_warmer(&dirs, warm_opts());
    let next = blocked_until_released(&log, pause, |log| {
        log.append(&body(7, (1 << 20) - 100)).unwrap() // fits only in a new segment
    });
    assert_eq!(next, 1 << 20, "the record went to the next segment");
    acked.push((next, 7));
    assert_intact(log, &dirs, warm_opts(), acked);
}

/// `close` stops and joins the thread, also when it is in the middle of a chunk.
#[test]
fn close_joins_the_warmer_in_the_middle_of_a_chunk() {
    let _scenario = fail::FailScenario::setup();
    let (_root, dirs) = dirs(1);
    let (log, acked, pause) = writer_with_paused_warmer(&dirs, warm_opts());
    blocked_until_released(&log, pause, |log| log.close().unwrap());
    let log = CommitLog::open(&dirs, warm_opts()).unwrap();
    assert_readable(&log, &acked);
    assert!(log.verify().unwrap().is_empty());
}

#[test]
fn a_waiting_follower_sees_a_batch_whole_or_not_at_all() {
    let _scenario = fail::FailScenario::setup();
    let (_t, d) = dirs(1);
    let log = Arc::new(CommitLog::open(&d, quiet()).unwrap());
    let follower = CommitLog::open(&d, Options::default().read_only(true)).unwrap();
    let end = log.max_offset().unwrap();
    // The writer has copied all three records (each valid on its own) but not published them.
    let pause = Pause::at("append::before_publish");
    let writer = on_thread(&log, |l| {
        l.append_batch(&[body(0, 50), body(1, 50), body(2, 50)])
            .unwrap()
    });
    pause.wait();
    assert_eq!(
        follower.wait(end, Some(Duration::from_millis(50))).unwrap(),
        end,
        "nothing of an unpublished batch is visible"
    );
    pause.release();
    let offsets = writer.join().unwrap();
    let now = follower.wait(end, Some(Duration::from_secs(30))).unwrap();
    assert_eq!(now, log.max_offset().unwrap(), "the whole batch at once");
    assert_eq!(follower.read(offsets[2]).unwrap().len(), 50);
}

#[test]
fn a_follower_paused_in_its_catch_up_while_the_writer_rolls_and_truncates() {
    let _scenario = fail::FailScenario::setup();
    let (_t, d) = dirs(2);
    let log = CommitLog::open(&d, quiet()).unwrap();
    let first: Vec<_> = (0..10)
        .map(|i| log.append(&body(i, 300)).unwrap())
        .collect();
    let follower = Arc::new(CommitLog::open(&d, Options::default().read_only(true)).unwrap());
    let end = log.max_offset().unwrap();
    // The follower has read the generation it knows, then stops before it looks at the end.
    let pause = Pause::at("wait::seen");
    let waiter = on_thread(&follower, move |f| {
        f.wait(end, Some(Duration::from_secs(30)))
    });
    pause.wait();
    // Meanwhile the writer fills this segment, rolls twice and deletes the segments it had.
    let later: Vec<_> = (10..40)
        .map(|i| log.append(&body(i, 300)).unwrap())
        .collect();
    let head = log.truncate_before(later[20]).unwrap();
    assert!(head > first[9], "the follower's segments are gone");
    pause.release();
    let now = waiter.join().unwrap().unwrap();
    assert!(now > end);
    // What the follower shows is the writer's log: the new head, every record after it.
    follower
        .wait(log.max_offset().unwrap() - 1, Some(Duration::from_secs(30)))
        .unwrap();
    assert_eq!(follower.min_offset().unwrap(), head);
    assert_eq!(follower.max_offset().unwrap(), log.max_offset().unwrap());
    for (i, off) in later.iter().enumerate().filter(|(_, o)| **o >= head) {
        assert_eq!(
            check_body(&follower.read(*off).unwrap()),
            Some(i as u64 + 10)
        );
    }
}

/// What `tier_status()` and `segments()` say while the tier thread is paused between the steps
/// of shipping a segment: each agrees with the other and with its own counters, at every step.
#[cfg(feature = "tier")]
#[test]
fn the_tier_status_and_the_segments_agree_in_the_middle_of_shipping() {
    let _scenario = fail::FailScenario::setup();
    let (_root, d) = dirs(1);
    let tier = tempfile::tempdir().unwrap();
    let mut t = rmqlog::TierOptions::new(format!("file://{}", tier.path().display()));
    t.local_retention_bytes = Some(0);
    let opts = quiet().segment_size(64 * 1024).tier(Some(t));
    let seen = |log: &CommitLog| (log.tier_status().unwrap().unwrap(), log.segments().unwrap());

    let uploaded = Pause::at("tier::uploaded");
    let log = CommitLog::open(&d, opts).unwrap();
    let acked = common::fill(&log, 700, 200);
    log.flush().unwrap();
    // The first segment's object is written; the manifest does not list it yet (and may never,
    // if the store fails now): not shipped, not counted.
    uploaded.wait();
    let at_uploaded = seen(&log);
    let published = Pause::at("tier::published");
    uploaded.release();
    // Published in the store, not yet saved in the store's directories nor made current here.
    published.wait();
    let at_published = seen(&log);
    let committed = Pause::at("tier::committed");
    published.release();
    // The first segment's manifest entry is published and saved; this open has not yet noted
    // the copy on the segment.
    committed.wait();
    let at_committed = seen(&log);
    let replaced = Pause::at("tier::replaced");
    committed.release();
    // The remote copy replaced the local one in the list; the file is not yet deleted.
    replaced.wait();
    let at_replaced = seen(&log);
    replaced.release();
    // Checked with the thread released: a failed check must not leave close() waiting for it.
    for st in [&at_uploaded.0, &at_published.0] {
        assert_eq!(st.uploads, 0, "{st:?}");
        assert!(st.pending_segments >= 1, "{st:?}");
    }
    let steps = [
        ("uploaded", at_uploaded),
        ("published", at_published),
        ("committed", at_committed),
        ("replaced", at_replaced),
    ];
    for (step, (st, segs)) in steps {
        let shown = |f: fn(&rmqlog::SegmentInfo) -> bool| segs.iter().filter(|s| f(s)).count();
        let what = format!("{step}: {st:?} {segs:?}");
        assert_eq!(
            st.remote_segments + st.both_segments,
            shown(|s| s.remote),
            "{what}"
        );
        assert_eq!(st.remote_segments, shown(|s| !s.local), "{what}");
        let count = |n: usize| n as u64;
        assert_eq!(
            st.uploads,
            count(st.remote_segments + st.both_segments),
            "{what}"
        );
        assert_eq!(st.local_deleted, count(st.remote_segments), "{what}");
    }
    assert_readable(&log, &acked);
}

/// A scan of part of a remote segment fetches the records' range, then the tail of the record
/// that crosses its end. Paused between the two while another segment's read evicts the first
/// range from a cache of one byte, the scan must still read its records whole (the tail's fetch
/// comes back in a new cache file that lacks the first range).
#[cfg(feature = "tier")]
#[test]
fn a_partial_scan_whose_range_is_evicted_before_its_tail_reads_right() {
    let _scenario = fail::FailScenario::setup();
    let (local, remote) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let url = format!("file://{}", remote.path().display());
    const SEG: u64 = 1 << 20;
    let mut tier = rmqlog::TierOptions::new(&url);
    tier.local_retention_bytes = Some(0);
    let w = CommitLog::open(
        &[local.path()],
        Options::default().segment_size(SEG).tier(Some(tier)),
    )
    .unwrap();
    let acked: Vec<(u64, u64)> = (0..1100)
        .map(|i| {
            (
                w.append(&body(i, 1000 + (i as usize * 37) % 3000)).unwrap(),
                i,
            )
        })
        .collect();
    while w.tier_status().unwrap().unwrap().local_deleted < 2 {
        thread::sleep(Duration::from_millis(10));
    }
    w.close().unwrap();
    let mut tier = rmqlog::TierOptions::new(&url);
    tier.cache_bytes = 1;
    let r = Arc::new(
        CommitLog::open(
            &[url.as_str()],
            Options::default().read_only(true).tier(Some(tier)),
        )
        .unwrap(),
    );
    // A range of segment 0 that ends one byte into a record: its tail needs a second fetch.
    let in_seg0: Vec<_> = acked.iter().filter(|(o, _)| *o < SEG).collect();
    let (start, end) = (in_seg0[3].0, in_seg0[in_seg0.len() / 2].0 + 1);
    let want: Vec<(u64, u64)> = acked
        .iter()
        .filter(|(o, _)| (start..end).contains(o))
        .copied()
        .collect();
    let pause = Pause::at("tier::span_fetched");
    let scan = on_thread(&r, move |r| {
        r.scan(Some(start), Some(end))
            .unwrap()
            .map(|rec| rec.map(|rec| (rec.offset(), rec.to_vec())))
            .collect::<Result<Vec<_>, Error>>()
    });
    pause.wait();
    let other = acked.iter().find(|(o, _)| *o >= SEG).unwrap();
    assert_eq!(check_body(&r.read(other.0).unwrap()), Some(other.1));
    pause.release();
    let got = scan
        .join()
        .unwrap()
        .expect("the paused scan reads its records");
    assert_eq!(got.len(), want.len());
    for ((o, b), (wo, wi)) in got.iter().zip(&want) {
        assert_eq!((o, check_body(b)), (wo, Some(*wi)));
    }
}

/// A search by time that read the log's end, then the segment list after appends rolled a new
/// segment past that end: it answers as a scan of that end does (it panicked: a length computed
/// from the new segment's start underflowed).
#[test]
fn a_time_search_that_sees_a_segment_past_its_end_answers() {
    let _scenario = fail::FailScenario::setup();
    let (_root, dirs) = dirs(1);
    let (log, acked) = writer_with_segments(&dirs, quiet(), 2);
    let max = log.max_offset().unwrap();
    let pause = Pause::at("timestamp::ended");
    let search = on_thread(&log, |log| log.offset_for_timestamp(u64::MAX));
    pause.wait();
    let before = log.segments().unwrap().len();
    let mut appended = Vec::new();
    while log.segments().unwrap().len() == before {
        appended.push((log.append(&body(7, 100)).unwrap(), 7));
    }
    pause.release();
    assert_eq!(search.join().unwrap().unwrap(), max);
    let mut acked = acked;
    acked.extend(appended);
    assert_intact(log, &dirs, quiet(), acked);
}
