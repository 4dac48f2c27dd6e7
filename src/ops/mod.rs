//! Running the worker as an operated service: what the endpoints and the
//! progress report read, and how they present it.
//!
//! - [`live`]: the live state (assignment, positions, lag, DynamoDB
//!   reachability, stalls) the pipeline feeds and the endpoints read.
//! - [`prom`]: the Prometheus text rendering of the counters and gauges.
//! - [`http`]: the HTTP server for `/metrics`, `/healthz` and `/readyz`.
//! - [`progress`]: backlog, rate and ETA in `--until-caught-up` mode; a bar
//!   on a terminal, log lines otherwise; its arithmetic in [`estimate`].
//!
//! Deliberately not here: the counters themselves (`telemetry`, and each
//! table's `Control`), which the pipeline owns.

pub mod estimate;
pub mod http;
pub mod live;
pub mod progress;
pub mod prom;
