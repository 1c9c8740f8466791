//! Waiting for records from Python: the GIL released, a Ctrl-C honoured.

use std::time::Instant;

use pyo3::prelude::*;

use super::args;
use crate::read::wait::Waited;
use crate::CommitLog;

/// Waits until the end (`durable`: the flushed end) passes `offset` or `deadline` passes, with
/// the GIL released. A signal wakes the wait: Python's handlers run (Ctrl-C raises
/// `KeyboardInterrupt`), then it waits again. Never returns `Waited::Interrupted`.
pub(super) fn wait(
    py: Python<'_>,
    log: &CommitLog,
    offset: u64,
    durable: bool,
    deadline: Option<Instant>,
) -> PyResult<Waited> {
    until(py, || log.wait_interruptible(offset, durable, deadline))
}

/// Runs `wait` (one wait that a signal may end) with the GIL released until it ends otherwise,
/// running Python's signal handlers after each signal.
pub(super) fn until(
    py: Python<'_>,
    wait: impl Fn() -> crate::Result<Waited> + Sync,
) -> PyResult<Waited> {
    loop {
        match py.detach(&wait)? {
            Waited::Interrupted => py.check_signals()?,
            done => return Ok(done),
        }
    }
}

/// A `timeout=` argument (seconds, or `None`: no limit) as a deadline from now.
pub(super) fn deadline(timeout: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Instant>> {
    timeout
        .map(|t| args::seconds(t, "timeout").map(|d| Instant::now() + d))
        .transpose()
}
