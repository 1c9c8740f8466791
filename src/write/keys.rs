//! The appender's side of the key index (`storage/key_index.rs`): after each publication, the
//! active segment's index takes the records from where it stopped to the new end, and a segment
//! the append sealed gets the rest of its records and is marked complete. Runs under the append
//! lock (the writer's cursor; for shared writers the store's lock too), so one process at a
//! time writes an index.
//!
//! A segment gets its index with its first record with a key or a message id (an append whose
//! batch has one, by any process): a store without them has no index files. An index is a
//! cache: nothing here fails an append. A file that cannot be made or grown is logged once per
//! segment and lookups walk the records it lacks.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::state::State;
use crate::storage::key_index::{self, KeyIndex, Opened};
use crate::storage::segment::{Mapping, Segment};

/// What this writer knows of a segment's index.
#[derive(Debug)]
enum Known {
    Index(KeyIndex),
    /// No file yet (no keyed record seen): looked for again when one comes, and at the seal.
    Absent,
    /// It could not be had: not tried again for this segment.
    Failed,
}

/// The index of the segment this writer appends to.
#[derive(Debug, Default)]
pub(crate) struct Indexer {
    at: Option<(u64, Known)>,
}

impl Indexer {
    /// After a publication: `sealed` are the segments the append sealed (with where its records
    /// began and ended in each), `active` the segment appended to, `[from, pos)` its records
    /// there, and `keyed` whether any record of the append has a key.
    pub fn published(
        &mut self,
        sealed: &[(Arc<Segment>, u64, u64)],
        active: Option<(&Arc<Segment>, &Arc<Mapping>)>,
        from: u64,
        pos: u64,
        keyed: bool,
        state: &State,
    ) {
        for (seg, from, end) in sealed {
            let Ok(map) = seg.map() else { continue };
            // Another process may have made it since this one last looked.
            if let Some(ix) = self.index_for(seg, false, true, state) {
                ix.catch_up(map.bytes(0, *end as usize), seg.start(), *from, *end);
                if let Err(e) = ix.complete() {
                    log::warn!("key index of {}: {e}", seg.path().display());
                }
            }
        }
        if let Some((seg, map)) = active {
            if let Some(ix) = self.index_for(seg, keyed, keyed, state) {
                ix.catch_up(map.bytes(0, pos as usize), seg.start(), from, pos);
            }
        }
    }

    /// Before an append with message ids: the index of the active segment `seg` takes the records
    /// published below `pos` (made if there is none), so that its ids can be looked up.
    pub fn caught_up(
        &mut self,
        active: Option<(&Arc<Segment>, &Arc<Mapping>)>,
        pos: u64,
        state: &State,
    ) {
        let Some((seg, map)) = active else { return };
        if let Some(ix) = self.index_for(seg, true, true, state) {
            ix.catch_up(map.bytes(0, pos as usize), seg.start(), pos, pos);
        }
    }

    /// The index of `seg`: opened (checked whole when taken over), or made when `make`. `look`:
    /// look for a file again where there was none.
    fn index_for(
        &mut self,
        seg: &Segment,
        make: bool,
        look: bool,
        state: &State,
    ) -> Option<&mut KeyIndex> {
        let known = match self.at.take() {
            Some((start, Known::Absent)) if start == seg.start() && look => take(seg, make, state),
            Some((start, known)) if start == seg.start() => known,
            _ => take(seg, make, state),
        };
        self.at = Some((seg.start(), known));
        match self.at.as_mut() {
            Some((_, Known::Index(ix))) => Some(ix),
            _ => None,
        }
    }

    /// The index this writer keeps, with its segment's start.
    pub fn current(&self) -> Option<(u64, &KeyIndex)> {
        match &self.at {
            Some((start, Known::Index(ix))) => Some((*start, ix)),
            _ => None,
        }
    }

    /// Forgets the index (the log closes).
    pub fn stop(&mut self) {
        self.at = None;
    }
}

fn take(seg: &Segment, make: bool, state: &State) -> Known {
    if !seg.is_local() || !seg.is_writable() {
        return Known::Failed;
    }
    let path = key_index::path_of(seg.path());
    let opened = match KeyIndex::open(&path, seg.start(), true) {
        Ok(Opened::Index(ix)) if ix.is_sound() => {
            ix.relink();
            return Known::Index(ix);
        }
        Ok(Opened::Index(_) | Opened::Damaged) => {
            log::warn!("rebuilding the damaged key index {}", path.display());
            true
        }
        Ok(Opened::Missing) => false,
        Err(e) => {
            log::warn!("no key index for {}: {e}", seg.path().display());
            return Known::Failed;
        }
    };
    if !opened && !make {
        return Known::Absent;
    }
    match key_index::make(&path, seg.start(), seg.size(), state.opts.file_mode) {
        Ok(ix) => {
            // Lookups of this open drop the maps they hold of the file it replaced.
            state.key_indexes_made.fetch_add(1, Ordering::Release);
            Known::Index(ix)
        }
        Err(e) => {
            log::warn!("no key index for {}: {e}", seg.path().display());
            Known::Failed
        }
    }
}
