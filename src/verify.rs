//! `verify`: a full CRC walk of the log that modifies nothing and reports every bad range.

use std::sync::atomic::Ordering;

use crate::error::{Error, Result};
use crate::log::CommitLog;
use crate::record::{body_crc, decode, Slot, HEADER_LEN};
use crate::segment::Segment;

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

/// The record at `pos` validates completely (header, stored offset, body CRC); its length.
fn valid_at(bytes: &[u8], offset: u64) -> Result<u64, &'static str> {
    match decode(bytes, offset, u32::MAX as usize) {
        Slot::Record(h) => {
            let body = &bytes[HEADER_LEN..h.len as usize];
            if body_crc(body) == h.body_crc {
                Ok(u64::from(h.len))
            } else {
                Err("body CRC mismatch")
            }
        }
        Slot::EndOfSegment => Ok(0),
        Slot::Invalid(why) => Err(why),
    }
}

/// Walks one segment's records in `[from, limit)` (relative), appending bad ranges.
fn verify_segment(seg: &Segment, from: u64, limit: u64, out: &mut Vec<BadRange>) -> Result<()> {
    let map = match seg.map() {
        Ok(map) => map,
        // A file of the wrong length: the whole segment is damage (an I/O error is not).
        Err(e @ Error::Corruption { .. }) => {
            out.push(BadRange {
                start: seg.start() + from,
                end: seg.end(),
                reason: e.to_string(),
            });
            return Ok(());
        }
        Err(e) => return Err(e),
    };
    let size = seg.size() as usize;
    let mut pos = from;
    while pos < limit {
        let bytes = map.bytes(pos as usize, size);
        match valid_at(bytes, seg.start() + pos) {
            Ok(0) => return Ok(()), // end-of-segment filler
            Ok(len) => pos += len,
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
    Ok(())
}

impl CommitLog {
    /// Checks every record from `min_offset` to `max_offset` (headers, stored offsets, body CRCs)
    /// without changing anything. Returns one entry per damaged range; empty when clean.
    pub fn verify(&self) -> Result<Vec<BadRange>> {
        self.verify_with(|_, _| {})
    }

    /// [`CommitLog::verify`], calling `progress(bytes_done, bytes_total)` after each segment.
    pub fn verify_with(&self, mut progress: impl FnMut(u64, u64)) -> Result<Vec<BadRange>> {
        let shared = self.shared();
        shared.check_open()?;
        let max = shared.max_offset.load(Ordering::Acquire);
        let min = shared.min_offset.load(Ordering::Acquire);
        let list = shared.segments.load_full();
        let total = max.saturating_sub(min);
        let mut out = Vec::new();
        for seg in list.as_slice() {
            if seg.start() >= max {
                break;
            }
            if seg.is_lost() {
                continue; // a known hole (accept_lost), listed by holes()
            }
            let from = min.saturating_sub(seg.start()).min(seg.size());
            let limit = (max.min(seg.end()) - seg.start()).max(from);
            verify_segment(seg, from, limit, &mut out)?;
            progress(max.min(seg.end()).saturating_sub(min), total);
        }
        Ok(out)
    }
}
