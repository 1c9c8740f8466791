//! The store's directories an open lacks: recorded ones a writer was not given (each must hold
//! nothing the log needs, or be named as lost), directories `accept_lost` names (each must be one
//! the store lacks, and is remembered while its holes last), and the configuration error that
//! names the ones not found, with the fix.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::open::layout::{self, Found};
use crate::open::locate::{still_there, LeftOut, Place, Store};
use crate::storage::checkpoint::{Checkpoint, DirRecord};

/// The recorded directories a writer's open was not given. One still at its recorded path (its
/// identity says so), or where the copy or moved store the open was given has it, must hold no
/// segment the log needs: it then leaves the store (the error names every one that holds some,
/// by the path this open would give). One not found is returned, unless `accept_lost` names it:
/// the log must do without it.
pub(crate) fn check_left_out(
    c: &Checkpoint,
    left_out: &[LeftOut],
    lost: &[PathBuf],
    have: &[Found],
) -> Result<Vec<DirRecord>> {
    let mut missing = Vec::new();
    let mut needed_in = Vec::new();
    for lo in left_out {
        let rec = &lo.record;
        if lost.contains(&PathBuf::from(&rec.path)) {
            continue;
        }
        if !lo.is_there(&c.store_id) {
            // Named where this open would find it: the copy's path for a copy.
            missing.push(DirRecord {
                path: lo.path().to_string_lossy().into_owned(),
                ..rec.clone()
            });
            continue;
        }
        let path = lo.path();
        let listing = layout::list(std::slice::from_ref(&path), &[true], None, &[])?;
        let needed = listing
            .segments
            .iter()
            .filter(|f| f.end() > c.min_offset && !have.iter().any(|h| h.start == f.start))
            .count();
        if needed > 0 {
            let s = if needed == 1 { "" } else { "s" };
            needed_in.push(format!("{} ({needed} segment{s})", path.display()));
            continue;
        }
        log::info!(
            "directory {} leaves the store: it was not given and holds no segment the log needs",
            path.display()
        );
    }
    // One error for all: the user fixes the paths once.
    let also = match missing.len() {
        0 => String::new(),
        _ => format!(
            "; also not found at their recorded paths: {} (give them too, or name them in \
             accept_lost if lost)",
            missing
                .iter()
                .map(|r| r.path.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    match needed_in.len() {
        0 => Ok(missing),
        1 => Err(Error::config(format!(
            "directory {} of this store was left out but holds segments the log needs; add it \
             to paths{also}",
            needed_in[0]
        ))),
        _ => Err(Error::config(format!(
            "directories {} of this store were left out but hold segments the log needs; add \
             them to paths{also}",
            needed_in.join(", ")
        ))),
    }
}

/// Each directory `accept_lost` names must be one the store lacks: a recorded directory left out
/// and not at its recorded path, or one accepted as lost before. A typo, or a directory that is
/// there, would make holes of offsets whose files exist.
pub(crate) fn check_accept_lost(
    c: &Checkpoint,
    store: &Store,
    accept_lost: &[PathBuf],
) -> Result<()> {
    for p in accept_lost {
        let named = |r: &DirRecord| Path::new(&r.path) == p;
        if c.lost_dirs.iter().any(named) {
            continue;
        }
        let left_out = store.left_out.iter();
        match left_out
            .clone()
            .find(|lo| matches!(&lo.place, Place::NotInCopy(Some(at)) if at == p))
            .or_else(|| left_out.clone().find(|lo| named(&lo.record)))
        {
            Some(lo)
                if matches!(lo.place, Place::NotInCopy(Some(_)))
                    && named(&lo.record)
                    && still_there(&lo.record, &c.store_id) =>
            {
                return Err(Error::config(format!(
                    "accept_lost names {}, the original's directory (still there), but this \
                     open is given a copy, which lacks it: name it by the copy's path, {}",
                    p.display(),
                    lo.path().display()
                )));
            }
            Some(lo) if lo.is_there(&c.store_id) => {
                let at = lo.path();
                let it = match at == *p {
                    true => "it".to_string(),
                    false => at.display().to_string(),
                };
                return Err(Error::config(format!(
                    "accept_lost names {}, but that directory is there: give {it} in paths",
                    p.display()
                )));
            }
            Some(_) => {}
            None => {
                return Err(Error::config(format!(
                    "accept_lost names {}, which is not a directory this store lacks; name \
                     the lost directory by the path it had (as the error for it said)",
                    p.display()
                )))
            }
        }
    }
    Ok(())
}

/// The records of the directories accepted as lost, for the metadata.
pub(crate) fn lost_records(
    lost: &[PathBuf],
    c: Option<&Checkpoint>,
    store: &Store,
) -> Vec<DirRecord> {
    let known = store
        .left_out
        .iter()
        .map(|lo| &lo.record)
        .chain(c.iter().flat_map(|c| &c.lost_dirs));
    let known: Vec<&DirRecord> = known.collect();
    lost.iter()
        .map(|p| {
            let rec = known.iter().find(|r| Path::new(&r.path) == p);
            rec.map_or_else(
                || DirRecord {
                    id: None,
                    path: p.to_string_lossy().into_owned(),
                },
                |r| (*r).clone(),
            )
        })
        .collect()
}

/// `e`, a listing that does not add up, as the configuration error it is when directories of the
/// store were not found: it names them and the fix.
pub(crate) fn missing_dirs_error(missing: &[DirRecord], e: Error) -> Error {
    if missing.is_empty() || !matches!(e, Error::Corruption { .. } | Error::Configuration(_)) {
        return e;
    }
    let names: Vec<&str> = missing.iter().map(|r| r.path.as_str()).collect();
    let why = match &e {
        // "the log needs offsets [a, b)", from "gap: offsets [a, b) are in no segment (file)".
        Error::Corruption { reason, .. } => match reason.find("offsets [") {
            Some(at) => {
                let range = &reason[at + "offsets ".len()..];
                let range = &range[..range.find(')').map_or(range.len(), |i| i + 1)];
                format!("the log needs offsets {range}")
            }
            None => reason
                .split([';', '('])
                .next()
                .unwrap_or(reason)
                .to_string(),
        },
        Error::Configuration(why) => why.clone(),
        _ => String::new(),
    };
    let why = why.trim_end();
    let (dirs, its) = match missing.len() {
        1 => ("directory", "its path"),
        _ => ("directories", "their paths"),
    };
    Error::config(format!(
        "{dirs} {} not found: {why}. Give {its} in paths, or accept_lost={names:?} if lost",
        names.join(", ")
    ))
}
