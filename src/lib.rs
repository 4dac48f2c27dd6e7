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
//!   drain and commit on revocation and shutdown; [`backlog`] reads the
//!   group's backlog on its own thread.
//! - [`offsets`]: the pure per-partition watermark (what may be committed);
//!   [`acks`] shares it between the writers and the source thread.
//! - [`decode`]: JSON record value -> DynamoDB item, key checks, size and WCU.
//! - [`sink`]: batches under DynamoDB's limits, the write loop (unprocessed
//!   items, throttles, rejections), and the DynamoDB client with the SDK's own
//!   retries disabled.
//! - [`backoff`]: the throttle strategies (AutoSleeper, linear, exponential,
//!   Heroku's family, the adaptive rate controller) as pure state machines;
//!   [`pace`] paces writes in capacity units at the rate they steer.
//! - [`dlq`]: the dead-letter topic for records that can never be written.
//! - [`worker`]: the wiring of all of the above.
//! - [`telemetry`]: logs and counters.
//! - [`ops`]: what operators see: `/metrics` (Prometheus), `/healthz`,
//!   `/readyz`, consumer lag, and the progress bar / ETA of a batch run.
//! - [`proxy`]: `ingest throttle-proxy`, a DynamoDB proxy that enforces
//!   provisioned write capacity as DynamoDB does (the emulators do not).
//! - [`sim`]: `ingest sim`, the fleet simulator in virtual time that scores
//!   the strategies (the same code) on scenario files, with charts.
//! - [`devbroker`] and [`tools`]: the embedded Kafka broker for the local stack,
//!   and the helper commands behind `make run` (create topics, produce sample
//!   records, show a table).

pub mod acks;
pub mod backlog;
pub mod config;
pub mod decode;
pub mod devbroker;
pub mod dlq;
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
