//! The `CommitLog` facade and the state its parts share.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use arc_swap::ArcSwap;

use crate::background::Periodic;
use crate::checkpoint::Checkpoint;
use crate::cleaner::start_cleaner;
use crate::dirs::{usage, Dir, DirInfo, DirState};
use crate::error::{Error, Result};
use crate::events::Events;
use crate::flusher::start_flusher;
use crate::lock::{fork_generation, StoreLock};
use crate::options::{FlushMode, Options};
use crate::reader::{RecordRef, Scan};
use crate::segments::SegmentList;
use crate::stats::{Stats, StatsSnapshot};
use crate::writer::Writer;

/// A segmented, memory-mapped commit log spread over one or more directories.
///
/// Appends are serialised; reads never wait for the writer. All methods take `&self` and the log
/// is `Send + Sync`.
#[derive(Debug)]
pub struct CommitLog {
    shared: Arc<Shared>,
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
    /// Bytes in use: the end of the records in the active segment; the whole file (records and
    /// end-of-segment filler) in a sealed one.
    pub written: u64,
}

/// State shared by the facade, the writer, the background threads and open readers.
#[derive(Debug)]
pub(crate) struct Shared {
    pub opts: Options,
    /// Every directory of the store: the writable ones in configuration order, then the
    /// read-only ones.
    pub dirs: Vec<Dir>,
    pub segments: ArcSwap<SegmentList>,
    /// End of the published records (Release by the writer, Acquire by readers).
    pub max_offset: AtomicU64,
    pub min_offset: AtomicU64,
    pub flushed_offset: AtomicU64,
    /// Largest timestamp published so far.
    pub last_timestamp_ms: AtomicU64,
    pub closed: AtomicBool,
    /// Fork generation at open: in a forked child the log counts as closed.
    pub generation: u64,
    /// `None` for a read-only log.
    pub writer: Option<Mutex<Writer>>,
    /// Set once a sync of written data failed; appends refuse from then on.
    pub poisoned: OnceLock<String>,
    /// Serialises syncs; a sync covers everything published before it started (group commit).
    pub flush_lock: Mutex<()>,
    pub checkpoint: Mutex<Checkpoint>,
    /// Serialises `refresh` of a read-only log, and cleaning passes of a writer.
    pub refresh_lock: Mutex<()>,
    pub clean_lock: Mutex<()>,
    /// Set when the cleaner thread panicked: cleaning stops, `clean()` reports it.
    pub clean_poison: Mutex<Option<String>>,
    pub lock: Mutex<Option<StoreLock>>,
    pub events: Events,
    pub stats: Stats,
    pub threads: Mutex<Threads>,
}

/// The background threads of a writer, stopped and joined on drop.
#[derive(Debug, Default)]
pub(crate) struct Threads {
    pub flusher: Option<Periodic>,
    pub cleaner: Option<Periodic>,
}

/// What open hands to [`Shared::new`].
pub(crate) struct SharedParts {
    pub opts: Options,
    pub dirs: Vec<Dir>,
    pub list: SegmentList,
    pub end: u64,
    pub min: u64,
    pub flushed: u64,
    pub last_ts: u64,
    pub writer: Option<Writer>,
    pub checkpoint: Checkpoint,
    pub lock: Option<StoreLock>,
}

/// Locks a mutex, recovering from poisoning: every critical section here leaves consistent state.
pub(crate) fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Shared {
    pub fn new(p: SharedParts) -> Result<Arc<Shared>> {
        let events = Events::start(p.opts.on_dir_event.clone())?;
        Ok(Arc::new(Shared {
            opts: p.opts,
            dirs: p.dirs,
            segments: ArcSwap::from_pointee(p.list),
            max_offset: AtomicU64::new(p.end),
            min_offset: AtomicU64::new(p.min),
            flushed_offset: AtomicU64::new(p.flushed),
            last_timestamp_ms: AtomicU64::new(p.last_ts),
            closed: AtomicBool::new(false),
            generation: fork_generation(),
            writer: p.writer.map(Mutex::new),
            poisoned: OnceLock::new(),
            flush_lock: Mutex::new(()),
            checkpoint: Mutex::new(p.checkpoint),
            refresh_lock: Mutex::new(()),
            clean_lock: Mutex::new(()),
            clean_poison: Mutex::new(None),
            lock: Mutex::new(p.lock),
            events,
            stats: Stats::default(),
            threads: Mutex::new(Threads::default()),
        }))
    }

    /// Starts a writer's background threads: the flusher (unless `FlushMode::None`) and the
    /// cleaner (unless its interval is zero).
    pub fn start_threads(self: &Arc<Self>) -> Result<()> {
        let mut t = locked(&self.threads);
        if self.opts.flush != FlushMode::None {
            t.flusher = Some(start_flusher(self)?);
        }
        if !self.opts.clean_interval.is_zero() {
            t.cleaner = Some(start_cleaner(self)?);
        }
        Ok(())
    }

    pub fn check_open(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) || self.generation != fork_generation() {
            return Err(Error::Closed);
        }
        Ok(())
    }

    pub fn range_error(&self, offset: i128) -> Error {
        Error::OffsetOutOfRange {
            offset,
            min: self.min_offset.load(Ordering::Acquire),
            max: self.max_offset.load(Ordering::Acquire),
        }
    }

    /// Sets a directory's state and reports the change.
    pub fn set_dir_state(&self, idx: usize, state: DirState, reason: Option<String>) {
        if let Some(ev) = self.dirs[idx].set_state(state, reason) {
            self.events.send(ev);
        }
    }

    /// A snapshot of every directory: usage read now, state as last judged, segment counts.
    pub fn dir_infos(&self) -> Vec<DirInfo> {
        let list = self.segments.load();
        let mut counts = vec![0usize; self.dirs.len()];
        for s in list.as_slice() {
            if let Some(c) = counts.get_mut(s.dir()) {
                *c += 1;
            }
        }
        self.dirs
            .iter()
            .zip(counts)
            .map(|(d, segments)| {
                let (state, error) = d.state();
                let usage = usage(&d.path).ok();
                DirInfo {
                    path: d.path.clone(),
                    state,
                    total_bytes: usage.map_or(0, |u| u.total_bytes),
                    free_bytes: usage.map_or(0, |u| u.free_bytes),
                    used_ratio: usage.map(|u| u.used_ratio()),
                    segments,
                    error,
                }
            })
            .collect()
    }
}

impl CommitLog {
    /// Opens (or creates) the log stored in `paths`, one directory per disk.
    ///
    /// A writer creates missing directories, takes the store's lock and recovers the tail after a
    /// crash; `Options::read_only` opens without the lock and never writes.
    pub fn open<P: AsRef<Path>>(paths: &[P], opts: Options) -> Result<CommitLog> {
        let shared = crate::open::open(paths, opts)?;
        Ok(CommitLog { shared })
    }

    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// Appends one record and returns its physical offset.
    pub fn append(&self, body: &[u8]) -> Result<u64> {
        let mut offset = 0;
        self.shared.append_with(&[body], |o| offset = o)?;
        Ok(offset)
    }

    /// Appends every body under one lock acquisition; all become visible to readers at once, or
    /// none does (every body is validated before any is written).
    pub fn append_batch<B: AsRef<[u8]>>(&self, bodies: &[B]) -> Result<Vec<u64>> {
        let mut offsets = Vec::with_capacity(bodies.len());
        self.shared.append_with(bodies, |o| offsets.push(o))?;
        Ok(offsets)
    }

    /// Appends without waiting: `Ok(None)` when the writer is busy or the append needs slow work
    /// (a new segment, a sync, a record of 16 KiB or more). Lets a caller holding another lock
    /// (Python's GIL) avoid blocking; at most it warms the next 256 KiB of the page cache.
    pub fn try_append(&self, body: &[u8]) -> Result<Option<u64>> {
        self.shared.try_append(body)
    }

    /// The record at `offset`, validated (header and body CRC); the guard keeps its map alive.
    pub fn read(&self, offset: u64) -> Result<RecordRef> {
        self.shared.check_open()?;
        self.shared.read(offset)
    }

    /// Records with offsets in `[start, end)` (defaults: the whole log as of this call).
    pub fn scan(&self, start: Option<u64>, end: Option<u64>) -> Result<Scan> {
        self.shared.check_open()?;
        Scan::new(Arc::clone(&self.shared), start, end)
    }

    /// Offset of the first record with a timestamp at or after `timestamp_ms`, else `max_offset`.
    pub fn offset_for_timestamp(&self, timestamp_ms: u64) -> Result<u64> {
        self.shared.check_open()?;
        self.shared.offset_for_timestamp(timestamp_ms)
    }

    /// First offset of the log.
    pub fn min_offset(&self) -> Result<u64> {
        self.shared.check_open()?;
        Ok(self.shared.min_offset.load(Ordering::Acquire))
    }

    /// End of the last record: where the next append goes, or the next segment's start when it
    /// does not fit.
    pub fn max_offset(&self) -> Result<u64> {
        self.shared.check_open()?;
        Ok(self.shared.max_offset.load(Ordering::Acquire))
    }

    /// Every byte below this offset is durable.
    pub fn flushed_offset(&self) -> Result<u64> {
        self.shared.check_open()?;
        Ok(self.shared.flushed_offset.load(Ordering::Acquire))
    }

    /// Syncs everything appended so far, updates the checkpoint, returns `flushed_offset`.
    pub fn flush(&self) -> Result<u64> {
        self.shared.check_open()?;
        if self.shared.writer.is_none() {
            return Ok(self.shared.flushed_offset.load(Ordering::Acquire));
        }
        let flushed = self.shared.flush_data()?;
        self.shared.write_checkpoint(false)?;
        Ok(flushed)
    }

    /// The segments in offset order.
    pub fn segments(&self) -> Result<Vec<SegmentInfo>> {
        self.shared.check_open()?;
        let list = self.shared.segments.load();
        Ok(list
            .as_slice()
            .iter()
            .filter(|s| !s.is_lost())
            .map(|s| SegmentInfo {
                start_offset: s.start(),
                path: s.path().to_path_buf(),
                size: s.size(),
                written: s.written(),
            })
            .collect())
    }

    /// Every directory of the store, in configuration order (`paths`, then `read_only_paths`),
    /// with its state and disk usage.
    pub fn dirs(&self) -> Result<Vec<DirInfo>> {
        self.shared.check_open()?;
        Ok(self.shared.dir_infos())
    }

    /// The holes left by directories opened as lost (`accept_lost`): `(start, end, directory)`.
    pub fn holes(&self) -> Result<Vec<(u64, u64, PathBuf)>> {
        self.shared.check_open()?;
        let list = self.shared.segments.load();
        Ok(list
            .as_slice()
            .iter()
            .filter(|s| s.is_lost())
            .map(|s| (s.start(), s.end(), s.path().to_path_buf()))
            .collect())
    }

    /// The directories' paths, in configuration order.
    pub fn paths(&self) -> Vec<PathBuf> {
        self.shared.dirs.iter().map(|d| d.path.clone()).collect()
    }

    /// Counters: appends, bytes, segments created and deleted, cleaner passes and errors.
    pub fn stats(&self) -> Result<StatsSnapshot> {
        self.shared.check_open()?;
        Ok(self.shared.stats.snapshot())
    }

    /// Runs one cleaning pass now; returns how many segments it deleted. `force` ignores
    /// `delete_hours` (RocketMQ's manual delete).
    pub fn clean(&self, force: bool) -> Result<usize> {
        self.shared.check_open()?;
        if self.shared.writer.is_none() {
            return Err(Error::ReadOnly("clean"));
        }
        if let Some(cause) = locked(&self.shared.clean_poison).clone() {
            return Err(Error::CleanerFailed { cause });
        }
        self.shared.clean_pass(force)
    }

    /// Deletes the sealed segments that end at or before `offset` (Kafka's deleteRecords, at
    /// segment granularity); returns the new `min_offset`.
    pub fn truncate_before(&self, offset: u64) -> Result<u64> {
        self.shared.check_open()?;
        if self.shared.writer.is_none() {
            return Err(Error::ReadOnly("truncate_before"));
        }
        self.shared.truncate_before(offset)
    }

    /// Whether the log was opened read-only.
    pub fn is_read_only(&self) -> bool {
        self.shared.writer.is_none()
    }

    /// Whether `close` was called (or the log was inherited by a forked child).
    pub fn is_closed(&self) -> bool {
        self.shared.check_open().is_err()
    }

    /// The options the log was opened with.
    pub fn options(&self) -> &Options {
        &self.shared.opts
    }

    /// Read-only logs: picks up records and segments a writer appended since; returns `max_offset`.
    pub fn refresh(&self) -> Result<u64> {
        self.shared.check_open()?;
        if self.shared.writer.is_some() {
            return Ok(self.shared.max_offset.load(Ordering::Acquire));
        }
        crate::follow::refresh(&self.shared)
    }

    /// Lookups that missed the O(1) segment guess and searched (segments of another size).
    pub fn fallback_lookups(&self) -> u64 {
        self.shared.segments.load().fallback_lookups()
    }

    /// Flushes, stops the background thread and releases the lock. A second call does nothing.
    /// Records read earlier stay valid.
    pub fn close(&self) -> Result<()> {
        self.shared.close()
    }
}

impl Drop for CommitLog {
    fn drop(&mut self) {
        if let Err(e) = self.shared.close() {
            log::error!("closing the commit log on drop failed: {e}");
        }
    }
}

impl Shared {
    pub fn close(&self) -> Result<()> {
        if self.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        let threads = std::mem::take(&mut *locked(&self.threads));
        if self.generation != fork_generation() {
            // A forked child: the parent's threads do not exist here and the lock descriptors were
            // closed at fork. Touch nothing on disk.
            std::mem::forget(threads);
            self.events.forget();
            return Ok(());
        }
        drop(threads); // stops and joins the flusher and the cleaner
        let result = match &self.writer {
            Some(writer) => {
                let _writer = locked(writer); // waits for an append in progress
                self.flush_data().and_then(|_| self.write_checkpoint(true))
            }
            None => Ok(()),
        };
        locked(&self.lock).take();
        self.events.stop();
        // Unmap: the files can go (or their filesystem be unmounted) once no reader holds a record.
        if let Some(writer) = &self.writer {
            locked(writer).stop();
        }
        self.segments
            .store(Arc::new(self.segments.load().truncated_before(0)));
        result
    }
}
