//! The level-steered mode of [`super::Adaptive`]: keep a cushion, when the
//! server shows its bucket.
//!
//! If answers carry the bucket's level (Heroku's RateLimit-Remaining;
//! DynamoDB has none) and the refill rate is known, the rate is steered by
//! that level instead of by throttles. Every client sees the same level, and
//! its trend over the last `cushion_window_s` is capacity minus the whole
//! fleet's rate, so each client knows the fleet's rate without talking to
//! the others. It scales its own rate by (the fleet rate that would bring the
//! level to `cushion_s` seconds of capacity within twice that time) / (the
//! fleet rate now), damped by `cushion_gain`: all scale alike, the fleet
//! converges, shares stay as they were, and the bucket never runs dry, so
//! nobody is throttled. A throttle cuts the rate by `cushion_decrease`, and
//! while the bucket is empty (under a second of refill), where its trend is
//! flat however far the fleet is over, the correction is applied with
//! `cushion_empty_gain`. Without a known share a client starts at
//! `cushion_start` x capacity (an empty bucket is filled, not fought over; a
//! full one is found within seconds).

use std::time::Duration;

use super::Adaptive;
use crate::throttle::Feedback;

impl Adaptive {
    /// Level mode: one answer that carried the bucket's level.
    pub(super) fn level_step(&mut self, fb: &Feedback, level: f64, capacity: f64) {
        let share = fb.share.filter(|s| *s > 0.0);
        if !self.level_mode {
            self.level_mode = true;
            if self.w_max.is_none() {
                self.rate = self.start_rate(capacity, share);
            }
        }
        let window = Duration::from_secs_f64(self.cfg.cushion_window_s);
        self.levels.push_back((fb.now, level));
        while self.levels.len() > 2 && fb.now.saturating_sub(self.levels[1].0) >= window {
            self.levels.pop_front();
        }
        let cushion = capacity * self.cfg.cushion_s;
        let cooldown = Duration::from_secs_f64(self.cfg.cooldown_ms / 1e3);
        let since = self.last_decrease.map(|t| fb.now.saturating_sub(t));
        if fb.throttled {
            // The very first answer says nothing about this client's rate
            // (an empty bucket at the start meets every strategy).
            if self.levels.len() > 1 && since.is_none_or(|s| s >= cooldown) {
                self.w_max = Some(self.rate);
                self.rate *= self.cfg.cushion_decrease;
                self.last_decrease = Some(fb.now);
                self.metrics.went_down += 1;
            }
        } else if let Some(&(t0, l0)) = self.levels.front() {
            let span = fb.now.saturating_sub(t0).as_secs_f64();
            if span >= 1.0 {
                // The level's trend is capacity minus the fleet's rate (exact
                // while the bucket is neither empty nor full).
                let slope = (level - l0) / span;
                let fleet_now = (capacity - slope).max(capacity * 0.05);
                let fleet_wanted = capacity - (cushion - level) / (2.0 * self.cfg.cushion_s);
                let k = (fleet_wanted / fleet_now).max(0.0);
                // An empty bucket's trend is flat however far the fleet is
                // over: correct harder there.
                let gain = if level < capacity {
                    self.cfg.cushion_empty_gain
                } else {
                    self.cfg.cushion_gain
                };
                let k = (1.0 + gain * (k - 1.0)).clamp(0.5, 2.0);
                self.rate *= k;
                if k > 1.0 {
                    self.metrics.went_up += 1;
                } else if k < 1.0 {
                    self.metrics.went_down += 1;
                }
            }
        }
        // Above the capacity only while the bucket holds plenty.
        let hi = if level > 2.0 * cushion {
            self.cfg.max_rate
        } else {
            (capacity * self.cfg.target_fraction).min(self.cfg.max_rate)
        };
        self.rate = self
            .rate
            .clamp(self.cfg.min_rate, hi.max(self.cfg.min_rate));
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::at;
    use super::*;
    use crate::throttle::adaptive::AdaptiveConfig;
    use crate::throttle::Strategy;

    fn level(ms: u64, throttled: bool, level: f64) -> Feedback {
        Feedback {
            level_units: Some(level),
            ..at(ms, throttled, if throttled { 0.0 } else { 1.0 }, Some(1.25))
        }
    }

    #[test]
    fn with_a_reported_level_it_keeps_a_cushion() {
        let mut a = Adaptive::new(AdaptiveConfig::default());
        // Starts at cushion_start x capacity; the first throttle (an empty
        // bucket at the start) does not count against it.
        a.after_attempt(&level(0, true, 0.0));
        let start = a.rate().unwrap();
        assert!((start - 0.06 * 1.25).abs() < 1e-12, "{start}");
        // The level climbs well above the 12.5-unit cushion: the fleet is
        // slower than the refill, so the rate grows.
        a.after_attempt(&level(10_000, false, 10.0));
        a.after_attempt(&level(20_000, false, 30.0));
        let up = a.rate().unwrap();
        assert!(up > start, "{up} vs {start}");
        // The bucket stays empty: the fleet is at or over the refill rate.
        let mut t = 20_000;
        for _ in 0..5 {
            t += 10_000;
            a.after_attempt(&level(t, false, 0.0));
        }
        assert!(a.rate().unwrap() < up, "{:?}", a.rate());
        // A throttle later cuts it by cushion_decrease, once per cooldown.
        let before = a.rate().unwrap();
        a.after_attempt(&level(t + 10, true, 0.0));
        a.after_attempt(&level(t + 20, true, 0.0));
        assert!((a.rate().unwrap() - before * 0.75).abs() < 1e-12);
    }

    #[test]
    fn without_a_level_the_worker_path_is_unchanged() {
        let mut a = Adaptive::new(AdaptiveConfig::default());
        a.after_attempt(&at(0, false, 25.0, Some(200.0)));
        assert_eq!(a.rate(), Some(196.0));
        assert!(!a.level_mode);
    }

    #[test]
    fn an_empty_bucket_is_corrected_harder_than_a_low_one() {
        // Same history, bucket flat at 0 (empty: under 1 s of refill): the
        // default cuts with cushion_empty_gain, not the milder cushion_gain.
        let run = |cfg: AdaptiveConfig| {
            let mut a = Adaptive::new(cfg);
            for (t, throttled) in [(0, true), (10_000, false), (20_000, false)] {
                a.after_attempt(&level(t, throttled, 0.0));
            }
            a.rate().unwrap()
        };
        let default = run(AdaptiveConfig::default());
        let mild = run(AdaptiveConfig {
            cushion_empty_gain: 0.3,
            ..Default::default()
        });
        let start = 0.06 * 1.25;
        assert!(default < mild && mild < start, "{default} {mild} {start}");
    }
}
