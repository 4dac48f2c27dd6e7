//! Named events: the one place that both counts and logs what happened on the
//! data path. Each event adds to the process's [`Counters`] (and, for a
//! table's events, to the table's own), which the summary, the commit lines,
//! progress and `/metrics` read; and logs it. Lines tools may rely on carry an
//! `event` field (listed in the README, "Logs"); their message text is for
//! people.

use std::sync::atomic::AtomicU64;
use std::time::Duration;

use tracing::{debug, info, warn};

use super::Counters;
use crate::acks::RecordRef;
use crate::offsets::TopicPartition;
use crate::throttle::control::{AnswerRead, Throttled};
use crate::throttle::hot::Change;

/// The events of one table's writes: counted for the process and the table.
#[derive(Clone, Copy)]
pub struct TableEvents<'a> {
    pub name: &'a str,
    pub process: &'a Counters,
    pub table: &'a Counters,
}

impl TableEvents<'_> {
    fn add(&self, which: fn(&Counters) -> &AtomicU64, n: u64) {
        Counters::add(which(self.process), n);
        Counters::add(which(self.table), n);
    }

    /// A BatchWriteItem call went out.
    pub fn request_sent(&self) {
        self.add(|c| &c.requests, 1);
    }

    /// One item was written, standing for `records` records (the later of
    /// the same key replaced the earlier ones).
    pub fn item_written(&self, wcu: u32, records: usize) {
        self.add(|c| &c.items_written, 1);
        self.add(|c| &c.wcu_written, u64::from(wcu));
        self.add(|c| &c.superseded, records.saturating_sub(1) as u64);
    }

    /// An answer returned `items` unprocessed: a throttled request.
    pub fn partially_processed(&self, items: usize) {
        self.add(|c| &c.throttled_requests, 1);
        self.add(|c| &c.unprocessed_items, items as u64);
        debug!(
            table = self.name,
            unprocessed = items,
            "partially processed"
        );
    }

    /// The table's strategy read an answer: `sent` units asked for,
    /// `accepted` consumed; `rule` says which of its rules read it and
    /// `rate` where its pace went (debug level: one line per answer, to
    /// compare a run with the simulator's trace answer by answer).
    pub fn answer_read(&self, throttled: Throttled, sent: f64, accepted: f64, read: &AnswerRead) {
        debug!(
            event = "answer_read",
            table = self.name,
            throttled = ?throttled,
            sent,
            accepted,
            rule = read.rule.unwrap_or(""),
            rate = read.rate.unwrap_or_default(),
            delay_s = read.delay.as_secs_f64(),
            "the table's strategy read an answer"
        );
    }

    /// The call was refused whole (ProvisionedThroughputExceeded and kin);
    /// `scope`: what its reasons say was exceeded (`key_range`: a hot
    /// partition, not the table).
    pub fn throttled(&self, error: &str, scope: &dyn std::fmt::Display, key_range: bool) {
        self.add(|c| &c.throttled_requests, 1);
        if key_range {
            self.add(|c| &c.key_range_throttles, 1);
        }
        debug!(table = self.name, error, %scope, "throttled");
    }

    /// The table's hot key range changed: `Found` (a key range refused keys
    /// while none of the table's was hot: from now on they are paced apart),
    /// or `Cut` (it refused hot keys again), leaving `keys` hot keys paced at
    /// `rate` units/s.
    pub fn hot_range(&self, change: Change, keys: usize, rate: Option<f64>) {
        let rate = rate.unwrap_or_default();
        match change {
            Change::Found => info!(
                event = "hot_range_found",
                table = self.name,
                keys,
                rate,
                "a key range refused writes while the table had room; pacing its keys apart"
            ),
            Change::Cut => debug!(
                event = "hot_range_cut",
                table = self.name,
                keys,
                rate,
                "hot key range refused again; its rate cut"
            ),
        }
    }

    /// The call failed transiently (network, 5xx); retried after `retry_in`.
    pub fn write_retry(&self, error: &str, retry_in: Duration) {
        self.add(|c| &c.retryable_errors, 1);
        warn!(
            event = "write_retry",
            table = self.name,
            error,
            retry_in_ms = retry_in.as_millis() as u64,
            "DynamoDB write failed; retrying"
        );
    }
}

/// A record was read from Kafka and forwarded.
pub fn record_consumed(c: &Counters) {
    Counters::add(&c.records_consumed, 1);
}

/// A batch was formed for `table` and handed to a writer.
pub fn batch_formed(c: &Counters, table: &str, items: usize) {
    Counters::add(&c.batches, 1);
    debug!(table, items, "batch sent");
}

/// A record went to the dead-letter topic (`without_value`: too large for it).
pub fn dead_lettered(
    c: &Counters,
    at: &RecordRef,
    reason: &'static str,
    detail: &str,
    without_value: bool,
) {
    c.dead_letter(reason);
    warn!(
        event = "dead_lettered",
        reason,
        detail,
        topic = %at.topic,
        partition = at.partition,
        offset = at.offset,
        without_value,
        "record dead-lettered"
    );
}

/// Offsets were committed to Kafka.
pub fn committed(c: &Counters, due: &[(TopicPartition, i64)]) {
    Counters::add(&c.commits, 1);
    let s = c.snapshot();
    let offsets: Vec<String> = due
        .iter()
        .map(|((t, p), o)| format!("{t}/{p}={o}"))
        .collect();
    info!(
        event = "commit",
        partitions = due.len(),
        offsets = %offsets.join(","),
        consumed = s.records_consumed,
        written = s.items_written,
        dead_lettered = s.dead_lettered,
        throttled = s.throttled_requests,
        "committed"
    );
}

/// The group session expired: the revoked partitions are not committed, and
/// the next owner writes again what was written since the last commit.
pub fn assignment_lost(c: &Counters) {
    Counters::add(&c.assignments_lost, 1);
    warn!(
        event = "assignment_lost",
        "assignment lost (session timed out): not committing revoked partitions"
    );
}

/// A rebalance gave this worker `partitions` (topic/partition, comma-separated).
pub fn assigned(partitions: &str) {
    info!(event = "assigned", partitions, "partitions assigned");
}

/// A rebalance took `partitions` from this worker.
pub fn revoked(partitions: &str) {
    info!(event = "revoked", partitions, "partitions revoked");
}

/// No assignment for `waited` while holding nothing: the worker leaves the
/// group and joins again.
pub fn rejoin(waited: Duration) {
    warn!(
        event = "rejoin",
        waited_s = waited.as_secs(),
        "no assignment for this long while holding nothing: leaving the group and joining again"
    );
}

/// At shutdown, everything in flight was written and committed.
pub fn drained() {
    info!(
        event = "drained",
        "drained: all in-flight records written and committed"
    );
}
