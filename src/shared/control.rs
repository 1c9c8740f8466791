//! `rmqlog.ctl`: the store's control file, one page mapped shared by every process that has the
//! store open. The writer publishes the log's end, its flushed end and a generation of the
//! segment list there; a process waiting for records sleeps on a futex in it and is woken by the
//! append that publishes them, whichever process it runs in.
//!
//! What it holds is volatile: a writer's open rewrites it from what recovery found (bumping the
//! epoch), so it is never trusted for data. A follower treats the end as a hint to validate the
//! records below it (CRCs), and a new epoch or generation as a reason to list the store again.
//!
//! Where: the first writable directory of the writer that opened last. A writer retires the
//! copies it finds in the store's other directories (another order of `paths` at an earlier
//! open), so a follower that mapped one of those learns to look again.
//!
//! Waking costs an append nothing while nobody waits: a waiter registers in `waiters` before it
//! reads `seq` and the end, and the writer, after storing the end, bumps `seq` and calls
//! `FUTEX_WAKE` only when `waiters` is non-zero (both sides order their store before their load
//! with a full fence, so one of them sees the other). Every process that maps the file holds a
//! shared `flock` on it; a writer that gets it exclusively at open knows no process is mapped
//! and resets `waiters` (which a waiter killed while registered leaves one too high: the cost is
//! then one futex wake per append until that reset).

use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{fence, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::time::{Duration, Instant};

use memmap2::{MmapOptions, MmapRaw};

use crate::error::{Error, Result};
use crate::interrupt;
use crate::shared::append_lock::{AppendLock, Taken, LOCK_LEN, MUTEX_LEN};
use crate::shared::futex::{self, Woken};

/// Name of the control file.
pub const CONTROL_FILE: &str = "rmqlog.ctl";
/// Length of the file: one page.
const LEN: usize = 4096;
const MAGIC: u64 = u64::from_le_bytes(*b"RMQLCTL1");
/// 3: the repair-pending word and the PID namespace of the writers.
const VERSION: u32 = 3;
/// `flags`: a newer control file of the store lives in another directory.
const RETIRED: u32 = 1;

/// The words at the start of the page. Every field is an atomic: other processes read and write
/// them concurrently.
#[repr(C)]
struct Words {
    magic: AtomicU64,
    version: AtomicU32,
    flags: AtomicU32,
    /// When the writer that rewrote it opened (ns since boot, `CLOCK_BOOTTIME`: no clock step
    /// reorders the copies): the newest copy wins.
    opened_ns: AtomicU64,
    /// Bumped by each writer's open: what a follower knew may have been cut by recovery.
    epoch: AtomicU64,
    /// Every byte below it is durable.
    flushed: AtomicU64,
    /// The futex word: bumped when waiters are to look again.
    seq: AtomicU32,
    /// How many waiters are registered (see the module docs).
    waiters: AtomicU32,
    /// The inode of the file the writer that rewrote it mapped (a copy of the file elsewhere is
    /// not that file).
    ino: AtomicU64,
    /// Length of the page-cache id at `CACHE_AT` (0: none).
    cache_len: AtomicU32,
    /// The largest timestamp published (shared writers keep timestamps monotonic across them).
    last_ts: AtomicU64,
    /// Shared writers: the log offset below which the active segment's page cache is warm (see
    /// `active_file.rs`), so that each warms what no other did.
    warmed: AtomicU64,
    /// Non-zero while the tail past `end` awaits a repair: set by the taker that found the lock's
    /// holder dead, before it marks the lock consistent; cleared when the repair is done. A
    /// repair that fails (an I/O error) leaves it set, and the next taker repairs.
    repair_pending: AtomicU32,
    _pad: AtomicU32,
    /// The PID namespace of the writers (`/proc/self/ns/pid`'s inode): the lock names its holder
    /// by thread id, which means one thread only within one namespace.
    pid_ns: AtomicU64,
    /// Non-zero when a writer of the store syncs each append (`flush="sync"`): readers then take
    /// records up to the flushed end only, so that they see a record once it is durable, as its
    /// producer does.
    sync_writers: AtomicU32,
}

/// Where the writer records which page cache the end lives in (`tail_hint::page_cache_id`), so
/// that the next writer's recovery trusts the end only within the same one (see
/// [`Control::published_end`]), as atomic bytes.
const CACHE_AT: usize = 2048;
const CACHE_MAX: usize = LEN - CACHE_AT;
/// How long a waiter for the append lock sleeps before it looks at its bound, its page and
/// whether to give up.
pub(crate) const LOCK_SLICE: Duration = Duration::from_millis(100);
/// Tries of the append lock before a waiter sleeps (with growing pauses: about 2 us in all).
const SPIN_ROUNDS: u32 = 12;
/// Where the shared writers' append lock lives ([`AppendLock`]), at the start of a cache line.
const LOCK_AT: usize = 1024;
/// Where [`Hot`] lives: right after the lock, in the same cache line.
const HOT_AT: usize = LOCK_AT + MUTEX_LEN;

/// The words every append reads and writes, beside the append lock in one cache line: a holder
/// hands the lock and all of them to the next one (on another core) in one transfer.
#[repr(C)]
struct Hot {
    /// The end of the published records.
    end: AtomicU64,
    /// Shared writers: the end the holder of the append lock will have written when it
    /// publishes. Above `end` only while an append is under way, or its holder died in it.
    reserved: AtomicU64,
    /// Bumped by every change of the segment list (roll, deletion, move).
    generation: AtomicU64,
}

const _: () = assert!(std::mem::size_of::<Words>() <= LOCK_AT);
const _: () = assert!(HOT_AT + std::mem::size_of::<Hot>() <= LOCK_AT + 64);
const _: () = assert!(LOCK_AT + LOCK_LEN <= CACHE_AT);

/// What a follower last knew of the store through the control file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Seen {
    pub epoch: u64,
    pub generation: u64,
}

/// A mapped control page: a store's `rmqlog.ctl`, or a private page when there is none (waits
/// then work only within this process).
#[derive(Debug)]
pub(crate) struct Control {
    map: MmapRaw,
    /// The file, holding a shared `flock` while mapped; `None` for a private page.
    file: Option<(File, PathBuf)>,
    /// The page may be written (a read-only follower's may not: it cannot register to be woken).
    writable: bool,
    /// A writer's private page: why no directory took the file (the first error).
    not_made: Option<std::io::Error>,
}

impl Control {
    /// A private page: waits and wakes within this process only.
    pub fn private() -> std::io::Result<Control> {
        let map = MmapRaw::from(MmapOptions::new().len(LEN).map_anon()?);
        let c = Control {
            map,
            file: None,
            writable: true,
            not_made: None,
        };
        c.words().magic.store(MAGIC, Ordering::Relaxed);
        c.words().version.store(VERSION, Ordering::Relaxed);
        c.append_lock().init()?;
        Ok(c)
    }

    /// A writer's open: the control file in the first of `dirs` that takes it, rewritten with
    /// `end` and `flushed` under a new epoch, naming the page cache `cache` it lives in; the
    /// copies in the other directories are retired. Falls back to a private page (logged) when
    /// no directory takes it.
    pub fn create(
        dirs: &[&Path],
        end: u64,
        flushed: u64,
        last_ts: u64,
        cache: Option<&str>,
        mode: u32,
    ) -> std::io::Result<Control> {
        let mut chosen = None;
        let mut first_error = None;
        for dir in dirs {
            let path = dir.join(CONTROL_FILE);
            match open_file(&path, true, mode) {
                Ok(c) => {
                    chosen = Some(c);
                    break;
                }
                Err(e) => {
                    log::warn!("no control file in {}: {e}", dir.display());
                    first_error.get_or_insert(e);
                }
            }
        }
        let Some(c) = chosen else {
            log::warn!("waits for records work within this process only (no control file)");
            let mut c = Control::private()?;
            c.not_made = first_error;
            c.hot().end.store(end, Ordering::Release);
            c.hot().reserved.store(end, Ordering::Release);
            c.words().flushed.store(flushed, Ordering::Release);
            return Ok(c);
        };
        let w = c.words();
        if let Some((file, _)) = &c.file {
            // No other process maps it: a count left by a killed waiter goes.
            if file.try_lock().is_ok() {
                w.waiters.store(0, Ordering::Relaxed);
            }
            if let Err(e) = file.lock_shared() {
                log::debug!("control file lock: {e}");
            }
        }
        let valid = w.magic.load(Ordering::Acquire) == MAGIC;
        let epoch = if valid {
            w.epoch.load(Ordering::Acquire)
        } else {
            w.waiters.store(0, Ordering::Relaxed);
            w.seq.store(0, Ordering::Relaxed);
            0
        };
        c.hot().end.store(end, Ordering::Release);
        c.hot().reserved.store(end, Ordering::Release);
        w.repair_pending.store(0, Ordering::Release);
        w.pid_ns.store(pid_namespace(), Ordering::Release);
        w.sync_writers.store(0, Ordering::Release);
        w.warmed.store(end, Ordering::Release);
        w.flushed.store(flushed, Ordering::Release);
        w.last_ts.store(last_ts, Ordering::Release);
        // The opener holds the store alone: no process takes the old lock any more.
        c.append_lock().init()?;
        c.set_cache(cache);
        c.hot().generation.fetch_add(1, Ordering::AcqRel);
        w.opened_ns.store(
            crate::clock::boot_time().as_nanos() as u64,
            Ordering::Release,
        );
        w.version.store(VERSION, Ordering::Release);
        w.flags.store(0, Ordering::Release);
        w.magic.store(MAGIC, Ordering::Release);
        w.epoch.store(epoch.wrapping_add(1), Ordering::Release);
        let own = c.path().map(Path::to_path_buf);
        for dir in dirs {
            let path = dir.join(CONTROL_FILE);
            if Some(&path) != own.as_ref() && path.exists() {
                if let Ok(old) = open_file(&path, false, mode) {
                    old.retire();
                }
            }
        }
        c.wake();
        Ok(c)
    }

    /// A follower's open: the newest control file in `dirs` that no writer retired, if any.
    pub fn find(dirs: &[&Path]) -> Option<Control> {
        dirs.iter()
            .filter_map(|d| {
                let path = d.join(CONTROL_FILE);
                open_file(&path, false, 0)
                    .or_else(|_| open_read_only(&path))
                    .ok()
            })
            .filter(|c| c.is_live())
            .max_by_key(|c| c.words().opened_ns.load(Ordering::Acquire))
    }

    /// The end the last writer of the store published, if its control file in `dirs` says it
    /// lives in the page cache `cache` (this boot, the same mounts: what that writer left in the
    /// maps is still there) and is the very file that writer mapped. Records found past it were
    /// never acknowledged: its writer died before publishing them.
    pub fn published_end(dirs: &[&Path], cache: &str) -> Option<u64> {
        Control::find(dirs)?.end_in(cache)
    }

    /// This page's published end, if it is live and names the page cache `cache` (see
    /// [`Control::published_end`]).
    pub fn end_in(&self, cache: &str) -> Option<u64> {
        let (file, _) = self.file.as_ref()?;
        let ino = std::os::unix::fs::MetadataExt::ino(&file.metadata().ok()?);
        let w = self.words();
        let len = w.cache_len.load(Ordering::Acquire) as usize;
        if !self.is_live() || w.ino.load(Ordering::Acquire) != ino || len != cache.len() {
            return None;
        }
        let same = cache
            .bytes()
            .enumerate()
            .all(|(i, b)| self.cache_byte(i).load(Ordering::Relaxed) == b);
        same.then(|| self.end())
    }

    /// Byte `i` of the page-cache id (`i < CACHE_MAX`). Read and written as atomics: a
    /// follower may read while a writer's open writes.
    fn cache_byte(&self, i: usize) -> &AtomicU8 {
        assert!(i < CACHE_MAX);
        // SAFETY: CACHE_AT + i < LEN: inside the map, which lives as long as `self`; every
        // process accesses these bytes only as atomics.
        unsafe { AtomicU8::from_ptr(self.map.as_mut_ptr().add(CACHE_AT + i)) }
    }

    /// Records the page cache the file lives in (see [`Control::published_end`]).
    fn set_cache(&self, cache: Option<&str>) {
        let w = self.words();
        let Some((file, _)) = &self.file else {
            return;
        };
        let cache = cache.filter(|c| c.len() <= CACHE_MAX).unwrap_or("");
        let ino = file
            .metadata()
            .map_or(0, |m| std::os::unix::fs::MetadataExt::ino(&m));
        w.cache_len.store(0, Ordering::Release);
        for (i, b) in cache.bytes().enumerate() {
            self.cache_byte(i).store(b, Ordering::Relaxed);
        }
        w.ino.store(ino, Ordering::Release);
        w.cache_len.store(cache.len() as u32, Ordering::Release);
    }

    /// A follower's page: the store's control file in `dirs`, or a private page until a writer
    /// makes one (its waits then poll; see `wait.rs`).
    pub fn of_store(dirs: &[&Path]) -> std::io::Result<Control> {
        match Control::find(dirs) {
            Some(c) => Ok(c),
            None => Control::private(),
        }
    }

    fn hot(&self) -> &Hot {
        // SAFETY: HOT_AT is 8-byte aligned and HOT_AT + size_of::<Hot>() <= LEN, in the map that
        // lives as long as `self`; every process accesses it only through these atomics.
        unsafe { &*(self.map.as_ptr().add(HOT_AT) as *const Hot) }
    }

    fn words(&self) -> &Words {
        // SAFETY: the map is page-aligned and LEN (>= size_of::<Words>()) bytes long, lives as
        // long as `self`, and is only ever accessed through these atomics (in every process).
        unsafe { &*(self.map.as_ptr() as *const Words) }
    }

    /// The file, or `None` for a private page.
    pub fn path(&self) -> Option<&Path> {
        self.file.as_ref().map(|(_, p)| p.as_path())
    }

    /// `Ok` if this process maps the page for writing; else the error opening it so gave
    /// (a shared writer takes the lock in it: a read-only map would fault).
    pub fn check_writable(&self) -> Result<()> {
        match (&self.file, self.writable) {
            (Some((_, path)), false) => {
                let e = OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open(path)
                    .err()
                    .unwrap_or_else(|| std::io::ErrorKind::PermissionDenied.into());
                Err(Error::io(
                    "opening the control page for writing (shared writers take their lock in it)",
                    path,
                    e,
                ))
            }
            _ => Ok(()),
        }
    }

    /// A private page of a writer: why no directory took the control file.
    pub fn not_made(&self) -> Option<&std::io::Error> {
        self.not_made.as_ref()
    }

    /// Whether other processes see this page (a store's control file).
    pub fn is_shared(&self) -> bool {
        self.file.is_some()
    }

    /// A rewritten, not retired control file.
    pub fn is_live(&self) -> bool {
        let w = self.words();
        w.magic.load(Ordering::Acquire) == MAGIC
            && w.version.load(Ordering::Acquire) == VERSION
            && w.flags.load(Ordering::Acquire) & RETIRED == 0
    }

    pub fn end(&self) -> u64 {
        self.hot().end.load(Ordering::Acquire)
    }

    pub fn flushed(&self) -> u64 {
        self.words().flushed.load(Ordering::Acquire)
    }

    pub fn seen(&self) -> Seen {
        let w = self.words();
        Seen {
            epoch: w.epoch.load(Ordering::Acquire),
            generation: self.hot().generation.load(Ordering::Acquire),
        }
    }

    /// The segment list's generation.
    #[inline]
    pub fn generation(&self) -> u64 {
        self.hot().generation.load(Ordering::Acquire)
    }

    /// The largest timestamp published.
    pub fn last_ts(&self) -> u64 {
        self.words().last_ts.load(Ordering::Acquire)
    }

    /// The end the holder of the append lock is writing to (see [`Words::reserved`]).
    pub fn reserved(&self) -> u64 {
        self.hot().reserved.load(Ordering::Acquire)
    }

    /// Where the active segment is warm up to (a log offset; see [`Words::warmed`]).
    #[inline]
    pub fn warmed(&self) -> u64 {
        self.words().warmed.load(Ordering::Acquire)
    }

    /// The holder of the append lock warmed the active segment up to `offset` (only the holder
    /// writes it: no read-modify-write needed).
    #[inline]
    pub fn note_warmed(&self, offset: u64) {
        let w = &self.words().warmed;
        if offset > w.load(Ordering::Relaxed) {
            w.store(offset, Ordering::Release);
        }
    }

    /// The holder of the append lock is about to write up to `end`: before its first byte.
    #[inline]
    pub fn reserve(&self, end: u64) {
        self.hot().reserved.store(end, Ordering::Release);
    }

    /// The writer published records up to `end` (stamped up to `ts`).
    #[inline]
    pub fn publish_end(&self, end: u64, ts: u64) {
        let w = self.words();
        // Writers publish one at a time (the store lock, or the append lock): no RMW needed.
        if ts > w.last_ts.load(Ordering::Relaxed) {
            w.last_ts.store(ts, Ordering::Release);
        }
        let hot = self.hot();
        hot.reserved.store(end, Ordering::Release);
        hot.end.store(end, Ordering::Release);
        self.notify();
    }

    /// `Ok` if the page is still the one the shared writers share, as this open knows it: its
    /// identity (magic, version, not retired), the `epoch` it joined under, and an end and a
    /// generation no lower than it has seen. Anything else is a page damaged or re-made under
    /// the writers: appending by it could write over acknowledged records.
    pub fn check_intact(&self, epoch: u64, end: u64, generation: u64) -> Result<()> {
        let w = self.words();
        let reason = if w.magic.load(Ordering::Acquire) != MAGIC {
            "its magic is gone (zeroed or overwritten)".to_string()
        } else if w.version.load(Ordering::Acquire) != VERSION {
            format!("its version is {}", w.version.load(Ordering::Acquire))
        } else if w.flags.load(Ordering::Acquire) & RETIRED != 0 {
            "it was retired by another writer's open".to_string()
        } else if w.epoch.load(Ordering::Acquire) != epoch {
            format!(
                "its epoch is {}, not {epoch}: another open re-made it",
                w.epoch.load(Ordering::Acquire)
            )
        } else if self.end().max(self.reserved()) < end {
            // (A writer of this open publishes to its view just before the page: the end it is
            // writing to is in the page by then.)
            format!("its end {} is below {end}, published before", self.end())
        } else if self.generation() < generation {
            format!(
                "its generation {} is below {generation}, seen before",
                self.generation()
            )
        } else {
            return Ok(());
        };
        Err(self.damaged(&reason))
    }

    fn damaged(&self, reason: &str) -> Error {
        Error::Corruption {
            path: self.path().map(Path::to_path_buf),
            offset: None,
            reason: format!(
                "the shared writers' control page {CONTROL_FILE} is damaged: {reason}; nothing \
                 is appended by it (close every writer of the store; the next open makes it anew)"
            ),
        }
    }

    /// Whether the file this page maps is no longer the store's: unlinked, or shorter than a
    /// page (another process truncated it).
    pub fn file_replaced(&self) -> bool {
        let Some((file, _)) = &self.file else {
            return false;
        };
        match file.metadata() {
            Ok(m) => std::os::unix::fs::MetadataExt::nlink(&m) == 0 || m.len() < LEN as u64,
            Err(_) => true,
        }
    }

    /// Whether the tail awaits a repair (see [`Words::repair_pending`]).
    pub fn repair_pending(&self) -> bool {
        self.words().repair_pending.load(Ordering::Acquire) != 0
    }

    /// Marks the tail as awaiting a repair, or repaired (the append lock held).
    pub fn set_repair_pending(&self, pending: bool) {
        let w = &self.words().repair_pending;
        w.store(u32::from(pending), Ordering::Release);
    }

    /// A writer that syncs each append uses the page (see [`Words::sync_writers`]).
    pub fn note_sync_writer(&self) {
        self.words().sync_writers.store(1, Ordering::Release);
    }

    /// Whether readers take records up to the flushed end only (see [`Words::sync_writers`]).
    pub fn sync_writers(&self) -> bool {
        self.words().sync_writers.load(Ordering::Acquire) != 0
    }

    /// The PID namespace the store's writers run in (0: not recorded).
    pub fn pid_ns(&self) -> u64 {
        self.words().pid_ns.load(Ordering::Acquire)
    }

    /// A repair cut the tail back to `end` (the append lock held).
    pub fn cut_to(&self, end: u64) {
        let hot = self.hot();
        hot.reserved.store(end, Ordering::Release);
        hot.end.store(end, Ordering::Release);
    }

    /// Takes the shared writers' append lock (see [`AppendLock`]); the guard lets go. A holder
    /// keeps it for the length of one append (a fraction of a microsecond for a small record),
    /// usually running on another core: waiting a moment for it costs less than sleeping in the
    /// kernel and being woken, so the lock is tried a few times before this thread sleeps.
    ///
    /// A wait is bounded: past `bound` it fails with [`Error::LockTimeout`] naming the holder's
    /// process; every [`LOCK_SLICE`] it asks whether to give up ([`crate::interrupt::interrupted`]:
    /// Ctrl-C in Python) and whether the page is still the writers' (a page damaged under its
    /// waiters would leave them asleep for good).
    /// `open` is asked too: its error (the log closed meanwhile) ends the wait.
    pub fn lock_appends(
        &self,
        bound: Duration,
        open: &dyn Fn() -> Result<()>,
    ) -> Result<PageGuard<'_>> {
        if let Some(guard) = self.try_lock_appends()? {
            return Ok(guard);
        }
        let lock = self.append_lock();
        let started = Instant::now();
        loop {
            let slice = bound.saturating_sub(started.elapsed()).min(LOCK_SLICE);
            if let Some(taken) = lock.lock_within(slice).map_err(|e| self.lock_error(e))? {
                return Ok(PageGuard {
                    lock,
                    taken,
                    page: std::marker::PhantomData,
                });
            }
            if !self.is_live() {
                return Err(self.damaged("its magic or version is gone (zeroed or overwritten)"));
            }
            if interrupt::interrupted() {
                return Err(Error::Interrupted);
            }
            open()?;
            if started.elapsed() >= bound {
                return Err(Error::LockTimeout {
                    lock: "append lock",
                    undone: "appended",
                    path: self.path().map(Path::to_path_buf).unwrap_or_default(),
                    waited_ms: started.elapsed().as_millis() as u64,
                    holder: lock.holder(),
                });
            }
        }
    }

    /// An error of the append lock, naming the page. `EINVAL`: the lock's bytes are no mutex (the
    /// page damaged where its other words still check).
    pub fn lock_error(&self, e: std::io::Error) -> Error {
        if e.raw_os_error() == Some(libc::EINVAL) {
            return self.damaged("its append lock is not a mutex (overwritten)");
        }
        let path = self
            .path()
            .map_or_else(|| PathBuf::from(CONTROL_FILE), Path::to_path_buf);
        Error::io("taking the append lock", path, e)
    }

    /// [`Control::lock_appends`] if the lock comes free within a moment (about 2 us), without
    /// sleeping in the kernel.
    pub fn try_lock_appends(&self) -> Result<Option<PageGuard<'_>>> {
        let lock = self.append_lock();
        for round in 0..SPIN_ROUNDS {
            if let Some(taken) = lock.try_lock().map_err(|e| self.lock_error(e))? {
                return Ok(Some(PageGuard {
                    lock,
                    taken,
                    page: std::marker::PhantomData,
                }));
            }
            for _ in 0..(8 << round.min(4)) {
                std::hint::spin_loop();
            }
        }
        Ok(None)
    }

    fn append_lock(&self) -> AppendLock {
        // SAFETY: LOCK_AT is 64-byte aligned in a page-aligned map of LEN bytes that outlives
        // every guard (they borrow `self`); `Control::create` initialised the mutex.
        unsafe { AppendLock::at(self.map.as_mut_ptr().add(LOCK_AT)) }
    }

    /// A sync made every byte below `flushed` durable.
    pub fn publish_flushed(&self, flushed: u64) {
        self.words().flushed.fetch_max(flushed, Ordering::AcqRel);
        self.notify();
    }

    /// The segment list changed; returns the new generation.
    pub fn bump_generation(&self) -> u64 {
        let g = self.hot().generation.fetch_add(1, Ordering::AcqRel) + 1;
        self.notify();
        g
    }

    /// Wakes the registered waiters, if any (after a store they are to see).
    #[inline]
    fn notify(&self) {
        fence(Ordering::SeqCst);
        if self.words().waiters.load(Ordering::Relaxed) != 0 {
            self.wake();
        }
    }

    /// Wakes every waiter, registered or not (a close, a new writer).
    pub fn wake(&self) {
        if !self.writable {
            return;
        }
        let w = self.words();
        w.seq.fetch_add(1, Ordering::Release);
        futex::wake_all(&w.seq);
    }

    fn retire(&self) {
        let w = self.words();
        w.flags.fetch_or(RETIRED, Ordering::AcqRel);
        self.wake();
    }

    /// Registers a waiter until the guard goes; `None` when this page cannot be written (the
    /// caller then polls).
    pub fn register(&self) -> Option<Registered<'_>> {
        self.add_waiter().then_some(Registered { ctl: self })
    }

    /// Counts one more waiter, for a caller that keeps the registration beyond a borrow (see
    /// `read/watch.rs`) and calls [`Control::remove_waiter`] once; false (nothing counted) when
    /// this page cannot be written.
    pub fn add_waiter(&self) -> bool {
        if !self.writable {
            return false;
        }
        self.words().waiters.fetch_add(1, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        true
    }

    /// Undoes one [`Control::add_waiter`] that returned true.
    pub fn remove_waiter(&self) {
        self.words().waiters.fetch_sub(1, Ordering::Relaxed);
    }

    /// How many waiters are registered, in every process.
    #[cfg(test)]
    pub fn waiters(&self) -> u32 {
        self.words().waiters.load(Ordering::Relaxed)
    }

    /// The futex word's value: read it after registering and before checking the condition.
    pub fn seq(&self) -> u32 {
        self.words().seq.load(Ordering::Acquire)
    }

    /// Sleeps while the futex word is `seq`, at most `timeout`.
    pub fn sleep(&self, seq: u32, timeout: Option<Duration>) -> Woken {
        futex::wait(&self.words().seq, seq, timeout)
    }
}

/// The append lock, held until dropped.
pub(crate) struct PageGuard<'a> {
    lock: AppendLock,
    taken: Taken,
    // Ties the guard to the page it locks.
    #[allow(dead_code)]
    page: std::marker::PhantomData<&'a Control>,
}

impl PageGuard<'_> {
    /// The last holder died holding the lock: the tail past the published end needs repair.
    pub fn owner_died(&self) -> bool {
        self.taken == Taken::OwnerDied
    }

    /// The lock is consistent again: a repair pending is recorded in the page, not in the lock.
    pub fn make_consistent(&mut self) -> std::io::Result<()> {
        if self.taken == Taken::OwnerDied {
            self.lock.consistent()?;
            self.taken = Taken::Clean;
        }
        Ok(())
    }
}

impl Drop for PageGuard<'_> {
    fn drop(&mut self) {
        if let Err(e) = self.lock.unlock() {
            // This thread did not hold it: mutual exclusion was lost (the page was damaged or
            // re-made under it). The page checks refuse the next append.
            log::error!("letting go of the append lock in {CONTROL_FILE}: {e}");
        }
    }
}

impl std::fmt::Debug for PageGuard<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PageGuard")
            .field("taken", &self.taken)
            .finish()
    }
}

/// A registered waiter; dropping it unregisters.
#[derive(Debug)]
pub(crate) struct Registered<'a> {
    ctl: &'a Control,
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        self.ctl.remove_waiter();
    }
}

/// This process's PID namespace: the inode of `/proc/self/ns/pid` (0 if unknown).
pub(crate) fn pid_namespace() -> u64 {
    std::fs::metadata("/proc/self/ns/pid").map_or(0, |m| std::os::unix::fs::MetadataExt::ino(&m))
}

/// Opens and maps `path` for reading and writing; creates it (one page) if `create`. A follower
/// (`create` false) takes only a file of full length, and maps it under a shared lock.
fn open_file(path: &Path, create: bool, mode: u32) -> std::io::Result<Control> {
    let mut opts = OpenOptions::new();
    opts.read(true).write(true);
    if create {
        opts.create(true).truncate(false).mode(mode);
    }
    let file = opts.open(path)?;
    let len = file.metadata()?.len();
    if len < LEN as u64 {
        if !create {
            return Err(std::io::Error::other("shorter than a page"));
        }
        // Followers map only files of full length, so none maps it short. Written, not sized:
        // the blocks are allocated now (ENOSPC here, not SIGBUS at the first touch of the map).
        std::os::unix::fs::FileExt::write_all_at(&file, &[0u8; LEN], 0)?;
    }
    let map = MmapOptions::new().len(LEN).map_raw(&file)?;
    if !create {
        let _ = file.lock_shared();
    }
    Ok(Control {
        map,
        file: Some((file, path.to_path_buf())),
        writable: true,
        not_made: None,
    })
}

/// A control file this process may not write: it reads the end, and polls.
fn open_read_only(path: &Path) -> std::io::Result<Control> {
    let file = File::open(path)?;
    if file.metadata()?.len() < LEN as u64 {
        return Err(std::io::Error::other("shorter than a page"));
    }
    let map = MmapOptions::new().len(LEN).map_raw_read_only(&file)?;
    let _ = file.lock_shared();
    Ok(Control {
        map,
        file: Some((file, path.to_path_buf())),
        writable: false,
        not_made: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_writer_rewrites_under_a_new_epoch_and_retires_other_copies() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        let first = Control::create(&[b.path(), a.path()], 10, 5, 0, None, 0o640).unwrap();
        assert_eq!(first.path(), Some(b.path().join(CONTROL_FILE).as_path()));
        let follower = Control::find(&[a.path(), b.path()]).expect("a live control file");
        assert_eq!((follower.end(), follower.flushed()), (10, 5));
        let before = follower.seen();

        // The next writer gives the directories in another order.
        let second = Control::create(&[a.path(), b.path()], 20, 20, 0, None, 0o640).unwrap();
        assert!(!follower.is_live(), "the old copy is retired");
        assert_eq!(second.end(), 20);
        let again = Control::find(&[b.path(), a.path()]).expect("the new copy");
        assert_eq!(again.path(), second.path());

        // A third open of the same file: a new epoch, what a follower took for the log may be cut.
        drop(second);
        let third = Control::create(&[a.path()], 15, 15, 0, None, 0o640).unwrap();
        assert_ne!(again.seen().epoch, before.epoch);
        assert_eq!(again.end(), 15);
        assert!(third.is_live());
    }

    #[test]
    fn a_short_or_foreign_file_is_not_taken_by_a_follower() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join(CONTROL_FILE), b"short").unwrap();
        assert!(Control::find(&[d.path()]).is_none());
        std::fs::write(d.path().join(CONTROL_FILE), vec![7u8; LEN]).unwrap();
        assert!(Control::find(&[d.path()]).is_none());
    }

    #[test]
    fn a_wait_for_a_held_lock_is_bounded_and_interruptible() {
        let d = tempfile::tempdir().unwrap();
        let ctl = std::sync::Arc::new(Control::create(&[d.path()], 0, 0, 0, None, 0o640).unwrap());
        let (held, hold) = (std::sync::mpsc::channel(), std::sync::mpsc::channel::<()>());
        let holder = {
            let ctl = std::sync::Arc::clone(&ctl);
            std::thread::spawn(move || {
                let _guard = ctl
                    .lock_appends(Duration::from_secs(1), &|| Ok(()))
                    .unwrap();
                held.0.send(()).unwrap();
                let _ = hold.1.recv_timeout(Duration::from_secs(30));
            })
        };
        held.1.recv().unwrap();
        let t = Instant::now();
        match ctl.lock_appends(Duration::from_millis(250), &|| Ok(())) {
            Err(Error::LockTimeout { holder, .. }) => {
                assert_eq!(holder, Some(std::process::id()), "the holder's process")
            }
            other => panic!("a timeout, got {other:?}"),
        }
        assert!(t.elapsed() >= Duration::from_millis(250));
        let t = Instant::now();
        let waited = interrupt::interruptible(
            || true,
            || ctl.lock_appends(Duration::from_secs(30), &|| Ok(())),
        );
        assert!(matches!(waited, Err(Error::Interrupted)), "{waited:?}");
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "ended by the check, not the bound"
        );
        hold.0.send(()).unwrap();
        holder.join().unwrap();
        drop(
            ctl.lock_appends(Duration::from_secs(1), &|| Ok(()))
                .unwrap(),
        );
    }

    #[test]
    fn a_publish_wakes_a_registered_waiter_in_another_thread() {
        let d = tempfile::tempdir().unwrap();
        let writer = Control::create(&[d.path()], 0, 0, 0, None, 0o640).unwrap();
        let path = d.path().to_path_buf();
        let waiter = std::thread::spawn(move || {
            let ctl = Control::find(&[path.as_path()]).unwrap();
            let _r = ctl.register().unwrap();
            loop {
                let seq = ctl.seq();
                if ctl.end() >= 100 {
                    return ctl.end();
                }
                ctl.sleep(seq, Some(Duration::from_secs(10)));
            }
        });
        std::thread::sleep(Duration::from_millis(20));
        writer.publish_end(100, 0);
        assert_eq!(waiter.join().unwrap(), 100);
    }
}
