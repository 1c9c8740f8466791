//! Writing the store's checkpoint (`rmqlog.meta`) from the state: the counters it covers, the
//! directories it goes to, the move intent it carries; and beside it the record counts
//! (`rmqlog.counts`, see [`crate::storage::counts`]) when those it would hold changed.
//!
//! The counts recorded are those of segments whose bytes are durable (below `flushed_offset`):
//! each whole segment's, and at a clean close the last segment's up to the end. A segment sealed
//! during this open whose count is not known whole (another shared writer appended to it) is
//! counted first; segments older than the open are recorded once something counted them.

use std::path::PathBuf;
use std::sync::atomic::Ordering;

use super::State;
use crate::error::{Error, Result};
use crate::storage::checkpoint::{Checkpoint, Move, TierMark};
use crate::storage::counts::{self, Recorded};
use crate::storage::settings::WriterSettings;
use crate::sync::locked;

impl State {
    /// Rewrites the checkpoint in every directory that keeps metadata. Covers only synced data.
    pub fn write_checkpoint(&self) -> Result<()> {
        self.update_checkpoint(false, None, |_| {})
    }

    /// The close's checkpoint: it vouches for the end of the log when everything is synced, and
    /// is the last: no metadata is written after it (the store's lock is about to go).
    pub fn write_final_checkpoint(&self) -> Result<()> {
        let written = self.update_checkpoint(true, None, |_| {});
        self.meta_final.store(true, Ordering::Release);
        written
    }

    /// Rewrites the checkpoint unless it would say what `on_disk` says (the same store state;
    /// the timestamp floor may lag, as it covers only `flushed_offset`): a reopen after a crash
    /// in `FlushMode::None` changes nothing and so syncs nothing.
    pub fn refresh_checkpoint(&self, on_disk: Option<&Checkpoint>) -> Result<()> {
        self.update_checkpoint(false, on_disk, |_| {})
    }

    /// The settings of the writer that last opened the store, as its metadata records them.
    pub fn recorded_settings(&self) -> Option<WriterSettings> {
        locked(&self.checkpoint).writer.clone()
    }

    /// Records (or, with `None`, clears) the intent of a segment move, durably.
    pub fn set_move_intent(&self, intent: Option<Move>) -> Result<()> {
        self.update_checkpoint(false, None, |c| c.moving = intent)
    }

    fn update_checkpoint(
        &self,
        clean: bool,
        on_disk: Option<&Checkpoint>,
        edit: impl FnOnce(&mut Checkpoint),
    ) -> Result<()> {
        // Walks that counting may take, before the lock (a leaf, held briefly).
        self.count_sealed(clean);
        let mut c = locked(&self.checkpoint);
        if self.meta_final.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        edit(&mut c);
        let flushed = self.flushed_offset();
        let max = self.max_offset();
        c.flushed_offset = flushed;
        c.min_offset = self.min_offset();
        c.max_timestamp_ms = self.last_timestamp_ms();
        // A clean checkpoint vouches for the end of the log, so it needs everything synced.
        c.clean = clean && flushed == max;
        c.max_offset = if c.clean { max } else { 0 };
        if let Some(t) = &self.tier {
            c.tier = Some(TierMark {
                url: t.url().to_owned(),
                manifest_version: t.manifest().version,
            });
        }
        if let Some(old) = on_disk {
            let same = Checkpoint {
                seq: old.seq,
                max_timestamp_ms: old.max_timestamp_ms,
                ..c.clone()
            };
            if same == *old {
                return Ok(());
            }
        }
        let dirs = self.metadata_dirs();
        if self.shared.is_some() {
            // Another open may have written checkpoints since this one read the store (it did the
            // background work before this one): the newest copy on disk must stay outranked.
            if let Ok(Some(newest)) = crate::storage::checkpoint::read_newest(&dirs) {
                c.seq = c.seq.max(newest.seq);
            }
        }
        c.seq += 1;
        c.write(&dirs, self.opts.file_mode)?;
        self.record_counts(&c.store_id, &dirs, clean);
        Ok(())
    }

    /// Counts the segments whose count the checkpoint should record and does not know whole:
    /// those sealed since this open began (another shared writer's records in them), and at a
    /// clean close the last one up to the end. A failure is left to the next reader (it counts
    /// what is unknown when asked).
    fn count_sealed(&self, clean: bool) {
        let end = self.max_offset();
        let flushed = self.flushed_offset();
        let list = self.segments_full();
        if self.shared.is_some() {
            // What the other writers' checkpoints recorded.
            counts::apply(&list, &self.read_counts(), end);
        }
        let sealed = list.sealed(end);
        for seg in sealed.iter().filter(|s| s.end() > self.counts_floor) {
            if seg.is_local() && seg.end() <= flushed && !seg.is_counted() {
                if let Err(e) = counts::whole(seg) {
                    log::debug!("segment {} not counted: {e}", seg.start());
                }
            }
        }
        if let Some(last) = list
            .last()
            .filter(|l| clean && flushed == end && l.contains(end))
        {
            let at = end - last.start();
            if let Err(e) = counts::below(last, at, at) {
                log::debug!("segment {} not counted: {e}", last.start());
            }
        }
    }

    /// Writes `rmqlog.counts` into `dirs` if what it would hold changed: every whole count of a
    /// segment of durable bytes, the counts recorded before of the others (still true), and with
    /// `clean` the last segment's up to the end. A failure costs walks later: a warning.
    fn record_counts(&self, store_id: &str, dirs: &[PathBuf], clean: bool) {
        let flushed = self.flushed_offset();
        let list = self.segments_full();
        let mut recorded = locked(&self.counts_recorded);
        let last = list.last().map(|l| l.start());
        let entries: Vec<Recorded> = list
            .as_slice()
            .iter()
            .filter_map(|seg| {
                let r = Recorded::of(seg).filter(|r| r.start + r.upto <= flushed);
                let before = || {
                    let i = recorded
                        .binary_search_by_key(&seg.start(), |r| r.start)
                        .ok()?;
                    Some(recorded[i]).filter(|r| r.size == seg.size())
                };
                match r {
                    Some(r) if r.upto == r.size || clean || Some(r.start) != last => Some(r),
                    _ => before(),
                }
            })
            .collect();
        if entries == *recorded {
            return;
        }
        match counts::write(dirs, store_id, &entries, self.opts.file_mode, false) {
            Ok(()) => *recorded = entries,
            Err(e) => log::warn!("record counts not recorded: {e}"),
        }
    }

    /// Every copy of `rmqlog.counts` this open can read.
    fn read_counts(&self) -> Vec<Recorded> {
        let store_id = locked(&self.checkpoint).store_id.clone();
        counts::read(&self.metadata_dirs(), &store_id)
    }

    /// Gives the segments the counts a writer recorded (a follower's or shared writer's view
    /// has segments it did not count); a writer's open also takes them as what the file holds.
    pub fn take_recorded_counts(&self) {
        let recorded = self.read_counts();
        counts::apply(&self.segments(), &recorded, self.max_offset());
        if !self.read_only {
            *locked(&self.counts_recorded) = recorded;
        }
    }

    /// The directories that keep the store's metadata (checkpoint, tier manifest copy).
    pub fn metadata_dirs(&self) -> Vec<PathBuf> {
        self.dirs
            .iter()
            .filter(|d| d.keeps_metadata())
            .map(|d| d.path.clone())
            .collect()
    }
}
