//! Fleets: many stores' tiers under one prefix (one store per machine, each shipping its sealed
//! segments to `s3://bucket/logs/<machine>`), found by listing the prefix, so that a reader of
//! the prefix reads them all.

use std::collections::BTreeMap;

use object_store::path::Path as ObjPath;
use object_store::{ObjectStore, ObjectStoreExt};

use futures::{StreamExt, TryStreamExt};

use crate::error::{Error, Result};
use crate::tier::remote::published::POINTER;
use crate::tier::remote::store::{self, Remote};

/// Pointer checks in flight at once while a prefix's stores are found.
const CHECKS_AT_ONCE: usize = 16;

/// The tier URLs of the stores `url` names, sorted:
/// - `url` itself, when a store publishes there;
/// - else the stores directly under it (`s3://bucket/logs` holds `logs/a` and `logs/b`; one
///   level, not deeper);
/// - with `*` or `?` in its last part (`s3://bucket/logs/web-*`), the stores directly under its
///   parent whose names match (`*`: any run of characters, `?`: one).
///
/// `options` are the object store's settings, as for a tier. No store there is
/// [`Error::StoreNotFound`].
pub fn tier_stores(url: &str, options: &BTreeMap<String, String>) -> Result<Vec<String>> {
    let url = url.trim_end_matches('/');
    let (base, pattern) = match url.rsplit_once('/') {
        Some((parent, last)) if last.contains(['*', '?']) => {
            (parent.trim_end_matches('/'), Some(last))
        }
        _ => (url, None),
    };
    let remote = store::connect(base, options, false)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::io("starting a runtime to list", url, e))?;
    let mut found = rt.block_on(async {
        if pattern.is_none() && publishes(&remote, &remote.prefix, url).await? {
            return Ok(vec![url.to_string()]);
        }
        let listed = remote
            .store
            .list_with_delimiter(Some(&remote.prefix))
            .await
            .map_err(|e| remote.failed("listing", base, e))?;
        let candidates = listed.common_prefixes.iter().filter_map(|child| {
            let name = child.filename()?;
            pattern
                .is_none_or(|p| matches(p, name))
                .then(|| (child, format!("{base}/{name}")))
        });
        // One request per candidate, several at once: a fleet may be hundreds of machines.
        let checked: Vec<(String, bool)> = futures::stream::iter(candidates)
            .map(|(child, url)| async {
                let yes = publishes(&remote, child, &url).await?;
                Ok::<_, Error>((url, yes))
            })
            .buffer_unordered(CHECKS_AT_ONCE)
            .try_collect()
            .await?;
        Ok::<_, Error>(
            checked
                .into_iter()
                .filter(|(_, yes)| *yes)
                .map(|(u, _)| u)
                .collect(),
        )
    })?;
    if found.is_empty() {
        let where_ = match pattern {
            Some(p) => format!("directly under {base} with a name matching {p:?}"),
            None => "there or directly under it".to_string(),
        };
        return Err(Error::not_found(
            url,
            format!(" (no rmqlog store publishes {where_}: none has {POINTER})"),
        ));
    }
    found.sort();
    Ok(found)
}

/// Whether a store publishes its manifest under `prefix` (its pointer object exists).
async fn publishes(remote: &Remote, prefix: &ObjPath, url: &str) -> Result<bool> {
    let pointer = POINTER
        .split('/')
        .fold(prefix.clone(), |path, part| path.join(part));
    match remote.store.head(&pointer).await {
        Ok(_) => Ok(true),
        Err(object_store::Error::NotFound { .. }) => Ok(false),
        Err(e) => Err(remote.failed("reading", format!("{url}/{POINTER}"), e)),
    }
}

/// Shell-style matching of one name: `*` any run of characters, `?` exactly one.
fn matches(pattern: &str, name: &str) -> bool {
    let (p, n): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
    // Greedy with backtracking to the last `*`: linear in practice, no recursion.
    let (mut i, mut j, mut star, mut mark) = (0, 0, None, 0);
    while j < n.len() {
        if i < p.len() && (p[i] == '?' || p[i] == n[j]) {
            (i, j) = (i + 1, j + 1);
        } else if i < p.len() && p[i] == '*' {
            (star, mark, i) = (Some(i), j, i + 1);
        } else if let Some(s) = star {
            (i, mark, j) = (s + 1, mark + 1, mark + 1);
        } else {
            return false;
        }
    }
    p[i..].iter().all(|&c| c == '*')
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn shell_patterns() {
        for (p, n, want) in [
            ("*", "a", true),
            ("*", "", true),
            ("web-*", "web-1", true),
            ("web-*", "db-1", false),
            ("w?b-*", "web-12", true),
            ("*-1", "web-1", true),
            ("*-1", "web-12", false),
            ("a*b*c", "axxbyyc", true),
            ("a*b*c", "axxbyy", false),
            ("?", "", false),
            ("ab", "abc", false),
        ] {
            assert_eq!(matches(p, n), want, "{p:?} on {n:?}");
        }
    }
}
