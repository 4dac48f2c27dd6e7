//! Batch mode's judgement of "caught up": every partition this worker holds
//! written and committed up to its end offset at assignment, and the group's
//! other partitions committed up to their end at the first look (a worker
//! that is done stays while its peers progress, for at most the drain
//! deadline, and up to four drain deadlines to take over partitions nobody
//! moves, then leaves with exit 3). A batch worker that holds nothing and
//! is given no partition for as long (across its rejoins) leaves too.

use std::sync::atomic::Ordering::SeqCst;
use std::time::{Duration, Instant};

use rdkafka::consumer::Consumer;
use rdkafka::error::KafkaError;
use tracing::{info, warn};

use super::backlog::GroupView;
use super::fmt_behind;
use super::poller::{Poller, REBALANCE_STALL};
use super::SourceExit;
use crate::offsets::{OffsetTracker, TopicPartition};
use crate::telemetry::events;

/// A done batch worker waits at most this many drain timeouts for a group
/// whose other partitions do not move before it leaves.
const STALLED_GROUP_WAITS: u32 = 4;

/// A worker that holds nothing and has had no assignment for this long since
/// it joined or lost its partitions leaves the group and joins again.
pub(super) const REJOIN_AFTER: Duration = Duration::from_secs(90);

/// Whether a worker unassigned for `unassigned_for` (None: it has an
/// assignment, maybe empty) rejoins the group. Pure.
///
/// A coordinator that never completes a rebalance for a member (seen with
/// tansu: a member left without partitions for minutes while the others
/// were done) must not keep it idle forever; leaving and joining again
/// makes the coordinator rebalance. A member that was given an empty
/// assignment (more members than partitions) is not stuck and stays.
pub(super) fn should_rejoin(unassigned_for: Option<Duration>, holds_nothing: bool) -> bool {
    holds_nothing && unassigned_for.is_some_and(|d| d >= REJOIN_AFTER)
}

/// What a batch worker whose own partitions are done does, `waited` after it
/// got there. Pure: the caller passes what it saw of the group.
pub(super) fn when_done(
    waited: Duration,
    group_done: bool,
    group_moving: bool,
    drain: Duration,
) -> Option<SourceExit> {
    if group_done {
        Some(SourceExit::CaughtUp)
    } else if waited >= drain && group_moving {
        // A leaving member stalls the busy ones in a rebalance: it stayed
        // drain_timeout; their owners are working, it goes.
        Some(SourceExit::CaughtUp)
    } else if waited >= drain * STALLED_GROUP_WAITS {
        // Nobody moves them (owners gone, or partitions nobody was given):
        // leaving makes the coordinator rebalance, handing them to the
        // members still there; exit 3 says work is left.
        Some(SourceExit::WorkLeft)
    } else {
        None
    }
}

/// What a batch worker that has held no partition and had no assignment
/// for `idle` (across its rejoins: a rejoin does not restart it) does.
/// Pure.
///
/// Revoked and never assigned again, or never assigned at all (a
/// coordinator that does not complete its rebalance, seen with tansu), it
/// would otherwise rejoin every [`REJOIN_AFTER`] for ever while the group's
/// view it waits on may be stale. It gives the group as long as a done
/// worker gives partitions nobody moves, and at least one rejoin and a
/// drain deadline after it: with owners at work it goes (exit 0, as a done
/// worker does); with nothing moving, exit 3 says work may be left.
pub(super) fn when_idle(idle: Duration, group_moving: bool, drain: Duration) -> Option<SourceExit> {
    if idle < (drain * STALLED_GROUP_WAITS).max(REJOIN_AFTER + drain) {
        None
    } else if group_moving {
        Some(SourceExit::CaughtUp)
    } else {
        Some(SourceExit::WorkLeft)
    }
}

impl Poller {
    /// Whether this worker, holding nothing with no assignment since
    /// `since`, leaves now, and how ([`when_idle`]).
    pub(super) fn leave_when_idle(&mut self, since: Instant) -> Option<SourceExit> {
        let idle = since.elapsed();
        let exit = when_idle(idle, self.group_moving(), self.opts.drain_timeout)?;
        let behind = fmt_behind(&self.group_behind());
        match exit {
            SourceExit::CaughtUp => warn!(
                idle_s = idle.as_secs(),
                behind = %behind,
                "no partition assigned for this long, rejoins included; the group's owners are working, leaving"
            ),
            _ => warn!(
                idle_s = idle.as_secs(),
                behind = %behind,
                "no partition assigned for this long, rejoins included, and the group's partitions behind have not moved; leaving, with work maybe left to the group (exit 3)"
            ),
        }
        Some(exit)
    }

    /// Whether this worker, done since `since`, leaves now, and how.
    pub(super) fn leave_when_done(&mut self, since: Instant) -> Option<SourceExit> {
        let waited = since.elapsed();
        let drain = self.opts.drain_timeout;
        let group_done = self.group_caught_up();
        let exit = when_done(waited, group_done, self.group_moving(), drain);
        let behind = || fmt_behind(&self.group_behind());
        match exit {
            Some(SourceExit::CaughtUp) if group_done => {
                info!("caught up: every assigned partition is committed up to its end offset, and the group's others too");
            }
            Some(SourceExit::CaughtUp) => warn!(
                waited_s = waited.as_secs(),
                behind = %behind(),
                "caught up, but the group's other partitions are not committed to their end yet; their owners are working, leaving"
            ),
            Some(_) => warn!(
                waited_s = waited.as_secs(),
                behind = %behind(),
                "caught up, but the group's other partitions are behind and have not moved; leaving, with work left to the group (exit 3)"
            ),
            None => self.warn_if_group_stalls(since),
        }
        exit
    }

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
        self.ctx().acks.lock().is_empty() && self.ctx().held.lock().is_empty()
    }

    /// Warns, every `REBALANCE_STALL`, while the subscription or a revocation
    /// has had no assignment after it for that long: the group coordinator
    /// has not completed the rebalance, and this worker holds no partition.
    pub(super) fn warn_if_rebalance_stalls(&mut self) {
        let Some(since) = *self.ctx().unassigned_since.lock() else {
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

    /// Leaves the group and joins again when [`should_rejoin`] says so.
    pub(super) fn rejoin_if_stuck(&mut self) -> Result<(), KafkaError> {
        let since = *self.ctx().unassigned_since.lock();
        let waited = since.map(|t| t.elapsed());
        if !should_rejoin(waited, self.holds_nothing()) {
            return Ok(());
        }
        events::rejoin(waited.unwrap_or_default());
        self.consumer.unsubscribe();
        let topics: Vec<&str> = self.opts.topics.iter().map(String::as_str).collect();
        self.consumer.subscribe(&topics)?;
        *self.ctx().unassigned_since.lock() = Some(Instant::now());
        Ok(())
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
            || ctx.unassigned_since.lock().is_some()
            || !ctx.held.lock().is_empty()
        {
            return false;
        }
        let tracker = self.ctx().acks.lock();
        let targets = self.ctx().targets.lock();
        tracker.pending_total() == 0
            && tracker.assigned_iter().all(|(topic, p)| {
                let tp = (topic.to_string(), p);
                match (targets.get(&tp), pos(&tracker, &tp)) {
                    (Some(end), Some(at)) => at >= *end,
                    _ => false,
                }
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DRAIN: Duration = Duration::from_secs(30);

    #[test]
    fn only_a_worker_left_without_any_assignment_for_long_rejoins() {
        let s = Duration::from_secs;
        assert!(!should_rejoin(None, true), "an empty assignment is one");
        assert!(!should_rejoin(Some(s(89)), true));
        assert!(should_rejoin(Some(s(90)), true));
        assert!(
            !should_rejoin(Some(s(600)), false),
            "records still in flight: the drain finishes first"
        );
    }

    #[test]
    fn a_worker_given_nothing_for_long_leaves_saying_whether_work_is_left() {
        let at = |s| Duration::from_secs(s);
        // It used to rejoin every 90 s for ever: one revoked and never
        // assigned again outlived a job it had no part in.
        assert_eq!(when_idle(at(119), false, DRAIN), None);
        assert_eq!(when_idle(at(119), true, DRAIN), None);
        assert_eq!(
            when_idle(at(120), true, DRAIN),
            Some(SourceExit::CaughtUp),
            "the owners are working"
        );
        assert_eq!(
            when_idle(at(120), false, DRAIN),
            Some(SourceExit::WorkLeft),
            "nothing moves"
        );
        let short = Duration::from_secs(1);
        assert_eq!(
            when_idle(at(90), false, short),
            None,
            "a short drain deadline still waits for a rejoin"
        );
        assert_eq!(when_idle(at(91), false, short), Some(SourceExit::WorkLeft));
    }

    #[test]
    fn a_done_worker_leaves_when_the_group_is_done_or_moves_without_it() {
        let at = |s| Duration::from_secs(s);
        assert_eq!(
            when_done(at(0), true, false, DRAIN),
            Some(SourceExit::CaughtUp)
        );
        assert_eq!(
            when_done(at(10), false, true, DRAIN),
            None,
            "stays drain_timeout"
        );
        assert_eq!(
            when_done(at(30), false, true, DRAIN),
            Some(SourceExit::CaughtUp)
        );
    }

    #[test]
    fn a_done_worker_stays_for_a_group_nobody_moves_then_leaves_saying_so() {
        let at = |s| Duration::from_secs(s);
        // It used to leave with exit 0 after drain_timeout, whatever the
        // group: a lone worker given nothing left the job unfinished.
        assert_eq!(when_done(at(30), false, false, DRAIN), None);
        assert_eq!(when_done(at(119), false, false, DRAIN), None);
        assert_eq!(
            when_done(at(120), false, false, DRAIN),
            Some(SourceExit::WorkLeft)
        );
    }
}
