//! Zero-copy export of a segment's map to Python through the buffer protocol.

use std::ffi::c_int;
use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use pyo3::exceptions::PyBufferError;
use pyo3::ffi;
use pyo3::prelude::*;

use crate::Mapping;

/// `next_end` when no range is pending: the next export is the whole map.
const WHOLE: usize = usize::MAX;

/// Exports one segment's map as a read-only buffer. No `__releasebuffer__`: nothing is allocated
/// per view, and other views may still use the map. Every memoryview over it holds a strong
/// reference to this object, which holds the map: the bytes stay mapped as long as any view (or a
/// slice of one) lives, even after the log is closed or the file deleted.
#[pyclass(frozen, module = "rmqlog._native", name = "SegmentBuffer")]
pub struct SegmentBuffer {
    map: Arc<Mapping>,
    /// The range the next export covers, set by [`SegmentBuffer::view`] just before it asks for
    /// the export with the GIL held, and taken by that export: a record's memoryview is made
    /// straight from this exporter (one managed buffer and one view, no slice object, no ints).
    next_start: AtomicUsize,
    next_end: AtomicUsize,
}

impl SegmentBuffer {
    pub fn new(map: Arc<Mapping>) -> Self {
        SegmentBuffer {
            map,
            next_start: AtomicUsize::new(0),
            next_end: AtomicUsize::new(WHOLE),
        }
    }

    pub fn mapping(&self) -> &Arc<Mapping> {
        &self.map
    }

    /// A read-only memoryview of the bytes `range` of the map (no copy).
    pub fn view<'py>(slf: &Bound<'py, Self>, range: Range<usize>) -> PyResult<Bound<'py, PyAny>> {
        let this = slf.get();
        this.next_start.store(range.start, Ordering::Relaxed);
        this.next_end.store(range.end, Ordering::Relaxed);
        // SAFETY: `slf` is a live object exporting the buffer protocol; the call returns a new
        // reference (or NULL with an exception set), which `from_owned_ptr_or_err` takes over.
        // The GIL is held from the store above to the export, so no other export takes the range.
        let view = unsafe {
            Bound::from_owned_ptr_or_err(slf.py(), ffi::PyMemoryView_FromObject(slf.as_ptr()))
        };
        this.next_end.store(WHOLE, Ordering::Relaxed);
        view
    }

    /// The range to export now: the pending one (taken), else the whole map.
    fn take_range(&self) -> PyResult<Range<usize>> {
        let end = self.next_end.swap(WHOLE, Ordering::Relaxed);
        if end == WHOLE {
            return Ok(0..self.map.len());
        }
        let start = self.next_start.load(Ordering::Relaxed);
        if start > end || end > self.map.len() {
            return Err(PyBufferError::new_err(format!(
                "range {start}..{end} is outside the segment's {} bytes",
                self.map.len()
            )));
        }
        Ok(start..end)
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
        let this = slf.get();
        let range = this.take_range()?;
        let len = ffi::Py_ssize_t::try_from(range.len())
            .map_err(|_| PyBufferError::new_err("segment too large to export"))?;
        // SAFETY: `view` is a valid Py_buffer supplied by CPython. PyBuffer_FillInfo stores a new
        // strong reference to `slf` in `view.obj`, so this exporter, and through it the `Arc` of
        // the map, outlives every view. `range` lies inside the map (checked by `take_range`).
        // The map is never written below the published end that readers are handed slices of,
        // and is unmapped only when the last `Arc` drops.
        let rc = unsafe {
            ffi::PyBuffer_FillInfo(
                view,
                slf.as_ptr(),
                this.map.as_ptr().add(range.start) as *mut std::ffi::c_void,
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
