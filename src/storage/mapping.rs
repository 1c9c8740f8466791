//! A whole file mapped into memory: a segment, or a remote segment's copy in the tier's cache.
//!
//! A [`Mapping`] is unmapped only when its last `Arc` goes, so a slice handed to a reader stays
//! valid after the log is closed or the file is deleted. Callers map only files that keep their
//! full length while mapped (see `segment.rs`, and the tier's `cache.rs` and `in_place.rs`), so
//! no access faults.

use std::fs::{File, OpenOptions};
use std::path::Path;

use memmap2::{MmapOptions, MmapRaw};

use crate::error::{Error, IoContext, Result};

/// A whole file mapped into memory.
#[derive(Debug)]
pub struct Mapping {
    raw: MmapRaw,
}

impl Mapping {
    /// Maps the first `len` bytes of `file` (at `path`, for messages), writable if `writable`.
    pub(crate) fn of_file(file: &File, len: u64, writable: bool, path: &Path) -> Result<Mapping> {
        let mut opts = MmapOptions::new();
        opts.len(len as usize);
        let raw = if writable {
            opts.map_raw(file)
        } else {
            opts.map_raw_read_only(file)
        }
        .ctx("mapping", path)?;
        Ok(Mapping { raw })
    }

    /// Maps the whole of the file at `path` read-only; `len` is its expected length (a file of
    /// another length is refused: mapping past its end would fault on access).
    #[cfg_attr(not(feature = "tier"), allow(dead_code))] // the tier's cache
    pub(crate) fn open_read_only(path: &Path, len: u64) -> Result<Mapping> {
        let file = OpenOptions::new()
            .read(true)
            .open(path)
            .ctx("opening", path)?;
        let actual = file.metadata().ctx("reading length of", path)?.len();
        if actual != len {
            return Err(Error::corruption(
                Some(path.to_path_buf()),
                None,
                format!("file has length {actual}, expected {len}"),
            ));
        }
        Mapping::of_file(&file, len, false, path)
    }

    /// Length of the map (the segment size).
    pub fn len(&self) -> usize {
        self.raw.len()
    }

    /// Whether the map is empty (never, for a segment).
    pub fn is_empty(&self) -> bool {
        self.raw.len() == 0
    }

    /// Start of the mapped bytes.
    pub fn as_ptr(&self) -> *const u8 {
        self.raw.as_ptr()
    }

    /// The mapped bytes `[start, end)`.
    ///
    /// Callers read published bytes (immutable) or, when looking for the end of a log another
    /// process writes, bytes they validate by CRC before trusting.
    pub fn bytes(&self, start: usize, end: usize) -> &[u8] {
        assert!(
            start <= end && end <= self.raw.len(),
            "range outside the map"
        );
        // SAFETY: the range lies inside the live map (checked above); the file is never truncated
        // (module invariants), so every page is backed; `self` keeps the map alive for the borrow.
        unsafe { std::slice::from_raw_parts(self.raw.as_ptr().add(start), end - start) }
    }

    /// Copies `data` into the map at `pos`.
    ///
    /// # Safety
    /// The caller is the log's single writer (holds the writer mutex), the map is writable, and
    /// `[pos, pos + data.len())` lies above the segment's published end, so no reader in this
    /// process holds a slice over it.
    pub unsafe fn write(&self, pos: usize, data: &[u8]) {
        assert!(pos + data.len() <= self.raw.len(), "write outside the map");
        // SAFETY: in bounds (checked above); exclusive access to the range per the contract.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.raw.as_mut_ptr().add(pos), data.len())
        };
    }

    /// Syncs `[start, end)` to stable storage (msync).
    pub fn flush(&self, start: usize, end: usize) -> std::io::Result<()> {
        if end > start {
            self.raw.flush_range(start, end - start)?;
        }
        Ok(())
    }
}
