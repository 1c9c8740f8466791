//! # rmqlog
//!
//! Apache RocketMQ's CommitLog storage as a Rust library: fixed-size memory-mapped segment files
//! named by their 20-digit start offset, records with CRCs, O(1) offset lookup with a fallback
//! search, the log spread over several directories (RocketMQ RIP-7), and crash recovery that never
//! loses an acknowledged record.
//!
//! ```
//! use rmqlog::{CommitLog, FlushMode, Options};
//!
//! # fn main() -> rmqlog::Result<()> {
//! let d0 = tempfile::tempdir().unwrap();
//! let d1 = tempfile::tempdir().unwrap();
//! let opts = Options::default().segment_size(64 * 1024).flush(FlushMode::Async);
//! let log = CommitLog::open(&[d0.path(), d1.path()], opts)?;
//!
//! let first = log.append(b"hello")?;
//! let offsets = log.append_batch(&[b"a".as_slice(), b"b".as_slice()])?;
//! assert_eq!(&*log.read(first)?, b"hello");
//! for record in log.scan(None, None)? {
//!     let record = record?;
//!     println!("{} {:?}", record.offset(), &*record);
//! }
//! assert_eq!(log.read(offsets[1])?.next_offset(), log.max_offset()?);
//! log.close()?;
//! # Ok(())
//! # }
//! ```
//!
//! The on-disk format is described in `docs/format.md`, the guarantees in `docs/recovery.md`.

// The parts, roughly bottom to top (README.md, "Layout of the code"); each folder's mod.rs says
// what it holds. `log` is the facade over them all.
mod clock;
mod error;
mod failpoint;
mod interrupt;
mod sync;

mod storage;

mod options;
mod state;

mod background;
mod tier;

mod open;
mod shared;
mod write;

#[cfg(feature = "arrow")]
pub mod arrow;
mod consumers;
mod maintain;
mod read;

mod log;

#[cfg(feature = "python")]
mod python;

#[cfg(feature = "jvm")]
mod jvm;

pub use crate::consumers::consumer::{
    Consumer, ConsumerOptions, Lag, OnLoss, Start, FILTER_SKIP_BYTES, FILTER_SKIP_RECORDS,
    LAG_WALK_BYTES,
};
pub use crate::consumers::dead_letter::{parse as parse_dead_letter, Origin as DeadLetterOrigin};
pub use crate::consumers::{ConsumerInfo, MAX_NAME_LEN, POSITIONS_FILE};
pub use crate::error::{ClaimNow, Error, LostClaim, Result};
pub use crate::log::{CommitLog, SegmentInfo};
pub use crate::maintain::mover::Moved;
pub use crate::maintain::verify::{BadRange, Verified};
pub use crate::options::{
    EventFn, FlushMode, Options, PerDir, PlaceFn, StoreSetting, Strategy, TierOptions,
    SEGMENT_ALIGN,
};
pub use crate::read::filter::Filter;
pub use crate::read::reader::{Follow, RecordRef, Scan};
pub use crate::state::dirs::{DirEvent, DirInfo, DirState};
pub use crate::state::stats::StatsSnapshot;
pub use crate::storage::props::{Message, MAX_ID_LEN, MAX_KEY_LEN};
pub use crate::storage::record::{Format as RecordFormat, FILLER_LEN, HEADER_LEN};
pub use crate::storage::segment::{Mapping, MAX_OFFSET};
pub use crate::storage::settings::{TierPolicy, WriterSettings};
pub use crate::tier::{tier_stores, TierStatus, SPLIT_EVERY};
pub use crate::write::dedup::Appended;

/// The optional cargo features this build was compiled with, of `arrow` and `tier` (the Python
/// extension reports them as `rmqlog.FEATURES`). The Arrow API exists only with `arrow`; a call
/// that needs a missing `tier` (a tier option, a tier URL, a store that ships to a tier) fails
/// with [`Error::FeatureMissing`].
pub const FEATURES: &[&str] = &[
    #[cfg(feature = "arrow")]
    "arrow",
    #[cfg(feature = "tier")]
    "tier",
];
