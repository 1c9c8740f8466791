//! The `CommitLog` facade: the public API over the parts. Nothing in the core imports it.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::background::Periodic;
use crate::consumers::consumer::{Consumer, ConsumerOptions};
use crate::consumers::ConsumerInfo;
use crate::consumers::{dead_letter, names};
use crate::error::{Error, Result};
use crate::maintain::cleaner::{clean_pass, start_cleaner, truncate_before};
use crate::maintain::mover::{self, Moved};
use crate::maintain::verify::{self, BadRange, Verified};
use crate::open::lock::{ByteLocks, JoinLock, MaintenanceGuard, StoreLock};
use crate::open::{open, Opened};
use crate::options::Options;
use crate::read::reader::{self, Follow, RecordRef, Scan};
use crate::read::wait::{self, Waited};
use crate::read::watch::Watch;
use crate::read::{count, follow, lookup};
use crate::shared;
use crate::state::dirs::DirInfo;
use crate::state::stats::StatsSnapshot;
use crate::state::State;
use crate::storage::key_index::Needle;
use crate::storage::props::{self, Message};
use crate::storage::settings::WriterSettings;
use crate::sync::locked;
#[cfg(feature = "tier")]
use crate::tier::start_shipper;
use crate::tier::TierStatus;
use crate::write::dedup::{Appended, Once};
use crate::write::flusher::{flush_data, start_flusher};
use crate::write::warmer::start_warmer;
use crate::write::writer::Writer;

/// A segmented, memory-mapped commit log spread over one or more directories.
///
/// Appends are serialised; reads never wait for the writer. All methods take `&self` and the log
/// is `Send + Sync`.
#[derive(Debug)]
pub struct CommitLog {
    state: Arc<State>,
    /// `None` for a read-only log.
    writer: Option<Writer>,
    lock: Mutex<Option<StoreLock>>,
    threads: Mutex<Threads>,
    /// The names this open's consumers hold, let go at close.
    consumer_locks: Mutex<Vec<std::sync::Weak<ByteLocks>>>,
    /// The key indexes this open mapped for lookups.
    indexes: lookup::Indexes,
}

/// The background threads of a writer, stopped and joined on drop.
#[derive(Debug, Default)]
struct Threads {
    flusher: Option<Periodic>,
    cleaner: Option<Periodic>,
    warmer: Option<Periodic>,
    #[cfg(feature = "tier")]
    shipper: Option<Periodic>,
}

/// Facts about one segment, as returned by [`CommitLog::segments`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentInfo {
    /// Physical offset of the segment's first byte (its file name).
    pub start_offset: u64,
    /// Full path of the file.
    pub path: PathBuf,
    /// Length of the file.
    pub size: u64,
    /// Bytes in use: the end of the published records in the active segment; the whole file
    /// (records and end-of-segment filler) in a sealed one.
    pub written: u64,
    /// Sealed: wholly below `max_offset` and not the last segment. Only sealed segments are
    /// deleted by retention or moved.
    pub sealed: bool,
    /// The segment has a file in the store's directories.
    pub local: bool,
    /// The segment has a verified copy in the remote tier (`path` is the object's URL when it is
    /// not local).
    pub remote: bool,
    /// Offsets inside the segment where a record starts, known without reading it: a remote
    /// copy's first record at or after every 32 MiB. A reader may split the segment there (a
    /// task reading one part of a remote-only segment fetches only that part). Empty for a
    /// segment with no remote copy, or of 32 MiB or less.
    pub splits: Vec<u64>,
}

impl CommitLog {
    /// Opens (or creates) the log stored in `paths`, one directory per disk.
    ///
    /// A writer creates missing directories, takes the store's lock and recovers the tail after a
    /// crash; `Options::read_only` opens without the lock and never writes.
    pub fn open<P: AsRef<Path>>(paths: &[P], opts: Options) -> Result<CommitLog> {
        let Opened {
            state,
            writer,
            lock,
            recovered,
        } = open(paths, opts)?;
        if let Some(end) = recovered {
            // Before any append of this open: a consumer position past what recovery kept
            // resumes at that end (where the records any open appends from now on start).
            crate::consumers::names::resume_past_the_end(&state, end);
        }
        let log = CommitLog {
            state,
            writer,
            lock: Mutex::new(lock),
            threads: Mutex::new(Threads::default()),
            consumer_locks: Mutex::new(Vec::new()),
            indexes: lookup::Indexes::default(),
        };
        if log.writer.is_some() {
            log.start_threads()?;
        }
        Ok(log)
    }

    /// Starts a writer's background threads: the flusher (as the flush mode asks), the cleaner
    /// (unless its interval is zero) and the warmer (unless `warm_ahead` is zero or appends sync).
    fn start_threads(&self) -> Result<()> {
        let mut t = locked(&self.threads);
        let opts = &self.state.opts;
        // Shared writers warm inline only: a thread could not know where the others write.
        if let (Some(w), true) = (&self.writer, opts.warm_ahead > 0) {
            if !opts.flush.policy().each_append && self.state.shared.is_none() {
                t.warmer = Some(start_warmer(&self.state, w.warm_slot())?);
            }
        }
        if self.state.opts.flush.policy().background {
            t.flusher = Some(start_flusher(&self.state)?);
        }
        if !self.state.opts.clean_interval.is_zero() {
            t.cleaner = Some(start_cleaner(&self.state)?);
        }
        #[cfg(feature = "tier")]
        if self.state.tier.is_some() {
            t.shipper = Some(start_shipper(&self.state)?);
        }
        Ok(())
    }

    /// The writer (whose calls check that the log is open); `what` names the call a read-only
    /// log refuses.
    fn writer(&self, what: &'static str) -> Result<&Writer> {
        match &self.writer {
            Some(w) => Ok(w),
            None => {
                self.state.check_open()?;
                Err(Error::ReadOnly(what))
            }
        }
    }

    /// For a maintenance call: checks that the log is open for writing and, for a shared writer,
    /// holds the store's maintenance lock until dropped (see [`shared::maintenance`]).
    fn maintenance(&self, what: &'static str) -> Result<Option<MaintenanceGuard<'_>>> {
        self.state.check_open()?;
        self.writer(what)?;
        shared::maintenance(&self.state)
    }

    /// Checks that the log is open and, for a shared writer, takes in what the others appended.
    fn current(&self) -> Result<()> {
        self.state.check_open()?;
        shared::catch_up(&self.state)
    }

    /// Appends one record and returns its physical offset.
    pub fn append(&self, body: &[u8]) -> Result<u64> {
        let mut offset = 0;
        self.writer("append")?
            .append_with(&self.state, &[body], &[], None, |o| offset = o)?;
        Ok(offset)
    }

    /// Appends one record with a key, headers and a message id (format-2 stores) and returns its
    /// offset: for a message whose id a record of the de-duplication window has, that record's
    /// (nothing is written).
    pub fn append_message(&self, message: &Message<'_>) -> Result<u64> {
        let props = props::encode_all(std::slice::from_ref(message))?;
        Ok(self.append_encoded(&[message.body], &props)?.offsets[0])
    }

    /// [`CommitLog::append_batch`] of messages with keys, headers and message ids: each
    /// message's offset, and which were not written because their id was there (in the
    /// de-duplication window, or earlier in the batch).
    pub fn append_messages(&self, messages: &[Message<'_>]) -> Result<Appended> {
        let props = props::encode_all(messages)?;
        let bodies: Vec<&[u8]> = messages.iter().map(|m| m.body).collect();
        self.append_encoded(&bodies, &props)
    }

    /// Appends every body under one lock acquisition; all become visible to readers at once, or
    /// none does (every body is validated before any is written).
    pub fn append_batch<B: AsRef<[u8]>>(&self, bodies: &[B]) -> Result<Vec<u64>> {
        let mut offsets = Vec::with_capacity(bodies.len());
        self.writer("append")?
            .append_with(&self.state, bodies, &[], None, |o| offsets.push(o))?;
        Ok(offsets)
    }

    /// Appends without waiting: `Ok(None)` when the writer is busy or the append needs slow work
    /// (a new segment, a sync, a record of 16 KiB or more). Lets a caller holding another lock
    /// (Python's GIL) avoid blocking; at most it warms the next 256 KiB of the page cache.
    pub fn try_append(&self, body: &[u8]) -> Result<Option<u64>> {
        self.writer("append")?
            .try_append(&self.state, body, &[], None)
    }

    /// Appends bodies with their encoded properties (`props`: one block per body, or empty),
    /// de-duplicating those with message ids.
    pub(crate) fn append_encoded<B: AsRef<[u8]>>(
        &self,
        bodies: &[B],
        props: &[Vec<u8>],
    ) -> Result<Appended> {
        let mut offsets = Vec::with_capacity(bodies.len());
        let mut once = Once {
            indexes: &self.indexes,
            duplicates: Vec::new(),
        };
        self.writer("append")?
            .append_with(&self.state, bodies, props, Some(&mut once), |o| {
                offsets.push(o)
            })?;
        Ok(Appended {
            offsets,
            duplicates: once.duplicates,
        })
    }

    /// [`CommitLog::try_append`] of a body with its encoded properties (one block, or empty); a
    /// body with a message id already in the window is not written (its record's offset).
    #[cfg_attr(not(feature = "python"), allow(dead_code))] // Python's append
    pub(crate) fn try_append_encoded(&self, body: &[u8], props: &[Vec<u8>]) -> Result<Option<u64>> {
        self.writer("append")?
            .try_append(&self.state, body, props, Some(&self.indexes))
    }

    /// The record at `offset`, validated (header and body CRC); the guard keeps its map alive.
    pub fn read(&self, offset: u64) -> Result<RecordRef> {
        self.state.check_open()?;
        if offset >= self.state.max_offset() {
            shared::catch_up(&self.state)?;
        }
        reader::read(&self.state, offset)
    }

    /// [`CommitLog::read`] if the record's segment is mapped already, so that the read cannot
    /// wait (no file to open, no request to the remote tier); `Ok(None)` otherwise.
    pub fn try_read(&self, offset: u64) -> Result<Option<RecordRef>> {
        self.state.check_open()?;
        if offset >= self.state.max_offset() && self.state.shared.is_some() {
            return Ok(None); // catching up may wait for the append lock
        }
        reader::read_mapped(&self.state, offset)
    }

    /// Records with offsets in `[start, end)` (defaults: the whole log as of this call).
    pub fn scan(&self, start: Option<u64>, end: Option<u64>) -> Result<Scan> {
        self.current()?;
        Scan::new(Arc::clone(&self.state), start, end)
    }

    /// Records from `start` (default: `min_offset`) that follows the log: at the end of the
    /// records it waits for the next ones (appended by any process), until `end` if given, the
    /// log's close, or `follow.idle_timeout` without a new record.
    pub fn follow(&self, start: Option<u64>, end: Option<u64>, follow: Follow) -> Result<Scan> {
        self.current()?;
        Scan::following(Arc::clone(&self.state), start, end, follow)
    }

    /// Opens the consumer `name`: at its committed position if the store knows the name,
    /// otherwise created (durably) at `opts.start`. One open holds a name at a time
    /// ([`Error::ConsumerBusy`] otherwise); a read-only open may consume too (positions are kept
    /// in the store's writable directories).
    ///
    /// `opts.dead_letter` names the store dead letters go to: opened (created if missing) here
    /// as a shared writer, refused if it is this store.
    pub fn consumer(&self, name: &str, opts: ConsumerOptions) -> Result<Consumer> {
        opts.check(name)?;
        let sink = match &opts.dead_letter {
            Some(paths) => Some(self.dead_letter_store(paths)?),
            None => None,
        };
        let (consumer, locks) = Consumer::open(&self.state, name, &opts, sink)?;
        let mut held = locked(&self.consumer_locks);
        held.retain(|l| l.strong_count() > 0);
        held.push(Arc::downgrade(&locks));
        Ok(consumer)
    }

    /// The store at `paths`, as a consumer's dead-letter store.
    fn dead_letter_store(&self, paths: &[PathBuf]) -> Result<Box<dyn dead_letter::Sink>> {
        if paths.is_empty() {
            return Err(Error::invalid(
                "dead_letter names no directory: give the paths of another store".to_owned(),
            ));
        }
        let ours: Vec<PathBuf> = self
            .state
            .dirs
            .iter()
            .filter_map(|d| d.path.canonicalize().ok())
            .collect();
        if let Some(p) = paths
            .iter()
            .find(|p| p.canonicalize().is_ok_and(|c| ours.contains(&c)))
        {
            return Err(Error::invalid(format!(
                "dead_letter {} is a directory of this store: dead letters go to another one",
                p.display()
            )));
        }
        let opts = Options::default().exclusive(false);
        Ok(Box::new(DeadLetters(CommitLog::open(paths, opts)?)))
    }

    /// Every consumer name the store keeps, by name.
    pub fn consumers(&self) -> Result<Vec<ConsumerInfo>> {
        names::list(&self.state)
    }

    /// The consumer holding the log's head from retention (`retain_unconsumed`): the one with the
    /// lowest committed position among those that hold it; `None` if none does.
    pub fn retention_holder(&self) -> Result<Option<ConsumerInfo>> {
        let Some(mut holder) = names::retention_holder(&self.state)? else {
            return Ok(None);
        };
        // The cleaner's passes ask for positions only: the lag is counted for this one.
        let end = self.state.max_offset();
        holder.lag_records = count::records_between(&self.state, holder.position, end)?;
        Ok(Some(holder))
    }

    /// Forgets consumer `name` (its position is gone); refused while an open holds it.
    pub fn drop_consumer(&self, name: &str) -> Result<()> {
        names::drop_name(&self.state, name)
    }

    /// Blocks until the log's end (`max_offset`) passes `offset`, whichever process appended,
    /// or `timeout` passes. Returns the end: past `offset` unless the timeout passed first.
    /// A follower (read-only log) takes in the new records as it wakes. Costs no CPU while it
    /// waits (a futex on the store's control page); `Error::Closed` if the log closes meanwhile.
    pub fn wait(&self, offset: u64, timeout: Option<Duration>) -> Result<u64> {
        self.wait_until(offset, false, timeout.map(|t| Instant::now() + t))
    }

    /// [`CommitLog::wait`] for durable records: until `flushed_offset` passes `offset`.
    pub fn wait_durable(&self, offset: u64, timeout: Option<Duration>) -> Result<u64> {
        self.wait_until(offset, true, timeout.map(|t| Instant::now() + t))
    }

    fn wait_until(&self, offset: u64, durable: bool, deadline: Option<Instant>) -> Result<u64> {
        match wait::wait(&self.state, offset, durable, deadline, false)? {
            Waited::Passed(end) | Waited::TimedOut(end) => Ok(end),
            Waited::Interrupted => Ok(wait::visible(&self.state, durable)),
        }
    }

    /// One wait that a signal may end early ([`Waited::Interrupted`]), for callers that check
    /// for Ctrl-C between waits.
    #[cfg_attr(not(feature = "python"), allow(dead_code))]
    pub(crate) fn wait_interruptible(
        &self,
        offset: u64,
        durable: bool,
        deadline: Option<Instant>,
    ) -> Result<Waited> {
        wait::wait(&self.state, offset, durable, deadline, true)
    }

    /// A registration on the store's control page that sleeps until something changes (see
    /// `read/watch.rs`): what wakes the coroutines waiting on this log.
    #[cfg_attr(not(feature = "python"), allow(dead_code))]
    pub(crate) fn watch(&self) -> Watch {
        Watch::new(Arc::clone(&self.state))
    }

    /// The state, for the unit tests of the modules below.
    #[cfg(test)]
    pub(crate) fn state(&self) -> &Arc<State> {
        &self.state
    }

    /// Records with offsets in `[start, end)` (defaults: the whole log as of this call) as Arrow
    /// record batches shaped by `opts`.
    #[cfg(feature = "arrow")]
    pub fn scan_batches(
        &self,
        start: Option<u64>,
        end: Option<u64>,
        opts: crate::arrow::BatchOptions,
    ) -> Result<crate::arrow::BatchReader> {
        opts.validate()?;
        Ok(crate::arrow::BatchReader::new(self.scan(start, end)?, opts))
    }

    /// [`CommitLog::scan_batches`] that follows the log (see [`CommitLog::follow`]): at the end
    /// of the records, the next batch waits for new ones and holds what came, at most `opts`'
    /// limits.
    #[cfg(feature = "arrow")]
    pub fn follow_batches(
        &self,
        start: Option<u64>,
        end: Option<u64>,
        follow: Follow,
        opts: crate::arrow::BatchOptions,
    ) -> Result<crate::arrow::BatchReader> {
        opts.validate()?;
        Ok(crate::arrow::BatchReader::new(
            self.follow(start, end, follow)?,
            opts,
        ))
    }

    /// Appends the records of an Arrow array, as [`CommitLog::append_batch`] does: all visible
    /// together, or none. A binary (or string) array holds bodies; a struct array (a record
    /// batch as a struct) one record a row: its `body` field, and optionally its `key` and
    /// `headers` fields (see [`crate::arrow::chunk_rows`]). A null body, an unknown field or a
    /// value of the wrong type is refused before anything is written.
    #[cfg(feature = "arrow")]
    pub fn append_array(&self, array: &dyn arrow_array::Array) -> Result<Vec<u64>> {
        let rows = crate::arrow::chunk_rows([array])?;
        Ok(self.append_encoded(&rows.bodies, &rows.props)?.offsets)
    }

    /// The first record boundary at or after `offset` (walking headers from the nearest record
    /// start known before it: its segment's, or one an earlier walk in this process noted;
    /// bodies are not checked), or `max_offset`. Lets a reader split a segment at any byte
    /// position without a scan at planning time.
    pub fn record_start_at_or_after(&self, offset: u64) -> Result<u64> {
        self.state.check_open()?;
        reader::record_start_at_or_after(&self.state, offset)
    }

    /// Offset of the first record with a timestamp at or after `timestamp_ms`, else `max_offset`.
    /// A binary search over the segments, then a walk of headers inside one from the last record
    /// start known older (one an earlier walk in this process noted, about every 1/1024 of the
    /// segment), which notes starts for the next search.
    pub fn offset_for_timestamp(&self, timestamp_ms: u64) -> Result<u64> {
        self.current()?;
        reader::offset_for_timestamp(&self.state, timestamp_ms)
    }

    /// First offset of the log.
    pub fn min_offset(&self) -> Result<u64> {
        self.current()?;
        Ok(self.state.min_offset())
    }

    /// End of the last record: where the next append goes, or the next segment's start when it
    /// does not fit.
    pub fn max_offset(&self) -> Result<u64> {
        self.current()?;
        Ok(self.state.max_offset())
    }

    /// How many records the log holds, from `min_offset` to `max_offset`, without scanning it:
    /// each segment keeps its count (see [`CommitLog::records_between`] for what may be walked).
    pub fn record_count(&self) -> Result<u64> {
        self.current()?;
        count::record_count(&self.state)
    }

    /// How many records have offsets in `[from, to)` (clamped to the log's range). Costs at most
    /// a walk of the headers of part of the segment holding `from` and of the one holding `to`.
    /// What this open does not know yet is walked once and kept: records another shared writer
    /// appended since this open last counted, and a segment whose count was never recorded (a
    /// store written by an older rmqlog: docs/format.md, `rmqlog.counts`); a remote-only segment
    /// listed without a count is read from the tier.
    pub fn records_between(&self, from: u64, to: u64) -> Result<u64> {
        self.current()?;
        count::records_between(&self.state, from, to)
    }

    /// The offsets of the records whose key is `key`, in append order; with `start_ms` and
    /// `end_ms`, of those stored in `[start_ms, end_ms)`. Reads the segments' key indexes and
    /// each candidate record (to compare its key), no other record's body; records not indexed
    /// yet (docs/messages.md) are found by walking their headers.
    pub fn lookup(
        &self,
        key: &[u8],
        start_ms: Option<u64>,
        end_ms: Option<u64>,
    ) -> Result<Vec<u64>> {
        self.current()?;
        lookup::lookup(
            &self.state,
            &self.indexes,
            Needle::Key(key),
            start_ms,
            end_ms,
        )
    }

    /// Every byte below this offset is durable.
    pub fn flushed_offset(&self) -> Result<u64> {
        self.current()?;
        Ok(self.state.flushed_offset())
    }

    /// Syncs everything appended so far, updates the checkpoint, returns `flushed_offset`.
    pub fn flush(&self) -> Result<u64> {
        self.state.check_open()?;
        if self.writer.is_none() {
            return Ok(self.state.flushed_offset());
        }
        let flushed = flush_data(&self.state)?;
        if shared::owns_background(&self.state)? {
            let _maintenance = shared::maintenance(&self.state)?;
            self.state.write_checkpoint()?;
        }
        Ok(flushed)
    }

    /// The segments in offset order.
    pub fn segments(&self) -> Result<Vec<SegmentInfo>> {
        self.current()?;
        let list = self.state.segments();
        let end = self.state.max_offset();
        let sealed = list.sealed(end).len();
        // Read after the list: a segment shipped since the list was taken shows as remote.
        let manifest = self.state.tier.as_ref().map(|t| t.manifest());
        Ok(list
            .as_slice()
            .iter()
            .enumerate()
            .filter(|(_, s)| !s.is_lost())
            .map(|(i, s)| SegmentInfo {
                start_offset: s.start(),
                path: s.path().to_path_buf(),
                size: s.size(),
                // A segment the writer is closing or has just created holds nothing published
                // past the end yet.
                written: s.written().min(end.saturating_sub(s.start())),
                sealed: i < sealed,
                local: s.is_local(),
                remote: s.is_remote_in(manifest.as_deref()),
                splits: s.remote_in(manifest.as_deref()).map_or_else(Vec::new, |e| {
                    e.splits.iter().map(|at| s.start() + at).collect()
                }),
            })
            .collect())
    }

    /// Every directory of the store, in configuration order (`paths`, then `read_only_paths`),
    /// with its state and disk usage.
    pub fn dirs(&self) -> Result<Vec<DirInfo>> {
        self.state.check_open()?;
        Ok(self.state.dir_infos())
    }

    /// The holes left by directories opened as lost (`accept_lost`): `(start, end, directory)`.
    pub fn holes(&self) -> Result<Vec<(u64, u64, PathBuf)>> {
        self.state.check_open()?;
        let list = self.state.segments();
        Ok(list
            .as_slice()
            .iter()
            .filter(|s| s.is_lost())
            .map(|s| (s.start(), s.end(), s.path().to_path_buf()))
            .collect())
    }

    /// The directories' paths, in configuration order.
    pub fn paths(&self) -> Vec<PathBuf> {
        self.state.dirs.iter().map(|d| d.path.clone()).collect()
    }

    /// Counters: appends, bytes, segments created and deleted, cleaner passes and errors.
    pub fn stats(&self) -> Result<StatsSnapshot> {
        self.state.check_open()?;
        Ok(self.state.stats.snapshot())
    }

    /// Runs one cleaning pass now; returns how many segments it deleted. `force` ignores
    /// `delete_hours` (RocketMQ's manual delete). With no retention configured (the default:
    /// see [`Options::retention_configured`](crate::Options::retention_configured)) it deletes
    /// nothing and returns 0.
    pub fn clean(&self, force: bool) -> Result<usize> {
        let _maintenance = self.maintenance("clean")?;
        if let Some(cause) = self.state.cleaner_failure() {
            return Err(Error::CleanerFailed {
                cause: cause.to_owned(),
            });
        }
        clean_pass(&self.state, force)
    }

    /// Deletes the sealed segments that end at or before `offset` (Kafka's deleteRecords, at
    /// segment granularity); returns the new `min_offset`.
    pub fn truncate_before(&self, offset: u64) -> Result<u64> {
        let _maintenance = self.maintenance("truncate_before")?;
        truncate_before(&self.state, offset)
    }

    /// Moves a sealed segment to another writable directory of the store, online. Readers switch
    /// to the new copy; records read earlier stay valid. The active segment is refused.
    pub fn move_segment(&self, start_offset: u64, dest: impl AsRef<Path>) -> Result<()> {
        let _maintenance = self.maintenance("move_segment")?;
        mover::move_segment(&self.state, start_offset, dest.as_ref())
    }

    /// Moves sealed segments from the most used to the least used directory while that narrows
    /// the gap between their used ratios, at most `max_bytes` in this call. Returns the moves.
    pub fn rebalance(&self, max_bytes: Option<u64>) -> Result<Vec<Moved>> {
        let _maintenance = self.maintenance("rebalance")?;
        mover::rebalance(&self.state, max_bytes)
    }

    /// Checks every record from `min_offset` to `max_offset` (headers, stored offsets, body CRCs)
    /// without changing anything. Returns one entry per damaged range; empty when clean.
    pub fn verify(&self) -> Result<Vec<BadRange>> {
        self.verify_with(|_, _| {})
    }

    /// [`CommitLog::verify`], calling `progress(bytes_done, bytes_total)` after each segment.
    pub fn verify_with(&self, progress: impl FnMut(u64, u64)) -> Result<Vec<BadRange>> {
        self.verify_counted(false, progress).map(|v| v.damaged)
    }

    /// [`CommitLog::verify_with`] across both tiers: the records of remote-only segments too, and
    /// every remote object read back against the manifest (length and CRC32C). Downloads the
    /// whole remote part of the log.
    pub fn verify_remote_with(&self, progress: impl FnMut(u64, u64)) -> Result<Vec<BadRange>> {
        self.verify_counted(true, progress).map(|v| v.damaged)
    }

    /// [`CommitLog::verify_with`] (with `remote`, [`CommitLog::verify_remote_with`]), also
    /// returning how many valid records it walked. A segment whose record count the log knows
    /// and whose walk finds another number is reported as damaged.
    pub fn verify_counted(&self, remote: bool, progress: impl FnMut(u64, u64)) -> Result<Verified> {
        self.state.check_open()?;
        verify::verify(&self.state, remote, progress)
    }

    /// The remote tier's state: what is local, remote, both and waiting, the last error, the
    /// counters (this open's: among shared writers, the open doing the background work ships).
    /// `None` without a tier.
    pub fn tier_status(&self) -> Result<Option<TierStatus>> {
        // A shared writer not shipping: its view and the manifest as the shipping open left them.
        self.current()?;
        shared::take_tier_manifest(&self.state);
        Ok(self.state.tier_status())
    }

    /// Whether the log was opened read-only.
    pub fn is_read_only(&self) -> bool {
        self.state.read_only
    }

    /// Whether `close` was called (or the log was inherited by a forked child).
    pub fn is_closed(&self) -> bool {
        self.state.check_open().is_err()
    }

    /// The record format this store writes, fixed when it was created (the metadata's; a new
    /// store's is [`Options::record_format`]).
    pub fn record_format(&self) -> crate::RecordFormat {
        self.state.record_format
    }

    /// The options the log was opened with.
    pub fn options(&self) -> &Options {
        &self.state.opts
    }

    /// The settings the store's writer recorded in its metadata (this log's own, for a writer):
    /// what a read-only open shows as the store's. `None` for a store that records none (written
    /// by rmqlog 0.1 and not opened by a writer since).
    pub fn recorded_settings(&self) -> Result<Option<WriterSettings>> {
        self.state.check_open()?;
        Ok(self.state.recorded_settings())
    }

    /// Read-only logs: picks up records and segments a writer appended since; returns `max_offset`.
    pub fn refresh(&self) -> Result<u64> {
        self.state.check_open()?;
        if self.writer.is_some() {
            return Ok(self.state.max_offset());
        }
        follow::refresh(&self.state)
    }

    /// Lookups that missed the O(1) segment guess and searched (segments of another size).
    pub fn fallback_lookups(&self) -> u64 {
        self.state.segments().fallback_lookups()
    }

    /// Flushes, stops the background thread and releases the lock. A second call does nothing.
    /// Records read earlier stay valid.
    pub fn close(&self) -> Result<()> {
        let leaving = self.leave_shared();
        if !self.state.mark_closed() {
            return Ok(());
        }
        self.state.wake_waiting(); // waits in this process end (`Error::Closed`)
        for locks in locked(&self.consumer_locks).drain(..) {
            if let Some(l) = locks.upgrade() {
                l.release(); // its consumer's calls fail with `Error::Closed`
            }
        }
        if let Some(tier) = &self.state.tier {
            tier.close(); // a request in flight (a hung store) must not hold up the close
        }
        let threads = std::mem::take(&mut *locked(&self.threads));
        if self.state.inherited_by_fork() {
            // A forked child: the parent's threads do not exist here and the lock descriptors were
            // closed at fork. Touch nothing on disk.
            std::mem::forget(threads);
            self.state.events.forget();
            return Ok(());
        }
        drop(threads); // stops and joins the flusher, the cleaner, the warmer and the tier thread
                       // A move in flight sees the log closed between two chunks of its copy, removes its copy
                       // and clears its intent; none starts after.
        let no_move = locked(&self.state.move_lock);
        // Waits for an append in progress (none starts after: the log is marked closed), then
        // for a change of the segment list in flight; then the last sync and checkpoint.
        // A shared writer that is not the last one out leaves the checkpoint to the others.
        let last_out = leaving.as_ref().is_none_or(|(_, alone)| *alone);
        let last = || match &self.writer {
            Some(_) if last_out => {
                flush_data(&self.state).and_then(|_| self.state.write_final_checkpoint())
            }
            Some(_) => flush_data(&self.state).map(|_| ()),
            None => Ok(()),
        };
        let result = match &self.writer {
            Some(writer) => writer.idle(|| self.state.close_segments(last)),
            None => self.state.close_segments(last),
        };
        drop(no_move);
        locked(&self.lock).take();
        if let Some(shared) = &self.state.shared {
            shared.owner.release();
        }
        drop(leaving); // the next shared writer may open or close
        self.state.wake_waiting(); // waits begun during the close end too
        self.state.release_control();
        self.state.events.stop();
        // Unmap: the files can go (or their filesystem be unmounted) once no reader holds a record.
        if let Some(writer) = &self.writer {
            writer.stop();
        }
        self.indexes.clear();
        result
    }
}

impl CommitLog {
    /// A shared writer's close begins under the join lock (no writer opens or closes meanwhile):
    /// whether it is the last one out, and then its view brought up to what the others wrote
    /// before they left. `None` for other logs, or when closed already. A failure here only
    /// costs the clean checkpoint (the next open recovers): the close goes on.
    fn leave_shared(&self) -> Option<(Option<JoinLock>, bool)> {
        let shared = self.state.shared.as_ref()?;
        self.state.check_open().ok()?;
        let join = JoinLock::take(&shared.first_dir)
            .map_err(|e| log::warn!("closing without the join lock: {e}"))
            .ok();
        let alone = join.is_some() && locked(&self.lock).as_ref().is_some_and(StoreLock::is_alone);
        // As a maintenance call: a move its process died in is finished first, since the final
        // checkpoint clears its intent.
        let caught_up = alone
            && shared::maintenance(&self.state)
                .map_err(|e| log::warn!("no clean checkpoint at this close: {e}"))
                .is_ok();
        Some((join, caught_up))
    }
}

impl Drop for CommitLog {
    fn drop(&mut self) {
        if let Err(e) = self.close() {
            log::error!("closing the commit log on drop failed: {e}");
        }
    }
}

/// A consumer's dead-letter store: another log, open as a shared writer.
struct DeadLetters(CommitLog);

impl std::fmt::Debug for DeadLetters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let dirs: Vec<&Path> = self.0.state.dirs.iter().map(|d| d.path.as_path()).collect();
        f.debug_tuple("DeadLetters").field(&dirs).finish()
    }
}

impl dead_letter::Sink for DeadLetters {
    fn end(&mut self) -> Result<u64> {
        self.0.current()?;
        self.0.max_offset()
    }

    fn each_from(&mut self, from: u64, f: &mut dyn FnMut(&[u8])) -> Result<()> {
        self.0.current()?;
        let from = from.max(self.0.state.min_offset());
        for r in self.0.scan(Some(from), None)? {
            f(r?.body());
        }
        Ok(())
    }

    fn append(&mut self, body: &[u8]) -> Result<u64> {
        self.0.append(body)
    }

    fn sync(&mut self) -> Result<()> {
        self.0.flush().map(|_| ())
    }
}
