//! `ReadAhead`: a [`BatchReader`] on its own thread, one batch ahead of its consumer, so that
//! checking and building the next batch overlaps with the consumer's work on the last one.

use std::sync::mpsc::{sync_channel, Receiver};
use std::sync::Arc;
use std::thread::JoinHandle;

use arrow_array::{RecordBatch, RecordBatchReader};
use arrow_schema::{ArrowError, SchemaRef};

use super::columns::BatchOptions;
use super::reader::BatchReader;
use crate::error::{Error, Result};
use crate::state::State;

/// A batch (or the end, or an error) and where the batch after it starts.
type Built = (Result<Option<RecordBatch>>, u64);

#[derive(Debug)]
enum Stage {
    /// Not started: the thread starts at the first batch asked for.
    Idle(Box<BatchReader>),
    /// The `rmqlog-scan` thread builds a batch, then waits until it is taken (a rendezvous).
    Running {
        batches: Receiver<Built>,
        thread: JoinHandle<()>,
    },
    /// The thread could not be started: batches are built on the caller's thread.
    Inline(Box<BatchReader>),
    Ended,
}

/// Batches of a [`BatchReader`] built one ahead on a thread of their own. Same batches, same
/// errors, same [`ReadAhead::next_offset`]; a closed log ends it at the next batch asked for,
/// even if one was built already. Dropping it stops and joins the thread (after at most the
/// batch it is building).
#[derive(Debug)]
pub struct ReadAhead {
    state: Arc<State>,
    opts: BatchOptions,
    schema: SchemaRef,
    end: u64,
    next_offset: u64,
    stage: Stage,
}

impl ReadAhead {
    pub(super) fn new(reader: BatchReader) -> ReadAhead {
        ReadAhead {
            state: Arc::clone(reader.state()),
            opts: reader.options().clone(),
            schema: reader.schema(),
            end: reader.end(),
            next_offset: reader.next_offset(),
            stage: Stage::Idle(Box::new(reader)),
        }
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

    /// The next batch, `None` at the end of the range.
    pub fn next_batch(&mut self) -> Result<Option<RecordBatch>> {
        if matches!(self.stage, Stage::Ended) {
            return Ok(None);
        }
        if let Err(e) = self.state.check_open() {
            self.stop();
            return Err(e);
        }
        if matches!(self.stage, Stage::Idle(_)) {
            self.start();
        }
        let (batch, next) = match &mut self.stage {
            Stage::Running { batches, .. } => batches.recv().unwrap_or_else(|_| {
                let e = Error::Internal("the scan's read-ahead thread stopped".into());
                (Err(e), self.next_offset)
            }),
            Stage::Inline(reader) => (reader.next_batch(), reader.next_offset()),
            Stage::Idle(_) | Stage::Ended => return Ok(None),
        };
        self.next_offset = next;
        if !matches!(batch, Ok(Some(_))) {
            self.stop();
        }
        batch
    }

    fn start(&mut self) {
        let Stage::Idle(reader) = std::mem::replace(&mut self.stage, Stage::Ended) else {
            return;
        };
        let (tx, rx) = sync_channel::<Built>(0);
        let (slot, handoff) = sync_channel::<Box<BatchReader>>(1);
        let spawned = std::thread::Builder::new()
            .name("rmqlog-scan".into())
            .spawn(move || {
                let Ok(mut reader) = handoff.recv() else {
                    return;
                };
                loop {
                    let batch = reader.next_batch();
                    let more = matches!(batch, Ok(Some(_)));
                    if tx.send((batch, reader.next_offset())).is_err() || !more {
                        return;
                    }
                }
            });
        self.stage = match spawned {
            Ok(thread) => match slot.send(reader) {
                Ok(()) => Stage::Running {
                    batches: rx,
                    thread,
                },
                Err(back) => Stage::Inline(back.0),
            },
            Err(e) => {
                log::debug!("no read-ahead thread for a scan ({e}): batches built inline");
                Stage::Inline(reader)
            }
        };
    }

    /// Ends the reader: the thread, if any, stops after the batch it is building and is joined.
    fn stop(&mut self) {
        if let Stage::Running { batches, thread } = std::mem::replace(&mut self.stage, Stage::Ended)
        {
            drop(batches); // a blocked or later `send` fails: the thread returns
            let _ = thread.join();
        }
    }
}

impl Drop for ReadAhead {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Iterator for ReadAhead {
    type Item = std::result::Result<RecordBatch, ArrowError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_batch()
            .map_err(|e| ArrowError::ExternalError(Box::new(e)))
            .transpose()
    }
}

impl RecordBatchReader for ReadAhead {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }
}
