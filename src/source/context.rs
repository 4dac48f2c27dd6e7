//! The consumer's context: librdkafka calls it from `poll`. Rebalance
//! callbacks drain the revoked partitions' in-flight writes (up to the drain
//! deadline), commit and forget them; assignments start tracking. Stats give
//! each held partition's consumer lag.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, Rebalance};
use rdkafka::{ClientContext, TopicPartitionList};
use tracing::warn;

use super::commit::{apply, commit};
use super::pausing::Pausing;
use super::{fmt_tps, tps_of, Assignment};
use crate::acks::Acks;
use crate::offsets::TopicPartition;
use crate::ops::live::Live;
use crate::record::Record;
use crate::telemetry::{events, Counters};

/// How many distinct librdkafka errors a context keeps.
const ERRORS_KEPT: usize = 3;

pub(super) struct Ctx {
    pub(super) acks: Arc<Acks>,
    pub(super) held: Mutex<VecDeque<Record>>,
    /// Which partitions are held paused, and why.
    pub(super) pausing: Mutex<Pausing>,
    pub(super) closing: AtomicBool,
    pub(super) assigned_once: AtomicBool,
    /// Since when the worker has held no partition while waiting for an
    /// assignment (from the subscription, or the last revocation). Between a
    /// revocation and the next assignment (eager rebalancing) the worker holds
    /// nothing, which must not read as "caught up".
    pub(super) unassigned_since: Mutex<Option<Instant>>,
    pub(super) drain_timeout: Duration,
    /// End offset seen at assignment, per partition; absent until learnt.
    pub(super) targets: Mutex<HashMap<TopicPartition, i64>>,
    /// Partitions whose start position and end offset are still to be learnt.
    pub(super) to_learn: Mutex<Vec<TopicPartition>>,
    pub(super) counters: Arc<Counters>,
    /// Each source topic's partition count (from the metadata at start).
    pub(super) partitions: Mutex<HashMap<String, usize>>,
    pub(super) assignment: tokio::sync::watch::Sender<Assignment>,
    pub(super) live: Arc<Live>,
    /// The last few distinct errors librdkafka reported about the cluster
    /// (say, a TLS handshake refused): named when it cannot be reached.
    pub(super) errors: Mutex<Vec<String>>,
    /// MSK IAM tokens for OAUTHBEARER refreshes, if the worker uses them.
    pub(super) tokens: Option<Arc<crate::msk_iam::MskIamTokens>>,
}

impl ClientContext for Ctx {
    const ENABLE_REFRESH_OAUTH_TOKEN: bool = true;

    fn generate_oauth_token(
        &self,
        _config: Option<&str>,
    ) -> Result<rdkafka::client::OAuthToken, Box<dyn std::error::Error>> {
        crate::msk_iam::refresh(self.tokens.as_deref(), "consumer")
    }

    fn error(&self, error: rdkafka::error::KafkaError, reason: &str) {
        warn!(error = %error, reason, "librdkafka error");
        self.note_error(reason);
    }

    /// librdkafka's log lines, at their level; errors and warnings are also
    /// kept (they come from its threads, before any poll: a refused TLS
    /// handshake is told here first).
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        use RDKafkaLogLevel as L;
        match level {
            L::Emerg | L::Alert | L::Critical | L::Error => {
                tracing::error!(target: "librdkafka", "librdkafka: {fac} {message}");
            }
            L::Warning => tracing::warn!(target: "librdkafka", "librdkafka: {fac} {message}"),
            L::Notice | L::Info => {
                tracing::info!(target: "librdkafka", "librdkafka: {fac} {message}");
            }
            L::Debug => tracing::debug!(target: "librdkafka", "librdkafka: {fac} {message}"),
        }
        if level as i32 <= L::Warning as i32 {
            self.note_error(message);
        }
    }

    /// Consumer lag of each held partition (librdkafka: end offset minus the
    /// committed offset), for the metrics endpoint.
    fn stats(&self, stats: rdkafka::Statistics) {
        let mut lag = std::collections::BTreeMap::new();
        for (name, topic) in &stats.topics {
            for p in topic.partitions.values() {
                if p.partition >= 0 && p.desired && p.consumer_lag >= 0 {
                    lag.insert((name.clone(), p.partition), p.consumer_lag);
                }
            }
        }
        self.live.set_lag(lag);
    }
}

impl ConsumerContext for Ctx {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Revoke(tpl) => {
                *self.unassigned_since.lock() = Some(Instant::now());
                self.on_revoke(consumer, tpl)
            }
            Rebalance::Error(e) => warn!(error = %e, "rebalance error"),
            Rebalance::Assign(_) => {}
        }
    }

    fn post_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Assign(tpl) = rebalance {
            let tps = tps_of(tpl);
            {
                let mut tracker = self.acks.lock();
                for (t, p) in &tps {
                    tracker.assign(t, *p, None);
                }
            }
            self.to_learn.lock().extend(tps.iter().cloned());
            let plan = self.pausing.lock().plan(&tps, Instant::now());
            if let Err(e) = apply(consumer, &plan) {
                warn!(error = %e, "cannot pause or resume newly assigned partitions");
            }
            self.assigned_once.store(true, SeqCst);
            *self.unassigned_since.lock() = None;
            self.publish_assignment();
            events::assigned(&fmt_tps(&tps));
        }
    }
}

impl Ctx {
    /// Keeps `message` among the last [`ERRORS_KEPT`] distinct errors.
    fn note_error(&self, message: &str) {
        keep_error(&mut self.errors.lock(), message);
    }

    /// The errors kept, oldest first, as " (librdkafka: a; b)", or empty.
    pub(super) fn errors_told(&self) -> String {
        let errors = self.errors.lock();
        if errors.is_empty() {
            String::new()
        } else {
            format!(" (librdkafka: {})", errors.join("; "))
        }
    }

    pub(super) fn new(
        acks: Arc<Acks>,
        counters: Arc<Counters>,
        drain_timeout: Duration,
        assignment: tokio::sync::watch::Sender<Assignment>,
        live: Arc<Live>,
    ) -> Self {
        Ctx {
            acks,
            held: Mutex::new(VecDeque::new()),
            pausing: Mutex::new(Pausing::new(super::poller::PAUSE_GRACE)),
            errors: Mutex::new(Vec::new()),
            tokens: None,
            closing: AtomicBool::new(false),
            assigned_once: AtomicBool::new(false),
            unassigned_since: Mutex::new(Some(Instant::now())),
            drain_timeout,
            targets: Mutex::new(HashMap::new()),
            to_learn: Mutex::new(Vec::new()),
            counters,
            partitions: Mutex::new(HashMap::new()),
            assignment,
            live,
        }
    }

    /// Drains the revoked partitions' in-flight records, commits, forgets them.
    pub(super) fn on_revoke(&self, consumer: &BaseConsumer<Self>, tpl: &TopicPartitionList) {
        let tps = tps_of(tpl);
        self.drop_held(|t, p| tps.iter().any(|(tt, pp)| tt == t && *pp == p));
        let wait = if self.closing.load(SeqCst) {
            Duration::ZERO
        } else {
            self.drain_timeout
        };
        // Writes under way finish (retrying while an attempt fits before the
        // deadline); records not yet being written are abandoned.
        let deadline = Instant::now() + wait;
        self.acks.close_until(&tps, deadline);
        let drained = self.acks.wait_until(deadline, |t| {
            tps.iter().all(|(topic, p)| t.pending(topic, *p) == 0)
        });
        if !drained {
            warn!(partitions = %fmt_tps(&tps), "revoked partitions not drained in time; unwritten records will be redelivered to the next owner");
        }
        if consumer.assignment_lost() {
            events::assignment_lost(&self.counters);
        } else if let Err(e) = commit(consumer, &self.acks, &self.counters, Some(&tps)) {
            warn!(error = %e, "commit on revocation failed");
        }
        {
            let tracker = self.acks.lock();
            let mut targets = self.targets.lock();
            for (t, p) in &tps {
                // At the final unsubscribe the run's progress keeps them.
                match tracker.watermark(t, *p) {
                    Some(at) if self.closing.load(SeqCst) => self.live.left((t.clone(), *p), at),
                    _ => self.live.forget(&(t.clone(), *p)),
                }
                targets.remove(&(t.clone(), *p));
            }
        }
        self.acks.revoke(&tps);
        self.publish_assignment();
        events::revoked(&fmt_tps(&tps));
    }

    pub(super) fn publish_assignment(&self) {
        let backlog = self.assignment.borrow().backlog.clone();
        let a = Assignment {
            assigned: self.acks.lock().assigned(),
            partitions: self.partitions.lock().clone(),
            backlog,
        };
        self.assignment.send_replace(a);
    }

    /// Drops held (not yet forwarded) records matching `which`, untracking them.
    pub(super) fn drop_held(&self, which: impl Fn(&str, i32) -> bool) {
        let mut held = self.held.lock();
        let mut tracker = self.acks.lock();
        held.retain(|r| {
            let drop = which(&r.at.topic, r.at.partition);
            if drop {
                tracker.untrack_from(&r.at.topic, r.at.partition, r.at.offset);
            }
            !drop
        });
    }
}

/// Keeps `message` as the newest of the last [`ERRORS_KEPT`] distinct
/// errors. librdkafka tells one failure twice (its log line and its error
/// event) and again at each retry, differing only in a suffix such as
/// " (after 3ms in state SSL_HANDSHAKE, 2 identical error(s) suppressed)":
/// messages alike but for it are one error, kept in its newest words.
fn keep_error(errors: &mut Vec<String>, message: &str) {
    let core = |m: &str| {
        m.rfind(" (after ")
            .map_or(m, |i| &m[..i])
            .trim()
            .to_string()
    };
    let this = core(message);
    if this.is_empty() {
        return;
    }
    errors.retain(|e| core(e) != this);
    errors.push(message.to_string());
    let over = errors.len().saturating_sub(ERRORS_KEPT);
    errors.drain(..over);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_failure_told_again_and_again_is_kept_once() {
        let mut kept = Vec::new();
        let failed = "ssl://b:9093/bootstrap: SSL handshake failed: certificate verify failed";
        keep_error(&mut kept, "1/1 brokers are down");
        keep_error(
            &mut kept,
            &format!("{failed} (after 2ms in state SSL_HANDSHAKE)"),
        );
        keep_error(
            &mut kept,
            &format!("{failed} (after 3ms in state SSL_HANDSHAKE)"),
        );
        keep_error(
            &mut kept,
            &format!(
                "{failed} (after 1ms in state SSL_HANDSHAKE, 2 identical error(s) suppressed)"
            ),
        );
        keep_error(&mut kept, "");
        assert_eq!(
            kept,
            vec![
                "1/1 brokers are down".to_string(),
                format!(
                    "{failed} (after 1ms in state SSL_HANDSHAKE, 2 identical error(s) suppressed)"
                )
            ]
        );
        for n in 0..5 {
            keep_error(&mut kept, &format!("error {n}"));
        }
        assert_eq!(kept, vec!["error 2", "error 3", "error 4"]);
    }
}
