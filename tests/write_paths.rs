#![allow(clippy::unwrap_used)] // tests: a failed unwrap is the failure report
//! Records reach the segment three ways: copied through the map (warmed ahead by zeros written
//! with `pwrite`), written with `pwritev` (16 KiB and more, and every record in sync mode), and
//! filler at a roll. Whatever the mix, every record reads back, before and after a reopen, and
//! the log verifies clean.

use rmqlog::{CommitLog, FlushMode, Options, HEADER_LEN};

const SEG: u64 = 256 * 1024;

/// Sizes around every boundary: empty, small, the direct-write threshold (16 KiB with the
/// header), a warming chunk (256 KiB, which does not fit a segment with its header), and a body
/// that only just fits a segment.
fn sizes() -> Vec<usize> {
    let direct = 16 * 1024 - HEADER_LEN;
    let mut v = vec![
        0,
        1,
        100,
        1024,
        direct - 1,
        direct,
        direct + 1,
        65536,
        200_000,
    ];
    v.push(SEG as usize - HEADER_LEN);
    v.extend([7, 4096, 3 * 4096 + 5]);
    v
}

fn body(i: usize, len: usize) -> Vec<u8> {
    (0..len)
        .map(|k| (i * 131 + k * 7 + (k >> 8)) as u8)
        .collect()
}

fn check(log: &CommitLog, written: &[(u64, Vec<u8>)]) {
    for (off, b) in written {
        assert_eq!(&*log.read(*off).unwrap(), b.as_slice(), "record at {off}");
    }
    let scanned: Vec<u64> = log
        .scan(None, None)
        .unwrap()
        .map(|r| r.unwrap().offset())
        .collect();
    assert_eq!(scanned, written.iter().map(|(o, _)| *o).collect::<Vec<_>>());
    assert_eq!(log.verify().unwrap(), vec![]);
}

fn run(flush: FlushMode) {
    let t = tempfile::tempdir().unwrap();
    let opts = || {
        Options::default()
            .segment_size(SEG)
            .max_message_size(SEG as u32)
            .flush(flush)
    };
    let log = CommitLog::open(&[t.path()], opts()).unwrap();
    let mut written = Vec::new();
    for round in 0..3 {
        for (i, len) in sizes().into_iter().enumerate() {
            let b = body(round * 100 + i, len);
            written.push((log.append(&b).unwrap(), b));
        }
        // A batch mixing both paths, across a roll.
        let batch: Vec<Vec<u8>> = sizes()
            .into_iter()
            .filter(|&l| l < 100_000)
            .enumerate()
            .map(|(i, len)| body(round * 100 + 50 + i, len))
            .collect();
        let offsets = log.append_batch(&batch).unwrap();
        written.extend(offsets.into_iter().zip(batch));
    }
    check(&log, &written);
    log.close().unwrap();

    let log = CommitLog::open(&[t.path()], opts()).unwrap();
    check(&log, &written);
    // Appends continue after the reopen, where the active file warms from the recovered end.
    let b = body(999, 20_000);
    written.push((log.append(&b).unwrap(), b));
    let b = body(998, 10);
    written.push((log.append(&b).unwrap(), b));
    check(&log, &written);
    log.close().unwrap();
}

#[test]
fn every_size_reads_back_without_sync() {
    run(FlushMode::None);
}

#[test]
fn every_size_reads_back_in_async_mode() {
    run(FlushMode::Async);
}

#[test]
fn every_size_reads_back_in_sync_mode() {
    run(FlushMode::Sync);
}
