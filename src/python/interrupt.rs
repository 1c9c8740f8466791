//! Ctrl-C during a wait (for the shared writers' append lock, for a store to appear): the wait
//! runs with the GIL released and asks, every slice, for Python's signal handlers to run; an
//! exception they raise (such as `KeyboardInterrupt`) ends the wait and is raised in its place.

use std::cell::RefCell;

use pyo3::prelude::*;

thread_local! {
    /// The exception a signal handler raised during this thread's wait, until it is raised.
    static RAISED: RefCell<Option<PyErr>> = const { RefCell::new(None) };
}

/// Runs `f` with the GIL released, its waits interruptible by a signal.
pub(super) fn detach<T: Send>(
    py: Python<'_>,
    f: impl FnOnce() -> crate::Result<T> + Send,
) -> crate::Result<T> {
    py.detach(|| crate::interrupt::interruptible(handle_signals, f))
}

/// Runs the interpreter's signal handlers; true (give up the wait) if one raised.
fn handle_signals() -> bool {
    Python::attach(|py| match py.check_signals() {
        Ok(()) => false,
        Err(e) => {
            RAISED.with(|r| *r.borrow_mut() = Some(e));
            true
        }
    })
}

/// The exception a signal handler raised during this thread's last wait, if any.
pub(super) fn take() -> Option<PyErr> {
    RAISED.with(|r| r.borrow_mut().take())
}
