//! Builds one record batch from validated records: the one columnar code path of the crate
//! (Python's `scan_batches`, the Spark sources, `to_arrow`).

use std::ptr::NonNull;
use std::sync::Arc;

use arrow_array::builder::make_view;
use arrow_array::{
    ArrayRef, BinaryArray, BinaryViewArray, Int64Array, ListArray, RecordBatch, RecordBatchOptions,
    StringArray, StructArray, TimestampMillisecondArray,
};
use arrow_buffer::{Buffer, NullBufferBuilder, OffsetBuffer, ScalarBuffer};
use arrow_schema::SchemaRef;

use super::columns::{
    header_fields, header_item, weight, BatchOptions, BodyLayout, Column, Limits,
};
use crate::error::{Error, Result};
use crate::read::reader::Found;
use crate::storage::props;
use crate::storage::segment::Mapping;

/// The columns of one batch, filled a record at a time.
pub(super) struct BatchBuilder<'a> {
    opts: &'a BatchOptions,
    limits: Limits,
    rows: usize,
    /// What the records weigh against `max_bytes`: their bodies and properties.
    body_bytes: usize,
    offsets: Vec<i64>,
    timestamps: Vec<i64>,
    segments: Vec<i64>,
    views: Views,
    data: Vec<u8>,
    value_offsets: Vec<i32>,
    /// The `key` and `headers` columns, `None` when neither is asked for.
    props: Option<Box<PropsColumns>>,
}

impl<'a> BatchBuilder<'a> {
    /// `body_bytes`: what this batch is expected to weigh (the last batch's, or what a planner
    /// counted: bodies, keys and headers), reserved at once for a copied body column.
    pub(super) fn new(opts: &'a BatchOptions, body_bytes: usize) -> Self {
        let cap = |c| {
            if opts.wants(c) {
                opts.max_records.clamp(1, 1 << 16)
            } else {
                0
            }
        };
        let binary = opts.wants(Column::Body) && opts.body == BodyLayout::Binary;
        BatchBuilder {
            opts,
            limits: opts.limits(),
            rows: 0,
            body_bytes: 0,
            offsets: Vec::with_capacity(cap(Column::Offset)),
            timestamps: Vec::with_capacity(cap(Column::Timestamp)),
            segments: Vec::with_capacity(cap(Column::Segment)),
            views: Views::default(),
            data: match binary {
                true => Vec::with_capacity(body_bytes.min(opts.max_bytes)),
                false => Vec::new(),
            },
            value_offsets: if binary { vec![0] } else { Vec::new() },
            props: opts.wants_props().then(|| {
                Box::new(PropsColumns::new(
                    opts.wants(Column::Key),
                    opts.wants(Column::Headers),
                    opts.max_records.clamp(1, 1 << 16),
                ))
            }),
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.rows == 0
    }

    pub(super) fn body_bytes(&self) -> usize {
        self.body_bytes
    }

    /// Whether `rec` still fits this batch (a first record always does).
    pub(super) fn fits(&self, rec: &Found) -> bool {
        let w = weight(rec.body_len, rec.props_len);
        self.limits.fits(self.rows, self.body_bytes, w)
    }

    /// Adds `rec` (the caller checked [`BatchBuilder::fits`]).
    pub(super) fn push(&mut self, rec: &Found, map: &Arc<Mapping>) -> Result<()> {
        // The pushes that can fail come first: a refused record leaves every column as it was.
        if let Some(props) = &mut self.props {
            props.push(rec, map)?;
        }
        if self.opts.wants(Column::Body) {
            let pushed = match self.opts.body {
                BodyLayout::View => self.views.push(rec, map),
                BodyLayout::Binary => self.push_copy(rec, map),
            };
            if let Err(e) = pushed {
                if let Some(props) = &mut self.props {
                    props.pop();
                }
                return Err(e);
            }
        }
        // Columns not asked for were given no capacity: each test is one predictable branch.
        if self.offsets.capacity() > 0 {
            self.offsets.push(rec.offset as i64);
        }
        if self.timestamps.capacity() > 0 {
            let ms = i64::try_from(rec.timestamp_ms).unwrap_or(i64::MAX);
            self.timestamps.push(ms);
        }
        if self.segments.capacity() > 0 {
            self.segments.push(rec.segment_start as i64);
        }
        self.rows += 1;
        self.body_bytes += weight(rec.body_len, rec.props_len);
        Ok(())
    }

    fn push_copy(&mut self, rec: &Found, map: &Mapping) -> Result<()> {
        let end = i32::try_from(self.data.len() + rec.body_len).map_err(|_| {
            Error::InvalidArgument(format!(
                "the body at offset {} ({} bytes) does not fit an Arrow binary column (< 2 GiB \
                 per batch); read it with body=\"view\"",
                rec.offset, rec.body_len
            ))
        })?;
        let body = rec.body_range();
        self.data.extend_from_slice(map.bytes(body.start, body.end));
        self.value_offsets.push(end);
        Ok(())
    }

    /// The batch of the records pushed.
    pub(super) fn finish(self, schema: &SchemaRef) -> Result<RecordBatch> {
        let mut arrays: Vec<ArrayRef> = Vec::with_capacity(self.opts.columns.len());
        let (mut offsets, mut timestamps, mut segments) = (
            Some(self.offsets),
            Some(self.timestamps),
            Some(self.segments),
        );
        let (mut views, mut data) = (Some(self.views), Some((self.data, self.value_offsets)));
        let mut props = self.props.map(|p| *p).unwrap_or_default();
        for &c in &self.opts.columns {
            let array: ArrayRef = match c {
                Column::Offset => Arc::new(Int64Array::from(offsets.take().unwrap_or_default())),
                Column::Segment => Arc::new(Int64Array::from(segments.take().unwrap_or_default())),
                Column::Timestamp => Arc::new(
                    TimestampMillisecondArray::from(timestamps.take().unwrap_or_default())
                        .with_timezone("UTC"),
                ),
                Column::Body => match self.opts.body {
                    BodyLayout::View => Arc::new(views.take().unwrap_or_default().finish()?),
                    BodyLayout::Binary => {
                        let (mut bytes, ends) = data.take().unwrap_or_default();
                        // The reserve was a guess (the last batch's size): a batch keeps no more
                        // than twice what it holds.
                        if bytes.capacity() > 2 * bytes.len() + 4096 {
                            bytes.shrink_to_fit();
                        }
                        let ends = OffsetBuffer::new(ScalarBuffer::from(ends));
                        Arc::new(
                            BinaryArray::try_new(ends, Buffer::from_vec(bytes), None)
                                .map_err(arrow_bug)?,
                        )
                    }
                },
                Column::Key => Arc::new(props.keys.take().unwrap_or_default().finish()?),
                Column::Headers => Arc::new(props.headers.take().unwrap_or_default().finish()?),
            };
            arrays.push(array);
        }
        let rows = RecordBatchOptions::new().with_row_count(Some(self.rows));
        RecordBatch::try_new_with_options(Arc::clone(schema), arrays, &rows).map_err(arrow_bug)
    }
}

/// The `key` and `headers` columns: each record's properties copied (they are small).
#[derive(Default)]
struct PropsColumns {
    keys: Option<Keys>,
    headers: Option<Headers>,
}

impl PropsColumns {
    fn new(key: bool, headers: bool, rows: usize) -> Self {
        PropsColumns {
            keys: key.then(|| Keys::with_capacity(rows)),
            headers: headers.then(|| Headers::with_capacity(rows)),
        }
    }

    /// Adds the properties of `rec`; on an error, nothing.
    fn push(&mut self, rec: &Found, map: &Mapping) -> Result<()> {
        let range = rec.props_range();
        let block = map.bytes(range.start, range.end);
        if let Some(keys) = &mut self.keys {
            keys.push(block, rec.offset)?;
        }
        if let Some(headers) = &mut self.headers {
            if let Err(e) = headers.push(block, rec.offset) {
                if let Some(keys) = &mut self.keys {
                    keys.pop();
                }
                return Err(e);
            }
        }
        Ok(())
    }

    /// Takes back the last record pushed.
    fn pop(&mut self) {
        if let Some(keys) = &mut self.keys {
            keys.pop();
        }
        if let Some(headers) = &mut self.headers {
            headers.pop();
        }
    }
}

/// A record's properties that do not parse: a checked read refuses such a record before (its
/// check parses them), so this is a bug or a block changed under the map.
fn unparsed(offset: u64) -> Error {
    Error::corruption(
        None,
        Some(offset),
        "record properties (key, headers) that do not parse, under a valid CRC",
    )
}

/// The end of a copied column's values as an Arrow `i32` offset.
fn end_of(len: usize, offset: u64, what: &str) -> Result<i32> {
    i32::try_from(len).map_err(|_| {
        Error::InvalidArgument(format!(
            "the {what} of the batch reach {len} bytes at the record at offset {offset}: more \
             than an Arrow {what} column holds (< 2 GiB per batch); read with a lower max_bytes"
        ))
    })
}

/// The `key` column: `binary`, null for a record without a key.
struct Keys {
    data: Vec<u8>,
    ends: Vec<i32>,
    nulls: NullBufferBuilder,
}

impl Default for Keys {
    fn default() -> Self {
        Keys::with_capacity(0)
    }
}

impl Keys {
    fn with_capacity(rows: usize) -> Self {
        let mut ends = Vec::with_capacity(rows + 1);
        ends.push(0);
        Keys {
            data: Vec::new(),
            ends,
            nulls: NullBufferBuilder::new(rows),
        }
    }

    fn push(&mut self, block: &[u8], offset: u64) -> Result<()> {
        match props::key_of(block).ok_or_else(|| unparsed(offset))? {
            Some(key) => {
                let end = end_of(self.data.len() + key.len(), offset, "keys")?;
                self.data.extend_from_slice(key);
                self.ends.push(end);
                self.nulls.append_non_null();
            }
            None => {
                self.ends.push(self.ends.last().copied().unwrap_or(0));
                self.nulls.append_null();
            }
        }
        Ok(())
    }

    fn pop(&mut self) {
        if self.ends.len() > 1 {
            self.ends.pop();
            let end = self.ends.last().copied().unwrap_or(0);
            self.data.truncate(end as usize);
            self.nulls.truncate(self.ends.len() - 1);
        }
    }

    fn finish(mut self) -> Result<BinaryArray> {
        let ends = OffsetBuffer::new(ScalarBuffer::from(self.ends));
        BinaryArray::try_new(ends, Buffer::from_vec(self.data), self.nulls.finish())
            .map_err(arrow_bug)
    }
}

/// The `headers` column: `list<struct<name: utf8, value: binary>>`, empty lists for records
/// without headers.
struct Headers {
    /// Where each record's headers end, counted in headers.
    lists: Vec<i32>,
    names: Vec<u8>,
    name_ends: Vec<i32>,
    values: Vec<u8>,
    value_ends: Vec<i32>,
}

impl Default for Headers {
    fn default() -> Self {
        Headers::with_capacity(0)
    }
}

impl Headers {
    fn with_capacity(rows: usize) -> Self {
        let mut lists = Vec::with_capacity(rows + 1);
        lists.push(0);
        Headers {
            lists,
            names: Vec::new(),
            name_ends: vec![0],
            values: Vec::new(),
            value_ends: vec![0],
        }
    }

    fn push(&mut self, block: &[u8], offset: u64) -> Result<()> {
        let (names, values) = (self.name_ends.len(), self.value_ends.len());
        let mut failed = None;
        let parsed = props::find_header(block, |name, value| {
            let ends = (
                end_of(self.names.len() + name.len(), offset, "header names"),
                end_of(self.values.len() + value.len(), offset, "header values"),
            );
            match ends {
                (Ok(n), Ok(v)) => {
                    self.names.extend_from_slice(name);
                    self.name_ends.push(n);
                    self.values.extend_from_slice(value);
                    self.value_ends.push(v);
                    false
                }
                (Err(e), _) | (_, Err(e)) => {
                    failed = Some(e);
                    true
                }
            }
        });
        let failed = match parsed {
            None => Some(unparsed(offset)),
            Some(_) => failed,
        };
        let count = self.name_ends.len() - 1;
        let end = i32::try_from(count).map_err(|_| Error::Internal("2^31 headers".into()));
        match (failed, end) {
            (None, Ok(end)) => {
                self.lists.push(end);
                Ok(())
            }
            (Some(e), _) | (None, Err(e)) => {
                self.truncate_to(names, values);
                Err(e)
            }
        }
    }

    /// Drops the headers past the first `names - 1` (and values).
    fn truncate_to(&mut self, names: usize, values: usize) {
        self.name_ends.truncate(names);
        self.value_ends.truncate(values);
        let (n, v) = (
            self.name_ends.last().copied().unwrap_or(0),
            self.value_ends.last().copied().unwrap_or(0),
        );
        self.names.truncate(n as usize);
        self.values.truncate(v as usize);
    }

    fn pop(&mut self) {
        if self.lists.len() > 1 {
            self.lists.pop();
            let headers = self.lists.last().copied().unwrap_or(0) as usize;
            self.truncate_to(headers + 1, headers + 1);
        }
    }

    fn finish(self) -> Result<ListArray> {
        let ends = |v: Vec<i32>| OffsetBuffer::new(ScalarBuffer::from(v));
        // Names are UTF-8: a checked read parsed them as such (checked again here).
        let names = StringArray::try_new(ends(self.name_ends), Buffer::from_vec(self.names), None)
            .map_err(arrow_bug)?;
        let values =
            BinaryArray::try_new(ends(self.value_ends), Buffer::from_vec(self.values), None)
                .map_err(arrow_bug)?;
        let headers = StructArray::try_new(
            header_fields(),
            vec![Arc::new(names) as ArrayRef, Arc::new(values)],
            None,
        )
        .map_err(arrow_bug)?;
        ListArray::try_new(header_item(), ends(self.lists), Arc::new(headers), None)
            .map_err(arrow_bug)
    }
}

fn arrow_bug(e: arrow_schema::ArrowError) -> Error {
    Error::Internal(format!("building a record batch: {e}"))
}

/// A `binary_view` column whose data buffers are windows of the mapped segments.
#[derive(Default)]
struct Views {
    views: Vec<u128>,
    /// One data buffer per run of records in one map: the map, and the window `[base, end)`.
    windows: Vec<(Arc<Mapping>, usize, usize)>,
}

impl Views {
    fn push(&mut self, rec: &Found, map: &Arc<Mapping>) -> Result<()> {
        let body = rec.body_range();
        if u32::try_from(body.len()).is_err() {
            return Err(Error::Internal(format!(
                "a body of {} bytes in a view column",
                body.len()
            )));
        }
        let fits = |w: &(Arc<Mapping>, usize, usize)| {
            Arc::ptr_eq(&w.0, map) && body.start >= w.1 && body.start - w.1 <= u32::MAX as usize
        };
        if !self.windows.last().is_some_and(fits) {
            self.windows.push((Arc::clone(map), body.start, body.end));
        }
        let index = self.windows.len() - 1;
        let window = &mut self.windows[index];
        window.2 = window.2.max(body.end);
        let offset = (body.start - window.1) as u32;
        let bytes = map.bytes(body.start, body.end);
        self.views.push(make_view(bytes, index as u32, offset));
        Ok(())
    }

    fn finish(self) -> Result<BinaryViewArray> {
        let buffers: Vec<Buffer> = self
            .windows
            .into_iter()
            .map(|(map, base, end)| map_window(map, base, end))
            .collect();
        BinaryViewArray::try_new(ScalarBuffer::from(self.views), buffers, None).map_err(arrow_bug)
    }
}

/// The bytes `[base, end)` of `map` as an Arrow buffer that owns (a reference to) the map.
fn map_window(map: Arc<Mapping>, base: usize, end: usize) -> Buffer {
    let (ptr, len) = {
        let window = map.bytes(base, end);
        (NonNull::from(window).cast::<u8>(), window.len())
    };
    // SAFETY: `window` lies inside the live map (`Mapping::bytes` checks it); the buffer holds an
    // `Arc` of the map, which is unmapped only when the last reference goes, and segment files
    // are never truncated, so every page stays backed. The bytes are published records, never
    // written again: sharing them read-only is sound.
    unsafe { Buffer::from_custom_allocation(ptr, len, map) }
}
