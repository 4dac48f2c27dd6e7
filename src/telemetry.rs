//! Telemetry: log setup and the worker's counters.
//!
//! Logs are structured (`tracing`), human or JSON by config, one line per
//! batch summary (debug) or commit (info), never one per record. The counters
//! are plain atomics shared by the pipeline stages; the final summary and the
//! periodic commit lines read them, and so does the Prometheus endpoint
//! (`ops`), at scrape time. While a progress bar is drawn on the terminal,
//! log lines are written around it (the bar is hidden for the write).

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use parking_lot::Mutex;
use serde::Deserialize;

/// The progress bar on stderr, if one is drawn.
static BAR: Mutex<Option<indicatif::ProgressBar>> = Mutex::new(None);

/// Sets (or clears) the progress bar log lines must be written around.
pub fn set_bar(bar: Option<indicatif::ProgressBar>) {
    *BAR.lock() = bar;
}

/// Stderr, hiding the progress bar (if any) during each write.
struct AroundBar;

impl Write for AroundBar {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let bar = BAR.lock().clone();
        match bar {
            Some(b) => b.suspend(|| std::io::stderr().write_all(buf).map(|()| buf.len())),
            None => std::io::stderr().write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Human,
    Json,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LogSettings {
    pub format: LogFormat,
    /// A level or a `tracing` filter.
    pub level: String,
}

impl Default for LogSettings {
    fn default() -> Self {
        Self {
            format: LogFormat::Human,
            level: "info".into(),
        }
    }
}

/// Installs the global subscriber (stderr). `RUST_LOG`, when set, wins over
/// the configured level.
pub fn init_logs(settings: &LogSettings) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(&settings.level));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(|| AroundBar);
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
    /// Revocations after the group session expired (nothing could be committed).
    pub assignments_lost: AtomicU64,
    /// Dead-lettered records per reason (a bounded set of static labels).
    dead_letter_reasons: Mutex<BTreeMap<&'static str, u64>>,
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
    pub assignments_lost: u64,
}

impl Counters {
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Relaxed);
    }

    /// Counts one dead-lettered record.
    pub fn dead_letter(&self, reason: &'static str) {
        Self::add(&self.dead_lettered, 1);
        *self.dead_letter_reasons.lock().entry(reason).or_default() += 1;
    }

    /// Dead-lettered records per reason.
    pub fn dead_letters_by_reason(&self) -> BTreeMap<&'static str, u64> {
        self.dead_letter_reasons.lock().clone()
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
            assignments_lost: self.assignments_lost.load(Relaxed),
        }
    }
}

/// The process's peak resident memory (Linux's VmHWM), in bytes; None where
/// it cannot be read.
pub fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}
