//! Options of a commit log, validated once at open.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::state::dirs::{DirEvent, DirInfo};
use crate::storage::record::{Format as RecordFormat, HEADER_LEN};
pub use crate::tier::TierOptions;

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

/// What a flush mode asks of the log: the one place the modes are told apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FlushPolicy {
    /// A background thread syncs every `flush_interval` and keeps the checkpoint fresh.
    pub background: bool,
    /// `append` returns only once its bytes are synced; records go by `pwritev` (see
    /// `active_file`), and warmed chunks are synced ahead of them.
    pub each_append: bool,
    /// A writer's open syncs what recovery kept before the first append.
    pub on_open: bool,
}

impl FlushMode {
    pub(crate) fn policy(self) -> FlushPolicy {
        match self {
            FlushMode::Async => FlushPolicy {
                background: true,
                each_append: false,
                on_open: true,
            },
            FlushMode::Sync => FlushPolicy {
                background: true,
                each_append: true,
                on_open: true,
            },
            FlushMode::None => FlushPolicy {
                background: false,
                each_append: false,
                on_open: false,
            },
        }
    }

    /// The mode's name, as `parse` takes it.
    pub fn as_str(self) -> &'static str {
        match self {
            FlushMode::Async => "async",
            FlushMode::Sync => "sync",
            FlushMode::None => "none",
        }
    }

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

/// A placement function: given the eligible directories and the new segment's start offset,
/// the index of the directory to use (`None` or an index out of range falls back to round robin).
pub type PlaceFn = dyn Fn(&[DirInfo], u64) -> Option<usize> + Send + Sync;

/// How a directory is chosen for each new segment among the eligible ones.
#[derive(Clone, Default)]
pub enum Strategy {
    /// RocketMQ RIP-7: segment number `start / segment_size` modulo the number of eligible
    /// directories, in configuration order.
    #[default]
    RoundRobin,
    /// Kafka KIP-178 "size": the most usable free space (`f_bavail`); ties by configuration order.
    /// Falls back to `FewestSegments` when free space cannot be read.
    MostFree,
    /// Kafka's count strategy: the fewest live segments of this log; ties by configuration order.
    FewestSegments,
    /// Random choice weighted by usable free space: a new empty disk does not take every segment.
    WeightedFree,
    /// A caller's function, called once per new segment with no lock held.
    Custom(Arc<PlaceFn>),
}

impl fmt::Debug for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl Strategy {
    /// Parses a strategy name.
    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "round_robin" => Ok(Strategy::RoundRobin),
            "most_free" => Ok(Strategy::MostFree),
            "fewest_segments" => Ok(Strategy::FewestSegments),
            "weighted_free" => Ok(Strategy::WeightedFree),
            other => Err(Error::invalid(format!(
                "unknown placement strategy {other:?}; accepted: \"round_robin\", \"most_free\", \
                 \"fewest_segments\", \"weighted_free\", or a callable"
            ))),
        }
    }

    /// The strategy's name.
    pub fn name(&self) -> &'static str {
        match self {
            Strategy::RoundRobin => "round_robin",
            Strategy::MostFree => "most_free",
            Strategy::FewestSegments => "fewest_segments",
            Strategy::WeightedFree => "weighted_free",
            Strategy::Custom(_) => "custom",
        }
    }
}

/// A value for every directory, with overrides for some (RIP-7 has one ratio for all disks).
#[derive(Debug, Clone, PartialEq)]
pub struct PerDir<T> {
    /// For directories not listed in `overrides`.
    pub default: T,
    /// `(directory, value)` pairs; paths are made absolute at open.
    pub overrides: Vec<(PathBuf, T)>,
}

impl<T: Clone> PerDir<T> {
    /// The same value everywhere.
    pub fn all(value: T) -> Self {
        PerDir {
            default: value,
            overrides: Vec::new(),
        }
    }

    /// The value for `dir`.
    pub fn get(&self, dir: &Path) -> T {
        self.overrides
            .iter()
            .find(|(p, _)| p == dir)
            .map_or_else(|| self.default.clone(), |(_, v)| v.clone())
    }
}

/// Receives directory state changes, on a background thread, with no lock held.
pub type EventFn = dyn Fn(&DirEvent) + Send + Sync;

/// A setting a store keeps for all its opens (`docs/options.md`): recorded in its metadata by
/// each writer, shown by `rmqlog stat`. An open that does not name one takes the store's recorded
/// value; a writer that names another value changes it for the store (with a warning on the
/// `rmqlog` logger), and is refused while other writers are open. Every other option is the
/// open's own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreSetting {
    SegmentSize,
    Strategy,
    RetentionHours,
    DeleteHours,
    RetentionBytes,
    RetainUnconsumed,
    ConsumerIdleHours,
    MaxUsedRatio,
    ForceCleanRatio,
    MinFreeBytes,
    CleanInterval,
    TierUrl,
    TierAfter,
    LocalRetention,
    LocalRetentionBytes,
    DedupWindow,
    DedupWindowRecords,
}

impl StoreSetting {
    /// Every store-wide setting.
    pub const ALL: [StoreSetting; 17] = [
        StoreSetting::SegmentSize,
        StoreSetting::Strategy,
        StoreSetting::RetentionHours,
        StoreSetting::DeleteHours,
        StoreSetting::RetentionBytes,
        StoreSetting::RetainUnconsumed,
        StoreSetting::ConsumerIdleHours,
        StoreSetting::MaxUsedRatio,
        StoreSetting::ForceCleanRatio,
        StoreSetting::MinFreeBytes,
        StoreSetting::CleanInterval,
        StoreSetting::TierUrl,
        StoreSetting::TierAfter,
        StoreSetting::LocalRetention,
        StoreSetting::LocalRetentionBytes,
        StoreSetting::DedupWindow,
        StoreSetting::DedupWindowRecords,
    ];

    /// The option's name, as Python's `CommitLog` spells it.
    pub fn name(self) -> &'static str {
        match self {
            StoreSetting::SegmentSize => "segment_size",
            StoreSetting::Strategy => "strategy",
            StoreSetting::RetentionHours => "retention_hours",
            StoreSetting::DeleteHours => "delete_hours",
            StoreSetting::RetentionBytes => "retention_bytes",
            StoreSetting::RetainUnconsumed => "retain_unconsumed",
            StoreSetting::ConsumerIdleHours => "consumer_idle_hours",
            StoreSetting::MaxUsedRatio => "max_used_ratio",
            StoreSetting::ForceCleanRatio => "force_clean_ratio",
            StoreSetting::MinFreeBytes => "min_free_bytes",
            StoreSetting::CleanInterval => "clean_interval_ms",
            StoreSetting::TierUrl => "tier_url",
            StoreSetting::TierAfter => "tier_after",
            StoreSetting::LocalRetention => "local_retention_hours",
            StoreSetting::LocalRetentionBytes => "local_retention_bytes",
            StoreSetting::DedupWindow => "dedup_window_ms",
            StoreSetting::DedupWindowRecords => "dedup_window_records",
        }
    }

    fn bit(self) -> u32 {
        1 << self as u32
    }
}

/// Options of [`CommitLog::open`](crate::CommitLog::open).
#[derive(Clone)]
pub struct Options {
    /// Size of new segment files, a multiple of 4096. Each is preallocated in full when created,
    /// so this is the disk space the first append takes (see `docs/sizing.md`). Defaults to
    /// 64 MiB ([`Options::broker`]: 1 GiB).
    pub segment_size: u64,
    /// Placement of new segments. Defaults to [`Strategy::RoundRobin`].
    pub strategy: Strategy,
    /// Open without the writer lock; never writes, truncates or deletes. Defaults to `false`.
    pub read_only: bool,
    /// A read-only open of a store that does not exist yet waits this long for a writer to make
    /// it (its metadata written), then fails with [`Error::StoreNotFound`]; it returns as soon as
    /// the store is there. `None` fails at once. Only for read-only opens (a writer makes the
    /// store). Defaults to `None`.
    pub wait_for_store: Option<Duration>,
    /// No other writer, in this process or another, while this one is open: opening beside a
    /// writer fails with `StoreLocked`. With `false` several opens (in one process or many)
    /// append to the store together; none may be exclusive (`docs/producers-consumers.md`).
    /// Defaults to `true`.
    pub exclusive: bool,
    /// Durability of appends. Defaults to [`FlushMode::Async`].
    pub flush: FlushMode,
    /// Period of the background flush in [`FlushMode::Async`]. Defaults to 500 ms.
    pub flush_interval: Duration,
    /// Shared writers: the longest an append waits for the store's append lock before it fails
    /// with [`crate::Error::LockTimeout`] naming the holder's process (a holder stopped by
    /// SIGSTOP, a debugger or a frozen cgroup). Defaults to 30 s.
    pub lock_timeout: Duration,
    /// Largest body accepted by `append` (a body must also fit in one segment with its header).
    /// Defaults to 4 MiB.
    pub max_message_size: u32,
    /// Directories whose segments are read (and deleted by retention) but never written: how a
    /// disk is retired (RocketMQ `readOnlyCommitLogStorePaths`). Defaults to none.
    pub read_only_paths: Vec<PathBuf>,
    /// Directories lost for good (a dead disk): the log opens with the offsets they held as holes
    /// (reads there fail naming the directory, scans skip them) instead of failing. Defaults to
    /// none.
    pub accept_lost: Vec<PathBuf>,
    /// Above this used ratio a directory's expired segments are deleted at once, outside
    /// `delete_hours` (RocketMQ `diskMaxUsedSpaceRatio`); forced cleaning frees down to it. `None`
    /// is off: disk usage never hastens expiry. Defaults to off ([`Options::broker`]: 0.75).
    pub max_used_ratio: PerDir<Option<f64>>,
    /// Above this used ratio a directory takes no new segment and the oldest segments are deleted
    /// even if not expired (RocketMQ `diskSpaceCleanForciblyRatio`). Defaults to off: a library
    /// shares its disks with other programs.
    pub force_clean_ratio: PerDir<Option<f64>>,
    /// Free space to keep on every directory beyond a new segment. Defaults to 0.
    pub min_free_bytes: u64,
    /// Bytes of the active segment a background thread (`rmqlog-warm`) keeps warm past the log's
    /// end: zeros written into the page cache and mapped writable, so appends copy into memory
    /// that is already there instead of faulting in fresh pages (see `docs/sizing.md`). 0 turns
    /// the thread off (appends then warm 256 KiB at a time themselves). Ignored in
    /// [`FlushMode::Sync`], whose appends warm and sync inline. Defaults to 64 MiB.
    pub warm_ahead: u64,
    /// Called on every change of a directory's state. Defaults to none.
    pub on_dir_event: Option<Arc<EventFn>>,
    /// A sealed segment expires this long after its file was last modified; `None` turns time
    /// expiry off (RocketMQ `fileReservedTime`). Defaults to off: records are kept until
    /// `truncate_before` ([`Options::broker`]: 72 hours).
    pub retention_hours: Option<f64>,
    /// Hours of the local day when expired segments are deleted on schedule; `None` means any
    /// hour (RocketMQ `deleteWhen`). Defaults to any hour ([`Options::broker`]: 4).
    pub delete_hours: Option<Vec<u32>>,
    /// Oldest sealed segments are deleted while the log without them stays at or above this size
    /// (Kafka `retention.bytes`). Defaults to off.
    pub retention_bytes: Option<u64>,
    /// The cleaner keeps every segment that holds records a named consumer of the store has not
    /// committed (`retention_hours` and `retention_bytes` wait for it); the disk limits
    /// (`max_used_ratio`, `force_clean_ratio`) still win, and the consumer learns of the loss at
    /// its next poll. Defaults to off.
    pub retain_unconsumed: bool,
    /// With `retain_unconsumed`: a consumer that no open holds and that has not committed for
    /// this long stops holding retention; `None`: it holds until dropped. Defaults to 24 hours.
    pub consumer_idle_hours: Option<f64>,
    /// The record format a new store's writers write (docs/format.md); a store keeps the format
    /// it was made with, whatever a later open says. Defaults to format 2; format 1 is for stores
    /// an rmqlog older than 0.2 must read.
    pub record_format: RecordFormat,
    /// At most this many segments are deleted in one pass (RocketMQ `deleteFileBatchMax`).
    /// Defaults to 10.
    pub max_deletes_per_pass: usize,
    /// Permission bits of the segment and metadata files the log creates (before the umask).
    /// Defaults to 0o640.
    pub file_mode: u32,
    /// Period of the cleaner thread; zero disables it (passes then run only through `clean`).
    /// Defaults to 10 s.
    pub clean_interval: Duration,
    /// The remote tier: sealed segments copied to an object store (`docs/tiering.md`). A store
    /// remembers its tier: later opens without this option use the recorded URL. Defaults to
    /// none.
    pub tier: Option<TierOptions>,
    /// An append with a message id is not written when a record stored this long before it has
    /// the id (`docs/messages.md`). Defaults to 2 minutes (NATS JetStream's
    /// `duplicate_window`).
    pub dedup_window: Duration,
    /// With a count: and only when that record is among the log's last this many records.
    /// Defaults to `None` (the time alone).
    pub dedup_window_records: Option<u64>,
    /// The store-wide settings named through their setters or [`Options::named`].
    named: u32,
}

impl fmt::Debug for Options {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Options")
            .field("segment_size", &self.segment_size)
            .field("strategy", &self.strategy)
            .field("read_only", &self.read_only)
            .field("wait_for_store", &self.wait_for_store)
            .field("exclusive", &self.exclusive)
            .field("flush", &self.flush)
            .field("flush_interval", &self.flush_interval)
            .field("max_message_size", &self.max_message_size)
            .field("read_only_paths", &self.read_only_paths)
            .field("accept_lost", &self.accept_lost)
            .field("max_used_ratio", &self.max_used_ratio)
            .field("force_clean_ratio", &self.force_clean_ratio)
            .field("min_free_bytes", &self.min_free_bytes)
            .field("warm_ahead", &self.warm_ahead)
            .field("on_dir_event", &self.on_dir_event.is_some())
            .field("retention_hours", &self.retention_hours)
            .field("delete_hours", &self.delete_hours)
            .field("retention_bytes", &self.retention_bytes)
            .field("retain_unconsumed", &self.retain_unconsumed)
            .field("record_format", &self.record_format)
            .field("consumer_idle_hours", &self.consumer_idle_hours)
            .field("max_deletes_per_pass", &self.max_deletes_per_pass)
            .field("clean_interval", &self.clean_interval)
            .field("file_mode", &format_args!("{:o}", self.file_mode))
            .field("tier", &self.tier.as_ref().map(|t| &t.url))
            .field("dedup_window", &self.dedup_window)
            .field("dedup_window_records", &self.dedup_window_records)
            .field(
                "named",
                &StoreSetting::ALL
                    .iter()
                    .filter(|s| self.named & s.bit() != 0)
                    .map(|s| s.name())
                    .collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl Default for Options {
    fn default() -> Self {
        Options {
            segment_size: 64 << 20,
            strategy: Strategy::RoundRobin,
            read_only: false,
            wait_for_store: None,
            exclusive: true,
            flush: FlushMode::Async,
            flush_interval: Duration::from_millis(500),
            lock_timeout: Duration::from_secs(30),
            max_message_size: 4 << 20,
            read_only_paths: Vec::new(),
            accept_lost: Vec::new(),
            max_used_ratio: PerDir::all(None),
            force_clean_ratio: PerDir::all(None),
            min_free_bytes: 0,
            warm_ahead: 64 << 20,
            on_dir_event: None,
            retention_hours: None,
            delete_hours: None,
            retention_bytes: None,
            retain_unconsumed: false,
            record_format: RecordFormat::default(),
            consumer_idle_hours: Some(24.0),
            max_deletes_per_pass: 10,
            clean_interval: Duration::from_secs(10),
            file_mode: 0o640,
            tier: None,
            dedup_window: Duration::from_secs(120),
            dedup_window_records: None,
            named: 0,
        }
    }
}

impl Options {
    /// Names accepted by [`Options::preset`].
    pub const PRESETS: &'static [&'static str] = &["broker"];

    /// RocketMQ broker's defaults (rmqlog's own until retention became opt-in): 1 GiB segments,
    /// and sealed segments deleted 72 hours after their last write, at 4 a.m., or at any hour
    /// while a disk is over 75 % used (`mappedFileSizeCommitLog`, `fileReservedTime=72`,
    /// `deleteWhen=04`, `diskMaxUsedSpaceRatio=75`). For disks that hold nothing but the log. A
    /// broker also forces cleaning at 85 % (`diskSpaceCleanForciblyRatio`): add
    /// `.force_clean_ratio(Some(0.85))` for that.
    #[must_use]
    pub fn broker() -> Self {
        Options {
            segment_size: 1 << 30,
            max_used_ratio: PerDir::all(Some(0.75)),
            retention_hours: Some(72.0),
            delete_hours: Some(vec![4]),
            ..Options::default()
        }
    }

    /// The options a preset names: `"broker"` ([`Options::broker`]).
    pub fn preset(name: &str) -> Result<Self> {
        match name {
            "broker" => Ok(Options::broker()),
            other => Err(Error::invalid(format!(
                "unknown preset {other:?}; accepted: {}",
                Options::PRESETS
                    .iter()
                    .map(|p| format!("{p:?}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ))),
        }
    }

    /// Whether any option asks for deletion (age, size or disk usage); without one, cleaning
    /// passes delete nothing.
    pub fn retention_configured(&self) -> bool {
        let forced = self.force_clean_ratio.default.is_some()
            || self
                .force_clean_ratio
                .overrides
                .iter()
                .any(|(_, r)| r.is_some());
        self.retention_hours.is_some() || self.retention_bytes.is_some() || forced
    }

    /// Marks `setting` as named by this open, as its setter does: the open then keeps its own
    /// value, even one equal to the default, instead of the store's recorded one.
    #[must_use]
    pub fn named(mut self, setting: StoreSetting) -> Self {
        self.named |= setting.bit();
        self
    }

    /// Whether this open names `setting`: through its setter or [`Options::named`], or by a value
    /// other than the default (a field assigned directly).
    pub fn names(&self, setting: StoreSetting) -> bool {
        if self.named & setting.bit() != 0 {
            return true;
        }
        let d = Options::default();
        let tier = self.tier.as_ref();
        let untiered = TierOptions::new("");
        let t = tier.unwrap_or(&untiered);
        match setting {
            StoreSetting::SegmentSize => self.segment_size != d.segment_size,
            StoreSetting::Strategy => self.strategy.name() != d.strategy.name(),
            StoreSetting::RetentionHours => self.retention_hours != d.retention_hours,
            StoreSetting::DeleteHours => self.delete_hours != d.delete_hours,
            StoreSetting::RetentionBytes => self.retention_bytes != d.retention_bytes,
            StoreSetting::RetainUnconsumed => self.retain_unconsumed != d.retain_unconsumed,
            StoreSetting::ConsumerIdleHours => self.consumer_idle_hours != d.consumer_idle_hours,
            StoreSetting::MaxUsedRatio => self.max_used_ratio != d.max_used_ratio,
            StoreSetting::ForceCleanRatio => self.force_clean_ratio != d.force_clean_ratio,
            StoreSetting::MinFreeBytes => self.min_free_bytes != d.min_free_bytes,
            StoreSetting::CleanInterval => self.clean_interval != d.clean_interval,
            StoreSetting::TierUrl => tier.is_some(),
            StoreSetting::TierAfter => t.after != untiered.after,
            StoreSetting::LocalRetention => t.local_retention != untiered.local_retention,
            StoreSetting::LocalRetentionBytes => {
                t.local_retention_bytes != untiered.local_retention_bytes
            }
            StoreSetting::DedupWindow => self.dedup_window != d.dedup_window,
            StoreSetting::DedupWindowRecords => self.dedup_window_records != d.dedup_window_records,
        }
    }

    /// Sets [`Options::segment_size`].
    #[must_use]
    pub fn segment_size(mut self, bytes: u64) -> Self {
        self.segment_size = bytes;
        self.named |= StoreSetting::SegmentSize.bit();
        self
    }

    /// Sets [`Options::strategy`].
    #[must_use]
    pub fn strategy(mut self, strategy: Strategy) -> Self {
        self.strategy = strategy;
        self.named |= StoreSetting::Strategy.bit();
        self
    }

    /// Sets [`Options::read_only`].
    #[must_use]
    pub fn read_only(mut self, read_only: bool) -> Self {
        self.read_only = read_only;
        self
    }

    /// Sets [`Options::wait_for_store`].
    #[must_use]
    pub fn wait_for_store(mut self, limit: Option<Duration>) -> Self {
        self.wait_for_store = limit;
        self
    }

    /// Sets [`Options::exclusive`].
    #[must_use]
    pub fn exclusive(mut self, exclusive: bool) -> Self {
        self.exclusive = exclusive;
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

    /// Sets [`Options::lock_timeout`].
    #[must_use]
    pub fn lock_timeout(mut self, timeout: Duration) -> Self {
        self.lock_timeout = timeout;
        self
    }

    /// Sets [`Options::max_message_size`].
    #[must_use]
    pub fn max_message_size(mut self, bytes: u32) -> Self {
        self.max_message_size = bytes;
        self
    }

    /// Sets [`Options::read_only_paths`].
    #[must_use]
    pub fn read_only_paths<P: AsRef<Path>>(mut self, paths: &[P]) -> Self {
        self.read_only_paths = paths.iter().map(|p| p.as_ref().to_path_buf()).collect();
        self
    }

    /// Sets [`Options::accept_lost`].
    #[must_use]
    pub fn accept_lost<P: AsRef<Path>>(mut self, paths: &[P]) -> Self {
        self.accept_lost = paths.iter().map(|p| p.as_ref().to_path_buf()).collect();
        self
    }

    /// Sets [`Options::max_used_ratio`] for every directory.
    #[must_use]
    pub fn max_used_ratio(mut self, ratio: Option<f64>) -> Self {
        self.max_used_ratio = PerDir::all(ratio);
        self.named |= StoreSetting::MaxUsedRatio.bit();
        self
    }

    /// Sets [`Options::force_clean_ratio`] for every directory.
    #[must_use]
    pub fn force_clean_ratio(mut self, ratio: Option<f64>) -> Self {
        self.force_clean_ratio = PerDir::all(ratio);
        self.named |= StoreSetting::ForceCleanRatio.bit();
        self
    }

    /// Sets [`Options::min_free_bytes`].
    #[must_use]
    pub fn min_free_bytes(mut self, bytes: u64) -> Self {
        self.min_free_bytes = bytes;
        self.named |= StoreSetting::MinFreeBytes.bit();
        self
    }

    /// Sets [`Options::warm_ahead`].
    #[must_use]
    pub fn warm_ahead(mut self, bytes: u64) -> Self {
        self.warm_ahead = bytes;
        self
    }

    /// Sets [`Options::on_dir_event`].
    #[must_use]
    pub fn on_dir_event(mut self, f: impl Fn(&DirEvent) + Send + Sync + 'static) -> Self {
        self.on_dir_event = Some(Arc::new(f));
        self
    }

    /// Sets [`Options::retention_hours`].
    #[must_use]
    pub fn retention_hours(mut self, hours: Option<f64>) -> Self {
        self.retention_hours = hours;
        self.named |= StoreSetting::RetentionHours.bit();
        self
    }

    /// Sets [`Options::delete_hours`].
    #[must_use]
    pub fn delete_hours(mut self, hours: Option<Vec<u32>>) -> Self {
        self.delete_hours = hours;
        self.named |= StoreSetting::DeleteHours.bit();
        self
    }

    /// Sets [`Options::retention_bytes`].
    #[must_use]
    pub fn retention_bytes(mut self, bytes: Option<u64>) -> Self {
        self.retention_bytes = bytes;
        self.named |= StoreSetting::RetentionBytes.bit();
        self
    }

    /// Sets [`Options::record_format`].
    #[must_use]
    pub fn record_format(mut self, format: RecordFormat) -> Self {
        self.record_format = format;
        self
    }

    /// Sets [`Options::retain_unconsumed`].
    #[must_use]
    pub fn retain_unconsumed(mut self, on: bool) -> Self {
        self.retain_unconsumed = on;
        self.named |= StoreSetting::RetainUnconsumed.bit();
        self
    }

    /// Sets [`Options::consumer_idle_hours`].
    #[must_use]
    pub fn consumer_idle_hours(mut self, hours: Option<f64>) -> Self {
        self.consumer_idle_hours = hours;
        self.named |= StoreSetting::ConsumerIdleHours.bit();
        self
    }

    /// Sets [`Options::dedup_window`].
    #[must_use]
    pub fn dedup_window(mut self, window: Duration) -> Self {
        self.dedup_window = window;
        self.named |= StoreSetting::DedupWindow.bit();
        self
    }

    /// Sets [`Options::dedup_window_records`].
    #[must_use]
    pub fn dedup_window_records(mut self, records: Option<u64>) -> Self {
        self.dedup_window_records = records;
        self.named |= StoreSetting::DedupWindowRecords.bit();
        self
    }

    /// Sets [`Options::max_deletes_per_pass`].
    #[must_use]
    pub fn max_deletes_per_pass(mut self, n: usize) -> Self {
        self.max_deletes_per_pass = n;
        self
    }

    /// Sets [`Options::clean_interval`].
    #[must_use]
    pub fn clean_interval(mut self, interval: Duration) -> Self {
        self.clean_interval = interval;
        self.named |= StoreSetting::CleanInterval.bit();
        self
    }

    /// Sets [`Options::tier`].
    #[must_use]
    pub fn tier(mut self, tier: Option<TierOptions>) -> Self {
        self.tier = tier;
        self
    }

    /// Sets [`Options::file_mode`].
    #[must_use]
    pub fn file_mode(mut self, mode: u32) -> Self {
        self.file_mode = mode;
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
        if self.wait_for_store.is_some() && !self.read_only {
            return Err(Error::invalid(
                "wait_for_store is for read-only opens: a writer makes the store",
            ));
        }
        if self.lock_timeout.is_zero() {
            return Err(Error::invalid("lock_timeout_ms must be at least 1"));
        }
        let ratio_ok = |r: f64| r > 0.0 && r <= 1.0;
        let ratios = self
            .max_used_ratio
            .default
            .into_iter()
            .chain(self.max_used_ratio.overrides.iter().filter_map(|(_, r)| *r))
            .chain(self.force_clean_ratio.default)
            .chain(
                self.force_clean_ratio
                    .overrides
                    .iter()
                    .filter_map(|(_, r)| *r),
            );
        for r in ratios {
            if !ratio_ok(r) {
                return Err(Error::invalid(format!(
                    "ratios (max_used_ratio, force_clean_ratio) must be in (0, 1], got {r}"
                )));
            }
        }
        check_hours("retention_hours", self.retention_hours)?;
        check_hours("consumer_idle_hours", self.consumer_idle_hours)?;
        if let Some(hours) = &self.delete_hours {
            if let Some(bad) = hours.iter().find(|&&h| h > 23) {
                return Err(Error::invalid(format!(
                    "delete_hours must be hours of the day in 0..=23, got {bad}"
                )));
            }
        }
        if self.file_mode & !0o777 != 0 || self.file_mode & 0o600 != 0o600 {
            return Err(Error::invalid(format!(
                "file_mode must be permission bits (at most 0o777) including owner read and \
                 write (0o600), got {:o}",
                self.file_mode
            )));
        }
        if let Some(t) = &self.tier {
            t.validate()?;
        }
        if self.dedup_window.is_zero() {
            return Err(Error::invalid(
                "dedup_window_ms must be at least 1 (ids older than the window are not looked for)",
            ));
        }
        if self.dedup_window_records == Some(0) {
            return Err(Error::invalid(
                "dedup_window_records must be at least 1, or None for no count",
            ));
        }
        if self.max_deletes_per_pass == 0 {
            return Err(Error::invalid("max_deletes_per_pass must be at least 1"));
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

/// Hours an option gives: none, or a non-negative number a [`Duration`] holds (the cleaner
/// compares ages with it).
fn check_hours(what: &str, hours: Option<f64>) -> Result<()> {
    match hours {
        Some(h) if !(h >= 0.0 && Duration::try_from_secs_f64(h * 3600.0).is_ok()) => {
            Err(Error::invalid(format!(
                "{what} must be a non-negative number of hours (at most {:.0}) or None, got {h}",
                MAX_HOURS
            )))
        }
        _ => Ok(()),
    }
}

/// The most hours [`check_hours`] takes (a duration of seconds that fits 64 bits).
const MAX_HOURS: f64 = u64::MAX as f64 / 3600.0;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_delete_nothing_and_the_broker_preset_is_rocketmqs() {
        let d = Options::default();
        assert!(!d.retention_configured());
        assert_eq!(d.segment_size, 64 << 20);
        assert_eq!(d.max_used_ratio, PerDir::all(None));
        assert_eq!(d.delete_hours, None);
        let b = Options::preset("broker").unwrap();
        assert!(b.retention_configured());
        assert_eq!(
            (b.segment_size, b.retention_hours, b.delete_hours.clone()),
            (1 << 30, Some(72.0), Some(vec![4]))
        );
        assert_eq!(b.max_used_ratio, PerDir::all(Some(0.75)));
        assert_eq!(b.force_clean_ratio, PerDir::all(None));
        b.validate().unwrap();
        let err = Options::preset("rocketmq").unwrap_err().to_string();
        assert_eq!(err, "unknown preset \"rocketmq\"; accepted: \"broker\"");
        // Forced cleaning alone is retention too.
        assert!(d.force_clean_ratio(Some(0.9)).retention_configured());
    }

    #[test]
    fn a_setting_is_named_by_its_setter_or_by_a_value_other_than_the_default() {
        for (i, s) in StoreSetting::ALL.iter().enumerate() {
            assert_eq!(*s as usize, i, "ALL is in declaration order");
            assert!(!Options::default().names(*s), "{}", s.name());
        }
        let set = Options::default().retain_unconsumed(false);
        assert!(set.names(StoreSetting::RetainUnconsumed));
        assert!(!set.names(StoreSetting::SegmentSize));
        let direct = Options {
            segment_size: 8192,
            ..Options::default()
        };
        assert!(direct.names(StoreSetting::SegmentSize));
        let broker = Options::broker();
        assert!(broker.names(StoreSetting::RetentionHours));
        assert!(!broker.names(StoreSetting::RetainUnconsumed));
        let tiered = Options::default().tier(Some(TierOptions::new("file:///t")));
        assert!(tiered.names(StoreSetting::TierUrl) && !tiered.names(StoreSetting::TierAfter));
    }
}
