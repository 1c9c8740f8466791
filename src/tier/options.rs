//! The tier options of a store, and what a tier URL looks like.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use crate::error::{Error, Result};

/// What the tier options ask, as [`crate::Options`] holds them.
///
/// S3 over HTTPS is rustls: the first S3 tier the process opens installs ring as rustls's
/// process-wide crypto provider, unless the program installed one before (it is kept; rustls
/// refuses one installed after). Roots: the system's, or `SSL_CERT_FILE` / `SSL_CERT_DIR`.
#[derive(Debug, Clone, PartialEq)]
pub struct TierOptions {
    /// `s3://bucket/prefix` or `file:///directory`.
    pub url: String,
    /// Passed to the store's builder (S3: `endpoint`, `region`, credentials, `allow_http`...).
    pub options: BTreeMap<String, String>,
    /// A sealed segment is uploaded once it is this old (zero: at once).
    pub after: Duration,
    /// Local copies of uploaded segments go once they are this old.
    pub local_retention: Option<Duration>,
    /// ... or, oldest first, while the local segments hold more than this.
    pub local_retention_bytes: Option<u64>,
    /// Bound of the local cache of remote segments.
    pub cache_bytes: u64,
    /// Where the cache's directory goes (the system's temp directory if `None`).
    pub cache_dir: Option<PathBuf>,
}

impl TierOptions {
    /// A tier at `url`: uploads at once, local copies kept, a 1 GiB cache in the temp directory.
    pub fn new(url: impl Into<String>) -> TierOptions {
        TierOptions {
            url: url.into(),
            options: BTreeMap::new(),
            after: Duration::ZERO,
            local_retention: None,
            local_retention_bytes: None,
            cache_bytes: 1 << 30,
            cache_dir: None,
        }
    }

    pub(crate) fn validate(&self) -> Result<()> {
        if !is_url(&self.url) {
            return Err(Error::invalid(format!(
                "tier_url must be a URL such as s3://bucket/prefix or file:///directory, got {:?}",
                self.url
            )));
        }
        if self.cache_bytes == 0 {
            return Err(Error::invalid("tier_cache_bytes must be at least 1"));
        }
        #[cfg(feature = "tier")]
        return super::remote::check(&self.url, &self.options);
        #[cfg(not(feature = "tier"))]
        return Err(Error::feature_missing(
            "tier",
            format!("the tier {:?}", self.url),
        ));
    }
}

/// Whether `path` is a tier URL (`scheme://...`) rather than a directory.
pub(crate) fn is_url(path: &str) -> bool {
    path.split_once("://").is_some_and(|(scheme, _)| {
        !scheme.is_empty() && scheme.chars().all(|c| c.is_ascii_alphanumeric())
    })
}
