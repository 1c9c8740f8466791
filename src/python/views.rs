//! Memoryviews over whole segment maps, cached; record bodies are zero-copy slices of them.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use pyo3::ffi;
use pyo3::gc::{PyTraverseError, PyVisit};
use pyo3::prelude::*;
use pyo3::types::PyMemoryView;

use super::buffer::SegmentBuffer;
use crate::Mapping;

/// Bounded, so that a long scan over many segments does not pin every map.
const MAX_CACHED_VIEWS: usize = 64;

/// A view over one segment's map; `map` is the map's address (a moved or recreated segment gets
/// another map at the same start).
struct Entry {
    start: u64,
    map: usize,
    view: Py<PyMemoryView>,
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

    /// The view over the map of the segment starting at `start`. The lock is never held while
    /// Python allocates (a collection could run then).
    pub fn segment_view<'py>(
        &self,
        py: Python<'py>,
        map: &Arc<Mapping>,
        start: u64,
    ) -> PyResult<Bound<'py, PyMemoryView>> {
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
        let exporter = Bound::new(py, SegmentBuffer::new(Arc::clone(map)))?;
        let view = PyMemoryView::from(exporter.as_any())?;
        let entry = |v: &Bound<'py, PyMemoryView>| Entry {
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
    pub fn prune(&self, min: u64) {
        if self.min_seen.load(Ordering::Relaxed) != min {
            self.min_seen.store(min, Ordering::Relaxed);
            let mut views = self.locked();
            views.by_start.retain(|&start, _| start >= min);
            if views.last.as_ref().is_some_and(|e| e.start < min) {
                views.last = None;
            }
        }
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

/// The bytes `range` of `whole` as a memoryview (no copy). No Python integer or slice object is
/// built for it (`PySlice::new` leaks the integers it makes: 56 bytes per call).
pub(super) fn slice<'py>(
    whole: &Bound<'py, PyMemoryView>,
    range: Range<usize>,
) -> PyResult<Bound<'py, PyAny>> {
    let (start, end) = (range.start as ffi::Py_ssize_t, range.end as ffi::Py_ssize_t);
    // SAFETY: `whole` is a live memoryview, which implements the sequence protocol; the call
    // returns a new reference to a memoryview over the same export (or NULL with an exception
    // set), which `from_owned_ptr_or_err` takes over. The range lies inside the map: it comes
    // from a record of this segment (and memoryview slicing clamps anyway).
    unsafe {
        Bound::from_owned_ptr_or_err(
            whole.py(),
            ffi::PySequence_GetSlice(whole.as_ptr(), start, end),
        )
    }
}
