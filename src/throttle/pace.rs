//! Pacing in capacity units, with `governor`.
//!
//! Each write waits for its whole cost (the WCU of its items) before it is
//! sent, released smoothly: the limiter's burst is small (`burst` units, plus
//! 5 ms of the pace so that late wake-ups do not lose it), and costs above it
//! are taken in chunks, so a 200 WCU/s table sees many small releases rather
//! than one burst per second. A governor quota cannot change,
//! so a rate change swaps in a new limiter (only when the rate moved by more
//! than 1%). The new limiter inherits the old one's debt: it releases nothing
//! before the old one would have been full again, so a rate change neither
//! hands out a free burst nor forgives units already released, and frequent
//! changes do not starve large costs. One pacer is shared by every writer of a table in this process.
//! Waiting here never blocks the Kafka consumer: the source pauses partitions
//! and keeps polling when the pipeline is full.
//!
//! **Time slots.** Where the server admits little at once (a shallow bucket),
//! workers pacing independently still meet: requests of two workers that
//! arrive within the bucket's depth of each other take more than it holds.
//! With [`Slots`] set, a pacer releases units only within its parts of a
//! period on the wall clock the fleet shares (each worker's parts are its
//! partitions' share of the period, so the parts of a group tile it), at
//! its rate / its parts' width: within its parts a worker is alone at
//! the table's pace, and the table sees one steady writer. A chunk is
//! released only if the limiter (the table's bucket as this pacer sees it)
//! is full again after it before the part ends, less `SLOT_GUARD` for
//! clocks and networks that are not exact: the next part's owner finds the
//! table's bucket full. [`Pacer::slot_room`] says how much can still go in
//! the current part, and the writer sizes its next request to it (where
//! that is at least half a request, [`Pacer::request_limit`]): requests of a fixed
//! size left up to one unused at each part's end (three workers on a 10
//! WCU bucket: 60 of the 65 units a part holds). The limiter fills between the
//! parts, so a part opens with a burst: right where the table's bucket is
//! full again (the part before ended its releases early enough to repay
//! them), but above the rate asked wherever that burst is more than the rate
//! gives in a period (at 18 units/s and 25-unit chunks a worker released a
//! chunk every period, 25 units/s). So a slotted pacer also keeps to an
//! average gate: a [`Bucket`] filling at the rate asked that holds a chunk
//! plus a period of the rate. The period's slack lets a chunk that waited
//! for its part catch up later, so the gate takes nothing where the parts
//! release less than the rate. It starts full when slots begin (holding
//! back their first period cost three clients of `ingest sim`'s
//! shallow-bucket, seed 1, 77.1% -> 74.5% utilization at 0.52% -> 1.22%
//! throttled), and keeps its fill level across rate changes. Not a second
//! governor limiter: a chunk must be taken from both or from neither, and
//! governor cannot say whether it would admit one without taking it.
//!
//! The pacer is generic over governor's clock: the worker uses tokio's clock
//! ([`TokioClock`]: real time in production, virtual under a paused test
//! runtime) and waits (`acquire`), the simulator (`crate::sim`) uses governor's fake
//! clock in virtual time and asks how long to wait (`check`), so both pace
//! with the very same limiter code.

use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use governor::clock::{Clock, Reference};
use governor::middleware::NoOpMiddleware;
use governor::nanos::Nanos;
use governor::state::{InMemoryState, NotKeyed};
use governor::{Quota, RateLimiter};
use parking_lot::{Mutex, RwLock};

use crate::bucket::Bucket;

type Limiter<C> = RateLimiter<NotKeyed, InMemoryState, C, NoOpMiddleware<<C as Clock>::Instant>>;

/// The period of the fleet's time slots: each worker waits at most this
/// long for its part.
pub const SLOT_PERIOD: Duration = Duration::from_secs(1);

/// A slot's end kept free, for clocks and networks that are not exact.
/// Each part already ends with the table's bucket full again (the end
/// rule), which absorbs a request that lands late by up to the bucket's
/// depth, so most of the guard is lost time: 10 ms until 2026-11-27, 5 ms
/// since (`ingest sim`'s shallow bucket, three clients: 82.9% -> 86.6%
/// utilized at fewer throttles; the figures, the bench's and what it costs
/// where slots come and go: README, "A 5 ms guard").
pub const SLOT_GUARD: Duration = Duration::from_millis(5);

/// The parts of every `period` (of wall-clock time since the Unix epoch)
/// in which a pacer releases units (see the module doc).
#[derive(Debug, Clone, PartialEq)]
pub struct Slots {
    pub period: Duration,
    /// Sorted, disjoint `[start, end)` fractions of the period.
    pub parts: Vec<(f64, f64)>,
}

impl Slots {
    /// These parts of every `SLOT_PERIOD`.
    pub fn new(parts: Vec<(f64, f64)>) -> Self {
        Self {
            period: SLOT_PERIOD,
            parts,
        }
    }

    /// The fraction of the period the parts take.
    pub fn width(&self) -> f64 {
        self.parts.iter().map(|(a, b)| b - a).sum()
    }

    /// How long from wall time `at` until `need` may start: zero within a
    /// part that has `need` left before its end (less `SLOT_GUARD`), else
    /// the time to the next part's start. A need longer than a whole part
    /// starts in the first half of a part: a waker is never exactly on
    /// time, and one that had to start at the part's very instant waited a
    /// whole period after every wake-up (a worker of the two-jobs bench,
    /// slotted at 18 units/s with 25-unit chunks, wrote nothing for 108 s).
    pub fn wait(&self, at: Duration, need: Duration) -> Duration {
        let p = self.period.as_secs_f64();
        if self.parts.is_empty() || p <= 0.0 {
            return Duration::ZERO;
        }
        let phase = at.as_secs_f64() % p;
        let (need, guard) = (need.as_secs_f64(), SLOT_GUARD.as_secs_f64());
        let mut next = f64::INFINITY;
        for &(a, b) in &self.parts {
            let (start, end) = (a * p, b * p);
            // The last start from which `need` ends before the guard.
            let fits = end - guard - need;
            let last = if fits >= start {
                fits
            } else {
                start + (end - start) / 2.0
            };
            if phase >= start && phase <= last {
                return Duration::ZERO;
            }
            next = next.min(until(phase, start, p));
        }
        Duration::from_secs_f64(next.max(1e-9))
    }

    /// From wall time `at` on, released at `per_unit` seconds a unit: the
    /// units that fit before the current part's end (less `SLOT_GUARD`), or
    /// in the next part where less than one unit does.
    pub fn room(&self, at: Duration, per_unit: f64) -> f64 {
        let p = self.period.as_secs_f64();
        let guard = SLOT_GUARD.as_secs_f64();
        if self.parts.is_empty() || p <= 0.0 || per_unit <= 0.0 {
            return f64::INFINITY;
        }
        let phase = at.as_secs_f64() % p;
        let mut next: Option<(f64, f64)> = None;
        for &(a, b) in &self.parts {
            let (start, end) = (a * p, b * p);
            if phase >= start && phase < end {
                let left = (end - guard - phase) / per_unit;
                if left >= 1.0 {
                    return left;
                }
            }
            let ahead = until(phase, start, p);
            if next.is_none_or(|(d, _)| ahead < d) {
                next = Some((ahead, end - start));
            }
        }
        next.map_or(f64::INFINITY, |(_, width)| {
            ((width - guard) / per_unit).max(1.0)
        })
    }
}

/// From `phase` to the next `start` of a period `p` (a whole period when
/// it is now).
fn until(phase: f64, start: f64, p: f64) -> f64 {
    if start > phase {
        start - phase
    } else {
        start + p - phase
    }
}

/// A request's size limit (None: a whole batch) within a pacer's
/// [`Pacer::slot_room`] (None: not slotted), where that room is at least
/// half the limit: a smaller rest of a part is left (the request waits for
/// the next part), or the ends of parts would cost many tiny requests.
fn within_room(limit: Option<f64>, room: Option<f64>) -> Option<f64> {
    match (limit, room) {
        (Some(l), Some(r)) if r >= l / 2.0 => Some(l.min(r)),
        (l, r) => l.or(r),
    }
}

#[derive(Debug)]
struct Current<C: Clock> {
    /// The rate asked for (units/s on average).
    rate: f64,
    /// The limiter's: `rate` / the slots' width when slotted.
    pace: f64,
    burst: NonZeroU32,
    limiter: Arc<Limiter<C>>,
    /// Nothing is released before this: the debt of the limiter this one
    /// replaced (when it would have been full again).
    hold_until: Option<C::Instant>,
    /// Slotted: the average gate and the end rule's state.
    slotted: Option<Mutex<SlotGate>>,
}

/// What a slotted pacer keeps beside its limiter.
#[derive(Debug, Clone)]
struct SlotGate {
    /// The average gate (on the clock's time as a Duration).
    average: Bucket,
    /// When the limiter is full again (its theoretical arrival time, kept
    /// beside it: governor does not say), for the end rule.
    full_at: Nanos,
}

/// tokio's timer sleeps in whole milliseconds: a wait shorter than that lasts
/// up to one.
const TIMER_TICK_S: f64 = 0.002;

/// The burst, raised to what the pace releases in [`TIMER_TICK_S`]: where a
/// chunk refills in less than a tick, each chunk after the first would wait
/// a whole tick. At 25 units and 1M units/s, a request of 100 units (25
/// items of 4 KB) took 3 ms to pace, one request at a time (a turn): 6.7k
/// records/s through the stand-in. Below 12,500 units/s nothing changes.
fn at_least_a_tick(burst: NonZeroU32, pace: f64) -> NonZeroU32 {
    let tick = (pace * TIMER_TICK_S).ceil().min(f64::from(u32::MAX)) as u32;
    burst.max(NonZeroU32::new(tick).unwrap_or(burst))
}

/// How late a wake-up may be without losing pace, where the burst is not
/// held down to what the server admits at once: the limiter forgets the
/// time a waiter sleeps past its chunk's moment (a GCRA with a burst of one
/// chunk has no tolerance), and tokio wakes up to a millisecond late, more on
/// a busy machine. At 20,000 units/s through the stand-in with a burst of 2
/// ms of the pace, one worker wrote 15,800 units/s.
const LATE_WAKE_S: f64 = 0.005;

/// The burst plus what the pace releases in [`LATE_WAKE_S`].
fn with_late_wakes(burst: NonZeroU32, pace: f64) -> NonZeroU32 {
    let late = (pace * LATE_WAKE_S).floor().min(f64::from(u32::MAX)) as u32;
    burst.saturating_add(late)
}

/// governor's clock on tokio's time: the worker's pacer follows the same
/// clock as its sleeps, so tests under a paused runtime pace in virtual time.
#[derive(Debug, Clone)]
pub struct TokioClock {
    start: tokio::time::Instant,
}

impl Default for TokioClock {
    fn default() -> Self {
        Self {
            start: tokio::time::Instant::now(),
        }
    }
}

impl Clock for TokioClock {
    type Instant = Nanos;

    fn now(&self) -> Nanos {
        Nanos::from(self.start.elapsed())
    }
}

/// A swappable rate limiter in capacity units per second; `None` = unpaced.
#[derive(Debug)]
pub struct Pacer<C: Clock = TokioClock> {
    /// Units released at once at most (`steer` lowers it, never above
    /// the configured one).
    burst: AtomicU32,
    max_burst: NonZeroU32,
    clock: C,
    /// Wall time (since the Unix epoch) at the clock's zero: slots follow
    /// the wall clock.
    wall_at_zero: Duration,
    slots: RwLock<Option<Slots>>,
    current: RwLock<Option<Current<C>>>,
}

impl Pacer<TokioClock> {
    /// A pacer at `rate` units/s (None: no pacing) releasing at most `burst`
    /// units at once, on tokio's clock.
    pub fn new(rate: Option<f64>, burst: NonZeroU32) -> Self {
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        Self::with_clock(rate, burst, TokioClock::default()).with_wall_offset(wall)
    }

    /// Waits until `units` may be spent, taking them in chunks of at most
    /// `burst`. Each chunk is taken from the limiter current at that moment
    /// (a wait re-checks after sleeping), so a swap during a wait applies.
    pub async fn acquire(&self, units: u32) {
        let mut left = units;
        while left > 0 {
            match self.check(left) {
                Ok(taken) => left -= taken,
                Err(wait) => tokio::time::sleep(wait).await,
            }
        }
    }
}

impl<C: Clock<Instant = Nanos> + Clone> Pacer<C> {
    /// Its wall clock `offset` ahead (the simulator's clients whose clocks
    /// are off: time slots follow each one's own wall clock).
    pub fn with_wall_offset(mut self, offset: Duration) -> Self {
        self.wall_at_zero += offset;
        self
    }

    /// A pacer on the given clock (its zero taken as the wall clock's: the
    /// simulator's clients share one virtual clock).
    pub fn with_clock(rate: Option<f64>, burst: NonZeroU32, clock: C) -> Self {
        let p = Self {
            burst: AtomicU32::new(burst.get()),
            max_burst: burst,
            clock,
            wall_at_zero: Duration::ZERO,
            slots: RwLock::new(None),
            current: RwLock::new(None),
        };
        p.set_rate(rate);
        p
    }

    /// Takes the next chunk (at most `burst`) of `units` if it may be spent
    /// now and returns its size, or says how long to wait for it.
    pub fn check(&self, units: u32) -> Result<u32, Duration> {
        let guard = self.current.read();
        let Some(c) = guard.as_ref() else {
            return Ok(units);
        };
        let now = self.clock.now();
        if let Some(h) = c.hold_until {
            let wait = Duration::from(h.duration_since(now));
            if !wait.is_zero() {
                return Err(wait);
            }
        }
        let chunk = units.min(c.burst.get());
        let Some(n) = NonZeroU32::new(chunk) else {
            return Ok(0);
        };
        // The gate is held across the limiter's check: a chunk is taken
        // from both or from neither.
        let mut gate = c.slotted.as_ref().map(|g| g.lock());
        if let (Some(g), Some(slots)) = (gate.as_deref_mut(), self.slots.read().as_ref()) {
            // The table's bucket must be full again by the part's end: the
            // limiter (its mirror at the pace) full again after this chunk.
            let refill = Duration::from(g.full_at.saturating_sub(now));
            let need = refill + Duration::from_secs_f64(chunk as f64 / c.pace);
            let wall = self.wall_at_zero + Duration::from(now);
            let wait = slots.wait(wall, need);
            if !wait.is_zero() {
                return Err(wait);
            }
            let wait = g.average.wait_for(f64::from(chunk), Duration::from(now));
            if !wait.is_zero() {
                return Err(wait);
            }
        }
        match c.limiter.check_n(n).expect("chunk <= burst") {
            Ok(()) => {
                if let Some(g) = gate.as_deref_mut() {
                    let taken = g.average.try_take(f64::from(chunk), Duration::from(now));
                    debug_assert!(taken, "the gate said the chunk was there");
                    g.full_at = g.full_at.max(now)
                        + Nanos::from(Duration::from_secs_f64(f64::from(chunk) / c.pace));
                }
                Ok(chunk)
            }
            Err(not_until) => Err(not_until.wait_time_from(now).max(Duration::from_nanos(1))),
        }
    }

    /// The pacing rate, if any.
    pub fn rate(&self) -> Option<f64> {
        self.current.read().as_ref().map(|c| c.rate)
    }

    /// Changes the rate, the most units released at once (capped at the
    /// configured burst, at least 1: requests the server admits only in small
    /// pieces are then not released back to back) and the time slots kept
    /// to (None: any time; the limiter's pace is the rate / their width),
    /// swapping the limiter once.
    pub fn steer(&self, rate: Option<f64>, burst: u32, slots: Option<Slots>) {
        let mut cur = self.current.write();
        self.burst
            .store(burst.clamp(1, self.max_burst.get()), Relaxed);
        *self.slots.write() = slots.filter(|s| s.width() > 0.0 && s.width() < 1.0);
        self.swap(&mut cur, rate);
    }

    /// Changes the rate (swaps the limiter when it moved by more than 1%, or
    /// the burst changed).
    pub fn set_rate(&self, rate: Option<f64>) {
        let mut cur = self.current.write();
        self.swap(&mut cur, rate);
    }

    /// Slotted: the units this pacer can still release in its current part
    /// (or, when less than one is left, in its next) with the table's bucket
    /// full again by the part's end, so that a request sized to it is not
    /// held a whole period for a few units. None when not slotted.
    pub fn slot_room(&self) -> Option<f64> {
        let slots = self.slots.read().clone()?;
        let cur = self.current.read();
        let c = cur.as_ref()?;
        let now = self.clock.now();
        let from = c.slotted.as_ref()?.lock().full_at.max(now);
        let wall = self.wall_at_zero + Duration::from(from);
        Some(slots.room(wall, 1.0 / c.pace))
    }

    /// A request's size limit (None: a whole batch), slotted no more than
    /// [`Pacer::slot_room`] (see [`within_room`]).
    pub fn request_limit(&self, limit: Option<f64>) -> Option<f64> {
        within_room(limit, self.slot_room())
    }

    /// The time slots in force.
    pub fn slots(&self) -> Option<Slots> {
        self.slots.read().clone()
    }

    /// The limiter's burst at `pace` for the burst asked (`base`): held
    /// below the configured one, the server admits little at once, and only
    /// a timer tick is added (more would send two requests back to back);
    /// otherwise late wake-ups' slack (which covers a tick too).
    fn limiter_burst(&self, base: NonZeroU32, pace: f64) -> NonZeroU32 {
        if base < self.max_burst {
            at_least_a_tick(base, pace)
        } else {
            with_late_wakes(base, pace)
        }
    }

    fn swap(&self, cur: &mut Option<Current<C>>, rate: Option<f64>) {
        let rate = rate.filter(|r| r.is_finite() && *r > 0.0);
        let base = NonZeroU32::new(self.burst.load(Relaxed)).unwrap_or(self.max_burst);
        let (width, period_s) = self
            .slots
            .read()
            .as_ref()
            .map_or((1.0, 0.0), |s| (s.width(), s.period.as_secs_f64()));
        match (rate, cur.as_ref()) {
            (None, _) => *cur = None,
            // (The burst compared at the current pace: one that follows the
            // pace moves with every small change too.)
            (Some(r), Some(c))
                if (r - c.rate).abs() <= c.rate * 0.01
                    && c.burst == self.limiter_burst(base, c.pace)
                    && (c.pace * width - c.rate).abs() <= c.rate * 1e-9 => {}
            (Some(rate), _) => {
                let r = rate / width;
                let burst = self.limiter_burst(base, r);
                let period = Duration::from_secs_f64(1.0 / r).max(Duration::from_nanos(1));
                let quota = Quota::with_period(period)
                    .expect("period > 0")
                    .allow_burst(burst);
                let limiter = RateLimiter::direct_with_clock(quota, self.clock.clone());
                // The new limiter starts full, but releases nothing until the
                // old one's debt is paid: the units it had released beyond
                // being full, now at the new rate. So a rate change neither
                // hands out a free burst nor forgives (or adds) units, and a
                // cut applies to what was already released, and to the next
                // unit at the latest.
                let now = self.clock.now();
                let hold_until = cur.as_ref().map(|old| {
                    let full_again = match old.limiter.check_n(old.burst) {
                        Ok(Err(not_until)) => not_until.earliest_possible(),
                        _ => now,
                    };
                    let debt = full_again.max(old.hold_until.unwrap_or(now));
                    let debt = Duration::from(debt.duration_since(now)).mul_f64(old.pace / r);
                    // A cut means "slower from now on": not even one unit
                    // before a period of the new rate.
                    let floor = if rate < old.rate {
                        period
                    } else {
                        Duration::ZERO
                    };
                    now + Nanos::from(debt.max(floor))
                });
                // Slotted: the average gate, a chunk plus a period of the
                // rate deep, keeping the old one's fill level; the new
                // limiter is full once the old one's debt is paid.
                let slotted = (width < 1.0).then(|| {
                    let depth_s = f64::from(burst.get()) / rate + period_s;
                    let at = Duration::from(now);
                    let old = cur.as_ref().and_then(|c| c.slotted.as_ref());
                    let mut average = old.map_or_else(
                        || Bucket::new(rate, depth_s, 0.0, at),
                        |g| g.lock().average.clone(),
                    );
                    average.reshape(rate, depth_s, at);
                    Mutex::new(SlotGate {
                        average,
                        full_at: hold_until.unwrap_or(now),
                    })
                });
                *cur = Some(Current {
                    rate,
                    pace: r,
                    burst,
                    limiter: Arc::new(limiter),
                    hold_until,
                    slotted,
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    fn burst(n: u32) -> NonZeroU32 {
        NonZeroU32::new(n).unwrap()
    }

    #[tokio::test]
    async fn unpaced_never_waits() {
        let p = Pacer::new(None, burst(10));
        let t = Instant::now();
        p.acquire(1_000_000).await;
        assert!(t.elapsed() < Duration::from_millis(50));
    }

    /// The limiter the pacer uses now.
    fn limiter(p: &Pacer) -> Arc<Limiter<TokioClock>> {
        p.current.read().as_ref().unwrap().limiter.clone()
    }

    #[test]
    fn small_rate_changes_keep_the_limiter_and_large_ones_swap_it() {
        let p = Pacer::new(Some(100.0), burst(10));
        let first = limiter(&p);
        p.set_rate(Some(100.5));
        assert!(Arc::ptr_eq(&first, &limiter(&p)));
        assert_eq!(p.rate(), Some(100.0));
        p.set_rate(Some(150.0));
        assert_eq!(p.rate(), Some(150.0));
        assert!(!Arc::ptr_eq(&first, &limiter(&p)));
        p.set_rate(None);
        assert_eq!(p.rate(), None);
        // Also where the burst follows the pace (5 ms of it on top): a 0.5%
        // change moves that by a unit, and still keeps the limiter.
        let p = Pacer::new(Some(20_150.0), burst(25));
        let first = limiter(&p);
        p.set_rate(Some(20_250.0));
        assert!(Arc::ptr_eq(&first, &limiter(&p)));
    }

    #[test]
    fn the_burst_covers_a_timer_tick_of_the_pace() {
        assert_eq!(at_least_a_tick(burst(25), 200.0), burst(25));
        assert_eq!(at_least_a_tick(burst(25), 12_500.0), burst(25));
        assert_eq!(at_least_a_tick(burst(25), 1_000_000.0), burst(2_000));
        assert_eq!(at_least_a_tick(burst(1), 3_000.0), burst(6));
        // Late wake-ups' slack (the burst when not held down) covers a tick.
        for pace in [1.0, 100.0, 333.0, 334.0, 500.0, 12_500.0, 1e6] {
            for b in [1, 5, 25] {
                assert!(with_late_wakes(burst(b), pace) >= at_least_a_tick(burst(b), pace));
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_fast_pace_does_not_wait_a_timer_tick_per_chunk() {
        // 1M units/s: 100 requests of 100 units are 10 ms of the pace. With
        // chunks of 25, each after a request's first waited a whole tick
        // (tokio sleeps in milliseconds): 300 ms.
        let p = Pacer::new(Some(1_000_000.0), burst(25));
        let t = tokio::time::Instant::now();
        for _ in 0..100 {
            p.acquire(100).await;
        }
        let took = t.elapsed();
        assert!(took <= Duration::from_millis(20), "took {took:?}");
        // (The limiter starts full: 5 ms of the pace for late wake-ups.)
        assert!(took >= Duration::from_millis(4), "took {took:?}: not paced");
    }

    /// Units released in one second of virtual time at 8,000 units/s to a
    /// caller taking 25-unit requests that always wakes `late` after the
    /// moment it was told (tokio's timer, a busy machine).
    fn released_waking_late(late: Duration) -> u64 {
        use governor::clock::FakeRelativeClock;
        let clock = FakeRelativeClock::default();
        let p = Pacer::with_clock(Some(8_000.0), burst(25), clock.clone());
        let mut released = 0u64;
        let mut t = Duration::ZERO;
        while t < Duration::from_secs(1) {
            match p.check(25) {
                Ok(n) => released += u64::from(n),
                Err(wait) => {
                    clock.advance(wait + late);
                    t += wait + late;
                }
            }
        }
        released
    }

    /// Units a second a pacer at 196 units/s steered to `burst` releases
    /// in 2-unit requests, each wake-up `late`.
    fn small_requests_waking_late(burst_units: u32, late: Duration) -> f64 {
        use governor::clock::FakeRelativeClock;
        let clock = FakeRelativeClock::default();
        let p = Pacer::with_clock(Some(196.0), burst(25), clock.clone());
        p.steer(Some(196.0), burst_units, None);
        let (mut released, mut t) = (0u32, Duration::ZERO);
        while t < Duration::from_secs(10) {
            match p.check(2) {
                Ok(n) => released += n,
                Err(wait) => {
                    clock.advance(wait + late);
                    t += wait + late;
                }
            }
        }
        f64::from(released) / 10.0
    }

    #[test]
    fn a_burst_of_one_small_request_loses_pace_to_late_wake_ups() {
        // Requests of 2 units at 196 units/s (one every 10.2 ms), each
        // wake-up 2 ms late: a limiter one request deep forgets the 2 ms
        // each time (the 163 units/s `make bench-dynamodb` showed); one of
        // what the table admits at once (5) keeps the pace
        // (`control::pacing_burst`).
        let shallow = small_requests_waking_late(2, Duration::from_millis(2));
        assert!(shallow < 170.0, "{shallow}");
        let deep = small_requests_waking_late(5, Duration::from_millis(2));
        assert!(deep >= 195.0, "{deep}");
    }

    #[test]
    fn a_late_wake_up_does_not_lose_pace() {
        // Exact wake-ups: the rate (the first chunk free).
        let exact = released_waking_late(Duration::ZERO);
        assert!((8_000..=8_100).contains(&exact), "{exact}");
        // 1 ms late every time: a chunk of 3.1 ms took 4.1 ms (6,100 units/s)
        // when the limiter's burst was one chunk, since it forgets the time
        // slept past its moment. Now 40 units of slack absorb it.
        let late = released_waking_late(Duration::from_millis(1));
        assert!(late >= 7_800, "{late}");
        assert_eq!(
            with_late_wakes(burst(25), 196.0),
            burst(25),
            "nothing below 200 units/s"
        );
        assert_eq!(with_late_wakes(burst(25), 8_000.0), burst(65));
    }

    #[test]
    fn costs_above_the_burst_are_taken_in_chunks() {
        // 1000 units/s, burst 10: 200 units take ~0.19 s (the first 10 are
        // free), and never fail for exceeding the burst.
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        rt.block_on(async {
            let p = Pacer::new(Some(1000.0), burst(10));
            let t = Instant::now();
            p.acquire(200).await;
            let e = t.elapsed();
            assert!(e >= Duration::from_millis(150), "{e:?}");
        });
    }

    #[test]
    fn a_smaller_burst_releases_no_more_at_once_and_keeps_the_debt() {
        use governor::clock::FakeRelativeClock;
        let clock = FakeRelativeClock::default();
        let p = Pacer::with_clock(Some(100.0), burst(25), clock.clone());
        assert_eq!(p.check(25), Ok(25), "the first burst is free");
        // Down to 5 at once: nothing before the old debt (25 units at
        // 100/s) is paid, then chunks of 5.
        p.steer(Some(100.0), 5, None);
        let wait = p.check(5).unwrap_err();
        assert!((wait.as_secs_f64() - 0.25).abs() < 0.011, "{wait:?}");
        clock.advance(Duration::from_secs(1));
        assert_eq!(p.check(25), Ok(5));
        // Never above the configured burst.
        p.steer(Some(100.0), 1_000, None);
        clock.advance(Duration::from_secs(1));
        assert_eq!(p.check(100), Ok(25));
    }

    #[test]
    fn a_slot_admits_what_fits_before_its_end_and_otherwise_says_when_the_next_starts() {
        let ms = Duration::from_millis;
        let slots = Slots {
            period: Duration::from_secs(1),
            parts: vec![(0.0, 0.25), (0.5, 0.75)],
        };
        assert!((slots.width() - 0.5).abs() < 1e-12);
        assert_eq!(slots.wait(ms(100), ms(20)), Duration::ZERO);
        assert_eq!(
            slots.wait(ms(3_600), ms(20)),
            Duration::ZERO,
            "every period"
        );
        // A 20 ms need just fits from 225 before 250 - 5 (the guard); from
        // 226 it does not: to 500.
        assert_eq!(slots.wait(ms(225), ms(20)), Duration::ZERO, "just fits");
        let w = slots.wait(ms(226), ms(20));
        assert!((w.as_secs_f64() - 0.274).abs() < 1e-9, "{w:?}");
        // After the last part: the first of the next period.
        let w = slots.wait(ms(900), ms(1));
        assert!((w.as_secs_f64() - 0.1).abs() < 1e-9, "{w:?}");
        // A need longer than a part starts in its first half, late wakers
        // included.
        assert_eq!(slots.wait(ms(500), ms(400)), Duration::ZERO);
        assert_eq!(slots.wait(ms(503), ms(400)), Duration::ZERO);
        assert_eq!(slots.wait(ms(625), ms(400)), Duration::ZERO);
        let w = slots.wait(ms(626), ms(400));
        assert!((w.as_secs_f64() - 0.374).abs() < 1e-9, "{w:?}");
    }

    /// A slotted pacer whose chunks need longer than its part at its pace
    /// (18 units/s in half of each second: 25 units take 0.69 s of its
    /// 0.5 s part) still releases its rate to a waker that is always 1 ms
    /// late, as tokio's timer is. It released nothing when such a chunk had
    /// to start at the part's very instant.
    #[test]
    fn a_chunk_longer_than_its_part_reaches_a_late_waker() {
        use governor::clock::FakeRelativeClock;
        let clock = FakeRelativeClock::default();
        let p = Pacer::with_clock(Some(18.0), burst(25), clock.clone());
        p.steer(Some(18.0), 25, Some(Slots::new(vec![(0.25, 0.75)])));
        let mut released = 0;
        let start = clock.now();
        while Duration::from(clock.now().duration_since(start)) < Duration::from_secs(20) {
            match p.check(25) {
                Ok(n) => released += n,
                Err(wait) => clock.advance(wait + Duration::from_millis(1)),
            }
        }
        // At least 18 units/s for 20 s, and no more than that plus what
        // the average gate holds when slots begin (a chunk and a period:
        // 43), in 25-unit chunks. Without the gate: 500.
        assert!((360..=400).contains(&released), "{released}");
    }

    /// Units a pacer slotted in half of each second at `rate` releases in
    /// `secs` to a caller taking 25-unit chunks that wakes on time.
    fn slotted_released(rate: f64, secs: u64) -> u32 {
        use governor::clock::FakeRelativeClock;
        let clock = FakeRelativeClock::default();
        let p = Pacer::with_clock(Some(rate), burst(25), clock.clone());
        p.steer(Some(rate), 25, Some(Slots::new(vec![(0.25, 0.75)])));
        let (start, mut released) = (clock.now(), 0);
        while Duration::from(clock.now().duration_since(start)) < Duration::from_secs(secs) {
            match p.check(25) {
                Ok(n) => released += n,
                Err(wait) => clock.advance(wait),
            }
        }
        released
    }

    #[test]
    fn a_slotted_pacer_keeps_to_its_rate_where_a_chunk_is_more_than_a_period_of_it() {
        // The limiter fills between the parts: each part opened with a
        // whole chunk, 25 units/s (2,500 in 100 s) at a rate of 18.
        let low = slotted_released(18.0, 100);
        assert!((1_750..=1_825).contains(&low), "{low}");
        // Where the parts release less than the rate (at 120 units/s in half
        // of each second a chunk of 25 takes 0.1 s: four fit a part, 100 a
        // second), the gate takes nothing from them.
        let high = slotted_released(120.0, 100);
        assert!((9_900..=10_025).contains(&high), "{high}");
    }

    #[test]
    fn a_slotted_pacer_releases_its_rate_within_its_parts_only() {
        use governor::clock::FakeRelativeClock;
        let clock = FakeRelativeClock::default();
        let p = Pacer::with_clock(Some(50.0), burst(1), clock.clone());
        // A third of each second, from 1/3: 150 units/s within it, 50 on
        // average.
        p.steer(
            Some(50.0),
            1,
            Some(Slots::new(vec![(1.0 / 3.0, 2.0 / 3.0)])),
        );
        assert_eq!(p.rate(), Some(50.0), "the rate asked for is kept");
        let mut released = Vec::new();
        let step = Duration::from_millis(1);
        for _ in 0..3_000 {
            if p.check(1) == Ok(1) {
                released.push(Duration::from(clock.now()).as_secs_f64());
            }
            clock.advance(step);
        }
        let phase = |t: f64| t % 1.0;
        assert!(
            released
                .iter()
                .all(|t| phase(*t) >= 1.0 / 3.0 - 1e-9 && phase(*t) < 2.0 / 3.0 - 0.01 + 1e-9),
            "outside its part: {:?}",
            released
                .iter()
                .find(|t| phase(**t) < 1.0 / 3.0 || phase(**t) > 2.0 / 3.0)
        );
        // About 50 units a second: its part less the guard, at the 7 ms
        // steps of a 1 ms clock (45 a part).
        assert!((130..=151).contains(&released.len()), "{}", released.len());
        // Unslotted again: any time.
        p.steer(Some(50.0), 1, None);
        let into = Duration::from(clock.now()).as_nanos() % 1_000_000_000;
        clock.advance(Duration::from_nanos(
            (1_000_000_000 - into) as u64 + 50_000_000,
        ));
        assert_eq!(p.check(1), Ok(1), "at 0.05 s into a period");
    }

    /// A slotted writer that sizes each request to the pacer's room: its
    /// part is used to its end (less the guard) and the table's bucket, a
    /// part deep in requests, is full again when the part ends.
    fn slot_use(size_to_room: bool, most: f64) -> (f64, f64) {
        use governor::clock::FakeRelativeClock;
        let clock = FakeRelativeClock::default();
        // Half of each second at 200 units/s (100 on average), requests of
        // up to 10 units (the burst steered down to what the table admits
        // at once): the table's bucket holds 10 and refills at 200.
        let p = Pacer::with_clock(Some(100.0), burst(25), clock.clone());
        p.steer(Some(100.0), 10, Some(Slots::new(vec![(0.0, 0.5)])));
        let mut table = Bucket::new(200.0, 0.05, 0.0, Duration::ZERO);
        let (mut released, mut short_at_end) = (0.0, 0.0f64);
        let step = Duration::from_micros(100);
        let mut want = None;
        while clock.now() < Nanos::from(Duration::from_secs(20)) {
            let now = Duration::from(clock.now());
            if now.as_micros() % 1_000_000 == 500_000 {
                short_at_end = short_at_end.max(10.0 - table.available(now));
            }
            let size = *want.get_or_insert_with(|| {
                let limit = if size_to_room {
                    p.request_limit(Some(most))
                } else {
                    Some(most)
                };
                limit.unwrap().floor() as u32
            });
            if p.check(size) == Ok(size) {
                assert!(table.try_take(f64::from(size), now), "refused at {now:?}");
                released += f64::from(size);
                want = None;
            }
            clock.advance(step);
        }
        (released / 20.0, short_at_end)
    }

    #[test]
    fn a_part_is_used_to_its_end_with_the_table_full_again_when_it_ends() {
        // 10 units at 0, 50, ..., 400 ms; then 9 more at 450 ms: 99 units
        // a second, (0.5 s - the guard) x 200.
        let (rate, short) = slot_use(true, 10.0);
        assert!((98.0..=99.2).contains(&rate), "{rate}");
        assert!(
            short < 1e-6,
            "the table's bucket {short} short as the part ends"
        );
        // Without sizing to the room: 90, the rest of a request's time lost.
        let (rate, short) = slot_use(false, 10.0);
        assert!((89.0..=90.5).contains(&rate), "{rate}");
        assert!(short < 1e-6, "{short}");
        // Requests smaller than what the table admits at once: the last one
        // goes only if the table is full again by the part's end (a rule
        // that counted only the request's own time released 102.75 units
        // a second, more than the part holds).
        let (rate, short) = slot_use(false, 3.0);
        assert!((95.0..=99.2).contains(&rate), "{rate}");
        assert!(short < 1e-6, "{short}");
    }

    #[test]
    fn slots_follow_the_pacers_own_wall_clock() {
        use governor::clock::FakeRelativeClock;
        let clock = FakeRelativeClock::default();
        // Its clock 300 ms ahead: its part [0.5, 1) of each second on its
        // own clock is [0.2, 0.7) on the shared one.
        let p = Pacer::with_clock(Some(50.0), burst(1), clock.clone())
            .with_wall_offset(Duration::from_millis(300));
        p.steer(Some(50.0), 1, Some(Slots::new(vec![(0.5, 1.0)])));
        let mut first = None;
        for ms in 0..1_000 {
            if first.is_none() && p.check(1) == Ok(1) {
                first = Some(ms);
            }
            clock.advance(Duration::from_millis(1));
        }
        assert_eq!(first, Some(200));
    }

    #[test]
    fn in_virtual_time_it_says_how_long_to_wait() {
        use governor::clock::FakeRelativeClock;
        let clock = FakeRelativeClock::default();
        let p = Pacer::with_clock(Some(10.0), burst(5), clock.clone());
        assert_eq!(p.check(12), Ok(5), "the first burst is free");
        let wait = p.check(7).unwrap_err();
        assert!((wait.as_secs_f64() - 0.5).abs() < 1e-6, "{wait:?}");
        clock.advance(wait);
        assert_eq!(p.check(7), Ok(5));
        assert_eq!(Pacer::with_clock(None, burst(5), clock).check(9), Ok(9));
    }

    /// Units released in `secs` of virtual time by a caller taking 35-unit
    /// costs as fast as allowed, while the rate flips between `a` and `b`
    /// every `every`.
    fn released_with_flips(a: f64, b: f64, every: Duration, secs: u64) -> u64 {
        use governor::clock::FakeRelativeClock;
        let clock = FakeRelativeClock::default();
        let p = Pacer::with_clock(Some(a), burst(25), clock.clone());
        let (mut released, mut left, mut k) = (0u64, 35u32, 0u32);
        let (mut t, mut next_flip) = (Duration::ZERO, every);
        while t < Duration::from_secs(secs) {
            match p.check(left) {
                Ok(n) => {
                    released += u64::from(n);
                    left -= n;
                    if left == 0 {
                        left = 35;
                    }
                }
                Err(w) => {
                    let step = w
                        .min(next_flip.saturating_sub(t))
                        .max(Duration::from_micros(1));
                    clock.advance(step);
                    t += step;
                }
            }
            if t >= next_flip {
                k += 1;
                p.set_rate(Some(if k % 2 == 0 { a } else { b }));
                next_flip += every;
            }
        }
        released
    }

    #[test]
    fn rate_changes_neither_forgive_nor_starve() {
        // Steady: 70/s for 20 s, plus the first burst.
        let steady = released_with_flips(70.0, 70.0, Duration::from_millis(300), 20);
        assert!((1_390..=1_430).contains(&steady), "{steady}");
        // Flipping 70 <-> 72 every 300 ms (a swap each time): between the two
        // rates, not above (a swap used to forgive part of the debt: 1.6x in
        // real time) and not starved (a swap used to start from an empty
        // limiter whose first burst never came).
        for every in [100, 300, 1_000] {
            let n = released_with_flips(70.0, 72.0, Duration::from_millis(every), 20);
            assert!((1_330..=1_470).contains(&n), "flips every {every} ms: {n}");
        }
        // A big cut applies from the old limiter's debt on.
        let cut = released_with_flips(200.0, 50.0, Duration::from_secs(5), 20);
        assert!((2_450..=2_560).contains(&cut), "{cut}");
    }
}
