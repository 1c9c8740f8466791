#![allow(clippy::unwrap_used)] // tests: a failed unwrap is the failure report
#![cfg_attr(
    not(all(feature = "failpoints", feature = "tier")),
    allow(unused, dead_code)
)]
//! The key index (docs/messages.md): `lookup` gives every record with a key, in append order,
//! and never another key's record: across segments and time ranges, under forced hash
//! collisions, after a writer was killed between publishing records and indexing them, and with
//! index files deleted, garbled or damaged; indexes move and go with their segments.

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use rmqlog::{CommitLog, Message, Options};

const SEGMENT: u64 = 16 * 1024;

fn opts() -> Options {
    common::quiet().segment_size(SEGMENT)
}

fn key_of(i: u64) -> Vec<u8> {
    format!("order-{}", i % 37).into_bytes()
}

/// Appends `n` records from `first`: most with a key (`order-(i % 37)`), some without; returns
/// the model (key -> offsets).
fn fill(log: &CommitLog, first: u64, n: u64, model: &mut BTreeMap<Vec<u8>, Vec<u64>>) {
    for i in first..first + n {
        let body = common::body(i, 40 + (i % 50) as usize);
        if i % 5 == 4 {
            log.append(&body).unwrap();
            continue;
        }
        let key = key_of(i);
        let h = [("i", &body[..4])];
        let off = log
            .append_message(&Message::new(&body).key(&key).headers(&h))
            .unwrap();
        model.entry(key).or_default().push(off);
    }
}

fn check(log: &CommitLog, model: &BTreeMap<Vec<u8>, Vec<u64>>) {
    for (key, offsets) in model {
        assert_eq!(&log.lookup(key, None, None).unwrap(), offsets, "{key:?}");
    }
    assert!(log.lookup(b"absent", None, None).unwrap().is_empty());
    assert!(log.lookup(b"", None, None).unwrap().is_empty());
}

fn index_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "keys"))
        .collect();
    v.sort();
    v
}

#[test]
fn lookups_find_every_record_with_a_key_in_append_order_and_time_range() {
    let t = tempfile::tempdir().unwrap();
    let log = CommitLog::open(&[t.path()], opts()).unwrap();
    let mut model = BTreeMap::new();
    fill(&log, 0, 600, &mut model);
    assert!(log.segments().unwrap().len() > 4);
    check(&log, &model);
    // Every sealed segment's index is complete; a reader in another open finds the same.
    assert!(index_files(t.path()).len() >= log.segments().unwrap().len() - 1);
    let ro = CommitLog::open(&[t.path()], opts().read_only(true)).unwrap();
    check(&ro, &model);
    // A time range: of the records stored in it.
    let key = key_of(3);
    let all = &model[&key];
    let ts = |o: u64| log.read(o).unwrap().timestamp_ms();
    let (lo, hi) = (ts(all[3]), ts(all[all.len() - 3]));
    let want: Vec<u64> = all
        .iter()
        .copied()
        .filter(|&o| ts(o) >= lo && ts(o) < hi)
        .collect();
    assert_eq!(log.lookup(&key, Some(lo), Some(hi)).unwrap(), want);
    // Appends after a lookup are found by the next one.
    fill(&log, 600, 100, &mut model);
    ro.refresh().unwrap();
    check(&ro, &model);
    check(&log, &model);
}

#[test]
fn deleted_garbled_or_damaged_indexes_are_walked_past_and_rebuilt_by_a_writer() {
    let t = tempfile::tempdir().unwrap();
    let log = CommitLog::open(&[t.path()], opts()).unwrap();
    let mut model = BTreeMap::new();
    fill(&log, 0, 700, &mut model);
    log.close().unwrap();
    let files = index_files(t.path());
    assert!(files.len() > 4);
    std::fs::remove_file(&files[0]).unwrap();
    std::fs::write(&files[1], b"not an index").unwrap();
    // A flipped bit in an entry of the third (past the 64-byte header and the slots).
    let mut bytes = std::fs::read(&files[2]).unwrap();
    let at = bytes.len() - 1 - bytes.iter().rev().position(|&b| b != 0).unwrap();
    bytes[at] ^= 0x40;
    std::fs::write(&files[2], &bytes).unwrap();
    // A flipped bit in a used slot of the fourth: its chain starts in another slot's.
    let mut bytes = std::fs::read(&files[3]).unwrap();
    let slots = u32::from_le_bytes(bytes[16..20].try_into().unwrap()) as usize;
    let used = (0..slots)
        .map(|i| 64 + 4 * i)
        .find(|&at| bytes[at..at + 4] != [0; 4])
        .unwrap();
    bytes[used] ^= 0x01;
    std::fs::write(&files[3], &bytes).unwrap();
    // A reader walks the segments whose index it cannot use.
    let ro = CommitLog::open(&[t.path()], opts().read_only(true)).unwrap();
    check(&ro, &model);
    assert!(!files[0].exists());
    drop(ro);
    // A writer builds the missing and garbled ones again.
    let log = CommitLog::open(&[t.path()], opts()).unwrap();
    check(&log, &model);
    assert!(files[0].exists());
    assert_ne!(std::fs::read(&files[1]).unwrap(), b"not an index");
    fill(&log, 700, 50, &mut model);
    check(&log, &model);
}

#[test]
fn an_index_moves_with_its_segment_and_goes_with_it() {
    let (_t, dirs) = common::dirs(2);
    let log = CommitLog::open(&dirs, opts()).unwrap();
    let mut model = BTreeMap::new();
    fill(&log, 0, 500, &mut model);
    let segs = log.segments().unwrap();
    let first = &segs[0];
    let dest = dirs.iter().find(|d| !first.path.starts_with(d)).unwrap();
    log.move_segment(first.start_offset, dest).unwrap();
    let moved = log.segments().unwrap()[0].path.clone();
    assert!(moved.starts_with(dest));
    assert!(rmqlog_index(&moved).exists());
    assert!(!rmqlog_index(&first.path).exists());
    check(&log, &model);
    let cut = segs[2].start_offset;
    log.truncate_before(cut).unwrap();
    for d in &dirs {
        for f in index_files(d) {
            let name = f.file_stem().unwrap().to_str().unwrap();
            assert!(
                name.parse::<u64>().unwrap() >= cut,
                "{f:?} outlived its segment"
            );
        }
    }
    for offsets in model.values_mut() {
        offsets.retain(|&o| o >= cut);
    }
    check(&log, &model);
}

fn rmqlog_index(segment: &Path) -> PathBuf {
    let mut p = segment.as_os_str().to_owned();
    p.push(".keys");
    PathBuf::from(p)
}

const CHILD_ENV: &str = "RMQLOG_KEY_INDEX_DIR";

/// A writer in its own process: appends keyed records, then stops for good between publishing
/// its next batch and indexing it (`append::published`).
#[cfg(feature = "failpoints")]
#[test]
fn writer_process() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return; // run by the test below
    };
    let log = CommitLog::open(&[PathBuf::from(dir)], opts()).unwrap();
    let mut model = BTreeMap::new();
    fill(&log, 0, 300, &mut model);
    fail::cfg_callback("append::published", || {
        println!("paused");
        loop {
            std::thread::sleep(Duration::from_secs(1));
        }
    })
    .unwrap();
    let bodies: Vec<Vec<u8>> = (0..40).map(|i| common::body(1000 + i, 300)).collect();
    let keys: Vec<Vec<u8>> = (0..40)
        .map(|i| format!("late-{}", i % 3).into_bytes())
        .collect();
    let messages: Vec<Message<'_>> = bodies
        .iter()
        .zip(&keys)
        .map(|(b, k)| Message::new(b).key(k))
        .collect();
    log.append_messages(&messages).unwrap();
    unreachable!("the append pauses until the process is killed");
}

#[cfg(feature = "failpoints")]
#[test]
fn records_published_but_not_indexed_by_a_killed_writer_are_found() {
    let t = tempfile::tempdir().unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "writer_process",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, t.path())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    assert!(lines.any(|l| l.unwrap().contains("paused")));
    // A follower sees them while the writer is stopped there, and after its death.
    let ro = CommitLog::open(&[t.path()], opts().read_only(true)).unwrap();
    let late = |log: &CommitLog| -> usize {
        (0..3)
            .map(|k| {
                log.lookup(format!("late-{k}").as_bytes(), None, None)
                    .unwrap()
                    .len()
            })
            .sum()
    };
    assert_eq!(late(&ro), 40);
    child.kill().unwrap();
    child.wait().unwrap();
    let log = CommitLog::open(&[t.path()], opts()).unwrap();
    assert_eq!(late(&log), 40);
    let mut model = BTreeMap::new();
    let fresh = tempfile::tempdir().unwrap();
    fill(
        &CommitLog::open(&[fresh.path()], opts()).unwrap(),
        0,
        300,
        &mut model,
    );
    // The same 300 records were appended first: same offsets.
    check(&log, &model);
    // The next append indexes what the dead writer did not.
    log.append_message(&Message::new(b"x").key(b"late-0"))
        .unwrap();
    assert_eq!(late(&log), 41);
    ro.refresh().unwrap();
    assert_eq!(late(&ro), 41);
}

/// A segment whose local copy went to the tier keeps its index where it was: lookups read it
/// (and range-read the candidates), and it goes when retention deletes the segment.
#[cfg(feature = "tier")]
#[test]
fn a_tiered_segment_keeps_its_index_and_loses_it_with_the_segment() {
    let local = tempfile::tempdir().unwrap();
    let remote = tempfile::tempdir().unwrap();
    let mut tier = rmqlog::TierOptions::new(format!("file://{}", remote.path().display()));
    tier.local_retention_bytes = Some(2 * SEGMENT);
    let tiered = Options::default().segment_size(SEGMENT).tier(Some(tier));
    let log = CommitLog::open(&[local.path()], tiered).unwrap();
    let mut model = BTreeMap::new();
    fill(&log, 0, 800, &mut model);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while log.segments().unwrap().iter().filter(|s| !s.local).count() < 3 {
        assert!(
            std::time::Instant::now() < deadline,
            "nothing went remote-only"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let remote_only: Vec<u64> = log
        .segments()
        .unwrap()
        .iter()
        .filter(|s| !s.local)
        .map(|s| s.start_offset)
        .collect();
    let beside = |start: u64| local.path().join(format!("{start:020}.keys"));
    assert!(remote_only.iter().all(|&s| beside(s).exists()));
    check(&log, &model);
    let downloads = log.tier_status().unwrap().unwrap().downloads;
    check(&log, &model);
    assert_eq!(
        log.tier_status().unwrap().unwrap().downloads,
        downloads,
        "a lookup fetched a whole segment"
    );
    let cut = remote_only[2];
    log.truncate_before(cut).unwrap();
    assert!(remote_only[..2].iter().all(|&s| !beside(s).exists()));
    for offsets in model.values_mut() {
        offsets.retain(|&o| o >= cut);
    }
    check(&log, &model);
}

const CUT_ENV: &str = "RMQLOG_KEY_INDEX_CUT_DIR";

/// A writer that dies without closing, after two keyed records: prints the second's offset and
/// the end.
#[test]
fn dying_writer() {
    let Ok(dir) = std::env::var(CUT_ENV) else {
        return; // run by the test below
    };
    let log = CommitLog::open(&[PathBuf::from(dir)], opts()).unwrap();
    log.append_message(&Message::new(&[b'x'; 20]).key(b"a"))
        .unwrap();
    let b = log
        .append_message(&Message::new(&[b'y'; 20]).key(b"b"))
        .unwrap();
    println!("\ncut {b} {}", log.max_offset().unwrap());
    std::process::abort();
}

/// The last record's page never reached the disk but the index's did: recovery cuts the record,
/// and the records appended in its place (shorter, as long, longer) are all found, and the cut
/// one is not.
#[test]
fn records_appended_where_recovery_cut_indexed_ones_are_found() {
    for (c_len, d_len) in [(20usize, 60usize), (30, 60), (10, 5)] {
        let t = tempfile::tempdir().unwrap();
        let out = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "dying_writer", "--nocapture", "--test-threads=1"])
            .env(CUT_ENV, t.path())
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let line = text.lines().find_map(|l| l.strip_prefix("cut ")).unwrap();
        let v: Vec<u64> = line.split(' ').map(|x| x.parse().unwrap()).collect();
        let (b, end) = (v[0], v[1]);
        common::write_at(
            &t.path().join(format!("{:020}", 0)),
            b,
            &vec![0u8; (end - b) as usize],
        );
        let log = CommitLog::open(&[t.path()], opts()).unwrap();
        assert_eq!(
            log.max_offset().unwrap(),
            b,
            "recovery cut the zeroed record"
        );
        let c = log
            .append_message(&Message::new(&vec![b'w'; c_len]).key(b"c"))
            .unwrap();
        let d = log
            .append_message(&Message::new(&vec![b'v'; d_len]).key(b"d"))
            .unwrap();
        assert_eq!(log.lookup(b"a", None, None).unwrap(), vec![0]);
        assert!(log.lookup(b"b", None, None).unwrap().is_empty());
        assert_eq!(
            log.lookup(b"c", None, None).unwrap(),
            vec![c],
            "c of {c_len}"
        );
        assert_eq!(
            log.lookup(b"d", None, None).unwrap(),
            vec![d],
            "d after c of {c_len}"
        );
    }
}
