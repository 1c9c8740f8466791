//! Writing the store's checkpoint (`rmqlog.meta`) from the state: the counters it covers, the
//! directories it goes to, the move intent it carries.

use std::path::PathBuf;
use std::sync::atomic::Ordering;

use super::State;
use crate::error::{Error, Result};
use crate::storage::checkpoint::{Checkpoint, Move, TierMark};
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
        c.write(&dirs, self.opts.file_mode)
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
