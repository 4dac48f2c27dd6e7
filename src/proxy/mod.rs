//! `ingest throttle-proxy`: an HTTP proxy in front of a DynamoDB endpoint
//! (LocalStack, DynamoDB Local) that enforces provisioned write capacity per
//! table, as DynamoDB does and the emulators do not.
//!
//! - Each table's capacity is its provisioned WCU (read with DescribeTable from
//!   upstream; `--wcu` overrides), enforced by a token bucket with DynamoDB-style
//!   burst credit ([`bucket`]). On-demand tables are not limited.
//! - BatchWriteItem: the write requests that fit are forwarded, the rest come
//!   back in `UnprocessedItems` (HTTP 200); when none fit, HTTP 400 with
//!   `ProvisionedThroughputExceededException`. PutItem: fits or 400.
//!   Everything else passes through unchanged.
//! - Capacity changes at run time, like auto scaling: `POST
//!   /_proxy/capacity?table=T&wcu=N`, or a `--schedule` of steps after each
//!   table's first write. A change also runs UpdateTable upstream, so
//!   DescribeTable reports the new capacity as it would on AWS.
//! - Outages, for fault tests: `POST /_proxy/outage?seconds=N` answers every
//!   DynamoDB call with HTTP 503 `ServiceUnavailable` for N seconds.
//! - `GET /_proxy/stats`: per table, requests, throttled (400) and partial
//!   (some unprocessed) requests, accepted items and WCU, unprocessed items, and
//!   the capacity offered between the first write and the last accepted one.

pub mod bucket;
pub mod wire;

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::sink::dynamodb::Dynamo;
use bucket::Bucket;

#[derive(Debug, Clone)]
pub struct ProxyConfig {
    pub listen: SocketAddr,
    pub upstream: String,
    /// Capacity for every table (WCU/s), instead of the provisioned one.
    pub wcu: Option<f64>,
    /// Bucket size, in seconds of capacity.
    pub burst_s: f64,
    /// Burst credit kept from unused capacity, in seconds (DynamoDB: 300).
    pub credit_s: f64,
    /// (seconds after a table's first write, new WCU).
    pub schedule: Vec<(f64, f64)>,
}

#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

/// Per-table counters, as served on `/_proxy/stats`.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct TableStats {
    pub requests: u64,
    pub throttled_requests: u64,
    pub partial_requests: u64,
    pub accepted_items: u64,
    pub accepted_wcu: f64,
    /// Items returned in UnprocessedItems of 200 answers.
    pub unprocessed_items: u64,
    /// Items of requests answered 400 (throttled whole).
    pub throttled_items: u64,
    /// Capacity in force (from the bucket, filled in when served).
    pub wcu: Option<f64>,
    pub offered_wcu: f64,
    pub first_write_s: Option<f64>,
    pub last_accept_s: Option<f64>,
    /// Per second since the first write: [second, accepted WCU, throttled
    /// requests (400 or partial), capacity in force].
    pub timeline: Vec<[f64; 4]>,
}

#[derive(Debug)]
struct TableState {
    bucket: Option<Bucket>,
    stats: TableStats,
    first_write: Option<Duration>,
    last_accept: Option<Duration>,
    /// Rate changes: (time, WCU/s), for the offered capacity.
    rates: Vec<(Duration, f64)>,
    initial_tokens: f64,
    next_step: usize,
}

impl TableState {
    /// The timeline slot for `now` (seconds since the first write).
    fn second(&mut self, now: Duration) -> &mut [f64; 4] {
        let start = self.first_write.unwrap_or(now);
        let i = now.saturating_sub(start).as_secs() as usize;
        let wcu = self.bucket.as_ref().map_or(0.0, Bucket::rate);
        while self.stats.timeline.len() <= i {
            let sec = self.stats.timeline.len() as f64;
            self.stats.timeline.push([sec, 0.0, 0.0, wcu]);
        }
        let slot = &mut self.stats.timeline[i];
        slot[3] = wcu;
        slot
    }

    fn offered(&self) -> f64 {
        let (Some(start), Some(end)) = (self.first_write, self.last_accept) else {
            return 0.0;
        };
        let mut total = self.initial_tokens;
        for (i, &(t, rate)) in self.rates.iter().enumerate() {
            let next = self.rates.get(i + 1).map_or(end, |&(n, _)| n);
            let (a, b) = (t.max(start), next.min(end));
            if b > a {
                total += rate * (b - a).as_secs_f64();
            }
        }
        total
    }
}

struct Proxy {
    cfg: ProxyConfig,
    tables: Mutex<HashMap<String, TableState>>,
    client: Client<HttpConnector, Full<Bytes>>,
    dynamo: Dynamo,
    epoch: Instant,
    /// Until when every DynamoDB call fails with 503 (an outage).
    down_until: Mutex<Option<Instant>>,
}

type Resp = Response<Full<Bytes>>;

/// Serves the proxy until `shutdown`.
pub async fn serve(cfg: ProxyConfig, shutdown: CancellationToken) -> Result<(), ProxyError> {
    let listener = TcpListener::bind(cfg.listen)
        .await
        .map_err(|source| ProxyError::Listen {
            addr: cfg.listen,
            source,
        })?;
    let proxy = Arc::new(Proxy {
        dynamo: Dynamo::local(&cfg.upstream),
        client: Client::builder(TokioExecutor::new()).build_http(),
        tables: Mutex::new(HashMap::new()),
        epoch: Instant::now(),
        down_until: Mutex::new(None),
        cfg,
    });
    info!(listen = %proxy.cfg.listen, upstream = %proxy.cfg.upstream, wcu = ?proxy.cfg.wcu, "throttle proxy ready");
    loop {
        let (stream, _) = tokio::select! {
            _ = shutdown.cancelled() => return Ok(()),
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(_) => continue,
            },
        };
        let proxy = proxy.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let proxy = proxy.clone();
                async move { Ok::<_, Infallible>(proxy.handle(req).await) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

fn respond(status: StatusCode, body: String) -> Resp {
    Response::builder()
        .status(status)
        .header("content-type", "application/x-amz-json-1.0")
        .header(
            "x-amzn-requestid",
            format!("ingest-proxy-{}", rand::random::<u64>()),
        )
        .body(Full::new(Bytes::from(body)))
        .expect("valid response")
}

fn throttled() -> Resp {
    let mut r = respond(StatusCode::BAD_REQUEST, wire::throttle_body());
    r.headers_mut().insert(
        "x-amzn-errortype",
        "ProvisionedThroughputExceededException"
            .parse()
            .expect("valid header"),
    );
    r
}

impl Proxy {
    fn now(&self) -> Duration {
        self.epoch.elapsed()
    }

    async fn handle(self: Arc<Self>, req: Request<Incoming>) -> Resp {
        let path = req.uri().path().to_string();
        if path.starts_with("/_proxy/") {
            return self.admin(&path, req.uri().query().unwrap_or("")).await;
        }
        if self
            .down_until
            .lock()
            .unwrap()
            .is_some_and(|t| Instant::now() < t)
        {
            return respond(
                StatusCode::SERVICE_UNAVAILABLE,
                json!({"__type": "com.amazonaws.dynamodb.v20120810#ServiceUnavailable",
                    "message": "outage injected by the throttle proxy"})
                .to_string(),
            );
        }
        let target = req
            .headers()
            .get("x-amz-target")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .rsplit('.')
            .next()
            .unwrap_or("")
            .to_string();
        let (parts, body) = req.into_parts();
        let body = match body.collect().await {
            Ok(b) => b.to_bytes(),
            Err(e) => return respond(StatusCode::BAD_REQUEST, format!("bad request body: {e}")),
        };
        match target.as_str() {
            "BatchWriteItem" => self.batch_write(parts, body).await,
            "PutItem" => self.put_item(parts, body).await,
            "UpdateTable" => {
                let table = table_name(&body);
                let resp = self.forward(&parts, body).await;
                if let (Some(t), true, None) = (table, resp.status().is_success(), self.cfg.wcu) {
                    self.follow_upstream(&t).await;
                }
                resp
            }
            _ => self.forward(&parts, body).await,
        }
    }

    /// Creates a table's state on first sight (capacity from upstream).
    async fn ensure_table(&self, table: &str) {
        if self.tables.lock().unwrap().contains_key(table) {
            return;
        }
        let wcu = match self.cfg.wcu {
            Some(w) => Some(w),
            None => match self.dynamo.describe(table).await {
                Ok(info) => info.capacity,
                Err(e) => {
                    warn!(table, error = %e, "cannot read the table's capacity; not limiting it");
                    None
                }
            },
        };
        let now = self.now();
        let state = TableState {
            bucket: wcu.map(|w| Bucket::new(w, self.cfg.burst_s, self.cfg.credit_s, now)),
            stats: TableStats::default(),
            first_write: None,
            last_accept: None,
            rates: wcu.map(|w| vec![(now, w)]).unwrap_or_default(),
            initial_tokens: 0.0,
            next_step: 0,
        };
        self.tables
            .lock()
            .unwrap()
            .entry(table.to_string())
            .or_insert(state);
    }

    /// Applies due schedule steps; returns (table, wcu) changes to push upstream.
    fn step_schedule(
        &self,
        st: &mut TableState,
        table: &str,
        now: Duration,
    ) -> Option<(String, f64)> {
        let first = st.first_write?;
        let mut change = None;
        while let Some(&(at, wcu)) = self.cfg.schedule.get(st.next_step) {
            if now < first + Duration::from_secs_f64(at) {
                break;
            }
            st.next_step += 1;
            set_rate(st, wcu, now);
            info!(table, wcu, "capacity step (schedule)");
            change = Some((table.to_string(), wcu));
        }
        change
    }

    async fn batch_write(&self, parts: hyper::http::request::Parts, body: Bytes) -> Resp {
        let Ok(json) = serde_json::from_slice::<Value>(&body) else {
            return self.forward(&parts, body).await;
        };
        let tables: Vec<String> = json
            .get("RequestItems")
            .and_then(Value::as_object)
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default();
        for t in &tables {
            self.ensure_table(t).await;
        }
        let now = self.now();
        let mut pushes = Vec::new();
        let split = {
            let mut map = self.tables.lock().unwrap();
            for t in &tables {
                let st = map.get_mut(t).expect("ensured");
                if st.first_write.is_none() {
                    st.first_write = Some(now);
                    st.initial_tokens = st.bucket.as_mut().map_or(0.0, |b| b.available(now));
                }
                st.stats.requests += 1;
                pushes.extend(self.step_schedule(st, t, now));
            }
            wire::split_batch(&json, |table, cost| {
                map.get_mut(table)
                    .is_none_or(|st| st.bucket.as_mut().is_none_or(|b| b.try_take(cost, now)))
            })
        };
        for (t, w) in pushes {
            self.update_upstream(&t, w).await;
        }
        let withheld: usize = split
            .withheld
            .values()
            .filter_map(Value::as_array)
            .map(Vec::len)
            .sum();
        if split.accepted_items == 0 {
            let mut map = self.tables.lock().unwrap();
            for t in &tables {
                let st = map.get_mut(t).expect("ensured");
                st.stats.throttled_requests += 1;
                st.stats.throttled_items += count_for(&split.withheld, t);
                st.second(now)[2] += 1.0;
            }
            return throttled();
        }
        let forward = Value::Object(split.forward.clone()).to_string();
        let resp = self.forward(&parts, Bytes::from(forward)).await;
        let ok = resp.status().is_success();
        {
            let mut map = self.tables.lock().unwrap();
            for (t, cost) in &split.taken {
                let st = map.get_mut(t).expect("ensured");
                if ok {
                    st.stats.accepted_wcu += cost;
                    st.last_accept = Some(self.now());
                    st.second(now)[1] += cost;
                } else if let Some(b) = st.bucket.as_mut() {
                    b.refund(*cost);
                }
            }
            if ok {
                for t in &tables {
                    let st = map.get_mut(t).expect("ensured");
                    let fwd = split.forward["RequestItems"]
                        .get(t)
                        .and_then(Value::as_array)
                        .map_or(0, Vec::len);
                    st.stats.accepted_items += fwd as u64;
                    let held = count_for(&split.withheld, t);
                    st.stats.unprocessed_items += held;
                    if held > 0 {
                        st.stats.partial_requests += 1;
                        st.second(now)[2] += 1.0;
                    }
                }
            }
        }
        if !ok || withheld == 0 {
            return resp;
        }
        merge_into_response(resp, &split.withheld).await
    }

    async fn put_item(&self, parts: hyper::http::request::Parts, body: Bytes) -> Resp {
        let Ok(json) = serde_json::from_slice::<Value>(&body) else {
            return self.forward(&parts, body).await;
        };
        let Some(table) = json
            .get("TableName")
            .and_then(Value::as_str)
            .map(str::to_string)
        else {
            return self.forward(&parts, body).await;
        };
        self.ensure_table(&table).await;
        let cost = wire::request_wcu(
            &json!({"PutRequest": {"Item": json.get("Item").cloned().unwrap_or(json!({}))}}),
        );
        let now = self.now();
        let admitted = {
            let mut map = self.tables.lock().unwrap();
            let st = map.get_mut(&table).expect("ensured");
            if st.first_write.is_none() {
                st.first_write = Some(now);
                st.initial_tokens = st.bucket.as_mut().map_or(0.0, |b| b.available(now));
            }
            st.stats.requests += 1;
            let ok = st.bucket.as_mut().is_none_or(|b| b.try_take(cost, now));
            if !ok {
                st.stats.throttled_requests += 1;
                st.stats.throttled_items += 1;
            }
            ok
        };
        if !admitted {
            return throttled();
        }
        let resp = self.forward(&parts, body).await;
        let mut map = self.tables.lock().unwrap();
        let st = map.get_mut(&table).expect("ensured");
        if resp.status().is_success() {
            st.stats.accepted_items += 1;
            st.stats.accepted_wcu += cost;
            st.last_accept = Some(self.now());
        } else if let Some(b) = st.bucket.as_mut() {
            b.refund(cost);
        }
        resp
    }

    async fn forward(&self, parts: &hyper::http::request::Parts, body: Bytes) -> Resp {
        let uri = format!(
            "{}{}",
            self.cfg.upstream.trim_end_matches('/'),
            parts.uri.path_and_query().map_or("/", |p| p.as_str())
        );
        let mut builder = Request::builder().method(parts.method.clone()).uri(uri);
        for (k, v) in &parts.headers {
            if k != "content-length" && k != "host" && k != "transfer-encoding" {
                builder = builder.header(k, v);
            }
        }
        let req = builder.body(Full::new(body)).expect("valid request");
        match self.client.request(req).await {
            Ok(resp) => {
                let (parts, body) = resp.into_parts();
                let bytes = body
                    .collect()
                    .await
                    .map(|b| b.to_bytes())
                    .unwrap_or_default();
                let mut out = Response::from_parts(parts, Full::new(bytes));
                out.headers_mut().remove("content-length");
                out.headers_mut().remove("transfer-encoding");
                out
            }
            Err(e) => respond(
                StatusCode::BAD_GATEWAY,
                format!("upstream {}: {e}", self.cfg.upstream),
            ),
        }
    }

    async fn admin(&self, path: &str, query: &str) -> Resp {
        let q: HashMap<&str, &str> = query
            .split('&')
            .filter_map(|kv| kv.split_once('='))
            .collect();
        match path {
            "/_proxy/stats" => {
                let map = self.tables.lock().unwrap();
                let tables: serde_json::Map<String, Value> = map
                    .iter()
                    .map(|(t, st)| {
                        let mut s = st.stats.clone();
                        s.wcu = st.bucket.as_ref().map(Bucket::rate);
                        s.offered_wcu = st.offered();
                        s.first_write_s = st.first_write.map(|d| d.as_secs_f64());
                        s.last_accept_s = st.last_accept.map(|d| d.as_secs_f64());
                        (t.clone(), serde_json::to_value(s).expect("serializable"))
                    })
                    .collect();
                respond(StatusCode::OK, json!({ "tables": tables }).to_string())
            }
            "/_proxy/capacity" => {
                let (Some(table), Some(wcu)) = (
                    q.get("table"),
                    q.get("wcu").and_then(|w| w.parse::<f64>().ok()),
                ) else {
                    return respond(
                        StatusCode::BAD_REQUEST,
                        "usage: POST /_proxy/capacity?table=T&wcu=N".into(),
                    );
                };
                self.ensure_table(table).await;
                let now = self.now();
                if let Some(st) = self.tables.lock().unwrap().get_mut(*table) {
                    set_rate(st, wcu, now);
                }
                info!(table, wcu, "capacity changed (admin)");
                self.update_upstream(table, wcu).await;
                respond(
                    StatusCode::OK,
                    json!({ "table": table, "wcu": wcu }).to_string(),
                )
            }
            "/_proxy/outage" => {
                let Some(secs) = q.get("seconds").and_then(|w| w.parse::<f64>().ok()) else {
                    return respond(
                        StatusCode::BAD_REQUEST,
                        "usage: POST /_proxy/outage?seconds=N".into(),
                    );
                };
                let until = Instant::now() + Duration::from_secs_f64(secs.max(0.0));
                *self.down_until.lock().unwrap() = Some(until);
                warn!(seconds = secs, "outage (admin): every call answers 503");
                respond(StatusCode::OK, json!({ "outage_s": secs }).to_string())
            }
            _ => respond(StatusCode::NOT_FOUND, "unknown admin path".into()),
        }
    }

    /// After an UpdateTable went through: enforce the table's new capacity.
    async fn follow_upstream(&self, table: &str) {
        if let Ok(crate::sink::TableInfo {
            capacity: Some(wcu),
            ..
        }) = self.dynamo.describe(table).await
        {
            let now = self.now();
            if let Some(st) = self.tables.lock().unwrap().get_mut(table) {
                set_rate(st, wcu, now);
            }
        }
    }

    /// UpdateTable upstream so DescribeTable reports the new capacity.
    async fn update_upstream(&self, table: &str, wcu: f64) {
        use aws_sdk_dynamodb::types::ProvisionedThroughput;
        let client = self.dynamo.client();
        let rcu = match client.describe_table().table_name(table).send().await {
            Ok(out) => out
                .table()
                .and_then(|t| t.provisioned_throughput())
                .and_then(|p| p.read_capacity_units())
                .unwrap_or(1),
            Err(_) => 1,
        };
        let Ok(pt) = ProvisionedThroughput::builder()
            .read_capacity_units(rcu.max(1))
            .write_capacity_units(wcu.round().max(1.0) as i64)
            .build()
        else {
            return;
        };
        if let Err(e) = client
            .update_table()
            .table_name(table)
            .provisioned_throughput(pt)
            .send()
            .await
        {
            warn!(table, error = %aws_sdk_dynamodb::error::DisplayErrorContext(e), "UpdateTable upstream failed");
        }
    }
}

fn set_rate(st: &mut TableState, wcu: f64, now: Duration) {
    match st.bucket.as_mut() {
        Some(b) => b.set_rate(wcu, now),
        None => st.bucket = Some(Bucket::new(wcu, 1.0, 0.0, now)),
    }
    st.rates.push((now, wcu));
}

fn count_for(withheld: &serde_json::Map<String, Value>, table: &str) -> u64 {
    withheld
        .get(table)
        .and_then(Value::as_array)
        .map_or(0, |a| a.len() as u64)
}

fn table_name(body: &[u8]) -> Option<String> {
    serde_json::from_slice::<Value>(body)
        .ok()?
        .get("TableName")?
        .as_str()
        .map(str::to_string)
}

async fn merge_into_response(resp: Resp, withheld: &serde_json::Map<String, Value>) -> Resp {
    let (mut parts, body) = resp.into_parts();
    let bytes = body
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let mut json: Value = serde_json::from_slice(&bytes).unwrap_or_else(|_| json!({}));
    wire::merge_unprocessed(&mut json, withheld);
    // The body changed: the upstream checksum no longer applies.
    parts.headers.remove("x-amz-crc32");
    Response::from_parts(parts, Full::new(Bytes::from(json.to_string())))
}
