//! Opening a store: the lock, loading segments from every directory, checks against the
//! checkpoint, holes of lost directories, then crash recovery.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::checkpoint::{read_newest, Checkpoint};
use crate::dirs::{Dir, DirState};
use crate::error::{Error, Result};
use crate::fs::remove_durably;
use crate::layout::{self, Found};
use crate::lock::StoreLock;
use crate::log::{Shared, SharedParts};
use crate::options::{FlushMode, Options};
use crate::paths::{absolute_overrides, check_paths, create_dir_durably, to_strings};
use crate::recovery::recover;
use crate::segment::Segment;
use crate::segments::SegmentList;
use crate::tail_hint::{self, TailHints};
use crate::writer::Writer;

/// How often a read-only open lists the directories again when it sees a gap (a writer creating
/// a segment between two listings).
const LIST_ATTEMPTS: usize = 3;

pub(crate) fn open<P: AsRef<Path>>(paths: &[P], mut opts: Options) -> Result<Arc<Shared>> {
    opts.validate()?;
    let given = check_paths(paths)?;
    let read_only = if opts.read_only_paths.is_empty() {
        Vec::new()
    } else {
        check_paths(&opts.read_only_paths)?
    };
    if let Some(d) = read_only.iter().find(|d| given.contains(d)) {
        return Err(Error::invalid(format!(
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

/// Creates a writable directory and takes its lock; an I/O failure takes it offline instead when
/// another writable directory remains.
fn prepare_writable(paths: Vec<PathBuf>) -> Result<(Vec<Dir>, StoreLock)> {
    let mut lock = StoreLock::default();
    let mut dirs = Vec::with_capacity(paths.len());
    let mut first_error = None;
    for path in paths {
        let ready = create_dir_durably(&path).and_then(|()| lock.add(&path));
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
    warn_shared_devices(&dirs);
    Ok((dirs, lock))
}

fn warn_shared_devices(dirs: &[Dir]) {
    for (i, a) in dirs.iter().enumerate() {
        if let Some(b) = dirs[..i].iter().find(|b| b.dev.is_some() && b.dev == a.dev) {
            log::warn!(
                "directories {} and {} are on the same filesystem; its free space counts once",
                b.path.display(),
                a.path.display()
            );
        }
    }
}

pub(crate) fn paths_of(dirs: &[Dir]) -> Vec<PathBuf> {
    dirs.iter().map(|d| d.path.clone()).collect()
}

fn open_writer(
    writable: Vec<PathBuf>,
    read_only: Vec<PathBuf>,
    opts: Options,
) -> Result<Arc<Shared>> {
    let configured_writable = to_strings(&writable);
    let (mut dirs, lock) = prepare_writable(writable)?;
    for path in &read_only {
        if !path.is_dir() {
            return Err(Error::io(
                "opening read-only directory (it must exist)",
                path,
                std::io::Error::from_raw_os_error(libc::ENOENT),
            ));
        }
    }
    dirs.extend(read_only.iter().map(|p| Dir::new(p.clone(), true)));
    let all = paths_of(&dirs);
    let online: Vec<bool> = dirs
        .iter()
        .map(|d| d.state().0 != DirState::Offline)
        .collect();
    // As read, to know at the end whether this open changed anything the file says.
    let on_disk = read_newest(&all)?;
    let mut ckpt = on_disk.clone();
    if let Some(c) = ckpt.as_mut() {
        crate::mover::finish_interrupted_move(c, &all)?;
    }
    let sizes = known_sizes(ckpt.as_ref(), opts.segment_size);
    let mut listing = layout::list(&all, &online, None, &sizes)?;
    for tmp in &listing.temps {
        log::warn!(
            "removing {} left by an interrupted segment creation",
            tmp.display()
        );
        remove_durably(tmp)?;
    }
    for dup in &listing.empty_duplicates {
        log::warn!("removing never-written duplicate segment {}", dup.display());
        remove_durably(dup)?;
    }
    let lost = opts.accept_lost.clone();
    if let Some(c) = &ckpt {
        let known: Vec<PathBuf> = all.iter().chain(&lost).cloned().collect();
        check_left_out_dirs(c, &known, &listing.segments)?;
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
    listing.segments = with_holes(listing.segments, &lost, ckpt.as_ref(), opts.segment_size);
    layout::check(&listing.segments, &sizes, false)?;
    check_against_checkpoint(&listing.segments, ckpt.as_ref(), &all)?;

    let list = segment_list(listing.segments, &[], opts.segment_size);
    let hint = ckpt
        .as_ref()
        .and_then(|c| tail_hint::read(&all, &c.store_id));
    let (list, end, last_ts) = recover(list, ckpt.as_ref(), hint.as_ref(), true)?;
    let list = writable_last(list);

    let ckpt_flushed = ckpt.as_ref().map(|c| {
        if c.clean {
            c.max_offset
        } else {
            c.flushed_offset
        }
    });
    let mut checkpoint = match ckpt {
        Some(c) => c,
        None => Checkpoint::new(Vec::new(), Vec::new(), opts.segment_size),
    };
    checkpoint.dirs = configured_writable;
    checkpoint.read_only_dirs = to_strings(&read_only);
    let mut sizes: BTreeSet<u64> = checkpoint.segment_sizes.iter().copied().collect();
    sizes.insert(opts.segment_size);
    sizes.extend(list.as_slice().iter().map(|s| s.size()));
    checkpoint.segment_sizes = sizes.into_iter().collect();
    let hint_dirs: Vec<(usize, &Path)> = dirs
        .iter()
        .enumerate()
        .filter(|(_, d)| d.keeps_metadata())
        .map(|(i, d)| (i, d.path.as_path()))
        .collect();
    let tail = TailHints::open(&checkpoint.store_id, &hint_dirs, &all, opts.file_mode);

    let min = list.first().map_or(end, |s| s.start());
    // Records recovery kept past the old flushed offset may still be only in the page cache.
    let flushed = match ckpt_flushed {
        Some(f) => f.clamp(min, end),
        None => min,
    };
    let sync = opts.flush == FlushMode::Sync;
    let writer = match list.last() {
        Some(last) => Writer::new(
            Some((Arc::clone(last), last.map()?)),
            end - last.start(),
            end,
            sync,
            tail,
        ),
        None => Writer::new(None, 0, end, sync, tail),
    };
    let shared = Shared::new(SharedParts {
        opts,
        dirs,
        list,
        end,
        min,
        flushed,
        last_ts,
        writer: Some(writer),
        checkpoint,
        lock: Some(lock),
    })?;
    // Sync what recovery kept (in `FlushMode::None` that is left to the OS, as for appends), then
    // mark the store not clean until `close` says otherwise.
    if shared.opts.flush != FlushMode::None {
        shared.flush_data()?;
    }
    shared.refresh_checkpoint(on_disk.as_ref())?;
    shared.record_tail_hint();
    shared.start_threads()?;
    Ok(shared)
}

fn open_reader(given: Vec<PathBuf>, read_only: Vec<PathBuf>, opts: Options) -> Result<Arc<Shared>> {
    for d in given.iter().chain(&read_only) {
        if !d.is_dir() {
            return Err(Error::io(
                "opening read-only (the directory must exist)",
                d,
                std::io::Error::from_raw_os_error(libc::ENOENT),
            ));
        }
    }
    let mut paths = given.clone();
    paths.extend(read_only.iter().cloned());
    let ckpt = read_newest(&paths)?;
    // Any one directory of the store finds the others through the checkpoint.
    let mut dirs: Vec<Dir> = paths.iter().map(|p| Dir::new(p.clone(), false)).collect();
    if let Some(c) = &ckpt {
        for (d, ro) in c
            .dirs
            .iter()
            .map(|d| (d, false))
            .chain(c.read_only_dirs.iter().map(|d| (d, true)))
        {
            let d = PathBuf::from(d);
            if !paths.contains(&d) {
                paths.push(d.clone());
                dirs.push(Dir::new(d, ro));
            }
        }
    }
    let sizes = known_sizes(ckpt.as_ref(), opts.segment_size);
    let online = vec![true; paths.len()];
    let min_recorded = ckpt.as_ref().map_or(0, |c| c.min_offset);
    // During a move both copies exist; the source is the one in use until the move completes.
    let prefer = move_preference(ckpt.as_ref(), &paths);
    let mut segments = Vec::new();
    for attempt in 1..=LIST_ATTEMPTS {
        let mut listing = layout::list(&paths, &online, prefer, &sizes)?;
        listing.segments.retain(|f| f.end() > min_recorded);
        listing.segments = with_holes(
            listing.segments,
            &opts.accept_lost,
            ckpt.as_ref(),
            opts.segment_size,
        );
        let last = attempt == LIST_ATTEMPTS;
        match layout::check(&listing.segments, &sizes, last) {
            Ok(n) => {
                listing.segments.truncate(n);
                segments = listing.segments;
                break;
            }
            Err(Error::Corruption { .. }) if !last => continue,
            Err(e) => return Err(e),
        }
    }
    check_against_checkpoint(&segments, ckpt.as_ref(), &paths)?;
    let list = segment_list(segments, &[], opts.segment_size);
    let hint = ckpt
        .as_ref()
        .and_then(|c| tail_hint::read(&paths, &c.store_id));
    let (list, end, last_ts) = recover(list, ckpt.as_ref(), hint.as_ref(), false)?;
    let min = list.first().map_or(end, |s| s.start());
    let flushed = ckpt.as_ref().map_or(0, |c| c.flushed_offset.min(end));
    let checkpoint = ckpt.unwrap_or_else(|| Checkpoint::new(Vec::new(), Vec::new(), 0));
    Shared::new(SharedParts {
        opts,
        dirs,
        list,
        end,
        min,
        flushed,
        last_ts,
        writer: None,
        checkpoint,
        lock: None,
    })
}

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

/// A directory the store's metadata lists but the caller left out must not hold segments the log
/// still needs and the given directories lack (a store copied or mounted elsewhere, with the old
/// copy still around, needs nothing from the old one).
fn check_left_out_dirs(c: &Checkpoint, given: &[PathBuf], have: &[Found]) -> Result<()> {
    let left_out: Vec<PathBuf> = c
        .all_dirs()
        .map(PathBuf::from)
        .filter(|d| !given.contains(d))
        .collect();
    if left_out.is_empty() {
        return Ok(());
    }
    let listing = layout::list(&left_out, &vec![true; left_out.len()], None, &[])?;
    let needed: Vec<String> = listing
        .segments
        .iter()
        .filter(|f| f.end() > c.min_offset && !have.iter().any(|h| h.start == f.start))
        .map(|f| f.path.display().to_string())
        .collect();
    if needed.is_empty() {
        return Ok(());
    }
    Err(Error::corruption(
        None,
        None,
        format!(
            "directories of this store were left out but hold segments the log needs: {}; add \
             them to paths",
            needed.join(", ")
        ),
    ))
}

/// The segments must cover what the metadata says exists: from `min_offset` to the flushed
/// offset (or the clean end).
fn check_against_checkpoint(
    segments: &[Found],
    ckpt: Option<&Checkpoint>,
    dirs: &[PathBuf],
) -> Result<()> {
    let Some(c) = ckpt else { return Ok(()) };
    let must_reach = if c.clean {
        c.max_offset.max(c.flushed_offset)
    } else {
        c.flushed_offset
    };
    let missing = |what: String| {
        let known: Vec<&String> = c.all_dirs().collect();
        Error::corruption(
            None,
            None,
            format!(
                "{what}; the store's metadata lists directories {known:?}, the open searched {:?} \
                 (a directory left out?)",
                dirs
            ),
        )
    };
    match (segments.first(), segments.last()) {
        (None, _) | (_, None) if must_reach > c.min_offset => Err(missing(format!(
            "no segment files found, but the log holds offsets [{}, {must_reach})",
            c.min_offset
        ))),
        (Some(first), _) if first.start > c.min_offset => Err(missing(format!(
            "the head of the log is missing: offsets [{}, {}) are in no segment",
            c.min_offset, first.start
        ))),
        (_, Some(last)) if last.end() < must_reach => Err(missing(format!(
            "the tail of the log is missing: offsets [{}, {must_reach}) are in no segment",
            last.end()
        ))),
        _ => Ok(()),
    }
}

/// Builds the segment list, reusing `existing` segments (and their maps) where they match.
/// Sealed segments are mapped read-only (their directory may be on a read-only filesystem).
pub(crate) fn segment_list(
    found: Vec<Found>,
    existing: &[Arc<Segment>],
    segment_size: u64,
) -> SegmentList {
    let segs = found
        .into_iter()
        .map(|f| {
            // `existing` is a segment list: sorted by start.
            let reuse = existing
                .binary_search_by_key(&f.start, |s| s.start())
                .ok()
                .map(|i| &existing[i])
                .filter(|s| s.path() == f.path);
            match reuse {
                Some(s) => Arc::clone(s),
                None if f.lost => Arc::new(Segment::hole(f.start, f.len, f.path)),
                None => Arc::new(Segment::new(f.start, f.len, f.path, f.dir, false)),
            }
        })
        .collect();
    SegmentList::new(segs, segment_size)
}

/// The writer's last segment, mapped for writing.
fn writable_last(list: SegmentList) -> SegmentList {
    let Some(last) = list.last().filter(|l| !l.is_lost()) else {
        return list;
    };
    let seg = Segment::new(
        last.start(),
        last.size(),
        last.path().to_path_buf(),
        last.dir(),
        true,
    );
    seg.set_written(last.written());
    list.truncated_before(last.start())
        .with_pushed(Arc::new(seg))
}

/// With `accept_lost`, the offsets lost directories held become holes instead of errors.
fn with_holes(
    found: Vec<Found>,
    lost: &[PathBuf],
    ckpt: Option<&Checkpoint>,
    segment_size: u64,
) -> Vec<Found> {
    if lost.is_empty() {
        return found;
    }
    let (min, must_reach) = ckpt.map_or((0, 0), |c| {
        let reach = if c.clean {
            c.max_offset.max(c.flushed_offset)
        } else {
            c.flushed_offset
        };
        (c.min_offset, reach)
    });
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

/// The copy to keep of a segment being moved: the source, as the newest checkpoint says.
pub(crate) fn move_preference(
    ckpt: Option<&Checkpoint>,
    paths: &[PathBuf],
) -> Option<(u64, usize)> {
    let m = ckpt?.moving.as_ref()?;
    let from = PathBuf::from(&m.from);
    paths.iter().position(|p| *p == from).map(|i| (m.start, i))
}
