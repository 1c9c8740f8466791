//! Maintenance that runs while the log is written: retention and the cleaner thread
//! (`cleaner.rs`), moving sealed segments between directories (`mover.rs`), and `verify`, the full
//! CRC walk that changes nothing (`verify.rs`).

pub(crate) mod cleaner;
pub(crate) mod mover;
pub(crate) mod verify;
