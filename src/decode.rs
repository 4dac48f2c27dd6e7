//! Decoding: a Kafka record's JSON value becomes a DynamoDB item.
//!
//! JSON maps to DynamoDB types as: string -> S, number -> N (exact digits, never
//! through a float), true/false -> BOOL, null -> NULL, array -> L, object -> M.
//! The item must carry the table's key attributes with their declared types
//! (S from a string, N from a number, B from a base64 string), or, in the
//! `kafka` key mode, the key is derived from the record's coordinates so that
//! a redelivered record overwrites its earlier copy.
//!
//! Also here: the item's size as DynamoDB counts it, and its write cost in WCU.
//! Deliberately not here: batching, I/O, and anything DynamoDB can only tell by
//! trying (its own validation errors are caught by the sink).

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use base64::Engine;
use serde_json::Value;

/// A DynamoDB item.
pub type Item = HashMap<String, AttributeValue>;

/// DynamoDB's maximum item size, in bytes.
pub const MAX_ITEM_BYTES: usize = 400 * 1024;

/// The scalar type of a key attribute.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
pub enum KeyType {
    S,
    N,
    B,
}

/// One key attribute of a table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyAttr {
    pub name: String,
    pub kind: KeyType,
}

/// A table's primary key: a partition key and an optional sort key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeySchema {
    pub hash: KeyAttr,
    pub range: Option<KeyAttr>,
}

impl std::fmt::Display for KeySchema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({:?})", self.hash.name, self.hash.kind)?;
        if let Some(r) = &self.range {
            write!(f, " + {} ({:?})", r.name, r.kind)?;
        }
        Ok(())
    }
}

/// Where an item's key comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum KeyMode {
    /// The record's JSON must carry the key attributes.
    Record,
    /// The key is built from topic, partition and offset.
    Kafka,
}

/// Why a record can never become an item. `reason()` is a stable, bounded label
/// (used in dead-letter headers and metrics); `Display` is the detail.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("record has no value (tombstone)")]
    EmptyValue,
    #[error("value is not valid JSON: {0}")]
    InvalidJson(String),
    #[error("value is JSON but not an object (found {0})")]
    NotAnObject(&'static str),
    #[error("key attribute `{0}` is missing")]
    MissingKey(String),
    #[error("key attribute `{name}` must be {expected}, found {found}")]
    KeyTypeMismatch {
        name: String,
        expected: &'static str,
        found: String,
    },
    #[error("item is {size} bytes, over DynamoDB's limit of {MAX_ITEM_BYTES}")]
    ItemTooLarge { size: usize },
}

impl DecodeError {
    pub fn reason(&self) -> &'static str {
        match self {
            DecodeError::EmptyValue => "empty_value",
            DecodeError::InvalidJson(_) => "invalid_json",
            DecodeError::NotAnObject(_) => "not_an_object",
            DecodeError::MissingKey(_) => "missing_key",
            DecodeError::KeyTypeMismatch { .. } => "key_type_mismatch",
            DecodeError::ItemTooLarge { .. } => "item_too_large",
        }
    }
}

/// Where a record came from, for the `kafka` key mode.
#[derive(Debug, Clone, Copy)]
pub struct Coordinates<'a> {
    pub topic: &'a str,
    pub partition: i32,
    pub offset: i64,
}

/// A decoded item with its canonical key (for de-duplication) and its cost.
#[derive(Debug, Clone, PartialEq)]
pub struct Decoded {
    pub item: Item,
    pub key: String,
    pub size: usize,
}

impl Decoded {
    /// Write capacity units this item costs: one per started KB.
    pub fn wcu(&self) -> u32 {
        wcu(self.size)
    }
}

/// Write capacity units for an item of `size` bytes (at least 1).
pub fn wcu(size: usize) -> u32 {
    size.div_ceil(1024).max(1) as u32
}

/// Decodes one record value into an item for a table with `schema`.
pub fn decode(
    value: Option<&[u8]>,
    schema: &KeySchema,
    mode: KeyMode,
    at: Coordinates<'_>,
) -> Result<Decoded, DecodeError> {
    let bytes = value.ok_or(DecodeError::EmptyValue)?;
    let json: Value =
        serde_json::from_slice(bytes).map_err(|e| DecodeError::InvalidJson(e.to_string()))?;
    let Value::Object(map) = json else {
        return Err(DecodeError::NotAnObject(json_kind(&json)));
    };
    let mut item: Item = map.into_iter().map(|(k, v)| (k, to_attr(v))).collect();
    if mode == KeyMode::Kafka {
        insert_kafka_key(&mut item, schema, at);
    }
    check_key(&mut item, &schema.hash)?;
    if let Some(range) = &schema.range {
        check_key(&mut item, range)?;
    }
    let key = key_of(&item, schema).expect("key attributes were just checked");
    let size = item_size(&item);
    if size > MAX_ITEM_BYTES {
        return Err(DecodeError::ItemTooLarge { size });
    }
    Ok(Decoded { item, key, size })
}

/// Converts a JSON value to an attribute value, keeping numbers' exact digits.
pub fn to_attr(v: Value) -> AttributeValue {
    match v {
        Value::Null => AttributeValue::Null(true),
        Value::Bool(b) => AttributeValue::Bool(b),
        Value::Number(n) => AttributeValue::N(n.to_string()),
        Value::String(s) => AttributeValue::S(s),
        Value::Array(a) => AttributeValue::L(a.into_iter().map(to_attr).collect()),
        Value::Object(o) => {
            AttributeValue::M(o.into_iter().map(|(k, v)| (k, to_attr(v))).collect())
        }
    }
}

/// Converts an attribute value back to JSON (for display), numbers exact.
pub fn from_attr(a: &AttributeValue) -> Value {
    match a {
        AttributeValue::S(s) => Value::String(s.clone()),
        AttributeValue::N(n) => {
            serde_json::from_str(n).unwrap_or_else(|_| Value::String(n.clone()))
        }
        AttributeValue::Bool(b) => Value::Bool(*b),
        AttributeValue::Null(_) => Value::Null,
        AttributeValue::L(l) => Value::Array(l.iter().map(from_attr).collect()),
        AttributeValue::M(m) => {
            let mut keys: Vec<_> = m.keys().collect();
            keys.sort();
            Value::Object(
                keys.into_iter()
                    .map(|k| (k.clone(), from_attr(&m[k])))
                    .collect(),
            )
        }
        AttributeValue::B(b) => {
            Value::String(base64::engine::general_purpose::STANDARD.encode(b.as_ref()))
        }
        other => Value::String(format!("{other:?}")),
    }
}

fn insert_kafka_key(item: &mut Item, schema: &KeySchema, at: Coordinates<'_>) {
    match &schema.range {
        None => {
            let id = format!("{}/{}/{}", at.topic, at.partition, at.offset);
            item.insert(schema.hash.name.clone(), AttributeValue::S(id));
        }
        Some(range) => {
            let id = format!("{}/{}", at.topic, at.partition);
            item.insert(schema.hash.name.clone(), AttributeValue::S(id));
            item.insert(range.name.clone(), AttributeValue::N(at.offset.to_string()));
        }
    }
}

/// Checks (and for B, converts) one key attribute.
fn check_key(item: &mut Item, key: &KeyAttr) -> Result<(), DecodeError> {
    let value = item
        .get_mut(&key.name)
        .ok_or_else(|| DecodeError::MissingKey(key.name.clone()))?;
    let mismatch = |expected: &'static str, found: &AttributeValue| DecodeError::KeyTypeMismatch {
        name: key.name.clone(),
        expected,
        found: attr_kind(found).to_string(),
    };
    match (key.kind, &*value) {
        (KeyType::S, AttributeValue::S(s)) if !s.is_empty() => Ok(()),
        (KeyType::S, v) => Err(mismatch("a non-empty string", v)),
        (KeyType::N, AttributeValue::N(_)) => Ok(()),
        (KeyType::N, v) => Err(mismatch("a number", v)),
        (KeyType::B, AttributeValue::S(s)) if !s.is_empty() => {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(s)
                .map_err(|_| mismatch("a non-empty base64 string", value))?;
            *value = AttributeValue::B(bytes.into());
            Ok(())
        }
        (KeyType::B, v) => Err(mismatch("a non-empty base64 string", v)),
    }
}

/// The canonical text of an item's key: equal keys in DynamoDB give equal
/// text, and different keys different text. Each part is its type letter, its
/// length and `:` before its text, so no part can run into the next (a
/// separator inside a string value cannot forge a sort key). `None` when a
/// key attribute is missing or of another type.
pub fn key_of(item: &Item, schema: &KeySchema) -> Option<String> {
    let one = |k: &KeyAttr| {
        let (kind, text) = match (k.kind, item.get(&k.name)?) {
            (KeyType::S, AttributeValue::S(s)) => ('S', s.clone()),
            (KeyType::N, AttributeValue::N(n)) => ('N', canonical_number(n)),
            (KeyType::B, AttributeValue::B(b)) => (
                'B',
                base64::engine::general_purpose::STANDARD.encode(b.as_ref()),
            ),
            _ => return None,
        };
        Some(format!("{kind}{}:{text}", text.len()))
    };
    let mut key = one(&schema.hash)?;
    if let Some(range) = &schema.range {
        key.push_str(&one(range)?);
    }
    Some(key)
}

/// The partition-key part of a key's canonical text (see [`key_of`]): what
/// places an item in a partition.
pub fn partition_part(key: &str) -> &str {
    let Some(colon) = key.find(':') else {
        return key;
    };
    let len: usize = key[1..colon].parse().unwrap_or(usize::MAX);
    key.get(..(colon + 1).saturating_add(len)).unwrap_or(key)
}

/// Numbers equal in DynamoDB (1, 1.0, 1e0) must collide as keys: strip the
/// representation down to sign, digits and exponent.
fn canonical_number(n: &str) -> String {
    let (mantissa, exp) = match n.find(['e', 'E']) {
        Some(i) => (&n[..i], n[i + 1..].parse::<i64>().unwrap_or(0)),
        None => (n, 0),
    };
    let negative = mantissa.starts_with('-');
    let mantissa = mantissa.trim_start_matches(['-', '+']);
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits = format!("{int}{frac}");
    let exp = exp + int.len() as i64;
    let lead = digits.len() - digits.trim_start_matches('0').len();
    let digits = digits.trim_matches('0');
    if digits.is_empty() {
        return "0".into();
    }
    let sign = if negative { "-" } else { "" };
    format!("{sign}0.{digits}e{}", exp - lead as i64)
}

/// The item's size as DynamoDB counts it (names plus values, in bytes).
pub fn item_size(item: &Item) -> usize {
    item.iter().map(|(k, v)| k.len() + attr_size(v)).sum()
}

fn attr_size(v: &AttributeValue) -> usize {
    match v {
        AttributeValue::S(s) => s.len(),
        AttributeValue::N(n) => {
            let significant = n.chars().filter(|c| c.is_ascii_digit()).count();
            significant.div_ceil(2) + 1
        }
        AttributeValue::B(b) => b.as_ref().len(),
        AttributeValue::Bool(_) | AttributeValue::Null(_) => 1,
        AttributeValue::L(l) => 3 + l.iter().map(|v| 1 + attr_size(v)).sum::<usize>(),
        AttributeValue::M(m) => {
            3 + m
                .iter()
                .map(|(k, v)| 1 + k.len() + attr_size(v))
                .sum::<usize>()
        }
        AttributeValue::Ss(s) => s.iter().map(String::len).sum(),
        AttributeValue::Ns(s) => s.iter().map(|n| n.len()).sum(),
        AttributeValue::Bs(s) => s.iter().map(|b| b.as_ref().len()).sum(),
        _ => 0,
    }
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn attr_kind(v: &AttributeValue) -> &'static str {
    match v {
        AttributeValue::S(s) if s.is_empty() => "an empty string",
        AttributeValue::S(_) => "a string",
        AttributeValue::N(_) => "a number",
        AttributeValue::Bool(_) => "a boolean",
        AttributeValue::Null(_) => "null",
        AttributeValue::L(_) => "an array",
        AttributeValue::M(_) => "an object",
        _ => "another type",
    }
}

#[cfg(test)]
#[path = "decode_tests.rs"]
mod tests;
