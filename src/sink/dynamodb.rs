//! The DynamoDB client: built with the SDK's own retries **disabled** (one
//! layer retries: ours, so the backoff sees every throttle), and the only place
//! where `SdkError`s are classified into [`WriteError`]s.
//!
//! Endpoint and region come from the config or the standard AWS environment
//! (`AWS_ENDPOINT_URL`, `AWS_REGION`); credentials from the default provider
//! chain, never from our config, never logged.

use std::collections::HashMap;

use aws_sdk_dynamodb::config::retry::RetryConfig;
use aws_sdk_dynamodb::config::timeout::TimeoutConfig;
use aws_sdk_dynamodb::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::types::{
    Capacity, ConsumedCapacity, KeyType as DdbKeyType, PutRequest, ReturnConsumedCapacity,
    ScalarAttributeType, WriteRequest,
};
use aws_sdk_dynamodb::Client;

use super::{BatchOutcome, IndexInfo, Sink, SinkFuture, TableInfo, ThrottleScope, WriteError};
use crate::config::{DynamoSettings, SdkRetryMode};
use crate::decode::{Item, KeyAttr, KeySchema, KeyType};
use aws_sdk_dynamodb::operation::batch_write_item::BatchWriteItemError;

/// Error codes DynamoDB uses for capacity throttling.
const THROTTLE_CODES: &[&str] = &[
    "ProvisionedThroughputExceededException",
    "ThrottlingException",
    "RequestLimitExceeded",
];
/// Error codes that say the request can never succeed as sent.
const REJECT_CODES: &[&str] = &["ValidationException", "SerializationException"];
/// A condition of the table, not of a record: an item collection (a partition
/// key's items with a local secondary index) reached 10 GB. Dead-lettering
/// would empty the stream into the dead-letter topic; the worker stops and
/// says why (see `classify_service`).
const TABLE_CONDITION_CODES: &[&str] = &["ItemCollectionSizeLimitExceededException"];
/// Error codes that are transient despite a 4xx status.
const RETRY_CODES: &[&str] = &[
    "ExpiredTokenException",
    "TransactionConflictException",
    "ReplicatedWriteConflictException",
];

/// A DynamoDB client for the write path.
#[derive(Debug, Clone)]
pub struct Dynamo {
    client: Client,
    endpoint: String,
}

impl Dynamo {
    /// Builds the client from the AWS environment plus our overrides. The
    /// SDK's own retries stay off unless `retry` asks for them (to compare).
    pub async fn connect(settings: &DynamoSettings, retry: SdkRetryMode) -> Dynamo {
        let mut loader = aws_config::defaults(aws_config::BehaviorVersion::latest());
        if let Some(region) = &settings.region {
            loader = loader.region(aws_config::Region::new(region.clone()));
        }
        let shared = loader.load().await;
        let mut builder = aws_sdk_dynamodb::config::Builder::from(&shared)
            .retry_config(match retry {
                SdkRetryMode::Off => RetryConfig::disabled(),
                SdkRetryMode::Standard => RetryConfig::standard(),
                SdkRetryMode::Adaptive => RetryConfig::adaptive(),
            })
            .timeout_config(
                TimeoutConfig::builder()
                    .operation_attempt_timeout(settings.request_timeout)
                    .connect_timeout(
                        settings
                            .request_timeout
                            .min(std::time::Duration::from_secs(5)),
                    )
                    .build(),
            );
        if let Some(url) = &settings.endpoint_url {
            builder = builder.endpoint_url(url);
        }
        let endpoint = settings
            .endpoint_url
            .clone()
            .or_else(|| std::env::var("AWS_ENDPOINT_URL_DYNAMODB").ok())
            .or_else(|| std::env::var("AWS_ENDPOINT_URL").ok())
            .unwrap_or_else(|| {
                let region = shared
                    .region()
                    .map_or("<no region>".into(), |r| r.to_string());
                format!("dynamodb.{region}.amazonaws.com")
            });
        Dynamo {
            client: Client::from_conf(builder.build()),
            endpoint,
        }
    }

    /// A client for a local emulator (LocalStack, DynamoDB Local) at
    /// `endpoint`: region and credentials from the environment when set, else
    /// `us-east-1` and dummy keys (emulators do not check them).
    pub fn local(endpoint: &str) -> Dynamo {
        use aws_sdk_dynamodb::config::{BehaviorVersion, Credentials, Region};
        let env = |k: &str, d: &str| std::env::var(k).unwrap_or_else(|_| d.to_string());
        let creds = Credentials::new(
            env("AWS_ACCESS_KEY_ID", "test"),
            env("AWS_SECRET_ACCESS_KEY", "test"),
            None,
            None,
            "local-emulator",
        );
        let conf = aws_sdk_dynamodb::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new(env("AWS_REGION", "us-east-1")))
            .endpoint_url(endpoint)
            .credentials_provider(creds)
            .retry_config(RetryConfig::standard())
            .build();
        Dynamo {
            client: Client::from_conf(conf),
            endpoint: endpoint.to_string(),
        }
    }

    /// The underlying SDK client.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Where requests go, for error messages.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Reads a table's key schema and provisioned write capacity (None for
    /// on-demand tables) with DescribeTable.
    pub async fn describe(&self, table: &str) -> Result<TableInfo, WriteError> {
        let out = self
            .client
            .describe_table()
            .table_name(table)
            .send()
            .await
            .map_err(|e| self.classify(e, &format!("DescribeTable {table}")))?;
        let desc = out.table().ok_or_else(|| {
            WriteError::Fatal(format!("DescribeTable {table}: no table description"))
        })?;
        let types: HashMap<&str, KeyType> = desc
            .attribute_definitions()
            .iter()
            .map(|d| {
                let kind = match d.attribute_type() {
                    ScalarAttributeType::N => KeyType::N,
                    ScalarAttributeType::B => KeyType::B,
                    _ => KeyType::S,
                };
                (d.attribute_name(), kind)
            })
            .collect();
        let attr = |role: DdbKeyType| {
            desc.key_schema()
                .iter()
                .find(|k| k.key_type() == &role)
                .map(|k| KeyAttr {
                    name: k.attribute_name().to_string(),
                    kind: types.get(k.attribute_name()).copied().unwrap_or(KeyType::S),
                })
        };
        let hash = attr(DdbKeyType::Hash)
            .ok_or_else(|| WriteError::Fatal(format!("table {table} has no partition key")))?;
        // DescribeTable's unit figures: -1, 0 or absent is none.
        let positive = |w: Option<i64>| w.filter(|w| *w > 0).map(|w| w as f64);
        let capacity = positive(
            desc.provisioned_throughput()
                .and_then(|p| p.write_capacity_units()),
        );
        let schema = KeySchema {
            hash,
            range: attr(DdbKeyType::Range),
        };
        // An on-demand maximum.
        let max_write = positive(
            desc.on_demand_throughput()
                .and_then(|o| o.max_write_request_units()),
        );
        let warm = positive(
            desc.warm_throughput()
                .and_then(|w| w.write_units_per_second()),
        );
        // Its global secondary indexes: each index's own write capacity
        // (provisioned, or an on-demand maximum).
        let indexes = desc
            .global_secondary_indexes()
            .iter()
            .filter_map(|g| {
                let name = g.index_name()?.to_string();
                let keys = g
                    .key_schema()
                    .iter()
                    .map(|k| k.attribute_name().to_string())
                    .collect();
                let capacity = positive(
                    g.provisioned_throughput()
                        .and_then(|p| p.write_capacity_units()),
                )
                .or_else(|| {
                    positive(
                        g.on_demand_throughput()
                            .and_then(|o| o.max_write_request_units()),
                    )
                });
                Some(IndexInfo {
                    name,
                    keys,
                    capacity,
                })
            })
            .collect();
        Ok(TableInfo {
            key: schema,
            capacity,
            max_write,
            warm,
            indexes,
        })
    }

    /// One BatchWriteItem call (at most 25 puts) for one table.
    pub async fn batch_write(
        &self,
        table: &str,
        items: Vec<Item>,
    ) -> Result<BatchOutcome, WriteError> {
        let requests = items
            .into_iter()
            .map(|item| {
                let put = PutRequest::builder()
                    .set_item(Some(item))
                    .build()
                    .expect("item is set");
                WriteRequest::builder().put_request(put).build()
            })
            .collect();
        let out = self
            .client
            .batch_write_item()
            .request_items(table, requests)
            .return_consumed_capacity(ReturnConsumedCapacity::Indexes)
            .send()
            .await
            .map_err(|e| {
                let scope = throttle_scope(&e);
                match self.classify(e, &format!("BatchWriteItem {table}")) {
                    WriteError::Throttled(m, _) => WriteError::Throttled(m, scope),
                    other => other,
                }
            })?;
        let unprocessed = out
            .unprocessed_items()
            .and_then(|m| m.get(table))
            .map(|reqs| {
                reqs.iter()
                    .filter_map(|r| r.put_request().map(|p| p.item().clone()))
                    .collect()
            })
            .unwrap_or_default();
        let Consumed {
            against_table: consumed_wcu,
            table: table_wcu,
            per_index: index_wcu,
        } = consumed(out.consumed_capacity());
        Ok(BatchOutcome {
            unprocessed,
            consumed_wcu,
            table_wcu,
            index_wcu,
        })
    }

    /// Classifies an SDK error; `what` names the call for the message.
    fn classify<E>(&self, err: SdkError<E>, what: &str) -> WriteError
    where
        E: ProvideErrorMetadata + std::error::Error + 'static,
    {
        let detail = |e: &dyn std::fmt::Display| format!("{what} at {}: {e}", self.endpoint);
        match &err {
            SdkError::ConstructionFailure(_) => {
                WriteError::Fatal(detail(&DisplayErrorContext(&err)))
            }
            SdkError::TimeoutError(_)
            | SdkError::DispatchFailure(_)
            | SdkError::ResponseError(_) => {
                WriteError::Retryable(detail(&DisplayErrorContext(&err)))
            }
            SdkError::ServiceError(ctx) => {
                let status = ctx.raw().status().as_u16();
                let code = err.code().unwrap_or("");
                let message = err.message().unwrap_or("");
                let text = detail(&format!("HTTP {status} {code}: {message}"));
                classify_service(status, code, text)
            }
            _ => WriteError::Retryable(detail(&DisplayErrorContext(&err))),
        }
    }
}

impl Sink for Dynamo {
    fn batch_write<'a>(&'a self, table: &'a str, items: Vec<Item>) -> SinkFuture<'a, BatchOutcome> {
        Box::pin(Dynamo::batch_write(self, table, items))
    }

    fn describe<'a>(&'a self, table: &'a str) -> SinkFuture<'a, TableInfo> {
        Box::pin(Dynamo::describe(self, table))
    }
}

/// What a BatchWriteItem throttle's `ThrottlingReasons` say was exceeded.
fn throttle_scope(err: &SdkError<BatchWriteItemError>) -> ThrottleScope {
    let reasons = match err.as_service_error() {
        Some(BatchWriteItemError::ProvisionedThroughputExceededException(e)) => {
            e.throttling_reasons()
        }
        Some(BatchWriteItemError::ThrottlingException(e)) => e.throttling_reasons(),
        Some(BatchWriteItemError::RequestLimitExceeded(e)) => e.throttling_reasons(),
        _ => &[],
    };
    ThrottleScope::of(reasons.iter().filter_map(|r| r.reason()))
}

/// The decision table for errors DynamoDB answered.
fn classify_service(status: u16, code: &str, text: String) -> WriteError {
    if THROTTLE_CODES.contains(&code) || status == 429 {
        WriteError::Throttled(text, ThrottleScope::Table)
    } else if TABLE_CONDITION_CODES.contains(&code) {
        WriteError::Fatal(format!(
            "{text} (an item collection reached DynamoDB's 10 GB limit: delete items of that partition key or drop the local secondary index, then restart)"
        ))
    } else if REJECT_CODES.contains(&code) {
        WriteError::Rejected(text)
    } else if RETRY_CODES.contains(&code) || status >= 500 {
        WriteError::Retryable(text)
    } else {
        WriteError::Fatal(text)
    }
}

/// What an answer's ConsumedCapacity (asked for with `INDEXES`) says.
#[derive(Debug, PartialEq)]
struct Consumed {
    /// The units that count against the table's own capacity: the total
    /// less its global secondary indexes' (each of which has a capacity of
    /// its own; a local secondary index's writes draw on the table's). None
    /// where nothing was reported.
    against_table: Option<f64>,
    /// The table's items' own units (the `Table` part), where reported.
    table: Option<f64>,
    /// Each global index's units, by name.
    per_index: Vec<(String, f64)>,
}

fn consumed(list: &[ConsumedCapacity]) -> Consumed {
    let sum = |m: Option<&HashMap<String, Capacity>>| -> f64 {
        m.into_iter()
            .flat_map(|m| m.values())
            .filter_map(Capacity::capacity_units)
            .sum()
    };
    let table = list
        .iter()
        .filter_map(|c| {
            let global = sum(c.global_secondary_indexes());
            let parts = || {
                let t = c.table()?.capacity_units()?;
                Some(t + sum(c.local_secondary_indexes()))
            };
            c.capacity_units()
                .map(|t| (t - global).max(0.0))
                .or_else(parts)
        })
        .reduce(|a, b| a + b);
    let per_index = list
        .iter()
        .filter_map(ConsumedCapacity::global_secondary_indexes)
        .flatten()
        .filter_map(|(name, c)| Some((name.clone(), c.capacity_units()?)))
        .collect();
    let own = list
        .iter()
        .filter_map(|c| c.table()?.capacity_units())
        .reduce(|a, b| a + b);
    Consumed {
        against_table: table,
        table: own,
        per_index,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cap(units: f64) -> Capacity {
        Capacity::builder().capacity_units(units).build()
    }

    #[test]
    fn consumed_capacity_counts_the_tables_units_apart_from_its_global_indexes() {
        // TOTAL (or the stand-in): no breakdown, the total is the table's.
        let total = ConsumedCapacity::builder().capacity_units(8.0).build();
        let c = consumed(&[total]);
        assert_eq!((c.against_table, c.table), (Some(8.0), None));
        assert!(c.per_index.is_empty());
        // INDEXES: 5 for the table's items, 1 for a local index (the
        // table's capacity), 3 for a global one (its own).
        let full = ConsumedCapacity::builder()
            .capacity_units(9.0)
            .table(cap(5.0))
            .local_secondary_indexes("by_date", cap(1.0))
            .global_secondary_indexes("by_g", cap(3.0))
            .build();
        let c = consumed(std::slice::from_ref(&full));
        assert_eq!(
            c,
            Consumed {
                against_table: Some(6.0),
                table: Some(5.0),
                per_index: vec![("by_g".to_string(), 3.0)],
            }
        );
        // Without the total, from the parts.
        let parts = ConsumedCapacity::builder()
            .table(cap(5.0))
            .local_secondary_indexes("by_date", cap(1.0))
            .global_secondary_indexes("by_g", cap(3.0))
            .build();
        assert_eq!(consumed(&[parts]).against_table, Some(6.0));
        assert_eq!(consumed(&[]).against_table, None);
    }

    #[test]
    fn throttling_reasons_give_the_throttles_scope() {
        use ThrottleScope::*;
        let cases: [(&[&str], ThrottleScope, &str); 8] = [
            (&[], Table, "no reason: the table"),
            (&["TableWriteKeyRangeThroughputExceeded"], KeyRange, ""),
            (
                &[
                    "TableWriteKeyRangeThroughputExceeded",
                    "TableWriteProvisionedThroughputExceeded",
                ],
                Table,
                "the table's capacity wins",
            ),
            (&["TableWriteMaxOnDemandThroughputExceeded"], Ceiling, ""),
            (&["IndexWriteAccountLimitExceeded"], Ceiling, ""),
            // Pacing the table's keys apart does not follow the index's key.
            (
                &["IndexWriteKeyRangeThroughputExceeded"],
                Table,
                "an index's key range: the table's signal",
            ),
            (&["IndexWriteProvisionedThroughputExceeded"], Table, ""),
            (&["SomethingNew"], Table, "an unknown reason"),
        ];
        for (reasons, want, why) in cases {
            assert_eq!(
                ThrottleScope::of(reasons.iter().copied()),
                want,
                "{reasons:?}: {why}"
            );
        }
    }

    #[test]
    fn service_errors_map_to_what_the_caller_does_next() {
        let c = |s, code: &str| classify_service(s, code, String::new());
        assert!(matches!(
            c(400, "ProvisionedThroughputExceededException"),
            WriteError::Throttled(..)
        ));
        assert!(matches!(
            c(400, "ThrottlingException"),
            WriteError::Throttled(..)
        ));
        assert!(matches!(
            c(400, "ValidationException"),
            WriteError::Rejected(_)
        ));
        assert!(matches!(
            c(500, "InternalServerError"),
            WriteError::Retryable(_)
        ));
        assert!(matches!(c(503, ""), WriteError::Retryable(_)));
        assert!(matches!(
            c(400, "ItemCollectionSizeLimitExceededException"),
            WriteError::Fatal(_)
        ));
        assert!(matches!(
            c(400, "ResourceNotFoundException"),
            WriteError::Fatal(_)
        ));
        assert!(matches!(
            c(400, "UnrecognizedClientException"),
            WriteError::Fatal(_)
        ));
        assert!(matches!(
            c(400, "AccessDeniedException"),
            WriteError::Fatal(_)
        ));
    }
}
