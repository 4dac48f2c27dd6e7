//! # ingest
//!
//! Moves records from Kafka topics into DynamoDB tables as fast as the tables'
//! capacity allows, committing a Kafka offset only after the records before it
//! are written (or dead-lettered).
//!
//! Map of the crate, in the order data flows:
//!
//! - [`config`]: the TOML file plus `INGEST__*` environment overrides, validated.
//! - [`source`]: the Kafka consumer thread: poll, track, pause when full,
//!   drain and commit on revocation and shutdown, batch mode's "caught up",
//!   and the group's backlog read on a thread of its own.
//! - [`record`]: the record as the pipeline carries it (not rdkafka's type).
//! - [`offsets`]: the pure per-partition watermark (what may be committed);
//!   [`acks`] shares it between the writers and the source thread, and wakes
//!   writers when partitions close.
//! - [`pipeline`]: route -> decode -> batch -> dispatch, a task per table,
//!   key order across batches; [`congestion`]: which tables' queues are long,
//!   so the source pauses only the partitions that feed them; [`decode`]: JSON record value -> DynamoDB item, key checks, size
//!   and WCU.
//! - [`sink`]: the `Sink` seam (DynamoDB client with the SDK's retries off, a
//!   recording fake for tests), batches under DynamoDB's limits, the write
//!   loop (fencing, unprocessed items, throttles, bisection), and the tables
//!   (routes, capacity poll, share).
//! - [`throttle`]: the one home of throttle control: strategies (AutoSleeper,
//!   linear, exponential, Heroku's family, adaptive) as pure state machines,
//!   the pacer, and the per-table control.
//! - [`dlq`]: the dead-letter topic for records that can never be written.
//! - [`lessons`]: what a worker's tables taught it, shared with the other
//!   workers of its job through a small topic.
//! - [`msk_iam`]: the token of AWS MSK IAM authentication (a presigned URL).
//! - [`worker`]: the wiring of all of the above, and bounded shutdown.
//! - [`telemetry`]: logs and counters.
//! - [`ops`]: what operators see: `/metrics` (Prometheus), `/healthz`,
//!   `/readyz`, consumer lag, and the progress bar / ETA of a batch run.
//! - [`proxy`]: `ingest throttle-proxy`, a DynamoDB proxy that enforces
//!   provisioned write capacity as DynamoDB does (the emulators do not), and
//!   injects outages.
//! - [`sim`]: `ingest sim`, the fleet simulator in virtual time that scores
//!   the strategies (the same code) on scenario files, with charts.
//! - [`devbroker`] and [`tools`]: the embedded Kafka broker for the local stack,
//!   and the helper commands behind `make run` (create topics, produce sample
//!   records, show a table).

pub mod acks;
pub mod bucket;
pub mod config;
pub mod congestion;
pub mod decode;
pub mod devbroker;
pub mod dlq;
pub mod lessons;
pub mod msk_iam;
pub mod offsets;
pub mod ops;
pub mod pipeline;
pub mod proxy;
pub mod record;
pub mod sim;
pub mod sink;
pub mod source;
pub mod telemetry;
pub mod throttle;
pub mod tools;
pub mod worker;
