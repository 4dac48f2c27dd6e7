//! Telemetry: log setup, the worker's counters, and the named events that
//! count and log.
//!
//! Logs are structured (`tracing`), human or JSON by config, one line per
//! batch summary (debug) or commit (info), never one per record. The counters
//! ([`Counters`]) are plain atomics shared by the pipeline stages; the final
//! summary and the periodic commit lines read them, and so does the
//! Prometheus endpoint (`ops`), at scrape time. Code on the data path reports
//! through [`events`], which is the one place that both counts and logs. While
//! a progress bar is drawn on the terminal, log lines are written around it
//! (the bar is hidden for the write).

mod counters;
pub mod events;

pub use counters::{Counters, Snapshot};

use std::io::Write;

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
/// the configured level. A log line that cannot be written (stderr closed,
/// its reader gone) is dropped: tracing's own report of that failure is an
/// `eprintln!`, which panics on a broken pipe.
pub fn init_logs(settings: &LogSettings) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(&settings.level));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .log_internal_errors(false)
        .with_writer(|| AroundBar);
    let _ = match settings.format {
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
        LogFormat::Human => builder.try_init(),
    };
}

/// The process's peak resident memory (Linux's VmHWM), in bytes; None where
/// it cannot be read.
pub fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    Some(status_kb(&status, "VmHWM")? * 1024)
}

/// A `kB` field of a `/proc/<pid>/status` text (say `VmRSS`).
pub fn status_kb(status: &str, field: &str) -> Option<u64> {
    let line = status
        .lines()
        .find(|l| l.split(':').next() == Some(field))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// CPU time this process has used (user + system, all threads), seconds,
/// from `/proc/self/stat` (Linux; None elsewhere). The kernel counts it in
/// USER_HZ ticks, 100 a second on every Linux the project targets.
pub fn cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    cpu_seconds_of(&stat)
}

/// [`cpu_seconds`] of a `/proc/<pid>/stat` line: utime and stime are its
/// 14th and 15th fields (the 12th and 13th after the command's `)`).
pub fn cpu_seconds_of(stat: &str) -> Option<f64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some((utime + stime) as f64 / 100.0)
}

#[cfg(test)]
mod cpu_tests {
    use super::*;

    #[test]
    fn cpu_time_is_utime_plus_stime_in_ticks() {
        // A command with spaces and a parenthesis in it.
        let line = "42 (a (b) c) S 1 42 42 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 3 0";
        assert_eq!(cpu_seconds_of(line), Some(3.25));
        assert_eq!(cpu_seconds_of("garbage"), None);
        assert!(cpu_seconds().is_some_and(|s| s >= 0.0));
    }

    #[test]
    fn a_status_field_is_read_in_kb() {
        let status = "Name:\tingest\nVmHWM:\t  51200 kB\nVmRSS:\t   4096 kB\n";
        assert_eq!(status_kb(status, "VmRSS"), Some(4096));
        assert_eq!(status_kb(status, "VmHWM"), Some(51200));
        assert_eq!(status_kb(status, "VmSwap"), None);
        assert!(peak_rss_bytes().is_some_and(|b| b > 0));
    }
}
