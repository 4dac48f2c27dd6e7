//! Per-partition offset watermarks: what may be committed, and nothing more.
//!
//! The Kafka source *tracks* every record it hands to the pipeline, in delivery
//! order; the pipeline *acks* a record once its write (or its dead-letter
//! publication) is acknowledged, in any order. The watermark of a partition is
//! the offset to commit: **one past the last record of the contiguous acked
//! prefix** (Kafka's convention: a committed offset is the next offset to read).
//! It never passes a tracked record that is not yet acked.
//!
//! Offsets need not be contiguous (compaction and transaction markers leave
//! holes): the tracker only reasons about the records it was given.
//!
//! Each assignment of a partition carries an `epoch`; acks from an older epoch
//! (records of a partition that was revoked and maybe re-assigned since) are
//! ignored, so a late write can never move the watermark of a new assignment.
//!
//! A partition being revoked (or a worker stopping) is marked `closing`; the
//! pipeline then *abandons* its records that are not being written yet. An
//! abandoned record no longer counts as in flight (so draining ends once the
//! writes under way are done) but is a permanent gap: the watermark stops
//! before it and the next owner reads it again.
//!
//! Deliberately not here: talking to Kafka, locking, waiting. The source wraps
//! this state machine in a mutex and does the I/O.

use std::collections::{BTreeMap, VecDeque};

/// A topic-partition, by name and number.
pub type TopicPartition = (String, i32);

/// Why an ack or a track call was refused. Refusals are not fatal for the
/// worker (they happen around rebalances); they are reported for telemetry
/// and tests.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OffsetError {
    #[error("partition {0}/{1} is not assigned")]
    NotAssigned(String, i32),
    #[error("ack for {0}/{1} from epoch {2}, current epoch is {3}")]
    StaleEpoch(String, i32, u64, u64),
    #[error("offset {2} of {0}/{1} was not tracked or was already acked")]
    Unknown(String, i32, i64),
    #[error("offset {2} of {0}/{1} is not after the last tracked offset {3}")]
    OutOfOrder(String, i32, i64, i64),
}

/// State of one assigned partition.
/// Where a tracked record stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Entry {
    Pending,
    Acked,
    Abandoned,
}

#[derive(Debug, Clone)]
struct Partition {
    epoch: u64,
    /// Tracked records not yet below the watermark.
    pending: VecDeque<(i64, Entry)>,
    /// How many of them are `Entry::Pending` (asked per record polled: a
    /// count, not a scan).
    in_flight: usize,
    /// Being revoked (or the worker stopping): unstarted records are abandoned.
    closing: bool,
    /// While closing, until when this worker still owns the partition (the
    /// drain deadline): retries already started may go on until then.
    owned_until: Option<std::time::Instant>,
    /// Next offset to commit, if known (from the broker at assignment, or acks).
    watermark: Option<i64>,
    /// Last offset successfully committed to the broker.
    committed: Option<i64>,
    /// Highest offset ever tracked in this epoch.
    last_tracked: Option<i64>,
    /// Lowest offset delivered by the consumer but dropped unwritten
    /// (`untrack_from`): the position is past it, the watermark must not be.
    dropped_from: Option<i64>,
}

/// The watermarks of every assigned partition.
#[derive(Debug, Default, Clone)]
pub struct OffsetTracker {
    /// By topic, then partition: a lookup by `&str` allocates nothing (it is
    /// made several times per record).
    topics: BTreeMap<String, BTreeMap<i32, Partition>>,
    next_epoch: u64,
}

impl OffsetTracker {
    pub fn new() -> Self {
        Self::default()
    }

    /// Starts tracking a newly assigned partition and returns its epoch.
    /// `committed` is the offset the group had committed, if any.
    pub fn assign(&mut self, topic: &str, partition: i32, committed: Option<i64>) -> u64 {
        self.next_epoch += 1;
        let epoch = self.next_epoch;
        let state = Partition {
            epoch,
            pending: VecDeque::new(),
            in_flight: 0,
            closing: false,
            owned_until: None,
            watermark: committed,
            committed,
            last_tracked: None,
            dropped_from: None,
        };
        self.topics
            .entry(topic.to_string())
            .or_default()
            .insert(partition, state);
        epoch
    }

    /// Forgets a revoked partition; later acks for it are ignored.
    pub fn revoke(&mut self, topic: &str, partition: i32) {
        if let Some(parts) = self.topics.get_mut(topic) {
            parts.remove(&partition);
            if parts.is_empty() {
                self.topics.remove(topic);
            }
        }
    }

    /// Sets the committed (and, if nothing is pending, watermark) offset of a
    /// partition learnt from the broker after assignment.
    pub fn set_committed_from_broker(&mut self, topic: &str, partition: i32, offset: i64) {
        if let Ok(p) = self.get_mut(topic, partition) {
            p.committed = Some(offset);
            if p.pending.is_empty() && p.last_tracked.is_none() {
                p.watermark = Some(offset);
            }
        }
    }

    /// Epoch of the current assignment of a partition.
    pub fn epoch(&self, topic: &str, partition: i32) -> Option<u64> {
        self.get(topic, partition).map(|p| p.epoch)
    }

    /// Records that `offset` was handed to the pipeline. Offsets must grow.
    pub fn track(&mut self, topic: &str, partition: i32, offset: i64) -> Result<u64, OffsetError> {
        let p = self.get_mut(topic, partition)?;
        if let Some(last) = p.last_tracked {
            if offset <= last {
                return Err(OffsetError::OutOfOrder(
                    topic.into(),
                    partition,
                    offset,
                    last,
                ));
            }
        }
        p.last_tracked = Some(offset);
        p.pending.push_back((offset, Entry::Pending));
        p.in_flight += 1;
        Ok(p.epoch)
    }

    /// Forgets tracked records at or after `offset` that are not acked (records
    /// the source will never deliver, e.g. held back when a partition is revoked).
    pub fn untrack_from(&mut self, topic: &str, partition: i32, offset: i64) {
        if let Ok(p) = self.get_mut(topic, partition) {
            while matches!(p.pending.back(), Some(&(o, Entry::Pending)) if o >= offset) {
                p.pending.pop_back();
                p.in_flight -= 1;
            }
            p.last_tracked = p
                .pending
                .back()
                .map(|&(o, _)| o)
                .or(p.watermark.map(|w| w - 1));
            p.dropped_from = Some(p.dropped_from.map_or(offset, |d| d.min(offset)));
        }
    }

    /// Marks a record written; advances the watermark over the acked prefix.
    pub fn ack(
        &mut self,
        topic: &str,
        partition: i32,
        offset: i64,
        epoch: u64,
    ) -> Result<(), OffsetError> {
        self.settle(topic, partition, offset, epoch, Entry::Acked)
    }

    /// Marks a record given up (never written): no longer in flight, and the
    /// watermark will not pass it.
    pub fn abandon(
        &mut self,
        topic: &str,
        partition: i32,
        offset: i64,
        epoch: u64,
    ) -> Result<(), OffsetError> {
        self.settle(topic, partition, offset, epoch, Entry::Abandoned)
    }

    /// Marks a partition as closing, with no time left to retry (tests; the
    /// worker closes with [`Self::close_until`]).
    #[cfg(test)]
    pub fn close(&mut self, topic: &str, partition: i32) {
        if let Ok(p) = self.get_mut(topic, partition) {
            p.closing = true;
        }
    }

    /// Marks a partition closing, still owned until `until` (the drain
    /// deadline): nothing new starts, retries may go on until then.
    pub fn close_until(&mut self, topic: &str, partition: i32, until: std::time::Instant) {
        if let Ok(p) = self.get_mut(topic, partition) {
            p.closing = true;
            p.owned_until = Some(until);
        }
    }

    /// Whether a write already started for a record of this epoch may try
    /// again at `now` and finish by `now + attempt`: its partition is assigned
    /// in that epoch, and if closing, still owned until after that.
    pub fn may_retry(
        &self,
        topic: &str,
        partition: i32,
        epoch: u64,
        now: std::time::Instant,
        attempt: std::time::Duration,
    ) -> bool {
        self.get(topic, partition).is_some_and(|p| {
            p.epoch == epoch && (!p.closing || p.owned_until.is_some_and(|u| now + attempt < u))
        })
    }

    /// Whether a record of this epoch should still be written: its partition
    /// is assigned in that epoch and not closing.
    pub fn is_live(&self, topic: &str, partition: i32, epoch: u64) -> bool {
        self.get(topic, partition)
            .is_some_and(|p| p.epoch == epoch && !p.closing)
    }

    fn settle(
        &mut self,
        topic: &str,
        partition: i32,
        offset: i64,
        epoch: u64,
        to: Entry,
    ) -> Result<(), OffsetError> {
        let p = self.get_mut(topic, partition)?;
        if p.epoch != epoch {
            return Err(OffsetError::StaleEpoch(
                topic.into(),
                partition,
                epoch,
                p.epoch,
            ));
        }
        let idx = p
            .pending
            .binary_search_by_key(&offset, |&(o, _)| o)
            .map_err(|_| OffsetError::Unknown(topic.into(), partition, offset))?;
        if p.pending[idx].1 != Entry::Pending {
            return Err(OffsetError::Unknown(topic.into(), partition, offset));
        }
        p.pending[idx].1 = to;
        p.in_flight -= 1;
        while let Some(&(o, Entry::Acked)) = p.pending.front() {
            p.watermark = Some(o + 1);
            p.pending.pop_front();
        }
        Ok(())
    }

    /// The consumer's position moved to `position` past offsets it never
    /// delivered (transaction markers, aborted records, a reset): when no
    /// tracked record of the partition is left (none pending, none
    /// abandoned) and it is not closing, the watermark moves there too, so
    /// the partition can be committed up to its end. Returns whether it moved.
    pub fn advance_to_position(&mut self, topic: &str, partition: i32, position: i64) -> bool {
        let Ok(p) = self.get_mut(topic, partition) else {
            return false;
        };
        let behind = p.watermark.is_none_or(|w| w < position);
        let delivered_all = p.last_tracked.is_none_or(|l| l < position);
        let dropped_before = p.dropped_from.is_some_and(|d| d < position);
        if p.pending.is_empty() && !p.closing && behind && delivered_all && !dropped_before {
            p.watermark = Some(position);
            return true;
        }
        false
    }

    /// Number of tracked records not yet acked, for a partition.
    pub fn pending(&self, topic: &str, partition: i32) -> usize {
        self.get(topic, partition).map_or(0, |p| p.in_flight)
    }

    /// Number of tracked records not yet acked, over every partition.
    pub fn pending_total(&self) -> usize {
        self.each().map(|(_, _, p)| p.in_flight).sum()
    }

    /// The next offset to commit for a partition, if any record was acked or
    /// the broker told us a committed offset.
    pub fn watermark(&self, topic: &str, partition: i32) -> Option<i64> {
        self.get(topic, partition).and_then(|p| p.watermark)
    }

    /// The last offset committed to the broker for a partition.
    pub fn committed(&self, topic: &str, partition: i32) -> Option<i64> {
        self.get(topic, partition).and_then(|p| p.committed)
    }

    /// Partitions whose watermark moved past their committed offset.
    pub fn to_commit(&self) -> Vec<(TopicPartition, i64)> {
        self.each()
            .filter_map(|(t, n, p)| match (p.watermark, p.committed) {
                (Some(w), Some(c)) if w <= c => None,
                (Some(w), _) => Some(((t.to_string(), n), w)),
                _ => None,
            })
            .collect()
    }

    /// Records that the broker accepted a commit of `offset`.
    pub fn mark_committed(&mut self, topic: &str, partition: i32, offset: i64) {
        if let Ok(p) = self.get_mut(topic, partition) {
            p.committed = Some(p.committed.map_or(offset, |c| c.max(offset)));
        }
    }

    /// Every assigned partition.
    pub fn assigned(&self) -> Vec<TopicPartition> {
        self.each().map(|(t, n, _)| (t.to_string(), n)).collect()
    }

    /// Every assigned partition, by reference (nothing copied).
    pub fn assigned_iter(&self) -> impl Iterator<Item = (&str, i32)> {
        self.each().map(|(t, n, _)| (t, n))
    }

    /// No partition is assigned.
    pub fn is_empty(&self) -> bool {
        self.topics.is_empty()
    }

    fn each(&self) -> impl Iterator<Item = (&str, i32, &Partition)> {
        self.topics
            .iter()
            .flat_map(|(t, parts)| parts.iter().map(move |(n, p)| (t.as_str(), *n, p)))
    }

    fn get(&self, topic: &str, partition: i32) -> Option<&Partition> {
        self.topics.get(topic)?.get(&partition)
    }

    fn get_mut(&mut self, topic: &str, partition: i32) -> Result<&mut Partition, OffsetError> {
        self.topics
            .get_mut(topic)
            .and_then(|parts| parts.get_mut(&partition))
            .ok_or_else(|| OffsetError::NotAssigned(topic.into(), partition))
    }
}

#[cfg(test)]
#[path = "offsets_tests.rs"]
mod tests;
