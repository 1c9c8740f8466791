//! Arrow in and out: a log's records as record batches built in Rust (no per-record object for
//! a caller), and appends from an Arrow binary array, or a struct array of bodies with their
//! keys and headers.

mod bodies;
mod build;
mod columns;
mod messages;
mod parallel;
mod reader;

pub use bodies::{bodies, chunk_bodies};
pub use columns::{BatchOptions, BodyLayout, Column};
pub use messages::{chunk_rows, Rows};
pub use parallel::{default_threads, ParallelReader, MAX_THREADS};
pub use reader::BatchReader;
