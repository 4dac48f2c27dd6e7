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
//! have been written since an index was first seen, it is taken to cost
//! what the table does (every item carries its key and all of it is
//! projected: the most an insert costs it). A sparse index (few items carry
//! its key) or a narrow projection then lets the table go faster. The bound
//! in force moves only when the measured one moves by more than
//! [`NOTICE`] (or an index's capacity changes): a strategy told a new
//! capacity rescales its rate and may forget what throttles taught it, and
//! a sparse index's measured ratio wanders by a few percent from batch to
//! batch.
//!
//! Without this, a table whose index has less capacity than the table has
//! throttles like a table shared with another writer at the difference,
//! while the pace is steered to the table's own capacity.

/// Table units written (since an index was first seen) before its
/// measured ratio replaces the prior (four full batches of small items).
pub const MEASURED_AFTER: f64 = 100.0;

/// The units the ratios remember (older answers weigh less as more are
/// written): an index's share of the writes may change as the data does.
const MEMORY_UNITS: f64 = 5_000.0;

/// A measured bound that moved by more than this fraction from the one in
/// force replaces it (see the module doc).
pub const NOTICE: f64 = 0.1;

/// An index whose bound is within this factor of the capacity the writes
/// are paced to may be what refused an item (see
/// [`IndexBound::reaches_binding`]).
const NEAR: f64 = 1.25;

/// The most units one answer can report for an index: 25 items of 400 KB,
/// twice (a write that moves an item's index key).
const MAX_ANSWER_UNITS: f64 = 20_000.0;

/// A global secondary index as DescribeTable shows it: its name, key
/// attributes and write capacity (provisioned, or an on-demand index's
/// `MaxWriteRequestUnits`; None: not limited by its own figure).
#[derive(Debug, Clone, PartialEq)]
pub struct IndexInfo {
    pub name: String,
    /// Its partition key's and sort key's attribute names (an item is
    /// written to the index only if it has them all).
    pub keys: Vec<String>,
    pub capacity: Option<f64>,
}

#[cfg(test)]
impl IndexInfo {
    pub fn new(name: &str, capacity: Option<f64>, keys: &[&str]) -> Self {
        Self {
            name: name.to_string(),
            keys: keys.iter().map(|k| k.to_string()).collect(),
            capacity,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
struct Index {
    name: String,
    /// Its key's attribute names: an item that carries them all is written
    /// to it.
    keys: Vec<String>,
    capacity: Option<f64>,
    /// Its units, and the table's, over the remembered writes since it was
    /// first seen.
    units: f64,
    table_units: f64,
}

impl Index {
    /// Index units per table unit: measured, or 1 before enough was
    /// written.
    fn ratio(&self) -> f64 {
        if self.table_units < MEASURED_AFTER {
            1.0
        } else {
            self.units / self.table_units
        }
    }

    /// The most the table's writes may go at for this index's sake (None:
    /// no capacity of its own, or no write reaches it).
    fn bound(&self) -> Option<f64> {
        let r = self.ratio();
        self.capacity.filter(|_| r > 1e-6).map(|c| c / r)
    }
}

/// The indexes' capacities and what each costs per table unit.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct IndexBound {
    indexes: Vec<Index>,
    /// The bound in force and the index that sets it (None: no index
    /// limits the table's writes).
    in_force: Option<(String, f64)>,
}

impl IndexBound {
    /// The indexes as DescribeTable shows them now. What was measured of an
    /// index that is still there is kept. The bound in force follows at
    /// once when a capacity changed.
    pub fn set(&mut self, indexes: impl IntoIterator<Item = IndexInfo>) {
        let old = std::mem::take(&mut self.indexes);
        self.indexes = indexes
            .into_iter()
            .map(
                |IndexInfo {
                     name,
                     keys,
                     capacity,
                 }| {
                    let (units, table_units) = old
                        .iter()
                        .find(|i| i.name == name)
                        .map_or((0.0, 0.0), |i| (i.units, i.table_units));
                    Index {
                        name,
                        keys,
                        capacity: capacity.filter(|c| c.is_finite() && *c > 0.0),
                        units,
                        table_units,
                    }
                },
            )
            .collect();
        // (In any order: DescribeTable's list need not keep one.)
        let same = old.len() == self.indexes.len()
            && self.indexes.iter().all(|i| {
                old.iter()
                    .any(|o| o.name == i.name && o.capacity == i.capacity)
            });
        if !same {
            self.in_force = self.named(self.measured());
        }
    }

    /// One answer: `table` units the table itself consumed, and each
    /// index's (an index not named consumed nothing). Returns true when the
    /// bound in force moved (by more than [`NOTICE`]).
    pub fn observe(&mut self, table: f64, per_index: &[(String, f64)]) -> bool {
        if !(table.is_finite() && table > 0.0) {
            return false;
        }
        for i in &mut self.indexes {
            if i.table_units + table > MEMORY_UNITS {
                let keep = MEMORY_UNITS / (i.table_units + table);
                i.table_units *= keep;
                i.units *= keep;
            }
            i.table_units += table;
            // (A count no answer could carry, infinite or past a batch's
            // most, is left out.)
            i.units += per_index
                .iter()
                .filter(|(name, u)| *name == i.name && u.is_finite() && *u <= MAX_ANSWER_UNITS)
                .map(|(_, u)| u.max(0.0))
                .sum::<f64>();
        }
        let now = self.measured();
        let moved = match (&self.in_force, now) {
            (Some((_, a)), Some((_, b))) => (a - b).abs() > NOTICE * a,
            (a, b) => a.is_some() != b.is_some(),
        };
        if moved {
            self.in_force = self.named(now);
        } else if let (Some(force), Some((i, _))) = (self.in_force.as_mut(), now) {
            // Another index's bound is now the lowest, within NOTICE of the
            // one in force: it is named, the bound stays.
            let name = &self.indexes[i].name;
            if force.0 != *name {
                force.0.clone_from(name);
            }
        }
        moved
    }

    /// The lowest of the indexes' measured bounds, and its index's place
    /// in `indexes` (no name copied on every answer).
    fn measured(&self) -> Option<(usize, f64)> {
        self.indexes
            .iter()
            .enumerate()
            .filter_map(|(at, i)| Some((at, i.bound()?)))
            .min_by(|a, b| a.1.total_cmp(&b.1))
    }

    /// A bound from `measured`, with its index's name.
    fn named(&self, bound: Option<(usize, f64)>) -> Option<(String, f64)> {
        bound.map(|(at, b)| (self.indexes[at].name.clone(), b))
    }

    /// What the table admits for this job's writes: its own `capacity`, or
    /// the bound in force where lower (None: neither is known).
    pub fn capacity(&self, capacity: Option<f64>) -> Option<f64> {
        let bound = self.in_force.as_ref().map(|(_, b)| *b);
        match (capacity, bound) {
            (Some(c), Some(b)) => Some(c.min(b)),
            (c, b) => c.or(b),
        }
    }

    /// The index whose bound in force is below the table's `capacity`
    /// (None: the table's own capacity binds).
    pub fn bound_by(&self, capacity: Option<f64>) -> Option<&str> {
        let (name, b) = self.in_force.as_ref()?;
        capacity.is_none_or(|c| *b < c).then_some(name.as_str())
    }

    /// Whether an item with these attributes (`has`) is written to an
    /// index whose bound is near what the table's writes go at (within
    /// [`NEAR`] of the lower of the table's `capacity` and the bound in
    /// force): a refusal of it may be the index's, not its key range's. An
    /// index with room to spare refuses nothing.
    pub fn reaches_binding(&self, capacity: Option<f64>, has: impl Fn(&str) -> bool) -> bool {
        let Some(pace) = self.capacity(capacity) else {
            return false;
        };
        self.indexes
            .iter()
            .any(|i| i.bound().is_some_and(|b| b <= NEAR * pace) && i.keys.iter().all(|k| has(k)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(capacity: Option<f64>) -> IndexBound {
        let mut b = IndexBound::default();
        b.set([IndexInfo::new("by_g", capacity, &["g"])]);
        b
    }

    /// `times` answers of `table` units, each with `by_g`'s units (None:
    /// the index is not named); returns how many moved the bound in force.
    fn feed(b: &mut IndexBound, times: usize, table: f64, by_g: Option<f64>) -> usize {
        let per_index: Vec<(String, f64)> =
            by_g.map(|u| ("by_g".to_string(), u)).into_iter().collect();
        (0..times).filter(|_| b.observe(table, &per_index)).count()
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
        feed(&mut b, 10, 20.0, Some(5.0));
        assert_eq!(b.capacity(Some(400.0)), Some(200.0));
        // An index that no written item reaches does not bind at all.
        let mut b = one(Some(50.0));
        feed(&mut b, 10, 20.0, None);
        assert_eq!(b.capacity(Some(400.0)), Some(400.0));
        assert_eq!(b.bound_by(Some(400.0)), None);
    }

    #[test]
    fn writes_that_move_an_items_index_key_cost_the_index_twice() {
        let mut b = one(Some(100.0));
        feed(&mut b, 10, 10.0, Some(20.0));
        assert_eq!(b.capacity(Some(200.0)), Some(50.0));
    }

    #[test]
    fn the_ratio_follows_the_writes_of_late() {
        let mut b = one(Some(50.0));
        feed(&mut b, 500, 25.0, Some(25.0));
        assert!((b.capacity(Some(400.0)).unwrap() - 50.0).abs() < 1e-9);
        // Then the items stop carrying the index's key.
        feed(&mut b, 1_000, 25.0, None);
        assert!(
            b.capacity(Some(400.0)).unwrap() > 390.0,
            "{:?}",
            b.capacity(Some(400.0))
        );
    }

    #[test]
    fn the_bound_in_force_moves_only_by_more_than_a_little() {
        let mut b = one(Some(50.0));
        assert_eq!(feed(&mut b, 1, 10.0, Some(10.0)), 0);
        // Past MEASURED_AFTER, the measured ratio (0.95: a bound of 52.6)
        // is within NOTICE of the prior's: the bound in force stays.
        assert_eq!(feed(&mut b, 20, 20.0, Some(19.0)), 0);
        assert_eq!(b.capacity(Some(200.0)), Some(50.0));
        // Towards half: it moves in steps of more than NOTICE, a few times
        // over 200 answers, not at each.
        let moved = feed(&mut b, 200, 20.0, Some(10.0));
        assert!((1..=8).contains(&moved), "{moved}");
        assert!(b.capacity(Some(200.0)).unwrap() > 80.0);
        // A new capacity applies at once and keeps what was measured.
        b.set([IndexInfo::new("by_g", Some(30.0), &["g"])]);
        let c = b.capacity(Some(1_000.0)).unwrap();
        assert!(c > 30.0 && c < 90.0, "{c}");
    }

    #[test]
    fn an_index_first_seen_mid_job_is_taken_to_cost_what_the_table_does() {
        let mut b = IndexBound::default();
        feed(&mut b, 100, 25.0, None);
        b.set([IndexInfo::new("late", Some(40.0), &["g"])]);
        assert_eq!(b.capacity(Some(200.0)), Some(40.0));
        assert_eq!(b.bound_by(Some(200.0)), Some("late"));
    }

    #[test]
    fn counts_no_answer_could_carry_are_left_out() {
        // An infinite or absurd index count is not a measure: left out (the
        // index then reads as reached by nothing written), the bound never
        // falls towards 0 (capacity / a huge ratio); a NaN table count is no
        // answer at all.
        let mut b = one(Some(50.0));
        for _ in 0..10 {
            feed(&mut b, 1, 25.0, Some(f64::INFINITY));
            feed(&mut b, 1, 25.0, Some(1e300));
            feed(&mut b, 1, f64::NAN, Some(1.0));
        }
        assert_eq!(b.capacity(Some(200.0)), Some(200.0));
    }

    #[test]
    fn only_items_that_carry_a_binding_indexs_key_reach_it() {
        let b = one(Some(50.0));
        assert!(b.reaches_binding(Some(200.0), |k| k == "g" || k == "id"));
        assert!(!b.reaches_binding(Some(200.0), |k| k == "id"));
        assert!(
            !one(None).reaches_binding(Some(200.0), |_| true),
            "no capacity of its own"
        );
        // An index with room to spare (400 under a 200 table) refuses
        // nothing: a refusal of its items is someone else's.
        assert!(!one(Some(400.0)).reaches_binding(Some(200.0), |_| true));
        assert!(
            one(Some(240.0)).reaches_binding(Some(200.0), |_| true),
            "near it"
        );
    }

    #[test]
    fn the_index_named_is_the_lowest_even_within_notice() {
        let mut b = IndexBound::default();
        b.set([
            IndexInfo::new("a", Some(100.0), &["g"]),
            IndexInfo::new("b", Some(105.0), &["h"]),
        ]);
        assert_eq!(b.bound_by(Some(200.0)), Some("a"));
        // b's writes cost more per table unit than a's: b is the lowest,
        // within 10% of a's: named, the bound stays.
        for _ in 0..20 {
            b.observe(20.0, &[("a".to_string(), 19.0), ("b".to_string(), 20.0)]);
        }
        assert_eq!(b.bound_by(Some(200.0)), Some("b"));
        assert_eq!(b.capacity(Some(200.0)), Some(100.0));
        // The same indexes listed in another order change nothing.
        b.set([
            IndexInfo::new("b", Some(105.0), &["h"]),
            IndexInfo::new("a", Some(100.0), &["g"]),
        ]);
        assert_eq!(b.bound_by(Some(200.0)), Some("b"));
        assert_eq!(b.capacity(Some(200.0)), Some(100.0));
    }

    #[test]
    fn an_on_demand_table_without_a_maximum_is_bounded_by_its_index() {
        let b = one(Some(80.0));
        assert_eq!(b.capacity(None), Some(80.0));
        assert_eq!(b.bound_by(None), Some("by_g"));
        assert_eq!(IndexBound::default().capacity(None), None);
    }
}
