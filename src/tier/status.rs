//! What `tier_status()` reports: where the segments are, what waits, how the tier is doing.

#[cfg(feature = "tier")]
use std::sync::atomic::Ordering;

use crate::state::State;
#[cfg(feature = "tier")]
use crate::sync::locked;
#[cfg(feature = "tier")]
use crate::tier::Tier;

/// The remote tier of a log, at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TierStatus {
    /// The tier's URL.
    pub url: String,
    /// The manifest version last published (or read).
    pub manifest_version: u64,
    /// Segments only in the store's directories (the active one and those waiting to upload).
    pub local_segments: usize,
    /// Segments only in the tier.
    pub remote_segments: usize,
    /// Segments in both (uploaded and verified, local copy kept).
    pub both_segments: usize,
    /// Sealed segments not uploaded yet, and their bytes.
    pub pending_segments: usize,
    pub pending_bytes: u64,
    /// Bytes of the objects the manifest lists.
    pub remote_bytes: u64,
    /// The last failure of the tier thread, until a later pass succeeds.
    pub last_error: Option<String>,
    /// Segments uploaded (and verified) since open, and their bytes.
    pub uploads: u64,
    pub uploaded_bytes: u64,
    /// Failed passes of the tier thread since open (each one retried later).
    pub upload_errors: u64,
    /// Local copies deleted after upload (`local_retention_*`) since open.
    pub local_deleted: u64,
    /// Objects deleted by retention since open.
    pub remote_deleted: u64,
    /// Whole segments brought into the cache (downloaded, or mapped in place), and reads
    /// fetched by range (point reads, parts of a segment).
    pub downloads: u64,
    pub range_reads: u64,
    /// Of `downloads`, the objects of a `file://` tier on a local filesystem mapped where they
    /// lie instead of copied (each checked whole all the same).
    pub mapped_in_place: u64,
    /// Bytes read from the tier since open (an object mapped in place counts whole: its check
    /// reads it all).
    pub fetched_bytes: u64,
    /// Reads served by the cache without a request.
    pub cache_hits: u64,
    /// Bytes in the local cache now.
    pub cache_bytes: u64,
}

#[cfg(not(feature = "tier"))]
impl State {
    /// Always `None`: no tier in this build.
    pub(crate) fn tier_status(&self) -> Option<TierStatus> {
        match *self.tier.as_deref()? {}
    }
}

#[cfg(feature = "tier")]
impl State {
    /// See [`TierStatus`]; `None` without a tier.
    pub(crate) fn tier_status(&self) -> Option<TierStatus> {
        let tier: &Tier = self.tier.as_ref()?;
        let _shown = locked(&tier.stats.shown);
        let list = self.segments_full();
        let sealed = list.sealed(self.max_offset()).len();
        let m = tier.manifest();
        let mut st = TierStatus {
            url: tier.remote.url.clone(),
            manifest_version: m.version,
            local_segments: 0,
            remote_segments: 0,
            both_segments: 0,
            pending_segments: 0,
            pending_bytes: 0,
            remote_bytes: m.segments.iter().map(|e| e.size).sum(),
            last_error: locked(&tier.health).last_error.clone(),
            uploads: 0,
            uploaded_bytes: 0,
            upload_errors: 0,
            local_deleted: 0,
            remote_deleted: 0,
            downloads: 0,
            range_reads: 0,
            mapped_in_place: 0,
            fetched_bytes: 0,
            cache_hits: 0,
            cache_bytes: tier.cache_bytes(),
        };
        for (i, s) in list.as_slice().iter().enumerate() {
            match (s.is_local(), s.is_remote_in(Some(&m))) {
                (true, true) => st.both_segments += 1,
                (true, false) => {
                    st.local_segments += 1;
                    if i < sealed {
                        st.pending_segments += 1;
                        st.pending_bytes += s.size();
                    }
                }
                (false, true) => st.remote_segments += 1,
                (false, false) => {}
            }
        }
        let get = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
        let c = &tier.stats;
        st.uploads = get(&c.uploads);
        st.uploaded_bytes = get(&c.uploaded_bytes);
        st.upload_errors = get(&c.upload_errors);
        st.local_deleted = get(&c.local_deleted);
        st.remote_deleted = get(&c.remote_deleted);
        st.downloads = get(&c.downloads);
        st.range_reads = get(&c.range_reads);
        st.mapped_in_place = get(&c.mapped_in_place);
        st.fetched_bytes = get(&c.fetched_bytes);
        st.cache_hits = get(&c.cache_hits);
        Some(st)
    }
}
