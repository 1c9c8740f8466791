//! The Python `Consumer` class: a named consumer of a log (see `crate::consumers`).

use std::sync::{Arc, Mutex};

use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::gc::{PyTraverseError, PyVisit};
use pyo3::prelude::*;
use pyo3::types::{IntoPyDict, PyBool, PyDict, PyInt, PyList, PyString};

use super::aio;
use super::args;
use super::arrow;
use super::body::{self, BodyOut};
use super::buffer::SegmentBuffer;
use super::filter::FilterArgs;
use super::ints;
use super::log::PyCommitLog;
use super::wait;
use crate::read::wait::Waited;
use crate::sync::try_locked;
use crate::{Consumer, ConsumerInfo, Error, Filter, OnLoss, Start};

/// Records a `poll()` returns at most by default.
const POLL_RECORDS: usize = 500;

/// A named consumer: a position in the log the store keeps for its name.
#[pyclass(name = "Consumer", module = "rmqlog", frozen)]
pub struct PyConsumer {
    log: Py<PyCommitLog>,
    name: String,
    /// `None` once closed.
    inner: Mutex<Option<Consumer>>,
}

impl PyConsumer {
    pub(super) fn new(log: Py<PyCommitLog>, consumer: Consumer) -> PyConsumer {
        PyConsumer {
            log,
            name: consumer.name().to_owned(),
            inner: Mutex::new(Some(consumer)),
        }
    }

    /// Runs `f` on the open consumer; one thread at a time.
    fn with<T>(&self, f: impl FnOnce(&mut Consumer) -> PyResult<T>) -> PyResult<T> {
        let mut inner = try_locked(&self.inner).ok_or_else(|| {
            PyRuntimeError::new_err(format!(
                "consumer {:?} is in use by another thread (a consumer is polled from one \
                 thread at a time)",
                self.name
            ))
        })?;
        match inner.as_mut() {
            Some(c) => f(c),
            None => Err(Error::Unsupported(format!("consumer {:?} is closed", self.name)).into()),
        }
    }

    /// [`PyConsumer::with`], with the open's filter narrowed by `narrow` (a poll's own filter)
    /// for the call.
    fn with_narrowed<T>(
        &self,
        narrow: Option<Arc<Filter>>,
        f: impl FnOnce(&mut Consumer) -> PyResult<T>,
    ) -> PyResult<T> {
        self.with(|c| {
            let Some(narrow) = narrow else {
                return f(c);
            };
            let both = match c.filter() {
                Some(own) => own.clone().and(&narrow),
                None => (*narrow).clone(),
            };
            let own = c.replace_filter(Some(Arc::new(both)));
            let out = f(c);
            c.replace_filter(own);
            out
        })
    }
}

#[pymethods]
impl PyConsumer {
    /// Up to `max_records` records from the position as `(offset, memoryview)` pairs
    /// (`body="bytes"`: `(offset, bytes)`; `with_deliveries=True`: `(offset, body, deliveries)`
    /// triples), waiting up to `timeout` seconds (None: as long as it takes) for the first; `[]`
    /// if none came. `key`, `key_prefix`, `headers`: a filter for this poll, on top of the
    /// open's (the records it refuses are moved over as the open's filter's are).
    #[pyo3(
        signature = (
            max_records = None, *, timeout = None, body = None, with_deliveries = false,
            key = None, key_prefix = None, headers = None
        ),
        text_signature = "($self, max_records=None, *, timeout=None, body='view', \
                          with_deliveries=False, key=None, key_prefix=None, headers=None)"
    )]
    #[allow(clippy::too_many_arguments)] // one per keyword of the Python signature
    fn poll<'py>(
        &self,
        py: Python<'py>,
        max_records: Option<&Bound<'py, PyAny>>,
        timeout: Option<&Bound<'py, PyAny>>,
        body: Option<&Bound<'py, PyAny>>,
        with_deliveries: bool,
        key: Option<&Bound<'py, PyAny>>,
        key_prefix: Option<&Bound<'py, PyAny>>,
        headers: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyList>> {
        let max = max_records.map_or(Ok(POLL_RECORDS), |m| count(m, "max_records"))?;
        let bodies = BodyOut::of(body)?;
        let deadline = wait::deadline(timeout)?;
        let narrow = FilterArgs {
            key,
            key_prefix,
            headers,
        }
        .filter("poll")?;
        let log = self.log.get();
        let (records, deliveries) = self.with_narrowed(narrow, |c| loop {
            let records = py.detach(|| c.take(max))?;
            if !records.is_empty() {
                return Ok((records, c.deliveries()));
            }
            if c.gives_up(deadline) {
                return Ok((records, 1));
            }
            // A signal that came while no wait was under way (a shared open's look between
            // two waits, a filtered take between two) is taken here: Ctrl-C ends the poll.
            py.check_signals()?;
            if c.has_more_now() {
                continue; // records its filter refused, and more there: on through them
            }
            let c = &*c;
            log.release_views();
            if let Waited::TimedOut(_) = wait::until(py, || c.wait(deadline, true))? {
                return Ok((records, 1));
            }
        })?;
        let out = PyList::empty(py);
        let mut view: Option<(usize, Bound<'py, SegmentBuffer>)> = None;
        let emit = |offset: u64, body: Bound<'py, PyAny>| -> PyResult<()> {
            if with_deliveries {
                out.append((offset, body, deliveries))
            } else {
                out.append(ints::pair(py, offset, body))
            }
        };
        for rec in &records {
            if bodies == BodyOut::Bytes {
                emit(rec.offset(), body::copy(py, rec).into_any())?;
                continue;
            }
            let (map, range) = rec.mapping();
            let id = Arc::as_ptr(map) as usize;
            let exporter = match &view {
                Some((at, v)) if *at == id => v.clone(),
                _ => {
                    let v = log.exporter(py, rec)?;
                    view = Some((id, v.clone()));
                    v
                }
            };
            emit(
                rec.offset(),
                SegmentBuffer::view(&exporter, range)?.into_any(),
            )?;
        }
        Ok(out)
    }

    /// As `poll`, one `pyarrow.RecordBatch` of up to `max_records` records (and `max_bytes` of
    /// bodies) in a list; `[]` if none came within `timeout`. `with_deliveries=True` adds a
    /// `deliveries` column (uint32). `key`, `key_prefix`, `headers`: as `poll`'s.
    #[pyo3(signature = (
        max_records = None, *, timeout = None, columns = None, body = None, max_bytes = None,
        with_deliveries = false, key = None, key_prefix = None, headers = None,
    ))]
    #[allow(clippy::too_many_arguments)]
    fn poll_batches<'py>(
        &self,
        py: Python<'py>,
        max_records: Option<&Bound<'py, PyAny>>,
        timeout: Option<&Bound<'py, PyAny>>,
        columns: Option<&Bound<'py, PyAny>>,
        body: Option<&Bound<'py, PyAny>>,
        max_bytes: Option<&Bound<'py, PyAny>>,
        with_deliveries: bool,
        key: Option<&Bound<'py, PyAny>>,
        key_prefix: Option<&Bound<'py, PyAny>>,
        headers: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyList>> {
        arrow::pyarrow(py, "poll_batches")?;
        let opts = arrow::batch_options(columns, body, max_records, max_bytes)?;
        let deadline = wait::deadline(timeout)?;
        let narrow = FilterArgs {
            key,
            key_prefix,
            headers,
        }
        .filter("poll_batches")?;
        let batch = self.with_narrowed(narrow, |c| loop {
            if let Some(b) = py.detach(|| c.take_batch(&opts))? {
                return Ok(Some(if with_deliveries {
                    with_deliveries_column(b, c.deliveries())?
                } else {
                    b
                }));
            }
            if c.gives_up(deadline) {
                return Ok(None);
            }
            py.check_signals()?;
            if c.has_more_now() {
                continue;
            }
            let c = &*c;
            self.log.get().release_views();
            if let Waited::TimedOut(_) = wait::until(py, || c.wait(deadline, true))? {
                return Ok(None);
            }
        })?;
        let out = PyList::empty(py);
        if let Some(b) = batch {
            out.append(arrow::to_pyarrow_batch(py, b)?)?;
        }
        Ok(out)
    }

    /// Records durably that every record below `offset` (default: the position, everything
    /// polled so far) is done. Returns the committed position.
    #[pyo3(signature = (offset = None))]
    fn commit(&self, py: Python<'_>, offset: Option<&Bound<'_, PyAny>>) -> PyResult<u64> {
        let offset = offset.map(|o| in_u64(o, "offset")).transpose()?;
        self.with(|c| Ok(py.detach(|| c.commit(offset))?))
    }

    /// Marks the records at `offsets` done, in any order (a shared name's open, records it
    /// received); the committed position moves over the done records at its front, which it
    /// returns. `ClaimLostError` for records another open took meanwhile, after the rest.
    #[pyo3(signature = (offsets, /))]
    fn ack(&self, py: Python<'_>, offsets: &Bound<'_, PyAny>) -> PyResult<u64> {
        let offsets = offset_list(offsets, "ack")?;
        self.with(|c| Ok(py.detach(|| c.ack(&offsets))?))
    }

    /// Hands records back: those at `offsets`, or every record this open received and has not
    /// committed. A shared name's go to the next poll of any open, after `delay` seconds; an
    /// exclusive consumer's position moves back to the first of them.
    #[pyo3(signature = (offsets = None, delay = 0.0))]
    fn nack(&self, py: Python<'_>, offsets: Option<&Bound<'_, PyAny>>, delay: f64) -> PyResult<()> {
        let offsets = offsets.map(|o| offset_list(o, "nack")).transpose()?;
        let delay = std::time::Duration::try_from_secs_f64(delay).map_err(|_| {
            PyValueError::new_err(format!(
                "delay must be a non-negative number of seconds (below about 584 billion \
                 years), got {delay}"
            ))
        })?;
        self.with(|c| Ok(py.detach(|| c.nack(offsets.as_deref(), delay))?))
    }

    /// Extends this open's claims on the records at `offsets` (or on all it holds) by its
    /// redelivery timeout from now: a slow task keeps its records. `ClaimLostError` for those
    /// another open took already.
    #[pyo3(signature = (offsets = None))]
    fn in_progress(&self, py: Python<'_>, offsets: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        let offsets = offsets.map(|o| offset_list(o, "in_progress")).transpose()?;
        self.with(|c| Ok(py.detach(|| c.in_progress(offsets.as_deref()))?))
    }

    /// The name's `max_deliveries` as recorded with it (None: no limit).
    #[getter]
    fn max_deliveries(&self) -> PyResult<Option<u32>> {
        self.with(|c| Ok(Some(c.max_deliveries()).filter(|&n| n > 0)))
    }

    /// Moves the position (the next commit moves the committed one): "earliest", "latest", an
    /// offset, or an aware `datetime` (the first record at or after it).
    #[pyo3(signature = (to, /))]
    fn seek(&self, py: Python<'_>, to: &Bound<'_, PyAny>) -> PyResult<u64> {
        let to = start(to, "seek()")?;
        self.with(|c| Ok(py.detach(|| c.seek(to))?))
    }

    /// `{"records": n, "bytes": n}` between the committed position and the log's end. With a
    /// filter, `"exact"` too: whether `records` counts only the records it accepts (a walk of
    /// their headers, done when the lag is at most 8 MiB) or every record (an upper bound).
    #[getter]
    fn lag<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let (lag, filtered) = self.with(|c| Ok((py.detach(|| c.lag())?, c.filter().is_some())))?;
        let d = PyDict::new(py);
        d.set_item("records", lag.records)?;
        d.set_item("bytes", lag.bytes)?;
        if filtered {
            d.set_item("exact", lag.exact)?;
        }
        Ok(d)
    }

    /// Whether the last poll stopped after stepping over as many records its filter refused as
    /// one poll may, with more there to look at now (asyncio's poll goes on without waiting).
    fn _has_more_now(&self) -> PyResult<bool> {
        self.with(|c| Ok(c.has_more_now()))
    }

    #[getter]
    fn name(&self) -> &str {
        &self.name
    }

    /// The next record a poll delivers.
    #[getter]
    fn position(&self) -> PyResult<u64> {
        self.with(|c| Ok(c.position()))
    }

    /// The committed position: every record below it is done.
    #[getter]
    fn committed(&self) -> PyResult<u64> {
        self.with(|c| Ok(c.committed()))
    }

    #[getter]
    fn closed(&self) -> bool {
        try_locked(&self.inner).is_some_and(|c| c.is_none())
    }

    /// Lets the name go (another open may take it); the committed position stays in the store.
    fn close(&self) -> PyResult<()> {
        let mut inner = try_locked(&self.inner).ok_or_else(|| {
            PyRuntimeError::new_err(format!(
                "consumer {:?} is in use by another thread",
                self.name
            ))
        })?;
        inner.take();
        self.log.get().aio.wake(); // an awaited poll of it ends (`poll_async`)
        Ok(())
    }

    fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, _exc: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<bool> {
        self.close()?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        match try_locked(&self.inner).as_deref() {
            Some(Some(c)) => format!(
                "Consumer(name={:?}, position={}, committed={})",
                self.name,
                c.position(),
                c.committed()
            ),
            Some(None) => format!("Consumer(name={:?}, closed)", self.name),
            None => format!("Consumer(name={:?}, polling)", self.name),
        }
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.log)
    }

    // asyncio (`super::aio`, `rmqlog/_aio.py`): the coroutines poll without waiting and await
    // the store's next change in the event loop.

    /// `poll` as a coroutine: the event loop runs while it waits for the first record. `options`:
    /// `poll`'s keyword arguments (`body`).
    #[pyo3(signature = (max_records = None, *, timeout = None, **options))]
    fn poll_async<'py>(
        slf: &Bound<'py, Self>,
        max_records: Option<&Bound<'py, PyAny>>,
        timeout: Option<&Bound<'py, PyAny>>,
        options: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (relook, options) = slf.get().async_args(slf.py(), max_records, options)?;
        let timeout = timeout.map(|t| args::seconds(t, "timeout")).transpose()?;
        let log = slf.get().log.clone_ref(slf.py());
        let timeout = timeout.map(|t| t.as_secs_f64());
        aio::call(slf.py(), "poll_async", (slf, log, timeout, relook, options))
    }

    /// An async iterator of the non-empty lists `poll_async` returns, until the consumer or its
    /// log closes.
    #[pyo3(signature = (max_records = None, **options))]
    fn stream<'py>(
        slf: &Bound<'py, Self>,
        max_records: Option<&Bound<'py, PyAny>>,
        options: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        if options.is_some_and(|o| o.contains("timeout").unwrap_or(false)) {
            return Err(PyTypeError::new_err(
                "stream() takes no timeout: it goes on until the consumer or its log closes \
                 (poll_async(timeout=...) waits for one batch)",
            ));
        }
        let (relook, options) = slf.get().async_args(slf.py(), max_records, options)?;
        let log = slf.get().log.clone_ref(slf.py());
        aio::call(slf.py(), "stream", (slf, log, relook, options))
    }

    /// `async for batch in consumer`: `stream()`.
    fn __aiter__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        Self::stream(slf, None, None)
    }
}

impl PyConsumer {
    /// The keyword arguments of `poll` for an async poll (`max_records` among them, checked),
    /// and how often it looks again without a store event: a shared name's every
    /// [`crate::read::wait::POLL`] for claims that lapsed, an exclusive one's never.
    fn async_args<'py>(
        &self,
        py: Python<'py>,
        max_records: Option<&Bound<'py, PyAny>>,
        options: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<(Option<f64>, Bound<'py, PyDict>)> {
        let kwargs = options.map_or_else(|| Ok(PyDict::new(py)), |o| o.copy())?;
        if let Some(m) = max_records {
            count(m, "max_records")?;
            kwargs.set_item("max_records", m)?;
        }
        if let Some(b) = kwargs.get_item("body")? {
            BodyOut::of(Some(&b))?;
        }
        // Polls look again this often without a store event: for the claims of other opens
        // that lapse (shared), and for a nack's delay or a seek by another task (exclusive).
        self.with(|_| Ok(()))?;
        let relook = Some(crate::read::wait::POLL.as_secs_f64());
        Ok((relook, kwargs))
    }
}

/// A `start=` or `seek()` argument.
pub(super) fn start(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Start> {
    if let Ok(s) = obj.cast::<PyString>() {
        return match s.to_str()? {
            "earliest" => Ok(Start::Earliest),
            "latest" => Ok(Start::Latest),
            other => Err(PyValueError::new_err(format!(
                "{what}: {other:?} is not a position; give \"earliest\", \"latest\", an offset \
                 (int) or an aware datetime"
            ))),
        };
    }
    if obj.is_instance_of::<PyInt>() && !obj.is_instance_of::<PyBool>() {
        return Ok(Start::Offset(in_u64(obj, what)?));
    }
    let datetime = obj.py().import("datetime")?.getattr("datetime")?;
    if obj.is_instance(&datetime)? {
        if obj.call_method0("utcoffset")?.is_none() {
            return Err(PyValueError::new_err(format!(
                "{what}: a naive datetime is ambiguous; give one with a timezone (e.g. \
                 datetime.now(timezone.utc))"
            )));
        }
        // Whole microseconds since the epoch, exactly; a start inside a millisecond begins at
        // the next one (the first record at or after it).
        let epoch = datetime.call_method1("fromtimestamp", (0, obj.getattr("tzinfo")?))?;
        let us: i128 = obj
            .call_method1("__sub__", (epoch,))?
            .call_method1(
                "__floordiv__",
                (obj.py()
                    .import("datetime")?
                    .getattr("timedelta")?
                    .call((), Some(&[("microseconds", 1)].into_py_dict(obj.py())?))?,),
            )?
            .extract()?;
        return Ok(Start::Timestamp(
            u64::try_from((us.max(0) + 999) / 1000).unwrap_or(u64::MAX),
        ));
    }
    Err(PyTypeError::new_err(format!(
        "{what} must be \"earliest\", \"latest\", an offset (int) or an aware datetime, got {}",
        args::type_of(obj)
    )))
}

/// `on_loss=`: "raise" or "skip".
pub(super) fn on_loss(obj: Option<&Bound<'_, PyAny>>) -> PyResult<OnLoss> {
    match obj
        .map(|o| args::string(o, "on_loss"))
        .transpose()?
        .as_deref()
    {
        None | Some("raise") => Ok(OnLoss::Raise),
        Some("skip") => Ok(OnLoss::Skip),
        Some(other) => Err(PyValueError::new_err(format!(
            "on_loss must be \"raise\" (DataLossError at each poll until seek) or \"skip\" (a \
             warning, then on from the earliest record left), got {other:?}"
        ))),
    }
}

/// A consumer as `CommitLog.consumers()` lists it.
pub(super) fn info<'py>(py: Python<'py>, c: &ConsumerInfo) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("name", &c.name)?;
    d.set_item("position", c.position)?;
    d.set_item("lag_bytes", c.lag_bytes)?;
    d.set_item("lag_records", c.lag_records)?;
    d.set_item("committed_ms", c.committed_ms)?;
    d.set_item("created_ms", c.created_ms)?;
    d.set_item("open", c.open)?;
    d.set_item("holds_retention", c.holds_retention)?;
    d.set_item("members", &c.members)?;
    d.set_item("pending", c.pending)?;
    d.set_item("redelivered", c.redelivered)?;
    d.set_item("waiting", c.waiting)?;
    d.set_item("dead_lettered", c.dead_lettered)?;
    d.set_item("max_deliveries", Some(c.max_deliveries).filter(|&n| n > 0))?;
    Ok(d)
}

/// `offsets`: an iterable of record offsets.
fn offset_list(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Vec<u64>> {
    if obj.is_instance_of::<PyInt>() {
        return Err(PyTypeError::new_err(format!(
            "{what}(offsets) takes a list of offsets, got one int (write [{obj}])"
        )));
    }
    let iter = obj.try_iter().map_err(|_| {
        PyTypeError::new_err(format!(
            "{what}(offsets) takes a list of offsets, got {}",
            args::type_of(obj)
        ))
    })?;
    iter.map(|o| in_u64(&o?, "offset")).collect()
}

/// `batch` with a `deliveries` column: every row `deliveries` (a poll's records share it).
fn with_deliveries_column(
    batch: arrow_array::RecordBatch,
    deliveries: u32,
) -> PyResult<arrow_array::RecordBatch> {
    use arrow_array::{Array, UInt32Array};
    use arrow_schema::{DataType, Field, Schema};
    let column: Arc<dyn Array> = Arc::new(UInt32Array::from(vec![deliveries; batch.num_rows()]));
    let mut fields: Vec<Field> = batch
        .schema()
        .fields()
        .iter()
        .map(|f| f.as_ref().clone())
        .collect();
    fields.push(Field::new("deliveries", DataType::UInt32, false));
    let mut columns = batch.columns().to_vec();
    columns.push(column);
    let schema = Schema::new_with_metadata(fields, batch.schema().metadata().clone());
    arrow_array::RecordBatch::try_new(Arc::new(schema), columns)
        .map_err(|e| PyRuntimeError::new_err(format!("adding the deliveries column: {e}")))
}

fn in_u64(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<u64> {
    let v = args::offset(obj, what)?;
    u64::try_from(v).map_err(|_| {
        PyValueError::new_err(format!(
            "{what} must be an offset from 0 to 2**64-1, got {v}"
        ))
    })
}

fn count(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<usize> {
    let refuse = || PyValueError::new_err(format!("{what} must be a positive int, got {obj}"));
    if obj.is_instance_of::<PyBool>() || !obj.is_instance_of::<PyInt>() {
        return Err(PyTypeError::new_err(format!(
            "{what} must be a positive int, got {}",
            args::type_of(obj)
        )));
    }
    match obj.extract::<u64>() {
        Ok(n) if n > 0 => Ok(usize::try_from(n).unwrap_or(usize::MAX)),
        _ => Err(refuse()),
    }
}
