//! File-system helpers: names, preallocation, directory sync, atomic writes.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::error::{Error, IoContext, Result};

/// Digits of a segment file name.
pub const NAME_DIGITS: usize = 20;
/// Suffix of a segment being created.
pub const TEMP_SUFFIX: &str = ".tmp";

/// `00000000001073741824` for offset 1073741824.
pub fn segment_name(start: u64) -> String {
    format!("{start:020}")
}

/// Whether `name` has the form of a segment file name: twenty digits.
pub fn is_segment_like(name: &str) -> bool {
    name.len() == NAME_DIGITS && name.bytes().all(|b| b.is_ascii_digit())
}

/// The start offset named by a segment file name, if it is one (`None` past 2^64 too).
pub fn parse_segment_name(name: &str) -> Option<u64> {
    is_segment_like(name).then(|| name.parse().ok()).flatten()
}

/// True for a leftover of an interrupted segment creation.
pub fn is_temp_segment(name: &str) -> bool {
    name.strip_suffix(TEMP_SUFFIX)
        .is_some_and(|n| parse_segment_name(n).is_some())
}

/// Makes a create, rename or delete in `dir` durable.
pub fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .ctx("syncing directory", dir)
}

/// Reserves `len` bytes of real blocks for `file`, so writes through a map never hit ENOSPC.
#[cfg(target_os = "linux")]
pub fn preallocate(file: &File, len: u64) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let len =
        libc::off_t::try_from(len).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: posix_fallocate only reads its integer arguments; the descriptor is open and owned
    // by `file` for the whole call. This is what makes writes through the map safe from SIGBUS.
    let errno = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, len) };
    // posix_fallocate returns the error number instead of setting errno.
    match errno {
        0 => Ok(()),
        errno => Err(io::Error::from_raw_os_error(errno)),
    }
}

/// Portable fallback: write zeros so every block is allocated.
#[cfg(not(target_os = "linux"))]
pub fn preallocate(file: &File, len: u64) -> io::Result<()> {
    use std::io::{Seek, SeekFrom};
    let mut f = file;
    f.seek(SeekFrom::Start(0))?;
    let zeros = vec![0u8; 1 << 20];
    let mut left = len;
    while left > 0 {
        let n = left.min(zeros.len() as u64) as usize;
        f.write_all(&zeros[..n])?;
        left -= n as u64;
    }
    Ok(())
}

/// True when an I/O error means the device has no space left.
pub fn is_no_space(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::ENOSPC) || e.raw_os_error() == Some(libc::EDQUOT)
}

/// Creates `dir/name` holding `len` bytes of allocated zeros, visible under its final name only once
/// fully allocated and synced: written as `name.tmp`, preallocated, synced, renamed, dir synced.
pub fn create_preallocated(dir: &Path, name: &str, len: u64, mode: u32) -> Result<PathBuf> {
    let tmp = dir.join(format!("{name}{TEMP_SUFFIX}"));
    let path = dir.join(name);
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(&tmp)
        .ctx("creating segment", &tmp)?;
    let prepared = preallocate(&file, len)
        .and_then(|()| file.sync_all())
        .ctx("preallocating segment", &tmp);
    drop(file);
    if let Err(e) = prepared {
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    fs::rename(&tmp, &path).ctx("renaming segment", &tmp)?;
    sync_dir(dir)?;
    Ok(path)
}

/// Removes a file and syncs its directory.
pub fn remove_durably(path: &Path) -> Result<()> {
    fs::remove_file(path).ctx("removing", path)?;
    if let Some(dir) = path.parent() {
        sync_dir(dir)?;
    }
    Ok(())
}

/// Replaces `path` with `data` atomically: temp file, fsync, rename, fsync dir.
pub fn atomic_write(path: &Path, data: &[u8], mode: u32) -> Result<()> {
    let dir = path
        .parent()
        .ok_or_else(|| Error::invalid(format!("{} has no parent directory", path.display())))?;
    replace(path, data, mode, true)?;
    sync_dir(dir)
}

/// Replaces `path` with `data` by a temp file and a rename, without a sync: a reader finds the
/// old bytes or the new ones, never a mix, unless the machine loses power before the kernel
/// writes them (then either, or a torn file). For a cache whose reader checks a CRC.
pub fn replace_unsynced(path: &Path, data: &[u8], mode: u32) -> Result<()> {
    replace(path, data, mode, false)
}

/// Writes `data` to a temp file beside `path` (synced if `durable`), then renames it over `path`.
fn replace(path: &Path, data: &[u8], mode: u32, durable: bool) -> Result<()> {
    let mut tmp_name = path.as_os_str().to_owned();
    tmp_name.push(TEMP_SUFFIX);
    let tmp = PathBuf::from(tmp_name);
    let written = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(&tmp)
        .and_then(|mut f| {
            f.write_all(data)?;
            if durable {
                f.sync_all()?;
            }
            Ok(())
        });
    if let Err(e) = written.and_then(|()| fs::rename(&tmp, path)) {
        let _ = fs::remove_file(&tmp);
        return Err(Error::io("writing", tmp, e));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_twenty_digits() {
        assert_eq!(segment_name(0), "00000000000000000000");
        assert_eq!(segment_name(1073741824), "00000000001073741824");
        assert_eq!(parse_segment_name("00000000001073741824"), Some(1073741824));
        assert_eq!(parse_segment_name("0000000000107374182"), None);
        assert_eq!(parse_segment_name("0000000000107374182x"), None);
        assert!(is_temp_segment("00000000001073741824.tmp"));
        assert!(!is_temp_segment("rmqlog.meta.tmp"));
    }

    #[test]
    fn preallocated_file_has_full_length() {
        let dir = tempfile::tempdir().unwrap();
        let p = create_preallocated(dir.path(), &segment_name(0), 8192, 0o640).unwrap();
        assert_eq!(fs::metadata(&p).unwrap().len(), 8192);
        assert!(!dir.path().join("00000000000000000000.tmp").exists());
    }
}
