//! Finding the end of a log after a crash, and cutting what lies beyond it.
//!
//! The scan starts at the checkpoint's flushed offset (everything below it was synced, so it is
//! never cut), or after a process crash at this boot's recovery point, and validates each record:
//! magic, length bounds, header CRC, stored physical offset, body CRC. The first invalid record
//! ends the log. A writer then zeroes the rest of that segment and removes later segments, so a
//! stale record can never be accepted by a later scan.

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use crate::error::{IoContext, Result};
use crate::storage::checkpoint::Checkpoint;
use crate::storage::counts;
use crate::storage::fs::remove_durably;
use crate::storage::record::{validate, Slot};
use crate::storage::segment::{Counted, Mapping, Segment};
use crate::storage::segments::SegmentList;
use crate::storage::tail_hint::TailHint;

/// Where a scan of the tail stopped.
#[derive(Debug, Clone)]
pub struct Tail {
    /// Physical offset just past the last valid record (or of the next segment's start).
    pub end: u64,
    /// Largest timestamp seen by the scan (0 if it saw no record).
    pub last_timestamp_ms: u64,
    /// Why the scan stopped (for the log).
    pub stopped: &'static str,
    /// The record counts the scan learnt: of each segment it walked from where its count was
    /// known. Given to the segments by [`Tail::keep_counts`] once the caller knows its end.
    counted: Vec<(Arc<Segment>, Counted)>,
}

impl Tail {
    /// Gives the segments the counts the scan learnt that reach no further than `end` (the
    /// caller may end the log below where the scan did: the published end).
    pub fn keep_counts(&self, end: u64) {
        for (seg, c) in &self.counted {
            if seg.start() + c.upto <= end {
                seg.note_counted(*c);
            }
        }
    }
}

/// Walks valid records from `from`, a record boundary, to the end of the log. Sets each visited
/// segment's written position: full for segments the log continues past, the end for the last.
/// Counts the records of each segment it walks from where that segment's count is known (see
/// [`Tail::keep_counts`]).
pub fn find_end(list: &SegmentList, from: u64, max_body: usize) -> Result<Tail> {
    let mut tail = Tail {
        end: from,
        last_timestamp_ms: 0,
        stopped: "end of segments",
        counted: Vec::new(),
    };
    let Some(first) = list.first() else {
        return Ok(tail);
    };
    let from = from.max(first.start());
    tail.end = from;
    let Some(mut idx) = list.index_of(from) else {
        return Ok(tail);
    };
    let segs = list.as_slice();
    // The log continues past every segment before the one the scan starts in: all sealed.
    for seg in segs[..idx].iter().filter(|s| !s.is_remote()) {
        seg.set_written(seg.size());
    }
    let mut pos = from - segs[idx].start();
    loop {
        let seg = &segs[idx];
        if !seg.is_local() {
            // A hole left by a lost directory, or a sealed segment only in the remote tier: the
            // log goes on after it.
            if idx + 1 < segs.len() {
                idx += 1;
                pos = 0;
                continue;
            }
            tail.end = if seg.is_remote() {
                seg.start() + seg.written()
            } else {
                seg.end()
            };
            return Ok(tail);
        }
        let map = seg.map()?;
        let size = seg.size() as usize;
        let known = Some(seg.counted()).filter(|c| c.upto == pos);
        let mut records = 0;
        let stopped = loop {
            let rest = map.bytes(pos as usize, size);
            match validate(rest, seg.start() + pos, max_body) {
                Slot::Record(h) => {
                    tail.last_timestamp_ms = tail.last_timestamp_ms.max(h.timestamp_ms);
                    pos += u64::from(h.len);
                    records += 1;
                }
                Slot::EndOfSegment => break None,
                other => break other.defect(),
            }
        };
        if let Some(k) = known {
            let upto = if stopped.is_none() { seg.size() } else { pos };
            let c = Counted {
                upto,
                records: k.records + records,
            };
            tail.counted.push((Arc::clone(seg), c));
        }
        match stopped {
            None if idx + 1 < segs.len() => {
                seg.set_written(seg.size());
                idx += 1;
                pos = 0;
            }
            None => {
                // Sealed, with no next segment yet: the next record goes to the next segment.
                seg.set_written(seg.size());
                tail.end = seg.end();
                return Ok(tail);
            }
            Some(why) => {
                seg.set_written(pos);
                tail.end = seg.start() + pos;
                tail.stopped = why;
                return Ok(tail);
            }
        }
    }
}

/// The offset after the record (or filler) at `offset` in `seg`, from its header alone.
pub(crate) fn next_boundary(seg: &Segment, map: &Mapping, offset: u64, max: u64) -> Result<u64> {
    let pos = (offset - seg.start()) as usize;
    let limit = max.min(seg.end()).saturating_sub(seg.start()) as usize;
    if pos >= limit {
        return Ok(seg.end());
    }
    Ok(seg
        .header_at(map, offset)?
        .map_or(seg.end(), |h| offset + u64::from(h.len)))
}

/// Finds the end of the log: trusted from a clean checkpoint, else a scan of the tail from the
/// flushed offset, or from this boot's recovery point when that is further (see
/// [`crate::storage::tail_hint`]), ending at `published` if it is below what the scan found (the end the
/// last writer published in this page cache's life: see [`crate::shared::control`]). A writer cuts what
/// lies beyond. Returns the list, the end and the last timestamp.
pub(crate) fn recover(
    list: SegmentList,
    ckpt: Option<&Checkpoint>,
    hint: Option<&TailHint>,
    published: Option<u64>,
    writer: bool,
) -> Result<(SegmentList, u64, u64)> {
    let ckpt_ts = ckpt.map_or(0, |c| c.max_timestamp_ms);
    if let Some(c) = ckpt.filter(|c| c.clean) {
        let end = c.max_offset;
        for s in list.as_slice() {
            s.set_written(end.clamp(s.start(), s.end()) - s.start());
        }
        counts::forget_past(&list, end);
        let list = if writer {
            cut_empty_tail(list, end)?
        } else {
            list
        };
        return Ok((list, end, ckpt_ts));
    }
    let Some(first) = list.first() else {
        return Ok((list, ckpt.map_or(0, |c| c.flushed_offset), ckpt_ts));
    };
    let flushed = ckpt.map_or(first.start(), |c| c.flushed_offset);
    // The hint must name a segment of this listing: then it is a record boundary.
    let hint = hint.filter(|h| {
        h.offset > flushed && list.find(h.offset).is_some_and(|s| s.start() == h.offset)
    });
    let from = hint.map_or(flushed, |h| h.offset);
    let hint_ts = hint.map_or(0, |h| h.max_timestamp_ms);
    let mut tail = find_end(&list, from, u32::MAX as usize)?;
    // Records past the published end were never acknowledged (the rest of a batch, or a record,
    // whose writer died before publishing it): cut, so a batch is all or nothing.
    if let Some(p) = published.filter(|p| (from..tail.end).contains(p)) {
        if writer {
            log::warn!(
                "records [{p}, {}) were written but never published (their writer died \
                 mid-append): cut",
                tail.end
            );
        } else {
            // A reader: a live writer may be in the middle of appending them.
            log::debug!(
                "records [{p}, {}) are not published yet: not read",
                tail.end
            );
        }
        tail.end = p;
        if let Some(seg) = list.find(p) {
            seg.set_written(p - seg.start());
        }
    }
    // Counts given from rmqlog.counts hold below the flushed offset, which no recovery cuts
    // unless damage did.
    counts::forget_past(&list, tail.end);
    tail.keep_counts(tail.end);
    log::info!(
        "recovered the log end at {} (scanned from {from}{}: {})",
        tail.end,
        if hint.is_some() {
            ", this boot's recovery point"
        } else {
            ""
        },
        tail.stopped
    );
    let list = if writer {
        cut(&list, tail.end)?
    } else {
        list.truncated_before(tail.end + 1)
    };
    let last_ts = ckpt_ts.max(hint_ts).max(tail.last_timestamp_ms);
    Ok((list, tail.end, last_ts))
}

/// After a clean close the end is trusted; segments wholly past it can only be empty.
fn cut_empty_tail(list: SegmentList, end: u64) -> Result<SegmentList> {
    if list.last().is_some_and(|s| s.start() > end) {
        return cut(&list, end);
    }
    Ok(list)
}

/// Cuts the log at `end`: zeroes every non-zero byte from `end` to the end of its segment (no hole
/// punch: a later write through the map must find allocated blocks), syncs it, then removes every
/// later segment and syncs its directory. Returns the list without the removed segments.
pub fn cut(list: &SegmentList, end: u64) -> Result<SegmentList> {
    let Some(idx) = list.index_of(end) else {
        return Ok(list.clone()); // `end` is the end of the last segment: nothing after it
    };
    let seg = &list.as_slice()[idx];
    if seg.is_local() {
        zero_from(seg.path(), end - seg.start(), seg.size())?;
    }
    for later in &list.as_slice()[idx + 1..] {
        log::warn!(
            "recovery removes {} (after the end of the log)",
            later.path().display()
        );
        remove_durably(later.path())?;
    }
    Ok(list.truncated_before(seg.end()))
}

fn zero_from(path: &std::path::Path, from: u64, size: u64) -> Result<()> {
    const CHUNK: usize = 1 << 20;
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .ctx("opening segment", path)?;
    let zeros = vec![0u8; CHUNK];
    let mut buf = vec![0u8; CHUNK];
    let mut at = from;
    let mut dirty = false;
    while at < size {
        let n = (size - at).min(CHUNK as u64) as usize;
        file.read_exact_at(&mut buf[..n], at)
            .ctx("reading segment", path)?;
        if let Some(first) = buf[..n].iter().position(|&b| b != 0) {
            let last = buf[..n].iter().rposition(|&b| b != 0).unwrap_or(first);
            file.write_all_at(&zeros[first..=last], at + first as u64)
                .ctx("zeroing segment tail", path)?;
            dirty = true;
        }
        at += n as u64;
    }
    if dirty {
        log::warn!(
            "recovery zeroed the tail of {} from position {from}",
            path.display()
        );
        file.sync_data().ctx("syncing segment", path)?;
    }
    Ok(())
}
