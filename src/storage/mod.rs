//! What a store is on disk: the record layout (`record.rs`, pure), one segment file and its map
//! (`segment.rs`, `mapping.rs`), the ordered segment list and its O(1) lookup (`segments.rs`), and
//! a record's key and headers (`props.rs`, pure), a segment's key index (`key_index.rs`), the store's small metadata files, each written atomically and framed by `crc_line.rs`: the
//! checkpoint `rmqlog.meta` (`checkpoint.rs`), a directory's identity `rmqlog.id` (`identity.rs`),
//! the recovery hint `rmqlog.tail` (`tail_hint.rs`) and the writer settings it records
//! (`settings.rs`). `counts.rs` counts a segment's records and keeps the counts a writer records
//! (`rmqlog.counts`, a cache); `boundaries.rs` keeps where records start inside a segment, learnt
//! by walks (in memory, shared by the process's logs). `fs.rs` has the file-system helpers (names, preallocation,
//! directory sync). Nothing here knows the log's state.

pub(crate) mod boundaries;
pub(crate) mod checkpoint;
pub(crate) mod counts;
pub(crate) mod crc_line;
pub(crate) mod fs;
pub(crate) mod identity;
pub(crate) mod key_index;
pub(crate) mod mapping;
pub(crate) mod props;
pub(crate) mod record;
pub(crate) mod segment;
pub(crate) mod segments;
pub(crate) mod settings;
pub(crate) mod tail_hint;
