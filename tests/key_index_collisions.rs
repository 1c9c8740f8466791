#![allow(clippy::unwrap_used)] // tests: a failed unwrap is the failure report
//! Lookups under forced hash collisions (every key hashes alike: fail point
//! `key_index::collide`): every chain holds every key, and no lookup returns another key's
//! record, and no append with a message id takes another id for its own. A file of its own:
//! the fail point is global to the test process.
#![cfg(feature = "failpoints")]

mod common;

use std::collections::BTreeMap;

use rmqlog::{CommitLog, Message, Options};

fn opts() -> Options {
    common::quiet().segment_size(16 * 1024)
}

#[test]
fn forced_hash_collisions_never_return_another_keys_record() {
    let scenario = fail::FailScenario::setup();
    fail::cfg("key_index::collide", "return").unwrap();
    let t = tempfile::tempdir().unwrap();
    let log = CommitLog::open(&[t.path()], opts()).unwrap();
    let mut model: BTreeMap<Vec<u8>, Vec<u64>> = BTreeMap::new();
    for i in 0..300u64 {
        let key = format!("k{}", i % 23).into_bytes();
        let off = log
            .append_message(&Message::new(&common::body(i, 60)).key(&key))
            .unwrap();
        model.entry(key).or_default().push(off);
    }
    for (key, offsets) in &model {
        assert_eq!(&log.lookup(key, None, None).unwrap(), offsets);
    }
    assert!(log.lookup(b"k99", None, None).unwrap().is_empty());
    drop(log);
    scenario.teardown();
}

/// Under the same collisions, keys and message ids share every chain: an append with an id finds
/// the record with that id, never one whose key or id merely hashes alike.
#[test]
fn forced_hash_collisions_never_make_a_new_id_a_duplicate() {
    let scenario = fail::FailScenario::setup();
    fail::cfg("key_index::collide", "return").unwrap();
    let t = tempfile::tempdir().unwrap();
    let log = CommitLog::open(&[t.path()], opts()).unwrap();
    let mut first: BTreeMap<Vec<u8>, u64> = BTreeMap::new();
    for i in 0..300u64 {
        let id = format!("k{}", i % 151).into_bytes();
        // The key of every record is some other record's id.
        let key = format!("k{}", (i + 1) % 151).into_bytes();
        let off = log
            .append_message(&Message::new(&common::body(i, 60)).key(&key).id(&id))
            .unwrap();
        assert_eq!(off, *first.entry(id).or_insert(off));
    }
    assert_eq!(log.scan(None, None).unwrap().count(), 151);
    drop(log);
    scenario.teardown();
}
