//! `verify`: a full CRC walk of the log that modifies nothing and reports every bad range. It
//! counts the records it checks, and a segment whose count the log knows (see `read/count.rs`)
//! must hold that many: a count that differs is reported as a bad range too.

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::read::reader::locate;
use crate::state::State;
use crate::storage::record::{validate, Slot};
use crate::storage::segment::Segment;
use crate::storage::segments::SegmentList;

/// A damaged range: from the first bad byte to where valid records resume, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadRange {
    /// First offset of the damage (a record that fails validation).
    pub start: u64,
    /// Where valid records resume (a later record that validates, or the next segment).
    pub end: u64,
    /// What failed first.
    pub reason: String,
}

/// What a walk of the log found: the damaged ranges, and how many records it checked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Verified {
    /// One entry per damaged range; empty when clean.
    pub damaged: Vec<BadRange>,
    /// The valid records walked (those of the segments it read).
    pub records: u64,
}

/// The record at `pos` validates completely (header, stored offset, body CRC); its length.
fn valid_at(bytes: &[u8], offset: u64) -> Result<u64, &'static str> {
    match validate(bytes, offset, u32::MAX as usize) {
        Slot::Record(h) => Ok(u64::from(h.len)),
        Slot::EndOfSegment => Ok(0),
        other => Err(other.defect().unwrap_or("invalid")),
    }
}

/// Walks one segment's records in `[from, limit)` (relative), appending bad ranges; returns how
/// many valid records it walked.
fn verify_segment(
    state: &State,
    list: &mut Arc<SegmentList>,
    seg: &Segment,
    from: u64,
    limit: u64,
    out: &mut Vec<BadRange>,
) -> Result<u64> {
    let map = match locate(state, list, seg.start()).map(|(_, map)| map) {
        Ok(map) => map,
        // A file of the wrong length: the whole segment is damage (an I/O error is not).
        Err(e @ Error::Corruption { .. }) => {
            out.push(BadRange {
                start: seg.start() + from,
                end: seg.end(),
                reason: e.to_string(),
            });
            return Ok(0);
        }
        Err(e) => return Err(e),
    };
    let size = seg.size() as usize;
    let mut pos = from;
    let mut records = 0;
    while pos < limit {
        let bytes = map.bytes(pos as usize, size);
        match valid_at(bytes, seg.start() + pos) {
            Ok(0) => return Ok(records), // end-of-segment filler
            Ok(len) => {
                pos += len;
                records += 1;
            }
            Err(why) => {
                // Resume at the first later position holding a record that validates and names
                // itself (its stored offset equals its position), or at the segment's end.
                let mut resume = pos + 1;
                while resume < limit {
                    let b = map.bytes(resume as usize, size);
                    if matches!(valid_at(b, seg.start() + resume), Ok(n) if n > 0) {
                        break;
                    }
                    resume += 1;
                }
                let end = if resume < limit { resume } else { seg.size() };
                out.push(BadRange {
                    start: seg.start() + pos,
                    end: seg.start() + end.min(seg.size()),
                    reason: why.to_string(),
                });
                pos = end;
            }
        }
    }
    Ok(records)
}

/// A segment walked whole and clean must hold the records its known count says (a count read
/// from `rmqlog.counts`, or kept by the writer).
fn check_count(seg: &Segment, limit: u64, walked: u64, out: &mut Vec<BadRange>) {
    let known = seg.counted();
    let covers = known.upto == limit || (known.upto == seg.size() && limit == seg.size());
    if covers && known.records != walked {
        out.push(BadRange {
            start: seg.start(),
            end: seg.start() + limit,
            reason: format!(
                "the log counts {} records in this segment, its walk found {walked} (a wrong \
                 rmqlog.counts?)",
                known.records
            ),
        });
    }
}

/// Checks the object of each segment with a remote copy against the tier's manifest (length,
/// CRC32C, read back whole); a bad or missing object is a range of the whole segment.
fn verify_remote_copy(state: &State, seg: &Segment, out: &mut Vec<BadRange>) -> Result<()> {
    let (Some(tier), Some(entry)) = (&state.tier, seg.remote_copy()) else {
        return Ok(());
    };
    match tier.verify_object(entry) {
        Ok(()) => Ok(()),
        Err(e @ Error::Corruption { .. }) => {
            tier.forget_cached(seg.start());
            out.push(BadRange {
                start: seg.start(),
                end: seg.end(),
                reason: e.to_string(),
            });
            Ok(())
        }
        Err(e) => Err(e),
    }
}

/// [`CommitLog::verify_with`](crate::CommitLog::verify_with). Remote-only segments are walked
/// (through the cache) and their objects checked only with `remote`; with it, so are the objects
/// of segments that are both local and remote.
pub(crate) fn verify(
    state: &State,
    remote: bool,
    mut progress: impl FnMut(u64, u64),
) -> Result<Verified> {
    let max = state.max_offset();
    let min = state.min_offset();
    let mut list = state.segments_full();
    let segs = list.as_slice().to_vec();
    let total = max.saturating_sub(min);
    let mut out = Vec::new();
    let mut records = 0;
    for seg in &segs {
        if seg.start() >= max {
            break;
        }
        if seg.is_lost() || (seg.is_remote() && !remote) {
            continue; // a known hole (accept_lost), listed by holes(); or not asked for
        }
        if remote {
            let bad = out.len();
            verify_remote_copy(state, seg, &mut out)?;
            if seg.is_remote() && out.len() > bad {
                progress(max.min(seg.end()).saturating_sub(min), total);
                continue; // its records cannot be read: the object is the damage
            }
        }
        let from = min.saturating_sub(seg.start()).min(seg.size());
        let limit = max.min(seg.end()).saturating_sub(seg.start()).max(from);
        let bad = out.len();
        match verify_segment(state, &mut list, seg, from, limit, &mut out) {
            // Deleted by retention during the walk: nothing left to check there.
            Err(Error::OffsetOutOfRange { .. }) => continue,
            Err(e) => return Err(e),
            Ok(n) => {
                records += n;
                if from == 0 && out.len() == bad {
                    check_count(seg, limit, n, &mut out);
                }
            }
        }
        progress(max.min(seg.end()).saturating_sub(min), total);
    }
    Ok(Verified {
        damaged: out,
        records,
    })
}
