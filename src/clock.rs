//! The clock leases and "newest" comparisons use: time since boot, sleep included
//! (`CLOCK_BOOTTIME`), which no step of the wall clock moves.

use std::time::Duration;

/// Time since boot, sleep included (`CLOCK_BOOTTIME`).
pub(crate) fn boot_time() -> Duration {
    let mut ts = std::mem::MaybeUninit::<libc::timespec>::uninit();
    // SAFETY: clock_gettime writes the timespec it is given; CLOCK_BOOTTIME exists on Linux.
    let ts = unsafe {
        libc::clock_gettime(libc::CLOCK_BOOTTIME, ts.as_mut_ptr());
        ts.assume_init()
    };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}
