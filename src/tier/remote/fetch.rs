//! Reading remote segments: whole objects for scans (checked against the manifest's CRC32C),
//! byte ranges for point reads and for scans of part of a segment (a split's range), checked by
//! the records' own CRCs as every read is.

use std::io::{Read, Seek, SeekFrom, Write};
use std::ops::Range;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use futures::StreamExt;
use object_store::{GetResult, GetResultPayload, ObjectStoreExt};

use super::Tier;
use crate::error::{Error, IoContext, Result};
use crate::failpoint::fail_point;
use crate::storage::mapping::Mapping;
use crate::storage::record::{decode, Slot, FILLER_LEN, HEADER_LEN};
use crate::sync::locked;
use crate::tier::manifest::{object_name, Entry};

/// Bytes a point read fetches at least: one request usually brings the whole record.
const RANGE_WINDOW: u64 = 64 * 1024;

impl Tier {
    /// The whole of segment `e`, from the cache or downloaded into it.
    pub fn map_whole(&self, e: &Entry) -> Result<Arc<Mapping>> {
        if let Some(m) = self.cache.get(e.start, None) {
            Tier::count(&self.stats.cache_hits, 1);
            return Ok(m);
        }
        let _one = locked(&self.cache.fetching);
        if let Some(m) = self.cache.get(e.start, None) {
            Tier::count(&self.stats.cache_hits, 1);
            return Ok(m);
        }
        if let (true, Some(dir)) = (self.remote.in_place, &self.remote.dir) {
            let map = self.map_in_place(dir, e)?;
            Tier::count(&self.stats.downloads, 1);
            Tier::count(&self.stats.mapped_in_place, 1);
            Tier::count(&self.stats.fetched_bytes, e.size);
            return Ok(self.cache.put_mapped(e.start, map));
        }
        let path = self.cache.download_path(e.start);
        let downloaded = self.block_on(self.download(e, &path));
        if let Err(err) = downloaded {
            let _ = std::fs::remove_file(&path);
            return Err(err);
        }
        Tier::count(&self.stats.downloads, 1);
        Tier::count(&self.stats.fetched_bytes, e.size);
        self.cache.put_whole(e.start, e.size)
    }

    /// Starts downloading segment `e` into the cache on the `rmqlog-prefetch` thread, unless it
    /// is cached or a prefetch is under way: a scan asks for the next remote segment while it
    /// reads the current one, so the download overlaps the reading. A failure is left for the
    /// scan to meet when it gets there.
    pub fn prefetch(self: &Arc<Self>, e: &Entry) {
        if self.cache.get(e.start, None).is_some() {
            return;
        }
        let mut slot = locked(&self.prefetcher);
        // Checked under the slot's lock, which `close` takes after setting it: no thread starts
        // after `close` joined the last one.
        if self.closed.load(Ordering::Acquire) || slot.as_ref().is_some_and(|t| !t.is_finished()) {
            return;
        }
        if let Some(done) = slot.take() {
            let _ = done.join();
        }
        let (tier, e) = (Arc::clone(self), e.clone());
        let started = std::thread::Builder::new()
            .name("rmqlog-prefetch".into())
            .spawn(move || {
                if let Err(err) = tier.map_whole(&e) {
                    log::debug!("prefetching segment {} failed: {err}", e.start);
                }
            });
        *slot = started.ok();
    }

    /// Streams object `e` into `path`, checking its length and CRC32C against the manifest.
    async fn download(&self, e: &Entry, path: &PathBuf) -> Result<()> {
        let name = object_name(e.start);
        let url = self.remote.url_of(&name);
        let got = self
            .remote
            .store
            .get(&self.remote.path(&name))
            .await
            .map_err(|err| self.read_error(e, err))?;
        let mut file = std::io::BufWriter::with_capacity(
            1 << 20,
            std::fs::File::create(path).ctx("creating a tier cache file", path)?,
        );
        let (len, crc) = each_chunk(
            got,
            &url,
            |err| self.read_error(e, err),
            |chunk| file.write_all(chunk).ctx("writing to the tier cache", path),
        )
        .await?;
        file.flush().ctx("writing to the tier cache", path)?;
        check_object(&url, e, len, crc)
    }

    /// Segment `e`'s map with the record at `offset` in it: from the cache, or fetched by range
    /// into the segment's sparse cache file. A record not cached brings the window of records
    /// after it; a record an earlier window brought needs no request (asking the cache for a
    /// whole window instead would miss on nearly every read of the next record).
    pub fn map_range(&self, e: &Entry, offset: u64) -> Result<Arc<Mapping>> {
        if let Some(m) = self.cache.get(e.start, None) {
            Tier::count(&self.stats.cache_hits, 1);
            return Ok(m);
        }
        let at = offset - e.start;
        let mut fetched = false;
        if at >= e.written {
            // Past the records: the reader reports it from an empty (zero) header.
            let end = (at + HEADER_LEN as u64).min(e.size);
            return self.cached_or_fetch(e, at..end, end, &mut fetched);
        }
        let head_end = (at + HEADER_LEN as u64).min(e.written);
        let window = (at + RANGE_WINDOW).min(e.written).max(head_end);
        let map = self.cached_or_fetch(e, at..head_end, window, &mut fetched)?;
        let head = map.bytes(at as usize, head_end as usize);
        let len = head
            .get(..4)
            .map_or(0, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as u64);
        // With what follows the record's end to tell a filler (the record's next offset is then
        // the next segment's start).
        let end = (at + len + FILLER_LEN as u64).min(e.written);
        if end <= head_end {
            return Ok(map);
        }
        // A record across the end of the cached bytes brings the next window with it.
        self.cached_or_fetch(e, at..end, window, &mut fetched)
    }

    /// Segment `e`'s map with the records that start in `[from, to)` (relative) in it: from the
    /// cache, or fetched with one range read, and one more for the tail of a last record that
    /// runs past `to` (none when `to` is a known record start: a split, or the records' end).
    pub fn map_span(&self, e: &Entry, from: u64, to: u64) -> Result<Arc<Mapping>> {
        if let Some(m) = self.cache.get(e.start, None) {
            Tier::count(&self.stats.cache_hits, 1);
            return Ok(m);
        }
        let to = to.min(e.written);
        if from >= to {
            return self.map_range(e, from);
        }
        // With the headers of the records starting before `to` whole.
        let head_end = (to + HEADER_LEN as u64).min(e.written);
        let mut fetched = false;
        let map = self.cached_or_fetch(e, from..head_end, head_end, &mut fetched)?;
        if e.is_boundary(to) {
            return Ok(map);
        }
        fail_point!("tier::span_fetched");
        // Where the record running past `to` ends: a walk of the headers (a damaged one stops
        // it; the scan reports the damage when it gets there).
        let bytes = map.bytes(0, e.written as usize);
        let mut pos = from;
        while pos < to {
            match decode(&bytes[pos as usize..], e.start + pos, u32::MAX as usize) {
                Slot::Record(h) => pos += u64::from(h.len),
                _ => return Ok(map),
            }
        }
        // And what follows it, to tell a filler (as a point read does).
        let end = (pos + FILLER_LEN as u64).min(e.written);
        if end <= head_end {
            return Ok(map);
        }
        let tail = self.cached_or_fetch(e, head_end..end, end, &mut fetched)?;
        if Arc::ptr_eq(&tail, &map) {
            return Ok(tail);
        }
        // The range's cache file was evicted meanwhile: the tail came in a new one, without it.
        self.cached_or_fetch(e, from..end, end, &mut fetched)
    }

    /// Segment `e`'s map with `want` in it: cached (one hit per read: none once this read has
    /// `fetched`), or fetched from `want.start` up to `fetch_to`.
    fn cached_or_fetch(
        &self,
        e: &Entry,
        want: Range<u64>,
        fetch_to: u64,
        fetched: &mut bool,
    ) -> Result<Arc<Mapping>> {
        if let Some(m) = self.cache.get(e.start, Some(want.clone())) {
            if !*fetched {
                Tier::count(&self.stats.cache_hits, 1);
            }
            return Ok(m);
        }
        *fetched = true;
        let (from, to) = (want.start, fetch_to.max(want.end));
        let name = object_name(e.start);
        let path = self.remote.path(&name);
        let bytes = self.block_on(async {
            match self.remote.store.get_range(&path, from..to).await {
                Ok(bytes) => Ok(bytes),
                Err(err) => Err(self.range_error(e, &path, err).await),
            }
        })?;
        if bytes.len() as u64 != to - from {
            return Err(Error::corruption(
                Some(PathBuf::from(self.remote.url_of(&name))),
                Some(e.start + from),
                format!(
                    "a range read of {} bytes returned {}: the object is shorter than the \
                     manifest's {} bytes",
                    to - from,
                    bytes.len(),
                    e.size
                ),
            ));
        }
        Tier::count(&self.stats.range_reads, 1);
        Tier::count(&self.stats.fetched_bytes, bytes.len() as u64);
        self.cache.put_range(e.start, e.size, from, &bytes)
    }

    /// A failed read of segment `e`'s object: a missing object is damage (the manifest lists
    /// it), anything else the store failing.
    fn read_error(&self, e: &Entry, err: object_store::Error) -> Error {
        match err {
            object_store::Error::NotFound { .. } => self.missing(e),
            other => self
                .remote
                .failed("reading", self.object_url(e.start), other),
        }
    }

    /// A failed range read of segment `e`'s object. A store refuses a range past an object's end
    /// (S3: 416), which means an object shorter than the manifest says: damage, as a missing one
    /// is, once its length (one HEAD) confirms it.
    async fn range_error(
        &self,
        e: &Entry,
        path: &object_store::path::Path,
        err: object_store::Error,
    ) -> Error {
        if matches!(err, object_store::Error::NotFound { .. }) {
            return self.missing(e);
        }
        match self.remote.store.head(path).await {
            Ok(meta) if meta.size != e.size => Error::corruption(
                Some(PathBuf::from(self.object_url(e.start))),
                Some(e.start),
                format!(
                    "the object has {} bytes, the manifest says {}",
                    meta.size, e.size
                ),
            ),
            Err(object_store::Error::NotFound { .. }) => self.missing(e),
            _ => self.read_error(e, err),
        }
    }

    /// Segment `e`'s object is not there: damage, since the manifest lists it (or retention
    /// deleted it since the list was taken: the reader looks again).
    pub(super) fn missing(&self, e: &Entry) -> Error {
        Error::corruption(
            Some(PathBuf::from(self.object_url(e.start))),
            Some(e.start),
            "the object is missing, but the tier's manifest lists it (deleted by hand?)",
        )
    }

    /// Forgets the cached copy of segment `start` (after it failed a check).
    pub fn forget_cached(&self, start: u64) {
        self.cache.forget(start);
    }
}

/// Reads a whole object, handing each chunk to `sink`; returns its length and CRC32C. A local
/// store's file is read directly, 1 MiB at a time (its stream would be 8 KiB chunks).
pub(crate) async fn each_chunk(
    got: GetResult,
    url: &str,
    on_error: impl Fn(object_store::Error) -> Error,
    mut sink: impl FnMut(&[u8]) -> Result<()>,
) -> Result<(u64, u32)> {
    let (mut crc, mut len) = (0u32, 0u64);
    match got.payload {
        GetResultPayload::File(mut file, _) => {
            let mut buf = vec![0u8; 1 << 20];
            let mut left = got.range.end - got.range.start;
            file.seek(SeekFrom::Start(got.range.start))
                .ctx("reading", url)?;
            while left > 0 {
                let want = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
                let n = file.read(&mut buf[..want]).ctx("reading", url)?;
                if n == 0 {
                    break;
                }
                crc = crc32c::crc32c_append(crc, &buf[..n]);
                sink(&buf[..n])?;
                len += n as u64;
                left -= n as u64;
            }
        }
        GetResultPayload::Stream(mut stream) => {
            while let Some(chunk) = stream.next().await {
                let chunk = chunk.map_err(&on_error)?;
                crc = crc32c::crc32c_append(crc, &chunk);
                sink(&chunk)?;
                len += chunk.len() as u64;
            }
        }
    }
    Ok((len, crc))
}

/// An object's length and CRC32C must be what the manifest says.
pub(crate) fn check_object(url: &str, e: &Entry, len: u64, crc: u32) -> Result<()> {
    if len != e.size {
        return Err(Error::corruption(
            Some(PathBuf::from(url)),
            Some(e.start),
            format!("the object has {len} bytes, the manifest says {}", e.size),
        ));
    }
    if crc != e.crc32c {
        return Err(Error::corruption(
            Some(PathBuf::from(url)),
            Some(e.start),
            format!(
                "the object's CRC32C is {crc:#010x}, the manifest says {:#010x}",
                e.crc32c
            ),
        ));
    }
    Ok(())
}
