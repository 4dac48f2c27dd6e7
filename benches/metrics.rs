//! `make bench-metrics`: what serving metrics costs. The same batch job
//! (BENCH_RECORDS records, 20,000 by default, over 6 partitions into an
//! on-demand LocalStack table, so nothing paces it) runs with the operator
//! endpoints off and on, alternating, BENCH_ROUNDS times each (5 by default).
//! "On" serves /metrics, records the latency histogram, has librdkafka report
//! lag every second, and is scraped every second during the run (Prometheus'
//! default is every 15 s). Reports records/s per run, the medians, and their
//! ratio, in target/bench/metrics.{md,json}. Needs the local stack
//! (`make bench-metrics` starts it).

#[path = "../tests/common/mod.rs"]
mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use serde_json::{json, Value};

/// One batch run; returns records/s (from the worker's summary) and scrapes.
async fn run(records: usize, metrics_on: bool, round: usize) -> Value {
    let s = Setup::new(6, "").await;
    let ops = format!("127.0.0.1:{}", free_port());
    let section = if metrics_on {
        format!("[ops]\nlisten = \"{ops}\"\nlag_interval_ms = 1000\nprogress = \"log\"\n")
    } else {
        "[ops]\nprogress = \"log\"\n".to_string()
    };
    s.append_config(&section);
    let text = std::fs::read_to_string(&s.config)
        .unwrap()
        .replace("level = \"info\"", "level = \"warn\"");
    std::fs::write(&s.config, text).unwrap();
    let values = (0..records)
        .map(|i| {
            let id = format!("b{round}-{i}");
            let v = mixed_record(&id, i as u64);
            (id, Some(v))
        })
        .collect();
    produce(&s.topic, values).await;

    let worker = s.spawn(true);
    let done = Arc::new(AtomicBool::new(false));
    let scrapes = Arc::new(AtomicU64::new(0));
    let scraper = metrics_on.then(|| {
        let (done, scrapes, ops) = (done.clone(), scrapes.clone(), ops.clone());
        std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                if matches!(http_get(&ops, "/metrics"), Ok((200, _))) {
                    scrapes.fetch_add(1, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_secs(1));
            }
        })
    });
    let (code, summary) = worker.wait(Duration::from_secs(900));
    done.store(true, Ordering::Relaxed);
    if let Some(t) = scraper {
        t.join().unwrap();
    }
    let summary = summary.expect("summary");
    assert_eq!(code, Some(0), "{summary}");
    assert_eq!(summary["items_written"].as_u64(), Some(records as u64));
    let elapsed = summary["elapsed_s"].as_f64().unwrap();
    let row = json!({
        "metrics": if metrics_on { "on" } else { "off" },
        "round": round,
        "records": records,
        "elapsed_s": elapsed,
        "records_per_s": records as f64 / elapsed,
        "scrapes": scrapes.load(Ordering::Relaxed),
    });
    println!("{row}");
    row
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

#[tokio::main]
async fn main() {
    require_stack();
    let records: usize = env_or("BENCH_RECORDS", 20_000);
    let rounds: usize = env_or("BENCH_ROUNDS", 5);
    let mut rows = Vec::new();
    for round in 0..rounds {
        // Alternate which goes first, so drift in the machine's load
        // weighs on both alike.
        let order = if round % 2 == 0 {
            [false, true]
        } else {
            [true, false]
        };
        for on in order {
            rows.push(run(records, on, round).await);
        }
    }
    let rate = |which: &str| {
        median(
            rows.iter()
                .filter(|r| r["metrics"] == which)
                .map(|r| r["records_per_s"].as_f64().unwrap())
                .collect(),
        )
    };
    let (off, on) = (rate("off"), rate("on"));
    let ratio = on / off;
    let mut md = format!(
        "# Metrics overhead\n\n{records} records per run (6 partitions, on-demand LocalStack table, \
         one worker, --until-caught-up), endpoints off and on alternately, {rounds} rounds. \
         \"On\": /metrics served and scraped every second, latency histogram, lag reported \
         every second.\n\n| run | metrics | records/s | scrapes |\n|---|---|---|---|\n"
    );
    for r in &rows {
        md.push_str(&format!(
            "| {} | {} | {:.0} | {} |\n",
            r["round"],
            r["metrics"].as_str().unwrap(),
            r["records_per_s"].as_f64().unwrap(),
            r["scrapes"]
        ));
    }
    md.push_str(&format!(
        "\nMedian records/s: off {off:.0}, on {on:.0}; on / off = {ratio:.3} \
         (target: within 5%, i.e. >= 0.95).\n"
    ));
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("metrics.md"), &md).unwrap();
    let report = json!({ "records": records, "rounds": rounds, "runs": rows,
        "median_records_per_s": { "off": off, "on": on }, "ratio_on_off": ratio });
    std::fs::write(
        dir.join("metrics.json"),
        serde_json::to_string_pretty(&report).unwrap(),
    )
    .unwrap();
    println!("{md}\nreports: target/bench/metrics.md, target/bench/metrics.json");
}
