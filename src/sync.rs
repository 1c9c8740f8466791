//! Locking helpers shared by every module.

use std::sync::{Mutex, MutexGuard, TryLockError};

/// Locks a mutex, recovering from poisoning: every critical section in this crate leaves its data
/// consistent (a panic in one is reported where it happened, never by wedging later callers).
pub(crate) fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Locks a mutex if no one holds it (`None` if someone does), recovering from poisoning as
/// [`locked`] does. For a lock that must never be waited for: one whose holder may be waiting
/// for a lock the caller holds (Python's GIL).
#[cfg_attr(not(feature = "python"), allow(dead_code))]
pub(crate) fn try_locked<T>(m: &Mutex<T>) -> Option<MutexGuard<'_, T>> {
    match m.try_lock() {
        Ok(g) => Some(g),
        Err(TryLockError::Poisoned(e)) => Some(e.into_inner()),
        Err(TryLockError::WouldBlock) => None,
    }
}
