//! `CommitLog(...)` keyword arguments -> [`Options`]. Every value is checked here, before anything
//! touches the disk.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};

use super::args;
use super::dirs::PyDirInfo;
use crate::{DirEvent, DirInfo, FlushMode, Options, PerDir, StoreSetting, Strategy, TierOptions};

/// The keyword arguments of `CommitLog`, as given: `None` when not given. For the options whose
/// `None` means "off" (`max_used_ratio`, `force_clean_ratio`, `retention_hours`, `delete_hours`,
/// `retention_bytes`, `consumer_idle_hours`, `local_retention_hours`, `local_retention_bytes`,
/// `dedup_window_records`), an
/// explicit `None` arrives as Python's `None`; for the others it means "not given".
pub struct Kwargs<'a, 'py> {
    pub preset: Option<&'a Bound<'py, PyAny>>,
    pub segment_size: Option<&'a Bound<'py, PyAny>>,
    pub strategy: Option<&'a Bound<'py, PyAny>>,
    pub read_only: Option<&'a Bound<'py, PyAny>>,
    pub wait_for_store_ms: Option<&'a Bound<'py, PyAny>>,
    pub exclusive: Option<&'a Bound<'py, PyAny>>,
    pub flush: Option<&'a Bound<'py, PyAny>>,
    pub flush_interval_ms: Option<&'a Bound<'py, PyAny>>,
    pub lock_timeout_ms: Option<&'a Bound<'py, PyAny>>,
    pub max_message_size: Option<&'a Bound<'py, PyAny>>,
    pub read_only_paths: Option<&'a Bound<'py, PyAny>>,
    pub accept_lost: Option<&'a Bound<'py, PyAny>>,
    pub max_used_ratio: Option<&'a Bound<'py, PyAny>>,
    pub force_clean_ratio: Option<&'a Bound<'py, PyAny>>,
    pub min_free_bytes: Option<&'a Bound<'py, PyAny>>,
    pub warm_ahead: Option<&'a Bound<'py, PyAny>>,
    pub on_dir_event: Option<&'a Bound<'py, PyAny>>,
    pub retention_hours: Option<&'a Bound<'py, PyAny>>,
    pub delete_hours: Option<&'a Bound<'py, PyAny>>,
    pub retention_bytes: Option<&'a Bound<'py, PyAny>>,
    pub retain_unconsumed: Option<&'a Bound<'py, PyAny>>,
    pub consumer_idle_hours: Option<&'a Bound<'py, PyAny>>,
    pub max_deletes_per_pass: Option<&'a Bound<'py, PyAny>>,
    pub clean_interval_ms: Option<&'a Bound<'py, PyAny>>,
    pub file_mode: Option<&'a Bound<'py, PyAny>>,
    pub record_format: Option<&'a Bound<'py, PyAny>>,
    pub tier_url: Option<&'a Bound<'py, PyAny>>,
    pub tier_options: Option<&'a Bound<'py, PyAny>>,
    pub tier_after: Option<&'a Bound<'py, PyAny>>,
    pub local_retention_hours: Option<&'a Bound<'py, PyAny>>,
    pub local_retention_bytes: Option<&'a Bound<'py, PyAny>>,
    pub tier_cache_bytes: Option<&'a Bound<'py, PyAny>>,
    pub tier_cache_dir: Option<&'a Bound<'py, PyAny>>,
    pub dedup_window_ms: Option<&'a Bound<'py, PyAny>>,
    pub dedup_window_records: Option<&'a Bound<'py, PyAny>>,
    /// The log's path, when it is a tier URL (`CommitLog("s3://...", read_only=True)`).
    pub url_path: Option<String>,
}

fn number(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<f64> {
    if obj.is_instance_of::<pyo3::types::PyBool>()
        || !(obj.is_instance_of::<PyFloat>() || obj.is_instance_of::<PyInt>())
    {
        return Err(PyTypeError::new_err(format!(
            "{what} must be a number, got {}",
            args::type_of(obj)
        )));
    }
    obj.extract()
}

/// A ratio for every directory, or `{path: ratio}` overrides.
fn per_dir<T: Clone>(
    obj: &Bound<'_, PyAny>,
    what: &str,
    default: T,
    wrap: impl Fn(f64) -> T,
) -> PyResult<PerDir<T>> {
    if let Ok(map) = obj.cast::<PyDict>() {
        let mut overrides = Vec::new();
        for (k, v) in map.iter() {
            let dir: PathBuf = args::paths(&k)?
                .into_iter()
                .next()
                .ok_or_else(|| PyValueError::new_err(format!("{what}: empty path key")))?;
            let value = number(&v, &format!("{what}[{dir:?}]"))?;
            overrides.push((dir, wrap(value)));
        }
        return Ok(PerDir { default, overrides });
    }
    Ok(PerDir::all(wrap(number(obj, what)?)))
}

fn py_strategy(obj: &Bound<'_, PyAny>) -> PyResult<Strategy> {
    if obj.is_callable() {
        let f: Py<PyAny> = obj.clone().unbind();
        return Ok(Strategy::Custom(Arc::new(
            move |dirs: &[DirInfo], start: u64| {
                Python::attach(|py| {
                    let infos: Vec<PyDirInfo> = dirs.iter().cloned().map(PyDirInfo::from).collect();
                    let answer = PyList::new(py, infos)
                        .and_then(|l| f.call1(py, (l, start)))
                        .and_then(|r| r.extract::<usize>(py));
                    match answer {
                        Ok(i) => Some(i),
                        Err(e) => {
                            super::log_warning(py, &format!("placement strategy raised: {e}"));
                            None
                        }
                    }
                })
            },
        )));
    }
    Ok(Strategy::parse(&args::string(obj, "strategy")?)?)
}

fn py_event_callback(obj: &Bound<'_, PyAny>) -> PyResult<Arc<crate::EventFn>> {
    if !obj.is_callable() {
        return Err(PyTypeError::new_err(format!(
            "on_dir_event must be callable (path, old_state, new_state, reason), got {}",
            args::type_of(obj)
        )));
    }
    let f: Py<PyAny> = obj.clone().unbind();
    Ok(Arc::new(move |ev: &DirEvent| {
        // At interpreter shutdown the event is dropped (it was logged already).
        Python::try_attach(|py| {
            let path = ev.path.to_string_lossy().into_owned();
            if let Err(e) = f.call1(py, (path, ev.old.as_str(), ev.new.as_str(), &ev.reason)) {
                super::log_warning(py, &format!("on_dir_event callback raised: {e}"));
            }
        });
    }))
}

/// The value of every keyword argument of `CommitLog` under `opts`, as `rmqlog.DEFAULTS` (no
/// preset, read from [`Options::default`], the one place defaults are written) and
/// `rmqlog.PRESETS[name]` show them.
fn option_values<'py>(
    py: Python<'py>,
    o: &Options,
    preset: Option<&str>,
) -> PyResult<Bound<'py, PyDict>> {
    let ms = |d: Duration| d.as_millis() as u64;
    let d = PyDict::new(py);
    d.set_item("preset", preset)?;
    d.set_item("segment_size", o.segment_size)?;
    d.set_item("strategy", o.strategy.name())?;
    d.set_item("read_only", o.read_only)?;
    d.set_item("wait_for_store_ms", o.wait_for_store.map(ms))?;
    d.set_item("exclusive", o.exclusive)?;
    d.set_item("flush", o.flush.as_str())?;
    d.set_item("flush_interval_ms", ms(o.flush_interval))?;
    d.set_item("lock_timeout_ms", ms(o.lock_timeout))?;
    d.set_item("max_message_size", o.max_message_size)?;
    d.set_item("read_only_paths", PyTuple::empty(py))?;
    d.set_item("accept_lost", PyTuple::empty(py))?;
    d.set_item("max_used_ratio", o.max_used_ratio.default)?;
    d.set_item("force_clean_ratio", o.force_clean_ratio.default)?;
    d.set_item("min_free_bytes", o.min_free_bytes)?;
    d.set_item("warm_ahead", o.warm_ahead)?;
    d.set_item("on_dir_event", py.None())?;
    d.set_item("retention_hours", o.retention_hours)?;
    let hours = o
        .delete_hours
        .as_ref()
        .map(|h| PyTuple::new(py, h))
        .transpose()?;
    d.set_item("delete_hours", hours)?;
    d.set_item("retention_bytes", o.retention_bytes)?;
    d.set_item("retain_unconsumed", o.retain_unconsumed)?;
    d.set_item("consumer_idle_hours", o.consumer_idle_hours)?;
    d.set_item("max_deletes_per_pass", o.max_deletes_per_pass)?;
    d.set_item("clean_interval_ms", ms(o.clean_interval))?;
    d.set_item("file_mode", o.file_mode)?;
    d.set_item("record_format", o.record_format.number())?;
    let t = TierOptions::new("");
    d.set_item("tier_url", py.None())?;
    d.set_item("tier_options", py.None())?;
    d.set_item("tier_after", t.after.as_secs_f64())?;
    d.set_item("local_retention_hours", py.None())?;
    d.set_item("local_retention_bytes", py.None())?;
    d.set_item("tier_cache_bytes", t.cache_bytes)?;
    d.set_item("tier_cache_dir", py.None())?;
    d.set_item("dedup_window_ms", ms(o.dedup_window))?;
    d.set_item("dedup_window_records", o.dedup_window_records)?;
    Ok(d)
}

/// `rmqlog.DEFAULTS`: the value each keyword argument of `CommitLog` takes when it is not given.
pub fn defaults(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    option_values(py, &Options::default(), None)
}

/// `rmqlog.PRESETS`: for each preset name, the value each keyword argument takes with it.
pub fn presets(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let d = PyDict::new(py);
    for &name in Options::PRESETS {
        d.set_item(
            name,
            option_values(py, &Options::preset(name)?, Some(name))?,
        )?;
    }
    Ok(d)
}

/// `delete_hours`: a sequence of hours of the day.
fn hours(obj: &Bound<'_, PyAny>) -> PyResult<Vec<u32>> {
    let refuse = || {
        PyTypeError::new_err(format!(
            "delete_hours must be a sequence of ints (hours of the day, 0..=23) or None, got {}",
            args::type_of(obj)
        ))
    };
    if obj.is_instance_of::<PyString>() || obj.is_instance_of::<PyBytes>() {
        return Err(refuse());
    }
    let items = obj.try_iter().map_err(|_| refuse())?;
    let mut out = Vec::new();
    for (i, item) in items.enumerate() {
        let item = item?;
        if item.is_instance_of::<PyBool>() || !item.is_instance_of::<PyInt>() {
            return Err(PyTypeError::new_err(format!(
                "delete_hours[{i}] must be an int (an hour of the day, 0..=23), got {}",
                args::type_of(&item)
            )));
        }
        let hour = item
            .extract::<i128>()
            .ok()
            .and_then(|h| u32::try_from(h).ok())
            .filter(|h| *h < 24);
        out.push(hour.ok_or_else(|| {
            PyValueError::new_err(format!(
                "delete_hours must be hours of the day in 0..=23, got {}",
                item.repr().map_or_else(|_| "?".into(), |r| r.to_string())
            ))
        })?);
    }
    Ok(out)
}

/// An option whose Python `None` means off: `Some(None)`; not given: `None`.
fn off_or<'a, 'py>(v: Option<&'a Bound<'py, PyAny>>) -> Option<Option<&'a Bound<'py, PyAny>>> {
    v.map(|v| (!v.is_none()).then_some(v))
}

/// Builds and validates the options.
pub fn build(k: &Kwargs<'_, '_>) -> PyResult<Options> {
    let mut o = match k.preset.filter(|v| !v.is_none()) {
        None => Options::default(),
        Some(v) => Options::preset(&args::string(v, "preset")?)
            .map_err(|e| PyValueError::new_err(format!("{e} (or None for rmqlog.DEFAULTS)")))?,
    };
    if let Some(v) = k.segment_size {
        o.segment_size = args::uint(v, "segment_size")?;
    }
    if let Some(v) = k.strategy {
        o.strategy = py_strategy(v)?;
    }
    if let Some(v) = k.read_only {
        o.read_only = args::boolean(v, "read_only")?;
    }
    if let Some(v) = k.wait_for_store_ms {
        o.wait_for_store = Some(Duration::from_millis(args::uint(v, "wait_for_store_ms")?));
    }
    if let Some(v) = k.exclusive {
        o.exclusive = args::boolean(v, "exclusive")?;
    }
    if let Some(v) = k.flush {
        o.flush = FlushMode::parse(&args::string(v, "flush")?)?;
    }
    if let Some(v) = k.flush_interval_ms {
        o.flush_interval = Duration::from_millis(args::uint(v, "flush_interval_ms")?);
    }
    if let Some(v) = k.lock_timeout_ms {
        o.lock_timeout = Duration::from_millis(args::uint(v, "lock_timeout_ms")?);
    }
    if let Some(v) = k.max_message_size {
        let n = args::uint(v, "max_message_size")?;
        o.max_message_size = u32::try_from(n).map_err(|_| {
            PyValueError::new_err(format!("max_message_size must be below 2**32, got {n}"))
        })?;
    }
    if let Some(v) = k.read_only_paths {
        o.read_only_paths = args::paths_or_empty(v, "read_only_paths")?;
    }
    if let Some(v) = k.accept_lost {
        o.accept_lost = args::paths_or_empty(v, "accept_lost")?;
    }
    if let Some(v) = off_or(k.max_used_ratio) {
        let default = o.max_used_ratio.default;
        o.max_used_ratio = match v {
            None => PerDir::all(None),
            Some(v) => per_dir(v, "max_used_ratio", default, Some)?,
        };
    }
    if let Some(v) = off_or(k.force_clean_ratio) {
        let default = o.force_clean_ratio.default;
        o.force_clean_ratio = match v {
            None => PerDir::all(None),
            Some(v) => per_dir(v, "force_clean_ratio", default, Some)?,
        };
    }
    if let Some(v) = k.min_free_bytes {
        o.min_free_bytes = args::uint(v, "min_free_bytes")?;
    }
    if let Some(v) = k.warm_ahead {
        o.warm_ahead = args::uint(v, "warm_ahead")?;
    }
    if let Some(v) = k.on_dir_event.filter(|v| !v.is_none()) {
        o.on_dir_event = Some(py_event_callback(v)?);
    }
    if let Some(v) = off_or(k.retention_hours) {
        o.retention_hours = v.map(|v| number(v, "retention_hours")).transpose()?;
    }
    if let Some(v) = off_or(k.delete_hours) {
        o.delete_hours = v.map(hours).transpose()?;
    }
    if let Some(v) = off_or(k.retention_bytes) {
        o.retention_bytes = v.map(|v| args::uint(v, "retention_bytes")).transpose()?;
    }
    if let Some(v) = k.retain_unconsumed {
        o.retain_unconsumed = args::boolean(v, "retain_unconsumed")?;
    }
    if let Some(v) = off_or(k.consumer_idle_hours) {
        o.consumer_idle_hours = v.map(|v| number(v, "consumer_idle_hours")).transpose()?;
    }
    if let Some(v) = k.max_deletes_per_pass {
        o.max_deletes_per_pass = args::uint(v, "max_deletes_per_pass")? as usize;
    }
    if let Some(v) = k.clean_interval_ms {
        o.clean_interval = Duration::from_millis(args::uint(v, "clean_interval_ms")?);
    }
    if let Some(v) = k.dedup_window_ms {
        o.dedup_window = Duration::from_millis(args::uint(v, "dedup_window_ms")?);
    }
    if let Some(v) = off_or(k.dedup_window_records) {
        o.dedup_window_records = v
            .map(|v| args::uint(v, "dedup_window_records"))
            .transpose()?;
    }
    if let Some(v) = k.record_format {
        let accepted = "1 (CRC-32 of header and body) or 2 (one CRC-32C, the default)";
        o.record_format = args::int_in(v, "record_format", accepted, |n| {
            u32::try_from(n)
                .ok()
                .and_then(crate::RecordFormat::from_number)
        })?;
    }
    if let Some(v) = k.file_mode {
        let mode = args::uint(v, "file_mode")?;
        o.file_mode = u32::try_from(mode).map_err(|_| {
            PyValueError::new_err(format!("file_mode must be permission bits, got {mode:o}"))
        })?;
    }
    o.tier = tier(k)?;
    o.validate()?;
    // A store-wide setting not given is the store's recorded one (`StoreSetting`).
    let some = |v: Option<&Bound<'_, PyAny>>| v.filter(|v| !v.is_none()).is_some();
    let given = [
        (k.segment_size.is_some(), StoreSetting::SegmentSize),
        (k.strategy.is_some(), StoreSetting::Strategy),
        (k.retention_hours.is_some(), StoreSetting::RetentionHours),
        (k.delete_hours.is_some(), StoreSetting::DeleteHours),
        (k.retention_bytes.is_some(), StoreSetting::RetentionBytes),
        (
            k.retain_unconsumed.is_some(),
            StoreSetting::RetainUnconsumed,
        ),
        (
            k.consumer_idle_hours.is_some(),
            StoreSetting::ConsumerIdleHours,
        ),
        (k.max_used_ratio.is_some(), StoreSetting::MaxUsedRatio),
        (k.force_clean_ratio.is_some(), StoreSetting::ForceCleanRatio),
        (k.min_free_bytes.is_some(), StoreSetting::MinFreeBytes),
        (k.clean_interval_ms.is_some(), StoreSetting::CleanInterval),
        (some(k.tier_after), StoreSetting::TierAfter),
        (
            k.local_retention_hours.is_some(),
            StoreSetting::LocalRetention,
        ),
        (
            k.local_retention_bytes.is_some(),
            StoreSetting::LocalRetentionBytes,
        ),
        (k.dedup_window_ms.is_some(), StoreSetting::DedupWindow),
        (
            k.dedup_window_records.is_some(),
            StoreSetting::DedupWindowRecords,
        ),
    ];
    for (_, setting) in given.into_iter().filter(|(given, _)| *given) {
        o = o.named(setting);
    }
    Ok(o)
}

/// The `tier_*` and `local_retention_*` options; the URL is `tier_url`, or the path when the log
/// is opened by its tier URL.
fn tier(k: &Kwargs<'_, '_>) -> PyResult<Option<TierOptions>> {
    let given = |v: Option<&Bound<'_, PyAny>>| v.filter(|v| !v.is_none()).is_some();
    let url = match (k.tier_url.filter(|v| !v.is_none()), &k.url_path) {
        (Some(v), _) => args::string(v, "tier_url")?,
        (None, Some(path)) => path.clone(),
        (None, None) => {
            let others = [
                ("tier_options", k.tier_options),
                ("tier_after", k.tier_after),
                ("local_retention_hours", k.local_retention_hours),
                ("local_retention_bytes", k.local_retention_bytes),
                ("tier_cache_bytes", k.tier_cache_bytes),
                ("tier_cache_dir", k.tier_cache_dir),
            ];
            if let Some((name, _)) = others.iter().find(|(_, v)| given(*v)) {
                return Err(PyValueError::new_err(format!(
                    "{name} configures the remote tier: give tier_url too (an open that gives \
                     no tier option takes the store's tier and its policy)"
                )));
            }
            return Ok(None);
        }
    };
    let mut t = TierOptions::new(url);
    t.options = tier_settings(k.tier_options)?;
    if let Some(v) = k.tier_after.filter(|v| !v.is_none()) {
        t.after = seconds(v, "tier_after", 1.0)?;
    }
    if let Some(v) = k.local_retention_hours.filter(|v| !v.is_none()) {
        t.local_retention = Some(seconds(v, "local_retention_hours", 3600.0)?);
    }
    if let Some(v) = k.local_retention_bytes.filter(|v| !v.is_none()) {
        t.local_retention_bytes = Some(args::uint(v, "local_retention_bytes")?);
    }
    if let Some(v) = k.tier_cache_bytes.filter(|v| !v.is_none()) {
        t.cache_bytes = args::uint(v, "tier_cache_bytes")?;
    }
    if let Some(v) = k.tier_cache_dir.filter(|v| !v.is_none()) {
        t.cache_dir = Some(args::one_path(v, "tier_cache_dir")?);
    }
    Ok(Some(t))
}

/// A non-negative number of `unit`-second units, as a duration.
fn seconds(v: &Bound<'_, PyAny>, what: &str, unit: f64) -> PyResult<Duration> {
    let n = number(v, what)?;
    match Duration::try_from_secs_f64(n * unit) {
        Ok(d) if n >= 0.0 => Ok(d),
        _ => Err(PyValueError::new_err(format!(
            "{what} must be a non-negative number (at most {:.0}) or None, got {n}",
            u64::MAX as f64 / unit
        ))),
    }
}

/// `tier_options`: the object store's settings, a dict of str to str (None: none).
pub fn tier_settings(v: Option<&Bound<'_, PyAny>>) -> PyResult<BTreeMap<String, String>> {
    let mut settings = BTreeMap::new();
    let Some(v) = v.filter(|v| !v.is_none()) else {
        return Ok(settings);
    };
    let map = v.cast::<PyDict>().map_err(|_| {
        PyTypeError::new_err(format!(
            "tier_options must be a dict of str to str (the store's settings: endpoint, region, \
             ...), got {}",
            args::type_of(v)
        ))
    })?;
    for (key, value) in map.iter() {
        let key = args::string(&key, "a tier_options key")?;
        let value = args::string(&value, &format!("tier_options[{key:?}]"))?;
        settings.insert(key, value);
    }
    Ok(settings)
}
