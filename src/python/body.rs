//! Bodies given to `append` and `append_batch`, and how reads hand bodies out ([`BodyOut`]).
//!
//! `bytes` is immutable, so it is read in place. Any other bytes-like object (bytearray,
//! memoryview, array, NumPy, mmap, ...) may change while the GIL is released, and a record's CRC
//! and its stored bytes must come from the same bytes: it is copied first, with the GIL held,
//! straight from its buffer export (no Python call). Its size is checked against
//! `max_message_size` before the copy, and a buffer of Python object references (format `O`) is
//! refused: its bytes are addresses, not data.

use std::ffi::{c_char, CStr};
use std::ops::Range;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};

use super::args;
use crate::{Error, RecordRef};

/// How a read hands out bodies (`body=` of `read`, `read_record`, `scan` and `Consumer.poll`).
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum BodyOut {
    /// A read-only memoryview over the segment's map (no copy): the default, `"view"`.
    View,
    /// A `bytes` copy, made while the record holds its map: `"bytes"`.
    Bytes,
}

impl BodyOut {
    /// The `body=` argument (`None`: the default, a view).
    pub fn of(obj: Option<&Bound<'_, PyAny>>) -> PyResult<BodyOut> {
        let Some(obj) = obj else {
            return Ok(BodyOut::View);
        };
        let Ok(name) = obj.cast::<PyString>() else {
            return Err(PyTypeError::new_err(format!(
                "body must be \"view\" or \"bytes\" (a str), got {}",
                args::type_of(obj)
            )));
        };
        match name.to_str()? {
            "view" => Ok(BodyOut::View),
            "bytes" => Ok(BodyOut::Bytes),
            other => Err(PyValueError::new_err(format!(
                "body must be \"view\" (a memoryview over the map, no copy) or \"bytes\" (a \
                 copy), got {other:?}"
            ))),
        }
    }

    /// The body of `rec`: `view()` makes the memoryview.
    pub fn body<'py>(
        self,
        py: Python<'py>,
        rec: &RecordRef,
        view: impl FnOnce() -> PyResult<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        match self {
            BodyOut::View => view(),
            BodyOut::Bytes => Ok(copy(py, rec)),
        }
    }
}

/// The body of `rec` as `bytes`: one copy, made while `rec` holds its map (mapped, and never
/// rewritten below the log's end).
pub fn copy<'py>(py: Python<'py>, rec: &RecordRef) -> Bound<'py, PyAny> {
    PyBytes::new(py, rec.body()).into_any()
}

/// One body for [`crate::CommitLog::append`].
pub enum Body<'py> {
    Bytes(Bound<'py, PyBytes>),
    Copied(Vec<u8>),
}

impl<'py> Body<'py> {
    /// `obj` as a body of at most `limit` bytes; `what` names it in an error.
    pub fn of(obj: &Bound<'py, PyAny>, what: &str, limit: usize) -> PyResult<Body<'py>> {
        if let Ok(b) = obj.cast::<PyBytes>() {
            return Ok(Body::Bytes(b.clone()));
        }
        let mut copy = Vec::new();
        copy_into(obj, || what.to_owned(), limit, &mut copy)?;
        Ok(Body::Copied(copy))
    }

    pub fn as_slice(&self) -> &[u8] {
        match self {
            Body::Bytes(b) => b.as_bytes(),
            Body::Copied(c) => c,
        }
    }
}

/// The bodies of one `append_batch`: `bytes` held, the others copied into one buffer.
pub struct Bodies<'py> {
    held: Vec<Held<'py>>,
    copies: Vec<u8>,
    limit: usize,
}

enum Held<'py> {
    Bytes(Bound<'py, PyBytes>),
    Copied(Range<usize>),
}

impl<'py> Bodies<'py> {
    /// Room for `n` bodies of at most `limit` bytes each.
    pub fn with_capacity(n: usize, limit: usize) -> Bodies<'py> {
        Bodies {
            held: Vec::with_capacity(n),
            copies: Vec::new(),
            limit,
        }
    }

    /// Adds `obj`, the batch's `i`-th body.
    pub fn push(&mut self, i: usize, obj: &Bound<'py, PyAny>) -> PyResult<()> {
        if let Ok(b) = obj.cast::<PyBytes>() {
            // Its size is the core's to check (naming it too).
            self.held.push(Held::Bytes(b.clone()));
            return Ok(());
        }
        let start = self.copies.len();
        copy_into(obj, || format!("bodies[{i}]"), self.limit, &mut self.copies)?;
        self.held.push(Held::Copied(start..self.copies.len()));
        Ok(())
    }

    /// Each body's bytes, in order.
    pub fn slices(&self) -> Vec<&[u8]> {
        self.held
            .iter()
            .map(|h| match h {
                Held::Bytes(b) => b.as_bytes(),
                Held::Copied(r) => &self.copies[r.clone()],
            })
            .collect()
    }
}

/// Whether `obj` exports a buffer (is itself one body, not an iterable of them).
pub fn is_bytes_like(obj: &Bound<'_, PyAny>) -> bool {
    // SAFETY: the GIL is held (`obj` is bound to it) and `obj` is a live object.
    unsafe { ffi::PyObject_CheckBuffer(obj.as_ptr()) == 1 }
}

/// Appends the bytes of `obj` (in C order) to `out`, refusing what is not a body; `what` names
/// it in an error (formatted only then).
fn copy_into(
    obj: &Bound<'_, PyAny>,
    what: impl Fn() -> String,
    limit: usize,
    out: &mut Vec<u8>,
) -> PyResult<()> {
    let refused = |detail: String| {
        PyTypeError::new_err(format!(
            "{} must be bytes-like (bytes, bytearray, memoryview, ...), got {}{detail}",
            what(),
            args::type_of(obj)
        ))
    };
    if obj.is_instance_of::<PyString>() {
        return Err(refused(String::new()));
    }
    let mut raw = ffi::Py_buffer::new();
    let export = match Export::of(obj, &mut raw) {
        Ok(export) => export,
        Err(e) => {
            let py = obj.py();
            // A released memoryview or a closed mmap says so; a type with no buffer says nothing
            // the type's name does not.
            let detail = if e.is_instance_of::<PyTypeError>(py) {
                String::new()
            } else {
                format!(" ({e})")
            };
            let err = refused(detail);
            err.set_cause(py, Some(e));
            return Err(err);
        }
    };
    if export.holds_objects() {
        return Err(PyValueError::new_err(format!(
            "{} is a buffer of Python object references (format {:?}), not of bytes: its \
             bytes would be memory addresses; store a serialized form (bytes) instead",
            what(),
            String::from_utf8_lossy(export.format())
        )));
    }
    let len = export.len();
    if len > limit {
        // The core's refusal, naming the body.
        return Err(Error::MessageTooLarge {
            size: len,
            limit: format!("max_message_size is {limit} ({})", what()),
        }
        .into());
    }
    export.copy_to(obj.py(), out)
}

/// Row-major order, for the buffer API.
const C: c_char = b'C' as c_char;

/// A buffer export of any layout (`PyBUF_FULL_RO`), released on drop. It borrows the struct
/// the exporter filled, which stays where it was filled until the release.
struct Export<'a> {
    raw: &'a mut ffi::Py_buffer,
}

impl<'a> Export<'a> {
    fn of(obj: &Bound<'_, PyAny>, raw: &'a mut ffi::Py_buffer) -> PyResult<Export<'a>> {
        // SAFETY: the GIL is held (`obj` is bound to it); `raw` is a valid, writable Py_buffer.
        let r = unsafe { ffi::PyObject_GetBuffer(obj.as_ptr(), raw, ffi::PyBUF_FULL_RO) };
        if r != 0 {
            return Err(PyErr::fetch(obj.py()));
        }
        Ok(Export { raw })
    }

    /// Bytes the buffer holds (the product of its shape and item size).
    fn len(&self) -> usize {
        usize::try_from(self.raw.len).unwrap_or(0)
    }

    /// The struct-module format of its items (`B` when the exporter gives none).
    fn format(&self) -> &[u8] {
        if self.raw.format.is_null() {
            return b"B";
        }
        // SAFETY: a non-null format of a live export is a NUL-terminated string it owns, alive
        // until the release (after this borrow of `self` ends).
        unsafe { CStr::from_ptr(self.raw.format) }.to_bytes()
    }

    /// Whether any item is a Python object reference (`O`; field names, `:name:`, skipped).
    fn holds_objects(&self) -> bool {
        self.format()
            .split(|&b| b == b':')
            .step_by(2)
            .any(|codes| codes.contains(&b'O'))
    }

    fn copy_to(&self, py: Python<'_>, out: &mut Vec<u8>) -> PyResult<()> {
        let len = self.len();
        if len == 0 {
            return Ok(());
        }
        out.reserve(len);
        let start = out.len();
        // SAFETY: the export is live; `reserve` made room for `len` more bytes after `start`,
        // which the copy fills completely (a C-contiguous copy of a `len`-byte buffer) before
        // `set_len` counts them.
        unsafe {
            let dest = out.as_mut_ptr().add(start);
            if ffi::PyBuffer_IsContiguous(&*self.raw, C) == 1 {
                std::ptr::copy_nonoverlapping(self.raw.buf as *const u8, dest, len);
            } else if ffi::PyBuffer_ToContiguous(dest.cast(), &*self.raw, self.raw.len, C) != 0 {
                return Err(PyErr::fetch(py));
            }
            out.set_len(start + len);
        }
        Ok(())
    }
}

impl Drop for Export<'_> {
    fn drop(&mut self) {
        // SAFETY: the export was made by `Export::of` and is released once, by the thread that
        // made it with the GIL still held (an `Export` never outlives the call that made it).
        unsafe { ffi::PyBuffer_Release(self.raw) };
    }
}
