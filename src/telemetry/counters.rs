//! The worker's running totals: atomics of the process (and, the same type,
//! of each table), and their snapshot for the summary.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use parking_lot::Mutex;

/// Running totals of one worker process.
#[derive(Debug, Default)]
pub struct Counters {
    pub records_consumed: AtomicU64,
    pub items_written: AtomicU64,
    pub wcu_written: AtomicU64,
    pub batches: AtomicU64,
    pub requests: AtomicU64,
    pub throttled_requests: AtomicU64,
    /// Throttled calls whose reasons name a key range (a hot partition).
    pub key_range_throttles: AtomicU64,
    pub unprocessed_items: AtomicU64,
    pub retryable_errors: AtomicU64,
    pub dead_lettered: AtomicU64,
    pub superseded: AtomicU64,
    pub commits: AtomicU64,
    /// Revocations after the group session expired (nothing could be committed).
    pub assignments_lost: AtomicU64,
    /// Dead-lettered records per reason (a bounded set of static labels).
    dead_letter_reasons: Mutex<BTreeMap<&'static str, u64>>,
}

/// A copy of the counters at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Snapshot {
    pub records_consumed: u64,
    pub items_written: u64,
    pub wcu_written: u64,
    pub batches: u64,
    pub requests: u64,
    pub throttled_requests: u64,
    pub key_range_throttles: u64,
    pub unprocessed_items: u64,
    pub retryable_errors: u64,
    pub dead_lettered: u64,
    pub superseded: u64,
    pub commits: u64,
    pub assignments_lost: u64,
}

impl Counters {
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Relaxed);
    }

    /// Counts one dead-lettered record.
    pub fn dead_letter(&self, reason: &'static str) {
        Self::add(&self.dead_lettered, 1);
        *self.dead_letter_reasons.lock().entry(reason).or_default() += 1;
    }

    /// Dead-lettered records per reason.
    pub fn dead_letters_by_reason(&self) -> BTreeMap<&'static str, u64> {
        self.dead_letter_reasons.lock().clone()
    }

    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            records_consumed: self.records_consumed.load(Relaxed),
            items_written: self.items_written.load(Relaxed),
            wcu_written: self.wcu_written.load(Relaxed),
            batches: self.batches.load(Relaxed),
            requests: self.requests.load(Relaxed),
            throttled_requests: self.throttled_requests.load(Relaxed),
            key_range_throttles: self.key_range_throttles.load(Relaxed),
            unprocessed_items: self.unprocessed_items.load(Relaxed),
            retryable_errors: self.retryable_errors.load(Relaxed),
            dead_lettered: self.dead_lettered.load(Relaxed),
            superseded: self.superseded.load(Relaxed),
            commits: self.commits.load(Relaxed),
            assignments_lost: self.assignments_lost.load(Relaxed),
        }
    }
}
