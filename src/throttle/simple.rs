//! The plain strategies of seed 000, per logical request (the state resets at
//! each new request; a success means no delay): linear backoff, capped
//! exponential backoff (optionally with jitter), and naive immediate retry.

use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::{Feedback, Metrics, Strategy};

/// Linear backoff: interval, 2x interval, 3x interval, ... capped.
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct LinearConfig {
    pub interval_ms: f64,
    pub max_ms: f64,
}

impl Default for LinearConfig {
    fn default() -> Self {
        Self {
            interval_ms: 100.0,
            max_ms: 20_000.0,
        }
    }
}

impl LinearConfig {
    pub fn validate(&self) -> Result<(), String> {
        super::ensure(
            self.interval_ms > 0.0 && self.max_ms >= self.interval_ms,
            || "interval_ms must be > 0 and max_ms >= interval_ms".into(),
        )?;
        Ok(())
    }
}

#[derive(Debug, Clone)]
pub struct Linear {
    cfg: LinearConfig,
    current_ms: f64,
    metrics: Metrics,
}

impl Linear {
    pub fn new(cfg: LinearConfig) -> Self {
        Self {
            cfg,
            current_ms: 0.0,
            metrics: Metrics::default(),
        }
    }
}

impl Strategy for Linear {
    fn name(&self) -> &'static str {
        "linear"
    }

    fn before_call(&mut self, _now: Duration) -> Duration {
        self.current_ms = 0.0;
        Duration::ZERO
    }

    fn after_attempt(&mut self, fb: &Feedback) -> Duration {
        self.metrics.invocations += 1;
        if !fb.throttled {
            return Duration::ZERO;
        }
        self.metrics.went_up += 1;
        // Seed 000: currentDelay += interval; capped at maxInterval.
        self.current_ms = (self.current_ms + self.cfg.interval_ms).min(self.cfg.max_ms);
        self.metrics
            .sleep(Duration::from_secs_f64(self.current_ms / 1e3))
    }

    fn current_delay(&self) -> Duration {
        Duration::from_secs_f64(self.current_ms / 1e3)
    }

    fn metrics(&self) -> Metrics {
        self.metrics
    }
}

/// Capped exponential backoff: initial, then x multiplier per failure, at most
/// max; each delay drawn in [d(1 - jitter), d(1 + jitter)], capped.
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ExponentialConfig {
    pub initial_ms: f64,
    pub max_ms: f64,
    pub multiplier: f64,
    pub jitter: f64,
}

impl Default for ExponentialConfig {
    fn default() -> Self {
        Self {
            initial_ms: 50.0,
            max_ms: 20_000.0,
            multiplier: 2.0,
            jitter: 0.3,
        }
    }
}

impl ExponentialConfig {
    pub fn validate(&self) -> Result<(), String> {
        super::ensure(
            self.initial_ms > 0.0 && self.max_ms >= self.initial_ms,
            || "initial_ms must be > 0 and max_ms >= initial_ms".into(),
        )?;
        super::ensure(self.multiplier >= 1.0, || {
            format!("multiplier = {}: must be >= 1", self.multiplier)
        })?;
        super::ensure((0.0..=1.0).contains(&self.jitter), || {
            format!("jitter = {}: must be in [0, 1]", self.jitter)
        })?;
        Ok(())
    }
}

#[derive(Debug, Clone)]
pub struct Exponential {
    cfg: ExponentialConfig,
    current_ms: f64,
    rng: SmallRng,
    metrics: Metrics,
}

impl Exponential {
    /// The schedule for transient failures (network, 5xx), which are not
    /// capacity signals: 100 ms doubling to 10 s, each wait ±30%.
    pub fn transient(seed: u64) -> Self {
        let cfg = ExponentialConfig {
            initial_ms: 100.0,
            max_ms: 10_000.0,
            multiplier: 2.0,
            jitter: 0.3,
        };
        Self::new(cfg, seed)
    }

    /// The wait after one more failure.
    pub fn next_failure(&mut self) -> Duration {
        self.after_attempt(&Feedback {
            throttled: true,
            ..Feedback::default()
        })
    }

    pub fn new(cfg: ExponentialConfig, seed: u64) -> Self {
        Self {
            cfg,
            current_ms: 0.0,
            rng: SmallRng::seed_from_u64(seed),
            metrics: Metrics::default(),
        }
    }
}

impl Strategy for Exponential {
    fn name(&self) -> &'static str {
        "exponential"
    }

    fn before_call(&mut self, _now: Duration) -> Duration {
        self.current_ms = 0.0;
        Duration::ZERO
    }

    fn after_attempt(&mut self, fb: &Feedback) -> Duration {
        self.metrics.invocations += 1;
        if !fb.throttled {
            self.current_ms = 0.0;
            return Duration::ZERO;
        }
        self.metrics.went_up += 1;
        let c = &self.cfg;
        // Seed 000: 0 -> initial, else x multiplier, capped.
        self.current_ms = if self.current_ms == 0.0 {
            c.initial_ms
        } else {
            (self.current_ms * c.multiplier).min(c.max_ms)
        };
        let factor = if c.jitter > 0.0 {
            self.rng.random_range(1.0 - c.jitter..=1.0 + c.jitter)
        } else {
            1.0
        };
        let ms = (self.current_ms * factor).min(c.max_ms);
        self.metrics.sleep(Duration::from_secs_f64(ms / 1e3))
    }

    fn current_delay(&self) -> Duration {
        Duration::from_secs_f64(self.current_ms / 1e3)
    }

    fn metrics(&self) -> Metrics {
        self.metrics
    }
}

/// Naive immediate retry: never waits (the Azure pattern's counter-example).
#[derive(Debug, Clone, Default, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct NaiveConfig {}

#[derive(Debug, Clone, Default)]
pub struct Naive {
    metrics: Metrics,
}

impl Strategy for Naive {
    fn name(&self) -> &'static str {
        "naive"
    }

    fn after_attempt(&mut self, _fb: &Feedback) -> Duration {
        self.metrics.invocations += 1;
        Duration::ZERO
    }

    fn current_delay(&self) -> Duration {
        Duration::ZERO
    }

    fn metrics(&self) -> Metrics {
        self.metrics
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FAIL: Feedback = Feedback {
        now: Duration::ZERO,
        throttled: true,
        key_range: false,
        range_read: false,
        range_held: false,
        parted: false,
        accepted_units: 0.0,
        sent_units: 0.0,
        written_units: 0.0,
        remaining: None,
        level_units: None,
        capacity: None,
        share: None,
    };
    const OK: Feedback = Feedback {
        throttled: false,
        ..FAIL
    };

    #[test]
    fn linear_adds_the_interval_and_caps() {
        let mut s = Linear::new(LinearConfig {
            interval_ms: 1000.0,
            max_ms: 3500.0,
        });
        let secs: Vec<f64> = (0..5)
            .map(|_| s.after_attempt(&FAIL).as_secs_f64())
            .collect();
        assert_eq!(secs, [1.0, 2.0, 3.0, 3.5, 3.5]);
        assert_eq!(s.after_attempt(&OK), Duration::ZERO);
        s.before_call(Duration::ZERO);
        assert_eq!(
            s.after_attempt(&FAIL),
            Duration::from_secs(1),
            "a new request starts over"
        );
    }

    #[test]
    fn exponential_multiplies_and_caps_like_seed_000() {
        let mut s = Exponential::new(
            ExponentialConfig {
                initial_ms: 1000.0,
                max_ms: 10_000.0,
                multiplier: 2.0,
                jitter: 0.0,
            },
            1,
        );
        let secs: Vec<f64> = (0..6)
            .map(|_| s.after_attempt(&FAIL).as_secs_f64())
            .collect();
        assert_eq!(secs, [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]);
        assert_eq!(s.after_attempt(&OK), Duration::ZERO);
        assert_eq!(s.after_attempt(&FAIL), Duration::from_secs(1));
    }

    #[test]
    fn exponential_jitter_stays_in_band_and_under_max() {
        let mut s = Exponential::new(ExponentialConfig::default(), 3);
        let first = s.after_attempt(&FAIL).as_secs_f64();
        assert!((0.035..=0.065).contains(&first), "{first}");
        for _ in 0..100 {
            assert!(s.after_attempt(&FAIL) <= Duration::from_secs(20));
        }
    }

    #[test]
    fn naive_never_waits() {
        let mut s = Naive::default();
        assert_eq!(s.after_attempt(&FAIL), Duration::ZERO);
        assert_eq!(s.metrics().invocations, 1);
    }
}
