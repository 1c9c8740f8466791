//! The remote tier joined to the log: which tier a store has and its remote segments in a
//! listing (`attach.rs`), the `rmqlog-tier` thread that ships sealed segments and applies local
//! and remote retention (`shipper.rs`), and what `tier_status()` reports (`status.rs`). The
//! object store itself is `crate::remote`.

mod attach;
mod shipper;
mod status;

pub(crate) use self::attach::{learn_head, open_tier, reload_local, with_remote};
pub(crate) use self::shipper::start_shipper;
pub use self::status::TierStatus;
