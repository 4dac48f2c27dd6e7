//! The proxy's admin paths (`/_proxy/stats`, `/_proxy/capacity`,
//! `/_proxy/outage`) and capacity changes: scheduled steps, and pushed to and
//! read from upstream.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use hyper::StatusCode;
use serde_json::{json, Value};
use tracing::{info, warn};

use super::table::TableState;
use super::{json_of, respond, with_json, Proxy, Resp};

impl Proxy {
    pub(super) async fn admin(&self, path: &str, query: &str) -> Resp {
        let q: HashMap<&str, &str> = query
            .split('&')
            .filter_map(|kv| kv.split_once('='))
            .collect();
        match path {
            "/_proxy/stats" => {
                let map = self.tables.lock();
                let tables: serde_json::Map<String, Value> = map
                    .iter()
                    .map(|(t, st)| {
                        let mut s = st.stats.clone();
                        s.wcu = st.capacity();
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
                let on_demand = self
                    .tables
                    .lock()
                    .get_mut(*table)
                    .is_some_and(|st| st.set_limit(wcu, now));
                if on_demand {
                    info!(table, wcu, "on-demand maximum changed (admin)");
                } else {
                    info!(table, wcu, "capacity changed (admin)");
                    self.update_upstream(table, wcu).await;
                }
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
                *self.down_until.lock() = Some(until);
                warn!(seconds = secs, "outage (admin): every call answers 503");
                respond(StatusCode::OK, json!({ "outage_s": secs }).to_string())
            }
            _ => respond(StatusCode::NOT_FOUND, "unknown admin path".into()),
        }
    }

    /// A DescribeTable answer for a table the proxy models as on-demand:
    /// states its maximum and warm throughput as DynamoDB would
    /// (`OnDemandThroughput`, `WarmThroughput`). A provisioned table is left
    /// alone: its state starts at its first write, not here (its bucket
    /// banks burst credit from then on).
    pub(super) async fn describe_on_demand(&self, table: &str, resp: Resp) -> Resp {
        if self.cfg.wcu.is_some() {
            return resp;
        }
        let (parts, mut body) = json_of(resp).await;
        let provisioned = body
            .pointer("/Table/ProvisionedThroughput/WriteCapacityUnits")
            .and_then(Value::as_i64)
            .is_some_and(|w| w > 0);
        if provisioned {
            return with_json(parts, &body);
        }
        self.ensure_table(table).await;
        let shown = self
            .tables
            .lock()
            .get(table)
            .and_then(|st| st.on_demand.as_ref().map(|od| (od.max(), od.warm())));
        if let (Some((max, warm)), Some(t)) =
            (shown, body.get_mut("Table").and_then(Value::as_object_mut))
        {
            t.insert(
                "OnDemandThroughput".into(),
                json!({"MaxReadRequestUnits": -1,
                       "MaxWriteRequestUnits": max.map_or(-1, |m| m.round() as i64)}),
            );
            t.insert(
                "WarmThroughput".into(),
                json!({"ReadUnitsPerSecond": (3.0 * warm).round() as i64,
                       "WriteUnitsPerSecond": warm.round() as i64,
                       "Status": "ACTIVE"}),
            );
        }
        with_json(parts, &body)
    }

    /// After an UpdateTable went through: enforce the table's new capacity
    /// or on-demand maximum.
    pub(super) async fn follow_upstream(&self, table: &str) {
        if let Ok(info) = self.dynamo.describe(table).await {
            let now = self.now();
            if let Some(st) = self.tables.lock().get_mut(table) {
                st.follow(info.capacity, info.max_write, now);
            }
        }
    }

    /// UpdateTable upstream so DescribeTable reports the new capacity.
    pub(super) async fn update_upstream(&self, table: &str, wcu: f64) {
        use aws_sdk_dynamodb::types::ProvisionedThroughput;
        if self.cfg.stand_in.is_some() {
            return; // nothing behind the proxy: its DescribeTable reports it
        }
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

    /// Applies due schedule steps; returns (table, wcu) changes to push upstream.
    pub(super) fn step_schedule(
        &self,
        st: &mut TableState,
        table: &str,
        now: Duration,
    ) -> Option<(String, f64)> {
        let mut push = None;
        for (wcu, on_demand) in st.due_steps(&self.cfg.schedule, now) {
            if on_demand {
                info!(table, wcu, "on-demand maximum step (schedule)");
            } else {
                info!(table, wcu, "capacity step (schedule)");
                push = Some((table.to_string(), wcu));
            }
        }
        push
    }
}
