//! `ingest sim`: a fleet simulator in virtual time that scores throttle
//! strategies (seed 004's method). A scenario file describes a server
//! (Heroku's token bucket, or DynamoDB provisioned capacity with burst credit,
//! with a capacity schedule), uncoordinated clients, and the strategies to run
//! side by side on the same seeded workload. The strategies are the worker's
//! own state machines from [`crate::throttle`], paced by the worker's
//! [`crate::throttle::pace::Pacer`] on a fake clock; nothing sleeps.
//!
//! - [`scenario`]: the file format, validated.
//! - [`server`]: the server models.
//! - [`engine`]: the event loop.
//! - [`report`]: the scores and the human table.
//! - [`chart`]: SVG charts (plotters).

pub mod chart;
pub mod engine;
pub mod report;
pub mod scenario;
pub mod server;

use std::io::Write;
use std::path::Path;

use engine::{Mode, Outcome};
use report::{Score, Spread};
use scenario::Scenario;

#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("scenario: {0}")]
    Parse(String),
    #[error("scenario: {0}")]
    Invalid(String),
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("chart: {0}")]
    Chart(String),
}

/// The scores of every strategy, with their runs (for charts and traces).
#[derive(Debug)]
pub struct Results {
    pub scenario: String,
    pub scores: Vec<Score>,
    pub runs: Vec<Outcome>,
}

/// Reads a scenario file.
pub fn load(path: &Path) -> Result<Scenario, SimError> {
    let text = std::fs::read_to_string(path).map_err(|source| SimError::Io {
        path: path.display().to_string(),
        source,
    })?;
    Scenario::parse(&text).map_err(|e| match e {
        SimError::Parse(m) | SimError::Invalid(m) => {
            SimError::Invalid(format!("{}: {m}", path.display()))
        }
        other => other,
    })
}

/// Runs every strategy of the scenario.
pub fn run(sc: &Scenario) -> Result<Results, SimError> {
    let mut scores = Vec::new();
    let mut runs = Vec::new();
    for e in sc.entries()? {
        let main = engine::run(sc, &e.config, e.hot_keys, Mode::Main);
        let clear = sc
            .clear
            .as_ref()
            .map(|_| engine::run(sc, &e.config, e.hot_keys, Mode::Clear));
        scores.push(report::score(
            &e.label,
            e.config.name(),
            sc.clients.items,
            &main,
            clear.as_ref(),
            sc.clients.groups,
        ));
        runs.push(main);
    }
    Ok(Results {
        scenario: sc.name.clone(),
        scores,
        runs,
    })
}

/// Each strategy's spread over seeds 1 to `seeds` (`ingest sim --seeds`).
#[derive(Debug)]
pub struct Spreads {
    pub scenario: String,
    pub seeds: u64,
    pub rows: Vec<Spread>,
}

/// Runs every strategy of the scenario on seeds 1 to `seeds`.
pub fn run_seeds(sc: &Scenario, seeds: u64) -> Result<Spreads, SimError> {
    let mut sc = sc.clone();
    let mut runs = Vec::new();
    for seed in 1..=seeds {
        sc.seed = seed;
        runs.push(run(&sc)?.scores);
    }
    Ok(Spreads {
        scenario: sc.name,
        seeds,
        rows: report::spread(&runs),
    })
}

impl Spreads {
    /// The human table.
    pub fn table(&self) -> String {
        report::spread_table(&self.scenario, &format!("1-{}", self.seeds), &self.rows)
    }

    /// Writes the JSON report: the scenario, the seeds, one object per
    /// strategy.
    pub fn write_json(&self, path: &Path) -> Result<(), SimError> {
        write_json(
            path,
            &serde_json::json!({ "scenario": self.scenario, "seeds": self.seeds, "strategies": self.rows }),
        )
    }
}

/// Writes `value` as pretty JSON.
fn write_json(path: &Path, value: &serde_json::Value) -> Result<(), SimError> {
    let text = serde_json::to_string_pretty(value).expect("serializable");
    std::fs::write(path, text + "\n").map_err(|source| SimError::Io {
        path: path.display().to_string(),
        source,
    })
}

impl Results {
    /// The JSON report: the scenario's name and one object per strategy.
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({ "scenario": self.scenario, "strategies": self.scores })
    }

    /// Writes the JSON report.
    pub fn write_json(&self, path: &Path) -> Result<(), SimError> {
        write_json(path, &self.json())
    }

    /// Writes the chart (SVG).
    pub fn write_chart(&self, path: &Path, duration_s: f64) -> Result<(), SimError> {
        let runs: Vec<(String, &Outcome)> = self
            .scores
            .iter()
            .map(|s| s.label.clone())
            .zip(self.runs.iter())
            .collect();
        chart::write(path, &self.scenario, duration_s, &runs)
    }

    /// Writes every attempt as CSV (a label holding a comma or a quote is
    /// quoted, as RFC 4180 says: "adaptive, one rate").
    pub fn write_trace(&self, path: &Path) -> Result<(), SimError> {
        let io = |source| SimError::Io {
            path: path.display().to_string(),
            source,
        };
        let f = std::fs::File::create(path).map_err(io)?;
        let mut w = std::io::BufWriter::new(f);
        writeln!(
            w,
            "strategy,client,t_s,wait_s,units,accepted_units,throttled,remaining,rule,rate"
        )
        .map_err(io)?;
        for (s, run) in self.scores.iter().zip(&self.runs) {
            for a in &run.attempts {
                writeln!(
                    w,
                    "{},{},{:.6},{:.6},{},{},{},{},{},{}",
                    csv_field(&s.label),
                    a.client,
                    a.t_s,
                    a.wait_s,
                    a.units,
                    a.accepted_units,
                    a.throttled,
                    a.remaining.map_or(String::new(), |r| format!("{r:.6}")),
                    a.rule.unwrap_or(""),
                    a.rate.map_or(String::new(), |r| format!("{r:.3}"))
                )
                .map_err(io)?;
            }
        }
        w.flush().map_err(io)
    }
}

/// One CSV field: quoted, its quotes doubled, if it holds a comma, a quote
/// or a line break.
fn csv_field(s: &str) -> std::borrow::Cow<'_, str> {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\"")).into()
    } else {
        s.into()
    }
}

#[cfg(test)]
mod tests {
    use super::csv_field;

    #[test]
    fn a_label_with_a_comma_or_a_quote_is_one_quoted_csv_field() {
        assert_eq!(csv_field("adaptive"), "adaptive");
        assert_eq!(csv_field("adaptive, one rate"), "\"adaptive, one rate\"");
        assert_eq!(csv_field("say \"hi\""), "\"say \"\"hi\"\"\"");
    }
}
