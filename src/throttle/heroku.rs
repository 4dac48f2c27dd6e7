//! Heroku's rate_throttle_client strategies (seed 004), as ANCHORS.md states
//! the gem implements them.
//!
//! min_sleep 0.8 s, multiplier 1.2; every sleep is v x (1 + U), U uniform in
//! [0, jitter] (0.1), the jittered value slept, never stored.
//! - ExponentialBackoff (`Reset`): no state between requests; s := min_sleep at
//!   each request; on each throttle sleep s(1+U), then s := 1.2 s; after a
//!   success the next request fires at once.
//! - The "Increase" family sleeps the stored s before a request's first attempt;
//!   on each throttle s := s + min_sleep, sleep s(1+U), s := 1.2 s; after the
//!   success it applies its decrease and stores s:
//!   `Gradual` s := max(s - min_sleep, 0); `Proportional` s := s(1 - 1/divisor);
//!   `ProportionalRemaining` s := s(1 - remaining), remaining being the fraction of
//!   the server's bucket left (Heroku: RateLimit-Remaining / 4500). Without a
//!   remaining figure, it falls back to `Proportional`.

use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::{Feedback, Metrics, Strategy};

#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct HerokuConfig {
    /// Heroku: 3600 s / 4500 requests = 0.8 s.
    pub min_sleep_s: f64,
    pub multiplier: f64,
    /// The proportional decrease divides by this (Heroku: 4500, its bucket).
    pub decrease_divisor: f64,
    /// U's upper bound.
    pub jitter: f64,
}

impl Default for HerokuConfig {
    fn default() -> Self {
        Self {
            min_sleep_s: 0.8,
            multiplier: 1.2,
            decrease_divisor: 4500.0,
            jitter: 0.1,
        }
    }
}

impl HerokuConfig {
    pub fn validate(&self) -> Result<(), String> {
        super::ensure(self.min_sleep_s > 0.0, || {
            format!("min_sleep_s = {}: must be > 0", self.min_sleep_s)
        })?;
        super::ensure(self.multiplier >= 1.0, || {
            format!("multiplier = {}: must be >= 1", self.multiplier)
        })?;
        super::ensure(self.decrease_divisor >= 1.0, || {
            format!("decrease_divisor = {}: must be >= 1", self.decrease_divisor)
        })?;
        super::ensure((0.0..=1.0).contains(&self.jitter), || {
            format!("jitter = {}: must be in [0, 1]", self.jitter)
        })?;
        Ok(())
    }
}

/// What happens to the stored sleep after a success.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decrease {
    /// ExponentialBackoff: nothing is stored.
    Reset,
    Gradual,
    Proportional,
    ProportionalRemaining,
}

#[derive(Debug, Clone)]
pub struct Heroku {
    cfg: HerokuConfig,
    decrease: Decrease,
    /// The stored sleep, seconds.
    s: f64,
    rng: SmallRng,
    metrics: Metrics,
}

impl Heroku {
    pub fn new(cfg: HerokuConfig, decrease: Decrease, seed: u64) -> Self {
        let s = if decrease == Decrease::Reset {
            cfg.min_sleep_s
        } else {
            0.0
        };
        Self {
            cfg,
            decrease,
            s,
            rng: SmallRng::seed_from_u64(seed),
            metrics: Metrics::default(),
        }
    }

    /// The stored sleep, seconds.
    pub fn stored(&self) -> f64 {
        self.s
    }

    fn jittered(&mut self, v: f64) -> Duration {
        let u = if self.cfg.jitter > 0.0 {
            self.rng.random_range(0.0..=self.cfg.jitter)
        } else {
            0.0
        };
        self.metrics.sleep(Duration::from_secs_f64(v * (1.0 + u)))
    }
}

impl Strategy for Heroku {
    fn name(&self) -> &'static str {
        match self.decrease {
            Decrease::Reset => "heroku-exponential",
            Decrease::Gradual => "heroku-gradual",
            Decrease::Proportional => "heroku-proportional",
            Decrease::ProportionalRemaining => "heroku-proportional-remaining",
        }
    }

    fn before_call(&mut self, _now: Duration) -> Duration {
        if self.decrease == Decrease::Reset {
            self.s = self.cfg.min_sleep_s;
            return Duration::ZERO;
        }
        if self.s > 0.0 {
            self.jittered(self.s)
        } else {
            Duration::ZERO
        }
    }

    fn after_attempt(&mut self, fb: &Feedback) -> Duration {
        self.metrics.invocations += 1;
        let c = self.cfg.clone();
        if fb.throttled {
            self.metrics.went_up += 1;
            if self.decrease != Decrease::Reset {
                self.s += c.min_sleep_s;
            }
            let d = self.jittered(self.s);
            self.s *= c.multiplier;
            return d;
        }
        let before = self.s;
        self.s = match self.decrease {
            Decrease::Reset => return Duration::ZERO,
            Decrease::Gradual => (self.s - c.min_sleep_s).max(0.0),
            Decrease::Proportional => self.s * (1.0 - 1.0 / c.decrease_divisor),
            Decrease::ProportionalRemaining => match fb.remaining {
                Some(r) => self.s * (1.0 - r.clamp(0.0, 1.0)),
                None => self.s * (1.0 - 1.0 / c.decrease_divisor),
            },
        };
        if self.s < before {
            self.metrics.went_down += 1;
        }
        Duration::ZERO
    }

    fn current_delay(&self) -> Duration {
        Duration::from_secs_f64(self.s)
    }

    fn prime(&mut self, delay: Duration, _units: f64) {
        if self.decrease != Decrease::Reset {
            self.s = delay.as_secs_f64();
        }
    }

    fn metrics(&self) -> Metrics {
        self.metrics
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fb(throttled: bool, remaining: Option<f64>) -> Feedback {
        Feedback {
            throttled,
            remaining,
            ..Feedback::default()
        }
    }

    fn no_jitter() -> HerokuConfig {
        HerokuConfig {
            jitter: 0.0,
            ..HerokuConfig::default()
        }
    }

    /// ANCHORS.md's worked example: stored 0, two 429s then 200 -> sleeps 0,
    /// 0.8, 1.76; s = 2.112 before the decrease.
    fn worked_example(decrease: Decrease, remaining: Option<f64>) -> (Vec<f64>, f64) {
        let mut h = Heroku::new(no_jitter(), decrease, 1);
        let mut sleeps = vec![h.before_call(Duration::ZERO).as_secs_f64()];
        sleeps.push(h.after_attempt(&fb(true, None)).as_secs_f64());
        sleeps.push(h.after_attempt(&fb(true, None)).as_secs_f64());
        assert!((h.stored() - 2.112).abs() < 1e-12);
        h.after_attempt(&fb(false, remaining));
        (sleeps, h.stored())
    }

    #[test]
    fn the_increase_family_matches_the_worked_example() {
        let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
        let (sleeps, g) = worked_example(Decrease::Gradual, None);
        assert!(
            close(sleeps[0], 0.0) && close(sleeps[1], 0.8) && close(sleeps[2], 1.76),
            "{sleeps:?}"
        );
        assert!(close(g, 1.312), "{g}");
        let (_, p) = worked_example(Decrease::Proportional, None);
        assert!(close(p, 2.112 * (1.0 - 1.0 / 4500.0)), "{p}");
        assert!(close(p, 2.111530666666667));
        let (_, r) = worked_example(Decrease::ProportionalRemaining, Some(0.0));
        assert!(close(r, 2.112), "remaining 0 keeps s: {r}");
        let (_, r) = worked_example(Decrease::ProportionalRemaining, Some(1.0));
        assert!(close(r, 0.0), "a full bucket clears s: {r}");
    }

    #[test]
    fn exponential_backoff_keeps_no_state_between_requests() {
        let mut h = Heroku::new(no_jitter(), Decrease::Reset, 1);
        assert_eq!(h.before_call(Duration::ZERO), Duration::ZERO);
        let secs: Vec<f64> = (0..3)
            .map(|_| h.after_attempt(&fb(true, None)).as_secs_f64())
            .collect();
        assert!(
            (secs[0] - 0.8).abs() < 1e-9
                && (secs[1] - 0.96).abs() < 1e-9
                && (secs[2] - 1.152).abs() < 1e-9
        );
        assert_eq!(h.after_attempt(&fb(false, None)), Duration::ZERO);
        assert_eq!(h.before_call(Duration::ZERO), Duration::ZERO);
        assert!((h.after_attempt(&fb(true, None)).as_secs_f64() - 0.8).abs() < 1e-9);
    }

    #[test]
    fn jitter_multiplies_by_one_plus_u_up_to_ten_percent() {
        for seed in 0..200 {
            let mut h = Heroku::new(HerokuConfig::default(), Decrease::Gradual, seed);
            let d = h.after_attempt(&fb(true, None)).as_secs_f64();
            assert!((0.8..=0.88).contains(&d), "{d}");
            assert!(
                (h.stored() - 0.96).abs() < 1e-9,
                "the jittered value is not stored"
            );
        }
    }

    #[test]
    fn sleeps_are_never_negative_and_gradual_floors_at_zero() {
        let mut h = Heroku::new(no_jitter(), Decrease::Gradual, 1);
        h.after_attempt(&fb(true, None));
        for _ in 0..5 {
            h.after_attempt(&fb(false, None));
        }
        assert_eq!(h.stored(), 0.0);
        assert_eq!(h.before_call(Duration::ZERO), Duration::ZERO);
    }
}
