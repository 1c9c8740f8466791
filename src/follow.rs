//! Read-only followers: picking up what a writer in another process appended.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::checkpoint::read_newest;
use crate::error::Result;
use crate::layout::{self, Listing};
use crate::log::{locked, Shared};
use crate::open::{known_sizes, move_preference, paths_of, segment_list};
use crate::recovery::find_end;

/// Picks up records and segments a writer in another process appended since the last call.
pub(crate) fn refresh(shared: &Arc<Shared>) -> Result<u64> {
    let _guard = locked(&shared.refresh_lock);
    let current = shared.segments.load_full();
    let paths = paths_of(&shared.dirs);
    // A move in progress shows its segment twice: keep the source.
    let ckpt = read_newest(&paths).ok().flatten();
    let prefer = move_preference(ckpt.as_ref(), &paths);
    let named = known_sizes(ckpt.as_ref(), shared.opts.segment_size);
    let mut listing: Listing = layout::list(&paths, &vec![true; paths.len()], prefer, &named)?;
    let min = shared.min_offset.load(Ordering::Acquire);
    listing.segments.retain(|f| f.end() > min);
    listing.segments = layout::fill_holes(
        listing.segments,
        &shared.opts.accept_lost,
        min,
        0,
        shared.opts.segment_size,
    );
    let sizes = known_sizes(None, shared.opts.segment_size);
    // Segments deleted from the head (a cleaner) leave; new ones join if contiguous.
    let n = layout::check(&listing.segments, &sizes, true)?;
    listing.segments.truncate(n);
    let list = segment_list(
        listing.segments,
        current.as_slice(),
        shared.opts.segment_size,
    );
    let max = shared.max_offset.load(Ordering::Acquire);
    let Some(first) = list.first() else {
        return Ok(max);
    };
    let from = max.max(first.start());
    let tail = find_end(&list, from, u32::MAX as usize)?;
    let list = list.truncated_before(tail.end + 1);
    shared.min_offset.store(first.start(), Ordering::Release);
    shared.segments.store(Arc::new(list));
    shared
        .last_timestamp_ms
        .fetch_max(tail.last_timestamp_ms, Ordering::Relaxed);
    shared.max_offset.store(tail.end, Ordering::Release);
    Ok(tail.end)
}
