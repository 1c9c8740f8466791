//! A `file://` tier on a local filesystem: a scan maps a segment's object where it lies, checked
//! against the manifest's length and CRC32C, instead of copying it into the cache (the copy cost
//! a scan as much CPU as reading the records did).
//!
//! Safe to map because an object is written once under a new name and never rewritten or
//! truncated by rmqlog (uploads create, retention unlinks), and a local filesystem keeps an
//! unlinked file's pages while they are mapped. A network filesystem does not promise that (a
//! file deleted by another client can fault when a page is read), so there objects are copied.

use std::path::Path;
use std::sync::Arc;

use super::Tier;
use crate::error::{Error, Result};
use crate::storage::mapping::Mapping;
use crate::tier::manifest::{object_name, Entry};

impl Tier {
    /// Segment `e`'s object mapped where it lies, once its length and CRC32C are the manifest's.
    pub(super) fn map_in_place(&self, dir: &Path, e: &Entry) -> Result<Arc<Mapping>> {
        let name = object_name(e.start);
        let map = match Mapping::open_read_only(&dir.join(&name), e.size) {
            Ok(map) => map,
            Err(err) if err.is_not_found() => return Err(self.missing(e)),
            Err(Error::Corruption { reason, .. }) => {
                return Err(Error::corruption(
                    Some(self.object_url(e.start).into()),
                    Some(e.start),
                    format!("the object does not match the manifest: {reason}"),
                ))
            }
            Err(err) => return Err(err),
        };
        let crc = crc32c::crc32c(map.bytes(0, map.len()));
        super::fetch::check_object(&self.remote.url_of(&name), e, e.size, crc)?;
        Ok(Arc::new(map))
    }
}
