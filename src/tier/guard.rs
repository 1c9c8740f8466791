//! What an open refuses before it changes anything: a store whose remote segments it could not
//! reach, so that they would drop out of the log.

use std::path::PathBuf;

use crate::error::{Error, Result};
use crate::options::Options;
use crate::storage::checkpoint::Checkpoint;
use crate::tier::manifest::{self, LOCAL_COPY};

/// Refuses `ckpt`'s store when this open cannot reach its tier:
/// - a store whose checkpoint is lost while `dirs` hold the manifest's local copy listing remote
///   segments, and no `tier_url` is given (the copy does not name the tier);
/// - in a build without the feature, also a store whose checkpoint records a tier.
pub(crate) fn check_reachable(
    opts: &Options,
    ckpt: Option<&Checkpoint>,
    dirs: &[PathBuf],
) -> Result<()> {
    let unnamed = match (ckpt, &opts.tier) {
        (None, None) => manifest::load_local(dirs).filter(|m| !m.segments.is_empty()),
        _ => None,
    };
    if cfg!(not(feature = "tier")) {
        if let Some(r) = ckpt.and_then(|c| c.tier.as_ref()) {
            return Err(Error::feature_missing(
                "tier",
                format!(
                    "this store ships its sealed segments to the tier {}, and opening it",
                    r.url
                ),
            ));
        }
        if let Some(m) = unnamed {
            return Err(Error::feature_missing(
                "tier",
                format!(
                    "this store keeps {} segments in a remote tier (its manifest copy {LOCAL_COPY} \
                     lists them), and opening it",
                    m.segments.len()
                ),
            ));
        }
    }
    match unnamed {
        Some(m) => Err(Error::config(format!(
            "the store's checkpoint (rmqlog.meta) is lost, and its tier manifest copy ({LOCAL_COPY}, \
             version {}) lists {} segments in a remote tier whose URL only the checkpoint recorded: \
             give it as tier_url, or they drop out of the log",
            m.version,
            m.segments.len()
        ))),
        None => Ok(()),
    }
}
