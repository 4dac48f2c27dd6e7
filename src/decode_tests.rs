//! Unit tests of decoding records into items: keys, sizes, errors.

use super::*;

fn schema(hash: (&str, KeyType), range: Option<(&str, KeyType)>) -> KeySchema {
    let attr = |(n, k): (&str, KeyType)| KeyAttr {
        name: n.into(),
        kind: k,
    };
    KeySchema {
        hash: attr(hash),
        range: range.map(attr),
    }
}

const AT: Coordinates<'static> = Coordinates {
    topic: "orders",
    partition: 3,
    offset: 17,
};

fn dec(json: &str, s: &KeySchema) -> Result<Decoded, DecodeError> {
    decode(Some(json.as_bytes()), s, KeyMode::Record, AT)
}

#[test]
fn every_json_type_maps_to_its_attribute_type() {
    let s = schema(("id", KeyType::S), None);
    let d = dec(
        r#"{"id":"a","n":12.50,"b":true,"z":null,"l":[1,"x"],"m":{"k":false}}"#,
        &s,
    )
    .unwrap();
    assert_eq!(d.item["id"], AttributeValue::S("a".into()));
    assert_eq!(d.item["n"], AttributeValue::N("12.50".into()));
    assert_eq!(d.item["b"], AttributeValue::Bool(true));
    assert_eq!(d.item["z"], AttributeValue::Null(true));
    assert_eq!(
        d.item["l"],
        AttributeValue::L(vec![
            AttributeValue::N("1".into()),
            AttributeValue::S("x".into())
        ])
    );
    let m = d.item["m"].as_m().unwrap();
    assert_eq!(m["k"], AttributeValue::Bool(false));
}

#[test]
fn numbers_keep_their_exact_digits() {
    let s = schema(("id", KeyType::N), None);
    let big = "123456789012345678901234567890.123456789";
    let d = dec(&format!(r#"{{"id":{big},"e":1e-130}}"#), &s).unwrap();
    assert_eq!(d.item["id"], AttributeValue::N(big.into()));
    assert_eq!(d.item["e"], AttributeValue::N("1e-130".into()));
}

#[test]
fn equal_numbers_make_equal_keys() {
    let s = schema(("id", KeyType::N), None);
    let keys: Vec<String> = ["1", "1.0", "1e0", "10e-1", "0.1e1"]
        .iter()
        .map(|n| dec(&format!(r#"{{"id":{n}}}"#), &s).unwrap().key)
        .collect();
    assert!(keys.windows(2).all(|w| w[0] == w[1]), "{keys:?}");
    assert_ne!(keys[0], dec(r#"{"id":-1}"#, &s).unwrap().key);
    assert_ne!(keys[0], dec(r#"{"id":10}"#, &s).unwrap().key);
}

#[test]
fn bad_records_say_why() {
    let s = schema(("id", KeyType::S), Some(("ts", KeyType::N)));
    let reason = |j: &str| dec(j, &s).unwrap_err().reason();
    assert_eq!(reason("not json"), "invalid_json");
    assert_eq!(reason("[1,2]"), "not_an_object");
    assert_eq!(reason(r#"{"ts":1}"#), "missing_key");
    assert_eq!(reason(r#"{"id":"a"}"#), "missing_key");
    assert_eq!(reason(r#"{"id":7,"ts":1}"#), "key_type_mismatch");
    assert_eq!(reason(r#"{"id":"a","ts":"1"}"#), "key_type_mismatch");
    assert_eq!(reason(r#"{"id":"","ts":1}"#), "key_type_mismatch");
    let err = decode(None, &s, KeyMode::Record, AT).unwrap_err();
    assert_eq!(err.reason(), "empty_value");
    let msg = dec(r#"{"id":7,"ts":1}"#, &s).unwrap_err().to_string();
    assert_eq!(
        msg,
        "key attribute `id` must be a non-empty string, found a number"
    );
}

#[test]
fn oversized_items_are_refused_before_sending() {
    let s = schema(("id", KeyType::S), None);
    let pad = "x".repeat(MAX_ITEM_BYTES);
    let err = dec(&format!(r#"{{"id":"a","pad":"{pad}"}}"#), &s).unwrap_err();
    assert_eq!(err.reason(), "item_too_large");
    let ok = "x".repeat(MAX_ITEM_BYTES - 10);
    let d = dec(&format!(r#"{{"id":"a","pad":"{ok}"}}"#), &s).unwrap();
    assert_eq!(d.wcu(), 400);
}

#[test]
fn kafka_key_mode_overwrites_on_redelivery() {
    let single = schema(("pk", KeyType::S), None);
    let d = decode(Some(b"{\"v\":1}"), &single, KeyMode::Kafka, AT).unwrap();
    assert_eq!(d.item["pk"], AttributeValue::S("orders/3/17".into()));
    let pair = schema(("pk", KeyType::S), Some(("sk", KeyType::N)));
    let d = decode(Some(b"{\"v\":1}"), &pair, KeyMode::Kafka, AT).unwrap();
    assert_eq!(d.item["pk"], AttributeValue::S("orders/3".into()));
    assert_eq!(d.item["sk"], AttributeValue::N("17".into()));
}

#[test]
fn binary_keys_come_from_base64() {
    let s = schema(("id", KeyType::B), None);
    let d = dec(r#"{"id":"AQID"}"#, &s).unwrap();
    assert_eq!(d.item["id"], AttributeValue::B(vec![1u8, 2, 3].into()));
    assert_eq!(
        dec(r#"{"id":"%%%"}"#, &s).unwrap_err().reason(),
        "key_type_mismatch"
    );
}

#[test]
fn size_and_wcu_follow_dynamodb_rules() {
    let s = schema(("id", KeyType::S), None);
    let d = dec(r#"{"id":"abc"}"#, &s).unwrap();
    assert_eq!(d.size, 2 + 3);
    assert_eq!(d.wcu(), 1);
    assert_eq!(wcu(1024), 1);
    assert_eq!(wcu(1025), 2);
}

/// An item with string attributes `pk` and `sk`.
fn item(pk: &str, sk: &str) -> Item {
    [("pk", pk), ("sk", sk)]
        .into_iter()
        .map(|(k, v)| (k.to_string(), AttributeValue::S(v.to_string())))
        .collect()
}

proptest::proptest! {
    #[test]
    fn distinct_keys_never_collide(
        pk1 in "[a\u{1f}SN0-9:]{0,6}", sk1 in "[a\u{1f}SN0-9:]{0,6}",
        pk2 in "[a\u{1f}SN0-9:]{0,6}", sk2 in "[a\u{1f}SN0-9:]{0,6}",
    ) {
        let s = schema(("pk", KeyType::S), Some(("sk", KeyType::S)));
        let a = key_of(&item(&pk1, &sk1), &s).unwrap();
        let b = key_of(&item(&pk2, &sk2), &s).unwrap();
        proptest::prop_assert_eq!(a == b, (&pk1, &sk1) == (&pk2, &sk2));
        // The partition part is the partition key's alone.
        let pa = partition_part(&a);
        let pb = partition_part(&b);
        proptest::prop_assert_eq!(pa == pb, pk1 == pk2);
        let only = key_of(&item(&pk1, &sk2), &schema(("pk", KeyType::S), None)).unwrap();
        proptest::prop_assert_eq!(pa, only.as_str());
    }
}

#[test]
fn a_separator_in_a_value_cannot_forge_a_sort_key() {
    let s = schema(("pk", KeyType::S), Some(("sk", KeyType::S)));
    assert_ne!(
        key_of(&item("a\u{1f}Sb", "c"), &s),
        key_of(&item("a", "b\u{1f}Sc"), &s)
    );
}
