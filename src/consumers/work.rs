//! What an open of a shared name does with its claims: claim records at a poll (lapsed ones
//! first, dead-lettering those delivered `max_deliveries` times), and commit, acknowledge, hand
//! back (nack) or extend the ones it holds, learning which it lost.
//!
//! Every step runs with the name's table lock held ([`Consumer::with_table`]), so the table is
//! one open's at a time. An open keeps the records it received and still holds ([`Held`]); the
//! table says whether it still holds them: a claim of its member number, not done. A claim whose
//! due time passed is any open's to take: the records an open then finds taken are reported as
//! [`Error::ClaimLost`] by the call that touched them.
//!
//! | step | a crash leaves | who mends it |
//! |---|---|---|
//! | claim written, poll not returned | a claim of a dead member | the next poll (delivers again) |
//! | commit or ack: slot written, table not | a table behind the slot | `table_locked` cuts the claims at the position (a claim across it keeps its records above) |
//! | dead letter marked, records not all appended | a claim marked, its open dead | the next poll (appends the missing ones) |
//! | dead letters synced, claim not done | the same | the next poll (appends none) |
//! | slot written (count, position), table not | a table behind the slot | `table_locked` cuts the claims at the position (a claim not at the front is dead-lettered again: it appends none, and counts twice) |
//!
//! Acks split claims (a run of done records between claims still held), up to `ACK_ROOM`
//! entries; the acks past that are kept by the open and tried again at each look at the table,
//! and the room left is for the splits of lapsed claims delivered in part.

use std::sync::Arc;

use crate::consumers::claims::{self, member_byte, Claim, Table, NOBODY};
use crate::consumers::consumer::{Consumer, Held, Read};
use crate::consumers::dead_letter::{already_there, envelope, Origin};
use crate::consumers::names::lease_now_ms;
use crate::error::{ClaimNow, Error, LostClaim, Result};
use crate::failpoint::fail_point;
use crate::read::follow;
use crate::read::reader::{self, Scan};

/// What [`Consumer::settle`] does to the claims of records this open holds.
#[derive(Debug, Clone, Copy)]
enum Settle {
    /// Done (a commit or an ack).
    Done,
    /// Handed to the next poll of any open, not before `due` (lease clock).
    HandBack { due: u64 },
    /// Held until `due`.
    Extend { due: u64 },
}

impl Consumer {
    /// This open's member number and redelivery timeout (ms); an error for an exclusive open.
    fn me(&self) -> Result<(u16, u64)> {
        match &self.member {
            Some(m) => Ok((m.k, m.redelivery.as_millis() as u64)),
            None => Err(Error::Internal("a claim by an exclusive consumer".into())),
        }
    }

    fn held(&mut self) -> &mut Vec<Held> {
        &mut self.member.as_mut().expect("a shared open").held
    }

    /// A shared open's poll, with the name's table `t` locked: a lapsed claim first (its records
    /// again), else a new claim from the first unclaimed record. The first of the pair says
    /// whether `t` changed.
    pub(super) fn claim<R>(
        &mut self,
        t: &mut Table,
        read: &impl Fn(Scan, Option<usize>) -> Result<Read<R>>,
    ) -> Result<(bool, Result<Option<R>>)> {
        let (me, redelivery) = self.me()?;
        let mut changed = false;
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
            t.cut_below(min);
            t.advance();
            self.write_slot(t.base, 0)?;
            if let Some(from) = lost_from {
                if let Err(e) = self.lost(from, min) {
                    return Ok((true, Err(e)));
                }
            }
            changed = true;
        }
        if t.advance() {
            self.write_slot(t.base, 0)?; // not expected: commits advance what they finish
        }
        let now = lease_now_ms();
        let max = self.slot.max_deliveries;
        loop {
            let lapsed = t.claims.iter().position(|c| {
                !c.done
                    && (c.dead_lettering
                        || now >= c.due_ms
                        || (c.member != me && c.member != NOBODY && !self.is_alive(c.member)))
            });
            let Some(i) = lapsed else { break };
            let c = t.claims[i];
            if c.to > self.state.readable_end() && self.state.read_only {
                // Claimed by an open whose view was ahead of this one's: look again first.
                follow::refresh(&self.state)?;
            }
            if c.to > self.state.readable_end() {
                // Not readable here yet (a sync store's records not yet durable): later.
                self.note_look_at(t, now);
                return Ok((changed, Ok(None)));
            }
            if c.dead_lettering || (max > 0 && c.deliveries >= max) {
                self.dead_letter(t, i, me)?;
                changed = true;
                continue;
            }
            // A claim is read whole, whatever its filter refuses (its claimer's read was bounded).
            let scan = self.scan(c.from, Some(c.to), false)?;
            // Its last try before it is dead-lettered goes one record at a time, so that only
            // the records that fail it are; with no room left to split it, the claim is
            // delivered whole (past max_records).
            let limit = if t.claims.len() >= claims::CAPACITY {
                Some(usize::MAX)
            } else if max > 0 && c.deliveries.saturating_add(1) >= max {
                Some(1)
            } else {
                None
            };
            let Read { got, end, .. } = read(scan, limit)?;
            let Some(r) = got else {
                if self.filter.is_none() {
                    return Err(Error::Internal(format!(
                        "claimed records [{}, {}) of consumer {:?} read as none",
                        c.from, c.to, self.slot.name
                    )));
                }
                // None of its records is for this open: the rest of a claim split after its
                // last match, or one claimed by an open whose filter differs (docs: every open
                // of a name should give the same). Done, as a claim of refused records is.
                let t_i = &mut t.claims[i];
                t_i.done = true;
                t_i.member = me;
                if t.advance() {
                    self.write_slot(t.base, 0)?;
                }
                changed = true;
                continue;
            };
            if end < c.to {
                // Only the first part fits this poll: the rest waits for the next one (room
                // past ACK_ROOM is kept for these splits).
                t.claims.push(Claim {
                    from: end,
                    member: NOBODY,
                    due_ms: 0,
                    ..c
                });
                t.claims[i].to = end;
            }
            let deliveries = c.deliveries.saturating_add(1);
            t.claims[i].member = me;
            t.claims[i].due_ms = now.saturating_add(redelivery);
            t.claims[i].deliveries = deliveries;
            self.receive(c.from, end, deliveries);
            self.unclaimed = t.next;
            self.note_look_at(t, now);
            return Ok((true, Ok(Some(r))));
        }
        self.unclaimed = t.next;
        self.note_look_at(t, now);
        if t.next >= self.state.readable_end() {
            return Ok((changed, Ok(None)));
        }
        self.check_room(t)?;
        let scan = self.scan(t.next, None, true)?;
        let Read { got, end, more } = read(scan, None)?;
        self.more = more;
        let Some(r) = got else {
            if end <= t.next {
                return Ok((changed, Ok(None)));
            }
            // Records the filter refused, and none it accepts: done at once (no open is to
            // receive them), so the committed position moves over them now if they are at the
            // front, later with the claims before them otherwise.
            let mut skipped = Claim::new(t.next, end, me, 0);
            skipped.done = true;
            t.claims.push(skipped);
            t.next = end;
            self.unclaimed = end;
            self.position = self.position.max(end);
            t.merge_done();
            if t.advance() {
                self.write_slot(t.base, 0)?;
            }
            return Ok((true, Ok(None)));
        };
        t.claims
            .push(Claim::new(t.next, end, me, now.saturating_add(redelivery)));
        self.receive(t.next, end, 1);
        t.next = end;
        self.unclaimed = end;
        Ok((true, Ok(Some(r))))
    }

    /// This open received records `[from, to)`, delivered `deliveries` times.
    fn receive(&mut self, from: u64, to: u64, deliveries: u32) {
        self.position = to;
        self.deliveries = deliveries;
        let held = self.held();
        forget(held, from, to); // a lapsed claim of its own, delivered again
        let at = held.partition_point(|h| h.from < from);
        held.insert(
            at,
            Held {
                from,
                to,
                deliveries,
            },
        );
    }

    /// When the next claim of `t` lapses or comes due, for the wait.
    fn note_look_at(&mut self, t: &Table, now: u64) {
        let at = t
            .claims
            .iter()
            .filter(|c| !c.done && c.due_ms > now)
            .map(|c| c.due_ms)
            .min();
        if let Some(m) = &mut self.member {
            m.look_at = at;
        }
    }

    /// Dead-letters claim `i` of `t` (see [`crate::consumers::dead_letter`]): its records go to
    /// the dead-letter store, once each, or are skipped with a warning if the open named none;
    /// then the claim is done.
    fn dead_letter(&mut self, t: &mut Table, i: usize, me: u16) -> Result<()> {
        let c = t.claims[i];
        // The records this open's filter accepts: those the claim delivered.
        let filter = self.filter.clone();
        let scan = || {
            Scan::new(Arc::clone(&self.state), Some(c.from), Some(c.to))
                .map(|s| s.filtered_by(filter.as_ref()))
        };
        let mut records = 0u32;
        if let Some(sink) = self.dead_letter.as_mut() {
            if !c.dead_lettering {
                let t_i = &mut t.claims[i];
                t_i.dead_lettering = true;
                t_i.member = me;
                t_i.dead_from = sink.end()?;
                self.claims.write(self.pair, t)?;
                fail_point!("consumer::dead_letter_marked");
            }
            let (store, paths) = &self.origin;
            let there = already_there(&mut **sink, t.claims[i].dead_from, store, &self.slot.name)?;
            for r in scan()? {
                let r = r?;
                records += 1;
                if there.contains(&r.offset()) {
                    continue;
                }
                let origin = Origin {
                    store: store.clone(),
                    paths: paths.clone(),
                    offset: r.offset(),
                    timestamp_ms: r.timestamp_ms(),
                    consumer: self.slot.name.clone(),
                    deliveries: c.deliveries,
                };
                sink.append(&envelope(&origin, r.body())?)?;
                fail_point!("consumer::dead_letter_appended");
            }
            sink.sync()?;
            fail_point!("consumer::dead_letters_synced");
        } else {
            records = scan()?.try_fold(0u32, |n, r| r.map(|_| n + 1))?;
            log::warn!(
                "consumer {:?}: records [{}, {}) were delivered {} times without a commit \
                 (max_deliveries {}); skipped, as the consumer names no dead_letter store",
                self.slot.name,
                c.from,
                c.to,
                c.deliveries,
                self.slot.max_deliveries
            );
        }
        let t_i = &mut t.claims[i];
        t_i.done = true;
        t_i.dead_lettering = false;
        t.advance();
        self.write_slot(t.base, records)?;
        fail_point!("consumer::dead_lettered");
        Ok(())
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
            "consumer {:?} has {} polls not committed, the most a name keeps (its claims table \
             holds {} entries: the claims not done, and the runs of done records acks out of \
             order leave between them; a poll is refused from {}): commit, or ack the records \
             in between, before polling more",
            self.slot.name,
            t.pending(),
            t.claims.len(),
            claims::MAX_CLAIMS
        ))
    }

    /// Whether the open with member number `k` is alive (holds its member byte).
    pub(super) fn is_alive(&self, k: u16) -> bool {
        self.locks
            .held_elsewhere(member_byte(self.pair, u64::from(k)), false)
            .unwrap_or(true)
    }

    /// A shared open's commit: the records it holds below `offset` (all of them by default) are
    /// done; the committed position moves over the done claims at the front of the name's.
    pub(super) fn commit_shared(&mut self, offset: Option<u64>) -> Result<u64> {
        let ranges = match offset {
            None => self.held().iter().map(|h| (h.from, h.to)).collect(),
            Some(o) => self.below(o)?,
        };
        self.settle_and_report(&ranges, Settle::Done, "commit")
    }

    /// The ranges this open holds below `offset`, which must be a record boundary at or below
    /// the end of what it received.
    fn below(&mut self, offset: u64) -> Result<Vec<(u64, u64)>> {
        let received = self.held().iter().map(|h| h.to).max();
        let committed = self.slot.position;
        if offset > received.unwrap_or(committed).max(committed) {
            return Err(Error::invalid(format!(
                "commit(offset={offset}) of consumer {:?} is past the records it received \
                 (this open, not committed yet): they end at {}",
                self.slot.name,
                received.unwrap_or(committed)
            )));
        }
        let held = self.held().clone();
        if offset != committed && !held.iter().any(|h| h.from == offset || h.to == offset) {
            reader::read(&self.state, offset)?; // a record starts there
        }
        Ok(held
            .iter()
            .filter(|h| h.from < offset)
            .map(|h| (h.from, h.to.min(offset)))
            .collect())
    }

    /// Acknowledges the records at `offsets` (each received by this open and not yet committed):
    /// done, in any order; the committed position moves over the done records at its front.
    /// Returns the committed position.
    pub fn ack(&mut self, offsets: &[u64]) -> Result<u64> {
        self.state.check_open()?;
        if self.member.is_none() {
            return Err(Error::Unsupported(format!(
                "ack() on consumer {:?}, which holds its name alone: an exclusive consumer's \
                 records are done in order, by commit(offset)",
                self.slot.name
            )));
        }
        let ranges = self.records_held(offsets, "ack")?;
        self.settle_and_report(&ranges, Settle::Done, "ack")
    }

    /// Hands records back: those at `offsets` (each received by this open), or every record it
    /// holds. Shared: they go to the next poll of any open, not before `delay`, and the waiting
    /// opens are woken. Exclusive: the position moves back to the first of them (the committed
    /// position for all), and no poll delivers before `delay`.
    pub fn nack(&mut self, offsets: Option<&[u64]>, delay: std::time::Duration) -> Result<()> {
        self.state.check_open()?;
        if self.member.is_none() {
            return self.nack_exclusive(offsets, delay);
        }
        let ranges = match offsets {
            Some(o) => self.records_held(o, "nack")?,
            None => self.held().iter().map(|h| (h.from, h.to)).collect(),
        };
        let due = lease_now_ms().saturating_add(delay.as_millis() as u64);
        // Records already lost to another open are theirs to process: nothing to say.
        self.with_table(|c, t| {
            let (changed, _lost) = c.settle(t, &ranges, Settle::HandBack { due })?;
            Ok((changed, ()))
        })?;
        self.state.control().wake();
        Ok(())
    }

    fn nack_exclusive(
        &mut self,
        offsets: Option<&[u64]>,
        delay: std::time::Duration,
    ) -> Result<()> {
        let committed = self.slot.position;
        let to = match offsets {
            Some([]) => return Ok(()),
            None => committed,
            Some(o) => {
                let first = o.iter().copied().min().unwrap_or(committed);
                if first < committed || first >= self.position {
                    return Err(Error::invalid(format!(
                        "nack(offsets) of consumer {:?}: offset {first} is not a record it \
                         received and has not committed ([{committed}, {}))",
                        self.slot.name, self.position
                    )));
                }
                reader::read(&self.state, first)?.offset() // a record starts there
            }
        };
        self.rewind(to);
        self.not_before = (!delay.is_zero()).then(|| std::time::Instant::now() + delay);
        Ok(())
    }

    /// Extends this open's claims on the records at `offsets` (the whole claims holding them),
    /// or on every record it holds, by its redelivery timeout from now.
    pub fn in_progress(&mut self, offsets: Option<&[u64]>) -> Result<()> {
        self.state.check_open()?;
        if self.member.is_none() {
            return Ok(()); // an exclusive consumer's records never go to another open
        }
        let ranges = match offsets {
            Some(o) => self.records_held(o, "in_progress")?,
            None => self.held().iter().map(|h| (h.from, h.to)).collect(),
        };
        let (_, redelivery) = self.me()?;
        let due = lease_now_ms().saturating_add(redelivery);
        self.settle_and_report(&ranges, Settle::Extend { due }, "in_progress")
            .map(|_| ())
    }

    /// The records at `offsets` as ranges (each one record), sorted and merged; every offset
    /// must start a record this open holds.
    fn records_held(&mut self, offsets: &[u64], what: &str) -> Result<Vec<(u64, u64)>> {
        let mut sorted = offsets.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        let mut ranges: Vec<(u64, u64)> = Vec::with_capacity(sorted.len());
        for o in sorted {
            if !self.held().iter().any(|h| h.from <= o && o < h.to) {
                return Err(Error::invalid(format!(
                    "{what}(): offset {o} is not a record consumer {:?} received in this open \
                     and still holds (not committed, acknowledged, handed back, or lost to \
                     another open: see ClaimLostError)",
                    self.slot.name
                )));
            }
            let end = reader::read(&self.state, o)?.next_offset();
            match ranges.last_mut() {
                Some(last) if last.1 == o => last.1 = end,
                _ => ranges.push((o, end)),
            }
        }
        Ok(ranges)
    }

    /// [`Consumer::settle`] under the table lock; the committed position moves over what is
    /// done; [`Error::ClaimLost`] for the records found lost, after the rest is settled.
    fn settle_and_report(
        &mut self,
        ranges: &[(u64, u64)],
        how: Settle,
        what: &'static str,
    ) -> Result<u64> {
        let (committed, lost) = self.with_table(|c, t| {
            let (mut changed, lost) = c.settle(t, ranges, how)?;
            if t.advance() {
                fail_point!("consumer::committing");
                c.write_slot(t.base, 0)?;
                fail_point!("consumer::slot_written");
                changed = true;
            }
            Ok((changed, (t.base, lost)))
        })?;
        if lost.is_empty() {
            return Ok(committed);
        }
        Err(Error::ClaimLost {
            consumer: self.slot.name.clone(),
            what,
            lost,
            committed,
        })
    }

    /// Applies `how` to the claims of the records in `ranges` that this open still holds, and
    /// forgets the records (but those extended); returns whether `t` changed, and the records
    /// another open has now. An ack the table has no room to split a claim for is kept for
    /// later ([`Consumer::apply_acks_due`]).
    fn settle(
        &mut self,
        t: &mut Table,
        ranges: &[(u64, u64)],
        how: Settle,
    ) -> Result<(bool, Vec<LostClaim>)> {
        let (me, _) = self.me()?;
        let ranges = coalesce(ranges);
        t.claims.sort_by_key(|c| c.from);
        let (mut changed, mut lost, mut no_room) = (false, Vec::new(), Vec::new());
        for &(a, b) in &ranges {
            if a < t.base {
                lost.push(LostClaim {
                    from: a,
                    to: b.min(t.base),
                    now: ClaimNow::Done,
                });
            }
            // The claims are sorted and do not overlap: start at the first that ends past `a`.
            let mut i = t.claims.partition_point(|c| c.to <= a);
            while i < t.claims.len() && t.claims[i].from < b {
                let c = t.claims[i];
                let (x, y) = (a.max(c.from).max(t.base), b.min(c.to));
                if x >= y {
                    i += 1;
                    continue;
                }
                if c.member != me || c.done {
                    let now = match (c.done, c.member) {
                        (true, _) => ClaimNow::Done,
                        (false, NOBODY) => ClaimNow::Waiting,
                        (false, k) => ClaimNow::Open {
                            pid: t.pids.get(usize::from(k)).copied().unwrap_or(0),
                        },
                    };
                    lost.push(LostClaim {
                        from: x,
                        to: y,
                        now,
                    });
                    i += 1;
                    continue;
                }
                changed = true;
                if let Settle::Extend { due } = how {
                    t.claims[i].due_ms = due;
                    i += 1;
                    continue;
                }
                let Some(j) = t.isolate(i, x, y, claims::ACK_ROOM) else {
                    no_room.push((x, y));
                    i += 1;
                    continue;
                };
                match how {
                    Settle::Done => t.claims[j].done = true,
                    Settle::HandBack { due } => {
                        t.claims[j].member = NOBODY;
                        t.claims[j].due_ms = due;
                    }
                    Settle::Extend { .. } => {}
                }
                i = j + 1;
            }
            if matches!(how, Settle::Done) {
                t.merge_done(); // the room a run of acks frees, for the next split
            }
            if b > t.next.max(t.base) {
                // Past the claims: the table was reset (a power loss, an exclusive open).
                lost.push(LostClaim {
                    from: a.max(t.next).max(t.base),
                    to: b,
                    now: ClaimNow::Waiting,
                });
            }
        }
        let held = self.held();
        for l in &lost {
            forget(held, l.from, l.to);
        }
        if !matches!(how, Settle::Extend { .. }) {
            for &(a, b) in &ranges {
                forget(held, a, b);
            }
        }
        if let Some(m) = &mut self.member {
            if matches!(how, Settle::Done) {
                for &(a, b) in &ranges {
                    subtract(&mut m.acks_due, a, b);
                }
                // Still held, done later: put back what found no room.
                for &(a, b) in &no_room {
                    m.acks_due.push((a, b));
                    let deliveries = t
                        .claims
                        .iter()
                        .find(|c| c.from <= a && b <= c.to)
                        .map_or(1, |c| c.deliveries);
                    let at = m.held.partition_point(|h| h.from < a);
                    m.held.insert(
                        at,
                        Held {
                            from: a,
                            to: b,
                            deliveries,
                        },
                    );
                }
            } else if !no_room.is_empty() {
                return Err(Error::Unsupported(format!(
                    "consumer {:?}: the name's claims table is full ({} entries): commit \
                     before handing records back one by one",
                    self.slot.name,
                    claims::CAPACITY
                )));
            }
        }
        Ok((changed, lost))
    }

    /// Tries again the acknowledgements the table had no room for (at every look at the table);
    /// whether it changed the table.
    pub(super) fn apply_acks_due(&mut self, t: &mut Table) -> Result<bool> {
        let due = match &mut self.member {
            Some(m) if !m.acks_due.is_empty() => std::mem::take(&mut m.acks_due),
            _ => return Ok(false),
        };
        // Lost ones were theirs to report at the ack; here they are only forgotten.
        let (changed, _) = self.settle(t, &due, Settle::Done)?;
        if t.advance() {
            self.write_slot(t.base, 0)?;
        }
        Ok(changed)
    }
}

/// `ranges` sorted, with those that touch or overlap made one.
fn coalesce(ranges: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut out = ranges.to_vec();
    out.sort_unstable();
    out.dedup_by(|later, earlier| {
        let merge = later.0 <= earlier.1;
        if merge {
            earlier.1 = earlier.1.max(later.1);
        }
        merge
    });
    out
}

/// Removes `[from, to)` from the ranges of `v`, splitting those it cuts.
fn subtract(v: &mut Vec<(u64, u64)>, from: u64, to: u64) {
    let mut out = Vec::with_capacity(v.len() + 1);
    for &(a, b) in v.iter() {
        if b <= from || a >= to {
            out.push((a, b));
            continue;
        }
        if a < from {
            out.push((a, from));
        }
        if to < b {
            out.push((to, b));
        }
    }
    *v = out;
}

/// Removes `[from, to)` from `held`, splitting the ranges it cuts.
fn forget(held: &mut Vec<Held>, from: u64, to: u64) {
    let mut out = Vec::with_capacity(held.len() + 1);
    for h in held.drain(..) {
        if h.to <= from || h.from >= to {
            out.push(h);
            continue;
        }
        if h.from < from {
            out.push(Held { to: from, ..h });
        }
        if to < h.to {
            out.push(Held { from: to, ..h });
        }
    }
    *held = out;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forgetting_a_range_splits_what_it_cuts() {
        let h = |from, to| Held {
            from,
            to,
            deliveries: 2,
        };
        let mut held = vec![h(0, 100), h(100, 200), h(300, 400)];
        forget(&mut held, 50, 150);
        assert_eq!(held, vec![h(0, 50), h(150, 200), h(300, 400)]);
        forget(&mut held, 0, 1000);
        assert!(held.is_empty());
    }
}
