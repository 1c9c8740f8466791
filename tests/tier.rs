//! The remote tier through a `file://` store: uploads, local copies deleted once remote, reads
//! across both tiers, reopen, followers, a URL-only open, and damaged objects.
#![allow(clippy::unwrap_used)] // tests: a failed unwrap is the failure report

use std::path::Path;
use std::time::{Duration, Instant};

use rmqlog::{CommitLog, Error, Options, TierOptions};

const SEG: u64 = 64 * 1024;

fn tier_opts(url: &str) -> TierOptions {
    let mut t = TierOptions::new(url);
    t.local_retention_bytes = Some(2 * SEG);
    t
}

fn opts(url: &str) -> Options {
    Options::default()
        .segment_size(SEG)
        .tier(Some(tier_opts(url)))
}

fn url_of(dir: &Path) -> String {
    format!("file://{}", dir.display())
}

fn body(i: usize) -> Vec<u8> {
    format!("record {i:06} ").repeat(1 + i % 40).into_bytes()
}

/// Waits until `done` holds of the tier status, or fails after 30 s.
fn wait_for(log: &CommitLog, what: &str, done: impl Fn(&rmqlog::TierStatus) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let st = log.tier_status().unwrap().expect("a tier");
        if done(&st) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}: {st:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn check_all(log: &CommitLog, offsets: &[u64]) {
    for (i, &o) in offsets.iter().enumerate() {
        assert_eq!(
            &*log.read(o).unwrap(),
            body(i).as_slice(),
            "record {i} at {o}"
        );
    }
    let scanned: Vec<(u64, Vec<u8>)> = log
        .scan(None, None)
        .unwrap()
        .map(|r| {
            let r = r.unwrap();
            (r.offset(), r.to_vec())
        })
        .collect();
    assert_eq!(scanned.len(), offsets.len());
    assert_eq!(log.record_count().unwrap(), offsets.len() as u64);
    for (i, (o, b)) in scanned.iter().enumerate() {
        assert_eq!((*o, b.as_slice()), (offsets[i], body(i).as_slice()));
    }
}

fn write_tiered(dir: &Path, url: &str, n: usize) -> (CommitLog, Vec<u64>) {
    let log = CommitLog::open(&[dir], opts(url)).unwrap();
    let offsets: Vec<u64> = (0..n).map(|i| log.append(&body(i)).unwrap()).collect();
    (log, offsets)
}

#[test]
fn sealed_segments_go_remote_and_every_record_stays_readable() {
    let local = tempfile::tempdir().unwrap();
    let remote = tempfile::tempdir().unwrap();
    let url = url_of(remote.path());
    let (log, offsets) = write_tiered(local.path(), &url, 3000);
    let segs = log.segments().unwrap().len();
    assert!(segs > 6, "the test needs many segments, got {segs}");
    wait_for(&log, "uploads and local deletions", |s| {
        s.pending_segments == 0 && s.remote_segments >= segs - 4
    });
    let infos = log.segments().unwrap();
    assert!(infos.iter().any(|s| !s.local && s.remote));
    assert!(infos.last().unwrap().local);
    // Only a few local files are left; every record reads back.
    let files = std::fs::read_dir(local.path())
        .unwrap()
        .filter(|e| {
            let name = e.as_ref().unwrap().file_name();
            name.to_string_lossy().len() == 20
        })
        .count();
    assert!(files <= 4, "{files} local segment files left");
    check_all(&log, &offsets);
    let st = log.tier_status().unwrap().unwrap();
    assert!(st.range_reads > 0 || st.downloads > 0, "{st:?}");

    // A follower in another "process" sees both tiers.
    let ro = CommitLog::open(&[local.path()], Options::default().read_only(true)).unwrap();
    check_all(&ro, &offsets);
    drop(ro);
    log.close().unwrap();

    // Reopened without tier options: the store remembers its tier.
    let again = CommitLog::open(&[local.path()], Options::default().segment_size(SEG)).unwrap();
    check_all(&again, &offsets);
    let more = again.append(b"after reopen").unwrap();
    assert_eq!(&*again.read(more).unwrap(), b"after reopen");
    again.close().unwrap();

    // The URL alone: the sealed part of the log, counted from the manifest (nothing fetched).
    let by_url = CommitLog::open(&[url.as_str()], Options::default().read_only(true)).unwrap();
    let fetched = |l: &CommitLog| {
        let st = l.tier_status().unwrap().unwrap();
        (st.downloads, st.range_reads)
    };
    let before = fetched(&by_url);
    let counted = by_url.record_count().unwrap();
    assert_eq!(fetched(&by_url), before, "counting fetched nothing");
    let n = by_url.scan(None, None).unwrap().count();
    assert_eq!(counted, n as u64);
    let max = by_url.max_offset().unwrap();
    let upto = offsets.iter().filter(|&&o| o < max).count();
    assert_eq!(n, upto);
    assert!(upto > offsets.len() / 2, "{upto} of {}", offsets.len());
    assert!(by_url.verify_remote_with(|_, _| {}).unwrap().is_empty());
}

/// The first error of a scan from `start` (when it starts, or on the way).
fn first_error(log: &CommitLog, start: Option<u64>) -> Error {
    match log.scan(start, None) {
        Err(e) => e,
        Ok(mut scan) => scan.find_map(|r| r.err()).expect("an error"),
    }
}

#[test]
fn a_damaged_or_missing_object_is_corruption_naming_it() {
    let local = tempfile::tempdir().unwrap();
    let remote = tempfile::tempdir().unwrap();
    let url = url_of(remote.path());
    let (log, offsets) = write_tiered(local.path(), &url, 1500);
    wait_for(&log, "remote-only segments", |s| {
        s.remote_segments >= 2 && s.pending_segments == 0
    });
    log.close().unwrap();
    let first = remote.path().join(format!("{:020}", offsets[0]));
    let mut bytes = std::fs::read(&first).unwrap();
    bytes[100] ^= 0xff;
    std::fs::write(&first, &bytes).unwrap();

    let ro = CommitLog::open(&[url.as_str()], Options::default().read_only(true)).unwrap();
    let bad = ro.verify_remote_with(|_, _| {}).unwrap();
    assert_eq!(bad.len(), 1, "{bad:?}");
    assert!(bad[0].reason.contains("CRC32C"), "{}", bad[0].reason);
    assert!(
        bad[0].reason.contains(&format!("{:020}", offsets[0])),
        "{}",
        bad[0].reason
    );
    let err = first_error(&ro, None);
    assert!(matches!(err, Error::Corruption { .. }), "{err}");
    assert!(err.to_string().contains(&url), "{err}");

    let second = ro.segments().unwrap()[1].start_offset;
    std::fs::remove_file(remote.path().join(format!("{second:020}"))).unwrap();
    // verify() cached the segment whole: a fresh open has a cold cache.
    let ro = CommitLog::open(&[url.as_str()], Options::default().read_only(true)).unwrap();
    let err = first_error(&ro, Some(second));
    assert!(err.to_string().contains("missing"), "{err}");
    let err = ro.read(second).unwrap_err();
    assert!(matches!(err, Error::Corruption { .. }), "{err}");
}

#[test]
fn a_follower_reading_what_retention_deleted_remotely_gets_out_of_range_not_corruption() {
    let local = tempfile::tempdir().unwrap();
    let remote = tempfile::tempdir().unwrap();
    let url = url_of(remote.path());
    let (log, offsets) = write_tiered(local.path(), &url, 1500);
    wait_for(&log, "remote-only segments", |s| {
        s.remote_segments >= 3 && s.pending_segments == 0
    });
    let follower = CommitLog::open(&[local.path()], Options::default().read_only(true)).unwrap();
    let segs = log.segments().unwrap();
    let cut = segs[2].start_offset;
    log.truncate_before(cut).unwrap();
    wait_for(&log, "the objects below the head deleted", |s| {
        s.remote_deleted >= 2
    });
    // The follower has not refreshed: its list still holds the deleted segments.
    let err = follower.read(offsets[0]).unwrap_err();
    assert!(matches!(err, Error::OffsetOutOfRange { .. }), "{err}");
    assert_eq!(follower.min_offset().unwrap(), cut);
    let first_kept = offsets.iter().position(|&o| o >= cut).unwrap();
    assert_eq!(
        &*follower.read(offsets[first_kept]).unwrap(),
        body(first_kept).as_slice()
    );
}

#[test]
fn concurrent_point_reads_of_cold_remote_segments_all_read_right() {
    let local = tempfile::tempdir().unwrap();
    let remote = tempfile::tempdir().unwrap();
    let url = url_of(remote.path());
    let (log, offsets) = write_tiered(local.path(), &url, 3000);
    wait_for(&log, "remote-only segments", |s| {
        s.remote_segments >= 5 && s.pending_segments == 0
    });
    log.close().unwrap();
    for round in 0..5 {
        // A fresh open: a cold cache, every segment's first reads racing.
        let ro = CommitLog::open(&[url.as_str()], Options::default().read_only(true)).unwrap();
        let max = ro.max_offset().unwrap();
        let live: Vec<(usize, u64)> = offsets
            .iter()
            .copied()
            .enumerate()
            .filter(|&(_, o)| o < max)
            .collect();
        std::thread::scope(|s| {
            for t in 0..4 {
                let (ro, live) = (&ro, &live);
                s.spawn(move || {
                    for k in 0..live.len() {
                        let (i, o) = live[(k * 7 + t * 13 + round) % live.len()];
                        assert_eq!(&*ro.read(o).unwrap(), body(i).as_slice(), "record {i}");
                    }
                });
            }
        });
    }
}

#[test]
fn a_reopened_writer_sweeps_objects_the_manifest_no_longer_lists() {
    let local = tempfile::tempdir().unwrap();
    let remote = tempfile::tempdir().unwrap();
    let url = url_of(remote.path());
    let (log, _) = write_tiered(local.path(), &url, 1500);
    wait_for(&log, "uploads", |s| {
        s.remote_segments >= 3 && s.pending_segments == 0
    });
    let cut = log.segments().unwrap()[2].start_offset;
    log.truncate_before(cut).unwrap();
    wait_for(&log, "the head's objects deleted", |s| {
        s.remote_deleted >= 2
    });
    log.close().unwrap();
    // What a crash between a manifest and its deletions leaves: an object below the head, and
    // an old manifest version.
    let below = remote.path().join(format!("{:020}", 0));
    std::fs::write(&below, vec![0u8; SEG as usize]).unwrap();
    let old = remote
        .path()
        .join("manifest")
        .join(format!("{:020}.json", 1));
    std::fs::write(&old, b"{}").unwrap();
    let log = CommitLog::open(&[local.path()], opts(&url)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while below.exists() || old.exists() {
        assert!(Instant::now() < deadline, "the leftovers stayed");
        std::thread::sleep(Duration::from_millis(20));
    }
    // What the manifest lists stays, and reads.
    let first = log.segments().unwrap()[0].start_offset;
    assert_eq!(first, cut);
    assert!(log.read(first).is_ok());
    assert_eq!(log.verify_remote_with(|_, _| {}).unwrap(), vec![]);
}

/// Copies a directory's files (a store's `cp -a`).
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

#[test]
fn a_second_writer_on_one_prefix_is_refused_and_destroys_nothing() {
    let remote = tempfile::tempdir().unwrap();
    let url = url_of(remote.path());
    let (a_dir, b_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    // Two stores started together on an empty prefix, and a copy of the first.
    let a = CommitLog::open(&[a_dir.path()], opts(&url)).unwrap();
    let b = CommitLog::open(&[b_dir.path()], opts(&url)).unwrap();
    let a_acked: Vec<(u64, Vec<u8>)> = (0..1500)
        .map(|i| (a.append(&body(i)).unwrap(), body(i)))
        .collect();
    for i in 0..1500 {
        b.append(format!("B{i}").repeat(20).as_bytes()).unwrap();
    }
    a.flush().unwrap();
    b.flush().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let failed = |log: &CommitLog| log.tier_status().unwrap().unwrap().last_error;
    while failed(&a).is_none() && failed(&b).is_none() {
        assert!(
            Instant::now() < deadline,
            "neither writer noticed the other"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let (winner, loser, acked) = match failed(&a) {
        None => (&a, &b, Some(&a_acked)),
        Some(_) => (&b, &a, None),
    };
    let why = failed(loser).unwrap();
    assert!(
        why.contains("another writer ships to this prefix")
            || why.contains("holds the log of another store"),
        "{why}"
    );
    wait_for(winner, "the winner's uploads", |s| s.pending_segments == 0);
    assert_eq!(winner.verify_remote_with(|_, _| {}).unwrap(), vec![]);
    if let Some(acked) = acked {
        for (o, b) in acked {
            assert_eq!(&*a.read(*o).unwrap(), b.as_slice());
        }
    }
    // The loser kept every record locally: nothing of it was deleted.
    assert!(loser.segments().unwrap().iter().all(|s| s.local));
}

#[test]
fn a_copy_of_a_tiered_store_cannot_overwrite_the_originals_objects() {
    let remote = tempfile::tempdir().unwrap();
    let url = url_of(remote.path());
    let (orig, copy) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (log, _) = write_tiered(orig.path(), &url, 600);
    wait_for(&log, "uploads", |s| {
        s.pending_segments == 0 && s.remote_segments >= 1
    });
    log.close().unwrap();
    copy_dir(orig.path(), copy.path());
    let o = CommitLog::open(&[orig.path()], opts(&url)).unwrap();
    let c = CommitLog::open(&[copy.path()], opts(&url)).unwrap();
    let o_acked: Vec<(u64, Vec<u8>)> = (0..1500)
        .map(|i| (o.append(&body(i + 7)).unwrap(), body(i + 7)))
        .collect();
    o.flush().unwrap();
    wait_for(&o, "the original's uploads", |s| s.pending_segments == 0);
    for i in 0..1500 {
        c.append(format!("COPY{i}").repeat(10).as_bytes()).unwrap();
    }
    c.flush().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while c.tier_status().unwrap().unwrap().last_error.is_none() {
        assert!(
            Instant::now() < deadline,
            "the copy never noticed the original"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    o.close().unwrap();
    let by_url = CommitLog::open(&[url.as_str()], Options::default().read_only(true)).unwrap();
    assert_eq!(by_url.verify_remote_with(|_, _| {}).unwrap(), vec![]);
    let max = by_url.max_offset().unwrap();
    for (off, b) in o_acked.iter().filter(|(off, _)| *off < max) {
        assert_eq!(&*by_url.read(*off).unwrap(), b.as_slice(), "{off}");
    }
}

/// A closed store with at least 3 remote-only segments whose checkpoint is then lost: its local
/// and tier directories, the tier's URL, and the offsets written.
fn checkpoint_lost() -> (tempfile::TempDir, tempfile::TempDir, String, Vec<u64>) {
    let local = tempfile::tempdir().unwrap();
    let remote = tempfile::tempdir().unwrap();
    let url = url_of(remote.path());
    let (log, offsets) = write_tiered(local.path(), &url, 1500);
    wait_for(&log, "remote-only segments", |s| {
        s.remote_segments >= 3 && s.pending_segments == 0
    });
    log.close().unwrap();
    std::fs::remove_file(local.path().join("rmqlog.meta")).unwrap();
    (local, remote, url, offsets)
}

#[test]
fn a_store_whose_metadata_is_lost_learns_its_head_from_the_tier_and_deletes_nothing() {
    let (local, _remote, url, offsets) = checkpoint_lost();
    std::fs::remove_file(local.path().join("rmqlog.tier")).unwrap();
    let log = CommitLog::open(&[local.path()], opts(&url)).unwrap();
    assert_eq!(log.min_offset().unwrap(), offsets[0]);
    std::thread::sleep(Duration::from_millis(500)); // the tier thread's first passes
    check_all(&log, &offsets);
    assert_eq!(log.verify_remote_with(|_, _| {}).unwrap(), vec![]);
    assert_eq!(log.tier_status().unwrap().unwrap().remote_deleted, 0);
}

/// With its checkpoint lost, a store's remote-only segments are known only to the manifest copy
/// in its directories, which does not name the tier: an open without `tier_url` is refused
/// before it changes anything (else they would drop out of the log), and the open with it
/// reads every record.
#[test]
fn a_lost_checkpoint_without_tier_url_is_refused_while_the_manifest_copy_lists_segments() {
    let (local, _remote, url, offsets) = checkpoint_lost();
    let listing = |p: &Path| {
        let mut names: Vec<(String, u64)> = std::fs::read_dir(p)
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                (
                    e.file_name().to_string_lossy().into_owned(),
                    e.metadata().unwrap().len(),
                )
            })
            .collect();
        names.sort();
        names
    };
    let before = listing(local.path());
    let plain = Options::default().segment_size(SEG);
    for o in [plain.clone(), plain.read_only(true)] {
        match CommitLog::open(&[local.path()], o) {
            Err(Error::Configuration(m)) => {
                assert!(m.contains("tier_url") && m.contains("rmqlog.tier"), "{m}")
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
        assert_eq!(listing(local.path()), before, "the open changed the store");
    }
    let log = CommitLog::open(&[local.path()], opts(&url)).unwrap();
    check_all(&log, &offsets);
}

#[test]
fn a_tier_directory_given_as_a_store_is_refused() {
    let local = tempfile::tempdir().unwrap();
    let remote = tempfile::tempdir().unwrap();
    let url = url_of(remote.path());
    let (log, _) = write_tiered(local.path(), &url, 600);
    wait_for(&log, "uploads", |s| s.manifest_version >= 1);
    for read_only in [false, true] {
        let err =
            CommitLog::open(&[remote.path()], Options::default().read_only(read_only)).unwrap_err();
        assert!(err.to_string().contains("is a remote tier"), "{err}");
    }
    assert!(!remote.path().join("rmqlog.meta").exists());
}
