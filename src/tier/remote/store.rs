//! The object store a tier URL names: `s3://bucket/prefix` (and S3-compatible stores through the
//! `endpoint` option) or `file:///directory`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::local::LocalFileSystem;
use object_store::path::Path as ObjPath;
use object_store::{ClientConfigKey, ObjectStore, RetryConfig};

use crate::error::{Error, Result};

/// One store and the prefix under which a log's objects live.
#[derive(Debug, Clone)]
pub(crate) struct Remote {
    pub store: Arc<dyn ObjectStore>,
    pub prefix: ObjPath,
    /// The URL as given, without a trailing `/`: how messages name the tier.
    pub url: String,
    /// Whether objects carry user metadata (S3 does; a local directory does not).
    pub metadata: bool,
    /// S3 with no credentials given (options or environment): object_store asks the instance
    /// metadata service for them, and a failure says how to give them instead.
    pub implicit_credentials: bool,
    /// A `file://` tier's directory.
    pub dir: Option<std::path::PathBuf>,
    /// A `file://` tier on a local filesystem: scans map its objects where they lie
    /// (`in_place.rs`).
    pub in_place: bool,
}

impl Remote {
    /// Where the object `name` (`/`-separated parts) lives under the prefix.
    pub fn path(&self, name: &str) -> ObjPath {
        name.split('/')
            .fold(self.prefix.clone(), |path, part| path.join(part))
    }

    /// The object `name` as a URL, for messages.
    pub fn url_of(&self, name: &str) -> String {
        format!("{}/{name}", self.url)
    }

    /// A failed request `op` on `object`, as the error it is.
    pub fn failed(
        &self,
        op: &'static str,
        object: impl Into<String>,
        e: object_store::Error,
    ) -> Error {
        let mut reason = with_causes(&e);
        if self.implicit_credentials {
            reason.push_str(CREDENTIALS_HINT);
        }
        Error::tier(op, object, reason)
    }
}

/// `e`'s message and its causes': object_store's can stop at "error sending request" or "builder
/// error", with why (a refused connection, a certificate not trusted, no CA certificates) further
/// down the chain. A cause whose text is already there is left out.
fn with_causes(e: &object_store::Error) -> String {
    let mut reason = e.to_string();
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        let text = c.to_string();
        if !reason.contains(&text) {
            reason.push_str(": ");
            reason.push_str(&text);
        }
        cause = c.source();
    }
    reason
}

/// The `op` of the error of an S3 client that cannot be built for want of TLS roots.
const NO_TLS_ROOTS: &str = "building its HTTPS client";

/// What a failed request of an S3 client with no credentials given adds.
const CREDENTIALS_HINT: &str = ". No S3 credentials were given, so they were looked up from the \
    instance metadata service (as on EC2). Elsewhere give them: tier_options access_key_id and \
    secret_access_key (Spark: options tier.access_key_id, tier.secret_access_key), or the \
    environment variables AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY; for an S3-compatible \
    server also endpoint (and allow_http=true for http://)";

/// Where a tier URL points, found without touching anything (no request, no directory made).
enum Target {
    /// An S3 client (built, not connected), the prefix inside its bucket, and whether no
    /// credentials were given.
    S3(Arc<dyn ObjectStore>, ObjPath, bool),
    File(PathBuf),
}

/// Checks `url` and `options` as [`connect`] would, with no side effect: a bad tier is refused
/// before a store directory is created. A client that cannot be built for want of TLS roots on
/// this machine is not the options' fault: [`connect`] refuses it, not this.
pub(crate) fn check(url: &str, options: &BTreeMap<String, String>) -> Result<()> {
    match target(url.trim_end_matches('/'), options) {
        Ok(_)
        | Err(Error::Tier {
            op: NO_TLS_ROOTS, ..
        }) => Ok(()),
        Err(e) => Err(e),
    }
}

fn target(url: &str, options: &BTreeMap<String, String>) -> Result<Target> {
    let parsed = url::Url::parse(url).map_err(|e| {
        Error::config(format!(
            "tier_url {url:?} is not a URL ({e}); expected s3://bucket/prefix or file:///directory"
        ))
    })?;
    match parsed.scheme() {
        "s3" | "s3a" => {
            let (store, implicit) = s3(url, &parsed, options)?;
            Ok(Target::S3(store, prefix_of(&parsed)?, implicit))
        }
        "file" => {
            if let Some(k) = options.keys().next() {
                return Err(Error::config(format!(
                    "tier_options {k:?} is not accepted for a file:// tier (it takes none)"
                )));
            }
            let dir = parsed.to_file_path().map_err(|()| {
                Error::config(format!("tier_url {url:?} names no local directory"))
            })?;
            Ok(Target::File(dir))
        }
        other => Err(Error::config(format!(
            "tier_url scheme {other:?} is not supported; expected s3:// (or s3a://) or file://"
        ))),
    }
}

/// Builds the store `url` names. `options` go to the store's builder (S3: `endpoint`,
/// `region`, `access_key_id`, `allow_http`, ...); credentials not given come from the
/// environment as the AWS tools read them. `create`: a `file://` directory is created if missing
/// (a writer's tier).
pub(crate) fn connect(
    url: &str,
    options: &BTreeMap<String, String>,
    create: bool,
) -> Result<Remote> {
    let url = url.trim_end_matches('/').to_string();
    let mut local = None;
    let mut implicit_credentials = false;
    let (store, prefix, metadata): (Arc<dyn ObjectStore>, ObjPath, bool) =
        match target(&url, options)? {
            Target::S3(store, prefix, implicit) => {
                implicit_credentials = implicit;
                (store, prefix, true)
            }
            Target::File(dir) => {
                local = Some(dir.clone());
                if create {
                    std::fs::create_dir_all(&dir)
                        .map_err(|e| Error::io("creating the tier directory", &dir, e))?;
                }
                // A reader of a tier whose directory is gone opens; what it lists is then
                // missing, as objects deleted from a bucket are.
                let prefix = ObjPath::from_absolute_path(&dir)
                    .map_err(|e| Error::config(format!("tier_url {url:?}: {e}")))?;
                // Synced: a local copy is deleted once its object is written, and must not be the
                // only copy a power loss leaves.
                let fs = LocalFileSystem::new().with_fsync(true);
                (Arc::new(fs), prefix, false)
            }
        };
    let in_place = local.as_deref().is_some_and(maps_in_place);
    Ok(Remote {
        store,
        prefix,
        url,
        metadata,
        implicit_credentials,
        dir: local,
        in_place,
    })
}

/// `statfs` magic numbers of the local filesystems objects are mapped on (linux/magic.h).
const LOCAL_FILESYSTEMS: &[(i64, &str)] = &[
    (0xEF53, "ext2/3/4"),
    (0x5846_5342, "xfs"),
    (0x9123_683E, "btrfs"),
    (0x0102_1994, "tmpfs"),
    (0xF2F5_2010, "f2fs"),
    (0x2FC1_2FC1, "zfs"),
    (0x794C_7630, "overlayfs"),
];

/// Whether the objects of a `file://` tier in `dir` are mapped where they lie (`in_place.rs`):
/// whether `dir` is on a local filesystem.
fn maps_in_place(dir: &Path) -> bool {
    rustix::fs::statfs(dir).is_ok_and(|s| {
        LOCAL_FILESYSTEMS
            .iter()
            .any(|&(magic, _)| magic == s.f_type)
    })
}

fn prefix_of(url: &url::Url) -> Result<ObjPath> {
    ObjPath::parse(url.path().trim_matches('/'))
        .map_err(|e| Error::config(format!("tier_url {url}: bad prefix ({e})")))
}

/// An S3 client that fails fast when the store is unreachable: the uploader retries on its own
/// schedule (with backoff), and a read should say the store is down, not hang for minutes. With
/// it, whether no credentials were given (object_store then asks the instance metadata service).
fn s3(
    url: &str,
    parsed: &url::Url,
    options: &BTreeMap<String, String>,
) -> Result<(Arc<dyn ObjectStore>, bool)> {
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(Error::config(format!(
            "tier_url {url:?} names no bucket: expected s3://bucket/prefix"
        )));
    }
    let retry = RetryConfig {
        max_retries: 2,
        retry_timeout: Duration::from_secs(10),
        ..RetryConfig::default()
    };
    let mut b = AmazonS3Builder::from_env().with_url(url).with_retry(retry);
    // The timeouts as settings: with_client_options would replace every client setting read
    // from the environment (AWS_ALLOW_HTTP, AWS_PROXY_URL, ...). The environment's own win.
    for (key, value) in [
        (ClientConfigKey::ConnectTimeout, "2s"),
        (ClientConfigKey::Timeout, "120s"),
    ] {
        let var = format!("AWS_{}", key.as_ref().to_ascii_uppercase());
        if std::env::var_os(var).is_none() {
            b = b.with_config(AmazonS3ConfigKey::Client(key), value);
        }
    }
    for (k, v) in options {
        let key: AmazonS3ConfigKey = k.parse().map_err(|_| {
            Error::config(format!(
                "tier_options key {k:?} is not an S3 option; accepted: endpoint, region, \
                 access_key_id, secret_access_key, session_token, allow_http, \
                 virtual_hosted_style_request, ... (object_store's AmazonS3ConfigKey names)"
            ))
        })?;
        b = b.with_config(key, v.clone());
    }
    let given = |k: AmazonS3ConfigKey| b.get_config_value(&k).is_some_and(|v| !v.is_empty());
    // object_store's order: static keys, web identity, the container's endpoints, else the
    // instance metadata service; unsigned requests need none.
    let implicit = !(given(AmazonS3ConfigKey::AccessKeyId)
        || given(AmazonS3ConfigKey::SecretAccessKey)
        || given(AmazonS3ConfigKey::WebIdentityTokenFile)
        || given(AmazonS3ConfigKey::ContainerCredentialsRelativeUri)
        || given(AmazonS3ConfigKey::ContainerCredentialsFullUri)
        || b.get_config_value(&AmazonS3ConfigKey::SkipSignature)
            .is_some_and(|v| v.eq_ignore_ascii_case("true")));
    // reqwest takes its TLS provider from rustls's process default: ring. One the program
    // installed before is kept.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let store = b.clone().build().map_err(|e| {
        let reason = with_causes(&e);
        // Built again without certificate checks (where they were on, as by default), it needs no
        // TLS roots: if that builds, the options are right and the roots are what failed
        // (SSL_CERT_FILE naming no certificate, no CA bundle on the machine).
        let key = AmazonS3ConfigKey::Client(ClientConfigKey::AllowInvalidCertificates);
        let checks = b.get_config_value(&key).as_deref() == Some("false");
        if checks && b.with_config(key, "true").build().is_ok() {
            return Error::tier(
                NO_TLS_ROOTS,
                url,
                format!(
                    "{reason}. The client checks certificates against the system's CA \
                     certificates, or those of SSL_CERT_FILE and SSL_CERT_DIR where either is set"
                ),
            );
        }
        Error::config(format!("tier_url {url:?}: {reason}"))
    })?;
    Ok((Arc::new(store), implicit))
}
