//! Layer 3: random and sequential reads of 100 B records (a log of 100,000 records, all in the
//! page cache).
//!
//! `read_random_100`: 10,000 reads at random record offsets per iteration (the same record
//! indices for every contender):
//! - `rmqlog_read`: `CommitLog::read` (header and body CRC checked; returns a guard over the map);
//! - `memcpy_prefaulted`: copying the same 100 B bodies out of a pre-faulted anonymous map holding
//!   the same records (the page-cache limit);
//! - `pread`: one `pread` of header + body per record from a plain file holding the same bytes
//!   (the syscall read path);
//! - `commitlog_read`: the `commitlog` crate 0.2, `read(offset, ReadLimit = one message)`.
//!
//! `read_sequential_100`: every record in order: `rmqlog_scan` (`CommitLog::scan`), memcpy of
//! every body out of the pre-faulted map, `pread_64k` of the plain file in 64 KiB reads, and
//! `commitlog_read_64k` (`read` with a 64 KiB limit, iterating the messages).

mod common;

use std::hint::black_box;
use std::os::unix::fs::FileExt;

use common::*;
use criterion::{criterion_group, Criterion, Throughput};
use rmqlog::HEADER_LEN;

const BODY: usize = 100;

fn reads(c: &mut Criterion) {
    let bench = bench_mode();
    let n = if bench { 100_000 } else { 2_000 };
    let k = if bench { 10_000 } else { 100 };
    let rec = HEADER_LEN + BODY;
    let b = body(BODY);

    let dir = tempdir();
    let (log, offsets) = build_log(&dir.path().join("rmqlog"), 1 << 30, n, BODY);
    let cdir = tempdir();
    let mut cl = cl_open(cdir.path(), None);
    cl_fill(&mut cl, &b, n);
    cl.flush().expect("flush");
    let mut map = prefaulted(n * rec);
    for i in 0..n {
        encode_record(&mut map[i * rec..(i + 1) * rec], &b, (i * rec) as u64, 0);
    }
    let plain = preallocated_file(dir.path(), "plain", (n * rec) as u64);
    plain.write_all_at(&map[..], 0).expect("write");
    let idx = random_indices(n, k, 11);

    let mut g = c.benchmark_group("read_random_100");
    g.throughput(Throughput::Elements(k as u64));
    g.bench_function("rmqlog_read", |bch| {
        bch.iter(|| {
            for &i in &idx {
                black_box(log.read(offsets[i]).expect("read").len());
            }
        })
    });
    let mut out = vec![0u8; rec];
    g.bench_function("memcpy_prefaulted", |bch| {
        bch.iter(|| {
            for &i in &idx {
                let at = i * rec + HEADER_LEN;
                out[..BODY].copy_from_slice(&map[at..at + BODY]);
                black_box(&out);
            }
        })
    });
    g.bench_function("pread", |bch| {
        bch.iter(|| {
            for &i in &idx {
                plain
                    .read_exact_at(&mut out, (i * rec) as u64)
                    .expect("pread");
                black_box(&out);
            }
        })
    });
    g.bench_function("commitlog_read", |bch| {
        bch.iter(|| {
            for &i in &idx {
                black_box(cl_read_one(&cl, i as u64, BODY));
            }
        })
    });
    g.finish();

    let mut g = c.benchmark_group("read_sequential_100");
    g.throughput(Throughput::Elements(n as u64));
    g.sample_size(20);
    g.bench_function("rmqlog_scan", |bch| {
        bch.iter(|| {
            let mut total = 0usize;
            for r in log.scan(None, None).expect("scan") {
                total += r.expect("record").len();
            }
            assert_eq!(total, n * BODY);
        })
    });
    g.bench_function("memcpy_prefaulted", |bch| {
        bch.iter(|| {
            for i in 0..n {
                let at = i * rec + HEADER_LEN;
                out[..BODY].copy_from_slice(&map[at..at + BODY]);
                black_box(&out);
            }
        })
    });
    let mut chunk = vec![0u8; 64 * 1024];
    g.bench_function("pread_64k", |bch| {
        bch.iter(|| {
            let len = (n * rec) as u64;
            let mut at = 0u64;
            while at < len {
                let got = plain.read_at(&mut chunk, at).expect("pread");
                black_box(&chunk[..got]);
                at += got as u64;
            }
        })
    });
    g.bench_function("commitlog_read_64k", |bch| {
        bch.iter(|| assert_eq!(cl_scan_64k(&cl, n), n * BODY))
    });
    g.finish();
    drop(log);
}

criterion_group!(benches, reads);

fn main() {
    benches();
    criterion::Criterion::default()
        .configure_from_args()
        .final_summary();
}
