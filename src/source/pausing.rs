//! Which partitions the source holds paused, as one pure decision: all of
//! them while the pipeline's channel or byte budget is full, or those of the
//! congested tables' topics. librdkafka's pause flag outlives an assignment
//! (a partition paused, revoked and assigned again is still paused), and a
//! resume of a partition that is not paused restarts its fetch from a stale
//! position, so the plan remembers every partition it paused, assigned or
//! not, and resumes exactly those.

use std::collections::{BTreeSet, HashSet};

use crate::offsets::TopicPartition;

/// What should be paused.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Want {
    /// Everything (the pipeline is full, or the source is draining).
    pub all: bool,
    /// The topics of congested tables.
    pub topics: BTreeSet<String>,
}

impl Want {
    pub fn covers(&self, topic: &str) -> bool {
        self.all || self.topics.contains(topic)
    }
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
    /// Partitions paused by us and not resumed since, assigned or not.
    paused: HashSet<TopicPartition>,
}

impl Pausing {
    /// Sets what should be paused; the plan for the `assigned` partitions.
    /// Nothing to do when nothing changed.
    pub fn set(&mut self, want: Want, assigned: &[TopicPartition]) -> Plan {
        self.want = want;
        self.plan(assigned)
    }

    /// Whether this is already the wish (`set` would change nothing).
    pub fn wants(&self, all: bool, topics: &BTreeSet<String>) -> bool {
        self.want.all == all && &self.want.topics == topics
    }

    /// The plan for these partitions under the current wish (say, freshly
    /// assigned ones). The plan is taken as done.
    pub fn plan(&mut self, parts: &[TopicPartition]) -> Plan {
        let mut plan = Plan::default();
        for tp in parts {
            let want = self.want.covers(&tp.0);
            let is = self.paused.contains(tp);
            if want && !is {
                self.paused.insert(tp.clone());
                plan.pause.push(tp.clone());
            } else if !want && is {
                self.paused.remove(tp);
                plan.resume.push(tp.clone());
            }
        }
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

    #[test]
    fn only_the_congested_topics_are_paused_and_only_they_resumed() {
        let mut p = Pausing::default();
        let assigned = [tp("a", 0), tp("a", 1), tp("b", 0)];
        let plan = p.set(topics(&["a"]), &assigned);
        assert_eq!(plan.pause, vec![tp("a", 0), tp("a", 1)]);
        assert!(plan.resume.is_empty());
        assert!(p.set(topics(&["a"]), &assigned).is_empty(), "no repeat");
        let plan = p.set(
            Want {
                all: true,
                topics: BTreeSet::new(),
            },
            &assigned,
        );
        assert_eq!(plan.pause, vec![tp("b", 0)], "a is paused already");
        let plan = p.set(Want::default(), &assigned);
        assert_eq!(plan.resume, assigned.to_vec());
        assert!(
            p.set(Want::default(), &assigned).is_empty(),
            "never resume what is not paused"
        );
    }

    #[test]
    fn a_partition_paused_before_a_revocation_is_resumed_when_assigned_again() {
        let mut p = Pausing::default();
        p.set(topics(&["a"]), &[tp("a", 0)]);
        // Revoked while paused; the table clears while it is away.
        let plan = p.set(Want::default(), &[]);
        assert!(plan.is_empty());
        assert!(p.is_paused(&tp("a", 0)), "librdkafka still has it paused");
        // Assigned again: resumed, or it would never be fetched.
        let plan = p.plan(&[tp("a", 0), tp("b", 0)]);
        assert_eq!(plan.resume, vec![tp("a", 0)]);
        assert!(plan.pause.is_empty());
    }

    #[test]
    fn a_partition_assigned_while_its_table_is_congested_starts_paused() {
        let mut p = Pausing::default();
        p.set(topics(&["a"]), &[]);
        let plan = p.plan(&[tp("a", 3), tp("b", 3)]);
        assert_eq!(plan.pause, vec![tp("a", 3)]);
        assert!(p.wants(false, &topics(&["a"]).topics));
        assert!(!p.wants(false, &BTreeSet::new()));
    }
}
