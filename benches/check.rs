//! The record check candidates of format 2 (docs/format.md, "Why CRC-32C"), per body size
//! (100 B, 1 KiB, 64 KiB): what checking one record costs, header (the 28 bytes a CRC covers)
//! and body, 1,000 records per iteration.
//! - `format1_crc32fast`: format 1's check, a crc32fast CRC of the header, another of the body;
//! - `crc32fast_joined`: one crc32fast CRC over the body, then the header;
//! - `crc32c_hw`: one CRC-32C over the body, then the header (the `crc32c` crate, the CPU's
//!   CRC32 instruction where it has one), format 2's check.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};

const RECORDS: usize = 1000;
/// The bytes of a 32-byte header a check covers (all but the CRC field).
const COVERED: usize = 28;

fn candidates(c: &mut Criterion) {
    for size in [100usize, 1024, 64 * 1024] {
        let body: Vec<u8> = (0..size).map(|i| (i * 31 + 7) as u8).collect();
        let header = [0x5au8; COVERED];
        let mut g = c.benchmark_group(format!("check_{size}"));
        g.throughput(Throughput::Elements(RECORDS as u64));
        let fresh = crc32fast::Hasher::new();
        g.bench_function("format1_crc32fast", |b| {
            b.iter(|| {
                let mut acc = 0u32;
                for _ in 0..RECORDS {
                    let mut h = fresh.clone();
                    h.update(black_box(&header));
                    let mut c = fresh.clone();
                    c.update(black_box(&body));
                    acc ^= h.finalize() ^ c.finalize();
                }
                acc
            })
        });
        g.bench_function("crc32fast_joined", |b| {
            b.iter(|| {
                let mut acc = 0u32;
                for _ in 0..RECORDS {
                    let mut c = fresh.clone();
                    c.update(black_box(&body));
                    c.update(black_box(&header));
                    acc ^= c.finalize();
                }
                acc
            })
        });
        g.bench_function("crc32c_hw", |b| {
            b.iter(|| {
                let mut acc = 0u32;
                for _ in 0..RECORDS {
                    let c = crc32c::crc32c(black_box(&body));
                    acc ^= crc32c::crc32c_append(c, black_box(&header));
                }
                acc
            })
        });
        let mut joined = vec![0x5au8; COVERED];
        joined.extend_from_slice(&body);
        g.bench_function("crc32c_hw_one_call", |b| {
            b.iter(|| {
                let mut acc = 0u32;
                for _ in 0..RECORDS {
                    acc ^= crc32c::crc32c(black_box(&joined));
                }
                acc
            })
        });
        g.bench_function("crc_fast_crc32c", |b| {
            b.iter(|| {
                let mut acc = 0u32;
                for _ in 0..RECORDS {
                    acc ^= crc_fast::crc32_iscsi(black_box(&joined));
                }
                acc
            })
        });
        g.finish();
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(std::time::Duration::from_millis(300))
        .measurement_time(std::time::Duration::from_secs(1));
    targets = candidates
}
criterion_main!(benches);
