//! The write path: an append (`writer.rs`), the segments it needs (`roll.rs`) in the directory
//! placement picks (`placement.rs`), the active segment's file beside its map (`active_file.rs`),
//! warming the pages ahead of the writer (`warmer.rs`), and making appends durable: syncs, group
//! commit and the flusher thread (`flusher.rs`). Beside it: the key index an append keeps
//! (`keys.rs`) and the de-duplication of appends with message ids (`dedup.rs`). Several processes
//! appending to one store go through `crate::shared`.

pub(crate) mod active_file;
pub(crate) mod dedup;
pub(crate) mod flusher;
pub(crate) mod keys;
pub(crate) mod placement;
pub(crate) mod roll;
pub(crate) mod warmer;
pub(crate) mod writer;
