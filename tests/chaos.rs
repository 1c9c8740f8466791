#![allow(clippy::unwrap_used)] // tests: a failed unwrap is the failure report
//! Chaos: real threads appending (single and batched, small and large records, and records with
//! message ids sent again: each finds its first record while that is in the log), reading and
//! holding records, scanning, cleaning, truncating, moving and rebalancing at once, while two
//! followers in other processes check every record's content: one refreshes in a loop, the other
//! waits for each next record (a following scan, woken through the control page) and must have
//! reached the log's end once the writer stops. At the end every
//! acknowledged record at or above the head reads back, before and after a reopen, and `verify`
//! finds nothing.
//!
//! Runs `RMQLOG_CHAOS_SECS` seconds (5 by default; `.ci/run` sets 30; longer on demand), with
//! the seed in `RMQLOG_CHAOS_SEED` (the time by default; printed, to replay a failure).

mod common;

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use common::{body, check_body, Rng};
use rmqlog::{CommitLog, Error, FlushMode, Follow, Message, Options, RecordRef, TierOptions};

/// Set in the follower process: the store's directories, joined by ':'.
const FOLLOW_ENV: &str = "RMQLOG_CHAOS_FOLLOW";
/// The file whose existence tells the follower to finish.
const STOP_ENV: &str = "RMQLOG_CHAOS_STOP";
/// Set (to anything) in the follower that waits for records instead of refreshing.
const WAIT_ENV: &str = "RMQLOG_CHAOS_WAIT";
const SEGMENT: u64 = 64 * 1024;

/// The writer's options; its sealed segments go to a `file://` tier at `tier`, whose uploads,
/// local deletions and remote retention race everything else.
fn writer_options(tier: &Path) -> Options {
    let mut t = TierOptions::new(format!("file://{}", tier.display()));
    t.local_retention_bytes = Some(8 * SEGMENT);
    Options::default()
        .tier(Some(t))
        .segment_size(SEGMENT)
        .flush(FlushMode::Async)
        .flush_interval(Duration::from_millis(20))
        .clean_interval(Duration::from_millis(50))
        .retention_hours(None)
        .retention_bytes(Some(24 * SEGMENT))
        .max_message_size(64 * 1024)
        .dedup_window(Duration::from_secs(3600))
}

fn reader_options() -> Options {
    Options::default().segment_size(SEGMENT).read_only(true)
}

/// What the threads did, to check that the run exercised every operation.
#[derive(Debug, Default)]
struct Counts {
    appended: AtomicU64,
    reads: AtomicU64,
    out_of_range: AtomicU64,
    scans: AtomicU64,
    truncates: AtomicU64,
    cleans: AtomicU64,
    moves: AtomicU64,
    rebalances: AtomicU64,
    /// Appends with a message id sent again, and how many of those found the first record.
    resent: AtomicU64,
    deduplicated: AtomicU64,
}

fn add(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

/// Checks a read's outcome: the right body, or out of range because the head moved past it.
fn check_read(
    log: &CommitLog,
    offset: u64,
    id: u64,
    got: Result<RecordRef, Error>,
) -> Option<RecordRef> {
    match got {
        Ok(rec) => {
            assert_eq!(check_body(&rec), Some(id), "record {id} at {offset}");
            Some(rec)
        }
        Err(Error::OffsetOutOfRange { .. }) => {
            let min = log.min_offset().unwrap();
            assert!(
                offset < min,
                "record {id} at {offset} out of range above the head {min}"
            );
            None
        }
        Err(e) => panic!("reading record {id} at {offset}: {e}"),
    }
}

/// Checks that a maintenance call failed only because of another one: its segment was deleted
/// or is not sealed.
fn expected_refusal(what: &str, r: Result<impl Sized, Error>) -> bool {
    match r {
        Ok(_) => true,
        Err(Error::OffsetOutOfRange { .. } | Error::InvalidOffset { .. }) => false,
        // The tier thread made it remote-only after the mover picked it.
        Err(Error::Unsupported(m)) if m.contains("only in the remote tier") => false,
        Err(e) => panic!("{what}: {e}"),
    }
}

fn run_threads(log: &Arc<CommitLog>, dirs: &[PathBuf], secs: u64, seed: u64) -> Vec<(u64, u64)> {
    let acked: Arc<Mutex<Vec<(u64, u64)>>> = Arc::default();
    let counts: Arc<Counts> = Arc::default();
    let next_id = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut handles = Vec::new();
    let spawn =
        |handles: &mut Vec<thread::JoinHandle<()>>, name: &str, f: Box<dyn FnOnce() + Send>| {
            handles.push(thread::Builder::new().name(name.into()).spawn(f).unwrap());
        };
    for t in 0..2u64 {
        let (log, acked, counts, next_id, stop) = (
            log.clone(),
            acked.clone(),
            counts.clone(),
            next_id.clone(),
            stop.clone(),
        );
        spawn(
            &mut handles,
            "appender",
            Box::new(move || {
                let mut rng = Rng::new(seed ^ (t + 1));
                while !stop.load(Ordering::Relaxed) {
                    let len = |rng: &mut Rng| match rng.range(0, 20) {
                        0 => rng.range(16 * 1024, 40 * 1024) as usize, // direct write
                        1..=5 => rng.range(400, 4000) as usize,
                        _ => rng.range(8, 400) as usize,
                    };
                    let n = if rng.one_in(5) { rng.range(2, 30) } else { 1 };
                    let ids: Vec<u64> = (0..n)
                        .map(|_| next_id.fetch_add(1, Ordering::Relaxed))
                        .collect();
                    let bodies: Vec<Vec<u8>> =
                        ids.iter().map(|&i| body(i, len(&mut rng))).collect();
                    let offsets = if n == 1 {
                        vec![log.append(&bodies[0]).expect("append")]
                    } else {
                        log.append_batch(&bodies).expect("append_batch")
                    };
                    add(&counts.appended, n);
                    acked.lock().unwrap().extend(offsets.into_iter().zip(ids));
                }
            }),
        );
    }
    {
        // Appends with message ids, a third of them sent again: one whose first record is still
        // in the log (not deleted by retention or truncation since) must get its offset back.
        let (log, acked, counts, next_id, stop) = (
            log.clone(),
            acked.clone(),
            counts.clone(),
            next_id.clone(),
            stop.clone(),
        );
        spawn(
            &mut handles,
            "once",
            Box::new(move || {
                let mut rng = Rng::new(seed ^ 77);
                let mut sent: VecDeque<(u64, u64)> = VecDeque::new();
                while !stop.load(Ordering::Relaxed) {
                    let again = !sent.is_empty() && rng.one_in(3);
                    let (i, first) = match again {
                        true => {
                            let k = rng.range(0, sent.len() as u64) as usize;
                            (sent[k].0, Some((k, sent[k].1)))
                        }
                        false => (next_id.fetch_add(1, Ordering::Relaxed), None),
                    };
                    let b = body(i, 8 + (i % 300) as usize);
                    let id = format!("once-{i}");
                    let got = log
                        .append_message(&Message::new(&b).id(id.as_bytes()))
                        .expect("append with an id");
                    match first {
                        Some((k, at)) => {
                            add(&counts.resent, 1);
                            if got == at {
                                add(&counts.deduplicated, 1);
                                continue;
                            }
                            // Written again: only if its first record is gone.
                            let head = log.min_offset().unwrap();
                            assert!(
                                at < head,
                                "{id}: first at {at} (the head is {head}), written again at {got}"
                            );
                            sent[k].1 = got;
                        }
                        None => {
                            sent.push_back((i, got));
                            if sent.len() > 500 {
                                sent.pop_front();
                            }
                        }
                    }
                    add(&counts.appended, 1);
                    acked.lock().unwrap().push((got, i));
                }
            }),
        );
    }
    for t in 0..2u64 {
        let (log, acked, counts, stop) = (log.clone(), acked.clone(), counts.clone(), stop.clone());
        spawn(
            &mut handles,
            "reader",
            Box::new(move || {
                let mut rng = Rng::new(seed ^ (t + 100));
                let mut held: VecDeque<(u64, RecordRef)> = VecDeque::new();
                while !stop.load(Ordering::Relaxed) {
                    let pick = {
                        let a = acked.lock().unwrap();
                        // Mostly the newest records (retention keeps them), sometimes any.
                        let n = a.len() as u64;
                        let from = if rng.one_in(5) {
                            0
                        } else {
                            n.saturating_sub(2000)
                        };
                        (n > 0).then(|| a[rng.range(from, n) as usize])
                    };
                    let Some((offset, id)) = pick else {
                        thread::yield_now();
                        continue;
                    };
                    add(&counts.reads, 1);
                    match check_read(&log, offset, id, log.read(offset)) {
                        Some(rec) => held.push_back((id, rec)),
                        None => add(&counts.out_of_range, 1),
                    }
                    if held.len() > 64 {
                        held.pop_front();
                    }
                    // A held record never changes, whatever happened to its segment since.
                    for (id, rec) in &held {
                        assert_eq!(check_body(rec), Some(*id), "a held record changed");
                    }
                    #[cfg(feature = "arrow")]
                    if rng.one_in(200) {
                        add(&counts.scans, 1);
                        batch_scan(&log, &mut rng);
                    }
                    if rng.one_in(200) {
                        add(&counts.scans, 1);
                        let start = log.min_offset().unwrap();
                        match log.scan(Some(start), None) {
                            Ok(scan) => {
                                for rec in scan {
                                    match rec {
                                        Ok(rec) => assert!(
                                            check_body(&rec).is_some(),
                                            "scanned a bad record at {}",
                                            rec.offset()
                                        ),
                                        // The head moved past the scan: it ends there.
                                        Err(Error::OffsetOutOfRange { .. }) => break,
                                        Err(e) => panic!("scan: {e}"),
                                    }
                                }
                            }
                            Err(Error::OffsetOutOfRange { .. }) => {}
                            Err(e) => panic!("scan: {e}"),
                        }
                    }
                }
            }),
        );
    }
    {
        let (log, counts, stop) = (log.clone(), counts.clone(), stop.clone());
        spawn(
            &mut handles,
            "truncator",
            Box::new(move || {
                let mut rng = Rng::new(seed ^ 200);
                while !stop.load(Ordering::Relaxed) {
                    thread::sleep(Duration::from_millis(rng.range(5, 40)));
                    let (min, max) = (log.min_offset().unwrap(), log.max_offset().unwrap());
                    // Keep about ten segments: the cleaner does the rest.
                    let target = min + rng.range(0, max.saturating_sub(min + 10 * SEGMENT).max(1));
                    log.truncate_before(target).expect("truncate_before");
                    // Equal for a moment when the last sealed segment ended exactly at the end
                    // and an append rolled past it but has not published yet: it may go then.
                    assert!(
                        log.min_offset().unwrap() <= log.max_offset().unwrap(),
                        "the head passed the end"
                    );
                    add(&counts.truncates, 1);
                    if rng.one_in(3) {
                        log.clean(true).expect("clean");
                        add(&counts.cleans, 1);
                    }
                    if rng.one_in(4) {
                        log.flush().expect("flush");
                    }
                }
            }),
        );
    }
    {
        let (log, counts, stop, dirs) = (log.clone(), counts.clone(), stop.clone(), dirs.to_vec());
        spawn(
            &mut handles,
            "mover",
            Box::new(move || {
                let mut rng = Rng::new(seed ^ 300);
                while !stop.load(Ordering::Relaxed) {
                    let segs: Vec<_> = log
                        .segments()
                        .unwrap()
                        .into_iter()
                        .filter(|s| s.local)
                        .collect();
                    if segs.len() > 2 {
                        let seg = &segs[rng.range(0, segs.len() as u64 - 1) as usize];
                        let dest = &dirs[rng.range(0, dirs.len() as u64) as usize];
                        if expected_refusal(
                            "move_segment",
                            log.move_segment(seg.start_offset, dest),
                        ) {
                            add(&counts.moves, 1);
                        }
                    }
                    if rng.one_in(20) {
                        // The directories share one filesystem: rebalancing finds nothing to even
                        // out, but plans against the moves and deletions around it.
                        log.rebalance(Some(4 * SEGMENT)).expect("rebalance");
                        add(&counts.rebalances, 1);
                    }
                    thread::sleep(Duration::from_millis(rng.range(0, 4)));
                }
            }),
        );
    }
    thread::sleep(Duration::from_secs(secs));
    stop.store(true, Ordering::Relaxed);
    for h in handles {
        if let Err(panic) = h.join() {
            std::panic::resume_unwind(panic);
        }
    }
    println!("chaos: {counts:?}");
    for (what, c) in [
        ("appends", &counts.appended),
        ("reads", &counts.reads),
        ("truncates", &counts.truncates),
        ("cleaning passes", &counts.cleans),
        ("moves", &counts.moves),
        ("appends found by their id", &counts.deduplicated),
    ] {
        assert!(c.load(Ordering::Relaxed) > 0, "the run did no {what}");
    }
    let stats = log.stats().unwrap();
    assert!(stats.segments_deleted > 0, "nothing was deleted");
    assert!(stats.segments_created > 30, "few rolls: {stats:?}");
    let raced = log.tier_status().unwrap().unwrap();
    println!("chaos: {raced:?}");
    // On a loaded machine the uploads can lag behind the truncations for the whole run, so that
    // no uploaded prefix ever outgrew `local_retention_bytes`: then the tier must catch up and
    // delete local copies once the writers are still.
    let tier = settled_tier(log);
    assert!(
        tier.uploads > 0 && tier.local_deleted > 0,
        "the tier did nothing: {tier:?}"
    );
    println!(
        "chaos: local copies deleted by the tier: {} while racing, {} once still",
        raced.local_deleted,
        tier.local_deleted - raced.local_deleted
    );
    Arc::try_unwrap(acked).unwrap().into_inner().unwrap()
}

/// The tier's status once it deleted a local copy or had 60 s of a still log to do so.
/// A columnar scan of the whole log on 1 to 4 workers with random batch limits: every row's body
/// is some record's, offsets only go up, and only the head moving past the scan may end it early.
#[cfg(feature = "arrow")]
fn batch_scan(log: &CommitLog, rng: &mut Rng) {
    use arrow_array::cast::AsArray;
    use arrow_array::types::Int64Type;
    use rmqlog::arrow::{BatchOptions, BodyLayout, Column};

    let opts = BatchOptions {
        columns: vec![Column::Offset, Column::Body],
        body: if rng.one_in(2) {
            BodyLayout::View
        } else {
            BodyLayout::Binary
        },
        max_records: rng.range(1, 3000) as usize,
        max_bytes: rng.range(1, 1 << 20) as usize,
    };
    let threads = rng.range(1, 5) as usize;
    let start = log.min_offset().unwrap();
    let reader = match log.scan_batches(Some(start), None, opts) {
        Ok(r) => r.parallel(threads),
        Err(Error::OffsetOutOfRange { .. }) => return,
        Err(e) => panic!("scan_batches: {e}"),
    };
    let mut last = None;
    for batch in reader {
        let batch = match batch {
            Ok(b) => b,
            Err(arrow_schema::ArrowError::ExternalError(e))
                if matches!(e.downcast_ref(), Some(Error::OffsetOutOfRange { .. })) =>
            {
                break; // the head moved past the scan: it ends there
            }
            Err(e) => panic!("scan_batches on {threads} workers: {e}"),
        };
        let offsets = batch.column(0).as_primitive::<Int64Type>();
        for (i, &offset) in offsets.values().iter().enumerate() {
            let body: &[u8] = match batch
                .column(1)
                .as_any()
                .downcast_ref::<arrow_array::BinaryViewArray>()
            {
                Some(views) => views.value(i),
                None => batch.column(1).as_binary::<i32>().value(i),
            };
            assert!(
                check_body(body).is_some(),
                "a bad row at {offset} ({threads} workers)"
            );
            assert!(last < Some(offset), "offsets out of order at {offset}");
            last = Some(offset);
        }
    }
}

fn settled_tier(log: &CommitLog) -> rmqlog::TierStatus {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let tier = log.tier_status().unwrap().unwrap();
        if tier.local_deleted > 0 || std::time::Instant::now() > deadline {
            return tier;
        }
        thread::sleep(Duration::from_millis(50));
    }
}

fn check_all(log: &CommitLog, acked: &[(u64, u64)]) {
    common::assert_readable(log, acked);
    assert_eq!(log.verify_remote_with(|_, _| {}).unwrap(), vec![]);
}

#[test]
fn chaos() {
    let secs: u64 =
        std::env::var("RMQLOG_CHAOS_SECS").map_or(5, |s| s.parse().expect("RMQLOG_CHAOS_SECS"));
    let seed = common::seed("RMQLOG_CHAOS_SEED");
    println!("chaos: {secs} s, RMQLOG_CHAOS_SEED={seed}");
    let (root, dirs) = common::dirs(3);
    let log = Arc::new(CommitLog::open(&dirs, writer_options(&root.path().join("tier"))).unwrap());
    let stop_file = root.path().join("stop-follower");
    let followers = [false, true].map(|waiting| {
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        cmd.args([
            "--exact",
            "follower_process",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(
            FOLLOW_ENV,
            dirs.iter()
                .map(|d| d.to_str().unwrap())
                .collect::<Vec<_>>()
                .join(":"),
        )
        .env(STOP_ENV, &stop_file)
        .stdout(Stdio::piped());
        if waiting {
            cmd.env(WAIT_ENV, "1");
        }
        cmd.spawn().unwrap()
    });
    let run = std::panic::AssertUnwindSafe(|| run_threads(&log, &dirs, secs, seed));
    let acked = std::panic::catch_unwind(run);
    let acked = match acked {
        Ok(acked) => acked,
        Err(panic) => {
            // The store's directories go with this panic: the followers must not outlive them.
            for mut f in followers {
                let _ = f.kill();
                let _ = f.wait();
            }
            std::panic::resume_unwind(panic)
        }
    };
    let end = log.max_offset().unwrap();
    std::fs::write(&stop_file, b"").unwrap();
    for (follower, name) in followers.into_iter().zip(["refreshing", "waiting"]) {
        let out = follower.wait_with_output().unwrap();
        let report = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "the {name} follower failed:\n{report}"
        );
        let (checked, reached): (u64, u64) = report
            .lines()
            .find_map(|l| l.split("follower checked ").nth(1))
            .and_then(|l| {
                let mut words = l.split_whitespace();
                let checked = words.next()?.parse().ok()?;
                Some((checked, words.nth(2)?.parse().ok()?))
            })
            .unwrap_or_else(|| panic!("the {name} follower reported nothing:\n{report}"));
        assert!(checked > 0, "the {name} follower checked no record");
        assert_eq!(reached, end, "the {name} follower did not reach the end");
        println!("chaos: the {name} follower checked {checked} records");
    }

    check_all(&log, &acked);
    let min = log.min_offset().unwrap();
    drop(Arc::try_unwrap(log).expect("threads are done"));
    let tier = dirs[0].parent().unwrap().join("tier");
    let log = CommitLog::open(&dirs, writer_options(&tier).clean_interval(Duration::ZERO)).unwrap();
    assert_eq!(log.min_offset().unwrap(), min);
    check_all(&log, &acked);
}

/// Follows the store in `dirs` until `stop` exists: refreshes (or, `waiting`, follows with a
/// scan that waits for each next record), checks the content of every record it has not seen,
/// never sees the log shrink. Returns how many records it checked and where it ended.
fn follow(dirs: &[PathBuf], stop: &Path, waiting: bool) -> (u64, u64) {
    let log = CommitLog::open(dirs, reader_options()).expect("read-only open");
    let (mut pos, mut checked, mut last_max, mut late) = (0u64, 0u64, 0u64, 0u32);
    let waits = Follow {
        idle_timeout: Some(Duration::from_millis(300)),
        durable: false,
    };
    loop {
        let done = stop.exists();
        let max = match waiting {
            true => log.max_offset().unwrap(),
            false => log.refresh().expect("refresh"),
        };
        assert!(
            max >= last_max,
            "the follower's log shrank from {last_max} to {max}"
        );
        last_max = max;
        pos = pos.max(log.min_offset().unwrap());
        let scan = match waiting {
            true => log.follow(Some(pos), None, waits),
            false => log.scan(Some(pos), None),
        };
        let scan = match scan {
            Ok(scan) => scan,
            Err(Error::OffsetOutOfRange { .. }) => continue, // the head moved: start there
            Err(e) => panic!("follower scan at {pos}: {e}"),
        };
        for rec in scan {
            match rec {
                Ok(rec) => {
                    assert!(
                        check_body(&rec).is_some(),
                        "follower: bad record at {}",
                        rec.offset()
                    );
                    checked += 1;
                    pos = rec.next_offset();
                }
                Err(Error::OffsetOutOfRange { .. }) => break,
                Err(e) => panic!("follower scan: {e}"),
            }
        }
        // Once told to stop: after a scan that ran to the end (a head moved by the writer's
        // cleaner may have cut one short: look again, a bounded number of times).
        if done && (pos >= log.max_offset().unwrap() || late > 50) {
            return (checked, pos);
        }
        late += u32::from(done);
    }
}

/// The follower of `chaos`, in its own process; run alone (without the variables) it follows a
/// finished store, which checks the same loop.
#[test]
fn follower_process() {
    if let (Ok(dirs), Ok(stop)) = (std::env::var(FOLLOW_ENV), std::env::var(STOP_ENV)) {
        let dirs: Vec<PathBuf> = dirs.split(':').map(PathBuf::from).collect();
        let waiting = std::env::var_os(WAIT_ENV).is_some();
        let (checked, reached) = follow(&dirs, Path::new(&stop), waiting);
        println!("follower checked {checked} records, reached {reached}");
        return;
    }
    let (root, dirs) = common::dirs(2);
    let log = CommitLog::open(&dirs, writer_options(&root.path().join("tier"))).unwrap();
    let acked = common::fill(&log, 2000, 100);
    log.truncate_before(3 * SEGMENT).unwrap();
    let stop = root.path().join("stop");
    std::fs::write(&stop, b"").unwrap();
    let live = acked
        .iter()
        .filter(|(o, _)| *o >= log.min_offset().unwrap())
        .count() as u64;
    for waiting in [false, true] {
        let (checked, reached) = follow(&dirs, &stop, waiting);
        assert_eq!((checked, reached), (live, log.max_offset().unwrap()));
    }
}
