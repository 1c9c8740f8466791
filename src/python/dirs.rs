//! `DirInfo`: one directory of a store, as Python sees it.

use pyo3::prelude::*;

use crate::DirInfo;

/// One directory of the store: its state and disk usage.
#[pyclass(name = "DirInfo", module = "rmqlog", frozen, eq)]
#[derive(PartialEq)]
pub struct PyDirInfo {
    /// The directory, absolute.
    #[pyo3(get)]
    path: String,
    /// `"writable"`, `"read_only"`, `"full"` or `"offline"`.
    #[pyo3(get)]
    state: &'static str,
    /// Size of its filesystem, or None when unknown (unreadable, or it reports no size).
    #[pyo3(get)]
    total_bytes: Option<u64>,
    /// Space an unprivileged writer can use there, or None when unknown.
    #[pyo3(get)]
    free_bytes: Option<u64>,
    /// Used ratio as `df` computes it, or None when unknown.
    #[pyo3(get)]
    used_ratio: Option<f64>,
    /// Live segments of this log in the directory.
    #[pyo3(get)]
    segments: usize,
    /// Why the directory is offline or full, else None.
    #[pyo3(get)]
    error: Option<String>,
}

impl From<DirInfo> for PyDirInfo {
    fn from(d: DirInfo) -> Self {
        PyDirInfo {
            path: d.path.to_string_lossy().into_owned(),
            state: d.state.as_str(),
            total_bytes: d.total_bytes,
            free_bytes: d.free_bytes,
            used_ratio: d.used_ratio,
            segments: d.segments,
            error: d.error,
        }
    }
}

#[pymethods]
impl PyDirInfo {
    fn __repr__(&self) -> String {
        format!(
            "DirInfo(path={:?}, state={:?}, free_bytes={}, total_bytes={}, used_ratio={}, \
             segments={}, error={:?})",
            self.path,
            self.state,
            self.free_bytes.map_or("None".into(), |b| b.to_string()),
            self.total_bytes.map_or("None".into(), |b| b.to_string()),
            self.used_ratio.map_or("None".into(), |r| format!("{r:.3}")),
            self.segments,
            self.error
        )
    }
}
