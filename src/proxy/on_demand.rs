//! An on-demand table, as the proxy models it. Pure: time is passed in.
//!
//! - A new on-demand table "can immediately drive up to 4,000 write request
//!   units" (AWS re:Post, on-demand table throttling): its previous peak
//!   counts as half of that (`start`, `--on-demand-start`).
//! - It "instantly accommodates up to double the previous peak traffic";
//!   past that it may throttle until it has scaled, which AWS says to allow
//!   30 minutes for (developer guide, on-demand capacity mode; re:Post). So
//!   the table admits at most 2 x its peak, where the peak is the most it
//!   accepted in one second, counted only `scale_s` (`--on-demand-scale-s`,
//!   default 1,800 s) after that second.
//! - `OnDemandThroughput.MaxWriteRequestUnits` (`max`, `--on-demand-max`, or
//!   the table's own) caps it: "requests that exceed the maximum amount
//!   specified will be throttled" with a `MaxOnDemandThroughputExceeded`
//!   reason (developer guide, maximum throughput for on-demand tables).
//!
//! Simplified: one bucket of one second at the table's limit. The reason for
//! a throttle past 2 x the peak is not documented; the proxy says
//! `TableWriteKeyRangeThroughputExceeded` (the table's partitions have not
//! split yet), which clients treat as the table's limit when every key is
//! refused.

use std::collections::VecDeque;
use std::time::Duration;

use crate::bucket::Bucket;

/// A new on-demand table's write request units per second (AWS).
pub const NEW_TABLE_WRU: f64 = 4_000.0;
/// How long a new peak takes to count (AWS: 30 minutes).
pub const SCALE_S: f64 = 1_800.0;

/// Why a write did not fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The table's `MaxWriteRequestUnits`.
    Max,
    /// Twice the previous peak (the table has not scaled yet).
    Peak,
}

#[derive(Debug, Clone)]
pub struct OnDemand {
    /// The previous peak, units/s.
    peak: f64,
    max: Option<f64>,
    scale: Duration,
    bucket: Bucket,
    /// The second being counted: (its start, units accepted in it).
    second: (Duration, f64),
    /// Past seconds' totals not yet counted in the peak: (when they count,
    /// units).
    pending: VecDeque<(Duration, f64)>,
}

impl OnDemand {
    /// A table that starts admitting `start` units/s (its previous peak is
    /// half of it), capped at `max`; new peaks count after `scale_s`.
    pub fn new(start: f64, max: Option<f64>, scale_s: f64, now: Duration) -> Self {
        let peak = start / 2.0;
        let limit = limit(peak, max);
        Self {
            peak,
            max,
            scale: Duration::from_secs_f64(scale_s.max(0.0)),
            bucket: Bucket::new(limit, 1.0, 0.0, now),
            second: (now, 0.0),
            pending: VecDeque::new(),
        }
    }

    /// What the table admits now, units/s.
    pub fn limit(&self) -> f64 {
        limit(self.peak, self.max)
    }

    pub fn max(&self) -> Option<f64> {
        self.max
    }

    /// Twice the previous peak: what the table is warm for (DescribeTable's
    /// `WarmThroughput.WriteUnitsPerSecond`).
    pub fn warm(&self) -> f64 {
        2.0 * self.peak
    }

    /// A new maximum (UpdateTable's `OnDemandThroughput`), or none.
    pub fn set_max(&mut self, max: Option<f64>, now: Duration) {
        self.max = max.filter(|m| *m > 0.0);
        self.bucket.set_rate(self.limit(), now);
    }

    /// Takes `cost` if it fits.
    pub fn try_take(&mut self, cost: f64, now: Duration) -> Result<(), Refusal> {
        self.roll(now);
        if self.bucket.try_take(cost, now) {
            self.second.1 += cost;
            return Ok(());
        }
        if self.max.is_some_and(|m| m <= 2.0 * self.peak) {
            Err(Refusal::Max)
        } else {
            Err(Refusal::Peak)
        }
    }

    /// Units it would admit at once now.
    pub fn available(&mut self, now: Duration) -> f64 {
        self.roll(now);
        self.bucket.available(now)
    }

    /// Gives back what a write refused elsewhere (or failed upstream) took.
    pub fn refund(&mut self, cost: f64) {
        self.bucket.refund(cost);
        self.second.1 = (self.second.1 - cost).max(0.0);
    }

    /// Closes the seconds that ended and counts the peaks that are due.
    fn roll(&mut self, now: Duration) {
        let one = Duration::from_secs(1);
        let (start, units) = self.second;
        let whole = now.saturating_sub(start).as_secs();
        if whole > 0 {
            // The second counted ended (the ones after it, if any, were idle).
            if units > 0.0 {
                self.pending.push_back((start + one + self.scale, units));
            }
            self.second = (start + Duration::from_secs(whole), 0.0);
        }
        let before = self.limit();
        while let Some(&(due, units)) = self.pending.front() {
            if due > now {
                break;
            }
            self.peak = self.peak.max(units);
            self.pending.pop_front();
        }
        if self.limit() != before {
            self.bucket.set_rate(self.limit(), now);
        }
    }
}

fn limit(peak: f64, max: Option<f64>) -> f64 {
    let twice = 2.0 * peak;
    max.map_or(twice, |m| m.min(twice))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(x: f64) -> Duration {
        Duration::from_secs_f64(x)
    }

    /// Units admitted in one-unit writes every millisecond over [a, b).
    fn drive(t: &mut OnDemand, a: f64, b: f64) -> (f64, Option<Refusal>) {
        let (mut n, mut why) = (0.0, None);
        let mut ms = (a * 1000.0) as u64;
        while (ms as f64) < b * 1000.0 {
            match t.try_take(1.0, Duration::from_millis(ms)) {
                Ok(()) => n += 1.0,
                Err(r) => why = Some(r),
            }
            ms += 1;
        }
        (n, why)
    }

    #[test]
    fn a_new_table_admits_its_start_then_twice_each_new_peak_once_it_counts() {
        // Starts at 400/s (peak 200); new peaks count after 10 s.
        let mut t = OnDemand::new(400.0, None, 10.0, s(0.0));
        assert_eq!(t.limit(), 400.0);
        let (n, why) = drive(&mut t, 0.0, 5.0);
        // 400/s for 5 s, plus the full 1 s bucket at the start.
        assert!((n - 2_400.0).abs() <= 2.0, "{n}");
        assert_eq!(why, Some(Refusal::Peak));
        assert_eq!(t.limit(), 400.0, "the 400/s seconds do not count yet");
        drive(&mut t, 5.0, 11.5);
        // The first second took the full bucket and its refill (about 800):
        // 10 s later the table admits twice that.
        let limit = t.limit();
        assert!((1_590.0..=1_602.0).contains(&limit), "{limit}");
        assert_eq!(t.warm(), limit);
    }

    #[test]
    fn the_maximum_caps_it_and_says_so() {
        let mut t = OnDemand::new(4_000.0, Some(100.0), 10.0, s(0.0));
        assert_eq!(t.limit(), 100.0);
        let (n, why) = drive(&mut t, 0.0, 2.0);
        assert!((n - 300.0).abs() <= 2.0, "{n}");
        assert_eq!(why, Some(Refusal::Max));
        t.set_max(Some(200.0), s(2.0));
        let (n, _) = drive(&mut t, 2.0, 3.0);
        assert!(
            (n - 200.0).abs() <= 2.0,
            "a raised maximum applies at once: {n}"
        );
        t.set_max(None, s(3.0));
        assert_eq!(t.limit(), 4_000.0);
    }

    #[test]
    fn a_refund_gives_room_back() {
        let mut t = OnDemand::new(2.0, None, 10.0, s(0.0));
        assert!(t.try_take(2.0, s(0.0)).is_ok());
        assert!(t.try_take(1.0, s(0.0)).is_err());
        t.refund(2.0);
        assert!(t.try_take(2.0, s(0.0)).is_ok());
    }
}
