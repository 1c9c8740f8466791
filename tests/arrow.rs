#![allow(clippy::unwrap_used)] // tests: a failed unwrap is the failure report
//! The Rust Arrow API: `scan_batches` against `scan`, batch splitting, zero copy, batch lifetime,
//! errors, and `append_array` of every accepted array type, all or nothing.

mod common;

use std::sync::Arc;

use arrow_array::builder::{BinaryViewBuilder, FixedSizeBinaryBuilder};
use arrow_array::cast::AsArray;
use arrow_array::types::{Int64Type, TimestampMillisecondType};
use arrow_array::{
    Array, ArrayRef, BinaryArray, Int32Array, LargeBinaryArray, LargeListArray, LargeStringArray,
    ListArray, RecordBatch, RecordBatchReader, StringArray, StringViewArray, StructArray,
};
use arrow_buffer::{NullBuffer, OffsetBuffer};
use arrow_schema::{DataType, Field, Fields, TimeUnit};
use common::{body, dirs, quiet, segment_of};
use rmqlog::arrow::{BatchOptions, BatchReader, BodyLayout, Column, ParallelReader};
use rmqlog::{CommitLog, Error, Message, HEADER_LEN};

/// One record as `scan` sees it.
#[derive(Debug, Clone)]
struct Row {
    offset: u64,
    ts: u64,
    body: Vec<u8>,
    segment: u64,
    key: Option<Vec<u8>>,
    headers: Vec<(String, Vec<u8>)>,
    /// The encoded key and headers' length (what they weigh against `max_bytes`).
    props_len: usize,
}

impl Row {
    /// What the record weighs against `max_bytes`, whatever the columns: its body, key and
    /// headers.
    fn weight(&self) -> usize {
        self.body.len() + self.props_len
    }
}

fn rows_of_scan(log: &CommitLog, start: Option<u64>, end: Option<u64>) -> Vec<Row> {
    log.scan(start, end)
        .unwrap()
        .map(|r| {
            let r = r.unwrap();
            let p = r.props().unwrap();
            Row {
                offset: r.offset(),
                ts: r.timestamp_ms(),
                body: r.to_vec(),
                segment: r.segment_start(),
                key: p.key.map(<[u8]>::to_vec),
                headers: p
                    .headers
                    .iter()
                    .map(|(n, v)| (n.to_string(), v.to_vec()))
                    .collect(),
                props_len: r.props_block().map_or(0, <[u8]>::len),
            }
        })
        .collect()
}

/// Bodies of varied sizes (inline views of <= 12 bytes, empty ones, and longer) over many 4 KiB
/// segments; some records with a key (empty ones too), some with headers (repeated names, empty
/// and non-UTF-8 values), some with both.
fn filled() -> (tempfile::TempDir, CommitLog) {
    let (root, d) = dirs(2);
    let log = CommitLog::open(&d, quiet()).unwrap();
    let headers: [(&str, &[u8]); 3] = [("t", b"\xff\x00v"), ("t", b""), ("\u{e9}", b"w")];
    for i in 0..200u64 {
        let len = [0, 3, 12, 13, 100, 700][(i % 6) as usize];
        let b = if len == 0 { Vec::new() } else { body(i, len) };
        let key = body(i + 1000, 8 + (i % 4) as usize);
        let mut m = Message::new(&b);
        match i % 5 {
            1 => m = m.key(b""),
            2 | 3 => m = m.key(&key),
            _ => {}
        }
        if i % 3 == 0 {
            m = m.headers(&headers[..(i % 4) as usize]);
        }
        log.append_message(&m).unwrap();
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

/// Every ordered subset of `columns` (65 for four, the empty one included).
fn orders_of(columns: &[Column]) -> Vec<Vec<Column>> {
    let mut out = vec![Vec::new()];
    let mut i = 0;
    while i < out.len() {
        let base = out[i].clone();
        for &c in columns {
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

/// Every ordered subset of the four columns of the record's place, and of four with the key and
/// headers (130 in all, the empty one twice).
fn column_orders() -> Vec<Vec<Column>> {
    let mut out = orders_of(&[
        Column::Offset,
        Column::Timestamp,
        Column::Body,
        Column::Segment,
    ]);
    out.extend(orders_of(&[
        Column::Offset,
        Column::Body,
        Column::Key,
        Column::Headers,
    ]));
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
            if *c != Column::Key {
                assert_eq!(col.null_count(), 0);
            }
            for row in 0..batch.num_rows() {
                let w = &want[at + row];
                match c {
                    Column::Offset => {
                        assert_eq!(col.as_primitive::<Int64Type>().value(row), w.offset as i64)
                    }
                    Column::Segment => {
                        assert_eq!(col.as_primitive::<Int64Type>().value(row), w.segment as i64)
                    }
                    Column::Timestamp => {
                        let ts = col.as_primitive::<TimestampMillisecondType>();
                        assert_eq!(ts.value(row), w.ts as i64);
                    }
                    Column::Body => {
                        let b = match o.body {
                            BodyLayout::View => col.as_binary_view().value(row),
                            BodyLayout::Binary => col.as_binary::<i32>().value(row),
                        };
                        assert_eq!(b, &w.body[..], "body of the record at {}", w.offset);
                    }
                    Column::Key => {
                        let keys = col.as_binary::<i32>();
                        let got = keys.is_valid(row).then(|| keys.value(row).to_vec());
                        assert_eq!(got, w.key, "key of the record at {}", w.offset);
                    }
                    Column::Headers => assert_eq!(
                        headers_at(col.as_ref(), row),
                        w.headers,
                        "headers of the record at {}",
                        w.offset
                    ),
                }
            }
        }
        at += batch.num_rows();
    }
}

/// The headers of `row` in a `headers` column.
fn headers_at(col: &dyn Array, row: usize) -> Vec<(String, Vec<u8>)> {
    let lists = col.as_list::<i32>();
    assert!(lists.is_valid(row), "a null list of headers");
    let items = lists.value(row);
    let items = items.as_struct();
    let (names, values) = (
        items.column(0).as_string::<i32>(),
        items.column(1).as_binary::<i32>(),
    );
    (0..items.len())
        .map(|i| (names.value(i).to_string(), values.value(i).to_vec()))
        .collect()
}

#[test]
fn every_column_order_and_layout_matches_scan() {
    let (_root, log) = filled();
    let want = rows_of_scan(&log, None, None);
    let orders = column_orders();
    assert_eq!(orders.len(), 130);
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
    let header = DataType::Struct(Fields::from(vec![
        Field::new("name", DataType::Utf8, false),
        Field::new("value", DataType::Binary, false),
    ]));
    let headers = DataType::List(Arc::new(Field::new("item", header, false)));
    assert_eq!(
        types,
        [
            &DataType::Int64,
            &ts,
            &DataType::BinaryView,
            &DataType::Int64,
            &DataType::Binary,
            &headers,
        ]
    );
    // Only the key is nullable (a record without one); headers are an empty list.
    let nullable: Vec<bool> = s.fields().iter().map(|f| f.is_nullable()).collect();
    assert_eq!(nullable, [false, false, false, false, true, false]);
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
            assert_eq!(reader.next_offset(), want[0].offset);
            while let Some(batch) = reader.next_batch().unwrap() {
                let n = batch.num_rows();
                assert!((1..=max_records).contains(&n));
                let bytes: usize = want[at..at + n].iter().map(|w| w.weight()).sum();
                assert!(n == 1 || bytes <= max_bytes, "{n} records, {bytes} bytes");
                // Greedy: the next record would not have fitted.
                if let Some(next) = want.get(at + n) {
                    assert!(n == max_records || bytes + next.weight() > max_bytes);
                    assert_eq!(reader.next_offset(), next.offset);
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
    let (a, b) = (all[17].offset, all[150].offset);
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

/// A record's headers as given (`None`: a null list).
type Given<'a> = Option<Vec<(&'a str, &'a [u8])>>;
/// A record as read back: body, key, headers.
type Read = (Vec<u8>, Option<Vec<u8>>, Vec<(String, Vec<u8>)>);

/// A struct array of `fields` (name, array).
fn table(fields: Vec<(&str, ArrayRef)>) -> StructArray {
    StructArray::try_from(fields).unwrap()
}

/// A `headers` field: each row's list of `(name, value)`, `None` for a null list; `large` gives
/// a large_list of string values instead of a list of binary ones.
fn headers_field(rows: &[Given<'_>], large: bool) -> ArrayRef {
    let mut names = Vec::new();
    let mut values: Vec<&[u8]> = Vec::new();
    let mut ends = vec![0usize];
    for r in rows {
        for (n, v) in r.iter().flatten() {
            names.push(*n);
            values.push(v);
        }
        ends.push(names.len());
    }
    let nulls = NullBuffer::from(rows.iter().map(Option::is_some).collect::<Vec<bool>>());
    let value: ArrayRef = match large {
        false => Arc::new(BinaryArray::from_iter_values(&values)),
        true => Arc::new(StringArray::from_iter_values(
            values.iter().map(|v| std::str::from_utf8(v).unwrap()),
        )),
    };
    let items = table(vec![
        ("name", Arc::new(StringArray::from_iter_values(&names))),
        ("value", value),
    ]);
    let item = Arc::new(Field::new("item", items.data_type().clone(), true));
    match large {
        false => {
            let offsets = OffsetBuffer::<i32>::from_lengths(ends.windows(2).map(|w| w[1] - w[0]));
            Arc::new(ListArray::new(item, offsets, Arc::new(items), Some(nulls)))
        }
        true => {
            let offsets = OffsetBuffer::<i64>::from_lengths(ends.windows(2).map(|w| w[1] - w[0]));
            Arc::new(LargeListArray::new(
                item,
                offsets,
                Arc::new(items),
                Some(nulls),
            ))
        }
    }
}

#[test]
fn append_array_takes_a_struct_of_bodies_keys_and_headers() {
    let (_root, d) = dirs(1);
    let log = CommitLog::open(&d, quiet().segment_size(1 << 20)).unwrap();
    let big = vec![0xA5u8; 100_000];
    let h: Vec<Given<'_>> = vec![
        Some(vec![("t", b"\xff\x00"), ("t", b""), ("big", &big)]),
        None,
        Some(vec![]),
        Some(vec![("\u{e9}", b"v")]),
    ];
    let keys: ArrayRef = Arc::new(BinaryArray::from(vec![
        Some(&b"k\xff"[..]),
        None,
        Some(b""),
        None,
    ]));
    let bodies: ArrayRef = Arc::new(StringArray::from_iter_values(["a", "", "c", "d"]));
    let want: Vec<Read> = vec![
        (
            b"a".to_vec(),
            Some(b"k\xff".to_vec()),
            vec![
                ("t".into(), b"\xff\x00".to_vec()),
                ("t".into(), Vec::new()),
                ("big".into(), big.clone()),
            ],
        ),
        (Vec::new(), None, vec![]),
        (b"c".to_vec(), Some(Vec::new()), vec![]),
        (b"d".to_vec(), None, vec![("\u{e9}".into(), b"v".to_vec())]),
    ];
    let read = |offsets: &[u64]| -> Vec<Read> {
        offsets
            .iter()
            .map(|&o| {
                let r = log.read(o).unwrap();
                let p = r.props().unwrap();
                let hs = p.headers.iter().map(|(n, v)| (n.to_string(), v.to_vec()));
                (r.to_vec(), p.key.map(<[u8]>::to_vec), hs.collect())
            })
            .collect()
    };
    // Fields in any order; a list of binary values, then a large_list of strings.
    let s = table(vec![
        ("headers", headers_field(&h, false)),
        ("key", Arc::clone(&keys)),
        ("body", Arc::clone(&bodies)),
    ]);
    assert_eq!(read(&log.append_array(&s).unwrap()), want);
    let mut text = h.clone();
    text[0] = Some(vec![("t", b"x")]);
    let s = table(vec![
        ("body", Arc::clone(&bodies)),
        ("headers", headers_field(&text, true)),
    ]);
    let got = read(&log.append_array(&s).unwrap());
    assert_eq!(got[0].2, [("t".to_string(), b"x".to_vec())]);
    assert!(got.iter().all(|r| r.1.is_none()));
    // A slice honours its offset into every child.
    let s = table(vec![
        ("body", Arc::clone(&bodies)),
        ("key", keys),
        ("headers", headers_field(&h, false)),
    ]);
    assert_eq!(read(&log.append_array(&s.slice(2, 2)).unwrap()), want[2..]);
    // Bodies alone: plain records.
    let s = table(vec![("body", bodies)]);
    let got = read(&log.append_array(&s).unwrap());
    assert!(got.iter().all(|r| r.1.is_none() && r.2.is_empty()));
}

#[test]
fn a_refused_struct_append_writes_nothing_and_names_the_fault() {
    let (_root, d) = dirs(1);
    let log = CommitLog::open(&d, quiet()).unwrap();
    log.append(b"before").unwrap();
    let end = log.max_offset().unwrap();
    let body = || -> ArrayRef { Arc::new(BinaryArray::from_iter_values([b"a", b"b"])) };
    let ints = || -> ArrayRef { Arc::new(Int32Array::from(vec![1, 2])) };
    let long_key = vec![0u8; rmqlog::MAX_KEY_LEN + 1];
    let cases: Vec<(StructArray, &str)> = vec![
        (
            table(vec![("body", body()), ("extra", ints()), ("more", ints())]),
            "field(s) [\"extra\", \"more\"]",
        ),
        (table(vec![("key", body())]), "no \"body\" field"),
        (
            table(vec![("body", ints())]),
            "field \"body\": an Arrow array of Int32",
        ),
        (
            table(vec![("body", body()), ("key", ints())]),
            "field \"key\" is Int32",
        ),
        (
            table(vec![("body", body()), ("headers", body())]),
            "field \"headers\" is Binary",
        ),
        (
            table(vec![
                ("body", body()),
                (
                    "key",
                    Arc::new(BinaryArray::from_iter_values([&b"k"[..], &long_key])),
                ),
            ]),
            "(row 1)",
        ),
        (
            table(vec![(
                "body",
                Arc::new(BinaryArray::from(vec![Some(&b"a"[..]), None])),
            )]),
            "field \"body\": the Arrow array has 1 null element(s) (the first at index 1)",
        ),
    ];
    for (s, words) in cases {
        let err = log.append_array(&s).unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
        assert!(err.to_string().contains(words), "{err} lacks {words}");
    }
    // A null header (not a null list), a null name or value.
    let items = table(vec![
        ("name", Arc::new(StringArray::from(vec![Some("n"), None]))),
        (
            "value",
            Arc::new(BinaryArray::from_iter_values([b"v", b"w"])),
        ),
    ]);
    let item = Arc::new(Field::new("item", items.data_type().clone(), true));
    let offsets = OffsetBuffer::<i32>::from_lengths([0, 2]);
    let lists: ArrayRef = Arc::new(ListArray::new(item, offsets, Arc::new(items), None));
    let s = table(vec![("body", body()), ("headers", lists)]);
    let err = log.append_array(&s).unwrap_err().to_string();
    assert!(err.contains("header 1 of row 1 has a null name"), "{err}");
    // A null row of the struct itself.
    let s = StructArray::try_new(
        Fields::from(vec![Field::new("body", DataType::Binary, false)]),
        vec![body()],
        Some(NullBuffer::from(vec![true, false])),
    )
    .unwrap();
    let err = log.append_array(&s).unwrap_err().to_string();
    assert!(err.contains("row 1 of the Arrow table is null"), "{err}");
    assert_eq!(log.max_offset().unwrap(), end);
}

#[test]
fn a_format_1_store_takes_a_struct_of_bodies_but_not_keys() {
    let (_root, d) = dirs(1);
    let log = CommitLog::open(&d, quiet().record_format(rmqlog::RecordFormat::V1)).unwrap();
    let body: ArrayRef = Arc::new(BinaryArray::from_iter_values([b"a"]));
    let keyed = table(vec![
        ("body", Arc::clone(&body)),
        ("key", Arc::clone(&body)),
    ]);
    assert!(matches!(
        log.append_array(&keyed),
        Err(Error::Unsupported(_))
    ));
    // No key in any row: plain records.
    let keys: ArrayRef = Arc::new(BinaryArray::from(vec![None::<&[u8]>]));
    let plain = table(vec![("body", body), ("key", keys)]);
    let offsets = log.append_array(&plain).unwrap();
    assert_eq!(log.read(offsets[0]).unwrap().body(), b"a");
}
