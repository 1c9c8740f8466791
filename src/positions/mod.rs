//! Where named consumers live in a store: each name's committed position in every writable
//! directory ([`file`], one pair of checksummed slots per name: [`slot`]), the claims of the
//! names several opens share ([`claims`]), and the names' listing ([`names`]). Below the cleaner,
//! which asks [`names`] what retention must keep; the consumer itself is `crate::consumer`.

pub(crate) mod claims;
pub(crate) mod file;
pub(crate) mod names;
pub(crate) mod slot;

pub use file::FILE as POSITIONS_FILE;
pub use names::ConsumerInfo;
pub use slot::MAX_NAME_LEN;
