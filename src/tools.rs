//! Helper commands for the local stack and for trying the worker out:
//! create topics (brokers without auto-creation, like tansu), produce sample
//! or file records, and show what a table holds. Not on the worker's path.

use std::time::Duration;

use aws_sdk_dynamodb::types::Select;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{FutureProducer, FutureRecord};
use serde_json::json;

use crate::decode::from_attr;
use crate::sink::dynamodb::Dynamo;

#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    #[error("kafka at {brokers}: {source}")]
    Kafka { brokers: String, source: KafkaError },
    #[error("topic {topic}: {code}")]
    Topic {
        topic: String,
        code: RDKafkaErrorCode,
    },
    #[error("dynamodb: {0}")]
    Dynamo(String),
}

fn client_config(brokers: &str) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", brokers);
    c
}

/// Creates topics (name, partitions); topics that exist already are fine.
pub async fn create_topics(brokers: &str, topics: &[(String, i32)]) -> Result<(), ToolError> {
    let kerr = |source| ToolError::Kafka {
        brokers: brokers.into(),
        source,
    };
    let admin: AdminClient<DefaultClientContext> = client_config(brokers).create().map_err(kerr)?;
    let new: Vec<NewTopic> = topics
        .iter()
        .map(|(t, p)| NewTopic::new(t, *p, TopicReplication::Fixed(1)))
        .collect();
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
    for result in admin.create_topics(&new, &opts).await.map_err(kerr)? {
        match result {
            Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((topic, code)) => return Err(ToolError::Topic { topic, code }),
        }
    }
    Ok(())
}

/// A sample order record: every JSON type, exact decimals.
pub fn sample_record(n: u64) -> String {
    json!({
        "id": format!("order-{n:06}"),
        "customer": { "id": n % 97, "name": format!("customer {}", n % 97), "vip": n % 5 == 0 },
        "amount": serde_json::Number::from_string_unchecked(format!("{}.{:02}", n % 1000, n % 100)),
        "quantity": n % 7 + 1,
        "paid": n % 3 != 0,
        "coupon": null,
        "tags": ["sample", if n % 2 == 0 { "even" } else { "odd" }],
    })
    .to_string()
}

/// Produces `values` to `topic` (round-robin over partitions, or by `key`);
/// returns how many were acknowledged.
pub async fn produce(
    brokers: &str,
    topic: &str,
    values: impl Iterator<Item = (Option<String>, String)>,
) -> Result<u64, ToolError> {
    let kerr = |source| ToolError::Kafka {
        brokers: brokers.into(),
        source,
    };
    let producer: FutureProducer = client_config(brokers)
        .set("linger.ms", "5")
        .set("message.timeout.ms", "30000")
        .create()
        .map_err(kerr)?;
    let mut pending = Vec::new();
    let mut sent = 0;
    for (key, value) in values {
        let mut rec = FutureRecord::<String, String>::to(topic).payload(&value);
        if let Some(k) = &key {
            rec = rec.key(k);
        }
        let fut = producer.send_result(rec).map_err(|(e, _)| kerr(e))?;
        pending.push(fut);
        if pending.len() >= 10_000 {
            sent += await_all(&mut pending).await.map_err(kerr)?;
        }
    }
    sent += await_all(&mut pending).await.map_err(kerr)?;
    Ok(sent)
}

async fn await_all(
    pending: &mut Vec<rdkafka::producer::DeliveryFuture>,
) -> Result<u64, KafkaError> {
    let mut n = 0;
    for fut in pending.drain(..) {
        match fut.await {
            Ok(Ok(_)) => n += 1,
            Ok(Err((e, _))) => return Err(e),
            Err(_) => return Err(KafkaError::Canceled),
        }
    }
    Ok(n)
}

/// Counts a table's items and returns up to `limit` of them as JSON lines.
pub async fn show_table(
    dynamo: &Dynamo,
    table: &str,
    limit: usize,
) -> Result<(u64, Vec<String>), ToolError> {
    let client = dynamo.client();
    let derr = |e: &dyn std::fmt::Display| {
        ToolError::Dynamo(format!("{table} at {}: {e}", dynamo.endpoint()))
    };
    let mut count = 0u64;
    let mut start = None;
    loop {
        let out = client
            .scan()
            .table_name(table)
            .select(Select::Count)
            .set_exclusive_start_key(start)
            .send()
            .await
            .map_err(|e| derr(&aws_sdk_dynamodb::error::DisplayErrorContext(e)))?;
        count += out.count() as u64;
        start = out.last_evaluated_key().cloned();
        if start.is_none() {
            break;
        }
    }
    let sample = client
        .scan()
        .table_name(table)
        .limit(limit.max(1) as i32)
        .send()
        .await
        .map_err(|e| derr(&aws_sdk_dynamodb::error::DisplayErrorContext(e)))?;
    let mut lines: Vec<String> = sample
        .items()
        .iter()
        .take(limit)
        .map(|item| {
            let mut keys: Vec<_> = item.keys().collect();
            keys.sort();
            let obj: serde_json::Map<String, serde_json::Value> = keys
                .into_iter()
                .map(|k| (k.clone(), from_attr(&item[k])))
                .collect();
            serde_json::Value::Object(obj).to_string()
        })
        .collect();
    lines.sort();
    Ok((count, lines))
}

#[cfg(test)]
mod tests {
    #[test]
    fn sample_records_keep_exact_decimals() {
        let r = super::sample_record(1210);
        assert!(r.contains(r#""amount":210.10"#), "{r}");
        assert!(r.contains(r#""id":"order-001210""#), "{r}");
    }
}
