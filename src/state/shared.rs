//! What a shared writer's state adds (`exclusive=False`; the protocol is in `shared.rs`).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::open::lock::{MaintenanceLock, OwnerLock};

/// What a shared writer's state adds.
#[derive(Debug)]
pub(crate) struct Shared {
    /// The directory the writers serialise their opens and closes in (`rmqlog.join`).
    pub first_dir: PathBuf,
    /// Whether this open does the store's background work now.
    pub owner: OwnerLock,
    /// Held while this open changes the store's segments or checkpoint.
    pub maintenance: MaintenanceLock,
    /// The control page's generation this open's segment list is as of.
    pub(crate) seen: AtomicU64,
    /// The control page's epoch when this open joined (or made) it: it stays while any shared
    /// writer is open, and a page showing another is not the one the writers share.
    pub epoch: u64,
}

impl Shared {
    pub fn new(first_dir: &Path, generation: u64, epoch: u64) -> Shared {
        Shared {
            epoch,
            first_dir: first_dir.to_path_buf(),
            owner: OwnerLock::new(first_dir),
            maintenance: MaintenanceLock::new(first_dir),
            seen: AtomicU64::new(generation),
        }
    }

    /// This open bumped the generation from `to - 1` to `to` by a change of its own list: its
    /// view stays current unless another open changed the list meanwhile.
    pub fn own_change(&self, to: u64) {
        let _ =
            self.seen
                .compare_exchange(to.wrapping_sub(1), to, Ordering::AcqRel, Ordering::Relaxed);
    }
}
