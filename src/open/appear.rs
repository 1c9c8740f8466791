//! A read-only open of a store that does not exist yet waits for a writer to make it
//! (`Options::wait_for_store`), as a consumer subscribes before the first message.
//!
//! A store is made once a writer's open has written its metadata (`rmqlog.meta`, after the
//! directories, their identities and what recovery kept): a reader that took the directories
//! earlier could see one of several, or part of a store being restored file by file (segment
//! names sort before `rmqlog.meta`). A store whose metadata is lost everywhere is waited for to
//! the limit, then opened as any read-only open opens it.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::storage::checkpoint::CHECKPOINT_FILE;

/// How often the directories are looked at while waiting.
const POLL: Duration = Duration::from_millis(20);

/// Waits at most `limit` for `given` to hold a store; returns at once when they do, with whether
/// the limit passed first. Ends early with [`Error::Interrupted`] when the caller's signal check
/// says so (Ctrl-C in Python).
pub(crate) fn wait(given: &[PathBuf], limit: Duration) -> Result<bool> {
    let deadline = Instant::now() + limit;
    while !made(given) {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(true);
        }
        if crate::interrupt::interrupted() {
            return Err(Error::Interrupted);
        }
        std::thread::sleep(left.min(POLL));
    }
    Ok(false)
}

/// Whether every directory exists and one of them holds the store's metadata.
fn made(given: &[PathBuf]) -> bool {
    given.iter().all(|d| d.is_dir()) && given.iter().any(|d| d.join(CHECKPOINT_FILE).is_file())
}

/// `e`, the open's error after waiting out `limit`, saying so.
pub(crate) fn after_waiting(e: Error, limit: Duration) -> Error {
    match e {
        Error::StoreNotFound { path, detail } => Error::StoreNotFound {
            path,
            detail: format!(
                "{detail}; waited {} ms (wait_for_store) for a writer to make it",
                limit.as_millis()
            ),
        },
        e => e,
    }
}
