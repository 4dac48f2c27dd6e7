//! A token bucket, with DynamoDB-style burst credit. Pure: time is passed
//! in. The throttle proxy and the simulator model a table's provisioned
//! write capacity with it; a slotted pacer keeps to its rate in the long run
//! with one (`throttle::pace`).
//!
//! Tokens refill at `rate` WCU/s up to `burst_s` seconds' worth. Refill that
//! overflows a full bucket is banked as burst credit, up to `credit_s` seconds
//! of capacity (DynamoDB keeps up to 300 s of unused capacity). A write takes
//! its whole cost, from the bucket first, then from the credit, or nothing.

use std::time::Duration;

#[derive(Debug, Clone)]
pub struct Bucket {
    rate: f64,
    burst_s: f64,
    credit_s: f64,
    tokens: f64,
    credit: f64,
    last: Duration,
}

impl Bucket {
    /// A full bucket (no credit yet) at `now`.
    pub fn new(rate: f64, burst_s: f64, credit_s: f64, now: Duration) -> Self {
        Self {
            rate,
            burst_s,
            credit_s,
            tokens: rate * burst_s,
            credit: 0.0,
            last: now,
        }
    }

    pub fn rate(&self) -> f64 {
        self.rate
    }

    fn refill(&mut self, now: Duration) {
        let dt = now.saturating_sub(self.last).as_secs_f64();
        self.last = self.last.max(now);
        let cap = self.rate * self.burst_s;
        let filled = self.tokens + self.rate * dt;
        let overflow = (filled - cap).max(0.0);
        self.tokens = filled.min(cap);
        self.credit = (self.credit + overflow).min(self.rate * self.credit_s);
    }

    /// Takes `cost` if available (bucket first, then credit).
    pub fn try_take(&mut self, cost: f64, now: Duration) -> bool {
        self.refill(now);
        if self.tokens + self.credit + 1e-9 < cost {
            return false;
        }
        let from_bucket = cost.min(self.tokens);
        self.tokens -= from_bucket;
        self.credit = (self.credit - (cost - from_bucket)).max(0.0);
        true
    }

    /// Gives back what a write that failed downstream took.
    pub fn refund(&mut self, cost: f64) {
        self.tokens = (self.tokens + cost).min(self.rate * self.burst_s);
    }

    /// Changes the rate (auto scaling); the bucket keeps its fill level.
    pub fn set_rate(&mut self, rate: f64, now: Duration) {
        self.reshape(rate, self.burst_s, now);
    }

    /// Changes the rate and the depth (seconds of the rate the bucket
    /// holds); the bucket keeps its fill level, capped at the new depth.
    pub fn reshape(&mut self, rate: f64, burst_s: f64, now: Duration) {
        self.refill(now);
        self.rate = rate;
        self.burst_s = burst_s;
        self.tokens = self.tokens.min(rate * burst_s);
        self.credit = self.credit.min(rate * self.credit_s);
    }

    /// How long from `now` until `cost` is available (zero: now; at least a
    /// nanosecond otherwise, so that a caller woken then finds it). Refill
    /// only: a cost above the bucket's depth plus its credit never comes.
    pub fn wait_for(&mut self, cost: f64, now: Duration) -> Duration {
        let short = cost - self.available(now);
        if short <= 1e-9 {
            return Duration::ZERO;
        }
        Duration::from_secs_f64(short / self.rate).max(Duration::from_nanos(1))
    }

    /// Tokens available now (bucket plus credit).
    pub fn available(&mut self, now: Duration) -> f64 {
        self.refill(now);
        self.tokens + self.credit
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(x: f64) -> Duration {
        Duration::from_secs_f64(x)
    }

    #[test]
    fn refills_at_the_rate_up_to_one_burst() {
        let mut b = Bucket::new(200.0, 1.0, 0.0, s(0.0));
        assert!(b.try_take(200.0, s(0.0)));
        assert!(!b.try_take(1.0, s(0.0)));
        assert!(b.try_take(100.0, s(0.5)));
        assert!(!b.try_take(1.0, s(0.5)));
        assert!(
            (b.available(s(10.0)) - 200.0).abs() < 1e-6,
            "capped at one second"
        );
    }

    #[test]
    fn unused_capacity_is_banked_as_burst_credit() {
        let mut b = Bucket::new(100.0, 1.0, 300.0, s(0.0));
        // Starts full (1 s); 10 s idle refill all overflow into the credit.
        assert!((b.available(s(10.0)) - 1100.0).abs() < 1e-6);
        assert!(b.try_take(1100.0, s(10.0)));
        assert!(!b.try_take(1.0, s(10.0)));
        // Credit is capped at credit_s seconds of capacity.
        assert!((b.available(s(10_000.0)) - 100.0 * 301.0).abs() < 1e-6);
    }

    #[test]
    fn a_write_takes_its_whole_cost_or_nothing() {
        let mut b = Bucket::new(10.0, 1.0, 0.0, s(0.0));
        assert!(!b.try_take(11.0, s(0.0)));
        assert!((b.available(s(0.0)) - 10.0).abs() < 1e-9, "nothing taken");
        b.refund(5.0);
        assert!(
            (b.available(s(0.0)) - 10.0).abs() < 1e-9,
            "refunds never overfill"
        );
    }

    #[test]
    fn it_says_how_long_a_cost_takes_to_refill() {
        let mut b = Bucket::new(18.0, 43.0 / 18.0, 0.0, s(10.0));
        assert_eq!(b.wait_for(25.0, s(10.0)), Duration::ZERO, "starts full");
        assert!(b.try_take(25.0, s(10.0)));
        // 18 left: 7 more to wait for, at 18/s.
        let w = b.wait_for(25.0, s(10.0)).as_secs_f64();
        assert!((w - 7.0 / 18.0).abs() < 1e-6, "{w}");
        assert!(b.try_take(25.0, s(10.0 + w)));
        // Empty: a cost of 25 takes 25/18 s; waited for, it is there.
        let w = b.wait_for(25.0, s(10.0 + 7.0 / 18.0));
        assert!((w.as_secs_f64() - 25.0 / 18.0).abs() < 1e-6, "{w:?}");
        assert!(b.try_take(25.0, s(10.0 + 7.0 / 18.0) + w));
    }

    #[test]
    fn a_reshape_keeps_the_fill_level_within_the_new_depth() {
        let mut b = Bucket::new(20.0, 45.0 / 20.0, 0.0, s(0.0));
        assert!(b.try_take(40.0, s(0.0)));
        // 5 left; at 10/s and 3.5 s deep (35), the 30 missing take 3 s.
        b.reshape(10.0, 3.5, s(0.0));
        assert!((b.available(s(0.0)) - 5.0).abs() < 1e-6);
        assert!((b.available(s(2.0)) - 25.0).abs() < 1e-6);
        assert!((b.available(s(9.0)) - 35.0).abs() < 1e-6);
        // Shallower than its level: capped.
        b.reshape(10.0, 1.0, s(9.0));
        assert!((b.available(s(9.0)) - 10.0).abs() < 1e-6);
    }

    #[test]
    fn rate_changes_apply_from_now() {
        let mut b = Bucket::new(100.0, 1.0, 0.0, s(0.0));
        assert!(b.try_take(100.0, s(0.0)));
        b.set_rate(50.0, s(0.0));
        assert!((b.available(s(0.5)) - 25.0).abs() < 1e-6);
        b.set_rate(300.0, s(0.5));
        assert!(
            (b.available(s(1.5)) - 300.0).abs() < 1e-6,
            "{}",
            b.available(s(1.5))
        );
    }
}
