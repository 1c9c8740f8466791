//! Dead letters: records a shared name delivered `max_deliveries` times without a commit, moved
//! out of the way to another store (RocketMQ's `%DLQ%` topic, JetStream's `MaxDeliver`, SQS's
//! redrive policy).
//!
//! A dead letter is the record's body behind an envelope naming its origin (records carry no
//! headers yet): `RMQLDLQ1`, the origin's length (u32, little-endian), the origin as JSON
//! ([`Origin`]), then the body as it was.
//!
//! Once per record, across crashes: the poll that dead-letters a claim holds the name's table
//! lock throughout. It first marks the claim as being dead-lettered, with the dead-letter store's
//! end; then appends the records and syncs the store; then marks the claim done. A poll that finds
//! a claim still marked (its open died or failed mid-way) appends only the records whose envelopes
//! are not already in the dead-letter store past that end.

use std::collections::HashSet;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

const MAGIC: &[u8; 8] = b"RMQLDLQ1";

/// Where a dead letter came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Origin {
    /// The source store's identity (`rmqlog.id`'s store id), or its first directory's path for a
    /// store without one.
    pub store: String,
    /// The source store's directories, as the dead-lettering open named them.
    pub paths: Vec<String>,
    pub offset: u64,
    pub timestamp_ms: u64,
    /// The consumer name.
    pub consumer: String,
    /// How many times the name delivered the record.
    pub deliveries: u32,
}

/// The body of the dead letter of a record with `body`.
pub(crate) fn envelope(origin: &Origin, body: &[u8]) -> Result<Vec<u8>> {
    let json = serde_json::to_vec(origin)
        .map_err(|e| Error::Internal(format!("encoding a dead letter's origin: {e}")))?;
    let mut out = Vec::with_capacity(MAGIC.len() + 4 + json.len() + body.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&(json.len() as u32).to_le_bytes());
    out.extend_from_slice(&json);
    out.extend_from_slice(body);
    Ok(out)
}

/// A dead letter's origin and the original body; `None` if `bytes` is not a dead letter.
pub fn parse(bytes: &[u8]) -> Option<(Origin, &[u8])> {
    let rest = bytes.strip_prefix(MAGIC.as_slice())?;
    let len = u32::from_le_bytes(rest.get(..4)?.try_into().ok()?) as usize;
    let json = rest.get(4..4 + len)?;
    let origin = serde_json::from_slice(json).ok()?;
    Some((origin, &rest[4 + len..]))
}

/// The store dead letters go to: another rmqlog store, opened as a shared writer.
pub(crate) trait Sink: Send + Sync + std::fmt::Debug {
    /// The store's end, as of now (other writers' appends included).
    fn end(&mut self) -> Result<u64>;
    /// Calls `f` with the body of every record from `from` to the end.
    fn each_from(&mut self, from: u64, f: &mut dyn FnMut(&[u8])) -> Result<()>;
    fn append(&mut self, body: &[u8]) -> Result<u64>;
    /// Makes every record appended so far durable.
    fn sync(&mut self) -> Result<()>;
}

/// The offsets of the records of `store`'s consumer `consumer` already in `sink` from `from` on.
pub(crate) fn already_there(
    sink: &mut dyn Sink,
    from: u64,
    store: &str,
    consumer: &str,
) -> Result<HashSet<u64>> {
    let mut there = HashSet::new();
    sink.each_from(from, &mut |body| {
        if let Some((o, _)) = parse(body) {
            if o.store == store && o.consumer == consumer {
                there.insert(o.offset);
            }
        }
    })?;
    Ok(there)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_envelope_parses_back_to_its_origin_and_body() {
        let o = Origin {
            store: "s-1".into(),
            paths: vec!["/a".into()],
            offset: 4096,
            timestamp_ms: 17,
            consumer: "billing".into(),
            deliveries: 5,
        };
        for body in [&b""[..], b"poison", &[0xff; 300]] {
            let e = envelope(&o, body).unwrap();
            assert_eq!(parse(&e), Some((o.clone(), body)));
        }
        assert_eq!(parse(b"RMQLDLQ1\xff\xff\xff\x7f{}"), None);
        assert_eq!(parse(b"plain body"), None);
    }
}
