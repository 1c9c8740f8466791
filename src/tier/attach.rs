//! Joining a store and its tier at open: which tier (given or recorded), which manifest, and
//! where the log starts when only the tier knows; and a tier opened alone, by its URL. (A
//! listing's remote segments: `layout::with_remote`.)

use std::path::PathBuf;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::options::Options;
use crate::storage::checkpoint::Checkpoint;
use crate::tier::manifest::{self, Manifest};
use crate::tier::{Tier, TierOptions};

/// The tier of a store being opened: as `opts.tier` gives it, or as the checkpoint recorded it
/// (a store remembers its tier; credentials come from the environment then). `dirs`: where the
/// manifest's local copy is. `writer`: a `file://` directory may be created.
pub(crate) fn open_tier(
    opts: &Options,
    ckpt: Option<&Checkpoint>,
    dirs: &[PathBuf],
    store_id: &str,
    writer: bool,
) -> Result<Option<Arc<Tier>>> {
    let recorded = ckpt.and_then(|c| c.tier.as_ref());
    let defaults;
    let given = match (&opts.tier, recorded) {
        (Some(t), Some(r)) if t.url.trim_end_matches('/') != r.url && r.manifest_version > 0 => {
            return Err(Error::config(format!(
                "tier_url {:?} is not this store's tier: its sealed segments are in {} (manifest \
                 version {}); a store keeps one tier",
                t.url, r.url, r.manifest_version
            )))
        }
        (Some(t), _) => t,
        (None, Some(r)) => {
            defaults = TierOptions::new(r.url.clone());
            &defaults
        }
        (None, None) => return Ok(None),
    };
    let manifest = manifest::load_local(dirs).unwrap_or_else(|| Manifest::empty(store_id));
    if manifest.store_id != store_id {
        return Err(Error::config(format!(
            "the tier manifest copy in the store's directories belongs to store {}, not {store_id}",
            manifest.store_id
        )));
    }
    if let Some(r) = recorded.filter(|r| r.manifest_version > manifest.version) {
        return Err(Error::corruption(
            None,
            None,
            format!(
                "the checkpoint records tier manifest version {}, but the newest copy of the \
                 manifest ({}) in the store's directories is version {}",
                r.manifest_version,
                manifest::LOCAL_COPY,
                manifest.version
            ),
        ));
    }
    let tier = Tier::new(
        &given.url,
        &given.options,
        given.cache_dir.as_deref(),
        given.cache_bytes,
        writer,
        manifest,
    )?;
    Ok(Some(Arc::new(tier)))
}

/// A writer opening a store whose checkpoint is lost does not know where its log starts: the
/// tier's manifest says, so it must be read (its segments then join the list). Without it the
/// remote segments would read as below the head, and be deleted.
pub(crate) fn learn_head(tier: &Tier, store_id: &str) -> Result<()> {
    let url = &tier.remote.url;
    let remote = tier.load_remote_manifest().map_err(|e| {
        Error::config(format!(
            "the store's checkpoint (rmqlog.meta) is missing, so where its log starts is known \
             only to its tier, and the tier {url} cannot be read: {e}; open it once the tier \
             answers"
        ))
    })?;
    match remote {
        Some(m) if m.store_id != store_id => Err(Error::config(format!(
            "the tier {url} holds the log of another store ({}; this store is {store_id})",
            m.store_id
        ))),
        Some(m) if m.version > tier.manifest().version => {
            tier.set_manifest(m);
            Ok(())
        }
        _ => Ok(()),
    }
}

/// The tier at `url` for a read-only open of the tier alone, with its current manifest.
pub(crate) fn open_url(url: &str, opts: &Options) -> Result<Arc<Tier>> {
    let given = opts.tier.clone().unwrap_or_else(|| TierOptions::new(url));
    if given.url.trim_end_matches('/') != url.trim_end_matches('/') {
        return Err(Error::config(format!(
            "tier_url {:?} differs from the URL opened, {url:?}; give it once",
            given.url
        )));
    }
    let tier = Tier::new(
        url,
        &given.options,
        given.cache_dir.as_deref(),
        given.cache_bytes,
        false,
        Manifest::empty(""),
    )?;
    if let Some(dir) = tier.remote.dir.as_ref().filter(|d| !d.is_dir()) {
        return Err(Error::not_found(
            dir,
            " (the tier directory does not exist)",
        ));
    }
    let manifest = tier
        .load_remote_manifest()?
        .ok_or_else(|| Error::not_found(url, " (no rmqlog tier manifest under this prefix)"))?;
    tier.set_manifest(manifest);
    Ok(Arc::new(tier))
}
