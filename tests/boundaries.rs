#![allow(clippy::unwrap_used)] // tests: a failed unwrap is the failure report
//! The record starts that walks learn (src/storage/boundaries.rs), shared by every log this
//! process opens on a segment file: `record_start_at_or_after` and `offset_for_timestamp` answer
//! as a scan does whether that index is cold, warm or learnt out of order, and a file written
//! since gets a fresh one.

mod common;

use std::path::Path;

use common::{body, quiet, segment_of, write_at, Rng};
use rmqlog::{CommitLog, Error};

const SEGMENT: u64 = 1 << 20; // a stride of 64 KiB: about 16 known starts a segment

/// Records of 50 to 3,000 bytes over 3.5 segments, their timestamps spread (a 1 ms pause every
/// 300 records); returns each record's (offset, timestamp).
fn store(dir: &Path) -> Vec<(u64, u64)> {
    let log = CommitLog::open(&[dir], quiet().segment_size(SEGMENT)).unwrap();
    let mut rng = Rng::new(7);
    let mut i = 0;
    while log.max_offset().unwrap() < 3 * SEGMENT + SEGMENT / 2 {
        let bodies: Vec<Vec<u8>> = (0..300)
            .map(|k| body(i + k, rng.range(50, 3000) as usize))
            .collect();
        log.append_batch(&bodies).unwrap();
        i += 300;
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let records = log
        .scan(None, None)
        .unwrap()
        .map(|r| r.map(|r| (r.offset(), r.timestamp_ms())).unwrap())
        .collect();
    log.close().unwrap();
    records
}

fn read_only(dir: &Path) -> CommitLog {
    CommitLog::open(&[dir], quiet().segment_size(SEGMENT).read_only(true)).unwrap()
}

#[test]
fn walks_answer_as_a_scan_does_on_a_cold_warm_or_shuffled_index() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("d");
    let records = store(&dir);
    let max = read_only(&dir).max_offset().unwrap();
    let start_at = |p: u64| records.iter().map(|r| r.0).find(|&o| o >= p).unwrap_or(max);
    let at_time = |t: u64| records.iter().find(|r| r.1 >= t).map_or(max, |r| r.0);
    let mut rng = Rng::new(11);
    let mut positions: Vec<u64> = (0..400).map(|_| rng.range(0, max + 10)).collect();
    positions.extend(records.iter().step_by(97).map(|r| r.0)); // record starts themselves
    let (first, last) = (records[0].1, records[records.len() - 1].1);
    let mut times: Vec<u64> = (0..200).map(|_| rng.range(first, last + 2)).collect();
    times.extend([0, first, last, last + 1]);
    // Three rounds of new logs on the same files: cold, then warm; descending, then shuffled.
    for round in 0..3 {
        let log = read_only(&dir);
        match round {
            0 => positions.sort_unstable_by(|a, b| b.cmp(a)),
            _ => (0..positions.len()).for_each(|i| {
                let j = rng.range(0, positions.len() as u64) as usize;
                positions.swap(i, j);
            }),
        }
        for &p in &positions {
            assert_eq!(
                log.record_start_at_or_after(p).unwrap(),
                start_at(p),
                "{round}: {p}"
            );
        }
        for &t in &times {
            assert_eq!(
                log.offset_for_timestamp(t).unwrap(),
                at_time(t),
                "{round}: {t}"
            );
        }
    }
}

#[test]
fn a_file_written_since_gets_a_fresh_index() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("d");
    let records = store(&dir);
    // Learn the starts of the second segment, then damage a header in its middle: a walk from a
    // start learnt before the damage would step over it; a fresh index walks onto it.
    let log = read_only(&dir);
    let in_second: Vec<u64> = records
        .iter()
        .map(|r| r.0)
        .filter(|&o| (SEGMENT..2 * SEGMENT).contains(&o))
        .collect();
    let target = in_second[in_second.len() - 2];
    assert_eq!(log.record_start_at_or_after(target).unwrap(), target);
    let victim = in_second[in_second.len() / 2];
    let (path, pos) = segment_of(&log, victim);
    drop(log);
    std::thread::sleep(std::time::Duration::from_millis(20)); // past a coarse clock's tick
    write_at(&path, pos + 4, &[0xEE; 4]); // its magic
    match read_only(&dir).record_start_at_or_after(target) {
        Err(Error::Corruption { .. }) => {}
        other => panic!("a walk over a damaged header answered {other:?}"),
    }
}
