//! The subcommands' bodies: the worker run and its summary, the simulator,
//! and the tools (produce, show-table).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{bail, Context};
use tokio_util::sync::CancellationToken;

use ingest::config::{DynamoSettings, SdkRetryMode, Settings};
use ingest::sink::dynamodb::Dynamo;
use ingest::source::SourceExit;
use ingest::{devbroker, telemetry, tools, worker};

use super::{EXIT_CONFIG, EXIT_DRAIN_TIMEOUT, EXIT_FATAL};

/// `ingest dev-broker`: librdkafka's mock cluster with the given topics.
pub async fn dev_broker(
    listen: std::net::SocketAddr,
    topics: &[(String, i32)],
    shutdown: CancellationToken,
) -> anyhow::Result<ExitCode> {
    let broker = devbroker::DevBroker::start()?;
    for (t, p) in topics {
        broker.create_topic(t, *p)?;
    }
    devbroker::serve(&broker, listen, shutdown).await?;
    Ok(ExitCode::SUCCESS)
}

/// `ingest create-topics`.
pub async fn create_topics(brokers: &str, topics: &[(String, i32)]) -> anyhow::Result<ExitCode> {
    tools::create_topics(brokers, topics).await?;
    let names: Vec<String> = topics.iter().map(|(t, p)| format!("{t}:{p}")).collect();
    out!("topics ready: {}", names.join(", "));
    Ok(ExitCode::SUCCESS)
}

/// `ingest produce`: sample records or the lines of a file.
pub async fn produce(
    brokers: &str,
    topic: &str,
    sample: Option<u64>,
    start: u64,
    file: Option<PathBuf>,
) -> anyhow::Result<ExitCode> {
    let n = match (sample, file) {
        (Some(n), None) => {
            let values = (start..start + n).map(|i| (None, tools::sample_record(i)));
            tools::produce(brokers, topic, values).await?
        }
        (None, Some(path)) => {
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("reading {}", path.display()))?;
            let values = text
                .lines()
                .filter(|l| !l.trim().is_empty())
                .map(|l| (None, l.to_string()));
            tools::produce(brokers, topic, values).await?
        }
        _ => bail!("give either --sample N or --file PATH"),
    };
    out!("produced {n} records to {topic}");
    Ok(ExitCode::SUCCESS)
}

/// `ingest show-table`: the item count and the first items.
pub async fn show_table(
    table: String,
    limit: usize,
    endpoint_url: Option<String>,
) -> anyhow::Result<ExitCode> {
    let settings = DynamoSettings {
        endpoint_url,
        region: None,
        request_timeout: std::time::Duration::from_secs(10),
        max_in_flight_batches: 1,
        start_patience: std::time::Duration::ZERO,
    };
    let dynamo = Dynamo::connect(&settings, SdkRetryMode::Off).await;
    let (count, items) = tools::show_table(&dynamo, &table, limit).await?;
    out!("table {table}: {count} items");
    for item in items {
        out!("  {item}");
    }
    Ok(ExitCode::SUCCESS)
}

/// A scenario file with `--clients` applied; exit 2 when it is bad.
fn load_scenario(
    scenario: &std::path::Path,
    clients: Option<usize>,
) -> Result<ingest::sim::scenario::Scenario, ExitCode> {
    let mut sc = ingest::sim::load(scenario).map_err(|e| {
        err!("error: {e}");
        ExitCode::from(EXIT_CONFIG)
    })?;
    if let Some(n) = clients {
        sc.clients.count = n;
    }
    Ok(sc)
}

/// `ingest sim`; exit 2 for a bad scenario, 1 when an output cannot be written.
pub fn sim(
    scenario: PathBuf,
    json: Option<PathBuf>,
    chart: Option<PathBuf>,
    trace: Option<PathBuf>,
    clients: Option<usize>,
    seed: Option<u64>,
) -> ExitCode {
    let mut sc = match load_scenario(&scenario, clients) {
        Ok(sc) => sc,
        Err(code) => return code,
    };
    if let Some(s) = seed {
        sc.seed = s;
    }
    let started = std::time::Instant::now();
    let results = match ingest::sim::run(&sc) {
        Ok(r) => r,
        Err(e) => {
            err!("error: {e}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    let table = ingest::sim::report::table(&sc.name, &results.scores);
    print_table(&table, &sc, "", started);
    let written = [
        json.as_ref().map(|p| (p, results.write_json(p))),
        chart
            .as_ref()
            .map(|p| (p, results.write_chart(p, sc.duration_s))),
        trace.as_ref().map(|p| (p, results.write_trace(p))),
    ];
    for (path, result) in written.into_iter().flatten() {
        if let Err(e) = result {
            err!("error: {e}");
            return ExitCode::from(EXIT_FATAL);
        }
        out!("wrote {}", path.display());
    }
    ExitCode::SUCCESS
}

/// A score table, then the run's size and how long it took (`per`: what
/// the simulated seconds are counted per, if anything).
fn print_table(
    table: &str,
    sc: &ingest::sim::scenario::Scenario,
    per: &str,
    started: std::time::Instant,
) {
    out!("{}", table.strip_suffix('\n').unwrap_or(table));
    out!(
        "({} clients, {} simulated s{per}, {:.2} s of real time)",
        sc.clients.count,
        sc.duration_s,
        started.elapsed().as_secs_f64()
    );
}

/// `ingest sim --seeds N`: seeds 1 to N, each strategy's spread over them;
/// exit 2 for a bad scenario, 1 when the JSON cannot be written.
pub fn sim_seeds(
    scenario: PathBuf,
    json: Option<PathBuf>,
    clients: Option<usize>,
    seeds: u64,
) -> ExitCode {
    let sc = match load_scenario(&scenario, clients) {
        Ok(sc) => sc,
        Err(code) => return code,
    };
    let started = std::time::Instant::now();
    let spreads = match ingest::sim::run_seeds(&sc, seeds) {
        Ok(s) => s,
        Err(e) => {
            err!("error: {e}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    print_table(&spreads.table(), &sc, " a seed", started);
    if let Some(path) = json {
        if let Err(e) = spreads.write_json(&path) {
            err!("error: {e}");
            return ExitCode::from(EXIT_FATAL);
        }
        out!("wrote {}", path.display());
    }
    ExitCode::SUCCESS
}

/// `ingest run`: the worker, then its summary on stdout.
pub async fn run(
    config: PathBuf,
    until_caught_up: bool,
    shutdown: CancellationToken,
) -> anyhow::Result<ExitCode> {
    let settings = match Settings::load(&config, std::env::vars()) {
        Ok(s) => s,
        Err(e) => {
            err!("error: {e}");
            return Ok(ExitCode::from(EXIT_CONFIG));
        }
    };
    telemetry::init_logs(&settings.log);
    let started = Instant::now();
    match worker::run(settings, until_caught_up, shutdown).await {
        Ok(outcome) => {
            let elapsed = started.elapsed().as_secs_f64();
            let label = match outcome.exit {
                SourceExit::Stopped => "stopped",
                SourceExit::CaughtUp => "caught_up",
                SourceExit::DrainTimedOut => "drain_timed_out",
                SourceExit::WorkLeft => "work_left",
            };
            let totals = outcome.totals;
            let mut summary = serde_json::to_value(totals)?;
            summary["exit"] = label.into();
            summary["dead_lettered_by_reason"] = serde_json::to_value(&outcome.dead_letters)?;
            summary["tables"] = serde_json::to_value(&outcome.tables)?;
            summary["elapsed_s"] = serde_json::json!((elapsed * 1000.0).round() / 1000.0);
            summary["records_per_s"] =
                serde_json::json!((totals.records_consumed as f64 / elapsed.max(1e-3)).round());
            summary["peak_rss_mb"] =
                serde_json::json!(telemetry::peak_rss_bytes()
                    .map(|b| (b as f64 / 1_048_576.0 * 10.0).round() / 10.0));
            summary["cpu_s"] = serde_json::json!(telemetry::cpu_seconds());
            tracing::info!(summary = %summary, "finished");
            out!("{summary}");
            Ok(match outcome.exit {
                SourceExit::DrainTimedOut | SourceExit::WorkLeft => {
                    ExitCode::from(EXIT_DRAIN_TIMEOUT)
                }
                _ => ExitCode::SUCCESS,
            })
        }
        Err(e) => {
            tracing::error!(error = %e, "worker failed");
            err!("error: {e}");
            Ok(ExitCode::from(EXIT_FATAL))
        }
    }
}
