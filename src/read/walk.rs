//! Walks over a local segment's record headers (no CRC), from a record start forward, noting a
//! start about every stride in the segment's index (`storage/boundaries.rs`), so that the next
//! walk into that part of the segment starts near its target. A known start is used only once
//! its record is checked again, whole ([`known`]), so a stale or damaged entry never leads a walk;
//! a walk notes no timestamp older than the one before it, so a damaged timestamp never leads a
//! search by time past its answer.

use crate::error::Result;
use crate::storage::record::{decode, validate, Slot};
use crate::storage::segment::{Mapping, Segment};

/// The offset of `found`, a start the segment's index gave with its timestamp, if the record
/// there is whole, at that offset, with that timestamp; else none, and the index is dropped.
pub(crate) fn known(seg: &Segment, map: &Mapping, found: Option<(u64, u64)>) -> Option<u64> {
    let (pos, ts) = found?;
    let at = seg.start() + pos;
    let rest = map.bytes(pos as usize, seg.size() as usize);
    match validate(rest, at, u32::MAX as usize) {
        Slot::Record(h) if h.timestamp_ms == ts => Some(at),
        _ => {
            if let Some(b) = seg.boundaries(map) {
                b.forget();
            }
            None
        }
    }
}

/// Where a walk stops.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Until {
    /// At the first record starting at or after this offset (its header is not read).
    Offset(u64),
    /// At the first record whose header's timestamp is at or after this one.
    Time(u64),
}

/// Walks `seg`'s records from `from` (a record start) to where `until` says, and returns that
/// offset, with the last record start walked before it (none when it stopped at `from`). A walk
/// reaching `limit` (no header is read at or past it) returns where it stopped; one reaching the
/// segment's end (or its filler: also where a walk to an offset stops) returns that end. A header
/// that does not decode is an error ([`Segment::header_at`]).
pub(crate) fn walk(
    seg: &Segment,
    map: &Mapping,
    from: u64,
    limit: u64,
    until: Until,
) -> Result<(u64, Option<u64>)> {
    let index = seg.boundaries(map);
    let stride = index.map_or(u64::MAX, |b| b.stride());
    let limit = limit.min(seg.end());
    let mut noted = from;
    let mut newest = 0;
    let mut before = None;
    let mut at = from;
    while at < limit {
        let pos = at - seg.start();
        if matches!(until, Until::Offset(o) if at >= o) {
            // The records' end (a filler) is no record start: the segment's end is the next.
            let rest = map.bytes(pos as usize, seg.size() as usize);
            if matches!(decode(rest, at, u32::MAX as usize), Slot::EndOfSegment) {
                return Ok((seg.end(), before));
            }
            break;
        }
        let Some(h) = seg.header_at(map, at)? else {
            return Ok((seg.end(), before));
        };
        if at - noted >= stride && h.timestamp_ms >= newest {
            if let Some(b) = index {
                b.note(pos, h.timestamp_ms);
            }
            noted = at;
        }
        newest = newest.max(h.timestamp_ms);
        if matches!(until, Until::Time(t) if h.timestamp_ms >= t) {
            break;
        }
        before = Some(at);
        at += u64::from(h.len);
    }
    Ok((at, before))
}
