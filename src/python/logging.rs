//! Rust `log` records routed to Python's `logging` (logger `rmqlog`).
//!
//! Records go through a queue to one delivery thread, so no Python code ever runs on a thread
//! that holds a lock of the log (a record can be logged under the writer lock). The thread is
//! drained and stopped by an `atexit` hook, before the interpreter starts shutting down; records
//! logged after that go to stderr. A forked child has no delivery thread (nor may it take the
//! queue's lock, which a parent thread may have held at the fork): its warnings go to stderr.

use std::sync::mpsc::{self, Sender};
use std::sync::{Mutex, OnceLock};
use std::thread::JoinHandle;

use log::{Level, LevelFilter, Log, Metadata, Record};
use pyo3::prelude::*;

/// What goes through the queue: a record, or a request to say when all before it are delivered.
enum Message {
    Record(Level, String),
    Flushed(Sender<()>),
}

type Delivery = (Sender<Message>, JoinHandle<()>);

struct Bridge {
    delivery: Mutex<Option<Delivery>>,
    /// The fork generation the delivery thread runs in.
    generation: u64,
}

impl Bridge {
    /// The delivery queue and thread, `None` in a forked child (the thread is the parent's).
    fn delivery(&self) -> Option<std::sync::MutexGuard<'_, Option<Delivery>>> {
        (self.generation == crate::open::lock::fork_generation())
            .then(|| self.delivery.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

static BRIDGE: OnceLock<Bridge> = OnceLock::new();

fn python_level(level: Level) -> u32 {
    match level {
        Level::Error => 40,
        Level::Warn => 30,
        Level::Info => 20,
        Level::Debug | Level::Trace => 10,
    }
}

impl Log for Bridge {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        metadata.level() <= Level::Info && metadata.target().starts_with("rmqlog")
    }

    fn log(&self, record: &Record<'_>) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let delivery = self.delivery();
        match delivery.as_ref().and_then(|d| d.as_ref()) {
            Some((queue, _)) => {
                let _ = queue.send(Message::Record(record.level(), record.args().to_string()));
            }
            None if record.level() <= Level::Warn => eprintln!("rmqlog: {}", record.args()),
            None => {}
        }
    }

    fn flush(&self) {}
}

fn deliver(level: Level, msg: String) {
    let delivered = Python::try_attach(|py| {
        let logged = py
            .import("logging")
            .and_then(|l| l.call_method1("getLogger", ("rmqlog",)))
            .and_then(|l| l.call_method1("log", (python_level(level), &msg)));
        if let Err(e) = logged {
            e.print(py);
        }
    });
    if delivered.is_none() {
        eprintln!("rmqlog: {msg}");
    }
}

/// Installs the bridge once per process (a no-op if another logger is installed already).
pub fn install() {
    if BRIDGE.get().is_some() {
        return;
    }
    crate::open::lock::watch_forks();
    let (tx, rx) = mpsc::channel::<Message>();
    let Ok(thread) = std::thread::Builder::new()
        .name("rmqlog-logging".into())
        .spawn(move || {
            for message in rx {
                match message {
                    Message::Record(level, msg) => deliver(level, msg),
                    Message::Flushed(done) => {
                        let _ = done.send(());
                    }
                }
            }
        })
    else {
        return;
    };
    let bridge = BRIDGE.get_or_init(|| Bridge {
        delivery: Mutex::new(Some((tx, thread))),
        generation: crate::open::lock::fork_generation(),
    });
    if log::set_logger(bridge).is_ok() {
        log::set_max_level(LevelFilter::Info);
    }
}

/// Returns once every record logged before the call is delivered (the command line calls it
/// before its error line, so that line is the last).
#[pyfunction]
pub fn _flush_logging(py: Python<'_>) {
    let Some(delivery) = BRIDGE.get().and_then(Bridge::delivery) else {
        return;
    };
    let (done, delivered) = mpsc::channel();
    let queued = delivery
        .as_ref()
        .is_some_and(|(queue, _)| queue.send(Message::Flushed(done)).is_ok());
    drop(delivery);
    if queued {
        // The delivery thread needs the GIL to deliver what is queued.
        py.detach(move || {
            let _ = delivered.recv();
        });
    }
}

/// Delivers the queued records and stops the delivery thread (registered with `atexit`).
#[pyfunction]
pub fn _shutdown_logging(py: Python<'_>) {
    let delivery = BRIDGE
        .get()
        .and_then(Bridge::delivery)
        .and_then(|mut d| d.take());
    if let Some((queue, thread)) = delivery {
        drop(queue);
        // The thread needs the GIL to deliver what is queued.
        py.detach(|| {
            let _ = thread.join();
        });
    }
}
