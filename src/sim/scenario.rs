//! The scenario file of `ingest sim`: the server, the clients, the optional
//! time-to-clear probe, and the strategies to run side by side. Parsed from
//! TOML and validated; every error names the field and the rule.
//! `config/scenarios/README.md` documents every field with an example.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::config::MAX_IN_FLIGHT_BATCHES;
use crate::throttle::StrategyConfig;

use super::SimError;

/// A whole scenario.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// Simulated seconds.
    pub duration_s: f64,
    #[serde(default)]
    pub seed: u64,
    pub server: Server,
    pub clients: Clients,
    #[serde(default)]
    pub clear: Option<Clear>,
    /// The strategies, each `name` plus its parameters inline, and an optional
    /// `label` to tell two settings of one strategy apart.
    #[serde(rename = "strategy")]
    pub strategies: Vec<toml::Table>,
}

/// Which server model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Model {
    /// A token bucket (Heroku's "GCRA"): `capacity` tokens at most, refilled
    /// at `refill_per_s`; a request takes its whole cost or gets a 429.
    TokenBucket,
    /// DynamoDB provisioned capacity (the throttle proxy's bucket): refilled at
    /// `refill_per_s` WCU/s up to `capacity` units, plus burst credit from
    /// unused capacity; a batch writes the items that fit.
    Dynamodb,
    /// A DynamoDB on-demand table (the throttle proxy's model,
    /// `src/proxy/on_demand.rs`): a 1 s bucket at the lower of twice the
    /// previous peak and `refill_per_s`, the table's MaxWriteRequestUnits
    /// (what DescribeTable reports, and what the clients are told); schedule
    /// steps move the maximum. `refill_per_s = 0`: no maximum; the clients
    /// are told only the warm throughput (twice the previous peak).
    OnDemand,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Server {
    pub model: Model,
    /// Bucket size in units. Default: `refill_per_s` x 1 s (dynamodb); required
    /// for token-bucket.
    #[serde(default)]
    pub capacity: Option<f64>,
    /// Units per second.
    pub refill_per_s: f64,
    /// Units in the bucket at the start. Default: empty (token-bucket, as
    /// Heroku's simulation starts), full (dynamodb).
    #[serde(default)]
    pub initial: Option<f64>,
    /// dynamodb: unused capacity kept as burst credit, seconds (DynamoDB: 300).
    #[serde(default)]
    pub burst_credit_s: f64,
    /// Whether answers carry the bucket level (Heroku's RateLimit-Remaining).
    /// Default: true for token-bucket, false for dynamodb (DynamoDB has none).
    #[serde(default)]
    pub report_remaining: Option<bool>,
    #[serde(default)]
    pub schedule: Vec<Step>,
    /// dynamodb: units per second another writer (the live application)
    /// takes from the table, steadily and first. The clients are told the
    /// whole capacity; utilization is measured against what is left. With
    /// `partitions`, its keys spread evenly: it takes its part of each
    /// partition too.
    #[serde(default)]
    pub foreign_per_s: f64,
    /// on-demand: what the table admits at first, units/s (its previous peak
    /// is half of it; DynamoDB: 4,000).
    #[serde(default = "on_demand_start")]
    pub on_demand_start: f64,
    /// on-demand: seconds before a new peak counts (DynamoDB: 1,800).
    #[serde(default = "on_demand_scale_s")]
    pub on_demand_scale_s: f64,
    /// dynamodb, on-demand: the table's partitions, as `ingest
    /// throttle-proxy --partitions` models them (`src/proxy/partitions.rs`):
    /// an item goes to a partition by a hash of its key (`clients.keys`),
    /// and is admitted when the table's bucket and its partition's both
    /// have room (None: the table's bucket alone).
    #[serde(default)]
    pub partitions: Option<usize>,
    /// Each partition's most units per second (DynamoDB: 1,000).
    #[serde(default = "partition_max")]
    pub partition_max_per_s: f64,
    /// Each partition's bucket, seconds of its maximum. Default: the
    /// table's bucket's (capacity / refill_per_s), as the proxy's
    /// `--burst-s` sets both.
    #[serde(default)]
    pub partition_burst_s: Option<f64>,
}

impl Server {
    /// The units the table's bucket holds: `capacity` (default one second
    /// of the refill); on a DynamoDB table less the other writer's part of
    /// it, whose steady share never reaches the bucket.
    pub fn bucket_units(&self) -> f64 {
        let size = self.capacity.unwrap_or(self.refill_per_s);
        match self.model {
            Model::Dynamodb => size * (self.refill_per_s - self.foreign_per_s) / self.refill_per_s,
            _ => size,
        }
    }

    /// (from when, s; the refill; the other writer's units/s) in force from
    /// the start and after each step, in time order.
    fn states(&self) -> Vec<(f64, f64, f64)> {
        let mut steps = self.schedule.clone();
        steps.sort_by(|a, b| a.at_s.total_cmp(&b.at_s));
        let mut now = (self.refill_per_s, self.foreign_per_s);
        let mut out = vec![(0.0, now.0, now.1)];
        for st in steps {
            now.0 = st.refill_per_s.or(st.capacity).unwrap_or(now.0);
            now.1 = st.foreign_per_s.unwrap_or(now.1);
            out.push((st.at_s, now.0, now.1));
        }
        out
    }

    /// Each partition's bucket, seconds of its maximum: `partition_burst_s`,
    /// or the table's bucket's (1 s on an on-demand table).
    pub fn partition_depth_s(&self) -> f64 {
        self.partition_burst_s.unwrap_or(match self.model {
            Model::OnDemand => 1.0,
            _ => self.capacity.unwrap_or(self.refill_per_s) / self.refill_per_s,
        })
    }
}

/// Items' partition keys: with probability `hot_share` the one hot key,
/// otherwise one of `count` keys drawn from a Zipf law of exponent `zipf_s`
/// (the bench's hot range: 1,000 keys, s = 1.1, a hot key with 30%).
/// With `routed`, each key's records go to one client of its job, as
/// Kafka's partitioner sends a key to one partition and so to one worker
/// (the bench produces its records keyed by their partition key): a
/// client draws from the keys it owns, in their proportions. Without it,
/// every client draws from every key (records keyed by something else).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Keys {
    pub count: usize,
    #[serde(default = "zipf_s")]
    pub zipf_s: f64,
    #[serde(default)]
    pub hot_share: f64,
    #[serde(default)]
    pub routed: bool,
}

/// A change at `at_s`: of the capacity (auto scaling), or of what the other
/// writer takes (the live application's traffic rising or falling).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Step {
    pub at_s: f64,
    #[serde(default)]
    pub refill_per_s: Option<f64>,
    #[serde(default)]
    pub capacity: Option<f64>,
    /// dynamodb: the other writer's new units/s (see `Server::foreign_per_s`).
    #[serde(default)]
    pub foreign_per_s: Option<f64>,
}

/// A number, or a distribution drawn per use.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum Dist {
    Fixed(f64),
    /// One of these, uniformly.
    Choice(Vec<f64>),
    /// Uniform in [min, max].
    Uniform {
        min: f64,
        max: f64,
    },
}

impl Dist {
    fn check(&self, field: &str, min: f64) -> Result<(), SimError> {
        let ok = match self {
            Dist::Fixed(v) => *v >= min,
            Dist::Choice(v) => !v.is_empty() && v.iter().all(|x| *x >= min),
            Dist::Uniform { min: a, max: b } => *a >= min && b >= a,
        };
        if ok {
            Ok(())
        } else {
            Err(SimError::Invalid(format!(
                "{field} = {self:?}: every value must be >= {min} (and max >= min)"
            )))
        }
    }

    /// The mean value.
    pub fn mean(&self) -> f64 {
        match self {
            Dist::Fixed(v) => *v,
            Dist::Choice(v) => v.iter().sum::<f64>() / v.len() as f64,
            Dist::Uniform { min, max } => (min + max) / 2.0,
        }
    }

    /// The largest value drawn.
    pub fn max(&self) -> f64 {
        match self {
            Dist::Fixed(v) => *v,
            Dist::Choice(v) => v.iter().copied().fold(f64::MIN, f64::max),
            Dist::Uniform { max, .. } => *max,
        }
    }
}

/// What the clients do.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Workload {
    /// "busy": always another request.
    Named(String),
    /// Busy for `busy_s`, idle for `idle_s`, repeatedly.
    Cycle { busy_s: f64, idle_s: f64 },
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Clients {
    pub count: usize,
    /// Cost of one item, in units (WCU): fixed, `[choices]`, or `{ min, max }`
    /// (drawn per item and rounded up to a whole unit).
    #[serde(default = "one")]
    pub cost: Dist,
    /// Items per request (a BatchWriteItem holds up to 25).
    #[serde(default = "one_usize")]
    pub items: usize,
    #[serde(default = "busy")]
    pub workload: Workload,
    /// Client i starts at a uniform random time in [0, stagger_s).
    #[serde(default)]
    pub stagger_s: f64,
    /// Round trip of one request, milliseconds (the server sees it half way).
    #[serde(default = "latency")]
    pub latency_ms: Dist,
    /// Strategies are told the server's refill rate (the worker reads it with
    /// DescribeTable; Heroku's clients know 4500/hour).
    #[serde(default = "yes")]
    pub know_capacity: bool,
    /// Strategies are told their share, 1/count (the worker's share of the
    /// consumer group's partitions). Heroku's clients do not know it.
    #[serde(default)]
    pub know_share: bool,
    /// Fixed pacing, units/s per client, for strategies that do not pace
    /// themselves (the worker's `throttle.pacing_rate`).
    #[serde(default)]
    pub pacing_rate: Option<f64>,
    /// Units the pacer releases at once (the worker's `throttle.pacing_burst`).
    #[serde(default = "burst")]
    pub pacing_burst: u32,
    /// Jobs the clients form (client i is in job i % groups): each job's
    /// clients split the capacity among themselves, unaware of the other
    /// jobs (two consumer groups on one table). With `know_share`, a client
    /// is told 1 / its job's clients.
    #[serde(default = "one_usize")]
    pub groups: usize,
    /// Each client's wall clock is off by up to this much (a uniform draw
    /// per client), milliseconds: time slots follow each one's own clock.
    #[serde(default)]
    pub clock_skew_ms: f64,
    /// Batches each client writes at once (the worker's
    /// `dynamodb.max_in_flight_batches`), sharing its strategy and pacer.
    #[serde(default = "one_usize")]
    pub in_flight: usize,
    /// Each item's partition key (None: items have none; needed with
    /// `server.partitions`).
    #[serde(default)]
    pub keys: Option<Keys>,
    /// Keys a key range refuses are paced apart, as the worker's
    /// `throttle.hot_keys` (default on; only with `keys`).
    #[serde(default = "yes")]
    pub hot_keys: bool,
    /// How late a client hears a peer's lesson (its job's clients share
    /// them, as the worker's `throttle.lessons_topic`; see
    /// `crate::lessons`), milliseconds. Negative: no lessons are shared.
    #[serde(default = "lessons_ms")]
    pub lessons_ms: f64,
    /// Jobs hear each other's beats `lessons_ms` after a job's first client
    /// starts (a client hears at once the jobs started before it), and the
    /// busy jobs split the table, as the worker's `throttle.split_with_jobs`
    /// (default on; only with `know_share` and lessons shared). Every job
    /// of a scenario is busy throughout.
    #[serde(default = "yes")]
    pub split_jobs: bool,
}

/// The time-to-clear probe (seed 004): a separate run where the server holds
/// `requests` units and never refills, every client starts with a stored sleep
/// of `start_sleep_s`, and stops when the remaining units fall to
/// `stop_at_remaining`. The time until all stop.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Clear {
    pub start_sleep_s: f64,
    pub requests: f64,
    #[serde(default = "ten")]
    pub stop_at_remaining: f64,
}

/// `x > 0` (false for NaN).
fn positive(x: f64) -> bool {
    x > 0.0
}

/// `x >= 0` (false for NaN).
fn non_negative(x: f64) -> bool {
    x >= 0.0
}

fn one() -> Dist {
    Dist::Fixed(1.0)
}
fn on_demand_start() -> f64 {
    crate::proxy::on_demand::NEW_TABLE_WRU
}
fn on_demand_scale_s() -> f64 {
    crate::proxy::on_demand::SCALE_S
}
fn partition_max() -> f64 {
    crate::proxy::partitions::PARTITION_MAX_WCU
}
fn zipf_s() -> f64 {
    1.1
}
fn one_usize() -> usize {
    1
}
fn busy() -> Workload {
    Workload::Named("busy".into())
}
fn latency() -> Dist {
    Dist::Fixed(50.0)
}
fn yes() -> bool {
    true
}
fn burst() -> u32 {
    25
}
/// A lesson's way through a Kafka topic to a peer: 20-40 ms measured
/// through the local broker (README, "Lessons shared within a job"), with
/// room for a busier one.
fn lessons_ms() -> f64 {
    50.0
}
fn ten() -> f64 {
    10.0
}

/// A strategy entry: its label and its configuration.
#[derive(Debug, Clone)]
pub struct Entry {
    pub label: String,
    pub config: StrategyConfig,
    /// Hot keys paced apart (`clients.hot_keys`, or the entry's own
    /// `hot_keys`; only with `clients.keys`).
    pub hot_keys: bool,
}

impl Scenario {
    /// Parses and validates a scenario.
    pub fn parse(text: &str) -> Result<Scenario, SimError> {
        let s: Scenario = toml::from_str(text).map_err(|e| SimError::Parse(e.to_string()))?;
        s.validate()?;
        Ok(s)
    }

    fn validate(&self) -> Result<(), SimError> {
        let bad = |m: String| Err(SimError::Invalid(m));
        if !(self.duration_s > 0.0 && self.duration_s <= 30.0 * 86_400.0) {
            return bad(format!(
                "duration_s = {}: must be in (0, 30 days]",
                self.duration_s
            ));
        }
        self.validate_server()?;
        self.validate_clients()?;
        // An item the server can never admit whole would hold its client
        // for the whole run: a shape no strategy can write, not a score.
        let largest = self.clients.cost.max().ceil();
        if let Some(at_once) = self.admits_at_once().filter(|a| largest > a + 1e-9) {
            return bad(format!(
                "clients.cost = {:?}: an item of {largest} units can never be written, the server admits at most {at_once:.2} at once (its bucket{}, no burst credit)",
                self.clients.cost,
                if self.server.foreign_per_s > 0.0 {
                    " less the other writer's part of it"
                } else {
                    ""
                }
            ));
        }
        if let Some(cl) = &self.clear {
            if !(cl.start_sleep_s > 0.0 && cl.requests > 0.0 && cl.stop_at_remaining >= 0.0) {
                return bad(
                    "clear: start_sleep_s and requests must be > 0, stop_at_remaining >= 0".into(),
                );
            }
        }
        if self.strategies.is_empty() {
            return bad("strategy: list at least one [[strategy]]".into());
        }
        self.entries()?;
        Ok(())
    }

    /// The most the server admits in one request at the start, where no
    /// burst credit can add to it, or after a step of the other writer's
    /// (None: not bounded so here).
    fn admits_at_once(&self) -> Option<f64> {
        let sv = &self.server;
        match sv.model {
            Model::TokenBucket => Some(sv.bucket_units()),
            Model::Dynamodb if sv.burst_credit_s == 0.0 && sv.refill_per_s > 0.0 => {
                // The bucket keeps its depth in seconds through the steps.
                let depth_s = sv.capacity.unwrap_or(sv.refill_per_s) / sv.refill_per_s;
                let least = sv
                    .states()
                    .into_iter()
                    .map(|(_, refill, foreign)| (refill - foreign) * depth_s)
                    .fold(f64::INFINITY, f64::min);
                Some(least)
            }
            _ => None,
        }
    }

    fn validate_server(&self) -> Result<(), SimError> {
        let bad = |m: String| Err(SimError::Invalid(m));
        let sv = &self.server;
        if !(sv.refill_per_s >= 0.0 && sv.refill_per_s.is_finite()) {
            return bad(format!(
                "server.refill_per_s = {}: must be >= 0",
                sv.refill_per_s
            ));
        }
        if sv.model == Model::TokenBucket && sv.capacity.is_none() {
            return bad("server.capacity: required for model = \"token-bucket\"".into());
        }
        if sv.foreign_per_s.is_nan()
            || sv.foreign_per_s < 0.0
            || (sv.foreign_per_s > 0.0
                && (sv.model != Model::Dynamodb || sv.foreign_per_s >= sv.refill_per_s))
        {
            return bad(format!(
                "server.foreign_per_s = {}: must be >= 0, below refill_per_s, and only for model = \"dynamodb\"",
                sv.foreign_per_s
            ));
        }
        if sv.model == Model::Dynamodb && sv.refill_per_s <= 0.0 {
            return bad("server.refill_per_s: must be > 0 for the dynamodb model".into());
        }
        if !(positive(sv.on_demand_start) && non_negative(sv.on_demand_scale_s)) {
            return bad(format!(
                "server.on_demand_start = {}, on_demand_scale_s = {}: must be > 0 and >= 0",
                sv.on_demand_start, sv.on_demand_scale_s
            ));
        }
        if let Some(c) = sv.capacity.filter(|c| !positive(*c)) {
            return bad(format!("server.capacity = {c}: must be > 0"));
        }
        if let Some(n) = sv.partitions {
            if n == 0 || n > 10_000 || sv.model == Model::TokenBucket {
                return bad(format!(
                    "server.partitions = {n}: must be 1-10000, and only for the dynamodb and on-demand models"
                ));
            }
            if !(positive(sv.partition_max_per_s) && sv.partition_max_per_s.is_finite()) {
                return bad(format!(
                    "server.partition_max_per_s = {}: must be > 0",
                    sv.partition_max_per_s
                ));
            }
            if sv.foreign_per_s / n as f64 >= sv.partition_max_per_s {
                return bad(format!(
                    "server.foreign_per_s = {}: its part of each of the {n} partitions must be below partition_max_per_s ({})",
                    sv.foreign_per_s, sv.partition_max_per_s
                ));
            }
            let depth = sv.partition_depth_s();
            if !(positive(depth) && depth.is_finite()) {
                return bad(format!(
                    "server.partition_burst_s = {depth}{}: must be > 0",
                    if sv.partition_burst_s.is_none() {
                        " (by default the table's bucket, in seconds)"
                    } else {
                        ""
                    }
                ));
            }
            if self.clients.keys.is_none() {
                return bad(
                    "server.partitions: needs clients.keys (which partition an item goes to)"
                        .into(),
                );
            }
        }
        if sv.burst_credit_s < 0.0 {
            return bad(format!(
                "server.burst_credit_s = {}: must be >= 0",
                sv.burst_credit_s
            ));
        }
        for (i, st) in sv.schedule.iter().enumerate() {
            if !non_negative(st.at_s) {
                return bad(format!(
                    "server.schedule[{i}].at_s = {}: must be >= 0",
                    st.at_s
                ));
            }
            if st.refill_per_s.is_none() && st.capacity.is_none() && st.foreign_per_s.is_none() {
                return bad(format!(
                    "server.schedule[{i}]: give refill_per_s, capacity and/or foreign_per_s"
                ));
            }
            if st.refill_per_s.is_some_and(|r| !positive(r))
                || st.capacity.is_some_and(|c| !positive(c))
            {
                return bad(format!("server.schedule[{i}]: values must be > 0"));
            }
            if let Some(f) = st.foreign_per_s {
                if !non_negative(f) || sv.model != Model::Dynamodb || sv.partitions.is_some() {
                    return bad(format!(
                        "server.schedule[{i}].foreign_per_s = {f}: must be >= 0, and only for model = \"dynamodb\" without partitions"
                    ));
                }
            }
        }
        if sv.model == Model::Dynamodb && !sv.schedule.is_empty() {
            if let Some((at, refill, foreign)) = sv
                .states()
                .into_iter()
                .find(|(_, refill, foreign)| foreign >= refill)
            {
                return bad(format!(
                    "server.schedule: from {at} s the other writer takes {foreign} of {refill} units/s: it must take less than the refill in force"
                ));
            }
        }
        Ok(())
    }

    fn validate_clients(&self) -> Result<(), SimError> {
        let bad = |m: String| Err(SimError::Invalid(m));
        let c = &self.clients;
        if c.count == 0 || c.count > 10_000 {
            return bad(format!("clients.count = {}: must be in 1..=10000", c.count));
        }
        if c.items == 0 || c.items > 25 {
            return bad(format!("clients.items = {}: must be in 1..=25", c.items));
        }
        c.cost.check("clients.cost", 1.0)?;
        c.latency_ms.check("clients.latency_ms", 0.0)?;
        if let Some(k) = &c.keys {
            if !(k.count >= 1
                && k.count <= 1_000_000
                && non_negative(k.zipf_s)
                && k.zipf_s.is_finite()
                && non_negative(k.hot_share)
                && k.hot_share < 1.0)
            {
                return bad(format!(
                    "clients.keys = {{ count = {}, zipf_s = {}, hot_share = {} }}: count must be 1-1000000, zipf_s >= 0, hot_share in [0, 1)",
                    k.count, k.zipf_s, k.hot_share
                ));
            }
        }
        match &c.workload {
            Workload::Named(n) if n == "busy" => {}
            Workload::Named(n) => {
                return bad(format!(
                    "clients.workload = {n:?}: must be \"busy\" or {{ busy_s, idle_s }}"
                ))
            }
            Workload::Cycle { busy_s, idle_s } if !(*busy_s > 0.0 && *idle_s >= 0.0) => {
                return bad("clients.workload: busy_s must be > 0 and idle_s >= 0".into())
            }
            Workload::Cycle { .. } => {}
        }
        if !non_negative(c.stagger_s) {
            return bad(format!("clients.stagger_s = {}: must be >= 0", c.stagger_s));
        }
        if c.pacing_rate.is_some_and(|r| !positive(r)) {
            return bad("clients.pacing_rate: must be > 0".into());
        }
        if !(1..=MAX_IN_FLIGHT_BATCHES).contains(&c.in_flight) {
            return bad(format!(
                "clients.in_flight = {}: must be in [1, {MAX_IN_FLIGHT_BATCHES}]",
                c.in_flight
            ));
        }
        if !(0.0..1000.0).contains(&c.clock_skew_ms) {
            return bad(format!(
                "clients.clock_skew_ms: must be >= 0 and < 1000 (got {})",
                c.clock_skew_ms
            ));
        }
        if c.pacing_burst == 0 {
            return bad("clients.pacing_burst: must be >= 1".into());
        }
        if c.groups == 0 || c.groups > c.count {
            return bad(format!(
                "clients.groups = {}: must be in 1..=count ({})",
                c.groups, c.count
            ));
        }
        Ok(())
    }

    /// The strategies, parsed, with unique labels.
    pub fn entries(&self) -> Result<Vec<Entry>, SimError> {
        let mut seen = BTreeMap::new();
        let mut out = Vec::new();
        for (i, t) in self.strategies.iter().enumerate() {
            let mut t = t.clone();
            let label = match t.remove("label") {
                Some(toml::Value::String(l)) => Some(l),
                Some(other) => {
                    return Err(SimError::Invalid(format!(
                        "strategy[{i}].label = {other}: must be a string"
                    )))
                }
                None => None,
            };
            // The worker's `throttle.hot_keys`, per strategy entry.
            let hot_keys = match t.remove("hot_keys") {
                Some(toml::Value::Boolean(_)) if self.clients.keys.is_none() => {
                    return Err(SimError::Invalid(format!(
                        "strategy[{i}].hot_keys: only with clients.keys (items have no keys to pace apart)"
                    )))
                }
                Some(toml::Value::Boolean(b)) => b,
                Some(other) => {
                    return Err(SimError::Invalid(format!(
                        "strategy[{i}].hot_keys = {other}: must be true or false"
                    )))
                }
                None => self.clients.hot_keys,
            };
            let config: StrategyConfig = toml::Value::Table(t)
                .try_into()
                .map_err(|e| SimError::Invalid(format!("strategy[{i}]: {e}")))?;
            config.validate().map_err(|e| {
                SimError::Invalid(format!("strategy[{i}] ({}): {e}", config.name()))
            })?;
            let label = label.unwrap_or_else(|| config.name().to_string());
            if seen.insert(label.clone(), i).is_some() {
                return Err(SimError::Invalid(format!(
                    "strategy[{i}]: label {label:?} is used twice; add `label = \"...\"`"
                )));
            }
            out.push(Entry {
                label,
                config,
                hot_keys,
            });
        }
        Ok(out)
    }

    /// The job client `i` is in.
    pub fn group_of(&self, i: usize) -> usize {
        i % self.clients.groups
    }

    /// How many clients job `g` has.
    pub fn group_size(&self, g: usize) -> usize {
        let c = &self.clients;
        c.count / c.groups + usize::from(g < c.count % c.groups)
    }

    /// Whether answers carry the bucket level.
    pub fn reports_remaining(&self) -> bool {
        self.server
            .report_remaining
            .unwrap_or(self.server.model == Model::TokenBucket)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = r#"
        name = "t"
        duration_s = 60
        [server]
        model = "token-bucket"
        capacity = 100
        refill_per_s = 1
        [clients]
        count = 2
        [[strategy]]
        name = "adaptive"
    "#;

    #[test]
    fn a_minimal_scenario_takes_the_defaults() {
        let s = Scenario::parse(MINIMAL).unwrap();
        assert_eq!(s.clients.cost, Dist::Fixed(1.0));
        assert_eq!(s.clients.in_flight, 1);
        assert!(s.reports_remaining());
        assert_eq!(s.entries().unwrap()[0].label, "adaptive");
    }

    #[test]
    fn errors_name_the_field_and_the_rule() {
        let cases = [
            (
                "duration_s = 60",
                "duration_s = 0",
                "duration_s = 0: must be in",
            ),
            ("count = 2", "count = 0", "clients.count = 0"),
            (
                "count = 2",
                "count = 2\ngroups = 3",
                "clients.groups = 3: must be in 1..=count",
            ),
            ("capacity = 100\n", "", "server.capacity: required"),
            (
                "name = \"adaptive\"",
                "name = \"adaptive\"\ndecrease = 2.0",
                "strategy[0] (adaptive): decrease = 2",
            ),
            (
                "name = \"adaptive\"",
                "name = \"magic\"",
                "unknown variant `magic`",
            ),
            (
                "count = 2",
                "count = 2\nworkload = \"lazy\"",
                "clients.workload = \"lazy\"",
            ),
            (
                "count = 2",
                "count = 2\ncolour = 1",
                "unknown field `colour`",
            ),
            (
                "count = 2",
                "count = 2\nin_flight = 0",
                "clients.in_flight = 0: must be in [1, 256]",
            ),
        ];
        for (from, to, want) in cases {
            let text = MINIMAL.replacen(from, to, 1);
            let err = Scenario::parse(&text).unwrap_err().to_string();
            assert!(err.contains(want), "{to:?}: {err}");
        }
    }

    #[test]
    fn a_step_of_the_other_writer_is_checked() {
        let with = |step: &str| {
            MINIMAL
                .replace("token-bucket", "dynamodb")
                .replace("capacity = 100\n", "")
                .replace(
                    "refill_per_s = 1",
                    &format!("refill_per_s = 200\n[[server.schedule]]\nat_s = 10\n{step}"),
                )
        };
        let refused = |toml: &str, says: &str| {
            let err = Scenario::parse(toml).unwrap_err().to_string();
            assert!(err.contains(says), "{err}");
        };
        assert!(Scenario::parse(&with("foreign_per_s = 150")).is_ok());
        refused(
            &with("foreign_per_s = 200"),
            "from 10 s the other writer takes 200 of 200",
        );
        refused(
            &with("foreign_per_s = -1"),
            "server.schedule[0].foreign_per_s = -1",
        );
        // The largest item against the smallest bucket over the steps: the
        // other writer's step leaves 2 units of the 1 s bucket (no burst
        // credit), less than an item of 5.
        let five = |toml: String| toml.replace("count = 2", "count = 2\ncost = 5");
        refused(
            &five(with("foreign_per_s = 198")),
            "an item of 5 units can never be written",
        );
        assert!(Scenario::parse(&five(with("foreign_per_s = 190"))).is_ok());
    }

    #[test]
    fn an_item_the_server_never_admits_whole_is_an_error() {
        let dynamo = |foreign: u32, credit: u32| {
            MINIMAL
                .replace("token-bucket", "dynamodb")
                .replace("capacity = 100", "capacity = 10")
                .replace(
                    "refill_per_s = 1",
                    &format!(
                        "refill_per_s = 200\nforeign_per_s = {foreign}\nburst_credit_s = {credit}"
                    ),
                )
                .replace("count = 2", "count = 2\ncost = [1, 5]")
        };
        // A 10-unit bucket of which the other writer's part leaves 2.5.
        let err = Scenario::parse(&dynamo(150, 0)).unwrap_err().to_string();
        assert!(
            err.contains("an item of 5 units can never be written")
                && err.contains("at most 2.50 at once"),
            "{err}"
        );
        // It leaves 7 units; or burst credit can add to it.
        assert!(Scenario::parse(&dynamo(60, 0)).is_ok());
        assert!(Scenario::parse(&dynamo(150, 300)).is_ok());
        let tokens = MINIMAL.replace("capacity = 100", "capacity = 3");
        let err = Scenario::parse(&tokens.replace("count = 2", "count = 2\ncost = 4"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("an item of 4 units"), "{err}");
        assert!(Scenario::parse(&tokens.replace("count = 2", "count = 2\ncost = 3")).is_ok());
    }

    #[test]
    fn jobs_take_the_clients_in_turn() {
        let s = Scenario::parse(&MINIMAL.replace("count = 2", "count = 7\ngroups = 3")).unwrap();
        let sizes: Vec<usize> = (0..3).map(|g| s.group_size(g)).collect();
        assert_eq!(sizes, [3, 2, 2]);
        for (g, size) in sizes.iter().enumerate() {
            assert_eq!((0..7).filter(|&i| s.group_of(i) == g).count(), *size);
        }
    }

    #[test]
    fn labels_tell_settings_apart_and_must_be_unique() {
        let two = format!("{MINIMAL}\n[[strategy]]\nname = \"adaptive\"\n");
        let err = Scenario::parse(&two).unwrap_err().to_string();
        assert!(err.contains("used twice"), "{err}");
        let ok = format!("{two}label = \"slow\"\ndecrease = 0.5\n");
        let s = Scenario::parse(&ok).unwrap();
        let labels: Vec<_> = s.entries().unwrap().into_iter().map(|e| e.label).collect();
        assert_eq!(labels, ["adaptive", "slow"]);
    }
}
