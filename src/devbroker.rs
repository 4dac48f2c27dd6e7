//! An embedded Kafka broker for development and fast tests: librdkafka's mock
//! cluster (in-process, starts in milliseconds, supports consumer groups and
//! commits; data lives only as long as the process).
//!
//! The mock cluster listens on a random port; [`serve`] puts a TCP forwarder
//! on a fixed loopback address and makes the broker advertise that address,
//! so configs can name a stable `bootstrap.servers`. The group's initial
//! rebalance delay is set to 0 (the mock's default makes every first join
//! wait 3 s). Not for production: no durability, one broker, and each
//! partition keeps only its last 5 MB or 100,000 records (librdkafka's
//! `rdkafka_mock.c` drops older ones; the log start moves past them).

use std::ffi::{CStr, CString};
use std::net::SocketAddr;

use rdkafka::config::ClientConfig;
use rdkafka::producer::{BaseProducer, Producer};
use rdkafka_sys as rdsys;
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info};

#[derive(Debug, thiserror::Error)]
pub enum DevBrokerError {
    #[error("cannot create the mock cluster: {0}")]
    Create(String),
    #[error("cannot create topic {topic}: {message}")]
    Topic { topic: String, message: String },
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

/// A running mock cluster with one broker.
pub struct DevBroker {
    // Field order matters: the cluster must be destroyed before its client.
    cluster: *mut rdsys::rd_kafka_mock_cluster_t,
    _client: BaseProducer,
}

// SAFETY: the mock cluster handle is only used through librdkafka's mock API,
// which serialises every call on the cluster's own thread (an op queue).
unsafe impl Send for DevBroker {}
unsafe impl Sync for DevBroker {}

impl DevBroker {
    /// Starts a one-broker mock cluster.
    pub fn start() -> Result<Self, DevBrokerError> {
        let client: BaseProducer = ClientConfig::new()
            .create()
            .map_err(|e| DevBrokerError::Create(e.to_string()))?;
        // SAFETY: the client pointer is valid for the client's life, which
        // this struct extends past the cluster's (see Drop).
        let cluster = unsafe { rdsys::rd_kafka_mock_cluster_new(client.client().native_ptr(), 1) };
        if cluster.is_null() {
            return Err(DevBrokerError::Create(
                "rd_kafka_mock_cluster_new returned null".into(),
            ));
        }
        // SAFETY: cluster is a valid, live handle.
        unsafe { rdsys::rd_kafka_mock_group_initial_rebalance_delay_ms(cluster, 0) };
        Ok(Self {
            cluster,
            _client: client,
        })
    }

    /// Holds a new group's first rebalance `delay` for more members to
    /// join, as a Kafka broker's `group.initial.rebalance.delay.ms` (3 s by
    /// default there; 0 here since [`DevBroker::start`]).
    pub fn set_initial_rebalance_delay(&self, delay: std::time::Duration) {
        let ms = i32::try_from(delay.as_millis()).unwrap_or(i32::MAX);
        // SAFETY: cluster is a valid, live handle.
        unsafe { rdsys::rd_kafka_mock_group_initial_rebalance_delay_ms(self.cluster, ms) };
    }

    /// The address the mock broker itself listens on.
    pub fn bootstrap_servers(&self) -> String {
        // SAFETY: returns a NUL-terminated string owned by the live cluster.
        unsafe { CStr::from_ptr(rdsys::rd_kafka_mock_cluster_bootstraps(self.cluster)) }
            .to_string_lossy()
            .into_owned()
    }

    /// Creates a topic with `partitions` partitions.
    pub fn create_topic(&self, topic: &str, partitions: i32) -> Result<(), DevBrokerError> {
        let err = |message: String| DevBrokerError::Topic {
            topic: topic.into(),
            message,
        };
        let name = CString::new(topic).map_err(|e| err(e.to_string()))?;
        // SAFETY: valid cluster, NUL-terminated name that outlives the call.
        let code = unsafe {
            rdsys::rd_kafka_mock_topic_create(self.cluster, name.as_ptr(), partitions, 1)
        };
        if code == rdsys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
            Ok(())
        } else {
            Err(err(format!("{code:?}")))
        }
    }

    /// Makes the next `count` requests of Kafka API `api_key` fail with
    /// `error` (for tests: e.g. a coordinator that never lets a member join,
    /// JoinGroup = 11).
    pub fn fail_requests(&self, api_key: i16, error: rdsys::rd_kafka_resp_err_t, count: usize) {
        let errors = vec![error; count];
        // SAFETY: valid cluster; the array outlives the call, which copies it.
        unsafe {
            rdsys::rd_kafka_mock_push_request_errors_array(
                self.cluster,
                api_key,
                errors.len(),
                errors.as_ptr(),
            )
        };
    }

    /// Makes the broker advertise `addr` (where a forwarder listens).
    fn advertise(&self, addr: SocketAddr) {
        let host = CString::new(addr.ip().to_string()).expect("an IP has no NUL");
        // SAFETY: valid cluster; broker ids of a mock cluster start at 1.
        unsafe {
            rdsys::rd_kafka_mock_broker_set_host_port(
                self.cluster,
                1,
                host.as_ptr(),
                i32::from(addr.port()),
            )
        };
    }
}

impl Drop for DevBroker {
    fn drop(&mut self) {
        // SAFETY: destroyed once, before the client it was created from.
        unsafe { rdsys::rd_kafka_mock_cluster_destroy(self.cluster) };
    }
}

/// Serves `broker` on the fixed address `listen` until `shutdown`.
pub async fn serve(
    broker: &DevBroker,
    listen: SocketAddr,
    shutdown: CancellationToken,
) -> Result<(), DevBrokerError> {
    let listener = TcpListener::bind(listen)
        .await
        .map_err(|source| DevBrokerError::Listen {
            addr: listen,
            source,
        })?;
    let upstream = broker.bootstrap_servers();
    broker.advertise(listen);
    info!(listen = %listen, upstream = %upstream, "dev broker ready");
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return Ok(()),
            accepted = listener.accept() => {
                let Ok((client, peer)) = accepted else { continue };
                let upstream = upstream.clone();
                tokio::spawn(async move {
                    if let Err(e) = forward(client, &upstream).await {
                        debug!(peer = %peer, error = %e, "dev broker connection ended");
                    }
                });
            }
        }
    }
}

async fn forward(mut client: TcpStream, upstream: &str) -> std::io::Result<()> {
    client.set_nodelay(true)?;
    let mut broker = TcpStream::connect(upstream).await?;
    broker.set_nodelay(true)?;
    tokio::io::copy_bidirectional(&mut client, &mut broker).await?;
    Ok(())
}
