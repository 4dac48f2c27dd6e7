//! Key handling and DynamoDB outages, end to end on tansu + LocalStack.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use common::*;
use tokio::net::{TcpListener, TcpStream};

#[tokio::test(flavor = "multi_thread")]
async fn kafka_key_mode_makes_redelivery_overwrite_not_duplicate() {
    let s = Setup::new(
        2,
        "key_mode = \"kafka\"\npartition_key = \"id\"\nsort_key = \"sk\"",
    )
    .await;
    let records = (0..1_000)
        .map(|i| (format!("k{i}"), Some(format!(r#"{{"v":{i}}}"#))))
        .collect();
    let produced = produce(&s.topic, records).await;
    let (code, _) = s.spawn(true).wait(Duration::from_secs(120));
    assert_eq!(code, Some(0));

    // Redeliver everything: a new group reads the topic from the start.
    let text = std::fs::read_to_string(&s.config).unwrap();
    std::fs::write(&s.config, text.replace(&s.group, &unique("grp"))).unwrap();
    let (code, summary) = s.spawn(true).wait(Duration::from_secs(120));
    assert_eq!(code, Some(0));
    let summary = summary.unwrap();
    // Once more each, unless a broker stall expired the session (then
    // what followed the last commit is written again, as at-least-once allows).
    let lost = summary["assignments_lost"]
        .as_u64()
        .expect("assignments_lost");
    if lost == 0 {
        assert_eq!(summary["items_written"], 1_000, "everything written twice");
    }

    let client = dynamo().await;
    let mut items = Vec::new();
    let mut start = None;
    loop {
        let page = client
            .scan()
            .table_name(&s.table)
            .set_exclusive_start_key(start)
            .send()
            .await
            .unwrap();
        items.extend(page.items().iter().cloned());
        start = page.last_evaluated_key().cloned();
        if start.is_none() {
            break;
        }
    }
    assert_eq!(items.len(), 1_000, "overwritten, not duplicated");
    let first = &produced[0];
    let item = items
        .iter()
        .find(|i| {
            i["sk"] == AttributeValue::N(first.offset.to_string())
                && i["id"] == AttributeValue::S(format!("{}/{}", s.topic, first.partition))
        })
        .expect("item keyed by topic/partition + offset");
    assert_eq!(item["v"], AttributeValue::N("0".into()));
}

/// The benches' other writers loop until told to stop, on a client whose
/// SDK never retries (`dynamo_without_retries`). Against a server that
/// accepts connections and never answers, its call gives up by itself (10
/// s) instead of hanging the writer's thread and the bench that joins it.
/// The 60 s bound is only how long a hang takes to fail the test.
#[tokio::test]
async fn a_call_to_a_server_that_never_answers_gives_up() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((conn, _)) = listener.accept().await {
            held.push(conn);
        }
    });
    let client = dynamo_without_retries(&format!("http://{addr}"));
    let call = client.describe_table().table_name("t").send();
    let answer = tokio::time::timeout(Duration::from_secs(60), call)
        .await
        .expect("the call hung: no timeout");
    assert!(answer.is_err(), "a server that never answers: {answer:?}");
}

/// A TCP proxy to LocalStack that delays every request chunk by a random
/// 0-60 ms, so concurrent requests can overtake one another.
async fn jittery_proxy() -> String {
    use rand::Rng;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (client, _) = listener.accept().await.unwrap();
            tokio::spawn(async move {
                let Ok(server) = TcpStream::connect("127.0.0.1:4566").await else {
                    return;
                };
                let (mut cr, mut cw) = client.into_split();
                let (mut sr, mut sw) = server.into_split();
                tokio::spawn(async move {
                    let _ = tokio::io::copy(&mut sr, &mut cw).await;
                });
                let mut buf = vec![0u8; 64 * 1024];
                loop {
                    let n = match cr.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => n,
                    };
                    let delay = rand::rng().random_range(0..60);
                    tokio::time::sleep(Duration::from_millis(delay)).await;
                    if sw.write_all(&buf[..n]).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    format!("http://{addr}")
}

#[tokio::test(flavor = "multi_thread")]
async fn the_latest_record_of_a_key_wins() {
    let s = Setup::new(1, "").await;
    // Requests reach DynamoDB out of order unless the worker orders them.
    let endpoint = jittery_proxy().await;
    let text = std::fs::read_to_string(&s.config).unwrap();
    std::fs::write(&s.config, text.replace(DYNAMODB, &endpoint)).unwrap();
    // 50 keys, 60 versions each, interleaved: a key recurs every other batch
    // of 25, so batches in flight share keys.
    let records = (0..3_000)
        .map(|i| {
            let key = format!("key-{}", i % 50);
            let v = format!(r#"{{"id":"{key}","version":{i}}}"#);
            (key, Some(v))
        })
        .collect();
    produce(&s.topic, records).await;
    let (code, summary) = s.spawn(true).wait(Duration::from_secs(120));
    assert_eq!(code, Some(0));
    assert_eq!(summary.unwrap()["items_written"], 3_000);
    let items = scan(&dynamo().await, &s.table).await;
    assert_eq!(items.len(), 50);
    for k in 0..50 {
        let last = 2_950 + k;
        assert_eq!(
            items[&format!("key-{k}")]["version"],
            AttributeValue::N(last.to_string()),
            "key-{k}"
        );
    }
}

/// A TCP proxy to LocalStack that the test can cut (refusing and dropping
/// every connection) and restore.
async fn cuttable_proxy(up: Arc<AtomicBool>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (mut client, _) = listener.accept().await.unwrap();
            let up = up.clone();
            tokio::spawn(async move {
                if !up.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(mut server) = TcpStream::connect("127.0.0.1:4566").await else {
                    return;
                };
                let copy = tokio::io::copy_bidirectional(&mut client, &mut server);
                tokio::pin!(copy);
                loop {
                    tokio::select! {
                        _ = &mut copy => return,
                        _ = tokio::time::sleep(Duration::from_millis(50)) => {
                            if !up.load(Ordering::SeqCst) { return; }
                        }
                    }
                }
            });
        }
    });
    format!("http://{addr}")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_dynamodb_outage_mid_run_is_retried_and_loses_nothing() {
    let s = Setup::new(3, "").await;
    let up = Arc::new(AtomicBool::new(true));
    let endpoint = cuttable_proxy(up.clone()).await;
    let text = std::fs::read_to_string(&s.config).unwrap();
    std::fs::write(&s.config, text.replace(DYNAMODB, &endpoint)).unwrap();
    let records: Vec<_> = (0..6_000)
        .map(|i| (format!("r{i}"), Some(mixed_record(&format!("r{i}"), i))))
        .collect();
    produce(&s.topic, records).await;

    let w = s.spawn(true);
    eventually(Duration::from_secs(60), "a first commit", || async {
        !w.events("commit").is_empty()
    })
    .await;
    up.store(false, Ordering::SeqCst);
    eventually(Duration::from_secs(60), "three write retries", || async {
        w.events("write_retry").len() >= 3
    })
    .await;
    // Writes answered just before the cut are committed within an interval.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let during = s.committed();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        s.committed(),
        during,
        "nothing committed while DynamoDB is unreachable"
    );
    up.store(true, Ordering::SeqCst);

    let logs = w.logs.clone();
    let (code, summary) = w.wait(Duration::from_secs(180));
    assert_eq!(code, Some(0), "{summary:?}");
    let summary = summary.unwrap();
    assert!(
        summary["retryable_errors"].as_u64().unwrap() >= 3,
        "{summary}"
    );
    assert_eq!(
        summary["dead_lettered"], 0,
        "transient errors are never dead-lettered"
    );
    let retried = logs
        .lock()
        .unwrap()
        .iter()
        .find(|v| v["event"] == "write_retry")
        .cloned()
        .unwrap();
    assert!(
        retried["error"].as_str().unwrap().contains(&endpoint),
        "the error names the endpoint: {retried}"
    );
    assert_eq!(count(&dynamo().await, &s.table).await, 6_000);
    assert_eq!(s.committed(), s.end_offsets());
}

/// Records keyed and valued "{prefix}{i}" (the item's `id`).
fn ids(prefix: &str, n: usize) -> Vec<(String, Option<String>)> {
    (0..n)
        .map(|i| {
            let id = format!("{prefix}{i}");
            let value = format!(r#"{{"id":"{id}","pad":"{}"}}"#, "x".repeat(200));
            (id, Some(value))
        })
        .collect()
}

/// A table provisioned at 1 WCU/s (the worker paces it to that) holds up only
/// the partitions that feed it: the pipeline queues per table and the source
/// pauses the slow table's partitions, while another table's topic is written
/// and committed to its end. Before, one table waiting for a write slot held
/// every table's records.
#[tokio::test(flavor = "multi_thread")]
async fn a_slow_table_holds_up_only_its_own_partitions() {
    let s = Setup::build(2, "", Some(1)).await;
    let (fast_topic, fast_table) = (unique("in"), unique("tbl"));
    create_topics(&[(&fast_topic, 2)]).await;
    let client = dynamo().await;
    create_table(&client, &fast_table, false).await;
    s.append_config(&format!(
        "[[route]]\ntopic = \"{fast_topic}\"\ntable = \"{fast_table}\"\n"
    ));
    let slow = produce(&s.topic, ids("slow-", 600)).await;
    produce(&fast_topic, ids("fast-", 3_000)).await;
    let fast_end = end_offsets(&fast_topic, 2);
    // A short queue per table, so the slow one is congested and paused.
    let worker = s.spawn_with_env(
        false,
        &[
            ("INGEST__PIPELINE__MAX_BUFFERED_RECORDS", "100"),
            ("INGEST__PIPELINE__DRAIN_TIMEOUT_S", "15"),
        ],
    );
    eventually(
        Duration::from_secs(120),
        "the fast table written and its topic committed to the end",
        || async {
            count(&client, &fast_table).await == 3_000
                && committed(&s.group, &fast_topic, 2) == fast_end
        },
    )
    .await;
    let written = scan(&client, &s.table).await;
    assert!(
        written.len() < 300,
        "the slow table is paced at 1 WCU/s, yet {} of 600 are written",
        written.len()
    );
    worker.signal("TERM");
    let (code, _) = worker.wait(Duration::from_secs(60));
    assert!(matches!(code, Some(0) | Some(3)), "exit {code:?}");
    let written: std::collections::HashSet<String> =
        scan(&client, &s.table).await.into_keys().collect();
    assert_committed_were_written(&slow, &s.committed(), &written);
}

/// A worker frozen past its group session (a stopped container, a paused VM,
/// a stall of the host) wakes to find its assignment lost: it commits nothing
/// for those partitions, counts it (`assignments_lost`), rejoins, and every
/// record is written, none committed ahead of its write.
#[tokio::test(flavor = "multi_thread")]
async fn a_worker_frozen_past_its_session_rejoins_and_loses_nothing() {
    let s = Setup::build(2, "", Some(100)).await;
    let proxy = ThrottleProxy::start(&[]);
    s.use_endpoint(&proxy.endpoint());
    let produced = produce(&s.topic, ids("frozen-", 1_500)).await;
    let client = dynamo().await;
    let worker = s.spawn(true);
    eventually(Duration::from_secs(60), "the worker writing", || async {
        count(&client, &s.table).await >= 200
    })
    .await;
    worker.signal("STOP");
    // Frozen for longer than the setup's 6 s session.
    let committed_when_frozen = s.committed();
    tokio::time::sleep(Duration::from_secs(9)).await;
    worker.signal("CONT");
    eventually(
        Duration::from_secs(120),
        "commits after the wake",
        || async {
            let now = s.committed();
            let written: std::collections::HashSet<String> =
                scan(&client, &s.table).await.into_keys().collect();
            assert_committed_were_written(&produced, &now, &written);
            now != committed_when_frozen
        },
    )
    .await;
    let (code, summary) = worker.wait(Duration::from_secs(120));
    let summary = summary.expect("summary");
    assert_eq!(code, Some(0), "{summary}");
    assert!(
        summary["assignments_lost"].as_u64().unwrap() >= 1,
        "the expired session is counted: {summary}"
    );
    assert_eq!(count(&client, &s.table).await, 1_500);
    assert_eq!(s.committed(), s.end_offsets());
}
