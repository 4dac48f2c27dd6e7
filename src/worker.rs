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
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::acks::Acks;
use crate::config::Settings;
use crate::congestion::Congestion;
use crate::dlq::DeadLetters;
use crate::ops;
use crate::ops::live::{Live, TableView};
use crate::ops::prom::Exporter;
use crate::pipeline::{Pipeline, PipelineError};
use crate::sink::dynamodb::Dynamo;
use crate::sink::tables::{self, TableError};
use crate::sink::writer::Writer;
use crate::sink::Sink;
use crate::source::{self, Assignment, SourceError, SourceExit, SourceOptions};
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

/// Beyond the drain deadline, how long the pipeline may take to finish the
/// attempts on the wire, on top of one request timeout.
const FINISH_GRACE: Duration = Duration::from_secs(1);

/// How long the Kafka consumer may take to close (leave the group) after the
/// drain and the pipeline's finish, before the worker exits without it.
const CLOSE_GRACE: Duration = Duration::from_secs(5);

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
    let dlq = DeadLetters::new(&settings.kafka).map_err(WorkerError::DeadLetters)?;
    let acks = Arc::new(Acks::new());
    let counters = Arc::new(Counters::default());
    let views = tables
        .iter()
        .map(|t| TableView {
            name: t.name.clone(),
            control: t.control.clone(),
            queue: congestion.table(&t.name).expect("a routed table"),
        })
        .collect();
    let live = Arc::new(Live::new(
        acks.clone(),
        counters.clone(),
        views,
        settings.ops.stuck_after,
        buffered.clone(),
    ));
    let mut helpers = Helpers {
        pollers: tables::poll_capacity(&sink, &tables, settings.throttle.capacity_poll, &live),
        ops_stop: CancellationToken::new(),
        progress: None,
        forward: None,
    };
    if let (Some(listener), Some(exporter)) = (listener, exporter) {
        let serve = ops::http::serve(listener, live.clone(), exporter, helpers.ops_stop.clone());
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
        .spawn(tables::follow_assignment(assignment_rx, &routes));
    helpers
        .pollers
        .spawn(tables::log_controls(tables.clone(), counters.clone()));
    let (tx, rx) = mpsc::channel(settings.pipeline.max_buffered_records);
    let halves = Halves {
        stop: CancellationToken::new(),
        abort: CancellationToken::new(),
        finish_within: settings.dynamodb.request_timeout + FINISH_GRACE,
        stop_within: settings.pipeline.drain_timeout
            + settings.dynamodb.request_timeout
            + FINISH_GRACE
            + CLOSE_GRACE,
    };
    let opts = SourceOptions {
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
    };
    let source = {
        let (acks, counters, stop, abort) = (
            acks.clone(),
            counters.clone(),
            halves.stop.clone(),
            halves.abort.clone(),
        );
        tokio::task::spawn_blocking(move || {
            source::run(opts, tx, acks, counters, stop, abort, assignment_tx)
        })
    };
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
    let exit = ended?;
    Ok(Outcome {
        exit,
        totals: counters.snapshot(),
        dead_letters: counters.dead_letters_by_reason(),
        tables: tables
            .iter()
            .map(|t| TableReport {
                table: t.name.to_string(),
                control: t.control.report(),
            })
            .collect(),
    })
}

/// Cancels `stop` when `shutdown` fires.
fn forward_shutdown(
    shutdown: CancellationToken,
    stop: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        shutdown.cancelled().await;
        info!("shutdown requested: stop fetching, drain in-flight writes, commit");
        stop.cancel();
    })
}

/// The tasks beside the data path, stopped at the end of a run.
struct Helpers {
    pollers: tokio::task::JoinSet<()>,
    ops_stop: CancellationToken,
    progress: Option<tokio::task::JoinHandle<()>>,
    forward: Option<tokio::task::JoinHandle<()>>,
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

/// The two halves of the data path, the source thread and the pipeline, run
/// to their end together.
struct Halves {
    stop: CancellationToken,
    /// The pipeline died: the source commits what was written and leaves.
    abort: CancellationToken,
    /// After the source ended, how long the pipeline may take to finish.
    finish_within: Duration,
    /// From the stop, how long both may take in all (a consumer that cannot
    /// close, say a broker that never answers, does not hold the exit).
    stop_within: Duration,
}

type SourceTask = tokio::task::JoinHandle<Result<SourceExit, SourceError>>;

impl Halves {
    async fn run(
        &self,
        mut source: SourceTask,
        piped: impl std::future::Future<Output = Result<(), PipelineError>>,
    ) -> Result<SourceExit, WorkerError> {
        tokio::pin!(piped);
        // From the stop, everything ends within `stop_within`, even a
        // consumer that cannot close.
        let deadline = async {
            self.stop.cancelled().await;
            tokio::time::sleep(self.stop_within).await;
        };
        tokio::pin!(deadline);
        let joined = |r: Result<_, tokio::task::JoinError>| {
            r.map_err(|e| WorkerError::Task(format!("the Kafka source thread failed: {e}")))
        };
        let out_of_time = || {
            warn!(waited_s = self.stop_within.as_secs_f64(),
                "the Kafka consumer did not close in time after the drain; exiting without it (what was written is committed)");
            Ok(SourceExit::DrainTimedOut)
        };
        tokio::select! {
            () = &mut deadline => out_of_time(),
            piped = &mut piped => {
                if piped.is_err() {
                    self.abort.cancel();
                    self.stop.cancel();
                }
                let sourced = tokio::select! {
                    sourced = &mut source => Some(joined(sourced)?),
                    () = &mut deadline => None,
                };
                piped?;
                match sourced {
                    Some(sourced) => Ok(sourced?),
                    None => out_of_time(),
                }
            }
            sourced = &mut source => {
                // The source has drained and committed; the pipeline finishes
                // the attempts on the wire, within one request timeout.
                let sourced = joined(sourced)?;
                match tokio::time::timeout(self.finish_within, &mut piped).await {
                    Ok(piped) => {
                        piped?;
                        Ok(sourced?)
                    }
                    Err(_) => {
                        warn!(waited_s = self.finish_within.as_secs_f64(),
                            "writes still running after the drain deadline; stopped (not committed, they will be redelivered)");
                        sourced?;
                        Ok(SourceExit::DrainTimedOut)
                    }
                }
            }
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn halves() -> Halves {
        Halves {
            stop: CancellationToken::new(),
            abort: CancellationToken::new(),
            finish_within: Duration::from_secs(11),
            stop_within: Duration::from_secs(47),
        }
    }

    /// A source thread that never returns (a consumer that cannot close).
    fn stuck_source() -> SourceTask {
        tokio::spawn(std::future::pending())
    }

    #[tokio::test(start_paused = true)]
    async fn a_consumer_that_cannot_close_does_not_hold_the_exit() {
        let h = halves();
        h.stop.cancel();
        let started = tokio::time::Instant::now();
        let exit = h.run(stuck_source(), std::future::pending()).await.unwrap();
        assert_eq!(exit, SourceExit::DrainTimedOut);
        assert_eq!(started.elapsed(), Duration::from_secs(47));
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_pipeline_is_reported_even_if_the_source_cannot_close() {
        let h = halves();
        let failed = async { Err(PipelineError::Task("boom".into())) };
        let started = tokio::time::Instant::now();
        let err = h.run(stuck_source(), failed).await.unwrap_err();
        assert!(err.to_string().contains("boom"), "{err}");
        assert!(h.abort.is_cancelled() && h.stop.is_cancelled());
        assert_eq!(started.elapsed(), Duration::from_secs(47));
    }

    #[tokio::test(start_paused = true)]
    async fn writes_still_running_after_the_drain_are_stopped() {
        let h = halves();
        let source: SourceTask = tokio::spawn(async { Ok(SourceExit::Stopped) });
        let started = tokio::time::Instant::now();
        let exit = h.run(source, std::future::pending()).await.unwrap();
        assert_eq!(exit, SourceExit::DrainTimedOut);
        assert_eq!(started.elapsed(), Duration::from_secs(11));
    }

    #[tokio::test(start_paused = true)]
    async fn a_clean_end_is_a_clean_end() {
        let h = halves();
        let source: SourceTask = tokio::spawn(async { Ok(SourceExit::CaughtUp) });
        let exit = h.run(source, async { Ok(()) }).await.unwrap();
        assert_eq!(exit, SourceExit::CaughtUp);
    }
}
