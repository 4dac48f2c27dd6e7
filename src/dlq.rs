//! The dead-letter topic: where records that can never be written go.
//!
//! A dead letter keeps the original key, value and headers, and adds headers
//! saying why and where it came from:
//! `ingest.error.reason` (a stable label such as `invalid_json`),
//! `ingest.error.detail` (the message), `ingest.source.topic`,
//! `ingest.source.partition`, `ingest.source.offset`,
//! `ingest.source.timestamp` (ms since the epoch, when known).
//!
//! The record's offset is acked only once the broker confirmed the dead
//! letter. What the topic refuses is handled by kind, never by a silent stall:
//! - too large for the topic: sent again without its value (header
//!   `ingest.value.omitted` = `too_large`, `ingest.value.bytes` = its size);
//!   the original stays readable at its source coordinates;
//! - refused for good (no such topic, not authorized, invalid topic, policy):
//!   a [`DeadLetterError`], fatal for the worker (unknown topics after a
//!   short grace, as a broker restarting may briefly not know them);
//! - anything else (broker down, timeouts): retried with a capped backoff
//!   while the record's partition is still this worker's, and given up
//!   (abandoned, redelivered to the next owner) when it is not.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use rdkafka::config::ClientConfig;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};

use crate::msk_iam::{AuthContext, MskIamTokens};
use tracing::warn;

use crate::acks::Acks;
use crate::config::KafkaSettings;
use crate::record::Record;
use crate::throttle::simple::Exponential;

/// How long an unknown-topic refusal may last before it is fatal.
const UNKNOWN_TOPIC_GRACE: Duration = Duration::from_secs(10);

/// A dead letter as sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Letter {
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub headers: Vec<(String, Option<Vec<u8>>)>,
}

impl Letter {
    /// The value of a header, if present (the last one wins).
    pub fn header(&self, key: &str) -> Option<&[u8]> {
        self.headers
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .and_then(|(_, v)| v.as_deref())
    }
}

/// A future a [`Publish`] returns.
pub type PublishFuture<'a> = Pin<Box<dyn Future<Output = Result<(), KafkaError>> + Send + 'a>>;

/// Sends one letter to a topic and resolves once the broker confirmed it.
pub trait Publish: Send + Sync {
    fn publish<'a>(&'a self, topic: &'a str, letter: &'a Letter) -> PublishFuture<'a>;
}

/// How a dead letter ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// The broker confirmed it.
    Sent,
    /// The broker confirmed it without the record's value (too large).
    SentWithoutValue,
    /// Its partition is no longer this worker's: not sent, not acked.
    Abandoned,
}

/// The dead-letter topic refuses records for good.
#[derive(Debug, thiserror::Error)]
#[error("the dead-letter topic {topic} refuses records ({cause}); records that cannot be written have nowhere to go, so the worker stops (nothing unwritten is committed): check the topic exists, the worker may write to it, and its size limit")]
pub struct DeadLetterError {
    pub topic: String,
    pub cause: KafkaError,
}

/// Producer for the dead-letter topic.
#[derive(Clone)]
pub struct DeadLetters {
    out: std::sync::Arc<dyn Publish>,
    topic: String,
}

impl std::fmt::Debug for DeadLetters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeadLetters")
            .field("topic", &self.topic)
            .finish()
    }
}

/// Producer configuration shared by the dead-letter producer and the tools:
/// the pass-through properties, then what durability needs (all replicas
/// acknowledge; bounded delivery time), which the properties cannot weaken.
pub fn producer_config(kafka: &KafkaSettings) -> ClientConfig {
    let mut cfg = ClientConfig::new();
    cfg.set("bootstrap.servers", &kafka.brokers);
    for (k, v) in &kafka.properties {
        if !CONSUMER_ONLY.contains(&k.as_str()) {
            cfg.set(k, v);
        }
    }
    crate::msk_iam::configure(&mut cfg, kafka);
    cfg.set("acks", "all")
        .set("message.timeout.ms", "30000")
        .set("request.timeout.ms", "15000");
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
    "fetch.queue.backoff.ms",
    "isolation.level",
    "enable.partition.eof",
    "check.crcs",
    "auto.commit.interval.ms",
    "group.protocol",
    "group.remote.assignor",
];

/// The Kafka producer behind [`DeadLetters`].
struct Producer(FutureProducer<AuthContext>);

impl Publish for Producer {
    fn publish<'a>(&'a self, topic: &'a str, letter: &'a Letter) -> PublishFuture<'a> {
        Box::pin(async move {
            let mut headers = OwnedHeaders::new_with_capacity(letter.headers.len());
            for (key, value) in &letter.headers {
                headers = headers.insert(Header {
                    key,
                    value: value.as_deref(),
                });
            }
            let mut record = FutureRecord::<[u8], [u8]>::to(topic).headers(headers);
            if let Some(k) = &letter.key {
                record = record.key(k);
            }
            if let Some(v) = &letter.value {
                record = record.payload(v);
            }
            self.0
                .send(record, Duration::from_secs(5))
                .await
                .map(|_| ())
                .map_err(|(e, _)| e)
        })
    }
}

/// What a producer error means for a dead letter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refusal {
    TooLarge,
    UnknownTopic,
    Permanent,
    Transient,
}

fn classify(e: &KafkaError) -> Refusal {
    use RDKafkaErrorCode as C;
    match e.rdkafka_error_code() {
        Some(C::MessageSizeTooLarge | C::MessageBatchTooLarge) => Refusal::TooLarge,
        Some(C::UnknownTopic | C::UnknownTopicOrPartition | C::UnknownTopicId) => {
            Refusal::UnknownTopic
        }
        Some(
            C::TopicAuthorizationFailed
            | C::ClusterAuthorizationFailed
            | C::InvalidTopic
            | C::PolicyViolation
            | C::InvalidRequiredAcks
            | C::UnsupportedForMessageFormat
            | C::Fatal,
        ) => Refusal::Permanent,
        _ if matches!(e, KafkaError::ClientConfig(..)) => Refusal::Permanent,
        _ => Refusal::Transient,
    }
}

impl DeadLetters {
    /// The dead-letter producer of the worker.
    pub fn new(
        kafka: &KafkaSettings,
        tokens: Option<std::sync::Arc<MskIamTokens>>,
    ) -> Result<Self, KafkaError> {
        let producer: FutureProducer<AuthContext> =
            producer_config(kafka).create_with_context(AuthContext {
                tokens,
                client: "dead letters",
            })?;
        Ok(Self::with(
            std::sync::Arc::new(Producer(producer)),
            &kafka.dead_letter_topic,
        ))
    }

    /// Dead letters sent through `out` (tests use a recording fake).
    pub fn with(out: std::sync::Arc<dyn Publish>, topic: &str) -> Self {
        Self {
            out,
            topic: topic.to_string(),
        }
    }

    /// Publishes `rec` with the reason, retrying what may pass later while
    /// the record's partition is still this worker's (`acks` says).
    pub async fn send(
        &self,
        rec: &Record,
        reason: &str,
        detail: &str,
        acks: &Acks,
    ) -> Result<Delivery, DeadLetterError> {
        let alive = || acks.is_live(&rec.at);
        let mut letter = letter_of(rec, reason, detail);
        // Seeded by the record, so letters retrying together spread out.
        let mut backoff = Exponential::transient(rec.at.offset as u64);
        let mut unknown_since: Option<tokio::time::Instant> = None;
        loop {
            if !alive() {
                return Ok(Delivery::Abandoned);
            }
            let err = match self.out.publish(&self.topic, &letter).await {
                Ok(()) if letter.header(OMITTED).is_some() => {
                    return Ok(Delivery::SentWithoutValue)
                }
                Ok(()) => return Ok(Delivery::Sent),
                Err(e) => e,
            };
            let refused = |cause| DeadLetterError {
                topic: self.topic.clone(),
                cause,
            };
            match classify(&err) {
                Refusal::TooLarge if letter.header(OMITTED).is_none() => {
                    warn!(topic = %self.topic, error = %err, source_topic = %rec.at.topic,
                        partition = rec.at.partition, offset = rec.at.offset,
                        "dead letter too large for its topic; sending it without its value");
                    letter = without_value(letter, rec);
                    continue;
                }
                Refusal::TooLarge | Refusal::Permanent => return Err(refused(err)),
                Refusal::UnknownTopic => {
                    let since = *unknown_since.get_or_insert_with(tokio::time::Instant::now);
                    if since.elapsed() >= UNKNOWN_TOPIC_GRACE {
                        return Err(refused(err));
                    }
                }
                Refusal::Transient => unknown_since = None,
            }
            let delay = backoff.next_failure();
            warn!(topic = %self.topic, error = %err, source_topic = %rec.at.topic,
                partition = rec.at.partition, offset = rec.at.offset,
                retry_in_ms = delay.as_millis() as u64, "dead-letter publish failed; retrying");
            acks.wait_while_live(delay, alive).await;
        }
    }
}

/// Header saying the value was left out, and why.
const OMITTED: &str = "ingest.value.omitted";

fn letter_of(rec: &Record, reason: &str, detail: &str) -> Letter {
    let mut headers = rec.headers.clone();
    let mut add = |key: &str, value: String| headers.push((key.to_string(), Some(value.into())));
    add("ingest.error.reason", reason.to_string());
    add("ingest.error.detail", detail.to_string());
    add("ingest.source.topic", rec.at.topic.to_string());
    add("ingest.source.partition", rec.at.partition.to_string());
    add("ingest.source.offset", rec.at.offset.to_string());
    if let Some(ts) = rec.timestamp_ms {
        add("ingest.source.timestamp", ts.to_string());
    }
    Letter {
        key: rec.key.clone(),
        value: rec.value.clone(),
        headers,
    }
}

/// The letter without the record's value (and without its own headers,
/// which may be what made it too large); the source coordinates remain.
fn without_value(mut letter: Letter, rec: &Record) -> Letter {
    let original = rec.headers.len();
    letter.headers.drain(..original);
    letter.value = None;
    let bytes = rec.value.as_ref().map_or(0, Vec::len);
    letter
        .headers
        .push((OMITTED.to_string(), Some(b"too_large".to_vec())));
    letter.headers.push((
        "ingest.value.bytes".to_string(),
        Some(bytes.to_string().into()),
    ));
    letter
}

/// A recording [`Publish`] for tests: answers each call with the next
/// scripted error (none left: success) and keeps what was sent.
#[cfg(test)]
pub mod fake {
    use super::*;
    use std::collections::VecDeque;

    use parking_lot::Mutex;

    #[derive(Default)]
    pub struct FakeTopic {
        pub sent: Mutex<Vec<Letter>>,
        pub attempts: Mutex<usize>,
        pub errors: Mutex<VecDeque<KafkaError>>,
        /// Refuse every call with this error (after the scripted ones).
        pub always: Mutex<Option<KafkaError>>,
    }

    impl Publish for FakeTopic {
        fn publish<'a>(&'a self, _topic: &'a str, letter: &'a Letter) -> PublishFuture<'a> {
            Box::pin(async move {
                *self.attempts.lock() += 1;
                if let Some(e) = self.errors.lock().pop_front() {
                    return Err(e);
                }
                if let Some(e) = self.always.lock().clone() {
                    return Err(e);
                }
                self.sent.lock().push(letter.clone());
                Ok(())
            })
        }
    }
}

#[cfg(test)]
#[path = "dlq_tests.rs"]
mod tests;
