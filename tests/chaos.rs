//! The chaos suite: real workers, as processes, against tansu and LocalStack
//! through the throttle proxy, with faults at seeded random times: SIGKILL
//! and restart, SIGTERM, workers joining and leaving, broker restarts,
//! DynamoDB outages (the proxy answers 503), a capacity step.
//!
//! The workload is seeded: keys repeat, each record carries its key's version
//! (growing in topic order: records are keyed by id, so one key stays in one
//! partition), and about 1% is poison of every kind. The verifier uses none
//! of the worker's code: it reads the group's committed offsets and the
//! dead-letter topic's end every second, scans the table continuously, and at
//! the end checks:
//! - lost = 0 (every valid key present) and stale = 0 (every key at its
//!   latest version), stale keys of a partition that had two owners at once
//!   (the broker's split brain: not promised) counted apart and listed;
//! - every poison record in the dead-letter topic with its reason;
//! - at every sample, every record below a committed offset was written (the
//!   first table scan started after the sample holds it at its version or
//!   later) or dead-lettered (its letter is below the dead-letter topic's end
//!   at the sample);
//! - every faulted worker exited with its documented code, and the final batch
//!   job ends with committed = end.
//!
//! `CHAOS=full` (make chaos) runs the full plan; the default is the short mode
//! that `make test` runs. `CHAOS_SEED` picks the seed. The report goes to
//! target/chaos/report.{md,json}.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{Offset, TopicPartitionList};
use serde_json::{json, Value};

use common::*;

const PARTITIONS: i32 = 6;

#[derive(Debug, Clone, serde::Serialize)]
struct Plan {
    mode: &'static str,
    seed: u64,
    /// Extra `ingest throttle-proxy` arguments (CHAOS_PROXY_ARGS).
    proxy_args: String,
    records: usize,
    workers: usize,
    kills: usize,
    terms: usize,
    /// Workers joining or leaving (half each).
    churn: usize,
    broker_restarts: usize,
    outages: usize,
    outage_s: (u64, u64),
    capacity_steps: usize,
    wcu: i64,
    /// Faults happen within this many seconds of the start.
    window_s: u64,
}

fn plan() -> Plan {
    let seed = std::env::var("CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(42);
    let mut plan = if std::env::var("CHAOS").as_deref() == Ok("full") {
        Plan {
            mode: "full",
            seed,
            proxy_args: String::new(),
            records: 100_000,
            workers: 3,
            kills: 10,
            terms: 3,
            churn: 10,
            broker_restarts: 2,
            outages: 3,
            outage_s: (10, 30),
            capacity_steps: 1,
            wcu: 1_000,
            window_s: 150,
        }
    } else {
        Plan {
            mode: "short",
            seed,
            proxy_args: String::new(),
            records: 12_000,
            workers: 3,
            kills: 3,
            terms: 1,
            churn: 2,
            broker_restarts: 1,
            outages: 1,
            outage_s: (10, 10),
            capacity_steps: 1,
            wcu: 300,
            window_s: 50,
        }
    };
    // Any count can be overridden, e.g. CHAOS_BROKER_RESTARTS=0.
    let over = |name: &str, v: &mut usize| {
        if let Some(n) = std::env::var(format!("CHAOS_{name}"))
            .ok()
            .and_then(|s| s.parse().ok())
        {
            *v = n;
        }
    };
    over("RECORDS", &mut plan.records);
    over("WORKERS", &mut plan.workers);
    plan.proxy_args = std::env::var("CHAOS_PROXY_ARGS").unwrap_or_default();
    over("KILLS", &mut plan.kills);
    over("TERMS", &mut plan.terms);
    over("CHURN", &mut plan.churn);
    over("BROKER_RESTARTS", &mut plan.broker_restarts);
    over("OUTAGES", &mut plan.outages);
    over("CAPACITY_STEPS", &mut plan.capacity_steps);
    plan
}

/// The poison kinds and the dead-letter reason each must carry.
const POISON: [(&str, &str); 6] = [
    ("not_json", "invalid_json"),
    ("not_an_object", "not_an_object"),
    ("missing_key", "missing_key"),
    ("wrong_key_type", "key_type_mismatch"),
    ("over_400kb", "item_too_large"),
    ("over_1mb", "item_too_large"),
];

/// One produced record, as the verifier knows it.
#[derive(Debug, Clone)]
enum Kind {
    Valid { key: String, version: u64 },
    Poison(usize),
}

struct Workload {
    /// (kafka key, value, kind), in produce order.
    records: Vec<(String, Vec<u8>, Kind)>,
}

fn workload(plan: &Plan) -> Workload {
    let mut rng = SmallRng::seed_from_u64(plan.seed);
    let keys = (plan.records / 4).max(1);
    let mut versions: HashMap<String, u64> = HashMap::new();
    let mut records = Vec::with_capacity(plan.records);
    let mut poisons = 0;
    for i in 0..plan.records {
        if rng.random_bool(0.01) {
            let kind = poisons % POISON.len();
            poisons += 1;
            let value = match POISON[kind].0 {
                "not_json" => format!("not json {i}"),
                "not_an_object" => format!("[{i}, 2, 3]"),
                "missing_key" => format!(r#"{{"x":{i}}}"#),
                "wrong_key_type" => format!(r#"{{"id":{i}}}"#),
                "over_400kb" => format!(r#"{{"id":"big-{i}","pad":"{}"}}"#, "x".repeat(410_000)),
                _ => format!(r#"{{"id":"huge-{i}","pad":"{}"}}"#, "x".repeat(1_100_000)),
            };
            records.push((
                format!("poison-{i}"),
                value.into_bytes(),
                Kind::Poison(kind),
            ));
            continue;
        }
        let key = format!("k{:06}", rng.random_range(0..keys));
        let version = {
            let v = versions.entry(key.clone()).or_default();
            *v += 1;
            *v
        };
        let pad = match rng.random_range(0..100) {
            0..80 => 100,
            80..95 => 1_500,
            _ => 4_500,
        };
        let value = format!(
            r#"{{"id":"{key}","v":{version},"pad":"{}"}}"#,
            "x".repeat(pad)
        );
        records.push((
            key.clone(),
            value.into_bytes(),
            Kind::Valid { key, version },
        ));
    }
    Workload { records }
}

/// What landed where: (partition, offset) -> kind.
type Landed = BTreeMap<(i32, i64), Kind>;

async fn produce_all(topic: &str, w: &Workload) -> (Landed, Vec<String>) {
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", brokers())
        .set("linger.ms", "5")
        .set("message.max.bytes", "2000000")
        .create()
        .unwrap();
    let mut futs = Vec::new();
    for (key, value, _) in &w.records {
        let mut rec = FutureRecord::<String, [u8]>::to(topic)
            .key(key)
            .payload(value.as_slice());
        loop {
            match producer.send_result(rec) {
                Ok(f) => {
                    futs.push(f);
                    break;
                }
                Err((e, back)) => {
                    // Queue full: let deliveries drain.
                    assert!(e.to_string().contains("Queue full"), "{e}");
                    rec = back;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        }
    }
    let mut landed = BTreeMap::new();
    let mut refused = Vec::new();
    for ((key, _, kind), fut) in w.records.iter().zip(futs) {
        match fut.await.unwrap() {
            Ok(d) => {
                landed.insert((d.partition, d.offset), kind.clone());
            }
            Err((e, _)) => match kind {
                Kind::Poison(p) => refused.push(format!("{} ({key}): {e}", POISON[*p].0)),
                Kind::Valid { .. } => panic!("valid record {key} not produced: {e}"),
            },
        }
    }
    (landed, refused)
}

/// One reading of the group's progress.
#[derive(Debug, Clone)]
struct Sample {
    at: Instant,
    /// Seconds since the epoch, to line up with the workers' log times.
    wall: f64,
    committed: Vec<i64>,
    dlq_end: i64,
}

/// Samples committed offsets and the dead-letter topic's end every second.
fn sampler(
    group: Arc<Mutex<String>>,
    topic: String,
    dlq: String,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<(Vec<Sample>, usize)> {
    std::thread::spawn(move || {
        let mut current = group.lock().unwrap().clone();
        let mut consumer = group_reader(&current);
        let mut samples = Vec::new();
        let mut missed = 0;
        while !stop.load(Ordering::SeqCst) {
            let began = Instant::now();
            let wanted = group.lock().unwrap().clone();
            if wanted != current {
                current = wanted;
                consumer = group_reader(&current);
            }
            // Offsets first: whatever they cover was written or dead-lettered
            // before they were read, so before the dead-letter end read next
            // and before any table scan started after `at`.
            let committed = committed_by(&consumer, &topic, PARTITIONS, Duration::from_secs(3));
            let at = Instant::now();
            let dlq_end = consumer.fetch_watermarks(&dlq, 0, Duration::from_secs(3));
            match (dlq_end, committed) {
                (Ok((_, end)), Some(committed)) => samples.push(Sample {
                    at,
                    wall: now_s(),
                    committed,
                    dlq_end: end,
                }),
                _ => missed += 1,
            }
            std::thread::sleep(Duration::from_secs(1).saturating_sub(began.elapsed()));
        }
        (samples, missed)
    })
}

/// A table scan: when it started, each id's version.
struct Scan {
    started: Instant,
    versions: HashMap<String, u64>,
}

async fn scan_versions(client: &aws_sdk_dynamodb::Client, table: &str) -> HashMap<String, u64> {
    scan(client, table)
        .await
        .into_iter()
        .map(|(id, item)| {
            let v = item
                .get("v")
                .and_then(|v| v.as_n().ok())
                .and_then(|n| n.parse().ok())
                .unwrap_or(0);
            (id, v)
        })
        .collect()
}

/// A fault and when it happens.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Fault {
    Kill,
    Term,
    Join,
    Leave,
    BrokerRestart,
    Outage(u64),
    Step,
}

fn schedule(plan: &Plan, rng: &mut SmallRng) -> Vec<(Duration, Fault)> {
    let mut faults = Vec::new();
    faults.extend(std::iter::repeat_n(Fault::Kill, plan.kills));
    faults.extend(std::iter::repeat_n(Fault::Term, plan.terms));
    for i in 0..plan.churn {
        faults.push(if i % 2 == 0 {
            Fault::Join
        } else {
            Fault::Leave
        });
    }
    faults.extend(std::iter::repeat_n(
        Fault::BrokerRestart,
        plan.broker_restarts,
    ));
    for _ in 0..plan.outages {
        faults.push(Fault::Outage(
            rng.random_range(plan.outage_s.0..=plan.outage_s.1),
        ));
    }
    faults.extend(std::iter::repeat_n(Fault::Step, plan.capacity_steps));
    let mut timed: Vec<(Duration, Fault)> = faults
        .into_iter()
        .map(|f| {
            let at = rng.random_range(3_000..plan.window_s * 1_000);
            (Duration::from_millis(at), f)
        })
        .collect();
    timed.sort_by_key(|(t, _)| *t);
    timed
}

/// How a worker ended: (what was done to it, exit code, last logs if bad).
#[derive(Debug, Clone, serde::Serialize)]
struct Ending {
    pid: u32,
    fault: String,
    code: Option<i32>,
    ok: bool,
    detail: String,
}

fn stack_dir() -> std::path::PathBuf {
    let run = std::env::var("INGEST_RUN").unwrap_or_else(|_| {
        format!(
            "{}/ingest-stack",
            std::env::var("TMPDIR").unwrap_or_else(|_| "/tmp".into())
        )
    });
    std::path::PathBuf::from(run)
}

/// Kills tansu hard and starts it again (its data survives).
fn restart_broker() -> String {
    let pidfile = stack_dir().join("tansu.pid");
    let pid = std::fs::read_to_string(&pidfile).unwrap_or_default();
    let pid = pid.trim();
    if pid.is_empty() {
        return "no tansu pid file; broker not restarted".into();
    }
    let _ = std::process::Command::new("kill")
        .args(["-9", pid])
        .status();
    for _ in 0..50 {
        if std::net::TcpStream::connect(brokers()).is_err() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_secs(2));
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/localstack/tansu.sh");
    let status = std::process::Command::new("bash")
        .arg(script)
        .status()
        .unwrap();
    assert!(status.success(), "tansu did not restart");
    format!("tansu {pid} killed (SIGKILL) and restarted")
}

/// Waits for a signalled worker in the background; records how it ended.
fn reap(
    w: Worker,
    fault: Fault,
    within: Duration,
    endings: &Arc<Mutex<Vec<Ending>>>,
) -> std::thread::JoinHandle<()> {
    let endings = endings.clone();
    std::thread::spawn(move || {
        let mut w = w;
        let pid = w.child.id();
        let deadline = Instant::now() + within;
        let status = loop {
            if let Some(status) = w.child.try_wait().unwrap() {
                break Some(status);
            }
            if Instant::now() > deadline {
                stacks(pid);
                break None;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let code = status.and_then(|s| s.code());
        // A SIGTERM in the first milliseconds, before the worker installed
        // its handler, ends it by the signal: it had started nothing.
        let never_started = w.logs.lock().unwrap().is_empty();
        let ok = match (status, fault) {
            (None, _) => false,
            (Some(_), Fault::Kill) => code.is_none(),
            (Some(_), _) => matches!(code, Some(0) | Some(3)) || (code.is_none() && never_started),
        };
        let detail = match status {
            None => format!("did not exit within {within:?}; thread stacks in target/chaos/logs/worker-{pid}.stacks"),
            Some(_) if !ok => "unexpected exit code".into(),
            Some(_) if code.is_none() && fault != Fault::Kill => "signalled before it started".into(),
            Some(_) => String::new(),
        };
        save_logs(pid, &w.logs.lock().unwrap());
        drop(w);
        endings.lock().unwrap().push(Ending {
            pid,
            fault: format!("{fault:?}"),
            code,
            ok,
            detail,
        });
    })
}

/// Every thread's stack of a stuck worker (gdb), for the post-mortem.
fn stacks(pid: u32) {
    let out = std::process::Command::new("gdb")
        .args([
            "-batch",
            "-ex",
            "thread apply all bt",
            "-p",
            &pid.to_string(),
        ])
        .output();
    let text = match out {
        Ok(o) => String::from_utf8_lossy(&o.stdout).into_owned(),
        Err(e) => format!("gdb failed: {e}"),
    };
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/chaos/logs");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(format!("worker-{pid}.stacks")), text).unwrap();
}

/// Keeps a worker's logs in target/chaos/logs/, for the post-mortem.
fn save_logs(pid: u32, logs: &[Value]) {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/chaos/logs");
    std::fs::create_dir_all(&dir).unwrap();
    let text: Vec<String> = logs.iter().map(Value::to_string).collect();
    std::fs::write(dir.join(format!("worker-{pid}.log")), text.join("\n")).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos() {
    let plan = plan();
    let started = Instant::now();
    let _ = std::fs::remove_dir_all(concat!(env!("CARGO_MANIFEST_DIR"), "/target/chaos/logs"));
    let s = Setup::build(PARTITIONS, "", Some(plan.wcu)).await;
    // Other server shapes, e.g. CHAOS_PROXY_ARGS="--burst-s 0.25".
    let shape: Vec<&str> = plan.proxy_args.split_whitespace().collect();
    let proxy = ThrottleProxy::start(&shape);
    s.use_endpoint(&proxy.endpoint());
    let w = workload(&plan);
    let (landed, refused) = produce_all(&s.topic, &w).await;
    let produced_s = started.elapsed().as_secs_f64();
    let env: &[(&str, &str)] = &[
        ("INGEST__PIPELINE__DRAIN_TIMEOUT_S", "10"),
        ("INGEST__DYNAMODB__REQUEST_TIMEOUT_MS", "3000"),
        ("INGEST__LOG__LEVEL", "info"),
    ];
    let stop = Arc::new(AtomicBool::new(false));
    let sampled_group = Arc::new(Mutex::new(s.group.clone()));
    let sampling = sampler(
        sampled_group.clone(),
        s.topic.clone(),
        s.dlq.clone(),
        stop.clone(),
    );
    let scans: Arc<Mutex<Vec<Scan>>> = Arc::default();
    let scanning = {
        let (scans, stop, table) = (scans.clone(), stop.clone(), s.table.clone());
        tokio::spawn(async move {
            let client = dynamo().await;
            while !stop.load(Ordering::SeqCst) {
                let started = Instant::now();
                let versions = scan_versions(&client, &table).await;
                scans.lock().unwrap().push(Scan { started, versions });
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        })
    };

    // Faults.
    let mut rng = SmallRng::seed_from_u64(plan.seed ^ 0x5eed);
    let faults = schedule(&plan, &mut rng);
    let endings: Arc<Mutex<Vec<Ending>>> = Arc::default();
    let mut killed_at: HashMap<u32, f64> = HashMap::new();
    let mut reapers = Vec::new();
    let mut workers: Vec<Worker> = (0..plan.workers)
        .map(|_| s.spawn_with_env(false, env))
        .collect();
    let mut log = Vec::new();
    let t0 = Instant::now();
    let reap_within = Duration::from_secs(10 + 3 + 20);
    for (at, fault) in &faults {
        tokio::time::sleep(at.saturating_sub(t0.elapsed())).await;
        // A worker that ended on its own is a finding.
        let mut i = 0;
        while i < workers.len() {
            if let Ok(Some(status)) = workers[i].child.try_wait() {
                let w = workers.remove(i);
                save_logs(w.child.id(), &w.logs.lock().unwrap());
                endings.lock().unwrap().push(Ending {
                    pid: w.child.id(),
                    fault: "none (exited on its own)".into(),
                    code: status.code(),
                    ok: false,
                    detail: w.dump_logs(),
                });
                workers.push(s.spawn_with_env(false, env));
            } else {
                i += 1;
            }
        }
        let what = match fault {
            Fault::Kill | Fault::Term => {
                let victim = workers.swap_remove(rng.random_range(0..workers.len()));
                if *fault == Fault::Kill {
                    killed_at.insert(victim.child.id(), now_s());
                }
                victim.signal(if *fault == Fault::Kill {
                    "KILL"
                } else {
                    "TERM"
                });
                reapers.push(reap(victim, *fault, reap_within, &endings));
                workers.push(s.spawn_with_env(false, env));
                format!("{fault:?} one worker, restarted")
            }
            Fault::Join => {
                workers.push(s.spawn_with_env(false, env));
                format!("a worker joined ({} now)", workers.len())
            }
            Fault::Leave if workers.len() > 1 => {
                let victim = workers.swap_remove(rng.random_range(0..workers.len()));
                victim.signal("TERM");
                reapers.push(reap(victim, Fault::Leave, reap_within, &endings));
                format!("a worker left ({} now)", workers.len())
            }
            Fault::Leave => "leave skipped (one worker left)".into(),
            Fault::BrokerRestart => tokio::task::spawn_blocking(restart_broker).await.unwrap(),
            Fault::Outage(secs) => {
                proxy.admin("POST", &format!("/_proxy/outage?seconds={secs}"));
                format!("DynamoDB outage of {secs} s")
            }
            Fault::Step => {
                let wcu = plan.wcu / 2;
                proxy.admin(
                    "POST",
                    &format!("/_proxy/capacity?table={}&wcu={wcu}", s.table),
                );
                format!("capacity {} -> {wcu} WCU/s", plan.wcu)
            }
        };
        log.push(json!({"at_s": at.as_secs_f64(), "fault": format!("{fault:?}"), "what": what}));
    }
    // At the window's end the continuous workers stop; a batch job finishes
    // what is left.
    tokio::time::sleep(Duration::from_secs(plan.window_s).saturating_sub(t0.elapsed())).await;
    for w in workers.drain(..) {
        w.signal("TERM");
        reapers.push(reap(w, Fault::Term, reap_within, &endings));
    }
    for r in reapers {
        r.join().unwrap();
    }
    // The batch job runs in a fresh group that starts where the first one
    // committed: tansu's group coordinator can leave a group whose members
    // were killed with a stale leader or orphaned partitions for good (see
    // README, "Chaos suite"); the offsets are what matter, and they carry over.
    let batch_group = unique("grp-batch");
    let handed = hand_over(&s.group, &batch_group, &s.topic);
    *sampled_group.lock().unwrap() = batch_group.clone();
    let mut batch_env = env.to_vec();
    batch_env.push(("INGEST__KAFKA__GROUP_ID", &batch_group));
    let batch = s.spawn_with_env(true, &batch_env);
    let (batch_pid, batch_logs) = (batch.child.id(), batch.logs.clone());
    let batch_within = Duration::from_secs(if plan.mode == "full" { 900 } else { 300 });
    let waited =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| batch.wait(batch_within)));
    let (batch_code, summary) = waited.unwrap_or((None, None));
    save_logs(batch_pid, &batch_logs.lock().unwrap());
    let faults_done_s = t0.elapsed().as_secs_f64();
    stop.store(true, Ordering::SeqCst);
    let (samples, missed) = sampling.join().unwrap();
    scanning.await.unwrap();

    // Verify.
    let client = dynamo().await;
    let table = scan_versions(&client, &s.table).await;
    let end = s.end_offsets();
    let committed = committed(&batch_group, &s.topic, PARTITIONS);
    let letters = read_all_letters(&s.dlq);
    let owners = ownership(&killed_at);
    let report = verify(
        &owners,
        &landed,
        &table,
        &letters,
        &samples,
        &scans.lock().unwrap(),
    );
    let endings = endings.lock().unwrap().clone();
    let bad_endings: Vec<&Ending> = endings.iter().filter(|e| !e.ok).collect();
    let stats = proxy.stats(&s.table);
    let valid = landed
        .values()
        .filter(|k| matches!(k, Kind::Valid { .. }))
        .count();
    let out = json!({
        "plan": plan,
        "produced": landed.len(),
        "valid_records": valid,
        "poison_records": landed.len() - valid,
        "poison_refused_by_broker": refused,
        "produce_s": produced_s,
        "run_s": faults_done_s,
        "faults": log,
        "worker_endings": endings,
        "batch_exit": batch_code,
        "batch_summary": summary,
        "committed_equals_end": committed == end,
        "handed_over": handed,
        "committed": committed,
        "end": end,
        "samples": samples.len(),
        "samples_missed": missed,
        "scans": scans.lock().unwrap().len(),
        "lost": report.lost,
        "stale": report.stale,
        "stale_in_split_brain": report.stale_in_split_brain,
        "stale_keys": report.stale_keys,
        "poison_missing": report.poison_missing,
        "poison_wrong_reason": report.poison_wrong_reason,
        "poison_without_value": report.without_value,
        "dead_letter_duplicates": report.duplicates,
        "committed_ahead_violations": report.ahead,
        "committed_ahead_in_split_brain": report.ahead_in_split_brain,
        "split_brains": owners.overlaps,
        "writes_accepted": stats["accepted_items"],
        // Records of one key merged in a batch are written once, so this is
        // a lower bound of the rewrites.
        "rewrites_at_least": (stats["accepted_items"].as_u64().unwrap_or(0) as i64 - valid as i64).max(0),
        "throttled_requests": stats["throttled_requests"],
        "requests": stats["requests"],
    });
    write_report(&out);
    assert_eq!(report.lost, 0, "lost records: {out}");
    assert_eq!(report.stale, 0, "stale keys: {out}");
    assert_eq!(report.poison_missing, 0, "poison not dead-lettered: {out}");
    assert_eq!(report.poison_wrong_reason, 0, "{out}");
    assert!(report.ahead.is_empty(), "committed ahead of writes: {out}");
    assert!(
        bad_endings.is_empty(),
        "workers ended badly: {bad_endings:#?}"
    );
    assert_eq!(batch_code, Some(0), "{out}");
    assert_eq!(committed, end, "{out}");
    // Every fault was followed by a reading of the committed offsets.
    for (at, fault) in &faults {
        assert!(
            samples.iter().any(|s| s.at > t0 + *at),
            "no sample after {fault:?} at {at:?}: {out}"
        );
    }
}

/// Commits `from`'s committed offsets for `topic` as `to`'s (no member of
/// either group is needed); returns them.
fn hand_over(from: &str, to: &str, topic: &str) -> Vec<i64> {
    let offsets = committed(from, topic, PARTITIONS);
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers())
        .set("group.id", to)
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    for (p, o) in offsets.iter().enumerate() {
        if *o >= 0 {
            tpl.add_partition_offset(topic, p as i32, Offset::Offset(*o))
                .unwrap();
        }
    }
    if tpl.count() > 0 {
        consumer
            .commit(&tpl, rdkafka::consumer::CommitMode::Sync)
            .expect("hand the offsets over");
    }
    assert_eq!(
        committed(to, topic, PARTITIONS),
        offsets,
        "offsets handed over"
    );
    offsets
}

fn now_s() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// An RFC 3339 UTC time as the workers log it, in seconds since the epoch.
fn log_time(t: &str) -> Option<f64> {
    let (date, time) = t.trim_end_matches('Z').split_once('T')?;
    let mut d = date.split('-').map(|x| x.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let mut hms = time.split(':');
    let (h, mi) = (
        hms.next()?.parse::<f64>().ok()?,
        hms.next()?.parse::<f64>().ok()?,
    );
    let sec: f64 = hms.next()?.parse().ok()?;
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days as f64 * 86_400.0 + h * 3_600.0 + mi * 60.0 + sec)
}

/// Who held which partition when, from the workers' logs.
#[derive(Default)]
struct Owners {
    /// Per partition, when two workers first held it at once.
    split_since: HashMap<i32, f64>,
    /// Each overlap, as text for the report.
    overlaps: Vec<String>,
}

fn ownership(killed_at: &HashMap<u32, f64>) -> Owners {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/chaos/logs");
    // (partition, pid, from, to)
    let mut held: Vec<(i32, u32, f64, f64)> = Vec::new();
    for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix("worker-")
            .and_then(|n| n.strip_suffix(".log"))
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
        let mut open: HashMap<i32, f64> = HashMap::new();
        let mut last = 0.0;
        for line in text.lines() {
            let Ok(v) = serde_json::from_str::<Value>(line) else {
                continue;
            };
            let Some(t) = v["timestamp"].as_str().and_then(log_time) else {
                continue;
            };
            last = t;
            let parts = || {
                v["partitions"]
                    .as_str()
                    .unwrap_or("")
                    .split(',')
                    .filter_map(|tp| tp.rsplit_once('/')?.1.parse::<i32>().ok())
                    .collect::<Vec<i32>>()
            };
            match v["event"].as_str() {
                Some("assigned") => {
                    for p in parts() {
                        open.entry(p).or_insert(t);
                    }
                }
                Some("revoked") => {
                    for p in parts() {
                        if let Some(from) = open.remove(&p) {
                            held.push((p, pid, from, t));
                        }
                    }
                }
                _ => {}
            }
        }
        let end = killed_at.get(&pid).copied().unwrap_or(last);
        for (p, from) in open {
            held.push((p, pid, from, end));
        }
    }
    let mut owners = Owners::default();
    for (i, a) in held.iter().enumerate() {
        for b in &held[i + 1..] {
            if a.0 == b.0 && a.1 != b.1 && a.2 < b.3 && b.2 < a.3 {
                let from = a.2.max(b.2);
                let to = a.3.min(b.3);
                let since = owners.split_since.entry(a.0).or_insert(from);
                *since = since.min(from);
                owners.overlaps.push(format!(
                    "partition {} held by workers {} and {} at once for {:.1} s",
                    a.0,
                    a.1,
                    b.1,
                    to - from
                ));
            }
        }
    }
    owners
}

/// A dead letter's source and reason, with its own offset.
struct LetterSeen {
    dlq_offset: i64,
    source: (i32, i64),
    reason: String,
    has_value: bool,
}

fn read_all_letters(topic: &str) -> Vec<LetterSeen> {
    read_all_dead_letters(topic)
        .into_iter()
        .map(|l| LetterSeen {
            dlq_offset: l.offset,
            source: (
                l.number("ingest.source.partition") as i32,
                l.number("ingest.source.offset"),
            ),
            reason: l
                .headers
                .get("ingest.error.reason")
                .cloned()
                .unwrap_or_default(),
            has_value: l.value.is_some(),
        })
        .collect()
}

#[derive(Default)]
struct Verdict {
    lost: usize,
    stale: usize,
    /// Keys left at an older version whose partition had two owners at
    /// once (a zombie the broker never revoked can put an older version
    /// back after the newer one's offset was committed: not promised, see
    /// README "Guarantees"), counted apart.
    stale_in_split_brain: usize,
    /// The first few stale keys, inside a split brain or not.
    stale_keys: Vec<String>,
    poison_missing: usize,
    poison_wrong_reason: usize,
    without_value: usize,
    duplicates: usize,
    ahead: Vec<String>,
    /// Records behind a committed offset while their partition had two
    /// owners at once (the broker's split brain), counted apart.
    ahead_in_split_brain: usize,
}

fn verify(
    owners: &Owners,
    landed: &Landed,
    table: &HashMap<String, u64>,
    letters: &[LetterSeen],
    samples: &[Sample],
    scans: &[Scan],
) -> Verdict {
    let mut v = Verdict::default();
    // Each key's latest version and its partition (a key stays in one).
    let mut latest: HashMap<&str, (u64, i32)> = HashMap::new();
    for ((p, _), kind) in landed {
        if let Kind::Valid { key, version } = kind {
            let l = latest.entry(key).or_insert((0, *p));
            l.0 = l.0.max(*version);
        }
    }
    for (key, (version, p)) in &latest {
        match table.get(*key) {
            None => v.lost += 1,
            Some(got) if got < version => {
                let split = owners.split_since.contains_key(p);
                if split {
                    v.stale_in_split_brain += 1;
                } else {
                    v.stale += 1;
                }
                if v.stale_keys.len() < 10 {
                    v.stale_keys.push(format!(
                        "key {key} (partition {p}{}): version {got} in the table, {version} the latest",
                        if split { ", split brain" } else { "" }
                    ));
                }
            }
            Some(_) => {}
        }
    }
    // First letter of each poison record.
    let mut first_letter: HashMap<(i32, i64), (i64, &str)> = HashMap::new();
    for l in letters {
        match first_letter.entry(l.source) {
            std::collections::hash_map::Entry::Occupied(_) => v.duplicates += 1,
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert((l.dlq_offset, &l.reason));
            }
        }
        if !l.has_value {
            v.without_value += 1;
        }
    }
    for (at, kind) in landed {
        if let Kind::Poison(p) = kind {
            match first_letter.get(at) {
                None => v.poison_missing += 1,
                Some((_, reason)) if *reason != POISON[*p].1 => v.poison_wrong_reason += 1,
                Some(_) => {}
            }
        }
    }
    // Committed never ahead of what was written or dead-lettered.
    for (i, s) in samples.iter().enumerate() {
        let Some(scan) = scans.iter().find(|sc| sc.started >= s.at) else {
            continue;
        };
        for p in 0..PARTITIONS {
            let below = s.committed[p as usize];
            for ((_, offset), kind) in landed.range((p, 0)..(p, below.max(0))) {
                let ok = match kind {
                    Kind::Valid { key, version } => {
                        scan.versions.get(key).is_some_and(|got| got >= version)
                    }
                    Kind::Poison(_) => first_letter
                        .get(&(p, *offset))
                        .is_some_and(|(d, _)| *d < s.dlq_end),
                };
                let split = owners.split_since.get(&p).is_some_and(|t| *t <= s.wall);
                if !ok && split {
                    v.ahead_in_split_brain += 1;
                } else if !ok && v.ahead.len() < 20 {
                    v.ahead.push(format!(
                        "sample {i}: partition {p} committed {below}, offset {offset} ({kind:?}) neither written nor dead-lettered"
                    ));
                }
            }
        }
    }
    v
}

fn write_report(out: &Value) {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/chaos");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("report.json"),
        serde_json::to_string_pretty(out).unwrap(),
    )
    .unwrap();
    let mut md = String::from("# Chaos report\n\n");
    md.push_str(&format!(
        "Mode {}, seed {}: {} records ({} valid, {} poison) over {} partitions, {} s in all: faults, then a batch job.\n\n",
        out["plan"]["mode"], out["plan"]["seed"], out["produced"], out["valid_records"],
        out["poison_records"], PARTITIONS, out["run_s"].as_f64().unwrap_or(0.0).round()
    ));
    md.push_str("| check | value |\n|---|---|\n");
    for k in [
        "lost",
        "stale",
        "stale_in_split_brain",
        "stale_keys",
        "poison_missing",
        "poison_wrong_reason",
        "poison_without_value",
        "dead_letter_duplicates",
        "committed_ahead_violations",
        "committed_ahead_in_split_brain",
        "split_brains",
        "samples",
        "samples_missed",
        "scans",
        "batch_exit",
        "committed_equals_end",
        "writes_accepted",
        "rewrites_at_least",
        "requests",
        "throttled_requests",
        "poison_refused_by_broker",
    ] {
        md.push_str(&format!("| {k} | {} |\n", out[k]));
    }
    md.push_str("\n## Faults\n\n| at (s) | fault | what |\n|---|---|---|\n");
    for f in out["faults"].as_array().into_iter().flatten() {
        md.push_str(&format!(
            "| {:.1} | {} | {} |\n",
            f["at_s"].as_f64().unwrap_or(0.0),
            f["fault"].as_str().unwrap_or(""),
            f["what"].as_str().unwrap_or("")
        ));
    }
    md.push_str("\n## Worker endings\n\n| pid | fault | exit code | as documented | detail |\n|---|---|---|---|---|\n");
    for e in out["worker_endings"].as_array().into_iter().flatten() {
        md.push_str(&format!(
            "| {} | {} | {} | {} | {} |\n",
            e["pid"],
            e["fault"].as_str().unwrap_or(""),
            e["code"],
            e["ok"],
            e["detail"].as_str().unwrap_or("")
        ));
    }
    std::fs::write(dir.join("report.md"), md).unwrap();
}
