//! The framing of rmqlog's small metadata files: one JSON line, then the CRC32 of that line in
//! hex, padded with newlines to a fixed length so a rewrite in place never needs a new block.

use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use serde::de::DeserializeOwned;
use serde::Serialize;

/// Larger than any metadata file rmqlog writes (they grow with the directories' paths, which
/// `PATH_MAX` bounds), small enough to read whole.
const READ_LIMIT: usize = 1 << 20;

/// Reads a metadata file of at most [`READ_LIMIT`] bytes. Anything else (a larger file, a FIFO,
/// a directory) is an error, never a hang or a large allocation: the file is then ignored as
/// damaged.
pub fn read_file(path: &Path) -> std::io::Result<Vec<u8>> {
    let limit = READ_LIMIT;
    use std::io::{Error, ErrorKind};
    // Non-blocking: opening a FIFO must not wait for a writer.
    let f = std::fs::File::options()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    if !f.metadata()?.is_file() {
        return Err(Error::new(ErrorKind::InvalidData, "not a regular file"));
    }
    let mut bytes = Vec::with_capacity(limit.min(1 << 16));
    f.take(limit as u64 + 1).read_to_end(&mut bytes)?;
    if bytes.len() > limit {
        return Err(Error::new(
            ErrorKind::InvalidData,
            format!("larger than the {limit} bytes such a file may have"),
        ));
    }
    Ok(bytes)
}

/// `value` framed and padded to at least `len` bytes.
pub fn encode<T: Serialize>(value: &T, len: usize) -> Vec<u8> {
    let json = serde_json::to_string(value).unwrap_or_default();
    let mut bytes = format!("{json}\n{:08x}\n", crc32fast::hash(json.as_bytes())).into_bytes();
    bytes.resize(bytes.len().max(len), b'\n');
    bytes
}

/// The value in `bytes`, or why they do not hold one (torn, damaged, not ours).
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
    let text = std::str::from_utf8(bytes).map_err(|_| "not UTF-8".to_string())?;
    let mut lines = text.lines();
    let (json, crc) = (lines.next().unwrap_or(""), lines.next().unwrap_or(""));
    let expected = u32::from_str_radix(crc.trim(), 16).map_err(|_| "no CRC line".to_string())?;
    if crc32fast::hash(json.as_bytes()) != expected {
        return Err("CRC mismatch".into());
    }
    serde_json::from_str(json).map_err(|e| e.to_string())
}
