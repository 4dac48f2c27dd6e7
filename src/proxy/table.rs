//! One table's state in the proxy: its bucket, its counters and timeline,
//! and the capacity it offered.

use std::time::Duration;

use serde_json::Value;

use super::on_demand::{OnDemand, Refusal};
use super::partitions::Partitions;
use super::wire::{partition_key, Admit};
use crate::bucket::Bucket;

/// Per-table counters, as served on `/_proxy/stats`.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct TableStats {
    pub requests: u64,
    pub throttled_requests: u64,
    pub partial_requests: u64,
    pub accepted_items: u64,
    pub accepted_wcu: f64,
    /// Items returned in UnprocessedItems of 200 answers.
    pub unprocessed_items: u64,
    /// Items of requests answered 400 (throttled whole).
    pub throttled_items: u64,
    /// Items refused by their partition's maximum while the table had room
    /// (`--partitions`), whether answered 400 or unprocessed.
    pub key_range_refused_items: u64,
    /// Items refused by a global secondary index's capacity while the
    /// table had room, whether answered 400 or unprocessed.
    pub index_refused_items: u64,
    /// Capacity in force (the bucket's, or what an on-demand table admits
    /// now; filled in when served).
    pub wcu: Option<f64>,
    pub offered_wcu: f64,
    pub first_write_s: Option<f64>,
    pub last_accept_s: Option<f64>,
    /// Per second since the first write: [second, accepted WCU, throttled
    /// BatchWriteItem requests (400 or partial), capacity in force,
    /// BatchWriteItem requests].
    pub timeline: Vec<[f64; 5]>,
    /// With `--partitions`: per second since the first write, the units
    /// each partition admitted (a request upstream then failed included).
    pub partition_timeline: Vec<Vec<f64>>,
}

#[derive(Debug)]
pub(super) struct TableState {
    pub(super) bucket: Option<Bucket>,
    pub(super) stats: TableStats,
    pub(super) first_write: Option<Duration>,
    pub(super) last_accept: Option<Duration>,
    /// Rate changes: (time, WCU/s), for the offered capacity.
    pub(super) rates: Vec<(Duration, f64)>,
    pub(super) initial_tokens: f64,
    pub(super) next_step: usize,
    /// The partition model, with `--partitions`.
    pub(super) partitions: Option<Partitions>,
    /// The partition key's name, to place items in partitions.
    pub(super) hash_key: Option<String>,
    /// The on-demand model, for a table without provisioned capacity.
    pub(super) on_demand: Option<OnDemand>,
    /// Its global secondary indexes with a provisioned capacity, each a
    /// bucket of its own that every written item carrying its key also
    /// takes from.
    pub(super) indexes: Vec<IndexState>,
}

/// A global secondary index in the proxy: its name, key attributes and
/// bucket.
#[derive(Debug)]
pub(super) struct IndexState {
    pub(super) name: String,
    pub(super) keys: Vec<String>,
    pub(super) bucket: Bucket,
}

impl IndexState {
    /// Whether a write request reaches this index: a put of an item that
    /// carries every attribute of its key (a delete's old item is not
    /// known here, and is not counted).
    fn reached_by(&self, req: &Value) -> bool {
        req.pointer("/PutRequest/Item")
            .and_then(Value::as_object)
            .is_some_and(|item| self.keys.iter().all(|k| item.contains_key(k)))
    }
}

impl TableState {
    /// A table's state before its first write: limited by its `bucket`
    /// (provisioned) or its `on_demand` model, and its `partitions`.
    pub(super) fn new(
        bucket: Option<Bucket>,
        on_demand: Option<OnDemand>,
        partitions: Option<Partitions>,
        hash_key: Option<String>,
        now: Duration,
    ) -> Self {
        let limit = bucket
            .as_ref()
            .map(Bucket::rate)
            .or(on_demand.as_ref().map(OnDemand::limit));
        Self {
            bucket,
            stats: TableStats::default(),
            first_write: None,
            last_accept: None,
            rates: limit.map(|w| vec![(now, w)]).unwrap_or_default(),
            initial_tokens: 0.0,
            next_step: 0,
            partitions,
            hash_key,
            on_demand,
            indexes: Vec::new(),
        }
    }

    /// With these indexes, each limited by its own bucket.
    pub(super) fn with_indexes(mut self, indexes: Vec<IndexState>) -> Self {
        self.indexes = indexes;
        self
    }

    /// Takes a write request's `cost` from the table's bucket, then from
    /// each of its indexes' that the item reaches, then from its
    /// partition's (giving back what was taken if a later one refuses).
    pub(super) fn admit(&mut self, req: &Value, cost: f64, now: Duration) -> Admit {
        if !self.bucket.as_mut().is_none_or(|b| b.try_take(cost, now)) {
            return Admit::Table;
        }
        if let Some(od) = self.on_demand.as_mut() {
            match od.try_take(cost, now) {
                Ok(()) => {}
                Err(Refusal::Max) => return Admit::Max,
                Err(Refusal::Peak) => return Admit::KeyRange,
            }
        }
        // Every index the item reaches takes its cost too (DynamoDB writes
        // the index as part of the table's write, and refuses the write
        // when the index has no room).
        let reached: Vec<usize> = (0..self.indexes.len())
            .filter(|i| self.indexes[*i].reached_by(req))
            .collect();
        for (n, &i) in reached.iter().enumerate() {
            if !self.indexes[i].bucket.try_take(cost, now) {
                for &j in &reached[..n] {
                    self.indexes[j].bucket.refund(cost);
                }
                self.refund_table(cost);
                self.stats.index_refused_items += 1;
                return Admit::Index(self.indexes[i].name.clone());
            }
        }
        let Some(parts) = self.partitions.as_mut() else {
            return Admit::Yes;
        };
        let p = parts.of(&partition_key(req, self.hash_key.as_deref()));
        if parts.try_take(p, cost, now) {
            let count = parts.count();
            let i = self.second_of(now);
            let t = &mut self.stats.partition_timeline;
            if t.len() <= i {
                t.resize(i + 1, vec![0.0; count]);
            }
            t[i][p] += cost;
            return Admit::Yes;
        }
        self.refund_table(cost);
        self.refund_indexes(req, cost);
        self.stats.key_range_refused_items += 1;
        Admit::KeyRange
    }

    /// Gives `cost` back to every index `req` reached.
    fn refund_indexes(&mut self, req: &Value, cost: f64) {
        for ix in self.indexes.iter_mut().filter(|ix| ix.reached_by(req)) {
            ix.bucket.refund(cost);
        }
    }

    /// Gives back what an admitted request took (upstream failed it): to
    /// the table's bucket and to its partition's.
    pub(super) fn refund(&mut self, req: &Value, cost: f64) {
        self.refund_table(cost);
        self.refund_indexes(req, cost);
        if let Some(parts) = self.partitions.as_mut() {
            let p = parts.of(&partition_key(req, self.hash_key.as_deref()));
            parts.refund(p, cost);
        }
    }

    /// Gives `cost` back to the table-wide limits (bucket, on-demand).
    fn refund_table(&mut self, cost: f64) {
        if let Some(b) = self.bucket.as_mut() {
            b.refund(cost);
        }
        if let Some(od) = self.on_demand.as_mut() {
            od.refund(cost);
        }
    }

    /// What the admin capacity call sets: an on-demand table's maximum (says
    /// true), else the provisioned capacity.
    pub(super) fn set_limit(&mut self, wcu: f64, now: Duration) -> bool {
        if self.on_demand.is_some() {
            self.set_max(Some(wcu), now);
            true
        } else {
            self.set_capacity(wcu, now);
            false
        }
    }

    /// A provisioned capacity: the bucket's rate (a new bucket if there was
    /// none).
    fn set_capacity(&mut self, wcu: f64, now: Duration) {
        match self.bucket.as_mut() {
            Some(b) => b.set_rate(wcu, now),
            None => self.bucket = Some(Bucket::new(wcu, 1.0, 0.0, now)),
        }
        self.rates.push((now, wcu));
    }

    /// An on-demand table's maximum (None: none).
    fn set_max(&mut self, max: Option<f64>, now: Duration) {
        if let Some(od) = self.on_demand.as_mut() {
            od.set_max(max, now);
            let limit = od.limit();
            self.rates.push((now, limit));
        }
    }

    /// Applies the `schedule`'s steps due by `now` (seconds after the first
    /// write, WCU); says each one's WCU and whether it set an on-demand
    /// maximum.
    pub(super) fn due_steps(&mut self, schedule: &[(f64, f64)], now: Duration) -> Vec<(f64, bool)> {
        let Some(first) = self.first_write else {
            return Vec::new();
        };
        let mut done = Vec::new();
        while let Some(&(at, wcu)) = schedule.get(self.next_step) {
            if now < first + Duration::from_secs_f64(at) {
                break;
            }
            self.next_step += 1;
            let on_demand = self.set_limit(wcu, now);
            done.push((wcu, on_demand));
        }
        done
    }

    /// What DescribeTable says after an UpdateTable went through: a
    /// provisioned capacity replaces any on-demand model with a bucket (a
    /// switch of billing mode), an on-demand table's maximum moves.
    pub(super) fn follow(&mut self, capacity: Option<f64>, max_write: Option<f64>, now: Duration) {
        match capacity {
            Some(wcu) => {
                self.on_demand = None;
                self.set_capacity(wcu, now);
            }
            None => self.set_max(max_write, now),
        }
    }

    /// Whole seconds from the first write to `now` (a timeline's index).
    fn second_of(&self, now: Duration) -> usize {
        let start = self.first_write.unwrap_or(now);
        now.saturating_sub(start).as_secs() as usize
    }

    /// The timeline slot for `now` (seconds since the first write).
    pub(super) fn second(&mut self, now: Duration) -> &mut [f64; 5] {
        let i = self.second_of(now);
        let wcu = self.capacity().unwrap_or(0.0);
        while self.stats.timeline.len() <= i {
            let sec = self.stats.timeline.len() as f64;
            self.stats.timeline.push([sec, 0.0, 0.0, wcu, 0.0]);
        }
        let slot = &mut self.stats.timeline[i];
        slot[3] = wcu;
        slot
    }

    /// The capacity in force: the bucket's, or what an on-demand table
    /// admits now.
    pub(super) fn capacity(&self) -> Option<f64> {
        self.bucket
            .as_ref()
            .map(Bucket::rate)
            .or_else(|| self.on_demand.as_ref().map(OnDemand::limit))
    }

    pub(super) fn offered(&self) -> f64 {
        let (Some(start), Some(end)) = (self.first_write, self.last_accept) else {
            return 0.0;
        };
        let mut total = self.initial_tokens;
        for (i, &(t, rate)) in self.rates.iter().enumerate() {
            let next = self.rates.get(i + 1).map_or(end, |&(n, _)| n);
            let (a, b) = (t.max(start), next.min(end));
            if b > a {
                total += rate * (b - a).as_secs_f64();
            }
        }
        total
    }
}

pub(super) fn count_for(withheld: &serde_json::Map<String, Value>, table: &str) -> u64 {
    withheld
        .get(table)
        .and_then(Value::as_array)
        .map_or(0, |a| a.len() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// An on-demand table with a maximum, first written at 0.
    fn on_demand(max: f64) -> TableState {
        let t0 = Duration::ZERO;
        let od = OnDemand::new(4_000.0, Some(max), 1_800.0, t0);
        let mut st = TableState::new(None, Some(od), None, Some("id".into()), t0);
        st.first_write = Some(t0);
        st
    }

    #[test]
    fn a_scheduled_step_of_an_on_demand_table_moves_its_maximum() {
        let s = Duration::from_secs_f64;
        let req = json!({"PutRequest": {"Item": {"id": {"S": "a"}}}});
        for (from, to) in [(100.0, 300.0), (300.0, 100.0)] {
            let mut st = on_demand(from);
            assert_eq!(st.due_steps(&[(1.0, to)], s(1.5)), vec![(to, true)]);
            assert!(
                st.bucket.is_none(),
                "no provisioned bucket beside the model"
            );
            assert_eq!(st.on_demand.as_ref().unwrap().max(), Some(to));
            assert_eq!(st.capacity(), Some(to));
            // One second at the new maximum fits, and no more.
            let fit = (0..400)
                .take_while(|_| st.admit(&req, 1.0, s(3.0)) == Admit::Yes)
                .count();
            assert_eq!(fit as f64, to, "{from} -> {to}");
        }
    }

    #[test]
    fn an_on_demand_tables_offered_capacity_follows_its_maximum() {
        let s = Duration::from_secs_f64;
        let mut st = on_demand(100.0);
        st.due_steps(&[(1.0, 300.0)], s(1.0));
        st.last_accept = Some(s(3.0));
        // 100 for a second, then 300 for two (before, nothing was offered).
        assert!((st.offered() - 700.0).abs() < 1e-9, "{}", st.offered());
    }

    #[test]
    fn an_update_table_through_the_proxy_is_followed_by_billing_mode() {
        let s = Duration::from_secs_f64;
        let mut st = on_demand(100.0);
        st.follow(None, Some(250.0), s(1.0));
        assert_eq!(st.capacity(), Some(250.0), "on-demand maximum raised");
        assert!(st.bucket.is_none());
        st.follow(Some(40.0), None, s(2.0));
        assert!(st.on_demand.is_none(), "switched to provisioned");
        assert_eq!(st.capacity(), Some(40.0));
    }

    #[test]
    fn a_refund_gives_room_back_to_the_partition_too() {
        let t0 = Duration::ZERO;
        let mut st = TableState::new(
            Some(Bucket::new(100.0, 1.0, 0.0, t0)),
            None,
            Some(Partitions::new(1, 2.0, 1.0, t0)),
            Some("id".into()),
            t0,
        );
        let req = json!({"PutRequest": {"Item": {"id": {"S": "a"}}}});
        assert_eq!(st.admit(&req, 1.0, t0), Admit::Yes);
        assert_eq!(st.admit(&req, 1.0, t0), Admit::Yes);
        assert_eq!(st.admit(&req, 1.0, t0), Admit::KeyRange, "partition full");
        // Upstream failed one of them: its partition has room again.
        st.refund(&req, 1.0);
        assert_eq!(st.admit(&req, 1.0, t0), Admit::Yes);
    }

    #[test]
    fn an_index_with_less_room_than_the_table_refuses_the_items_that_reach_it() {
        let t0 = Duration::ZERO;
        let index = IndexState {
            name: "by_g".into(),
            keys: vec!["g".into()],
            bucket: Bucket::new(3.0, 1.0, 0.0, t0),
        };
        let mut st = TableState::new(
            Some(Bucket::new(100.0, 1.0, 0.0, t0)),
            None,
            None,
            Some("id".into()),
            t0,
        )
        .with_indexes(vec![index]);
        let with_key = json!({"PutRequest": {"Item": {"id": {"S": "a"}, "g": {"S": "x"}}}});
        let without = json!({"PutRequest": {"Item": {"id": {"S": "b"}}}});
        for _ in 0..3 {
            assert_eq!(st.admit(&with_key, 1.0, t0), Admit::Yes);
        }
        assert_eq!(
            st.admit(&with_key, 1.0, t0),
            Admit::Index("by_g".into()),
            "the index is full"
        );
        assert_eq!(st.stats.index_refused_items, 1);
        // The table's unit went back: 97 left, and items without the
        // index's key take them.
        let fit = (0..200)
            .take_while(|_| st.admit(&without, 1.0, t0) == Admit::Yes)
            .count();
        assert_eq!(fit, 97);
        // Upstream failed one that reached the index: the index has room
        // again (and the table).
        st.refund(&with_key, 1.0);
        assert_eq!(st.admit(&with_key, 1.0, t0), Admit::Yes);
    }

    #[test]
    fn each_partitions_admitted_units_are_counted_per_second() {
        let s = Duration::from_secs_f64;
        let mut st = TableState::new(
            Some(Bucket::new(100.0, 1.0, 0.0, s(0.0))),
            None,
            Some(Partitions::new(2, 3.0, 1.0, s(0.0))),
            Some("id".into()),
            s(0.0),
        );
        st.first_write = Some(s(0.0));
        let req = json!({"PutRequest": {"Item": {"id": {"S": "a"}}}});
        let p = st.partitions.as_ref().unwrap().of("{\"S\":\"a\"}");
        for _ in 0..5 {
            st.admit(&req, 1.0, s(0.5)); // 3 fit: the partition's second
        }
        st.admit(&req, 2.0, s(2.2));
        let t = &st.stats.partition_timeline;
        assert_eq!(t.len(), 3);
        assert_eq!(t[0][p], 3.0);
        assert_eq!(t[0][1 - p], 0.0);
        assert_eq!(t[1], vec![0.0, 0.0], "nothing admitted then");
        assert_eq!(t[2][p], 2.0);
    }
}
