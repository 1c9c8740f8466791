//! `lookup(key)`: the offsets of the records with a key (or, for an append with a message id, a
//! record with that id), from the segments' key indexes (`storage/key_index.rs`), without reading
//! other records' bodies.
//!
//! Per segment in the range: the index's entries for the key's hash below its `indexed_to`, and a
//! walk of the record headers from there to the published end (records an appender published but
//! did not index yet: killed between the two, or another process's). Every candidate the index
//! names is read whole (CRC checked) and its key compared, so a hash collision or a stale entry
//! never yields another key's record. A segment without an index (made by an older rmqlog,
//! deleted, damaged) is walked whole; a writer's lookup then builds its index, so the next one
//! is not.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use crate::error::{Error, Result};
use crate::failpoint::fail_point;
use crate::read::moved::again_if_moved;
use crate::read::reader::{self, offset_for_timestamp};
use crate::state::State;
use crate::storage::fs::segment_name;
use crate::storage::key_index::{self, KeyIndex, Needle, Opened};
use crate::storage::props;
use crate::storage::record::{decode, Slot};
use crate::storage::segment::{Mapping, Segment};
use crate::sync::locked;

/// The key indexes this open has mapped, by segment start (with the path they belong to: a moved
/// segment's index is opened again).
#[derive(Debug, Default)]
pub(crate) struct Indexes {
    mapped: Mutex<Mapped>,
    /// The segments whose damaged index was reported (once each).
    damaged: Mutex<HashSet<u64>>,
    /// The sealed segments whose index could not be built: walked, not built again.
    unbuilt: Mutex<HashSet<u64>>,
}

/// The maps, as of `State::key_indexes_made`.
#[derive(Debug, Default)]
struct Mapped {
    by_start: HashMap<u64, (PathBuf, Arc<KeyIndex>)>,
    made: u64,
}

/// Where the index of `seg` is: beside its file; for a remote-only segment, where its local file
/// was (the shipper leaves the index when it deletes the local copy).
fn index_path(state: &State, seg: &Segment) -> PathBuf {
    if seg.is_local() {
        return key_index::path_of(seg.path());
    }
    let name = segment_name(seg.start());
    let beside = |d: &crate::state::dirs::Dir| key_index::path_of(&d.path.join(&name));
    state
        .dirs
        .iter()
        .map(beside)
        .find(|p| p.exists())
        .unwrap_or_else(|| PathBuf::from("/nonexistent"))
}

impl Indexes {
    /// Lets go of every index map (the log closes).
    pub fn clear(&self) {
        locked(&self.mapped).by_start.clear();
    }

    /// Says once per segment that its index is damaged (every lookup walks it).
    fn damaged(&self, seg: &Segment) {
        if locked(&self.damaged).insert(seg.start()) {
            log::warn!(
                "the key index of {} is damaged: lookups walk the segment (a writer's lookup \
                 builds it again once the segment is sealed)",
                seg.path().display()
            );
        }
    }

    fn get(
        &self,
        state: &State,
        seg: &Segment,
        map: &mut impl FnMut() -> Result<Arc<Mapping>>,
    ) -> Result<Option<Arc<KeyIndex>>> {
        let mut guard = locked(&self.mapped);
        let made = state.key_indexes_made.load(Ordering::Acquire);
        if guard.made != made {
            // This open's writer replaced an index file: the map of the old one is stale.
            guard.by_start.clear();
            guard.made = made;
        }
        let cached = &mut guard.by_start;
        if let Some((path, ix)) = cached.get(&seg.start()) {
            if path == seg.path() {
                return Ok(Some(Arc::clone(ix)));
            }
        }
        let min = state.min_offset();
        cached.retain(|&start, _| start >= min);
        let path = index_path(state, seg);
        let sealed = seg.end() <= state.max_offset();
        let ix = match KeyIndex::open(&path, seg.start(), false) {
            // A sealed segment's index is trusted once complete (synced whole): one a power loss
            // may have left short is rebuilt (a writer) or walked past.
            Ok(Opened::Index(ix)) if ix.is_complete() || !sealed => ix,
            Ok(_) if state.read_only || !sealed || !seg.is_local() => return Ok(None),
            Ok(_) if locked(&self.unbuilt).contains(&seg.start()) => return Ok(None),
            Ok(_) => match rebuild(seg, &*map()?, state.opts.file_mode) {
                Some(ix) => ix,
                None => {
                    locked(&self.unbuilt).insert(seg.start());
                    return Ok(None);
                }
            },
            Err(e) => {
                log::debug!("key index {}: {e}", path.display());
                return Ok(None);
            }
        };
        let ix = Arc::new(ix);
        cached.insert(seg.start(), (seg.path().to_path_buf(), Arc::clone(&ix)));
        Ok(Some(ix))
    }
}

/// A writer builds the index of a sealed local segment that has none (or a damaged or
/// incomplete one); a reader, or a segment still written to, walks instead.
fn rebuild(seg: &Segment, map: &Mapping, mode: u32) -> Option<KeyIndex> {
    let path = key_index::path_of(seg.path());
    let bytes = map.bytes(0, seg.size() as usize);
    match key_index::build(&path, seg.start(), seg.size(), mode, bytes) {
        Ok(ix) => {
            log::info!("built the key index {}", path.display());
            Some(ix)
        }
        Err(e) => {
            log::warn!("cannot build the key index {}: {e}", path.display());
            None
        }
    }
}

/// [`CommitLog::lookup`](crate::CommitLog::lookup): the offsets of the records `needle` names
/// stored in `[start_ms, end_ms)`, in log order.
pub(crate) fn lookup(
    state: &Arc<State>,
    indexes: &Indexes,
    needle: Needle<'_>,
    start_ms: Option<u64>,
    end_ms: Option<u64>,
) -> Result<Vec<u64>> {
    again_if_moved(state, false, || {
        lookup_once(state, indexes, needle, start_ms, end_ms)
    })
}

fn lookup_once(
    state: &Arc<State>,
    indexes: &Indexes,
    needle: Needle<'_>,
    start_ms: Option<u64>,
    end_ms: Option<u64>,
) -> Result<Vec<u64>> {
    let max = state.max_offset();
    let lo = match start_ms {
        Some(t) => offset_for_timestamp(state, t)?,
        None => state.min_offset(),
    };
    let hi = match end_ms {
        Some(t) => offset_for_timestamp(state, t)?,
        None => max,
    };
    let in_time = |ts: u64| start_ms.is_none_or(|s| ts >= s) && end_ms.is_none_or(|e| ts < e);
    let list = state.segments_full();
    let mut found = Vec::new();
    for seg in list.as_slice() {
        if seg.end() <= lo || seg.start() >= hi || seg.is_lost() {
            continue;
        }
        in_segment(state, indexes, seg, None, needle, max, |offset, ts| {
            if offset >= lo && offset < hi && in_time(ts) {
                found.push(offset);
            }
        })?;
    }
    found.sort_unstable();
    found.dedup();
    Ok(found)
}

/// Where [`find_id`] found an id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IdAt {
    /// The last record with it, at this offset.
    At(u64),
    Nowhere,
    /// The window reaches a segment that is not local, which the caller said not to read.
    Remote,
}

/// The last record with the message id `id` stored at or after `since_ms`: the newest segments
/// first, back to the first whose records are all older (timestamps never decrease in a log).
/// What an append with an id looks for, under the append lock (`write/dedup.rs`); `local_only`
/// for one that holds the GIL (no fetch from the tier); `active`: the index of the segment
/// appended to, as the appender keeps it (caught up, and the file it writes). (A log holds an id
/// twice only when the first had left the window when the second came.)
pub(crate) fn find_id(
    state: &Arc<State>,
    indexes: &Indexes,
    id: &[u8],
    since_ms: u64,
    local_only: bool,
    active: Option<(u64, &KeyIndex)>,
) -> Result<IdAt> {
    again_if_moved(state, true, || {
        find_id_once(state, indexes, id, since_ms, local_only, active)
    })
}

fn find_id_once(
    state: &Arc<State>,
    indexes: &Indexes,
    id: &[u8],
    since_ms: u64,
    local_only: bool,
    active: Option<(u64, &KeyIndex)>,
) -> Result<IdAt> {
    let max = state.max_offset();
    let list = state.segments_full();
    fail_point!("lookup::listed");
    let mut last: Option<u64> = None;
    for seg in list.as_slice().iter().rev() {
        if seg.start() >= max {
            continue; // rolled to, nothing published in it yet
        }
        if seg.is_lost() {
            continue; // a lost directory's hole: no record, nothing to tell the window by
        }
        if local_only && !seg.is_local() {
            return Ok(IdAt::Remote);
        }
        {
            let own = active
                .filter(|(start, _)| *start == seg.start())
                .map(|(_, ix)| ix);
            in_segment(
                state,
                indexes,
                seg,
                own,
                Needle::Id(id),
                max,
                |offset, ts| {
                    if ts >= since_ms {
                        last = last.max(Some(offset));
                    }
                },
            )?;
        }
        if last.is_some() {
            break;
        }
        // Older segments only while this one's first record is in the window (a header read:
        // unreadable, the window stops at the damage).
        match first_timestamp(state, seg, max) {
            Some(ts) if ts >= since_ms => {}
            _ => break,
        }
    }
    Ok(last.map_or(IdAt::Nowhere, IdAt::At))
}

/// The timestamp in the header of the first record of `seg` (from `min_offset` in the head
/// segment), below the log offset `max`.
fn first_timestamp(state: &Arc<State>, seg: &Segment, max: u64) -> Option<u64> {
    let from = seg.start().max(state.min_offset());
    let (lo, hi) = (
        from - seg.start(),
        max.min(seg.end()).saturating_sub(seg.start()),
    );
    // A local segment's map covers it from its start; any other is read through the reader.
    let Some(map) = seg
        .mapped()
        .filter(|m| seg.is_local() && m.len() as u64 >= hi && lo <= hi)
    else {
        return reader::read(state, from).ok().map(|r| r.timestamp_ms());
    };
    match decode(map.bytes(lo as usize, hi as usize), from, u32::MAX as usize) {
        Slot::Record(h) => Some(h.timestamp_ms),
        _ => None,
    }
}

/// Calls `found(offset, timestamp_ms)` for each record of `seg` below the log offset `max` that
/// `needle` names: from its index below `indexed_to`, walked past it; every candidate read whole
/// and compared.
fn in_segment(
    state: &Arc<State>,
    indexes: &Indexes,
    seg: &Arc<Segment>,
    own: Option<&KeyIndex>,
    needle: Needle<'_>,
    max: u64,
    mut found: impl FnMut(u64, u64),
) -> Result<()> {
    let limit = max.min(seg.end()).saturating_sub(seg.start());
    // Mapped only to walk or to build an index: a remote segment's index spares its fetch.
    let mut mapped: Option<Arc<Mapping>> = None;
    let mut map = || -> Result<Arc<Mapping>> {
        if let Some(m) = &mapped {
            return Ok(Arc::clone(m));
        }
        let m = seg.map()?;
        mapped = Some(Arc::clone(&m));
        Ok(m)
    };
    // Deleted by retention since the list was taken: nothing to find there.
    let gone =
        |e: &Error| seg.start() < state.min_offset() && !matches!(e, Error::Corruption { .. });
    let cached;
    let index = match own {
        Some(ix) => Some(ix),
        None => {
            cached = match indexes.get(state, seg, &mut map) {
                Ok(ix) => ix,
                Err(e) if gone(&e) => return Ok(()),
                Err(e) => return Err(e),
            };
            cached.as_deref()
        }
    };
    let (mut named, from) = match index {
        Some(ix) => {
            let to = ix.indexed_to().min(limit);
            match ix.probe(needle.hash(), to) {
                Ok(named) => (named, to),
                Err(key_index::Damaged) => {
                    indexes.damaged(seg);
                    (Vec::new(), 0)
                }
            }
        }
        None => (Vec::new(), 0),
    };
    let mut walked = Vec::new();
    if from < limit {
        // Past the index: the headers (a complete index reaches the filler, where this ends).
        let map = match map() {
            Ok(m) => m,
            Err(e) if gone(&e) => return Ok(()),
            Err(e) => return Err(e),
        };
        let bytes = map.bytes(0, limit as usize);
        let readable = |at: u64| {
            at >= limit
                || decode(&bytes[at as usize..], seg.start() + at, u32::MAX as usize)
                    == Slot::EndOfSegment
        };
        let walk = |from: u64, walked: &mut Vec<u64>| {
            walked.clear();
            key_index::walk_props(bytes, seg.start(), from, limit, |pos, key, id| {
                if needle.matches(key, id) {
                    walked.push(pos);
                }
                true
            })
        };
        let mut stop = walk(from, &mut walked);
        if stop == from && from > 0 && !readable(stop) {
            // No record where the index says its records end: the index is not to be
            // trusted (damaged, or another segment's); the whole segment is walked.
            indexes.damaged(seg);
            named.clear();
            stop = walk(0, &mut walked);
        }
        if stop < limit && !(readable(stop) && limit == seg.size()) {
            // Damage where a record should start (as a scan reports it).
            let at = seg.start() + stop;
            let why = match reader::read(state, at) {
                Err(Error::InvalidOffset { reason, .. }) => reason,
                Err(e) => return Err(e),
                Ok(_) => "a record whose header the walk could not read".into(),
            };
            return Err(Error::corruption(
                Some(seg.path().to_path_buf()),
                Some(at),
                format!("no valid record where the lookup's walk expected one: {why}"),
            ));
        }
    }
    named.reverse(); // oldest first
    for (pos, from_index) in named
        .into_iter()
        .map(|p| (p, true))
        .chain(walked.into_iter().map(|p| (p, false)))
    {
        let offset = seg.start() + pos;
        if offset < state.min_offset() {
            continue;
        }
        match reader::read(state, offset) {
            Ok(rec) => {
                let (key, id) = match rec.props_block() {
                    Some(b) => props::key_and_id(b).unwrap_or((None, None)),
                    None => (None, None),
                };
                if needle.matches(key, id) {
                    found(offset, rec.timestamp_ms());
                }
            }
            // A stale entry (its records cut by recovery): no record starts there now.
            Err(Error::InvalidOffset { .. } | Error::OffsetOutOfRange { .. }) if from_index => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
