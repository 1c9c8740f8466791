//! `ParallelReader`: the batches of a [`BatchReader`] built on worker threads and handed out in
//! order, so that checking and building overlap with the consumer's work and with each other.
//!
//! With one worker, the worker builds the whole range one batch ahead of its consumer. With more,
//! a planner walks the record headers (no CRC: about 15 ns a record here) and cuts the range
//! into the very batches the serial reader would build; each worker claims the next cut, checks
//! and builds it. At most `threads + 1` cuts are claimed ahead of the consumer and each holds at
//! most one built batch not taken: memory stays bounded however slow the consumer is.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

use arrow_array::{RecordBatch, RecordBatchReader};
use arrow_schema::{ArrowError, SchemaRef};

use super::columns::{weight, BatchOptions};
use super::reader::BatchReader;
use crate::error::{Error, Result};
use crate::read::reader::{Check, Found, Scan};
use crate::state::State;

/// The most worker threads a reader takes.
pub const MAX_THREADS: usize = 64;

/// One worker per core the process may use, at most 8 (and 1 where that is unknown).
pub fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get().min(8))
}

/// A batch (or an error) and where the batch after it starts.
type Built = (Result<RecordBatch>, u64);

/// Batches of a [`BatchReader`] built on `threads` worker threads, in the reader's order: the
/// same batches, the same errors (after the batches before them), the same
/// [`ParallelReader::next_offset`]. A closed log ends it at the next batch asked for, even if one
/// was built already. Dropping it stops and joins every worker (each after at most the batch it
/// is building).
#[derive(Debug)]
pub struct ParallelReader {
    state: Arc<State>,
    opts: BatchOptions,
    schema: SchemaRef,
    end: u64,
    next_offset: u64,
    stage: Stage,
    filter: Option<Arc<crate::Filter>>,
}

#[derive(Debug)]
enum Stage {
    /// Not started: the workers start at the first batch asked for.
    Idle {
        plan: Plan,
        threads: usize,
    },
    Running {
        shared: Arc<Shared>,
        workers: Vec<JoinHandle<()>>,
    },
    /// Batches built on the caller's thread: a following reader, or no thread could be started.
    Inline(Box<BatchReader>),
    Ended,
}

/// What the workers share with the consumer.
#[derive(Debug)]
struct Shared {
    /// Taken before `work` when both are held.
    plan: Mutex<Plan>,
    work: Mutex<Work>,
    changed: Condvar,
    /// Cuts claimed ahead of the consumer's, at most.
    ahead: u64,
}

#[derive(Debug)]
struct Work {
    /// The cut the consumer reads from.
    current: u64,
    /// Built batches not taken yet, by cut.
    cuts: BTreeMap<u64, Cut>,
    /// The number of cuts, once the plan ran out.
    total: Option<u64>,
    stopped: bool,
    /// A worker panicked (a bug): the consumer gets an error instead of waiting for it.
    panicked: bool,
}

#[derive(Debug, Default)]
struct Cut {
    batches: VecDeque<Built>,
    complete: bool,
}

/// Where the next cut comes from.
#[derive(Debug)]
enum Plan {
    /// One worker: the whole range is one cut, read by this reader.
    Whole(Option<Box<BatchReader>>, u64),
    /// Several: cuts of one batch each, found by a header walk.
    Walk(Box<Walk>),
}

#[derive(Debug)]
struct Walk {
    /// The reader the cuts are parts of (it reads nothing itself).
    reader: BatchReader,
    /// Over the reader's range, checking headers only.
    headers: Scan,
    /// The record the last cut ended before: the next cut's first.
    pending: Option<Found>,
    done: bool,
    claimed: u64,
}

impl Plan {
    fn claimed(&self) -> u64 {
        match self {
            Plan::Whole(_, claimed) => *claimed,
            Plan::Walk(w) => w.claimed,
        }
    }

    /// The reader of the next cut and its index, `None` once the range is cut.
    fn next(&mut self) -> Option<(BatchReader, u64)> {
        match self {
            Plan::Whole(reader, claimed) => {
                let r = reader.take()?;
                *claimed = 1;
                Some((*r, 0))
            }
            Plan::Walk(w) => {
                let (start, end, body_bytes) = w.cut()?;
                let index = w.claimed;
                w.claimed += 1;
                let part = w.reader.records().part(start, end, Check::Whole);
                let reader = BatchReader::new(part, w.reader.options().clone());
                Some((reader.expecting(body_bytes), index))
            }
        }
    }
}

impl Walk {
    /// The range of the batch the serial reader would build next, and what it weighs. A header
    /// the walk cannot read ends the plan: the rest of the range is one cut, whose reader meets
    /// it after the records before it (as the serial reader does).
    fn cut(&mut self) -> Option<(u64, u64, usize)> {
        if self.done {
            return None;
        }
        let limits = self.reader.options().limits();
        // What the batch weighs against its limits (bodies, keys and headers).
        let (start, mut rows, mut bytes) = match self.pending.take() {
            Some(f) => (f.offset, 1, weight(f.body_len, f.props_len)),
            None => (self.headers.position(), 0, 0),
        };
        // Takes a record into the batch when it fits (the serial reader's rule).
        let mut take = |body_len: usize, props_len: usize| {
            let w = weight(body_len, props_len);
            let fits = limits.fits(rows, bytes, w);
            if fits {
                rows += 1;
                bytes += w;
            }
            fits
        };
        loop {
            if let Some(end) = self
                .headers
                .skim(|h| take(h.body_len(), h.props_len as usize))
            {
                return Some((start, end, bytes));
            }
            match self.headers.next_found_now() {
                Some(Ok((f, _))) if take(f.body_len, f.props_len) => {}
                Some(Ok((f, _))) => {
                    self.pending = Some(f);
                    return Some((start, f.offset, bytes));
                }
                Some(Err(_)) => {
                    self.done = true;
                    return Some((start, self.headers.end(), bytes));
                }
                None => {
                    self.done = true;
                    // Records a filter refused are still checked: a stretch of them at the end
                    // is a cut of its own, which builds no batch.
                    let unchecked =
                        self.headers.record_filter().is_some() && start < self.headers.end();
                    return (rows > 0 || unchecked).then_some((start, self.headers.end(), bytes));
                }
            }
        }
    }
}

impl ParallelReader {
    /// A following reader builds on the caller's thread: a worker waiting for records could not
    /// be stopped by a drop.
    pub(super) fn new(reader: BatchReader, threads: usize) -> ParallelReader {
        let threads = threads.max(1);
        let (state, opts, schema) = (
            Arc::clone(reader.state()),
            reader.options().clone(),
            reader.schema(),
        );
        let (end, next_offset) = (reader.end(), reader.next_offset());
        let filter = reader.record_filter().cloned();
        let stage = |plan| Stage::Idle { plan, threads };
        let stage = if reader.follow().is_some() {
            Stage::Inline(Box::new(reader))
        } else if threads == 1 {
            stage(Plan::Whole(Some(Box::new(reader)), 0))
        } else {
            let headers = reader.records().part(next_offset, end, Check::Header);
            stage(Plan::Walk(Box::new(Walk {
                reader,
                headers,
                pending: None,
                done: false,
                claimed: 0,
            })))
        };
        ParallelReader {
            state,
            opts,
            schema,
            end,
            next_offset,
            stage,
            filter,
        }
    }

    /// The filter the reader applies, if any.
    pub fn record_filter(&self) -> Option<&Arc<crate::Filter>> {
        self.filter.as_ref()
    }

    /// Where the next batch starts (the end of the range once done).
    pub fn next_offset(&self) -> u64 {
        self.next_offset
    }

    /// The end of the range: no record starting at or after it is read.
    pub fn end(&self) -> u64 {
        self.end
    }

    /// The options the batches are built with.
    pub fn options(&self) -> &BatchOptions {
        &self.opts
    }

    /// Batches built and not taken yet: at most one per cut in flight (`threads + 1` cuts).
    pub fn built_ahead(&self) -> usize {
        match &self.stage {
            Stage::Running { shared, .. } => shared
                .lock_work()
                .cuts
                .values()
                .map(|c| c.batches.len())
                .sum(),
            _ => 0,
        }
    }

    /// The next batch, `None` at the end of the range.
    pub fn next_batch(&mut self) -> Result<Option<RecordBatch>> {
        if matches!(self.stage, Stage::Ended) {
            return Ok(None);
        }
        if let Err(e) = self.state.check_open() {
            self.stop();
            return Err(e);
        }
        if matches!(self.stage, Stage::Idle { .. }) {
            self.start();
        }
        let got = match &mut self.stage {
            Stage::Running { shared, .. } => shared.take(self.next_offset),
            Stage::Inline(reader) => match reader.next_batch() {
                Ok(Some(b)) => Some((Ok(b), reader.next_offset())),
                Ok(None) => None,
                Err(e) => Some((Err(e), reader.next_offset())),
            },
            Stage::Idle { .. } | Stage::Ended => None,
        };
        match got {
            Some((Ok(batch), next)) => {
                self.next_offset = next;
                Ok(Some(batch))
            }
            Some((Err(e), next)) => {
                self.next_offset = next;
                self.stop();
                Err(e)
            }
            None => {
                // The end of the range (a last cut of records a filter refused builds no batch).
                if matches!(self.stage, Stage::Running { .. }) {
                    self.next_offset = self.next_offset.max(self.end);
                }
                self.stop();
                Ok(None)
            }
        }
    }

    fn start(&mut self) {
        let Stage::Idle { plan, threads } = std::mem::replace(&mut self.stage, Stage::Ended) else {
            return;
        };
        let shared = Arc::new(Shared {
            plan: Mutex::new(plan),
            work: Mutex::new(Work {
                current: 0,
                cuts: BTreeMap::new(),
                total: None,
                stopped: false,
                panicked: false,
            }),
            changed: Condvar::new(),
            ahead: threads as u64 + 1,
        });
        let mut workers = Vec::with_capacity(threads);
        for i in 0..threads {
            let s = Arc::clone(&shared);
            match std::thread::Builder::new()
                .name(format!("rmqlog-scan-{i}"))
                .spawn(move || {
                    let worked =
                        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| s.work()));
                    if worked.is_err() {
                        s.lock_work().panicked = true;
                        s.changed.notify_all();
                    }
                }) {
                Ok(w) => workers.push(w),
                Err(e) => {
                    log::debug!(
                        "scan worker {i} not started ({e}); {} running",
                        workers.len()
                    );
                    break;
                }
            }
        }
        self.stage = if workers.is_empty() {
            match Arc::try_unwrap(shared).map(|s| s.plan.into_inner()) {
                Ok(Ok(Plan::Whole(Some(reader), _))) => Stage::Inline(reader),
                Ok(Ok(Plan::Walk(walk))) => Stage::Inline(Box::new(walk.reader)),
                _ => Stage::Ended,
            }
        } else {
            Stage::Running { shared, workers }
        };
    }

    /// Ends the reader: every worker stops after the batch it is building and is joined.
    fn stop(&mut self) {
        if let Stage::Running { shared, workers } = std::mem::replace(&mut self.stage, Stage::Ended)
        {
            if self.state.inherited_by_fork() {
                // A forked child: the workers are the parent's, and one may have held a lock at
                // the fork. Nothing of theirs is touched here.
                std::mem::forget((shared, workers));
                return;
            }
            shared.lock_work().stopped = true;
            shared.changed.notify_all();
            for w in workers {
                let _ = w.join();
            }
        }
    }
}

impl Shared {
    fn lock_work(&self) -> MutexGuard<'_, Work> {
        self.work.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn wait<'a>(&self, guard: MutexGuard<'a, Work>) -> MutexGuard<'a, Work> {
        self.changed.wait(guard).unwrap_or_else(|p| p.into_inner())
    }

    /// The next batch in order; `None` after the last. `at`: where the consumer is.
    fn take(&self, at: u64) -> Option<Built> {
        let mut work = self.lock_work();
        loop {
            if work.panicked {
                return Some((Err(Error::Internal("a scan worker panicked".into())), at));
            }
            let current = work.current;
            if work.total.is_some_and(|t| current >= t) {
                return None;
            }
            if let Some(cut) = work.cuts.get_mut(&current) {
                if let Some(built) = cut.batches.pop_front() {
                    self.changed.notify_all();
                    return Some(built);
                }
                if cut.complete {
                    work.cuts.remove(&current);
                    work.current += 1;
                    self.changed.notify_all();
                    continue;
                }
            }
            work = self.wait(work);
        }
    }

    /// A worker's loop: claim the next cut when there is room, build its batches.
    fn work(&self) {
        while let Some((mut reader, index)) = self.claim() {
            loop {
                let built = match reader.next_batch() {
                    Ok(Some(b)) => (Ok(b), reader.next_offset()),
                    Ok(None) => break,
                    Err(e) => (Err(e), reader.next_offset()),
                };
                let failed = built.0.is_err();
                if !self.put(index, built) || failed {
                    break;
                }
            }
            self.complete(index);
        }
    }

    /// The next cut, once it is at most `ahead` cuts past the consumer's; `None` when the plan is
    /// cut up or the reader stopped.
    fn claim(&self) -> Option<(BatchReader, u64)> {
        let mut plan = self.plan.lock().unwrap_or_else(|p| p.into_inner());
        let mut work = self.lock_work();
        while !work.stopped && plan.claimed() >= work.current + self.ahead {
            work = self.wait(work);
        }
        if work.stopped {
            return None;
        }
        drop(work);
        let next = plan.next();
        if next.is_none() {
            let total = plan.claimed();
            self.lock_work().total = Some(total);
            self.changed.notify_all();
        }
        next
    }

    /// Hands `built` to the consumer once its cut has room; false when the reader stopped.
    fn put(&self, index: u64, built: Built) -> bool {
        let mut work = self.lock_work();
        loop {
            if work.stopped {
                return false;
            }
            let cut = work.cuts.entry(index).or_default();
            if cut.batches.is_empty() {
                cut.batches.push_back(built);
                self.changed.notify_all();
                return true;
            }
            work = self.wait(work);
        }
    }

    fn complete(&self, index: u64) {
        self.lock_work().cuts.entry(index).or_default().complete = true;
        self.changed.notify_all();
    }
}

impl Drop for ParallelReader {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Iterator for ParallelReader {
    type Item = std::result::Result<RecordBatch, ArrowError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_batch()
            .map_err(|e| ArrowError::ExternalError(Box::new(e)))
            .transpose()
    }
}

// Here rather than in reader.rs, so that this file builds on that one and not the other way round.
impl BatchReader {
    /// This reader's batches built on `threads` worker threads (at least one), while the caller
    /// works on the last: see [`ParallelReader`]. A following reader builds on the caller's thread.
    pub fn parallel(self, threads: usize) -> ParallelReader {
        ParallelReader::new(self, threads)
    }
}

impl RecordBatchReader for ParallelReader {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }
}
