//! The remote tier: sealed segments shipped to an object store and read back through a local
//! cache (Kafka KIP-405, RocketMQ 5's tiered store).
//!
//! What every build has: the tier options (`options.rs`), the manifest's format and its local copy
//! in the store's directories (`manifest.rs`), what `tier_status()` reports (`status.rs`), and
//! the stores an open refuses before changing anything (`guard.rs`).
//! With the cargo feature `tier`: the object store itself (`remote/`: requests, cache, uploads),
//! joining a store and its tier at open (`attach.rs`) and the `rmqlog-tier` thread that ships
//! sealed segments and applies local and remote retention (`shipper.rs`; among shared writers, in
//! the open doing the background work), and finding the stores of a fleet under one prefix
//! (`fleet.rs`). Without it, `absent.rs` stands in: a tier that cannot
//! exist, so the core keeps one code path, and a clear error for a store or URL that needs one.
//! A listing takes the remote segments in through `layout::with_remote`.

mod guard;
mod manifest;
mod options;
mod status;

#[cfg(feature = "tier")]
mod attach;
#[cfg(feature = "tier")]
mod fleet;
#[cfg(feature = "tier")]
mod remote;
#[cfg(feature = "tier")]
mod shipper;

#[cfg(not(feature = "tier"))]
mod absent;

#[cfg(not(feature = "tier"))]
pub use self::absent::tier_stores;
#[cfg(not(feature = "tier"))]
pub(crate) use self::absent::{learn_head, open_tier, open_url, Tier};
#[cfg(feature = "tier")]
pub(crate) use self::attach::{learn_head, open_tier, open_url};
#[cfg(feature = "tier")]
pub use self::fleet::tier_stores;
pub(crate) use self::guard::check_reachable;
pub use self::manifest::SPLIT_EVERY;
pub(crate) use self::manifest::{Entry, Manifest};
pub(crate) use self::options::is_url;
pub use self::options::TierOptions;
#[cfg(feature = "tier")]
pub(crate) use self::remote::Tier;
#[cfg(feature = "tier")]
pub(crate) use self::shipper::start_shipper;
pub use self::status::TierStatus;
