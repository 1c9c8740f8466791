#![no_main]
//! The fuzz input is the bytes of a segment file; see `rmqlog_fuzz::decode_segment`.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| rmqlog_fuzz::decode_segment::run(data));
