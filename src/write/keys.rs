//! The appender's side of the key index (`storage/key_index.rs`): after each publication, the
//! active segment's index takes the records from where it stopped to the new end, and a segment
//! the append sealed gets the rest of its records and is marked complete. Runs under the append
//! lock (the writer's cursor; for shared writers the store's lock too), so one process at a
//! time writes an index.
//!
//! An index is a cache: nothing here fails an append. A file that cannot be made or grown is
//! logged once per segment and lookups walk the records it lacks.

use std::sync::Arc;

use crate::storage::key_index::{self, KeyIndex, Opened};
use crate::storage::segment::{Mapping, Segment};

/// The index of the segment this writer appends to.
#[derive(Debug, Default)]
pub(crate) struct Indexer {
    /// The segment's start and its index (`None`: it could not be had, not tried again).
    at: Option<(u64, Option<KeyIndex>)>,
}

impl Indexer {
    /// After a publication: `sealed` are the segments the append sealed (with where its records
    /// began and ended in each), `active` the segment appended to, and `[from, pos)` its records
    /// there.
    pub fn published(
        &mut self,
        sealed: &[(Arc<Segment>, u64, u64)],
        active: Option<(&Arc<Segment>, &Arc<Mapping>)>,
        from: u64,
        pos: u64,
    ) {
        for (seg, from, end) in sealed {
            let Ok(map) = seg.map() else { continue };
            if let Some(ix) = self.index_for(seg) {
                ix.catch_up(map.bytes(0, *end as usize), seg.start(), *from, *end);
                if let Err(e) = ix.complete() {
                    log::warn!("key index of {}: {e}", seg.path().display());
                }
            }
        }
        if let Some((seg, map)) = active {
            if let Some(ix) = self.index_for(seg) {
                ix.catch_up(map.bytes(0, pos as usize), seg.start(), from, pos);
            }
        }
    }

    /// The index of `seg`, opened (checked whole when taken over) or made.
    fn index_for(&mut self, seg: &Segment) -> Option<&mut KeyIndex> {
        if self.at.as_ref().map(|a| a.0) != Some(seg.start()) {
            self.at = Some((seg.start(), take(seg)));
        }
        self.at.as_mut().and_then(|a| a.1.as_mut())
    }

    /// Forgets the index (the log closes).
    pub fn stop(&mut self) {
        self.at = None;
    }
}

fn take(seg: &Segment) -> Option<KeyIndex> {
    if !seg.is_local() || !seg.is_writable() {
        return None;
    }
    let path = key_index::path_of(seg.path());
    let opened = KeyIndex::open(&path, seg.start(), true).map(|o| match o {
        Opened::Index(ix) if ix.is_sound() => {
            ix.relink();
            Some(ix)
        }
        Opened::Index(_) | Opened::Damaged => {
            log::warn!("rebuilding the damaged key index {}", path.display());
            None
        }
        Opened::Missing => None,
    });
    let made = match opened {
        Ok(Some(ix)) => return Some(ix),
        Ok(None) => key_index::make(&path, seg.start(), seg.size()),
        Err(e) => Err(e),
    };
    made.map_err(|e| log::warn!("no key index for {}: {e}", seg.path().display()))
        .ok()
}
