//! `rmqlog.tier_stores`: the stores of a fleet, under one prefix of an object store.

use pyo3::prelude::*;

use super::options::tier_settings;

/// tier_stores(url, tier_options=None) -> list[str]
/// --
///
/// The tier URLs of the stores ``url`` names, sorted: ``url`` itself when a store publishes
/// there; else the stores directly under it (one level); with ``*`` or ``?`` in its last part,
/// the stores directly under its parent whose names match. ``tier_options`` are the object
/// store's settings (endpoint, region, keys), as for ``CommitLog``. No store there raises
/// ``StoreNotFoundError``.
#[pyfunction]
#[pyo3(signature = (url, tier_options = None))]
pub fn tier_stores(
    py: Python<'_>,
    url: &str,
    tier_options: Option<&Bound<'_, PyAny>>,
) -> PyResult<Vec<String>> {
    let settings = tier_settings(tier_options)?;
    Ok(py.detach(|| crate::tier_stores(url, &settings))?)
}
