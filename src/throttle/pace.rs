//! Pacing in capacity units, with `governor`.
//!
//! Each write waits for its whole cost (the WCU of its items) before it is
//! sent, released smoothly: the limiter's burst is small (`burst` units), and
//! costs above it are taken in chunks, so a 200 WCU/s table sees many small
//! releases rather than one burst per second. A governor quota cannot change,
//! so a rate change swaps in a new limiter (only when the rate moved by more
//! than 1%). The new limiter inherits the old one's debt: it releases nothing
//! before the old one would have been full again, so a rate change neither
//! hands out a free burst nor forgives units already released, and frequent
//! changes do not starve large costs. One pacer is shared by every writer of a table in this process.
//! Waiting here never blocks the Kafka consumer: the source pauses partitions
//! and keeps polling when the pipeline is full.
//!
//! The pacer is generic over governor's clock: the worker uses tokio's clock
//! ([`TokioClock`]: real time in production, virtual under a paused test
//! runtime) and waits (`acquire`), the simulator (`crate::sim`) uses governor's fake
//! clock in virtual time and asks how long to wait (`check`), so both pace
//! with the very same limiter code.

use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use governor::clock::{Clock, Reference};
use governor::middleware::NoOpMiddleware;
use governor::nanos::Nanos;
use governor::state::{InMemoryState, NotKeyed};
use governor::{Quota, RateLimiter};
use parking_lot::RwLock;

type Limiter<C> = RateLimiter<NotKeyed, InMemoryState, C, NoOpMiddleware<<C as Clock>::Instant>>;

#[derive(Debug)]
struct Current<C: Clock> {
    rate: f64,
    burst: NonZeroU32,
    limiter: Arc<Limiter<C>>,
    /// Nothing is released before this: the debt of the limiter this one
    /// replaced (when it would have been full again).
    hold_until: Option<C::Instant>,
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
    current: RwLock<Option<Current<C>>>,
}

impl Pacer<TokioClock> {
    /// A pacer at `rate` units/s (None: no pacing) releasing at most `burst`
    /// units at once, on tokio's clock.
    pub fn new(rate: Option<f64>, burst: NonZeroU32) -> Self {
        Self::with_clock(rate, burst, TokioClock::default())
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

impl<C: Clock + Clone> Pacer<C> {
    /// A pacer on the given clock.
    pub fn with_clock(rate: Option<f64>, burst: NonZeroU32, clock: C) -> Self {
        let p = Self {
            burst: AtomicU32::new(burst.get()),
            max_burst: burst,
            clock,
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
        match c.limiter.check_n(n).expect("chunk <= burst") {
            Ok(()) => Ok(chunk),
            Err(not_until) => Err(not_until.wait_time_from(now).max(Duration::from_nanos(1))),
        }
    }

    /// The pacing rate, if any.
    pub fn rate(&self) -> Option<f64> {
        self.current.read().as_ref().map(|c| c.rate)
    }

    /// Changes the rate and the most units released at once (capped at the
    /// configured burst, at least 1: requests the server admits only in small
    /// pieces are then not released back to back), swapping the limiter once.
    pub fn steer(&self, rate: Option<f64>, burst: u32) {
        let mut cur = self.current.write();
        self.burst
            .store(burst.clamp(1, self.max_burst.get()), Relaxed);
        self.swap(&mut cur, rate);
    }

    /// Changes the rate (swaps the limiter when it moved by more than 1%, or
    /// the burst changed).
    pub fn set_rate(&self, rate: Option<f64>) {
        let mut cur = self.current.write();
        self.swap(&mut cur, rate);
    }

    fn swap(&self, cur: &mut Option<Current<C>>, rate: Option<f64>) {
        let rate = rate.filter(|r| r.is_finite() && *r > 0.0);
        let burst = NonZeroU32::new(self.burst.load(Relaxed)).unwrap_or(self.max_burst);
        match (rate, cur.as_ref()) {
            (None, _) => *cur = None,
            (Some(r), Some(c)) if (r - c.rate).abs() <= c.rate * 0.01 && c.burst == burst => {}
            (Some(r), _) => {
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
                    let debt = Duration::from(debt.duration_since(now)).mul_f64(old.rate / r);
                    // A cut means "slower from now on": not even one unit
                    // before a period of the new rate.
                    let floor = if r < old.rate { period } else { Duration::ZERO };
                    now + Nanos::from(debt.max(floor))
                });
                *cur = Some(Current {
                    rate: r,
                    burst,
                    limiter: Arc::new(limiter),
                    hold_until,
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

    #[test]
    fn small_rate_changes_keep_the_limiter_and_large_ones_swap_it() {
        let p = Pacer::new(Some(100.0), burst(10));
        let first = p.current.read().as_ref().unwrap().limiter.clone();
        p.set_rate(Some(100.5));
        assert!(Arc::ptr_eq(
            &first,
            &p.current.read().as_ref().unwrap().limiter
        ));
        assert_eq!(p.rate(), Some(100.0));
        p.set_rate(Some(150.0));
        assert_eq!(p.rate(), Some(150.0));
        assert!(!Arc::ptr_eq(
            &first,
            &p.current.read().as_ref().unwrap().limiter
        ));
        p.set_rate(None);
        assert_eq!(p.rate(), None);
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
        p.steer(Some(100.0), 5);
        let wait = p.check(5).unwrap_err();
        assert!((wait.as_secs_f64() - 0.25).abs() < 0.011, "{wait:?}");
        clock.advance(Duration::from_secs(1));
        assert_eq!(p.check(25), Ok(5));
        // Never above the configured burst.
        p.steer(Some(100.0), 1_000);
        clock.advance(Duration::from_secs(1));
        assert_eq!(p.check(100), Ok(25));
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
