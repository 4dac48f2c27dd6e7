//! A table's partitions, as the proxy models them (`--partitions N`). Pure:
//! time is passed in.
//!
//! - Each item goes to a partition by a hash of its partition key.
//! - Each partition admits at most `max_wcu` WCU/s ("each individual
//!   partition is limited to 1,000 write units per second", AWS developer
//!   guide, warm throughput scenarios), from a bucket of its own with no burst
//!   credit ("burst capacity can't alleviate partition-level throttling",
//!   AWS re:Post).
//! - The table's capacity is not divided among them: adaptive capacity lets a
//!   hot partition use what the others leave, instantly, up to its own
//!   maximum (AWS developer guide, burst and adaptive capacity). So an item is
//!   admitted when the table's bucket and its partition's both have room.
//!
//! Simplified: the partition count is fixed (DynamoDB splits partitions as a
//! table grows or a key stays hot), and adaptive capacity acts at once (older
//! AWS documents spoke of minutes).

use std::time::Duration;

use crate::bucket::Bucket;

/// DynamoDB's write limit per partition, WCU/s.
pub const PARTITION_MAX_WCU: f64 = 1_000.0;

#[derive(Debug, Clone)]
pub struct Partitions {
    buckets: Vec<Bucket>,
}

impl Partitions {
    /// `count` partitions (at least one) of `max_wcu` each, whose buckets
    /// hold `depth_s` seconds of it.
    pub fn new(count: usize, max_wcu: f64, depth_s: f64, now: Duration) -> Self {
        let bucket = Bucket::new(max_wcu, depth_s, 0.0, now);
        Self {
            buckets: vec![bucket; count.max(1)],
        }
    }

    pub fn count(&self) -> usize {
        self.buckets.len()
    }

    /// The partition of a partition-key value (its wire JSON text): FNV-1a,
    /// so a key always lands in the same partition.
    pub fn of(&self, key: &str) -> usize {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in key.bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        (h % self.buckets.len() as u64) as usize
    }

    /// Takes `cost` from partition `p` if it has room.
    pub fn try_take(&mut self, p: usize, cost: f64, now: Duration) -> bool {
        self.buckets[p].try_take(cost, now)
    }

    /// Gives back what an item refused elsewhere took.
    pub fn refund(&mut self, p: usize, cost: f64) {
        self.buckets[p].refund(cost);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_always_lands_in_the_same_partition_and_keys_spread() {
        let p = Partitions::new(4, 100.0, 1.0, Duration::ZERO);
        assert_eq!(p.of("{\"S\":\"a\"}"), p.of("{\"S\":\"a\"}"));
        let mut seen = [0; 4];
        for i in 0..400 {
            seen[p.of(&format!("{{\"S\":\"k{i}\"}}"))] += 1;
        }
        assert!(seen.iter().all(|&n| n > 60), "{seen:?}");
    }

    #[test]
    fn a_hot_partition_is_capped_while_the_others_have_room() {
        let t0 = Duration::ZERO;
        let mut p = Partitions::new(2, 10.0, 1.0, t0);
        let hot = 0;
        let admitted = (0..20).filter(|_| p.try_take(hot, 1.0, t0)).count();
        assert_eq!(admitted, 10, "one second of the partition's maximum");
        assert!(p.try_take(1, 1.0, t0), "the other partition has room");
        p.refund(hot, 1.0);
        assert!(p.try_take(hot, 1.0, t0), "a refund gives room back");
        assert!(p.try_take(hot, 1.0, Duration::from_millis(100)), "refills");
    }
}
