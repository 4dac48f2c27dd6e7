//! The rules serde cannot express: ranges, non-empty names, reserved Kafka
//! properties and rules across keys. Each error names the key as written in
//! the file, its value and the rule.

use std::time::Duration;

use super::secret::shown;
use super::{ConfigError, Settings};
use crate::decode::{KeyMode, KeySchema, KeyType};

/// Kafka properties the worker owns; setting them would break its guarantees.
const RESERVED_KAFKA_PROPERTIES: &[&str] = &[
    "bootstrap.servers",
    "group.id",
    "enable.auto.commit",
    "enable.auto.offset.store",
];

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

fn non_empty(key: &str, v: &str) -> Result<(), ConfigError> {
    if v.trim().is_empty() {
        return Err(invalid(key, v, "must not be empty"));
    }
    Ok(())
}

/// A Kafka topic name (empty allowed: the setting is off): at most 249 of
/// ASCII letters, digits, '.', '_' and '-', and not "." or "..".
fn check_topic_name(key: &str, v: &str) -> Result<(), ConfigError> {
    let legal = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if v.len() > 249 || v == "." || v == ".." || !v.chars().all(legal) {
        return Err(invalid(
            key,
            v,
            "must be a Kafka topic name: up to 249 of letters, digits, '.', '_' and '-'",
        ));
    }
    Ok(())
}

fn in_range(key: &str, v: u64, lo: u64, hi: u64) -> Result<(), ConfigError> {
    if !(lo..=hi).contains(&v) {
        return Err(invalid(key, v, format!("must be between {lo} and {hi}")));
    }
    Ok(())
}

fn ms_in(key: &str, d: Duration, lo: u64, hi: u64) -> Result<(), ConfigError> {
    in_range(key, d.as_millis() as u64, lo, hi)
}

fn s_in(key: &str, d: Duration, lo: u64, hi: u64) -> Result<(), ConfigError> {
    in_range(key, d.as_secs(), lo, hi)
}

/// Every rule, in the order of the file's sections.
pub(super) fn settings(s: &Settings) -> Result<(), ConfigError> {
    kafka(s)?;
    routes(s)?;
    dynamodb(s)?;
    pipeline(s)?;
    throttle(s)?;
    log(s)?;
    ops(s)
}

fn kafka(s: &Settings) -> Result<(), ConfigError> {
    let k = &s.kafka;
    for (key, v) in &k.properties {
        if RESERVED_KAFKA_PROPERTIES.contains(&key.as_str()) {
            return Err(invalid(
                format!("kafka.properties.\"{key}\""),
                shown(key, v),
                "is set by the worker itself (use kafka.brokers / kafka.group_id; offsets are committed only after writes)",
            ));
        }
    }
    if k.auth == super::KafkaAuth::AwsMskIam {
        for (key, allowed) in [
            ("sasl.mechanisms", &["OAUTHBEARER"][..]),
            ("sasl.mechanism", &["OAUTHBEARER"][..]),
            ("security.protocol", &["SASL_SSL", "SASL_PLAINTEXT"][..]),
            // librdkafka's own token sources would take the place of ours.
            ("sasl.oauthbearer.method", &["default"][..]),
            ("enable.sasl.oauthbearer.unsecure.jwt", &["false"][..]),
        ] {
            if let Some(v) = k.properties.get(key) {
                if !allowed.iter().any(|a| a.eq_ignore_ascii_case(v)) {
                    return Err(invalid(
                        format!("kafka.properties.\"{key}\""),
                        v.clone(),
                        "contradicts kafka.auth = \"aws-msk-iam\" (SASL/OAUTHBEARER over SASL_SSL)",
                    ));
                }
            }
        }
    }
    non_empty("kafka.brokers", &k.brokers)?;
    non_empty("kafka.group_id", &k.group_id)?;
    non_empty("kafka.dead_letter_topic", &k.dead_letter_topic)?;
    ms_in("kafka.commit_interval_ms", k.commit_interval, 100, 600_000)?;
    ms_in(
        "kafka.metadata_timeout_ms",
        k.metadata_timeout,
        100,
        600_000,
    )
}

fn routes(s: &Settings) -> Result<(), ConfigError> {
    if s.routes.is_empty() {
        return Err(invalid(
            "route",
            "[]",
            "at least one [[route]] (topic -> table) is required",
        ));
    }
    for (i, route) in s.routes.iter().enumerate() {
        let k = |f: &str| format!("route[{i}].{f}");
        non_empty(&k("topic"), &route.topic)?;
        non_empty(&k("table"), &route.table)?;
        if let Some(schema) = &route.key {
            non_empty(&k("partition_key"), &schema.hash.name)?;
            if let Some(sort) = &schema.range {
                non_empty(&k("sort_key"), &sort.name)?;
            }
            if route.key_mode == KeyMode::Kafka {
                check_kafka_key_schema(schema)
                    .map_err(|rule| invalid(k("key_mode"), "kafka", rule))?;
            }
        }
        if s.routes[..i].iter().any(|o| o.topic == route.topic) {
            return Err(invalid(
                k("topic"),
                &route.topic,
                "each topic may be routed once",
            ));
        }
        if route.topic == s.kafka.dead_letter_topic {
            return Err(invalid(
                k("topic"),
                &route.topic,
                "must differ from kafka.dead_letter_topic",
            ));
        }
    }
    Ok(())
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

fn dynamodb(s: &Settings) -> Result<(), ConfigError> {
    let d = &s.dynamodb;
    if let Some(url) = &d.endpoint_url {
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(invalid(
                "dynamodb.endpoint_url",
                url,
                "must start with http:// or https://",
            ));
        }
    }
    ms_in(
        "dynamodb.request_timeout_ms",
        d.request_timeout,
        100,
        300_000,
    )?;
    let in_flight = d.max_in_flight_batches as u64;
    in_range(
        "dynamodb.max_in_flight_batches",
        in_flight,
        1,
        super::MAX_IN_FLIGHT_BATCHES as u64,
    )?;
    s_in("dynamodb.start_patience_s", d.start_patience, 0, 3_600)
}

fn pipeline(s: &Settings) -> Result<(), ConfigError> {
    let p = &s.pipeline;
    ms_in("pipeline.batch_linger_ms", p.batch_linger, 0, 10_000)?;
    let records = p.max_buffered_records as u64;
    in_range("pipeline.max_buffered_records", records, 25, 1_000_000)?;
    let bytes = p.max_buffered_bytes as u64;
    in_range("pipeline.max_buffered_bytes", bytes, 1 << 20, 64 << 30)?;
    s_in("pipeline.drain_timeout_s", p.drain_timeout, 1, 3_600)?;
    if s.dynamodb.request_timeout >= p.drain_timeout {
        return Err(invalid(
            "dynamodb.request_timeout_ms",
            s.dynamodb.request_timeout.as_millis(),
            format!(
                "must be below pipeline.drain_timeout_s ({} s): a write on the wire must finish within the drain",
                p.drain_timeout.as_secs()
            ),
        ));
    }
    Ok(())
}

fn throttle(s: &Settings) -> Result<(), ConfigError> {
    let t = &s.throttle;
    t.strategy
        .validate()
        .map_err(|rule| invalid("throttle.strategy", t.strategy.name(), rule))?;
    if let Some(r) = t.pacing_rate {
        if !r.is_finite() || r <= 0.0 {
            return Err(invalid(
                "throttle.pacing_rate",
                r,
                "must be > 0 (WCU per second)",
            ));
        }
    }
    let burst = u64::from(t.pacing_burst.get());
    in_range("throttle.pacing_burst", burst, 1, 100_000)?;
    let named = |at: String| move |(k, v, rule)| invalid(format!("{at}.{k}"), v, rule);
    t.budget().validate().map_err(named("throttle".into()))?;
    check_topic_name("throttle.lessons_topic", &t.lessons_topic)?;
    if !t.lessons_topic.is_empty()
        && (s.routes.iter().any(|r| r.topic == t.lessons_topic)
            || t.lessons_topic == s.kafka.dead_letter_topic)
    {
        return Err(invalid(
            "throttle.lessons_topic",
            &t.lessons_topic,
            "must differ from the routes' topics and kafka.dead_letter_topic",
        ));
    }
    for (i, r) in s.routes.iter().enumerate() {
        r.budget.validate().map_err(named(format!("route[{i}]")))?;
    }
    s_in("throttle.capacity_poll_s", t.capacity_poll, 0, 3_600)
}

fn log(s: &Settings) -> Result<(), ConfigError> {
    if tracing_subscriber::EnvFilter::try_new(&s.log.level).is_err() {
        return Err(invalid(
            "log.level",
            &s.log.level,
            "must be a level (error, warn, info, debug, trace) or a tracing filter",
        ));
    }
    Ok(())
}

fn ops(s: &Settings) -> Result<(), ConfigError> {
    let o = &s.ops;
    s_in("ops.stuck_after_s", o.stuck_after, 5, 86_400)?;
    s_in("ops.progress_interval_s", o.progress_interval, 1, 3_600)?;
    if !o.lag_interval.is_zero() {
        ms_in("ops.lag_interval_ms", o.lag_interval, 100, 600_000)?;
    }
    Ok(())
}
