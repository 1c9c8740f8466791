//! Zero-copy export of a segment's map to Python through the buffer protocol.

use std::ffi::c_int;
use std::sync::Arc;

use pyo3::exceptions::PyBufferError;
use pyo3::ffi;
use pyo3::prelude::*;

use crate::Mapping;

/// Exports one segment's map as a read-only buffer. No `__releasebuffer__`: nothing is allocated
/// per view, and other views may still use the map. Every memoryview over it holds a strong
/// reference to this object, which holds the map: the bytes stay mapped as long as any view (or a
/// slice of one) lives, even after the log is closed or the file deleted.
#[pyclass(frozen, module = "rmqlog._native", name = "SegmentBuffer")]
pub struct SegmentBuffer {
    map: Arc<Mapping>,
}

impl SegmentBuffer {
    pub fn new(map: Arc<Mapping>) -> Self {
        SegmentBuffer { map }
    }

    pub fn mapping(&self) -> &Arc<Mapping> {
        &self.map
    }
}

#[pymethods]
impl SegmentBuffer {
    /// # Safety
    /// Called by CPython with a valid `view` to fill.
    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut ffi::Py_buffer,
        flags: c_int,
    ) -> PyResult<()> {
        if view.is_null() {
            return Err(PyBufferError::new_err("view is null"));
        }
        if flags & ffi::PyBUF_WRITABLE == ffi::PyBUF_WRITABLE {
            return Err(PyBufferError::new_err("rmqlog buffers are read-only"));
        }
        let map = &slf.get().map;
        let len = ffi::Py_ssize_t::try_from(map.len())
            .map_err(|_| PyBufferError::new_err("segment too large to export"))?;
        // SAFETY: `view` is a valid Py_buffer supplied by CPython. PyBuffer_FillInfo stores a new
        // strong reference to `slf` in `view.obj`, so this exporter, and through it the `Arc` of
        // the map, outlives every view. The map is never written below the published end that
        // readers are handed slices of, and is unmapped only when the last `Arc` drops.
        let rc = unsafe {
            ffi::PyBuffer_FillInfo(
                view,
                slf.as_ptr(),
                map.as_ptr() as *mut std::ffi::c_void,
                len,
                1,
                flags,
            )
        };
        if rc == -1 {
            return Err(PyErr::fetch(slf.py()));
        }
        Ok(())
    }
}
