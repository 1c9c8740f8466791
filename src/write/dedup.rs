//! Appends that happen once (NATS JetStream's `Nats-Msg-Id`): a record appended with a message id
//! is not written when a record with that id is in the store's de-duplication window; the append
//! reports that record's offset instead.
//!
//! The window: records stored at most `dedup_window_ms` before the append and, with
//! `dedup_window_records`, among that many last records of the log. Both are store settings
//! (recorded with the store, the same for every process).
//!
//! There is no table of ids to keep or rebuild: ids are in the records' properties and in the
//! segments' key indexes (`storage/key_index.rs`), which are written under the append lock. The
//! check runs under that lock too (the writer's cursor and, for shared writers, the store's): it
//! first catches the active segment's index up to the published end (records another process
//! published and did not index: killed in between), then looks each id up from the newest
//! segment back through the window (`read/lookup.rs`). So every process of a shared store sees
//! every id the others appended, and a restart sees what was appended before it, with nothing
//! rebuilt at open. A segment whose index is missing or damaged is walked instead (slower, as
//! correct).
//!
//! What this does not promise: an id whose record a power loss took (unsynced) is not there to
//! find, so a retry writes it again, as it should; a record outside the window is not found; a
//! segment the cleaner or `truncate_before` deleted takes its ids with it.

use std::collections::HashMap;
use std::sync::Arc;

use crate::error::Result;
use crate::read::count::records_between_locked;
use crate::read::lookup::{self, IdAt, Indexes};
use crate::state::State;
use crate::storage::key_index::KeyIndex;
use crate::storage::props;

/// What an append of messages did ([`crate::CommitLog::append_messages`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Appended {
    /// Each message's offset: where it was written, or (a duplicate) where the record with its
    /// id is.
    pub offsets: Vec<u64>,
    /// The positions of the messages not written, in order: their id was in the window, or on
    /// an earlier message of the batch.
    pub duplicates: Vec<usize>,
}

/// What an append with ids found for one record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Seen {
    /// Not in the window: written.
    New,
    /// A record of the log at this offset has its id: not written.
    Stored(u64),
    /// An earlier record of the same batch (this position) has its id: not written.
    InBatch(usize),
}

/// An append's de-duplication: the indexes the lookups read, and what it found.
#[derive(Debug)]
pub(crate) struct Once<'a> {
    pub indexes: &'a Indexes,
    /// The positions in the batch of the records not written (their id was there).
    pub duplicates: Vec<usize>,
}

/// Whether any record of the batch has an id.
pub(crate) fn has_ids(blocks: &[Vec<u8>]) -> bool {
    blocks
        .iter()
        .any(|b| matches!(props::id_of(b), Some(Some(_))))
}

/// For each record (its properties in `blocks`), whether its id is in the window that ends at
/// `now_ms`. The caller holds the append lock and has caught the active segment's index up
/// (`active`: that index, with the segment's start).
/// `None` when `local_only` and the window reaches a segment that is not local.
pub(crate) fn check(
    state: &Arc<State>,
    indexes: &Indexes,
    blocks: &[Vec<u8>],
    now_ms: u64,
    local_only: bool,
    active: Option<(u64, &KeyIndex)>,
) -> Result<Option<Vec<Seen>>> {
    let window = u64::try_from(state.opts.dedup_window.as_millis()).unwrap_or(u64::MAX);
    let since = now_ms.saturating_sub(window);
    // Each id's record in the batch that holds it: its position, what it found, and how many of
    // the batch's records were written before it.
    let mut held: HashMap<&[u8], (usize, Seen, u64)> = HashMap::new();
    let mut seen = Vec::with_capacity(blocks.len());
    // As if appended alone: the batch's records written before the one checked count.
    let mut written = 0u64;
    for (i, block) in blocks.iter().enumerate() {
        let s = match props::id_of(block) {
            Some(Some(id)) => {
                let s = match held.get(id) {
                    // Written earlier in the batch: in the window unless too many came since.
                    Some(&(j, Seen::New, w)) => match state.opts.dedup_window_records {
                        Some(n) if written - w > n => Seen::New,
                        _ => Seen::InBatch(j),
                    },
                    Some(&(_, Seen::Stored(at), _)) if in_count(state, at, written)? => {
                        Seen::Stored(at)
                    }
                    Some(_) => Seen::New,
                    None => match lookup::find_id(state, indexes, id, since, local_only, active)? {
                        IdAt::At(at) if in_count(state, at, written)? => Seen::Stored(at),
                        IdAt::At(_) | IdAt::Nowhere => Seen::New,
                        IdAt::Remote => return Ok(None),
                    },
                };
                // The record that holds the id for the rest of the batch: the last one written,
                // else the one in the log.
                if blocks.len() > 1 && (s == Seen::New || !held.contains_key(id)) {
                    held.insert(id, (i, s, written));
                }
                s
            }
            _ => Seen::New,
        };
        written += u64::from(s == Seen::New);
        seen.push(s);
    }
    Ok(Some(seen))
}

/// Whether the record at `at` is among the window's last records (always, without a count),
/// with `more` records after the log's end.
fn in_count(state: &State, at: u64, more: u64) -> Result<bool> {
    match state.opts.dedup_window_records {
        None => Ok(true),
        Some(n) => Ok(records_between_locked(state, at, u64::MAX)? + more <= n),
    }
}
