//! The write loop under tokio's paused clock, against the recording fake.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::decode::{decode, Coordinates, KeyAttr, KeyMode, KeyType};
use crate::dlq::fake::FakeTopic;
use crate::sink::batch::Batch;
use crate::sink::fake::{id_of, unprocessed, FakeSink, Script};
use crate::sink::{BatchOutcome, IndexInfo, ThrottleScope};
use crate::throttle::simple::ExponentialConfig;
use crate::throttle::StrategyConfig;

mod fencing;

fn schema() -> KeySchema {
    KeySchema {
        hash: KeyAttr {
            name: "id".into(),
            kind: KeyType::S,
        },
        range: None,
    }
}

struct Setup {
    sink: Arc<FakeSink>,
    topic: Arc<FakeTopic>,
    writer: Writer,
    ctl: Control,
    next: i64,
}

fn exponential(initial_ms: f64) -> StrategyConfig {
    StrategyConfig::Exponential(ExponentialConfig {
        initial_ms,
        max_ms: 60_000.0,
        multiplier: 2.0,
        jitter: 0.0,
    })
}

fn setup(script: Script, strategy: StrategyConfig, rate: Option<f64>) -> Setup {
    let sink = Arc::new(FakeSink::new(script));
    let topic = Arc::new(FakeTopic::default());
    let acks = Arc::new(Acks::new());
    acks.lock().assign("t", 0, Some(0));
    let writer = Writer {
        sink: sink.clone(),
        acks,
        dlq: DeadLetters::with(topic.clone(), "dlq"),
        counters: Arc::new(Counters::default()),
        attempt_timeout: Duration::from_secs(10),
    };
    let ctl = Control::new(strategy.build(7), rate, burst25());
    Setup {
        sink,
        topic,
        writer,
        ctl,
        next: 0,
    }
}

impl Setup {
    /// A batch of records with these JSON values, tracked on t/0.
    fn batch(&mut self, values: &[String]) -> Vec<Slot> {
        let mut b = Batch::default();
        for json in values {
            let offset = self.next;
            self.next += 1;
            let at = Coordinates {
                topic: "t",
                partition: 0,
                offset,
            };
            let decoded = decode(Some(json.as_bytes()), &schema(), KeyMode::Record, at).unwrap();
            let record =
                Record::with_value(self.writer.acks.tracked("t", 0, offset), json.as_bytes());
            assert!(!b.cannot_take(&decoded));
            b.push(Entry { record, decoded });
        }
        b.into_slots()
    }

    fn keys(&mut self, n: usize) -> Vec<Slot> {
        let values: Vec<String> = (0..n).map(|i| format!(r#"{{"id":"k{i}"}}"#)).collect();
        self.batch(&values)
    }

    async fn write(&self, slots: Vec<Slot>) -> Result<(), FatalWrite> {
        self.writer
            .write("tbl", &schema(), slots, &self.ctl, 1)
            .await
    }

    fn watermark(&self) -> Option<i64> {
        self.writer.acks.lock().watermark("t", 0)
    }

    fn pending(&self) -> usize {
        self.writer.acks.lock().pending("t", 0)
    }

    /// Runs `f` on the offset tracker after `d` (virtual time).
    fn after(
        &self,
        d: Duration,
        f: impl FnOnce(&Acks) + Send + 'static,
    ) -> tokio::task::JoinHandle<()> {
        let acks = self.writer.acks.clone();
        tokio::spawn(async move {
            tokio::time::sleep(d).await;
            f(&acks);
        })
    }

    /// Closes t/0 after `d`, for good (no retry fits).
    fn close_after(&self, d: Duration) -> tokio::task::JoinHandle<()> {
        self.after(d, |acks| acks.close_until(&tp(), std::time::Instant::now()))
    }
}

fn tp() -> [(String, i32); 1] {
    [("t".to_string(), 0)]
}

fn throttled() -> WriteError {
    WriteError::Throttled(
        "ProvisionedThroughputExceededException".into(),
        ThrottleScope::Table,
    )
}

/// Answers the first `k` calls with `error()`, then writes everything.
fn failing_first(k: usize, error: fn() -> WriteError) -> Script {
    Box::new(move |n, _| {
        if n < k {
            Err(error())
        } else {
            Ok(BatchOutcome::default())
        }
    })
}

#[tokio::test(start_paused = true)]
async fn unprocessed_items_are_retried_alone() {
    let script: Script = Box::new(|n, items| {
        Ok(match n {
            0 => unprocessed(items, |id| id == "k1" || id == "k3"),
            _ => BatchOutcome::default(),
        })
    });
    let mut s = setup(script, exponential(100.0), None);
    let slots = s.keys(5);
    s.write(slots).await.unwrap();
    let calls = s.sink.calls();
    assert_eq!(calls[0].ids, ["k0", "k1", "k2", "k3", "k4"]);
    // Accepted items followed both: a key range refused them, and they go
    // again one by one at the hot range's pace.
    let resent: Vec<&str> = calls[1..]
        .iter()
        .flat_map(|c| c.ids.iter().map(String::as_str))
        .collect();
    assert_eq!(resent, ["k1", "k3"], "only the unprocessed are resent");
    assert!(calls[1].at - calls[0].at >= Duration::from_millis(100));
    assert_eq!(s.watermark(), Some(5));
    let c = s.writer.counters.snapshot();
    assert_eq!(
        (c.items_written, c.unprocessed_items, c.throttled_requests),
        (5, 2, 1)
    );
}

#[tokio::test(start_paused = true)]
async fn throttles_back_off_on_the_strategys_schedule() {
    let script = failing_first(3, throttled);
    let mut s = setup(script, exponential(100.0), None);
    let slots = s.keys(3);
    s.write(slots).await.unwrap();
    let at: Vec<Duration> = s.sink.calls().iter().map(|c| c.at).collect();
    assert_eq!(at.len(), 4);
    let gaps: Vec<u128> = at.windows(2).map(|w| (w[1] - w[0]).as_millis()).collect();
    // 5 ms of latency, then 100, 200, 400 ms of backoff.
    assert_eq!(gaps, [105, 205, 405]);
    assert_eq!(s.ctl.report().metrics.went_up, 3);
    assert_eq!(s.writer.counters.snapshot().throttled_requests, 3);
    assert_eq!(s.watermark(), Some(3));
}

#[tokio::test(start_paused = true)]
async fn transient_errors_back_off_without_moving_the_strategy() {
    let script = failing_first(2, || WriteError::Retryable("connection reset".into()));
    let mut s = setup(script, exponential(100.0), None);
    let slots = s.keys(2);
    s.write(slots).await.unwrap();
    let calls = s.sink.calls();
    assert_eq!(calls.len(), 3);
    assert!(calls[1].at - calls[0].at >= Duration::from_millis(70));
    assert_eq!(s.ctl.report().metrics.went_up, 0, "not a capacity signal");
    assert_eq!(s.writer.counters.snapshot().retryable_errors, 2);
    assert_eq!(s.watermark(), Some(2));
}

#[tokio::test(start_paused = true)]
async fn a_rejected_batch_is_bisected_down_to_the_bad_record() {
    let script: Script = Box::new(|_, items| {
        if items.iter().any(|i| id_of(i) == "k13") {
            Err(WriteError::Rejected("ValidationException: bad item".into()))
        } else {
            Ok(BatchOutcome::default())
        }
    });
    let mut s = setup(script, exponential(100.0), None);
    let slots = s.keys(25);
    s.write(slots).await.unwrap();
    let calls = s.sink.calls();
    assert!(
        calls.len() <= 11,
        "about 2 log2(25) calls, not 26: {}",
        calls.len()
    );
    let mut written: Vec<String> = calls
        .iter()
        .filter(|c| !c.ids.iter().any(|i| i == "k13"))
        .flat_map(|c| c.ids.clone())
        .collect();
    written.sort();
    written.dedup();
    assert_eq!(written.len(), 24, "every other record written");
    let letters = s.topic.sent.lock().clone();
    assert_eq!(letters.len(), 1);
    assert_eq!(
        letters[0].header("ingest.error.reason"),
        Some(&b"dynamodb_rejected"[..])
    );
    assert_eq!(letters[0].header("ingest.source.offset"), Some(&b"13"[..]));
    assert_eq!(s.watermark(), Some(25));
}

#[tokio::test(start_paused = true)]
async fn a_merged_key_is_replayed_record_by_record() {
    let script: Script = Box::new(|_, items| {
        if items.iter().any(|i| i.contains_key("bad")) {
            Err(WriteError::Rejected("ValidationException".into()))
        } else {
            Ok(BatchOutcome::default())
        }
    });
    let mut s = setup(script, exponential(100.0), None);
    let slots = s.batch(&[
        r#"{"id":"a","v":1}"#.into(),
        r#"{"id":"a","v":2,"bad":true}"#.into(),
    ]);
    assert_eq!(slots.len(), 1);
    s.write(slots).await.unwrap();
    let letters = s.topic.sent.lock().clone();
    assert_eq!(letters.len(), 1);
    assert_eq!(letters[0].header("ingest.source.offset"), Some(&b"1"[..]));
    assert_eq!(
        s.sink.calls().len(),
        3,
        "merged, then v1 alone, then v2 alone"
    );
    assert_eq!(s.watermark(), Some(2));
}

/// A partial answer: the first `k` items written, the rest unprocessed.
fn admitting_first(k: usize, items: &[Item]) -> BatchOutcome {
    let admitted: Vec<String> = items.iter().take(k).map(id_of).collect();
    unprocessed(items, |id| !admitted.iter().any(|a| a == id))
}

#[tokio::test(start_paused = true)]
async fn a_partial_answer_sizes_the_following_requests_and_a_rejected_piece_spares_the_rest() {
    // The table admits 3 of the 10 items of the first request; later, the
    // request holding k7 is rejected.
    let script: Script = Box::new(|n, items| {
        if n == 0 {
            return Ok(admitting_first(3, items));
        }
        if items.iter().any(|i| id_of(i) == "k7") {
            return Err(WriteError::Rejected("ValidationException: bad item".into()));
        }
        Ok(BatchOutcome::default())
    });
    let mut s = setup(script, StrategyConfig::default(), None);
    s.ctl.set_capacity(Some(200.0));
    let slots = s.keys(10);
    s.write(slots).await.unwrap();
    let calls = s.sink.calls();
    assert_eq!(calls[0].ids.len(), 10);
    assert!(
        calls[1..].iter().all(|c| c.ids.len() <= 3),
        "requests of at most what was admitted: {calls:?}"
    );
    assert_eq!(
        s.ctl.report().pacing_rate,
        Some(196.0),
        "a size signal: the rate is not cut"
    );
    let mut written: Vec<String> = calls[1..]
        .iter()
        .filter(|c| !c.ids.iter().any(|i| i == "k7"))
        .flat_map(|c| c.ids.clone())
        .chain(calls[0].ids.iter().take(3).cloned())
        .collect();
    written.sort();
    written.dedup();
    assert_eq!(written.len(), 9, "every other record written: {calls:?}");
    let letters = s.topic.sent.lock().clone();
    assert_eq!(letters.len(), 1);
    assert_eq!(letters[0].header("ingest.source.offset"), Some(&b"7"[..]));
    assert_eq!(s.watermark(), Some(10));
}

#[tokio::test(start_paused = true)]
async fn batches_waiting_their_turn_are_sized_by_what_the_table_admitted_meanwhile() {
    // The table admits 3 items at once; four batches of 25 wait for their
    // turn at the pacer.
    let script: Script = Box::new(|_, items| Ok(admitting_first(3, items)));
    let mut s = setup(script, StrategyConfig::default(), None);
    s.ctl.set_capacity(Some(200.0));
    let mut batch = |b: usize| {
        let values: Vec<String> = (0..25).map(|i| format!(r#"{{"id":"b{b}-{i}"}}"#)).collect();
        s.batch(&values)
    };
    let (b0, b1, b2, b3) = (batch(0), batch(1), batch(2), batch(3));
    let done = tokio::join!(s.write(b0), s.write(b1), s.write(b2), s.write(b3));
    for r in [done.0, done.1, done.2, done.3] {
        r.unwrap();
    }
    // The first request carries a whole batch; every later one what the
    // table admitted, the second too: it is composed once the first is
    // answered (before, each of the four batches was sent whole first; then
    // the second, whose turn came while the first was in flight, still was).
    let calls = s.sink.calls();
    assert_eq!(calls[0].ids.len(), 25);
    assert!(
        calls[1..].iter().all(|c| c.ids.len() <= 3),
        "only the first request is a whole batch: {:?}",
        calls.iter().map(|c| c.ids.len()).collect::<Vec<_>>()
    );
    assert_eq!(s.watermark(), Some(100));
}

#[tokio::test(start_paused = true)]
async fn a_first_request_that_meets_a_transient_error_hands_the_probe_on() {
    // The first request keeps its turn until it is answered; a transient
    // error is no answer, so it hands the turn on as it backs off (at
    // least 70 ms): the other batch's request probes meanwhile.
    let script = failing_first(1, || WriteError::Retryable("connection reset".into()));
    let mut s = setup(script, StrategyConfig::default(), None);
    s.ctl.set_capacity(Some(200.0));
    let ids =
        |p: &str| -> Vec<String> { (0..2).map(|i| format!(r#"{{"id":"{p}{i}"}}"#)).collect() };
    let (a, b) = (s.batch(&ids("a")), s.batch(&ids("b")));
    let done = tokio::join!(s.write(a), s.write(b));
    done.0.unwrap();
    done.1.unwrap();
    let calls = s.sink.calls();
    assert_eq!(calls.len(), 3, "{calls:?}");
    assert_ne!(
        calls[1].ids, calls[0].ids,
        "the other batch next: {calls:?}"
    );
    assert_eq!(calls[2].ids, calls[0].ids, "then the retry: {calls:?}");
    assert!(
        calls[1].at - calls[0].at < Duration::from_millis(70),
        "the other batch waited out the backoff: {calls:?}"
    );
    assert_eq!(s.watermark(), Some(4));
}

#[tokio::test(start_paused = true)]
async fn a_table_with_indexes_sizes_requests_by_the_items_own_cost() {
    // ConsumedCapacity counts local index writes against the table (4 WCU
    // per 1 WCU item here): the first answer writes 3 of 10 items and
    // reports 12 WCU consumed.
    let script: Script = Box::new(|n, items| {
        if n == 0 {
            let mut out = admitting_first(3, items);
            out.consumed_wcu = Some(12.0);
            return Ok(out);
        }
        Ok(BatchOutcome::default())
    });
    let mut s = setup(script, StrategyConfig::default(), None);
    s.ctl.set_capacity(Some(200.0));
    let slots = s.keys(10);
    s.write(slots).await.unwrap();
    let calls = s.sink.calls();
    assert!(
        calls[1..].iter().all(|c| c.ids.len() <= 3),
        "requests of at most the 3 items admitted: {calls:?}"
    );
    assert_eq!(s.watermark(), Some(10));
}

/// Paced writes after one throttle of `scope`: the pacing rate 30 s later.
async fn rate_after_one_throttle(scope: ThrottleScope) -> Option<f64> {
    let script: Script = Box::new(move |n, _| {
        if n == 0 {
            return Err(WriteError::Throttled("ThrottlingException".into(), scope));
        }
        Ok(BatchOutcome::default())
    });
    let mut s = setup(script, StrategyConfig::default(), None);
    s.ctl.set_capacity(Some(200.0));
    let start = tokio::time::Instant::now();
    while start.elapsed() < Duration::from_secs(30) {
        let slots = s.keys(25);
        s.write(slots).await.unwrap();
    }
    s.ctl.report().pacing_rate
}

#[tokio::test(start_paused = true)]
async fn a_throttle_naming_a_ceiling_reaches_the_strategy_and_caps_the_rate() {
    // A table throttle is recovered from: the first, at the share, halves
    // the rate, which climbs back one decrease's worth (10% of the share)
    // per 5 s, so it is back at 98% of 200 within 30 s (the pacer follows
    // changes of more than 1%).
    let recovered = rate_after_one_throttle(ThrottleScope::Table).await.unwrap();
    assert!(recovered >= 0.99 * 196.0, "{recovered}");
    // An on-demand maximum or account limit is not probed past: at most 98%
    // of the rate at the throttle (196).
    let capped = rate_after_one_throttle(ThrottleScope::Ceiling)
        .await
        .unwrap();
    assert!(capped <= 0.98 * 196.0 + 1e-9, "{capped}");
}

/// Batches of one hot key and nine cold ones for `secs` of virtual time,
/// through a fake partition that takes the hot key's write at most every
/// 500 ms (returned unprocessed otherwise) while the table (200 WCU/s) has
/// room: (requests, partial answers, the table's pacing rate at the end,
/// the hot range's rate).
async fn hot_key_run(hot_keys: bool, secs: u64) -> (usize, u64, f64, Option<f64>) {
    let mut last_hot: Option<tokio::time::Instant> = None;
    let script: Script = Box::new(move |_, items| {
        let now = tokio::time::Instant::now();
        let room = last_hot.is_none_or(|t| now - t >= Duration::from_millis(500));
        let has_hot = items.iter().any(|i| id_of(i) == "hot");
        if has_hot && room {
            last_hot = Some(now);
        }
        Ok(unprocessed(items, |id| id == "hot" && !room))
    });
    let mut s = setup(script, StrategyConfig::default(), None);
    s.ctl =
        Control::new(StrategyConfig::default().build(1), None, burst25()).with_hot_keys(hot_keys);
    s.ctl.set_capacity(Some(200.0));
    let start = tokio::time::Instant::now();
    let mut b = 0;
    while start.elapsed() < Duration::from_secs(secs) {
        b += 1;
        let mut values = vec![r#"{"id":"hot"}"#.to_string()];
        values.extend((0..9).map(|i| format!(r#"{{"id":"c{b}-{i}"}}"#)));
        let slots = s.batch(&values);
        s.write(slots).await.unwrap();
    }
    let r = s.ctl.report();
    let partial = s.writer.counters.snapshot().throttled_requests;
    (
        s.sink.calls().len(),
        partial,
        r.pacing_rate.unwrap(),
        r.hot_rate,
    )
}

fn burst25() -> NonZeroU32 {
    NonZeroU32::new(25).unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_key_a_partition_refuses_again_is_paced_apart_and_the_table_keeps_its_pace() {
    let (calls, partial, rate, hot_rate) = hot_key_run(true, 60).await;
    let (calls_off, partial_off, rate_off, _) = hot_key_run(false, 60).await;
    eprintln!(
        "hot keys paced apart: {calls} requests, {partial} partial, table at {rate:.1}, \
         hot range at {hot_rate:?}; off: {calls_off} requests, {partial_off} partial, table at \
         {rate_off:.1}"
    );
    let hot_rate = hot_rate.expect("a hot range was found");
    assert!(
        (0.5..=4.0).contains(&hot_rate),
        "the hot range paces near the partition's 2 writes/s: {hot_rate}"
    );
    // Cut once, at the key's first refusal (as any throttle), then left alone.
    assert!(
        rate >= 0.9 * 196.0 - 0.1,
        "the table keeps its pace: {rate}"
    );
    assert!(
        partial * 5 <= partial_off,
        "far fewer refusals than when every one slows the table: {partial} vs {partial_off}"
    );
}

/// A writer on a 200 WCU/s table with hot keys paced apart, whose first
/// answer returns `h0`-`h3` unprocessed while the cold items after them are
/// written (so a key range refused them), then answers as `then` says.
fn hot_setup(then: fn(usize, &[Item]) -> BatchOutcome) -> Setup {
    let script: Script = Box::new(move |n, items| {
        Ok(match n {
            0 => unprocessed(items, |id| id.starts_with('h')),
            _ => then(n, items),
        })
    });
    let mut s = setup(script, StrategyConfig::default(), None);
    s.ctl = heard_once(Control::new(
        StrategyConfig::default().build(1),
        None,
        burst25(),
    ));
    s.ctl.set_capacity(Some(200.0));
    s
}

/// A control that has heard one whole answer already, so that the first
/// request of a test is no probe: a probe's refusals by key ranges make no
/// key hot (see `hot::Answer::probe`).
fn heard_once(ctl: Control) -> Control {
    ctl.after_attempt(crate::throttle::control::Throttled::No, 1.0, 1.0, 1.0);
    ctl
}

fn values(ids: &[&str]) -> Vec<String> {
    ids.iter().map(|id| format!(r#"{{"id":"{id}"}}"#)).collect()
}

/// A writer on a 200 WCU/s table whose first request finds a hot range
/// (`h0`-`h3` refused by a key range, the cold items after them written),
/// then writes one batch every 0.5 s for 6 s (four hot keys and one cold one
/// if `hot`, else five cold ones: about 10 units/s accepted), then a batch
/// of three new keys that a key range refuses with a 400: the table's pacing
/// rate before and after that refusal.
async fn new_keys_refused(hot: bool) -> (f64, f64) {
    let mut refused = false;
    let script: Script = Box::new(move |n, items| {
        if n == 0 {
            return Ok(unprocessed(items, |id| id.starts_with('h')));
        }
        if !refused && items.iter().any(|i| id_of(i) == "n0") {
            refused = true;
            return Err(WriteError::Throttled(
                "ProvisionedThroughputExceededException".into(),
                ThrottleScope::KeyRange,
            ));
        }
        Ok(BatchOutcome::default())
    });
    let mut s = setup(script, StrategyConfig::default(), None);
    s.ctl = heard_once(Control::new(
        StrategyConfig::default().build(1),
        None,
        burst25(),
    ));
    s.ctl.set_capacity(Some(200.0));
    let first = s.batch(&values(&["h0", "h1", "h2", "h3", "c0", "c1", "c2", "c3"]));
    s.write(first).await.unwrap();
    let start = tokio::time::Instant::now();
    let mut b = 0;
    while start.elapsed() < Duration::from_secs(6) {
        b += 1;
        let ids: Vec<String> = if hot {
            vec![
                "h0".into(),
                "h1".into(),
                "h2".into(),
                "h3".into(),
                format!("c{b}x"),
            ]
        } else {
            (0..5).map(|i| format!("c{b}-{i}")).collect()
        };
        let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
        let slots = s.batch(&values(&ids));
        s.write(slots).await.unwrap();
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let before = s.ctl.report().pacing_rate.unwrap();
    let fresh = s.batch(&values(&["n0", "n1", "n2"]));
    s.write(fresh).await.unwrap();
    (before, s.ctl.report().pacing_rate.unwrap())
}

#[tokio::test(start_paused = true)]
async fn new_keys_a_range_refuses_cut_the_table_plainly_only_while_hot_keys_wait_on_their_pace() {
    let (before, after) = new_keys_refused(true).await;
    assert!(
        (after - 0.9 * before).abs() < 1.0,
        "hot keys held back: 0.9 x the rate, not the ~10 units/s accepted: {before} -> {after}"
    );
    let (before, after) = new_keys_refused(false).await;
    assert!(
        after < 20.0,
        "nothing held: the table's signal, down to what it accepted: {before} -> {after}"
    );
}

#[tokio::test(start_paused = true)]
async fn hot_items_leave_first_and_one_by_one_as_the_range_lets_them() {
    let mut s = hot_setup(|_, _| BatchOutcome::default());
    let first = s.batch(&values(&["h0", "h1", "h2", "h3", "c0", "c1", "c2", "c3"]));
    s.write(first).await.unwrap();
    let rate = s.ctl.report().hot_rate.expect("a hot range was found");
    let calls = s.sink.calls();
    let resent: Vec<&str> = calls[1..]
        .iter()
        .flat_map(|c| c.ids.iter().map(String::as_str))
        .collect();
    assert_eq!(resent, ["h0", "h1", "h2", "h3"]);
    // At the range's rate (1 WCU items), not all four at once.
    assert!(calls.len() >= 3, "{} requests at {rate:.1}/s", calls.len());
    let span = calls.last().unwrap().at - calls[1].at;
    assert!(span.as_secs_f64() >= 2.0 / rate, "{span:?} at {rate:.1}/s");
    // Later, a hot key's item goes first, the cold ones after it.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let next = s.batch(&values(&["c4", "c5", "h1", "c6"]));
    s.write(next).await.unwrap();
    assert_eq!(s.sink.calls().last().unwrap().ids, ["h1", "c4", "c5", "c6"]);
}

/// Eight batches of 25 one-unit items written to a 200 WCU/s table with
/// a global index `by_g` of 50 WCU/s, each answered by `outcome` (given the
/// items' count): the capacity the writes are then paced to, and the index
/// named.
async fn paced_after(outcome: fn(f64) -> BatchOutcome) -> (Option<f64>, Option<String>) {
    let script: Script = Box::new(move |_, items| Ok(outcome(items.len() as f64)));
    let mut s = setup(script, StrategyConfig::default(), None);
    s.ctl.set_capacity(Some(200.0));
    s.ctl
        .set_indexes([IndexInfo::new("by_g", Some(50.0), &["g"])]);
    for _ in 0..8 {
        let slots = s.keys(25);
        s.write(slots).await.unwrap();
    }
    let r = s.ctl.report();
    (r.capacity, r.index_bound)
}

#[tokio::test(start_paused = true)]
async fn a_global_index_is_measured_against_the_items_own_units() {
    // Every item reaches `by_g` at half its own cost, and a local index
    // doubles what counts against the table: ConsumedCapacity says 2 units
    // an item against the table, 1 of them the item's own, and 0.5 for
    // `by_g`. Index units per item unit: 0.5, so the bound is 100 (the
    // prior, nothing measured, is 50; measured against the units against
    // the table, 0.25, it would be 200, no bound below the table's).
    let (capacity, index) = paced_after(|units| BatchOutcome {
        consumed_wcu: Some(2.0 * units),
        table_wcu: Some(units),
        index_wcu: vec![("by_g".to_string(), 0.5 * units)],
        ..BatchOutcome::default()
    })
    .await;
    assert_eq!((capacity, index.as_deref()), (Some(100.0), Some("by_g")));
}

#[tokio::test(start_paused = true)]
async fn answers_without_a_breakdown_leave_the_index_at_its_prior() {
    // A server that reports only a total (LocalStack, the proxy's stand-in)
    // says nothing of what the index consumed: the bound stays the prior
    // (one index unit per item unit), not "the index took nothing".
    let (capacity, index) = paced_after(|units| BatchOutcome {
        consumed_wcu: Some(units),
        ..BatchOutcome::default()
    })
    .await;
    assert_eq!((capacity, index.as_deref()), (Some(50.0), Some("by_g")));
}

#[tokio::test(start_paused = true)]
async fn a_probe_refused_by_key_ranges_makes_no_key_hot_and_small_requests_follow() {
    // The first request (the probe, a whole batch) comes back with the `h`
    // items unprocessed and the cold ones after them written: a key range's
    // pattern. The table is parted: what goes again goes in requests of at
    // most 0.02 s of its 200 WCU/s (4 units), and no key is paced apart (a
    // batch is refused where it clumps, not where keys are hot).
    let script: Script = Box::new(|n, items| {
        Ok(match n {
            0 => unprocessed(items, |id| id.starts_with('h')),
            _ => BatchOutcome::default(),
        })
    });
    let mut s = setup(script, StrategyConfig::default(), None);
    s.ctl = Control::new(StrategyConfig::default().build(1), None, burst25());
    s.ctl.set_capacity(Some(200.0));
    // Twelve cold items written: what the probe proves the table admits at
    // once is twelve, so only the parted table's cap holds the eight that
    // go again to four a request.
    let mut ids: Vec<String> = (0..8).map(|i| format!("h{i}")).collect();
    ids.extend((0..12).map(|i| format!("c{i}")));
    let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
    let first = s.batch(&values(&ids));
    s.write(first).await.unwrap();
    let report = s.ctl.report();
    assert_eq!(report.hot_keys, 0, "{report:?}");
    assert!(report.hot_rate.is_none());
    let sizes: Vec<usize> = s.sink.calls().iter().map(|c| c.ids.len()).collect();
    assert_eq!(sizes[0], 20, "the probe carries the whole batch: {sizes:?}");
    assert!(
        sizes.len() >= 3 && sizes[1..].iter().all(|n| *n <= 4),
        "the eight refused go again four at most: {sizes:?}"
    );
    assert_eq!(sizes.iter().sum::<usize>(), 20 + 8);
}

#[tokio::test(start_paused = true)]
async fn items_an_index_refused_are_the_tables_signal_not_a_hot_range() {
    // The first answer leaves the items that carry the index's key `g`
    // unprocessed and writes those after them that do not: the pattern a
    // key range leaves, but an index with a capacity of its own reaches
    // exactly those items. No key is paced apart (the table's strategy
    // hears it).
    let written = |with_index: bool| async move {
        let mut s = hot_setup(|_, _| BatchOutcome::default());
        if with_index {
            s.ctl
                .set_indexes([IndexInfo::new("by_g", Some(150.0), &["g"])]);
        }
        let values: Vec<String> = ["h0", "h1", "c0", "c1"]
            .iter()
            .map(|id| match id.starts_with('h') {
                true => format!(r#"{{"id":"{id}","g":"x"}}"#),
                false => format!(r#"{{"id":"{id}"}}"#),
            })
            .collect();
        let batch = s.batch(&values);
        s.write(batch).await.unwrap();
        s.ctl.report()
    };
    let after = written(true).await;
    assert_eq!(after.hot_keys, 0, "no key paced apart: {after:?}");
    assert!(after.hot_rate.is_none());
    // Without the index, the same answer is a key range's.
    let after = written(false).await;
    assert!(after.hot_keys > 0, "{after:?}");
}

#[tokio::test(start_paused = true)]
async fn a_table_that_runs_out_is_heard_by_the_table_not_the_hot_range() {
    // The third call: every item comes back, a hot one first, cold ones
    // after it. The table ran out: nothing says a key range refused.
    let mut s = hot_setup(|n, items| match n {
        2 => unprocessed(items, |_| true),
        _ => BatchOutcome::default(),
    });
    let first = s.batch(&values(&["h0", "c0", "c1", "c2"]));
    s.write(first).await.unwrap();
    let calls = s.sink.calls().len();
    assert_eq!(calls, 2, "h0 went again alone");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = s.ctl.report();
    let (hot_before, table_before) = (before.hot_rate.unwrap(), before.pacing_rate.unwrap());
    let next = s.batch(&values(&["c3", "h0", "c4"]));
    s.write(next).await.unwrap();
    let after = s.ctl.report();
    let calls = s.sink.calls();
    assert_eq!(calls[2].ids, ["h0", "c3", "c4"]);
    assert!(calls.len() >= 4, "all of it went again");
    assert!(
        after.hot_rate.unwrap() >= hot_before,
        "the hot range was not cut: {hot_before} -> {:?}",
        after.hot_rate
    );
    assert!(
        after.pacing_rate.unwrap() < table_before,
        "the table heard it: {table_before} -> {:?}",
        after.pacing_rate
    );
}

#[tokio::test(start_paused = true)]
async fn hot_slots_held_back_leave_the_requests_room_to_the_cold_ones() {
    // A hot range is found (h0-h3 refused, the cold items after them
    // written); then the table admits 4 items at once (the parted table's
    // cap at 200 WCU/s is 4 as well).
    let mut s = hot_setup(|n, items| match n {
        1 => admitting_first(4, items),
        _ => BatchOutcome::default(),
    });
    let first = s.batch(&values(&["h0", "h1", "h2", "h3", "c0", "c1", "c2", "c3"]));
    s.write(first).await.unwrap();
    let cold: Vec<String> = (0..10).map(|i| format!("w{i}")).collect();
    let cold: Vec<&str> = cold.iter().map(String::as_str).collect();
    let sized = s.batch(&values(&cold));
    s.write(sized).await.unwrap();
    assert_eq!(s.ctl.max_request_units(), Some(4.0), "requests of 4 units");
    tokio::time::sleep(Duration::from_secs(1)).await;
    // Four hot keys first in the batch, only some of them due at once: the
    // held ones do not take the request's room.
    let before = s.sink.calls().len();
    let next = s.batch(&values(&[
        "h0", "h1", "h2", "h3", "d0", "d1", "d2", "d3", "d4", "d5",
    ]));
    s.write(next).await.unwrap();
    let calls = s.sink.calls();
    let first_of_batch = &calls[before].ids;
    assert_eq!(first_of_batch.len(), 4, "{first_of_batch:?}");
    assert_eq!(first_of_batch[0], "h0", "the due hot item first");
    let cold_requests = calls[before..]
        .iter()
        .filter(|c| c.ids.iter().any(|id| id.starts_with('d')))
        .count();
    assert!(
        cold_requests <= 3,
        "six cold items in requests of four, beside hot ones as they come due: {:?}",
        calls[before..].iter().map(|c| &c.ids).collect::<Vec<_>>()
    );
}
