//! A named background thread that runs a task every interval, stops promptly when dropped (no
//! waiting out its interval) and is joined.

use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::error::{Error, Result};

/// What the task tells the loop.
pub(crate) enum Next {
    /// The next run after the thread's interval.
    Continue,
    /// The next run after this long (a thread with nothing to do sleeps longer).
    After(Duration),
    Stop,
}

/// The running thread; dropping it stops and joins it.
#[derive(Debug)]
pub(crate) struct Periodic {
    name: &'static str,
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Periodic {
    /// Runs `task` every `interval` on a thread named `name` until dropped or told to stop.
    pub fn start(
        name: &'static str,
        interval: Duration,
        mut task: impl FnMut() -> Next + Send + 'static,
    ) -> Result<Periodic> {
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                let mut wait = interval;
                loop {
                    match stopped.recv_timeout(wait) {
                        Err(RecvTimeoutError::Timeout) => {}
                        _ => return,
                    }
                    wait = match task() {
                        Next::Continue => interval,
                        Next::After(d) => d,
                        Next::Stop => return,
                    };
                }
            })
            .map_err(|e| Error::io("starting a background thread", name, e))?;
        Ok(Periodic {
            name,
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}

impl Drop for Periodic {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            if t.join().is_err() {
                log::error!("the {} thread panicked", self.name);
            }
        }
    }
}
