//! Throttle control, in one place: the strategies (pure state machines that
//! turn what the server said into how long to wait), the [`pace`]r that
//! releases capacity units at the rate they steer, and the per-table
//! [`control`] that a table's writers share (strategy + pacer + capacity +
//! share + accepted-rate window). Strategies never sleep; the writer sleeps
//! (on tokio's clock, woken early when its partitions are revoked), and time
//! is passed in, so the worker and the simulator run the very same code.
//!
//! The interface, for one logical request (a batch) and its attempts:
//! `before_call` -> delay before the first attempt; after every attempt,
//! `after_attempt(feedback)` -> delay before the next attempt (a retry after a
//! throttle) or the next request (pacing after a success). A strategy may also
//! ask for a pacing rate in capacity units per second (`rate`).
//!
//! - [`autosleeper`]: the seeds' responsive exponential backoff, exactly.
//! - [`simple`]: linear and capped exponential backoff (seed 000), and naive
//!   immediate retry.
//! - [`heroku`]: Heroku's rate_throttle_client family (seed 004).
//! - [`adaptive`]: this project's rate controller (AIMD on the pacing rate,
//!   driven by throttles, accepted capacity and the table's capacity), with
//!   its settings and its level-steered mode in files of their own.
//! - [`hot`]: keys a key range (a partition) refused, paced apart from the
//!   table's other keys.
//! - [`budget`]: the most the job may write to a table (a ceiling the
//!   control applies over any strategy).
//! - [`indexes`]: what the table's global secondary indexes leave its
//!   writes (their capacity over what each costs per table unit).
//! - [`window`]: the accepted rate over a sliding window, shared by the
//!   adaptive controller, the per-table control and the simulator; and the
//!   largest request admitted whole lately, for the request size.

pub mod adaptive;
pub mod autosleeper;
pub mod budget;
pub mod control;
pub mod heroku;
pub mod hot;
pub mod indexes;
pub mod jobs;
pub mod pace;
pub mod request;
pub mod simple;
pub mod window;

use std::time::Duration;

/// What one attempt told us.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Feedback {
    /// When the answer came, on the caller's monotonic clock.
    pub now: Duration,
    /// Throttled: a throttling error, or any item returned unprocessed.
    pub throttled: bool,
    /// Throttled only by key ranges (the reasons, or which items came back,
    /// say so), on keys the hot range did not pace yet, while it held other
    /// hot keys' units back: the table must slow for a range of ever-new
    /// keys, but what it accepted was the range's pace, not the table's.
    /// (Implies `throttled`.)
    pub key_range: bool,
    /// Throttled, and key ranges refused some of it (read as for
    /// `key_range`), yet not `key_range`: a signal for the table's rate
    /// still, but not a clean one of the table's capacity (the first
    /// event's halving skips it). (Implies `throttled`.)
    pub range_read: bool,
    /// The hot range held records back lately (see `hot::HotKeys::holds`):
    /// records go in order, so what was accepted is partly the range's pace,
    /// not a level of the table's free capacity.
    pub range_held: bool,
    /// Key ranges refused writes to this table lately (see
    /// `hot::HotKeys::parted`): it is split into partitions that admit less
    /// at once than it does, and large requests meet them in clumps.
    pub parted: bool,
    /// Capacity units the attempt consumed (what was written).
    pub accepted_units: f64,
    /// Capacity units the attempt asked for, by the items' own cost (no
    /// index writes): what request sizes are measured in.
    pub sent_units: f64,
    /// Of those, the units of the items written (same measure; whereas
    /// `accepted_units` is ConsumedCapacity, which counts a local secondary
    /// index's writes too, as they draw on the table's capacity).
    pub written_units: f64,
    /// Fraction (0..=1) of the server's capacity left, when known.
    pub remaining: Option<f64>,
    /// Units left in the server's bucket, when the server reports it (Heroku's
    /// RateLimit-Remaining). DynamoDB reports none: the worker leaves it None.
    pub level_units: Option<f64>,
    /// The server's capacity in units per second, when known.
    pub capacity: Option<f64>,
    /// The fraction of that capacity this client can expect (its share of the
    /// consumer group's partitions feeding the table), when known.
    pub share: Option<f64>,
}

/// What a worker learned of a table that its peers (the job's other
/// workers, writing the same table) can use, shared through
/// [`crate::lessons`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Lesson {
    /// Its first congestion event, met at its fair share: the table has
    /// less free than the group's share.
    FirstMeeting,
    /// Throttles at or below its share repeated: its rate settled under the
    /// level (another writer takes part of the table).
    Settled,
}

impl Lesson {
    /// Its name on the wire and in the logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Lesson::FirstMeeting => "first_meeting",
            Lesson::Settled => "settled",
        }
    }
}

/// A [`Lesson`] and the level it was met at, as a fraction of the
/// teacher's fair share (the rate the event cut from, over the share).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PeerLesson {
    pub lesson: Lesson,
    pub level: f64,
}

/// Counters every strategy keeps (the AutoSleeper's own metrics).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Metrics {
    pub invocations: u64,
    pub went_up: u64,
    pub went_down: u64,
    pub slept: u64,
    #[serde(serialize_with = "ser_secs")]
    pub total_sleep: Duration,
}

fn ser_secs<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

impl Metrics {
    /// Records a delay handed to the caller.
    pub fn sleep(&mut self, d: Duration) -> Duration {
        if !d.is_zero() {
            self.slept += 1;
            self.total_sleep += d;
        }
        d
    }
}

/// A throttle strategy.
pub trait Strategy: Send + std::fmt::Debug {
    /// Stable name, as in config files and reports.
    fn name(&self) -> &'static str;

    /// Delay before the first attempt of a new logical request.
    fn before_call(&mut self, _now: Duration) -> Duration {
        Duration::ZERO
    }

    /// Delay after an attempt: before the retry (throttled) or before the
    /// next request (success).
    fn after_attempt(&mut self, fb: &Feedback) -> Duration;

    /// Which of its rules read the last answer (`after_attempt`), for the
    /// writer's debug event and the simulator's trace, so that a run through
    /// the proxy and one of the simulator can be compared answer by answer.
    /// None: the strategy does not say.
    fn rule(&self) -> Option<&'static str> {
        None
    }

    /// The pacing rate (capacity units per second) the strategy wants, if it
    /// paces by rate.
    fn rate(&self) -> Option<f64> {
        None
    }

    /// The most capacity units one request should carry, if the strategy
    /// limits it (the writer then sends a batch in several requests, and
    /// always at least one whole item per request).
    fn max_request_units(&self) -> Option<f64> {
        None
    }

    /// Whether the strategy waits for the server's first answer before a
    /// second request is composed: it sizes requests by what the server
    /// admits at once, and nothing is known of that yet (see
    /// `Control::probing`).
    fn probing(&self) -> bool {
        false
    }

    /// The most the server has shown it admits at once, if it has shown a
    /// limit (see [`control::pacing_burst`]).
    fn admits_at_once(&self) -> Option<f64> {
        None
    }

    /// Whether requests should keep to the fleet's time slots (see
    /// [`pace::Slots`]): the server has shown it admits too little at once
    /// for peers' requests to meet without throttles.
    fn slotted(&self) -> bool {
        false
    }

    /// What is known before (and between) calls: the server's capacity in
    /// units per second and this client's share of it (DescribeTable and the
    /// group's partitions in the worker; the scenario in the simulator).
    fn hint(&mut self, _capacity: Option<f64>, _share: Option<f64>) {}

    /// What an on-demand table is ready to take at once, units per second
    /// (DescribeTable's `WarmThroughput`; None: not reported). A starting
    /// point where no capacity is known, not a limit: the table scales past
    /// it.
    fn warm(&mut self, _units_per_s: Option<f64>) {}

    /// The throttle about to be reported named a hard ceiling: an account
    /// limit or a table's on-demand maximum, which probing cannot move.
    /// Strategies that probe stop probing past it.
    fn ceiling(&mut self) {}

    /// Whether the table is split with other busy ingest jobs (see
    /// [`jobs`]): the share already leaves them their parts, so a throttle
    /// at it is no sign of a writer as large as the job.
    fn split_with_jobs(&mut self, _split: bool) {}

    /// This client's part of what its job's busy workers pace the table at,
    /// in units/s, from their beats: their pacing rates summed, times this
    /// client's fair share over theirs summed (None: no busy peer heard
    /// lately). `adaptive` with `keep_together` keeps a job's workers
    /// together by it.
    fn job_part(&mut self, _now: Duration, _part: Option<f64>) {}

    /// What the answers since the last call taught that the job's other
    /// workers can use (see [`Lesson`]), if anything; each lesson once.
    fn taught(&mut self) -> Option<PeerLesson> {
        None
    }

    /// A peer of this client's job, writing the same table, learned
    /// `lesson` (see [`Lesson`]). Strategies that learn the table's free
    /// capacity take it as their own; the others ignore it. Returns whether
    /// it was taken.
    fn peer_lesson(&mut self, _now: Duration, _lesson: PeerLesson) -> bool {
        false
    }

    /// The strategy's current delay (for metrics).
    fn current_delay(&self) -> Duration;

    /// Starts as if earlier throttling had left a delay of `delay` before each
    /// request costing `units` (the simulator's time-to-clear probe). Strategies
    /// that keep no delay between requests ignore it.
    fn prime(&mut self, _delay: Duration, _units: f64) {}

    fn metrics(&self) -> Metrics;
}

/// A strategy chosen by name, with its parameters inline (TOML:
/// `strategy = { name = "autosleeper", up_multiplier = 1.5 }`).
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(tag = "name", rename_all = "kebab-case")]
pub enum StrategyConfig {
    Autosleeper(autosleeper::AutoSleeperConfig),
    Linear(simple::LinearConfig),
    Exponential(simple::ExponentialConfig),
    Naive(simple::NaiveConfig),
    HerokuExponential(heroku::HerokuConfig),
    HerokuGradual(heroku::HerokuConfig),
    HerokuProportional(heroku::HerokuConfig),
    HerokuProportionalRemaining(heroku::HerokuConfig),
    Adaptive(adaptive::AdaptiveConfig),
}

impl Default for StrategyConfig {
    fn default() -> Self {
        StrategyConfig::Adaptive(adaptive::AdaptiveConfig::default())
    }
}

impl StrategyConfig {
    /// The strategy's name.
    pub fn name(&self) -> &'static str {
        match self {
            StrategyConfig::Autosleeper(_) => "autosleeper",
            StrategyConfig::Linear(_) => "linear",
            StrategyConfig::Exponential(_) => "exponential",
            StrategyConfig::Naive(_) => "naive",
            StrategyConfig::HerokuExponential(_) => "heroku-exponential",
            StrategyConfig::HerokuGradual(_) => "heroku-gradual",
            StrategyConfig::HerokuProportional(_) => "heroku-proportional",
            StrategyConfig::HerokuProportionalRemaining(_) => "heroku-proportional-remaining",
            StrategyConfig::Adaptive(_) => "adaptive",
        }
    }

    /// Checks the parameters; the message names the field and the rule.
    pub fn validate(&self) -> Result<(), String> {
        match self {
            StrategyConfig::Autosleeper(c) => c.validate(),
            StrategyConfig::Linear(c) => c.validate(),
            StrategyConfig::Exponential(c) => c.validate(),
            StrategyConfig::Naive(_) => Ok(()),
            StrategyConfig::HerokuExponential(c)
            | StrategyConfig::HerokuGradual(c)
            | StrategyConfig::HerokuProportional(c)
            | StrategyConfig::HerokuProportionalRemaining(c) => c.validate(),
            StrategyConfig::Adaptive(c) => c.validate(),
        }
    }

    /// Builds the state machine, with seeded randomness.
    pub fn build(&self, seed: u64) -> Box<dyn Strategy> {
        use heroku::{Decrease, Heroku};
        match self {
            StrategyConfig::Autosleeper(c) => Box::new(autosleeper::AutoSleeper::new(c, seed)),
            StrategyConfig::Linear(c) => Box::new(simple::Linear::new(c.clone())),
            StrategyConfig::Exponential(c) => Box::new(simple::Exponential::new(c.clone(), seed)),
            StrategyConfig::Naive(_) => Box::new(simple::Naive::default()),
            StrategyConfig::HerokuExponential(c) => {
                Box::new(Heroku::new(c.clone(), Decrease::Reset, seed))
            }
            StrategyConfig::HerokuGradual(c) => {
                Box::new(Heroku::new(c.clone(), Decrease::Gradual, seed))
            }
            StrategyConfig::HerokuProportional(c) => {
                Box::new(Heroku::new(c.clone(), Decrease::Proportional, seed))
            }
            StrategyConfig::HerokuProportionalRemaining(c) => Box::new(Heroku::new(
                c.clone(),
                Decrease::ProportionalRemaining,
                seed,
            )),
            StrategyConfig::Adaptive(c) => Box::new(adaptive::Adaptive::with_seed(c.clone(), seed)),
        }
    }
}

/// `Ok` when `ok` holds (NaN comparisons are false, so NaN fails), else the
/// message.
pub(crate) fn ensure(ok: bool, message: impl FnOnce() -> String) -> Result<(), String> {
    if ok {
        Ok(())
    } else {
        Err(message())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strategies_are_chosen_by_name_with_inline_parameters() {
        #[derive(serde::Deserialize)]
        struct T {
            strategy: StrategyConfig,
        }
        let t: T =
            toml::from_str(r#"strategy = { name = "autosleeper", up_multiplier = 2.0 }"#).unwrap();
        match &t.strategy {
            StrategyConfig::Autosleeper(c) => {
                assert_eq!(c.up_multiplier, 2.0);
                assert_eq!(c.down_multiplier, 0.9, "others keep the seeds' defaults");
            }
            other => panic!("{other:?}"),
        }
        let t: T =
            toml::from_str(r#"strategy = { name = "heroku-proportional-remaining" }"#).unwrap();
        assert_eq!(t.strategy.name(), "heroku-proportional-remaining");
        let err = toml::from_str::<T>(r#"strategy = { name = "autosleeper", up = 2.0 }"#)
            .err()
            .unwrap();
        assert!(err.to_string().contains("unknown field `up`"), "{err}");
        let err = toml::from_str::<T>(r#"strategy = { name = "magic" }"#)
            .err()
            .unwrap();
        assert!(err.to_string().contains("unknown variant `magic`"), "{err}");
    }

    #[test]
    fn every_strategy_builds_and_names_itself() {
        let all = [
            StrategyConfig::Autosleeper(Default::default()),
            StrategyConfig::Linear(Default::default()),
            StrategyConfig::Exponential(Default::default()),
            StrategyConfig::Naive(Default::default()),
            StrategyConfig::HerokuExponential(Default::default()),
            StrategyConfig::HerokuGradual(Default::default()),
            StrategyConfig::HerokuProportional(Default::default()),
            StrategyConfig::HerokuProportionalRemaining(Default::default()),
            StrategyConfig::Adaptive(Default::default()),
        ];
        for c in all {
            c.validate().unwrap();
            assert_eq!(c.build(1).name(), c.name());
        }
    }
}
