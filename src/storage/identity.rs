//! Each directory's identity, `rmqlog.id`: the store it belongs to and its own id (Kafka's
//! `meta.properties` with `cluster.id` and `directory.id`).
//!
//! Written once, when a writer first opens the directory, and never changed: a copy of the
//! directory (`cp -a`, a backup restored, a remount) carries it along, so the store is matched to
//! its directories by identity, not by the paths they had.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::storage::crc_line;
use crate::storage::fs::atomic_write;

/// Name of the identity file in every directory of a store.
pub const IDENTITY_FILE: &str = "rmqlog.id";
const FORMAT: u32 = 1;
const FILE_LEN: usize = 512;

/// Who a directory is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    /// Format version of this file.
    pub format: u32,
    /// The store's id (the checkpoint's `store_id`).
    pub store_id: String,
    /// This directory's id, unique within the store.
    pub dir_id: String,
}

impl Identity {
    /// Directory `dir_id` of `store_id`.
    pub fn new(store_id: &str, dir_id: String) -> Identity {
        Identity {
            format: FORMAT,
            store_id: store_id.to_string(),
            dir_id,
        }
    }
}

/// The identity of `dir`; `None` when it has none (a new directory, or one written by rmqlog
/// 0.1). A damaged file counts as none, with a warning: the directory is then matched by path.
pub fn read(dir: &Path) -> Option<Identity> {
    let path = dir.join(IDENTITY_FILE);
    let bytes = match crc_line::read_file(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => {
            log::warn!("ignoring unreadable {}: {e}", path.display());
            return None;
        }
    };
    match crc_line::decode::<Identity>(&bytes) {
        Ok(id) if id.format == FORMAT => Some(id),
        Ok(id) => {
            log::warn!("ignoring {}: unknown format {}", path.display(), id.format);
            None
        }
        Err(why) => {
            log::warn!("ignoring damaged {}: {why}", path.display());
            None
        }
    }
}

/// Writes `id` into `dir`, atomically and durably.
pub fn write(dir: &Path, id: &Identity, mode: u32) -> Result<()> {
    atomic_write(
        &dir.join(IDENTITY_FILE),
        &crc_line::encode(id, FILE_LEN),
        mode,
    )
}

/// 64 random bits in hex: a store's or a directory's id.
pub fn random_id() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = RandomState::new().build_hasher();
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    h.write_u128(nanos);
    h.write_u32(std::process::id());
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    format!("{:016x}", h.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_once_read_back_and_damage_reads_as_none() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(read(d.path()), None);
        let id = Identity::new("s1", random_id());
        write(d.path(), &id, 0o640).unwrap();
        assert_eq!(read(d.path()), Some(id.clone()));
        assert_ne!(random_id(), id.dir_id);
        std::fs::write(d.path().join(IDENTITY_FILE), b"{\"format\":1}\n0\n").unwrap();
        assert_eq!(read(d.path()), None);
    }
}
