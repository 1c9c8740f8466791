//! Arrow through the PyCapsule interface: `scan_batches` (`BatchScan`), and the Arrow arrays that
//! `append_batch` takes and returns. No Python object is made per record.

use std::ffi::CStr;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use arrow_array::cast::AsArray;
use arrow_array::ffi::{from_ffi, to_ffi, FFI_ArrowArray, FFI_ArrowSchema};
use arrow_array::ffi_stream::{ArrayStreamReader, FFI_ArrowArrayStream};
use arrow_array::{
    make_array, Array, ArrayRef, Int64Array, RecordBatch, RecordBatchReader, StructArray,
};
use arrow_schema::{ArrowError, Schema, SchemaRef};
use pyo3::exceptions::{PyModuleNotFoundError, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::gc::{PyTraverseError, PyVisit};
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyCapsuleMethods};

use super::args;
use super::log::PyCommitLog;
use super::props;
use super::wait;
use crate::arrow::{BatchOptions, BatchReader, ParallelReader};
use crate::read::wait::Waited;
use crate::sync::try_locked;
use crate::Error;

const SCHEMA: &CStr = c"arrow_schema";
const ARRAY: &CStr = c"arrow_array";
const STREAM: &CStr = c"arrow_array_stream";

/// `pyarrow`, or an error saying how to install it. Any other failure of the import (a
/// `KeyboardInterrupt` while pyarrow loads) is raised as it is.
pub(super) fn pyarrow<'py>(py: Python<'py>, what: &str) -> PyResult<Bound<'py, PyModule>> {
    py.import("pyarrow").map_err(|e| {
        if !e.is_instance_of::<pyo3::exceptions::PyImportError>(py) {
            return e;
        }
        PyModuleNotFoundError::new_err(format!(
            "{what} needs pyarrow, which is not installed: pip install 'rmqlog[arrow]' (or \
             pyarrow>=16)"
        ))
    })
}

fn arrow_error(e: ArrowError) -> PyErr {
    PyValueError::new_err(format!("Arrow: {e}"))
}

/// An array exported through the C data interface, as `pyarrow.Array`.
fn to_pyarrow_array<'py>(py: Python<'py>, array: &dyn Array) -> PyResult<Bound<'py, PyAny>> {
    let pa = pyarrow(py, "an Arrow result")?;
    let (array, schema) = to_ffi(&array.to_data()).map_err(arrow_error)?;
    let schema = PyCapsule::new_with_value(py, schema, SCHEMA)?;
    let array = PyCapsule::new_with_value(py, array, ARRAY)?;
    pa.getattr("Array")?
        .call_method1("_import_from_c_capsule", (schema, array))
}

/// A record batch exported through the C data interface, as `pyarrow.RecordBatch`.
pub(super) fn to_pyarrow_batch<'py>(
    py: Python<'py>,
    batch: RecordBatch,
) -> PyResult<Bound<'py, PyAny>> {
    let pa = pyarrow(py, "scan_batches")?;
    let (array, schema) = to_ffi(&StructArray::from(batch).to_data()).map_err(arrow_error)?;
    let schema = PyCapsule::new_with_value(py, schema, SCHEMA)?;
    let array = PyCapsule::new_with_value(py, array, ARRAY)?;
    pa.getattr("RecordBatch")?
        .call_method1("_import_from_c_capsule", (schema, array))
}

/// The offsets of an Arrow append, as a `pyarrow` int64 array.
pub(super) fn offsets_array<'py>(
    py: Python<'py>,
    offsets: Vec<u64>,
) -> PyResult<Bound<'py, PyAny>> {
    let values: Vec<i64> = offsets.into_iter().map(|o| o as i64).collect();
    to_pyarrow_array(py, &Int64Array::from(values))
}

/// Whether `obj` is an Arrow array for `append_batch` (rather than an iterable of bodies).
pub(super) fn is_arrow(obj: &Bound<'_, PyAny>) -> PyResult<bool> {
    Ok(obj.hasattr("__arrow_c_array__")? || obj.hasattr("__arrow_c_stream__")?)
}

/// The arrays of an Arrow object: one for `__arrow_c_array__`, each chunk of a
/// `__arrow_c_stream__` (a `pyarrow.ChunkedArray`, a Polars Series).
pub(super) fn import_arrays(obj: &Bound<'_, PyAny>) -> PyResult<Vec<ArrayRef>> {
    if obj.hasattr("__arrow_c_array__")? {
        let pair = obj.call_method0("__arrow_c_array__")?;
        let (schema, array): (Bound<'_, PyCapsule>, Bound<'_, PyCapsule>) =
            pair.extract().map_err(|_| {
                PyTypeError::new_err("__arrow_c_array__ must return (schema, array) capsules")
            })?;
        let schema = schema
            .pointer_checked(Some(SCHEMA))?
            .cast::<FFI_ArrowSchema>();
        let array = array.pointer_checked(Some(ARRAY))?.cast::<FFI_ArrowArray>();
        // SAFETY: both capsules hold C data interface structs (their names say so, checked
        // above). The array is moved out of its capsule (which is left released, as the
        // protocol wants); the schema is only borrowed while the capsule is alive.
        let data = unsafe {
            let array = FFI_ArrowArray::from_raw(array.as_ptr());
            from_ffi(array, schema.as_ref())
        }
        .map_err(arrow_error)?;
        return Ok(vec![checked(data)?]);
    }
    let capsule = obj.call_method1("__arrow_c_stream__", (obj.py().None(),))?;
    let capsule = capsule
        .cast_into::<PyCapsule>()
        .map_err(|_| PyTypeError::new_err("__arrow_c_stream__ must return a capsule"))?;
    let stream = capsule
        .pointer_checked(Some(STREAM))?
        .cast::<FFI_ArrowArrayStream>();
    // SAFETY: the capsule holds a C stream interface struct (its name says so, checked above);
    // it is moved out and the capsule left released, as the protocol wants.
    let reader = unsafe { ArrayStreamReader::from_raw(stream.as_ptr()) }.map_err(arrow_error)?;
    reader
        .map(|chunk| {
            chunk
                .map_err(arrow_error)
                .and_then(|a| checked(a.to_data()))
        })
        .collect()
}

/// The imported array, its offsets and lengths checked against its buffers.
fn checked(data: arrow_data::ArrayData) -> PyResult<ArrayRef> {
    data.validate_data()
        .map_err(|e| PyValueError::new_err(format!("the Arrow array given is not valid: {e}")))?;
    Ok(make_array(data))
}

/// An exported stream's reader. The C stream interface forbids concurrent `get_next` calls, but a
/// consumer may break that rule (pyarrow's reader read from two threads): the second call gets an
/// error instead of racing the first.
struct OneConsumer<R>(Mutex<R>);

impl<R: RecordBatchReader> Iterator for OneConsumer<R> {
    type Item = Result<RecordBatch, ArrowError>;

    fn next(&mut self) -> Option<Self::Item> {
        match try_locked(&self.0) {
            Some(mut r) => r.next(),
            None => Some(Err(ArrowError::InvalidArgumentError(
                "this rmqlog stream is being read by another thread: the Arrow C stream \
                 interface allows one consumer call at a time"
                    .into(),
            ))),
        }
    }
}

impl<R: RecordBatchReader> RecordBatchReader for OneConsumer<R> {
    fn schema(&self) -> SchemaRef {
        match try_locked(&self.0) {
            Some(r) => r.schema(),
            None => Arc::new(Schema::empty()),
        }
    }
}

/// Record batches of a log, built in Rust: `CommitLog.scan_batches()`.
#[pyclass(name = "BatchScan", module = "rmqlog", frozen)]
pub struct PyBatchScan {
    log: Py<PyCommitLog>,
    reader: Mutex<Reader>,
    threads: usize,
}

/// A scan of the records there now is built on worker threads, ahead of the caller; a following
/// one on the caller's thread (it waits between batches, where Ctrl-C must reach it).
enum Reader {
    Ahead(ParallelReader),
    Follow(Box<BatchReader>),
}

impl Reader {
    fn next_offset(&self) -> u64 {
        match self {
            Reader::Ahead(r) => r.next_offset(),
            Reader::Follow(r) => r.next_offset(),
        }
    }

    /// The end of the range: for a following reader, the one it follows to.
    fn end(&self) -> u64 {
        match self {
            Reader::Ahead(r) => r.end(),
            Reader::Follow(r) => r.follow().map_or(r.end(), |(_, end)| end),
        }
    }

    fn options(&self) -> &BatchOptions {
        match self {
            Reader::Ahead(r) => r.options(),
            Reader::Follow(r) => r.options(),
        }
    }

    fn filter(&self) -> Option<Arc<crate::Filter>> {
        match self {
            Reader::Ahead(r) => r.record_filter().cloned(),
            Reader::Follow(r) => r.record_filter().cloned(),
        }
    }
}

impl PyBatchScan {
    pub(super) fn new(log: Py<PyCommitLog>, reader: BatchReader, threads: usize) -> Self {
        let reader = match reader.follow() {
            Some(_) => Reader::Follow(Box::new(reader)),
            None => Reader::Ahead(reader.parallel(threads)),
        };
        PyBatchScan {
            log,
            reader: Mutex::new(reader),
            threads,
        }
    }

    /// The next batch of a following reader: waits (GIL released, Ctrl-C honoured) while no
    /// record is there, until its idle timeout or the log's close.
    fn next_following(&self, py: Python<'_>, r: &mut BatchReader) -> PyResult<Option<RecordBatch>> {
        let log = &self.log.get().log;
        loop {
            if let Some(b) = py.detach(|| r.next_batch_now())? {
                return Ok(Some(b));
            }
            let Some((f, _)) = r.follow().filter(|_| !r.is_done()) else {
                return Ok(None);
            };
            let deadline = f.idle_timeout.map(|t| Instant::now() + t);
            self.log.get().release_views();
            match wait::wait(py, log, r.next_offset(), f.durable, deadline) {
                Ok(Waited::Passed(_)) => {}
                Ok(_) | Err(_) if log.is_closed() => return Ok(None),
                Ok(_) => return Ok(None), // idle for `timeout`
                Err(e) => return Err(e),
            }
        }
    }

    /// Never waits for the lock with the GIL held: its holder may be waiting for the GIL.
    fn with_reader<T>(&self, f: impl FnOnce(&mut Reader) -> T) -> PyResult<T> {
        let mut r = try_locked(&self.reader).ok_or_else(|| {
            PyRuntimeError::new_err("this BatchScan is being advanced by another thread")
        })?;
        Ok(f(&mut r))
    }
}

#[pymethods]
impl PyBatchScan {
    fn __iter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    fn __next__<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        pyarrow(py, "iterating a BatchScan")?;
        let batch = self.with_reader(|r| match r {
            Reader::Ahead(r) => py.detach(|| r.next_batch()).map_err(PyErr::from),
            Reader::Follow(r) => self.next_following(py, r),
        })??;
        batch.map(|b| to_pyarrow_batch(py, b)).transpose()
    }

    /// The offset the next batch starts at (the end of the range once done).
    #[getter]
    fn position(&self) -> PyResult<u64> {
        self.with_reader(|r| r.next_offset())
    }

    /// The end of the range: no record starting at or after it is read.
    #[getter]
    fn end(&self) -> PyResult<u64> {
        self.with_reader(|r| r.end())
    }

    /// The batches' schema, as a `pyarrow.Schema`.
    #[getter]
    fn schema<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let pa = pyarrow(py, "BatchScan.schema")?;
        let schema = self.with_reader(|r| r.options().schema())?;
        let ffi = FFI_ArrowSchema::try_from(schema.as_ref()).map_err(arrow_error)?;
        let capsule = PyCapsule::new_with_value(py, ffi, SCHEMA)?;
        pa.getattr("Schema")?
            .call_method1("_import_from_c_capsule", (capsule,))
    }

    /// The Arrow PyCapsule stream protocol: the batches from `position` to `end`, read by the
    /// consumer (no GIL needed). Each call starts a new read; this iterator does not advance.
    #[pyo3(signature = (requested_schema = None))]
    fn __arrow_c_stream__<'py>(
        &self,
        py: Python<'py>,
        requested_schema: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyCapsule>> {
        let _ = requested_schema; // the protocol lets a producer keep its own schema
        let (start, end, opts, follow, filter) = self.with_reader(|r| {
            let follow = match r {
                Reader::Follow(r) => r.follow().map(|(f, _)| f),
                Reader::Ahead(_) => None,
            };
            (
                r.next_offset(),
                r.end(),
                r.options().clone(),
                follow,
                r.filter(),
            )
        })?;
        let filtered = |reader: BatchReader| match &filter {
            Some(f) => reader.filtered(Arc::clone(f)),
            None => reader,
        };
        let log = self.log.get();
        // A following stream waits in the consumer's thread for each batch.
        let stream = match follow {
            Some(f) => {
                let reader =
                    py.detach(|| log.log.follow_batches(Some(start), Some(end), f, opts))?;
                let reader = filtered(reader);
                FFI_ArrowArrayStream::new(Box::new(OneConsumer(Mutex::new(reader))))
            }
            None => {
                let reader = py.detach(|| log.log.scan_batches(Some(start), Some(end), opts))?;
                let reader = filtered(reader).parallel(self.threads);
                FFI_ArrowArrayStream::new(Box::new(OneConsumer(Mutex::new(reader))))
            }
        };
        PyCapsule::new_with_value(py, stream, STREAM)
    }

    fn __repr__(&self) -> PyResult<String> {
        self.with_reader(|r| {
            let cols: Vec<&str> = r.options().columns.iter().map(|c| c.name()).collect();
            format!(
                "BatchScan(position={}, end={}, columns={cols:?}, threads={})",
                r.next_offset(),
                r.end(),
                self.threads
            )
        })
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.log)
    }
}

/// `scan_batches`'s keyword arguments as batch options (`None`: the default).
pub(super) fn batch_options(
    columns: Option<&Bound<'_, PyAny>>,
    body: Option<&Bound<'_, PyAny>>,
    max_records: Option<&Bound<'_, PyAny>>,
    max_bytes: Option<&Bound<'_, PyAny>>,
) -> PyResult<BatchOptions> {
    let mut opts = BatchOptions::default();
    if let Some(cols) = columns {
        if cols.is_instance_of::<pyo3::types::PyString>() {
            return Err(PyTypeError::new_err(
                "columns must be a sequence of column names, e.g. [\"offset\", \"body\"]",
            ));
        }
        let names: Vec<String> = cols.extract().map_err(|_| {
            PyTypeError::new_err(
                "columns must be a sequence of column names (\"offset\", \"timestamp\", \
                 \"body\", \"segment\", \"key\", \"headers\")",
            )
        })?;
        opts.columns = names
            .iter()
            .map(|n| crate::arrow::Column::parse(n))
            .collect::<Result<_, Error>>()?;
    }
    if let Some(body) = body {
        opts.body = crate::arrow::BodyLayout::parse(&args::string(body, "body")?)?;
    }
    let positive = |obj: &Bound<'_, PyAny>, what: &str| -> PyResult<usize> {
        args::int_in(obj, what, "a positive int below 2**64", |v| {
            usize::try_from(v).ok().filter(|&v| v > 0)
        })
    };
    if let Some(m) = max_records {
        opts.max_records = positive(m, "max_records")?;
    }
    if let Some(m) = max_bytes {
        opts.max_bytes = positive(m, "max_bytes")?;
    }
    Ok(opts)
}

/// `scan_batches`' `threads`: how many worker threads build the batches (`None`: one per core, at
/// most [`crate::arrow::MAX_THREADS`]).
pub(super) fn batch_threads(threads: Option<&Bound<'_, PyAny>>) -> PyResult<usize> {
    let Some(obj) = threads.filter(|t| !t.is_none()) else {
        return Ok(crate::arrow::default_threads());
    };
    let max = crate::arrow::MAX_THREADS;
    let accepted = format!("an int from 1 to {max}, or None (one per core)");
    args::int_in(obj, "threads", &accepted, |n| {
        usize::try_from(n).ok().filter(|n| (1..=max).contains(n))
    })
}

/// Appends the records of an Arrow object (see [`import_arrays`]) in one batch: bodies, or a
/// struct's rows with their keys and headers ([`crate::arrow::chunk_rows`]). `keys` and
/// `headers`: `append_batch`'s, for an array of bodies.
pub(super) fn append_arrow<'py>(
    slf: &PyCommitLog,
    py: Python<'py>,
    obj: &Bound<'py, PyAny>,
    want_offsets: bool,
    keys: Option<&Bound<'py, PyAny>>,
    headers: Option<&Bound<'py, PyAny>>,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    if want_offsets {
        let what = "append_batch of an Arrow array (its offsets are a pyarrow array; or pass \
                    offsets=False)";
        pyarrow(py, what)?;
    }
    let arrays = import_arrays(obj)?;
    let given = keys.is_some_and(|k| !k.is_none()) || headers.is_some_and(|h| !h.is_none());
    let kwargs = match given {
        true if arrays.iter().any(|a| a.as_struct_opt().is_some()) => {
            return Err(PyTypeError::new_err(
                "append_batch of an Arrow table takes its keys and headers from its \"key\" and \
                 \"headers\" fields, not from keys= or headers=",
            ));
        }
        true => {
            let rows: usize = arrays.iter().map(|a| a.len()).sum();
            props::encode_batch(rows, keys, None, headers)?
        }
        false => Vec::new(),
    };
    let offsets = super::interrupt::detach(py, || -> Result<Vec<u64>, Error> {
        let rows = crate::arrow::chunk_rows(arrays.iter().map(|a| a.as_ref()))?;
        let props = if kwargs.is_empty() {
            &rows.props
        } else {
            &kwargs
        };
        Ok(slf.log.append_encoded(&rows.bodies, props)?.offsets)
    })?;
    want_offsets.then(|| offsets_array(py, offsets)).transpose()
}
