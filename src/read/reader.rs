//! Reads: one record by offset, ordered scans, and the timestamp search.
//!
//! Readers work on a snapshot of the segment list and never wait for the writer. A segment's
//! file can go while a reader holds an older snapshot, before it mapped the file: moved to
//! another directory or deleted (by this writer, by another shared writer, or, for a follower, by
//! the writer it follows). [`locate`] then looks the offset up again: in the current list, which
//! an exclusive writer keeps up to date itself, and a follower or shared writer refreshes first.
//! The record is read from the moved copy, or reported out of range if it was deleted; only a
//! file that vanished with nothing to explain it is an error.

use std::ops::Deref;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::failpoint::fail_point;
use crate::read::filter::Filter;
use crate::read::follow;
use crate::read::walk::{known, walk, Until};
use crate::state::State;
use crate::storage::props::{self, Props};
use crate::storage::record::{
    crc_defect, decode, has_record_magic, validate, validate_props, Format, Header, Slot,
    FILLER_LEN, FILLER_MAGIC, HEADER_LEN,
};
use crate::storage::segment::{Mapping, Segment};
use crate::storage::segments::SegmentList;

/// Bodies of any length written before a `max_message_size` change stay readable.
const MAX_BODY: usize = u32::MAX as usize;

/// Where a validated record lies in its segment's map: all of a [`RecordRef`] but the map, so a
/// scan that stays in one segment touches no reference count per record.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Found {
    pub body_start: usize,
    pub body_len: usize,
    /// The properties (key, headers) end where the body starts.
    pub props_len: usize,
    pub offset: u64,
    pub timestamp_ms: u64,
    pub next_offset: u64,
    pub segment_start: u64,
}

impl Found {
    /// The record, keeping `map` alive.
    pub fn with_map(self, map: &Arc<Mapping>) -> RecordRef {
        RecordRef {
            map: Arc::clone(map),
            at: self,
        }
    }

    /// The body's byte range in the map.
    pub fn body_range(&self) -> std::ops::Range<usize> {
        self.body_start..self.body_start + self.body_len
    }

    /// The properties' byte range in the map (empty for a record without).
    pub fn props_range(&self) -> std::ops::Range<usize> {
        self.body_start - self.props_len..self.body_start
    }
}

/// A validated record. Derefs to the body; keeps the segment's map alive (also past `close()` and
/// past the deletion of the file).
#[derive(Debug, Clone)]
pub struct RecordRef {
    map: Arc<Mapping>,
    at: Found,
}

impl RecordRef {
    /// Physical offset of the record.
    pub fn offset(&self) -> u64 {
        self.at.offset
    }

    /// Store timestamp in milliseconds since the Unix epoch.
    pub fn timestamp_ms(&self) -> u64 {
        self.at.timestamp_ms
    }

    /// Offset of the next record (after an end-of-segment filler, the next segment's start).
    pub fn next_offset(&self) -> u64 {
        self.at.next_offset
    }

    /// Start offset of the segment holding the record.
    pub fn segment_start(&self) -> u64 {
        self.at.segment_start
    }

    /// The body.
    pub fn body(&self) -> &[u8] {
        let r = self.at.body_range();
        self.map.bytes(r.start, r.end)
    }

    /// The key: `None` for a record without one.
    pub fn key(&self) -> Option<&[u8]> {
        self.props_block().and_then(|b| props::key_of(b).flatten())
    }

    /// The key and headers, parsed (a read checked that they parse: this fails only for a record
    /// found by a header-only walk).
    pub fn props(&self) -> Result<Props<'_>> {
        let Some(block) = self.props_block() else {
            return Ok(Props::default());
        };
        props::decode(block).ok_or_else(|| {
            Error::corruption(
                None,
                Some(self.at.offset),
                "record properties (key, headers) that do not parse, under a valid CRC",
            )
        })
    }

    /// The raw properties block, `None` for a record without.
    pub fn props_block(&self) -> Option<&[u8]> {
        let r = self.at.props_range();
        (!r.is_empty()).then(|| self.map.bytes(r.start, r.end))
    }

    /// The map holding the record, and the body's byte range inside it (for zero-copy exports).
    pub fn mapping(&self) -> (&Arc<Mapping>, std::ops::Range<usize>) {
        (&self.map, self.at.body_range())
    }

    /// The record's place, without its map.
    #[cfg(feature = "arrow")]
    pub(crate) fn found(&self) -> Found {
        self.at
    }
}

impl Deref for RecordRef {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.body()
    }
}

/// How many times one lookup follows a segment whose file went away.
const LOCATE_ATTEMPTS: usize = 8;

/// The segment holding `offset` in `list`, mapped. When its file is gone (see the module docs),
/// `list` is replaced by the current one (refreshed first in a follower) and the lookup repeats:
/// the caller's snapshot is then newer, never older.
pub(crate) fn locate(
    state: &State,
    list: &mut Arc<SegmentList>,
    offset: u64,
) -> Result<(Arc<Segment>, Arc<Mapping>)> {
    locate_with(state, list, offset, |seg| seg.map())
}

/// [`locate`] for a scan of the records starting in `[offset, to)`: of a remote segment it reads
/// only part of, only those records are fetched.
pub(crate) fn locate_span(
    state: &State,
    list: &mut Arc<SegmentList>,
    offset: u64,
    to: u64,
) -> Result<(Arc<Segment>, Arc<Mapping>)> {
    locate_with(state, list, offset, |seg| seg.map_span(offset, to))
}

/// [`locate`] for one record: of a remote segment only the record at `offset` is fetched.
pub(crate) fn locate_record(
    state: &State,
    list: &mut Arc<SegmentList>,
    offset: u64,
) -> Result<(Arc<Segment>, Arc<Mapping>)> {
    locate_with(state, list, offset, |seg| seg.map_for(offset))
}

fn locate_with(
    state: &State,
    list: &mut Arc<SegmentList>,
    offset: u64,
    map: impl Fn(&Segment) -> Result<Arc<Mapping>>,
) -> Result<(Arc<Segment>, Arc<Mapping>)> {
    let mut attempt = 0;
    loop {
        let seg = Arc::clone(
            list.find(offset)
                .ok_or_else(|| state.range_error(offset.into()))?,
        );
        let err = match map(&seg) {
            Ok(map) => return Ok((seg, map)),
            // A remote object missing: deleted by retention (the manifest moved on first), or
            // damage if the current list still holds the segment.
            Err(e) if gone(&seg, &e) && attempt < LOCATE_ATTEMPTS => e,
            Err(e) => return Err(e),
        };
        attempt += 1;
        if state.read_only {
            follow::refresh(state)?;
        } else {
            crate::shared::catch_up(state)?; // another shared writer's deletion or move
        }
        let current = state.segments_full();
        if offset < state.min_offset() {
            return Err(state.range_error(offset.into()));
        }
        let changes_elsewhere = state.read_only || state.shared.is_some();
        match current.find(offset) {
            Some(now) if !Arc::ptr_eq(now, &seg) => *list = current,
            // Still the same file, and it is gone: a follower may have raced one more move, or
            // the open that deleted or moved it has not announced it yet.
            _ if changes_elsewhere && attempt < LOCATE_ATTEMPTS => {
                std::thread::sleep(std::time::Duration::from_micros(50 << attempt));
                *list = current;
            }
            _ => return Err(err),
        }
    }
}

/// Whether `e`, from mapping `seg`, may mean that the segment went away (its file deleted or
/// moved, its remote object deleted by retention) rather than damage.
fn gone(seg: &Segment, e: &Error) -> bool {
    e.is_not_found() || (seg.is_remote() && matches!(e, Error::Corruption { .. }))
}

/// What a validated position holds.
enum At {
    Record(Found),
    /// A valid record the scan's filter refuses.
    Refused(Found),
    EndOfSegment,
    Invalid(&'static str),
    /// A record's magic is here but the header fails validation: a damaged record.
    Damaged(&'static str),
    BadCrc {
        format: Format,
        stored: u32,
        actual: u32,
    },
}

/// How far ahead of a header walk [`touch_ahead`] loads the map's cache lines. (A scan that
/// checks CRCs gained nothing from it when measured: the CRC's loads of a body overlap already.)
const TOUCH_AHEAD: usize = 4096;

/// Loads one byte of each cache line of `bytes` from `ahead` to `pos + TOUCH_AHEAD` and returns
/// where it stopped. A header walk is a chain of loads, each address known only from
/// the length before it: the loads issued here do not wait for the chain, so the lines arrive
/// while it runs (the hardware prefetcher alone leaves each header a cache miss).
#[inline]
fn touch_ahead(bytes: &[u8], pos: usize, mut ahead: usize) -> usize {
    let to = (pos + TOUCH_AHEAD).min(bytes.len());
    while ahead < to {
        std::hint::black_box(bytes[ahead]);
        ahead += 64;
    }
    ahead
}

/// How much of each record a read checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Check {
    /// Header and CRC: a record to trust.
    Whole,
    /// The header alone (no CRC): where records are, for a walk that does not read them.
    Header,
}

/// Decodes the record at `offset` in `seg` (mapped by `map`), reading no byte at or past `max`
/// (the published end).
fn record_at(seg: &Segment, map: &Arc<Mapping>, offset: u64, max: u64) -> At {
    record_checked(seg, map, offset, max, Check::Whole, None)
}

/// [`record_at`] checking `check` of it; a valid record `filter` refuses is [`At::Refused`]
/// (checked whole as any other, its properties' shape and the filter in one walk).
fn record_checked(
    seg: &Segment,
    map: &Arc<Mapping>,
    offset: u64,
    max: u64,
    check: Check,
    filter: Option<&Filter>,
) -> At {
    let pos = (offset - seg.start()) as usize;
    // (A segment rolled after `max` was read starts past it: nothing of it is readable.)
    let limit = max.min(seg.end()).saturating_sub(seg.start()) as usize;
    let size = seg.size() as usize;
    if pos >= limit {
        return At::EndOfSegment;
    }
    let rest = map.bytes(pos, limit);
    // A record without properties: what the filter says of an empty block.
    let mut accepted = filter.is_none_or(Filter::is_empty);
    let slot = match (check, filter) {
        (Check::Whole, None) => validate(rest, offset, MAX_BODY),
        (Check::Whole, Some(f)) => validate_props(rest, offset, MAX_BODY, |block| {
            match f.check_and_match(block) {
                Some(yes) => {
                    accepted = yes;
                    true
                }
                None => false,
            }
        }),
        (Check::Header, _) => decode(rest, offset, MAX_BODY),
    };
    let h = match slot {
        Slot::Record(h) => h,
        Slot::BadCrc {
            format,
            stored,
            actual,
        } => {
            return At::BadCrc {
                format,
                stored,
                actual,
            }
        }
        // What is not a record is checked against the whole segment, not the published part: a
        // filler reaches the segment's end, and only a sealed segment (published whole) has one.
        other => {
            let whole = decode(map.bytes(pos, size), offset, MAX_BODY);
            if whole == Slot::EndOfSegment && limit == size {
                return At::EndOfSegment;
            }
            let why = (other.defect().or(whole.defect()))
                .unwrap_or("a filler before the published end of its segment");
            return match has_record_magic(rest) {
                true => At::Damaged(why),
                false => At::Invalid(why),
            };
        }
    };
    let body_start = pos + h.body_from();
    let npos = pos + h.len as usize;
    // A filler only if it reaches the segment's end: a record whose damaged magic reads as the
    // filler's must end the scan with an error, not skip the rest of the segment.
    // (The magic first: a whole decode of every next record would cost a scan dearly.)
    let next_is_filler = size - npos < FILLER_LEN
        || (npos + FILLER_LEN <= limit
            && map.bytes(npos + 4, npos + 8) == FILLER_MAGIC.to_le_bytes()
            && decode(map.bytes(npos, size), offset + u64::from(h.len), 0) == Slot::EndOfSegment);
    let next_offset = if next_is_filler {
        seg.end()
    } else {
        offset + u64::from(h.len)
    };
    if check == Check::Header {
        // Not checked: what the properties say, if they parse.
        let props = &rest[HEADER_LEN..h.body_from()];
        accepted = filter.is_none_or(|f| f.matches(props));
    }
    let found = Found {
        body_start,
        body_len: h.body_len(),
        props_len: h.props_len as usize,
        offset,
        timestamp_ms: h.timestamp_ms,
        next_offset,
        segment_start: seg.start(),
    };
    match accepted {
        true => At::Record(found),
        false => At::Refused(found),
    }
}

/// The error for what a position holds when a record was expected there; `None` for a record.
fn unexpected(seg: &Segment, offset: u64, at: &At, scanning: bool) -> Option<Error> {
    let path = || Some(seg.path().to_path_buf());
    Some(match *at {
        At::Record(_) | At::Refused(_) => return None,
        At::BadCrc {
            format,
            stored,
            actual,
        } => Error::corruption(
            path(),
            Some(offset),
            format!(
                "{}: stored {stored:#010x}, computed {actual:#010x}",
                crc_defect(format)
            ),
        ),
        At::Invalid(why) | At::Damaged(why) if scanning => Error::corruption(
            path(),
            Some(offset),
            format!("no valid record where the scan expected one: {why}"),
        ),
        At::Damaged(why) => Error::corruption(
            path(),
            Some(offset),
            format!("damaged record header: {why}"),
        ),
        At::Invalid(why) => Error::InvalidOffset {
            offset,
            reason: why.into(),
        },
        At::EndOfSegment => Error::InvalidOffset {
            offset,
            reason: "it lies in the unused end of a segment".into(),
        },
    })
}

/// [`CommitLog::read`](crate::CommitLog::read).
pub(crate) fn read(state: &State, offset: u64) -> Result<RecordRef> {
    if let Some(rec) = read_mapped(state, offset)? {
        return Ok(rec);
    }
    let (seg, map) = locate_record(state, &mut state.segments_full(), offset)?;
    record_here(&seg, &map, offset, state.max_offset())
}

/// [`read`] when the record's segment is mapped already (no file opened, no request to a tier):
/// `None` otherwise. Its map's `Arc` is cloned once, into the record.
pub(crate) fn read_mapped(state: &State, offset: u64) -> Result<Option<RecordRef>> {
    let max = state.max_offset();
    if offset < state.min_offset() || offset >= max {
        return Err(state.range_error(offset.into()));
    }
    let list = state.segments();
    match list.find(offset).and_then(|s| Some((s, s.mapped()?))) {
        Some((seg, map)) => record_here(seg, map, offset, max).map(Some),
        None => Ok(None),
    }
}

/// The record a read asked for at `offset`, or why there is none.
fn record_here(seg: &Segment, map: &Arc<Mapping>, offset: u64, max: u64) -> Result<RecordRef> {
    match record_at(seg, map, offset, max) {
        At::Record(r) => Ok(r.with_map(map)),
        other => Err(unexpected(seg, offset, &other, false)
            .unwrap_or(Error::Internal("a record read as no record".into()))),
    }
}

/// [`CommitLog::offset_for_timestamp`](crate::CommitLog::offset_for_timestamp).
pub(crate) fn offset_for_timestamp(state: &Arc<State>, timestamp_ms: u64) -> Result<u64> {
    let max = state.max_offset();
    fail_point!("timestamp::ended");
    let mut list = state.segments_full();
    // Segments whose first record is older than the target: the answer is in the last of them or
    // at the start of the next one.
    // Only segments below the end read above: appends may have rolled one past it since.
    let starts: Vec<u64> = list
        .as_slice()
        .iter()
        .map(|s| s.start())
        .filter(|&s| s < max)
        .collect();
    let mut lo = 0;
    let mut hi = starts.len();
    while lo < hi {
        let mid = (lo + hi) / 2;
        let older = match locate_record(state, &mut list, starts[mid]) {
            Ok((seg, map)) if !seg.is_lost() => match record_at(&seg, &map, starts[mid], max) {
                At::Record(r) => r.timestamp_ms < timestamp_ms,
                _ => false,
            },
            _ => false,
        };
        if older {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    let min = state.min_offset();
    let mut from = lo.checked_sub(1).map_or(min, |i| starts[i]).max(min);
    // In a local segment, from the last start known older (one an earlier walk of this file
    // noted), then to the last record older by a walk that notes starts for the next search. A
    // walk that fails leaves the scan below to meet the damage where it did before.
    if let Ok((seg, map)) = locate_record(state, &mut list, from) {
        if !seg.is_remote() && !seg.is_lost() {
            let found = seg
                .boundaries(&map)
                .and_then(|b| b.last_older(timestamp_ms));
            if let Some(start) = known(&seg, &map, found) {
                from = from.max(start);
            }
            if let Ok((_, Some(older))) = walk(&seg, &map, from, max, Until::Time(timestamp_ms)) {
                from = older;
            }
        }
    }
    // Timestamps never decrease in a log: the answer is the first record whose header says
    // `>= timestamp_ms`, and the headers are walked without CRCs. The two records that decide
    // it are then checked whole: a damaged timestamp (or any damage) in either is an error, and
    // one in a record before them cannot move the answer (its true timestamp is older too).
    let mut scan = Scan::over(Arc::clone(state), Arc::clone(&list), from, max, max);
    scan.check = Check::Header;
    let mut older = None;
    let mut is_older = |offset: u64, ts: u64| {
        let before = ts < timestamp_ms;
        if before {
            older = Some(offset);
        }
        before
    };
    let at = loop {
        if let Some(at) = scan.skim(|h| is_older(h.offset, h.timestamp_ms)) {
            break Some(at);
        }
        match scan.next_found() {
            None => break None,
            Some(Err(e)) => return Err(e),
            Some(Ok((rec, _))) if is_older(rec.offset, rec.timestamp_ms) => {}
            Some(Ok((rec, _))) => break Some(rec.offset),
        }
    };
    for offset in older.into_iter().chain(at) {
        let (seg, map) = locate_record(state, &mut list, offset)?;
        record_here(&seg, &map, offset, max)?;
    }
    Ok(at.unwrap_or(max))
}

/// [`CommitLog::record_start_at_or_after`](crate::CommitLog::record_start_at_or_after).
pub(crate) fn record_start_at_or_after(state: &State, offset: u64) -> Result<u64> {
    let max = state.max_offset();
    let min = state.min_offset();
    if offset <= min {
        return Ok(min);
    }
    if offset >= max {
        return Ok(max);
    }
    // The walk starts at the last record start known without reading (a remote segment's split):
    // of a remote segment only the records from there are fetched, and none at a split.
    let walk_from = |seg: &Segment| seg.split_at_or_before(offset).max(min);
    if state
        .segments()
        .find(offset)
        .is_some_and(|seg| seg.is_remote() && walk_from(seg) == offset)
    {
        return Ok(offset);
    }
    let (seg, map) = locate_with(state, &mut state.segments_full(), offset, |seg| {
        seg.map_span(walk_from(seg), offset)
    })?;
    let mut at = walk_from(&seg);
    if !seg.is_remote() {
        // From the furthest start known before it (the segment's own, or one an earlier walk of
        // this file noted): `min` and a known start are both record starts.
        let found = seg
            .boundaries(&map)
            .and_then(|b| b.at_or_before(offset - seg.start()));
        if let Some(start) = known(&seg, &map, found) {
            at = at.max(start);
        }
        let (at, _) = walk(&seg, &map, at, max, Until::Offset(offset))?;
        return Ok(at.min(max));
    }
    // A remote segment's records are checked whole as they are walked: their bytes are fetched
    // anyway (from the split before), and a range read has no object CRC32C to catch a damaged
    // length that would step over a record.
    while at < offset {
        at = match record_checked(&seg, &map, at, max, Check::Whole, None) {
            At::Record(r) => r.next_offset,
            At::EndOfSegment => seg.end(),
            other => {
                return Err(unexpected(&seg, at, &other, true)
                    .unwrap_or(Error::Internal("a record walked as no record".into())))
            }
        };
    }
    Ok(at.min(max))
}

/// How many records of `[from, to)` `filter` accepts, walking their headers (no CRC: a count,
/// not a read; a block that does not parse is not counted).
pub(crate) fn count_matching(
    state: &Arc<State>,
    from: u64,
    to: u64,
    filter: &Arc<Filter>,
) -> Result<u64> {
    if from >= to {
        return Ok(0);
    }
    let mut scan = Scan::new(Arc::clone(state), Some(from), Some(to))?.filtered(Arc::clone(filter));
    scan.check = Check::Header;
    let mut n = 0;
    while let Some(r) = scan.next_found() {
        r?;
        n += 1;
    }
    Ok(n)
}

/// How a scan goes on past the end of the log as of its start: it waits for records appended
/// later (by any process), until its range ends, the log closes, or no record came for
/// `idle_timeout`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Follow {
    /// Ends the scan when no new record came for this long (`None`: never).
    pub idle_timeout: Option<std::time::Duration>,
    /// Yields only durable records (below `flushed_offset`).
    pub durable: bool,
}

/// Records in offset order over a range (fixed, or followed as the log grows); yields an error
/// and stops at a corrupt record.
#[derive(Debug)]
pub struct Scan {
    state: Arc<State>,
    list: Arc<SegmentList>,
    next: u64,
    /// Records starting at or after this are not yielded.
    end: u64,
    /// How much of each record it checks ([`Check::Header`]: a planner's walk).
    check: Check,
    /// The published end when the scan began: no byte at or past it is read.
    max: u64,
    /// The segment the scan is in, and its map.
    current: Option<(Arc<Segment>, Arc<Mapping>)>,
    done: bool,
    /// A following scan: how it follows, and the end of the range it was asked for.
    follow: Option<(Follow, u64)>,
    /// A start not checked yet (it lay past the end when the scan began): no record there is
    /// the caller's bad offset, not damage.
    unchecked_start: Option<u64>,
    /// A filtered scan's filter (boxed: a plain scan carries one word for it).
    filtering: Option<Box<Filtering>>,
}

/// What a filtered scan steps over.
#[derive(Debug, Clone)]
struct Filtering {
    /// Records this refuses are stepped over: read and checked as any other (a damaged one ends
    /// the scan with its error), not yielded.
    filter: Arc<Filter>,
    /// A bounded scan ends once it has stepped over this many more refused records, or bytes of
    /// them (a consumer's poll: bounded work however few records match).
    budget: Option<(u64, u64)>,
}

impl Scan {
    pub(crate) fn new(state: Arc<State>, start: Option<u64>, end: Option<u64>) -> Result<Scan> {
        Scan::with(state, start, end, None)
    }

    /// A scan that follows the log (see [`Follow`]).
    pub(crate) fn following(
        state: Arc<State>,
        start: Option<u64>,
        end: Option<u64>,
        follow: Follow,
    ) -> Result<Scan> {
        if state.read_only {
            let ctl = state.control_full();
            crate::read::wait::catch_up(&state, &ctl)?;
        }
        Scan::with(state, start, end, Some(follow))
    }

    fn with(
        state: Arc<State>,
        start: Option<u64>,
        end: Option<u64>,
        follow: Option<Follow>,
    ) -> Result<Scan> {
        let max = match follow {
            Some(f) => crate::read::wait::visible(&state, f.durable),
            None => state.readable_end(),
        };
        let min = state.min_offset();
        let wanted = end.unwrap_or(crate::storage::segment::MAX_OFFSET);
        let end = end.map_or(max, |e| e.min(max));
        let start = start.unwrap_or(min);
        if start < min {
            return Err(state.range_error(start.into()));
        }
        let mut list = state.segments_full();
        // `start` must be a record start, or the end of a segment's records (an earlier
        // `max_offset`, since sealed by a filler): the scan then goes on in the next segment. A
        // hole (accept_lost) is skipped by the scan.
        let lost = list.find(start).is_some_and(|s| s.is_lost());
        let checked = start < end && !lost;
        if checked {
            let (seg, map) = locate_span(&state, &mut list, start, end)?;
            let at = record_at(&seg, &map, start, max);
            if !matches!(at, At::EndOfSegment) {
                if let Some(e) = unexpected(&seg, start, &at, false) {
                    return Err(e);
                }
            }
        }
        let mut scan = Scan::over(state, list, start, end, max);
        scan.unchecked_start = (!checked && !lost).then_some(start);
        scan.follow = follow.map(|f| (f, wanted));
        scan.done = scan.done && scan.follow.is_none_or(|(_, wanted)| start >= wanted);
        Ok(scan)
    }

    fn over(state: Arc<State>, list: Arc<SegmentList>, start: u64, end: u64, max: u64) -> Scan {
        Scan {
            state,
            list,
            next: start,
            end: end.min(max),
            max,
            current: None,
            check: Check::Whole,
            done: start >= end,
            follow: None,
            unchecked_start: None,
            filtering: None,
        }
    }

    /// This scan, yielding only the records `filter` accepts (see [`Filter`]). The others are
    /// read and checked as by any scan (a damaged one ends it with its error, as it would end
    /// a plain scan), and stepped over without a copy or a reference to their map. A filter
    /// with no condition changes nothing.
    pub fn filtered(mut self, filter: impl Into<Arc<Filter>>) -> Scan {
        let filter = filter.into();
        self.filtering = (!filter.is_empty()).then(|| {
            Box::new(Filtering {
                filter,
                budget: None,
            })
        });
        self
    }

    /// [`Scan::filtered`] by a filter that may be absent.
    pub(crate) fn filtered_by(self, filter: Option<&Arc<Filter>>) -> Scan {
        match filter {
            Some(f) => self.filtered(Arc::clone(f)),
            None => self,
        }
    }

    /// The filter the scan applies, if any.
    pub fn record_filter(&self) -> Option<&Arc<Filter>> {
        self.filtering.as_ref().map(|f| &f.filter)
    }

    /// A filtered scan that ends once it has stepped over `records` refused records or `bytes`
    /// of them (its [`Scan::position`] then says how far it went): a poll's bounded work.
    pub(crate) fn skipping_at_most(mut self, records: u64, bytes: u64) -> Scan {
        if let Some(f) = &mut self.filtering {
            f.budget = Some((records, bytes));
        }
        self
    }

    /// Whether the scan ended on its skip budget (rather than at the end of its range).
    pub(crate) fn skip_budget_spent(&self) -> bool {
        (self.filtering.as_ref())
            .and_then(|f| f.budget)
            .is_some_and(|(r, b)| r == 0 || b == 0)
    }

    /// How the scan follows the log, if it does, and the end of the range it follows to.
    pub fn follow(&self) -> Option<(Follow, u64)> {
        self.follow
    }

    /// Whether the scan has ended (a following scan ends with its range, its idle timeout or the
    /// log's close).
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// A following scan takes in the records appended since it last looked; false when there
    /// are none (or it does not follow).
    fn grow(&mut self) -> Result<bool> {
        let Some((f, wanted)) = self.follow else {
            return Ok(false);
        };
        if self.next >= wanted {
            return Ok(false);
        }
        if self.state.read_only {
            let ctl = self.state.control_full();
            crate::read::wait::catch_up(&self.state, &ctl)?;
        }
        let visible = crate::read::wait::visible(&self.state, f.durable);
        if visible <= self.max {
            return Ok(false);
        }
        self.max = visible;
        self.end = wanted.min(visible);
        self.list = self.state.segments_full();
        Ok(true)
    }

    /// Waits (blocking) until a following scan has more records; false when it ended instead.
    fn wait_more(&mut self) -> Result<bool> {
        let Some((f, _)) = self.follow else {
            return Ok(false);
        };
        let deadline = f.idle_timeout.map(|t| std::time::Instant::now() + t);
        loop {
            match crate::read::wait::wait(&self.state, self.next, f.durable, deadline, false) {
                Ok(crate::read::wait::Waited::Passed(_)) => {}
                Ok(_) | Err(Error::Closed) => return Ok(false),
                Err(e) => return Err(e),
            }
            if self.grow()? {
                return Ok(true);
            }
        }
    }

    /// Offset of the next record the scan will yield (or its end).
    pub fn position(&self) -> u64 {
        self.next
    }

    /// The end of the scan's range: no record starting at or after it is yielded.
    pub fn end(&self) -> u64 {
        self.end
    }

    /// The records of `[start, end)` of this scan's range, seen as of its start (the same
    /// segments and published end). `start` must be a record start: the caller walked there.
    #[cfg(feature = "arrow")]
    pub(crate) fn part(&self, start: u64, end: u64, check: Check) -> Scan {
        let mut part = Scan::over(
            Arc::clone(&self.state),
            Arc::clone(&self.list),
            start,
            end.min(self.end),
            self.max,
        );
        part.check = check;
        part.filtering = self.filtering.as_ref().map(|f| {
            Box::new(Filtering {
                filter: Arc::clone(&f.filter),
                budget: None,
            })
        });
        part
    }

    /// Walks the headers of the ordinary records ahead in the current segment (no CRC), while
    /// `take(header)` accepts them. Returns the offset of the record `take` refused (the scan
    /// stays there), or `None` where anything else is next (a segment's end, a filler, damage,
    /// the range's end): [`Scan::next_found_now`] then takes that one step.
    pub(crate) fn skim(&mut self, mut take: impl FnMut(&Header) -> bool) -> Option<u64> {
        let (seg, map) = self.current.as_ref()?;
        if self.done || !seg.contains(self.next) {
            return None;
        }
        let base = seg.start();
        let bytes = map.bytes(0, self.max.min(seg.end()).saturating_sub(base) as usize);
        let mut ahead = (self.next - base) as usize;
        while self.next < self.end {
            let pos = (self.next - base) as usize;
            if pos >= bytes.len() {
                return None;
            }
            ahead = touch_ahead(bytes, pos, ahead);
            let Slot::Record(h) = decode(&bytes[pos..], self.next, MAX_BODY) else {
                return None;
            };
            // A record the filter refuses is no part of a batch (its bytes are not checked
            // here: the walk plans, the reader of the part checks every record).
            let props = &bytes[pos + HEADER_LEN..pos + h.body_from()];
            if (self.filtering.as_ref()).is_some_and(|f| !f.filter.matches(props)) {
                self.next += u64::from(h.len);
                continue;
            }
            if !take(&h) {
                return Some(self.next);
            }
            self.next += u64::from(h.len);
        }
        None
    }

    /// The log's state (whether it is still open).
    #[cfg(feature = "arrow")]
    pub(crate) fn state(&self) -> &Arc<State> {
        &self.state
    }

    fn step(&mut self) -> Result<Option<Found>> {
        loop {
            if self.next >= self.end {
                return Ok(None);
            }
            if !self
                .current
                .as_ref()
                .is_some_and(|(s, _)| s.contains(self.next))
            {
                if let Some(hole) = self.list.find(self.next).filter(|s| s.is_lost()) {
                    // A hole left by a lost directory: skip it.
                    self.next = hole.end();
                    continue;
                }
                let (seg, map) = locate_span(&self.state, &mut self.list, self.next, self.end)?;
                // A remote segment next downloads while this one is read.
                if let Some(next) = self.list.find(seg.end()).filter(|n| n.start() < self.end) {
                    next.prefetch(self.end);
                }
                self.current = Some((seg, map));
            }
            let Some((seg, map)) = &self.current else {
                return Err(Error::Internal("a scan lost its segment".into()));
            };
            let scanning = self.unchecked_start.take() != Some(self.next);
            let filter = self.filtering.as_deref().map(|f| &*f.filter);
            match record_checked(seg, map, self.next, self.max, self.check, filter) {
                At::Record(r) => {
                    self.next = r.next_offset;
                    return Ok(Some(r));
                }
                At::Refused(r) => {
                    self.next = r.next_offset;
                    let budget = self.filtering.as_mut().and_then(|f| f.budget.as_mut());
                    if let Some((records, bytes)) = budget {
                        *records = records.saturating_sub(1);
                        *bytes = bytes.saturating_sub(r.next_offset - r.offset);
                        if *records == 0 || *bytes == 0 {
                            return Ok(None);
                        }
                    }
                }
                At::EndOfSegment => self.next = seg.end(),
                other => {
                    return Err(unexpected(seg, self.next, &other, scanning)
                        .unwrap_or(Error::Internal("a record read as no record".into())))
                }
            }
        }
    }

    /// The next record and the map it lies in (borrowed: no reference count is touched). A
    /// following scan waits for it.
    pub(crate) fn next_found(&mut self) -> Option<Result<(Found, &Arc<Mapping>)>> {
        let found = loop {
            match self.advance() {
                Some(r) => break r,
                None if self.done || self.follow.is_none() => return None,
                None => match self.wait_more() {
                    Ok(true) => {}
                    Ok(false) => {
                        self.end_scan();
                        return None;
                    }
                    Err(e) => {
                        self.end_scan();
                        return Some(Err(e));
                    }
                },
            }
        };
        Some(found.and_then(|f| self.with_current_map(f)))
    }

    /// [`Scan::next_found`] without waiting: `None` when no record is there yet (a following
    /// scan that has not ended: see [`Scan::is_done`]) or the scan ended.
    pub(crate) fn next_found_now(&mut self) -> Option<Result<(Found, &Arc<Mapping>)>> {
        let found = self.advance()?;
        Some(found.and_then(|f| self.with_current_map(f)))
    }

    /// The next record if it can be read without waiting (see [`Scan::next_found_now`]).
    pub fn next_now(&mut self) -> Option<Result<RecordRef>> {
        self.next_found_now()
            .map(|r| r.map(|(found, map)| found.with_map(map)))
    }

    fn with_current_map(&self, f: Found) -> Result<(Found, &Arc<Mapping>)> {
        match &self.current {
            Some((_, map)) => Ok((f, map)),
            None => Err(Error::Internal("a scan lost its segment".into())),
        }
    }

    /// The next record that can be read now. `None`: the scan ended, or (following) no record
    /// is there yet.
    fn advance(&mut self) -> Option<Result<Found>> {
        if self.done {
            return None;
        }
        if self.follow.is_some() && self.next >= self.end {
            match self.grow() {
                Ok(true) => {}
                Ok(false) => {
                    self.end_if_past_range();
                    return None;
                }
                Err(e) => {
                    self.end_scan();
                    return Some(Err(e));
                }
            }
        }
        match self.step() {
            Ok(Some(f)) => Some(Ok(f)),
            Ok(None) => {
                if self.follow.is_some() {
                    self.end_if_past_range();
                } else {
                    self.end_scan();
                }
                None
            }
            Err(e) => {
                self.end_scan();
                Some(Err(e))
            }
        }
    }

    /// A following scan ends once it reached the end of the range it was asked for.
    fn end_if_past_range(&mut self) {
        if self.follow.is_some_and(|(_, wanted)| self.next >= wanted) {
            self.end_scan();
        }
    }

    /// An ended scan lets go of its snapshot of the segment list, so the maps of segments deleted
    /// since go as soon as no record or batch holds them.
    fn end_scan(&mut self) {
        self.done = true;
        self.current = None;
        self.list = Arc::new(SegmentList::new(Vec::new(), self.state.opts.segment_size));
    }
}

impl Iterator for Scan {
    type Item = Result<RecordRef>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_found()
            .map(|r| r.map(|(found, map)| found.with_map(map)))
    }
}
