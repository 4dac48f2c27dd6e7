//! `make bench-pipeline`: how fast one worker goes when DynamoDB is not the
//! limit, and what the pipeline costs on top of merely consuming.
//!
//! - `raw consume`: an rdkafka consumer in this process reads the same topic
//!   and does nothing with the records (the ceiling of the Kafka side, here
//!   the broker the tests use);
//! - `ingest`: the worker, default config, writes the topic to
//!   `ingest throttle-proxy --upstream none` (the stand-in: answers itself,
//!   stores nothing) at 0 ms and 5 ms of latency, 1 and 2 workers.
//!
//! Records of 200 B, 1 KB and 4 KB (a JSON object: its `id` and padding), on
//! a topic of 4 partitions (more on the mock, below). Reported per row:
//! records/s and WCU/s (over the slowest worker's own elapsed time, and
//! steady: between the first and the last second sampled while writing), CPU
//! seconds per 100k records (the workers' summed `cpu_s`; the stand-in's
//! apart), records written twice, peak RSS, and the ratio to raw consume of
//! the same size. One run, side by side; the machine is shared
//! and noisy, so compare within a run.
//!
//! Memory: one worker's resident memory (VmRSS, sampled every half second)
//! on topics of 100k and 1M records of 1 KB, through the stand-in until
//! caught up, and through a slow stand-in (`--wcu 500`: its buffers fill)
//! for 40 s before a SIGTERM. Flat means: the same from 100k to 1M.
//!
//! The broker: by default the one INGEST_TEST_BROKERS names (`make
//! bench-pipeline` starts a fresh tansu for it). tansu serves about 15 MB/s,
//! which caps the 1 KB and 4 KB rows, so with `BENCH_BROKER=mock` the same
//! speed rows run on librdkafka's mock cluster inside this process (in
//! memory; reports target/bench/pipeline-mock.{md,json}). The mock keeps only
//! the last 5 MB of each partition, so its topics get enough partitions to
//! hold every record (97 for 300k of 1 KB); the memory rows, with 1M records,
//! run on tansu only. The raw consumer's CPU then includes the mock's own
//! broker thread (same process).
//!
//! Reports: target/bench/pipeline.{md,json}. BENCH_RECORDS (default 100000;
//! 300000 on the mock), BENCH_SIZES ("200,1024,4096"), BENCH_LATENCIES
//! ("0,5") and BENCH_WORKERS ("1,2") narrow the speed rows, BENCH_MEMORY
//! ("100000,1000000"; "" skips; "" on the mock) the memory rows. `make
//! bench-pipeline` builds with the release profile (a dev build measures the
//! compiler's debug code, not the worker).

#[path = "../tests/common/mod.rs"]
mod common;
#[path = "support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use common::*;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};
use serde_json::{json, Value};
use support::{col, trace_rows, Job};

/// Partitions of the topics: 4, or on the mock enough that each keeps at
/// most 3.5 MB of its 5 MB (it drops older records past that).
fn partitions(size: usize, n: usize) -> i32 {
    if MOCK_BROKER.get().is_none() {
        return 4;
    }
    let bytes = (n * (size + 100)) as f64;
    (bytes / 3.5e6).ceil().max(4.0) as i32
}

/// `n` records of about `size` bytes each (JSON: `id`, padding).
fn records(n: usize, size: usize, prefix: &str) -> Vec<(String, Option<String>)> {
    (0..n)
        .map(|i| {
            let id = format!("{prefix}{i:08}");
            let pad = size.saturating_sub(id.len() + 20).max(1);
            let v = format!(r#"{{"id":"{id}","pad":"{}"}}"#, "x".repeat(pad));
            (id, Some(v))
        })
        .collect()
}

/// Write units of one record's item, as the proxy counts them (DynamoDB's
/// rule: names and values, one unit per started KB).
fn item_wcu(size: usize, prefix: &str) -> f64 {
    let (id, v) = records(1, size, prefix).pop().unwrap();
    let v: Value = serde_json::from_str(&v.unwrap()).unwrap();
    let item = json!({"id": {"S": id}, "pad": {"S": v["pad"]}});
    ingest::proxy::wire::request_wcu(&json!({"PutRequest": {"Item": item}}))
}

/// Produces in chunks (librdkafka's queue holds 100k messages).
async fn produce_all(topic: &str, all: Vec<(String, Option<String>)>) {
    let mut all = all.into_iter().peekable();
    while all.peek().is_some() {
        let chunk: Vec<_> = all.by_ref().take(20_000).collect();
        produce(topic, chunk).await;
    }
}

fn cpu_of(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    ingest::telemetry::cpu_seconds_of(&stat)
}

/// Reads every record of `topic` from the start; (seconds, CPU seconds of
/// this process meanwhile).
fn raw_consume(topic: &str, partitions: i32, n: usize) -> (f64, f64) {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers())
        .set("group.id", unique("raw"))
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer");
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition_offset(topic, p, Offset::Beginning)
            .unwrap();
    }
    c.assign(&tpl).unwrap();
    let cpu0 = ingest::telemetry::cpu_seconds().unwrap_or(0.0);
    let started = Instant::now();
    let (mut seen, mut bytes) = (0usize, 0usize);
    while seen < n {
        match c.poll(Duration::from_secs(10)) {
            Some(Ok(m)) => {
                seen += 1;
                bytes += m.payload().map_or(0, <[u8]>::len);
            }
            Some(Err(e)) => panic!("raw consume: {e}"),
            None => panic!("raw consume: nothing for 10 s after {seen} of {n} records"),
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    let cpu = ingest::telemetry::cpu_seconds().unwrap_or(0.0) - cpu0;
    assert!(bytes > 0);
    (elapsed, cpu)
}

/// One ingest row: `workers` workers through the stand-in at `latency_ms`.
async fn ingest_row(size: usize, latency_ms: u32, workers: usize, n: usize) -> Value {
    let s = Setup::build(partitions(size, n), "", None).await;
    let prefix = format!("s{size}-");
    produce_all(&s.topic, records(n, size, &prefix)).await;
    let proxy = ThrottleProxy::stand_in(&["--latency-ms", &latency_ms.to_string()]);
    s.use_endpoint(&proxy.endpoint());
    let job = Job::start(&s, workers);
    let r = job.finish(&format!(
        "ingest {size} B, {latency_ms} ms, {workers} workers"
    ));
    let proxy_cpu = cpu_of(proxy.pid());
    // At least once: with two workers a partition handed to both at once
    // (tansu's coordinator does that at a join) is written twice for a while.
    assert!(r.items_written >= n as u64, "every record written");
    assert_eq!(s.committed(), s.end_offsets(), "every offset committed");
    let each = |k: &'static str| {
        r.summaries
            .iter()
            .map(move |w| w[k].as_f64().unwrap_or(0.0))
    };
    let elapsed = each("elapsed_s").fold(0.0, f64::max);
    let cpu: f64 = each("cpu_s").sum();
    let rss = each("peak_rss_mb").fold(0.0, f64::max);
    let wcu: f64 = each("wcu_written").sum();
    let requests: f64 = each("requests").sum();
    let steady = steady_wcu_per_s(&r.trace).map(|w| w / item_wcu(size, &prefix));
    json!({
        "case": "ingest", "size_b": size, "latency_ms": latency_ms, "workers": workers,
        "records": n, "partitions": s.partitions,
        "rewritten": r.items_written - n as u64, "elapsed_s": elapsed,
        "records_per_s": n as f64 / elapsed.max(1e-3),
        "steady_records_per_s": steady,
        "wcu_per_s": wcu / elapsed.max(1e-3),
        "cpu_s_per_100k": cpu / n as f64 * 1e5,
        "stand_in_cpu_s_per_100k": proxy_cpu.map(|c| c / n as f64 * 1e5),
        "peak_rss_mb": rss, "requests": requests,
        "items_per_request": n as f64 / requests.max(1.0),
        "wall_s": r.wall_s,
    })
}

/// The workers' summed write rate between their first and last samples of
/// the run (`/metrics` every second): without the group's join and the exit,
/// WCU/s. None when a worker has fewer than two samples while writing.
fn steady_wcu_per_s(trace: &Value) -> Option<f64> {
    let workers = trace_rows(trace);
    if workers.is_empty() {
        return None;
    }
    let mut sum = 0.0;
    for rows in workers {
        let pts: Vec<(f64, f64)> = rows
            .iter()
            .filter_map(|r| Some((r[col::T]?, r[col::WCU]?)))
            .collect();
        let total = pts.last()?.1;
        let first = pts.iter().find(|p| p.1 > 0.0)?;
        let last = pts
            .iter()
            .rev()
            .find(|p| p.1 < total)
            .unwrap_or(pts.last()?);
        if last.0 <= first.0 {
            return None;
        }
        sum += (last.1 - first.1) / (last.0 - first.0);
    }
    Some(sum)
}

/// A process's resident memory now, MB (VmRSS).
fn rss_mb(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    Some(ingest::telemetry::status_kb(&status, "VmRSS")? as f64 / 1024.0)
}

/// One memory row: a worker of a fresh group on the setup's topic of `n`
/// records, through `proxy`; until caught up, or for `for_s` seconds then
/// SIGTERM. VmRSS is sampled every 500 ms.
fn memory_row(
    s: &Setup,
    n: usize,
    proxy: &ThrottleProxy,
    table: &str,
    for_s: Option<u64>,
) -> Value {
    s.set_line("group_id", &format!("\"{}\"", unique("mem")));
    s.set_line("endpoint_url", &format!("\"{}\"", proxy.endpoint()));
    let w = s.spawn(for_s.is_none());
    let pid = w.child.id();
    let started = Instant::now();
    let mut samples: Vec<(f64, f64)> = Vec::new();
    // A hung worker ends the row (then panics in `wait`, naming it).
    let deadline = started + Duration::from_secs(for_s.unwrap_or(1_800));
    // Until it exits (no /proc entry), or the deadline.
    while let Some(mb) = rss_mb(pid) {
        samples.push((started.elapsed().as_secs_f64(), mb));
        if Instant::now() >= deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    if for_s.is_some() {
        w.signal("TERM");
    }
    let (_, summary) = w.wait(Duration::from_secs(60));
    let summary = summary.expect("the worker's summary");
    // The second half of the run: buffers full (slow) or steady (stand-in).
    let half = samples.last().map_or(0.0, |l| l.0 / 2.0);
    let mut late: Vec<f64> = samples
        .iter()
        .filter(|x| x.0 >= half)
        .map(|x| x.1)
        .collect();
    late.sort_by(f64::total_cmp);
    let pick = |q: f64| {
        late.get(((late.len() as f64 - 1.0) * q).round() as usize)
            .copied()
    };
    json!({
        "case": "memory", "table": table, "records": n, "size_b": 1024,
        "written": summary["items_written"], "elapsed_s": summary["elapsed_s"],
        "rss_mb_median_late": pick(0.5), "rss_mb_max_late": pick(1.0),
        "peak_rss_mb": summary["peak_rss_mb"],
        "samples": samples.iter().map(|(t, m)| json!([(t * 10.0).round() / 10.0, (m * 10.0).round() / 10.0])).collect::<Vec<_>>(),
    })
}

/// The memory rows for a topic of `n` records of 1 KB.
async fn memory_rows(n: usize) -> Vec<Value> {
    let s = Setup::build(4, "", None).await;
    produce_all(&s.topic, records(n, 1024, "m-")).await;
    let fast = ThrottleProxy::stand_in(&[]);
    let slow = ThrottleProxy::stand_in(&["--wcu", "500"]);
    tokio::task::block_in_place(|| {
        vec![
            memory_row(&s, n, &fast, "stand-in, until caught up", None),
            memory_row(&s, n, &slow, "stand-in at 500 WCU/s, 40 s", Some(40)),
        ]
    })
}

fn memory_markdown(rows: &[Value]) -> String {
    if !rows.iter().any(|r| r["case"] == "memory") {
        return String::new(); // none asked (the mock, or BENCH_MEMORY="")
    }
    let mut md = String::from(
        "\n| records of 1 KB | table | written | RSS MB, second half: median | max | peak RSS MB |\n|---|---|---|---|---|---|\n",
    );
    for r in rows.iter().filter(|r| r["case"] == "memory") {
        let num = |k: &str| r[k].as_f64().map_or("-".into(), |v| format!("{v:.1}"));
        md += &format!(
            "| {} | {} | {} | {} | {} | {} |\n",
            r["records"],
            r["table"].as_str().unwrap_or(""),
            r["written"],
            num("rss_mb_median_late"),
            num("rss_mb_max_late"),
            num("peak_rss_mb"),
        );
    }
    md
}

fn markdown(rows: &[Value]) -> String {
    let mut md = String::from(
        "| case | record | latency | workers | records/s | steady records/s | WCU/s | x raw consume | CPU s / 100k | stand-in CPU s / 100k | peak RSS MB | items/request |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    let raw = |size: &Value| {
        rows.iter()
            .find(|r| r["case"] == "raw consume" && r["size_b"] == *size)
            .and_then(|r| r["records_per_s"].as_f64())
    };
    for r in rows.iter().filter(|r| r["case"] != "memory") {
        let f = |k: &str| r[k].as_f64();
        let num = |k: &str, d: usize| f(k).map_or("-".into(), |v| format!("{v:.d$}"));
        let ratio = match (r["case"].as_str(), f("records_per_s"), raw(&r["size_b"])) {
            (Some("ingest"), Some(x), Some(base)) => format!("{:.2}", x / base),
            _ => "-".into(),
        };
        md += &format!(
            "| {} | {} B | {} | {} | {} | {} | {} | {ratio} | {} | {} | {} | {} |\n",
            r["case"].as_str().unwrap_or(""),
            r["size_b"],
            r["latency_ms"]
                .as_u64()
                .map_or("-".into(), |l| format!("{l} ms")),
            r["workers"].as_u64().map_or("-".into(), |w| w.to_string()),
            num("records_per_s", 0),
            num("steady_records_per_s", 0),
            num("wcu_per_s", 0),
            num("cpu_s_per_100k", 2),
            num("stand_in_cpu_s_per_100k", 2),
            num("peak_rss_mb", 1),
            num("items_per_request", 1),
        );
    }
    md
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let mock = std::env::var("BENCH_BROKER").is_ok_and(|b| b == "mock");
    if mock {
        let broker = ingest::devbroker::DevBroker::start().expect("the mock broker");
        assert!(MOCK_BROKER.set(broker).is_ok());
        eprintln!("broker: librdkafka's mock on {}", brokers());
    }
    require_stack();
    // On the mock a run of 100k records of 1 KB lasts about 2 s, a third of
    // it the group's join and the exit.
    let n: usize = env_list("BENCH_RECORDS", if mock { "300000" } else { "100000" })[0];
    let sizes: Vec<usize> = env_list("BENCH_SIZES", "200,1024,4096");
    let latencies: Vec<u32> = env_list("BENCH_LATENCIES", "0,5");
    let workers: Vec<usize> = env_list("BENCH_WORKERS", "1,2");
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench");
    std::fs::create_dir_all(&dir).unwrap();
    let report = if mock { "pipeline-mock" } else { "pipeline" };
    let mut rows: Vec<Value> = Vec::new();
    let save = |rows: &[Value]| {
        let md = markdown(rows) + &memory_markdown(rows);
        std::fs::write(dir.join(format!("{report}.md")), &md).unwrap();
        std::fs::write(
            dir.join(format!("{report}.json")),
            serde_json::to_string_pretty(&json!({ "runs": rows })).unwrap(),
        )
        .unwrap();
        md
    };
    for &size in &sizes {
        // Raw consume of a topic like the ingest rows'.
        let topic = unique("raw");
        let parts = partitions(size, n);
        create_topics(&[(&topic, parts)]).await;
        produce_all(&topic, records(n, size, "raw-")).await;
        let t = topic.clone();
        let (elapsed, cpu) = tokio::task::spawn_blocking(move || raw_consume(&t, parts, n))
            .await
            .unwrap();
        let row = json!({
            "case": "raw consume", "size_b": size, "records": n, "partitions": parts,
            "elapsed_s": elapsed,
            "records_per_s": n as f64 / elapsed.max(1e-3),
            "wcu_per_s": n as f64 * item_wcu(size, "raw-") / elapsed.max(1e-3),
            "cpu_s_per_100k": cpu / n as f64 * 1e5,
        });
        eprintln!("{row}");
        rows.push(row);
        save(&rows);
        for &latency in &latencies {
            for &w in &workers {
                let row = ingest_row(size, latency, w, n).await;
                eprintln!("{row}");
                rows.push(row);
                save(&rows);
            }
        }
    }
    let memory = if mock { "" } else { "100000,1000000" };
    for n in env_list::<usize>("BENCH_MEMORY", memory) {
        for row in memory_rows(n).await {
            let mut brief = row.clone();
            brief["samples"] = Value::Null;
            eprintln!("{brief}");
            rows.push(row);
            save(&rows);
        }
    }
    let md = save(&rows);
    println!("{md}\nreports: target/bench/{report}.md, target/bench/{report}.json");
}
