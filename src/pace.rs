//! Pacing in capacity units, with `governor`.
//!
//! Each write waits for its whole cost (the WCU of its items) before it is
//! sent, released smoothly: the limiter's burst is small (`burst` units), and
//! costs above it are taken in chunks, so a 200 WCU/s table sees many small
//! releases rather than one burst per second. A governor quota cannot change,
//! so a rate change swaps in a new limiter (only when the rate moved by more
//! than 1%). One pacer is shared by every writer of a table in this process.
//! Waiting here never blocks the Kafka consumer: the source pauses partitions
//! and keeps polling when the pipeline is full.
//!
//! The pacer is generic over governor's clock: the worker uses the real clock
//! and waits (`acquire`), the simulator (`crate::sim`) uses governor's fake
//! clock in virtual time and asks how long to wait (`check`), so both pace
//! with the very same limiter code.

use std::num::NonZeroU32;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use governor::clock::{Clock, DefaultClock};
use governor::middleware::NoOpMiddleware;
use governor::state::{InMemoryState, NotKeyed};
use governor::{Quota, RateLimiter};

type Limiter<C> = RateLimiter<NotKeyed, InMemoryState, C, NoOpMiddleware<<C as Clock>::Instant>>;

#[derive(Debug)]
struct Current<C: Clock> {
    rate: f64,
    limiter: Arc<Limiter<C>>,
}

/// A swappable rate limiter in capacity units per second; `None` = unpaced.
#[derive(Debug)]
pub struct Pacer<C: Clock = DefaultClock> {
    burst: NonZeroU32,
    clock: C,
    current: RwLock<Option<Current<C>>>,
}

impl Pacer<DefaultClock> {
    /// A pacer at `rate` units/s (None: no pacing) releasing at most `burst`
    /// units at once, on the real clock.
    pub fn new(rate: Option<f64>, burst: NonZeroU32) -> Self {
        Self::with_clock(rate, burst, DefaultClock::default())
    }

    /// Waits until `units` may be spent, taking them in chunks of at most
    /// `burst`; each chunk uses the limiter current at that moment.
    pub async fn acquire(&self, units: u32) {
        let mut left = units;
        while left > 0 {
            let limiter = match self.current.read().unwrap().as_ref() {
                Some(c) => c.limiter.clone(),
                None => return,
            };
            let chunk = left.min(self.burst.get());
            let n = NonZeroU32::new(chunk).expect("chunk > 0");
            limiter.until_n_ready(n).await.expect("chunk <= burst");
            left -= chunk;
        }
    }
}

impl<C: Clock + Clone> Pacer<C> {
    /// A pacer on the given clock.
    pub fn with_clock(rate: Option<f64>, burst: NonZeroU32, clock: C) -> Self {
        let p = Self {
            burst,
            clock,
            current: RwLock::new(None),
        };
        p.set_rate(rate);
        p
    }

    /// Takes the next chunk (at most `burst`) of `units` if it may be spent
    /// now and returns its size, or says how long to wait for it.
    pub fn check(&self, units: u32) -> Result<u32, Duration> {
        let guard = self.current.read().unwrap();
        let Some(c) = guard.as_ref() else {
            return Ok(units);
        };
        let chunk = units.min(self.burst.get());
        let Some(n) = NonZeroU32::new(chunk) else {
            return Ok(0);
        };
        match c.limiter.check_n(n).expect("chunk <= burst") {
            Ok(()) => Ok(chunk),
            Err(not_until) => Err(not_until
                .wait_time_from(self.clock.now())
                .max(Duration::from_nanos(1))),
        }
    }

    /// The pacing rate, if any.
    pub fn rate(&self) -> Option<f64> {
        self.current.read().unwrap().as_ref().map(|c| c.rate)
    }

    /// Changes the rate (swaps the limiter when it moved by more than 1%).
    pub fn set_rate(&self, rate: Option<f64>) {
        let rate = rate.filter(|r| r.is_finite() && *r > 0.0);
        let mut cur = self.current.write().unwrap();
        match (rate, cur.as_ref()) {
            (None, _) => *cur = None,
            (Some(r), Some(c)) if (r - c.rate).abs() <= c.rate * 0.01 => {}
            (Some(r), _) => {
                let period = Duration::from_secs_f64(1.0 / r).max(Duration::from_nanos(1));
                let quota = Quota::with_period(period)
                    .expect("period > 0")
                    .allow_burst(self.burst);
                let limiter = RateLimiter::direct_with_clock(quota, self.clock.clone());
                // A new limiter starts empty, as if it had just released a
                // burst: a rate change must not hand out a free burst.
                if cur.is_some() {
                    let _ = limiter.check_n(self.burst);
                }
                *cur = Some(Current {
                    rate: r,
                    limiter: Arc::new(limiter),
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
        let first = p.current.read().unwrap().as_ref().unwrap().limiter.clone();
        p.set_rate(Some(100.5));
        assert!(Arc::ptr_eq(
            &first,
            &p.current.read().unwrap().as_ref().unwrap().limiter
        ));
        assert_eq!(p.rate(), Some(100.0));
        p.set_rate(Some(150.0));
        assert_eq!(p.rate(), Some(150.0));
        assert!(!Arc::ptr_eq(
            &first,
            &p.current.read().unwrap().as_ref().unwrap().limiter
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
}
