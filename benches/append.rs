//! Append throughput by record size, against a raw memcpy into a pre-faulted map of the same
//! size (the page-cache limit).

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use rmqlog::{CommitLog, FlushMode, Options, HEADER_LEN};

const RECORDS: usize = 10_000;

fn append(c: &mut Criterion) {
    for size in [100usize, 1024, 64 * 1024] {
        let body = vec![0x5au8; size];
        let mut g = c.benchmark_group(format!("append_{size}"));
        g.throughput(Throughput::Bytes(((size + HEADER_LEN) * RECORDS) as u64));
        g.sample_size(10);
        g.bench_function("rmqlog_none", |b| {
            b.iter_batched(
                || {
                    let dir = tempfile::tempdir().expect("tempdir");
                    let opts = Options::default()
                        .segment_size(1 << 30)
                        .flush(FlushMode::None);
                    let log = CommitLog::open(&[dir.path()], opts).expect("open");
                    (dir, log)
                },
                |(dir, log)| {
                    for _ in 0..RECORDS {
                        black_box(log.append(&body).expect("append"));
                    }
                    (dir, log)
                },
                BatchSize::PerIteration,
            )
        });
        g.bench_function("memcpy_prefaulted", |b| {
            let len = (size + HEADER_LEN) * RECORDS;
            let mut map = memmap2::MmapMut::map_anon(len).expect("map");
            map.fill(0); // fault every page in
            b.iter(|| {
                let mut at = 0;
                for _ in 0..RECORDS {
                    map[at + HEADER_LEN..at + HEADER_LEN + size].copy_from_slice(&body);
                    at += HEADER_LEN + size;
                }
                black_box(&map);
            })
        });
        g.finish();
    }
}

criterion_group!(benches, append);
criterion_main!(benches);
