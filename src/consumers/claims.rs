//! `rmqlog.claims`: what the opens sharing a consumer name have claimed and not yet committed,
//! and how often each claim's records were delivered.
//!
//! Not durable: after a crash of the machine every record past the committed position is
//! delivered again, which at-least-once allows, and counted from its first delivery again. A
//! crash of processes keeps it (the page cache has it). It lives in the first directory of the
//! store (by path) and also carries the consumers' byte locks (far past its data): a name's hold,
//! its members, and the short lock under which a member reads and rewrites the name's table.
//!
//! A name's table is written to two copies in turn, each with a CRC, so a process killed in the
//! middle of a write leaves the copy before, and with it the claims as they were before a poll or
//! commit that never returned.
//!
//! Layout of a copy (`COPY` bytes at most, little-endian; written and read up to its last claim):
//! magic, CRC of the rest up to the last claim, sequence, base, next,
//! the number of claims; the process id of each member number (`MAX_MEMBERS` words); then the
//! claims, `ENTRY` bytes each: from, to, member, flags (done, being dead-lettered), deliveries,
//! due (milliseconds of [`lease_now_ms`](super::names::lease_now_ms)), and where in the
//! dead-letter store a claim being dead-lettered started.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::error::{Error, IoContext, Result};

/// Name of the claims file.
pub const FILE: &str = "rmqlog.claims";

/// Entries a name may hold before a poll is refused (one per poll not yet committed, and the
/// runs of done records between them).
pub(crate) const MAX_CLAIMS: usize = 120;
/// Entries a table's copy has room for: past `MAX_CLAIMS`, for splits (a lapsed claim delivered
/// in part, a nack or ack of some of a claim's records).
pub(crate) const CAPACITY: usize = (COPY as usize - HEAD) / ENTRY;
/// Entries acks and nacks may split claims into: the rest is kept for the splits of lapsed
/// claims delivered in part, so that a table full of acknowledgement gaps still drains.
pub(crate) const ACK_ROOM: usize = CAPACITY - 64;
/// Opens of one name at most.
pub(crate) const MAX_MEMBERS: u64 = 64;
/// The member of a claim no open holds (its open died, or it was handed back, or it is the rest
/// of a claim split at a redelivery): the next poll at or after its due time takes it.
pub(crate) const NOBODY: u16 = u16::MAX;

const COPY: u64 = 65536;
const PIDS_AT: usize = 64;
const HEAD: usize = PIDS_AT + 4 * MAX_MEMBERS as usize;
const ENTRY: usize = 48;
const MAGIC: u32 = 0x434c_4d32; // "CLM2": the layout of this version (CLM1 had no counts)

const DONE: u8 = 1;
const DEAD_LETTERING: u8 = 2;

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

/// Records `[from, to)`: delivered to `member` (or waiting for the next poll, [`NOBODY`]);
/// `done` once committed or acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Claim {
    pub from: u64,
    pub to: u64,
    pub member: u16,
    pub done: bool,
    /// Being appended to the dead-letter store. Only ever seen so under the table lock when the
    /// open doing it failed or died mid-way (it does it all under the lock): the next poll goes
    /// on from `dead_from`.
    pub dead_lettering: bool,
    /// How many times the name delivered these records.
    pub deliveries: u32,
    /// Held: when the claim lapses (claimed then, plus its claimer's redelivery timeout).
    /// [`NOBODY`]'s: when it may be delivered again (0: at once).
    pub due_ms: u64,
    /// Being dead-lettered: the dead-letter store's end before its first record was appended.
    pub dead_from: u64,
}

impl Claim {
    /// Records `[from, to)` delivered for the first time, to `member`, lapsing at `due_ms`.
    pub fn new(from: u64, to: u64, member: u16, due_ms: u64) -> Claim {
        Claim {
            from,
            to,
            member,
            done: false,
            dead_lettering: false,
            deliveries: 1,
            due_ms,
            dead_from: 0,
        }
    }
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
    /// The process id of each member number's open (as it wrote it when it opened; 0: none).
    pub pids: [u32; MAX_MEMBERS as usize],
}

impl Table {
    /// A table with nothing claimed, from `base`.
    pub fn fresh(base: u64) -> Table {
        Table {
            seq: 0,
            base,
            next: base,
            claims: Vec::new(),
            pids: [0; MAX_MEMBERS as usize],
        }
    }

    /// Drops every claim: nothing claimed from `base` on. The sequence goes on, so the copy
    /// written next is the newest.
    pub fn reset(&mut self, base: u64) {
        self.base = base;
        self.next = base;
        self.claims.clear();
    }

    /// Moves `base` up to `at`: the records below are no longer claimed; a claim across `at`
    /// keeps its records above it.
    pub fn cut_below(&mut self, at: u64) {
        self.claims.retain(|c| c.to > at);
        for c in self.claims.iter_mut().filter(|c| c.from < at) {
            c.from = at;
        }
        self.base = at;
        self.next = self.next.max(at);
    }

    /// Moves `base` over the done claims that start at it; whether it moved. The claims cover
    /// `[base, next)` whole, so `base` stops at the first one not done. Done claims behind it
    /// that touch are merged: the table holds about two entries per run of records not done.
    pub fn advance(&mut self) -> bool {
        let before = self.base;
        self.claims.sort_by_key(|c| c.from);
        let done_at_front = self
            .claims
            .iter()
            .take_while(|c| {
                let front = c.done && c.from == self.base;
                if front {
                    self.base = c.to;
                }
                front
            })
            .count();
        self.claims.drain(..done_at_front);
        self.merge_done();
        self.base != before
    }

    /// Merges the done claims that touch (the claims sorted by `from`).
    pub fn merge_done(&mut self) {
        self.claims.dedup_by(|later, earlier| {
            let merge = earlier.done && later.done && earlier.to == later.from;
            if merge {
                earlier.to = later.to;
            }
            merge
        });
    }

    /// Splits claim `i` so that `[from, to)` (inside it, on record boundaries) is a claim of its
    /// own; its index, or `None` if that would make the table hold more than `room` entries.
    pub fn isolate(&mut self, i: usize, from: u64, to: u64, room: usize) -> Option<usize> {
        let c = self.claims[i];
        debug_assert!(c.from <= from && from < to && to <= c.to);
        let pieces = usize::from(c.from < from) + usize::from(to < c.to);
        if self.claims.len() + pieces > room.min(CAPACITY) {
            return None;
        }
        let mut at = i;
        if c.from < from {
            self.claims[i].to = from;
            self.claims.insert(i + 1, Claim { from, ..c });
            at = i + 1;
        }
        if to < c.to {
            self.claims[at].to = to;
            self.claims.insert(at + 1, Claim { from: to, ..c });
        }
        Some(at)
    }

    /// Claims not yet committed.
    pub fn pending(&self) -> usize {
        self.claims.iter().filter(|c| !c.done).count()
    }

    /// The copy's bytes up to its last claim (the CRC covers those; what lies past them in the
    /// file is left from longer tables and never read).
    fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; HEAD + self.claims.len() * ENTRY];
        b[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        b[8..16].copy_from_slice(&self.seq.to_le_bytes());
        b[16..24].copy_from_slice(&self.base.to_le_bytes());
        b[24..32].copy_from_slice(&self.next.to_le_bytes());
        b[32..36].copy_from_slice(&(self.claims.len() as u32).to_le_bytes());
        for (k, pid) in self.pids.iter().enumerate() {
            b[PIDS_AT + 4 * k..PIDS_AT + 4 * k + 4].copy_from_slice(&pid.to_le_bytes());
        }
        for (i, c) in self.claims.iter().enumerate() {
            let e = &mut b[HEAD + i * ENTRY..HEAD + (i + 1) * ENTRY];
            e[0..8].copy_from_slice(&c.from.to_le_bytes());
            e[8..16].copy_from_slice(&c.to.to_le_bytes());
            e[16..18].copy_from_slice(&c.member.to_le_bytes());
            e[18] =
                if c.done { DONE } else { 0 } | if c.dead_lettering { DEAD_LETTERING } else { 0 };
            e[20..24].copy_from_slice(&c.deliveries.to_le_bytes());
            e[24..32].copy_from_slice(&c.due_ms.to_le_bytes());
            e[32..40].copy_from_slice(&c.dead_from.to_le_bytes());
        }
        let crc = crc32fast::hash(&b[8..]);
        b[4..8].copy_from_slice(&crc.to_le_bytes());
        b
    }

    fn decode(b: &[u8]) -> Option<Table> {
        let word = |at: usize| -> u64 { u64::from_le_bytes(std::array::from_fn(|i| b[at + i])) };
        let half = |at: usize| -> u32 { u32::from_le_bytes(std::array::from_fn(|i| b[at + i])) };
        if b.len() < HEAD || half(0) != MAGIC {
            return None;
        }
        let n = half(32) as usize;
        let len = HEAD + n * ENTRY;
        if n > CAPACITY || b.len() < len || crc32fast::hash(&b[8..len]) != half(4) {
            return None;
        }
        let claims = (0..n)
            .map(|i| {
                let at = HEAD + i * ENTRY;
                Claim {
                    from: word(at),
                    to: word(at + 8),
                    member: u16::from_le_bytes([b[at + 16], b[at + 17]]),
                    done: b[at + 18] & DONE != 0,
                    dead_lettering: b[at + 18] & DEAD_LETTERING != 0,
                    deliveries: half(at + 20),
                    due_ms: word(at + 24),
                    dead_from: word(at + 32),
                }
            })
            .collect();
        Some(Table {
            seq: word(8),
            base: word(16),
            next: word(24),
            claims,
            pids: std::array::from_fn(|k| half(PIDS_AT + 4 * k)),
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

    /// [`Claims::open`] of a file that exists (for a look that must create nothing).
    pub fn open_existing(dir: &Path) -> Result<Option<Claims>> {
        let path = dir.join(FILE);
        match OpenOptions::new().read(true).open(&path) {
            Ok(file) => Ok(Some(Claims { path, file })),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::io("opening", &path, e)),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The newest intact copy of pair `pair`'s table, if any. Call with its table lock held.
    pub fn read(&self, pair: usize) -> Result<Option<Table>> {
        let at = 2 * COPY * pair as u64;
        let a = self.read_copy(at)?;
        let c = self.read_copy(at + COPY)?;
        Ok(match (a, c) {
            (Some(a), Some(c)) => Some(if a.seq >= c.seq { a } else { c }),
            (a, c) => a.or(c),
        })
    }

    /// The copy at `at`, if intact: its head first, then as many claims as the head says.
    fn read_copy(&self, at: u64) -> Result<Option<Table>> {
        const FIRST: usize = 4096;
        let mut b = vec![0u8; FIRST];
        let n = read_up_to(&self.file, &mut b, at).ctx("reading", &self.path)?;
        let claims = b.get(32..36).map_or(0, |w| {
            u32::from_le_bytes(w.try_into().unwrap_or_default()) as usize
        });
        let len = HEAD + claims.min(CAPACITY) * ENTRY;
        if n == FIRST && len > FIRST {
            b.resize(len, 0);
            let more = read_up_to(&self.file, &mut b[FIRST..], at + FIRST as u64)
                .ctx("reading", &self.path)?;
            b.truncate(FIRST + more);
        } else {
            b.truncate(n);
        }
        Ok(Table::decode(&b))
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
            done,
            deliveries: 2,
            ..Claim::new(from, to, 3, 9)
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
    fn counts_flags_due_times_and_pids_read_back() {
        let d = tempfile::tempdir().unwrap();
        let c = Claims::open(d.path()).unwrap();
        let mut t = Table::fresh(0);
        t.next = 300;
        t.pids[5] = 4242;
        t.pids[63] = u32::MAX;
        t.claims = vec![
            Claim {
                dead_lettering: true,
                deliveries: u32::MAX,
                dead_from: 77,
                ..Claim::new(0, 100, 5, u64::MAX)
            },
            Claim::new(100, 300, NOBODY, 0),
        ];
        c.write(0, &mut t).unwrap();
        assert_eq!(c.read(0).unwrap(), Some(t));
    }

    #[test]
    fn isolating_records_splits_a_claim_into_at_most_three() {
        let mut t = Table::fresh(0);
        t.next = 100;
        t.claims = vec![claim(0, 100, false)];
        let i = t.isolate(0, 40, 60, CAPACITY).unwrap();
        let spans: Vec<(u64, u64)> = t.claims.iter().map(|c| (c.from, c.to)).collect();
        assert_eq!((i, spans), (1, vec![(0, 40), (40, 60), (60, 100)]));
        assert!(t.claims.iter().all(|c| c.deliveries == 2 && c.member == 3));
        assert_eq!(
            t.isolate(0, 0, 40, CAPACITY),
            Some(0),
            "the whole claim: no split"
        );
        assert_eq!(t.isolate(2, 90, 100, CAPACITY), Some(3));
        assert_eq!(t.claims.len(), 4);
        // No room: nothing changes.
        assert_eq!(t.isolate(0, 10, 20, 5), None);
        t.claims.resize(CAPACITY, claim(100, 100, true));
        assert_eq!(t.isolate(0, 10, 20, CAPACITY), None);
        assert_eq!((t.claims[0].from, t.claims[0].to), (0, 40));
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
