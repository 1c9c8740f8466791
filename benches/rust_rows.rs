//! The Rust rows of `benches/compare.py`: each row times rmqlog and its one baseline in the same
//! process run, alternating them, and keeps the median of several repetitions. Prints a
//! human-readable line per row on stderr and, last, one line `RMQLOG_ROWS_JSON [...]` on stdout.
//!
//! ```sh
//! cargo bench --bench rust_rows                 # full sizes (a few minutes)
//! cargo bench --bench rust_rows -- --quick      # tiny sizes (seconds), asserts nothing
//! cargo bench --bench rust_rows -- --only lookup_10k_vs_memory_floor --reps 5
//! cargo bench --bench rust_rows -- --only ref_scan_100 --arrow-records 1000000
//! ```
//! The references `ref_*` (the Rust side of compare.py's Arrow rows) run only when named by
//! `--only`. Run without `--bench` (as `cargo test --all-targets` does) it runs the quick sizes.
//! Data goes to `$RMQLOG_BENCH_DIR` (default: the system temp directory).

mod common;

use std::hint::black_box;
use std::time::Duration;

use common::*;
use rmqlog::{FlushMode, HEADER_LEN};
use serde_json::{json, Value};

const BROKER_SEGMENT: u64 = 1 << 30; // the broker preset's segment_size (the default is 64 MiB)

#[derive(Debug, Clone)]
struct Params {
    quick: bool,
    reps: usize,
    append_1k: usize,
    append_100: usize,
    read_log: usize,
    reads: usize,
    sync_64k: usize,
    lookup_segments: (usize, usize),
    lookup_reads: usize,
    recovery_segments: (usize, usize),
    recovery_reps: usize,
    /// Records of the Rust references of compare.py's Arrow rows (`--arrow-records N`).
    arrow_records: usize,
}

impl Params {
    fn new(quick: bool) -> Params {
        if quick {
            Params {
                quick,
                reps: 1,
                append_1k: 2_000,
                append_100: 10_000,
                read_log: 10_000,
                reads: 2_000,
                sync_64k: 5,
                lookup_segments: (10, 100),
                lookup_reads: 5_000,
                recovery_segments: (2, 10),
                recovery_reps: 1,
                arrow_records: 20_000,
            }
        } else {
            Params {
                quick,
                reps: 5,
                append_1k: 200_000,
                append_100: 1_000_000,
                read_log: 1_000_000,
                reads: 200_000,
                sync_64k: 300,
                lookup_segments: (10, 10_000),
                lookup_reads: 100_000,
                recovery_segments: (10, 1_000),
                recovery_reps: 3,
                arrow_records: 1_000_000,
            }
        }
    }
}

fn per_s(n: usize, d: Duration) -> f64 {
    n as f64 / d.as_secs_f64()
}

/// A throughput row: ratio = ours / baseline (higher is better).
fn throughput_row(name: &str, n: usize, ours: Duration, base: Duration, extra: Value) -> Value {
    let (o, b) = (per_s(n, ours), per_s(n, base));
    eprintln!(
        "{name:34} ours {o:>14.0}/s  baseline {b:>14.0}/s  ratio {:.3}",
        o / b
    );
    json!({"name": name, "ours_per_s": o, "baseline_per_s": b, "ratio": o / b,
           "ours_median_s": ours.as_secs_f64(), "baseline_median_s": base.as_secs_f64(),
           "items": n, "extra": extra})
}

/// A latency row: ratio = ours time / baseline time (lower is better).
fn latency_row(name: &str, n: usize, ours: Duration, base: Duration, extra: Value) -> Value {
    let (o, b) = (per_s(n, ours), per_s(n, base));
    let ratio = ours.as_secs_f64() / base.as_secs_f64();
    eprintln!(
        "{name:34} ours {:>12.6}s  baseline {:>12.6}s  ratio {ratio:.3} (of times)",
        ours.as_secs_f64(),
        base.as_secs_f64()
    );
    json!({"name": name, "ours_per_s": o, "baseline_per_s": b, "ratio": ratio,
           "ours_median_s": ours.as_secs_f64(), "baseline_median_s": base.as_secs_f64(),
           "items": n, "extra": extra})
}

/// Appends `n` records one by one into a fresh log; times the appends only (open and close are
/// outside the clock).
fn time_appends(segment: u64, flush: FlushMode, body: &[u8], n: usize) -> Duration {
    let dir = tempdir();
    let log = open_log(dir.path(), segment, flush);
    let (d, ()) = timed(|| {
        for _ in 0..n {
            black_box(log.append(body).expect("append"));
        }
    });
    log.close().expect("close");
    d
}

fn rust_append_1k_vs_memcpy(p: &Params) -> Value {
    let n = p.append_1k;
    let b = body(1024);
    let mut header = [0u8; HEADER_LEN];
    let mut rec = vec![0u8; HEADER_LEN + b.len()];
    encode_record(&mut rec, &b, 0, 0);
    header.copy_from_slice(&rec[..HEADER_LEN]);
    let mut map = prefaulted(n * rec.len());
    let (mut ours, mut base) = (Vec::new(), Vec::new());
    for _ in 0..p.reps {
        ours.push(time_appends(BROKER_SEGMENT, FlushMode::None, &b, n));
        base.push(timed(|| memcpy_records(&mut map, &header, &b, n)).0);
    }
    throughput_row(
        "rust_append_1k_vs_memcpy",
        n,
        median(ours),
        median(base),
        json!({"ours": "CommitLog::append, 1 KiB bodies, segment_size 1 GiB (broker preset), \
                        FlushMode::None, fresh log per repetition",
               "baseline": "memcpy of the same 32-byte header + 1 KiB body per record into a \
                            pre-faulted anonymous map of the same total size"}),
    )
}

fn rust_append_100_vs_commitlog(p: &Params) -> Value {
    let n = p.append_100;
    let b = body(100);
    let (mut ours, mut base) = (Vec::new(), Vec::new());
    for _ in 0..p.reps {
        ours.push(time_appends(BROKER_SEGMENT, FlushMode::None, &b, n));
        let dir = tempdir();
        let mut cl = cl_open(dir.path(), None);
        base.push(timed(|| cl_fill(&mut cl, &b, n)).0);
    }
    throughput_row(
        "rust_append_100_vs_commitlog",
        n,
        median(ours),
        median(base),
        json!({"ours": "CommitLog::append, 100 B bodies, segment_size 1 GiB, FlushMode::None",
               "baseline": "commitlog 0.2 CommitLog::append_msg, default LogOptions (1 GB \
                            segments), same bodies"}),
    )
}

/// Appends `n` records in batches of `batch` into a fresh log; times the appends only.
fn time_batches(segment: u64, flush: FlushMode, body: &[u8], n: usize, batch: usize) -> Duration {
    let dir = tempdir();
    let log = open_log(dir.path(), segment, flush);
    let slices: Vec<&[u8]> = vec![body; batch];
    let (d, ()) = timed(|| {
        let mut done = 0;
        while done < n {
            let k = (n - done).min(batch);
            black_box(log.append_batch(&slices[..k]).expect("append_batch"));
            done += k;
        }
    });
    assert_eq!(
        log.max_offset().expect("max_offset"),
        (n * (HEADER_LEN + body.len())) as u64
    );
    log.close().expect("close");
    d
}

fn rust_append_batch_100_vs_commitlog(p: &Params) -> Value {
    let n = p.append_100;
    let batch = 1_000;
    let b = body(100);
    let (mut ours, mut base) = (Vec::new(), Vec::new());
    for _ in 0..p.reps {
        ours.push(time_batches(BROKER_SEGMENT, FlushMode::None, &b, n, batch));
        let dir = tempdir();
        let mut cl = cl_open(dir.path(), None);
        base.push(timed(|| cl_fill_batches(&mut cl, &b, n, batch)).0);
        assert_eq!(cl.next_offset(), n as u64);
    }
    throughput_row(
        "rust_append_batch_100_vs_commitlog",
        n,
        median(ours),
        median(base),
        json!({"ours": "CommitLog::append_batch of 1,000 x 100 B, segment_size 1 GiB, \
                        FlushMode::None",
               "baseline": "commitlog 0.2 CommitLog::append of a 1,000-message MessageBuf \
                            (pushed anew per batch, buffer reused), default LogOptions"}),
    )
}

/// An rmqlog log and a `commitlog` log of the same `n` records of 100 B, and their directories.
struct TwoLogs {
    log: rmqlog::CommitLog,
    offsets: Vec<u64>,
    cl: commitlog::CommitLog,
    _dirs: (tempfile::TempDir, tempfile::TempDir),
}

fn two_logs(n: usize) -> TwoLogs {
    let dir = tempdir();
    let (log, offsets) = build_log(dir.path(), BROKER_SEGMENT, n, 100);
    let cdir = tempdir();
    let mut cl = cl_open(cdir.path(), None);
    cl_fill(&mut cl, &body(100), n);
    TwoLogs {
        log,
        offsets,
        cl,
        _dirs: (dir, cdir),
    }
}

fn rust_scan_vs_commitlog(p: &Params) -> Value {
    let n = p.read_log;
    let logs = two_logs(n); // keeps the directories to the end
    let (log, cl) = (&logs.log, &logs.cl);
    let (mut ours, mut base) = (Vec::new(), Vec::new());
    for _ in 0..p.reps {
        ours.push(timed(|| assert_eq!(scan_sum(log).0, n * 100)).0);
        base.push(timed(|| assert_eq!(cl_scan_64k(cl, n), n * 100)).0);
    }
    throughput_row(
        "rust_scan_vs_commitlog",
        n,
        median(ours),
        median(base),
        json!({"ours": "CommitLog::scan over 1M x 100 B records (header and body CRC checked), \
                        summing body lengths",
               "baseline": "commitlog 0.2 CommitLog::read with a 64 KiB ReadLimit from offset \
                            0 on (pread + CRC32C per message), summing payload lengths"}),
    )
}

/// Sum of the body lengths, largest offset and count of a full scan.
fn scan_sum(log: &rmqlog::CommitLog) -> (usize, u64, usize) {
    let (mut total, mut last, mut count) = (0usize, 0u64, 0usize);
    for r in log.scan(None, None).expect("scan") {
        let r = r.expect("record");
        total += r.body().len();
        last = last.max(r.offset());
        count += 1;
    }
    (total, last, count)
}

fn rust_read_vs_commitlog(p: &Params) -> Value {
    let n = p.read_log;
    let logs = two_logs(n); // keeps the directories to the end
    let (log, offsets, cl) = (&logs.log, &logs.offsets, &logs.cl);
    let idx = random_indices(n, p.reads, 42);
    assert_eq!(cl_read_one(cl, idx[0] as u64, 100), 100);
    let (mut ours, mut base) = (Vec::new(), Vec::new());
    for _ in 0..p.reps {
        ours.push(
            timed(|| {
                for &i in &idx {
                    black_box(log.read(offsets[i]).expect("read").len());
                }
            })
            .0,
        );
        base.push(
            timed(|| {
                for &i in &idx {
                    black_box(cl_read_one(cl, i as u64, 100));
                }
            })
            .0,
        );
    }
    throughput_row(
        "rust_read_vs_commitlog",
        idx.len(),
        median(ours),
        median(base),
        json!({"ours": "CommitLog::read (header + body CRC checked), 100 B records, \
                        random offsets over a 1M-record log",
               "baseline": "commitlog 0.2 CommitLog::read(offset, ReadLimit = one message) \
                            (pread + CRC32C), same record indices"}),
    )
}

fn sync_append_64k_vs_fdatasync(p: &Params) -> Value {
    let n = p.sync_64k;
    let b = body(64 * 1024);
    let (mut ours, mut base) = (Vec::new(), Vec::new());
    for _ in 0..p.reps {
        ours.push(time_appends(BROKER_SEGMENT, FlushMode::Sync, &b, n));
        let dir = tempdir();
        let f = zero_filled_file(dir.path(), "ref", (n * b.len()) as u64);
        base.push(timed(|| pwrite_records(&f, &b, n, true)).0);
    }
    throughput_row(
        "sync_append_64k_vs_fdatasync",
        n,
        median(ours),
        median(base),
        json!({"ours": "CommitLog::append of single 64 KiB records, FlushMode::Sync (msync \
                        per append), segment_size 1 GiB",
               "baseline": "pwrite of 64 KiB + fdatasync, into a file zero-filled and synced \
                            before the clock (as a WAL writer prepares it)"}),
    )
}

fn lookup_10k_vs_memory_floor(p: &Params) -> Value {
    let seg = 64 * 1024;
    let (small, large) = p.lookup_segments;
    let d_large = tempdir();
    let (build_large, (log_l, off_l)) = timed(|| build_segments(d_large.path(), seg, large, 100));
    eprintln!(
        "  built {large} segments of 64 KiB in {:.1}s",
        build_large.as_secs_f64()
    );
    let reads = p.lookup_reads;
    let idx_l = random_indices(off_l.len(), reads, 7);
    drop(off_l);
    // The floor: the same record reads, each checked as a read checks it (header and body CRC),
    // from one map of the same bytes (the segment files concatenated), with no lookup.
    let d_floor = tempdir();
    let floor_map = concatenated_map(&log_l, d_floor.path());
    // Offsets are computed from the record index (no table of millions of offsets to miss in).
    let offsets = |idx: &[usize]| {
        idx.iter()
            .map(|&i| full_segment_offset(i, seg, 100))
            .collect::<Vec<_>>()
    };
    let sel = offsets(&idx_l);
    let ours_once = || {
        timed(|| {
            for &o in &sel {
                black_box(log_l.read(o).expect("read").len());
            }
        })
        .0
    };
    let floor_once = || timed(|| check_records(&floor_map, sel.iter().copied())).0;
    ours_once(); // one untimed pass each: both sides start with their pages mapped
    floor_once();
    let (mut ours, mut base) = (Vec::new(), Vec::new());
    let faults = minor_faults();
    for r in 0..p.reps {
        if r % 2 == 0 {
            ours.push(ours_once());
            base.push(floor_once());
        } else {
            base.push(floor_once());
            ours.push(ours_once());
        }
    }
    let faults_per_read = (minor_faults() - faults) as f64 / (2 * p.reps * reads) as f64;
    assert_eq!(log_l.fallback_lookups(), 0);
    drop((log_l, d_large));
    // Not a row: the same reads over `small` segments (the old baseline), for the record.
    let d_small = tempdir();
    let (log_s, off_s) = build_segments(d_small.path(), seg, small, 100);
    let sel_s = offsets(&random_indices(off_s.len(), reads, 7));
    let small_t = median(
        (0..p.reps)
            .map(|_| {
                timed(|| {
                    for &o in &sel_s {
                        black_box(log_s.read(o).expect("read").len());
                    }
                })
                .0
            })
            .collect(),
    );
    latency_row(
        "lookup_10k_vs_memory_floor",
        reads,
        median(ours),
        median(base),
        json!({"ours": format!("{reads} random CommitLog::read over {large} segments of 64 KiB \
                                full of 100 B records"),
               "baseline": format!("the same record reads, each checked as a read checks it \
                                    (header and body CRC32), from one fully cached map of the \
                                    same bytes (the {large} segment files concatenated, {} MiB), \
                                    no lookup", (large * seg as usize) >> 20),
               "build_large_s": build_large.as_secs_f64(),
               "minor_faults_per_read": faults_per_read,
               "small_segments": small,
               "small_segments_s": small_t.as_secs_f64()}),
    )
}

/// Crashes a writer with `segments` full 1 MiB segments, then times the reopen.
fn recovery_once(segments: usize, sync_first: bool) -> Duration {
    let seg = 1 << 20;
    let dir = tempdir();
    let records = segments * records_per_segment(seg, 100);
    crash_writer(Crashed::Rmqlog, dir.path(), seg, records, 100);
    if sync_first {
        // SAFETY: sync(2) takes no argument and cannot fail.
        unsafe { libc::sync() };
    }
    let (d, log) = timed(|| {
        rmqlog::CommitLog::open(&[dir.path()], options(seg, FlushMode::None)).expect("reopen")
    });
    let max = log.max_offset().expect("max_offset");
    assert_eq!(
        max,
        (segments as u64 - 1) * seg + (records_per_segment(seg, 100) * (HEADER_LEN + 100)) as u64,
        "recovery kept every record"
    );
    log.close().expect("close");
    d
}

fn recovery_1000_vs_10_segments(p: &Params) -> Value {
    let (small, large) = p.recovery_segments;
    let (mut ours, mut base) = (Vec::new(), Vec::new());
    for r in 0..p.recovery_reps {
        // Alternating which size goes first: each reopen follows the other size's writer.
        if r % 2 == 0 {
            ours.push(recovery_once(large, false));
            base.push(recovery_once(small, false));
        } else {
            base.push(recovery_once(small, false));
            ours.push(recovery_once(large, false));
        }
    }
    // Not a row: the same reopen after `sync` (no dirty page left to write back), to show how
    // much of the time is the writeback of what the killed writer left in the page cache.
    let synced_large = recovery_once(large, true);
    let synced_small = recovery_once(small, true);
    latency_row(
        "recovery_1000_vs_10_segments",
        1,
        median(ours),
        median(base),
        json!({"ours": format!("CommitLog::open after a FlushMode::None writer of {large} full \
                                1 MiB segments (100 B records) was SIGKILLed after its last append"),
               "baseline": format!("the same with {small} segments"),
               "after_sync_large_s": synced_large.as_secs_f64(),
               "after_sync_small_s": synced_small.as_secs_f64()}),
    )
}

/// A reference of compare.py's Arrow rows: the Rust side of the same work, one number.
fn reference(name: &str, n: usize, times: Vec<Duration>, what: &str) -> Value {
    let t = median(times);
    eprintln!("{name:34} {:>14.0}/s", per_s(n, t));
    json!({"name": name, "median_s": t.as_secs_f64(), "per_s": per_s(n, t), "items": n,
           "what": what})
}

/// `py_append_arrow_100`'s baseline: one `append_batch` of all the records into a fresh log
/// with the Python defaults (FlushMode::Async) and the rows' segment size.
fn ref_append_batch_100(p: &Params) -> Value {
    let n = p.arrow_records;
    let b = body(100);
    let times = (0..p.reps)
        .map(|_| time_batches(BROKER_SEGMENT, FlushMode::Async, &b, n, n))
        .collect();
    reference(
        "ref_append_batch_100",
        n,
        times,
        "CommitLog::append_batch of all the 100 B records in one call, FlushMode::Async",
    )
}

/// `py_scan_arrow_100`'s baseline: a scan summing body lengths, max offset and count.
fn ref_scan_100(p: &Params) -> Value {
    let n = p.arrow_records;
    let dir = tempdir();
    let (log, _) = build_log(dir.path(), BROKER_SEGMENT, n, 100);
    let times = (0..p.reps)
        .map(|_| {
            timed(|| {
                let (total, last, count) = scan_sum(&log);
                assert_eq!((total, count), (n * 100, n));
                assert_eq!(last, ((n - 1) * (HEADER_LEN + 100)) as u64);
            })
            .0
        })
        .collect();
    reference(
        "ref_scan_100",
        n,
        times,
        "CommitLog::scan of all the records: sum of body lengths, max offset, count",
    )
}

type RowFn = fn(&Params) -> Value;

/// The rows, then the references (run only when named by `--only`).
/// Shared writers: an appender's p99.9 latency while another open of the store reads past its view
/// after each of a third open's rolls, at 2,000 segments (each read lists the store), against the
/// same run with the reads left out (the reader sleeps instead). Readers take no writer lock, so
/// the ratio stays near 1; before they did, it was about 3 to 8 (issue 33).
fn shared_append_p999_readers_after_rolls(p: &Params) -> Value {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let (segments, rolls) = if p.quick { (30, 4) } else { (2_000, 20) };
    let segment = 64 * 1024;
    let dir = tempdir();
    let opts = options(segment, FlushMode::None)
        .exclusive(false)
        .flush_interval(Duration::from_secs(3600))
        .clean_interval(Duration::ZERO);
    let open = || Arc::new(rmqlog::CommitLog::open(&[dir.path()], opts.clone()).expect("open"));
    let (appender, reader, roller) = (open(), open(), open());
    let fill = body(8 * 1024);
    while roller.segments().expect("segments").len() < segments {
        roller.append(&fill).expect("append");
    }
    let small = body(100);
    let run = |reads: bool| -> (Duration, usize) {
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (log, stop, small) = (Arc::clone(&appender), Arc::clone(&stop), small.clone());
            std::thread::spawn(move || {
                let mut times = Vec::with_capacity(1 << 20);
                while !stop.load(Ordering::Relaxed) {
                    let t = std::time::Instant::now();
                    black_box(log.append(&small).expect("append"));
                    times.push(t.elapsed());
                }
                times
            })
        };
        for _ in 0..rolls {
            let before = roller.segments().expect("segments").len();
            while roller.segments().expect("segments").len() == before {
                roller.append(&fill).expect("append");
            }
            if reads {
                // Past its view: the reader lists the store (2,000 segments) to take the roll.
                let end = reader.max_offset().expect("max_offset");
                black_box(
                    reader
                        .read(reader.min_offset().expect("min"))
                        .expect("read"),
                );
                black_box(end);
            } else {
                std::thread::sleep(Duration::from_millis(10));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        stop.store(true, Ordering::Relaxed);
        let mut times = thread.join().expect("appender");
        times.sort_unstable();
        let n = times.len();
        (times[(n * 999 / 1000).min(n - 1)], n)
    };
    let (mut ours, mut base, mut n) = (Vec::new(), Vec::new(), 0);
    for _ in 0..p.reps {
        let (t, k) = run(true);
        ours.push(t);
        n += k;
        base.push(run(false).0);
    }
    latency_row(
        "shared_append_p999_readers_after_rolls",
        n,
        median(ours),
        median(base),
        json!({"segments": segments, "rolls": rolls, "note": "p99.9 of 100 B appends: readers after each roll / none"}),
    )
}

const ROWS: [(&str, RowFn); 9] = [
    ("rust_append_1k_vs_memcpy", rust_append_1k_vs_memcpy),
    ("rust_append_100_vs_commitlog", rust_append_100_vs_commitlog),
    (
        "rust_append_batch_100_vs_commitlog",
        rust_append_batch_100_vs_commitlog,
    ),
    ("rust_read_vs_commitlog", rust_read_vs_commitlog),
    ("rust_scan_vs_commitlog", rust_scan_vs_commitlog),
    ("sync_append_64k_vs_fdatasync", sync_append_64k_vs_fdatasync),
    ("lookup_10k_vs_memory_floor", lookup_10k_vs_memory_floor),
    ("recovery_1000_vs_10_segments", recovery_1000_vs_10_segments),
    (
        "shared_append_p999_readers_after_rolls",
        shared_append_p999_readers_after_rolls,
    ),
];
const REFERENCES: [(&str, RowFn); 2] = [
    ("ref_append_batch_100", ref_append_batch_100),
    ("ref_scan_100", ref_scan_100),
];

fn main() {
    maybe_run_child();
    let args: Vec<String> = std::env::args().collect();
    let quick = args.iter().any(|a| a == "--quick") || !bench_mode();
    let mut p = Params::new(quick);
    let mut only: Option<Vec<String>> = None;
    let mut it = args.iter().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--reps" => {
                p.reps = it.next().and_then(|v| v.parse().ok()).expect("--reps N");
                p.recovery_reps = p.reps;
            }
            "--arrow-records" => {
                p.arrow_records = it
                    .next()
                    .and_then(|v| v.parse().ok())
                    .expect("--arrow-records N");
            }
            "--only" => {
                only = Some(
                    it.next()
                        .expect("--only NAME[,NAME]")
                        .split(',')
                        .map(str::to_owned)
                        .collect(),
                )
            }
            _ => {}
        }
    }
    eprintln!(
        "rust_rows: {} sizes, {} repetitions, data in {}",
        if p.quick { "quick" } else { "full" },
        p.reps,
        base_dir().display()
    );
    let mut rows = Vec::new();
    let named = |name: &str| only.as_ref().is_some_and(|o| o.iter().any(|n| n == name));
    let refs = REFERENCES.into_iter().filter(|(name, _)| named(name));
    for (name, f) in ROWS.into_iter().chain(refs) {
        if only.is_some() && !named(name) {
            continue;
        }
        let mut row = f(&p);
        row["quick"] = json!(p.quick);
        rows.push(row);
    }
    println!("RMQLOG_ROWS_JSON {}", Value::Array(rows));
}
