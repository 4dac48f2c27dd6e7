//! Wiring only: source -> pipeline (decode, batch) -> sink (write) -> acks ->
//! commit, plus the operator endpoints and the table pollers.
//!
//! The Kafka source runs on its own thread and feeds a bounded channel to the
//! [`Pipeline`]; every outcome is acked to the shared offset tracker, which
//! the source commits from. Shutdown is bounded: the source drains for at
//! most `drain_timeout`, then the pipeline gets one request timeout more to
//! finish the attempts already on the wire; whatever is left after that is
//! stopped (it was not committed, and will be redelivered).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::info;

mod halves;

use halves::{forward_shutdown, Halves};

use crate::acks::Acks;
use crate::config::Settings;
use crate::congestion::Congestion;
use crate::dlq::DeadLetters;
use crate::lessons::Lessons;
use crate::ops;
use crate::ops::live::{Live, TableView};
use crate::ops::prom::Exporter;
use crate::pipeline::{Pipeline, PipelineError};
use crate::sink::dynamodb::Dynamo;
use crate::sink::tables::{self, TableError};
use crate::sink::writer::Writer;
use crate::sink::Sink;
use crate::source::{Assignment, SourceError, SourceExit, SourceOptions};
use crate::telemetry::{Counters, Snapshot};
use crate::throttle::control::ControlReport;

#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    #[error(transparent)]
    Table(#[from] TableError),
    #[error("cannot create the dead-letter producer: {0}")]
    DeadLetters(rdkafka::error::KafkaError),
    #[error(transparent)]
    Source(#[from] SourceError),
    #[error(transparent)]
    Pipeline(#[from] PipelineError),
    #[error(transparent)]
    Listen(#[from] ops::http::ListenError),
    #[error("internal task failed: {0}")]
    Task(String),
    #[error(transparent)]
    MskIam(#[from] crate::msk_iam::MskIamError),
}

/// How a run ended, with its final counters.
#[derive(Debug)]
pub struct Outcome {
    pub exit: SourceExit,
    pub totals: Snapshot,
    pub dead_letters: BTreeMap<&'static str, u64>,
    pub tables: Vec<TableReport>,
}

impl Outcome {
    fn stopped_at_start() -> Self {
        Outcome {
            exit: SourceExit::Stopped,
            totals: Snapshot::default(),
            dead_letters: BTreeMap::new(),
            tables: Vec::new(),
        }
    }
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
    // First: a missing region or credentials for Kafka is named before
    // DynamoDB is asked anything.
    let tokens = match settings.kafka.auth {
        crate::config::KafkaAuth::AwsMskIam => Some(Arc::new(
            crate::msk_iam::MskIamTokens::load(settings.kafka.aws_region.clone()).await?,
        )),
        crate::config::KafkaAuth::None => None,
    };
    let sink: Arc<dyn Sink> =
        Arc::new(Dynamo::connect(&settings.dynamodb, settings.throttle.sdk_retry_mode).await);
    let seed = process_seed();
    let resolving = tables::resolve_routes(sink.as_ref(), &settings, seed, exporter.as_deref());
    let routes = tokio::select! {
        routes = resolving => routes?,
        () = shutdown.cancelled() => {
            info!("shutdown requested while starting: nothing was consumed");
            return Ok(Outcome::stopped_at_start());
        }
    };
    let tables = tables::distinct_tables(&routes);
    // A table with this many records queued pauses the partitions feeding it.
    let congestion = Arc::new(Congestion::new(
        routes
            .iter()
            .map(|(topic, r)| (topic.as_str(), &r.table.name)),
        settings.pipeline.max_buffered_records,
    ));
    let buffered = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let dlq =
        DeadLetters::new(&settings.kafka, tokens.clone()).map_err(WorkerError::DeadLetters)?;
    // What one worker's tables teach it, its peers learn too.
    let lessons = (!settings.throttle.lessons_topic.is_empty()).then(|| {
        Lessons::start(
            &settings.kafka,
            &settings.throttle.lessons_topic,
            tokens.clone(),
            tables
                .iter()
                .map(|t| crate::lessons::Shared {
                    name: t.name.clone(),
                    control: t.control.clone(),
                    queue: congestion.table(&t.name),
                })
                .collect(),
            crate::lessons::worker_id(seed),
            settings.throttle.split_with_jobs,
            settings
                .dynamodb
                .region
                .clone()
                .or_else(|| std::env::var("AWS_REGION").ok())
                .or_else(|| std::env::var("AWS_DEFAULT_REGION").ok())
                .unwrap_or_default(),
        )
    });
    let acks = Arc::new(Acks::new());
    let counters = Arc::new(Counters::default());
    let live = Arc::new(Live::new(
        acks.clone(),
        counters.clone(),
        table_views(&tables, &congestion),
        settings.ops.stuck_after,
        buffered.clone(),
    ));
    let (mut helpers, assignment_tx) = Helpers::start(
        &settings,
        &sink,
        &tables,
        &routes,
        (listener, exporter),
        &live,
        until_caught_up,
    );
    let (tx, rx) = mpsc::channel(settings.pipeline.max_buffered_records);
    let halves = Halves::new(&settings);
    let mut opts = source_options(&settings, until_caught_up, live, buffered, &congestion);
    opts.tokens = tokens;
    let source = halves.spawn_source(opts, tx, &acks, &counters, assignment_tx);
    helpers.forward = Some(forward_shutdown(shutdown, halves.stop.clone()));
    let writer = Writer {
        sink,
        acks,
        dlq,
        counters: counters.clone(),
        attempt_timeout: settings.dynamodb.request_timeout,
    };
    let pipeline = Pipeline::new(
        routes,
        writer,
        settings.pipeline.batch_linger,
        settings.dynamodb.max_in_flight_batches,
        seed,
        &congestion,
    );
    let ended = halves.run(source, pipeline.run(rx)).await;
    helpers.stop().await;
    if let Some(l) = lessons {
        l.stop().await;
    }
    Ok(Outcome {
        exit: ended?,
        totals: counters.snapshot(),
        dead_letters: counters.dead_letters_by_reason(),
        tables: tables.iter().map(|t| TableReport::of(t)).collect(),
    })
}

/// What the operator endpoints show of each table.
fn table_views(tables: &[Arc<tables::Table>], congestion: &Congestion) -> Vec<TableView> {
    tables
        .iter()
        .map(|t| TableView {
            name: t.name.clone(),
            control: t.control.clone(),
            queue: congestion.table(&t.name).expect("a routed table"),
        })
        .collect()
}

/// What the Kafka source needs from the settings and the shared state.
fn source_options(
    settings: &Settings,
    until_caught_up: bool,
    live: Arc<Live>,
    buffered: Arc<std::sync::atomic::AtomicUsize>,
    congestion: &Arc<Congestion>,
) -> SourceOptions {
    SourceOptions {
        kafka: settings.kafka.clone(),
        topics: settings.routes.iter().map(|r| r.topic.clone()).collect(),
        until_caught_up,
        drain_timeout: settings.pipeline.drain_timeout,
        live,
        stats_interval: (settings.ops.listen.is_some() && !settings.ops.lag_interval.is_zero())
            .then_some(settings.ops.lag_interval),
        buffered,
        max_buffered_bytes: settings.pipeline.max_buffered_bytes,
        congestion: congestion.clone(),
        tokens: None,
    }
}

/// The tasks beside the data path, stopped at the end of a run.
struct Helpers {
    pollers: tokio::task::JoinSet<()>,
    ops_stop: CancellationToken,
    progress: Option<tokio::task::JoinHandle<()>>,
    forward: Option<tokio::task::JoinHandle<()>>,
}

impl Helpers {
    /// Starts the capacity pollers, the operator endpoints (if a listener was
    /// bound), the progress report (batch mode), and the tasks that follow the
    /// assignment and log the controls. Returns the assignment's sender.
    fn start(
        settings: &Settings,
        sink: &Arc<dyn Sink>,
        tables: &[Arc<tables::Table>],
        routes: &tables::Routes,
        (listener, exporter): (Option<tokio::net::TcpListener>, Option<Arc<Exporter>>),
        live: &Arc<Live>,
        until_caught_up: bool,
    ) -> (Self, tokio::sync::watch::Sender<Assignment>) {
        let mut helpers = Helpers {
            pollers: tables::poll_capacity(sink, tables, settings.throttle.capacity_poll, live),
            ops_stop: CancellationToken::new(),
            progress: None,
            forward: None,
        };
        if let (Some(listener), Some(exporter)) = (listener, exporter) {
            let serve =
                ops::http::serve(listener, live.clone(), exporter, helpers.ops_stop.clone());
            helpers.pollers.spawn(serve);
        }
        if until_caught_up {
            let report = ops::progress::report(
                live.clone(),
                settings.ops.progress,
                settings.ops.progress_interval,
                helpers.ops_stop.clone(),
            );
            helpers.progress = Some(tokio::spawn(report));
        }
        let (assignment_tx, assignment_rx) = tokio::sync::watch::channel(Assignment::default());
        helpers
            .pollers
            .spawn(tables::follow_assignment(assignment_rx, routes));
        helpers
            .pollers
            .spawn(tables::log_controls(tables.to_vec(), live.counters.clone()));
        (helpers, assignment_tx)
    }
}

impl Helpers {
    async fn stop(mut self) {
        if let Some(f) = self.forward {
            f.abort();
        }
        self.ops_stop.cancel();
        if let Some(p) = self.progress {
            let _ = p.await;
        }
        self.pollers.abort_all();
    }
}

/// The throttle control's final state for one table.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TableReport {
    pub table: String,
    #[serde(flatten)]
    pub control: ControlReport,
}

impl TableReport {
    fn of(t: &tables::Table) -> Self {
        TableReport {
            table: t.name.to_string(),
            control: t.control.report(),
        }
    }
}

fn process_seed() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
        ^ u64::from(std::process::id()).rotate_left(32)
}
