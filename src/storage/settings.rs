//! The settings a store's writer ran with, recorded in the metadata: the store-wide ones are the
//! default of every later open (an open names only what it changes), and tools reading the store
//! (`rmqlog stat`) show them, never their own defaults.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::options::{Options, PerDir, StoreSetting, Strategy, TierOptions};

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
    /// Recorded since consumers hold retention; a record from before has the default.
    #[serde(default = "default_idle_hours")]
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
    /// Recorded since appends with message ids; a record from before has the defaults.
    #[serde(default = "default_dedup_window_ms")]
    pub dedup_window_ms: u64,
    #[serde(default)]
    pub dedup_window_records: Option<u64>,
    /// The remote tier's URL and the policy its uploads and local deletions follow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier: Option<TierPolicy>,
}

fn default_idle_hours() -> Option<f64> {
    Options::default().consumer_idle_hours
}

fn default_dedup_window_ms() -> u64 {
    millis(Options::default().dedup_window)
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
            delete_hours: opts.delete_hours.as_ref().map(|h| {
                let mut h = h.clone();
                h.sort_unstable();
                h.dedup();
                h
            }),
            max_used_ratio: opts.max_used_ratio.default,
            max_used_ratio_by_dir: by_dir(&opts.max_used_ratio.overrides),
            force_clean_ratio: opts.force_clean_ratio.default,
            force_clean_ratio_by_dir: by_dir(&opts.force_clean_ratio.overrides),
            min_free_bytes: opts.min_free_bytes,
            clean_interval_ms: millis(opts.clean_interval),
            dedup_window_ms: millis(opts.dedup_window),
            dedup_window_records: opts.dedup_window_records,
            tier: opts.tier.as_ref().map(|t| TierPolicy {
                url: t.url.trim_end_matches('/').to_string(),
                after_ms: millis(t.after),
                local_retention_ms: t.local_retention.map(millis),
                local_retention_bytes: t.local_retention_bytes,
            }),
        }
    }
}

/// A store-wide setting an open changes: its name, the recorded value, the open's value.
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    pub setting: &'static str,
    pub recorded: String,
    pub given: String,
}

impl std::fmt::Display for Change {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} from {} to {}",
            self.setting, self.recorded, self.given
        )
    }
}

impl WriterSettings {
    /// These settings with each per-directory ratio keyed by the path `now` gives for the path
    /// it was recorded at: a store moved or copied keeps its ratios.
    pub(crate) fn with_dirs_at(&self, now: impl Fn(&str) -> PathBuf) -> WriterSettings {
        let moved = |by_dir: &[(String, Option<f64>)]| {
            let moved: Vec<(PathBuf, Option<f64>)> =
                by_dir.iter().map(|(p, r)| (now(p), *r)).collect();
            self::by_dir(&moved)
        };
        WriterSettings {
            max_used_ratio_by_dir: moved(&self.max_used_ratio_by_dir),
            force_clean_ratio_by_dir: moved(&self.force_clean_ratio_by_dir),
            ..self.clone()
        }
    }

    /// Takes into `opts` every store-wide setting it does not name ([`Options::names`]) from
    /// these. A custom placement function cannot be recorded: an open that names none places
    /// by round robin.
    pub(crate) fn fill(&self, opts: &mut Options) {
        // Read before anything is filled in: a filled value may differ from the default.
        let named = StoreSetting::ALL.map(|s| opts.names(s));
        let names = |s: StoreSetting| named[s as usize];
        let ms = Duration::from_millis;
        let by_dir = |default: Option<f64>, by_dir: &[(String, Option<f64>)]| PerDir {
            default,
            overrides: by_dir.iter().map(|(p, r)| (PathBuf::from(p), *r)).collect(),
        };
        let strategy = match names(StoreSetting::Strategy) {
            false => Strategy::parse(&self.strategy).ok(),
            true => None,
        };
        let tier_url = !names(StoreSetting::TierUrl);
        let tier_after = !names(StoreSetting::TierAfter);
        let local = !names(StoreSetting::LocalRetention);
        let local_bytes = !names(StoreSetting::LocalRetentionBytes);
        if !names(StoreSetting::SegmentSize) {
            opts.segment_size = self.segment_size;
        }
        if let Some(s) = strategy {
            opts.strategy = s;
        }
        if !names(StoreSetting::RetentionHours) {
            opts.retention_hours = self.retention_hours;
        }
        if !names(StoreSetting::DeleteHours) {
            opts.delete_hours.clone_from(&self.delete_hours);
        }
        if !names(StoreSetting::RetentionBytes) {
            opts.retention_bytes = self.retention_bytes;
        }
        if !names(StoreSetting::RetainUnconsumed) {
            opts.retain_unconsumed = self.retain_unconsumed;
        }
        if !names(StoreSetting::ConsumerIdleHours) {
            opts.consumer_idle_hours = self.consumer_idle_hours;
        }
        if !names(StoreSetting::MaxUsedRatio) {
            opts.max_used_ratio = by_dir(self.max_used_ratio, &self.max_used_ratio_by_dir);
        }
        if !names(StoreSetting::ForceCleanRatio) {
            opts.force_clean_ratio = by_dir(self.force_clean_ratio, &self.force_clean_ratio_by_dir);
        }
        if !names(StoreSetting::MinFreeBytes) {
            opts.min_free_bytes = self.min_free_bytes;
        }
        if !names(StoreSetting::CleanInterval) {
            opts.clean_interval = ms(self.clean_interval_ms);
        }
        if !names(StoreSetting::DedupWindow) {
            opts.dedup_window = ms(self.dedup_window_ms);
        }
        if !names(StoreSetting::DedupWindowRecords) {
            opts.dedup_window_records = self.dedup_window_records;
        }
        let Some(recorded) = &self.tier else {
            return;
        };
        if tier_url {
            opts.tier = Some(TierOptions::new(recorded.url.clone()));
        }
        // The policy of the recorded tier only: another URL starts from its own defaults.
        if let Some(t) = opts
            .tier
            .as_mut()
            .filter(|t| t.url.trim_end_matches('/') == recorded.url)
        {
            if tier_after {
                t.after = ms(recorded.after_ms);
            }
            if local {
                t.local_retention = recorded.local_retention_ms.map(ms);
            }
            if local_bytes {
                t.local_retention_bytes = recorded.local_retention_bytes;
            }
        }
    }

    /// The store-wide settings where `other` (what an open would record) differs from these:
    /// segment size, placement, retention, disk limits, cleaning, the tier. Each open keeps its
    /// own durability (`flush`, `flush_interval_ms`) and `max_message_size`.
    pub fn changes(&self, other: &WriterSettings) -> Vec<Change> {
        self.policy()
            .into_iter()
            .zip(other.policy())
            .filter(|((_, a), (_, b))| a != b)
            .map(|((setting, recorded), (_, given))| Change {
                setting,
                recorded,
                given,
            })
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
            ("dedup_window_ms", self.dedup_window_ms.to_string()),
            ("dedup_window_records", opt(self.dedup_window_records)),
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

/// The overrides in path order: the same map, however given, records and compares the same.
fn by_dir(overrides: &[(PathBuf, Option<f64>)]) -> Vec<(String, Option<f64>)> {
    let mut by_dir: Vec<(String, Option<f64>)> = overrides
        .iter()
        .map(|(p, r)| (p.to_string_lossy().into_owned(), *r))
        .collect();
    by_dir.sort_by(|a, b| a.0.cmp(&b.0));
    by_dir
}

fn millis(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_open_takes_what_it_does_not_name_and_keeps_what_it_names() {
        let store = Options::broker()
            .segment_size(8192)
            .strategy(Strategy::MostFree)
            .retain_unconsumed(true)
            .consumer_idle_hours(None)
            .clean_interval(Duration::from_secs(60))
            .dedup_window(Duration::from_secs(5))
            .dedup_window_records(Some(1000))
            .tier(Some(TierOptions {
                after: Duration::from_secs(5),
                ..TierOptions::new("file:///t")
            }));
        let recorded = WriterSettings::of(&store);
        let mut forgetful = Options::default();
        recorded.fill(&mut forgetful);
        assert_eq!(WriterSettings::of(&forgetful), recorded);
        assert!(recorded.changes(&WriterSettings::of(&forgetful)).is_empty());
        // Named, even as the default: kept, and reported as a change.
        let mut naming = Options::default().retain_unconsumed(false);
        recorded.fill(&mut naming);
        let changes = recorded.changes(&WriterSettings::of(&naming));
        let said: Vec<String> = changes.iter().map(ToString::to_string).collect();
        assert_eq!(said, ["retain_unconsumed from True to False"]);
        assert_eq!(naming.segment_size, 8192);
        assert_eq!(
            naming.tier.as_ref().map(|t| t.after),
            Some(Duration::from_secs(5))
        );
        // A function cannot be recorded: round robin, reported.
        let custom = WriterSettings::of(&Options::default().strategy(Strategy::Custom(
            std::sync::Arc::new(|_: &[crate::DirInfo], _: u64| None),
        )));
        let mut next = Options::default();
        custom.fill(&mut next);
        assert_eq!(next.strategy.name(), "round_robin");
        assert_eq!(custom.changes(&WriterSettings::of(&next)).len(), 1);
    }

    #[test]
    fn a_record_from_before_consumers_held_retention_has_the_default_idle_hours() {
        let mut json = serde_json::to_value(WriterSettings::of(&Options::default())).unwrap();
        let fields = json.as_object_mut().unwrap();
        fields.remove("retain_unconsumed");
        fields.remove("consumer_idle_hours");
        fields.remove("dedup_window_ms");
        fields.remove("dedup_window_records");
        let old: WriterSettings = serde_json::from_value(json).unwrap();
        assert_eq!(old.dedup_window_ms, 120_000);
        assert_eq!(old.dedup_window_records, None);
        assert_eq!(
            old.consumer_idle_hours,
            Options::default().consumer_idle_hours
        );
        assert!(!old.retain_unconsumed);
    }
}
