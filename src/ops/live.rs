//! The worker's live state, as operators see it: which partitions it holds,
//! where each started and must end (`--until-caught-up`), consumer lag (from
//! librdkafka's statistics), whether DynamoDB answers, and whether work is
//! stuck. The source and the pollers write it; `/readyz`, `/metrics` and the
//! progress report read it. The decisions are pure ([`Stall`], [`Readiness`]).

use std::collections::BTreeMap;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Mutex, MutexGuard};

use crate::acks::Acks;
use crate::congestion::Depth;
use crate::offsets::TopicPartition;
use crate::telemetry::Counters;
use crate::throttle::control::Control;

use super::estimate::{backlog, Backlog, ProgressView};

/// A table as the endpoints see it.
#[derive(Debug, Clone)]
pub struct TableView {
    pub name: Arc<str>,
    pub control: Arc<Control>,
    /// Its queue in the pipeline (records routed, not yet in a batch).
    pub queue: Arc<Depth>,
}

/// Shared by the pipeline, the source thread and the endpoints.
#[derive(Debug)]
pub struct Live {
    pub acks: Arc<Acks>,
    pub counters: Arc<Counters>,
    pub tables: Vec<TableView>,
    /// Bytes of records read and not yet done (the byte budget's use).
    pub buffered: Arc<AtomicUsize>,
    /// Start (committed at assignment) and end offset of each partition.
    positions: Mutex<BTreeMap<TopicPartition, (i64, i64)>>,
    /// Where revoked partitions were left (the tracker forgets them).
    left_at: Mutex<BTreeMap<TopicPartition, i64>>,
    /// Consumer lag per assigned partition, as librdkafka last reported it.
    lag: Mutex<BTreeMap<TopicPartition, i64>>,
    reach: Mutex<Reach>,
    /// Kafka's reachability, as the consumer and the backlog reader see it.
    kafka: Mutex<Reach>,
    /// One stall detector per held partition (on its committed watermark).
    stalls: Mutex<BTreeMap<TopicPartition, Stall>>,
    stuck_after: Duration,
    progress: Mutex<Option<ProgressView>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock()
}

impl Live {
    pub fn new(
        acks: Arc<Acks>,
        counters: Arc<Counters>,
        tables: Vec<TableView>,
        stuck_after: Duration,
        buffered: Arc<AtomicUsize>,
    ) -> Self {
        let now = Instant::now();
        Self {
            buffered,
            acks,
            counters,
            tables,
            positions: Mutex::default(),
            left_at: Mutex::default(),
            lag: Mutex::default(),
            reach: Mutex::new(Reach { ok: now, err: None }),
            kafka: Mutex::new(Reach { ok: now, err: None }),
            stalls: Mutex::default(),
            stuck_after,
            progress: Mutex::default(),
        }
    }

    /// A partition was assigned: it starts at `start` and (for the caught-up
    /// test) ends at `end`.
    pub fn set_position(&self, tp: TopicPartition, start: i64, end: i64) {
        lock(&self.positions).insert(tp, (start, end));
    }

    /// A partition was revoked.
    pub fn forget(&self, tp: &TopicPartition) {
        lock(&self.positions).remove(tp);
        lock(&self.left_at).remove(tp);
        lock(&self.lag).remove(tp);
    }

    /// A partition is being given up at the end of the run, written up to
    /// `at`: the run's progress keeps it.
    pub fn left(&self, tp: TopicPartition, at: i64) {
        lock(&self.left_at).insert(tp, at);
    }

    /// Replaces the lag figures (librdkafka reports every assigned partition).
    pub fn set_lag(&self, lag: BTreeMap<TopicPartition, i64>) {
        *lock(&self.lag) = lag;
    }

    pub fn lag(&self) -> BTreeMap<TopicPartition, i64> {
        lock(&self.lag).clone()
    }

    /// DynamoDB answered (a DescribeTable succeeded).
    pub fn dynamo_ok(&self) {
        lock(&self.reach).ok = Instant::now();
    }

    /// DynamoDB did not answer, or refused.
    pub fn dynamo_err(&self, why: String) {
        lock(&self.reach).err = Some((Instant::now(), why));
    }

    /// Kafka answered (a record, or a reading of the group's backlog).
    pub fn kafka_ok(&self) {
        lock(&self.kafka).ok = Instant::now();
    }

    /// The Kafka client reported an error (brokers down, transport failure).
    pub fn kafka_err(&self, why: String) {
        lock(&self.kafka).err = Some((Instant::now(), why));
    }

    /// The backlog of the held partitions: from where each started to its end.
    pub fn backlog(&self) -> Backlog {
        let positions = lock(&self.positions).clone();
        let left_at = lock(&self.left_at).clone();
        let tracker = self.acks.lock();
        backlog(positions.iter().map(|(tp, &(start, end))| {
            let at = tracker
                .watermark(&tp.0, tp.1)
                .or_else(|| left_at.get(tp).copied());
            (start, end, at)
        }))
    }

    pub fn set_progress(&self, view: ProgressView) {
        *lock(&self.progress) = Some(view);
    }

    pub fn progress(&self) -> Option<ProgressView> {
        *lock(&self.progress)
    }

    /// Evaluates readiness now (and moves the stall detectors along): a
    /// partition is stuck when records of it wait and its watermark has not
    /// moved for `stuck_after`, even while its other records are written (a
    /// record blocking its partition).
    pub fn readiness(&self) -> Readiness {
        let now = Instant::now();
        let held: Vec<(TopicPartition, i64, usize)> = {
            let t = self.acks.lock();
            t.assigned()
                .into_iter()
                .map(|(topic, p)| {
                    let at = t.watermark(&topic, p).unwrap_or(-1);
                    let waiting = t.pending(&topic, p);
                    ((topic, p), at, waiting)
                })
                .collect()
        };
        let mut stalls = lock(&self.stalls);
        stalls.retain(|tp, _| held.iter().any(|(h, _, _)| h == tp));
        let mut stuck: Vec<(TopicPartition, Duration)> = Vec::new();
        for (tp, at, waiting) in &held {
            let s = stalls.entry(tp.clone()).or_insert_with(|| Stall::new(now));
            if let Some(d) = s.observe(*at, *waiting, now, self.stuck_after) {
                stuck.push((tp.clone(), d));
            }
        }
        drop(stalls);
        Readiness {
            assigned: held.len(),
            dynamodb: lock(&self.reach).state(),
            kafka: lock(&self.kafka).state(),
            stuck_for: stuck.iter().map(|(_, d)| *d).max(),
            stuck_partitions: stuck.iter().map(|((t, p), _)| format!("{t}/{p}")).collect(),
        }
    }
}

/// When DynamoDB last answered, and the last failure.
#[derive(Debug)]
struct Reach {
    ok: Instant,
    err: Option<(Instant, String)>,
}

impl Reach {
    fn state(&self) -> Result<(), String> {
        match &self.err {
            Some((at, why)) if *at >= self.ok => Err(why.clone()),
            _ => Ok(()),
        }
    }
}

/// Detects a stall: records wait to be written and the position (a
/// partition's watermark) did not move for a while. Pure: the caller passes
/// the time and the figures.
#[derive(Debug, Clone)]
pub struct Stall {
    done: i64,
    since: Instant,
}

impl Stall {
    pub fn new(now: Instant) -> Self {
        Self {
            done: 0,
            since: now,
        }
    }

    /// `done`: the position so far; `waiting`: records in flight. Returns how
    /// long it has been stuck, once that reaches `after`.
    pub fn observe(
        &mut self,
        done: i64,
        waiting: usize,
        now: Instant,
        after: Duration,
    ) -> Option<Duration> {
        if done != self.done || waiting == 0 {
            self.done = done;
            self.since = now;
            return None;
        }
        let stuck = now.saturating_duration_since(self.since);
        (stuck >= after).then_some(stuck)
    }
}

/// The `/readyz` verdict and its reasons.
#[derive(Debug, Clone, PartialEq)]
pub struct Readiness {
    /// Partitions held.
    pub assigned: usize,
    /// DynamoDB's last answer (Err: why it failed).
    pub dynamodb: Result<(), String>,
    /// Kafka's last answer (Err: the client's last error, newer than it).
    pub kafka: Result<(), String>,
    /// Set when records have waited with nothing written for too long.
    pub stuck_for: Option<Duration>,
    /// The stuck partitions, as topic/partition.
    pub stuck_partitions: Vec<String>,
}

impl Readiness {
    pub fn ready(&self) -> bool {
        self.assigned > 0 && self.dynamodb.is_ok() && self.kafka.is_ok() && self.stuck_for.is_none()
    }

    /// The body of `/readyz`: the verdict and each check.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "ready": self.ready(),
            "assigned_partitions": self.assigned,
            "dynamodb": match &self.dynamodb {
                Ok(()) => "reachable".to_string(),
                Err(why) => format!("unreachable: {why}"),
            },
            "kafka": match &self.kafka {
                Ok(()) => "reachable".to_string(),
                Err(why) => format!("unreachable: {why}"),
            },
            "stuck_for_s": self.stuck_for.map(|d| d.as_secs()),
            "stuck_partitions": self.stuck_partitions,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const AFTER: Duration = Duration::from_secs(60);

    #[test]
    fn a_stall_needs_waiting_records_and_no_progress_for_the_whole_period() {
        let t0 = Instant::now();
        let mut s = Stall::new(t0);
        let at = |s: u64| t0 + Duration::from_secs(s);
        assert_eq!(s.observe(0, 5, at(30), AFTER), None);
        assert_eq!(
            s.observe(0, 5, at(61), AFTER),
            Some(Duration::from_secs(61))
        );
        // Progress resets the clock.
        assert_eq!(s.observe(3, 5, at(62), AFTER), None);
        assert_eq!(s.observe(3, 5, at(100), AFTER), None);
        assert!(s.observe(3, 5, at(122), AFTER).is_some());
        // Nothing waiting: idle, not stuck, however long.
        assert_eq!(s.observe(3, 0, at(500), AFTER), None);
        assert_eq!(s.observe(3, 2, at(530), AFTER), None);
    }

    #[test]
    fn readiness_needs_partitions_dynamodb_kafka_and_no_stall() {
        let ok = Readiness {
            assigned: 2,
            dynamodb: Ok(()),
            kafka: Ok(()),
            stuck_for: None,
            stuck_partitions: Vec::new(),
        };
        let no_kafka = Readiness {
            kafka: Err("AllBrokersDown".into()),
            ..ok.clone()
        };
        assert!(!no_kafka.ready());
        assert_eq!(no_kafka.to_json()["kafka"], "unreachable: AllBrokersDown");
        assert!(ok.ready());
        assert!(!Readiness {
            assigned: 0,
            ..ok.clone()
        }
        .ready());
        let down = Readiness {
            dynamodb: Err("connection refused".into()),
            ..ok.clone()
        };
        assert!(!down.ready());
        assert_eq!(
            down.to_json()["dynamodb"],
            "unreachable: connection refused"
        );
        assert!(!Readiness {
            stuck_for: Some(AFTER),
            ..ok
        }
        .ready());
    }

    #[test]
    fn a_partition_blocked_at_its_head_is_stuck_while_others_flow() {
        let acks = Arc::new(Acks::new());
        let mut epochs = Vec::new();
        for p in 0..2 {
            epochs.push(acks.lock().assign("t", p, Some(0)));
            acks.lock().track("t", p, 0).unwrap();
            acks.lock().track("t", p, 1).unwrap();
        }
        let at = |p: i32, offset: i64| crate::acks::RecordRef {
            topic: "t".into(),
            partition: p,
            offset,
            epoch: epochs[p as usize],
        };
        // Partition 0: its first record never finishes, the next one does.
        acks.ack(&at(0, 1)).unwrap();
        acks.ack(&at(1, 0)).unwrap();
        acks.ack(&at(1, 1)).unwrap();
        let live = Live::new(
            acks,
            Arc::default(),
            Vec::new(),
            Duration::ZERO,
            Arc::default(),
        );
        live.readiness();
        let r = live.readiness();
        assert_eq!(r.stuck_partitions, ["t/0"]);
        assert!(!r.ready());
    }

    #[test]
    fn a_later_success_clears_a_failure() {
        let t0 = Instant::now();
        let mut r = Reach { ok: t0, err: None };
        assert_eq!(r.state(), Ok(()));
        r.err = Some((t0 + Duration::from_secs(1), "timeout".into()));
        assert_eq!(r.state(), Err("timeout".into()));
        r.ok = t0 + Duration::from_secs(2);
        assert_eq!(r.state(), Ok(()));
    }
}
