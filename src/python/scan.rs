//! `ScanIterator`: records in batches fetched without the GIL, handed out one by one.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use pyo3::exceptions::PyRuntimeError;
use pyo3::gc::{PyTraverseError, PyVisit};
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use super::body::{self, BodyOut};
use super::buffer::SegmentBuffer;
use super::ints;
use super::log::PyCommitLog;
use super::wait;
use crate::read::wait::Waited;
use crate::sync::try_locked;
use crate::{Error, RecordRef, Scan};

/// A scan fetches up to this many records (or bytes) per release of the GIL.
const SCAN_BATCH_RECORDS: usize = 1024;
const SCAN_BATCH_BYTES: usize = 4 << 20;

pub(super) struct ScanState {
    pub(super) scan: Scan,
    pub(super) ready: VecDeque<RecordRef>,
    pub(super) failed: Option<Error>,
    /// The exporter of the map the last body came from (address, exporter): consecutive records
    /// share it without a trip through the log's cache.
    pub(super) view: Option<(usize, Py<SegmentBuffer>)>,
    /// How bodies are handed out (`body=`).
    pub(super) out: BodyOut,
}

/// Iterator of `(offset, memoryview)` (or `(offset, bytes)`) returned by `CommitLog.scan()`.
#[pyclass(name = "ScanIterator", module = "rmqlog", frozen)]
pub struct PyScan {
    pub(super) log: Py<PyCommitLog>,
    pub(super) state: Mutex<ScanState>,
}

#[pymethods]
impl PyScan {
    fn __iter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    fn __next__<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyTuple>>> {
        // Never wait for this lock with the GIL held: the holder may be waiting for the GIL.
        let mut st = try_locked(&self.state).ok_or_else(|| {
            PyRuntimeError::new_err("this scan iterator is being advanced by another thread")
        })?;
        let log = self.log.get();
        log.log.max_offset()?; // a closed log stops the scan
        if st.ready.is_empty() {
            if let Some(e) = st.failed.take() {
                return Err(e.into());
            }
            let st = &mut *st;
            py.detach(|| fill(&mut st.scan, &mut st.ready, &mut st.failed));
            // A following scan at the end of the records waits for more, GIL released.
            while let (true, None, Some((f, _))) =
                (st.ready.is_empty(), &st.failed, st.scan.follow())
            {
                if st.scan.is_done() {
                    break;
                }
                let deadline = f.idle_timeout.map(|t| Instant::now() + t);
                log.release_views();
                match wait::wait(py, &log.log, st.scan.position(), f.durable, deadline) {
                    Ok(Waited::Passed(_)) => {}
                    Ok(_) | Err(_) if log.log.is_closed() => return Ok(None),
                    Ok(_) => return Ok(None), // idle for `timeout`
                    Err(e) => return Err(e),
                }
                py.detach(|| fill(&mut st.scan, &mut st.ready, &mut st.failed));
            }
        }
        match st.ready.pop_front() {
            Some(rec) if st.out == BodyOut::Bytes => {
                Ok(Some(ints::pair(py, rec.offset(), body::copy(py, &rec))))
            }
            Some(rec) => {
                let (map, range) = rec.mapping();
                let id = Arc::as_ptr(map) as usize;
                let body = match &st.view {
                    Some((at, v)) if *at == id => SegmentBuffer::view(v.bind(py), range)?,
                    _ => {
                        let v = log.exporter(py, &rec)?;
                        st.view = Some((id, v.clone().unbind()));
                        SegmentBuffer::view(&v, range)?
                    }
                };
                Ok(Some(ints::pair(py, rec.offset(), body)))
            }
            None => match st.failed.take() {
                Some(e) => Err(e.into()),
                None => Ok(None),
            },
        }
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.log)?;
        if let Ok(st) = self.state.try_lock() {
            if let Some((_, v)) = &st.view {
                visit.call(v)?;
            }
        }
        Ok(())
    }
}

/// Reads the next batch of records (validated, CRC checked) without the GIL; a following scan
/// takes only those there now.
fn fill(scan: &mut Scan, ready: &mut VecDeque<RecordRef>, failed: &mut Option<Error>) {
    let mut bytes = 0;
    while ready.len() < SCAN_BATCH_RECORDS && bytes < SCAN_BATCH_BYTES {
        match scan.next_now() {
            Some(Ok(rec)) => {
                bytes += rec.len();
                ready.push_back(rec);
            }
            Some(Err(e)) => {
                *failed = Some(e);
                return;
            }
            None => return,
        }
    }
}
