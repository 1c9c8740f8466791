//! Retention: deleting the oldest sealed segments by age, by disk usage and by total size, on a
//! background thread and through `clean()` (RocketMQ's `CleanCommitLogService`, with RIP-7's
//! "any disk over its ratio" rule).
//!
//! A pass plans from the sealed prefix of the segment list and deletes through
//! [`State::change`], both under its lock, so concurrent passes and `truncate_before` calls each
//! plan from the list the previous one left: only a contiguous prefix of sealed segments is ever
//! deleted, never the active segment, `min_offset` only moves forward and the log has no holes.
//! Readers holding a record keep its map; the space comes back when they drop it.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use chrono::Timelike;

use crate::background::{Next, Periodic};
use crate::error::Result;
use crate::failpoint::fail_point;
use crate::options::Options;
use crate::state::dirs::Usage;
use crate::state::stats::Stats;
use crate::state::{Change, Plan, State};
use crate::storage::key_index;
use crate::sync::locked;

/// Why a segment is deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// Older than `retention_hours`, at a delete hour, forced, or with a disk over
    /// `max_used_ratio`.
    Expired,
    /// A disk over `force_clean_ratio`.
    DiskUsage,
    /// The log is larger than `retention_bytes`.
    Size,
    /// `truncate_before`.
    Truncated,
}

/// What planning knows of one sealed segment, oldest first.
#[derive(Debug, Clone, Copy)]
pub struct Candidate {
    /// File size.
    pub size: u64,
    /// Disk bytes its deletion frees: the file and its key index's blocks.
    pub frees: u64,
    /// Offset past its end.
    pub end: u64,
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
    /// Its `max_used_ratio` (`None`: off).
    pub max_ratio: Option<f64>,
    /// Its `force_clean_ratio`.
    pub force_ratio: Option<f64>,
}

impl DirUsage {
    /// Over its `max_used_ratio` (never when that is off or the usage unknown).
    fn over_max(&self) -> bool {
        self.usage
            .zip(self.max_ratio)
            .is_some_and(|(u, max)| u.used_ratio() > max)
    }

    /// At or over its `force_clean_ratio` (the comparison that makes placement refuse it).
    fn over_force(&self) -> bool {
        self.usage
            .zip(self.force_ratio)
            .is_some_and(|(u, force)| u.used_ratio() >= force)
    }
}

/// How many of the oldest sealed segments one pass deletes, and why each. Pure.
///
/// Forced cleaning (a directory at or over its `force_clean_ratio`) frees a directory's space
/// only by deleting segments on that directory: the oldest segments go while some directory
/// still over its ratio holds one of the remaining candidates, until the bytes deleted there
/// bring it back to its `max_used_ratio` (with that off, just under its force ratio). A directory that the log's candidates on it cannot
/// bring back under its force ratio is over because of other programs' files, and makes the log
/// delete nothing: space used by other programs is never a reason to delete more.
pub fn plan(
    cands: &[Candidate],
    dirs: &[DirUsage],
    opts: &Options,
    hour: u32,
    force: bool,
    total_bytes: u64,
    hold: Option<u64>,
) -> Vec<Reason> {
    let over_max = dirs.iter().any(DirUsage::over_max);
    let delete_hour = opts
        .delete_hours
        .as_ref()
        .is_none_or(|hours| hours.contains(&hour));
    let expire_now = force || delete_hour || over_max;
    let retention = opts
        .retention_hours
        .map(|h| Duration::from_secs_f64(h * 3600.0));
    // Bytes of the log's candidates on each directory, from the current one on.
    let mut held = vec![0u64; dirs.len()];
    for c in cands {
        if let Some(h) = held.get_mut(c.dir) {
            *h += c.frees;
        }
    }
    // Bytes each directory at or over its force ratio (the comparison that makes placement refuse
    // it) still needs freed to get back to its max ratio; none for one that the log's candidates
    // there cannot bring back under its force ratio: other programs' files hold it over.
    let mut need: Vec<u64> = dirs
        .iter()
        .zip(&held)
        .map(|(d, &held)| match (d.usage, d.force_ratio) {
            (Some(u), Some(force)) if u.used_ratio() >= force => {
                let capacity = (u.used_bytes + u.free_bytes) as f64;
                let over_force = u.used_bytes as f64 - force * capacity;
                if (held as f64) <= over_force {
                    return 0;
                }
                match d.max_ratio {
                    Some(max) => (u.used_bytes as f64 - max * capacity).max(1.0) as u64,
                    // Strictly under the force ratio, where placement takes the directory again.
                    None => over_force.max(0.0) as u64 + 1,
                }
            }
            _ => 0,
        })
        .collect();
    let mut left = total_bytes;
    let mut out = Vec::new();
    for c in cands.iter().take(opts.max_deletes_per_pass) {
        // Records a consumer has not committed wait for it, unless a disk is over its limits.
        let unconsumed = hold.is_some_and(|h| c.end > h);
        let expired = expire_now
            && retention.zip(c.age).is_some_and(|(r, age)| age >= r)
            && (!unconsumed || over_max);
        let forced = need.iter().zip(&held).any(|(&n, &h)| n > 0 && h > 0);
        let sized = !unconsumed
            && opts
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
            *n = n.saturating_sub(c.frees);
        }
        if let Some(h) = held.get_mut(c.dir) {
            *h -= c.frees;
        }
        left -= c.size;
        out.push(reason);
    }
    out
}

/// What a pass knew when it planned, for the line that says why it deleted.
struct PassContext {
    dirs: Vec<DirUsage>,
    hour: u32,
    total: u64,
}

/// One cleaning pass (the thread's, `clean()`); returns how many segments it deleted. With no
/// retention configured it deletes nothing.
pub(crate) fn clean_pass(state: &State, force: bool) -> Result<usize> {
    pass(state, force, false)
}

/// The pass of a roll that found every disk full: retention deletes what it would if no
/// consumer held it (`retain_unconsumed` gives way to a full disk).
pub(crate) fn clean_for_full_disk(state: &State) -> Result<usize> {
    pass(state, false, true)
}

fn pass(state: &State, force: bool, disk_full: bool) -> Result<usize> {
    Stats::add(&state.stats.clean_passes, 1);
    if !state.opts.retention_configured() {
        *locked(&state.stats.clean_last_error) = None;
        return Ok(0);
    }
    // Positions that cannot be read hold everything (the disk limits still delete).
    let hold = match (state.opts.retain_unconsumed, disk_full) {
        (true, false) => match crate::consumers::names::retention_holder(state) {
            Ok(h) => h.map(|c| c.position),
            Err(e) => {
                log::warn!("retention keeps every segment: the consumers' positions: {e}");
                Some(0)
            }
        },
        _ => None,
    };
    let mut ctx = None;
    let result = delete_head(state, |p| {
        let now = SystemTime::now();
        let cands: Vec<Candidate> = p
            .sealed()
            .iter()
            .map(|s| Candidate {
                // A remote segment counts for the log's size; its directory (none) for no disk.
                size: if s.is_lost() { 0 } else { s.size() },
                frees: match (s.is_lost(), s.is_local()) {
                    (true, _) => 0,
                    (false, true) => s.size() + key_index::allocated_beside(s.path()),
                    (false, false) => s.size(),
                },
                end: s.end(),
                dir: s.dir(),
                // A hole left by a lost directory is as old as anything.
                age: if s.is_lost() {
                    Some(Duration::MAX)
                } else if let (false, Some(e)) = (s.is_local(), s.remote_copy()) {
                    // Only in the tier: as old as its file was when it was uploaded.
                    let modified = UNIX_EPOCH + Duration::from_millis(e.modified_ms);
                    now.duration_since(modified).ok()
                } else {
                    std::fs::metadata(s.path())
                        .and_then(|m| m.modified())
                        .ok()
                        .and_then(|m| now.duration_since(m).ok())
                },
            })
            .collect();
        let dirs: Vec<DirUsage> = state
            .dirs
            .iter()
            .map(|d| DirUsage {
                usage: d.usage(),
                max_ratio: state.opts.max_used_ratio.get(&d.path),
                force_ratio: state.opts.force_clean_ratio.get(&d.path),
            })
            .collect();
        // The log's size: its bytes in use, up to the published end (the active segment counts
        // what it holds, not its preallocated size).
        let total = p
            .list
            .first()
            .map_or(0, |f| p.end.saturating_sub(f.start()));
        let hour = chrono::Local::now().hour();
        let reasons = plan(&cands, &dirs, &state.opts, hour, force, total, hold);
        ctx = Some(PassContext { dirs, hour, total });
        reasons
    });
    *locked(&state.stats.clean_last_error) = result.as_ref().err().map(|e| e.to_string());
    let deleted = result?;
    if let Some(ctx) = ctx.filter(|_| !deleted.reasons.is_empty()) {
        let why = |r: Reason| explain(r, state, &ctx);
        log::info!("retention {}", deleted.describe(state, why));
    }
    Ok(deleted.reasons.len())
}

/// Why segments went for `reason`, as the INFO line says it.
fn explain(reason: Reason, state: &State, ctx: &PassContext) -> String {
    let opts = &state.opts;
    let pct = |r: f64| format!("{:.0}%", r * 100.0);
    let disks = |over: fn(&DirUsage) -> bool, ratio: fn(&DirUsage) -> Option<f64>, name: &str| {
        let listed: Vec<String> = state
            .dirs
            .iter()
            .zip(&ctx.dirs)
            .filter(|(_, d)| over(d))
            .filter_map(|(dir, d)| {
                let used = d.usage?.used_ratio();
                let limit = ratio(d)?;
                Some(format!(
                    "disk {} used {} {name} {}",
                    dir.path.display(),
                    pct(used),
                    pct(limit)
                ))
            })
            .collect();
        listed.join(", ")
    };
    match reason {
        Reason::Expired => {
            let hours = opts.retention_hours.unwrap_or(0.0);
            let delete_hour = opts.delete_hours.as_ref().map(|h| h.contains(&ctx.hour));
            let when = match delete_hour {
                None => String::new(),
                Some(true) => format!(" at delete hour {}", ctx.hour),
                Some(false) if ctx.dirs.iter().any(DirUsage::over_max) => format!(
                    "; outside delete_hours because {}",
                    disks(DirUsage::over_max, |d| d.max_ratio, "> max_used_ratio")
                ),
                // Otherwise only a forced pass deletes outside delete_hours.
                Some(false) => " (clean(force=True) ignores delete_hours)".to_string(),
            };
            format!("older than {hours} h{when}")
        }
        Reason::DiskUsage => disks(
            DirUsage::over_force,
            |d| d.force_ratio,
            ">= force_clean_ratio",
        ),
        Reason::Size => format!(
            "the log holds {} bytes, over retention_bytes {}",
            ctx.total,
            opts.retention_bytes.unwrap_or(0)
        ),
        Reason::Truncated => "truncate_before".to_string(),
    }
}

/// [`CommitLog::truncate_before`](crate::CommitLog::truncate_before): returns the new
/// `min_offset`.
pub(crate) fn truncate_before(state: &State, offset: u64) -> Result<u64> {
    let deleted = delete_head(state, |p| {
        fail_point!("truncate::planning");
        let n = p.sealed().iter().take_while(|s| s.end() <= offset).count();
        vec![Reason::Truncated; n]
    })?;
    if !deleted.reasons.is_empty() {
        let why = |_| format!("truncate_before({offset})");
        log::info!("{}", deleted.describe(state, why));
    }
    Ok(state.min_offset())
}

/// The segments one deletion removed, and why each.
struct Deleted {
    /// Offsets `[start, end)` of the segments removed.
    range: (u64, u64),
    /// Directory indices that held them, in order, each once.
    dirs: Vec<usize>,
    reasons: Vec<Reason>,
}

impl Deleted {
    /// "deleted 3 segments [0, 3145728) from /d0/store, /d1/store: older than 72 h at delete hour
    /// 4; 1 ...": each run of one reason once.
    fn describe(&self, state: &State, why: impl Fn(Reason) -> String) -> String {
        let n = self.reasons.len();
        let dirs: Vec<String> = self
            .dirs
            .iter()
            .filter_map(|&i| state.dirs.get(i))
            .map(|d| d.path.display().to_string())
            .collect();
        let mut runs: Vec<(Reason, usize)> = Vec::new();
        for &r in &self.reasons {
            match runs.last_mut() {
                Some((last, count)) if *last == r => *count += 1,
                _ => runs.push((r, 1)),
            }
        }
        let causes: Vec<String> = match runs.as_slice() {
            [(r, _)] => vec![why(*r)],
            _ => runs
                .iter()
                .map(|&(r, c)| format!("{c} {}", why(r)))
                .collect(),
        };
        format!(
            "deleted {n} segment{} [{}, {}) from {}: {}",
            if n == 1 { "" } else { "s" },
            self.range.0,
            self.range.1,
            dirs.join(", "),
            causes.join("; ")
        )
    }
}

/// Deletes the first segments of the log: `plan` sees the list as it is under the change lock and
/// says why each of the first sealed segments goes. Deletion stops before a segment whose
/// directory refuses it (a read-only filesystem), so the log keeps no hole.
fn delete_head(state: &State, plan: impl FnOnce(&Plan<'_>) -> Vec<Reason>) -> Result<Deleted> {
    state.change(|p| {
        let sealed = p.sealed();
        let mut reasons = plan(p);
        let mut n = 0;
        for seg in sealed.iter().take(reasons.len()) {
            if let Some(dir) = state.dirs.get(seg.dir()) {
                if rustix::fs::access(&dir.path, rustix::fs::Access::WRITE_OK).is_err() {
                    log::warn!(
                        "cannot delete {}: its directory refuses writes; deletion stops there",
                        seg.path().display()
                    );
                    break;
                }
            }
            n += 1;
        }
        reasons.truncate(n);
        let gone = &sealed[..n];
        let mut dirs: Vec<usize> = Vec::new();
        for seg in gone {
            if !dirs.contains(&seg.dir()) {
                dirs.push(seg.dir());
            }
        }
        let deleted = Deleted {
            range: (
                gone.first().map_or(0, |s| s.start()),
                gone.last().map_or(0, |s| s.end()),
            ),
            dirs,
            reasons,
        };
        let change = (n > 0).then(|| Change::DeleteHead(gone.to_vec()));
        Ok((change, deleted))
    })
}

/// The cleaner thread: one pass every `clean_interval`. A panic in a pass is caught, recorded
/// and poisons only cleaning.
pub(crate) fn start_cleaner(state: &Arc<State>) -> Result<Periodic> {
    let state = Arc::clone(state);
    let interval = state.opts.clean_interval;
    Periodic::start("rmqlog-clean", interval, move || {
        let pass = || match crate::shared::owns_background(&state)? {
            true => {
                let _maintenance = crate::shared::maintenance(&state)?;
                clean_pass(&state, false)
            }
            false => Ok(0),
        };
        match catch_unwind(AssertUnwindSafe(pass)) {
            Ok(Ok(_)) => Next::Continue,
            Ok(Err(e)) => {
                log::warn!("cleaning pass failed: {e}");
                Next::Continue
            }
            Err(_) => {
                let cause = "the cleaner thread panicked".to_string();
                log::error!("{cause}; cleaning stops, appends and reads go on");
                // Where the user looks: stats() says it, and clean() raises it.
                *locked(&state.stats.clean_last_error) =
                    Some(format!("{cause}: cleaning has stopped"));
                state.set_cleaner_failure(cause);
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
            .enumerate()
            .map(|(i, &h)| Candidate {
                size: 100,
                frees: 100,
                end: 100 * (i as u64 + 1),
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
            max_ratio: Some(0.75),
            force_ratio: force,
        }
    }

    #[test]
    fn unconsumed_records_wait_for_their_consumer_unless_a_disk_is_over_its_limits() {
        let mut opts = Options::default().retention_hours(Some(1.0));
        opts.retention_bytes = Some(100);
        let low = [dir(10, 90, Some(0.9))];
        // Every segment is expired and over retention_bytes; a consumer is at offset 250.
        assert_eq!(
            plan(&cands(&[9; 5]), &low, &opts, 4, false, 500, None).len(),
            5
        );
        assert_eq!(
            plan(&cands(&[9; 5]), &low, &opts, 4, false, 500, Some(250)).len(),
            2
        );
        assert_eq!(
            plan(&cands(&[9; 5]), &low, &opts, 4, false, 500, Some(0)).len(),
            0
        );
        opts.retention_hours = None; // size alone
        assert_eq!(
            plan(&cands(&[0; 5]), &low, &opts, 4, false, 500, Some(200)).len(),
            2
        );
        // A disk over max_used_ratio lets expired segments go; over force_clean_ratio, any.
        opts.retention_hours = Some(1.0);
        let mut over_max = dir(80, 20, Some(0.9));
        over_max.max_ratio = Some(0.5);
        assert_eq!(
            plan(&cands(&[9; 5]), &[over_max], &opts, 4, false, 500, Some(0)).len(),
            5
        );
        let over_force = dir(95, 5, Some(0.9));
        assert!(!plan(
            &cands(&[0; 5]),
            &[over_force],
            &opts,
            4,
            false,
            500,
            Some(0)
        )
        .is_empty());
    }

    #[test]
    fn only_an_expired_prefix_goes_and_only_at_a_delete_hour() {
        // RocketMQ's scenario: 0-4 and 21-49 aged; the middle stops the pass.
        let ages: Vec<u64> = (0..50)
            .map(|i| if (5..=20).contains(&i) { 1 } else { 100 })
            .collect();
        let opts = Options::broker().max_deletes_per_pass(100);
        let low = [dir(10, 90, None)];
        assert_eq!(
            plan(&cands(&ages), &low, &opts, 4, false, 5000, None).len(),
            5
        );
        assert_eq!(
            plan(&cands(&ages), &low, &opts, 5, false, 5000, None).len(),
            0
        );
        assert_eq!(
            plan(&cands(&ages), &low, &opts, 5, true, 5000, None).len(),
            5
        );
        // Any disk over its max ratio: expired segments go at any hour (RIP-7: any disk).
        let busy = [dir(10, 90, None), dir(80, 20, None)];
        assert_eq!(
            plan(&cands(&ages), &busy, &opts, 5, false, 5000, None).len(),
            5
        );
        let opts = opts.max_deletes_per_pass(3);
        assert_eq!(
            plan(&cands(&ages), &low, &opts, 4, false, 5000, None).len(),
            3
        );
    }

    #[test]
    fn forced_cleaning_frees_what_its_disk_needs_and_no_more() {
        let young = cands(&[0; 20]);
        let opts = Options::default().max_deletes_per_pass(100);
        // 90 % used of 1000 bytes; back to 75 % needs 150 bytes: two segments of 100.
        let d = [dir(900, 100, Some(0.85))];
        let r = plan(&young, &d, &opts, 5, false, 2000, None);
        assert_eq!(r, vec![Reason::DiskUsage; 2]);
        let off = [dir(900, 100, None)];
        assert!(plan(&young, &off, &opts, 5, false, 2000, None).is_empty());
    }

    #[test]
    fn forced_cleaning_starts_at_the_ratio_placement_refuses() {
        // Exactly at force_clean_ratio: placement refuses the directory (>=), so cleaning must
        // start there too, or a single directory at the ratio is full with nothing freed.
        let young = cands(&[0; 20]);
        let opts = Options::default().max_deletes_per_pass(100);
        let d = [dir(850, 150, Some(0.85))];
        assert_eq!(
            plan(&young, &d, &opts, 5, false, 2000, None),
            vec![Reason::DiskUsage; 1]
        );
    }

    #[test]
    fn a_needy_directory_without_the_logs_segments_deletes_nothing() {
        // Directory 1 is over its force ratio because of other programs' files and holds none of
        // the log's segments: deleting the log's segments on directory 0 cannot help it.
        let young = cands(&[0; 5]);
        let opts = Options::default().max_deletes_per_pass(100);
        let d = [dir(100, 900, Some(0.85)), dir(950, 50, Some(0.85))];
        assert!(plan(&young, &d, &opts, 5, false, 500, None).is_empty());
        // One segment there (100 bytes) cannot bring it under 0.85 (100 bytes over): nothing.
        let mut one = cands(&[0; 5]);
        one[2].dir = 1;
        assert!(plan(&one, &d, &opts, 5, false, 500, None).is_empty());
        // Two can: the oldest go up to its last one there (back to 0.75 needs 200), no further.
        let mut two = one.clone();
        two[1].dir = 1;
        assert_eq!(
            plan(&two, &d, &opts, 5, false, 500, None),
            vec![Reason::DiskUsage; 3]
        );
    }

    #[test]
    fn the_defaults_delete_nothing_however_old_or_full() {
        let opts = Options::default();
        assert!(!opts.retention_configured());
        let old = cands(&[10_000; 20]);
        let mut full = dir(990, 10, None);
        full.max_ratio = opts.max_used_ratio.default;
        for force in [false, true] {
            for hour in [0, 4, 23] {
                assert!(plan(&old, &[full], &opts, hour, force, 2000, None).is_empty());
            }
        }
    }

    #[test]
    fn forced_cleaning_without_max_used_ratio_frees_to_just_under_the_force_ratio() {
        let young = cands(&[0; 20]);
        let opts = Options::default().max_deletes_per_pass(100);
        // 90 % used of 1000 bytes, force at 0.85: under it needs 51 bytes, one segment of 100.
        let mut d = dir(900, 100, Some(0.85));
        d.max_ratio = None;
        assert_eq!(
            plan(&young, &[d], &opts, 5, false, 2000, None),
            vec![Reason::DiskUsage; 1]
        );
    }

    #[test]
    fn unknown_usage_is_never_over_a_ratio() {
        let old = cands(&[100; 5]);
        let opts = Options::broker().max_deletes_per_pass(100);
        let unknown = DirUsage {
            usage: None,
            max_ratio: Some(0.1),
            force_ratio: Some(0.2),
        };
        // Not a delete hour: only usage could make old segments go now, and it is unknown.
        assert!(plan(&old, &[unknown], &opts, 5, false, 500, None).is_empty());
        let young = cands(&[0; 5]);
        assert!(plan(&young, &[unknown], &opts, 4, true, 500, None).is_empty());
    }

    #[test]
    fn size_retention_keeps_at_least_retention_bytes() {
        let opts = Options::default()
            .retention_hours(None)
            .retention_bytes(Some(450));
        let r = plan(
            &cands(&[0; 10]),
            &[dir(1, 99, None)],
            &opts,
            4,
            false,
            1000,
            None,
        );
        assert_eq!(r.len(), 5); // 1000 -> 500 >= 450; one more would leave 400
    }
}
