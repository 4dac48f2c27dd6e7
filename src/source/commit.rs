//! The consumer calls both the poll loop and the rebalance callbacks make:
//! commit the acked watermarks, and pause or resume partitions as planned.

use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext};
use rdkafka::error::KafkaError;
use rdkafka::{Offset, TopicPartitionList};

use super::pausing::Plan;
use crate::acks::Acks;
use crate::offsets::TopicPartition;
use crate::telemetry::{events, Counters};

/// Pauses and resumes partitions as planned.
pub(super) fn apply<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    plan: &Plan,
) -> Result<(), KafkaError> {
    let list = |tps: &[TopicPartition]| {
        let mut tpl = TopicPartitionList::new();
        for (t, p) in tps {
            tpl.add_partition(t, *p);
        }
        tpl
    };
    if !plan.pause.is_empty() {
        consumer.pause(&list(&plan.pause))?;
    }
    if !plan.resume.is_empty() {
        consumer.resume(&list(&plan.resume))?;
    }
    Ok(())
}

/// Commits the watermarks that moved (optionally only for some partitions).
pub(super) fn commit<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    acks: &Acks,
    counters: &Counters,
    only: Option<&[TopicPartition]>,
) -> Result<(), KafkaError> {
    let due: Vec<(TopicPartition, i64)> = acks
        .lock()
        .to_commit()
        .into_iter()
        .filter(|(tp, _)| only.is_none_or(|o| o.contains(tp)))
        .collect();
    if due.is_empty() {
        return Ok(());
    }
    let mut tpl = TopicPartitionList::new();
    for ((t, p), o) in &due {
        tpl.add_partition_offset(t, *p, Offset::Offset(*o))?;
    }
    consumer.commit(&tpl, CommitMode::Sync)?;
    let mut tracker = acks.lock();
    for ((t, p), o) in &due {
        tracker.mark_committed(t, *p, *o);
    }
    drop(tracker);
    events::committed(counters, &due);
    Ok(())
}
