//! Reads: one record by offset, ordered scans, and the timestamp search.

use std::ops::Deref;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::log::Shared;
use crate::record::{
    body_crc, decode, has_record_magic, Slot, FILLER_LEN, FILLER_MAGIC, HEADER_LEN,
};
use crate::segment::{Mapping, Segment};
use crate::segments::SegmentList;

/// A validated record. Derefs to the body; keeps the segment's map alive (also past `close()` and
/// past the deletion of the file).
#[derive(Debug, Clone)]
pub struct RecordRef {
    map: Arc<Mapping>,
    body_start: usize,
    body_len: usize,
    offset: u64,
    timestamp_ms: u64,
    next_offset: u64,
    segment_start: u64,
}

impl RecordRef {
    /// Physical offset of the record.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Store timestamp in milliseconds since the Unix epoch.
    pub fn timestamp_ms(&self) -> u64 {
        self.timestamp_ms
    }

    /// Offset of the next record (after an end-of-segment filler, the next segment's start).
    pub fn next_offset(&self) -> u64 {
        self.next_offset
    }

    /// Start offset of the segment holding the record.
    pub fn segment_start(&self) -> u64 {
        self.segment_start
    }

    /// The body.
    pub fn body(&self) -> &[u8] {
        self.map
            .bytes(self.body_start, self.body_start + self.body_len)
    }

    /// The map holding the record, and the body's byte range inside it (for zero-copy exports).
    pub fn mapping(&self) -> (&Arc<Mapping>, std::ops::Range<usize>) {
        (&self.map, self.body_start..self.body_start + self.body_len)
    }
}

impl Deref for RecordRef {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.body()
    }
}

/// What a validated position holds.
enum At {
    Record(RecordRef),
    EndOfSegment,
    Invalid(&'static str),
    /// A record's magic is here but the header fails validation: a damaged record.
    Damaged(&'static str),
    BadBody {
        stored: u32,
        actual: u32,
    },
}

/// Decodes the record at `offset` in `seg`, reading no byte at or past `max` (the published end).
fn record_at(seg: &Segment, offset: u64, max: u64, max_body: usize) -> Result<At> {
    let map = seg.map()?;
    let pos = (offset - seg.start()) as usize;
    let limit = (max.min(seg.end()) - seg.start()) as usize;
    let size = seg.size() as usize;
    if pos >= limit {
        return Ok(At::EndOfSegment);
    }
    let h = match decode(map.bytes(pos, limit), offset, max_body) {
        Slot::Record(h) => h,
        Slot::EndOfSegment => return Ok(At::EndOfSegment),
        // A filler is checked against the whole segment, not the published part.
        Slot::Invalid(why) => {
            return Ok(match decode(map.bytes(pos, size), offset, max_body) {
                Slot::EndOfSegment if limit == size => At::EndOfSegment,
                _ if has_record_magic(map.bytes(pos, limit)) => At::Damaged(why),
                _ => At::Invalid(why),
            });
        }
    };
    let body_start = pos + HEADER_LEN;
    let body_len = h.body_len();
    let actual = body_crc(map.bytes(body_start, body_start + body_len));
    if actual != h.body_crc {
        return Ok(At::BadBody {
            stored: h.body_crc,
            actual,
        });
    }
    let npos = pos + h.len as usize;
    let next_is_filler = size - npos < FILLER_LEN
        || (npos + FILLER_LEN <= limit
            && map.bytes(npos + 4, npos + 8) == FILLER_MAGIC.to_le_bytes());
    let next_offset = if next_is_filler {
        seg.end()
    } else {
        offset + u64::from(h.len)
    };
    Ok(At::Record(RecordRef {
        map,
        body_start,
        body_len,
        offset,
        timestamp_ms: h.timestamp_ms,
        next_offset,
        segment_start: seg.start(),
    }))
}

/// The offset after the record (or filler) at `offset` in `seg`, from its header alone.
pub(crate) fn next_boundary(seg: &Segment, offset: u64, max: u64) -> Result<u64> {
    let map = seg.map()?;
    let pos = (offset - seg.start()) as usize;
    let limit = (max.min(seg.end()) - seg.start()) as usize;
    if pos >= limit {
        return Ok(seg.end());
    }
    match decode(
        map.bytes(pos, seg.size() as usize),
        offset,
        u32::MAX as usize,
    ) {
        Slot::Record(h) => Ok(offset + u64::from(h.len)),
        Slot::EndOfSegment => Ok(seg.end()),
        Slot::Invalid(why) => Err(Error::corruption(
            Some(seg.path().to_path_buf()),
            Some(offset),
            format!("no valid record header while walking the segment: {why}"),
        )),
    }
}

fn body_corruption(seg: &Segment, offset: u64, stored: u32, actual: u32) -> Error {
    Error::corruption(
        Some(seg.path().to_path_buf()),
        Some(offset),
        format!("body CRC mismatch: stored {stored:#010x}, computed {actual:#010x}"),
    )
}

impl Shared {
    fn max_body(&self) -> usize {
        // Records written before a `max_message_size` change stay readable.
        u32::MAX as usize
    }

    /// [`CommitLog::read`](crate::CommitLog::read).
    pub fn read(&self, offset: u64) -> Result<RecordRef> {
        let max = self.max_offset.load(Ordering::Acquire);
        if offset < self.min_offset.load(Ordering::Acquire) || offset >= max {
            return Err(self.range_error(offset.into()));
        }
        let list = self.segments.load();
        let seg = list
            .find(offset)
            .ok_or_else(|| self.range_error(offset.into()))?;
        let at = record_at(seg, offset, max, self.max_body()).map_err(|e| {
            // Deleted by the cleaner between the range check and the mapping.
            if offset < self.min_offset.load(Ordering::Acquire) {
                self.range_error(offset.into())
            } else {
                e
            }
        })?;
        match at {
            At::Record(r) => Ok(r),
            At::BadBody { stored, actual } => Err(body_corruption(seg, offset, stored, actual)),
            At::EndOfSegment => Err(Error::InvalidOffset {
                offset,
                reason: "it lies in the unused end of a segment".into(),
            }),
            At::Invalid(why) => Err(Error::InvalidOffset {
                offset,
                reason: why.into(),
            }),
            At::Damaged(why) => Err(Error::corruption(
                Some(seg.path().to_path_buf()),
                Some(offset),
                format!("damaged record header: {why}"),
            )),
        }
    }

    /// [`CommitLog::offset_for_timestamp`](crate::CommitLog::offset_for_timestamp).
    pub fn offset_for_timestamp(self: &Arc<Self>, timestamp_ms: u64) -> Result<u64> {
        let max = self.max_offset.load(Ordering::Acquire);
        let list = self.segments.load_full();
        let segs = list.as_slice();
        // Segments whose first record is older than the target: the answer is in the last of them
        // or at the start of the next one.
        let mut lo = 0;
        let mut hi = segs.len();
        while lo < hi {
            let mid = (lo + hi) / 2;
            let older = match record_at(&segs[mid], segs[mid].start(), max, self.max_body()) {
                Ok(At::Record(r)) => r.timestamp_ms < timestamp_ms,
                _ => false,
            };
            if older {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        let from = match lo.checked_sub(1) {
            Some(i) => segs[i].start(),
            None => self.min_offset.load(Ordering::Acquire),
        };
        let from = from.max(self.min_offset.load(Ordering::Acquire));
        for rec in Scan::over(Arc::clone(self), list, from, max, max) {
            let rec = rec?;
            if rec.timestamp_ms >= timestamp_ms {
                return Ok(rec.offset);
            }
        }
        Ok(max)
    }
}

/// Records in offset order over a fixed range; yields an error and stops at a corrupt record.
#[derive(Debug)]
pub struct Scan {
    shared: Arc<Shared>,
    list: Arc<SegmentList>,
    next: u64,
    /// Records starting at or after this are not yielded.
    end: u64,
    /// The published end when the scan began: no byte at or past it is read.
    max: u64,
    seg: usize,
    done: bool,
}

impl Scan {
    pub(crate) fn new(shared: Arc<Shared>, start: Option<u64>, end: Option<u64>) -> Result<Scan> {
        let max = shared.max_offset.load(Ordering::Acquire);
        let min = shared.min_offset.load(Ordering::Acquire);
        let end = end.map_or(max, |e| e.min(max));
        let start = start.unwrap_or(min);
        if start < min {
            return Err(shared.range_error(start.into()));
        }
        let list = shared.segments.load_full();
        if start < end {
            // `start` must be a record start, or the end of a segment's records (an earlier
            // `max_offset`, since sealed by a filler): the scan then goes on in the next segment.
            let seg = list
                .find(start)
                .ok_or_else(|| shared.range_error(start.into()))?;
            let at = if seg.is_lost() {
                At::EndOfSegment // a hole: the scan skips it
            } else {
                record_at(seg, start, max, shared.max_body())?
            };
            match at {
                At::Record(_) | At::EndOfSegment => {}
                At::BadBody { stored, actual } => {
                    return Err(body_corruption(seg, start, stored, actual))
                }
                At::Damaged(why) => {
                    return Err(Error::corruption(
                        Some(seg.path().to_path_buf()),
                        Some(start),
                        format!("damaged record header: {why}"),
                    ))
                }
                At::Invalid(why) => {
                    return Err(Error::InvalidOffset {
                        offset: start,
                        reason: why.into(),
                    })
                }
            }
        }
        Ok(Scan::over(shared, list, start, end, max))
    }

    fn over(shared: Arc<Shared>, list: Arc<SegmentList>, start: u64, end: u64, max: u64) -> Scan {
        let seg = list.index_of(start).unwrap_or(0);
        Scan {
            shared,
            list,
            next: start,
            end: end.min(max),
            max,
            seg,
            done: start >= end,
        }
    }

    /// Offset of the next record the scan will yield (or its end).
    pub fn position(&self) -> u64 {
        self.next
    }

    fn step(&mut self) -> Result<Option<RecordRef>> {
        let max_body = self.shared.max_body();
        loop {
            if self.next >= self.end {
                return Ok(None);
            }
            let segs = self.list.as_slice();
            while self.seg < segs.len() && segs[self.seg].end() <= self.next {
                self.seg += 1;
            }
            let Some(seg) = segs.get(self.seg) else {
                return Ok(None);
            };
            if !seg.contains(self.next) {
                return Err(self.shared.range_error(self.next.into()));
            }
            if seg.is_lost() {
                self.next = seg.end();
                continue;
            }
            let next = self.next;
            let at = record_at(seg, next, self.max, max_body).map_err(|e| {
                if next < self.shared.min_offset.load(Ordering::Acquire) {
                    self.shared.range_error(next.into())
                } else {
                    e
                }
            })?;
            match at {
                At::Record(r) => {
                    self.next = r.next_offset;
                    return Ok(Some(r));
                }
                At::EndOfSegment => self.next = seg.end(),
                At::BadBody { stored, actual } => {
                    return Err(body_corruption(seg, self.next, stored, actual))
                }
                At::Invalid(why) | At::Damaged(why) => {
                    return Err(Error::corruption(
                        Some(seg.path().to_path_buf()),
                        Some(self.next),
                        format!("no valid record where the scan expected one: {why}"),
                    ))
                }
            }
        }
    }
}

impl Iterator for Scan {
    type Item = Result<RecordRef>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let item = self.step().transpose();
        if !matches!(item, Some(Ok(_))) {
            self.done = true;
        }
        item
    }
}
