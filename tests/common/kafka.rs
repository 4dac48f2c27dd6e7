//! Kafka (tansu): topics, records to produce, committed and end offsets,
//! dead letters read back.

use super::*;

/// bench-pipeline's in-process broker when it runs on librdkafka's mock
/// (`BENCH_BROKER=mock`): the mock answers no CreateTopics, so topics are
/// made through its own API.
pub static MOCK_BROKER: std::sync::OnceLock<ingest::devbroker::DevBroker> =
    std::sync::OnceLock::new();

pub async fn create_topics(topics: &[(&str, i32)]) {
    if let Some(mock) = MOCK_BROKER.get() {
        for (t, p) in topics {
            mock.create_topic(t, *p)
                .expect("create topic on the mock broker");
        }
        return;
    }
    let topics: Vec<(String, i32)> = topics.iter().map(|(t, p)| (t.to_string(), *p)).collect();
    ingest::tools::create_topics(brokers(), &topics)
        .await
        .expect("create topics");
}

/// Where a produced record landed.
#[derive(Debug, Clone)]
pub struct Produced {
    pub id: String,
    pub partition: i32,
    pub offset: i64,
}

/// Produces (key, value) records; returns where each landed, in input order.
pub async fn produce(topic: &str, records: Vec<(String, Option<String>)>) -> Vec<Produced> {
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", brokers())
        .set("linger.ms", "5")
        .create()
        .unwrap();
    let mut futs = Vec::new();
    for (key, value) in &records {
        let mut rec = FutureRecord::<String, String>::to(topic).key(key);
        if let Some(v) = value {
            rec = rec.payload(v);
        }
        futs.push(
            producer
                .send_result(rec)
                .map_err(|(e, _)| e)
                .expect("enqueue"),
        );
    }
    let mut out = Vec::new();
    for ((key, _), fut) in records.into_iter().zip(futs) {
        let d = fut.await.unwrap().map_err(|(e, _)| e).expect("delivered");
        out.push(Produced {
            id: key,
            partition: d.partition,
            offset: d.offset,
        });
    }
    out
}

/// `n` records of mixed sizes, keyed "m00000"...: 1 WCU mostly, 2 WCU every
/// 5th, 5 WCU every 20th. Returns them with their total WCU.
pub fn mixed_sizes(n: usize) -> (Vec<(String, Option<String>)>, u64) {
    mixed_sizes_keyed(n, "m")
}

/// [`mixed_sizes`] keyed `{prefix}00000`... (records of several runs or jobs
/// in one table stay apart).
pub fn mixed_sizes_keyed(n: usize, prefix: &str) -> (Vec<(String, Option<String>)>, u64) {
    let mut wcu = 0;
    let records = (0..n)
        .map(|i| {
            let id = format!("{prefix}{i:05}");
            let (pad, cost) = mixed_size(i as u64);
            wcu += cost;
            let v = format!(r#"{{"id":"{id}","n":{i},"pad":"{}"}}"#, "x".repeat(pad));
            (id, Some(v))
        })
        .collect();
    (records, wcu)
}

/// The `i`th of the mixed sizes: (padding bytes, WCU). Every 20th item 5
/// WCU, every other 5th 2 WCU, the rest 1 WCU.
pub fn mixed_size(i: u64) -> (usize, u64) {
    if i % 20 == 0 {
        (4_500, 5)
    } else if i % 5 == 0 {
        (1_500, 2)
    } else {
        (100, 1)
    }
}

/// A record value with every JSON type, keyed by `id`.
pub fn mixed_record(id: &str, n: u64) -> String {
    format!(
        r#"{{"id":"{id}","n":{n},"price":{n}.123456789012345678,"big":123456789012345678901234567890,"ok":{},"none":null,"tags":["a",{n}],"nested":{{"k":"v{n}","deep":{{"b":true}}}}}}"#,
        n % 2 == 0
    )
}

/// Committed offsets of `group` for `topic`'s partitions (-1 when none).
pub fn committed(group: &str, topic: &str, partitions: i32) -> Vec<i64> {
    committed_by(
        &group_reader(group),
        topic,
        partitions,
        Duration::from_secs(10),
    )
    .expect("committed offsets")
}

/// A consumer of `group` that never joins it: it only reads its offsets.
pub fn group_reader(group: &str) -> BaseConsumer {
    ClientConfig::new()
        .set("bootstrap.servers", brokers())
        .set("group.id", group)
        .create()
        .unwrap()
}

/// The committed offsets `consumer`'s group holds for `topic` (-1 when
/// none); None when the broker does not answer in `timeout`.
pub fn committed_by(
    consumer: &BaseConsumer,
    topic: &str,
    partitions: i32,
    timeout: Duration,
) -> Option<Vec<i64>> {
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition(topic, p);
    }
    let got = consumer.committed_offsets(tpl, timeout).ok()?;
    let out = (0..partitions)
        .map(|p| match got.find_partition(topic, p).map(|e| e.offset()) {
            Some(Offset::Offset(o)) => o,
            _ => -1,
        })
        .collect();
    drop(got);
    Some(out)
}

/// End (high watermark) offsets of a topic's partitions.
pub fn end_offsets(topic: &str, partitions: i32) -> Vec<i64> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers())
        .create()
        .unwrap();
    (0..partitions)
        .map(|p| {
            consumer
                .fetch_watermarks(topic, p, Duration::from_secs(10))
                .unwrap()
                .1
        })
        .collect()
}

/// A dead letter as read back from the topic.
#[derive(Debug)]
pub struct DeadLetter {
    /// Its own offset in the dead-letter topic.
    pub offset: i64,
    pub key: Option<String>,
    pub value: Option<Vec<u8>>,
    pub headers: HashMap<String, String>,
}

impl DeadLetter {
    /// A numeric header (-1 when absent or not a number).
    pub fn number(&self, header: &str) -> i64 {
        self.headers
            .get(header)
            .and_then(|v| v.parse().ok())
            .unwrap_or(-1)
    }
}

/// Reads partition 0 of `topic` from its start until `enough` says so or
/// `within` passes.
fn read_letters(
    topic: &str,
    within: Duration,
    enough: impl Fn(&[DeadLetter]) -> bool,
) -> Vec<DeadLetter> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers())
        .set("group.id", unique("dlq-reader"))
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, Offset::Beginning)
        .unwrap();
    consumer.assign(&tpl).unwrap();
    let deadline = Instant::now() + within;
    let mut out = Vec::new();
    while !enough(&out) && Instant::now() < deadline {
        let Some(m) = consumer.poll(Duration::from_millis(200)) else {
            continue;
        };
        let m = m.expect("dead letter");
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        let headers = m
            .headers()
            .map(|h| {
                h.iter()
                    .map(|x| (x.key.to_string(), text(x.value.unwrap_or_default())))
                    .collect()
            })
            .unwrap_or_default();
        out.push(DeadLetter {
            offset: m.offset(),
            key: m.key().map(text),
            value: m.payload().map(<[u8]>::to_vec),
            headers,
        });
    }
    out
}

/// Reads `n` records from partition 0 of `topic` (gives up after 30 s).
pub fn read_dead_letters(topic: &str, n: usize) -> Vec<DeadLetter> {
    read_letters(topic, Duration::from_secs(30), |got| got.len() >= n)
}

/// Reads partition 0 of `topic` up to its end offset as of now (fails after
/// 120 s).
pub fn read_all_dead_letters(topic: &str) -> Vec<DeadLetter> {
    let end = end_offsets(topic, 1)[0];
    let letters = read_letters(topic, Duration::from_secs(120), |got| {
        got.last().is_some_and(|l| l.offset + 1 >= end) || end == 0
    });
    let next = letters.last().map_or(0, |l| l.offset + 1);
    assert!(next >= end, "{topic} not read to its end ({next} of {end})");
    letters
}

/// Every record's value on partition 0 of `topic`, from its start to its
/// end offset now (at most `timeout`).
pub fn read_values(topic: &str, timeout: Duration) -> Vec<String> {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers())
        .set("group.id", unique("reader"))
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let (low, high) = c
        .fetch_watermarks(topic, 0, Duration::from_secs(10))
        .expect("watermarks");
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, Offset::Offset(low))
        .unwrap();
    c.assign(&tpl).unwrap();
    let mut out = Vec::new();
    let deadline = Instant::now() + timeout;
    let mut next = low;
    while next < high && Instant::now() < deadline {
        if let Some(Ok(m)) = c.poll(Duration::from_millis(200)) {
            out.push(String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned());
            next = m.offset() + 1;
        }
    }
    out
}
