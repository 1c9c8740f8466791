//! Creating the segments an append needs: which directories are eligible, in which order they are
//! tried (placement), creating and mapping the files, and listing them (a roll).

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::failpoint::fail_point;
use crate::maintain::cleaner::clean_for_full_disk;
use crate::options::{PlaceFn, SEGMENT_ALIGN};
use crate::state::dirs::{DirInfo, DirState};
use crate::state::{Change, State};
use crate::storage::fs::{create_preallocated, is_no_space, remove_durably, segment_name};
use crate::storage::segment::{Mapping, Segment, MAX_OFFSET};
use crate::write::placement;

/// A segment created for the writer, with its writable map.
pub(crate) type Created = (Arc<Segment>, Arc<Mapping>);

/// Checks that a segment at `start` of `size` bytes stays below [`MAX_OFFSET`].
pub(crate) fn check_limit(start: u64, size: u64) -> Result<()> {
    let end = u128::from(start) + u128::from(size);
    if end > u128::from(MAX_OFFSET) {
        return Err(Error::OffsetLimit {
            start,
            end,
            limit: MAX_OFFSET,
        });
    }
    Ok(())
}

/// Creates the segments at `starts` (each `segment_size` long, in order), then lists them all in
/// one roll. Nothing is listed unless every one was created: on failure the files made so far are
/// removed. `hint` gives a custom strategy's choice of directory for a start.
pub(crate) fn roll(
    state: &State,
    starts: &[u64],
    mut hint: impl FnMut(u64) -> Option<usize>,
) -> Result<Vec<Created>> {
    let mut created: Vec<Created> = Vec::with_capacity(starts.len());
    let mut pending: Vec<usize> = Vec::with_capacity(starts.len());
    let made = starts.iter().try_for_each(|&start| {
        let (seg, map) = create_segment(state, start, hint(start), &pending)?;
        pending.push(seg.dir());
        created.push((seg, map));
        Ok(())
    });
    let listed = made.and_then(|()| {
        fail_point!("roll::created");
        let segs = created.iter().map(|(s, _)| Arc::clone(s)).collect();
        state.change(|_| Ok((Some(Change::Roll(segs)), ())))
    });
    fail_point!("roll::listed");
    if let Err(e) = listed {
        for (seg, _) in &created {
            if let Err(e) = remove_durably(seg.path()) {
                log::warn!("removing an unused new segment failed: {e}");
            }
        }
        return Err(e);
    }
    Ok(created)
}

/// How long a roll that deleted segments for space waits, at most (50 ms), for their blocks to free
/// (other processes' maps of them go as they take the deletion in).
const SPACE_WAIT: std::time::Duration = std::time::Duration::from_millis(10);
const SPACE_WAITS: usize = 5;

/// The cleaning of a roll that found every disk full, before it gives up: what retention would
/// delete if no consumer held it. A shared writer cleans under the maintenance lock, taken only
/// if free (this append holds the append lock, which maintenance takes after its own: waiting
/// here could deadlock); its holder is changing the store's segments, and the next roll looks
/// again.
fn clean_inline(state: &State) -> Result<usize> {
    let Some(shared) = &state.shared else {
        return clean_for_full_disk(state);
    };
    let Some(_maintenance) = shared.maintenance.try_hold()? else {
        log::debug!("every disk is full and another open holds the maintenance lock");
        return Ok(0);
    };
    crate::shared::maintenance_taken(state, true)?;
    clean_for_full_disk(state)
}

/// Judges every writable directory now (usage, `min_free_bytes`, `force_clean_ratio`), reporting
/// changes, and returns the eligible ones: (index into `dirs`, info). `pending`: directories of
/// segments being created, not listed yet. A directory whose usage is unknown is never judged by
/// it: it stays eligible unless a creation there failed for lack of space (see [`last_resorts`]).
pub(crate) fn eligible_dirs(state: &State, pending: &[usize]) -> Vec<(usize, DirInfo)> {
    let need = state.opts.segment_size + state.opts.min_free_bytes;
    let mut out = Vec::new();
    for (i, info) in state.dir_infos_with(pending).into_iter().enumerate() {
        if matches!(info.state, DirState::ReadOnly | DirState::Offline) {
            continue;
        }
        let force = state.opts.force_clean_ratio.get(&info.path);
        let refusal = match (info.free_bytes, info.used_ratio) {
            // Unknown usage: only a failed creation (ENOSPC) says it is full.
            (None, _) | (_, None) if info.state == DirState::Full => continue,
            (None, _) | (_, None) => None,
            (Some(free), _) if free < need => Some(format!(
                "{free} bytes free, a new segment needs {need} (segment_size + min_free_bytes)"
            )),
            (_, Some(r)) if force.is_some_and(|f| r >= f) => Some(format!(
                "used ratio {r:.3} is at or above force_clean_ratio {}",
                force.unwrap_or(1.0)
            )),
            _ => None,
        };
        match refusal {
            Some(why) => state.set_dir_state(i, DirState::Full, Some(why)),
            None => {
                state.set_dir_state(i, DirState::Writable, None);
                out.push((i, info));
            }
        }
    }
    out
}

/// Directories of unknown usage that a creation found full (ENOSPC): tried after the eligible
/// ones, since only another attempt can tell that space came back.
fn last_resorts(state: &State) -> Vec<usize> {
    state
        .dir_infos()
        .iter()
        .enumerate()
        .filter(|(_, d)| d.state == DirState::Full && d.used_ratio.is_none())
        .map(|(i, _)| i)
        .collect()
}

/// What a `DiskFull` error suggests when directories were refused for space: a segment size that
/// fits four times in the largest known free space (less `min_free_bytes`), or freeing space.
fn shortage_hint(infos: &[DirInfo], segment_size: u64, min_free: u64) -> Option<String> {
    if !infos.iter().any(|d| d.state == DirState::Full) {
        return None;
    }
    let most_free = infos
        .iter()
        .filter(|d| d.state == DirState::Full)
        .filter_map(|d| d.free_bytes)
        .max();
    let usable = most_free.map(|f| f.saturating_sub(min_free));
    let fits = |size: u64| usable.is_some_and(|u| u / 4 >= size);
    let mut suggest = SEGMENT_ALIGN;
    while suggest * 2 < segment_size && fits(suggest * 2) {
        suggest *= 2;
    }
    Some(match most_free {
        Some(free) if fits(suggest) && suggest < segment_size => format!(
            "segment_size is {segment_size} bytes, preallocated in full; the most free space is \
             {free} bytes: pass a smaller segment_size (a multiple of {SEGMENT_ALIGN}, e.g. \
             segment_size={suggest}, four of which fit) or free space"
        ),
        _ => format!(
            "segment_size is {segment_size} bytes, preallocated in full: pass a smaller \
             segment_size (a multiple of {SEGMENT_ALIGN}) or free space"
        ),
    })
}

/// Asks a custom strategy for each start; a bad answer falls back to the built-in order. Called
/// with no lock held: the caller's function may do anything, even append.
pub(crate) fn ask_custom(state: &State, place: &PlaceFn, starts: &[u64]) -> Vec<(u64, usize)> {
    let eligible = eligible_dirs(state, &[]);
    let infos: Vec<DirInfo> = eligible.iter().map(|(_, d)| d.clone()).collect();
    starts
        .iter()
        .filter_map(|&start| match place(&infos, start) {
            Some(k) if k < eligible.len() => Some((start, eligible[k].0)),
            other => {
                log::warn!(
                    "custom strategy gave {other:?} for the segment at {start} ({} eligible \
                     directories); using round robin",
                    eligible.len()
                );
                None
            }
        })
        .collect()
}

/// Creates and maps one segment (not listed). Eligible directories are tried in placement order
/// (`hint` first); one that fails other than by lack of space goes offline. With none eligible,
/// one cleaning pass runs and the choice is made again.
fn create_segment(
    state: &State,
    start: u64,
    hint: Option<usize>,
    pending: &[usize],
) -> Result<Created> {
    fail_point!("roll::create", |_| Err(Error::io(
        "creating segment",
        segment_name(start),
        std::io::Error::from_raw_os_error(libc::EIO)
    )));
    let size = state.opts.segment_size;
    let name = segment_name(start);
    let mut eligible = eligible_dirs(state, pending);
    if eligible.is_empty() {
        let cleaned = match clean_inline(state) {
            Ok(n) => n,
            Err(e) => {
                log::warn!("cleaning before a full-disk roll failed: {e}");
                0
            }
        };
        eligible = eligible_dirs(state, pending);
        if cleaned > 0 {
            log::info!("a full-disk roll cleaned {cleaned} segments");
            // Their blocks free once every process lets go of their maps: a reader wakes on
            // the change and lists the store again within moments.
            for _ in 0..SPACE_WAITS {
                if !eligible.is_empty() {
                    break;
                }
                std::thread::sleep(SPACE_WAIT);
                eligible = eligible_dirs(state, pending);
            }
        }
    }
    let infos: Vec<DirInfo> = eligible.iter().map(|(_, d)| d.clone()).collect();
    let shares: Vec<usize> = eligible
        .iter()
        .map(|(i, _)| {
            let dev = state.dirs[*i].dev;
            let same = eligible
                .iter()
                .filter(|(j, _)| dev.is_some() && state.dirs[*j].dev == dev);
            same.count().max(1)
        })
        .collect();
    let mut order: Vec<usize> =
        placement::order(&state.opts.strategy, &infos, &shares, start, size)
            .into_iter()
            .map(|k| eligible[k].0)
            .collect();
    if let Some(h) = hint.filter(|h| order.contains(h)) {
        order.retain(|&i| i != h);
        order.insert(0, h);
    }
    for i in last_resorts(state) {
        if !order.contains(&i) {
            order.push(i);
        }
    }
    for dir_idx in order {
        let dir = &state.dirs[dir_idx].path;
        let created =
            create_preallocated(dir, &name, size, state.opts.file_mode).and_then(|path| {
                let seg = Arc::new(Segment::new(start, size, path, dir_idx, true));
                let map = seg.map()?;
                Ok((seg, map))
            });
        match created {
            Ok(c) => {
                state.set_dir_state(dir_idx, DirState::Writable, None);
                return Ok(c);
            }
            Err(Error::Io { source, .. }) if is_no_space(&source) => {
                state.set_dir_state(dir_idx, DirState::Full, Some(source.to_string()));
            }
            Err(e) => {
                // Kafka's JBOD rule: a directory failing on create goes offline for good.
                let _ = std::fs::remove_file(dir.join(&name));
                state.set_dir_state(dir_idx, DirState::Offline, Some(e.to_string()));
            }
        }
    }
    let infos = state.dir_infos();
    let mut why: Vec<String> = infos
        .iter()
        .map(|d| {
            let error = d
                .error
                .as_ref()
                .map(|e| format!(" ({e})"))
                .unwrap_or_default();
            format!("{}: {}{error}", d.path.display(), d.state.as_str())
        })
        .collect();
    why.extend(shortage_hint(&infos, size, state.opts.min_free_bytes));
    Err(Error::DiskFull {
        needed: size,
        tried: why.join("; "),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn dir(state: DirState, free: Option<u64>) -> DirInfo {
        DirInfo {
            path: PathBuf::from("/d"),
            state,
            total_bytes: free.map(|f| f * 2),
            free_bytes: free,
            used_ratio: free.map(|_| 0.5),
            segments: 0,
            error: None,
        }
    }

    #[test]
    fn the_shortage_hint_suggests_a_segment_size_four_of_which_fit() {
        let free = 32 << 20;
        let hint = shortage_hint(&[dir(DirState::Full, Some(free))], 1 << 30, 0).unwrap();
        assert!(
            hint.contains("the most free space is 33554432 bytes"),
            "{hint}"
        );
        assert!(
            hint.contains("e.g. segment_size=8388608, four of which fit"),
            "{hint}"
        );
        // min_free_bytes is kept out of what segments may use.
        let hint = shortage_hint(&[dir(DirState::Full, Some(free))], 1 << 30, 16 << 20).unwrap();
        assert!(hint.contains("segment_size=4194304,"), "{hint}");
        // Unknown free space (a failed preallocation) or too little for four pages: no number.
        for d in [dir(DirState::Full, None), dir(DirState::Full, Some(8192))] {
            let hint = shortage_hint(&[d], 1 << 30, 0).unwrap();
            assert!(!hint.contains("e.g."), "{hint}");
            assert!(hint.contains("a smaller segment_size (a multiple of 4096) or free space"));
        }
        // Nothing refused for space (every directory offline): no hint.
        assert_eq!(
            shortage_hint(&[dir(DirState::Offline, Some(free))], 1 << 30, 0),
            None
        );
    }
}
