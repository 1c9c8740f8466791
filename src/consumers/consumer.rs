//! A named consumer: a position in the log that the store keeps, so that a consumer resumes
//! where it stopped, and a poll that waits for the next records.
//!
//! The committed position (in the store, see [`crate::consumers`]) says every record below it is
//! done. An exclusive consumer holds its name alone and reads from its own `position`; a commit
//! never passes it, so a crash resumes at the last commit that returned or later, and never past
//! a record the consumer was given. The opens sharing a name (the default) claim the next records
//! at each poll in the name's claims table ([`crate::consumers::claims`]); a commit marks the open's claims
//! done and moves the committed position over the done claims at its front. Claims not committed
//! within the redelivery timeout, or whose open closed or died, go to the next poll of any open.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::consumers::claims::{
    self, member_byte, name_byte, table_byte, Claim, Claims, Table, NOBODY,
};
use crate::consumers::file::{check_made, note_pairs_made, pairs_made, Positions};
use crate::consumers::names::{behind_the_end, find, lease_now_ms, now_ms, positions_dirs};
use crate::consumers::slot::{check_name, Slot};
use crate::error::{Error, Result};
use crate::failpoint::fail_point;
use crate::open::lock::{ByteLocks, NamesLock};
use crate::read::follow;
use crate::read::reader::{self, RecordRef, Scan};
use crate::read::wait::{self, Waited};
use crate::shared;
use crate::state::State;
use crate::write::flusher::make_durable;

/// Where a consumer starts: for a name the store does not know yet, and for [`Consumer::seek`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Start {
    /// The log's first record (`min_offset`).
    #[default]
    Earliest,
    /// The log's end: only records appended from now on.
    Latest,
    /// The record at this offset (or the end, if it is `max_offset`).
    Offset(u64),
    /// The first record with a timestamp at or after this one (milliseconds since the epoch).
    Timestamp(u64),
}

/// What a poll does when records the consumer had not committed are gone (retention, a disk
/// limit, `truncate_before`) before it read them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnLoss {
    /// Fail with [`Error::DataLoss`] naming the lost range, at every poll until [`Consumer::seek`].
    #[default]
    Raise,
    /// Say so in the log (a warning naming the range) and go on from `min_offset`.
    Skip,
}

/// How [`crate::CommitLog::consumer`] opens a name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConsumerOptions {
    /// Where a name new to the store starts (a known name resumes at its committed position).
    pub start: Start,
    pub on_loss: OnLoss,
    /// Hold the name alone: refused while any other open has it, and any other open refused
    /// while this one has it. Otherwise the opens of a name share its records (each poll claims
    /// the next ones for its open).
    pub exclusive: bool,
    /// Shared opens: records one open claimed and did not commit within this time are delivered
    /// again (at once if its process died).
    pub redelivery_timeout: Duration,
}

impl Default for ConsumerOptions {
    fn default() -> Self {
        ConsumerOptions {
            start: Start::Earliest,
            on_loss: OnLoss::Raise,
            exclusive: false,
            redelivery_timeout: Duration::from_secs(30),
        }
    }
}

/// How far a consumer's committed position is behind the log's end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lag {
    pub records: u64,
    pub bytes: u64,
}

/// A consumer name held open by this process (see the module doc). One thread polls it.
#[derive(Debug)]
pub struct Consumer {
    state: Arc<State>,
    positions: Positions,
    claims: Claims,
    /// The hold on the name, the member slot, the table lock (see [`crate::consumers::claims`]); shared
    /// with the log, which lets them go at its close.
    locks: Arc<ByteLocks>,
    pair: usize,
    /// The name's state as last written or read by this open: its committed position.
    slot: Slot,
    /// The next record a poll delivers; shared, the offset after the last record this open's
    /// polls delivered.
    position: u64,
    /// Shared: the first record no open had claimed, as of this open's last look (a poll waits
    /// for the log to pass it).
    unclaimed: u64,
    on_loss: OnLoss,
    /// `None` for an exclusive consumer.
    member: Option<Member>,
}

/// An open sharing its name with others.
#[derive(Debug)]
struct Member {
    k: u16,
    redelivery: Duration,
}

impl Consumer {
    /// Opens `name`, creating it at `opts.start` if the store does not know it; refused with
    /// [`Error::ConsumerBusy`] while another open holds it exclusively (or, for an exclusive
    /// open, at all).
    pub(crate) fn open(
        state: &Arc<State>,
        name: &str,
        opts: ConsumerOptions,
    ) -> Result<(Consumer, Arc<ByteLocks>)> {
        check_name(name)?;
        state.check_open()?;
        shared::catch_up(state)?;
        // A position past the end is checked for only where no writer published this boot (a
        // read-only open of a store no writer opened since a power loss): elsewhere the writer's
        // open checked at recovery, and a live writer's consumers commit past this open's view.
        let unchecked = state.read_only && follow::refresh_published(state)?.1.is_none();
        let dirs = positions_dirs(state)?;
        let _names = NamesLock::take(dirs[0])?;
        let positions = Positions::open(&dirs, true)?;
        let pairs = positions.read()?;
        let names_file = dirs[0].join(crate::open::lock::NAMES_FILE);
        let made = pairs_made(&names_file);
        check_made(&pairs, made, &dirs)?;
        let end = state.max_offset();
        let (pair, slot, created) = match find(&pairs, name) {
            Some(i) => {
                let mut slot = pairs[i].clone().expect("found");
                if unchecked && slot.position > end {
                    slot = behind_the_end(&positions, i, slot, end)?;
                }
                (i, slot, false)
            }
            None => {
                // The first pair free in every directory; a dropped name's count goes on there.
                let i = pairs
                    .iter()
                    .position(|s| s.as_ref().is_none_or(|s| s.dropped))
                    .unwrap_or(pairs.len());
                let now = now_ms();
                let slot = Slot {
                    seq: pairs.get(i).and_then(Option::as_ref).map_or(0, |s| s.seq) + 1,
                    position: resolve(state, opts.start)?,
                    committed_ms: now,
                    created_ms: now,
                    dropped: false,
                    name: name.to_owned(),
                };
                positions.write(i, &slot, true)?;
                if i as u64 >= made {
                    note_pairs_made(&names_file, i as u64 + 1)?;
                }
                (i, slot, true)
            }
        };
        let claims = Claims::open(dirs[0])?;
        let locks = Arc::new(ByteLocks::open(claims.path())?);
        let busy = || Error::ConsumerBusy {
            name: name.to_owned(),
        };
        if !locks.try_lock(name_byte(pair), opts.exclusive)? {
            return Err(busy());
        }
        let member = if opts.exclusive {
            None
        } else {
            let k = (0..claims::MAX_MEMBERS)
                .find(|&k| locks.try_lock(member_byte(pair, k), true).unwrap_or(false))
                .ok_or_else(|| {
                    Error::Unsupported(format!(
                        "consumer {name:?} is open {} times already, the most one name shares",
                        claims::MAX_MEMBERS
                    ))
                })?;
            Some(Member {
                k: k as u16,
                redelivery: opts.redelivery_timeout,
            })
        };
        let mut c = Consumer {
            state: Arc::clone(state),
            positions,
            claims,
            locks,
            pair,
            position: slot.position,
            unclaimed: slot.position,
            slot,
            on_loss: opts.on_loss,
            member,
        };
        c.with_table(|c, t| {
            if created || c.member.is_none() {
                // A new name, or one held alone: no claims carry over.
                t.reset(c.slot.position);
            } else if unchecked && t.next > end {
                // Claims past the end: of records a power loss took (see `behind_the_end`).
                t.reset(c.slot.position);
            } else if let Some(m) = &c.member {
                // Claims left by a dead open that had this member number go to the next poll.
                for cl in t
                    .claims
                    .iter_mut()
                    .filter(|cl| cl.member == m.k && !cl.done)
                {
                    cl.member = NOBODY;
                    cl.claimed_ms = 0;
                }
                c.unclaimed = t.next;
            }
            Ok((true, ()))
        })?;
        let locks = Arc::clone(&c.locks);
        Ok((c, locks))
    }

    pub fn name(&self) -> &str {
        &self.slot.name
    }

    /// The next record a poll delivers.
    pub fn position(&self) -> u64 {
        self.position
    }

    /// The committed position: every record below it is done.
    pub fn committed(&self) -> u64 {
        self.slot.position
    }

    /// Up to `max_records` records from the position, waiting until `deadline` (forever if
    /// `None`) for the first one; empty if none came in time.
    pub fn poll(
        &mut self,
        max_records: usize,
        deadline: Option<Instant>,
    ) -> Result<Vec<RecordRef>> {
        loop {
            let records = self.take(max_records)?;
            if !records.is_empty() {
                return Ok(records);
            }
            if let Waited::TimedOut(_) = self.wait(deadline, false)? {
                return Ok(records);
            }
        }
    }

    /// Up to `max_records` records from the position, without waiting. A shared open claims
    /// them, or the first part of a claim that lapsed.
    pub fn take(&mut self, max_records: usize) -> Result<Vec<RecordRef>> {
        let read = |scan: Scan| -> Result<Option<(Vec<RecordRef>, u64)>> {
            let mut out = Vec::with_capacity(max_records.min(1024));
            for r in scan.take(max_records) {
                out.push(r?);
            }
            Ok(out.last().map(RecordRef::next_offset).map(|end| (out, end)))
        };
        Ok(self.next_records(read)?.unwrap_or_default())
    }

    /// Up to `opts.max_records` records (and `opts.max_bytes`) from the position as one Arrow
    /// batch, waiting until `deadline` (forever if `None`) for the first; `None` if none came.
    #[cfg(feature = "arrow")]
    pub fn poll_batch(
        &mut self,
        opts: &crate::arrow::BatchOptions,
        deadline: Option<Instant>,
    ) -> Result<Option<arrow_array::RecordBatch>> {
        loop {
            if let Some(batch) = self.take_batch(opts)? {
                return Ok(Some(batch));
            }
            if let Waited::TimedOut(_) = self.wait(deadline, false)? {
                return Ok(None);
            }
        }
    }

    /// [`Consumer::poll_batch`] without waiting.
    #[cfg(feature = "arrow")]
    pub fn take_batch(
        &mut self,
        opts: &crate::arrow::BatchOptions,
    ) -> Result<Option<arrow_array::RecordBatch>> {
        opts.validate()?;
        self.next_records(|scan| {
            let mut reader = crate::arrow::BatchReader::new(scan, opts.clone());
            let batch = reader.next_batch()?;
            Ok(batch.map(|b| (b, reader.next_offset())))
        })
    }

    /// The next records for this open, read by `read` from a scan (what it read and the offset
    /// after its last record; `None` if it read none).
    fn next_records<R>(
        &mut self,
        read: impl Fn(Scan) -> Result<Option<(R, u64)>>,
    ) -> Result<Option<R>> {
        self.state.check_open()?;
        shared::catch_up(&self.state)?;
        if self.member.is_some() {
            return self.with_table(|c, t| c.claim(t, &read))?;
        }
        self.check_loss()?;
        let scan = match Scan::new(Arc::clone(&self.state), Some(self.position), None) {
            Err(Error::OffsetOutOfRange { .. }) => {
                self.check_loss()?; // deleted since the check
                Scan::new(Arc::clone(&self.state), Some(self.position), None)?
            }
            other => other?,
        };
        let Some((r, end)) = read(scan)? else {
            return Ok(None);
        };
        self.position = end;
        Ok(Some(r))
    }

    /// A shared open's poll, with the name's table `t` locked: a lapsed claim first (its records
    /// again), else a new claim from the first unclaimed record. The first of the pair says
    /// whether `t` changed.
    fn claim<R>(
        &mut self,
        t: &mut Table,
        read: &impl Fn(Scan) -> Result<Option<(R, u64)>>,
    ) -> Result<(bool, Result<Option<R>>)> {
        let (me, redelivery) = match &self.member {
            Some(m) => (m.k, m.redelivery.as_millis() as u64),
            None => return Err(Error::Internal("a claim by an exclusive consumer".into())),
        };
        let min = self.state.min_offset();
        if t.base < min {
            // Records below the log's head are gone. Lost are those no live open holds: the
            // claims of no one or of a dead open, and what no one had claimed. A live open's
            // claim keeps its records past the head (it has them, and commits them).
            let lost_from = t
                .claims
                .iter()
                .filter(|c| c.from < min && !c.done)
                .filter(|c| c.member == NOBODY || (c.member != me && !self.is_alive(c.member)))
                .map(|c| c.from)
                .chain((t.next < min).then_some(t.next))
                .min();
            t.claims.retain(|c| c.to > min);
            for c in t.claims.iter_mut().filter(|c| c.from < min) {
                c.from = min;
            }
            t.base = min;
            t.next = t.next.max(min);
            t.advance();
            self.write_slot(t.base)?;
            if let Some(from) = lost_from {
                if let Err(e) = self.lost(from, min) {
                    return Ok((true, Err(e)));
                }
            }
        }
        if t.advance() {
            self.write_slot(t.base)?; // not expected: commits advance what they finish
        }
        let now = lease_now_ms();
        let lapsed = t.claims.iter().position(|c| {
            !c.done
                && (c.member == NOBODY
                    || now >= c.claimed_ms.saturating_add(redelivery)
                    || (c.member != me && !self.is_alive(c.member)))
        });
        if let Some(i) = lapsed {
            let Claim { from, to, .. } = t.claims[i];
            if to > self.state.readable_end() && self.state.read_only {
                // Claimed by an open whose view was ahead of this one's: look again first.
                follow::refresh(&self.state)?;
            }
            if to > self.state.readable_end() {
                // Not readable here yet (a sync store's records not yet durable): later.
                return Ok((false, Ok(None)));
            }
            let scan = Scan::new(Arc::clone(&self.state), Some(from), Some(to))?;
            let Some((r, end)) = read(scan)? else {
                return Err(Error::Internal(format!(
                    "claimed records [{from}, {to}) of consumer {:?} read as none",
                    self.slot.name
                )));
            };
            if end < to {
                // Only the first part fits this poll: the rest waits for the next one (room
                // past MAX_CLAIMS is kept for these splits, so that a full table of lapsed
                // claims still drains).
                if t.claims.len() >= claims::CAPACITY {
                    return Err(self.full(t));
                }
                t.claims.push(Claim {
                    from: end,
                    to,
                    member: NOBODY,
                    done: false,
                    claimed_ms: 0,
                });
                t.claims[i].to = end;
            }
            t.claims[i].member = me;
            t.claims[i].claimed_ms = now;
            self.position = end;
            self.unclaimed = t.next;
            return Ok((true, Ok(Some(r))));
        }
        self.unclaimed = t.next;
        if t.next >= self.state.readable_end() {
            return Ok((false, Ok(None)));
        }
        self.check_room(t)?;
        let scan = Scan::new(Arc::clone(&self.state), Some(t.next), None)?;
        let Some((r, end)) = read(scan)? else {
            return Ok((false, Ok(None)));
        };
        t.claims.push(Claim {
            from: t.next,
            to: end,
            member: me,
            done: false,
            claimed_ms: now,
        });
        t.next = end;
        self.position = end;
        self.unclaimed = end;
        Ok((true, Ok(Some(r))))
    }

    /// Room in the table for one more claim (its entries are the claims not done and the
    /// runs of done ones between them).
    fn check_room(&self, t: &Table) -> Result<()> {
        if t.claims.len() < claims::MAX_CLAIMS {
            return Ok(());
        }
        Err(self.full(t))
    }

    fn full(&self, t: &Table) -> Error {
        Error::Unsupported(format!(
            "consumer {:?} has {} polls not committed, the most a name keeps: commit before \
             polling more",
            self.slot.name,
            t.pending()
        ))
    }

    /// Whether the open with member number `k` is alive (holds its member byte).
    fn is_alive(&self, k: u16) -> bool {
        self.locks
            .held_elsewhere(member_byte(self.pair, u64::from(k)), false)
            .unwrap_or(true)
    }

    /// Runs `f` on the name's claims table with the table's lock held: the table as stored (or
    /// fresh at the committed position), brought up to the committed position in the store;
    /// written back if `f` says it changed it.
    fn with_table<T>(
        &mut self,
        f: impl FnOnce(&mut Consumer, &mut Table) -> Result<(bool, T)>,
    ) -> Result<T> {
        let byte = table_byte(self.pair);
        self.locks.lock(byte)?;
        let out = self.table_locked(f);
        self.locks.unlock(byte);
        out
    }

    fn table_locked<T>(
        &mut self,
        f: impl FnOnce(&mut Consumer, &mut Table) -> Result<(bool, T)>,
    ) -> Result<T> {
        fail_point!("consumer::table_locked");
        if let Some(d) = self.positions.read_pair(self.pair)? {
            if d.seq > self.slot.seq && !d.dropped && d.name == self.slot.name {
                self.slot = d; // another open committed
            }
        }
        let committed = self.slot.position;
        let mut t = self
            .claims
            .read(self.pair)?
            .unwrap_or_else(|| Table::fresh(committed));
        if t.base < committed {
            // An open died between its commit and the table's write: those claims are done.
            t.claims.retain(|c| c.from >= committed);
            t.base = committed;
            t.next = t.next.max(committed);
        } else if t.base > committed {
            // An exclusive open committed back to an earlier record: nothing is claimed there.
            t.reset(committed);
        }
        let (changed, out) = f(self, &mut t)?;
        fail_point!("consumer::claimed");
        if changed {
            fail_point!("consumer::table_write", |_| Err(Error::io(
                "writing the claims",
                claims::FILE,
                std::io::Error::from_raw_os_error(libc::EIO)
            )));
            self.claims.write(self.pair, &mut t)?;
        }
        Ok(out)
    }

    /// Waits until the log's end passes the position, or `deadline` (or a signal, if
    /// `interruptible`). A shared open wakes at least every [`wait::POLL`] to look for lapsed
    /// claims; `TimedOut` means the deadline passed.
    pub(crate) fn wait(&self, deadline: Option<Instant>, interruptible: bool) -> Result<Waited> {
        if self.member.is_none() {
            return wait::wait(&self.state, self.position, false, deadline, interruptible);
        }
        let slice = Instant::now() + wait::POLL;
        let until = deadline.map_or(slice, |d| d.min(slice));
        match wait::wait(
            &self.state,
            self.unclaimed,
            false,
            Some(until),
            interruptible,
        )? {
            Waited::TimedOut(end) if deadline.is_none_or(|d| Instant::now() < d) => {
                Ok(Waited::Passed(end))
            }
            other => Ok(other),
        }
    }

    /// Records that records are done, durably (the name's slot written to every directory and
    /// synced before it returns); returns the name's committed position.
    ///
    /// Exclusive: every record below `offset` (default: the position, all delivered so far);
    /// refused past the position (records this consumer never received) and off a record
    /// boundary. Shared: this open's claims that end at or below `offset` (default: all of
    /// them); the committed position moves over the done claims at the front of the name's.
    pub fn commit(&mut self, offset: Option<u64>) -> Result<u64> {
        self.state.check_open()?;
        if let Some(m) = &self.member {
            let (me, upto) = (m.k, offset.unwrap_or(u64::MAX));
            return self.with_table(|c, t| {
                if let Some(o) = offset {
                    c.check_shared_commit(t, me, o)?;
                }
                let mut marked = false;
                for cl in t.claims.iter_mut() {
                    if cl.member == me && !cl.done && cl.to <= upto {
                        cl.done = true;
                        marked = true;
                    }
                }
                if t.advance() {
                    fail_point!("consumer::committing");
                    c.write_slot(t.base)?;
                    fail_point!("consumer::slot_written");
                }
                Ok((marked, t.base))
            });
        }
        let target = offset.unwrap_or(self.position);
        if target > self.position {
            return Err(Error::invalid(format!(
                "commit(offset={target}) of consumer {:?} is past the records it received: its \
                 position is {} (commit at most that, or poll first)",
                self.slot.name, self.position
            )));
        }
        if target != self.position && target != self.slot.position {
            reader::read(&self.state, target)?; // a record starts there
        }
        self.write_slot(target)?;
        Ok(target)
    }

    /// A shared open's `commit(offset)`: at or below the end of its own claims, at a record
    /// boundary.
    fn check_shared_commit(&self, t: &Table, me: u16, offset: u64) -> Result<()> {
        let mine = || t.claims.iter().filter(|c| c.member == me && !c.done);
        let received = mine().map(|c| c.to).max().unwrap_or(t.base);
        if offset > received {
            return Err(Error::invalid(format!(
                "commit(offset={offset}) of consumer {:?} is past the records it received \
                 (this open, not committed yet): they end at {received}",
                self.slot.name
            )));
        }
        if offset != t.base && !mine().any(|c| c.to == offset) {
            reader::read(&self.state, offset)?; // a record starts there
        }
        Ok(())
    }

    /// Writes the name's committed position, durably, once the records below it are: a power
    /// loss keeps the log up to its last sync, and a position past the log's end would skip the
    /// records appended after it.
    fn write_slot(&mut self, position: u64) -> Result<()> {
        make_durable(&self.state, position)?;
        fail_point!("consumer::records_durable", |_| Err(Error::io(
            "writing a consumer position",
            crate::consumers::file::FILE,
            std::io::Error::from_raw_os_error(libc::EIO)
        )));
        let next = Slot {
            seq: self.slot.seq + 1,
            position,
            committed_ms: now_ms(),
            dropped: false,
            ..self.slot.clone()
        };
        self.positions.write(self.pair, &next, true)?;
        self.slot = next;
        Ok(())
    }

    /// Moves the position (not the committed one: that moves at the next commit). Exclusive
    /// consumers only: a shared name's position is every open's.
    pub fn seek(&mut self, to: Start) -> Result<u64> {
        self.state.check_open()?;
        if self.member.is_some() {
            return Err(Error::Unsupported(format!(
                "seek() on consumer {:?}, whose name is shared: it would move the records of \
                 every open of the name; open it with exclusive=True to seek",
                self.slot.name
            )));
        }
        shared::catch_up(&self.state)?;
        self.position = resolve(&self.state, to)?;
        Ok(self.position)
    }

    /// How far the committed position is behind the log's end. Counting the records reads
    /// their headers: it costs a scan of what is behind.
    pub fn lag(&self) -> Result<Lag> {
        self.state.check_open()?;
        shared::catch_up(&self.state)?;
        let end = self.state.max_offset();
        let from = self.slot.position.max(self.state.min_offset());
        let records = if from >= end {
            0
        } else {
            Scan::new(Arc::clone(&self.state), Some(from), None)?
                .try_fold(0u64, |n, r| r.map(|_| n + 1))?
        };
        Ok(Lag {
            records,
            bytes: end.saturating_sub(self.slot.position),
        })
    }

    /// `Ok` unless records at the position are gone: then [`OnLoss`] decides.
    fn check_loss(&mut self) -> Result<()> {
        let min = self.state.min_offset();
        if self.position >= min {
            return Ok(());
        }
        self.lost(self.position, min)?;
        self.position = min;
        Ok(())
    }

    /// Records `[from, to)` were deleted before this consumer read them.
    fn lost(&self, from: u64, to: u64) -> Result<()> {
        let name = &self.slot.name;
        match self.on_loss {
            OnLoss::Raise => Err(Error::DataLoss {
                consumer: name.clone(),
                from,
                to,
                moved_on: self.member.is_some(),
            }),
            OnLoss::Skip => {
                log::warn!(
                    "consumer {name:?}: records [{from}, {to}) were deleted before it read \
                     them; it goes on from {to}"
                );
                Ok(())
            }
        }
    }
}

/// Where `start` is in the log now.
pub(crate) fn resolve(state: &Arc<State>, start: Start) -> Result<u64> {
    match start {
        Start::Earliest => Ok(state.min_offset()),
        Start::Latest => Ok(state.max_offset()),
        Start::Offset(o) if o == state.max_offset() => Ok(o),
        Start::Offset(o) => reader::read(state, o).map(|r| r.offset()),
        Start::Timestamp(ms) => reader::offset_for_timestamp(state, ms),
    }
}
