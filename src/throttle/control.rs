//! Per-table throttle control, shared by every writer of the table in this
//! process: the strategy (a pure state machine), the pacer it steers, the
//! table's provisioned capacity (polled with DescribeTable), and the accepted
//! rate over the last seconds (for strategies that want a "remaining" figure:
//! 1 - accepted rate / capacity).
//!
//! Writers ask it how long to wait and tell it what happened; they sleep (on
//! tokio's clock, so tests under a paused runtime run in virtual time).
//! It also holds the table's own counters and its BatchWriteItem latency
//! histogram, for the metrics endpoint.

use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

use crate::telemetry::Counters;
use crate::throttle::budget::{lower, Budget};
use crate::throttle::hot::{self, HotKeys};
use crate::throttle::indexes::{IndexBound, IndexInfo};
use crate::throttle::jobs::{Beat, Split};
use crate::throttle::pace::{Pacer, Slots};
use crate::throttle::window::AcceptedWindow;
use crate::throttle::{Feedback, Metrics, PeerLesson, Strategy};

/// What the table's strategy made of one answer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AnswerRead {
    /// The delay before the retry or the next request.
    pub delay: Duration,
    /// The rule that read it (see [`Strategy::rule`]).
    pub rule: Option<&'static str>,
    /// The strategy's rate after it, units/s (None: it does not pace by rate).
    pub rate: Option<f64>,
}

/// Whether, and by what, an attempt was throttled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Throttled {
    No,
    /// By the table: no refusal read as a key range's (a table-level
    /// reason, or the table ran out).
    Table,
    /// Only by key ranges, on keys the hot range did not pace yet, while it
    /// held others back (see `Feedback::key_range`).
    KeyRange,
    /// Key ranges refused some of it, and it is the table's signal still
    /// (the table refused the rest, or the keys were new to the hot range
    /// while it held nothing back): the table's rate slows as for `Table`,
    /// but the answer is no clean measure of its capacity (see
    /// `Feedback::range_read`).
    NewKeys,
}

impl Throttled {
    /// Its reading as `Feedback`'s flags: (`throttled`, `key_range`,
    /// `range_read`).
    pub fn flags(self) -> (bool, bool, bool) {
        (
            self != Throttled::No,
            self == Throttled::KeyRange,
            self == Throttled::NewKeys,
        )
    }
}

/// Where a table's lessons for the job's other workers go: (table, lesson).
pub type LessonsOut = tokio::sync::mpsc::UnboundedSender<(Arc<str>, PeerLesson)>;

/// Window of the accepted-rate estimate behind `remaining`.
pub const REMAINING_WINDOW: Duration = Duration::from_secs(1);

#[derive(Debug)]
pub struct Control {
    strategy: Mutex<Box<dyn Strategy>>,
    pacer: Pacer,
    fixed_rate: Option<f64>,
    /// The most the job may write to the table (see [`Budget`]).
    budget: Budget,
    capacity: Mutex<Option<f64>>,
    /// The table's global secondary indexes: where one has less room for
    /// this table's writes than the table, its bound is the capacity.
    indexes: Mutex<IndexBound>,
    /// The table's warm throughput, where no capacity is known.
    warm: Mutex<Option<f64>>,
    /// This worker's share of the table (by the backlog of the partitions
    /// feeding it; see `source::Assignment::share`).
    share: Mutex<Option<f64>>,
    /// This worker's parts of the fleet's time slots (its partitions'; see
    /// `sink::tables::slot_parts`), kept to when the strategy says so.
    slot_parts: Mutex<Option<Vec<(f64, f64)>>>,
    /// Batches take turns at the pacer in the order they arrive (tokio's
    /// mutex is fair), so a later batch never overtakes an earlier one.
    turn: tokio::sync::Mutex<()>,
    accepted: Mutex<AcceptedWindow>,
    epoch: Instant,
    slept_ns: AtomicU64,
    max_sleep_ns: AtomicU64,
    /// This table's share of the write-side counters (requests, throttles,
    /// items, WCU); the process totals are counted as well.
    pub counts: Counters,
    /// BatchWriteItem latency, in seconds (when metrics are served).
    latency: Option<prometheus::Histogram>,
    /// Woken by a throttle: the capacity poller re-reads the capacity early
    /// (auto scaling may have cut it).
    throttled: tokio::sync::Notify,
    /// Keys a key range refused, paced apart (None: `hot_keys = false`).
    hot: Option<Mutex<HotKeys>>,
    /// Where this table's lessons for the job's other workers go (unset:
    /// none are shared).
    lessons: std::sync::OnceLock<(Arc<str>, LessonsOut)>,
    /// This job's part of the table among the ingest jobs writing it (see
    /// [`crate::throttle::jobs`]); the whole table until others are heard.
    jobs: Mutex<Split>,
    /// What the next beat reports (see [`Control::beat`]).
    meter: Mutex<BeatMeter>,
    /// Whether the jobs writing the table are known: a worker's first
    /// request waits for it (see [`Control::jobs_known`]).
    jobs_known: tokio::sync::watch::Sender<bool>,
}

/// How long a worker's first request waits, from the control's creation,
/// for the jobs writing its table to be known.
pub const JOBS_WAIT: Duration = Duration::from_secs(3);

/// What was seen since the last beat.
#[derive(Debug, Default)]
struct BeatMeter {
    at: Duration,
    /// Time requests waited at the pacer, and since when the one waiting
    /// now (one at a time: it holds the turn) has waited.
    waited: Duration,
    pacing_from: Option<Duration>,
    wcu: u64,
    throttles: u64,
}

/// A request's turn at the table's pacer (see [`Control::turn`]).
#[derive(Debug)]
pub struct Turn<'a> {
    _held: tokio::sync::MutexGuard<'a, ()>,
}

/// The control loop's state, for logs and summaries.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ControlReport {
    pub strategy: &'static str,
    pub pacing_rate: Option<f64>,
    pub current_delay_s: f64,
    /// What the writes are paced to: the table's capacity, or an index's
    /// bound where lower.
    pub capacity: Option<f64>,
    /// The global secondary index whose capacity binds the table's writes
    /// (None: the table's own capacity does).
    pub index_bound: Option<String>,
    /// The job's budget on the table, WCU/s (None: no budget).
    pub budget: Option<f64>,
    /// This worker's share of the table: of its job's work, times the
    /// job's part.
    pub share: Option<f64>,
    /// This job's part of the table among the ingest jobs writing it.
    pub job_part: f64,
    /// Keys a key range refused, paced apart, and their rate (units/s).
    pub hot_keys: usize,
    pub hot_rate: Option<f64>,
    /// The part of each period this worker sends in, when it keeps to time
    /// slots (None: any time; see [`Slots`]).
    pub time_slot_width: Option<f64>,
    /// The table's warm throughput, units/s, where no capacity is known (an
    /// on-demand table without a maximum): where pacing started from.
    pub warm: Option<f64>,
    pub slept_s: f64,
    pub max_sleep_s: f64,
    pub metrics: Metrics,
}

impl Control {
    pub fn new(strategy: Box<dyn Strategy>, fixed_rate: Option<f64>, burst: NonZeroU32) -> Self {
        let rate = strategy.rate().or(fixed_rate);
        Self {
            strategy: Mutex::new(strategy),
            pacer: Pacer::new(rate, burst),
            fixed_rate,
            budget: Budget::default(),
            capacity: Mutex::new(None),
            indexes: Mutex::new(IndexBound::default()),
            warm: Mutex::new(None),
            share: Mutex::new(None),
            slot_parts: Mutex::new(None),
            turn: tokio::sync::Mutex::new(()),
            accepted: Mutex::new(AcceptedWindow::new(REMAINING_WINDOW)),
            epoch: Instant::now(),
            slept_ns: AtomicU64::new(0),
            max_sleep_ns: AtomicU64::new(0),
            counts: Counters::default(),
            latency: None,
            throttled: tokio::sync::Notify::new(),
            hot: Some(Mutex::new(HotKeys::default())),
            lessons: std::sync::OnceLock::new(),
            jobs: Mutex::new(Split::default()),
            meter: Mutex::new(BeatMeter::default()),
            jobs_known: tokio::sync::watch::Sender::new(true),
        }
    }

    /// Paces keys a key range refused apart from the others (the default),
    /// or not: every refusal is then the table's.
    pub fn with_hot_keys(mut self, on: bool) -> Self {
        if !on {
            self.hot = None;
        }
        self
    }

    /// Which of these partition keys are hot (see [`hot`]), under one lock
    /// (no key is hashed while none is hot, the common case).
    pub fn which_hot<'a>(&self, keys: impl Iterator<Item = &'a str>) -> Vec<bool> {
        match &self.hot {
            Some(h) => h.lock().which_hot(keys),
            None => keys.map(|_| false).collect(),
        }
    }

    /// Whether hot keys are paced apart.
    pub fn paces_hot_keys(&self) -> bool {
        self.hot.is_some()
    }

    /// Whether the hot range held a hot unit back lately ([`HotKeys::holds`]).
    pub fn hot_holds(&self) -> bool {
        let now = self.now();
        self.hot.as_ref().is_some_and(|h| h.lock().holds(now))
    }

    /// Lets `units` of a hot key go now, or says how long until they may.
    pub fn hot_admit(&self, units: u32) -> Result<(), Duration> {
        let now = self.now();
        match &self.hot {
            Some(h) => h.lock().admit(now, f64::from(units)),
            None => Ok(()),
        }
    }

    /// Tells the hot range what an answer said about it (`now` and the
    /// table's rate, written or paced, are filled in). When it found a hot
    /// range or cut its rate, says which, with the hot keys and their rate.
    pub fn hot_answer(&self, mut a: hot::Answer<'_>) -> Option<(hot::Change, usize, Option<f64>)> {
        let h = self.hot.as_ref()?;
        a.now = self.now();
        // Heard before the strategy reads it: still probing, this is the
        // answer to the first request.
        a.probe = self.strategy.lock().probing();
        let written = self.accepted.lock().rate_so_far(a.now);
        a.table_rate = written.max(self.pacer.rate().unwrap_or(0.0));
        let mut h = h.lock();
        let change = h.answer(&a)?;
        Some((change, h.len(), h.rate()))
    }

    /// Resolves after a throttle (at once if one came since the last call).
    pub async fn throttled(&self) {
        self.throttled.notified().await;
    }

    /// Never lets the job write more than `budget` to the table.
    pub fn with_budget(mut self, budget: Budget) -> Self {
        self.budget = budget;
        self.steer();
        self
    }

    /// Records BatchWriteItem latencies into `h`.
    pub fn with_latency(mut self, h: Option<prometheus::Histogram>) -> Self {
        self.latency = h;
        self
    }

    /// One BatchWriteItem call took `d`.
    pub fn observe_latency(&self, d: Duration) {
        if let Some(h) = &self.latency {
            h.observe(d.as_secs_f64());
        }
    }

    /// Time on this control's clock.
    pub fn now(&self) -> Duration {
        self.epoch.elapsed()
    }

    /// The table's provisioned write capacity (None: unknown or on-demand).
    pub fn set_capacity(&self, capacity: Option<f64>) {
        *self.capacity.lock() = capacity.filter(|c| *c > 0.0);
        self.hint();
    }

    /// The table's global secondary indexes: name, write capacity and key
    /// attribute names (DescribeTable's; see [`IndexBound`]).
    pub fn set_indexes(&self, indexes: impl IntoIterator<Item = IndexInfo>) {
        let before = self.capacity();
        self.indexes.lock().set(indexes);
        if self.capacity() != before {
            self.hint();
        }
    }

    /// What one answer's ConsumedCapacity says: `table` units the table
    /// itself consumed (its items' own, without any index's) and each
    /// global index's. The strategy is told when the
    /// indexes' bound moved.
    pub fn note_consumed(&self, table: f64, per_index: &[(String, f64)]) {
        let moved = self.indexes.lock().observe(table, per_index);
        if moved {
            self.hint();
        }
    }

    /// Whether an item with these attributes (`has`) is written to an index
    /// whose bound is near what the writes are paced to (see
    /// [`IndexBound::reaches_binding`]).
    pub fn reaches_binding_index(&self, has: impl Fn(&str) -> bool) -> bool {
        let own = *self.capacity.lock();
        self.indexes.lock().reaches_binding(own, has)
    }

    /// The capacity this table's writes are paced to: the table's own, or
    /// an index's bound where lower (None: unknown or on-demand).
    pub fn capacity(&self) -> Option<f64> {
        let own = *self.capacity.lock();
        self.indexes.lock().capacity(own)
    }

    /// The table's warm throughput (DescribeTable's `WarmThroughput`), told
    /// to the strategy where no capacity is known (see [`Strategy::warm`]).
    pub fn set_warm(&self, warm: Option<f64>) {
        *self.warm.lock() = warm.filter(|w| *w > 0.0 && self.capacity().is_none());
        self.hint();
    }

    /// This worker's share of the table's capacity (None: unknown).
    pub fn set_share(&self, share: Option<f64>) {
        *self.share.lock() = share;
        self.share_moved();
    }

    /// This job's part of the table among the ingest jobs writing it (see
    /// [`crate::throttle::jobs`]): the worker's share is scaled by it, and
    /// its time slots are kept in the job's segment of the period.
    pub fn set_jobs(&self, split: Split) {
        *self.jobs.lock() = split;
        self.share_moved();
    }

    /// This job's part of the table, as last set.
    pub fn jobs(&self) -> Split {
        *self.jobs.lock()
    }

    fn share_moved(&self) {
        let share = self.share_seen();
        if let Some(h) = &self.hot {
            h.lock().share(share);
        }
        self.hint();
    }

    /// The share the strategy is told: this worker's share of its job's
    /// work, times the job's part of the table among the jobs writing it.
    /// With a budget, the part is of the table's capacity, not of the
    /// budget: the job takes the lower of its part and its budget.
    fn share_seen(&self) -> Option<f64> {
        let share = *self.share.lock();
        match self.part_seen() {
            part if part >= 1.0 => share,
            part => Some(share.unwrap_or(1.0) * part),
        }
    }

    /// The job's part as applied to the share the strategy is told: of
    /// the capacity seen (the budget, where lower than the part of the
    /// capacity: 1).
    fn part_seen(&self) -> f64 {
        let part = self.jobs.lock().part;
        if part >= 1.0 {
            return 1.0;
        }
        match (self.capacity(), self.capacity_seen()) {
            (Some(c), Some(b)) if b > 0.0 => (part * c / b).min(1.0),
            // No capacity known, but a budget: the job's part of the table
            // cannot be weighed against it; the budget is the job's.
            (None, Some(_)) => 1.0,
            _ => part,
        }
    }

    /// Makes a worker's first request wait (at most [`JOBS_WAIT`] from the
    /// control's creation) until [`Control::jobs_heard`].
    pub fn await_jobs(&self) {
        self.jobs_known.send_replace(false);
    }

    /// The jobs writing the table are known (or will not be: the lessons
    /// topic cannot be read).
    pub fn jobs_heard(&self) {
        self.jobs_known.send_replace(true);
    }

    /// Resolves once the jobs writing the table are known, or
    /// [`JOBS_WAIT`] after the control was created.
    pub async fn jobs_known(&self) {
        let mut rx = self.jobs_known.subscribe();
        let deadline = self.epoch + JOBS_WAIT;
        let _ = tokio::time::timeout_at(deadline, rx.wait_for(|known| *known)).await;
    }

    /// What this worker tells the other jobs about the table now (see
    /// [`Beat`]), from what it saw since the last beat: busy when a
    /// throttle came, or records waited for the table (`waited`: the
    /// caller samples its queue) and either nothing was written yet (a
    /// start, or writes held) or requests waited at the pacer for a tenth
    /// of the time: the pace, not the records coming in, bounds it. (A
    /// caught-up job's records wait in its queue for the batch linger, not
    /// for the pacer.) The rate is the units written since.
    pub fn beat(&self, waited: bool) -> Beat {
        let now = self.now();
        let wcu = self.counts.wcu_written.load(Relaxed);
        let throttles = self.counts.throttled_requests.load(Relaxed);
        let mut m = self.meter.lock();
        // A wait still under way counts up to now (a beat soon after a
        // start comes before the first wait ends).
        if let Some(from) = m.pacing_from {
            m.waited += now.saturating_sub(from);
            m.pacing_from = Some(now);
        }
        let span = now.saturating_sub(m.at).as_secs_f64();
        let rate = if span > 0.0 {
            wcu.saturating_sub(m.wcu) as f64 / span
        } else {
            0.0
        };
        let written = wcu > m.wcu;
        let paced = m.waited.as_secs_f64() >= 0.1 * span;
        let busy = throttles > m.throttles || (waited && (!written || paced));
        *m = BeatMeter {
            at: now,
            waited: Duration::ZERO,
            pacing_from: m.pacing_from,
            wcu,
            throttles,
        };
        let (pace, fair) = self.pace_now();
        Beat {
            busy,
            rate,
            pace,
            fair,
        }
    }

    /// The units/s this worker paces the table at and its fair share of
    /// it (each 0 where unknown).
    fn pace_now(&self) -> (f64, f64) {
        let pace = self.pacer.rate().unwrap_or(0.0);
        let fair = self
            .capacity_seen()
            .zip(self.share_seen())
            .map_or(0.0, |(c, s)| c * s);
        (pace, fair)
    }

    /// This worker as its own beat would say now, for its part of its
    /// job's pace (see [`Jobs::job_part`](crate::throttle::jobs::Jobs::job_part)):
    /// busy, its pace and its fair share.
    pub fn own_beat(&self) -> Beat {
        let (pace, fair) = self.pace_now();
        Beat {
            busy: true,
            rate: 0.0,
            pace,
            fair,
        }
    }

    /// This worker's part of what its job paces the table at (None: no
    /// busy peer heard): the strategy is told (see [`Strategy::job_part`]).
    pub fn job_part(&self, part: Option<f64>) {
        let now = self.now();
        let moved = {
            let mut s = self.strategy.lock();
            let before = s.rate();
            s.job_part(now, part);
            s.rate() != before
        };
        // Heard at every turn of the lessons' reader: the pacer is steered
        // only where the rate moved.
        if moved {
            self.steer();
        }
    }

    /// This worker's parts of each period of the fleet's time slots (None:
    /// unknown; see [`Slots`]).
    pub fn set_slot_parts(&self, parts: Option<Vec<(f64, f64)>>) {
        *self.slot_parts.lock() = parts;
        self.steer();
    }

    /// The time slots the pacer keeps to now (None: any time).
    pub fn slots(&self) -> Option<Slots> {
        self.pacer.slots()
    }

    /// The capacity the strategy is told: the table's, or the budget if
    /// lower.
    fn capacity_seen(&self) -> Option<f64> {
        self.budget.capacity_seen(self.capacity())
    }

    /// Tells the strategy the capacity, share and warm throughput as now
    /// known.
    fn hint(&self) {
        let capacity = self.capacity_seen();
        let share = self.share_seen();
        let warm = *self.warm.lock();
        let split = self.jobs.lock().busy_jobs > 1;
        {
            let mut s = self.strategy.lock();
            s.hint(capacity, share);
            s.warm(warm);
            s.split_with_jobs(split);
        }
        self.steer();
    }

    /// Sets the pacer to the strategy's rate (or the fixed one), never above
    /// the budget x this worker's share; leaves it alone when neither sets a
    /// rate. The strategy's pacing burst (its request size limit, or
    /// slotted what the server admits at once) also bounds the burst, so
    /// requests sized to what the server admits at once do not leave back
    /// to back (only rate strategies size their requests).
    fn steer(&self) {
        let split = *self.jobs.lock();
        let (rate, (slots, burst)) = {
            let s = self.strategy.lock();
            let parts = self.slot_parts.lock();
            // Other busy jobs: this job's slots in its segment.
            let placed = parts
                .as_deref()
                .filter(|_| split.busy_jobs > 1)
                .map(|p| split.place(p));
            (
                s.rate().or(self.fixed_rate),
                slots_and_burst(&**s, placed.as_deref().or(parts.as_deref())),
            )
        };
        let share = self.share_seen();
        let cap = self.budget.worker_cap(self.capacity(), share);
        // Split with other jobs: at once never above the part (the
        // strategy follows a share's change at its next answer). Only for
        // strategies that pace by a rate: the pacer of one that does not
        // would never be steered back up.
        let part_cap = (split.part < 1.0 && rate.is_some())
            .then(|| self.capacity_seen().zip(share).map(|(c, s)| c * s))
            .flatten();
        if let Some(rate) = lower(rate, lower(cap, part_cap)) {
            self.pacer.steer(Some(rate), burst, slots);
        }
    }

    /// The next throttle reported named an account limit or an on-demand
    /// maximum (see [`Strategy::ceiling`]).
    pub fn note_ceiling(&self) {
        self.strategy.lock().ceiling();
    }

    /// Delay before a new batch's first attempt.
    pub fn before_call(&self) -> Duration {
        let now = self.now();
        self.strategy.lock().before_call(now)
    }

    /// Waits for a request's turn at the pacer: requests take turns in the
    /// order they ask (tokio's mutex is fair). The request is composed once
    /// its turn has come, so it is sized by what the server has shown it
    /// admits by then, not by what was known while earlier requests waited.
    pub async fn turn(&self) -> Turn<'_> {
        Turn {
            _held: self.turn.lock().await,
        }
    }

    /// Whether a request keeps its turn until its answer is heard: the
    /// strategy sizes requests by what the server admits at once and has
    /// had no answer yet. Composed before the first answer, the second
    /// request carried a whole batch too (one worker on a 10-unit bucket:
    /// 50 units paced for the 13 admitted, and the first 375 ms spent on
    /// two requests).
    pub fn probing(&self) -> bool {
        self.strategy.lock().probing()
    }

    /// In its turn, waits until a request's cost may be spent at the pacing
    /// rate.
    pub async fn pace(&self, _turn: &Turn<'_>, units: u32) {
        self.meter.lock().pacing_from = Some(self.now());
        self.pacer.acquire(units).await;
        let now = self.now();
        let mut m = self.meter.lock();
        if let Some(from) = m.pacing_from.take() {
            m.waited += now.saturating_sub(from);
        }
    }

    /// The most units one request should carry (None: a whole batch).
    /// Slotted, no more than the pacer can release before its part ends.
    pub fn max_request_units(&self) -> Option<f64> {
        let limit = self.strategy.lock().max_request_units();
        self.pacer.request_limit(limit)
    }

    /// Reports an attempt: `accepted_units` consumed (ConsumedCapacity), of
    /// `sent_units` asked for, `written_units` written (both by the items'
    /// own cost); returns the delay before the next one, with which rule
    /// of the strategy read it and its rate after it (read under the same
    /// lock, so a peer lane's answer cannot come between).
    pub fn after_attempt(
        &self,
        throttled: Throttled,
        accepted_units: f64,
        sent_units: f64,
        written_units: f64,
    ) -> AnswerRead {
        let now = self.now();
        let capacity = self.capacity_seen();
        let share = self.share_seen();
        let remaining = self
            .accepted
            .lock()
            .remaining(now, accepted_units, capacity);
        let (is_throttled, key_range, range_read) = throttled.flags();
        let fb = Feedback {
            now,
            throttled: is_throttled,
            key_range,
            range_read,
            range_held: self.hot_holds(),
            parted: self.hot.as_ref().is_some_and(|h| h.lock().parted(now)),
            accepted_units,
            sent_units,
            written_units,
            remaining,
            level_units: None,
            capacity,
            share,
        };
        if fb.throttled {
            self.throttled.notify_one();
        }
        let mut s = self.strategy.lock();
        let delay = s.after_attempt(&fb);
        let read = AnswerRead {
            delay,
            rule: s.rule(),
            rate: s.rate(),
        };
        let taught = s.taught();
        drop(s);
        self.steer();
        if let (Some(lesson), Some(out)) = (taught, self.lessons.get()) {
            // Best effort: a closed channel is a worker shutting down.
            let _ = out.1.send((out.0.clone(), lesson));
        }
        read
    }

    /// Sends what this table (`name`) teaches the job's other workers (see
    /// [`Strategy::taught`], [`crate::lessons`]) to `out`, from now on.
    pub fn share_lessons(&self, name: Arc<str>, out: LessonsOut) {
        let _ = self.lessons.set((name, out));
    }

    /// A peer's lesson on this table: the strategy takes it (see
    /// [`Strategy::peer_lesson`]) or not (returned).
    pub fn peer_lesson(&self, lesson: PeerLesson) -> bool {
        let now = self.now();
        let taken = self.strategy.lock().peer_lesson(now, lesson);
        self.steer();
        taken
    }

    /// Accounts for a wait of `d` (the writer waits, cancellably).
    pub fn note_sleep(&self, d: Duration) {
        let ns = d.as_nanos().min(u128::from(u64::MAX)) as u64;
        self.slept_ns.fetch_add(ns, Relaxed);
        self.max_sleep_ns.fetch_max(ns, Relaxed);
    }

    pub fn report(&self) -> ControlReport {
        let capacity = self.capacity();
        let own = *self.capacity.lock();
        let index_bound = self.indexes.lock().bound_by(own).map(str::to_string);
        let (hot_keys, hot_rate) = self.hot.as_ref().map_or((0, None), |h| {
            let h = h.lock();
            (h.len(), h.rate())
        });
        let s = self.strategy.lock();
        ControlReport {
            strategy: s.name(),
            pacing_rate: self.pacer.rate().or(self.fixed_rate),
            current_delay_s: s.current_delay().as_secs_f64(),
            capacity,
            index_bound,
            budget: self.budget.limit(capacity),
            share: self.share_seen(),
            job_part: self.part_seen(),
            hot_keys,
            hot_rate,
            time_slot_width: self.pacer.slots().map(|s| s.width()),
            warm: *self.warm.lock(),
            slept_s: self.slept_ns.load(Relaxed) as f64 / 1e9,
            max_sleep_s: self.max_sleep_ns.load(Relaxed) as f64 / 1e9,
            metrics: s.metrics(),
        }
    }
}

/// The most units the pacer should release at once (None: the configured
/// burst): the request size `limit`, so that requests sized to what the
/// server admits at once do not leave back to back. Within time slots that
/// are in force (a part of the period, not all of it) a client is alone in
/// its parts: requests smaller than what the server has shown it admits at
/// once (`once`) may then leave back to back up to that much, which also
/// absorbs the timer's late wake-ups (a limiter as deep as one request has
/// none: in `make bench-dynamodb`, requests of 2 units on a 5-unit bucket
/// went at 163 of the 196 units/s asked). A worker alone in its group (its
/// part is the whole period) gets one unit of that slack, within what the
/// server admits at once: it has no part to itself, and the unit is what
/// a late wake-up costs at such a pace.
pub fn pacing_burst(limit: Option<f64>, once: Option<f64>, slots: Option<&Slots>) -> Option<f64> {
    let width = slots.map_or(0.0, Slots::width);
    match (limit, once) {
        (Some(l), Some(o)) if width > 0.0 && width < 1.0 => Some(l.max(o)),
        (Some(l), Some(o)) if width >= 1.0 => Some(l.max((l + 1.0).min(o))),
        _ => limit,
    }
}

/// What a strategy asks of its pacer besides the rate: the time slots it
/// keeps to (this worker's `parts` of the period, when the strategy keeps
/// to slots and the parts are known) and the burst ([`pacing_burst`]).
pub fn slots_and_burst(s: &dyn Strategy, parts: Option<&[(f64, f64)]>) -> (Option<Slots>, u32) {
    let slots = parts
        .filter(|_| s.slotted())
        .map(|p| Slots::new(p.to_vec()));
    let size = pacing_burst(s.max_request_units(), s.admits_at_once(), slots.as_ref());
    (slots, burst_for(size))
}

/// The pacer burst for a request size limit (None: the configured one).
pub fn burst_for(size: Option<f64>) -> u32 {
    size.map_or(u32::MAX, |u| u.floor() as u32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::throttle::StrategyConfig;

    fn burst() -> NonZeroU32 {
        NonZeroU32::new(25).unwrap()
    }

    #[test]
    fn each_reading_of_a_throttle_sets_its_own_feedback_flags() {
        let flags = Throttled::flags;
        assert_eq!(flags(Throttled::No), (false, false, false));
        assert_eq!(flags(Throttled::Table), (true, false, false));
        assert_eq!(flags(Throttled::KeyRange), (true, true, false));
        assert_eq!(flags(Throttled::NewKeys), (true, false, true));
    }

    #[test]
    fn within_slots_in_force_the_pacer_releases_up_to_what_the_server_admits_at_once() {
        let third = Slots::new(vec![(0.0, 1.0 / 3.0)]);
        let whole = Slots::new(vec![(0.0, 1.0)]);
        // Requests of 2.5 units on a table that admits 5 at once: alone in
        // its parts, two may leave back to back.
        assert_eq!(pacing_burst(Some(2.5), Some(5.0), Some(&third)), Some(5.0));
        // Not slotted: the request size; the whole period (one worker):
        // one unit more, within what the server admits at once.
        assert_eq!(pacing_burst(Some(2.5), Some(5.0), None), Some(2.5));
        assert_eq!(pacing_burst(Some(2.5), Some(5.0), Some(&whole)), Some(3.5));
        assert_eq!(pacing_burst(Some(4.5), Some(5.0), Some(&whole)), Some(5.0));
        assert_eq!(pacing_burst(Some(5.0), Some(5.0), Some(&whole)), Some(5.0));
        // Never below the request size; no limit, no burst limit.
        assert_eq!(pacing_burst(Some(8.0), Some(5.0), Some(&third)), Some(8.0));
        assert_eq!(pacing_burst(None, Some(5.0), Some(&third)), None);
    }

    #[test]
    fn a_slotted_strategy_asks_its_pacer_for_its_parts_and_what_the_table_admits_at_once() {
        // A third of a 200 WCU/s table that admitted 10 of 50 units at once
        // (under a tenth of a second: slotted), then 5 of 10 (within that:
        // a rate signal, requests halve to 5).
        let c = Control::new(StrategyConfig::default().build(1), None, burst());
        c.set_capacity(Some(200.0));
        c.set_share(Some(1.0 / 3.0));
        c.after_attempt(Throttled::Table, 10.0, 50.0, 10.0);
        c.after_attempt(Throttled::Table, 5.0, 10.0, 5.0);
        let s = c.strategy.lock();
        assert!(s.slotted());
        assert_eq!(s.max_request_units(), Some(5.0));
        let third = [(0.0, 1.0 / 3.0)];
        let (slots, burst) = slots_and_burst(&**s, Some(&third));
        assert_eq!(slots, Some(Slots::new(third.to_vec())));
        assert_eq!(burst, 10, "within its parts: what the table admits at once");
        assert_eq!(slots_and_burst(&**s, None), (None, 5), "parts unknown");
        let (_, burst) = slots_and_burst(&**s, Some(&[(0.0, 1.0)]));
        assert_eq!(burst, 6, "alone in its group: one unit of slack");
    }

    #[test]
    fn a_first_halving_goes_out_as_a_lesson_and_a_peers_control_paces_by_it() {
        let third = || at_share(200.0, 1.0 / 3.0, Budget::default());
        let fair = 200.0 / 3.0 * 0.98;
        let (a, b) = (third(), third());
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        a.share_lessons("orders".into(), tx);
        a.after_attempt(Throttled::Table, 0.0, 5.0, 0.0);
        let (table, lesson) = rx.try_recv().expect("the halving is taught");
        assert_eq!(&*table, "orders");
        assert_eq!(lesson.lesson, crate::throttle::Lesson::FirstMeeting);
        assert!((lesson.level - 1.0).abs() < 0.01, "{lesson:?}");
        assert!(rx.try_recv().is_err(), "once");
        // The peer's pacer follows the lesson at once.
        assert!((b.report().pacing_rate.unwrap() - fair).abs() < 0.01);
        assert!(b.peer_lesson(lesson));
        let paced = b.report().pacing_rate.unwrap();
        assert!((paced - 0.5 * fair).abs() < 0.01, "{paced}");
        assert!(!b.peer_lesson(lesson), "met already");
    }

    #[test]
    fn a_rate_strategy_steers_the_pacer() {
        let c = Control::new(StrategyConfig::default().build(1), None, burst());
        c.set_capacity(Some(200.0));
        c.after_attempt(Throttled::No, 25.0, 25.0, 25.0);
        assert_eq!(c.report().pacing_rate, Some(196.0));
        assert_eq!(c.report().capacity, Some(200.0));
    }

    #[test]
    fn an_index_with_less_room_than_the_table_is_the_capacity_paced_to() {
        let c = Control::new(StrategyConfig::default().build(1), None, burst());
        c.set_capacity(Some(200.0));
        c.set_indexes([IndexInfo::new("by_g", Some(50.0), &["g"])]);
        // Before any write, the index is taken to cost what the table does.
        c.after_attempt(Throttled::No, 25.0, 25.0, 25.0);
        let r = c.report();
        assert_eq!(
            (r.capacity, r.index_bound.as_deref()),
            (Some(50.0), Some("by_g"))
        );
        assert_eq!(r.pacing_rate, Some(49.0));
        // Measured: a fifth of the table's units reach it. 50 / 0.2 = 250,
        // above the table's 200: the table binds again.
        for _ in 0..10 {
            c.note_consumed(25.0, &[("by_g".to_string(), 5.0)]);
        }
        c.after_attempt(Throttled::No, 25.0, 25.0, 25.0);
        let r = c.report();
        assert_eq!((r.capacity, r.index_bound), (Some(200.0), None));
        // A budget is a fraction of what the writes are paced to.
        let c =
            Control::new(StrategyConfig::default().build(1), None, burst()).with_budget(Budget {
                fraction: Some(0.5),
                wcu: None,
            });
        c.set_capacity(Some(200.0));
        c.set_indexes([IndexInfo::new("by_g", Some(50.0), &["g"])]);
        assert_eq!(c.report().budget, Some(25.0));
    }

    #[test]
    fn a_delay_strategy_keeps_the_fixed_rate() {
        let cfg: StrategyConfig = toml::from_str::<toml::Value>(r#"name = "autosleeper""#)
            .unwrap()
            .try_into()
            .unwrap();
        let c = Control::new(cfg.build(1), Some(50.0), burst());
        let d = c.after_attempt(Throttled::Table, 0.0, 25.0, 0.0).delay;
        assert_eq!(
            d,
            Duration::from_millis(500),
            "AutoSleeper's initial interval"
        );
        assert_eq!(c.report().pacing_rate, Some(50.0));
        assert_eq!(c.report().metrics.went_up, 1);
    }

    #[test]
    fn the_budget_caps_any_strategy_at_its_share() {
        // Adaptive is told the budget as the capacity: 98% of 100 x 0.5.
        let half = Budget {
            fraction: Some(0.5),
            wcu: None,
        };
        let c = Control::new(StrategyConfig::default().build(1), None, burst()).with_budget(half);
        c.set_capacity(Some(200.0));
        c.set_share(Some(0.5));
        c.after_attempt(Throttled::No, 25.0, 25.0, 25.0);
        assert_eq!(c.report().pacing_rate, Some(49.0));
        assert_eq!(c.report().budget, Some(100.0));
        assert_eq!(c.report().capacity, Some(200.0), "the table's own");
        // A delay strategy with a fixed rate above it is held to 20 x 1.
        let cfg: StrategyConfig = toml::from_str::<toml::Value>(r#"name = "autosleeper""#)
            .unwrap()
            .try_into()
            .unwrap();
        let abs = Budget {
            fraction: None,
            wcu: Some(20.0),
        };
        let c = Control::new(cfg.build(1), Some(50.0), burst()).with_budget(abs);
        assert_eq!(c.report().pacing_rate, Some(20.0), "before any call");
        c.after_attempt(Throttled::Table, 0.0, 25.0, 0.0);
        assert_eq!(c.report().pacing_rate, Some(20.0));
    }

    /// The default strategy's control on a table of `capacity`, at
    /// `share`, after one clean answer.
    fn at_share(capacity: f64, share: f64, budget: Budget) -> Control {
        let c = Control::new(StrategyConfig::default().build(1), None, burst()).with_budget(budget);
        c.set_capacity(Some(capacity));
        c.set_share(Some(share));
        c.after_attempt(Throttled::No, 5.0, 5.0, 5.0);
        c
    }

    fn split(part: f64, segment: (f64, f64), busy_jobs: usize) -> Split {
        Split {
            part,
            segment,
            busy_jobs,
            jobs: busy_jobs,
        }
    }

    #[test]
    fn another_busy_job_halves_the_share_paced_to_and_its_leaving_gives_it_back() {
        let c = at_share(200.0, 1.0 / 3.0, Budget::default());
        let fair = 200.0 / 3.0 * 0.98;
        let paced = || c.report().pacing_rate.unwrap();
        assert!((paced() - fair).abs() < 0.01, "{}", paced());
        // At once never above the part; at the next answer at the part's
        // fair rate.
        c.set_jobs(split(0.5, (0.5, 1.0), 2));
        assert!((paced() - 200.0 / 6.0).abs() < 0.01, "{}", paced());
        let r = c.report();
        assert!((r.share.unwrap() - 1.0 / 6.0).abs() < 1e-9, "{r:?}");
        assert_eq!(r.job_part, 0.5);
        c.after_attempt(Throttled::No, 5.0, 5.0, 5.0);
        assert!((paced() - fair / 2.0).abs() < 0.01, "{}", paced());
        c.set_jobs(Split::default());
        c.after_attempt(Throttled::No, 5.0, 5.0, 5.0);
        assert!((paced() - fair).abs() < 0.01, "{}", paced());
    }

    #[test]
    fn split_with_another_busy_job_the_first_throttle_is_no_first_meeting() {
        // Alone: the first throttle at the share halves (another writer as
        // large as the job, unknown); split, the other job's part is left
        // to it already (see `Strategy::split_with_jobs`).
        let alone = at_share(200.0, 1.0 / 3.0, Budget::default());
        let read = alone.after_attempt(Throttled::Table, 0.0, 25.0, 0.0);
        assert_eq!(read.rule, Some("first_cut"));
        let c = at_share(200.0, 1.0 / 3.0, Budget::default());
        c.set_jobs(split(0.5, (0.0, 0.5), 2));
        c.after_attempt(Throttled::No, 5.0, 5.0, 5.0);
        let read = c.after_attempt(Throttled::Table, 0.0, 25.0, 0.0);
        assert_eq!(read.rule, Some("cut"));
        // Nor is a peer's first meeting (taught by a worker that had not
        // heard the other job yet): split, it halves nothing.
        let c = at_share(200.0, 1.0 / 3.0, Budget::default());
        c.set_jobs(split(0.5, (0.0, 0.5), 2));
        let before = c.report().pacing_rate.unwrap();
        let lesson = PeerLesson {
            lesson: crate::throttle::Lesson::FirstMeeting,
            level: 1.0,
        };
        assert!(!c.peer_lesson(lesson), "not taken while split");
        assert_eq!(c.report().pacing_rate.unwrap(), before);
        c.set_jobs(Split::default());
        assert!(c.peer_lesson(lesson), "alone again: taken");
        // Another job heard but idle: no split of the busy, the first
        // meeting as alone.
        let c = at_share(200.0, 1.0 / 3.0, Budget::default());
        c.set_jobs(Split {
            busy_jobs: 1,
            ..split(0.9, (0.0, 1.0), 1)
        });
        let read = c.after_attempt(Throttled::Table, 0.0, 25.0, 0.0);
        assert_eq!(read.rule, Some("first_cut"));
    }

    #[test]
    fn with_a_budget_the_job_takes_the_lower_of_its_part_and_its_budget() {
        let budget = Budget {
            fraction: Some(0.65),
            wcu: None,
        };
        let c = at_share(200.0, 1.0, budget);
        let paced = || c.report().pacing_rate.unwrap();
        assert!((paced() - 0.98 * 130.0).abs() < 0.01, "{}", paced());
        // Half the table is less than the budget: half the table.
        c.set_jobs(split(0.5, (0.0, 0.5), 2));
        c.after_attempt(Throttled::No, 5.0, 5.0, 5.0);
        assert!((paced() - 0.98 * 100.0).abs() < 0.01, "{}", paced());
        // Four fifths is more: the budget still.
        c.set_jobs(split(0.8, (0.0, 0.5), 2));
        c.after_attempt(Throttled::No, 5.0, 5.0, 5.0);
        assert!((paced() - 0.98 * 130.0).abs() < 0.01, "{}", paced());
    }

    #[test]
    fn a_split_never_paces_a_strategy_that_sets_no_rate_nor_splits_a_budget_of_an_unknown_capacity()
    {
        // Exponential backoff sets no rate: a split leaves its pacer alone
        // (a cap set then would never be lifted).
        let cfg: StrategyConfig = toml::from_str::<toml::Value>(r#"name = "exponential""#)
            .unwrap()
            .try_into()
            .unwrap();
        let c = Control::new(cfg.build(1), None, burst());
        c.set_capacity(Some(200.0));
        c.set_share(Some(0.5));
        c.set_jobs(split(0.5, (0.0, 0.5), 2));
        assert_eq!(c.report().pacing_rate, None);
        // On-demand without a maximum, a budget of 100: the job's own.
        let c =
            Control::new(StrategyConfig::default().build(1), None, burst()).with_budget(Budget {
                fraction: None,
                wcu: Some(100.0),
            });
        c.set_share(Some(1.0));
        c.set_jobs(split(0.5, (0.0, 0.5), 2));
        assert_eq!(c.report().share, Some(1.0));
        assert_eq!(c.report().job_part, 1.0, "the part applied");
    }

    #[tokio::test(start_paused = true)]
    async fn a_beat_is_busy_while_records_wait_or_throttles_come_and_says_what_was_written() {
        let c = Control::new(StrategyConfig::default().build(1), None, burst());
        let idle = |rate| Beat {
            busy: false,
            rate,
            ..c.own_beat()
        };
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(c.beat(false), idle(0.0));
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(c.beat(true).busy, "records waited, nothing written yet");
        c.counts.wcu_written.fetch_add(150, Relaxed);
        tokio::time::advance(Duration::from_millis(500)).await;
        assert_eq!(c.beat(false), idle(300.0));
        // Records waited but went as they came: the pace bounds nothing.
        c.counts.wcu_written.fetch_add(10, Relaxed);
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(c.beat(true), idle(10.0));
        // They waited for the pacer a tenth of the time or more.
        c.counts.wcu_written.fetch_add(10, Relaxed);
        c.meter.lock().waited = Duration::from_millis(200);
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(c.beat(true).busy, "paced");
        // A wait under way counts.
        c.counts.wcu_written.fetch_add(10, Relaxed);
        c.meter.lock().pacing_from = Some(c.now());
        tokio::time::advance(Duration::from_millis(300)).await;
        assert!(c.beat(true).busy, "waiting at the pacer now");
        c.meter.lock().pacing_from = None;
        c.counts.throttled_requests.fetch_add(1, Relaxed);
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(c.beat(false).busy, "throttled since");
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(!c.beat(false).busy);
    }

    #[tokio::test(start_paused = true)]
    async fn a_first_request_waits_for_the_jobs_at_most_a_few_seconds() {
        let c = Arc::new(Control::new(
            StrategyConfig::default().build(1),
            None,
            burst(),
        ));
        // Not waiting for them: at once.
        tokio::time::timeout(Duration::from_millis(1), c.jobs_known())
            .await
            .expect("no wait");
        c.await_jobs();
        let t = tokio::time::Instant::now();
        c.jobs_known().await;
        assert_eq!(t.elapsed(), JOBS_WAIT, "never heard: the deadline");
        let c = Arc::new(Control::new(
            StrategyConfig::default().build(1),
            None,
            burst(),
        ));
        c.await_jobs();
        let waiting = tokio::spawn({
            let c = c.clone();
            async move { c.jobs_known().await }
        });
        tokio::time::advance(Duration::from_millis(300)).await;
        c.jobs_heard();
        let t = tokio::time::Instant::now();
        waiting.await.unwrap();
        assert_eq!(t.elapsed(), Duration::ZERO, "heard: at once");
    }

    #[test]
    fn on_demand_tables_have_no_capacity() {
        let c = Control::new(StrategyConfig::default().build(1), None, burst());
        c.set_capacity(Some(0.0));
        assert_eq!(c.report().capacity, None);
    }

    #[test]
    fn the_strategy_hears_capacity_and_share_before_its_first_call() {
        // Adaptive spreads its first call over one unit's period at its
        // starting rate, which it can only know from the hint.
        let c = Control::new(StrategyConfig::default().build(3), None, burst());
        c.set_capacity(Some(2.0));
        c.set_share(Some(0.5));
        let d = c.before_call();
        assert!(d > Duration::ZERO, "{d:?}");
        assert!(d.as_secs_f64() < 1.0 / (2.0 * 0.5 * 0.98), "{d:?}");
        assert_eq!(c.before_call(), Duration::ZERO, "the first call only");
    }
}
