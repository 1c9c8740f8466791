//! Checking Python arguments before anything touches the disk. Errors say what was wrong and what
//! is accepted.

use std::path::PathBuf;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyInt, PyString};

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".into())
}

pub fn one_path(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<PathBuf> {
    let os = obj.py().import("os")?;
    let fs = if obj.is_instance_of::<PyString>() {
        obj.clone()
    } else if obj.hasattr("__fspath__")? {
        os.call_method1("fspath", (obj,))?
    } else {
        return Err(PyTypeError::new_err(format!(
            "{what} must be a str or os.PathLike, got {}",
            type_name(obj)
        )));
    };
    let s: String = fs.extract().map_err(|_| {
        PyTypeError::new_err(format!(
            "{what} must be a text path (str), got {}",
            type_name(&fs)
        ))
    })?;
    if s.is_empty() {
        return Err(PyValueError::new_err(format!("{what} is an empty path")));
    }
    Ok(PathBuf::from(s))
}

/// `paths`: a str (split on `os.pathsep`, as RIP-7's "/d0/store:/d1/store"), an `os.PathLike`, or
/// a sequence of them.
pub fn paths(obj: &Bound<'_, PyAny>) -> PyResult<Vec<PathBuf>> {
    if let Ok(s) = obj.cast::<PyString>() {
        if crate::tier::is_url(s.to_str()?) {
            return Ok(vec![PathBuf::from(s.to_str()?)]); // a tier URL, opened read-only
        }
        let sep: String = obj.py().import("os")?.getattr("pathsep")?.extract()?;
        let s = s.to_str()?;
        let parts: Vec<&str> = s.split(sep.as_str()).collect();
        if parts.iter().any(|p| p.is_empty()) {
            return Err(PyValueError::new_err(format!(
                "paths {s:?} has an empty entry; give directories separated by {sep:?}"
            )));
        }
        return Ok(parts.into_iter().map(PathBuf::from).collect());
    }
    if obj.hasattr("__fspath__")? {
        return Ok(vec![one_path(obj, "paths")?]);
    }
    if obj.is_instance_of::<PyBytes>() || obj.try_iter().is_err() {
        return Err(PyTypeError::new_err(format!(
            "paths must be a str, an os.PathLike or a sequence of them, got {}",
            type_name(obj)
        )));
    }
    let mut out = Vec::new();
    for (i, item) in obj.try_iter()?.enumerate() {
        out.push(one_path(&item?, &format!("paths[{i}]"))?);
    }
    if out.is_empty() {
        return Err(PyValueError::new_err(
            "paths is empty: give at least one directory",
        ));
    }
    Ok(out)
}

/// `read_only_paths`: like `paths`, but may be empty.
pub fn paths_or_empty(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Vec<PathBuf>> {
    if obj.is_none() {
        return Ok(Vec::new());
    }
    if !obj.is_instance_of::<PyString>() && !obj.hasattr("__fspath__")? {
        if let Ok(mut it) = obj.try_iter() {
            if it.next().is_none() {
                return Ok(Vec::new());
            }
        }
    }
    paths(obj).map_err(|e| {
        Python::attach(|py| PyErr::from_type(e.get_type(py), format!("{what}: {}", e.value(py))))
    })
}

/// A non-negative int (bools refused) that fits in `u64`.
pub fn uint(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<u64> {
    if obj.is_instance_of::<PyBool>() || !obj.is_instance_of::<PyInt>() {
        return Err(PyTypeError::new_err(format!(
            "{what} must be an int, got {}",
            type_name(obj)
        )));
    }
    let v: i128 = obj.extract().map_err(|_| {
        PyValueError::new_err(format!("{what} is out of range: must be in [0, 2**64)"))
    })?;
    u64::try_from(v).map_err(|_| {
        PyValueError::new_err(format!(
            "{what} must be a non-negative int below 2**64, got {v}"
        ))
    })
}

/// An int (bools refused) that `accept` takes; otherwise a `ValueError` saying it must be
/// `accepted` and what it got.
pub fn int_in<T>(
    obj: &Bound<'_, PyAny>,
    what: &str,
    accepted: &str,
    accept: impl Fn(u64) -> Option<T>,
) -> PyResult<T> {
    let refuse = || {
        PyValueError::new_err(format!(
            "{what} must be {accepted}, got {}",
            obj.repr().map(|r| r.to_string()).unwrap_or_default()
        ))
    };
    match uint(obj, what) {
        Ok(v) => accept(v).ok_or_else(refuse),
        Err(e) if e.is_instance_of::<PyValueError>(obj.py()) => Err(refuse()),
        Err(e) => Err(e),
    }
}

/// An offset: any int; out-of-range values become `OffsetOutOfRangeError` later.
pub fn offset(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<i128> {
    if obj.is_instance_of::<PyBool>() || !obj.is_instance_of::<PyInt>() {
        return Err(PyTypeError::new_err(format!(
            "{what} must be an int, got {}",
            type_name(obj)
        )));
    }
    // Every real offset fits an i64 (one C call); beyond i128 only the sign matters: such an
    // offset is out of any log's range.
    if let Ok(v) = obj.extract::<i64>() {
        return Ok(v.into());
    }
    Ok(obj.extract::<i128>().unwrap_or_else(|_| {
        if obj.lt(0).unwrap_or(false) {
            i128::MIN
        } else {
            i128::MAX
        }
    }))
}

/// A timeout in seconds: a non-negative, finite int or float.
pub fn seconds(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<std::time::Duration> {
    if obj.is_instance_of::<PyBool>() {
        return Err(PyTypeError::new_err(format!(
            "{what} must be a number of seconds (int or float) or None, got bool"
        )));
    }
    let secs: f64 = obj.extract().map_err(|_| {
        PyTypeError::new_err(format!(
            "{what} must be a number of seconds (int or float) or None, got {}",
            type_name(obj)
        ))
    })?;
    std::time::Duration::try_from_secs_f64(secs).map_err(|_| {
        PyValueError::new_err(format!(
            "{what} must be a finite, non-negative number of seconds or None, got {secs}"
        ))
    })
}

/// A string option checked by `parse`.
pub fn string(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<String> {
    obj.extract::<String>()
        .map_err(|_| PyTypeError::new_err(format!("{what} must be a str, got {}", type_name(obj))))
}

/// A bool option.
pub fn boolean(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<bool> {
    if !obj.is_instance_of::<PyBool>() {
        return Err(PyTypeError::new_err(format!(
            "{what} must be a bool, got {}",
            type_name(obj)
        )));
    }
    obj.extract()
}

/// Name of an object's type, for messages.
pub fn type_of(obj: &Bound<'_, PyAny>) -> String {
    type_name(obj)
}

/// A keyword argument whose `None` means something ("off") other than "not given": PyO3 turns an
/// explicit `None` into `Option::None`, so "not given" needs a value of its own.
pub enum Arg<'py> {
    NotGiven,
    Given(Bound<'py, PyAny>),
}

impl<'py> Arg<'py> {
    /// The object given, `None` included.
    pub fn given(&self) -> Option<&Bound<'py, PyAny>> {
        match self {
            Arg::NotGiven => None,
            Arg::Given(obj) => Some(obj),
        }
    }
}

impl<'a, 'py> FromPyObject<'a, 'py> for Arg<'py> {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        Ok(Arg::Given(obj.to_owned()))
    }
}
