//! Who writes a store: a `flock` on `rmqlog.lock` in every directory, exclusive for one writer
//! (`exclusive=True`), shared for shared writers, which a child process forked from a writer gives
//! up at once. Shared writers serialise their opens and closes on `rmqlog.join`, hand the
//! background work over through `rmqlog.owner`, and take turns changing segments and the
//! checkpoint on `rmqlog.maint`. Consumer names are created and dropped under `rmqlog.names`, and
//! held open by a byte lock each.
//!
//! `flock` locks belong to the open file description, which `fork` shares with the child: a child
//! that kept its copy of the descriptor would keep the store locked after the writer exits. A
//! `pthread_atfork` child handler therefore closes every lock descriptor in the child and bumps the
//! fork generation, which marks every log the child inherited as closed.

use std::fs::{File, OpenOptions};
use std::os::fd::{FromRawFd, IntoRawFd, RawFd};
use std::path::Path;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::sync::Once;
use std::time::Duration;

use crate::error::{Error, IoContext, Result};

/// Name of the lock file in every directory of a store.
pub const LOCK_FILE: &str = "rmqlog.lock";

/// Incremented in every child process right after `fork`.
static FORK_GENERATION: AtomicU64 = AtomicU64::new(0);
/// Descriptors of the locks held by this process; -1 marks a free slot.
const SLOTS: usize = 1024;
static HELD: [AtomicI32; SLOTS] = [const { AtomicI32::new(-1) }; SLOTS];
static AT_FORK: Once = Once::new();

/// The current fork generation: a log opened in another generation belongs to the parent process.
pub fn fork_generation() -> u64 {
    FORK_GENERATION.load(Ordering::Acquire)
}

extern "C" fn after_fork_in_child() {
    FORK_GENERATION.fetch_add(1, Ordering::AcqRel);
    for slot in &HELD {
        let fd = slot.swap(-1, Ordering::AcqRel);
        if fd >= 0 {
            // SAFETY: `fd` was registered by a `StoreLock` of the parent and is closed exactly once
            // here (the slot is cleared); `StoreLock::drop` in this child sees the new generation and
            // never touches it again. close(2) is async-signal-safe, as a fork handler requires.
            unsafe { libc::close(fd) };
        }
    }
}

/// Makes [`fork_generation`] count forks from now on (once per process).
pub fn watch_forks() {
    AT_FORK.call_once(|| {
        // SAFETY: registers a handler that only uses atomics and close(2); no prepare/parent hooks.
        unsafe { libc::pthread_atfork(None, None, Some(after_fork_in_child)) };
    });
}

fn register(fd: RawFd) -> Option<usize> {
    watch_forks();
    HELD.iter().position(|slot| {
        slot.compare_exchange(-1, fd, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    })
}

/// How a writer holds the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hold {
    /// No other writer, in any process (`exclusive=True`).
    Exclusive,
    /// With other shared writers (`exclusive=False`); never with an exclusive one.
    Shared,
}

/// One `flock`ed descriptor, closed on drop (in the process that took it: a forked child's copy
/// is closed by the fork handler).
#[derive(Debug)]
struct Held {
    fd: RawFd,
    slot: Option<usize>,
    generation: u64,
}

impl Held {
    fn new(file: File) -> Held {
        let fd = file.into_raw_fd();
        Held {
            fd,
            slot: register(fd),
            generation: fork_generation(),
        }
    }

    /// Waits for an exclusive flock(2) on the descriptor.
    fn wait(&self) -> std::io::Result<()> {
        loop {
            match self.flock(libc::LOCK_EX) {
                Ok(true) => return Ok(()),
                Ok(false) => continue,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// flock(2) on the descriptor; false when another holder's lock is in the way.
    fn flock(&self, op: i32) -> std::io::Result<bool> {
        // SAFETY: `fd` is open and owned by `self` until drop; flock(2) only changes its lock.
        if unsafe { libc::flock(self.fd, op) } == 0 {
            return Ok(true);
        }
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EWOULDBLOCK) => Ok(false),
            _ => Err(e),
        }
    }
}

impl Held {
    /// An open-file-description lock of kind `kind` on byte `at`: `F_OFD_SETLK` takes it (false
    /// if another description holds it), `F_OFD_GETLK` tests it (false if one does).
    fn byte_lock(&self, at: u64, cmd: i32, kind: i32) -> std::io::Result<bool> {
        // SAFETY: `flock` is plain old data; all-zero is a valid value, then filled in.
        let mut fl: libc::flock = unsafe { std::mem::zeroed() };
        fl.l_type = kind as libc::c_short;
        fl.l_whence = libc::SEEK_SET as libc::c_short;
        fl.l_start = i64::try_from(at).unwrap_or(i64::MAX);
        fl.l_len = 1;
        // SAFETY: `fd` is open and owned by `self`; `fl` is a valid, initialised `flock` that
        // fcntl(2) reads (SETLK) or overwrites (GETLK) and does not keep.
        let r = unsafe { libc::fcntl(self.fd, cmd, &mut fl) };
        if r != 0 {
            let e = std::io::Error::last_os_error();
            return match e.raw_os_error() {
                Some(libc::EAGAIN | libc::EACCES) => Ok(false),
                _ => Err(e),
            };
        }
        Ok(cmd != libc::F_OFD_GETLK || fl.l_type == libc::F_UNLCK as libc::c_short)
    }
}

/// The byte of `rmqlog.lock` every shared writer holds a read lock on (an OFD lock, beside its
/// `flock`): a writer alone finds no other holder of it.
const WRITERS_BYTE: u64 = 0;

impl Held {
    /// This description is a shared writer's: a read lock on [`WRITERS_BYTE`].
    fn mark_writer(&self) -> std::io::Result<()> {
        match self.byte_lock(WRITERS_BYTE, libc::F_OFD_SETLK, libc::F_RDLCK)? {
            true => Ok(()),
            false => Err(std::io::Error::other("the writers' byte is write-locked")),
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if self.generation != fork_generation() {
            return; // inherited by a forked child: the fork handler already closed it
        }
        if let Some(slot) = self.slot {
            HELD[slot].store(-1, Ordering::Release);
        }
        // SAFETY: `fd` came from `File::into_raw_fd` and is owned by this value alone;
        // rebuilding the `File` closes it exactly once, which releases the flock.
        drop(unsafe { File::from_raw_fd(self.fd) });
    }
}

/// The locks of one writer on the store's directories, released on drop.
#[derive(Debug, Default)]
pub struct StoreLock {
    held: Vec<Held>,
}

impl StoreLock {
    /// Takes the lock of one more directory, failing at once if a writer holds it in a way that
    /// excludes `hold` (any writer for `Exclusive`, an exclusive one for `Shared`).
    pub fn add(&mut self, dir: &Path, hold: Hold) -> Result<()> {
        let path = dir.join(LOCK_FILE);
        let held = Held::new(open_lock_file(&path)?);
        let op = match hold {
            Hold::Exclusive => libc::LOCK_EX | libc::LOCK_NB,
            Hold::Shared => libc::LOCK_SH | libc::LOCK_NB,
        };
        // A child process another thread of a writer is spawning holds that writer's lock
        // descriptors from its fork to its exec (posix_spawn runs no fork handler): a lock let
        // go just before may look held for that long. Look again for a moment before refusing.
        for wait_ms in [1, 2, 4, 8, 16, 0] {
            match held.flock(op) {
                Ok(true) => {
                    if hold == Hold::Shared {
                        held.mark_writer()
                            .map_err(|e| Error::io("locking", &path, e))?;
                    }
                    self.held.push(held);
                    return Ok(());
                }
                Ok(false) if wait_ms > 0 => {
                    std::thread::sleep(std::time::Duration::from_millis(wait_ms));
                }
                Ok(false) => break,
                Err(e) => return Err(Error::io("locking", path, e)),
            }
        }
        Err(Error::StoreLocked { path })
    }

    /// A shared holder: whether no other writer holds the store now. Call under the
    /// [`JoinLock`] (no writer joins meanwhile). Tested on the writers' byte lock, never by
    /// converting the `flock` (which Linux does by unlocking first: an exclusive opener could
    /// slip in); the holds stay as they are.
    pub fn is_alone(&self) -> bool {
        let alone = self.held.iter().all(|h| {
            h.byte_lock(WRITERS_BYTE, libc::F_OFD_GETLK, libc::F_WRLCK)
                .unwrap_or(false)
        });
        crate::failpoint::fail_point!("close::alone_checked");
        alone
    }

    /// Turns every hold into a shared one (the first shared writer, once its open is done).
    pub fn share(&self) {
        for h in &self.held {
            if let Err(e) = h.flock(libc::LOCK_SH).and_then(|_| h.mark_writer()) {
                log::warn!("sharing the store lock failed: {e}");
            }
        }
    }
}

fn open_lock_file(path: &Path) -> Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .ctx("opening lock file", path)
}

/// Name of the file shared writers serialise their opens and closes on.
pub const JOIN_FILE: &str = "rmqlog.join";
/// Name of the file whose holder does the store's background work.
pub const OWNER_FILE: &str = "rmqlog.owner";
/// Name of the file whose holder changes a shared store's segments or checkpoint.
pub const MAINTENANCE_FILE: &str = "rmqlog.maint";

/// Held while a writer opens or closes: whether it is the store's first (it recovers) or last
/// writer (it writes the clean checkpoint) is decided with no other open or close under way.
#[derive(Debug)]
pub struct JoinLock(#[allow(dead_code)] Held);

impl JoinLock {
    /// Waits for the join lock of the store whose first directory (by path order: the same for
    /// every writer whatever order it gives them in) is `dir`.
    pub fn take(dir: &Path) -> Result<JoinLock> {
        wait_for(&dir.join(JOIN_FILE), "taking the join lock").map(JoinLock)
    }
}

/// Serialises what changes a shared store's segments or checkpoint across its opens: the
/// maintenance calls of any open, and the cleaning passes and checkpoints of the open doing the
/// background work. Held by one thread of one open at a time; the kernel lets go of a dead
/// holder's lock.
#[derive(Debug)]
pub struct MaintenanceLock {
    path: std::path::PathBuf,
    held: std::sync::Mutex<Option<Held>>,
}

/// [`MaintenanceLock`] held until dropped.
pub struct MaintenanceGuard<'a>(std::sync::MutexGuard<'a, Option<Held>>);

impl MaintenanceLock {
    pub fn new(dir: &Path) -> MaintenanceLock {
        MaintenanceLock {
            path: dir.join(MAINTENANCE_FILE),
            held: std::sync::Mutex::new(None),
        }
    }

    /// Waits for the lock: for another thread of this open, then for the other opens, at most
    /// `bound` ([`Error::LockTimeout`]), asking [`crate::interrupt::interrupted`] between slices
    /// ([`Error::Interrupted`]): a holder stopped by SIGSTOP keeps the lock until it runs again.
    pub fn hold(&self, bound: Duration) -> Result<MaintenanceGuard<'_>> {
        let mut held = crate::sync::locked(&self.held);
        let h = match held.as_mut() {
            Some(h) => h,
            None => held.insert(Held::new(open_lock_file(&self.path)?)),
        };
        let started = std::time::Instant::now();
        let mut pause = Duration::from_micros(100);
        loop {
            match h.flock(libc::LOCK_EX | libc::LOCK_NB) {
                Ok(true) => return Ok(MaintenanceGuard(held)),
                Ok(false) => {}
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(Error::io("taking the maintenance lock", &self.path, e)),
            }
            if crate::interrupt::interrupted() {
                return Err(Error::Interrupted);
            }
            if started.elapsed() >= bound {
                return Err(Error::LockTimeout {
                    lock: "maintenance lock",
                    undone: "changed",
                    path: self.path.clone(),
                    waited_ms: started.elapsed().as_millis() as u64,
                    holder: None,
                });
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(20));
        }
    }

    /// The lock if no other thread or open holds it now; never waits (a holder of the append
    /// lock takes it so: maintenance takes the append lock after its own).
    pub fn try_hold(&self) -> Result<Option<MaintenanceGuard<'_>>> {
        let mut held = match self.held.try_lock() {
            Ok(held) => held,
            Err(std::sync::TryLockError::WouldBlock) => return Ok(None),
            Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner(),
        };
        let h = match held.as_mut() {
            Some(h) => h,
            None => held.insert(Held::new(open_lock_file(&self.path)?)),
        };
        match h.flock(libc::LOCK_EX | libc::LOCK_NB) {
            Ok(true) => Ok(Some(MaintenanceGuard(held))),
            Ok(false) => Ok(None),
            Err(e) => Err(Error::io("taking the maintenance lock", &self.path, e)),
        }
    }
}

impl Drop for MaintenanceGuard<'_> {
    fn drop(&mut self) {
        if let Some(h) = self.0.as_ref() {
            let _ = h.flock(libc::LOCK_UN);
        }
    }
}

/// Whether an open does the background work ([`OwnerLock::take`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Taken {
    /// Another open does it.
    No,
    /// This open has been doing it.
    Held,
    /// This open took it over just now.
    Now,
}

/// Which open of a shared store does the background work (cleaning, the checkpoint): the one
/// holding `rmqlog.owner`. The others try again at each tick; the kernel lets go of the lock
/// of a process that exits or dies, so the work moves on by itself.
#[derive(Debug)]
pub struct OwnerLock {
    path: std::path::PathBuf,
    held: std::sync::Mutex<Option<Held>>,
    owned: std::sync::atomic::AtomicBool,
}

impl OwnerLock {
    pub fn new(dir: &Path) -> OwnerLock {
        OwnerLock {
            path: dir.join(OWNER_FILE),
            held: std::sync::Mutex::new(None),
            owned: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Whether this open does the background work now, taking it over if no one does.
    pub fn take(&self) -> Taken {
        if self.owned.load(Ordering::Acquire) {
            return Taken::Held;
        }
        let mut held = crate::sync::locked(&self.held);
        if held.is_none() {
            match open_lock_file(&self.path) {
                Ok(f) => *held = Some(Held::new(f)),
                Err(e) => {
                    log::warn!("no background work here: {e}");
                    return Taken::No;
                }
            }
        }
        let got = held
            .as_ref()
            .is_some_and(|h| h.flock(libc::LOCK_EX | libc::LOCK_NB).unwrap_or(false));
        if !got {
            return Taken::No;
        }
        log::info!("this open does the store's background work now");
        self.owned.store(true, Ordering::Release);
        Taken::Now
    }

    /// Lets the work go to another open (this one closes).
    pub fn release(&self) {
        self.owned.store(false, Ordering::Release);
        crate::sync::locked(&self.held).take();
    }
}

/// Name of the file under whose `flock` consumer names are created and dropped.
pub const NAMES_FILE: &str = "rmqlog.names";

/// Held while a consumer name is looked up and created, or dropped: one change of the names at a
/// time, across processes.
#[derive(Debug)]
pub struct NamesLock(#[allow(dead_code)] Held);

impl NamesLock {
    /// Waits for the names lock of the store whose first directory (by path) is `dir`.
    pub fn take(dir: &Path) -> Result<NamesLock> {
        wait_for(&dir.join(NAMES_FILE), "taking the consumer names lock").map(NamesLock)
    }
}

/// Waits for an exclusive `flock` on `path`, held until the result drops.
fn wait_for(path: &Path, what: &'static str) -> Result<Held> {
    let held = Held::new(open_lock_file(path)?);
    held.wait().map_err(|e| Error::io(what, path, e))?;
    Ok(held)
}

/// Open-file-description locks (`F_OFD_SETLK`) on single bytes of one file: a consumer's hold
/// on its name, its member slot, and the short lock around its name's claims. Two descriptions
/// conflict whether they are in one process or two; the kernel lets go when the holder closes
/// the file or dies. The bytes need not exist in the file.
#[derive(Debug)]
pub struct ByteLocks {
    /// `None` once released: every lock of this description let go.
    held: std::sync::Mutex<Option<Held>>,
    path: std::path::PathBuf,
}

impl ByteLocks {
    pub fn open(path: &Path) -> Result<ByteLocks> {
        Ok(ByteLocks {
            held: std::sync::Mutex::new(Some(Held::new(open_lock_file(path)?))),
            path: path.to_path_buf(),
        })
    }

    /// Lets every lock go (closes the description); later calls fail.
    pub fn release(&self) {
        crate::sync::locked(&self.held).take();
    }

    fn with<T>(&self, f: impl FnOnce(&Held) -> std::io::Result<T>) -> std::io::Result<T> {
        match crate::sync::locked(&self.held).as_ref() {
            Some(h) => f(h),
            None => Err(std::io::Error::other("the consumer's locks were released")),
        }
    }

    /// [`ByteLocks::open`] of a file that exists (for a look that must create nothing); `None`
    /// if it does not.
    pub fn open_existing(path: &Path) -> Result<Option<ByteLocks>> {
        match OpenOptions::new().read(true).write(true).open(path) {
            Ok(f) => Ok(Some(ByteLocks {
                held: std::sync::Mutex::new(Some(Held::new(f))),
                path: path.to_path_buf(),
            })),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::io("opening", path, e)),
        }
    }

    /// Takes byte `at` (shared or exclusive) if no other description's lock is in the way.
    pub fn try_lock(&self, at: u64, exclusive: bool) -> Result<bool> {
        let kind = if exclusive {
            libc::F_WRLCK
        } else {
            libc::F_RDLCK
        };
        self.with(|h| h.byte_lock(at, libc::F_OFD_SETLK, kind))
            .ctx("locking a consumer byte", &self.path)
    }

    /// Waits for byte `at`, exclusively.
    pub fn lock(&self, at: u64) -> Result<()> {
        loop {
            match self.with(|h| h.byte_lock(at, libc::F_OFD_SETLKW, libc::F_WRLCK)) {
                Ok(true) => return Ok(()),
                Ok(false) => continue,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(Error::io("waiting for a consumer lock", &self.path, e)),
            }
        }
    }

    pub fn unlock(&self, at: u64) {
        let _ = self.with(|h| h.byte_lock(at, libc::F_OFD_SETLK, libc::F_UNLCK));
    }

    /// Whether another description holds byte `at` (any lock; with `writers_only`, an
    /// exclusive one).
    pub fn held_elsewhere(&self, at: u64, writers_only: bool) -> Result<bool> {
        let kind = if writers_only {
            libc::F_RDLCK
        } else {
            libc::F_WRLCK
        };
        let free = self
            .with(|h| h.byte_lock(at, libc::F_OFD_GETLK, kind))
            .ctx("testing a consumer lock", &self.path)?;
        Ok(!free)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_lock_fails_and_drop_releases() {
        let d = tempfile::tempdir().unwrap();
        let mut first = StoreLock::default();
        first.add(d.path(), Hold::Exclusive).unwrap();
        let mut second = StoreLock::default();
        assert!(matches!(
            second.add(d.path(), Hold::Exclusive),
            Err(Error::StoreLocked { .. })
        ));
        assert!(matches!(
            second.add(d.path(), Hold::Shared),
            Err(Error::StoreLocked { .. })
        ));
        drop(first);
        second.add(d.path(), Hold::Exclusive).unwrap();
    }

    #[test]
    fn shared_holders_exclude_an_exclusive_one_and_know_when_alone() {
        let d = tempfile::tempdir().unwrap();
        let mut a = StoreLock::default();
        a.add(d.path(), Hold::Shared).unwrap();
        assert!(a.is_alone());
        let mut b = StoreLock::default();
        b.add(d.path(), Hold::Shared).unwrap();
        assert!(!a.is_alone() && !b.is_alone());
        let mut c = StoreLock::default();
        assert!(matches!(
            c.add(d.path(), Hold::Exclusive),
            Err(Error::StoreLocked { .. })
        ));
        drop(b);
        assert!(a.is_alone(), "b let go");
        let mut e = StoreLock::default();
        assert!(
            e.add(d.path(), Hold::Exclusive).is_err(),
            "a still holds it"
        );
    }

    #[test]
    fn the_owner_lock_goes_to_one_open_at_a_time() {
        let d = tempfile::tempdir().unwrap();
        let a = OwnerLock::new(d.path());
        let b = OwnerLock::new(d.path());
        assert_eq!(a.take(), Taken::Now);
        assert_eq!(a.take(), Taken::Held);
        assert_eq!(b.take(), Taken::No);
        a.release();
        assert_eq!(b.take(), Taken::Now);
        assert_eq!(a.take(), Taken::No);
    }
}
