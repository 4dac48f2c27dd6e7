//! The DynamoDB side: a client with the SDK's retries disabled, the one place
//! where SDK errors are classified ([`dynamodb`]), batch assembly under
//! DynamoDB's limits ([`batch`]), the per-table throttle control shared by a
//! table's writers ([`control`]), and the write loop that retries unprocessed
//! items and isolates rejected ones ([`writer`]).

pub mod batch;
pub mod control;
pub mod dynamodb;
pub mod writer;

/// What the caller does next after a failed DynamoDB call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WriteError {
    /// Capacity exceeded (ProvisionedThroughputExceeded, ThrottlingException,
    /// RequestLimitExceeded): back off, then retry.
    #[error("throttled: {0}")]
    Throttled(String),
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
