//! Opening a store: the lock, loading segments from every directory, checks against the
//! checkpoint, holes of lost directories, then crash recovery.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::checkpoint::{read_newest, Checkpoint};
use crate::dirs::{Dir, DirState};
use crate::error::{Error, Result};
use crate::flusher::flush_data;
use crate::fs::remove_durably;
use crate::layout::{self, Found};
use crate::listing::{self, check_covers, known_sizes, with_holes};
use crate::lock::StoreLock;
use crate::mover::finish_interrupted_move;
use crate::options::Options;
use crate::paths::{absolute_overrides, check_paths, create_dir_durably, to_strings};
use crate::recovery::recover;
use crate::segment::Segment;
use crate::segments::SegmentList;
use crate::state::{Parts, State};
use crate::tail_hint::{self, TailHints};
use crate::writer::Writer;

/// Listings (with their tail scans) a read-only open takes while a writer changes the store.
const LIST_ATTEMPTS: usize = 8;

/// An open store: its state, and for a writer its writer and lock.
#[derive(Debug)]
pub(crate) struct Opened {
    pub state: Arc<State>,
    pub writer: Option<Writer>,
    pub lock: Option<StoreLock>,
}

pub(crate) fn open<P: AsRef<Path>>(paths: &[P], mut opts: Options) -> Result<Opened> {
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

fn paths_of(dirs: &[Dir]) -> Vec<PathBuf> {
    dirs.iter().map(|d| d.path.clone()).collect()
}

fn open_writer(writable: Vec<PathBuf>, read_only: Vec<PathBuf>, opts: Options) -> Result<Opened> {
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
        finish_interrupted_move(c)?;
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
    check_covers(&listing.segments, ckpt.as_ref(), 0, &all)?;

    let list = layout::to_list(listing.segments, &[], opts.segment_size);
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
    let sync = opts.flush.policy().each_append;
    let writer = match list.last() {
        Some(last) => Writer::new(
            sync,
            Some((Arc::clone(last), last.map()?)),
            end - last.start(),
            end,
            tail,
        ),
        None => Writer::new(sync, None, 0, end, tail),
    };
    let state = State::new(Parts {
        opts,
        dirs,
        read_only: false,
        list,
        end,
        min,
        flushed,
        last_ts,
        checkpoint,
    })?;
    // Sync what recovery kept (in `FlushMode::None` that is left to the OS, as for appends), then
    // mark the store not clean until `close` says otherwise.
    if state.opts.flush.policy().on_open {
        flush_data(&state)?;
    }
    state.refresh_checkpoint(on_disk.as_ref())?;
    writer.record_tail_hint(&state);
    Ok(Opened {
        state,
        writer: Some(writer),
        lock: Some(lock),
    })
}

fn open_reader(given: Vec<PathBuf>, read_only: Vec<PathBuf>, opts: Options) -> Result<Opened> {
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
    // Any one directory of the store finds the others through the checkpoint.
    let mut dirs: Vec<Dir> = paths.iter().map(|p| Dir::new(p.clone(), false)).collect();
    if let Some(c) = read_newest(&paths)? {
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
    let (ckpt, list, end, last_ts) = recovered_view(&paths, &opts)?;
    let min = list.first().map_or(end, |s| s.start());
    let flushed = ckpt.as_ref().map_or(0, |c| c.flushed_offset.min(end));
    let checkpoint = ckpt.unwrap_or_else(|| Checkpoint::new(Vec::new(), Vec::new(), 0));
    let state = State::new(Parts {
        opts,
        dirs,
        read_only: true,
        list,
        end,
        min,
        flushed,
        last_ts,
        checkpoint,
    })?;
    Ok(Opened {
        state,
        writer: None,
        lock: None,
    })
}

/// A consistent listing of the store (see [`listing`]) and the end of its records. A segment
/// that moves or goes between the listing and the scan of the tail makes it list again.
fn recovered_view(
    paths: &[PathBuf],
    opts: &Options,
) -> Result<(Option<Checkpoint>, SegmentList, u64, u64)> {
    let mut gone = None;
    for _ in 0..LIST_ATTEMPTS {
        let view = listing::consistent(paths, opts.segment_size, &opts.accept_lost, 0)?;
        let Some(view) = view else {
            break;
        };
        let list = layout::to_list(view.segments, &[], opts.segment_size);
        let hint = view
            .ckpt
            .as_ref()
            .and_then(|c| tail_hint::read(paths, &c.store_id));
        match recover(list, view.ckpt.as_ref(), hint.as_ref(), false) {
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
        .with_appended(vec![Arc::new(seg)])
}
