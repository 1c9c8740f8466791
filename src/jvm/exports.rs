//! The native methods of `io.rmqlog.spark.Native` (jvm/src/io/rmqlog/spark/Native.java).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;

use arrow_array::RecordBatch;
use jni_sys::{jboolean, jbyteArray, jclass, jlong, jlongArray, JNIEnv};

use super::columns::{column, describe, mapped};
use super::env::Env;
use super::fault;
use super::plan;
use crate::arrow::{BatchOptions, BatchReader, BodyLayout, Column};
use crate::error::{Error, Result};
use crate::log::CommitLog;
use crate::options::{Options, TierOptions};

/// A reader handle: the batches of one span, and the last one, alive until the next call.
struct Reader {
    /// The last batch's body buffers, which Java reads (`fault.rs`); first, so that a dropped
    /// reader stops watching them before it frees them.
    watched: fault::Watched,
    batches: BatchReader,
    columns: Vec<Column>,
    batch: Option<RecordBatch>,
    body_buffers: Vec<i64>,
}

/// What a native method hands Java: a value, or a new handle ([`New`]).
trait Out {
    type Java;
    fn into_java(self) -> Self::Java;
}

macro_rules! out_as_is {
    ($($t:ty),*) => {$(
        impl Out for $t {
            type Java = $t;
            fn into_java(self) -> $t {
                self
            }
        }
    )*};
}
out_as_is!(jlong, jlongArray, ());

/// A new object Java owns once the call returns its handle (a pointer from `Box::into_raw`); a
/// call that fails after making it frees it instead.
struct New<T>(Box<T>);

impl<T> Out for New<T> {
    type Java = jlong;
    fn into_java(self) -> jlong {
        Box::into_raw(self.0) as jlong
    }
}

/// Runs one native method: its error, or a panic, becomes the pending Java exception and the
/// method returns `failed`.
fn call<T: Out>(raw: *mut JNIEnv, failed: T::Java, f: impl FnOnce(&Env) -> Result<T>) -> T::Java {
    // SAFETY: `raw` is the JNIEnv the JVM passed to the native method calling this.
    let env = unsafe { Env::new(raw) };
    fault::install();
    let guard = fault::Guard::enter();
    let result = catch_unwind(AssertUnwindSafe(|| f(&env)));
    if guard.faulted() {
        env.throw(
            "CorruptionError",
            "a segment file was truncated under this read (a mapped page faulted): another \
             program changed the store's files",
        );
        return failed;
    }
    match result {
        Ok(Ok(v)) => v.into_java(),
        Ok(Err(e)) => {
            env.throw(kind(&e), &e.to_string());
            failed
        }
        Err(panic) => {
            let text = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            env.throw("RmqlogError", &format!("rmqlog panicked: {text}"));
            failed
        }
    }
}

/// The kind Java sees: the name of the Python exception the error maps to (src/python/errors.rs),
/// so that a Spark job's error names the same type whichever reader ran it.
fn kind(e: &Error) -> &'static str {
    match e {
        Error::InvalidArgument(_) => "ValueError",
        Error::Io { .. } => "OSError",
        Error::StoreNotFound { .. } => "StoreNotFoundError",
        Error::OffsetOutOfRange { .. } => "OffsetOutOfRangeError",
        Error::InvalidOffset { .. } => "InvalidOffsetError",
        Error::Configuration(_) => "ConfigurationError",
        Error::Corruption { .. } => "CorruptionError",
        Error::Closed => "ClosedError",
        Error::Tier { .. } => "TierError",
        Error::DataLoss { .. } => "DataLossError",
        _ => "RmqlogError",
    }
}

/// The log a handle names.
///
/// # Safety
/// `handle` came from `open` and has not been given to `close` (the Java owner's contract).
unsafe fn log<'a>(handle: jlong) -> Result<&'a CommitLog> {
    // SAFETY: per the contract, a live Box<CommitLog> leaked by `open`, or 0.
    unsafe { (handle as *const CommitLog).as_ref() }.ok_or(Error::Closed)
}

/// The reader a handle names.
///
/// # Safety
/// `handle` came from `openReader`, has not been given to `closeReader`, and is used by one
/// thread at a time (a Spark task's reader).
unsafe fn reader<'a>(handle: jlong) -> Result<&'a mut Reader> {
    // SAFETY: per the contract, a live Box<Reader> leaked by `openReader`, or 0.
    unsafe { (handle as *mut Reader).as_mut() }.ok_or(Error::Closed)
}

fn text(bytes: Vec<u8>) -> Result<String> {
    String::from_utf8(bytes).map_err(|_| Error::InvalidArgument("a path that is not UTF-8".into()))
}

/// `\0`-separated strings (none for an empty input).
fn strings(bytes: Vec<u8>) -> Result<Vec<String>> {
    match bytes.is_empty() {
        true => Ok(Vec::new()),
        false => bytes.split(|&b| b == 0).map(|s| text(s.to_vec())).collect(),
    }
}

fn offset(v: jlong, what: &str) -> Result<u64> {
    u64::try_from(v).map_err(|_| Error::InvalidArgument(format!("{what} {v} is negative")))
}

/// Opens the store read-only: `paths` (`\0`-separated directories, or one tier URL), the tier
/// URL of the directories (empty: the one the store recorded), the object store's settings
/// (`key\0value\0...`) and the tier cache's directory (empty: the default).
#[no_mangle]
pub extern "system" fn Java_io_rmqlog_spark_Native_open(
    raw: *mut JNIEnv,
    _class: jclass,
    paths: jbyteArray,
    tier_url: jbyteArray,
    tier_options: jbyteArray,
    cache_dir: jbyteArray,
) -> jlong {
    call(raw, 0, |env| {
        let paths = strings(env.bytes(paths))?;
        let url = text(env.bytes(tier_url))?;
        let settings = strings(env.bytes(tier_options))?;
        let cache = text(env.bytes(cache_dir))?;
        let url = match (url.is_empty(), paths.as_slice()) {
            (false, _) => Some(url),
            (true, [one]) if crate::tier::is_url(one) => Some(one.clone()),
            _ => None,
        };
        let tier = url.map(|url| {
            let mut tier = TierOptions::new(url);
            tier.options = settings
                .chunks_exact(2)
                .map(|kv| (kv[0].clone(), kv[1].clone()))
                .collect();
            tier.cache_dir = (!cache.is_empty()).then(|| PathBuf::from(cache));
            tier
        });
        let opts = Options::default().read_only(true).tier(tier);
        let log = CommitLog::open(&paths, opts)?;
        Ok(New(Box::new(log)))
    })
}

/// Closes and frees the log.
#[no_mangle]
pub extern "system" fn Java_io_rmqlog_spark_Native_close(
    raw: *mut JNIEnv,
    _class: jclass,
    handle: jlong,
) {
    call(raw, (), |_| {
        if handle != 0 {
            // SAFETY: the Java owner gives a handle from `open` here once, and never uses it after.
            let log = unsafe { Box::from_raw(handle as *mut CommitLog) };
            log.close()?;
        }
        Ok(())
    })
}

/// `[min_offset, max_offset]`.
#[no_mangle]
pub extern "system" fn Java_io_rmqlog_spark_Native_bounds(
    raw: *mut JNIEnv,
    _class: jclass,
    handle: jlong,
) -> jlongArray {
    call(raw, std::ptr::null_mut(), |env| {
        // SAFETY: a live log handle (the Java owner's contract).
        let log = unsafe { log(handle) }?;
        Ok(env.longs(&[log.min_offset()? as i64, log.max_offset()? as i64]))
    })
}

/// The first record at or after the timestamp (milliseconds), else `max_offset`.
#[no_mangle]
pub extern "system" fn Java_io_rmqlog_spark_Native_offsetForTimestamp(
    raw: *mut JNIEnv,
    _class: jclass,
    handle: jlong,
    ms: jlong,
) -> jlong {
    call(raw, 0, |_| {
        // SAFETY: a live log handle.
        let log = unsafe { log(handle) }?;
        Ok(log.offset_for_timestamp(offset(ms, "timestamp")?)? as jlong)
    })
}

/// The first record boundary at or after `pos`, else `max_offset`.
#[no_mangle]
pub extern "system" fn Java_io_rmqlog_spark_Native_recordStartAtOrAfter(
    raw: *mut JNIEnv,
    _class: jclass,
    handle: jlong,
    pos: jlong,
) -> jlong {
    call(raw, 0, |_| {
        // SAFETY: a live log handle.
        let log = unsafe { log(handle) }?;
        Ok(log.record_start_at_or_after(offset(pos, "offset")?)? as jlong)
    })
}

/// The offsets of the records with this key (the key indexes' lookup).
#[no_mangle]
pub extern "system" fn Java_io_rmqlog_spark_Native_lookup(
    raw: *mut JNIEnv,
    _class: jclass,
    handle: jlong,
    key: jbyteArray,
) -> jlongArray {
    call(raw, std::ptr::null_mut(), |env| {
        // SAFETY: a live log handle.
        let log = unsafe { log(handle) }?;
        let found = log.lookup(&env.bytes(key), None, None)?;
        Ok(env.longs(&found.iter().map(|&o| o as i64).collect::<Vec<_>>()))
    })
}

/// The partitions of `ranges` (`[lo, hi, lo, hi, ...]`, sorted and disjoint) at most
/// `max_bytes` each (0: a partition per segment), regrouped for a key lookup's records when
/// `packed`: `[count, then per partition: its span count and its spans' lo, hi]`.
#[no_mangle]
pub extern "system" fn Java_io_rmqlog_spark_Native_plan(
    raw: *mut JNIEnv,
    _class: jclass,
    handle: jlong,
    ranges: jlongArray,
    max_bytes: jlong,
    packed: jboolean,
) -> jlongArray {
    call(raw, std::ptr::null_mut(), |env| {
        // SAFETY: a live log handle.
        let log = unsafe { log(handle) }?;
        let flat = env.longs_in(ranges);
        let ranges: Vec<plan::Span> = flat
            .chunks_exact(2)
            .map(|r| Ok((offset(r[0], "offset")?, offset(r[1], "offset")?)))
            .collect::<Result<_>>()?;
        let limit = u64::try_from(max_bytes).ok().filter(|&b| b > 0);
        let mut parts = plan::partitions(&log.segments()?, &ranges, limit);
        if packed {
            parts = plan::packed(parts);
        }
        let mut out = vec![parts.len() as i64];
        for spans in &parts {
            out.push(spans.len() as i64);
            out.extend(spans.iter().flat_map(|&(lo, hi)| [lo as i64, hi as i64]));
        }
        Ok(env.longs(&out))
    })
}

/// A reader of the records starting in `[from, to)`: the columns coded in `columns`
/// (`columns.rs`), batches of at most `max_records` records and `max_bytes` bytes.
#[no_mangle]
pub extern "system" fn Java_io_rmqlog_spark_Native_openReader(
    raw: *mut JNIEnv,
    _class: jclass,
    handle: jlong,
    from: jlong,
    to: jlong,
    columns: jlongArray,
    max_records: jlong,
    max_bytes: jlong,
) -> jlong {
    call(raw, 0, |env| {
        // SAFETY: a live log handle.
        let log = unsafe { log(handle) }?;
        let columns = env
            .longs_in(columns)
            .into_iter()
            .map(column)
            .collect::<Result<Vec<_>>>()?;
        let opts = BatchOptions {
            columns: columns.clone(),
            body: BodyLayout::View,
            max_records: usize::try_from(max_records).unwrap_or(1).max(1),
            max_bytes: usize::try_from(max_bytes).unwrap_or(1).max(1),
        };
        let (from, to) = (offset(from, "offset")?, offset(to, "offset")?);
        let batches = log.scan_batches(Some(from), Some(to), opts)?;
        let reader = Reader {
            watched: fault::Watched::default(),
            batches,
            columns,
            batch: None,
            body_buffers: Vec::new(),
        };
        Ok(New(Box::new(reader)))
    })
}

/// The next batch's description (`columns.rs`), empty at the end of the span. The batch before
/// it is freed.
#[no_mangle]
pub extern "system" fn Java_io_rmqlog_spark_Native_next(
    raw: *mut JNIEnv,
    _class: jclass,
    handle: jlong,
) -> jlongArray {
    call(raw, std::ptr::null_mut(), |env| {
        // SAFETY: a live reader handle, used by its task's thread alone.
        let r = unsafe { reader(handle) }?;
        r.watched.clear();
        r.batch = None;
        r.batch = r.batches.next_batch()?;
        let described = match &r.batch {
            Some(batch) => {
                for (start, len) in mapped(batch, &r.columns) {
                    r.watched.add(start, len);
                }
                describe(batch, &r.columns, &mut r.body_buffers)?
            }
            None => Vec::new(),
        };
        Ok(env.longs(&described))
    })
}

/// Where the reader's next batch starts (the end of its span once done).
#[no_mangle]
pub extern "system" fn Java_io_rmqlog_spark_Native_position(
    raw: *mut JNIEnv,
    _class: jclass,
    handle: jlong,
) -> jlong {
    call(raw, 0, |_| {
        // SAFETY: a live reader handle.
        Ok(unsafe { reader(handle) }?.batches.next_offset() as jlong)
    })
}

/// Frees the reader and its last batch.
#[no_mangle]
pub extern "system" fn Java_io_rmqlog_spark_Native_closeReader(
    raw: *mut JNIEnv,
    _class: jclass,
    handle: jlong,
) {
    call(raw, (), |_| {
        if handle != 0 {
            // SAFETY: the Java owner gives a handle from `openReader` here once, never after.
            drop(unsafe { Box::from_raw(handle as *mut Reader) });
        }
        Ok(())
    })
}

/// Waits up to `timeout_ms` (0: not at all, after catching up with the writer) for records past
/// `offset`; returns the end of the records visible then.
#[no_mangle]
pub extern "system" fn Java_io_rmqlog_spark_Native_waitFor(
    raw: *mut JNIEnv,
    _class: jclass,
    handle: jlong,
    offset_: jlong,
    timeout_ms: jlong,
) -> jlong {
    call(raw, 0, |_| {
        // SAFETY: a live log handle.
        let log = unsafe { log(handle) }?;
        let timeout = std::time::Duration::from_millis(offset(timeout_ms, "timeout")?);
        Ok(log.wait(offset(offset_, "offset")?, Some(timeout))? as jlong)
    })
}

/// Picks up what the writer appended since (a read-only log); returns `max_offset`.
#[no_mangle]
pub extern "system" fn Java_io_rmqlog_spark_Native_refresh(
    raw: *mut JNIEnv,
    _class: jclass,
    handle: jlong,
) -> jlong {
    call(raw, 0, |_| {
        // SAFETY: a live log handle.
        Ok(unsafe { log(handle) }?.refresh()? as jlong)
    })
}

/// The address of the count of faults taken (`fault.rs`), which Java's column vectors read.
#[no_mangle]
pub extern "system" fn Java_io_rmqlog_spark_Native_faults(
    _raw: *mut JNIEnv,
    _class: jclass,
) -> jlong {
    fault::install();
    std::ptr::addr_of!(fault::FAULTS) as jlong
}
