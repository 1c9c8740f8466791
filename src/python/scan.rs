//! `ScanIterator`: records in batches fetched without the GIL, handed out one by one.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use pyo3::exceptions::{PyRuntimeError, PyStopAsyncIteration};
use pyo3::gc::{PyTraverseError, PyVisit};
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use super::aio;
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
        let mut st = self.locked()?;
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
        self.hand_out(py, &mut st)
    }

    fn __aiter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    /// The next record, awaited: a following scan at the end of the records waits in the event
    /// loop (`rmqlog/_aio.py`), its idle timeout counted there.
    fn __anext__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        let idle = slf
            .get()
            .locked()?
            .scan
            .follow()
            .and_then(|(f, _)| f.idle_timeout)
            .map(|t| t.as_secs_f64());
        let log = slf.get().log.clone_ref(slf.py());
        aio::call(slf.py(), "scan_next", (slf, log, idle))
    }

    /// The next record if one is there now; `None` when a following scan is at the end of the
    /// records (the next one is to be awaited); `StopAsyncIteration` once the scan is done.
    fn _next_now<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyTuple>>> {
        let mut st = self.locked()?;
        let log = self.log.get();
        log.log.max_offset()?; // a closed log stops the scan
        let st = &mut *st;
        if st.ready.is_empty() && st.failed.is_none() {
            py.detach(|| fill(&mut st.scan, &mut st.ready, &mut st.failed));
            if let (true, None, Some((f, _))) = (st.ready.is_empty(), &st.failed, st.scan.follow())
            {
                // A shared writer or a follower takes in what the others published: a wait
                // with no time left.
                log.release_views();
                let now = Some(Instant::now());
                if let Waited::Passed(_) =
                    wait::wait(py, &log.log, st.scan.position(), f.durable, now)?
                {
                    py.detach(|| fill(&mut st.scan, &mut st.ready, &mut st.failed));
                }
                if st.ready.is_empty() && st.failed.is_none() && !st.scan.is_done() {
                    return Ok(None);
                }
            }
        }
        match self.hand_out(py, st)? {
            Some(rec) => Ok(Some(rec)),
            None => Err(PyStopAsyncIteration::new_err(())),
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

impl PyScan {
    /// The scan's state; never waited for with the GIL held (the holder may be waiting for it).
    fn locked(&self) -> PyResult<MutexGuard<'_, ScanState>> {
        try_locked(&self.state).ok_or_else(|| {
            PyRuntimeError::new_err("this scan iterator is being advanced by another thread")
        })
    }

    /// The next record fetched (`None`: none left), or the error met after the last one.
    fn hand_out<'py>(
        &self,
        py: Python<'py>,
        st: &mut ScanState,
    ) -> PyResult<Option<Bound<'py, PyTuple>>> {
        let log = self.log.get();
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
