//! The operator endpoints on real runs (tansu + LocalStack, through the
//! capacity-enforcing proxy so that throttles happen): `/metrics` scraped
//! during a run agrees with what was written and with the proxy's counters;
//! `/readyz` turns ready, then not ready when DynamoDB becomes unreachable,
//! then ready again; a batch run logs its progress with an ETA.

mod common;

use std::time::Duration;

use common::*;
use serde_json::Value;

fn scrape(addr: &str) -> String {
    let (status, body) = http_get(addr, "/metrics").expect("GET /metrics");
    assert_eq!(status, 200, "{body}");
    body
}

fn get(text: &str, series: &str) -> f64 {
    sample(text, series).unwrap_or_else(|| panic!("no {series} in:\n{text}"))
}

fn u(v: &Value, k: &str) -> u64 {
    v[k].as_u64().unwrap_or_else(|| panic!("{k} in {v}"))
}

/// Workers' ops ports come from below the OS's ephemeral range, which
/// outgoing connections never take (`free_port`). Before, the OS picked
/// them from that range, and one of a bench's outgoing connections took a
/// worker's port before the worker could bind it.
#[test]
fn ports_picked_for_workers_are_below_the_ephemeral_range() {
    let low = ephemeral_low();
    for _ in 0..100 {
        let port = free_port();
        assert!(port < low, "{port} is in the ephemeral range from {low}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn metrics_scraped_during_a_run_match_the_writes_and_the_proxy() {
    let s = Setup::build(3, "", Some(100)).await;
    let proxy = ThrottleProxy::start(&[]);
    s.use_endpoint(&proxy.endpoint());
    let ops = format!("127.0.0.1:{}", free_port());
    s.append_config(&format!(
        "[ops]\nlisten = \"{ops}\"\nlag_interval_ms = 500\n"
    ));
    let (records, total_wcu) = mixed_sizes(1_500);
    produce(&s.topic, records).await;
    let client = dynamo().await;
    let worker = s.spawn(false);
    let t = format!("{{table=\"{}\"}}", s.table);

    // Mid-run: the endpoint answers while records are still being written.
    let mut mid = None;
    eventually(Duration::from_secs(60), "a scrape mid-run", || {
        let text = http_get(&ops, "/metrics").ok().map(|(_, b)| b);
        let written = text
            .as_deref()
            .and_then(|x| sample(x, &format!("ingest_items_written_total{t}")));
        let partly = written.is_some_and(|w| w > 0.0 && w < 1_500.0);
        if partly {
            mid = text;
        }
        async move { partly }
    })
    .await;
    let mid = mid.unwrap();
    assert!(get(&mid, "ingest_assigned_partitions") == 3.0, "{mid}");
    assert!(get(&mid, &format!("ingest_pacing_rate_wcu{t}")) > 0.0);
    assert_eq!(get(&mid, &format!("ingest_capacity_wcu{t}")), 100.0);
    assert!(mid.contains("# TYPE ingest_batch_write_seconds histogram"));

    eventually(
        Duration::from_secs(120),
        "every record in the table",
        || {
            let (client, table) = (client.clone(), s.table.clone());
            async move { count(&client, &table).await == 1_500 }
        },
    )
    .await;
    // Once committed, and once librdkafka has reported it, the lag is 0.
    let mut end = String::new();
    eventually(Duration::from_secs(30), "lag 0 on every partition", || {
        end = scrape(&ops);
        let lags: Vec<f64> = (0..3)
            .filter_map(|p| {
                sample(
                    &end,
                    &format!(
                        "ingest_consumer_lag{{partition=\"{p}\",topic=\"{}\"}}",
                        s.topic
                    ),
                )
            })
            .collect();
        let done = lags.len() == 3 && lags.iter().all(|l| *l == 0.0);
        async move { done }
    })
    .await;

    // The scrape agrees with the records and with the proxy.
    let st = proxy.stats(&s.table);
    assert_eq!(get(&end, "ingest_records_consumed_total"), 1_500.0);
    assert_eq!(
        get(&end, &format!("ingest_items_written_total{t}")),
        1_500.0
    );
    assert_eq!(
        get(&end, &format!("ingest_wcu_consumed_total{t}")),
        total_wcu as f64
    );
    assert_eq!(
        get(&end, &format!("ingest_write_requests_total{t}")),
        u(&st, "requests") as f64,
        "requests vs the proxy's {st}"
    );
    assert_eq!(
        get(&end, &format!("ingest_throttled_requests_total{t}")),
        (u(&st, "throttled_requests") + u(&st, "partial_requests")) as f64
    );
    assert_eq!(
        get(&end, &format!("ingest_unprocessed_items_total{t}")),
        u(&st, "unprocessed_items") as f64
    );
    assert_eq!(
        get(&end, &format!("ingest_batch_write_seconds_count{t}")),
        u(&st, "requests") as f64,
        "one latency sample per call"
    );
    assert!(get(&end, "ingest_commits_total") >= 1.0);
    let strategy = format!("{{strategy=\"adaptive\",table=\"{}\"}}", s.table);
    assert_eq!(
        get(
            &end,
            &format!("ingest_strategy_invocations_total{strategy}")
        ),
        u(&st, "requests") as f64,
        "the strategy hears every answer"
    );
    assert_eq!(get(&end, "ingest_ready"), 1.0);
    assert_eq!(get(&end, "ingest_records_in_flight"), 0.0);

    // The final summary says the same.
    worker.signal("TERM");
    let (code, summary) = worker.wait(Duration::from_secs(60));
    let summary = summary.expect("summary");
    assert_eq!(code, Some(0), "{summary}");
    assert_eq!(u(&summary, "items_written"), 1_500);
    assert_eq!(u(&summary, "requests"), u(&st, "requests"));
}

#[tokio::test(flavor = "multi_thread")]
async fn readyz_turns_ready_then_not_ready_when_dynamodb_is_unreachable() {
    let s = Setup::new(2, "").await;
    let proxy_addr = format!("127.0.0.1:{}", free_port());
    let proxy = ThrottleProxy::start_on(&proxy_addr, &[]);
    s.use_endpoint(&proxy.endpoint());
    let ops = format!("127.0.0.1:{}", free_port());
    s.append_config(&format!(
        "[ops]\nlisten = \"{ops}\"\n[throttle]\ncapacity_poll_s = 1\n"
    ));
    let records = (0..50)
        .map(|i| (format!("r{i}"), Some(mixed_record(&format!("r{i}"), i))))
        .collect();
    produce(&s.topic, records).await;
    let worker = s.spawn(false);

    let readyz = |want: u16| {
        let ops = ops.clone();
        move || {
            let got = http_get(&ops, "/readyz").ok();
            async move { got.is_some_and(|(status, _)| status == want) }
        }
    };
    eventually(Duration::from_secs(60), "/readyz 200", readyz(200)).await;
    let (_, body) = http_get(&ops, "/readyz").unwrap();
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["ready"], true, "{body}");
    assert_eq!(body["assigned_partitions"], 2, "{body}");
    assert_eq!(body["dynamodb"], "reachable", "{body}");

    // DynamoDB goes away: not ready within a few capacity polls.
    drop(proxy);
    eventually(Duration::from_secs(30), "/readyz 503", readyz(503)).await;
    let (_, body) = http_get(&ops, "/readyz").unwrap();
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["ready"], false, "{body}");
    assert!(
        body["dynamodb"]
            .as_str()
            .unwrap()
            .starts_with("unreachable: table "),
        "{body}"
    );
    // Alive all the same: liveness must not restart a worker for this.
    assert_eq!(http_get(&ops, "/healthz").unwrap().0, 200);
    let metrics = scrape(&ops);
    assert_eq!(get(&metrics, "ingest_ready"), 0.0);

    // It comes back: ready again.
    let proxy = ThrottleProxy::start_on(&proxy_addr, &[]);
    eventually(Duration::from_secs(30), "/readyz 200 again", readyz(200)).await;
    assert_eq!(http_get(&ops, "/nope").unwrap().0, 404);

    worker.signal("TERM");
    let (code, summary) = worker.wait(Duration::from_secs(60));
    assert_eq!(code, Some(0), "{summary:?}");
    assert_eq!(count(&dynamo().await, &s.table).await, 50);
    drop(proxy);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_batch_run_logs_progress_with_an_eta() {
    let s = Setup::build(2, "", Some(100)).await;
    let proxy = ThrottleProxy::start(&[]);
    s.use_endpoint(&proxy.endpoint());
    s.append_config("[ops]\nprogress_interval_s = 1\n");
    let (records, total_wcu) = mixed_sizes(800);
    produce(&s.topic, records).await;
    let worker = s.spawn(true);
    let logs = worker.logs.clone();
    let (code, summary) = worker.wait(Duration::from_secs(120));
    assert_eq!(code, Some(0), "{summary:?}");
    let lines: Vec<Value> = logs
        .lock()
        .unwrap()
        .iter()
        .filter(|v| v["event"] == "progress")
        .cloned()
        .collect();
    let secs = total_wcu as f64 / 100.0;
    assert!(
        lines.len() as f64 >= secs / 2.0,
        "a progress line a second over a ~{secs:.0} s run, got {}",
        lines.len()
    );
    let with_eta: Vec<&Value> = lines
        .iter()
        .filter(|l| l["total"] == 800 && l["eta_s"].is_u64())
        .collect();
    assert!(!with_eta.is_empty(), "{lines:?}");
    for l in &lines {
        assert_eq!(u(l, "done") + u(l, "remaining"), u(l, "total"), "{l}");
    }
    // The first full reading predicts about the whole run at the paced rate.
    let first = with_eta[0];
    let predicted = u(first, "eta_s") as f64 + 1.0;
    assert!(
        predicted < secs * 3.0,
        "ETA {predicted} s for a ~{secs:.0} s run: {first}"
    );
    let done: Vec<u64> = lines.iter().map(|l| u(l, "done")).collect();
    assert!(done.windows(2).all(|w| w[0] <= w[1]), "{done:?}");
    assert_eq!(u(&summary.unwrap(), "items_written"), 800);
}

/// No secret reaches any output of a run: canaries in `kafka.properties`
/// (SASL username and password) and in the AWS credentials of the environment
/// appear in no log line (at debug level), not in `check-config`'s output, the
/// exit summary, `/metrics`, `/healthz`, `/readyz`, nor a dead letter.
#[tokio::test(flavor = "multi_thread")]
async fn no_secret_reaches_any_output() {
    const CANARY: &str = "CANARY-7f3a9c-s3cr3t";
    let s = Setup::new(2, "").await;
    let ops = format!("127.0.0.1:{}", free_port());
    let text = std::fs::read_to_string(&s.config).unwrap();
    let text = text
        .replace(
            "\"session.timeout.ms\" = \"6000\"",
            &format!(
                "\"session.timeout.ms\" = \"6000\"\n\"sasl.username\" = \"user-{CANARY}\"\n\"sasl.password\" = \"{CANARY}\""
            ),
        )
        .replace("level = \"info\"", "level = \"debug\"");
    std::fs::write(&s.config, text).unwrap();
    s.append_config(&format!("[ops]\nlisten = \"{ops}\"\n"));
    let secret_env = [
        ("AWS_SECRET_ACCESS_KEY", format!("aws-{CANARY}")),
        ("AWS_SESSION_TOKEN", format!("token-{CANARY}")),
    ];
    let mut outputs: Vec<(String, String)> = Vec::new();

    let checked = std::process::Command::new(env!("CARGO_BIN_EXE_ingest"))
        .arg("check-config")
        .arg("--config")
        .arg(&s.config)
        .envs(secret_env.iter().map(|(k, v)| (*k, v.as_str())))
        .output()
        .unwrap();
    assert!(checked.status.success(), "{checked:?}");
    let shown = String::from_utf8_lossy(&checked.stdout).into_owned();
    assert!(shown.contains("sasl.password"), "the key is shown: {shown}");
    outputs.push(("check-config stdout".into(), shown));
    outputs.push((
        "check-config stderr".into(),
        String::from_utf8_lossy(&checked.stderr).into_owned(),
    ));

    let mut records: Vec<(String, Option<String>)> = (0..50)
        .map(|i| (format!("k{i}"), Some(format!(r#"{{"id":"k{i}"}}"#))))
        .collect();
    records.push(("poison".into(), Some("not json".into())));
    produce(&s.topic, records).await;
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_ingest"));
    cmd.arg("run").arg("--config").arg(&s.config);
    cmd.envs(secret_env.iter().map(|(k, v)| (*k, v.as_str())));
    let worker = Worker::start(cmd);
    let client = dynamo().await;
    eventually(Duration::from_secs(60), "every record written", || {
        let (client, table) = (client.clone(), s.table.clone());
        async move { count(&client, &table).await == 50 }
    })
    .await;
    for path in ["/metrics", "/healthz", "/readyz"] {
        let (_, body) = http_get(&ops, path).expect(path);
        outputs.push((path.into(), body));
    }
    let letters = read_dead_letters(&s.dlq, 1);
    assert_eq!(letters.len(), 1);
    outputs.push(("dead letter".into(), format!("{:?}", letters[0])));
    worker.signal("TERM");
    let logs = worker.logs.clone();
    let (code, summary) = worker.wait(Duration::from_secs(60));
    assert_eq!(code, Some(0));
    let log_text: Vec<String> = logs.lock().unwrap().iter().map(|v| v.to_string()).collect();
    assert!(
        log_text.iter().any(|l| l.contains("\"DEBUG\"")),
        "debug lines were logged"
    );
    let log_text = log_text.join("\n");
    outputs.push(("logs".into(), log_text));
    outputs.push(("summary".into(), format!("{summary:?}")));
    for (what, text) in &outputs {
        assert!(
            !text.contains("7f3a9c"),
            "a secret in {what}:\n{}",
            text.lines()
                .filter(|l| l.contains("7f3a9c"))
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
}

/// Memory stays within the byte budget against a table far too slow for the
/// topic: records of 50 KB, a budget of 16 MB, a 1 WCU/s table. While the
/// buffers are full, `/metrics` shows the bytes held never above the budget
/// (plus the one record that crosses it), the source paused before the end,
/// and the process's peak RSS within `deploy/`'s 512 MiB.
#[tokio::test(flavor = "multi_thread")]
async fn memory_stays_within_the_byte_budget_on_a_slow_table() {
    const BUDGET: f64 = 16.0 * 1_048_576.0;
    const RECORD: usize = 50_000;
    let s = Setup::build(2, "", Some(1)).await;
    let ops = format!("127.0.0.1:{}", free_port());
    s.append_config(&format!("[ops]\nlisten = \"{ops}\"\n"));
    let records = (0..800)
        .map(|i| {
            let value = format!(r#"{{"id":"k{i}","pad":"{}"}}"#, "x".repeat(RECORD));
            (format!("k{i}"), Some(value))
        })
        .collect();
    produce(&s.topic, records).await;
    let worker = s.spawn_with_env(
        false,
        &[
            ("INGEST__PIPELINE__MAX_BUFFERED_BYTES", "16777216"),
            ("INGEST__PIPELINE__DRAIN_TIMEOUT_S", "15"),
        ],
    );
    let t = format!("{{table=\"{}\"}}", s.table);
    eventually(Duration::from_secs(60), "the byte budget filled", || {
        let full = http_get(&ops, "/metrics")
            .ok()
            .and_then(|(_, b)| sample(&b, "ingest_buffered_bytes"))
            .is_some_and(|b| b >= 0.9 * BUDGET);
        async move { full }
    })
    .await;
    let (mut most, mut rss) = (0f64, 0f64);
    for _ in 0..25 {
        let text = scrape(&ops);
        let held = get(&text, "ingest_buffered_bytes");
        assert!(
            held <= BUDGET + 2.0 * (RECORD as f64 + 1_024.0),
            "{held} bytes held, budget {BUDGET}"
        );
        most = most.max(held);
        rss = get(&text, "ingest_peak_rss_bytes");
        // Queued records are held records: the queue fits the budget too
        // (one may arrive between the two readings of a scrape).
        let queued = get(&text, &format!("ingest_table_queued_records{t}"));
        assert!(
            (queued - 1.0) * RECORD as f64 <= held,
            "{queued} records queued, {held} bytes held"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let consumed = get(&scrape(&ops), "ingest_records_consumed_total");
    assert!(
        consumed < 800.0,
        "paused before the end: {consumed} of 800 read"
    );
    assert!(rss < 512.0 * 1_048_576.0, "peak RSS {rss}");
    eprintln!(
        "byte budget 16 MB: at most {:.1} MB held, {consumed} of 800 records read, peak RSS {:.1} MB",
        most / 1_048_576.0,
        rss / 1_048_576.0
    );
    worker.signal("TERM");
    let (code, _) = worker.wait(Duration::from_secs(60));
    assert!(matches!(code, Some(0) | Some(3)), "exit {code:?}");
}
