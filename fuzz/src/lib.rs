//! Bodies of rmqlog's fuzz targets (docs/fuzzing.md), kept in a library so that the libFuzzer
//! binaries in `fuzz_targets/` and the plain `cargo test` replay in `tests/` run the same code.
//!
//! Both targets go through the public API only (`CommitLog`, `Options`): the record decoder is
//! private to rmqlog and is reached through opening, recovering, scanning and verifying a store.
//! A target fails (panics, which libFuzzer reports as a crash) when rmqlog panics, or when one of
//! the properties checked here does not hold; every `assert!` names the property.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rmqlog::{CommitLog, FlushMode, Options};

pub mod decode_segment;
pub mod recover_image;

/// Page size: segment sizes are multiples of it.
pub const PAGE: usize = 4096;
/// File name of the first segment (offset 0, 20 digits).
pub const FIRST_SEGMENT: &str = "00000000000000000000";
/// The store's metadata file, one copy per directory.
pub const META: &str = "rmqlog.meta";

/// A fresh scratch directory for one run of a target. Under `$RMQLOG_FUZZ_TMP` if set, else
/// `/dev/shm` when it is a writable directory (a tmpfs: every fsync rmqlog does costs nothing),
/// else the system temp directory. Removed on drop.
pub fn scratch() -> tempfile::TempDir {
    let base = std::env::var_os("RMQLOG_FUZZ_TMP")
        .map(PathBuf::from)
        .or_else(|| {
            let shm = Path::new("/dev/shm");
            let ok = shm.is_dir()
                && tempfile::Builder::new()
                    .prefix("rmqlog-fuzz-probe")
                    .tempdir_in(shm)
                    .is_ok();
            ok.then(|| shm.to_path_buf())
        })
        .unwrap_or_else(std::env::temp_dir);
    tempfile::Builder::new()
        .prefix("rmqlog-fuzz")
        .tempdir_in(base)
        .expect("creating a scratch directory")
}

/// Options of a writer in the targets: no flush or cleaner thread (the targets flush through
/// `close`), so a run is deterministic.
pub fn writer_options(segment_size: u64) -> Options {
    Options::default()
        .segment_size(segment_size)
        .flush(FlushMode::None)
        .clean_interval(Duration::ZERO)
}

/// Options of a read-only open.
pub fn reader_options(segment_size: u64) -> Options {
    Options::default()
        .segment_size(segment_size)
        .read_only(true)
}

/// Opens `dirs` read-only.
pub fn open_reader(dirs: &[PathBuf], segment_size: u64) -> rmqlog::Result<CommitLog> {
    CommitLog::open(dirs, reader_options(segment_size))
}

/// Opens `dirs` as the writer (runs recovery).
pub fn open_writer(dirs: &[PathBuf], segment_size: u64) -> rmqlog::Result<CommitLog> {
    CommitLog::open(dirs, writer_options(segment_size))
}

/// Little-endian u16 at `at`, zero-padded past the end of `data`.
pub fn u16_at(data: &[u8], at: usize) -> u16 {
    let lo = data.get(at).copied().unwrap_or(0);
    let hi = data.get(at + 1).copied().unwrap_or(0);
    u16::from_le_bytes([lo, hi])
}

/// Little-endian u64 at `at`, zero-padded past the end of `data`.
pub fn u64_at(data: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    for (i, b) in w.iter_mut().enumerate() {
        *b = data.get(at + i).copied().unwrap_or(0);
    }
    u64::from_le_bytes(w)
}
