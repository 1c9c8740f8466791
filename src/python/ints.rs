//! Offsets as Python ints by the cheapest C call: CPython builds an int below 2^30 on a fast path
//! from a signed value (`PyLong_FromLongLong`), not from an unsigned one.

use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};

/// `v` as a Python int.
pub fn int(py: Python<'_>, v: u64) -> Bound<'_, PyAny> {
    match i64::try_from(v) {
        Ok(i) => i.into_pyobject(py),
        Err(_) => v.into_pyobject(py),
    }
    .map(|i| i.into_any())
    .unwrap_or_else(|never| match never {})
}

/// A list of the offsets `vs`.
pub fn list<'py>(py: Python<'py>, vs: &[u64]) -> PyResult<Bound<'py, PyList>> {
    PyList::new(py, vs.iter().map(|&v| int(py, v)))
}

/// The pair `(offset, obj)`.
pub fn pair<'py>(py: Python<'py>, v: u64, obj: Bound<'py, PyAny>) -> Bound<'py, PyTuple> {
    PyTuple::new(py, [int(py, v), obj]).unwrap_or_else(|_| unreachable!("a 2-tuple of objects"))
}
