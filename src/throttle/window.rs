//! The accepted rate: capacity units the server accepted over a sliding
//! window of time. One type for the adaptive controller (its decrease
//! target) and for the per-table control (the `remaining` figure DynamoDB
//! does not give); the simulator keeps one per client. Pure: time is passed
//! in.
//!
//! Also [`MaxWindow`]: the largest value seen over a sliding window (what a
//! request size controller has seen the server admit whole lately).

use std::collections::VecDeque;
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct AcceptedWindow {
    span: Duration,
    /// (time, accepted units) within the span of the latest one.
    q: VecDeque<(Duration, f64)>,
}

impl AcceptedWindow {
    pub fn new(span: Duration) -> Self {
        Self {
            span,
            q: VecDeque::new(),
        }
    }

    /// Adds `units` accepted at `now`, forgetting what is older than the span.
    pub fn add(&mut self, now: Duration, units: f64) {
        self.q.push_back((now, units));
        while self
            .q
            .front()
            .is_some_and(|&(t, _)| now.saturating_sub(t) > self.span)
        {
            self.q.pop_front();
        }
    }

    fn sum(&self) -> f64 {
        self.q.iter().map(|(_, u)| u).sum::<f64>()
    }

    /// Units per second over the whole span.
    pub fn rate(&self) -> f64 {
        self.sum() / self.span.as_secs_f64()
    }

    /// Adds `units` accepted at `now`; returns the `remaining` figure
    /// (1 - accepted rate over the span / capacity) when the capacity is known.
    pub fn remaining(&mut self, now: Duration, units: f64, capacity: Option<f64>) -> Option<f64> {
        self.add(now, units);
        capacity.map(|c| (1.0 - self.rate() / c).clamp(0.0, 1.0))
    }

    /// Units per second over the time since the oldest entry, counted as at
    /// least a quarter of the span and at most the span (a young history is
    /// not divided by a full span); 0 when empty.
    pub fn rate_so_far(&self, now: Duration) -> f64 {
        let Some(&(first, _)) = self.q.front() else {
            return 0.0;
        };
        let span = now.saturating_sub(first).max(self.span / 4).min(self.span);
        self.sum() / span.as_secs_f64()
    }
}

/// The largest value added within `span` of the latest call.
#[derive(Debug, Clone, PartialEq)]
pub struct MaxWindow {
    span: Duration,
    /// (time, value), each value larger than every later one.
    q: VecDeque<(Duration, f64)>,
}

impl MaxWindow {
    pub fn new(span: Duration) -> Self {
        Self {
            span,
            q: VecDeque::new(),
        }
    }

    fn expire(&mut self, now: Duration) {
        while self
            .q
            .front()
            .is_some_and(|&(t, _)| now.saturating_sub(t) > self.span)
        {
            self.q.pop_front();
        }
    }

    /// Adds `value` seen at `now`.
    pub fn add(&mut self, now: Duration, value: f64) {
        self.expire(now);
        while self.q.back().is_some_and(|&(_, v)| v <= value) {
            self.q.pop_back();
        }
        self.q.push_back((now, value));
    }

    /// The largest value added within the span of `now` (None: none).
    pub fn max(&mut self, now: Duration) -> Option<f64> {
        self.expire(now);
        self.q.front().map(|&(_, v)| v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(x: f64) -> Duration {
        Duration::from_secs_f64(x)
    }

    #[test]
    fn forgets_what_is_older_than_the_span() {
        let mut w = AcceptedWindow::new(s(1.0));
        w.add(s(0.0), 10.0);
        w.add(s(0.5), 10.0);
        assert_eq!(w.rate(), 20.0);
        w.add(s(1.2), 10.0);
        assert_eq!(w.rate(), 20.0, "the first is out");
    }

    #[test]
    fn the_largest_value_within_the_span_and_no_more_kept_than_needed() {
        let mut w = MaxWindow::new(s(10.0));
        assert_eq!(w.max(s(0.0)), None);
        w.add(s(0.0), 50.0);
        w.add(s(2.0), 30.0);
        w.add(s(3.0), 20.0);
        w.add(s(4.0), 25.0); // the 20 can never be the largest again
        assert_eq!(w.q.len(), 3);
        assert_eq!(w.max(s(5.0)), Some(50.0));
        assert_eq!(w.max(s(11.0)), Some(30.0), "the 50 is out");
        assert_eq!(w.max(s(13.5)), Some(25.0));
        assert_eq!(w.max(s(14.5)), None);
        // Adding expires too: a window only ever added to stays small.
        for t in 0..1_000 {
            w.add(s(100.0 + f64::from(t)), 1_000.0 - f64::from(t));
        }
        assert_eq!(w.q.len(), 11);
    }

    #[test]
    fn a_young_history_is_not_divided_by_the_full_span() {
        let mut w = AcceptedWindow::new(s(2.0));
        assert_eq!(w.rate_so_far(s(0.0)), 0.0);
        w.add(s(0.0), 10.0);
        assert_eq!(
            w.rate_so_far(s(0.1)),
            20.0,
            "at least a quarter of the span"
        );
        assert_eq!(w.rate_so_far(s(1.0)), 10.0);
        assert_eq!(w.rate_so_far(s(9.0)), 5.0, "at most the span");
    }
}
