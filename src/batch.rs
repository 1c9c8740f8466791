//! Columnar batches of records, laid out as Arrow buffers, for bulk readers (the Spark source).

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::reader::{locate, next_boundary, RecordRef, Scan};
use crate::state::State;

/// Records `[start, next)` of a log as columns. `bodies` hold the records (and their maps); the
/// byte columns are built by the caller from them, so the bodies are copied once, into the batch.
#[derive(Debug, Default)]
pub struct Batch {
    /// The records, in offset order.
    pub records: Vec<RecordRef>,
    /// Physical offset of each record.
    pub offsets: Vec<i64>,
    /// Store timestamp of each record, in microseconds (Arrow `timestamp('us')`).
    pub timestamps_us: Vec<i64>,
    /// Start offset of each record's segment.
    pub segments: Vec<i64>,
    /// Arrow `binary` offsets: `n + 1` entries, body `i` is `data[value_offsets[i]..value_offsets[i+1]]`.
    pub value_offsets: Vec<i32>,
    /// Where the next batch starts (`end` when the range is done).
    pub next: u64,
}

impl Batch {
    /// Total body bytes.
    pub fn data_len(&self) -> usize {
        self.value_offsets.last().map_or(0, |&v| v as usize)
    }
}

/// [`CommitLog::read_batch`](crate::CommitLog::read_batch).
pub(crate) fn read_batch(
    state: &Arc<State>,
    start: u64,
    end: u64,
    max_records: usize,
    max_bytes: usize,
) -> Result<Batch> {
    let max_bytes = max_bytes.min(i32::MAX as usize);
    let mut batch = Batch {
        value_offsets: vec![0],
        next: end,
        ..Batch::default()
    };
    if start >= end {
        batch.next = start;
        return Ok(batch);
    }
    let mut scan = Scan::new(Arc::clone(state), Some(start), Some(end))?;
    let mut bytes = 0usize;
    while batch.records.len() < max_records.max(1) {
        let at = scan.position();
        let Some(rec) = scan.next() else { break };
        let rec = rec?;
        if rec.len() > i32::MAX as usize {
            return Err(Error::corruption(
                None,
                Some(rec.offset()),
                "a body of 2 GiB or more does not fit an Arrow binary column",
            ));
        }
        if !batch.records.is_empty() && bytes + rec.len() > max_bytes {
            batch.next = at;
            return Ok(batch);
        }
        bytes += rec.len();
        batch.offsets.push(rec.offset() as i64);
        batch
            .timestamps_us
            .push((rec.timestamp_ms() as i64).saturating_mul(1000));
        batch.segments.push(rec.segment_start() as i64);
        batch.value_offsets.push(bytes as i32);
        batch.records.push(rec);
    }
    batch.next = scan.position().min(end);
    Ok(batch)
}

/// [`CommitLog::record_start_at_or_after`](crate::CommitLog::record_start_at_or_after).
pub(crate) fn record_start_at_or_after(state: &State, offset: u64) -> Result<u64> {
    let max = state.max_offset();
    let min = state.min_offset();
    if offset <= min {
        return Ok(min);
    }
    if offset >= max {
        return Ok(max);
    }
    let (seg, map) = locate(state, &mut state.segments_full(), offset)?;
    let mut at = seg.start().max(min);
    while at < offset {
        at = next_boundary(&seg, &map, at, max)?;
    }
    Ok(at.min(max))
}
