//! The `key=`, `key_prefix=` and `headers=` keywords of `scan`, `scan_batches`, `consumer` and
//! `poll` as a [`Filter`] (`crate::read::filter`), checked before anything is read.
//!
//! - `key`: a bytes-like object or a `str` (its UTF-8 bytes): the key must be it; or a list,
//!   tuple, set or frozenset of them: the key must be one of them.
//! - `key_prefix`: a bytes-like object or a `str`: the key must start with it.
//! - `headers`: a dict `{name: value}`, names `str`, each value a bytes-like object, a `str`, or
//!   a list, tuple, set or frozenset of them: some header of that name must have an accepted
//!   value.

use std::sync::Arc;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyFrozenSet, PyList, PySet, PyString, PyTuple};

use super::args;
use super::body;
use crate::Filter;

/// The filter keywords as given (each `None` when not given).
#[derive(Clone, Copy, Default)]
pub struct FilterArgs<'a, 'py> {
    pub key: Option<&'a Bound<'py, PyAny>>,
    pub key_prefix: Option<&'a Bound<'py, PyAny>>,
    pub headers: Option<&'a Bound<'py, PyAny>>,
}

impl FilterArgs<'_, '_> {
    /// The filter they describe; `None` when none is given (or `headers={}` alone). `what`
    /// names the call in errors.
    pub fn filter(&self, what: &str) -> PyResult<Option<Arc<Filter>>> {
        fn given<'py>(o: Option<&Bound<'py, PyAny>>) -> Option<Bound<'py, PyAny>> {
            o.filter(|o| !o.is_none()).cloned()
        }
        let mut f = Filter::new();
        if let Some(key) = given(self.key) {
            f = match values(&key, "key")? {
                Values::One(k) => f.key(k),
                Values::Set(ks) => f.keys(ks),
            };
        }
        if let Some(prefix) = given(self.key_prefix) {
            f = f.key_prefix(one(&prefix, "key_prefix")?.ok_or_else(|| {
                PyTypeError::new_err(format!(
                    "key_prefix must be bytes-like or a str, got {}",
                    args::type_of(&prefix)
                ))
            })?);
        }
        if let Some(headers) = given(self.headers) {
            let d = headers.cast::<PyDict>().map_err(|_| {
                PyTypeError::new_err(format!(
                    "headers must be a dict {{name: value or [values]}}, got {}",
                    args::type_of(&headers)
                ))
            })?;
            for (name, v) in d.iter() {
                let name = name
                    .cast::<PyString>()
                    .map_err(|_| {
                        PyTypeError::new_err(format!(
                            "header names are str; headers has a name of type {}",
                            args::type_of(&name)
                        ))
                    })?
                    .to_str()?
                    .to_owned();
                let what = format!("headers[{name:?}]");
                f = match values(&v, &what)? {
                    Values::One(x) => f.header(&name, x),
                    Values::Set(xs) => f.header_in(&name, xs),
                };
            }
        }
        if f.is_empty() {
            return Ok(None);
        }
        f.check(what)
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        Ok(Some(Arc::new(f)))
    }
}

enum Values {
    One(Vec<u8>),
    Set(Vec<Vec<u8>>),
}

/// One accepted value, or a collection of them.
fn values(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Values> {
    if let Some(v) = one(obj, what)? {
        return Ok(Values::One(v));
    }
    let collection = obj.is_instance_of::<PyList>()
        || obj.is_instance_of::<PyTuple>()
        || obj.is_instance_of::<PySet>()
        || obj.is_instance_of::<PyFrozenSet>();
    if !collection {
        return Err(PyTypeError::new_err(format!(
            "{what} must be bytes-like, a str, or a list, tuple or set of them, got {}",
            args::type_of(obj)
        )));
    }
    let mut out = Vec::new();
    for (i, item) in obj.try_iter()?.enumerate() {
        let item = item?;
        out.push(one(&item, what)?.ok_or_else(|| {
            PyTypeError::new_err(format!(
                "{what}'s items must be bytes-like or str; item {i} is {}",
                args::type_of(&item)
            ))
        })?);
    }
    if out.is_empty() {
        return Err(PyValueError::new_err(format!(
            "{what} is an empty {}: no record would match (leave it out to accept any)",
            args::type_of(obj)
        )));
    }
    Ok(Values::Set(out))
}

/// The bytes of a bytes-like object or of a `str` (UTF-8); `None` for anything else.
fn one(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Option<Vec<u8>>> {
    if let Ok(s) = obj.cast::<PyString>() {
        return Ok(Some(s.to_str()?.as_bytes().to_vec()));
    }
    if body::is_bytes_like(obj) {
        return Ok(Some(
            body::Body::of(obj, what, usize::MAX)?.as_slice().to_vec(),
        ));
    }
    Ok(None)
}
