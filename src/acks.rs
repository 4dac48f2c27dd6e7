//! The shared offset tracker: writers ack from async tasks, the Kafka source
//! thread tracks, commits and waits for drains.
//!
//! A mutex around the pure [`OffsetTracker`] plus a condition variable that is
//! signalled on every ack, so the source thread (which is not async: it owns
//! the librdkafka consumer and runs its rebalance callbacks) can block until a
//! revoked partition's in-flight records are done, with a deadline.

use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, MutexGuard};

use crate::offsets::{OffsetError, OffsetTracker, TopicPartition};

/// Where a record sits: enough to ack it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordRef {
    pub topic: std::sync::Arc<str>,
    pub partition: i32,
    pub offset: i64,
    pub epoch: u64,
}

#[derive(Debug)]
pub struct Acks {
    tracker: Mutex<OffsetTracker>,
    changed: Condvar,
    /// Bumped whenever partitions close or are revoked: writers waiting
    /// (backoff, pacing, dead-letter retries) wake and re-check that their
    /// records are still theirs to write.
    closings: tokio::sync::watch::Sender<u64>,
}

impl Default for Acks {
    fn default() -> Self {
        Self {
            tracker: Mutex::default(),
            changed: Condvar::new(),
            closings: tokio::sync::watch::Sender::new(0),
        }
    }
}

impl Acks {
    pub fn new() -> Self {
        Self::default()
    }

    /// Marks partitions closing, still owned until `until` (the drain
    /// deadline): nothing new starts, writes already started may retry while
    /// an attempt can finish before it; waiting writers are woken.
    pub fn close_until(&self, tps: &[TopicPartition], until: std::time::Instant) {
        {
            let mut tracker = self.lock();
            for (t, p) in tps {
                tracker.close_until(t, *p, until);
            }
        }
        self.changed.notify_all();
        self.closings.send_modify(|n| *n += 1);
    }

    /// Whether a write already started for `r` may try again now, with
    /// `attempt` for the attempt to finish (see [`OffsetTracker::may_retry`]).
    pub fn may_retry(&self, r: &RecordRef, attempt: std::time::Duration) -> bool {
        self.lock().may_retry(
            &r.topic,
            r.partition,
            r.epoch,
            std::time::Instant::now(),
            attempt,
        )
    }

    /// Forgets revoked partitions (acks of their records are refused from
    /// now on); waiting writers are woken.
    pub fn revoke(&self, tps: &[TopicPartition]) {
        {
            let mut tracker = self.lock();
            for (t, p) in tps {
                tracker.revoke(t, *p);
            }
        }
        self.closings.send_modify(|n| *n += 1);
    }

    /// Changes whenever partitions close or are revoked.
    pub fn closings(&self) -> tokio::sync::watch::Receiver<u64> {
        self.closings.subscribe()
    }

    /// Resolves once `alive()` is false, checking whenever partitions close
    /// or are revoked.
    pub async fn until_dead(&self, alive: impl Fn() -> bool) {
        let mut closings = self.closings();
        while alive() {
            if closings.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }

    /// Waits `d`, or less if the records `alive` asks about stop being live
    /// meanwhile. Returns whether they are still live at the end.
    pub async fn wait_while_live(&self, d: std::time::Duration, alive: impl Fn() -> bool) -> bool {
        tokio::select! {
            _ = tokio::time::sleep(d) => alive(),
            _ = self.until_dead(&alive) => false,
        }
    }

    /// Locks the tracker (for the source thread's bookkeeping).
    pub fn lock(&self) -> MutexGuard<'_, OffsetTracker> {
        self.tracker.lock()
    }

    /// Marks a record written or dead-lettered. Stale acks (a partition that
    /// was revoked meanwhile) are refused and reported, never applied.
    pub fn ack(&self, r: &RecordRef) -> Result<(), OffsetError> {
        let result = self.lock().ack(&r.topic, r.partition, r.offset, r.epoch);
        self.changed.notify_all();
        result
    }

    /// Gives a record up without writing it (its partition is closing): it
    /// stops counting as in flight; the watermark will not pass it.
    pub fn abandon(&self, r: &RecordRef) {
        let _ = self
            .lock()
            .abandon(&r.topic, r.partition, r.offset, r.epoch);
        self.changed.notify_all();
    }

    /// Whether the record should still be written (its partition is assigned
    /// in the record's epoch and not closing).
    pub fn is_live(&self, r: &RecordRef) -> bool {
        self.lock().is_live(&r.topic, r.partition, r.epoch)
    }

    /// Blocks until `done(tracker)` holds or `deadline` passes; returns
    /// whether it held.
    pub fn wait_until(&self, deadline: Instant, done: impl Fn(&OffsetTracker) -> bool) -> bool {
        let mut guard = self.lock();
        loop {
            if done(&guard) {
                return true;
            }
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            let wait = (deadline - now).min(Duration::from_millis(100));
            self.changed.wait_for(&mut guard, wait);
        }
    }
}

#[cfg(test)]
impl Acks {
    /// Tracks `offset` of an assigned partition; returns its reference.
    pub fn tracked(&self, topic: &str, partition: i32, offset: i64) -> RecordRef {
        let epoch = self
            .lock()
            .track(topic, partition, offset)
            .expect("an assigned partition");
        RecordRef {
            topic: topic.into(),
            partition,
            offset,
            epoch,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_waiter_wakes_when_the_last_ack_lands() {
        let acks = Arc::new(Acks::new());
        acks.lock().assign("t", 0, None);
        let r = acks.tracked("t", 0, 0);
        let writer = {
            let acks = acks.clone();
            std::thread::spawn(move || acks.ack(&r).unwrap())
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        assert!(acks.wait_until(deadline, |t| t.pending("t", 0) == 0));
        writer.join().unwrap();
        assert_eq!(acks.lock().watermark("t", 0), Some(1));
    }

    #[test]
    fn a_waiter_gives_up_at_the_deadline() {
        let acks = Acks::new();
        acks.lock().assign("t", 0, None);
        acks.lock().track("t", 0, 0).unwrap();
        let deadline = Instant::now() + Duration::from_millis(50);
        assert!(!acks.wait_until(deadline, |t| t.pending("t", 0) == 0));
    }
}
