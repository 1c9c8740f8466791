//! `BatchReader`: a scan of a log as Arrow record batches.

use arrow_array::{RecordBatch, RecordBatchReader};
use arrow_schema::{ArrowError, SchemaRef};

use std::sync::Arc;

use super::build::BatchBuilder;
use super::columns::BatchOptions;
use crate::error::{Error, Result};
use crate::read::reader::{RecordRef, Scan};
use crate::state::State;

/// Record batches over a fixed range of a log (the range as of the call that made it). Each
/// record is validated (header and body CRC) as by [`Scan`]. An error ends the reader, after the
/// batch of the records before it.
#[derive(Debug)]
pub struct BatchReader {
    scan: Scan,
    opts: BatchOptions,
    schema: SchemaRef,
    /// A record read that did not fit the last batch: the first of the next.
    pending: Option<RecordRef>,
    /// An error met after the last batch's records: the next call returns it.
    failed: Option<Error>,
    /// An error was returned: the reader has ended (`pending` then holds the record it was about).
    ended: bool,
    /// The bodies' size the next batch is expected to hold (the last one's).
    expect_bytes: usize,
}

impl BatchReader {
    /// `opts` were validated by the caller (before the scan was made).
    pub(crate) fn new(scan: Scan, opts: BatchOptions) -> BatchReader {
        BatchReader {
            schema: opts.schema(),
            scan,
            opts,
            pending: None,
            failed: None,
            ended: false,
            expect_bytes: 0,
        }
    }

    /// This reader, building its batches of only the records `filter` accepts (see
    /// [`crate::Filter`]; the others are checked and stepped over, as [`Scan::filtered`] does).
    /// It applies to the records read from then on: give it before the first batch.
    pub fn filtered(mut self, filter: impl Into<Arc<crate::Filter>>) -> BatchReader {
        self.scan = self.scan.filtered(filter);
        self
    }

    /// The filter the reader applies, if any.
    pub fn record_filter(&self) -> Option<&Arc<crate::Filter>> {
        self.scan.record_filter()
    }

    /// Whether the reader's scan ended on its filter's skip budget (a consumer's poll).
    pub(crate) fn stopped_skipping(&self) -> bool {
        self.scan.skip_budget_spent()
    }

    /// This reader, expecting its first batch to hold `body_bytes` of bodies.
    pub(super) fn expecting(mut self, body_bytes: usize) -> BatchReader {
        self.expect_bytes = body_bytes;
        self
    }

    /// Where the next batch starts (the end of the range once done).
    pub fn next_offset(&self) -> u64 {
        self.pending
            .as_ref()
            .map_or(self.scan.position(), RecordRef::offset)
    }

    /// The end of the range: no record starting at or after it is read.
    pub fn end(&self) -> u64 {
        self.scan.end()
    }

    /// The options the batches are built with.
    pub fn options(&self) -> &BatchOptions {
        &self.opts
    }

    pub(super) fn state(&self) -> &Arc<State> {
        self.scan.state()
    }

    pub(super) fn records(&self) -> &Scan {
        &self.scan
    }

    /// The next batch, `None` at the end of the range. A following reader waits for records and
    /// returns as soon as some are there (a batch is never empty).
    pub fn next_batch(&mut self) -> Result<Option<RecordBatch>> {
        self.next_batch_with(true)
    }

    /// [`BatchReader::next_batch`] without waiting: `None` also when a following reader has no
    /// record yet ([`BatchReader::is_done`] tells the two apart).
    pub fn next_batch_now(&mut self) -> Result<Option<RecordBatch>> {
        self.next_batch_with(false)
    }

    /// Whether the reader has ended (its range, an error, or a following reader's idle timeout
    /// or the log's close).
    pub fn is_done(&self) -> bool {
        self.ended || (self.pending.is_none() && self.failed.is_none() && self.scan.is_done())
    }

    /// How the reader follows the log, if it does, and the end of the range it follows to.
    pub fn follow(&self) -> Option<(crate::Follow, u64)> {
        self.scan.follow()
    }

    fn next_batch_with(&mut self, block: bool) -> Result<Option<RecordBatch>> {
        if self.ended {
            return Ok(None);
        }
        let batch = self.fill(block);
        self.ended = batch.is_err();
        batch
    }

    fn fill(&mut self, block: bool) -> Result<Option<RecordBatch>> {
        if let Some(e) = self.failed.take() {
            return Err(e);
        }
        self.scan.state().check_open()?;
        let mut batch = BatchBuilder::new(&self.opts, self.expect_bytes);
        if let Some(first) = self.pending.take() {
            let (map, _) = first.mapping();
            if let Err(e) = batch.push(&first.found(), map) {
                self.pending = Some(first);
                return Err(e);
            }
        }
        loop {
            // Only the first record of a batch is waited for.
            let next = match batch.is_empty() && block {
                true => self.scan.next_found(),
                false => self.scan.next_found_now(),
            };
            let Some(next) = next else { break };
            let (rec, map) = match next {
                Ok(found) => found,
                Err(e) if batch.is_empty() => return Err(e),
                Err(e) => {
                    self.failed = Some(e);
                    break;
                }
            };
            if !batch.fits(&rec) {
                self.pending = Some(rec.with_map(map));
                break;
            }
            if let Err(e) = batch.push(&rec, map) {
                self.pending = Some(rec.with_map(map));
                if batch.is_empty() {
                    return Err(e);
                }
                self.failed = Some(e);
                break;
            }
        }
        if batch.is_empty() {
            return Ok(None);
        }
        self.expect_bytes = batch.body_bytes();
        batch.finish(&self.schema).map(Some)
    }
}

impl Iterator for BatchReader {
    type Item = std::result::Result<RecordBatch, ArrowError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_batch()
            .map_err(|e| ArrowError::ExternalError(Box::new(e)))
            .transpose()
    }
}

impl RecordBatchReader for BatchReader {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }
}
