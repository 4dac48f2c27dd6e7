//! Batch mode's judgement of "caught up": every partition this worker holds
//! written and committed up to its end offset at assignment, and the group's
//! other partitions committed up to their end at the first look (a worker
//! that is done stays while its peers progress, for at most the drain
//! deadline, and up to four drain deadlines to take over partitions nobody
//! moves, then leaves with exit 3).

use std::sync::atomic::Ordering::SeqCst;
use std::time::Instant;

use tracing::warn;

use super::backlog::GroupView;
use super::fmt_behind;
use super::poller::{Poller, REBALANCE_STALL};
use crate::offsets::{OffsetTracker, TopicPartition};

impl Poller {
    pub(super) fn group_view(&mut self, v: GroupView) {
        // The group's committed position for every partition, this worker's
        // too: every worker computes its share from the same kind of
        // figures, so the shares add up to about 1.
        if self.group_targets.is_empty() {
            self.group_targets = v.ends;
        }
        let moved = v
            .positions
            .iter()
            .any(|(tp, at)| self.group_positions.get(tp).is_some_and(|was| at > was));
        if moved {
            self.group_moved_at = Some(Instant::now());
        }
        self.group_positions = v.positions;
        self.ctx().assignment.send_modify(|a| a.backlog = v.backlog);
    }

    /// The partitions this worker does not hold that the group has not yet
    /// committed up to the end offsets of the first look (as of the last
    /// look): (partition, the group's position if known, end).
    pub(super) fn group_behind(&self) -> Vec<(TopicPartition, Option<i64>, i64)> {
        let mine = self.ctx().acks.lock().assigned();
        let mut behind: Vec<_> = self
            .group_targets
            .iter()
            .filter(|(tp, _)| !mine.contains(tp))
            .map(|(tp, end)| (tp.clone(), self.group_positions.get(tp).copied(), *end))
            .filter(|(_, at, end)| at.is_none_or(|at| at < *end))
            .collect();
        behind.sort();
        behind
    }

    /// The group's committed positions moved within the last drain_timeout:
    /// the partitions behind have live owners.
    pub(super) fn group_moving(&self) -> bool {
        self.group_moved_at
            .is_some_and(|t| t.elapsed() < self.opts.drain_timeout)
    }

    /// Warns, every `REBALANCE_STALL`, while this worker is done but the
    /// group's other partitions are behind and nobody moves them.
    pub(super) fn warn_if_group_stalls(&mut self, since: Instant) {
        if since.elapsed() < self.opts.drain_timeout
            || self
                .group_stall_warned
                .is_some_and(|t| t.elapsed() < REBALANCE_STALL)
        {
            return;
        }
        self.group_stall_warned = Some(Instant::now());
        warn!(
            waited_s = since.elapsed().as_secs(),
            behind = %fmt_behind(&self.group_behind()),
            "caught up, but the group's other partitions are behind and not moving (their owners may be gone); staying a while to take them over"
        );
    }

    /// The group has been looked at, and nothing is behind.
    pub(super) fn group_caught_up(&self) -> bool {
        !self.group_targets.is_empty() && self.group_behind().is_empty()
    }

    /// No partition assigned and no record held or in flight.
    pub(super) fn holds_nothing(&self) -> bool {
        let tracker = self.ctx().acks.lock();
        tracker.assigned().is_empty()
            && tracker.pending_total() == 0
            && self.ctx().held.lock().unwrap().is_empty()
    }

    /// Warns, every `REBALANCE_STALL`, while the subscription or a revocation
    /// has had no assignment after it for that long: the group coordinator
    /// has not completed the rebalance, and this worker holds no partition.
    pub(super) fn warn_if_rebalance_stalls(&mut self) {
        let Some(since) = *self.ctx().unassigned_since.lock().unwrap() else {
            return;
        };
        let waited = since.elapsed();
        if waited >= REBALANCE_STALL
            && self
                .stall_warned
                .is_none_or(|t| t.elapsed() >= REBALANCE_STALL)
        {
            self.stall_warned = Some(Instant::now());
            warn!(
                waited_s = waited.as_secs(),
                "no partitions assigned since joining or since a revocation: the group's rebalance has not completed"
            );
        }
    }

    /// Every assigned partition written up to its end offset (not yet committed).
    pub(super) fn caught_up(&self) -> bool {
        self.reached(|t, tp| t.watermark(&tp.0, tp.1))
    }

    pub(super) fn committed_to_end(&self) -> bool {
        self.reached(|t, tp| t.committed(&tp.0, tp.1))
    }

    pub(super) fn reached(
        &self,
        pos: impl Fn(&OffsetTracker, &TopicPartition) -> Option<i64>,
    ) -> bool {
        let ctx = self.ctx();
        if !ctx.assigned_once.load(SeqCst)
            || ctx.rebalancing.load(SeqCst)
            || !ctx.held.lock().unwrap().is_empty()
        {
            return false;
        }
        let tracker = self.ctx().acks.lock();
        let targets = self.ctx().targets.lock().unwrap();
        tracker.pending_total() == 0
            && tracker
                .assigned()
                .iter()
                .all(|tp| match (targets.get(tp), pos(&tracker, tp)) {
                    (Some(end), Some(at)) => at >= *end,
                    _ => false,
                })
    }
}
