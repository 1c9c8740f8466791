//! How many records the log holds, or a range of it, without scanning it.
//!
//! Each segment knows its count ([`crate::storage::segment::Counted`]): a sealed segment its
//! whole count once anything counted it (its writer as it appended, recovery, a follower taking
//! in new records, the counts a writer recorded in `rmqlog.counts`, or a walk of what was still
//! unknown); the last segment how many records start below a position, which the writer raises
//! with every append. The log's count is the sum over its segments, so a deletion of the head
//! (retention, `truncate_before`) takes its segments' records out of it, and a count of
//! `[from, to)` walks at most part of the segment holding `from` and of the one holding `to`.
//!
//! What a segment's count does not know yet is walked once per open (headers only, no CRC):
//! records another shared writer appended since this open last counted, a segment sealed by
//! another writer, a segment of a store whose writer recorded no count for it (written by an
//! older rmqlog). Remote-only segments count from their manifest entry; one listed without a
//! count (uploaded by an older rmqlog) is read from the tier to be counted. A hole left by a lost
//! directory counts no record.

use crate::error::Result;
use crate::read::moved::again_if_moved;
use crate::state::State;
use crate::storage::counts::{below, whole};
use crate::storage::segment::Segment;

/// Records from `min_offset` to the end a scan reads to (`max_offset`; in a store whose writers
/// sync each append, the durable end below it).
pub(crate) fn record_count(state: &State) -> Result<u64> {
    records_between(state, state.min_offset(), u64::MAX)
}

/// Records whose offsets lie in `[from, to)`, clamped to `[min_offset, end)` (the end of
/// [`record_count`]). A segment whose file went while it was counted (deleted or moved, by this
/// open or, for a follower or a shared writer, another) makes the count start again on the log
/// as it is now.
pub(crate) fn records_between(state: &State, from: u64, to: u64) -> Result<u64> {
    again_if_moved(state, false, || count_once(state, from, to))
}

/// [`records_between`] for a caller that holds the store's append lock (an append).
pub(crate) fn records_between_locked(state: &State, from: u64, to: u64) -> Result<u64> {
    again_if_moved(state, true, || count_once(state, from, to))
}

fn count_once(state: &State, from: u64, to: u64) -> Result<u64> {
    // The end first, then the list: a roll adds its segment to the list before an end in it is
    // published, so the list holds every record below the end. The end readers take records up
    // to (in a store whose writers sync each append, the durable one), as a scan does.
    let end = state.readable_end();
    let list = state.segments_full();
    let (from, to) = (from.max(state.min_offset()), to.min(end));
    if from >= to {
        return Ok(0);
    }
    let first = list.index_of(from).unwrap_or(0);
    let segs = &list.as_slice()[first..];
    // A follower's or shared writer's view may hold segments another open counted and recorded.
    let unknown = |s: &Segment| s.end() <= end && s.start() < to && !s.is_counted();
    if (state.read_only || state.shared.is_some()) && segs.iter().any(|s| unknown(s)) {
        state.take_recorded_counts();
    }
    let mut n = 0;
    for seg in segs.iter().take_while(|s| s.start() < to) {
        // Where its published records end: all of a sealed segment.
        let limit = end.min(seg.end()).saturating_sub(seg.start());
        let lo = from.saturating_sub(seg.start());
        let hi = to.min(seg.end()).saturating_sub(seg.start());
        let sealed = limit == seg.size();
        let upto = |p: u64| match (sealed, p >= limit) {
            (true, true) => whole(seg),
            _ => below(seg, p, limit),
        };
        let below_lo = if lo > 0 { upto(lo)? } else { 0 };
        n += upto(hi)?.saturating_sub(below_lo);
    }
    Ok(n)
}
