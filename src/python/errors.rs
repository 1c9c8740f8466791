//! The Python exception tree, built once at import, and the one mapping from [`Error`] to it.

use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyTuple, PyType};

use crate::Error;

struct Tree {
    base: Py<PyType>,
    out_of_range: Py<PyType>,
    invalid_offset: Py<PyType>,
    too_large: Py<PyType>,
    disk_full: Py<PyType>,
    locked: Py<PyType>,
    not_found: Py<PyType>,
    configuration: Py<PyType>,
    corruption: Py<PyType>,
    read_only: Py<PyType>,
    closed: Py<PyType>,
    poisoned: Py<PyType>,
    tier: Py<PyType>,
    data_loss: Py<PyType>,
    consumer_busy: Py<PyType>,
    lock_timeout: Py<PyType>,
    claim_lost: Py<PyType>,
}

static TREE: PyOnceLock<Tree> = PyOnceLock::new();

fn make(py: Python<'_>, name: &str, bases: &[Bound<'_, PyAny>], doc: &str) -> PyResult<Py<PyType>> {
    let ns = PyDict::new(py);
    ns.set_item("__module__", "rmqlog")?;
    ns.set_item("__doc__", doc)?;
    let bases = PyTuple::new(py, bases)?;
    let ty = py
        .import("builtins")?
        .getattr("type")?
        .call1((name, bases, ns))?;
    Ok(ty.cast_into::<PyType>()?.unbind())
}

fn build(py: Python<'_>) -> PyResult<Tree> {
    let exc = |n: &str| py.import("builtins").and_then(|b| b.getattr(n));
    let base = make(
        py,
        "CommitLogError",
        &[exc("Exception")?],
        "Base of every rmqlog error.",
    )?;
    let b = || base.bind(py).clone().into_any();
    Ok(Tree {
        out_of_range: make(
            py,
            "OffsetOutOfRangeError",
            &[b(), exc("IndexError")?],
            "The offset is below min_offset or at/after max_offset.",
        )?,
        invalid_offset: make(
            py,
            "InvalidOffsetError",
            &[b(), exc("ValueError")?],
            "The offset is inside the log but not the start of a record.",
        )?,
        too_large: make(
            py,
            "MessageTooLargeError",
            &[b(), exc("ValueError")?],
            "The body is over max_message_size or too large for one segment.",
        )?,
        disk_full: make(
            py,
            "DiskFullError",
            &[b(), exc("OSError")?],
            "No writable directory has room for a new segment.",
        )?,
        locked: make(
            py,
            "StoreLockedError",
            &[b()],
            "Another writer holds the store.",
        )?,
        not_found: make(
            py,
            "StoreNotFoundError",
            &[b(), exc("FileNotFoundError")?],
            "The paths hold no rmqlog store (a read-only open of the wrong folder).",
        )?,
        configuration: make(
            py,
            "ConfigurationError",
            &[b(), exc("ValueError")?],
            "The directories given do not make up the store: one missing, foreign, or a copy.",
        )?,
        corruption: make(
            py,
            "CorruptionError",
            &[b()],
            "A record or the on-disk layout failed validation.",
        )?,
        read_only: make(py, "ReadOnlyError", &[b()], "A write on a read-only log.")?,
        closed: make(
            py,
            "ClosedError",
            &[b(), exc("ValueError")?],
            "A call on a closed log.",
        )?,
        poisoned: make(
            py,
            "WriterPoisonedError",
            &[b()],
            "An append after a failed sync; reads keep working.",
        )?,
        tier: make(
            py,
            "TierError",
            &[b(), exc("OSError")?],
            "The remote tier's object store failed a request (unreachable, refused).",
        )?,
        data_loss: make(
            py,
            "DataLossError",
            &[b()],
            "Records a consumer had not read were deleted before it read them; seek to go on.",
        )?,
        consumer_busy: make(
            py,
            "ConsumerBusyError",
            &[b()],
            "Another open, in this process or another, holds the consumer name.",
        )?,
        lock_timeout: make(
            py,
            "LockTimeoutError",
            &[b(), exc("TimeoutError")?],
            "A shared writer waited longer than lock_timeout_ms for the append lock (its holder \
             stopped); nothing was appended.",
        )?,
        claim_lost: make(
            py,
            "ClaimLostError",
            &[b()],
            "Records this open of a shared consumer name had received went to another open \
             before it committed them (their redelivery timeout passed): its work on them is \
             repeated. The records it still held were committed first. `lost` lists them as \
             (from, to, pid) with pid None when no open holds them now; `committed` is the \
             name's committed position.",
        )?,
        base,
    })
}

/// Adds the exception classes to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    let t = TREE.get_or_try_init(py, || build(py))?;
    for ty in [
        &t.base,
        &t.out_of_range,
        &t.invalid_offset,
        &t.too_large,
        &t.disk_full,
        &t.locked,
        &t.not_found,
        &t.configuration,
        &t.corruption,
        &t.read_only,
        &t.closed,
        &t.poisoned,
        &t.tier,
        &t.data_loss,
        &t.consumer_busy,
        &t.lock_timeout,
        &t.claim_lost,
    ] {
        let ty = ty.bind(py);
        m.add(ty.name()?, ty)?;
    }
    Ok(())
}

/// An `OffsetOutOfRangeError` with a message built by the caller (offsets beyond 128 bits).
pub fn out_of_range(msg: String) -> PyErr {
    Python::attach(|py| match TREE.get(py) {
        Some(t) => PyErr::from_type(t.out_of_range.bind(py).clone(), (msg,)),
        None => pyo3::exceptions::PyIndexError::new_err(msg),
    })
}

/// The one mapping from the crate's error to a Python exception.
impl From<Error> for PyErr {
    fn from(e: Error) -> PyErr {
        to_py(e)
    }
}

fn to_py(e: Error) -> PyErr {
    Python::attach(|py| {
        let Some(t) = TREE.get(py) else {
            return PyValueError::new_err(e.to_string());
        };
        let msg = e.to_string();
        let ty = match &e {
            Error::InvalidArgument(_) => return PyValueError::new_err(msg),
            Error::Io { source, path, .. } => {
                return match source.raw_os_error() {
                    Some(errno) => {
                        PyOSError::new_err((errno, msg, path.to_string_lossy().into_owned()))
                    }
                    None => PyOSError::new_err(msg),
                };
            }
            Error::StoreNotFound { path, .. } => {
                let args = (libc::ENOENT, msg, path.to_string_lossy().into_owned());
                return PyErr::from_type(t.not_found.bind(py).clone(), args);
            }
            Error::DiskFull { .. } => {
                return PyErr::from_type(t.disk_full.bind(py).clone(), (libc::ENOSPC, msg));
            }
            Error::OffsetOutOfRange { .. } => &t.out_of_range,
            Error::InvalidOffset { .. } => &t.invalid_offset,
            Error::MessageTooLarge { .. } => &t.too_large,
            Error::StoreLocked { .. } => &t.locked,
            Error::Configuration(_) => &t.configuration,
            Error::Corruption { .. } => &t.corruption,
            Error::ReadOnly(_) => &t.read_only,
            Error::Closed => &t.closed,
            Error::WriterPoisoned { .. } => &t.poisoned,
            Error::Tier { .. } => &t.tier,
            Error::DataLoss { .. } => &t.data_loss,
            Error::ConsumerBusy { .. } => &t.consumer_busy,
            Error::LockTimeout { .. } => &t.lock_timeout,
            Error::ClaimLost {
                lost, committed, ..
            } => {
                let err = PyErr::from_type(t.claim_lost.bind(py).clone(), (msg,));
                let lost: Vec<(u64, u64, Option<u32>)> = lost
                    .iter()
                    .map(|l| {
                        let pid = match l.now {
                            crate::ClaimNow::Open { pid } => Some(pid),
                            _ => None,
                        };
                        (l.from, l.to, pid)
                    })
                    .collect();
                // Setting attributes on a fresh exception instance does not fail.
                let value = err.value(py);
                let _ = value.setattr("lost", lost);
                let _ = value.setattr("committed", *committed);
                return err;
            }
            Error::Interrupted => {
                // A signal handler raised while the append lock was awaited: its exception.
                return super::interrupt::take()
                    .unwrap_or_else(|| pyo3::exceptions::PyKeyboardInterrupt::new_err(msg));
            }
            Error::CleanerFailed { .. }
            | Error::Unsupported(_)
            | Error::FeatureMissing { .. }
            | Error::OffsetLimit { .. }
            | Error::Internal(_) => &t.base,
        };
        PyErr::from_type(ty.bind(py).clone(), (msg,))
    })
}
