//! The Kafka source: one thread that owns the consumer.
//!
//! It polls the consumer group, tracks every record it forwards (in delivery
//! order) and hands records to the async pipeline through a bounded channel.
//! When the channel is full it **pauses** its partitions and keeps polling, so
//! a slow table never makes it miss `max.poll.interval.ms`. It commits the
//! acked watermarks periodically, on revocation (after draining the revoked
//! partitions' in-flight writes), and at shutdown. Draining marks the
//! partitions closing: writes under way finish, records not yet being written
//! are abandoned (and read again by the next owner).
//!
//! It is a thread, not a task, because librdkafka runs rebalance callbacks
//! inside `poll`, and a revocation must block until the writes of the revoked
//! partitions are acknowledged. Deliberately not here: decoding and writing.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance};
use rdkafka::error::KafkaError;
use rdkafka::message::{BorrowedMessage, Headers, Message};
use rdkafka::{ClientContext, Offset, TopicPartitionList};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::acks::{Acks, RecordRef};
use crate::backlog::{self, BacklogReader, Cadence, GroupView};
use crate::config::KafkaSettings;
use crate::offsets::{OffsetTracker, TopicPartition};
use crate::ops::live::Live;
use crate::record::Record;
use crate::telemetry::Counters;

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
}

#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("cannot reach Kafka at {brokers}: {cause}")]
    Unreachable { brokers: String, cause: KafkaError },
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

/// How many records of backlog one partition weighs in [`Assignment::share`]
/// even when it has none: without a backlog, the share is the share of
/// partitions.
const PARTITION_WEIGHT: f64 = 100.0;

impl Assignment {
    /// This worker's share of the work of `topics`: its backlog plus a base
    /// weight per partition, over the group's. With a large backlog (a batch
    /// job, a catch-up) it is the share of the records left, so a worker whose
    /// peers are done takes the capacity they no longer use; with none it is
    /// the share of partitions. None when the topics' partitions are unknown.
    pub fn share(&self, topics: &[String]) -> Option<f64> {
        let in_topics = |t: &str| topics.iter().any(|x| x == t);
        let total_parts: usize = topics.iter().filter_map(|t| self.partitions.get(t)).sum();
        if total_parts == 0 {
            return None;
        }
        let mine: Vec<&TopicPartition> =
            self.assigned.iter().filter(|(t, _)| in_topics(t)).collect();
        let lag = |tp: &TopicPartition| self.backlog.get(tp).copied().unwrap_or(0).max(0) as f64;
        let total_lag: f64 = self
            .backlog
            .iter()
            .filter(|((t, _), _)| in_topics(t))
            .map(|(tp, _)| lag(tp))
            .sum();
        let my_lag: f64 = mine.iter().map(|tp| lag(tp)).sum();
        let w = PARTITION_WEIGHT;
        Some((my_lag + w * mine.len() as f64) / (total_lag + w * total_parts as f64))
    }
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
        .set("enable.partition.eof", "false");
    for (k, v) in &kafka.properties {
        cfg.set(k, v);
    }
    cfg
}

struct Ctx {
    acks: Arc<Acks>,
    held: Mutex<VecDeque<Record>>,
    paused: AtomicBool,
    closing: AtomicBool,
    assigned_once: AtomicBool,
    /// Between a revocation and the next assignment (eager rebalancing): the
    /// worker holds nothing, which must not read as "caught up".
    rebalancing: AtomicBool,
    /// When the last revocation came, while no assignment has followed.
    revoked_at: Mutex<Option<Instant>>,
    drain_timeout: Duration,
    /// End offset seen at assignment, per partition; absent until learnt.
    targets: Mutex<HashMap<TopicPartition, i64>>,
    /// Partitions whose start position and end offset are still to be learnt.
    to_learn: Mutex<Vec<TopicPartition>>,
    counters: Arc<Counters>,
    /// Each source topic's partition count (from the metadata at start).
    partitions: Mutex<HashMap<String, usize>>,
    assignment: tokio::sync::watch::Sender<Assignment>,
    live: Arc<Live>,
}

impl ClientContext for Ctx {
    /// Consumer lag of each held partition (librdkafka: end offset minus the
    /// committed offset), for the metrics endpoint.
    fn stats(&self, stats: rdkafka::Statistics) {
        let mut lag = std::collections::BTreeMap::new();
        for (name, topic) in &stats.topics {
            for p in topic.partitions.values() {
                if p.partition >= 0 && p.desired && p.consumer_lag >= 0 {
                    lag.insert((name.clone(), p.partition), p.consumer_lag);
                }
            }
        }
        self.live.set_lag(lag);
    }
}

impl ConsumerContext for Ctx {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Revoke(tpl) => {
                self.rebalancing.store(true, SeqCst);
                *self.revoked_at.lock().unwrap() = Some(Instant::now());
                self.on_revoke(consumer, tpl)
            }
            Rebalance::Error(e) => warn!(error = %e, "rebalance error"),
            Rebalance::Assign(_) => {}
        }
    }

    fn post_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Assign(tpl) = rebalance {
            let tps = tps_of(tpl);
            {
                let mut tracker = self.acks.lock();
                for (t, p) in &tps {
                    tracker.assign(t, *p, None);
                }
            }
            self.to_learn.lock().unwrap().extend(tps.iter().cloned());
            if self.paused.load(SeqCst) {
                let _ = consumer.pause(tpl);
            }
            self.assigned_once.store(true, SeqCst);
            self.rebalancing.store(false, SeqCst);
            *self.revoked_at.lock().unwrap() = None;
            self.publish_assignment();
            info!(partitions = %fmt_tps(&tps), "partitions assigned");
        }
    }
}

impl Ctx {
    /// Drains the revoked partitions' in-flight records, commits, forgets them.
    fn on_revoke(&self, consumer: &BaseConsumer<Self>, tpl: &TopicPartitionList) {
        let tps = tps_of(tpl);
        self.drop_held(|t, p| tps.iter().any(|(tt, pp)| tt == t && *pp == p));
        // Writes under way finish; records not yet being written are abandoned.
        self.acks.close(&tps);
        let wait = if self.closing.load(SeqCst) {
            Duration::ZERO
        } else {
            self.drain_timeout
        };
        let drained = self.acks.wait_until(Instant::now() + wait, |t| {
            tps.iter().all(|(topic, p)| t.pending(topic, *p) == 0)
        });
        if !drained {
            warn!(partitions = %fmt_tps(&tps), "revoked partitions not drained in time; unwritten records will be redelivered to the next owner");
        }
        if consumer.assignment_lost() {
            warn!("assignment lost (session timed out): not committing revoked partitions");
        } else if let Err(e) = commit(consumer, &self.acks, &self.counters, Some(&tps)) {
            warn!(error = %e, "commit on revocation failed");
        }
        {
            let tracker = self.acks.lock();
            let mut targets = self.targets.lock().unwrap();
            for (t, p) in &tps {
                // At the final unsubscribe the run's progress keeps them.
                match tracker.watermark(t, *p) {
                    Some(at) if self.closing.load(SeqCst) => self.live.left((t.clone(), *p), at),
                    _ => self.live.forget(&(t.clone(), *p)),
                }
                targets.remove(&(t.clone(), *p));
            }
        }
        self.acks.revoke(&tps);
        self.publish_assignment();
        info!(partitions = %fmt_tps(&tps), "partitions revoked");
    }

    fn publish_assignment(&self) {
        let backlog = self.assignment.borrow().backlog.clone();
        let a = Assignment {
            assigned: self.acks.lock().assigned(),
            partitions: self.partitions.lock().unwrap().clone(),
            backlog,
        };
        self.assignment.send_replace(a);
    }

    /// Drops held (not yet forwarded) records matching `which`, untracking them.
    fn drop_held(&self, which: impl Fn(&str, i32) -> bool) {
        let mut held = self.held.lock().unwrap();
        let mut tracker = self.acks.lock();
        held.retain(|r| {
            let drop = which(&r.at.topic, r.at.partition);
            if drop {
                tracker.untrack_from(&r.at.topic, r.at.partition, r.at.offset);
            }
            !drop
        });
    }
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
    let ctx = Ctx {
        acks: acks.clone(),
        held: Mutex::new(VecDeque::new()),
        paused: AtomicBool::new(false),
        closing: AtomicBool::new(false),
        assigned_once: AtomicBool::new(false),
        rebalancing: AtomicBool::new(false),
        revoked_at: Mutex::new(None),
        drain_timeout: opts.drain_timeout,
        targets: Mutex::new(HashMap::new()),
        to_learn: Mutex::new(Vec::new()),
        counters: counters.clone(),
        partitions: Mutex::new(HashMap::new()),
        assignment,
        live: opts.live.clone(),
    };
    let mut config = consumer_config(&opts.kafka);
    if let Some(every) = opts.stats_interval {
        if !opts.kafka.properties.contains_key("statistics.interval.ms") {
            config.set("statistics.interval.ms", every.as_millis().to_string());
        }
    }
    let consumer: BaseConsumer<Ctx> = config.create_with_context(ctx)?;
    *consumer.context().partitions.lock().unwrap() = check_topics(&consumer, &opts)?;
    let parts: Vec<TopicPartition> = {
        let counts = consumer.context().partitions.lock().unwrap();
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
    let backlog = BacklogReader::spawn(
        &consumer_config(&opts.kafka),
        parts,
        starts_at_end(&opts.kafka),
        cadence,
    )
    .inspect_err(
        |e| warn!(error = %e, "cannot start the backlog reader: shares by partitions only"),
    )
    .ok();
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
        abort,
        stall_warned: None,
    };
    let exit = poller.run_loop(&stop);
    let result = match exit {
        Ok(SourceExit::CaughtUp) => Ok(SourceExit::CaughtUp),
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

/// Partitions behind, as topic/partition=at/end.
fn fmt_behind(behind: &[(TopicPartition, Option<i64>, i64)]) -> String {
    let one = |((t, p), at, end): &(TopicPartition, Option<i64>, i64)| {
        format!("{t}/{p}={}/{end}", at.map_or("?".into(), |a| a.to_string()))
    };
    behind.iter().map(one).collect::<Vec<_>>().join(",")
}

/// `auto.offset.reset` sends a partition with no committed offset to its end.
fn starts_at_end(kafka: &KafkaSettings) -> bool {
    kafka
        .properties
        .get("auto.offset.reset")
        .is_some_and(|v| v == "latest" || v == "largest" || v == "end")
}

/// Checks that every topic exists; returns each topic's partition count.
fn check_topics(
    consumer: &BaseConsumer<Ctx>,
    opts: &SourceOptions,
) -> Result<HashMap<String, usize>, SourceError> {
    let brokers = opts.kafka.brokers.clone();
    let md = consumer
        .fetch_metadata(None, opts.kafka.metadata_timeout)
        .map_err(|cause| SourceError::Unreachable {
            brokers: brokers.clone(),
            cause,
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

struct Poller {
    consumer: BaseConsumer<Ctx>,
    opts: SourceOptions,
    tx: mpsc::Sender<Record>,
    counters: Arc<Counters>,
    next_commit: Instant,
    /// Reads the group's backlog on its own thread (None: it could not start).
    backlog: Option<BacklogReader>,
    /// `--until-caught-up`: each partition's end offset at the first look at
    /// the group's backlog, and the group's position on it at the last look.
    group_targets: HashMap<TopicPartition, i64>,
    group_positions: HashMap<TopicPartition, i64>,
    /// Since when this worker has been caught up and committed (waiting for
    /// the group).
    done_at: Option<Instant>,
    /// Set when the pipeline died: draining cannot make progress, skip it.
    abort: CancellationToken,
    /// When a stalled rebalance was last warned about.
    stall_warned: Option<Instant>,
}

/// How often the group's backlog per partition is re-read.
const BACKLOG_REFRESH: Duration = Duration::from_secs(5);

/// How long a revocation may go without an assignment before a warning.
const REBALANCE_STALL: Duration = Duration::from_secs(30);

/// How often, once this worker is done, it looks whether the group is.
const GROUP_DONE_POLL: Duration = Duration::from_secs(1);

/// Longest wait of each call that reads the group's backlog (a slow answer
/// only skips one refresh).
const BACKLOG_CALL_TIMEOUT: Duration = Duration::from_millis(1_000);

impl Poller {
    fn ctx(&self) -> &Ctx {
        self.consumer.context()
    }

    fn run_loop(&mut self, stop: &CancellationToken) -> Result<SourceExit, SourceError> {
        loop {
            if stop.is_cancelled() {
                return Ok(SourceExit::Stopped);
            }
            self.forward_held()?;
            self.set_paused(!self.ctx().held.lock().unwrap().is_empty())?;
            let timeout = Duration::from_millis(if self.ctx().paused.load(SeqCst) {
                20
            } else {
                100
            });
            match self.consumer.poll(timeout) {
                Some(Ok(m)) => self.accept(&m),
                Some(Err(e)) => warn!(error = %e, "kafka consumer error"),
                None => {}
            }
            self.learn_positions();
            if Instant::now() >= self.next_commit {
                self.commit_now(None);
            }
            if let Some(v) = self.backlog.as_ref().and_then(BacklogReader::take) {
                self.group_view(v);
            }
            self.warn_if_rebalance_stalls();
            if self.opts.until_caught_up && self.holds_nothing() && self.group_caught_up() {
                // Nothing of the job is left to anyone, whatever this
                // worker's place in the group: a rebalance that never
                // completes (seen with tansu) must not keep it forever.
                info!("caught up: the group has committed every partition up to its end offset, and this worker holds none");
                return Ok(SourceExit::CaughtUp);
            }
            if self.opts.until_caught_up && self.caught_up() {
                self.commit_now(None);
                if self.committed_to_end() {
                    let since = *self.done_at.get_or_insert_with(Instant::now);
                    if self.group_caught_up() {
                        info!("caught up: every assigned partition is committed up to its end offset, and the group's others too");
                        return Ok(SourceExit::CaughtUp);
                    }
                    if since.elapsed() >= self.opts.drain_timeout {
                        warn!(
                            waited_s = since.elapsed().as_secs(),
                            behind = %fmt_behind(&self.group_behind()),
                            "caught up, but the group's other partitions are not committed to their end yet; leaving anyway"
                        );
                        return Ok(SourceExit::CaughtUp);
                    }
                    // Stay in the group (a leaving member stalls the busy
                    // ones in a rebalance) until the others are done too, for
                    // at most drain_timeout.
                } else {
                    self.done_at = None;
                }
            } else {
                self.done_at = None;
            }
            if let Some(b) = &self.backlog {
                b.hurry(self.done_at.is_some());
            }
        }
    }

    /// Tracks a fresh record and queues it for the pipeline.
    fn accept(&self, msg: &BorrowedMessage<'_>) {
        let (topic, partition, offset) = (msg.topic().to_string(), msg.partition(), msg.offset());
        let epoch = match self.ctx().acks.lock().track(&topic, partition, offset) {
            Ok(e) => e,
            Err(e) => {
                warn!(error = %e, "record from an untracked partition, not forwarded (it will be redelivered)");
                return;
            }
        };
        Counters::add(&self.counters.records_consumed, 1);
        let at = RecordRef {
            topic: topic.into(),
            partition,
            offset,
            epoch,
        };
        let headers = msg.headers().map_or_else(Vec::new, |hs| {
            hs.iter()
                .map(|h| (h.key.to_string(), h.value.map(<[u8]>::to_vec)))
                .collect()
        });
        let record = Record {
            key: msg.key().map(<[u8]>::to_vec),
            value: msg.payload().map(<[u8]>::to_vec),
            headers,
            timestamp_ms: msg.timestamp().to_millis(),
            at,
        };
        self.ctx().held.lock().unwrap().push_back(record);
    }

    /// Hands held records to the pipeline until its channel is full.
    fn forward_held(&self) -> Result<(), SourceError> {
        let mut held = self.ctx().held.lock().unwrap();
        while let Some(rec) = held.pop_front() {
            match self.tx.try_send(rec) {
                Ok(()) => {}
                Err(mpsc::error::TrySendError::Full(rec)) => {
                    held.push_front(rec);
                    break;
                }
                Err(mpsc::error::TrySendError::Closed(rec)) => {
                    held.push_front(rec);
                    return Err(SourceError::PipelineClosed);
                }
            }
        }
        Ok(())
    }

    fn set_paused(&self, pause: bool) -> Result<(), SourceError> {
        if self.ctx().paused.swap(pause, SeqCst) == pause {
            return Ok(());
        }
        let assignment = self.consumer.assignment()?;
        if pause {
            debug!("pipeline full: pausing partitions");
            self.consumer.pause(&assignment)?;
        } else {
            debug!("pipeline has room: resuming partitions");
            self.consumer.resume(&assignment)?;
        }
        Ok(())
    }

    /// For newly assigned partitions: the committed offset (or where the reset
    /// policy starts) and the end offset, for the caught-up test.
    fn learn_positions(&self) {
        let pending: Vec<TopicPartition> =
            std::mem::take(&mut *self.ctx().to_learn.lock().unwrap());
        if pending.is_empty() {
            return;
        }
        let timeout = self.opts.kafka.metadata_timeout;
        let at_end = starts_at_end(&self.opts.kafka);
        let committed = match backlog::group_offsets(&self.consumer, &pending, timeout) {
            Ok(c) => c,
            Err(e) => {
                warn!(error = %e, "cannot read committed offsets; will retry");
                self.ctx().to_learn.lock().unwrap().extend(pending);
                return;
            }
        };
        for (t, p) in pending {
            let ends = self.consumer.fetch_watermarks(&t, p, timeout);
            let Ok((low, high)) = ends else {
                warn!(topic = %t, partition = p, "cannot read watermarks; will retry");
                self.ctx().to_learn.lock().unwrap().push((t, p));
                continue;
            };
            let start = backlog::group_start(&committed, &t, p, (low, high), at_end);
            let mut tracker = self.ctx().acks.lock();
            if tracker.epoch(&t, p).is_none() {
                continue;
            }
            tracker.set_committed_from_broker(&t, p, start);
            debug!(topic = %t, partition = p, start, end = high, "partition position");
            self.ctx().live.set_position((t.clone(), p), start, high);
            self.ctx().targets.lock().unwrap().insert((t, p), high);
        }
    }

    /// Takes a reading of the group's backlog: publishes it with the
    /// assignment, and notes the group's positions for `group_caught_up`
    /// (the end offsets of the first reading are the targets).
    fn group_view(&mut self, v: GroupView) {
        // The group's committed position for every partition, this worker's
        // too: every worker computes its share from the same kind of
        // figures, so the shares add up to about 1.
        if self.group_targets.is_empty() {
            self.group_targets = v.ends;
        }
        self.group_positions = v.positions;
        self.ctx().assignment.send_modify(|a| a.backlog = v.backlog);
    }

    /// The partitions this worker does not hold that the group has not yet
    /// committed up to the end offsets of the first look (as of the last
    /// look): (partition, the group's position if known, end).
    fn group_behind(&self) -> Vec<(TopicPartition, Option<i64>, i64)> {
        let mine = self.ctx().acks.lock().assigned();
        let mut behind: Vec<_> = self
            .group_targets
            .iter()
            .filter(|(tp, _)| !mine.contains(tp))
            .map(|(tp, end)| (tp.clone(), self.group_positions.get(tp).copied(), *end))
            .filter(|(_, at, end)| at.is_none_or(|at| at < *end))
            .collect();
        behind.sort();
        behind
    }

    /// The group has been looked at, and nothing is behind.
    fn group_caught_up(&self) -> bool {
        !self.group_targets.is_empty() && self.group_behind().is_empty()
    }

    /// No partition assigned and no record held or in flight.
    fn holds_nothing(&self) -> bool {
        let tracker = self.ctx().acks.lock();
        tracker.assigned().is_empty()
            && tracker.pending_total() == 0
            && self.ctx().held.lock().unwrap().is_empty()
    }

    /// Warns, every `REBALANCE_STALL`, while a revocation has had no
    /// assignment after it for that long: the group coordinator has not
    /// completed the rebalance, and this worker holds no partition.
    fn warn_if_rebalance_stalls(&mut self) {
        let Some(since) = *self.ctx().revoked_at.lock().unwrap() else {
            return;
        };
        let waited = since.elapsed();
        if waited >= REBALANCE_STALL
            && self
                .stall_warned
                .is_none_or(|t| t.elapsed() >= REBALANCE_STALL)
        {
            self.stall_warned = Some(Instant::now());
            warn!(
                waited_s = waited.as_secs(),
                "no partitions assigned since a revocation: the group's rebalance has not completed"
            );
        }
    }

    /// Every assigned partition written up to its end offset (not yet committed).
    fn caught_up(&self) -> bool {
        self.reached(|t, tp| t.watermark(&tp.0, tp.1))
    }

    fn committed_to_end(&self) -> bool {
        self.reached(|t, tp| t.committed(&tp.0, tp.1))
    }

    fn reached(&self, pos: impl Fn(&OffsetTracker, &TopicPartition) -> Option<i64>) -> bool {
        let ctx = self.ctx();
        if !ctx.assigned_once.load(SeqCst)
            || ctx.rebalancing.load(SeqCst)
            || !ctx.held.lock().unwrap().is_empty()
        {
            return false;
        }
        let tracker = self.ctx().acks.lock();
        let targets = self.ctx().targets.lock().unwrap();
        tracker.pending_total() == 0
            && tracker
                .assigned()
                .iter()
                .all(|tp| match (targets.get(tp), pos(&tracker, tp)) {
                    (Some(end), Some(at)) => at >= *end,
                    _ => false,
                })
    }

    fn commit_now(&mut self, only: Option<&[TopicPartition]>) {
        self.next_commit = Instant::now() + self.opts.kafka.commit_interval;
        if let Err(e) = commit(&self.consumer, &self.ctx().acks, &self.counters, only) {
            warn!(error = %e, "commit failed; will retry");
        }
    }

    /// Stops fetching, waits for in-flight records (up to the drain deadline),
    /// commits what was written.
    fn drain(&mut self) -> SourceExit {
        let ctx = self.consumer.context().clone();
        ctx.drop_held(|_, _| true);
        let _ = self.set_paused(true);
        // Writes under way finish; records not yet being written are abandoned.
        let assigned = ctx.acks.lock().assigned();
        ctx.acks.close(&assigned);
        let wait = if self.abort.is_cancelled() {
            Duration::ZERO
        } else {
            self.opts.drain_timeout
        };
        let deadline = Instant::now() + wait;
        let pending = ctx.acks.lock().pending_total();
        info!(
            in_flight = pending,
            "draining: waiting for in-flight records"
        );
        let drained = loop {
            let slice = Instant::now()
                + Duration::from_millis(100)
                    .min(deadline.saturating_duration_since(Instant::now()));
            if ctx.acks.wait_until(slice, |t| t.pending_total() == 0) {
                break true;
            }
            if Instant::now() >= deadline {
                break false;
            }
            // Keep serving callbacks; a paused consumer returns no records,
            // but one racing in from a fresh assignment is untracked again.
            if let Some(Ok(m)) = self.consumer.poll(Duration::ZERO) {
                ctx.acks
                    .lock()
                    .untrack_from(m.topic(), m.partition(), m.offset());
            }
        };
        self.commit_now(None);
        if drained {
            info!("drained: all in-flight records written and committed");
            SourceExit::Stopped
        } else {
            let left = ctx.acks.lock().pending_total();
            warn!(
                in_flight = left,
                timeout_s = self.opts.drain_timeout.as_secs(),
                "drain deadline passed; unwritten records will be redelivered"
            );
            SourceExit::DrainTimedOut
        }
    }
}

/// Commits the watermarks that moved (optionally only for some partitions).
fn commit(
    consumer: &BaseConsumer<Ctx>,
    acks: &Acks,
    counters: &Counters,
    only: Option<&[TopicPartition]>,
) -> Result<(), KafkaError> {
    let due: Vec<(TopicPartition, i64)> = acks
        .lock()
        .to_commit()
        .into_iter()
        .filter(|(tp, _)| only.is_none_or(|o| o.contains(tp)))
        .collect();
    if due.is_empty() {
        return Ok(());
    }
    let mut tpl = TopicPartitionList::new();
    for ((t, p), o) in &due {
        tpl.add_partition_offset(t, *p, Offset::Offset(*o))?;
    }
    consumer.commit(&tpl, CommitMode::Sync)?;
    let mut tracker = acks.lock();
    for ((t, p), o) in &due {
        tracker.mark_committed(t, *p, *o);
    }
    drop(tracker);
    Counters::add(&counters.commits, 1);
    let s = counters.snapshot();
    let offsets: Vec<String> = due
        .iter()
        .map(|((t, p), o)| format!("{t}/{p}={o}"))
        .collect();
    info!(
        partitions = due.len(),
        offsets = %offsets.join(","),
        consumed = s.records_consumed,
        written = s.items_written,
        dead_lettered = s.dead_lettered,
        throttled = s.throttled_requests,
        "committed"
    );
    Ok(())
}

fn tps_of(tpl: &TopicPartitionList) -> Vec<TopicPartition> {
    tpl.elements()
        .iter()
        .map(|e| (e.topic().to_string(), e.partition()))
        .collect()
}

fn fmt_tps(tps: &[TopicPartition]) -> String {
    tps.iter()
        .map(|(t, p)| format!("{t}/{p}"))
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assignment(mine: &[i32], backlog: &[i64]) -> Assignment {
        Assignment {
            assigned: mine.iter().map(|p| ("t".to_string(), *p)).collect(),
            partitions: HashMap::from([("t".to_string(), backlog.len())]),
            backlog: backlog
                .iter()
                .enumerate()
                .map(|(p, n)| (("t".to_string(), p as i32), *n))
                .collect(),
        }
    }

    fn share(a: &Assignment) -> f64 {
        a.share(&["t".to_string()]).unwrap()
    }

    #[test]
    fn without_a_backlog_the_share_is_the_share_of_partitions() {
        assert!((share(&assignment(&[0, 1], &[0; 6])) - 2.0 / 6.0).abs() < 1e-12);
        let unknown = Assignment {
            backlog: HashMap::new(),
            ..assignment(&[0], &[0, 0, 0])
        };
        assert!((share(&unknown) - 1.0 / 3.0).abs() < 1e-12);
        assert_eq!(assignment(&[], &[]).share(&["t".to_string()]), None);
    }

    #[test]
    fn with_a_backlog_the_share_follows_the_records_left() {
        // Even backlogs: the share of partitions.
        let even = assignment(&[0, 1], &[5_000; 6]);
        assert!((share(&even) - 2.0 / 6.0).abs() < 1e-12);
        // Peers done, this worker's partitions still full: nearly all of it.
        let last = assignment(&[0, 1], &[5_000, 5_000, 0, 0, 0, 0]);
        assert!(share(&last) > 0.95, "{}", share(&last));
        // This worker done, peers busy: little, never nothing.
        let done = assignment(&[0, 1], &[0, 0, 5_000, 5_000, 5_000, 5_000]);
        assert!(share(&done) > 0.0 && share(&done) < 0.02);
        // Shares of all the group's workers add up to 1.
        let b = [900, 100, 3_000, 0, 40, 7];
        let sum: f64 = [&[0, 1][..], &[2, 3], &[4, 5]]
            .iter()
            .map(|m| share(&assignment(m, &b)))
            .sum();
        assert!((sum - 1.0).abs() < 1e-12);
    }
}
