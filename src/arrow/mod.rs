//! Arrow in and out: a log's records as record batches built in Rust (no per-record object for
//! a caller), and appends from an Arrow binary array.

mod bodies;
mod build;
mod columns;
mod read_ahead;
mod reader;

pub use bodies::{bodies, chunk_bodies};
pub use columns::{BatchOptions, BodyLayout, Column};
pub use read_ahead::ReadAhead;
pub use reader::BatchReader;
