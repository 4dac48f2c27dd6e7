//! The async half of the data path: route -> decode -> batch -> dispatch.
//!
//! Records arrive from the Kafka source through a bounded channel. Each is
//! routed by topic to its table, decoded into an item (undecodable records go
//! to the dead-letter topic, at most [`DEAD_LETTERS_IN_FLIGHT`] at a time, so
//! a poison stream with a slow topic pauses consumption instead of growing
//! memory), and added to the table's open batch. A batch is sent to a write
//! task when it is full or has lingered, at most `max_in_flight_batches` per
//! table, and only once no earlier batch in flight holds one of its keys
//! ([`keys`]), so writes of one key land in record order.

pub mod keys;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, Semaphore};
use tokio::task::{JoinError, JoinSet};
use tokio::time::Instant;
use tracing::debug;

use crate::decode::{decode, Coordinates};
use crate::dlq::DeadLetterError;
use crate::record::Record;
use crate::sink::batch::{Batch, Entry};
use crate::sink::tables::{Routes, Table};
use crate::sink::writer::{FatalWrite, Writer};
use crate::telemetry::Counters;
use keys::KeyLocks;

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

/// One table's side of the pipeline.
struct Lane {
    table: Arc<Table>,
    /// Its open batch, and when the batch was started.
    open: Option<(Batch, Instant)>,
    permits: Arc<Semaphore>,
    keys: Arc<KeyLocks>,
}

pub struct Pipeline {
    routes: Routes,
    writer: Writer,
    linger: Duration,
    lanes: HashMap<Arc<str>, Lane>,
    tasks: JoinSet<Done>,
    dead_letters: Arc<Semaphore>,
    seed: u64,
}

impl Pipeline {
    pub fn new(
        routes: Routes,
        writer: Writer,
        linger: Duration,
        max_in_flight_batches: usize,
        seed: u64,
    ) -> Self {
        let mut lanes = HashMap::new();
        for r in routes.values() {
            lanes.entry(r.table.name.clone()).or_insert_with(|| Lane {
                table: r.table.clone(),
                open: None,
                permits: Arc::new(Semaphore::new(max_in_flight_batches)),
                keys: Arc::default(),
            });
        }
        Self {
            routes,
            writer,
            linger,
            lanes,
            tasks: JoinSet::new(),
            dead_letters: Arc::new(Semaphore::new(DEAD_LETTERS_IN_FLIGHT)),
            seed,
        }
    }

    /// Runs until the source closes the channel and every write is done, or
    /// a task fails.
    pub async fn run(mut self, mut rx: mpsc::Receiver<Record>) -> Result<(), PipelineError> {
        loop {
            let deadline = self
                .lanes
                .values()
                .filter_map(|l| l.open.as_ref().map(|(_, t)| *t + self.linger))
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
        let tables: Vec<Arc<str>> = self.lanes.keys().cloned().collect();
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
            record.value.as_deref(),
            &route.table.schema,
            route.key_mode,
            at,
        ) {
            Ok(d) => d,
            Err(e) => return self.dead_letter(record, e.reason(), e.to_string()).await,
        };
        let name = route.table.name.clone();
        let lane = self.lanes.get_mut(&name).expect("a lane per routed table");
        if lane
            .open
            .as_ref()
            .is_some_and(|(b, _)| b.cannot_take(&decoded))
        {
            self.flush(&name).await;
        }
        let lane = self.lanes.get_mut(&name).expect("a lane per routed table");
        let (batch, _) = lane
            .open
            .get_or_insert_with(|| (Batch::new(name.clone()), Instant::now()));
        batch.push(Entry { record, decoded });
        if batch.is_full() {
            self.flush(&name).await;
        }
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

    async fn flush_expired(&mut self) {
        let now = Instant::now();
        let due: Vec<Arc<str>> = self
            .lanes
            .iter()
            .filter(|(_, l)| {
                l.open
                    .as_ref()
                    .is_some_and(|(_, t)| *t + self.linger <= now)
            })
            .map(|(k, _)| k.clone())
            .collect();
        for t in due {
            self.flush(&t).await;
        }
    }

    /// Sends a table's open batch to a write task once a slot is free and no
    /// earlier batch with one of its keys is still in flight.
    async fn flush(&mut self, table: &Arc<str>) {
        let Some(lane) = self.lanes.get_mut(table) else {
            return;
        };
        let Some((batch, _)) = lane.open.take() else {
            return;
        };
        let (t, locks, permits) = (lane.table.clone(), lane.keys.clone(), lane.permits.clone());
        let slots = batch.into_slots();
        let keys: Vec<String> = slots.iter().map(|s| s.key.clone()).collect();
        locks.wait_for(&keys).await;
        let permit = permits.acquire_owned().await.expect("never closed");
        self.seed = self.seed.wrapping_add(1);
        let (writer, seed) = (self.writer.clone(), self.seed);
        Counters::add(&writer.counters.batches, 1);
        debug!(table = %t.name, items = keys.len(), "batch sent");
        let claim = locks.claim(seed, keys);
        self.tasks.spawn(async move {
            let _held = (permit, claim);
            writer
                .write(&t.name, &t.schema, slots, &t.control, seed)
                .await?;
            Ok(())
        });
    }
}

fn check(done: Result<Done, JoinError>) -> Done {
    match done {
        Ok(r) => r,
        Err(e) if e.is_panic() => Err(PipelineError::Task(format!("a write task panicked: {e}"))),
        Err(e) => Err(PipelineError::Task(e.to_string())),
    }
}
