//! `--upstream none`: the proxy answers DynamoDB itself, for benchmarks of
//! the worker's own cost (so what is measured is the worker, not
//! LocalStack's DynamoDB, which takes a few hundred single writes a second).
//!
//! - DescribeTable: every table exists, ACTIVE, keyed by one partition key
//!   (`--stand-in-key NAME:S|N|B`, default `id:S`), provisioned at `--wcu`
//!   (or [`UNLIMITED_WCU`], reported but not enforced, when none is given).
//! - BatchWriteItem and PutItem: after `--latency-ms` (the real service takes
//!   a few milliseconds), success; `ConsumedCapacity` as DynamoDB counts it
//!   (one unit per started KB of each item) when asked. Nothing is stored.
//!   The proxy's limits (`--wcu`, `--partitions`) apply as in front of a real
//!   endpoint: what does not fit comes back unprocessed or throttled.
//! - Anything else: HTTP 400 `UnknownOperationException` naming what the
//!   stand-in answers.

use std::time::Duration;

use serde_json::{json, Value};

use super::wire;
use crate::decode::{KeyAttr, KeyType};

/// The `--upstream` value that selects the stand-in.
pub const NONE: &str = "none";

/// The capacity a stand-in table reports when `--wcu` is not given: a
/// figure no worker reaches, so the worker's pacing never binds.
pub const UNLIMITED_WCU: f64 = 1_000_000.0;

/// How the stand-in answers.
#[derive(Debug, Clone)]
pub struct StandIn {
    /// Every table's partition key.
    pub key: KeyAttr,
    /// Added before every write is answered.
    pub latency: Duration,
}

/// Parses `NAME[:S|N|B]` (the type defaults to S).
pub fn parse_key(text: &str) -> Result<KeyAttr, String> {
    let (name, kind) = text.split_once(':').unwrap_or((text, "S"));
    let kind = match kind {
        "S" => KeyType::S,
        "N" => KeyType::N,
        "B" => KeyType::B,
        other => return Err(format!("key type {other:?}: must be S, N or B")),
    };
    if name.is_empty() {
        return Err("key name: must not be empty".into());
    }
    Ok(KeyAttr {
        name: name.to_string(),
        kind,
    })
}

impl StandIn {
    /// What the proxy knows of a stand-in table: its key and `wcu` (the
    /// proxy's limit, if any).
    pub fn info(&self, wcu: Option<f64>) -> crate::sink::TableInfo {
        crate::sink::TableInfo {
            key: crate::decode::KeySchema {
                hash: self.key.clone(),
                range: None,
            },
            capacity: wcu,
            max_write: None,
            warm: None,
            indexes: Vec::new(),
        }
    }

    /// A DescribeTable answer for `table`, provisioned at `wcu`.
    pub fn describe(&self, table: &str, wcu: Option<f64>) -> Value {
        let kind = match self.key.kind {
            KeyType::S => "S",
            KeyType::N => "N",
            KeyType::B => "B",
        };
        let wcu = wcu.unwrap_or(UNLIMITED_WCU).round() as i64;
        json!({"Table": {
            "TableName": table,
            "TableArn": wire::table_arn(table),
            "TableStatus": "ACTIVE",
            "KeySchema": [{"AttributeName": self.key.name, "KeyType": "HASH"}],
            "AttributeDefinitions": [{"AttributeName": self.key.name, "AttributeType": kind}],
            "BillingModeSummary": {"BillingMode": "PROVISIONED"},
            "ProvisionedThroughput": {
                "ReadCapacityUnits": wcu,
                "WriteCapacityUnits": wcu,
                "NumberOfDecreasesToday": 0,
            },
            "ItemCount": 0,
            "TableSizeBytes": 0,
        }})
    }

    /// A BatchWriteItem answer for what was admitted (`taken`: units per
    /// table); the proxy merges what it withheld into `UnprocessedItems`.
    pub fn batch_written(&self, taken: &[(String, f64)], consumed: bool) -> Value {
        let mut out = json!({"UnprocessedItems": {}});
        if consumed {
            let list: Vec<Value> = taken
                .iter()
                .map(|(t, units)| json!({"TableName": t, "CapacityUnits": units}))
                .collect();
            out["ConsumedCapacity"] = Value::Array(list);
        }
        out
    }

    /// The answer to an operation the stand-in does not serve.
    pub fn unknown(&self, operation: &str) -> Value {
        json!({
            "__type": "com.amazonaws.dynamodb.v20120810#UnknownOperationException",
            "message": format!(
                "{operation:?}: the throttle proxy's stand-in (--upstream none) answers \
                 DescribeTable, BatchWriteItem and PutItem only"
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_a_name_and_a_type() {
        let k = parse_key("pk:N").unwrap();
        assert_eq!((k.name.as_str(), k.kind), ("pk", KeyType::N));
        assert_eq!(parse_key("id").unwrap().kind, KeyType::S);
        assert!(parse_key("id:X").unwrap_err().contains("S, N or B"));
        assert!(parse_key(":S").is_err());
    }

    #[test]
    fn answers_carry_what_dynamodb_would() {
        let s = StandIn {
            key: parse_key("id").unwrap(),
            latency: Duration::ZERO,
        };
        let d = s.describe("t", Some(200.0));
        assert_eq!(
            d["Table"]["ProvisionedThroughput"]["WriteCapacityUnits"],
            200
        );
        assert_eq!(d["Table"]["KeySchema"][0]["AttributeName"], "id");
        let unlimited = s.describe("t", None);
        let w = &unlimited["Table"]["ProvisionedThroughput"]["WriteCapacityUnits"];
        assert_eq!(w.as_f64(), Some(UNLIMITED_WCU));
        let b = s.batch_written(&[("t".into(), 7.0)], true);
        assert_eq!(b["ConsumedCapacity"][0]["CapacityUnits"], 7.0);
        assert!(b["UnprocessedItems"].as_object().unwrap().is_empty());
        assert!(s
            .batch_written(&[], false)
            .get("ConsumedCapacity")
            .is_none());
    }
}
