//! The Rust rows of `benches/compare.py`: each row times rmqlog and its one baseline in the same
//! process run, alternating them, and keeps the median of several repetitions. Prints a
//! human-readable line per row on stderr and, last, one line `RMQLOG_ROWS_JSON [...]` on stdout.
//!
//! ```sh
//! cargo bench --bench rust_rows                 # full sizes (a few minutes)
//! cargo bench --bench rust_rows -- --quick      # tiny sizes (seconds), asserts nothing
//! cargo bench --bench rust_rows -- --only lookup_10k_vs_10_segments --reps 5
//! ```
//! Run without `--bench` (as `cargo test --all-targets` does) it runs the quick sizes.
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

fn rust_read_vs_commitlog(p: &Params) -> Value {
    let n = p.read_log;
    let b = body(100);
    let dir = tempdir();
    let (log, offsets) = build_log(dir.path(), BROKER_SEGMENT, n, 100);
    let cdir = tempdir();
    let mut cl = cl_open(cdir.path(), None);
    cl_fill(&mut cl, &b, n);
    let idx = random_indices(n, p.reads, 42);
    assert_eq!(cl_read_one(&cl, idx[0] as u64, 100), 100);
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
                    black_box(cl_read_one(&cl, i as u64, 100));
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

fn lookup_10k_vs_10_segments(p: &Params) -> Value {
    let seg = 64 * 1024;
    let (small, large) = p.lookup_segments;
    let d_small = tempdir();
    let d_large = tempdir();
    let (log_s, off_s) = build_segments(d_small.path(), seg, small, 100);
    let (build_large, (log_l, off_l)) = timed(|| build_segments(d_large.path(), seg, large, 100));
    eprintln!(
        "  built {large} segments of 64 KiB in {:.1}s",
        build_large.as_secs_f64()
    );
    let reads = p.lookup_reads;
    let idx_s = random_indices(off_s.len(), reads, 7);
    let idx_l = random_indices(off_l.len(), reads, 7);
    // Offsets are computed from the record index (no table of millions of offsets to miss in).
    let run = |log: &rmqlog::CommitLog, idx: &[usize]| {
        timed(|| {
            for &i in idx {
                let offset = full_segment_offset(i, seg, 100);
                black_box(log.read(offset).expect("read").len());
            }
        })
        .0
    };
    let (mut ours, mut base) = (Vec::new(), Vec::new());
    let faults = minor_faults();
    for _ in 0..p.reps {
        ours.push(run(&log_l, &idx_l));
        base.push(run(&log_s, &idx_s));
    }
    let faults_per_read = (minor_faults() - faults) as f64 / (2 * p.reps * reads) as f64;
    assert_eq!(log_l.fallback_lookups(), 0);
    drop((log_s, d_small));
    // Not a row: the memory floor. The same record reads from one file map holding as many bytes
    // (every page cached and mapped), with no lookup and no check: what data-cache and TLB misses
    // alone cost over 640 MB against 640 KB on this machine.
    let rec_len = HEADER_LEN + 100;
    let d_floor = tempdir();
    let floor_map = filled_file_map(d_floor.path(), large * seg as usize);
    let touch = |idx: &[usize]| {
        let offsets = idx.iter().map(|&i| full_segment_offset(i, seg, 100));
        timed(|| touch_records(&floor_map, offsets, rec_len)).0
    };
    let (mut floor_l, mut floor_s) = (Vec::new(), Vec::new());
    for _ in 0..p.reps {
        floor_l.push(touch(&idx_l));
        floor_s.push(touch(&idx_s));
    }
    let (floor_l, floor_s) = (median(floor_l), median(floor_s));
    eprintln!(
        "  memory floor: {:.1} ns per read over {large} segments' bytes, {:.1} ns over {small} \
         (ratio {:.2})",
        floor_l.as_secs_f64() * 1e9 / reads as f64,
        floor_s.as_secs_f64() * 1e9 / reads as f64,
        floor_l.as_secs_f64() / floor_s.as_secs_f64()
    );
    latency_row(
        "lookup_10k_vs_10_segments",
        reads,
        median(ours),
        median(base),
        json!({"ours": format!("{reads} random CommitLog::read over {large} segments of 64 KiB \
                                full of 100 B records"),
               "baseline": format!("the same over {small} segments"),
               "build_large_s": build_large.as_secs_f64(),
               "minor_faults_per_read": faults_per_read,
               "memory_floor": "the same record reads (every word of each 132-byte record) from \
                                one fully cached and mapped file of the same bytes, no lookup",
               "memory_floor_large_s": floor_l.as_secs_f64(),
               "memory_floor_small_s": floor_s.as_secs_f64(),
               "memory_floor_ratio": floor_l.as_secs_f64() / floor_s.as_secs_f64()}),
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
    for _ in 0..p.recovery_reps {
        ours.push(recovery_once(large, false));
        base.push(recovery_once(small, false));
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

type RowFn = fn(&Params) -> Value;

const ROWS: [(&str, RowFn); 6] = [
    ("rust_append_1k_vs_memcpy", rust_append_1k_vs_memcpy),
    ("rust_append_100_vs_commitlog", rust_append_100_vs_commitlog),
    ("rust_read_vs_commitlog", rust_read_vs_commitlog),
    ("sync_append_64k_vs_fdatasync", sync_append_64k_vs_fdatasync),
    ("lookup_10k_vs_10_segments", lookup_10k_vs_10_segments),
    ("recovery_1000_vs_10_segments", recovery_1000_vs_10_segments),
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
    for (name, f) in ROWS {
        if only.as_ref().is_some_and(|o| !o.iter().any(|n| n == name)) {
            continue;
        }
        let mut row = f(&p);
        row["quick"] = json!(p.quick);
        rows.push(row);
    }
    println!("RMQLOG_ROWS_JSON {}", Value::Array(rows));
}
