//! Helpers for the integration tests: real services only.
//!
//! The tests need LocalStack on 127.0.0.1:4566 and a Kafka broker (tansu) on
//! 127.0.0.1:9092, both started by `make test` (localstack/start.sh and
//! localstack/tansu.sh). Every test uses its own random topic, table and group.
#![allow(dead_code)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, KeySchemaElement, KeyType, ScalarAttributeType,
};
use aws_sdk_dynamodb::Client;
use rand::Rng;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{Offset, TopicPartitionList};
use serde_json::Value;

pub const BROKERS: &str = "127.0.0.1:9092";
pub const DYNAMODB: &str = "http://127.0.0.1:4566";

/// Fails fast, with the fix, when the stack is not up.
pub fn require_stack() {
    for (what, port, how) in [
        ("LocalStack", 4566, "bash localstack/start.sh"),
        ("tansu", 9092, "bash localstack/tansu.sh"),
    ] {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            panic!("{what} is not listening on 127.0.0.1:{port}: run `make test` (or `{how}`)");
        }
    }
}

pub fn unique(prefix: &str) -> String {
    let n: u64 = rand::rng().random();
    format!("{prefix}-{n:016x}")
}

pub async fn dynamo() -> Client {
    let conf = aws_sdk_dynamodb::Config::builder()
        .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
        .region(aws_sdk_dynamodb::config::Region::new("us-east-1"))
        .endpoint_url(DYNAMODB)
        .credentials_provider(aws_sdk_dynamodb::config::Credentials::new(
            "test", "test", None, None, "tests",
        ))
        .build();
    Client::from_conf(conf)
}

/// Creates an on-demand table keyed by `id` (S), optionally with a sort key
/// `sk` (N).
pub async fn create_table(client: &Client, name: &str, sort_key: bool) {
    create_table_with(client, name, sort_key, None).await
}

/// Creates a table keyed by `id` (S) (and `sk` (N)), with provisioned write
/// capacity `wcu`, or on demand.
pub async fn create_table_with(client: &Client, name: &str, sort_key: bool, wcu: Option<i64>) {
    let mut req = client
        .create_table()
        .table_name(name)
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name("id")
                .key_type(KeyType::Hash)
                .build()
                .unwrap(),
        )
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name("id")
                .attribute_type(ScalarAttributeType::S)
                .build()
                .unwrap(),
        )
        .billing_mode(aws_sdk_dynamodb::types::BillingMode::PayPerRequest);
    if let Some(w) = wcu {
        req = req
            .billing_mode(aws_sdk_dynamodb::types::BillingMode::Provisioned)
            .provisioned_throughput(
                aws_sdk_dynamodb::types::ProvisionedThroughput::builder()
                    .read_capacity_units(5)
                    .write_capacity_units(w)
                    .build()
                    .unwrap(),
            );
    }
    if sort_key {
        req = req
            .key_schema(
                KeySchemaElement::builder()
                    .attribute_name("sk")
                    .key_type(KeyType::Range)
                    .build()
                    .unwrap(),
            )
            .attribute_definitions(
                AttributeDefinition::builder()
                    .attribute_name("sk")
                    .attribute_type(ScalarAttributeType::N)
                    .build()
                    .unwrap(),
            );
    }
    req.send().await.expect("create table");
}

/// Every item of a table, by `id`.
pub async fn scan(
    client: &Client,
    table: &str,
) -> HashMap<String, HashMap<String, AttributeValue>> {
    let mut out = HashMap::new();
    let mut start = None;
    loop {
        let page = client
            .scan()
            .table_name(table)
            .set_exclusive_start_key(start)
            .send()
            .await
            .expect("scan");
        for item in page.items() {
            let id = item["id"].as_s().expect("id is S").clone();
            out.insert(id, item.clone());
        }
        start = page.last_evaluated_key().cloned();
        if start.is_none() {
            return out;
        }
    }
}

pub async fn count(client: &Client, table: &str) -> usize {
    let mut n = 0;
    let mut start = None;
    loop {
        let page = client
            .scan()
            .table_name(table)
            .select(aws_sdk_dynamodb::types::Select::Count)
            .set_exclusive_start_key(start)
            .send()
            .await
            .expect("scan count");
        n += page.count() as usize;
        start = page.last_evaluated_key().cloned();
        if start.is_none() {
            return n;
        }
    }
}

pub async fn create_topics(topics: &[(&str, i32)]) {
    let topics: Vec<(String, i32)> = topics.iter().map(|(t, p)| (t.to_string(), *p)).collect();
    ingest::tools::create_topics(BROKERS, &topics)
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
        .set("bootstrap.servers", BROKERS)
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
    let mut wcu = 0;
    let records = (0..n)
        .map(|i| {
            let id = format!("m{i:05}");
            let (pad, cost) = if i % 20 == 0 {
                (4_500, 5)
            } else if i % 5 == 0 {
                (1_500, 2)
            } else {
                (100, 1)
            };
            wcu += cost;
            let v = format!(r#"{{"id":"{id}","n":{i},"pad":"{}"}}"#, "x".repeat(pad));
            (id, Some(v))
        })
        .collect();
    (records, wcu)
}

/// One HTTP/1.1 GET; returns the status code and the body.
pub fn http_get(addr: &str, path: &str) -> std::io::Result<(u16, String)> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut text = String::new();
    s.read_to_string(&mut text)?;
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    Ok((status, body.to_string()))
}

/// The value of one sample (`name{labels}`, exactly as rendered) in a
/// Prometheus text exposition.
pub fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().filter(|l| !l.starts_with('#')).find_map(|l| {
        l.strip_prefix(series)?
            .strip_prefix(' ')?
            .trim()
            .parse()
            .ok()
    })
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
        .set("bootstrap.servers", BROKERS)
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
        .set("bootstrap.servers", BROKERS)
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
        .set("bootstrap.servers", BROKERS)
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

/// One test's worker setup: topic, table, group, dead-letter topic, config file.
pub struct Setup {
    pub topic: String,
    pub table: String,
    pub group: String,
    pub dlq: String,
    pub partitions: i32,
    pub config: PathBuf,
}

impl Setup {
    /// Creates the topics and an on-demand table, writes a config file.
    pub async fn new(partitions: i32, extra_route: &str) -> Setup {
        Setup::build(partitions, extra_route, None).await
    }

    /// Like `new`, with a table of `wcu` provisioned write capacity (None: on
    /// demand).
    pub async fn build(partitions: i32, extra_route: &str, wcu: Option<i64>) -> Setup {
        require_stack();
        let s = Setup {
            topic: unique("in"),
            table: unique("tbl"),
            group: unique("grp"),
            dlq: unique("dlq"),
            partitions,
            config: std::env::temp_dir().join(format!("{}.toml", unique("ingest-test"))),
        };
        create_topics(&[(&s.topic, partitions), (&s.dlq, 1)]).await;
        create_table_with(
            &dynamo().await,
            &s.table,
            extra_route.contains("sort_key"),
            wcu,
        )
        .await;
        let toml = format!(
            r#"
[kafka]
brokers = "{BROKERS}"
group_id = "{group}"
dead_letter_topic = "{dlq}"
commit_interval_ms = 300
[kafka.properties]
"session.timeout.ms" = "6000"
"heartbeat.interval.ms" = "500"
[dynamodb]
endpoint_url = "{DYNAMODB}"
region = "us-east-1"
[[route]]
topic = "{topic}"
table = "{table}"
{extra_route}
[pipeline]
drain_timeout_s = 30
[log]
format = "json"
level = "info"
"#,
            group = s.group,
            dlq = s.dlq,
            topic = s.topic,
            table = s.table,
        );
        std::fs::write(&s.config, toml).unwrap();
        s
    }

    /// Starts `ingest run` on this setup.
    pub fn spawn(&self, until_caught_up: bool) -> Worker {
        self.spawn_with_env(until_caught_up, &[])
    }

    /// Starts `ingest run` with extra environment variables (config overrides).
    pub fn spawn_with_env(&self, until_caught_up: bool, env: &[(&str, &str)]) -> Worker {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_ingest"));
        cmd.arg("run").arg("--config").arg(&self.config);
        if until_caught_up {
            cmd.arg("--until-caught-up");
        }
        cmd.envs(env.iter().copied());
        Worker::start(cmd)
    }

    pub fn committed(&self) -> Vec<i64> {
        committed(&self.group, &self.topic, self.partitions)
    }

    /// Points the worker at another DynamoDB endpoint (a proxy).
    pub fn use_endpoint(&self, endpoint: &str) {
        let text = std::fs::read_to_string(&self.config).unwrap();
        std::fs::write(&self.config, text.replace(DYNAMODB, endpoint)).unwrap();
    }

    /// Sets one of the `[kafka.properties]` the setup wrote (e.g. the
    /// session timeout).
    pub fn set_kafka_property(&self, key: &str, value: &str) {
        let text = std::fs::read_to_string(&self.config).unwrap();
        let line = text
            .lines()
            .find(|l| l.starts_with(&format!("\"{key}\" =")))
            .unwrap_or_else(|| panic!("{key} is not among the setup's kafka.properties"))
            .to_string();
        let text = text.replace(&line, &format!("\"{key}\" = \"{value}\""));
        std::fs::write(&self.config, text).unwrap();
    }

    /// Sets config keys by appending a section (e.g. "[throttle]\n...").
    pub fn append_config(&self, toml: &str) {
        let mut text = std::fs::read_to_string(&self.config).unwrap();
        text.push('\n');
        text.push_str(toml);
        std::fs::write(&self.config, text).unwrap();
    }

    pub fn end_offsets(&self) -> Vec<i64> {
        end_offsets(&self.topic, self.partitions)
    }
}

/// A running `ingest` process; its stderr (JSON logs) is collected.
pub struct Worker {
    pub child: Child,
    pub logs: Arc<Mutex<Vec<Value>>>,
    stdout: Option<std::process::ChildStdout>,
}

impl Worker {
    pub fn start(mut cmd: Command) -> Worker {
        for (k, v) in [
            ("AWS_ACCESS_KEY_ID", "test"),
            ("AWS_SECRET_ACCESS_KEY", "test"),
            ("AWS_REGION", "us-east-1"),
        ] {
            // The test's own credentials, if it set some, win.
            if !cmd.get_envs().any(|(key, _)| key == k) {
                cmd.env(k, v);
            }
        }
        cmd.env_remove("RUST_LOG")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn ingest");
        let logs = Arc::new(Mutex::new(Vec::new()));
        let stderr = child.stderr.take().unwrap();
        let sink = logs.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let v = serde_json::from_str(&line).unwrap_or(Value::String(line));
                sink.lock().unwrap().push(v);
            }
        });
        let stdout = child.stdout.take();
        Worker {
            child,
            logs,
            stdout,
        }
    }

    /// The log lines with this message.
    pub fn logged(&self, message: &str) -> Vec<Value> {
        self.logs
            .lock()
            .unwrap()
            .iter()
            .filter(|v| v.get("message").and_then(Value::as_str) == Some(message))
            .cloned()
            .collect()
    }

    pub fn signal(&self, sig: &str) {
        let status = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(self.child.id().to_string())
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// Waits for the exit (at most `timeout`); returns the code and the
    /// summary JSON the worker printed on stdout, if any.
    pub fn wait(mut self, timeout: Duration) -> (Option<i32>, Option<Value>) {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                let mut out = String::new();
                if let Some(mut s) = self.stdout.take() {
                    use std::io::Read;
                    s.read_to_string(&mut out).unwrap();
                }
                let summary = out.lines().rev().find_map(|l| serde_json::from_str(l).ok());
                return (status.code(), summary);
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let logs = self.logs.lock().unwrap();
                let tail: Vec<String> = logs.iter().rev().take(20).map(|v| v.to_string()).collect();
                panic!(
                    "worker did not exit within {timeout:?}; last logs:\n{}",
                    tail.join("\n")
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn dump_logs(&self) -> String {
        self.logs
            .lock()
            .unwrap()
            .iter()
            .map(|v| v.to_string())
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl Drop for Worker {
    /// A test that fails leaves no worker behind.
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Polls `f` until it returns true or `timeout` passes.
pub async fn eventually<F, Fut>(timeout: Duration, what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    while !f().await {
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Every record below its partition's committed offset is in `table`.
pub fn assert_committed_were_written(
    produced: &[Produced],
    committed: &[i64],
    table: &std::collections::HashSet<String>,
) {
    for r in produced {
        if r.offset < committed[r.partition as usize] {
            assert!(
                table.contains(&r.id),
                "offset {} of partition {} is committed but record {} is not in the table",
                r.offset,
                r.partition,
                r.id
            );
        }
    }
}

/// A free loopback port.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// An `ingest throttle-proxy` subprocess in front of LocalStack.
pub struct ThrottleProxy {
    child: Child,
    pub addr: String,
}

impl ThrottleProxy {
    /// Starts the proxy with extra arguments (e.g. `--schedule`).
    pub fn start(args: &[&str]) -> ThrottleProxy {
        ThrottleProxy::start_on(&format!("127.0.0.1:{}", free_port()), args)
    }

    /// Starts the proxy on a given address.
    pub fn start_on(addr: &str, args: &[&str]) -> ThrottleProxy {
        let addr = addr.to_string();
        let child = Command::new(env!("CARGO_BIN_EXE_ingest"))
            .args(["throttle-proxy", "--listen", &addr, "--upstream", DYNAMODB])
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn proxy");
        // Owned from here on: Drop kills and reaps it.
        let proxy = ThrottleProxy { child, addr };
        for _ in 0..100 {
            if std::net::TcpStream::connect(&proxy.addr).is_ok() {
                return proxy;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("throttle proxy did not listen on {}", proxy.addr);
    }

    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// One admin request; returns the JSON body.
    pub fn admin(&self, method: &str, path: &str) -> Value {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(&self.addr).unwrap();
        write!(s, "{method} {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nContent-Length: 0\r\n\r\n", self.addr).unwrap();
        let mut text = String::new();
        s.read_to_string(&mut text).unwrap();
        let body = text.split("\r\n\r\n").nth(1).unwrap_or("");
        serde_json::from_str(body).unwrap_or_else(|e| panic!("proxy answered {text:?}: {e}"))
    }

    /// The proxy's counters for one table.
    pub fn stats(&self, table: &str) -> Value {
        self.admin("GET", "/_proxy/stats")["tables"][table].clone()
    }
}

impl Drop for ThrottleProxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
