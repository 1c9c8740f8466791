//! Arrow in and out: a log's records as record batches built in Rust (no per-record object for
//! a caller), and appends from an Arrow binary array.

mod bodies;
mod build;
mod columns;
mod parallel;
mod reader;

pub use bodies::{bodies, chunk_bodies};
pub use columns::{BatchOptions, BodyLayout, Column};
pub use parallel::{default_threads, ParallelReader, MAX_THREADS};
pub use reader::BatchReader;
