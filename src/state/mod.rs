//! The log's shared state and its one owner: options, directories, the segment list, the offsets,
//! poison, the checkpoint, events and counters.
//!
//! Every part of the log (writer, readers, flusher, cleaner, mover, follower) works on a `&State`.
//! The segment list and `min_offset` change only through [`State::change`] (`changes.rs`); the
//! checkpoint (and `rmqlog.counts` beside it) is written only here (`meta.rs`); the published end
//! only by [`State::publish`] (the writer) and a follower's reload. Record counts live in the
//! segments (`storage::segment::Counted`), so a change of the list takes them along: a deleted
//! segment's records leave the log's count with it.
//!
//! Locks, in the order they may be taken (never the other way round):
//! 1. `move_lock` (one move at a time, for its whole copy; `close` takes it to wait for a move)
//!    and `refresh_lock` (one follower refresh at a time);
//! 2. the writer's cursor (held by an append, by a roll's cleaning pass on a full disk, and by
//!    `close` for its last sync);
//! 3. the list lock inside [`State::change`] and [`State::close_segments`];
//! 4. `checkpoint`, `flush_lock`, directory states, events: leaves, held briefly.

mod changes;
pub(crate) mod dirs;
pub(crate) mod events;
mod meta;
mod shared;
pub(crate) mod stats;

use std::path::Path;
use std::sync::atomic::{fence, AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use arc_swap::{ArcSwap, Guard};

pub(crate) use self::changes::{Change, Plan};
pub(crate) use self::shared::Shared;
use crate::error::{Error, Result};
use crate::open::lock::fork_generation;
use crate::options::Options;
use crate::shared::control::{Control, Seen};
use crate::state::dirs::{Dir, DirInfo, DirState};
use crate::state::events::Events;
use crate::state::stats::Stats;
use crate::storage::checkpoint::Checkpoint;
use crate::storage::counts::Recorded;
use crate::storage::record::Format;
use crate::storage::segments::SegmentList;
use crate::sync::locked;
use crate::tier::Tier;

/// What every part of one open log shares.
#[derive(Debug)]
pub(crate) struct State {
    pub opts: Options,
    /// The format of the records this open writes: the store's, fixed at its creation.
    pub record_format: Format,
    /// Every directory of the store: the writable ones in configuration order, then the
    /// read-only ones.
    pub dirs: Vec<Dir>,
    /// Opened with `read_only`: a follower, which never writes.
    pub read_only: bool,
    /// A shared writer (`exclusive=False`): what it adds (see `shared.rs`).
    pub shared: Option<Shared>,
    segments: ArcSwap<SegmentList>,
    /// Serialises [`State::change`]: a change is planned and applied under it.
    list_lock: Mutex<()>,
    /// End of the published records (Release by the writer, Acquire by readers).
    max_offset: AtomicU64,
    min_offset: AtomicU64,
    flushed_offset: AtomicU64,
    /// Largest timestamp published so far.
    last_timestamp_ms: AtomicU64,
    closed: AtomicBool,
    /// Fork generation at open: in a forked child the log counts as closed.
    generation: u64,
    /// Set once a sync of written data failed (or the flusher died); appends refuse from then on.
    poisoned: OnceLock<String>,
    /// Set when the cleaner thread panicked: cleaning stops, `clean()` reports it.
    clean_poison: OnceLock<String>,
    checkpoint: Mutex<Checkpoint>,
    /// What `rmqlog.counts` holds as this open last wrote or read it (`meta.rs`).
    counts_recorded: Mutex<Vec<Recorded>>,
    /// The end of the log when this open began: a segment sealed above it whose count is not
    /// known (another shared writer's records in it) is counted before the checkpoint records
    /// counts; those below are counted when first asked for.
    counts_floor: u64,
    /// Set by the close's checkpoint: no metadata is written after it.
    meta_final: AtomicBool,
    /// Serialises syncs; a sync covers everything published before it started (group commit).
    pub flush_lock: Mutex<()>,
    /// One segment move at a time (the checkpoint holds one move intent).
    pub move_lock: Mutex<()>,
    /// One follower refresh at a time.
    pub refresh_lock: Mutex<()>,
    pub events: Events,
    pub stats: Stats,
    /// The remote tier, if the store has one.
    pub tier: Option<Arc<Tier>>,
    /// The store's control page: a writer publishes there, waiters sleep there. A follower
    /// replaces it when it finds a newer one (see `wait.rs`).
    control: ArcSwap<Control>,
    /// Threads of this process in a wait on this log (so that `close` wakes them; a follower
    /// that never waits never writes the control page).
    waiting: AtomicUsize,
    /// What a follower's view of the segment list is as of (the control page's epoch and
    /// generation when it last listed the store).
    pub seen: Mutex<Seen>,
    /// Key index files this open's writer made in place of others: the maps lookups keep of
    /// the files replaced are dropped when it moves (`read/lookup.rs`).
    pub key_indexes_made: AtomicU64,
}

/// A thread waiting on the log; see [`State::enter_wait`].
#[derive(Debug)]
pub(crate) struct Waiting<'a> {
    state: &'a State,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.state.waiting.fetch_sub(1, Ordering::SeqCst);
    }
}

/// What an open hands to [`State::new`].
pub(crate) struct Parts {
    pub opts: Options,
    pub dirs: Vec<Dir>,
    pub read_only: bool,
    pub shared: Option<Shared>,
    pub list: SegmentList,
    pub end: u64,
    pub min: u64,
    pub flushed: u64,
    pub last_ts: u64,
    pub checkpoint: Checkpoint,
    /// What `rmqlog.counts` holds (a writer's open read it).
    pub counts: Vec<Recorded>,
    pub tier: Option<Arc<Tier>>,
    pub control: Arc<Control>,
}

impl State {
    pub fn new(p: Parts) -> Result<Arc<State>> {
        let events = Events::start(p.opts.on_dir_event.clone())?;
        Ok(Arc::new(State {
            record_format: p.checkpoint.records(),
            opts: p.opts,
            dirs: p.dirs,
            read_only: p.read_only,
            shared: p.shared,
            segments: ArcSwap::from_pointee(p.list),
            list_lock: Mutex::new(()),
            max_offset: AtomicU64::new(p.end),
            min_offset: AtomicU64::new(p.min),
            flushed_offset: AtomicU64::new(p.flushed),
            last_timestamp_ms: AtomicU64::new(p.last_ts),
            closed: AtomicBool::new(false),
            generation: fork_generation(),
            poisoned: OnceLock::new(),
            clean_poison: OnceLock::new(),
            checkpoint: Mutex::new(p.checkpoint),
            counts_recorded: Mutex::new(p.counts),
            counts_floor: p.end,
            meta_final: AtomicBool::new(false),
            flush_lock: Mutex::new(()),
            move_lock: Mutex::new(()),
            refresh_lock: Mutex::new(()),
            events,
            stats: Stats::default(),
            tier: p.tier,
            seen: Mutex::new(p.control.seen()),
            waiting: AtomicUsize::new(0),
            control: ArcSwap::new(p.control),
            key_indexes_made: AtomicU64::new(0),
        }))
    }

    /// The control page as of now.
    pub fn control(&self) -> Guard<Arc<Control>> {
        self.control.load()
    }

    /// The control page as of now, to keep.
    pub fn control_full(&self) -> Arc<Control> {
        self.control.load_full()
    }

    /// Counts a thread as waiting on this log until the guard goes.
    pub fn enter_wait(&self) -> Waiting<'_> {
        self.waiting.fetch_add(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        Waiting { state: self }
    }

    /// Wakes the threads of this process waiting on this log (a close: they see it).
    pub fn wake_waiting(&self) {
        fence(Ordering::SeqCst);
        if self.waiting.load(Ordering::SeqCst) > 0 {
            self.control().wake();
        }
    }

    /// A closed log lets go of the store's control file (so its filesystem can be unmounted);
    /// waits still in flight hold the old page until they see the close.
    pub fn release_control(&self) {
        match Control::private() {
            Ok(private) => self.control.store(Arc::new(private)),
            Err(e) => log::warn!("the control file stays mapped until the log is dropped: {e}"),
        }
    }

    /// A follower found a newer control page.
    pub fn set_control(&self, control: Arc<Control>) {
        self.control.store(control);
    }

    /// The segment list as of now (cheap; for one lookup).
    pub fn segments(&self) -> Guard<Arc<SegmentList>> {
        self.segments.load()
    }

    /// The segment list as of now, to keep (a scan, a plan).
    pub fn segments_full(&self) -> Arc<SegmentList> {
        self.segments.load_full()
    }

    /// End of the published records: readers never look at or past it.
    pub fn max_offset(&self) -> u64 {
        self.max_offset.load(Ordering::Acquire)
    }

    /// First offset of the log.
    pub fn min_offset(&self) -> u64 {
        self.min_offset.load(Ordering::Acquire)
    }

    /// Every byte below this offset is durable.
    pub fn flushed_offset(&self) -> u64 {
        self.flushed_offset.load(Ordering::Acquire)
    }

    /// Largest record timestamp published so far.
    pub fn last_timestamp_ms(&self) -> u64 {
        self.last_timestamp_ms.load(Ordering::Relaxed)
    }

    /// The writer publishes records up to `end` (written before this call), stamped `ts`, to
    /// this process (then, itself, to the control page); or a follower takes them in.
    pub fn publish(&self, end: u64, ts: u64) {
        self.last_timestamp_ms.fetch_max(ts, Ordering::Relaxed);
        match self.shared {
            // A reader's catch-up and this open's append may publish in either order.
            Some(_) => {
                self.max_offset.fetch_max(end, Ordering::AcqRel);
            }
            // One publisher (the writer, or a follower's refresh under its lock): ends only grow.
            None => self.max_offset.store(end, Ordering::Release),
        }
    }

    /// A sync made every byte below `offset` durable (a writer's, published to waiters; or what
    /// a follower learnt of the writer's).
    pub fn set_flushed(&self, offset: u64) {
        self.flushed_offset.fetch_max(offset, Ordering::AcqRel);
        if !self.read_only {
            self.control.load().publish_flushed(offset);
        }
    }

    /// The end readers take records up to: the published end; in a store whose writers sync each
    /// append (`flush="sync"`), the durable end below it, so that a reader sees a record once
    /// its producer is told it is appended (it is durable then), never one a power loss takes.
    pub fn readable_end(&self) -> u64 {
        let end = self.max_offset();
        match self.opts.flush.policy().each_append || self.control().sync_writers() {
            true => end.min(self.flushed_offset()),
            false => end,
        }
    }

    pub fn check_open(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) || self.generation != fork_generation() {
            return Err(Error::Closed);
        }
        Ok(())
    }

    /// Marks the log closed; true for the first caller only.
    pub fn mark_closed(&self) -> bool {
        !self.closed.swap(true, Ordering::AcqRel)
    }

    /// Whether this process is a child forked after the log was opened.
    pub fn inherited_by_fork(&self) -> bool {
        self.generation != fork_generation()
    }

    /// Appends may go on: the log is open and no sync has failed.
    pub fn check_writable(&self) -> Result<()> {
        self.check_open()?;
        self.check_not_poisoned()
    }

    /// No sync has failed. Once one has, no later sync may vouch for anything: the kernel may
    /// have dropped the pages that failed to write and counts them as clean, so a retry would
    /// succeed without writing them (the fsync-failure research fjall and PostgreSQL cite).
    pub fn check_not_poisoned(&self) -> Result<()> {
        match self.poisoned.get() {
            Some(cause) => Err(Error::WriterPoisoned {
                cause: cause.clone(),
            }),
            None => Ok(()),
        }
    }

    /// Refuses every later append: written data may not be durable (a failed sync), or the
    /// thread that makes it durable is gone. Returns the error to report.
    pub fn poison(&self, cause: String) -> Error {
        log::error!("the writer is poisoned: {cause}");
        let cause = self.poisoned.get_or_init(|| cause).clone();
        Error::WriterPoisoned { cause }
    }

    /// Why cleaning stopped, if the cleaner thread panicked.
    pub fn cleaner_failure(&self) -> Option<&str> {
        self.clean_poison.get().map(String::as_str)
    }

    pub fn set_cleaner_failure(&self, cause: String) {
        *locked(&self.stats.clean_last_error) = Some(cause.clone());
        let _ = self.clean_poison.set(cause);
    }

    pub fn range_error(&self, offset: i128) -> Error {
        Error::OffsetOutOfRange {
            offset,
            min: self.min_offset(),
            max: self.max_offset(),
        }
    }

    /// Index of the directory `path` (made absolute) names.
    pub fn dir_index(&self, path: &Path) -> Option<usize> {
        let abs = crate::open::paths::normalize(&std::path::absolute(path).ok()?);
        self.dirs.iter().position(|d| d.path == abs)
    }

    /// Sets a directory's state and reports the change.
    pub fn set_dir_state(&self, idx: usize, state: DirState, reason: Option<String>) {
        if let Some(ev) = self.dirs[idx].set_state(state, reason) {
            self.events.send(ev);
        }
    }

    /// A snapshot of every directory: usage read now, state as last judged, segment counts
    /// (plus `pending`: segments being created, not yet listed).
    pub fn dir_infos_with(&self, pending: &[usize]) -> Vec<DirInfo> {
        let list = self.segments();
        let mut counts = vec![0usize; self.dirs.len()];
        for dir in list
            .as_slice()
            .iter()
            .map(|s| s.dir())
            .chain(pending.iter().copied())
        {
            if let Some(c) = counts.get_mut(dir) {
                *c += 1;
            }
        }
        self.dirs
            .iter()
            .zip(counts)
            .map(|(d, segments)| {
                let (state, error) = d.state();
                let usage = d.usage();
                DirInfo {
                    path: d.path.clone(),
                    state,
                    total_bytes: usage.map(|u| u.total_bytes),
                    free_bytes: usage.map(|u| u.free_bytes),
                    used_ratio: usage.map(|u| u.used_ratio()),
                    segments,
                    error,
                }
            })
            .collect()
    }

    /// [`State::dir_infos_with`] nothing pending.
    pub fn dir_infos(&self) -> Vec<DirInfo> {
        self.dir_infos_with(&[])
    }
}
