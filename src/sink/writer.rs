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
use crate::decode::{key_of, partition_part, Item, KeySchema};
use crate::dlq::{DeadLetterError, DeadLetters, Delivery};
use crate::record::Record;
use crate::telemetry::events::{self, TableEvents};
use crate::telemetry::Counters;
use crate::throttle::control::{Control, Throttled};
use crate::throttle::request::{self, Reading};
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
        // A worker's first request waits until the other jobs writing the
        // table are known (at once after that; see `Control::jobs_known`).
        {
            let alive = || self.any_live(&remaining, started);
            tokio::select! {
                () = ctl.jobs_known() => {}
                () = self.acks.until_dead(alive) => {}
            }
        }
        self.wait(ctl, ctl.before_call(), &remaining, started).await;
        loop {
            // Fence: nothing is sent for partitions this worker gave up.
            remaining = self.keep_live(remaining, started);
            if remaining.is_empty() {
                return Ok(Left::Done);
            }
            // The request's turn at the pacer first, then what it carries:
            // requests composed before their turn would carry what was
            // known while earlier ones waited (at the start, eight full
            // batches against a bucket that admits a fifth of one, each
            // paced for its whole cost and each partial).
            let turn = {
                let alive = || self.any_live(&remaining, started);
                tokio::select! {
                    t = ctl.turn() => Some(t),
                    () = self.acks.until_dead(alive) => None,
                }
            };
            remaining = self.keep_live(remaining, started);
            let Some(turn) = turn.filter(|_| !remaining.is_empty()) else {
                continue;
            };
            // One request carries what the table admits at once (the whole
            // batch unless partial answers taught otherwise), and a hot
            // key's slot only when the hot range's pace lets it go.
            let (mut send, rest, hot_wait) = compose(ctl, remaining);
            if send.is_empty() {
                drop(turn);
                remaining = rest; // only hot keys' slots, not due yet
                self.wait(ctl, hot_wait, &remaining, started).await;
                continue;
            }
            let cost: u32 = send.iter().map(Slot::wcu).sum();
            let alive = || self.any_live(&send, started);
            let paced = tokio::select! {
                () = ctl.pace(&turn, cost) => true,
                () = self.acks.until_dead(alive) => false,
            };
            // The first request keeps the turn until its answer is heard:
            // the next one is composed by what it shows.
            let probe = ctl.probing().then_some(turn);
            send = self.keep_live(send, started);
            if !paced || send.is_empty() {
                remaining = joined(send, rest);
                continue;
            }
            started = true;
            // Hot as the request leaves (keys may have turned hot while it
            // waited at the pacer).
            let attempt = Attempt {
                hot: ctl.which_hot(send.iter().map(|s| partition_part(&s.key))),
                at: ctl.now(),
            };
            let items = send.iter().map(|s| s.item().clone()).collect();
            self.events(table, ctl).request_sent();
            let sent = tokio::time::Instant::now();
            let answer = self.sink.batch_write(table, items).await;
            ctl.observe_latency(sent.elapsed());
            let heard = match answer {
                Ok(outcome) => {
                    if let Some(units) = outcome.table_wcu {
                        // What the table's items and each global index
                        // consumed: an index with less room than the table
                        // bounds it. (An answer with only a total says
                        // nothing of the indexes: they keep what they had.)
                        ctl.note_consumed(units, &outcome.index_wcu);
                    }
                    let (todo, heard) = self.answered(table, send, &attempt, &outcome, schema, ctl);
                    remaining = joined(todo, rest);
                    heard
                }
                Err(WriteError::Throttled(m, scope)) => {
                    let key_range = scope == ThrottleScope::KeyRange;
                    self.events(table, ctl).throttled(&m, &scope, key_range);
                    if scope == ThrottleScope::Ceiling {
                        ctl.note_ceiling();
                    }
                    let refusal = Refusal {
                        refused: vec![true; send.len()],
                        reading: if key_range {
                            Reading::KeyRange
                        } else {
                            Reading::Table
                        },
                        consumed: Some(0.0),
                    };
                    let heard = self.heard(table, &send, &attempt, &refusal, ctl);
                    remaining = joined(send, rest);
                    heard
                }
                Err(WriteError::Retryable(m)) => {
                    drop(probe); // no answer: the next request probes
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
            // Refusals only of keys already paced apart are not the table's.
            let delay = match heard.table {
                Some((throttled, sent_units)) => {
                    let read =
                        ctl.after_attempt(throttled, heard.accepted, sent_units, heard.written);
                    self.events(table, ctl).answer_read(
                        throttled,
                        sent_units,
                        heard.accepted,
                        &read,
                    );
                    read.delay
                }
                None => Duration::ZERO,
            };
            drop(probe);
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
    /// and returns what is left with what the controls heard.
    fn answered(
        &self,
        table: &str,
        send: Vec<Slot>,
        attempt: &Attempt,
        outcome: &BatchOutcome,
        schema: &KeySchema,
        ctl: &Control,
    ) -> (Vec<Slot>, Heard) {
        let left = unprocessed_keys(&outcome.unprocessed, schema);
        let refusal = Refusal {
            refused: send
                .iter()
                .map(|s| left.as_ref().is_none_or(|l| l.contains(&s.key)))
                .collect(),
            // Which refusals a key range made is read from which items came
            // back; unless they could not be matched.
            reading: if left.is_some() {
                Reading::Partial
            } else {
                Reading::Table
            },
            consumed: outcome.consumed_wcu,
        };
        let heard = self.heard(table, &send, attempt, &refusal, ctl);
        let (mut todo, mut done) = (Vec::new(), Vec::new());
        for (slot, r) in send.into_iter().zip(refusal.refused) {
            if r {
                todo.push(slot);
            } else {
                done.push(slot);
            }
        }
        self.written(table, &done, ctl);
        if !todo.is_empty() {
            self.events(table, ctl).partially_processed(todo.len());
        }
        (todo, heard)
    }

    /// What an answer tells the table's control and the hot range (read
    /// item by item by [`request::read`]).
    fn heard(
        &self,
        table: &str,
        send: &[Slot],
        attempt: &Attempt,
        answer: &Refusal,
        ctl: &Control,
    ) -> Heard {
        let items: Vec<request::Item<'_>> = send
            .iter()
            .zip(&attempt.hot)
            .zip(&answer.refused)
            .map(|((slot, hot), refused)| request::Item {
                key: partition_part(&slot.key),
                units: f64::from(slot.wcu()),
                refused: *refused,
                hot: *hot,
            })
            .collect();
        let mut read = request::read(
            &items,
            answer.reading,
            ctl.paces_hot_keys(),
            |i| ctl.reaches_binding_index(|k| send[i].item().contains_key(k)),
            attempt.at,
        );
        // The hot range hears of its keys, and of every key a range refused.
        if let Some(range) = read.range.take() {
            if let Some((change, keys, rate)) = ctl.hot_answer(range) {
                self.events(table, ctl).hot_range(change, keys, rate);
            }
        }
        Heard {
            table: read.for_table(ctl.hot_holds()),
            accepted: answer.consumed.unwrap_or(read.written),
            written: read.written,
        }
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

/// A request as it left: which of its slots' keys were hot, and when (on
/// the control's clock).
struct Attempt {
    hot: Vec<bool>,
    at: Duration,
}

/// What an answer refused: which slots came back, who refused them, and the
/// capacity consumed (ConsumedCapacity; None: not reported).
struct Refusal {
    refused: Vec<bool>,
    reading: Reading,
    consumed: Option<f64>,
}

/// What an answer tells the table's control.
struct Heard {
    /// (throttled, units sent) for the table's strategy; None when only
    /// keys the hot range answers for were refused and nothing was written.
    table: Option<(Throttled, f64)>,
    /// ConsumedCapacity (or the written units when not reported).
    accepted: f64,
    /// Units of the items written.
    written: f64,
}

/// The next request out of `remaining` (the rest after it), within the
/// table's request size, as [`request::compose`] makes it: hot keys' slots
/// first, each only as the hot range's pace lets it go, then the cold ones.
/// When only hot slots are left and none may go yet, the request is empty
/// and the wait is returned.
fn compose(ctl: &Control, remaining: Vec<Slot>) -> (Vec<Slot>, Vec<Slot>, Duration) {
    let hot = ctl.which_hot(remaining.iter().map(|s| partition_part(&s.key)));
    let units: Vec<f64> = remaining.iter().map(|s| f64::from(s.wcu())).collect();
    let (send, rest, wait) = request::compose(&units, &hot, ctl.max_request_units(), |i| {
        ctl.hot_admit(remaining[i].wcu())
    });
    debug_assert_eq!(
        send.len() + rest.len(),
        remaining.len(),
        "every slot placed once"
    );
    let mut slots: Vec<Option<Slot>> = remaining.into_iter().map(Some).collect();
    let mut take = |idx: Vec<usize>| -> Vec<Slot> {
        idx.into_iter().filter_map(|i| slots[i].take()).collect()
    };
    (take(send), take(rest), wait)
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
