//! Making appended bytes durable: syncs (group commit) and the background thread.
//!
//! Only a failed sync of a segment that is still in the log poisons the writer. A segment that
//! left the list since the sync began needs no sync here: a moved one was copied and synced whole
//! by the mover before it was replaced, a deleted one holds nothing to keep. Once poisoned, no
//! sync runs again in this process: `flushed_offset` and the checkpoint stay where the last
//! good sync left them, and a reopen recovers from there.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::background::{Next, Periodic};
use crate::error::{Error, Result};
use crate::failpoint::fail_point;
use crate::state::stats::Stats;
use crate::state::State;
use crate::sync::locked;

/// The checkpoint is rewritten at most this often by the background thread.
const CHECKPOINT_EVERY: Duration = Duration::from_secs(1);

/// Syncs everything published so far; returns the new `flushed_offset`. Concurrent callers share
/// one sync: whoever waits for the lock finds its bytes already covered.
pub(crate) fn flush_data(state: &State) -> Result<u64> {
    sync_upto(state, None)
}

/// Returns once every byte below `end` is durable.
pub(crate) fn flush_to(state: &State, end: u64) -> Result<()> {
    if state.flushed_offset() < end {
        sync_upto(state, Some(end))?;
    }
    Ok(())
}

/// Returns once every byte below `end` is durable, in any open: a read-only one syncs the
/// segments' files itself (what the writers made durable, their page says, counts first). A
/// consumer's commit calls it before its position is written, so that no position outlives
/// the records below it (a power loss keeps the log up to its last sync).
pub(crate) fn make_durable(state: &State, end: u64) -> Result<()> {
    if state.read_only {
        let ctl = state.control_full();
        if ctl.is_shared() && ctl.is_live() {
            let flushed = ctl.flushed().min(state.max_offset());
            if flushed > state.flushed_offset() {
                state.set_flushed(flushed);
            }
        }
    }
    flush_to(state, end.min(state.max_offset()))
}

/// Syncs what is published, unless what is durable covers `need` already. A shared writer takes
/// in the others' records and syncs first, so that one sync serves every writer it covers; the
/// writers of several processes sync at once (the filesystem's journal groups those best:
/// measured against taking turns on a lock, docs/benchmarks.md).
fn sync_upto(state: &State, need: Option<u64>) -> Result<u64> {
    let _guard = locked(&state.flush_lock);
    state.check_not_poisoned()?;
    crate::shared::look(state);
    let from = state.flushed_offset();
    let target = state.max_offset();
    if target <= from || need.is_some_and(|n| n <= from) {
        return Ok(from);
    }
    let list = state.segments_full();
    fail_point!("flush::listed");
    let first = list.index_of(from).unwrap_or(0);
    for seg in &list.as_slice()[first..] {
        if seg.start() >= target {
            break;
        }
        if seg.end() <= from || !seg.is_local() {
            continue;
        }
        // A segment the log continues past is synced whole, filler included.
        let lo = from.saturating_sub(seg.start()) as usize;
        let hi = if target >= seg.end() {
            seg.size() as usize
        } else {
            (target - seg.start()) as usize
        };
        if let Err(e) = seg.sync(lo, hi) {
            // Shared writers: another open's cleaner deleted it (this view had not caught up).
            let deleted = e.is_not_found() && state.shared.is_some();
            if deleted || !state.segments().holds(seg) {
                log::debug!("segment {} left the log during a sync: {e}", seg.start());
                continue;
            }
            return Err(state.poison(e.to_string()));
        }
    }
    Stats::add(&state.stats.syncs, 1); // counted before anyone learns of it
    state.set_flushed(target);
    Ok(target)
}

/// The background thread of a writer: syncs every `flush_interval` and keeps the checkpoint
/// fresh. A panic in it poisons the writer (the data would otherwise silently stop being synced)
/// and stops the thread.
pub(crate) fn start_flusher(state: &Arc<State>) -> Result<Periodic> {
    let state = Arc::clone(state);
    let mut last_checkpoint = Instant::now();
    let mut checkpointed = state.flushed_offset();
    let interval = state.opts.flush_interval;
    // A shared writer not doing the background work: its view's end at the previous pass.
    let mut owed = 0;
    Periodic::start("rmqlog-flush", interval, move || {
        let pass = catch_unwind(AssertUnwindSafe(|| {
            fail_point!("flush::pass");
            // Shared writers: the open doing the background work syncs everyone's records if it
            // syncs in the background (its own flush mode may be another); what it left unsynced
            // for a whole interval, this open syncs.
            match crate::shared::owns_background(&state)? {
                true => flush_data(&state),
                false => {
                    // Segments another open deleted leave this view (and their maps go) even
                    // while this open neither appends nor reads.
                    crate::shared::catch_up(&state)?;
                    let due = std::mem::replace(&mut owed, state.max_offset());
                    flush_to(&state, due).map(|()| state.flushed_offset())
                }
            }
        }));
        match pass {
            Ok(Ok(_)) => {}
            Ok(Err(e @ Error::WriterPoisoned { .. })) => {
                log::error!("background flush stops: {e}");
                return Next::Stop;
            }
            Ok(Err(e)) => {
                log::error!("background flush failed: {e}");
                return Next::Continue;
            }
            Err(_) => {
                state.poison("the background flush thread panicked".into());
                return Next::Stop;
            }
        }
        let flushed = state.flushed_offset();
        let due = flushed != checkpointed && last_checkpoint.elapsed() >= CHECKPOINT_EVERY;
        if due && crate::shared::owns_background(&state).unwrap_or(false) {
            let written = crate::shared::maintenance(&state)
                .and_then(|_maintenance| state.write_checkpoint());
            match written {
                Ok(()) => checkpointed = flushed,
                Err(e) => log::warn!("checkpoint update failed: {e}"),
            }
            last_checkpoint = Instant::now();
        }
        Next::Continue
    })
}
