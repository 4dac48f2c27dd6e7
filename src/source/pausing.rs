//! Which partitions the source holds paused, as one pure decision, and when
//! it stalls instead. librdkafka's pause drops what it has fetched ahead,
//! and after a resume the partition is fetched again about a second later
//! (measured against tansu), so a pause is kept for what only it can do:
//!
//! - the pipeline's channel is full: the source **stalls** (polls only now
//!   and then, to serve callbacks) and librdkafka keeps its prefetch, bounded
//!   by `queued.max.messages.kbytes`;
//! - tables are congested: their topics' partitions are paused so the other
//!   tables go on, unless they are all the source holds (then it stalls);
//! - the byte budget is reached, or the source drains: everything is paused.
//!
//! A pause waits until its wish has held for a grace period (a moment's
//! congestion passes without it); resumes are at once. librdkafka's pause
//! flag outlives an assignment (a partition paused, revoked and assigned
//! again is still paused), and a resume of a partition that is not paused
//! restarts its fetch from a stale position, so the plan remembers every
//! partition it paused, assigned or not, and resumes exactly those.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::time::{Duration, Instant};

use crate::offsets::TopicPartition;

/// What should be paused.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Want {
    /// Everything (the byte budget is reached, or the source is draining).
    pub all: bool,
    /// The topics of congested tables.
    pub topics: BTreeSet<String>,
}

impl Want {
    pub fn covers(&self, topic: &str) -> bool {
        self.all || self.topics.contains(topic)
    }
}

/// The wish for the pipeline's state, and whether the source stalls: a full
/// channel stalls it; congested tables' topics are wished paused unless they
/// are all it holds of `assigned` (then it stalls); `all` pauses everything.
pub fn wish(
    all: bool,
    channel_full: bool,
    congested: &BTreeSet<String>,
    assigned: &[TopicPartition],
) -> (Want, bool) {
    let only_congested =
        !assigned.is_empty() && assigned.iter().all(|tp| congested.contains(&tp.0));
    let topics = if only_congested {
        BTreeSet::new()
    } else {
        congested.clone()
    };
    (Want { all, topics }, channel_full || only_congested)
}

/// Partitions to pause and to resume, to honour a [`Want`].
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Plan {
    pub pause: Vec<TopicPartition>,
    pub resume: Vec<TopicPartition>,
}

impl Plan {
    pub fn is_empty(&self) -> bool {
        self.pause.is_empty() && self.resume.is_empty()
    }
}

#[derive(Debug, Default)]
pub struct Pausing {
    want: Want,
    /// How long a wish holds before its partitions are paused.
    grace: Duration,
    /// Since when everything, and each congested topic, has been wished paused.
    all_since: Option<Instant>,
    topics_since: HashMap<String, Instant>,
    /// When a part of the wish not yet due becomes due (plan again then).
    recheck: Option<Instant>,
    /// Partitions paused by us and not resumed since, assigned or not.
    paused: HashSet<TopicPartition>,
}

impl Pausing {
    /// Pauses wait `grace` (zero: at once).
    pub fn new(grace: Duration) -> Self {
        Self {
            grace,
            ..Self::default()
        }
    }

    /// From now on pauses are at once (the source is draining).
    pub fn no_grace(&mut self) {
        self.grace = Duration::ZERO;
        // A wish held within its grace is due now: plan again.
        self.recheck = Some(Instant::now());
    }

    /// Sets what should be paused; the plan for the `assigned` partitions at
    /// `now`. Nothing to do when nothing changed.
    pub fn set(&mut self, want: Want, assigned: &[TopicPartition], now: Instant) -> Plan {
        self.all_since = want.all.then(|| self.all_since.unwrap_or(now));
        self.topics_since.retain(|t, _| want.topics.contains(t));
        for t in &want.topics {
            self.topics_since.entry(t.clone()).or_insert(now);
        }
        self.want = want;
        self.plan(assigned, now)
    }

    /// Whether this is already the wish and no part of it falls due by `now`
    /// (`set` would change nothing).
    pub fn wants(&self, all: bool, topics: &BTreeSet<String>, now: Instant) -> bool {
        self.want.all == all && &self.want.topics == topics && self.recheck.is_none_or(|t| now < t)
    }

    /// Everything is wished paused (the byte budget is reached) and the
    /// pause is not yet due: the source polls nothing meanwhile, so nothing
    /// more is read past the budget.
    pub fn quiet(&self, now: Instant) -> bool {
        self.want.all && !self.due(&self.all_since, now)
    }

    fn due(&self, since: &Option<Instant>, now: Instant) -> bool {
        since.is_some_and(|t| now >= t + self.grace)
    }

    /// Whether `topic`'s partitions are to be paused at `now`.
    fn pause_due(&self, topic: &str, now: Instant) -> bool {
        self.due(&self.all_since, now) || self.due(&self.topics_since.get(topic).copied(), now)
    }

    /// The plan for these partitions under the current wish at `now` (say,
    /// freshly assigned ones). The plan is taken as done.
    pub fn plan(&mut self, parts: &[TopicPartition], now: Instant) -> Plan {
        let mut plan = Plan::default();
        for tp in parts {
            let is = self.paused.contains(tp);
            if !is && self.pause_due(&tp.0, now) {
                self.paused.insert(tp.clone());
                plan.pause.push(tp.clone());
            } else if is && !self.want.covers(&tp.0) {
                self.paused.remove(tp);
                plan.resume.push(tp.clone());
            }
        }
        let pending = self
            .all_since
            .iter()
            .chain(self.topics_since.values())
            .map(|t| *t + self.grace)
            .filter(|t| *t > now);
        self.recheck = pending.min();
        plan
    }

    #[cfg(test)]
    fn is_paused(&self, tp: &TopicPartition) -> bool {
        self.paused.contains(tp)
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    fn tp(t: &str, p: i32) -> TopicPartition {
        (t.to_string(), p)
    }

    fn topics(t: &[&str]) -> Want {
        Want {
            all: false,
            topics: t.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn all() -> Want {
        Want {
            all: true,
            topics: BTreeSet::new(),
        }
    }

    #[test]
    fn only_the_congested_topics_are_paused_and_only_they_resumed() {
        let now = Instant::now();
        let mut p = Pausing::default();
        let assigned = [tp("a", 0), tp("a", 1), tp("b", 0)];
        let plan = p.set(topics(&["a"]), &assigned, now);
        assert_eq!(plan.pause, vec![tp("a", 0), tp("a", 1)]);
        assert!(plan.resume.is_empty());
        assert!(
            p.set(topics(&["a"]), &assigned, now).is_empty(),
            "no repeat"
        );
        let plan = p.set(all(), &assigned, now);
        assert_eq!(plan.pause, vec![tp("b", 0)], "a is paused already");
        let plan = p.set(Want::default(), &assigned, now);
        assert_eq!(plan.resume, assigned.to_vec());
        assert!(
            p.set(Want::default(), &assigned, now).is_empty(),
            "never resume what is not paused"
        );
    }

    #[test]
    fn a_partition_paused_before_a_revocation_is_resumed_when_assigned_again() {
        let now = Instant::now();
        let mut p = Pausing::default();
        p.set(topics(&["a"]), &[tp("a", 0)], now);
        // Revoked while paused; the table clears while it is away.
        let plan = p.set(Want::default(), &[], now);
        assert!(plan.is_empty());
        assert!(p.is_paused(&tp("a", 0)), "librdkafka still has it paused");
        // Assigned again: resumed, or it would never be fetched.
        let plan = p.plan(&[tp("a", 0), tp("b", 0)], now);
        assert_eq!(plan.resume, vec![tp("a", 0)]);
        assert!(plan.pause.is_empty());
    }

    #[test]
    fn a_partition_assigned_while_its_table_is_congested_starts_paused() {
        let now = Instant::now();
        let mut p = Pausing::default();
        p.set(topics(&["a"]), &[], now);
        let plan = p.plan(&[tp("a", 3), tp("b", 3)], now);
        assert_eq!(plan.pause, vec![tp("a", 3)]);
        assert!(p.wants(false, &topics(&["a"]).topics, now));
        assert!(!p.wants(false, &BTreeSet::new(), now));
    }

    #[test]
    fn a_pause_waits_for_its_wish_to_hold_through_the_grace() {
        let t0 = Instant::now();
        let grace = Duration::from_secs(1);
        let mut p = Pausing::new(grace);
        let assigned = [tp("a", 0), tp("b", 0)];
        // Over the budget for a moment: nothing paused, nothing polled.
        assert!(p.set(all(), &assigned, t0).is_empty());
        assert!(p.quiet(t0 + grace / 2));
        assert!(
            !p.wants(true, &BTreeSet::new(), t0 + grace),
            "due: plan again"
        );
        // Under it again before the grace: the clock starts over.
        assert!(p.set(Want::default(), &assigned, t0 + grace / 2).is_empty());
        assert!(!p.quiet(t0 + grace / 2));
        let t1 = t0 + grace;
        assert!(p.set(all(), &assigned, t1).is_empty());
        assert!(p.set(all(), &assigned, t1 + grace / 2).is_empty());
        // Over it through the grace: everything paused, polled again.
        let plan = p.set(all(), &assigned, t1 + grace);
        assert_eq!(plan.pause, assigned.to_vec());
        assert!(!p.quiet(t1 + grace));
        assert!(p.wants(true, &BTreeSet::new(), t1 + 2 * grace), "settled");
        // Resumes are at once.
        let plan = p.set(Want::default(), &assigned, t1 + grace);
        assert_eq!(plan.resume, assigned.to_vec());
    }

    #[test]
    fn a_full_channel_stalls_the_source_and_pauses_nothing() {
        let none = BTreeSet::new();
        let (want, stall) = wish(false, true, &none, &[tp("a", 0)]);
        assert!(stall);
        assert_eq!(want, Want::default());
        let (want, stall) = wish(true, false, &none, &[tp("a", 0)]);
        assert!(want.all && !stall, "over the byte budget: pause");
    }

    #[test]
    fn congested_topics_are_paused_only_while_others_flow() {
        let a = topics(&["a"]).topics;
        let (want, stall) = wish(false, false, &a, &[tp("a", 0), tp("b", 0)]);
        assert_eq!(want, topics(&["a"]));
        assert!(!stall, "b goes on");
        // Only a's partitions held: a pause would only drop the prefetch.
        let (want, stall) = wish(false, false, &a, &[tp("a", 0), tp("a", 1)]);
        assert_eq!(want, Want::default());
        assert!(stall);
        let (_, stall) = wish(false, false, &a, &[]);
        assert!(!stall, "nothing held: poll for an assignment");
    }

    #[test]
    fn a_congested_topic_is_paused_after_the_grace_and_only_it() {
        let t0 = Instant::now();
        let grace = Duration::from_millis(500);
        let mut p = Pausing::new(grace);
        let assigned = [tp("a", 0), tp("b", 0)];
        assert!(p.set(topics(&["a"]), &assigned, t0).is_empty());
        // b joins later: its own clock.
        let t1 = t0 + grace / 2;
        assert!(p.set(topics(&["a", "b"]), &assigned, t1).is_empty());
        let plan = p.set(topics(&["a", "b"]), &assigned, t0 + grace);
        assert_eq!(plan.pause, vec![tp("a", 0)]);
        let plan = p.set(topics(&["a", "b"]), &assigned, t1 + grace);
        assert_eq!(plan.pause, vec![tp("b", 0)]);
        // Draining: no grace.
        let mut p = Pausing::new(grace);
        p.no_grace();
        assert_eq!(p.set(all(), &assigned, t0).pause, assigned.to_vec());
        // Draining while a pause waits for its grace: due at once.
        let mut p = Pausing::new(grace);
        let now = Instant::now();
        assert!(p.set(all(), &assigned, now).is_empty());
        p.no_grace();
        assert!(
            !p.wants(true, &BTreeSet::new(), Instant::now()),
            "plan again"
        );
        assert_eq!(
            p.set(all(), &assigned, Instant::now()).pause,
            assigned.to_vec()
        );
    }
}
