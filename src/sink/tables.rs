//! The tables the routes write to: each route's table and key schema
//! (DescribeTable, checked against the configured key), one throttle
//! [`Control`] per table shared by its writers, the capacity poll that keeps
//! it current (auto scaling; early after a throttle), and this worker's share
//! of each table, followed from the source's assignment and backlog.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinSet;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::{Sink, TableInfo, WriteError};
use crate::config::{check_kafka_key_schema, Route, Settings};
use crate::decode::{KeyMode, KeySchema};
use crate::offsets::TopicPartition;
use crate::ops::live::Live;
use crate::ops::prom::Exporter;
use crate::source::Assignment;
use crate::telemetry::Counters;
use crate::throttle::control::Control;
use crate::throttle::simple::Exponential;

#[derive(Debug, thiserror::Error)]
pub enum TableError {
    #[error("table {table} (route of topic {topic}): {source}")]
    Describe {
        table: String,
        topic: String,
        source: WriteError,
    },
    #[error("table {table}: configured key {configured} differs from the table's key {actual}")]
    KeyMismatch {
        table: String,
        configured: String,
        actual: String,
    },
    #[error("table {table}: key_mode = \"kafka\" {rule}")]
    KafkaKeyMode { table: String, rule: String },
}

/// A table as the writers see it.
#[derive(Debug)]
pub struct Table {
    pub name: Arc<str>,
    pub schema: KeySchema,
    /// Throttle strategy, pacer and capacity, shared by the table's writers.
    pub control: Arc<Control>,
}

/// A topic's route, resolved.
#[derive(Debug, Clone)]
pub struct Resolved {
    pub table: Arc<Table>,
    pub key_mode: KeyMode,
}

/// Routes by topic.
pub type Routes = HashMap<String, Resolved>;

/// Finds each route's table and key schema (DescribeTable), checking the
/// configured key, if any, against the table's.
pub async fn resolve_routes(
    sink: &dyn Sink,
    settings: &Settings,
    seed: u64,
    exporter: Option<&Exporter>,
) -> Result<Routes, TableError> {
    let mut tables: HashMap<String, Arc<Table>> = HashMap::new();
    let mut routes = HashMap::new();
    for Route {
        topic,
        table,
        key_mode,
        key,
        ..
    } in &settings.routes
    {
        let resolved = match tables.get(table) {
            Some(t) => t.clone(),
            None => {
                let info = describe_patiently(sink, table, settings.dynamodb.start_patience, seed)
                    .await
                    .map_err(|source| TableError::Describe {
                        table: table.clone(),
                        topic: topic.clone(),
                        source,
                    })?;
                if let Some(configured) = key {
                    if configured != &info.key {
                        return Err(TableError::KeyMismatch {
                            table: table.clone(),
                            configured: configured.to_string(),
                            actual: info.key.to_string(),
                        });
                    }
                }
                let th = &settings.throttle;
                let strategy = th.strategy.build(seed ^ tables.len() as u64);
                let control = Control::new(strategy, th.pacing_rate, th.pacing_burst)
                    .with_budget(settings.budget_for(table))
                    .with_hot_keys(th.hot_keys)
                    .with_latency(exporter.map(|e| e.latency(table)));
                control.set_capacity(info.limit());
                control.set_indexes(info.indexes.iter().cloned());
                control.set_warm(info.warm);
                let t = Arc::new(Table {
                    name: table.as_str().into(),
                    schema: info.key,
                    control: Arc::new(control),
                });
                tables.insert(table.clone(), t.clone());
                t
            }
        };
        if *key_mode == KeyMode::Kafka {
            check_kafka_key_schema(&resolved.schema).map_err(|rule| TableError::KafkaKeyMode {
                table: table.clone(),
                rule,
            })?;
        }
        let budget = settings.budget_for(table);
        // What the writes are paced to, and the index that bounds it (before
        // any write, every write is taken to cost each index what it costs
        // the table).
        let report = resolved.control.report();
        info!(
            topic,
            table,
            key = %resolved.schema,
            budget_fraction = budget.fraction,
            budget_wcu = budget.wcu,
            capacity = report.capacity,
            index_bound = report.index_bound,
            "route ready"
        );
        routes.insert(
            topic.clone(),
            Resolved {
                table: resolved,
                key_mode: *key_mode,
            },
        );
    }
    Ok(routes)
}

/// DescribeTable, retrying transient failures and throttles for up to
/// `patience` (a worker restarted during an outage waits for DynamoDB
/// instead of failing at once); other errors fail at once.
async fn describe_patiently(
    sink: &dyn Sink,
    table: &str,
    patience: Duration,
    seed: u64,
) -> Result<TableInfo, WriteError> {
    let give_up = Instant::now() + patience;
    let mut backoff = Exponential::transient(seed);
    loop {
        let answer = sink.describe(table).await;
        let Err(e @ (WriteError::Retryable(_) | WriteError::Throttled(..))) = &answer else {
            return answer;
        };
        let delay = backoff.next_failure();
        if Instant::now() + delay >= give_up {
            return answer;
        }
        warn!(table, error = %e, retry_in_ms = delay.as_millis() as u64, "DescribeTable failed; retrying");
        tokio::time::sleep(delay).await;
    }
}

/// Each table once.
pub fn distinct_tables(routes: &Routes) -> Vec<Arc<Table>> {
    let mut out: Vec<Arc<Table>> = Vec::new();
    for r in routes.values() {
        if !out.iter().any(|t| Arc::ptr_eq(t, &r.table)) {
            out.push(r.table.clone());
        }
    }
    out
}

/// Every 10 s, one line per table with the throttle control's state.
pub async fn log_controls(tables: Vec<Arc<Table>>, counters: Arc<Counters>) {
    loop {
        tokio::time::sleep(Duration::from_secs(10)).await;
        let totals = counters.snapshot();
        for t in &tables {
            let r = t.control.report();
            info!(
                table = %t.name,
                strategy = r.strategy,
                pacing_rate = r.pacing_rate.unwrap_or(0.0),
                current_delay_s = r.current_delay_s,
                capacity = r.capacity.unwrap_or(0.0),
                share = r.share.unwrap_or(1.0),
                slept_s = r.slept_s,
                throttled_requests = totals.throttled_requests,
                unprocessed_items = totals.unprocessed_items,
                "throttle control"
            );
        }
    }
}

/// Keeps each table's share current: the worker's share of the work on the
/// topics routed to the table, by backlog and partitions (see
/// [`share`]; the adaptive strategy paces to it).
pub fn follow_assignment(
    mut rx: tokio::sync::watch::Receiver<Assignment>,
    routes: &Routes,
) -> impl std::future::Future<Output = ()> + Send + 'static {
    let tables: Vec<(Arc<Table>, Vec<String>)> = distinct_tables(routes)
        .into_iter()
        .map(|t| {
            let topics = routes
                .iter()
                .filter(|(_, r)| Arc::ptr_eq(&r.table, &t))
                .map(|(topic, _)| topic.clone())
                .collect();
            (t, topics)
        })
        .collect();
    async move {
        while rx.changed().await.is_ok() {
            let a = rx.borrow_and_update().clone();
            for (t, topics) in &tables {
                if let Some(s) = share(&a, topics) {
                    t.control.set_share(Some(s));
                }
                t.control.set_slot_parts(slot_parts(&a, topics));
            }
        }
    }
}

/// How often DynamoDB's reachability is checked when capacity is not polled.
const REACH_POLL: Duration = Duration::from_secs(5);

/// While writes are throttled, the capacity is re-read at most this often.
const THROTTLE_POLL: Duration = Duration::from_secs(1);

/// Re-reads each table's provisioned capacity every `every` (auto scaling
/// changes it), and early after a throttle (at most once a second), so a cut
/// is known within about a second; strategies that follow capacity see the
/// change. Each answer (or failure) also tells `/readyz` whether DynamoDB is
/// reachable; with `every` zero, the tables are described every 5 s for that
/// alone.
pub fn poll_capacity(
    sink: &Arc<dyn Sink>,
    tables: &[Arc<Table>],
    every: Duration,
    live: &Arc<Live>,
) -> JoinSet<()> {
    let mut set = JoinSet::new();
    let (period, follow) = if every.is_zero() {
        (REACH_POLL, false)
    } else {
        (every, true)
    };
    for t in tables {
        let (sink, t, live) = (sink.clone(), t.clone(), live.clone());
        set.spawn(async move {
            let mut last = Instant::now();
            loop {
                tokio::select! {
                    _ = tokio::time::sleep_until(last + period) => {}
                    // A throttle may mean the capacity was cut: look now (at
                    // most once per THROTTLE_POLL), not at the next period.
                    _ = t.control.throttled(), if follow => {
                        tokio::time::sleep_until(last + THROTTLE_POLL).await;
                    }
                }
                last = Instant::now();
                match sink.describe(&t.name).await {
                    Ok(info) => {
                        live.dynamo_ok();
                        if follow {
                            t.control.set_capacity(info.limit());
                            t.control.set_indexes(info.indexes.iter().cloned());
                            t.control.set_warm(info.warm);
                        }
                    }
                    Err(e) => {
                        debug!(table = %t.name, error = %e, "DescribeTable failed");
                        live.dynamo_err(format!("table {}: {e}", t.name));
                    }
                }
            }
        });
    }
    set
}

/// How many records of backlog one partition weighs in [`share`]
/// even when it has none: without a backlog, the share is the share of
/// partitions.
const PARTITION_WEIGHT: f64 = 100.0;

/// This worker's share of the work of `topics`: its backlog plus a base
/// weight per partition, over the group's. With a large backlog (a batch
/// job, a catch-up) it is the share of the records left, so a worker whose
/// peers are done takes the capacity they no longer use; with none it is
/// the share of partitions. None when the topics' partitions are unknown.
pub fn share(a: &Assignment, topics: &[String]) -> Option<f64> {
    let in_topics = |t: &str| topics.iter().any(|x| x == t);
    let total_parts: usize = topics.iter().filter_map(|t| a.partitions.get(t)).sum();
    if total_parts == 0 {
        return None;
    }
    let mine: Vec<&TopicPartition> = a.assigned.iter().filter(|(t, _)| in_topics(t)).collect();
    let lag = |tp: &TopicPartition| a.backlog.get(tp).copied().unwrap_or(0).max(0) as f64;
    let total_lag: f64 = a
        .backlog
        .iter()
        .filter(|((t, _), _)| in_topics(t))
        .map(|(tp, _)| lag(tp))
        .sum();
    let my_lag: f64 = mine.iter().map(|tp| lag(tp)).sum();
    let w = PARTITION_WEIGHT;
    Some((my_lag + w * mine.len() as f64) / (total_lag + w * total_parts as f64))
}

/// This worker's parts of the fleet's time slots on the table fed by
/// `topics`: each partition of the topics (by topic name, then number: the
/// same order in every worker) owns a part of the period as large as its
/// weight in [`share`], and the worker's are those of its partitions,
/// adjacent ones merged. So the parts' width is the share, and the parts
/// of the group tile the period. None when the partitions are unknown.
pub fn slot_parts(a: &Assignment, topics: &[String]) -> Option<Vec<(f64, f64)>> {
    let mut topics: Vec<&String> = topics.iter().collect();
    topics.sort();
    topics.dedup();
    let weight = |tp: &TopicPartition| {
        a.backlog.get(tp).copied().unwrap_or(0).max(0) as f64 + PARTITION_WEIGHT
    };
    let all: Vec<TopicPartition> = topics
        .iter()
        .flat_map(|t| {
            let n = a.partitions.get(*t).copied().unwrap_or(0);
            (0..n as i32).map(move |p| ((*t).clone(), p))
        })
        .collect();
    let total: f64 = all.iter().map(weight).sum();
    if all.is_empty() || total <= 0.0 {
        return None;
    }
    let mut parts: Vec<(f64, f64)> = Vec::new();
    let mut at = 0.0;
    for tp in &all {
        let end = at + weight(tp) / total;
        if a.assigned.contains(tp) {
            match parts.last_mut() {
                Some(last) if (last.1 - at).abs() < 1e-12 => last.1 = end,
                _ => parts.push((at, end)),
            }
        }
        at = end;
    }
    Some(parts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn assignment(mine: &[i32], backlog: &[i64]) -> Assignment {
        Assignment {
            assigned: mine.iter().map(|p| ("t".to_string(), *p)).collect(),
            partitions: HashMap::from([("t".to_string(), backlog.len())]),
            backlog: backlog
                .iter()
                .enumerate()
                .map(|(p, n)| (("t".to_string(), p as i32), *n))
                .collect(),
        }
    }

    fn share_of(a: &Assignment) -> f64 {
        share(a, &["t".to_string()]).unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn a_table_is_described_again_through_an_outage_until_patience_runs_out() {
        use crate::sink::fake::FakeSink;
        let key = KeySchema {
            hash: crate::decode::KeyAttr {
                name: "id".into(),
                kind: crate::decode::KeyType::S,
            },
            range: None,
        };
        let mut sink = FakeSink::accepting();
        sink.tables.insert(
            "t".into(),
            TableInfo {
                key,
                capacity: Some(100.0),
                max_write: None,
                warm: None,
                indexes: Vec::new(),
            },
        );
        // Unavailable for 5 s, then back: found.
        *sink.describe_down_until.lock() =
            Some(tokio::time::Instant::now() + Duration::from_secs(5));
        let patience = Duration::from_secs(60);
        let info = describe_patiently(&sink, "t", patience, 1).await.unwrap();
        assert_eq!(info.capacity, Some(100.0));
        // Unavailable for longer than the patience: the last error, in time.
        let started = tokio::time::Instant::now();
        *sink.describe_down_until.lock() = Some(started + Duration::from_secs(600));
        let err = describe_patiently(&sink, "t", patience, 1)
            .await
            .unwrap_err();
        assert!(matches!(err, WriteError::Retryable(_)), "{err}");
        assert!(started.elapsed() <= patience, "{:?}", started.elapsed());
        // A missing table fails at once.
        *sink.describe_down_until.lock() = None;
        let started = tokio::time::Instant::now();
        assert!(matches!(
            describe_patiently(&sink, "nope", patience, 1).await,
            Err(WriteError::Fatal(_))
        ));
        assert_eq!(started.elapsed(), Duration::ZERO);
    }

    #[test]
    fn the_groups_slot_parts_tile_the_period_each_as_wide_as_its_share() {
        let backlog = [500, 0, 1_200, 40, 0, 900];
        let workers: [&[i32]; 3] = [&[0, 1], &[2, 5], &[3, 4]];
        let mut all: Vec<(f64, f64)> = Vec::new();
        for mine in workers {
            let a = assignment(mine, &backlog);
            let parts = slot_parts(&a, &["t".to_string()]).unwrap();
            let width: f64 = parts.iter().map(|(s, e)| e - s).sum();
            assert!((width - share_of(&a)).abs() < 1e-9, "{parts:?}");
            all.extend(parts);
        }
        // Partitions 0 and 1 are adjacent: one part.
        assert_eq!(
            slot_parts(&assignment(&[0, 1], &backlog), &["t".to_string()])
                .unwrap()
                .len(),
            1
        );
        all.sort_by(|a, b| a.0.total_cmp(&b.0));
        assert_eq!(all[0].0, 0.0);
        for w in all.windows(2) {
            assert!((w[0].1 - w[1].0).abs() < 1e-9, "gap or overlap: {all:?}");
        }
        assert!((all.last().unwrap().1 - 1.0).abs() < 1e-9);
        assert_eq!(slot_parts(&assignment(&[], &[]), &["t".to_string()]), None);
    }

    #[test]
    fn without_a_backlog_the_share_is_the_share_of_partitions() {
        assert!((share_of(&assignment(&[0, 1], &[0; 6])) - 2.0 / 6.0).abs() < 1e-12);
        let unknown = Assignment {
            backlog: HashMap::new(),
            ..assignment(&[0], &[0, 0, 0])
        };
        assert!((share_of(&unknown) - 1.0 / 3.0).abs() < 1e-12);
        assert_eq!(share(&assignment(&[], &[]), &["t".to_string()]), None);
    }

    #[test]
    fn with_a_backlog_the_share_follows_the_records_left() {
        // Even backlogs: the share of partitions.
        let even = assignment(&[0, 1], &[5_000; 6]);
        assert!((share_of(&even) - 2.0 / 6.0).abs() < 1e-12);
        // Peers done, this worker's partitions still full: nearly all of it.
        let last = assignment(&[0, 1], &[5_000, 5_000, 0, 0, 0, 0]);
        assert!(share_of(&last) > 0.95, "{}", share_of(&last));
        // This worker done, peers busy: little, never nothing.
        let done = assignment(&[0, 1], &[0, 0, 5_000, 5_000, 5_000, 5_000]);
        assert!(share_of(&done) > 0.0 && share_of(&done) < 0.02);
        // Shares of all the group's workers add up to 1.
        let b = [900, 100, 3_000, 0, 40, 7];
        let sum: f64 = [&[0, 1][..], &[2, 3], &[4, 5]]
            .iter()
            .map(|m| share_of(&assignment(m, &b)))
            .sum();
        assert!((sum - 1.0).abs() < 1e-12);
    }
}
