//! Layer 2: append of 100 B, 1 KiB and 64 KiB records, with `FlushMode::None` and `Sync`.
//!
//! Each iteration appends into a fresh log (segment_size 1 GiB, the broker preset's, preallocated
//! by `posix_fallocate`); opening it, its first append (which creates the first segment) and closing
//! it are outside the clock. The segment's pages are not faulted in: first-touch page faults are
//! part of what is measured (see docs/benchmarks.md). References in the same group,
//! on the same records:
//! - `memcpy_prefaulted`: the same header + body bytes copied into a pre-faulted anonymous map of
//!   the same total size (the page-cache limit);
//! - `pwrite` (flush none) / `pwrite_fdatasync` (flush sync): the same record bytes written with
//!   one `pwrite` each into a preallocated file, plus one `fdatasync` each in sync mode (the disk
//!   limit of sync mode);
//! - `commitlog`: the `commitlog` crate 0.2 (`append_msg`, default options); in the sync groups
//!   followed by its `flush()`, which syncs only its index (`File::flush` is a no-op), so it is
//!   not durable and not a peer of `Sync`.

mod common;

use std::hint::black_box;

use common::*;
use criterion::{criterion_group, BatchSize, Criterion, Throughput};
use rmqlog::{FlushMode, HEADER_LEN};

const SEGMENT: u64 = 1 << 30;

fn records(size: usize, flush: FlushMode, bench: bool) -> usize {
    let n = match (flush, size) {
        (FlushMode::Sync, _) => 50,
        (_, s) if s >= 64 * 1024 => 1000,
        _ => 10_000,
    };
    if bench {
        n
    } else {
        n.min(10)
    }
}

fn append(c: &mut Criterion) {
    let bench = bench_mode();
    for size in [100usize, 1024, 64 * 1024] {
        for (mode, flush) in [("none", FlushMode::None), ("sync", FlushMode::Sync)] {
            let n = records(size, flush, bench);
            let b = body(size);
            let mut rec = vec![0u8; HEADER_LEN + size];
            encode_record(&mut rec, &b, 0, 0);
            let mut header = [0u8; HEADER_LEN];
            header.copy_from_slice(&rec[..HEADER_LEN]);

            let mut g = c.benchmark_group(format!("append_{size}_{mode}"));
            g.throughput(Throughput::Elements(n as u64));
            g.sample_size(10);
            g.bench_function("rmqlog", |bch| {
                bch.iter_batched(
                    || {
                        let dir = tempdir();
                        let log = open_log(dir.path(), SEGMENT, flush);
                        // The first append creates the first segment (fallocate + fsyncs):
                        // done here, so the clock sees steady-state appends only.
                        log.append(&b).expect("first append");
                        (dir, log)
                    },
                    |(dir, log)| {
                        for _ in 0..n {
                            black_box(log.append(&b).expect("append"));
                        }
                        (dir, log)
                    },
                    BatchSize::PerIteration,
                )
            });
            let mut map = prefaulted(n * rec.len());
            g.bench_function("memcpy_prefaulted", |bch| {
                bch.iter(|| memcpy_records(&mut map, &header, &b, n))
            });
            let sync = flush == FlushMode::Sync;
            g.bench_function(if sync { "pwrite_fdatasync" } else { "pwrite" }, |bch| {
                bch.iter_batched(
                    || {
                        let dir = tempdir();
                        let len = (n * rec.len()) as u64;
                        // Synced writes go to a zero-filled file, as a WAL writer prepares one.
                        let f = if sync {
                            zero_filled_file(dir.path(), "ref", len)
                        } else {
                            preallocated_file(dir.path(), "ref", len)
                        };
                        (dir, f)
                    },
                    |(dir, f)| {
                        pwrite_records(&f, &rec, n, sync);
                        (dir, f)
                    },
                    BatchSize::PerIteration,
                )
            });
            g.bench_function(
                if sync {
                    "commitlog_flush_not_durable"
                } else {
                    "commitlog"
                },
                |bch| {
                    bch.iter_batched(
                        || {
                            let dir = tempdir();
                            let log = cl_open(dir.path(), None);
                            (dir, log)
                        },
                        |(dir, mut log)| {
                            for _ in 0..n {
                                black_box(log.append_msg(&b).expect("append"));
                                if sync {
                                    log.flush().expect("flush");
                                }
                            }
                            (dir, log)
                        },
                        BatchSize::PerIteration,
                    )
                },
            );
            g.finish();
        }
    }
}

criterion_group!(benches, append);

fn main() {
    benches();
    criterion::Criterion::default()
        .configure_from_args()
        .final_summary();
}
