//! The store's metadata file, `rmqlog.meta`, kept in every directory of the store.
//!
//! Framed by [`crate::storage::crc_line`] in 4 KiB. Written atomically (temp file, fsync, rename, fsync
//! dir) and only after the data it covers is synced; a sequence number lets the newest copy win
//! when directories disagree. It may lag behind the data, never run ahead of it.
//!
//! Directories are recorded by identity (`rmqlog.id`, see [`crate::storage::identity`]) with the path each
//! had when last opened by a writer; format 1 (rmqlog 0.1) recorded paths only, and is read as a
//! format 2 file whose directories have no id (a writer's open then upgrades it).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, IoContext, Result};
use crate::storage::crc_line;
use crate::storage::fs::{atomic_write, is_no_space};
use crate::storage::identity::random_id;
use crate::storage::record::Format;
use crate::storage::settings::WriterSettings;

/// Name of the metadata file in every directory of a store.
pub const CHECKPOINT_FILE: &str = "rmqlog.meta";
const FORMAT: u32 = 2;
/// Format 2 with `record_format` 2: an rmqlog that cannot read format-2 records refuses the store
/// (as an unknown format) rather than taking its records for damage and cutting them.
const FORMAT_RECORDS_V2: u32 = 3;
/// Format 3 whose records may carry properties (keys, headers: a non-zero `attrs`), which an
/// rmqlog that reads format 3 only would take for damage. Every write of a format-2 store's
/// metadata by this rmqlog writes it, so a store opened by a writer of this version is refused
/// by older ones.
const FORMAT_PROPS: u32 = 4;
/// rmqlog 0.1: directories and move intents by path.
const FORMAT_PATHS: u32 = 1;
const FILE_LEN: usize = 4096;

/// What the store knows about itself.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// Format version of this file.
    pub format: u32,
    /// Random id fixed when the store is created; directories of other stores are refused.
    pub store_id: String,
    /// Incremented on every write; the highest valid copy wins.
    pub seq: u64,
    /// Writable directories, in placement order.
    pub dirs: Vec<DirRecord>,
    /// Directories whose segments are read but never written.
    pub read_only_dirs: Vec<DirRecord>,
    /// The format of the records this store's writers write ([`crate::storage::record::Format`]): 2
    /// since rmqlog 0.2, absent (1) in stores made before.
    #[serde(
        default = "record_format_1",
        skip_serializing_if = "is_record_format_1"
    )]
    pub record_format: u32,
    /// Every segment size in use (old segments keep theirs after a `segment_size` change).
    pub segment_sizes: Vec<u64>,
    /// First offset of the log.
    pub min_offset: u64,
    /// Every byte below this offset was synced before this file was written.
    pub flushed_offset: u64,
    /// True only when written by a clean close; recovery then trusts `max_offset`.
    pub clean: bool,
    /// End of the log at a clean close.
    pub max_offset: u64,
    /// At least the largest record timestamp below `flushed_offset` (timestamps never go back).
    pub max_timestamp_ms: u64,
    /// A segment move in progress: until it is cleared, the source copy is the one in use.
    #[serde(default)]
    pub moving: Option<Move>,
    /// The settings of the writer that last opened the store.
    #[serde(default)]
    pub writer: Option<WriterSettings>,
    /// Directories accepted as lost (`accept_lost`) whose offsets are still holes in the log:
    /// later opens take them as lost without being told again.
    #[serde(default)]
    pub lost_dirs: Vec<DirRecord>,
    /// The remote tier, and the version of its manifest this store's copy (`rmqlog.tier`) holds.
    #[serde(default)]
    pub tier: Option<TierMark>,
}

/// The store's remote tier, as its checkpoint records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TierMark {
    /// The tier's URL (its options, credentials among them, are never recorded).
    pub url: String,
    /// The manifest version last published.
    pub manifest_version: u64,
}

/// One directory of the store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirRecord {
    /// Its identity's `dir_id`; `None` for a directory recorded by rmqlog 0.1, known by path only.
    pub id: Option<String>,
    /// Where it was when a writer last opened the store (for messages, and to find it again).
    pub path: String,
}

impl DirRecord {
    /// Whether this record is the directory at `path` whose identity says `id`.
    pub fn is(&self, id: Option<&str>, path: &Path) -> bool {
        match (self.id.as_deref(), id) {
            (Some(a), Some(b)) => a == b,
            // A directory without identity is known by its path only.
            _ => Path::new(&self.path) == path,
        }
    }
}

/// The intent of a segment move between directories.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Move {
    /// Start offset of the segment.
    pub start: u64,
    /// Source directory.
    pub from: DirRecord,
    /// Destination directory.
    pub to: DirRecord,
}

/// Format 1, as rmqlog 0.1 wrote it.
#[derive(Deserialize)]
struct PathsCheckpoint {
    store_id: String,
    seq: u64,
    dirs: Vec<String>,
    read_only_dirs: Vec<String>,
    segment_sizes: Vec<u64>,
    min_offset: u64,
    flushed_offset: u64,
    clean: bool,
    max_offset: u64,
    max_timestamp_ms: u64,
    #[serde(default)]
    moving: Option<PathsMove>,
}

#[derive(Deserialize)]
struct PathsMove {
    start: u64,
    from: String,
    to: String,
}

fn by_path(path: String) -> DirRecord {
    DirRecord { id: None, path }
}

fn record_format_1() -> u32 {
    1
}

fn is_record_format_1(n: &u32) -> bool {
    *n == 1
}

impl From<PathsCheckpoint> for Checkpoint {
    fn from(c: PathsCheckpoint) -> Checkpoint {
        Checkpoint {
            format: FORMAT,
            store_id: c.store_id,
            seq: c.seq,
            dirs: c.dirs.into_iter().map(by_path).collect(),
            read_only_dirs: c.read_only_dirs.into_iter().map(by_path).collect(),
            record_format: 1,
            segment_sizes: c.segment_sizes,
            min_offset: c.min_offset,
            flushed_offset: c.flushed_offset,
            clean: c.clean,
            max_offset: c.max_offset,
            max_timestamp_ms: c.max_timestamp_ms,
            moving: c.moving.map(|m| Move {
                start: m.start,
                from: by_path(m.from),
                to: by_path(m.to),
            }),
            writer: None,
            lost_dirs: Vec::new(),
            tier: None,
        }
    }
}

impl Checkpoint {
    /// A checkpoint for a new store whose writers write `records`.
    pub fn new(segment_size: u64, records: Format) -> Checkpoint {
        Checkpoint {
            format: match records {
                Format::V1 => FORMAT,
                Format::V2 => FORMAT_PROPS,
            },
            record_format: records.number(),
            store_id: random_id(),
            seq: 0,
            dirs: Vec::new(),
            read_only_dirs: Vec::new(),
            segment_sizes: vec![segment_size],
            min_offset: 0,
            flushed_offset: 0,
            clean: false,
            max_offset: 0,
            max_timestamp_ms: 0,
            moving: None,
            writer: None,
            lost_dirs: Vec::new(),
            tier: None,
        }
    }

    /// The paths of the directories accepted as lost, and of those in `accept_lost`.
    pub fn lost_paths(c: Option<&Checkpoint>, accept_lost: &[PathBuf]) -> Vec<PathBuf> {
        let mut lost = accept_lost.to_vec();
        for r in c.iter().flat_map(|c| &c.lost_dirs) {
            let p = PathBuf::from(&r.path);
            if !lost.contains(&p) {
                lost.push(p);
            }
        }
        lost
    }

    /// All directories, writable first, each with whether it is read-only.
    pub fn all_dirs(&self) -> impl Iterator<Item = (&DirRecord, bool)> {
        let writable = self.dirs.iter().map(|d| (d, false));
        writable.chain(self.read_only_dirs.iter().map(|d| (d, true)))
    }

    fn encode(&self) -> Vec<u8> {
        match self.records() {
            Format::V2 if self.format != FORMAT_PROPS => {
                let upgraded = Checkpoint {
                    format: FORMAT_PROPS,
                    ..self.clone()
                };
                crc_line::encode(&upgraded, FILE_LEN)
            }
            _ => crc_line::encode(self, FILE_LEN),
        }
    }

    /// The format of the records this store's writers write.
    pub fn records(&self) -> Format {
        Format::from_number(self.record_format).unwrap_or(Format::V1)
    }

    /// `Err(Damaged)`: the bytes fail their CRC (skipped: another copy or recovery serves).
    /// `Err(NotUnderstood)`: intact, but not a file this rmqlog knows (a newer rmqlog's, or
    /// edited): the open is refused, as going on without it would cut records.
    fn decode(bytes: &[u8]) -> std::result::Result<Checkpoint, Unreadable> {
        let value: serde_json::Value = crc_line::decode(bytes).map_err(Unreadable::Damaged)?;
        Checkpoint::from_value(value).map_err(Unreadable::NotUnderstood)
    }

    fn from_value(value: serde_json::Value) -> std::result::Result<Checkpoint, String> {
        match value.get("format").and_then(serde_json::Value::as_u64) {
            Some(f)
                if [FORMAT, FORMAT_RECORDS_V2, FORMAT_PROPS]
                    .map(u64::from)
                    .contains(&f) =>
            {
                let c: Checkpoint = serde_json::from_value(value).map_err(|e| e.to_string())?;
                let expected = if f == u64::from(FORMAT) { 1 } else { 2 };
                if c.record_format != expected {
                    return Err(format!(
                        "format {f} names record format {}, expected {expected}",
                        c.record_format
                    ));
                }
                Ok(c)
            }
            Some(f) if f == u64::from(FORMAT_PATHS) => {
                let c: PathsCheckpoint =
                    serde_json::from_value(value).map_err(|e| e.to_string())?;
                Ok(c.into())
            }
            Some(f) => Err(format!(
                "unknown format {f} (written by a newer rmqlog? this one reads formats 1 to 4)"
            )),
            None => Err("no format field".into()),
        }
    }

    /// Writes this checkpoint into every directory in `dirs`. A directory that refuses (full to
    /// the last byte, failing) keeps its older copy, which the sequence number outranks; only
    /// when no directory took it is it an error.
    pub fn write(&self, dirs: &[PathBuf], mode: u32) -> Result<()> {
        let bytes = self.encode();
        let mut first_error = None;
        let mut written = 0;
        for dir in dirs {
            let path = dir.join(CHECKPOINT_FILE);
            let result = match atomic_write(&path, &bytes, mode) {
                // A filesystem full to the last byte cannot take the temp file: rewrite in place
                // (the CRC and the other directories' copies cover a torn write).
                Err(Error::Io { source, .. }) if is_no_space(&source) => {
                    overwrite_in_place(&path, &bytes)
                }
                other => other,
            };
            match result {
                Ok(()) => written += 1,
                Err(e) => {
                    log::warn!("metadata not updated in {}: {e}", dir.display());
                    first_error.get_or_insert(e);
                }
            }
        }
        match first_error {
            Some(e) if written == 0 => Err(e),
            _ => Ok(()),
        }
    }
}

fn overwrite_in_place(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .ctx("rewriting", path)?;
    f.write_all_at(bytes, 0)
        .and_then(|()| f.sync_data())
        .ctx("rewriting", path)
}

/// The newest valid checkpoint among `dirs`. Unreadable or damaged copies are skipped with a
/// warning; copies from two different stores are an error.
/// Why a copy of the metadata cannot be used.
#[derive(Debug)]
enum Unreadable {
    Damaged(String),
    NotUnderstood(String),
}

pub fn read_newest(dirs: &[PathBuf]) -> Result<Option<Checkpoint>> {
    let mut newest: Option<(Checkpoint, &Path)> = None;
    for dir in dirs {
        let path = dir.join(CHECKPOINT_FILE);
        let bytes = match crc_line::read_file(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => {
                log::warn!("ignoring unreadable {}: {e}", path.display());
                continue;
            }
        };
        let c = match Checkpoint::decode(&bytes) {
            Ok(c) => c,
            Err(Unreadable::Damaged(why)) => {
                log::warn!("ignoring damaged {}: {why}", path.display());
                continue;
            }
            Err(Unreadable::NotUnderstood(why)) => {
                return Err(Error::Unsupported(format!(
                    "{}: {why}; its CRC is intact, so it is not damage: the store is left as it \
                     is (open it with the rmqlog that wrote it, or restore the file)",
                    path.display()
                )));
            }
        };
        if let Some((n, other)) = &newest {
            if n.store_id != c.store_id {
                return Err(Error::different_stores(
                    (other, &n.store_id),
                    (dir, &c.store_id),
                ));
            }
        }
        if newest.as_ref().is_none_or(|(n, _)| c.seq > n.seq) {
            newest = Some((c, dir));
        }
    }
    Ok(newest.map(|(c, _)| c))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newest_copy_wins_and_damage_is_skipped() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        let dirs = vec![a.path().to_path_buf(), b.path().to_path_buf()];
        let mut c = Checkpoint::new(4096, Format::V2);
        c.write(&dirs, 0o640).unwrap();
        c.seq = 5;
        c.flushed_offset = 99;
        c.write(&dirs[1..], 0o640).unwrap();
        assert_eq!(read_newest(&dirs).unwrap().unwrap().flushed_offset, 99);
        std::fs::write(b.path().join(CHECKPOINT_FILE), b"{garbage\n0\n").unwrap();
        assert_eq!(read_newest(&dirs).unwrap().unwrap().seq, 0);
    }

    #[test]
    fn format_1_reads_as_directories_known_by_path() {
        let json = r#"{"format":1,"store_id":"s","seq":3,"dirs":["/d/a","/d/b"],"read_only_dirs":["/old"],"segment_sizes":[4096],"min_offset":0,"flushed_offset":10,"clean":true,"max_offset":10,"max_timestamp_ms":5,"moving":{"start":4096,"from":"/d/a","to":"/d/b"}}"#;
        let bytes = format!("{json}\n{:08x}\n", crc32fast::hash(json.as_bytes()));
        let c = Checkpoint::decode(bytes.as_bytes()).unwrap();
        assert_eq!(c.format, FORMAT);
        let paths: Vec<(&str, bool)> = c.all_dirs().map(|(d, ro)| (d.path.as_str(), ro)).collect();
        assert_eq!(paths, [("/d/a", false), ("/d/b", false), ("/old", true)]);
        assert!(c.all_dirs().all(|(d, _)| d.id.is_none()));
        let m = c.moving.unwrap();
        assert!(m.from.is(Some("any"), Path::new("/d/a")) && !m.to.is(None, Path::new("/d/a")));
        let newer = json.replace("\"format\":1", "\"format\":9");
        let bytes = format!("{newer}\n{:08x}\n", crc32fast::hash(newer.as_bytes()));
        let err = Checkpoint::decode(bytes.as_bytes()).unwrap_err();
        assert!(
            matches!(&err, Unreadable::NotUnderstood(w) if w.contains("unknown format 9")),
            "{err:?}"
        );
    }

    /// A copy whose CRC holds but whose content this rmqlog does not know (a newer format, or a
    /// record format its file format does not name) refuses the open: skipping it would take
    /// the store for one whose metadata is lost, and recovery would cut what it cannot read.
    #[test]
    fn an_intact_copy_not_understood_refuses_the_open() {
        let a = tempfile::tempdir().unwrap();
        let dirs = vec![a.path().to_path_buf()];
        Checkpoint::new(4096, Format::V2)
            .write(&dirs, 0o640)
            .unwrap();
        let path = a.path().join(CHECKPOINT_FILE);
        let text = String::from_utf8(crc_line::read_file(&path).unwrap()).unwrap();
        let json = text.lines().next().unwrap().to_string();
        for (from, to) in [
            (r#""format":4"#, r#""format":5"#),
            (r#""record_format":2"#, r#""record_format":7"#),
            (r#""format":4"#, r#""format":2"#),
        ] {
            let edited = json.replace(from, to);
            assert_ne!(edited, json);
            let bytes = format!("{edited}\n{:08x}\n", crc32fast::hash(edited.as_bytes()));
            std::fs::write(&path, bytes).unwrap();
            let err = read_newest(&dirs).unwrap_err().to_string();
            assert!(
                err.contains("not damage") && err.contains(CHECKPOINT_FILE),
                "{err}"
            );
        }
        std::fs::write(&path, b"{\"format\":5}\n00000000\n").unwrap(); // CRC fails: damage
        assert!(read_newest(&dirs).unwrap().is_none());
    }

    #[test]
    fn two_stores_are_refused() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        Checkpoint::new(4096, Format::V2)
            .write(&[a.path().into()], 0o640)
            .unwrap();
        Checkpoint::new(4096, Format::V2)
            .write(&[b.path().into()], 0o640)
            .unwrap();
        let err = read_newest(&[a.path().into(), b.path().into()]).unwrap_err();
        assert!(err.to_string().contains("different stores"), "{err}");
    }
}
