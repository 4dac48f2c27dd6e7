//! Wiring only: source -> decode -> batch -> write -> ack -> commit.
//!
//! The Kafka source runs on its own thread and feeds a bounded channel; the
//! pipeline task decodes each record, routes it to its table's batch, and
//! spawns a write task per full (or lingering) batch, at most
//! `max_in_flight_batches` per table. Undecodable records go to the
//! dead-letter topic. Every outcome is acked to the shared offset tracker,
//! which the source commits from.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::{mpsc, Semaphore};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info};

use crate::acks::Acks;
use crate::config::{check_kafka_key_schema, Route, Settings};
use crate::decode::{decode, Coordinates, KeyMode, KeySchema};
use crate::dlq::DeadLetters;
use crate::ops;
use crate::ops::live::{Live, TableView};
use crate::ops::prom::Exporter;
use crate::sink::batch::{Batch, Entry};
use crate::sink::control::{Control, ControlReport};
use crate::sink::dynamodb::Dynamo;
use crate::sink::writer::{FatalWrite, Writer};
use crate::sink::WriteError;
use crate::source::{self, Assignment, Record, SourceError, SourceExit, SourceOptions};
use crate::telemetry::{Counters, Snapshot};
use rdkafka::message::Message;

/// How the worker ended without an error.
pub type RunExit = SourceExit;

#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    #[error("table {table} (route of topic {topic}): {source}")]
    Table {
        table: String,
        topic: String,
        source: WriteError,
    },
    #[error("table {table}: configured key {configured} differs from the table's key {actual}")]
    KeyMismatch {
        table: String,
        configured: String,
        actual: String,
    },
    #[error("table {table}: key_mode = \"kafka\" {rule}")]
    KafkaKeyMode { table: String, rule: String },
    #[error("cannot create the dead-letter producer: {0}")]
    DeadLetters(rdkafka::error::KafkaError),
    #[error(transparent)]
    Source(#[from] SourceError),
    #[error(transparent)]
    Write(#[from] FatalWrite),
    #[error(transparent)]
    Listen(#[from] ops::http::ListenError),
    #[error("internal task failed: {0}")]
    Task(String),
}

/// A table as the pipeline writes it.
#[derive(Debug)]
struct Table {
    name: Arc<str>,
    schema: KeySchema,
    permits: Arc<Semaphore>,
    /// Throttle strategy, pacer and capacity, shared by the table's writers.
    control: Arc<Control>,
    /// Keys of the batches in flight, with the batch's id and completion
    /// token: a batch holding a key waits for the earlier batch with that key,
    /// so writes of one key land in record order (the later record wins).
    in_flight: std::sync::Mutex<HashMap<String, (u64, CancellationToken)>>,
}

impl Table {
    /// Completion tokens of in-flight batches sharing a key with `keys`.
    fn conflicts<'a>(&self, keys: impl Iterator<Item = &'a String>) -> Vec<CancellationToken> {
        let map = self.in_flight.lock().unwrap();
        let mut out: HashMap<u64, CancellationToken> = HashMap::new();
        for k in keys {
            if let Some((id, done)) = map.get(k) {
                if !done.is_cancelled() {
                    out.entry(*id).or_insert_with(|| done.clone());
                }
            }
        }
        out.into_values().collect()
    }

    fn claim(&self, id: u64, keys: &[String], done: &CancellationToken) {
        let mut map = self.in_flight.lock().unwrap();
        for k in keys {
            map.insert(k.clone(), (id, done.clone()));
        }
    }

    fn release(&self, id: u64, keys: &[String], done: &CancellationToken) {
        let mut map = self.in_flight.lock().unwrap();
        for k in keys {
            if map.get(k).is_some_and(|(owner, _)| *owner == id) {
                map.remove(k);
            }
        }
        done.cancel();
    }
}

/// A topic's route, resolved.
#[derive(Debug, Clone)]
struct Resolved {
    table: Arc<Table>,
    key_mode: KeyMode,
}

/// How a run ended, with its final counters.
#[derive(Debug)]
pub struct Outcome {
    pub exit: RunExit,
    pub totals: Snapshot,
    pub dead_letters: BTreeMap<&'static str, u64>,
    pub tables: Vec<TableReport>,
}

/// Runs the worker until `shutdown` fires, it is caught up (if asked), or a
/// fatal error. Returns how it ended and the final counters.
pub async fn run(
    settings: Settings,
    until_caught_up: bool,
    shutdown: CancellationToken,
) -> Result<Outcome, WorkerError> {
    let listener = match settings.ops.listen {
        Some(addr) => Some(ops::http::bind(addr).await?),
        None => None,
    };
    let exporter = listener.as_ref().map(|_| Arc::new(Exporter::new()));
    let dynamo = Dynamo::connect(&settings.dynamodb, settings.throttle.sdk_retry_mode).await;
    let seed = process_seed();
    let routes = resolve_routes(&dynamo, &settings, seed, exporter.as_deref()).await?;
    let tables = distinct_tables(&routes);
    let dlq = DeadLetters::new(&settings.kafka).map_err(WorkerError::DeadLetters)?;
    let acks = Arc::new(Acks::new());
    let counters = Arc::new(Counters::default());
    let live = Arc::new(Live::new(
        acks.clone(),
        counters.clone(),
        tables
            .iter()
            .map(|t| TableView {
                name: t.name.clone(),
                control: t.control.clone(),
            })
            .collect(),
        settings.ops.stuck_after,
    ));
    let mut pollers = poll_capacity(&dynamo, &tables, settings.throttle.capacity_poll, &live);
    let (tx, rx) = mpsc::channel(settings.pipeline.max_buffered_records);

    let stop = CancellationToken::new();
    let abort = CancellationToken::new();
    let ops_stop = CancellationToken::new();
    let opts = SourceOptions {
        kafka: settings.kafka.clone(),
        topics: settings.routes.iter().map(|r| r.topic.clone()).collect(),
        until_caught_up,
        drain_timeout: settings.pipeline.drain_timeout,
        live: live.clone(),
        stats_interval: (listener.is_some() && !settings.ops.lag_interval.is_zero())
            .then_some(settings.ops.lag_interval),
    };
    if let (Some(listener), Some(exporter)) = (listener, exporter) {
        pollers.spawn(ops::http::serve(
            listener,
            live.clone(),
            exporter,
            ops_stop.clone(),
        ));
    }
    let progress = until_caught_up.then(|| {
        tokio::spawn(ops::progress::report(
            live.clone(),
            settings.ops.progress,
            settings.ops.progress_interval,
            ops_stop.clone(),
        ))
    });
    let (assignment_tx, assignment_rx) = tokio::sync::watch::channel(Assignment::default());
    pollers.spawn(follow_assignment(assignment_rx, &routes));
    pollers.spawn(log_controls(tables.clone(), counters.clone()));
    let source = {
        let (acks, counters, stop, abort) =
            (acks.clone(), counters.clone(), stop.clone(), abort.clone());
        tokio::task::spawn_blocking(move || {
            source::run(opts, tx, acks, counters, stop, abort, assignment_tx)
        })
    };
    let forward = {
        let stop = stop.clone();
        tokio::spawn(async move {
            shutdown.cancelled().await;
            info!("shutdown requested: stop fetching, drain in-flight writes, commit");
            stop.cancel();
        })
    };

    let writer = Writer {
        dynamo,
        acks,
        dlq,
        counters: counters.clone(),
    };
    let pipeline = Pipeline::new(routes, writer, settings.pipeline.batch_linger, seed);
    let piped = pipeline.run(rx).await;
    if piped.is_err() {
        abort.cancel();
        stop.cancel();
    }
    let sourced = source.await.map_err(|e| WorkerError::Task(e.to_string()))?;
    forward.abort();
    ops_stop.cancel();
    if let Some(p) = progress {
        let _ = p.await;
    }
    pollers.abort_all();
    piped?;
    let exit = sourced?;
    let reports = tables
        .iter()
        .map(|t| TableReport {
            table: t.name.to_string(),
            control: t.control.report(),
        })
        .collect();
    Ok(Outcome {
        exit,
        totals: counters.snapshot(),
        dead_letters: counters.dead_letters_by_reason(),
        tables: reports,
    })
}

/// The throttle control's final state for one table.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TableReport {
    pub table: String,
    #[serde(flatten)]
    pub control: ControlReport,
}

fn process_seed() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
        ^ u64::from(std::process::id()).rotate_left(32)
}

fn distinct_tables(routes: &HashMap<String, Resolved>) -> Vec<Arc<Table>> {
    let mut out: Vec<Arc<Table>> = Vec::new();
    for r in routes.values() {
        if !out.iter().any(|t| Arc::ptr_eq(t, &r.table)) {
            out.push(r.table.clone());
        }
    }
    out
}

/// Every 10 s, one line per table with the throttle control's state.
async fn log_controls(tables: Vec<Arc<Table>>, counters: Arc<Counters>) {
    loop {
        tokio::time::sleep(Duration::from_secs(10)).await;
        let totals = counters.snapshot();
        for t in &tables {
            let r = t.control.report();
            info!(
                table = %t.name,
                strategy = r.strategy,
                pacing_rate = r.pacing_rate.unwrap_or(0.0),
                current_delay_s = r.current_delay_s,
                capacity = r.capacity.unwrap_or(0.0),
                share = r.share.unwrap_or(1.0),
                slept_s = r.slept_s,
                throttled_requests = totals.throttled_requests,
                unprocessed_items = totals.unprocessed_items,
                "throttle control"
            );
        }
    }
}

/// Keeps each table's share current: the worker's share of the work on the
/// topics routed to the table, by backlog and partitions (see
/// [`Assignment::share`]; the adaptive strategy paces to it).
fn follow_assignment(
    mut rx: tokio::sync::watch::Receiver<Assignment>,
    routes: &HashMap<String, Resolved>,
) -> impl std::future::Future<Output = ()> + Send + 'static {
    let tables: Vec<(Arc<Table>, Vec<String>)> = distinct_tables(routes)
        .into_iter()
        .map(|t| {
            let topics = routes
                .iter()
                .filter(|(_, r)| Arc::ptr_eq(&r.table, &t))
                .map(|(topic, _)| topic.clone())
                .collect();
            (t, topics)
        })
        .collect();
    async move {
        while rx.changed().await.is_ok() {
            let a = rx.borrow_and_update().clone();
            for (t, topics) in &tables {
                if let Some(share) = a.share(topics) {
                    t.control.set_share(Some(share));
                }
            }
        }
    }
}

/// How often DynamoDB's reachability is checked when capacity is not polled.
const REACH_POLL: Duration = Duration::from_secs(5);

/// While writes are throttled, the capacity is re-read at most this often.
const THROTTLE_POLL: Duration = Duration::from_secs(1);

/// Re-reads each table's provisioned capacity every `every` (auto scaling
/// changes it), and early after a throttle (at most once a second), so a cut
/// is known within about a second; strategies that follow capacity see the
/// change. Each answer
/// (or failure) also tells `/readyz` whether DynamoDB is reachable; with
/// `every` zero, the tables are described every 5 s for that alone.
fn poll_capacity(
    dynamo: &Dynamo,
    tables: &[Arc<Table>],
    every: Duration,
    live: &Arc<Live>,
) -> JoinSet<()> {
    let mut set = JoinSet::new();
    let (period, follow) = if every.is_zero() {
        (REACH_POLL, false)
    } else {
        (every, true)
    };
    for t in tables {
        let (dynamo, t, live) = (dynamo.clone(), t.clone(), live.clone());
        set.spawn(async move {
            let mut last = Instant::now();
            loop {
                tokio::select! {
                    _ = tokio::time::sleep_until(last + period) => {}
                    // A throttle may mean the capacity was cut: look now (at
                    // most once per THROTTLE_POLL), not at the next period.
                    _ = t.control.throttled(), if follow => {
                        tokio::time::sleep_until(last + THROTTLE_POLL).await;
                    }
                }
                last = Instant::now();
                match dynamo.describe(&t.name).await {
                    Ok((_, capacity)) => {
                        live.dynamo_ok();
                        if follow {
                            t.control.set_capacity(capacity);
                        }
                    }
                    Err(e) => {
                        debug!(table = %t.name, error = %e, "DescribeTable failed");
                        live.dynamo_err(format!("table {}: {e}", t.name));
                    }
                }
            }
        });
    }
    set
}

/// Finds each route's table and key schema (DescribeTable), checking the
/// configured key, if any, against the table's.
async fn resolve_routes(
    dynamo: &Dynamo,
    settings: &Settings,
    seed: u64,
    exporter: Option<&Exporter>,
) -> Result<HashMap<String, Resolved>, WorkerError> {
    let mut tables: HashMap<String, Arc<Table>> = HashMap::new();
    let mut routes = HashMap::new();
    for Route {
        topic,
        table,
        key_mode,
        key,
    } in &settings.routes
    {
        let resolved = match tables.get(table) {
            Some(t) => t.clone(),
            None => {
                let (actual, capacity) =
                    dynamo
                        .describe(table)
                        .await
                        .map_err(|source| WorkerError::Table {
                            table: table.clone(),
                            topic: topic.clone(),
                            source,
                        })?;
                if let Some(configured) = key {
                    if configured != &actual {
                        return Err(WorkerError::KeyMismatch {
                            table: table.clone(),
                            configured: configured.to_string(),
                            actual: actual.to_string(),
                        });
                    }
                }
                let th = &settings.throttle;
                let strategy = th.strategy.build(seed ^ tables.len() as u64);
                let control = Control::new(strategy, th.pacing_rate, th.pacing_burst)
                    .with_latency(exporter.map(|e| e.latency(table)));
                control.set_capacity(capacity);
                let t = Arc::new(Table {
                    name: table.as_str().into(),
                    schema: actual,
                    permits: Arc::new(Semaphore::new(settings.dynamodb.max_in_flight_batches)),
                    control: Arc::new(control),
                    in_flight: Default::default(),
                });
                tables.insert(table.clone(), t.clone());
                t
            }
        };
        if *key_mode == KeyMode::Kafka {
            check_kafka_key_schema(&resolved.schema).map_err(|rule| WorkerError::KafkaKeyMode {
                table: table.clone(),
                rule,
            })?;
        }
        info!(topic, table, key = %resolved.schema, "route ready");
        routes.insert(
            topic.clone(),
            Resolved {
                table: resolved,
                key_mode: *key_mode,
            },
        );
    }
    Ok(routes)
}

/// The async half: decode, batch, spawn writes.
struct Pipeline {
    routes: HashMap<String, Resolved>,
    writer: Writer,
    linger: Duration,
    batches: HashMap<Arc<str>, (Batch, Instant, Arc<Table>)>,
    tasks: JoinSet<Result<(), FatalWrite>>,
    seed: u64,
}

impl Pipeline {
    fn new(routes: HashMap<String, Resolved>, writer: Writer, linger: Duration, seed: u64) -> Self {
        Self {
            routes,
            writer,
            linger,
            batches: HashMap::new(),
            tasks: JoinSet::new(),
            seed,
        }
    }

    async fn run(mut self, mut rx: mpsc::Receiver<Record>) -> Result<(), WorkerError> {
        loop {
            let deadline = self
                .batches
                .values()
                .map(|(_, t, _)| *t + self.linger)
                .min();
            tokio::select! {
                biased;
                Some(done) = self.tasks.join_next(), if !self.tasks.is_empty() => check(done)?,
                rec = rx.recv() => match rec {
                    Some(rec) => self.accept(rec).await,
                    None => break,
                },
                _ = tokio::time::sleep_until(deadline.unwrap_or_else(Instant::now)), if deadline.is_some() => {
                    self.flush_expired().await;
                }
            }
        }
        let tables: Vec<Arc<str>> = self.batches.keys().cloned().collect();
        for t in tables {
            self.flush(&t).await;
        }
        while let Some(done) = self.tasks.join_next().await {
            check(done)?;
        }
        Ok(())
    }

    async fn accept(&mut self, record: Record) {
        if !self.writer.acks.is_live(&record.at) {
            // Its partition is being revoked or the worker is stopping.
            self.writer.acks.abandon(&record.at);
            return;
        }
        let Some(route) = self.routes.get(&*record.at.topic).cloned() else {
            // Subscribed topics are exactly the routed ones.
            unreachable!("record from unrouted topic {}", record.at.topic);
        };
        let at = Coordinates {
            topic: &record.at.topic,
            partition: record.at.partition,
            offset: record.at.offset,
        };
        let decoded = match decode(
            record.msg.payload(),
            &route.table.schema,
            route.key_mode,
            at,
        ) {
            Ok(d) => d,
            Err(e) => {
                let writer = self.writer.clone();
                self.tasks.spawn(async move {
                    writer
                        .dead_letter_record(&record, e.reason(), &e.to_string())
                        .await;
                    Ok(())
                });
                return;
            }
        };
        let name = route.table.name.clone();
        if self
            .batches
            .get(&name)
            .is_some_and(|(b, _, _)| b.cannot_take(&decoded))
        {
            self.flush(&name).await;
        }
        let (batch, _, _) = self.batches.entry(name.clone()).or_insert_with(|| {
            (
                Batch::new(name.clone()),
                Instant::now(),
                route.table.clone(),
            )
        });
        batch.push(Entry { record, decoded });
        if batch.is_full() {
            self.flush(&name).await;
        }
    }

    async fn flush_expired(&mut self) {
        let now = Instant::now();
        let due: Vec<Arc<str>> = self
            .batches
            .iter()
            .filter(|(_, (_, t, _))| *t + self.linger <= now)
            .map(|(k, _)| k.clone())
            .collect();
        for t in due {
            self.flush(&t).await;
        }
    }

    /// Sends a table's batch to a write task once a slot is free and no
    /// earlier batch with one of its keys is still in flight.
    async fn flush(&mut self, table: &Arc<str>) {
        let Some((batch, _, t)) = self.batches.remove(table) else {
            return;
        };
        let slots = batch.into_slots();
        let keys: Vec<String> = slots.iter().map(|s| s.key.clone()).collect();
        for earlier in t.conflicts(keys.iter()) {
            earlier.cancelled().await;
        }
        let permit = t
            .permits
            .clone()
            .acquire_owned()
            .await
            .expect("never closed");
        self.seed = self.seed.wrapping_add(1);
        let (writer, seed) = (self.writer.clone(), self.seed);
        let done = CancellationToken::new();
        t.claim(seed, &keys, &done);
        Counters::add(&writer.counters.batches, 1);
        debug!(table = %t.name, items = keys.len(), "batch sent");
        self.tasks.spawn(async move {
            let _permit = permit;
            let result = writer
                .write(&t.name, &t.schema, slots, &t.control, seed)
                .await;
            t.release(seed, &keys, &done);
            result
        });
    }
}

fn check(done: Result<Result<(), FatalWrite>, tokio::task::JoinError>) -> Result<(), WorkerError> {
    match done {
        Ok(r) => r.map_err(WorkerError::from),
        Err(e) => Err(WorkerError::Task(e.to_string())),
    }
}
