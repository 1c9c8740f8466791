//! What a columnar read produces: which columns, in which order, and how bodies are laid out.

use std::sync::Arc;

use arrow_schema::{DataType, Field, FieldRef, Fields, Schema, SchemaRef, TimeUnit};

use crate::error::{Error, Result};

/// One column of a record batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Column {
    /// `offset`: the record's physical offset, `int64`.
    Offset,
    /// `timestamp`: the store timestamp, `timestamp[ms, UTC]`.
    Timestamp,
    /// `body`: `binary_view` or `binary` (see [`BodyLayout`]).
    Body,
    /// `segment`: the start offset of the record's segment, `int64`.
    Segment,
    /// `key`: the record's key, `binary`, null for a record without one (an empty key is an
    /// empty value). Copied into the batch.
    Key,
    /// `headers`: the record's headers in order, `list<struct<name: utf8, value: binary>>`, an
    /// empty list for a record without any (never null). Copied into the batch.
    Headers,
}

impl Column {
    /// Every column, in the order of a full read.
    pub const ALL: [Column; 6] = [
        Column::Offset,
        Column::Timestamp,
        Column::Body,
        Column::Segment,
        Column::Key,
        Column::Headers,
    ];

    /// The column's name in a schema.
    pub fn name(self) -> &'static str {
        match self {
            Column::Offset => "offset",
            Column::Timestamp => "timestamp",
            Column::Body => "body",
            Column::Segment => "segment",
            Column::Key => "key",
            Column::Headers => "headers",
        }
    }

    /// The column named `name`.
    pub fn parse(name: &str) -> Result<Column> {
        Column::ALL
            .into_iter()
            .find(|c| c.name() == name)
            .ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "unknown column {name:?}; the columns are {}",
                    names(&Column::ALL)
                ))
            })
    }
}

fn names(columns: &[Column]) -> String {
    let quoted: Vec<String> = columns.iter().map(|c| format!("{:?}", c.name())).collect();
    quoted.join(", ")
}

/// How the `body` column holds the bodies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BodyLayout {
    /// `binary_view`: views into the mapped segments themselves, no copy. The batch keeps the
    /// maps alive (past `close()` and past the deletion of the files).
    #[default]
    View,
    /// `binary`: the bodies copied into one buffer per batch, for consumers without view types.
    Binary,
}

impl BodyLayout {
    /// The layout named `name` (`"view"` or `"binary"`).
    pub fn parse(name: &str) -> Result<BodyLayout> {
        match name {
            "view" => Ok(BodyLayout::View),
            "binary" => Ok(BodyLayout::Binary),
            _ => Err(Error::InvalidArgument(format!(
                "unknown body layout {name:?}; expected \"view\" (binary_view, no copy) or \
                 \"binary\" (copied)"
            ))),
        }
    }
}

/// The shape of the batches of a columnar read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchOptions {
    /// The columns, in order (each at most once; none is allowed: batches of row counts only).
    pub columns: Vec<Column>,
    /// The `body` column's layout.
    pub body: BodyLayout,
    /// At most this many records per batch (at least 1).
    pub max_records: usize,
    /// A batch ends before the record that would take its bodies, keys and headers past this
    /// many bytes (a batch holds at least one record). They count whether or not their columns
    /// are read, so a range gives the same batches for any columns. With
    /// [`BodyLayout::Binary`], a `key` or a `headers` column (copied columns), at most
    /// `i32::MAX`.
    pub max_bytes: usize,
}

impl Default for BatchOptions {
    fn default() -> Self {
        BatchOptions {
            columns: vec![Column::Offset, Column::Timestamp, Column::Body],
            body: BodyLayout::View,
            max_records: 65_536,
            max_bytes: 64 << 20,
        }
    }
}

impl BatchOptions {
    /// Checks the options; the error says what is accepted.
    pub fn validate(&self) -> Result<()> {
        for (i, c) in self.columns.iter().enumerate() {
            if self.columns[..i].contains(c) {
                return Err(Error::InvalidArgument(format!(
                    "column {:?} is named twice; each of {} at most once",
                    c.name(),
                    names(&Column::ALL)
                )));
            }
        }
        if self.max_records == 0 || self.max_bytes == 0 {
            return Err(Error::InvalidArgument(format!(
                "max_records and max_bytes must be at least 1, got {} and {}",
                self.max_records, self.max_bytes
            )));
        }
        Ok(())
    }

    /// The limits a batch is cut by, worked out once per batch.
    pub(crate) fn limits(&self) -> Limits {
        let copied = self.body == BodyLayout::Binary || self.wants_props();
        Limits {
            max_records: self.max_records,
            max_bytes: match copied {
                true => self.max_bytes.min(i32::MAX as usize),
                false => self.max_bytes,
            },
        }
    }

    /// The Arrow schema of the batches.
    pub fn schema(&self) -> SchemaRef {
        let fields: Vec<Field> = self
            .columns
            .iter()
            .map(|&c| Field::new(c.name(), self.data_type(c), c == Column::Key))
            .collect();
        Arc::new(Schema::new(fields))
    }

    fn data_type(&self, column: Column) -> DataType {
        match (column, self.body) {
            (Column::Offset | Column::Segment, _) => DataType::Int64,
            (Column::Timestamp, _) => {
                DataType::Timestamp(TimeUnit::Millisecond, Some(Arc::from("UTC")))
            }
            (Column::Body, BodyLayout::View) => DataType::BinaryView,
            (Column::Body, BodyLayout::Binary) => DataType::Binary,
            (Column::Key, _) => DataType::Binary,
            (Column::Headers, _) => DataType::List(header_item()),
        }
    }

    /// Whether the batches need the bodies at all.
    pub(crate) fn wants(&self, column: Column) -> bool {
        self.columns.contains(&column)
    }

    /// Whether the batches read the records' properties (the `key` or `headers` column).
    pub(crate) fn wants_props(&self) -> bool {
        self.wants(Column::Key) || self.wants(Column::Headers)
    }
}

/// The fields of one header in the `headers` column: `name` (utf8) and `value` (binary).
pub(crate) fn header_fields() -> Fields {
    Fields::from(vec![
        Field::new("name", DataType::Utf8, false),
        Field::new("value", DataType::Binary, false),
    ])
}

/// The item of the `headers` list: a header, never null.
pub(crate) fn header_item() -> FieldRef {
    Arc::new(Field::new_list_field(
        DataType::Struct(header_fields()),
        false,
    ))
}

/// What ends a batch: its records, and the bytes they weigh (see [`BatchOptions::max_bytes`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    max_records: usize,
    max_bytes: usize,
}

/// What a record with a body of `body_len` bytes and properties (key, headers) of `props_len`
/// weighs against `max_bytes`.
pub(crate) fn weight(body_len: usize, props_len: usize) -> usize {
    body_len + props_len
}

impl Limits {
    /// Whether a record of `weight` still fits a batch of `rows` records weighing `bytes` (a
    /// first record always does).
    pub(crate) fn fits(&self, rows: usize, bytes: usize, weight: usize) -> bool {
        rows == 0 || (rows < self.max_records && bytes + weight <= self.max_bytes)
    }
}
