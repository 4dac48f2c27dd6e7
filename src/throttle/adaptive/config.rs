//! The adaptive controller's settings, their defaults and their checks.

use crate::throttle::ensure;

#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct AdaptiveConfig {
    /// Starting rate (units/s) when the capacity is unknown.
    pub start_rate: f64,
    pub min_rate: f64,
    pub max_rate: f64,
    /// Fraction of the known capacity one client paces at most.
    pub target_fraction: f64,
    /// Multiplicative decrease on a congestion event.
    pub decrease: f64,
    /// The decrease on the first congestion event, met at the fair share
    /// of a known capacity: the table has less free than the group's share
    /// by an amount nothing tells (another job, the live application), and
    /// two equal jobs are met at twice what the table takes.
    pub first_decrease: f64,
    /// Throttles within this time of a decrease count as the same event.
    pub cooldown_ms: f64,
    /// Seconds to climb back to the rate of the last event.
    pub probe_s: f64,
    /// Window of the accepted-rate estimate.
    pub window_ms: f64,
    /// Rescale with the capacity the feedback reports.
    pub follow_capacity: bool,
    /// Seconds to climb back to the fair share after a decrease below it.
    pub fast_recovery_s: f64,
    /// Never pace above the expected share (capacity x share x
    /// target_fraction) when the share is known: no probing for idle peers'
    /// capacity, in exchange for fewer throttles when every peer is busy.
    pub cap_at_share: bool,
    /// Level mode: seconds of capacity to keep in the server's bucket.
    pub cushion_s: f64,
    /// Level mode: how much of the computed correction to apply per answer.
    pub cushion_gain: f64,
    /// Level mode: the span over which the level's trend is measured.
    pub cushion_window_s: f64,
    /// Level mode: starting rate as a fraction of the capacity when the share
    /// is unknown.
    pub cushion_start: f64,
    /// Periods of one unit at the starting rate over which the first call
    /// is spread (uniformly); 0 = send at once.
    pub start_splay: f64,
    /// Level mode: multiplicative decrease on a throttle.
    pub cushion_decrease: f64,
    /// Level mode: `cushion_gain` while the bucket holds less than one
    /// second of refill (its flat trend then under-reads the fleet's rate).
    pub cushion_empty_gain: f64,
    /// Shrink requests to what a partial answer shows the server admits at
    /// once, instead of cutting the rate ([`super::size`]).
    pub shrink_requests: bool,
    /// Where the server admits at once less than a tenth of a second of the
    /// table's capacity, keep to the fleet's time slots (see
    /// [`crate::throttle::pace::Slots`]) so that peers' requests never meet.
    pub time_slots: bool,
    /// Where other writers' throttles came lately and the job as a whole
    /// paces under 0.6 of its shares, keep each worker within 0.5-1.25 of
    /// its part of the job's pace (from the job's beats), so that none
    /// starves while its peers take what is free (`Strategy::job_part`).
    /// The beats need the lessons topic and `split_with_jobs` (both on by
    /// default); without them this does nothing. On by default since
    /// 2026-12-02 (its cost, on a shallow bucket that also has another
    /// writer, is in the README's "A job's workers kept together").
    pub keep_together: bool,
    /// Below this fraction of the fair share (capacity x share x target), a
    /// partial answer is not a rate signal: the request is too large.
    pub slow_below: f64,
    /// Seconds a shrunk request size holds before it grows back.
    pub size_hold_s: f64,
    /// Growth of the request size per full answer after the hold.
    pub size_grow: f64,
    /// Two congestion events below the fair share within this many seconds
    /// say the table has less free than the share (another writer, a hot
    /// key range): the rate then stops climbing straight back to the share
    /// (fast recovery) until this long passes without such an event, and
    /// probes as CUBIC does instead. 0 disables.
    pub settle_s: f64,
    /// While settled, seconds to climb back to just under the rate of the
    /// last event (instead of `probe_s`): the table's free capacity is known
    /// to be about there, so it is probed more slowly. The same curve, past
    /// that rate, for as long again after a settle ends.
    pub settle_probe_s: f64,
    /// The longest a settle lasts (each after the first doubles).
    pub settle_max_s: f64,
    /// While settled, the multiplicative decrease on a congestion event.
    pub settle_decrease: f64,
}

impl Default for AdaptiveConfig {
    fn default() -> Self {
        Self {
            start_rate: 100.0,
            min_rate: 0.01,
            max_rate: 1_000_000.0,
            target_fraction: 0.98,
            decrease: 0.9,
            first_decrease: 0.5,
            cooldown_ms: 1000.0,
            probe_s: 30.0,
            window_ms: 2000.0,
            follow_capacity: true,
            fast_recovery_s: 5.0,
            cap_at_share: true,
            cushion_s: 10.0,
            cushion_gain: 0.3,
            cushion_window_s: 30.0,
            cushion_start: 0.06,
            start_splay: 1.0,
            cushion_decrease: 0.75,
            cushion_empty_gain: 0.6,
            shrink_requests: true,
            time_slots: true,
            keep_together: true,
            slow_below: 0.5,
            size_hold_s: 30.0,
            size_grow: 1.25,
            settle_s: 30.0,
            settle_probe_s: 90.0,
            settle_max_s: 600.0,
            settle_decrease: 0.8,
        }
    }
}

impl AdaptiveConfig {
    pub fn validate(&self) -> Result<(), String> {
        ensure(
            self.min_rate > 0.0 && self.max_rate >= self.min_rate,
            || "min_rate must be > 0 and max_rate >= min_rate".into(),
        )?;
        ensure(
            self.start_rate >= self.min_rate && self.start_rate <= self.max_rate,
            || "start_rate must be between min_rate and max_rate".into(),
        )?;
        ensure(
            self.target_fraction > 0.0 && self.target_fraction <= 1.5,
            || {
                format!(
                    "target_fraction = {}: must be in (0, 1.5]",
                    self.target_fraction
                )
            },
        )?;
        ensure(self.decrease > 0.0 && self.decrease < 1.0, || {
            format!("decrease = {}: must be in (0, 1)", self.decrease)
        })?;
        ensure(
            self.first_decrease > 0.0 && self.first_decrease < 1.0,
            || {
                format!(
                    "first_decrease = {}: must be in (0, 1)",
                    self.first_decrease
                )
            },
        )?;
        ensure(
            self.probe_s > 0.0 && self.window_ms > 0.0 && self.cooldown_ms >= 0.0,
            || "probe_s and window_ms must be > 0, cooldown_ms >= 0".into(),
        )?;
        ensure(self.fast_recovery_s > 0.0, || {
            format!("fast_recovery_s = {}: must be > 0", self.fast_recovery_s)
        })?;
        ensure(
            self.cushion_s > 0.0
                && self.cushion_window_s > 0.0
                && self.cushion_gain > 0.0
                && self.cushion_gain <= 1.0
                && self.cushion_start > 0.0
                && self.cushion_start <= 1.0,
            || {
                "cushion_s, cushion_window_s must be > 0; cushion_gain, cushion_start in (0, 1]"
                    .into()
            },
        )?;
        ensure(
            self.cushion_decrease > 0.0
                && self.cushion_decrease < 1.0
                && self.cushion_empty_gain > 0.0
                && self.cushion_empty_gain <= 1.0,
            || "cushion_decrease must be in (0, 1), cushion_empty_gain in (0, 1]".into(),
        )?;
        ensure((0.0..=1.0).contains(&self.slow_below), || {
            format!("slow_below = {}: must be in [0, 1]", self.slow_below)
        })?;
        ensure(self.size_hold_s >= 0.0 && self.size_grow > 1.0, || {
            format!(
                "size_hold_s = {}, size_grow = {}: must be >= 0 and > 1",
                self.size_hold_s, self.size_grow
            )
        })?;
        ensure(
            (0.0..=3_600.0).contains(&self.settle_s)
                && self.settle_probe_s > 0.0
                && self.settle_max_s >= self.settle_s,
            || {
                format!(
                    "settle_s = {}, settle_probe_s = {}, settle_max_s = {}: must be in [0, 3600], > 0 and >= settle_s",
                    self.settle_s, self.settle_probe_s, self.settle_max_s
                )
            },
        )?;
        ensure((0.0..=10.0).contains(&self.start_splay), || {
            format!("start_splay = {}: must be in [0, 10]", self.start_splay)
        })?;
        Ok(())
    }
}
