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
    /// Whether an open (in any process) holds the name now.
    pub open: bool,
    /// Whether it keeps its records from retention (`retain_unconsumed`: it is open, or it
    /// committed within `consumer_idle_hours`).
    pub holds_retention: bool,
}

/// Every consumer name the store keeps, with its committed position.
pub(crate) fn list(state: &State) -> Result<Vec<ConsumerInfo>> {
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
        out.push(ConsumerInfo {
            holds_retention: retain && (open || recent),
            lag_bytes: end.saturating_sub(s.position),
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
/// among those that hold retention.
pub(crate) fn retention_holder(state: &State) -> Result<Option<ConsumerInfo>> {
    let end = state.max_offset();
    Ok(list(state)?
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
