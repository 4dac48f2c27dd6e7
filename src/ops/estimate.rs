//! The arithmetic of progress, pure: the backlog over the held partitions, a
//! smoothed rate, the rate pacing allows, and the ETA.

use std::time::{Duration, Instant};

/// Records to go through, and done, over the held partitions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Backlog {
    pub total: u64,
    pub done: u64,
}

impl Backlog {
    pub fn remaining(&self) -> u64 {
        self.total.saturating_sub(self.done)
    }
}

/// Sums `(start, end, position)` per partition; the position is the next
/// offset to commit (None: nothing written yet). Offsets are record counts
/// here (compacted or transactional topics make it an upper bound).
pub fn backlog(parts: impl Iterator<Item = (i64, i64, Option<i64>)>) -> Backlog {
    let mut b = Backlog::default();
    for (start, end, at) in parts {
        let span = (end - start).max(0);
        let done = (at.unwrap_or(start) - start).clamp(0, span);
        b.total += span as u64;
        b.done += done as u64;
    }
    b
}

/// A smoothed rate (per second) from successive `(time, count)` samples.
#[derive(Debug, Clone)]
pub struct RateMeter {
    last: Option<(Instant, u64)>,
    /// The count has moved: the work has started.
    moved: bool,
    rate: Option<f64>,
    /// Smoothing time constant.
    tau: Duration,
}

impl RateMeter {
    pub fn new(tau: Duration) -> Self {
        Self {
            last: None,
            moved: false,
            rate: None,
            tau,
        }
    }

    /// Adds a sample; returns the smoothed rate once the count has moved
    /// over a whole interval. Samples before the first record is done
    /// (joining the group, finding the table) are not a rate of 0:
    /// smoothing from 0 would inflate the ETA for many seconds, so the
    /// meter starts when the work does. Nor is the interval in which the
    /// count first moves a rate: the work started somewhere within it, with
    /// its first request's round trip (a batch run's first progress line
    /// read 12 records/s where the run went at about 70, and predicted 66 s
    /// for an 11 s run). The rate starts from that interval's end.
    pub fn observe(&mut self, now: Instant, count: u64) -> Option<f64> {
        if !self.moved {
            self.moved = self.last.is_some_and(|(_, c)| c != count);
            self.last = Some((now, count));
            return None;
        }
        if let Some((t, c)) = self.last {
            let dt = now.saturating_duration_since(t).as_secs_f64();
            if dt <= 0.0 {
                return self.rate;
            }
            let inst = count.saturating_sub(c) as f64 / dt;
            let w = 1.0 - (-dt / self.tau.as_secs_f64()).exp();
            self.rate = Some(match self.rate {
                None => inst,
                Some(r) => r + w * (inst - r),
            });
        }
        self.last = Some((now, count));
        self.rate
    }
}

/// Records per second the pacing allows: WCU/s over WCU per record.
pub fn paced_records(paced_wcu: Option<f64>, wcu_per_record: Option<f64>) -> Option<f64> {
    match (paced_wcu, wcu_per_record) {
        (Some(p), Some(w)) if p > 0.0 && w > 0.0 => Some(p / w),
        _ => None,
    }
}

/// Time to write `remaining` records at the slower of the observed and the
/// paced rate (whichever is known). None when neither is, or nothing moves.
pub fn eta(remaining: u64, observed: Option<f64>, paced: Option<f64>) -> Option<Duration> {
    if remaining == 0 {
        return Some(Duration::ZERO);
    }
    let rate = match (observed, paced) {
        (Some(o), Some(p)) => o.min(p),
        (Some(r), None) | (None, Some(r)) => r,
        (None, None) => return None,
    };
    (rate > 1e-9).then(|| Duration::from_secs_f64((remaining as f64 / rate).min(365.0 * 86_400.0)))
}

/// One progress reading, for the log line and the metrics endpoint.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProgressView {
    pub backlog: Backlog,
    pub records_per_s: Option<f64>,
    pub paced_records_per_s: Option<f64>,
    pub eta: Option<Duration>,
}

/// "1h 02m", "3m 05s", "42s" (whole seconds, rounded up).
pub fn fmt_duration(d: Duration) -> String {
    let s = d.as_secs_f64().ceil() as u64;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m {:02}s", s / 60, s % 60),
        _ => format!("{}h {:02}m", s / 3600, (s % 3600) / 60),
    }
}
