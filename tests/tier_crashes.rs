#![allow(clippy::unwrap_used)] // tests: a failed unwrap is the failure report
//! The tier thread stopped dead at each step between an upload and the local copy's deletion (a
//! fail point that panics: the thread stops there, as a killed writer would), then the store
//! closed and reopened: nothing is lost, and the manifest lists each segment once.
#![cfg(feature = "failpoints")]

use std::path::Path;
use std::time::{Duration, Instant};

use rmqlog::{CommitLog, Options, TierOptions};

const SEG: u64 = 64 * 1024;

fn opts(tier: &Path) -> Options {
    let mut t = TierOptions::new(format!("file://{}", tier.display()));
    t.local_retention_bytes = Some(0);
    Options::default().segment_size(SEG).tier(Some(t))
}

fn body(i: usize) -> Vec<u8> {
    format!("body {i} ").repeat(1 + i % 30).into_bytes()
}

/// The start offsets the current manifest lists, read from the store as a reader would.
fn manifest_starts(tier: &Path) -> Vec<u64> {
    let version = std::fs::read_to_string(tier.join("manifest/CURRENT")).unwrap();
    let name = format!(
        "manifest/{:020}.json",
        version.trim().parse::<u64>().unwrap()
    );
    let m: serde_json::Value =
        serde_json::from_slice(&std::fs::read(tier.join(name)).unwrap()).unwrap();
    m["segments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["start"].as_u64().unwrap())
        .collect()
}

fn wait_until(log: &CommitLog, what: &str, done: impl Fn(&rmqlog::TierStatus) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done(&log.tier_status().unwrap().unwrap()) {
        assert!(Instant::now() < deadline, "timed out: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Writes with the thread set to die at `point`, closes, reopens without the fail point.
fn dies_at(point: &str) {
    let local = tempfile::tempdir().unwrap();
    let tier = tempfile::tempdir().unwrap();
    fail::cfg(point, "panic").unwrap();
    let log = CommitLog::open(&[local.path()], opts(tier.path())).unwrap();
    let acked: Vec<(u64, Vec<u8>)> = (0..600)
        .map(|i| (log.append(&body(i)).unwrap(), body(i)))
        .collect();
    // The thread reaches the point on its first upload or deletion, and stops there.
    let deadline = Instant::now() + Duration::from_secs(10);
    while log.tier_status().unwrap().unwrap().last_error.is_none() {
        assert!(
            Instant::now() < deadline,
            "the tier thread never reached {point}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    log.close().unwrap();
    fail::remove(point);

    let log = CommitLog::open(&[local.path()], opts(tier.path())).unwrap();
    let sealed = log.segments().unwrap().len() - 1;
    wait_until(&log, "every sealed segment remote only", |s| {
        s.remote_segments == sealed && s.pending_segments == 0
    });
    for (offset, b) in &acked {
        assert_eq!(
            &*log.read(*offset).unwrap(),
            b.as_slice(),
            "{point}: {offset}"
        );
    }
    let scanned = log.scan(None, None).unwrap().count();
    assert_eq!(scanned, acked.len(), "{point}");
    assert_eq!(
        log.verify_remote_with(|_, _| {}).unwrap(),
        vec![],
        "{point}"
    );
    let starts = manifest_starts(tier.path());
    let mut unique = starts.clone();
    unique.dedup();
    assert_eq!(starts, unique, "{point}: a segment listed twice");
    assert_eq!(starts.len(), sealed, "{point}: {starts:?}");
    log.close().unwrap();
}

#[test]
fn a_tier_thread_dying_at_any_step_loses_and_duplicates_nothing() {
    let scenario = fail::FailScenario::setup();
    for point in ["tier::uploaded", "tier::published", "tier::replaced"] {
        dies_at(point);
    }
    scenario.teardown();
}
