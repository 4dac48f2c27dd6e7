//! The long-run gate of a slotted pacer. Pure: time is passed in.
//!
//! A slotted pacer's limiter paces at its rate / its parts' width and fills
//! between its parts, so each part opens with up to a burst: right for the
//! table, but above the rate wherever that burst is more than the rate
//! gives in a period (at 18 units/s and 25-unit chunks a worker released a
//! chunk every period, 25 units/s). The gate is a bucket of units filling
//! at the rate asked, which holds a chunk plus a period of the rate: the
//! period's slack lets a chunk that waited for its part (or for the part's
//! first half) catch up later, so the gate takes nothing where the parts
//! release less than the rate.

use std::time::Duration;

use governor::clock::Reference;
use governor::nanos::Nanos;

#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Average {
    /// Units per second.
    rate: f64,
    /// Units the bucket holds.
    capacity: f64,
    /// When the bucket is full again (the clock's time).
    full_at: Nanos,
}

impl Average {
    /// A gate at `rate` holding `capacity` units that replaces `old` at
    /// `now`: it keeps the units the old one missed, now at the new rate,
    /// so a rate change neither forgives nor adds units. Without one (slots
    /// begin) it is full: holding back its first period cost three clients
    /// of `ingest sim`'s shallow-bucket (seed 1) 77.1% -> 74.5% utilization
    /// at 0.52% -> 1.22% throttled (the pacer's own limiter holds the debt
    /// of the rate before).
    pub(super) fn replacing(old: Option<Average>, rate: f64, capacity: f64, now: Nanos) -> Self {
        let missing = old.map_or(0.0, |o| o.missing(now));
        Self {
            rate,
            capacity,
            full_at: now + Nanos::from(Duration::from_secs_f64(missing / rate)),
        }
    }

    /// Units missing from a full bucket at `now`.
    pub(super) fn missing(&self, now: Nanos) -> f64 {
        Duration::from(self.full_at.duration_since(now)).as_secs_f64() * self.rate
    }

    /// How long from `now` until `n` units are in the bucket (zero: now).
    pub(super) fn wait(&self, now: Nanos, n: u32) -> Duration {
        let short = self.missing(now) + f64::from(n) - self.capacity;
        Duration::from_secs_f64((short / self.rate).max(0.0))
    }

    /// Takes `n` units (after `wait` said zero).
    pub(super) fn take(&mut self, now: Nanos, n: u32) {
        let since = self.full_at.max(now);
        self.full_at = since + Nanos::from(Duration::from_secs_f64(f64::from(n) / self.rate));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: f64) -> Nanos {
        Nanos::from(Duration::from_secs_f64(s))
    }

    #[test]
    fn it_holds_a_capacity_and_refills_at_its_rate() {
        // 18 units/s, a chunk of 25 plus a period: 43.
        let mut g = Average::replacing(None, 18.0, 43.0, at(10.0));
        assert_eq!(g.wait(at(10.0), 25), Duration::ZERO, "starts full");
        g.take(at(10.0), 25);
        assert!((g.missing(at(10.0)) - 25.0).abs() < 1e-6);
        // 18 left: 7 more to wait for, at 18/s.
        let w = g.wait(at(10.0), 25).as_secs_f64();
        assert!((w - 7.0 / 18.0).abs() < 1e-6, "{w}");
        g.take(at(10.0 + w), 25);
        // Empty now: a chunk takes 25/18 s, in the long run the rate.
        let w = g.wait(at(10.0 + 7.0 / 18.0), 25).as_secs_f64();
        assert!((w - 25.0 / 18.0).abs() < 1e-6, "{w}");
        // Never more than full, however long it waited.
        assert_eq!(g.missing(at(1_000.0)), 0.0);
    }

    #[test]
    fn a_rate_change_keeps_the_units_missed() {
        let mut g = Average::replacing(None, 20.0, 45.0, at(0.0));
        g.take(at(0.0), 40);
        // 40 units missing: at 10/s they take 4 s to come back, not 2.
        let h = Average::replacing(Some(g), 10.0, 35.0, at(0.0));
        assert!((h.missing(at(0.0)) - 40.0).abs() < 1e-6);
        assert!((h.missing(at(2.0)) - 20.0).abs() < 1e-6);
        assert_eq!(h.missing(at(4.0)), 0.0);
    }
}
