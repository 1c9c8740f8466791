//! Writes the seed corpus of both targets into `fuzz/corpus/<target>/` (run from anywhere):
//!
//! ```sh
//! cargo run --manifest-path fuzz/Cargo.toml --example gen_corpus
//! ```
//!
//! Deterministic: the timestamps inside real segments differ from run to run, nothing else.

use std::path::{Path, PathBuf};

use rmqlog_fuzz::{open_writer, scratch, FIRST_SEGMENT, PAGE};

/// Pseudo-random bytes (xorshift), the same on every run.
fn noise(n: usize, mut seed: u64) -> Vec<u8> {
    (0..n)
        .map(|_| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed as u8
        })
        .collect()
}

/// Segment 0 of a log with `size`-byte segments holding records of these body lengths.
fn real_segment(size: usize, lens: &[usize]) -> Vec<u8> {
    let tmp = scratch();
    let dirs = [tmp.path().join("store")];
    let log = open_writer(&dirs, size as u64).expect("open");
    for (i, &len) in lens.iter().enumerate() {
        let body: Vec<u8> = (0..len).map(|j| (i * 31 + j) as u8).collect();
        log.append(&body).expect("append");
    }
    log.close().expect("close");
    std::fs::read(dirs[0].join(FIRST_SEGMENT)).expect("segment 0")
}

fn write(dir: &Path, name: &str, bytes: &[u8]) {
    std::fs::write(dir.join(name), bytes).expect("writing a corpus file");
}

fn main() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("corpus");
    let seg = root.join("decode_segment");
    let rec = root.join("recover_image");
    std::fs::create_dir_all(&seg).expect("corpus dir");
    std::fs::create_dir_all(&rec).expect("corpus dir");

    // decode_segment: segment bytes.
    let small = real_segment(PAGE, &[0, 5, 100, 17]);
    write(&seg, "real_records", &small);
    // Enough records that the segment is sealed by an end-of-segment filler.
    let sealed = real_segment(PAGE, &[700; 8]);
    write(&seg, "real_sealed_with_filler", &sealed);
    // A two-page segment (segment size 8192), sealed too.
    let two = real_segment(2 * PAGE, &[700; 12]);
    write(&seg, "real_two_pages_sealed", &two);
    let mut torn = small.clone();
    torn[32 + 32 + 2] ^= 0x40; // a body byte of the second record
    write(&seg, "real_torn_body", &torn);
    // A header only: the input is padded with zeros to 4096.
    write(&seg, "real_first_header_only", &small[..32]);
    write(&seg, "zeros", &vec![0u8; PAGE]);
    write(&seg, "random", &noise(PAGE, 0x9E37_79B9_7F4A_7C15));
    let mut filler = vec![0u8; PAGE];
    filler[0..4].copy_from_slice(&(PAGE as u32).to_le_bytes());
    filler[4..8].copy_from_slice(&0x524D_51FFu32.to_le_bytes());
    write(&seg, "filler_only", &filler);

    // recover_image: [flags, records, boundary, lengths/3 ..., (pos lo, pos hi, byte) ...].
    let lens: Vec<u8> = vec![1, 40, 200, 3, 0, 90, 255, 10, 60, 120];
    let header = |flags: u8, pick: u8, lens: &[u8]| {
        let mut v = vec![flags, lens.len() as u8, pick];
        v.extend_from_slice(lens);
        v
    };
    // No damage, clean metadata kept.
    write(&rec, "clean_no_damage", &header(0, 0, &lens));
    // Clean metadata, a body byte of the first record and a header byte of a later one.
    let mut v = header(0, 0, &lens);
    v.extend_from_slice(&[40, 0, 0xAA, 0x10, 0x02, 0x55]);
    write(&rec, "clean_damaged", &v);
    // Unclean metadata (flushed at the 4th boundary), damage after it.
    let mut v = header(1, 4, &lens);
    v.extend_from_slice(&[0x00, 0x06, 0x01, 0x20, 0x0c, 0xFF]);
    write(&rec, "unclean_damaged_tail", &v);
    // Metadata deleted, two directories, damage in the second segment.
    let mut v = header(2 | 4, 0, &lens);
    v.extend_from_slice(&[0x08, 0x10, 0x00]);
    write(&rec, "no_meta_two_dirs", &v);
    // Thirty 699-byte records (731 with the header): five per segment, six segments, the first
    // sealed by a filler at 3655 (0x0E47). Damage its length, and a byte of its zero tail.
    let many = vec![233u8; 30];
    let mut v = header(4, 7, &many);
    v.extend_from_slice(&[0x47, 0x0E, 0x00, 0xF8, 0x0F, 0x13]);
    write(&rec, "two_dirs_many_segments", &v);
    write(&rec, "random", &noise(96, 0xD1B5_4A32_D192_ED03));
}
