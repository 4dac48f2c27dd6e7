//! The throttle proxy (`ingest throttle-proxy`) as a subprocess.

use super::*;

/// An `ingest throttle-proxy` subprocess in front of LocalStack.
pub struct ThrottleProxy {
    child: Child,
    pub addr: String,
}

impl ThrottleProxy {
    /// Starts the proxy with extra arguments (e.g. `--schedule`).
    pub fn start(args: &[&str]) -> ThrottleProxy {
        ThrottleProxy::start_on(&format!("127.0.0.1:{}", free_port()), args)
    }

    /// Starts the proxy with `partitions` partitions of `partition_wcu`
    /// WCU/s each, buckets (the table's and the partitions') `burst_s` deep.
    pub fn partitioned(partitions: u32, partition_wcu: u32, burst_s: f64) -> ThrottleProxy {
        let (n, wcu, burst) = (
            partitions.to_string(),
            partition_wcu.to_string(),
            burst_s.to_string(),
        );
        ThrottleProxy::start(&[
            "--partitions",
            &n,
            "--partition-wcu",
            &wcu,
            "--burst-s",
            &burst,
        ])
    }

    /// Starts the proxy on a given address.
    pub fn start_on(addr: &str, args: &[&str]) -> ThrottleProxy {
        ThrottleProxy::start_with(addr, DYNAMODB, args)
    }

    /// Starts the proxy with nothing behind it (`--upstream none`): it
    /// answers DynamoDB itself.
    pub fn stand_in(args: &[&str]) -> ThrottleProxy {
        ThrottleProxy::start_with(&format!("127.0.0.1:{}", free_port()), "none", args)
    }

    fn start_with(addr: &str, upstream: &str, args: &[&str]) -> ThrottleProxy {
        let addr = addr.to_string();
        let child = Command::new(env!("CARGO_BIN_EXE_ingest"))
            .args(["throttle-proxy", "--listen", &addr, "--upstream", upstream])
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn proxy");
        // Owned from here on: Drop kills and reaps it.
        let proxy = ThrottleProxy { child, addr };
        for _ in 0..100 {
            if std::net::TcpStream::connect(&proxy.addr).is_ok() {
                return proxy;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("throttle proxy did not listen on {}", proxy.addr);
    }

    /// The proxy process's id (benches read its CPU time).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// One admin request; returns the JSON body.
    pub fn admin(&self, method: &str, path: &str) -> Value {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(&self.addr).unwrap();
        write!(s, "{method} {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nContent-Length: 0\r\n\r\n", self.addr).unwrap();
        let mut text = String::new();
        s.read_to_string(&mut text).unwrap();
        let body = text.split("\r\n\r\n").nth(1).unwrap_or("");
        serde_json::from_str(body).unwrap_or_else(|e| panic!("proxy answered {text:?}: {e}"))
    }

    /// The proxy's counters for one table.
    pub fn stats(&self, table: &str) -> Value {
        self.admin("GET", "/_proxy/stats")["tables"][table].clone()
    }
}

impl Drop for ThrottleProxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
