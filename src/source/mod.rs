//! The Kafka source: one thread that owns the consumer.
//!
//! It polls the consumer group, tracks every record it forwards (in delivery
//! order) and hands records to the async pipeline through a bounded channel.
//! When the channel is full it **stalls** (polls only now and then; what
//! librdkafka fetched ahead stays in its bounded queue); it **pauses** the
//! partitions of a congested table (one whose queue in the pipeline is long)
//! while others flow, and all of them at the byte budget, once that has
//! lasted a second (a pause drops the prefetch, [`pausing`]), and keeps
//! polling, so a slow table never makes it miss
//! `max.poll.interval.ms` nor holds up the other tables. It commits the
//! acked watermarks periodically, on revocation (after draining the revoked
//! partitions' in-flight writes), and at shutdown. Draining marks the
//! partitions closing: writes under way finish, records not yet being written
//! are abandoned (and read again by the next owner).
//!
//! It is a thread, not a task, because librdkafka runs rebalance callbacks
//! inside `poll`, and a revocation must block until the writes of the revoked
//! partitions are acknowledged. Deliberately not here: decoding and writing.
//!
//! - [`context`]: the consumer's context: rebalance callbacks (drain, commit
//!   and forget revoked partitions), consumer lag from librdkafka's stats.
//! - [`pausing`]: which partitions are held paused (pure).
//! - [`poller`]: the poll loop: track, forward, pause, learn positions,
//!   commit, drain.
//! - [`caught_up`]: batch mode's judgement: this worker's partitions and the
//!   group's, against their end offsets.
//! - [`backlog`]: the group's backlog per partition, read on its own thread
//!   (for shares of a table and for the group's progress).

pub mod backlog;
mod caught_up;
mod commit;
mod context;
mod pausing;
mod poller;

use std::collections::HashMap;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::TopicPartitionList;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use crate::acks::Acks;
use crate::config::KafkaSettings;
use crate::congestion::Congestion;
use crate::offsets::TopicPartition;
use crate::ops::live::Live;
use crate::record::Record;
use crate::telemetry::Counters;
use backlog::{BacklogReader, Cadence};
use context::Ctx;
use poller::{Poller, BACKLOG_CALL_TIMEOUT, BACKLOG_REFRESH, GROUP_DONE_POLL};

/// Why the source stopped (when it stopped without an error).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceExit {
    /// Asked to stop; everything in flight was written and committed.
    Stopped,
    /// `--until-caught-up`: every assigned partition is committed up to its end.
    CaughtUp,
    /// Asked to stop, but the drain deadline passed with records in flight;
    /// what was written is committed, the rest will be redelivered.
    DrainTimedOut,
    /// `--until-caught-up`: this worker left with the group's job
    /// unfinished: its own partitions done (or none given it for long,
    /// rejoins included) while the group's others were behind and nobody
    /// moved them. Leaving makes the coordinator hand them to the members
    /// still there; the exit code (3) says work is left.
    WorkLeft,
}

#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// `cause`: the failed request, and what librdkafka reported meanwhile
    /// (a refused TLS handshake, say).
    #[error("cannot reach Kafka at {brokers}: {cause}")]
    Unreachable { brokers: String, cause: String },
    #[error("topics missing on the Kafka cluster at {brokers}: {topics:?} (create them first)")]
    MissingTopics {
        brokers: String,
        topics: Vec<String>,
    },
    #[error("kafka consumer: {0}")]
    Kafka(#[from] KafkaError),
    #[error("the pipeline stopped before the source")]
    PipelineClosed,
}

/// The partitions this worker holds, each topic's partition count, and the
/// group's backlog per partition: what the throttle control needs to know its
/// share of a table.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Assignment {
    pub assigned: Vec<TopicPartition>,
    pub partitions: HashMap<String, usize>,
    /// Records left per partition of the subscribed topics, whoever holds it
    /// (end offset minus the group's committed position). Refreshed every few
    /// seconds; empty until then.
    pub backlog: HashMap<TopicPartition, i64>,
}

/// What the source needs to run.
#[derive(Debug, Clone)]
pub struct SourceOptions {
    pub kafka: KafkaSettings,
    pub topics: Vec<String>,
    pub until_caught_up: bool,
    pub drain_timeout: Duration,
    /// Where positions and lag are published for the operator endpoints.
    pub live: Arc<Live>,
    /// librdkafka's statistics interval, for consumer lag (None: no stats).
    pub stats_interval: Option<Duration>,
    /// Bytes of records read and not yet done (each record gives its share
    /// back when dropped); the source pauses at `max_buffered_bytes`.
    pub buffered: Arc<std::sync::atomic::AtomicUsize>,
    pub max_buffered_bytes: usize,
    /// Which tables' queues are long: their topics' partitions are paused.
    pub congestion: Arc<Congestion>,
    /// MSK IAM tokens (`kafka.auth = "aws-msk-iam"`).
    pub tokens: Option<Arc<crate::msk_iam::MskIamTokens>>,
}

/// Builds the consumer configuration: ours first, then the pass-through
/// properties (validation refused those we must own).
pub fn consumer_config(kafka: &KafkaSettings) -> ClientConfig {
    let mut cfg = ClientConfig::new();
    cfg.set("bootstrap.servers", &kafka.brokers)
        .set("group.id", &kafka.group_id)
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("auto.offset.reset", "earliest")
        .set("enable.partition.eof", "false")
        // Records of aborted transactions are skipped, those of open ones
        // waited for; markers are never delivered (the poller follows the
        // consumer's position past them).
        .set("isolation.level", "read_committed");
    for (k, v) in &kafka.properties {
        cfg.set(k, v);
    }
    crate::msk_iam::configure(&mut cfg, kafka);
    cfg
}

/// Runs the source until stopped, caught up, or failed. Blocking: call it
/// from a dedicated thread.
pub fn run(
    opts: SourceOptions,
    tx: mpsc::Sender<Record>,
    acks: Arc<Acks>,
    counters: Arc<Counters>,
    stop: CancellationToken,
    abort: CancellationToken,
    assignment: tokio::sync::watch::Sender<Assignment>,
) -> Result<SourceExit, SourceError> {
    let mut ctx = Ctx::new(
        acks.clone(),
        counters.clone(),
        opts.drain_timeout,
        assignment,
        opts.live.clone(),
    );
    ctx.tokens = opts.tokens.clone();
    let config = main_consumer_config(&opts);
    let consumer: BaseConsumer<Ctx> = config.create_with_context(ctx)?;
    *consumer.context().partitions.lock() = check_topics(&consumer, &opts)?;
    let backlog = start_backlog(&consumer, &opts);
    let topics: Vec<&str> = opts.topics.iter().map(String::as_str).collect();
    consumer.subscribe(&topics)?;
    let mut poller = Poller {
        consumer,
        opts,
        tx,
        counters,
        next_commit: Instant::now(),
        backlog,
        group_targets: HashMap::new(),
        group_positions: HashMap::new(),
        done_at: None,
        idle_since: None,
        abort,
        stall_warned: None,
        group_moved_at: None,
        group_stall_warned: None,
        kafka_seen: None,
        congested: Default::default(),
        congestion_seen: u64::MAX,
        polled_at: None,
    };
    let exit = poller.run_loop(&stop);
    let result = match exit {
        // Batch mode's exits: nothing of the worker's own is in flight (its
        // partitions committed to their end, or none held), so no drain,
        // whose "stopped" would hide that the group's work is left.
        Ok(exit @ (SourceExit::CaughtUp | SourceExit::WorkLeft)) => Ok(exit),
        Ok(_) => Ok(poller.drain()),
        Err(e) => {
            poller.drain();
            Err(e)
        }
    };
    poller.consumer.context().closing.store(true, SeqCst);
    poller.consumer.unsubscribe();
    result
}

/// librdkafka's `fetch.queue.backoff.ms` unless the config sets it.
const FETCH_QUEUE_BACKOFF_MS: u32 = 100;

/// The consumer's config: the worker's own settings, plus librdkafka's
/// prefetch queue sized to the byte budget and lag statistics if asked.
fn main_consumer_config(opts: &SourceOptions) -> ClientConfig {
    let mut config = consumer_config(&opts.kafka);
    let defaults = prefetch_defaults(&opts.kafka.properties, opts.max_buffered_bytes);
    for (key, value) in defaults {
        config.set(key, value);
    }
    if let Some(every) = opts.stats_interval {
        if !opts.kafka.properties.contains_key("statistics.interval.ms") {
            config.set("statistics.interval.ms", every.as_millis().to_string());
        }
    }
    config
}

/// librdkafka's prefetch settings the worker chooses where the config's
/// `[kafka.properties]` do not.
fn prefetch_defaults(
    properties: &std::collections::BTreeMap<String, String>,
    max_buffered_bytes: usize,
) -> Vec<(&'static str, String)> {
    // librdkafka's prefetch queue (64 MB by default) is sized to half the
    // pipeline's byte budget, so the two together stay within 1.5 times it.
    let kb = (max_buffered_bytes / 2 / 1024).clamp(1024, 65_536);
    // Once that queue is over its bound, librdkafka postpones the next fetch
    // by `fetch.queue.backoff.ms` (1 s by default), and a worker writing
    // faster than that drains the queue and waits: 1 KB records through the
    // stand-in went 43k records/s steady with 1 s, 55k with 20-100 ms.
    [
        ("queued.max.messages.kbytes", kb.to_string()),
        ("fetch.queue.backoff.ms", FETCH_QUEUE_BACKOFF_MS.to_string()),
    ]
    .into_iter()
    .filter(|(key, _)| !properties.contains_key(*key))
    .collect()
}

/// The backlog reader over every routed partition (None, logged, when it
/// cannot start: shares then go by partitions only).
fn start_backlog(consumer: &BaseConsumer<Ctx>, opts: &SourceOptions) -> Option<BacklogReader> {
    let parts: Vec<TopicPartition> = {
        let counts = consumer.context().partitions.lock();
        opts.topics
            .iter()
            .flat_map(|t| (0..counts.get(t).copied().unwrap_or(0) as i32).map(|p| (t.clone(), p)))
            .collect()
    };
    let cadence = Cadence {
        every: BACKLOG_REFRESH,
        hurried: GROUP_DONE_POLL,
        call_timeout: opts.kafka.metadata_timeout.min(BACKLOG_CALL_TIMEOUT),
    };
    BacklogReader::spawn(
        &consumer_config(&opts.kafka),
        crate::msk_iam::AuthContext {
            tokens: opts.tokens.clone(),
            client: "backlog",
        },
        parts,
        starts_at_end(&opts.kafka),
        cadence,
    )
    .inspect_err(
        |e| warn!(error = %e, "cannot start the backlog reader: shares by partitions only"),
    )
    .ok()
}

/// Partitions behind, as topic/partition=at/end.
pub(super) fn fmt_behind(behind: &[(TopicPartition, Option<i64>, i64)]) -> String {
    let one = |((t, p), at, end): &(TopicPartition, Option<i64>, i64)| {
        format!("{t}/{p}={}/{end}", at.map_or("?".into(), |a| a.to_string()))
    };
    behind.iter().map(one).collect::<Vec<_>>().join(",")
}

/// `auto.offset.reset` sends a partition with no committed offset to its end.
pub(super) fn starts_at_end(kafka: &KafkaSettings) -> bool {
    kafka
        .properties
        .get("auto.offset.reset")
        .is_some_and(|v| v == "latest" || v == "largest" || v == "end")
}

/// How long the first metadata request of the start-up check waits.
const METADATA_SLICE: Duration = Duration::from_millis(500);

/// How many queued events the start-up check serves before it reports a
/// broker it could not reach (librdkafka's reasons among them).
const QUEUED_AT_FAILURE: usize = 64;

/// Checks that every topic exists; returns each topic's partition count.
fn check_topics(
    consumer: &BaseConsumer<Ctx>,
    opts: &SourceOptions,
) -> Result<HashMap<String, usize>, SourceError> {
    let brokers = opts.kafka.brokers.clone();
    // Asked in slices, serving the consumer's queue between them: librdkafka
    // hands its logs and errors (a refused TLS handshake, say) to the queue,
    // so by the deadline the reason is known.
    let deadline = Instant::now() + opts.kafka.metadata_timeout;
    let mut slice = METADATA_SLICE;
    let md = loop {
        let _ = consumer.poll(Duration::ZERO);
        let left = deadline.saturating_duration_since(Instant::now());
        // Each try waits twice as long as the last; the last takes the rest.
        let this = if left < slice * 2 { left } else { slice };
        match consumer.fetch_metadata(None, this) {
            Err(_) if this < left => {
                let _ = consumer.poll(Duration::from_millis(50));
                slice *= 2;
            }
            other => break other,
        }
    };
    let md = md.map_err(|cause| {
        // What the last try queued (one event per poll; nothing is
        // assigned yet, so no record is taken).
        for _ in 0..QUEUED_AT_FAILURE {
            let _ = consumer.poll(Duration::ZERO);
        }
        SourceError::Unreachable {
            brokers: brokers.clone(),
            cause: format!("{cause}{}", consumer.context().errors_told()),
        }
    })?;
    let counts: HashMap<String, usize> = md
        .topics()
        .iter()
        .filter(|t| t.error().is_none() && !t.partitions().is_empty())
        .map(|t| (t.name().to_string(), t.partitions().len()))
        .collect();
    let wanted = opts.topics.iter().chain([&opts.kafka.dead_letter_topic]);
    let missing: Vec<String> = wanted
        .filter(|t| !counts.contains_key(t.as_str()))
        .cloned()
        .collect();
    if missing.is_empty() {
        Ok(counts)
    } else {
        Err(SourceError::MissingTopics {
            brokers,
            topics: missing,
        })
    }
}

pub(super) fn tps_of(tpl: &TopicPartitionList) -> Vec<TopicPartition> {
    tpl.elements()
        .iter()
        .map(|e| (e.topic().to_string(), e.partition()))
        .collect()
}

pub(super) fn fmt_tps(tps: &[TopicPartition]) -> String {
    tps.iter()
        .map(|(t, p)| format!("{t}/{p}"))
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefetch_follows_the_byte_budget_unless_the_config_sets_it() {
        let none = std::collections::BTreeMap::new();
        let got = prefetch_defaults(&none, 64 << 20);
        assert_eq!(
            got,
            [
                ("queued.max.messages.kbytes", "32768".to_string()),
                ("fetch.queue.backoff.ms", "100".to_string()),
            ]
        );
        let mut set = std::collections::BTreeMap::new();
        set.insert("fetch.queue.backoff.ms".to_string(), "500".to_string());
        let got = prefetch_defaults(&set, 1 << 20);
        assert_eq!(got, [("queued.max.messages.kbytes", "1024".to_string())]);
    }
}
