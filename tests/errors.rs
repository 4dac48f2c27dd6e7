//! Bad config and unreachable or missing services: a clear error naming what
//! and why, the documented exit code, and nothing committed.

mod common;

use std::process::Command;
use std::time::Duration;

use common::*;

fn run_with(setup: &Setup, env: &[(&str, &str)]) -> (Option<i32>, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ingest"));
    cmd.arg("run")
        .arg("--config")
        .arg(&setup.config)
        .arg("--until-caught-up");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let (code, _, text) = Worker::start(cmd).wait_logged(Duration::from_secs(60));
    (code, text)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_bad_config_value_exits_2_naming_key_value_and_rule() {
    let s = Setup::new(1, "").await;
    let (code, text) = run_with(&s, &[("INGEST__PIPELINE__BATCH_LINGER_MS", "99999")]);
    assert_eq!(code, Some(2), "{text}");
    assert!(
        text.contains("config key `pipeline.batch_linger_ms` = 99999: must be between 0 and 10000"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unknown_config_key_exits_2() {
    let s = Setup::new(1, "").await;
    let text = std::fs::read_to_string(&s.config).unwrap() + "\n[extra]\nx = 1\n";
    std::fs::write(&s.config, text).unwrap();
    let (code, text) = run_with(&s, &[]);
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains("unknown field `extra`"), "{text}");
}

#[tokio::test(flavor = "multi_thread")]
async fn unreachable_dynamodb_at_start_exits_1_naming_the_endpoint() {
    let s = Setup::new(1, "").await;
    let (code, text) = run_with(
        &s,
        &[
            ("INGEST__DYNAMODB__ENDPOINT_URL", "http://127.0.0.1:9"),
            ("INGEST__DYNAMODB__START_PATIENCE_S", "2"),
        ],
    );
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("http://127.0.0.1:9"), "{text}");
    assert!(text.contains(&s.table), "{text}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_missing_table_exits_1_naming_it() {
    let s = Setup::new(1, "").await;
    let (code, text) = run_with(&s, &[("INGEST__ROUTE__0__TABLE", "no-such-table")]);
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("no-such-table") && text.contains("ResourceNotFoundException"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn unreachable_kafka_exits_1_naming_the_brokers() {
    let s = Setup::new(1, "").await;
    let (code, text) = run_with(
        &s,
        &[
            ("INGEST__KAFKA__BROKERS", "127.0.0.1:9"),
            ("INGEST__KAFKA__METADATA_TIMEOUT_MS", "1500"),
        ],
    );
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("cannot reach Kafka at 127.0.0.1:9"), "{text}");
}

#[tokio::test(flavor = "multi_thread")]
async fn missing_topics_exit_1_listing_them() {
    let s = Setup::new(1, "").await;
    let (code, text) = run_with(&s, &[("INGEST__KAFKA__DEAD_LETTER_TOPIC", "no-such-dlq")]);
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("topics missing") && text.contains("no-such-dlq"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_configured_key_that_differs_from_the_table_exits_1() {
    let s = Setup::new(1, "partition_key = \"pk\"").await;
    let (code, text) = run_with(&s, &[]);
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("configured key pk (S) differs from the table's key id (S)"),
        "{text}"
    );
}
