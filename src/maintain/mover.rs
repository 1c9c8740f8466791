//! Moving sealed segments between directories online (Kafka KIP-113's idea, per segment), and
//! rebalancing the directories' used ratios.
//!
//! A move (one at a time): pick the segment from the sealed part of the list; record the intent in
//! the checkpoint; copy to `NAME.tmp` in the destination, keeping the file's modification time
//! (retention is not reset); sync; rename; sync the directory; switch the list to the copy through
//! [`State::change`], which checks that the segment is still the one copied (retention may have
//! deleted it meanwhile: the copy is then removed); delete the source; clear the intent. Until the
//! intent is cleared, the source is the copy in use; a crash anywhere leaves exactly one copy
//! after reopen. Appends, reads and cleaning go on during the copy.

use std::fs::{self, File, FileTimes};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{Error, IoContext, Result};
use crate::failpoint::fail_point;
use crate::state::dirs::{Dir, DirState};
use crate::state::{Change, State};
use crate::storage::checkpoint::{DirRecord, Move};
use crate::storage::fs::{remove_durably, segment_name, sync_dir, TEMP_SUFFIX};
use crate::storage::key_index;
use crate::storage::segment::Segment;
use crate::sync::locked;

/// Bytes copied between two checks that the log is still open.
const COPY_CHUNK: usize = 16 << 20;

/// Copies `src` to `tmp` in chunks (in the kernel where it can), keeping the modification time,
/// and syncs it. Stops with [`Error::Closed`] between chunks once the log is closed: a close
/// waits for the move, so a long copy must not hold it up.
fn copy_keeping_mtime(state: &State, src: &Path, tmp: &Path) -> Result<()> {
    let from = File::open(src).ctx("opening segment", src)?;
    let meta = from.metadata().ctx("reading the time of", src)?;
    let to = File::options()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(state.opts.file_mode)
        .open(tmp)
        .ctx("creating", tmp)?;
    let mut in_kernel = true;
    let mut buf = Vec::new();
    let mut at = 0u64;
    while at < meta.len() {
        fail_point!("move::copying");
        state.check_open()?;
        let want = COPY_CHUNK.min((meta.len() - at) as usize);
        let n = if in_kernel {
            let (mut at_in, mut at_out) = (at, at);
            match rustix::fs::copy_file_range(&from, Some(&mut at_in), &to, Some(&mut at_out), want)
            {
                Ok(n) => n,
                // Not between these filesystems (or not at all): copy through memory.
                Err(rustix::io::Errno::XDEV | rustix::io::Errno::NOSYS)
                | Err(rustix::io::Errno::OPNOTSUPP | rustix::io::Errno::INVAL) => {
                    in_kernel = false;
                    continue;
                }
                Err(e) => return Err(Error::io("copying segment", src, e.into())),
            }
        } else {
            buf.resize(want, 0);
            from.read_exact_at(&mut buf, at)
                .ctx("reading segment", src)?;
            to.write_all_at(&buf, at).ctx("writing", tmp)?;
            want
        };
        if n == 0 {
            return Err(Error::io(
                "copying segment (it ended early)",
                src,
                std::io::Error::from(std::io::ErrorKind::UnexpectedEof),
            ));
        }
        at += n as u64;
    }
    let modified = meta.modified().ctx("reading the time of", src)?;
    to.set_times(FileTimes::new().set_modified(modified))
        .ctx("setting the time of", tmp)?;
    to.sync_all().ctx("syncing", tmp)
}

/// The sealed segment starting at `start`, checked movable to directory `to`.
fn movable(state: &State, start: u64, to: usize) -> Result<Arc<Segment>> {
    state.change(|p| {
        let Some(seg) = p.sealed().iter().find(|s| s.start() == start) else {
            let (min, max) = (state.min_offset(), state.max_offset());
            if start < min || start >= max {
                return Err(state.range_error(start.into()));
            }
            let reason = match p.list.find(start) {
                Some(s) if s.start() == start => {
                    "it starts the active segment (still being written): only sealed segments move"
                        .to_string()
                }
                _ => "no segment starts there (segments() lists the start offsets)".to_string(),
            };
            return Err(Error::InvalidOffset {
                offset: start,
                reason,
            });
        };
        if seg.is_lost() {
            return Err(Error::Unsupported(format!(
                "segment {start} was lost with {}; there is nothing to move",
                seg.path().display()
            )));
        }
        if seg.is_remote() {
            return Err(Error::Unsupported(format!(
                "segment {start} is only in the remote tier ({}); there is no local file to move",
                seg.path().display()
            )));
        }
        let dir = &state.dirs[to];
        if dir.read_only || dir.state().0 == DirState::Offline {
            return Err(Error::invalid(format!(
                "{} is {}; segments can only move to a writable directory",
                dir.path.display(),
                dir.state().0.as_str()
            )));
        }
        Ok((None, Arc::clone(seg)))
    })
}

/// [`CommitLog::move_segment`](crate::CommitLog::move_segment).
pub(crate) fn move_segment(state: &State, start: u64, dest: &Path) -> Result<()> {
    let to = state.dir_index(dest).ok_or_else(|| {
        Error::invalid(format!(
            "{} is not a directory of this store; give one of paths",
            dest.display()
        ))
    })?;
    let _one_move = locked(&state.move_lock);
    state.check_open()?; // closed while this move waited for the previous one
                         // Shared writers: a listing of another thread of this open, taken while the previous move
                         // had two copies, kept its source (as the intent says); that move's deletion announced it.
    crate::shared::catch_up(state)?;
    let seg = movable(state, start, to)?;
    if to == seg.dir() {
        return Ok(());
    }
    // 1. The intent.
    let record = |d: &Dir| DirRecord {
        id: d.id.clone(),
        path: d.path.to_string_lossy().into_owned(),
    };
    state.set_move_intent(Some(Move {
        start,
        from: record(&state.dirs[seg.dir()]),
        to: record(&state.dirs[to]),
    }))?;
    let result = copy_and_switch(state, &seg, to);
    // 6. The intent goes, whatever happened: on failure the source is still the copy in use.
    let cleared = state.set_move_intent(None);
    result.and(cleared)
}

fn copy_and_switch(state: &State, seg: &Arc<Segment>, to: usize) -> Result<()> {
    let name = segment_name(seg.start());
    let dest_dir = &state.dirs[to].path;
    let tmp = dest_dir.join(format!("{name}{TEMP_SUFFIX}"));
    let dst = dest_dir.join(&name);
    // 2-3. Copy, sync, rename, sync the directory.
    let copied = copy_keeping_mtime(state, seg.path(), &tmp)
        .and_then(|()| fs::rename(&tmp, &dst).ctx("renaming", &tmp))
        .and_then(|()| sync_dir(dest_dir));
    if let Err(e) = copied {
        let _ = fs::remove_file(&tmp);
        return Err(gone_or(state, seg, e));
    }
    copy_key_index(seg.path(), &dst);
    fail_point!("move::copied");
    // 4. Readers switch to the copy; maps of the old file stay valid for their holders.
    let moved = Arc::new(Segment::new(
        seg.start(),
        seg.size(),
        dst.clone(),
        to,
        false,
    ));
    moved.set_written(seg.written());
    let switched = state.change(|p| {
        if !p.sealed().iter().any(|s| Arc::ptr_eq(s, seg)) {
            return Err(gone_or(
                state,
                seg,
                Error::Internal("segment left the list".into()),
            ));
        }
        let old = Arc::clone(seg);
        Ok((Some(Change::Replace { old, new: moved }), ()))
    });
    if let Err(e) = switched {
        remove_durably(&dst)?;
        return Err(e);
    }
    fail_point!("move::switched");
    // 5. The source goes.
    remove_durably(seg.path())?;
    key_index::remove_beside(seg.path());
    state.announce_file_gone();
    Ok(())
}

/// The segment's key index goes with it (temp file, rename); one that cannot be copied is
/// rebuilt by the next writer's lookup, so a failure here is only logged.
fn copy_key_index(src: &Path, dst: &Path) {
    let (from, to) = (key_index::path_of(src), key_index::path_of(dst));
    if !from.exists() {
        return;
    }
    let mut tmp = to.as_os_str().to_owned();
    tmp.push(TEMP_SUFFIX);
    let tmp = PathBuf::from(tmp);
    let copied = fs::copy(&from, &tmp)
        .and_then(|_| fs::File::open(&tmp)?.sync_all())
        .and_then(|()| fs::rename(&tmp, &to));
    if let Err(e) = copied {
        let _ = fs::remove_file(&tmp);
        log::warn!("the key index {} was not moved: {e}", from.display());
    }
}

/// `e`, unless the segment was deleted by retention while it was being moved: then the move
/// reports its offset out of range.
fn gone_or(state: &State, seg: &Segment, e: Error) -> Error {
    if seg.start() < state.min_offset() {
        return state.range_error(seg.start().into());
    }
    e
}

/// A move of `rebalance`: (start offset, from, to).
pub type Moved = (u64, PathBuf, PathBuf);

/// [`CommitLog::rebalance`](crate::CommitLog::rebalance).
pub(crate) fn rebalance(state: &State, max_bytes: Option<u64>) -> Result<Vec<Moved>> {
    let mut moves = Vec::new();
    let mut moved_bytes = 0u64;
    while state.check_open().is_ok() {
        let infos = state.dir_infos();
        let usable: Vec<usize> = (0..infos.len())
            .filter(|&i| {
                !state.dirs[i].read_only
                    && infos[i].state != DirState::Offline
                    && infos[i].used_ratio.is_some()
            })
            .collect();
        let ratio = |i: usize| infos[i].used_ratio.unwrap_or(0.0);
        let hi = usable
            .iter()
            .copied()
            .max_by(|&a, &b| ratio(a).total_cmp(&ratio(b)));
        let lo = usable
            .iter()
            .copied()
            .min_by(|&a, &b| ratio(a).total_cmp(&ratio(b)));
        let (Some(hi), Some(lo)) = (hi, lo) else {
            break;
        };
        if hi == lo || state.dirs[hi].dev.is_some() && state.dirs[hi].dev == state.dirs[lo].dev {
            break;
        }
        let candidate = state.change(|p| {
            let seg = p
                .sealed()
                .iter()
                .find(|s| s.dir() == hi)
                .map(|s| (s.start(), s.size()));
            Ok((None, seg))
        })?;
        let Some((start, size)) = candidate else {
            break;
        };
        let cap = |i: usize| infos[i].total_bytes.unwrap_or(1).max(1) as f64;
        let new_hi = ratio(hi) - size as f64 / cap(hi);
        let new_lo = ratio(lo) + size as f64 / cap(lo);
        // Only moves that narrow the gap, never past the middle.
        if new_lo > new_hi || infos[lo].free_bytes.is_none_or(|f| f < size) {
            break;
        }
        if max_bytes.is_some_and(|m| moved_bytes + size > m) {
            break;
        }
        let (from, dest) = (state.dirs[hi].path.clone(), state.dirs[lo].path.clone());
        match move_segment(state, start, &dest) {
            Ok(()) => {}
            // Deleted by retention meanwhile: nothing to move, the ratios changed anyway.
            Err(Error::OffsetOutOfRange { .. }) => continue,
            Err(e) => return Err(e),
        }
        moved_bytes += size;
        moves.push((start, from, dest));
    }
    Ok(moves)
}
