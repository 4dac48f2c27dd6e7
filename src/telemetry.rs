//! Telemetry: log setup and the worker's counters.
//!
//! Logs are structured (`tracing`), human or JSON by config, one line per
//! batch summary (debug) or commit (info), never one per record. The counters
//! are plain atomics shared by the pipeline stages; the final summary and the
//! periodic commit lines read them. Deliberately not here: an HTTP exporter.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::config::{LogFormat, LogSettings};

/// Installs the global subscriber (stderr). `RUST_LOG`, when set, wins over
/// the configured level.
pub fn init_logs(settings: &LogSettings) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(&settings.level));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    let _ = match settings.format {
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
        LogFormat::Human => builder.try_init(),
    };
}

/// Running totals of one worker process.
#[derive(Debug, Default)]
pub struct Counters {
    pub records_consumed: AtomicU64,
    pub items_written: AtomicU64,
    pub wcu_written: AtomicU64,
    pub batches: AtomicU64,
    pub requests: AtomicU64,
    pub throttled_requests: AtomicU64,
    pub unprocessed_items: AtomicU64,
    pub retryable_errors: AtomicU64,
    pub dead_lettered: AtomicU64,
    pub superseded: AtomicU64,
    pub commits: AtomicU64,
}

/// A copy of the counters at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Snapshot {
    pub records_consumed: u64,
    pub items_written: u64,
    pub wcu_written: u64,
    pub batches: u64,
    pub requests: u64,
    pub throttled_requests: u64,
    pub unprocessed_items: u64,
    pub retryable_errors: u64,
    pub dead_lettered: u64,
    pub superseded: u64,
    pub commits: u64,
}

impl Counters {
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Relaxed);
    }

    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            records_consumed: self.records_consumed.load(Relaxed),
            items_written: self.items_written.load(Relaxed),
            wcu_written: self.wcu_written.load(Relaxed),
            batches: self.batches.load(Relaxed),
            requests: self.requests.load(Relaxed),
            throttled_requests: self.throttled_requests.load(Relaxed),
            unprocessed_items: self.unprocessed_items.load(Relaxed),
            retryable_errors: self.retryable_errors.load(Relaxed),
            dead_lettered: self.dead_lettered.load(Relaxed),
            superseded: self.superseded.load(Relaxed),
            commits: self.commits.load(Relaxed),
        }
    }
}
