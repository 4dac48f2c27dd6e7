//! The write loop of one batch: BatchWriteItem until every item is written,
//! for records this worker still owns.
//!
//! - **Fencing.** Before every attempt and after every wait, records whose
//!   partition is no longer this worker's are given up: abandoned, to be read
//!   again by the partition's next owner. A batch not yet sent is not started
//!   once its partition is closing (revocation, shutdown); a batch already
//!   started retries during the drain only while one attempt can finish
//!   before the drain deadline, after which the partition may have a new
//!   owner. Waits (pacing, backoff) wake early when partitions close. So a
//!   revoked worker never overwrites what the next owner wrote.
//! - `UnprocessedItems` are matched back to their slots by key and only they
//!   are sent again, after a backoff; items already written are never resent.
//! - Before each attempt the batch waits for its cost (WCU) at the table's
//!   pacing rate. After each attempt the table's throttle strategy hears what
//!   happened (throttled = an error or any unprocessed item; accepted units)
//!   and says how long to wait: before the retry, or after a success (pacing).
//! - Transient failures (network, 5xx) are not capacity signals: they back off
//!   on their own capped exponential schedule and do not move the strategy.
//! - A rejected call (ValidationException) is **bisected**: each half is
//!   written on its own until the refused records are alone (about 2 log2 n
//!   calls for one bad item among n); a slot that merged several records of
//!   one key is replayed record by record, so only the record DynamoDB refuses
//!   is dead-lettered, with DynamoDB's message as the reason.
//! - A fatal error stops the loop; nothing it did not write is acked.
//!
//! Every written or dead-lettered record is acked to the offset tracker.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use tracing::debug;

use super::batch::{Entry, Slot};
use super::{BatchOutcome, Sink, ThrottleScope, WriteError};
use crate::acks::Acks;
use crate::decode::{key_of, Item, KeySchema};
use crate::dlq::{DeadLetterError, DeadLetters, Delivery};
use crate::record::Record;
use crate::telemetry::events::{self, TableEvents};
use crate::telemetry::Counters;
use crate::throttle::adaptive::size::leading_within;
use crate::throttle::control::Control;
use crate::throttle::simple::Exponential;
use crate::throttle::Strategy;

/// Dead-letter reason for records DynamoDB itself rejects.
pub const REJECTED_REASON: &str = "dynamodb_rejected";

/// Everything a batch write needs; cheap to clone into a task.
#[derive(Clone, Debug)]
pub struct Writer {
    pub sink: Arc<dyn Sink>,
    pub acks: Arc<Acks>,
    pub dlq: DeadLetters,
    pub counters: Arc<Counters>,
    /// The longest one attempt takes (the request timeout): a retry starts
    /// only if it can finish while the partition is still this worker's.
    pub attempt_timeout: Duration,
}

/// A failure that stops the worker.
#[derive(Debug, thiserror::Error)]
pub enum FatalWrite {
    #[error("table {table}: {source}")]
    Table { table: String, source: WriteError },
    #[error(transparent)]
    DeadLetters(#[from] DeadLetterError),
}

/// What one call of the write loop left.
enum Left {
    Done,
    /// DynamoDB rejected the call: these slots were not written (the first),
    /// nor were these, not yet sent (the last).
    Rejected(Vec<Slot>, String, Vec<Slot>),
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
        // Groups of slots still to write, the next one last.
        let mut groups = vec![slots];
        let mut n = 0u64;
        while let Some(group) = groups.pop() {
            n += 1;
            let left = self
                .write_until_done(table, schema, group, ctl, seed.wrapping_add(n), n > 1)
                .await
                .map_err(|source| FatalWrite::Table {
                    table: table.to_string(),
                    source,
                })?;
            let Left::Rejected(mut slots, why, rest) = left else {
                continue;
            };
            if !rest.is_empty() {
                groups.push(rest); // after the refused ones are sorted out
            }
            if slots.len() > 1 {
                let second = slots.split_off(slots.len() / 2);
                groups.push(second);
                groups.push(slots);
                continue;
            }
            let Some(slot) = slots.pop() else { continue };
            if slot.entries.len() > 1 {
                // Replay the key's records one by one, oldest first.
                for entry in slot.entries.into_iter().rev() {
                    groups.push(vec![Slot {
                        key: entry.decoded.key.clone(),
                        entries: vec![entry],
                    }]);
                }
                continue;
            }
            for entry in slot.entries {
                self.dead_letter(&entry.record, REJECTED_REASON, &why)
                    .await?;
            }
        }
        Ok(())
    }

    /// Retries until every slot is written or given up; says what DynamoDB
    /// rejected, if it did.
    async fn write_until_done(
        &self,
        table: &str,
        schema: &KeySchema,
        mut remaining: Vec<Slot>,
        ctl: &Control,
        seed: u64,
        mut started: bool,
    ) -> Result<Left, WriteError> {
        let mut transient = Exponential::transient(seed);
        self.wait(ctl, ctl.before_call(), &remaining, started).await;
        loop {
            // Fence: nothing is sent for partitions this worker gave up.
            remaining = self.keep_live(remaining, started);
            if remaining.is_empty() {
                return Ok(Left::Done);
            }
            // One request carries what the table admits at once (the whole
            // batch unless partial answers taught otherwise).
            let limit = ctl.max_request_units();
            let n = leading_within(remaining.iter().map(|s| f64::from(s.wcu())), limit);
            let rest = remaining.split_off(n);
            let mut send = remaining;
            let cost: u32 = send.iter().map(Slot::wcu).sum();
            let alive = || self.any_live(&send, started);
            let paced = tokio::select! {
                go = ctl.pace(cost, alive) => go,
                () = self.acks.until_dead(alive) => false,
            };
            send = self.keep_live(send, started);
            if !paced || send.is_empty() {
                remaining = joined(send, rest);
                continue;
            }
            started = true;
            let sent_units = f64::from(send.iter().map(Slot::wcu).sum::<u32>());
            let items = send.iter().map(|s| s.item().clone()).collect();
            self.events(table, ctl).request_sent();
            let sent = tokio::time::Instant::now();
            let answer = self.sink.batch_write(table, items).await;
            ctl.observe_latency(sent.elapsed());
            let (throttled, accepted, written) = match answer {
                Ok(outcome) => {
                    let (todo, answered) = self.answered(table, send, &outcome, schema, ctl);
                    remaining = joined(todo, rest);
                    answered
                }
                Err(WriteError::Throttled(m, scope)) => {
                    let key_range = scope == ThrottleScope::KeyRange;
                    self.events(table, ctl).throttled(&m, &scope, key_range);
                    if scope == ThrottleScope::Ceiling {
                        ctl.note_ceiling();
                    }
                    remaining = joined(send, rest);
                    (true, 0.0, 0)
                }
                Err(WriteError::Retryable(m)) => {
                    let d = transient.next_failure();
                    self.events(table, ctl).write_retry(&m, d);
                    remaining = joined(send, rest);
                    self.wait(ctl, d, &remaining, true).await;
                    continue;
                }
                Err(WriteError::Rejected(m)) => return Ok(Left::Rejected(send, m, rest)),
                Err(fatal @ WriteError::Fatal(_)) => return Err(fatal),
            };
            transient.before_call(ctl.now());
            let delay = ctl.after_attempt(throttled, accepted, sent_units, f64::from(written));
            if remaining.is_empty() {
                self.hold_slot(ctl, delay).await;
                return Ok(Left::Done);
            }
            self.wait(ctl, delay, &remaining, true).await;
        }
    }

    /// Pacing after a success (delay strategies): holds the table's write
    /// slot for `delay`, cut short when partitions close.
    async fn hold_slot(&self, ctl: &Control, delay: Duration) {
        ctl.note_sleep(delay);
        let mut closings = self.acks.closings();
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = closings.changed() => {}
        }
    }

    /// A request answered: acks what was written, counts a partial answer,
    /// and returns what is left with (throttled, accepted units, written units).
    fn answered(
        &self,
        table: &str,
        send: Vec<Slot>,
        outcome: &BatchOutcome,
        schema: &KeySchema,
        ctl: &Control,
    ) -> (Vec<Slot>, (bool, f64, u32)) {
        let left = unprocessed_keys(&outcome.unprocessed, schema);
        let (todo, done): (Vec<Slot>, Vec<Slot>) = send
            .into_iter()
            .partition(|s| left.as_ref().is_none_or(|l| l.contains(&s.key)));
        let written: u32 = done.iter().map(Slot::wcu).sum();
        self.written(table, &done, ctl);
        let throttled = !todo.is_empty();
        if throttled {
            self.events(table, ctl).partially_processed(todo.len());
        }
        let accepted = outcome.consumed_wcu.unwrap_or(f64::from(written));
        (todo, (throttled, accepted, written))
    }

    /// Waits `d` (accounted to the table's control), less if the slots'
    /// partitions are given up meanwhile.
    async fn wait(&self, ctl: &Control, d: Duration, slots: &[Slot], started: bool) {
        if d.is_zero() {
            return;
        }
        ctl.note_sleep(d);
        self.acks
            .wait_while_live(d, || self.any_live(slots, started))
            .await;
    }

    /// Dead-letters a record (decoded or not) and acks it once the broker
    /// confirmed; abandons it if its partition is given up meanwhile.
    pub async fn dead_letter(
        &self,
        record: &Record,
        reason: &'static str,
        detail: &str,
    ) -> Result<(), DeadLetterError> {
        match self.dlq.send(record, reason, detail, &self.acks).await? {
            Delivery::Abandoned => self.acks.abandon(&record.at),
            delivery => {
                let without_value = delivery == Delivery::SentWithoutValue;
                events::dead_lettered(&self.counters, &record.at, reason, detail, without_value);
                self.ack(record);
            }
        }
        Ok(())
    }

    /// Whether a record is still to be written: not started, its partition
    /// open; started, one more attempt fits while the partition is ours.
    fn live(&self, e: &Entry, started: bool) -> bool {
        if started {
            self.acks.may_retry(&e.record.at, self.attempt_timeout)
        } else {
            self.acks.is_live(&e.record.at)
        }
    }

    fn any_live(&self, slots: &[Slot], started: bool) -> bool {
        slots
            .iter()
            .any(|s| s.entries.iter().any(|e| self.live(e, started)))
    }

    /// Keeps the records still to be written; abandons the others (a slot
    /// whose newest record is gone writes its newest live one).
    fn keep_live(&self, slots: Vec<Slot>, started: bool) -> Vec<Slot> {
        slots
            .into_iter()
            .filter_map(|mut slot| {
                let (live, dead): (Vec<Entry>, Vec<Entry>) = std::mem::take(&mut slot.entries)
                    .into_iter()
                    .partition(|e| self.live(e, started));
                for e in &dead {
                    self.acks.abandon(&e.record.at);
                }
                slot.entries = live;
                (!slot.entries.is_empty()).then_some(slot)
            })
            .collect()
    }

    fn written(&self, table: &str, slots: &[Slot], ctl: &Control) {
        let events = self.events(table, ctl);
        for slot in slots {
            events.item_written(slot.wcu(), slot.entries.len());
            for e in &slot.entries {
                self.ack(&e.record);
            }
        }
    }

    /// The events of `table`'s writes, counted for the process and the table.
    fn events<'a>(&'a self, table: &'a str, ctl: &'a Control) -> TableEvents<'a> {
        TableEvents {
            name: table,
            process: &self.counters,
            table: &ctl.counts,
        }
    }

    fn ack(&self, record: &Record) {
        if let Err(e) = self.acks.ack(&record.at) {
            debug!(error = %e, "ack ignored (partition revoked meanwhile)");
        }
    }
}

/// `a` then `b`.
fn joined(mut a: Vec<Slot>, b: Vec<Slot>) -> Vec<Slot> {
    a.extend(b);
    a
}

/// Keys of the unprocessed items; `None` when one cannot be matched (then
/// every remaining slot is treated as unprocessed: resending is safe).
fn unprocessed_keys(items: &[Item], schema: &KeySchema) -> Option<HashSet<String>> {
    items.iter().map(|i| key_of(i, schema)).collect()
}

#[cfg(test)]
#[path = "writer_tests/mod.rs"]
mod tests;
