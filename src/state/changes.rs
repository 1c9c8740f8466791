//! The one path by which the segment list changes: [`State::change`].
//!
//! A change is planned and applied under one lock, by a planner that sees the list it will apply
//! to, and is checked against that list before it is applied. The invariants kept here:
//! - the list stays sorted and contiguous;
//! - new segments join only at the end, wholly above the published end (a roll);
//! - deletion takes a prefix only, of sealed segments: each wholly below the published end and
//!   never the last of the list (the writer's active segment). `min_offset` moves first, then the
//!   list, then the new head is recorded in the checkpoint, and only then are files unlinked;
//! - a moved segment replaces the very segment it was copied from (the same `Arc`), still sealed;
//! - an exclusive writer's list never reloads; a follower's (read-only) list changes only by
//!   reloading; a shared writer's reloads under the append lock (`shared.rs`);
//! - a closed log changes no more: [`State::close_segments`] waits for the change in flight,
//!   runs the close's last steps under the lock, and empties the list.
//!
//! A plan that breaks one of these is refused with [`Error::Internal`] and changes nothing.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::State;
use crate::error::{Error, Result};
use crate::failpoint::fail_point;
use crate::state::stats::Stats;
use crate::storage::fs::remove_durably;
use crate::storage::key_index;
use crate::storage::segment::Segment;
use crate::storage::segments::SegmentList;
use crate::sync::locked;

/// A change of the segment list.
#[derive(Debug)]
pub(crate) enum Change {
    /// New segments after the last one (created and mapped, nothing published in them yet).
    Roll(Vec<Arc<Segment>>),
    /// The first segments of the list go, files included (retention, `truncate_before`).
    DeleteHead(Vec<Arc<Segment>>),
    /// A sealed segment's file was copied to another directory: the copy replaces it.
    Replace {
        old: Arc<Segment>,
        new: Arc<Segment>,
    },
    /// A follower's new view of the store, and the end of the records in it.
    Reload {
        list: SegmentList,
        end: u64,
        last_timestamp_ms: u64,
    },
}

/// What a planner sees, fixed while it plans: the list and the published end.
#[derive(Debug)]
pub(crate) struct Plan<'a> {
    pub list: &'a SegmentList,
    pub end: u64,
}

impl Plan<'_> {
    /// The segments a deletion or a move may take ([`SegmentList::sealed`]).
    pub fn sealed(&self) -> &[Arc<Segment>] {
        self.list.sealed(self.end)
    }
}

impl State {
    /// Plans a change with `plan`, from the list it applies to, and applies it; both under the
    /// list lock. `plan` returns the change (or none) and a result for the caller.
    pub fn change<T>(
        &self,
        plan: impl FnOnce(&Plan<'_>) -> Result<(Option<Change>, T)>,
    ) -> Result<T> {
        fail_point!("list::lock");
        let _guard = locked(&self.list_lock);
        self.check_open()?;
        let list = self.segments.load_full();
        let view = Plan {
            list: &list,
            end: self.max_offset(),
        };
        let (change, out) = plan(&view)?;
        if let Some(change) = change {
            self.check(&view, &change).map_err(|why| {
                Error::Internal(format!("refused change of the segment list: {why}"))
            })?;
            let reload = matches!(change, Change::Reload { .. });
            let applied = self.apply(&list, change);
            if !reload {
                self.announce_change();
            }
            applied?;
        }
        Ok(out)
    }

    /// Tells followers and shared writers that the store's segments changed: they list it again
    /// before they read past their view (this open's view is the change's).
    fn announce_change(&self) {
        let generation = self.control().bump_generation();
        if let Some(shared) = &self.shared {
            shared.own_change(generation);
        }
    }

    /// After the file of a segment that left the list is deleted: every view lists the store
    /// again, this open's too (another thread of it may have listed between the change and the
    /// deletion, and kept the file).
    pub fn announce_file_gone(&self) {
        self.control().bump_generation();
    }

    fn check(&self, p: &Plan<'_>, change: &Change) -> std::result::Result<(), String> {
        let segs = p.list.as_slice();
        match change {
            Change::Roll(new) => {
                if self.read_only {
                    return Err("a read-only log does not roll".into());
                }
                let mut at = segs.last().map_or(p.end, |s| s.end());
                for s in new {
                    if s.start() != at || s.start() < p.end {
                        return Err(format!(
                            "new segment at {} does not follow the list (expected {at}, end {})",
                            s.start(),
                            p.end
                        ));
                    }
                    at = s.end();
                }
                Ok(())
            }
            Change::DeleteHead(victims) => {
                let sealed = p.sealed();
                if self.read_only || victims.len() > sealed.len() {
                    return Err(format!(
                        "deleting {} segments, {} are sealed",
                        victims.len(),
                        sealed.len()
                    ));
                }
                match victims.iter().zip(sealed).all(|(v, s)| Arc::ptr_eq(v, s)) {
                    true => Ok(()),
                    false => Err("the segments to delete are not the head of the list".into()),
                }
            }
            Change::Replace { old, new } => {
                let live = p.sealed().iter().any(|s| Arc::ptr_eq(s, old));
                if self.read_only || !live {
                    return Err(format!("segment {} is not a sealed segment", old.start()));
                }
                match (new.start(), new.size()) == (old.start(), old.size()) {
                    true => Ok(()),
                    false => Err(format!("the copy of {} has another range", old.start())),
                }
            }
            Change::Reload { list, end, .. } => {
                let contiguous = list
                    .as_slice()
                    .windows(2)
                    .all(|w| w[0].end() == w[1].start());
                let reloads = self.read_only || self.shared.is_some();
                if !reloads || !contiguous || list.last().is_some_and(|s| s.end() < *end) {
                    return Err(
                        "a reload must be a follower's or shared writer's contiguous list".into(),
                    );
                }
                Ok(())
            }
        }
    }

    fn apply(&self, list: &SegmentList, change: Change) -> Result<()> {
        match change {
            Change::Roll(new) => {
                Stats::add(&self.stats.segments_created, new.len() as u64);
                self.segments.store(Arc::new(list.with_appended(new)));
            }
            Change::DeleteHead(victims) => self.delete_head(list, &victims)?,
            Change::Replace { new, .. } => {
                self.segments.store(Arc::new(list.with_replaced(new)));
            }
            Change::Reload {
                list,
                end,
                last_timestamp_ms,
            } => {
                let min = list.first().map_or(end, |s| s.start());
                self.min_offset.store(min, Ordering::Release);
                self.segments.store(Arc::new(list));
                self.last_timestamp_ms
                    .fetch_max(last_timestamp_ms, Ordering::Relaxed);
                self.max_offset.store(end, Ordering::Release);
            }
        }
        Ok(())
    }

    /// The close's end of the list: waits for a change in flight (none starts once the log is
    /// marked closed), runs `last` (the final sync and checkpoint) under the lock, then empties
    /// the list, so every segment's map goes with its last reader.
    pub fn close_segments<T>(&self, last: impl FnOnce() -> T) -> T {
        let _guard = locked(&self.list_lock);
        let out = last();
        let list = self.segments.load_full();
        self.segments.store(Arc::new(list.truncated_before(0)));
        out
    }

    fn delete_head(&self, list: &SegmentList, victims: &[Arc<Segment>]) -> Result<()> {
        let Some(last) = victims.last() else {
            return Ok(());
        };
        // 1. Out of the list: new reads of these offsets are out of range. The head moves first,
        // so a reader never finds an offset at or above `min_offset` missing from the list.
        self.min_offset.fetch_max(last.end(), Ordering::AcqRel);
        self.segments
            .store(Arc::new(list.without_head_before(last.end())));
        // 2. The new head is durable before any file goes.
        fail_point!("delete::before_checkpoint");
        self.write_checkpoint()?;
        fail_point!("delete::before_unlink");
        // 3. The files.
        // Remote copies go with the manifest's next version (the tier thread follows the head).
        // A remote-only segment's index stayed where its local file was (`tier/shipper.rs`).
        for seg in victims.iter().filter(|s| !s.is_local()) {
            let name = crate::storage::fs::segment_name(seg.start());
            for d in &self.dirs {
                key_index::remove_beside(&d.path.join(&name));
            }
        }
        for seg in victims.iter().filter(|s| s.is_local()) {
            match remove_durably(seg.path()) {
                Ok(()) => {}
                // Shared writers: the cleaner of an open that died after the checkpoint deleted it.
                Err(e) if e.is_not_found() && self.shared.is_some() => {
                    log::debug!("{} was deleted already", seg.path().display());
                }
                Err(e) => {
                    log::warn!("deleting {} failed: {e}", seg.path().display());
                    return Err(e);
                }
            }
            key_index::remove_beside(seg.path());
            Stats::add(&self.stats.segments_deleted, 1);
            Stats::add(&self.stats.bytes_deleted, seg.size());
        }
        fail_point!("delete::unlinked");
        Ok(())
    }
}
