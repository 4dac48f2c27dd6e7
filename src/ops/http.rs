//! The operator endpoints, on `ops.listen`:
//!
//! - `GET /metrics`: Prometheus text format (see [`super::prom`]).
//! - `GET /healthz`: 200 while the process serves requests (liveness).
//! - `GET /readyz`: 200 when partitions are held, DynamoDB answers and work
//!   is not stuck; 503 otherwise. The body (JSON) names each check.
//!
//! The listener is bound before the worker starts consuming, so a bad
//! address fails the start, not the run.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info};

use super::live::Live;
use super::prom::Exporter;

/// The Prometheus text format's content type.
const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

#[derive(Debug, thiserror::Error)]
#[error("cannot listen on ops.listen = {addr}: {source}")]
pub struct ListenError {
    pub addr: SocketAddr,
    pub source: std::io::Error,
}

/// Binds the listener (the caller serves it once the worker is wired).
pub async fn bind(addr: SocketAddr) -> Result<TcpListener, ListenError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| ListenError { addr, source })
}

/// Serves the endpoints until `stop`.
pub async fn serve(
    listener: TcpListener,
    live: Arc<Live>,
    exporter: Arc<Exporter>,
    stop: CancellationToken,
) {
    if let Ok(addr) = listener.local_addr() {
        info!(listen = %addr, "serving /metrics, /healthz, /readyz");
    }
    loop {
        let (stream, _) = tokio::select! {
            _ = stop.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    debug!(error = %e, "accept failed");
                    continue;
                }
            },
        };
        let (live, exporter) = (live.clone(), exporter.clone());
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let (live, exporter) = (live.clone(), exporter.clone());
                async move { Ok::<_, Infallible>(handle(&req, &live, &exporter)) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

fn respond(status: StatusCode, content_type: &str, body: String) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header("content-type", content_type)
        .body(Full::new(Bytes::from(body)))
        .expect("valid response")
}

fn handle<B>(req: &Request<B>, live: &Live, exporter: &Exporter) -> Response<Full<Bytes>> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return respond(
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain",
            "use GET\n".into(),
        );
    }
    match req.uri().path() {
        "/metrics" => respond(StatusCode::OK, PROMETHEUS_TEXT, exporter.render(live)),
        "/healthz" => respond(StatusCode::OK, "text/plain", "ok\n".into()),
        "/readyz" => {
            let r = live.readiness();
            let status = if r.ready() {
                StatusCode::OK
            } else {
                StatusCode::SERVICE_UNAVAILABLE
            };
            respond(status, "application/json", format!("{}\n", r.to_json()))
        }
        other => respond(
            StatusCode::NOT_FOUND,
            "text/plain",
            format!("no such endpoint: {other} (try /metrics, /healthz, /readyz)\n"),
        ),
    }
}
