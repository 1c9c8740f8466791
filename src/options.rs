//! Options of a commit log, validated once at open.

use std::time::Duration;

use crate::error::{Error, Result};
use crate::record::HEADER_LEN;

/// Page granularity that segment sizes must respect.
pub const SEGMENT_ALIGN: u64 = 4096;

/// When appended bytes reach stable storage.
///
/// Whatever the mode, a record whose `append` returned survives a crash of the process (the bytes are
/// in the OS page cache). The modes differ in what survives a power loss or an OS crash.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FlushMode {
    /// A background thread syncs every `flush_interval`. After a power loss, at most the records
    /// appended during the last interval (everything at or above `flushed_offset`) are lost.
    #[default]
    Async,
    /// `append` returns only after its bytes are durable (msync). Concurrent appends group-commit:
    /// one sync covers every record published before it started.
    Sync,
    /// Left to the OS; only `flush()` and `close()` sync.
    None,
}

impl FlushMode {
    /// Parses `"async"`, `"sync"` or `"none"`.
    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "async" => Ok(FlushMode::Async),
            "sync" => Ok(FlushMode::Sync),
            "none" => Ok(FlushMode::None),
            other => Err(Error::invalid(format!(
                "unknown flush mode {other:?}; accepted: \"async\", \"sync\", \"none\""
            ))),
        }
    }
}

/// How a directory is chosen for each new segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Strategy {
    /// RocketMQ RIP-7: segment number `start / segment_size` modulo the number of writable
    /// directories, in the order given.
    #[default]
    RoundRobin,
}

impl Strategy {
    /// Parses a strategy name.
    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "round_robin" => Ok(Strategy::RoundRobin),
            other => Err(Error::invalid(format!(
                "unknown placement strategy {other:?}; accepted: \"round_robin\""
            ))),
        }
    }
}

/// Options of [`CommitLog::open`](crate::CommitLog::open).
#[derive(Debug, Clone)]
pub struct Options {
    /// Size of new segment files, a multiple of 4096. Defaults to 1 GiB.
    pub segment_size: u64,
    /// Placement of new segments. Defaults to [`Strategy::RoundRobin`].
    pub strategy: Strategy,
    /// Open without the writer lock; never writes, truncates or deletes. Defaults to `false`.
    pub read_only: bool,
    /// Durability of appends. Defaults to [`FlushMode::Async`].
    pub flush: FlushMode,
    /// Period of the background flush in [`FlushMode::Async`]. Defaults to 500 ms.
    pub flush_interval: Duration,
    /// Largest body accepted by `append` (a body must also fit in one segment with its header).
    /// Defaults to 4 MiB.
    pub max_message_size: u32,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            segment_size: 1 << 30,
            strategy: Strategy::RoundRobin,
            read_only: false,
            flush: FlushMode::Async,
            flush_interval: Duration::from_millis(500),
            max_message_size: 4 << 20,
        }
    }
}

impl Options {
    /// Sets [`Options::segment_size`].
    #[must_use]
    pub fn segment_size(mut self, bytes: u64) -> Self {
        self.segment_size = bytes;
        self
    }

    /// Sets [`Options::strategy`].
    #[must_use]
    pub fn strategy(mut self, strategy: Strategy) -> Self {
        self.strategy = strategy;
        self
    }

    /// Sets [`Options::read_only`].
    #[must_use]
    pub fn read_only(mut self, read_only: bool) -> Self {
        self.read_only = read_only;
        self
    }

    /// Sets [`Options::flush`].
    #[must_use]
    pub fn flush(mut self, flush: FlushMode) -> Self {
        self.flush = flush;
        self
    }

    /// Sets [`Options::flush_interval`].
    #[must_use]
    pub fn flush_interval(mut self, interval: Duration) -> Self {
        self.flush_interval = interval;
        self
    }

    /// Sets [`Options::max_message_size`].
    #[must_use]
    pub fn max_message_size(mut self, bytes: u32) -> Self {
        self.max_message_size = bytes;
        self
    }

    /// Checks every option; the error says what was wrong and what is accepted.
    pub fn validate(&self) -> Result<()> {
        if self.segment_size < SEGMENT_ALIGN || !self.segment_size.is_multiple_of(SEGMENT_ALIGN) {
            return Err(Error::invalid(format!(
                "segment_size must be a multiple of {SEGMENT_ALIGN} and at least {SEGMENT_ALIGN}, \
                 got {}",
                self.segment_size
            )));
        }
        if self.segment_size > 1 << 40 {
            return Err(Error::invalid(format!(
                "segment_size must be at most 1 TiB (1099511627776), got {}",
                self.segment_size
            )));
        }
        if self.flush_interval.is_zero() {
            return Err(Error::invalid("flush_interval_ms must be at least 1"));
        }
        if self.max_message_size as usize > u32::MAX as usize - HEADER_LEN {
            return Err(Error::invalid(format!(
                "max_message_size must be at most {}, got {}",
                u32::MAX as usize - HEADER_LEN,
                self.max_message_size
            )));
        }
        Ok(())
    }
}
