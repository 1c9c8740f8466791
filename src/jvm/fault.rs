//! A segment file truncated by another program while a native call reads its mapping: the read
//! faults (SIGBUS), which would kill the JVM. The bridge catches that fault, and only that one.
//!
//! This module's SIGBUS handler, installed once in front of the JVM's, takes two kinds of fault:
//! - a fault of a *guarded* thread (its id in `GUARDED`): one inside a native call;
//! - a fault at a *watched* address (`WATCHED`): in the body buffers of a batch handed to Java,
//!   whose column vectors copy bodies out of the mapped segments after the call returned.
//!
//! It counts the fault (`FAULTS`), maps a page of zeros over the faulting page, and returns, so
//! the load is retried and reads zeros (which no record passes: its header or CRC check fails).
//! A native call then sees `FAULTS` moved and fails with `CorruptionError`, whatever it read;
//! Java's column vectors check `FAULTS` after each body's copy and refuse it the same way
//! (`NativeColumns`). Every other SIGBUS goes to the handler that was there before.
//!
//! Why Java's copies are not left to the JVM: its handler turns a fault in `Unsafe.copyMemory`
//! into an `InternalError`, but from compiled code that error is thrown later, anywhere on the
//! thread (seen in Spark's `UnsafeWriter`), and Spark takes an `InternalError` for a fatal JVM
//! error and ends the executor.
//!
//! Only async-signal-safe work runs in the handler: atomics, `gettid`, `mmap`, and a call of the
//! previous handler.

use std::sync::atomic::{AtomicI32, AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;

/// Faults taken so far, in this process.
pub(super) static FAULTS: AtomicU64 = AtomicU64::new(0);

/// The threads inside a native call; 0 is a free slot. More concurrent calls than slots run
/// unguarded (a fault then kills the process, as without this module).
static GUARDED: [AtomicI32; 256] = [const { AtomicI32::new(0) }; 256];

/// Watched address ranges `[start, end)`; a free slot has `start` 0. A slot is filled `start`
/// first and emptied `end` first, so a slot being filled or emptied matches no address. Ranges
/// beyond the slots go unwatched (a fault there is the JVM's to handle, as without this module).
static WATCHED: [(AtomicUsize, AtomicUsize); 1024] =
    [const { (AtomicUsize::new(0), AtomicUsize::new(0)) }; 1024];
static PAGE: AtomicUsize = AtomicUsize::new(4096);

/// The SIGBUS disposition before ours.
struct Previous(libc::sigaction);
// SAFETY: plain data written once (before it is shared through the OnceLock) and only read after.
unsafe impl Sync for Previous {}
// SAFETY: as above.
unsafe impl Send for Previous {}
static PREVIOUS: OnceLock<Previous> = OnceLock::new();

/// Installs the handler (once per process).
pub(super) fn install() {
    PREVIOUS.get_or_init(|| {
        // SAFETY: sysconf and sigaction with valid arguments; `ours` is fully initialised and its
        // handler has the SA_SIGINFO signature; `old` receives the previous disposition.
        unsafe {
            let page = libc::sysconf(libc::_SC_PAGESIZE);
            if page > 0 {
                PAGE.store(page as usize, Ordering::Relaxed);
            }
            let mut ours: libc::sigaction = std::mem::zeroed();
            ours.sa_sigaction = on_sigbus as *const () as usize;
            ours.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_RESTART;
            libc::sigemptyset(&mut ours.sa_mask);
            let mut old: libc::sigaction = std::mem::zeroed();
            libc::sigaction(libc::SIGBUS, &ours, &mut old);
            Previous(old)
        }
    });
}

/// A native call's guard: the calling thread is guarded until it is dropped.
pub(super) struct Guard {
    slot: Option<usize>,
    /// `FAULTS` when the call began.
    pub(super) faults: u64,
}

impl Guard {
    pub(super) fn enter() -> Guard {
        let tid = gettid();
        let slot = GUARDED.iter().position(|s| {
            s.compare_exchange(0, tid, Ordering::SeqCst, Ordering::Relaxed)
                .is_ok()
        });
        Guard {
            slot,
            faults: FAULTS.load(Ordering::SeqCst),
        }
    }

    /// Whether a fault was taken, by any thread, since the call began.
    pub(super) fn faulted(&self) -> bool {
        FAULTS.load(Ordering::SeqCst) != self.faults
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(slot) = self.slot {
            GUARDED[slot].store(0, Ordering::SeqCst);
        }
    }
}

/// Address ranges watched until cleared or dropped: the body buffers of one batch handed to
/// Java. Clear it before the memory it names is freed or unmapped.
#[derive(Debug, Default)]
pub(super) struct Watched {
    slots: Vec<usize>,
}

impl Watched {
    /// Watches `[start, start + len)`; false where every slot is taken.
    pub(super) fn add(&mut self, start: usize, len: usize) -> bool {
        if start == 0 || len == 0 {
            return true;
        }
        let free = WATCHED.iter().position(|(s, _)| {
            s.compare_exchange(0, start, Ordering::SeqCst, Ordering::Relaxed)
                .is_ok()
        });
        let Some(slot) = free else {
            return false;
        };
        WATCHED[slot]
            .1
            .store(start.saturating_add(len), Ordering::SeqCst);
        self.slots.push(slot);
        true
    }

    /// Stops watching every range added.
    pub(super) fn clear(&mut self) {
        for slot in self.slots.drain(..) {
            WATCHED[slot].1.store(0, Ordering::SeqCst);
            WATCHED[slot].0.store(0, Ordering::SeqCst);
        }
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        self.clear();
    }
}

fn watched(addr: usize) -> bool {
    WATCHED.iter().any(|(s, e)| {
        let start = s.load(Ordering::SeqCst);
        start != 0 && start <= addr && addr < e.load(Ordering::SeqCst)
    })
}

fn gettid() -> i32 {
    // SAFETY: gettid has no arguments and cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) as i32 }
}

extern "C" fn on_sigbus(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo for a SA_SIGINFO handler; si_addr is the
    // faulting address of a SIGBUS.
    let at = unsafe { (*info).si_addr() } as usize;
    let tid = gettid();
    if GUARDED.iter().any(|s| s.load(Ordering::SeqCst) == tid) || watched(at) {
        let page = PAGE.load(Ordering::Relaxed);
        let addr = at & !(page - 1);
        FAULTS.fetch_add(1, Ordering::SeqCst);
        // SAFETY: replaces one page of a file mapping whose backing is gone (the fault says so)
        // with zeros, at the same address: the mapping stays mapped for its owner (`Mapping`,
        // which unmaps the whole range when dropped); nothing else lives in that page.
        let zeroed = unsafe {
            libc::mmap(
                addr as *mut libc::c_void,
                page,
                libc::PROT_READ,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                -1,
                0,
            )
        };
        if zeroed != libc::MAP_FAILED {
            return; // the load is retried, and reads zeros
        }
    }
    forward(sig, info, ctx);
}

/// Hands the signal to the disposition before ours.
fn forward(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    let Some(Previous(old)) = PREVIOUS.get() else {
        return;
    };
    let handler = old.sa_sigaction;
    if handler == libc::SIG_IGN {
        return;
    }
    if handler == libc::SIG_DFL {
        // SAFETY: restores the default action; the faulting load then runs again and the kernel
        // ends the process as it would have without this module.
        unsafe { libc::signal(sig, libc::SIG_DFL) };
        return;
    }
    if old.sa_flags & libc::SA_SIGINFO != 0 {
        // SAFETY: a SA_SIGINFO handler has this signature; it gets the arguments we got.
        let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
            unsafe { std::mem::transmute(handler) };
        f(sig, info, ctx);
    } else {
        // SAFETY: a plain handler has this signature.
        let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(handler) };
        f(sig);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn a_fault_of_a_guarded_thread_or_at_a_watched_address_reads_zeros() {
        install();
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("seg");
        let mut f = std::fs::File::create(&path).expect("create");
        f.write_all(&vec![7u8; 3 * 4096]).expect("write");
        let file = std::fs::OpenOptions::new()
            .read(true)
            .open(&path)
            .expect("open");
        let map =
            crate::storage::segment::Mapping::of_file(&file, 3 * 4096, false, &path).expect("map");
        let bytes = map.bytes(0, 3 * 4096);
        assert_eq!(bytes[2 * 4096], 7);
        std::fs::File::options()
            .write(true)
            .open(&path)
            .and_then(|f| f.set_len(4096))
            .expect("truncate");
        let guard = Guard::enter();
        // SAFETY: a volatile read of a mapped page past the file's new end: it faults, and the
        // handler maps zeros there (the point of the test).
        let v = unsafe { std::ptr::read_volatile(bytes.as_ptr().add(2 * 4096 + 5)) };
        assert_eq!(v, 0);
        assert!(guard.faulted());
        assert_eq!(bytes[0], 7, "the pages still backed are the file's");
        drop(guard);

        // No call now: the last page faults at a watched address.
        let mut watched = Watched::default();
        assert!(watched.add(bytes.as_ptr() as usize + 4096, 2 * 4096));
        let before = FAULTS.load(Ordering::SeqCst);
        // SAFETY: as above, on the second page.
        let v = unsafe { std::ptr::read_volatile(bytes.as_ptr().add(4096 + 9)) };
        assert_eq!(v, 0);
        assert_eq!(FAULTS.load(Ordering::SeqCst), before + 1);
        watched.clear();
        assert!(!super::watched(bytes.as_ptr() as usize + 4096));
    }
}
