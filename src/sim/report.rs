//! Scores of one strategy on a scenario, with seed 004's metrics as
//! ANCHORS.md defines them (unweighted mean retry rate over clients, largest
//! single wait, sample standard deviation of per-client attempt counts, time
//! to clear), plus utilization and request counts; the human table.

use serde::Serialize;

use super::engine::Outcome;

/// One strategy's scores (the JSON keys the issue names, and a few more).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Score {
    pub label: String,
    pub strategy: String,
    /// Mean over clients of throttled attempts / attempts.
    pub retry_rate: f64,
    /// The longest wait before any attempt (strategy delay plus pacing), s.
    pub max_sleep_s: f64,
    /// Sample standard deviation of the clients' attempt counts.
    pub request_stdev: f64,
    /// The clear probe's time (None: no probe, or not cleared in time).
    pub time_to_clear_s: Option<f64>,
    /// Accepted units / units the server offered over the run.
    pub utilization: f64,
    pub requests: u64,
    pub throttled: u64,
    /// Requests per full request's worth of items written (1.0 = ideal).
    pub requests_vs_ideal: f64,
    pub accepted_units: f64,
    pub offered_units: f64,
    /// With `clients.groups` > 1: each job's accepted units / the units the
    /// server offered (empty with one job).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub group_shares: Vec<f64>,
    /// The least any client wrote in one minute, over the clients' mean in
    /// that minute (see [`least_client_share`]); None with one client or
    /// no full minute to judge.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub least_client_share: Option<f64>,
    /// With partitions: what the busiest partition admitted over its
    /// maximum x the run's length (the hot range's bound is reached at 1;
    /// the partition's full bucket at the start can take it a little past).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub busiest_partition_use: Option<f64>,
}

/// A minute, for [`least_client_share`].
const MINUTE_S: f64 = 60.0;

/// The least any client wrote in one minute, over the mean of all clients
/// in that minute: a client that spirals down while its peers write shows
/// here even where the totals look healthy. Minutes are counted from the
/// moment every client has made its first attempt, the first of them left
/// out (the start's cuts), and only whole minutes before the last attempt.
/// A client that never made an attempt while others did scores 0.
/// (Clients of jobs of different sizes have different fair amounts: with
/// jobs of 2 and 1 clients an even split per job puts the larger job's
/// clients at 0.75 of the mean.)
pub fn least_client_share(main: &Outcome) -> Option<f64> {
    let clients = main.per_client.len();
    if clients < 2 {
        return None;
    }
    let mut first = vec![f64::INFINITY; clients];
    let mut last: f64 = 0.0;
    for a in &main.attempts {
        if let Some(f) = first.get_mut(a.client as usize) {
            *f = f.min(a.t_s);
        }
        last = last.max(a.t_s);
    }
    if first.iter().any(|f| f.is_infinite()) {
        return (!main.attempts.is_empty()).then_some(0.0);
    }
    let start = first.iter().copied().fold(0.0, f64::max) + MINUTE_S;
    if last < start + MINUTE_S {
        return None;
    }
    let minutes = ((last - start) / MINUTE_S).floor() as usize;
    let mut written = vec![vec![0.0; clients]; minutes];
    for a in &main.attempts {
        let m = (a.t_s - start) / MINUTE_S;
        if m >= 0.0 && (m as usize) < minutes {
            written[m as usize][a.client as usize] += a.accepted_units;
        }
    }
    written
        .iter()
        .filter_map(|w| {
            let mean = w.iter().sum::<f64>() / clients as f64;
            (mean > 0.0).then(|| w.iter().copied().fold(f64::INFINITY, f64::min) / mean)
        })
        .reduce(f64::min)
}

pub fn score(
    label: &str,
    strategy: &str,
    items_per_request: usize,
    main: &Outcome,
    clear: Option<&Outcome>,
    groups: usize,
) -> Score {
    let mut group_shares = vec![0.0; if groups > 1 { groups } else { 0 }];
    if main.offered_units > 0.0 {
        for a in &main.attempts {
            if let Some(g) = group_shares.get_mut(a.client as usize % groups) {
                *g += a.accepted_units / main.offered_units;
            }
        }
    }
    let rates: Vec<f64> = main
        .per_client
        .iter()
        .filter(|(a, _)| *a > 0)
        .map(|(a, t)| *t as f64 / *a as f64)
        .collect();
    let retry_rate = if rates.is_empty() {
        0.0
    } else {
        rates.iter().sum::<f64>() / rates.len() as f64
    };
    let counts: Vec<f64> = main.per_client.iter().map(|(a, _)| *a as f64).collect();
    let request_stdev = sample_stdev(&counts);
    let requests: u64 = main.per_client.iter().map(|(a, _)| a).sum();
    let throttled: u64 = main.per_client.iter().map(|(_, t)| t).sum();
    let ideal = (main.items_written as f64 / items_per_request as f64).ceil();
    Score {
        label: label.to_string(),
        strategy: strategy.to_string(),
        retry_rate,
        max_sleep_s: main.attempts.iter().map(|a| a.wait_s).fold(0.0, f64::max),
        request_stdev,
        time_to_clear_s: clear.and_then(|c| c.cleared_at).map(|d| d.as_secs_f64()),
        utilization: if main.offered_units > 0.0 {
            main.accepted_units / main.offered_units
        } else {
            0.0
        },
        requests,
        throttled,
        requests_vs_ideal: if ideal > 0.0 {
            requests as f64 / ideal
        } else {
            0.0
        },
        accepted_units: main.accepted_units,
        offered_units: main.offered_units,
        group_shares,
        least_client_share: least_client_share(main),
        busiest_partition_use: main.busiest_partition_use,
    }
}

/// One strategy over several seeds of a scenario (`ingest sim --seeds`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Spread {
    pub label: String,
    pub seeds: usize,
    pub requests: u64,
    pub throttled: u64,
    /// Throttled requests over requests, all seeds together.
    pub throttled_rate: f64,
    pub utilization_min: f64,
    pub utilization_max: f64,
    pub requests_vs_ideal_max: f64,
    /// The least job's share in any seed (None with one job).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub least_job_share: Option<f64>,
    /// The least `least_client_share` in any seed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub least_client_share: Option<f64>,
    /// The least `busiest_partition_use` in any seed (with partitions).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub busiest_partition_use: Option<f64>,
    /// Each seed's own scores, seed 1 first: which seeds make the extremes
    /// above.
    pub per_seed: Vec<Score>,
}

impl Score {
    /// The least job's share (None with one job).
    pub fn least_job_share(&self) -> Option<f64> {
        self.group_shares.iter().copied().reduce(f64::min)
    }
}

/// Each strategy's scores over several seeds (one `Vec<Score>` a seed, seed
/// 1 first, the strategies in the same order), in the strategies' order.
pub fn spread(runs: &[Vec<Score>]) -> Vec<Spread> {
    let Some(first) = runs.first() else {
        return Vec::new();
    };
    let min = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    first
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let all: Vec<&Score> = runs.iter().filter_map(|r| r.get(i)).collect();
            let requests: u64 = all.iter().map(|s| s.requests).sum();
            let throttled: u64 = all.iter().map(|s| s.throttled).sum();
            Spread {
                label: s.label.clone(),
                seeds: all.len(),
                requests,
                throttled,
                throttled_rate: if requests > 0 {
                    throttled as f64 / requests as f64
                } else {
                    0.0
                },
                utilization_min: all
                    .iter()
                    .map(|s| s.utilization)
                    .fold(f64::INFINITY, f64::min),
                utilization_max: all.iter().map(|s| s.utilization).fold(0.0, f64::max),
                requests_vs_ideal_max: all.iter().map(|s| s.requests_vs_ideal).fold(0.0, f64::max),
                least_job_share: all.iter().map(|s| s.least_job_share()).fold(None, min),
                least_client_share: all.iter().map(|s| s.least_client_share).fold(None, min),
                busiest_partition_use: all.iter().map(|s| s.busiest_partition_use).fold(None, min),
                per_seed: all.into_iter().cloned().collect(),
            }
        })
        .collect()
}

/// The human table of [`spread`].
pub fn spread_table(scenario: &str, seeds: &str, rows: &[Spread]) -> String {
    let partitioned = rows.iter().any(|r| r.busiest_partition_use.is_some());
    let mut s = format!(
        "scenario {scenario}, seeds {seeds}\n{:<32} {:>10} {:>15} {:>12} {:>10} {:>12}{}\n",
        "strategy",
        "throttled",
        "util",
        "x ideal, most",
        "least job",
        "least client",
        if partitioned {
            "  busiest partition"
        } else {
            ""
        }
    );
    for r in rows {
        let job = r
            .least_job_share
            .map_or("-".to_string(), |j| format!("{:.1}%", j * 100.0));
        let client = r
            .least_client_share
            .map_or("-".to_string(), |c| format!("{c:.2}"));
        let busiest = match r.busiest_partition_use {
            Some(b) if partitioned => format!(" {:>17.1}%", b * 100.0),
            _ if partitioned => format!(" {:>18}", "-"),
            _ => String::new(),
        };
        s.push_str(&format!(
            "{:<32} {:>9.2}% {:>6.1}-{:>6.1}% {:>12.2} {:>10} {:>12}{busiest}\n",
            r.label,
            r.throttled_rate * 100.0,
            r.utilization_min * 100.0,
            r.utilization_max * 100.0,
            r.requests_vs_ideal_max,
            job,
            client
        ));
    }
    s
}

/// Sample standard deviation (n - 1); 0 for fewer than two values.
pub fn sample_stdev(xs: &[f64]) -> f64 {
    if xs.len() < 2 {
        return 0.0;
    }
    let mean = xs.iter().sum::<f64>() / xs.len() as f64;
    let ss: f64 = xs.iter().map(|x| (x - mean).powi(2)).sum();
    (ss / (xs.len() - 1) as f64).sqrt()
}

/// The human table.
pub fn table(scenario: &str, scores: &[Score]) -> String {
    let mut s = format!(
        "scenario {scenario}\n{:<32} {:>9} {:>10} {:>9} {:>9} {:>7} {:>9} {:>9} {:>8}\n",
        "strategy",
        "retry",
        "max sleep",
        "stdev",
        "clear",
        "util",
        "requests",
        "throttled",
        "x ideal"
    );
    for r in scores {
        let clear = r
            .time_to_clear_s
            .map_or("-".to_string(), |c| format!("{c:.1}s"));
        s.push_str(&format!(
            "{:<32} {:>8.2}% {:>9.2}s {:>9.1} {:>9} {:>6.1}% {:>9} {:>9} {:>8.2}\n",
            r.label,
            r.retry_rate * 100.0,
            r.max_sleep_s,
            r.request_stdev,
            clear,
            r.utilization * 100.0,
            r.requests,
            r.throttled,
            r.requests_vs_ideal
        ));
        if !r.group_shares.is_empty() {
            let shares: Vec<String> = r
                .group_shares
                .iter()
                .map(|g| format!("{:.1}%", g * 100.0))
                .collect();
            s.push_str(&format!("{:<32} jobs' shares: {}\n", "", shares.join(", ")));
        }
        if let Some(l) = r.least_client_share {
            s.push_str(&format!(
                "{:<32} least client: {:.2} of the clients' mean in a minute\n",
                "", l
            ));
        }
        if let Some(b) = r.busiest_partition_use {
            s.push_str(&format!(
                "{:<32} busiest partition: {:.1}% of its maximum used\n",
                "",
                b * 100.0
            ));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stdev_is_the_sample_one() {
        assert_eq!(sample_stdev(&[5.0]), 0.0);
        assert!((sample_stdev(&[2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]) - 2.138).abs() < 1e-3);
    }

    #[test]
    fn retry_rate_is_the_unweighted_mean_over_clients() {
        let o = Outcome {
            per_client: vec![(10, 5), (100, 0)],
            items_written: 105,
            accepted_units: 95.0,
            offered_units: 100.0,
            ..Outcome::default()
        };
        let s = score("x", "x", 1, &o, None, 1);
        assert!((s.retry_rate - 0.25).abs() < 1e-12, "(0.5 + 0) / 2");
        assert_eq!((s.requests, s.throttled), (110, 5));
        assert!((s.utilization - 0.95).abs() < 1e-12);
        assert!((s.requests_vs_ideal - 110.0 / 105.0).abs() < 1e-12);
    }

    #[test]
    fn a_spread_sums_the_requests_and_keeps_the_extremes() {
        let score = |requests, throttled, utilization, jobs: Vec<f64>, client| Score {
            label: "a".into(),
            strategy: "adaptive".into(),
            retry_rate: 0.0,
            max_sleep_s: 0.0,
            request_stdev: 0.0,
            time_to_clear_s: None,
            utilization,
            requests,
            throttled,
            requests_vs_ideal: requests as f64 / 100.0,
            accepted_units: 0.0,
            offered_units: 0.0,
            group_shares: jobs,
            least_client_share: client,
            busiest_partition_use: None,
        };
        let runs = vec![
            vec![score(100, 1, 0.9, vec![0.5, 0.4], Some(0.7))],
            vec![score(300, 9, 0.8, vec![0.3, 0.6], None)],
        ];
        let s = &spread(&runs)[0];
        assert_eq!((s.seeds, s.requests, s.throttled), (2, 400, 10));
        assert!((s.throttled_rate - 0.025).abs() < 1e-12);
        assert_eq!((s.utilization_min, s.utilization_max), (0.8, 0.9));
        assert_eq!(s.requests_vs_ideal_max, 3.0);
        assert_eq!(s.least_job_share, Some(0.3));
        assert_eq!(s.least_client_share, Some(0.7));
        // Each seed's own figures, to tell which seed made an extreme.
        assert_eq!(s.per_seed, vec![runs[0][0].clone(), runs[1][0].clone()]);
        let least_jobs: Vec<_> = s.per_seed.iter().map(Score::least_job_share).collect();
        assert_eq!(least_jobs, vec![Some(0.4), Some(0.3)]);
        assert!(spread(&[]).is_empty());
        let table = spread_table("x", "1-2", &spread(&runs));
        assert!(
            table.contains("2.50%") && table.contains("30.0%"),
            "{table}"
        );
    }

    #[test]
    fn the_least_client_share_is_the_worst_minute_of_the_worst_client() {
        use super::super::engine::Attempt;
        let at = |client, t_s, accepted_units| Attempt {
            client,
            t_s,
            wait_s: 0.0,
            units: accepted_units,
            accepted_units,
            throttled: false,
            remaining: None,
            rule: None,
            rate: None,
        };
        let run = |attempts: Vec<Attempt>, clients| Outcome {
            attempts,
            per_client: vec![(1, 0); clients],
            ..Outcome::default()
        };
        // Both start at 0 s: the minute from 0 s is left out, then
        // [60, 120) and [120, 180) count; the last attempt is at 200 s.
        let both = vec![
            at(0, 0.0, 50.0),
            at(1, 0.0, 1.0),
            at(0, 90.0, 10.0),
            at(1, 90.0, 10.0),
            at(0, 150.0, 10.0),
            at(1, 150.0, 2.0),
            at(0, 200.0, 1.0),
        ];
        let l = least_client_share(&run(both.clone(), 2)).unwrap();
        assert!((l - 2.0 / 6.0).abs() < 1e-12, "{l}");
        // One client: nothing to compare.
        assert_eq!(
            least_client_share(&run(vec![at(0, 0.0, 1.0), at(0, 300.0, 1.0)], 1)),
            None
        );
        // A client that starts late moves the first minute: no whole minute
        // is left before the last attempt.
        let late = vec![at(0, 0.0, 1.0), at(1, 100.0, 1.0), at(0, 200.0, 1.0)];
        assert_eq!(least_client_share(&run(late, 2)), None);
        // A client that never attempts while another does scores 0.
        assert_eq!(
            least_client_share(&run(vec![at(0, 0.0, 1.0)], 2)),
            Some(0.0)
        );
        assert_eq!(least_client_share(&run(Vec::new(), 2)), None);
        // A client that writes nothing in a counted minute scores 0.
        let starved = vec![
            at(0, 0.0, 1.0),
            at(1, 0.0, 1.0),
            at(0, 90.0, 5.0),
            at(0, 130.0, 1.0),
        ];
        assert_eq!(least_client_share(&run(starved, 2)), Some(0.0));
    }

    #[test]
    fn each_jobs_share_is_its_clients_accepted_units_over_the_offered() {
        use super::super::engine::Attempt;
        let at = |client, accepted_units| Attempt {
            client,
            t_s: 0.0,
            wait_s: 0.0,
            units: 10.0,
            accepted_units,
            throttled: false,
            remaining: None,
            rule: None,
            rate: None,
        };
        let o = Outcome {
            attempts: vec![at(0, 10.0), at(1, 30.0), at(2, 20.0), at(3, 0.0)],
            per_client: vec![(1, 0); 4],
            items_written: 4,
            accepted_units: 60.0,
            offered_units: 100.0,
            ..Outcome::default()
        };
        // Clients 0 and 2 are job 0, 1 and 3 job 1.
        let shares = score("x", "x", 1, &o, None, 2).group_shares;
        assert_eq!(shares.len(), 2);
        assert!(
            (shares[0] - 0.3).abs() < 1e-12 && (shares[1] - 0.3).abs() < 1e-12,
            "{shares:?}"
        );
        assert!(score("x", "x", 1, &o, None, 1).group_shares.is_empty());
    }
}
