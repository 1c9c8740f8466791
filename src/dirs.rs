//! The store's directories: their configured role, their state (writable, full, read-only,
//! offline), their disk usage, and the events a change of state produces.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
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
}

/// Reads the usage of the filesystem holding `path`.
pub fn usage(path: &Path) -> std::io::Result<Usage> {
    let s = rustix::fs::statvfs(path)?;
    let unit = s.f_frsize.max(1);
    Ok(Usage {
        total_bytes: s.f_blocks.saturating_mul(unit),
        free_bytes: s.f_bavail.saturating_mul(unit),
        used_bytes: s.f_blocks.saturating_sub(s.f_bfree).saturating_mul(unit),
    })
}

/// A snapshot of one directory for callers and placement strategies.
#[derive(Debug, Clone, PartialEq)]
pub struct DirInfo {
    /// The directory, absolute.
    pub path: PathBuf,
    /// Current state.
    pub state: DirState,
    /// Filesystem size (0 when unknown).
    pub total_bytes: u64,
    /// Space an unprivileged writer can use (0 when unknown).
    pub free_bytes: u64,
    /// Used ratio as `df` computes it (`None` when the filesystem could not be read).
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
        }
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
