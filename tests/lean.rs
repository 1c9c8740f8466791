//! The lean core, built without the cargo feature `tier`: what needs the tier is refused with
//! `Error::FeatureMissing`, naming the feature, and nothing the store holds is created or changed. Compiled only
//! in such a build (`make test-rust` runs it beside the doc tests, on the same lean build).
#![cfg(not(feature = "tier"))]
#![allow(clippy::unwrap_used)] // tests: a failed unwrap is the failure report

mod common;

use std::path::Path;

use common::{dirs, quiet};
use rmqlog::{CommitLog, Error, Options, TierOptions};

fn feature_missing<T: std::fmt::Debug>(opened: rmqlog::Result<T>, what: &str) -> String {
    match opened {
        Err(
            e @ Error::FeatureMissing {
                feature: "tier", ..
            },
        ) => {
            let msg = e.to_string();
            assert!(msg.contains(what), "{msg:?} should name {what:?}");
            assert!(msg.contains("cargo feature `tier`"), "{msg:?}");
            msg
        }
        other => panic!("expected FeatureMissing for {what}, got {other:?}"),
    }
}

#[test]
fn the_build_says_which_features_it_has() {
    assert!(!rmqlog::FEATURES.contains(&"tier"));
}

#[test]
fn a_tier_option_is_refused_before_anything_is_created() {
    let (root, d) = dirs(2);
    let tier = TierOptions::new(format!("file://{}", root.path().join("tier").display()));
    let opened = CommitLog::open(&d, quiet().tier(Some(tier)));
    feature_missing(opened, "the tier \"file://");
    assert!(d.iter().all(|p| !p.exists()), "no directory was created");
}

#[test]
fn a_tier_url_is_refused() {
    for url in ["s3://bucket/logs/a", "file:///nonexistent/tier"] {
        let opened = CommitLog::open(&[url], Options::default().read_only(true));
        feature_missing(opened, &format!("opening the tier URL {url:?}"));
    }
}

#[test]
fn listing_a_fleet_is_refused() {
    let none = std::collections::BTreeMap::new();
    let listed = rmqlog::tier_stores("s3://bucket/logs", &none);
    feature_missing(listed, "listing the stores under \"s3://bucket/logs\"");
}

/// A store whose checkpoint records a tier (written by a build with the feature) may have sealed
/// segments only in the object store: a lean build refuses it, writer, shared writer and reader
/// alike, and leaves every file as it was.
#[test]
fn a_store_that_ships_to_a_tier_is_refused_and_left_alone() {
    let (_root, d) = store_of_one_record();
    record_a_tier(&d[0].join("rmqlog.meta"), "s3://bucket/logs/a");
    let before = snapshot(&d[0]);
    for opts in [quiet(), quiet().exclusive(false), quiet().read_only(true)] {
        let msg = feature_missing(CommitLog::open(&d, opts), "s3://bucket/logs/a");
        assert!(msg.contains("ships its sealed segments"), "{msg:?}");
        assert_eq!(snapshot(&d[0]), before, "the open changed the store");
    }
}

/// With its checkpoint lost, a tiered store's remote segments are known only to the manifest's
/// local copy (`rmqlog.tier`): a lean build refuses that store too, and changes nothing.
#[test]
fn a_store_whose_manifest_copy_lists_remote_segments_is_refused_and_left_alone() {
    let (_root, d) = store_of_one_record();
    std::fs::remove_file(d[0].join("rmqlog.meta")).unwrap();
    let entry = r#"{"start":0,"size":4096,"written":4096,"crc32c":1,"modified_ms":1}"#;
    let copy =
        format!(r#"{{"format":1,"store_id":"s","version":2,"min_offset":0,"segments":[{entry}]}}"#);
    std::fs::write(d[0].join("rmqlog.tier"), copy).unwrap();
    let before = snapshot(&d[0]);
    for opts in [quiet(), quiet().read_only(true)] {
        let msg = feature_missing(CommitLog::open(&d, opts), "1 segments in a remote tier");
        assert!(msg.contains("rmqlog.tier"), "{msg:?}");
        assert_eq!(snapshot(&d[0]), before, "the open changed the store");
    }
}

/// A closed store in one directory, holding one record.
fn store_of_one_record() -> (tempfile::TempDir, Vec<std::path::PathBuf>) {
    let (root, d) = dirs(1);
    let log = CommitLog::open(&d, quiet()).unwrap();
    log.append(b"kept").unwrap();
    log.close().unwrap();
    (root, d)
}

/// Every file of `dir` with its length and CRC-32, sorted by name; but `rmqlog.join`, the empty
/// file a shared open locks first, before it reads anything.
fn snapshot(dir: &Path) -> Vec<(String, usize, u32)> {
    let mut files: Vec<(String, usize, u32)> = std::fs::read_dir(dir)
        .unwrap()
        .filter(|e| e.as_ref().map_or(true, |e| e.file_name() != "rmqlog.join"))
        .map(|e| {
            let e = e.unwrap();
            let name = e.file_name().to_string_lossy().into_owned();
            let bytes = std::fs::read(e.path()).unwrap();
            (name, bytes.len(), crc32(&bytes))
        })
        .collect();
    files.sort();
    files
}

/// Rewrites the checkpoint at `path` (a JSON line and its CRC-32 in hex) as a tiered store's.
fn record_a_tier(path: &Path, url: &str) {
    let text = String::from_utf8(std::fs::read(path).unwrap()).unwrap();
    let json = text.lines().next().unwrap();
    assert!(json.contains(r#""tier":null"#), "{json}");
    let mark = format!(r#""tier":{{"url":"{url}","manifest_version":3}}"#);
    let json = json.replace(r#""tier":null"#, &mark);
    let framed = format!("{json}\n{:08x}\n", crc32(json.as_bytes()));
    let mut bytes = framed.into_bytes();
    bytes.resize(bytes.len().max(text.len()), b'\n');
    std::fs::write(path, bytes).unwrap();
}

/// CRC-32 (IEEE), as the metadata files' framing uses it.
fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = (crc >> 1) ^ (0xEDB8_8320 & (crc & 1).wrapping_neg());
        }
    }
    !crc
}
