//! `adaptive`: this project's throttle controller. It steers a pacing rate (in
//! capacity units per second) instead of sleeping after failures.
//!
//! - **Decrease, once per congestion event.** On a throttle (an error or any
//!   unprocessed item), the rate drops to `decrease` x the lower of the current
//!   rate and the rate the server actually *accepted* over the last `window`
//!   (from ConsumedCapacity). At saturation the accepted rate is this client's
//!   real share, so after a sudden drop the rate lands near the new share
//!   within a few events. Further throttles within `cooldown` belong to the
//!   same event and are ignored. The first event, met at the fair share
//!   of a known capacity, cuts by `first_decrease` (half) instead: the
//!   table has less free than the group's share by an amount nothing tells
//!   (two equal jobs meet at twice what it takes); not where the table has
//!   shown it admits at once under a quarter second of its capacity and
//!   under half the largest request this client sent (`shown_shallow`:
//!   peers' requests meeting in a small bucket), nor where key ranges
//!   refused some of the answer (`Feedback::range_read`), nor where the
//!   table is split with other busy ingest jobs
//!   (`Strategy::split_with_jobs`): the share leaves them their parts
//!   already, and a throttle at it is the bucket run low, not a writer as
//!   large as the job; nor does a peer's first meeting halve it then (`ingest sim`, seeds
//!   1-8, two jobs of three: 97.4-97.8% of the table used instead of
//!   95.7-96.8%, 0.15% of requests throttled instead of 0.14%).
//!   Except when only key ranges refused keys
//!   the hot range did not pace yet while it held others back
//!   (`Feedback::key_range`): the accepted rate is then the hot range's
//!   pace, so the cut is `decrease` x the rate, and it neither settles the
//!   rate nor teaches a request size or time slots. And whenever the hot
//!   range held records back lately (`Feedback::range_held`), what was
//!   accepted is partly its pace: a throttle then cuts from the rate, not
//!   the accepted rate, and does not count toward a settle. (Six workers on
//!   the hot range's 1,000 WCU/s table: the worker with the hottest key
//!   cut its table rate from 298 to 29 units/s, the range's pace then, and
//!   stayed settled at 14-29 for 60 s, under its range's own 43: the job
//!   took 2.10x the bound.)
//! - **Recover like CUBIC.** After a decrease, the rate climbs back toward the rate
//!   of the last event (`w_max`), concave, reaching it after `probe_s` seconds. It
//!   stays near it for a while, then probes beyond it, convex. Many independent
//!   clients converge to fair shares (AIMD), and throttles stay rare because
//!   most of the cycle is spent just under the limit.
//! - **Follow the expected share.** When the feedback carries the table's
//!   provisioned capacity (DescribeTable, which auto scaling updates) and this
//!   client's share of it (its share of the consumer group's partitions), the
//!   client starts at `target_fraction` x capacity x share. A larger
//!   capacity scales the rate and `w_max` up by the same ratio, a smaller one
//!   puts the rate at the new share and caps `w_max` there (throttles have
//!   usually cut them already, and the drop explains those throttles),
//!   and forgets what throttles taught; unless the table showed another
//!   writer lately: its traffic stays where it was, so the rate goes to the
//!   share of what the new capacity leaves it, and on a drop what throttles
//!   taught is kept (`STEP_FLOOR`). A new share (the same capacity)
//!   scales them by its ratio both ways and keeps what was taught: the
//!   group's work is spread anew over the same table. Every worker does the
//!   same, so the fleet follows a capacity step or a worker joining,
//!   leaving or finishing at once. By default (`cap_at_share`) the share is also a cap:
//!   a client never paces above target x capacity x share, so busy peers
//!   never collide (measured with `ingest sim`: 0 throttles instead of 5-6%
//!   at 3 and 20 workers). The price is that an idle peer's capacity is not
//!   claimed; with `cap_at_share = false` it is found by probing. Without a
//!   known share, one client never paces above `target_fraction` x capacity.
//! - **Back to the fair share soon.** Below the expected share (target x
//!   capacity x share) the rate climbs back linearly, one decrease's worth
//!   per `fast_recovery_s`: a throttle there is a transient (peers starting,
//!   bursts coinciding), not less capacity. On a shallow table (one that has
//!   shown it admits at once less than `SHALLOW_S` of its capacity) it is
//!   back at the share within `fast_recovery_s` of the cut however deep the
//!   cut was: partial answers there pull the accepted rate, and so the cut,
//!   far down, and peers' requests meeting keep cutting; unless the rate
//!   settled within `settle_max_s` (another writer, below).
//!   Above the share,
//!   CUBIC probes slowly.
//! - **Unless throttles there repeat.** A second congestion event at or
//!   below the fair share within `settle_s` of the first says the table has
//!   less free than the share: another writer (the live application, a
//!   second job) or a hot key range. Climbing straight back would meet it
//!   again every few seconds, so the rate settles: no fast recovery until
//!   `settle_s` passes without such an event (or the capacity
//!   changes); it climbs back over `settle_probe_s` to just under the level
//!   of the last event (`target_fraction` x it) and cuts by
//!   `settle_decrease`, so the table's bucket (which the other writer keeps
//!   low) fills again. Each settle after the first lasts twice as long, up
//!   to `settle_max_s`: a writer that stays teaches the controller to stay
//!   under it. Not when the server has shown it admits less than a quarter
//!   second of the share at once: there throttles below the share are
//!   requests meeting peers' in a shallow bucket, which fast recovery
//!   handles better; unless the throttles are many (`watch_load`: more than
//!   8% of 100 answers twice running), which says the table has less free
//!   than the shares whatever its bucket, or the job is kept together far
//!   under its shares (`SETTLE_HELD_UNDER`: a bucket another writer keeps
//!   low admits little at once too), until a settle there fails
//!   (`SETTLE_FAILED`: throttles that follow the rate down say the bucket
//!   is small after all; not a settle begun in the first `settle_s`, while
//!   the job comes down from its shares). Nor when the table gave this
//!   client its share lately (`given_share`: it accepted 90% of it over
//!   the last `settle_s`, having run that long, and under 3% of its
//!   answers were throttled): a
//!   throttle there is peers' requests meeting now and then in a bucket of
//!   a tenth to half a second, which no other writer explains.
//!   For as long again after a settle ends there is still no
//!   fast recovery: the rate probes as CUBIC does over `settle_probe_s`, so
//!   a writer that stays is met less often, and one that left is found again
//!   within minutes. (`ingest sim`, seeds 1, 3, 5: neighbour.toml 2.0-2.2%
//!   throttled instead of 1.7-2.6% at the same utilization; two-jobs 2.1-2.4x
//!   the ideal request count on two seeds, 12x on one, instead of 15x. A
//!   memory of `settle_max_s` instead throttled less under a steady neighbour
//!   (1.6-1.8%) but left an on-demand table that is still ramping up at
//!   70-80% utilization instead of 95-96%.)
//! - **Collisions are not a rate signal.** Below `COLLISION_BELOW` of its
//!   fair share, on a table that admits at once less than a tenth of a
//!   second of its capacity (the table's shape where peers keep to time
//!   slots), a throttle cuts nothing unless it names a hard ceiling
//!   (below): out of the slots, peers' requests
//!   meet this client's whatever its rate, and cutting on them spiralled
//!   one client of six down to a few percent of its share.
//! - **Hard ceilings.** A throttle that names an account limit or the
//!   table's on-demand maximum (`ceiling`) caps the rate at
//!   `target_fraction` x the rate the server accepted then, for
//!   `settle_max_s` or until the capacity changes: probing cannot
//!   move such a limit, only meet it again.
//! - **Slow start.** Before the first congestion event, with no capacity known
//!   (on-demand tables), the rate doubles every second while it is used,
//!   from `start_rate`. When the table reports a warm throughput
//!   (DescribeTable's `WarmThroughput`: what it takes at once, twice its
//!   previous peak), the rate starts at the share of it (x
//!   `target_fraction`) and does not double past it: it climbs on as after
//!   a cut to that level. A higher warm throughput later (the table scaled)
//!   scales the rate by as much, as a larger capacity does.
//! - **Never inflate when idle.** The rate grows only while the client uses most
//!   of it (accepted >= half the rate over the window).
//! - **Keep a cushion, when the server shows its bucket** ([`cushion`]).
//! - **Start spread out.** Before its first call a client waits a random
//!   fraction of `start_splay` periods of one unit at its starting rate
//!   (capacity x share x `target_fraction`, or capacity x `cushion_start`
//!   when the share is unknown), as a pacer started at a random phase would.
//!   A fleet started at one instant then reaches the server spread over one
//!   period instead of all at once (Heroku's 10 clients: 2 throttles instead
//!   of 10, measured with `ingest sim`). At a worker's share of a DynamoDB
//!   table the period is milliseconds.
//!
//! - **Learn from peers.** A job's workers share two lessons through a
//!   Kafka topic (`crate::lessons`): the first halving at the fair share,
//!   and each settled cut met under `LESSON_BELOW` of the share. A
//!   worker that met nothing yet and runs at its share halves on a peer's
//!   first meeting as if it had met the table itself; on a peer's settle it
//!   settles too (two events of its own), without a cut, unless the table
//!   has shown it admits less than
//!   `LESSON_DEEP_S` of its share at once (peers' requests meeting there
//!   settle workers now and then; taught to each other, those settles held
//!   workers low for minutes). A lesson heard is never taught on.
//! - **Keep the job together** (`keep_together`, on by default). Where other
//!   writers' throttles came lately
//!   and the job as a whole paces under `JOB_UNDER` of its shares, a worker
//!   paces within `JOB_BELOW`-`JOB_ABOVE` of its part of the job's pace
//!   (from the job's beats: `Strategy::job_part`), so that no worker
//!   starves while its peers take what is free. A worker alone in its job
//!   is its job: its part is what the table accepted of it lately, so the
//!   rules for a job held far under its shares hold for it too.
//!
//! Returns no delay itself after an attempt (the caller's pacer enforces
//! `rate()`); the start splay is its only delay.
//!
//! Its parts: [`config`] (the settings and their checks), this file (the
//! rate controller), [`cushion`] (the level-steered mode, taken only when
//! answers carry the server's bucket level, as Heroku's do).

mod config;
mod cushion;
pub mod size;

use std::collections::VecDeque;
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::budget::lower;
use super::window::AcceptedWindow;
use super::{Feedback, Lesson, Metrics, PeerLesson, Strategy};
pub use config::AdaptiveConfig;
use size::RequestSize;

/// A server that admits at once less than this many seconds of a client's
/// fair share has a shallow bucket (see `note_event`).
const SHALLOW_S: f64 = 0.25;

/// A peer's settle is taken only where it was met under this fraction of
/// the peer's share (see `Strategy::peer_lesson`).
const LESSON_BELOW: f64 = 0.9;

/// ...and only where the table has not shown it admits at once less than
/// this many seconds of the client's share.
const LESSON_DEEP_S: f64 = 0.5;

/// Where the most the server has shown it admits at once (the largest
/// request admitted whole, or what a size signal admitted) is less than
/// this many seconds of the table's capacity (the budget, where one is
/// set), a client with peers sends requests of at most its part of that
/// once any answer came back partial, regrowing while they go whole, so
/// that its peers' coinciding requests fit together (see `size`).
const PEERS_S: f64 = 0.5;

/// A server that admits at once less than this many seconds of the
/// table's capacity is one where peers keep to time slots (see
/// `Strategy::slotted`).
const SLOTTED_S: f64 = 0.1;

/// Below this part of its fair share, on a table that admits at once less
/// than `SLOTTED_S` of its capacity, a throttle does not cut the rate: it
/// is a collision with peers' requests, which come at any rate of this
/// client's, not a rate signal. Without it, six clients of `ingest sim`'s
/// shallow bucket out of their time slots (clock skews of 60-250 ms, or
/// slots off) cut settled rates from what they wrote lately, and in most
/// seeds one of them spiralled down to 1-9% of its share over 20 s (test
/// `six_clients_on_a_shallow_bucket_none_starves`). Not half the share (the size
/// signal's `slow_below`): two jobs on one table put every worker there,
/// and their throttles are rate signals (`ingest sim`'s two-jobs, seed 8:
/// 4.4% throttled instead of 1.7%).
/// Except while the whole job is held under this part of its shares
/// (`held_part`: kept together, other writers' throttles lately): then it
/// is another writer that refuses, not peers that take their shares, and
/// at the line the job asked for nearly twice what it was given (a
/// neighbour writing 180 of 200 WCU/s: 25.0% of its requests refused,
/// `ingest sim`, seeds 1-24). There a collision brings the rate down to
/// what the window accepted, once per `cooldown`, with no event, settle
/// or lesson: 6.6%, and as much written. A worker alone in its job (see
/// `held_part`) is held there: its rate is set to what was accepted with
/// no probe above it, and no fast recovery while so held (a neighbour at
/// 170 or 180 of 200 WCU/s: 31.7% and 61.9% of a lone worker's requests
/// refused, 6.9% and 7.5% so; lowered without the hold, it was back at
/// the line by the fast recovery within seconds, and refused more often
/// in all at 170). Not a job's workers: each one's window is noisy with
/// its peers', and held so, three under a neighbour at 190 used 82.6% of
/// what is free instead of 97.4%.
const COLLISION_BELOW: f64 = 0.25;

/// A job's workers kept together (`keep_together`, on by default since
/// 2026-12-02; opt-in the day before, for a 0.1 s bucket without another
/// writer whose least seed of 1-8 used 57.0% of the table instead of 72.2%
/// with three workers, but whose least of seeds 1-24 was 56.4% against
/// 53.3% without it, the mean 80.6% both), where the table has less
/// free than their shares (another writer): once throttled by other writers within
/// `settle_s`, a worker paces at most `JOB_ABOVE` and at least `JOB_BELOW`
/// times its part of what the job's busy workers pace the table at (their
/// rates summed, by share: `Strategy::job_part`, from the job's beats).
/// Cuts and climbs scale with a worker's own level, so nothing else pulls
/// workers that drifted apart back together: under a neighbour writing
/// 150 of 200 WCU/s, one worker of three, whose first batch had gone whole
/// and whose requests stayed larger than its peers', was refused whole in
/// a bucket the others kept low and cut each time from what it had
/// written, down to 0.3-0.6 units/s of a share of 65 for ten minutes. The
/// bounds are on the pace, not on what was written: a cap on what the job
/// wrote ratchets down as throttles cut it (one seed of eight spiralled
/// to 0.01 units/s). (`ingest sim`, seeds 1-24: heavy-neighbour 5.25% ->
/// 4.14% throttled, the least client 0.00 -> 0.35; the neighbour at 100
/// of 200 1.98% -> 0.94%; figures in the README's "A job's workers kept
/// together".) Not on a parted table (`Feedback::parted`): a hot key range
/// holds its workers apart for reasons of its own. Only where the job
/// paces under `JOB_UNDER` of its shares: peers' requests meeting in a
/// shallow bucket cut workers apart for a moment, and capped then, the
/// first back at its share was held down with the others (`ingest sim`,
/// `medium-bucket.toml`, seeds 1-8: the least seed used 91.5% of the
/// table instead of 95.4% with the rule at any pace under the shares).
const JOB_ABOVE: f64 = 1.25;
const JOB_BELOW: f64 = 0.5;
const JOB_UNDER: f64 = 0.6;

/// Time slots are kept only while they work (see `watch_slots`): after
/// `SLOT_GRACE` slotted (peers join their parts at different moments),
/// each `SLOT_TRIAL` answers are a trial, and more than `SLOT_THROTTLED` of
/// them throttled says writers outside the group meet this client in its
/// parts; it then sends at any time for `SLOTS_OFF`.
const SLOT_GRACE: Duration = Duration::from_secs(5);
const SLOT_TRIAL: u32 = 50;
const SLOT_THROTTLED: f64 = 0.04;
const SLOTS_OFF: Duration = Duration::from_secs(300);

/// Every `LOAD_WINDOW` answers are a window of `watch_load`: one with more
/// than `LOAD_THROTTLED` of them throttled (key ranges aside) is heavy, and
/// two heavy windows running say the table is oversubscribed.
const LOAD_WINDOW: u32 = 100;
const LOAD_THROTTLED: f64 = 0.08;

/// A client that accepted over a whole `settle_s` at least `GIVEN_SHARE`
/// of its fair share, and whose answers were throttled in under
/// `RARE_THROTTLED` of them lately (an average over about `RARE_OVER`
/// answers), was given its share: a throttle then is peers' requests
/// meeting, not another writer, and does not settle (see `note_event`).
const GIVEN_SHARE: f64 = 0.9;
const RARE_THROTTLED: f64 = 0.03;
const RARE_OVER: f64 = 50.0;

/// On a table whose key ranges have refused writes lately
/// (`Feedback::parted`), a request carries at most this many seconds of
/// the capacity this client paces to (the table's, or a budget or an
/// index's bound where lower; one item at the least), and the pacer
/// releases no more at once (except within time slots, whose burst may
/// reach what the server has shown it admits at once: see
/// `control::pacing_burst`). The partitions admit less than the table does,
/// by an amount no answer tells: a large request puts a few items in each,
/// and where a partition's bucket holds a tenth of a second those few are
/// refused whenever they clump, whatever the rate. Refused, the top keys of
/// cold partitions turned hot and were paced with the hot key, and the hot
/// partition's cold keys, refused in clumps, read as the table's refusals
/// and cut its rate. `make bench-dynamodb`'s hot range on 0.1 s buckets,
/// one worker, 2026-11-29: 1.31-1.86x the bound in six runs (mean 1.48x)
/// against 1.68-2.53x in ten (mean 2.15x) (README, "What binds the hot
/// range on 0.1 s buckets"). 3 units at 150 WCU/s; 20 at 1,000. Off with
/// `shrink_requests = false` (no request size is kept then) or
/// `hot_keys = false` (no key range is told apart).
const PARTED_REQUEST_S: f64 = 0.02;

/// A change of capacity x share by more than this fraction ends a settle.
const SETTLE_RESET: f64 = 0.1;

/// On a table that reads as shallow, a settle that meets a throttle at
/// under this part of the level it began at has failed (see
/// `note_event`): the refusals followed the rate down, so they come at
/// any rate (peers' requests meeting in a small bucket), not from a
/// table kept low by another writer. It ends, the rate goes back to the
/// level the settle began at, and the shallow exemption holds again for
/// `settle_max_s`. 0.8, not 0.7 or 0.75 (`ingest sim`, before the gate
/// of `SETTLE_HELD_UNDER`): the heavy neighbour with a bucket of a quarter
/// second (`capacity = 50`) used 95.8% of what is free at 0.8 and 95.2%
/// at 0.75 (seeds 1-24), its least seed 85.5% at 0.7 (seeds 1-8). With no
/// such end, the shallow 10-unit bucket with a neighbour at 60 fell from
/// 57.7% to 36.7% (test `on_a_small_bucket_with_a_neighbour_a_settle_that_fails_ends`).
/// A settle begun within `settle_s` of the first answer does not fail: the
/// job is still coming down from its shares, and the settle follows it
/// (test `under_a_heavy_neighbour_a_settle_begun_at_the_start_follows_the_job_down`).
const SETTLE_FAILED: f64 = 0.8;

/// A job kept together settles on a table that reads as shallow only
/// while its part is under this part of its fair share (see `note_event`):
/// far under its shares, as under a neighbour writing three quarters of
/// the table. At any part under `JOB_UNDER`, three workers alone on a
/// 0.1 s bucket, whose peers' meetings read as other writers', used 49.7%
/// of it in their least seed of 1-24, against 56.4% (test
/// `three_workers_on_a_bucket_of_a_tenth_of_a_second_use_most_of_it`).
const SETTLE_HELD_UNDER: f64 = 0.4;

/// While the job is kept together under `SIZE_CUT_UNDER` of its
/// shares, a worker pacing above its part of the job's pace cuts to this
/// fraction of its rate on a size signal (a partial answer while slow),
/// which otherwise cuts nothing: there the job's rates summed touch what
/// is free, and the bucket the other writer keeps low answers partly.
/// Only the worker above its part, so the job's workers stay together:
/// cut on any worker, those settled climbed back over `settle_probe_s`
/// and lost to the next cuts while one not settled was back at its share
/// within seconds (`ingest sim`, heavy-neighbour, seeds 1-24: the least
/// seed 89.7% of what is free). A tenth, not a settle's fifth: each such
/// answer is the job a little over what is free. (Seeds 1-24: the heavy
/// neighbour 3.12% -> 2.65% throttled, 4,956 -> 3,797 refused, 98.5% ->
/// 99.0% of what is free; README, "A settle where the table reads as
/// shallow".)
const SIZE_CUT: f64 = 0.9;

/// Under this part of its shares (see `SIZE_CUT`), not `SETTLE_HELD_UNDER`:
/// at 0.4, the capacity step with a neighbour at 60
/// (`capacity-step-neighbour.toml`, seeds 1-24), whose job is held at about
/// 0.41 of its shares while the table is at 100, was refused on 2.90% of
/// its requests kept together against 2.88% apart (test
/// `on_a_capacity_step_with_a_neighbour_a_job_kept_together_loses_nothing`);
/// at 0.35 it scores as without the rule.
const SIZE_CUT_UNDER: f64 = 0.35;

/// A worker alone in its job (see `held`), held under `SIZE_CUT_UNDER` of
/// its share, also cuts on a partial answer to a request no larger than
/// the server has shown it admits at once, once more than this part of its
/// answers were refused lately (`throttled_lately`): that request was not
/// too large, the rate was, and with no peers' paces to be above ("above its
/// part" is what its window accepted, which the pacer's burst lifts over the
/// rate), nothing else cut it. Under a neighbour writing 150 of 200 WCU/s,
/// one worker paced at 51 units/s of the 50 free for 100 s, refused every
/// one to five seconds, each refusal read as a size signal (`ingest sim`,
/// heavy-neighbour with one client, seed 1). Seeds 1-24, one worker, the
/// neighbour (of 200 WCU/s) at 150 on a 1 s bucket: 13.3% -> 5.24%
/// throttled (5,153 -> 1,841 refused), 97.4%, 95.7% -> 96.7%, 94.1% of
/// what is free (mean, least seed); at 170: 6.87% -> 4.69%; at 150 on a
/// 0.5 s bucket 5.64% -> 3.16%, 97.3%, 94.8% -> 97.3%, 95.5%. Only once
/// refusals repeat: on every such answer, the 0.5 s bucket fell to 93.3%,
/// 87.2% of what is free (test `a_worker_alone_at_the_line_cuts_on_partial_answers`).
const ALONE_CUT_REFUSED: f64 = 0.05;

/// A worker alone in its job on a table that reads as shallow recovers
/// fast from a cut (see the recovery in `after_attempt`), back at its
/// share within `fast_recovery_s` however deep the cut: its throttles
/// there are read as requests meeting, not as the table's free capacity.
/// A lone worker has no peers' requests to meet, and where its refusals
/// repeated (over `ALONE_CUT_REFUSED` of its answers) within this many
/// seconds, the fast recovery stops just under the rate it was refused at
/// (the CUBIC climb goes on past it). Under a neighbour writing 50 of a
/// 200 WCU/s table with a 50-unit bucket, one worker was refused on 5.82%
/// of its requests (seeds 1-24), the fast return taking it from each cut
/// back over the 150 free within 1-2 s; so 0.81%, at 99.4% of what is
/// free instead of 99.9% (least seed 99.2% instead of 99.8%). Over 120 s,
/// not for good: the refusals stop repeating once it holds under the line,
/// and remembered for 600 s the same worker's least seed used 96.2%. Not on the
/// refusals' rate alone: held under the line they are rare, and the
/// worker went back over it (3.87-4.91%). Only after refusals repeated: a
/// lone worker on a 40-unit bucket (0.2 s) with no neighbour is refused
/// now and then, each cut from a rate its round trips bound, under its
/// share, and stopped there on every cut it used 94.3% of the table
/// instead of 96.0% (least seed 90.8% instead of 95.7%); the neighbour at
/// 50 with eight batches in flight, 94.8% in its least seed instead of
/// 98.8% (test `a_worker_alone_refused_often_recovers_to_the_line_not_past_it`).
const LONE_LINE_S: f64 = 120.0;

/// Only where the table has shown it admits at once at least this many
/// seconds of its capacity (see `LONE_LINE_S`): a worker writes several
/// batches at once (`dynamodb.max_in_flight_batches`, 8), and in a smaller
/// bucket its own requests meet each other as peers' do, refused often at
/// any rate. Alone with eight in flight, with no neighbour, on a 5-unit
/// bucket (0.025 s of 200 WCU/s) it used 31.6% of the table instead of
/// 50.5% (seeds 1-24); on a 20-unit one (0.1 s), 93.3% in its least seed
/// instead of 95.8%; at an eighth of a second, as without the rule.
const LONE_LINE_DEEP_S: f64 = 0.125;

/// A capacity change on a table that has shown another writer lately (a
/// settle within `settle_max_s`, the first since the last change begun
/// `STEP_SHOWN_S` before) leaves that
/// writer's traffic where it was: a worker estimates it as the old
/// capacity less what the table gave this worker over the last `settle_s`
/// over its share (`Adaptive::others_took`), and paces at its share of what
/// the new capacity leaves (x `target_fraction`). On a drop, not above
/// the new share nor under `STEP_FLOOR` of it (`STEP_FLOOR_ALONE` for a
/// worker alone: its own take is its job's, with no peers' spread in it),
/// and what the throttles taught is kept (the other writer is still there);
/// on a rise, not under the scaled rate. Without it, a drop put every
/// worker at its new share, into the other writer's traffic: the table at
/// 200 -> 100 -> 300 WCU/s with a neighbour writing 60
/// (`capacity-step-neighbour.toml`), three workers asked 98 units/s of the
/// 40 left, and their partial answers there, far under their shares, read
/// as size signals that cut nothing: 23.5% of the requests of the phase
/// at 100 were refused (seeds 1-8), for 100 s. On a rise the rate scaled by the capacity's
/// ratio from 13 units/s took 40 of the 240 free at first.
const STEP_FLOOR: f64 = 0.25;
const STEP_FLOOR_ALONE: f64 = 0.05;

/// ... only where the table gave the worker under this part of its fair
/// share lately (see `STEP_FLOOR`).
const STEP_GIVEN_UNDER: f64 = 0.9;

/// ... and only where the first settle since the last capacity change
/// began at least this many seconds before: throttles met since the table
/// changed and before the capacity poll said so (a throttle makes it look
/// within a second) settle the rate too, and are the new capacity's, not
/// another writer's.
const STEP_SHOWN_S: f64 = 10.0;

/// What `Adaptive::held` says of a worker held with its job.
#[derive(Debug, Clone, Copy)]
struct Held {
    /// Its part of the job's pace (alone: what the table accepted of it).
    part: f64,
    /// It is alone in its job.
    alone: bool,
}

#[derive(Debug, Clone)]
pub struct Adaptive {
    cfg: AdaptiveConfig,
    rate: f64,
    /// Rate at the last congestion event, if any.
    w_max: Option<f64>,
    /// The multiplicative decrease applied at that event (the CUBIC curve
    /// climbs back from w_max x this).
    last_cut: f64,
    last_decrease: Option<Duration>,
    /// Which rule read the last answer (see [`Strategy::rule`]).
    rule: &'static str,
    /// Where the CUBIC climb toward `w_max` started: the last decrease, or
    /// the slow start reaching the warm throughput's share.
    climb_from: Option<Duration>,
    last_update: Option<Duration>,
    /// When the first feedback came (the accepted-rate window needs history).
    first_seen: Option<Duration>,
    capacity: Option<f64>,
    /// capacity x share as last seen.
    expected: Option<f64>,
    /// What the server accepted over the last `window_ms`.
    accepted: AcceptedWindow,
    /// Steered by the server's bucket level (see the module doc).
    level_mode: bool,
    /// Level mode: (time, level) of this client's recent answers.
    levels: VecDeque<(Duration, f64)>,
    /// The capacity and share known before any call (see `hint`).
    known: (Option<f64>, Option<f64>),
    /// The first call is behind us (or `prime` said there was history).
    started: bool,
    /// How much one request may carry.
    size: RequestSize,
    /// The last congestion event below the fair share.
    last_below: Option<Duration>,
    /// Until when the rate does not climb straight back to the fair share.
    settled_until: Option<Duration>,
    /// When the first settle since the last capacity change began (see
    /// `others_took`).
    settled_first: Option<Duration>,
    /// The level (units/s) of the event the current settle began at, and
    /// when.
    settle_level: Option<(f64, Duration)>,
    /// Until when a table that reads as shallow exempts throttles from
    /// settling even while the job is kept together: a settle failed
    /// there (see `SETTLE_FAILED`).
    settle_failed_until: Option<Duration>,
    /// How long the next settle lasts: `settle_s`, doubled by each settle
    /// after the first (up to `settle_max_s`) until the capacity
    /// changes. A writer that stays teaches the controller to stay under it.
    settle_for: Duration,
    /// What the last event taught the job's other workers (see
    /// [`Strategy::taught`]), until it is taken.
    taught: Option<PeerLesson>,
    /// A hard ceiling met (account limit, on-demand maximum): the rate
    /// (units/s) never paced above, and until when.
    ceiling: Option<(f64, Duration)>,
    /// The next throttle names a hard ceiling.
    ceiling_next: bool,
    /// The table is split with other busy ingest jobs
    /// (`Strategy::split_with_jobs`).
    jobs_split: bool,
    /// The table's warm throughput, where no capacity is known.
    warm: Option<f64>,
    /// The rate `warm_start` set last.
    warm_rate: Option<f64>,
    /// The largest request admitted whole within the size's memory, as of
    /// the last answer (see `slotted`).
    whole_lately: f64,
    /// Slotted since (None: not slotted).
    slotted_since: Option<Duration>,
    /// The current trial of the slots: (answers, throttled ones).
    slot_trial: (u32, u32),
    /// Slots failed their trial: none until then (cleared by the first
    /// answer after it).
    slots_off_until: Option<Duration>,
    /// The current window of `watch_load`: (answers, throttled ones).
    load_window: (u32, u32),
    /// The last window was heavy.
    heavy: bool,
    /// The last two windows were heavy (see `watch_load`).
    oversubscribed: bool,
    /// The largest request this client has sent, in units (see
    /// `shown_shallow`).
    largest_sent: f64,
    /// What the server accepted over the last `settle_s` (see
    /// `given_share`).
    lately: AcceptedWindow,
    /// The part of this client's answers throttled lately: an average
    /// over about `RARE_OVER` answers (key ranges and its own probes of the
    /// request size aside).
    throttled_lately: f64,
    /// Key ranges refused writes to the table lately (see
    /// `PARTED_REQUEST_S`), as of the last answer.
    parted: bool,
    /// This client's part of what its job paces the table at, and when it
    /// was heard (see `Strategy::job_part`).
    job_part: Option<(Duration, f64)>,
    /// The last throttle that said something of other writers (see
    /// `held_part`).
    last_foreign: Option<Duration>,
    /// The last throttle with over `ALONE_CUT_REFUSED` of the answers
    /// refused lately (see `LONE_LINE_S`).
    refused_often: Option<Duration>,
    rng: SmallRng,
    metrics: Metrics,
}

impl Adaptive {
    pub fn new(cfg: AdaptiveConfig) -> Self {
        Self::with_seed(cfg, 0)
    }

    /// With the start splay drawn from a generator seeded with `seed`.
    pub fn with_seed(cfg: AdaptiveConfig, seed: u64) -> Self {
        let window = Duration::from_secs_f64(cfg.window_ms / 1e3);
        let lately = AcceptedWindow::new(Duration::from_secs_f64(cfg.settle_s.max(1.0)));
        Self {
            lately,
            throttled_lately: 0.0,
            parted: false,
            job_part: None,
            last_foreign: None,
            refused_often: None,
            settle_for: Duration::from_secs_f64(cfg.settle_s),
            settle_level: None,
            settle_failed_until: None,
            taught: None,
            last_cut: cfg.decrease,
            rate: cfg.start_rate,
            size: RequestSize::new(Duration::from_secs_f64(cfg.size_hold_s), cfg.size_grow),
            cfg,
            w_max: None,
            last_decrease: None,
            rule: "none",
            climb_from: None,
            last_update: None,
            first_seen: None,
            capacity: None,
            expected: None,
            accepted: AcceptedWindow::new(window),
            level_mode: false,
            levels: VecDeque::new(),
            known: (None, None),
            started: false,
            last_below: None,
            settled_until: None,
            settled_first: None,
            ceiling: None,
            ceiling_next: false,
            jobs_split: false,
            warm: None,
            warm_rate: None,
            whole_lately: 0.0,
            slotted_since: None,
            slot_trial: (0, 0),
            slots_off_until: None,
            load_window: (0, 0),
            heavy: false,
            oversubscribed: false,
            largest_sent: 0.0,
            rng: SmallRng::seed_from_u64(seed),
            metrics: Metrics::default(),
        }
    }

    /// Where a client starts: its share of the capacity (x target_fraction),
    /// or `cushion_start` x capacity when the share is unknown.
    fn start_rate(&self, capacity: f64, share: Option<f64>) -> f64 {
        match share.filter(|s| *s > 0.0) {
            Some(s) => capacity * s.min(1.0) * self.cfg.target_fraction,
            None => capacity * self.cfg.cushion_start,
        }
    }

    /// Before the first congestion event, with no capacity known (an
    /// on-demand table without a maximum) and the share known: starts no
    /// lower than the share (x `target_fraction`) of what the table is warm
    /// for, rather than slow-starting from `start_rate`. A new share or warm
    /// throughput moves a rate still where this put it (a worker told the
    /// warm throughput before its share does not start at all of it).
    fn warm_start(&mut self) {
        let share = self.known.1.filter(|s| *s > 0.0);
        let (Some(w), None, Some(share), None) = (self.warm, self.known.0, share, self.w_max)
        else {
            return;
        };
        let start = (w * share.min(1.0) * self.cfg.target_fraction).min(self.cfg.max_rate);
        self.rate = if self.warm_rate == Some(self.rate) {
            start.max(self.cfg.start_rate)
        } else {
            self.rate.max(start)
        };
        self.warm_rate = Some(self.rate);
    }

    /// The slow start's next rate: doubling per second, but not past the
    /// share (x `target_fraction`) of what the table is warm for, which an
    /// on-demand table takes at once and throttles past (twice its previous
    /// peak): there the climb goes on as CUBIC's from a cut to that level, as
    /// if a throttle had been met just above it. (Doubling past it, one
    /// worker met the table at 2.2x its warm throughput and 45% of its
    /// requests were throttled, through the proxy at `--on-demand-start`.)
    fn slow_start(&mut self, now: Duration, dt: f64) -> f64 {
        let next = self.rate * (1.0 + dt);
        let Some(w) = self.warm.filter(|_| self.known.0.is_none()) else {
            return next;
        };
        let share = self.known.1.filter(|s| *s > 0.0).unwrap_or(1.0).min(1.0);
        let threshold = w * share * self.cfg.target_fraction;
        if next < threshold {
            return next;
        }
        self.w_max = Some(w * share);
        self.last_cut = self.cfg.target_fraction;
        self.climb_from = Some(now);
        self.rate.max(threshold)
    }

    /// Accepted units per second over the window ending at `now`.
    fn accepted_rate(&self, now: Duration) -> f64 {
        self.accepted.rate_so_far(now)
    }

    /// What other writers took of the table before its capacity changed
    /// (see `STEP_FLOOR`), at `now`, in units/s: its capacity then less
    /// what this worker was given over the last `settle_s` over its share
    /// then. None before a whole `settle_s` of answers, or unless the
    /// table showed another writer lately (a settle within `settle_max_s`,
    /// the first since the last capacity change begun `STEP_SHOWN_S`
    /// before), is not split with other ingest jobs
    /// (their parts are in the share already), and gave this worker under
    /// `STEP_GIVEN_UNDER` of its fair share.
    fn others_took(&self, now: Duration) -> Option<f64> {
        let (c, e) = self.capacity.zip(self.expected)?;
        let given = self.lately.rate_so_far(now);
        let shown = Duration::from_secs_f64(STEP_SHOWN_S);
        let lately = Duration::from_secs_f64(self.cfg.settle_s);
        (!self.jobs_split
            && self
                .first_seen
                .is_some_and(|f| now.saturating_sub(f) >= lately)
            && self.settled_lately(now)
            && self
                .settled_first
                .is_some_and(|t| now.saturating_sub(t) >= shown)
            && given > 0.0
            && given < STEP_GIVEN_UNDER * e * self.cfg.target_fraction)
            .then(|| (c - given * c / e).max(0.0))
    }

    fn follow(&mut self, now: Duration, capacity: Option<f64>, share: Option<f64>) {
        let Some(c) = capacity.filter(|c| *c > 0.0 && self.cfg.follow_capacity) else {
            return;
        };
        let same_capacity =
            self.expected.is_some() && self.capacity.is_some_and(|p| (c / p - 1.0).abs() < 0.01);
        // Before the new capacity is taken (`others_took` reads the old).
        let others = (!same_capacity).then(|| self.others_took(now)).flatten();
        self.capacity = Some(c);
        let share = share.unwrap_or(1.0);
        if share.is_nan() || share <= 0.0 {
            return; // no partitions now: keep the rate for when work returns
        }
        let e = c * share.min(1.0);
        // The share of what the new capacity leaves the other writers'
        // traffic (see `STEP_FLOOR`).
        let left = others.map(|o| (c - o).max(0.0) * share.min(1.0) * self.cfg.target_fraction);
        let drop_with_others = left.is_some() && self.expected.is_some_and(|p| e < p * 0.99);
        if same_capacity {
            // Only the share moved (peers joined, left or finished, or the
            // backlogs shifted): the group's work is spread anew over the
            // same table, so the rate, the level of the last event and a
            // ceiling scale by the same ratio, down as well as up, and what
            // throttles taught about the table stays. Scaling up only (and
            // forgetting a settle) let a worker whose share grew near the
            // end of a job climb back into another writer's traffic while
            // the peers whose shares shrank kept their rates: together
            // the job asked more than it had been admitted.
            if let Some(prev) = self.expected.filter(|p| (e / p - 1.0).abs() > 0.01) {
                let k = e / prev;
                self.rate *= k;
                self.w_max = self.w_max.map(|w| w * k);
                self.ceiling = self.ceiling.map(|(c, until)| (c * k, until));
            }
            self.expected = Some(e);
            return;
        }
        if self
            .expected
            .is_some_and(|prev| (e / prev - 1.0).abs() > SETTLE_RESET)
            && !drop_with_others
        {
            // A new capacity: what the throttles taught is stale, and so
            // are the other writers' throttles that hold the job together
            // (`held_part`): held at 1.25 of its part of a job paced by
            // the old table, a worker climbed a step up to 300 WCU/s a
            // quarter at a time (test `a_step_up_in_capacity_releases_a_held_worker`).
            self.last_foreign = None;
            self.refused_often = None;
            self.load_window = (0, 0);
            self.heavy = false;
            self.oversubscribed = false;
            self.last_below = None;
            self.settled_until = None;
            self.settled_first = None;
            self.settle_for = Duration::from_secs_f64(self.cfg.settle_s);
            self.ceiling = None;
        }
        match self.expected {
            None if self.w_max.is_none() => self.rate = e * self.cfg.target_fraction,
            // More capacity (or a larger share): scale up, so a fleet at its
            // shares moves to the new shares together.
            Some(prev) if e > prev * 1.01 => {
                let k = e / prev;
                self.rate *= k;
                self.w_max = self.w_max.map(|w| w * k);
                // Where other writers took part of the old table, the
                // scaled rate scales their part too: up to what the new
                // one leaves them instead, if that is more.
                if let Some(to) = left.map(|l| l.min(e * self.cfg.target_fraction)) {
                    if to > self.rate {
                        self.rate = to;
                        self.w_max = self.w_max.map(|w| w.max(to));
                    }
                }
            }
            // Less: to the new share, not scaled down. Throttles have
            // usually cut the rate already, and scaling that down again
            // would land far below the new share. Nor does the rate stay
            // below it: the new capacity explains those throttles (a
            // throttle makes the poll look within a second), and their cuts
            // (the first event's halving, from an accepted rate the drop
            // pulled down) left workers below the new share, as what the
            // throttles taught is forgotten (above). Capped only, six
            // workers on 200 -> 100 WCU/s: half of them at 8-11 of their 16
            // units/s for the whole phase (78% of it), and 13 s to reach the
            // next step up.
            Some(prev) if e < prev * 0.99 => {
                let fair = e * self.cfg.target_fraction;
                // Where other writers took part of the old table, to the
                // share of what the new one leaves them (see `STEP_FLOOR`).
                let floor = if share >= 0.999 {
                    STEP_FLOOR_ALONE
                } else {
                    STEP_FLOOR
                };
                let to = left.map_or(fair, |l| l.clamp(floor * fair, fair));
                self.rate = to;
                self.w_max = self.w_max.map(|w| w.min(to));
            }
            _ => {}
        }
        self.expected = Some(e);
    }

    /// A congestion event at `level` (units/s): a second one at or below
    /// the fair share within `settle_s` settles the rate (see the module
    /// doc); each settle after the first lasts twice as long. True where
    /// the event ended a failed settle (see `SETTLE_FAILED`): the rate is
    /// back at the settle's level, and the event cuts nothing.
    fn note_event(&mut self, now: Duration, level: f64, fair: Option<f64>) -> bool {
        let window = Duration::from_secs_f64(self.cfg.settle_s);
        let Some(fair) = fair.filter(|f| level <= 1.001 * f && !window.is_zero()) else {
            return false;
        };
        let shallow = self.shallow(fair);
        if let Some((began, at)) = self
            .settle_level
            .filter(|(l, _)| self.settled(now) && level < SETTLE_FAILED * l)
        {
            if self
                .first_seen
                .is_some_and(|f| at.saturating_sub(f) < window)
            {
                // Begun at the start, while the job comes down from its
                // shares to what is free: the settle follows the level
                // down (from now), and nothing failed. Failed there, a
                // worker under a neighbour writing 150 of 200 WCU/s was
                // back at its share every few seconds for the rest of the
                // run (`ingest sim`, heavy-neighbour, seeds 1-24: 12 of 72
                // workers, in 8 seeds, whose workers were refused 22-140
                // times each after the first 30 s, the others' 14-37).
                self.settle_level = Some((level, now));
                self.settled_until = Some(now + self.settle_for);
                self.last_below = Some(now);
                return false;
            }
            let max = Duration::from_secs_f64(self.cfg.settle_max_s);
            self.settle_failed_until = Some(now + max);
            if shallow {
                self.settled_until = None;
                self.settle_level = None;
                self.rate = self.rate.max(began);
                return true;
            }
        }
        let failed = self.settle_failed_until.is_some_and(|u| now < u);
        let held_low = self
            .held_part(now)
            .is_some_and(|p| p < SETTLE_HELD_UNDER * fair);
        if shallow && (failed || !held_low) {
            // The server admits little at once: throttles below the share
            // are requests meeting peers' in a shallow bucket, not less
            // free capacity (ingest sim, shallow-bucket, 3 clients: 40%
            // utilization instead of 67% when these settled the rate).
            // Unless the job is kept together (other writers' throttles
            // lately, the job far under its shares): a deep bucket that
            // another writer keeps low admits little at once too, and the
            // job's requests shrink there. Not settling, a job of three
            // under a neighbour writing 150 of 200 WCU/s was back at its
            // share every 5 s and throttled on 4.14% of its requests
            // (seeds 1-24; 3.12% settling). Where the settle fails, the
            // bucket is small after all (see `SETTLE_FAILED`).
            return false;
        }
        if self.given_share(now, fair) {
            // The table gave this client its share lately, and throttles
            // were rare: peers' requests meeting in a bucket shallower than
            // they are, not another writer. Settled on them, a worker of
            // one job on a bucket of 0.1-0.5 s stayed at 15-30 units/s of
            // its 65 for minutes with no throttle at all (a lesson's climb
            // scales with the level it was learned at).
            return false;
        }
        let settled = self.settled(now);
        if settled
            || self
                .last_below
                .is_some_and(|t| now.saturating_sub(t) <= window)
        {
            if !settled && self.settled_until.is_some() {
                let max = Duration::from_secs_f64(self.cfg.settle_max_s);
                self.settle_for = (self.settle_for * 2).min(max.max(window));
            }
            if !settled {
                self.settle_level = Some((level, now));
            }
            self.settled_until = Some(now + self.settle_for);
            self.settled_first.get_or_insert(now);
        }
        self.last_below = Some(now);
        false
    }

    /// Whether the table gave this client its share lately: it has
    /// answers from a whole `settle_s` and accepted at least `GIVEN_SHARE`
    /// of `fair` over it, and under `RARE_THROTTLED` of its answers were
    /// throttled lately. Another writer that takes part of the share shows
    /// in both; peers' requests meeting now and then in a shallow bucket
    /// in neither. (Two jobs on one table leave a worker of the one ahead
    /// near its share, but throttled often.) Not before a whole `settle_s`:
    /// a worker that starts alone takes all of the table until its peers
    /// join, and that start counted as its share lately (`make
    /// bench-dynamodb`'s live writer, 6-9 throttled requests a run in
    /// five, against 0-5 in eleven without the rule; with the whole window
    /// 0-3 in three). 0.9 of the share, not 0.85, leaves less room for a
    /// writer that takes a tenth of it: `ingest sim` scored both alike on
    /// the neighbour (0.94% and 0.93% throttled), and 0.85 used more of a
    /// 0.1 s bucket in its least seed (80.0% against 72.2%).
    fn given_share(&self, now: Duration, fair: f64) -> bool {
        let span = Duration::from_secs_f64(self.cfg.settle_s);
        self.first_seen
            .is_some_and(|f| now.saturating_sub(f) >= span)
            && self.throttled_lately < RARE_THROTTLED
            && self.lately.rate_so_far(now) >= GIVEN_SHARE * fair
    }

    /// One congestion event's cut: to `factor` x `base`, climbing back to
    /// `base` from `now`.
    fn cut(&mut self, now: Duration, base: f64, factor: f64) {
        self.last_cut = factor;
        self.w_max = Some(base);
        self.rate = base * factor;
        self.last_decrease = Some(now);
        self.climb_from = Some(now);
        self.metrics.went_down += 1;
    }

    /// Whether this answer, partial, shows a server that admits at once
    /// less than `SLOTTED_S` of `capacity` (see `Strategy::slotted`): what
    /// it admitted, and no request admitted whole lately, was that large
    /// (the size the answer proves; otherwise its requests would carry all
    /// the server admits at once without being slotted).
    fn shows_slotted(&mut self, fb: &Feedback, capacity: f64) -> bool {
        self.slots_allowed()
            && fb.throttled
            && !fb.key_range
            && fb.written_units > 0.0
            && fb.written_units < fb.sent_units
            && fb
                .written_units
                .max(1.0)
                .max(self.size.largest_whole(fb.now))
                .max(self.size.parted_from())
                < SLOTTED_S * capacity
    }

    /// Whether time slots may be kept: configured, not level mode, not
    /// within `SLOTS_OFF` of a failed trial, and not on a parted table
    /// (`Feedback::parted`). Slots tile the table's one bucket; a parted
    /// table refuses partition by partition, and its partial answers read
    /// as a table that admits little at once. There, on the hot range's 0.1 s
    /// buckets with three workers, two kept to slots and the third, out of
    /// them, met their requests at any rate and fell to 9-16 units/s of a
    /// share of 30 (`make bench-dynamodb`, 2026-11-29, alternated: 1.60x,
    /// 1.33x and 1.22x the bound at 0.6-1.2% throttled without slots there,
    /// against 2.13x, 1.64x and 2.37x at 1.6-2.0%; README, "What binds the
    /// hot range on 0.1 s buckets").
    fn slots_allowed(&self) -> bool {
        self.cfg.time_slots && !self.level_mode && self.slots_off_until.is_none() && !self.parted
    }

    /// Time slots are a bet that this client's peers are the only writers
    /// the table has: within its parts it is alone, and its requests come
    /// back whole (its own probing aside). A deep bucket that another
    /// writer (a second job, the live application) keeps low also admits
    /// little at once, and reads as shallow; there slots concentrate this
    /// client's writes into its parts, where they meet the other writer's
    /// (`make bench-dynamodb`, two jobs of 3 workers on a 200 WCU/s table
    /// with a 1 s bucket: 85-91% of the capacity together, 6.6-8.4%
    /// throttled, against 90-96% and 3.7% without slots). So after
    /// `SLOT_GRACE` slotted, every `SLOT_TRIAL` answers are a trial: more
    /// than `SLOT_THROTTLED` of them throttled (this client's own probes of
    /// the request size aside: `foreign`, see `after_attempt`) ends the
    /// slots for `SLOTS_OFF`.
    fn watch_slots(&mut self, fb: &Feedback, foreign: bool) {
        if self.slots_off_until.is_some_and(|u| fb.now >= u) {
            self.slots_off_until = None;
        }
        if !self.slotted() {
            self.slotted_since = None;
            self.slot_trial = (0, 0);
            return;
        }
        let since = *self.slotted_since.get_or_insert(fb.now);
        if fb.now < since + SLOT_GRACE {
            return;
        }
        self.slot_trial.0 += 1;
        self.slot_trial.1 += u32::from(foreign);
        let (n, throttled) = self.slot_trial;
        if n >= SLOT_TRIAL {
            if f64::from(throttled) > SLOT_THROTTLED * f64::from(n) {
                self.slots_off_until = Some(fb.now + SLOTS_OFF);
                self.slotted_since = None;
            }
            self.slot_trial = (0, 0);
        }
    }

    /// Whether the table has shown it admits at once less than `SLOTTED_S`
    /// of its capacity, and admitted no request as large whole lately: one
    /// where peers keep to time slots (`Strategy::slotted`), if they may.
    /// (The second condition because a size signal while slow keeps only
    /// half of the largest request admitted whole (`size`), and a deep
    /// bucket that another job keeps low read as shallow then.)
    fn slot_shaped(&self) -> bool {
        self.capacity.is_some_and(|c| {
            self.whole_lately < SLOTTED_S * c
                && self
                    .size
                    .admits_at_once()
                    .is_some_and(|p| p < SLOTTED_S * c)
        })
    }

    /// Shallow-table rules (no settle, back at the share within
    /// `fast_recovery_s`) are for peers' requests meeting now and then in a
    /// small bucket: time slots and request parts keep that to 1-2% of
    /// answers. A client throttled on more than `LOAD_THROTTLED` of its
    /// answers in two windows of `LOAD_WINDOW` running meets more than its
    /// peers: the table has less free than the shares, whatever its bucket
    /// (a neighbour, more jobs than this one knows of), so it is
    /// oversubscribed and not read as shallow until a window is not heavy.
    /// A worker's first answers decide what it takes the table to admit at
    /// once, and where several start together on a contended deep table the
    /// first batches come back partial: read as shallow, such a worker
    /// climbed back to its share every 5 s and never settled. (`ingest
    /// sim`, seeds 1-8: `heavy-neighbour.toml` 13.0% of requests throttled
    /// -> 7.7%, `two-lone-jobs.toml` 7.5% -> 1.6%; every tuned scenario
    /// unchanged. See the README's "Shapes not tuned on" for the figures
    /// with the mends after it.)
    fn watch_load(&mut self, foreign: bool) {
        self.load_window.0 += 1;
        self.load_window.1 += u32::from(foreign);
        if self.load_window.0 >= LOAD_WINDOW {
            let heavy = f64::from(self.load_window.1) > LOAD_THROTTLED * f64::from(LOAD_WINDOW);
            self.oversubscribed = heavy && self.heavy;
            self.heavy = heavy;
            self.load_window = (0, 0);
        }
    }

    /// Whether the server has shown it admits at once less than
    /// `SHALLOW_S` of `rate` (units/s), and the table is not oversubscribed
    /// (see `watch_load`).
    fn shallow(&self, rate: f64) -> bool {
        !self.oversubscribed
            && self
                .size
                .admits_at_once()
                .is_some_and(|p| p < SHALLOW_S * rate)
    }

    /// Whether the server has shown it admits at once less than
    /// `SHALLOW_S` of `capacity` ([`Self::shallow`]) and less than half
    /// the largest request this client has sent (since it started). What a
    /// client proves the table admits at once is at most a request it sent
    /// (a partial answer to a probe is taken to admit as much as went whole
    /// lately), and a batch is under a quarter second of a 200 WCU/s
    /// table: there a probe's partial answer after batches had gone whole
    /// read as shallow. (`make bench-dynamodb`, two jobs of three workers,
    /// three runs whose split was 36-38% to 57-59%: seven of the larger
    /// jobs' nine workers had met the other job first on a probe of the
    /// request size, a batch larger than any before, written 13-28 of
    /// 34-39 units after batches of 25-39 had gone whole; each read the
    /// table as admitting 25-39 units at once, shallow, and was spared the
    /// first halving that every worker of the smaller jobs took. Six rounds
    /// alternated with the rule: the lower job under 40% in one run against
    /// two, 39.3% at the least against 33.8%.) A worker whose very first
    /// answer comes back less than half written, with nothing written
    /// whole before, still reads such a bucket as shallow. Only the first
    /// halving asks this; the shallow climb (back at the share within
    /// `fast_recovery_s`) still asks [`Self::shallow`]: with both, `ingest
    /// sim`'s `two-lone-jobs.toml` (seeds 1-8) was throttled on 1064
    /// requests instead of 437, and `medium-bucket.toml` used 91.3% of its
    /// table at the least instead of 94.0%. Where a batch's items cost one
    /// unit each, a bucket of 15-20 units holds more than half a request
    /// and is no longer spared the halving: three clients there (seeds 1-8)
    /// 0.69% and 0.56% throttled against 0.70% and 0.60%, at the same
    /// utilization.
    fn shown_shallow(&self, capacity: f64) -> bool {
        self.shallow(capacity)
            && self
                .size
                .admits_at_once()
                .is_some_and(|p| p < 0.5 * self.largest_sent)
    }

    /// Whether a settle ended less than its length (`settle_for`) before
    /// `at` (or still holds): the table has shown it has less free than the share,
    /// so the rate probes back up rather than returning to the share.
    fn learned(&self, at: Duration) -> bool {
        self.settled_until.is_some_and(|u| at < u + self.settle_for)
    }

    /// Whether a settle held within `settle_max_s` of `at` (since the last
    /// capacity change): the table has shown another writer lately.
    fn settled_lately(&self, at: Duration) -> bool {
        let max = Duration::from_secs_f64(self.cfg.settle_max_s);
        self.settled_until.is_some_and(|u| at < u + max)
    }

    /// This client's part of what its job paces the table at, where it
    /// keeps the job's workers together (see `JOB_ABOVE`): heard within
    /// `jobs::STALE` of `at`, on a table that is not parted, after a
    /// throttle of other writers' within `settle_s` (and since the last
    /// capacity change: see `follow`), and under `JOB_UNDER`
    /// of the fair share (the job as a whole paces far under its shares:
    /// the table has less free than them). A worker alone in its job (its
    /// share the whole table's, no peer heard) is its job, and its part is
    /// what the table accepted of it over the last window: alone under a
    /// neighbour writing 150 of 200 WCU/s, nothing held it, every partial
    /// answer at a quarter of its share was a size signal, and the fast
    /// recovery took it back toward its share within seconds (`ingest
    /// sim`, seeds 1-24: 34.4% of its requests refused; 13.3% so).
    fn held_part(&self, at: Duration) -> Option<f64> {
        self.held(at).map(|h| h.part)
    }

    /// `held_part`, and whether this worker is alone in its job.
    fn held(&self, at: Duration) -> Option<Held> {
        if !self.cfg.keep_together {
            return None;
        }
        let (heard, part, alone) = match self.job_part {
            Some((heard, part)) => (heard, part, false),
            // Alone in its job (its share is the whole table's), a worker
            // is its job: its part is what the table gave it over the last
            // window, once it has run one.
            None if self.alone(at) => (at, self.accepted_rate(at), true),
            None => return None,
        };
        let fair = self.expected? * self.cfg.target_fraction;
        let lately = Duration::from_secs_f64(self.cfg.settle_s);
        (at.saturating_sub(heard) <= super::jobs::STALE
            && !self.parted
            && self
                .last_foreign
                .is_some_and(|t| at.saturating_sub(t) <= lately)
            && part < JOB_UNDER * fair)
            .then_some(Held { part, alone })
    }

    /// Whether this worker's share is the whole table's and it has answers
    /// from a whole window: no peer in its job (see `held`).
    fn alone(&self, at: Duration) -> bool {
        let window = Duration::from_secs_f64(self.cfg.window_ms / 1e3);
        self.expected
            .zip(self.capacity)
            .is_some_and(|(e, c)| e >= 0.999 * c)
            && self
                .first_seen
                .is_some_and(|f| at.saturating_sub(f) >= window)
    }

    /// Where the fast recovery climbs to at `at`: the fair share `f`, or
    /// just under the rate of the last cut for a worker alone on a table
    /// that reads as shallow, refused often within `LONE_LINE_S`.
    fn recovery_top(&self, at: Duration, f: f64) -> f64 {
        match self.w_max {
            Some(w)
                if self
                    .refused_often
                    .is_some_and(|t| at.saturating_sub(t).as_secs_f64() <= LONE_LINE_S)
                    && self.alone(at)
                    && self.capacity.is_some_and(|c| {
                        self.shallow(c)
                            && self
                                .size
                                .admits_at_once()
                                .is_some_and(|a| a >= LONE_LINE_DEEP_S * c)
                    }) =>
            {
                f.min(w * self.cfg.target_fraction)
            }
            _ => f,
        }
    }

    /// Whether the rate is settled at `at` (see the module doc).
    fn settled(&self, at: Duration) -> bool {
        self.settled_until.is_some_and(|u| at < u)
    }

    /// The CUBIC curve: w_max * decrease at t = 0, w_max at t = k.
    fn cubic(&self, w_max: f64, t: f64, k: f64) -> f64 {
        let c3 = w_max * (1.0 - self.last_cut) / k.powi(3);
        c3 * (t - k).powi(3) + w_max
    }

    fn clamp(&mut self) {
        let mut hi = self.cfg.max_rate;
        if let Some(c) = self.capacity.filter(|_| self.cfg.follow_capacity) {
            hi = hi.min(c * self.cfg.target_fraction);
        }
        if let Some(e) = self.expected.filter(|_| self.cfg.cap_at_share) {
            hi = hi.min(e * self.cfg.target_fraction);
        }
        if let Some((c, _)) = self.ceiling {
            hi = hi.min(c);
        }
        // Now: the last answer, or the job's pace heard since.
        let now = self.last_update.max(self.job_part.map(|(t, _)| t));
        if let Some(p) = now.and_then(|t| self.held_part(t)) {
            hi = hi.min(JOB_ABOVE * p);
            self.rate = self.rate.max((JOB_BELOW * p).min(hi));
        }
        self.rate = self
            .rate
            .clamp(self.cfg.min_rate, hi.max(self.cfg.min_rate));
    }
}

impl Strategy for Adaptive {
    fn name(&self) -> &'static str {
        "adaptive"
    }

    fn before_call(&mut self, _now: Duration) -> Duration {
        if std::mem::replace(&mut self.started, true) || self.cfg.start_splay == 0.0 {
            return Duration::ZERO;
        }
        let (Some(capacity), share) = self.known else {
            return Duration::ZERO;
        };
        let period = self.cfg.start_splay / self.start_rate(capacity, share);
        let d = Duration::from_secs_f64(period * self.rng.random::<f64>());
        self.metrics.sleep(d)
    }

    fn ceiling(&mut self) {
        self.ceiling_next = true;
    }

    fn split_with_jobs(&mut self, split: bool) {
        self.jobs_split = split;
    }

    fn job_part(&mut self, now: Duration, part: Option<f64>) {
        self.job_part = part.filter(|p| p.is_finite()).map(|p| (now, p));
        self.clamp();
    }

    fn taught(&mut self) -> Option<PeerLesson> {
        self.taught.take()
    }

    fn peer_lesson(&mut self, now: Duration, taught: PeerLesson) -> bool {
        // Only at a known share: both lessons are about the table having
        // less free than the group's share.
        let Some(f) = self.expected.map(|e| e * self.cfg.target_fraction) else {
            return false;
        };
        match taught.lesson {
            // The peer's halving is this client's, unless it met the table
            // already, its table is split with other jobs (their part is
            // left to them: no first meeting halves it), runs below its
            // share, or the table has shown it
            // admits little at once (its throttles are requests meeting,
            // which it reads by itself). It counts as an event, as its own
            // would: a throttle of its own soon after settles it.
            Lesson::FirstMeeting => {
                if self.w_max.is_some()
                    || self.jobs_split
                    || self.rate < 0.9 * f
                    || self.capacity.is_some_and(|c| self.shown_shallow(c))
                {
                    return false;
                }
                let base = self.rate;
                self.note_event(now, base, Some(f));
                self.cut(now, base, self.cfg.first_decrease);
                self.rule = "peer_first_cut";
                self.clamp();
                true
            }
            // The peer's settle is this client's too, without a cut: its
            // rate may well be under the level the peer met, and what
            // settling changes is the climb (slowly, to just under the last
            // level, not back to the share). Only a settle met under
            // `LESSON_BELOW` of the peer's share, on a table that has not
            // shown this client it admits less than `LESSON_DEEP_S` of its
            // share at once: peers' requests meeting in a bucket of a tenth
            // of a second settle workers now and then, and taught to each
            // other those settles kept two of three workers at a third to a
            // half of their shares for minutes (`ingest sim`, a 0.1 s
            // bucket, three clients: the least of seeds 1-8 used 51.8% of
            // the table instead of 72.2%; with both conditions 72.2%).
            Lesson::Settled => {
                let deep_enough = self
                    .size
                    .admits_at_once()
                    .is_none_or(|p| p >= LESSON_DEEP_S * f);
                if taught.level >= LESSON_BELOW || !deep_enough {
                    return false;
                }
                // Two events, as if it had met them: it settles (under the
                // exemptions of `note_event`), for twice as long as its last
                // settle if it had one.
                let level = self.rate.min(f);
                self.note_event(now, level, Some(f));
                self.note_event(now, level, Some(f));
                let settled = self.settled(now);
                if settled {
                    self.rule = "peer_settle";
                }
                settled
            }
        }
    }

    fn hint(&mut self, capacity: Option<f64>, share: Option<f64>) {
        self.known = (capacity.filter(|c| *c > 0.0), share);
        self.warm_start();
    }

    fn warm(&mut self, units_per_s: Option<f64>) {
        let warm = units_per_s.filter(|w| *w > 0.0);
        if let (Some(old), Some(new), None) = (self.warm, warm, self.known.0) {
            if new > old * 1.01 && self.last_decrease.is_none() {
                // The table grew warmer (it scaled) before anything
                // throttled: the slow start that stopped at the old level
                // goes on.
                self.w_max = None;
                self.climb_from = None;
            } else if new > old * 1.01 {
                // After throttles: scaled up by as much, as a larger
                // capacity scales the rate (`follow`); the fleet's workers
                // all do the same.
                let k = new / old;
                self.rate *= k;
                self.w_max = self.w_max.map(|w| w * k);
            }
        }
        self.warm = warm;
        self.warm_start();
        self.clamp();
    }

    fn after_attempt(&mut self, fb: &Feedback) -> Duration {
        self.metrics.invocations += 1;
        self.parted = fb.parted;
        if let (Some(level), Some(capacity)) = (fb.level_units, fb.capacity.filter(|c| *c > 0.0)) {
            self.level_step(fb, level, capacity);
            self.rule = "level";
            return Duration::ZERO;
        }
        self.largest_sent = self.largest_sent.max(fb.sent_units);
        // A throttle that says something of other writers: not a key
        // range's, nor a partial answer to this client's own probe of the
        // request size (regrowth past what the table has admitted at once).
        let foreign = fb.throttled && !fb.key_range && !self.size.probes(fb.sent_units);
        if foreign {
            self.last_foreign = Some(fb.now);
        }
        self.throttled_lately += (f64::from(u8::from(foreign)) - self.throttled_lately) / RARE_OVER;
        if foreign && self.throttled_lately > ALONE_CUT_REFUSED {
            self.refused_often = Some(fb.now);
        }
        self.lately.add(fb.now, fb.accepted_units);
        self.watch_slots(fb, foreign);
        self.watch_load(foreign);
        self.accepted.add(fb.now, fb.accepted_units);
        self.follow(fb.now, fb.capacity, fb.share);
        // A partial answer to a request larger than the server has shown it
        // admits at once, or far below the fair share: the request shrinks,
        // the rate stays.
        let fair = self.expected.map(|e| e * self.cfg.target_fraction);
        if let (Some(share), Some(c)) = (fb.share, self.capacity) {
            // Alone in its time slots (or about to be: this answer shows
            // the server admits too little at once), a client may take all
            // the server admits at once.
            let part = if self.slotted() || self.shows_slotted(fb, c) {
                1.0
            } else {
                share
            };
            self.size.set_part(part, SHALLOW_S * c, PEERS_S * c);
        }
        let dt = self
            .last_update
            .map_or(0.0, |t| fb.now.saturating_sub(t).as_secs_f64())
            .min(1.0);
        self.last_update = Some(fb.now);
        let since = self.last_decrease.map(|t| fb.now.saturating_sub(t));
        let cooldown = Duration::from_secs_f64(self.cfg.cooldown_ms / 1e3);
        let first_seen = *self.first_seen.get_or_insert(fb.now);
        let window = Duration::from_secs_f64(self.cfg.window_ms / 1e3);
        if self.ceiling.is_some_and(|(_, until)| fb.now >= until) {
            self.ceiling = None; // probe again: limits are raised, too
        }
        if fb.key_range {
            // Only key ranges refused, while the hot range held records
            // back: what was accepted is the range's pace (records go in
            // order), so a plain cut from the rate; not a level of the
            // table's free capacity, a settle, a ceiling or a request size.
            // (From 1,000 WCU/s with three workers, cut to the accepted
            // rate, two went 213-287 -> 16-22 at once and climbed back as
            // settled for 40 s.)
            self.rule = "range_cooldown";
            if since.is_none_or(|s| s >= cooldown) {
                self.cut(fb.now, self.rate, self.cfg.decrease);
                self.rule = "range_cut";
            }
            self.clamp();
            return Duration::ZERO;
        }
        self.size.set_slotted(self.slotted());
        let slow = fair.is_some_and(|f| self.rate < self.cfg.slow_below * f);
        let size_signal = self.cfg.shrink_requests
            && self
                .size
                .observe(fb.now, fb.sent_units, fb.written_units, fb.throttled, slow);
        self.whole_lately = self.size.largest_whole(fb.now);
        // Far below its share on a table that admits little at once, a
        // throttle is a collision with peers, not a rate signal; unless it
        // names a hard ceiling (the server's own word on why).
        let collision = !self.ceiling_next
            && self.slot_shaped()
            && fair.is_some_and(|f| self.rate < COLLISION_BELOW * f);
        self.rule = if size_signal {
            "size"
        } else if fb.throttled && collision {
            "collision"
        } else if fb.throttled {
            "cooldown"
        } else {
            "hold"
        };
        let held = self.held(fb.now);
        // A size signal that is also a rate signal (see `SIZE_CUT`).
        let size_cut = size_signal
            && fb.throttled
            && fair.is_some_and(|f| {
                held.is_some_and(|h| {
                    h.part < SIZE_CUT_UNDER * f
                        && (self.rate > h.part
                            || h.alone
                                && self.throttled_lately > ALONE_CUT_REFUSED
                                && self
                                    .size
                                    .admits_at_once()
                                    .is_some_and(|a| fb.sent_units <= a))
                })
            });
        // Held under `COLLISION_BELOW` of its shares: a collision brings the
        // rate down to what was accepted, and a worker alone is held there
        // (see `COLLISION_BELOW`).
        let held_under = fair
            .and_then(|f| held.filter(|h| h.part < COLLISION_BELOW * f))
            .map(|h| h.alone);
        if fb.throttled
            && collision
            && held_under.is_some()
            && fb.now.saturating_sub(first_seen) >= window
            && since.is_none_or(|s| s >= cooldown)
        {
            let accepted = self.accepted_rate(fb.now);
            if accepted < self.rate {
                if held_under == Some(true) {
                    self.cut(fb.now, accepted, 1.0);
                } else {
                    self.rate = accepted;
                    self.last_decrease = Some(fb.now);
                    self.metrics.went_down += 1;
                }
                self.rule = "collision_held";
            }
        }
        if fb.throttled && (!size_signal || size_cut) && !collision {
            // The accepted rate means something only over a full window.
            let measured = if fb.now.saturating_sub(first_seen) >= window {
                self.accepted_rate(fb.now)
            } else {
                0.0
            };
            // While the hot range holds records back, what was accepted is
            // its pace, not the table's: a plain cut from the rate.
            let base = if measured > 0.0 && !fb.range_held {
                self.rate.min(measured)
            } else {
                self.rate
            };
            if std::mem::take(&mut self.ceiling_next) {
                let until = fb.now + Duration::from_secs_f64(self.cfg.settle_max_s);
                self.ceiling = Some((base * self.cfg.target_fraction, until));
            }
            if since.is_none_or(|s| s >= cooldown) {
                if !fb.range_held && self.note_event(fb.now, base, fair) {
                    // A failed settle (see `SETTLE_FAILED`): back at its
                    // level, and nothing cut.
                    self.rule = "settle_failed";
                } else {
                    // Deeper once settled (this event included), so that the
                    // table's bucket, which the other writer keeps low, fills
                    // again before the next probe.
                    let first = self.w_max.is_none()
                        && !self.jobs_split
                        && !fb.range_read
                        && fair.is_some_and(|f| base >= 0.9 * f)
                        && !self.capacity.is_some_and(|c| self.shown_shallow(c));
                    let (factor, rule) = if size_cut {
                        (SIZE_CUT, "size_cut")
                    } else if self.settled(fb.now) {
                        (self.cfg.settle_decrease, "settle_cut")
                    } else if first {
                        (self.cfg.first_decrease, "first_cut")
                    } else {
                        (self.cfg.decrease, "cut")
                    };
                    self.rule = rule;
                    // Each settled cut is taught, so a job's settle holds while
                    // any of its workers meets the other writer, and doubles as
                    // a lone worker's does (`ingest sim`, seeds 1-8, teaching
                    // only a settle's start and never lengthening one from a
                    // peer: neighbour.toml 0.85% throttled against 0.68%,
                    // two-jobs.toml 1.37% against 1.19%; either way no lesson
                    // cuts a rate, and a settle ends once throttles stop).
                    self.taught = match (rule, fair) {
                        ("first_cut", Some(f)) => Some((Lesson::FirstMeeting, base / f)),
                        ("settle_cut", Some(f)) => Some((Lesson::Settled, base / f)),
                        _ => None,
                    }
                    .map(|(lesson, level)| PeerLesson { lesson, level });
                    self.cut(fb.now, base, factor);
                }
            }
        } else if !fb.throttled && self.accepted_rate(fb.now) >= 0.5 * self.rate {
            let before = self.rate;
            let settled = self.settled(fb.now);
            let learned = self.learned(fb.now);
            let climb = self.climb_from.map(|t| fb.now.saturating_sub(t));
            // The fair share, or under it where a lone worker's refusals
            // stop the fast recovery (`recovery_top`).
            let top = fair.map(|f| self.recovery_top(fb.now, f));
            self.rate = match (self.w_max, climb, top) {
                // One decrease's worth (f x (1 - decrease)) per
                // fast_recovery_s; on a shallow server, back at the fair
                // share within fast_recovery_s of the cut however deep it
                // was: its throttles below the share are peers' requests
                // meeting, and deep cuts there (to the accepted rate, which
                // partial answers pull down) held three workers at a third
                // of their shares. Not within `settle_max_s` of a settle
                // (since the last capacity change): the table has shown it
                // has less free than the share, and a worker held low by another
                // writer jumped back to its share within 5 s when its
                // lesson expired, into that writer (`make bench-dynamodb`,
                // a live writer at 150 of 200 WCU/s: 9 to 82 WCU/s).
                (_, _, Some(f)) if self.rate < f && !learned && held_under != Some(true) => {
                    self.rule = "recover";
                    // (A fair share implies a known capacity; the last
                    // cut left the rate at w_max x last_cut.)
                    let step = f * (1.0 - self.cfg.decrease);
                    let gap = match self.w_max {
                        Some(w)
                            if self.capacity.is_some_and(|c| self.shallow(c))
                                && !self.settled_lately(fb.now) =>
                        {
                            (f - w * self.last_cut).max(step)
                        }
                        _ => step,
                    };
                    let step = gap / self.cfg.fast_recovery_s;
                    (self.rate + step * dt).min(f)
                }
                (Some(w), Some(t), _) => {
                    self.rule = "climb";
                    // Settled: up to just under the level of the last
                    // event (the table's free capacity is about there), and
                    // slowly. After a settle, still slowly, up to it and
                    // past it.
                    let (k, w) = if settled {
                        (self.cfg.settle_probe_s, w * self.cfg.target_fraction)
                    } else if learned {
                        (self.cfg.settle_probe_s, w)
                    } else {
                        (self.cfg.probe_s, w)
                    };
                    self.cubic(w, t.as_secs_f64(), k).max(self.rate)
                }
                // No congestion seen yet (slow start): double per second,
                // up to the share of the warm throughput, then climb as
                // after a cut from there.
                _ => {
                    self.rule = "slow_start";
                    self.slow_start(fb.now, dt)
                }
            };
            if self.rate > before {
                self.metrics.went_up += 1;
            }
        }
        self.clamp();
        Duration::ZERO
    }

    fn rule(&self) -> Option<&'static str> {
        Some(self.rule)
    }

    fn rate(&self) -> Option<f64> {
        Some(self.rate)
    }

    fn max_request_units(&self) -> Option<f64> {
        let parted = self
            .capacity
            .filter(|_| self.parted)
            .map(|c| (PARTED_REQUEST_S * c).max(1.0));
        lower(self.size.limit(), parted).filter(|_| self.cfg.shrink_requests)
    }

    fn probing(&self) -> bool {
        self.cfg.shrink_requests && self.metrics.invocations == 0
    }

    fn admits_at_once(&self) -> Option<f64> {
        self.size.admits_at_once()
    }

    fn slotted(&self) -> bool {
        self.slots_allowed() && self.slot_shaped()
    }

    fn current_delay(&self) -> Duration {
        Duration::ZERO
    }

    fn prime(&mut self, delay: Duration, units: f64) {
        self.started = true; // history, not a fresh start: no splay
        if delay > Duration::ZERO && units > 0.0 {
            self.rate = units / delay.as_secs_f64();
            self.w_max = Some(self.rate);
            self.clamp();
        }
    }

    fn metrics(&self) -> Metrics {
        self.metrics
    }
}

#[cfg(test)]
mod tests;
