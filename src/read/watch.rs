//! Watching a store for others: one thread sleeps on the control page's futex on behalf of many
//! waiters that cannot block (the Python binding's asyncio coroutines), and tells them each time
//! something may have changed. They look for themselves (a wait with no time left, a poll); the
//! watch only says when to look again.
//!
//! A [`Watch`] stays registered in the page from [`Watch::new`] to its drop, so that every append
//! in every process bumps the futex word while it exists (see `shared/control.rs`): a waiter that
//! makes sure a watch exists before it looks misses no change after its look. It remembers the
//! word's value across [`Watch::sleep`]s, so a change between two sleeps is not missed either.
//!
//! Read-only followers: the watch takes in the writer's records and follows a new control page as
//! a waiting follower does (`wait.rs`); on a page it may not write, or with none, it cannot be
//! woken and reports a change every [`POLL`] instead (the waiters then look again, listing the
//! store as a waiting follower does).

// Only the Python binding watches (its asyncio waiters); the lean core builds it for its tests.
#![cfg_attr(not(feature = "python"), allow(dead_code))]

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::Result;
use crate::read::wait::{self, POLL};
use crate::shared::control::Control;
use crate::shared::futex::Woken;
use crate::state::State;

/// A registration on a store's control page, held across sleeps.
#[derive(Debug)]
pub(crate) struct Watch {
    state: Arc<State>,
    ctl: Arc<Control>,
    /// Whether `ctl` counts this watch among its waiters (a page this process may write).
    registered: bool,
    /// The futex word as of the last change reported.
    seq: u32,
    /// The process that registered: a forked child never unregisters its parent's watch.
    pid: u32,
}

impl Watch {
    /// Registers on the log's control page now: a change after this call wakes the watch.
    pub fn new(state: Arc<State>) -> Watch {
        let ctl = state.control_full();
        let registered = ctl.add_waiter();
        let seq = ctl.seq();
        Watch {
            state,
            ctl,
            registered,
            seq,
            pid: std::process::id(),
        }
    }

    /// Sleeps until something may have changed in the store (true: an append, a sync, a new
    /// segment list or writer, a close of this log, another page; for a follower that cannot be
    /// woken, every [`POLL`]) or `timeout` passes with nothing (false). `Error::Closed` once the
    /// log is closed; any other error is a follower's failed look at the store.
    pub fn sleep(&mut self, timeout: Option<Duration>) -> Result<bool> {
        let deadline = timeout.map(|t| Instant::now() + t);
        let state = Arc::clone(&self.state);
        let _waiting = state.enter_wait(); // a close wakes this thread
        loop {
            self.state.check_open()?;
            if self.follow_page() {
                return Ok(true);
            }
            let polling = !self.registered || !self.ctl.is_shared();
            if self.state.read_only && !polling {
                // Takes in the records (their CRCs checked here, not in the event loop), and a
                // new page a writer's open made (woken by the old one's retirement). A polling
                // follower's waiters list the store themselves.
                wait::catch_up(&self.state, &self.ctl)?;
                if self.follow_page() {
                    return Ok(true);
                }
            }
            let seq = self.ctl.seq();
            if seq != self.seq {
                self.seq = seq;
                return Ok(true);
            }
            let left = match deadline {
                Some(d) => match d.checked_duration_since(Instant::now()) {
                    Some(left) if !left.is_zero() => Some(left),
                    _ => return Ok(false),
                },
                None => None,
            };
            let slice = match (self.state.read_only, polling) {
                (true, true) => Some(POLL),
                // A follower looks at its page's file this often (see `wait.rs`).
                (true, false) => Some(wait::LOOK_AT_FILE),
                (false, _) => None,
            };
            let slice = match (slice, left) {
                (Some(s), Some(l)) => Some(s.min(l)),
                (s, l) => s.or(l),
            };
            if let Woken::TimedOut = self.ctl.sleep(self.seq, slice) {
                if self.state.read_only && polling {
                    return Ok(true); // the waiters look, as a polling follower does
                }
                if self.state.read_only && self.ctl.file_replaced() {
                    wait::follow_new_page(&self.state)?;
                }
            }
        }
    }

    /// Moves the registration to the log's current page if a follower found another (or a close
    /// let go of the store's); whether it did.
    fn follow_page(&mut self) -> bool {
        let current = self.state.control_full();
        if Arc::ptr_eq(&current, &self.ctl) {
            return false;
        }
        self.unregister();
        self.registered = current.add_waiter();
        self.seq = current.seq();
        self.ctl = current;
        true
    }

    fn unregister(&mut self) {
        if std::mem::take(&mut self.registered) && self.pid == std::process::id() {
            self.ctl.remove_waiter();
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.unregister();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{CommitLog, Options};

    #[test]
    fn an_append_in_another_thread_wakes_the_watch_and_a_close_ends_it() {
        let d = tempfile::tempdir().unwrap();
        let log = Arc::new(CommitLog::open(&[d.path()], Options::default()).unwrap());
        let mut watch = log.watch();
        assert!(
            !watch.sleep(Some(Duration::from_millis(20))).unwrap(),
            "nothing happened"
        );
        let writer = {
            let log = Arc::clone(&log);
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(30));
                log.append(b"one").unwrap();
            })
        };
        let t = Instant::now();
        assert!(watch.sleep(Some(Duration::from_secs(10))).unwrap());
        assert!(t.elapsed() < Duration::from_secs(5));
        writer.join().unwrap();
        // A change between two sleeps is reported by the next one.
        log.append(b"two").unwrap();
        assert!(watch.sleep(Some(Duration::ZERO)).unwrap());
        let closer = {
            let log = Arc::clone(&log);
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(30));
                log.close().unwrap();
            })
        };
        assert!(matches!(watch.sleep(None), Err(crate::Error::Closed)));
        closer.join().unwrap();
    }

    #[test]
    fn a_watch_counts_as_a_waiter_until_dropped() {
        let d = tempfile::tempdir().unwrap();
        let log = CommitLog::open(&[d.path()], Options::default()).unwrap();
        let ctl = log.state().control_full();
        assert_eq!(ctl.waiters(), 0);
        let watch = log.watch();
        assert_eq!(ctl.waiters(), 1);
        drop(watch);
        assert_eq!(ctl.waiters(), 0);
    }
}
