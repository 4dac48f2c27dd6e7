//! Progress of a `--until-caught-up` run: how much of the backlog is done,
//! the rate, and an ETA. Rate limiting makes the duration predictable: the
//! ETA divides the records left by the slower of the observed rate and the
//! paced rate (the tables' pacing rate in WCU/s over the WCU a record costs).
//!
//! On a terminal it draws a bar (indicatif); otherwise it logs a `progress`
//! line every interval. The arithmetic is pure, in `estimate.rs`; [`report`]
//! is the loop that drives the output.

use std::sync::Arc;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use tokio_util::sync::CancellationToken;
use tracing::info;

use super::estimate::{eta, fmt_duration, paced_records, ProgressView, RateMeter};
use super::live::Live;
use crate::config::ProgressMode;

fn reading(live: &Live, meter: &mut RateMeter) -> ProgressView {
    let b = live.backlog();
    let s = live.counters.snapshot();
    let observed = meter.observe(Instant::now(), b.done);
    let paced_wcu = live
        .tables
        .iter()
        .filter_map(|t| t.control.report().pacing_rate)
        .reduce(f64::min);
    let records = s.items_written + s.superseded;
    let wcu_per_record = (records > 0).then(|| s.wcu_written as f64 / records as f64);
    let paced = paced_records(paced_wcu, wcu_per_record);
    ProgressView {
        backlog: b,
        records_per_s: observed,
        paced_records_per_s: paced,
        eta: eta(b.remaining(), observed, paced),
    }
}

fn message(v: &ProgressView) -> String {
    if v.backlog.total == 0 {
        return "waiting for partitions".into();
    }
    let rate = v
        .records_per_s
        .map_or("–".into(), |r| format!("{r:.0} rec/s"));
    let paced = v
        .paced_records_per_s
        .map_or(String::new(), |r| format!(" (paced {r:.0} rec/s)"));
    let eta = v.eta.map_or("–".into(), fmt_duration);
    format!("{rate}{paced} · ETA {eta}")
}

/// Reports progress until `stop`: a bar on a terminal (mode `auto`), log
/// lines every `interval` otherwise. Every reading is also kept in `live`
/// (for the metrics endpoint).
pub async fn report(
    live: Arc<Live>,
    mode: ProgressMode,
    interval: Duration,
    stop: CancellationToken,
) {
    if mode == ProgressMode::Off {
        return;
    }
    let draw = ProgressDrawTarget::stderr();
    let bar = (mode == ProgressMode::Auto && !draw.is_hidden()).then(|| {
        let bar = ProgressBar::with_draw_target(Some(0), draw);
        bar.set_style(
            ProgressStyle::with_template(
                "{spinner} {elapsed_precise} [{bar:30}] {human_pos}/{human_len} records · {msg}",
            )
            .expect("valid template")
            .progress_chars("=> "),
        );
        bar.set_message("waiting for partitions");
        crate::telemetry::set_bar(Some(bar.clone()));
        bar
    });
    let mut meter = RateMeter::new(Duration::from_secs(10));
    let mut next_log = Instant::now() + interval;
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = tick.tick() => {}
        }
        let v = reading(&live, &mut meter);
        live.set_progress(v);
        match &bar {
            Some(bar) => {
                bar.set_length(v.backlog.total);
                bar.set_position(v.backlog.done);
                bar.set_message(message(&v));
            }
            None if Instant::now() >= next_log => {
                next_log += interval;
                info!(
                    event = "progress",
                    done = v.backlog.done,
                    total = v.backlog.total,
                    remaining = v.backlog.remaining(),
                    records_per_s = v.records_per_s.map(|r| r.round()),
                    paced_records_per_s = v.paced_records_per_s.map(|r| r.round()),
                    eta_s = v.eta.map(|d| d.as_secs()),
                    "progress"
                );
            }
            None => {}
        }
    }
    if let Some(bar) = bar {
        let v = reading(&live, &mut meter);
        bar.set_length(v.backlog.total);
        bar.set_position(v.backlog.done);
        bar.finish_with_message("done");
        crate::telemetry::set_bar(None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::estimate::{backlog, Backlog};

    #[test]
    fn backlog_sums_partitions_and_clamps() {
        let b = backlog(
            [
                (0, 100, Some(40)), // 40 of 100
                (10, 20, None),     // nothing yet
                (5, 5, Some(5)),    // empty partition
                (0, 10, Some(12)),  // past the end seen at assignment
            ]
            .into_iter(),
        );
        assert_eq!(
            b,
            Backlog {
                total: 120,
                done: 50
            }
        );
        assert_eq!(b.remaining(), 70);
    }

    #[test]
    fn the_rate_meter_starts_when_the_work_does() {
        // A worker that waits 5 s for its partitions, starts writing late
        // in the 6th second (12 records), then writes 100/s: the first rate
        // is 100/s, not 100/s smoothed up from 0, nor the 12 of the
        // interval in which the work started.
        let t0 = Instant::now();
        let mut m = RateMeter::new(Duration::from_secs(10));
        for s in 0..=5 {
            assert_eq!(m.observe(t0 + Duration::from_secs(s), 0), None);
        }
        assert_eq!(m.observe(t0 + Duration::from_secs(6), 12), None);
        let r = m.observe(t0 + Duration::from_secs(7), 112).unwrap();
        assert!((r - 100.0).abs() < 1e-9, "{r}");
        // Once started, a stall is a real rate of 0 (smoothed).
        let r = m.observe(t0 + Duration::from_secs(8), 112).unwrap();
        assert!(r < 100.0 && r > 0.0, "{r}");
    }

    #[test]
    fn the_rate_meter_smooths_towards_the_instant_rate() {
        let t0 = Instant::now();
        let mut m = RateMeter::new(Duration::from_secs(10));
        assert_eq!(m.observe(t0, 0), None);
        assert_eq!(m.observe(t0 + Duration::from_secs(1), 50), None);
        let r1 = m.observe(t0 + Duration::from_secs(2), 150).unwrap();
        assert!((r1 - 100.0).abs() < 1e-9, "first rate is the instant one");
        let mut r = r1;
        for s in 3..=60 {
            r = m
                .observe(t0 + Duration::from_secs(s), 150 + 200 * (s - 2))
                .unwrap();
        }
        assert!((r - 200.0).abs() < 1.0, "converges to 200/s, got {r}");
    }

    #[test]
    fn the_eta_takes_the_slower_of_observed_and_paced() {
        // 1000 records, 2 WCU each, paced at 100 WCU/s: 50 rec/s, 20 s.
        let paced = paced_records(Some(100.0), Some(2.0));
        assert_eq!(paced, Some(50.0));
        assert_eq!(eta(1000, Some(80.0), paced), Some(Duration::from_secs(20)));
        assert_eq!(eta(1000, Some(25.0), paced), Some(Duration::from_secs(40)));
        assert_eq!(eta(1000, None, paced), Some(Duration::from_secs(20)));
        assert_eq!(eta(1000, None, None), None);
        assert_eq!(eta(1000, Some(0.0), None), None);
        assert_eq!(eta(0, None, None), Some(Duration::ZERO));
        assert_eq!(paced_records(None, Some(1.0)), None);
    }

    #[test]
    fn durations_read_well() {
        assert_eq!(fmt_duration(Duration::from_secs(42)), "42s");
        assert_eq!(fmt_duration(Duration::from_millis(400)), "1s");
        assert_eq!(fmt_duration(Duration::from_secs(185)), "3m 05s");
        assert_eq!(fmt_duration(Duration::from_secs(3720)), "1h 02m");
    }
}
