//! Warming the active segment ahead of the writer on a background thread (RocketMQ's
//! `warmMappedFile`, done continuously instead of once per file).
//!
//! A fresh segment's pages cost their first touch: a page-cache page is allocated and zeroed and,
//! over the unwritten extents of a preallocated file, the filesystem starts a transaction (ext4's
//! `page_mkwrite`). Measured here on ext4, storing 1 KiB records into fresh pages runs at a tenth
//! of a memcpy, into pages written with zeros beforehand at about half, into pages also present
//! in the writer's page tables at the memcpy's pace. The `rmqlog-warm` thread does both ahead of
//! the writer: `pwrite`s zeros, then `MADV_POPULATE_WRITE` over them, up to
//! [`Options::warm_ahead`](crate::Options::warm_ahead) bytes past the log's end.
//!
//! The edge. Bytes below [`Edge::ready`] are warm or written; only the writer writes below it,
//! and only above its own position (no published record is there). Zeros are written above it
//! by whoever holds [`Edge::lock`], which then raises `ready`: the thread, or the writer when it
//! outruns the thread (then it warms inline, or reserves the range for a direct write). So the
//! zeros never land on a record. `MADV_POPULATE_WRITE` changes no byte and runs without the lock.
//! The thread never takes the writer's lock; the writer waits on the edge's lock for at most
//! one chunk of zeros.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use crate::background::{Next, Periodic};
use crate::error::Result;
use crate::failpoint::fail_point;
use crate::state::State;
use crate::storage::segment::Mapping;
use crate::sync::locked;

/// Bytes of zeros written at a time.
pub(crate) const CHUNK: usize = 256 * 1024;
pub(crate) static ZEROS: [u8; CHUNK] = [0; CHUNK];

/// The thread warms only this far ahead of the writer or more.
const MARGIN: u64 = 1 << 20;

/// How often the thread looks at the writer's position while it appends.
const PERIOD: Duration = Duration::from_millis(2);
/// The longest the thread sleeps while the writer is idle and the segment warm ahead of it: the
/// first appends of a burst after that warm inline meanwhile.
const IDLE_PERIOD: Duration = Duration::from_millis(50);

/// The warm edge of the active segment.
#[derive(Debug)]
pub(crate) struct Edge {
    /// Segment-relative: `[.., ready)` is warm or written.
    ready: AtomicU64,
    /// Held while zeros are written above `ready` and `ready` raised.
    lock: Mutex<()>,
}

impl Edge {
    pub fn new(ready: u64) -> Edge {
        Edge {
            ready: AtomicU64::new(ready),
            lock: Mutex::new(()),
        }
    }

    /// `[.., ready)` is warm or written.
    #[inline]
    pub fn ready(&self) -> u64 {
        self.ready.load(Ordering::Acquire)
    }

    /// Locks the edge: zeros may be written from [`Edge::ready`] on until the guard goes.
    pub fn lock(&self) -> MutexGuard<'_, ()> {
        locked(&self.lock)
    }

    /// Raises `ready` to `to` (held: the edge's lock).
    pub fn raise(&self, _held: &MutexGuard<'_, ()>, to: u64) {
        self.ready.fetch_max(to, Ordering::Release);
    }
}

/// What the thread warms: the active segment's edge, file and map.
#[derive(Debug)]
pub(crate) struct Target {
    pub start: u64,
    pub size: u64,
    pub edge: Arc<Edge>,
    pub file: Arc<File>,
    pub map: Arc<Mapping>,
}

/// The writer's active target, swapped at each roll; the thread clones it for a pass.
#[derive(Debug, Default)]
pub(crate) struct Slot(Mutex<Option<Arc<Target>>>);

impl Slot {
    pub fn set(&self, t: Option<Arc<Target>>) {
        *locked(&self.0) = t;
    }

    fn get(&self) -> Option<Arc<Target>> {
        locked(&self.0).clone()
    }
}

/// Starts the `rmqlog-warm` thread of a writer (not in `FlushMode::Sync`, whose inline warming
/// also syncs). Stopped and joined when the returned value drops.
pub(crate) fn start_warmer(state: &Arc<State>, slot: &Arc<Slot>) -> Result<Periodic> {
    let state = Arc::clone(state);
    let slot = Arc::clone(slot);
    let ahead = state.opts.warm_ahead;
    let mut last_end = u64::MAX;
    let mut sleep = PERIOD;
    Periodic::start("rmqlog-warm", PERIOD, move || {
        let end = state.max_offset();
        let idle = end == last_end;
        let warmed = slot.get().is_some_and(|t| {
            warm(
                &t,
                || state.max_offset().saturating_sub(t.start),
                ahead,
                idle,
            )
        });
        last_end = end;
        // Idle with nothing left to warm: the thread sleeps longer each time, up to IDLE_PERIOD.
        sleep = match idle && !warmed {
            true => (sleep * 2).min(IDLE_PERIOD),
            false => PERIOD,
        };
        Next::After(sleep)
    })
}

/// Warms `t` up to `ahead` bytes past the writer's position (`pos()`, segment-relative), a chunk
/// at a time, while the writer is `idle` (no append since the last pass, nor during this one) or
/// [`MARGIN`] or more behind the edge: in a burst the writer warms inline instead of waiting
/// for the thread's chunks (measured: leapfrogging doubles the burst's time on two busy cores).
/// Stops at the first error (the writer's inline warming takes over): this is only a speed-up.
/// Returns whether it warmed anything.
fn warm(t: &Target, pos: impl Fn() -> u64, ahead: u64, idle: bool) -> bool {
    let still = pos();
    let mut warmed = false;
    loop {
        let (from, n) = {
            let held = t.edge.lock();
            let from = t.edge.ready();
            let pos = pos();
            let upto = pos.saturating_add(ahead).min(t.size);
            let quiet = idle && pos == still;
            if from >= upto || !(quiet || from >= pos.saturating_add(MARGIN)) {
                return warmed;
            }
            fail_point!("warm::zeros");
            let n = (upto - from).min(CHUNK as u64);
            if let Err(e) = t.file.write_all_at(&ZEROS[..n as usize], from) {
                log::debug!("warming segment {} stops: {e}", t.start);
                return warmed;
            }
            warmed = true;
            t.edge.raise(&held, from + n);
            (from, n)
        };
        populate(&t.map, from as usize, n as usize);
    }
}

/// Maps `[from, from + n)` writable in the page tables, changing no byte (Linux 5.14+; elsewhere
/// nothing).
fn populate(map: &Mapping, from: usize, n: usize) {
    #[cfg(target_os = "linux")]
    {
        const MADV_POPULATE_WRITE: libc::c_int = 23;
        let page = 4096;
        let lo = from / page * page;
        let hi = (from + n).min(map.len());
        // SAFETY: `[lo, hi)` lies inside the live map (`map` keeps it mapped); the advice only
        // faults pages in, as a write would, without changing their contents.
        let r = unsafe {
            libc::madvise(
                map.as_ptr().add(lo) as *mut libc::c_void,
                hi - lo,
                MADV_POPULATE_WRITE,
            )
        };
        if r != 0 {
            log::trace!("MADV_POPULATE_WRITE: {}", std::io::Error::last_os_error());
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (map, from, n);
}

#[cfg(test)]
mod tests {
    use crate::{CommitLog, Options};
    use std::collections::HashMap;
    use std::time::Duration;

    /// Context switches (one per wake-up, for a thread that sleeps) of each `rmqlog-warm` thread
    /// of this process, by thread id.
    fn warm_threads() -> HashMap<String, u64> {
        let mut out = HashMap::new();
        for task in std::fs::read_dir("/proc/self/task").unwrap() {
            let dir = task.unwrap().path();
            let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
            if comm.trim() != "rmqlog-warm" {
                continue;
            }
            let status = std::fs::read_to_string(dir.join("status")).unwrap_or_default();
            let n = status
                .lines()
                .filter(|l| l.contains("ctxt_switches"))
                .filter_map(|l| l.split(':').nth(1)?.trim().parse::<u64>().ok())
                .sum::<u64>();
            out.insert(dir.display().to_string(), n);
        }
        out
    }

    #[test]
    fn an_idle_writers_warm_thread_sleeps() {
        let d = tempfile::tempdir().unwrap();
        let others = warm_threads(); // other tests' threads
        let log = CommitLog::open(&[d.path()], Options::default()).unwrap();
        log.append(b"one").unwrap();
        std::thread::sleep(Duration::from_millis(500)); // warmed ahead; the thread backs off
        let before: HashMap<_, _> = warm_threads()
            .into_iter()
            .filter(|(t, _)| !others.contains_key(t))
            .collect();
        assert!(!before.is_empty(), "the log's warm thread runs");
        std::thread::sleep(Duration::from_secs(1));
        let after = warm_threads();
        let woke = before
            .iter()
            .filter_map(|(t, n)| Some(after.get(t)? - n))
            .min()
            .unwrap();
        // At the idle period, 20 a second; it was 500.
        assert!(
            woke < 60,
            "the idle warm thread woke {woke} times in a second"
        );
        log.append(b"two").unwrap();
    }
}
