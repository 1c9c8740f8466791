//! Keys, message ids and headers between Python and a record's properties block
//! (`crate::storage::props`).
//!
//! A key, a message id or a header value is a bytes-like object or a `str` (its UTF-8 bytes); a
//! header name is
//! a `str`. `headers` is a sequence of `(name, value)` pairs (names may repeat, order is kept) or
//! a mapping. Reads hand back `bytes` and a list of `(str, bytes)` tuples.

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyFrozenSet, PyList, PySet, PyString, PyTuple};

use super::args;
use super::body::{self, Body};
use crate::storage::props::{self, Props};

/// Calls `f` with the bytes of a key or header value: `bytes` and `str` read in place, any
/// other bytes-like object copied first (as `append` takes a body). `what` names it in errors
/// (made only then).
fn with_bytes<T>(
    obj: &Bound<'_, PyAny>,
    what: &dyn Fn() -> String,
    f: impl FnOnce(&[u8]) -> PyResult<T>,
) -> PyResult<T> {
    if let Ok(b) = obj.cast::<PyBytes>() {
        return f(b.as_bytes());
    }
    if let Ok(s) = obj.cast::<PyString>() {
        return f(s.to_str()?.as_bytes());
    }
    if body::is_bytes_like(obj) {
        return f(Body::of(obj, &what(), usize::MAX)?.as_slice());
    }
    Err(PyTypeError::new_err(format!(
        "{} must be bytes-like or a str, got {}",
        what(),
        args::type_of(obj)
    )))
}

/// A header name: a `str`.
fn name_of<'a>(n: &'a Bound<'_, PyAny>, which: &str, i: usize) -> PyResult<&'a str> {
    let s = n.cast::<PyString>().map_err(|_| {
        PyTypeError::new_err(format!(
            "header names are str; headers{which}[{i}] has a name of type {}",
            args::type_of(n)
        ))
    })?;
    s.to_str()
}

/// The encoded properties of `key`, the message id `id` and `headers` (empty for none of them).
/// `which` names the record in errors ("" or "[3]").
pub fn encode<'py>(
    key: Option<&Bound<'py, PyAny>>,
    id: Option<&Bound<'py, PyAny>>,
    headers: Option<&Bound<'py, PyAny>>,
    which: &str,
) -> PyResult<Vec<u8>> {
    let mut out = Vec::with_capacity(64);
    let key = key.filter(|k| !k.is_none());
    let id = id.filter(|i| !i.is_none());
    let headers = headers.filter(|h| !h.is_none());
    let in_record = match which.is_empty() {
        true => String::new(),
        false => format!(" (record {which})"),
    };
    let count = match headers {
        None => 0,
        Some(h) if h.is_instance_of::<PyList>() || h.is_instance_of::<PyTuple>() => h.len()?,
        Some(h) if h.is_instance_of::<PyDict>() => h.len()?,
        Some(h) => {
            return Err(PyTypeError::new_err(format!(
                "headers{which} must be a list of (name, value) tuples or a dict, got {}",
                args::type_of(h)
            )))
        }
    };
    let write = |key: Option<&[u8]>, id: Option<&[u8]>, out: &mut Vec<u8>| -> PyResult<()> {
        let mut e = props::Encoder::new(out, key, id, count, &in_record)?;
        let value_what = |i: usize| move || format!("headers{which}[{i}]'s value");
        match headers {
            Some(h) if h.is_instance_of::<PyDict>() => {
                let d = h.cast::<PyDict>()?;
                for (i, (n, v)) in d.iter().enumerate() {
                    let name = name_of(&n, which, i)?;
                    with_bytes(&v, &value_what(i), |v| Ok(e.header(name, v)?))?;
                }
            }
            Some(h) => {
                for (i, pair) in h.try_iter()?.enumerate() {
                    let pair = pair?;
                    let t = pair
                        .cast::<PyTuple>()
                        .ok()
                        .filter(|t| t.len() == 2)
                        .ok_or_else(|| {
                            PyTypeError::new_err(format!(
                                "headers{which}[{i}] must be a (name, value) tuple, got {}",
                                args::type_of(&pair)
                            ))
                        })?;
                    let (n, v) = (t.get_item(0)?, t.get_item(1)?);
                    let name = name_of(&n, which, i)?;
                    with_bytes(&v, &value_what(i), |v| Ok(e.header(name, v)?))?;
                }
            }
            None => {}
        }
        Ok(e.finish()?)
    };
    let with_id = |key: Option<&[u8]>, out: &mut Vec<u8>| match id {
        Some(i) => with_bytes(i, &|| format!("msg_id{which}"), |i| {
            write(key, Some(i), out)
        }),
        None => write(key, None, out),
    };
    match key {
        Some(k) => with_bytes(k, &|| format!("key{which}"), |k| with_id(Some(k), &mut out))?,
        None => with_id(None, &mut out)?,
    }
    Ok(out)
}

/// Each record's properties for `append_batch`: `keys`, `ids` and `headers` are sequences as
/// long as the bodies (`None` items: none for that record). Empty when none is given.
pub fn encode_batch<'py>(
    n: usize,
    keys: Option<&Bound<'py, PyAny>>,
    ids: Option<&Bound<'py, PyAny>>,
    headers: Option<&Bound<'py, PyAny>>,
) -> PyResult<Vec<Vec<u8>>> {
    let items =
        |obj: Option<&Bound<'py, PyAny>>, what: &str| -> PyResult<Option<Vec<Bound<'py, PyAny>>>> {
            let Some(obj) = obj.filter(|o| !o.is_none()) else {
                return Ok(None);
            };
            // Unordered (a set) or one value (a str): never one item per body in order.
            if obj.is_instance_of::<PyString>()
                || obj.is_instance_of::<PyBytes>()
                || obj.is_instance_of::<PyDict>()
                || obj.is_instance_of::<PySet>()
                || obj.is_instance_of::<PyFrozenSet>()
            {
                return Err(PyTypeError::new_err(format!(
                    "{what} must be a sequence with one item per body, got {}",
                    args::type_of(obj)
                )));
            }
            let v: Vec<Bound<'py, PyAny>> = obj
                .try_iter()
                .map_err(|_| {
                    PyTypeError::new_err(format!(
                        "{what} must be a sequence with one item per body, got {}",
                        args::type_of(obj)
                    ))
                })?
                .collect::<PyResult<_>>()?;
            if v.len() != n {
                return Err(pyo3::exceptions::PyValueError::new_err(format!(
                    "{what} has {} items for {n} bodies",
                    v.len()
                )));
            }
            Ok(Some(v))
        };
    let (keys, ids, headers) = (
        items(keys, "keys")?,
        items(ids, "msg_ids")?,
        items(headers, "headers")?,
    );
    if keys.is_none() && ids.is_none() && headers.is_none() {
        return Ok(Vec::new());
    }
    (0..n)
        .map(|i| {
            let which = format!("[{i}]");
            encode(
                keys.as_ref().map(|k| &k[i]),
                ids.as_ref().map(|d| &d[i]),
                headers.as_ref().map(|h| &h[i]),
                &which,
            )
        })
        .collect()
}

/// A key argument (of `lookup`, filters): bytes-like or str, copied; longer than a key can be
/// is refused.
pub fn key_arg(obj: &Bound<'_, PyAny>) -> PyResult<Vec<u8>> {
    with_bytes(obj, &|| "key".to_string(), |key| {
        if key.len() > props::MAX_KEY_LEN {
            return Err(pyo3::exceptions::PyValueError::new_err(format!(
                "a key is at most {} bytes, this one has {}: no record has it",
                props::MAX_KEY_LEN,
                key.len()
            )));
        }
        Ok(key.to_vec())
    })
}

/// A time bound: milliseconds since the epoch (an int) or an aware `datetime` (a naive one is
/// refused, as `consumer(start=)` refuses it); a bound inside a millisecond moves to the next.
pub fn time_arg(obj: Option<&Bound<'_, PyAny>>, what: &str) -> PyResult<Option<u64>> {
    let Some(obj) = obj.filter(|o| !o.is_none()) else {
        return Ok(None);
    };
    if obj.is_instance_of::<pyo3::types::PyInt>() && !obj.is_instance_of::<pyo3::types::PyBool>() {
        let ms: i128 = obj.extract()?;
        return Ok(Some(ms.clamp(0, u64::MAX as i128) as u64));
    }
    if obj.is_instance_of::<pyo3::types::PyDateTime>() {
        if let crate::Start::Timestamp(ms) = super::consumer::start(obj, what)? {
            return Ok(Some(ms));
        }
    }
    Err(PyTypeError::new_err(format!(
        "{what} must be milliseconds since the epoch (an int) or an aware datetime, got {}",
        args::type_of(obj)
    )))
}

/// `(key, headers)` of a record's properties, as Python objects.
pub fn to_python<'py>(
    py: Python<'py>,
    p: &Props<'_>,
) -> PyResult<(Option<Bound<'py, PyBytes>>, Bound<'py, PyList>)> {
    let key = p.key.map(|k| PyBytes::new(py, k));
    let headers = PyList::empty(py);
    for (n, v) in &p.headers {
        headers.append((PyString::new(py, n), PyBytes::new(py, v)))?;
    }
    Ok((key, headers))
}
