//! `ingest sim` on the shipped scenarios, in virtual time (nothing sleeps):
//! the anchors reproduce their published shape, the default strategy meets its
//! targets on Heroku's scenario, seed 000's graph rises to 291.9 ms, no
//! client collapses or starves on a shallow bucket, runs are deterministic,
//! and the command line writes its outputs and rejects bad scenarios with a
//! clear error.

use std::path::{Path, PathBuf};
use std::process::Command;

use ingest::sim::{self, engine::Attempt, report::Score};

fn scenario(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("config/scenarios")
        .join(format!("{name}.toml"))
}

fn scores(name: &str) -> Vec<Score> {
    let sc = sim::load(&scenario(name)).unwrap();
    sim::run(&sc).unwrap().scores
}

/// The default strategy's (unlabelled `adaptive`) scores on `sc`, seeds
/// 1-8, and its throttled requests over them all.
fn default_over_seeds(sc: sim::scenario::Scenario) -> (Vec<Score>, f64) {
    default_over(sc, 8)
}

/// The default's scores over seeds 1 to `seeds`, and the share of its
/// requests throttled.
fn default_over(mut sc: sim::scenario::Scenario, seeds: u64) -> (Vec<Score>, f64) {
    sc.strategies
        .retain(|s| s.get("label").is_none() && s["name"].as_str() == Some("adaptive"));
    let scores: Vec<Score> = (1..=seeds)
        .map(|seed| {
            sc.seed = seed;
            by(&sim::run(&sc).unwrap().scores, "adaptive").clone()
        })
        .collect();
    let throttled: u64 = scores.iter().map(|s| s.throttled).sum();
    let requests: u64 = scores.iter().map(|s| s.requests).sum();
    (scores, throttled as f64 / requests as f64)
}

/// The least and the mean utilization over `scores` (one per seed).
fn spread(scores: &[Score]) -> (f64, f64) {
    let u = scores.iter().map(|s| s.utilization);
    let least = u.clone().fold(1.0_f64, f64::min);
    (least, u.sum::<f64>() / scores.len() as f64)
}

fn by<'a>(scores: &'a [Score], label: &str) -> &'a Score {
    scores
        .iter()
        .find(|s| s.label == label)
        .unwrap_or_else(|| panic!("no {label}"))
}

/// One strategy's score and attempts in a run of every strategy.
fn run_of<'a>(r: &'a sim::Results, label: &str) -> (&'a Score, &'a [Attempt]) {
    let i = r
        .scores
        .iter()
        .position(|s| s.label == label)
        .unwrap_or_else(|| panic!("no {label}"));
    (&r.scores[i], &r.runs[i].attempts)
}

#[test]
fn herokus_strategies_keep_their_published_shape_and_the_default_beats_them() {
    let s = scores("heroku");
    let exp = by(&s, "heroku-exponential");
    let gradual = by(&s, "heroku-gradual");
    let prop = by(&s, "heroku-proportional");
    let remaining = by(&s, "heroku-proportional-remaining");
    // Published: 80.41 % / 40.56 % / 3.66 % / 3.07 % (ANCHORS.md).
    assert!(exp.retry_rate > 0.6, "exponential: {exp:?}");
    assert!(
        (0.3..0.6).contains(&gradual.retry_rate),
        "gradual: {gradual:?}"
    );
    assert!((0.02..0.05).contains(&prop.retry_rate), "{prop:?}");
    assert!(
        (0.02..0.05).contains(&remaining.retry_rate),
        "{remaining:?}"
    );
    // Proportional decrease is slow to clear a full bucket (published 551 s);
    // proportional-remaining clears it at once.
    let clear = |s: &Score| s.time_to_clear_s.expect("cleared");
    assert!(clear(prop) > 300.0 && clear(remaining) < 60.0, "{s:?}");

    let default = by(&s, "adaptive");
    assert!(default.retry_rate <= 0.01, "{default:?}");
    assert!(default.utilization >= 0.95, "{default:?}");
    let anchors = [exp, gradual, prop, remaining, by(&s, "autosleeper")];
    let best_stdev = anchors
        .iter()
        .map(|a| a.request_stdev)
        .fold(f64::MAX, f64::min);
    let best_sleep = anchors
        .iter()
        .map(|a| a.max_sleep_s)
        .fold(f64::MAX, f64::min);
    assert!(
        default.request_stdev <= best_stdev,
        "{default:?} vs {best_stdev}"
    );
    assert!(
        default.max_sleep_s <= best_sleep,
        "{default:?} vs {best_sleep}"
    );
    for a in anchors {
        assert!(default.retry_rate < a.retry_rate, "{default:?} vs {a:?}");
    }
}

/// Runs a shipped scenario on seeds 1 to 5 (so no seed is lucky).
fn on_seeds(name: &str, check: impl Fn(u64, &[Score])) {
    let sc = sim::load(&scenario(name)).unwrap();
    for seed in 1..=5 {
        let mut sc = sc.clone();
        sc.seed = seed;
        check(seed, &sim::run(&sc).unwrap().scores);
    }
}

/// `label` has at least 95% utilization, and a request stdev and a max sleep
/// no worse than the best anchor's (each the lowest of any strategy that is
/// not `adaptive`).
fn at_least_the_best_anchor(seed: u64, s: &[Score], label: &str) -> Score {
    let d = by(s, label).clone();
    let anchors = s.iter().filter(|x| !x.label.starts_with("adaptive"));
    let (best_stdev, best_sleep) = anchors.fold((f64::MAX, f64::MAX), |(st, sl), a| {
        (st.min(a.request_stdev), sl.min(a.max_sleep_s))
    });
    assert!(d.utilization >= 0.95, "seed {seed}: {d:?}");
    assert!(
        d.request_stdev <= best_stdev,
        "seed {seed}: {d:?} vs {best_stdev}"
    );
    assert!(
        d.max_sleep_s <= best_sleep,
        "seed {seed}: {d:?} vs {best_sleep}"
    );
    d
}

#[test]
fn with_50_clients_the_default_still_beats_every_anchor_and_the_tuned_one_meets_1_percent() {
    // 50 clients all starting at t = 0 on an empty bucket. The 1% target is
    // out of reach for any setting that also keeps the 10-client max sleep
    // under the best anchor's 17.31 s (README: "With 50 clients"); the
    // default beats every anchor on every score, and the shipped tuned
    // variant (cushion_start = 0.02) meets the 1% target too.
    on_seeds("heroku-50", |seed, s| {
        for label in ["adaptive", "adaptive (cushion_start = 0.02)"] {
            let d = at_least_the_best_anchor(seed, s, label);
            for a in s.iter().filter(|x| !x.label.starts_with("adaptive")) {
                assert!(
                    d.retry_rate < a.retry_rate / 3.0,
                    "seed {seed}: {d:?} vs {a:?}"
                );
            }
        }
        let tuned = by(s, "adaptive (cushion_start = 0.02)");
        assert!(tuned.retry_rate <= 0.01, "seed {seed}: {tuned:?}");
    });
}

#[test]
fn on_herokus_10_clients_the_default_wins_on_every_seed() {
    on_seeds("heroku", |seed, s| {
        let d = at_least_the_best_anchor(seed, s, "adaptive");
        assert!(d.retry_rate <= 0.01, "seed {seed}: {d:?}");
    });
}

#[test]
fn seed_000s_graph_rises_to_291_9_ms() {
    let sc = sim::load(&scenario("seed000")).unwrap();
    let r = sim::run(&sc).unwrap();
    let attempts = &r.runs[0].attempts;
    // Fifteen failures, then the wait before the 16th attempt is 1 ms x 1.5^14.
    assert!(attempts[..15].iter().all(|a| a.throttled), "{attempts:?}");
    let wait = attempts[15].wait_s;
    assert!((wait - 0.291_929_238).abs() < 1e-9, "{wait}");
    assert_eq!(format!("{:.1} ms", wait * 1e3), "291.9 ms");
    assert!(!attempts[15].throttled, "then it succeeds");
    assert!(
        attempts.iter().skip(16).any(|a| a.throttled),
        "and goes up and down"
    );
}

#[test]
fn the_same_scenario_and_seed_give_the_same_json() {
    let mut sc = sim::load(&scenario("capacity-step")).unwrap();
    let a = sim::run(&sc).unwrap().json();
    let b = sim::run(&sc).unwrap().json();
    assert_eq!(a, b);
    sc.seed += 1;
    let c = sim::run(&sc).unwrap().json();
    assert_ne!(a, c, "the seed drives the workload");
}

#[test]
fn every_shipped_scenario_runs() {
    for entry in std::fs::read_dir(scenario("x").parent().unwrap()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            let sc = sim::load(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let r = sim::run(&sc).unwrap();
            assert!(
                r.scores.iter().all(|s| s.requests > 0),
                "{}",
                path.display()
            );
        }
    }
}

#[test]
fn the_command_writes_json_chart_and_trace() {
    let dir = std::env::temp_dir().join(format!("ingest-sim-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (json, svg, csv) = (dir.join("r.json"), dir.join("r.svg"), dir.join("r.csv"));
    let out = Command::new(env!("CARGO_BIN_EXE_ingest"))
        .args(["sim", "--scenario"])
        .arg(scenario("heroku"))
        .arg("--json")
        .arg(&json)
        .arg("--chart")
        .arg(&svg)
        .arg("--trace")
        .arg(&csv)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("heroku-proportional-remaining"), "{stdout}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let first = &report["strategies"][0];
    for key in [
        "retry_rate",
        "max_sleep_s",
        "request_stdev",
        "time_to_clear_s",
        "utilization",
        "requests",
        "throttled",
    ] {
        assert!(first.get(key).is_some(), "{key} missing: {first}");
    }
    let chart = std::fs::read_to_string(&svg).unwrap();
    assert!(
        chart.starts_with("<svg") && chart.contains("adaptive"),
        "an SVG with panels"
    );
    let trace = std::fs::read_to_string(&csv).unwrap();
    assert!(trace.starts_with("strategy,client,t_s,wait_s"));
    assert!(
        trace.lines().next().unwrap().ends_with(",rule,rate"),
        "the strategy's reading of each answer"
    );
    // Heroku's server reports its bucket's level: the default reads every
    // answer as a level, and paces by a rate.
    let adaptive: Vec<&str> = trace
        .lines()
        .filter(|l| l.starts_with("adaptive,"))
        .collect();
    assert!(!adaptive.is_empty(), "{trace}");
    for line in &adaptive {
        let cols: Vec<&str> = line.split(',').collect();
        assert_eq!(cols[8], "level", "{line}");
        assert!(cols[9].parse::<f64>().is_ok_and(|r| r > 0.0), "{line}");
    }
    let requests: u64 = report["strategies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["requests"].as_u64().unwrap())
        .sum();
    assert_eq!(
        trace.lines().count() as u64,
        requests + 1,
        "one line per attempt"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// `--seeds N`: seeds 1 to N, one spread row a strategy, the JSON with
/// them; 0 seeds, or seeds with one seed, a chart or a trace, exit 2.
#[test]
fn the_command_spreads_a_scenario_over_seeds() {
    let dir = std::env::temp_dir().join(format!("ingest-sim-seeds-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("s.json");
    let out = Command::new(env!("CARGO_BIN_EXE_ingest"))
        .args(["sim", "--seeds", "2", "--scenario"])
        .arg(scenario("two-jobs"))
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(stdout.contains("seeds 1-2"), "{stdout}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(report["seeds"], 2);
    let adaptive = report["strategies"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["label"] == "adaptive")
        .unwrap();
    // The same as the two seeds run one at a time.
    let one = |seed: u64| {
        let mut sc = sim::load(&scenario("two-jobs")).unwrap();
        sc.seed = seed;
        by(&sim::run(&sc).unwrap().scores, "adaptive").clone()
    };
    let (a, b) = (one(1), one(2));
    assert_eq!(adaptive["seeds"], 2);
    assert_eq!(adaptive["requests"], a.requests + b.requests);
    assert_eq!(adaptive["throttled"], a.throttled + b.throttled);
    let least_job = a
        .group_shares
        .iter()
        .chain(&b.group_shares)
        .copied()
        .fold(1.0, f64::min);
    assert!((adaptive["least_job_share"].as_f64().unwrap() - least_job).abs() < 1e-12);
    for args in [
        vec!["--seeds", "0"],
        vec!["--seeds", "2", "--seed", "3"],
        vec!["--seeds", "2", "--trace", "x.csv"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_ingest"))
            .args(["sim", "--scenario"])
            .arg(scenario("two-jobs"))
            .args(&args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn bad_scenarios_exit_2_naming_the_field() {
    let dir = std::env::temp_dir().join(format!("ingest-sim-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // A shipped scenario with one text replaced, written as `name`.
    let variant = |name: &str, from: &str, find: &str, put: &str| {
        let path = dir.join(name);
        let text = std::fs::read_to_string(scenario(from)).unwrap();
        assert!(text.contains(find), "{from} has {find:?}");
        std::fs::write(&path, text.replacen(find, put, 1)).unwrap();
        path
    };
    let bad = variant("bad.toml", "heroku", "count = 10", "count = 0");
    let skewed = variant(
        "skewed.toml",
        "heroku",
        "[clients]",
        "[clients]\nclock_skew_ms = -5",
    );
    let keyless = variant("keyless.toml", "hot-range", "keys = {", "# keys = {");
    let crowded = variant(
        "crowded.toml",
        "hot-range-neighbour",
        "partition_max_per_s = 50",
        "partition_max_per_s = 10",
    );
    let keyless_entry = variant(
        "keyless-entry.toml",
        "heroku",
        "[[strategy]]",
        "[[strategy]]\nhot_keys = false",
    );
    for (path, want) in [
        (bad.clone(), "clients.count = 0"),
        (
            keyless_entry,
            "strategy[0].hot_keys: only with clients.keys",
        ),
        (
            keyless,
            "server.partitions: needs clients.keys (which partition an item goes to)",
        ),
        (
            crowded,
            "server.foreign_per_s = 45: its part of each of the 4 partitions must be below partition_max_per_s (10)",
        ),
        (
            skewed,
            "clients.clock_skew_ms: must be >= 0 and < 1000 (got -5)",
        ),
        (dir.join("missing.toml"), "missing.toml"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_ingest"))
            .args(["sim", "--scenario"])
            .arg(&path)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains(want), "{err}");
    }
    let out = Command::new(env!("CARGO_BIN_EXE_ingest"))
        .args(["sim", "--scenario"])
        .arg(scenario("seed000"))
        .arg("--chart")
        .arg(dir.join("chart.png"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("only .svg"), "{err}");
    std::fs::remove_dir_all(&dir).ok();
}

/// A bucket smaller than one batch: every full batch comes back partial at
/// any rate. The default sizes its requests to what the server admits at
/// once and keeps its rate; before, it cut the rate on every partial answer
/// and collapsed. Checked with 1 and 3 clients, on five seeds.
#[test]
fn a_bucket_smaller_than_a_batch_does_not_collapse_the_rate() {
    for clients in [1, 3] {
        let mut sc = sim::load(&scenario("shallow-bucket")).unwrap();
        sc.clients.count = clients;
        for seed in 1..=5 {
            sc.seed = seed;
            let s = sim::run(&sc).unwrap().scores;
            let (new, old) = (by(&s, "adaptive"), by(&s, "adaptive-noshrink"));
            assert!(
                old.utilization < 0.1,
                "{clients} clients, seed {seed}: the old rule collapses: {old:?}"
            );
            assert!(
                new.utilization > 0.6,
                "{clients} clients, seed {seed}: {new:?}"
            );
            let best_anchor = s
                .iter()
                .filter(|x| !x.label.starts_with("adaptive"))
                .map(|x| x.utilization)
                .fold(0.0, f64::max);
            assert!(new.utilization > best_anchor, "{s:?}");
        }
    }
}

/// An on-demand table without a maximum (`on-demand-warm.toml`): the
/// clients know only its warm throughput, as DescribeTable reports it. The
/// slow start stops at the share of it and the rate follows it as the table
/// scales: at least 95% of what the table admits, at most 1% throttled, on
/// every seed (96.3-98.5% and 0.21-0.27%; before, doubling past it, 82-84%
/// and 0.57-0.62%).
#[test]
fn an_on_demand_table_without_a_maximum_is_paced_by_what_it_is_warm_for() {
    on_seeds("on-demand-warm", |seed, s| {
        let d = by(s, "adaptive");
        assert!(d.utilization >= 0.95, "seed {seed}: {d:?}");
        assert!(d.retry_rate <= 0.01, "seed {seed}: {d:?}");
    });
}

/// Time slots follow each worker's own wall clock. Clocks within the 10 ms
/// guard of each other cost nothing; clocks half a second apart (a broken
/// NTP) make parts overlap, and the slots' trial ends them: the clients do
/// about as well as without slots (measured: 73.5-75.8% utilization at
/// 1.5-1.8% throttled, against 74.5-76.0% and 1.3%; without the trial
/// 45-60% and 2.6-4.1%).
#[test]
fn time_slots_on_clocks_that_disagree_fall_back_to_sending_at_any_time() {
    let mut sc = sim::load(&scenario("shallow-bucket")).unwrap();
    sc.clients.count = 3;
    for seed in [1, 3, 5] {
        sc.seed = seed;
        let mut run = |skew_ms: f64| {
            sc.clients.clock_skew_ms = skew_ms;
            sim::run(&sc).unwrap().scores
        };
        let agreed = run(0.0);
        let (slots, none) = (by(&agreed, "adaptive"), by(&agreed, "adaptive-noslots"));
        let near = run(5.0);
        let near = by(&near, "adaptive");
        assert!(
            near.utilization >= slots.utilization - 0.02
                && near.retry_rate <= slots.retry_rate + 0.002,
            "seed {seed}: within the guard {near:?} vs {slots:?}"
        );
        let far = run(250.0);
        let far = by(&far, "adaptive");
        assert!(
            far.utilization >= none.utilization - 0.04 && far.retry_rate <= 1.5 * none.retry_rate,
            "seed {seed}: half a second apart {far:?} vs without slots {none:?}"
        );
    }
}

/// Six clients on the shallow bucket (a count it was not tuned on): none
/// starves, in time slots or out of them. Over every 20 s of the run, each
/// client of the default writes at least a quarter of its fair share (8.3
/// of 33 units/s) when the clients keep to their slots (measured on seeds
/// 1-8: 10.9 at the least), and at least a twentieth (1.7) when they
/// cannot: clocks up to half a second apart, or slots off (0.09 and 0.11
/// of the share at the least; before the collision rule, 0.01-0.07 and
/// 0.02-0.09).
///
/// The hazard it guards: out of the slots, a client's requests meet its
/// peers' in a bucket they keep empty, and are throttled whatever its rate.
/// If those throttles cut a settled rate (each cut taken from what it wrote
/// lately), the client spirals down, and the throttles it causes in its
/// peers' parts can fail their slots' trials too. Far below its share on
/// such a table, a throttle is now a collision, not a rate signal
/// (`COLLISION_BELOW` in `src/throttle/adaptive/mod.rs`). A variant in
/// which slotted clients never settled (2026-11-27) failed slot trials in
/// 6 of 8 seeds, and clients fell to 0.7-6 units/s.
#[test]
fn six_clients_on_a_shallow_bucket_none_starves() {
    let window_s = 20.0;
    for (label, skew_ms, floor) in [
        ("adaptive", 0.0, 0.25),
        ("adaptive", 250.0, 0.05),
        ("adaptive-noslots", 0.0, 0.05),
    ] {
        let mut sc = sim::load(&scenario("shallow-bucket")).unwrap();
        sc.clients.count = 6;
        sc.clients.clock_skew_ms = skew_ms;
        let share = 200.0 / sc.clients.count as f64;
        for seed in 1..=8 {
            sc.seed = seed;
            let r = sim::run(&sc).unwrap();
            let windows = (sc.duration_s / window_s) as usize;
            let mut written = vec![vec![0.0; windows]; sc.clients.count];
            for a in run_of(&r, label).1 {
                let w = (a.t_s / window_s) as usize;
                if w < windows {
                    written[a.client as usize][w] += a.accepted_units;
                }
            }
            for (client, ws) in written.iter().enumerate() {
                for (w, units) in ws.iter().enumerate() {
                    let part = units / window_s / share;
                    assert!(
                        part >= floor,
                        "{label}, clock skew {skew_ms} ms, seed {seed}: client {client} wrote \
                         {part:.2} of its share from {}s (floor {floor})",
                        w as f64 * window_s
                    );
                }
            }
        }
    }
}

/// Three workers on a table whose bucket holds half a second (100 units):
/// a batch of about 50 units (up to 125) is half of it or more, and the
/// workers' batches meet
/// now and then at any rate. Each keeps its requests to its part of what
/// the table has shown it admits at once (`size`'s `peers_below`): fewer
/// than 1% of requests throttled over seeds 1-8 with the settle and
/// without it (0.33% each on 2026-11-27; 1.82% and 1.74% before), and at
/// least 90% of the table in every seed (94.0-96.8%, 95.4-96.8% since the
/// mends of 2026-11-28; 67.3-75.6% before),
/// 95% without the settle (96.1-96.9%; 94.3-95.2% before).
#[test]
fn workers_on_a_half_second_bucket_keep_to_their_part_of_it() {
    let sc = sim::load(&scenario("medium-bucket")).unwrap();
    let mut totals = [(0, 0); 2];
    for seed in 1..=8 {
        let mut sc = sc.clone();
        sc.seed = seed;
        let scores = sim::run(&sc).unwrap().scores;
        for (i, (label, floor)) in [("adaptive", 0.9), ("adaptive-nosettle", 0.95)]
            .into_iter()
            .enumerate()
        {
            let s = by(&scores, label);
            assert!(s.utilization >= floor, "{label}, seed {seed}: {s:?}");
            totals[i].0 += s.throttled;
            totals[i].1 += s.requests;
        }
    }
    for (label, (throttled, requests)) in ["adaptive", "adaptive-nosettle"].iter().zip(totals) {
        let rate = throttled as f64 / requests as f64;
        assert!(rate < 0.01, "{label}: {throttled} of {requests} throttled");
    }
}

/// Three workers on a table whose bucket holds 0.075-0.2 s (15-40 of 200
/// units): deeper than a worker's request, shallower than the three
/// workers' coinciding ones. Two lessons went wrong there (2026-11-28): a
/// worker slotted on scraps its peers left at the start and never regrew
/// its requests to see the bucket's depth (its peers, not slotted, met it
/// in its parts), and peers' requests meeting now and then settled a
/// worker the table gave its share as if another writer were there, at
/// 15-30 units/s of its 65 for minutes. The least seed used 60.6-90.0% of
/// the table before (84.5% at 0.075 s, 60.6% at 0.1 s, 61.7% at 0.15 s,
/// 74.6% at 0.2 s), 71.8-90.2% after (85.8-91.9% on average over the
/// seeds); fewer than 1% of requests throttled (0.37-0.60%). Those were
/// seeds 1-8, and the least of them is one seed's luck: over seeds 1-24
/// the least used 53.3% of the 0.1 s bucket (2026-12-02), and with the
/// job's workers kept together (`keep_together`, the default since that
/// day) 56.4%, where seed 8 alone went from 72.2% to 57.0%. Seeds 1-24
/// since then: the least 85.2%, 56.4%, 67.0%, 80.0% of the four buckets,
/// their means 91.2%, 80.6%, 84.3%, 91.1%.
#[test]
fn three_workers_on_a_bucket_of_a_tenth_of_a_second_use_most_of_it() {
    let mut sc = sim::load(&scenario("shallow-bucket")).unwrap();
    sc.clients.count = 3;
    for units in [15.0, 20.0, 30.0, 40.0] {
        sc.server.capacity = Some(units);
        let (scores, rate) = default_over(sc.clone(), 24);
        let (least, mean) = spread(&scores);
        assert!(
            least >= 0.55,
            "{units} units: the least seed used {least:.3}"
        );
        assert!(mean >= 0.78, "{units} units: {mean:.3} on average");
        assert!(
            rate < 0.01,
            "{units} units: {rate:.4} of requests throttled"
        );
    }
}

/// `in_flight`: a client writes several batches at once, as a worker does
/// (`dynamodb.max_in_flight_batches`, 8), sharing one strategy and one
/// pacer. One client on the shallow bucket: with one request in flight its
/// round trips bound it (81.0-87.5% utilization on seeds 1-5); with eight it
/// takes what the bench's one worker takes (96.4% through the proxy,
/// 2026-11-27): at least 95% (96.0-96.6%). The first request holds the pacer's turn
/// until its answer (the strategy probes), so the second is composed by
/// what the first answer showed: at most the 10 units the bucket admitted,
/// though eight full batches were waiting.
#[test]
fn clients_with_batches_in_flight_share_the_pacers_turn() {
    let mut sc = sim::load(&scenario("shallow-bucket")).unwrap();
    for seed in 1..=5 {
        sc.seed = seed;
        let run = |sc: &sim::scenario::Scenario| {
            let r = sim::run(sc).unwrap();
            let (score, attempts) = run_of(&r, "adaptive");
            (score.clone(), attempts.to_vec())
        };
        sc.clients.in_flight = 1;
        let (one, _) = run(&sc);
        sc.clients.in_flight = 8;
        let (eight, attempts) = run(&sc);
        assert!(one.utilization < 0.9, "seed {seed}: {one:?}");
        assert!(eight.utilization >= 0.95, "seed {seed}: {eight:?}");
        assert!(eight.retry_rate <= 0.01, "seed {seed}: {eight:?}");
        let (first, second) = (attempts[0], attempts[1]);
        assert!(
            first.units > 10.0 && first.accepted_units <= 10.0,
            "{first:?}"
        );
        assert!(
            second.units <= first.accepted_units,
            "{second:?} after {first:?}"
        );
    }
}

/// The simulator's partitions (`hot-range.toml`, the bench's hot range):
/// the default, pacing the hot key's range apart, uses nearly all of the
/// busiest partition at about 1% of its requests throttled; partitions and
/// keys decide every figure (the same scenario without partitions is bound
/// by the table, not by one partition).
#[test]
fn the_hot_range_is_bound_by_its_partition_and_the_default_uses_it() {
    let s = scores("hot-range");
    let d = by(&s, "adaptive");
    let used = d
        .busiest_partition_use
        .expect("partitions: the busiest partition is measured");
    assert!(used > 0.9, "busiest partition {used}");
    let rate = d.throttled as f64 / d.requests as f64;
    assert!(rate < 0.02, "throttled {rate}");
    // The bound is the partition's: the table's 150 WCU/s are not all used.
    assert!(d.utilization < 0.8, "utilization {}", d.utilization);
    let mut sc = sim::load(&scenario("hot-range")).unwrap();
    sc.server.partitions = None;
    let plain = sim::run(&sc).unwrap().scores;
    let p = by(&plain, "adaptive");
    assert_eq!(p.busiest_partition_use, None);
    assert!(
        p.utilization > 0.9,
        "no partitions: the table binds ({})",
        p.utilization
    );
}

/// A neighbour on the hot range's table (`hot-range-neighbour.toml`, 45 of
/// 150 WCU/s over keys that spread evenly) takes its part of every
/// partition, the hot one too: the default uses nearly all that it leaves of
/// the busiest one, at about 1% of its requests throttled. A shape the hot
/// range was not tuned on.
#[test]
fn with_a_neighbour_on_a_parted_table_the_default_uses_what_it_leaves_of_the_hot_partition() {
    on_seeds("hot-range-neighbour", |seed, s| {
        let d = by(s, "adaptive");
        let used = d
            .busiest_partition_use
            .expect("partitions: the busiest partition is measured");
        assert!(
            (0.9..1.01).contains(&used),
            "seed {seed}: busiest partition {used} of what the neighbour leaves"
        );
        let rate = d.throttled as f64 / d.requests as f64;
        assert!(rate < 0.02, "seed {seed}: throttled {rate}");
    });
}

/// Splits one CSV line into its fields, as RFC 4180 reads them (a quoted
/// field may hold commas; a doubled quote is one quote).
fn csv_fields(line: &str) -> Vec<String> {
    let (mut fields, mut field, mut quoted) = (Vec::new(), String::new(), false);
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' if quoted && chars.peek() == Some(&'"') => {
                field.push('"');
                chars.next();
            }
            '"' => quoted = !quoted,
            ',' if !quoted => fields.push(std::mem::take(&mut field)),
            c => field.push(c),
        }
    }
    fields.push(field);
    fields
}

/// A strategy's label with a comma in it ("adaptive, one rate", as
/// `hot-range.toml` has) is one column of the trace, not two.
#[test]
fn a_label_with_a_comma_is_one_column_of_the_trace() {
    let dir = std::env::temp_dir().join(format!("ingest-sim-label-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let toml = dir.join("s.toml");
    std::fs::write(
        &toml,
        r#"
        name = "label"
        duration_s = 20
        [server]
        model = "token-bucket"
        capacity = 100
        refill_per_s = 10
        [clients]
        count = 2
        [[strategy]]
        name = "adaptive"
        label = "adaptive, one rate"
        [[strategy]]
        name = "exponential"
        "#,
    )
    .unwrap();
    let results = sim::run(&sim::load(&toml).unwrap()).unwrap();
    let csv = dir.join("t.csv");
    results.write_trace(&csv).unwrap();
    let trace = std::fs::read_to_string(&csv).unwrap();
    let mut lines = trace.lines();
    let header = csv_fields(lines.next().unwrap());
    let mut labels = std::collections::BTreeSet::new();
    for line in lines {
        let fields = csv_fields(line);
        assert_eq!(fields.len(), header.len(), "{line}");
        labels.insert(fields[0].clone());
    }
    assert_eq!(
        labels.into_iter().collect::<Vec<_>>(),
        ["adaptive, one rate", "exponential"]
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// A job's workers share their lessons (`clients.lessons_ms`, as the
/// worker's `throttle.lessons_topic`): under a neighbour at 30% of the
/// table, the workers throttle less with them than each learning alone
/// (0.68% against 0.94% over seeds 1-8 on 2026-11-29) at the same
/// utilization; on a 0.1 s bucket, where peers' requests meeting settle
/// workers now and then, no seed did worse with them. Since the job's
/// workers are kept together by the beats on the same topic
/// (`keep_together`, the default since 2026-12-02), seed 8 of that bucket
/// uses 57.0% of it with lessons against 72.2% without, and seed 6 79.8%
/// against 77.2%: what is asked of them is the spread over seeds 1-24, not
/// one seed's path (the least with lessons 56.4% against 53.3%, the mean
/// 80.6% against 80.6%).
#[test]
fn lessons_shared_within_a_job_cut_throttles_under_a_neighbour_and_cost_nothing_shallow() {
    // Throttled share, (least, mean) utilization over seeds 1 to `seeds`.
    let totals = |sc: &sim::scenario::Scenario, lessons_ms: f64, seeds: u64| {
        let mut sc = sc.clone();
        sc.clients.lessons_ms = lessons_ms;
        let (scores, rate) = default_over(sc, seeds);
        (rate, spread(&scores))
    };
    let neighbour = sim::load(&scenario("neighbour")).unwrap();
    let (alone, (alone_least, _)) = totals(&neighbour, -1.0, 8);
    let (shared, (shared_least, _)) = totals(&neighbour, 50.0, 8);
    assert!(shared < 0.85 * alone, "{shared} vs {alone}");
    assert!(
        shared_least >= alone_least - 0.01,
        "least {shared_least} vs {alone_least}"
    );
    let mut shallow = sim::load(&scenario("shallow-bucket")).unwrap();
    shallow.clients.count = 3;
    shallow.server.capacity = Some(20.0);
    let (_, (alone_least, alone_mean)) = totals(&shallow, -1.0, 24);
    let (_, (shared_least, shared_mean)) = totals(&shallow, 50.0, 24);
    assert!(
        shared_least >= alone_least - 0.005 && shared_mean >= alone_mean - 0.005,
        "least {shared_least} vs {alone_least}, mean {shared_mean} vs {alone_mean}"
    );
}

/// Jobs on one table hear each other's beats and split it
/// (`clients.split_jobs`, as the worker's `throttle.split_with_jobs`): two
/// jobs of three clients and three jobs (seeds 1-8) are throttled on 1.19%
/// and 16.6% of their requests each learning alone (2026-12-01), and on
/// 0.14% and 0.04% split, each job near its even part of the table; two
/// jobs of three pace as one job of six, and since their first throttle
/// is no first meeting (`Strategy::split_with_jobs`) use the table at least as
/// well (97.4% at the least against 95.6%).
#[test]
fn jobs_that_hear_each_other_split_the_table_instead_of_meeting_in_it() {
    let totals = |mut sc: sim::scenario::Scenario, split: bool| {
        sc.clients.split_jobs = split;
        let (scores, rate) = default_over_seeds(sc);
        let (util, _) = spread(&scores);
        let least_job = scores
            .iter()
            .flat_map(|s| s.group_shares.iter().copied())
            .fold(1.0f64, f64::min);
        (rate, util, least_job)
    };
    for (name, jobs) in [("two-jobs", 2.0), ("three-jobs", 3.0)] {
        let sc = sim::load(&scenario(name)).unwrap();
        let (alone, _, _) = totals(sc.clone(), false);
        let (split, util, least_job) = totals(sc.clone(), true);
        assert!(alone > 0.01, "{name}: {alone}");
        assert!(split < 0.003, "{name}: {split}");
        assert!(util >= 0.95, "{name}: {util}");
        assert!(least_job >= 0.9 / jobs, "{name}: {least_job}");
        // Two jobs of three split as one job of six paces, or better.
        if name == "two-jobs" {
            let mut one = sc;
            one.clients.groups = 1;
            let (as_one, one_util, _) = totals(one, true);
            assert!((split - as_one).abs() < 0.001, "{split} vs {as_one}");
            assert!(util >= one_util - 0.005, "{util} vs {one_util}");
        }
    }
}

/// A neighbour writing 150 (or 100) of a 200 WCU/s table leaves the job's
/// three workers a quarter (a half) of their shares. Each worker's cuts and
/// climbs scale with its own level, so one that drifted low (its requests
/// larger than its peers', refused whole in a bucket they keep low) stays
/// there: 0.3-0.6 units/s of a share of 65 for ten minutes (least client
/// 0.00 of the clients' mean in a minute, seeds 1-8). Kept within 0.5-1.25
/// of its part of the job's pace (`keep_together`, the default since
/// 2026-12-02), every worker writes at least a fifth of the mean in every
/// minute of every seed (0.35 and 0.88 at the least on 2026-12-02), and
/// fewer requests are throttled (4.44% against 5.23%, 0.95% against
/// 2.76%). `adaptive-apart`, without it, still starves one.
#[test]
fn under_a_heavy_neighbour_a_job_kept_together_starves_no_worker() {
    for (foreign, most_throttled) in [(150.0, 0.03), (100.0, 0.015)] {
        let mut sc = sim::load(&scenario("heavy-neighbour")).unwrap();
        sc.server.foreign_per_s = foreign;
        let (mut throttled, mut requests, mut default_least) = (0, 0, f64::MAX);
        for seed in 1..=8 {
            sc.seed = seed;
            let scores = sim::run(&sc).unwrap().scores;
            let s = by(&scores, "adaptive");
            let least = s.least_client_share.unwrap();
            assert!(
                least >= 0.2,
                "neighbour at {foreign}, seed {seed}: least client {least:.2}"
            );
            (throttled, requests) = (throttled + s.throttled, requests + s.requests);
            let d = by(&scores, "adaptive-apart").least_client_share.unwrap();
            default_least = default_least.min(d);
        }
        let rate = throttled as f64 / requests as f64;
        assert!(
            rate <= most_throttled,
            "neighbour at {foreign}: {:.2}% throttled",
            100.0 * rate
        );
        if foreign == 150.0 {
            assert!(default_least < 0.05, "apart, one starves: {default_least}");
        }
    }
}

/// Under a neighbour writing 150 of 200 WCU/s a job of three comes down
/// from its shares (65 units/s each) to the 50 that are free within its
/// first seconds, and settles on the way. A settle that then met a throttle
/// under 0.8 of its level failed (`SETTLE_FAILED`), and its worker was back
/// at its share every few seconds for the rest of the run: 12 of 72 workers
/// over seeds 1-24, in 8 seeds whose workers were refused 22-140 times each
/// after the first 30 s (the others' 14-37), 2.65% of requests throttled in
/// all (2.18% since). Begun at the start, a settle follows the level down.
#[test]
fn under_a_heavy_neighbour_a_settle_begun_at_the_start_follows_the_job_down() {
    let sc = sim::load(&scenario("heavy-neighbour")).unwrap();
    let (_, throttled) = default_over(sc, 24);
    assert!(throttled <= 0.024, "{:.2}% throttled", 100.0 * throttled);
}

/// A neighbour writing 180 of a 200 WCU/s table leaves each of the job's
/// three workers a tenth of its share, under `COLLISION_BELOW`, where a
/// throttle on a table that admits little at once is read as peers'
/// requests meeting and cut nothing: the workers paced at the line, asked
/// for nearly twice the 20 units/s free and were refused on 24.1% of their
/// requests (seeds 1-8). Held that far under its shares, the job meets
/// another writer, not its peers: a collision brings the rate down to what
/// was accepted (6.3%, and as much written).
#[test]
fn under_a_neighbour_writing_nine_tenths_a_job_held_far_under_its_shares_comes_down() {
    let mut sc = sim::load(&scenario("heavy-neighbour")).unwrap();
    sc.server.foreign_per_s = 180.0;
    let (scores, throttled) = default_over_seeds(sc);
    let (least, _) = spread(&scores);
    assert!(throttled <= 0.1, "{:.2}% throttled", 100.0 * throttled);
    assert!(least >= 0.95, "of what is free: least {least:.3}");
}

/// One worker alone under a neighbour writing 150 (or 180) of a 200 WCU/s
/// table: it has no peers' beats, so nothing held it together, and at a
/// quarter (a tenth) of its share every partial answer was a size signal
/// that cut nothing, and the fast recovery took it back toward its share
/// within seconds: 33.4% (63.5%) of its requests refused (seeds 1-8).
/// Alone, a worker is its own job, its part what the table gave it lately:
/// it settles, cuts on such answers, and is held at what it is given.
#[test]
fn a_worker_alone_under_a_heavy_neighbour_is_its_own_job() {
    for (foreign, most) in [(150.0, 0.15), (180.0, 0.1)] {
        let mut sc = sim::load(&scenario("heavy-neighbour")).unwrap();
        sc.server.foreign_per_s = foreign;
        sc.clients.count = 1;
        let (scores, throttled) = default_over_seeds(sc);
        let (least, _) = spread(&scores);
        assert!(
            throttled <= most,
            "neighbour at {foreign}: {:.2}% throttled",
            100.0 * throttled
        );
        assert!(least >= 0.94, "neighbour at {foreign}: least {least:.3}");
    }
}

/// One worker alone under a neighbour writing 150 of a 200 WCU/s table,
/// at the line: its requests, no larger than the table had shown it
/// admits at once, were answered in part every few seconds, and each such
/// answer was read as a size signal that cut nothing (the rate was over
/// what its window accepted only by the pacer's burst). Once refusals
/// repeat, such an answer cuts a lone worker's rate (`ALONE_CUT_REFUSED`):
/// seeds 1-8, on a 1 s bucket 11.07% -> 5.61% of requests throttled at
/// 97.1% -> 97.0% of what is free (mean; least seed 95.7% -> 96.2%), on a
/// 0.5 s bucket 5.39% -> 3.38% at 96.8% -> 97.2% (94.8% -> 95.5%).
#[test]
fn a_worker_alone_at_the_line_cuts_on_partial_answers() {
    for (bucket, most) in [(100.0, 0.045), (200.0, 0.08)] {
        let mut sc = sim::load(&scenario("heavy-neighbour")).unwrap();
        sc.server.capacity = Some(bucket);
        sc.clients.count = 1;
        let (scores, throttled) = default_over(sc, 8);
        let (least, mean) = spread(&scores);
        assert!(
            throttled <= most,
            "a {bucket}-unit bucket: {:.2}% throttled",
            100.0 * throttled
        );
        assert!(
            mean >= 0.95 && least >= 0.93,
            "a {bucket}-unit bucket: of what is free mean {mean:.3}, least {least:.3}"
        );
    }
}

/// One worker alone under a neighbour writing 50 of a 200 WCU/s table with
/// a 50-unit bucket: the table reads as shallow, and the fast recovery took
/// the worker from each cut back over the 150 free within 1-2 s, 5.85% of
/// its requests refused (seeds 1-8). With refusals repeating lately, a lone
/// worker's fast recovery stops just under the rate it was refused at
/// (`LONE_LINE_S`): 0.79%, at 99.4% of what is free instead of 99.9%. Not
/// where refusals are rare: alone on a 40-unit bucket with no neighbour,
/// each cut is from a rate its round trips bound, and stopped there on
/// every cut the worker used 90.8% of the table in its least seed instead
/// of 95.7% (seeds 1-24); nor on `shallow-bucket.toml`'s 10-unit bucket,
/// where its own requests meet (`LONE_LINE_DEEP_S`; 76.8% instead of
/// 85.1% with neither condition).
#[test]
fn a_worker_alone_refused_often_recovers_to_the_line_not_past_it() {
    let mut sc = sim::load(&scenario("heavy-neighbour")).unwrap();
    sc.server.foreign_per_s = 50.0;
    sc.server.capacity = Some(50.0);
    sc.clients.count = 1;
    let (scores, throttled) = default_over(sc, 8);
    let (least, _) = spread(&scores);
    assert!(throttled <= 0.015, "{:.2}% throttled", 100.0 * throttled);
    assert!(least >= 0.98, "of what is free: least {least:.3}");
    let mut shallow = sim::load(&scenario("shallow-bucket")).unwrap();
    let (scores, _) = default_over(shallow.clone(), 24);
    let (_, mean) = spread(&scores);
    assert!(mean >= 0.83, "alone on a 10-unit bucket: {mean:.3} used");
    shallow.server.capacity = Some(40.0);
    let (scores, _) = default_over(shallow, 24);
    let (least, _) = spread(&scores);
    assert!(least >= 0.94, "alone on a 40-unit bucket: least {least:.3}");
}

/// A job kept together under another writer settles even where the table
/// reads as shallow (its requests shrink in the bucket the writer keeps
/// low), unless a settle fails: throttles that follow the rate down are
/// peers' requests meeting in a bucket that is small, not low. The shallow
/// 10-unit bucket with a neighbour at 60 and three workers, seeds 1-8: the
/// job uses 58.6% of what is free (57.7% before 2026-12-02); settling there
/// with no such end, 36.7%. (The heavy neighbour, the test above: 4.44%
/// of requests throttled before, 3.16% with the settle, 2.19% since its
/// worker above its part also cuts a tenth on a partial answer:
/// `SIZE_CUT`.)
#[test]
fn on_a_small_bucket_with_a_neighbour_a_settle_that_fails_ends() {
    let mut sc = sim::load(&scenario("shallow-bucket")).unwrap();
    sc.server.foreign_per_s = 60.0;
    sc.clients.count = 3;
    let (scores, throttled) = default_over_seeds(sc);
    let (least, mean) = spread(&scores);
    assert!(
        mean >= 0.5 && least >= 0.45,
        "of what is free: mean {mean:.3}, least {least:.3}"
    );
    assert!(throttled <= 0.06, "{:.2}% throttled", 100.0 * throttled);
}

/// The capacity step with a neighbour at 60 (`capacity-step-neighbour.toml`),
/// with its 300 s of burst credit and with none, seeds 1-24: kept together
/// (the default), the job writes as much as apart, and with burst credit it
/// is refused hardly more often, in all or per request (within 6%). Until
/// 2026-12-02 the other writers' throttles met before a step kept a worker
/// held after it, at 1.25 of its part of the job's old pace: with no burst
/// credit the job wrote 2.5% fewer units than apart (48,175 against 49,393
/// a seed), and with it 3.54% of its requests were throttled against
/// 2.88%. Then 2.82% against 2.88% (1,702 and 1,727 refused); since a
/// capacity drop leaves the neighbour its traffic (`STEP_FLOOR`), 1.92%
/// against 1.83% (1,057 and 1,011; 5.2% more per request), the difference
/// spread over the phases at 100 and 300 WCU/s (355 against 336 and 380
/// against 353 refused), most of it partial answers that cut nothing;
/// clearing the other writers' throttles at the drop (the hold re-earned)
/// gave 1.88%, and 1.08% against 1.03% with six workers: noise, not landed.
#[test]
fn on_a_capacity_step_with_a_neighbour_a_job_kept_together_loses_nothing() {
    for burst_s in [300.0, 0.0] {
        let mut sc = sim::load(&scenario("capacity-step-neighbour")).unwrap();
        sc.server.burst_credit_s = burst_s;
        sc.strategies
            .retain(|s| s["name"].as_str() == Some("adaptive"));
        // Refused, requests and units written, over the seeds.
        let (mut together, mut apart) = ((0, 0, 0.0), (0, 0, 0.0));
        for seed in 1..=24 {
            sc.seed = seed;
            let scores = sim::run(&sc).unwrap().scores;
            for (sum, label) in [(&mut together, "adaptive"), (&mut apart, "adaptive-apart")] {
                let s = by(&scores, label);
                *sum = (
                    sum.0 + s.throttled,
                    sum.1 + s.requests,
                    sum.2 + s.accepted_units,
                );
            }
        }
        assert!(
            together.2 >= 0.99 * apart.2,
            "burst {burst_s} s: units {} against {}",
            together.2,
            apart.2
        );
        if burst_s > 0.0 {
            let share = |(refused, requests, _): (u64, u64, f64)| refused as f64 / requests as f64;
            assert!(
                together.0 as f64 <= 1.06 * apart.0 as f64
                    && share(together) <= 1.06 * share(apart),
                "refused {together:?} against {apart:?}"
            );
        }
    }
}

/// Jobs that do not split (`split_with_jobs = false`) send no beats, so
/// they cannot keep their workers together: with a neighbour at 60 of the
/// two jobs' 200 WCU/s, `keep_together` (the default) scores as it does
/// off. (The simulator beat for them too until 2026-12-02: 2.94% throttled
/// against 4.15%, seeds 1-8, a configuration the worker cannot run.)
#[test]
fn jobs_that_do_not_split_send_no_beats_to_keep_together_by() {
    let mut sc = sim::load(&scenario("two-jobs")).unwrap();
    sc.server.foreign_per_s = 60.0;
    sc.clients.split_jobs = false;
    sc.strategies
        .retain(|s| s.get("label").is_none() && s["name"].as_str() == Some("adaptive"));
    let mut apart = sc.strategies[0].clone();
    apart.insert("label".into(), "adaptive-apart".into());
    apart.insert("keep_together".into(), false.into());
    sc.strategies.push(apart);
    for seed in 1..=2 {
        sc.seed = seed;
        let scores = sim::run(&sc).unwrap().scores;
        let (d, t) = (by(&scores, "adaptive"), by(&scores, "adaptive-apart"));
        assert_eq!(
            (d.throttled, d.requests),
            (t.throttled, t.requests),
            "seed {seed}"
        );
    }
}

/// The default's answers to requests sent within `window` (seconds) of
/// `name`'s scenario with `clients` clients, seeds 1-8: (refused, requests,
/// units accepted).
fn default_in_window(name: &str, clients: usize, window: std::ops::Range<f64>) -> (u64, u64, f64) {
    let mut sc = sim::load(&scenario(name)).unwrap();
    sc.clients.count = clients;
    sc.strategies
        .retain(|s| s.get("label").is_none() && s["name"].as_str() == Some("adaptive"));
    let mut sum = (0, 0, 0.0);
    for seed in 1..=8 {
        sc.seed = seed;
        let r = sim::run(&sc).unwrap();
        let (_, attempts) = run_of(&r, "adaptive");
        for a in attempts.iter().filter(|a| window.contains(&a.t_s)) {
            sum = (
                sum.0 + u64::from(a.throttled),
                sum.1 + 1,
                sum.2 + a.accepted_units,
            );
        }
    }
    sum
}

/// A capacity drop on a table another writer shares leaves that writer its
/// traffic (`STEP_FLOOR` in `throttle::adaptive`): the table at 200 -> 100
/// WCU/s with a neighbour writing 60 (`capacity-step-neighbour.toml`) leaves
/// 40 free. Put at their new shares, one worker asked 98 units/s of them,
/// three 98 together, and their partial answers there, far under their
/// shares, cut nothing: 42.5% and 23.5% of the phase's requests refused
/// (seeds 1-8), against 1.8% and 7.6% paced at the share of what the new
/// capacity leaves, with as much written (about 40 units/s).
#[test]
fn a_capacity_drop_leaves_another_writer_its_traffic() {
    for (clients, most) in [(1, 0.05), (3, 0.12)] {
        let (refused, requests, units) =
            default_in_window("capacity-step-neighbour", clients, 120.0..240.0);
        let share = refused as f64 / requests as f64;
        let rate = units / 8.0 / 120.0;
        assert!(
            share <= most,
            "{clients} worker(s): {refused} of {requests} refused at 100 WCU/s"
        );
        assert!(
            rate >= 0.95 * 40.0,
            "{clients} worker(s): {rate:.1} units/s of the 40 free"
        );
    }
}

/// ... and a rise gives the job what the new capacity leaves the other
/// writer's traffic, not the old rate scaled: after 100 -> 300 WCU/s with
/// the neighbour at 60, three workers scaled from 13 units/s each took 137
/// of the 240 free in the first 10 s (seeds 1-8), at 219 so.
#[test]
fn a_capacity_rise_takes_what_another_writer_leaves() {
    let (_, _, units) = default_in_window("capacity-step-neighbour", 3, 240.0..250.0);
    let rate = units / 8.0 / 10.0;
    assert!(rate >= 0.85 * 240.0, "{rate:.1} units/s of the 240 free");
}
