//! `Record` and `Segment`: what `read_record()` and `segments()` hand to Python.

use pyo3::gc::{PyTraverseError, PyVisit};
use pyo3::prelude::*;

/// One record: offset, timestamp, body (a memoryview) and the next record's offset.
#[pyclass(name = "Record", module = "rmqlog", frozen)]
pub struct PyRecord {
    /// Physical offset of the record.
    #[pyo3(get)]
    pub(super) offset: u64,
    /// Store timestamp, milliseconds since the Unix epoch.
    #[pyo3(get)]
    pub(super) timestamp_ms: u64,
    /// Offset of the next record (after a segment filler: the next segment's start).
    #[pyo3(get)]
    pub(super) next_offset: u64,
    pub(super) size: usize,
    /// The body, a read-only memoryview over the map.
    #[pyo3(get)]
    pub(super) body: Py<PyAny>,
    /// The key (bytes), or None.
    #[pyo3(get)]
    pub(super) key: Option<Py<PyAny>>,
    /// The headers: a list of (str, bytes) tuples, in order.
    #[pyo3(get)]
    pub(super) headers: Py<pyo3::types::PyList>,
    /// The message id it was appended with (bytes), or None.
    #[pyo3(get)]
    pub(super) msg_id: Option<Py<PyAny>>,
}

#[pymethods]
impl PyRecord {
    fn __repr__(&self) -> String {
        format!(
            "Record(offset={}, timestamp_ms={}, size={}, next_offset={})",
            self.offset, self.timestamp_ms, self.size, self.next_offset
        )
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.body)?;
        for b in [&self.key, &self.msg_id].into_iter().flatten() {
            visit.call(b)?;
        }
        visit.call(&self.headers)
    }
}

/// One segment file.
#[pyclass(name = "Segment", module = "rmqlog", frozen, eq)]
#[derive(PartialEq)]
pub struct PySegment {
    /// Physical offset of the segment's first byte (its file name).
    #[pyo3(get)]
    pub(super) start_offset: u64,
    /// Full path of the file.
    #[pyo3(get)]
    pub(super) path: String,
    /// File length.
    #[pyo3(get)]
    pub(super) size: u64,
    /// Bytes in use (a sealed segment counts its end filler: all of it).
    #[pyo3(get)]
    pub(super) written: u64,
    /// Sealed: wholly below max_offset, not the last segment; only these are deleted or moved.
    #[pyo3(get)]
    pub(super) sealed: bool,
    /// The segment has a file in the store's directories.
    #[pyo3(get)]
    pub(super) local: bool,
    /// The segment has a verified copy in the remote tier (`path` is its URL when not local).
    #[pyo3(get)]
    pub(super) remote: bool,
    /// Offsets inside it where a record starts, known without reading it (a remote copy's, one
    /// per 32 MiB): a reader may split the segment there.
    #[pyo3(get)]
    pub(super) splits: Vec<u64>,
}

#[pymethods]
impl PySegment {
    fn __repr__(&self) -> String {
        format!(
            "Segment(start_offset={}, path={:?}, size={}, written={}, sealed={}, local={}, \
             remote={})",
            self.start_offset,
            self.path,
            self.size,
            self.written,
            py_bool(self.sealed),
            py_bool(self.local),
            py_bool(self.remote),
        )
    }
}

fn py_bool(b: bool) -> &'static str {
    if b {
        "True"
    } else {
        "False"
    }
}
