//! Layer 5: open (recovery) time after a crash, at 10 and at 1,000 segments of 1 MiB full of
//! 100 B records. Each iteration runs a writer child (`FlushMode::None`) that appends the records
//! and is killed with SIGKILL after its last append; only the reopen is timed
//! (`iter_custom`). The killed writer's dirty pages are still in the page cache, so the reopen
//! also pays their writeback (recovery syncs what it keeps).
//!
//! References in the same group:
//! - `crc_scan_prefaulted_{10,1000}`: CRC-32C over the same number of bytes in a pre-faulted
//!   anonymous map: what validating every record costs at best (the page-cache limit);
//! - `commitlog_reopen_{10,1000}`: the `commitlog` crate 0.2 reopened after the same crash (its
//!   writer SIGKILLed after the same appends; 1 MiB segments). It validates no record on open.

mod common;

use std::hint::black_box;
use std::time::Duration;

use common::*;
use criterion::{criterion_group, Criterion};
use rmqlog::{FlushMode, HEADER_LEN};

const SEG: u64 = 1 << 20;
const BODY: usize = 100;

fn recovery(c: &mut Criterion) {
    let bench = bench_mode();
    let counts = if bench { [10, 1000] } else { [2, 4] };
    let per_seg = records_per_segment(SEG, BODY);
    let mut g = c.benchmark_group("recovery");
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(if bench { 20 } else { 1 }));
    g.warm_up_time(Duration::from_millis(1));
    for segments in counts {
        let records = segments * per_seg;
        g.bench_function(format!("rmqlog_reopen_{segments}"), |bch| {
            bch.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let dir = tempdir();
                    crash_writer(Crashed::Rmqlog, dir.path(), SEG, records, BODY);
                    let (d, log) = timed(|| {
                        rmqlog::CommitLog::open(&[dir.path()], options(SEG, FlushMode::None))
                            .expect("reopen")
                    });
                    total += d;
                    log.close().expect("close");
                }
                total
            })
        });
        let map = prefaulted(records * (HEADER_LEN + BODY));
        g.bench_function(format!("crc_scan_prefaulted_{segments}"), |bch| {
            bch.iter(|| {
                for chunk in map.chunks(SEG as usize) {
                    black_box(crc32c::crc32c(chunk));
                }
            })
        });
        drop(map);
        g.bench_function(format!("commitlog_reopen_{segments}"), |bch| {
            bch.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let dir = tempdir();
                    let seg_bytes = per_seg * cl_record_len(BODY) + 2;
                    crash_writer(
                        Crashed::Commitlog,
                        dir.path(),
                        seg_bytes as u64,
                        records,
                        BODY,
                    );
                    let (d, log) = timed(|| cl_open(dir.path(), Some(seg_bytes)));
                    total += d;
                    assert_eq!(log.next_offset(), records as u64);
                }
                total
            })
        });
    }
    g.finish();
}

criterion_group!(benches, recovery);

fn main() {
    maybe_run_child();
    benches();
    criterion::Criterion::default()
        .configure_from_args()
        .final_summary();
}
