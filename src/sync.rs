//! Locking helpers shared by every module.

use std::sync::{Mutex, MutexGuard};

/// Locks a mutex, recovering from poisoning: every critical section in this crate leaves its data
/// consistent (a panic in one is reported where it happened, never by wedging later callers).
pub(crate) fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
