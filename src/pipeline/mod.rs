//! The async half of the data path: route -> decode -> batch -> dispatch.
//!
//! Records arrive from the Kafka source through a bounded channel. Each is
//! routed by topic to its table and decoded into an item (undecodable records
//! go to the dead-letter topic, at most [`DEAD_LETTERS_IN_FLIGHT`] at a time,
//! so a poison stream with a slow topic pauses consumption instead of growing
//! memory), then queued for its table's [`lane`]: a task per table that
//! batches and dispatches writes, in key order ([`keys`]), taking each Kafka
//! partition's records in proportion to what it has waiting ([`queues`]).
//! The router never waits for a table: a slow or unreachable table's queue
//! grows until the table is congested ([`crate::congestion`]), and the
//! source pauses only the partitions that feed it.

pub mod keys;
mod lane;
mod queues;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, Semaphore};
use tokio::task::{JoinError, JoinSet};

use crate::congestion::Congestion;
use crate::decode::{decode, Coordinates};
use crate::dlq::DeadLetterError;
use crate::record::Record;
use crate::sink::batch::Entry;
use crate::sink::tables::{distinct_tables, Routes};
use crate::sink::writer::{FatalWrite, Writer};
use lane::{Lane, LaneTx};

/// Undecodable records being dead-lettered at once, at most.
pub const DEAD_LETTERS_IN_FLIGHT: usize = 64;

#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    #[error(transparent)]
    Write(#[from] FatalWrite),
    #[error(transparent)]
    DeadLetters(#[from] DeadLetterError),
    #[error("internal task failed: {0}")]
    Task(String),
}

/// What a pipeline task ends with.
type Done = Result<(), PipelineError>;

pub struct Pipeline {
    routes: Routes,
    writer: Writer,
    /// Each table's queue, by table name.
    lanes: HashMap<Arc<str>, LaneTx>,
    /// The lanes, until `run` starts them.
    idle: Vec<Lane>,
    /// The lanes and the dead-letter sends.
    tasks: JoinSet<Done>,
    dead_letters: Arc<Semaphore>,
}

impl Pipeline {
    /// A pipeline for `routes`, each table counted in `congestion` (built
    /// from the same routes).
    pub fn new(
        routes: Routes,
        writer: Writer,
        linger: Duration,
        max_in_flight_batches: usize,
        seed: u64,
        congestion: &Congestion,
    ) -> Self {
        let mut lanes = HashMap::new();
        let mut idle = Vec::new();
        for (i, table) in distinct_tables(&routes).into_iter().enumerate() {
            let depth = congestion
                .table(&table.name)
                .expect("congestion built from the same routes");
            // Batch ids are per table; seeds differ across tables.
            let lane_seed = seed ^ (i as u64).rotate_left(40);
            let name = table.name.clone();
            let (tx, lane) = Lane::new(
                table,
                depth,
                writer.clone(),
                linger,
                max_in_flight_batches,
                lane_seed,
            );
            lanes.insert(name, tx);
            idle.push(lane);
        }
        Self {
            routes,
            writer,
            lanes,
            idle,
            tasks: JoinSet::new(),
            dead_letters: Arc::new(Semaphore::new(DEAD_LETTERS_IN_FLIGHT)),
        }
    }

    /// Runs until the source closes the channel and every write is done, or
    /// a task fails.
    pub async fn run(mut self, mut rx: mpsc::Receiver<Record>) -> Result<(), PipelineError> {
        for lane in std::mem::take(&mut self.idle) {
            self.tasks.spawn(lane.run());
        }
        loop {
            tokio::select! {
                biased;
                Some(done) = self.tasks.join_next(), if !self.tasks.is_empty() => check(done)?,
                rec = rx.recv() => match rec {
                    Some(rec) => self.accept(rec).await,
                    None => break,
                },
            }
        }
        // The lanes flush their open batches and end once their writes do.
        self.lanes.clear();
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
        let Some(route) = self.routes.get(&*record.at.topic) else {
            // Subscribed topics are exactly the routed ones.
            unreachable!("record from unrouted topic {}", record.at.topic);
        };
        let at = Coordinates {
            topic: &record.at.topic,
            partition: record.at.partition,
            offset: record.at.offset,
        };
        let decoded = match decode(
            record.value.as_deref(),
            &route.table.schema,
            route.key_mode,
            at,
        ) {
            Ok(d) => d,
            Err(e) => return self.dead_letter(record, e.reason(), e.to_string()).await,
        };
        self.lanes
            .get(&route.table.name)
            .expect("a lane per routed table")
            .send(Entry { record, decoded });
    }

    /// Dead-letters an undecodable record in a task, once one of the
    /// [`DEAD_LETTERS_IN_FLIGHT`] slots is free.
    async fn dead_letter(&mut self, record: Record, reason: &'static str, detail: String) {
        let permit = self
            .dead_letters
            .clone()
            .acquire_owned()
            .await
            .expect("never closed");
        let writer = self.writer.clone();
        self.tasks.spawn(async move {
            let _permit = permit;
            writer.dead_letter(&record, reason, &detail).await?;
            Ok(())
        });
    }
}

fn check(done: Result<Done, JoinError>) -> Done {
    match done {
        Ok(r) => r,
        Err(e) if e.is_panic() => Err(PipelineError::Task(format!(
            "a pipeline task panicked: {e}"
        ))),
        Err(e) => Err(PipelineError::Task(e.to_string())),
    }
}

#[cfg(test)]
mod tests;
