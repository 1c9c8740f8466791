//! PyO3 bindings: the `rmqlog._native` extension module. Bindings only; the logic is in the core.

// Python objects have `__repr__`; a Rust `Debug` on them would go unused.
#![allow(missing_debug_implementations)]

mod args;
mod buffer;
mod errors;
mod log;

use pyo3::prelude::*;

/// The native half of the `rmqlog` package.
#[pymodule]
#[pyo3(name = "_native")]
fn native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    errors::register(m)?;
    m.add_class::<log::PyCommitLog>()?;
    m.add_class::<log::PyRecord>()?;
    m.add_class::<log::PySegment>()?;
    m.add_class::<log::PyScan>()?;
    m.add_class::<buffer::SegmentBuffer>()?;
    m.add("HEADER_LEN", crate::HEADER_LEN)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
