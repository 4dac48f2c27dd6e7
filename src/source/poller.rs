//! The poll loop of the source thread: poll, track and forward records,
//! pause partitions while the pipeline is full, learn new partitions' start
//! and end offsets, commit periodically, and drain at the end.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{BorrowedMessage, Headers, Message};
use rdkafka::Offset;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::backlog::{self, BacklogReader};
use super::commit::{apply, commit};
use super::context::Ctx;
use super::pausing::wish;
use super::{starts_at_end, tps_of, SourceError, SourceExit, SourceOptions};
use crate::acks::RecordRef;
use crate::offsets::TopicPartition;
use crate::record::{Charge, Record};
use crate::telemetry::{events, Counters};

pub(super) struct Poller {
    pub(super) consumer: BaseConsumer<Ctx>,
    pub(super) opts: SourceOptions,
    pub(super) tx: mpsc::Sender<Record>,
    pub(super) counters: Arc<Counters>,
    pub(super) next_commit: Instant,
    /// Reads the group's backlog on its own thread (None: it could not start).
    pub(super) backlog: Option<BacklogReader>,
    /// `--until-caught-up`: each partition's end offset at the first look at
    /// the group's backlog, and the group's position on it at the last look.
    pub(super) group_targets: HashMap<TopicPartition, i64>,
    pub(super) group_positions: HashMap<TopicPartition, i64>,
    /// Since when this worker has been caught up and committed (waiting for
    /// the group).
    pub(super) done_at: Option<Instant>,
    /// Since when this worker has held nothing with no assignment (kept
    /// across rejoins).
    pub(super) idle_since: Option<Instant>,
    /// Set when the pipeline died: draining cannot make progress, skip it.
    pub(super) abort: CancellationToken,
    /// When a stalled rebalance was last warned about.
    pub(super) stall_warned: Option<Instant>,
    /// When the group's committed positions last moved (batch mode).
    pub(super) group_moved_at: Option<Instant>,
    /// When a stalled group was last warned about.
    pub(super) group_stall_warned: Option<Instant>,
    /// When Kafka's answer was last told to the operator endpoints.
    pub(super) kafka_seen: Option<Instant>,
    /// The congested tables' topics, as of `congestion_seen`.
    pub(super) congested: BTreeSet<String>,
    pub(super) congestion_seen: u64,
    /// When the consumer was last polled (a stalled source polls seldom).
    pub(super) polled_at: Option<Instant>,
}

/// Bytes a record costs beyond its key, value and headers (its item, its
/// place in batches and the tracker), for the byte budget.
const RECORD_OVERHEAD: usize = 256;

/// How long a table stays congested, or the byte budget reached, before
/// partitions are paused (a pause drops what librdkafka fetched ahead; see
/// [`super::pausing`]).
pub(super) const PAUSE_GRACE: Duration = Duration::from_secs(1);

/// A stalled source polls this often: rebalance callbacks are served, and
/// each poll takes at most one record (held until the pipeline has room).
const STALLED_POLL: Duration = Duration::from_millis(100);

/// How the poll loop takes records on a pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Take {
    /// Polls (records flow).
    Poll,
    /// Stalled: polls every [`STALLED_POLL`] only.
    Seldom,
    /// Over the byte budget, its pause not yet due: polls nothing.
    Nothing,
}

/// While records flow, how many a pass of the poll loop takes (those
/// librdkafka already holds, without waiting) before its housekeeping, which
/// looks at every assigned partition.
const POLL_BURST: usize = 64;

/// How long a stalled source sleeps between looks for room.
const ROOM_WAIT: Duration = Duration::from_millis(1);

/// How often the group's backlog per partition is re-read.
pub(super) const BACKLOG_REFRESH: Duration = Duration::from_secs(5);

/// How long a revocation may go without an assignment before a warning.
pub(super) const REBALANCE_STALL: Duration = Duration::from_secs(30);

/// How often, once this worker is done, it looks whether the group is.
pub(super) const GROUP_DONE_POLL: Duration = Duration::from_secs(1);

/// Longest wait of each call that reads the group's backlog (a slow answer
/// only skips one refresh).
pub(super) const BACKLOG_CALL_TIMEOUT: Duration = Duration::from_millis(1_000);

impl Poller {
    pub(super) fn ctx(&self) -> &Ctx {
        self.consumer.context()
    }

    pub(super) fn run_loop(&mut self, stop: &CancellationToken) -> Result<SourceExit, SourceError> {
        loop {
            if stop.is_cancelled() {
                return Ok(SourceExit::Stopped);
            }
            self.forward_held()?;
            let over_budget = self.opts.buffered.load(Relaxed) >= self.opts.max_buffered_bytes;
            let full = !self.ctx().held.lock().is_empty();
            let now = Instant::now();
            let take = self.set_paused(over_budget, full, now)?;
            let seldom = take == Take::Seldom;
            if take == Take::Nothing
                || seldom && self.polled_at.is_some_and(|t| now < t + STALLED_POLL)
            {
                // What librdkafka fetched ahead stays in its queue (a pause
                // would drop it) until the pipeline has room.
                std::thread::sleep(ROOM_WAIT);
            } else {
                self.polled_at = Some(now);
                let timeout = Duration::from_millis(if seldom || over_budget { 20 } else { 100 });
                match self.consumer.poll(timeout) {
                    Some(Ok(m)) => {
                        self.accept(&m);
                        self.kafka_answered();
                        if take == Take::Poll {
                            self.take_more()?;
                        }
                    }
                    Some(Err(e)) => self.consumer_error(&e),
                    None => {}
                }
            }
            self.learn_positions();
            if Instant::now() >= self.next_commit {
                self.commit_now(None);
            }
            if let Some(v) = self.backlog.as_ref().and_then(BacklogReader::take) {
                self.group_view(v);
                self.opts.live.kafka_ok();
            }
            self.warn_if_rebalance_stalls();
            self.rejoin_if_stuck()?;
            if self.opts.until_caught_up && self.holds_nothing() && self.group_caught_up() {
                // Nothing of the job is left to anyone, whatever this
                // worker's place in the group: a rebalance that never
                // completes (seen with tansu) must not keep it forever.
                info!("caught up: the group has committed every partition up to its end offset, and this worker holds none");
                return Ok(SourceExit::CaughtUp);
            }
            if self.opts.until_caught_up {
                // (Looked at only in batch mode: it locks the trackers.)
                let idle = self.ctx().unassigned_since.lock().is_some() && self.holds_nothing();
                if !idle {
                    self.idle_since = None;
                } else {
                    let since = *self.idle_since.get_or_insert_with(Instant::now);
                    if let Some(exit) = self.leave_when_idle(since) {
                        return Ok(exit);
                    }
                }
            }
            if self.opts.until_caught_up && self.caught_up() {
                self.commit_now(None);
                if self.committed_to_end() {
                    let since = *self.done_at.get_or_insert_with(Instant::now);
                    if let Some(exit) = self.leave_when_done(since) {
                        return Ok(exit);
                    }
                } else {
                    self.done_at = None;
                }
            } else {
                self.done_at = None;
            }
            if let Some(b) = &self.backlog {
                b.hurry(self.done_at.is_some());
            }
        }
    }

    /// Carries each idle partition's watermark to the consumer's position:
    /// past transaction markers and aborted records (read_committed), which
    /// are never delivered, so a partition can be committed up to its end.
    pub(super) fn follow_positions(&self) {
        let Ok(positions) = self.consumer.position() else {
            return;
        };
        let mut tracker = self.ctx().acks.lock();
        for e in positions.elements() {
            if let Offset::Offset(at) = e.offset() {
                tracker.advance_to_position(e.topic(), e.partition(), at);
            }
        }
    }

    /// Tells the operator endpoints Kafka answered (at most once a second).
    fn kafka_answered(&mut self) {
        if self
            .kafka_seen
            .is_none_or(|t| t.elapsed() >= Duration::from_secs(1))
        {
            self.kafka_seen = Some(Instant::now());
            self.opts.live.kafka_ok();
        }
    }

    /// Tracks a fresh record and queues it for the pipeline.
    pub(super) fn accept(&self, msg: &BorrowedMessage<'_>) {
        let (topic, partition, offset) = (msg.topic().to_string(), msg.partition(), msg.offset());
        let epoch = match self.ctx().acks.lock().track(&topic, partition, offset) {
            Ok(e) => e,
            Err(e) => {
                warn!(error = %e, "record from an untracked partition, not forwarded (it will be redelivered)");
                return;
            }
        };
        events::record_consumed(&self.counters);
        let at = RecordRef {
            topic: topic.into(),
            partition,
            offset,
            epoch,
        };
        let headers = msg.headers().map_or_else(Vec::new, |hs| {
            hs.iter()
                .map(|h| (h.key.to_string(), h.value.map(<[u8]>::to_vec)))
                .collect()
        });
        let mut record = Record {
            key: msg.key().map(<[u8]>::to_vec),
            value: msg.payload().map(<[u8]>::to_vec),
            headers,
            timestamp_ms: msg.timestamp().to_millis(),
            at,
            charge: Charge::default(),
        };
        record.charge = Charge::new(&self.opts.buffered, record.size() + RECORD_OVERHEAD);
        self.ctx().held.lock().push_back(record);
    }

    /// Logs an error the consumer's poll returned and keeps it for `/health`.
    fn consumer_error(&self, e: &KafkaError) {
        warn!(error = %e, "kafka consumer error");
        self.opts.live.kafka_err(e.to_string());
    }

    /// Takes up to [`POLL_BURST`] more records that librdkafka already
    /// holds, while the pipeline has room and the byte budget allows.
    fn take_more(&self) -> Result<(), SourceError> {
        for _ in 1..POLL_BURST {
            self.forward_held()?;
            let full = !self.ctx().held.lock().is_empty();
            if full || self.opts.buffered.load(Relaxed) >= self.opts.max_buffered_bytes {
                break;
            }
            match self.consumer.poll(Duration::ZERO) {
                Some(Ok(m)) => self.accept(&m),
                Some(Err(e)) => {
                    self.consumer_error(&e);
                    break;
                }
                None => break,
            }
        }
        Ok(())
    }

    /// Hands held records to the pipeline until its channel is full.
    pub(super) fn forward_held(&self) -> Result<(), SourceError> {
        let mut held = self.ctx().held.lock();
        while let Some(rec) = held.pop_front() {
            match self.tx.try_send(rec) {
                Ok(()) => {}
                Err(mpsc::error::TrySendError::Full(rec)) => {
                    held.push_front(rec);
                    break;
                }
                Err(mpsc::error::TrySendError::Closed(rec)) => {
                    held.push_front(rec);
                    return Err(SourceError::PipelineClosed);
                }
            }
        }
        Ok(())
    }

    /// Pauses every partition (`all`: the byte budget is reached, or the
    /// source drains), or those of the congested tables' topics while other
    /// partitions flow, once the wish has held through [`PAUSE_GRACE`];
    /// resumes the others. Returns how to take records: stalled when the
    /// channel is `full` or every partition it holds feeds a congested
    /// table, not at all while a budget pause waits for its grace.
    pub(super) fn set_paused(
        &mut self,
        all: bool,
        full: bool,
        now: Instant,
    ) -> Result<Take, SourceError> {
        let changes = self.opts.congestion.changes();
        if changes != self.congestion_seen {
            self.congestion_seen = changes;
            self.congested = self.opts.congestion.congested_topics();
        }
        // The assignment as the rebalance callbacks published it (asking
        // librdkafka is a round trip to its main thread, too dear per loop).
        let (want, stall) = {
            let published = self.ctx().assignment.borrow();
            wish(all, full, &self.congested, &published.assigned)
        };
        let mut pausing = self.ctx().pausing.lock();
        if !pausing.wants(want.all, &want.topics, now) {
            let assigned = tps_of(&self.consumer.assignment()?);
            let plan = pausing.set(want, &assigned, now);
            if !plan.is_empty() {
                debug!(all, congested = ?self.congested, paused = plan.pause.len(),
                    resumed = plan.resume.len(), "pausing partitions");
            }
            apply(&self.consumer, &plan)?;
        }
        Ok(if pausing.quiet(now) {
            Take::Nothing
        } else if stall {
            Take::Seldom
        } else {
            Take::Poll
        })
    }

    /// For newly assigned partitions: the committed offset (or where the reset
    /// policy starts) and the end offset, for the caught-up test.
    pub(super) fn learn_positions(&self) {
        let pending: Vec<TopicPartition> = std::mem::take(&mut *self.ctx().to_learn.lock());
        if pending.is_empty() {
            return;
        }
        let timeout = self.opts.kafka.metadata_timeout;
        let at_end = starts_at_end(&self.opts.kafka);
        let committed = match backlog::group_offsets(&self.consumer, &pending, timeout) {
            Ok(c) => c,
            Err(e) => {
                warn!(error = %e, "cannot read committed offsets; will retry");
                self.ctx().to_learn.lock().extend(pending);
                return;
            }
        };
        for (t, p) in pending {
            let ends = self.consumer.fetch_watermarks(&t, p, timeout);
            let Ok((low, high)) = ends else {
                warn!(topic = %t, partition = p, "cannot read watermarks; will retry");
                self.ctx().to_learn.lock().push((t, p));
                continue;
            };
            let start = backlog::group_start(&committed, &t, p, (low, high), at_end);
            let mut tracker = self.ctx().acks.lock();
            if tracker.epoch(&t, p).is_none() {
                continue;
            }
            tracker.set_committed_from_broker(&t, p, start);
            debug!(topic = %t, partition = p, start, end = high, "partition position");
            self.ctx().live.set_position((t.clone(), p), start, high);
            self.ctx().targets.lock().insert((t, p), high);
        }
    }

    /// Takes a reading of the group's backlog: publishes it with the
    /// assignment, and notes the group's positions for `group_caught_up`
    /// (the end offsets of the first reading are the targets).
    pub(super) fn commit_now(&mut self, only: Option<&[TopicPartition]>) {
        self.next_commit = Instant::now() + self.opts.kafka.commit_interval;
        self.follow_positions();
        if let Err(e) = commit(&self.consumer, &self.ctx().acks, &self.counters, only) {
            warn!(error = %e, "commit failed; will retry");
        }
    }

    /// Stops fetching, waits for in-flight records (up to the drain deadline),
    /// commits what was written.
    pub(super) fn drain(&mut self) -> SourceExit {
        let ctx = self.consumer.context().clone();
        ctx.drop_held(|_, _| true);
        ctx.pausing.lock().no_grace();
        let _ = self.set_paused(true, false, Instant::now());
        let wait = if self.abort.is_cancelled() {
            Duration::ZERO
        } else {
            self.opts.drain_timeout
        };
        let deadline = Instant::now() + wait;
        // Writes under way finish (retrying while an attempt fits before the
        // deadline); records not yet being written are abandoned.
        let assigned = ctx.acks.lock().assigned();
        ctx.acks.close_until(&assigned, deadline);
        let pending = ctx.acks.lock().pending_total();
        info!(
            in_flight = pending,
            "draining: waiting for in-flight records"
        );
        let drained = loop {
            let slice = Instant::now()
                + Duration::from_millis(100)
                    .min(deadline.saturating_duration_since(Instant::now()));
            if ctx.acks.wait_until(slice, |t| t.pending_total() == 0) {
                break true;
            }
            if Instant::now() >= deadline {
                break false;
            }
            // Keep serving callbacks; a paused consumer returns no records,
            // but one racing in from a fresh assignment is untracked again.
            if let Some(Ok(m)) = self.consumer.poll(Duration::ZERO) {
                ctx.acks
                    .lock()
                    .untrack_from(m.topic(), m.partition(), m.offset());
            }
        };
        self.commit_now(None);
        if drained {
            events::drained();
            SourceExit::Stopped
        } else {
            let left = ctx.acks.lock().pending_total();
            warn!(
                in_flight = left,
                timeout_s = self.opts.drain_timeout.as_secs(),
                "drain deadline passed; unwritten records will be redelivered"
            );
            SourceExit::DrainTimedOut
        }
    }
}
