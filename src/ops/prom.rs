//! The Prometheus text rendering of the worker's metrics.
//!
//! The worker's counters (`telemetry::Counters`, each table's `Control`) stay
//! the single source of truth, as logged; at each scrape they are copied into
//! a `prometheus` registry owned by this worker (no global registry) and
//! encoded in the text format. Only the BatchWriteItem latency histogram is
//! recorded as calls return. Label sets are bounded: `table` (the configured
//! routes), `reason` (a fixed set), `strategy` (one per table), and
//! `topic`/`partition` (the partitions held; a revoked partition's series
//! goes). Every metric is listed in [`METRICS`] and documented in the README.

use std::collections::HashMap;

use parking_lot::Mutex;
use prometheus::{
    CounterVec, Encoder, GaugeVec, HistogramOpts, HistogramVec, IntCounterVec, Opts, Registry,
    TextEncoder,
};

use super::live::{Live, TableView};

/// The name of the latency histogram.
pub const BATCH_WRITE_SECONDS: &str = "ingest_batch_write_seconds";

/// Upper bounds of the latency histogram's buckets, in seconds.
const LATENCY_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A counter of whole things.
    Counter,
    /// A counter of seconds.
    Seconds,
    Gauge,
    Histogram,
}

/// Every metric served: name, kind, labels (comma-separated), help.
pub const METRICS: &[(&str, Kind, &str, &str)] = &[
    ("ingest_records_consumed_total", Kind::Counter, "", "Records read from Kafka (redeliveries after a rebalance count again)."),
    ("ingest_items_written_total", Kind::Counter, "table", "Items DynamoDB accepted (BatchWriteItem)."),
    ("ingest_records_superseded_total", Kind::Counter, "table", "Records merged into a later record with the same key in one batch (the later one is written)."),
    ("ingest_wcu_consumed_total", Kind::Counter, "table", "Write capacity units of the items written (ceil(size / 1 KB) each)."),
    ("ingest_batches_total", Kind::Counter, "", "Batches formed (each written with one or more BatchWriteItem calls)."),
    ("ingest_write_requests_total", Kind::Counter, "table", "BatchWriteItem calls sent."),
    ("ingest_throttled_requests_total", Kind::Counter, "table", "Calls throttled: ProvisionedThroughputExceeded, or any item returned unprocessed."),
    ("ingest_unprocessed_items_total", Kind::Counter, "table", "Items DynamoDB returned in UnprocessedItems (sent again)."),
    ("ingest_write_errors_total", Kind::Counter, "table", "Calls that failed transiently (network, 5xx) and were retried."),
    ("ingest_dead_lettered_total", Kind::Counter, "reason", "Records sent to the dead-letter topic, by reason."),
    ("ingest_commits_total", Kind::Counter, "", "Offset commits to Kafka."),
    ("ingest_assignments_lost_total", Kind::Counter, "", "Revocations after the group session expired: what was written since the last commit is written again by the next owner."),
    ("ingest_backoff_sleep_seconds_total", Kind::Seconds, "table", "Time writers of the table spent sleeping on the strategy's or the transient backoff's delays."),
    ("ingest_strategy_invocations_total", Kind::Counter, "table,strategy", "Answers the throttle strategy was told about (AutoSleeper: invocations)."),
    ("ingest_strategy_went_up_total", Kind::Counter, "table,strategy", "Times the strategy's delay went up (or its rate down)."),
    ("ingest_strategy_went_down_total", Kind::Counter, "table,strategy", "Times the strategy's delay went down (or its rate up)."),
    ("ingest_strategy_sleeps_total", Kind::Counter, "table,strategy", "Non-zero delays the strategy handed out (AutoSleeper: slept)."),
    ("ingest_strategy_sleep_seconds_total", Kind::Seconds, "table,strategy", "Sum of those delays (AutoSleeper: total sleep time)."),
    ("ingest_backoff_delay_seconds", Kind::Gauge, "table", "The strategy's current delay."),
    ("ingest_pacing_rate_wcu", Kind::Gauge, "table", "The pacing rate, WCU per second (absent when unpaced)."),
    ("ingest_capacity_wcu", Kind::Gauge, "table", "The write capacity the table's writes are paced to: its provisioned capacity (or on-demand maximum), or a global secondary index's bound where lower (absent when unknown)."),
    ("ingest_capacity_share", Kind::Gauge, "table", "This worker's share of the table: its share of the backlog of the partitions feeding it (of the partitions, when there is no backlog), times its job's part of the table."),
    ("ingest_job_part", Kind::Gauge, "table", "This job's part of the table among the ingest jobs (consumer groups) writing it, heard on the lessons topic (1 when it is alone)."),
    ("ingest_hot_keys", Kind::Gauge, "table", "Keys a hot key range (a partition at its own maximum) refused within the last minute, paced apart from the table's other keys."),
    ("ingest_hot_rate_wcu", Kind::Gauge, "table", "The pacing rate of those keys together, WCU per second (absent when no hot range is known)."),
    ("ingest_time_slot_width", Kind::Gauge, "table", "The part of each second in which this worker sends, when the table admits too little at once for its peers' requests to meet (time slots; 1 when it sends at any time)."),
    ("ingest_consumer_lag", Kind::Gauge, "topic,partition", "Records between the committed offset and the end of each held partition (librdkafka's consumer_lag)."),
    ("ingest_assigned_partitions", Kind::Gauge, "", "Partitions this worker holds."),
    ("ingest_records_in_flight", Kind::Gauge, "", "Records read and not yet written, dead-lettered or abandoned."),
    ("ingest_ready", Kind::Gauge, "", "1 when /readyz answers ready."),
    ("ingest_buffered_bytes", Kind::Gauge, "", "Bytes of records read and not yet written, dead-lettered or abandoned (the source pauses at pipeline.max_buffered_bytes)."),
    ("ingest_table_queued_records", Kind::Gauge, "table", "Records routed to the table and not yet in a batch."),
    ("ingest_table_congested", Kind::Gauge, "table", "1 while the table's queue is long: the partitions feeding it are paused."),
    ("ingest_peak_rss_bytes", Kind::Gauge, "", "The process's peak resident memory (VmHWM)."),
    ("ingest_backlog_remaining_records", Kind::Gauge, "", "--until-caught-up: records left to the end offsets seen at assignment."),
    ("ingest_eta_seconds", Kind::Gauge, "", "--until-caught-up: estimated time to catch up."),
    (BATCH_WRITE_SECONDS, Kind::Histogram, "table", "BatchWriteItem latency."),
];

#[derive(Debug, Clone)]
enum Family {
    Counter(IntCounterVec),
    Seconds(CounterVec),
    Gauge(GaugeVec),
    Histogram(HistogramVec),
}

/// The worker's Prometheus registry.
#[derive(Debug)]
pub struct Exporter {
    registry: Registry,
    families: HashMap<&'static str, Family>,
    /// One scrape at a time (copying the counters in is not atomic).
    scrape: Mutex<()>,
}

impl Default for Exporter {
    fn default() -> Self {
        Self::new()
    }
}

impl Exporter {
    pub fn new() -> Self {
        let registry = Registry::new();
        let mut families = HashMap::new();
        for &(name, kind, labels, help) in METRICS {
            let labels: Vec<&str> = labels.split(',').filter(|l| !l.is_empty()).collect();
            let opts = Opts::new(name, help);
            let bad = "metric definitions are valid and distinct";
            let family = match kind {
                Kind::Counter => Family::Counter(IntCounterVec::new(opts, &labels).expect(bad)),
                Kind::Seconds => Family::Seconds(CounterVec::new(opts, &labels).expect(bad)),
                Kind::Gauge => Family::Gauge(GaugeVec::new(opts, &labels).expect(bad)),
                Kind::Histogram => Family::Histogram(
                    HistogramVec::new(
                        HistogramOpts::new(name, help).buckets(LATENCY_BUCKETS.to_vec()),
                        &labels,
                    )
                    .expect(bad),
                ),
            };
            let collector: Box<dyn prometheus::core::Collector> = match family.clone() {
                Family::Counter(f) => Box::new(f),
                Family::Seconds(f) => Box::new(f),
                Family::Gauge(f) => Box::new(f),
                Family::Histogram(f) => Box::new(f),
            };
            registry.register(collector).expect(bad);
            families.insert(name, family);
        }
        Self {
            registry,
            families,
            scrape: Mutex::new(()),
        }
    }

    /// The latency histogram of one table, to record into as calls return.
    pub fn latency(&self, table: &str) -> prometheus::Histogram {
        match &self.families[BATCH_WRITE_SECONDS] {
            Family::Histogram(h) => h.with_label_values(&[table]),
            _ => unreachable!("{BATCH_WRITE_SECONDS} is a histogram"),
        }
    }

    /// Raises a counter to `v` (counters only go up; `v` is a running total).
    fn counter(&self, name: &str, labels: &[&str], v: u64) {
        match &self.families[name] {
            Family::Counter(f) => {
                let c = f.with_label_values(labels);
                c.inc_by(v.saturating_sub(c.get()));
            }
            _ => unreachable!("{name} is an integer counter"),
        }
    }

    fn seconds(&self, name: &str, labels: &[&str], v: f64) {
        match &self.families[name] {
            Family::Seconds(f) => {
                let c = f.with_label_values(labels);
                let delta = v - c.get();
                if delta > 0.0 {
                    c.inc_by(delta);
                }
            }
            _ => unreachable!("{name} is a seconds counter"),
        }
    }

    fn gauge_family(&self, name: &str) -> &GaugeVec {
        match &self.families[name] {
            Family::Gauge(f) => f,
            _ => unreachable!("{name} is a gauge"),
        }
    }

    fn gauge(&self, name: &str, labels: &[&str], v: f64) {
        self.gauge_family(name).with_label_values(labels).set(v);
    }

    /// Copies the live figures in and renders the text exposition.
    pub fn render(&self, live: &Live) -> String {
        let _one = self.scrape.lock();
        self.update(live);
        let mut out = Vec::new();
        if let Err(e) = TextEncoder::new().encode(&self.registry.gather(), &mut out) {
            return format!("# encoding failed: {e}\n");
        }
        String::from_utf8(out).unwrap_or_default()
    }

    fn update(&self, live: &Live) {
        let s = live.counters.snapshot();
        self.counter("ingest_records_consumed_total", &[], s.records_consumed);
        self.counter("ingest_batches_total", &[], s.batches);
        self.counter("ingest_commits_total", &[], s.commits);
        self.counter("ingest_assignments_lost_total", &[], s.assignments_lost);
        for (reason, n) in live.counters.dead_letters_by_reason() {
            self.counter("ingest_dead_lettered_total", &[reason], n);
        }
        for t in &live.tables {
            self.update_table(t);
        }
        // Only the partitions held now.
        let lag = self.gauge_family("ingest_consumer_lag");
        lag.reset();
        for ((topic, partition), n) in live.lag() {
            lag.with_label_values(&[topic.as_str(), &partition.to_string()])
                .set(n as f64);
        }
        self.update_gauges(live);
    }

    /// One table's counters, its strategy's and its control's state.
    fn update_table(&self, t: &TableView) {
        let table: &[&str] = &[&t.name];
        let c = t.control.counts.snapshot();
        self.counter("ingest_items_written_total", table, c.items_written);
        self.counter("ingest_records_superseded_total", table, c.superseded);
        self.counter("ingest_wcu_consumed_total", table, c.wcu_written);
        self.counter("ingest_write_requests_total", table, c.requests);
        self.counter(
            "ingest_throttled_requests_total",
            table,
            c.throttled_requests,
        );
        self.counter("ingest_unprocessed_items_total", table, c.unprocessed_items);
        self.counter("ingest_write_errors_total", table, c.retryable_errors);
        let r = t.control.report();
        self.seconds("ingest_backoff_sleep_seconds_total", table, r.slept_s);
        let st: &[&str] = &[&t.name, r.strategy];
        let m = r.metrics;
        self.counter("ingest_strategy_invocations_total", st, m.invocations);
        self.counter("ingest_strategy_went_up_total", st, m.went_up);
        self.counter("ingest_strategy_went_down_total", st, m.went_down);
        self.counter("ingest_strategy_sleeps_total", st, m.slept);
        self.seconds(
            "ingest_strategy_sleep_seconds_total",
            st,
            m.total_sleep.as_secs_f64(),
        );
        self.gauge("ingest_backoff_delay_seconds", table, r.current_delay_s);
        if let Some(rate) = r.pacing_rate {
            self.gauge("ingest_pacing_rate_wcu", table, rate);
        }
        if let Some(c) = r.capacity {
            self.gauge("ingest_capacity_wcu", table, c);
        }
        if let Some(share) = r.share {
            self.gauge("ingest_capacity_share", table, share);
        }
        self.gauge("ingest_job_part", table, r.job_part);
        self.gauge("ingest_hot_keys", table, r.hot_keys as f64);
        self.gauge(
            "ingest_time_slot_width",
            table,
            r.time_slot_width.unwrap_or(1.0),
        );
        let hot_rate = self.gauge_family("ingest_hot_rate_wcu");
        match r.hot_rate {
            Some(rate) => hot_rate.with_label_values(table).set(rate),
            None => {
                let _ = hot_rate.remove_label_values(table);
            }
        }
    }

    /// The process's gauges: partitions, buffers, queues, readiness, progress.
    fn update_gauges(&self, live: &Live) {
        let (assigned, in_flight) = {
            let t = live.acks.lock();
            (t.assigned().len(), t.pending_total())
        };
        self.gauge("ingest_assigned_partitions", &[], assigned as f64);
        self.gauge(
            "ingest_buffered_bytes",
            &[],
            live.buffered.load(std::sync::atomic::Ordering::Relaxed) as f64,
        );
        for t in &live.tables {
            let table = &[&*t.name];
            self.gauge(
                "ingest_table_queued_records",
                table,
                t.queue.queued() as f64,
            );
            let congested = if t.queue.is_congested() { 1.0 } else { 0.0 };
            self.gauge("ingest_table_congested", table, congested);
        }
        if let Some(rss) = crate::telemetry::peak_rss_bytes() {
            self.gauge("ingest_peak_rss_bytes", &[], rss as f64);
        }
        self.gauge("ingest_records_in_flight", &[], in_flight as f64);
        let ready = live.readiness().ready();
        self.gauge("ingest_ready", &[], if ready { 1.0 } else { 0.0 });
        if let Some(p) = live.progress() {
            self.gauge(
                "ingest_backlog_remaining_records",
                &[],
                p.backlog.remaining() as f64,
            );
            if let Some(eta) = p.eta {
                self.gauge("ingest_eta_seconds", &[], eta.as_secs_f64());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_metric_is_registered_and_named_by_the_rules() {
        let e = Exporter::new();
        assert_eq!(e.families.len(), METRICS.len(), "names are distinct");
        for (name, kind, _, help) in METRICS {
            assert!(name.starts_with("ingest_"), "{name}");
            assert!(!help.is_empty(), "{name} has help");
            let counter = matches!(kind, Kind::Counter | Kind::Seconds);
            assert_eq!(
                name.ends_with("_total"),
                counter,
                "{name}: _total iff a counter"
            );
        }
    }

    #[test]
    fn counters_follow_running_totals_without_going_down() {
        let e = Exporter::new();
        e.counter("ingest_commits_total", &[], 5);
        e.counter("ingest_commits_total", &[], 7);
        e.counter("ingest_commits_total", &[], 6);
        e.seconds("ingest_backoff_sleep_seconds_total", &["t"], 1.5);
        e.seconds("ingest_backoff_sleep_seconds_total", &["t"], 2.25);
        let mut out = Vec::new();
        TextEncoder::new()
            .encode(&e.registry.gather(), &mut out)
            .unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("ingest_commits_total 7\n"), "{text}");
        assert!(
            text.contains("ingest_backoff_sleep_seconds_total{table=\"t\"} 2.25\n"),
            "{text}"
        );
        assert!(
            text.contains("# TYPE ingest_commits_total counter"),
            "{text}"
        );
    }
}
