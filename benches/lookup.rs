//! Layer 4: offset lookup at 10 and at 10,000 segments: 64 KiB segments full of 100 B records,
//! 100,000 reads at random record offsets per iteration (after one untimed pass).
//!
//! References in the same group, on the same record counts:
//! - `memcpy_prefaulted_{10,10000}`: the same random 100 B copies out of one pre-faulted anonymous
//!   map of the same total size (640 KiB or 640 MiB): what the growth of the data alone costs
//!   (caches, TLB), without any segment lookup;
//! - `commitlog_{10,N}`: the `commitlog` crate 0.2 with 64 KiB segments. It keeps two open
//!   descriptors per segment (log and index), so N is capped below the open-file limit (5,000
//!   under a limit of 20,000; logged).

mod common;

use std::hint::black_box;

use common::*;
use criterion::{criterion_group, Criterion, Throughput};
use rmqlog::HEADER_LEN;

const SEG: u64 = 64 * 1024;
const BODY: usize = 100;

fn lookup(c: &mut Criterion) {
    let bench = bench_mode();
    let reads = if bench { 100_000 } else { 1_000 };
    let counts = if bench { [10, 10_000] } else { [10, 100] };
    let per_seg = records_per_segment(SEG, BODY);
    let rec = HEADER_LEN + BODY;
    let b = body(BODY);
    let fd_limit = raise_fd_limit() as usize;

    let mut g = c.benchmark_group("lookup");
    g.throughput(Throughput::Elements(reads as u64));
    g.sample_size(10);
    for segments in counts {
        let dir = tempdir();
        let (log, offsets) = build_segments(dir.path(), SEG, segments, BODY);
        let idx = random_indices(offsets.len(), reads, 3);
        // Offsets computed from the record index: no table of millions of offsets to miss in.
        let pass = || {
            for &i in &idx {
                let offset = full_segment_offset(i, SEG, BODY);
                black_box(log.read(offset).expect("read").len());
            }
        };
        pass();
        g.bench_function(format!("rmqlog_{segments}"), |bch| bch.iter(pass));
        drop(log);
        drop(dir);

        let n = segments * per_seg;
        let map = prefaulted(n * rec);
        let mut out = [0u8; BODY];
        g.bench_function(format!("memcpy_prefaulted_{segments}"), |bch| {
            bch.iter(|| {
                for &i in &idx {
                    let at = i * rec + HEADER_LEN;
                    out.copy_from_slice(&map[at..at + BODY]);
                    black_box(&out);
                }
            })
        });
        drop(map);

        // Two descriptors per commitlog segment, and some slack for everything else.
        let cl_segments = segments.min(fd_limit.saturating_sub(1000) / 2).min(5_000);
        if cl_segments < segments {
            eprintln!(
                "lookup: commitlog at {cl_segments} segments instead of {segments} (it keeps 2 \
                 descriptors open per segment; open-file limit {fd_limit})"
            );
        }
        let cdir = tempdir();
        // commitlog's segment limit counts its 20-byte headers: size it to hold `per_seg`
        // messages, as many as an rmqlog segment.
        let mut cl = cl_open(cdir.path(), Some(per_seg * cl_record_len(BODY) + 2));
        cl_fill(&mut cl, &b, cl_segments * per_seg);
        let cidx = random_indices(cl_segments * per_seg, reads, 3);
        g.bench_function(format!("commitlog_{cl_segments}"), |bch| {
            bch.iter(|| {
                for &i in &cidx {
                    black_box(cl_read_one(&cl, i as u64, BODY));
                }
            })
        });
    }
    g.finish();
}

criterion_group!(benches, lookup);

fn main() {
    benches();
    criterion::Criterion::default()
        .configure_from_args()
        .final_summary();
}
