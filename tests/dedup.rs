#![allow(clippy::unwrap_used)] // tests: a failed unwrap is the failure report
#![cfg_attr(not(feature = "failpoints"), allow(unused, dead_code))]
//! Appends that happen once (docs/messages.md): an append with a message id already in the
//! window writes nothing and reports the record that has it, across segments, batches, reopens,
//! deleted indexes, shared writers, and a writer killed between publishing and indexing.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use rmqlog::{CommitLog, Message, Options};

const SEGMENT: u64 = 16 * 1024;

fn opts() -> Options {
    common::quiet().segment_size(SEGMENT)
}

fn id_of(i: u64) -> Vec<u8> {
    format!("msg-{i}").into_bytes()
}

/// Every record's id, in log order.
fn ids_in(log: &CommitLog) -> Vec<(u64, Option<Vec<u8>>)> {
    log.scan(None, None)
        .unwrap()
        .map(|r| {
            let r = r.unwrap();
            (r.offset(), r.props().unwrap().id.map(<[u8]>::to_vec))
        })
        .collect()
}

fn remove_indexes(dir: &Path) -> usize {
    let mut n = 0;
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "keys") {
            std::fs::remove_file(p).unwrap();
            n += 1;
        }
    }
    n
}

/// Random batches of ids from a small pool (repeats within a batch too), with keys and plain
/// records between, over many segments and three opens, one after the indexes were deleted:
/// each append's offsets and duplicates are the model's, and the log holds each id once.
#[test]
fn an_id_is_written_once_whatever_the_batches_segments_and_reopens() {
    let t = tempfile::tempdir().unwrap();
    let mut model: HashMap<Vec<u8>, u64> = HashMap::new();
    let mut rng = 0x2545_f491_4f6c_dd1d_u64;
    let mut next = |n: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % n
    };
    for round in 0..3 {
        if round == 2 {
            assert!(remove_indexes(t.path()) > 0);
        }
        let log = CommitLog::open(&[t.path()], opts()).unwrap();
        for _ in 0..120 {
            let n = 1 + next(6) as usize;
            let ids: Vec<Option<Vec<u8>>> = (0..n)
                .map(|_| (next(5) != 0).then(|| id_of(next(500))))
                .collect();
            let bodies: Vec<Vec<u8>> = (0..n).map(|i| common::body(i as u64, 200)).collect();
            let messages: Vec<Message<'_>> = bodies
                .iter()
                .zip(&ids)
                .map(|(b, id)| match id {
                    Some(id) => Message::new(b).id(id).key(b"k"),
                    None => Message::new(b),
                })
                .collect();
            let end = log.max_offset().unwrap();
            let got = log.append_messages(&messages).unwrap();
            let mut written = end;
            let mut duplicates = Vec::new();
            let mut batch: HashMap<&[u8], u64> = HashMap::new();
            for (i, id) in ids.iter().enumerate() {
                let expect = match id.as_deref().and_then(|id| model.get(id).or(batch.get(id))) {
                    Some(&at) => {
                        duplicates.push(i);
                        at
                    }
                    None => {
                        let at = got.offsets[i];
                        assert!(at >= written, "a new record at {at}, below {written}");
                        written = at + 1;
                        if let Some(id) = id {
                            batch.insert(id, at);
                        }
                        at
                    }
                };
                assert_eq!(got.offsets[i], expect, "record {i} of {ids:?}");
            }
            assert_eq!(got.duplicates, duplicates);
            model.extend(batch.into_iter().map(|(id, at)| (id.to_vec(), at)));
        }
        assert!(log.segments().unwrap().len() > 3);
    }
    let log = CommitLog::open(&[t.path()], opts()).unwrap();
    let mut seen: BTreeMap<Vec<u8>, u64> = BTreeMap::new();
    for (offset, id) in ids_in(&log) {
        if let Some(id) = id {
            assert!(seen.insert(id.clone(), offset).is_none(), "{id:?} twice");
            assert_eq!(model[&id], offset);
        }
    }
    assert_eq!(seen.len(), model.len());
}

/// Two shared writers of one store, in one process, appending the same ids in turns: each id is
/// written once, whichever appends it first.
#[test]
fn shared_writers_see_each_others_ids() {
    let t = tempfile::tempdir().unwrap();
    let a = CommitLog::open(&[t.path()], opts().exclusive(false)).unwrap();
    let b = CommitLog::open(&[t.path()], opts().exclusive(false)).unwrap();
    for i in 0..200 {
        let id = id_of(i / 2);
        let (first, second) = if i % 3 == 0 { (&a, &b) } else { (&b, &a) };
        let body = common::body(i, 200);
        let one = first.append_message(&Message::new(&body).id(&id)).unwrap();
        let two = second.append_message(&Message::new(&body).id(&id)).unwrap();
        assert_eq!(one, two);
    }
    let ids = ids_in(&a);
    assert_eq!(ids.len(), 100);
}

/// A window of a count: an id further back than that many records is written again.
#[test]
fn the_window_ends_by_count_and_by_time() {
    let t = tempfile::tempdir().unwrap();
    let log = CommitLog::open(&[t.path()], opts().dedup_window_records(Some(3))).unwrap();
    let first = log.append_message(&Message::new(b"a").id(b"x")).unwrap();
    log.append(b"1").unwrap();
    log.append(b"2").unwrap();
    // Three records from it to the end: still in the window.
    assert_eq!(
        log.append_message(&Message::new(b"a").id(b"x")).unwrap(),
        first
    );
    log.append(b"3").unwrap();
    let again = log.append_message(&Message::new(b"a").id(b"x")).unwrap();
    assert!(again > first);
    drop(log);
    // The window is the store's: a later open names no window and keeps the count.
    let log = CommitLog::open(&[t.path()], opts().dedup_window(Duration::from_millis(50))).unwrap();
    assert_eq!(
        log.recorded_settings()
            .unwrap()
            .unwrap()
            .dedup_window_records,
        Some(3)
    );
    std::thread::sleep(Duration::from_millis(120));
    let late = log.append_message(&Message::new(b"a").id(b"x")).unwrap();
    assert!(late > again, "an id older than the window is written again");
}

const CHILD_ENV: &str = "RMQLOG_DEDUP_DIR";

/// A shared writer in its own process: appends 40 records with ids, then stops for good between
/// publishing its next batch and indexing it (`append::published`), holding the append lock.
#[cfg(feature = "failpoints")]
#[test]
fn dedup_writer_process() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return; // run by the test below
    };
    let log = CommitLog::open(&[PathBuf::from(dir)], opts().exclusive(false)).unwrap();
    let bodies: Vec<Vec<u8>> = (0..80).map(|i| common::body(i, 300)).collect();
    let ids: Vec<Vec<u8>> = (0..80).map(id_of).collect();
    let messages: Vec<Message<'_>> = bodies
        .iter()
        .zip(&ids)
        .map(|(b, id)| Message::new(b).id(id))
        .collect();
    log.append_messages(&messages[..40]).unwrap();
    fail::cfg_callback("append::published", || {
        println!("paused");
        loop {
            std::thread::sleep(Duration::from_secs(1));
        }
    })
    .unwrap();
    log.append_messages(&messages[40..]).unwrap();
    unreachable!("the append pauses until the process is killed");
}

/// Records a killed writer published and never indexed: the next append with their ids (another
/// process, taking the dead one's lock over) finds them all.
#[cfg(feature = "failpoints")]
#[test]
fn ids_a_killed_writer_published_but_did_not_index_are_found() {
    let t = tempfile::tempdir().unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "dedup_writer_process",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, t.path())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    assert!(lines.any(|l| l.unwrap().contains("paused")));
    child.kill().unwrap();
    child.wait().unwrap();
    let log = CommitLog::open(&[t.path()], opts().exclusive(false)).unwrap();
    let before: BTreeMap<Vec<u8>, u64> = ids_in(&log)
        .into_iter()
        .map(|(o, id)| (id.unwrap(), o))
        .collect();
    assert_eq!(before.len(), 80, "the killed writer published both batches");
    let end = log.max_offset().unwrap();
    for i in (0..80).rev() {
        let id = id_of(i);
        let got = log
            .append_messages(&[Message::new(b"again").id(&id)])
            .unwrap();
        assert_eq!((got.offsets[0], got.duplicates), (before[&id], vec![0]));
    }
    assert_eq!(log.max_offset().unwrap(), end, "nothing written");
}

/// A segment moved to another directory between the append's listing of the segments and its
/// opening of that segment's file (held there by `lookup::listed`): the lookup takes the list
/// again and finds the id, every time.
#[cfg(feature = "failpoints")]
#[test]
fn a_segment_moved_while_an_append_looks_for_an_id_is_looked_in_where_it_went() {
    use std::sync::mpsc;
    use std::sync::{Arc, Mutex};

    let scenario = fail::FailScenario::setup();
    let t = tempfile::tempdir().unwrap();
    let dirs = [t.path().join("a"), t.path().join("b")];
    let o = opts;
    let first = {
        let log = CommitLog::open(&dirs, o()).unwrap();
        let first = log.append_message(&Message::new(b"x").id(b"old")).unwrap();
        for i in 0..400 {
            log.append(&common::body(i, 200)).unwrap();
        }
        first
    };
    // Without indexes, the lookup maps each segment to walk it.
    assert!(remove_indexes(&dirs[0]) + remove_indexes(&dirs[1]) > 0);
    let log = Arc::new(CommitLog::open(&dirs, o()).unwrap());
    let segments = log.segments().unwrap();
    assert!(segments.len() > 2);
    let (head, to) = match segments[0].path.starts_with(&dirs[0]) {
        true => (segments[0].start_offset, &dirs[1]),
        false => (segments[0].start_offset, &dirs[0]),
    };
    let (paused, resume) = (mpsc::channel::<()>(), mpsc::channel::<()>());
    let (tell, wait) = (Mutex::new(paused.0), Mutex::new(resume.1));
    let once = std::sync::atomic::AtomicBool::new(false);
    fail::cfg_callback("lookup::listed", move || {
        if !once.swap(true, std::sync::atomic::Ordering::SeqCst) {
            tell.lock().unwrap().send(()).unwrap();
            wait.lock().unwrap().recv().unwrap();
        }
    })
    .unwrap();
    let appender = {
        let log = Arc::clone(&log);
        std::thread::spawn(move || log.append_message(&Message::new(b"y").id(b"old")))
    };
    paused.1.recv().unwrap();
    log.move_segment(head, to).unwrap();
    resume.0.send(()).unwrap();
    assert_eq!(appender.join().unwrap().unwrap(), first);
    fail::remove("lookup::listed");
    scenario.teardown();
}
