#![allow(clippy::unwrap_used)]
//! Review 2: a writer appending (records from 40 B to 3x the stride, equal-timestamp batches,
//! segments ending in fillers) while reader threads in the same process open read-only logs on
//! the store and search by position and time; every answer is compared with a scan of the same
//! log's records.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{body, quiet, Rng};
use rmqlog::CommitLog;

const SEGMENT: u64 = 1 << 20;

fn check(log: &CommitLog, rng: &mut Rng, tag: &str) -> usize {
    let max = log.max_offset().unwrap();
    let full: Vec<(u64, u64, u64)> = log
        .scan(None, Some(max))
        .unwrap()
        .map(|r| r.map(|r| (r.offset(), r.timestamp_ms(), r.offset() + 32 + r.body().len() as u64)).unwrap())
        .collect();
    let recs: Vec<(u64, u64)> = full.iter().map(|r| (r.0, r.1)).collect();
    // c16f21c too answers the end of a segment's last record (where its filler starts) for a
    // position inside that record: accepted as the next segment's start.
    let filler_of = |want: u64| {
        let i = full.iter().position(|r| r.0 == want)?;
        let prev = full.get(i.checked_sub(1)?)?;
        (prev.2 != want).then_some(prev.2)
    };
    if recs.is_empty() {
        return 0;
    }
    let mut n = 0;
    for _ in 0..60 {
        let p = rng.range(0, max + 10);
        // Past the last record of the snapshot the answer may be a record appended since.
        let Some(want) = recs.iter().map(|r| r.0).find(|&o| o >= p) else { continue };
        let got = log.record_start_at_or_after(p).unwrap();
        if got != want {
            assert_eq!(Some(got), filler_of(want), "{tag}: pos {p}, want {want}");
        }
        let i = rng.range(0, recs.len() as u64) as usize;
        let t = recs[i].1 + rng.range(0, 2);
        let Some(want) = recs.iter().find(|r| r.1 >= t).map(|r| r.0) else { continue };
        assert_eq!(log.offset_for_timestamp(t).unwrap(), want, "{tag}: time {t}");
        n += 2;
    }
    n
}

#[test]
fn readers_search_while_a_writer_appends() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("d");
    let w = Arc::new(CommitLog::open(&[&dir], quiet().segment_size(SEGMENT)).unwrap());
    w.append(&body(0, 100)).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let mut hs = vec![];
    for k in 0..2u64 {
        let (dir, stop, w) = (dir.clone(), Arc::clone(&stop), Arc::clone(&w));
        hs.push(std::thread::spawn(move || {
            let mut rng = Rng::new(100 + k);
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                let r = CommitLog::open(&[&dir], quiet().segment_size(SEGMENT).read_only(true))
                    .unwrap();
                n += check(&r, &mut rng, &format!("reader {k}"));
                if k == 0 {
                    n += check(&w, &mut rng, "writer");
                }
            }
            n
        }));
    }
    let mut rng = Rng::new(5);
    let deadline = Instant::now() + Duration::from_secs(6);
    let mut i = 1;
    while Instant::now() < deadline && w.max_offset().unwrap() < 12 * SEGMENT {
        let len = match rng.range(0, 10) {
            0 => rng.range(64 << 10, 200 << 10),
            _ => rng.range(40, 3000),
        } as usize;
        let k = rng.range(1, 40);
        let bodies: Vec<Vec<u8>> = (0..k).map(|j| body(i + j, len)).collect();
        w.append_batch(&bodies).unwrap();
        i += k;
        if rng.one_in(3) {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    stop.store(true, Ordering::Relaxed);
    let n: usize = hs.into_iter().map(|h| h.join().unwrap()).sum();
    eprintln!("{n} answers checked, store {} bytes", w.max_offset().unwrap());
}
