//! The pipeline under tokio's paused clock: one table that never answers
//! must not hold up another.

use std::collections::BTreeSet;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use super::*;
use crate::acks::Acks;
use crate::decode::{Item, KeyAttr, KeyMode, KeySchema, KeyType};
use crate::dlq::fake::FakeTopic;
use crate::dlq::DeadLetters;
use crate::sink::fake::id_of;
use crate::sink::tables::{Resolved, Table};
use crate::sink::{BatchOutcome, Sink, SinkFuture, TableInfo};
use crate::telemetry::Counters;
use crate::throttle::control::Control;
use crate::throttle::simple::ExponentialConfig;
use crate::throttle::StrategyConfig;

/// Table "slow" never answers; every other table writes everything.
#[derive(Debug, Default)]
struct OneTableHangs {
    written: Mutex<Vec<String>>,
}

impl Sink for OneTableHangs {
    fn batch_write<'a>(&'a self, table: &'a str, items: Vec<Item>) -> SinkFuture<'a, BatchOutcome> {
        Box::pin(async move {
            if table == "slow" {
                std::future::pending::<()>().await;
            }
            let mut written = self.written.lock();
            written.extend(items.iter().map(id_of));
            Ok(BatchOutcome::default())
        })
    }

    fn describe<'a>(&'a self, _table: &'a str) -> SinkFuture<'a, TableInfo> {
        unreachable!("routes are resolved by the test")
    }
}

fn route(table: &str) -> Resolved {
    let strategy = StrategyConfig::Exponential(ExponentialConfig {
        initial_ms: 100.0,
        max_ms: 1_000.0,
        multiplier: 2.0,
        jitter: 0.0,
    });
    Resolved {
        table: Arc::new(Table {
            name: table.into(),
            schema: KeySchema {
                hash: KeyAttr {
                    name: "id".into(),
                    kind: KeyType::S,
                },
                range: None,
            },
            control: Arc::new(Control::new(
                strategy.build(1),
                None,
                NonZeroU32::new(25).unwrap(),
            )),
        }),
        key_mode: KeyMode::Record,
    }
}

fn writer(sink: Arc<dyn Sink>, acks: &Arc<Acks>) -> Writer {
    Writer {
        sink,
        acks: acks.clone(),
        dlq: DeadLetters::with(Arc::new(FakeTopic::default()), "dlq"),
        counters: Arc::new(Counters::default()),
        attempt_timeout: Duration::from_secs(10),
    }
}

#[tokio::test(start_paused = true)]
async fn a_table_that_never_answers_holds_up_only_its_own_topics() {
    let sink = Arc::new(OneTableHangs::default());
    let acks = Arc::new(Acks::new());
    for topic in ["to-slow", "to-fast"] {
        acks.lock().assign(topic, 0, Some(0));
    }
    let writer = writer(sink.clone(), &acks);
    let routes: Routes = [
        ("to-slow".to_string(), route("slow")),
        ("to-fast".to_string(), route("fast")),
    ]
    .into();
    let congestion = Congestion::new(routes.iter().map(|(t, r)| (t.as_str(), &r.table.name)), 100);
    let pipeline = Pipeline::new(
        routes.clone(),
        writer,
        Duration::from_millis(50),
        1,
        7,
        &congestion,
    );
    let (tx, rx) = mpsc::channel(10);
    let running = tokio::spawn(pipeline.run(rx));
    let n = 300i64;
    let feeding = {
        let acks = acks.clone();
        tokio::spawn(async move {
            for offset in 0..n {
                for topic in ["to-slow", "to-fast"] {
                    let at = acks.tracked(topic, 0, offset);
                    let value = format!(r#"{{"id":"{topic}-{offset}"}}"#);
                    tx.send(Record::with_value(at, value.as_bytes()))
                        .await
                        .unwrap();
                }
            }
        })
    };
    let mut waited = Duration::ZERO;
    while acks.lock().watermark("to-fast", 0) != Some(n) {
        assert!(
            waited < Duration::from_secs(60),
            "the fast table is held up: {} of {n} written",
            sink.written.lock().len()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
        waited += Duration::from_millis(100);
    }
    feeding.await.unwrap();
    assert_eq!(sink.written.lock().len(), n as usize);
    assert_eq!(
        acks.lock().watermark("to-slow", 0),
        Some(0),
        "nothing of the slow table acked"
    );
    assert_eq!(
        congestion.congested_topics(),
        BTreeSet::from(["to-slow".to_string()]),
        "the source is told to pause only the slow table's topic"
    );
    assert!(congestion.table("slow").unwrap().queued() >= 100);
    running.abort();
}

/// Writes everything, each batch taking 100 ms, and keeps the order.
#[derive(Debug, Default)]
struct SlowInOrder {
    written: Mutex<Vec<String>>,
}

impl Sink for SlowInOrder {
    fn batch_write<'a>(
        &'a self,
        _table: &'a str,
        items: Vec<Item>,
    ) -> SinkFuture<'a, BatchOutcome> {
        Box::pin(async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            self.written.lock().extend(items.iter().map(id_of));
            Ok(BatchOutcome::default())
        })
    }

    fn describe<'a>(&'a self, _table: &'a str) -> SinkFuture<'a, TableInfo> {
        unreachable!("routes are resolved by the test")
    }
}

#[tokio::test(start_paused = true)]
async fn a_partition_with_more_waiting_is_taken_more_often_and_ends_with_the_others() {
    // Partition 0's 600 records arrive before partition 1's 200: in arrival
    // order partition 0 would be written first and partition 1 after it,
    // alone. Taken in proportion to what each has waiting, both end
    // together, as a batch job's partitions should.
    let sink = Arc::new(SlowInOrder::default());
    let acks = Arc::new(Acks::new());
    acks.lock().assign("t", 0, Some(0));
    acks.lock().assign("t", 1, Some(0));
    let writer = writer(sink.clone(), &acks);
    let routes: Routes = [("t".to_string(), route("table"))].into();
    let congestion = Congestion::new(
        routes.iter().map(|(t, r)| (t.as_str(), &r.table.name)),
        10_000,
    );
    let pipeline = Pipeline::new(routes, writer, Duration::from_millis(20), 1, 7, &congestion);
    let (tx, rx) = mpsc::channel(10);
    let running = tokio::spawn(pipeline.run(rx));
    for (partition, n) in [(0, 600), (1, 200)] {
        for offset in 0..n {
            let at = acks.tracked("t", partition, offset);
            let value = format!(r#"{{"id":"p{partition}-{offset}"}}"#);
            tx.send(Record::with_value(at, value.as_bytes()))
                .await
                .unwrap();
        }
    }
    drop(tx);
    running.await.unwrap().unwrap();
    let written = sink.written.lock().clone();
    assert_eq!(written.len(), 800);
    let last = |p: &str| written.iter().rposition(|id| id.starts_with(p)).unwrap();
    let first = |p: &str| written.iter().position(|id| id.starts_with(p)).unwrap();
    assert!(
        last("p0-") >= 760,
        "partition 0 ends with the job: {}",
        last("p0-")
    );
    assert!(last("p1-") >= 760, "partition 1 too: {}", last("p1-"));
    assert!(
        first("p1-") <= 50,
        "partition 1 is not held behind 0: {}",
        first("p1-")
    );
    // Within a partition, record order.
    for p in ["p0-", "p1-"] {
        let offsets: Vec<i64> = written
            .iter()
            .filter(|id| id.starts_with(p))
            .map(|id| id[3..].parse().unwrap())
            .collect();
        assert!(offsets.windows(2).all(|w| w[0] < w[1]), "{p} in order");
    }
}

#[tokio::test(start_paused = true)]
async fn records_of_a_few_keys_arriving_together_coalesce_into_one_write_per_key() {
    // A batch takes up to 25 items, and a later record of a key already in
    // it replaces the earlier one (one write, both acked). 100 records of 4
    // keys within the linger are 4 items, not a batch per 25 records.
    let sink = Arc::new(OneTableHangs::default());
    let acks = Arc::new(Acks::new());
    acks.lock().assign("t", 0, Some(0));
    let routes: Routes = [("t".to_string(), route("fast"))].into();
    let congestion = Congestion::new(
        routes.iter().map(|(t, r)| (t.as_str(), &r.table.name)),
        10_000,
    );
    let pipeline = Pipeline::new(
        routes,
        writer(sink.clone(), &acks),
        Duration::from_millis(20),
        8,
        7,
        &congestion,
    );
    let (tx, rx) = mpsc::channel(10);
    let running = tokio::spawn(pipeline.run(rx));
    for offset in 0..100 {
        let at = acks.tracked("t", 0, offset);
        let value = format!(r#"{{"id":"k{}","n":{offset}}}"#, offset % 4);
        tx.send(Record::with_value(at, value.as_bytes()))
            .await
            .unwrap();
    }
    drop(tx);
    running.await.unwrap().unwrap();
    assert_eq!(
        acks.lock().watermark("t", 0),
        Some(100),
        "every record acked"
    );
    let written = sink.written.lock().clone();
    assert_eq!(written.len(), 4, "one write per key: {written:?}");
}
