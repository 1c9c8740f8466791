//! Finding a store's segment files across its directories (and the remote tier's segments no
//! local file holds) and checking that they form one log.
//!
//! Fails closed: a gap, an overlap, a file of an unknown length or the same segment in two
//! directories is an error naming the files, never a guess (RocketMQ issue #8859).

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use std::sync::Arc;

use crate::error::{Error, IoContext, Result};
use crate::failpoint::fail_point;
use crate::options::SEGMENT_ALIGN;
use crate::storage::fs::{is_segment_like, is_temp_segment, parse_segment_name};
use crate::storage::record::FILLER_LEN;
use crate::storage::segment::{Segment, MAX_OFFSET};
use crate::storage::segments::SegmentList;
use crate::tier::{Entry, Tier};

/// A segment file found on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    /// Start offset, from the name.
    pub start: u64,
    /// File length.
    pub len: u64,
    /// Full path.
    pub path: PathBuf,
    /// Index of its directory in the list given to [`list`].
    pub dir: usize,
    /// A hole: offsets a lost directory held (`accept_lost`); `path` names that directory.
    pub lost: bool,
    /// Only in the remote tier: its manifest entry (`path` is the object's URL).
    pub remote: Option<Entry>,
}

impl Found {
    /// One past the last offset the file can hold.
    pub fn end(&self) -> u64 {
        self.start + self.len
    }
}

/// The segment files of a store, merged across directories and sorted.
#[derive(Debug, Default)]
pub struct Listing {
    /// One file per start offset, in offset order.
    pub segments: Vec<Found>,
    /// Leftovers of interrupted creations (`*.tmp`).
    pub temps: Vec<PathBuf>,
    /// Never-written duplicates of a segment that exists elsewhere with data.
    pub empty_duplicates: Vec<PathBuf>,
}

/// Lists segment files in `dirs` (skipping those not `online`). Other files are ignored. Missing
/// directories list as empty. `prefer` names the copy to keep of a segment that a move in progress
/// has in two directories: `(start, directory index)`.
///
/// With the store's segment `sizes` known, a file's length is taken from the names: the distance to
/// the next start when that is one of the sizes; only the others (the last file, and any that
/// would not add up) cost a `stat`. A file whose real length differs is refused when it is mapped
/// ([`Segment::map`](crate::storage::segment::Segment::map)), so a reopen lists a long log at the cost of
/// its directory entries.
pub fn list(
    dirs: &[PathBuf],
    online: &[bool],
    prefer: Option<(u64, usize)>,
    sizes: &[u64],
) -> Result<Listing> {
    let mut all = Vec::new();
    let mut listing = Listing::default();
    for (dir_idx, dir) in dirs.iter().enumerate() {
        if !online.get(dir_idx).copied().unwrap_or(true) {
            continue;
        }
        let listed = File::open(dir).and_then(|d| Ok(rustix::fs::Dir::read_from(&d)?));
        let entries = match listed {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(Error::io("listing", dir, e)),
        };
        // Names are borrowed from the listing buffer: only segment files allocate (their path).
        for entry in entries {
            let entry = entry.map_err(std::io::Error::from).ctx("listing", dir)?;
            let Ok(name) = entry.file_name().to_str() else {
                continue;
            };
            if is_temp_segment(name) {
                listing.temps.push(dir.join(name));
                continue;
            }
            let Some(start) = parse_segment_name(name) else {
                if is_segment_like(name) {
                    // Twenty digits past 2^64: a segment name the log cannot place.
                    return Err(beyond_limit(&dir.join(name), name.into()));
                }
                continue;
            };
            let path = dir.join(name);
            // The entry's type comes with the listing; a symlink or an unknown type is resolved
            // by `stat`.
            let regular = entry.file_type() == rustix::fs::FileType::RegularFile;
            if !regular && !std::fs::metadata(&path).is_ok_and(|m| m.is_file()) {
                continue;
            }
            all.push(Found {
                start,
                len: 0,
                path,
                dir: dir_idx,
                lost: false,
                remote: None,
            });
        }
        fail_point!("layout::dir_listed");
    }
    if let Some(f) = all.iter().find(|f| f.start >= MAX_OFFSET) {
        return Err(beyond_limit(&f.path, f.start.to_string()));
    }
    all.sort_unstable_by_key(|f| (f.start, f.dir));
    let mut all = all.into_iter().peekable();
    while let Some(first) = all.next() {
        let start = first.start;
        if all.peek().is_none_or(|next| next.start != start) {
            listing.segments.push(first);
            continue;
        }
        let mut group = vec![first];
        group.extend(std::iter::from_fn(|| all.next_if(|f| f.start == start)));
        if let Some(keep) = prefer
            .filter(|(start, _)| *start == group[0].start)
            .and_then(|(_, dir)| group.iter().find(|f| f.dir == dir))
        {
            listing.segments.push(keep.clone());
            continue;
        }
        fail_point!("layout::duplicates_found");
        let (mut with_data, mut empty) = (Vec::new(), Vec::new());
        for f in &group {
            match never_written(&f.path)? {
                Some(false) => with_data.push(f),
                Some(true) => empty.push(f),
                None => {} // deleted since the directory was read (a spare copy removed)
            }
        }
        let (keep, spare) = match (with_data.as_slice(), empty.as_slice()) {
            ([], []) => continue, // every copy deleted meanwhile
            // None written: keep the copy in the first directory; the others are spare.
            ([], [first, rest @ ..]) => (*first, rest),
            ([one], _) => (*one, empty.as_slice()),
            (many, _) => {
                let names: Vec<String> =
                    many.iter().map(|f| f.path.display().to_string()).collect();
                return Err(Error::corruption(
                    None,
                    Some(group[0].start),
                    format!(
                        "the same segment exists with data in several directories: {}",
                        names.join(", ")
                    ),
                ));
            }
        };
        listing.segments.push(keep.clone());
        listing
            .empty_duplicates
            .extend(spare.iter().map(|f| f.path.clone()));
    }
    set_lengths(&mut listing.segments, sizes)?;
    for f in &listing.segments {
        let end = u128::from(f.start) + u128::from(f.len);
        if end > u128::from(MAX_OFFSET) {
            return Err(beyond_limit(&f.path, end.to_string()));
        }
    }
    Ok(listing)
}

/// A segment file the log cannot place: it would hold offsets up to `end`, past [`MAX_OFFSET`].
fn beyond_limit(path: &Path, end: String) -> Error {
    Error::corruption(
        Some(path.to_path_buf()),
        None,
        format!(
            "the file's name places it at offsets up to {end}, past {MAX_OFFSET}, the largest \
             offset rmqlog supports (offsets are signed 64-bit integers in Arrow, Spark and Java); \
             the file is left untouched"
        ),
    )
}

/// Fills in each file's length: from the next file's start where that gives a known size, else
/// from `stat`. Files deleted since the listing (a cleaner at work) are dropped.
fn set_lengths(segments: &mut Vec<Found>, sizes: &[u64]) -> Result<()> {
    let mut gone = Vec::new();
    for i in 0..segments.len() {
        let by_name = segments
            .get(i + 1)
            .map(|next| next.start - segments[i].start)
            .filter(|len| sizes.contains(len));
        segments[i].len = match by_name {
            Some(len) => len,
            None => match std::fs::metadata(&segments[i].path) {
                Ok(m) => m.len(),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    gone.push(i);
                    0
                }
                Err(e) => return Err(Error::io("reading length of", &segments[i].path, e)),
            },
        };
    }
    for i in gone.into_iter().rev() {
        segments.remove(i);
    }
    Ok(())
}

/// A file whose first record word is zero was never published to: no record starts at its head.
/// `None`: the file is gone (deleted since the directory was read).
fn never_written(path: &Path) -> Result<Option<bool>> {
    let mut head = [0u8; FILLER_LEN];
    let mut f = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io("opening segment", path, e)),
    };
    let n = f.read(&mut head).ctx("reading segment", path)?;
    Ok(Some(head[..n].iter().all(|&b| b == 0)))
}

/// Fills the gaps in `segments` (and a missing head or tail up to `[min, must_reach)`) with holes
/// attributed to the lost directories (`accept_lost`). A missing tail is rounded up to whole
/// segments of `segment_size`, where the next segment will start.
pub fn fill_holes(
    segments: Vec<Found>,
    lost: &[PathBuf],
    min: u64,
    must_reach: u64,
    segment_size: u64,
) -> Vec<Found> {
    let Some(owner) = lost.first() else {
        return segments;
    };
    let hole = |start: u64, end: u64| Found {
        start,
        len: end - start,
        path: owner.clone(),
        dir: usize::MAX,
        lost: true,
        remote: None,
    };
    let mut out = Vec::with_capacity(segments.len() + 2);
    let mut at = segments.first().map_or(min, |f| f.start.min(min));
    for f in segments {
        if f.start > at {
            out.push(hole(at, f.start));
        }
        at = at.max(f.end());
        out.push(f);
    }
    if must_reach > at {
        let whole = (must_reach - at).div_ceil(segment_size) * segment_size;
        out.push(hole(at, at + whole));
    }
    out
}

/// Builds the segment list, reusing `existing` segments (and their maps) where they match.
/// Sealed segments are mapped read-only (their directory may be on a read-only filesystem).
/// Remote segments read through `tier`; a local segment its manifest lists knows its copy.
pub fn to_list(
    found: Vec<Found>,
    existing: &[Arc<Segment>],
    segment_size: u64,
    tier: Option<&Arc<Tier>>,
) -> SegmentList {
    let manifest = tier.map(|t| t.manifest());
    let segs = found
        .into_iter()
        .map(|f| {
            // `existing` is a segment list: sorted by start.
            let reuse = existing
                .binary_search_by_key(&f.start, |s| s.start())
                .ok()
                .map(|i| &existing[i])
                .filter(|s| s.path() == f.path && s.size() == f.len);
            let seg = match (reuse, f.remote, tier) {
                (Some(s), _, _) => Arc::clone(s),
                (None, _, _) if f.lost => Arc::new(Segment::hole(f.start, f.len, f.path)),
                (None, Some(e), Some(t)) => Arc::new(Segment::remote(e, Arc::clone(t))),
                (None, _, _) => Arc::new(Segment::new(f.start, f.len, f.path, f.dir, false)),
            };
            if let Some(e) = manifest.as_ref().and_then(|m| m.get(f.start)) {
                seg.set_remote_copy(e.clone());
            }
            seg
        })
        .collect();
    SegmentList::new(segs, segment_size)
}

/// Checks that `segments` are contiguous and of known sizes. Returns how many of them form the
/// log; with `stop_at_gap`, a gap ends the log there instead of failing (a reader racing a
/// writer that is creating a segment).
pub fn check(segments: &[Found], sizes: &[u64], stop_at_gap: bool) -> Result<usize> {
    for (i, f) in segments.iter().enumerate() {
        let known = f.lost
            || f.remote.is_some()
            || sizes.contains(&f.len)
            || (sizes.is_empty() && f.len >= SEGMENT_ALIGN && f.len % SEGMENT_ALIGN == 0);
        if !known {
            return Err(Error::corruption(
                Some(f.path.clone()),
                Some(f.start),
                format!(
                    "segment file has length {}; the store's segment sizes are {sizes:?} (a \
                     truncated or foreign file?)",
                    f.len
                ),
            ));
        }
        let Some(next) = segments.get(i + 1) else {
            break;
        };
        if f.end() == next.start {
            continue;
        }
        if stop_at_gap && f.end() < next.start {
            return Ok(i + 1);
        }
        let what = if f.end() < next.start {
            format!(
                "gap: offsets [{}, {}) are in no segment",
                f.end(),
                next.start
            )
        } else {
            format!(
                "overlap: it ends at {} but the next starts at {}",
                f.end(),
                next.start
            )
        };
        return Err(Error::corruption(
            Some(f.path.clone()),
            Some(f.start),
            format!("{what} ({})", next.path.display()),
        ));
    }
    Ok(segments.len())
}

/// `found` (a local listing, sorted) with the tier's segments from `min` on that no local file
/// holds.
pub(crate) fn with_remote(mut found: Vec<Found>, tier: &Tier, min: u64) -> Vec<Found> {
    let m = tier.manifest();
    for e in m.segments.iter().filter(|e| e.end() > min) {
        if found.iter().any(|f| f.start == e.start) {
            continue;
        }
        found.push(Found {
            start: e.start,
            len: e.size,
            path: PathBuf::from(tier.object_url(e.start)),
            dir: usize::MAX,
            lost: false,
            remote: Some(e.clone()),
        });
    }
    found.sort_by_key(|f| f.start);
    found
}

/// The segment list of a tier's manifest alone (reusing `existing` segments), and its end.
pub(crate) fn remote_view(
    tier: &Arc<Tier>,
    existing: &[Arc<Segment>],
    segment_size: u64,
) -> Result<(SegmentList, u64)> {
    let m = tier.manifest();
    let found = with_remote(Vec::new(), tier, m.min_offset);
    check(&found, &[], false)?;
    let list = to_list(found, existing, segment_size, Some(tier));
    let end = list
        .last()
        .map_or(m.min_offset, |s| s.start() + s.written());
    Ok((list, end))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::fs::segment_name;

    fn make(dir: &Path, start: u64, len: u64, data: bool) {
        let mut v = vec![0u8; len as usize];
        if data {
            v[0] = 1;
        }
        std::fs::write(dir.join(segment_name(start)), v).unwrap();
    }

    #[test]
    fn merges_directories_and_ignores_foreign_files() {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        make(a.path(), 0, 4096, true);
        make(b.path(), 4096, 4096, true);
        make(a.path(), 8192, 4096, false);
        std::fs::write(a.path().join("README"), b"hello").unwrap();
        std::fs::write(b.path().join("00000000000000012288.tmp"), b"").unwrap();
        let l = list(
            &[a.path().into(), b.path().into()],
            &[true, true],
            None,
            &[],
        )
        .unwrap();
        let starts: Vec<u64> = l.segments.iter().map(|f| f.start).collect();
        assert_eq!(starts, vec![0, 4096, 8192]);
        assert_eq!(l.temps.len(), 1);
        assert_eq!(check(&l.segments, &[4096], false).unwrap(), 3);
    }

    #[test]
    fn lengths_come_from_names_when_the_sizes_are_known() {
        let a = tempfile::tempdir().unwrap();
        make(a.path(), 0, 4096, true);
        make(a.path(), 4096, 1000, true); // truncated: its length is checked when mapped
        make(a.path(), 8192, 3000, true); // the last file: its length is read
        let dirs = [a.path().to_path_buf()];
        let lens = |sizes: &[u64]| -> Vec<u64> {
            let l = list(&dirs, &[true], None, sizes).unwrap();
            l.segments.iter().map(|f| f.len).collect()
        };
        assert_eq!(lens(&[4096]), vec![4096, 4096, 3000]);
        assert_eq!(lens(&[]), vec![4096, 1000, 3000]);
        // A distance that is no known size (a gap) is read from the file instead.
        std::fs::remove_file(a.path().join(segment_name(4096))).unwrap();
        assert_eq!(lens(&[4096]), vec![4096, 3000]);
    }

    #[test]
    fn duplicates_gaps_and_overlaps_fail_closed() {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let dirs = [a.path().to_path_buf(), b.path().to_path_buf()];
        make(a.path(), 0, 4096, true);
        make(b.path(), 0, 4096, false);
        let l = list(&dirs, &[true, true], None, &[]).unwrap();
        assert_eq!(l.segments[0].dir, 0);
        assert_eq!(l.empty_duplicates, vec![b.path().join(segment_name(0))]);

        make(b.path(), 0, 4096, true);
        let err = list(&dirs, &[true, true], None, &[])
            .unwrap_err()
            .to_string();
        assert!(err.contains("several directories"), "{err}");

        std::fs::remove_file(b.path().join(segment_name(0))).unwrap();
        make(b.path(), 8192, 4096, true);
        let l = list(&dirs, &[true, true], None, &[]).unwrap();
        let err = check(&l.segments, &[4096], false).unwrap_err().to_string();
        assert!(err.contains("gap"), "{err}");
        assert_eq!(check(&l.segments, &[4096], true).unwrap(), 1);

        make(a.path(), 4096, 8192, true);
        let l = list(&dirs, &[true, true], None, &[]).unwrap();
        let err = check(&l.segments, &[4096, 8192], false)
            .unwrap_err()
            .to_string();
        assert!(err.contains("overlap"), "{err}");
        let err = check(&l.segments, &[4096], false).unwrap_err().to_string();
        assert!(err.contains("length 8192"), "{err}");
    }
}
