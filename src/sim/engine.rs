//! The event loop of `ingest sim`: one strategy, many uncoordinated clients,
//! one server, in virtual time (nothing sleeps). Each client runs the worker's
//! write loop: `before_call`, pace the attempt's cost at the strategy's rate
//! (the worker's [`Pacer`] on governor's fake clock), send, and after the
//! answer `after_attempt`, then wait the delay it returns before the retry of
//! what is left or the next request.
//!
//! A client writes `in_flight` batches at once, as a worker writes up to
//! `max_in_flight_batches` (each a lane here), with one strategy and one
//! pacer. As in the worker, a request takes the pacer's turn before it is
//! composed and holds it while its cost is paced (and, while the strategy
//! probes, until its answer): the other lanes wait for the turn in order.
//!
//! With `clients.keys`, each item has a partition key, and a client makes
//! and reads its requests as the writer does ([`request`]): hot keys' items
//! go as the hot range's pace ([`HotKeys`]) lets them, then cold ones in
//! the room left; which keys are hot is read again as the request leaves;
//! an answer is read item by item for the hot range and for the table's
//! strategy. A lane whose items are all hot and none due gives the pacer's
//! turn on and comes back for it when one is.
//!
//! Events are ordered by (time, sequence number), and every random draw comes
//! from a generator seeded by (scenario seed, client), so a run is a pure
//! function of the scenario: the same scenario and seed give the same numbers,
//! and every strategy sees the same workload.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::num::NonZeroU32;
use std::time::Duration;

use governor::clock::FakeRelativeClock;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::throttle::adaptive::size::leading_within;
use crate::throttle::control::{slots_and_burst, Throttled, REMAINING_WINDOW};
use crate::throttle::hot::HotKeys;
use crate::throttle::pace::Pacer;
use crate::throttle::request::{self, Reading};
use crate::throttle::window::AcceptedWindow;
use crate::throttle::{Feedback, PeerLesson, Strategy, StrategyConfig};

use super::scenario::{Dist, Keys, Scenario, Workload};
use super::server::Server;

/// One attempt, as the trace and the charts show it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Attempt {
    pub client: u32,
    /// When it was sent, seconds.
    pub t_s: f64,
    /// The wait before it (the strategy's delay plus the pacer's), seconds.
    pub wait_s: f64,
    pub units: f64,
    pub accepted_units: f64,
    pub throttled: bool,
    pub remaining: Option<f64>,
    /// Which of the strategy's rules read the answer (None: not the table's
    /// to read, only paced hot keys were refused; or the strategy does not
    /// say), and its rate after it: as the worker's `answer_read` event.
    pub rule: Option<&'static str>,
    pub rate: Option<f64>,
}

/// What one run produced.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    pub attempts: Vec<Attempt>,
    /// Per client: (attempts, throttled attempts).
    pub per_client: Vec<(u64, u64)>,
    pub accepted_units: f64,
    pub offered_units: f64,
    pub items_written: u64,
    /// Clear probe: when the last client stopped (None: not within the run).
    pub cleared_at: Option<Duration>,
    /// With partitions: what the busiest partition admitted over its
    /// maximum x the run's length.
    pub busiest_partition_use: Option<f64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Step {
    NewRequest,
    Pace,
    Arrive,
    Answer,
}

/// One batch in flight.
#[derive(Default)]
struct Lane {
    /// Costs of the items still to write.
    pending: Vec<f64>,
    /// Their keys (with `clients.keys`; else empty).
    keys: Vec<u32>,
    /// Which of the items this attempt carries had hot keys as it left.
    hot_sent: Vec<bool>,
    /// How many of them (the leading ones) this attempt carries.
    sending: usize,
    /// Units of this attempt still to take from the pacer (None: not started).
    to_pace: Option<u32>,
    wait_from: Duration,
    sent_at: Duration,
    latency: Duration,
    answer: Option<super::server::Answer>,
}

struct Client {
    /// Its index among the scenario's clients.
    index: usize,
    strategy: Box<dyn Strategy>,
    pacer: Pacer<FakeRelativeClock>,
    rng: SmallRng,
    start: Duration,
    lanes: Vec<Lane>,
    /// The lane holding the pacer's turn, and the lanes waiting for it.
    turn: Option<usize>,
    waiting: VecDeque<usize>,
    /// Clear probe: this client stopped.
    stopped: bool,
    window: AcceptedWindow,
    /// Its share of the capacity, when told (1 / its job's clients, times
    /// its job's part among the jobs it knows of).
    share: Option<f64>,
    /// Its part of the time slots, with a share (its job's tiling, placed
    /// in its job's segment).
    slot_parts: Option<Vec<(f64, f64)>>,
    /// Its share of its job's work, and its part of its job's time slots.
    job_share: Option<f64>,
    job_slots: Option<Vec<(f64, f64)>>,
    /// The jobs it knows write the table, its own included.
    jobs: usize,
    /// The warm throughput it was told last (on-demand, no maximum).
    warm: Option<f64>,
    /// Its hot keys, paced apart (with `clients.keys` and `hot_keys`).
    hot: Option<HotKeys>,
    attempts: u64,
    throttled: u64,
}

impl Client {
    /// Its pacer follows its strategy's rate (strategies that pace by one).
    fn steer(&mut self) {
        if let Some(r) = self.strategy.rate() {
            let (slots, burst) = slots_and_burst(&*self.strategy, self.slot_parts.as_deref());
            self.pacer.steer(Some(r), burst, slots);
        }
    }
}

/// How the run ends.
#[derive(Debug, Clone, Copy)]
pub enum Mode {
    /// The scenario's own run, for `duration_s`.
    Main,
    /// The time-to-clear probe: clients stop at the threshold.
    Clear,
}

/// The items' keys: their names (as the hot range knows keys), their
/// partitions, and the draw. Key 0 is the hot key (`hot_share` of the
/// items); keys 1 to `count` follow a Zipf law.
struct KeySpace {
    names: Vec<String>,
    partitions: Vec<usize>,
    /// The Zipf law's cumulative weights, keys 1 to `count`.
    cdf: Vec<f64>,
    hot_share: f64,
    /// With routed keys, what each client owns.
    owned: Option<Vec<Owned>>,
}

/// A client's routed keys.
struct Owned {
    keys: Vec<u32>,
    /// Their cumulative weights (the hot key's `hot_share`, a Zipf key's
    /// the rest of its law's).
    cdf: Vec<f64>,
    /// Its part of its job's records: what its keys weigh over what the
    /// job's clients' keys weigh.
    share: f64,
}

impl KeySpace {
    fn new(k: &Keys, server: &Server, sc: &Scenario) -> Self {
        let mut names = vec!["hot".to_string()];
        names.extend((1..=k.count).map(|i| format!("k{i}")));
        let partitions = names.iter().map(|n| server.partition_of(n)).collect();
        let mut total = 0.0;
        let cdf: Vec<f64> = (1..=k.count)
            .map(|r| {
                total += 1.0 / (r as f64).powf(k.zipf_s);
                total
            })
            .collect();
        let owned = k.routed.then(|| {
            let weight = |key: usize| match key {
                0 => k.hot_share,
                r => (1.0 - k.hot_share) * (1.0 / (r as f64).powf(k.zipf_s)) / total,
            };
            let n = sc.clients.count;
            let lists: Vec<(Vec<u32>, Vec<f64>)> = (0..n)
                .map(|i| {
                    let group = sc.group_of(i);
                    let size = sc.group_size(group) as u64;
                    let rank = (0..i).filter(|j| sc.group_of(*j) == group).count() as u64;
                    let mut acc = 0.0;
                    names
                        .iter()
                        .enumerate()
                        .filter(|(_, name)| route(name) % size == rank)
                        .map(|(key, _)| {
                            acc += weight(key);
                            (key as u32, acc)
                        })
                        .unzip()
                })
                .collect();
            let weighs = |i: usize| lists[i].1.last().copied().unwrap_or(0.0);
            let shares: Vec<f64> = (0..n)
                .map(|i| {
                    let group = sc.group_of(i);
                    let job: f64 = (0..n)
                        .filter(|j| sc.group_of(*j) == group)
                        .map(weighs)
                        .sum();
                    if job > 0.0 {
                        weighs(i) / job
                    } else {
                        0.0
                    }
                })
                .collect();
            lists
                .into_iter()
                .zip(shares)
                .map(|((keys, cdf), share)| Owned { keys, cdf, share })
                .collect()
        });
        Self {
            names,
            partitions,
            cdf,
            hot_share: k.hot_share,
            owned,
        }
    }

    /// The names of these keys.
    fn named<'a>(&'a self, keys: &'a [u32]) -> impl Iterator<Item = &'a str> {
        keys.iter().map(|k| self.names[*k as usize].as_str())
    }

    /// With routed keys, client `i`'s part of its job's records.
    fn share(&self, i: usize) -> Option<f64> {
        self.owned.as_ref().map(|o| o[i].share)
    }

    /// Whether client `i` has records at all (routed keys: it owns a key).
    fn has_records(&self, i: usize) -> bool {
        self.owned.as_ref().is_none_or(|o| !o[i].keys.is_empty())
    }

    /// A key of client `i`'s next record.
    fn draw(&self, i: usize, rng: &mut SmallRng) -> u32 {
        if let Some(owned) = &self.owned {
            let Owned { keys, cdf, .. } = &owned[i];
            let x = rng.random::<f64>() * cdf.last().copied().unwrap_or(0.0);
            return keys[cdf.partition_point(|c| *c < x).min(keys.len() - 1)];
        }
        if self.hot_share > 0.0 && rng.random::<f64>() < self.hot_share {
            return 0;
        }
        let total = self.cdf.last().copied().unwrap_or(0.0);
        let x = rng.random::<f64>() * total;
        (self.cdf.partition_point(|c| *c < x).min(self.cdf.len() - 1) + 1) as u32
    }
}

/// The client slot a key's records go to, as Kafka's partitioner hashes a
/// record's key to a partition (FNV-1a of the name, salted so that it does
/// not follow the table's partitions, which hash the bare name).
fn route(name: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in "kafka:".bytes().chain(name.bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

fn draw(d: &Dist, rng: &mut SmallRng) -> f64 {
    match d {
        Dist::Fixed(v) => *v,
        Dist::Choice(v) => v[rng.random_range(0..v.len())],
        Dist::Uniform { min, max } if max > min => rng.random_range(*min..=*max),
        Dist::Uniform { min, .. } => *min,
    }
}

/// Mixes the scenario seed with a client index (splitmix64).
pub fn seed_for(seed: u64, client: u64) -> u64 {
    let mut z = seed
        .wrapping_add(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(client.wrapping_mul(0xBF58_476D_1CE4_E5B9));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Runs one strategy through the scenario (`hot_keys`: keys a key range
/// refuses are paced apart, with `clients.keys`).
pub fn run(sc: &Scenario, strategy: &StrategyConfig, hot_keys: bool, mode: Mode) -> Outcome {
    let clock = FakeRelativeClock::default();
    let mut clock_at = Duration::ZERO;
    let mut run = Run::new(sc, mode);
    let mut clients: Vec<Client> = (0..sc.clients.count)
        .map(|i| run.client(i, strategy, hot_keys, &clock))
        .collect();
    for lane in 0..sc.clients.in_flight {
        for (i, cl) in clients.iter().enumerate() {
            // A client that owns no routed key has no records to write.
            if run.keys.as_ref().is_none_or(|ks| ks.has_records(i)) {
                run.push(cl.start, (i, lane), Step::NewRequest);
            }
        }
    }
    let end = Duration::from_secs_f64(sc.duration_s);
    // Peers' lessons: (due, client, lesson), with `clients.lessons_ms`.
    let lessons_after = (sc.clients.lessons_ms >= 0.0)
        .then(|| Duration::from_secs_f64(sc.clients.lessons_ms / 1e3));
    // Jobs split the table once they hear each other (each job's first
    // client's start, plus the lessons' delay).
    let jobs = (sc.clients.split_jobs && sc.clients.know_share && sc.clients.groups > 1)
        .then_some(lessons_after)
        .flatten()
        .map(|after| {
            let first: Vec<Duration> = (0..sc.clients.groups)
                .map(|g| {
                    clients
                        .iter()
                        .filter(|c| sc.group_of(c.index) == g)
                        .map(|c| c.start)
                        .min()
                        .unwrap_or_default()
                })
                .collect();
            (first, after)
        });
    if let Some((first, after)) = &jobs {
        for cl in clients.iter_mut() {
            let at = cl.start;
            run.split_jobs(cl, first, *after, at);
        }
    }
    let mut lessons: Vec<(Duration, usize, PeerLesson)> = Vec::new();
    let mut next_beat = crate::throttle::jobs::BEAT;
    while let Some(Reverse((t, _, id, step))) = run.queue.pop() {
        if t > end {
            break;
        }
        if t > clock_at {
            clock.advance(t - clock_at);
            clock_at = t;
        }
        // Beats go out with the lessons topic, where jobs split (as the
        // worker's `split_with_jobs`).
        if lessons_after.is_some() && sc.clients.split_jobs && t >= next_beat {
            job_beat(sc, &mut clients, t);
            next_beat = t + crate::throttle::jobs::BEAT;
        }
        let cl = &mut clients[id.0];
        if cl.stopped {
            continue;
        }
        if !lessons.is_empty() {
            run.hear_lessons(cl, &mut lessons, id.0, t);
        }
        if let Some((first, after)) = &jobs {
            run.split_jobs(cl, first, *after, t);
        }
        let was_answer = matches!(step, Step::Answer);
        let next = match step {
            Step::NewRequest => run.new_request(cl, id.1, t),
            Step::Pace => run.pace(cl, id, t),
            Step::Arrive => run.arrive(cl, id.1, t),
            Step::Answer => run.answer(cl, id, t),
        };
        if let (Some(after), true) = (lessons_after, was_answer) {
            // A lesson the answer taught goes to the client's job.
            if let Some(lesson) = clients[id.0].strategy.taught() {
                let job = sc.group_of(id.0);
                for j in (0..sc.clients.count).filter(|j| *j != id.0 && sc.group_of(*j) == job) {
                    lessons.push((t + after, j, lesson));
                }
            }
        }
        match next {
            Next::At(at, step) => run.push(at, id, step),
            Next::Waiting | Next::Stopped => {}
            Next::AllStopped => break,
        }
    }
    let mut out = run.out;
    let (accepted, offered) = run.server.totals(end);
    out.accepted_units = accepted;
    out.offered_units = offered;
    out.busiest_partition_use = run.server.busiest_partition_use(end);
    out.per_client = clients.iter().map(|c| (c.attempts, c.throttled)).collect();
    out
}

/// Each client hears its job's beats, as workers do (`jobs::Jobs::job_part`):
/// its part of what the job's clients that started pace the table at, by
/// share; none alone, or with no share known.
fn job_beat(sc: &Scenario, clients: &mut [Client], t: Duration) {
    for g in 0..sc.clients.groups.max(1) {
        let mine = |c: &&mut Client| sc.group_of(c.index) == g && !c.stopped && c.start <= t;
        let (paced, shares, n) =
            clients
                .iter_mut()
                .filter(mine)
                .fold((0.0, 0.0, 0), |(p, s, n), c| {
                    let r = c.strategy.rate().unwrap_or(0.0);
                    (p + r, s + c.share.unwrap_or(0.0), n + 1)
                });
        for c in clients.iter_mut().filter(mine) {
            let part = c
                .share
                .filter(|s| n > 1 && *s > 0.0 && shares > 0.0)
                .map(|s| paced * s / shares);
            c.strategy.job_part(t, part);
            c.steer();
        }
    }
}

/// A client (and lane) to resume: (time, sequence, (client, lane), step).
type Event = (Duration, u64, (usize, usize), Step);

/// What a client does after an event.
enum Next {
    At(Duration, Step),
    /// Waiting for the pacer's turn (woken when it is handed on).
    Waiting,
    /// Clear probe: this client stopped.
    Stopped,
    /// Clear probe: the last client stopped.
    AllStopped,
}

/// One run's shared state: the server, the event queue and the outcome.
struct Run<'a> {
    sc: &'a Scenario,
    mode: Mode,
    server: Server,
    /// The bucket size the server's reported level is a fraction of.
    bucket_size: f64,
    burst: NonZeroU32,
    queue: BinaryHeap<Reverse<Event>>,
    seq: u64,
    stopped: usize,
    out: Outcome,
    /// The items' keys (with `clients.keys`).
    keys: Option<KeySpace>,
}

impl<'a> Run<'a> {
    fn new(sc: &'a Scenario, mode: Mode) -> Self {
        let (server, bucket_size) = match (mode, &sc.clear) {
            (Mode::Clear, Some(cl)) => (Server::preloaded(cl.requests), cl.requests),
            _ => (
                Server::new(&sc.server, sc.reports_remaining()),
                sc.server.capacity.unwrap_or(sc.server.refill_per_s),
            ),
        };
        let c = &sc.clients;
        let keys = c.keys.as_ref().map(|k| KeySpace::new(k, &server, sc));
        Run {
            sc,
            mode,
            keys,
            server,
            bucket_size,
            burst: NonZeroU32::new(c.pacing_burst.max(1)).expect(">= 1"),
            queue: BinaryHeap::new(),
            seq: 0,
            stopped: 0,
            out: Outcome::default(),
        }
    }

    fn push(&mut self, t: Duration, id: (usize, usize), step: Step) {
        self.seq += 1;
        self.queue.push(Reverse((t, self.seq, id, step)));
    }

    /// Client `i`, its strategy primed and hinted as the scenario says.
    fn client(
        &self,
        i: usize,
        strategy: &StrategyConfig,
        hot_keys: bool,
        clock: &FakeRelativeClock,
    ) -> Client {
        let (sc, c) = (self.sc, &self.sc.clients);
        let mut rng = SmallRng::seed_from_u64(seed_for(sc.seed, i as u64));
        let start = if c.stagger_s > 0.0 {
            Duration::from_secs_f64(rng.random_range(0.0..c.stagger_s))
        } else {
            Duration::ZERO
        };
        let mut strategy = strategy.build(seed_for(sc.seed ^ 0x5EED, i as u64));
        if let (Mode::Clear, Some(cl)) = (self.mode, &sc.clear) {
            let mean_units = c.cost.mean().ceil() * c.items as f64;
            strategy.prime(Duration::from_secs_f64(cl.start_sleep_s), mean_units);
        }
        let group = sc.group_of(i);
        // Its share of its job's work: an even one, or with routed keys its
        // part of the job's records (as a worker's share by backlog is).
        let share_of = |j: usize| {
            self.keys
                .as_ref()
                .and_then(|ks| ks.share(j))
                .unwrap_or(1.0 / sc.group_size(group) as f64)
        };
        let share = c.know_share.then(|| share_of(i));
        // Its part of its job's time slots, as a worker's partitions give
        // it: after the parts of the job's clients before it.
        let slot_parts = share.map(|w| {
            let at: f64 = (0..i)
                .filter(|j| sc.group_of(*j) == group)
                .map(share_of)
                .sum();
            vec![(at, at + w)]
        });
        let warm = if c.know_capacity {
            let (capacity, warm) = self.server.described();
            strategy.hint(capacity, share);
            strategy.warm(warm);
            warm
        } else {
            None
        };
        let rate = strategy.rate().or(c.pacing_rate);
        // Only the clocks' differences matter: each is ahead by 0-2x the
        // skew (drawn apart from the client's other draws, which a skew
        // then leaves as they were).
        let skew = if c.clock_skew_ms > 0.0 {
            let mut r = SmallRng::seed_from_u64(seed_for(sc.seed ^ 0xC10C, i as u64));
            Duration::from_secs_f64(r.random_range(0.0..2.0 * c.clock_skew_ms) / 1e3)
        } else {
            Duration::ZERO
        };
        Client {
            index: i,
            pacer: Pacer::with_clock(rate, self.burst, clock.clone()).with_wall_offset(skew),
            strategy,
            rng,
            start,
            lanes: (0..c.in_flight)
                .map(|_| Lane {
                    wait_from: start,
                    sent_at: start,
                    ..Lane::default()
                })
                .collect(),
            turn: None,
            waiting: VecDeque::new(),
            stopped: false,
            window: AcceptedWindow::new(REMAINING_WINDOW),
            share,
            job_share: share,
            job_slots: slot_parts.clone(),
            slot_parts,
            jobs: 1,
            warm,
            hot: (c.keys.is_some() && hot_keys).then(|| {
                let mut h = HotKeys::default();
                h.share(share);
                h
            }),
            attempts: 0,
            throttled: 0,
        }
    }

    /// A new batch on `lane`, unless the workload is idle now.
    fn new_request(&self, cl: &mut Client, lane: usize, t: Duration) -> Next {
        let c = &self.sc.clients;
        if let Workload::Cycle { busy_s, idle_s } = c.workload {
            let period = busy_s + idle_s;
            let into = (t.saturating_sub(cl.start)).as_secs_f64() % period;
            if into >= busy_s {
                let resume = t + Duration::from_secs_f64(period - into);
                cl.lanes[lane].wait_from = resume;
                return Next::At(resume, Step::NewRequest);
            }
        }
        cl.lanes[lane].pending = (0..c.items)
            .map(|_| draw(&c.cost, &mut cl.rng).ceil())
            .collect();
        if let Some(ks) = &self.keys {
            cl.lanes[lane].keys = (0..c.items)
                .map(|_| ks.draw(cl.index, &mut cl.rng))
                .collect();
        }
        let d = cl.strategy.before_call(t);
        Next::At(t + d, Step::Pace)
    }

    /// Hands the pacer's turn on from the lane holding it to the next
    /// waiting lane, which goes on at `t`.
    fn hand_on(&mut self, cl: &mut Client, client: usize, t: Duration) {
        cl.turn = None;
        if let Some(next) = cl.waiting.pop_front() {
            self.push(t, (client, next), Step::Pace);
        }
    }

    /// Takes the pacer's turn, composes the attempt, takes its units from
    /// the pacer, then sends it.
    fn pace(&mut self, cl: &mut Client, id: (usize, usize), t: Duration) -> Next {
        let (client, lane) = id;
        match cl.turn {
            Some(holder) if holder != lane => {
                cl.waiting.push_back(lane);
                return Next::Waiting;
            }
            _ => cl.turn = Some(lane),
        }
        let l = &mut cl.lanes[lane];
        let mut left = match l.to_pace {
            Some(left) => left,
            None => {
                let limit = cl.pacer.request_limit(cl.strategy.max_request_units());
                match (cl.hot.as_mut(), &self.keys) {
                    (Some(h), Some(ks)) => {
                        // As the writer composes: hot keys' items as their
                        // range's pace lets them go, then cold ones.
                        let hot = h.which_hot(ks.named(&l.keys));
                        let pending = &l.pending;
                        let (send, rest, wait) =
                            request::compose(pending, &hot, limit, |i| h.admit(t, pending[i]));
                        if send.is_empty() {
                            // Only hot items, none due: the turn goes on,
                            // and this lane comes back for it then.
                            self.hand_on(cl, client, t);
                            return Next::At(t + wait, Step::Pace);
                        }
                        l.hot_sent = send.iter().map(|&i| hot[i]).collect();
                        let order: Vec<usize> = send.iter().chain(&rest).copied().collect();
                        l.sending = send.len();
                        l.pending = order.iter().map(|&i| l.pending[i]).collect();
                        l.keys = order.iter().map(|&i| l.keys[i]).collect();
                    }
                    _ => l.sending = leading_within(l.pending.iter().copied(), limit),
                }
                l.pending[..l.sending].iter().sum::<f64>().ceil() as u32
            }
        };
        while left > 0 {
            match cl.pacer.check(left) {
                Ok(n) => left -= n,
                Err(w) => {
                    l.to_pace = Some(left);
                    return Next::At(t + w, Step::Pace);
                }
            }
        }
        l.to_pace = None;
        l.sent_at = t;
        // Hot as the request leaves, as the writer reads it: keys may have
        // turned hot while it waited at the pacer (another lane's answer).
        if let (Some(h), Some(ks)) = (cl.hot.as_ref(), &self.keys) {
            l.hot_sent = h.which_hot(ks.named(&l.keys[..l.sending]));
        }
        let latency_ms = draw(&self.sc.clients.latency_ms, &mut cl.rng);
        l.latency = Duration::from_secs_f64(latency_ms / 1e3);
        let arrive = t + l.latency / 2;
        cl.attempts += 1;
        // The first request keeps the turn until its answer is heard.
        if !cl.strategy.probing() {
            self.hand_on(cl, client, t);
        }
        Next::At(arrive, Step::Arrive)
    }

    /// A lane's request reaches the server at `t`: the server answers it
    /// now; the client hears the answer a round trip after it was sent.
    fn arrive(&mut self, cl: &mut Client, lane: usize, t: Duration) -> Next {
        let l = &mut cl.lanes[lane];
        let parts: Vec<usize> = match &self.keys {
            Some(ks) => l.keys[..l.sending]
                .iter()
                .map(|k| ks.partitions[*k as usize])
                .collect(),
            None => Vec::new(),
        };
        l.answer = Some(self.server.request(&l.pending[..l.sending], &parts, t));
        Next::At(l.sent_at + l.latency, Step::Answer)
    }

    /// Client `cl`'s part of the table among the jobs it knows of by `t`
    /// (those whose `first` client started before it, or `after` ago), as
    /// `throttle::jobs` splits it: even parts, segments in job order.
    fn split_jobs(&self, cl: &mut Client, first: &[Duration], after: Duration, t: Duration) {
        // Called at every event: nothing to do once every job is known.
        if cl.jobs == first.len() {
            return;
        }
        let mine = self.sc.group_of(cl.index);
        let known = |g: &usize| *g == mine || first[*g] <= cl.start || first[*g] + after <= t;
        let count = (0..first.len()).filter(known).count();
        if count == cl.jobs {
            return;
        }
        cl.jobs = count;
        cl.strategy.split_with_jobs(count > 1);
        let n = count as f64;
        let rank = (0..mine).filter(known).count() as f64;
        cl.share = cl.job_share.map(|s| s / n);
        cl.slot_parts = cl.job_slots.as_ref().map(|p| {
            p.iter()
                .map(|(a, b)| ((rank + a) / n, (rank + b) / n))
                .collect()
        });
        if let Some(h) = cl.hot.as_mut() {
            h.share(cl.share);
        }
        if self.sc.clients.know_capacity {
            let (capacity, _) = self.server.described();
            cl.strategy.hint(capacity, cl.share);
        }
        cl.steer();
    }

    /// Client `i` (`cl`) hears its peers' lessons due by `t`.
    fn hear_lessons(
        &self,
        cl: &mut Client,
        lessons: &mut Vec<(Duration, usize, PeerLesson)>,
        i: usize,
        t: Duration,
    ) {
        // In the order they fall due.
        while let Some(k) = (0..lessons.len())
            .filter(|k| lessons[*k].1 == i && lessons[*k].0 <= t)
            .min_by_key(|k| lessons[*k].0)
        {
            let (due, _, lesson) = lessons.swap_remove(k);
            if cl.strategy.peer_lesson(due, lesson) {
                cl.steer();
            }
        }
    }

    /// The answer: keep what is left, tell the strategy, record the attempt.
    fn answer(&mut self, cl: &mut Client, id: (usize, usize), t: Duration) -> Next {
        let (client, lane) = id;
        let c = &self.sc.clients;
        let l = &mut cl.lanes[lane];
        let a = l.answer.take().expect("an answer arrived");
        let sent = &l.pending[..l.sending];
        let units: f64 = sent.iter().sum();
        // What the hot range and the table's strategy hear, read item by
        // item as the writer reads an answer.
        let heard = match (&self.keys, cl.hot.as_mut()) {
            (Some(ks), hot) => {
                let items: Vec<request::Item<'_>> = (0..l.sending)
                    .map(|i| request::Item {
                        key: &ks.names[l.keys[i] as usize],
                        units: l.pending[i],
                        refused: !a.accepted[i],
                        hot: l.hot_sent.get(i).copied().unwrap_or(false),
                    })
                    .collect();
                let reading = if a.accepted.iter().any(|ok| *ok) {
                    Reading::Partial
                } else if a.key_range.iter().all(|k| *k) {
                    Reading::KeyRange
                } else {
                    Reading::Table
                };
                let mut read = request::read(&items, reading, hot.is_some(), |_| false, l.sent_at);
                match hot {
                    Some(h) => {
                        if let Some(mut range) = read.range.take() {
                            range.now = t;
                            range.probe = cl.strategy.probing();
                            range.table_rate =
                                cl.window.rate_so_far(t).max(cl.pacer.rate().unwrap_or(0.0));
                            h.answer(&range);
                        }
                        let holds = h.holds(t);
                        read.for_table(holds).map(|r| (r, holds))
                    }
                    None => read.for_table(false).map(|r| (r, false)),
                }
            }
            (None, _) => {
                let refused = a.accepted.iter().any(|ok| !*ok);
                let kind = if refused {
                    Throttled::Table
                } else {
                    Throttled::No
                };
                Some(((kind, units), false))
            }
        };
        let mut left: Vec<f64> = Vec::new();
        let mut left_keys: Vec<u32> = Vec::new();
        for i in 0..l.sending {
            if !a.accepted[i] {
                left.push(l.pending[i]);
                if let Some(k) = l.keys.get(i) {
                    left_keys.push(*k);
                }
            }
        }
        let throttled = !left.is_empty();
        left.extend_from_slice(&l.pending[l.sending..]);
        l.pending = left;
        if !l.keys.is_empty() {
            left_keys.extend_from_slice(&l.keys[l.sending..]);
            l.keys = left_keys;
        }
        cl.throttled += u64::from(throttled);
        self.out.items_written += a.accepted_items() as u64;
        let (capacity, warm) = if c.know_capacity {
            self.server.described()
        } else {
            (None, None)
        };
        if warm != cl.warm {
            // Re-read, as the worker re-reads DescribeTable.
            cl.warm = warm;
            cl.strategy.warm(warm);
        }
        // Refusals only of keys already paced apart are not the table's
        // (nor, as in the worker, is what was accepted then in its window).
        let (d, rule) = match heard {
            Some(((kind, sent_units), range_held)) => {
                let estimate = cl.window.remaining(t, a.accepted_units, capacity);
                let (throttled, key_range, range_read) = kind.flags();
                let fb = Feedback {
                    now: t,
                    throttled,
                    key_range,
                    range_read,
                    range_held,
                    parted: cl.hot.as_ref().is_some_and(|h| h.parted(t)),
                    accepted_units: a.accepted_units,
                    sent_units,
                    written_units: a.accepted_units,
                    remaining: a.remaining.or(estimate),
                    level_units: a.remaining.map(|r| r * self.bucket_size),
                    capacity,
                    share: cl.share,
                };
                (cl.strategy.after_attempt(&fb), cl.strategy.rule())
            }
            None => (Duration::ZERO, None),
        };
        cl.steer();
        if cl.turn == Some(lane) {
            // A probe's answer: the turn goes on.
            self.hand_on(cl, client, t);
        }
        let l = &mut cl.lanes[lane];
        self.out.attempts.push(Attempt {
            client: client as u32,
            t_s: l.sent_at.as_secs_f64(),
            wait_s: l.sent_at.saturating_sub(l.wait_from).as_secs_f64(),
            units,
            accepted_units: a.accepted_units,
            throttled,
            remaining: a.remaining,
            rule,
            rate: cl.strategy.rate(),
        });
        l.wait_from = t;
        if let Mode::Clear = self.mode {
            let stop_at = self.sc.clear.as_ref().map_or(0.0, |c| c.stop_at_remaining);
            let left = a.remaining.map_or(0.0, |r| r * self.bucket_size);
            if throttled || left <= stop_at {
                cl.stopped = true;
                self.stopped += 1;
                if self.stopped == c.count {
                    self.out.cleared_at = Some(t);
                    return Next::AllStopped;
                }
                return Next::Stopped;
            }
        }
        let next = if cl.lanes[lane].pending.is_empty() {
            Step::NewRequest
        } else {
            Step::Pace
        };
        Next::At(t + d, next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::throttle::hot::DECREASE;

    /// Two lanes, one key ("k1"), 2-unit items its 1-unit partition always
    /// refuses (the table has room); paced at 2 units/s, bursts of 2. The
    /// strategy does not probe, so the first lane hands the pacer's turn on
    /// as it sends.
    const HOT_AT_SEND: &str = r#"
        name = "hot-at-send"
        duration_s = 10
        [server]
        model = "dynamodb"
        refill_per_s = 1000
        partitions = 1
        partition_max_per_s = 1
        [clients]
        count = 1
        cost = 2
        items = 1
        latency_ms = 10.0
        pacing_rate = 2.0
        pacing_burst = 2
        in_flight = 2
        keys = { count = 1 }
        [[strategy]]
        name = "exponential"
    "#;

    /// The bench's hot range, keys routed to clients, two jobs of `n`.
    fn routed(n: usize) -> Scenario {
        let text = format!(
            r#"
            name = "routed"
            duration_s = 10
            [server]
            model = "dynamodb"
            refill_per_s = 150
            partitions = 4
            partition_max_per_s = 50
            [clients]
            count = {}
            groups = 2
            items = 25
            know_capacity = true
            know_share = true
            keys = {{ count = 1000, zipf_s = 1.1, hot_share = 0.3, routed = true }}
            [[strategy]]
            name = "adaptive"
            "#,
            2 * n
        );
        Scenario::parse(&text).unwrap()
    }

    #[test]
    fn routed_keys_go_each_to_one_client_of_each_job_and_shares_follow_the_records() {
        let sc = routed(3);
        let config = sc.entries().unwrap().remove(0).config;
        let clock = FakeRelativeClock::default();
        let run = Run::new(&sc, Mode::Main);
        let ks = run.keys.as_ref().unwrap();
        let owned = ks.owned.as_ref().unwrap();
        for job in 0..2 {
            let clients: Vec<usize> = (0..6).filter(|i| sc.group_of(*i) == job).collect();
            // Every key, the hot one too, belongs to exactly one client of
            // the job.
            for key in 0..=1000u32 {
                let owners = clients.iter().filter(|i| owned[**i].keys.contains(&key));
                assert_eq!(owners.count(), 1, "key {key} in job {job}");
            }
            let shares: Vec<f64> = clients
                .iter()
                .map(|i| run.client(*i, &config, true, &clock).share.unwrap())
                .collect();
            assert!(
                (shares.iter().sum::<f64>() - 1.0).abs() < 1e-9,
                "{shares:?}"
            );
            // The hot key's owner has its 30% and more: the largest share.
            let whale = clients
                .iter()
                .position(|i| owned[*i].keys.contains(&0))
                .unwrap();
            assert!(shares[whale] > 0.3, "{shares:?}");
            assert!(shares.iter().all(|s| *s <= shares[whale]), "{shares:?}");
            // Slot parts tile the period in the job's order, each as wide
            // as its share.
            let mut at = 0.0;
            for (k, i) in clients.iter().enumerate() {
                let parts = run.client(*i, &config, true, &clock).slot_parts.unwrap();
                assert_eq!(parts.len(), 1);
                assert!(
                    (parts[0].0 - at).abs() < 1e-9 && (parts[0].1 - at - shares[k]).abs() < 1e-9
                );
                at = parts[0].1;
            }
        }
        // A client draws only the keys it owns, the hot one in its part.
        let mut rng = SmallRng::seed_from_u64(7);
        let whale = (0..6).find(|i| owned[*i].keys.contains(&0)).unwrap();
        let draws: Vec<u32> = (0..20_000).map(|_| ks.draw(whale, &mut rng)).collect();
        assert!(draws.iter().all(|k| owned[whale].keys.contains(k)));
        let hot = draws.iter().filter(|k| **k == 0).count() as f64 / draws.len() as f64;
        // Its share is its part of the job's records, 30% of them the hot key's.
        let share = run.client(whale, &config, true, &clock).share.unwrap();
        assert!((hot - 0.3 / share).abs() < 0.02, "{hot} of {share}");
    }

    fn advance(clock: &FakeRelativeClock, now: &mut Duration, to: Duration) {
        if to > *now {
            clock.advance(to - *now);
            *now = to;
        }
    }

    /// The request reaches the server; returns when its answer is heard.
    fn arrive(run: &mut Run<'_>, cl: &mut Client, lane: usize, t: Duration) -> Duration {
        match run.arrive(cl, lane, t) {
            Next::At(heard, Step::Answer) => heard,
            _ => panic!("an answer follows an arrival"),
        }
    }

    #[test]
    fn a_key_turned_hot_while_a_request_waits_at_the_pacer_is_read_as_hot_when_it_leaves() {
        let sc = Scenario::parse(HOT_AT_SEND).unwrap();
        let config = sc.entries().unwrap().remove(0).config;
        let clock = FakeRelativeClock::default();
        let mut now = Duration::ZERO;
        let mut run = Run::new(&sc, Mode::Main);
        let mut cl = run.client(0, &config, true, &clock);
        for lane in 0..2 {
            assert!(matches!(
                run.new_request(&mut cl, lane, now),
                Next::At(t, Step::Pace) if t.is_zero()
            ));
            assert_eq!(cl.lanes[lane].keys, [1], "k1");
        }
        // Lane 0 takes the pacer's burst and leaves; lane 1 is composed
        // now, k1 not hot yet, and waits at the pacer.
        let Next::At(arrive0, Step::Arrive) = run.pace(&mut cl, (0, 0), now) else {
            panic!("lane 0 leaves at once");
        };
        let Next::At(mut paced, Step::Pace) = run.pace(&mut cl, (0, 1), now) else {
            panic!("lane 1 waits at the pacer");
        };
        // Lane 0's answer: k1's partition refused it, the table had room:
        // k1 turns hot, and the table's strategy hears it (not hot as it left).
        let heard0 = arrive(&mut run, &mut cl, 0, arrive0);
        assert!(
            heard0 < paced,
            "answered while lane 1 waits: {heard0:?}, {paced:?}"
        );
        advance(&clock, &mut now, heard0);
        run.answer(&mut cl, (0, 0), heard0);
        let hot = cl.hot.as_ref().expect("hot keys paced apart");
        assert!(hot.is_hot("k1"));
        let found = hot.rate().expect("a hot range found");
        assert_eq!(cl.strategy.metrics().went_up, 1);
        // Lane 1 leaves once the pacer lets it, k1 hot by then.
        let arrive1 = loop {
            advance(&clock, &mut now, paced);
            match run.pace(&mut cl, (0, 1), paced) {
                Next::At(t, Step::Pace) => paced = t,
                Next::At(t, Step::Arrive) => break t,
                _ => panic!("lane 1 holds the pacer's turn"),
            }
        };
        let heard1 = arrive(&mut run, &mut cl, 1, arrive1);
        advance(&clock, &mut now, heard1);
        run.answer(&mut cl, (0, 1), heard1);
        // k1 refused again: the refusal of a key hot as the request left is
        // the hot range's (it cuts it), not the table's (its strategy does
        // not hear it). Read as of composing, it was a new key's: the table
        // slowed again, and the range was not cut.
        assert_eq!(
            cl.strategy.metrics().went_up,
            1,
            "the table's strategy heard a hot key's refusal as a throttle"
        );
        let rate = cl.hot.as_ref().unwrap().rate().unwrap();
        assert!(
            (rate - DECREASE * found).abs() < 1e-9,
            "the hot range was not cut: {rate} after {found}"
        );
        assert_eq!(cl.lanes[1].hot_sent, [true], "k1 hot as lane 1 left");
        // The trace cannot tell: both attempts are throttled either way.
        assert_eq!(run.out.attempts.len(), 2);
        assert!(run.out.attempts.iter().all(|a| a.throttled));
    }
}
