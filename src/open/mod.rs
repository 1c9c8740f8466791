//! Opening a store (this file): the paths given (`paths.rs`) matched to the store's directories by
//! identity (`locate.rs`) and the ones it lacks (`missing.rs`), the writer lock (`lock.rs`), the
//! segment files of every directory as one log (`layout.rs`; `listing.rs` for a view taken while
//! a writer changes the store), a move a crashed process left (`interrupted_move.rs`), and crash
//! recovery: finding the end and cutting what lies beyond it (`recovery.rs`).

mod appear;
pub(crate) mod interrupted_move;
pub(crate) mod layout;
pub(crate) mod listing;
pub(crate) mod locate;
pub(crate) mod lock;
pub(crate) mod missing;
pub(crate) mod paths;
pub(crate) mod recovery;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::open::interrupted_move::finish_interrupted_move;
use crate::open::layout::{remote_view, with_remote};
use crate::open::listing::{check_covers, known_sizes, with_holes};
use crate::open::locate::{locate, Given, Store};
use crate::open::lock::{Hold, JoinLock, StoreLock};
use crate::open::missing::{check_accept_lost, check_left_out, lost_records, missing_dirs_error};
use crate::open::paths::{absolute_overrides, check_paths, create_dir_durably};
use crate::open::recovery::recover;
use crate::options::Options;
use crate::shared::control::{pid_namespace, Control, CONTROL_FILE};
use crate::shared::Shared;
use crate::state::dirs::{Dir, DirState};
use crate::state::{Parts, State};
use crate::storage::checkpoint::{read_newest, Checkpoint, DirRecord};
use crate::storage::counts;
use crate::storage::fs::remove_durably;
use crate::storage::identity::{self, Identity};
use crate::storage::record::{Format, FILLER_LEN};
use crate::storage::segments::SegmentList;
use crate::storage::settings::{Change, WriterSettings};
use crate::storage::tail_hint::{self, TailHints};
use crate::sync::locked;
use crate::tier::{check_reachable, is_url, learn_head, open_tier, open_url, Tier};
use crate::write::flusher::flush_data;
use crate::write::writer::Writer;

/// Listings (with their tail scans) a read-only open takes while a writer changes the store.
const LIST_ATTEMPTS: usize = 8;

/// An open store: its state, and for a writer its writer and lock.
#[derive(Debug)]
pub(crate) struct Opened {
    pub state: Arc<State>,
    pub writer: Option<Writer>,
    pub lock: Option<StoreLock>,
    /// The end recovery found, for the open that recovered the store (a writer's first open).
    pub recovered: Option<u64>,
}

pub(crate) fn open<P: AsRef<Path>>(paths: &[P], mut opts: Options) -> Result<Opened> {
    opts.validate()?;
    if let [one] = paths {
        if let Some(url) = one.as_ref().to_str().filter(|p| is_url(p)) {
            return open_remote(url, opts);
        }
    }
    let given = check_paths(paths)?;
    if let Some(d) = given
        .iter()
        .find(|d| d.join("manifest").join("CURRENT").is_file())
    {
        return Err(Error::config(format!(
            "{} is a remote tier (segment objects and manifest/), not a store: open it read-only \
             by its URL, file://{}",
            d.display(),
            d.display()
        )));
    }
    let read_only = if opts.read_only_paths.is_empty() {
        Vec::new()
    } else {
        check_paths(&opts.read_only_paths)?
    };
    if let Some(d) = read_only.iter().find(|d| given.contains(d)) {
        return Err(Error::config(format!(
            "directory {} is in both paths and read_only_paths; give it once",
            d.display()
        )));
    }
    absolute_overrides(&mut opts)?;
    if opts.read_only {
        open_reader(given, read_only, opts)
    } else {
        open_writer(given, read_only, opts)
    }
}

/// Creates a writable directory and takes its lock as `hold` says; an I/O failure takes it
/// offline instead when another writable directory remains.
fn prepare_writable(paths: Vec<PathBuf>, hold: Hold) -> Result<(Vec<Dir>, StoreLock)> {
    let mut lock = StoreLock::default();
    let mut dirs = Vec::with_capacity(paths.len());
    let mut first_error = None;
    for path in paths {
        let ready = create_dir_durably(&path).and_then(|()| lock.add(&path, hold));
        let dir = Dir::new(path, false);
        match ready {
            Ok(()) => {}
            Err(e @ Error::StoreLocked { .. }) => return Err(e),
            Err(e) => {
                log::warn!("directory {} goes offline: {e}", dir.path.display());
                dir.set_state(DirState::Offline, Some(e.to_string()));
                first_error.get_or_insert(e);
            }
        }
        dirs.push(dir);
    }
    if dirs.iter().all(|d| d.state().0 == DirState::Offline) {
        if let Some(e) = first_error {
            return Err(e);
        }
    }
    note_shared_devices(&dirs);
    Ok((dirs, lock))
}

/// Says once, as information, which directories share a filesystem: expected in a test or a
/// demo, and worth knowing in production (their free space counts once, and one disk failing
/// takes all of them).
fn note_shared_devices(dirs: &[Dir]) {
    let mut groups: Vec<Vec<&Dir>> = Vec::new();
    for d in dirs.iter().filter(|d| d.dev.is_some()) {
        match groups.iter_mut().find(|g| g[0].dev == d.dev) {
            Some(g) => g.push(d),
            None => groups.push(vec![d]),
        }
    }
    for g in groups.iter().filter(|g| g.len() > 1) {
        let names: Vec<String> = g.iter().map(|d| d.path.display().to_string()).collect();
        log::info!(
            "directories {} are on one filesystem: its free space counts once",
            names.join(", ")
        );
    }
}

fn paths_of(dirs: &[Dir]) -> Vec<PathBuf> {
    dirs.iter().map(|d| d.path.clone()).collect()
}

fn open_writer(
    writable: Vec<PathBuf>,
    read_only: Vec<PathBuf>,
    mut opts: Options,
) -> Result<Opened> {
    for path in &read_only {
        if !path.is_dir() {
            return Err(Error::config(format!(
                "read-only directory {} does not exist; read_only_paths name existing \
                 directories of the store",
                path.display()
            )));
        }
    }
    // Shared writers open one at a time: the first (alone on the store) recovers it, the next
    // ones join what it published.
    let join = match opts.exclusive {
        true => None,
        false => {
            let first = first_dir(&writable);
            create_dir_durably(&first)?;
            Some((JoinLock::take(&first)?, first))
        }
    };
    let (mut dirs, lock) = match prepare_writable(writable.clone(), Hold::Exclusive) {
        Err(Error::StoreLocked { .. }) if join.is_some() => {
            let (dirs, lock) = prepare_writable(writable, Hold::Shared)?;
            let first = join.map(|(_, first)| first).unwrap_or_default();
            return join_shared(dirs, read_only, lock, &first, opts);
        }
        other => other?,
    };
    dirs.extend(read_only.iter().map(|p| Dir::new(p.clone(), true)));
    let store = locate(&given(&dirs), false)?;
    let all = paths_of(&dirs);
    check_reachable(&opts, store.ckpt.as_ref(), &all)?;
    // Alone on the store: what this open names changes the store's settings.
    for change in adopt_recorded(&mut opts, store.ckpt.as_ref(), &store)? {
        log::warn!(
            "this open changes the store's {change}: the store keeps the new value for every \
             later open"
        );
    }
    let online: Vec<bool> = dirs
        .iter()
        .map(|d| d.state().0 != DirState::Offline)
        .collect();
    // As read, to know at the end whether this open changed anything the file says.
    let on_disk = store.ckpt.clone();
    let mut ckpt = on_disk.clone();
    if let Some(c) = ckpt.as_mut() {
        check_accept_lost(c, &store, &opts.accept_lost)?;
        finish_interrupted_move(c, &store)?;
    }
    let sizes = known_sizes(ckpt.as_ref(), opts.segment_size);
    let mut listing = layout::list(&all, &online, None, &sizes)?;
    let lost = Checkpoint::lost_paths(ckpt.as_ref(), &store.lost_as_recorded(&opts.accept_lost));
    // Refused before any leftover is removed.
    let missing = match &ckpt {
        Some(c) => check_left_out(c, &store.left_out, &lost, &listing.segments)?,
        None => Vec::new(),
    };
    for tmp in &listing.temps {
        log::warn!(
            "removing {} left by an interrupted segment creation or move",
            tmp.display()
        );
        remove_durably(tmp)?;
    }
    for dup in &listing.empty_duplicates {
        log::warn!("removing never-written duplicate segment {}", dup.display());
        remove_durably(dup)?;
    }
    if let Some(c) = &ckpt {
        // Files wholly below the recorded head are leftovers of an interrupted deletion.
        for f in listing.segments.iter().filter(|f| f.end() <= c.min_offset) {
            log::warn!(
                "removing {} (deleted by retention before a crash)",
                f.path.display()
            );
            if let Err(e) = remove_durably(&f.path) {
                log::warn!("cannot remove {}: {e}", f.path.display());
            }
        }
        listing.segments.retain(|f| f.end() > c.min_offset);
    }
    let store_id = match (&ckpt, &store.store_id) {
        (Some(c), _) => c.store_id.clone(),
        (None, Some(id)) => id.clone(),
        (None, None) => identity::random_id(),
    };
    let writable_paths: Vec<PathBuf> = dirs
        .iter()
        .filter(|d| d.keeps_metadata())
        .map(|d| d.path.clone())
        .collect();
    let tier = open_tier(&opts, ckpt.as_ref(), &writable_paths, &store_id, true)?;
    if let (Some(t), None, false) = (&tier, &ckpt, listing.segments.is_empty()) {
        learn_head(t, &store_id)?;
    }
    if let Some(t) = &tier {
        let min = ckpt.as_ref().map_or(0, |c| c.min_offset);
        listing.segments = with_remote(listing.segments, t, min);
    }
    listing.segments = with_holes(listing.segments, &lost, ckpt.as_ref(), opts.segment_size);
    let lost_dirs = if listing.segments.iter().any(|f| f.lost) {
        lost_records(&lost, ckpt.as_ref(), &store)
    } else {
        Vec::new()
    };
    layout::check(&listing.segments, &sizes, false)
        .and_then(|_| check_covers(&listing.segments, ckpt.as_ref(), 0, &all))
        .map_err(|e| missing_dirs_error(&missing, e))?;
    if ckpt.as_ref().is_some_and(|c| !c.clean) && !missing.is_empty() {
        // What it held past the last flush (a process crash keeps it) is known nowhere else.
        return Err(missing_dirs_error(
            &missing,
            Error::config("it may hold records written after the last flush"),
        ));
    }

    let list = layout::to_list(listing.segments, &[], opts.segment_size, tier.as_ref());
    // The counts a writer recorded, before recovery counts on from them (it forgets any that
    // reach past the end it finds).
    let recorded = counts::read(&writable_paths, &store_id);
    counts::apply(&list, &recorded, u64::MAX);
    let hint = ckpt
        .as_ref()
        .and_then(|c| tail_hint::read(&all, &c.store_id));
    // What the last writer published, as its control file says within this page cache's life.
    let cache = tail_hint::page_cache_id(&all);
    let writable_dirs: Vec<&Path> = writable_paths.iter().map(PathBuf::as_path).collect();
    let published = cache
        .as_deref()
        .and_then(|c| Control::published_end(&writable_dirs, c));
    let (list, end, last_ts) = recover(list, ckpt.as_ref(), hint.as_ref(), published, true)?;
    // Damage cut the log below the flushed offset: the counts recorded past the end go from
    // the file before any record is appended there again.
    let recorded = match recorded.iter().any(|r| r.start + r.upto > end) {
        true => {
            let kept: Vec<_> = recorded
                .into_iter()
                .filter(|r| r.start + r.upto <= end)
                .collect();
            counts::write(&writable_paths, &store_id, &kept, opts.file_mode, true)?;
            kept
        }
        false => recorded,
    };
    let list = writable_last(list);
    // A tail lost with its directory, or only remote: the log goes on after it.
    let end = list
        .last()
        .filter(|l| !l.is_local())
        .map_or(end, |l| l.end());

    let ckpt_flushed = ckpt.as_ref().map(|c| {
        if c.clean {
            c.max_offset
        } else {
            c.flushed_offset
        }
    });
    let mut checkpoint = match ckpt {
        Some(c) => c,
        None => {
            // Metadata lost in every directory: the identities still say which store this is.
            let mut c = Checkpoint::new(opts.segment_size, records_of(&list, opts.record_format));
            c.store_id.clone_from(&store_id);
            c
        }
    };
    identify(&mut dirs, &store, &checkpoint.store_id, opts.file_mode);
    let record = |d: &Dir| DirRecord {
        id: d.id.clone(),
        path: d.path.to_string_lossy().into_owned(),
    };
    checkpoint.dirs = dirs.iter().filter(|d| !d.read_only).map(record).collect();
    checkpoint.read_only_dirs = dirs.iter().filter(|d| d.read_only).map(record).collect();
    checkpoint.writer = Some(WriterSettings::of(&opts));
    checkpoint.lost_dirs = lost_dirs;
    let mut sizes: BTreeSet<u64> = checkpoint.segment_sizes.iter().copied().collect();
    sizes.insert(opts.segment_size);
    sizes.extend(list.as_slice().iter().map(|s| s.size()));
    checkpoint.segment_sizes = sizes.into_iter().collect();
    let hint_dirs = metadata_dirs(&dirs);
    let tail = TailHints::open(&checkpoint.store_id, &hint_dirs, &all, opts.file_mode);

    let min = list.first().map_or(end, |s| s.start());
    // Records recovery kept past the old flushed offset may still be only in the page cache.
    let flushed = match ckpt_flushed {
        Some(f) => f.clamp(min, end),
        None => min,
    };
    let control_dirs: Vec<&Path> = hint_dirs.iter().map(|(_, p)| *p).collect();
    let control = Control::create(
        &control_dirs,
        end,
        flushed,
        last_ts,
        cache.as_deref(),
        opts.file_mode,
    )
    .map_err(|e| Error::io("mapping the control page", CONTROL_FILE, e))?;
    if join.is_some() && !control.is_shared() {
        if control.not_made().and_then(std::io::Error::raw_os_error) == Some(libc::ENOSPC) {
            return Err(Error::DiskFull {
                needed: 4096,
                tried: format!("{CONTROL_FILE}, the shared writers' control page"),
            });
        }
        return Err(Error::config(
            "exclusive=False needs the control file rmqlog.ctl in a writable directory, and none \
             took it (see the log's warnings)",
        ));
    }
    let control = Arc::new(control);
    let sync = opts.flush.policy().each_append;
    if sync {
        control.note_sync_writer();
    }
    let shared = join
        .as_ref()
        .map(|(_, first)| Shared::new(first, control.generation(), control.seen().epoch));
    let active = match list.last().filter(|l| l.is_local()) {
        Some(last) => Some((Arc::clone(last), last.map()?)),
        None => None,
    };
    let pos = active.as_ref().map_or(0, |(last, _)| end - last.start());
    let writer = Writer::new(
        sync,
        shared.is_some(),
        active,
        pos,
        end,
        tail,
        Arc::clone(&control),
    );
    let state = State::new(Parts {
        opts,
        dirs,
        read_only: false,
        shared,
        list,
        end,
        min,
        flushed,
        last_ts,
        checkpoint,
        counts: recorded,
        tier,
        control,
    })?;
    // Sync what recovery kept (in `FlushMode::None` that is left to the OS, as for appends), then
    // mark the store not clean until `close` says otherwise.
    if state.opts.flush.policy().on_open {
        flush_data(&state)?;
    }
    state.refresh_checkpoint(on_disk.as_ref())?;
    writer.record_tail_hint(&state);
    if join.is_some() {
        // The first open does the background work; others join from now on.
        crate::shared::owns_background(&state)?;
        lock.share();
    }
    Ok(Opened {
        state,
        writer: Some(writer),
        lock: Some(lock),
        recovered: Some(end),
    })
}

/// Takes into `opts` the store-wide settings it does not name from the store's recorded ones
/// (per-directory ratios keyed by where `store` has each directory now); returns those it names
/// with other values.
fn adopt_recorded(
    opts: &mut Options,
    ckpt: Option<&Checkpoint>,
    store: &Store,
) -> Result<Vec<Change>> {
    let Some(recorded) = ckpt.and_then(|c| c.writer.as_ref()) else {
        return Ok(Vec::new());
    };
    let recorded = recorded.with_dirs_at(|path| store.now_at(path));
    recorded.fill(opts);
    opts.validate().map_err(|e| {
        Error::config(format!(
            "the store's recorded settings are not valid ({e}); give that option to replace it"
        ))
    })?;
    Ok(recorded.changes(&WriterSettings::of(opts)))
}

/// The directories that keep metadata (index in `dirs`, path).
fn metadata_dirs(dirs: &[Dir]) -> Vec<(usize, &Path)> {
    dirs.iter()
        .enumerate()
        .filter(|(_, d)| d.keeps_metadata())
        .map(|(i, d)| (i, d.path.as_path()))
        .collect()
}

/// The directory shared writers serialise on: the first by its real path (symlinks resolved),
/// whatever order and spelling each gives.
fn first_dir(writable: &[PathBuf]) -> PathBuf {
    writable
        .iter()
        .map(|p| std::fs::canonicalize(p).unwrap_or_else(|_| p.clone()))
        .min()
        .unwrap_or_default()
}

/// A shared writer joining the writers open on the store: no recovery (they run on what the
/// first one recovered); the view is the store as listed under the append lock, ending at the
/// end the writers published.
fn join_shared(
    mut dirs: Vec<Dir>,
    read_only: Vec<PathBuf>,
    lock: StoreLock,
    first: &Path,
    mut opts: Options,
) -> Result<Opened> {
    dirs.extend(read_only.iter().map(|p| Dir::new(p.clone(), true)));
    let store = locate(&given(&dirs), false)?;
    let all = paths_of(&dirs);
    check_reachable(&opts, store.ckpt.as_ref(), &all)?;
    let ckpt = store.ckpt.clone().ok_or_else(|| {
        Error::config("the shared writers open on this store left no rmqlog.meta to join")
    })?;
    // The same directories, by identity: a path through a symlink or another mount point
    // names the same directory.
    let ours: Vec<(Option<&str>, &Path)> = dirs
        .iter()
        .zip(&store.dirs)
        .filter(|(d, _)| !d.read_only)
        .map(|(d, found)| (found.id.as_deref(), d.path.as_path()))
        .collect();
    let same = ckpt.dirs.len() == ours.len()
        && ckpt
            .dirs
            .iter()
            .all(|r| ours.iter().any(|&(id, path)| r.is(id, path)));
    if !same {
        let recorded: BTreeSet<&str> = ckpt.dirs.iter().map(|d| d.path.as_str()).collect();
        let given: Vec<_> = ours.iter().map(|(_, p)| p.display().to_string()).collect();
        return Err(Error::config(format!(
            "shared writers give the same directories: the writers open on this store use \
             {recorded:?}, this open gives {given:?}"
        )));
    }
    // One store, one policy: every writer rolls segments of one size (the checkpoint's list of
    // sizes is written by one of them only), and whichever open does the background work
    // applies the same retention. What this open does not name it takes from the writers open.
    let changes = adopt_recorded(&mut opts, Some(&ckpt), &store)?;
    if !changes.is_empty() {
        let changes: Vec<String> = changes
            .iter()
            .map(|c| format!("{} is {} there, {} here", c.setting, c.recorded, c.given))
            .collect();
        return Err(Error::config(format!(
            "a store's settings change only while one writer is open on it; against the writers \
             open: {}",
            changes.join("; ")
        )));
    }
    let writable_paths: Vec<&Path> = dirs
        .iter()
        .filter(|d| d.keeps_metadata())
        .map(|d| d.path.as_path())
        .collect();
    let manifest_dirs: Vec<PathBuf> = writable_paths.iter().map(|p| p.to_path_buf()).collect();
    let cache = tail_hint::page_cache_id(&all);
    let control = Control::find(&writable_paths)
        .filter(|c| c.is_shared() && c.is_live())
        .ok_or_else(|| {
            let exists = writable_paths.iter().any(|p| p.join(CONTROL_FILE).exists());
            Error::config(match exists {
                true => {
                    "the shared writers open on this store publish through an rmqlog.ctl this \
                     open cannot take (damaged, or made by another version of rmqlog)"
                }
                false => "the shared writers open on this store publish through no rmqlog.ctl",
            })
        })?;
    // Only writers of one page cache share a store: what they publish is true for this one.
    if cache
        .as_deref()
        .and_then(|c| Control::published_end(&writable_paths, c))
        .is_none()
    {
        return Err(Error::config(
            "the shared writers open on this store run on another machine, boot or mount \
             namespace (its rmqlog.ctl names another page cache); shared writers run on one \
             machine",
        ));
    }
    // The append lock names its holder by thread id, unique within one PID namespace only: a
    // writer of another could take a live holder's lock as a dead one's.
    if control.pid_ns() != pid_namespace() {
        return Err(Error::config(
            "the shared writers open on this store run in another PID namespace (a container, \
             or unshare --pid); shared writers of a store run in one PID namespace",
        ));
    }
    // Every append writes the page (the lock, the end).
    control.check_writable()?;
    for (dir, found) in dirs.iter_mut().zip(&store.dirs) {
        dir.id.clone_from(&found.id);
    }
    let tail = TailHints::open(&ckpt.store_id, &metadata_dirs(&dirs), &all, opts.file_mode);
    let tier = open_tier(&opts, Some(&ckpt), &manifest_dirs, &ckpt.store_id, true)?;
    let control = Arc::new(control);
    let end = control.end();
    let sync = opts.flush.policy().each_append;
    if sync {
        control.note_sync_writer();
    }
    let writer = Writer::new(sync, true, None, 0, end, tail, Arc::clone(&control));
    // A generation no view has: the first sync lists the store.
    let shared = Shared::new(
        first,
        control.generation().wrapping_sub(1),
        control.seen().epoch,
    );
    let flushed = control.flushed().min(end);
    let last_ts = control.last_ts();
    // The head as recorded (a deletion records it before any file goes): the first sync's
    // listing keeps every segment above it. A higher one would drop live records from the view,
    // and the checkpoints this open writes would then delete them from the store.
    let min = ckpt.min_offset.min(end);
    let state = State::new(Parts {
        opts,
        dirs,
        read_only: false,
        shared: Some(shared),
        list: SegmentList::new(Vec::new(), 0),
        end,
        min,
        flushed,
        last_ts,
        checkpoint: ckpt,
        counts: Vec::new(),
        tier,
        control: Arc::clone(&control),
    })?;
    crate::shared::catch_up(&state)?;
    state.take_recorded_counts();
    // Takes the background work if no open does it (its previous holder closed or died).
    crate::shared::owns_background(&state)?;
    Ok(Opened {
        state,
        writer: Some(writer),
        lock: Some(lock),
        recovered: None,
    })
}

fn given(dirs: &[Dir]) -> Vec<Given> {
    dirs.iter()
        .map(|d| Given {
            path: d.path.clone(),
            read_only: d.read_only,
            online: d.state().0 != DirState::Offline,
        })
        .collect()
}

/// Gives every directory its id, writing `rmqlog.id` where it has none yet (a new directory, or
/// one of a 0.1 store: the upgrade). A directory that cannot take the file keeps being known by
/// its path (a read-only one may be on a read-only filesystem).
fn identify(dirs: &mut [Dir], store: &Store, store_id: &str, mode: u32) {
    for (dir, found) in dirs.iter_mut().zip(&store.dirs) {
        let dir_id = found.id.clone().unwrap_or_else(identity::random_id);
        let identity = Identity::new(store_id, dir_id);
        let writable = dir.state().0 != DirState::Offline;
        dir.id = if found.has_identity || !writable {
            found.id.clone()
        } else {
            match identity::write(&dir.path, &identity, mode) {
                Ok(()) => Some(identity.dir_id),
                Err(e) => {
                    log::warn!(
                        "{} keeps being known by its path only: {e}",
                        dir.path.display()
                    );
                    None
                }
            }
        };
    }
}

fn open_reader(given: Vec<PathBuf>, read_only: Vec<PathBuf>, opts: Options) -> Result<Opened> {
    match opts.wait_for_store {
        None => open_made(given, read_only, opts),
        Some(limit) => match appear::wait(&given, limit)? {
            false => open_made(given, read_only, opts),
            true => open_made(given, read_only, opts).map_err(|e| appear::after_waiting(e, limit)),
        },
    }
}

/// A read-only open of the store `given` holds (or the error that says it holds none).
fn open_made(given: Vec<PathBuf>, read_only: Vec<PathBuf>, mut opts: Options) -> Result<Opened> {
    for d in given.iter().chain(&read_only) {
        if !d.is_dir() {
            return Err(Error::not_found(d, " (the directory does not exist)"));
        }
    }
    let wanted: Vec<Given> = given
        .iter()
        .map(|p| (p, false))
        .chain(read_only.iter().map(|p| (p, true)))
        .map(|(p, ro)| Given {
            path: p.clone(),
            read_only: ro,
            online: true,
        })
        .collect();
    // Any one directory of the store finds the others (`locate`).
    let store = locate(&wanted, true)?;
    let paths: Vec<PathBuf> = store.dirs.iter().map(|d| d.path.clone()).collect();
    let ids: Vec<Option<String>> = store.dirs.iter().map(|d| d.id.clone()).collect();
    let dirs: Vec<Dir> = store
        .dirs
        .iter()
        .map(|d| {
            let mut dir = Dir::new(d.path.clone(), d.read_only);
            dir.id = d.id.clone();
            dir
        })
        .collect();
    // Mapped before the store is listed: a change the listing missed shows as a newer generation.
    let dirs_of: Vec<&Path> = paths.iter().map(PathBuf::as_path).collect();
    let control = Control::of_store(&dirs_of)
        .map_err(|e| Error::io("mapping the control page", CONTROL_FILE, e))?;
    let seen = control.seen();
    let control = Arc::new(control);
    let recorded = read_newest(&paths)?;
    check_reachable(&opts, recorded.as_ref(), &paths)?;
    // A reader changes nothing: what it names is its own view.
    adopt_recorded(&mut opts, recorded.as_ref(), &store)?;
    let store_id = recorded
        .as_ref()
        .map(|c| c.store_id.clone())
        .or_else(|| store.store_id.clone())
        .unwrap_or_default();
    let tier = open_tier(&opts, recorded.as_ref(), &paths, &store_id, false)?;
    // A writer's batch in progress is not taken in part: the view ends at its published end.
    let published =
        tail_hint::page_cache_id(&paths).and_then(|c| Control::published_end(&dirs_of, &c));
    let (ckpt, list, end, last_ts) = recovered_view(&paths, &ids, &opts, tier.as_ref(), published)
        .map_err(|e| {
            let missing: Vec<DirRecord> =
                store.left_out.iter().map(|lo| lo.record.clone()).collect();
            missing_dirs_error(&missing, e)
        })?;
    if ckpt.is_none() && store.store_id.is_none() && list.first().is_none() {
        let names: Vec<String> = given.iter().map(|p| p.display().to_string()).collect();
        let what = if names.len() == 1 {
            " (the directory holds no rmqlog.meta, rmqlog.id or segment file)"
        } else {
            " (the directories hold no rmqlog.meta, rmqlog.id or segment file)"
        };
        return Err(Error::not_found(names.join(":"), what));
    }
    let min = list.first().map_or(end, |s| s.start());
    let recorded_flushed = ckpt.as_ref().map_or(0, |c| c.flushed_offset);
    // What the writers made durable since their last checkpoint, when their page is trusted.
    let page_flushed = published.map_or(0, |_| control.flushed());
    let flushed = recorded_flushed.max(page_flushed).min(end);
    // A reader writes no record: the format it would write does not matter.
    let checkpoint = ckpt.unwrap_or_else(|| Checkpoint::new(0, Format::V2));
    let state = State::new(Parts {
        opts,
        dirs,
        read_only: true,
        shared: None,
        list,
        end,
        min,
        flushed,
        last_ts,
        checkpoint,
        counts: Vec::new(),
        tier,
        control,
    })?;
    *locked(&state.seen) = seen;
    Ok(Opened {
        state,
        writer: None,
        lock: None,
        recovered: None,
    })
}

/// A read-only open of a log's remote tier alone, by its URL: the sealed segments the tier's
/// manifest lists, from any machine.
fn open_remote(url: &str, opts: Options) -> Result<Opened> {
    // Without the feature, `open_url` says what is missing first.
    if !opts.read_only && cfg!(feature = "tier") {
        return Err(Error::config(format!(
            "{url} is a tier URL, which opens read-only (read_only=True); a writer keeps its log \
             in local directories and ships sealed segments to the tier with tier_url"
        )));
    }
    let tier = open_url(url, &opts)?;
    let mut checkpoint = Checkpoint::new(0, Format::V2);
    checkpoint.store_id.clone_from(&tier.manifest().store_id);
    let (list, end) = remote_view(&tier, &[], opts.segment_size)?;
    let min = list.first().map_or(end, |s| s.start());
    let state = State::new(Parts {
        opts,
        dirs: Vec::new(),
        read_only: true,
        list,
        end,
        min,
        flushed: end,
        last_ts: 0,
        checkpoint,
        counts: Vec::new(),
        tier: Some(tier),
        shared: None,
        control: Arc::new(
            Control::private().map_err(|e| Error::io("mapping a private page", "", e))?,
        ),
    })?;
    Ok(Opened {
        state,
        writer: None,
        lock: None,
        recovered: None,
    })
}

/// A consistent listing of the store (see [`listing`]) and the end of its records. A segment
/// that moves or goes between the listing and the scan of the tail makes it list again.
fn recovered_view(
    paths: &[PathBuf],
    ids: &[Option<String>],
    opts: &Options,
    tier: Option<&Arc<Tier>>,
    published: Option<u64>,
) -> Result<(Option<Checkpoint>, SegmentList, u64, u64)> {
    let mut gone = None;
    for _ in 0..LIST_ATTEMPTS {
        let view = listing::consistent(paths, ids, opts.segment_size, &opts.accept_lost, 0, tier)?;
        let Some(view) = view else {
            break;
        };
        let list = layout::to_list(view.segments, &[], opts.segment_size, tier);
        if let Some(c) = &view.ckpt {
            counts::apply(&list, &counts::read(paths, &c.store_id), u64::MAX);
        }
        let hint = view
            .ckpt
            .as_ref()
            .and_then(|c| tail_hint::read(paths, &c.store_id));
        match recover(list, view.ckpt.as_ref(), hint.as_ref(), published, false) {
            Ok((list, end, last_ts)) => return Ok((view.ckpt, list, end, last_ts)),
            Err(e) if e.is_not_found() => gone = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(gone.unwrap_or_else(|| {
        Error::Unsupported(format!(
            "the store in {} kept changing while it was listed (a writer moving or deleting \
             segments without pause); try again",
            paths[0].display()
        ))
    }))
}

/// The writer's last segment, mapped for writing.
fn writable_last(list: SegmentList) -> SegmentList {
    let Some(last) = list.last().filter(|l| l.is_local()) else {
        return list;
    };
    let seg = last.writable_copy();
    list.truncated_before(last.start())
        .with_appended(vec![Arc::new(seg)])
}

/// The record format of a store whose metadata is lost: its first local segment's, else
/// `default` (a store with no record yet).
fn records_of(list: &SegmentList, default: Format) -> Format {
    list.as_slice()
        .iter()
        .filter(|s| s.is_local())
        .find_map(|s| Format::of_segment(s.map().ok()?.bytes(0, FILLER_LEN)))
        .unwrap_or(default)
}
