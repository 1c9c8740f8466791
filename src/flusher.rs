//! Making appended bytes durable: syncs (group commit), the checkpoint, and the background thread.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::background::{Next, Periodic};
use crate::checkpoint::Checkpoint;
use crate::error::{Error, Result};
use crate::log::{locked, Shared};
use crate::stats::Stats;

/// The checkpoint is rewritten at most this often by the background thread.
const CHECKPOINT_EVERY: Duration = Duration::from_secs(1);

impl Shared {
    /// Syncs everything published so far; returns the new `flushed_offset`. Concurrent callers
    /// share one sync: whoever waits for the lock finds its bytes already covered.
    pub fn flush_data(&self) -> Result<u64> {
        let _guard = locked(&self.flush_lock);
        let from = self.flushed_offset.load(Ordering::Acquire);
        let target = self.max_offset.load(Ordering::Acquire);
        if target <= from {
            return Ok(from);
        }
        let list = self.segments.load();
        let first = list.index_of(from).unwrap_or(0);
        for seg in &list.as_slice()[first..] {
            if seg.start() >= target {
                break;
            }
            if seg.end() <= from || seg.is_lost() {
                continue;
            }
            let lo = from.saturating_sub(seg.start()) as usize;
            // A segment the log continues past is synced whole, filler included.
            let hi = (target.min(seg.end()) - seg.start()) as usize;
            let hi = if target >= seg.end() {
                seg.size() as usize
            } else {
                hi
            };
            let synced = seg.map().and_then(|m| {
                m.flush(lo, hi)
                    .map_err(|e| Error::io("syncing segment", seg.path(), e))
            });
            if let Err(e) = synced {
                let cause = e.to_string();
                log::error!("sync failed, the writer is poisoned: {cause}");
                let _ = self.poisoned.set(cause.clone());
                return Err(Error::WriterPoisoned { cause });
            }
        }
        self.flushed_offset.store(target, Ordering::Release);
        Stats::add(&self.stats.syncs, 1);
        Ok(target)
    }

    /// Returns once every byte below `end` is durable.
    pub fn flush_to(&self, end: u64) -> Result<()> {
        if self.flushed_offset.load(Ordering::Acquire) < end {
            self.flush_data()?;
        }
        Ok(())
    }

    /// Rewrites the checkpoint in every writable directory. Only covers synced data.
    pub fn write_checkpoint(&self, clean: bool) -> Result<()> {
        self.update_checkpoint(clean, None)
    }

    /// Rewrites the checkpoint unless it would say what `on_disk` says (the same store state;
    /// the timestamp floor may lag, as it covers only `flushed_offset`): a reopen after a crash
    /// in `FlushMode::None` changes nothing and so syncs nothing.
    pub fn refresh_checkpoint(&self, on_disk: Option<&Checkpoint>) -> Result<()> {
        self.update_checkpoint(false, on_disk)
    }

    fn update_checkpoint(&self, clean: bool, on_disk: Option<&Checkpoint>) -> Result<()> {
        let mut c = locked(&self.checkpoint);
        let flushed = self.flushed_offset.load(Ordering::Acquire);
        let max = self.max_offset.load(Ordering::Acquire);
        c.flushed_offset = flushed;
        c.min_offset = self.min_offset.load(Ordering::Acquire);
        c.max_timestamp_ms = self.last_timestamp_ms.load(Ordering::Relaxed);
        // A clean checkpoint vouches for the end of the log, so it needs everything synced.
        c.clean = clean && flushed == max;
        c.max_offset = if c.clean { max } else { 0 };
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
        c.seq += 1;
        let dirs: Vec<_> = self
            .dirs
            .iter()
            .filter(|d| d.keeps_metadata())
            .map(|d| d.path.clone())
            .collect();
        c.write(&dirs, self.opts.file_mode)
    }
}

/// The background thread of a writer: syncs every `flush_interval` (async mode) and keeps the
/// checkpoint fresh.
pub(crate) fn start_flusher(shared: &Arc<Shared>) -> Result<Periodic> {
    let shared = Arc::clone(shared);
    let mut last_checkpoint = Instant::now();
    let mut checkpointed = shared.flushed_offset.load(Ordering::Acquire);
    let interval = shared.opts.flush_interval;
    Periodic::start("rmqlog-flush", interval, move || {
        if let Err(e) = shared.flush_data() {
            log::error!("background flush failed: {e}");
            return Next::Continue;
        }
        let flushed = shared.flushed_offset.load(Ordering::Acquire);
        if flushed != checkpointed && last_checkpoint.elapsed() >= CHECKPOINT_EVERY {
            match shared.write_checkpoint(false) {
                Ok(()) => checkpointed = flushed,
                Err(e) => log::warn!("checkpoint update failed: {e}"),
            }
            last_checkpoint = Instant::now();
        }
        Next::Continue
    })
}
