//! Named consumers: a position in the log the store keeps, so a consumer resumes where it stopped
//! and retention waits for it (`consumer.rs`: poll, commit, seek, lag; `work.rs`: what the opens
//! of a shared name do with their claims: ack, nack, extend, dead-letter). Where the positions
//! live: each name's committed position in every writable directory ([`file`], one pair of
//! checksummed slots per name: [`slot`]), the claims of the names several opens share
//! ([`claims`]), where dead letters go ([`dead_letter`]), and the names' listing ([`names`]),
//! which the cleaner asks what retention must keep.

pub(crate) mod claims;
pub(crate) mod consumer;
pub(crate) mod dead_letter;
pub(crate) mod file;
pub(crate) mod names;
pub(crate) mod slot;
pub(crate) mod work;

pub use file::FILE as POSITIONS_FILE;
pub use names::ConsumerInfo;
pub use slot::MAX_NAME_LEN;
