//! The exporters of segment maps, cached; record bodies are zero-copy memoryviews made from them.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use pyo3::gc::{PyTraverseError, PyVisit};
use pyo3::prelude::*;

use super::buffer::SegmentBuffer;
use crate::Mapping;

/// Bounded, so that a long scan over many segments does not pin every map.
const MAX_CACHED_VIEWS: usize = 64;

/// The exporter of one segment's map; `map` is the map's address (a moved or recreated segment
/// gets another map at the same start).
struct Entry {
    start: u64,
    map: usize,
    view: Py<SegmentBuffer>,
}

#[derive(Default)]
struct Views {
    /// The view used last: most reads land in the segment of the previous one.
    last: Option<Entry>,
    by_start: HashMap<u64, Entry>,
}

/// The views of one `CommitLog` object.
#[derive(Default)]
pub(super) struct ViewCache {
    views: Mutex<Views>,
    /// `min_offset` when the cache was last pruned of deleted segments.
    min_seen: AtomicU64,
}

impl ViewCache {
    fn locked(&self) -> MutexGuard<'_, Views> {
        self.views.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The exporter of the map of the segment starting at `start`. The lock is never held while
    /// Python allocates (a collection could run then).
    pub fn exporter<'py>(
        &self,
        py: Python<'py>,
        map: &Arc<Mapping>,
        start: u64,
    ) -> PyResult<Bound<'py, SegmentBuffer>> {
        let id = Arc::as_ptr(map) as usize;
        let hit = {
            let mut views = self.locked();
            if let Some(e) = views
                .last
                .as_ref()
                .filter(|e| e.start == start && e.map == id)
            {
                return Ok(e.view.clone_ref(py).into_bound(py));
            }
            let hit = views
                .by_start
                .get(&start)
                .filter(|e| e.map == id)
                .map(|e| e.view.clone_ref(py));
            if let Some(v) = &hit {
                views.last = Some(Entry {
                    start,
                    map: id,
                    view: v.clone_ref(py),
                });
            }
            hit
        };
        if let Some(v) = hit {
            return Ok(v.into_bound(py));
        }
        let view = Bound::new(py, SegmentBuffer::new(Arc::clone(map)))?;
        let entry = |v: &Bound<'py, SegmentBuffer>| Entry {
            start,
            map: id,
            view: v.clone().unbind(),
        };
        let (for_map, for_last) = (entry(&view), entry(&view));
        let mut views = self.locked();
        if views.by_start.len() >= MAX_CACHED_VIEWS {
            views.by_start.clear();
        }
        views.by_start.insert(start, for_map);
        views.last = Some(for_last);
        Ok(view)
    }

    /// Drops the views of segments below `min` (deleted), so their maps (and disk space) can go
    /// once no caller holds a view. A load per call; the pruning only when the head moved.
    /// Returns whether it let go of any view.
    pub fn prune(&self, min: u64) -> bool {
        if self.min_seen.load(Ordering::Relaxed) == min {
            return false;
        }
        self.min_seen.store(min, Ordering::Relaxed);
        let mut views = self.locked();
        let before = views.by_start.len();
        views.by_start.retain(|&start, _| start >= min);
        let mut dropped = views.by_start.len() < before;
        if views.last.as_ref().is_some_and(|e| e.start < min) {
            views.last = None;
            dropped = true;
        }
        dropped
    }

    pub fn clear(&self) {
        *self.locked() = Views::default();
    }

    pub fn traverse(&self, visit: &PyVisit<'_>) -> Result<(), PyTraverseError> {
        if let Ok(views) = self.views.try_lock() {
            for e in views.last.iter().chain(views.by_start.values()) {
                visit.call(&e.view)?;
            }
        }
        Ok(())
    }
}
