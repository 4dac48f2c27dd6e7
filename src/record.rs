//! The record as the pipeline carries it: the consumed message's key, value,
//! headers and timestamp, owned, plus where to ack it. It belongs to the
//! pipeline, not to the Kafka client: the source builds it from what it
//! polled, the sink and the dead-letter topic read it, and tests build it
//! from plain bytes.

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;

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
    /// Its bytes against the pipeline's byte budget, given back when the
    /// record is dropped (written, dead-lettered or abandoned).
    pub charge: Charge,
}

/// Bytes held against a shared budget until dropped. A clone is not charged.
#[derive(Debug, Default)]
pub struct Charge {
    bytes: usize,
    budget: Option<Arc<AtomicUsize>>,
}

impl Charge {
    pub fn new(budget: &Arc<AtomicUsize>, bytes: usize) -> Self {
        budget.fetch_add(bytes, Relaxed);
        Self {
            bytes,
            budget: Some(budget.clone()),
        }
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        if let Some(b) = &self.budget {
            b.fetch_sub(self.bytes, Relaxed);
        }
    }
}

impl Clone for Charge {
    fn clone(&self) -> Self {
        Self::default()
    }
}

impl PartialEq for Charge {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for Charge {}

impl Record {
    /// A record with a value only (tests, tools).
    pub fn with_value(at: RecordRef, value: &[u8]) -> Self {
        Self {
            key: None,
            value: Some(value.to_vec()),
            headers: Vec::new(),
            timestamp_ms: None,
            at,
            charge: Charge::default(),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_gives_its_bytes_back_when_dropped() {
        let budget = Arc::new(AtomicUsize::new(0));
        let at = RecordRef {
            topic: "t".into(),
            partition: 0,
            offset: 0,
            epoch: 1,
        };
        let mut r = Record::with_value(at, b"12345");
        r.charge = Charge::new(&budget, r.size());
        let copy = r.clone();
        assert_eq!(budget.load(Relaxed), 5);
        drop(copy);
        assert_eq!(budget.load(Relaxed), 5, "a clone is not charged");
        drop(r);
        assert_eq!(budget.load(Relaxed), 0);
    }
}
