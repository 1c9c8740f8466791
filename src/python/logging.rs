//! Rust `log` records routed to Python's `logging` (logger `rmqlog`).
//!
//! Records go through a queue to one delivery thread, so no Python code ever runs on a thread
//! that holds a lock of the log (a record can be logged under the writer lock).

use std::sync::mpsc::{self, Sender};
use std::sync::{Mutex, OnceLock};

use log::{Level, LevelFilter, Log, Metadata, Record};
use pyo3::prelude::*;

struct Bridge {
    queue: Mutex<Sender<(Level, String)>>,
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
        if self.enabled(record.metadata()) {
            let queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
            let _ = queue.send((record.level(), record.args().to_string()));
        }
    }

    fn flush(&self) {}
}

/// Installs the bridge once per process (a no-op if another logger is installed already).
pub fn install() {
    if BRIDGE.get().is_some() {
        return;
    }
    let (tx, rx) = mpsc::channel::<(Level, String)>();
    let spawned = std::thread::Builder::new()
        .name("rmqlog-logging".into())
        .spawn(move || {
            for (level, msg) in rx {
                Python::attach(|py| {
                    let logged = py
                        .import("logging")
                        .and_then(|l| l.call_method1("getLogger", ("rmqlog",)))
                        .and_then(|l| l.call_method1("log", (python_level(level), msg)));
                    if let Err(e) = logged {
                        e.print(py);
                    }
                });
            }
        });
    if spawned.is_err() {
        return;
    }
    let bridge = BRIDGE.get_or_init(|| Bridge {
        queue: Mutex::new(tx),
    });
    if log::set_logger(bridge).is_ok() {
        log::set_max_level(LevelFilter::Info);
    }
}
