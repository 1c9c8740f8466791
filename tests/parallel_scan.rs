#![allow(clippy::unwrap_used)] // tests: a failed unwrap is the failure report
//! `scan_batches` on several worker threads (`BatchReader::parallel`): the plain reader's batches
//! in its order, its errors after the same batches, memory bounded, and no worker left running.
//! Its own test binary: the tests count this process's `rmqlog-scan-*` threads, one at a time.

mod common;

use std::sync::{Mutex, MutexGuard};

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::RecordBatch;
use common::{body, dirs, quiet};
use rmqlog::arrow::{BatchOptions, BodyLayout, Column};
use rmqlog::{CommitLog, Error, HEADER_LEN};

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
}

/// The threads of this process named `rmqlog-scan-*` once that number is `want` (a joined
/// thread's task may linger in /proc for a moment; a thread names itself once it runs), or after
/// 5 s.
fn scan_threads_are(want: usize) -> usize {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let n = scan_threads();
        if n == want || std::time::Instant::now() > deadline {
            return n;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// The threads of this process named `rmqlog-scan-*`.
fn scan_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|name| name.starts_with("rmqlog-scan"))
        .count()
}

/// `n` records of varied sizes over 64 KiB segments; their offsets.
fn log_of(
    n: u64,
) -> (
    tempfile::TempDir,
    Vec<std::path::PathBuf>,
    CommitLog,
    Vec<u64>,
) {
    let (root, d) = dirs(2);
    let log = CommitLog::open(&d, quiet().segment_size(64 << 10)).unwrap();
    let offsets = (0..n)
        .map(|i| {
            log.append(&body(i, [8, 40, 100, 900][(i % 4) as usize]))
                .unwrap()
        })
        .collect();
    (root, d, log, offsets)
}

fn opts(max_records: usize, max_bytes: usize) -> BatchOptions {
    BatchOptions {
        columns: vec![Column::Offset, Column::Body],
        body: BodyLayout::Binary,
        max_records,
        max_bytes,
    }
}

fn offsets_of(b: &RecordBatch) -> Vec<u64> {
    let col = b.column(0).as_primitive::<Int64Type>();
    col.values().iter().map(|&v| v as u64).collect()
}

#[test]
fn many_segments_many_workers_same_batches_as_one_reader() {
    let _one = serial();
    let (_root, _d, log, offsets) = log_of(3000);
    assert!(log.segments().unwrap().len() > 10);
    for (max_records, max_bytes) in [(64, 1 << 20), (500, 20_000), (1 << 16, 64 << 20)] {
        let o = opts(max_records, max_bytes);
        let plain: Vec<RecordBatch> = log
            .scan_batches(None, None, o.clone())
            .unwrap()
            .map(|b| b.unwrap())
            .collect();
        let all: Vec<u64> = plain.iter().flat_map(offsets_of).collect();
        assert_eq!(all, offsets);
        for threads in [2, 3, 8] {
            let got: Vec<RecordBatch> = log
                .scan_batches(None, None, o.clone())
                .unwrap()
                .parallel(threads)
                .map(|b| b.unwrap())
                .collect();
            assert_eq!(got, plain, "threads {threads}, max_records {max_records}");
        }
    }
    assert_eq!(scan_threads_are(0), 0, "a worker outlived its reader");
}

/// Damage the header walk sees (a length) and damage only the workers' CRC check sees (a body
/// byte): both readers give the batches before the damaged record, then the same error, there.
#[test]
fn damage_ends_every_reader_after_the_same_batches_with_the_same_error() {
    let _one = serial();
    let (_root, d, log, offsets) = log_of(2000);
    let victim = offsets[1234];
    let (path, pos) = common::segment_of(&log, victim);
    log.close().unwrap();
    drop(log);
    for (field, at) in [("length", 0), ("body", HEADER_LEN + 3)] {
        let original = std::fs::read(&path).unwrap();
        let mut bytes = original.clone();
        bytes[pos as usize + at] ^= 0x40;
        std::fs::write(&path, &bytes).unwrap();
        let log = CommitLog::open(&d, quiet().segment_size(64 << 10).read_only(true)).unwrap();
        for threads in [0, 1, 2, 3] {
            let mut reader = log.scan_batches(None, None, opts(100, 1 << 20)).unwrap();
            let mut parallel = (threads > 0).then(|| {
                log.scan_batches(None, None, opts(100, 1 << 20))
                    .unwrap()
                    .parallel(threads)
            });
            let mut seen = Vec::new();
            let err = loop {
                let next = match &mut parallel {
                    Some(p) => p.next_batch(),
                    None => reader.next_batch(),
                };
                match next {
                    Ok(Some(b)) => seen.extend(offsets_of(&b)),
                    Ok(None) => panic!("{field}, threads {threads}: the damage was not reported"),
                    Err(e) => break e,
                }
            };
            assert_eq!(seen, offsets[..1234], "{field}, threads {threads}");
            assert!(matches!(err, Error::Corruption { .. }), "{err:?}");
            assert!(err.to_string().contains(&victim.to_string()), "{err}");
            let (next, again) = match &mut parallel {
                Some(p) => (p.next_offset(), p.next_batch().unwrap()),
                None => (reader.next_offset(), reader.next_batch().unwrap()),
            };
            assert_eq!(next, victim, "{field}, threads {threads}: the position");
            assert!(
                again.is_none(),
                "{field}, threads {threads}: the reader went on"
            );
        }
        drop(log);
        std::fs::write(&path, &original).unwrap();
    }
    assert_eq!(scan_threads_are(0), 0, "a worker outlived its reader");
}

#[test]
fn a_reader_dropped_mid_scan_stops_and_joins_its_workers() {
    let _one = serial();
    let (_root, _d, log, _) = log_of(1000);
    for threads in [1, 2, 4] {
        for _ in 0..20 {
            let mut ahead = log
                .scan_batches(None, None, opts(3, 1 << 20))
                .unwrap()
                .parallel(threads);
            assert_eq!(ahead.next_batch().unwrap().unwrap().num_rows(), 3);
            assert_eq!(scan_threads_are(threads), threads, "the workers run");
            drop(ahead); // joins the workers, blocked handing over their next batches
            assert_eq!(scan_threads_are(0), 0, "a worker was left running");
        }
    }
    // Never started: no thread to stop.
    drop(
        log.scan_batches(None, None, opts(3, 1))
            .unwrap()
            .parallel(2),
    );
    assert_eq!(scan_threads_are(0), 0);
}

/// A consumer that takes nothing: the workers stop `threads + 1` cuts ahead, each holding one
/// built batch, whatever the range's length.
#[test]
fn workers_stay_a_bounded_number_of_batches_ahead() {
    let _one = serial();
    let (_root, _d, log, offsets) = log_of(3000);
    let mut ahead = log
        .scan_batches(None, None, opts(10, 1 << 20))
        .unwrap()
        .parallel(2);
    assert_eq!(ahead.next_batch().unwrap().unwrap().num_rows(), 10);
    std::thread::sleep(std::time::Duration::from_millis(200));
    let held = ahead.built_ahead();
    assert!(held <= 3, "{held} batches built ahead with 2 workers");
    let rest: Vec<u64> = ahead.flat_map(|b| offsets_of(&b.unwrap())).collect();
    assert_eq!(rest, offsets[10..]);
}

/// A following reader waits for records: it builds on the caller's thread, so that a drop never
/// waits for a worker that waits for a record.
#[test]
fn a_following_reader_builds_on_the_callers_thread() {
    let _one = serial();
    let (_root, _d, log, offsets) = log_of(100);
    let follow = rmqlog::Follow {
        idle_timeout: Some(std::time::Duration::from_millis(50)),
        durable: false,
    };
    let mut reader = log
        .follow_batches(None, None, follow, opts(1000, 1 << 20))
        .unwrap()
        .parallel(4);
    let first = reader.next_batch().unwrap().unwrap();
    assert_eq!(offsets_of(&first), offsets);
    assert_eq!(scan_threads_are(0), 0);
    let late = log.append(b"late").unwrap();
    let next = reader.next_batch().unwrap().unwrap();
    assert_eq!(offsets_of(&next), [late]);
    assert!(
        reader.next_batch().unwrap().is_none(),
        "idle for 50 ms: the end"
    );
    drop(reader);
}

/// `n` records over 64 KiB segments, every `every`-th carrying the header `t: hit` (the others
/// `t: miss`, or a key alone, or nothing); their offsets, and those of the hits.
fn tagged_log(
    n: u64,
    every: u64,
) -> (
    tempfile::TempDir,
    Vec<std::path::PathBuf>,
    CommitLog,
    Vec<u64>,
    Vec<u64>,
) {
    let (root, d) = dirs(2);
    let log = CommitLog::open(&d, quiet().segment_size(64 << 10)).unwrap();
    let (mut all, mut hits) = (Vec::new(), Vec::new());
    for i in 0..n {
        let b = body(i, [8, 40, 100, 900][(i % 4) as usize]);
        let key = format!("k{}", i % 7);
        let m = rmqlog::Message::new(&b);
        let o = match (i % every == 0, i % 3) {
            (true, _) => log.append_message(&m.headers(&[("t", b"hit")])).unwrap(),
            (false, 0) => log.append_message(&m.headers(&[("t", b"miss")])).unwrap(),
            (false, 1) => log.append_message(&m.key(key.as_bytes())).unwrap(),
            (false, _) => log.append(&b).unwrap(),
        };
        all.push(o);
        if i % every == 0 {
            hits.push(o);
        }
    }
    (root, d, log, all, hits)
}

/// Filtered: the workers build the batches the plain reader builds (the planner's walk skips
/// the records the filter refuses as the reader does), and end at the end of the range, a last
/// stretch of refused records included.
#[test]
fn filtered_many_workers_same_batches_as_one_reader() {
    let _one = serial();
    let (_root, _d, log, all, hits) = tagged_log(3000, 10);
    let hit = rmqlog::Filter::new().header("t", b"hit");
    let nothing = rmqlog::Filter::new().header("t", b"none");
    let keyed_hit = rmqlog::Filter::new().header("t", b"hit").key_prefix(b""); // hits have no key
    for (filter, want) in [
        (&hit, hits.clone()),
        (&nothing, Vec::new()),
        (&keyed_hit, Vec::new()),
    ] {
        for (max_records, max_bytes) in [(7, 1 << 20), (500, 2_000), (1 << 16, 64 << 20)] {
            let o = opts(max_records, max_bytes);
            let plain_reader = log
                .scan_batches(None, None, o.clone())
                .unwrap()
                .filtered(filter.clone());
            let mut plain_reader = plain_reader;
            let mut plain = Vec::new();
            while let Some(b) = plain_reader.next_batch().unwrap() {
                plain.push(b);
            }
            assert_eq!(plain_reader.next_offset(), log.max_offset().unwrap());
            let got: Vec<u64> = plain.iter().flat_map(offsets_of).collect();
            assert_eq!(got, want);
            for threads in [1, 2, 3] {
                let mut reader = log
                    .scan_batches(None, None, o.clone())
                    .unwrap()
                    .filtered(filter.clone())
                    .parallel(threads);
                let mut batches = Vec::new();
                while let Some(b) = reader.next_batch().unwrap() {
                    batches.push(b);
                }
                assert_eq!(
                    batches, plain,
                    "threads {threads}, max_records {max_records}"
                );
                assert_eq!(reader.next_offset(), log.max_offset().unwrap());
            }
        }
    }
    // A range that starts and ends inside: the records of the range only.
    let (from, to) = (all[100], all[2500]);
    let want: Vec<u64> = hits
        .iter()
        .copied()
        .filter(|&o| o >= from && o < to)
        .collect();
    let got: Vec<u64> = log
        .scan_batches(Some(from), Some(to), opts(13, 1 << 20))
        .unwrap()
        .filtered(hit.clone())
        .parallel(3)
        .flat_map(|b| offsets_of(&b.unwrap()))
        .collect();
    assert_eq!(got, want);
    assert_eq!(scan_threads_are(0), 0, "a worker outlived its reader");
}

/// A damaged record the filter refuses is still checked: every filtered reader, one worker or
/// several, ends with the CRC error there, as the plain reader does.
#[test]
fn a_damaged_record_the_filter_refuses_still_ends_the_scan() {
    let _one = serial();
    let (_root, d, log, all, hits) = tagged_log(2000, 10);
    let victim = all[1233]; // not a hit: 1233 % 10 != 0
    assert!(!hits.contains(&victim));
    let (path, pos) = common::segment_of(&log, victim);
    log.close().unwrap();
    drop(log);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[pos as usize + HEADER_LEN + 20] ^= 0x40; // the properties or the body: under the CRC
    std::fs::write(&path, &bytes).unwrap();
    let log = CommitLog::open(&d, quiet().segment_size(64 << 10).read_only(true)).unwrap();
    let nothing = rmqlog::Filter::new().header("t", b"none");
    for filter in [rmqlog::Filter::new().header("t", b"hit"), nothing] {
        for threads in [0, 1, 2, 3] {
            let reader = log
                .scan_batches(None, None, opts(50, 1 << 20))
                .unwrap()
                .filtered(filter.clone());
            let mut parallel = (threads > 0).then(|| {
                log.scan_batches(None, None, opts(50, 1 << 20))
                    .unwrap()
                    .filtered(filter.clone())
                    .parallel(threads)
            });
            let mut reader = reader;
            let mut seen = Vec::new();
            let err = loop {
                let next = match &mut parallel {
                    Some(p) => p.next_batch(),
                    None => reader.next_batch(),
                };
                match next {
                    Ok(Some(b)) => seen.extend(offsets_of(&b)),
                    Ok(None) => panic!("threads {threads}: the damage was not reported"),
                    Err(e) => break e,
                }
            };
            assert!(matches!(err, Error::Corruption { .. }), "{err:?}");
            assert!(err.to_string().contains(&victim.to_string()), "{err}");
            let accepted = |o: u64| {
                let rec = log.read(o).unwrap();
                filter.matches(rec.props_block().unwrap_or_default())
            };
            assert!(seen.iter().all(|&o| o < victim && accepted(o)), "{seen:?}");
        }
        // The record scan too.
        let err = log
            .scan(None, None)
            .unwrap()
            .filtered(filter.clone())
            .find_map(|r| r.err())
            .expect("the damage was reported");
        assert!(matches!(err, Error::Corruption { .. }), "{err:?}");
    }
    assert_eq!(scan_threads_are(0), 0, "a worker outlived its reader");
}
