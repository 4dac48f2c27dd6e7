//! The responsive exponential backoff ("AutoSleeper") of seeds 000/002,
//! ported exactly from its Go code.
//!
//! Durations are integer nanoseconds, truncated after every multiply as Go's
//! `time.Duration(float)` does. On failure: 0 -> InitialInterval, else
//! x UpMultiplier with jitter, capped at MaxInterval. On success: nothing while
//! the interval is 0; every DownMultiplierThreshold-th success x DownMultiplier
//! with jitter, and below InitialInterval it drops to 0. The sleeper "sleeps"
//! its current interval after every failure and every success (it paces); here
//! it returns that interval and the caller sleeps. Randomization is folded into
//! the stored interval. The generator is seeded (the Go code's global `rand`
//! makes every replica draw the same sequence; seed per worker instead).
//!
//! One deliberate deviation: Go's `goDown` does not cap at MaxInterval, so with
//! jitter a decrease from near the cap can land above it (defaults: 15 min x 0.9
//! +- 2 min reaches 15.5 min). Here a decrease is capped at MaxInterval too;
//! nothing else changes.

use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::{Feedback, Metrics, Strategy};

/// The AutoSleeper's parameters; `Default` is the seeds' defaults.
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct AutoSleeperConfig {
    /// Interval after the first failure (Go: InitialInterval), in ms.
    pub initial_interval_ms: f64,
    /// Cap on the interval (MaxInterval), in ms.
    pub max_interval_ms: f64,
    /// Cap on the jitter's half-width (MaxRandomization), in ms.
    pub max_randomization_ms: f64,
    pub up_multiplier: f64,
    pub down_multiplier: f64,
    pub randomization_factor: f64,
    /// Successes between two decreases (DownMultiplierThreshold).
    pub down_multiplier_threshold: u32,
}

impl Default for AutoSleeperConfig {
    fn default() -> Self {
        Self {
            initial_interval_ms: 500.0,
            max_interval_ms: 15.0 * 60_000.0,
            max_randomization_ms: 2.0 * 60_000.0,
            up_multiplier: 1.5,
            down_multiplier: 0.9,
            randomization_factor: 0.3,
            down_multiplier_threshold: 10,
        }
    }
}

impl AutoSleeperConfig {
    /// Checks the parameters; the message names the field and the rule.
    pub fn validate(&self) -> Result<(), String> {
        let positive = [
            ("initial_interval_ms", self.initial_interval_ms),
            ("max_interval_ms", self.max_interval_ms),
        ];
        for (name, v) in positive {
            super::ensure(v.is_finite() && v > 0.0, || {
                format!("{name} = {v}: must be > 0")
            })?;
        }
        if self.max_interval_ms < self.initial_interval_ms {
            return Err("max_interval_ms must be >= initial_interval_ms".into());
        }
        super::ensure(self.max_randomization_ms >= 0.0, || {
            "max_randomization_ms must be >= 0".into()
        })?;
        super::ensure(self.up_multiplier >= 1.0, || {
            format!("up_multiplier = {}: must be >= 1", self.up_multiplier)
        })?;
        super::ensure(
            self.down_multiplier > 0.0 && self.down_multiplier <= 1.0,
            || {
                format!(
                    "down_multiplier = {}: must be in (0, 1]",
                    self.down_multiplier
                )
            },
        )?;
        super::ensure((0.0..=1.0).contains(&self.randomization_factor), || {
            "randomization_factor must be in [0, 1]".into()
        })?;
        if self.down_multiplier_threshold == 0 {
            return Err("down_multiplier_threshold must be >= 1".into());
        }
        Ok(())
    }
}

fn ms_to_ns(ms: f64) -> i64 {
    (ms * 1e6) as i64
}

/// The AutoSleeper state machine.
#[derive(Debug, Clone)]
pub struct AutoSleeper {
    initial: i64,
    max: i64,
    max_randomization: f64,
    up: f64,
    down: f64,
    randomization: f64,
    threshold: u32,
    current: i64,
    successes: u32,
    metrics: Metrics,
    rng: SmallRng,
}

impl AutoSleeper {
    pub fn new(cfg: &AutoSleeperConfig, seed: u64) -> Self {
        Self {
            initial: ms_to_ns(cfg.initial_interval_ms),
            max: ms_to_ns(cfg.max_interval_ms),
            max_randomization: cfg.max_randomization_ms * 1e6,
            up: cfg.up_multiplier,
            down: cfg.down_multiplier,
            randomization: cfg.randomization_factor,
            threshold: cfg.down_multiplier_threshold,
            current: 0,
            successes: 0,
            metrics: Metrics::default(),
            rng: SmallRng::seed_from_u64(seed),
        }
    }

    /// Go: SleepOnFailure.
    pub fn sleep_on_failure(&mut self) -> Duration {
        self.metrics.invocations += 1;
        self.go_up();
        self.sleep()
    }

    /// Go: SleepOnSuccess.
    pub fn sleep_on_success(&mut self) -> Duration {
        self.metrics.invocations += 1;
        if self.current == 0 {
            return Duration::ZERO;
        }
        self.successes += 1;
        if self.successes == self.threshold {
            self.go_down();
            self.successes = 0;
        }
        self.sleep()
    }

    fn sleep(&mut self) -> Duration {
        let d = Duration::from_nanos(self.current as u64);
        self.metrics.slept += 1;
        self.metrics.total_sleep += d;
        d
    }

    fn go_down(&mut self) {
        self.metrics.went_down += 1;
        let interval = self.current as f64 * self.down;
        let random = self.next_random(interval);
        if random < self.initial as f64 {
            self.current = 0;
            return;
        }
        // Deviation from Go (see the module doc): never above MaxInterval.
        self.current = (random as i64).min(self.max);
    }

    fn go_up(&mut self) {
        self.metrics.went_up += 1;
        if self.current == 0 {
            self.current = self.initial;
            return;
        }
        let interval = self.current as f64 * self.up;
        let random = self.next_random(interval);
        if random > self.max as f64 {
            self.current = self.max;
            return;
        }
        self.current = random as i64;
    }

    /// Go: getNextRandomInterval.
    fn next_random(&mut self, interval: f64) -> f64 {
        if self.randomization == 0.0 {
            return interval;
        }
        let delta = (self.randomization * interval).min(self.max_randomization);
        let randomization = 2.0 * delta * self.rng.random::<f64>();
        interval - delta + randomization
    }
}

impl Strategy for AutoSleeper {
    fn name(&self) -> &'static str {
        "autosleeper"
    }

    fn after_attempt(&mut self, fb: &Feedback) -> Duration {
        if fb.throttled {
            self.sleep_on_failure()
        } else {
            self.sleep_on_success()
        }
    }

    fn current_delay(&self) -> Duration {
        Duration::from_nanos(self.current as u64)
    }

    fn prime(&mut self, delay: Duration, _units: f64) {
        self.current = (delay.as_nanos().min(i64::MAX as u128) as i64).min(self.max);
    }

    fn metrics(&self) -> Metrics {
        self.metrics
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::{any, prop_assert, prop_assert_eq, proptest};

    fn graph_config() -> AutoSleeperConfig {
        // Seed 000's graph: initial 1 ms, up 1.5, down 0.6, no jitter, threshold 5.
        AutoSleeperConfig {
            initial_interval_ms: 1.0,
            up_multiplier: 1.5,
            down_multiplier: 0.6,
            randomization_factor: 0.0,
            down_multiplier_threshold: 5,
            ..AutoSleeperConfig::default()
        }
    }

    #[test]
    fn defaults_are_the_seeds() {
        let d = AutoSleeperConfig::default();
        assert_eq!(d.initial_interval_ms, 500.0);
        assert_eq!(d.max_interval_ms, 900_000.0);
        assert_eq!(d.max_randomization_ms, 120_000.0);
        assert_eq!(
            (d.up_multiplier, d.down_multiplier, d.randomization_factor),
            (1.5, 0.9, 0.3)
        );
        assert_eq!(d.down_multiplier_threshold, 10);
    }

    #[test]
    fn fifteen_failures_reach_291_9_ms_in_whole_nanoseconds() {
        let mut s = AutoSleeper::new(&graph_config(), 1);
        let mut last = Duration::ZERO;
        for _ in 0..15 {
            last = s.sleep_on_failure();
        }
        // 1 ms x 1.5^14, truncated to whole ns after every multiply as in Go.
        assert_eq!(last, Duration::from_nanos(291_929_238));
        assert_eq!(format!("{:.1} ms", last.as_secs_f64() * 1e3), "291.9 ms");
        let m = s.metrics();
        assert_eq!((m.invocations, m.went_up, m.slept), (15, 15, 15));
    }

    #[test]
    fn every_nth_success_goes_down_and_below_initial_drops_to_zero() {
        let mut s = AutoSleeper::new(&graph_config(), 1);
        s.sleep_on_failure(); // 1 ms
        s.sleep_on_failure(); // 1.5 ms
        for _ in 0..4 {
            assert_eq!(
                s.sleep_on_success(),
                Duration::from_micros(1500),
                "paces at the interval"
            );
        }
        // 5th success: 1.5 ms x 0.6 = 0.9 ms < 1 ms initial -> 0.
        assert_eq!(s.sleep_on_success(), Duration::ZERO);
        assert_eq!(s.metrics().went_down, 1);
        // At 0, a success neither sleeps nor counts.
        let before = s.metrics();
        assert_eq!(s.sleep_on_success(), Duration::ZERO);
        assert_eq!(s.metrics().slept, before.slept);
        assert_eq!(s.metrics().invocations, before.invocations + 1);
    }

    #[test]
    fn jitter_of_0_2_on_1s_times_2_lands_in_1_6_to_2_4_s() {
        let cfg = AutoSleeperConfig {
            initial_interval_ms: 1000.0,
            up_multiplier: 2.0,
            randomization_factor: 0.2,
            ..AutoSleeperConfig::default()
        };
        let (mut lo, mut hi) = (f64::MAX, 0.0f64);
        for seed in 0..2000 {
            let mut s = AutoSleeper::new(&cfg, seed);
            s.sleep_on_failure(); // 1 s
            let d = s.sleep_on_failure().as_secs_f64();
            assert!((1.6..=2.4).contains(&d), "{d}");
            lo = lo.min(d);
            hi = hi.max(d);
        }
        assert!(lo < 1.65 && hi > 2.35, "the band is used: [{lo}, {hi}]");
    }

    #[test]
    fn max_randomization_caps_the_jitter() {
        let cfg = AutoSleeperConfig {
            initial_interval_ms: 1000.0,
            up_multiplier: 2.0,
            randomization_factor: 0.5,
            max_randomization_ms: 100.0,
            ..AutoSleeperConfig::default()
        };
        for seed in 0..200 {
            let mut s = AutoSleeper::new(&cfg, seed);
            s.sleep_on_failure();
            let d = s.sleep_on_failure().as_secs_f64();
            assert!((1.9..=2.1).contains(&d), "{d}");
        }
    }

    #[test]
    fn a_decrease_from_the_cap_never_lands_above_it() {
        // Defaults: at 15 min, a decrease is 13.5 min +- 2 min; Go could give
        // up to 15.5 min.
        for seed in 0..500 {
            let mut s = AutoSleeper::new(&AutoSleeperConfig::default(), seed);
            s.current = s.max;
            s.go_down();
            assert!(s.current <= s.max);
            assert!(s.current >= ms_to_ns(11.5 * 60_000.0));
        }
    }

    #[test]
    fn same_seed_same_sequence() {
        let run = |seed| {
            let mut s = AutoSleeper::new(&AutoSleeperConfig::default(), seed);
            (0..20)
                .map(|i| {
                    if i % 3 == 0 {
                        s.sleep_on_success()
                    } else {
                        s.sleep_on_failure()
                    }
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(run(7), run(7));
        assert_ne!(run(7), run(8));
    }

    proptest! {
        /// Bounded by max, never negative, and 0 only by a decrease below the
        /// initial interval (or before the first failure).
        #[test]
        fn bounded_and_zero_only_as_specified(
            outcomes in proptest::collection::vec(any::<bool>(), 1..400),
            seed in any::<u64>(),
            jitter in 0.0f64..1.0,
        ) {
            let cfg = AutoSleeperConfig { max_interval_ms: 60_000.0, randomization_factor: jitter, ..AutoSleeperConfig::default() };
            let mut s = AutoSleeper::new(&cfg, seed);
            let max = Duration::from_secs(60);
            let mut prev = Duration::ZERO;
            for failed in outcomes {
                let went_down_before = s.metrics().went_down;
                let d = if failed { s.sleep_on_failure() } else { s.sleep_on_success() };
                prop_assert!(d <= max);
                // (With large jitter an increase may land below the initial
                // interval, as in the Go code, but never at 0.)
                if failed { prop_assert!(d > Duration::ZERO); }
                if d == Duration::ZERO && prev > Duration::ZERO {
                    prop_assert_eq!(s.metrics().went_down, went_down_before + 1);
                }
                prop_assert_eq!(s.current_delay(), d);
                prev = d;
            }
        }
    }
}
