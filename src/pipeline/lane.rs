//! One table's side of the pipeline, as a task of its own: it takes decoded
//! records from its queue into the open batch, and sends a batch to a write
//! task when it is full or has lingered, at most `max_in_flight_batches` at
//! once, and only once no earlier batch in flight holds one of its keys
//! ([`super::keys`]). Waiting for a write slot holds up this table only: its
//! queue grows, the table is marked congested ([`crate::congestion`]) and the
//! source pauses the partitions that feed it.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, Semaphore};
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::keys::KeyLocks;
use super::{check, Done};
use crate::congestion::Depth;
use crate::sink::batch::{Batch, Entry};
use crate::sink::tables::Table;
use crate::sink::writer::Writer;
use crate::telemetry::events;

/// The router's end of a lane.
#[derive(Debug)]
pub(super) struct LaneTx {
    tx: mpsc::UnboundedSender<Entry>,
    depth: Arc<Depth>,
}

impl LaneTx {
    /// Queues a record for the table; never waits (the source is told to
    /// pause the table's partitions when the queue is long).
    pub(super) fn send(&self, entry: Entry) {
        self.depth.push();
        if self.tx.send(entry).is_err() {
            // The lane ended (it failed; the pipeline is ending with its
            // error): the record is dropped unacked, so it is redelivered.
            self.depth.pop();
        }
    }
}

pub(super) struct Lane {
    table: Arc<Table>,
    rx: mpsc::UnboundedReceiver<Entry>,
    depth: Arc<Depth>,
    writer: Writer,
    linger: Duration,
    permits: Arc<Semaphore>,
    keys: Arc<KeyLocks>,
    writes: JoinSet<Done>,
    /// The open batch, and when it was started.
    open: Option<(Batch, Instant)>,
    /// Batch ids (and jitter seeds), unique across lanes.
    seed: u64,
}

impl Lane {
    pub(super) fn new(
        table: Arc<Table>,
        depth: Arc<Depth>,
        writer: Writer,
        linger: Duration,
        max_in_flight_batches: usize,
        seed: u64,
    ) -> (LaneTx, Lane) {
        let (tx, rx) = mpsc::unbounded_channel();
        let lane = Lane {
            table,
            rx,
            depth: depth.clone(),
            writer,
            linger,
            permits: Arc::new(Semaphore::new(max_in_flight_batches)),
            keys: Arc::default(),
            writes: JoinSet::new(),
            open: None,
            seed,
        };
        (LaneTx { tx, depth }, lane)
    }

    /// Runs until the router drops its end and every write is done, or a
    /// write fails.
    pub(super) async fn run(mut self) -> Done {
        loop {
            let deadline = self.open.as_ref().map(|(_, t)| *t + self.linger);
            tokio::select! {
                biased;
                Some(done) = self.writes.join_next(), if !self.writes.is_empty() => check(done)?,
                entry = self.rx.recv() => match entry {
                    Some(entry) => {
                        self.depth.pop();
                        self.add(entry).await;
                    }
                    None => break,
                },
                _ = tokio::time::sleep_until(deadline.unwrap_or_else(Instant::now)), if deadline.is_some() => {
                    self.flush().await;
                }
            }
        }
        self.flush().await;
        while let Some(done) = self.writes.join_next().await {
            check(done)?;
        }
        Ok(())
    }

    async fn add(&mut self, entry: Entry) {
        if self
            .open
            .as_ref()
            .is_some_and(|(b, _)| b.cannot_take(&entry.decoded))
        {
            self.flush().await;
        }
        let (batch, _) = self
            .open
            .get_or_insert_with(|| (Batch::default(), Instant::now()));
        batch.push(entry);
        if batch.is_full() {
            self.flush().await;
        }
    }

    /// Sends the open batch to a write task once a slot is free and no
    /// earlier batch with one of its keys is still in flight.
    async fn flush(&mut self) {
        let Some((batch, _)) = self.open.take() else {
            return;
        };
        let slots = batch.into_slots();
        let keys: Vec<String> = slots.iter().map(|s| s.key.clone()).collect();
        self.keys.wait_for(&keys).await;
        let permit = self
            .permits
            .clone()
            .acquire_owned()
            .await
            .expect("never closed");
        self.seed = self.seed.wrapping_add(1);
        let (writer, seed, t) = (self.writer.clone(), self.seed, self.table.clone());
        events::batch_formed(&writer.counters, &t.name, keys.len());
        let claim = self.keys.claim(seed, keys);
        self.writes.spawn(async move {
            let _held = (permit, claim);
            writer
                .write(&t.name, &t.schema, slots, &t.control, seed)
                .await?;
            Ok(())
        });
    }
}
