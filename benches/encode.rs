//! Layer 1: record encode + CRC, per body size (100 B, 1 KiB, 64 KiB), 1,000 records per
//! iteration into a pre-faulted map (no I/O, no page fault).
//!
//! rmqlog keeps its encoder crate-private, so `rmqlog_encode` is the writer's inner loop
//! re-implemented from `docs/format.md` (`common::encode_record`): copy the body, build the 32-byte
//! format-2 header, CRC-32C the header fields and body. References in the same group:
//! - `crc32c_only`: the CRC alone, over the body;
//! - `memcpy_prefaulted`: copying the same header + body bytes (the page-cache limit);
//! - `commitlog_messagebuf`: the `commitlog` crate's encoder on the same bodies (`MessageBuf::push`:
//!   20-byte header, CRC32C), into a reused buffer.

mod common;

use std::hint::black_box;

use common::*;
use criterion::{criterion_group, Criterion, Throughput};
use rmqlog::HEADER_LEN;

const RECORDS: usize = 1000;

fn encode(c: &mut Criterion) {
    for size in [100usize, 1024, 64 * 1024] {
        let b = body(size);
        let rec = HEADER_LEN + size;
        let mut g = c.benchmark_group(format!("encode_{size}"));
        g.throughput(Throughput::Elements(RECORDS as u64));
        let mut map = prefaulted(rec * RECORDS);
        g.bench_function("rmqlog_encode", |bch| {
            bch.iter(|| {
                for i in 0..RECORDS {
                    let at = i * rec;
                    encode_record(&mut map[at..at + rec], &b, at as u64, 1_700_000_000_000);
                }
                black_box(&map[..]);
            })
        });
        g.bench_function("crc32c_only", |bch| {
            bch.iter(|| {
                for _ in 0..RECORDS {
                    black_box(crc32c::crc32c(black_box(&b)));
                }
            })
        });
        let mut header = [0u8; HEADER_LEN];
        encode_record(&mut map[..rec], &b, 0, 0);
        header.copy_from_slice(&map[..HEADER_LEN]);
        g.bench_function("memcpy_prefaulted", |bch| {
            bch.iter(|| memcpy_records(&mut map, &header, &b, RECORDS))
        });
        let mut buf = commitlog::message::MessageBuf::default();
        g.bench_function("commitlog_messagebuf", |bch| {
            bch.iter(|| {
                buf.clear();
                for _ in 0..RECORDS {
                    buf.push(&b).expect("push");
                }
                black_box(&buf);
            })
        });
        g.finish();
    }
}

criterion_group!(benches, encode);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
}
