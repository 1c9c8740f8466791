//! Helpers shared by the criterion benches and by `rust_rows` (the JSON rows `compare.py` reads):
//! record builders for rmqlog and the `commitlog` crate, the page-cache and disk references
//! (a pre-faulted anonymous map, a preallocated file written with `pwrite` + `fdatasync`), a
//! crashed-writer child process, and a tiny deterministic PRNG.
//!
//! Each bench binary uses a subset of this module.
#![allow(dead_code)]

use std::fs::{File, OpenOptions};
use std::hint::black_box;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rmqlog::{CommitLog, FlushMode, Options, HEADER_LEN};

/// Environment variable that turns a bench binary into the crashing writer child.
pub const CHILD_ENV: &str = "RMQLOG_BENCH_CRASH_WRITER";
/// Magic of an rmqlog format-2 record ("RMQ" + version 2), as in `docs/format.md`.
pub const MAGIC_V2: u32 = 0x524D_5102;
/// Length of the end-of-segment filler.
pub const FILLER_LEN: usize = 8;

/// True when run by `cargo bench` (which passes `--bench`); `cargo test --all-targets` runs the
/// bench binaries without it, and they then use tiny sizes.
pub fn bench_mode() -> bool {
    std::env::args().any(|a| a == "--bench")
}

/// Where bench data goes: `$RMQLOG_BENCH_DIR`, else the system temp directory.
pub fn base_dir() -> PathBuf {
    std::env::var_os("RMQLOG_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir)
}

/// A fresh temporary directory under [`base_dir`].
pub fn tempdir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("rmqlog-bench-")
        .tempdir_in(base_dir())
        .expect("creating a temporary directory")
}

/// xorshift64*: deterministic, no dependency.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform-enough index in `0..n`.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

/// `count` random indices in `0..n` (same seed, same indices: every contender reads the same
/// records).
pub fn random_indices(n: usize, count: usize, seed: u64) -> Vec<usize> {
    let mut rng = Rng::new(seed);
    (0..count).map(|_| rng.below(n)).collect()
}

/// A body of `len` bytes that is not all one value.
pub fn body(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 31 + 7) as u8).collect()
}

/// Median of some durations.
pub fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// Options for a bench log.
pub fn options(segment_size: u64, flush: FlushMode) -> Options {
    Options::default().segment_size(segment_size).flush(flush)
}

/// Opens a log in `dir`.
pub fn open_log(dir: &Path, segment_size: u64, flush: FlushMode) -> CommitLog {
    CommitLog::open(&[dir], options(segment_size, flush)).expect("opening the bench log")
}

/// Records of `record_len` bytes (header included) that fill one segment of `segment_size`.
pub fn records_per_segment(segment_size: u64, body_len: usize) -> usize {
    // A segment closes when the next record does not fit; the filler needs no room of its own
    // when the remainder is under 8 bytes, and it takes the remainder otherwise.
    segment_size as usize / (HEADER_LEN + body_len)
}

/// A log of `n` records of `body_len` bytes; returns the log and the record offsets.
pub fn build_log(
    dir: &Path,
    segment_size: u64,
    n: usize,
    body_len: usize,
) -> (CommitLog, Vec<u64>) {
    let log = open_log(dir, segment_size, FlushMode::None);
    let b = body(body_len);
    let batch: Vec<&[u8]> = vec![b.as_slice(); 1000];
    let mut offsets = Vec::with_capacity(n);
    while offsets.len() < n {
        let k = (n - offsets.len()).min(batch.len());
        offsets.extend(log.append_batch(&batch[..k]).expect("append_batch"));
    }
    (log, offsets)
}

/// A log of exactly `segments` full segments of `body_len`-byte records.
pub fn build_segments(
    dir: &Path,
    segment_size: u64,
    segments: usize,
    body_len: usize,
) -> (CommitLog, Vec<u64>) {
    let n = segments * records_per_segment(segment_size, body_len);
    let (log, offsets) = build_log(dir, segment_size, n, body_len);
    let count = log.segments().expect("segments").len();
    assert_eq!(
        count, segments,
        "the bench log should have {segments} segments"
    );
    for k in [0, n / 3, n - 1] {
        assert_eq!(offsets[k], full_segment_offset(k, segment_size, body_len));
    }
    (log, offsets)
}

/// Offset of record `k` in a log of full `segment_size` segments of `body_len`-byte records
/// (what [`build_segments`] writes): computed, so a lookup bench does not also measure a cache
/// miss on a table of offsets.
#[inline]
pub fn full_segment_offset(k: usize, segment_size: u64, body_len: usize) -> u64 {
    let per = records_per_segment(segment_size, body_len);
    (k / per) as u64 * segment_size + ((k % per) * (HEADER_LEN + body_len)) as u64
}

/// The rmqlog record layout, format 2 (see `docs/format.md`; `src/storage/record.rs` keeps its encoder
/// crate-private): 32-byte little-endian header, one CRC-32C over bytes 12..length (attributes,
/// offset, timestamp, body). Writes header + body into `out`, which must be `HEADER_LEN +
/// body.len()` long.
#[inline]
pub fn encode_record(out: &mut [u8], body: &[u8], offset: u64, timestamp_ms: u64) {
    let len = HEADER_LEN + body.len();
    out[HEADER_LEN..len].copy_from_slice(body);
    out[0..4].copy_from_slice(&(len as u32).to_le_bytes());
    out[4..8].copy_from_slice(&MAGIC_V2.to_le_bytes());
    out[12..16].copy_from_slice(&0u32.to_le_bytes());
    out[16..24].copy_from_slice(&offset.to_le_bytes());
    out[24..32].copy_from_slice(&timestamp_ms.to_le_bytes());
    let crc = crc32c::crc32c(&out[12..len]);
    out[8..12].copy_from_slice(&crc.to_le_bytes());
}

/// An anonymous map of `len` bytes with every page already faulted in: what a memcpy into the
/// page cache costs at best.
pub fn prefaulted(len: usize) -> memmap2::MmapMut {
    let mut map = memmap2::MmapMut::map_anon(len.max(1)).expect("anonymous map");
    map.fill(1);
    map
}

/// Copies `n` records (`header` then `body`) back to back into `map`: the page-cache limit.
#[inline]
pub fn memcpy_records(map: &mut [u8], header: &[u8; HEADER_LEN], body: &[u8], n: usize) {
    let rec = HEADER_LEN + body.len();
    let mut at = 0;
    for _ in 0..n {
        map[at..at + HEADER_LEN].copy_from_slice(header);
        map[at + HEADER_LEN..at + rec].copy_from_slice(body);
        at += rec;
    }
    black_box(&map[..at.min(map.len())]);
}

/// A new, empty reference file `dir/name`, open for reading and writing.
fn reference_file(dir: &Path, name: &str) -> File {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(dir.join(name))
        .expect("creating the reference file")
}

/// A file of `len` bytes preallocated with `posix_fallocate` (as rmqlog preallocates segments).
pub fn preallocated_file(dir: &Path, name: &str, len: u64) -> File {
    let f = reference_file(dir, name);
    use std::os::fd::AsRawFd;
    // SAFETY: posix_fallocate reads its integer arguments only; `f` owns the descriptor.
    let rc = unsafe { libc::posix_fallocate(f.as_raw_fd(), 0, len as libc::off_t) };
    assert_eq!(rc, 0, "posix_fallocate failed: {rc}");
    f.sync_all().expect("sync");
    f
}

/// A file of `len` zeros, written and synced: how a WAL writer prepares its file (PostgreSQL
/// zero-fills new WAL segments), so that an `fdatasync` after each write syncs the data alone,
/// with no unwritten extent to convert (a journal commit on ext4), as rmqlog's warmed and synced
/// chunks do in sync mode.
pub fn zero_filled_file(dir: &Path, name: &str, len: u64) -> File {
    let f = reference_file(dir, name);
    let zeros = vec![0u8; 1 << 20];
    let mut at = 0u64;
    while at < len {
        let n = (len - at).min(zeros.len() as u64) as usize;
        std::os::unix::fs::FileExt::write_all_at(&f, &zeros[..n], at).expect("zero-filling");
        at += n as u64;
    }
    f.sync_all().expect("sync");
    f
}

/// `pwrite` of `n` records of `record` at consecutive positions, each followed by `fdatasync`
/// when `sync` (the disk limit of sync mode); without `sync`, the plain syscall write path.
pub fn pwrite_records(f: &File, record: &[u8], n: usize, sync: bool) {
    let mut at = 0u64;
    for _ in 0..n {
        f.write_all_at(record, at).expect("pwrite");
        if sync {
            f.sync_data().expect("fdatasync");
        }
        at += record.len() as u64;
    }
}

/// Raises the soft limit on open files to the hard limit (the `commitlog` crate keeps two
/// descriptors open per segment).
pub fn raise_fd_limit() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit write/read only the struct passed, which lives on the stack.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
    lim.rlim_cur
}

// ------------------------------------------------------------------------------------------------
// The `commitlog` crate (0.2), the Rust peer.

/// A `commitlog` log in `dir` with segments of at most `segment_bytes` (its default is 1 GB).
pub fn cl_open(dir: &Path, segment_bytes: Option<usize>) -> commitlog::CommitLog {
    let mut o = commitlog::LogOptions::new(dir);
    if let Some(b) = segment_bytes {
        o.segment_max_bytes(b);
        // One index entry (8 bytes) per message; sized for the segment instead of 800 KB each.
        o.index_max_items(b / 100 + 16);
    }
    commitlog::CommitLog::new(o).expect("opening the commitlog log")
}

/// Appends `n` copies of `body` one by one (`append_msg`).
pub fn cl_fill(log: &mut commitlog::CommitLog, body: &[u8], n: usize) {
    for _ in 0..n {
        black_box(log.append_msg(body).expect("commitlog append"));
    }
}

/// Appends `n` copies of `body` in batches of `batch`: a `MessageBuf` pushed anew per batch (its
/// buffer reused), then one `append`.
pub fn cl_fill_batches(log: &mut commitlog::CommitLog, body: &[u8], n: usize, batch: usize) {
    let mut buf = commitlog::message::MessageBuf::default();
    let mut done = 0;
    while done < n {
        buf.clear();
        let k = (n - done).min(batch);
        for _ in 0..k {
            buf.push(body).expect("MessageBuf::push");
        }
        black_box(log.append(&mut buf).expect("commitlog append"));
        done += k;
    }
}

/// Reads messages `0..n` in order with a 64 KiB `ReadLimit` per `read`; returns the sum of the
/// payload lengths.
pub fn cl_scan_64k(log: &commitlog::CommitLog, n: usize) -> usize {
    use commitlog::message::MessageSet;
    let mut next = 0u64;
    let mut total = 0usize;
    while next < n as u64 {
        let buf = log
            .read(next, commitlog::ReadLimit::max_bytes(64 * 1024))
            .expect("commitlog read");
        for m in buf.iter() {
            total += m.payload().len();
            next = m.offset() + 1;
        }
    }
    total
}

/// Size of a `commitlog` message on disk: its 20-byte header + body.
pub fn cl_record_len(body_len: usize) -> usize {
    commitlog::message::HEADER_SIZE + body_len
}

/// Reads message `offset` alone; returns its length.
#[inline]
pub fn cl_read_one(log: &commitlog::CommitLog, offset: u64, body_len: usize) -> usize {
    use commitlog::message::MessageSet;
    // One message plus one byte: with exactly one message, commitlog 0.2 fails on the last
    // message of a segment ("Message exceeded max byte size"); two messages do not fit.
    let limit = commitlog::ReadLimit::max_bytes(cl_record_len(body_len) + 1);
    let buf = log.read(offset, limit).expect("commitlog read");
    let m = buf.iter().next().expect("one message");
    m.payload().len()
}

// ------------------------------------------------------------------------------------------------
// A writer killed with SIGKILL after its last append.

/// Which log the crashed child writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Crashed {
    Rmqlog,
    Commitlog,
}

/// Call first in `main`: when this process is the crash child, writes the log, reports, waits
/// for SIGKILL and never returns.
pub fn maybe_run_child() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let parts: Vec<&str> = spec.split('|').collect();
    let [kind, dir, seg, records, body_len] = parts.as_slice() else {
        panic!("bad {CHILD_ENV}: {spec}");
    };
    let seg: u64 = seg.parse().expect("segment size");
    let records: usize = records.parse().expect("records");
    let body_len: usize = body_len.parse().expect("body length");
    let b = body(body_len);
    let dir = Path::new(dir);
    match *kind {
        "rmqlog" => {
            let log = open_log(dir, seg, FlushMode::None);
            let batch: Vec<&[u8]> = vec![b.as_slice(); 1000];
            let mut done = 0;
            while done < records {
                let k = (records - done).min(batch.len());
                log.append_batch(&batch[..k]).expect("append_batch");
                done += k;
            }
            report_and_wait(log)
        }
        "commitlog" => {
            let mut log = cl_open(dir, Some(seg as usize));
            cl_fill(&mut log, &b, records);
            report_and_wait(log)
        }
        other => panic!("unknown crash child kind {other}"),
    }
}

fn report_and_wait<T>(log: T) -> ! {
    println!("ready");
    use std::io::Write;
    std::io::stdout().flush().expect("flush stdout");
    // Keep the log open (no close, no flush): the parent kills us here.
    let _log = log;
    loop {
        std::thread::sleep(Duration::from_secs(60));
    }
}

/// Runs the crash child: `records` records of `body_len` bytes into `dir`, then SIGKILL after
/// its last append. Returns once the child is dead.
pub fn crash_writer(kind: Crashed, dir: &Path, segment_size: u64, records: usize, body_len: usize) {
    let kind = match kind {
        Crashed::Rmqlog => "rmqlog",
        Crashed::Commitlog => "commitlog",
    };
    let spec = format!(
        "{kind}|{}|{segment_size}|{records}|{body_len}",
        dir.display()
    );
    let exe = std::env::current_exe().expect("current exe");
    let mut child = Command::new(exe)
        .env(CHILD_ENV, spec)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawning the writer child");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("child stdout"))
        .read_line(&mut line)
        .expect("reading from the writer child");
    assert_eq!(line.trim(), "ready", "the writer child failed");
    child.kill().expect("SIGKILL"); // std's kill sends SIGKILL
    child.wait().expect("reaping the writer child");
}

/// Minor page faults of this process so far (getrusage).
pub fn minor_faults() -> u64 {
    // SAFETY: getrusage writes only into the zeroed struct passed, which lives on the stack.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut ru);
        ru
    };
    ru.ru_minflt as u64
}

/// The segment files of `log`, one after the other, in one file mapped read-only: the same bytes
/// at the same offsets (from the first segment's start), in one map.
pub fn concatenated_map(log: &rmqlog::CommitLog, dir: &Path) -> memmap2::Mmap {
    let path = dir.join("concatenated");
    let mut out = File::create(&path).expect("creating the reference file");
    for seg in log.segments().expect("segments") {
        let mut f = File::open(&seg.path).expect("opening a segment");
        std::io::copy(&mut f, &mut out).expect("copying a segment");
    }
    drop(out);
    let f = File::open(&path).expect("opening the reference file");
    // SAFETY: the file was just written in a private temporary directory, at its full length,
    // and nothing else truncates it while the map lives.
    unsafe { memmap2::Mmap::map(&f) }.expect("mapping the reference file")
}

/// Reads and checks the format-2 record at each offset of `map` as a record read does (its
/// CRC-32C over bytes 12..length), with no lookup: the floor of a validated random read. Returns
/// the total body length.
#[inline]
pub fn check_records(map: &[u8], offsets: impl Iterator<Item = u64>) -> u64 {
    let word = |b: &[u8], at: usize| u32::from_le_bytes(b[at..at + 4].try_into().expect("4"));
    let mut total = 0u64;
    for o in offsets {
        let rest = &map[o as usize..];
        let len = word(rest, 0) as usize;
        assert_eq!(crc32c::crc32c(&rest[12..len]), word(rest, 8), "CRC at {o}");
        total += (len - HEADER_LEN) as u64;
    }
    black_box(total)
}

/// Times `f`.
pub fn timed<T>(f: impl FnOnce() -> T) -> (Duration, T) {
    let t = Instant::now();
    let out = f();
    (t.elapsed(), out)
}
