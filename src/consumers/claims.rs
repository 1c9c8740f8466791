//! `rmqlog.claims`: what the opens sharing a consumer name have claimed and not yet committed.
//!
//! Not durable: after a crash of the machine every record past the committed position is
//! delivered again, which at-least-once allows. It lives in the first directory of the store (by
//! path) and also carries the consumers' byte locks (far past its data): a name's hold, its
//! members, and the short lock under which a member reads and rewrites the name's table.
//!
//! A name's table is written to two copies in turn, each with a CRC, so a process killed in the
//! middle of a write leaves the copy before, and with it the claims as they were before a poll or
//! commit that never returned.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::error::{Error, IoContext, Result};

/// Name of the claims file.
pub const FILE: &str = "rmqlog.claims";

/// Claims a name holds at most (one per poll not yet committed).
pub(crate) const MAX_CLAIMS: usize = 120;
/// Entries a table's copy has room for: past `MAX_CLAIMS`, only for splits of lapsed claims.
pub(crate) const CAPACITY: usize = (COPY as usize - HEAD) / ENTRY;
/// Opens of one name at most.
pub(crate) const MAX_MEMBERS: u64 = 64;
/// The member of a claim no open holds (its open died, or it is the rest of a claim split at a
/// redelivery): the next poll takes it.
pub(crate) const NOBODY: u16 = u16::MAX;

const COPY: u64 = 4096;
const HEAD: usize = 40;
const ENTRY: usize = 32;
const MAGIC: u32 = 0x434c_4d31; // "CLM1"

/// Lock bytes, far past any table.
const NAME_LOCKS: u64 = 1 << 40;
const MEMBER_LOCKS: u64 = 2 << 40;
const TABLE_LOCKS: u64 = 3 << 40;

/// The byte whose lock holds the name of pair `pair` open (shared by members, exclusive by an
/// exclusive consumer).
pub(crate) fn name_byte(pair: usize) -> u64 {
    NAME_LOCKS + pair as u64
}

/// The byte whose lock says member `k` of pair `pair` is alive.
pub(crate) fn member_byte(pair: usize, k: u64) -> u64 {
    MEMBER_LOCKS + pair as u64 * MAX_MEMBERS + k
}

/// The byte locked while a member reads and rewrites pair `pair`'s table.
pub(crate) fn table_byte(pair: usize) -> u64 {
    TABLE_LOCKS + pair as u64
}

/// Records `[from, to)` delivered to member `member` at `claimed_ms`; `done` once it committed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Claim {
    pub from: u64,
    pub to: u64,
    pub member: u16,
    pub done: bool,
    pub claimed_ms: u64,
}

/// A name's claims.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Table {
    seq: u64,
    /// The name's committed position as of the table: every record below it is done.
    pub base: u64,
    /// The first record no one has claimed.
    pub next: u64,
    /// By `from`; all at or above `base`, below `next`.
    pub claims: Vec<Claim>,
}

impl Table {
    /// A table with nothing claimed, from `base`.
    pub fn fresh(base: u64) -> Table {
        Table {
            seq: 0,
            base,
            next: base,
            claims: Vec::new(),
        }
    }

    /// Drops every claim: nothing claimed from `base` on. The sequence goes on, so the copy
    /// written next is the newest.
    pub fn reset(&mut self, base: u64) {
        self.base = base;
        self.next = base;
        self.claims.clear();
    }

    /// Moves `base` over the done claims that start at it; whether it moved. The claims cover
    /// `[base, next)` whole, so `base` stops at the first one not done. Done claims behind it
    /// that touch are merged: the table holds about two entries per claim not done.
    pub fn advance(&mut self) -> bool {
        let before = self.base;
        self.claims.sort_by_key(|c| c.from);
        while let Some(c) = self
            .claims
            .first()
            .filter(|c| c.done && c.from == self.base)
        {
            self.base = c.to;
            self.claims.remove(0);
        }
        self.claims.dedup_by(|later, earlier| {
            let merge = earlier.done && later.done && earlier.to == later.from;
            if merge {
                earlier.to = later.to;
            }
            merge
        });
        self.base != before
    }

    /// Claims not yet committed.
    pub fn pending(&self) -> usize {
        self.claims.iter().filter(|c| !c.done).count()
    }

    fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; COPY as usize];
        b[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        b[8..16].copy_from_slice(&self.seq.to_le_bytes());
        b[16..24].copy_from_slice(&self.base.to_le_bytes());
        b[24..32].copy_from_slice(&self.next.to_le_bytes());
        b[32..36].copy_from_slice(&(self.claims.len() as u32).to_le_bytes());
        for (i, c) in self.claims.iter().enumerate() {
            let e = &mut b[HEAD + i * ENTRY..HEAD + (i + 1) * ENTRY];
            e[0..8].copy_from_slice(&c.from.to_le_bytes());
            e[8..16].copy_from_slice(&c.to.to_le_bytes());
            e[16..18].copy_from_slice(&c.member.to_le_bytes());
            e[18] = u8::from(c.done);
            e[24..32].copy_from_slice(&c.claimed_ms.to_le_bytes());
        }
        let crc = crc32fast::hash(&b[8..]);
        b[4..8].copy_from_slice(&crc.to_le_bytes());
        b
    }

    fn decode(b: &[u8]) -> Option<Table> {
        let word = |at: usize| -> u64 { u64::from_le_bytes(std::array::from_fn(|i| b[at + i])) };
        let half = |at: usize| -> u32 { u32::from_le_bytes(std::array::from_fn(|i| b[at + i])) };
        if b.len() != COPY as usize || half(0) != MAGIC || crc32fast::hash(&b[8..]) != half(4) {
            return None;
        }
        let n = half(32) as usize;
        if n > CAPACITY {
            return None;
        }
        let claims = (0..n)
            .map(|i| {
                let at = HEAD + i * ENTRY;
                Claim {
                    from: word(at),
                    to: word(at + 8),
                    member: u16::from_le_bytes([b[at + 16], b[at + 17]]),
                    done: b[at + 18] != 0,
                    claimed_ms: word(at + 24),
                }
            })
            .collect();
        Some(Table {
            seq: word(8),
            base: word(16),
            next: word(24),
            claims,
        })
    }
}

/// The claims file, open.
#[derive(Debug)]
pub(crate) struct Claims {
    path: PathBuf,
    file: File,
}

impl Claims {
    pub fn open(dir: &Path) -> Result<Claims> {
        let path = dir.join(FILE);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .ctx("opening", &path)?;
        Ok(Claims { path, file })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The newest intact copy of pair `pair`'s table, if any. Call with its table lock held.
    pub fn read(&self, pair: usize) -> Result<Option<Table>> {
        let mut b = vec![0u8; 2 * COPY as usize];
        let at = 2 * COPY * pair as u64;
        let n = read_up_to(&self.file, &mut b, at).ctx("reading", &self.path)?;
        b[n..].fill(0);
        let a = Table::decode(&b[..COPY as usize]);
        let c = Table::decode(&b[COPY as usize..]);
        Ok(match (a, c) {
            (Some(a), Some(c)) => Some(if a.seq >= c.seq { a } else { c }),
            (a, c) => a.or(c),
        })
    }

    /// Writes `t` as pair `pair`'s table (the copy after the newest). Call with its table lock
    /// held. Not synced (see the module doc).
    pub fn write(&self, pair: usize, t: &mut Table) -> Result<()> {
        if t.claims.len() > CAPACITY {
            return Err(Error::Internal(format!(
                "{} claims in one table, past {MAX_CLAIMS}",
                t.claims.len()
            )));
        }
        t.seq += 1;
        let at = 2 * COPY * pair as u64 + (t.seq % 2) * COPY;
        self.file
            .write_all_at(&t.encode(), at)
            .ctx("writing", &self.path)
    }
}

fn read_up_to(file: &File, buf: &mut [u8], at: u64) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match file.read_at(&mut buf[n..], at + n as u64) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(from: u64, to: u64, done: bool) -> Claim {
        Claim {
            from,
            to,
            member: 3,
            done,
            claimed_ms: 9,
        }
    }

    #[test]
    fn a_table_reads_back_and_the_newest_copy_wins() {
        let d = tempfile::tempdir().unwrap();
        let c = Claims::open(d.path()).unwrap();
        assert_eq!(c.read(2).unwrap(), None);
        let mut t = Table::fresh(100);
        t.next = 300;
        t.claims = vec![claim(100, 200, false), claim(200, 300, true)];
        c.write(2, &mut t).unwrap();
        assert_eq!(c.read(2).unwrap(), Some(t.clone()));
        t.next = 400;
        t.claims.push(claim(300, 400, false));
        c.write(2, &mut t).unwrap();
        assert_eq!(c.read(2).unwrap(), Some(t.clone()));
        assert_eq!(c.read(1).unwrap(), None);
    }

    #[test]
    fn a_torn_write_leaves_the_copy_before() {
        let d = tempfile::tempdir().unwrap();
        let c = Claims::open(d.path()).unwrap();
        let mut t = Table::fresh(0);
        c.write(0, &mut t).unwrap();
        let before = t.clone();
        t.next = 50;
        t.claims.push(claim(0, 50, false));
        c.write(0, &mut t).unwrap();
        // Spoil the newer copy as a write cut short would.
        let at = (t.seq % 2) * COPY + 16;
        c.file.write_all_at(&[0xff; 8], at).unwrap();
        assert_eq!(c.read(0).unwrap(), Some(before));
    }

    #[test]
    fn base_moves_over_the_done_claims_at_it_only() {
        let mut t = Table::fresh(0);
        t.next = 300;
        t.claims = vec![
            claim(100, 200, true),
            claim(0, 100, false),
            claim(200, 300, true),
        ];
        assert!(!t.advance());
        assert_eq!(
            t.claims.len(),
            2,
            "the two done claims behind (0, 100) merge"
        );
        assert_eq!((t.claims[1].from, t.claims[1].to), (100, 300));
        t.claims[0].done = true; // sorted: (0, 100) first
        assert!(t.advance());
        assert_eq!((t.base, t.claims.len()), (300, 0));
    }
}
