//! Bounded fuzzing on stable Rust (proptest): the record decoder and the
//! throttle proxy's request parser never panic, on arbitrary bytes and on
//! JSON shaped like what they expect. `make test` runs 2,000 cases per
//! target; `make fuzz` runs 100,000 (`FUZZ_CASES`). Failures are saved in
//! `tests/fuzz.regressions` (next to this file) and replayed first on every run.

use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;
use serde_json::{json, Map, Value};

use ingest::decode::{decode, Coordinates, KeyAttr, KeyMode, KeySchema, KeyType};
use ingest::proxy::wire::{item_size, partition_key, request_wcu, split_batch, Admit};

fn cases() -> u32 {
    std::env::var("FUZZ_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2_000)
}

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: cases(),
        failure_persistence: Some(Box::new(FileFailurePersistence::WithSource("regressions"))),
        ..ProptestConfig::default()
    }
}

fn schemas() -> Vec<(KeySchema, KeyMode)> {
    let attr = |name: &str, kind| KeyAttr {
        name: name.into(),
        kind,
    };
    vec![
        (
            KeySchema {
                hash: attr("id", KeyType::S),
                range: None,
            },
            KeyMode::Record,
        ),
        (
            KeySchema {
                hash: attr("id", KeyType::N),
                range: Some(attr("sk", KeyType::B)),
            },
            KeyMode::Record,
        ),
        (
            KeySchema {
                hash: attr("id", KeyType::S),
                range: None,
            },
            KeyMode::Kafka,
        ),
    ]
}

/// Any JSON value, a few levels deep, with the key names the decoder and
/// the proxy look for among the others.
fn json_value() -> impl Strategy<Value = Value> {
    let name = prop_oneof![
        Just("id".to_string()),
        Just("sk".to_string()),
        Just("S".to_string()),
        Just("N".to_string()),
        Just("B".to_string()),
        Just("M".to_string()),
        Just("L".to_string()),
        Just("Item".to_string()),
        Just("PutRequest".to_string()),
        Just("DeleteRequest".to_string()),
        Just("RequestItems".to_string()),
        "[a-z\\u{1f}]{0,6}",
    ];
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| json!(f)),
        "[0-9eE.+-]{0,30}".prop_map(Value::String),
        ".{0,40}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 64, 8, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
            prop::collection::vec((name.clone(), inner), 0..8)
                .prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<String, Value>>())),
        ]
    })
}

/// A BatchWriteItem body with arbitrary items and values.
fn batch_body() -> impl Strategy<Value = Value> {
    let request = prop_oneof![
        json_value().prop_map(|item| json!({"PutRequest": {"Item": item}})),
        json_value().prop_map(|key| json!({"DeleteRequest": {"Key": key}})),
        json_value(),
    ];
    prop::collection::vec(("[a-z]{1,3}", prop::collection::vec(request, 0..5)), 0..3).prop_map(
        |tables| {
            let items: Map<String, Value> = tables
                .into_iter()
                .map(|(t, reqs)| (t, Value::Array(reqs)))
                .collect();
            json!({"RequestItems": items, "ReturnConsumedCapacity": "TOTAL"})
        },
    )
}

fn at() -> Coordinates<'static> {
    Coordinates {
        topic: "t",
        partition: 0,
        offset: 0,
    }
}

fn parse_request(body: &[u8]) {
    if let Ok(v) = serde_json::from_slice::<Value>(body) {
        exercise_request(&v);
    }
}

fn exercise_request(v: &Value) {
    let _ = request_wcu(v);
    let mut budget = 3.0;
    let _ = split_batch(v, |_, req, cost| {
        let _ = partition_key(req, Some("id"));
        budget -= cost;
        if budget >= 0.0 {
            Admit::Yes
        } else {
            Admit::Table
        }
    });
    if let Some(item) = v.as_object() {
        let _ = item_size(item);
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn the_decoder_never_panics_on_bytes(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        for (schema, mode) in schemas() {
            let _ = decode(Some(&bytes), &schema, mode, at());
        }
    }

    #[test]
    fn the_decoder_never_panics_on_json(v in json_value()) {
        let text = v.to_string();
        for (schema, mode) in schemas() {
            let _ = decode(Some(text.as_bytes()), &schema, mode, at());
        }
    }

    #[test]
    fn the_proxy_parser_never_panics_on_bytes(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        parse_request(&bytes);
    }

    #[test]
    fn the_proxy_parser_never_panics_on_batches(v in batch_body()) {
        exercise_request(&v);
        parse_request(v.to_string().as_bytes());
    }
}
