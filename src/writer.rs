//! The append path: one header write, one copy of the body and one CRC into the map per record,
//! no allocation and no syscall (outside segment rolls, warming a chunk ahead and sync mode);
//! records of 16 KiB or more, and all in sync mode, go to the file by `pwritev` instead (see
//! [`crate::active_file`]).
//!
//! Publication protocol: the body and the header from byte 8 on are written first, the
//! length/magic word last; then the log's `max_offset` advances with Release ordering. In-process
//! readers never look past `max_offset` (Acquire); a reader in another process validates every
//! record (header CRC, body CRC, stored offset) before trusting it.

use std::sync::atomic::Ordering;
use std::sync::{Arc, TryLockError};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::active_file::ActiveFile;
use crate::dirs::{DirInfo, DirState};
use crate::error::{Error, Result};
use crate::fs::{create_preallocated, is_no_space, remove_durably, segment_name};
use crate::log::{locked, Shared};
use crate::options::{FlushMode, PlaceFn, Strategy};
use crate::placement;
use crate::record::{body_crc, filler, Header, FILLER_LEN, HEADER_LEN};
use crate::segment::{Mapping, Segment};
use crate::stats::Stats;
use crate::tail_hint::TailHints;
use std::collections::HashMap;

/// The writer's position: the active segment and where the next record goes in it.
#[derive(Debug)]
pub(crate) struct Writer {
    /// The last segment and its map; `None` while the log has no segment.
    pub active: Option<(Arc<Segment>, Arc<Mapping>)>,
    /// Next write position inside the active segment.
    pub pos: u64,
    /// Start of the first segment when the log has none yet.
    pub next_start: u64,
    /// Directories a custom strategy chose for upcoming segments, by start offset.
    pub hints: HashMap<u64, usize>,
    /// The active segment's file: page-cache warming ahead of `pos`, and direct writes (of large
    /// records; of all in sync mode).
    file: ActiveFile,
    /// Where this writer records its recovery point (`rmqlog.tail`).
    tail: TailHints,
}

impl Writer {
    /// The writer at `pos` in `active`; `sync` for `FlushMode::Sync`.
    pub fn new(
        active: Option<(Arc<Segment>, Arc<Mapping>)>,
        pos: u64,
        next_start: u64,
        sync: bool,
        tail: TailHints,
    ) -> Writer {
        let file = match &active {
            Some((seg, _)) => ActiveFile::new(seg, pos, sync),
            None => ActiveFile::default(),
        };
        Writer {
            active,
            pos,
            next_start,
            hints: HashMap::new(),
            file,
            tail,
        }
    }

    /// Ends writing (the log closes): no active segment, no open file.
    pub fn stop(&mut self) {
        self.active = None;
        self.file = ActiveFile::default();
        self.tail = TailHints::default();
    }

    /// The end of the log: after the last record, or the next segment's start when too few
    /// bytes are left for even a filler (the segment is full).
    fn end(&self) -> u64 {
        match &self.active {
            Some((seg, _)) if seg.size() - self.pos < FILLER_LEN as u64 => seg.end(),
            Some((seg, _)) => seg.start() + self.pos,
            None => self.next_start,
        }
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

impl Shared {
    fn writer_mutex(&self) -> Result<&std::sync::Mutex<Writer>> {
        self.writer.as_ref().ok_or(Error::ReadOnly("append"))
    }

    fn check_writable(&self) -> Result<()> {
        self.check_open()?;
        if let Some(cause) = self.poisoned.get() {
            return Err(Error::WriterPoisoned {
                cause: cause.clone(),
            });
        }
        Ok(())
    }

    fn check_size(&self, len: usize) -> Result<()> {
        let max = self.opts.max_message_size as usize;
        if len > max {
            return Err(Error::MessageTooLarge {
                size: len,
                limit: format!("max_message_size is {max}"),
            });
        }
        let segment = self.opts.segment_size;
        if (HEADER_LEN + len) as u64 > segment {
            return Err(Error::MessageTooLarge {
                size: len,
                limit: format!(
                    "a record ({HEADER_LEN}-byte header + body) must fit in one segment of \
                     {segment} bytes"
                ),
            });
        }
        Ok(())
    }

    /// Appends `bodies` under one lock acquisition and reports each offset to `sink`.
    pub fn append_with<B: AsRef<[u8]>>(&self, bodies: &[B], sink: impl FnMut(u64)) -> Result<()> {
        let mutex = self.writer_mutex()?;
        self.check_open()?;
        for b in bodies {
            self.check_size(b.as_ref().len())?;
        }
        let mut sink = sink;
        let mut asked = false;
        let end = loop {
            let mut w = locked(mutex);
            self.check_writable()?;
            if let (Strategy::Custom(place), false) = (&self.opts.strategy, asked) {
                let unplaced: Vec<u64> = self
                    .planned_starts(&w, bodies)
                    .into_iter()
                    .filter(|s| !w.hints.contains_key(s))
                    .collect();
                if !unplaced.is_empty() {
                    // The caller's function runs with no lock held (it may even append).
                    drop(w);
                    asked = true;
                    let chosen = self.ask_custom(place.as_ref(), &unplaced);
                    locked(mutex).hints.extend(chosen);
                    continue;
                }
            }
            break self.write_batch(&mut w, bodies, &mut sink)?;
        };
        if self.opts.flush == FlushMode::Sync {
            self.flush_to(end)?;
        }
        Ok(())
    }

    /// [`CommitLog::try_append`](crate::CommitLog::try_append).
    pub fn try_append(&self, body: &[u8]) -> Result<Option<u64>> {
        let mutex = self.writer_mutex()?;
        self.check_open()?;
        self.check_size(body.len())?;
        if self.opts.flush == FlushMode::Sync {
            return Ok(None);
        }
        let mut w = match mutex.try_lock() {
            Ok(w) => w,
            Err(TryLockError::WouldBlock) => return Ok(None),
            Err(TryLockError::Poisoned(e)) => e.into_inner(),
        };
        let len = HEADER_LEN + body.len();
        let fits = match &w.active {
            Some((seg, _)) => w.pos + len as u64 <= seg.size(),
            None => false,
        };
        // A large record is a syscall of its own: the caller's slow path lets go of its lock.
        if !fits || w.file.takes(len) {
            return Ok(None);
        }
        self.check_writable()?;
        let mut offset = 0;
        self.write_batch(&mut w, &[body], |o| offset = o)?;
        Ok(Some(offset))
    }

    /// Writes and publishes a batch; returns the new end of the log.
    fn write_batch<B: AsRef<[u8]>>(
        &self,
        w: &mut Writer,
        bodies: &[B],
        mut sink: impl FnMut(u64),
    ) -> Result<u64> {
        let new_segments = self.create_needed_segments(w, bodies)?;
        let mut new_segments = new_segments.into_iter();
        let ts = now_ms().max(self.last_timestamp_ms.load(Ordering::Relaxed));
        let mut sealed_any = false;
        for body in bodies {
            let body = body.as_ref();
            let len = HEADER_LEN + body.len();
            let fits = match &w.active {
                Some((seg, _)) => w.pos + len as u64 <= seg.size(),
                None => false,
            };
            if !fits {
                let Some(next) = new_segments.next() else {
                    return unreachable_plan();
                };
                if let Some((seg, map)) = &w.active {
                    seal(seg, map, w.pos);
                    sealed_any = true;
                }
                w.file = ActiveFile::new(&next.0, 0, self.opts.flush == FlushMode::Sync);
                w.active = Some(next);
                w.pos = 0;
            }
            let Some((seg, map)) = &w.active else {
                return unreachable_plan();
            };
            let offset = seg.start() + w.pos;
            let pos = w.pos as usize;
            if w.file.takes(len) {
                let header = Header {
                    len: len as u32,
                    body_crc: body_crc(body),
                    offset,
                    timestamp_ms: ts,
                }
                .encode();
                if w.file.write_record(w.pos, &header, body) {
                    w.pos += len as u64;
                    sink(offset);
                    continue;
                }
            }
            w.file.warm(w.pos + len as u64);
            // SAFETY: we hold the writer mutex and write above the published end of the active
            // segment (pos >= seg.written()), inside the map (fits checked above).
            unsafe { map.write(pos + HEADER_LEN, body) };
            let crc = body_crc(map.bytes(pos + HEADER_LEN, pos + len));
            let header = Header {
                len: len as u32,
                body_crc: crc,
                offset,
                timestamp_ms: ts,
            }
            .encode();
            // SAFETY: as above; the length/magic word (bytes 0..8) goes last.
            unsafe {
                map.write(pos + 8, &header[8..]);
                map.write(pos, &header[..8]);
            }
            w.pos += len as u64;
            sink(offset);
        }
        // Publish: segment positions first, then the log's end.
        let end = w.end();
        if let Some((seg, _)) = &w.active {
            seg.set_written(end - seg.start());
        }
        self.last_timestamp_ms.fetch_max(ts, Ordering::Relaxed);
        Stats::add(&self.stats.appends, bodies.len() as u64);
        self.max_offset.store(end, Ordering::Release);
        if sealed_any {
            self.record_tail_hint_at(w, ts);
            log::debug!("rolled to a new segment; log end {end}");
        }
        Ok(end)
    }

    /// Records this boot's recovery point: the start of the writer's active segment, below which
    /// every byte is in the maps (see [`crate::tail_hint`]).
    pub(crate) fn record_tail_hint(&self) {
        let Some(mutex) = self.writer.as_ref() else {
            return;
        };
        let w = locked(mutex);
        self.record_tail_hint_at(&w, self.last_timestamp_ms.load(Ordering::Relaxed));
    }

    fn record_tail_hint_at(&self, w: &Writer, ts: u64) {
        if let Some((seg, _)) = &w.active {
            w.tail
                .record(seg.start(), ts, |i| self.dirs[i].keeps_metadata());
        }
    }

    /// Start offsets of the segments a batch will need.
    fn planned_starts<B: AsRef<[u8]>>(&self, w: &Writer, bodies: &[B]) -> Vec<u64> {
        let (mut start, mut size, mut pos) = match &w.active {
            Some((seg, _)) => (seg.start(), seg.size(), w.pos),
            None => (w.next_start, 0, 0),
        };
        let mut starts = Vec::new();
        for body in bodies {
            let len = (HEADER_LEN + body.as_ref().len()) as u64;
            if pos + len > size {
                start += size;
                size = self.opts.segment_size;
                pos = 0;
                starts.push(start);
            }
            pos += len;
        }
        starts
    }

    /// Asks a custom strategy for each start; a bad answer falls back to the built-in order.
    fn ask_custom(&self, place: &PlaceFn, starts: &[u64]) -> Vec<(u64, usize)> {
        let eligible = self.eligible_dirs();
        let infos: Vec<DirInfo> = eligible.iter().map(|(_, d)| d.clone()).collect();
        starts
            .iter()
            .filter_map(|&start| match place(&infos, start) {
                Some(k) if k < eligible.len() => Some((start, eligible[k].0)),
                other => {
                    log::warn!(
                        "custom strategy gave {other:?} for the segment at {start} ({} eligible \
                         directories); using round robin",
                        eligible.len()
                    );
                    None
                }
            })
            .collect()
    }

    /// Creates every segment the batch will need before writing any record, so a full disk fails
    /// the batch cleanly. Returns them mapped and already in the segment list (past `max_offset`,
    /// so invisible to readers until published).
    fn create_needed_segments<B: AsRef<[u8]>>(
        &self,
        w: &mut Writer,
        bodies: &[B],
    ) -> Result<Vec<(Arc<Segment>, Arc<Mapping>)>> {
        let starts = self.planned_starts(w, bodies);
        let mut created: Vec<(Arc<Segment>, Arc<Mapping>)> = Vec::with_capacity(starts.len());
        for start in starts {
            match self.create_segment(start, w.hints.remove(&start)) {
                Ok(s) => created.push(s),
                Err(e) => {
                    for (seg, _) in &created {
                        let _ = remove_durably(seg.path());
                    }
                    if let Some((first, _)) = created.first() {
                        let start = first.start();
                        self.segments.rcu(|l| l.truncated_before(start));
                    }
                    return Err(e);
                }
            }
        }
        Ok(created)
    }

    /// Judges every writable directory now (usage, `min_free_bytes`, `force_clean_ratio`),
    /// reporting changes, and returns the eligible ones: (index into `dirs`, info).
    pub(crate) fn eligible_dirs(&self) -> Vec<(usize, DirInfo)> {
        let need = self.opts.segment_size + self.opts.min_free_bytes;
        let mut out = Vec::new();
        for (i, info) in self.dir_infos().into_iter().enumerate() {
            if matches!(info.state, DirState::ReadOnly | DirState::Offline) {
                continue;
            }
            let force = self.opts.force_clean_ratio.get(&info.path);
            let refusal = match info.used_ratio {
                // Unknown usage: try it; creation reports a real shortage.
                None => None,
                Some(_) if info.free_bytes < need => Some(format!(
                    "{} bytes free, a new segment needs {need} (segment_size + min_free_bytes)",
                    info.free_bytes
                )),
                Some(r) if force.is_some_and(|f| r >= f) => Some(format!(
                    "used ratio {r:.3} is at or above force_clean_ratio {}",
                    force.unwrap_or(1.0)
                )),
                Some(_) => None,
            };
            match refusal {
                Some(why) => self.set_dir_state(i, DirState::Full, Some(why)),
                None => {
                    self.set_dir_state(i, DirState::Writable, None);
                    out.push((i, info));
                }
            }
        }
        out
    }

    /// Creates, maps and lists one segment. Eligible directories are tried in placement order
    /// (`hint` first: a custom strategy's choice); one that fails other than by lack of space goes
    /// offline. With none eligible, one cleaning pass runs and the choice is made again.
    fn create_segment(
        &self,
        start: u64,
        hint: Option<usize>,
    ) -> Result<(Arc<Segment>, Arc<Mapping>)> {
        let size = self.opts.segment_size;
        let name = segment_name(start);
        let mut eligible = self.eligible_dirs();
        if eligible.is_empty() {
            match self.clean_pass(false) {
                Ok(n) if n > 0 => log::info!("a full-disk roll cleaned {n} segments"),
                Ok(_) => {}
                Err(e) => log::warn!("cleaning before a full-disk roll failed: {e}"),
            }
            eligible = self.eligible_dirs();
        }
        let infos: Vec<DirInfo> = eligible.iter().map(|(_, d)| d.clone()).collect();
        let shares: Vec<usize> = eligible
            .iter()
            .map(|(i, _)| {
                let dev = self.dirs[*i].dev;
                eligible
                    .iter()
                    .filter(|(j, _)| dev.is_some() && self.dirs[*j].dev == dev)
                    .count()
                    .max(1)
            })
            .collect();
        let mut order: Vec<usize> =
            placement::order(&self.opts.strategy, &infos, &shares, start, size)
                .into_iter()
                .map(|k| eligible[k].0)
                .collect();
        if let Some(h) = hint.filter(|h| order.contains(h)) {
            order.retain(|&i| i != h);
            order.insert(0, h);
        }
        for dir_idx in order {
            let dir = &self.dirs[dir_idx].path;
            let created =
                create_preallocated(dir, &name, size, self.opts.file_mode).and_then(|path| {
                    let seg = Arc::new(Segment::new(start, size, path, dir_idx, true));
                    let map = seg.map()?;
                    Ok((seg, map))
                });
            match created {
                Ok((seg, map)) => {
                    self.segments.rcu(|l| l.with_pushed(Arc::clone(&seg)));
                    Stats::add(&self.stats.segments_created, 1);
                    return Ok((seg, map));
                }
                Err(Error::Io { source, .. }) if is_no_space(&source) => {
                    self.set_dir_state(dir_idx, DirState::Full, Some(source.to_string()));
                }
                Err(e) => {
                    // Kafka's JBOD rule: a directory failing on create goes offline for good.
                    let _ = std::fs::remove_file(dir.join(&name));
                    self.set_dir_state(dir_idx, DirState::Offline, Some(e.to_string()));
                }
            }
        }
        let why: Vec<String> = self
            .dir_infos()
            .iter()
            .map(|d| {
                format!(
                    "{}: {}{}",
                    d.path.display(),
                    d.state.as_str(),
                    d.error
                        .as_ref()
                        .map(|e| format!(" ({e})"))
                        .unwrap_or_default()
                )
            })
            .collect();
        Err(Error::DiskFull {
            needed: size,
            tried: why.join("; "),
        })
    }
}

/// Closes a segment: a filler where there is room for one; the segment counts as fully written.
fn seal(seg: &Segment, map: &Mapping, pos: u64) {
    let remaining = (seg.size() - pos) as usize;
    if remaining >= FILLER_LEN {
        // SAFETY: writer mutex held; `pos` is the unpublished end of the active segment.
        unsafe { map.write(pos as usize, &filler(remaining)) };
    }
    seg.set_written(seg.size());
}

fn unreachable_plan<T>() -> Result<T> {
    Err(Error::corruption(
        None,
        None,
        "internal error: the append plan and the writes disagree",
    ))
}
