//! `rmqlog.tail`: a recovery point that holds only while the page cache does.
//!
//! The writer records, at every segment roll and after every open, the start of its active
//! segment: every byte below it was copied into the maps by a writer of this store. After a
//! process crash the page cache still holds those bytes, so recovery can start its scan there
//! instead of at `flushed_offset` (which only moves when data is synced; never, in
//! `FlushMode::None`), and the reopen costs one segment's scan however long the log is (Kafka
//! gets the same by syncing at each roll).
//!
//! The page cache is what the hint vouches for, so it names it: the kernel's boot id and, for
//! every directory of the store, the unique id of the mount it is on (Linux 6.8+). After a reboot
//! (power loss, kernel crash) or a remount (a disk detached, a filesystem image restored) one of
//! them differs and the hint is ignored: recovery scans from `flushed_offset` as without it.
//! Where the kernel has no unique mount ids, no hint is written.
//!
//! The file is rewritten in place with one `pwrite` and never synced: it only has to survive a
//! process crash, which the page cache does. A damaged copy fails its CRC and is ignored, as is a
//! copy from another store or a point at which no segment starts.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

use crate::storage::crc_line;
use crate::storage::fs::sync_dir;

/// Name of the hint file in every writable directory of a store.
pub const TAIL_FILE: &str = "rmqlog.tail";
const FILE_LEN: usize = 256;

/// One recorded recovery point.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TailHint {
    /// The store it belongs to (the checkpoint's `store_id`).
    pub store_id: String,
    /// The page cache it relies on: boot id, and each directory with its unique mount id.
    pub cache: CacheId,
    /// A segment start; every byte below it was written before the hint.
    pub offset: u64,
    /// At least the largest record timestamp below `offset`.
    pub max_timestamp_ms: u64,
}

/// Names one life of the page cache of a store's directories.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheId {
    boot_id: String,
    mounts: Vec<(String, u64)>,
}

impl CacheId {
    /// The current one for `dirs`, if the platform can tell.
    fn of(dirs: &[PathBuf]) -> Option<CacheId> {
        let mut mounts: Vec<(String, u64)> = dirs
            .iter()
            .map(|d| Some((d.to_string_lossy().into_owned(), unique_mount_id(d)?)))
            .collect::<Option<_>>()?;
        mounts.sort();
        Some(CacheId {
            boot_id: boot_id()?.to_owned(),
            mounts,
        })
    }
}

/// Names the current life of the page cache of the filesystems `dirs` are on: the boot id and
/// their unique mount ids (sorted, each once), if the platform can tell. What a process left only
/// in memory-mapped files of those filesystems is there while this stays the same.
pub fn page_cache_id(dirs: &[PathBuf]) -> Option<String> {
    let mut mounts: Vec<u64> = dirs
        .iter()
        .map(|d| unique_mount_id(d))
        .collect::<Option<_>>()?;
    mounts.sort_unstable();
    mounts.dedup();
    let mounts: Vec<String> = mounts.iter().map(u64::to_string).collect();
    Some(format!("{} {}", boot_id()?, mounts.join(" ")))
}

/// The mount's id that is never reused while the kernel runs (`STATX_MNT_ID_UNIQUE`).
fn unique_mount_id(dir: &Path) -> Option<u64> {
    const STATX_MNT_ID_UNIQUE: u32 = 0x4000;
    let st = rustix::fs::statx(
        rustix::fs::CWD,
        dir,
        rustix::fs::AtFlags::empty(),
        rustix::fs::StatxFlags::from_bits_retain(STATX_MNT_ID_UNIQUE),
    )
    .ok()?;
    (st.stx_mask & STATX_MNT_ID_UNIQUE != 0).then_some(st.stx_mnt_id)
}

/// The id of the running kernel's boot.
fn boot_id() -> Option<&'static str> {
    static ID: OnceLock<Option<String>> = OnceLock::new();
    ID.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
            .ok()
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty())
    })
    .as_deref()
}

impl TailHint {
    fn encode(&self) -> Vec<u8> {
        crc_line::encode(self, FILE_LEN)
    }

    fn decode(bytes: &[u8]) -> Option<TailHint> {
        crc_line::decode(bytes).ok()
    }
}

/// The newest hint of `store_id` whose page cache is the current one of `dirs` (every directory
/// of the store), among the copies in `dirs`.
pub fn read(dirs: &[PathBuf], store_id: &str) -> Option<TailHint> {
    let cache = CacheId::of(dirs)?;
    dirs.iter()
        .filter_map(|d| crc_line::read_file(&d.join(TAIL_FILE)).ok())
        .filter_map(|b| TailHint::decode(&b))
        .filter(|h| h.store_id == store_id && h.cache == cache)
        // Every copy was true when written and the log never ends below one in the same cache.
        .max_by_key(|h| h.offset)
}

/// The writer's open hint files, one per writable directory that could take one.
#[derive(Debug, Default)]
pub(crate) struct TailHints {
    store_id: String,
    /// `None`: no hint is written (the platform cannot name the page cache).
    cache: Option<CacheId>,
    files: Vec<(usize, File)>,
}

impl TailHints {
    /// Opens (creating where needed) the hint file in each writable directory (index, path) of a
    /// store whose directories are `all`. A directory that refuses is left out: the hint is an
    /// optimisation.
    pub fn open(store_id: &str, writable: &[(usize, &Path)], all: &[PathBuf], mode: u32) -> Self {
        let mut hints = TailHints {
            store_id: store_id.to_owned(),
            cache: CacheId::of(all),
            files: Vec::new(),
        };
        if hints.cache.is_none() {
            return hints;
        }
        for &(idx, dir) in writable {
            let path = dir.join(TAIL_FILE);
            let existed = path.exists();
            let opened = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .mode(mode)
                .open(&path);
            match opened {
                Ok(f) => {
                    if !existed {
                        if let Err(e) = sync_dir(dir) {
                            log::debug!("{e}");
                        }
                    }
                    hints.files.push((idx, f));
                }
                Err(e) => log::debug!("no tail hint in {}: {e}", dir.display()),
            }
        }
        hints
    }

    /// Records `offset` (a segment start) in every directory for which `usable` holds.
    pub fn record(&self, offset: u64, max_timestamp_ms: u64, usable: impl Fn(usize) -> bool) {
        let Some(cache) = &self.cache else { return };
        let bytes = TailHint {
            store_id: self.store_id.clone(),
            cache: cache.clone(),
            offset,
            max_timestamp_ms,
        }
        .encode();
        for (idx, f) in self.files.iter().filter(|(i, _)| usable(*i)) {
            if let Err(e) = f.write_all_at(&bytes, 0) {
                log::debug!("tail hint not updated in directory {idx}: {e}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_filters() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        let dirs = [a.path().to_path_buf(), b.path().to_path_buf()];
        let hints = TailHints::open("s1", &[(0, a.path()), (1, b.path())], &dirs, 0o640);
        if hints.cache.is_none() {
            let why = "this kernel has no unique mount ids (Linux 6.8+)";
            // On the CI machine (RMQLOG_REQUIRE_ALL_TESTS=1, set by .ci/run) no test may skip.
            let required =
                std::env::var("RMQLOG_REQUIRE_ALL_TESTS").is_ok_and(|v| !v.is_empty() && v != "0");
            assert!(!required, "RMQLOG_REQUIRE_ALL_TESTS=1: may not skip: {why}");
            eprintln!("skipped: {why}");
            return;
        }
        hints.record(4096, 7, |_| true);
        hints.record(8192, 9, |i| i == 1);
        let h = read(&dirs, "s1").expect("a hint of this page cache");
        assert_eq!((h.offset, h.max_timestamp_ms), (8192, 9));
        assert_eq!(read(&dirs, "other store"), None);
        // Another set of directories is another cache.
        assert_eq!(read(&dirs[..1], "s1"), None);

        // A torn copy is ignored; the other directory's copy still counts.
        std::fs::write(b.path().join(TAIL_FILE), b"{\"store_id\":\"s1\"\n0\n").unwrap();
        assert_eq!(read(&dirs, "s1").map(|h| h.offset), Some(4096));
        // A copy from another boot (or mount) is ignored.
        let mut stale = TailHint::decode(&std::fs::read(a.path().join(TAIL_FILE)).unwrap())
            .expect("valid copy");
        stale.cache.boot_id = "another boot".into();
        std::fs::write(a.path().join(TAIL_FILE), stale.encode()).unwrap();
        assert_eq!(read(&dirs, "s1"), None);
    }
}
