//! The records of an Arrow append with keys and headers: a struct array (a record batch, a
//! table) with a `body` field and optional `key` and `headers` fields, one record a row. The
//! bodies are borrowed; each row's key and headers are encoded as its properties block
//! ([`crate::storage::props`]).

use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, StructArray};
use arrow_buffer::ArrowNativeType;
use arrow_schema::DataType;

use super::bodies::{chunk_bodies, one_chunk};
use crate::error::{Error, Result};
use crate::storage::props;

/// The fields a struct given to an append may have.
const FIELDS: [&str; 3] = ["body", "key", "headers"];

/// The records of an Arrow append: their bodies, and each one's encoded properties (empty when
/// no row has a key or headers: the append is then one of bodies alone).
#[derive(Debug, Default)]
pub struct Rows<'a> {
    pub bodies: Vec<&'a [u8]>,
    pub props: Vec<Vec<u8>>,
}

/// The records of the chunks of one Arrow array (a chunked array, a stream), in order: a binary
/// or string array is bodies alone ([`chunk_bodies`]); a struct array is one record a row, with
/// its `body` field (required, never null), its `key` field (any binary or string type; null: no
/// key) and its `headers` field (a list or large_list of `struct<name: string, value: binary or
/// string>`; null or empty: none). Any other field is refused, naming it. Errors name a row by
/// its index in the whole; nothing is returned for a refused input.
pub fn chunk_rows<'a>(chunks: impl IntoIterator<Item = &'a dyn Array>) -> Result<Rows<'a>> {
    let chunks: Vec<&dyn Array> = chunks.into_iter().collect();
    if !chunks
        .iter()
        .any(|c| matches!(c.data_type(), DataType::Struct(_)))
    {
        return Ok(Rows {
            bodies: chunk_bodies(chunks)?,
            props: Vec::new(),
        });
    }
    let mut structs: Vec<&StructArray> = Vec::with_capacity(chunks.len());
    for &c in &chunks {
        match c.as_struct_opt() {
            Some(s) => structs.push(s),
            None => {
                return Err(Error::InvalidArgument(format!(
                    "an Arrow stream of struct arrays and {} arrays cannot be appended: give \
                     one type",
                    c.data_type()
                )))
            }
        }
    }
    let mut base = 0;
    for s in &structs {
        check_fields(s)?;
        if let Some(nulls) = s.logical_nulls().filter(|n| n.null_count() > 0) {
            let first = base + nulls.iter().position(|valid| !valid).unwrap_or(0);
            return Err(Error::InvalidArgument(format!(
                "row {first} of the Arrow table is null: every record needs a body (drop the \
                 null rows first)"
            )));
        }
        base += s.len();
    }
    let body_fields: Option<Vec<&dyn Array>> = structs.iter().map(|s| field(s, "body")).collect();
    let body_fields =
        body_fields.ok_or_else(|| Error::Internal("a struct without its body field".into()))?;
    let bodies = chunk_bodies(body_fields).map_err(|e| in_field("body", e))?;
    let mut props = Vec::new();
    let mut base = 0;
    let mut headers = Vec::new();
    for s in &structs {
        let keys = field(s, "key").map(keys_of).transpose()?;
        let lists = field(s, "headers").map(Lists::of).transpose()?;
        if keys.is_none() && lists.is_none() {
            base += s.len();
            continue;
        }
        if props.len() < base {
            props.resize(base, Vec::new());
        }
        for row in 0..s.len() {
            let key = keys.as_ref().and_then(|k| k[row]);
            headers.clear();
            if let Some(l) = &lists {
                l.headers_of(row, base + row, &mut headers)?;
            }
            let mut out = Vec::new();
            props::encode(key, None, &headers, "", &mut out).map_err(|e| match e {
                Error::InvalidArgument(m) => {
                    Error::InvalidArgument(format!("{m} (row {})", base + row))
                }
                e => e,
            })?;
            props.push(out);
        }
        base += s.len();
    }
    if props.iter().all(Vec::is_empty) {
        props.clear();
    } else {
        props.resize(base, Vec::new());
    }
    Ok(Rows { bodies, props })
}

/// The child `name` of `s`, if it has one.
fn field<'a>(s: &'a StructArray, name: &str) -> Option<&'a dyn Array> {
    s.column_by_name(name).map(|c| c.as_ref())
}

fn quoted(names: &[&str]) -> String {
    let q: Vec<String> = names.iter().map(|n| format!("{n:?}")).collect();
    format!("[{}]", q.join(", "))
}

/// A struct's fields are `body` and, optionally, `key` and `headers`.
fn check_fields(s: &StructArray) -> Result<()> {
    let names: Vec<&str> = s.column_names();
    let unknown: Vec<&str> = names
        .iter()
        .copied()
        .filter(|n| !FIELDS.contains(n))
        .collect();
    if !unknown.is_empty() {
        return Err(Error::InvalidArgument(format!(
            "the Arrow table given to append_batch has field(s) {} that a record does not \
             have; its fields are \"body\" (required), \"key\" and \"headers\": drop or rename \
             the others first",
            quoted(&unknown)
        )));
    }
    if !names.contains(&"body") {
        return Err(Error::InvalidArgument(format!(
            "the Arrow table given to append_batch has no \"body\" field (its fields: {}); \
             every record needs a body",
            quoted(&names)
        )));
    }
    for (i, n) in names.iter().enumerate() {
        if names[..i].contains(n) {
            return Err(Error::InvalidArgument(format!(
                "the Arrow table given to append_batch has the field {n:?} twice"
            )));
        }
    }
    Ok(())
}

fn in_field(name: &str, e: Error) -> Error {
    match e {
        Error::InvalidArgument(m) => Error::InvalidArgument(format!("field {name:?}: {m}")),
        e => e,
    }
}

/// Whether `t` holds bytes an append takes as a key or a header value.
fn is_bytes(t: &DataType) -> bool {
    matches!(
        t,
        DataType::Binary
            | DataType::LargeBinary
            | DataType::BinaryView
            | DataType::FixedSizeBinary(_)
            | DataType::Utf8
            | DataType::LargeUtf8
            | DataType::Utf8View
    )
}

const BYTES: &str = "binary, large_binary, binary_view, fixed_size_binary, string, large_string \
                     or string_view";

/// The values of a bytes-like array, `None` where null.
fn optional_bytes(a: &dyn Array) -> Result<Vec<Option<&[u8]>>> {
    let values = one_chunk(a)?;
    Ok(match a.logical_nulls() {
        Some(nulls) => values
            .into_iter()
            .zip(nulls.iter())
            .map(|(v, valid)| valid.then_some(v))
            .collect(),
        None => values.into_iter().map(Some).collect(),
    })
}

/// The `key` field: one key or none a row.
fn keys_of(a: &dyn Array) -> Result<Vec<Option<&[u8]>>> {
    if !is_bytes(a.data_type()) {
        return Err(Error::InvalidArgument(format!(
            "field \"key\" is {}; a key is {BYTES} (null: no key)",
            a.data_type()
        )));
    }
    optional_bytes(a)
}

/// The `headers` field of one chunk: each row's run of headers in `names` and `values`.
struct Lists<'a> {
    /// Each row's headers, `[ends[row], ends[row + 1])`.
    ends: Vec<usize>,
    /// Rows whose list is null (no headers), if any.
    nulls: Option<arrow_buffer::NullBuffer>,
    names: Vec<Option<&'a [u8]>>,
    values: Vec<Option<&'a [u8]>>,
    /// Headers that are null themselves.
    null_items: Option<arrow_buffer::NullBuffer>,
}

const HEADERS: &str = "a list (or large_list) of struct<name: string, value: binary or string>";

impl<'a> Lists<'a> {
    fn of(a: &'a dyn Array) -> Result<Lists<'a>> {
        let (ends, items): (Vec<usize>, &ArrayRef) = match a.data_type() {
            DataType::List(_) => {
                let l = a.as_list::<i32>();
                (
                    l.value_offsets().iter().map(|o| o.as_usize()).collect(),
                    l.values(),
                )
            }
            DataType::LargeList(_) => {
                let l = a.as_list::<i64>();
                (
                    l.value_offsets().iter().map(|o| o.as_usize()).collect(),
                    l.values(),
                )
            }
            other => {
                return Err(Error::InvalidArgument(format!(
                    "field \"headers\" is {other}; headers are {HEADERS} (null or empty: none)"
                )))
            }
        };
        let Some(items) = items.as_struct_opt() else {
            return Err(Error::InvalidArgument(format!(
                "field \"headers\" is a list of {}; headers are {HEADERS}",
                items.data_type()
            )));
        };
        let fields: Vec<&str> = items.column_names();
        let unknown: Vec<&str> = fields
            .iter()
            .copied()
            .filter(|n| *n != "name" && *n != "value")
            .collect();
        if !unknown.is_empty() || fields.len() != 2 {
            return Err(Error::InvalidArgument(format!(
                "field \"headers\" holds struct fields {}; a header is struct<name: string, \
                 value: binary or string>",
                quoted(&fields)
            )));
        }
        let (Some(names), Some(values)) = (field(items, "name"), field(items, "value")) else {
            return Err(Error::Internal("a header struct without its fields".into()));
        };
        if !matches!(
            names.data_type(),
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
        ) {
            return Err(Error::InvalidArgument(format!(
                "field \"headers\": a header name is a string (string, large_string or \
                 string_view), not {}",
                names.data_type()
            )));
        }
        if !is_bytes(values.data_type()) {
            return Err(Error::InvalidArgument(format!(
                "field \"headers\": a header value is {BYTES}, not {}",
                values.data_type()
            )));
        }
        Ok(Lists {
            ends,
            nulls: a.logical_nulls().filter(|n| n.null_count() > 0),
            names: optional_bytes(names)?,
            values: optional_bytes(values)?,
            null_items: items.logical_nulls().filter(|n| n.null_count() > 0),
        })
    }

    /// The headers of `row` (of this chunk) into `out`; `whole` is the row's index in the whole.
    fn headers_of(
        &self,
        row: usize,
        whole: usize,
        out: &mut Vec<(&'a str, &'a [u8])>,
    ) -> Result<()> {
        if self.nulls.as_ref().is_some_and(|n| n.is_null(row)) {
            return Ok(());
        }
        let (from, to) = (self.ends[row], self.ends[row + 1]);
        for (j, i) in (from..to).enumerate() {
            let null = |what: &str| {
                Error::InvalidArgument(format!(
                    "header {j} of row {whole} has a null {what}: a header has a name and a \
                     value (an empty value is b\"\")"
                ))
            };
            if self.null_items.as_ref().is_some_and(|n| n.is_null(i)) {
                return Err(Error::InvalidArgument(format!(
                    "header {j} of row {whole} is null: give a row no headers with a null or \
                     empty list instead"
                )));
            }
            let name = self.names[i].ok_or_else(|| null("name"))?;
            let value = self.values[i].ok_or_else(|| null("value"))?;
            let name = std::str::from_utf8(name).map_err(|_| {
                Error::InvalidArgument(format!(
                    "header {j} of row {whole} has a name that is not UTF-8"
                ))
            })?;
            out.push((name, value));
        }
        Ok(())
    }
}
