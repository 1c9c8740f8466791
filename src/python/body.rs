//! Bodies given to `append` and `append_batch`, read in place: `bytes` directly, any other object
//! that exports a contiguous buffer (bytearray, memoryview, array, NumPy, mmap ...) through the
//! buffer protocol. No copy and no Python call per body; only a non-contiguous view is copied.

use std::ffi::c_int;

use pyo3::exceptions::PyTypeError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyMemoryView, PyString};

use super::args;

/// One body, readable with the GIL released (`as_slice` borrows it).
pub enum Body<'py> {
    Bytes(Bound<'py, PyBytes>),
    /// A buffer export, released on drop (the exporter cannot resize meanwhile: a bytearray
    /// refuses to).
    View(View<'py>),
}

impl<'py> Body<'py> {
    /// `obj` as a body; `what` names the argument in an error (formatted only then).
    pub fn of(obj: &Bound<'py, PyAny>, what: impl Fn() -> String) -> PyResult<Body<'py>> {
        if let Ok(b) = obj.cast::<PyBytes>() {
            return Ok(Body::Bytes(b.clone()));
        }
        let refuse = || {
            PyTypeError::new_err(format!(
                "{} must be bytes-like (bytes, bytearray, memoryview, ...), got {}",
                what(),
                args::type_of(obj)
            ))
        };
        if obj.is_instance_of::<PyString>() {
            return Err(refuse());
        }
        if let Some(view) = View::contiguous(obj) {
            return Ok(Body::View(view));
        }
        // Not contiguous (a strided memoryview), or no buffer at all (refused here).
        let view = PyMemoryView::from(obj).map_err(|_| refuse())?;
        Ok(Body::Bytes(
            view.call_method0("tobytes")?.cast_into::<PyBytes>()?,
        ))
    }

    pub fn as_slice(&self) -> &[u8] {
        match self {
            Body::Bytes(b) => b.as_bytes(),
            Body::View(v) => v.as_slice(),
        }
    }
}

/// A contiguous buffer export (`PyBUF_SIMPLE`: bytes in order, any item format).
pub struct View<'py> {
    // Boxed: the exporter fills the struct in place and may expect it to stay there.
    raw: Box<ffi::Py_buffer>,
    _py: Python<'py>,
}

impl<'py> View<'py> {
    /// `None` when `obj` exports no contiguous buffer (the error is cleared).
    fn contiguous(obj: &Bound<'py, PyAny>) -> Option<View<'py>> {
        let mut raw = Box::new(ffi::Py_buffer::new());
        // SAFETY: the GIL is held (`obj` is bound to it); `raw` is a valid, writable Py_buffer.
        let r: c_int =
            unsafe { ffi::PyObject_GetBuffer(obj.as_ptr(), &mut *raw, ffi::PyBUF_SIMPLE) };
        if r != 0 {
            // Clears the BufferError/TypeError the failed request set.
            drop(PyErr::take(obj.py()));
            return None;
        }
        Some(View { raw, _py: obj.py() })
    }

    fn as_slice(&self) -> &[u8] {
        let len = usize::try_from(self.raw.len).unwrap_or(0);
        if len == 0 || self.raw.buf.is_null() {
            return &[];
        }
        // SAFETY: a PyBUF_SIMPLE export is `len` contiguous bytes at `buf`, valid and not
        // resized until the export is released (on drop, after every borrow of it ends).
        unsafe { std::slice::from_raw_parts(self.raw.buf as *const u8, len) }
    }
}

impl Drop for View<'_> {
    fn drop(&mut self) {
        // SAFETY: the export was made by `contiguous` and is released once; a `View` is bound
        // to the GIL's lifetime and is not `Send`, so it is dropped by a thread holding the GIL.
        unsafe { ffi::PyBuffer_Release(&mut *self.raw) };
    }
}
