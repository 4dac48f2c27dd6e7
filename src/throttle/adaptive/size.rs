//! How much one request may carry, learned from partial answers. Pure: time
//! is passed in.
//!
//! DynamoDB writes the items of a BatchWriteItem that fit in what the table
//! (or the key range) admits at that instant and returns the rest
//! unprocessed. When that allowance is smaller than a request (a shallow
//! bucket, no burst credit, a hot partition, peers' requests coinciding),
//! every request comes back partial *whatever the rate*: cutting the rate
//! does not help, and a controller that cuts on every partial answer spirals
//! down (measured with `ingest sim`: 1.6% of a 200 WCU/s table with a bucket
//! of 10 WCU). Requests shrink instead:
//!
//! - a partial answer to a request larger than any size proven since (the
//!   largest admitted whole, or what the last size signal admitted: so the
//!   first partial answer to a batch larger than any written whole, and
//!   those of regrowth), or one that comes while the client paces far below
//!   its share of the capacity (but see below), is a *size* signal:
//!   the server admitted `accepted` units at once, so requests carry at most
//!   that much from now on (and always one whole item), for `hold` at least;
//!   the rate controller does not cut for it (but for a job kept together
//!   far under its shares, whose worker above its part cuts a tenth:
//!   `SIZE_CUT` in the controller);
//! - a partial answer to a request within the proven size, at a normal rate,
//!   is a rate signal (the server's bucket was low, not small: the server
//!   has admitted as much at once before; another writer or our own pace
//!   emptied it): the rate
//!   controller cuts, and requests halve at most, down to half the proven
//!   size (smaller ones fit peers' coinciding requests better, but cost more
//!   calls than they save below that);
//! - after the hold, each request that used most of the limit and was fully
//!   accepted raises it by `grow`, until no limit is left (a full batch);
//! - while slow, a partial answer to a request no larger than one admitted
//!   whole within `MEMORY` does not lower what the server is taken to admit
//!   at once: its bucket was low, not small (it admitted that much whole
//!   lately). The requests shrink as within the proven size, and the rate
//!   is not cut. Only a partial answer to a request larger than any
//!   admitted whole lately says the allowance may have shrunk. (Two jobs on
//!   one table put every worker at about half its share, so slow: each
//!   partial answer there took the proven size to half of what had been
//!   admitted whole lately, the limit followed, and once only small
//!   requests went out, what had been admitted whole lately was small as
//!   well. In `ingest sim`'s two-jobs over 10 minutes, requests spiralled
//!   down to one item in 2 of 40 seeds: 16-22x the ideal request count at
//!   3.3-4.7% throttled.)
//! - a size signal never shrinks requests below the largest request the
//!   server admitted whole within the last `MEMORY` (it has shown it admits
//!   that much at once: admitting less now says its bucket was low, as when
//!   another job keeps it low, not small); while slow, below half of it
//!   (the server's allowance may have shrunk: burst credit gone).
//!   (Without this, two jobs on one table, each keeping the bucket low for
//!   the other, shrank requests to a few units on the first partial answer
//!   to a batch larger than any before, and held them there: 15x the ideal
//!   request count in `ingest sim`'s two-jobs scenario.)
//!
//! - where the server admits at once less than `shallow_below` (the
//!   controller's quarter second of the table's capacity), a client with a
//!   share of the table (its part of the consumer group's work) sends at
//!   most that part of what the server admits at once: its peers' requests
//!   meet its own in the same bucket, and those of three workers at a third
//!   of it each still fit together (`make bench-dynamodb`, 3 workers on a
//!   200 WCU/s table with a 10 WCU bucket, with the controller's faster
//!   recovery there: 76-79% utilization and 0.9-1.1% throttled requests
//!   over three runs, instead of 53% and 4.4%).
//!
//! - once any answer has come back partial, where the most the server has
//!   shown it admits at once (`proven`: the largest request admitted whole,
//!   or what a size signal admitted) is less than `peers_below` (the
//!   controller's half second of the table's capacity), a client with a
//!   share keeps every request to its part of that (an eighth at the
//!   least, `PEERS_MEETING`), not only after a size signal: three
//!   workers' batches of half such a bucket meet now and then at any
//!   rate, and each meeting comes back partial. (`proven` is at most a
//!   batch, so on a table of more than two batches a second the part
//!   applies after any partial answer, however deep its bucket: there it
//!   costs calls, not capacity.) The part
//!   regrows: `hold` after the last partial answer, by `grow` every
//!   `PART_REGROW` (fixed) in which a request near it came back whole, so
//!   an allowance taken at a bad moment (a start, a burst of peers) is not
//!   kept for good. A partial answer sets it back; a refusal of the whole
//!   request does not (the bucket was empty, which says nothing of how
//!   requests fit together; resetting on those too put the lower of two
//!   jobs at 35.4% in one seed of 40). While the part holds, a partial
//!   answer while slow within the proven size shrinks requests as one
//!   within it does and leaves what the server admits at once as it was
//!   (the rate is not cut either): requests under the part never raise
//!   what was admitted whole lately, and the slow rule would have taken
//!   that for the allowance and spiralled. For the same reason the
//!   proven size the part rests on counts as admitted whole lately
//!   (`parted_from`) where the controller asks whether one partial answer
//!   shows a table shaped for time slots. The
//!   pacer's burst follows the limit, so a worker's own requests leave
//!   paced apart too. (`ingest sim`, seeds 1-8, three workers on a 200
//!   WCU/s table whose bucket holds 0.5 s: 0.33% of requests throttled
//!   instead of 1.82%, 94-97% of the table used instead of 67-76%; a
//!   neighbour writing 60 of the 200: 0.94% instead of 1.87%. Kept for
//!   good, an allowance learned at the start held one worker to 5-unit
//!   requests for ten minutes.)
//!
//! - while the client keeps to time slots, a partial answer within the
//!   proven size does not extend a hold still running, so the limit
//!   regrows every `hold` at the least. A worker slots on what one answer
//!   showed, and at a job's start the workers' first batches meet: one that
//!   came second read the scraps its peers left as all the table admits at
//!   once and slotted on a bucket of 0.15 s its peers did not slot on.
//!   Alone in its parts it drained the bucket in bursts for the others, and
//!   each of its requests the others refused restarted the hold, so its
//!   requests never regrew past the scraps to show the table's real depth.
//!   With regrowth every `hold` it finds the depth and leaves the slots.
//!   (`ingest sim`, `shallow-bucket.toml` with 3 clients and buckets of
//!   0.075-0.2 s, seeds 1-8; figures in the README's "Mixed slots and
//!   false settles".)
//!
//! So a server that admits less than a batch at a time sees one partial
//! answer per `hold` (plus the few of the regrowth), not one per request.

use std::time::Duration;

use crate::throttle::window::MaxWindow;

/// How long a request admitted whole counts as proof of what the server
/// admits at once.
const MEMORY: Duration = Duration::from_secs(60);

/// Above this, the limit is dropped (no batch costs that much: 25 items of
/// 400 KB are 10,000 WCU).
const UNLIMITED: f64 = 10_000.0;

/// How often a client's part of what the server admits at once may grow
/// (see the module doc).
const PART_REGROW: Duration = Duration::from_secs(20);

/// The most peers' requests that part is sized to fit at once: a client
/// with more peers keeps to this share of what the server admits at once,
/// not a smaller one. (`ingest sim`, 20 workers on a 1,000 WCU/s table
/// with a neighbour writing 300 and no burst credit, seeds 1-4: 0.60% of
/// requests throttled at 6.4x the ideal request count, against 0.31% at
/// 12.9x with no such floor and 2.09% at 1.5x with no part at all.)
const PEERS_MEETING: f64 = 8.0;

#[derive(Debug, Clone, PartialEq)]
pub struct RequestSize {
    limit: Option<f64>,
    /// The most the server has shown it admits at once: what the last size
    /// signal admitted, raised by every larger request admitted whole since
    /// (None: no answer yet).
    proven: Option<f64>,
    hold: Duration,
    grow: f64,
    hold_until: Duration,
    /// A partial answer has set `proven` to what the server admits at once
    /// (before it, `proven` is only the largest request admitted whole).
    limited: bool,
    /// The largest request admitted whole within `MEMORY`.
    whole: MaxWindow,
    /// This client's part of what the server admits at once (its share of
    /// the table: its peers' requests meet its own in the same bucket).
    part: f64,
    /// A server that admits less than this at once is shallow: only there
    /// does the client keep to its part (a deep bucket that another job
    /// keeps low admits little at once too, and tiny requests there only
    /// cost calls).
    shallow_below: f64,
    /// A server that admits less than this at once gets requests of at
    /// most this client's part of it (see the module doc).
    peers_below: f64,
    /// How far that part has regrown since the last partial answer (1: not).
    part_grown: f64,
    /// When it may grow next.
    part_grows_at: Duration,
    /// An answer has come back partial (the part applies from then on).
    partial_seen: bool,
    /// The client keeps to time slots (`set_slotted`).
    slotted: bool,
}

impl RequestSize {
    pub fn new(hold: Duration, grow: f64) -> Self {
        Self {
            limit: None,
            proven: None,
            hold,
            grow,
            hold_until: Duration::ZERO,
            limited: false,
            whole: MaxWindow::new(MEMORY),
            part: 1.0,
            shallow_below: 0.0,
            peers_below: 0.0,
            part_grown: 1.0,
            part_grows_at: Duration::ZERO,
            partial_seen: false,
            slotted: false,
        }
    }

    /// Whether the client keeps to time slots now: a partial answer within
    /// the proven size then does not extend a hold still running (see
    /// `shrink_within`).
    pub fn set_slotted(&mut self, slotted: bool) {
        self.slotted = slotted;
    }

    /// This client's part of what the server admits at once, where that is
    /// less than `shallow_below` units, and of every request where it is
    /// less than `peers_below` (see the module doc). A `peers_below` more
    /// than 10% off the last (a new capacity) forgets the partial answers
    /// seen: a larger table's bucket is deeper, and requests sized by the
    /// old one's would only cost calls.
    pub fn set_part(&mut self, part: f64, shallow_below: f64, peers_below: f64) {
        if part.is_finite() && part > 0.0 {
            self.part = part.min(1.0);
        }
        if shallow_below.is_finite() {
            self.shallow_below = shallow_below.max(0.0);
        }
        if peers_below.is_finite() {
            let new = peers_below.max(0.0);
            if (new - self.peers_below).abs() > 0.1 * self.peers_below {
                self.partial_seen = false;
                self.part_grown = 1.0;
            }
            self.peers_below = new;
        }
    }

    /// The most one request carries for this client's part of what the
    /// server has shown it admits at once, once an answer came back partial,
    /// where that is less than `peers_below` and the client has peers
    /// (None: no such bound).
    fn part_cap(&self) -> Option<f64> {
        self.proven
            .filter(|p| self.partial_seen && *p < self.peers_below && self.part < 1.0)
            .map(|p| (p * self.part.max(1.0 / PEERS_MEETING) * self.part_grown).max(1.0))
    }

    /// The part of `admitted` units this client keeps to.
    fn part_of(&self, admitted: f64) -> f64 {
        if admitted < self.shallow_below {
            (admitted * self.part).max(1.0)
        } else {
            admitted
        }
    }

    /// While the part holds, the proven size it is a part of (0: it does
    /// not hold): requests under the part prove nothing larger, so this
    /// stands beside the largest request admitted whole lately as what the
    /// server has shown it admits at once (`Adaptive::shows_slotted` reads
    /// both; `slot_shaped` needs no such care, since it asks that the
    /// proven size itself be small).
    pub fn parted_from(&self) -> f64 {
        self.part_cap().and(self.proven).unwrap_or(0.0)
    }

    /// The most units one request should carry (None: a whole batch).
    pub fn limit(&self) -> Option<f64> {
        match (self.limit, self.part_cap()) {
            (Some(l), Some(c)) => Some(l.min(c)),
            (l, c) => l.or(c),
        }
    }

    /// The largest request admitted whole within `MEMORY` of `now` (0:
    /// none): a partial answer now proves no smaller a size than this.
    pub fn largest_whole(&mut self, now: Duration) -> f64 {
        self.whole.max(now).unwrap_or(0.0)
    }

    /// The most the server has shown it admits at once, once a partial
    /// answer has shown it admits less than was asked (None: no sign of a
    /// limit yet).
    pub fn admits_at_once(&self) -> Option<f64> {
        self.proven.filter(|_| self.limited)
    }

    /// Whether a request of `sent` units is larger than any size proven
    /// since the last size signal: a partial answer to it is this client's
    /// own probe of what the server admits at once.
    pub fn probes(&self, sent: f64) -> bool {
        self.proven.is_none_or(|p| sent > p + 1e-9)
    }

    /// A partial answer to a request within the proven size (its bucket
    /// was low, not small): smaller requests fit peers' coinciding ones
    /// better, so the limit halves at most, down to half this client's part
    /// of the proven size or of `whole` (the largest request admitted whole
    /// lately), whichever is larger (smaller ones cost more calls than they save; a
    /// size signal while slow may have left the proven size at half of
    /// that). The limit regrows `hold` after this (unless slotted, see the
    /// module doc).
    fn shrink_within(&mut self, now: Duration, admitted: f64, sent: f64, whole: f64) {
        let l = self.limit.unwrap_or(sent);
        let floor = self
            .proven
            .map_or(0.0, |p| self.part_of(p.max(whole)) / 2.0);
        self.limit = Some(admitted.max(l / 2.0).max(floor).max(1.0).min(l));
        if !self.slotted || now >= self.hold_until {
            self.hold_until = now + self.hold;
        }
    }

    /// One answer: `sent` units asked for, `accepted` written; `slow`: the
    /// client was pacing far below its share of the capacity. Returns true
    /// if it was a size signal (the rate is not cut): partial, for a request
    /// larger than any size proven since, or while slow (see the module
    /// doc). The limit then shrinks to what was admitted; while slow, for a
    /// request no larger than one admitted whole lately, it shrinks as
    /// within the proven size instead. A partial answer within the proven
    /// size at a normal rate is the rate's business: the limit halves at
    /// most.
    pub fn observe(
        &mut self,
        now: Duration,
        sent: f64,
        accepted: f64,
        throttled: bool,
        slow: bool,
    ) -> bool {
        if throttled {
            if accepted <= 0.0 || accepted >= sent {
                return false; // nothing admitted: no size learned
            }
            self.part_grown = 1.0;
            self.part_grows_at = now + self.hold;
            self.partial_seen = true;
            let probe = self.probes(sent);
            let admitted = accepted.max(1.0);
            let whole = self.whole.max(now).unwrap_or(0.0);
            let parted = !probe && self.part_cap().is_some();
            if slow && (sent <= whole + 1e-9 || parted) {
                // Slow, and a request this large was admitted whole lately
                // (or within the proven size while the part holds): the
                // bucket was low, not small. The requests shrink as
                // within the proven size; what it admits at once stays.
                self.shrink_within(now, admitted, sent, whole);
                return true;
            }
            if probe || slow {
                // The server admitted this much at once; and, unless slow,
                // as much as it admitted whole lately.
                let admitted = admitted.max(if slow { whole / 2.0 } else { whole });
                self.limit = Some(self.part_of(admitted));
                self.proven = Some(admitted);
                self.limited = true;
            } else {
                // Within the proven size: its bucket was low, not small.
                self.shrink_within(now, admitted, sent, whole);
                return false;
            }
            self.hold_until = now + self.hold;
            return true;
        }
        if accepted >= sent && sent > 0.0 {
            self.proven = Some(self.proven.map_or(sent, |p| p.max(sent)));
            self.whole.add(now, sent);
        }
        if let Some(c) = self.part_cap() {
            if now >= self.part_grows_at && sent >= 0.8 * c && accepted >= sent {
                self.part_grown *= self.grow;
                self.part_grows_at = now + PART_REGROW;
            }
        }
        if let Some(l) = self.limit {
            if now >= self.hold_until && sent >= 0.8 * l {
                let next = l * self.grow;
                self.limit = (next < UNLIMITED).then_some(next);
            }
        }
        false
    }
}

/// How many of the leading items (by cost) one request takes under `limit`:
/// as many as fit, and always at least one.
pub fn leading_within(costs: impl IntoIterator<Item = f64>, limit: Option<f64>) -> usize {
    let mut room = Room::new(limit);
    for c in costs {
        if !room.fits(c) {
            break;
        }
        room.take(c);
    }
    room.items
}

/// What is left of one request's size as items are put in it: an item fits
/// if the request stays under `limit`, and the first always does.
#[derive(Debug, Clone, Copy)]
pub struct Room {
    limit: Option<f64>,
    used: f64,
    items: usize,
}

impl Room {
    pub fn new(limit: Option<f64>) -> Self {
        Self {
            limit,
            used: 0.0,
            items: 0,
        }
    }

    pub fn fits(&self, cost: f64) -> bool {
        self.items == 0 || self.limit.is_none_or(|l| self.used + cost <= l + 1e-9)
    }

    pub fn take(&mut self, cost: f64) {
        self.used += cost;
        self.items += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// With the default hold (`size_hold_s`, 30 s) and growth
    /// (`size_grow`, 25% a full answer).
    fn sized() -> RequestSize {
        RequestSize::new(Duration::from_secs(30), 1.25)
    }

    #[test]
    fn a_partial_answer_limits_requests_to_what_was_admitted() {
        let mut s = sized();
        assert_eq!(s.limit(), None);
        assert!(s.observe(ms(0), 50.0, 10.0, true, false), "a size signal");
        assert_eq!(s.limit(), Some(10.0));
        // Held: successes do not raise it for 30 s.
        for t in (100..30_000).step_by(100) {
            assert!(!s.observe(ms(t), 10.0, 10.0, false, false));
        }
        assert_eq!(s.limit(), Some(10.0));
        // Then each full request raises it by 25%.
        s.observe(ms(30_000), 10.0, 10.0, false, false);
        assert_eq!(s.limit(), Some(12.5));
        // A request that used little of it does not.
        s.observe(ms(30_100), 2.0, 2.0, false, false);
        assert_eq!(s.limit(), Some(12.5));
    }

    #[test]
    fn only_requests_above_the_proven_size_are_size_signals() {
        let mut s = sized();
        assert!(s.observe(ms(0), 50.0, 10.0, true, false), "the first: size");
        // Partial within what was proven: the bucket was low, a rate
        // signal; the size halves at most, to half the proven size at least.
        assert!(!s.observe(ms(50), 10.0, 2.0, true, false));
        assert_eq!(s.limit(), Some(5.0));
        assert!(!s.observe(ms(60), 5.0, 1.0, true, false));
        assert_eq!(s.limit(), Some(5.0));
        // Far below its share, a partial answer is a size signal.
        assert!(s.observe(ms(70), 5.0, 3.0, true, true));
        assert_eq!(s.limit(), Some(3.0));
        assert!(s.observe(ms(80), 4.0, 2.0, true, false), "above it: size");
        assert_eq!(s.limit(), Some(2.0));
    }

    /// A size signal (5 of 50 units: scraps its peers left) at 0, then a
    /// partial answer within the proven size every 10 s from 5 s (requests
    /// its peers refused): the limit at 45 s, slotted or not.
    fn met_every_ten_seconds(slotted: bool) -> Option<f64> {
        let mut s = sized();
        s.set_slotted(slotted);
        assert!(s.observe(ms(0), 50.0, 5.0, true, false));
        for t in (100..=45_000).step_by(100) {
            // A batch is 50 units at the most.
            let l = s.limit().unwrap_or(50.0).min(50.0);
            if t % 10_000 == 5_000 {
                s.observe(ms(t), l, l / 2.0, true, false);
            } else {
                s.observe(ms(t), l, l, false, false);
            }
        }
        s.limit()
    }

    #[test]
    fn slotted_requests_regrow_every_hold_though_peers_refuse_some() {
        // Not slotted, each refusal within the proven size holds the limit
        // 30 s more: it never regrows past the scraps.
        assert!(met_every_ten_seconds(false).is_some_and(|l| l <= 5.0));
        // Slotted, a refusal does not extend the hold running: from 30 s
        // the limit regrows (5 -> 6.25 -> ...), and shows the table's depth.
        assert!(met_every_ten_seconds(true).is_some_and(|l| l > 5.0));
    }

    #[test]
    fn a_partial_answer_to_a_size_admitted_whole_before_is_a_rate_signal() {
        // Another writer (or our own pace) emptied a deep bucket: the
        // server has admitted 50 units at once before, so a partial answer
        // to 50 says the rate is too high, not the request too large.
        let mut s = sized();
        assert!(!s.observe(ms(0), 60.0, 60.0, false, false));
        assert!(!s.observe(ms(500), 50.0, 3.0, true, false), "a rate signal");
        assert_eq!(s.limit(), Some(30.0), "halved at most, to half of 60");
        // A request larger than any admitted whole is still a size probe,
        // down to the 60 admitted whole lately.
        assert!(s.observe(ms(600), 80.0, 20.0, true, false));
        assert_eq!(s.limit(), Some(60.0));
    }

    #[test]
    fn a_size_signal_keeps_what_was_admitted_whole_lately() {
        // Another job keeps the bucket low: a batch larger than any before
        // gets 4 of its 60 units admitted. The server admitted 50 at once
        // 10 s ago, so requests shrink to 50, not 4.
        let mut s = sized();
        assert!(!s.observe(ms(0), 50.0, 50.0, false, false));
        assert!(!s.observe(ms(5_000), 30.0, 30.0, false, false));
        assert!(s.observe(ms(10_000), 60.0, 4.0, true, false));
        assert_eq!(s.limit(), Some(50.0));
        assert_eq!(s.admits_at_once(), Some(50.0));
        // A minute later the 50 is forgotten; the 30 of 5 s is not.
        assert!(s.observe(ms(61_000), 70.0, 4.0, true, false));
        assert_eq!(s.limit(), Some(30.0));
        // Past the memory, what was admitted is all that is proven.
        assert!(s.observe(ms(200_000), 40.0, 4.0, true, false));
        assert_eq!(s.limit(), Some(4.0));
    }

    #[test]
    fn a_size_signal_while_slow_keeps_half_of_what_was_admitted_whole() {
        // Far below its share and still partial: a request no larger than
        // one admitted whole lately found the bucket low, not small, and
        // halves at most, to half the proven size.
        let mut s = sized();
        assert!(!s.observe(ms(0), 50.0, 50.0, false, false));
        assert!(s.observe(ms(1_000), 25.0, 4.0, true, true));
        assert_eq!(s.limit(), Some(25.0));
        assert!(s.observe(ms(2_000), 20.0, 3.0, true, true));
        assert_eq!(s.limit(), Some(25.0), "still half of the 50");
        assert_eq!(s.admits_at_once(), None, "not lowered: the 50 went whole");
        // A request larger than any admitted whole lately: the server's
        // allowance may have shrunk (burst credit gone), so requests shrink
        // below what it admitted whole lately, but to half of it at most
        // while that is remembered: a low bucket (another job) looks the
        // same.
        assert!(!s.observe(ms(30_000), 25.0, 25.0, false, false));
        assert!(s.observe(ms(70_000), 30.0, 3.0, true, true));
        assert_eq!(s.limit(), Some(12.5), "half of the 25 admitted since");
    }

    #[test]
    fn a_client_held_small_by_its_limit_does_not_unlearn_what_the_server_admits() {
        // Another job keeps a deep bucket low. The server has admitted 50
        // at once; a batch of 60 gets 10 of its units in, and this worker
        // (a third of its group) sends a third of the 50 from then on.
        let mut s = sized();
        s.set_part(1.0 / 3.0, 100.0, 0.0);
        assert!(!s.observe(ms(0), 50.0, 50.0, false, false));
        assert!(s.observe(ms(10_000), 60.0, 10.0, true, false));
        assert_eq!(s.admits_at_once(), Some(50.0));
        assert!((s.limit().unwrap() - 50.0 / 3.0).abs() < 1e-9);
        // For minutes, at half its share (slow), its small requests come
        // back now whole, now partial: the bucket is low, not small, and
        // what it admits at once stays; the requests stay at half the part
        // of it at least, and the rate is not cut. (Before, each partial
        // answer halved it, and it came down to one unit.)
        for k in 0..60 {
            let t = 12_000 + 5_000 * k;
            let l = s.limit().unwrap().floor();
            assert!(!s.observe(ms(t), l, l, false, true));
            assert!(s.observe(ms(t + 2_500), l, l / 4.0, true, true), "no cut");
        }
        assert_eq!(s.admits_at_once(), Some(50.0));
        assert!(s.limit().unwrap() >= 50.0 / 6.0 - 1e-9, "{:?}", s.limit());
    }

    #[test]
    fn a_failed_regrowth_while_slow_keeps_half_of_what_went_whole() {
        // A slow size signal leaves the proven size at half of the 50
        // admitted whole; a partial answer within it after that halves the
        // limit no further than half of the 50 (it took it to a quarter).
        let mut s = sized();
        assert!(!s.observe(ms(0), 50.0, 50.0, false, false));
        assert!(s.observe(ms(1_000), 60.0, 5.0, true, true));
        assert_eq!(s.admits_at_once(), Some(25.0));
        assert!(s.observe(ms(2_000), 25.0, 3.0, true, true));
        assert_eq!(s.limit(), Some(25.0));
    }

    #[test]
    fn a_client_held_small_still_learns_an_allowance_that_shrank() {
        // The same worker, when the server's allowance truly shrinks (burst
        // credit gone): its small requests are never admitted whole again.
        // Once nothing that large was admitted whole within the memory, a
        // partial answer while slow is a size signal as before.
        let mut s = sized();
        s.set_part(1.0 / 3.0, 100.0, 0.0);
        assert!(!s.observe(ms(0), 8.0, 8.0, false, false));
        assert!(!s.observe(ms(1_000), 50.0, 50.0, false, false));
        assert!(s.observe(ms(2_000), 60.0, 10.0, true, false));
        for k in 0..25 {
            let l = s.limit().unwrap().floor();
            assert!(s.observe(ms(5_000 + 2_000 * k), l, 3.0, true, true));
        }
        assert_eq!(s.admits_at_once(), Some(50.0), "the 50 is remembered");
        assert!(
            (s.limit().unwrap() - 50.0 / 6.0).abs() < 1e-9,
            "{:?}",
            s.limit()
        );
        assert!(s.observe(ms(65_000), 8.0, 3.0, true, true));
        assert_eq!(s.admits_at_once(), Some(3.0));
        assert_eq!(s.limit(), Some(1.0), "a third of 3, one unit at least");
    }

    #[test]
    fn a_client_takes_its_part_of_what_the_server_admits_at_once() {
        // Three workers share a bucket that admits 12 units at once: each
        // sends at most a third of it, so their requests, when they meet,
        // still fit together.
        let mut s = sized();
        s.set_part(1.0 / 3.0, 16.0, 0.0);
        assert_eq!(s.limit(), None, "no part before a limit is seen");
        assert!(s.observe(ms(0), 50.0, 12.0, true, false));
        assert_eq!(s.admits_at_once(), Some(12.0));
        // A partial answer within it halves the size, to half the part.
        assert!(!s.observe(ms(100), 4.0, 1.0, true, false));
        assert_eq!(s.limit(), Some(2.0));
        // Never below one unit (a share of 0.01; a share that is not a
        // number is ignored).
        s.set_part(0.01, 16.0, 0.0);
        s.set_part(f64::NAN, f64::NAN, f64::NAN);
        assert!(s.observe(ms(200), 20.0, 12.0, true, false));
        assert_eq!(s.limit(), Some(1.0));
        // A deep bucket kept low (it admitted 40 whole) is not shallow:
        // the whole of what it admits.
        let mut s = sized();
        s.set_part(1.0 / 3.0, 16.0, 0.0);
        assert!(!s.observe(ms(0), 40.0, 40.0, false, false));
        assert!(s.observe(ms(100), 50.0, 12.0, true, false));
        assert_eq!(s.limit(), Some(40.0));
    }

    /// A client with a third of a 100-unit `peers_below`: a whole answer
    /// proves 60 units at once (nothing bounds requests yet), then at
    /// `ms` a peer's batch meets one of its own, partial within what went
    /// whole (a rate signal): from then on requests keep to a third of 60.
    fn a_third_met_at(ms_partial: u64) -> RequestSize {
        let mut s = sized();
        s.set_part(1.0 / 3.0, 16.0, 100.0);
        assert!(!s.observe(ms(0), 60.0, 60.0, false, false));
        assert_eq!(s.limit(), None);
        assert!(!s.observe(ms(ms_partial), 50.0, 40.0, true, false));
        assert_eq!(s.limit(), Some(20.0));
        s
    }

    #[test]
    fn a_client_with_peers_keeps_to_its_part_of_a_small_allowance_and_regrows_it() {
        // Three workers on a table that admits 60 units at once (under the
        // 100 of `peers_below`): each keeps every request to a third of it,
        // so that the three, when they meet, still fit together.
        let mut s = sized();
        s.set_part(1.0 / 3.0, 16.0, 100.0);
        assert!(s.observe(ms(0), 80.0, 60.0, true, false));
        assert_eq!(s.admits_at_once(), Some(60.0));
        assert_eq!(s.limit(), Some(20.0));
        // Held for `hold` (30 s), then by 25% per 20 s in which a request
        // near it came back whole.
        assert!(!s.observe(ms(29_000), 20.0, 20.0, false, false));
        assert_eq!(s.limit(), Some(20.0));
        s.observe(ms(30_000), 20.0, 20.0, false, false);
        assert_eq!(s.limit(), Some(25.0));
        s.observe(ms(31_000), 25.0, 25.0, false, false);
        s.observe(ms(49_000), 25.0, 25.0, false, false);
        assert_eq!(s.limit(), Some(25.0), "once per 20 s");
        s.observe(ms(50_000), 10.0, 10.0, false, false);
        assert_eq!(
            s.limit(),
            Some(25.0),
            "a request far under it proves nothing"
        );
        s.observe(ms(50_100), 25.0, 25.0, false, false);
        assert_eq!(s.limit(), Some(31.25));
        // A partial answer sets it back to the part, held again.
        assert!(!s.observe(ms(51_000), 31.0, 20.0, true, false));
        assert_eq!(s.limit(), Some(20.0));
        s.observe(ms(80_000), 20.0, 20.0, false, false);
        assert_eq!(s.limit(), Some(20.0));
        s.observe(ms(81_000), 20.0, 20.0, false, false);
        assert_eq!(s.limit(), Some(25.0));
        // Alone (a share of 1, or alone in its time slots), or where the
        // server admits more at once: no such bound.
        // (30: the partial answer's halving, down to half the proven 60.)
        s.set_part(1.0, 16.0, 100.0);
        assert_eq!(s.limit(), Some(30.0));
        let mut s = sized();
        s.set_part(1.0 / 3.0, 16.0, 100.0);
        assert!(s.observe(ms(0), 150.0, 120.0, true, false));
        assert_eq!(s.limit(), Some(120.0));
        // A new capacity forgets the partial answers: on a table of three
        // times the capacity the part waits for a partial answer there.
        let mut s = a_third_met_at(100);
        s.set_part(1.0 / 3.0, 48.0, 100.0);
        assert_eq!(s.limit(), Some(20.0), "the same capacity keeps it");
        s.set_part(1.0 / 3.0, 48.0, 300.0);
        assert_eq!(s.limit(), Some(40.0), "what the partial answer left");
        assert!(!s.observe(ms(200), 40.0, 30.0, true, false));
        assert_eq!(s.limit(), Some(20.0));
        // Twenty workers on a larger table: an eighth of it, not a
        // twentieth (more than eight seldom meet at once).
        let mut s = sized();
        s.set_part(1.0 / 20.0, 16.0, 500.0);
        assert!(s.observe(ms(0), 150.0, 120.0, true, false));
        assert_eq!(s.limit(), Some(15.0));
    }

    #[test]
    fn the_part_holds_after_any_partial_answer_and_never_spirals_while_slow() {
        let mut s = a_third_met_at(100);
        // Regrown twice, then (the 60 units out of memory) a partial
        // answer while slow to a request larger than any that went whole
        // lately: within the proven size, so not a size signal that would
        // take the allowance for 12.5 units and spiral.
        s.observe(ms(30_100), 20.0, 20.0, false, false);
        s.observe(ms(50_100), 25.0, 25.0, false, false);
        assert_eq!(s.limit(), Some(31.25));
        assert!(s.observe(ms(61_000), 31.0, 10.0, true, true));
        assert_eq!(
            s.admits_at_once(),
            None,
            "what it admits at once stays (the rate is not cut)"
        );
        assert_eq!(s.limit(), Some(20.0), "back to the part of 60");
        // A refusal of the whole request (the bucket was empty) does not
        // set the regrowth back.
        s.observe(ms(91_000), 20.0, 20.0, false, false);
        assert_eq!(s.limit(), Some(25.0));
        assert!(!s.observe(ms(92_000), 25.0, 0.0, true, false));
        s.observe(ms(111_000), 25.0, 25.0, false, false);
        assert_eq!(s.limit(), Some(31.25));
    }

    #[test]
    fn it_grows_back_to_no_limit_and_never_below_one_unit() {
        let mut s = RequestSize::new(Duration::ZERO, 2.0);
        s.observe(ms(0), 5.0, 0.4, true, false);
        assert_eq!(s.limit(), Some(1.0), "one unit at least");
        let mut t = 1;
        while let Some(l) = s.limit() {
            s.observe(ms(t), l, l, false, false);
            t += 1;
            assert!(t < 100, "grows without bound");
        }
    }

    #[test]
    fn a_request_takes_the_items_that_fit_and_at_least_one() {
        assert_eq!(leading_within([5.0, 5.0, 5.0], Some(10.0)), 2);
        assert_eq!(leading_within([20.0, 5.0], Some(10.0)), 1);
        assert_eq!(leading_within([1.0; 25], None), 25);
        assert_eq!(leading_within([], Some(10.0)), 0);
    }

    #[test]
    fn errors_and_whole_answers_teach_no_size() {
        let mut s = sized();
        assert!(
            !s.observe(ms(0), 50.0, 0.0, true, false),
            "a 400: nothing admitted"
        );
        assert!(!s.observe(ms(1), 50.0, 50.0, false, false));
        assert_eq!(s.limit(), None);
    }
}
