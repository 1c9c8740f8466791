//! asyncio: coroutines that wait on a log without blocking their event loop.
//!
//! One thread per open log (`rmqlog-aio`, Rust only: it never takes the GIL) sleeps on the
//! store's control page ([`Watch`]) while coroutines wait on the log, and writes to an eventfd of
//! each event loop that has waiters when something may have changed. The loop's reader callback
//! wakes its coroutines, which look for themselves (`python/rmqlog/_aio.py`): no thread per
//! waiter, and no GIL taken by the waker.
//!
//! A loop subscribes its eventfd before its first look, and the watch is registered in the page
//! before `subscribe` returns: an append after the look always reaches the loop. The thread
//! stays [`LINGER`] after the last subscriber left (a worker that waits again soon finds it
//! running), then unregisters and ends; the log's `close()` ends it at once and joins it.

use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use pyo3::call::PyCallArgs;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyModule;

use crate::read::wait::POLL;
use crate::read::watch::Watch;
use crate::sync::locked;
use crate::{CommitLog, Error};

/// How long the thread outlives the last subscriber, registered and asleep.
const LINGER: Duration = Duration::from_secs(1);

/// The eventfds of the event loops waiting on one log, and the thread that signals them.
#[derive(Default)]
pub(super) struct Hub {
    subs: Arc<Mutex<Subs>>,
}

#[derive(Default)]
struct Subs {
    /// The loops' eventfds (duplicates: Python closes its own), by Python's descriptor number.
    fds: Vec<(RawFd, OwnedFd)>,
    /// The thread is running (until it takes itself out, under this lock).
    running: bool,
    /// The last thread started, and the process that started it.
    thread: Option<(JoinHandle<()>, u32)>,
    /// When the last subscriber left.
    left_at: Option<Instant>,
}

impl Hub {
    /// Signals `fd` (an eventfd of an event loop) at each change of the store from now on.
    pub fn subscribe(&self, log: &CommitLog, fd: RawFd) -> PyResult<()> {
        if log.is_closed() {
            return Err(Error::Closed.into());
        }
        // SAFETY: fcntl(F_DUPFD_CLOEXEC) on a descriptor number only reads the table; a bad
        // number fails with EBADF.
        let dup = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 3) };
        if dup < 0 {
            return Err(std::io::Error::last_os_error().into());
        }
        // SAFETY: `dup` is a new descriptor this process owns and nothing else closes.
        let dup = unsafe { OwnedFd::from_raw_fd(dup) };
        let mut s = locked(&self.subs);
        s.fds.push((fd, dup));
        s.left_at = None;
        if !s.running {
            let watch = log.watch(); // registered now, before the caller's first look
            let subs = Arc::clone(&self.subs);
            let started = std::thread::Builder::new()
                .name("rmqlog-aio".into())
                .spawn(move || run(&subs, watch));
            match started {
                Ok(handle) => {
                    s.running = true;
                    s.thread = Some((handle, std::process::id()));
                }
                Err(e) => {
                    s.fds.pop();
                    return Err(e.into());
                }
            }
        }
        Ok(())
    }

    /// Stops signalling `fd`.
    pub fn unsubscribe(&self, fd: RawFd) {
        let mut s = locked(&self.subs);
        s.fds.retain(|(key, _)| *key != fd);
        if s.fds.is_empty() {
            s.left_at = Some(Instant::now());
        }
    }

    /// Wakes every waiting loop (they look again): a consumer closed, or the log.
    pub fn wake(&self) {
        signal(&locked(&self.subs).fds);
    }

    /// The log closed: wakes the loops (their waits end with `ClosedError`) and joins the thread,
    /// which the close woke too.
    pub fn closed(&self, py: Python<'_>) {
        let thread = {
            let mut s = locked(&self.subs);
            signal(&s.fds);
            s.thread.take()
        };
        if let Some((handle, pid)) = thread {
            if pid == std::process::id() {
                // It never takes the GIL: joining with the GIL released cannot deadlock.
                let _ = py.detach(|| handle.join());
            }
        }
    }
}

/// The thread: signals the subscribers at each change until the log closes, or no one has
/// subscribed for [`LINGER`].
fn run(subs: &Mutex<Subs>, mut watch: Watch) {
    let mut timeout = LINGER;
    loop {
        let woke = watch.sleep(Some(timeout));
        let mut s = locked(subs);
        match &woke {
            Ok(false) => {}
            Ok(true) => signal(&s.fds),
            Err(Error::Closed) => {
                signal(&s.fds);
                s.fds.clear();
                s.running = false;
                return;
            }
            Err(e) => {
                // A follower's look at the store failed: the waiters look themselves, and meet it.
                log::debug!("asyncio waiters: a look at the store failed: {e}");
                signal(&s.fds);
            }
        }
        timeout = match (s.fds.is_empty(), s.left_at) {
            (false, _) => LINGER,
            (true, Some(left)) if left.elapsed() < LINGER => LINGER - left.elapsed(),
            (true, _) => {
                s.running = false;
                return;
            }
        };
        drop(s);
        if woke.is_err() {
            std::thread::sleep(POLL);
        }
    }
}

/// Adds 1 to each eventfd: its loop's reader callback runs.
fn signal(fds: &[(RawFd, OwnedFd)]) {
    let one = 1u64.to_ne_bytes();
    for (_, fd) in fds {
        // SAFETY: `fd` is an open descriptor owned by `fds`; the buffer is 8 bytes, as an eventfd
        // write takes. A full counter (EAGAIN: the loop has not read it yet) needs no more.
        unsafe { libc::write(std::os::fd::AsRawFd::as_raw_fd(fd), one.as_ptr().cast(), 8) };
    }
}

/// `rmqlog._aio.<name>(*args)`: the coroutines and async iterators are written in Python.
pub(super) fn call<'py>(
    py: Python<'py>,
    name: &str,
    args: impl PyCallArgs<'py>,
) -> PyResult<Bound<'py, PyAny>> {
    static MODULE: PyOnceLock<Py<PyModule>> = PyOnceLock::new();
    let module = MODULE.get_or_try_init(py, || py.import("rmqlog._aio").map(Bound::unbind))?;
    module.bind(py).getattr(name)?.call1(args)
}
