//! A named consumer: a position in the log that the store keeps, so that a consumer resumes
//! where it stopped, and a poll that waits for the next records.
//!
//! The committed position (in the store, see [`crate::consumers`]) says every record below it is
//! done. An exclusive consumer holds its name alone and reads from its own `position`; a commit
//! never passes it, so a crash resumes at the last commit that returned or later, and never past
//! a record the consumer was given. The opens sharing a name (the default) claim the next records
//! at each poll in the name's claims table ([`crate::consumers::claims`]); a commit marks the open's claims
//! done and moves the committed position over the done claims at its front. Claims not committed
//! within the redelivery timeout, or whose open closed or died, go to the next poll of any open;
//! what a shared open does with its claims (ack, nack, extend, dead-letter) is in
//! [`crate::consumers::work`].

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::consumers::claims::{self, member_byte, name_byte, table_byte, Claims, Table, NOBODY};
use crate::consumers::dead_letter::Sink;
use crate::consumers::file::{check_made, note_pairs_made, pairs_made, Positions};
use crate::consumers::names::{behind_the_end, find, now_ms, positions_dirs};
use crate::consumers::slot::{check_name, Slot};
use crate::error::{Error, Result};
use crate::failpoint::fail_point;
use crate::open::lock::{ByteLocks, NamesLock};
use crate::read::filter::Filter;
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
#[derive(Debug, Clone, PartialEq, Eq)]
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
    /// Shared names: a record delivered this many times without a commit is not delivered again
    /// but dead-lettered (to `dead_letter`, or skipped with a warning). Recorded with the name:
    /// `None` takes the recorded value, `Some(0)` turns it off.
    pub max_deliveries: Option<u32>,
    /// The directories of the store dead letters go to (opened as a shared writer).
    pub dead_letter: Option<Vec<std::path::PathBuf>>,
    /// This open's polls deliver only the records the filter accepts; they move over the others
    /// (see [`Consumer::take`]). Per open, not recorded with the name: every open of a shared
    /// name should give the same one (docs/producers-consumers.md, "Filters").
    pub filter: Option<Filter>,
}

impl ConsumerOptions {
    /// `Ok` unless the options contradict each other (checked before anything is opened).
    pub(crate) fn check(&self, name: &str) -> Result<()> {
        let counted = self.max_deliveries.is_some_and(|n| n > 0) || self.dead_letter.is_some();
        if self.exclusive && counted {
            return Err(Error::invalid(format!(
                "consumer {name:?}: max_deliveries and dead_letter count the deliveries of a \
                 shared name's records; an exclusive consumer's are its own to count (open it \
                 with exclusive=False for a work queue)"
            )));
        }
        if let Some(f) = &self.filter {
            f.check(&format!("consumer {name:?}'s filter"))?;
        }
        Ok(())
    }
}

impl Default for ConsumerOptions {
    fn default() -> Self {
        ConsumerOptions {
            start: Start::Earliest,
            on_loss: OnLoss::Raise,
            exclusive: false,
            redelivery_timeout: Duration::from_secs(30),
            max_deliveries: None,
            dead_letter: None,
            filter: None,
        }
    }
}

/// A filtered take steps over at most this many records its filter refuses, or bytes of them,
/// and returns what it found by then: a poll's work stays bounded however few records match.
pub const FILTER_SKIP_RECORDS: u64 = 1 << 18;
/// See [`FILTER_SKIP_RECORDS`].
pub const FILTER_SKIP_BYTES: u64 = 64 << 20;
/// A filtered open's [`Consumer::lag`] counts the records it will receive exactly (walking their
/// headers) when the lag is at most this many bytes; above, every record (an upper bound).
pub const LAG_WALK_BYTES: u64 = 8 << 20;

/// How far a consumer's committed position is behind the log's end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lag {
    /// Records between the committed position and the end: for an open with a filter, those it
    /// accepts when `exact`, otherwise every record (an upper bound of what it will receive).
    pub records: u64,
    /// Bytes between the committed position and the end (every record's, filtered or not).
    pub bytes: u64,
    /// Whether `records` counts exactly the records the open will receive: always without a
    /// filter; with one, when the lag is at most [`LAG_WALK_BYTES`] (walked and counted).
    pub exact: bool,
}

/// What a poll's read of a scan found.
pub(super) struct Read<R> {
    /// The records (`None`: none).
    pub got: Option<R>,
    /// Where the scan stopped: after the last record read, or the records a filter refused.
    pub end: u64,
    /// The scan stopped on its filter's skip budget ([`FILTER_SKIP_RECORDS`]): more records
    /// are there to look at now.
    pub more: bool,
}

/// A consumer name held open by this process (see the module doc). One thread polls it.
#[derive(Debug)]
pub struct Consumer {
    pub(super) state: Arc<State>,
    pub(super) positions: Positions,
    pub(super) claims: Claims,
    /// The hold on the name, the member slot, the table lock (see [`crate::consumers::claims`]);
    /// shared with the log, which lets them go at its close.
    pub(super) locks: Arc<ByteLocks>,
    pub(super) pair: usize,
    /// The name's state as last written or read by this open: its committed position.
    pub(super) slot: Slot,
    /// The next record a poll delivers; shared, the offset after the last record this open's
    /// polls delivered.
    pub(super) position: u64,
    /// Shared: the first record no open had claimed, as of this open's last look (a poll waits
    /// for the log to pass it).
    pub(super) unclaimed: u64,
    pub(super) on_loss: OnLoss,
    /// `None` for an exclusive consumer.
    pub(super) member: Option<Member>,
    /// How many times the name has delivered the records of the last poll.
    pub(super) deliveries: u32,
    /// Exclusive: the ranges a nack or seek sent this open back over (each delivers them once
    /// more); those behind the committed position are forgotten.
    pub(super) rewinds: Vec<(u64, u64)>,
    /// Exclusive: no poll delivers before then (a nack's delay).
    pub(super) not_before: Option<Instant>,
    /// Where dead letters go, if the open named a store.
    pub(super) dead_letter: Option<Box<dyn Sink>>,
    /// The source store as dead letters name it: its identity, its directories.
    pub(super) origin: (String, Vec<String>),
    /// Only the records this accepts are delivered (see [`ConsumerOptions::filter`]).
    pub(super) filter: Option<Arc<Filter>>,
    /// The last take stopped on its filter's skip budget: records are there to look at now.
    pub(super) more: bool,
}

/// An open sharing its name with others.
#[derive(Debug)]
pub(super) struct Member {
    pub k: u16,
    pub redelivery: Duration,
    /// The records this open received and has not committed, acknowledged or handed back, by
    /// offset; each with how many times the name delivered it.
    pub held: Vec<Held>,
    /// Acknowledgements the table had no room for yet (kept here, tried again at each look).
    pub acks_due: Vec<(u64, u64)>,
    /// When a claim in the table next lapses or comes due (lease clock), as of the last look.
    pub look_at: Option<u64>,
    /// The store's futex word before the last look at the table: a wait returns at once if it
    /// changed since (records handed back meanwhile).
    pub seq_seen: Option<u32>,
}

/// Records `[from, to)` this open received and still holds, delivered `deliveries` times.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Held {
    pub from: u64,
    pub to: u64,
    pub deliveries: u32,
}

impl Consumer {
    /// Opens `name`, creating it at `opts.start` if the store does not know it; refused with
    /// [`Error::ConsumerBusy`] while another open holds it exclusively (or, for an exclusive
    /// open, at all).
    pub(crate) fn open(
        state: &Arc<State>,
        name: &str,
        opts: &ConsumerOptions,
        dead_letter: Option<Box<dyn Sink>>,
    ) -> Result<(Consumer, Arc<ByteLocks>)> {
        check_name(name)?;
        opts.check(name)?;
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
                    max_deliveries: opts.max_deliveries.unwrap_or(0),
                    dead_lettered: 0,
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
                held: Vec::new(),
                acks_due: Vec::new(),
                look_at: None,
                seq_seen: None,
            })
        };
        let store = crate::storage::identity::read(dirs[0])
            .map_or_else(|| dirs[0].display().to_string(), |id| id.store_id);
        let paths = state.dirs.iter().map(|d| d.path.display().to_string());
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
            deliveries: 1,
            rewinds: Vec::new(),
            not_before: None,
            dead_letter,
            origin: (store, paths.collect()),
            filter: opts.filter.clone().filter(|f| !f.is_empty()).map(Arc::new),
            more: false,
        };
        if let Some(n) = opts.max_deliveries.filter(|&n| n != c.slot.max_deliveries) {
            c.record_max_deliveries(n)?;
        }
        if c.member.is_some() && c.slot.max_deliveries > 0 && c.dead_letter.is_none() {
            log::warn!(
                "consumer {name:?}: the name's max_deliveries is {n} and this open names no \
                 dead_letter store: the records it finds delivered {n} times are skipped, not \
                 dead-lettered (give every open of the name the same dead_letter)",
                n = c.slot.max_deliveries
            );
        }
        let pid = std::process::id();
        c.with_table(|c, t| {
            let k = c.member.as_ref().map_or(0, |m| usize::from(m.k));
            t.pids[k] = pid;
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
                    cl.due_ms = 0;
                }
                c.unclaimed = t.next;
            }
            Ok((true, ()))
        })?;
        let locks = Arc::clone(&c.locks);
        Ok((c, locks))
    }

    /// Records `max_deliveries` with the name (its slot's next write); said in the log when it
    /// changes a value another open recorded.
    fn record_max_deliveries(&mut self, n: u32) -> Result<()> {
        self.with_table(|c, _| {
            let was = c.slot.max_deliveries;
            if was == n {
                return Ok((false, ()));
            }
            if was != 0 {
                log::warn!(
                    "consumer {:?}: this open changes the name's max_deliveries from {was} to \
                     {}",
                    c.slot.name,
                    if n == 0 {
                        "none".to_owned()
                    } else {
                        n.to_string()
                    }
                );
            }
            c.slot.max_deliveries = n;
            c.write_slot(c.slot.position, 0)?;
            Ok((false, ()))
        })
    }

    pub fn name(&self) -> &str {
        &self.slot.name
    }

    /// The name's `max_deliveries` (0: none), as recorded with it.
    pub fn max_deliveries(&self) -> u32 {
        self.slot.max_deliveries
    }

    /// How many times the name has delivered the records the last poll returned (each poll's
    /// records share one count).
    pub fn deliveries(&self) -> u32 {
        self.deliveries
    }

    /// The next record a poll delivers.
    pub fn position(&self) -> u64 {
        self.position
    }

    /// The committed position: every record below it is done.
    pub fn committed(&self) -> u64 {
        self.slot.position
    }

    /// Whether this open shares its name's records with other opens (`exclusive=False`).
    pub fn is_shared(&self) -> bool {
        self.member.is_some()
    }

    /// Up to `max_records` records from the position, waiting until `deadline` (forever if
    /// `None`) for the first one; empty if none came in time. A filtered open goes on through
    /// the records its filter refuses until one matches or `deadline` passes.
    pub fn poll(
        &mut self,
        max_records: usize,
        deadline: Option<Instant>,
    ) -> Result<Vec<RecordRef>> {
        loop {
            let records = self.take(max_records)?;
            if !records.is_empty() || self.gives_up(deadline) {
                return Ok(records);
            }
            if self.more {
                continue;
            }
            if let Waited::TimedOut(_) = self.wait(deadline, false)? {
                return Ok(records);
            }
        }
    }

    /// Whether a poll that took nothing ends now, rather than going on: its filter's last take
    /// stopped on its skip budget after `deadline` (a poll's work stays bounded by its time).
    pub fn gives_up(&self, deadline: Option<Instant>) -> bool {
        self.more && deadline.is_some_and(|d| Instant::now() >= d)
    }

    /// Whether the last take stopped early, after stepping over as many records its filter
    /// refused as one take may ([`FILTER_SKIP_RECORDS`], [`FILTER_SKIP_BYTES`]): more records
    /// are there now, and the next take goes on from where it stopped, without waiting.
    pub fn has_more_now(&self) -> bool {
        self.more
    }

    /// The filter of this open, if it has one.
    pub fn filter(&self) -> Option<&Filter> {
        self.filter.as_deref()
    }

    /// Replaces the open's filter (`None`: every record), returning the one it had: the records
    /// read from then on are filtered by the new one.
    pub fn replace_filter(&mut self, filter: Option<Arc<Filter>>) -> Option<Arc<Filter>> {
        std::mem::replace(&mut self.filter, filter.filter(|f| !f.is_empty()))
    }

    /// Up to `max_records` records from the position, without waiting. A shared open claims
    /// them, or the first part of a claim that lapsed. A filtered open delivers only the records
    /// its filter accepts, and moves over the others: an exclusive open's position passes them
    /// (the committed one at the next commit); a shared open holds them in its claim with the
    /// records it received, and a claim of refused records alone is done at once. It steps over
    /// at most [`FILTER_SKIP_RECORDS`] of them per take (then [`Consumer::has_more_now`]).
    pub fn take(&mut self, max_records: usize) -> Result<Vec<RecordRef>> {
        let read = |mut scan: Scan, limit: Option<usize>| -> Result<Read<Vec<RecordRef>>> {
            let max = limit.unwrap_or(max_records);
            let mut out = Vec::with_capacity(max_records.min(1024));
            while out.len() < max {
                match scan.next() {
                    Some(r) => out.push(r?),
                    None => break,
                }
            }
            Ok(Read {
                got: (!out.is_empty()).then_some(out),
                end: scan.position(),
                more: scan.skip_budget_spent(),
            })
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
            if self.gives_up(deadline) {
                return Ok(None);
            }
            if self.more {
                continue;
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
        self.next_records(|scan, limit| {
            let mut opts = opts.clone();
            if let Some(n) = limit {
                opts.max_records = n;
                opts.max_bytes = match opts.body {
                    crate::arrow::BodyLayout::View => usize::MAX,
                    crate::arrow::BodyLayout::Binary => i32::MAX as usize,
                };
            }
            let mut reader = crate::arrow::BatchReader::new(scan, opts);
            let batch = reader.next_batch()?;
            Ok(Read {
                got: batch,
                end: reader.next_offset(),
                more: reader.stopped_skipping(),
            })
        })
    }

    /// A scan of `[from, to)` (`to`: the end) for this open: filtered by its filter, and, for
    /// a new read (`bounded`), stepping over at most the skip budget of refused records.
    pub(super) fn scan(&self, from: u64, to: Option<u64>, bounded: bool) -> Result<Scan> {
        let scan = Scan::new(Arc::clone(&self.state), Some(from), to)?;
        Ok(match (&self.filter, bounded) {
            (Some(f), true) => scan
                .filtered(Arc::clone(f))
                .skipping_at_most(FILTER_SKIP_RECORDS, FILTER_SKIP_BYTES),
            (f, _) => scan.filtered_by(f.as_ref()),
        })
    }

    /// The next records for this open, read by `read` from a scan (what it read, where it
    /// stopped): as many as the poll asks, or as `read`'s limit says when the claim decides
    /// (its last try, or no room to split it). `None` when it read none (a filtered open may
    /// still have moved over records its filter refused).
    fn next_records<R>(
        &mut self,
        read: impl Fn(Scan, Option<usize>) -> Result<Read<R>>,
    ) -> Result<Option<R>> {
        self.more = false;
        self.state.check_open()?;
        shared::catch_up(&self.state)?;
        if let Some(m) = &mut self.member {
            m.seq_seen = Some(self.state.control().seq());
            return self.with_table(|c, t| c.claim(t, &read))?;
        }
        if self.not_before.is_some_and(|t| Instant::now() < t) {
            return Ok(None); // a nack's delay
        }
        self.check_loss()?;
        // A poll's records share one count: it stops where a rewind begins or ends.
        let p = self.position;
        let stop = self
            .rewinds
            .iter()
            .flat_map(|&(a, b)| [a, b])
            .filter(|&o| o > p)
            .min();
        let scan = match self.scan(p, stop, true) {
            Err(Error::OffsetOutOfRange { .. }) => {
                self.check_loss()?; // deleted since the check
                self.scan(self.position, stop, true)?
            }
            other => other?,
        };
        let read = read(scan, None)?;
        self.more = read.more;
        let p = self.position;
        let Some(r) = read.got else {
            // Records the filter refused, if any: the position moves over them.
            self.position = self.position.max(read.end);
            return Ok(None);
        };
        let end = read.end;
        self.deliveries = 1 + self
            .rewinds
            .iter()
            .filter(|&&(a, b)| a <= p && p < b)
            .count() as u32;
        self.position = end;
        Ok(Some(r))
    }

    /// Runs `f` on the name's claims table with the table's lock held: the table as stored (or
    /// fresh at the committed position), brought up to the committed position in the store;
    /// written back if `f` says it changed it.
    pub(super) fn with_table<T>(
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
            // An open died between its commit (or ack) and the table's write: the records below
            // are done. A claim the position ends inside keeps its records above it.
            t.cut_below(committed);
        } else if t.base > committed {
            // An exclusive open committed back to an earlier record: nothing is claimed there.
            t.reset(committed);
        }
        let acked = self.apply_acks_due(&mut t)?;
        let (changed, out) = f(self, &mut t)?;
        let changed = changed || acked;
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
    /// `interruptible`). A shared open wakes when any open of the store wakes its waiters (a
    /// nack), when a claim it saw comes due, and at least every [`wait::POLL`] to look for the
    /// claims of opens that died; `TimedOut` means the deadline passed.
    pub(crate) fn wait(&self, deadline: Option<Instant>, interruptible: bool) -> Result<Waited> {
        let Some(m) = &self.member else {
            if let Some(t) = self.not_before.filter(|&t| Instant::now() < t) {
                // A nack's delay (the records are there already): a wait for no record, which a
                // close or a signal still ends.
                let until = deadline.map_or(t, |d| d.min(t));
                return match wait::wait(&self.state, u64::MAX, false, Some(until), interruptible)? {
                    Waited::TimedOut(end) if deadline.is_none_or(|d| d > t) => {
                        Ok(Waited::Passed(end))
                    }
                    other => Ok(other),
                };
            }
            return wait::wait(&self.state, self.position, false, deadline, interruptible);
        };
        let now = Instant::now();
        let due = m.look_at.map(|at| {
            Duration::from_millis(at.saturating_sub(crate::consumers::names::lease_now_ms()))
        });
        let slice = now + due.map_or(wait::POLL, |d| d.min(wait::POLL));
        let until = deadline.map_or(slice, |d| d.min(slice));
        match wait::wait_event(
            &self.state,
            self.unclaimed,
            m.seq_seen,
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
        if self.member.is_some() {
            return self.commit_shared(offset);
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
        self.write_slot(target, 0)?;
        self.rewinds.retain(|&(_, b)| b > target);
        Ok(target)
    }

    /// Writes the name's committed position, durably, once the records below it are: a power
    /// loss keeps the log up to its last sync, and a position past the log's end would skip the
    /// records appended after it.
    /// `dead_lettered` more records were dead-lettered.
    pub(super) fn write_slot(&mut self, position: u64, dead_lettered: u32) -> Result<()> {
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
            dead_lettered: self.slot.dead_lettered.saturating_add(dead_lettered),
            ..self.slot.clone()
        };
        self.positions.write(self.pair, &next, true)?;
        self.slot = next;
        Ok(())
    }

    /// Moves an exclusive consumer's position to `to`; a move back counts a delivery more for
    /// the records it goes back over.
    pub(super) fn rewind(&mut self, to: u64) {
        if to < self.position {
            self.rewinds.push((to, self.position));
        }
        self.position = to;
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
        let to = resolve(&self.state, to)?;
        self.rewind(to);
        Ok(self.position)
    }

    /// How far the committed position is behind the log's end. The records are counted from
    /// the segments' counts: at most a walk of part of the segment holding the position. With
    /// a filter, the records it accepts are counted by a walk of their headers when the lag is
    /// at most [`LAG_WALK_BYTES`] (`exact`); above, every record is (an upper bound).
    pub fn lag(&self) -> Result<Lag> {
        self.state.check_open()?;
        shared::catch_up(&self.state)?;
        let end = self.state.max_offset();
        let from = self.slot.position;
        let bytes = end.saturating_sub(from);
        let records = match &self.filter {
            Some(f) if bytes <= LAG_WALK_BYTES => {
                let n = reader::count_matching(&self.state, from, end, f)?;
                return Ok(Lag {
                    records: n,
                    bytes,
                    exact: true,
                });
            }
            _ => crate::read::count::records_between(&self.state, from, end)?,
        };
        Ok(Lag {
            records,
            bytes,
            exact: self.filter.is_none(),
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
    pub(super) fn lost(&self, from: u64, to: u64) -> Result<()> {
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
