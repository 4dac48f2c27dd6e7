//! Configuration: a TOML file, overridden by environment variables, parsed by
//! serde into [`Settings`] with real types, then checked once at start.
//!
//! Every key can be overridden by an environment variable named
//! `INGEST__<SECTION>__<KEY>` (see [`env`]). Errors name the key, the value
//! and the rule. AWS credentials are deliberately not configurable here: they
//! come from the default provider chain (environment, profile, instance role)
//! and are never logged.
//!
//! Layout: this file holds the types and their defaults, `env.rs` the
//! overrides, `check.rs` the rules serde cannot express (ranges, cross-key
//! rules), `secret.rs` what may be printed.

mod check;
mod env;
mod secret;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Deserializer};

use crate::decode::{KeyAttr, KeyMode, KeySchema, KeyType};
use crate::throttle::budget::Budget;
use crate::throttle::StrategyConfig;

/// How to log is telemetry's; the config only reads it.
pub use crate::telemetry::{LogFormat, LogSettings};
pub use check::check_kafka_key_schema;
pub use env::ENV_PREFIX;
pub use secret::{is_secret, redacted};

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("config file {path} is not valid: {message}")]
    Parse { path: String, message: String },
    #[error("environment variable {var}: {message}")]
    Env { var: String, message: String },
    #[error("config key `{key}` = {value}: {rule}")]
    Invalid {
        key: String,
        value: String,
        rule: String,
    },
}

/// The configuration, parsed and checked.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    pub kafka: KafkaSettings,
    #[serde(default)]
    pub dynamodb: DynamoSettings,
    #[serde(default, rename = "route")]
    pub routes: Vec<Route>,
    #[serde(default)]
    pub pipeline: PipelineSettings,
    #[serde(default)]
    pub throttle: ThrottleSettings,
    #[serde(default)]
    pub log: LogSettings,
    #[serde(default)]
    pub ops: OpsSettings,
}

/// `Debug` shows secret properties redacted (`secret.rs`).
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaSettings {
    pub brokers: String,
    pub group_id: String,
    pub dead_letter_topic: String,
    #[serde(
        rename = "commit_interval_ms",
        deserialize_with = "millis",
        default = "two_s"
    )]
    pub commit_interval: Duration,
    #[serde(
        rename = "metadata_timeout_ms",
        deserialize_with = "millis",
        default = "ten_s"
    )]
    pub metadata_timeout: Duration,
    /// librdkafka properties passed through as given.
    #[serde(default)]
    pub properties: BTreeMap<String, String>,
    /// How the worker authenticates beyond the properties: `aws-msk-iam`
    /// signs OAUTHBEARER tokens with the AWS credential chain.
    #[serde(default)]
    pub auth: KafkaAuth,
    /// The MSK cluster's region (`auth = "aws-msk-iam"`; default: the AWS
    /// region chain, e.g. `AWS_REGION`).
    #[serde(default)]
    pub aws_region: Option<String>,
}

/// `[kafka] auth`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum KafkaAuth {
    /// Whatever the properties say (PLAINTEXT, SSL, SASL PLAIN or SCRAM).
    #[default]
    None,
    /// AWS MSK IAM: SASL/OAUTHBEARER over TLS with tokens signed from the
    /// AWS credential chain, refreshed before they expire.
    AwsMskIam,
}

/// The most batches a worker writes at once (`dynamodb.max_in_flight_batches`).
pub const MAX_IN_FLIGHT_BATCHES: usize = 256;

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DynamoSettings {
    pub endpoint_url: Option<String>,
    pub region: Option<String>,
    #[serde(rename = "request_timeout_ms", deserialize_with = "millis")]
    pub request_timeout: Duration,
    /// BatchWriteItem calls in flight at once, per table. 8: with 5 ms per
    /// call, 4 reached 0.79x of the broker's pace in `make bench-pipeline`
    /// (1 KB records), 8 all of it; the pacer, not this, holds the rate.
    pub max_in_flight_batches: usize,
    /// At start, how long DescribeTable retries an unreachable or
    /// unavailable DynamoDB before the worker gives up.
    #[serde(rename = "start_patience_s", deserialize_with = "secs")]
    pub start_patience: Duration,
}

impl Default for DynamoSettings {
    fn default() -> Self {
        Self {
            endpoint_url: None,
            region: None,
            request_timeout: ten_s(),
            max_in_flight_batches: 8,
            start_patience: Duration::from_secs(60),
        }
    }
}

/// One topic written to one table.
#[derive(Debug, Clone, Deserialize)]
#[serde(try_from = "RouteFile")]
pub struct Route {
    pub topic: String,
    pub table: String,
    pub key_mode: KeyMode,
    /// The key schema if configured; otherwise read with DescribeTable.
    pub key: Option<KeySchema>,
    /// The most the job may write to the table (with `[throttle]`'s, the
    /// lowest applies).
    pub budget: Budget,
}

/// A `[[route]]` as written in the file: the key in four flat keys.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RouteFile {
    topic: String,
    table: String,
    #[serde(default = "record")]
    key_mode: KeyMode,
    partition_key: Option<String>,
    #[serde(default = "string")]
    partition_key_type: KeyType,
    sort_key: Option<String>,
    #[serde(default = "number")]
    sort_key_type: KeyType,
    budget_fraction: Option<f64>,
    budget_wcu: Option<f64>,
}

impl TryFrom<RouteFile> for Route {
    type Error = String;

    fn try_from(r: RouteFile) -> Result<Self, String> {
        let key = match (r.partition_key, r.sort_key) {
            (None, Some(_)) => return Err("sort_key needs partition_key as well".into()),
            (None, None) => None,
            (Some(hash), sort) => Some(KeySchema {
                hash: KeyAttr {
                    name: hash,
                    kind: r.partition_key_type,
                },
                range: sort.map(|name| KeyAttr {
                    name,
                    kind: r.sort_key_type,
                }),
            }),
        };
        Ok(Route {
            topic: r.topic,
            table: r.table,
            key_mode: r.key_mode,
            key,
            budget: Budget {
                fraction: r.budget_fraction,
                wcu: r.budget_wcu,
            },
        })
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PipelineSettings {
    #[serde(rename = "batch_linger_ms", deserialize_with = "millis")]
    pub batch_linger: Duration,
    pub max_buffered_records: usize,
    /// Bytes of records read and not yet written, dead-lettered or given up,
    /// at most (the source pauses above it).
    pub max_buffered_bytes: usize,
    #[serde(rename = "drain_timeout_s", deserialize_with = "secs")]
    pub drain_timeout: Duration,
}

impl Default for PipelineSettings {
    fn default() -> Self {
        Self {
            batch_linger: Duration::from_millis(20),
            max_buffered_records: 5_000,
            max_buffered_bytes: 64 << 20,
            drain_timeout: Duration::from_secs(30),
        }
    }
}

/// The AWS SDK's own retry mode on the write path. `Off` is the product's
/// setting (one layer retries: ours); the others exist to compare against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SdkRetryMode {
    Off,
    Standard,
    Adaptive,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ThrottleSettings {
    /// The strategy, shared by every writer of a table in the process.
    pub strategy: StrategyConfig,
    /// A fixed pacing rate in WCU/s per table (strategies that steer a rate
    /// override it).
    pub pacing_rate: Option<f64>,
    /// Most capacity units the pacer releases at once.
    pub pacing_burst: NonZeroU32,
    /// How often to read the tables' provisioned capacity (DescribeTable);
    /// zero disables.
    #[serde(rename = "capacity_poll_s", deserialize_with = "secs")]
    pub capacity_poll: Duration,
    pub sdk_retry_mode: SdkRetryMode,
    /// The most the job writes to each table, as a fraction of its
    /// provisioned capacity (a `[[route]]` may set a lower one).
    pub budget_fraction: Option<f64>,
    /// The most the job writes to each table, WCU/s.
    pub budget_wcu: Option<f64>,
    /// Keys a key range (a partition) refused are paced apart from the
    /// table's other keys (see `throttle::hot`); false: every refusal slows
    /// the table.
    pub hot_keys: bool,
    /// The Kafka topic through which a job's workers share what their
    /// tables taught them (see `crate::lessons`); created when missing.
    /// Empty: each worker learns alone.
    pub lessons_topic: String,
    /// Other jobs (consumer groups) writing a table are heard on the
    /// lessons topic and the table is split between the busy ones (see
    /// `throttle::jobs`); false: another job is learned from throttles, as
    /// any other writer.
    pub split_with_jobs: bool,
}

impl ThrottleSettings {
    /// The budget `[throttle]` sets for every table.
    pub fn budget(&self) -> Budget {
        Budget {
            fraction: self.budget_fraction,
            wcu: self.budget_wcu,
        }
    }
}

impl Settings {
    /// The budget on `table`: the lowest of `[throttle]`'s and those of the
    /// routes writing to it.
    pub fn budget_for(&self, table: &str) -> Budget {
        self.routes
            .iter()
            .filter(|r| r.table == table)
            .fold(self.throttle.budget(), |b, r| b.min(r.budget))
    }
}

impl Default for ThrottleSettings {
    fn default() -> Self {
        Self {
            strategy: StrategyConfig::default(),
            pacing_rate: None,
            pacing_burst: NonZeroU32::new(25).expect("non-zero"),
            capacity_poll: Duration::from_secs(2),
            sdk_retry_mode: SdkRetryMode::Off,
            budget_fraction: None,
            budget_wcu: None,
            hot_keys: true,
            lessons_topic: DEFAULT_LESSONS_TOPIC.to_string(),
            split_with_jobs: true,
        }
    }
}

/// `[throttle] lessons_topic`'s default.
pub const DEFAULT_LESSONS_TOPIC: &str = "ingest-lessons";

/// How progress is shown in `--until-caught-up` mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProgressMode {
    /// A progress bar when stderr is a terminal, log lines otherwise.
    Auto,
    /// Log lines only.
    Log,
    Off,
}

/// The operator's side: the HTTP endpoints and progress reporting.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OpsSettings {
    /// Where to serve `/metrics`, `/healthz` and `/readyz` (None: not served).
    pub listen: Option<SocketAddr>,
    /// `/readyz` fails when records wait and nothing was written for this long.
    #[serde(rename = "stuck_after_s", deserialize_with = "secs")]
    pub stuck_after: Duration,
    pub progress: ProgressMode,
    #[serde(rename = "progress_interval_s", deserialize_with = "secs")]
    pub progress_interval: Duration,
    /// How often librdkafka reports consumer lag (`statistics.interval.ms`),
    /// when the endpoints are served; 0 disables.
    #[serde(rename = "lag_interval_ms", deserialize_with = "millis")]
    pub lag_interval: Duration,
}

impl Default for OpsSettings {
    fn default() -> Self {
        Self {
            listen: None,
            stuck_after: Duration::from_secs(300),
            progress: ProgressMode::Auto,
            progress_interval: ten_s(),
            lag_interval: Duration::from_secs(5),
        }
    }
}

impl Settings {
    /// Reads `path`, applies `INGEST__*` overrides from `env`, checks.
    pub fn load(
        path: &Path,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Settings, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::from_toml(&text, &path.display().to_string(), env)
    }

    /// Parses TOML text (named `origin` in errors), applies overrides, checks.
    pub fn from_toml(
        text: &str,
        origin: &str,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Settings, ConfigError> {
        let parse_err = |message: String| ConfigError::Parse {
            path: origin.to_string(),
            message,
        };
        let mut doc: toml::Value = toml::from_str(text).map_err(|e| parse_err(e.to_string()))?;
        let vars = env::apply(&mut doc, env)?;
        let settings: Settings = serde_path_to_error::deserialize(doc).map_err(|e| {
            let key = e.path().to_string();
            let mut message = format!("`{key}`: {}", e.inner().message());
            if let Some(var) = env::var_for(&vars, &key) {
                message.push_str(&format!(" (set by environment variable {var})"));
            }
            parse_err(message)
        })?;
        check::settings(&settings)?;
        Ok(settings)
    }
}

fn millis<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    u64::deserialize(d).map(Duration::from_millis)
}

fn secs<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    u64::deserialize(d).map(Duration::from_secs)
}

fn two_s() -> Duration {
    Duration::from_secs(2)
}

fn ten_s() -> Duration {
    Duration::from_secs(10)
}

fn record() -> KeyMode {
    KeyMode::Record
}

fn string() -> KeyType {
    KeyType::S
}

fn number() -> KeyType {
    KeyType::N
}
