//! A table's records waiting for a batch: one queue per Kafka partition,
//! taken in proportion to each queue's length.
//!
//! A batch job ends when its last partition does. Taken in the order they
//! arrived, a worker's partitions go at about one pace each (librdkafka
//! fetches them in turn), so the partition with the most records ends last,
//! alone, and its table waits on it. That partition is often also the one
//! whose keys are hot (a key's records share a Kafka partition), and a hot
//! key range then gets only that partition's part of the table's pace while
//! the others use the rest: measured on the hot-range bench with one worker,
//! the busiest DynamoDB partition took 15-39 of its 50 WCU/s for the first 20
//! s. Across workers the throttle control already does the same by backlog
//! (a worker's share of the table); this does it within a worker.
//!
//! Stride scheduling: each queue has a pass; the queue with the lowest pass
//! gives the next record and its pass grows by one over its length. So a
//! queue twice as long is taken twice as often, every queue drains in about
//! the same time. A queue that was empty comes back at the pass of the last
//! pick (what it was owed or owed is forgotten when it empties): its record
//! goes next, so a partition with a record now and then is never held behind
//! long queues, and gets no more than it brings. Records of one partition
//! keep their order.
//!
//! Pure: no time, no I/O.

use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::sync::Arc;

/// Records an empty queue keeps room for.
const KEPT: usize = 64;

/// A Kafka partition: topic and partition number.
type Part = (Arc<str>, i32);

/// A pass, ordered by `f64::total_cmp`.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Pass(f64);

impl Eq for Pass {}

impl PartialOrd for Pass {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Pass {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.total_cmp(&other.0)
    }
}

/// Waiting records per partition; see the module's header.
#[derive(Debug)]
pub struct Queues<T> {
    /// Each partition's queue's place in `queues` (at most the routed
    /// topics' partitions: an emptied queue keeps its place, so a partition
    /// that drains and refills costs no allocation).
    ids: HashMap<Part, usize>,
    queues: Vec<VecDeque<T>>,
    /// The partition of the last record pushed, and its place: records come
    /// in runs of one partition, and a run is found by comparing the topic's
    /// name, not hashing it (each record has its own `Arc` of it).
    last: Option<(Part, usize)>,
    /// One entry per non-empty queue (the only record of its pass): its
    /// pass, then the order it became due in (ties go to the earlier), then
    /// its place.
    due: BinaryHeap<Reverse<(Pass, u64, usize)>>,
    /// The pass of the last pick.
    now: f64,
    len: usize,
    seq: u64,
}

impl<T> Default for Queues<T> {
    fn default() -> Self {
        Self {
            ids: HashMap::new(),
            queues: Vec::new(),
            last: None,
            due: BinaryHeap::new(),
            now: 0.0,
            len: 0,
            seq: 0,
        }
    }
}

impl<T> Queues<T> {
    /// Records waiting, in all.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn place(&mut self, topic: &Arc<str>, partition: i32) -> usize {
        if let Some((p, id)) = &self.last {
            if p.1 == partition && p.0 == *topic {
                return *id;
            }
        }
        let part = (topic.clone(), partition);
        let id = match self.ids.get(&part) {
            Some(&id) => id,
            None => {
                self.queues.push(VecDeque::new());
                let id = self.queues.len() - 1;
                self.ids.insert(part.clone(), id);
                id
            }
        };
        self.last = Some((part, id));
        id
    }

    /// Queues a record of a partition behind its earlier ones.
    pub fn push(&mut self, topic: &Arc<str>, partition: i32, item: T) {
        let id = self.place(topic, partition);
        let q = &mut self.queues[id];
        if q.is_empty() {
            // Back (or new): at the pass of the last pick.
            self.seq += 1;
            self.due.push(Reverse((Pass(self.now), self.seq, id)));
        }
        q.push_back(item);
        self.len += 1;
    }

    /// The record [`Queues::pop`] would give next.
    pub fn peek(&self) -> Option<&T> {
        let Reverse((_, _, id)) = self.due.peek()?;
        self.queues[*id].front()
    }

    /// The next record: the head of the queue with the lowest pass.
    pub fn pop(&mut self) -> Option<T> {
        let Reverse((Pass(pass), _, id)) = self.due.pop()?;
        let q = &mut self.queues[id];
        let weight = q.len() as f64;
        let item = q.pop_front().expect("a due queue is not empty");
        self.now = pass;
        self.len -= 1;
        if !q.is_empty() {
            self.seq += 1;
            self.due
                .push(Reverse((Pass(pass + 1.0 / weight), self.seq, id)));
        } else if q.capacity() > KEPT {
            // Empty, a queue keeps room for KEPT records only, not for the
            // most its partition ever had waiting.
            q.shrink_to(KEPT);
        }
        Some(item)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pushes to partition `p` of topic "t" (a new `Arc` each time, as the
    /// source makes one per record).
    fn push<T>(q: &mut Queues<T>, p: i32, item: T) {
        q.push(&Arc::from("t"), p, item);
    }

    #[test]
    fn a_queue_twice_as_long_is_taken_twice_as_often_and_all_end_together() {
        let mut q = Queues::default();
        for i in 0..2_000 {
            push(&mut q, 0, (0, i));
        }
        for p in 1..=2 {
            for i in 0..1_000 {
                push(&mut q, p, (p, i));
            }
        }
        let mut taken = [0usize; 3];
        let mut last = [0usize; 3];
        let mut order = Vec::new();
        for n in 0..4_000 {
            let (p, i) = q.pop().unwrap();
            assert_eq!(
                i, taken[p as usize],
                "a partition's records keep their order"
            );
            taken[p as usize] += 1;
            last[p as usize] = n;
            if n < 400 {
                order.push(p);
            }
        }
        assert!(q.pop().is_none() && q.is_empty());
        let first_tenth = |p| order.iter().filter(|&&x| x == p).count();
        assert!(
            (190..=210).contains(&first_tenth(0)),
            "the long queue takes half: {}",
            first_tenth(0)
        );
        // In arrival order the long partition would end 2,000 records after
        // the others; here all end within the last few picks.
        assert!(last.iter().all(|&l| l >= 3_990), "{last:?}");
    }

    #[test]
    fn a_partition_that_was_empty_is_not_held_behind_long_queues() {
        let mut q = Queues::default();
        for i in 0..1_000 {
            push(&mut q, 0, i);
        }
        for _ in 0..100 {
            q.pop();
        }
        push(&mut q, 1, 9_999);
        assert_eq!(q.pop(), Some(9_999), "comes back at the last pick's pass");
        push(&mut q, 1, 10_000);
        push(&mut q, 1, 10_001);
        assert_eq!(q.pop(), Some(10_000));
        // Two queued: it owes a pick of half its length now, the long queue
        // (899 left) goes on meanwhile.
        let at = (0..900).position(|_| q.pop() == Some(10_001)).unwrap();
        assert!(at > 100, "a queue of two is taken as two among 900: {at}");
    }

    #[test]
    fn peek_shows_what_pop_gives() {
        let mut q = Queues::default();
        assert!(q.peek().is_none());
        for i in 0..10 {
            push(&mut q, i % 3, i);
        }
        while let Some(&next) = q.peek() {
            assert_eq!(q.pop(), Some(next));
        }
        assert_eq!(q.len(), 0);
    }
}
