//! Counters of a log's activity.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crate::sync::locked;

/// Live counters, updated with relaxed atomics.
#[derive(Debug, Default)]
pub(crate) struct Stats {
    pub appends: AtomicU64,
    pub appended_bytes: AtomicU64,
    pub segments_created: AtomicU64,
    pub syncs: AtomicU64,
    pub clean_passes: AtomicU64,
    pub segments_deleted: AtomicU64,
    pub bytes_deleted: AtomicU64,
    pub clean_last_error: Mutex<Option<String>>,
}

/// A copy of the counters at one moment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StatsSnapshot {
    /// Records appended since open.
    pub appends: u64,
    /// Body bytes appended since open.
    pub appended_bytes: u64,
    /// Segments created since open.
    pub segments_created: u64,
    /// Data syncs since open.
    pub syncs: u64,
    /// Cleaning passes run (thread and `clean()`).
    pub clean_passes: u64,
    /// Segments deleted by the cleaner or `truncate_before`.
    pub segments_deleted: u64,
    /// Bytes of the deleted segment files.
    pub bytes_deleted: u64,
    /// The last cleaning error, if the last pass failed.
    pub clean_last_error: Option<String>,
}

impl Stats {
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> StatsSnapshot {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        StatsSnapshot {
            appends: get(&self.appends),
            appended_bytes: get(&self.appended_bytes),
            segments_created: get(&self.segments_created),
            syncs: get(&self.syncs),
            clean_passes: get(&self.clean_passes),
            segments_deleted: get(&self.segments_deleted),
            bytes_deleted: get(&self.bytes_deleted),
            clean_last_error: locked(&self.clean_last_error).clone(),
        }
    }
}
