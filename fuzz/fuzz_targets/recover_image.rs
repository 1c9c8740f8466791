#![no_main]
//! A valid log, then corruptions from the input; see `rmqlog_fuzz::recover_image`.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| rmqlog_fuzz::recover_image::run(data));
