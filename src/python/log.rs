//! The Python `CommitLog` class and the objects it hands out.

use std::collections::VecDeque;
use std::sync::Mutex;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::gc::{PyTraverseError, PyVisit};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyDict, PyInt, PyList, PyString, PyTuple};

use super::aio;
use super::args::{self, Arg};
use super::arrow;
use super::body::{self, Bodies, Body, BodyOut};
use super::buffer::SegmentBuffer;
use super::consumer::{self, PyConsumer};
use super::dirs::PyDirInfo;
use super::errors;
use super::filter::FilterArgs;
use super::interrupt;
use super::ints;
use super::options;
use super::props;
use super::record::{PyRecord, PySegment};
use super::scan::{PyScan, ScanState};
use super::views::ViewCache;
use super::wait;
use crate::read::wait::Waited;
use crate::{CommitLog, Error, Follow, RecordRef};

/// A segmented, memory-mapped commit log over one or more directories.
#[pyclass(name = "CommitLog", module = "rmqlog", frozen)]
pub struct PyCommitLog {
    pub(super) log: CommitLog,
    views: ViewCache,
    /// The event loops waiting on the log, and the thread that wakes them (`aio.rs`).
    pub(super) aio: aio::Hub,
}

/// `append_batch`'s bodies, readable with the GIL released: a list or tuple by index, any other
/// iterable by iterating it; each of at most `limit` bytes.
fn bodies_of<'py>(bodies: &Bound<'py, PyAny>, limit: usize) -> PyResult<Bodies<'py>> {
    if let Ok(list) = bodies.cast::<PyList>() {
        let mut held = Bodies::with_capacity(list.len(), limit);
        for (i, item) in list.iter().enumerate() {
            held.push(i, &item)?;
        }
        return Ok(held);
    }
    if let Ok(tuple) = bodies.cast::<PyTuple>() {
        let mut held = Bodies::with_capacity(tuple.len(), limit);
        for (i, item) in tuple.iter().enumerate() {
            held.push(i, &item)?;
        }
        return Ok(held);
    }
    let iter = bodies.try_iter().map_err(|_| {
        PyTypeError::new_err(format!(
            "bodies must be an iterable of bytes-like objects or an Arrow binary array, got {}",
            args::type_of(bodies)
        ))
    })?;
    let mut held = Bodies::with_capacity(0, limit);
    for (i, item) in iter.enumerate() {
        held.push(i, &item?)?;
    }
    Ok(held)
}

/// A scan's `follow`, `timeout` and `durable` arguments: `None` for a scan of the records there
/// now (which takes neither `timeout` nor `durable`).
fn follow_args(
    follow: bool,
    timeout: Option<&Bound<'_, PyAny>>,
    durable: bool,
) -> PyResult<Option<Follow>> {
    if !follow {
        if timeout.is_some() || durable {
            return Err(PyValueError::new_err(
                "timeout and durable apply to a following scan: pass follow=True with them",
            ));
        }
        return Ok(None);
    }
    let idle_timeout = timeout.map(|t| args::seconds(t, "timeout")).transpose()?;
    Ok(Some(Follow {
        idle_timeout,
        durable,
    }))
}

/// A damaged range as `verify()` returns it: `(start_offset, end_offset, reason)`.
type Damaged = (u64, u64, String);

impl PyCommitLog {
    /// The largest body this log takes (`max_message_size`).
    fn max_body(&self) -> usize {
        self.log.options().max_message_size as usize
    }

    /// The `start` and `end` of a scan: offsets, `start` in the log, `end` clamped.
    fn range_args(
        &self,
        start: Option<&Bound<'_, PyAny>>,
        end: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<(Option<u64>, Option<u64>)> {
        let start = match start {
            Some(s) => {
                let s = args::offset(s, "start")?;
                Some(u64::try_from(s).map_err(|_| Error::OffsetOutOfRange {
                    offset: s,
                    min: self.log.min_offset().unwrap_or(0),
                    max: self.log.max_offset().unwrap_or(0),
                })?)
            }
            None => None,
        };
        let end = end.map(|e| args::offset(e, "end")).transpose()?;
        Ok((start, end.map(|e| e.clamp(0, u64::MAX as i128) as u64)))
    }

    /// A memoryview of a record's body, made by the cached exporter of its segment's map.
    pub(super) fn body_view<'py>(
        &self,
        py: Python<'py>,
        rec: &RecordRef,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (map, range) = rec.mapping();
        self.prune_views();
        let exporter = self.views.exporter(py, map, rec.segment_start())?;
        SegmentBuffer::view(&exporter, range)
    }

    /// The exporter of the map of `rec`'s segment, for callers that make many bodies from it.
    pub(super) fn exporter<'py>(
        &self,
        py: Python<'py>,
        rec: &RecordRef,
    ) -> PyResult<Bound<'py, SegmentBuffer>> {
        self.prune_views();
        self.views
            .exporter(py, rec.mapping().0, rec.segment_start())
    }

    /// Lets go of the cached views of deleted segments; whether there were any.
    fn prune_views(&self) -> bool {
        self.views.prune(self.log.min_offset().unwrap_or(0))
    }

    /// Before a wait: the cached maps go (a view the caller holds keeps its own), so that a wait
    /// pins no segment the disk limits delete meanwhile (their blocks free at once).
    pub(super) fn release_views(&self) {
        self.views.clear();
    }

    fn record(&self, py: Python<'_>, rec: &RecordRef, out: BodyOut) -> PyResult<PyRecord> {
        let p = rec.props()?;
        let (key, headers) = props::to_python(py, &p)?;
        Ok(PyRecord {
            key: key.map(|k| k.into_any().unbind()),
            msg_id: p.id.map(|i| PyBytes::new(py, i).into_any().unbind()),
            headers: headers.unbind(),
            offset: rec.offset(),
            timestamp_ms: rec.timestamp_ms(),
            next_offset: rec.next_offset(),
            size: rec.len(),
            body: out.body(py, rec, || self.body_view(py, rec))?.unbind(),
        })
    }

    /// An offset argument as `u64`; a negative one (or one past 2^64) is out of range.
    fn offset_in_range(&self, offset: &Bound<'_, PyAny>) -> PyResult<u64> {
        // The common case in one C call: an `int` (not a subclass such as `bool`) in range.
        if offset.is_exact_instance_of::<PyInt>() {
            if let Ok(off) = offset.extract::<u64>() {
                return Ok(off);
            }
        }
        let off = args::offset(offset, "offset")?;
        u64::try_from(off).or_else(|_| {
            let (min, max) = (self.log.min_offset()?, self.log.max_offset()?);
            Err(errors::out_of_range(format!(
                "offset {} is out of range: the log holds [{min}, {max})",
                offset.repr()?
            )))
        })
    }

    /// The record at `offset`; with the GIL released unless its segment is mapped already (a
    /// first read of a segment opens its file, or fetches from the remote tier).
    fn read_checked(&self, offset: &Bound<'_, PyAny>) -> PyResult<RecordRef> {
        let off = self.offset_in_range(offset)?;
        match self.log.try_read(off)? {
            Some(rec) => Ok(rec),
            None => Ok(offset.py().detach(|| self.log.read(off))?),
        }
    }
}

#[pymethods]
impl PyCommitLog {
    #[new]
    #[pyo3(
        text_signature = "(paths, *, preset=..., segment_size=..., strategy=..., read_only=..., \
        wait_for_store_ms=..., exclusive=..., flush=..., flush_interval_ms=..., lock_timeout_ms=..., max_message_size=..., read_only_paths=..., accept_lost=..., \
        max_used_ratio=..., force_clean_ratio=..., min_free_bytes=..., warm_ahead=..., \
        on_dir_event=..., retention_hours=..., delete_hours=..., retention_bytes=..., \
        retain_unconsumed=..., consumer_idle_hours=..., max_deletes_per_pass=..., clean_interval_ms=..., file_mode=..., \
        record_format=..., tier_url=..., \
        tier_options=..., tier_after=..., local_retention_hours=..., local_retention_bytes=..., \
        tier_cache_bytes=..., tier_cache_dir=..., dedup_window_ms=..., dedup_window_records=...)"
    )]
    // An option not given takes its value from the preset, else from `Options::default()`
    // (`rmqlog.DEFAULTS`). `None` means "not given", except for the options taken as `Arg`, where
    // it means "off".
    #[pyo3(signature = (
        paths,
        *,
        preset = None,
        segment_size = None,
        strategy = None,
        read_only = None,
        wait_for_store_ms = None,
        exclusive = None,
        flush = None,
        flush_interval_ms = None,
        lock_timeout_ms = None,
        max_message_size = None,
        read_only_paths = None,
        accept_lost = None,
        max_used_ratio = Arg::NotGiven,
        force_clean_ratio = Arg::NotGiven,
        min_free_bytes = None,
        warm_ahead = None,
        on_dir_event = None,
        retention_hours = Arg::NotGiven,
        delete_hours = Arg::NotGiven,
        retention_bytes = Arg::NotGiven,
        retain_unconsumed = None,
        consumer_idle_hours = Arg::NotGiven,
        max_deletes_per_pass = None,
        clean_interval_ms = None,
        file_mode = None,
        record_format = None,
        tier_url = None,
        tier_options = None,
        tier_after = None,
        local_retention_hours = Arg::NotGiven,
        local_retention_bytes = Arg::NotGiven,
        tier_cache_bytes = None,
        tier_cache_dir = None,
        dedup_window_ms = None,
        dedup_window_records = Arg::NotGiven,
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new<'py>(
        py: Python<'py>,
        paths: &Bound<'py, PyAny>,
        preset: Option<&Bound<'py, PyAny>>,
        segment_size: Option<&Bound<'py, PyAny>>,
        strategy: Option<&Bound<'py, PyAny>>,
        read_only: Option<&Bound<'py, PyAny>>,
        wait_for_store_ms: Option<&Bound<'py, PyAny>>,
        exclusive: Option<&Bound<'py, PyAny>>,
        flush: Option<&Bound<'py, PyAny>>,
        flush_interval_ms: Option<&Bound<'py, PyAny>>,
        lock_timeout_ms: Option<&Bound<'py, PyAny>>,
        max_message_size: Option<&Bound<'py, PyAny>>,
        read_only_paths: Option<&Bound<'py, PyAny>>,
        accept_lost: Option<&Bound<'py, PyAny>>,
        max_used_ratio: Arg<'py>,
        force_clean_ratio: Arg<'py>,
        min_free_bytes: Option<&Bound<'py, PyAny>>,
        warm_ahead: Option<&Bound<'py, PyAny>>,
        on_dir_event: Option<&Bound<'py, PyAny>>,
        retention_hours: Arg<'py>,
        delete_hours: Arg<'py>,
        retention_bytes: Arg<'py>,
        retain_unconsumed: Option<&Bound<'py, PyAny>>,
        consumer_idle_hours: Arg<'py>,
        max_deletes_per_pass: Option<&Bound<'py, PyAny>>,
        clean_interval_ms: Option<&Bound<'py, PyAny>>,
        file_mode: Option<&Bound<'py, PyAny>>,
        record_format: Option<&Bound<'py, PyAny>>,
        tier_url: Option<&Bound<'py, PyAny>>,
        tier_options: Option<&Bound<'py, PyAny>>,
        tier_after: Option<&Bound<'py, PyAny>>,
        local_retention_hours: Arg<'py>,
        local_retention_bytes: Arg<'py>,
        tier_cache_bytes: Option<&Bound<'py, PyAny>>,
        tier_cache_dir: Option<&Bound<'py, PyAny>>,
        dedup_window_ms: Option<&Bound<'py, PyAny>>,
        dedup_window_records: Arg<'py>,
    ) -> PyResult<Self> {
        let dirs = args::paths(paths)?;
        let url_path = match dirs.as_slice() {
            [one] => one
                .to_str()
                .filter(|p| crate::tier::is_url(p))
                .map(str::to_string),
            _ => None,
        };
        let opts = options::build(&options::Kwargs {
            preset,
            segment_size,
            strategy,
            read_only,
            wait_for_store_ms,
            exclusive,
            flush,
            flush_interval_ms,
            lock_timeout_ms,
            max_message_size,
            read_only_paths,
            accept_lost,
            max_used_ratio: max_used_ratio.given(),
            force_clean_ratio: force_clean_ratio.given(),
            min_free_bytes,
            warm_ahead,
            on_dir_event,
            retention_hours: retention_hours.given(),
            delete_hours: delete_hours.given(),
            retention_bytes: retention_bytes.given(),
            retain_unconsumed,
            consumer_idle_hours: consumer_idle_hours.given(),
            max_deletes_per_pass,
            clean_interval_ms,
            file_mode,
            record_format,
            tier_url,
            tier_options,
            tier_after,
            local_retention_hours: local_retention_hours.given(),
            local_retention_bytes: local_retention_bytes.given(),
            tier_cache_bytes,
            tier_cache_dir,
            dedup_window_ms,
            dedup_window_records: dedup_window_records.given(),
            url_path,
        })?;
        let log = interrupt::detach(py, || CommitLog::open(&dirs, opts))?;
        Ok(PyCommitLog {
            log,
            views: ViewCache::default(),
            aio: aio::Hub::default(),
        })
    }

    /// Appends one record, with a key, headers and a message id if given; returns its physical
    /// offset (for a message id already in the de-duplication window, the offset of the record
    /// that has it: nothing is written).
    #[pyo3(
        signature = (body, /, *, key = None, headers = None, msg_id = None),
        text_signature = "($self, body, /, *, key=None, headers=None, msg_id=None)"
    )]
    fn append(
        &self,
        py: Python<'_>,
        body: &Bound<'_, PyAny>,
        key: Option<&Bound<'_, PyAny>>,
        headers: Option<&Bound<'_, PyAny>>,
        msg_id: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<u64> {
        let body = Body::of(body, "body", self.max_body())?;
        let data = body.as_slice();
        let block = match (key, headers, msg_id) {
            (None, None, None) => Vec::new(),
            _ => props::encode(key, msg_id, headers, "")?,
        };
        let encoded = match block.is_empty() {
            true => &[][..],
            false => std::slice::from_ref(&block),
        };
        // Fast path with the GIL held: no waiting, no device I/O (at most the page cache warmed
        // 256 KiB ahead). Otherwise release the GIL.
        if let Some(offset) = self.log.try_append_encoded(data, encoded)? {
            return Ok(offset);
        }
        let append = || {
            self.log
                .append_encoded(&[data], encoded)
                .map(|a| a.offsets[0])
        };
        let appended = interrupt::detach(py, append);
        // The roll it made (failed or not) may have deleted the head: its cached maps go now,
        // and an append the disk refused while they held its blocks is tried again.
        let appended = match (appended, self.prune_views()) {
            (Err(Error::DiskFull { .. }), true) => interrupt::detach(py, append),
            (appended, _) => appended,
        };
        Ok(appended?)
    }

    /// Appends many records at once (all visible together, or none); returns their offsets: a
    /// list for an iterable of bodies, a pyarrow int64 array for an Arrow array; None with
    /// `offsets=False`. With `msg_ids`, an `Appended` (a list) whose `duplicates` are the
    /// positions of the records not written.
    #[pyo3(
        signature = (bodies, /, *, offsets = None, keys = None, headers = None, msg_ids = None),
        text_signature = "($self, bodies, /, *, offsets=True, keys=None, headers=None, msg_ids=None)"
    )]
    fn append_batch<'py>(
        &self,
        py: Python<'py>,
        bodies: &Bound<'py, PyAny>,
        offsets: Option<&Bound<'py, PyAny>>,
        keys: Option<&Bound<'py, PyAny>>,
        headers: Option<&Bound<'py, PyAny>>,
        msg_ids: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        let msg_ids = msg_ids.filter(|m| !m.is_none());
        let offsets = offsets.map_or(Ok(true), |o| args::boolean(o, "offsets"))?;
        if bodies.is_instance_of::<PyBytes>() || bodies.is_instance_of::<PyString>() {
            return Err(PyTypeError::new_err(
                "append_batch takes an iterable of bytes-like bodies or an Arrow binary array; \
                 use append() for one body",
            ));
        }
        let sequence = bodies.is_instance_of::<PyList>() || bodies.is_instance_of::<PyTuple>();
        if !sequence && arrow::is_arrow(bodies)? {
            if msg_ids.is_some() {
                return Err(PyTypeError::new_err(
                    "append_batch of an Arrow array takes no msg_ids (it reports no duplicates): \
                     pass a list of bodies with msg_ids",
                ));
            }
            return arrow::append_arrow(self, py, bodies, offsets, keys, headers);
        }
        if body::is_bytes_like(bodies) {
            // Iterating a bytearray gives ints, a 1-D array its items: never what was meant.
            return Err(PyTypeError::new_err(format!(
                "append_batch takes an iterable of bodies, and this {} is one bytes-like body: \
                 use append() for it, or pass a list of bodies (list(rows) for an array's rows)",
                args::type_of(bodies)
            )));
        }
        let held = bodies_of(bodies, self.max_body())?;
        let slices = held.slices();
        let encoded = props::encode_batch(slices.len(), keys, msg_ids, headers)?;
        let append = || self.log.append_encoded(&slices, &encoded);
        let found = match (interrupt::detach(py, append), self.prune_views()) {
            (Err(Error::DiskFull { .. }), true) => interrupt::detach(py, append),
            (found, _) => found,
        }?;
        if !offsets {
            return Ok(None);
        }
        let list = ints::list(py, &found.offsets)?.into_any();
        if msg_ids.is_none() {
            return Ok(Some(list));
        }
        static APPENDED: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
        let class = APPENDED.get_or_try_init(py, || {
            Ok::<_, PyErr>(py.import("rmqlog._appended")?.getattr("Appended")?.unbind())
        })?;
        let appended = class.bind(py).call1((list,))?;
        appended.setattr("duplicates", PyList::new(py, &found.duplicates)?)?;
        Ok(Some(appended))
    }

    /// Record batches (pyarrow) of the records in `[start, end)`, built in Rust. The options are
    /// taken as objects (None: the default) so that a bad one gets an error naming it.
    #[pyo3(
        signature = (
            start = None, end = None, *, columns = None, body = None, max_records = None,
            max_bytes = None, follow = None, timeout = None, durable = None, threads = None,
            key = None, key_prefix = None, headers = None
        ),
        text_signature = "($self, start=None, end=None, *, columns=None, body='view', \
                          max_records=65536, max_bytes=67108864, follow=False, timeout=None, \
                          durable=False, threads=None, key=None, key_prefix=None, headers=None)"
    )]
    #[allow(clippy::too_many_arguments)] // one per keyword of the Python signature
    fn scan_batches(
        slf: &Bound<'_, Self>,
        start: Option<&Bound<'_, PyAny>>,
        end: Option<&Bound<'_, PyAny>>,
        columns: Option<&Bound<'_, PyAny>>,
        body: Option<&Bound<'_, PyAny>>,
        max_records: Option<&Bound<'_, PyAny>>,
        max_bytes: Option<&Bound<'_, PyAny>>,
        follow: Option<bool>,
        timeout: Option<&Bound<'_, PyAny>>,
        durable: Option<bool>,
        threads: Option<&Bound<'_, PyAny>>,
        key: Option<&Bound<'_, PyAny>>,
        key_prefix: Option<&Bound<'_, PyAny>>,
        headers: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<arrow::PyBatchScan> {
        let opts = arrow::batch_options(columns, body, max_records, max_bytes)?;
        let threads = arrow::batch_threads(threads)?;
        let filter = FilterArgs {
            key,
            key_prefix,
            headers,
        }
        .filter("scan_batches")?;
        let this = slf.get();
        let (start, end) = this.range_args(start, end)?;
        let durable = durable.unwrap_or(false);
        let follow = follow_args(follow.unwrap_or(false), timeout, durable)?;
        let reader = slf.py().detach(|| match follow {
            Some(f) => this.log.follow_batches(start, end, f, opts),
            None => this.log.scan_batches(start, end, opts),
        })?;
        let reader = match filter {
            Some(f) => reader.filtered(f),
            None => reader,
        };
        Ok(arrow::PyBatchScan::new(
            slf.clone().unbind(),
            reader,
            threads,
        ))
    }

    /// The body of the record at `offset`, as a read-only memoryview over the map (no copy);
    /// `body="bytes"`: a copy.
    #[pyo3(signature = (offset, /, *, body = None), text_signature = "($self, offset, /, *, body='view')")]
    fn read<'py>(
        &self,
        py: Python<'py>,
        offset: &Bound<'py, PyAny>,
        body: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let out = BodyOut::of(body)?;
        let rec = self.read_checked(offset)?;
        out.body(py, &rec, || self.body_view(py, &rec))
    }

    /// The record at `offset` with its metadata.
    #[pyo3(signature = (offset, /, *, body = None), text_signature = "($self, offset, /, *, body='view')")]
    fn read_record(
        &self,
        py: Python<'_>,
        offset: &Bound<'_, PyAny>,
        body: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyRecord> {
        let out = BodyOut::of(body)?;
        let rec = self.read_checked(offset)?;
        self.record(py, &rec, out)
    }

    /// Iterates `(offset, memoryview)` (`body="bytes"`: `(offset, bytes)`) over records in
    /// `[start, end)`, up to `max_offset` as of the call; with `follow`, on past it as records
    /// come (see `wait`).
    #[pyo3(
        signature = (
            start = None, end = None, *, follow = false, timeout = None, durable = false,
            body = None, key = None, key_prefix = None, headers = None
        ),
        text_signature = "($self, start=None, end=None, *, follow=False, timeout=None, \
                          durable=False, body='view', key=None, key_prefix=None, headers=None)"
    )]
    #[allow(clippy::too_many_arguments)] // one per keyword of the Python signature
    fn scan(
        slf: &Bound<'_, Self>,
        start: Option<&Bound<'_, PyAny>>,
        end: Option<&Bound<'_, PyAny>>,
        follow: bool,
        timeout: Option<&Bound<'_, PyAny>>,
        durable: bool,
        body: Option<&Bound<'_, PyAny>>,
        key: Option<&Bound<'_, PyAny>>,
        key_prefix: Option<&Bound<'_, PyAny>>,
        headers: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyScan> {
        let out = BodyOut::of(body)?;
        let filter = FilterArgs {
            key,
            key_prefix,
            headers,
        }
        .filter("scan")?;
        let this = slf.get();
        let (start, end) = this.range_args(start, end)?;
        let follow = follow_args(follow, timeout, durable)?;
        // The first segment is mapped here: perhaps downloaded from the remote tier.
        let scan = slf.py().detach(|| match follow {
            Some(f) => this.log.follow(start, end, f),
            None => this.log.scan(start, end),
        })?;
        let scan = match filter {
            Some(f) => scan.filtered(f),
            None => scan,
        };
        Ok(PyScan {
            log: slf.clone().unbind(),
            state: Mutex::new(ScanState {
                scan,
                ready: VecDeque::new(),
                failed: None,
                view: None,
                out,
            }),
        })
    }

    /// Blocks until the log's end passes `offset` (`durable`: until `flushed_offset` does), or
    /// `timeout` seconds pass; returns the end. The GIL is released; Ctrl-C interrupts.
    #[pyo3(signature = (offset, /, timeout = None, *, durable = false))]
    fn wait(
        &self,
        py: Python<'_>,
        offset: &Bound<'_, PyAny>,
        timeout: Option<&Bound<'_, PyAny>>,
        durable: bool,
    ) -> PyResult<u64> {
        let offset = self.offset_in_range(offset)?;
        let deadline = wait::deadline(timeout)?;
        self.release_views();
        match wait::wait(py, &self.log, offset, durable, deadline)? {
            Waited::Passed(end) | Waited::TimedOut(end) => Ok(end),
            Waited::Interrupted => Ok(self.log.max_offset()?),
        }
    }

    /// `wait` as a coroutine: the event loop runs meanwhile, woken by the store's futex through
    /// one thread for every waiter (`aio.rs`, `rmqlog/_aio.py`).
    #[pyo3(signature = (offset, /, timeout = None, *, durable = false))]
    fn wait_async<'py>(
        slf: &Bound<'py, Self>,
        offset: &Bound<'py, PyAny>,
        timeout: Option<&Bound<'py, PyAny>>,
        durable: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let offset = slf.get().offset_in_range(offset)?;
        let timeout = timeout.map(|t| args::seconds(t, "timeout")).transpose()?;
        let timeout = timeout.map(|t| t.as_secs_f64());
        aio::call(slf.py(), "wait_async", (slf, offset, timeout, durable))
    }

    /// An event loop's eventfd, signalled at each change of the store from now on (`aio.rs`).
    #[pyo3(signature = (fd, /))]
    fn _aio_subscribe(&self, fd: i32) -> PyResult<()> {
        self.aio.subscribe(&self.log, fd)
    }

    /// The eventfd is no longer signalled.
    #[pyo3(signature = (fd, /))]
    fn _aio_unsubscribe(&self, fd: i32) {
        self.aio.unsubscribe(fd);
    }

    /// The consumer `name`: at its committed position if the store knows it, otherwise
    /// created at `start` ("earliest", "latest", an offset or an aware datetime).
    #[pyo3(signature = (
        name, /, *, start = None, on_loss = None, exclusive = false, redelivery_timeout = None,
        max_deliveries = None, dead_letter = None, key = None, key_prefix = None, headers = None,
    ))]
    #[allow(clippy::too_many_arguments)]
    fn consumer(
        slf: &Bound<'_, Self>,
        name: &Bound<'_, PyAny>,
        start: Option<&Bound<'_, PyAny>>,
        on_loss: Option<&Bound<'_, PyAny>>,
        exclusive: bool,
        redelivery_timeout: Option<&Bound<'_, PyAny>>,
        max_deliveries: Option<&Bound<'_, PyAny>>,
        dead_letter: Option<&Bound<'_, PyAny>>,
        key: Option<&Bound<'_, PyAny>>,
        key_prefix: Option<&Bound<'_, PyAny>>,
        headers: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyConsumer> {
        let name = args::string(name, "name")?;
        let filter = FilterArgs {
            key,
            key_prefix,
            headers,
        }
        .filter(&format!("consumer {name:?}"))?;
        let mut opts = crate::ConsumerOptions {
            start: start
                .map(|s| consumer::start(s, "start"))
                .transpose()?
                .unwrap_or_default(),
            on_loss: consumer::on_loss(on_loss)?,
            exclusive,
            max_deliveries: max_deliveries
                .map(|m| {
                    args::int_in(
                        m,
                        "max_deliveries",
                        "a count of deliveries from 1 to 2**32-1 (0: none)",
                        |v| u32::try_from(v).ok(),
                    )
                })
                .transpose()?,
            dead_letter: dead_letter.map(args::paths).transpose()?,
            filter: filter.map(|f| (*f).clone()),
            ..Default::default()
        };
        if let Some(t) = redelivery_timeout {
            opts.redelivery_timeout = args::seconds(t, "redelivery_timeout")?;
        }
        let this = slf.get();
        let c = slf.py().detach(|| this.log.consumer(&name, opts))?;
        Ok(PyConsumer::new(slf.clone().unbind(), c))
    }

    /// Every consumer name the store keeps: a dict each (name, position, lag_bytes,
    /// committed_ms, created_ms, open), by name.
    fn consumers<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let list = py.detach(|| self.log.consumers())?;
        let out = PyList::empty(py);
        for c in &list {
            out.append(consumer::info(py, c)?)?;
        }
        Ok(out)
    }

    /// Forgets consumer `name` (its position is gone); refused while an open holds it.
    #[pyo3(signature = (name, /))]
    fn drop_consumer(&self, py: Python<'_>, name: &Bound<'_, PyAny>) -> PyResult<()> {
        let name = args::string(name, "name")?;
        Ok(py.detach(|| self.log.drop_consumer(&name))?)
    }

    fn __iter__(slf: &Bound<'_, Self>) -> PyResult<PyScan> {
        Self::scan(slf, None, None, false, None, false, None, None, None, None)
    }

    /// The offsets of the records whose key is `key`, in append order; `start`/`end`: only
    /// those stored in `[start, end)` (milliseconds since the epoch, or aware datetimes).
    #[pyo3(signature = (key, /, *, start = None, end = None))]
    fn lookup(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        start: Option<&Bound<'_, PyAny>>,
        end: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Vec<u64>> {
        let key = props::key_arg(key)?;
        let (start, end) = (
            props::time_arg(start, "start")?,
            props::time_arg(end, "end")?,
        );
        Ok(py.detach(|| self.log.lookup(&key, start, end))?)
    }

    /// Offset of the first record with `timestamp_ms >= ts_ms`, else `max_offset`.
    #[pyo3(signature = (ts_ms, /))]
    fn offset_for_timestamp(&self, py: Python<'_>, ts_ms: &Bound<'_, PyAny>) -> PyResult<u64> {
        let ts = args::offset(ts_ms, "ts_ms")?.clamp(0, u64::MAX as i128) as u64;
        Ok(py.detach(|| self.log.offset_for_timestamp(ts))?)
    }

    /// How many records the log holds (`min_offset` to `max_offset`), without scanning it.
    fn __len__(&self, py: Python<'_>) -> PyResult<usize> {
        let n = py.detach(|| self.log.record_count())?;
        Ok(usize::try_from(n).unwrap_or(usize::MAX))
    }

    /// A log is true whatever it holds (as a file is): `if log:` does not count its records.
    fn __bool__(&self) -> bool {
        true
    }

    /// How many records have offsets in `[start, end)` (defaults: the whole log), clamped to
    /// the log's range; at most a walk of part of the segments holding `start` and `end`.
    #[pyo3(signature = (start = None, end = None))]
    fn records_between(
        &self,
        py: Python<'_>,
        start: Option<&Bound<'_, PyAny>>,
        end: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<u64> {
        let bound = |o: Option<&Bound<'_, PyAny>>, what: &str, default: u64| {
            o.filter(|o| !o.is_none())
                .map(|o| args::offset(o, what).map(|v| v.clamp(0, u64::MAX as i128) as u64))
                .transpose()
                .map(|v| v.unwrap_or(default))
        };
        let (from, to) = (bound(start, "start", 0)?, bound(end, "end", u64::MAX)?);
        Ok(py.detach(|| self.log.records_between(from, to))?)
    }

    /// First offset of the log.
    #[getter]
    fn min_offset(&self) -> PyResult<u64> {
        Ok(self.log.min_offset()?)
    }

    /// End of the last record.
    #[getter]
    fn max_offset(&self) -> PyResult<u64> {
        Ok(self.log.max_offset()?)
    }

    /// Bytes known durable.
    #[getter]
    fn flushed_offset(&self) -> PyResult<u64> {
        Ok(self.log.flushed_offset()?)
    }

    /// The record format this store writes (1 or 2), fixed when it was created.
    #[getter]
    fn record_format(&self) -> u32 {
        self.log.record_format().number()
    }

    /// Whether the log was opened read-only.
    #[getter]
    fn read_only(&self) -> bool {
        self.log.is_read_only()
    }

    /// Whether the log is closed.
    #[getter]
    fn closed(&self) -> bool {
        self.log.is_closed()
    }

    /// Every directory of the store.
    #[getter]
    fn paths(&self) -> Vec<String> {
        self.log
            .paths()
            .iter()
            .map(|d| d.to_string_lossy().into_owned())
            .collect()
    }

    /// Offsets lost with a directory named in `accept_lost`: `[(start, end, directory), ...]`.
    fn holes(&self) -> PyResult<Vec<(u64, u64, String)>> {
        Ok(self
            .log
            .holes()?
            .into_iter()
            .map(|(a, b, p)| (a, b, p.to_string_lossy().into_owned()))
            .collect())
    }

    /// Every directory, in configuration order, with its state and usage.
    fn dirs(&self, py: Python<'_>) -> PyResult<Vec<PyDirInfo>> {
        let infos = py.detach(|| self.log.dirs())?;
        Ok(infos.into_iter().map(PyDirInfo::from).collect())
    }

    /// Counters: appends, segments created and deleted, cleaner passes, last cleaner error.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.log.stats()?;
        let d = PyDict::new(py);
        d.set_item("appends", s.appends)?;
        d.set_item("segments_created", s.segments_created)?;
        d.set_item("syncs", s.syncs)?;
        d.set_item("clean_passes", s.clean_passes)?;
        d.set_item("segments_deleted", s.segments_deleted)?;
        d.set_item("bytes_deleted", s.bytes_deleted)?;
        d.set_item("clean_last_error", s.clean_last_error)?;
        d.set_item("fallback_lookups", self.log.fallback_lookups())?;
        // A store this open cannot keep positions in (a tier URL), or whose positions files are
        // all damaged, still has its counters.
        let consumers = match self.log.consumers() {
            Ok(c) => c,
            Err(e) => {
                d.set_item("consumers_error", e.to_string())?;
                Vec::new()
            }
        };
        let end = self.log.max_offset()?;
        let by_name = PyDict::new(py);
        for c in &consumers {
            let one = PyDict::new(py);
            one.set_item("position", c.position)?;
            one.set_item("lag_bytes", c.lag_bytes)?;
            one.set_item("lag_records", c.lag_records)?;
            by_name.set_item(&c.name, one)?;
        }
        d.set_item("consumers", by_name)?;
        let holder = consumers
            .iter()
            .filter(|c| c.holds_retention && c.position < end)
            .min_by_key(|c| c.position);
        d.set_item("head_held_by", holder.map(|c| c.name.as_str()))?;
        d.set_item("head_held_at", holder.map(|c| c.position))?;
        if let Some(t) = self.log.tier_status()? {
            d.set_item("tier_uploads", t.uploads)?;
            d.set_item("tier_upload_errors", t.upload_errors)?;
            d.set_item("tier_pending_segments", t.pending_segments)?;
            d.set_item("tier_last_error", t.last_error)?;
            d.set_item("tier_downloads", t.downloads)?;
            d.set_item("tier_range_reads", t.range_reads)?;
            d.set_item("tier_cache_hits", t.cache_hits)?;
        }
        d.set_item("strategy", self.log.options().strategy.name())?;
        d.set_item("flush", self.log.options().flush.as_str())?;
        d.set_item("record_format", self.log.record_format().number())?;
        Ok(d)
    }

    /// The remote tier's state (`None` without a tier): `url`, `manifest_version`, segment counts
    /// (`local_segments`, `remote_segments`, `both_segments`, `pending_segments`), bytes
    /// (`pending_bytes`, `remote_bytes`, `cache_bytes`), `last_error`, and the counters since open.
    fn tier_status<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let Some(t) = self.log.tier_status()? else {
            return Ok(None);
        };
        let d = PyDict::new(py);
        d.set_item("url", t.url)?;
        d.set_item("manifest_version", t.manifest_version)?;
        d.set_item("local_segments", t.local_segments)?;
        d.set_item("remote_segments", t.remote_segments)?;
        d.set_item("both_segments", t.both_segments)?;
        d.set_item("pending_segments", t.pending_segments)?;
        d.set_item("pending_bytes", t.pending_bytes)?;
        d.set_item("remote_bytes", t.remote_bytes)?;
        d.set_item("cache_bytes", t.cache_bytes)?;
        d.set_item("last_error", t.last_error)?;
        d.set_item("uploads", t.uploads)?;
        d.set_item("uploaded_bytes", t.uploaded_bytes)?;
        d.set_item("upload_errors", t.upload_errors)?;
        d.set_item("local_deleted", t.local_deleted)?;
        d.set_item("remote_deleted", t.remote_deleted)?;
        d.set_item("downloads", t.downloads)?;
        d.set_item("range_reads", t.range_reads)?;
        d.set_item("mapped_in_place", t.mapped_in_place)?;
        d.set_item("fetched_bytes", t.fetched_bytes)?;
        d.set_item("cache_hits", t.cache_hits)?;
        Ok(Some(d))
    }

    /// The settings the store's writer recorded (this log's own, for a writer), or `None` when the
    /// store records none (written by rmqlog 0.1 and not opened by a writer since).
    fn recorded_settings<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let Some(w) = self.log.recorded_settings()? else {
            return Ok(None);
        };
        let d = PyDict::new(py);
        d.set_item("version", w.version)?;
        d.set_item("segment_size", w.segment_size)?;
        d.set_item("strategy", w.strategy)?;
        d.set_item("flush", w.flush)?;
        d.set_item("flush_interval_ms", w.flush_interval_ms)?;
        d.set_item("max_message_size", w.max_message_size)?;
        d.set_item("retention_hours", w.retention_hours)?;
        d.set_item("retention_bytes", w.retention_bytes)?;
        d.set_item("retain_unconsumed", w.retain_unconsumed)?;
        d.set_item("consumer_idle_hours", w.consumer_idle_hours)?;
        let hours = w.delete_hours.map(|h| PyTuple::new(py, h)).transpose()?;
        d.set_item("delete_hours", hours)?;
        d.set_item("max_used_ratio", w.max_used_ratio)?;
        d.set_item(
            "max_used_ratio_by_dir",
            PyDict::from_sequence(&PyList::new(py, w.max_used_ratio_by_dir)?.into_any())?,
        )?;
        d.set_item("force_clean_ratio", w.force_clean_ratio)?;
        d.set_item(
            "force_clean_ratio_by_dir",
            PyDict::from_sequence(&PyList::new(py, w.force_clean_ratio_by_dir)?.into_any())?,
        )?;
        d.set_item("min_free_bytes", w.min_free_bytes)?;
        d.set_item("clean_interval_ms", w.clean_interval_ms)?;
        d.set_item("dedup_window_ms", w.dedup_window_ms)?;
        d.set_item("dedup_window_records", w.dedup_window_records)?;
        let tier = w.tier.as_ref();
        d.set_item("tier_url", tier.map(|t| t.url.clone()))?;
        d.set_item("tier_after", tier.map(|t| t.after_ms as f64 / 1000.0))?;
        let hours = |ms: u64| ms as f64 / 3_600_000.0;
        d.set_item(
            "local_retention_hours",
            tier.and_then(|t| t.local_retention_ms).map(hours),
        )?;
        d.set_item(
            "local_retention_bytes",
            tier.and_then(|t| t.local_retention_bytes),
        )?;
        Ok(Some(d))
    }

    /// Moves a sealed segment to another writable directory of the store, online; records read
    /// earlier stay valid. The active segment is refused.
    #[pyo3(signature = (start_offset, dest_path, /))]
    fn move_segment(
        &self,
        py: Python<'_>,
        start_offset: &Bound<'_, PyAny>,
        dest_path: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let start_offset = self.offset_in_range(start_offset)?;
        let dest = args::paths(dest_path)?
            .into_iter()
            .next()
            .ok_or_else(|| PyTypeError::new_err("dest_path must be one directory"))?;
        Ok(interrupt::detach(py, || {
            self.log.move_segment(start_offset, &dest)
        })?)
    }

    /// Moves sealed segments from the most to the least used directory while that narrows the
    /// gap between their used ratios, at most `max_bytes` in one call; returns
    /// `[(start_offset, from_dir, to_dir), ...]`.
    #[pyo3(signature = (max_bytes = None))]
    fn rebalance(
        &self,
        py: Python<'_>,
        max_bytes: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Vec<(u64, String, String)>> {
        let max_bytes = max_bytes.map(|m| args::uint(m, "max_bytes")).transpose()?;
        let moves = interrupt::detach(py, || self.log.rebalance(max_bytes))?;
        Ok(moves
            .into_iter()
            .map(|(s, a, b)| {
                (
                    s,
                    a.to_string_lossy().into_owned(),
                    b.to_string_lossy().into_owned(),
                )
            })
            .collect())
    }

    /// Checks every record (headers, stored offsets, body CRCs) without changing anything.
    /// Returns `(start_offset, end_offset, reason)` per damaged range; `[]` when clean.
    /// `progress(done_bytes, total_bytes)` is called after each segment if given. `remote=True`
    /// also reads back every object of the remote tier (length, CRC32C) and walks the records of
    /// the segments that are only remote; the default is True only for a log opened by its URL.
    #[pyo3(signature = (progress = None, *, remote = None))]
    fn verify(
        &self,
        py: Python<'_>,
        progress: Option<Bound<'_, PyAny>>,
        remote: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Vec<Damaged>> {
        Ok(self.verify_counted(py, progress, remote)?.1)
    }

    /// `verify()`, and how many valid records it walked: `(records, damaged ranges)`. A
    /// segment whose record count the log knows and whose walk finds another number is a
    /// damaged range too.
    #[pyo3(signature = (progress = None, *, remote = None))]
    fn verify_counted(
        &self,
        py: Python<'_>,
        progress: Option<Bound<'_, PyAny>>,
        remote: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<(u64, Vec<Damaged>)> {
        let remote = match remote.filter(|r| !r.is_none()) {
            Some(r) => args::boolean(r, "remote")?,
            None => self.log.paths().is_empty(),
        };
        let cb = progress.map(Bound::unbind);
        let mut failed = None;
        let verified = py.detach(|| {
            let progress = |done, total| {
                if let (None, Some(cb)) = (&failed, &cb) {
                    failed = Python::attach(|py| cb.call1(py, (done, total)).err());
                }
            };
            self.log.verify_counted(remote, progress)
        })?;
        if let Some(e) = failed {
            return Err(e);
        }
        let bad = verified.damaged.into_iter();
        Ok((
            verified.records,
            bad.map(|b| (b.start, b.end, b.reason)).collect(),
        ))
    }

    /// Runs one cleaning pass now; returns the number of segments deleted. `force=True` ignores
    /// `delete_hours`. With no retention configured (the default) it deletes nothing: 0.
    #[pyo3(signature = (force = false))]
    fn clean(&self, py: Python<'_>, force: bool) -> PyResult<usize> {
        let n = interrupt::detach(py, || self.log.clean(force))?;
        self.prune_views();
        Ok(n)
    }

    /// Deletes the sealed segments that end at or before `offset`; returns the new `min_offset`.
    #[pyo3(signature = (offset, /))]
    fn truncate_before(&self, py: Python<'_>, offset: &Bound<'_, PyAny>) -> PyResult<u64> {
        // Past 2^64 is past every segment: all sealed segments go, as for any offset past the end.
        let off = match args::offset(offset, "offset")? {
            o if o > i128::from(u64::MAX) => u64::MAX,
            _ => self.offset_in_range(offset)?,
        };
        let min = interrupt::detach(py, || self.log.truncate_before(off))?;
        self.prune_views();
        Ok(min)
    }

    /// Syncs everything appended so far; returns `flushed_offset`.
    fn flush(&self, py: Python<'_>) -> PyResult<u64> {
        self.prune_views();
        Ok(py.detach(|| self.log.flush())?)
    }

    /// The segments in offset order.
    fn segments(&self) -> PyResult<Vec<PySegment>> {
        self.prune_views();
        Ok(self
            .log
            .segments()?
            .into_iter()
            .map(|s| PySegment {
                start_offset: s.start_offset,
                path: s.path.to_string_lossy().into_owned(),
                size: s.size,
                written: s.written,
                sealed: s.sealed,
                local: s.local,
                remote: s.remote,
                splits: s.splits,
            })
            .collect())
    }

    /// Read-only logs: picks up what a writer appended since; returns `max_offset`.
    fn refresh(&self, py: Python<'_>) -> PyResult<u64> {
        Ok(py.detach(|| self.log.refresh())?)
    }

    /// The first record boundary at or after `offset`, or `max_offset` (headers only).
    #[pyo3(signature = (offset, /))]
    fn _record_start_at_or_after(&self, py: Python<'_>, offset: u64) -> PyResult<u64> {
        Ok(py.detach(|| self.log.record_start_at_or_after(offset))?)
    }

    /// Lookups that missed the O(1) segment guess and searched (diagnostics).
    #[getter]
    fn _fallback_lookups(&self) -> u64 {
        self.log.fallback_lookups()
    }

    /// Flushes, stops the background thread, releases the lock. Views handed out stay valid.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let result = py.detach(|| self.log.close());
        self.views.clear();
        self.aio.closed(py); // coroutines waiting on the log end with ClosedError
        Ok(result?)
    }

    fn __enter__(slf: Bound<'_, Self>) -> PyResult<Bound<'_, Self>> {
        slf.get().log.max_offset()?; // refuse a closed log
        Ok(slf)
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, PyTuple>) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        let paths = self.paths();
        if self.log.is_closed() {
            return format!("<CommitLog paths={paths:?} closed>");
        }
        format!(
            "<CommitLog paths={paths:?} segments={} min_offset={} max_offset={}{}>",
            self.log.segments().map(|s| s.len()).unwrap_or(0),
            self.log.min_offset().unwrap_or(0),
            self.log.max_offset().unwrap_or(0),
            if self.log.is_read_only() {
                " read_only"
            } else {
                ""
            }
        )
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        self.views.traverse(&visit)
    }

    fn __clear__(&self) {
        self.views.clear();
    }
}
