//! DynamoDB (LocalStack): the client, tables, scans.

use super::*;

pub async fn dynamo() -> Client {
    dynamo_at(DYNAMODB).await
}

/// A client of another DynamoDB endpoint (a proxy).
pub async fn dynamo_at(endpoint: &str) -> Client {
    Client::from_conf(config_for(endpoint).build())
}

/// A client of `endpoint` whose SDK never retries (every throttle seen),
/// and gives up on a call after 10 s: the benches' other writers loop
/// until told to stop, and a call that hung would hold their thread, and
/// the bench joining it, for good (a timed-out call counts as failed).
pub fn dynamo_without_retries(endpoint: &str) -> Client {
    let conf = config_for(endpoint)
        .retry_config(aws_sdk_dynamodb::config::retry::RetryConfig::disabled())
        .timeout_config(
            aws_sdk_dynamodb::config::timeout::TimeoutConfig::builder()
                .operation_timeout(std::time::Duration::from_secs(10))
                .build(),
        )
        .build();
    Client::from_conf(conf)
}

fn config_for(endpoint: &str) -> aws_sdk_dynamodb::config::Builder {
    aws_sdk_dynamodb::Config::builder()
        .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
        .region(aws_sdk_dynamodb::config::Region::new("us-east-1"))
        .endpoint_url(endpoint)
        .credentials_provider(aws_sdk_dynamodb::config::Credentials::new(
            "test", "test", None, None, "tests",
        ))
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

/// Adds a global secondary index `index` keyed by the number `n` (every
/// record of [`mixed_sizes`] carries it; all attributes projected) with
/// `wcu` provisioned write capacity, and waits until it is active.
pub async fn add_index_on_n(client: &Client, table: &str, index: &str, wcu: i64) {
    add_index_on(client, table, index, ("n", ScalarAttributeType::N), wcu).await
}

/// Adds a global secondary index `index` keyed by the attribute `key` (name
/// and type; all attributes projected) with `wcu` provisioned write
/// capacity, and waits until it is active.
pub async fn add_index_on(
    client: &Client,
    table: &str,
    index: &str,
    key: (&str, ScalarAttributeType),
    wcu: i64,
) {
    use aws_sdk_dynamodb::types::{
        CreateGlobalSecondaryIndexAction, GlobalSecondaryIndexUpdate, Projection, ProjectionType,
        ProvisionedThroughput,
    };
    let create = CreateGlobalSecondaryIndexAction::builder()
        .index_name(index)
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name(key.0)
                .key_type(KeyType::Hash)
                .build()
                .unwrap(),
        )
        .projection(
            Projection::builder()
                .projection_type(ProjectionType::All)
                .build(),
        )
        .provisioned_throughput(
            ProvisionedThroughput::builder()
                .read_capacity_units(5)
                .write_capacity_units(wcu)
                .build()
                .unwrap(),
        )
        .build()
        .unwrap();
    client
        .update_table()
        .table_name(table)
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name(key.0)
                .attribute_type(key.1)
                .build()
                .unwrap(),
        )
        .global_secondary_index_updates(
            GlobalSecondaryIndexUpdate::builder().create(create).build(),
        )
        .send()
        .await
        .expect("create the index");
    eventually(Duration::from_secs(30), "the index is active", || async {
        let Ok(d) = client.describe_table().table_name(table).send().await else {
            return false;
        };
        d.table().is_some_and(|t| {
            t.global_secondary_indexes().iter().any(|g| {
                g.index_name() == Some(index)
                    && g.index_status() == Some(&aws_sdk_dynamodb::types::IndexStatus::Active)
            })
        })
    })
    .await;
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
    count_where(client, table, None).await
}

/// The items of `table` that `filter` (a filter expression and its one
/// value, named `:v`) keeps; every item with None.
pub async fn count_where(
    client: &Client,
    table: &str,
    filter: Option<(&str, aws_sdk_dynamodb::types::AttributeValue)>,
) -> usize {
    let (expression, value) = filter.unzip();
    let values = value.map(|v| HashMap::from([(":v".to_string(), v)]));
    let mut n = 0;
    let mut start = None;
    loop {
        let page = client
            .scan()
            .table_name(table)
            .select(aws_sdk_dynamodb::types::Select::Count)
            .set_filter_expression(expression.map(str::to_string))
            .set_expression_attribute_values(values.clone())
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
