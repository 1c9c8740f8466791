//! The store's directory paths as given: checked, made absolute, compared, created durably.

use std::path::{Path, PathBuf};

use crate::error::{Error, IoContext, Result};
use crate::options::Options;
use crate::storage::fs::sync_dir;

/// Checks paths without touching the disk: non-empty, UTF-8, no duplicates, no regular files.
pub(crate) fn check_paths<P: AsRef<Path>>(paths: &[P]) -> Result<Vec<PathBuf>> {
    if paths.is_empty() {
        return Err(Error::invalid(
            "paths is empty: give at least one directory (a path, or several)",
        ));
    }
    let mut out: Vec<PathBuf> = Vec::with_capacity(paths.len());
    for p in paths {
        let p = p.as_ref();
        if p.as_os_str().is_empty() {
            return Err(Error::invalid("paths contains an empty path"));
        }
        if p.to_str().is_none() {
            return Err(Error::invalid(format!(
                "path {} is not valid UTF-8",
                p.display()
            )));
        }
        let abs = normalize(&std::path::absolute(p).ctx("resolving", p)?);
        if abs.exists() && !abs.is_dir() {
            return Err(Error::invalid(format!(
                "path {} exists and is not a directory; paths must be directories",
                abs.display()
            )));
        }
        let same = |o: &PathBuf| o == &abs || same_dir(o, &abs);
        if let Some(other) = out.iter().find(|o| same(o)) {
            return Err(Error::config(format!(
                "directory {} is given twice (as {} and {}); give each directory once",
                abs.display(),
                other.display(),
                p.display()
            )));
        }
        out.push(abs);
    }
    Ok(out)
}

/// `a/./b/../c` -> `a/c`, without touching the disk.
pub(crate) fn normalize(p: &Path) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// Two paths that resolve to one directory through symlinks, existing or not yet created.
fn same_dir(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => follow_links(a) == follow_links(b),
    }
}

/// `p` with its final symlinks followed (a dangling link names the directory it will create).
fn follow_links(p: &Path) -> PathBuf {
    let mut p = p.to_path_buf();
    for _ in 0..40 {
        match std::fs::read_link(&p) {
            Ok(target) => {
                let base = p.parent().map(Path::to_path_buf).unwrap_or_default();
                p = normalize(&base.join(target));
            }
            Err(_) => break,
        }
    }
    p
}

/// Makes the paths of per-directory ratios absolute, so they match the store's directories.
pub(crate) fn absolute_overrides(opts: &mut Options) -> Result<()> {
    for (p, _) in &mut opts.max_used_ratio.overrides {
        *p = normalize(&std::path::absolute(&*p).ctx("resolving", &*p)?);
    }
    for (p, _) in &mut opts.force_clean_ratio.overrides {
        *p = normalize(&std::path::absolute(&*p).ctx("resolving", &*p)?);
    }
    for p in &mut opts.accept_lost {
        *p = normalize(&std::path::absolute(&*p).ctx("resolving", &*p)?);
    }
    Ok(())
}

/// Creates a directory and its missing parents, syncing each new entry into its parent so a
/// power loss cannot take the store's directory away with the segments synced inside it.
pub(crate) fn create_dir_durably(path: &Path) -> Result<()> {
    let mut missing = Vec::new();
    let mut at = Some(path);
    while let Some(p) = at.filter(|p| !p.exists()) {
        missing.push(p.to_path_buf());
        at = p.parent();
    }
    std::fs::create_dir_all(path).ctx("creating directory", path)?;
    for dir in missing.iter().rev() {
        if let Some(parent) = dir.parent() {
            sync_dir(parent)?;
        }
    }
    Ok(())
}
