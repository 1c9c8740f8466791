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

mod active_file;
mod append_lock;
#[cfg(feature = "arrow")]
pub mod arrow;
mod background;
mod checkpoint;
mod cleaner;
mod consumer;
mod control;
mod crc_line;
mod dirs;
mod error;
mod events;
mod failpoint;
mod flusher;
mod follow;
mod fs;
mod futex;
mod identity;
mod interrupted_move;
mod layout;
mod listing;
mod locate;
mod lock;
mod log;
mod mapping;
mod missing;
mod mover;
mod open;
mod options;
mod paths;
mod placement;
mod positions;
mod reader;
mod record;
mod recovery;
mod remote;
mod roll;
mod segment;
mod segments;
mod settings;
mod shared;
mod state;
mod stats;
mod sync;

mod tail_hint;
mod tier;
mod verify;
mod wait;
mod warmer;
mod writer;

#[cfg(feature = "python")]
mod python;

pub use crate::consumer::{Consumer, ConsumerOptions, Lag, OnLoss, Start};
pub use crate::dirs::{DirEvent, DirInfo, DirState};
pub use crate::error::{Error, Result};
pub use crate::log::{CommitLog, SegmentInfo};
pub use crate::mover::Moved;
pub use crate::options::{
    EventFn, FlushMode, Options, PerDir, PlaceFn, Strategy, TierOptions, SEGMENT_ALIGN,
};
pub use crate::positions::{ConsumerInfo, MAX_NAME_LEN, POSITIONS_FILE};
pub use crate::reader::{Follow, RecordRef, Scan};
pub use crate::record::{Format as RecordFormat, FILLER_LEN, HEADER_LEN};
pub use crate::segment::{Mapping, MAX_OFFSET};
pub use crate::settings::{TierPolicy, WriterSettings};
pub use crate::stats::StatsSnapshot;
pub use crate::tier::TierStatus;
pub use crate::verify::BadRange;
