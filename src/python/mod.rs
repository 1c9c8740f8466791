//! PyO3 bindings: the `rmqlog._native` extension module. Bindings only; the logic is in the core.

// Python objects have `__repr__`; a Rust `Debug` on them would go unused.
#![allow(missing_debug_implementations)]

mod aio;
mod args;
mod arrow;
mod body;
mod buffer;
mod consumer;
mod dirs;
mod errors;
mod filter;
mod fleet;
mod interrupt;
mod ints;
mod log;
mod logging;
mod options;
mod props;
mod record;
mod scan;
mod views;
mod wait;

use pyo3::prelude::*;
use pyo3::types::{PyFrozenSet, PyTuple};

/// The native half of the `rmqlog` package.
#[pymodule]
#[pyo3(name = "_native")]
fn native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    logging::install();
    errors::register(m)?;
    m.add_class::<log::PyCommitLog>()?;
    m.add_class::<record::PyRecord>()?;
    m.add_class::<record::PySegment>()?;
    m.add_class::<scan::PyScan>()?;
    m.add_class::<consumer::PyConsumer>()?;
    m.add_class::<arrow::PyBatchScan>()?;
    m.add_class::<buffer::SegmentBuffer>()?;
    m.add_class::<dirs::PyDirInfo>()?;
    m.add_function(wrap_pyfunction!(fleet::tier_stores, m)?)?;
    m.add_function(wrap_pyfunction!(logging::_shutdown_logging, m)?)?;
    m.add_function(wrap_pyfunction!(logging::_flush_logging, m)?)?;
    m.add("HEADER_LEN", crate::HEADER_LEN)?;
    m.add("MAX_KEY_LEN", crate::MAX_KEY_LEN)?;
    m.add("MAX_ID_LEN", crate::MAX_ID_LEN)?;
    m.add("MAX_OFFSET", crate::MAX_OFFSET)?;
    m.add("SPLIT_EVERY", crate::SPLIT_EVERY)?;
    m.add("DEFAULTS", options::defaults(m.py())?)?;
    m.add("PRESETS", options::presets(m.py())?)?;
    let store_wide = crate::StoreSetting::ALL.map(crate::StoreSetting::name);
    m.add("STORE_SETTINGS", PyTuple::new(m.py(), store_wide)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("FEATURES", PyFrozenSet::new(m.py(), crate::FEATURES)?)?;
    Ok(())
}

/// Logs a warning on the `rmqlog` Python logger (for errors raised by user callbacks).
fn log_warning(py: Python<'_>, msg: &str) {
    let logged = py
        .import("logging")
        .and_then(|l| l.call_method1("getLogger", ("rmqlog",)))
        .and_then(|l| l.call_method1("warning", (msg,)));
    if logged.is_err() {
        eprintln!("rmqlog: {msg}");
    }
}
