//! The write loop of one batch: BatchWriteItem until every item is written.
//!
//! - `UnprocessedItems` are matched back to their slots by key and only they
//!   are sent again, after a backoff; items already written are never resent.
//! - Before each attempt the batch waits for its cost (WCU) at the table's
//!   pacing rate. After each attempt the table's throttle strategy hears what
//!   happened (throttled = an error or any unprocessed item; accepted units)
//!   and says how long to wait: before the retry, or after a success (pacing).
//! - Transient failures (network, 5xx) are not capacity signals: they back off
//!   on their own capped exponential schedule and do not move the strategy.
//! - A rejection (ValidationException) of a multi-item call is isolated: each
//!   slot is written alone, and a slot that merged several records with the
//!   same key is replayed record by record, so only the record DynamoDB
//!   refuses is dead-lettered, with DynamoDB's message as the reason.
//! - A fatal error stops the loop; nothing it did not write is acked.
//!
//! Every written or dead-lettered record is acked to the offset tracker.

use std::collections::HashSet;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use tracing::{debug, warn};

use super::batch::{Entry, Slot};
use super::control::Control;
use super::dynamodb::Dynamo;
use super::WriteError;
use crate::acks::Acks;
use crate::backoff::simple::{Exponential, ExponentialConfig};
use crate::backoff::{Feedback, Strategy};
use crate::decode::{key_of, KeySchema};
use crate::dlq::DeadLetters;
use crate::telemetry::Counters;

/// Dead-letter reason for records DynamoDB itself rejects.
pub const REJECTED_REASON: &str = "dynamodb_rejected";

/// Everything a batch write needs; cheap to clone into a task.
#[derive(Clone)]
pub struct Writer {
    pub dynamo: Dynamo,
    pub acks: Arc<Acks>,
    pub dlq: DeadLetters,
    pub counters: Arc<Counters>,
}

/// Backoff for transient failures (network, 5xx): 100 ms doubling to 10 s.
fn transient_backoff(seed: u64) -> Exponential {
    let cfg = ExponentialConfig {
        initial_ms: 100.0,
        max_ms: 10_000.0,
        multiplier: 2.0,
        jitter: 0.3,
    };
    Exponential::new(cfg, seed)
}

/// A fatal error, with the table it happened on.
#[derive(Debug, thiserror::Error)]
#[error("table {table}: {source}")]
pub struct FatalWrite {
    pub table: String,
    pub source: WriteError,
}

impl Writer {
    /// Writes every slot of a batch (or dead-letters what DynamoDB rejects).
    pub async fn write(
        &self,
        table: &str,
        schema: &KeySchema,
        slots: Vec<Slot>,
        ctl: &Control,
        seed: u64,
    ) -> Result<(), FatalWrite> {
        let fatal = |source| FatalWrite {
            table: table.to_string(),
            source,
        };
        match self.write_until_done(table, schema, slots, ctl, seed).await {
            Ok(None) => Ok(()),
            Ok(Some((rejected, why))) => self
                .isolate(table, schema, rejected, why, ctl, seed)
                .await
                .map_err(fatal),
            Err(e) => Err(fatal(e)),
        }
    }

    /// Retries until every slot is written. Returns the slots left when
    /// DynamoDB rejected the call, with its message.
    async fn write_until_done(
        &self,
        table: &str,
        schema: &KeySchema,
        mut remaining: Vec<Slot>,
        ctl: &Control,
        seed: u64,
    ) -> Result<Option<(Vec<Slot>, String)>, WriteError> {
        let mut transient = transient_backoff(seed);
        let mut first = true;
        let c = &self.counters;
        ctl.sleep(ctl.before_call()).await;
        while !remaining.is_empty() {
            let cost: u32 = remaining.iter().map(Slot::wcu).sum();
            // A batch never sent whose partitions were revoked meanwhile (or
            // the worker is stopping) is given up: the next owner writes it.
            // Once sent, a batch is in flight and is finished.
            let live = |slots: &[Slot]| {
                slots
                    .iter()
                    .any(|s| s.entries.iter().any(|e| self.acks.is_live(&e.record.at)))
            };
            let go = ctl.pace(cost, || !first || live(&remaining)).await;
            if first {
                remaining = self.drop_dead(remaining);
                if !go || remaining.is_empty() {
                    self.abandon_all(&remaining);
                    break;
                }
                first = false;
            }
            let items = remaining.iter().map(|s| s.item().clone()).collect();
            count(c, ctl, |c| &c.requests, 1);
            let sent = std::time::Instant::now();
            let answer = self.dynamo.batch_write(table, items).await;
            ctl.observe_latency(sent.elapsed());
            let (throttled, accepted) = match answer {
                Ok(outcome) => {
                    let left = unprocessed_keys(&outcome.unprocessed, schema);
                    let (todo, done): (Vec<Slot>, Vec<Slot>) = remaining
                        .into_iter()
                        .partition(|s| left.as_ref().is_none_or(|l| l.contains(&s.key)));
                    let written: u32 = done.iter().map(Slot::wcu).sum();
                    self.written(&done, ctl);
                    remaining = todo;
                    if !remaining.is_empty() {
                        count(c, ctl, |c| &c.throttled_requests, 1);
                        count(c, ctl, |c| &c.unprocessed_items, remaining.len() as u64);
                    }
                    let accepted = outcome.consumed_wcu.unwrap_or(f64::from(written));
                    (!remaining.is_empty(), accepted)
                }
                Err(WriteError::Throttled(m)) => {
                    count(c, ctl, |c| &c.throttled_requests, 1);
                    debug!(table, error = %m, "throttled");
                    (true, 0.0)
                }
                Err(WriteError::Retryable(m)) => {
                    count(c, ctl, |c| &c.retryable_errors, 1);
                    let d = transient.after_attempt(&Feedback {
                        throttled: true,
                        ..Feedback::default()
                    });
                    warn!(table, error = %m, retry_in_ms = d.as_millis() as u64, "DynamoDB write failed; retrying");
                    ctl.sleep(d).await;
                    continue;
                }
                Err(WriteError::Rejected(m)) => return Ok(Some((remaining, m))),
                Err(fatal @ WriteError::Fatal(_)) => return Err(fatal),
            };
            transient.before_call(ctl.now());
            let delay = ctl.after_attempt(throttled, accepted);
            ctl.sleep(delay).await;
        }
        Ok(None)
    }

    /// Writes rejected slots one record at a time; dead-letters the records
    /// DynamoDB still rejects on their own.
    async fn isolate(
        &self,
        table: &str,
        schema: &KeySchema,
        slots: Vec<Slot>,
        why: String,
        ctl: &Control,
        seed: u64,
    ) -> Result<(), WriteError> {
        let singles: Vec<Entry> = slots.into_iter().flat_map(|s| s.entries).collect();
        let alone = singles.len() == 1;
        for (i, entry) in singles.into_iter().enumerate() {
            let slot = vec![Slot {
                key: entry.decoded.key.clone(),
                entries: vec![entry],
            }];
            let rejected = if alone {
                Some((slot, why.clone()))
            } else {
                self.write_until_done(table, schema, slot, ctl, seed.wrapping_add(i as u64))
                    .await?
            };
            if let Some((mut slot, message)) = rejected {
                let entry = slot
                    .pop()
                    .and_then(|s| s.entries.into_iter().next())
                    .expect("one entry");
                self.dead_letter_record(&entry.record, REJECTED_REASON, &message)
                    .await;
            }
        }
        Ok(())
    }

    /// Dead-letters a record (decoded or not) and acks it once the broker
    /// confirmed.
    pub async fn dead_letter_record(
        &self,
        record: &crate::source::Record,
        reason: &'static str,
        detail: &str,
    ) {
        warn!(reason, detail, topic = %record.at.topic, partition = record.at.partition,
            offset = record.at.offset, "record dead-lettered");
        self.dlq.send(record, reason, detail).await;
        self.counters.dead_letter(reason);
        self.ack(record);
    }

    fn abandon_all(&self, slots: &[Slot]) {
        for e in slots.iter().flat_map(|s| &s.entries) {
            self.acks.abandon(&e.record.at);
        }
    }

    /// Keeps the slots with a record still to be written; abandons the rest.
    fn drop_dead(&self, slots: Vec<Slot>) -> Vec<Slot> {
        let (live, dead): (Vec<Slot>, Vec<Slot>) = slots
            .into_iter()
            .partition(|s| s.entries.iter().any(|e| self.acks.is_live(&e.record.at)));
        self.abandon_all(&dead);
        live
    }

    fn written(&self, slots: &[Slot], ctl: &Control) {
        let c = &self.counters;
        for slot in slots {
            count(c, ctl, |c| &c.items_written, 1);
            count(c, ctl, |c| &c.wcu_written, u64::from(slot.wcu()));
            count(c, ctl, |c| &c.superseded, slot.entries.len() as u64 - 1);
            for e in &slot.entries {
                self.ack(&e.record);
            }
        }
    }

    fn ack(&self, record: &crate::source::Record) {
        if let Err(e) = self.acks.ack(&record.at) {
            debug!(error = %e, "ack ignored (partition revoked meanwhile)");
        }
    }
}

/// Adds `n` to a counter of the process and of the table.
fn count(process: &Counters, ctl: &Control, which: fn(&Counters) -> &AtomicU64, n: u64) {
    Counters::add(which(process), n);
    Counters::add(which(&ctl.counts), n);
}

/// Keys of the unprocessed items; `None` when one cannot be matched (then
/// every remaining slot is treated as unprocessed: resending is safe).
fn unprocessed_keys(items: &[crate::decode::Item], schema: &KeySchema) -> Option<HashSet<String>> {
    items.iter().map(|i| key_of(i, schema)).collect()
}
