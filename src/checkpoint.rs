//! The store's metadata file, `rmqlog.meta`, kept in every directory of the store.
//!
//! Framed by [`crate::crc_line`] in 4 KiB. Written atomically (temp file, fsync, rename, fsync
//! dir) and only after the data it covers is synced; a sequence number lets the newest copy win
//! when directories disagree. It may lag behind the data, never run ahead of it.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::crc_line;
use crate::error::{Error, IoContext, Result};
use crate::fs::{atomic_write, is_no_space};

/// Name of the metadata file in every directory of a store.
pub const CHECKPOINT_FILE: &str = "rmqlog.meta";
const FORMAT: u32 = 1;
const FILE_LEN: usize = 4096;

/// What the store knows about itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// Format version of this file.
    pub format: u32,
    /// Random id fixed when the store is created; directories of other stores are refused.
    pub store_id: String,
    /// Incremented on every write; the highest valid copy wins.
    pub seq: u64,
    /// Writable directories, in placement order.
    pub dirs: Vec<String>,
    /// Directories whose segments are read but never written.
    pub read_only_dirs: Vec<String>,
    /// Every segment size in use (old segments keep theirs after a `segment_size` change).
    pub segment_sizes: Vec<u64>,
    /// First offset of the log.
    pub min_offset: u64,
    /// Every byte below this offset was synced before this file was written.
    pub flushed_offset: u64,
    /// True only when written by a clean close; recovery then trusts `max_offset`.
    pub clean: bool,
    /// End of the log at a clean close.
    pub max_offset: u64,
    /// At least the largest record timestamp below `flushed_offset` (timestamps never go back).
    pub max_timestamp_ms: u64,
    /// A segment move in progress: until it is cleared, the source copy is the one in use.
    #[serde(default)]
    pub moving: Option<Move>,
}

/// The intent of a segment move between directories.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Move {
    /// Start offset of the segment.
    pub start: u64,
    /// Source directory.
    pub from: String,
    /// Destination directory.
    pub to: String,
}

impl Checkpoint {
    /// A checkpoint for a new store.
    pub fn new(dirs: Vec<String>, read_only_dirs: Vec<String>, segment_size: u64) -> Checkpoint {
        Checkpoint {
            format: FORMAT,
            store_id: new_store_id(),
            seq: 0,
            dirs,
            read_only_dirs,
            segment_sizes: vec![segment_size],
            min_offset: 0,
            flushed_offset: 0,
            clean: false,
            max_offset: 0,
            max_timestamp_ms: 0,
            moving: None,
        }
    }

    /// All directories, writable first.
    pub fn all_dirs(&self) -> impl Iterator<Item = &String> {
        self.dirs.iter().chain(&self.read_only_dirs)
    }

    fn encode(&self) -> Vec<u8> {
        crc_line::encode(self, FILE_LEN)
    }

    fn decode(bytes: &[u8]) -> std::result::Result<Checkpoint, String> {
        let c: Checkpoint = crc_line::decode(bytes)?;
        if c.format != FORMAT {
            return Err(format!("unknown format {}", c.format));
        }
        Ok(c)
    }

    /// Writes this checkpoint into every directory in `dirs`. A directory that refuses (full to
    /// the last byte, failing) keeps its older copy, which the sequence number outranks; only
    /// when no directory took it is it an error.
    pub fn write(&self, dirs: &[PathBuf], mode: u32) -> Result<()> {
        let bytes = self.encode();
        let mut first_error = None;
        let mut written = 0;
        for dir in dirs {
            let path = dir.join(CHECKPOINT_FILE);
            let result = match atomic_write(&path, &bytes, mode) {
                // A filesystem full to the last byte cannot take the temp file: rewrite in place
                // (the CRC and the other directories' copies cover a torn write).
                Err(Error::Io { source, .. }) if is_no_space(&source) => {
                    overwrite_in_place(&path, &bytes)
                }
                other => other,
            };
            match result {
                Ok(()) => written += 1,
                Err(e) => {
                    log::warn!("metadata not updated in {}: {e}", dir.display());
                    first_error.get_or_insert(e);
                }
            }
        }
        match first_error {
            Some(e) if written == 0 => Err(e),
            _ => Ok(()),
        }
    }
}

fn overwrite_in_place(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .ctx("rewriting", path)?;
    f.write_all_at(bytes, 0)
        .and_then(|()| f.sync_data())
        .ctx("rewriting", path)
}

/// The newest valid checkpoint among `dirs`. Unreadable or damaged copies are skipped with a
/// warning; copies from two different stores are an error.
pub fn read_newest(dirs: &[PathBuf]) -> Result<Option<Checkpoint>> {
    let mut newest: Option<(Checkpoint, &Path)> = None;
    for dir in dirs {
        let path = dir.join(CHECKPOINT_FILE);
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => {
                log::warn!("ignoring unreadable {}: {e}", path.display());
                continue;
            }
        };
        let c = match Checkpoint::decode(&bytes) {
            Ok(c) => c,
            Err(why) => {
                log::warn!("ignoring damaged {}: {why}", path.display());
                continue;
            }
        };
        if let Some((n, other)) = &newest {
            if n.store_id != c.store_id {
                return Err(Error::corruption(
                    Some(path.clone()),
                    None,
                    format!(
                        "directories {} and {} belong to different stores ({} and {})",
                        other.display(),
                        dir.display(),
                        n.store_id,
                        c.store_id
                    ),
                ));
            }
        }
        if newest.as_ref().is_none_or(|(n, _)| c.seq > n.seq) {
            newest = Some((c, dir));
        }
    }
    Ok(newest.map(|(c, _)| c))
}

fn new_store_id() -> String {
    let mut h = RandomState::new().build_hasher();
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    h.write_u128(nanos);
    h.write_u32(std::process::id());
    format!("{:016x}", h.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newest_copy_wins_and_damage_is_skipped() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        let dirs = vec![a.path().to_path_buf(), b.path().to_path_buf()];
        let mut c = Checkpoint::new(vec!["x".into()], vec![], 4096);
        c.write(&dirs, 0o640).unwrap();
        c.seq = 5;
        c.flushed_offset = 99;
        c.write(&dirs[1..], 0o640).unwrap();
        assert_eq!(read_newest(&dirs).unwrap().unwrap().flushed_offset, 99);
        std::fs::write(b.path().join(CHECKPOINT_FILE), b"{garbage\n0\n").unwrap();
        assert_eq!(read_newest(&dirs).unwrap().unwrap().seq, 0);
    }

    #[test]
    fn two_stores_are_refused() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        Checkpoint::new(vec![], vec![], 4096)
            .write(&[a.path().into()], 0o640)
            .unwrap();
        Checkpoint::new(vec![], vec![], 4096)
            .write(&[b.path().into()], 0o640)
            .unwrap();
        let err = read_newest(&[a.path().into(), b.path().into()]).unwrap_err();
        assert!(err.to_string().contains("different stores"), "{err}");
    }
}
