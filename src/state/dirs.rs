//! The store's directories: their configured role, their state (writable, full, read-only,
//! offline), their disk usage, and the events a change of state produces.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use crate::sync::locked;

/// State of one directory, as `DirInfo::state` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DirState {
    /// New segments may go here.
    Writable,
    /// Configured read-only: segments are read (and deleted by retention), never created.
    ReadOnly,
    /// Writable, but without room for a new segment (or above `force_clean_ratio`).
    Full,
    /// Failed: never chosen again in this process.
    Offline,
}

impl DirState {
    /// `"writable"`, `"read_only"`, `"full"` or `"offline"`.
    pub fn as_str(self) -> &'static str {
        match self {
            DirState::Writable => "writable",
            DirState::ReadOnly => "read_only",
            DirState::Full => "full",
            DirState::Offline => "offline",
        }
    }
}

/// Space on the filesystem holding a directory, as `df` sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Usage {
    /// Size of the filesystem.
    pub total_bytes: u64,
    /// Space an unprivileged writer can use (`f_bavail`).
    pub free_bytes: u64,
    /// Space in use (`f_blocks - f_bfree`).
    pub used_bytes: u64,
}

impl Usage {
    /// `used / (used + available)`, as `df` computes it (root-reserved blocks excluded).
    pub fn used_ratio(&self) -> f64 {
        let denom = self.used_bytes + self.free_bytes;
        if denom == 0 {
            return 1.0;
        }
        self.used_bytes as f64 / denom as f64
    }

    /// From statvfs counts; `None` when the filesystem reports no size (`f_blocks == 0`: FUSE
    /// filesystems without statfs, some network filesystems). Zero blocks means unknown, not full
    /// (Kafka KIP-178 falls back to counting segments there).
    pub fn from_counts(blocks: u64, bfree: u64, bavail: u64, unit: u64) -> Option<Usage> {
        if blocks == 0 {
            return None;
        }
        let unit = unit.max(1);
        Some(Usage {
            total_bytes: blocks.saturating_mul(unit),
            free_bytes: bavail.saturating_mul(unit),
            used_bytes: blocks.saturating_sub(bfree).saturating_mul(unit),
        })
    }
}

/// Reads the usage of the filesystem holding `path`; `Ok(None)` when it reports no size.
pub fn usage(path: &Path) -> std::io::Result<Option<Usage>> {
    let s = rustix::fs::statvfs(path)?;
    Ok(Usage::from_counts(
        s.f_blocks, s.f_bfree, s.f_bavail, s.f_frsize,
    ))
}

/// A snapshot of one directory for callers and placement strategies.
#[derive(Debug, Clone, PartialEq)]
pub struct DirInfo {
    /// The directory, absolute.
    pub path: PathBuf,
    /// Current state.
    pub state: DirState,
    /// Filesystem size; `None` when unknown (unreadable, or a filesystem that reports no size).
    pub total_bytes: Option<u64>,
    /// Space an unprivileged writer can use; `None` when unknown.
    pub free_bytes: Option<u64>,
    /// Used ratio as `df` computes it; `None` when unknown.
    pub used_ratio: Option<f64>,
    /// Live segments of this log in the directory.
    pub segments: usize,
    /// Why the directory is offline or full.
    pub error: Option<String>,
}

/// A change of a directory's state.
#[derive(Debug, Clone, PartialEq)]
pub struct DirEvent {
    /// The directory.
    pub path: PathBuf,
    /// State before.
    pub old: DirState,
    /// State after.
    pub new: DirState,
    /// Why.
    pub reason: String,
}

/// One configured directory.
#[derive(Debug)]
pub(crate) struct Dir {
    pub path: PathBuf,
    /// Its identity's id (`rmqlog.id`); `None` where it has none (a read-only 0.1 directory).
    pub id: Option<String>,
    pub read_only: bool,
    /// Device id, for directories sharing a filesystem.
    pub dev: Option<u64>,
    state: Mutex<(DirState, Option<String>)>,
    /// Set once the log said why this directory's usage is unknown (once per open).
    usage_unknown_told: AtomicBool,
}

impl Dir {
    pub fn new(path: PathBuf, read_only: bool) -> Dir {
        let dev = std::fs::metadata(&path).ok().map(|m| m.dev());
        let state = if read_only {
            DirState::ReadOnly
        } else {
            DirState::Writable
        };
        Dir {
            path,
            id: None,
            read_only,
            dev,
            state: Mutex::new((state, None)),
            usage_unknown_told: AtomicBool::new(false),
        }
    }

    /// Its filesystem's usage now; `None` when unknown. The first time, says why and what follows.
    pub fn usage(&self) -> Option<Usage> {
        let why = match usage(&self.path) {
            Ok(Some(u)) => return Some(u),
            Ok(None) => "its filesystem reports no size (statvfs f_blocks = 0)".to_string(),
            Err(e) => format!("statvfs failed: {e}"),
        };
        if !self.usage_unknown_told.swap(true, Ordering::Relaxed) {
            log::warn!(
                "free space of {} is unknown ({why}): new segments are placed there by segment \
                 count (fewest_segments), and usage never makes it full, ineligible by \
                 min_free_bytes, or a reason to delete; a write failing for lack of space still \
                 makes it full",
                self.path.display()
            );
        }
        None
    }

    pub fn state(&self) -> (DirState, Option<String>) {
        locked(&self.state).clone()
    }

    /// Whether the store's own files (`rmqlog.meta`, `rmqlog.tail`) are kept here: a directory
    /// that takes writes (read-only ones may be on a read-only filesystem; offline ones failed).
    pub fn keeps_metadata(&self) -> bool {
        !self.read_only && self.state().0 != DirState::Offline
    }

    /// Sets the state; returns the event if it changed. Offline is final.
    pub fn set_state(&self, new: DirState, reason: Option<String>) -> Option<DirEvent> {
        let mut s = locked(&self.state);
        if s.0 == new || s.0 == DirState::Offline || (self.read_only && new != DirState::Offline) {
            if s.0 == new {
                s.1 = reason;
            }
            return None;
        }
        let old = s.0;
        *s = (new, reason.clone());
        Some(DirEvent {
            path: self.path.clone(),
            old,
            new,
            reason: reason.unwrap_or_else(|| "space available again".into()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_blocks_is_unknown_and_zero_available_is_full() {
        // What a FUSE filesystem without statfs reports: no size, not a full disk.
        assert_eq!(Usage::from_counts(0, 0, 0, 0), None);
        assert_eq!(Usage::from_counts(0, 0, 0, 4096), None);
        let full = Usage::from_counts(100, 0, 0, 4096).unwrap();
        assert_eq!((full.free_bytes, full.used_ratio()), (0, 1.0));
        // Root-reserved blocks count neither as used nor as available (df's ratio).
        let ext4 = Usage::from_counts(100, 10, 5, 1024).unwrap();
        assert_eq!(
            (ext4.total_bytes, ext4.free_bytes, ext4.used_bytes),
            (102_400, 5120, 92_160)
        );
        assert!((ext4.used_ratio() - 90.0 / 95.0).abs() < 1e-12);
    }
}
