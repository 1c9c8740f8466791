//! Read-only followers: picking up what a writer in another process appended, deleted or moved.

use std::sync::Arc;

use crate::error::Result;
use crate::layout;
use crate::listing;
use crate::open::remote_view;
use crate::recovery::find_end;
use crate::remote::Tier;
use crate::state::{Change, State};
use crate::sync::locked;

/// Listings and tail scans a refresh takes before keeping its view for now.
const ATTEMPTS: usize = 8;

/// Lists the store again and takes the new view: segments deleted from the head leave, new ones
/// join, moved ones are found in their new directory, and records appended since are validated.
/// While the writer keeps changing the store under every listing, the current view stays (a later
/// call picks up the rest). The log never ends below where it ended. Returns `max_offset`.
pub(crate) fn refresh(state: &State) -> Result<u64> {
    let _guard = locked(&state.refresh_lock);
    let known = state.max_offset();
    if let (true, Some(tier)) = (state.dirs.is_empty(), &state.tier) {
        return refresh_remote(state, tier, known);
    }
    let paths: Vec<_> = state.dirs.iter().map(|d| d.path.clone()).collect();
    let ids: Vec<_> = state.dirs.iter().map(|d| d.id.clone()).collect();
    for _ in 0..ATTEMPTS {
        let view = listing::consistent(
            &paths,
            &ids,
            state.opts.segment_size,
            &state.opts.accept_lost,
            known,
            state.tier.as_ref(),
        )?;
        let Some(view) = view else {
            break;
        };
        let min = state.min_offset();
        let mut found = view.segments;
        found.retain(|f| f.end() > min);
        let current = state.segments_full();
        let list = layout::to_list(
            found,
            current.as_slice(),
            state.opts.segment_size,
            state.tier.as_ref(),
        );
        let Some(first) = list.first() else {
            return Ok(known);
        };
        let from = known.max(first.start());
        let tail = match find_end(&list, from, u32::MAX as usize) {
            Ok(tail) => tail,
            // A segment of the listing moved or went before the scan mapped it: list again.
            Err(e) if e.is_not_found() => continue,
            Err(e) => return Err(e),
        };
        let list = list.truncated_before(tail.end + 1);
        state.change(|_| {
            let reload = Change::Reload {
                list,
                end: tail.end,
                last_timestamp_ms: tail.last_timestamp_ms,
            };
            Ok((Some(reload), ()))
        })?;
        return Ok(tail.end);
    }
    log::debug!("the store kept changing while it was listed; the follower keeps its view");
    Ok(known)
}

/// A log opened by its tier URL alone: the tier's current manifest is the whole log.
fn refresh_remote(state: &State, tier: &Arc<Tier>, known: u64) -> Result<u64> {
    if let Some(m) = tier.load_remote_manifest()? {
        if m.version > tier.manifest().version {
            tier.set_manifest(m);
        }
    }
    let current = state.segments_full();
    let (list, end) = remote_view(tier, current.as_slice(), state.opts.segment_size)?;
    if end < known {
        return Ok(known);
    }
    state.change(|_| {
        let reload = Change::Reload {
            list,
            end,
            last_timestamp_ms: 0,
        };
        Ok((Some(reload), ()))
    })?;
    Ok(end)
}
