//! The consumer group's backlog, read off the poll loop.
//!
//! The throttle control divides a table's capacity by backlog, and a batch
//! worker that is done waits for the group's other partitions. Both need the
//! group's committed offsets and every partition's end offset. Those are
//! broker round trips (one OffsetFetch, one ListOffsets per partition).
//! Reading them inside the source's poll loop blocked it for up to a second
//! per call, and a rebalance waits for every member to poll.
//!
//! So a thread with its own Kafka client reads them: same group id, never
//! subscribed, so it never joins the group or commits. It reads every
//! `every`, or every `hurried` while the source waits for the group
//! ([`BacklogReader::hurry`]). The poll loop only takes the latest reading
//! ([`BacklogReader::take`]), which never blocks.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::KafkaError;
use rdkafka::{Offset, TopicPartitionList};
use tracing::{debug, info, warn};

use crate::offsets::TopicPartition;

/// One reading of the group's position on every partition of its topics.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GroupView {
    /// Records between the group's position and the end, per partition.
    pub backlog: HashMap<TopicPartition, i64>,
    /// Each partition's end offset.
    pub ends: HashMap<TopicPartition, i64>,
    /// The group's committed offset (or where the reset policy starts it).
    pub positions: HashMap<TopicPartition, i64>,
}

/// How often the backlog is read, and how long each call may take.
#[derive(Debug, Clone, Copy)]
pub struct Cadence {
    pub every: Duration,
    /// While hurried (a done batch worker waiting for its group).
    pub hurried: Duration,
    /// Longest wait of each broker call (a slow answer skips one reading).
    pub call_timeout: Duration,
}

/// Where the group is (or starts) on a partition: its committed offset, or
/// where the reset policy starts one it never committed, or whose committed
/// offset is outside the partition's range (the topic was recreated, or
/// retention deleted the records): the consumer resets those too, so the
/// caught-up test must not take the stale offset for a position.
pub fn group_start(
    committed: &TopicPartitionList,
    topic: &str,
    partition: i32,
    (low, high): (i64, i64),
    starts_at_end: bool,
) -> i64 {
    match committed
        .find_partition(topic, partition)
        .map(|e| e.offset())
    {
        Some(Offset::Offset(o)) if (low..=high).contains(&o) => o,
        _ if starts_at_end => high,
        _ => low,
    }
}

/// The group's committed offsets for `parts`.
pub fn group_offsets<X: ConsumerContext, C: Consumer<X>>(
    consumer: &C,
    parts: &[TopicPartition],
    timeout: Duration,
) -> Result<TopicPartitionList, KafkaError> {
    let mut tpl = TopicPartitionList::new();
    for (t, p) in parts {
        tpl.add_partition(t, *p);
    }
    consumer.committed_offsets(tpl, timeout)
}

/// Reads the group's view of `parts` once.
pub fn read<X: ConsumerContext, C: Consumer<X>>(
    consumer: &C,
    parts: &[TopicPartition],
    starts_at_end: bool,
    timeout: Duration,
) -> Result<GroupView, KafkaError> {
    let committed = group_offsets(consumer, parts, timeout)?;
    let mut v = GroupView::default();
    for (t, p) in parts {
        let (low, high) = consumer.fetch_watermarks(t, *p, timeout)?;
        let group = group_start(&committed, t, *p, (low, high), starts_at_end);
        let tp = (t.clone(), *p);
        v.backlog.insert(tp.clone(), (high - group).max(0));
        v.ends.insert(tp.clone(), high);
        v.positions.insert(tp, group);
    }
    Ok(v)
}

/// Readings that have failed for this long in a row are warned about
/// (a broker call may fail now and then: a coordinator moving, a
/// rebalance), and again every `WARN_EVERY` while they go on. A batch
/// worker waits on these readings to see its group done; a reader that
/// keeps failing must show at the default log level.
const WARN_AFTER: Duration = Duration::from_secs(15);
const WARN_EVERY: Duration = Duration::from_secs(60);

/// Whether a reading that failed, `failing_for` into a run of failures,
/// is warned about, the last warning of the run `since_warned` ago (None:
/// none yet). Pure.
fn warn_now(failing_for: Duration, since_warned: Option<Duration>) -> bool {
    failing_for >= WARN_AFTER && since_warned.is_none_or(|d| d >= WARN_EVERY)
}

#[derive(Default)]
struct Shared {
    latest: Mutex<Option<GroupView>>,
    hurry: AtomicBool,
    stop: AtomicBool,
}

/// The reading thread; stops when dropped.
pub struct BacklogReader {
    shared: Arc<Shared>,
}

impl BacklogReader {
    /// Starts reading `parts` with a client built from `config` (the source's
    /// own settings: same brokers, same group id).
    pub fn spawn(
        config: &ClientConfig,
        context: crate::msk_iam::AuthContext,
        parts: Vec<TopicPartition>,
        starts_at_end: bool,
        cadence: Cadence,
    ) -> Result<Self, KafkaError> {
        let consumer: BaseConsumer<crate::msk_iam::AuthContext> =
            config.create_with_context(context)?;
        let shared = Arc::new(Shared::default());
        let s = shared.clone();
        std::thread::Builder::new()
            .name("ingest-backlog".into())
            .spawn(move || {
                let mut last: Option<Instant> = None;
                // Since when readings have failed in a row, and the last
                // warning of that run.
                let (mut failing, mut warned): (Option<Instant>, Option<Instant>) = (None, None);
                while !s.stop.load(SeqCst) {
                    let every = if s.hurry.load(SeqCst) {
                        cadence.hurried
                    } else {
                        cadence.every
                    };
                    // Serves the client's queue: librdkafka's logs and
                    // errors, and OAUTHBEARER token refreshes (MSK IAM),
                    // without which it never logs in.
                    let _ = consumer.poll(Duration::ZERO);
                    if last.is_some_and(|t| t.elapsed() < every) {
                        let _ = consumer.poll(Duration::from_millis(50));
                        continue;
                    }
                    last = Some(Instant::now());
                    match read(&consumer, &parts, starts_at_end, cadence.call_timeout) {
                        Ok(v) => {
                            *s.latest.lock() = Some(v);
                            if let (Some(since), Some(_)) = (failing.take(), warned.take()) {
                                info!(failed_for_s = since.elapsed().as_secs(),
                                    "the group's backlog is readable again");
                            }
                        }
                        Err(e) => {
                            let since = *failing.get_or_insert_with(Instant::now);
                            if warn_now(since.elapsed(), warned.map(|w| w.elapsed())) {
                                warned = Some(Instant::now());
                                warn!(error = %e, failing_for_s = since.elapsed().as_secs(),
                                    "cannot read the group's backlog, again and again: shares, and batch mode's view of the group's progress, are as of the last reading");
                            } else {
                                debug!(error = %e, "cannot read the group's backlog");
                            }
                        }
                    }
                }
            })
            .map_err(|e| KafkaError::ClientCreation(format!("backlog reader thread: {e}")))?;
        Ok(Self { shared })
    }

    /// The reading made since the last call, if any.
    pub fn take(&self) -> Option<GroupView> {
        self.shared.latest.lock().take()
    }

    /// Read every `hurried` instead of every `every` while `on`.
    pub fn hurry(&self, on: bool) {
        self.shared.hurry.store(on, SeqCst);
    }
}

impl Drop for BacklogReader {
    fn drop(&mut self) {
        // Not joined: a broker call under way may take `call_timeout`; the
        // thread exits after it.
        self.shared.stop.store(true, SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reader_that_keeps_failing_is_warned_about_now_and_then() {
        let s = Duration::from_secs;
        assert!(!warn_now(s(14), None), "a few failures pass quietly");
        assert!(warn_now(s(15), None));
        assert!(!warn_now(s(40), Some(s(25))), "not again within a minute");
        assert!(warn_now(s(75), Some(s(60))));
    }

    #[test]
    fn the_group_starts_where_it_committed_or_where_the_reset_policy_says() {
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset("t", 0, Offset::Offset(42))
            .unwrap();
        tpl.add_partition_offset("t", 1, Offset::Invalid).unwrap();
        assert_eq!(group_start(&tpl, "t", 0, (10, 90), false), 42);
        assert_eq!(group_start(&tpl, "t", 1, (10, 90), false), 10);
        assert_eq!(group_start(&tpl, "t", 1, (10, 90), true), 90);
        assert_eq!(group_start(&tpl, "t", 2, (10, 90), true), 90, "absent");
    }

    #[test]
    fn a_committed_offset_outside_the_partition_is_reset_by_the_policy() {
        // The topic was recreated with fewer records, or retention passed it.
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset("t", 0, Offset::Offset(5_000))
            .unwrap();
        tpl.add_partition_offset("t", 1, Offset::Offset(3)).unwrap();
        assert_eq!(group_start(&tpl, "t", 0, (0, 90), false), 0);
        assert_eq!(group_start(&tpl, "t", 0, (0, 90), true), 90);
        assert_eq!(group_start(&tpl, "t", 1, (10, 90), false), 10);
        assert_eq!(
            group_start(&tpl, "t", 0, (0, 5_000), false),
            5_000,
            "at the end is in range"
        );
    }
}
