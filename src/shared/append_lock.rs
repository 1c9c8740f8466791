//! The lock every append of a shared store takes: a robust, process-shared pthread mutex in the
//! control page, as LMDB keeps its writer mutex in its lock file. Uncontended it is one
//! compare-and-swap in user space; contended, a futex wait. When its holder dies (SIGKILL
//! mid-record, mid-roll, mid-batch) the kernel hands it to the next taker with `EOWNERDEAD`, and
//! that taker repairs the tail before it writes (see `shared.rs`).

use std::io;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// The bits of a robust mutex's lock word that name its holder's thread.
const FUTEX_TID_MASK: u32 = 0x3fff_ffff;

/// A mutex at a fixed place in a shared mapping. `init` runs once per store life, by the open
/// that holds the store alone (no other process maps the page for writing then).
pub(crate) struct AppendLock {
    mutex: *mut libc::pthread_mutex_t,
}

/// Room the mutex takes in the page: a cache line, which the control page shares between the
/// mutex (its first `MUTEX_LEN` bytes) and the words every append touches.
pub(crate) const LOCK_LEN: usize = 64;
/// Bytes of the mutex itself.
pub(crate) const MUTEX_LEN: usize = 40;
const _: () = assert!(std::mem::size_of::<libc::pthread_mutex_t>() <= MUTEX_LEN);

/// How a lock was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Taken {
    /// From a holder that let go.
    Clean,
    /// From a holder that died holding it: the state it guards may be half changed.
    OwnerDied,
}

impl AppendLock {
    /// The lock at `at`.
    ///
    /// # Safety
    /// `at` is aligned for a `pthread_mutex_t`, lies in a writable shared mapping that outlives
    /// the returned value, and holds a mutex made by [`AppendLock::init`] (or is about to).
    pub unsafe fn at(at: *mut u8) -> AppendLock {
        AppendLock {
            mutex: at.cast::<libc::pthread_mutex_t>(),
        }
    }

    /// Makes a fresh robust, process-shared mutex here. The caller makes sure no process uses
    /// the old one (it holds the store alone).
    pub fn init(&self) -> io::Result<()> {
        // SAFETY: `attr` is initialised by pthread_mutexattr_init before use and destroyed after;
        // `self.mutex` points into the shared mapping (see `at`) and nobody else uses it now.
        unsafe {
            let mut attr = std::mem::MaybeUninit::<libc::pthread_mutexattr_t>::uninit();
            check(libc::pthread_mutexattr_init(attr.as_mut_ptr()))?;
            let attr = attr.as_mut_ptr();
            let made = check(libc::pthread_mutexattr_setpshared(
                attr,
                libc::PTHREAD_PROCESS_SHARED,
            ))
            .and_then(|()| {
                check(libc::pthread_mutexattr_setrobust(
                    attr,
                    libc::PTHREAD_MUTEX_ROBUST,
                ))
            })
            .and_then(|()| check(libc::pthread_mutex_init(self.mutex, attr)));
            libc::pthread_mutexattr_destroy(attr);
            made
        }
    }

    /// Takes the lock, waiting for it as long as it takes.
    #[cfg(test)]
    pub fn lock(&self) -> io::Result<Taken> {
        // SAFETY: a mutex initialised by `init`, in a mapping that outlives `self`.
        taken(unsafe { libc::pthread_mutex_lock(self.mutex) })
    }

    /// Takes the lock, waiting at most `slice`; `None` when it stayed held that long.
    pub fn lock_within(&self, slice: Duration) -> io::Result<Option<Taken>> {
        let mut now = std::mem::MaybeUninit::<libc::timespec>::uninit();
        // SAFETY: clock_gettime writes the timespec it is given.
        let now = unsafe {
            libc::clock_gettime(libc::CLOCK_REALTIME, now.as_mut_ptr());
            now.assume_init()
        };
        let nanos = now.tv_nsec as u64 + u64::from(slice.subsec_nanos());
        let until = libc::timespec {
            tv_sec: now.tv_sec
                + slice.as_secs() as libc::time_t
                + (nanos / 1_000_000_000) as libc::time_t,
            tv_nsec: (nanos % 1_000_000_000) as libc::c_long,
        };
        // SAFETY: as in `lock`; `until` lives across the call.
        match unsafe { libc::pthread_mutex_timedlock(self.mutex, &until) } {
            libc::ETIMEDOUT => Ok(None),
            rc => taken(rc).map(Some),
        }
    }

    /// The process holding the lock, if any (the lock word names the holder's thread, in this
    /// PID namespace: the writers' one).
    pub fn holder(&self) -> Option<u32> {
        // SAFETY: glibc's pthread_mutex_t begins with its 32-bit lock word (the futex), which a
        // robust mutex sets to its holder's thread id; read as an atomic, as glibc accesses it.
        let word = unsafe { (*self.mutex.cast::<AtomicU32>()).load(Ordering::Relaxed) };
        let tid = word & FUTEX_TID_MASK;
        if tid == 0 {
            return None;
        }
        let status = std::fs::read_to_string(format!("/proc/{tid}/status")).ok()?;
        status
            .lines()
            .find_map(|l| l.strip_prefix("Tgid:"))
            .and_then(|p| p.trim().parse().ok())
    }

    /// Takes the lock if it is free now; `None` when another thread holds it.
    pub fn try_lock(&self) -> io::Result<Option<Taken>> {
        // SAFETY: as in `lock`.
        match unsafe { libc::pthread_mutex_trylock(self.mutex) } {
            libc::EBUSY => Ok(None),
            rc => taken(rc).map(Some),
        }
    }

    /// Marks the state consistent again after an `OwnerDied` take (before unlocking).
    pub fn consistent(&self) -> io::Result<()> {
        // SAFETY: called by the holder, after a take that returned EOWNERDEAD.
        check(unsafe { libc::pthread_mutex_consistent(self.mutex) })
    }

    /// Lets go (the calling thread holds the lock). An error means this thread did not hold it:
    /// the caller says so loudly.
    pub fn unlock(&self) -> io::Result<()> {
        // SAFETY: the caller holds the lock (a guard's drop).
        check(unsafe { libc::pthread_mutex_unlock(self.mutex) })
    }
}

fn taken(rc: i32) -> io::Result<Taken> {
    match rc {
        0 => Ok(Taken::Clean),
        libc::EOWNERDEAD => Ok(Taken::OwnerDied),
        libc::ENOTRECOVERABLE => Err(io::Error::other(
            "the append lock is not recoverable (a holder died and the next taker let go \
             without marking it consistent: a writer of an older rmqlog failed a repair); close \
             every writer of the store, and the next open makes the lock anew",
        )),
        rc => Err(io::Error::from_raw_os_error(rc)),
    }
}

fn check(rc: i32) -> io::Result<()> {
    match rc {
        0 => Ok(()),
        rc => Err(io::Error::from_raw_os_error(rc)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use memmap2::MmapOptions;

    #[test]
    fn a_holder_that_dies_hands_the_lock_over_as_owner_died() {
        let file = tempfile::tempfile().unwrap();
        file.set_len(4096).unwrap();
        let map = MmapOptions::new().len(4096).map_raw(&file).unwrap();
        // SAFETY: page-aligned, 4096 bytes, lives until the end of the test (a shared file
        // mapping: the forked child shares it).
        let lock = unsafe { AppendLock::at(map.as_mut_ptr()) };
        lock.init().unwrap();
        assert_eq!(lock.lock().unwrap(), Taken::Clean);
        assert_eq!(lock.try_lock().unwrap(), None, "not recursive: busy");
        lock.unlock().unwrap();
        // SAFETY: the child only takes the lock and exits without unwinding (no allocation).
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // SAFETY: the mutex initialised above, in the shared mapping the child inherited.
            let rc = unsafe { libc::pthread_mutex_lock(map.as_mut_ptr().cast()) };
            // SAFETY: ends the child at once, holding the lock (no destructor runs).
            unsafe { libc::_exit(rc) };
        }
        let mut status = 0;
        // SAFETY: waits for the child forked above.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert_eq!(lock.lock().unwrap(), Taken::OwnerDied);
        lock.consistent().unwrap();
        lock.unlock().unwrap();
        assert_eq!(lock.lock().unwrap(), Taken::Clean);
        lock.unlock().unwrap();
    }
}
