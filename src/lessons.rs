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
//! would have met without it. Lessons are rare (one per congestion event,
//! so at most one a second per table, a few a minute in practice); each
//! carries the group and table, so jobs may share one topic.
//! The worker creates the topic when it is missing (one partition, an
//! hour's retention; with MSK IAM it must exist, as rdkafka's admin client
//! cannot sign its tokens) and, when it cannot reach or create it, runs
//! without lessons after a warning (`lessons_unavailable`). Everything runs
//! on one thread of its own, so no Kafka call delays the data path or its
//! runtime. The reader passes over lessons older than [`STALE`] and those
//! sent before it started: a lesson is about the table now.
//!
//! The same topic carries the jobs' beats (`[throttle] split_with_jobs`,
//! see `throttle::jobs`): about once a second per table, each worker says
//! that its job writes the table, whether records wait for it and what it
//! wrote. The reader starts a few thousand records before the topic's end,
//! so it hears the beats of the last seconds at once, and each table's
//! control takes its job's part among the jobs heard. A worker's first
//! request waits until those recent beats were read. A beat also says the
//! worker's pacing rate and fair share (`pace`, `fair`; absent from a beat
//! of before 2026-12-02, read as unknown), and each worker hears its own
//! job's beats as well: its part of what the job paces the table at keeps
//! the job's workers together where another writer leaves them far less
//! than their shares (`Strategy::job_part`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use rdkafka::{Message, Offset, TopicPartitionList};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use tracing::{debug, info, warn};

use crate::config::KafkaSettings;
use crate::congestion::Depth;
use crate::msk_iam::{AuthContext, MskIamTokens};
use crate::throttle::control::Control;
use crate::throttle::jobs::{self, Beat, Jobs};
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
    #[error("lessons topic {topic}: {code}")]
    Topic {
        topic: String,
        code: RDKafkaErrorCode,
    },
    /// The worker stopped during setup (not an error to report).
    #[error("stopped")]
    Stopped,
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

/// One beat on the wire (JSON): a worker of `group` writes `table`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BeatWire {
    pub group: String,
    pub table: String,
    /// Records wait to be written to the table.
    pub busy: bool,
    /// Units/s written to the table since the last beat.
    pub rate: f64,
    /// Units/s the worker paces the table at, and its fair share of it
    /// (0: unknown; a beat of before these were sent has neither).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub pace: f64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub fair: f64,
    pub from: String,
    /// The table's region, where the worker's config or environment names
    /// it (tables of one name in two regions are two tables).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub region: String,
}

impl BeatWire {
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a beat serializes")
    }

    pub fn beat(&self) -> Beat {
        let finite = |x: f64| if x.is_finite() { x } else { 0.0 };
        Beat {
            busy: self.busy,
            rate: finite(self.rate),
            pace: finite(self.pace),
            fair: finite(self.fair),
        }
    }
}

fn is_zero(x: &f64) -> bool {
    *x == 0.0
}

/// A record of the topic: a lesson, or a beat.
#[derive(Debug, Clone, PartialEq)]
pub enum Heard {
    Lesson(Wire),
    Beat(BeatWire),
}

impl Heard {
    /// Reads a record (a lesson has `lesson`, a beat `busy`).
    pub fn decode(bytes: &[u8]) -> Result<Self, serde_json::Error> {
        match Wire::decode(bytes) {
            Ok(w) => Ok(Heard::Lesson(w)),
            Err(e) => match serde_json::from_slice::<BeatWire>(bytes) {
                Ok(b) => Ok(Heard::Beat(b)),
                Err(_) => Err(e),
            },
        }
    }
}

/// One table whose lessons and beats are shared: its name, its control,
/// and its queue (records waiting for it make its job busy).
#[derive(Debug, Clone)]
pub struct Shared {
    pub name: Arc<str>,
    pub control: Arc<Control>,
    pub queue: Option<Arc<Depth>>,
}

/// A worker's id on the topic: the host and process, and a random part
/// (two runs in one process, or a reused pid, stay apart).
pub fn worker_id(seed: u64) -> String {
    let host = std::env::var("HOSTNAME").unwrap_or_default();
    format!("{host}/{}/{seed:016x}", std::process::id())
}

/// The running channel: one thread that reads peers' lessons and publishes
/// this worker's. Dropped, it ends on its own within [`POLL`], or once a
/// setup call under way returns (each bounded by `kafka.metadata_timeout`);
/// [`Lessons::stop`] waits for that, at most [`STOP_WAIT`].
#[derive(Debug)]
pub struct Lessons {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Lessons {
    fn drop(&mut self) {
        self.stop.store(true, Relaxed);
    }
}

/// How long [`Lessons::stop`] waits for the thread to close its Kafka
/// clients (a process that exits while librdkafka tears down may crash).
pub const STOP_WAIT: Duration = Duration::from_secs(2);

impl Lessons {
    /// Starts sharing the lessons of `tables` (name, control) through
    /// `topic`, on a thread of its own: the topic's creation and the
    /// reader's assignment (blocking Kafka calls) never delay the caller or
    /// its runtime, and their failure is logged once
    /// (`lessons_unavailable`), not returned. Lessons the tables teach
    /// from now on are kept until the producer is ready (a job's start is
    /// when workers meet other writers).
    ///
    /// With `split` (`[throttle] split_with_jobs`), the thread also beats
    /// for each table and splits it with the other jobs heard; each
    /// table's first request waits until the recent beats were read (or
    /// the thread gave up).
    pub fn start(
        kafka: &KafkaSettings,
        topic: &str,
        tokens: Option<Arc<MskIamTokens>>,
        tables: Vec<Shared>,
        me: String,
        split: bool,
        region: String,
    ) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = mpsc::unbounded_channel();
        for t in &tables {
            t.control.share_lessons(t.name.clone(), tx.clone());
            if split {
                t.control.await_jobs();
            }
        }
        drop(tx);
        let (kafka, name, s) = (kafka.clone(), topic.to_string(), stop.clone());
        // However the thread ends (or if it never starts), no first
        // request waits for it.
        let release = Release(tables.iter().map(|t| t.control.clone()).collect());
        let spawned = std::thread::Builder::new()
            .name("lessons".into())
            .spawn(move || {
                let _release = release;
                let channel = Channel {
                    kafka: &kafka,
                    topic: &name,
                    me: &me,
                    stop: &s,
                    split,
                    region: &region,
                };
                match channel.run(tokens, tables, rx) {
                    Ok(()) | Err(LessonsError::Stopped) => {}
                    Err(e) => warn!(event = "lessons_unavailable", error = %e, topic = %name,
                        "lessons are not shared: each worker learns alone"),
                }
            });
        let thread = match spawned {
            Ok(t) => Some(t),
            Err(e) => {
                // Dropped with the closure: the first requests are released.
                warn!(event = "lessons_unavailable", error = %e, topic,
                    "lessons are not shared: no thread for them");
                None
            }
        };
        Lessons { stop, thread }
    }

    /// Stops reading and publishing (lessons not yet sent are dropped),
    /// waiting at most [`STOP_WAIT`] for the thread to close its clients.
    pub async fn stop(mut self) {
        self.stop.store(true, Relaxed);
        if let Some(t) = self.thread.take() {
            let joined = tokio::task::spawn_blocking(move || t.join());
            if tokio::time::timeout(STOP_WAIT, joined).await.is_err() {
                debug!("the lessons thread is still closing; not waited for");
            }
        }
    }
}

/// How long the reader waits for a lesson per poll, and so how late it
/// sends one of this worker's and sees the stop flag.
const POLL: Duration = Duration::from_millis(50);

/// Lessons older than this (by their record's timestamp) are about a table
/// as it was: passed over (a reader that reconnected, or reset).
const STALE: Duration = Duration::from_secs(10);

/// The reader's longest wait for a fetch's records (librdkafka's
/// `fetch.wait.max.ms`). Kafka answers a waiting fetch as soon as a record
/// arrives, so there this only sets how often an idle reader asks (20
/// small requests a second); tansu answers at the end of the wait, and at
/// 500 ms lessons reached peers 100-1,100 ms late, after most had met the
/// table themselves (20-40 ms at 50; `make bench-dynamodb`'s two jobs).
const FETCH_WAIT_MS: &str = "50";

/// Reads of the topic failing for this long in a row are warned about,
/// once per run of failures.
const WARN_AFTER: Duration = Duration::from_secs(15);

/// Releases the tables' first requests when dropped (see
/// [`Control::jobs_heard`]).
struct Release(Vec<Arc<Control>>);

impl Drop for Release {
    fn drop(&mut self) {
        for c in &self.0 {
            c.jobs_heard();
        }
    }
}

/// How many records before the topic's end the reader starts when it
/// splits tables with other jobs: beats of the last [`jobs::STALE`] must
/// be among them (a beat a second per worker and table: a few hundred
/// workers).
const TAIL: i64 = 2_000;

/// One table's beats: what this worker says of it, and what it heard.
struct TableBeats {
    shared: Shared,
    jobs: Jobs,
    /// Whether its last beat said busy, and when it was sent.
    was_busy: bool,
    last_beat: Option<Instant>,
    /// Samples since then (one per [`POLL`] at most), and those that found
    /// records waiting for it.
    polls: u32,
    waiting: u32,
    /// Samples in a row that found records waiting, and when the last was
    /// taken.
    streak: u32,
    sampled: Option<Instant>,
}

/// Samples in a row with records waiting that make a worker whose last
/// beat said idle beat at once: 100 ms of them, not one record passing
/// through.
const TURNED: u32 = 2;

/// The least time between two beats of a table (a worker whose records
/// keep starting to wait while it reads as idle beats no faster).
const BEAT_GAP: Duration = Duration::from_millis(250);

impl TableBeats {
    /// Whether records wait in the table's queue now.
    fn queued(&self) -> bool {
        self.shared.queue.as_ref().is_some_and(|q| q.queued() > 0)
    }

    /// Counts a sample of the queue (`queued`) taken at `now`, at most one
    /// per [`POLL`] (the reader's polls return early when records arrive).
    fn sample(&mut self, now: Instant, queued: bool) {
        if self.sampled.is_some_and(|t| now.duration_since(t) < POLL) {
            return;
        }
        self.sampled = Some(now);
        self.polls += 1;
        self.waiting += u32::from(queued);
        self.streak = if queued { self.streak + 1 } else { 0 };
    }

    /// Whether a beat is due: a [`jobs::BEAT`] passed, or records started
    /// to wait while the last beat said idle (at most every [`BEAT_GAP`]).
    fn due(&self, now: Instant) -> bool {
        let since = self.last_beat.map(|t| now.duration_since(t));
        since.is_none_or(|t| t >= jobs::BEAT)
            || (!self.was_busy && self.streak >= TURNED && since.is_none_or(|t| t >= BEAT_GAP))
    }

    /// The beat to send now (`leaving`: not busy, nothing written): busy
    /// when records waited for the table in half the polls since the last
    /// beat, or now for [`TURNED`] polls (see [`Control::beat`]).
    fn take(&mut self, now: Instant, leaving: bool) -> Beat {
        let waited = self.streak >= TURNED || (self.polls > 0 && 2 * self.waiting >= self.polls);
        let beat = if leaving {
            Beat::default()
        } else {
            self.shared.control.beat(waited)
        };
        self.was_busy = beat.busy;
        self.last_beat = Some(now);
        self.polls = 0;
        self.waiting = 0;
        beat
    }
}

/// Each table's beats.
struct Tables {
    tables: Vec<TableBeats>,
    by_name: HashMap<String, usize>,
    epoch: Instant,
}

impl Tables {
    fn new(shared: Vec<Shared>) -> Self {
        let by_name = shared
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name.to_string(), i))
            .collect();
        Tables {
            tables: shared
                .into_iter()
                .map(|shared| TableBeats {
                    shared,
                    jobs: Jobs::default(),
                    was_busy: false,
                    last_beat: None,
                    polls: 0,
                    waiting: 0,
                    streak: 0,
                    sampled: None,
                })
                .collect(),
            by_name,
            // Early enough that beats read from the history keep their age.
            epoch: Instant::now()
                .checked_sub(2 * jobs::STALE)
                .unwrap_or_else(Instant::now),
        }
    }

    fn now(&self) -> Duration {
        self.epoch.elapsed()
    }

    /// Applies each table's split among the jobs heard, where it moved.
    fn split(&mut self, group: &str) {
        let now = self.now();
        for t in &mut self.tables {
            t.jobs.expire(now);
            let control = &t.shared.control;
            let next = t.jobs.split(group, now, control.capacity());
            if control.jobs().moved(&next) {
                control.set_jobs(next);
                info!(event = "jobs_split", table = %t.shared.name, part = next.part,
                    busy_jobs = next.busy_jobs, jobs = next.jobs,
                    "the table's part for this job among the jobs writing it");
            }
            control.job_part(t.jobs.job_part(group, now, control.own_beat()));
        }
    }
}

struct Channel<'a> {
    kafka: &'a KafkaSettings,
    topic: &'a str,
    me: &'a str,
    stop: &'a AtomicBool,
    split: bool,
    /// The tables' region ("" unknown).
    region: &'a str,
}

impl Channel<'_> {
    fn client_err(&self, client: &'static str, source: KafkaError) -> LessonsError {
        LessonsError::Client {
            topic: self.topic.to_string(),
            client,
            source,
        }
    }

    fn run(
        &self,
        tokens: Option<Arc<MskIamTokens>>,
        tables: Vec<Shared>,
        mut rx: mpsc::UnboundedReceiver<(Arc<str>, PeerLesson)>,
    ) -> Result<(), LessonsError> {
        let ctx = |client| AuthContext {
            tokens: tokens.clone(),
            client,
        };
        let mut ccfg = crate::source::consumer_config(self.kafka);
        // Assigned, never subscribed, under a group of its own (librdkafka
        // assigns only with one; it is never joined, nor the job's group
        // touched), and only what comes after it starts.
        ccfg.set("group.id", format!("{}.lessons", self.kafka.group_id))
            .set("auto.offset.reset", "latest")
            // Its metadata requests must not create the topic with the
            // broker's defaults (the pass-through properties may allow it).
            .set("allow.auto.create.topics", "false")
            .set("fetch.wait.max.ms", FETCH_WAIT_MS);
        let consumer: BaseConsumer<AuthContext> = ccfg
            .create_with_context(ctx("lessons reader"))
            .map_err(|e| self.client_err("reader", e))?;
        let parts = match self.partitions(&consumer, false)? {
            Some(n) => n,
            // The admin client cannot sign MSK IAM tokens (rdkafka serves
            // no OAUTHBEARER refresh on its queue): there the topic must
            // exist.
            None if tokens.is_some() => {
                return Err(LessonsError::Create {
                    topic: self.topic.to_string(),
                    reason: "it does not exist, and with kafka.auth = \"aws-msk-iam\" \
                             the worker cannot create it: create it (one partition)"
                        .into(),
                })
            }
            None => {
                // No topic, so no job's beats to wait for: the first
                // requests go now, not once it is created (the dev broker
                // took 10 s to refuse it).
                for t in &tables {
                    t.control.jobs_heard();
                }
                // The admin client's calls are futures: a runtime of this
                // thread's own runs them (the worker's may be shutting down).
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| LessonsError::Create {
                        topic: self.topic.to_string(),
                        reason: format!("no runtime for the admin client: {e}"),
                    })?;
                runtime.block_on(self.create_topic(ctx("lessons admin")))?;
                self.partitions(&consumer, true)?
                    .ok_or_else(|| LessonsError::Create {
                        topic: self.topic.to_string(),
                        reason: "created, but the broker shows no partition of it".into(),
                    })?
            }
        };
        // Where each partition ended as the reader started: records before
        // it are history (lessons passed over, beats heard if recent).
        let mut ends: Vec<i64> = Vec::with_capacity(parts);
        let mut tpl = TopicPartitionList::new();
        for p in 0..parts as i32 {
            let marks = self
                .split
                .then(|| consumer.fetch_watermarks(self.topic, p, self.kafka.metadata_timeout));
            let from = match marks {
                Some(Ok((low, high))) => {
                    ends.push(high);
                    Offset::Offset(low.max(high - TAIL))
                }
                other => {
                    if let Some(Err(e)) = other {
                        // Without the history, the beats of the next second.
                        debug!(error = %e, "the lessons topic's end not read: read from it");
                    }
                    ends.push(-1);
                    Offset::End
                }
            };
            tpl.add_partition_offset(self.topic, p, from)
                .map_err(|e| self.read_err(e))?;
        }
        consumer.assign(&tpl).map_err(|e| self.read_err(e))?;
        // Partitions whose history is still to be read.
        let mut behind: Vec<bool> = ends.iter().map(|e| *e > 0).collect();
        let assigned = Instant::now();
        let mut pcfg = crate::dlq::producer_config(self.kafka);
        // A lesson is worth something only soon: one acknowledgement, no
        // waiting to fill a batch, dropped after a few seconds.
        pcfg.set("acks", "1")
            .set("enable.idempotence", "false")
            .set("linger.ms", "0")
            .set("message.timeout.ms", "5000");
        let producer: FutureProducer<AuthContext> = pcfg
            .create_with_context(ctx("lessons producer"))
            .map_err(|e| self.client_err("producer", e))?;
        let mut tables = Tables::new(tables);
        info!(
            event = "lessons_shared",
            topic = self.topic,
            partitions = parts,
            "lessons shared with the job's other workers"
        );
        // Read errors in a row: since when, the last one, and whether the
        // run was warned about. A quiet spell of `WARN_AFTER` ends a run.
        let mut failing: Option<(Instant, Instant, bool)> = None;
        let mut released = !self.split;
        while !self.stop.load(Relaxed) {
            while let Ok((table, lesson)) = rx.try_recv() {
                self.publish(&producer, &table, lesson);
            }
            if self.split {
                self.beat(&producer, &mut tables, false);
                tables.split(&self.kafka.group_id);
                // The recent beats read (or a second gone by): the first
                // requests may leave, at the job's part.
                if !released && (behind.iter().all(|b| !b) || assigned.elapsed() >= jobs::BEAT) {
                    released = true;
                    for t in &tables.tables {
                        t.shared.control.jobs_heard();
                    }
                    debug!(jobs_heard = ?assigned.elapsed(), "the jobs writing the tables are known");
                }
            }
            match consumer.poll(POLL) {
                None => {}
                Some(Ok(m)) => {
                    failing = None;
                    let p = m.partition() as usize;
                    let history = ends.get(p).is_some_and(|e| m.offset() < *e);
                    if let Some(b) = behind.get_mut(p) {
                        *b = *b && m.offset() + 1 < ends[p];
                    }
                    self.hear(&m, &mut tables, history);
                }
                Some(Err(e)) => {
                    let now = Instant::now();
                    let run = failing.get_or_insert((now, now, false));
                    run.1 = now;
                    if !run.2 && now.duration_since(run.0) >= WARN_AFTER {
                        run.2 = true;
                        warn!(event = "lessons_unreadable", topic = self.topic, error = %e,
                            "peers' lessons cannot be read");
                    }
                    debug!(error = %e, "lessons read failed");
                }
            }
            if failing.is_some_and(|(_, last, _)| last.elapsed() >= WARN_AFTER) {
                failing = None;
            }
        }
        if self.split {
            // Leaving: this worker no longer makes its job busy.
            self.beat(&producer, &mut tables, true);
            let _ = producer.flush(Duration::from_millis(200));
        }
        Ok(())
    }

    /// Beats for each table that is due (see [`TableBeats::due`]), or for
    /// every table as the worker leaves (`leaving`).
    fn beat(&self, producer: &FutureProducer<AuthContext>, tables: &mut Tables, leaving: bool) {
        let now = Instant::now();
        for t in &mut tables.tables {
            let queued = t.queued();
            t.sample(now, queued);
            if !(leaving || t.due(now)) {
                continue;
            }
            let beat = t.take(now, leaving);
            let wire = BeatWire {
                group: self.kafka.group_id.clone(),
                table: t.shared.name.to_string(),
                busy: beat.busy,
                rate: beat.rate,
                pace: beat.pace,
                fair: beat.fair,
                from: self.me.to_string(),
                region: self.region.to_string(),
            };
            let payload = wire.encode();
            let record = FutureRecord::<str, [u8]>::to(self.topic)
                .key(&self.kafka.group_id)
                .payload(&payload);
            if let Err((e, _)) = producer.send_result(record) {
                debug!(table = %t.shared.name, error = %e, "beat not sent");
            }
        }
    }

    fn read_err(&self, source: KafkaError) -> LessonsError {
        LessonsError::Read {
            topic: self.topic.to_string(),
            source,
        }
    }

    /// The topic's partitions (None: it does not exist), asked in slices
    /// while the reader's queue is served (MSK IAM tokens are refreshed
    /// there, and nothing logs in without them). Just `created`, a broker
    /// that does not know it yet is asked again until the deadline.
    fn partitions(
        &self,
        consumer: &BaseConsumer<AuthContext>,
        created: bool,
    ) -> Result<Option<usize>, LessonsError> {
        let deadline = Instant::now() + self.kafka.metadata_timeout;
        let mut last = None;
        while Instant::now() < deadline {
            if self.stop.load(Relaxed) {
                return Err(LessonsError::Stopped);
            }
            let _ = consumer.poll(Duration::ZERO);
            match consumer.fetch_metadata(Some(self.topic), Duration::from_millis(500)) {
                Ok(md) => match md.topics().first() {
                    Some(t) if t.error().is_none() && !t.partitions().is_empty() => {
                        return Ok(Some(t.partitions().len()))
                    }
                    Some(t) => {
                        use RDKafkaErrorCode as C;
                        match t.error().map(C::from) {
                            Some(C::UnknownTopicOrPartition) if !created => return Ok(None),
                            Some(code @ (C::TopicAuthorizationFailed | C::InvalidTopic)) => {
                                return Err(LessonsError::Topic {
                                    topic: self.topic.to_string(),
                                    code,
                                })
                            }
                            // A topic being created shows an error or no
                            // partition for a moment.
                            _ => {}
                        }
                    }
                    None => {}
                },
                Err(e) => last = Some(e),
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Err(match last {
            Some(e) => self.read_err(e),
            None => LessonsError::Create {
                topic: self.topic.to_string(),
                reason: format!(
                    "no partition of it within {:?}",
                    self.kafka.metadata_timeout
                ),
            },
        })
    }

    /// Creates the topic: one partition, an hour's retention, timestamps
    /// set by the broker (a lesson's age is then not the sender's clock),
    /// and the broker's default replication; one replica only where the
    /// client cannot ask for a default (librdkafka refuses the request
    /// before sending it to a broker before Kafka 2.4).
    async fn create_topic(&self, ctx: AuthContext) -> Result<(), LessonsError> {
        let admin: AdminClient<AuthContext> = crate::dlq::producer_config(self.kafka)
            .create_with_context(ctx)
            .map_err(|e| self.client_err("admin client", e))?;
        let opts = AdminOptions::new()
            .operation_timeout(Some(self.kafka.metadata_timeout))
            .request_timeout(Some(self.kafka.metadata_timeout));
        let refused = |reason: String| LessonsError::Create {
            topic: self.topic.to_string(),
            reason,
        };
        for replication in [-1, 1] {
            let new = NewTopic::new(self.topic, 1, TopicReplication::Fixed(replication))
                .set("retention.ms", "3600000")
                .set("message.timestamp.type", "LogAppendTime");
            let created = match admin.create_topics([&new], &opts).await {
                Err(KafkaError::AdminOp(RDKafkaErrorCode::UnsupportedFeature))
                    if replication == -1 =>
                {
                    debug!("the broker takes no default replication: one replica");
                    continue;
                }
                Err(e) => return Err(refused(e.to_string())),
                Ok(created) => created,
            };
            return match created.into_iter().next() {
                Some(Ok(_)) | Some(Err((_, RDKafkaErrorCode::TopicAlreadyExists))) | None => Ok(()),
                Some(Err((_, code))) => Err(refused(code.to_string())),
            };
        }
        Err(refused("no replication the broker takes".into()))
    }

    fn publish(&self, producer: &FutureProducer<AuthContext>, table: &str, lesson: PeerLesson) {
        let wire = Wire {
            group: self.kafka.group_id.clone(),
            table: table.to_string(),
            lesson: lesson.lesson,
            level: lesson.level,
            from: self.me.to_string(),
        };
        let payload = wire.encode();
        let record = FutureRecord::<str, [u8]>::to(self.topic)
            .key(&self.kafka.group_id)
            .payload(&payload);
        // Handed to the producer, not awaited: delivery is best effort, and
        // the reader must not wait for it.
        match producer.send_result(record) {
            Ok(_) => info!(
                event = "lesson_sent",
                table,
                lesson = lesson.lesson.as_str(),
                level = lesson.level,
                "lesson sent to the job's other workers"
            ),
            Err((e, _)) => debug!(table, lesson = lesson.lesson.as_str(), error = %e,
                "lesson not sent"),
        }
    }

    /// Takes a peer's lesson, if `m` is one for this worker and not
    /// `history` (sent before the reader started), or another job's beat.
    fn hear(&self, m: &rdkafka::message::BorrowedMessage<'_>, tables: &mut Tables, history: bool) {
        let w = match Heard::decode(m.payload().unwrap_or_default()) {
            Ok(Heard::Lesson(w)) => w,
            Ok(Heard::Beat(b)) => {
                // Another job's, on a table of the same name in the same
                // region (a beat without one names no region).
                let region =
                    b.region.is_empty() || self.region.is_empty() || b.region == self.region;
                // Or a peer's of this job (its pace: see `Tables::split`).
                let peer = b.group == self.kafka.group_id && b.from != self.me;
                if self.split && region && (b.group != self.kafka.group_id || peer) {
                    self.hear_beat(m, tables, &b, history);
                }
                return;
            }
            Err(e) => {
                debug!(offset = m.offset(), error = %e, "not a lesson");
                return;
            }
        };
        if history || !w.is_for(&self.kafka.group_id, self.me) {
            return;
        }
        if is_stale(m.timestamp().to_millis(), now_ms()) {
            debug!(table = %w.table, "a stale lesson passed over");
            return;
        }
        if let Some(i) = tables.by_name.get(&w.table) {
            let taken = tables.tables[*i]
                .shared
                .control
                .peer_lesson(w.peer_lesson());
            info!(event = "lesson_heard", table = %w.table, lesson = w.lesson.as_str(),
                level = w.level, from = %w.from, taken, "a peer's lesson");
        }
    }

    /// Another job's beat: heard now, or, read from the `history` (sent
    /// before the reader started), as sent at its record's timestamp (the
    /// broker's), so that it is as old as it is. (A live beat is timed as
    /// it arrives: a clock off the broker's cannot make it stale.)
    fn hear_beat(
        &self,
        m: &rdkafka::message::BorrowedMessage<'_>,
        tables: &mut Tables,
        b: &BeatWire,
        history: bool,
    ) {
        let Some(i) = tables.by_name.get(&b.table).copied() else {
            return;
        };
        let stamped = m
            .timestamp()
            .to_millis()
            .and_then(|t| u64::try_from(t).ok())
            .map(|t| Duration::from_millis(now_ms().saturating_sub(t)));
        // The reader's loop applies the split at its next turn.
        if let Some(age) = beat_age(history, stamped) {
            let at = tables.now().saturating_sub(age);
            tables.tables[i].jobs.hear(&b.group, &b.from, at, b.beat());
        }
    }
}

/// How old a beat is taken to be, from its record's age by its stamp
/// (`stamped`; None: unstamped); None: too old to hear. Read from the
/// `history` (sent before the reader started), it is as old as its stamp
/// says, and unstamped too old; live, it is new (a clock off the
/// broker's cannot make it stale) unless its stamp says it waited out a
/// reader's outage (older than [`STALE`], further off than any clock is
/// from the broker's). Pure.
fn beat_age(history: bool, stamped: Option<Duration>) -> Option<Duration> {
    let age = match (history, stamped) {
        (true, Some(a)) => a,
        (true, None) => return None,
        (false, Some(a)) if a > STALE => return None,
        (false, _) => Duration::ZERO,
    };
    (age <= jobs::STALE).then_some(age)
}

/// Whether a lesson stamped `at` (ms since the epoch; None: unstamped) is
/// older than [`STALE`] at `now`. Pure.
fn is_stale(at: Option<i64>, now: u64) -> bool {
    at.and_then(|t| u64::try_from(t).ok())
        .is_some_and(|t| now.saturating_sub(t) > STALE.as_millis() as u64)
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
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
    fn a_beat_carries_its_pace_and_fair_share_and_one_of_before_reads_as_unknown() {
        let b = BeatWire {
            group: "g".into(),
            table: "orders".into(),
            busy: true,
            rate: 30.0,
            pace: 32.5,
            fair: 65.0,
            from: "h/1/00".into(),
            region: String::new(),
        };
        let back = match Heard::decode(&b.encode()).unwrap() {
            Heard::Beat(w) => w.beat(),
            other => panic!("{other:?}"),
        };
        assert_eq!((back.pace, back.fair), (32.5, 65.0));
        let old = br#"{"group":"g","table":"t","busy":true,"rate":9.0,"from":"h/1/00"}"#;
        let Ok(Heard::Beat(w)) = Heard::decode(old) else {
            panic!("an old beat");
        };
        assert_eq!((w.beat().pace, w.beat().fair), (0.0, 0.0));
    }

    #[test]
    fn a_beat_reads_back_as_a_beat_and_a_lesson_as_a_lesson() {
        let b = BeatWire {
            group: "g".into(),
            table: "orders".into(),
            busy: true,
            rate: 96.5,
            pace: 0.0,
            fair: 0.0,
            from: "h/1/00".into(),
            region: String::new(),
        };
        let bytes = b.encode();
        assert_eq!(
            String::from_utf8_lossy(&bytes),
            r#"{"group":"g","table":"orders","busy":true,"rate":96.5,"from":"h/1/00"}"#
        );
        assert_eq!(Heard::decode(&bytes).unwrap(), Heard::Beat(b.clone()));
        assert_eq!(
            b.beat(),
            Beat {
                busy: true,
                rate: 96.5,
                ..Beat::default()
            }
        );
        let lesson =
            br#"{"group":"g","table":"t","lesson":"settled","level":0.75,"from":"h/1/00"}"#;
        assert!(matches!(Heard::decode(lesson), Ok(Heard::Lesson(_))));
        // A lesson reader of before beats passes them over as "not a lesson".
        assert!(Wire::decode(&bytes).is_err());
        assert!(Heard::decode(b"{\"group\":\"g\"}").is_err());
    }

    #[test]
    fn a_beat_from_the_history_is_as_old_as_its_stamp_and_a_live_one_new() {
        let ms = Duration::from_millis;
        assert_eq!(beat_age(true, Some(ms(2_000))), Some(ms(2_000)));
        assert_eq!(beat_age(true, Some(ms(3_500))), None, "stale");
        assert_eq!(beat_age(true, None), None, "unstamped history");
        // Live: new, whatever a clock a few seconds off says.
        assert_eq!(beat_age(false, Some(ms(6_000))), Some(Duration::ZERO));
        assert_eq!(beat_age(false, None), Some(Duration::ZERO));
        // Played back after an outage of the reader.
        assert_eq!(beat_age(false, Some(ms(10_001))), None);
    }

    fn table_beats() -> TableBeats {
        let control = Arc::new(Control::new(
            crate::throttle::StrategyConfig::default().build(1),
            None,
            std::num::NonZeroU32::new(25).unwrap(),
        ));
        Tables::new(vec![Shared {
            name: "t".into(),
            control,
            queue: None,
        }])
        .tables
        .remove(0)
    }

    #[test]
    fn the_queue_is_sampled_once_per_poll_and_a_table_turned_busy_beats_at_once_but_not_often() {
        let ms = Duration::from_millis;
        let t0 = Instant::now();
        let mut t = table_beats();
        assert!(t.due(t0), "never beaten");
        t.take(t0, false);
        assert!(!t.due(t0 + ms(100)));
        // Records wait: polls 10 ms apart count as one sample, not two.
        t.sample(t0 + ms(10), true);
        t.sample(t0 + ms(20), true);
        assert_eq!((t.polls, t.streak), (1, 1));
        assert!(!t.due(t0 + ms(20)), "one sample of records is one passing");
        // Two samples 50 ms apart: turned busy, but not within 250 ms of the
        // last beat.
        t.sample(t0 + ms(70), true);
        assert_eq!(t.streak, TURNED);
        assert!(!t.due(t0 + ms(70)));
        assert!(t.due(t0 + ms(250)));
        // Nothing written yet, records waited: busy; its next early beat
        // waits for the next idle one.
        assert!(t.take(t0 + ms(250), false).busy);
        t.sample(t0 + ms(300), true);
        assert!(!t.due(t0 + ms(600)));
        assert!(t.due(t0 + ms(1_250)), "a beat a second");
        // Leaving: idle, nothing written.
        let b = t.take(t0 + ms(1_300), true);
        assert!(!b.busy && b.rate == 0.0);
    }

    #[test]
    fn lessons_over_ten_seconds_old_are_stale() {
        assert!(!is_stale(Some(100_000), 105_000));
        assert!(!is_stale(Some(100_000), 110_000));
        assert!(is_stale(Some(100_000), 110_001));
        assert!(!is_stale(None, 110_001), "unstamped");
        assert!(!is_stale(Some(120_000), 110_000), "a clock behind");
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
