//! The simulated server: a token bucket (Heroku's API), DynamoDB's
//! provisioned capacity (the throttle proxy's own [`Bucket`], so the
//! simulator and `ingest throttle-proxy` enforce capacity with the same code)
//! or an on-demand table (the proxy's [`OnDemand`]), with a capacity
//! schedule, optionally split into partitions (the proxy's [`Partitions`]:
//! an item is admitted when the table's bucket and its partition's both
//! have room). Pure: time is passed in.

use std::time::Duration;

use crate::bucket::Bucket;
use crate::proxy::on_demand::{OnDemand, Refusal};
use crate::proxy::partitions::Partitions;

use super::scenario::{Model, Server as ServerCfg, Step};

/// What the server did with one request.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    /// Per item: written or not (each item fits or not, in order).
    pub accepted: Vec<bool>,
    /// Per item: refused by its partition (the table had room): what
    /// DynamoDB names `...KeyRangeThroughputExceeded`.
    pub key_range: Vec<bool>,
    pub accepted_units: f64,
    /// The bucket level after the request, as a fraction of its size, when
    /// the server reports one (token-bucket: floor(tokens) / capacity).
    pub remaining: Option<f64>,
}

/// Heroku's bucket: at most `size` tokens, refilled at `refill` per second.
#[derive(Debug, Clone)]
struct Tokens {
    size: f64,
    refill: f64,
    tokens: f64,
    last: Duration,
}

impl Tokens {
    /// Tokens now, after the refill since the last look.
    fn at(&mut self, now: Duration) -> f64 {
        let dt = now.saturating_sub(self.last).as_secs_f64();
        self.last = self.last.max(now);
        self.tokens = (self.tokens + self.refill * dt).min(self.size);
        self.tokens
    }
}

#[derive(Debug, Clone)]
enum Kind {
    Tokens(Tokens),
    Dynamo(Bucket),
    OnDemand(OnDemand),
}

#[derive(Debug, Clone)]
pub struct Server {
    kind: Kind,
    report_remaining: bool,
    /// Pending steps, by time.
    schedule: Vec<Step>,
    /// Units offered so far (initial units plus refill).
    offered: f64,
    offered_until: Duration,
    accepted: f64,
    /// What another writer takes from the refill, units/s (dynamodb).
    foreign: f64,
    /// The partitions, with the units each admitted and its maximum.
    partitions: Option<(Partitions, Vec<f64>, f64)>,
}

impl Answer {
    pub fn accepted_items(&self) -> usize {
        self.accepted.iter().filter(|a| **a).count()
    }
}

impl Server {
    pub fn new(cfg: &ServerCfg, report_remaining: bool) -> Self {
        let mut schedule = cfg.schedule.clone();
        schedule.sort_by(|a, b| a.at_s.total_cmp(&b.at_s));
        let (kind, initial) = match cfg.model {
            Model::TokenBucket => {
                let size = cfg.bucket_units();
                let tokens = cfg.initial.unwrap_or(0.0).min(size);
                let kind = Kind::Tokens(Tokens {
                    size,
                    refill: cfg.refill_per_s,
                    tokens,
                    last: Duration::ZERO,
                });
                (kind, tokens)
            }
            Model::Dynamodb => {
                // The other writer's steady share never reaches the bucket.
                let rate = cfg.refill_per_s - cfg.foreign_per_s;
                let size = cfg.bucket_units();
                let mut b = Bucket::new(rate, size / rate, cfg.burst_credit_s, Duration::ZERO);
                let full = b.available(Duration::ZERO);
                let initial = cfg.initial.unwrap_or(full).min(full);
                if initial < full {
                    b.try_take(full - initial, Duration::ZERO);
                }
                (Kind::Dynamo(b), initial)
            }
            Model::OnDemand => {
                let mut od = OnDemand::new(
                    cfg.on_demand_start,
                    // 0: no maximum (the table admits what it is warm for).
                    Some(cfg.refill_per_s).filter(|r| *r > 0.0),
                    cfg.on_demand_scale_s,
                    Duration::ZERO,
                );
                let initial = od.available(Duration::ZERO);
                (Kind::OnDemand(od), initial)
            }
        };
        Self {
            kind,
            report_remaining,
            schedule,
            offered: initial,
            offered_until: Duration::ZERO,
            accepted: 0.0,
            foreign: cfg.foreign_per_s,
            partitions: cfg.partitions.map(|n| {
                // The other writer's keys spread over every partition: its
                // steady part of each never reaches the partition's bucket
                // either, which keeps its depth in seconds (as the table's).
                let max = cfg.partition_max_per_s - cfg.foreign_per_s / n as f64;
                let p = Partitions::new(n, max, cfg.partition_depth_s(), Duration::ZERO);
                (p, vec![0.0; n], max)
            }),
        }
    }

    /// The partition of a partition key (0 without partitions).
    pub fn partition_of(&self, key: &str) -> usize {
        self.partitions.as_ref().map_or(0, |(p, ..)| p.of(key))
    }

    /// What the busiest partition admitted up to `now`, over its maximum
    /// (less the other writer's part of it) x the time (None without
    /// partitions).
    pub fn busiest_partition_use(&self, now: Duration) -> Option<f64> {
        let (_, admitted, max) = self.partitions.as_ref()?;
        let most = admitted.iter().copied().fold(0.0, f64::max);
        Some(most / (max * now.as_secs_f64()).max(f64::MIN_POSITIVE))
    }

    /// The clear probe's server: `units` in the bucket, no refill.
    pub fn preloaded(units: f64) -> Self {
        Self {
            kind: Kind::Tokens(Tokens {
                size: units,
                refill: 0.0,
                tokens: units,
                last: Duration::ZERO,
            }),
            report_remaining: true,
            schedule: Vec::new(),
            offered: units,
            offered_until: Duration::ZERO,
            accepted: 0.0,
            foreign: 0.0,
            partitions: None,
        }
    }

    /// The refill rate in force (the provisioned capacity, as DescribeTable
    /// reports it), units per second.
    pub fn refill(&self) -> f64 {
        match &self.kind {
            Kind::Tokens(t) => t.refill,
            Kind::Dynamo(b) => b.rate() + self.foreign,
            // DescribeTable's MaxWriteRequestUnits.
            Kind::OnDemand(od) => od.max().unwrap_or_else(|| od.limit()),
        }
    }

    /// What DescribeTable tells a client: (the capacity, the warm
    /// throughput). An on-demand table without a maximum has no capacity,
    /// only what it is warm for (twice its previous peak); the others report
    /// [`Self::refill`].
    pub fn described(&self) -> (Option<f64>, Option<f64>) {
        match &self.kind {
            Kind::OnDemand(od) if od.max().is_none() => (None, Some(od.warm())),
            _ => (Some(self.refill()).filter(|r| *r > 0.0), None),
        }
    }

    /// What the server admits per second now (the offered capacity).
    fn admits(&self) -> f64 {
        match &self.kind {
            Kind::OnDemand(od) => od.limit(),
            _ => self.refill() - self.foreign,
        }
    }

    /// Brings the schedule and the offered-capacity account up to `now`.
    pub fn advance(&mut self, now: Duration) {
        while let Some(step) = self.schedule.first().cloned() {
            let at = Duration::from_secs_f64(step.at_s);
            if at > now {
                break;
            }
            self.account(at);
            self.schedule.remove(0);
            match &mut self.kind {
                Kind::Tokens(t) => {
                    t.at(at);
                    if let Some(r) = step.refill_per_s {
                        t.refill = r;
                    }
                    if let Some(c) = step.capacity {
                        t.size = c;
                        t.tokens = t.tokens.min(c);
                    }
                }
                Kind::Dynamo(b) => {
                    let r = step
                        .refill_per_s
                        .or(step.capacity)
                        .unwrap_or(b.rate() + self.foreign);
                    if let Some(f) = step.foreign_per_s {
                        self.foreign = f;
                    }
                    b.set_rate((r - self.foreign).max(0.0), at);
                }
                Kind::OnDemand(od) => {
                    if let Some(r) = step.refill_per_s.or(step.capacity) {
                        od.set_max(Some(r), at);
                    }
                }
            }
        }
        self.account(now);
    }

    fn account(&mut self, now: Duration) {
        if now > self.offered_until {
            let free = self.admits();
            self.offered += free * (now - self.offered_until).as_secs_f64();
            self.offered_until = now;
        }
    }

    /// One request of items costing `costs` arriving at `now`; with
    /// partitions, item `i` goes to partition `parts[i]`.
    pub fn request(&mut self, costs: &[f64], parts: &[usize], now: Duration) -> Answer {
        self.advance(now);
        if let Some((p, admitted, _)) = self.partitions.as_mut() {
            let mut key_range = vec![false; costs.len()];
            let mut units = 0.0;
            let mut accepted = vec![false; costs.len()];
            for (i, &c) in costs.iter().enumerate() {
                let part = parts.get(i).copied().unwrap_or(0).min(admitted.len() - 1);
                // As the proxy admits (`src/proxy/table.rs`): the table's
                // bucket first; an on-demand table not yet scaled to the
                // demand refuses as a key range does.
                let table = match &mut self.kind {
                    Kind::Dynamo(b) => b.try_take(c, now),
                    Kind::OnDemand(od) => match od.try_take(c, now) {
                        Ok(()) => true,
                        Err(Refusal::Peak) => {
                            key_range[i] = true;
                            false
                        }
                        Err(Refusal::Max) => false,
                    },
                    Kind::Tokens(_) => false, // not allowed by the scenario's checks
                };
                if !table {
                    continue;
                }
                if p.try_take(part, c, now) {
                    accepted[i] = true;
                    admitted[part] += c;
                    units += c;
                } else {
                    // The table gives back what its partition refused.
                    match &mut self.kind {
                        Kind::Dynamo(b) => b.refund(c),
                        Kind::OnDemand(od) => od.refund(c),
                        Kind::Tokens(_) => {}
                    }
                    key_range[i] = true;
                }
            }
            self.accepted += units;
            return Answer {
                accepted,
                key_range,
                accepted_units: units,
                remaining: self.report_remaining.then(|| self.level(now)),
            };
        }
        let (accepted, accepted_units) = match &mut self.kind {
            Kind::Tokens(t) => {
                // All or nothing (an HTTP request): 200 or 429.
                let total: f64 = costs.iter().sum();
                if t.at(now) + 1e-9 >= total {
                    t.tokens -= total;
                    (vec![true; costs.len()], total)
                } else {
                    (vec![false; costs.len()], 0.0)
                }
            }
            Kind::Dynamo(b) => each_that_fits(costs, |c| b.try_take(c, now)),
            Kind::OnDemand(od) => each_that_fits(costs, |c| od.try_take(c, now).is_ok()),
        };
        self.accepted += accepted_units;
        Answer {
            key_range: vec![false; accepted.len()],
            accepted,
            accepted_units,
            remaining: self.report_remaining.then(|| self.level(now)),
        }
    }

    /// Units left now (bucket plus any credit).
    pub fn available(&mut self, now: Duration) -> f64 {
        self.advance(now);
        match &mut self.kind {
            Kind::Tokens(t) => t.at(now),
            Kind::Dynamo(b) => b.available(now),
            Kind::OnDemand(od) => od.available(now),
        }
    }

    /// The reported level: whole units left over the bucket size.
    fn level(&mut self, now: Duration) -> f64 {
        let size = match &self.kind {
            Kind::Tokens(t) => t.size,
            Kind::Dynamo(b) => b.rate(),
            Kind::OnDemand(od) => od.limit(),
        };
        (self.available(now).floor() / size).clamp(0.0, 1.0)
    }

    /// (accepted units, offered units) up to `now`.
    pub fn totals(&mut self, now: Duration) -> (f64, f64) {
        self.advance(now);
        (self.accepted, self.offered)
    }
}

/// Item by item, as the proxy splits a BatchWriteItem: which items `take`
/// admitted, and their units.
fn each_that_fits(costs: &[f64], mut take: impl FnMut(f64) -> bool) -> (Vec<bool>, f64) {
    let mask: Vec<bool> = costs.iter().map(|&c| take(c)).collect();
    let units = costs
        .iter()
        .zip(&mask)
        .filter(|(_, ok)| **ok)
        .map(|(c, _)| c)
        .sum();
    (mask, units)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(x: f64) -> Duration {
        Duration::from_secs_f64(x)
    }

    fn cfg(model: Model, capacity: Option<f64>, refill: f64) -> ServerCfg {
        ServerCfg {
            model,
            capacity,
            refill_per_s: refill,
            initial: None,
            burst_credit_s: 0.0,
            report_remaining: None,
            schedule: Vec::new(),
            foreign_per_s: 0.0,
            on_demand_start: 4_000.0,
            on_demand_scale_s: 1_800.0,
            partitions: None,
            partition_max_per_s: 1_000.0,
            partition_burst_s: None,
        }
    }

    #[test]
    fn an_on_demand_table_admits_its_maximum_and_follows_a_step_of_it() {
        let mut c = cfg(Model::OnDemand, None, 100.0);
        c.schedule = vec![Step {
            at_s: 10.0,
            refill_per_s: Some(300.0),
            capacity: None,
            foreign_per_s: None,
        }];
        let mut sv = Server::new(&c, false);
        assert_eq!(sv.refill(), 100.0, "DescribeTable's maximum");
        let mut written = 0;
        for t in 1..=9 {
            written = sv
                .request(&[1.0; 25 * 20], &[], s(t as f64))
                .accepted_items();
        }
        assert_eq!(written, 100);
        written = sv.request(&[1.0; 25 * 20], &[], s(11.0)).accepted_items();
        assert!(written >= 300, "one second at the new maximum: {written}");
        assert_eq!(sv.refill(), 300.0);
        let (_, off) = sv.totals(s(20.0));
        assert!((off - (100.0 + 1000.0 + 3000.0)).abs() < 1e-6, "{off}");
    }

    #[test]
    fn a_new_on_demand_table_admits_twice_its_previous_peak_once_it_counts() {
        let mut c = cfg(Model::OnDemand, None, 1_000.0);
        c.on_demand_start = 100.0;
        c.on_demand_scale_s = 5.0;
        let mut sv = Server::new(&c, false);
        assert_eq!(sv.request(&[1.0; 500], &[], s(1.0)).accepted_items(), 100);
        // The second with 100 counts as the peak 5 s after it ended: the
        // table then admits 200 a second.
        sv.request(&[1.0; 500], &[], s(8.5));
        assert_eq!(sv.request(&[1.0; 500], &[], s(9.5)).accepted_items(), 200);
    }

    #[test]
    fn a_neighbour_takes_its_share_of_the_refill_first() {
        let mut c = cfg(Model::Dynamodb, None, 200.0);
        c.foreign_per_s = 60.0;
        let mut sv = Server::new(&c, false);
        assert_eq!(sv.refill(), 200.0, "DescribeTable shows the whole capacity");
        // Asking for 200 units every second: 140 fit, once the bucket
        // (scaled to 140 units) has been drained.
        let mut written = 0;
        for t in 1..=10 {
            written = sv.request(&[1.0; 200], &[], s(t as f64)).accepted_items();
        }
        assert_eq!(written, 140);
    }

    #[test]
    fn herokus_bucket_starts_empty_and_answers_all_or_nothing() {
        let mut sv = Server::new(&cfg(Model::TokenBucket, Some(4500.0), 1.25), true);
        assert_eq!(sv.request(&[1.0], &[], s(0.0)).accepted_items(), 0);
        let a = sv.request(&[1.0], &[], s(0.8));
        assert_eq!(a.accepted_items(), 1);
        assert_eq!(a.remaining, Some(0.0));
        let a = sv.request(&[1.0], &[], s(8.0));
        assert_eq!(a.remaining, Some(8.0 / 4500.0), "floor(9 - 1) / 4500");
        assert_eq!(sv.request(&[5.0, 5.0], &[], s(8.0)).accepted_items(), 0);
        let (acc, off) = sv.totals(s(10.0));
        assert_eq!(acc, 2.0);
        assert!((off - 12.5).abs() < 1e-9);
    }

    #[test]
    fn dynamodb_writes_the_items_that_fit() {
        let mut sv = Server::new(&cfg(Model::Dynamodb, None, 10.0), false);
        let a = sv.request(&[4.0, 4.0, 4.0, 1.0], &[], s(0.0));
        assert_eq!((a.accepted_items(), a.accepted_units), (3, 9.0));
        assert_eq!(a.remaining, None);
    }

    #[test]
    fn the_schedule_changes_the_refill_and_the_offered_account() {
        let mut c = cfg(Model::Dynamodb, None, 100.0);
        c.schedule = vec![Step {
            at_s: 10.0,
            refill_per_s: Some(50.0),
            capacity: None,
            foreign_per_s: None,
        }];
        let mut sv = Server::new(&c, false);
        assert_eq!(sv.refill(), 100.0);
        let (_, off) = sv.totals(s(20.0));
        assert_eq!(sv.refill(), 50.0);
        assert!((off - (100.0 + 1000.0 + 500.0)).abs() < 1e-6, "{off}");
    }

    #[test]
    fn a_step_of_the_other_writer_changes_what_is_free_and_the_offered_account() {
        let mut c = cfg(Model::Dynamodb, None, 200.0);
        c.foreign_per_s = 150.0;
        c.schedule = vec![Step {
            at_s: 10.0,
            refill_per_s: None,
            capacity: None,
            foreign_per_s: Some(0.0),
        }];
        let mut sv = Server::new(&c, false);
        // A full bucket of the 50 free, 10 s of them, 10 s of all 200.
        let (_, off) = sv.totals(s(20.0));
        assert_eq!(
            sv.refill(),
            200.0,
            "DescribeTable's capacity is the table's"
        );
        assert!((off - (50.0 + 500.0 + 2000.0)).abs() < 1e-6, "{off}");
        // The bucket refills at the whole capacity now, and holds 1 s of it.
        assert_eq!(sv.request(&[1.0; 300], &[], s(30.0)).accepted_items(), 200);
    }

    #[test]
    fn a_partition_refuses_past_its_maximum_while_the_table_has_room() {
        let mut c = cfg(Model::Dynamodb, None, 150.0);
        c.partitions = Some(4);
        c.partition_max_per_s = 50.0;
        let mut sv = Server::new(&c, false);
        let hot = sv.partition_of("hot");
        let cold = (0..4).find(|p| *p != hot).expect("another partition");
        // 60 units to the hot partition: its bucket holds 1 s of 50.
        let a = sv.request(&[1.0; 60], &[hot; 60], s(0.0));
        assert_eq!(a.accepted_items(), 50);
        assert!(
            a.key_range[50..].iter().all(|k| *k),
            "refused by the partition"
        );
        assert!(!a.key_range[..50].iter().any(|k| *k));
        // The table gave those back: another partition still has room.
        let b = sv.request(&[1.0; 40], &[cold; 40], s(0.0));
        assert_eq!(b.accepted_items(), 40);
        let used = sv.busiest_partition_use(s(1.0)).expect("partitions");
        assert!((used - 1.0).abs() < 1e-9, "50 of 50 in one second: {used}");
        // Without partitions, no item is a key range's.
        let mut plain = Server::new(&cfg(Model::Dynamodb, None, 150.0), false);
        let a = plain.request(&[1.0; 200], &[], s(0.0));
        assert_eq!(
            (a.accepted_items(), a.key_range.iter().any(|k| *k)),
            (150, false)
        );
        assert_eq!(plain.busiest_partition_use(s(1.0)), None);
    }

    #[test]
    fn a_neighbour_takes_its_part_of_each_partition_too() {
        // 40 units/s spread over 4 partitions of 50: 10 of each.
        let mut c = cfg(Model::Dynamodb, None, 150.0);
        c.partitions = Some(4);
        c.partition_max_per_s = 50.0;
        c.foreign_per_s = 40.0;
        let mut sv = Server::new(&c, false);
        let hot = sv.partition_of("hot");
        // Asking the hot partition for 60 units every second: 40 fit, once
        // its bucket (1 s of 40) has been drained.
        let mut written = 0;
        for t in 1..=10 {
            written = sv
                .request(&[1.0; 60], &[hot; 60], s(t as f64))
                .accepted_items();
        }
        assert_eq!(written, 40);
        let used = sv.busiest_partition_use(s(10.0)).expect("partitions");
        assert!(
            (used - 1.0).abs() < 1e-9,
            "400 of what the neighbour leaves, 40 x 10 s: {used}"
        );
    }

    #[test]
    fn an_on_demand_table_not_yet_scaled_refuses_as_a_key_range_does() {
        // No maximum; a new table admits 100 units/s at first (its previous
        // peak, 50, twice over): past that, the proxy answers with the key
        // range's reason, and so does the simulator.
        let mut c = cfg(Model::OnDemand, None, 0.0);
        c.on_demand_start = 100.0;
        c.partitions = Some(4);
        assert_eq!(
            c.partition_depth_s(),
            1.0,
            "an on-demand table's bucket: 1 s"
        );
        let mut sv = Server::new(&c, false);
        let parts: Vec<usize> = (0..300).map(|i| i % 4).collect();
        let a = sv.request(&[1.0; 300], &parts, s(0.0));
        let refused: Vec<usize> = (0..300).filter(|i| !a.accepted[*i]).collect();
        assert!(
            a.accepted_items() <= 100 && !refused.is_empty(),
            "{}",
            a.accepted_items()
        );
        assert!(
            refused.iter().all(|i| a.key_range[*i]),
            "every refusal the peak's, read as a key range's"
        );
    }
}
