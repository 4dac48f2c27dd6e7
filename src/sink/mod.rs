//! The DynamoDB side of the data path.
//!
//! - [`Sink`]: the two calls the worker makes (BatchWriteItem, DescribeTable),
//!   as a seam: [`dynamodb`] implements it with the AWS SDK (retries
//!   disabled, the one place SDK errors are classified); tests use a
//!   recording fake.
//! - [`batch`]: batch assembly under DynamoDB's limits.
//! - [`writer`]: the write loop of one batch (pacing, unprocessed items,
//!   throttles, transient errors, bisection of rejected calls, fencing of
//!   revoked partitions).
//! - [`tables`]: the tables the routes write to: route resolution, the
//!   capacity poll and this worker's share of each table.
//!
//! Throttle control itself (strategies, pacer, the per-table `Control`) lives
//! in [`crate::throttle`].

use std::future::Future;
use std::pin::Pin;

use crate::decode::{Item, KeySchema};

pub mod batch;
pub mod dynamodb;
#[cfg(test)]
pub mod fake;
pub mod tables;
pub mod writer;

/// What the caller does next after a failed DynamoDB call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WriteError {
    /// Capacity exceeded (ProvisionedThroughputExceeded, ThrottlingException,
    /// RequestLimitExceeded): back off, then retry. The scope is what
    /// DynamoDB's `ThrottlingReasons` say was exceeded.
    #[error("throttled ({1}): {0}")]
    Throttled(String, ThrottleScope),
    /// Network failure, timeout, 5xx: retry after a backoff.
    #[error("transient failure: {0}")]
    Retryable(String),
    /// The request itself is invalid (ValidationException and kin): retrying
    /// cannot help; the records involved are dead-lettered.
    #[error("rejected by DynamoDB: {0}")]
    Rejected(String),
    /// Misconfiguration (missing table, bad credentials, no permission): stop
    /// the worker without committing what was not written.
    #[error("fatal: {0}")]
    Fatal(String),
}

/// What a throttle says was exceeded, from its `ThrottlingReasons`
/// (`{Table|Index}Write{ProvisionedThroughputExceeded|KeyRangeThroughputExceeded|
/// AccountLimitExceeded|MaxOnDemandThroughputExceeded}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ThrottleScope {
    /// The table's (or an index's) provisioned capacity, or no reason given.
    Table,
    /// A key range (a partition) over its own maximum while the table has
    /// room: only the records of those keys should slow down.
    KeyRange,
    /// An account limit or the table's on-demand maximum: a ceiling, not a
    /// level to probe past.
    Ceiling,
}

impl ThrottleScope {
    /// The scope of a throttle given its reasons: a ceiling if any reason is
    /// one, else the table if any reason is the table's capacity, else a key
    /// range if every reason is one; the table when none is given.
    pub fn of<'a>(reasons: impl IntoIterator<Item = &'a str>) -> Self {
        let reasons: Vec<&str> = reasons.into_iter().collect();
        if reasons
            .iter()
            .any(|r| r.contains("AccountLimit") || r.contains("MaxOnDemand"))
        {
            ThrottleScope::Ceiling
        } else if !reasons.is_empty()
            && reasons
                .iter()
                .all(|r| r.starts_with("Table") && r.contains("KeyRange"))
        {
            // (An index's key range is hot by the index's key, which the
            // table's keys paced apart do not follow: the table's signal.)
            ThrottleScope::KeyRange
        } else {
            ThrottleScope::Table
        }
    }
}

impl std::fmt::Display for ThrottleScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ThrottleScope::Table => "table",
            ThrottleScope::KeyRange => "key range",
            ThrottleScope::Ceiling => "account or on-demand maximum",
        })
    }
}

/// The outcome of one BatchWriteItem call that DynamoDB answered with 200.
#[derive(Debug, Default, Clone)]
pub struct BatchOutcome {
    /// Items DynamoDB did not write (capacity), to send again.
    pub unprocessed: Vec<Item>,
    /// Write capacity DynamoDB reports consumed against the table's own
    /// capacity, when it reports it: the total less its global secondary
    /// indexes' (each has a capacity of its own; a local secondary index's
    /// writes draw on the table's).
    pub consumed_wcu: Option<f64>,
    /// Of that, the table's items' own units (ConsumedCapacity's `Table`
    /// part, without any index's), when DynamoDB reports the breakdown:
    /// what a global index's units are measured against.
    pub table_wcu: Option<f64>,
    /// Write capacity each global secondary index consumed (by name), when
    /// DynamoDB reports the breakdown.
    pub index_wcu: Vec<(String, f64)>,
}

/// A global secondary index as DescribeTable shows it (defined beside what
/// measures its bound).
pub use crate::throttle::indexes::IndexInfo;

/// A table as DescribeTable shows it: its key and provisioned write capacity
/// (None for on-demand tables), an on-demand table's `MaxWriteRequestUnits`
/// (None: no maximum set) and its `WarmThroughput.WriteUnitsPerSecond` (what
/// it is ready to take at once; None: not reported), and its global
/// secondary indexes (every write to the table that carries an index's key
/// is a write to the index too, and an index over its capacity throttles
/// the table's writes: `IndexWriteProvisionedThroughputExceeded`).
#[derive(Debug, Clone, PartialEq)]
pub struct TableInfo {
    pub key: KeySchema,
    pub capacity: Option<f64>,
    pub max_write: Option<f64>,
    pub warm: Option<f64>,
    pub indexes: Vec<IndexInfo>,
}

impl TableInfo {
    /// What the table admits at most: its provisioned capacity, or an
    /// on-demand table's maximum (None: on demand without one).
    pub fn limit(&self) -> Option<f64> {
        self.capacity.or(self.max_write)
    }
}

/// A future the sink returns (boxed: the trait is used as `dyn Sink`).
pub type SinkFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, WriteError>> + Send + 'a>>;

/// The calls the worker makes to DynamoDB.
pub trait Sink: Send + Sync + std::fmt::Debug {
    /// One BatchWriteItem call (at most 25 puts) for one table.
    fn batch_write<'a>(&'a self, table: &'a str, items: Vec<Item>) -> SinkFuture<'a, BatchOutcome>;

    /// DescribeTable: the table's key and provisioned write capacity.
    fn describe<'a>(&'a self, table: &'a str) -> SinkFuture<'a, TableInfo>;
}
