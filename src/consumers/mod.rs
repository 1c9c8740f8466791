//! Named consumers: positions in the log that the store keeps for each name, in every writable
//! directory ([`positions`]), one pair of checksummed slots per name ([`slot`]); a
//! [`Consumer`] polls from its position, waiting for the next records, and commits durably. The
//! opens sharing a name claim records in the name's table of [`claims`].

mod claims;
mod consumer;
mod positions;
mod slot;

pub(crate) use consumer::{drop_name, list, retention_holder};
pub use consumer::{Consumer, ConsumerInfo, ConsumerOptions, Lag, OnLoss, Start};
pub use positions::FILE as POSITIONS_FILE;
pub use slot::MAX_NAME_LEN;
