//! The `rmqlog-tier` thread: ships sealed segments to the object store, one a pass; moves the
//! remote head after retention; deletes local copies that are safely remote. Appends never wait
//! for it: when the store is unreachable it retries with a growing pause, says so once through
//! `on_dir_event` (the tier URL as the path, `offline`), and again when the store is back.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use object_store::ObjectStoreExt;

use crate::background::{Next, Periodic};
use crate::error::{Error, Result};
use crate::failpoint::fail_point;
use crate::state::dirs::{DirEvent, DirState};
use crate::state::{Change, State};
use crate::storage::fs::remove_durably;
use crate::storage::segment::Segment;
use crate::sync::locked;
use crate::tier::manifest::{self, object_name, Manifest};
use crate::tier::remote::published;
use crate::tier::Tier;

/// How often the thread looks for work.
const INTERVAL: Duration = Duration::from_millis(100);
/// How long one pass keeps uploading before it lets the thread look at its stop signal.
const PASS_BUDGET: Duration = Duration::from_millis(500);
/// The longest pause between attempts while the store fails.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

pub(crate) fn start_shipper(state: &Arc<State>) -> Result<Periodic> {
    let state = Arc::clone(state);
    let mut retry_at = Instant::now();
    let mut checked_remote = false;
    Periodic::start("rmqlog-tier", INTERVAL, move || {
        let Some(tier) = state.tier.clone() else {
            return Next::Stop;
        };
        if state.check_open().is_err() {
            return Next::Stop;
        }
        if Instant::now() < retry_at {
            return Next::Continue;
        }
        let pass = catch_unwind(AssertUnwindSafe(|| {
            // Shared writers: the open doing the background work ships. One that takes it over
            // starts from the manifest in the store (its predecessor may have died between
            // publishing a version and saving the local copy).
            if !crate::shared::owns_background(&state)? {
                checked_remote = false;
                return Ok(());
            }
            pass(&state, &tier, &mut checked_remote)
        }));
        match pass {
            Ok(Ok(())) => recovered(&state, &tier),
            Ok(Err(Error::Closed)) => return Next::Stop,
            Ok(Err(e)) => retry_at = Instant::now() + failed(&state, &tier, &e),
            Err(_) => {
                log::error!("the tier thread panicked; uploads stop until the log is reopened");
                locked(&tier.health).last_error = Some("the tier thread panicked".into());
                return Next::Stop;
            }
        }
        Next::Continue
    })
}

/// One pass: the remote manifest checked (first pass), the remote head, one upload, local
/// deletions.
fn pass(state: &State, tier: &Arc<Tier>, checked_remote: &mut bool) -> Result<()> {
    if !*checked_remote {
        adopt_remote(state, tier)?;
        *checked_remote = true;
    }
    trim_remote(state, tier)?;
    // Uploads until none is left or the pass has run a while (so a close never waits long).
    let started = Instant::now();
    while upload_one(state, tier)? && started.elapsed() < PASS_BUDGET && state.check_open().is_ok()
    {
    }
    drop_local(state, tier)
}

/// A manifest newer than the local copy (the writer stopped between publishing and saving its
/// copy) is taken; another store's manifest stops the tier. Then what an earlier writer left
/// behind is swept.
fn adopt_remote(state: &State, tier: &Tier) -> Result<()> {
    let local = tier.manifest();
    let Some(remote) = tier.load_remote_manifest()? else {
        return Ok(());
    };
    if remote.store_id != local.store_id {
        return Err(Error::config(format!(
            "the tier {} holds the log of another store ({}; this store is {}): give each store \
             its own prefix",
            tier.remote.url, remote.store_id, local.store_id
        )));
    }
    if remote.version > local.version {
        let _maintenance = crate::shared::maintenance(state)?;
        save(state, tier, remote, None)?;
    }
    let swept = tier.block_on(tier.sweep(&tier.manifest()))?;
    Tier::count(&tier.stats.remote_deleted, swept);
    Ok(())
}

/// Makes `next` current: published in the store, copied into the store's directories, recorded
/// in the checkpoint. The older versions go last.
/// `uploaded`: the entry `next` adds, counted as the manifest shows it.
fn commit(
    state: &State,
    tier: &Tier,
    mut next: Manifest,
    uploaded: Option<&manifest::Entry>,
) -> Result<()> {
    // Shared writers: the checkpoint and the local copy change one open at a time.
    let _maintenance = crate::shared::maintenance(state)?;
    next.min_offset = next.min_offset.max(state.min_offset());
    tier.block_on(published::publish(&tier.remote, &next))?;
    fail_point!("tier::published");
    let version = next.version;
    save(state, tier, next, uploaded)?;
    tier.block_on(async {
        published::prune(&tier.remote, version).await;
        Ok(())
    })?;
    Ok(())
}

fn save(state: &State, tier: &Tier, m: Manifest, uploaded: Option<&manifest::Entry>) -> Result<()> {
    manifest::save_local(&state.metadata_dirs(), &m, state.opts.file_mode)?;
    {
        let _shown = locked(&tier.stats.shown);
        if let Some(entry) = uploaded {
            Tier::count(&tier.stats.uploads, 1);
            Tier::count(&tier.stats.uploaded_bytes, entry.size);
        }
        tier.set_manifest(m);
    }
    state.write_checkpoint()
}

/// After retention moved the log's head, the manifest follows, then the objects below it go.
fn trim_remote(state: &State, tier: &Tier) -> Result<()> {
    let m = tier.manifest();
    let min = state.min_offset();
    if m.version == 0 || (m.min_offset >= min && m.segments.first().is_none_or(|e| e.end() > min)) {
        return Ok(());
    }
    let (next, gone) = m.without_head(min);
    commit(state, tier, next, None)?;
    for e in gone {
        let name = object_name(e.start);
        let path = tier.remote.path(&name);
        let deleted = tier.block_on(async {
            let done = tier.remote.store.delete(&path).await;
            done.map_err(|err| {
                tier.remote
                    .failed("deleting", tier.remote.url_of(&name), err)
            })
        });
        match deleted {
            Ok(()) => Tier::count(&tier.stats.remote_deleted, 1),
            Err(err) => log::warn!("{} stays in the store: {err}", tier.remote.url_of(&name)),
        }
        tier.forget_cached(e.start);
    }
    Ok(())
}

/// Uploads the oldest sealed local segment that has no remote copy and is old enough; whether
/// it uploaded one.
fn upload_one(state: &State, tier: &Tier) -> Result<bool> {
    let list = state.segments_full();
    let m = tier.manifest();
    for seg in list.sealed(state.max_offset()) {
        if !seg.is_local() || seg.remote_copy().is_some() {
            continue;
        }
        if seg.end() > state.flushed_offset() {
            // Only durable bytes go: a power loss must not leave the tier holding records the
            // log lost (and then writes again differently).
            return Ok(false);
        }
        if let Some(e) = m.get(seg.start()) {
            // Uploaded before a move replaced the segment, or before a reopen.
            seg.set_remote_copy(e.clone());
            continue;
        }
        let modified = modified_ms(seg);
        let age = now_ms().saturating_sub(modified);
        if u128::from(age) < state.opts.tier.as_ref().map_or(0, |t| t.after.as_millis()) {
            return Ok(false);
        }
        let entry = tier.upload(seg.start(), seg.written(), seg.map()?, modified)?;
        fail_point!("tier::uploaded");
        commit(state, tier, m.with(entry.clone()), Some(&entry))?;
        fail_point!("tier::committed");
        seg.set_remote_copy(entry);
        return Ok(true);
    }
    Ok(false)
}

/// Deletes the local copies of the oldest sealed segments that are safely remote, while they are
/// older than `local_retention_hours` or the local segments hold more than
/// `local_retention_bytes`. Only a prefix of the local segments goes.
fn drop_local(state: &State, tier: &Arc<Tier>) -> Result<()> {
    let Some(t) = &state.opts.tier else {
        return Ok(());
    };
    if t.local_retention.is_none() && t.local_retention_bytes.is_none() {
        return Ok(());
    }
    let list = state.segments_full();
    let mut local: u64 = list
        .as_slice()
        .iter()
        .filter(|s| s.is_local())
        .map(|s| s.size())
        .sum();
    for seg in list.sealed(state.max_offset()) {
        if !seg.is_local() {
            continue;
        }
        let Some(entry) = seg.remote_copy() else {
            break;
        };
        let age = Duration::from_millis(now_ms().saturating_sub(modified_ms(seg)));
        let old = t.local_retention.is_some_and(|h| age >= h);
        let over = t.local_retention_bytes.is_some_and(|b| local > b);
        if !(old || over) {
            break;
        }
        if drop_one(state, tier, seg, entry)? {
            local -= seg.size();
        }
    }
    Ok(())
}

/// Replaces `seg` in the list by its remote copy, then deletes its file. False if a concurrent
/// change (retention, a move) took the segment first.
fn drop_one(
    state: &State,
    tier: &Arc<Tier>,
    seg: &Arc<Segment>,
    entry: &manifest::Entry,
) -> Result<bool> {
    let _maintenance = crate::shared::maintenance(state)?;
    let _one_move = locked(&state.move_lock);
    let shown = locked(&tier.stats.shown);
    let replaced = state.change(|p| {
        if !p.sealed().iter().any(|s| Arc::ptr_eq(s, seg)) {
            return Ok((None, false));
        }
        let new = Arc::new(Segment::remote(entry.clone(), Arc::clone(tier)));
        Ok((
            Some(Change::Replace {
                old: Arc::clone(seg),
                new,
            }),
            true,
        ))
    })?;
    if replaced {
        Tier::count(&tier.stats.local_deleted, 1);
    }
    drop(shown);
    if replaced {
        fail_point!("tier::replaced");
        // The key index stays: lookups of the remote-only segment read it (`read/lookup.rs`).
        remove_durably(seg.path())?;
        state.announce_file_gone();
        log::info!(
            "{} deleted: its copy is {}",
            seg.path().display(),
            tier.object_url(seg.start())
        );
    }
    Ok(replaced)
}

/// A failed pass: counted, said once, and the pause before the next attempt.
fn failed(state: &State, tier: &Tier, e: &Error) -> Duration {
    Tier::count(&tier.stats.upload_errors, 1);
    let mut h = locked(&tier.health);
    h.failures += 1;
    h.last_error = Some(e.to_string());
    if h.failures == 1 {
        log::warn!(
            "the tier {} fails: {e}; uploads wait and retry",
            tier.remote.url
        );
        state.events.send(DirEvent {
            path: tier.remote.url.clone().into(),
            old: DirState::Writable,
            new: DirState::Offline,
            reason: e.to_string(),
        });
    }
    let pause = INTERVAL.saturating_mul(1 << h.failures.min(10));
    pause.min(MAX_BACKOFF)
}

fn recovered(state: &State, tier: &Tier) {
    let mut h = locked(&tier.health);
    if h.failures == 0 {
        return;
    }
    h.failures = 0;
    h.last_error = None;
    state.events.send(DirEvent {
        path: tier.remote.url.clone().into(),
        old: DirState::Offline,
        new: DirState::Writable,
        reason: "the object store answers again; the uploads resume".into(),
    });
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// When a local segment was last written (its file's mtime).
fn modified_ms(seg: &Segment) -> u64 {
    std::fs::metadata(seg.path())
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or_else(now_ms, |d| d.as_millis() as u64)
}
