//! Filters on a record's key and headers, evaluated on its properties block
//! ([`crate::storage::props`]) as a scan or a consumer's poll reads it: RocketMQ's tag
//! subscription, Kafka-style key filtering, without a record copied or a call per record into
//! the caller's language. Pure: no I/O.
//!
//! A [`Filter`] is a conjunction of conditions, each of which must hold:
//!
//! - the key is one of a set ([`Filter::keys`]);
//! - the key starts with a prefix ([`Filter::key_prefix`]);
//! - some header of a name has a value in a set ([`Filter::header_in`]): names repeat in a
//!   record, and any header of the name with an accepted value satisfies the condition.
//!
//! A record without a key satisfies no key condition; a record without headers, no header
//! condition. A filter with no condition matches every record. [`Filter::matches`] allocates
//! nothing: the sets are sorted vectors searched in place, the block parsed where it lies.

use crate::error::{Error, Result};
use crate::storage::props;

/// A set of accepted byte strings: sorted, without duplicates.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
struct Values(Vec<Box<[u8]>>);

impl Values {
    fn of<I, V>(values: I) -> Values
    where
        I: IntoIterator<Item = V>,
        V: AsRef<[u8]>,
    {
        let mut v: Vec<Box<[u8]>> = values.into_iter().map(|x| x.as_ref().into()).collect();
        v.sort_unstable();
        v.dedup();
        Values(v)
    }

    /// Whether `value` is in the set: a linear search of a few (cheaper than the halvings), a
    /// binary search of more.
    #[inline(always)]
    fn contains(&self, value: &[u8]) -> bool {
        if self.0.len() <= 8 {
            return self.0.iter().any(|v| props::same(v, value));
        }
        self.0.binary_search_by(|v| (**v).cmp(value)).is_ok()
    }

    /// The values in both sets.
    fn intersect(&self, other: &Values) -> Values {
        Values(
            self.0
                .iter()
                .filter(|v| other.contains(v))
                .cloned()
                .collect(),
        )
    }
}

/// A condition on the headers: some header named `name` has a value in `values`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct HeaderIn {
    name: Box<[u8]>,
    values: Values,
}

/// Which records a scan or a consumer delivers: every condition given must hold (see the module
/// docs). Build it with [`Filter::new`] and the methods that add conditions.
///
/// ```
/// use rmqlog::Filter;
///
/// let f = Filter::new().keys([b"order-1", b"order-2"]).header("type", b"payment");
/// assert!(!f.is_empty());
/// assert!(!f.matches(&[])); // a record without key and headers
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Filter {
    /// The key is in this set (`None`: any key, or none).
    keys: Option<Values>,
    /// The key starts with each of these.
    prefixes: Vec<Box<[u8]>>,
    headers: Vec<HeaderIn>,
}

impl Filter {
    /// A filter with no condition: it matches every record.
    pub fn new() -> Filter {
        Filter::default()
    }

    /// Whether the filter has no condition (it matches every record, those without key and
    /// headers too).
    pub fn is_empty(&self) -> bool {
        self.keys.is_none() && self.prefixes.is_empty() && self.headers.is_empty()
    }

    /// The key must be `key`.
    #[must_use]
    pub fn key(self, key: impl AsRef<[u8]>) -> Filter {
        self.keys([key])
    }

    /// The key must be one of `keys`. Given twice, the key must be in both sets. An empty set
    /// matches no record.
    #[must_use]
    pub fn keys<I, K>(mut self, keys: I) -> Filter
    where
        I: IntoIterator<Item = K>,
        K: AsRef<[u8]>,
    {
        let set = Values::of(keys);
        self.keys = Some(match self.keys.take() {
            Some(had) => had.intersect(&set),
            None => set,
        });
        self
    }

    /// The key must start with `prefix` (an empty prefix: the record must have a key).
    #[must_use]
    pub fn key_prefix(mut self, prefix: impl AsRef<[u8]>) -> Filter {
        self.prefixes.push(prefix.as_ref().into());
        self
    }

    /// Some header named `name` must have the value `value`.
    #[must_use]
    pub fn header(self, name: &str, value: impl AsRef<[u8]>) -> Filter {
        self.header_in(name, [value])
    }

    /// Some header named `name` must have one of `values` as its value (an empty set matches
    /// no record). Each call adds a condition: two on one name need not be met by one header.
    #[must_use]
    pub fn header_in<I, V>(mut self, name: &str, values: I) -> Filter
    where
        I: IntoIterator<Item = V>,
        V: AsRef<[u8]>,
    {
        self.headers.push(HeaderIn {
            name: name.as_bytes().into(),
            values: Values::of(values),
        });
        self
    }

    /// The records both filters accept (every condition of each).
    #[must_use]
    pub fn and(mut self, other: &Filter) -> Filter {
        if let Some(keys) = &other.keys {
            self.keys = Some(match self.keys.take() {
                Some(had) => had.intersect(keys),
                None => keys.clone(),
            });
        }
        self.prefixes.extend(other.prefixes.iter().cloned());
        self.headers.extend(other.headers.iter().cloned());
        self
    }

    /// Whether a record whose properties block is `block` (empty for a record without key and
    /// headers: [`crate::RecordRef::props_block`]) passes. A block that does not parse passes
    /// no condition. Allocates nothing.
    pub fn matches(&self, block: &[u8]) -> bool {
        if self.keys.is_some() || !self.prefixes.is_empty() {
            let Some(Some(key)) = props::key_of(block) else {
                return false;
            };
            if self.keys.as_ref().is_some_and(|set| !set.contains(key)) {
                return false;
            }
            if !self.prefixes.iter().all(|p| key.starts_with(p)) {
                return false;
            }
        }
        self.headers.iter().all(|cond| {
            props::find_header(block, |name, value| {
                props::same(name, &cond.name) && cond.values.contains(value)
            }) == Some(true)
        })
    }

    /// [`props::is_valid`] and [`Filter::matches`] of `block` in one walk: `None` when the block
    /// does not parse, otherwise whether the filter accepts it (a scan checks every record's
    /// block, the ones it refuses too). Allocates nothing.
    pub fn check_and_match(&self, block: &[u8]) -> Option<bool> {
        if block.is_empty() {
            return Some(self.is_empty());
        }
        if self.headers.len() > 64 {
            // More conditions than the walk's mask has bits: two walks.
            return props::is_valid(block).then(|| self.matches(block));
        }
        let wants_key = self.keys.is_some() || !self.prefixes.is_empty();
        let mut key_ok = !wants_key;
        // A bit per header condition not met yet.
        let mut unmet: u64 = match self.headers.len() {
            64 => u64::MAX,
            n => (1u64 << n) - 1,
        };
        let valid = props::walk(
            block,
            |key| {
                key_ok = self.keys.as_ref().is_none_or(|set| set.contains(key))
                    && self.prefixes.iter().all(|p| key.starts_with(p));
            },
            |name, value| {
                // A name equal to a condition's is UTF-8 (the condition's is a `str`).
                let mut known = false;
                for (i, cond) in self.headers.iter().enumerate() {
                    if props::same(name, &cond.name) {
                        known = true;
                        if cond.values.contains(value) {
                            unmet &= !(1u64 << i);
                        }
                    }
                }
                known
            },
        );
        valid.then_some(key_ok && unmet == 0)
    }

    /// `Ok` unless the filter can match no record at all (an empty set of keys or of a header's
    /// values, or two sets of keys with nothing in common): a caller's mistake worth an error
    /// rather than a consumer that silently skips everything. `what` names the filter.
    pub fn check(&self, what: &str) -> Result<()> {
        if self.keys.as_ref().is_some_and(|k| k.0.is_empty()) {
            return Err(Error::InvalidArgument(format!(
                "{what}: the set of accepted keys is empty, so no record would match"
            )));
        }
        if let Some(h) = self.headers.iter().find(|h| h.values.0.is_empty()) {
            return Err(Error::InvalidArgument(format!(
                "{what}: header {:?} has no accepted value, so no record would match",
                String::from_utf8_lossy(&h.name)
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn block(key: Option<&[u8]>, headers: &[(&str, &[u8])]) -> Vec<u8> {
        let mut out = Vec::new();
        props::encode(key, None, headers, "", &mut out).unwrap();
        out
    }

    /// What `matches` should say, written the plain way (allocating, decoding the whole block).
    fn reference(
        keys: &Option<Vec<Vec<u8>>>,
        prefixes: &[Vec<u8>],
        conds: &[(String, Vec<Vec<u8>>)],
        key: Option<&[u8]>,
        headers: &[(&str, &[u8])],
    ) -> bool {
        let key_ok = match (keys, key) {
            (None, _) => true,
            (Some(_), None) => false,
            (Some(set), Some(k)) => set.iter().any(|s| s == k),
        };
        let prefix_ok = prefixes
            .iter()
            .all(|p| key.is_some_and(|k| k.starts_with(p)));
        let headers_ok = conds.iter().all(|(n, vals)| {
            headers
                .iter()
                .any(|(hn, hv)| hn == n && vals.iter().any(|v| v == hv))
        });
        key_ok && prefix_ok && headers_ok
    }

    fn small_bytes() -> impl Strategy<Value = Vec<u8>> {
        proptest::collection::vec(0u8..3, 0..3)
    }

    proptest! {
        /// Random records and filters over a tiny alphabet (so that they match often): `matches`
        /// agrees with the reference.
        #[test]
        fn agrees_with_the_reference(
            key in proptest::option::of(small_bytes()),
            headers in proptest::collection::vec(("[ab]{0,2}", small_bytes()), 0..4),
            keys in proptest::option::of(proptest::collection::vec(small_bytes(), 1..12)),
            prefixes in proptest::collection::vec(small_bytes(), 0..2),
            conds in proptest::collection::vec(
                ("[ab]{0,2}", proptest::collection::vec(small_bytes(), 1..12)), 0..3),
        ) {
            let hs: Vec<(&str, &[u8])> =
                headers.iter().map(|(n, v)| (n.as_str(), v.as_slice())).collect();
            let b = block(key.as_deref(), &hs);
            let mut f = Filter::new();
            if let Some(k) = &keys {
                f = f.keys(k);
            }
            for p in &prefixes {
                f = f.key_prefix(p);
            }
            for (n, vals) in &conds {
                f = f.header_in(n, vals);
            }
            prop_assert!(f.check("f").is_ok());
            let want = reference(&keys, &prefixes, &conds, key.as_deref(), &hs);
            prop_assert_eq!(f.matches(&b), want);
            prop_assert_eq!(f.check_and_match(&b), Some(want));
            // AND of two halves is the whole.
            let (mut left, mut right) = (Filter::new(), Filter::new());
            if let Some(k) = &keys {
                left = left.keys(k);
            }
            for p in &prefixes {
                right = right.key_prefix(p);
            }
            for (i, (n, vals)) in conds.iter().enumerate() {
                if i % 2 == 0 { left = left.header_in(n, vals) } else { right = right.header_in(n, vals) }
            }
            prop_assert_eq!(left.clone().and(&right).matches(&b), want);
            prop_assert_eq!(left.matches(&b) && right.matches(&b), want);
        }

        /// Whatever the bytes, matching neither panics nor reads outside the block.
        #[test]
        fn any_bytes_are_matched_or_not(b in proptest::collection::vec(any::<u8>(), 0..64)) {
            let f = Filter::new().key_prefix(b"").header("", b"");
            let _ = f.matches(&b);
            let _ = Filter::new().keys([b"a", b"b"]).matches(&b);
            // The one walk agrees with the two.
            for f in [f, Filter::new().header("a", b"").header("b", b"x"), Filter::new()] {
                let want = props::is_valid(&b).then(|| f.matches(&b));
                prop_assert_eq!(f.check_and_match(&b), want);
            }
        }
    }

    #[test]
    fn an_empty_filter_matches_everything_and_a_keyless_record_no_key_condition() {
        let plain = block(None, &[]);
        assert!(plain.is_empty());
        assert!(Filter::new().is_empty() && Filter::new().matches(&plain));
        assert!(!Filter::new().key_prefix(b"").matches(&plain));
        assert!(Filter::new()
            .key_prefix(b"")
            .matches(&block(Some(b""), &[])));
        assert!(!Filter::new().key(b"").matches(&block(None, &[("k", b"")])));
        assert!(Filter::new().key(b"").matches(&block(Some(b""), &[])));
    }

    #[test]
    fn repeated_header_names_any_of_them_counts() {
        let b = block(Some(b"k"), &[("t", b"1"), ("t", b"2"), ("u", b"x")]);
        assert!(Filter::new().header("t", b"2").matches(&b));
        assert!(Filter::new()
            .header("t", b"1")
            .header("t", b"2")
            .matches(&b));
        assert!(Filter::new().header_in("t", [b"9", b"2"]).matches(&b));
        assert!(!Filter::new().header("t", b"x").matches(&b));
        assert!(!Filter::new().header("v", b"x").matches(&b));
        assert!(Filter::new().header("u", b"x").key(b"k").matches(&b));
        assert!(!Filter::new().header("u", b"x").key(b"j").matches(&b));
    }

    #[test]
    fn more_header_conditions_than_the_mask_has_bits() {
        let names: Vec<String> = (0..70).map(|i| format!("h{i}")).collect();
        let hs: Vec<(&str, &[u8])> = names.iter().map(|n| (n.as_str(), &b"v"[..])).collect();
        let b = block(None, &hs);
        let all = names.iter().fold(Filter::new(), |f, n| f.header(n, b"v"));
        assert_eq!(all.check_and_match(&b), Some(true));
        let first64 = names[..64]
            .iter()
            .fold(Filter::new(), |f, n| f.header(n, b"v"));
        assert_eq!(first64.check_and_match(&b), Some(true));
        let one_more = first64.header("h70", b"v");
        assert_eq!(one_more.check_and_match(&b), Some(false));
        assert_eq!(all.check_and_match(&b[..b.len() - 1]), None);
    }

    #[test]
    fn large_sets_are_searched_by_halves() {
        let keys: Vec<String> = (0..1000).map(|i| format!("key-{i}")).collect();
        let f = Filter::new().keys(&keys);
        for (i, k) in keys.iter().enumerate().step_by(37) {
            assert!(f.matches(&block(Some(k.as_bytes()), &[])), "{i}");
        }
        assert!(!f.matches(&block(Some(b"key-1000"), &[])));
        assert!(!f.matches(&block(Some(b"key-"), &[])));
    }

    #[test]
    fn sets_that_match_nothing_are_refused_by_check() {
        let e = Filter::new().keys::<[&[u8]; 0], _>([]).check("scan");
        assert!(matches!(e, Err(Error::InvalidArgument(m)) if m.contains("keys is empty")));
        let disjoint = Filter::new().key(b"a").keys([b"b"]);
        assert!(disjoint.check("scan").is_err());
        let e = Filter::new()
            .header_in::<[&[u8]; 0], _>("type", [])
            .check("poll");
        assert!(matches!(e, Err(Error::InvalidArgument(m)) if m.contains("\"type\"")));
        assert!(Filter::new().header("type", b"").check("poll").is_ok());
    }

    #[test]
    fn a_block_that_does_not_parse_passes_no_condition() {
        let mut b = block(Some(b"key"), &[("t", b"1")]);
        b.truncate(b.len() - 1);
        assert!(!Filter::new().header("t", b"1").matches(&b));
        assert!(!Filter::new().key_prefix(b"zz").matches(&[1, 5]));
        assert!(!Filter::new().key(b"k").matches(&[0x80]));
    }
}
