//! `rmqlog.consumers`: the committed positions of the store's named consumers, one file in every
//! writable directory of the store so that each survives the loss of the others.
//!
//! Layout: a header (magic, version), then one pair of slots per name (see [`super::slot`]).
//! A name keeps its pair index in every directory; the newest intact slot of a pair, across the
//! directories, is the name's state. A commit writes its slot to every directory, then syncs
//! each: a directory that missed commits (it was offline, or its file was lost) is stale, never
//! wrong, and is brought up to date by the next write of the name.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use super::slot::{header, newest, Slot, HEADER, PAIR};
use crate::error::{Error, IoContext, Result};
use crate::storage::fs::sync_dir;

/// Name of the positions file in each directory.
pub const FILE: &str = "rmqlog.consumers";

/// The positions files of one store, open.
#[derive(Debug)]
pub(crate) struct Positions {
    files: Vec<(PathBuf, File)>,
}

impl Positions {
    /// Opens the file in each of `dirs`; `create` creates it (durably) where it is missing,
    /// otherwise a directory without one is left out.
    pub fn open(dirs: &[&Path], create: bool) -> Result<Positions> {
        if create && dirs.len() > 1 {
            // (One directory's damaged copy is kept as it is: reading it fails, saying why.)
            check_not_all_damaged(dirs)?;
        }
        let mut files = Vec::with_capacity(dirs.len());
        let mut created = Vec::with_capacity(dirs.len());
        for dir in dirs {
            let path = dir.join(FILE);
            let file = match OpenOptions::new().read(true).write(true).open(&path) {
                Ok(f) if create && read_all(&path, &f).is_err() && dirs.len() > 1 => {
                    // A damaged copy (its header): set aside, made again from the others.
                    let aside = dir.join(format!("{FILE}.damaged"));
                    log::warn!(
                        "{} is damaged; kept as {} and made again from the other directories",
                        path.display(),
                        aside.display()
                    );
                    std::fs::rename(&path, &aside).ctx("renaming", &path)?;
                    created.push(true);
                    create_file(dir, &path)?
                }
                Ok(f) => {
                    created.push(false);
                    f
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound && create => {
                    created.push(true);
                    create_file(dir, &path)?
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(Error::io("opening", &path, e)),
            };
            files.push((path, file));
        }
        let p = Positions { files };
        if created.iter().any(|&c| c) && created.iter().any(|&c| !c) {
            p.fill_created(&created)?;
        }
        Ok(p)
    }

    /// Gives files created just now (their directory had lost its file) every name's newest
    /// slot from the others, durably: each directory again holds every position.
    fn fill_created(&self, created: &[bool]) -> Result<()> {
        let older = Positions {
            files: self
                .files
                .iter()
                .zip(created)
                .filter(|(_, &c)| !c)
                .map(|((p, f), _)| f.try_clone().map(|f| (p.clone(), f)).ctx("opening", p))
                .collect::<Result<_>>()?,
        };
        for (pair, slot) in older.read()?.iter().enumerate() {
            let Some(slot) = slot else { continue };
            for ((path, file), _) in self.files.iter().zip(created).filter(|(_, &c)| c) {
                file.write_all_at(&slot.encode(), slot.at(pair))
                    .ctx("writing", path)?;
            }
        }
        for ((path, file), _) in self.files.iter().zip(created).filter(|(_, &c)| c) {
            file.sync_data().ctx("syncing", path)?;
        }
        Ok(())
    }

    /// Opens the files for reading only (a read-only listing): those that exist.
    pub fn open_existing(dirs: &[&Path]) -> Result<Positions> {
        let mut files = Vec::with_capacity(dirs.len());
        for dir in dirs {
            let path = dir.join(FILE);
            match File::open(&path) {
                Ok(f) => files.push((path, f)),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(Error::io("opening", &path, e)),
            }
        }
        Ok(Positions { files })
    }

    /// The newest intact slot of every pair, merged across the directories; index = pair.
    pub fn read(&self) -> Result<Vec<Option<Slot>>> {
        let mut pairs: Vec<Option<Slot>> = Vec::new();
        let (mut damaged, mut damaged_n) = (None, 0);
        for (path, file) in &self.files {
            // A damaged copy is left out while another one reads (each holds every name).
            let bytes = match read_all(path, file) {
                Ok(b) => b,
                Err(e) => {
                    damaged.get_or_insert(e);
                    damaged_n += 1;
                    continue;
                }
            };
            let body = bytes.get(HEADER as usize..).unwrap_or_default();
            for (i, pair) in body.chunks(PAIR as usize).enumerate() {
                if i == pairs.len() {
                    pairs.push(None);
                }
                if let Some(s) = newest(pair) {
                    if pairs[i].as_ref().is_none_or(|old| s.seq > old.seq) {
                        pairs[i] = Some(s);
                    }
                }
            }
        }
        match damaged {
            Some(e) if damaged_n == self.files.len() => Err(e),
            Some(e) => {
                log::warn!("consumer positions: {e}; using the other directories' copies");
                Ok(pairs)
            }
            None => Ok(pairs),
        }
    }

    /// The newest intact slot of pair `pair` across the directories.
    pub fn read_pair(&self, pair: usize) -> Result<Option<Slot>> {
        let mut best: Option<Slot> = None;
        for (path, file) in &self.files {
            let mut b = [0u8; PAIR as usize];
            // A file may end inside the pair (its second slot never written): zeros after.
            let n = file
                .read_at(&mut b, HEADER + pair as u64 * PAIR)
                .ctx("reading", path)?;
            if n == 0 {
                continue;
            }
            if let Some(s) = newest(&b) {
                if best.as_ref().is_none_or(|old| s.seq > old.seq) {
                    best = Some(s);
                }
            }
        }
        Ok(best)
    }

    /// Writes `slot` into pair `pair` of every file, then (if `durable`) syncs each. Fails only
    /// if no file took it; a directory that failed is said in the log and catches up later.
    pub fn write(&self, pair: usize, slot: &Slot, durable: bool) -> Result<()> {
        let bytes = slot.encode();
        let at = slot.at(pair);
        let mut first_error = None;
        let mut written = 0;
        for (path, file) in &self.files {
            let done = file.write_all_at(&bytes, at).and_then(|()| {
                if durable {
                    file.sync_data()
                } else {
                    Ok(())
                }
            });
            match done {
                Ok(()) => written += 1,
                Err(e) => {
                    log::warn!(
                        "consumer {:?}: position not written to {}: {e}",
                        slot.name,
                        path.display()
                    );
                    first_error.get_or_insert(Error::io("writing a consumer position", path, e));
                }
            }
        }
        match first_error {
            Some(e) if written == 0 => Err(e),
            _ if self.files.is_empty() => Err(Error::Unsupported(
                "the store has no writable directory to keep consumer positions in".into(),
            )),
            _ => Ok(()),
        }
    }
}

/// The pairs every copy once held: recorded in `rmqlog.names` (under its lock, after the pair's
/// first slot was written durably) so that copies zeroed or cut short in every directory (which
/// read as holding fewer names, as a file its creator died in before writing does) are found.
const MADE_MAGIC: &[u8; 8] = b"RMQLNAM1";

/// How many pairs were made (0 for a store that did not record it).
pub(crate) fn pairs_made(names_file: &Path) -> u64 {
    let Ok(bytes) = std::fs::read(names_file) else {
        return 0;
    };
    match (bytes.get(..8), bytes.get(8..16)) {
        (Some(magic), Some(n)) if magic == MADE_MAGIC => {
            u64::from_le_bytes(n.try_into().unwrap_or_default())
        }
        _ => 0,
    }
}

/// Records that `n` pairs were made (the names lock held).
pub(crate) fn note_pairs_made(names_file: &Path, n: u64) -> Result<()> {
    let mut bytes = MADE_MAGIC.to_vec();
    bytes.extend_from_slice(&n.to_le_bytes());
    let file = OpenOptions::new()
        .write(true)
        .open(names_file)
        .ctx("opening", names_file)?;
    file.write_all_at(&bytes, 0).ctx("writing", names_file)?;
    file.sync_data().ctx("syncing", names_file)
}

/// `Ok` unless a pair below `made` reads as never written in every copy: the copies were zeroed
/// or cut short (not a crash: a pair's slot is durable before it is counted).
pub(crate) fn check_made(pairs: &[Option<Slot>], made: u64, dirs: &[&Path]) -> Result<()> {
    let lost = (0..made as usize)
        .filter(|&i| pairs.get(i).is_none_or(Option::is_none))
        .count();
    if lost == 0 {
        return Ok(());
    }
    let names: Vec<String> = dirs
        .iter()
        .map(|d| d.join(FILE).display().to_string())
        .collect();
    Err(Error::Corruption {
        path: dirs.first().map(|d| d.join(FILE)),
        offset: None,
        reason: format!(
            "the consumers' committed positions of {lost} of the {made} names made are gone from \
             every copy ({}): zeroed or cut short. Restore a copy, or move the files aside (e.g. \
             to {FILE}.damaged) and remove {NAMES}'s record to start every name anew",
            names.join(", "),
            NAMES = crate::open::lock::NAMES_FILE,
        ),
    })
}

/// Refuses a store whose copies of the file are all damaged (none missing ones aside): no
/// directory has the positions to make the others from, and making them anew would move every
/// name back to its start (skipping, or repeating, what it had not committed).
fn check_not_all_damaged(dirs: &[&Path]) -> Result<()> {
    let mut damaged = Vec::new();
    for dir in dirs {
        let path = dir.join(FILE);
        match File::open(&path) {
            Ok(f) if read_all(&path, &f).is_err() => damaged.push(path),
            Ok(_) => return Ok(()), // an intact copy
            Err(_) => {}
        }
    }
    let Some(first) = damaged.first() else {
        return Ok(());
    };
    let names: Vec<String> = damaged.iter().map(|p| p.display().to_string()).collect();
    Err(Error::Corruption {
        path: Some(first.clone()),
        offset: None,
        reason: format!(
            "the consumers' committed positions are damaged in every copy ({}): none is left to \
             make them again from. Restore a copy, or move the damaged ones aside (e.g. to \
             {FILE}.damaged) to start every consumer name anew",
            names.join(", ")
        ),
    })
}

fn read_all(path: &Path, file: &File) -> Result<Vec<u8>> {
    let len = file.metadata().ctx("reading", path)?.len();
    let mut bytes = vec![0u8; usize::try_from(len).unwrap_or(usize::MAX)];
    file.read_exact_at(&mut bytes, 0).ctx("reading", path)?;
    let head = header();
    let Some(got) = bytes.get(..16) else {
        return Ok(Vec::new()); // created by a process that died before its header was durable
    };
    if got != &head[..16] && got.iter().any(|&b| b != 0) {
        return Err(Error::corruption(
            Some(path.to_path_buf()),
            None,
            "not an rmqlog consumer positions file (bad magic or an unknown version)",
        ));
    }
    Ok(bytes)
}

/// Creates the file with its header, durably: synced, then its directory.
fn create_file(dir: &Path, path: &Path) -> Result<File> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o644)
        .open(path)
        .ctx("creating", path)?;
    file.write_all_at(&header(), 0).ctx("writing", path)?;
    file.sync_all().ctx("syncing", path)?;
    sync_dir(dir)?;
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(name: &str, seq: u64, position: u64) -> Slot {
        Slot {
            seq,
            position,
            committed_ms: 1,
            created_ms: 1,
            dropped: false,
            name: name.into(),
            max_deliveries: 0,
            dead_lettered: 0,
        }
    }

    #[test]
    fn every_directory_holds_the_positions_and_the_newest_wins() {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let dirs = [a.path(), b.path()];
        let p = Positions::open(&dirs, true).unwrap();
        p.write(0, &slot("x", 1, 100), true).unwrap();
        p.write(2, &slot("y", 1, 7), true).unwrap();
        p.write(0, &slot("x", 2, 200), true).unwrap();
        let read = Positions::open(&dirs, false).unwrap().read().unwrap();
        assert_eq!(read.len(), 3);
        assert_eq!(read[0].as_ref().map(|s| s.position), Some(200));
        assert_eq!(read[1], None);
        assert_eq!(
            read[2].as_ref().map(|s| (s.name.as_str(), s.position)),
            Some(("y", 7))
        );

        // Either directory alone has it all.
        for lost in dirs {
            let kept: Vec<&Path> = dirs.iter().copied().filter(|d| *d != lost).collect();
            let read = Positions::open_existing(&kept).unwrap().read().unwrap();
            assert_eq!(read[0].as_ref().map(|s| s.position), Some(200));
        }
        // A directory that lost its file is stale until the name's next write.
        std::fs::remove_file(a.path().join(FILE)).unwrap();
        let p = Positions::open(&dirs, true).unwrap();
        assert_eq!(p.read().unwrap()[0].as_ref().map(|s| s.seq), Some(2));
        p.write(0, &slot("x", 3, 300), true).unwrap();
        let only_a = Positions::open_existing(&[a.path()])
            .unwrap()
            .read()
            .unwrap();
        assert_eq!(only_a[0].as_ref().map(|s| s.position), Some(300));
    }

    #[test]
    fn a_foreign_file_is_refused_not_overwritten() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join(FILE), b"something else entirely").unwrap();
        let p = Positions::open(&[d.path()], true).unwrap();
        let e = p.read().unwrap_err().to_string();
        assert!(e.contains("not an rmqlog consumer positions file"), "{e}");
        assert_eq!(
            std::fs::read(d.path().join(FILE)).unwrap(),
            b"something else entirely"
        );
    }
}
