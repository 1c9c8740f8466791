//! The tier in a build without the cargo feature `tier`: a type with no value, so that every path
//! of the core that meets a tier compiles and provably never runs, and the errors that refuse
//! what would need one (a tier option, a tier URL, a store whose segments ship to a tier).

use std::path::PathBuf;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::options::Options;
use crate::storage::checkpoint::Checkpoint;
use crate::storage::mapping::Mapping;
use crate::tier::{Entry, Manifest};

/// The error for a call that needs the tier.
fn missing(what: String) -> Error {
    Error::feature_missing("tier", what)
}

/// No tier can be made in this build.
#[derive(Debug)]
pub(crate) enum Tier {}

impl Tier {
    pub fn manifest(&self) -> Arc<Manifest> {
        match *self {}
    }

    pub fn set_manifest(&self, _: Manifest) {
        match *self {}
    }

    pub fn take_newer_local_copy(&self, _: &[PathBuf]) {
        match *self {}
    }

    pub fn load_remote_manifest(&self) -> Result<Option<Manifest>> {
        match *self {}
    }

    pub fn url(&self) -> &str {
        match *self {}
    }

    pub fn object_url(&self, _: u64) -> String {
        match *self {}
    }

    pub fn map_whole(&self, _: &Entry) -> Result<Arc<Mapping>> {
        match *self {}
    }

    pub fn map_range(&self, _: &Entry, _: u64) -> Result<Arc<Mapping>> {
        match *self {}
    }

    pub fn map_span(&self, _: &Entry, _: u64, _: u64) -> Result<Arc<Mapping>> {
        match *self {}
    }

    pub fn prefetch(self: &Arc<Self>, _: &Entry) {
        match **self {}
    }

    pub fn forget_cached(&self, _: u64) {
        match *self {}
    }

    pub fn verify_object(&self, _: &Entry) -> Result<()> {
        match *self {}
    }

    pub fn close(&self) {
        match *self {}
    }
}

/// A store opened in this build has no tier: refused if the options give one, or if its
/// checkpoint records one (its sealed segments may be only in the object store, and a writer
/// would stop shipping them).
pub(crate) fn open_tier(
    opts: &Options,
    ckpt: Option<&Checkpoint>,
    dirs: &[PathBuf],
    _store_id: &str,
    _writer: bool,
) -> Result<Option<Arc<Tier>>> {
    if let Some(t) = &opts.tier {
        return Err(missing(format!("the tier {:?}", t.url)));
    }
    // Refused earlier, before the open changed anything; kept where the tier would be opened.
    super::guard::check_reachable(opts, ckpt, dirs)?;
    Ok(None)
}

pub(crate) fn learn_head(tier: &Tier, _: &str) -> Result<()> {
    match *tier {}
}

/// [`crate::tier_stores`]: needs the object store.
pub fn tier_stores(
    url: &str,
    _: &std::collections::BTreeMap<String, String>,
) -> Result<Vec<String>> {
    Err(missing(format!("listing the stores under {url:?}")))
}

pub(crate) fn open_url(url: &str, _: &Options) -> Result<Arc<Tier>> {
    Err(missing(format!("opening the tier URL {url:?}")))
}
