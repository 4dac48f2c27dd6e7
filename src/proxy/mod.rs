//! `ingest throttle-proxy`: an HTTP proxy in front of a DynamoDB endpoint
//! (LocalStack, DynamoDB Local) that enforces provisioned write capacity per
//! table, as DynamoDB does and the emulators do not.
//!
//! - Each table's capacity is its provisioned WCU (read with DescribeTable from
//!   upstream; `--wcu` overrides), enforced by a token bucket with DynamoDB-style
//!   burst credit ([`bucket`]). On-demand tables admit twice their previous
//!   peak, up to their `MaxWriteRequestUnits` ([`on_demand`]); DescribeTable
//!   answers say that maximum and the warm throughput as DynamoDB would.
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
//! - `--upstream none` ([`stand_in`]): no endpoint behind it; the proxy
//!   answers DescribeTable and the writes itself, for benchmarks of the
//!   worker's own cost.
//! - `GET /_proxy/stats`: per table, requests, throttled (400) and partial
//!   (some unprocessed) requests, accepted items and WCU, unprocessed items, and
//!   the capacity offered between the first write and the last accepted one.

mod admin;
pub mod on_demand;
pub mod partitions;
pub mod stand_in;
mod table;
pub mod wire;

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::{TokioExecutor, TokioIo};
use parking_lot::Mutex;
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::bucket::Bucket;
use crate::sink::dynamodb::Dynamo;
use on_demand::OnDemand;
use partitions::Partitions;
pub use table::TableStats;
use table::{count_for, IndexState, TableState};

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
    /// Partitions per table, each capped at `partition_wcu` (None: the
    /// table's bucket only).
    pub partitions: Option<usize>,
    pub partition_wcu: f64,
    pub on_demand: OnDemandConfig,
    /// Answer DynamoDB here instead of forwarding (`--upstream none`).
    pub stand_in: Option<stand_in::StandIn>,
}

/// How on-demand tables are modelled (see [`on_demand`]).
#[derive(Debug, Clone)]
pub struct OnDemandConfig {
    /// What a new table admits at once, units/s.
    pub start: f64,
    /// MaxWriteRequestUnits for every on-demand table (None: each table's).
    pub max: Option<f64>,
    /// Seconds before a new peak counts.
    pub scale_s: f64,
}

impl Default for OnDemandConfig {
    fn default() -> Self {
        Self {
            start: on_demand::NEW_TABLE_WRU,
            max: None,
            scale_s: on_demand::SCALE_S,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
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
    // The stand-in never calls this client; it needs a well-formed endpoint.
    let endpoint = match &cfg.stand_in {
        Some(_) => "http://127.0.0.1:9",
        None => cfg.upstream.as_str(),
    };
    let proxy = Arc::new(Proxy {
        dynamo: Dynamo::local(endpoint),
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

fn throttled(reasons: &[(String, &'static str)]) -> Resp {
    let (body, kind) = wire::throttle_body(reasons);
    let mut r = respond(StatusCode::BAD_REQUEST, body);
    r.headers_mut()
        .insert("x-amzn-errortype", kind.parse().expect("valid header"));
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
        if self.down_until.lock().is_some_and(|t| Instant::now() < t) {
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
        if let Some(s) = &self.cfg.stand_in {
            return match target.as_str() {
                "BatchWriteItem" => self.batch_write(parts, body).await,
                "PutItem" => self.put_item(parts, body).await,
                "DescribeTable" => match table_name(&body) {
                    Some(t) => {
                        // What the proxy enforces now (admin or scheduled
                        // steps included), as DynamoDB would report it.
                        let st = self.tables.lock().get(&t).and_then(TableState::capacity);
                        let wcu = st.or(self.cfg.wcu);
                        respond(StatusCode::OK, s.describe(&t, wcu).to_string())
                    }
                    None => respond(
                        StatusCode::BAD_REQUEST,
                        s.unknown("DescribeTable without TableName").to_string(),
                    ),
                },
                other => respond(StatusCode::BAD_REQUEST, s.unknown(other).to_string()),
            };
        }
        match target.as_str() {
            "BatchWriteItem" => self.batch_write(parts, body).await,
            "PutItem" => self.put_item(parts, body).await,
            "DescribeTable" => {
                let table = table_name(&body);
                let resp = self.forward(&parts, body).await;
                match table {
                    Some(t) if resp.status().is_success() => {
                        self.describe_on_demand(&t, resp).await
                    }
                    _ => resp,
                }
            }
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
        if self.tables.lock().contains_key(table) {
            return;
        }
        let info = match &self.cfg.stand_in {
            // The stand-in's tables are what it describes: provisioned at
            // --wcu, or not limited.
            Some(s) => Ok(s.info(self.cfg.wcu)),
            None => self.dynamo.describe(table).await,
        };
        let wcu = match (&info, self.cfg.wcu) {
            (_, Some(w)) => Some(w),
            (Ok(info), None) => info.capacity,
            (Err(e), None) => {
                warn!(table, error = %e, "cannot read the table's capacity; not limiting it");
                None
            }
        };
        let now = self.now();
        let on_demand = match (&info, wcu) {
            (Ok(i), None) if self.cfg.stand_in.is_none() => {
                let od = &self.cfg.on_demand;
                let max = od.max.or(i.max_write);
                Some(OnDemand::new(od.start, max, od.scale_s, now))
            }
            _ => None,
        };
        let partitions = self
            .cfg
            .partitions
            .map(|n| Partitions::new(n, self.cfg.partition_wcu, self.cfg.burst_s, now));
        let bucket = wcu.map(|w| Bucket::new(w, self.cfg.burst_s, self.cfg.credit_s, now));
        // Global secondary indexes with a provisioned capacity: a bucket
        // each, of the table's shape.
        let described = info.as_ref().map_or(&[][..], |i| &i.indexes[..]);
        let indexes = described
            .iter()
            .filter_map(|ix| {
                let bucket = Bucket::new(ix.capacity?, self.cfg.burst_s, self.cfg.credit_s, now);
                Some(IndexState {
                    name: ix.name.clone(),
                    keys: ix.keys.clone(),
                    bucket,
                })
            })
            .collect();
        let hash_key = info.ok().map(|i| i.key.hash.name);
        let state =
            TableState::new(bucket, on_demand, partitions, hash_key, now).with_indexes(indexes);
        self.tables.lock().entry(table.to_string()).or_insert(state);
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
        let (split, pushes) = self.admit(&json, &tables, now);
        for (t, w) in pushes {
            self.update_upstream(&t, w).await;
        }
        if split.accepted_items == 0 {
            let mut map = self.tables.lock();
            for t in &tables {
                let st = map.get_mut(t).expect("ensured");
                st.stats.throttled_requests += 1;
                st.stats.throttled_items += count_for(&split.withheld, t);
                st.second(now)[2] += 1.0;
            }
            return throttled(&split.reasons);
        }
        let consumed = json
            .get("ReturnConsumedCapacity")
            .is_some_and(|v| v != "NONE");
        let resp = self
            .write_on(
                &parts,
                || Bytes::from(Value::Object(split.forward.clone()).to_string()),
                |s| s.batch_written(&split.taken, consumed),
            )
            .await;
        let ok = resp.status().is_success();
        self.settle(&split, &tables, ok, now);
        let withheld = split.withheld.values().filter_map(Value::as_array);
        if !ok || withheld.map(Vec::len).sum::<usize>() == 0 {
            return resp;
        }
        edit_json(resp, |v| wire::merge_unprocessed(v, &split.withheld)).await
    }

    /// Counts the request, applies due capacity steps and takes from each
    /// table's bucket what fits; returns the split and the steps to push
    /// upstream.
    fn admit(
        &self,
        json: &Value,
        tables: &[String],
        now: Duration,
    ) -> (wire::Split, Vec<(String, f64)>) {
        let mut pushes = Vec::new();
        let mut map = self.tables.lock();
        for t in tables {
            let st = map.get_mut(t).expect("ensured");
            if st.first_write.is_none() {
                st.first_write = Some(now);
                st.initial_tokens = st.bucket.as_mut().map_or(0.0, |b| b.available(now));
            }
            st.stats.requests += 1;
            st.second(now)[4] += 1.0;
            pushes.extend(self.step_schedule(st, t, now));
        }
        let split = wire::split_batch(json, |table, req, cost| {
            map.get_mut(table)
                .map_or(wire::Admit::Yes, |st| st.admit(req, cost, now))
        });
        (split, pushes)
    }

    /// After upstream answered a forwarded batch: counts what was written, or
    /// gives the capacity back when it failed.
    fn settle(&self, split: &wire::Split, tables: &[String], ok: bool, now: Duration) {
        let mut map = self.tables.lock();
        if !ok {
            // Every forwarded request gives back what it took, from the
            // table's bucket and from its partition's.
            let forwarded = split.forward["RequestItems"].as_object();
            for (t, reqs) in forwarded.into_iter().flatten() {
                let st = map.get_mut(t).expect("ensured");
                for req in reqs.as_array().into_iter().flatten() {
                    st.refund(req, wire::request_wcu(req));
                }
            }
            return;
        }
        for (t, cost) in &split.taken {
            let st = map.get_mut(t).expect("ensured");
            st.stats.accepted_wcu += cost;
            st.last_accept = Some(self.now());
            st.second(now)[1] += cost;
        }
        for t in tables {
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
        let req = json!({"PutRequest": {"Item": json.get("Item").cloned().unwrap_or(json!({}))}});
        let cost = wire::request_wcu(&req);
        let now = self.now();
        let admitted = {
            let mut map = self.tables.lock();
            let st = map.get_mut(&table).expect("ensured");
            if st.first_write.is_none() {
                st.first_write = Some(now);
                st.initial_tokens = st.bucket.as_mut().map_or(0.0, |b| b.available(now));
            }
            st.stats.requests += 1;
            let admit = st.admit(&req, cost, now);
            if admit != wire::Admit::Yes {
                st.stats.throttled_requests += 1;
                st.stats.throttled_items += 1;
            }
            admit
        };
        match admitted {
            wire::Admit::Yes => {}
            wire::Admit::Table => return throttled(&[(table, wire::TABLE_WRITE_PROVISIONED)]),
            wire::Admit::KeyRange => return throttled(&[(table, wire::TABLE_WRITE_KEY_RANGE)]),
            wire::Admit::Max => return throttled(&[(table, wire::TABLE_WRITE_MAX_ON_DEMAND)]),
            wire::Admit::Index(name) => {
                let resource = wire::index_resource(&table, &name);
                return throttled(&[(resource, wire::INDEX_WRITE_PROVISIONED)]);
            }
        }
        let resp = self.write_on(&parts, || body, |_| json!({})).await;
        let mut map = self.tables.lock();
        let st = map.get_mut(&table).expect("ensured");
        if resp.status().is_success() {
            st.stats.accepted_items += 1;
            st.stats.accepted_wcu += cost;
            st.last_accept = Some(self.now());
        } else {
            st.refund(&req, cost);
        }
        resp
    }

    /// Sends an admitted write on: upstream, or answered by the stand-in
    /// (`answer`) after its latency.
    async fn write_on(
        &self,
        parts: &hyper::http::request::Parts,
        body: impl FnOnce() -> Bytes,
        answer: impl FnOnce(&stand_in::StandIn) -> Value,
    ) -> Resp {
        match &self.cfg.stand_in {
            Some(s) => {
                tokio::time::sleep(s.latency).await;
                respond(StatusCode::OK, answer(s).to_string())
            }
            None => self.forward(parts, body()).await,
        }
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
}

fn table_name(body: &[u8]) -> Option<String> {
    serde_json::from_slice::<Value>(body)
        .ok()?
        .get("TableName")?
        .as_str()
        .map(str::to_string)
}

/// A response's head and its body as JSON (`null` when it is not JSON).
async fn json_of(resp: Resp) -> (hyper::http::response::Parts, Value) {
    let (parts, body) = resp.into_parts();
    let bytes = body
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    (parts, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

/// A response with this head and JSON body (the upstream checksum, if any,
/// no longer applies).
fn with_json(mut parts: hyper::http::response::Parts, body: &Value) -> Resp {
    parts.headers.remove("x-amz-crc32");
    Response::from_parts(parts, Full::new(Bytes::from(body.to_string())))
}

/// Rewrites a JSON response body with `edit`.
async fn edit_json(resp: Resp, edit: impl FnOnce(&mut Value)) -> Resp {
    let (parts, mut body) = json_of(resp).await;
    edit(&mut body);
    with_json(parts, &body)
}
