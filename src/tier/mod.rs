//! The remote tier joined to the log: which tier a store has (`attach.rs`), the `rmqlog-tier`
//! thread that ships sealed segments and applies local and remote retention (`shipper.rs`; among
//! shared writers, in the open doing the background work), and what `tier_status()` reports
//! (`status.rs`). The object store itself is `crate::remote`; a listing takes the remote
//! segments in through `layout::with_remote`. Sits above `shared` (it asks who ships), which
//! sits above the listing.

mod attach;
mod shipper;
mod status;

pub(crate) use self::attach::{learn_head, open_tier};
pub(crate) use self::shipper::start_shipper;
pub use self::status::TierStatus;
