//! A recording fake of DynamoDB for fast unit tests of the write path under
//! tokio's paused clock: each BatchWriteItem call is recorded (when, which
//! keys) and answered by a script; DescribeTable answers from a fixed map.
//! Never the proof that the product works: the integration tests talk to
//! LocalStack.

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use parking_lot::Mutex;

use super::{BatchOutcome, Sink, SinkFuture, TableInfo, WriteError};
use crate::decode::Item;

/// One BatchWriteItem call as the fake saw it.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    /// When it arrived, since the fake was made (tokio's clock).
    pub at: Duration,
    pub table: String,
    /// The `id` attribute of each item, in order.
    pub ids: Vec<String>,
}

/// Answers call number `n` (from 0) with these items.
pub type Script = Box<dyn FnMut(usize, &[Item]) -> Result<BatchOutcome, WriteError> + Send>;

pub struct FakeSink {
    start: tokio::time::Instant,
    calls: Mutex<Vec<Call>>,
    script: Mutex<Script>,
    /// Time each call takes.
    pub latency: Duration,
    pub tables: HashMap<String, TableInfo>,
    /// DescribeTable answers 503 until then (an outage).
    pub describe_down_until: Mutex<Option<tokio::time::Instant>>,
}

impl std::fmt::Debug for FakeSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeSink")
            .field("calls", &self.calls.lock().len())
            .finish()
    }
}

impl FakeSink {
    /// A fake that answers every call with `script`.
    pub fn new(script: Script) -> Self {
        Self {
            start: tokio::time::Instant::now(),
            calls: Mutex::new(Vec::new()),
            script: Mutex::new(script),
            latency: Duration::from_millis(5),
            tables: HashMap::new(),
            describe_down_until: Mutex::new(None),
        }
    }

    /// A fake that writes everything.
    pub fn accepting() -> Self {
        Self::new(Box::new(|_, _| Ok(BatchOutcome::default())))
    }

    pub fn calls(&self) -> Vec<Call> {
        self.calls.lock().clone()
    }
}

/// The `id` attribute of an item (empty when it has none).
pub fn id_of(item: &Item) -> String {
    match item.get("id") {
        Some(AttributeValue::S(s)) => s.clone(),
        Some(AttributeValue::N(n)) => n.clone(),
        _ => String::new(),
    }
}

/// Answers with these items left unprocessed.
pub fn unprocessed(items: &[Item], which: impl Fn(&str) -> bool) -> BatchOutcome {
    BatchOutcome {
        unprocessed: items.iter().filter(|i| which(&id_of(i))).cloned().collect(),
        consumed_wcu: None,
        table_wcu: None,
        index_wcu: Vec::new(),
    }
}

impl Sink for FakeSink {
    fn batch_write<'a>(&'a self, table: &'a str, items: Vec<Item>) -> SinkFuture<'a, BatchOutcome> {
        Box::pin(async move {
            let n = {
                let mut calls = self.calls.lock();
                calls.push(Call {
                    at: self.start.elapsed(),
                    table: table.to_string(),
                    ids: items.iter().map(id_of).collect(),
                });
                calls.len() - 1
            };
            tokio::time::sleep(self.latency).await;
            (self.script.lock())(n, &items)
        })
    }

    fn describe<'a>(&'a self, table: &'a str) -> SinkFuture<'a, TableInfo> {
        Box::pin(async move {
            let down = *self.describe_down_until.lock();
            if down.is_some_and(|t| tokio::time::Instant::now() < t) {
                return Err(WriteError::Retryable("HTTP 503 ServiceUnavailable".into()));
            }
            self.tables
                .get(table)
                .cloned()
                .ok_or_else(|| WriteError::Fatal(format!("table {table} not found")))
        })
    }
}
