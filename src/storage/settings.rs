//! The settings a store's writer ran with, recorded in the metadata so that tools reading the
//! store (`rmqlog stat`) show the store's settings, never their own defaults.

use serde::{Deserialize, Serialize};

use crate::options::Options;

/// The options of the writer that last opened the store. `max_used_ratio` and
/// `force_clean_ratio` are the values for directories without an override; the overrides are in
/// the `_by_dir` lists.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WriterSettings {
    /// The rmqlog version of that writer.
    pub version: String,
    pub segment_size: u64,
    /// A strategy's name (`custom` for a function).
    pub strategy: String,
    /// `async`, `sync` or `none`.
    pub flush: String,
    pub flush_interval_ms: u64,
    pub max_message_size: u32,
    pub retention_hours: Option<f64>,
    pub retention_bytes: Option<u64>,
    #[serde(default)]
    pub retain_unconsumed: bool,
    #[serde(default)]
    pub consumer_idle_hours: Option<f64>,
    pub delete_hours: Option<Vec<u32>>,
    pub max_used_ratio: Option<f64>,
    #[serde(default)]
    pub max_used_ratio_by_dir: Vec<(String, Option<f64>)>,
    pub force_clean_ratio: Option<f64>,
    #[serde(default)]
    pub force_clean_ratio_by_dir: Vec<(String, Option<f64>)>,
    pub min_free_bytes: u64,
    pub clean_interval_ms: u64,
    /// The remote tier's URL and the policy its uploads and local deletions follow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier: Option<TierPolicy>,
}

/// The store-wide part of the tier options: where segments go, and when.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TierPolicy {
    pub url: String,
    pub after_ms: u64,
    pub local_retention_ms: Option<u64>,
    pub local_retention_bytes: Option<u64>,
}

impl WriterSettings {
    /// What a writer opened with `opts` records.
    pub fn of(opts: &Options) -> WriterSettings {
        WriterSettings {
            version: env!("CARGO_PKG_VERSION").to_string(),
            segment_size: opts.segment_size,
            strategy: opts.strategy.name().to_string(),
            flush: opts.flush.as_str().to_string(),
            flush_interval_ms: millis(opts.flush_interval),
            max_message_size: opts.max_message_size,
            retention_hours: opts.retention_hours,
            retention_bytes: opts.retention_bytes,
            retain_unconsumed: opts.retain_unconsumed,
            consumer_idle_hours: opts.consumer_idle_hours,
            delete_hours: opts.delete_hours.clone(),
            max_used_ratio: opts.max_used_ratio.default,
            max_used_ratio_by_dir: by_dir(&opts.max_used_ratio.overrides),
            force_clean_ratio: opts.force_clean_ratio.default,
            force_clean_ratio_by_dir: by_dir(&opts.force_clean_ratio.overrides),
            min_free_bytes: opts.min_free_bytes,
            clean_interval_ms: millis(opts.clean_interval),
            tier: opts.tier.as_ref().map(|t| TierPolicy {
                url: t.url.trim_end_matches('/').to_string(),
                after_ms: millis(t.after),
                local_retention_ms: t.local_retention.map(millis),
                local_retention_bytes: t.local_retention_bytes,
            }),
        }
    }
}

impl WriterSettings {
    /// The store-wide policy fields where `other` (a shared writer joining) differs from these
    /// (the writers open): segment size, placement, retention, disk limits, cleaning, the tier.
    /// Each process keeps its own durability (`flush`, `flush_interval_ms`) and
    /// `max_message_size`.
    pub fn policy_differences(&self, other: &WriterSettings) -> Vec<String> {
        self.policy()
            .into_iter()
            .zip(other.policy())
            .filter(|((_, a), (_, b))| a != b)
            .map(|((name, a), (_, b))| format!("{name} is {a} there, {b} here"))
            .collect()
    }

    /// The store-wide policy as (option, value as a user would write it).
    fn policy(&self) -> Vec<(&'static str, String)> {
        fn opt<T: std::fmt::Display>(v: Option<T>) -> String {
            v.map_or_else(|| "None".to_string(), |v| v.to_string())
        }
        let ratio = |default: Option<f64>, by_dir: &[(String, Option<f64>)]| {
            let overrides: Vec<String> = by_dir
                .iter()
                .map(|(dir, r)| format!("{dir}: {}", opt(*r)))
                .collect();
            match overrides.is_empty() {
                true => opt(default),
                false => format!("{} ({})", opt(default), overrides.join(", ")),
            }
        };
        let tier = self.tier.as_ref();
        vec![
            ("segment_size", self.segment_size.to_string()),
            ("strategy", self.strategy.clone()),
            ("retention_hours", opt(self.retention_hours)),
            ("retention_bytes", opt(self.retention_bytes)),
            (
                "retain_unconsumed",
                if self.retain_unconsumed {
                    "True"
                } else {
                    "False"
                }
                .into(),
            ),
            ("consumer_idle_hours", opt(self.consumer_idle_hours)),
            (
                "delete_hours",
                self.delete_hours
                    .as_ref()
                    .map_or_else(|| "None".into(), |h| format!("{h:?}")),
            ),
            (
                "max_used_ratio",
                ratio(self.max_used_ratio, &self.max_used_ratio_by_dir),
            ),
            (
                "force_clean_ratio",
                ratio(self.force_clean_ratio, &self.force_clean_ratio_by_dir),
            ),
            ("min_free_bytes", self.min_free_bytes.to_string()),
            ("clean_interval_ms", self.clean_interval_ms.to_string()),
            ("tier_url", opt(tier.map(|t| &t.url))),
            ("tier_after (ms)", opt(tier.map(|t| t.after_ms))),
            (
                "local_retention_hours (ms)",
                opt(tier.and_then(|t| t.local_retention_ms)),
            ),
            (
                "local_retention_bytes",
                opt(tier.and_then(|t| t.local_retention_bytes)),
            ),
        ]
    }
}

fn by_dir(overrides: &[(std::path::PathBuf, Option<f64>)]) -> Vec<(String, Option<f64>)> {
    overrides
        .iter()
        .map(|(p, r)| (p.to_string_lossy().into_owned(), *r))
        .collect()
}

fn millis(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
