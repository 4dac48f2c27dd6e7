//! The `ingest` command: parse arguments, load config, init logs, run, map
//! the outcome to an exit code. `anyhow` lives here and nowhere else.
//!
//! Exit codes: 0 done (stopped and drained, or caught up); 1 fatal runtime
//! error or a panic (nothing unwritten was committed); 2 bad config or usage; 3 stopped
//! but the drain deadline passed (what was written is committed, the rest
//! will be redelivered); 130 a second SIGINT/SIGTERM forced the exit.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use tokio_util::sync::CancellationToken;

use ingest::config::{LogFormat, LogSettings, Settings};
use ingest::telemetry;

/// `println!` that does not panic when stdout is closed (its reader gone):
/// a worker whose output pipe broke still exits with its own code (the
/// run's summary is in its `finished` log line too).
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout().lock(), $($arg)*);
    }};
}

/// `eprintln!` that does not panic when stderr is closed.
macro_rules! err {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr().lock(), $($arg)*);
    }};
}

#[path = "ingest/commands.rs"]
mod commands;

const EXIT_FATAL: u8 = 1;
const EXIT_CONFIG: u8 = 2;
const EXIT_DRAIN_TIMEOUT: u8 = 3;
const EXIT_FORCED: i32 = 130;

#[derive(Parser)]
#[command(
    name = "ingest",
    version,
    about = "Kafka -> DynamoDB, paced to the table's capacity, losing nothing"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the worker: consume, write, commit. Stops on SIGTERM/SIGINT.
    Run {
        /// The TOML config file (keys overridable by INGEST__* variables).
        #[arg(long)]
        config: PathBuf,
        /// Batch-job mode: exit 0 once every assigned partition is written and
        /// committed up to the end offsets seen when it was assigned.
        #[arg(long)]
        until_caught_up: bool,
    },
    /// Validate a config file and print the settings it yields.
    CheckConfig {
        #[arg(long)]
        config: PathBuf,
    },
    /// Run an embedded Kafka broker (librdkafka's mock cluster; in memory,
    /// keeping only the last 5 MB or 100,000 records of each partition).
    DevBroker {
        /// Fixed address to serve the broker on.
        #[arg(long, default_value = "127.0.0.1:19092")]
        listen: SocketAddr,
        /// Topics to create, as name:partitions.
        #[arg(long = "topic", value_parser = parse_topic)]
        topics: Vec<(String, i32)>,
    },
    /// Create topics through the admin API (existing ones are kept).
    CreateTopics {
        #[arg(long)]
        brokers: String,
        /// Topics to create, as name:partitions.
        #[arg(long = "topic", value_parser = parse_topic, required = true)]
        topics: Vec<(String, i32)>,
    },
    /// Produce sample order records, or the lines of a file, to a topic.
    Produce {
        #[arg(long)]
        brokers: String,
        #[arg(long)]
        topic: String,
        /// Number of sample records to produce.
        #[arg(long, conflicts_with = "file")]
        sample: Option<u64>,
        /// First sample number (to produce distinct records in several runs).
        #[arg(long, default_value_t = 0)]
        start: u64,
        /// A file whose every line is one record value.
        #[arg(long)]
        file: Option<PathBuf>,
    },
    /// A DynamoDB proxy that enforces provisioned write capacity per table
    /// (token bucket with burst credit), answering over capacity as DynamoDB
    /// does. Admin: GET /_proxy/stats, POST /_proxy/capacity?table=T&wcu=N.
    ThrottleProxy {
        #[arg(long, default_value = "127.0.0.1:4567")]
        listen: SocketAddr,
        /// The DynamoDB endpoint behind the proxy, or "none": the proxy
        /// answers DescribeTable and the writes itself and stores nothing (a
        /// stand-in for benchmarks of the worker's own cost).
        #[arg(long, default_value = "http://127.0.0.1:4566")]
        upstream: String,
        /// With --upstream none: every table's partition key, NAME[:S|N|B].
        #[arg(long, default_value = "id:S", value_parser = ingest::proxy::stand_in::parse_key)]
        stand_in_key: ingest::decode::KeyAttr,
        /// With --upstream none: milliseconds added before each write is
        /// answered (the real service takes a few).
        #[arg(long, default_value_t = 0.0, value_parser = parse_latency)]
        latency_ms: f64,
        /// Capacity for every table, WCU/s (default: each table's provisioned WCU).
        #[arg(long)]
        wcu: Option<f64>,
        /// Bucket size, in seconds of capacity.
        #[arg(long, default_value_t = 1.0)]
        burst_s: f64,
        /// Burst credit banked from unused capacity, in seconds (DynamoDB keeps 300).
        #[arg(long, default_value_t = 0.0)]
        burst_credit_s: f64,
        /// Capacity steps after each table's first write, as seconds=wcu,...
        #[arg(long, value_parser = parse_schedule, default_value = "")]
        schedule: Schedule,
        /// Model N partitions per table: items go to one by a hash of their
        /// partition key, and each admits at most --partition-wcu (DynamoDB:
        /// 1,000 WCU/s) even when the table has room.
        #[arg(long)]
        partitions: Option<usize>,
        /// A partition's maximum, WCU/s (with --partitions).
        #[arg(long, default_value_t = ingest::proxy::partitions::PARTITION_MAX_WCU)]
        partition_wcu: f64,
        /// On-demand tables: what a new one admits at once, WRU/s (AWS: 4,000;
        /// it then admits twice each new peak).
        #[arg(long, default_value_t = ingest::proxy::on_demand::NEW_TABLE_WRU)]
        on_demand_start: f64,
        /// On-demand tables: their MaxWriteRequestUnits (default: each
        /// table's own, if any).
        #[arg(long)]
        on_demand_max: Option<f64>,
        /// On-demand tables: seconds before a new peak counts (AWS: 30 min).
        #[arg(long, default_value_t = ingest::proxy::on_demand::SCALE_S)]
        on_demand_scale_s: f64,
    },
    /// Score throttle strategies in a simulated fleet, in virtual time
    /// (scenarios: config/scenarios/). Prints a table; writes JSON, an SVG
    /// chart and a CSV trace on request.
    Sim {
        #[arg(long)]
        scenario: PathBuf,
        /// Write the scores as JSON here.
        #[arg(long)]
        json: Option<PathBuf>,
        /// Write the chart here (.svg).
        #[arg(long)]
        chart: Option<PathBuf>,
        /// Write every attempt as CSV here.
        #[arg(long)]
        trace: Option<PathBuf>,
        /// Override the scenario's client count.
        #[arg(long)]
        clients: Option<usize>,
        /// Override the scenario's seed.
        #[arg(long)]
        seed: Option<u64>,
        /// Run seeds 1 to N and print each strategy's spread over them
        /// (throttled requests, utilization, the least job and client).
        #[arg(
            long,
            conflicts_with_all = ["seed", "chart", "trace"],
            value_parser = clap::value_parser!(u64).range(1..)
        )]
        seeds: Option<u64>,
    },
    /// Print how many items a table holds and a few of them.
    ShowTable {
        #[arg(long)]
        table: String,
        #[arg(long, default_value_t = 3)]
        limit: usize,
        /// DynamoDB endpoint (else AWS_ENDPOINT_URL or the region's).
        #[arg(long)]
        endpoint_url: Option<String>,
    },
}

#[derive(Debug, Clone)]
struct Schedule(Vec<(f64, f64)>);

fn parse_schedule(s: &str) -> Result<Schedule, String> {
    let mut steps = Vec::new();
    for part in s.split(',').filter(|p| !p.trim().is_empty()) {
        let (at, wcu) = part
            .split_once('=')
            .ok_or_else(|| format!("`{part}`: expected seconds=wcu"))?;
        let at: f64 = at
            .trim()
            .parse()
            .map_err(|_| format!("`{part}`: seconds must be a number"))?;
        let wcu: f64 = wcu
            .trim()
            .parse()
            .map_err(|_| format!("`{part}`: wcu must be a number"))?;
        if at < 0.0 || wcu <= 0.0 {
            return Err(format!("`{part}`: seconds must be >= 0 and wcu > 0"));
        }
        steps.push((at, wcu));
    }
    steps.sort_by(|a, b| a.0.total_cmp(&b.0));
    Ok(Schedule(steps))
}

fn parse_topic(s: &str) -> Result<(String, i32), String> {
    let (name, parts) = s.split_once(':').unwrap_or((s, "1"));
    let parts: i32 = parts
        .parse()
        .map_err(|_| format!("`{s}`: partitions must be a number (name:partitions)"))?;
    if name.is_empty() || parts < 1 {
        return Err(format!(
            "`{s}`: expected name:partitions with partitions >= 1"
        ));
    }
    Ok((name.to_string(), parts))
}

/// `--latency-ms`: a finite number of milliseconds, at least 0.
fn parse_latency(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(ms) if ms >= 0.0 && ms.is_finite() => Ok(ms),
        _ => Err(format!("{text:?}: must be a number of milliseconds >= 0")),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            err!("error: cannot start the async runtime: {e}");
            return ExitCode::from(EXIT_FATAL);
        }
    };
    run_to_exit(runtime, |rt| rt.block_on(dispatch(cli.command)))
}

/// How long the runtime's threads may take to stop once the work is done:
/// a Kafka client thread that cannot close (a broker that never answers)
/// does not hold the exit.
const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// Runs `work` on `runtime` to an exit code, then shuts the runtime down
/// within [`SHUTDOWN_GRACE`]. A panic (a defect) is caught here, exit 1, so
/// that the bounded shutdown still applies: unwinding would drop the
/// runtime, and that waits for its blocking threads with no limit (a Kafka
/// consumer stuck closing held a worker whose stdout had gone for minutes
/// after its SIGTERM).
fn run_to_exit(
    runtime: tokio::runtime::Runtime,
    work: impl FnOnce(&tokio::runtime::Runtime) -> anyhow::Result<ExitCode>,
) -> ExitCode {
    let code = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| work(&runtime))) {
        Ok(Ok(code)) => code,
        Ok(Err(e)) => {
            err!("error: {e:#}");
            ExitCode::from(EXIT_FATAL)
        }
        Err(_) => {
            err!("error: the worker panicked (a defect; the message is above)");
            ExitCode::from(EXIT_FATAL)
        }
    };
    runtime.shutdown_timeout(SHUTDOWN_GRACE);
    code
}

async fn dispatch(command: Command) -> anyhow::Result<ExitCode> {
    let human = LogSettings {
        format: LogFormat::Human,
        level: "info".into(),
    };
    match command {
        Command::Run {
            config,
            until_caught_up,
        } => commands::run(config, until_caught_up, shutdown_on_signals()).await,
        Command::CheckConfig { config } => match Settings::load(&config, std::env::vars()) {
            Ok(s) => {
                out!("{s:#?}");
                Ok(ExitCode::SUCCESS)
            }
            Err(e) => {
                err!("error: {e}");
                Ok(ExitCode::from(EXIT_CONFIG))
            }
        },
        Command::DevBroker { listen, topics } => {
            telemetry::init_logs(&human);
            commands::dev_broker(listen, &topics, shutdown_on_signals()).await
        }
        Command::CreateTopics { brokers, topics } => {
            commands::create_topics(&brokers, &topics).await
        }
        Command::Produce {
            brokers,
            topic,
            sample,
            start,
            file,
        } => commands::produce(&brokers, &topic, sample, start, file).await,
        Command::ThrottleProxy {
            listen,
            upstream,
            wcu,
            burst_s,
            burst_credit_s,
            schedule,
            partitions,
            partition_wcu,
            on_demand_start,
            on_demand_max,
            on_demand_scale_s,
            stand_in_key,
            latency_ms,
        } => {
            telemetry::init_logs(&human);
            let stand_in = (upstream == ingest::proxy::stand_in::NONE).then(|| {
                ingest::proxy::stand_in::StandIn {
                    key: stand_in_key,
                    latency: std::time::Duration::from_secs_f64(latency_ms / 1e3),
                }
            });
            let cfg = ingest::proxy::ProxyConfig {
                listen,
                upstream,
                wcu,
                burst_s,
                credit_s: burst_credit_s,
                schedule: schedule.0,
                partitions,
                partition_wcu,
                on_demand: ingest::proxy::OnDemandConfig {
                    start: on_demand_start,
                    max: on_demand_max,
                    scale_s: on_demand_scale_s,
                },
                stand_in,
            };
            ingest::proxy::serve(cfg, shutdown_on_signals()).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Sim {
            scenario,
            json,
            chart,
            trace,
            clients,
            seed,
            seeds,
        } => Ok(match seeds {
            Some(n) => commands::sim_seeds(scenario, json, clients, n),
            None => commands::sim(scenario, json, chart, trace, clients, seed),
        }),
        Command::ShowTable {
            table,
            limit,
            endpoint_url,
        } => commands::show_table(table, limit, endpoint_url).await,
    }
}

/// A token cancelled by the first SIGTERM/SIGINT; a second one exits at once.
fn shutdown_on_signals() -> CancellationToken {
    let token = CancellationToken::new();
    let t = token.clone();
    tokio::spawn(async move {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(e) => {
                    tracing::error!(error = %e, "cannot listen for SIGTERM");
                    return;
                }
            };
        for round in 0..2 {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
            if round == 0 {
                t.cancel();
            } else {
                err!("second signal: exiting without draining");
                std::process::exit(EXIT_FORCED);
            }
        }
    });
    token
}

#[cfg(test)]
mod tests {
    use super::*;

    fn defect() -> anyhow::Result<ExitCode> {
        panic!("a defect")
    }

    #[test]
    fn a_panic_exits_1_and_a_blocking_thread_that_never_returns_does_not_hold_the_exit() {
        // A blocking thread stuck for as long as `stuck` lives (a Kafka
        // consumer that cannot close), and work that panics meanwhile.
        let (stuck, never) = std::sync::mpsc::channel::<()>();
        let (done, exited) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .unwrap();
            let code = run_to_exit(runtime, |rt| {
                rt.block_on(async move {
                    tokio::task::spawn_blocking(move || never.recv());
                    defect()
                })
            });
            let _ = done.send(code);
        });
        // Unwinding through the runtime instead, the exit never comes.
        let code = exited
            .recv_timeout(std::time::Duration::from_secs(30))
            .expect("exited despite the stuck thread");
        assert_eq!(code, ExitCode::from(EXIT_FATAL));
        drop(stuck);
    }
}
