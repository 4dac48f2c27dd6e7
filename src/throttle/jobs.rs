//! Jobs sharing a table: how much of it this job takes when other ingest
//! jobs (other consumer groups) write to the same table. Pure: the beats
//! heard and the time are passed in.
//!
//! Within a job, each worker's share of a table comes from its group's
//! backlog (`sink::tables::share`). Another job on the table is invisible
//! there (ConsumedCapacity is the job's own), so two jobs used to find each
//! other by throttles, each believing the whole table was its own. Every
//! worker now says, about once a second per table, that its job writes the
//! table ([`Beat`], on the lessons topic), whether it has work waiting
//! (`busy`) and the units/s it wrote. From the beats of the last
//! [`STALE`], each worker computes its job's [`Split`]:
//! - busy jobs (its own counted always) split what the idle ones leave in
//!   equal parts;
//! - an idle job (caught up, or finished) keeps only what it writes;
//! - each job's time slots (where the table admits little at once) are kept
//!   in its own segment of the period, jobs ordered by name, so that two
//!   jobs' slots do not overlap.
//!
//! The part scales the worker's share, so two jobs of three workers pace
//! as one job of six. A job that stops beating (ended, killed, its beats
//! lost) is forgotten after [`STALE`], and its part returns to the others.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

/// How often a worker says, per table, that its job writes it.
pub const BEAT: Duration = Duration::from_secs(1);

/// Beats older than this are of a job no longer there.
pub const STALE: Duration = Duration::from_secs(3);

/// No job's part is taken below this part of an equal split, however much
/// the idle jobs write (their rates are measured over a second and can
/// overstate; the throttles teach the rest).
const FLOOR: f64 = 0.25;

/// A part that moved by less than this (relatively) is not a new split:
/// the idle jobs' rates vary from beat to beat, and each new split rescales
/// the workers' rates.
const HYSTERESIS: f64 = 0.05;

/// What a worker said about a table.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Beat {
    /// Records wait to be written to the table (its queue, its pacer, a
    /// throttle's backoff): the job wants at least its part.
    pub busy: bool,
    /// The units/s it wrote to the table since its last beat.
    pub rate: f64,
    /// The units/s it paces the table at now (0: unknown).
    pub pace: f64,
    /// Its fair share of the table, in units/s (0: unknown).
    pub fair: f64,
}

/// This job's part of a table among the jobs writing it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Split {
    /// The part of the table this job takes, in (0, 1].
    pub part: f64,
    /// Where in each period of the time slots this job's slots are kept:
    /// (start, end), fractions of the period.
    pub segment: (f64, f64),
    /// Jobs wanting their part, this one included.
    pub busy_jobs: usize,
    /// Jobs writing the table, this one included.
    pub jobs: usize,
}

impl Default for Split {
    fn default() -> Self {
        Split {
            part: 1.0,
            segment: (0.0, 1.0),
            busy_jobs: 1,
            jobs: 1,
        }
    }
}

impl Split {
    /// Whether `next` differs enough from this split to be applied.
    pub fn moved(&self, next: &Split) -> bool {
        self.busy_jobs != next.busy_jobs
            || self.jobs != next.jobs
            || (next.part - self.part).abs() > HYSTERESIS * self.part.max(next.part) + 1e-9
    }

    /// A worker's time slots (`parts` of the period, its job's tiling)
    /// placed in this job's segment.
    pub fn place(&self, parts: &[(f64, f64)]) -> Vec<(f64, f64)> {
        let (at, end) = self.segment;
        let w = end - at;
        parts
            .iter()
            .map(|(a, b)| (at + w * a, at + w * b))
            .collect()
    }
}

/// The other jobs' beats on one table, by job and worker.
#[derive(Debug, Clone, Default)]
pub struct Jobs {
    /// job -> worker -> (when heard, the beat).
    heard: BTreeMap<String, HashMap<String, (Duration, Beat)>>,
}

impl Jobs {
    /// A beat of `worker` of `job`, sent at `at` (on the caller's clock).
    pub fn hear(&mut self, job: &str, worker: &str, at: Duration, beat: Beat) {
        let workers = self.heard.entry(job.to_string()).or_default();
        match workers.get(worker) {
            Some((t, _)) if *t > at => {}
            _ => {
                workers.insert(worker.to_string(), (at, beat));
            }
        }
    }

    /// Forgets beats older than [`STALE`] at `now`.
    pub fn expire(&mut self, now: Duration) {
        for workers in self.heard.values_mut() {
            workers.retain(|_, (t, _)| now.saturating_sub(*t) <= STALE);
        }
        self.heard.retain(|_, w| !w.is_empty());
    }

    /// A worker's part of what its job `mine` paces the table at, at
    /// `now`: the pacing rates of the job's busy workers heard (beats of
    /// `mine`, the worker's own not among them) and its own (`me`) summed,
    /// times its fair share over theirs summed. None where no busy peer
    /// with a fair share was heard, or its own share is unknown (see
    /// `Strategy::job_part`).
    pub fn job_part(&self, mine: &str, now: Duration, me: Beat) -> Option<f64> {
        if me.fair.is_nan() || me.fair <= 0.0 {
            return None;
        }
        let (peers, pace, fair) = self
            .heard
            .get(mine)?
            .values()
            .filter(|(t, b)| now.saturating_sub(*t) <= STALE && b.busy && b.fair > 0.0)
            .fold((0, me.pace.max(0.0), me.fair), |(n, p, f), (_, b)| {
                (n + 1, p + b.pace.max(0.0), f + b.fair)
            });
        (peers > 0).then(|| pace * me.fair / fair)
    }

    /// `mine`'s split of a table of `capacity` units/s (None: unknown, as
    /// on an on-demand table without a maximum) at `now`.
    pub fn split(&self, mine: &str, now: Duration, capacity: Option<f64>) -> Split {
        let mut busy: Vec<&str> = vec![mine];
        let mut idle_rate = 0.0;
        let mut jobs = 1;
        for (job, workers) in &self.heard {
            let live: Vec<&Beat> = workers
                .values()
                .filter(|(t, _)| now.saturating_sub(*t) <= STALE)
                .map(|(_, b)| b)
                .collect();
            if job == mine || live.is_empty() {
                continue;
            }
            jobs += 1;
            if live.iter().any(|b| b.busy) {
                busy.push(job);
            } else {
                idle_rate += live.iter().map(|b| b.rate.max(0.0)).sum::<f64>();
            }
        }
        busy.sort_unstable();
        let n = busy.len() as f64;
        // In steps of the hysteresis (to the nearest): an idle job's rate
        // moving about a step's edge moves the part by one step, which is
        // no new split (see `Split::moved`), and a trickle under half a
        // step is nothing.
        let free = match capacity.filter(|c| *c > 0.0) {
            Some(c) => {
                let free = ((c - idle_rate) / c).clamp(FLOOR, 1.0);
                ((free / HYSTERESIS).round() * HYSTERESIS).clamp(FLOOR, 1.0)
            }
            None => 1.0,
        };
        let rank = busy.iter().position(|j| *j == mine).unwrap_or(0) as f64;
        Split {
            part: free / n,
            segment: (rank / n, (rank + 1.0) / n),
            busy_jobs: busy.len(),
            jobs,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: fn(u64) -> Duration = Duration::from_secs;

    fn busy(rate: f64) -> Beat {
        Beat {
            busy: true,
            rate,
            ..Beat::default()
        }
    }

    fn idle(rate: f64) -> Beat {
        Beat {
            busy: false,
            rate,
            ..Beat::default()
        }
    }

    #[test]
    fn alone_a_job_takes_the_whole_table() {
        let j = Jobs::default();
        assert_eq!(j.split("a", S(5), Some(200.0)), Split::default());
    }

    #[test]
    fn busy_jobs_split_the_table_evenly_in_segments_ordered_by_name() {
        let mut j = Jobs::default();
        j.hear("b", "b1", S(1), busy(100.0));
        j.hear("b", "b2", S(1), idle(0.0));
        let a = j.split("a", S(2), Some(200.0));
        assert_eq!((a.part, a.segment, a.busy_jobs), (0.5, (0.0, 0.5), 2));
        let b = {
            let mut j = Jobs::default();
            j.hear("a", "a1", S(1), busy(100.0));
            j.split("b", S(2), Some(200.0))
        };
        assert_eq!((b.part, b.segment), (0.5, (0.5, 1.0)), "the other half");
        j.hear("c", "c1", S(1), busy(0.0));
        let a = j.split("a", S(2), None);
        assert!((a.part - 1.0 / 3.0).abs() < 1e-12, "{a:?}");
    }

    #[test]
    fn an_idle_job_keeps_only_what_it_writes() {
        let mut j = Jobs::default();
        j.hear("b", "b1", S(1), idle(30.0));
        j.hear("b", "b2", S(1), idle(20.0));
        let a = j.split("a", S(2), Some(200.0));
        assert_eq!((a.part, a.busy_jobs, a.jobs), (0.75, 1, 2));
        // However much it wrote, never below a quarter of an even split.
        j.hear("b", "b3", S(1), idle(500.0));
        assert_eq!(j.split("a", S(2), Some(200.0)).part, 0.25);
        // Nothing known of the capacity: its rate cannot be weighed.
        assert_eq!(j.split("a", S(2), None).part, 1.0);
        // A trickle (under 2.5% of the table) is nothing; about a step's
        // edge, the part moves by one step, which is no new split.
        let mut j = Jobs::default();
        j.hear("b", "b1", S(1), idle(4.9));
        let whole = j.split("a", S(2), Some(200.0));
        assert_eq!(whole.part, 1.0);
        j.hear("b", "b1", S(2), idle(5.1));
        let step = j.split("a", S(3), Some(200.0));
        assert!((step.part - 0.95).abs() < 1e-9, "{step:?}");
        assert!(!whole.moved(&step) && !step.moved(&whole));
    }

    #[test]
    fn a_job_that_stops_beating_is_forgotten_and_its_part_returns() {
        let mut j = Jobs::default();
        j.hear("b", "b1", S(10), busy(100.0));
        assert_eq!(j.split("a", S(13), Some(200.0)).part, 0.5);
        assert_eq!(j.split("a", S(14), Some(200.0)).part, 1.0, "stale");
        j.expire(S(14));
        assert!(j.heard.is_empty());
        // A late, older beat does not replace a newer one.
        j.hear("b", "b1", S(20), idle(0.0));
        j.hear("b", "b1", S(19), busy(0.0));
        assert_eq!(j.split("a", S(21), Some(200.0)).busy_jobs, 1);
    }

    #[test]
    fn its_own_jobs_beats_are_not_another_job() {
        let mut j = Jobs::default();
        j.hear("a", "a2", S(1), busy(100.0));
        assert_eq!(j.split("a", S(2), Some(200.0)), Split::default());
    }

    #[test]
    fn small_moves_of_the_part_are_not_a_new_split_and_slots_keep_to_the_segment() {
        let s = Split::default();
        let near = Split { part: 0.97, ..s };
        let far = Split { part: 0.9, ..s };
        assert!(!s.moved(&near));
        assert!(s.moved(&far));
        assert!(s.moved(&Split { jobs: 2, ..s }));
        let half = Split {
            part: 0.5,
            segment: (0.5, 1.0),
            busy_jobs: 2,
            jobs: 2,
        };
        assert_eq!(
            half.place(&[(0.0, 0.25), (0.5, 1.0)]),
            vec![(0.5, 0.625), (0.75, 1.0)]
        );
    }

    #[test]
    fn a_workers_part_of_its_jobs_pace_is_by_fair_share_over_its_busy_live_peers() {
        let beat = |busy, pace, fair| Beat {
            busy,
            rate: 0.0,
            pace,
            fair,
        };
        let mut j = Jobs::default();
        let me = beat(true, 10.0, 50.0);
        assert_eq!(j.job_part("a", S(1), me), None, "no peer heard");
        j.hear("a", "a2", S(1), beat(true, 40.0, 50.0));
        j.hear("a", "a3", S(1), beat(true, 40.0, 100.0));
        // Idle, or of another job: not counted.
        j.hear("a", "a4", S(1), beat(false, 500.0, 50.0));
        j.hear("b", "b1", S(1), beat(true, 500.0, 50.0));
        // (10 + 40 + 40) x 50 / (50 + 50 + 100)
        assert_eq!(j.job_part("a", S(2), me), Some(22.5));
        assert_eq!(j.job_part("a", S(2), beat(true, 10.0, 0.0)), None);
        assert_eq!(j.job_part("a", S(5), me), None, "stale");
        // The other jobs' split is unchanged by the job's own beats.
        assert_eq!(j.split("a", S(2), Some(200.0)).busy_jobs, 2);
    }
}
