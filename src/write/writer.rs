//! The append path: one header write, one copy of the body and one CRC into the map per record,
//! no allocation and no syscall (outside segment rolls, warming a chunk ahead and sync mode);
//! records of 16 KiB or more, and all in sync mode, go to the file by `pwritev` instead (see
//! [`crate::write::active_file`]).
//!
//! Publication protocol: each record is stored as [`record::store`] orders it (the length/magic
//! word last); then the log's end advances with Release ordering ([`State::publish`]). In-process
//! readers never look past it (Acquire); a reader in another process validates every record
//! (header CRC, body CRC, stored offset) before trusting it.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex, TryLockError};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::error::{Error, Result};
use crate::failpoint::fail_point;
use crate::options::Strategy;
use crate::read::lookup::Indexes;
use crate::shared::control::{Control, PageGuard};
use crate::state::stats::Stats;
use crate::state::State;
use crate::storage::props;
use crate::storage::record::{self, crc32_of, filler, Format, FILLER_LEN, HEADER_LEN};
use crate::storage::segment::{Mapping, Segment};
use crate::storage::tail_hint::TailHints;
use crate::sync::locked;
use crate::write::active_file::ActiveFile;
use crate::write::dedup::{self, Once, Seen};
use crate::write::flusher::flush_to;
use crate::write::keys::Indexer;
use crate::write::roll::{ask_custom, check_limit, roll, Created};
use crate::write::warmer::Slot;

/// The log's writer in this open: its cursor, serialised by a mutex; shared writers also take
/// the store's append lock (see `shared.rs`).
#[derive(Debug)]
pub(crate) struct Writer {
    cursor: Mutex<Cursor>,
    /// The active segment, for the `rmqlog-warm` thread.
    warm: Arc<Slot>,
    /// Other opens append too: each append takes the append lock and catches up first.
    shared: bool,
}

/// Where the next record goes.
#[derive(Debug)]
struct Cursor {
    /// The last segment and its map; `None` while the log has no segment.
    active: Option<Created>,
    /// Next write position inside the active segment.
    pos: u64,
    /// Start of the first segment when the log has none yet.
    next_start: u64,
    /// Directories a custom strategy chose for upcoming segments, by start offset.
    hints: HashMap<u64, usize>,
    /// The active segment's file: page-cache warming ahead of `pos`, and direct writes (of large
    /// records; of all in sync mode).
    file: ActiveFile,
    /// Where this writer records its recovery point (`rmqlog.tail`).
    tail: TailHints,
    /// The store's control page, where each publication goes for waiters in every process;
    /// `None` once the log closed.
    control: Option<Arc<Control>>,
    /// A shared writer: the end and segment-list generation the page showed after this open's
    /// last append. While the page still shows them, no other open appended or changed the
    /// list since: the view and the cursor are the store's.
    published: Option<(u64, u64)>,
    /// The active segment's key index.
    keys: Indexer,
}

impl Cursor {
    /// The end of the log: after the last record, or the next segment's start when too few
    /// bytes are left for even a filler (the segment is full).
    fn end(&self) -> u64 {
        match &self.active {
            Some((seg, _)) if seg.size() - self.pos < FILLER_LEN as u64 => seg.end(),
            Some((seg, _)) => seg.start() + self.pos,
            None => self.next_start,
        }
    }

    /// Whether a record of `len` bytes fits in the active segment.
    fn fits(&self, len: usize) -> bool {
        self.active
            .as_ref()
            .is_some_and(|(seg, _)| self.pos + len as u64 <= seg.size())
    }

    /// A shared writer's cursor follows the view [`crate::shared::sync_locked`] brought up to
    /// the control page: the active segment is the view's last, the position its end.
    fn adopt(&mut self, state: &State, ctl: &Control, sync: bool) -> Result<()> {
        let end = state.max_offset();
        let list = state.segments();
        let Some(last) = list.last().filter(|l| l.is_local() && l.is_writable()) else {
            if self.active.is_some() {
                self.file.retire();
                self.file = ActiveFile::none();
                self.active = None;
            }
            self.next_start = end;
            return Ok(());
        };
        let pos = end.saturating_sub(last.start()).min(last.size());
        if !self
            .active
            .as_ref()
            .is_some_and(|(s, _)| Arc::ptr_eq(s, last))
        {
            self.file.retire();
            let map = last.map()?;
            self.file = ActiveFile::new(last, pos, sync);
            self.active = Some((Arc::clone(last), map));
        }
        self.pos = pos;
        // What others wrote below the position is no place for this open's warming zeros, and
        // what they warmed past it needs no more.
        let warmed = ctl.warmed().clamp(last.start(), last.end()) - last.start();
        self.file.raise_to(pos.max(warmed));
        Ok(())
    }

    /// With the append lock held: the active segment's index takes every record published in
    /// it (by any process), made if it has none.
    fn index_published(&mut self, state: &State) {
        let active = self.active.as_ref().map(|(s, m)| (s, m));
        self.keys.caught_up(active, self.pos, state);
    }

    /// The timestamp the next record gets: never older than the last one's.
    fn next_timestamp(&self, state: &State) -> u64 {
        now_ms().max(state.last_timestamp_ms())
    }

    /// With the append lock held: brings a shared writer's view and cursor up to the page,
    /// unless the page shows just what this open last published.
    fn catch_up(
        &mut self,
        state: &State,
        ctl: &Control,
        page: &mut PageGuard<'_>,
        sync: bool,
    ) -> Result<()> {
        let unchanged = self.published == Some((ctl.end(), ctl.generation()))
            && !page.owner_died()
            && ctl.reserved() <= ctl.end();
        if !unchanged {
            crate::shared::sync_locked(state, ctl, page)?;
            self.adopt(state, ctl, sync)?;
        }
        Ok(())
    }

    /// A shared writer tells the others how far it warmed the active segment.
    fn note_warmed(&self, ctl: &Control) {
        if let Some((seg, _)) = &self.active {
            ctl.note_warmed(seg.start() + self.file.ready());
        }
    }

    /// Start offsets of the segments a batch will need, and the end of the log after it.
    fn plan<B: AsRef<[u8]>>(
        &self,
        batch: &Batch<'_, B>,
        segment_size: u64,
    ) -> Result<(Vec<u64>, u64)> {
        let (mut start, mut size, mut pos) = match &self.active {
            Some((seg, _)) => (seg.start(), seg.size(), self.pos),
            None => (self.next_start, 0, 0),
        };
        let mut starts = Vec::new();
        for i in 0..batch.bodies.len() {
            let len = batch.len(i) as u64;
            if pos + len > size {
                start += size;
                size = segment_size;
                pos = 0;
                check_limit(start, size)?;
                starts.push(start);
            }
            pos += len;
        }
        let end = if size - pos < FILLER_LEN as u64 {
            start + size
        } else {
            start + pos
        };
        Ok((starts, end))
    }

    fn record_tail_hint(&self, state: &State, ts: u64) {
        if let Some((seg, _)) = &self.active {
            self.tail
                .record(seg.start(), ts, |i| state.dirs[i].keeps_metadata());
        }
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

fn check_size(state: &State, len: usize) -> Result<()> {
    let max = state.opts.max_message_size as usize;
    if len > max {
        return Err(Error::MessageTooLarge {
            size: len,
            limit: format!("max_message_size is {max}"),
        });
    }
    let segment = state.opts.segment_size;
    if (HEADER_LEN + len) as u64 > segment {
        return Err(Error::MessageTooLarge {
            size: len,
            limit: format!(
                "a record ({HEADER_LEN}-byte header + body) must fit in one segment of {segment} \
                 bytes"
            ),
        });
    }
    Ok(())
}

impl Writer {
    /// The writer at `pos` in `active` (the last segment), or before `next_start` in an empty log.
    pub fn new(
        sync: bool,
        shared: bool,
        active: Option<Created>,
        pos: u64,
        next_start: u64,
        tail: TailHints,
        control: Arc<Control>,
    ) -> Writer {
        let warm = Arc::new(Slot::default());
        let file = match &active {
            Some((seg, map)) => {
                let file = ActiveFile::new(seg, pos, sync);
                warm.set(file.target(seg, map));
                file
            }
            None => ActiveFile::none(),
        };
        Writer {
            warm,
            shared,
            cursor: Mutex::new(Cursor {
                active,
                pos,
                next_start,
                hints: HashMap::new(),
                file,
                tail,
                control: Some(control),
                published: None,
                keys: Indexer::default(),
            }),
        }
    }

    /// Appends `bodies` under one lock acquisition and reports each offset to `sink`. `props`
    /// holds each record's encoded properties ([`crate::storage::props`]), or is empty when none
    /// has any. With `once`, records whose message id is in the de-duplication window are not
    /// written: `sink` gets the offset of the record that has it (`write/dedup.rs`).
    pub fn append_with<B: AsRef<[u8]>>(
        &self,
        state: &Arc<State>,
        bodies: &[B],
        props: &[Vec<u8>],
        once: Option<&mut Once<'_>>,
        mut sink: impl FnMut(u64),
    ) -> Result<()> {
        state.check_open()?;
        if !props.is_empty() && props.len() != bodies.len() {
            return Err(Error::Internal("properties for some records only".into()));
        }
        if state.record_format == Format::V1 && props.iter().any(|p| !p.is_empty()) {
            return Err(Error::Unsupported(
                "keys, headers and message ids need a store of record format 2; this one \
                 writes format 1 (made by rmqlog 0.1 or with record_format=1)"
                    .into(),
            ));
        }
        for (i, b) in bodies.iter().enumerate() {
            let props_len = props.get(i).map_or(0, Vec::len);
            check_size(state, props_len + b.as_ref().len()).map_err(|e| match e {
                // Which one, in a batch.
                Error::MessageTooLarge { size, limit } if bodies.len() > 1 => {
                    Error::MessageTooLarge {
                        size,
                        limit: format!("{limit} (bodies[{i}])"),
                    }
                }
                e => e,
            })?;
        }
        // Format 1's body CRCs depend on nothing the locks guard: computed before, they keep the
        // time other writers wait short. (Format 2's covers the offset: see `record::encode`.)
        let (one, many): ([u32; 1], Vec<u32>);
        let crcs: &[u32] = match (state.record_format, bodies) {
            (Format::V2, _) => &[],
            (Format::V1, [b]) => {
                one = [crc32_of(b.as_ref())];
                &one
            }
            (Format::V1, _) => {
                many = bodies.iter().map(|b| crc32_of(b.as_ref())).collect();
                &many
            }
        };
        let once = once.filter(|_| dedup::has_ids(props));
        // A custom strategy is asked again when other appends moved the end past what it placed;
        // a start still unplaced after that goes by round robin.
        let mut asks = 0;
        let end = loop {
            let mut c = locked(&self.cursor);
            state.check_writable()?;
            // Shared writers: the store's append lock, through the page the cursor holds.
            let ctl = self.shared_page(&c);
            let page = match &ctl {
                Some(ctl) => Some(lock_page(state, &mut c, ctl)?),
                None => None,
            };
            if let (Strategy::Custom(place), true) = (&state.opts.strategy, asks < 3) {
                let batch = Batch {
                    bodies,
                    crcs,
                    props,
                };
                let unplaced: Vec<u64> = c
                    .plan(&batch, state.opts.segment_size)?
                    .0
                    .into_iter()
                    .filter(|s| !c.hints.contains_key(s))
                    .collect();
                if !unplaced.is_empty() {
                    // The caller's function runs with no lock held (it may even append), the
                    // store's append lock included.
                    drop(page);
                    drop(c);
                    asks += 1;
                    let chosen = ask_custom(state, place.as_ref(), &unplaced);
                    locked(&self.cursor).hints.extend(chosen);
                    continue;
                }
            }
            let batch = Batch {
                bodies,
                crcs,
                props,
            };
            let end = match once {
                None => write_batch(state, &mut c, &self.warm, ctl.as_deref(), batch, &mut sink)?,
                Some(once) => {
                    c.index_published(state);
                    let now = c.next_timestamp(state);
                    let active = c.keys.current();
                    let seen = dedup::check(state, once.indexes, props, now, false, active)?
                        .ok_or_else(|| Error::Internal("a window left unread".into()))?;
                    write_new(
                        state,
                        &mut c,
                        &self.warm,
                        ctl.as_deref(),
                        batch,
                        &seen,
                        once,
                        &mut sink,
                    )?
                }
            };
            if let Some(ctl) = &ctl {
                c.note_warmed(ctl);
            }
            break end;
        };
        if state.opts.flush.policy().each_append {
            flush_to(state, end)?;
        }
        Ok(())
    }

    /// The control page whose append lock a shared writer takes; `None` for an exclusive one
    /// (no reference count touched on its appends).
    fn shared_page(&self, c: &Cursor) -> Option<Arc<Control>> {
        match self.shared {
            true => c.control.clone(),
            false => None,
        }
    }

    /// [`CommitLog::try_append`](crate::CommitLog::try_append).
    /// `props`: the record's encoded properties (one item), or empty. With `indexes`, a record
    /// whose message id is in the window is not written: its offset is that of the record that
    /// has it (`write/dedup.rs`; the slow path when the window reaches a remote segment).
    pub fn try_append(
        &self,
        state: &Arc<State>,
        body: &[u8],
        props: &[Vec<u8>],
        indexes: Option<&Indexes>,
    ) -> Result<Option<u64>> {
        state.check_open()?;
        let props_len = props.first().map_or(0, Vec::len);
        let dedup = match indexes {
            Some(ix) if props_len > 0 && dedup::has_ids(props) => Some(ix),
            _ => None,
        };
        if props_len > 0 && state.record_format == Format::V1 {
            return Ok(None); // the slow path says why
        }
        check_size(state, props_len + body.len())?;
        if state.opts.flush.policy().each_append {
            return Ok(None);
        }
        let mut c = match self.cursor.try_lock() {
            Ok(c) => c,
            Err(TryLockError::WouldBlock) => return Ok(None),
            Err(TryLockError::Poisoned(e)) => e.into_inner(),
        };
        let len = HEADER_LEN + props_len + body.len();
        let crc = match state.record_format {
            Format::V1 => Some(crc32_of(body)),
            Format::V2 => None,
        };
        let ctl = self.shared_page(&c);
        let _page = match &ctl {
            Some(ctl) => {
                match crate::shared::check_page(state, ctl).and_then(|()| ctl.try_lock_appends())? {
                    Some(mut page) => {
                        c.catch_up(state, ctl, &mut page, false)?;
                        Some(page)
                    }
                    None => return Ok(None),
                }
            }
            None => None,
        };
        // A large record is a syscall of its own: the caller's slow path lets go of its lock.
        if !c.fits(len) || c.file.takes(len) {
            return Ok(None);
        }
        state.check_writable()?;
        if let Some(indexes) = dedup {
            c.index_published(state);
            let now = c.next_timestamp(state);
            let active = c.keys.current();
            match dedup::check(state, indexes, props, now, true, active)?.as_deref() {
                None => return Ok(None),
                Some([Seen::Stored(at)]) => return Ok(Some(*at)),
                Some(_) => {}
            }
        }
        let mut offset = 0;
        let batch = Batch {
            bodies: &[body],
            crcs: crc.as_slice(),
            props,
        };
        write_batch(state, &mut c, &self.warm, ctl.as_deref(), batch, |o| {
            offset = o
        })?;
        if let Some(ctl) = &ctl {
            c.note_warmed(ctl);
        }
        Ok(Some(offset))
    }

    /// Records this boot's recovery point: the start of the active segment, below which every
    /// byte is in the maps (see [`crate::storage::tail_hint`]).
    pub fn record_tail_hint(&self, state: &State) {
        locked(&self.cursor).record_tail_hint(state, state.last_timestamp_ms());
    }

    /// Runs `f` once no append is in progress, and keeps appends out while it runs.
    pub fn idle<T>(&self, f: impl FnOnce() -> T) -> T {
        let _c = locked(&self.cursor);
        f()
    }

    /// The active segment as the `rmqlog-warm` thread sees it.
    pub fn warm_slot(&self) -> &Arc<Slot> {
        &self.warm
    }

    /// Ends writing (the log closes): no active segment, no open file.
    pub fn stop(&self) {
        let mut c = locked(&self.cursor);
        c.file.retire();
        self.warm.set(None);
        c.active = None;
        c.file = ActiveFile::none();
        c.tail = TailHints::default();
        c.control = None;
        c.keys.stop();
    }
}

/// The records of one append: their bodies, (format 1) the bodies' CRCs, else empty, and their
/// encoded properties, or empty when no record has any.
struct Batch<'a, B> {
    bodies: &'a [B],
    crcs: &'a [u32],
    props: &'a [Vec<u8>],
}

impl<B: AsRef<[u8]>> Batch<'_, B> {
    fn props(&self, i: usize) -> &[u8] {
        self.props.get(i).map_or(&[], Vec::as_slice)
    }

    /// Record `i`'s length, header included.
    fn len(&self, i: usize) -> usize {
        HEADER_LEN + self.props(i).len() + self.bodies[i].as_ref().len()
    }
}

/// A shared writer's append lock, taken, with the cursor brought up to the control page.
fn lock_page<'a>(state: &State, c: &mut Cursor, ctl: &'a Control) -> Result<PageGuard<'a>> {
    // A damaged page is refused before its lock is touched (a lock of garbage fails untyped),
    // at every append: one alone on a page damaged under it would skip the catch-up's check.
    crate::shared::check_page(state, ctl)?;
    if state
        .shared
        .as_ref()
        .is_some_and(|s| s.seen.load(std::sync::atomic::Ordering::Acquire) != ctl.generation())
    {
        // The segment list changed: listed before the lock is taken, not while others wait.
        crate::shared::catch_up(state)?;
    }
    let mut page = ctl.lock_appends(state.opts.lock_timeout, &|| state.check_open())?;
    c.catch_up(state, ctl, &mut page, state.opts.flush.policy().each_append)?;
    Ok(page)
}

/// [`write_batch`] of the records of `batch` that `seen` says are new; `sink` gets every record's
/// offset, a duplicate's being that of the record holding its id.
#[allow(clippy::too_many_arguments)]
fn write_new<B: AsRef<[u8]>>(
    state: &State,
    c: &mut Cursor,
    warm: &Slot,
    shared: Option<&Control>,
    batch: Batch<'_, B>,
    seen: &[Seen],
    once: &mut Once<'_>,
    mut sink: impl FnMut(u64),
) -> Result<u64> {
    if seen.iter().all(|s| *s == Seen::New) {
        return write_batch(state, c, warm, shared, batch, sink);
    }
    let new: Vec<usize> = (0..seen.len()).filter(|&i| seen[i] == Seen::New).collect();
    let bodies: Vec<&[u8]> = new.iter().map(|&i| batch.bodies[i].as_ref()).collect();
    let props: Vec<Vec<u8>> = new.iter().map(|&i| batch.props(i).to_vec()).collect();
    let mut written = Vec::with_capacity(new.len());
    let end = match new.is_empty() {
        true => c.end(),
        false => {
            let batch = Batch {
                bodies: &bodies,
                crcs: &[],
                props: &props,
            };
            write_batch(state, c, warm, shared, batch, |o| written.push(o))?
        }
    };
    let mut offsets: Vec<u64> = Vec::with_capacity(seen.len());
    let mut fresh = written.into_iter();
    for (i, s) in seen.iter().enumerate() {
        let offset = match *s {
            Seen::New => fresh.next().unwrap_or_default(),
            Seen::Stored(at) => at,
            Seen::InBatch(j) => offsets[j],
        };
        if *s != Seen::New {
            once.duplicates.push(i);
        }
        offsets.push(offset);
        sink(offset);
    }
    Ok(end)
}

/// Writes and publishes a batch; returns the new end of the log.
/// `shared`: the control page whose append lock the caller holds, to reserve the batch's bytes
/// in before the first is written (see `shared.rs`).
fn write_batch<B: AsRef<[u8]>>(
    state: &State,
    c: &mut Cursor,
    warm: &Slot,
    shared: Option<&Control>,
    batch: Batch<'_, B>,
    mut sink: impl FnMut(u64),
) -> Result<u64> {
    let (starts, planned_end) = c.plan(&batch, state.opts.segment_size)?;
    // A record with a key or an id makes its segment's index (`write/keys.rs`); a plain one
    // only updates one.
    let batch_keyed = batch
        .props
        .iter()
        .any(|p| !matches!(props::key_and_id(p), Some((None, None))));
    let Batch { bodies, crcs, .. } = batch;
    let new_segments = if starts.is_empty() {
        Vec::new()
    } else {
        let hints = &mut c.hints;
        roll(state, &starts, |start| hints.remove(&start))?
    };
    if let Some(ctl) = shared {
        ctl.reserve(planned_end);
    }
    fail_point!("append::reserved");
    let mut new_segments = new_segments.into_iter();
    let sync = state.opts.flush.policy().each_append;
    let ts = c.next_timestamp(state);
    let mut bytes = 0u64;
    // The records written into each segment, counted once they are published: where they
    // start in the current one and how many; the segments this batch sealed (rare: no
    // allocation otherwise).
    let (mut from, mut records) = (c.pos, 0u64);
    let mut sealed: Vec<(Arc<Segment>, u64, u64, u64)> = Vec::new();
    for (i, body) in bodies.iter().enumerate() {
        let (body, props) = (body.as_ref(), batch.props(i));
        let len = batch.len(i);
        if !c.fits(len) {
            let Some(next) = new_segments.next() else {
                return Err(Error::Internal(
                    "the append plan and the writes disagree".into(),
                ));
            };
            // No zeros from the thread after this: the filler goes in at the position.
            c.file.retire();
            if let Some((seg, map)) = &c.active {
                seal(seg, map, c.pos);
                sealed.push((Arc::clone(seg), from, c.pos, records));
            }
            c.file = ActiveFile::new(&next.0, 0, sync);
            warm.set(c.file.target(&next.0, &next.1));
            c.active = Some(next);
            c.pos = 0;
            (from, records) = (0, 0);
        }
        let Some((seg, map)) = &c.active else {
            return Err(Error::Internal("no active segment after a roll".into()));
        };
        let offset = seg.start() + c.pos;
        let crc = crcs.get(i).copied();
        let header = record::encode(state.record_format, props, body, crc, offset, ts);
        if !(c.file.takes(len) && c.file.write_record(c.pos, &header, props, body)) {
            c.file.warm(c.pos + len as u64);
            let pos = c.pos as usize;
            let stored = record::store(&header, props, body, |at, parts| {
                let mut at = pos + at;
                for part in parts {
                    // SAFETY: we hold the writer's cursor and write at or above its position, which
                    // is at or above the published end of the active segment (no reader holds a
                    // slice there), inside the map (`fits` checked above).
                    unsafe { map.write(at, part) };
                    at += part.len();
                }
                Ok::<(), Infallible>(())
            });
            let Ok(()) = stored;
        }
        c.pos += len as u64;
        records += 1;
        bytes += body.len() as u64;
        sink(offset);
    }
    // Publish: segment positions first, then the log's end.
    let end = c.end();
    if let Some((seg, _)) = &c.active {
        seg.set_written(end - seg.start());
    }
    Stats::add(&state.stats.appends, bodies.len() as u64);
    Stats::add(&state.stats.appended_bytes, bytes);
    fail_point!("append::before_publish");
    state.publish(end, ts);
    if let Some(control) = &c.control {
        control.publish_end(end, ts);
    }
    fail_point!("append::published");
    // Indexed once published, as counted: neither runs ahead of the published end.
    let sealed_ends: Vec<(Arc<Segment>, u64, u64)> = sealed
        .iter()
        .map(|(s, from, to, _)| (Arc::clone(s), *from, *to))
        .collect();
    let active = c.active.as_ref().map(|(s, m)| (s, m));
    c.keys
        .published(&sealed_ends, active, from, c.pos, batch_keyed, state);
    fail_point!("append::indexed");
    // Counted once readers may see them: a count never runs ahead of the published end.
    let rolled = !sealed.is_empty();
    if rolled {
        for (seg, from, to, n) in sealed {
            seg.count_appended(from, to, n, true);
        }
    }
    if let Some((seg, _)) = &c.active {
        seg.count_appended(from, c.pos, records, false);
    }
    if let Some(ctl) = shared {
        c.published = Some((ctl.end(), ctl.generation()));
    }
    if rolled {
        c.record_tail_hint(state, ts);
        log::debug!("rolled to a new segment; log end {end}");
    }
    Ok(end)
}

/// Closes a segment: a filler where there is room for one; the segment counts as fully written.
fn seal(seg: &Segment, map: &Mapping, pos: u64) {
    let remaining = (seg.size() - pos) as usize;
    if remaining >= FILLER_LEN {
        // SAFETY: writer cursor held; `pos` is the unpublished end of the active segment.
        unsafe { map.write(pos as usize, &filler(remaining)) };
    }
    seg.set_written(seg.size());
}
