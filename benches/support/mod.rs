//! What the end-to-end benches share (`make bench-throttle`, `make
//! bench-dynamodb`): the strategies compared and how a setup is configured
//! for one, and a job of workers whose `/metrics` are sampled every second
//! while they run.
#![allow(dead_code)] // each bench uses a part

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::common::*;

/// A strategy as the worker's config names it, with the SDK's retry mode.
pub struct Variant {
    pub label: &'static str,
    pub strategy: &'static str,
    pub sdk: &'static str,
}

const fn variant(label: &'static str, strategy: &'static str, sdk: &'static str) -> Variant {
    Variant {
        label,
        strategy,
        sdk,
    }
}

/// Every strategy the benches compare; the default last.
pub static VARIANTS: &[Variant] = &[
    variant(
        "AWS SDK standard retry",
        r#"{ name = "naive" }"#,
        "standard",
    ),
    variant(
        "AWS SDK adaptive retry",
        r#"{ name = "naive" }"#,
        "adaptive",
    ),
    variant("naive immediate retry", r#"{ name = "naive" }"#, "off"),
    variant("exponential backoff", r#"{ name = "exponential" }"#, "off"),
    variant(
        "seed AutoSleeper (defaults)",
        r#"{ name = "autosleeper" }"#,
        "off",
    ),
    // min sleep = one batch's cost at capacity: 25 WCU / 200 WCU/s.
    variant(
        "Heroku proportional-remaining",
        r#"{ name = "heroku-proportional-remaining", min_sleep_s = 0.125 }"#,
        "off",
    ),
    variant("adaptive (default)", r#"{ name = "adaptive" }"#, "off"),
];

pub fn default_variant() -> &'static Variant {
    VARIANTS.last().expect("variants")
}

/// Writes the variant's `[throttle]` section (plus `extra` keys of it, and
/// those of `BENCH_THROTTLE`, e.g. `split_with_jobs = false`, lines
/// separated by `;`) into the setup's config; logs at warn.
pub fn configure(s: &Setup, v: &Variant, extra: &str) {
    let more = std::env::var("BENCH_THROTTLE")
        .unwrap_or_default()
        .replace(';', "\n");
    s.append_config(&format!(
        "[throttle]\nstrategy = {}\nsdk_retry_mode = \"{}\"\n{extra}\n{more}\n",
        v.strategy, v.sdk
    ));
    let text = std::fs::read_to_string(&s.config)
        .unwrap()
        .replace("level = \"info\"", "level = \"warn\"");
    std::fs::write(&s.config, text).unwrap();
}

/// Seconds from a table's first write to its last accepted one, from the
/// proxy's stats.
pub fn write_span(st: &Value) -> f64 {
    st["last_accept_s"].as_f64().unwrap_or(0.0) - st["first_write_s"].as_f64().unwrap_or(0.0)
}

/// Sets a flag when dropped: a thread told to stop by it ends even when its
/// owner panics.
pub struct StopOnDrop(pub Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// The columns of a job's trace rows.
pub mod col {
    pub const T: usize = 0;
    pub const PACING: usize = 1;
    pub const SHARE: usize = 2;
    pub const CAPACITY: usize = 3;
    pub const THROTTLED: usize = 4;
    pub const WCU: usize = 5;
    pub const HOT_RATE: usize = 6;
    pub const HOT_KEYS: usize = 7;
    pub const SLOT_WIDTH: usize = 8;
    /// How many columns a row has.
    pub const COUNT: usize = 9;
}

/// One job: a setup's running workers, their `/metrics` sampled every
/// second (stopped when the job ends, or is dropped).
pub struct Job {
    workers: Vec<Worker>,
    sampler: Option<std::thread::JoinHandle<Value>>,
    stop: StopOnDrop,
    started: Instant,
    /// When the last worker was seen to exit (s since the start).
    ended: Option<f64>,
}

/// What a job's workers reported.
#[derive(Default)]
pub struct JobResult {
    pub summaries: Vec<Value>,
    pub requests: u64,
    pub throttled: u64,
    pub items_written: u64,
    pub wall_s: f64,
    /// Per worker, rows of [`col`]: `[t (s since the job started), pacing
    /// rate, share, capacity, throttled requests, WCU consumed, hot range's
    /// rate, hot keys, time slot width]`.
    pub trace: Value,
}

impl Job {
    /// Starts `workers` workers of the setup in batch mode.
    pub fn start(s: &Setup, workers: usize) -> Job {
        let ports: Vec<String> = (0..workers)
            .map(|_| format!("127.0.0.1:{}", free_port()))
            .collect();
        let started = Instant::now();
        let running = ports
            .iter()
            .map(|addr| s.spawn_with_env(true, &[("INGEST__OPS__LISTEN", addr)]))
            .collect();
        let stop = Arc::new(AtomicBool::new(false));
        let done = stop.clone();
        let label = format!("{{table=\"{}\"}}", s.table);
        let sampler = std::thread::spawn(move || {
            let mut rows: Vec<Vec<Value>> = vec![Vec::new(); ports.len()];
            while !done.load(Ordering::Relaxed) {
                for (i, addr) in ports.iter().enumerate() {
                    let Ok((200, text)) = http_get(addr, "/metrics") else {
                        continue;
                    };
                    let get = |m: &str| sample(&text, &format!("{m}{label}"));
                    rows[i].push(json!([
                        (started.elapsed().as_secs_f64() * 10.0).round() / 10.0,
                        get("ingest_pacing_rate_wcu"),
                        get("ingest_capacity_share"),
                        get("ingest_capacity_wcu"),
                        get("ingest_throttled_requests_total"),
                        get("ingest_wcu_consumed_total"),
                        get("ingest_hot_rate_wcu"),
                        get("ingest_hot_keys"),
                        get("ingest_time_slot_width"),
                    ]));
                }
                std::thread::sleep(Duration::from_secs(1));
            }
            json!(rows)
        });
        Job {
            workers: running,
            sampler: Some(sampler),
            stop: StopOnDrop(stop),
            started,
            ended: None,
        }
    }

    /// As [`Job::finish`], but workers still running `limit` after the
    /// start are stopped with SIGTERM: a strategy that collapses on a shape
    /// ends its row in bounded time. A stopped worker drains and prints its
    /// summary; it exits 0, or 3 (`drain_timed_out`) when batches were
    /// still waiting at the drain deadline. Also returns whether they had
    /// to be stopped.
    pub fn finish_within(self, what: &str, limit: Duration) -> (JobResult, bool) {
        let mut all = Job::finish_all_within(vec![self], what, limit);
        all.pop().expect("one job")
    }

    /// As [`Job::finish_within`], for jobs running side by side: each
    /// job's end (its `wall_s`) is when its last worker was seen to exit,
    /// not when the job before it in `jobs` was done.
    pub fn finish_all_within(
        mut jobs: Vec<Job>,
        what: &str,
        limit: Duration,
    ) -> Vec<(JobResult, bool)> {
        let mut stopped = vec![false; jobs.len()];
        loop {
            for (job, stopped) in jobs.iter_mut().zip(stopped.iter_mut()) {
                if job.ended.is_some() {
                    continue;
                }
                // (A stopped job that has not drained within a minute is
                // left to `collect`, which waits for it and fails.)
                let stuck = *stopped && job.started.elapsed() >= limit + Duration::from_secs(60);
                if stuck || job.workers.iter_mut().all(|w| w.exited()) {
                    job.ended = Some(job.started.elapsed().as_secs_f64());
                } else if !*stopped && job.started.elapsed() >= limit {
                    for w in job.workers.iter_mut() {
                        if !w.exited() {
                            w.signal("TERM");
                        }
                    }
                    *stopped = true; // it ends when they have drained
                }
            }
            if jobs.iter().all(|j| j.ended.is_some()) {
                break;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        jobs.into_iter()
            .zip(stopped)
            .map(|(job, stopped)| {
                let codes: &[i32] = if stopped { &[0, 3] } else { &[0] };
                (job.collect(what, codes), stopped)
            })
            .collect()
    }

    /// Waits for every worker's exit (each must exit 0 with a summary).
    pub fn finish(self, what: &str) -> JobResult {
        self.collect(what, &[0])
    }

    /// Waits for every worker's exit, each with a summary and one of
    /// `codes`.
    fn collect(mut self, what: &str, codes: &[i32]) -> JobResult {
        let mut r = JobResult::default();
        for w in std::mem::take(&mut self.workers) {
            let logs = w.logs.clone();
            let pid = w.child.id();
            let (code, summary) = w.wait(Duration::from_secs(1800));
            // BENCH_LOG_DIR: each worker's log lines kept, one file each
            // (with INGEST__LOG__LEVEL=debug, every decision).
            if let Ok(dir) = std::env::var("BENCH_LOG_DIR") {
                let lines: Vec<String> =
                    logs.lock().unwrap().iter().map(Value::to_string).collect();
                let name: String = what
                    .chars()
                    .map(|c| if c.is_alphanumeric() { c } else { '-' })
                    .collect();
                let path = std::path::Path::new(&dir).join(format!("{name}-{pid}.jsonl"));
                if let Err(e) = std::fs::write(&path, lines.join("\n")) {
                    eprintln!("cannot write {}: {e}", path.display());
                }
            }
            let summary = summary.unwrap_or_else(|| {
                let logs = logs.lock().unwrap();
                let tail: Vec<String> = logs.iter().rev().take(5).map(Value::to_string).collect();
                panic!(
                    "{what}: no summary (exit {code:?}); last logs:\n{}",
                    tail.join("\n")
                )
            });
            assert!(
                code.is_some_and(|c| codes.contains(&c)),
                "{what}: exit {code:?}: {summary}"
            );
            let f = |k: &str| summary[k].as_u64().unwrap_or(0);
            r.requests += f("requests");
            r.throttled += f("throttled_requests");
            r.items_written += f("items_written");
            r.summaries.push(summary);
        }
        r.wall_s = self
            .ended
            .unwrap_or_else(|| self.started.elapsed().as_secs_f64());
        self.stop.0.store(true, Ordering::Relaxed);
        r.trace = self
            .sampler
            .take()
            .map_or(Value::Null, |h| h.join().unwrap());
        r
    }
}

/// One worker's trace rows (columns: [`col`]).
pub type WorkerRows = Vec<[Option<f64>; col::COUNT]>;

/// A trace's rows, per worker (see [`col`]).
pub fn trace_rows(trace: &Value) -> Vec<WorkerRows> {
    if trace.is_null() {
        return Vec::new();
    }
    serde_json::from_value(trace.clone()).unwrap_or_else(|e| {
        panic!(
            "a worker trace whose rows are not {} columns: {e}",
            col::COUNT
        )
    })
}
