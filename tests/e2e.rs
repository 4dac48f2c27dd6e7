//! End to end against a real Kafka-protocol broker (tansu) and LocalStack's
//! DynamoDB: the worker binary runs as a subprocess, as in production.

mod common;

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use common::*;
use serde_json::Value;

fn ids(n: usize) -> Vec<(String, Option<String>)> {
    (0..n)
        .map(|i| {
            let id = format!("r{i:05}");
            let v = mixed_record(&id, i as u64);
            (id, Some(v))
        })
        .collect()
}

/// Waits (at most 2 minutes) until the worker's commit lines report `n`
/// records written.
fn wait_written(w: &Worker, n: u64) {
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while written_so_far(w) < n {
        assert!(
            std::time::Instant::now() < deadline,
            "no progress:\n{}",
            w.dump_logs()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Max `written` counter seen in the worker's commit lines.
fn written_so_far(w: &Worker) -> u64 {
    w.events("commit")
        .iter()
        .filter_map(|v| v.get("written").and_then(Value::as_u64))
        .max()
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread")]
async fn ten_thousand_records_over_six_partitions_land_typed_and_committed() {
    let s = Setup::new(6, "").await;
    let produced = produce(&s.topic, ids(10_000)).await;
    let used: HashSet<i32> = produced.iter().map(|p| p.partition).collect();
    assert_eq!(used.len(), 6, "keyed records spread over all partitions");

    let (code, summary) = s.spawn(true).wait(Duration::from_secs(180));
    let summary = summary.expect("summary on stdout");
    assert_eq!(code, Some(0), "summary: {summary}");
    assert_eq!(summary["exit"], "caught_up");
    assert_eq!(summary["records_consumed"], 10_000);
    assert_eq!(summary["items_written"], 10_000);
    eprintln!(
        "end to end: {} records/s ({summary})",
        summary["records_per_s"]
    );

    let items = scan(&dynamo().await, &s.table).await;
    assert_eq!(items.len(), 10_000);
    for (i, id) in (0..10_000).map(|i| (i, format!("r{i:05}"))) {
        let item = &items[&id];
        assert_eq!(item["n"], AttributeValue::N(i.to_string()));
        // More significant digits than an f64 keeps: exact, not rounded.
        assert_eq!(
            item["price"],
            AttributeValue::N(format!("{i}.123456789012345678"))
        );
        assert_eq!(
            item["big"],
            AttributeValue::N("123456789012345678901234567890".into())
        );
        assert_eq!(item["ok"], AttributeValue::Bool(i % 2 == 0));
        assert_eq!(item["none"], AttributeValue::Null(true));
        assert_eq!(
            item["tags"],
            AttributeValue::L(vec![
                AttributeValue::S("a".into()),
                AttributeValue::N(i.to_string())
            ])
        );
        let nested = item["nested"].as_m().expect("nested is M");
        assert_eq!(nested["k"], AttributeValue::S(format!("v{i}")));
        assert_eq!(
            nested["deep"].as_m().unwrap()["b"],
            AttributeValue::Bool(true)
        );
    }
    let end = s.end_offsets();
    assert_eq!(end.iter().sum::<i64>(), 10_000);
    assert_eq!(
        s.committed(),
        end,
        "committed offsets equal the end offsets"
    );

    // A second run finds nothing to do.
    let (code, summary) = s.spawn(true).wait(Duration::from_secs(60));
    let summary = summary.expect("summary");
    assert_eq!(code, Some(0));
    assert_eq!(summary["records_consumed"], 0, "{summary}");
    assert_eq!(summary["items_written"], 0, "{summary}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worker_whose_stdout_and_stderr_are_closed_finishes_and_exits_with_its_own_code() {
    // Their reader gone (a log shipper, or the bench that started it): the
    // summary cannot be printed nor any log line written. Before, printing
    // the summary panicked at the end of the run (exit 101), tracing's
    // report of a failed log write panicked as well, and the unwinding
    // runtime waited with no limit for a Kafka consumer stuck closing (a
    // worker hung for minutes).
    let s = Setup::new(2, "").await;
    produce(&s.topic, ids(300)).await;
    let (code, _) = s.spawn_unread(true).wait(Duration::from_secs(120));
    assert_eq!(code, Some(0));
    assert_eq!(count(&dynamo().await, &s.table).await, 300);
    assert_eq!(s.committed(), s.end_offsets());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worker_killed_mid_run_resumes_and_loses_nothing() {
    let s = Setup::new(6, "").await;
    let produced = produce(&s.topic, ids(10_000)).await;
    let w = s.spawn(false);
    wait_written(&w, 2_000);
    w.signal("KILL");
    let (code, _) = w.wait(Duration::from_secs(10));
    assert_eq!(code, None, "killed by a signal");

    let committed = s.committed();
    let committed_total: i64 = committed.iter().map(|c| c.max(&0)).sum();
    assert!(
        committed_total < 10_000,
        "the kill came mid-run ({committed:?})"
    );
    let client = dynamo().await;
    let present: HashSet<String> = scan(&client, &s.table).await.into_keys().collect();
    assert_committed_were_written(&produced, &committed, &present);

    // Restart once the dead member's session (6 s) has expired: tansu's
    // coordinator expires members only when a request arrives, and a new
    // member joining before that can leave the dead one as the group's leader
    // for good (see README, "Chaos suite"). A real coordinator needs no wait.
    tokio::time::sleep(Duration::from_secs(8)).await;
    let (code, summary) = s.spawn(true).wait(Duration::from_secs(180));
    assert_eq!(code, Some(0), "{summary:?}");
    let present: HashSet<String> = scan(&client, &s.table).await.into_keys().collect();
    assert_eq!(
        present.len(),
        10_000,
        "every record written after the restart"
    );
    assert_eq!(s.committed(), s.end_offsets());
}

#[tokio::test(flavor = "multi_thread")]
async fn poison_records_are_dead_lettered_with_reasons_and_do_not_block() {
    let s = Setup::new(1, "").await;
    let good = |id: &str| (id.to_string(), Some(format!(r#"{{"id":"{id}","v":1}}"#)));
    let bad = |label: &str, v: Option<String>| (label.to_string(), v);
    let digits39 = "1".repeat(39);
    let records = vec![
        good("good-0"),
        bad("not-json", Some("this is not json".into())),
        good("good-1"),
        bad("array", Some("[1,2,3]".into())),
        bad("no-key", Some(r#"{"other":1}"#.into())),
        good("good-2"),
        bad("mistyped-key", Some(r#"{"id":42}"#.into())),
        bad("tombstone", None),
        bad(
            "too-large",
            Some(format!(
                r#"{{"id":"too-large","pad":"{}"}}"#,
                "x".repeat(410 * 1024)
            )),
        ),
        good("good-3"),
        bad(
            "rejected",
            Some(format!(r#"{{"id":"rejected","n":{digits39}}}"#)),
        ),
        good("good-4"),
    ];
    let expected: HashMap<&str, &str> = HashMap::from([
        ("not-json", "invalid_json"),
        ("array", "not_an_object"),
        ("no-key", "missing_key"),
        ("mistyped-key", "key_type_mismatch"),
        ("tombstone", "empty_value"),
        ("too-large", "item_too_large"),
        ("rejected", "dynamodb_rejected"),
    ]);
    let produced = produce(&s.topic, records).await;
    let (code, summary) = s.spawn(true).wait(Duration::from_secs(120));
    let summary = summary.expect("summary");
    assert_eq!(code, Some(0), "{summary}");
    assert_eq!(summary["dead_lettered"], 7);

    let letters = read_dead_letters(&s.dlq, expected.len());
    assert_eq!(
        letters.len(),
        expected.len(),
        "every poison record dead-lettered once"
    );
    for l in &letters {
        let key = l.key.as_deref().expect("original key kept");
        assert_eq!(
            l.headers["ingest.error.reason"], expected[key],
            "{key}: {:?}",
            l.headers
        );
        assert!(!l.headers["ingest.error.detail"].is_empty());
        assert_eq!(l.headers["ingest.source.topic"], s.topic);
        assert_eq!(l.headers["ingest.source.partition"], "0");
        let at = produced.iter().find(|p| p.id == key).unwrap();
        assert_eq!(l.headers["ingest.source.offset"], at.offset.to_string());
    }
    let not_json = letters
        .iter()
        .find(|l| l.key.as_deref() == Some("not-json"))
        .unwrap();
    assert_eq!(
        not_json.value.as_deref(),
        Some(&b"this is not json"[..]),
        "original value kept"
    );
    let rejected = letters
        .iter()
        .find(|l| l.key.as_deref() == Some("rejected"))
        .unwrap();
    assert!(
        rejected.headers["ingest.error.detail"].contains("ValidationException"),
        "{:?}",
        rejected.headers
    );

    let items = scan(&dynamo().await, &s.table).await;
    let mut written: Vec<&String> = items.keys().collect();
    written.sort();
    assert_eq!(written, ["good-0", "good-1", "good-2", "good-3", "good-4"]);
    assert_eq!(
        s.committed(),
        s.end_offsets(),
        "poison did not block the partition"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_drains_in_flight_writes_and_commits_exactly_what_was_written() {
    let s = Setup::new(6, "").await;
    let produced = produce(&s.topic, ids(10_000)).await;
    let w = s.spawn(false);
    wait_written(&w, 1_000);
    w.signal("TERM");
    let logs = w.logs.clone();
    let (code, summary) = w.wait(Duration::from_secs(60));
    let summary = summary.expect("summary");
    assert_eq!(code, Some(0), "{summary}");
    assert_eq!(summary["exit"], "stopped");
    let drained = logs.lock().unwrap().iter().any(|v| v["event"] == "drained");
    assert!(drained, "drain logged");

    // Every record below the committed offsets is in the table (none committed
    // ahead of its write), and what was in flight was written and committed:
    // beyond the committed offsets there are at most the batches that were in
    // flight (a paced batch may overtake an abandoned earlier one; its records
    // are redelivered, not lost).
    let committed = s.committed();
    let client = dynamo().await;
    let present: HashSet<String> = scan(&client, &s.table).await.into_keys().collect();
    let below: HashSet<String> = produced
        .iter()
        .filter(|r| r.offset < committed[r.partition as usize])
        .map(|r| r.id.clone())
        .collect();
    assert!(below.len() < 10_000, "stopped mid-run");
    assert!(below.is_subset(&present), "a committed record is missing");
    let beyond = present.len() - below.len();
    assert!(
        beyond <= ingest::config::DynamoSettings::default().max_in_flight_batches * 25,
        "{beyond} records written beyond the committed offsets (max_in_flight_batches x 25)"
    );
    eprintln!(
        "drained: {} committed, {beyond} written beyond (redelivered on restart)",
        below.len()
    );
    assert_eq!(
        summary["items_written"].as_u64().unwrap() as usize,
        present.len()
    );

    let (code, _) = s.spawn(true).wait(Duration::from_secs(180));
    assert_eq!(code, Some(0));
    assert_eq!(count(&client, &s.table).await, 10_000);
    assert_eq!(s.committed(), s.end_offsets());
}

/// The partitions of a worker's latest assignment.
fn assigned(w: &Worker) -> Vec<String> {
    w.events("assigned")
        .last()
        .and_then(|v| {
            v.get("partitions")
                .and_then(Value::as_str)
                .map(str::to_string)
        })
        .map(|p| {
            p.split(',')
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

fn revoked_since_last_assign(w: &Worker) -> bool {
    let logs = w.logs.lock().unwrap();
    let last_assign = logs.iter().rposition(|v| v["event"] == "assigned");
    let last_revoke = logs.iter().rposition(|v| v["event"] == "revoked");
    matches!((last_assign, last_revoke), (Some(a), Some(r)) if r > a)
}

#[tokio::test(flavor = "multi_thread")]
async fn two_workers_in_one_group_split_partitions_and_write_everything() {
    let s = Setup::new(6, "").await;
    let a = s.spawn(false);
    let b = s.spawn(false);
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    loop {
        let (pa, pb) = (assigned(&a), assigned(&b));
        let split = !pa.is_empty() && !pb.is_empty() && pa.len() + pb.len() == 6;
        if split && !revoked_since_last_assign(&a) && !revoked_since_last_assign(&b) {
            let union: HashSet<&String> = pa.iter().chain(&pb).collect();
            assert_eq!(union.len(), 6, "disjoint assignments: {pa:?} / {pb:?}");
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "group never split: a={pa:?} b={pb:?}\nA:\n{}\nB:\n{}",
            a.dump_logs(),
            b.dump_logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    produce(&s.topic, ids(10_000)).await;
    let end = s.end_offsets();
    eventually(
        Duration::from_secs(180),
        "every offset committed",
        || async { s.committed() == end },
    )
    .await;
    a.signal("TERM");
    b.signal("TERM");
    let (ca, sa) = a.wait(Duration::from_secs(60));
    let (cb, sb) = b.wait(Duration::from_secs(60));
    assert_eq!((ca, cb), (Some(0), Some(0)));
    let (wa, wb) = (
        sa.unwrap()["items_written"].as_u64().unwrap(),
        sb.unwrap()["items_written"].as_u64().unwrap(),
    );
    assert!(wa > 0 && wb > 0, "both workers wrote: {wa} + {wb}");
    assert_eq!(wa + wb, 10_000, "together, each record once");
    assert_eq!(count(&dynamo().await, &s.table).await, 10_000);
}
