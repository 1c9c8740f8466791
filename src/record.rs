//! Byte layout of a record and of the end-of-segment filler. Pure: no I/O.
//!
//! ```text
//! 0        4        8        12       16                24               32
//! +--------+--------+--------+--------+-----------------+----------------+------ - -
//! | length | magic  |body crc|hdr crc | physical offset | timestamp (ms) | body ...
//! +--------+--------+--------+--------+-----------------+----------------+------ - -
//! ```
//! All integers little-endian. `length` = header + body. `hdr crc` = CRC32 of bytes 0..12 and
//! 16..32. The filler that closes a segment is `[remaining length][FILLER_MAGIC]` (8 bytes); fewer
//! than 8 bytes left at the end of a segment are an implicit filler.

use std::sync::OnceLock;

/// Length of the fixed record header.
pub const HEADER_LEN: usize = 32;
/// Length of the end-of-segment filler.
pub const FILLER_LEN: usize = 8;
/// Magic of a format-1 record: "RMQ" and the format version in the low byte.
pub const MAGIC_V1: u32 = 0x524D_5101;
/// Magic of the end-of-segment filler (RocketMQ's BLANK_MAGIC_CODE).
pub const FILLER_MAGIC: u32 = 0x524D_51FF;

/// A decoded, validated record header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Header plus body, in bytes.
    pub len: u32,
    /// CRC32 of the body.
    pub body_crc: u32,
    /// The record's own physical offset.
    pub offset: u64,
    /// Store timestamp in milliseconds since the Unix epoch.
    pub timestamp_ms: u64,
}

impl Header {
    /// Body length.
    pub fn body_len(&self) -> usize {
        self.len as usize - HEADER_LEN
    }

    /// Encodes the header; `len`/`magic` (bytes 0..8) are what the writer stores last.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0..4].copy_from_slice(&self.len.to_le_bytes());
        b[4..8].copy_from_slice(&MAGIC_V1.to_le_bytes());
        b[8..12].copy_from_slice(&self.body_crc.to_le_bytes());
        b[16..24].copy_from_slice(&self.offset.to_le_bytes());
        b[24..32].copy_from_slice(&self.timestamp_ms.to_le_bytes());
        let crc = header_crc(&b);
        b[12..16].copy_from_slice(&crc.to_le_bytes());
        b
    }
}

/// What sits at a position inside a segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slot {
    /// A record whose header validates ([`validate`] has checked its body CRC too).
    Record(Header),
    /// The end of the segment's data: a filler, or too few bytes left for one.
    EndOfSegment,
    /// Nothing valid: zeros (never written) or damaged bytes.
    Invalid(&'static str),
    /// A valid header whose body fails its CRC (only from [`validate`]).
    BadBody {
        /// The CRC the header stores.
        stored: u32,
        /// The CRC of the bytes found.
        actual: u32,
    },
}

impl Slot {
    /// Why the position holds no valid record (`None` for a record or the end of the segment).
    pub fn defect(&self) -> Option<&'static str> {
        match self {
            Slot::Record(_) | Slot::EndOfSegment => None,
            Slot::Invalid(why) => Some(why),
            Slot::BadBody { .. } => Some("body CRC mismatch"),
        }
    }
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut w = [0u8; 4];
    w.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(w)
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(w)
}

/// A fresh CRC32 hasher. `Hasher::new` detects the CPU's features each time (a measurable part of
/// a small record's cost); a clone of one made once does not.
fn hasher() -> crc32fast::Hasher {
    static FRESH: OnceLock<crc32fast::Hasher> = OnceLock::new();
    FRESH.get_or_init(crc32fast::Hasher::new).clone()
}

/// CRC32 of a header with its own CRC field left out.
pub fn header_crc(h: &[u8]) -> u32 {
    // One contiguous update: two short ones each pay the small-input path's setup.
    let mut bytes = [0u8; HEADER_LEN - 4];
    bytes[..12].copy_from_slice(&h[0..12]);
    bytes[12..].copy_from_slice(&h[16..HEADER_LEN]);
    let mut c = hasher();
    c.update(&bytes);
    c.finalize()
}

/// CRC32 of a body.
pub fn body_crc(body: &[u8]) -> u32 {
    let mut c = hasher();
    c.update(body);
    c.finalize()
}

/// Decodes what starts at `rest[0]`, where `rest` is the segment from that position to its end and
/// `offset` the position's physical offset. Validates magic, length bounds, header CRC and the
/// stored physical offset; `max_body` bounds the body length.
pub fn decode(rest: &[u8], offset: u64, max_body: usize) -> Slot {
    if rest.len() < FILLER_LEN {
        return Slot::EndOfSegment;
    }
    let len = u32_at(rest, 0);
    match u32_at(rest, 4) {
        FILLER_MAGIC if len as usize == rest.len() => return Slot::EndOfSegment,
        FILLER_MAGIC => return Slot::Invalid("filler length does not reach the segment end"),
        MAGIC_V1 => {}
        0 if len == 0 => return Slot::Invalid("no record (zeros)"),
        _ => return Slot::Invalid("bad magic"),
    }
    let len_us = len as usize;
    if len_us < HEADER_LEN || len_us > rest.len() || len_us - HEADER_LEN > max_body {
        return Slot::Invalid("record length out of bounds");
    }
    let h = &rest[..HEADER_LEN];
    if header_crc(h) != u32_at(h, 12) {
        return Slot::Invalid("header CRC mismatch");
    }
    let header = Header {
        len,
        body_crc: u32_at(h, 8),
        offset: u64_at(h, 16),
        timestamp_ms: u64_at(h, 24),
    };
    if header.offset != offset {
        return Slot::Invalid("stored physical offset differs from the record's position");
    }
    Slot::Record(header)
}

/// [`decode`], then the body CRC: the one check of a record that readers, recovery and `verify`
/// share. A [`Slot::Record`] from here is a record to trust.
pub fn validate(rest: &[u8], offset: u64, max_body: usize) -> Slot {
    match decode(rest, offset, max_body) {
        Slot::Record(h) => {
            let actual = body_crc(&rest[HEADER_LEN..h.len as usize]);
            if actual == h.body_crc {
                Slot::Record(h)
            } else {
                Slot::BadBody {
                    stored: h.body_crc,
                    actual,
                }
            }
        }
        other => other,
    }
}

/// Stores a record by calling `write(position in the record, parts)` twice: first the header from
/// byte 8 on and the body, then the length/magic word (bytes 0..8). A reader that finds the magic
/// finds the rest of the header behind it (and checks both CRCs before trusting the record).
pub fn store<E>(
    header: &[u8; HEADER_LEN],
    body: &[u8],
    mut write: impl FnMut(usize, &[&[u8]]) -> Result<(), E>,
) -> Result<(), E> {
    write(8, &[&header[8..], body])?;
    write(0, &[&header[..8]])
}

/// Whether `rest` starts with a record's magic (its header may still fail validation).
pub fn has_record_magic(rest: &[u8]) -> bool {
    rest.len() >= FILLER_LEN && u32_at(rest, 4) == MAGIC_V1
}

/// Encodes the 8-byte filler that closes a segment with `remaining` bytes left.
pub fn filler(remaining: usize) -> [u8; FILLER_LEN] {
    let mut b = [0u8; FILLER_LEN];
    b[0..4].copy_from_slice(&(remaining as u32).to_le_bytes());
    b[4..8].copy_from_slice(&FILLER_MAGIC.to_le_bytes());
    b
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn encode_record(body: &[u8], offset: u64, ts: u64) -> Vec<u8> {
        let h = Header {
            len: (HEADER_LEN + body.len()) as u32,
            body_crc: body_crc(body),
            offset,
            timestamp_ms: ts,
        };
        let mut v = h.encode().to_vec();
        v.extend_from_slice(body);
        v
    }

    proptest! {
        #[test]
        fn round_trip(body in proptest::collection::vec(any::<u8>(), 0..2048),
                      offset in any::<u64>(), ts in any::<u64>(), slack in 0usize..64) {
            let mut seg = encode_record(&body, offset, ts);
            seg.resize(seg.len() + slack, 0);
            match decode(&seg, offset, 4096) {
                Slot::Record(h) => {
                    prop_assert_eq!(h.offset, offset);
                    prop_assert_eq!(h.timestamp_ms, ts);
                    prop_assert_eq!(h.body_len(), body.len());
                    prop_assert_eq!(body_crc(&seg[HEADER_LEN..h.len as usize]), h.body_crc);
                }
                other => prop_assert!(false, "decoded {:?}", other),
            }
        }

        #[test]
        fn any_flipped_header_byte_is_rejected(body in proptest::collection::vec(any::<u8>(), 0..64),
                                              at in 0usize..HEADER_LEN, bit in 0u8..8) {
            let mut seg = encode_record(&body, 4096, 7);
            seg[at] ^= 1 << bit;
            prop_assert!(matches!(decode(&seg, 4096, 4096), Slot::Invalid(_)));
        }
    }

    #[test]
    fn wrong_position_is_rejected() {
        let seg = encode_record(b"abc", 100, 1);
        assert!(matches!(decode(&seg, 101, 64), Slot::Invalid(_)));
    }

    #[test]
    fn filler_and_short_tail_end_the_segment() {
        let f = filler(20);
        let mut rest = f.to_vec();
        rest.resize(20, 0);
        assert_eq!(decode(&rest, 0, 64), Slot::EndOfSegment);
        assert_eq!(decode(&[0u8; 7], 0, 64), Slot::EndOfSegment);
        rest.push(0);
        assert!(matches!(decode(&rest, 0, 64), Slot::Invalid(_)));
        assert!(matches!(decode(&[0u8; 64], 0, 64), Slot::Invalid(_)));
    }

    #[test]
    fn oversized_body_is_rejected() {
        let seg = encode_record(&[1u8; 100], 0, 0);
        assert!(matches!(decode(&seg, 0, 99), Slot::Invalid(_)));
        assert!(matches!(decode(&seg[..100], 0, 4096), Slot::Invalid(_)));
    }
}
