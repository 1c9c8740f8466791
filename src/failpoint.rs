//! Fail points: named steps where a test can pause, fail or slow one operation while another runs
//! (the `fail` crate, behind the `failpoints` feature; without it they compile to nothing).
//!
//! Each sits between two steps whose interleaving with other operations matters; the tests that
//! use them are in `tests/interleavings.rs`.

/// `fail_point!("name")`: a no-op unless built with `--features failpoints`.
#[cfg(feature = "failpoints")]
macro_rules! fail_point {
    ($name:expr) => {
        fail::fail_point!($name)
    };
}

#[cfg(not(feature = "failpoints"))]
macro_rules! fail_point {
    ($name:expr) => {};
}

pub(crate) use fail_point;
