//! What a table's global secondary indexes leave its writes. Pure: the
//! answers' consumed capacity is passed in.
//!
//! Every item written to a table that carries an index's key attributes is
//! written to the index too, at the index's own cost (the projected item's
//! size; twice where a write moves an item's index key), and an index over
//! its own write capacity throttles the table's writes
//! (`IndexWriteProvisionedThroughputExceeded`), however much room the table
//! has. So the table's writes go at most at (the index's capacity) / (index
//! units per table unit), for every index with a capacity of its own. That
//! ratio is measured from ConsumedCapacity's breakdown (the writer asks for
//! `ReturnConsumedCapacity = INDEXES`): until [`MEASURED_AFTER`] table units
//! have been written, each index is taken to cost what the table does
//! (every item carries its key and all of it is projected: the most an
//! insert costs it). A sparse index (few items carry its key) or a narrow
//! projection then lets the table go faster.
//!
//! Without this, a table whose index has less capacity than the table has
//! throttles like a table shared with another writer at the difference,
//! while the pace is steered to the table's own capacity.

/// Table units written before the measured ratio replaces the prior (two
/// full batches of small items).
pub const MEASURED_AFTER: f64 = 50.0;

/// The units the ratios remember (older answers weigh less as more are
/// written): an index's share of the writes may change as the data does.
const MEMORY_UNITS: f64 = 5_000.0;

/// A bound that moved by more than this fraction is worth telling the
/// strategy (see [`IndexBound::observe`]).
const NOTICE: f64 = 0.02;

#[derive(Debug, Clone, PartialEq)]
struct Index {
    name: String,
    capacity: Option<f64>,
    /// Its units over the remembered writes.
    units: f64,
}

/// The indexes' capacities and what each costs per table unit.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct IndexBound {
    indexes: Vec<Index>,
    /// Table units over the remembered writes.
    table_units: f64,
    /// The bound last reported by [`IndexBound::observe`] as moved.
    told: Option<f64>,
}

impl IndexBound {
    /// The indexes as DescribeTable shows them now: (name, write capacity;
    /// None: not limited by a figure of its own). What was measured of an
    /// index that is still there is kept.
    pub fn set(&mut self, indexes: impl IntoIterator<Item = (String, Option<f64>)>) {
        let old = std::mem::take(&mut self.indexes);
        self.indexes = indexes
            .into_iter()
            .map(|(name, capacity)| {
                let units = old.iter().find(|i| i.name == name).map_or(0.0, |i| i.units);
                Index {
                    name,
                    capacity: capacity.filter(|c| *c > 0.0),
                    units,
                }
            })
            .collect();
    }

    /// One answer: `table` units the table itself consumed, and each
    /// index's (an index not named consumed nothing). Returns true when the
    /// bound moved by more than a little since it was last said to.
    pub fn observe(&mut self, table: f64, per_index: &[(String, f64)]) -> bool {
        if !(table.is_finite() && table > 0.0) {
            return false;
        }
        if self.table_units + table > MEMORY_UNITS {
            let keep = MEMORY_UNITS / (self.table_units + table);
            self.table_units *= keep;
            for i in &mut self.indexes {
                i.units *= keep;
            }
        }
        self.table_units += table;
        for (name, units) in per_index {
            if let Some(i) = self.indexes.iter_mut().find(|i| &i.name == name) {
                i.units += units.max(0.0);
            }
        }
        let now = self.bound();
        let moved = match (self.told, now) {
            (Some(a), Some(b)) => (a - b).abs() > NOTICE * a,
            (a, b) => a.is_some() != b.is_some(),
        };
        if moved {
            self.told = now;
        }
        moved
    }

    /// Index units per table unit for `i`: measured, or 1 before enough
    /// was written.
    fn ratio(&self, i: &Index) -> f64 {
        if self.table_units < MEASURED_AFTER {
            1.0
        } else {
            i.units / self.table_units
        }
    }

    /// The most the table's writes may go at for the indexes' sake, units/s
    /// (None: no index limits them), and the index that sets it.
    pub fn binding(&self) -> Option<(&str, f64)> {
        self.indexes
            .iter()
            .filter_map(|i| {
                let r = self.ratio(i);
                let c = i.capacity?;
                (r > 1e-6).then(|| (i.name.as_str(), c / r))
            })
            .min_by(|a, b| a.1.total_cmp(&b.1))
    }

    fn bound(&self) -> Option<f64> {
        self.binding().map(|(_, b)| b)
    }

    /// What the table admits for this job's writes: its own `capacity`, or
    /// an index's bound where lower (None: neither is known).
    pub fn capacity(&self, capacity: Option<f64>) -> Option<f64> {
        match (capacity, self.bound()) {
            (Some(c), Some(b)) => Some(c.min(b)),
            (c, b) => c.or(b),
        }
    }

    /// The index whose bound is below the table's `capacity` (None: the
    /// table's own capacity binds).
    pub fn bound_by(&self, capacity: Option<f64>) -> Option<&str> {
        let (name, b) = self.binding()?;
        capacity.is_none_or(|c| b < c).then_some(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(capacity: Option<f64>) -> IndexBound {
        let mut b = IndexBound::default();
        b.set([("by_g".to_string(), capacity)]);
        b
    }

    #[test]
    fn before_any_write_an_index_is_taken_to_cost_what_the_table_does() {
        let b = one(Some(50.0));
        assert_eq!(b.capacity(Some(200.0)), Some(50.0));
        assert_eq!(b.bound_by(Some(200.0)), Some("by_g"));
        // An index with more capacity than the table does not bind.
        assert_eq!(one(Some(400.0)).capacity(Some(200.0)), Some(200.0));
        assert_eq!(one(Some(400.0)).bound_by(Some(200.0)), None);
        // Nor one without a figure of its own.
        assert_eq!(one(None).capacity(Some(200.0)), Some(200.0));
    }

    #[test]
    fn a_sparse_index_binds_by_what_it_is_measured_to_cost() {
        let mut b = one(Some(50.0));
        // A quarter of the table's units go to the index.
        for _ in 0..10 {
            b.observe(20.0, &[("by_g".to_string(), 5.0)]);
        }
        assert_eq!(b.capacity(Some(400.0)), Some(200.0));
        // An index that no written item reaches does not bind at all.
        let mut b = one(Some(50.0));
        for _ in 0..10 {
            b.observe(20.0, &[]);
        }
        assert_eq!(b.capacity(Some(400.0)), Some(400.0));
        assert_eq!(b.bound_by(Some(400.0)), None);
    }

    #[test]
    fn writes_that_move_an_items_index_key_cost_the_index_twice() {
        let mut b = one(Some(100.0));
        for _ in 0..10 {
            b.observe(10.0, &[("by_g".to_string(), 20.0)]);
        }
        assert_eq!(b.capacity(Some(200.0)), Some(50.0));
    }

    #[test]
    fn the_ratio_follows_the_writes_of_late() {
        let mut b = one(Some(50.0));
        for _ in 0..500 {
            b.observe(25.0, &[("by_g".to_string(), 25.0)]);
        }
        assert!((b.capacity(Some(400.0)).unwrap() - 50.0).abs() < 1e-9);
        // Then the items stop carrying the index's key.
        for _ in 0..1_000 {
            b.observe(25.0, &[]);
        }
        assert!(
            b.capacity(Some(400.0)).unwrap() > 390.0,
            "{:?}",
            b.capacity(Some(400.0))
        );
    }

    #[test]
    fn observe_says_when_the_bound_moved() {
        let mut b = one(Some(50.0));
        // The prior's bound is first said to move (from nothing told).
        assert!(b.observe(10.0, &[("by_g".to_string(), 10.0)]));
        assert!(!b.observe(10.0, &[("by_g".to_string(), 10.0)]));
        // The measured ratio (half) replaces the prior past MEASURED_AFTER.
        let mut moved = false;
        for _ in 0..20 {
            moved |= b.observe(10.0, &[("by_g".to_string(), 0.0)]);
        }
        assert!(moved);
        // A new capacity keeps what was measured.
        b.set([("by_g".to_string(), Some(100.0))]);
        assert!(b.capacity(Some(1_000.0)).unwrap() > 100.0);
    }

    #[test]
    fn an_on_demand_table_without_a_maximum_is_bounded_by_its_index() {
        let b = one(Some(80.0));
        assert_eq!(b.capacity(None), Some(80.0));
        assert_eq!(b.bound_by(None), Some("by_g"));
        assert_eq!(IndexBound::default().capacity(None), None);
    }
}
