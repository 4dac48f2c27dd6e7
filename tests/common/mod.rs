//! Helpers for the integration tests: real services only.
//!
//! The tests need LocalStack on 127.0.0.1:4566 and a Kafka broker (tansu) on
//! 127.0.0.1:9092, both started by `make test` (localstack/start.sh and
//! localstack/tansu.sh). Every test uses its own random topic, table and group.
#![allow(dead_code, unused_imports)]

mod dynamo;
mod kafka;
mod process;
mod proxy;

pub use dynamo::*;
pub use kafka::*;
pub use process::*;
pub use proxy::*;

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

/// The broker the tests and benches use: tansu on 127.0.0.1:9092, or
/// INGEST_TEST_BROKERS (bench-pipeline points it at a broker of its own:
/// a fresh tansu, or librdkafka's mock in its own process).
pub fn brokers() -> &'static str {
    static BROKERS: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    BROKERS.get_or_init(|| {
        if let Some(mock) = MOCK_BROKER.get() {
            return mock.bootstrap_servers();
        }
        std::env::var("INGEST_TEST_BROKERS").unwrap_or_else(|_| "127.0.0.1:9092".into())
    })
}
pub const DYNAMODB: &str = "http://127.0.0.1:4566";

/// The environment variable `name` as a `T` (the benches' knobs), else
/// `default` (unset, or not a `T`).
pub fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

/// The environment variable `name` as a comma-separated list of `T`
/// (`default` when unset); items that are not a `T` are left out.
pub fn env_list<T: std::str::FromStr>(name: &str, default: &str) -> Vec<T> {
    std::env::var(name)
        .unwrap_or_else(|_| default.into())
        .split(',')
        .filter_map(|x| x.trim().parse().ok())
        .collect()
}

/// Fails fast, with the fix, when the stack is not up.
pub fn require_stack() {
    for (what, addr, how) in [
        ("LocalStack", "127.0.0.1:4566", "bash localstack/start.sh"),
        ("tansu", brokers(), "bash localstack/tansu.sh"),
    ] {
        if std::net::TcpStream::connect(addr).is_err() {
            panic!("{what} is not listening on {addr}: run `make test` (or `{how}`)");
        }
    }
}

pub fn unique(prefix: &str) -> String {
    let n: u64 = rand::rng().random();
    format!("{prefix}-{n:016x}")
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

/// Where the project's scripts cache what they install (`INGEST_CACHE`, as
/// localstack/common.sh resolves it).
pub fn cache_dir() -> PathBuf {
    std::env::var_os("INGEST_CACHE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("XDG_CACHE_HOME").map(|d| PathBuf::from(d).join("ingest")))
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap()).join(".cache/ingest"))
}

/// Runs a command to its end; panics with its stderr unless it succeeded.
pub fn run_ok(cmd: &mut Command, what: &str) -> std::process::Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A free loopback port for a worker to listen on, below the OS's
/// ephemeral range ([`ephemeral_low`]). A port the OS picks for a listener
/// comes from that range, which it also hands to outgoing connections, and
/// the benches open thousands (the proxy, LocalStack): one took a worker's
/// ops port between the pick and the worker's bind (`make bench-dynamodb`,
/// two jobs, 2026-11-29: "cannot listen on ops.listen ...: Address already
/// in use"). A port below the range is never given to an outgoing
/// connection, so once it binds here only another explicit listener can
/// take it. Up to 12,000 ports below the range (not under 1,024); after
/// 200 that do not bind, or with no room below the range, one the OS picks.
pub fn free_port() -> u16 {
    let top = ephemeral_low();
    let bottom = top.saturating_sub(12_000).max(1_024);
    let bound = |port: u16| std::net::TcpListener::bind(("127.0.0.1", port)).ok();
    let mut rng = rand::rng();
    (0..if bottom < top { 200 } else { 0 })
        .map(|_| rng.random_range(bottom..top))
        .find(|&port| bound(port).is_some())
        .unwrap_or_else(|| bound(0).unwrap().local_addr().unwrap().port())
}

/// The lowest port of the OS's ephemeral range (Linux's
/// `ip_local_port_range`; 32768, its default, where that cannot be read).
pub fn ephemeral_low() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
}
