//! Configuration: a TOML file, overridden by environment variables, validated
//! once at start into [`Settings`] with real types.
//!
//! Every key can be overridden by an environment variable named
//! `INGEST__<SECTION>__<KEY>` (double underscores separate levels, names are
//! case-insensitive, array elements are addressed by index:
//! `INGEST__ROUTE__0__TABLE=orders`). Under `kafka.properties` a single
//! underscore stands for a dot: `INGEST__KAFKA__PROPERTIES__SASL_MECHANISMS`
//! sets `sasl.mechanisms`. An override keeps the type of the key it replaces.
//!
//! Validation errors name the key, the value and the rule. AWS credentials are
//! deliberately not configurable here: they come from the default provider
//! chain (environment, profile, instance role) and are never logged.

use std::collections::BTreeMap;
use std::num::NonZeroU32;
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;

use crate::decode::{KeyAttr, KeyMode, KeySchema, KeyType};
use crate::throttle::StrategyConfig;

/// Prefix of the environment variables that override config keys.
pub const ENV_PREFIX: &str = "INGEST__";

/// Kafka properties the worker owns; setting them would break its guarantees.
const RESERVED_KAFKA_PROPERTIES: &[&str] = &[
    "bootstrap.servers",
    "group.id",
    "enable.auto.commit",
    "enable.auto.offset.store",
];

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

fn invalid(
    key: impl Into<String>,
    value: impl std::fmt::Debug,
    rule: impl Into<String>,
) -> ConfigError {
    ConfigError::Invalid {
        key: key.into(),
        value: format!("{value:?}"),
        rule: rule.into(),
    }
}

// ---------------------------------------------------------------- raw (serde)

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    kafka: RawKafka,
    #[serde(default)]
    dynamodb: RawDynamo,
    #[serde(default, rename = "route")]
    routes: Vec<RawRoute>,
    #[serde(default)]
    pipeline: RawPipeline,
    #[serde(default)]
    throttle: RawThrottle,
    #[serde(default)]
    log: RawLog,
    #[serde(default)]
    ops: RawOps,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawKafka {
    brokers: String,
    group_id: String,
    dead_letter_topic: String,
    #[serde(default = "d_commit_interval_ms")]
    commit_interval_ms: u64,
    #[serde(default = "d_metadata_timeout_ms")]
    metadata_timeout_ms: u64,
    #[serde(default)]
    properties: BTreeMap<String, String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDynamo {
    endpoint_url: Option<String>,
    region: Option<String>,
    #[serde(default = "d_request_timeout_ms")]
    request_timeout_ms: u64,
    #[serde(default = "d_max_in_flight")]
    max_in_flight_batches: usize,
    #[serde(default = "d_start_patience_s")]
    start_patience_s: u64,
}

impl Default for RawDynamo {
    fn default() -> Self {
        Self {
            endpoint_url: None,
            region: None,
            request_timeout_ms: d_request_timeout_ms(),
            max_in_flight_batches: d_max_in_flight(),
            start_patience_s: d_start_patience_s(),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRoute {
    topic: String,
    table: String,
    #[serde(default = "d_key_mode")]
    key_mode: String,
    partition_key: Option<String>,
    #[serde(default = "d_key_type")]
    partition_key_type: String,
    sort_key: Option<String>,
    #[serde(default = "d_sort_key_type")]
    sort_key_type: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPipeline {
    #[serde(default = "d_linger_ms")]
    batch_linger_ms: u64,
    #[serde(default = "d_max_buffered")]
    max_buffered_records: usize,
    #[serde(default = "d_max_buffered_bytes")]
    max_buffered_bytes: u64,
    #[serde(default = "d_drain_timeout_s")]
    drain_timeout_s: u64,
}

impl Default for RawPipeline {
    fn default() -> Self {
        Self {
            batch_linger_ms: d_linger_ms(),
            max_buffered_records: d_max_buffered(),
            max_buffered_bytes: d_max_buffered_bytes(),
            drain_timeout_s: d_drain_timeout_s(),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawThrottle {
    #[serde(default)]
    strategy: StrategyConfig,
    pacing_rate: Option<f64>,
    #[serde(default = "d_pacing_burst")]
    pacing_burst: u32,
    #[serde(default = "d_capacity_poll_s")]
    capacity_poll_s: u64,
    #[serde(default = "d_sdk_retry_mode")]
    sdk_retry_mode: String,
}

impl Default for RawThrottle {
    fn default() -> Self {
        Self {
            strategy: StrategyConfig::default(),
            pacing_rate: None,
            pacing_burst: d_pacing_burst(),
            capacity_poll_s: d_capacity_poll_s(),
            sdk_retry_mode: d_sdk_retry_mode(),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLog {
    #[serde(default = "d_log_format")]
    format: String,
    #[serde(default = "d_log_level")]
    level: String,
}

impl Default for RawLog {
    fn default() -> Self {
        Self {
            format: d_log_format(),
            level: d_log_level(),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOps {
    listen: Option<String>,
    #[serde(default = "d_stuck_after_s")]
    stuck_after_s: u64,
    #[serde(default = "d_progress")]
    progress: String,
    #[serde(default = "d_progress_interval_s")]
    progress_interval_s: u64,
    #[serde(default = "d_lag_interval_ms")]
    lag_interval_ms: u64,
}

impl Default for RawOps {
    fn default() -> Self {
        Self {
            listen: None,
            stuck_after_s: d_stuck_after_s(),
            progress: d_progress(),
            progress_interval_s: d_progress_interval_s(),
            lag_interval_ms: d_lag_interval_ms(),
        }
    }
}

fn d_stuck_after_s() -> u64 {
    300
}
fn d_progress() -> String {
    "auto".into()
}
fn d_progress_interval_s() -> u64 {
    10
}
fn d_lag_interval_ms() -> u64 {
    5_000
}
fn d_commit_interval_ms() -> u64 {
    2_000
}
fn d_metadata_timeout_ms() -> u64 {
    10_000
}
fn d_request_timeout_ms() -> u64 {
    10_000
}
fn d_start_patience_s() -> u64 {
    60
}
fn d_max_in_flight() -> usize {
    4
}
fn d_key_mode() -> String {
    "record".into()
}
fn d_key_type() -> String {
    "S".into()
}
fn d_sort_key_type() -> String {
    "N".into()
}
fn d_linger_ms() -> u64 {
    20
}
fn d_max_buffered() -> usize {
    5_000
}
fn d_max_buffered_bytes() -> u64 {
    64 * 1024 * 1024
}
fn d_drain_timeout_s() -> u64 {
    30
}
fn d_pacing_burst() -> u32 {
    25
}
fn d_capacity_poll_s() -> u64 {
    5
}
fn d_sdk_retry_mode() -> String {
    "off".into()
}
fn d_log_format() -> String {
    "human".into()
}
fn d_log_level() -> String {
    "info".into()
}

// ---------------------------------------------------------------- validated

/// The validated configuration.
#[derive(Debug, Clone)]
pub struct Settings {
    pub kafka: KafkaSettings,
    pub dynamodb: DynamoSettings,
    pub routes: Vec<Route>,
    pub pipeline: PipelineSettings,
    pub throttle: ThrottleSettings,
    pub log: LogSettings,
    pub ops: OpsSettings,
}

#[derive(Clone)]
pub struct KafkaSettings {
    pub brokers: String,
    pub group_id: String,
    pub dead_letter_topic: String,
    pub commit_interval: Duration,
    pub metadata_timeout: Duration,
    /// librdkafka properties passed through as given.
    pub properties: BTreeMap<String, String>,
}

/// Secret values never appear in output: `Debug` shows them redacted.
impl std::fmt::Debug for KafkaSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaSettings")
            .field("brokers", &self.brokers)
            .field("group_id", &self.group_id)
            .field("dead_letter_topic", &self.dead_letter_topic)
            .field("commit_interval", &self.commit_interval)
            .field("metadata_timeout", &self.metadata_timeout)
            .field("properties", &redacted(&self.properties))
            .finish()
    }
}

/// Whether a Kafka property holds a secret (passwords, keys, tokens, JAAS
/// and OAUTHBEARER configs, and SASL usernames, which are API keys on some
/// clouds): its value is never printed.
pub fn is_secret(key: &str) -> bool {
    const MARKS: &[&str] = &[
        "password",
        "username",
        "secret",
        "token",
        "jaas",
        "credential",
        "private",
        ".key.pem",
        "oauthbearer.config",
        "ssl.key",
        "keystore",
        "truststore",
    ];
    let key = key.to_ascii_lowercase();
    MARKS.iter().any(|m| key.contains(m))
}

/// A property's value as it may be shown: `<redacted>` for secrets.
fn shown<'a>(key: &str, value: &'a str) -> &'a str {
    if is_secret(key) {
        "<redacted>"
    } else {
        value
    }
}

/// The properties with every secret value replaced by `<redacted>`.
pub fn redacted(props: &BTreeMap<String, String>) -> BTreeMap<&str, &str> {
    props
        .iter()
        .map(|(k, v)| (k.as_str(), shown(k, v)))
        .collect()
}

#[derive(Debug, Clone)]
pub struct DynamoSettings {
    pub endpoint_url: Option<String>,
    pub region: Option<String>,
    pub request_timeout: Duration,
    /// BatchWriteItem calls in flight at once, per table.
    pub max_in_flight_batches: usize,
    /// At start, how long DescribeTable retries an unreachable or
    /// unavailable DynamoDB before the worker gives up.
    pub start_patience: Duration,
}

/// One topic written to one table.
#[derive(Debug, Clone)]
pub struct Route {
    pub topic: String,
    pub table: String,
    pub key_mode: KeyMode,
    /// The key schema if configured; otherwise read with DescribeTable.
    pub key: Option<KeySchema>,
}

#[derive(Debug, Clone)]
pub struct PipelineSettings {
    pub batch_linger: Duration,
    pub max_buffered_records: usize,
    /// Bytes of records read and not yet written, dead-lettered or given up,
    /// at most (the source pauses above it).
    pub max_buffered_bytes: usize,
    pub drain_timeout: Duration,
}

/// The AWS SDK's own retry mode on the write path. `Off` is the product's
/// setting (one layer retries: ours); the others exist to compare against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SdkRetryMode {
    Off,
    Standard,
    Adaptive,
}

#[derive(Debug, Clone)]
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
    pub capacity_poll: Duration,
    pub sdk_retry_mode: SdkRetryMode,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Human,
    Json,
}

#[derive(Debug, Clone)]
pub struct LogSettings {
    pub format: LogFormat,
    pub level: String,
}

/// How progress is shown in `--until-caught-up` mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProgressMode {
    /// A progress bar when stderr is a terminal, log lines otherwise.
    Auto,
    /// Log lines only.
    Log,
    Off,
}

/// The operator's side: the HTTP endpoints and progress reporting.
#[derive(Debug, Clone)]
pub struct OpsSettings {
    /// Where to serve `/metrics`, `/healthz` and `/readyz` (None: not served).
    pub listen: Option<std::net::SocketAddr>,
    /// `/readyz` fails when records wait and nothing was written for this long.
    pub stuck_after: Duration,
    pub progress: ProgressMode,
    pub progress_interval: Duration,
    /// How often librdkafka reports consumer lag (`statistics.interval.ms`),
    /// when the endpoints are served; 0 disables.
    pub lag_interval: Duration,
}

impl Settings {
    /// Reads `path`, applies `INGEST__*` overrides from `env`, validates.
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

    /// Parses TOML text (named `origin` in errors), applies overrides, validates.
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
        let mut overrides: Vec<_> = env
            .into_iter()
            .filter(|(k, _)| k.starts_with(ENV_PREFIX))
            .collect();
        overrides.sort();
        for (var, value) in &overrides {
            apply_override(&mut doc, var, value)?;
        }
        let raw: RawConfig = doc.try_into().map_err(|e: toml::de::Error| {
            let mut message = e.to_string();
            // Name the variable when the offending key came from the environment.
            for (var, _) in &overrides {
                let key = var[ENV_PREFIX.len()..]
                    .to_ascii_lowercase()
                    .replace("__", ".");
                if message.contains(&format!("`{key}`")) {
                    message.push_str(&format!(" (set by environment variable {var})"));
                }
            }
            parse_err(message)
        })?;
        raw.validate()
    }
}

/// Applies one `INGEST__A__B__0__C=value` override to the document.
fn apply_override(doc: &mut toml::Value, var: &str, value: &str) -> Result<(), ConfigError> {
    let env_err = |message: String| ConfigError::Env {
        var: var.to_string(),
        message,
    };
    let path: Vec<String> = var[ENV_PREFIX.len()..]
        .split("__")
        .map(|s| s.to_ascii_lowercase())
        .collect();
    if path.iter().any(String::is_empty) {
        return Err(env_err("empty path segment".into()));
    }
    let in_properties = path.len() == 3 && path[0] == "kafka" && path[1] == "properties";
    let mut node = doc;
    for (i, segment) in path.iter().enumerate() {
        let last = i + 1 == path.len();
        let segment = if in_properties && last {
            segment.replace('_', ".")
        } else {
            segment.clone()
        };
        node = match node {
            toml::Value::Table(t) => {
                if last {
                    let new = typed_like(t.get(&segment), value, in_properties).map_err(env_err)?;
                    t.insert(segment, new);
                    return Ok(());
                }
                t.entry(segment)
                    .or_insert_with(|| toml::Value::Table(Default::default()))
            }
            toml::Value::Array(a) => {
                let idx: usize = segment
                    .parse()
                    .map_err(|_| env_err(format!("`{segment}` must be an array index")))?;
                let len = a.len();
                let slot = a
                    .get_mut(idx)
                    .ok_or_else(|| env_err(format!("index {idx} is past the {len} elements")))?;
                if last {
                    *slot = typed_like(Some(slot), value, false).map_err(env_err)?;
                    return Ok(());
                }
                slot
            }
            _ => {
                return Err(env_err(format!(
                    "`{segment}` is below a key that is not a table"
                )))
            }
        };
    }
    Ok(())
}

/// Types an override like the value it replaces; infers when the key is new.
fn typed_like(
    old: Option<&toml::Value>,
    raw: &str,
    force_string: bool,
) -> Result<toml::Value, String> {
    use toml::Value as V;
    let bad = |what: &str| format!("{raw:?} is not {what}");
    Ok(match old {
        _ if force_string => V::String(raw.into()),
        Some(V::String(_)) => V::String(raw.into()),
        Some(V::Integer(_)) => V::Integer(raw.parse().map_err(|_| bad("an integer"))?),
        Some(V::Float(_)) => V::Float(raw.parse().map_err(|_| bad("a number"))?),
        Some(V::Boolean(_)) => V::Boolean(raw.parse().map_err(|_| bad("true or false"))?),
        Some(_) => return Err("cannot override a table or an array with one value".into()),
        None => {
            if let Ok(i) = raw.parse::<i64>() {
                V::Integer(i)
            } else if let Ok(f) = raw.parse::<f64>() {
                V::Float(f)
            } else if let Ok(b) = raw.parse::<bool>() {
                V::Boolean(b)
            } else {
                V::String(raw.into())
            }
        }
    })
}

impl RawConfig {
    fn validate(self) -> Result<Settings, ConfigError> {
        let kafka = self.kafka.validate()?;
        if self.routes.is_empty() {
            return Err(invalid(
                "route",
                "[]",
                "at least one [[route]] (topic -> table) is required",
            ));
        }
        let mut routes = Vec::new();
        for (i, r) in self.routes.into_iter().enumerate() {
            let route = r.validate(i)?;
            if routes.iter().any(|o: &Route| o.topic == route.topic) {
                return Err(invalid(
                    format!("route[{i}].topic"),
                    &route.topic,
                    "each topic may be routed once",
                ));
            }
            if route.topic == kafka.dead_letter_topic {
                return Err(invalid(
                    format!("route[{i}].topic"),
                    &route.topic,
                    "must differ from kafka.dead_letter_topic",
                ));
            }
            routes.push(route);
        }
        let dynamodb = self.dynamodb.validate()?;
        let pipeline = self.pipeline.validate()?;
        if dynamodb.request_timeout >= pipeline.drain_timeout {
            return Err(invalid(
                "dynamodb.request_timeout_ms",
                dynamodb.request_timeout.as_millis(),
                format!(
                    "must be below pipeline.drain_timeout_s ({} s): a write on the wire must finish within the drain",
                    pipeline.drain_timeout.as_secs()
                ),
            ));
        }
        Ok(Settings {
            kafka,
            dynamodb,
            routes,
            pipeline,
            throttle: self.throttle.validate()?,
            log: self.log.validate()?,
            ops: self.ops.validate()?,
        })
    }
}

fn non_empty(key: &str, v: String) -> Result<String, ConfigError> {
    if v.trim().is_empty() {
        Err(invalid(key, v, "must not be empty"))
    } else {
        Ok(v)
    }
}

fn in_range(key: &str, v: u64, lo: u64, hi: u64) -> Result<u64, ConfigError> {
    if (lo..=hi).contains(&v) {
        Ok(v)
    } else {
        Err(invalid(key, v, format!("must be between {lo} and {hi}")))
    }
}

impl RawKafka {
    fn validate(self) -> Result<KafkaSettings, ConfigError> {
        for (k, v) in &self.properties {
            if RESERVED_KAFKA_PROPERTIES.contains(&k.as_str()) {
                return Err(invalid(
                    format!("kafka.properties.\"{k}\""),
                    shown(k, v),
                    "is set by the worker itself (use kafka.brokers / kafka.group_id; offsets are committed only after writes)",
                ));
            }
        }
        Ok(KafkaSettings {
            brokers: non_empty("kafka.brokers", self.brokers)?,
            group_id: non_empty("kafka.group_id", self.group_id)?,
            dead_letter_topic: non_empty("kafka.dead_letter_topic", self.dead_letter_topic)?,
            commit_interval: Duration::from_millis(in_range(
                "kafka.commit_interval_ms",
                self.commit_interval_ms,
                100,
                600_000,
            )?),
            metadata_timeout: Duration::from_millis(in_range(
                "kafka.metadata_timeout_ms",
                self.metadata_timeout_ms,
                100,
                600_000,
            )?),
            properties: self.properties,
        })
    }
}

impl RawDynamo {
    fn validate(self) -> Result<DynamoSettings, ConfigError> {
        if let Some(url) = &self.endpoint_url {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(invalid(
                    "dynamodb.endpoint_url",
                    url,
                    "must start with http:// or https://",
                ));
            }
        }
        Ok(DynamoSettings {
            endpoint_url: self.endpoint_url,
            region: self.region,
            request_timeout: Duration::from_millis(in_range(
                "dynamodb.request_timeout_ms",
                self.request_timeout_ms,
                100,
                300_000,
            )?),
            max_in_flight_batches: in_range(
                "dynamodb.max_in_flight_batches",
                self.max_in_flight_batches as u64,
                1,
                256,
            )? as usize,
            start_patience: Duration::from_secs(in_range(
                "dynamodb.start_patience_s",
                self.start_patience_s,
                0,
                3_600,
            )?),
        })
    }
}

fn key_type(key: &str, v: &str) -> Result<KeyType, ConfigError> {
    match v {
        "S" => Ok(KeyType::S),
        "N" => Ok(KeyType::N),
        "B" => Ok(KeyType::B),
        _ => Err(invalid(key, v, "must be one of S, N, B")),
    }
}

impl RawRoute {
    fn validate(self, i: usize) -> Result<Route, ConfigError> {
        let k = |f: &str| format!("route[{i}].{f}");
        let key_mode = match self.key_mode.as_str() {
            "record" => KeyMode::Record,
            "kafka" => KeyMode::Kafka,
            other => return Err(invalid(k("key_mode"), other, "must be `record` or `kafka`")),
        };
        let key = match (self.partition_key, self.sort_key) {
            (None, Some(sort)) => {
                return Err(invalid(
                    k("sort_key"),
                    sort,
                    "needs route.partition_key as well",
                ))
            }
            (None, None) => None,
            (Some(hash), sort) => Some(KeySchema {
                hash: KeyAttr {
                    name: non_empty(&k("partition_key"), hash)?,
                    kind: key_type(&k("partition_key_type"), &self.partition_key_type)?,
                },
                range: match sort {
                    None => None,
                    Some(s) => Some(KeyAttr {
                        name: non_empty(&k("sort_key"), s)?,
                        kind: key_type(&k("sort_key_type"), &self.sort_key_type)?,
                    }),
                },
            }),
        };
        if let (KeyMode::Kafka, Some(schema)) = (key_mode, &key) {
            check_kafka_key_schema(schema).map_err(|rule| invalid(k("key_mode"), "kafka", rule))?;
        }
        Ok(Route {
            topic: non_empty(&k("topic"), self.topic)?,
            table: non_empty(&k("table"), self.table)?,
            key_mode,
            key,
        })
    }
}

/// The `kafka` key mode writes "topic/partition/offset" (S) as the partition
/// key, or "topic/partition" (S) plus the offset (N) as the sort key.
pub fn check_kafka_key_schema(schema: &KeySchema) -> Result<(), String> {
    let range_ok = schema.range.as_ref().is_none_or(|r| r.kind == KeyType::N);
    if schema.hash.kind == KeyType::S && range_ok {
        Ok(())
    } else {
        Err(
            "needs a table keyed by a string partition key and, optionally, a number sort key"
                .into(),
        )
    }
}

impl RawOps {
    fn validate(self) -> Result<OpsSettings, ConfigError> {
        let listen = match self.listen {
            None => None,
            Some(l) => Some(l.parse().map_err(|_| {
                invalid(
                    "ops.listen",
                    &l,
                    "must be an address:port, e.g. 0.0.0.0:9100",
                )
            })?),
        };
        let progress = match self.progress.as_str() {
            "auto" => ProgressMode::Auto,
            "log" => ProgressMode::Log,
            "off" => ProgressMode::Off,
            other => return Err(invalid("ops.progress", other, "must be auto, log or off")),
        };
        Ok(OpsSettings {
            listen,
            stuck_after: Duration::from_secs(in_range(
                "ops.stuck_after_s",
                self.stuck_after_s,
                5,
                86_400,
            )?),
            progress,
            progress_interval: Duration::from_secs(in_range(
                "ops.progress_interval_s",
                self.progress_interval_s,
                1,
                3_600,
            )?),
            lag_interval: Duration::from_millis(match self.lag_interval_ms {
                0 => 0,
                v => in_range("ops.lag_interval_ms", v, 100, 600_000)?,
            }),
        })
    }
}

impl RawPipeline {
    fn validate(self) -> Result<PipelineSettings, ConfigError> {
        Ok(PipelineSettings {
            batch_linger: Duration::from_millis(in_range(
                "pipeline.batch_linger_ms",
                self.batch_linger_ms,
                0,
                10_000,
            )?),
            max_buffered_records: in_range(
                "pipeline.max_buffered_records",
                self.max_buffered_records as u64,
                25,
                1_000_000,
            )? as usize,
            max_buffered_bytes: in_range(
                "pipeline.max_buffered_bytes",
                self.max_buffered_bytes,
                1 << 20,
                64 << 30,
            )? as usize,
            drain_timeout: Duration::from_secs(in_range(
                "pipeline.drain_timeout_s",
                self.drain_timeout_s,
                1,
                3_600,
            )?),
        })
    }
}

impl RawThrottle {
    fn validate(self) -> Result<ThrottleSettings, ConfigError> {
        self.strategy
            .validate()
            .map_err(|rule| invalid("throttle.strategy", self.strategy.name(), rule))?;
        if let Some(r) = self.pacing_rate {
            if !r.is_finite() || r <= 0.0 {
                return Err(invalid(
                    "throttle.pacing_rate",
                    r,
                    "must be > 0 (WCU per second)",
                ));
            }
        }
        let burst = in_range(
            "throttle.pacing_burst",
            u64::from(self.pacing_burst),
            1,
            100_000,
        )?;
        let sdk_retry_mode = match self.sdk_retry_mode.as_str() {
            "off" => SdkRetryMode::Off,
            "standard" => SdkRetryMode::Standard,
            "adaptive" => SdkRetryMode::Adaptive,
            other => {
                return Err(invalid(
                    "throttle.sdk_retry_mode",
                    other,
                    "must be `off`, `standard` or `adaptive`",
                ))
            }
        };
        Ok(ThrottleSettings {
            strategy: self.strategy,
            pacing_rate: self.pacing_rate,
            pacing_burst: NonZeroU32::new(burst as u32).expect("checked >= 1"),
            capacity_poll: Duration::from_secs(in_range(
                "throttle.capacity_poll_s",
                self.capacity_poll_s,
                0,
                3_600,
            )?),
            sdk_retry_mode,
        })
    }
}

impl RawLog {
    fn validate(self) -> Result<LogSettings, ConfigError> {
        let format = match self.format.as_str() {
            "human" => LogFormat::Human,
            "json" => LogFormat::Json,
            other => return Err(invalid("log.format", other, "must be `human` or `json`")),
        };
        if tracing_subscriber::EnvFilter::try_new(&self.level).is_err() {
            return Err(invalid(
                "log.level",
                &self.level,
                "must be a level (error, warn, info, debug, trace) or a tracing filter",
            ));
        }
        Ok(LogSettings {
            format,
            level: self.level,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = r#"
        [kafka]
        brokers = "127.0.0.1:9092"
        group_id = "g"
        dead_letter_topic = "dlq"
        [[route]]
        topic = "orders"
        table = "orders"
        partition_key = "id"
    "#;

    fn load(text: &str, env: &[(&str, &str)]) -> Result<Settings, ConfigError> {
        let env = env.iter().map(|(k, v)| (k.to_string(), v.to_string()));
        Settings::from_toml(text, "test.toml", env)
    }

    #[test]
    fn minimal_config_gets_defaults() {
        let s = load(MINIMAL, &[]).unwrap();
        assert_eq!(s.kafka.commit_interval, Duration::from_secs(2));
        assert_eq!(s.routes[0].key_mode, KeyMode::Record);
        assert_eq!(s.routes[0].key.as_ref().unwrap().hash.kind, KeyType::S);
        assert_eq!(s.dynamodb.max_in_flight_batches, 4);
    }

    #[test]
    fn shipped_configs_are_valid() {
        for file in ["config/local.toml", "config/example.toml"] {
            let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(file);
            Settings::load(&path, Vec::new()).unwrap_or_else(|e| panic!("{file}: {e}"));
        }
    }

    #[test]
    fn env_overrides_keep_types_and_reach_arrays_and_properties() {
        let s = load(
            MINIMAL,
            &[
                ("INGEST__KAFKA__GROUP_ID", "12345"),
                ("INGEST__KAFKA__COMMIT_INTERVAL_MS", "500"),
                ("INGEST__ROUTE__0__TABLE", "other"),
                ("INGEST__KAFKA__PROPERTIES__SECURITY_PROTOCOL", "ssl"),
                ("UNRELATED", "x"),
            ],
        )
        .unwrap();
        assert_eq!(s.kafka.group_id, "12345");
        assert_eq!(s.kafka.commit_interval, Duration::from_millis(500));
        assert_eq!(s.routes[0].table, "other");
        assert_eq!(s.kafka.properties["security.protocol"], "ssl");
    }

    #[test]
    fn a_request_must_fit_in_the_drain() {
        let text = format!(
            "{MINIMAL}\n[dynamodb]\nrequest_timeout_ms = 30000\n[pipeline]\ndrain_timeout_s = 30\n"
        );
        let err = load(&text, &[]).unwrap_err().to_string();
        assert!(
            err.contains("dynamodb.request_timeout_ms") && err.contains("drain"),
            "{err}"
        );
    }

    #[test]
    fn errors_name_key_value_and_rule() {
        let e = load(MINIMAL, &[("INGEST__KAFKA__COMMIT_INTERVAL_MS", "5")]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "config key `kafka.commit_interval_ms` = 5: must be between 100 and 600000"
        );
        let e = load(MINIMAL, &[("INGEST__KAFKA__COMMIT_INTERVAL_MS", "soon")]).unwrap_err();
        assert!(
            e.to_string().contains("INGEST__KAFKA__COMMIT_INTERVAL_MS"),
            "{e}"
        );
        let e = load(MINIMAL, &[("INGEST__ROUTE__3__TABLE", "x")]).unwrap_err();
        assert!(e.to_string().contains("index 3"), "{e}");
        let e = load(
            &MINIMAL.replace(
                "partition_key = \"id\"",
                "partition_key_type = \"X\"\npartition_key = \"id\"",
            ),
            &[],
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "config key `route[0].partition_key_type` = \"X\": must be one of S, N, B"
        );
    }

    #[test]
    fn secrets_never_show_in_the_printed_settings() {
        let canary = "CANARY-s3cr3t-1234";
        let text = MINIMAL.replace(
            "[[route]]",
            &format!(
                "[kafka.properties]\n\"sasl.password\" = \"{canary}\"\n\"ssl.key.password\" = \"{canary}\"\n\"sasl.oauthbearer.config\" = \"token={canary}\"\n\"security.protocol\" = \"sasl_ssl\"\n[[route]]"
            ),
        );
        let s = load(&text, &[]).unwrap();
        let shown = format!("{s:?} {s:#?}");
        assert!(!shown.contains(canary), "{shown}");
        assert!(shown.contains("<redacted>") && shown.contains("sasl_ssl"));
        assert!(is_secret("sasl.password") && !is_secret("security.protocol"));
        assert!(is_secret("sasl.username"), "an API key on some clouds");
    }

    #[test]
    fn unknown_keys_and_reserved_properties_are_refused() {
        let e = load(&format!("{MINIMAL}\n[pipeline]\nlinger = 5"), &[]).unwrap_err();
        assert!(e.to_string().contains("unknown field `linger`"), "{e}");
        let e = load(
            MINIMAL,
            &[("INGEST__KAFKA__PROPERTIES__ENABLE_AUTO_COMMIT", "true")],
        )
        .unwrap_err();
        assert!(e.to_string().contains("enable.auto.commit"), "{e}");
    }

    #[test]
    fn routes_must_be_distinct_and_not_the_dead_letter_topic() {
        let twice = format!("{MINIMAL}\n[[route]]\ntopic = \"orders\"\ntable = \"x\"");
        assert!(load(&twice, &[])
            .unwrap_err()
            .to_string()
            .contains("routed once"));
        let e = load(MINIMAL, &[("INGEST__KAFKA__DEAD_LETTER_TOPIC", "orders")]).unwrap_err();
        assert!(e.to_string().contains("dead_letter_topic"), "{e}");
    }

    #[test]
    fn the_throttle_strategy_is_chosen_by_name_and_defaults_to_adaptive() {
        let s = load(MINIMAL, &[]).unwrap();
        assert_eq!(s.throttle.strategy.name(), "adaptive");
        assert_eq!(s.throttle.sdk_retry_mode, SdkRetryMode::Off);
        let text = format!("{MINIMAL}\n[throttle]\nstrategy = {{ name = \"autosleeper\", randomization_factor = 0.1 }}");
        let s = load(&text, &[]).unwrap();
        assert_eq!(s.throttle.strategy.name(), "autosleeper");
        let s = load(
            MINIMAL,
            &[("INGEST__THROTTLE__STRATEGY__NAME", "heroku-gradual")],
        )
        .unwrap();
        assert_eq!(s.throttle.strategy.name(), "heroku-gradual");
        let text = format!(
            "{MINIMAL}\n[throttle]\nstrategy = {{ name = \"autosleeper\", up_multiplier = 0.5 }}"
        );
        let e = load(&text, &[]).unwrap_err().to_string();
        assert!(
            e.contains("throttle.strategy") && e.contains("up_multiplier = 0.5: must be >= 1"),
            "{e}"
        );
    }

    #[test]
    fn kafka_key_mode_needs_a_string_partition_key() {
        let text = MINIMAL.replace(
            "partition_key = \"id\"",
            "partition_key = \"id\"\npartition_key_type = \"N\"\nkey_mode = \"kafka\"",
        );
        let e = load(&text, &[]).unwrap_err();
        assert!(e.to_string().contains("route[0].key_mode"), "{e}");
    }

    #[test]
    fn the_ops_endpoints_are_off_unless_an_address_is_given() {
        let s = load(MINIMAL, &[]).unwrap();
        assert_eq!(s.ops.listen, None);
        assert_eq!(s.ops.progress, ProgressMode::Auto);
        assert_eq!(s.ops.stuck_after, Duration::from_secs(300));
        let s = load(MINIMAL, &[("INGEST__OPS__LISTEN", "0.0.0.0:9100")]).unwrap();
        assert_eq!(s.ops.listen, Some("0.0.0.0:9100".parse().unwrap()));
        let e = load(MINIMAL, &[("INGEST__OPS__LISTEN", "localhost")]).unwrap_err();
        assert!(e.to_string().contains("ops.listen"), "{e}");
        let e = load(MINIMAL, &[("INGEST__OPS__PROGRESS", "bar")]).unwrap_err();
        assert!(e.to_string().contains("must be auto, log or off"), "{e}");
        let e = load(MINIMAL, &[("INGEST__OPS__STUCK_AFTER_S", "1")]).unwrap_err();
        assert!(e.to_string().contains("ops.stuck_after_s"), "{e}");
        let s = load(MINIMAL, &[("INGEST__OPS__LAG_INTERVAL_MS", "0")]).unwrap();
        assert!(s.ops.lag_interval.is_zero());
    }
}
