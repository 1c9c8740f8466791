//! Byte layout of a record and of the end-of-segment filler. Pure: no I/O.
//!
//! Two formats share the 32-byte header's shape, told apart by the magic (docs/format.md):
//!
//! ```text
//! 0        4        8        12       16                24               32
//! +--------+--------+--------+--------+-----------------+----------------+------ - -
//! | length | magic  |body crc|hdr crc | physical offset | timestamp (ms) | body ...   format 1
//! | length | magic  |  crc   | attrs  | physical offset | timestamp (ms) | body ...   format 2
//! +--------+--------+--------+--------+-----------------+----------------+------ - -
//! ```
//! All integers little-endian. `length` = header + body.
//! - Format 1: `body crc` = CRC-32 (IEEE) of the body, `hdr crc` = CRC-32 of bytes 0..12 and
//!   16..32.
//! - Format 2: `crc` = CRC-32C of bytes 12..length (attributes, offset, timestamp, properties and
//!   body, one contiguous run); `attrs` is the length of the properties (key, headers: see
//!   [`crate::storage::props`]) that sit between the header and the body, zero for a record
//!   without any, and its top byte is zero (reserved). `length` and `magic` are not in the CRC:
//!   the magic is compared whole, and a damaged length moves the run the CRC covers.
//!
//! The filler that closes a segment is `[remaining length][FILLER_MAGIC]` (8 bytes); fewer than 8
//! bytes left at the end of a segment are an implicit filler.

use std::sync::OnceLock;

/// Length of the fixed record header.
pub const HEADER_LEN: usize = 32;
/// Length of the end-of-segment filler.
pub const FILLER_LEN: usize = 8;
/// Magic of a format-1 record: "RMQ" and the format version in the low byte.
pub const MAGIC_V1: u32 = 0x524D_5101;
/// Magic of a format-2 record.
pub const MAGIC_V2: u32 = 0x524D_5102;
/// Magic of the end-of-segment filler (RocketMQ's BLANK_MAGIC_CODE).
pub const FILLER_MAGIC: u32 = 0x524D_51FF;
/// Where format 2's CRC starts: it covers the record from here to its end.
const V2_CRC_FROM: usize = 12;
use crate::storage::props::{self, MAX_PROPS_LEN};

/// The layout of a record. A store writes one format (recorded in its metadata); readers take
/// both, record by record, by the magic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Format {
    /// rmqlog 0.1: two CRC-32s (header, body).
    V1,
    /// One CRC-32C over the header fields and the body, with the CPU's CRC32 instruction.
    #[default]
    V2,
}

impl Format {
    /// The format's number, as docs/format.md and the metadata name it.
    pub fn number(self) -> u32 {
        match self {
            Format::V1 => 1,
            Format::V2 => 2,
        }
    }

    /// The format numbered `n`.
    pub fn from_number(n: u32) -> Option<Format> {
        match n {
            1 => Some(Format::V1),
            2 => Some(Format::V2),
            _ => None,
        }
    }

    fn magic(self) -> u32 {
        match self {
            Format::V1 => MAGIC_V1,
            Format::V2 => MAGIC_V2,
        }
    }

    /// The format of the record (not the filler) whose magic is `magic`.
    fn of_magic(magic: u32) -> Option<Format> {
        match magic {
            MAGIC_V1 => Some(Format::V1),
            MAGIC_V2 => Some(Format::V2),
            _ => None,
        }
    }

    /// The format of the first record of a segment's bytes, if it starts with one.
    pub fn of_segment(bytes: &[u8]) -> Option<Format> {
        (bytes.len() >= FILLER_LEN)
            .then(|| Format::of_magic(u32_at(bytes, 4)))
            .flatten()
    }
}

/// A decoded record header (see [`decode`] for what is checked).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub format: Format,
    /// Header plus body, in bytes.
    pub len: u32,
    /// The stored check: format 1, the body's CRC-32; format 2, the record's CRC-32C.
    pub crc: u32,
    /// The record's own physical offset.
    pub offset: u64,
    /// Store timestamp in milliseconds since the Unix epoch.
    pub timestamp_ms: u64,
    /// Length of the properties between the header and the body (format 2; 0 without any).
    pub props_len: u32,
}

impl Header {
    /// Body length.
    pub fn body_len(&self) -> usize {
        self.len as usize - HEADER_LEN - self.props_len as usize
    }

    /// Where the body starts, counted from the record's start.
    pub fn body_from(&self) -> usize {
        HEADER_LEN + self.props_len as usize
    }
}

/// The header of the record `body` at `offset`, stored at `timestamp_ms`, in `format`, with the
/// encoded properties `props` (format 2 only: empty otherwise; at most [`MAX_PROPS_LEN`]). Format
/// 1 takes the body's CRC-32 from `body_crc` (computed before the writer's lock); format 2's CRC
/// covers the offset, so it is computed here.
pub fn encode(
    format: Format,
    props: &[u8],
    body: &[u8],
    body_crc: Option<u32>,
    offset: u64,
    timestamp_ms: u64,
) -> [u8; HEADER_LEN] {
    debug_assert!(props.is_empty() || (format == Format::V2 && props.len() <= MAX_PROPS_LEN));
    let mut b = [0u8; HEADER_LEN];
    b[0..4].copy_from_slice(&((HEADER_LEN + props.len() + body.len()) as u32).to_le_bytes());
    b[4..8].copy_from_slice(&format.magic().to_le_bytes());
    b[16..24].copy_from_slice(&offset.to_le_bytes());
    b[24..32].copy_from_slice(&timestamp_ms.to_le_bytes());
    match format {
        Format::V1 => {
            let crc = body_crc.unwrap_or_else(|| crc32_of(body));
            b[8..12].copy_from_slice(&crc.to_le_bytes());
            let crc = header_crc_v1(&b);
            b[12..16].copy_from_slice(&crc.to_le_bytes());
        }
        Format::V2 => {
            b[12..16].copy_from_slice(&(props.len() as u32).to_le_bytes());
            let mut crc = crc32c::crc32c(&b[V2_CRC_FROM..]);
            if !props.is_empty() {
                crc = crc32c::crc32c_append(crc, props);
            }
            let crc = crc32c::crc32c_append(crc, body);
            b[8..12].copy_from_slice(&crc.to_le_bytes());
        }
    }
    b
}

/// What sits at a position inside a segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slot {
    /// A record whose header validates ([`validate`] has checked its CRC too).
    Record(Header),
    /// The end of the segment's data: a filler, or too few bytes left for one.
    EndOfSegment,
    /// Nothing valid: zeros (never written) or damaged bytes.
    Invalid(&'static str),
    /// A record whose CRC fails (only from [`validate`]): format 1, the body's; format 2, the
    /// record's (header fields or body).
    BadCrc {
        format: Format,
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
            Slot::BadCrc { format, .. } => Some(crc_defect(*format)),
        }
    }
}

/// What a failed CRC of a record in `format` means.
pub fn crc_defect(format: Format) -> &'static str {
    match format {
        Format::V1 => "body CRC mismatch",
        Format::V2 => "record CRC mismatch",
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

/// A fresh CRC-32 hasher. `Hasher::new` detects the CPU's features each time (a measurable part of
/// a small record's cost); a clone of one made once does not.
fn hasher() -> crc32fast::Hasher {
    static FRESH: OnceLock<crc32fast::Hasher> = OnceLock::new();
    FRESH.get_or_init(crc32fast::Hasher::new).clone()
}

/// Format 1's CRC-32 of a header with its own CRC field left out.
fn header_crc_v1(h: &[u8]) -> u32 {
    // One contiguous update: two short ones each pay the small-input path's setup.
    let mut bytes = [0u8; HEADER_LEN - 4];
    bytes[..12].copy_from_slice(&h[0..12]);
    bytes[12..].copy_from_slice(&h[16..HEADER_LEN]);
    let mut c = hasher();
    c.update(&bytes);
    c.finalize()
}

/// The CRC-32 (IEEE) of `bytes`: format 1's body check.
pub fn crc32_of(bytes: &[u8]) -> u32 {
    let mut c = hasher();
    c.update(bytes);
    c.finalize()
}

/// Decodes what starts at `rest[0]`, where `rest` is the segment from that position to its end and
/// `offset` the position's physical offset. Checks what the header alone can tell: the magic,
/// the length's bounds (`max_body` bounds the body), the stored physical offset; format 1 its
/// header CRC, format 2 its attributes. Format 2's CRC covers the body too: see [`validate`].
pub fn decode(rest: &[u8], offset: u64, max_body: usize) -> Slot {
    if rest.len() < FILLER_LEN {
        return Slot::EndOfSegment;
    }
    let len = u32_at(rest, 0);
    let magic = u32_at(rest, 4);
    let format = match Format::of_magic(magic) {
        Some(f) => f,
        None if magic == FILLER_MAGIC && len as usize == rest.len() => {
            // A record that ended at the segment's end and whose magic was damaged into the
            // filler's still holds its own offset: a filler's bytes after its first 8 are zeros,
            // and no filler lies at offset 0.
            return match rest.len() >= HEADER_LEN && u64_at(rest, 16) == offset {
                true => Slot::Invalid(
                    "a filler holding its own offset: a record whose magic is damaged",
                ),
                false => Slot::EndOfSegment,
            };
        }
        None if magic == FILLER_MAGIC => {
            return Slot::Invalid("filler length does not reach the segment end");
        }
        None if magic == 0 && len == 0 => return Slot::Invalid("no record (zeros)"),
        None => return Slot::Invalid("bad magic"),
    };
    let len_us = len as usize;
    if len_us < HEADER_LEN || len_us > rest.len() || len_us - HEADER_LEN > max_body {
        return Slot::Invalid("record length out of bounds");
    }
    let h = &rest[..HEADER_LEN];
    let props_len = match format {
        Format::V1 if header_crc_v1(h) != u32_at(h, 12) => {
            return Slot::Invalid("header CRC mismatch");
        }
        Format::V1 => 0,
        Format::V2 => {
            let attrs = u32_at(h, 12);
            if attrs as usize > MAX_PROPS_LEN {
                return Slot::Invalid(
                    "unknown record attributes (damage, or a newer rmqlog's record)",
                );
            }
            if attrs as usize > len_us - HEADER_LEN {
                return Slot::Invalid("record properties longer than the record");
            }
            attrs
        }
    };
    let header = Header {
        format,
        len,
        crc: u32_at(h, 8),
        offset: u64_at(h, 16),
        timestamp_ms: u64_at(h, 24),
        props_len,
    };
    if header.offset != offset {
        return Slot::Invalid("stored physical offset differs from the record's position");
    }
    Slot::Record(header)
}

/// [`decode`], then the CRC, then the properties' shape: the one check of a record that
/// readers, recovery and `verify` share. A [`Slot::Record`] from here is a record to trust.
pub fn validate(rest: &[u8], offset: u64, max_body: usize) -> Slot {
    validate_props(rest, offset, max_body, props::is_valid)
}

/// [`validate`] with the properties' shape checked by `props_ok` (whether a non-empty block
/// parses as [`props::is_valid`] says): a filtered scan checks and matches them in one walk.
#[inline]
pub fn validate_props(
    rest: &[u8],
    offset: u64,
    max_body: usize,
    props_ok: impl FnOnce(&[u8]) -> bool,
) -> Slot {
    match decode(rest, offset, max_body) {
        Slot::Record(h) => {
            let actual = match h.format {
                Format::V1 => crc32_of(&rest[HEADER_LEN..h.len as usize]),
                Format::V2 => crc32c::crc32c(&rest[V2_CRC_FROM..h.len as usize]),
            };
            if actual == h.crc {
                match h.props_len == 0 || props_ok(&rest[HEADER_LEN..h.body_from()]) {
                    true => Slot::Record(h),
                    // Under a valid CRC: written so (a bug, or a newer rmqlog's layout).
                    false => Slot::Invalid("record properties (key, headers) that do not parse"),
                }
            } else {
                Slot::BadCrc {
                    format: h.format,
                    stored: h.crc,
                    actual,
                }
            }
        }
        other => other,
    }
}

/// Stores a record by calling `write(position in the record, parts)` twice: first the header from
/// byte 8 on, the properties and the body, then the length/magic word (bytes 0..8). A reader that
/// finds the magic finds the rest of the header behind it (and checks the CRCs before trusting
/// the record).
pub fn store<E>(
    header: &[u8; HEADER_LEN],
    props: &[u8],
    body: &[u8],
    mut write: impl FnMut(usize, &[&[u8]]) -> Result<(), E>,
) -> Result<(), E> {
    match props.is_empty() {
        true => write(8, &[&header[8..], body])?,
        false => write(8, &[&header[8..], props, body])?,
    }
    write(0, &[&header[..8]])
}

/// Whether `rest` starts with a record's magic, of either format (its header may still fail
/// validation).
pub fn has_record_magic(rest: &[u8]) -> bool {
    Format::of_segment(rest).is_some()
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

    const FORMATS: [Format; 2] = [Format::V1, Format::V2];

    fn encode_record(format: Format, body: &[u8], offset: u64, ts: u64) -> Vec<u8> {
        let mut v = encode(format, &[], body, None, offset, ts).to_vec();
        v.extend_from_slice(body);
        v
    }

    proptest! {
        #[test]
        fn round_trip(body in proptest::collection::vec(any::<u8>(), 0..2048),
                      offset in any::<u64>(), ts in any::<u64>(), slack in 0usize..64,
                      v2 in any::<bool>()) {
            let format = if v2 { Format::V2 } else { Format::V1 };
            let mut seg = encode_record(format, &body, offset, ts);
            seg.resize(seg.len() + slack, 0);
            match validate(&seg, offset, 4096) {
                Slot::Record(h) => {
                    prop_assert_eq!(h.format, format);
                    prop_assert_eq!(h.offset, offset);
                    prop_assert_eq!(h.timestamp_ms, ts);
                    prop_assert_eq!(h.body_len(), body.len());
                }
                other => prop_assert!(false, "decoded {:?}", other),
            }
        }

        /// Every bit of a record, header or body, is checked: a flipped one is refused.
        #[test]
        fn any_flipped_bit_is_rejected(body in proptest::collection::vec(any::<u8>(), 0..64),
                                       at in 0usize..HEADER_LEN + 64, bit in 0u8..8,
                                       v2 in any::<bool>()) {
            let format = if v2 { Format::V2 } else { Format::V1 };
            let mut seg = encode_record(format, &body, 4096, 7);
            let at = at % seg.len();
            seg[at] ^= 1 << bit;
            seg.resize(seg.len() + 64, 0);
            let slot = validate(&seg, 4096, 4096);
            prop_assert!(slot.defect().is_some(), "byte {} bit {}: {:?}", at, bit, slot);
        }
    }

    #[test]
    fn the_crc_is_the_cpu_s_crc32c_over_bytes_12_to_the_end() {
        // Known answer: CRC-32C("123456789") = 0xE3069283 (RFC 3720's polynomial).
        assert_eq!(crc32c::crc32c(b"123456789"), 0xE306_9283);
        let rec = encode_record(Format::V2, b"body", 64, 5);
        assert_eq!(u32_at(&rec, 8), crc32c::crc32c(&rec[12..]));
        assert_eq!(u32_at(&rec, 4), MAGIC_V2);
        assert_eq!(u32_at(&rec, 12), 0);
    }

    #[test]
    fn wrong_position_is_rejected() {
        for f in FORMATS {
            let seg = encode_record(f, b"abc", 100, 1);
            assert!(matches!(decode(&seg, 101, 64), Slot::Invalid(_)), "{f:?}");
        }
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
        for f in FORMATS {
            let seg = encode_record(f, &[1u8; 100], 0, 0);
            assert!(matches!(decode(&seg, 0, 99), Slot::Invalid(_)));
            assert!(matches!(decode(&seg[..100], 0, 4096), Slot::Invalid(_)));
        }
    }

    #[test]
    fn a_format_2_record_with_unknown_attributes_is_refused() {
        let mut seg = encode_record(Format::V2, b"abc", 0, 0);
        seg[15] = 1;
        let crc = crc32c::crc32c(&seg[12..]);
        seg[8..12].copy_from_slice(&crc.to_le_bytes());
        assert!(matches!(validate(&seg, 0, 64), Slot::Invalid(why) if why.contains("attributes")));
    }

    #[test]
    fn properties_sit_between_header_and_body_under_the_crc() {
        let mut props = Vec::new();
        props::encode::<&str, &[u8]>(Some(b"k"), None, &[], "", &mut props).unwrap();
        let body = b"body";
        let mut rec = encode(Format::V2, &props, body, None, 64, 5).to_vec();
        rec.extend_from_slice(&props);
        rec.extend_from_slice(body);
        let Slot::Record(h) = validate(&rec, 64, 64) else {
            panic!("not a record")
        };
        assert_eq!((h.props_len, h.body_from(), h.body_len()), (4, 36, 4));
        // A block that does not parse is refused even under a valid CRC.
        let mut odd = encode(Format::V2, b"pp", body, None, 64, 5).to_vec();
        odd.extend_from_slice(b"ppbody");
        assert!(matches!(validate(&odd, 64, 64), Slot::Invalid(why) if why.contains("parse")));
        for at in 12..rec.len() {
            let mut bad = rec.clone();
            bad[at] ^= 0x10;
            assert!(validate(&bad, 64, 64).defect().is_some(), "byte {at}");
        }
        // Properties longer than the record are refused before any slice is taken.
        let mut long = rec.clone();
        long[12] = 40;
        assert!(matches!(decode(&long, 64, 64), Slot::Invalid(_)));
    }
}
