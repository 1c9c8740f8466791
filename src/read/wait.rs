//! Waiting for records: [`CommitLog::wait`](crate::CommitLog::wait) and the scans that follow the
//! log.
//!
//! A waiter registers on the store's control page, reads its futex word, then looks at the end;
//! if the end has not passed its offset it sleeps in the kernel until an append (in any process)
//! changes the word. A follower (read-only log) looks through the control page: a new epoch or
//! generation lists the store again, a new end is validated record by record from where it was,
//! up to the writer's published end.
//!
//! With no control file to be woken through (a store whose writer has not opened since this
//! version, or a page this process may not write), a follower polls every [`POLL`] instead.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::failpoint::fail_point;
use crate::read::follow;
use crate::shared::control::{Control, CONTROL_FILE};
use crate::shared::futex::Woken;
use crate::state::State;
use crate::sync::locked;

/// How often a follower with no control page to be woken through looks again.
pub(crate) const POLL: Duration = Duration::from_millis(100);

/// How a wait ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Waited {
    /// The end passed the offset (the end).
    Passed(u64),
    /// The deadline passed first (the end).
    TimedOut(u64),
    /// A signal woke the thread (the caller checks for Ctrl-C, then waits again).
    Interrupted,
}

/// The end a waiter compares with: of the published records, or of the durable ones (asked
/// for, or in a store whose writers sync each append: see [`State::readable_end`]).
pub(crate) fn visible(state: &State, durable: bool) -> u64 {
    if durable {
        state.flushed_offset().min(state.max_offset())
    } else {
        state.readable_end()
    }
}

/// Blocks until the end (`durable`: the flushed end) passes `offset`, the deadline passes, or
/// the log closes (`Error::Closed`). With `interruptible`, a signal ends the wait too.
pub(crate) fn wait(
    state: &State,
    offset: u64,
    durable: bool,
    deadline: Option<Instant>,
    interruptible: bool,
) -> Result<Waited> {
    wait_for(state, offset, durable, deadline, interruptible, None)
}

/// [`wait`] that also returns at the first wake of the store's waiters, whatever woke them (an
/// append, a consumer handing records back), or at once if the futex word is no longer `since`
/// (a wake between the caller's look and this wait): as `Passed` with the end as it is.
pub(crate) fn wait_event(
    state: &State,
    offset: u64,
    since: Option<u32>,
    deadline: Option<Instant>,
    interruptible: bool,
) -> Result<Waited> {
    wait_for(state, offset, false, deadline, interruptible, Some(since))
}

fn wait_for(
    state: &State,
    offset: u64,
    durable: bool,
    deadline: Option<Instant>,
    interruptible: bool,
    any_event: Option<Option<u32>>,
) -> Result<Waited> {
    let _waiting = state.enter_wait(); // before the first look at whether the log is closed
    loop {
        state.check_open()?;
        let ctl = state.control_full();
        let registered = ctl.register();
        let seq = ctl.seq();
        if state.read_only {
            catch_up(state, &ctl)?;
            if !Arc::ptr_eq(&ctl, &state.control_full()) {
                continue; // found a newer page: sleep on that one
            }
        } else {
            crate::shared::catch_up(state)?;
        }
        let end = visible(state, durable);
        if end > offset || any_event.flatten().is_some_and(|since| since != seq) {
            return Ok(Waited::Passed(end));
        }
        let mut slice = match deadline {
            Some(d) => match d.checked_duration_since(Instant::now()) {
                Some(left) if !left.is_zero() => Some(left),
                _ => return Ok(Waited::TimedOut(end)),
            },
            None => None,
        };
        if state.read_only && (registered.is_none() || !ctl.is_shared()) {
            slice = Some(slice.map_or(POLL, |s| s.min(POLL)));
        } else if state.read_only {
            // The page's file may be removed and a new one made by the next writer, which wakes
            // only the waiters of the new one: a follower looks at its file this often.
            slice = Some(slice.map_or(LOOK_AT_FILE, |s| s.min(LOOK_AT_FILE)));
        }
        match ctl.sleep(seq, slice) {
            Woken::Interrupted if interruptible => return Ok(Waited::Interrupted),
            Woken::Changed if any_event.is_some() && ctl.seq() != seq => {
                return Ok(Waited::Passed(end))
            }
            Woken::TimedOut if state.read_only && ctl.file_replaced() => {
                drop(registered);
                follow_new_page(state)?;
            }
            _ => {}
        }
    }
}

/// How often a follower sleeping on a control page checks that its file is still the store's.
pub(crate) const LOOK_AT_FILE: Duration = Duration::from_secs(1);

/// A follower whose control page's file was removed or cut short: it maps the store's current
/// page (a private one until a writer makes one) and lists the store again.
pub(crate) fn follow_new_page(state: &State) -> Result<()> {
    let dirs: Vec<&std::path::Path> = state.dirs.iter().map(|d| d.path.as_path()).collect();
    let found = Control::of_store(&dirs)
        .map_err(|e| Error::io("mapping the control page", CONTROL_FILE, e))?;
    log::info!("the control page was removed or replaced: following the store's current one");
    let seen = found.seen();
    state.set_control(Arc::new(found));
    follow::refresh(state)?;
    *locked(&state.seen) = seen;
    Ok(())
}

/// A follower's look through the control page: a new page, epoch or generation lists the store
/// again; otherwise the records published since are validated in the known segments.
pub(crate) fn catch_up(state: &State, ctl: &Control) -> Result<()> {
    if !ctl.is_shared() || !ctl.is_live() {
        // No page, or a writer moved it: look for the store's current one.
        let dirs: Vec<&std::path::Path> = state.dirs.iter().map(|d| d.path.as_path()).collect();
        let found = Control::of_store(&dirs)
            .map_err(|e| Error::io("mapping the control page", CONTROL_FILE, e))?;
        if found.is_shared() && found.is_live() {
            let seen = found.seen();
            state.set_control(Arc::new(found));
            follow::refresh(state)?;
            *locked(&state.seen) = seen;
            let ctl = state.control_full();
            return catch_up(state, &ctl);
        }
        // Polling: a listing each time, as `refresh()` does.
        follow::refresh(state)?;
        return Ok(());
    }
    let seen = ctl.seen();
    fail_point!("wait::seen");
    let limit = ctl.end();
    let changed = *locked(&state.seen) != seen;
    let known = state.max_offset();
    if changed {
        follow::refresh_to(state, Some(limit))?;
        *locked(&state.seen) = seen;
    } else if limit > known {
        let end = match follow::extend(state, limit) {
            Ok(end) => end,
            // A segment's file went (moved, deleted) since the generation was read.
            Err(e) if e.is_not_found() => known,
            Err(e) => return Err(e),
        };
        let at_last_end = state.segments().last().is_none_or(|l| end >= l.end());
        if end < limit && (at_last_end || end == known) {
            // The records go on in a segment this follower has not listed yet, or the list it
            // has is gone: list again.
            follow::refresh_to(state, Some(limit))?;
        }
    }
    state.set_flushed(ctl.flushed().min(state.max_offset()));
    Ok(())
}
