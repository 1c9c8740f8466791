//! Directory state changes, delivered on a background thread so that no lock of the log is held
//! while they are logged or handed to the caller's callback.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crate::error::Result;
use crate::options::EventFn;
use crate::state::dirs::DirEvent;
use crate::sync::locked;

/// The event queue and its delivery thread (started on the first event).
pub(crate) struct Events {
    callback: Option<Arc<EventFn>>,
    queue: Mutex<Option<(Sender<DirEvent>, JoinHandle<()>)>>,
}

impl std::fmt::Debug for Events {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Events")
            .field("callback", &self.callback.is_some())
            .finish()
    }
}

impl Events {
    pub fn start(callback: Option<Arc<EventFn>>) -> Result<Events> {
        Ok(Events {
            callback,
            queue: Mutex::new(None),
        })
    }

    /// Queues an event; never blocks on the delivery.
    pub fn send(&self, ev: DirEvent) {
        let mut q = locked(&self.queue);
        if q.is_none() {
            let (tx, rx) = mpsc::channel::<DirEvent>();
            let callback = self.callback.clone();
            let spawned = std::thread::Builder::new()
                .name("rmqlog-events".into())
                .spawn(move || {
                    for ev in rx {
                        log::warn!(
                            "directory {} is now {} (was {}): {}",
                            ev.path.display(),
                            ev.new.as_str(),
                            ev.old.as_str(),
                            ev.reason
                        );
                        if let Some(cb) = &callback {
                            if catch_unwind(AssertUnwindSafe(|| cb(&ev))).is_err() {
                                log::error!("the on_dir_event callback panicked; ignored");
                            }
                        }
                    }
                });
            match spawned {
                Ok(thread) => *q = Some((tx, thread)),
                Err(e) => {
                    log::error!("cannot start the event thread ({e}); event dropped: {ev:?}");
                    return;
                }
            }
        }
        if let Some((tx, _)) = q.as_ref() {
            let _ = tx.send(ev);
        }
    }

    /// Delivers what is queued, then stops the thread.
    pub fn stop(&self) {
        let q = locked(&self.queue).take();
        if let Some((tx, thread)) = q {
            drop(tx);
            if thread.join().is_err() {
                log::error!("the event thread panicked");
            }
        }
    }

    /// In a forked child: the thread does not exist here; drop the handle without joining.
    pub fn forget(&self) {
        std::mem::forget(locked(&self.queue).take());
    }
}
