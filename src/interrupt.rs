//! Waits a caller can end: a thread's long waits (for the shared writers' append lock, for a
//! store to appear) ask a check between their slices, and end with
//! [`crate::Error::Interrupted`] when it says so. The Python binding's check runs the
//! interpreter's signal handlers, so that Ctrl-C ends the wait.

use std::cell::Cell;

thread_local! {
    /// What a wait in this thread asks between slices: whether to give up.
    static INTERRUPT: Cell<Option<fn() -> bool>> = const { Cell::new(None) };
}

/// Runs `f` with `check` asked between the slices of any wait in it.
#[cfg_attr(not(feature = "python"), allow(dead_code))]
pub(crate) fn interruptible<T>(check: fn() -> bool, f: impl FnOnce() -> T) -> T {
    let before = INTERRUPT.with(|c| c.replace(Some(check)));
    let out = f();
    INTERRUPT.with(|c| c.set(before));
    out
}

/// Whether this thread's wait is to end (see [`interruptible`]).
pub(crate) fn interrupted() -> bool {
    INTERRUPT.with(|c| c.get()).is_some_and(|check| check())
}
