//! One table's side of the pipeline, as a task of its own: it queues decoded
//! records per Kafka partition, and once a full batch's worth waits (or the
//! first has lingered) and one of `max_in_flight_batches` write slots is
//! free, it fills a batch with them, taken per partition in proportion to
//! what each has waiting ([`super::queues`]). A batch whose records
//! coalesced (a later record of a key replaces the earlier) waits for more
//! until it is full or has lingered. It goes to a write task once no earlier
//! batch in flight holds one of its keys ([`super::keys`]). Waiting for a
//! write slot holds up this table only: its queue grows, the table is marked
//! congested ([`crate::congestion`]) and the source pauses the partitions
//! that feed it.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, Semaphore};
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::keys::KeyLocks;
use super::queues::Queues;
use super::{check, Done};
use crate::congestion::Depth;
use crate::sink::batch::{Batch, Entry, MAX_ITEMS};
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
    /// Records taken off the channel, not yet in a batch, per partition.
    queued: Queues<Entry>,
    /// A batch being made that is not full yet: its records coalesced (a
    /// later record of a key replaces the earlier), so it waits for more
    /// until it is full or has lingered.
    open: Batch,
    /// When the records waiting (queued or in `open`) began to wait.
    since: Option<Instant>,
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
            queued: Queues::default(),
            open: Batch::default(),
            since: None,
            seed,
        };
        (LaneTx { tx, depth }, lane)
    }

    /// Runs until the router drops its end and every write is done, or a
    /// write fails.
    pub(super) async fn run(mut self) -> Done {
        let mut open = true;
        loop {
            let waiting = self.queued.len() + self.open.len();
            if !open && waiting > 0 {
                self.flush(true).await;
                continue;
            }
            if !open {
                break;
            }
            if !self.queued.is_empty() && waiting >= MAX_ITEMS {
                self.flush(false).await;
                continue;
            }
            let deadline = self.since.map(|t| t + self.linger);
            tokio::select! {
                biased;
                Some(done) = self.writes.join_next(), if !self.writes.is_empty() => check(done)?,
                entry = self.rx.recv() => match entry {
                    Some(entry) => self.queue(entry),
                    None => open = false,
                },
                _ = tokio::time::sleep_until(deadline.unwrap_or_else(Instant::now)), if deadline.is_some() => {
                    self.flush(true).await;
                }
            }
        }
        while let Some(done) = self.writes.join_next().await {
            check(done)?;
        }
        Ok(())
    }

    fn queue(&mut self, entry: Entry) {
        let topic = entry.record.at.topic.clone();
        self.queued.push(&topic, entry.record.at.partition, entry);
        self.since.get_or_insert_with(Instant::now);
    }

    /// Queues what the router has sent meanwhile (its end dropped is seen
    /// by the next `recv`).
    fn take_arrived(&mut self) {
        while let Ok(entry) = self.rx.try_recv() {
            self.queue(entry);
        }
    }

    /// Once a write slot is free, fills the batch being made with the
    /// records waiting (taken per partition in proportion to what each has
    /// waiting, see [`Queues`]) and, once it is full (or `now`: lingered, or
    /// the lane ends), sends it to a write task when no earlier batch with
    /// one of its keys is still in flight.
    async fn flush(&mut self, now: bool) {
        let permit = self
            .permits
            .clone()
            .acquire_owned()
            .await
            .expect("never closed");
        // What arrived meanwhile has its say in the batch.
        self.take_arrived();
        let mut full = self.open.is_full();
        while let Some(next) = self.queued.peek() {
            // A first record always goes (one too large for any batch is
            // refused by DynamoDB, and dead-lettered, not queued for ever).
            if !self.open.is_empty() && self.open.cannot_take(&next.decoded) {
                full = true;
                break;
            }
            self.open.push(self.queued.pop().expect("peeked"));
            self.depth.pop();
        }
        if !(full || now || self.open.is_full()) {
            return; // coalesced: waits for more, or its linger
        }
        let batch = std::mem::take(&mut self.open);
        self.since = (!self.queued.is_empty()).then(Instant::now);
        if batch.is_empty() {
            return;
        }
        let slots = batch.into_slots();
        let keys: Vec<String> = slots.iter().map(|s| s.key.clone()).collect();
        self.keys.wait_for(&keys).await;
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
