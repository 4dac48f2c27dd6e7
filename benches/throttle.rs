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
#[path = "support/mod.rs"]
mod support;

use common::*;
use serde_json::{json, Value};
use support::{configure, default_variant, write_span, Job, Variant, VARIANTS};

const CAPACITY: f64 = 200.0;

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
    configure(&s, variant, "");
    let (batch, total_wcu) = mixed_sizes_keyed(records, &format!("r{run_no}-"));
    let total_wcu = total_wcu as f64;
    produce(&s.topic, batch).await;

    let job = Job::start(&s, workers).finish(variant.label);
    let max_sleep = job
        .summaries
        .iter()
        .filter_map(|s| s["tables"][0]["max_sleep_s"].as_f64())
        .fold(0.0, f64::max);
    let (written, wall, worker_trace) = (job.items_written, job.wall_s, job.trace);
    let present = count(&dynamo().await, &s.table).await;
    assert_eq!(present, records, "{}: every record written", variant.label);
    let st = proxy.stats(&s.table);
    let f = |k: &str| st[k].as_f64().unwrap_or(0.0);
    let requests = f("requests");
    let throttled = f("throttled_requests") + f("partial_requests");
    let ideal_requests = (records as f64 / 25.0).ceil();
    let duration = write_span(&st);
    s.delete_table().await;
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

/// Seconds after each capacity step until the 3 s rolling accepted rate stays
/// within 85-105% of the new capacity for the rest of that phase.
fn recovery(timeline: &Value) -> Value {
    let t: Vec<[f64; 5]> = serde_json::from_value(timeline.clone()).unwrap_or_default();
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
    let records: usize = env_or("BENCH_RECORDS", 5_000);
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
    let default = default_variant();
    let autosleeper = VARIANTS
        .iter()
        .find(|v| v.strategy.contains("autosleeper"))
        .expect("the seed AutoSleeper");
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
