//! Retry delays for the write path, as pure state machines: they return a
//! delay, the caller sleeps (cancellably, on its own clock).
//!
//! For now one strategy: capped exponential backoff with jitter, reset on
//! success. Randomness is seeded, so a run can be replayed.

use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::config::BackoffSettings;

/// Capped exponential backoff: initial, x multiplier per failure, at most max;
/// every delay is drawn uniformly in [d(1 - jitter), d(1 + jitter)], capped.
#[derive(Debug, Clone)]
pub struct Exponential {
    settings: BackoffSettings,
    current: Duration,
    rng: SmallRng,
}

impl Exponential {
    pub fn new(settings: BackoffSettings, seed: u64) -> Self {
        Self {
            settings,
            current: Duration::ZERO,
            rng: SmallRng::seed_from_u64(seed),
        }
    }

    /// After a throttle or a transient failure: the delay before retrying.
    pub fn on_failure(&mut self) -> Duration {
        let s = &self.settings;
        self.current = if self.current.is_zero() {
            s.initial
        } else {
            self.current.mul_f64(s.multiplier).min(s.max)
        };
        let j = s.jitter;
        let factor = if j > 0.0 {
            self.rng.random_range(1.0 - j..=1.0 + j)
        } else {
            1.0
        };
        self.current.mul_f64(factor).min(s.max)
    }

    /// After a success: no delay, and the next failure starts over.
    pub fn on_success(&mut self) -> Duration {
        self.current = Duration::ZERO;
        Duration::ZERO
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(jitter: f64) -> BackoffSettings {
        BackoffSettings {
            initial: Duration::from_millis(100),
            max: Duration::from_secs(1),
            multiplier: 2.0,
            jitter,
        }
    }

    #[test]
    fn grows_by_the_multiplier_up_to_the_cap_and_resets() {
        let mut b = Exponential::new(settings(0.0), 1);
        let ms: Vec<u128> = (0..6).map(|_| b.on_failure().as_millis()).collect();
        assert_eq!(ms, [100, 200, 400, 800, 1000, 1000]);
        assert_eq!(b.on_success(), Duration::ZERO);
        assert_eq!(b.on_failure(), Duration::from_millis(100));
    }

    #[test]
    fn jitter_stays_in_its_band_and_under_the_cap() {
        let mut b = Exponential::new(settings(0.3), 7);
        let first = b.on_failure();
        assert!(first >= Duration::from_millis(70) && first <= Duration::from_millis(130));
        for _ in 0..50 {
            assert!(b.on_failure() <= Duration::from_secs(1));
        }
    }
}
