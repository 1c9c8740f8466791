//! futex(2) on a 32-bit word that may live in a mapping shared between processes (no
//! `FUTEX_PRIVATE_FLAG`): a waiter sleeps in the kernel while the word holds the value it read,
//! and costs no CPU until a waker changes the word and wakes it.

use std::sync::atomic::AtomicU32;
use std::time::Duration;

/// Why [`wait`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Woken {
    /// Woken by [`wake`], or the word no longer held `expected` when the kernel looked.
    Changed,
    /// The timeout passed.
    TimedOut,
    /// A signal arrived (the caller checks for Ctrl-C and waits again).
    Interrupted,
}

/// Sleeps while `word` holds `expected`, at most `timeout` (`None`: until woken). May return
/// early for no reason (the caller re-checks what it waits for).
pub(crate) fn wait(word: &AtomicU32, expected: u32, timeout: Option<Duration>) -> Woken {
    let ts = timeout.map(|t| libc::timespec {
        tv_sec: t.as_secs().min(i64::MAX as u64) as libc::time_t,
        tv_nsec: t.subsec_nanos() as libc::c_long,
    });
    let ts_ptr = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: `word` is a live, aligned 32-bit atomic for the duration of the call (borrowed);
    // FUTEX_WAIT only reads it. `ts_ptr` is null or points to `ts`, alive until the call returns.
    let r = unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            ts_ptr,
            std::ptr::null::<u32>(),
            0u32,
        )
    };
    if r == 0 {
        return Woken::Changed;
    }
    match std::io::Error::last_os_error().raw_os_error() {
        Some(libc::ETIMEDOUT) => Woken::TimedOut,
        Some(libc::EINTR) => Woken::Interrupted,
        // EAGAIN: the word changed before the kernel looked.
        _ => Woken::Changed,
    }
}

/// Wakes every waiter sleeping on `word`, in any process that maps it.
pub(crate) fn wake_all(word: &AtomicU32) {
    // SAFETY: `word` is a live, aligned 32-bit atomic for the duration of the call; FUTEX_WAKE
    // does not access user memory beyond hashing its address.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE,
            i32::MAX,
            std::ptr::null::<libc::timespec>(),
            std::ptr::null::<u32>(),
            0u32,
        )
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;
    use std::sync::Arc;
    use std::time::Instant;

    #[test]
    fn a_changed_word_does_not_sleep_and_a_timeout_ends_the_wait() {
        let w = AtomicU32::new(1);
        assert_eq!(wait(&w, 0, None), Woken::Changed);
        let t = Instant::now();
        assert_eq!(
            wait(&w, 1, Some(Duration::from_millis(30))),
            Woken::TimedOut
        );
        assert!(t.elapsed() >= Duration::from_millis(25));
    }

    #[test]
    fn wake_ends_a_sleeping_wait() {
        let w = Arc::new(AtomicU32::new(0));
        let w2 = Arc::clone(&w);
        let sleeper = std::thread::spawn(move || loop {
            if w2.load(Ordering::Acquire) != 0 {
                return;
            }
            let _ = wait(&w2, 0, Some(Duration::from_secs(10)));
        });
        std::thread::sleep(Duration::from_millis(20));
        w.store(1, Ordering::Release);
        wake_all(&w);
        sleeper.join().unwrap();
    }
}
