//! `make bench-dynamodb`: the throttle strategies side by side on the server
//! shapes of a production DynamoDB table that `make bench-throttle` does not
//! have, through `ingest throttle-proxy` in front of LocalStack:
//!
//! - `hot-range`: 4 partitions of 50 WCU/s in a 150 WCU/s table; keys
//!   drawn from a Zipf law (s = 1.1, 1,000 keys) plus one key that carries
//!   30% of the records (its demand alone is above its partition's maximum);
//! - `live-writer`: a 200 WCU/s table (1 s bucket, no burst credit) that
//!   another writer uses at a steady 60 WCU/s (30%) with PutItem through the
//!   same proxy, the SDK's retries off, its own throttles counted; 3 workers,
//!   without a budget and (default strategy) with `budget_fraction = 0.65`;
//! - `two-jobs`: two consumer groups of 3 workers each, on one 200 WCU/s table;
//! - `on-demand`: an on-demand table with a maximum of 150 WRU/s, raised to 300
//!   20 s after the first write;
//! - `capacity-step`: 200 -> 100 -> 300 WCU/s (20 s, 40 s);
//! - `shallow`: a 200 WCU/s table whose bucket holds 0.05 s (10 WCU, a fifth
//!   of a full batch) or 0.025 s (5 WCU, the costliest item) and no burst
//!   credit, 1 and 3 workers;
//! - `half-second bucket`: the same with a bucket of 0.5 s (100 WCU, about
//!   two full batches): deeper than the time slots are for, shallower than
//!   the workers' coinciding batches;
//! - `index`: a 200 WCU/s table whose global secondary index (every item
//!   reaches it) has 100 WCU/s, 1 and 3 workers: the index bounds the job;
//! - `reference` (only when `BENCH_SCENARIO` is exactly `reference`, no
//!   strategy; `BENCH_REF_*` and `BENCH_HOT_BURST_S` shape it): writers
//!   told the exact capacity, pacing at fixed fractions of it on one
//!   partition, whose throttles are what the server's depth and this
//!   machine's timing cost a writer that knows the rate (see [`reference`];
//!   report, written once every fraction has run:
//!   target/bench/dynamodb-reference.json).
//!
//! Scaled down from DynamoDB's figures (1,000 WCU/s per partition, 4,000 WRU/s
//! for a new on-demand table) to what LocalStack on a 2-core machine writes.
//! Anchors: the AWS SDK's standard and adaptive retry modes, the seed
//! AutoSleeper and exponential backoff. A request counts as throttled if it
//! got a throttling error or came back with any unprocessed item; for the SDK
//! modes, the proxy's count (the SDK retries out of the worker's sight).
//! Reports: target/bench/dynamodb.{md,json}. BENCH_ONLY (a strategy label's
//! part), BENCH_SCENARIO (a scenario name's part) and BENCH_WORKERS ("1,3")
//! narrow a run; BENCH_HOT_TABLE_WCU and BENCH_HOT_BURST_S set the hot
//! range's table capacity and bucket depth (the latter also the reference's); BENCH_SCALE multiplies the
//! hot-range, live-writer and two-jobs runs' records; BENCH_LIVE_WCU sets the
//! live writer's steady WCU/s (default 60); BENCH_HOT_LIVE_WCU puts such a
//! writer on the hot range's table too (default 0: none), and
//! BENCH_HOT_BUDGET a `budget_fraction` for its job; BENCH_LOG_DIR keeps each
//! worker's log lines there; BENCH_INDEX_BURST_S sets the index rows'
//! bucket depth (default 1 s), BENCH_TWO_JOBS_BURST_S the two jobs' table's
//! (default the proxy's 1 s). BENCH_BROKER=mock runs the workers on
//! librdkafka's mock cluster in this process instead of tansu: a new
//! group's first rebalance held BENCH_MOCK_REBALANCE_DELAY_MS (3,000, as
//! Kafka's `group.initial.rebalance.delay.ms` by default) for every member
//! joining within it, where tansu holds each later member's JoinGroup 3 s.

#[path = "../tests/common/mod.rs"]
mod common;
#[path = "support/mod.rs"]
mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use common::*;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use support::{
    col, configure, default_variant, trace_rows, write_span, Job, JobResult, StopOnDrop, Variant,
    WorkerRows, VARIANTS,
};

/// The anchors the issue names for these shapes (bench-throttle also runs
/// naive retry and Heroku's proportional-remaining).
fn compared(v: &Variant) -> bool {
    !["naive immediate retry", "Heroku proportional-remaining"].contains(&v.label)
}

/// bench-throttle's mixed sizes (1, 2 and 5 WCU), keyed `{prefix}-...`.
fn mixed(n: usize, prefix: &str) -> (Vec<(String, Option<String>)>, f64) {
    let (records, wcu) = mixed_sizes_keyed(n, &format!("{prefix}-"));
    (records, wcu as f64)
}

/// The proxy's counters, with the throttled-request rate as the bench
/// counts it (400s and partial answers over requests).
fn proxy_rate(st: &Value) -> (f64, f64) {
    let f = |k: &str| st[k].as_f64().unwrap_or(0.0);
    let throttled = f("throttled_requests") + f("partial_requests");
    (throttled, f("requests"))
}

/// The job's throttled requests (400 or partial) and requests from
/// `STEADY_AFTER_S` after its first accepted write on, from the proxy's
/// timeline: what is left once the workers have met the table.
fn steady_throttles(st: &Value) -> (f64, f64) {
    let t = timeline(st);
    let Some(first) = t.iter().position(|x| x[1] > 0.0) else {
        return (0.0, 0.0);
    };
    let after = &t[(first + STEADY_AFTER_S).min(t.len())..];
    (
        after.iter().map(|x| x[2]).sum(),
        after.iter().map(|x| x[4]).sum(),
    )
}

/// The proxy's per-second timeline of a table (its stats): [second,
/// accepted WCU, throttled requests, capacity in force, requests].
fn timeline(st: &Value) -> Vec<[f64; 5]> {
    match &st["timeline"] {
        Value::Null => Vec::new(),
        t => serde_json::from_value(t.clone())
            .unwrap_or_else(|e| panic!("the proxy's timeline is not rows of 5 numbers: {e}")),
    }
}

/// Seconds after a job's first write that `steady_throttles` leaves out.
const STEADY_AFTER_S: usize = 15;

/// The accepted rate averaged over the 3 s of the proxy's timeline ending
/// at `i` (not before `from`).
fn rolling(t: &[[f64; 5]], from: usize, i: usize) -> f64 {
    let lo = i.saturating_sub(2).max(from);
    t[lo..=i].iter().map(|x| x[1]).sum::<f64>() / (i - lo + 1) as f64
}

/// Seconds from `from` (an index of the proxy's per-second timeline) until
/// the 3 s rolling accepted rate first stays within 85-105% of `cap` for
/// the rest of `[from, to)` (None: never).
fn settle_after(t: &[[f64; 5]], from: usize, to: usize, cap: f64) -> Option<f64> {
    let ok = |i: usize| (0.85 * cap..=1.05 * cap).contains(&rolling(t, from, i));
    (from..to)
        .find(|&i| (i..to).all(|j| j < from + 2 || ok(j)))
        .map(|i| (i - from) as f64)
}

/// Seconds from `from` until the 3 s rolling accepted rate first reaches 90%
/// of `cap` (None: not before `to`).
fn reach_after(t: &[[f64; 5]], from: usize, to: usize, cap: f64) -> Option<f64> {
    (from..to)
        .find(|&i| rolling(t, from, i) >= 0.9 * cap)
        .map(|i| (i - from) as f64)
}

/// Seconds from `step_s` until the workers' summed pacing rate, per whole
/// second of the trace's clock (the job's start), first reaches 90% of
/// `cap` before `until_s`.
fn pacing_reach_after(trace: &Value, step_s: f64, until_s: f64, cap: f64) -> Option<f64> {
    let mut sums: std::collections::BTreeMap<i64, f64> = Default::default();
    for r in trace_rows(trace).iter().flatten() {
        if let (Some(t), Some(p)) = (r[col::T], r[col::PACING]) {
            *sums.entry(t.floor() as i64).or_default() += p;
        }
    }
    let from = step_s.floor();
    sums.into_iter()
        .filter(|(t, _)| (*t as f64) >= from && (*t as f64) < until_s)
        .find(|(_, p)| *p >= 0.9 * cap)
        .map(|(t, _)| t as f64 - from)
}

/// The hot range's table capacity: 150 WCU/s (3,000 WCU scaled, on four
/// partitions that take 200 together: well above the job's demand, which
/// the hot partition bounds near 105, and a shape DynamoDB has, where each
/// partition takes at most 1,000 WCU/s and a table has enough of them to
/// deliver its capacity), or `BENCH_HOT_TABLE_WCU`. 1,000 (the default
/// until 2026-11-27) is five times what the four partitions take together,
/// a table DynamoDB would have split into twenty: a stress shape, whose
/// start overruns every partition at once.
fn hot_table_wcu() -> f64 {
    env_or("BENCH_HOT_TABLE_WCU", 150.0)
}

/// The hot range's bucket depth, the table's and each partition's: the
/// proxy's 1 s, or `BENCH_HOT_BURST_S` (a shape the hot range was not
/// tuned on).
fn hot_burst_s() -> f64 {
    env_or("BENCH_HOT_BURST_S", 1.0)
}

/// A neighbour's steady WCU/s on the hot range's table:
/// `BENCH_HOT_LIVE_WCU` (default 0, none). A shape the hot range was not
/// tuned on: a parted table with another writer on it.
fn hot_live_wcu() -> f64 {
    env_or("BENCH_HOT_LIVE_WCU", 0.0_f64).max(0.0)
}

/// The hot range's job's `budget_fraction`: `BENCH_HOT_BUDGET` (default
/// none).
fn hot_budget() -> Option<f64> {
    std::env::var("BENCH_HOT_BUDGET")
        .ok()
        .map(|v| v.parse().expect("BENCH_HOT_BUDGET: a fraction, as 0.65"))
}

/// `hot-range`: returns the row.
async fn hot_range(v: &Variant, workers: usize, n: usize, run: usize) -> Value {
    use ingest::proxy::partitions::Partitions;
    const PARTITION_WCU: f64 = 50.0;
    let table_wcu = hot_table_wcu();
    // A sort key, so that records of one partition key are distinct items
    // (without one they coalesce in a batch and the hot key's demand melts).
    let s = Setup::build(
        workers.max(3) as i32,
        "partition_key = \"id\"\nsort_key = \"sk\"",
        Some(table_wcu as i64),
    )
    .await;
    let proxy = ThrottleProxy::partitioned(4, 50, hot_burst_s());
    s.use_endpoint(&proxy.endpoint());
    let budget = hot_budget();
    let extra = budget.map_or(String::new(), |b| format!("budget_fraction = {b}\n"));
    configure(&s, v, &extra);
    let live_wcu = hot_live_wcu();
    // Zipf(1.1) over 1,000 keys for 70% of the records, one key for 30%.
    let weights: Vec<f64> = (1..=1000).map(|k| (k as f64).powf(-1.1)).collect();
    let total: f64 = weights.iter().sum();
    let mut cdf = Vec::with_capacity(weights.len());
    let mut acc = 0.0;
    for w in &weights {
        acc += w / total;
        cdf.push(acc);
    }
    let mut rng = SmallRng::seed_from_u64(run as u64);
    let ids: Vec<String> = (0..n)
        .map(|_| {
            if rng.random::<f64>() < 0.3 {
                format!("whale-{run}")
            } else {
                let u: f64 = rng.random();
                let k = cdf.partition_point(|c| *c < u).min(cdf.len() - 1);
                format!("z{run}-{k:04}")
            }
        })
        .collect();
    let parts = Partitions::new(4, PARTITION_WCU, 1.0, Duration::ZERO);
    let mut load = [0.0f64; 4];
    for id in &ids {
        load[parts.of(&format!(r#"{{"S":"{id}"}}"#))] += 1.0;
    }
    // The neighbour's WCU/s in each partition: its keys spread evenly.
    let mut live_load = [0.0f64; 4];
    for k in 0..LIVE_KEYS {
        live_load[parts.of(&format!(r#"{{"S":"live-{k}"}}"#))] += live_wcu / LIVE_KEYS as f64;
    }
    // Items of 1 WCU: the hot partition's maximum, or the table's capacity
    // if that is what binds, less what the neighbour takes of either.
    let bound_s = load.iter().zip(&live_load).fold(
        n as f64 / (table_wcu - live_wcu).max(1.0),
        |a, (l, live)| a.max(l / (PARTITION_WCU - live).max(1.0)),
    );
    let batch = ids
        .iter()
        .enumerate()
        .map(|(n, id)| (id.clone(), Some(format!(r#"{{"id":"{id}","sk":{n}}}"#))))
        .collect();
    produce(&s.topic, batch).await;
    let neighbour = if live_wcu > 0.0 {
        Some(Neighbour::start(proxy.endpoint(), s.table.clone(), live_wcu, true).await)
    } else {
        None
    };
    let job = Job::start(&s, workers).finish(v.label);
    let live_counts = neighbour.map(Neighbour::finish).unwrap_or_default();
    let st = proxy.stats(&s.table);
    let (throttled, requests) = proxy_rate(&st);
    // PutItem is the neighbour's, and its throttles too.
    let (throttled, requests) = (
        throttled - live_counts.throttled as f64,
        requests - live_counts.requests as f64,
    );
    let steady = steady_throttles(&st);
    // The job's seconds: with a neighbour, the timeline's (BatchWriteItem
    // only), since the proxy's first write is the neighbour's.
    let t = timeline(&st);
    let busy: Vec<usize> = (0..t.len()).filter(|&i| t[i][1] > 0.0).collect();
    let (first, last) = (
        busy.first().copied().unwrap_or(0),
        busy.last().copied().unwrap_or(0),
    );
    let duration = if live_wcu > 0.0 {
        (last - first + 1) as f64
    } else {
        write_span(&st)
    };
    // What the busiest partition admitted (the neighbour's writes included)
    // while the job wrote, against its maximum.
    let busiest = (0..load.len())
        .max_by(|&a, &b| load[a].total_cmp(&load[b]))
        .unwrap_or(0);
    let admitted: f64 = st["partition_timeline"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
        .filter(|(i, _)| live_wcu == 0.0 || (first..=last).contains(i))
        .filter_map(|(_, sec)| sec[busiest].as_f64())
        .sum();
    let busiest_used = admitted / (PARTITION_WCU * duration.max(1.0));
    assert_eq!(
        // The neighbour's items (sort key -1) left out.
        count_where(
            &dynamo().await,
            &s.table,
            Some((
                "attribute_not_exists(sk) OR sk >= :v",
                AttributeValue::N("0".into())
            )),
        )
        .await,
        n,
        "{}: every record written",
        v.label
    );
    s.delete_table().await;
    json!({
        "scenario": "hot-range",
        "strategy": v.label,
        "steady_throttled": steady.0,
        "steady_requests": steady.1,
        "workers": workers,
        "records": n,
        "table_wcu": table_wcu,
        "burst_s": hot_burst_s(),
        "partition_load_records": load,
        "bound_s": bound_s,
        "duration_s": duration,
        "time_vs_bound": duration / bound_s,
        "busiest_partition_used": busiest_used,
        "records_per_s": n as f64 / duration,
        "requests": requests,
        "throttled_rate": throttled / requests.max(1.0),
        "key_range_refused_items": st["key_range_refused_items"],
        "budget": budget,
        "live_wcu": live_wcu,
        "live_load_wcu": live_load,
        "live_requests": live_counts.requests,
        "live_throttled": live_counts.throttled,
        "live_failed": live_counts.failed,
        "live_throttled_at_s": live_counts.throttle_times(),
        "items_written": job.items_written,
        "worker_requests": job.requests,
        "worker_throttled": job.throttled,
        "wall_s": job.wall_s,
        "partition_timeline": st["partition_timeline"],
        "trace": job.trace,
    })
}

/// The index's write capacity under the 200 WCU/s table of the `index`
/// rows.
const INDEX_WCU: f64 = 100.0;

/// The `index` rows' bucket depth, the table's and the index's: the
/// proxy's 1 s, or `BENCH_INDEX_BURST_S` (a shape the rows were not tuned
/// on).
fn index_burst_s() -> f64 {
    env_or("BENCH_INDEX_BURST_S", 1.0)
}

/// An `index` row still running this long after its start is stopped.
const INDEX_LIMIT: Duration = Duration::from_secs(120);

/// An index with less room than its table: a 200 WCU/s table (1 s bucket,
/// no burst credit) whose global secondary index, keyed by `n` (every
/// record carries it, all attributes projected: each write costs the index
/// what it costs the table), has `INDEX_WCU`. The index, not the table,
/// bounds the job; the proxy refuses what it has no room for with
/// `IndexWriteProvisionedThroughputExceeded`.
async fn index(v: &Variant, workers: usize, n: usize, run: usize) -> Value {
    let s = Setup::build(6, "", Some(200)).await;
    add_index_on_n(&dynamo().await, &s.table, "by_n", INDEX_WCU as i64).await;
    let depth = index_burst_s().to_string();
    let proxy = ThrottleProxy::start(&["--burst-s", &depth, "--burst-credit-s", "0"]);
    s.use_endpoint(&proxy.endpoint());
    configure(&s, v, "");
    let (batch, total_wcu) = mixed(n, &format!("i{run}"));
    produce(&s.topic, batch).await;
    // Collapsing anchors are stopped (the default takes about 45 s).
    let (job, stopped, written) = within(&s, v, workers, n, INDEX_LIMIT).await;
    let st = proxy.stats(&s.table);
    let (throttled, requests) = proxy_rate(&st);
    let duration = write_span(&st);
    let accepted = st["accepted_wcu"].as_f64().unwrap_or(0.0);
    let steady = steady_throttles(&st);
    let capacity = job
        .summaries
        .first()
        .and_then(|w| w["tables"][0]["capacity"].as_f64());
    s.delete_table().await;
    json!({
        "scenario": Run::Index(workers).scenario(),
        "strategy": v.label,
        "workers": workers,
        "records": n,
        "written": written,
        "stopped_after_s": stopped.then_some(INDEX_LIMIT.as_secs()),
        "wcu": total_wcu,
        "duration_s": duration,
        "index_utilization": accepted / (INDEX_WCU * duration.max(1.0)),
        "requests": requests,
        "throttled_rate": throttled / requests.max(1.0),
        "steady_throttled": steady.0,
        "steady_requests": steady.1,
        "index_refused_items": st["index_refused_items"],
        "paced_to": capacity,
        "worker_requests": job.requests,
        "worker_throttled": job.throttled,
        "wall_s": job.wall_s,
        "timeline": st["timeline"],
    })
}

/// The live writer's keys.
const LIVE_KEYS: usize = 500;

/// What the live writer saw: requests, throttles (a throughput error, or
/// for BatchWriteItem any unprocessed item), and other failures.
#[derive(Debug, Default, Clone, Copy)]
struct LiveCounts {
    requests: u64,
    throttled: u64,
    failed: u64,
    /// When its first throttles came, seconds after it began (the live
    /// writer's; [`LIVE_TIMES`] at most).
    throttled_at: [f64; LIVE_TIMES],
}

/// The live writer's throttles whose times are kept.
const LIVE_TIMES: usize = 16;

impl LiveCounts {
    /// When its first throttles came (see `throttled_at`).
    fn throttle_times(&self) -> &[f64] {
        &self.throttled_at[..(self.throttled as usize).min(LIVE_TIMES)]
    }

    /// Counts one answer: `partial` (some items unprocessed), else the
    /// error's code if any.
    fn count<T, E: aws_sdk_dynamodb::error::ProvideErrorMetadata>(
        &mut self,
        r: &Result<T, E>,
        partial: bool,
    ) {
        self.requests += 1;
        match r.as_ref().err().map(|e| e.code()) {
            None if partial => self.throttled += 1,
            None => {}
            Some(Some("ProvisionedThroughputExceededException" | "ThrottlingException")) => {
                self.throttled += 1
            }
            Some(_) => self.failed += 1,
        }
    }
}

/// Runs `writer` on a thread of its own with a current-thread runtime (a
/// writer apart from the job's, as another application would be).
fn on_own_thread(
    writer: impl std::future::Future<Output = LiveCounts> + Send + 'static,
) -> std::thread::JoinHandle<LiveCounts> {
    std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(writer)
    })
}

/// Another writer: PutItem of 1 WCU items at `rate`/s over [`LIVE_KEYS`]
/// keys (with `sort_key`, sort key -1, apart from the job's records), from
/// four lanes on one schedule, the SDK's retries off, until `stop` is set
/// (dropping the [`StopOnDrop`] that holds it).
fn live_writer(
    endpoint: String,
    table: String,
    rate: f64,
    stop: Arc<AtomicBool>,
    sort_key: bool,
) -> std::thread::JoinHandle<LiveCounts> {
    // Lanes that share one schedule, so that a round trip longer than the
    // period does not slow it (on 2026-12-02 one lane reached 78 of 150
    // puts/s here, four lanes 105-110, sixteen 96-99: LocalStack's own
    // pace on two cores, beside the job).
    const LANES: usize = 4;
    on_own_thread(async move {
        let client = dynamo_without_retries(&endpoint);
        let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let tick = Arc::new(tokio::sync::Mutex::new(tick));
        let counts = Arc::new(std::sync::Mutex::new(LiveCounts::default()));
        let sent = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let began = std::time::Instant::now();
        let lanes: Vec<_> = (0..LANES)
            .map(|_| {
                let (client, table, stop) = (client.clone(), table.clone(), stop.clone());
                let (tick, counts, sent) = (tick.clone(), counts.clone(), sent.clone());
                tokio::spawn(async move {
                    while !stop.load(Ordering::Relaxed) {
                        tick.lock().await.tick().await;
                        let n = sent.fetch_add(1, Ordering::Relaxed);
                        let id = format!("live-{}", n % LIVE_KEYS as u64);
                        let mut put = client
                            .put_item()
                            .table_name(&table)
                            .item("id", AttributeValue::S(id));
                        if sort_key {
                            put = put.item("sk", AttributeValue::N("-1".into()));
                        }
                        let r = put.send().await;
                        let mut c = counts.lock().unwrap();
                        let before = c.throttled as usize;
                        c.count(&r, false);
                        if c.throttled as usize > before && before < LIVE_TIMES {
                            c.throttled_at[before] = began.elapsed().as_secs_f64();
                        }
                    }
                })
            })
            .collect();
        for lane in lanes {
            lane.await.unwrap();
        }
        let c = *counts.lock().unwrap();
        c
    })
}

/// How long a neighbour writes alone before the job starts, as production
/// runs before a job does.
const NEIGHBOUR_LEAD: Duration = Duration::from_secs(5);

/// A [`live_writer`] running, stopped when finished or dropped (the job's
/// panic included).
struct Neighbour {
    stop: StopOnDrop,
    writer: std::thread::JoinHandle<LiveCounts>,
}

impl Neighbour {
    /// Starts it and lets it write alone for [`NEIGHBOUR_LEAD`].
    async fn start(endpoint: String, table: String, rate: f64, sort_key: bool) -> Self {
        let stop = StopOnDrop(Arc::new(AtomicBool::new(false)));
        let writer = live_writer(endpoint, table, rate, stop.0.clone(), sort_key);
        tokio::time::sleep(NEIGHBOUR_LEAD).await;
        Self { stop, writer }
    }

    /// Stops it; what it saw.
    fn finish(self) -> LiveCounts {
        drop(self.stop);
        self.writer.join().unwrap()
    }
}

/// A writer told its rate: BatchWriteItem of `clump` items, of 1 WCU or, with
/// `mixed`, of bench-throttle's 1, 2 and 5 WCU in its order, request by
/// request (the items of one request are of one size); a request partly or
/// wholly refused counts as throttled. Each request is sent when the units
/// before it are paced out at `rate` units/s, from a random phase, by four
/// lanes that share one schedule (so an answer's latency does not slow it);
/// late (every lane waiting on an answer), it goes on from then, without a
/// burst to catch up. The SDK's retries off.
fn paced_writer(
    endpoint: String,
    table: String,
    rate: f64,
    mixed: bool,
    clump: u64,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<LiveCounts> {
    const LANES: usize = 4;
    on_own_thread(async move {
        let phase: f64 = rand::rng().random::<f64>() * 5.0 / rate;
        let w = Arc::new(Paced {
            client: dynamo_without_retries(&endpoint),
            table,
            rate,
            mixed,
            clump,
            stop,
            schedule: std::sync::Mutex::new((
                tokio::time::Instant::now() + Duration::from_secs_f64(phase),
                0,
            )),
            counts: std::sync::Mutex::new(LiveCounts::default()),
        });
        let lanes: Vec<_> = (0..LANES).map(|_| tokio::spawn(w.clone().lane())).collect();
        for l in lanes {
            l.await.unwrap();
        }
        let c = *w.counts.lock().unwrap();
        c
    })
}

/// [`paced_writer`]'s state, shared by its lanes.
struct Paced {
    client: aws_sdk_dynamodb::Client,
    table: String,
    rate: f64,
    mixed: bool,
    clump: u64,
    stop: Arc<AtomicBool>,
    /// When the next request goes, and its number.
    schedule: std::sync::Mutex<(tokio::time::Instant, u64)>,
    counts: std::sync::Mutex<LiveCounts>,
}

impl Paced {
    /// One lane: takes the next request's time on the schedule (now, if
    /// that has passed), waits for it, sends, counts the answer.
    async fn lane(self: Arc<Self>) {
        use aws_sdk_dynamodb::types::{PutRequest, WriteRequest};
        while !self.stop.load(Ordering::Relaxed) {
            let (at, i, pad) = {
                let mut s = self.schedule.lock().unwrap();
                let (at, i) = (s.0.max(tokio::time::Instant::now()), s.1);
                let (pad, cost) = if self.mixed { mixed_size(i) } else { (100, 1) };
                let units = (cost * self.clump) as f64;
                *s = (at + Duration::from_secs_f64(units / self.rate), i + 1);
                (at, i, pad)
            };
            tokio::time::sleep_until(at).await;
            let item = |j: u64| {
                let put = PutRequest::builder()
                    .item("id", AttributeValue::S(format!("ref-{}-{j}", i % 500)))
                    .item("pad", AttributeValue::S("x".repeat(pad)))
                    .build()
                    .unwrap();
                WriteRequest::builder().put_request(put).build()
            };
            let r = self
                .client
                .batch_write_item()
                .request_items(&self.table, (0..self.clump).map(item).collect())
                .send()
                .await;
            let partial = r
                .as_ref()
                .is_ok_and(|o| o.unprocessed_items().is_some_and(|u| !u.is_empty()));
            self.counts.lock().unwrap().count(&r, partial);
        }
    }
}

/// `reference` (run only when named): writers told the capacity, on one
/// partition of `BENCH_REF_WCU` WCU/s (default 50, the hot range's) in a
/// table of three times that, whose bucket holds `BENCH_HOT_BURST_S`
/// seconds, at each fraction of `BENCH_REF_FRACTIONS` of it for
/// `BENCH_REF_S` seconds, split over `BENCH_REF_WRITERS` uncoordinated
/// writers ([`paced_writer`]: `BENCH_REF_MIXED=1` for mixed sizes,
/// `BENCH_REF_CLUMP` items a request; per writer, `BENCH_REF_CLUMPS` and
/// `BENCH_REF_PARTS` of the rate, as lists). No controller: the throttles they
/// meet are what the server's depth and this machine's timing cost a writer
/// that knows the exact rate and paces items as they come.
async fn reference() -> Vec<Value> {
    let partition_wcu: f64 = env_or("BENCH_REF_WCU", 50.0);
    let burst = hot_burst_s();
    let writers: usize = env_or("BENCH_REF_WRITERS", 1);
    let secs: f64 = env_or("BENCH_REF_S", 30.0);
    let mixed = env_or("BENCH_REF_MIXED", 0) == 1;
    let clump: u64 = env_or("BENCH_REF_CLUMP", 1).clamp(1, 25);
    // Per writer: its items a request and its part of the rate, from the
    // lists where given (one entry per writer, parts above 0 summing to 1),
    // else `clump` and an equal part.
    let per_writer = |name: &str, default: f64| -> Vec<f64> {
        let given: Vec<f64> = env_list(name, "");
        if given.is_empty() {
            return vec![default; writers];
        }
        assert!(
            given.len() == writers && given.iter().all(|v| *v > 0.0),
            "{name}: one number above 0 per writer ({writers}), got {given:?}"
        );
        given
    };
    let clumps: Vec<u64> = per_writer("BENCH_REF_CLUMPS", clump as f64)
        .into_iter()
        .map(|c| (c as u64).clamp(1, 25))
        .collect();
    let parts = per_writer("BENCH_REF_PARTS", 1.0 / writers as f64);
    let sum: f64 = parts.iter().sum();
    assert!(
        (sum - 1.0).abs() < 1e-6,
        "BENCH_REF_PARTS: the writers' parts sum to {sum}, not 1"
    );
    let fractions: Vec<f64> = env_list("BENCH_REF_FRACTIONS", "0.8,0.9,0.95");
    assert!(
        fractions.iter().all(|f| *f > 0.0),
        "BENCH_REF_FRACTIONS: fractions of the capacity above 0, got {fractions:?}"
    );
    let mut rows = Vec::new();
    for f in fractions {
        // The table's capacity above the partition's: the partition binds.
        let s = Setup::build(1, "", Some(3 * partition_wcu as i64)).await;
        let proxy = ThrottleProxy::partitioned(1, partition_wcu as u32, burst);
        let stop = StopOnDrop(Arc::new(AtomicBool::new(false)));
        let handles: Vec<_> = (0..writers)
            .map(|w| {
                paced_writer(
                    proxy.endpoint(),
                    s.table.clone(),
                    f * partition_wcu * parts[w],
                    mixed,
                    clumps[w],
                    stop.0.clone(),
                )
            })
            .collect();
        tokio::time::sleep(Duration::from_secs_f64(secs)).await;
        drop(stop);
        let mut c = LiveCounts::default();
        for h in handles {
            let w = h.join().unwrap();
            c.requests += w.requests;
            c.throttled += w.throttled;
            c.failed += w.failed;
        }
        // Per second, from the proxy (BatchWriteItem only): where the
        // throttles fell, the first seconds' (connections opening) apart.
        let st = proxy.stats(&s.table);
        let t = timeline(&st);
        let accepted_wcu_per_s =
            st["accepted_wcu"].as_f64().unwrap_or(0.0) / write_span(&st).max(1.0);
        let after: f64 = t.iter().skip(5).map(|x| x[2]).sum();
        let requests_after: f64 = t.iter().skip(5).map(|x| x[4]).sum();
        s.delete_table().await;
        let row = json!({
            "scenario": "reference",
            "throttled_by_second": t.iter().map(|x| x[2]).collect::<Vec<_>>(),
            "throttled_rate_after_5s": after / requests_after.max(1.0),
            "burst_s": burst,
            "writers": writers,
            "partition_wcu": partition_wcu,
            "mixed": mixed,
            "clumps": clumps,
            "parts": parts,
            "fraction": f,
            "seconds": secs,
            "requests": c.requests,
            "throttled": c.throttled,
            "failed": c.failed,
            "throttled_rate": c.throttled as f64 / c.requests.max(1) as f64,
            // Requests accepted whole, a second of the writers' time.
            "accepted_requests_per_s": (c.requests - c.throttled - c.failed) as f64 / secs,
            // What the proxy accepted (items of partial answers too), over
            // its first to last accepted write, and as a part of the
            // partition's capacity.
            "accepted_wcu_per_s": accepted_wcu_per_s,
            "accepted_of_capacity": accepted_wcu_per_s / partition_wcu,
        });
        eprintln!("{row}");
        rows.push(row);
    }
    rows
}

/// `live-writer`: returns the row.
async fn live(v: &Variant, budget: Option<f64>, n: usize, run: usize) -> Value {
    const CAPACITY: f64 = 200.0;
    let live_wcu = live_wcu();
    let s = Setup::build(3, "", Some(CAPACITY as i64)).await;
    let proxy = ThrottleProxy::start(&["--burst-credit-s", "0"]);
    s.use_endpoint(&proxy.endpoint());
    let extra = budget.map_or(String::new(), |b| format!("budget_fraction = {b}\n"));
    configure(&s, v, &extra);
    let (batch, _) = mixed(n, &format!("r{run}"));
    produce(&s.topic, batch).await;
    let neighbour = Neighbour::start(proxy.endpoint(), s.table.clone(), live_wcu, false).await;
    let job = Job::start(&s, 3).finish(v.label);
    let live_counts = neighbour.finish();
    let (live_requests, live_throttled) = (live_counts.requests, live_counts.throttled);
    let st = proxy.stats(&s.table);
    let f = |k: &str| st[k].as_f64().unwrap_or(0.0);
    // PutItem throttles are the live writer's; partial answers the job's.
    let job_requests = f("requests") - live_requests as f64;
    let job_throttled = f("throttled_requests") - live_throttled as f64 + f("partial_requests");
    // The job's seconds: the proxy's timeline counts BatchWriteItem only.
    let t = timeline(&st);
    let busy: Vec<&[f64; 5]> = t.iter().filter(|x| x[1] > 0.0).collect();
    let span = busy.last().map_or(0.0, |l| l[0]) - busy.first().map_or(0.0, |f| f[0]) + 1.0;
    let job_wcu: f64 = t.iter().map(|x| x[1]).sum();
    let free = CAPACITY - live_wcu;
    let steady = steady_throttles(&st);
    s.delete_table().await;
    json!({
        "scenario": Run::Live(budget).scenario(),
        "budget": budget,
        "strategy": v.label,
        "workers": 3,
        "records": n,
        "requests": job_requests,
        "throttled_rate": job_throttled / job_requests.max(1.0),
        "steady_throttled": steady.0,
        "steady_requests": steady.1,
        "utilization_of_free": job_wcu / (free * span),
        "duration_s": span,
        "live_requests": live_requests,
        "live_throttled": live_throttled,
        "live_throttled_rate": live_throttled as f64 / live_requests.max(1) as f64,
        "live_failed": live_counts.failed,
        "live_throttled_at_s": live_counts.throttle_times(),
        "wall_s": job.wall_s,
        "worker_trace": job.trace,
    })
}

/// `two-jobs`: returns the row.
async fn two_jobs(v: &Variant, n: usize, run: usize) -> Value {
    const CAPACITY: f64 = 200.0;
    let a = Setup::build(3, "", Some(CAPACITY as i64)).await;
    let mut b = Setup::build(3, "", None).await;
    // Job b writes to job a's table (its metrics are labelled by it).
    let text = std::fs::read_to_string(&b.config)
        .unwrap()
        .replace(&b.table, &a.table);
    std::fs::write(&b.config, text).unwrap();
    b.delete_table().await; // its own, unused
    b.table = a.table.clone();
    let burst = env_or("BENCH_TWO_JOBS_BURST_S", 1.0).to_string();
    let proxy = ThrottleProxy::start(&["--burst-s", &burst]);
    for s in [&a, &b] {
        s.use_endpoint(&proxy.endpoint());
        configure(s, v, "");
    }
    let (ra, _) = mixed(n, &format!("a{run}"));
    let (rb, _) = mixed(n, &format!("b{run}"));
    produce(&a.topic, ra).await;
    produce(&b.topic, rb).await;
    let ja = Job::start(&a, 3);
    let jb = Job::start(&b, 3);
    // Collapsing anchors are stopped (the default takes about a minute; the
    // seed AutoSleeper ran 18 minutes before it was stopped by hand).
    // Both watched at once: each job's end is its own (job b's was read
    // after job a's, so the overlap ran to the later end and the share
    // "while both ran" counted the time job a ran alone).
    let limit = TWO_JOBS_LIMIT * scale() as u32;
    let mut both = Job::finish_all_within(vec![ja, jb], v.label, limit).into_iter();
    let (ra, stopped_a) = both.next().unwrap();
    let (rb, stopped_b) = both.next().unwrap();
    let stopped = stopped_a || stopped_b;
    let st = proxy.stats(&a.table);
    let (throttled, requests) = proxy_rate(&st);
    let written = count(&dynamo().await, &a.table).await;
    if !stopped {
        assert_eq!(written, 2 * n, "{}", v.label);
    }
    // Each job's WCU/s while both ran: from its workers' consumed-WCU
    // counters at the first job's end.
    let until = ra.wall_s.min(rb.wall_s) - 1.0;
    let (rows_a, rows_b) = (trace_rows(&ra.trace), trace_rows(&rb.trace));
    // A job's WCU written by `when` (its workers' counters at their last
    // sample by then).
    let at = |rows: &[WorkerRows], when: f64| -> f64 {
        rows.iter()
            .map(|w| {
                w.iter()
                    .filter(|r| r[col::T].is_some_and(|t| t <= when))
                    .filter_map(|r| r[col::WCU])
                    .next_back()
                    .unwrap_or(0.0)
            })
            .sum()
    };
    let (wa, wb) = (at(&rows_a, until), at(&rows_b, until));
    let share = |w: f64| w / (CAPACITY * until);
    // Once both jobs write: from the second before the later job's first
    // sample with WCU written (a lower bound, as the shallow rows'
    // "formed"). Before it the groups form: a Kafka coordinator holds a new
    // group's first rebalance `group.initial.rebalance.delay.ms` (3 s by
    // default), tansu its later members' JoinGroup 3 s. To the first job's
    // last write (its workers then wait, idle, for the group to be done,
    // and exit a few seconds later). A job that wrote nothing before the
    // other's end leaves no window.
    let from = (first_write_on_trace(&rows_a).max(first_write_on_trace(&rows_b)) - 1.0)
        .clamp(0.0, until.max(0.0));
    let to = last_write_on_trace(&rows_a)
        .min(last_write_on_trace(&rows_b))
        .min(until)
        .max(from);
    let in_window =
        |rows: &[WorkerRows]| (at(rows, to) - at(rows, from)) / (CAPACITY * (to - from).max(1.0));
    let (formed_a, formed_b) = (in_window(&rows_a), in_window(&rows_b));
    let steady = steady_throttles(&st);
    // Job a's workers, then job b's.
    let traces = [rows_a, rows_b].concat();
    a.delete_table().await;
    json!({
        "scenario": "two-jobs",
        "strategy": v.label,
        "workers": 6,
        "records": 2 * n,
        "written": written,
        "stopped_after_s": stopped.then_some(limit.as_secs()),
        "requests": requests,
        "throttled_rate": throttled / requests.max(1.0),
        "steady_throttled": steady.0,
        "steady_requests": steady.1,
        "overlap_s": until,
        "job_a_share": share(wa),
        "job_b_share": share(wb),
        "together": share(wa + wb),
        "both_writing_s": [from, to],
        "together_once_both_wrote": formed_a + formed_b,
        "job_a_once_both_wrote": formed_a,
        "job_b_once_both_wrote": formed_b,
        "wall_s": ra.wall_s.max(rb.wall_s),
        "worker_trace": traces,
    })
}

/// `on-demand` and `capacity-step`: a table whose limit steps; returns the
/// row with the time to reach each limit.
async fn stepped(v: &Variant, workers: usize, on_demand: bool, n: usize, run: usize) -> Value {
    let (wcu, args, steps): (Option<i64>, Vec<&str>, Vec<(f64, f64)>) = if on_demand {
        (
            None,
            vec!["--on-demand-max", "150", "--schedule", "20=300"],
            vec![(0.0, 150.0), (20.0, 300.0)],
        )
    } else {
        (
            Some(200),
            vec!["--schedule", "20=100,40=300"],
            vec![(0.0, 200.0), (20.0, 100.0), (40.0, 300.0)],
        )
    };
    let s = Setup::build(6, "", wcu).await;
    let proxy = ThrottleProxy::start(&args);
    s.use_endpoint(&proxy.endpoint());
    configure(&s, v, "");
    let (batch, total_wcu) = mixed(n, &format!("s{run}"));
    produce(&s.topic, batch).await;
    let job = Job::start(&s, workers).finish(v.label);
    assert_eq!(count(&dynamo().await, &s.table).await, n, "{}", v.label);
    let st = proxy.stats(&s.table);
    let (throttled, requests) = proxy_rate(&st);
    let t = timeline(&st);
    let first_write_on_trace = first_write_on_trace(&trace_rows(&job.trace));
    // The last seconds, as the job drains, are not a phase's steady state.
    let end = t.len().saturating_sub(3);
    let phases: Vec<Value> = steps
        .iter()
        .enumerate()
        .map(|(i, &(at, cap))| {
            let to = steps.get(i + 1).map_or(end, |s| s.0 as usize).min(end);
            let from = (at as usize).min(end);
            let at_trace = first_write_on_trace - 1.0 + at;
            let until_trace = steps.get(i + 1).map_or(f64::INFINITY, |s| first_write_on_trace - 1.0 + s.0);
            let accepted: f64 = t[from..to].iter().map(|x| x[1]).sum();
            json!({
                "at_s": at,
                "limit": cap,
                "accepted_reached_after_s": reach_after(&t, from, to, cap),
                "pacing_reached_after_s": pacing_reach_after(&job.trace, at_trace, until_trace, cap),
                "accepted_settled_after_s": settle_after(&t, from, to, cap),
                "utilization": accepted / (cap * (to - from).max(1) as f64),
            })
        })
        .collect();
    s.delete_table().await;
    json!({
        "scenario": if on_demand { "on-demand" } else { "capacity-step" },
        "strategy": v.label,
        "workers": workers,
        "records": n,
        "wcu": total_wcu,
        "requests": requests,
        "throttled_rate": throttled / requests.max(1.0),
        "phases": phases,
        "worker_requests": job.requests,
        "worker_throttled": job.throttled,
        "wall_s": job.wall_s,
        "timeline": st["timeline"],
        "worker_trace": job.trace,
    })
}

/// `shallow`: a 200 WCU/s table whose bucket holds `depth_s` seconds of
/// capacity, no burst credit; returns the row.
async fn shallow(v: &Variant, workers: usize, depth_s: f64, n: usize, run: usize) -> Value {
    const CAPACITY: f64 = 200.0;
    let s = Setup::build(6, "", Some(CAPACITY as i64)).await;
    let depth = depth_s.to_string();
    let proxy = ThrottleProxy::start(&["--burst-s", &depth, "--burst-credit-s", "0"]);
    s.use_endpoint(&proxy.endpoint());
    configure(&s, v, "");
    let (batch, total_wcu) = mixed(n, &format!("b{run}"));
    produce(&s.topic, batch).await;
    // Collapsing anchors are stopped (the default takes 30-70 s).
    let (job, stopped, written) = within(&s, v, workers, n, SHALLOW_LIMIT).await;
    let st = proxy.stats(&s.table);
    let (throttled, requests) = proxy_rate(&st);
    let duration = write_span(&st);
    let t = timeline(&st);
    let accepted: f64 = t.iter().map(|x| x[1]).sum();
    // Steady state: the first 2 s (workers joining) and the last 3 s (the
    // job draining) left out.
    let (from, to) = (2, t.len().saturating_sub(3));
    let steady = (to > from)
        .then(|| t[from..to].iter().map(|x| x[1]).sum::<f64>() / (CAPACITY * (to - from) as f64));
    let rows = trace_rows(&job.trace);
    let formed_s = formed_at(&rows);
    let formed = formed_s.and_then(|f| {
        let on_timeline = f - first_write_on_trace(&rows);
        formed_utilization(&t, on_timeline, duration, CAPACITY)
    });
    s.delete_table().await;
    json!({
        "scenario": Run::Shallow(workers, depth_s).scenario(),
        "strategy": v.label,
        "workers": workers,
        "depth_s": depth_s,
        "records": n,
        "written": written,
        "stopped_after_s": stopped.then_some(SHALLOW_LIMIT.as_secs()),
        "wcu": total_wcu,
        "duration_s": duration,
        "utilization": accepted / (CAPACITY * duration.max(1.0)),
        "steady_utilization": steady,
        "formed_s": formed_s,
        "formed_utilization": formed,
        "requests": requests,
        "requests_x_ideal": requests / (n as f64 / 25.0).ceil(),
        "throttled_rate": throttled / requests.max(1.0),
        "worker_requests": job.requests,
        "worker_throttled": job.throttled,
        "wall_s": job.wall_s,
        "timeline": st["timeline"],
        "worker_trace": job.trace,
    })
}

/// Runs `workers` workers of `s` until done or `limit` (then they are
/// stopped); returns what they reported, whether they were stopped, and
/// the records in the table (all `n` unless stopped).
async fn within(
    s: &Setup,
    v: &Variant,
    workers: usize,
    n: usize,
    limit: Duration,
) -> (JobResult, bool, usize) {
    let (job, stopped) = Job::start(s, workers).finish_within(v.label, limit);
    let written = count(&dynamo().await, &s.table).await;
    if !stopped {
        assert_eq!(written, n, "{}", v.label);
    }
    (job, stopped, written)
}

/// The proxy's timeline starts at the first write, the workers' trace at
/// the job's start: the first second with WCU written, on the trace's clock
/// (sampled each second, so the write went within the second before it).
fn first_write_on_trace(rows: &[WorkerRows]) -> f64 {
    rows.iter()
        .flatten()
        .filter(|r| r[col::WCU].is_some_and(|w| w > 0.0))
        .filter_map(|r| r[col::T])
        .fold(f64::INFINITY, f64::min)
}

/// The sample at which a job's last write shows: the latest, over its
/// workers, of the first row with the worker's final WCU (0: no rows).
fn last_write_on_trace(rows: &[WorkerRows]) -> f64 {
    rows.iter()
        .filter_map(|w| {
            let done = w.iter().filter_map(|r| r[col::WCU]).next_back()?;
            w.iter()
                .find(|r| r[col::WCU].is_some_and(|x| x >= done))
                .and_then(|r| r[col::T])
        })
        .fold(0.0, f64::max)
}

/// When the last of a job's workers was first seen holding partitions (s
/// since the job started; None: one never was). tansu 0.6.0 holds a
/// JoinGroup from any member but the group's leader for 3 s, so with
/// several workers the first writes alone for those seconds (see the
/// README's shallow tables); a Kafka broker hands every member its
/// partitions at once. (A share of 0: the worker knows the topic's
/// partitions but holds none.)
fn formed_at(workers: &[WorkerRows]) -> Option<f64> {
    if workers.is_empty() {
        return None;
    }
    let mut at = 0.0_f64;
    for w in workers {
        let first = w.iter().find(|r| r[col::SHARE].is_some_and(|s| s > 0.0))?;
        at = at.max(first[col::T]?);
    }
    Some(at)
}

/// The utilization from the group's forming to the last write: `formed_s`
/// on the proxy's timeline (seconds since the first write; `duration_s`
/// the last write's). The forming and the first write are each known to
/// within the second before their trace rows, so the window starts a
/// second before `formed_s`: it may count up to two seconds of the start
/// rather than leave out any of the formed group's.
fn formed_utilization(
    t: &[[f64; 5]],
    formed_s: f64,
    duration_s: f64,
    capacity: f64,
) -> Option<f64> {
    let from = (formed_s - 1.0).max(0.0).floor() as usize;
    let span = duration_s - from as f64;
    (from < t.len() && span > 0.0)
        .then(|| t[from..].iter().map(|x| x[1]).sum::<f64>() / (capacity * span))
}

/// How long a shallow row may run before its workers are stopped.
const SHALLOW_LIMIT: Duration = Duration::from_secs(180);

/// A two-jobs row still running this long (x `scale()`) after its start is
/// stopped.
const TWO_JOBS_LIMIT: Duration = Duration::from_secs(240);

/// BENCH_SCALE: the hot-range, live-writer and two-jobs runs carry this
/// many times their records (default 1: about a minute each), so that what
/// the start costs (every worker must meet a throttle to learn of writers
/// it cannot see) weighs less against the steady state, and a rate that
/// drifts shows it.
fn scale() -> usize {
    env_or("BENCH_SCALE", 1_usize).max(1)
}

/// The shallow buckets' depths, and the half-second one's, seconds of
/// capacity.
const BUCKET_DEPTHS: [f64; 3] = [0.05, 0.025, 0.5];

/// The live-writer run with a budget: its `budget_fraction` (with the live
/// writer at its default 60 WCU/s: it leaves the writer 5% of room).
const LIVE_BUDGET: f64 = 0.65;

/// The live writer's steady WCU/s: BENCH_LIVE_WCU (default 60, 30% of the
/// table; held to 1-190). Another value runs the live-writer scenario without the budget
/// row (its 0.65 is sized for 60).
fn live_wcu() -> f64 {
    let wcu = env_or("BENCH_LIVE_WCU", 60.0_f64);
    if wcu.is_finite() {
        wcu.clamp(1.0, 190.0)
    } else {
        60.0
    }
}

/// One run of the plan.
#[derive(Debug, Clone, Copy)]
enum Run {
    HotRange(usize),
    Live(Option<f64>),
    TwoJobs,
    /// (workers, on demand)
    Stepped(usize, bool),
    /// (workers, the bucket's depth in seconds)
    Shallow(usize, f64),
    /// (workers): an index with less capacity than its table.
    Index(usize),
}

impl Run {
    async fn go(self, v: &'static Variant, n: usize) -> Value {
        match self {
            Run::HotRange(w) => hot_range(v, w, 4_000 * scale(), n).await,
            Run::Live(budget) => live(v, budget, 4_000 * scale(), n).await,
            Run::TwoJobs => two_jobs(v, 4_000 * scale(), n).await,
            Run::Stepped(w, true) => stepped(v, w, true, 6_000, n).await,
            Run::Stepped(w, false) => stepped(v, w, false, 8_000, n).await,
            Run::Shallow(w, depth) => shallow(v, w, depth, 4_000, n).await,
            Run::Index(w) => index(v, w, 3_000, n).await,
        }
    }

    fn scenario(self) -> &'static str {
        match self {
            Run::HotRange(_) => "hot-range",
            Run::Live(None) => "live-writer",
            Run::Live(Some(_)) => "live-writer, budget",
            Run::TwoJobs => "two-jobs",
            Run::Stepped(_, true) => "on-demand",
            Run::Stepped(_, false) => "capacity-step",
            Run::Shallow(_, d) if d >= 0.5 => "half-second bucket",
            Run::Shallow(_, d) if d >= 0.05 => "shallow 0.05 s",
            Run::Shallow(..) => "shallow 0.025 s",
            Run::Index(_) => "index",
        }
    }

    fn workers(self) -> usize {
        match self {
            Run::HotRange(w) | Run::Stepped(w, _) | Run::Shallow(w, _) | Run::Index(w) => w,
            Run::Live(_) => 3,
            Run::TwoJobs => 6,
        }
    }
}

/// "n of m (x%)": the throttled requests after the first 15 s.
fn steady(r: &Value) -> String {
    let (n, m) = (
        r["steady_throttled"].as_f64().unwrap_or(0.0),
        r["steady_requests"].as_f64().unwrap_or(0.0),
    );
    format!("{n} of {m} ({:.1}%)", 100.0 * n / m.max(1.0))
}

fn pct(v: &Value) -> String {
    v.as_f64()
        .map_or("-".into(), |x| format!("{:.1}%", 100.0 * x))
}

fn secs(v: &Value) -> String {
    v.as_f64().map_or("never".into(), |x| format!("{x:.0} s"))
}

fn markdown(rows: &[Value]) -> String {
    fn of<'a>(rows: &'a [Value], name: &'a str) -> impl Iterator<Item = &'a Value> {
        rows.iter()
            .filter(move |r| r["scenario"].as_str() == Some(name))
    }
    let mut md = String::from(
        "# DynamoDB's throttling shapes through `ingest throttle-proxy`\n\n\
         Scaled down to what LocalStack writes on these machines; see benches/dynamodb.rs. \
         A request counts as throttled if it got a throttling error or came back with any \
         unprocessed item.\n\n",
    );
    if let Some(delay) = mock_rebalance_delay() {
        md += &format!(
            "Broker: librdkafka's mock cluster in the bench's process (`BENCH_BROKER=mock`), \
             a new group's first rebalance held {} ms (Kafka's `group.initial.rebalance.delay.ms`), \
             not tansu.\n\n",
            delay.as_millis()
        );
    }
    md += &format!(
        "## Hot range: 4 partitions of 50 WCU/s, a {:.0} WCU/s table, buckets of {} s, Zipf(1.1) keys plus one key with 30% of the records\n\n",
        hot_table_wcu(),
        hot_burst_s()
    );
    if hot_live_wcu() > 0.0 {
        md += &format!(
            "Another writer on the table at a steady {:.0} WCU/s (PutItem, {LIVE_KEYS} keys, {} s before the job): \
             the bound counts what it takes of each partition and of the table, \
             the busiest partition's use includes its writes, and its own throttles \
             follow the table.\n\n",
            hot_live_wcu(),
            NEIGHBOUR_LEAD.as_secs()
        );
    }
    if let Some(b) = hot_budget() {
        md += &format!("The job's `budget_fraction`: {b}.\n\n");
    }
    md.push_str(
        "Bound: the busiest partition's records / 50 WCU/s, or all records / the table's capacity if longer \
         (every record is its own item: the table has a sort key). \
         'Busiest partition used': what it admitted over the run against its maximum x the run's length.\n\n\
         | strategy | workers | time vs bound | records/s | throttled requests | after the first 15 s | key-range refusals | busiest partition used |\n|---|---|---|---|---|---|---|---|\n",
    );
    for r in of(rows, "hot-range") {
        if failed(r, &mut md) {
            continue;
        }
        let neighbour = match r["live_requests"].as_u64() {
            Some(n) if n > 0 => format!(
                "; the neighbour's throttled: {} of {n}",
                r["live_throttled"]
            ),
            _ => String::new(),
        };
        md += &format!(
            "| {} | {} | {:.2}x ({:.0} s / {:.0} s) | {:.0} | {} | {} | {} | {}{neighbour} |\n",
            r["strategy"].as_str().unwrap_or(""),
            r["workers"],
            r["time_vs_bound"].as_f64().unwrap_or(0.0),
            r["duration_s"].as_f64().unwrap_or(0.0),
            r["bound_s"].as_f64().unwrap_or(0.0),
            r["records_per_s"].as_f64().unwrap_or(0.0),
            pct(&r["throttled_rate"]),
            steady(r),
            r["key_range_refused_items"],
            pct(&r["busiest_partition_used"]),
        );
    }
    md += &format!(
        "\n## Live writer: 200 WCU/s (1 s bucket, no burst credit), another writer at a steady {live} WCU/s, 3 workers\n\n\
         | strategy | budget | job's throttled requests | after the first 15 s | utilization of the free {free} WCU/s | live writer's throttled requests |\n|---|---|---|---|---|---|\n",
        live = live_wcu(),
        free = 200.0 - live_wcu()
    );
    let live = [Run::Live(None), Run::Live(Some(LIVE_BUDGET))].map(|r| r.scenario());
    for r in live.iter().flat_map(|name| of(rows, name)) {
        if failed(r, &mut md) {
            continue;
        }
        md += &format!(
            "| {} | {} | {} | {} | {} | {} of {} ({}) |\n",
            r["strategy"].as_str().unwrap_or(""),
            r["budget"]
                .as_f64()
                .map_or("none".into(), |b| b.to_string()),
            pct(&r["throttled_rate"]),
            steady(r),
            pct(&r["utilization_of_free"]),
            r["live_throttled"],
            r["live_requests"],
            pct(&r["live_throttled_rate"]),
        );
    }
    md += "\n## Two jobs: two consumer groups of 3 workers, one 200 WCU/s table\n\n\
           Shares of the capacity while both ran, from the jobs' start to the first job's exit; \
           'both writing': together, from the second before the later job's first write \
           (before it the consumer groups form) to the sample at the first job's last write \
           (a lower bound).\n\n\
           | strategy | throttled requests | after the first 15 s | together | both writing | job a | job b |\n|---|---|---|---|---|---|---|\n";
    for r in of(rows, "two-jobs") {
        if failed(r, &mut md) {
            continue;
        }
        if let Some(after) = r["stopped_after_s"].as_u64() {
            md += &format!(
                "| {} | stopped after {after} s with {} of {} records written | | | | | |\n",
                r["strategy"].as_str().unwrap_or(""),
                r["written"],
                r["records"],
            );
            continue;
        }
        md += &format!(
            "| {} | {} | {} | {} | {} ({} + {}; {:.0}-{:.0} s) | {} | {} |\n",
            r["strategy"].as_str().unwrap_or(""),
            pct(&r["throttled_rate"]),
            steady(r),
            pct(&r["together"]),
            pct(&r["together_once_both_wrote"]),
            pct(&r["job_a_once_both_wrote"]),
            pct(&r["job_b_once_both_wrote"]),
            r["both_writing_s"][0].as_f64().unwrap_or(0.0),
            r["both_writing_s"][1].as_f64().unwrap_or(0.0),
            pct(&r["job_a_share"]),
            pct(&r["job_b_share"]),
        );
    }
    for (name, title) in [
        (
            "on-demand",
            "On-demand: maximum 150 WRU/s, raised to 300 at 20 s",
        ),
        (
            "capacity-step",
            "Capacity step: 200 -> 100 WCU/s at 20 s, -> 300 at 40 s",
        ),
    ] {
        md += &format!(
            "\n## {title}\n\nPer phase (the run's last 3 s, as the job drains, left out): seconds until the \
             3 s rolling accepted rate first reaches 90% of the limit, and until the workers' summed pacing \
             rate does; seconds until the accepted rate stays within 85-105% of the limit; utilization of \
             the phase.\n\n\
             | strategy | workers | throttled requests | phases: limit: accepted reached / pacing reached / settled / utilization |\n|---|---|---|---|\n"
        );
        for r in of(rows, name) {
            if failed(r, &mut md) {
                continue;
            }
            let phases: Vec<String> = r["phases"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|p| {
                    format!(
                        "{}: {} / {} / {} / {}",
                        p["limit"],
                        secs(&p["accepted_reached_after_s"]),
                        secs(&p["pacing_reached_after_s"]),
                        secs(&p["accepted_settled_after_s"]),
                        pct(&p["utilization"])
                    )
                })
                .collect();
            md += &format!(
                "| {} | {} | {} | {} |\n",
                r["strategy"].as_str().unwrap_or(""),
                r["workers"],
                pct(&r["throttled_rate"]),
                phases.join("; "),
            );
        }
    }
    md += "\n## Shallow buckets: 200 WCU/s, a bucket of 0.05 s (10 WCU), 0.025 s (5 WCU, the costliest item) or 0.5 s (100 WCU, about two full batches), no burst credit\n\n\
           Utilization: the proxy's accepted WCU over 200 WCU/s x the time from the first write to the last; \
           steady: with the first 2 s and the last 3 s left out; formed: from the second in which the last \
           worker held its partitions to the last write (tansu holds the other workers' JoinGroup 3 s). \
           Workers still running 180 s after the \
           start are stopped (SIGTERM), and the row says how many of the 4,000 records they wrote.\n\n\
           | strategy | bucket | workers | utilization | steady | formed | throttled requests | requests (x ideal) | records written |\n|---|---|---|---|---|---|---|---|---|\n";
    for d in BUCKET_DEPTHS {
        for r in of(rows, Run::Shallow(1, d).scenario()) {
            if failed(r, &mut md) {
                continue;
            }
            md += &format!(
                "| {} | {} s | {} | {} | {} | {} | {} | {:.1} | {}{} |\n",
                r["strategy"].as_str().unwrap_or(""),
                d,
                r["workers"],
                pct(&r["utilization"]),
                pct(&r["steady_utilization"]),
                pct(&r["formed_utilization"]),
                pct(&r["throttled_rate"]),
                r["requests_x_ideal"].as_f64().unwrap_or(0.0),
                r["written"],
                r["stopped_after_s"]
                    .as_u64()
                    .map_or(String::new(), |s| format!(" (stopped at {s} s)")),
            );
        }
    }
    md += &format!(
        "\n## An index with less room than its table: 200 WCU/s, a global secondary index of {INDEX_WCU:.0} WCU/s that every item reaches, buckets of {} s\n\n\
         Utilization: the proxy's accepted WCU over the index's {INDEX_WCU:.0} WCU/s x the time from the \
         first write to the last (each write costs the index what it costs the table). 'Paced to': the \
         capacity the first worker's summary says it paced to. Workers still running 120 s after the \
         start are stopped (SIGTERM).\n\n\
         | strategy | workers | utilization of the index | throttled requests | after the first 15 s | items refused by the index | paced to |\n|---|---|---|---|---|---|---|\n",
        index_burst_s()
    );
    for r in of(rows, "index") {
        if failed(r, &mut md) {
            continue;
        }
        md += &format!(
            "| {} | {} | {}{} | {} | {} | {} | {} |\n",
            r["strategy"].as_str().unwrap_or(""),
            r["workers"],
            pct(&r["index_utilization"]),
            r["stopped_after_s"]
                .as_u64()
                .map_or(String::new(), |t| format!(
                    " (stopped at {t} s, {} of {} records written)",
                    r["written"], r["records"]
                )),
            pct(&r["throttled_rate"]),
            steady(r),
            r["index_refused_items"],
            r["paced_to"]
                .as_f64()
                .map_or("-".into(), |c| format!("{c:.0} WCU/s")),
        );
    }
    md
}

/// A failed run's line in its table; says whether `r` failed.
fn failed(r: &Value, md: &mut String) -> bool {
    let Some(e) = r["error"].as_str() else {
        return false;
    };
    let e = e.lines().next().unwrap_or("").replace('|', "/");
    *md += &format!(
        "| {} | {} | failed: {e} |\n",
        r["strategy"].as_str().unwrap_or(""),
        r["workers"]
    );
    true
}

fn summary_line(r: &Value) -> String {
    let mut short = r.clone();
    if let Some(o) = short.as_object_mut() {
        for k in ["timeline", "worker_trace"] {
            o.remove(k);
        }
    }
    short.to_string()
}

/// With `BENCH_BROKER=mock`, how long the mock holds a new group's first
/// rebalance (`BENCH_MOCK_REBALANCE_DELAY_MS`, Kafka's default 3,000 ms);
/// None: the broker is tansu.
fn mock_rebalance_delay() -> Option<Duration> {
    std::env::var("BENCH_BROKER")
        .is_ok_and(|b| b == "mock")
        .then(|| Duration::from_millis(env_or("BENCH_MOCK_REBALANCE_DELAY_MS", 3000)))
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    // A Kafka-like coordinator instead of tansu's (which holds a group's
    // later members' JoinGroup 3 s): librdkafka's mock cluster in this
    // process, holding a new group's first rebalance for every member that
    // joins within the delay, as a Kafka broker does. It answers no
    // CreateTopics, so the lessons topic the workers share is made here.
    if let Some(delay) = mock_rebalance_delay() {
        let broker = ingest::devbroker::DevBroker::start().expect("the mock broker");
        broker.set_initial_rebalance_delay(delay);
        broker
            .create_topic(ingest::config::DEFAULT_LESSONS_TOPIC, 1)
            .expect("the lessons topic on the mock broker");
        assert!(MOCK_BROKER.set(broker).is_ok());
        eprintln!("broker: librdkafka's mock on {}", brokers());
    }
    require_stack();
    let env = |k: &str| std::env::var(k).ok();
    let only = env("BENCH_ONLY");
    let scenario = env("BENCH_SCENARIO");
    let workers: Vec<usize> = env_list("BENCH_WORKERS", "1,3");
    let wants = |name: &str| scenario.as_ref().is_none_or(|s| name.contains(s.as_str()));
    if scenario.as_deref() == Some("reference") {
        let rows = reference().await;
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench");
        std::fs::create_dir_all(&dir).unwrap();
        let out = serde_json::to_string_pretty(&json!({ "runs": rows })).unwrap();
        std::fs::write(dir.join("dynamodb-reference.json"), &out).unwrap();
        println!("{out}\nreport: target/bench/dynamodb-reference.json");
        return;
    }
    let variants: Vec<&Variant> = VARIANTS
        .iter()
        .filter(|v| compared(v))
        .filter(|v| only.as_ref().is_none_or(|o| v.label.contains(o.as_str())))
        .collect();
    // The default first, so its rows come early in a long run.
    let mut plan: Vec<(&'static Variant, Run)> = Vec::new();
    for v in variants.iter().rev() {
        if wants("hot-range") {
            plan.extend(workers.iter().map(|&w| (*v, Run::HotRange(w))));
        }
        if wants("live-writer") {
            plan.push((v, Run::Live(None)));
            if std::ptr::eq(*v, default_variant()) && live_wcu() == 60.0 {
                plan.push((v, Run::Live(Some(LIVE_BUDGET))));
            }
        }
        if wants("two-jobs") {
            plan.push((v, Run::TwoJobs));
        }
        if wants("on-demand") {
            plan.extend(workers.iter().map(|&w| (*v, Run::Stepped(w, true))));
        }
        if wants("capacity-step") {
            plan.extend(workers.iter().map(|&w| (*v, Run::Stepped(w, false))));
        }
        for d in BUCKET_DEPTHS {
            if wants(Run::Shallow(1, d).scenario()) {
                plan.extend(workers.iter().map(|&w| (*v, Run::Shallow(w, d))));
            }
        }
        if wants("index") {
            plan.extend(workers.iter().map(|&w| (*v, Run::Index(w))));
        }
    }
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench");
    std::fs::create_dir_all(&dir).unwrap();
    let mut rows = Vec::new();
    let mut md = String::new();
    for (n, (v, run)) in plan.into_iter().enumerate() {
        // A run that fails (a worker that exits non-zero, a record missing)
        // is reported as such; the others still run.
        let row = match tokio::spawn(run.go(v, n + 1)).await {
            Ok(row) => row,
            Err(e) => {
                let msg = e
                    .try_into_panic()
                    .ok()
                    .and_then(|p| {
                        p.downcast_ref::<String>()
                            .cloned()
                            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    })
                    .unwrap_or_else(|| "cancelled".into());
                json!({ "scenario": run.scenario(), "strategy": v.label, "workers": run.workers(), "error": msg })
            }
        };
        eprintln!("{}", summary_line(&row));
        rows.push(row);
        // Written after every run: a long run stopped early keeps its rows.
        md = markdown(&rows);
        std::fs::write(dir.join("dynamodb.md"), &md).unwrap();
        std::fs::write(
            dir.join("dynamodb.json"),
            serde_json::to_string_pretty(&json!({ "runs": rows })).unwrap(),
        )
        .unwrap();
    }
    println!("{md}\nreports: target/bench/dynamodb.md, target/bench/dynamodb.json");
}
