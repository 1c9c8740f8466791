//! Replays the committed seed corpus through both targets without libFuzzer or instrumentation:
//! `cargo test --manifest-path fuzz/Cargo.toml` on plain stable.

use std::path::Path;

fn replay(target: &str, run: fn(&[u8])) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("corpus")
        .join(target);
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = e.expect("listing the corpus").path();
        if path.is_file() {
            let data = std::fs::read(&path).expect("reading a corpus file");
            eprintln!("{target}: {}", path.display());
            run(&data);
            n += 1;
        }
    }
    assert!(n > 0, "no corpus files in {}", dir.display());
}

#[test]
fn decode_segment_corpus() {
    replay("decode_segment", rmqlog_fuzz::decode_segment::run);
}

#[test]
fn recover_image_corpus() {
    replay("recover_image", rmqlog_fuzz::recover_image::run);
}

#[test]
fn empty_inputs() {
    rmqlog_fuzz::decode_segment::run(&[]);
    rmqlog_fuzz::recover_image::run(&[]);
}
