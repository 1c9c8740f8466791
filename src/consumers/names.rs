//! The consumer names a store keeps: listing them (with whether an open holds each and whether
//! it holds retention), the one holding the log's head, dropping one; and the directories that
//! keep them.

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use super::claims::{self, name_byte, table_byte, Claims};
use super::file::Positions;
use super::slot::{check_name, Slot};
use crate::error::{Error, Result};
use crate::open::lock::{ByteLocks, NamesLock};
use crate::shared;
use crate::state::State;

/// A named consumer as [`crate::CommitLog::consumers`] lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerInfo {
    pub name: String,
    /// The committed position: every record below it is done.
    pub position: u64,
    /// When it last committed (or was created), in milliseconds since the epoch.
    pub committed_ms: u64,
    pub created_ms: u64,
    /// Bytes between the committed position and the log's end.
    pub lag_bytes: u64,
    /// Records between the committed position and the log's end (from the segments' counts).
    pub lag_records: u64,
    /// Whether an open (in any process) holds the name now.
    pub open: bool,
    /// Whether it keeps its records from retention (`retain_unconsumed`: it is open, or it
    /// committed within `consumer_idle_hours`).
    pub holds_retention: bool,
    /// The process ids of the opens holding it now (of a shared name's members; of an exclusive
    /// open, if it recorded one).
    pub members: Vec<u32>,
    /// Records delivered to an open and not yet committed (JetStream's `num_ack_pending`).
    pub pending: u64,
    /// Records not yet committed that were delivered more than once (`num_redelivered`).
    pub redelivered: u64,
    /// Records handed back or lapsed, waiting for the next poll.
    pub waiting: u64,
    /// Records dead-lettered (or skipped for want of a dead-letter store).
    pub dead_lettered: u64,
    /// The name's `max_deliveries` (0: none).
    pub max_deliveries: u32,
}

/// What a name's claims table says of its records.
#[derive(Default)]
struct ClaimCounts {
    members: Vec<u32>,
    pending: u64,
    redelivered: u64,
    waiting: u64,
}

fn claim_counts(
    state: &State,
    claims: Option<&Claims>,
    locks: Option<&ByteLocks>,
    pair: usize,
    open: bool,
) -> Result<ClaimCounts> {
    let (Some(claims), Some(locks)) = (claims, locks) else {
        return Ok(ClaimCounts::default());
    };
    let Some(t) = claims.read(pair)? else {
        return Ok(ClaimCounts::default());
    };
    let alive = |k: u16| {
        locks
            .held_elsewhere(claims::member_byte(pair, u64::from(k)), false)
            .unwrap_or(false)
    };
    let mut out = ClaimCounts {
        members: (0..claims::MAX_MEMBERS as u16)
            .filter(|&k| alive(k))
            .map(|k| t.pids[usize::from(k)])
            .collect(),
        ..ClaimCounts::default()
    };
    if out.members.is_empty() && open && t.pids[0] != 0 {
        out.members.push(t.pids[0]); // an exclusive open
    }
    let min = state.min_offset();
    for c in t.claims.iter().filter(|c| !c.done && c.to > min) {
        let n = crate::read::count::records_between(state, c.from.max(min), c.to)?;
        if c.member == claims::NOBODY || !alive(c.member) {
            out.waiting += n;
        } else {
            out.pending += n;
        }
        if c.deliveries > 1 {
            out.redelivered += n;
        }
    }
    Ok(out)
}

/// Every consumer name the store keeps, with its committed position, its lag in records and
/// what its claims say.
pub(crate) fn list(state: &State) -> Result<Vec<ConsumerInfo>> {
    listed(state, true)
}

/// [`list`]; the records counted only with `count` (0 otherwise: retention needs none).
fn listed(state: &State, count: bool) -> Result<Vec<ConsumerInfo>> {
    state.check_open()?;
    shared::catch_up(state)?;
    let dirs = positions_dirs(state)?;
    let positions = Positions::open_existing(&dirs)?;
    let made = crate::consumers::file::pairs_made(&dirs[0].join(crate::open::lock::NAMES_FILE));
    let end = state.max_offset();
    // Held names show through their locks (no claims file: no name was ever opened); a store
    // this open cannot write shows none.
    let locks = ByteLocks::open_existing(&dirs[0].join(claims::FILE))
        .ok()
        .flatten();
    // A writer's own options; a read-only open's, those the store's writer recorded.
    let (retain, idle_hours) = match (state.read_only, state.recorded_settings()) {
        (true, Some(w)) => (w.retain_unconsumed, w.consumer_idle_hours),
        _ => (state.opts.retain_unconsumed, state.opts.consumer_idle_hours),
    };
    let idle_ms = idle_hours.map(|h| (h * 3_600_000.0) as u64);
    let now = now_ms();
    let table = match count {
        true => Claims::open_existing(dirs[0])?,
        false => None,
    };
    let mut out = Vec::new();
    let pairs = positions.read()?;
    crate::consumers::file::check_made(&pairs, made, &dirs)?;
    for (pair, s) in pairs.into_iter().enumerate() {
        let Some(s) = s.filter(|s| !s.dropped) else {
            continue;
        };
        let open = locks
            .as_ref()
            .is_some_and(|l| l.held_elsewhere(name_byte(pair), false).unwrap_or(false));
        let recent = idle_ms.is_none_or(|idle| now.saturating_sub(s.committed_ms) < idle);
        let counts = match count {
            true => claim_counts(state, table.as_ref(), locks.as_ref(), pair, open)?,
            false => ClaimCounts::default(),
        };
        out.push(ConsumerInfo {
            members: counts.members,
            pending: counts.pending,
            redelivered: counts.redelivered,
            waiting: counts.waiting,
            dead_lettered: u64::from(s.dead_lettered),
            max_deliveries: s.max_deliveries,
            holds_retention: retain && (open || recent),
            lag_bytes: end.saturating_sub(s.position),
            lag_records: match count {
                true => crate::read::count::records_between(state, s.position, end)?,
                false => 0,
            },
            name: s.name,
            position: s.position,
            committed_ms: s.committed_ms,
            created_ms: s.created_ms,
            open,
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// The consumer that holds the log's head (`retain_unconsumed`): the lowest committed position
/// among those that hold retention (its `lag_records` not counted: 0).
pub(crate) fn retention_holder(state: &State) -> Result<Option<ConsumerInfo>> {
    let end = state.max_offset();
    Ok(listed(state, false)?
        .into_iter()
        .filter(|c| c.holds_retention && c.position < end)
        .min_by_key(|c| c.position))
}

/// Forgets `name`: its position is gone from the store. Refused while an open holds it.
pub(crate) fn drop_name(state: &State, name: &str) -> Result<()> {
    check_name(name)?;
    state.check_open()?;
    let dirs = positions_dirs(state)?;
    let _names = NamesLock::take(dirs[0])?;
    let positions = Positions::open(&dirs, true)?;
    let pairs = positions.read()?;
    let Some(pair) = find(&pairs, name) else {
        let known: Vec<&str> = pairs
            .iter()
            .flatten()
            .filter(|s| !s.dropped)
            .map(|s| s.name.as_str())
            .collect();
        return Err(Error::invalid(format!(
            "no consumer named {name:?} in this store (it has: {})",
            if known.is_empty() {
                "none".to_owned()
            } else {
                known.join(", ")
            }
        )));
    };
    let locks = ByteLocks::open(&dirs[0].join(claims::FILE))?;
    if locks.held_elsewhere(name_byte(pair), false)? {
        return Err(Error::ConsumerBusy {
            name: name.to_owned(),
        });
    }
    let s = pairs[pair].clone().expect("found");
    let tombstone = Slot {
        seq: s.seq + 1,
        committed_ms: now_ms(),
        dropped: true,
        ..s
    };
    positions.write(pair, &tombstone, true)
}

/// At a writer's open, after recovery and before any append: a committed position past the
/// recovered end covers records that are gone (a power loss took what the log had not synced,
/// in a store written before commits synced the log first; or a copy of the store restored over
/// a newer one). The records appended from now on start at the end, so each such name resumes
/// there, and its claims past the end go: left past the end, it would skip those records, or
/// name no record start. Said in the log, once per name.
pub(crate) fn resume_past_the_end(state: &State, end: u64) {
    // The log opens whatever the positions' state: each consumer's open says what is wrong.
    if let Err(e) = check_positions_against_the_end(state, end) {
        log::warn!("consumer positions not checked against the log's end: {e}");
    }
}

fn check_positions_against_the_end(state: &State, end: u64) -> Result<()> {
    let Ok(dirs) = positions_dirs(state) else {
        return Ok(()); // no directory to keep positions in: no consumer
    };
    if !dirs
        .iter()
        .any(|d| d.join(crate::consumers::file::FILE).exists())
    {
        return Ok(());
    }
    let _names = NamesLock::take(dirs[0])?;
    let positions = Positions::open(&dirs, false)?;
    let pairs = positions.read()?;
    let past: Vec<(usize, Slot)> = pairs
        .into_iter()
        .enumerate()
        .filter_map(|(pair, s)| {
            s.filter(|s| !s.dropped && s.position > end)
                .map(|s| (pair, s))
        })
        .collect();
    if past.is_empty() {
        return Ok(());
    }
    let claims = Claims::open(dirs[0])?;
    let locks = ByteLocks::open(claims.path())?;
    for (pair, slot) in past {
        behind_the_end(&positions, pair, slot, end)?;
        locks.lock(table_byte(pair))?;
        let reset = claims.read(pair).and_then(|t| match t {
            Some(mut t) if t.next > end => {
                t.reset(end);
                claims.write(pair, &mut t)
            }
            _ => Ok(()),
        });
        locks.unlock(table_byte(pair));
        reset?;
    }
    Ok(())
}

pub(crate) fn find(pairs: &[Option<Slot>], name: &str) -> Option<usize> {
    pairs
        .iter()
        .position(|s| s.as_ref().is_some_and(|s| !s.dropped && s.name == name))
}

/// The directories that keep positions: the store's directories this process may write (not
/// `read_only_paths`, not a read-only mount), the first the one with the smallest identity
/// (`rmqlog.id`): it holds the claims and the locks, the same for every process however it
/// spells the paths (a symlink, another mount point).
pub(crate) fn positions_dirs(state: &State) -> Result<Vec<&Path>> {
    let mut dirs: Vec<(&str, &Path)> = state
        .dirs
        .iter()
        .filter(|d| !d.read_only)
        .filter(|d| rustix::fs::access(&d.path, rustix::fs::Access::WRITE_OK).is_ok())
        .map(|d| {
            let key =
                d.id.as_deref()
                    .unwrap_or_else(|| d.path.to_str().unwrap_or(""));
            (key, d.path.as_path())
        })
        .collect();
    dirs.sort();
    if dirs.is_empty() {
        return Err(Error::Unsupported(
            "consumers keep their positions in the store's directories, and this open can \
             write none of them (a tier URL open, read-only mounts, or only read_only_paths)"
                .into(),
        ));
    }
    Ok(dirs.into_iter().map(|(_, p)| p).collect())
}

pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The clock claims lapse by: milliseconds since boot, sleep included (`CLOCK_BOOTTIME`), which
/// no clock step moves (a claims table is shared by the processes of one boot only; after a
/// reboot its claims are of dead opens, delivered again whatever their time).
pub(crate) fn lease_now_ms() -> u64 {
    crate::clock::boot_time().as_millis() as u64
}

/// A committed position found past the log's end: the records it covered are gone (a power loss
/// took what the log had not synced, from a store written before commits made them durable; or
/// the store was restored from an older copy). The records appended since start at the end, so
/// the name resumes there: a position left past it would skip them, or name no record start.
pub(crate) fn behind_the_end(
    positions: &Positions,
    pair: usize,
    slot: Slot,
    end: u64,
) -> Result<Slot> {
    log::warn!(
        "consumer {:?}: its committed position {} lies past the log's end {end} (the records \
         between were lost after it committed them); it resumes at {end}",
        slot.name,
        slot.position
    );
    let slot = Slot {
        seq: slot.seq + 1,
        position: end,
        ..slot
    };
    positions.write(pair, &slot, true)?;
    Ok(slot)
}
