//! Matching the directories an open was given to the directories of the store, by identity.
//!
//! The metadata records each directory by its id (`rmqlog.id`) and the path it last had. A
//! directory given to an open is the recorded one with the same id wherever it now is, so a store
//! copied (`cp -a`), restored or remounted elsewhere opens as itself and never reaches back to the
//! paths its original had. Refused before anything is changed: directories of different stores,
//! and the same directory twice (a copy given together with its original). Directories written by
//! rmqlog 0.1 have no identity: they match a record by path, or by the trailing components of
//! their path when the store was moved, and a writer's open then gives them one.

use std::path::{Component, Path, PathBuf};

use crate::error::{Error, Result};
use crate::storage::checkpoint::{read_newest, Checkpoint, DirRecord, CHECKPOINT_FILE};
use crate::storage::fs::parse_segment_name;
use crate::storage::identity::{self, Identity};

/// A directory given to an open.
#[derive(Debug)]
pub(crate) struct Given {
    pub path: PathBuf,
    pub read_only: bool,
    /// False for a directory that failed as the writer prepared it: it is not read.
    pub online: bool,
}

/// A directory of the open store.
#[derive(Debug, Clone)]
pub(crate) struct Located {
    pub path: PathBuf,
    pub read_only: bool,
    /// Its id: its identity's, or that of the record it matched by path; `None` for a directory
    /// new to the store, or known by path only.
    pub id: Option<String>,
    /// Whether `rmqlog.id` holds that id already (a writer writes it otherwise).
    pub has_identity: bool,
    /// The record it matched, if any.
    pub record: Option<DirRecord>,
}

/// The store the given directories make up.
#[derive(Debug)]
pub(crate) struct Store {
    /// The given directories, in order, then (for a reader) the others found.
    pub dirs: Vec<Located>,
    /// The newest metadata among them.
    pub ckpt: Option<Checkpoint>,
    /// Recorded directories not among `dirs`.
    pub left_out: Vec<LeftOut>,
    /// The store id the directories' identities carry, if any has one.
    pub store_id: Option<String>,
}

/// A recorded directory an open was not given.
#[derive(Debug, Clone)]
pub(crate) struct LeftOut {
    pub record: DirRecord,
    pub read_only: bool,
    pub place: Place,
}

/// Where a left-out directory is looked for.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Place {
    /// At its recorded path: the given directories are in their recorded places.
    Recorded,
    /// The given directories are a copy (or a move) of the store, and this is the copy's own
    /// directory; what is at the recorded path is the original's.
    Copy(PathBuf),
    /// The given directories are a copy that lacks this directory; where the copy would have
    /// it, when its recorded path lies under the copied prefix.
    NotInCopy(Option<PathBuf>),
}

impl LeftOut {
    /// Whether the directory is there for this open: the copy's, else at its recorded path.
    pub fn is_there(&self, store_id: &str) -> bool {
        match &self.place {
            Place::Recorded => still_there(&self.record, store_id),
            Place::Copy(_) => true,
            Place::NotInCopy(_) => false,
        }
    }

    /// The path this open would give it: the copy's (where the copy has it or would have it),
    /// else the recorded one.
    pub fn path(&self) -> PathBuf {
        match &self.place {
            Place::Copy(p) | Place::NotInCopy(Some(p)) => p.clone(),
            _ => PathBuf::from(&self.record.path),
        }
    }
}

impl Store {
    /// Where the directory recorded at `path` is for this open (the store may have moved).
    pub fn now_at(&self, path: &str) -> PathBuf {
        self.dirs
            .iter()
            .find(|d| d.record.as_ref().is_some_and(|r| r.path == path))
            .map_or_else(|| PathBuf::from(path), |d| d.path.clone())
    }

    /// `accept_lost` with each directory a copy lacks, named by the copy's path, named by its
    /// recorded path as the store knows it.
    pub fn lost_as_recorded(&self, accept_lost: &[PathBuf]) -> Vec<PathBuf> {
        accept_lost
            .iter()
            .map(|p| {
                let lacked = self
                    .left_out
                    .iter()
                    .find(|lo| matches!(&lo.place, Place::NotInCopy(Some(at)) if at == p));
                lacked.map_or_else(|| p.clone(), |lo| PathBuf::from(&lo.record.path))
            })
            .collect()
    }

    /// Where the recorded directory `rec` is now, if it is one of `dirs`.
    pub fn path_of(&self, rec: &DirRecord) -> Option<&Path> {
        self.dirs
            .iter()
            .find(|d| d.record.as_ref() == Some(rec))
            .map(|d| d.path.as_path())
    }
}

/// Matches `given` to the store's recorded directories. With `find_others` (a reader given some
/// of the directories), the others are looked for where the store now is if it moved, else at
/// their recorded paths, and taken only when their identity matches.
pub(crate) fn locate(given: &[Given], find_others: bool) -> Result<Store> {
    let ids: Vec<Option<Identity>> = given
        .iter()
        .map(|g| g.online.then(|| identity::read(&g.path)).flatten())
        .collect();
    check_one_store(given, &ids)?;
    check_no_copies(given, &ids)?;
    let online: Vec<PathBuf> = given
        .iter()
        .filter(|g| g.online)
        .map(|g| g.path.clone())
        .collect();
    let ckpt = read_newest(&online)?;
    if let (Some(c), Some((g, id))) = (&ckpt, given.iter().zip(&ids).find(|(_, i)| i.is_some())) {
        let id = id.as_ref().map_or("", |i| i.store_id.as_str());
        if id != c.store_id {
            let with_meta = online.iter().find(|p| p.join(CHECKPOINT_FILE).exists());
            let meta_dir = with_meta.map_or(g.path.as_path(), PathBuf::as_path);
            return Err(Error::different_stores(
                (&g.path, id),
                (meta_dir, &c.store_id),
            ));
        }
    }
    let records: Vec<(DirRecord, bool)> = ckpt
        .iter()
        .flat_map(|c| c.all_dirs().map(|(r, ro)| (r.clone(), ro)))
        .collect();
    let mut taken = vec![false; records.len()];
    let mut dirs = Vec::with_capacity(given.len());
    for (g, ident) in given.iter().zip(&ids) {
        let dir_id = ident.as_ref().map(|i| i.dir_id.as_str());
        let matched = (0..records.len()).find(|&i| !taken[i] && records[i].0.is(dir_id, &g.path));
        let matched = matched.or_else(|| moved_legacy(g, ident, &records, &taken, &ckpt));
        if let Some(i) = matched {
            taken[i] = true;
        } else if ident.is_none() && g.online {
            check_not_foreign(&g.path, &records)?;
        }
        let id = dir_id
            .map(str::to_string)
            .or_else(|| matched.and_then(|i| records[i].0.id.clone()));
        dirs.push(Located {
            path: g.path.clone(),
            read_only: g.read_only,
            id,
            has_identity: ident.is_some(),
            record: matched.map(|i| records[i].0.clone()),
        });
    }
    let store_id = ids.iter().flatten().next().map(|i| i.store_id.clone());
    check_not_mixed(&dirs, store_id.as_deref())?;
    let left_out: Vec<(DirRecord, bool)> = records
        .into_iter()
        .zip(taken)
        .filter(|(_, t)| !t)
        .map(|(r, _)| r)
        .collect();
    let mut left_out: Vec<LeftOut> = match &ckpt {
        None => Vec::new(),
        Some(c) => {
            let moves = relocations(&dirs);
            // Moved or copied elsewhere: what is at the recorded paths is the original's.
            let in_place = moves.is_empty();
            left_out
                .into_iter()
                .map(|(record, read_only)| LeftOut {
                    place: match in_place {
                        true => Place::Recorded,
                        false => find(&record, &c.store_id, &moves, false, &dirs)
                            .map_or_else(|| Place::NotInCopy(moved(&record, &moves)), Place::Copy),
                    },
                    record,
                    read_only,
                })
                .collect()
        }
    };
    if find_others {
        if let Some(c) = &ckpt {
            left_out.retain(|lo| {
                let found = match &lo.place {
                    Place::Recorded => find(&lo.record, &c.store_id, &[], true, &dirs),
                    Place::Copy(p) => Some(p.clone()),
                    Place::NotInCopy(_) => None,
                };
                let Some(path) = found.filter(|p| !dirs.iter().any(|d| d.path == *p)) else {
                    return true;
                };
                dirs.push(Located {
                    path,
                    read_only: lo.read_only,
                    id: lo.record.id.clone(),
                    has_identity: lo.record.id.is_some(),
                    record: Some(lo.record.clone()),
                });
                false
            });
        }
    }
    Ok(Store {
        dirs,
        ckpt,
        left_out,
        store_id,
    })
}

/// Whether `rec`, recorded at its path, is the directory at `path`: the same path, or the same
/// directory through symlinks.
fn in_its_place(rec: &DirRecord, path: &Path) -> bool {
    let old = Path::new(&rec.path);
    old == path || matches!((old.canonicalize(), path.canonicalize()), (Ok(a), Ok(b)) if a == b)
}

/// A directory of the store found away from its recorded path while that path still holds the
/// same directory (a copy), given with directories that are in their recorded places (the
/// original's): a copy mixed with its original.
fn check_not_mixed(dirs: &[Located], store_id: Option<&str>) -> Result<()> {
    let placed = |d: &&Located| d.record.as_ref().is_some_and(|r| in_its_place(r, &d.path));
    let Some(original) = dirs.iter().find(placed) else {
        return Ok(());
    };
    for d in dirs.iter().filter(|d| !placed(d)) {
        let (Some(rec), Some(store)) = (&d.record, store_id) else {
            continue;
        };
        let recorded = Path::new(&rec.path);
        if rec.id.is_some() && still_there(rec, store) {
            return Err(Error::config(format!(
                "{} is a copy of {} (still there), given with the original's other directories \
                 ({}); give the directories of one of them",
                d.path.display(),
                recorded.display(),
                original
                    .path
                    .file_name()
                    .unwrap_or_default()
                    .to_string_lossy()
            )));
        }
    }
    Ok(())
}

fn check_one_store(given: &[Given], ids: &[Option<Identity>]) -> Result<()> {
    let mut known = given
        .iter()
        .zip(ids)
        .filter_map(|(g, i)| Some((g, i.as_ref()?)));
    let Some((first, id)) = known.next() else {
        return Ok(());
    };
    match known.find(|(_, other)| other.store_id != id.store_id) {
        Some((g, other)) => Err(Error::different_stores(
            (&first.path, &id.store_id),
            (&g.path, &other.store_id),
        )),
        None => Ok(()),
    }
}

/// The same directory given twice: a copy and its original, or two copies.
fn check_no_copies(given: &[Given], ids: &[Option<Identity>]) -> Result<()> {
    for (i, (a, ida)) in given.iter().zip(ids).enumerate() {
        let Some(ida) = ida else { continue };
        let twin = given[i + 1..]
            .iter()
            .zip(&ids[i + 1..])
            .find(|(_, idb)| idb.as_ref().is_some_and(|b| b.dir_id == ida.dir_id));
        if let Some((b, _)) = twin {
            return Err(Error::config(format!(
                "{} and {} are the same directory of store {} (one is a copy of the other); \
                 give only one of them",
                a.path.display(),
                b.path.display(),
                ida.store_id
            )));
        }
    }
    Ok(())
}

/// A directory without identity, matched to no record: new to the store (empty), or foreign.
fn check_not_foreign(path: &Path, records: &[(DirRecord, bool)]) -> Result<()> {
    // Only a store whose directories all have ids can tell a foreign directory from its own.
    if records.is_empty() || records.iter().any(|(r, _)| r.id.is_none()) {
        return Ok(());
    }
    let holds_segments = std::fs::read_dir(path).is_ok_and(|entries| {
        entries.flatten().any(|e| {
            e.file_name()
                .to_str()
                .and_then(parse_segment_name)
                .is_some()
        })
    });
    if holds_segments {
        return Err(Error::config(format!(
            "{} holds segment files but is not a directory of this store (it has no {}); give \
             the store's directories, or an empty directory to add one",
            path.display(),
            identity::IDENTITY_FILE
        )));
    }
    Ok(())
}

/// A 0.1 directory moved elsewhere: it carries the store's metadata, and its path ends like the
/// one recorded directory (by path only) whose path ends most like it.
fn moved_legacy(
    g: &Given,
    ident: &Option<Identity>,
    records: &[(DirRecord, bool)],
    taken: &[bool],
    ckpt: &Option<Checkpoint>,
) -> Option<usize> {
    let c = ckpt.as_ref()?;
    if ident.is_some() || !g.online || !same_store_meta(&g.path, &c.store_id) {
        return None;
    }
    let scored: Vec<(usize, usize)> = (0..records.len())
        .filter(|&i| !taken[i] && records[i].0.id.is_none())
        .map(|i| (suffix_len(Path::new(&records[i].0.path), &g.path), i))
        .filter(|(n, _)| *n > 0)
        .collect();
    let best = scored.iter().map(|(n, _)| *n).max()?;
    match scored
        .iter()
        .filter(|(n, _)| *n == best)
        .collect::<Vec<_>>()[..]
    {
        [(_, i)] => Some(*i),
        _ => None,
    }
}

/// Whether the recorded directory `rec` of `store_id` is at its recorded path: its identity says
/// so (a directory known by path only: it exists there).
pub(crate) fn still_there(rec: &DirRecord, store_id: &str) -> bool {
    let path = Path::new(&rec.path);
    path.is_dir()
        && match (&rec.id, identity::read(path)) {
            (Some(id), Some(found)) => found.store_id == store_id && found.dir_id == *id,
            (None, None) => true,
            _ => false,
        }
}

fn same_store_meta(dir: &Path, store_id: &str) -> bool {
    read_newest(&[dir.to_path_buf()]).is_ok_and(|c| c.is_some_and(|c| c.store_id == store_id))
}

/// How many trailing path components `a` and `b` share.
fn suffix_len(a: &Path, b: &Path) -> usize {
    a.components()
        .rev()
        .zip(b.components().rev())
        .take_while(|(x, y)| x == y && matches!(x, Component::Normal(_)))
        .count()
}

/// Where the store moved: for each given directory found away from its recorded path, the prefix
/// it had and the prefix it has (`/old/store/a` now at `/new/copy/a`: `/old/store` to
/// `/new/copy`).
fn relocations(dirs: &[Located]) -> Vec<(PathBuf, PathBuf)> {
    let mut out = Vec::new();
    for d in dirs {
        let Some(rec) = &d.record else {
            continue;
        };
        if in_its_place(rec, &d.path) {
            continue;
        }
        let old = Path::new(&rec.path);
        let n = suffix_len(old, &d.path);
        let strip = |p: &Path| {
            let mut p = p.to_path_buf();
            for _ in 0..n {
                p.pop();
            }
            p
        };
        let pair = (strip(old), strip(&d.path));
        if !out.contains(&pair) {
            out.push(pair);
        }
    }
    out
}

/// Where the store, moved or copied, would have the recorded directory `rec`.
fn moved(rec: &DirRecord, moves: &[(PathBuf, PathBuf)]) -> Option<PathBuf> {
    let old = Path::new(&rec.path);
    moves
        .iter()
        .find_map(|(from, to)| Some(to.join(old.strip_prefix(from).ok()?)))
}

/// The recorded directory `rec` where the store now is, else where it was, if its identity there
/// says it is that directory.
fn find(
    rec: &DirRecord,
    store_id: &str,
    moves: &[(PathBuf, PathBuf)],
    in_place: bool,
    dirs: &[Located],
) -> Option<PathBuf> {
    let old = Path::new(&rec.path);
    let moved = moves
        .iter()
        .filter_map(|(from, to)| Some(to.join(old.strip_prefix(from).ok()?)));
    let recorded = in_place.then(|| old.to_path_buf());
    moved
        .chain(recorded)
        .filter(|p| p.is_dir() && !dirs.iter().any(|d| d.path == *p))
        .find(|p| match (&rec.id, identity::read(p)) {
            (Some(id), Some(found)) => found.store_id == store_id && found.dir_id == *id,
            // Known by path only (0.1): without metadata of another store (a read-only directory
            // has none of its own).
            (None, None) => !p.join(CHECKPOINT_FILE).exists() || same_store_meta(p, store_id),
            // Its rmqlog.id lost: known by its path, so only there.
            (Some(_), None) => {
                p == old && (!p.join(CHECKPOINT_FILE).exists() || same_store_meta(p, store_id))
            }
            _ => false,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trailing_components() {
        let n = |a: &str, b: &str| suffix_len(Path::new(a), Path::new(b));
        assert_eq!(n("/x/store/a", "/y/copy/a"), 1);
        assert_eq!(n("/x/store/a", "/y/store/a"), 2);
        assert_eq!(n("/x/store/a", "/y/store/b"), 0);
        assert_eq!(n("/a", "/a"), 1);
    }
}
