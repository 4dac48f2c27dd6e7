//! The record as the pipeline carries it: the consumed message's key, value,
//! headers and timestamp, owned, plus where to ack it. It belongs to the
//! pipeline, not to the Kafka client: the source builds it from what it
//! polled, the sink and the dead-letter topic read it, and tests build it
//! from plain bytes.

use crate::acks::RecordRef;

/// A consumed record and where to ack it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    /// The message's headers, in order (a header may have no value).
    pub headers: Vec<(String, Option<Vec<u8>>)>,
    /// Milliseconds since the epoch, when the message carries a timestamp.
    pub timestamp_ms: Option<i64>,
    pub at: RecordRef,
}

impl Record {
    /// A record with a value only (tests, tools).
    pub fn with_value(at: RecordRef, value: &[u8]) -> Self {
        Self {
            key: None,
            value: Some(value.to_vec()),
            headers: Vec::new(),
            timestamp_ms: None,
            at,
        }
    }

    /// Bytes this record holds in memory (key, value, headers), for the
    /// pipeline's byte bound.
    pub fn size(&self) -> usize {
        let headers: usize = self
            .headers
            .iter()
            .map(|(k, v)| k.len() + v.as_ref().map_or(0, Vec::len))
            .sum();
        self.key.as_ref().map_or(0, Vec::len) + self.value.as_ref().map_or(0, Vec::len) + headers
    }
}
