//! One consumer's committed position as it sits on disk: a 256-byte slot with its own CRC.
//!
//! A consumer owns a pair of slots and writes them in turn (the slot of its next sequence
//! number), so a write torn by a crash spoils only the slot being written: the other still holds
//! the commit before, which is the newest one that returned.

use crate::error::{Error, Result};

/// Bytes of a slot.
pub(crate) const SLOT: usize = 256;
/// Bytes of a consumer's pair of slots; pair `i` starts at `HEADER + i * PAIR`.
pub(crate) const PAIR: u64 = 2 * SLOT as u64;
/// Bytes before the first pair: the file's magic and version.
pub(crate) const HEADER: u64 = PAIR;
/// The longest name, in UTF-8 bytes.
pub const MAX_NAME_LEN: usize = 200;

const MAGIC: [u8; 4] = *b"RMQC";
const NAME_AT: usize = 46;
const MAX_DELIVERIES_AT: usize = 248;
const DEAD_LETTERED_AT: usize = 252;
const DROPPED: u32 = 1;

/// A consumer's state as of one commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Slot {
    /// Grows by one at every write of the name, across drops and re-creations.
    pub seq: u64,
    /// The committed position: every record below it is done.
    pub position: u64,
    pub committed_ms: u64,
    pub created_ms: u64,
    /// A tombstone: the name was dropped (its pair may be reused).
    pub dropped: bool,
    pub name: String,
    /// The name's `max_deliveries` (0: none): a record delivered this often without a commit is
    /// dead-lettered instead of delivered again.
    pub max_deliveries: u32,
    /// Records dead-lettered (or skipped for want of a dead-letter store) so far.
    pub dead_lettered: u32,
}

impl Slot {
    pub fn encode(&self) -> [u8; SLOT] {
        let mut b = [0u8; SLOT];
        let name = self.name.as_bytes();
        debug_assert!(name.len() <= MAX_NAME_LEN);
        b[0..4].copy_from_slice(&MAGIC);
        b[8..16].copy_from_slice(&self.seq.to_le_bytes());
        b[16..24].copy_from_slice(&self.position.to_le_bytes());
        b[24..32].copy_from_slice(&self.committed_ms.to_le_bytes());
        b[32..40].copy_from_slice(&self.created_ms.to_le_bytes());
        let flags = if self.dropped { DROPPED } else { 0 };
        b[40..44].copy_from_slice(&flags.to_le_bytes());
        b[44..46].copy_from_slice(&(name.len() as u16).to_le_bytes());
        b[NAME_AT..NAME_AT + name.len()].copy_from_slice(name);
        b[MAX_DELIVERIES_AT..MAX_DELIVERIES_AT + 4]
            .copy_from_slice(&self.max_deliveries.to_le_bytes());
        b[DEAD_LETTERED_AT..DEAD_LETTERED_AT + 4]
            .copy_from_slice(&self.dead_lettered.to_le_bytes());
        let crc = crc32fast::hash(&b[8..]);
        b[4..8].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// The slot in `b`, or `None` if it was never written or its write was torn.
    pub fn decode(b: &[u8]) -> Option<Slot> {
        let b: &[u8; SLOT] = b.try_into().ok()?;
        let bytes = |at: usize| -> [u8; 8] { std::array::from_fn(|i| b[at + i]) };
        let word = |at: usize| u64::from_le_bytes(bytes(at));
        let half = |at: usize| u32::from_le_bytes(std::array::from_fn(|i| b[at + i]));
        if b[0..4] != MAGIC || crc32fast::hash(&b[8..]) != half(4) {
            return None;
        }
        let len = usize::from(u16::from_le_bytes([b[44], b[45]]));
        let name = std::str::from_utf8(b.get(NAME_AT..NAME_AT + len)?).ok()?;
        if len > MAX_NAME_LEN {
            return None;
        }
        let flags = half(40);
        Some(Slot {
            seq: word(8),
            position: word(16),
            committed_ms: word(24),
            created_ms: word(32),
            dropped: flags & DROPPED != 0,
            name: name.to_owned(),
            max_deliveries: half(MAX_DELIVERIES_AT),
            dead_lettered: half(DEAD_LETTERED_AT),
        })
    }

    /// Where this write goes in pair `pair`.
    pub fn at(&self, pair: usize) -> u64 {
        HEADER + pair as u64 * PAIR + (self.seq % 2) * SLOT as u64
    }
}

/// The newest intact slot of a pair's bytes.
pub(crate) fn newest(pair: &[u8]) -> Option<Slot> {
    // A file may end after the first slot of its last pair.
    let a = pair.get(..SLOT).and_then(Slot::decode);
    let b = pair.get(SLOT..2 * SLOT).and_then(Slot::decode);
    match (a, b) {
        (Some(a), Some(b)) => Some(if a.seq >= b.seq { a } else { b }),
        (a, b) => a.or(b),
    }
}

/// The file's first bytes: what it is and which version of this layout.
pub(crate) fn header() -> [u8; HEADER as usize] {
    let mut b = [0u8; HEADER as usize];
    b[..8].copy_from_slice(b"RMQLCONS");
    b[8..12].copy_from_slice(&1u32.to_le_bytes());
    b[12..16].copy_from_slice(&(SLOT as u32).to_le_bytes());
    b
}

/// Checks a name before anything is written: what is wrong and what is accepted.
pub(crate) fn check_name(name: &str) -> Result<()> {
    if name.is_empty() || name.len() > MAX_NAME_LEN || name.chars().any(char::is_control) {
        return Err(Error::invalid(format!(
            "consumer name {name:?} is not accepted: a name is 1 to {MAX_NAME_LEN} bytes of \
             UTF-8 with no control characters"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(seq: u64) -> Slot {
        Slot {
            seq,
            position: seq.wrapping_mul(4096),
            committed_ms: 1_700_000_000_000,
            created_ms: 1_600_000_000_000,
            dropped: seq == 7,
            name: "billing-é".into(),
            max_deliveries: 16,
            dead_lettered: seq as u32,
        }
    }

    #[test]
    fn a_slot_reads_back_as_written() {
        for seq in [1, 2, 7, u64::MAX] {
            assert_eq!(Slot::decode(&slot(seq).encode()), Some(slot(seq)));
        }
    }

    #[test]
    fn a_torn_or_damaged_slot_is_not_read() {
        let good = slot(3).encode();
        assert_eq!(Slot::decode(&[0u8; SLOT]), None);
        for i in [0, 5, 9, 17, 45, 50, SLOT - 1] {
            let mut bad = good;
            bad[i] ^= 0x10;
            assert_eq!(Slot::decode(&bad), None, "byte {i}");
        }
        // A write of the next state cut after its first 16 bytes (its position not written).
        let mut torn = good;
        torn[..16].copy_from_slice(&slot(5).encode()[..16]);
        assert_eq!(Slot::decode(&torn), None);
    }

    #[test]
    fn the_newest_intact_slot_of_a_pair_wins() {
        let mut pair = [0u8; 2 * SLOT];
        assert_eq!(newest(&pair), None);
        pair[..SLOT].copy_from_slice(&slot(4).encode());
        pair[SLOT..].copy_from_slice(&slot(5).encode());
        assert_eq!(newest(&pair).map(|s| s.seq), Some(5));
        pair[SLOT + 20] ^= 1; // the write of 5 was torn
        assert_eq!(newest(&pair).map(|s| s.seq), Some(4));
    }

    #[test]
    fn names_are_checked() {
        assert!(check_name("billing").is_ok());
        assert!(check_name(&"é".repeat(100)).is_ok());
        for bad in ["", "a\nb", &"x".repeat(MAX_NAME_LEN + 1)] {
            let e = check_name(bad).unwrap_err().to_string();
            assert!(e.contains("1 to 200 bytes"), "{e}");
        }
    }
}
