//! The writer's file descriptor on its active segment, beside the map: it warms the page cache
//! just ahead of the map writes, and writes large records directly.
//!
//! Warming. A segment is preallocated with `fallocate`, so its blocks are unwritten extents: the
//! first store through the map into each page faults, reads a zero page for the unwritten extent
//! and starts a filesystem transaction (ext4's `page_mkwrite`). Zeros written with `pwrite` a chunk
//! at a time ahead of the writer put the pages in the page cache with their blocks mapped, so the
//! copy through the map takes a cheap minor fault instead: about 1.6x faster appends of 1 KiB
//! records on ext4 here. RocketMQ warms a whole new file this way (`warmMappedFile`); a bounded
//! chunk keeps the cost inline, small and paid only for what gets written.
//!
//! In `FlushMode::Sync` each warmed chunk (up to 4 MiB there) is also synced at once, as RocketMQ's
//! warm-up does for synchronous flushing: its unwritten extents become written ones in one go,
//! so the sync after each append writes the record's pages and no extent-tree block (which on
//! ext4 is one more synchronous write per sync once a file has more extents than its inode
//! holds, as a 1 GiB segment does).
//!
//! Direct writes. A record of [`DIRECT_MIN`] bytes or more spans several pages: one `pwritev`
//! costs less than a fault per page through the map. In sync mode every record is written so:
//! beside the sync a syscall costs nothing, while a page written through the map takes a
//! write-protect fault after each sync. The page cache is shared with the map, so readers see
//! the same bytes.
//!
//! Only bytes at or above the writer's position are ever written here: they hold no published
//! record. The warm part is shared with the `rmqlog-warm` thread through an [`Edge`] (see
//! [`crate::write::warmer`]): zeros go above its `ready` mark only under its lock.

use std::fs::{File, OpenOptions};
use std::io::IoSlice;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use crate::storage::record::{self, HEADER_LEN};
use crate::storage::segment::{Mapping, Segment};
use crate::write::warmer::{Edge, Target, CHUNK, ZEROS};
/// At most this many bytes are warmed and synced at a time in sync mode (written as `CHUNK`s):
/// the amount grows with the segment's warm part, so the first append of a new segment pays for
/// one `CHUNK` only.
const SYNCED_CHUNK: u64 = 4 << 20;

/// Records (header included) at least this long are written with `pwritev`, not through the map;
/// in sync mode all are (a syscall is nothing beside the sync, and a page written through the map
/// faults again after each sync has write-protected it).
const DIRECT_MIN: usize = 16 * 1024;

/// The active segment's file: `[.., edge.ready())` is warm or written.
#[derive(Debug)]
pub(crate) struct ActiveFile {
    /// `None` when there is no active segment, or its file refused a write: the map does it all.
    file: Option<Arc<File>>,
    edge: Arc<Edge>,
    size: u64,
    /// Sync each warmed chunk (`FlushMode::Sync`).
    sync: bool,
}

impl ActiveFile {
    /// Opens `seg`'s file; `pos` is the writer's position in it; `sync` for `FlushMode::Sync`.
    pub fn new(seg: &Segment, pos: u64, sync: bool) -> ActiveFile {
        let file = match OpenOptions::new().write(true).open(seg.path()) {
            Ok(f) => Some(f),
            Err(e) => {
                log::debug!("writing {} through its map only: {e}", seg.path().display());
                None
            }
        };
        ActiveFile {
            file: file.map(Arc::new),
            edge: Arc::new(Edge::new(pos)),
            size: seg.size(),
            sync,
        }
    }

    /// No active segment: nothing is written outside the map.
    pub fn none() -> ActiveFile {
        ActiveFile {
            file: None,
            edge: Arc::new(Edge::new(0)),
            size: 0,
            sync: false,
        }
    }

    /// What the `rmqlog-warm` thread needs to warm this segment ahead of the writer; `None` when
    /// the file is unusable.
    pub fn target(&self, seg: &Segment, map: &Arc<Mapping>) -> Option<Arc<Target>> {
        Some(Arc::new(Target {
            start: seg.start(),
            size: self.size,
            edge: Arc::clone(&self.edge),
            file: Arc::clone(self.file.as_ref()?),
            map: Arc::clone(map),
        }))
    }

    /// Ends warming of this segment (it is sealed or the log closes): the whole segment counts
    /// as warm, so the thread writes nothing more in it.
    pub fn retire(&self) {
        let held = self.edge.lock();
        self.edge.raise(&held, self.size);
    }

    /// Where the segment is warm up to (a position in it).
    #[inline]
    pub fn ready(&self) -> u64 {
        self.edge.ready()
    }

    /// Counts `[.., pos)` as warm: another shared writer wrote records there (no zeros may land
    /// on them).
    pub fn raise_to(&self, pos: u64) {
        if pos > self.edge.ready() {
            let held = self.edge.lock();
            self.edge.raise(&held, pos);
        }
    }

    /// Makes `[.., end)` warm (positions in the segment). The caller holds the writer mutex and
    /// its position is at or below the edge, so the zeros land where no record is yet.
    #[inline]
    pub fn warm(&mut self, end: u64) {
        if end > self.edge.ready() {
            self.warm_to(end);
        }
    }

    #[cold]
    fn warm_to(&mut self, end: u64) {
        let edge = Arc::clone(&self.edge);
        let held = edge.lock();
        let Some(file) = self.file.clone() else {
            // The map writes: keep the thread's zeros away.
            edge.raise(&held, end);
            return;
        };
        let from = edge.ready();
        let end = if self.sync {
            end.max(from + from.clamp(CHUNK as u64, SYNCED_CHUNK))
        } else {
            end
        };
        let mut upto = from;
        while upto < end.min(self.size) {
            let n = (self.size - upto).min(CHUNK as u64) as usize;
            if let Err(e) = file.write_all_at(&ZEROS[..n], upto) {
                edge.raise(&held, upto);
                self.stop(e);
                return;
            }
            upto += n as u64;
        }
        edge.raise(&held, upto);
        // In sync mode every earlier record is synced already: this writes the zeros.
        if self.sync && upto > from {
            if let Err(e) = file.sync_data() {
                self.stop(e);
            }
        }
    }

    /// Whether a record of `len` bytes (header included) is for [`ActiveFile::write_record`]
    /// (never once the file is unusable: the map takes everything then).
    #[inline]
    pub fn takes(&self, len: usize) -> bool {
        self.file.is_some() && (self.sync || len >= DIRECT_MIN)
    }

    /// Writes a record at `pos` (the writer's position) in [`record::store`]'s order. False when
    /// the file is not usable; the caller then writes through the map, which rewrites every byte.
    pub fn write_record(
        &mut self,
        pos: u64,
        header: &[u8; HEADER_LEN],
        props: &[u8],
        body: &[u8],
    ) -> bool {
        let end = pos + (HEADER_LEN + props.len() + body.len()) as u64;
        if self.sync {
            self.warm(end);
        }
        let Some(file) = self.file.clone() else {
            return false;
        };
        if end > self.edge.ready() {
            // Reserve the range: no zeros from the thread may land on it from now on.
            let held = self.edge.lock();
            self.edge.raise(&held, end);
        }
        let written = record::store(header, props, body, |at, parts| {
            let mut slices = [IoSlice::new(&[]), IoSlice::new(&[]), IoSlice::new(&[])];
            let n = parts.len().min(slices.len());
            for (slice, part) in slices.iter_mut().zip(parts) {
                *slice = IoSlice::new(part);
            }
            write_all_vectored_at(&file, &slices[..n], pos + at as u64)
        });
        match written {
            Ok(()) => true,
            Err(e) => {
                self.stop(e);
                false
            }
        }
    }

    /// Only a speed-up: after an error the map does the work (and a sync reports a real fault).
    fn stop(&mut self, e: std::io::Error) {
        log::debug!(
            "active segment file writes stop below {}: {e}",
            self.edge.ready()
        );
        self.file = None;
    }
}

fn write_all_vectored_at(file: &File, bufs: &[IoSlice<'_>], at: u64) -> std::io::Result<()> {
    let total: usize = bufs.iter().map(|b| b.len()).sum();
    let n = rustix::io::pwritev(file, bufs, at)?;
    if n == total {
        return Ok(());
    }
    // A short write (rare): finish piece by piece.
    let mut skip = n;
    let mut at = at + n as u64;
    for b in bufs {
        if skip >= b.len() {
            skip -= b.len();
            continue;
        }
        file.write_all_at(&b[skip..], at)?;
        at += (b.len() - skip) as u64;
        skip = 0;
    }
    Ok(())
}
