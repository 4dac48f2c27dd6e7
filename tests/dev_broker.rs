//! Fast pipeline tests on the embedded dev broker (librdkafka's mock cluster,
//! in-process, behind the fixed-port forwarder `make run` uses), writing to
//! LocalStack. The worker runs in-process through the library.

mod common;

use std::time::Duration;

use common::*;
use ingest::config::Settings;
use ingest::devbroker::{serve, DevBroker};
use ingest::source::SourceExit;
use tokio_util::sync::CancellationToken;

fn settings(brokers: &str, group: &str, topic: &str, table: &str) -> Settings {
    let toml = format!(
        r#"
[kafka]
brokers = "{brokers}"
group_id = "{group}"
dead_letter_topic = "dead"
commit_interval_ms = 200
[kafka.properties]
"session.timeout.ms" = "6000"
[dynamodb]
endpoint_url = "{DYNAMODB}"
region = "us-east-1"
[[route]]
topic = "{topic}"
table = "{table}"
"#
    );
    Settings::from_toml(&toml, "test", Vec::new()).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_dev_broker_carries_a_batch_job_end_to_end() {
    let Served {
        broker,
        addr,
        stop,
        serving,
    } = served(4).await;

    let table = unique("dev");
    create_table(&dynamo().await, &table, false).await;
    let values = (0..2_000).map(|i| (None, ingest::tools::sample_record(i)));
    assert_eq!(
        ingest::tools::produce(&addr, "orders", values)
            .await
            .unwrap(),
        2_000
    );

    let group = unique("grp");
    let run = ingest::worker::run(
        settings(&addr, &group, "orders", &table),
        true,
        CancellationToken::new(),
    );
    let ingest::worker::Outcome {
        exit,
        totals,
        tables,
        ..
    } = tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .expect("finishes")
        .unwrap();
    assert_eq!(exit, SourceExit::CaughtUp);
    assert_eq!(totals.records_consumed, 2_000);
    assert_eq!(totals.items_written, 2_000);
    assert_eq!(count(&dynamo().await, &table).await, 2_000);
    assert_eq!(tables.len(), 1);
    assert_eq!(
        tables[0].control.strategy, "adaptive",
        "the default strategy"
    );

    // Resume from the committed offsets: nothing left to do.
    let run = ingest::worker::run(
        settings(&addr, &group, "orders", &table),
        true,
        CancellationToken::new(),
    );
    let outcome = tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(outcome.totals.records_consumed, 0);

    // A worker that can never join its group (the coordinator fails every
    // JoinGroup, as a rebalance that never completes leaves one with no
    // partitions) still leaves once the group's job is done: the group's
    // committed offsets, read off the poll loop, are at the end.
    fail_every_join(&broker);
    let outcome = batch_within(
        settings(&addr, &group, "orders", &table),
        Duration::from_secs(60),
        "a worker without partitions did not leave when the group was done",
    )
    .await;
    assert_eq!(outcome.exit, SourceExit::CaughtUp);
    assert_eq!(outcome.totals.records_consumed, 0);

    stop.cancel();
    serving.await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worker_never_given_partitions_leaves_saying_work_is_left() {
    // One revoked and never assigned again (a coordinator that does not
    // complete its rebalance for it), or never assigned at all, used to
    // rejoin every 90 s for ever in batch mode while the group was not
    // seen done. Now, after a rejoin and a drain deadline more, it leaves
    // with exit 3: the group's partitions are behind and nobody moves them.
    let Served {
        broker,
        addr,
        stop,
        serving,
    } = served(2).await;
    let table = unique("idle");
    create_table(&dynamo().await, &table, false).await;
    let values = (0..50).map(|i| (None, ingest::tools::sample_record(i)));
    ingest::tools::produce(&addr, "orders", values)
        .await
        .unwrap();

    fail_every_join(&broker);
    let mut s = settings(&addr, &unique("grp"), "orders", &table);
    s.pipeline.drain_timeout = Duration::from_secs(1);
    let started = std::time::Instant::now();
    let outcome = batch_within(
        s,
        Duration::from_secs(150),
        "a worker never given partitions did not leave",
    )
    .await;
    assert_eq!(outcome.exit, SourceExit::WorkLeft, "work is left");
    assert_eq!(outcome.totals.records_consumed, 0);
    assert!(
        started.elapsed() >= Duration::from_secs(90),
        "it tried a rejoin first: left after {:?}",
        started.elapsed()
    );
    stop.cancel();
    serving.await.unwrap();
}

/// The coordinator fails every JoinGroup (API key 11) from now on, as a
/// rebalance that never completes leaves a member with no partitions.
fn fail_every_join(broker: &DevBroker) {
    broker.fail_requests(
        11,
        rdkafka_sys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_COORDINATOR_NOT_AVAILABLE,
        100_000,
    );
}

/// Runs a batch worker; stops it and fails with `what` if it is still
/// running after `limit`.
async fn batch_within(settings: Settings, limit: Duration, what: &str) -> ingest::worker::Outcome {
    let halt = CancellationToken::new();
    let run = ingest::worker::run(settings, true, halt.clone());
    tokio::pin!(run);
    tokio::select! {
        outcome = &mut run => outcome.unwrap(),
        _ = tokio::time::sleep(limit) => {
            halt.cancel();
            let exit = run.await.map(|o| o.exit);
            panic!("{what}: {exit:?}");
        }
    }
}

/// The dev broker with topics "orders" (`partitions`) and "dead", served
/// behind the fixed-port forwarder; LocalStack's test credentials set.
struct Served {
    broker: std::sync::Arc<DevBroker>,
    addr: String,
    stop: CancellationToken,
    serving: tokio::task::JoinHandle<()>,
}

async fn served(partitions: i32) -> Served {
    require_stack();
    std::env::set_var("AWS_ACCESS_KEY_ID", "test");
    std::env::set_var("AWS_SECRET_ACCESS_KEY", "test");
    let broker = DevBroker::start().unwrap();
    broker.create_topic("orders", partitions).unwrap();
    broker.create_topic("dead", 1).unwrap();
    let addr = format!("127.0.0.1:{}", free_port());
    let stop = CancellationToken::new();
    let broker = std::sync::Arc::new(broker);
    let serving = {
        let (addr, stop, broker) = (addr.parse().unwrap(), stop.clone(), broker.clone());
        tokio::spawn(async move { serve(&broker, addr, stop).await.unwrap() })
    };
    wait_for_port(&addr).await;
    Served {
        broker,
        addr,
        stop,
        serving,
    }
}

async fn wait_for_port(addr: &str) {
    for _ in 0..100 {
        if tokio::net::TcpStream::connect(addr).await.is_ok() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("dev broker did not listen on {addr}");
}
