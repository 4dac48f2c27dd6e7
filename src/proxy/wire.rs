//! DynamoDB's JSON wire format, as far as the throttle proxy needs it: the
//! write cost of an item, splitting a BatchWriteItem into what fits and what
//! comes back unprocessed, and the exact throttling error.

use serde_json::{json, Map, Value};

/// The error DynamoDB answers with HTTP 400 when a write is over capacity.
pub const THROTTLE_TYPE: &str =
    "com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException";

/// `ThrottlingReasons` of a table over its provisioned capacity.
pub const TABLE_WRITE_PROVISIONED: &str = "TableWriteProvisionedThroughputExceeded";
/// `ThrottlingReasons` of a partition (key range) over its own maximum.
pub const TABLE_WRITE_KEY_RANGE: &str = "TableWriteKeyRangeThroughputExceeded";
/// `ThrottlingReasons` of a global secondary index over its provisioned
/// capacity (the table's write is refused for its index's sake).
pub const INDEX_WRITE_PROVISIONED: &str = "IndexWriteProvisionedThroughputExceeded";
/// `throttlingReasons` of an on-demand table at its MaxWriteRequestUnits.
pub const TABLE_WRITE_MAX_ON_DEMAND: &str = "TableWriteMaxOnDemandThroughputExceeded";
/// The error DynamoDB answers with when an on-demand maximum is exceeded.
pub const THROTTLING_TYPE: &str = "com.amazonaws.dynamodb.v20120810#ThrottlingException";

/// The ARN DynamoDB names a table by in `ThrottlingReasons` (the proxy does
/// not know the region or account; LocalStack's account is all zeros). A
/// reason's resource is named by its path after `table/`: a table's name,
/// or an index's [`index_resource`].
pub fn table_arn(table: &str) -> String {
    format!("arn:aws:dynamodb:us-east-1:000000000000:table/{table}")
}

/// An index's resource path, as [`table_arn`] takes it: its ARN is the
/// table's with `/index/{index}` after it.
pub fn index_resource(table: &str, index: &str) -> String {
    format!("{table}/index/{index}")
}

/// The body of a throttled write and its error type, with one reason entry
/// per (table, reason), in the JSON 1.0 protocol's shapes (`reason`,
/// `resource`; AWS SDKs read them as `throttling_reasons()`): a
/// ThrottlingException with `throttlingReasons` when an on-demand maximum
/// is among them, else a ProvisionedThroughputExceededException with
/// `ThrottlingReasons` (the two differ in case, as DynamoDB's model does).
pub fn throttle_body(reasons: &[(String, &'static str)]) -> (String, &'static str) {
    let list: Vec<Value> = reasons
        .iter()
        .map(|(table, reason)| json!({"reason": reason, "resource": table_arn(table)}))
        .collect();
    if reasons.iter().any(|(_, r)| *r == TABLE_WRITE_MAX_ON_DEMAND) {
        let body = json!({
            "__type": THROTTLING_TYPE,
            "message": "Throughput exceeds the maximum on-demand throughput configured for the table.",
            "throttlingReasons": list,
        });
        return (body.to_string(), "ThrottlingException");
    }
    let message = if reasons.iter().all(|(_, r)| *r == INDEX_WRITE_PROVISIONED) {
        "The level of configured provisioned throughput for one or more global secondary \
         indexes of the table was exceeded. Consider increasing your provisioning level for \
         the under-provisioned global secondary indexes with the UpdateTable API"
    } else {
        "The level of configured provisioned throughput for the table was exceeded. \
         Consider increasing your provisioning level with the UpdateTable API."
    };
    let body = json!({
        "__type": THROTTLE_TYPE,
        "message": message,
        "ThrottlingReasons": list,
    });
    (body.to_string(), "ProvisionedThroughputExceededException")
}

/// Whether a write request fits, and if not, what refused it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admit {
    Yes,
    /// The table's capacity.
    Table,
    /// The item's partition (its key range), or an on-demand table past
    /// twice its previous peak.
    KeyRange,
    /// An on-demand table's MaxWriteRequestUnits.
    Max,
    /// A global secondary index's capacity (its name).
    Index(String),
}

/// The partition-key value of a write request as JSON text (`{"S":"a"}`),
/// or the whole item when the key's name is unknown.
pub fn partition_key(req: &Value, hash_key: Option<&str>) -> String {
    let item = req
        .pointer("/PutRequest/Item")
        .or_else(|| req.pointer("/DeleteRequest/Key"));
    match (item, hash_key) {
        (Some(item), Some(k)) => item.get(k).map_or_else(String::new, Value::to_string),
        (Some(item), None) => item.to_string(),
        (None, _) => String::new(),
    }
}

/// Size of an item in wire JSON (`{"name": {"S": "..."}, ...}`), counted as
/// DynamoDB does (see `decode::item_size`).
pub fn item_size(item: &Map<String, Value>) -> usize {
    item.iter().map(|(k, v)| k.len() + value_size(v)).sum()
}

fn value_size(v: &Value) -> usize {
    let Some((kind, inner)) = v.as_object().and_then(|o| o.iter().next()) else {
        return 0;
    };
    match (kind.as_str(), inner) {
        ("S", Value::String(s)) => s.len(),
        ("N", Value::String(n)) => n.chars().filter(char::is_ascii_digit).count().div_ceil(2) + 1,
        ("B", Value::String(b)) => b.len() * 3 / 4,
        ("BOOL", _) | ("NULL", _) => 1,
        ("L", Value::Array(l)) => 3 + l.iter().map(|x| 1 + value_size(x)).sum::<usize>(),
        ("M", Value::Object(m)) => {
            3 + m
                .iter()
                .map(|(k, x)| 1 + k.len() + value_size(x))
                .sum::<usize>()
        }
        ("SS", Value::Array(l)) | ("NS", Value::Array(l)) | ("BS", Value::Array(l)) => {
            l.iter().map(|x| x.as_str().map_or(0, str::len)).sum()
        }
        _ => 0,
    }
}

/// Write cost of one write request (`{"PutRequest": {"Item": ...}}` or
/// `{"DeleteRequest": {"Key": ...}}`), in WCU: one per started KB, at least 1.
pub fn request_wcu(req: &Value) -> f64 {
    let item = req
        .pointer("/PutRequest/Item")
        .or_else(|| req.pointer("/DeleteRequest/Key"))
        .and_then(Value::as_object);
    let size = item.map_or(0, item_size);
    size.div_ceil(1024).max(1) as f64
}

/// A BatchWriteItem split by capacity.
#[derive(Debug, Default)]
pub struct Split {
    /// The request to forward (tables with nothing left are dropped).
    pub forward: Map<String, Value>,
    /// Write requests held back, per table, to return as UnprocessedItems.
    pub withheld: Map<String, Value>,
    /// WCU taken, per table (accepted once upstream writes them).
    pub taken: Vec<(String, f64)>,
    pub accepted_items: usize,
    /// Per table, the reason items were refused for (the table's capacity
    /// wins over an on-demand maximum, which wins over a key range).
    pub reasons: Vec<(String, &'static str)>,
}

/// Splits a BatchWriteItem body: for each write request in order,
/// `take(table, request, cost)` says whether capacity was available.
pub fn split_batch(body: &Value, mut take: impl FnMut(&str, &Value, f64) -> Admit) -> Split {
    let mut out = Split::default();
    let mut forward_items = Map::new();
    if let Some(tables) = body.get("RequestItems").and_then(Value::as_object) {
        for (table, reqs) in tables {
            let (mut keep, mut hold) = (Vec::new(), Vec::new());
            let mut taken = 0.0;
            let mut reason = None;
            let mut indexes: Vec<String> = Vec::new();
            for req in reqs.as_array().into_iter().flatten() {
                let cost = request_wcu(req);
                match take(table, req, cost) {
                    Admit::Yes => {
                        taken += cost;
                        keep.push(req.clone());
                        continue;
                    }
                    Admit::Table => reason = Some(TABLE_WRITE_PROVISIONED),
                    Admit::Max if reason != Some(TABLE_WRITE_PROVISIONED) => {
                        reason = Some(TABLE_WRITE_MAX_ON_DEMAND);
                    }
                    Admit::Max => {}
                    Admit::KeyRange => {
                        reason = reason.or(Some(TABLE_WRITE_KEY_RANGE));
                    }
                    Admit::Index(name) => {
                        if !indexes.contains(&name) {
                            indexes.push(name);
                        }
                    }
                }
                hold.push(req.clone());
            }
            if let Some(r) = reason {
                out.reasons.push((table.clone(), r));
            }
            for name in indexes {
                out.reasons
                    .push((index_resource(table, &name), INDEX_WRITE_PROVISIONED));
            }
            out.accepted_items += keep.len();
            if !keep.is_empty() {
                forward_items.insert(table.clone(), Value::Array(keep));
                out.taken.push((table.clone(), taken));
            }
            if !hold.is_empty() {
                out.withheld.insert(table.clone(), Value::Array(hold));
            }
        }
    }
    out.forward = body.as_object().cloned().unwrap_or_default();
    out.forward
        .insert("RequestItems".into(), Value::Object(forward_items));
    out
}

/// Adds the withheld requests to a BatchWriteItem response's UnprocessedItems.
pub fn merge_unprocessed(response: &mut Value, withheld: &Map<String, Value>) {
    if !response.is_object() {
        *response = json!({});
    }
    let obj = response.as_object_mut().expect("an object");
    let unprocessed = obj.entry("UnprocessedItems").or_insert_with(|| json!({}));
    if !unprocessed.is_object() {
        *unprocessed = json!({});
    }
    let map = unprocessed.as_object_mut().expect("an object");
    for (table, reqs) in withheld {
        let list = map.entry(table.clone()).or_insert_with(|| json!([]));
        if let (Some(list), Some(reqs)) = (list.as_array_mut(), reqs.as_array()) {
            list.extend(reqs.iter().cloned());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(id: &str, pad: usize) -> Value {
        json!({"PutRequest": {"Item": {"id": {"S": id}, "p": {"S": "x".repeat(pad)}}}})
    }

    #[test]
    fn sizes_follow_the_decoder_rules() {
        let item = json!({"id": {"S": "abc"}, "n": {"N": "12.5"}, "b": {"BOOL": true},
                          "l": {"L": [{"N": "1"}]}, "m": {"M": {"k": {"NULL": true}}}});
        // id 2+3, n 1+(3/2 rounded up +1 = 3), b 1+1, l 1+(3+1+2), m 1+(3+1+1+1)
        assert_eq!(item_size(item.as_object().unwrap()), 5 + 4 + 2 + 7 + 7);
        assert_eq!(request_wcu(&put("a", 10)), 1.0);
        assert_eq!(request_wcu(&put("a", 2000)), 2.0);
    }

    #[test]
    fn a_batch_splits_in_order_and_unprocessed_merge_back() {
        let body = json!({"RequestItems": {"t": [put("a", 10), put("b", 2000), put("c", 10)]},
                          "ReturnConsumedCapacity": "TOTAL"});
        let mut budget = 2.0;
        let split = split_batch(&body, |_, _, cost| {
            if cost <= budget {
                budget -= cost;
                Admit::Yes
            } else {
                Admit::Table
            }
        });
        assert_eq!(
            split.accepted_items, 2,
            "a (1) and c (1) fit, b (2) does not"
        );
        assert_eq!(split.forward["ReturnConsumedCapacity"], "TOTAL");
        let fwd = split.forward["RequestItems"]["t"].as_array().unwrap();
        assert_eq!(fwd.len(), 2);
        assert_eq!(split.taken, vec![("t".to_string(), 2.0)]);
        let mut resp = json!({"UnprocessedItems": {}});
        merge_unprocessed(&mut resp, &split.withheld);
        assert_eq!(
            resp["UnprocessedItems"]["t"][0]["PutRequest"]["Item"]["id"]["S"],
            "b"
        );
    }

    #[test]
    fn the_throttle_body_is_dynamodbs_with_its_reasons() {
        let (body, kind) = throttle_body(&[("t".into(), TABLE_WRITE_KEY_RANGE)]);
        assert_eq!(kind, "ProvisionedThroughputExceededException");
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["__type"], THROTTLE_TYPE);
        assert_eq!(
            v["ThrottlingReasons"][0],
            json!({"reason": "TableWriteKeyRangeThroughputExceeded",
                   "resource": "arn:aws:dynamodb:us-east-1:000000000000:table/t"})
        );
        // An on-demand maximum: ThrottlingException, camelCase reasons.
        let (body, kind) = throttle_body(&[("t".into(), TABLE_WRITE_MAX_ON_DEMAND)]);
        assert_eq!(kind, "ThrottlingException");
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["__type"], THROTTLING_TYPE);
        assert_eq!(
            v["throttlingReasons"][0]["reason"],
            "TableWriteMaxOnDemandThroughputExceeded"
        );
    }

    #[test]
    fn an_index_refusal_names_the_index_by_its_arn() {
        let body = json!({"RequestItems": {"t": [put("x", 1), put("y", 1)]}});
        let split = split_batch(&body, |_, req, _| {
            match partition_key(req, Some("id")).as_str() {
                "{\"S\":\"x\"}" => Admit::Yes,
                _ => Admit::Index("by_g".into()),
            }
        });
        assert_eq!(split.accepted_items, 1);
        assert_eq!(
            split.reasons,
            vec![("t/index/by_g".to_string(), INDEX_WRITE_PROVISIONED)]
        );
        let (body, kind) = throttle_body(&split.reasons);
        assert_eq!(kind, "ProvisionedThroughputExceededException");
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(
            v["ThrottlingReasons"][0],
            json!({"reason": "IndexWriteProvisionedThroughputExceeded",
                   "resource": "arn:aws:dynamodb:us-east-1:000000000000:table/t/index/by_g"})
        );
        assert!(v["message"]
            .as_str()
            .unwrap()
            .contains("global secondary indexes"));
    }

    #[test]
    fn a_refusal_by_the_table_wins_over_one_by_a_key_range() {
        let body = json!({"RequestItems": {
            "a": [put("x", 1), put("y", 1)],
            "b": [put("z", 1)]}});
        let split = split_batch(&body, |table, req, _| {
            match (table, partition_key(req, Some("id")).as_str()) {
                ("a", "{\"S\":\"x\"}") => Admit::KeyRange,
                ("a", _) => Admit::Table,
                _ => Admit::KeyRange,
            }
        });
        assert_eq!(split.accepted_items, 0);
        assert_eq!(
            split.reasons,
            vec![
                ("a".to_string(), TABLE_WRITE_PROVISIONED),
                ("b".to_string(), TABLE_WRITE_KEY_RANGE)
            ]
        );
        // Without the key's name, the whole item is the key.
        assert!(partition_key(&put("q", 1), None).contains("\"q\""));
    }
}
