//! One segment's upload: put as a single object with its length and CRC32C in the object's
//! metadata (where the store keeps metadata), then read back whole and checked. Only a checked
//! object goes into the manifest.

use std::sync::Arc;

use bytes::Bytes;
use object_store::{
    Attribute, Attributes, ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload,
};

use super::fetch::{check_object, each_chunk};
use super::Tier;
use crate::error::{Error, Result};
use crate::storage::mapping::Mapping;
use crate::storage::record::{decode, Slot};
use crate::tier::manifest::{object_name, Entry, SPLIT_EVERY};

/// A sealed segment's mapped bytes, lent to the upload without a copy.
struct Sealed(Arc<Mapping>);

impl AsRef<[u8]> for Sealed {
    fn as_ref(&self) -> &[u8] {
        // A sealed segment's bytes are never written again (segment.rs invariants).
        self.0.bytes(0, self.0.len())
    }
}

impl Tier {
    /// Uploads the sealed segment at `start` (`map`, whose records end at `written`), last
    /// written at `modified_ms`, and checks the object.
    pub fn upload(
        &self,
        start: u64,
        written: u64,
        map: Arc<Mapping>,
        modified_ms: u64,
    ) -> Result<Entry> {
        let (splits, records) = walk(map.bytes(0, written as usize), start);
        let entry = Entry {
            start,
            size: map.len() as u64,
            written,
            crc32c: crc32c::crc32c(map.bytes(0, map.len())),
            modified_ms,
            splits,
            records,
        };
        let name = object_name(start);
        let url = self.remote.url_of(&name);
        let path = self.remote.path(&name);
        let mut attributes = Attributes::new();
        if self.remote.metadata {
            attributes.insert(
                Attribute::Metadata("rmqlog-crc32c".into()),
                format!("{:08x}", entry.crc32c).into(),
            );
            attributes.insert(
                Attribute::Metadata("rmqlog-length".into()),
                entry.size.to_string().into(),
            );
        }
        // Created, never overwritten: an object already there must hold these very bytes (an
        // upload interrupted before its manifest); other bytes are another writer's.
        let opts = PutOptions {
            attributes,
            mode: PutMode::Create,
            ..PutOptions::default()
        };
        let payload = PutPayload::from(Bytes::from_owner(Sealed(map)));
        self.block_on(async {
            let existed = match self.remote.store.put_opts(&path, payload, opts).await {
                Ok(_) => false,
                Err(object_store::Error::AlreadyExists { .. }) => true,
                Err(e) => return Err(self.remote.failed("uploading", url.clone(), e)),
            };
            match self.read_back(&entry).await {
                Err(Error::Corruption { reason, .. }) if existed => Err(Error::config(format!(
                    "{url} exists with other bytes ({reason}): another writer ships to this \
                     prefix (another store, or a copy of this one); give each store its own \
                     prefix"
                ))),
                other => other,
            }
        })?;
        Ok(entry)
    }

    /// [`Tier::read_back`] from a thread outside the runtime (`verify`).
    pub(crate) fn verify_object(&self, e: &Entry) -> Result<()> {
        self.block_on(self.read_back(e))
    }

    /// Reads object `e` back whole and checks its length and CRC32C.
    pub(crate) async fn read_back(&self, e: &Entry) -> Result<()> {
        let name = object_name(e.start);
        let url = self.remote.url_of(&name);
        let got =
            match self.remote.store.get(&self.remote.path(&name)).await {
                Ok(g) => g,
                Err(object_store::Error::NotFound { .. }) => return Err(Error::corruption(
                    Some(url.clone().into()),
                    Some(e.start),
                    "the object is missing, but the tier's manifest lists it (deleted by hand?)",
                )),
                Err(err) => return Err(self.remote.failed("reading back", url, err)),
            };
        let on_error = |err| self.remote.failed("reading back", url.clone(), err);
        let (len, crc) = each_chunk(got, &url, on_error, |_| Ok(())).await?;
        check_object(&url, e, len, crc)
    }
}

/// The first record start at or after each multiple of [`SPLIT_EVERY`] in a sealed segment's
/// `records` (those at `start`, filler included), found by walking the headers, and how many
/// records there are. A walk that meets anything but a record stops there: the splits before it
/// are still record starts, and no count is given unless it reached the filler or the end.
fn walk(records: &[u8], start: u64) -> (Vec<u64>, Option<u64>) {
    let mut out = Vec::new();
    let (mut pos, mut next, mut n) = (0u64, SPLIT_EVERY, 0u64);
    let end = loop {
        match decode(&records[pos as usize..], start + pos, u32::MAX as usize) {
            Slot::Record(h) => {
                if pos >= next {
                    out.push(pos);
                    next = (pos / SPLIT_EVERY + 1) * SPLIT_EVERY;
                }
                pos += u64::from(h.len);
                n += 1;
            }
            Slot::EndOfSegment => break true,
            _ => break false,
        }
    };
    (out, end.then_some(n))
}
