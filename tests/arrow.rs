#![allow(clippy::unwrap_used)] // tests: a failed unwrap is the failure report
//! The Rust Arrow API: `scan_batches` against `scan`, batch splitting, zero copy, batch lifetime,
//! errors, and `append_array` of every accepted array type, all or nothing.

mod common;

use std::sync::Arc;

use arrow_array::builder::{BinaryViewBuilder, FixedSizeBinaryBuilder};
use arrow_array::cast::AsArray;
use arrow_array::types::{Int64Type, TimestampMillisecondType};
use arrow_array::{
    Array, ArrayRef, BinaryArray, Int32Array, LargeBinaryArray, LargeStringArray, RecordBatch,
    RecordBatchReader, StringArray, StringViewArray,
};
use arrow_schema::{DataType, TimeUnit};
use common::{body, dirs, quiet, segment_of};
use rmqlog::arrow::{BatchOptions, BatchReader, BodyLayout, Column, ParallelReader};
use rmqlog::{CommitLog, Error, HEADER_LEN};

/// One record as `scan` sees it: offset, timestamp, body, segment start.
type Row = (u64, u64, Vec<u8>, u64);

fn rows_of_scan(log: &CommitLog, start: Option<u64>, end: Option<u64>) -> Vec<Row> {
    log.scan(start, end)
        .unwrap()
        .map(|r| {
            let r = r.unwrap();
            (r.offset(), r.timestamp_ms(), r.to_vec(), r.segment_start())
        })
        .collect()
}

/// Bodies of varied sizes (inline views of <= 12 bytes, empty ones, and longer) over many 4 KiB
/// segments.
fn filled() -> (tempfile::TempDir, CommitLog) {
    let (root, d) = dirs(2);
    let log = CommitLog::open(&d, quiet()).unwrap();
    for i in 0..200u64 {
        let len = [0, 3, 12, 13, 100, 700][(i % 6) as usize];
        let b = if len == 0 { Vec::new() } else { body(i, len) };
        log.append(&b).unwrap();
    }
    assert!(log.segments().unwrap().len() > 6);
    (root, log)
}

fn opts(columns: &[Column], body: BodyLayout) -> BatchOptions {
    BatchOptions {
        columns: columns.to_vec(),
        body,
        ..BatchOptions::default()
    }
}

/// Every ordered subset of the four columns (65 of them, the empty one included).
fn column_orders() -> Vec<Vec<Column>> {
    let mut out = vec![Vec::new()];
    let mut i = 0;
    while i < out.len() {
        let base = out[i].clone();
        for c in Column::ALL {
            if !base.contains(&c) {
                let mut next = base.clone();
                next.push(c);
                out.push(next);
            }
        }
        i += 1;
    }
    out
}

/// The rows of `batches` as far as `columns` hold them (absent fields compared as `None`).
fn check_batches(batches: &[RecordBatch], want: &[Row], o: &BatchOptions) {
    let total: usize = batches.iter().map(RecordBatch::num_rows).sum();
    assert_eq!(total, want.len(), "{:?}", o.columns);
    let mut at = 0;
    for batch in batches {
        assert!(batch.num_rows() > 0, "an empty batch");
        assert_eq!(batch.schema(), o.schema());
        let names: Vec<&str> = o.columns.iter().map(|c| c.name()).collect();
        let schema = batch.schema();
        let got: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
        assert_eq!(got, names);
        for (i, c) in o.columns.iter().enumerate() {
            let col = batch.column(i);
            assert_eq!(col.null_count(), 0);
            for row in 0..batch.num_rows() {
                let w = &want[at + row];
                match c {
                    Column::Offset => {
                        assert_eq!(col.as_primitive::<Int64Type>().value(row), w.0 as i64)
                    }
                    Column::Segment => {
                        assert_eq!(col.as_primitive::<Int64Type>().value(row), w.3 as i64)
                    }
                    Column::Timestamp => {
                        let ts = col.as_primitive::<TimestampMillisecondType>();
                        assert_eq!(ts.value(row), w.1 as i64);
                    }
                    Column::Body => {
                        let b = match o.body {
                            BodyLayout::View => col.as_binary_view().value(row),
                            BodyLayout::Binary => col.as_binary::<i32>().value(row),
                        };
                        assert_eq!(b, &w.2[..], "body of the record at {}", w.0);
                    }
                }
            }
        }
        at += batch.num_rows();
    }
}

#[test]
fn every_column_order_and_layout_matches_scan() {
    let (_root, log) = filled();
    let want = rows_of_scan(&log, None, None);
    let orders = column_orders();
    assert_eq!(orders.len(), 65);
    for columns in &orders {
        for layout in [BodyLayout::View, BodyLayout::Binary] {
            let mut o = opts(columns, layout);
            o.max_records = 37; // several batches, not aligned with segments
            let batches: Vec<RecordBatch> = log
                .scan_batches(None, None, o.clone())
                .unwrap()
                .map(Result::unwrap)
                .collect();
            assert_eq!(batches.len(), want.len().div_ceil(37));
            check_batches(&batches, &want, &o);
        }
    }
}

#[test]
fn schema_types() {
    let o = opts(&Column::ALL, BodyLayout::View);
    let s = o.schema();
    let types: Vec<&DataType> = s.fields().iter().map(|f| f.data_type()).collect();
    let ts = DataType::Timestamp(TimeUnit::Millisecond, Some(Arc::from("UTC")));
    assert_eq!(
        types,
        [
            &DataType::Int64,
            &ts,
            &DataType::BinaryView,
            &DataType::Int64
        ]
    );
    assert!(s.fields().iter().all(|f| !f.is_nullable()));
    let binary = opts(&[Column::Body], BodyLayout::Binary).schema();
    assert_eq!(binary.field(0).data_type(), &DataType::Binary);
    let default = BatchOptions::default();
    assert_eq!(
        default.columns,
        [Column::Offset, Column::Timestamp, Column::Body]
    );
    assert_eq!(
        (default.body, default.max_records, default.max_bytes),
        (BodyLayout::View, 65_536, 64 << 20)
    );
}

#[test]
fn batches_split_at_max_records_and_max_bytes_and_position_advances_exactly() {
    let (_root, log) = filled();
    let want = rows_of_scan(&log, None, None);
    for (max_records, max_bytes) in [(1, 1 << 20), (7, 1 << 20), (1000, 1), (1000, 750), (5, 800)] {
        for layout in [BodyLayout::View, BodyLayout::Binary] {
            let mut o = opts(&Column::ALL, layout);
            o.max_records = max_records;
            o.max_bytes = max_bytes;
            let mut reader = log.scan_batches(None, None, o.clone()).unwrap();
            let mut at = 0;
            assert_eq!(reader.next_offset(), want[0].0);
            while let Some(batch) = reader.next_batch().unwrap() {
                let n = batch.num_rows();
                assert!((1..=max_records).contains(&n));
                let bytes: usize = want[at..at + n].iter().map(|w| w.2.len()).sum();
                assert!(n == 1 || bytes <= max_bytes, "{n} records, {bytes} bytes");
                // Greedy: the next record would not have fitted.
                if let Some(next) = want.get(at + n) {
                    assert!(n == max_records || bytes + next.2.len() > max_bytes);
                    assert_eq!(reader.next_offset(), next.0);
                }
                check_batches(&[batch], &want[at..at + n], &o);
                at += n;
            }
            assert_eq!(at, want.len());
            assert_eq!(reader.next_offset(), log.max_offset().unwrap());
            assert_eq!(reader.next_offset(), reader.end());
            assert!(reader.next_batch().unwrap().is_none());
        }
    }
}

#[test]
fn ranges_match_scan() {
    let (_root, log) = filled();
    let all = rows_of_scan(&log, None, None);
    let (a, b) = (all[17].0, all[150].0);
    for (start, end) in [
        (Some(a), None),
        (None, Some(b)),
        (Some(a), Some(b)),
        (Some(a), Some(a)),
        (Some(b), Some(a)),
        (Some(a), Some(a + 1)),
    ] {
        let want = rows_of_scan(&log, start, end);
        let o = opts(&Column::ALL, BodyLayout::View);
        let reader = log.scan_batches(start, end, o.clone()).unwrap();
        let batches: Vec<RecordBatch> = reader.map(Result::unwrap).collect();
        check_batches(&batches, &want, &o);
    }
    // Not a record start: refused as by scan.
    let err = log
        .scan_batches(Some(a + 1), None, BatchOptions::default())
        .unwrap_err();
    assert!(matches!(err, Error::InvalidOffset { .. }), "{err:?}");
}

#[test]
fn view_bodies_point_into_the_segment_maps() {
    let (_root, log) = filled();
    let o = opts(&[Column::Offset, Column::Body], BodyLayout::View);
    let mut checked = 0;
    for batch in log.scan_batches(None, None, o).unwrap() {
        let batch = batch.unwrap();
        let offsets = batch.column(0).as_primitive::<Int64Type>();
        let views = batch.column(1).as_binary_view();
        for row in 0..batch.num_rows() {
            let rec = log.read(offsets.value(row) as u64).unwrap();
            let (map, range) = rec.mapping();
            let got = views.value(row);
            if got.len() <= 12 {
                continue; // inline in the view itself, as Arrow lays out short values
            }
            assert_eq!(got.as_ptr(), map.bytes(range.start, range.end).as_ptr());
            checked += 1;
        }
        for buf in views.data_buffers().iter() {
            let maps = log
                .segments()
                .unwrap()
                .into_iter()
                .map(|s| log.read(s.start_offset).unwrap());
            let inside = maps.into_iter().any(|r| {
                let (m, _) = r.mapping();
                let base = m.as_ptr() as usize;
                let p = buf.as_ptr() as usize;
                p >= base && p + buf.len() <= base + m.len()
            });
            assert!(inside, "a data buffer outside every segment map");
        }
    }
    assert!(checked > 50);
}

#[test]
fn binary_bodies_are_copies() {
    let (_root, log) = filled();
    let o = opts(&[Column::Offset, Column::Body], BodyLayout::Binary);
    let batch = log.scan_batches(None, None, o).unwrap().next().unwrap();
    let batch = batch.unwrap();
    let offsets = batch.column(0).as_primitive::<Int64Type>();
    let bodies = batch.column(1).as_binary::<i32>();
    let row = (0..batch.num_rows())
        .find(|&r| bodies.value(r).len() > 12)
        .unwrap();
    let rec = log.read(offsets.value(row) as u64).unwrap();
    assert_eq!(bodies.value(row), rec.body());
    assert_ne!(bodies.value(row).as_ptr(), rec.body().as_ptr());
}

#[test]
fn a_batch_outlives_close_and_the_deletion_of_its_segment() {
    let (_root, log) = filled();
    let want = rows_of_scan(&log, None, None);
    let o = opts(&Column::ALL, BodyLayout::View);
    let batches: Vec<RecordBatch> = log
        .scan_batches(None, None, o.clone())
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let first = log.segments().unwrap()[0].path.clone();
    let cut = log.segments().unwrap()[5].start_offset;
    assert_eq!(log.truncate_before(cut).unwrap(), cut);
    assert!(!first.exists(), "truncate_before left {first:?}");
    log.close().unwrap();
    check_batches(&batches, &want, &o);
}

#[test]
fn a_closed_log_ends_the_reader_with_closed() {
    let (_root, log) = filled();
    let mut o = opts(&Column::ALL, BodyLayout::View);
    o.max_records = 10;
    let mut reader = log.scan_batches(None, None, o.clone()).unwrap();
    assert_eq!(reader.next_batch().unwrap().unwrap().num_rows(), 10);
    log.close().unwrap();
    assert!(matches!(reader.next_batch(), Err(Error::Closed)));
    assert!(matches!(
        log.scan_batches(None, None, o),
        Err(Error::Closed)
    ));
}

#[test]
fn a_corrupt_record_ends_the_reader_after_the_records_before_it() {
    let (root, d) = dirs(1);
    let log = CommitLog::open(&d, quiet()).unwrap();
    let offsets: Vec<u64> = (0..40)
        .map(|i| log.append(&body(i, 300)).unwrap())
        .collect();
    let victim = offsets[25];
    let (path, pos) = segment_of(&log, victim);
    log.close().unwrap();
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[pos as usize + HEADER_LEN + 5] ^= 0xFF;
    std::fs::write(&path, bytes).unwrap();

    let log = CommitLog::open(&d, quiet().read_only(true)).unwrap();
    let mut o = opts(&Column::ALL, BodyLayout::View);
    o.max_records = 10;
    for threads in [0, 1, 2, 3] {
        let reader = log.scan_batches(None, None, o.clone()).unwrap();
        let mut reader = Either::new(reader, threads);
        corrupt_case(&mut reader, &offsets, victim);
    }
    drop(root);
}

/// A plain reader or the same on worker threads.
enum Either {
    Plain(Box<BatchReader>),
    Ahead(ParallelReader),
}

impl Either {
    /// `threads` 0: the plain reader.
    fn new(reader: BatchReader, threads: usize) -> Either {
        match threads {
            0 => Either::Plain(Box::new(reader)),
            n => Either::Ahead(reader.parallel(n)),
        }
    }

    fn next_batch(&mut self) -> rmqlog::Result<Option<RecordBatch>> {
        match self {
            Either::Plain(r) => r.next_batch(),
            Either::Ahead(r) => r.next_batch(),
        }
    }

    fn next_offset(&self) -> u64 {
        match self {
            Either::Plain(r) => r.next_offset(),
            Either::Ahead(r) => r.next_offset(),
        }
    }
}

fn corrupt_case(reader: &mut Either, offsets: &[u64], victim: u64) {
    let mut seen = Vec::new();
    let err = loop {
        match reader.next_batch() {
            Ok(Some(b)) => {
                let col = b.column(0).as_primitive::<Int64Type>();
                seen.extend(col.values().iter().map(|&v| v as u64));
            }
            Ok(None) => panic!("the corrupt record was not reported"),
            Err(e) => break e,
        }
    };
    assert_eq!(seen, offsets[..25]);
    assert!(matches!(err, Error::Corruption { .. }), "{err:?}");
    assert!(err.to_string().contains(&victim.to_string()), "{err}");
    assert_eq!(
        reader.next_offset(),
        victim,
        "the position stays at the damaged record"
    );
    assert!(reader.next_batch().unwrap().is_none(), "the reader goes on");
}

#[test]
fn workers_give_the_batches_and_positions_of_the_plain_reader() {
    let (_root, log) = filled();
    let offsets: Vec<u64> = log
        .scan(None, None)
        .unwrap()
        .map(|r| r.unwrap().offset())
        .collect();
    let ranges = [
        (None, None),
        (Some(offsets[3]), Some(offsets[150] + 1)),
        (Some(offsets[199]), None),
    ];
    let cases = [(1, 1 << 20), (7, 750), (1000, 1 << 20), (30, 1)];
    for ((max_records, max_bytes), threads, (start, end)) in itertools_product(&cases, &ranges) {
        for layout in [BodyLayout::View, BodyLayout::Binary] {
            let mut o = opts(&Column::ALL, layout);
            o.max_records = max_records;
            o.max_bytes = max_bytes;
            let mut plain = log.scan_batches(start, end, o.clone()).unwrap();
            let mut ahead = log
                .scan_batches(start, end, o.clone())
                .unwrap()
                .parallel(threads);
            assert_eq!(ahead.next_offset(), plain.next_offset());
            loop {
                let (a, b) = (plain.next_batch().unwrap(), ahead.next_batch().unwrap());
                assert_eq!(
                    ahead.next_offset(),
                    plain.next_offset(),
                    "threads {threads}, {max_records}/{max_bytes}, {start:?}..{end:?}, rows {:?}",
                    a.as_ref().map(|b| b.num_rows())
                );
                match (a, b) {
                    (None, None) => break,
                    (Some(a), Some(b)) => assert_eq!(a, b),
                    (a, b) => panic!(
                        "plain {:?} rows, ahead {:?}",
                        a.map(|x| x.num_rows()),
                        b.map(|x| x.num_rows())
                    ),
                }
            }
            assert!(ahead.next_offset() >= ahead.end());
            assert!(ahead.next_batch().unwrap().is_none());
        }
    }
}

/// A copied body column reserves the last batch's size: a small batch after a big one keeps no
/// more than twice its bodies (for any `threads`).
#[test]
fn a_small_copied_batch_after_a_big_one_holds_no_big_buffer() {
    let (_root, d) = dirs(1);
    let log = CommitLog::open(&d, quiet().segment_size(1 << 20)).unwrap();
    for _ in 0..4 {
        log.append(&vec![7u8; 300 << 10]).unwrap();
        log.append(b"x").unwrap();
    }
    let mut o = opts(&[Column::Body], BodyLayout::Binary);
    o.max_records = 1;
    for threads in [0, 1, 2] {
        let mut reader = Either::new(log.scan_batches(None, None, o.clone()).unwrap(), threads);
        let mut small = 0;
        while let Some(b) = reader.next_batch().unwrap() {
            let body = b.column(0).as_binary::<i32>();
            let (len, cap) = (body.values().len(), body.values().capacity());
            assert!(
                cap <= 2 * len + 4096,
                "threads {threads}: {cap} bytes kept for {len}"
            );
            small += usize::from(len == 1);
        }
        assert_eq!(small, 4);
    }
}

/// Each of `threads` 1..=3 with each case and range.
fn itertools_product<A: Copy, B: Copy>(a: &[A], b: &[B]) -> Vec<(A, usize, B)> {
    let mut out = Vec::new();
    for &x in a {
        for threads in 1..=3 {
            for &y in b {
                out.push((x, threads, y));
            }
        }
    }
    out
}

#[test]
fn workers_end_with_closed_even_when_they_built_the_next_batches() {
    for threads in [1, 2, 3] {
        let (_root, log) = filled();
        let mut o = opts(&Column::ALL, BodyLayout::View);
        o.max_records = 10;
        let mut ahead = log
            .scan_batches(None, None, o.clone())
            .unwrap()
            .parallel(threads);
        assert_eq!(ahead.next_batch().unwrap().unwrap().num_rows(), 10);
        // The workers build the next batches and wait for them to be taken: close meanwhile.
        std::thread::sleep(std::time::Duration::from_millis(50));
        log.close().unwrap();
        assert!(matches!(ahead.next_batch(), Err(Error::Closed)));
        assert!(ahead.next_batch().unwrap().is_none());
    }
}

#[test]
fn bad_options_are_refused_naming_what_is_accepted() {
    let (_root, log) = filled();
    let mut dup = opts(
        &[Column::Body, Column::Offset, Column::Body],
        BodyLayout::View,
    );
    let err = log.scan_batches(None, None, dup.clone()).unwrap_err();
    assert!(err.to_string().contains("\"body\" is named twice"), "{err}");
    dup.columns = vec![Column::Body];
    for (r, b) in [(0, 1), (1, 0)] {
        let o = BatchOptions {
            max_records: r,
            max_bytes: b,
            ..dup.clone()
        };
        let err = log.scan_batches(None, None, o).unwrap_err();
        assert!(err.to_string().contains("at least 1"), "{err}");
    }
    let err = Column::parse("bodies").unwrap_err().to_string();
    assert!(
        err.contains("\"bodies\"") && err.contains("\"segment\""),
        "{err}"
    );
    let err = BodyLayout::parse("blob").unwrap_err().to_string();
    assert!(
        err.contains("\"view\"") && err.contains("\"binary\""),
        "{err}"
    );
}

#[test]
fn no_columns_gives_row_counts() {
    let (_root, log) = filled();
    let mut o = opts(&[], BodyLayout::View);
    o.max_records = 64;
    let reader = log.scan_batches(None, None, o).unwrap();
    assert_eq!(reader.schema().fields().len(), 0);
    let counts: Vec<usize> = reader.map(|b| b.unwrap().num_rows()).collect();
    assert_eq!(counts, [64, 64, 64, 8]);
}

#[test]
fn append_array_takes_every_binary_and_string_type() {
    let (_root, d) = dirs(1);
    let log = CommitLog::open(&d, quiet()).unwrap();
    let words = ["a", "", "a body longer than twelve bytes", "\u{e9}t\u{e9}"];
    let owned: Vec<Vec<u8>> = words.iter().map(|w| w.as_bytes().to_vec()).collect();
    let mut view = BinaryViewBuilder::new();
    owned.iter().for_each(|b| view.append_value(b));
    let mut fixed = FixedSizeBinaryBuilder::new(3);
    for w in ["abc", "def"] {
        fixed.append_value(w.as_bytes()).unwrap();
    }
    let arrays: Vec<(ArrayRef, Vec<&[u8]>)> = vec![
        (
            Arc::new(BinaryArray::from_iter_values(&owned)),
            bytes(&words),
        ),
        (
            Arc::new(LargeBinaryArray::from_iter_values(&owned)),
            bytes(&words),
        ),
        (Arc::new(view.finish()), bytes(&words)),
        (
            Arc::new(StringArray::from_iter_values(words)),
            bytes(&words),
        ),
        (
            Arc::new(LargeStringArray::from_iter_values(words)),
            bytes(&words),
        ),
        (
            Arc::new(StringViewArray::from_iter_values(words)),
            bytes(&words),
        ),
        (Arc::new(fixed.finish()), vec![b"abc", b"def"]),
        // A slice: its offset into the buffers is honoured.
        (
            Arc::new(BinaryArray::from_iter_values(&owned).slice(1, 2)),
            bytes(&words[1..3]),
        ),
        (
            Arc::new(StringViewArray::from_iter_values(words).slice(2, 2)),
            bytes(&words[2..]),
        ),
    ];
    for (array, want) in arrays {
        let before = log.max_offset().unwrap();
        let offsets = log.append_array(array.as_ref()).unwrap();
        assert_eq!(offsets.len(), want.len(), "{}", array.data_type());
        assert_eq!(offsets.first().copied(), Some(before));
        for (o, w) in offsets.iter().zip(want) {
            assert_eq!(log.read(*o).unwrap().body(), w, "{}", array.data_type());
        }
    }
}

fn bytes<'a>(words: &[&'a str]) -> Vec<&'a [u8]> {
    words.iter().map(|w| w.as_bytes()).collect()
}

#[test]
fn a_refused_append_array_writes_nothing() {
    let (_root, d) = dirs(1);
    let log = CommitLog::open(&d, quiet().max_message_size(1000)).unwrap();
    log.append(b"before").unwrap();
    let end = log.max_offset().unwrap();
    let with_null = BinaryArray::from(vec![Some(&b"x"[..]), None, Some(b"y"), None]);
    let err = log.append_array(&with_null).unwrap_err().to_string();
    assert!(
        err.contains("2 null element(s) (the first at index 1)"),
        "{err}"
    );
    let err = log
        .append_array(&Int32Array::from(vec![1, 2]))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("Int32") && err.contains("binary_view"),
        "{err}"
    );
    let big = vec![0u8; 1001];
    let too_large = BinaryArray::from_iter_values([&b"ok"[..], &big, b"ok"]);
    let err = log.append_array(&too_large).unwrap_err();
    assert!(matches!(err, Error::MessageTooLarge { .. }), "{err:?}");
    assert_eq!(log.max_offset().unwrap(), end);
    let got: Vec<Vec<u8>> = log
        .scan(None, None)
        .unwrap()
        .map(|r| r.unwrap().to_vec())
        .collect();
    assert_eq!(got, [b"before".to_vec()]);
}

/// The Rust example of docs/arrow.md, as written there.
#[test]
fn the_docs_example() -> rmqlog::Result<()> {
    let (_root, d) = dirs(1);
    let log = CommitLog::open(&d, quiet())?;
    log.append_batch(&[&b"first"[..], b"second"])?;
    let opts = BatchOptions {
        columns: vec![Column::Offset, Column::Body],
        body: BodyLayout::View,
        ..BatchOptions::default()
    };
    let mut reader = log.scan_batches(None, None, opts)?; // also an arrow RecordBatchReader
    while let Some(batch) = reader.next_batch()? {
        // rmqlog::Error: Corruption, Closed, ...
        println!(
            "{} records, the next at {}",
            batch.num_rows(),
            reader.next_offset()
        );
        assert_eq!(batch.num_rows(), 2);
    }
    let offsets = log.append_array(&BinaryArray::from_iter_values([b"a", b"b"]))?;
    assert_eq!(offsets.len(), 2);
    Ok(())
}
