//! The object store side of the remote tier (cargo feature `tier`): sealed segments as objects,
//! the manifest versions that list them, and the local cache they are read through (Kafka
//! KIP-405, RocketMQ 5's tiered store). Knows nothing of the log's state: `crate::tier` joins the
//! two.
//!
//! - `store.rs`: the object store a `tier_url` names;
//! - `published.rs`: manifest versions, published atomically;
//! - `cache.rs`: the bounded local cache remote reads go through;
//! - `fetch.rs`: whole-segment downloads (scans) and range reads (point reads, parts of a
//!   segment);
//! - `in_place.rs`: a local `file://` tier's objects mapped where they lie instead of copied;
//! - `upload.rs`: one segment's upload, read back and checked before it counts;
//! - `sweep.rs`: deleting objects the manifest no longer lists.
//!
//! The one guarantee: an acknowledged record is local, remote, or both; never neither until
//! retention removes it. A local copy goes only after its object is verified and listed in a
//! published manifest, and only the local manifest copy and checkpoint that say so make it
//! remote-only for a reopen.

mod cache;
mod fetch;
mod in_place;
pub(crate) mod published;
pub(crate) mod store;
mod sweep;
mod upload;

use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use futures::future::Either;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use self::cache::Cache;
pub(crate) use self::store::check;
use self::store::Remote;
use crate::error::{Error, Result};
use crate::sync::locked;
use crate::tier::manifest::{self, Manifest};

/// Counters of the tier, in [`crate::StatsSnapshot`].
#[derive(Debug, Default)]
pub(crate) struct TierStats {
    /// Held by a status while it reads, and by the tier thread while a change becomes visible
    /// (the manifest, the segment list) together with the counters that count it: a status sees
    /// both or neither.
    pub shown: Mutex<()>,
    pub uploads: AtomicU64,
    pub uploaded_bytes: AtomicU64,
    pub upload_errors: AtomicU64,
    pub local_deleted: AtomicU64,
    pub remote_deleted: AtomicU64,
    pub downloads: AtomicU64,
    pub mapped_in_place: AtomicU64,
    pub range_reads: AtomicU64,
    pub fetched_bytes: AtomicU64,
    pub cache_hits: AtomicU64,
}

/// How the last round of uploads went.
#[derive(Debug, Clone, Default)]
pub(crate) struct Health {
    /// The last error, until a later round succeeds.
    pub last_error: Option<String>,
    /// Consecutive failed rounds (the backoff grows with it).
    pub failures: u32,
}

/// One log's tier: the store, its manifest, the cache, and the runtime its requests run on.
pub(crate) struct Tier {
    pub remote: Remote,
    rt: tokio::runtime::Runtime,
    manifest: Mutex<Arc<Manifest>>,
    cache: Cache,
    pub health: Mutex<Health>,
    pub stats: TierStats,
    /// Set by [`Tier::close`].
    closed: AtomicBool,
    /// The `rmqlog-prefetch` thread of [`Tier::prefetch`], joined by [`Tier::close`].
    prefetcher: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl std::fmt::Debug for Tier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tier")
            .field("url", &self.remote.url)
            .finish()
    }
}

impl Tier {
    /// Connects to the store `url` names (no request is made yet). `create`: a writer's tier
    /// (a missing `file://` directory is created).
    pub fn new(
        url: &str,
        options: &BTreeMap<String, String>,
        cache_dir: Option<&std::path::Path>,
        cache_bytes: u64,
        create: bool,
        manifest: Manifest,
    ) -> Result<Tier> {
        let remote = store::connect(url, options, create)?;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("rmqlog-tier-io")
            .enable_all()
            .build()
            .map_err(|e| Error::io("starting the tier's runtime", url, e))?;
        Ok(Tier {
            remote,
            rt,
            manifest: Mutex::new(Arc::new(manifest)),
            cache: Cache::create(cache_dir, cache_bytes)?,
            health: Mutex::new(Health::default()),
            stats: TierStats::default(),
            closed: AtomicBool::new(false),
            prefetcher: Mutex::new(None),
        })
    }

    /// Runs requests on the tier's runtime from any (non-async) thread; `Error::Closed` as soon
    /// as the log closes ([`Tier::close`]), whatever the store is doing (a hung request must not
    /// hold up `close`).
    pub fn block_on<T>(&self, f: impl Future<Output = Result<T>>) -> Result<T> {
        self.rt.block_on(async {
            let closed = async {
                while !self.closed.load(Ordering::Acquire) {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            };
            futures::pin_mut!(f, closed);
            match futures::future::select(f, closed).await {
                Either::Left((out, _)) => out,
                Either::Right(((), _)) => Err(Error::Closed),
            }
        })
    }

    /// Ends every request in flight and refuses new ones (the log is closing); a prefetch in
    /// flight ends with them and its thread is joined.
    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
        if let Some(running) = locked(&self.prefetcher).take() {
            let _ = running.join();
        }
    }

    /// The manifest as last published (or loaded).
    pub fn manifest(&self) -> Arc<Manifest> {
        Arc::clone(&locked(&self.manifest))
    }

    pub(crate) fn set_manifest(&self, m: Manifest) {
        *locked(&self.manifest) = Arc::new(m);
    }

    /// Takes a newer copy of the manifest from the store's directories (what the writer doing
    /// the uploads saved since this one was read).
    pub(crate) fn take_newer_local_copy(&self, dirs: &[PathBuf]) {
        if let Some(m) = manifest::load_local(dirs) {
            let current = self.manifest();
            if m.version > current.version && m.store_id == current.store_id {
                self.set_manifest(m);
            }
        }
    }

    /// Reads the current manifest from the store.
    pub fn load_remote_manifest(&self) -> Result<Option<Manifest>> {
        self.block_on(published::load(&self.remote))
    }

    /// The tier's URL (trailing `/` removed).
    pub fn url(&self) -> &str {
        &self.remote.url
    }

    /// The object URL of segment `start`, for messages and `SegmentInfo::path`.
    pub fn object_url(&self, start: u64) -> String {
        self.remote.url_of(&manifest::object_name(start))
    }

    pub fn cache_bytes(&self) -> u64 {
        self.cache.bytes()
    }

    pub(crate) fn count(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }
}
