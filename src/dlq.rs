//! The dead-letter topic: where records that can never be written go.
//!
//! A dead letter keeps the original key, value and headers, and adds headers
//! saying why and where it came from:
//! `ingest.error.reason` (a stable label such as `invalid_json`),
//! `ingest.error.detail` (the message), `ingest.source.topic`,
//! `ingest.source.partition`, `ingest.source.offset`,
//! `ingest.source.timestamp` (ms since the epoch, when known).
//! The record's offset is acked only once the broker confirmed the dead letter;
//! a failing dead-letter topic is retried (and logged), never skipped.

use std::time::Duration;

use rdkafka::config::ClientConfig;
use rdkafka::error::KafkaError;
use rdkafka::message::{Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use tracing::warn;

use crate::config::KafkaSettings;
use crate::source::Record;

/// Producer for the dead-letter topic.
#[derive(Clone)]
pub struct DeadLetters {
    producer: FutureProducer,
    topic: String,
}

/// Producer configuration shared by the dead-letter producer and the tools.
pub fn producer_config(kafka: &KafkaSettings) -> ClientConfig {
    let mut cfg = ClientConfig::new();
    cfg.set("bootstrap.servers", &kafka.brokers)
        .set("acks", "all")
        .set("message.timeout.ms", "60000");
    for (k, v) in &kafka.properties {
        if !CONSUMER_ONLY.contains(&k.as_str()) {
            cfg.set(k, v);
        }
    }
    cfg
}

/// Pass-through properties that only mean something to a consumer.
const CONSUMER_ONLY: &[&str] = &[
    "auto.offset.reset",
    "session.timeout.ms",
    "heartbeat.interval.ms",
    "max.poll.interval.ms",
    "partition.assignment.strategy",
    "group.instance.id",
    "fetch.min.bytes",
    "fetch.wait.max.ms",
    "fetch.max.bytes",
    "max.partition.fetch.bytes",
    "queued.min.messages",
    "queued.max.messages.kbytes",
    "isolation.level",
    "enable.partition.eof",
    "check.crcs",
    "auto.commit.interval.ms",
    "group.protocol",
    "group.remote.assignor",
];

impl DeadLetters {
    pub fn new(kafka: &KafkaSettings) -> Result<Self, KafkaError> {
        Ok(Self {
            producer: producer_config(kafka).create()?,
            topic: kafka.dead_letter_topic.clone(),
        })
    }

    /// Publishes `rec` with the reason; retries until the broker confirms.
    pub async fn send(&self, rec: &Record, reason: &str, detail: &str) {
        let mut delay = Duration::from_millis(100);
        loop {
            match self.try_send(rec, reason, detail).await {
                Ok(()) => return,
                Err(e) => {
                    warn!(topic = %self.topic, error = %e, source_topic = %rec.at.topic,
                        partition = rec.at.partition, offset = rec.at.offset,
                        "dead-letter publish failed; retrying");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(10));
                }
            }
        }
    }

    async fn try_send(&self, rec: &Record, reason: &str, detail: &str) -> Result<(), KafkaError> {
        let partition = rec.at.partition.to_string();
        let offset = rec.at.offset.to_string();
        let timestamp = rec.msg.timestamp().to_millis().map(|t| t.to_string());
        let mut headers = OwnedHeaders::new();
        if let Some(original) = rec.msg.headers() {
            for h in original.iter() {
                headers = headers.insert(Header {
                    key: h.key,
                    value: h.value,
                });
            }
        }
        let mut add = |key: &str, value: &str| {
            headers = std::mem::take(&mut headers).insert(Header {
                key,
                value: Some(value),
            });
        };
        add("ingest.error.reason", reason);
        add("ingest.error.detail", detail);
        add("ingest.source.topic", &rec.at.topic);
        add("ingest.source.partition", &partition);
        add("ingest.source.offset", &offset);
        if let Some(ts) = &timestamp {
            add("ingest.source.timestamp", ts);
        }
        let mut record = FutureRecord::<[u8], [u8]>::to(&self.topic).headers(headers);
        if let Some(k) = rec.msg.key() {
            record = record.key(k);
        }
        if let Some(p) = rec.msg.payload() {
            record = record.payload(p);
        }
        self.producer
            .send(record, Duration::from_secs(5))
            .await
            .map(|_| ())
            .map_err(|(e, _)| e)
    }
}
