//! Hot key ranges: keys a partition refuses while the table has room, paced
//! apart from the table's other keys.
//!
//! DynamoDB caps each partition at 1,000 WCU/s whatever the table's capacity
//! (AWS developer guide, "Partitions and data distribution" and "Burst and
//! adaptive capacity"). A hot key range answers a BatchWriteItem with a 400
//! whose `ThrottlingReasons` say `TableWriteKeyRangeThroughputExceeded`, or
//! returns the hot items unprocessed with no reason at all. Cutting the
//! table's rate for it slows every key, and the cold partitions' capacity
//! goes unused (the SDK's adaptive mode and Flink's AIMD window do that).
//!
//! Per table, [`HotKeys`] keeps:
//! - **the hot keys**: partition-key values a key range refused within
//!   [`TTL`] (at most [`MAX_KEYS`]; the least recently refused go first);
//! - **one rate for all of them** (the hot range's), in capacity units per
//!   second, learned as `adaptive` learns the table's: found, it starts at
//!   [`DECREASE`] x the refused keys' part of the table's rate (at least
//!   [`FOUND_PART`] of it), a guess that doubles per second while the hot
//!   keys use it (up to the table's rate) until a refusal of a hot key
//!   meets it (that cut goes to no less than half of the guess, which was
//!   never admitted, nor than `DECREASE` x where the guess began: a guess
//!   its keys did not use to double is no overshoot; cut to half, such a
//!   range crawled at 5 units/s for 40 s). A guess that has not doubled
//!   survives its first refusal, cut as an ordinary event, and goes on
//!   growing (the keys' partition was full, not of them: ended, a range
//!   found at 4.8 units/s crawled there 15 s); so, mostly, does a
//!   re-guess (below), which takes 3.1 s to double; but a young range's
//!   immediate cut (below) ends it. A refusal of a hot key
//!   cuts it to [`DECREASE`] x the lower of the rate and what the hot keys
//!   wrote over the last [`WINDOW`], but to no less than `DECREASE` x
//!   `DECREASE` x the rate in one event (cold keys of the hot partition, not
//!   yet refused, may be what took it), at most once per [`COOLDOWN`] (by then
//!   a young range can be measured) and only for requests sent after the
//!   last cut (the others left at the rate already cut); except that within
//!   [`WINDOW`] of its finding (nothing measures it yet) a range refused
//!   alone (no key that was not hot refused with it) for a request sent
//!   after a cut, which was blind, is cut again at once, by `DECREASE`
//!   (at the start a worker's range, found at 178 units/s on a partition of
//!   50, took 56 refused requests in a second to come down at one cut per
//!   cooldown; where cold keys are refused too, the partitions ran out
//!   beyond the range: a build that cut it again then as well left ranges
//!   at 4-9 units/s for 15-20 s); the refused units go
//!   again only once the new rate has paid for them (the partition, drained,
//!   refills meanwhile), or after [`MAX_REPAY`] if that is sooner. It
//!   climbs back to that level along a CUBIC curve
//!   over [`PROBE`], then slowly past it, while the hot keys use it; past
//!   it for half that climb more ([`REGUESS`]) with no refusal, that cut was
//!   below the partition's maximum, and it grows again as a guess does,
//!   but by x 1.25 a second ([`REGUESS_GROWTH`]), not doubling; it
//!   doubles when this worker's share of its group's work grows past
//!   [`SHARE_REPROBE`] x its share at the last cut (peers that wrote to the
//!   hot partition too have finished). A cut
//!   at about the level of the one before doubles the time the climb takes
//!   (once, [`MAX_DOUBLINGS`]): a
//!   partition's maximum does not move, and probing past it again and again
//!   only meets it; but a partition whose bucket holds a tenth of a second
//!   refuses the range's keys at any rate when its cold keys come in a
//!   clump, at about the same level each time, and up to four doublings
//!   (160 s) pinned such a range at a third of its partition (`ingest sim`,
//!   `hot-range.toml` with 0.1 s buckets, one client: 34.6% of the busiest
//!   partition in the least seed of 8, 43.5% with one doubling). It is
//!   never cut below [`MIN_RATE`];
//! - **a leaky bucket** (virtual scheduling) that lets hot keys' units go at
//!   that rate, item by item as each comes due (spread, not in bursts: the
//!   items of peers sharing a partition with little burst then rarely meet;
//!   sent a request's worth at once, three workers' shared 60 units/s
//!   partition of 0.05 s took 12.5 units/s from them, item by item 56.5).
//!   Cold keys never wait for it.
//!
//! Which refusals are a key range's ([`key_range_refused`]): every item of a
//! 400 whose reasons all name a key range; in a partial answer (no reason
//! given), one followed in the same request by an accepted item at least as
//! costly (the table's bucket had room after it), or an item whose key is
//! hot, unless a cold item was refused with nothing as costly accepted after
//! it (the table ran out there: its signal, not the range's; counting it as
//! the range's cut the range, with several workers and a shallow bucket, to a
//! few units/s). The writer sends hot keys' items first in a request, so the
//! cold ones after them tell which of the two refused. A refusal of keys none of which was hot (no hot key refused with
//! them) stays a signal for the table's rate as well: a range of ever-new
//! keys cannot be paced apart, only by slowing the job. So keys that come
//! back are paced apart after their first refusal, and a range of distinct
//! keys still slows the job to what it admits, as before; only while the
//! range holds hot units back ([`HotKeys::holds`]), so that what the job
//! wrote is the range's pace and not the table's, is that a plain cut of
//! the table's rate (see `Feedback::key_range`).
//!
//! **A parted table.** Any refusal by a key range says the table is split
//! into partitions that admit less at once than it does: [`HotKeys::parted`]
//! says so for [`PARTED_HOLD`] after the last one, and the table's strategy
//! then keeps requests small (`Feedback::parted`), so that few items of one
//! request land in one partition at once. The answer to a client's first
//! request ([`Answer::probe`], a whole batch sent to learn what the table
//! admits at once) parts the table but makes no key hot: a batch spreads
//! over every partition and is refused where its items clump.
//!
//! Simplified: one rate for every hot key of a table, whichever partitions
//! they are in (a client cannot know DynamoDB's hash ranges); with several
//! hot partitions it learns what the busiest admits.
//!
//! Pure: time is passed in.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use super::window::AcceptedWindow;

/// A key a key range has not refused for this long is cold again.
pub const TTL: Duration = Duration::from_secs(60);
/// Hot keys remembered per table, at most.
pub const MAX_KEYS: usize = 10_000;
/// The cut on a refusal of a hot key.
pub const DECREASE: f64 = 0.8;
/// Cuts are at least this far apart.
pub const COOLDOWN: Duration = Duration::from_millis(500);
/// What the hot keys wrote is measured over this window.
pub const WINDOW: Duration = Duration::from_secs(2);
/// Back to the level of the last cut after this long.
pub const PROBE: Duration = Duration::from_secs(10);
/// Cuts at about the level of the one before lengthen the climb back this
/// many times at most (x 2 each: 20 s; see the module doc).
pub const MAX_DOUBLINGS: u32 = 1;
/// A climb this many of its lengths after the last cut (half a length past
/// the level of that cut, the curve at 1.025 x it) with no refusal of a hot
/// key since grows again as a guess does, by [`REGUESS_GROWTH`]: that cut
/// was below the partition's maximum.
pub const REGUESS: f64 = 1.5;
/// A re-guess grows by this factor a second while used (x 1.25; a range's
/// first guess, and one a larger share starts, doubles): it starts near the
/// level of the last cut, which peers sharing the partition reach too, and
/// doubling went past it by up to 2x in the answers' round trip, refused in
/// bursts. Taking 3.1 s to reach 2x where it began, a re-guess's first
/// refusal is mostly spared (see the module doc), and its end cuts to no
/// less than half of it. (`ingest sim`, `hot-range.toml` seeds 1-8: 3
/// clients 1.08% -> 0.99% throttled, 6 clients 1.51% -> 1.37%, the busiest
/// partition's mean use within 0.4 point; figures in the README.)
pub const REGUESS_GROWTH: f64 = 1.25;
/// A range found starts from no less than this part of the table's rate
/// (x DECREASE).
pub const FOUND_PART: f64 = 0.05;
/// A worker's share of its group's work this much above its share at the
/// range's last cut: peers that wrote to the hot partition too have
/// finished or slowed, and the range doubles again (see
/// [`HotKeys::share`]).
pub const SHARE_REPROBE: f64 = 1.25;
/// The refused units' repayment holds the hot keys back this long at most
/// (a range cut to 1.6 units/s at the start owed 16 refused units, and its
/// worker, records in order, wrote nothing for 10 s).
pub const MAX_REPAY: Duration = Duration::from_secs(1);
/// The hot range's rate is never cut below this (units/s).
pub const MIN_RATE: f64 = 1.0;
/// A key range's refusal says, for this long, that the table is split into
/// partitions that admit less at once than it does ([`HotKeys::parted`]).
/// DynamoDB splits a table by its size and throughput and does not merge the
/// partitions back soon; ten minutes covers a batch job's run and lets a
/// refusal that was a one-off lapse.
pub const PARTED_HOLD: Duration = Duration::from_secs(600);
/// A hot unit may go this much ahead of its schedule.
const TOLERANCE: Duration = Duration::from_millis(20);

/// A guess of the hot range's rate (see `HotKeys::answer`).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Guess {
    /// The rate it began at.
    from: f64,
    /// It survived a refusal already (once at most).
    spared: bool,
    /// A re-guess (grows by [`REGUESS_GROWTH`] a second, not 2).
    again: bool,
}

impl Guess {
    fn new(from: f64) -> Self {
        Self {
            from,
            spared: false,
            again: false,
        }
    }
}

/// One item of an answered request, for [`key_range_refused`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sent {
    pub units: f64,
    pub accepted: bool,
    /// Its key was hot when the request left.
    pub hot: bool,
}

/// Which items of a partial answer a key range refused (see the module doc):
/// refused and followed by an accepted item at least as costly, or refused,
/// hot, and not in a tail the table ran out in (one with a refused cold item
/// nothing as costly was accepted after: the table refused that one, and
/// the hot ones beside it may be its too).
pub fn key_range_refused(items: &[Sent]) -> Vec<bool> {
    let mut out = vec![false; items.len()];
    let mut largest_after = 0.0f64;
    let (mut hot_unsure, mut table_ran_out) = (Vec::new(), false);
    for (i, it) in items.iter().enumerate().rev() {
        if it.accepted {
            largest_after = largest_after.max(it.units);
        } else if largest_after >= it.units {
            out[i] = true;
        } else if it.hot {
            hot_unsure.push(i);
        } else {
            table_ran_out = true;
        }
    }
    if !table_ran_out {
        for i in hot_unsure {
            out[i] = true;
        }
    }
    out
}

/// A key a key range refused.
#[derive(Debug, Clone, Copy)]
pub struct Refused<'a> {
    pub key: &'a str,
    pub units: f64,
    /// Hot when the request left (else: a signal for the table too).
    pub was_hot: bool,
}

/// What one answered request says about the hot range.
#[derive(Debug, Clone, Default)]
pub struct Answer<'a> {
    pub now: Duration,
    /// When the request left (same clock).
    pub sent: Duration,
    /// Units of the request.
    pub request_units: f64,
    /// Units of hot keys' items written.
    pub hot_written: f64,
    pub refused: Vec<Refused<'a>>,
    /// Items of keys not hot when the request left were refused too (by
    /// whichever reading): the partitions, or the table, ran out beyond the
    /// range.
    pub cold_refused: bool,
    /// The table's rate (units/s, written or paced), to start the range's
    /// rate from; 0 when unknown.
    pub table_rate: f64,
    /// The answer to the client's first request, a whole batch sent to
    /// learn what the table admits at once: the keys its key ranges refused
    /// are not made hot. Such a batch spreads over every partition, and a
    /// partition that admits little at once refuses it where its items
    /// clump, not where keys are hot; made hot, the top keys of cold
    /// partitions were paced with the hot key for the whole run. The
    /// refusal still says the table is parted ([`HotKeys::parted`]).
    pub probe: bool,
}

/// What an answer changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// A hot range where none was known.
    Found,
    /// The range's rate was cut.
    Cut,
}

#[derive(Debug, Clone)]
pub struct HotKeys {
    /// Hot keys, with when a key range last refused each.
    keys: HashMap<String, Duration>,
    /// The refusals in order, (key, when): the front is the least recently
    /// refused key, once entries of keys refused again since are skipped.
    order: VecDeque<(String, Duration)>,
    rate: Option<f64>,
    /// The level of the last cut (0: none since the range was found).
    w_max: f64,
    last_cut: Duration,
    /// When the range was found.
    found_at: Duration,
    /// Cuts in a row at about the same level (see [`MAX_DOUBLINGS`]).
    same_level: u32,
    /// While the rate is a guess (the one a range was found with, or a
    /// re-guess), not yet ended by a refusal of a hot key. It grows while
    /// used: doubling per second, a re-guess by [`REGUESS_GROWTH`] (see
    /// `answer`).
    guess: Option<Guess>,
    /// This worker's share of its group's work, as last told, and as it
    /// was at the last cut (see [`HotKeys::share`]).
    share: Option<f64>,
    share_at_cut: Option<f64>,
    /// The last answer heard (for the doubling's time step).
    last_answer: Option<Duration>,
    /// When `admit` last held a hot unit back.
    held: Option<Duration>,
    /// Units of hot keys written.
    written: AcceptedWindow,
    /// Leaky bucket: when the next hot unit is due.
    due: Duration,
    /// When a key range last refused anything (a probe too).
    refused_at: Option<Duration>,
}

impl Default for HotKeys {
    fn default() -> Self {
        Self {
            keys: HashMap::new(),
            order: VecDeque::new(),
            rate: None,
            w_max: 0.0,
            last_cut: Duration::ZERO,
            found_at: Duration::ZERO,
            same_level: 0,
            guess: None,
            share: None,
            share_at_cut: None,
            last_answer: None,
            held: None,
            written: AcceptedWindow::new(WINDOW),
            due: Duration::ZERO,
            refused_at: None,
        }
    }
}

impl HotKeys {
    pub fn is_hot(&self, key: &str) -> bool {
        self.keys.contains_key(key)
    }

    /// Which of these keys are hot (none is hashed while none is hot, the
    /// common case).
    pub fn which_hot<'a>(&self, keys: impl Iterator<Item = &'a str>) -> Vec<bool> {
        keys.map(|k| !self.is_empty() && self.is_hot(k)).collect()
    }

    /// Hot keys now.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The hot range's rate, units/s (None: no hot range known).
    pub fn rate(&self) -> Option<f64> {
        self.rate
    }

    /// Lets `units` of a hot key go at `now` (Ok), or says how long until
    /// they may (Err).
    pub fn admit(&mut self, now: Duration, units: f64) -> Result<(), Duration> {
        let Some(rate) = self.rate else {
            return Ok(());
        };
        let due = self.due.max(now);
        if due > now + TOLERANCE {
            self.held = Some(now);
            return Err(due - now - TOLERANCE);
        }
        self.due = due + Duration::from_secs_f64(units / rate);
        Ok(())
    }

    /// Whether a key range refused anything within [`PARTED_HOLD`] of
    /// `now`: the table is split into partitions that admit less at once
    /// than it does, so that a request spread over them meets one that is
    /// low wherever a few of its items clump (see `Feedback::parted`).
    pub fn parted(&self, now: Duration) -> bool {
        self.refused_at
            .is_some_and(|t| now.saturating_sub(t) < PARTED_HOLD)
    }

    /// Whether it held a hot unit back within [`WINDOW`] of `now`: records
    /// then wait on the range's pace, and what the table accepted says
    /// little of the table.
    pub fn holds(&self, now: Duration) -> bool {
        self.held.is_some_and(|t| now.saturating_sub(t) < WINDOW)
    }

    /// This worker's share of its group's work. One more than
    /// [`SHARE_REPROBE`] x its share at the range's last cut says peers
    /// that wrote to the hot partition too have finished or slowed: the
    /// cut's level is stale, and the range doubles again as a guess does
    /// (a re-guess too: it grows slower) until a refusal of its keys.
    /// Returns whether it did. (Three
    /// workers, bench-dynamodb hot range on a 150 WCU/s table: after its
    /// peers finished, the whale's range crawled at 24-30 units/s for its
    /// last 15 s on a partition of 50.)
    pub fn share(&mut self, share: Option<f64>) -> bool {
        self.share = share.filter(|s| s.is_finite() && *s > 0.0);
        let (Some(now), Some(at_cut)) = (self.share, self.share_at_cut) else {
            return false;
        };
        let guessing = self.guess.is_some_and(|g| !g.again);
        if self.rate.is_none() || guessing || now <= SHARE_REPROBE * at_cut {
            return false;
        }
        self.guess = self.rate.map(Guess::new);
        self.same_level = 0;
        self.share_at_cut = Some(now);
        true
    }

    /// Learns from an answered request (see the module doc); says whether
    /// it found a hot range where none was known, or cut its rate.
    pub fn answer(&mut self, a: &Answer<'_>) -> Option<Change> {
        let now = a.now;
        let dt = self
            .last_answer
            .replace(now)
            .map_or(0.0, |t| now.saturating_sub(t).as_secs_f64().min(1.0));
        if !a.refused.is_empty() {
            self.refused_at = Some(now);
        }
        if a.probe {
            return None;
        }
        for r in &a.refused {
            self.keys.insert(r.key.to_string(), now);
            self.order.push_back((r.key.to_string(), now));
        }
        self.forget(now);
        self.written.add(now, a.hot_written);
        let refused: f64 = a.refused.iter().map(|r| r.units).sum();
        let hot_refused = a.refused.iter().any(|r| r.was_hot);
        match self.rate {
            None if !a.refused.is_empty() => {
                // The refused keys went out at about their part of the
                // table's rate (or, with none known, these units in a
                // second), and that was too much. The part one request
                // shows is a rough guess (one item of 25), so no less than
                // FOUND_PART: a range started too high is cut within a
                // second or two, one started too low crawls (a range found
                // at 3 units/s, the worker with the hottest key, took 45 s
                // to reach 30, bench-dynamodb hot range, 3 workers).
                let part = (refused / a.request_units.max(refused)).clamp(FOUND_PART, 1.0);
                let base = if a.table_rate > 0.0 {
                    a.table_rate * part
                } else {
                    refused
                };
                let base = base.max(MIN_RATE);
                self.due = now;
                self.cut(now, base, refused);
                self.guess = self.rate.map(Guess::new);
                self.found_at = now;
                return Some(Change::Found);
            }
            Some(rate) if hot_refused && a.sent >= self.last_cut => {
                if now.saturating_sub(self.last_cut) < COOLDOWN {
                    // A young range refused again, alone: that cut, blind,
                    // was not deep enough; the next goes at once, blind too
                    // (nothing measures the range yet). Otherwise the same
                    // event.
                    let young = now.saturating_sub(self.found_at) < WINDOW;
                    if !young || a.cold_refused {
                        return None;
                    }
                    self.cut(now, rate, refused);
                    self.guess = None;
                    return Some(Change::Cut);
                }
                // A young range is measured over what it has (at least a
                // quarter of the window, the cooldown). One event cuts to no
                // less than DECREASE x DECREASE x the rate: the hot keys may
                // write less than their rate while cold keys of their
                // partition, not yet refused, take it; cut to what they
                // wrote, the range's rate fell from 46 to 5 units/s in one
                // event and took 35 s to climb back (bench-dynamodb hot
                // range, one worker).
                // The end of a guess cuts deeper, to no less than half
                // of it, once it has doubled (a guess its keys never used
                // is no overshoot): a rate doubling per second was never
                // admitted (floored at 0.8 x it, the first cut after a
                // guess left the range above its partition's maximum for
                // another event: 95 units/s, cut to 85, then 47, 13
                // requests refused on the way).
                // A guess that has not doubled survives its first refusal,
                // cut as an ordinary event: a refusal at a rate the keys
                // barely used says their partition was full, not of what
                // (cold keys of it, or peers). Ended there, a range found
                // at 4.8 units/s on a partition of 50 climbed back along
                // the curve and crawled at 4.4-4.9 for 15 s, its worker
                // with it (bench-dynamodb hot range, a 150 WCU/s table,
                // three workers: 1.28x the bound).
                let spare = self.guess.filter(|g| !g.spared && rate < 2.0 * g.from);
                let floor = match self.guess {
                    Some(g) if spare.is_none() => (g.from / rate).clamp(0.5, DECREASE),
                    _ => DECREASE,
                };
                let measured = self.written.rate_so_far(now);
                let base = if measured > 0.0 {
                    rate.min(measured).max(floor * rate)
                } else {
                    rate
                };
                self.cut(now, base, refused);
                self.guess = spare.map(|g| Guess { spared: true, ..g });
                return Some(Change::Cut);
            }
            Some(rate) if !hot_refused && self.written.rate_so_far(now) >= 0.5 * rate => {
                let t = now.saturating_sub(self.last_cut).as_secs_f64();
                let k = PROBE.as_secs_f64() * f64::from(1u32 << self.same_level);
                if t >= REGUESS * k && self.guess.is_none() {
                    // Cut below the partition's maximum (a start's burst
                    // refused, or a maximum raised): the convex curve from
                    // a low level crawls (a range cut to 8 units/s took 35 s
                    // to reach 40 of a partition of 50, bench-dynamodb hot
                    // range, a 150 WCU/s table, three workers).
                    self.guess = Some(Guess {
                        again: true,
                        ..Guess::new(rate)
                    });
                }
                self.rate = Some(if self.guess.is_some() {
                    // Found from a guess (one refused item of 25 says
                    // little of the keys' part): up as a slow start does,
                    // to the table's rate at most, until a refusal of its
                    // keys says where the partition's maximum is. Climbing
                    // along the curve from a guess of 6 units/s, a
                    // partition of 50 had 7-13 for 30 s, and the job, its
                    // records consumed in order, crawled with it
                    // (bench-dynamodb hot range, a 150 WCU/s table, one
                    // worker: 1.92x the bound).
                    let top = if a.table_rate > 0.0 {
                        a.table_rate.max(rate)
                    } else {
                        f64::INFINITY
                    };
                    let growth = match self.guess {
                        Some(g) if g.again => REGUESS_GROWTH,
                        _ => 2.0,
                    };
                    (rate * growth.powf(dt)).min(top)
                } else {
                    let c3 = self.w_max * (1.0 - DECREASE) / k.powi(3);
                    let curve = c3 * (t - k).powi(3) + self.w_max;
                    curve.max(rate)
                });
            }
            _ => {}
        }
        None
    }

    /// Cuts the rate to `DECREASE` x `base`; the `refused` units go again
    /// once the new rate has paid for them, or after [`MAX_REPAY`].
    fn cut(&mut self, now: Duration, base: f64, refused: f64) {
        let similar = self.w_max > 0.0 && (base / self.w_max - 1.0).abs() <= 0.15;
        self.same_level = if similar {
            (self.same_level + 1).min(MAX_DOUBLINGS)
        } else {
            0
        };
        self.w_max = base;
        self.share_at_cut = self.share;
        let rate = (base * DECREASE).max(MIN_RATE);
        self.rate = Some(rate);
        let wait = Duration::from_secs_f64(refused / rate).min(MAX_REPAY);
        self.due = self.due.max(now + wait);
        self.last_cut = now;
    }

    /// Forgets keys not refused within `TTL`, and the least recently
    /// refused beyond `MAX_KEYS`; with none left, the range and its rate too.
    fn forget(&mut self, now: Duration) {
        while let Some((key, t)) = self.order.front() {
            let current = self.keys.get(key) == Some(t);
            let expired = now.saturating_sub(*t) >= TTL;
            if current && !expired && self.keys.len() <= MAX_KEYS {
                break;
            }
            if current {
                self.keys.remove(key);
            }
            self.order.pop_front();
        }
        if self.keys.is_empty() {
            self.rate = None;
            self.w_max = 0.0;
            self.same_level = 0;
            self.guess = None;
            self.share_at_cut = None;
            self.held = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(secs: f64) -> Duration {
        Duration::from_secs_f64(secs)
    }

    fn sent(units: f64, accepted: bool, hot: bool) -> Sent {
        Sent {
            units,
            accepted,
            hot,
        }
    }

    #[test]
    fn a_refusal_the_table_could_not_have_made_is_a_key_ranges() {
        let items = [
            sent(2.0, false, false), // an accepted 2 follows: key range
            sent(1.0, true, false),
            sent(5.0, false, false), // only smaller ones follow: the table's
            sent(2.0, true, false),
            sent(1.0, false, true),  // hot, but the table ran out: its
            sent(1.0, false, false), // last, cold: the table's
        ];
        assert_eq!(
            key_range_refused(&items),
            vec![true, false, false, false, false, false]
        );
        // Only hot keys refused with nothing after them: the range's.
        let items = [
            sent(1.0, false, true),
            sent(1.0, true, false),
            sent(2.0, false, true),
            sent(2.0, false, true),
        ];
        assert_eq!(key_range_refused(&items), vec![true, false, true, true]);
    }

    fn refusal(now: f64, key: &str, was_hot: bool) -> Answer<'_> {
        Answer {
            now: s(now),
            sent: s((now - 0.01).max(0.0)),
            request_units: 25.0,
            hot_written: 0.0,
            refused: vec![Refused {
                key,
                units: 5.0,
                was_hot,
            }],
            cold_refused: !was_hot,
            table_rate: 200.0,
            probe: false,
        }
    }

    /// A refusal of `units` of 25 at a table rate of `table_rate`.
    fn refusal_of(now: f64, units: f64, table_rate: f64) -> Answer<'static> {
        let mut a = refusal(now, "k", false);
        a.refused[0].units = units;
        a.table_rate = table_rate;
        a
    }

    fn written(now: f64, units: f64) -> Answer<'static> {
        Answer {
            hot_written: units,
            refused: vec![],
            ..refusal(now, "", false)
        }
    }

    #[test]
    fn a_probe_refused_by_key_ranges_parts_the_table_and_makes_no_key_hot() {
        let mut h = HotKeys::default();
        assert!(!h.parted(s(0.0)));
        let probe = Answer {
            probe: true,
            ..refusal(1.0, "k", false)
        };
        assert_eq!(h.answer(&probe), None);
        assert!(!h.is_hot("k"), "a batch's clump is no hot key");
        assert_eq!(h.rate(), None);
        assert!(h.parted(s(1.0)) && h.parted(s(1.0) + PARTED_HOLD - s(0.001)));
        assert!(!h.parted(s(1.0) + PARTED_HOLD), "a one-off lapses");
        // A later refusal parts it again, and finds a range as ever.
        let later = 1.0 + PARTED_HOLD.as_secs_f64();
        assert_eq!(h.answer(&refusal(later, "k", false)), Some(Change::Found));
        assert!(h.is_hot("k") && h.parted(s(later)));
        // An answer nothing refused neither parts nor un-parts it.
        h.answer(&written(later + 1.0, 1.0));
        assert!(h.parted(s(later + 1.0)));
    }

    #[test]
    fn a_refused_key_becomes_hot_and_the_range_starts_below_its_part_of_the_table() {
        let mut h = HotKeys::default();
        assert_eq!(h.rate(), None);
        assert!(h.admit(s(0.0), 100.0).is_ok(), "no range: nothing waits");
        assert_eq!(h.answer(&refusal(1.0, "k", false)), Some(Change::Found));
        assert!(h.is_hot("k") && !h.is_hot("other"));
        // 5 of 25 units at 200 units/s: 40, cut to 32.
        assert_eq!(h.rate(), Some(32.0));
        assert_eq!(
            h.answer(&refusal(1.5, "j", false)),
            None,
            "already known, and a new key is not the range's signal"
        );
        assert_eq!(h.len(), 2);
    }

    #[test]
    fn a_range_found_by_one_item_of_many_starts_from_a_twentieth_of_the_table() {
        let mut h = HotKeys::default();
        h.answer(&refusal_of(1.0, 1.0, 100.0));
        // 1 of 25 units is 4% of the table's rate; taken as 5%, x 0.8.
        assert!((h.rate().unwrap() - 4.0).abs() < 1e-9, "{:?}", h.rate());
    }

    #[test]
    fn hot_units_go_at_the_range_rate_and_cold_ones_never_wait() {
        let mut h = HotKeys::default();
        h.answer(&refusal(0.0, "k", false));
        let rate = h.rate().unwrap();
        // Over 10 s of asking every millisecond, about rate x 10 units go,
        // less the 5 refused ones the new rate pays for first.
        let mut admitted = 0.0;
        for ms in 0..10_000 {
            if h.admit(Duration::from_millis(ms), 1.0).is_ok() {
                admitted += 1.0;
            }
        }
        assert!(
            (admitted - (rate * 10.0 - 5.0)).abs() <= 2.0,
            "{admitted} units at {rate}/s"
        );
        let wait = h.admit(s(10.0), 1.0).unwrap_err();
        assert!(wait <= s(1.0 / rate), "{wait:?}");
        // It held units back: for WINDOW after the last one, it holds.
        assert!(h.holds(s(10.0)) && h.holds(s(11.9)));
        assert!(!h.holds(s(12.0)));
        assert!(!HotKeys::default().holds(s(0.0)), "nothing held yet");
    }

    #[test]
    fn refusals_of_hot_keys_cut_toward_what_they_wrote_by_at_most_0_64_per_event_and_never_to_zero()
    {
        let mut h = HotKeys::default();
        h.answer(&refusal(0.0, "k", false));
        assert_eq!(h.rate(), Some(32.0));
        // A refusal of the hot key ends the guess (nothing written yet:
        // cut from the rate).
        h.answer(&refusal(0.6, "k", true));
        assert_eq!(h.rate(), Some(0.8 * 32.0));
        // The hot keys write 10 units/s for 3 s, then are refused.
        for i in 1..=30 {
            h.answer(&written(0.6 + f64::from(i) * 0.1, 1.0));
        }
        h.answer(&refusal(3.65, "k", true));
        let r = h.rate().unwrap();
        assert!(
            (r - 0.64 * 25.6).abs() < 0.1,
            "0.8 x the 10/s written, but no deeper than 0.8 x 0.8 x the rate in one event: {r}"
        );
        let mut in_flight = refusal(4.2, "k", true);
        in_flight.sent = s(3.6);
        h.answer(&in_flight);
        assert_eq!(h.rate(), Some(r), "sent before the cut: the same event");
        // Refused again (a request sent after the cut), still writing
        // less: down by another 0.64 at most.
        let mut again = refusal(4.3, "k", true);
        again.sent = s(4.2);
        h.answer(&again);
        let r2 = h.rate().unwrap();
        assert!((r2 - 0.64 * r).abs() < 0.1, "{r2} from {r}");
        // Refused again within the cooldown, for a request sent after the
        // cut: the same event once the range is older than the window.
        let mut late = refusal(4.5, "k", true);
        late.sent = s(4.35);
        h.answer(&late);
        assert_eq!(h.rate(), Some(r2), "within the cooldown");
        // A young range (found within the window) refused again within the
        // cooldown: the same event for a request sent before the cut; for
        // one sent after it, that blind cut was not deep enough, and the
        // next comes at once.
        let mut young = HotKeys::default();
        young.answer(&refusal(0.1, "k", false));
        let mut before = refusal(0.3, "k", true);
        before.sent = s(0.05);
        young.answer(&before);
        assert_eq!(young.rate(), Some(32.0), "sent before the cut");
        let mut after = refusal(0.4, "k", true);
        after.sent = s(0.35);
        young.answer(&after);
        assert_eq!(young.rate(), Some(0.8 * 32.0), "sent after the cut");
        // Unless keys not hot were refused with it: the partitions, or the
        // table, ran out beyond the range (the start's storm), which says
        // nothing of the range's rate.
        let mut storm = refusal(0.45, "k", true);
        storm.sent = s(0.42);
        storm.cold_refused = true;
        young.answer(&storm);
        assert_eq!(young.rate(), Some(0.8 * 32.0), "cold keys refused too");
        // Refused again and again with nothing written: the floor holds.
        for i in 0..100 {
            h.answer(&refusal(6.0 + f64::from(i) * 1.1, "k", true));
        }
        assert_eq!(h.rate(), Some(MIN_RATE));
    }

    /// Answers every 50 ms until `until`, the hot keys writing all their
    /// rate; returns the time reached.
    fn use_it(h: &mut HotKeys, mut t: f64, until: f64) -> f64 {
        while t < until {
            t += 0.05;
            let r = h.rate().unwrap();
            h.answer(&written(t, r * 0.05));
        }
        t
    }

    /// Answers every 50 ms from `t`, the hot keys writing 0.6 x the rate,
    /// until the rate reaches `rate` (within 60 s); returns the time reached.
    fn use_part_until(h: &mut HotKeys, mut t: f64, rate: f64) -> f64 {
        while h.rate().unwrap() < rate {
            assert!(t < 60.0, "never reached {rate}: {:?}", h.rate());
            t += 0.05;
            let r = h.rate().unwrap();
            h.answer(&written(t, 0.6 * r * 0.05));
        }
        t
    }

    #[test]
    fn a_range_found_from_a_guess_doubles_while_used_until_its_keys_are_refused() {
        let mut h = HotKeys::default();
        let mut one = refusal(0.0, "k", false);
        one.refused[0].units = 1.0;
        h.answer(&one);
        // One item of 25 at 200 units/s: a guess of 5% (x 0.8).
        assert_eq!(h.rate(), Some(8.0));
        let t = use_it(&mut h, 0.0, 2.0);
        let up = h.rate().unwrap();
        assert!((20.0..=32.5).contains(&up), "up to 2x per second: {up}");
        // Refused at 4 s: cut, and from there the climb is the curve's.
        let t = use_it(&mut h, t, 4.0);
        let top = h.rate().unwrap();
        h.answer(&refusal(t + 0.05, "k", true));
        let cut = h.rate().unwrap();
        assert!(
            cut < DECREASE * DECREASE * top,
            "a guess was never admitted: deeper than one event's usual floor, {cut} from {top}"
        );
        assert!(
            cut >= 0.4 * top,
            "but no deeper than 0.8 x half of it: {cut}"
        );
        use_it(&mut h, t + 0.05, t + 2.0);
        let later = h.rate().unwrap();
        assert!(
            later < top,
            "back toward the refused level over PROBE, not doubling: {later} (refused at {top})"
        );
        // Never past the table's rate while guessing.
        let mut g = HotKeys::default();
        g.answer(&one);
        use_it(&mut g, 0.0, 20.0);
        assert_eq!(g.rate(), Some(200.0));
    }

    /// A range found at 0 s and its key refused at 0.5 s and 1 s (its
    /// worker's share of the work told first, if any): no longer a guess,
    /// its rate climbs along the curve.
    fn cut_twice(share: Option<f64>) -> HotKeys {
        let mut h = HotKeys::default();
        h.share(share);
        h.answer(&refusal(0.0, "k", false));
        h.answer(&refusal(0.5, "k", true));
        h.answer(&refusal(1.0, "k", true));
        h
    }

    #[test]
    fn the_rate_climbs_back_while_used_and_a_range_left_alone_is_forgotten() {
        let mut h = cut_twice(None);
        let start = h.rate().unwrap();
        let t = use_it(&mut h, 1.0, 11.0);
        let back = h.rate().unwrap();
        assert!(
            (back - start / DECREASE).abs() < 1.0,
            "back at the cut's level after PROBE: {back}"
        );
        let t = use_it(&mut h, t, 15.5);
        let past = h.rate().unwrap();
        assert!(
            past > back && past < 1.03 * back,
            "then slowly past it: {past}"
        );
        // Past it for half a PROBE more with no refusal, the cut was below
        // the partition's maximum: it grows again as a guess does, by a
        // quarter a second, up to the table's rate, until a refusal.
        let t = use_it(&mut h, t, 18.0);
        let grown = h.rate().unwrap();
        assert!(
            grown > 1.4 * past && grown < 2.0 * past,
            "{past} -> {grown}"
        );
        let t = use_it(&mut h, t, 30.0);
        assert_eq!(h.rate(), Some(200.0), "the table's rate at most");
        h.answer(&refusal(t + 0.1, "k", true));
        assert!(h.rate().unwrap() <= DECREASE * 200.0, "{:?}", h.rate());
        // No refusal for TTL: the keys and the range are forgotten.
        h.answer(&written(t + 100.0, 1.0));
        assert!(h.is_empty());
        assert_eq!(h.rate(), None);
    }

    #[test]
    fn cuts_at_one_level_lengthen_the_climb_back_once_only() {
        // A partition that refuses the range's keys again and again at about
        // one level (a shallow bucket its cold keys empty in clumps): the
        // climb back takes 2 x PROBE, not up to 16 x.
        let mut h = cut_twice(None);
        let mut t = 1.0;
        for _ in 0..4 {
            t = use_it(&mut h, t, t + 12.0);
            t += 0.1;
            assert_eq!(h.answer(&refusal(t, "k", true)), Some(Change::Cut));
        }
        let level = h.rate().unwrap() / DECREASE;
        // Doubled once: still short of the level after PROBE, back at it
        // after twice that.
        let t = use_it(&mut h, t, t + PROBE.as_secs_f64() - 1.0);
        let short = h.rate().unwrap();
        assert!(
            short < 0.975 * level,
            "{short} of {level}: the climb doubled"
        );
        use_it(&mut h, t, t + PROBE.as_secs_f64() + 1.5);
        let back = h.rate().unwrap();
        assert!(back >= 0.98 * level, "{back} of {level} after 20 s");
    }

    #[test]
    fn a_guess_that_has_not_doubled_survives_its_first_refusal_only() {
        let mut h = HotKeys::default();
        h.answer(&refusal(0.0, "k", false));
        assert_eq!(h.rate(), Some(32.0));
        // Refused before it doubled: cut as an ordinary event, and it
        // doubles on while used.
        h.answer(&refusal(0.6, "k", true));
        assert_eq!(h.rate(), Some(0.8 * 32.0));
        let t = use_it(&mut h, 0.6, 2.6);
        let up = h.rate().unwrap();
        assert!(up > 2.0 * 25.6, "guessing on: {up}");
        // Its next refusal ends it, deeper than an ordinary event.
        h.answer(&refusal(t + 0.05, "k", true));
        let cut = h.rate().unwrap();
        assert!(cut < DECREASE * DECREASE * up, "{cut} from {up}");
        // Refused once it has grown by half (its keys writing 0.6 x it):
        // spared, so cut as an ordinary event, 0.8 x 0.8, not toward half.
        let mut m = HotKeys::default();
        m.answer(&refusal(0.0, "k", false));
        let t = use_part_until(&mut m, 0.0, 1.5 * 32.0);
        let grown = m.rate().unwrap();
        m.answer(&refusal(t + 0.05, "k", true));
        let cut = m.rate().unwrap();
        assert!(
            (cut - DECREASE * DECREASE * grown).abs() < 1e-6,
            "{cut} from {grown}"
        );
        // A guess refused twice before it doubled ends at the second: the
        // curve climbs from there, no doubling.
        let mut g = HotKeys::default();
        g.answer(&refusal(0.0, "k", false));
        g.answer(&refusal(0.6, "k", true));
        g.answer(&refusal(1.2, "k", true));
        let level = g.rate().unwrap();
        use_it(&mut g, 1.2, 3.2);
        let later = g.rate().unwrap();
        assert!(later < 1.25 * level, "{level} -> {later}");
    }

    #[test]
    fn a_larger_share_of_the_work_doubles_the_range_again() {
        let mut h = cut_twice(Some(0.4));
        let t = use_it(&mut h, 1.0, 4.0);
        let level = h.rate().unwrap();
        // Small moves of the share change nothing.
        assert!(!h.share(Some(0.45)));
        let t = use_it(&mut h, t, 4.5);
        assert!(h.rate().unwrap() < 1.05 * level, "{:?}", h.rate());
        // Peers finished: the share 1.0, the range doubles per second.
        assert!(h.share(Some(1.0)));
        let t = use_it(&mut h, t, 6.5);
        assert!(h.rate().unwrap() > 3.5 * level, "{level} -> {:?}", h.rate());
        // Until a refusal of its keys; then no new doubling at that share.
        h.answer(&refusal(t + 0.1, "k", true));
        assert!(!h.share(Some(1.0)));
    }

    #[test]
    fn the_refused_units_hold_hot_keys_back_max_repay_at_most() {
        let mut h = HotKeys::default();
        // 20 units refused at a table rate of 10 units/s: a range of 6.4
        // units/s, whose repayment would take 3 s.
        h.answer(&refusal_of(0.0, 20.0, 10.0));
        assert!((h.rate().unwrap() - 6.4).abs() < 1e-9, "{:?}", h.rate());
        assert!(MAX_REPAY.as_secs_f64() < 20.0 / 6.4);
        assert!(h.admit(s(0.5), 1.0).is_err(), "held back while it repays");
        assert!(
            h.admit(MAX_REPAY, 1.0).is_ok(),
            "no longer than MAX_REPAY: a partition drained refills meanwhile"
        );
    }

    #[test]
    fn a_re_guess_grows_by_a_quarter_a_second_where_a_found_range_doubles() {
        let mut h = cut_twice(Some(0.4));
        let cut = h.rate().unwrap();
        // Used past the last cut's level for REGUESS x PROBE: a re-guess.
        let t = use_it(&mut h, 1.0, 1.0 + REGUESS * PROBE.as_secs_f64() + 0.1);
        let from = h.rate().unwrap();
        assert!(
            from >= cut / DECREASE - 1e-9,
            "past the cut's level: {from}, the cut at {}",
            cut / DECREASE
        );
        let t = use_it(&mut h, t, t + 2.0);
        let now = h.rate().unwrap();
        let grown = now / from;
        assert!(
            (1.4..=1.7).contains(&grown),
            "1.25 x a second over 2 s (1.56), not doubling (4): {grown}"
        );
        // Peers finished meanwhile: a larger share doubles it.
        assert!(h.share(Some(1.0)), "a re-guess gives way to the share's");
        use_it(&mut h, t, t + 1.0);
        let doubled = h.rate().unwrap() / now;
        assert!((1.8..=2.2).contains(&doubled), "{doubled}");
    }

    #[test]
    fn a_guess_that_grew_ends_with_a_cut_to_half_of_it() {
        let mut h = HotKeys::default();
        h.answer(&refusal(0.0, "k", false));
        // Refused before writing anything: cut from the guess of 32.
        h.answer(&refusal(0.6, "k", true));
        assert_eq!(h.rate(), Some(0.8 * 32.0));
        // The guess had not doubled: spared, it goes on doubling while the
        // hot keys write 0.6 x the rate; refused once it has quadrupled.
        let t = use_part_until(&mut h, 0.6, 4.0 * 33.0);
        let grown = h.rate().unwrap();
        h.answer(&refusal(t + 0.05, "k", true));
        let cut = h.rate().unwrap();
        // What the keys wrote is a third of it or less: the floor decides,
        // half of a guess that was never admitted (x 0.8).
        assert!(cut <= 0.41 * grown, "{cut} from {grown}");
    }

    #[test]
    fn the_end_of_a_guess_that_never_grew_cuts_as_an_ordinary_event() {
        let mut h = HotKeys::default();
        h.share(Some(0.2));
        h.answer(&refusal(0.0, "k", false));
        let t = use_it(&mut h, 0.0, 2.5);
        h.answer(&refusal(t + 0.05, "k", true));
        // The hot keys go quiet past the window; a larger share starts a
        // guess; they write 1 unit/s, too little for it to double.
        let mut t = t + 0.05 + WINDOW.as_secs_f64();
        h.answer(&written(t, 0.0));
        assert!(h.share(Some(0.5)));
        let rate = h.rate().unwrap();
        for _ in 0..30 {
            t += 0.1;
            h.answer(&written(t, 0.1));
        }
        assert_eq!(h.rate(), Some(rate), "not used: no doubling");
        h.answer(&refusal(t + 0.05, "k", true));
        let cut = h.rate().unwrap();
        assert!(
            (cut - DECREASE * DECREASE * rate).abs() < 1e-9,
            "one event's usual floor, not half of a guess never tried: {cut} from {rate}"
        );
    }

    /// Workers sharing one hot partition (a bucket of `capacity` units/s,
    /// `depth` seconds deep), each wanting far more than it admits, each
    /// with its own key there, one unit a request as the writer sends hot
    /// units (spread as their pace lets them go), one request in flight for
    /// 20 ms: the rate each wrote over the second half, and the part of the
    /// requests refused then.
    fn shared_partition(workers: usize, capacity: f64, depth: f64, secs: f64) -> (Vec<f64>, f64) {
        let mut hs: Vec<HotKeys> = (0..workers).map(|_| HotKeys::default()).collect();
        let keys: Vec<String> = (0..workers).map(|w| format!("k{w}")).collect();
        let (unit, latency, tick) = (1.0, 0.02, 0.001);
        let (mut tokens, mut last) = (capacity * depth, 0.0);
        let mut next = vec![0.0; workers];
        let (mut wrote, mut requests, mut refusals) = (vec![0.0; workers], 0u32, 0u32);
        for step in 0..(secs / tick) as usize {
            for w in 0..workers {
                let now = (step as f64 + w as f64 / workers as f64) * tick;
                if now < next[w] {
                    continue;
                }
                tokens = (tokens + (now - last) * capacity).min(capacity * depth);
                last = now;
                let hot = hs[w].is_hot(&keys[w]);
                if hot {
                    if let Err(wait) = hs[w].admit(s(now), unit) {
                        next[w] = now + wait.as_secs_f64();
                        continue;
                    }
                }
                next[w] = now + latency;
                let ok = tokens >= unit;
                if ok {
                    tokens -= unit;
                }
                if now >= secs / 2.0 {
                    requests += 1;
                    if ok {
                        wrote[w] += unit;
                    } else {
                        refusals += 1;
                    }
                }
                hs[w].answer(&Answer {
                    now: s(now),
                    sent: s(now),
                    request_units: 25.0,
                    hot_written: if ok { unit } else { 0.0 },
                    refused: if ok {
                        vec![]
                    } else {
                        vec![Refused {
                            key: &keys[w],
                            units: unit,
                            was_hot: hot,
                        }]
                    },
                    cold_refused: !ok && !hot,
                    table_rate: 200.0,
                    probe: false,
                });
            }
        }
        let rates = wrote.iter().map(|u| u / (secs / 2.0)).collect();
        (rates, f64::from(refusals) / f64::from(requests.max(1)))
    }

    #[test]
    fn workers_sharing_a_hot_partition_share_it_and_none_spirals_down() {
        for (workers, capacity, depth) in [
            (1, 40.0, 0.25),
            (3, 60.0, 0.25),
            (3, 60.0, 0.05),
            (5, 100.0, 0.25),
            (2, 30.0, 1.0),
        ] {
            let (rates, refused) = shared_partition(workers, capacity, depth, 600.0);
            let sum: f64 = rates.iter().sum();
            let fair = capacity / workers as f64;
            eprintln!(
                "{workers} workers, {capacity}/s, {depth} s: {rates:.1?}, sum {sum:.1}, refused {:.1}%",
                refused * 100.0
            );
            assert!(sum >= 0.8 * capacity, "{workers} workers: {rates:?}");
            assert!(refused <= 0.01, "{workers} workers: {refused}");
            for r in &rates {
                assert!(*r >= 0.5 * fair, "{workers} workers: {rates:?}");
            }
        }
    }

    #[test]
    fn at_most_max_keys_are_remembered() {
        let mut h = HotKeys::default();
        let keys: Vec<String> = (0..=MAX_KEYS).map(|i| format!("k{i}")).collect();
        let t = |i: usize| i as f64 * 1e-6;
        for (i, k) in keys[..MAX_KEYS].iter().enumerate() {
            h.answer(&refusal(t(i), k, false));
        }
        // k0 is refused again: k1 is now the least recently refused.
        h.answer(&refusal(t(MAX_KEYS), "k0", true));
        h.answer(&refusal(t(MAX_KEYS + 1), &keys[MAX_KEYS], false));
        assert_eq!(h.len(), MAX_KEYS);
        assert!(!h.is_hot("k1"), "the least recently refused went");
        assert!(h.is_hot("k0") && h.is_hot(&keys[MAX_KEYS]));
    }
}
