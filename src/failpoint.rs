//! Fail points: named steps where a test can pause, fail or slow one operation while another runs
//! (the `fail` crate, behind the `failpoints` feature; without it they compile to nothing).
//!
//! Each sits between two steps whose interleaving with other operations matters; the tests that
//! use them are in `tests/interleavings.rs`.

/// `fail_point!("name")`: a no-op unless built with `--features failpoints`.
/// `fail_point!("name", |arg| value)`: the enclosing function returns `value` when a test
/// configures the point to `return` (an injected error at an I/O step).
#[cfg(feature = "failpoints")]
macro_rules! fail_point {
    ($name:expr) => {
        fail::fail_point!($name)
    };
    ($name:expr, $e:expr) => {
        fail::fail_point!($name, $e)
    };
}

#[cfg(not(feature = "failpoints"))]
macro_rules! fail_point {
    ($name:expr) => {};
    ($name:expr, $e:expr) => {};
}

pub(crate) use fail_point;
