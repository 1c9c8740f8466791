//! Reads: one record by offset, ordered scans and the timestamp search (`reader.rs`), the filters
//! scans and consumers apply to records' keys and headers (`filter.rs`), a read-only follower
//! picking up what a writer in another process did (`follow.rs`), waiting for the next record
//! without spinning (`wait.rs`), a thread that waits on behalf of waiters that cannot block
//! (`watch.rs`: asyncio's), how many records the log or a range of it holds (`count.rs`), the
//! records with a key (`lookup.rs`), reads done again when a segment moved under them
//! (`moved.rs`), and the header walks to a position or a time that learn where records start
//! (`walk.rs`). Arrow batches are `crate::arrow`; named consumers are
//! `crate::consumers`.

pub(crate) mod count;
pub(crate) mod filter;
pub(crate) mod follow;
pub(crate) mod lookup;
pub(crate) mod moved;
pub(crate) mod reader;
pub(crate) mod wait;
pub(crate) mod walk;
pub(crate) mod watch;
