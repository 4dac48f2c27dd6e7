//! `make bench-throttle`: the throttle strategies side by side, in one run, on
//! the same proxy settings (a table capped at 200 WCU/s by `ingest
//! throttle-proxy` with DynamoDB's burst credit: up to 300 s of unused capacity,
//! starting empty; BENCH_CREDIT_S changes it), with 1 and 3 workers, plus a
//! capacity step (200 -> 100 -> 300 WCU/s) for the default strategy.
//!
//! Per run: requests per record written against the ideal (full batches of 25),
//! throttled-request rate (a throttling error or any unprocessed item),
//! capacity utilization (WCU accepted / WCU the proxy offered between the first
//! write and the last accepted one), time to finish against the ideal (total
//! WCU / capacity), and the longest single sleep. Writes a markdown and a JSON
//! report to target/bench/. Needs the local stack (`make bench-throttle`
//! starts it). Set BENCH_RECORDS to change the workload size.

#[path = "../tests/common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};

const CAPACITY: f64 = 200.0;

struct Variant {
    label: &'static str,
    strategy: &'static str,
    sdk: &'static str,
}

const VARIANTS: &[Variant] = &[
    Variant {
        label: "AWS SDK standard retry",
        strategy: r#"{ name = "naive" }"#,
        sdk: "standard",
    },
    Variant {
        label: "AWS SDK adaptive retry",
        strategy: r#"{ name = "naive" }"#,
        sdk: "adaptive",
    },
    Variant {
        label: "naive immediate retry",
        strategy: r#"{ name = "naive" }"#,
        sdk: "off",
    },
    Variant {
        label: "exponential backoff",
        strategy: r#"{ name = "exponential" }"#,
        sdk: "off",
    },
    Variant {
        label: "seed AutoSleeper (defaults)",
        strategy: r#"{ name = "autosleeper" }"#,
        sdk: "off",
    },
    Variant {
        label: "Heroku proportional-remaining",
        // min sleep = one batch's cost at capacity: 25 WCU / 200 WCU/s.
        strategy: r#"{ name = "heroku-proportional-remaining", min_sleep_s = 0.125 }"#,
        sdk: "off",
    },
    Variant {
        label: "adaptive (default)",
        strategy: r#"{ name = "adaptive" }"#,
        sdk: "off",
    },
];

/// Mixed sizes: 1 WCU mostly, 2 WCU every 5th record, 5 WCU every 20th.
fn workload(n: usize, run: usize) -> (Vec<(String, Option<String>)>, f64) {
    let mut wcu = 0.0;
    let records = (0..n)
        .map(|i| {
            let (pad, cost) = match i {
                _ if i % 20 == 0 => (4_500, 5.0),
                _ if i % 5 == 0 => (1_500, 2.0),
                _ => (100, 1.0),
            };
            wcu += cost;
            let id = format!("r{run}-{i:06}");
            let v = format!(r#"{{"id":"{id}","n":{i},"pad":"{}"}}"#, "x".repeat(pad));
            (id, Some(v))
        })
        .collect();
    (records, wcu)
}

/// One run: returns the measured row.
async fn run(
    variant: &Variant,
    workers: usize,
    records: usize,
    schedule: Option<&str>,
    run_no: usize,
) -> Value {
    let s = Setup::build(6, "", Some(CAPACITY as i64)).await;
    let args: Vec<&str> = schedule
        .map(|sch| vec!["--schedule", sch])
        .unwrap_or_default();
    let proxy = ThrottleProxy::start(&args);
    s.use_endpoint(&proxy.endpoint());
    s.append_config(&format!(
        "[throttle]\nstrategy = {}\nsdk_retry_mode = \"{}\"\ncapacity_poll_s = 5\n",
        variant.strategy, variant.sdk
    ));
    let text = std::fs::read_to_string(&s.config)
        .unwrap()
        .replace("level = \"info\"", "level = \"warn\"");
    std::fs::write(&s.config, text).unwrap();
    let (batch, total_wcu) = workload(records, run_no);
    produce(&s.topic, batch).await;

    let started = Instant::now();
    let ports: Vec<String> = (0..workers)
        .map(|_| format!("127.0.0.1:{}", free_port()))
        .collect();
    let running: Vec<Worker> = ports
        .iter()
        .map(|addr| s.spawn_with_env(true, &[("INGEST__OPS__LISTEN", addr)]))
        .collect();
    let trace = sample_workers(ports, s.table.clone());
    let mut max_sleep: f64 = 0.0;
    let mut written = 0;
    for w in running {
        let (code, summary) = w.wait(Duration::from_secs(1800));
        let summary = summary.unwrap_or_else(|| panic!("{}: no summary", variant.label));
        assert_eq!(code, Some(0), "{}: {summary}", variant.label);
        written += summary["items_written"].as_u64().unwrap();
        if let Some(m) = summary["tables"][0]["max_sleep_s"].as_f64() {
            max_sleep = max_sleep.max(m);
        }
    }
    let wall = started.elapsed().as_secs_f64();
    trace.0.store(true, std::sync::atomic::Ordering::Relaxed);
    let worker_trace = trace.1.join().unwrap();
    let present = count(&dynamo().await, &s.table).await;
    assert_eq!(present, records, "{}: every record written", variant.label);
    let st = proxy.stats(&s.table);
    let f = |k: &str| st[k].as_f64().unwrap_or(0.0);
    let requests = f("requests");
    let throttled = f("throttled_requests") + f("partial_requests");
    let ideal_requests = (records as f64 / 25.0).ceil();
    let duration = f("last_accept_s") - f("first_write_s");
    let mut row = json!({
        "strategy": variant.label,
        "workers": workers,
        "records": records,
        "requests": requests,
        "requests_per_record": requests / records as f64,
        "requests_vs_ideal": requests / ideal_requests,
        "throttled_requests": throttled,
        "throttled_rate": throttled / requests,
        "hard_throttles": f("throttled_requests"),
        "utilization": f("accepted_wcu") / f("offered_wcu"),
        "duration_s": duration,
        "ideal_s": total_wcu / CAPACITY,
        "time_vs_ideal": duration / (total_wcu / CAPACITY),
        "max_sleep_s": if variant.sdk == "off" { json!(max_sleep) } else { Value::Null },
        // Items written more than once (redelivery after a rebalance whose drain
        // outlasted the deadline): at-least-once, measured.
        "rewritten_items": written as i64 - records as i64,
        "wall_s": wall,
    });
    if schedule.is_some() {
        row["recovery"] = recovery(&st["timeline"]);
    }
    row["timeline"] = st["timeline"].clone();
    row["worker_trace"] = worker_trace;
    eprintln!("{}", summary_line(&row));
    row
}

/// Samples each worker's `/metrics` every second until told to stop: per
/// worker, `[t, pacing rate, share, capacity, throttled requests]` rows.
fn sample_workers(
    ports: Vec<String>,
    table: String,
) -> (
    std::sync::Arc<std::sync::atomic::AtomicBool>,
    std::thread::JoinHandle<Value>,
) {
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let done = stop.clone();
    let handle = std::thread::spawn(move || {
        let t0 = Instant::now();
        let mut rows: Vec<Vec<Value>> = vec![Vec::new(); ports.len()];
        let label = format!("{{table=\"{table}\"}}");
        while !done.load(std::sync::atomic::Ordering::Relaxed) {
            for (i, addr) in ports.iter().enumerate() {
                let Ok((200, text)) = http_get(addr, "/metrics") else {
                    continue;
                };
                let get = |m: &str| sample(&text, &format!("{m}{label}"));
                rows[i].push(json!([
                    (t0.elapsed().as_secs_f64() * 10.0).round() / 10.0,
                    get("ingest_pacing_rate_wcu"),
                    get("ingest_capacity_share"),
                    get("ingest_capacity_wcu"),
                    get("ingest_throttled_requests_total"),
                ]));
            }
            std::thread::sleep(Duration::from_secs(1));
        }
        json!(rows)
    });
    (stop, handle)
}

/// Seconds after each capacity step until the 3 s rolling accepted rate stays
/// within 85-105% of the new capacity for the rest of that phase.
fn recovery(timeline: &Value) -> Value {
    let t: Vec<[f64; 4]> = serde_json::from_value(timeline.clone()).unwrap_or_default();
    let mut steps = Vec::new();
    for i in 1..t.len() {
        if (t[i][3] - t[i - 1][3]).abs() > 1.0 {
            steps.push(i);
        }
    }
    let mut out = Vec::new();
    for (k, &start) in steps.iter().enumerate() {
        let end = steps
            .get(k + 1)
            .copied()
            .unwrap_or(t.len().saturating_sub(1));
        let cap = t[start][3];
        let ok = |i: usize| {
            let lo = i.saturating_sub(2);
            let avg = t[lo..=i].iter().map(|x| x[1]).sum::<f64>() / (i - lo + 1) as f64;
            (0.85 * cap..=1.05 * cap).contains(&avg)
        };
        let settled = (start..end).find(|&i| (i..end).all(|j| j < start + 2 || ok(j)));
        out.push(json!({
            "at_s": start,
            "capacity": cap,
            "recovered_after_s": settled.map(|i| (i - start) as f64),
        }));
    }
    Value::Array(out)
}

fn summary_line(r: &Value) -> String {
    format!(
        "{:<32} workers={} requests/ideal={:.2} throttled={:.2}% utilization={:.1}% time/ideal={:.2} max_sleep={}",
        r["strategy"].as_str().unwrap(),
        r["workers"],
        r["requests_vs_ideal"].as_f64().unwrap(),
        100.0 * r["throttled_rate"].as_f64().unwrap(),
        100.0 * r["utilization"].as_f64().unwrap(),
        r["time_vs_ideal"].as_f64().unwrap(),
        r["max_sleep_s"].as_f64().map_or("n/a".into(), |m| format!("{m:.2}s")),
    )
}

fn markdown(rows: &[Value], steps: &[Value], records: usize) -> String {
    let credit = std::env::var("BENCH_CREDIT_S").unwrap_or_else(|_| "300".into());
    let mut md = format!(
        "# Throttle strategies through `ingest throttle-proxy`\n\n\
         {records} records of mixed sizes (1, 2 and 5 WCU) per run into a table capped at \
         {CAPACITY} WCU/s (token bucket of 1 s plus DynamoDB-style burst credit of up to \
         {credit} s of unused capacity, starting empty), LocalStack behind the proxy. \
         Ideal: one request per 25 records, utilization 100%, time = total WCU / capacity. \
         A request counts as throttled if it got a throttling error or came back with any \
         unprocessed item.\n\n\
         | strategy | workers | requests / record (x ideal) | throttled requests | hard throttles (400) | utilization | time vs ideal | max single sleep | rewritten items |\n\
         |---|---|---|---|---|---|---|---|---|\n"
    );
    for r in rows {
        md += &format!(
            "| {} | {} | {:.4} ({:.2}x) | {:.2}% | {} | {:.1}% | {:.2}x ({:.0} s) | {} | {} |\n",
            r["strategy"].as_str().unwrap(),
            r["workers"],
            r["requests_per_record"].as_f64().unwrap(),
            r["requests_vs_ideal"].as_f64().unwrap(),
            100.0 * r["throttled_rate"].as_f64().unwrap(),
            r["hard_throttles"],
            100.0 * r["utilization"].as_f64().unwrap(),
            r["time_vs_ideal"].as_f64().unwrap(),
            r["duration_s"].as_f64().unwrap(),
            r["max_sleep_s"]
                .as_f64()
                .map_or("inside the SDK".into(), |m| format!("{m:.2} s")),
            r["rewritten_items"],
        );
    }
    md += "\n## Capacity step: 200 -> 100 WCU/s at 20 s, -> 300 WCU/s at 40 s\n\n\
           Recovery: seconds after the step until the 3 s rolling accepted rate stays within \
           85-105% of the new capacity for the rest of the phase.\n\n\
           | strategy | workers | throttled requests | utilization | recovery after halving | recovery after tripling |\n\
           |---|---|---|---|---|---|\n";
    for r in steps {
        let rec = |i: usize| {
            r["recovery"][i]["recovered_after_s"]
                .as_f64()
                .map_or("not recovered".into(), |s| format!("{s:.0} s"))
        };
        md += &format!(
            "| {} | {} | {:.2}% | {:.1}% | {} | {} |\n",
            r["strategy"].as_str().unwrap(),
            r["workers"],
            100.0 * r["throttled_rate"].as_f64().unwrap(),
            100.0 * r["utilization"].as_f64().unwrap(),
            rec(0),
            rec(1),
        );
    }
    md
}

#[tokio::main]
async fn main() {
    require_stack();
    let records: usize = std::env::var("BENCH_RECORDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5_000);
    let only: Option<String> = std::env::var("BENCH_ONLY").ok();
    let mut rows = Vec::new();
    let mut n = 0;
    for v in VARIANTS
        .iter()
        .filter(|v| only.as_ref().is_none_or(|o| v.label.contains(o.as_str())))
    {
        for workers in [1, 3] {
            n += 1;
            rows.push(run(v, workers, records, None, n).await);
        }
    }
    let mut steps = Vec::new();
    let default = VARIANTS.last().unwrap();
    let autosleeper = &VARIANTS[4];
    for (v, workers) in [(default, 1), (default, 3), (autosleeper, 1)] {
        if only.as_ref().is_some_and(|o| !v.label.contains(o.as_str())) {
            continue;
        }
        n += 1;
        steps.push(run(v, workers, 12_000, Some("20=100,40=300"), n).await);
    }
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench");
    std::fs::create_dir_all(&dir).unwrap();
    let md = markdown(&rows, &steps, records);
    std::fs::write(dir.join("throttle.md"), &md).unwrap();
    let report = json!({ "capacity_wcu": CAPACITY, "records": records, "runs": rows, "capacity_step": steps });
    std::fs::write(
        dir.join("throttle.json"),
        serde_json::to_string_pretty(&report).unwrap(),
    )
    .unwrap();
    println!("{md}\nreports: target/bench/throttle.md, target/bench/throttle.json");
}
