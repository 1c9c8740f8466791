//! A view of a store taken from outside its writer (a read-only open, a follower's refresh): the
//! newest metadata and the segment files, consistent with each other although the writer may be
//! rolling, deleting or moving segments while they are read.
//!
//! A listing is accepted when no file vanished while it was read, its segments run from the
//! recorded head to everything known to exist (the metadata's durable end, and what the reader
//! already holds), and either it has no gap or the metadata read before and after it is the same
//! (the same sequence number: no deletion recorded and no move intent set or cleared in between;
//! a gap then ends the log, as a segment being created at the end does). A move in flight shows
//! its segment in two directories: the source is kept, as the intent says. Otherwise the listing
//! is taken again after a short pause. So a move or a deletion in
//! progress never reads as damage, and never makes a follower's log shorter.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::failpoint::fail_point;
use crate::open::layout::{self, Found};
use crate::storage::checkpoint::{read_newest, Checkpoint};
use crate::tier::Tier;

/// Listings taken before giving up on a store that keeps changing under them.
const ATTEMPTS: u32 = 12;

/// A consistent listing.
#[derive(Debug)]
pub(crate) struct View {
    /// The metadata the listing agrees with.
    pub ckpt: Option<Checkpoint>,
    /// The log's segment files (and holes), contiguous, from the head on.
    pub segments: Vec<Found>,
}

/// The segment sizes a store may hold: the metadata's, plus the configured one.
pub(crate) fn known_sizes(ckpt: Option<&Checkpoint>, configured: u64) -> Vec<u64> {
    match ckpt {
        Some(c) => {
            let mut s = c.segment_sizes.clone();
            if !s.contains(&configured) {
                s.push(configured);
            }
            s
        }
        // Without metadata, any page-aligned length is accepted; contiguity still has to hold.
        None => Vec::new(),
    }
}

/// The copy to keep of a segment being moved: the source, as the metadata says.
fn move_preference(
    ckpt: Option<&Checkpoint>,
    paths: &[PathBuf],
    ids: &[Option<String>],
) -> Option<(u64, usize)> {
    let m = ckpt?.moving.as_ref()?;
    let is_source = |i: usize| {
        m.from
            .is(ids.get(i).cloned().flatten().as_deref(), &paths[i])
    };
    (0..paths.len())
        .find(|&i| is_source(i))
        .map(|i| (m.start, i))
}

/// What the metadata says exists: `[min_offset, durable end)`.
fn recorded_range(ckpt: Option<&Checkpoint>) -> (u64, u64) {
    ckpt.map_or((0, 0), |c| {
        let reach = if c.clean {
            c.max_offset.max(c.flushed_offset)
        } else {
            c.flushed_offset
        };
        (c.min_offset, reach)
    })
}

/// With `accept_lost`, the offsets lost directories held become holes instead of errors.
pub(crate) fn with_holes(
    found: Vec<Found>,
    lost: &[PathBuf],
    ckpt: Option<&Checkpoint>,
    segment_size: u64,
) -> Vec<Found> {
    if lost.is_empty() {
        return found;
    }
    let (min, must_reach) = recorded_range(ckpt);
    // A missing tail is as long as the writer's segments (a reader's option may differ).
    let writers = ckpt.and_then(|c| c.writer.as_ref()).map(|w| w.segment_size);
    let segment_size = writers.unwrap_or(segment_size);
    let holes = layout::fill_holes(found, lost, min, must_reach, segment_size);
    for h in holes.iter().filter(|f| f.lost) {
        log::warn!(
            "offsets [{}, {}) are lost with {} (accept_lost): reads there fail, scans skip them",
            h.start,
            h.end(),
            h.path.display()
        );
    }
    holes
}

/// The segments must cover what the metadata says exists, `[min_offset, durable end)`, and
/// `floor` (what the caller already knows exists).
pub(crate) fn check_covers(
    segments: &[Found],
    ckpt: Option<&Checkpoint>,
    floor: u64,
    dirs: &[PathBuf],
) -> Result<()> {
    let (min, reach) = recorded_range(ckpt);
    let must_reach = reach.max(floor);
    let missing = |what: String| {
        let n = dirs.len();
        let s = if n == 1 { "y" } else { "ies" };
        Error::corruption(None, None, format!("{what}; searched {n} director{s}"))
    };
    match (segments.first(), segments.last()) {
        (None, _) | (_, None) if must_reach > min => Err(missing(format!(
            "no segment files found, but the log holds offsets [{min}, {must_reach})"
        ))),
        (Some(first), _) if ckpt.is_some() && first.start > min => Err(missing(format!(
            "the head of the log is missing: offsets [{min}, {}) are in no segment",
            first.start
        ))),
        (_, Some(last)) if last.end() < must_reach => Err(missing(format!(
            "the tail of the log is missing: offsets [{}, {must_reach}) are in no segment",
            last.end()
        ))),
        _ => Ok(()),
    }
}

/// The store's segment files as they are, without the checks of [`consistent`]: for a repair
/// under the append lock, which looks only at the tail. Listed again (as `consistent` does) when
/// it fails while the metadata changed: a move or deletion of another process's maintenance.
pub(crate) fn files(
    paths: &[PathBuf],
    ids: &[Option<String>],
    segment_size: u64,
) -> Result<layout::Listing> {
    let online = vec![true; paths.len()];
    let mut attempt = 0;
    loop {
        let before = read_newest(paths)?;
        let sizes = known_sizes(before.as_ref(), segment_size);
        let prefer = move_preference(before.as_ref(), paths, ids);
        let e = match layout::list(paths, &online, prefer, &sizes) {
            Err(e @ (Error::Corruption { .. } | Error::Io { .. })) => e,
            other => return other,
        };
        let seq = |c: Option<Checkpoint>| c.map(|c| c.seq);
        if attempt + 1 == ATTEMPTS || seq(read_newest(paths)?) == seq(before) {
            return Err(e);
        }
        attempt += 1;
        std::thread::sleep(Duration::from_micros(200 << attempt.min(6)));
    }
}

/// Lists the store in `paths` until the listing is consistent (module docs). `floor`: an offset
/// the caller already knows exists, so the log may not end below it.
///
/// `Ok(None)`: the metadata changed during every attempt (a writer busy moving or deleting); the
/// caller keeps what it has. An error: the store was still, and still inconsistent (damage, or a
/// directory left out).
pub(crate) fn consistent(
    paths: &[PathBuf],
    ids: &[Option<String>],
    segment_size: u64,
    accept_lost: &[PathBuf],
    floor: u64,
    tier: Option<&Arc<Tier>>,
) -> Result<Option<View>> {
    let online = vec![true; paths.len()];
    let mut last_error = None;
    for attempt in 0..ATTEMPTS {
        if attempt > 0 {
            std::thread::sleep(Duration::from_micros(200 << attempt.min(6)));
        }
        let before = read_newest(paths)?;
        fail_point!("listing::metadata_read");
        let sizes = known_sizes(before.as_ref(), segment_size);
        let prefer = move_preference(before.as_ref(), paths, ids);
        let listed = layout::list(paths, &online, prefer, &sizes);
        let after = read_newest(paths)?;
        let unchanged = before.as_ref().map(|c| c.seq) == after.as_ref().map(|c| c.seq);
        // An inconsistency is damage only in a store at rest: between a move's rename and its
        // unlink a listing can miss the segment in both directories.
        let at_rest = unchanged && after.as_ref().is_none_or(|c| c.moving.is_none());
        let checked = listed.and_then(|listing| {
            let min = after.as_ref().map_or(0, |c| c.min_offset);
            let mut segments = listing.segments;
            segments.retain(|f| f.end() > min);
            if let Some(t) = tier {
                t.take_newer_local_copy(paths);
                segments = layout::with_remote(segments, t, min);
            }
            let lost = Checkpoint::lost_paths(after.as_ref(), accept_lost);
            let mut segments = with_holes(segments, &lost, after.as_ref(), segment_size);
            // A gap ends the log there (a file being created at the end is not there yet).
            let n = layout::check(&segments, &sizes, true)?;
            // Holes fill gaps whatever made them: with lost directories, only a still store.
            let whole = n == segments.len() && lost.is_empty();
            segments.truncate(n);
            check_covers(&segments, after.as_ref(), floor, paths)?;
            Ok((segments, whole))
        });
        match checked {
            // Without a gap, and covering what the metadata says exists, a listing is right even
            // if the store changed meanwhile: a segment it missed would leave a gap or a missing
            // head, one it saw twice fails as a duplicate.
            Ok((segments, whole)) if unchanged || whole => {
                return Ok(Some(View {
                    ckpt: after,
                    segments,
                }))
            }
            Ok(_) => last_error = None,
            Err(e @ (Error::Corruption { .. } | Error::Io { .. })) => {
                last_error = at_rest.then_some(e);
            }
            Err(e) => return Err(e),
        }
    }
    match last_error {
        Some(e) => Err(e),
        None => Ok(None),
    }
}
