//! Retention: deleting the oldest sealed segments by age, by disk usage and by total size, on a
//! background thread and through `clean()` (RocketMQ's `CleanCommitLogService`, with RIP-7's
//! "any disk over its ratio" rule).
//!
//! Only a contiguous prefix of the log is ever deleted, never the active segment, so `min_offset`
//! only moves forward and the log has no holes. Deleting a segment: drop it from the in-memory
//! list (new reads of its offsets are out of range), record the new `min_offset` in the
//! checkpoint, then unlink the file and sync the directory. Readers holding a record keep its map;
//! the space comes back when they drop it.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use chrono::Timelike;

use crate::background::{Next, Periodic};
use crate::dirs::{usage, Usage};
use crate::error::Result;
use crate::fs::remove_durably;
use crate::log::{locked, Shared};
use crate::options::Options;
use crate::stats::Stats;

/// Why a segment is deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// Older than `retention_hours`, at a delete hour or with a disk over `max_used_ratio`.
    Expired,
    /// A disk over `force_clean_ratio`.
    DiskUsage,
    /// The log is larger than `retention_bytes`.
    Size,
    /// `truncate_before`.
    Truncated,
}

impl Reason {
    fn as_str(self) -> &'static str {
        match self {
            Reason::Expired => "expired",
            Reason::DiskUsage => "disk usage (forced)",
            Reason::Size => "retention_bytes",
            Reason::Truncated => "truncate_before",
        }
    }
}

/// What planning knows of one sealed segment, oldest first.
#[derive(Debug, Clone, Copy)]
pub struct Candidate {
    /// File size.
    pub size: u64,
    /// Directory index.
    pub dir: usize,
    /// Time since the file was last modified (`None` when unknown: never expires).
    pub age: Option<Duration>,
}

/// What planning knows of one directory.
#[derive(Debug, Clone, Copy)]
pub struct DirUsage {
    /// `None` when the filesystem could not be read.
    pub usage: Option<Usage>,
    /// Its `max_used_ratio`.
    pub max_ratio: f64,
    /// Its `force_clean_ratio`.
    pub force_ratio: Option<f64>,
}

/// How many of the oldest sealed segments one pass deletes, and why each. Pure.
pub fn plan(
    cands: &[Candidate],
    dirs: &[DirUsage],
    opts: &Options,
    hour: u32,
    force: bool,
    total_bytes: u64,
) -> Vec<Reason> {
    let over_max = dirs
        .iter()
        .any(|d| d.usage.is_some_and(|u| u.used_ratio() > d.max_ratio));
    let delete_hour = opts
        .delete_hours
        .as_ref()
        .is_none_or(|hours| hours.contains(&hour));
    let expire_now = force || delete_hour || over_max;
    let retention = opts
        .retention_hours
        .map(|h| Duration::from_secs_f64(h * 3600.0));
    // Bytes each directory over its force ratio still needs freed to get back to its max ratio.
    let mut need: Vec<u64> = dirs
        .iter()
        .map(|d| match (d.usage, d.force_ratio) {
            (Some(u), Some(force)) if u.used_ratio() > force => {
                let target = d.max_ratio * (u.used_bytes + u.free_bytes) as f64;
                (u.used_bytes as f64 - target).max(0.0) as u64
            }
            _ => 0,
        })
        .collect();
    let mut left = total_bytes;
    let mut out = Vec::new();
    for c in cands.iter().take(opts.max_deletes_per_pass) {
        let expired = expire_now && retention.zip(c.age).is_some_and(|(r, age)| age >= r);
        let forced = need.iter().any(|&n| n > 0);
        let sized = opts
            .retention_bytes
            .is_some_and(|keep| left.saturating_sub(c.size) >= keep);
        let reason = if expired {
            Reason::Expired
        } else if forced {
            Reason::DiskUsage
        } else if sized {
            Reason::Size
        } else {
            break;
        };
        if let Some(n) = need.get_mut(c.dir) {
            *n = n.saturating_sub(c.size);
        }
        left -= c.size;
        out.push(reason);
    }
    out
}

impl Shared {
    /// One cleaning pass (the thread's, `clean()`, and a roll that found every disk full).
    pub fn clean_pass(&self, force: bool) -> Result<usize> {
        Stats::add(&self.stats.clean_passes, 1);
        let result = self.clean_pass_inner(force);
        *locked(&self.stats.clean_last_error) = result.as_ref().err().map(|e| e.to_string());
        result
    }

    fn clean_pass_inner(&self, force: bool) -> Result<usize> {
        let _guard = locked(&self.clean_lock);
        let list = self.segments.load_full();
        let sealed = &list.as_slice()[..list.as_slice().len().saturating_sub(1)];
        let now = SystemTime::now();
        let cands: Vec<Candidate> = sealed
            .iter()
            .map(|s| Candidate {
                size: if s.is_lost() { 0 } else { s.size() },
                dir: s.dir(),
                // A hole left by a lost directory is as old as anything.
                age: if s.is_lost() {
                    Some(Duration::MAX)
                } else {
                    std::fs::metadata(s.path())
                        .and_then(|m| m.modified())
                        .ok()
                        .and_then(|m| now.duration_since(m).ok())
                },
            })
            .collect();
        let dirs: Vec<DirUsage> = self
            .dirs
            .iter()
            .map(|d| DirUsage {
                usage: usage(&d.path).ok(),
                max_ratio: self.opts.max_used_ratio.get(&d.path),
                force_ratio: self.opts.force_clean_ratio.get(&d.path),
            })
            .collect();
        let total = list.as_slice().iter().map(|s| s.size()).sum();
        let hour = chrono::Local::now().hour();
        let reasons = plan(&cands, &dirs, &self.opts, hour, force, total);
        self.delete_prefix(&reasons)
    }

    /// [`CommitLog::truncate_before`](crate::CommitLog::truncate_before).
    pub fn truncate_before(&self, offset: u64) -> Result<u64> {
        let n = {
            let list = self.segments.load();
            let sealed = list.as_slice().len().saturating_sub(1);
            list.as_slice()[..sealed]
                .iter()
                .take_while(|s| s.end() <= offset)
                .count()
        };
        let _guard = locked(&self.clean_lock);
        self.delete_prefix(&vec![Reason::Truncated; n])?;
        Ok(self.min_offset.load(Ordering::Acquire))
    }

    /// Deletes the first `reasons.len()` segments (they must be sealed). Stops before a segment
    /// whose directory refuses deletion (a read-only filesystem), so the log keeps no hole.
    fn delete_prefix(&self, reasons: &[Reason]) -> Result<usize> {
        if reasons.is_empty() {
            return Ok(0);
        }
        let list = self.segments.load_full();
        let mut n = 0;
        for seg in list.as_slice().iter().take(reasons.len()) {
            let Some(dir) = self.dirs.get(seg.dir()).map(|d| &d.path) else {
                n += 1; // a hole: nothing on disk
                continue;
            };
            if rustix::fs::access(dir, rustix::fs::Access::WRITE_OK).is_err() {
                log::warn!(
                    "cannot delete {}: its directory refuses writes; deletion stops there",
                    seg.path().display()
                );
                break;
            }
            n += 1;
        }
        let victims: Vec<_> = list.as_slice()[..n].to_vec();
        let Some(last_victim) = victims.last() else {
            return Ok(0);
        };
        let new_min = last_victim.end();
        // 1. Out of the in-memory list: new reads of these offsets are out of range. The head
        // moves first, so a reader never finds an offset at or above min_offset missing.
        self.min_offset.fetch_max(new_min, Ordering::AcqRel);
        self.segments.rcu(|l| l.without_head_before(new_min));
        // 2. The new head is recorded before any file goes.
        self.write_checkpoint(false)?;
        // 3. The files.
        for (seg, why) in victims.iter().zip(reasons) {
            if seg.is_lost() {
                continue;
            }
            log::info!(
                "deleting segment {} ({})",
                seg.path().display(),
                why.as_str()
            );
            if let Err(e) = remove_durably(seg.path()) {
                log::warn!("deleting {} failed: {e}", seg.path().display());
                return Err(e);
            }
            Stats::add(&self.stats.segments_deleted, 1);
            Stats::add(&self.stats.bytes_deleted, seg.size());
        }
        Ok(n)
    }
}

/// The cleaner thread: one pass every `clean_interval`. A panic in a pass is caught, recorded
/// and poisons only cleaning.
pub(crate) fn start_cleaner(shared: &Arc<Shared>) -> Result<Periodic> {
    let shared = Arc::clone(shared);
    let interval = shared.opts.clean_interval;
    Periodic::start("rmqlog-clean", interval, move || {
        match catch_unwind(AssertUnwindSafe(|| shared.clean_pass(false))) {
            Ok(Ok(_)) => Next::Continue,
            Ok(Err(e)) => {
                log::warn!("cleaning pass failed: {e}");
                Next::Continue
            }
            Err(_) => {
                let cause = "the cleaner thread panicked".to_string();
                log::error!("{cause}; cleaning stops, appends and reads go on");
                *locked(&shared.stats.clean_last_error) = Some(cause.clone());
                locked(&shared.clean_poison).get_or_insert(cause);
                Next::Stop
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cands(ages_h: &[u64]) -> Vec<Candidate> {
        ages_h
            .iter()
            .map(|&h| Candidate {
                size: 100,
                dir: 0,
                age: Some(Duration::from_secs(h * 3600)),
            })
            .collect()
    }

    fn dir(used: u64, free: u64, force: Option<f64>) -> DirUsage {
        DirUsage {
            usage: Some(Usage {
                total_bytes: used + free,
                free_bytes: free,
                used_bytes: used,
            }),
            max_ratio: 0.75,
            force_ratio: force,
        }
    }

    #[test]
    fn only_an_expired_prefix_goes_and_only_at_a_delete_hour() {
        // RocketMQ's scenario: 0-4 and 21-49 aged; the middle stops the pass.
        let ages: Vec<u64> = (0..50)
            .map(|i| if (5..=20).contains(&i) { 1 } else { 100 })
            .collect();
        let opts = Options::default().max_deletes_per_pass(100);
        let low = [dir(10, 90, None)];
        assert_eq!(plan(&cands(&ages), &low, &opts, 4, false, 5000).len(), 5);
        assert_eq!(plan(&cands(&ages), &low, &opts, 5, false, 5000).len(), 0);
        assert_eq!(plan(&cands(&ages), &low, &opts, 5, true, 5000).len(), 5);
        // Any disk over its max ratio: expired segments go at any hour (RIP-7: any disk).
        let busy = [dir(10, 90, None), dir(80, 20, None)];
        assert_eq!(plan(&cands(&ages), &busy, &opts, 5, false, 5000).len(), 5);
        let opts = opts.max_deletes_per_pass(3);
        assert_eq!(plan(&cands(&ages), &low, &opts, 4, false, 5000).len(), 3);
    }

    #[test]
    fn forced_cleaning_frees_what_its_disk_needs_and_no_more() {
        let young = cands(&[0; 20]);
        let opts = Options::default().max_deletes_per_pass(100);
        // 90 % used of 1000 bytes; back to 75 % needs 150 bytes: two segments of 100.
        let d = [dir(900, 100, Some(0.85))];
        let r = plan(&young, &d, &opts, 5, false, 2000);
        assert_eq!(r, vec![Reason::DiskUsage; 2]);
        let off = [dir(900, 100, None)];
        assert!(plan(&young, &off, &opts, 5, false, 2000).is_empty());
    }

    #[test]
    fn size_retention_keeps_at_least_retention_bytes() {
        let opts = Options::default()
            .retention_hours(None)
            .retention_bytes(Some(450));
        let r = plan(&cands(&[0; 10]), &[dir(1, 99, None)], &opts, 4, false, 1000);
        assert_eq!(r.len(), 5); // 1000 -> 500 >= 450; one more would leave 400
    }
}
