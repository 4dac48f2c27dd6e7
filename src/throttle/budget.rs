//! A table's budget: the most the whole job may write to it, as a fraction of
//! its capacity and/or absolute WCU/s (`[throttle] budget_fraction`,
//! `budget_wcu`, and the same keys on a `[[route]]`). Pure arithmetic; the
//! per-table control applies it.
//!
//! The budget is a ceiling, not a target: the strategy is told the budget as
//! the table's capacity (so `adaptive` starts at and caps at its share of
//! it), and the pacer never runs above budget x this worker's share, whatever
//! the strategy asks. A budget that leaves room is how the live application
//! writing to the same table is guaranteed that room (ConsumedCapacity shows
//! only our own use, so the job cannot see the neighbour's).

#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Budget {
    /// Fraction of the capacity (0, 1]: the table's provisioned one, or a
    /// global secondary index's bound where lower (see
    /// [`crate::throttle::indexes`]).
    pub fraction: Option<f64>,
    /// Absolute WCU/s for the whole job.
    pub wcu: Option<f64>,
}

/// The lower of two limits, either of which may be unknown (None).
pub fn lower(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, y) => x.or(y),
    }
}

impl Budget {
    /// The tighter of two budgets, field by field (a table written by
    /// several routes gets the lowest any of them sets).
    pub fn min(self, other: Budget) -> Budget {
        Budget {
            fraction: lower(self.fraction, other.fraction),
            wcu: lower(self.wcu, other.wcu),
        }
    }

    /// The job's limit on the table, WCU/s, given its capacity (provisioned,
    /// or an on-demand table's maximum); None: no budget, or only a fraction
    /// of a capacity not known (an on-demand table without a maximum).
    pub fn limit(&self, capacity: Option<f64>) -> Option<f64> {
        lower(self.fraction.zip(capacity).map(|(f, c)| f * c), self.wcu)
    }

    /// What the strategy is told the table's capacity is: the lower of the
    /// capacity and the budget.
    pub fn capacity_seen(&self, capacity: Option<f64>) -> Option<f64> {
        lower(capacity, self.limit(capacity))
    }

    /// The most this worker paces at: the limit x its share (the whole
    /// limit when the share is unknown).
    pub fn worker_cap(&self, capacity: Option<f64>, share: Option<f64>) -> Option<f64> {
        let share = share.filter(|s| s.is_finite() && *s > 0.0).unwrap_or(1.0);
        self.limit(capacity).map(|l| l * share.min(1.0))
    }

    /// Checks the values: a fraction in (0, 1], WCU > 0. The error names
    /// the key (`budget_fraction` or `budget_wcu`), its value and the rule.
    pub fn validate(&self) -> Result<(), (&'static str, f64, &'static str)> {
        if let Some(f) = self.fraction.filter(|f| !(*f > 0.0 && *f <= 1.0)) {
            return Err(("budget_fraction", f, "must be in (0, 1]"));
        }
        if let Some(w) = self.wcu.filter(|w| !(w.is_finite() && *w > 0.0)) {
            return Err(("budget_wcu", w, "must be > 0 (WCU per second)"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lower_of_fraction_and_wcu_wins() {
        let b = Budget {
            fraction: Some(0.5),
            wcu: Some(80.0),
        };
        assert_eq!(b.limit(Some(200.0)), Some(80.0));
        assert_eq!(b.limit(Some(100.0)), Some(50.0));
        assert_eq!(b.capacity_seen(Some(100.0)), Some(50.0));
        assert_eq!(b.worker_cap(Some(100.0), Some(0.5)), Some(25.0));
    }

    #[test]
    fn an_unknown_capacity_leaves_only_the_absolute_budget() {
        let frac = Budget {
            fraction: Some(0.5),
            wcu: None,
        };
        assert_eq!(frac.limit(None), None);
        assert_eq!(frac.capacity_seen(None), None);
        let abs = Budget {
            fraction: None,
            wcu: Some(300.0),
        };
        assert_eq!(
            abs.capacity_seen(None),
            Some(300.0),
            "on demand: the budget"
        );
        assert_eq!(abs.worker_cap(None, None), Some(300.0));
        assert_eq!(Budget::default().capacity_seen(Some(7.0)), Some(7.0));
        assert_eq!(Budget::default().worker_cap(Some(7.0), None), None);
    }

    #[test]
    fn several_routes_to_one_table_get_the_lowest() {
        let a = Budget {
            fraction: Some(0.5),
            wcu: None,
        };
        let b = Budget {
            fraction: Some(0.3),
            wcu: Some(10.0),
        };
        assert_eq!(
            a.min(b),
            Budget {
                fraction: Some(0.3),
                wcu: Some(10.0)
            }
        );
    }

    #[test]
    fn bad_values_are_named() {
        let e = Budget {
            fraction: Some(1.5),
            wcu: None,
        }
        .validate()
        .unwrap_err();
        assert_eq!((e.0, e.1), ("budget_fraction", 1.5));
        let e = Budget {
            fraction: None,
            wcu: Some(0.0),
        }
        .validate()
        .unwrap_err();
        assert_eq!((e.0, e.1), ("budget_wcu", 0.0));
    }
}
