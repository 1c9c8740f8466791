//! Manifest versions in the object store: reading the current one, publishing the next, pruning
//! the old (the format and the local copy: `crate::tier::manifest`).

use std::path::PathBuf;

use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutPayload};

use super::store::Remote;
use crate::error::{Error, Result};
use crate::tier::manifest::{version_name, Manifest};

/// The object naming the current manifest version: a store publishes under a prefix once it exists.
pub(crate) const POINTER: &str = "manifest/CURRENT";

/// Reads the current manifest from the store; `None` when the tier holds none yet.
pub(crate) async fn load(remote: &Remote) -> Result<Option<Manifest>> {
    // The version the pointer names may be pruned between the two reads (two publications
    // meanwhile): the pointer is read again.
    let mut attempts = 0;
    loop {
        match load_once(remote).await {
            Err(Error::Tier { reason, .. }) if reason == PRUNED && attempts < 3 => attempts += 1,
            Err(Error::Tier { object, reason, .. }) if reason == PRUNED => {
                return Err(Error::corruption(
                    Some(PathBuf::from(remote.url_of(POINTER))),
                    None,
                    format!("the pointer names a manifest version that does not exist ({object})"),
                ))
            }
            other => return other,
        }
    }
}

/// The reason [`load_once`] gives when the version it was pointed at is gone.
const PRUNED: &str = "the manifest version the pointer named is gone (pruned)";

async fn load_once(remote: &Remote) -> Result<Option<Manifest>> {
    let Some(version) = pointer(remote).await? else {
        return Ok(None);
    };
    let name = version_name(version);
    let bytes = match remote.store.get(&remote.path(&name)).await {
        Ok(r) => r.bytes().await,
        Err(object_store::Error::NotFound { .. }) => {
            return Err(Error::tier("reading", remote.url_of(&name), PRUNED))
        }
        Err(e) => Err(e),
    }
    .map_err(|e| remote.failed("reading", remote.url_of(&name), e))?;
    let m = Manifest::decode(&bytes, &remote.url_of(&name))?;
    if m.version != version {
        return Err(Error::corruption(
            Some(PathBuf::from(remote.url_of(&name))),
            None,
            format!("manifest says version {}, its name {version}", m.version),
        ));
    }
    Ok(Some(m))
}

/// Makes `m` the current manifest: its version object first, then the pointer. The previous
/// version stays (a reader that has just read the old pointer can still read it); [`prune`]
/// deletes the one before.
///
/// `m` follows the version this writer last published or read: a pointer that names a later one
/// means another writer publishes under this prefix (another store, or a copy of this one), and
/// nothing is written. A version object is created, never overwritten, unless the pointer does
/// not name it (a leftover of an interrupted publication).
pub(crate) async fn publish(remote: &Remote, m: &Manifest) -> Result<()> {
    let follows = m.version - 1;
    let conflict = |current: u64| {
        Error::config(format!(
            "the tier {} has manifest version {current}, but this writer's is {follows}: another \
             writer ships to this prefix (another store, or a copy of this one); give each store \
             its own prefix",
            remote.url
        ))
    };
    if let Some(current) = pointer(remote).await?.filter(|c| *c > follows) {
        return Err(conflict(current));
    }
    let name = version_name(m.version);
    let path = remote.path(&name);
    let created = remote
        .store
        .put_opts(&path, PutPayload::from(m.encode()), PutMode::Create.into())
        .await;
    match created {
        Ok(_) => {}
        Err(object_store::Error::AlreadyExists { .. }) => {
            if let Some(current) = pointer(remote).await?.filter(|c| *c > follows) {
                return Err(conflict(current));
            }
            remote
                .store
                .put(&path, PutPayload::from(m.encode()))
                .await
                .map_err(|e| remote.failed("writing", remote.url_of(&name), e))?;
        }
        Err(e) => return Err(remote.failed("writing", remote.url_of(&name), e)),
    }
    remote
        .store
        .put(
            &remote.path(POINTER),
            PutPayload::from(format!("{}\n", m.version)),
        )
        .await
        .map_err(|e| remote.failed("writing", remote.url_of(POINTER), e))?;
    Ok(())
}

/// The version the pointer names, if there is one.
async fn pointer(remote: &Remote) -> Result<Option<u64>> {
    let bytes = match remote.store.get(&remote.path(POINTER)).await {
        Ok(r) => r.bytes().await,
        Err(object_store::Error::NotFound { .. }) => return Ok(None),
        Err(e) => Err(e),
    }
    .map_err(|e| remote.failed("reading", remote.url_of(POINTER), e))?;
    let text = String::from_utf8_lossy(&bytes);
    let version = text.trim().parse().map_err(|_| {
        Error::corruption(
            Some(PathBuf::from(remote.url_of(POINTER))),
            None,
            format!("the manifest pointer holds {text:?}, not a version number"),
        )
    })?;
    Ok(Some(version))
}

/// Deletes manifest versions older than `keep_from` (best effort: a leftover is harmless).
pub(crate) async fn prune(remote: &Remote, current: u64) {
    if let Some(v) = current.checked_sub(2).filter(|v| *v > 0) {
        let _ = remote.store.delete(&remote.path(&version_name(v))).await;
    }
}
