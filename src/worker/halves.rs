//! Bounded shutdown: the two halves of the data path (the Kafka source on its
//! thread, the pipeline on tokio) run to their end together, and from the
//! stop everything ends within the drain, one request timeout and the graces.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::WorkerError;
use crate::acks::Acks;
use crate::config::Settings;
use crate::pipeline::PipelineError;
use crate::source::{self, Assignment, SourceError, SourceExit, SourceOptions};
use crate::telemetry::Counters;

/// Beyond the drain deadline, how long the pipeline may take to finish the
/// attempts on the wire, on top of one request timeout.
const FINISH_GRACE: Duration = Duration::from_secs(1);

/// How long the Kafka consumer may take to close (leave the group) after the
/// drain and the pipeline's finish, before the worker exits without it.
const CLOSE_GRACE: Duration = Duration::from_secs(5);

/// Cancels `stop` when `shutdown` fires.
pub(super) fn forward_shutdown(
    shutdown: CancellationToken,
    stop: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        shutdown.cancelled().await;
        info!("shutdown requested: stop fetching, drain in-flight writes, commit");
        stop.cancel();
    })
}

/// The two halves of the data path, the source thread and the pipeline, run
/// to their end together.
pub(super) struct Halves {
    pub(super) stop: CancellationToken,
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
    pub(super) fn new(settings: &Settings) -> Self {
        let request = settings.dynamodb.request_timeout;
        Halves {
            stop: CancellationToken::new(),
            abort: CancellationToken::new(),
            finish_within: request + FINISH_GRACE,
            stop_within: settings.pipeline.drain_timeout + request + FINISH_GRACE + CLOSE_GRACE,
        }
    }

    /// The Kafka source, on a blocking thread.
    pub(super) fn spawn_source(
        &self,
        opts: SourceOptions,
        tx: mpsc::Sender<crate::record::Record>,
        acks: &Arc<Acks>,
        counters: &Arc<Counters>,
        assignment: tokio::sync::watch::Sender<Assignment>,
    ) -> SourceTask {
        let (acks, counters) = (acks.clone(), counters.clone());
        let (stop, abort) = (self.stop.clone(), self.abort.clone());
        tokio::task::spawn_blocking(move || {
            source::run(opts, tx, acks, counters, stop, abort, assignment)
        })
    }

    pub(super) async fn run(
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
