//! The write path: an append (`writer.rs`), the segments it needs (`roll.rs`) in the directory
//! placement picks (`placement.rs`), the active segment's file beside its map (`active_file.rs`),
//! warming the pages ahead of the writer (`warmer.rs`), and making appends durable: syncs, group
//! commit and the flusher thread (`flusher.rs`). Several processes appending to one store go
//! through `crate::shared`.

pub(crate) mod active_file;
pub(crate) mod flusher;
pub(crate) mod keys;
pub(crate) mod placement;
pub(crate) mod roll;
pub(crate) mod warmer;
pub(crate) mod writer;
