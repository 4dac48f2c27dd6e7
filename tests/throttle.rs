//! Throttle control end to end: workers write through `ingest throttle-proxy`
//! (which enforces the table's 200 WCU/s as DynamoDB would) into LocalStack.
//! These tests check correctness under throttling (everything written once,
//! no offset committed ahead of its write, counters that agree), not speed:
//! the strategy comparison lives in `make bench-throttle`.

mod common;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

fn u(v: &Value, k: &str) -> u64 {
    v[k].as_u64().unwrap_or_else(|| panic!("{k} in {v}"))
}

/// Runs `workers` workers until caught up through a 200 WCU/s proxy; checks,
/// during and after the run, that committed offsets never run ahead of writes.
async fn run_through_proxy(workers: usize) {
    let s = Setup::build(6, "", Some(200)).await;
    let proxy = ThrottleProxy::start(&[]);
    s.use_endpoint(&proxy.endpoint());
    // No worker is killed here: a session long enough that a stall of the
    // shared broker (seen on CI) rarely expires it.
    s.set_kafka_property("session.timeout.ms", "20000");
    let (records, total_wcu) = mixed_sizes(20_000);
    let produced = produce(&s.topic, records).await;
    let client = dynamo().await;

    let started = Instant::now();
    let mut running: Vec<Worker> = (0..workers).map(|_| s.spawn(true)).collect();
    let mut checks = 0;
    while running
        .iter_mut()
        .any(|w| w.child.try_wait().unwrap().is_none())
    {
        if started.elapsed() > Duration::from_secs(600) {
            for w in &mut running {
                let tail: Vec<String> = w
                    .logs
                    .lock()
                    .unwrap()
                    .iter()
                    .rev()
                    .take(15)
                    .map(|v| v.to_string())
                    .collect();
                eprintln!(
                    "worker {} (running: {:?}), last logs:\n{}",
                    w.child.id(),
                    w.child.try_wait().ok(),
                    tail.join("\n")
                );
            }
            panic!("run took over 10 minutes");
        }
        tokio::time::sleep(Duration::from_secs(15)).await;
        // Committed offsets read first, table scanned after: a record below
        // a committed offset must already be there.
        let Some(committed) = s.committed_within(Duration::from_secs(10)) else {
            eprintln!("the broker did not answer in 10 s: sample skipped");
            continue;
        };
        let present: HashSet<String> = scan(&client, &s.table).await.into_keys().collect();
        assert_committed_were_written(&produced, &committed, &present);
        checks += 1;
    }
    let elapsed = started.elapsed().as_secs_f64();
    assert!(checks >= 2, "the run was checked mid-way");

    let mut sum = serde_json::Map::new();
    let mut peak_rss_mb = 0f64;
    for w in running {
        let logs = w.logs.clone();
        let (code, summary) = w.wait(Duration::from_secs(10));
        for line in logs.lock().unwrap().iter() {
            if line["level"] == "WARN" {
                eprintln!("worker warning: {line}");
            }
        }
        let summary = summary.expect("summary");
        assert_eq!(code, Some(0), "{summary}");
        let rss = summary["peak_rss_mb"]
            .as_f64()
            .expect("peak RSS in the summary");
        peak_rss_mb = peak_rss_mb.max(rss);
        for k in [
            "requests",
            "items_written",
            "throttled_requests",
            "unprocessed_items",
            "wcu_written",
            "assignments_lost",
        ] {
            let prev = sum.get(k).and_then(Value::as_u64).unwrap_or(0);
            sum.insert(k.into(), (prev + u(&summary, k)).into());
        }
    }
    let sum = Value::Object(sum);
    assert_eq!(
        count(&client, &s.table).await,
        20_000,
        "every record written"
    );
    assert_eq!(s.committed(), s.end_offsets());

    // The proxy saw exactly what the workers say they did.
    let st = proxy.stats(&s.table);
    assert_eq!(
        u(&st, "requests"),
        u(&sum, "requests"),
        "requests: proxy {st} vs workers {sum}"
    );
    assert_eq!(u(&st, "accepted_items"), u(&sum, "items_written"));
    assert_eq!(
        st["accepted_wcu"].as_f64().unwrap() as u64,
        u(&sum, "wcu_written")
    );
    assert_eq!(
        u(&st, "throttled_requests") + u(&st, "partial_requests"),
        u(&sum, "throttled_requests")
    );
    assert_eq!(u(&st, "unprocessed_items"), u(&sum, "unprocessed_items"));
    // Its per-second timeline adds up to the same counts.
    let timeline: Vec<[f64; 5]> = serde_json::from_value(st["timeline"].clone()).unwrap();
    let column = |c: usize| timeline.iter().map(|row| row[c]).sum::<f64>();
    assert_eq!(column(4) as u64, u(&st, "requests"), "timeline's requests");
    assert_eq!(
        column(2) as u64,
        u(&st, "throttled_requests") + u(&st, "partial_requests"),
        "timeline's throttled requests"
    );
    assert!(
        (column(1) - st["accepted_wcu"].as_f64().unwrap()).abs() < 1e-6 * column(1).max(1.0),
        "timeline's accepted WCU {} vs {}",
        column(1),
        st["accepted_wcu"]
    );
    // Rebalances finish in-flight writes and commit exactly them, so records
    // are written again only in rare races (a write overtaking an abandoned
    // one). A session that expired (a broker stall) can commit nothing: what
    // was written since its last commit is written again by the next owner,
    // as at-least-once allows; the bound holds for runs without one.
    let rewritten = u(&sum, "wcu_written") - total_wcu;
    let lost = u(&sum, "assignments_lost");
    assert!(
        lost > 0 || rewritten * 100 <= total_wcu,
        "{rewritten} WCU written twice"
    );

    let requests = u(&sum, "requests") as f64;
    let utilization = st["accepted_wcu"].as_f64().unwrap() / st["offered_wcu"].as_f64().unwrap();
    eprintln!(
        "{workers} worker(s): {requests} requests for 20000 records ({:.3}x the ideal 800), \
         throttled {:.2}%, utilization {:.1}%, {elapsed:.0} s (ideal {:.0} s), {rewritten} WCU rewritten ({lost} assignment(s) lost), \
         peak RSS {peak_rss_mb:.1} MB (largest worker)",
        requests / 800.0,
        100.0 * u(&sum, "throttled_requests") as f64 / requests,
        100.0 * utilization,
        total_wcu as f64 / 200.0,
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn one_worker_writes_20k_mixed_records_through_a_200_wcu_table() {
    run_through_proxy(1).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn three_workers_share_a_200_wcu_table_and_write_20k_records() {
    run_through_proxy(3).await;
}

/// Runs `workers` workers until caught up through a 200 WCU/s proxy whose
/// bucket holds `burst_s` seconds of capacity (no burst credit): 2,000 mixed
/// records. Under the old rule nearly every request came back partial; now
/// at most one in ten may.
async fn shallow_bucket_run(workers: usize, burst_s: &str) {
    let s = Setup::build(4, "", Some(200)).await;
    let proxy = ThrottleProxy::start(&["--burst-s", burst_s]);
    let total_wcu = mixed_through(&proxy, &s, 2_000).await;
    let started = Instant::now();
    let running: Vec<Worker> = (0..workers).map(|_| s.spawn(true)).collect();
    let (mut requests, mut throttled) = (0, 0);
    for w in running {
        // Liveness, not speed: the ideal is 13.5 s.
        let (code, summary) = w.wait(Duration::from_secs(300));
        let summary = summary.expect("summary");
        assert_eq!(code, Some(0), "{summary}");
        requests += u(&summary, "requests");
        throttled += u(&summary, "throttled_requests");
    }
    let elapsed = started.elapsed().as_secs_f64();
    let client = dynamo().await;
    assert_eq!(
        count(&client, &s.table).await,
        2_000,
        "every record written"
    );
    assert_eq!(s.committed(), s.end_offsets());
    eprintln!(
        "{workers} worker(s), bucket {burst_s} s: {elapsed:.1} s for {total_wcu} WCU \
         ({:.0}% of 200 WCU/s, including start-up), {requests} requests, {throttled} throttled \
         ({:.1}%)",
        100.0 * total_wcu as f64 / 200.0 / elapsed,
        100.0 * throttled as f64 / requests.max(1) as f64
    );
    assert!(
        throttled * 10 <= requests,
        "{throttled} of {requests} requests throttled"
    );
}

/// A bucket smaller than one batch (10 WCU at 200 WCU/s: every 25-item
/// request comes back partial at any rate) must not collapse the rate:
/// requests shrink to what the server admits at once. Before, one worker cut
/// its rate on every partial answer, toward nothing.
#[tokio::test(flavor = "multi_thread")]
async fn a_bucket_smaller_than_one_batch_shrinks_requests_not_the_rate() {
    shallow_bucket_run(1, "0.05").await;
    shallow_bucket_run(3, "0.05").await;
}

/// A hot partition: the table has room (1,000 WCU/s) but the proxy's one
/// partition admits 20 WCU/s. Its 400 answers carry `ThrottlingReasons`
/// `TableWriteKeyRangeThroughputExceeded` on the wire, the AWS SDK reads them,
/// and the worker counts key-range throttles apart from the table's; every
/// record is still written.
#[tokio::test(flavor = "multi_thread")]
async fn a_hot_partition_throttles_by_key_range_and_the_worker_reads_the_reason() {
    let s = Setup::build(1, "", Some(1_000)).await;
    let proxy = ThrottleProxy::start(&["--partitions", "1", "--partition-wcu", "20"]);
    let total_wcu = mixed_through(&proxy, &s, 200).await;
    let (summary, _) = one_worker_writes_all(&s, 200).await;
    let stats = proxy.stats(&s.table);
    let refused = u(&stats, "key_range_refused_items");
    // The proxy counts 400 answers as throttled_requests, partial ones apart.
    let hard = u(&stats, "throttled_requests");
    eprintln!(
        "hot partition at 20 WCU/s, {total_wcu} WCU: {} requests, {} throttled, {} key-range \
         400s seen by the worker, {refused} items refused by the partition",
        u(&summary, "requests"),
        u(&summary, "throttled_requests"),
        u(&summary, "key_range_throttles")
    );
    assert!(
        refused > 0,
        "the partition, not the table, refused: {stats}"
    );
    assert!(hard > 0, "a request found the partition empty: {stats}");
    assert_eq!(
        u(&summary, "key_range_throttles"),
        hard,
        "every 400 the proxy sent was a key-range one, and the worker read its reason"
    );
}

/// A budget is a ceiling for the whole job: with `budget_fraction = 0.5` on
/// a 200 WCU/s table, two workers together write at most about 100 WCU/s
/// (each paces at most budget x its share), leaving the rest to whoever
/// else writes to the table, and are never throttled doing so.
#[tokio::test(flavor = "multi_thread")]
async fn a_budget_holds_the_whole_job_under_its_fraction_of_the_capacity() {
    let s = Setup::build(4, "budget_fraction = 0.5", Some(200)).await;
    let proxy = ThrottleProxy::start(&[]);
    let total_wcu = mixed_through(&proxy, &s, 1_500).await;
    let running: Vec<Worker> = (0..2).map(|_| s.spawn(true)).collect();
    let mut throttled = 0;
    for w in running {
        let (code, summary) = w.wait(Duration::from_secs(300));
        let summary = summary.expect("summary");
        assert_eq!(code, Some(0), "{summary}");
        throttled += u(&summary, "throttled_requests");
        let budget = summary["tables"][0]["budget"].as_f64();
        assert_eq!(
            budget,
            Some(100.0),
            "the summary states the budget: {summary}"
        );
    }
    assert_eq!(count(&dynamo().await, &s.table).await, 1_500);
    assert_eq!(s.committed(), s.end_offsets());
    let st = proxy.stats(&s.table);
    let used = st["accepted_wcu"].as_f64().unwrap() / st["offered_wcu"].as_f64().unwrap();
    eprintln!(
        "budget 50% of 200 WCU/s, 2 workers, {total_wcu} WCU: {:.1}% of the capacity used, \
         {throttled} throttled requests",
        100.0 * used
    );
    // The bucket starts full (1 s of capacity) and the pacers release 25
    // WCU at once: a little over half at most, over a run of ~25 s.
    assert!(
        used <= 0.56,
        "the job used {:.1}% of the table",
        100.0 * used
    );
    assert_eq!(
        throttled, 0,
        "a budget below the capacity is never throttled"
    );
}

/// `records` small records, half of them on 12 hot keys that all live in one
/// partition of the proxy's four (each capped at 50 WCU/s; the table's 1,000
/// WCU/s is far above the demand), the other half on distinct keys in the
/// other three. Every batch carries the hot keys, so the hot partition
/// bounds the job (about 4 batches/s). Paced apart after their first
/// refusal, the hot keys are refused rarely and the table keeps its pace;
/// with `hot_keys = false` every refusal slows the whole table. `workers`
/// workers share a topic of as many partitions; the proxy's buckets hold
/// `burst_s` seconds. Returns (records/s, requests, throttled requests, the
/// first worker's table report).
async fn hot_partition_run(
    hot_keys: bool,
    workers: usize,
    burst_s: f64,
    records: usize,
) -> (f64, u64, u64, Value) {
    use ingest::proxy::partitions::Partitions;
    let s = Setup::build(workers as i32, "", Some(1_000)).await;
    let proxy = ThrottleProxy::partitioned(4, 50, burst_s);
    s.use_endpoint(&proxy.endpoint());
    let parts = Partitions::new(4, 50.0, 1.0, Duration::ZERO);
    let partition = |id: &str| parts.of(&format!(r#"{{"S":"{id}"}}"#));
    let hot: Vec<String> = (0..)
        .map(|i| format!("h{i}"))
        .filter(|id| partition(id) == 0)
        .take(12)
        .collect();
    let mut cold = (0..)
        .map(|i| format!("c{i:05}"))
        .filter(|id| partition(id) != 0);
    let produced: Vec<(String, Option<String>)> = (0..records)
        .map(|i| {
            let id = if i % 2 == 0 {
                hot[(i / 2) % hot.len()].clone()
            } else {
                cold.next().unwrap()
            };
            let v = format!(r#"{{"id":"{id}","n":{i}}}"#);
            (id, Some(v))
        })
        .collect();
    produce(&s.topic, produced).await;
    let flag = if hot_keys { "true" } else { "false" };
    let started = Instant::now();
    let env = [
        ("INGEST__THROTTLE__HOT_KEYS", flag),
        // The hot range's cuts, to read with `--nocapture`.
        ("INGEST__LOG__LEVEL", "info,ingest::telemetry::events=debug"),
    ];
    let running: Vec<Worker> = (0..workers).map(|_| s.spawn_with_env(true, &env)).collect();
    let (mut requests, mut throttled, mut table) = (0, 0, Value::Null);
    for w in running {
        let logs = w.logs.clone();
        let (code, summary) = w.wait(Duration::from_secs(300));
        for l in logs.lock().unwrap().iter() {
            if l["event"]
                .as_str()
                .is_some_and(|e| e.starts_with("hot_range"))
            {
                eprintln!("{l}");
            }
        }
        let summary = summary.expect("summary");
        assert_eq!(code, Some(0), "{summary}");
        requests += u(&summary, "requests");
        throttled += u(&summary, "throttled_requests");
        if table.is_null() {
            table = summary["tables"][0].clone();
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    // Every key's last record is what the table holds.
    assert_eq!(count(&dynamo().await, &s.table).await, 12 + records / 2);
    assert_eq!(s.committed(), s.end_offsets());
    (records as f64 / elapsed, requests, throttled, table)
}

#[tokio::test(flavor = "multi_thread")]
async fn hot_keys_a_partition_refuses_are_paced_apart_and_refused_rarely() {
    let (rate, requests, throttled, table) = hot_partition_run(true, 1, 1.0, 2_400).await;
    let (rate_off, requests_off, throttled_off, table_off) =
        hot_partition_run(false, 1, 1.0, 2_400).await;
    let pct = |t: u64, r: u64| 100.0 * t as f64 / r.max(1) as f64;
    eprintln!(
        "hot partition, hot keys paced apart: {rate:.0} records/s, {requests} requests, \
         {throttled} throttled ({:.1}%), table {table}\n\
         every refusal slows the table: {rate_off:.0} records/s, {requests_off} requests, \
         {throttled_off} throttled ({:.1}%), table {table_off}",
        pct(throttled, requests),
        pct(throttled_off, requests_off),
    );
    assert!(
        table["hot_keys"].as_u64().unwrap_or(0) > 0,
        "the summary names the hot keys: {table}"
    );
    assert_eq!(table_off["hot_keys"].as_u64(), Some(0));
    assert!(
        pct(throttled, requests) * 2.0 <= pct(throttled_off, requests_off),
        "paced apart, at most half as many requests are refused"
    );
}

/// An on-demand table with a maximum (the proxy's `--on-demand-max 150`):
/// DescribeTable through the proxy states `MaxWriteRequestUnits`, the worker
/// paces to it from the start instead of probing past it, and follows it
/// when it is raised to 300 mid-run (the admin call, as an UpdateTable of
/// `OnDemandThroughput` would).
#[tokio::test(flavor = "multi_thread")]
async fn an_on_demand_maximum_is_read_paced_to_and_followed_when_raised() {
    let s = Setup::build(4, "", None).await;
    let proxy = ThrottleProxy::start(&["--on-demand-max", "150"]);
    let total_wcu = mixed_through(&proxy, &s, 3_000).await;
    let started = Instant::now();
    let w = s.spawn(true);
    tokio::time::sleep(Duration::from_secs(8)).await;
    proxy.admin(
        "POST",
        &format!("/_proxy/capacity?table={}&wcu=300", s.table),
    );
    let (code, summary) = w.wait(Duration::from_secs(300));
    let elapsed = started.elapsed().as_secs_f64();
    let summary = summary.expect("summary");
    assert_eq!(code, Some(0), "{summary}");
    assert_eq!(count(&dynamo().await, &s.table).await, 3_000);
    assert_eq!(s.committed(), s.end_offsets());
    let requests = u(&summary, "requests");
    let throttled = u(&summary, "throttled_requests");
    let st = proxy.stats(&s.table);
    eprintln!(
        "on-demand, maximum 150 then 300 WRU/s, {total_wcu} WCU: {elapsed:.1} s, {requests} \
         requests, {throttled} throttled ({:.1}%), table {}, proxy {} accepted WCU",
        100.0 * throttled as f64 / requests.max(1) as f64,
        summary["tables"][0],
        st["accepted_wcu"]
    );
    assert_eq!(
        summary["tables"][0]["capacity"].as_f64(),
        Some(300.0),
        "the raised maximum was read: {summary}"
    );
    assert!(
        throttled * 10 <= requests,
        "paced to the maximum, not probing past it: {throttled} of {requests}"
    );
}

/// An on-demand table without a maximum, warm for 300 write units/s (the
/// proxy's `--on-demand-start 300`: a new table that sustains 300, its
/// `WarmThroughput` says so): the worker reads it, paces at its share of it
/// (the slow start neither starts below it nor doubles past it, see the
/// adaptive unit tests), and nothing is lost. At most 2% of the requests
/// throttled (one of about 80): 0 of 80 in two runs; 45% (108 of 237) when
/// the slow start doubled past it and the table refused the excess.
#[tokio::test(flavor = "multi_thread")]
async fn an_on_demand_tables_warm_throughput_is_read_and_paced_from() {
    let s = Setup::build(4, "", None).await;
    let proxy = ThrottleProxy::start(&["--on-demand-start", "300"]);
    let total_wcu = mixed_through(&proxy, &s, 2_000).await;
    let (summary, elapsed) = one_worker_writes_all(&s, 2_000).await;
    let (requests, throttled) = (u(&summary, "requests"), u(&summary, "throttled_requests"));
    let table = &summary["tables"][0];
    eprintln!(
        "on-demand, warm for 300 WRU/s, {total_wcu} WCU: {elapsed:.1} s, {requests} requests, \
         {throttled} throttled, table {table}"
    );
    assert_eq!(table["warm"].as_f64(), Some(300.0), "read: {table}");
    assert_eq!(table["capacity"], Value::Null, "no maximum, no capacity");
    assert!(
        throttled * 50 <= requests,
        "paced to what the table is warm for: {throttled} of {requests} throttled"
    );
}

/// A DescribeTable through the proxy (every worker sends one at start) does
/// not start a provisioned table's bucket: burst credit banks from the first
/// write, as the benches' "starting empty" says. Before, the state made for
/// on-demand answers banked 3 s of credit here.
#[tokio::test(flavor = "multi_thread")]
async fn a_describe_table_does_not_start_a_provisioned_tables_bucket() {
    require_stack();
    let table = unique("tbl");
    create_table_with(&dynamo().await, &table, false, Some(10)).await;
    let proxy = ThrottleProxy::start(&["--burst-credit-s", "300"]);
    let via = dynamo_at(&proxy.endpoint()).await;
    let desc = via
        .describe_table()
        .table_name(&table)
        .send()
        .await
        .unwrap();
    let wcu = desc.table().and_then(|t| t.provisioned_throughput());
    assert_eq!(wcu.and_then(|p| p.write_capacity_units()), Some(10));
    tokio::time::sleep(Duration::from_secs(3)).await;
    via.put_item()
        .table_name(&table)
        .item("id", aws_sdk_dynamodb::types::AttributeValue::S("a".into()))
        .send()
        .await
        .unwrap();
    // One write: what was offered is the bucket at the first write, a full
    // second of 10 WCU and no credit, plus what refilled while LocalStack
    // answered (a tenth of a second or more on a loaded machine; the 3 s of
    // credit this test is for would be 30 more).
    let stats = proxy.stats(&table);
    let offered = stats["offered_wcu"].as_f64().unwrap();
    let answering =
        stats["last_accept_s"].as_f64().unwrap() - stats["first_write_s"].as_f64().unwrap();
    let at_first = offered - 10.0 * answering;
    assert!(
        at_first <= 10.5,
        "{at_first} WCU in the bucket at the first write ({offered} offered, {answering} s answering)"
    );
}

/// `--upstream none`: the proxy answers DescribeTable and the writes itself,
/// after a fixed latency, and stores nothing (the stand-in that benchmarks
/// of the worker's own cost write to). A worker writes every record through
/// it and commits them, reads the capacity it reports and is held to it;
/// LocalStack's table of the same name stays empty; an operation the
/// stand-in does not serve gets a 400 that says so.
#[tokio::test(flavor = "multi_thread")]
async fn the_stand_in_answers_the_worker_with_nothing_behind_it() {
    let s = Setup::build(4, "", None).await;
    let proxy = ThrottleProxy::stand_in(&["--latency-ms", "5", "--wcu", "500"]);
    let total_wcu = mixed_through(&proxy, &s, 1_000).await;
    let (code, summary) = s.spawn(true).wait(Duration::from_secs(300));
    let summary = summary.expect("summary");
    assert_eq!(code, Some(0), "{summary}");
    assert_eq!(s.committed(), s.end_offsets());
    assert_eq!(u(&summary, "items_written"), 1_000, "{summary}");
    let stats = proxy.stats(&s.table);
    assert_eq!(stats["accepted_items"].as_u64(), Some(1_000), "{stats}");
    assert_eq!(stats["accepted_wcu"].as_f64(), Some(total_wcu as f64));
    let table = &summary["tables"][0];
    assert_eq!(table["capacity"].as_f64(), Some(500.0), "{table}");
    assert_eq!(count(&dynamo().await, &s.table).await, 0, "nothing stored");
    let via = dynamo_at(&proxy.endpoint()).await;
    let err = via.list_tables().send().await.unwrap_err();
    let text = format!("{}", aws_sdk_dynamodb::error::DisplayErrorContext(err));
    assert!(text.contains("--upstream none"), "{text}");
}

/// A table of 200 WCU/s whose global secondary index (keyed by `n`, which
/// every record carries, all attributes projected) has 40: every write to
/// the table is one to the index, and the index's capacity is the table's
/// real one. The proxy refuses what the index has no room for
/// (`IndexWriteProvisionedThroughputExceeded`, naming the index's ARN), the
/// worker reads the index's capacity with DescribeTable and what each write
/// costs it from ConsumedCapacity (`INDEXES`), paces to 40, and says so in
/// its summary; nothing is lost. Paced to the table's 200 instead, the
/// worker met the index's refusals as a table shared with another writer.
#[tokio::test(flavor = "multi_thread")]
async fn an_index_with_less_capacity_than_the_table_is_paced_to() {
    let s = Setup::build(2, "", Some(200)).await;
    add_index_on_n(&dynamo().await, &s.table, "by_n", 40).await;
    let proxy = ThrottleProxy::start(&[]);
    let total_wcu = mixed_through(&proxy, &s, 600).await;
    let (summary, elapsed) = one_worker_writes_all(&s, 600).await;
    let requests = u(&summary, "requests");
    let throttled = u(&summary, "throttled_requests");
    let st = proxy.stats(&s.table);
    eprintln!(
        "index of 40 WCU/s under a 200 WCU/s table, {total_wcu} WCU: {elapsed:.1} s, {requests} \
         requests, {throttled} throttled, {} items refused by the index; table {}",
        st["index_refused_items"], summary["tables"][0]
    );
    let table = &summary["tables"][0];
    assert_eq!(table["index_bound"], "by_n", "the index binds: {table}");
    assert_eq!(
        table["capacity"].as_f64(),
        Some(40.0),
        "paced to the index's capacity, each write costing it what it costs the table: {table}"
    );
    assert!(
        throttled * 10 <= requests,
        "paced to the index, not probing the table's capacity: {throttled} of {requests}"
    );
}

/// A sparse index: only every fifth record carries its key `g`, so it
/// takes about a fifth of the table's units, and its 20 WCU/s bound the
/// table's writes at about 100 (20 / a fifth), under the table's 200. The
/// worker starts paced to 20 (before any write, every write is taken to
/// reach the index), measures the fifth from ConsumedCapacity, and paces to
/// about 100; the index's refusals of the items that reach it, while later
/// items went through, are not read as a hot key range. Nothing is lost.
#[tokio::test(flavor = "multi_thread")]
async fn a_sparse_index_bounds_the_table_by_what_it_is_measured_to_cost() {
    use aws_sdk_dynamodb::types::ScalarAttributeType;
    let s = Setup::build(2, "", Some(200)).await;
    add_index_on(
        &dynamo().await,
        &s.table,
        "by_g",
        ("g", ScalarAttributeType::S),
        20,
    )
    .await;
    let proxy = ThrottleProxy::start(&[]);
    s.use_endpoint(&proxy.endpoint());
    let records: Vec<(String, Option<String>)> = (0..1_000)
        .map(|i| {
            let id = format!("s{i:05}");
            let g = if i % 5 == 0 { r#","g":"x""# } else { "" };
            let v = format!(r#"{{"id":"{id}","n":{i},"pad":"{}"{g}}}"#, "x".repeat(100));
            (id, Some(v))
        })
        .collect();
    produce(&s.topic, records).await;
    let (summary, elapsed) = one_worker_writes_all(&s, 1_000).await;
    let requests = u(&summary, "requests");
    let throttled = u(&summary, "throttled_requests");
    let st = proxy.stats(&s.table);
    let table = &summary["tables"][0];
    eprintln!(
        "sparse index (a fifth of the items) of 20 WCU/s under a 200 WCU/s table, 1,000 WCU: \
         {elapsed:.1} s, {requests} requests, {throttled} throttled, {} items refused by the \
         index; table {table}",
        st["index_refused_items"]
    );
    let capacity = table["capacity"].as_f64().unwrap_or(0.0);
    assert!(
        (80.0..=130.0).contains(&capacity),
        "paced to the index's 20 over the measured fifth (about 100): {table}"
    );
    assert_eq!(table["index_bound"], "by_g", "{table}");
    assert_eq!(table["hot_keys"], 0, "no key range read: {table}");
}

/// One worker on `s` until caught up: it exits 0 with a summary, all `n`
/// records are in the table and every offset is committed. Returns the
/// summary and the seconds the worker ran.
async fn one_worker_writes_all(s: &Setup, n: usize) -> (Value, f64) {
    let started = Instant::now();
    let (code, summary) = s.spawn(true).wait(Duration::from_secs(300));
    let elapsed = started.elapsed().as_secs_f64();
    let summary = summary.expect("summary");
    assert_eq!(code, Some(0), "{summary}");
    assert_eq!(count(&dynamo().await, &s.table).await, n);
    assert_eq!(s.committed(), s.end_offsets());
    (summary, elapsed)
}

/// Points the setup's worker at `proxy` and produces `n` mixed-size records
/// (see [`mixed_sizes`]); returns their WCU.
async fn mixed_through(proxy: &ThrottleProxy, s: &Setup, n: usize) -> u64 {
    s.use_endpoint(&proxy.endpoint());
    let (records, total_wcu) = mixed_sizes(n);
    produce(&s.topic, records).await;
    total_wcu
}

/// A job's workers share what their tables teach them (`throttle.
/// lessons_topic`, see `src/lessons.rs`). A worker that meets another
/// writer at its share (60 of the table's 100 WCU/s, written through the
/// proxy beside it) publishes a `first_meeting` lesson naming its group and
/// table; it takes a lesson a peer of its group publishes, and not one of
/// another group.
#[tokio::test(flavor = "multi_thread")]
async fn a_workers_lessons_reach_the_topic_and_it_takes_only_its_peers() {
    let s = Setup::build(2, "", Some(100)).await;
    let topic = unique("lessons");
    s.append_config(&format!("[throttle]\nlessons_topic = \"{topic}\"\n"));
    let proxy = ThrottleProxy::start(&[]);
    s.use_endpoint(&proxy.endpoint());
    let (records, _) = mixed_sizes(3_000);
    produce(&s.topic, records).await;
    // The other writer: 20 one-unit items every third of a second.
    let other = dynamo_without_retries(&proxy.endpoint());
    let table = s.table.clone();
    let writer = tokio::spawn(async move {
        for round in 0u64.. {
            let items = (0..20).map(|i| {
                aws_sdk_dynamodb::types::WriteRequest::builder()
                    .put_request(
                        aws_sdk_dynamodb::types::PutRequest::builder()
                            .item(
                                "id",
                                aws_sdk_dynamodb::types::AttributeValue::S(format!(
                                    "other-{round}-{i}"
                                )),
                            )
                            .build()
                            .unwrap(),
                    )
                    .build()
            });
            let _ = other
                .batch_write_item()
                .request_items(&table, items.collect())
                .send()
                .await;
            tokio::time::sleep(Duration::from_millis(333)).await;
        }
    });
    let w = s.spawn(true);
    eventually(Duration::from_secs(60), "the worker shares lessons", || {
        let shared = !w.events("lessons_shared").is_empty();
        async move { shared }
    })
    .await;
    eventually(Duration::from_secs(90), "a first meeting is taught", || {
        let sent = w
            .events("lesson_sent")
            .iter()
            .any(|e| e["lesson"] == "first_meeting");
        async move { sent }
    })
    .await;
    let wire: Vec<Value> = read_values(&topic, Duration::from_secs(30))
        .iter()
        .filter_map(|v| serde_json::from_str(v).ok())
        .collect();
    assert!(
        wire.iter().any(|l| l["group"] == s.group.as_str()
            && l["table"] == s.table.as_str()
            && l["lesson"] == "first_meeting"
            && l["from"].as_str().is_some_and(|f| !f.is_empty())),
        "{wire:?}"
    );
    // A lesson of another group first, then one of a peer of its own: the
    // partition keeps them in order, so once the second is heard the first
    // was read and passed over.
    let lesson = |group: &str, from: &str| {
        (
            group.to_string(),
            Some(
                serde_json::json!({"group": group, "table": s.table, "lesson": "settled", "level": 0.7, "from": from})
                    .to_string(),
            ),
        )
    };
    produce(
        &topic,
        vec![lesson("another-job", "stranger"), lesson(&s.group, "peer")],
    )
    .await;
    eventually(
        Duration::from_secs(30),
        "the peer's lesson is heard",
        || {
            let heard = w.events("lesson_heard").iter().any(|e| e["from"] == "peer");
            async move { heard }
        },
    )
    .await;
    // Not another group's lesson, nor its own (on the topic too).
    let heard = w.events("lesson_heard");
    assert!(heard.iter().all(|e| e["from"] == "peer"), "{heard:?}");
    writer.abort();
    w.signal("TERM");
    let (code, _) = w.wait(Duration::from_secs(60));
    assert_eq!(code, Some(0));
}

/// Two jobs (consumer groups) writing one table hear each other's beats on
/// the lessons topic and split the table: each logs its part, a half, once
/// both have records waiting, and the job left takes the whole table back
/// when the other is done. Everything of both is written.
#[tokio::test(flavor = "multi_thread")]
async fn two_jobs_on_one_table_split_it_and_the_one_left_takes_it_back() {
    two_jobs_split(false).await;
}

/// The same with the other job killed (SIGKILL) while both write: its
/// beats stop, and the job left takes the table back once they are stale
/// (3 s), not when the other job's group expires it.
#[tokio::test(flavor = "multi_thread")]
async fn a_killed_jobs_part_returns_to_the_job_left() {
    two_jobs_split(true).await;
}

async fn two_jobs_split(kill: bool) {
    let a = Setup::build(2, "", Some(100)).await;
    let mut b = Setup::build(2, "", None).await;
    // Job b writes to job a's table.
    let text = std::fs::read_to_string(&b.config)
        .unwrap()
        .replace(&b.table, &a.table);
    std::fs::write(&b.config, text).unwrap();
    b.delete_table().await;
    b.table = a.table.clone();
    let topic = unique("lessons");
    let proxy = ThrottleProxy::start(&[]);
    for s in [&a, &b] {
        s.append_config(&format!("[throttle]\nlessons_topic = \"{topic}\"\n"));
        s.use_endpoint(&proxy.endpoint());
    }
    let (ra, _) = mixed_sizes_keyed(3_000, "a");
    let (rb, _) = mixed_sizes_keyed(800, "b");
    produce(&a.topic, ra).await;
    produce(&b.topic, rb).await;
    let client = dynamo().await;
    let wa = a.spawn(true);
    eventually(Duration::from_secs(60), "job a writes", || {
        let c = &client;
        let t = a.table.clone();
        async move { count(c, &t).await > 100 }
    })
    .await;
    let wb = b.spawn(true);
    let split_in = |w: &Worker, busy_jobs: u64| {
        w.events("jobs_split")
            .iter()
            .any(|e| e["busy_jobs"] == busy_jobs && e["table"] == a.table.as_str())
    };
    eventually(Duration::from_secs(60), "both jobs split the table", || {
        let both = split_in(&wa, 2) && split_in(&wb, 2);
        async move { both }
    })
    .await;
    for w in [&wa, &wb] {
        let e = w.events("jobs_split");
        let halves = e.iter().find(|e| e["busy_jobs"] == 2).unwrap();
        assert!(
            (halves["part"].as_f64().unwrap() - 0.5).abs() < 1e-9,
            "{e:?}"
        );
    }
    let back_within = if kill {
        wb.signal("KILL");
        let (code, _) = wb.wait(Duration::from_secs(10));
        assert_eq!(code, None, "killed");
        // Stale after 3 s, and a beat or a poll later applied.
        Duration::from_secs(10)
    } else {
        let (code, _) = wb.wait(Duration::from_secs(120));
        assert_eq!(code, Some(0), "job b");
        Duration::from_secs(30)
    };
    eventually(back_within, "job a takes the table back", || {
        let back = wa
            .events("jobs_split")
            .last()
            .is_some_and(|e| e["busy_jobs"] == 1 && e["part"] == 1.0);
        async move { back }
    })
    .await;
    let (code, _) = wa.wait(Duration::from_secs(180));
    assert_eq!(code, Some(0), "job a");
    let written = count(&client, &a.table).await;
    if kill {
        assert!(written >= 3_000, "{written}");
    } else {
        assert_eq!(written, 3_800);
    }
    // Both jobs beat on the topic, each naming its group and the table.
    let beats: Vec<Value> = read_values(&topic, Duration::from_secs(30))
        .iter()
        .filter_map(|v| serde_json::from_str::<Value>(v).ok())
        .filter(|v| v.get("busy").is_some())
        .collect();
    for s in [&a, &b] {
        assert!(
            beats
                .iter()
                .any(|v| v["group"] == s.group.as_str() && v["table"] == a.table.as_str()),
            "{beats:?}"
        );
        // ...and, busy, its pacing rate and fair share (its job's peers
        // keep together by them).
        let positive = |v: &Value, k: &str| v[k].as_f64().is_some_and(|x| x > 0.0);
        assert!(
            beats.iter().any(|v| v["group"] == s.group.as_str()
                && v["busy"] == true
                && positive(v, "pace")
                && positive(v, "fair")),
            "{beats:?}"
        );
    }
}
