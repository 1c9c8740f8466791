//! A record's properties: its key, message id and headers, the bytes a format-2 record carries
//! between its header and its body when `attrs` is not zero (docs/format.md). Pure: no I/O.
//!
//! ```text
//! flags: u8                   bit 0: a key follows; bit 1: headers follow; bit 2: an id
//!                             follows; others zero
//! [key_len: u16, key]         the key (0 to MAX_KEY_LEN bytes; an empty key is a key)
//! [id_len: u16, id]           the message id (1 to MAX_ID_LEN bytes: `write/dedup.rs`)
//! [count: u16,                the headers, in order, names repeatable
//!   count x (name_len: u16, name (UTF-8), value_len: u32, value)]
//! ```
//! All integers little-endian. The record's CRC covers these bytes, so a block that does not
//! parse was written so (a bug or a forgery), not damaged: readers refuse the record.

use crate::error::{Error, Result};

/// The largest properties block a format-2 record carries (`attrs` keeps its top byte zero).
pub const MAX_PROPS_LEN: usize = (1 << 24) - 1;
/// The longest key a record carries.
pub const MAX_KEY_LEN: usize = u16::MAX as usize;
/// The longest message id.
pub const MAX_ID_LEN: usize = u16::MAX as usize;
/// The most headers a record carries.
pub const MAX_HEADERS: usize = u16::MAX as usize;
/// The longest header name.
pub const MAX_NAME_LEN: usize = u16::MAX as usize;

const HAS_KEY: u8 = 1;
const HAS_HEADERS: u8 = 2;
const HAS_ID: u8 = 4;
const KNOWN: u8 = HAS_KEY | HAS_HEADERS | HAS_ID;

/// A record's key, message id and headers, borrowed from the record (or from the caller, to
/// encode).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Props<'a> {
    pub key: Option<&'a [u8]>,
    pub id: Option<&'a [u8]>,
    pub headers: Vec<(&'a str, &'a [u8])>,
}

impl Props<'_> {
    /// Whether a record with these properties is a plain record (no properties block).
    pub fn is_empty(&self) -> bool {
        self.key.is_none() && self.id.is_none() && self.headers.is_empty()
    }
}

/// A record to append with a key and headers ([`crate::CommitLog::append_message`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct Message<'a> {
    pub body: &'a [u8],
    /// The key: up to [`MAX_KEY_LEN`] bytes; `Some(b"")` is an empty key, `None` none.
    pub key: Option<&'a [u8]>,
    /// Headers, in order; a name may repeat.
    pub headers: &'a [(&'a str, &'a [u8])],
    /// The message id (1 to [`MAX_ID_LEN`] bytes): an append of a message whose id a record of
    /// the de-duplication window has is not written (`write/dedup.rs`).
    pub id: Option<&'a [u8]>,
}

impl<'a> Message<'a> {
    /// A message of `body` alone.
    pub fn new(body: &'a [u8]) -> Message<'a> {
        Message {
            body,
            ..Message::default()
        }
    }

    /// With `key`.
    #[must_use]
    pub fn key(mut self, key: &'a [u8]) -> Message<'a> {
        self.key = Some(key);
        self
    }

    /// With `headers`.
    #[must_use]
    pub fn headers(mut self, headers: &'a [(&'a str, &'a [u8])]) -> Message<'a> {
        self.headers = headers;
        self
    }

    /// With the message id `id`.
    #[must_use]
    pub fn id(mut self, id: &'a [u8]) -> Message<'a> {
        self.id = Some(id);
        self
    }
}

/// Each message's encoded properties (empty when no message has any), naming the message in
/// errors when there are several.
pub fn encode_all(messages: &[Message<'_>]) -> Result<Vec<Vec<u8>>> {
    if messages
        .iter()
        .all(|m| m.key.is_none() && m.id.is_none() && m.headers.is_empty())
    {
        return Ok(Vec::new());
    }
    let many = messages.len() > 1;
    messages
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let mut out = Vec::new();
            let which = if many {
                format!(" (messages[{i}])")
            } else {
                String::new()
            };
            encode(m.key, m.id, m.headers, &which, &mut out)?;
            Ok(out)
        })
        .collect()
}

/// Appends the block for `key`, the message id `id` and `headers` to `out` (nothing for none of
/// them). `which` names the record in errors ("", or " (bodies[3])").
pub fn encode<N: AsRef<str>, V: AsRef<[u8]>>(
    key: Option<&[u8]>,
    id: Option<&[u8]>,
    headers: &[(N, V)],
    which: &str,
    out: &mut Vec<u8>,
) -> Result<()> {
    let mut e = Encoder::new(out, key, id, headers.len(), which)?;
    for (name, value) in headers {
        e.header(name.as_ref(), value.as_ref())?;
    }
    e.finish()
}

/// Writes a properties block piece by piece, straight from the caller's values (the bindings
/// encode from Python objects without gathering them first). Writes nothing for a record
/// without a key, an id and headers.
pub struct Encoder<'a> {
    out: &'a mut Vec<u8>,
    start: usize,
    /// Headers announced, and written so far.
    headers: usize,
    written: usize,
    which: &'a str,
}

impl<'a> Encoder<'a> {
    /// Starts the block of a record with `key`, the message id `id` and `headers` headers
    /// (which [`Encoder::header`] then writes, in order).
    pub fn new(
        out: &'a mut Vec<u8>,
        key: Option<&[u8]>,
        id: Option<&[u8]>,
        headers: usize,
        which: &'a str,
    ) -> Result<Encoder<'a>> {
        let start = out.len();
        let e = Encoder {
            out,
            start,
            headers,
            written: 0,
            which,
        };
        if key.is_none() && id.is_none() && headers == 0 {
            return Ok(e);
        }
        if headers > MAX_HEADERS {
            return Err(e.bad(format!(
                "a record carries at most {MAX_HEADERS} headers, not {headers}"
            )));
        }
        let flags = if key.is_some() { HAS_KEY } else { 0 }
            | if headers == 0 { 0 } else { HAS_HEADERS }
            | if id.is_some() { HAS_ID } else { 0 };
        e.out.push(flags);
        if let Some(key) = key {
            if key.len() > MAX_KEY_LEN {
                return Err(e.bad(format!(
                    "a key is at most {MAX_KEY_LEN} bytes, this one has {}",
                    key.len()
                )));
            }
            e.out.extend_from_slice(&(key.len() as u16).to_le_bytes());
            e.out.extend_from_slice(key);
        }
        if let Some(id) = id {
            if id.is_empty() || id.len() > MAX_ID_LEN {
                return Err(e.bad(format!(
                    "a message id is 1 to {MAX_ID_LEN} bytes, this one has {}",
                    id.len()
                )));
            }
            e.out.extend_from_slice(&(id.len() as u16).to_le_bytes());
            e.out.extend_from_slice(id);
        }
        if headers > 0 {
            e.out.extend_from_slice(&(headers as u16).to_le_bytes());
        }
        Ok(e)
    }

    fn bad(&self, why: String) -> Error {
        Error::InvalidArgument(format!("{why}{}", self.which))
    }

    /// Writes the next header.
    pub fn header(&mut self, name: &str, value: &[u8]) -> Result<()> {
        if self.written == self.headers {
            return Err(Error::Internal("more headers than announced".into()));
        }
        let name = name.as_bytes();
        if name.len() > MAX_NAME_LEN {
            return Err(self.bad(format!(
                "a header name is at most {MAX_NAME_LEN} bytes, this one has {}",
                name.len()
            )));
        }
        let value_len = u32::try_from(value.len())
            .map_err(|_| self.bad("a header value is over 4 GiB".into()))?;
        self.out
            .extend_from_slice(&(name.len() as u16).to_le_bytes());
        self.out.extend_from_slice(name);
        self.out.extend_from_slice(&value_len.to_le_bytes());
        self.out.extend_from_slice(value);
        self.written += 1;
        Ok(())
    }

    /// Ends the block: every announced header written, the whole within [`MAX_PROPS_LEN`].
    pub fn finish(self) -> Result<()> {
        if self.written != self.headers {
            return Err(Error::Internal("fewer headers than announced".into()));
        }
        let len = self.out.len() - self.start;
        if len > MAX_PROPS_LEN {
            return Err(self.bad(format!(
                "a record's key and headers take at most {MAX_PROPS_LEN} bytes, these take {len}"
            )));
        }
        Ok(())
    }
}

/// Reads `n` bytes at `*at`, moving it on.
fn take<'a>(b: &'a [u8], at: &mut usize, n: usize) -> Option<&'a [u8]> {
    let end = at.checked_add(n)?;
    let s = b.get(*at..end)?;
    *at = end;
    Some(s)
}

fn u16_at(b: &[u8], at: &mut usize) -> Option<usize> {
    take(b, at, 2).map(|s| u16::from_le_bytes([s[0], s[1]]) as usize)
}

fn u32_at(b: &[u8], at: &mut usize) -> Option<usize> {
    take(b, at, 4).map(|s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]) as usize)
}

/// The key in `block` (a record's properties): `Some(None)` for a record without one, `None`
/// for a block that does not parse. Reads nothing past the key.
pub fn key_of(block: &[u8]) -> Option<Option<&[u8]>> {
    key_and_id(block).map(|(key, _)| key)
}

/// The message id in `block`, as [`key_of`] the key.
pub fn id_of(block: &[u8]) -> Option<Option<&[u8]>> {
    key_and_id(block).map(|(_, id)| id)
}

/// A record's key and message id, each `None` when it has none.
pub type KeyAndId<'a> = (Option<&'a [u8]>, Option<&'a [u8]>);

/// The key and the message id in `block` (`None` for a block that does not parse as far as
/// them). Reads nothing past the id: what an index takes from a record.
pub fn key_and_id(block: &[u8]) -> Option<KeyAndId<'_>> {
    let Some(&flags) = block.first() else {
        return Some((None, None));
    };
    if flags & !KNOWN != 0 {
        return None;
    }
    let mut at = 1;
    let mut field = |present: u8| -> Option<Option<&[u8]>> {
        if flags & present == 0 {
            return Some(None);
        }
        let n = u16_at(block, &mut at)?;
        take(block, &mut at, n).map(Some)
    };
    let key = field(HAS_KEY)?;
    Some((key, field(HAS_ID)?))
}

/// The whole block, checked: every length within it, header names UTF-8, nothing left over.
/// `None` when it does not parse.
pub fn decode(block: &[u8]) -> Option<Props<'_>> {
    if block.is_empty() {
        return Some(Props::default());
    }
    let flags = block[0];
    if flags & !KNOWN != 0 || flags == 0 {
        return None;
    }
    let mut at = 1;
    let mut props = Props::default();
    if flags & HAS_KEY != 0 {
        let n = u16_at(block, &mut at)?;
        props.key = Some(take(block, &mut at, n)?);
    }
    if flags & HAS_ID != 0 {
        let n = u16_at(block, &mut at)?;
        let id = take(block, &mut at, n)?;
        if id.is_empty() {
            return None;
        }
        props.id = Some(id);
    }
    if flags & HAS_HEADERS != 0 {
        let count = u16_at(block, &mut at)?;
        if count == 0 {
            return None;
        }
        props.headers.reserve(count);
        for _ in 0..count {
            let n = u16_at(block, &mut at)?;
            let name = std::str::from_utf8(take(block, &mut at, n)?).ok()?;
            let n = u32_at(block, &mut at)?;
            props.headers.push((name, take(block, &mut at, n)?));
        }
    }
    (at == block.len()).then_some(props)
}

/// Whether two byte strings are equal: a loop for the short ones keys, header names and values
/// mostly are (a call to `bcmp` costs more than comparing a few bytes), `==` for the others.
#[inline(always)]
pub fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len()
        && if a.len() <= 16 {
            a.iter().zip(b).all(|(x, y)| x == y)
        } else {
            a == b
        }
}

/// Whether `block` parses as [`decode`] parses it (every length within it, header names UTF-8,
/// nothing left over), without building anything: readers check every record's block.
pub fn is_valid(block: &[u8]) -> bool {
    block.is_empty() || walk(block, |_| {}, |_, _| false)
}

/// Walks a non-empty `block` as [`is_valid`] checks it, calling `key(key)` for its key and
/// `header(name, value)` for each header, in order; whether it parses (the calls made before a
/// defect was found stand). `header` returns whether it knows the name to be UTF-8 (it equals
/// one the caller holds as a `str`): the walk then does not check it again. One walk that
/// checks and reads, for a filter.
#[inline(always)]
pub fn walk<'a>(
    block: &'a [u8],
    mut key: impl FnMut(&'a [u8]),
    mut header: impl FnMut(&'a [u8], &'a [u8]) -> bool,
) -> bool {
    let mut go = || -> Option<()> {
        let flags = *block.first()?;
        if flags & !KNOWN != 0 || flags == 0 {
            return None;
        }
        let mut at = 1;
        if flags & HAS_KEY != 0 {
            let n = u16_at(block, &mut at)?;
            key(take(block, &mut at, n)?);
        }
        if flags & HAS_ID != 0 {
            let n = u16_at(block, &mut at)?;
            if n == 0 {
                return None;
            }
            take(block, &mut at, n)?;
        }
        if flags & HAS_HEADERS != 0 {
            let count = u16_at(block, &mut at)?;
            if count == 0 {
                return None;
            }
            for _ in 0..count {
                let n = u16_at(block, &mut at)?;
                let name = take(block, &mut at, n)?;
                let n = u32_at(block, &mut at)?;
                let known = header(name, take(block, &mut at, n)?);
                // (Most names are ASCII: checked without the call.)
                if !known && !name.is_ascii() {
                    std::str::from_utf8(name).ok()?;
                }
            }
        }
        (at == block.len()).then_some(())
    };
    go().is_some()
}

/// Calls `f(name, value)` for each header in `block` until it returns true; `None` when the block
/// does not parse as far as that. Allocates nothing (filters and the `headers` column use it
/// per record).
pub fn find_header<'a>(
    block: &'a [u8],
    mut f: impl FnMut(&'a [u8], &'a [u8]) -> bool,
) -> Option<bool> {
    if block.is_empty() {
        return Some(false);
    }
    let flags = block[0];
    let mut at = 1;
    for present in [HAS_KEY, HAS_ID] {
        if flags & present != 0 {
            let n = u16_at(block, &mut at)?;
            take(block, &mut at, n)?;
        }
    }
    if flags & HAS_HEADERS == 0 {
        return Some(false);
    }
    let count = u16_at(block, &mut at)?;
    for _ in 0..count {
        let n = u16_at(block, &mut at)?;
        let name = take(block, &mut at, n)?;
        let n = u32_at(block, &mut at)?;
        if f(name, take(block, &mut at, n)?) {
            return Some(true);
        }
    }
    Some(false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn block(key: Option<&[u8]>, headers: &[(&str, &[u8])]) -> Vec<u8> {
        block_with_id(key, None, headers)
    }

    fn block_with_id(key: Option<&[u8]>, id: Option<&[u8]>, headers: &[(&str, &[u8])]) -> Vec<u8> {
        let mut out = Vec::new();
        encode(key, id, headers, "", &mut out).unwrap();
        out
    }

    proptest! {
        #[test]
        fn round_trip(key in proptest::option::of(proptest::collection::vec(any::<u8>(), 0..40)),
                      id in proptest::option::of(proptest::collection::vec(any::<u8>(), 1..40)),
                      headers in proptest::collection::vec(
                          ("[a-zé]{0,6}", proptest::collection::vec(any::<u8>(), 0..20)), 0..5)) {
            let hs: Vec<(&str, &[u8])> =
                headers.iter().map(|(n, v)| (n.as_str(), v.as_slice())).collect();
            let b = block_with_id(key.as_deref(), id.as_deref(), &hs);
            prop_assert_eq!(b.is_empty(), key.is_none() && id.is_none() && hs.is_empty());
            let p = decode(&b).unwrap();
            prop_assert_eq!(p.key, key.as_deref());
            prop_assert_eq!(p.id, id.as_deref());
            prop_assert_eq!(&p.headers, &hs);
            prop_assert_eq!(key_of(&b).unwrap(), key.as_deref());
            prop_assert_eq!(id_of(&b).unwrap(), id.as_deref());
            let mut seen = 0;
            prop_assert_eq!(find_header(&b, |_, _| { seen += 1; false }), Some(false));
            prop_assert_eq!(seen, hs.len());
            prop_assert!(is_valid(&b));
            // A byte less, or one more: refused by both.
            if !b.is_empty() {
                prop_assert!(!is_valid(&b[..b.len() - 1]) && decode(&b[..b.len() - 1]).is_none());
                let mut longer = b.clone();
                longer.push(0);
                prop_assert!(!is_valid(&longer) && decode(&longer).is_none());
            }
        }

        /// Whatever the bytes, parsing neither panics nor reads outside the block, and the
        /// check without allocation agrees with the decoding.
        #[test]
        fn any_bytes_parse_or_are_refused(b in proptest::collection::vec(any::<u8>(), 0..64)) {
            prop_assert_eq!(is_valid(&b), decode(&b).is_some());
            let _ = key_of(&b);
            let _ = find_header(&b, |_, _| false);
        }
    }

    proptest! {
        /// `same` is `==`, whatever the lengths (the word compares of its short cases).
        #[test]
        fn same_is_equality(a in proptest::collection::vec(0u8..3, 0..24),
                            b in proptest::collection::vec(0u8..3, 0..24)) {
            prop_assert_eq!(same(&a, &b), a == b);
            prop_assert!(same(&a, &a.clone()));
        }
    }

    #[test]
    fn an_empty_key_is_a_key_and_repeated_names_stay_in_order() {
        let b = block(Some(b""), &[("t", b"1"), ("t", b"2")]);
        let p = decode(&b).unwrap();
        assert_eq!(p.key, Some(&b""[..]));
        assert_eq!(p.headers, vec![("t", &b"1"[..]), ("t", &b"2"[..])]);
        let mut seen = Vec::new();
        find_header(&b, |n, v| {
            seen.push((n, v));
            false
        });
        assert_eq!(seen.len(), 2);
    }

    #[test]
    fn an_empty_id_is_refused() {
        let mut out = Vec::new();
        assert!(matches!(
            Encoder::new(&mut out, None, Some(b""), 0, ""),
            Err(Error::InvalidArgument(m)) if m.contains("message id")
        ));
        // Written so anyway (a forgery under a valid CRC): it does not parse.
        assert!(!is_valid(&[HAS_ID, 0, 0]) && decode(&[HAS_ID, 0, 0]).is_none());
    }

    #[test]
    fn limits_are_typed_errors() {
        let long = vec![0u8; MAX_KEY_LEN + 1];
        let mut out = Vec::new();
        assert!(matches!(
            encode::<&str, &[u8]>(Some(&long), None, &[], " (bodies[2])", &mut out),
            Err(Error::InvalidArgument(m)) if m.contains("bodies[2]")
        ));
        let name = "n".repeat(MAX_NAME_LEN + 1);
        assert!(encode(None, None, &[(name.as_str(), b"v")], "", &mut out).is_err());
    }

    #[test]
    fn trailing_bytes_or_bad_utf8_do_not_parse() {
        let mut b = block(Some(b"k"), &[]);
        b.push(0);
        assert!(decode(&b).is_none());
        let mut b = block(None, &[("ab", b"")]);
        b[5] = 0xff;
        assert!(decode(&b).is_none());
    }
}
