//! A record batch as Java reads it: the addresses of its Arrow buffers, in a `long[]`.
//!
//! `[rows, then SLOTS longs per column, in the order the reader was asked for]`:
//!
//! | column | slots |
//! |---|---|
//! | `offset`, `segment` | int64 values |
//! | `timestamp` | int64 milliseconds (Java scales them to Spark's microseconds) |
//! | `body` | `binary_view` views (16 bytes a row), the count of data buffers, the address of an array of their addresses |
//! | `key` | int32 offsets, values, validity bitmap (0: no null), the bitmap's first bit |
//! | `headers` | the list's int32 offsets; `name`'s int32 offsets and UTF-8 values; `value`'s int32 offsets and values |
//!
//! Unused slots are 0. Every address stays valid while the batch lives (see `mod.rs`).

use arrow_array::cast::AsArray;
use arrow_array::types::{Int64Type, TimestampMillisecondType};
use arrow_array::{Array, RecordBatch};

use crate::arrow::Column;
use crate::error::{Error, Result};

/// Longs per column in a description.
pub(super) const SLOTS: usize = 5;

/// The code Java gives each column (`io.rmqlog.spark.Columns`).
pub(super) fn column(code: i64) -> Result<Column> {
    usize::try_from(code)
        .ok()
        .and_then(|i| Column::ALL.get(i).copied())
        .ok_or_else(|| Error::InvalidArgument(format!("unknown column code {code}")))
}

/// The address ranges of `batch`'s body buffers: the mapped segments Java copies bodies from.
pub(super) fn mapped(batch: &RecordBatch, columns: &[Column]) -> Vec<(usize, usize)> {
    let Some(i) = columns.iter().position(|c| matches!(c, Column::Body)) else {
        return Vec::new();
    };
    let views = batch.column(i).as_binary_view();
    views
        .data_buffers()
        .iter()
        .map(|b| (b.as_ptr() as usize, b.len()))
        .collect()
}

/// Describes `batch`, whose columns are `columns`; `body_buffers` receives the addresses of the
/// body column's data buffers (the description points at it: keep it with the batch).
pub(super) fn describe(
    batch: &RecordBatch,
    columns: &[Column],
    body_buffers: &mut Vec<i64>,
) -> Result<Vec<i64>> {
    let mut out = Vec::with_capacity(1 + SLOTS * columns.len());
    out.push(batch.num_rows() as i64);
    body_buffers.clear();
    for (i, c) in columns.iter().enumerate() {
        let array = batch.column(i);
        let mut slots = [0i64; SLOTS];
        match c {
            Column::Offset | Column::Segment => {
                slots[0] = addr(array.as_primitive::<Int64Type>().values().as_ptr());
            }
            Column::Timestamp => {
                let ms = array.as_primitive::<TimestampMillisecondType>();
                slots[0] = addr(ms.values().as_ptr());
            }
            Column::Body => {
                let views = array.as_binary_view();
                body_buffers.extend(views.data_buffers().iter().map(|b| addr(b.as_ptr())));
                slots[0] = addr(views.views().as_ptr());
                slots[1] = body_buffers.len() as i64;
                slots[2] = addr(body_buffers.as_ptr());
            }
            Column::Key => {
                let keys = array.as_binary::<i32>();
                slots[0] = addr(keys.value_offsets().as_ptr());
                slots[1] = addr(keys.values().as_ptr());
                if let Some(nulls) = keys.nulls().filter(|n| n.null_count() > 0) {
                    slots[2] = addr(nulls.buffer().as_ptr());
                    slots[3] = nulls.offset() as i64;
                }
            }
            Column::Headers => {
                let list = array.as_list::<i32>();
                let items = list.values().as_struct();
                let names = items.column(0).as_string::<i32>();
                let values = items.column(1).as_binary::<i32>();
                slots = [
                    addr(list.value_offsets().as_ptr()),
                    addr(names.value_offsets().as_ptr()),
                    addr(names.values().as_ptr()),
                    addr(values.value_offsets().as_ptr()),
                    addr(values.values().as_ptr()),
                ];
            }
        }
        out.extend_from_slice(&slots);
    }
    Ok(out)
}

fn addr<T>(p: *const T) -> i64 {
    p as usize as i64
}
