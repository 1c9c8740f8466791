//! Deleting what the manifest no longer lists: objects of segments wholly below the log's head
//! (left by a crash between a manifest and their deletion, or uploaded just before retention took
//! their segment), and manifest versions older than the previous one.

use futures::StreamExt;
use object_store::{ObjectStore, ObjectStoreExt};

use super::Tier;
use crate::error::Result;
use crate::tier::manifest::{named, Manifest, Named};

impl Tier {
    /// Deletes the leftovers under the prefix, given the current manifest `m`; how many went.
    pub async fn sweep(&self, m: &Manifest) -> Result<u64> {
        let remote = &self.remote;
        let prefix = (!remote.prefix.as_ref().is_empty()).then_some(&remote.prefix);
        let mut listing = remote.store.list(prefix);
        let mut stale = Vec::new();
        while let Some(meta) = listing.next().await {
            let meta = meta.map_err(|e| remote.failed("listing", remote.url.clone(), e))?;
            let location = meta.location.as_ref();
            let relative = match prefix {
                Some(p) => location
                    .strip_prefix(p.as_ref())
                    .map_or(location, |r| r.trim_start_matches('/')),
                None => location,
            };
            let gone = match named(relative) {
                Named::Segment(start) => {
                    start.saturating_add(meta.size) <= m.min_offset && m.get(start).is_none()
                }
                Named::Version(v) => v + 1 < m.version,
                Named::Other => false,
            };
            if gone {
                stale.push(meta.location);
            }
        }
        let mut n = 0;
        for location in stale {
            match remote.store.delete(&location).await {
                Ok(()) => n += 1,
                Err(e) => log::warn!("{}/{location} stays in the store: {e}", remote.url),
            }
        }
        Ok(n)
    }
}
