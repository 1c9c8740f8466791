//! Ranged reads of remote segments: the record starts an upload lists (`splits`), scans of part
//! of a remote-only segment that fetch only that part, boundary walks from the nearest split,
//! and damage inside a fetched range.
#![allow(clippy::unwrap_used)] // tests: a failed unwrap is the failure report

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::Rng;
use rmqlog::{CommitLog, Error, Options, TierOptions};

/// The spacing of the splits (`SPLIT_EVERY` in the crate).
const SPLIT: u64 = 32 << 20;
/// Two splits' worth and a bit: the first segment holds two splits.
const SEG: u64 = 72 << 20;

/// Bodies of 100 to ~6000 bytes, each naming its index: records straddle every split.
fn body(i: usize) -> Vec<u8> {
    let mut b = format!("record {i:08} ").into_bytes();
    b.resize(100 + (i * 7919) % 5900, b'a' + (i % 26) as u8);
    b
}

/// A store whose first segment is sealed and only in a `file://` tier at `remote`; returns the
/// tier URL and the offsets of the records in that segment, in order.
fn remote_only_segment(local: &Path, remote: &Path) -> (String, Vec<u64>) {
    let url = format!("file://{}", remote.display());
    let mut tier = TierOptions::new(&url);
    tier.local_retention_bytes = Some(0);
    let log = CommitLog::open(
        &[local],
        Options::default().segment_size(SEG).tier(Some(tier)),
    )
    .unwrap();
    let mut offsets = Vec::new();
    let mut i = 0;
    while log.max_offset().unwrap() < SEG {
        let batch: Vec<Vec<u8>> = (i..i + 256).map(body).collect();
        offsets.extend(log.append_batch(&batch).unwrap());
        i += 256;
    }
    close_when_shipped(log, 1);
    offsets.retain(|&o| o < SEG);
    (url, offsets)
}

/// Waits until `log` shipped `segments` sealed segments and deleted their local copies; closes it.
fn close_when_shipped(log: CommitLog, segments: u64) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while log.tier_status().unwrap().unwrap().local_deleted < segments {
        assert!(
            Instant::now() < deadline,
            "the sealed segments were not shipped"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    log.close().unwrap();
}

fn open_url(url: &str) -> CommitLog {
    CommitLog::open(&[url], Options::default().read_only(true)).unwrap()
}

/// `(downloads, range_reads, fetched_bytes)` of `log`'s tier so far.
fn fetches(log: &CommitLog) -> (u64, u64, u64) {
    let st = log.tier_status().unwrap().unwrap();
    (st.downloads, st.range_reads, st.fetched_bytes)
}

fn scanned(log: &CommitLog, start: u64, end: u64) -> Vec<(u64, Vec<u8>)> {
    log.scan(Some(start), Some(end))
        .unwrap()
        .map(|r| {
            let r = r.unwrap();
            (r.offset(), r.to_vec())
        })
        .collect()
}

/// The records of `offsets` (index = body number) that start in `[start, end)`.
fn expected(offsets: &[u64], start: u64, end: u64) -> Vec<(u64, Vec<u8>)> {
    offsets
        .iter()
        .enumerate()
        .filter(|(_, &o)| start <= o && o < end)
        .map(|(i, &o)| (o, body(i)))
        .collect()
}

#[test]
fn an_upload_lists_the_first_record_start_past_every_32_mib() {
    let (local, remote) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (url, offsets) = remote_only_segment(local.path(), remote.path());
    let log = open_url(&url);
    let seg = &log.segments().unwrap()[0];
    assert!(seg.remote && !seg.local, "{seg:?}");
    let want: Vec<u64> = (1..=SEG / SPLIT)
        .filter_map(|k| offsets.iter().copied().find(|&o| o >= k * SPLIT))
        .collect();
    assert_eq!(want.len(), 2);
    assert_eq!(seg.splits, want);
    assert_eq!(
        fetches(&log),
        (0, 0, 0),
        "listing the splits reads no object"
    );
}

#[test]
fn a_scan_between_two_splits_fetches_only_that_range() {
    let (local, remote) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (url, offsets) = remote_only_segment(local.path(), remote.path());
    let log = open_url(&url);
    let splits = log.segments().unwrap()[0].splits.clone();
    let (a, b) = (splits[0], splits[1]);
    assert_eq!(scanned(&log, a, b), expected(&offsets, a, b));
    let (downloads, ranges, bytes) = fetches(&log);
    assert_eq!(downloads, 0, "no whole download");
    assert_eq!(ranges, 1, "one range read");
    assert!(
        bytes <= b - a + 32,
        "fetched {bytes} bytes for a range of {}",
        b - a
    );

    // The last range, to the records' end, and the first, from the segment's start.
    let last = *offsets.last().unwrap() + 1;
    assert_eq!(scanned(&log, b, last), expected(&offsets, b, last));
    assert_eq!(scanned(&log, 0, a), expected(&offsets, 0, a));
    assert_eq!(fetches(&log).0, 0);
}

#[test]
fn a_scan_ending_inside_a_record_fetches_that_records_tail() {
    let (local, remote) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (url, offsets) = remote_only_segment(local.path(), remote.path());
    let log = open_url(&url);
    let splits = log.segments().unwrap()[0].splits.clone();
    // From a record start past the first split to one byte into a record (arbitrary bounds).
    let i = offsets
        .iter()
        .position(|&o| o > splits[0] + 12_345)
        .unwrap();
    let (start, end) = (offsets[i], offsets[i + 1000] + 1);
    let got = scanned(&log, start, end);
    assert_eq!(got, expected(&offsets, start, end));
    assert_eq!(got.last().unwrap().0, offsets[i + 1000]);
    assert_eq!(fetches(&log).0, 0);
}

#[test]
fn a_boundary_walk_starts_at_the_nearest_split() {
    let (local, remote) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (url, offsets) = remote_only_segment(local.path(), remote.path());
    let log = open_url(&url);
    let splits = log.segments().unwrap()[0].splits.clone();
    for probe in [splits[0], splits[0] + 1, splits[0] + 100_000, splits[1] - 1] {
        let want = *offsets.iter().find(|&&o| o >= probe).unwrap();
        assert_eq!(
            log.record_start_at_or_after(probe).unwrap(),
            want,
            "{probe}"
        );
    }
    let (downloads, _, bytes) = fetches(&log);
    assert_eq!(downloads, 0);
    assert!(
        bytes < SPLIT + (1 << 20),
        "walks from splits[0] fetched {bytes} bytes"
    );
}

#[test]
fn damage_inside_a_fetched_range_is_corruption_naming_the_record() {
    let (local, remote) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (url, offsets) = remote_only_segment(local.path(), remote.path());
    let splits = {
        let log = open_url(&url);
        log.segments().unwrap()[0].splits.clone()
    };
    let i = offsets.iter().position(|&o| o > splits[0]).unwrap() + 10;
    let object = remote.path().join(format!("{:020}", 0));
    let mut bytes = std::fs::read(&object).unwrap();
    bytes[(offsets[i] + 40) as usize] ^= 0xff; // inside the body of record i
    std::fs::write(&object, &bytes).unwrap();

    let log = open_url(&url);
    let err = log
        .scan(Some(splits[0]), Some(splits[1]))
        .unwrap()
        .find_map(Result::err)
        .expect("the damaged record fails the scan");
    assert!(
        matches!(err, Error::Corruption { offset: Some(o), .. } if o == offsets[i]),
        "{err:?}"
    );
    // The range before it reads right.
    assert_eq!(
        scanned(&log, 0, splits[0]),
        expected(&offsets, 0, splits[0])
    );
}

#[test]
fn random_partial_scans_on_threads_with_a_tight_cache_read_what_was_written() {
    let (local, remote) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (url, offsets) = remote_only_segment(local.path(), remote.path());
    // A cache of 8 MiB: ranges evict each other (and a whole map of the segment) all the time.
    let mut tier = TierOptions::new(&url);
    tier.cache_bytes = 8 << 20;
    let log = CommitLog::open(
        &[url.as_str()],
        Options::default().read_only(true).tier(Some(tier)),
    )
    .unwrap();
    let seed = common::seed("RMQLOG_SPLITS_SEED");
    eprintln!("tier_splits: RMQLOG_SPLITS_SEED={seed}");
    let end_of_records = *offsets.last().unwrap() + 1;
    std::thread::scope(|s| {
        for t in 0..3u64 {
            let (log, offsets) = (&log, &offsets);
            s.spawn(move || {
                let mut rng = Rng::new(seed ^ (t + 1));
                for _ in 0..40 {
                    // From a record start (or a split) to any byte, up to 12 MiB on.
                    let i = rng.range(0, offsets.len() as u64) as usize;
                    let start = offsets[i];
                    let end = (start + rng.range(1, 12 << 20)).min(end_of_records);
                    assert_eq!(
                        scanned(log, start, end),
                        expected(offsets, start, end),
                        "seed {seed}: [{start}, {end})"
                    );
                    if rng.one_in(8) {
                        let probe = rng.range(0, end_of_records);
                        let want = *offsets.iter().find(|&&o| o >= probe).unwrap();
                        assert_eq!(log.record_start_at_or_after(probe).unwrap(), want);
                    }
                }
            });
        }
    });
    assert_eq!(scanned(&log, 0, end_of_records).len(), offsets.len());
}

#[test]
fn a_damaged_length_before_the_offset_fails_the_walk_instead_of_skipping_a_record() {
    let (local, remote) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (url, offsets) = remote_only_segment(local.path(), remote.path());
    let splits = open_url(&url).segments().unwrap()[0].splits.clone();
    let i = offsets.iter().position(|&o| o > splits[0]).unwrap() + 5;
    // Record i's length made to cover record i + 1 too: a header walk would step over it.
    let object = remote.path().join(format!("{:020}", 0));
    let mut bytes = std::fs::read(&object).unwrap();
    let at = offsets[i] as usize;
    let both = (offsets[i + 2] - offsets[i]) as u32;
    bytes[at..at + 4].copy_from_slice(&both.to_le_bytes());
    std::fs::write(&object, &bytes).unwrap();

    let log = open_url(&url);
    let err = log.record_start_at_or_after(offsets[i + 1]).unwrap_err();
    assert!(
        matches!(err, Error::Corruption { offset: Some(o), .. } if o == offsets[i]),
        "{err:?}"
    );
}

#[test]
fn a_truncated_object_read_past_its_end_is_corruption() {
    let (local, remote) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (url, offsets) = remote_only_segment(local.path(), remote.path());
    let object = remote.path().join(format!("{:020}", 0));
    std::fs::OpenOptions::new()
        .write(true)
        .open(&object)
        .unwrap()
        .set_len(40_000_000)
        .unwrap();
    let log = open_url(&url);
    let past = *offsets.iter().find(|&&o| o > 50_000_000).unwrap();
    let first_error = |scan: Result<rmqlog::Scan, Error>| match scan {
        Err(e) => e,
        Ok(mut s) => s.find_map(Result::err).expect("an error"),
    };
    for err in [
        log.read(past).map(|_| ()).unwrap_err(),
        first_error(log.scan(Some(past), Some(past + 100_000))),
        first_error(log.scan(None, None)),
    ] {
        assert!(
            matches!(&err, Error::Corruption { reason, .. } if reason.contains("40000000")),
            "{err:?}"
        );
    }
}

#[test]
fn a_cold_point_read_of_a_segments_last_long_record_sees_the_filler_after_it() {
    let (local, remote) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let url = format!("file://{}", remote.path().display());
    let mut tier = TierOptions::new(&url);
    tier.local_retention_bytes = Some(0);
    const SMALL: u64 = 1 << 20;
    let log = CommitLog::open(
        &[local.path()],
        Options::default().segment_size(SMALL).tier(Some(tier)),
    )
    .unwrap();
    // Records of 100 KiB (longer than a point read's 64 KiB window): ten a segment, then a filler.
    let offsets: Vec<u64> = (0..25)
        .map(|i| log.append(&vec![b'a' + i as u8; 100 << 10]).unwrap())
        .collect();
    close_when_shipped(log, 2);
    let last = *offsets.iter().rfind(|&&o| o < SMALL).unwrap();
    let log = open_url(&url);
    let rec = log.read(last).unwrap();
    assert_eq!(
        rec.next_offset(),
        SMALL,
        "past the filler: the next segment's start"
    );
    assert_eq!(fetches(&log).0, 0, "point reads only");
}
