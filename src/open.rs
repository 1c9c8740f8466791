//! Opening a store: argument checks, the lock, loading segments from every directory, checks
//! against the checkpoint, crash recovery; and `refresh` for read-only followers.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;

use crate::checkpoint::{read_newest, Checkpoint};
use crate::error::{Error, IoContext, Result};
use crate::flusher::Flusher;
use crate::fs::remove_durably;
use crate::layout::{self, Found, Listing};
use crate::lock::{fork_generation, StoreLock};
use crate::log::{locked, Shared};
use crate::options::{FlushMode, Options};
use crate::recovery::{cut, find_end};
use crate::segment::Segment;
use crate::segments::SegmentList;
use crate::writer::Writer;

/// How often a read-only open lists the directories again when it sees a gap (a writer creating
/// a segment between two listings).
const LIST_ATTEMPTS: usize = 3;

/// Checks paths without touching the disk: non-empty, UTF-8, no duplicates, no regular files.
fn check_paths<P: AsRef<Path>>(paths: &[P]) -> Result<Vec<PathBuf>> {
    if paths.is_empty() {
        return Err(Error::invalid(
            "paths is empty: give at least one directory (a path, or several)",
        ));
    }
    let mut out: Vec<PathBuf> = Vec::with_capacity(paths.len());
    for p in paths {
        let p = p.as_ref();
        if p.as_os_str().is_empty() {
            return Err(Error::invalid("paths contains an empty path"));
        }
        if p.to_str().is_none() {
            return Err(Error::invalid(format!(
                "path {} is not valid UTF-8",
                p.display()
            )));
        }
        let abs = normalize(&std::path::absolute(p).ctx("resolving", p)?);
        if abs.exists() && !abs.is_dir() {
            return Err(Error::invalid(format!(
                "path {} exists and is not a directory; paths must be directories",
                abs.display()
            )));
        }
        let same = |o: &PathBuf| o == &abs || same_dir(o, &abs);
        if let Some(other) = out.iter().find(|o| same(o)) {
            return Err(Error::invalid(format!(
                "directory {} is given twice (as {} and {}); give each directory once",
                abs.display(),
                other.display(),
                p.display()
            )));
        }
        out.push(abs);
    }
    Ok(out)
}

/// `a/./b/../c` -> `a/c`, without touching the disk.
fn normalize(p: &Path) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// Two existing paths that resolve to one directory (through symlinks).
fn same_dir(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

fn to_strings(dirs: &[PathBuf]) -> Vec<String> {
    dirs.iter()
        .map(|d| d.to_string_lossy().into_owned())
        .collect()
}

pub(crate) fn open<P: AsRef<Path>>(paths: &[P], opts: Options) -> Result<Arc<Shared>> {
    opts.validate()?;
    let given = check_paths(paths)?;
    if opts.read_only {
        open_reader(given, opts)
    } else {
        open_writer(given, opts)
    }
}

fn open_writer(dirs: Vec<PathBuf>, opts: Options) -> Result<Arc<Shared>> {
    for d in &dirs {
        std::fs::create_dir_all(d).ctx("creating directory", d)?;
    }
    let lock = StoreLock::acquire(&dirs)?;
    let ckpt = read_newest(&dirs)?;
    let listing = layout::list(&dirs)?;
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
    if let Some(c) = &ckpt {
        check_left_out_dirs(c, &dirs)?;
    }
    let sizes = known_sizes(ckpt.as_ref(), opts.segment_size);
    layout::check(&listing.segments, &sizes, false)?;
    check_against_checkpoint(&listing.segments, ckpt.as_ref(), &dirs)?;

    let list = segment_list(&listing.segments, &[], opts.segment_size, true);
    let (list, end, last_ts) = recover(list, ckpt.as_ref(), true)?;

    let ckpt_flushed = ckpt.as_ref().map(|c| {
        if c.clean {
            c.max_offset
        } else {
            c.flushed_offset
        }
    });
    let mut checkpoint = match ckpt {
        Some(mut c) => {
            c.dirs = to_strings(&dirs);
            c.read_only_dirs.clear();
            c
        }
        None => Checkpoint::new(to_strings(&dirs), Vec::new(), opts.segment_size),
    };
    let mut sizes: BTreeSet<u64> = checkpoint.segment_sizes.iter().copied().collect();
    sizes.insert(opts.segment_size);
    sizes.extend(list.as_slice().iter().map(|s| s.size()));
    checkpoint.segment_sizes = sizes.into_iter().collect();

    let min = list.first().map_or(end, |s| s.start());
    // Records recovery kept past the old flushed offset may still be only in the page cache.
    let flushed = match ckpt_flushed {
        Some(f) => f.clamp(min, end),
        None => min,
    };
    let writer = match list.last() {
        Some(last) => Writer {
            active: Some((Arc::clone(last), last.map()?)),
            pos: end - last.start(),
            next_start: end,
        },
        None => Writer {
            active: None,
            pos: 0,
            next_start: end,
        },
    };
    let writable = (0..dirs.len()).collect();
    let shared = Arc::new(Shared {
        opts,
        dirs,
        writable,
        segments: ArcSwap::from_pointee(list),
        max_offset: AtomicU64::new(end),
        min_offset: AtomicU64::new(min),
        flushed_offset: AtomicU64::new(flushed),
        last_timestamp_ms: AtomicU64::new(last_ts),
        closed: AtomicBool::new(false),
        generation: fork_generation(),
        writer: Some(Mutex::new(writer)),
        poisoned: Mutex::new(None),
        flush_lock: Mutex::new(()),
        checkpoint: Mutex::new(checkpoint),
        refresh_lock: Mutex::new(()),
        lock: Mutex::new(Some(lock)),
        flusher: Mutex::new(None),
    });
    // Sync what recovery kept, then mark the store not clean until `close` says otherwise.
    shared.flush_data()?;
    shared.write_checkpoint(false)?;
    if shared.opts.flush != FlushMode::None {
        *locked(&shared.flusher) = Some(Flusher::start(&shared)?);
    }
    Ok(shared)
}

fn open_reader(given: Vec<PathBuf>, opts: Options) -> Result<Arc<Shared>> {
    for d in &given {
        if !d.is_dir() {
            return Err(Error::io(
                "opening read-only (the directory must exist)",
                d,
                std::io::Error::from_raw_os_error(libc::ENOENT),
            ));
        }
    }
    let ckpt = read_newest(&given)?;
    // Any one directory of the store finds the others through the checkpoint.
    let mut dirs = given.clone();
    if let Some(c) = &ckpt {
        for d in c.all_dirs() {
            let d = PathBuf::from(d);
            if !dirs.contains(&d) {
                dirs.push(d);
            }
        }
    }
    let sizes = known_sizes(ckpt.as_ref(), opts.segment_size);
    let mut segments = Vec::new();
    for attempt in 1..=LIST_ATTEMPTS {
        let listing = layout::list(&dirs)?;
        let last = attempt == LIST_ATTEMPTS;
        match layout::check(&listing.segments, &sizes, last) {
            Ok(n) => {
                segments = listing.segments[..n].to_vec();
                break;
            }
            Err(Error::Corruption { .. }) if !last => continue,
            Err(e) => return Err(e),
        }
    }
    check_against_checkpoint(&segments, ckpt.as_ref(), &dirs)?;
    let list = segment_list(&segments, &[], opts.segment_size, false);
    let (list, end, last_ts) = recover(list, ckpt.as_ref(), false)?;
    let min = list.first().map_or(end, |s| s.start());
    let flushed = ckpt.as_ref().map_or(0, |c| c.flushed_offset.min(end));
    let checkpoint = ckpt.unwrap_or_else(|| Checkpoint::new(Vec::new(), Vec::new(), 0));
    Ok(Arc::new(Shared {
        opts,
        dirs,
        writable: Vec::new(),
        segments: ArcSwap::from_pointee(list),
        max_offset: AtomicU64::new(end),
        min_offset: AtomicU64::new(min),
        flushed_offset: AtomicU64::new(flushed),
        last_timestamp_ms: AtomicU64::new(last_ts),
        closed: AtomicBool::new(false),
        generation: fork_generation(),
        writer: None,
        poisoned: Mutex::new(None),
        flush_lock: Mutex::new(()),
        checkpoint: Mutex::new(checkpoint),
        refresh_lock: Mutex::new(()),
        lock: Mutex::new(None),
        flusher: Mutex::new(None),
    }))
}

fn known_sizes(ckpt: Option<&Checkpoint>, configured: u64) -> Vec<u64> {
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
/// still needs.
fn check_left_out_dirs(c: &Checkpoint, given: &[PathBuf]) -> Result<()> {
    let left_out: Vec<PathBuf> = c
        .all_dirs()
        .map(PathBuf::from)
        .filter(|d| !given.contains(d))
        .collect();
    if left_out.is_empty() {
        return Ok(());
    }
    let listing = layout::list(&left_out)?;
    let needed: Vec<String> = listing
        .segments
        .iter()
        .filter(|f| f.end() > c.min_offset)
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
fn segment_list(
    found: &[Found],
    existing: &[Arc<Segment>],
    segment_size: u64,
    writable: bool,
) -> SegmentList {
    let segs = found
        .iter()
        .map(|f| {
            existing
                .iter()
                .find(|s| s.start() == f.start && s.path() == f.path)
                .cloned()
                .unwrap_or_else(|| Arc::new(Segment::new(f.start, f.len, f.path.clone(), writable)))
        })
        .collect();
    SegmentList::new(segs, segment_size)
}

/// Finds the end of the log: trusted from a clean checkpoint, else a scan of the tail from the
/// flushed offset. A writer cuts what lies beyond. Returns the list, the end and the last
/// timestamp.
fn recover(
    list: SegmentList,
    ckpt: Option<&Checkpoint>,
    writer: bool,
) -> Result<(SegmentList, u64, u64)> {
    let ckpt_ts = ckpt.map_or(0, |c| c.max_timestamp_ms);
    if let Some(c) = ckpt.filter(|c| c.clean) {
        let end = c.max_offset;
        for s in list.as_slice() {
            s.set_written(end.clamp(s.start(), s.end()) - s.start());
        }
        let list = if writer {
            cut_empty_tail(list, end)?
        } else {
            list
        };
        return Ok((list, end, ckpt_ts));
    }
    let Some(first) = list.first() else {
        return Ok((list, ckpt.map_or(0, |c| c.flushed_offset), ckpt_ts));
    };
    let from = ckpt.map_or(first.start(), |c| c.flushed_offset);
    let tail = find_end(&list, from, u32::MAX as usize)?;
    log::info!(
        "recovered the log end at {} (scanned from {from}: {})",
        tail.end,
        tail.stopped
    );
    let list = if writer {
        cut(&list, tail.end)?
    } else {
        list.truncated_before(tail.end + 1)
    };
    Ok((list, tail.end, ckpt_ts.max(tail.last_timestamp_ms)))
}

/// After a clean close the end is trusted; segments wholly past it can only be empty.
fn cut_empty_tail(list: SegmentList, end: u64) -> Result<SegmentList> {
    if list.last().is_some_and(|s| s.start() > end) {
        return cut(&list, end);
    }
    Ok(list)
}

/// Picks up records and segments a writer in another process appended since the last call.
pub(crate) fn refresh(shared: &Arc<Shared>) -> Result<u64> {
    let _guard = locked(&shared.refresh_lock);
    let current = shared.segments.load_full();
    let listing: Listing = layout::list(&shared.dirs)?;
    let sizes = known_sizes(None, shared.opts.segment_size);
    // Segments deleted from the head (a cleaner) leave; new ones join if contiguous.
    let n = layout::check(&listing.segments, &sizes, true)?;
    let list = segment_list(
        &listing.segments[..n],
        current.as_slice(),
        shared.opts.segment_size,
        false,
    );
    let max = shared.max_offset.load(Ordering::Acquire);
    let Some(first) = list.first() else {
        return Ok(max);
    };
    let from = max.max(first.start());
    let tail = find_end(&list, from, u32::MAX as usize)?;
    let list = list.truncated_before(tail.end + 1);
    shared.min_offset.store(first.start(), Ordering::Release);
    shared.segments.store(Arc::new(list));
    shared
        .last_timestamp_ms
        .fetch_max(tail.last_timestamp_ms, Ordering::Relaxed);
    shared.max_offset.store(tail.end, Ordering::Release);
    Ok(tail.end)
}
