//! Builds one record batch from validated records: the one columnar code path of the crate
//! (Python's `scan_batches`, the Spark sources, `to_arrow`).

use std::ptr::NonNull;
use std::sync::Arc;

use arrow_array::builder::make_view;
use arrow_array::{
    ArrayRef, BinaryArray, BinaryViewArray, Int64Array, RecordBatch, RecordBatchOptions,
    TimestampMillisecondArray,
};
use arrow_buffer::{Buffer, OffsetBuffer, ScalarBuffer};
use arrow_schema::SchemaRef;

use super::columns::{BatchOptions, BodyLayout, Column};
use crate::error::{Error, Result};
use crate::read::reader::Found;
use crate::storage::segment::Mapping;

/// The columns of one batch, filled a record at a time.
pub(super) struct BatchBuilder<'a> {
    opts: &'a BatchOptions,
    rows: usize,
    body_bytes: usize,
    offsets: Vec<i64>,
    timestamps: Vec<i64>,
    segments: Vec<i64>,
    views: Views,
    data: Vec<u8>,
    value_offsets: Vec<i32>,
}

impl<'a> BatchBuilder<'a> {
    /// `body_bytes`: the bodies' size this batch expects (the last batch's, or what a planner
    /// counted), reserved at once for a copied body column.
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
        self.opts.fits(self.rows, self.body_bytes, rec.body_len)
    }

    /// Adds `rec` (the caller checked [`BatchBuilder::fits`]).
    pub(super) fn push(&mut self, rec: &Found, map: &Arc<Mapping>) -> Result<()> {
        // The one push that can fail comes first: a refused record leaves every column as it was.
        if self.opts.wants(Column::Body) {
            match self.opts.body {
                BodyLayout::View => self.views.push(rec, map)?,
                BodyLayout::Binary => self.push_copy(rec, map)?,
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
        self.body_bytes += rec.body_len;
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
            };
            arrays.push(array);
        }
        let rows = RecordBatchOptions::new().with_row_count(Some(self.rows));
        RecordBatch::try_new_with_options(Arc::clone(schema), arrays, &rows).map_err(arrow_bug)
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
