//! A move its process never finished (crashed, or SIGKILLed while other shared writers stay
//! open): its intent is in the checkpoint, and exactly one copy of the segment must remain.
//! The source is the copy in use until the destination got its final name (after a sync): with
//! both there, the move is completed (the source goes); otherwise it is rolled back (the partial
//! copy goes).

use std::fs;
use std::path::Path;

use crate::error::Result;
use crate::open::locate::Store;
use crate::state::State;
use crate::storage::checkpoint::{Checkpoint, DirRecord, Move};
use crate::storage::fs::{remove_durably, segment_name, TEMP_SUFFIX};

/// At open: completes or rolls back a move a crash interrupted, then clears the intent (written
/// with the next checkpoint, before any append).
pub(crate) fn finish_interrupted_move(c: &mut Checkpoint, store: &Store) -> Result<()> {
    let Some(m) = c.moving.take() else {
        return Ok(());
    };
    let name = segment_name(m.start);
    let (Some(from), Some(to)) = (store.path_of(&m.from), store.path_of(&m.to)) else {
        // A directory of the move was not given: the open's checks of the listing decide.
        log::warn!(
            "an interrupted move of segment {name} from {} to {} is left as it is: a directory \
             of it was not given",
            m.from.path,
            m.to.path
        );
        return Ok(());
    };
    finish_move(m.start, from, to)
}

/// Shared writers: finishes the move `m` a dead process left half done (its intent is in the
/// newest checkpoint on disk, and no move runs: the caller holds the maintenance lock, which
/// every move holds). Whether it did; the caller then writes a checkpoint without the intent.
pub(crate) fn finish_dead_move(state: &State, m: &Move) -> Result<bool> {
    let dir = |r: &DirRecord| {
        state
            .dirs
            .iter()
            .find(|d| r.is(d.id.as_deref(), &d.path))
            .map(|d| d.path.as_path())
    };
    let (Some(from), Some(to)) = (dir(&m.from), dir(&m.to)) else {
        return Ok(false); // not this store's directories: the next exclusive open decides
    };
    log::warn!(
        "a shared writer died moving segment {} from {} to {}",
        m.start,
        from.display(),
        to.display()
    );
    finish_move(m.start, from, to)?;
    Ok(true)
}

/// Completes a move whose destination got its final name (the source goes), or rolls back one
/// that did not (the partial copy goes).
fn finish_move(start: u64, from: &Path, to: &Path) -> Result<()> {
    let name = segment_name(start);
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
    Ok(())
}
