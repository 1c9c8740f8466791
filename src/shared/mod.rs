//! Shared writers (`exclusive=False`): several opens, in one process or many, appending to one
//! store through its control page.
//!
//! The control page holds the truth while any shared writer is open: the published end, the
//! generation of the segment list, and the append lock. An append takes the lock, brings this
//! open's view up to the page ([`sync_locked`]), writes after the published end, publishes, and
//! lets go. A view is brought up to date two ways:
//! - the end moved and the generation did not: the new records are in this open's last segment
//!   (a roll bumps the generation before it writes), so the end is taken as it is, no listing;
//! - the generation moved (a roll, a deletion, a move, in any open): the store is listed again
//!   under the append lock (no roll runs meanwhile) and the page's end is taken as the end.
//!
//! The end needs no validation: every shared writer lives in one page cache (the open checks it),
//! and each publishes only what it wrote. A writer that dies holding the lock leaves the lock to
//! the next taker with `EOWNERDEAD`; that taker cuts the tail back to the published end before it
//! writes ([`repair`]): the dead writer's unpublished segments go, and the bytes it wrote past the
//! end in the last one are zeroed and synced, so no recovery ever takes them for records.
//!
//! Below it: the lock every append takes (`append_lock.rs`), the control page every process maps
//! (`control.rs`: published end, flushed end, segment-list generation) and futex(2) on a word of
//! it (`futex.rs`), which readers waiting for records sleep on.

pub(crate) mod append_lock;
pub(crate) mod control;
pub(crate) mod futex;

use std::os::unix::fs::FileExt;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::error::{Error, IoContext, Result};
use crate::failpoint::fail_point;
use crate::open::layout;
use crate::open::listing;
use crate::open::lock::{MaintenanceGuard, Taken};
use crate::shared::control::{Control, PageGuard};
pub(crate) use crate::state::Shared;
use crate::state::{Change, State};
use crate::storage::fs::remove_durably;
use crate::storage::segment::Segment;
use crate::write::warmer::ZEROS;

/// Whether this open does the store's background work (cleaning, the checkpoint): always for an
/// exclusive writer; for a shared one, while it holds `rmqlog.owner` (taken over when free), its
/// view then brought up to date.
pub(crate) fn owns_background(state: &State) -> Result<bool> {
    let Some(shared) = &state.shared else {
        return Ok(true);
    };
    match shared.owner.take() {
        Taken::No => Ok(false),
        Taken::Held => catch_up(state).map(|()| true),
        Taken::Now => {
            catch_up(state)?;
            sweep_leftovers(state);
            Ok(true)
        }
    }
}

/// The open that takes the background work over removes what a dead predecessor left: files
/// wholly below the head the checkpoint records (it died between the checkpoint and the unlink).
fn sweep_leftovers(state: &State) {
    let paths: Vec<_> = state.dirs.iter().map(|d| d.path.clone()).collect();
    let online = vec![true; paths.len()];
    let Ok(Some(ckpt)) = crate::storage::checkpoint::read_newest(&paths) else {
        return;
    };
    let sizes = listing::known_sizes(Some(&ckpt), state.opts.segment_size);
    let Ok(listed) = layout::list(&paths, &online, None, &sizes) else {
        return;
    };
    let min = ckpt.min_offset.min(state.min_offset());
    for f in listed.segments.iter().filter(|f| f.end() <= min) {
        log::warn!(
            "removing {} (deleted by retention before its cleaner died)",
            f.path.display()
        );
        if let Err(e) = remove_durably(&f.path) {
            log::warn!("cannot remove {}: {e}", f.path.display());
        }
        crate::storage::key_index::remove_beside(&f.path);
    }
}

/// Held while an open changes a shared store's segments or checkpoint (a maintenance call in any
/// open; a cleaning pass or a checkpoint of the open doing the background work): one open at a
/// time, its view brought up to the store first, so that what it deletes, moves or records
/// starts from what the others did. `None` for an exclusive writer (it alone changes the store).
pub(crate) fn maintenance(state: &State) -> Result<Option<MaintenanceGuard<'_>>> {
    let Some(shared) = &state.shared else {
        return Ok(None);
    };
    let guard = shared.maintenance.hold(state.opts.lock_timeout)?;
    maintenance_taken(state, false)?;
    Ok(Some(guard))
}

/// With the maintenance lock just taken: the view brought up to the store, and what a dead
/// maintainer left finished. `holding_append`: the caller holds the append lock (a roll).
pub(crate) fn maintenance_taken(state: &State, holding_append: bool) -> Result<()> {
    catch_up_with(state, !holding_append)?;
    finish_dead_maintenance(state, !holding_append)?;
    take_tier_manifest(state);
    Ok(())
}

/// With the maintenance lock held (no change of the store's segments runs): finishes what a
/// process that died changing them left, before any checkpoint of this open could undo it.
/// - A move's intent on disk: its mover died in it (the listings need the intent to pick a
///   copy). The move is finished, then a checkpoint without the intent written.
/// - A head on disk above this view's: a deletion recorded it, then died before it announced
///   the change (this view would record the old head again, above files gone). The view takes
///   it, and what the deletion left below it goes.
fn finish_dead_maintenance(state: &State, may_lock: bool) -> Result<()> {
    let Some(on_disk) = crate::storage::checkpoint::read_newest(&state.metadata_dirs())? else {
        return Ok(());
    };
    let moved = match &on_disk.moving {
        Some(m) => crate::open::interrupted_move::finish_dead_move(state, m)?,
        None => false,
    };
    let deleted = on_disk.min_offset > state.min_offset();
    if deleted {
        log::warn!(
            "a shared writer died deleting the log's head: taking the head it recorded, {}",
            on_disk.min_offset
        );
    }
    if moved || deleted {
        state.announce_file_gone(); // every view lists the store again, this one too
        catch_up_with(state, may_lock)?;
    }
    if deleted {
        sweep_leftovers(state);
    }
    if moved {
        state.write_checkpoint()?;
    }
    Ok(())
}

/// Takes the tier's manifest as the open doing the background work last published it (the
/// local copy in the store's directories), so that this open's listings and checkpoints follow
/// it. Nothing without a tier.
pub(crate) fn take_tier_manifest(state: &State) {
    if let Some(tier) = &state.tier {
        tier.take_newer_local_copy(&state.metadata_dirs());
    }
}

/// Brings a shared writer's view up to the control page (a read, a wait, a flush, an append
/// before it takes the lock); nothing for an exclusive writer. Takes no lock: a changed segment
/// list is listed as a follower lists it, and taken when the generation stayed the same across
/// the listing (a seqlock on the generation), so that readers never hold up the writers.
pub(crate) fn catch_up(state: &State) -> Result<()> {
    catch_up_with(state, true)
}

/// [`catch_up`] for a caller that holds the append lock (an append looking records up).
pub(crate) fn catch_up_locked(state: &State) -> Result<()> {
    catch_up_with(state, false)
}

/// [`catch_up`]; `may_lock` false for a caller holding the append lock already (a roll): the
/// store changing under every listing is then an error, not a wait for the lock.
fn catch_up_with(state: &State, may_lock: bool) -> Result<()> {
    let Some(shared) = &state.shared else {
        return Ok(());
    };
    let ctl = state.control_full();
    ctl.check_intact(
        shared.epoch,
        state.max_offset(),
        shared.seen.load(Ordering::Acquire),
    )?;
    for attempt in 0..ATTEMPTS {
        if !may_lock && attempt > 1 {
            // Holding the append lock, no roll changes the list: the deletions and moves that
            // do (another open's tier deleting local copies) end soon, given the time.
            std::thread::sleep(std::time::Duration::from_micros(100 << attempt));
        }
        let before = ctl.generation();
        let (end, ts) = (ctl.end(), ctl.last_ts());
        let unchanged = before == ctl.generation() && before == shared.seen.load(Ordering::Acquire);
        if (unchanged && take_end(state, end, ts)) || reload(state, &ctl, before, false)? {
            take_flushed(state, &ctl);
            return Ok(());
        }
    }
    if !may_lock {
        return Err(changing(state, "holding the append lock"));
    }
    // The store changed under every listing: once more with the lock (no roll runs then).
    let mut guard = ctl.lock_appends(state.opts.lock_timeout, &|| state.check_open())?;
    sync_locked(state, &ctl, &mut guard)?;
    take_flushed(state, &ctl);
    Ok(())
}

/// `Ok` if `ctl` is still the page the shared writers share, as this open knows it (see
/// [`Control::check_intact`]); nothing for an exclusive writer.
pub(crate) fn check_page(state: &State, ctl: &Control) -> Result<()> {
    match &state.shared {
        Some(shared) => ctl.check_intact(
            shared.epoch,
            state.max_offset(),
            shared.seen.load(Ordering::Acquire),
        ),
        None => Ok(()),
    }
}

/// Listings a catch-up takes before it lists with the append lock held; listings a holder of the
/// lock takes before it gives up (deletions and moves change the list without the lock).
const ATTEMPTS: usize = 8;

/// With the append lock held: checks the page, repairs what a dead holder left, lists the store
/// again if its segment list changed, and takes the published end.
pub(crate) fn sync_locked(state: &State, ctl: &Control, guard: &mut PageGuard<'_>) -> Result<()> {
    let Some(shared) = &state.shared else {
        return Ok(());
    };
    ctl.check_intact(
        shared.epoch,
        state.max_offset(),
        shared.seen.load(Ordering::Acquire),
    )?;
    if guard.owner_died() || ctl.repair_pending() || ctl.reserved() > ctl.end() {
        // The repair is owed until it is done: marked in the page before the lock is consistent
        // again, so that a repair failing here (the guard lets go as usual) or dying here
        // (`EOWNERDEAD` again) leaves it to the next taker, never a lock nobody can take.
        ctl.set_repair_pending(true);
        guard.make_consistent().map_err(|e| ctl.lock_error(e))?;
        repair(state, ctl)?;
        ctl.set_repair_pending(false);
    }
    for attempt in 0..ATTEMPTS {
        if attempt > 1 {
            // Only deletions and moves change the list while the lock is held (no roll): they
            // end soon (a tier deleting local copies runs out of them), given the time.
            std::thread::sleep(std::time::Duration::from_micros(100 << attempt));
        }
        let generation = ctl.generation();
        if generation == shared.seen.load(Ordering::Acquire)
            && take_end(state, ctl.end(), ctl.last_ts())
        {
            return Ok(());
        }
        // The generation moved, or the end lies past this view's last segment although no
        // change was announced: list.
        if reload(state, ctl, generation, true)? {
            return Ok(());
        }
    }
    Err(changing(state, "listing under the append lock"))
}

/// `how`: where the listings ran, for whoever reads the error.
fn changing(state: &State, how: &str) -> Error {
    Error::Unsupported(format!(
        "the store in {} kept changing while a shared writer listed it ({how}); try again",
        state.dirs[0].path.display()
    ))
}

/// Takes in, with no lock, the others' records in this view's last segment and what they made
/// durable (a sync covers them then).
pub(crate) fn look(state: &State) {
    let Some(shared) = &state.shared else {
        return;
    };
    let ctl = state.control_full();
    let generation = ctl.generation();
    let (end, ts) = (ctl.end(), ctl.last_ts());
    if generation == shared.seen.load(Ordering::Acquire) && generation == ctl.generation() {
        take_end(state, end, ts);
    }
    take_flushed(state, &ctl);
}

/// Takes what another open made durable (a reader's look: appends need not know).
fn take_flushed(state: &State, ctl: &Control) {
    let flushed = ctl.flushed().min(state.max_offset());
    if flushed > state.flushed_offset() {
        state.set_flushed(flushed);
    }
}

/// Takes `end` when it lies in this view's last segment (false otherwise).
fn take_end(state: &State, end: u64, ts: u64) -> bool {
    if end <= state.max_offset() {
        return true;
    }
    let list = state.segments();
    let Some(last) = list.last().filter(|l| l.start() <= end && end <= l.end()) else {
        return false;
    };
    // A segment the log went on past was sealed by the roll that bumped the generation.
    last.advance_written(end - last.start());
    state.publish(end, ts);
    true
}

/// Lists the store and takes it as of `generation`, ending at the published end: segments
/// wholly below it are sealed, the one holding it is the last and is mapped for writing. False
/// (nothing taken) when the generation moved during the listing (without the append lock), the
/// store's metadata changed during every attempt of the listing (another open's tier deleting
/// local copies, a move), or this open took a later end meanwhile: the caller looks again. With
/// `locked` false a thread of this open may hold the append lock, rolled and not published yet:
/// the segments of its roll (in the view, past the end: the listing leaves them out) stay in the
/// view.
fn reload(state: &State, ctl: &Control, generation: u64, locked: bool) -> Result<bool> {
    let Some(shared) = &state.shared else {
        return Ok(true);
    };
    let paths: Vec<_> = state.dirs.iter().map(|d| d.path.clone()).collect();
    let ids: Vec<_> = state.dirs.iter().map(|d| d.id.clone()).collect();
    let Some(view) = listing::consistent(
        &paths,
        &ids,
        state.opts.segment_size,
        &state.opts.accept_lost,
        0,
        state.tier.as_ref(),
    )?
    else {
        return Ok(false);
    };
    fail_point!("shared::listed");
    // A test's stand-in for another open's deletion during the listing (no roll: it needs no
    // append lock), which bumps the generation.
    #[cfg(feature = "failpoints")]
    if fail::eval("shared::changed_while_listed", |_| ()).is_some() {
        ctl.bump_generation();
    }
    // A roll bumps the generation before it publishes an end in its new segment: with the
    // generation unchanged since before the listing, the end lies in a listed segment. With the
    // append lock held no roll runs: what moved the generation was a deletion or a move of sealed
    // segments (another open's tier deleting local copies), and the listing, consistent in
    // itself, is taken as of the generation before it, so that the next catch-up lists again.
    let (end, ts) = (ctl.end(), ctl.last_ts());
    if ctl.generation() != generation && !locked {
        return Ok(false);
    }
    let mut found = view.segments;
    // A segment at or past the end is none of the view's: a roll's under way (its holder has
    // the lock), or a dead holder's (which the repair removes).
    found.retain(|f| f.start < end);
    state.change(|plan| {
        if plan.end > end {
            return Ok((None, false)); // this open appended meanwhile: its view is newer
        }
        let rolled: &[Arc<Segment>] = match locked {
            true => &[],
            false => {
                let view = plan.list.as_slice();
                &view[view.partition_point(|s| s.start() < end)..]
            }
        };
        let listed = layout::to_list(
            found,
            plan.list.as_slice(),
            state.opts.segment_size,
            state.tier.as_ref(),
        );
        if rolled
            .first()
            .is_some_and(|r| listed.last().is_none_or(|l| l.end() != r.start()))
        {
            return Ok((None, false)); // not the view's roll: look again
        }
        let mut segs = listed.as_slice().to_vec();
        segs.extend(rolled.iter().cloned());
        let list = writable_tail(segs, end, state.opts.segment_size);
        if list.last().is_some_and(|l| l.end() < end) {
            return Err(Error::Corruption {
                path: None,
                offset: Some(end),
                reason: format!(
                    "the shared writers' published end {end} lies past the last segment listed \
                     (ending at {})",
                    list.last().map_or(0, |l| l.end())
                ),
            });
        }
        // A deletion this open made while the store was listed (its cleaner, under the list
        // lock now released) stays made: the head never comes back.
        let list = list.without_head_before(state.min_offset());
        shared.seen.store(generation, Ordering::Release);
        let reload = Change::Reload {
            list,
            end,
            last_timestamp_ms: ts,
        };
        Ok((Some(reload), true))
    })
}

/// A view ending at `end`: the segments wholly below it sealed, the one holding it (the last,
/// but for a roll of this open in progress) mapped for writing and written up to `end`.
fn writable_tail(
    mut segs: Vec<Arc<Segment>>,
    end: u64,
    segment_size: u64,
) -> crate::storage::segments::SegmentList {
    let n = segs.len();
    for (i, seg) in segs.iter_mut().enumerate() {
        if !seg.is_local() || seg.start() > end {
            continue; // remote only: as written as its object; a roll's: its writer's
        }
        let holds_end = end < seg.end() || i + 1 == n;
        if !holds_end {
            seg.advance_written(seg.size());
            continue;
        }
        if !seg.is_writable() {
            *seg = Arc::new(seg.writable_copy());
        }
        seg.advance_written(end.saturating_sub(seg.start()).min(seg.size()));
    }
    crate::storage::segments::SegmentList::new(segs, segment_size)
}

/// Cuts the tail back to the published end after its writer died holding the lock: the segments
/// it created past the end go, the bytes it wrote past the end are zeroed and synced.
fn repair(state: &State, ctl: &Control) -> Result<()> {
    let end = ctl.end();
    let reserved = ctl.reserved().max(end);
    log::warn!(
        "a shared writer died holding the append lock: cutting what it wrote past the published \
         end {end} (up to {reserved})"
    );
    let paths: Vec<_> = state.dirs.iter().map(|d| d.path.clone()).collect();
    let ids: Vec<_> = state.dirs.iter().map(|d| d.id.clone()).collect();
    fail_point!("repair::list", |_| injected("listing the store", &paths[0]));
    let listed = listing::files(&paths, &ids, state.opts.segment_size)?;
    let unpublished: Vec<_> = listed.segments.iter().filter(|f| f.start >= end).collect();
    if let Some(first) = unpublished.first() {
        log::warn!(
            "removing {} never published segment(s), from {}",
            unpublished.len(),
            first.path.display()
        );
    }
    for f in unpublished {
        fail_point!("repair::remove", |_| injected("removing", &f.path));
        remove_durably(&f.path)?;
        crate::storage::key_index::remove_beside(&f.path);
    }
    if let Some(f) = listed
        .segments
        .iter()
        .find(|f| f.start < end && end < f.start + f.len)
    {
        fail_point!("repair::open", |_| injected("repairing", &f.path));
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(&f.path)
            .ctx("repairing", &f.path)?;
        let mut at = end - f.start;
        let upto = (reserved.min(f.start + f.len)) - f.start;
        while at < upto {
            let n = (upto - at).min(ZEROS.len() as u64) as usize;
            fail_point!("repair::zero", |_| injected("repairing", &f.path));
            file.write_all_at(&ZEROS[..n], at)
                .ctx("repairing", &f.path)?;
            at += n as u64;
        }
        fail_point!("repair::sync", |_| injected("repairing", &f.path));
        file.sync_data().ctx("repairing", &f.path)?;
    }
    ctl.cut_to(end);
    // Every view lists again: the removed segments leave.
    ctl.bump_generation();
    fail_point!("repair::cut");
    Ok(())
}

/// An I/O error a test injects at a step of the repair (fail points `repair::*`).
#[cfg(feature = "failpoints")]
fn injected(op: &'static str, path: &std::path::Path) -> Result<()> {
    Err(Error::io(
        op,
        path,
        std::io::Error::from_raw_os_error(libc::EIO),
    ))
}
