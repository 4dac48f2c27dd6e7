//! What a worker's tables taught it, shared with the other workers of its
//! job (its consumer group) through a small Kafka topic (`[throttle]
//! lessons_topic`).
//!
//! Each worker learns a table's free capacity from its own answers: a
//! throttle at its fair share halves its rate, and throttles that repeat
//! at or under the share settle it under that level (another writer takes
//! part of the table; see `throttle::adaptive`). Alone, each of a job's
//! workers pays for those lessons with throttles of its own: three workers
//! meeting a live writer, or a second job, meet it three times. So a
//! worker publishes the two lessons ([`PeerLesson`]) as it learns them,
//! and takes its peers' as its own:
//! - `first_meeting`: a peer met the table's limit for the first time, at
//!   its fair share. A worker that has met nothing yet and runs at its
//!   share halves as the peer did.
//! - `settled`: a peer's throttles repeated under its share. The worker
//!   settles too (no cut: its rate may be under the level the peer met),
//!   so it climbs slowly to under its last level instead of back to its
//!   share.
//!
//! Best effort: a lesson lost or late costs only the throttles a worker
//! would have met without it. Lessons are rare (a few a minute per worker
//! at most); each carries the group and table, so jobs may share one topic.
//! The worker creates the topic when it is missing (one partition, an
//! hour's retention) and, when it cannot reach or create it, runs without
//! lessons after a warning (`lessons_unavailable`). Setup runs beside the
//! data path and never delays it. Readers start at the topic's end: a
//! lesson is about the table now, not before the worker started.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{Message, Offset, TopicPartitionList};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use tracing::{debug, info, warn};

use crate::config::KafkaSettings;
use crate::msk_iam::{AuthContext, MskIamTokens};
use crate::throttle::control::Control;
use crate::throttle::{Lesson, PeerLesson};

/// Why lessons cannot be shared (the worker runs without them).
#[derive(Debug, thiserror::Error)]
pub enum LessonsError {
    #[error("lessons topic {topic}: cannot create the Kafka {client}: {source}")]
    Client {
        topic: String,
        client: &'static str,
        source: KafkaError,
    },
    #[error("lessons topic {topic}: cannot create it: {reason}")]
    Create { topic: String, reason: String },
    #[error("lessons topic {topic}: cannot read it: {source}")]
    Read { topic: String, source: KafkaError },
}

/// One lesson on the wire (JSON).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Wire {
    /// The consumer group of the job that learned it.
    pub group: String,
    pub table: String,
    pub lesson: Lesson,
    /// The level it was met at, as a fraction of the teacher's fair share
    /// (see [`PeerLesson`]).
    pub level: f64,
    /// The worker that learned it (see [`worker_id`]).
    pub from: String,
}

impl Wire {
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a lesson serializes")
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, serde_json::Error> {
        serde_json::from_slice(bytes)
    }

    pub fn peer_lesson(&self) -> PeerLesson {
        PeerLesson {
            lesson: self.lesson,
            level: self.level,
        }
    }

    /// Whether `me` (of `group`) takes this lesson: a peer's, of its own
    /// group. Pure.
    pub fn is_for(&self, group: &str, me: &str) -> bool {
        self.group == group && self.from != me
    }
}

/// A worker's id on the topic: the host and process, and a random part
/// (two runs in one process, or a reused pid, stay apart).
pub fn worker_id(seed: u64) -> String {
    let host = std::env::var("HOSTNAME").unwrap_or_default();
    format!("{host}/{}/{seed:016x}", std::process::id())
}

/// The running channel; [`Lessons::stop`] ends it.
#[derive(Debug)]
pub struct Lessons {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Lessons {
    /// Starts sharing the lessons of `tables` (name, control) through
    /// `topic`, in the background: the topic's creation and the reader's
    /// assignment do not delay the caller, and their failure is logged
    /// (`lessons_unavailable`), not returned.
    pub fn start(
        kafka: &KafkaSettings,
        topic: &str,
        tokens: Option<Arc<MskIamTokens>>,
        tables: Vec<(Arc<str>, Arc<Control>)>,
        me: String,
    ) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let (kafka, topic, s) = (kafka.clone(), topic.to_string(), stop.clone());
        let task = tokio::spawn(async move {
            if let Err(e) = run(&kafka, &topic, tokens, tables, me, s).await {
                warn!(event = "lessons_unavailable", error = %e, topic, "lessons are not shared: each worker learns alone");
            }
        });
        Lessons { stop, task }
    }

    /// Stops reading and publishing (lessons not yet sent are dropped).
    pub async fn stop(self) {
        self.stop.store(true, Relaxed);
        self.task.abort();
        let _ = self.task.await;
    }
}

/// How long the reader waits for a lesson per poll, and so at most how
/// late it sees the stop flag.
const POLL: Duration = Duration::from_millis(100);

async fn run(
    kafka: &KafkaSettings,
    topic: &str,
    tokens: Option<Arc<MskIamTokens>>,
    tables: Vec<(Arc<str>, Arc<Control>)>,
    me: String,
    stop: Arc<AtomicBool>,
) -> Result<(), LessonsError> {
    let client_err = |client, source| LessonsError::Client {
        topic: topic.to_string(),
        client,
        source,
    };
    let ctx = |client| AuthContext {
        tokens: tokens.clone(),
        client,
    };
    create_topic(kafka, topic, ctx("lessons admin")).await?;
    let mut pcfg = crate::dlq::producer_config(kafka);
    // A lesson is worth something only soon: one acknowledgement, no
    // waiting to fill a batch, and dropped after a few seconds.
    pcfg.set("acks", "1")
        .set("linger.ms", "0")
        .set("message.timeout.ms", "5000");
    let producer: FutureProducer<AuthContext> = pcfg
        .create_with_context(ctx("lessons producer"))
        .map_err(|e| client_err("producer", e))?;
    let mut ccfg = crate::source::consumer_config(kafka);
    // Never subscribed: it never joins the group, nor commits.
    ccfg.set("fetch.wait.max.ms", "50");
    let consumer: BaseConsumer<AuthContext> = ccfg
        .create_with_context(ctx("lessons reader"))
        .map_err(|e| client_err("reader", e))?;
    let read_err = |source| LessonsError::Read {
        topic: topic.to_string(),
        source,
    };
    let md = consumer
        .fetch_metadata(Some(topic), kafka.metadata_timeout)
        .map_err(read_err)?;
    let parts = md.topics().first().map_or(0, |t| t.partitions().len());
    let mut tpl = TopicPartitionList::new();
    for p in 0..parts as i32 {
        tpl.add_partition_offset(topic, p, Offset::End)
            .map_err(read_err)?;
    }
    consumer.assign(&tpl).map_err(read_err)?;
    // Publish each table's lessons.
    let group = kafka.group_id.clone();
    let (tx, mut rx) = mpsc::unbounded_channel();
    for (name, control) in &tables {
        control.share_lessons(name.clone(), tx.clone());
    }
    drop(tx);
    let controls: HashMap<String, Arc<Control>> = tables
        .iter()
        .map(|(n, c)| (n.to_string(), c.clone()))
        .collect();
    let reader = {
        let (group, me, stop) = (group.clone(), me.clone(), stop.clone());
        std::thread::Builder::new()
            .name("lessons".into())
            .spawn(move || read_loop(&consumer, &group, &me, &controls, &stop))
            .expect("spawn the lessons reader")
    };
    info!(
        event = "lessons_shared",
        topic,
        partitions = parts,
        "lessons shared with the job's other workers"
    );
    while let Some((table, lesson)) = rx.recv().await {
        let wire = Wire {
            group: group.clone(),
            table: table.to_string(),
            lesson: lesson.lesson,
            level: lesson.level,
            from: me.clone(),
        };
        let payload = wire.encode();
        let record = FutureRecord::<str, [u8]>::to(topic)
            .key(&group)
            .payload(&payload);
        // Not awaited: delivery is best effort, and the next lesson must
        // not wait for this one's acknowledgement.
        match producer.send_result(record) {
            Ok(_) => {
                info!(event = "lesson_sent", table = %table, lesson = ?lesson.lesson, level = lesson.level, "lesson sent to the job's other workers")
            }
            Err((e, _)) => {
                debug!(event = "lesson_not_sent", table = %table, lesson = ?lesson.lesson, error = %e, "lesson not sent")
            }
        }
    }
    stop.store(true, Relaxed);
    let _ = reader.join();
    Ok(())
}

/// Takes peers' lessons until `stop`.
fn read_loop(
    consumer: &BaseConsumer<AuthContext>,
    group: &str,
    me: &str,
    controls: &HashMap<String, Arc<Control>>,
    stop: &AtomicBool,
) {
    while !stop.load(Relaxed) {
        let Some(m) = consumer.poll(POLL) else {
            continue;
        };
        let m = match m {
            Ok(m) => m,
            Err(e) => {
                debug!(event = "lessons_read_failed", error = %e, "lessons read failed");
                std::thread::sleep(POLL);
                continue;
            }
        };
        let w = match Wire::decode(m.payload().unwrap_or_default()) {
            Ok(w) => w,
            Err(e) => {
                debug!(event = "lesson_unreadable", offset = m.offset(), error = %e, "not a lesson");
                continue;
            }
        };
        if !w.is_for(group, me) {
            continue;
        }
        if let Some(control) = controls.get(&w.table) {
            let taken = control.peer_lesson(w.peer_lesson());
            info!(event = "lesson_heard", table = %w.table, lesson = ?w.lesson, level = w.level, from = %w.from, rule = taken, "a peer's lesson");
        }
    }
}

/// Creates `topic` with one partition and an hour's retention, if missing.
/// The broker's default replication first; one replica where the broker
/// takes no default (brokers before Kafka 2.4).
async fn create_topic(
    kafka: &KafkaSettings,
    topic: &str,
    ctx: AuthContext,
) -> Result<(), LessonsError> {
    let admin: AdminClient<AuthContext> = crate::dlq::producer_config(kafka)
        .create_with_context(ctx)
        .map_err(|source| LessonsError::Client {
            topic: topic.to_string(),
            client: "admin client",
            source,
        })?;
    let opts = AdminOptions::new().operation_timeout(Some(kafka.metadata_timeout));
    let mut last = String::new();
    for replication in [-1, 1] {
        let new = NewTopic::new(topic, 1, TopicReplication::Fixed(replication))
            .set("retention.ms", "3600000");
        let created =
            admin
                .create_topics([&new], &opts)
                .await
                .map_err(|e| LessonsError::Create {
                    topic: topic.to_string(),
                    reason: e.to_string(),
                })?;
        match created.into_iter().next() {
            Some(Ok(_)) | Some(Err((_, RDKafkaErrorCode::TopicAlreadyExists))) | None => {
                return Ok(())
            }
            Some(Err((_, code))) => last = code.to_string(),
        }
    }
    Err(LessonsError::Create {
        topic: topic.to_string(),
        reason: last,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lesson_reads_back_as_written() {
        let w = Wire {
            group: "g".into(),
            table: "orders".into(),
            lesson: Lesson::Settled,
            level: 0.75,
            from: "h/1/00".into(),
        };
        let bytes = w.encode();
        assert_eq!(
            String::from_utf8_lossy(&bytes),
            r#"{"group":"g","table":"orders","lesson":"settled","level":0.75,"from":"h/1/00"}"#
        );
        assert_eq!(Wire::decode(&bytes).unwrap(), w);
        assert!(Wire::decode(b"{\"group\":\"g\"}").is_err());
        assert!(Wire::decode(b"not json").is_err());
    }

    #[test]
    fn a_worker_takes_only_its_peers_lessons() {
        let w = Wire {
            group: "g".into(),
            table: "t".into(),
            lesson: Lesson::FirstMeeting,
            level: 1.0,
            from: "a".into(),
        };
        assert!(w.is_for("g", "b"));
        assert!(!w.is_for("g", "a"), "its own");
        assert!(!w.is_for("other", "b"), "another job's");
    }
}
