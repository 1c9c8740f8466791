//! Moving sealed segments between directories online (Kafka KIP-113's idea, per segment), and
//! rebalancing the directories' used ratios.
//!
//! A move: record the intent in the checkpoint; copy to `NAME.tmp` in the destination, keeping
//! the file's modification time (retention is not reset); sync; rename; sync the directory; switch
//! the segment list to the new copy; delete the source; clear the intent. Until the intent is
//! cleared, the source is the copy in use; a crash anywhere leaves exactly one copy after reopen.

use std::fs::{self, File, FileTimes};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::checkpoint::{Checkpoint, Move};
use crate::dirs::DirState;
use crate::error::{Error, IoContext, Result};
use crate::fs::{remove_durably, segment_name, sync_dir, TEMP_SUFFIX};
use crate::log::{locked, CommitLog, Shared};
use crate::segment::Segment;

/// At open: completes or rolls back a move a crash interrupted, then clears the intent.
pub(crate) fn finish_interrupted_move(c: &mut Checkpoint, dirs: &[PathBuf]) -> Result<()> {
    let Some(m) = c.moving.take() else {
        return Ok(());
    };
    let name = segment_name(m.start);
    let (from, to) = (PathBuf::from(&m.from), PathBuf::from(&m.to));
    let (src, dst) = (from.join(&name), to.join(&name));
    let _ = fs::remove_file(to.join(format!("{name}{TEMP_SUFFIX}")));
    if dst.exists() && src.exists() {
        // The destination got its final name only after a sync: it is complete. The source goes.
        log::warn!(
            "completing an interrupted move of {} to {}",
            src.display(),
            to.display()
        );
        remove_durably(&src)?;
    } else if !src.exists() && !dst.exists() {
        log::warn!("an interrupted move of segment {name} left no copy");
    }
    // The cleared intent is written with the next checkpoint, before any append.
    let _ = dirs;
    Ok(())
}

fn copy_keeping_mtime(src: &Path, tmp: &Path) -> Result<()> {
    fs::copy(src, tmp).ctx("copying segment", src)?;
    let modified = fs::metadata(src)
        .and_then(|m| m.modified())
        .ctx("reading the time of", src)?;
    let f = File::options().write(true).open(tmp).ctx("opening", tmp)?;
    f.set_times(FileTimes::new().set_modified(modified))
        .ctx("setting the time of", tmp)?;
    f.sync_all().ctx("syncing", tmp)
}

impl Shared {
    fn dir_index(&self, path: &Path) -> Option<usize> {
        let abs = std::path::absolute(path).ok()?;
        self.dirs.iter().position(|d| d.path == abs)
    }

    /// [`CommitLog::move_segment`].
    pub fn move_segment(&self, start: u64, dest: &Path) -> Result<()> {
        let _guard = locked(&self.clean_lock); // no deletion meanwhile
        let list = self.segments.load_full();
        let segs = list.as_slice();
        let Some(idx) = segs.iter().position(|s| s.start() == start) else {
            return Err(Error::invalid(format!(
                "no segment starts at {start}; segments start at offsets listed by segments()"
            )));
        };
        if idx + 1 == segs.len() {
            return Err(Error::Unsupported(format!(
                "segment {start} is the active segment (still being written) and cannot be moved; \
                 only sealed segments move"
            )));
        }
        let seg = &segs[idx];
        if seg.is_lost() {
            return Err(Error::Unsupported(format!(
                "segment {start} was lost with {}; there is nothing to move",
                seg.path().display()
            )));
        }
        let to = self.dir_index(dest).ok_or_else(|| {
            Error::invalid(format!(
                "{} is not a directory of this store; give one of paths",
                dest.display()
            ))
        })?;
        let dir = &self.dirs[to];
        if dir.read_only || dir.state().0 == DirState::Offline {
            return Err(Error::invalid(format!(
                "{} is {}; segments can only move to a writable directory",
                dir.path.display(),
                dir.state().0.as_str()
            )));
        }
        if to == seg.dir() {
            return Ok(());
        }
        let from_path = self.dirs[seg.dir()].path.clone();
        // 1. The intent.
        locked(&self.checkpoint).moving = Some(Move {
            start,
            from: from_path.to_string_lossy().into_owned(),
            to: dir.path.to_string_lossy().into_owned(),
        });
        self.write_checkpoint(false)?;
        let result = self.copy_and_switch(seg, to);
        // 6. The intent goes, whatever happened: on failure the source is still the copy in use.
        locked(&self.checkpoint).moving = None;
        let cleared = self.write_checkpoint(false);
        result.and(cleared)
    }

    fn copy_and_switch(&self, seg: &Arc<Segment>, to: usize) -> Result<()> {
        let name = segment_name(seg.start());
        let dest_dir = &self.dirs[to].path;
        let tmp = dest_dir.join(format!("{name}{TEMP_SUFFIX}"));
        let dst = dest_dir.join(&name);
        // 2-3. Copy, sync, rename, sync the directory.
        if let Err(e) = copy_keeping_mtime(seg.path(), &tmp) {
            let _ = fs::remove_file(&tmp);
            return Err(e);
        }
        fs::rename(&tmp, &dst).ctx("renaming", &tmp)?;
        sync_dir(dest_dir)?;
        // 4. Readers switch to the new copy; maps of the old one stay valid for their holders.
        let moved = Arc::new(Segment::new(seg.start(), seg.size(), dst, to, false));
        moved.set_written(seg.written());
        self.segments.rcu(|l| l.with_replaced(Arc::clone(&moved)));
        // 5. The source goes.
        remove_durably(seg.path())
    }

    /// [`CommitLog::rebalance`].
    pub fn rebalance(&self, max_bytes: Option<u64>) -> Result<Vec<(u64, PathBuf, PathBuf)>> {
        let mut moves = Vec::new();
        let mut moved_bytes = 0u64;
        loop {
            let infos = self.dir_infos();
            let usable: Vec<usize> = (0..infos.len())
                .filter(|&i| {
                    !self.dirs[i].read_only
                        && infos[i].state != DirState::Offline
                        && infos[i].used_ratio.is_some()
                })
                .collect();
            let ratio = |i: usize| infos[i].used_ratio.unwrap_or(0.0);
            let (Some(&hi), Some(&lo)) = (
                usable
                    .iter()
                    .max_by(|&&a, &&b| ratio(a).total_cmp(&ratio(b))),
                usable
                    .iter()
                    .min_by(|&&a, &&b| ratio(a).total_cmp(&ratio(b))),
            ) else {
                break;
            };
            if hi == lo || self.dirs[hi].dev.is_some() && self.dirs[hi].dev == self.dirs[lo].dev {
                break;
            }
            let list = self.segments.load_full();
            let segs = list.as_slice();
            let sealed = &segs[..segs.len().saturating_sub(1)];
            let Some(seg) = sealed.iter().find(|s| s.dir() == hi) else {
                break;
            };
            let size = seg.size();
            let cap = |i: usize| (infos[i].total_bytes.max(1)) as f64;
            let new_hi = ratio(hi) - size as f64 / cap(hi);
            let new_lo = ratio(lo) + size as f64 / cap(lo);
            // Only moves that narrow the gap, never past the middle.
            if new_lo > new_hi || infos[lo].free_bytes < size {
                break;
            }
            if max_bytes.is_some_and(|m| moved_bytes + size > m) {
                break;
            }
            let (start, from) = (seg.start(), self.dirs[hi].path.clone());
            self.move_segment(start, &self.dirs[lo].path.clone())?;
            moved_bytes += size;
            moves.push((start, from, self.dirs[lo].path.clone()));
            if self.closed.load(Ordering::Acquire) {
                break;
            }
        }
        Ok(moves)
    }
}

impl CommitLog {
    /// Moves a sealed segment to another writable directory of the store, online. Readers switch
    /// to the new copy; records read earlier stay valid. The active segment is refused.
    pub fn move_segment(&self, start_offset: u64, dest: impl AsRef<Path>) -> Result<()> {
        self.shared().check_open()?;
        if self.shared().writer.is_none() {
            return Err(Error::ReadOnly("move_segment"));
        }
        self.shared().move_segment(start_offset, dest.as_ref())
    }

    /// Moves sealed segments from the most used to the least used directory while that narrows
    /// the gap between their used ratios, at most `max_bytes` in this call. Returns the moves.
    pub fn rebalance(&self, max_bytes: Option<u64>) -> Result<Vec<(u64, PathBuf, PathBuf)>> {
        self.shared().check_open()?;
        if self.shared().writer.is_none() {
            return Err(Error::ReadOnly("rebalance"));
        }
        self.shared().rebalance(max_bytes)
    }
}
