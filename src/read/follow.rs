//! Read-only followers: picking up what a writer in another process appended, deleted or moved.

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::open::layout::{self, remote_view};
use crate::open::listing;
use crate::open::recovery::{find_end, next_boundary};
use crate::state::{Change, State};
use crate::storage::segments::SegmentList;
use crate::storage::tail_hint;
use crate::sync::locked;
use crate::tier::Tier;

/// Listings and tail scans a refresh takes before keeping its view for now.
const ATTEMPTS: usize = 8;

/// Lists the store again and takes the new view: segments deleted from the head leave, new ones
/// join, moved ones are found in their new directory, and records appended since are validated.
/// While the writer keeps changing the store under every listing, the current view stays (a later
/// call picks up the rest). The log never ends below where it ended. Returns `max_offset`.
pub(crate) fn refresh(state: &State) -> Result<u64> {
    refresh_published(state).map(|(end, _)| end)
}

/// [`refresh`]; also the end the writers published, if their page names this page cache (a
/// writer opened the store this boot).
pub(crate) fn refresh_published(state: &State) -> Result<(u64, Option<u64>)> {
    let paths: Vec<_> = state.dirs.iter().map(|d| d.path.clone()).collect();
    let ctl = state.control_full();
    // The end the store's writers published, when their control page is live in this page
    // cache (a page from another boot says nothing of the records on disk): a follower takes no
    // record past it, so that a batch being copied shows whole or not at all.
    let published = tail_hint::page_cache_id(&paths).and_then(|cache| ctl.end_in(&cache));
    let end = refresh_to(state, published)?;
    if published.is_some() {
        state.set_flushed(ctl.flushed().min(end)); // what the writers made durable
    }
    Ok((end, published))
}

/// [`refresh`], taking no record at or past `limit` (the writer's published end: a batch being
/// written shows all at once or not at all).
pub(crate) fn refresh_to(state: &State, limit: Option<u64>) -> Result<u64> {
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
        let mut tail = match find_end(&list, from, u32::MAX as usize) {
            Ok(tail) => tail,
            // A segment of the listing moved or went before the scan mapped it: list again.
            Err(e) if e.is_not_found() => continue,
            Err(e) => return Err(e),
        };
        tail.end = clamp(&list, known, tail.end, limit);
        tail.keep_counts(tail.end);
        let list = list.truncated_before(tail.end + 1);
        state.change(|_| {
            let reload = Change::Reload {
                list,
                end: tail.end,
                last_timestamp_ms: tail.last_timestamp_ms,
            };
            Ok((Some(reload), ()))
        })?;
        // What the writer's metadata vouches for is durable (a follower with no control page
        // learns its flushed end only so).
        if let Some(c) = &view.ckpt {
            state.set_flushed(c.flushed_offset.min(tail.end));
        }
        return Ok(tail.end);
    }
    log::debug!("the store kept changing while it was listed; the follower keeps its view");
    Ok(known)
}

/// Takes in the records a writer published since the last look, in the segments this follower
/// knows (no listing: the caller lists when the segment list changed), validating each, up to
/// `limit`. Returns `max_offset`.
pub(crate) fn extend(state: &State, limit: u64) -> Result<u64> {
    let _guard = locked(&state.refresh_lock);
    let known = state.max_offset();
    if limit <= known {
        return Ok(known);
    }
    let list = state.segments_full();
    if list.last().is_none_or(|l| known >= l.end()) {
        return Ok(known);
    }
    let tail = find_end(&list, known, u32::MAX as usize)?;
    let end = clamp(&list, known, tail.end, Some(limit));
    tail.keep_counts(end);
    if end > known {
        state.publish(end, tail.last_timestamp_ms);
    }
    Ok(end)
}

/// The end a follower takes when records are valid from `known` to `end` and the writer published
/// up to `limit`: the last record boundary at or below `limit` (headers walked, already
/// validated), so a batch the writer has not published yet stays out whole. The segment holding
/// it is marked written up to it.
fn clamp(list: &SegmentList, known: u64, end: u64, limit: Option<u64>) -> u64 {
    let Some(limit) = limit.filter(|l| (known..end).contains(l)) else {
        return end;
    };
    let mut at = known;
    while at < limit {
        let Some(seg) = list.find(at) else { break };
        let Some(map) = seg.mapped() else { break };
        match next_boundary(seg, map, at, end) {
            Ok(next) if next <= limit => at = next,
            _ => break,
        }
    }
    if let Some(seg) = list.find(at).filter(|s| s.start() < at) {
        seg.set_written(at - seg.start());
    }
    at
}

/// A log opened by its tier URL alone: the tier's current manifest is the whole log.
fn refresh_remote(state: &State, tier: &Arc<Tier>, known: u64) -> Result<u64> {
    // A live store always has a current manifest (a new version replaces the pointer whole).
    let m = tier.load_remote_manifest()?.ok_or_else(|| {
        Error::not_found(
            tier.url(),
            " (its tier manifest is gone: the store was deleted)",
        )
    })?;
    if m.version > tier.manifest().version {
        tier.set_manifest(m);
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
