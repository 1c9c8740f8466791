//! The append path: one header write, one copy of the body and one CRC into the map per record,
//! no allocation and no syscall (outside segment rolls and sync mode).
//!
//! Publication protocol: the body and the header from byte 8 on are written first, the
//! length/magic word last; then the log's `max_offset` advances with Release ordering. In-process
//! readers never look past `max_offset` (Acquire); a reader in another process validates every
//! record (header CRC, body CRC, stored offset) before trusting it.

use std::sync::atomic::Ordering;
use std::sync::{Arc, TryLockError};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::error::{Error, Result};
use crate::fs::{create_preallocated, is_no_space, remove_durably, segment_name};
use crate::log::{locked, Shared};
use crate::options::FlushMode;
use crate::placement::candidates;
use crate::record::{body_crc, filler, Header, FILLER_LEN, HEADER_LEN};
use crate::segment::{Mapping, Segment};

/// The writer's position: the active segment and where the next record goes in it.
#[derive(Debug)]
pub(crate) struct Writer {
    /// The last segment and its map; `None` while the log has no segment.
    pub active: Option<(Arc<Segment>, Arc<Mapping>)>,
    /// Next write position inside the active segment.
    pub pos: u64,
    /// Start of the first segment when the log has none yet.
    pub next_start: u64,
}

impl Writer {
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
        if let Some(cause) = locked(&self.poisoned).as_ref() {
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
        let end = {
            let mut w = locked(mutex);
            self.check_writable()?;
            self.write_batch(&mut w, bodies, sink)?
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
        let fits = match &w.active {
            Some((seg, _)) => w.pos + (HEADER_LEN + body.len()) as u64 <= seg.size(),
            None => false,
        };
        if !fits {
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
                w.active = Some(next);
                w.pos = 0;
            }
            let Some((seg, map)) = &w.active else {
                return unreachable_plan();
            };
            let offset = seg.start() + w.pos;
            let pos = w.pos as usize;
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
        self.max_offset.store(end, Ordering::Release);
        if sealed_any {
            log::debug!("rolled to a new segment; log end {end}");
        }
        Ok(end)
    }

    /// Creates every segment the batch will need before writing any record, so a full disk fails
    /// the batch cleanly. Returns them mapped and already in the segment list (past `max_offset`,
    /// so invisible to readers until published).
    fn create_needed_segments<B: AsRef<[u8]>>(
        &self,
        w: &Writer,
        bodies: &[B],
    ) -> Result<Vec<(Arc<Segment>, Arc<Mapping>)>> {
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
        let mut created: Vec<(Arc<Segment>, Arc<Mapping>)> = Vec::with_capacity(starts.len());
        for start in starts {
            match self.create_segment(start) {
                Ok(s) => created.push(s),
                Err(e) => {
                    for (seg, _) in &created {
                        let _ = remove_durably(seg.path());
                    }
                    let list = self.segments.load();
                    if let Some((first, _)) = created.first() {
                        self.segments
                            .store(Arc::new(list.truncated_before(first.start())));
                    }
                    return Err(e);
                }
            }
        }
        Ok(created)
    }

    /// Creates, maps and lists one segment, trying directories in placement order.
    fn create_segment(&self, start: u64) -> Result<(Arc<Segment>, Arc<Mapping>)> {
        let size = self.opts.segment_size;
        let name = segment_name(start);
        let order = candidates(self.opts.strategy, &self.writable, start, size);
        let mut tried = Vec::new();
        let mut other_error = None;
        for dir_idx in order {
            let dir = &self.dirs[dir_idx];
            match create_preallocated(dir, &name, size) {
                Ok(path) => {
                    let seg = Arc::new(Segment::new(start, size, path, true));
                    let map = seg.map()?;
                    let list = self.segments.load();
                    self.segments
                        .store(Arc::new(list.with_pushed(Arc::clone(&seg))));
                    return Ok((seg, map));
                }
                Err(Error::Io { source, path, .. }) if is_no_space(&source) => {
                    log::warn!("no space for a new segment in {}", dir.display());
                    tried.push(format!("{}: {source}", path.display()));
                }
                Err(e) => {
                    log::warn!("cannot create a segment in {}: {e}", dir.display());
                    other_error.get_or_insert(e);
                }
            }
        }
        if let Some(e) = other_error {
            return Err(e);
        }
        Err(Error::DiskFull {
            needed: size,
            tried: if tried.is_empty() {
                "no writable directory".into()
            } else {
                tried.join("; ")
            },
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
