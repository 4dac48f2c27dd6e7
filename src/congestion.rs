//! Which tables are congested, by source topic. The pipeline counts the
//! records queued for each table (routed, not yet taken into a batch); a
//! table whose queue reaches `high` is congested until it drains to `low`.
//! The source pauses the partitions of a congested table's topics, so a slow,
//! throttled or unreachable table holds up only the partitions that feed it.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;

/// One table's queue.
#[derive(Debug)]
pub struct Depth {
    queued: AtomicUsize,
    congested: AtomicBool,
    high: usize,
    low: usize,
    /// Shared by all tables: bumped at every change of a congested flag.
    changes: Arc<AtomicU64>,
}

impl Depth {
    /// A record was queued for the table.
    pub fn push(&self) {
        let n = self.queued.fetch_add(1, SeqCst) + 1;
        if n >= self.high && !self.congested.swap(true, SeqCst) {
            self.changes.fetch_add(1, SeqCst);
        }
    }

    /// A record left the queue.
    pub fn pop(&self) {
        let n = self.queued.fetch_sub(1, SeqCst).saturating_sub(1);
        if n <= self.low && self.congested.swap(false, SeqCst) {
            self.changes.fetch_add(1, SeqCst);
        }
    }

    pub fn queued(&self) -> usize {
        self.queued.load(SeqCst)
    }

    pub fn is_congested(&self) -> bool {
        self.congested.load(SeqCst)
    }
}

/// The queues of all routed tables, and which topics feed each.
#[derive(Debug)]
pub struct Congestion {
    tables: HashMap<Arc<str>, Arc<Depth>>,
    topics: Vec<(String, Arc<Depth>)>,
    changes: Arc<AtomicU64>,
}

impl Congestion {
    /// `routes`: (topic, table). A table is congested from `high` queued
    /// records until it is back to half of that.
    pub fn new<'a>(routes: impl IntoIterator<Item = (&'a str, &'a Arc<str>)>, high: usize) -> Self {
        let changes = Arc::new(AtomicU64::new(0));
        let mut tables: HashMap<Arc<str>, Arc<Depth>> = HashMap::new();
        let mut topics = Vec::new();
        for (topic, table) in routes {
            let depth = tables
                .entry(table.clone())
                .or_insert_with(|| {
                    Arc::new(Depth {
                        queued: AtomicUsize::new(0),
                        congested: AtomicBool::new(false),
                        high: high.max(1),
                        low: high / 2,
                        changes: changes.clone(),
                    })
                })
                .clone();
            topics.push((topic.to_string(), depth));
        }
        Self {
            tables,
            topics,
            changes,
        }
    }

    /// The queue of a routed table.
    pub fn table(&self, name: &str) -> Option<Arc<Depth>> {
        self.tables.get(name).cloned()
    }

    /// A number that changes whenever a table becomes congested or clears:
    /// read it before [`Self::congested_topics`], and look again when it moved.
    pub fn changes(&self) -> u64 {
        self.changes.load(SeqCst)
    }

    /// The topics whose table is congested.
    pub fn congested_topics(&self) -> BTreeSet<String> {
        self.topics
            .iter()
            .filter(|(_, d)| d.is_congested())
            .map(|(t, _)| t.clone())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn two_tables() -> Congestion {
        let (a, b): (Arc<str>, Arc<str>) = ("A".into(), "B".into());
        Congestion::new([("a1", &a), ("a2", &a), ("b", &b)], 4)
    }

    #[test]
    fn a_table_is_congested_from_high_until_back_to_half() {
        let c = two_tables();
        let a = c.table("A").unwrap();
        let before = c.changes();
        for _ in 0..3 {
            a.push();
        }
        assert!(c.congested_topics().is_empty());
        a.push();
        assert_eq!(
            c.congested_topics(),
            BTreeSet::from(["a1".into(), "a2".into()])
        );
        assert_ne!(c.changes(), before);
        let flagged = c.changes();
        a.pop();
        a.push();
        a.pop();
        assert!(a.is_congested(), "3 queued: above the low mark");
        assert_eq!(c.changes(), flagged, "no change without a flip");
        a.pop();
        assert!(!a.is_congested() && c.congested_topics().is_empty());
        assert_eq!(a.queued(), 2);
    }

    #[test]
    fn tables_are_counted_apart() {
        let c = two_tables();
        let (a, b) = (c.table("A").unwrap(), c.table("B").unwrap());
        for _ in 0..10 {
            a.push();
        }
        b.push();
        assert_eq!(c.congested_topics().len(), 2);
        assert!(!b.is_congested());
        assert!(c.table("C").is_none());
    }
}
