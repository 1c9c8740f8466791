//! The JVM bridge: the native half of the Spark DataSource V2 reader in `jvm/` (Java), loaded into
//! the driver and every executor by `io.rmqlog.spark.Native`. Built with the `jvm` feature as a
//! shared library of its own, the workspace's crate `jvm/native` (`make jar` packs it into the
//! jar): the Python extension cannot load into a JVM (its PyO3 code needs libpython's symbols).
//!
//! # Handles
//! Java holds two kinds of native object as `long` handles:
//!
//! | handle | made by | freed by | holds |
//! |---|---|---|---|
//! | log | `open` | `close` | a read-only [`CommitLog`](crate::CommitLog) (no lock, nothing written) |
//! | reader | `openReader` | `closeReader` | a [`BatchReader`](crate::arrow::BatchReader) over one span, and its last batch |
//!
//! Each Java owner frees its handle once and never uses it after (`io.rmqlog.spark.NativeLog`
//! and `NativeReader` zero the field first). A reader borrows nothing from its log: closing the
//! log first only ends the reader's next call with an error.
//!
//! # Batches in place
//! `next` returns the addresses of the Arrow buffers of the reader's next batch (`columns.rs`
//! says the layout); Java's column vectors read them with `Platform`'s unsafe loads. The batch
//! stays alive until the reader's next `next` or its `closeReader`: Spark's contract for a
//! `ColumnarBatch` (valid until the following `PartitionReader.next()`). The body column is a
//! `binary_view` column: views into the mapped segments, no copy; the batch holds the mappings,
//! so its pages stay mapped after the segment is deleted or moved.
//!
//! # Truncated files
//! A segment file truncated by another program under a read faults the mapping (SIGBUS). The
//! bridge takes that fault in its own calls and fails them with `CorruptionError` instead of
//! letting the JVM die (`fault.rs`).
//!
//! # Errors
//! A failed call throws `io.rmqlog.spark.NativeException` whose message is the error's kind (the
//! Python exception it maps to: `StoreNotFoundError`), a unit separator (U+001F) and its text;
//! Java acts on some kinds (`OffsetOutOfRangeError` below the head: `fail_on_data_loss`). A panic
//! is caught at the boundary and thrown as `RmqlogError`: no unwind crosses into the JVM.

mod columns;
mod env;
mod exports;
mod fault;
mod plan;
