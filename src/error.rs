//! The one error type of the crate. Every variant carries the context a user needs to act on it.

use std::io;
use std::path::{Path, PathBuf};

/// Records an open of a shared consumer name had received and lost (see [`Error::ClaimLost`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LostClaim {
    pub from: u64,
    pub to: u64,
    /// Where they are now.
    pub now: ClaimNow,
}

/// Where lost records are now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimNow {
    /// Delivered to another open, in the process with this id.
    Open { pid: u32 },
    /// Handed to the next poll of any open (its claimer lapsed, and no open took them yet).
    Waiting,
    /// Committed (or acknowledged, or dead-lettered) by another open.
    Done,
}

impl std::fmt::Display for LostClaim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "[{}, {}) ", self.from, self.to)?;
        match self.now {
            ClaimNow::Open { pid } => write!(f, "now held by process {pid}"),
            ClaimNow::Waiting => write!(f, "waiting for the next poll"),
            ClaimNow::Done => write!(f, "done by another open"),
        }
    }
}

/// Result alias used throughout the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in a commit log.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A bad option or argument, caught before anything touched the disk.
    #[error("{0}")]
    InvalidArgument(String),

    /// The offset is below `min_offset` or at/after `max_offset`.
    #[error("offset {offset} is out of range: the log holds [{min}, {max})")]
    OffsetOutOfRange { offset: i128, min: u64, max: u64 },

    /// The offset is inside the log but no record starts there.
    #[error("offset {offset} is not the start of a record: {reason}")]
    InvalidOffset { offset: u64, reason: String },

    /// The body is larger than `max_message_size` or than one segment can hold.
    #[error("message of {size} bytes is too large: {limit}")]
    MessageTooLarge { size: usize, limit: String },

    /// No writable directory has room for a new segment.
    #[error("no writable directory has room for a new segment of {needed} bytes ({tried})")]
    DiskFull { needed: u64, tried: String },

    /// The paths name no store: a read-only open (or a tool) pointed at the wrong folder.
    #[error("no rmqlog store at {}{detail}", path.display())]
    StoreNotFound { path: PathBuf, detail: String },

    /// The directories given do not make up the store: one is missing, one belongs to another
    /// store, or one is a copy of another. The message names them and the fix.
    #[error("{0}")]
    Configuration(String),

    /// Another writer holds the store's lock.
    #[error("store is locked by another writer: {path} (open with read_only=True to read it)")]
    StoreLocked { path: PathBuf },

    /// A record or the on-disk layout failed validation.
    #[error("corruption{}{}: {reason}", fmt_path(path), fmt_offset(*offset))]
    Corruption {
        path: Option<PathBuf>,
        offset: Option<u64>,
        reason: String,
    },

    /// A write on a log opened with `read_only`.
    #[error("the log was opened read-only; {0} is not allowed")]
    ReadOnly(&'static str),

    /// Any call on a closed log (or on a log inherited by a forked child process).
    #[error("the log is closed")]
    Closed,

    /// A sync of written data failed earlier; the writer refuses further appends.
    #[error("the writer is poisoned by an earlier failed sync ({cause}); reopen the log")]
    WriterPoisoned { cause: String },

    /// The operation cannot be done in the log's current state (the message says why).
    #[error("{0}")]
    Unsupported(String),

    /// The call needs a cargo feature this build of rmqlog was compiled without (`tier`: object
    /// storage). The wheel has every feature. In a build without `tier`:
    ///
    /// ```
    /// use rmqlog::{CommitLog, Error, Options, TierOptions};
    /// # if cfg!(feature = "tier") { return; } // the example is about a build without it
    ///
    /// let dir = std::env::temp_dir().join(format!("rmqlog-doc-feature-{}", std::process::id()));
    /// let tier = TierOptions::new(format!("file://{}", dir.join("tier").display()));
    /// let opened = CommitLog::open(&[dir.join("store")], Options::default().tier(Some(tier)));
    /// let Err(Error::FeatureMissing { feature, needed_for }) = opened else {
    ///     panic!("expected FeatureMissing")
    /// };
    /// assert_eq!(feature, "tier");
    /// assert!(needed_for.starts_with("the tier \"file://"), "{needed_for}");
    /// assert!(!dir.exists(), "refused before anything was created");
    /// ```
    #[error(
        "{needed_for} needs rmqlog's cargo feature `{feature}`, which this build was compiled \
         without; build it with the feature (cargo: features = [\"{feature}\"]; the wheel \
         `make wheel` builds has it)"
    )]
    FeatureMissing {
        feature: &'static str,
        needed_for: String,
    },

    /// The log would pass [`MAX_OFFSET`](crate::MAX_OFFSET), the largest offset it can hold.
    #[error(
        "the log is full: a new segment at offset {start} would end at {end}, past {limit}, the \
         largest offset rmqlog supports (offsets are signed 64-bit integers in Arrow, Spark and \
         Java); nothing was written"
    )]
    OffsetLimit { start: u64, end: u128, limit: u64 },

    /// A bug in rmqlog: an internal invariant does not hold (nothing was changed).
    #[error("internal error (please report it): {0}")]
    Internal(String),

    /// The cleaner thread failed; cleaning has stopped (appends and reads go on).
    #[error("cleaning has stopped: {cause}")]
    CleanerFailed { cause: String },

    /// The object store of the remote tier failed a request (unreachable, refused, or an object
    /// missing that the manifest lists). Damaged bytes are [`Error::Corruption`] instead.
    #[error("object store {object}: {op}: {reason}")]
    Tier {
        op: &'static str,
        object: String,
        reason: String,
    },

    /// Records a consumer had not committed were deleted (retention, a disk limit,
    /// `truncate_before`) before it read them.
    #[error(
        "consumer {consumer:?} lost records [{from}, {to}): they were deleted before it read them; \
         {}",
        if *moved_on {
            format!("the name goes on from {to}, the earliest record left")
        } else {
            format!("seek to go on (\"earliest\" is {to}, the earliest record left)")
        }
    )]
    DataLoss {
        consumer: String,
        from: u64,
        to: u64,
        /// A shared name moved on past the loss; an exclusive consumer stays until it seeks.
        moved_on: bool,
    },

    /// Records this open of a shared consumer name had received went to another open (their
    /// redelivery timeout passed) before it committed, acknowledged or extended them: its work on
    /// them is repeated elsewhere. The records it still held were committed (acknowledged,
    /// extended) first.
    #[error(
        "consumer {consumer:?}: {} of this open lapsed (their redelivery timeout passed) and went \
         elsewhere before this {what}(): {}; the records it still held were {what_done} (committed \
         position {committed})",
        if lost.len() == 1 { "a claim" } else { "claims" },
        lost.iter().map(ToString::to_string).collect::<Vec<_>>().join(", "),
        what_done = match *what { "in_progress" => "extended", "ack" => "acknowledged", _ => "committed" },
    )]
    ClaimLost {
        consumer: String,
        /// The call: "commit", "ack" or "in_progress".
        what: &'static str,
        lost: Vec<LostClaim>,
        committed: u64,
    },

    /// Another open, in this process or another, holds the consumer name.
    #[error(
        "consumer {name:?} is held elsewhere, in this process or another (by an exclusive open; \
         or, for exclusive=True, by any open): close that open, or use another name"
    )]
    ConsumerBusy { name: String },

    /// A shared writer waited longer than `lock_timeout` for the store's append lock, or a
    /// maintenance call for its maintenance lock: the holder is alive and not letting go (stopped
    /// by SIGSTOP, a debugger or a frozen cgroup; a holder that dies hands the lock over at
    /// once). Nothing was done.
    #[error(
        "the shared writers' {lock} in {} was held longer than lock_timeout ({} ms){}; \
         nothing was {undone} (a holder stopped by SIGSTOP, a debugger or a frozen cgroup keeps \
         it until it runs again)",
        path.display(),
        waited_ms,
        holder.map(|p| format!(" by process {p}")).unwrap_or_default()
    )]
    LockTimeout {
        /// `append lock` or `maintenance lock`.
        lock: &'static str,
        /// `appended` or `changed`.
        undone: &'static str,
        path: PathBuf,
        waited_ms: u64,
        holder: Option<u32>,
    },

    /// A signal interrupted a wait for the append or the maintenance lock (Python: the
    /// handler's exception, such as `KeyboardInterrupt`, is raised instead). Nothing was done.
    #[error("interrupted while waiting for a lock of the store; nothing was done")]
    Interrupted,

    /// An operating-system error, with the file it concerned.
    #[error("{op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

fn fmt_path(path: &Option<PathBuf>) -> String {
    path.as_ref()
        .map(|p| format!(" in {}", p.display()))
        .unwrap_or_default()
}

fn fmt_offset(offset: Option<u64>) -> String {
    offset
        .map(|o| format!(" at offset {o}"))
        .unwrap_or_default()
}

impl Error {
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        Error::Io {
            op,
            path: path.into(),
            source,
        }
    }

    pub(crate) fn corruption(
        path: Option<PathBuf>,
        offset: Option<u64>,
        reason: impl Into<String>,
    ) -> Self {
        Error::Corruption {
            path,
            offset,
            reason: reason.into(),
        }
    }

    #[cfg_attr(not(feature = "tier"), allow(dead_code))]
    pub(crate) fn tier(op: &'static str, object: impl Into<String>, reason: impl ToString) -> Self {
        Error::Tier {
            op,
            object: object.into(),
            reason: reason.to_string(),
        }
    }

    pub(crate) fn invalid(msg: impl Into<String>) -> Self {
        Error::InvalidArgument(msg.into())
    }

    pub(crate) fn config(msg: impl Into<String>) -> Self {
        Error::Configuration(msg.into())
    }

    /// [`Error::FeatureMissing`]: `needed_for` needs the cargo feature `feature`.
    #[cfg_attr(feature = "tier", allow(dead_code))] // only `tier` can be missing at run time
    pub(crate) fn feature_missing(feature: &'static str, needed_for: impl Into<String>) -> Self {
        Error::FeatureMissing {
            feature,
            needed_for: needed_for.into(),
        }
    }

    pub(crate) fn not_found(path: impl Into<PathBuf>, detail: impl Into<String>) -> Self {
        Error::StoreNotFound {
            path: path.into(),
            detail: detail.into(),
        }
    }

    /// Two directories given together that belong to different stores.
    pub(crate) fn different_stores(a: (&Path, &str), b: (&Path, &str)) -> Self {
        Error::config(format!(
            "{} and {} belong to different stores ({} and {}); give the directories of one store",
            a.0.display(),
            b.0.display(),
            a.1,
            b.1
        ))
    }

    /// Whether this is the failure to open a file that no longer exists (a segment moved to
    /// another directory or deleted since the caller's view of the log was taken).
    pub(crate) fn is_not_found(&self) -> bool {
        matches!(self, Error::Io { source, .. } if source.kind() == io::ErrorKind::NotFound)
    }
}

/// Adds the failing operation and path to an `io::Result`.
pub(crate) trait IoContext<T> {
    fn ctx(self, op: &'static str, path: impl Into<PathBuf>) -> Result<T>;
}

impl<T> IoContext<T> for io::Result<T> {
    fn ctx(self, op: &'static str, path: impl Into<PathBuf>) -> Result<T> {
        self.map_err(|e| Error::io(op, path, e))
    }
}
