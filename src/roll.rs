//! Creating the segments an append needs: which directories are eligible, in which order they are
//! tried (placement), creating and mapping the files, and listing them (a roll).

use std::sync::Arc;

use crate::cleaner::clean_pass;
use crate::dirs::{DirInfo, DirState};
use crate::error::{Error, Result};
use crate::fs::{create_preallocated, is_no_space, remove_durably, segment_name};
use crate::options::PlaceFn;
use crate::placement;
use crate::segment::{Mapping, Segment, MAX_OFFSET};
use crate::state::{Change, State};

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
        let segs = created.iter().map(|(s, _)| Arc::clone(s)).collect();
        state.change(|_| Ok((Some(Change::Roll(segs)), ())))
    });
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

/// Judges every writable directory now (usage, `min_free_bytes`, `force_clean_ratio`), reporting
/// changes, and returns the eligible ones: (index into `dirs`, info). `pending`: directories of
/// segments being created, not listed yet.
pub(crate) fn eligible_dirs(state: &State, pending: &[usize]) -> Vec<(usize, DirInfo)> {
    let need = state.opts.segment_size + state.opts.min_free_bytes;
    let mut out = Vec::new();
    for (i, info) in state.dir_infos_with(pending).into_iter().enumerate() {
        if matches!(info.state, DirState::ReadOnly | DirState::Offline) {
            continue;
        }
        let force = state.opts.force_clean_ratio.get(&info.path);
        let refusal = match info.used_ratio {
            // Unknown usage: try it; creation reports a real shortage.
            None => None,
            Some(_) if info.free_bytes < need => Some(format!(
                "{} bytes free, a new segment needs {need} (segment_size + min_free_bytes)",
                info.free_bytes
            )),
            Some(r) if force.is_some_and(|f| r >= f) => Some(format!(
                "used ratio {r:.3} is at or above force_clean_ratio {}",
                force.unwrap_or(1.0)
            )),
            Some(_) => None,
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
    let size = state.opts.segment_size;
    let name = segment_name(start);
    let mut eligible = eligible_dirs(state, pending);
    if eligible.is_empty() {
        match clean_pass(state, false) {
            Ok(n) if n > 0 => log::info!("a full-disk roll cleaned {n} segments"),
            Ok(_) => {}
            Err(e) => log::warn!("cleaning before a full-disk roll failed: {e}"),
        }
        eligible = eligible_dirs(state, pending);
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
    for dir_idx in order {
        let dir = &state.dirs[dir_idx].path;
        let created =
            create_preallocated(dir, &name, size, state.opts.file_mode).and_then(|path| {
                let seg = Arc::new(Segment::new(start, size, path, dir_idx, true));
                let map = seg.map()?;
                Ok((seg, map))
            });
        match created {
            Ok(c) => return Ok(c),
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
    let why: Vec<String> = state
        .dir_infos()
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
    Err(Error::DiskFull {
        needed: size,
        tried: why.join("; "),
    })
}
