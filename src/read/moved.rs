//! Reads that raced a segment's move or deletion: a file named by the segment list this read
//! took went (moved to another directory, or deleted, by this open or another) before it was
//! opened. Done again on the list as it is now, a bounded number of times.

use std::time::Duration;

use crate::error::Result;
use crate::read::follow;
use crate::shared;
use crate::state::State;

/// How many times a read starts again after a segment's file went while it ran.
const ATTEMPTS: u32 = 8;

/// Runs `f`, and again while it fails because a segment's file was not found, after taking in
/// the segment list as it is now. `holding_append_lock`: the caller (an append) holds the
/// store's append lock, which the taking in must then not wait for.
pub(crate) fn again_if_moved<T>(
    state: &State,
    holding_append_lock: bool,
    mut f: impl FnMut() -> Result<T>,
) -> Result<T> {
    let mut attempt = 0;
    loop {
        match f() {
            Err(e) if e.is_not_found() && attempt < ATTEMPTS => {
                attempt += 1;
                if state.read_only {
                    follow::refresh(state)?;
                } else if holding_append_lock {
                    shared::catch_up_locked(state)?;
                } else {
                    shared::catch_up(state)?;
                }
                // The open that moved or deleted it may not have announced it yet.
                std::thread::sleep(Duration::from_micros(50 << attempt));
            }
            other => return other,
        }
    }
}
