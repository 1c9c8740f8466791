//! One writer per store: an exclusive `flock` on `rmqlog.lock` in every directory, which a child
//! process forked from the writer gives up at once.
//!
//! `flock` locks belong to the open file description, which `fork` shares with the child: a child
//! that kept its copy of the descriptor would keep the store locked after the writer exits. A
//! `pthread_atfork` child handler therefore closes every lock descriptor in the child and bumps the
//! fork generation, which marks every log the child inherited as closed.

use std::fs::{File, OpenOptions, TryLockError};
use std::os::fd::{FromRawFd, IntoRawFd, RawFd};
use std::path::Path;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::sync::Once;

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

fn register(fd: RawFd) -> Option<usize> {
    AT_FORK.call_once(|| {
        // SAFETY: registers a handler that only uses atomics and close(2); no prepare/parent hooks.
        unsafe { libc::pthread_atfork(None, None, Some(after_fork_in_child)) };
    });
    HELD.iter().position(|slot| {
        slot.compare_exchange(-1, fd, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    })
}

/// The exclusive locks of one writer, released on drop.
#[derive(Debug)]
pub struct StoreLock {
    held: Vec<HeldLock>,
    generation: u64,
}

#[derive(Debug)]
struct HeldLock {
    fd: RawFd,
    slot: Option<usize>,
}

impl Default for StoreLock {
    fn default() -> Self {
        StoreLock {
            held: Vec::new(),
            generation: fork_generation(),
        }
    }
}

impl StoreLock {
    /// Takes the lock of one more directory, failing at once if another writer holds it.
    pub fn add(&mut self, dir: &Path) -> Result<()> {
        let file = lock_one(dir)?;
        let fd = file.into_raw_fd();
        let slot = register(fd);
        self.held.push(HeldLock { fd, slot });
        Ok(())
    }
}

fn lock_one(dir: &Path) -> Result<File> {
    let path = dir.join(LOCK_FILE);
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .ctx("opening lock file", &path)?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(TryLockError::WouldBlock) => Err(Error::StoreLocked { path }),
        Err(TryLockError::Error(e)) => Err(Error::io("locking", path, e)),
    }
}

impl Drop for StoreLock {
    fn drop(&mut self) {
        if self.generation != fork_generation() {
            return; // inherited by a forked child: the fork handler already closed the descriptors
        }
        for h in self.held.drain(..) {
            if let Some(slot) = h.slot {
                HELD[slot].store(-1, Ordering::Release);
            }
            // SAFETY: `fd` came from `File::into_raw_fd` in `acquire` and is owned by this lock
            // alone; rebuilding the `File` closes it exactly once, which releases the flock.
            drop(unsafe { File::from_raw_fd(h.fd) });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_lock_fails_and_drop_releases() {
        let d = tempfile::tempdir().unwrap();
        let mut first = StoreLock::default();
        first.add(d.path()).unwrap();
        let mut second = StoreLock::default();
        assert!(matches!(
            second.add(d.path()),
            Err(Error::StoreLocked { .. })
        ));
        drop(first);
        second.add(d.path()).unwrap();
    }
}
