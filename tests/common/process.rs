//! `ingest` processes: a test's setup and config, a running worker and its
//! logs, its HTTP endpoints.

use super::*;

/// One HTTP/1.1 GET; returns the status code and the body.
pub fn http_get(addr: &str, path: &str) -> std::io::Result<(u16, String)> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut text = String::new();
    s.read_to_string(&mut text)?;
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    Ok((status, body.to_string()))
}

/// The value of one sample (`name{labels}`, exactly as rendered) in a
/// Prometheus text exposition.
pub fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().filter(|l| !l.starts_with('#')).find_map(|l| {
        l.strip_prefix(series)?
            .strip_prefix(' ')?
            .trim()
            .parse()
            .ok()
    })
}

/// One test's worker setup: topic, table, group, dead-letter topic, config file.
pub struct Setup {
    pub topic: String,
    pub table: String,
    pub group: String,
    pub dlq: String,
    pub partitions: i32,
    pub config: PathBuf,
}

/// The config file goes with its setup (tests used to leave one per run in
/// the temporary directory).
impl Drop for Setup {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.config);
    }
}

impl Setup {
    /// Deletes the table, once a bench row has read what it needs. LocalStack
    /// caps the provisioned write capacity of an account's tables at 80,000
    /// units; the benches' tables (1,000 WCU/s each on the hot range) reached
    /// it after about 80 rows on one stack, and every later row failed to
    /// create its table. A failed delete is reported, not fatal.
    pub async fn delete_table(&self) {
        let client = dynamo().await;
        if let Err(e) = client.delete_table().table_name(&self.table).send().await {
            eprintln!("delete table {}: {e}", self.table);
        }
    }

    /// Creates the topics and an on-demand table, writes a config file.
    pub async fn new(partitions: i32, extra_route: &str) -> Setup {
        Setup::build(partitions, extra_route, None).await
    }

    /// Like `new`, with a table of `wcu` provisioned write capacity (None: on
    /// demand).
    pub async fn build(partitions: i32, extra_route: &str, wcu: Option<i64>) -> Setup {
        require_stack();
        let s = Setup {
            topic: unique("in"),
            table: unique("tbl"),
            group: unique("grp"),
            dlq: unique("dlq"),
            partitions,
            config: std::env::temp_dir().join(format!("{}.toml", unique("ingest-test"))),
        };
        create_topics(&[(&s.topic, partitions), (&s.dlq, 1)]).await;
        create_table_with(
            &dynamo().await,
            &s.table,
            extra_route.contains("sort_key"),
            wcu,
        )
        .await;
        let toml = format!(
            r#"
[kafka]
brokers = "{brokers}"
group_id = "{group}"
dead_letter_topic = "{dlq}"
commit_interval_ms = 300
[kafka.properties]
"session.timeout.ms" = "6000"
"heartbeat.interval.ms" = "500"
[dynamodb]
endpoint_url = "{DYNAMODB}"
region = "us-east-1"
[[route]]
topic = "{topic}"
table = "{table}"
{extra_route}
[pipeline]
drain_timeout_s = 30
[log]
format = "json"
level = "info"
"#,
            brokers = brokers(),
            group = s.group,
            dlq = s.dlq,
            topic = s.topic,
            table = s.table,
        );
        std::fs::write(&s.config, toml).unwrap();
        s
    }

    /// Starts `ingest run` on this setup.
    pub fn spawn(&self, until_caught_up: bool) -> Worker {
        self.spawn_with_env(until_caught_up, &[])
    }

    /// Starts `ingest run` with extra environment variables (config overrides).
    pub fn spawn_with_env(&self, until_caught_up: bool, env: &[(&str, &str)]) -> Worker {
        self.spawn_with_env_removed(until_caught_up, env, &[])
    }

    /// Starts `ingest run` with extra environment variables and without the
    /// `removed` ones (not even the test credentials `Worker::start` sets).
    pub fn spawn_with_env_removed(
        &self,
        until_caught_up: bool,
        env: &[(&str, &str)],
        removed: &[&str],
    ) -> Worker {
        Worker::start(self.command(until_caught_up, env, removed))
    }

    /// Starts `ingest run` with its stdout and stderr closed at once, as when
    /// their reader is gone (its writes to them fail with EPIPE); its
    /// `Worker` has no logs and no summary, only the exit.
    pub fn spawn_unread(&self, until_caught_up: bool) -> Worker {
        Worker::start_unread(self.command(until_caught_up, &[], &[]))
    }

    /// The `ingest run` command for this setup.
    fn command(&self, until_caught_up: bool, env: &[(&str, &str)], removed: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_ingest"));
        cmd.arg("run").arg("--config").arg(&self.config);
        if until_caught_up {
            cmd.arg("--until-caught-up");
        }
        for var in removed {
            cmd.env_remove(var);
        }
        cmd.envs(env.iter().copied());
        cmd
    }

    pub fn committed(&self) -> Vec<i64> {
        committed(&self.group, &self.topic, self.partitions)
    }

    /// The group's committed offsets, or None when the broker does not
    /// answer within `timeout` (a mid-run sample may then be skipped).
    pub fn committed_within(&self, timeout: Duration) -> Option<Vec<i64>> {
        let reader = group_reader(&self.group);
        committed_by(&reader, &self.topic, self.partitions, timeout)
    }

    /// Points the worker at another DynamoDB endpoint (a proxy).
    pub fn use_endpoint(&self, endpoint: &str) {
        let text = std::fs::read_to_string(&self.config).unwrap();
        std::fs::write(&self.config, text.replace(DYNAMODB, endpoint)).unwrap();
    }

    /// Sets one of the `[kafka.properties]` the setup wrote (e.g. the
    /// session timeout).
    pub fn set_kafka_property(&self, key: &str, value: &str) {
        self.set_line(&format!("\"{key}\""), &format!("\"{value}\""));
    }

    /// Rewrites the first `key = ...` line the setup wrote to `key = value`
    /// (`value` as TOML: quote strings).
    pub fn set_line(&self, key: &str, value: &str) {
        let text = std::fs::read_to_string(&self.config).unwrap();
        let mut lines: Vec<String> = text.lines().map(String::from).collect();
        // That line only (a substring replace could hit an earlier line
        // ending with the same text: `aws_region = ...` for `region`).
        let at = lines
            .iter()
            .position(|l| l.starts_with(&format!("{key} =")))
            .unwrap_or_else(|| panic!("no {key} in the setup's config"));
        lines[at] = format!("{key} = {value}");
        let mut out = lines.join("\n");
        if text.ends_with('\n') {
            out.push('\n');
        }
        std::fs::write(&self.config, out).unwrap();
    }

    /// Sets config keys by appending a section (e.g. "[throttle]\n...").
    pub fn append_config(&self, toml: &str) {
        let mut text = std::fs::read_to_string(&self.config).unwrap();
        text.push('\n');
        text.push_str(toml);
        std::fs::write(&self.config, text).unwrap();
    }

    pub fn end_offsets(&self) -> Vec<i64> {
        end_offsets(&self.topic, self.partitions)
    }
}

/// A running `ingest` process; its stderr (JSON logs) is collected.
pub struct Worker {
    pub child: Child,
    pub logs: Arc<Mutex<Vec<Value>>>,
    stdout: Option<std::process::ChildStdout>,
    /// The thread collecting stderr into `logs`.
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Worker {
    /// Spawns `cmd` with the test credentials (unless it sets its own),
    /// no `RUST_LOG`, and its stdout and stderr piped.
    fn spawn_piped(mut cmd: Command) -> Child {
        for (k, v) in [
            ("AWS_ACCESS_KEY_ID", "test"),
            ("AWS_SECRET_ACCESS_KEY", "test"),
            ("AWS_REGION", "us-east-1"),
        ] {
            // The test's own credentials, if it set some, win.
            if !cmd.get_envs().any(|(key, _)| key == k) {
                cmd.env(k, v);
            }
        }
        cmd.env_remove("RUST_LOG")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd.spawn().expect("spawn ingest")
    }

    /// As [`Worker::start`], but the reading ends of its stdout and stderr
    /// are closed at once.
    pub fn start_unread(cmd: Command) -> Worker {
        let mut child = Self::spawn_piped(cmd);
        drop(child.stdout.take());
        drop(child.stderr.take());
        Worker {
            child,
            logs: Arc::new(Mutex::new(Vec::new())),
            stdout: None,
            reader: None,
        }
    }

    pub fn start(cmd: Command) -> Worker {
        let mut child = Self::spawn_piped(cmd);
        let logs = Arc::new(Mutex::new(Vec::new()));
        let stderr = child.stderr.take().unwrap();
        let sink = logs.clone();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let v = serde_json::from_str(&line).unwrap_or(Value::String(line));
                sink.lock().unwrap().push(v);
            }
        });
        let stdout = child.stdout.take();
        Worker {
            child,
            logs,
            stdout,
            reader: Some(reader),
        }
    }

    /// The log lines with this message.
    /// The log lines of one named event (their `event` field).
    pub fn events(&self, name: &str) -> Vec<Value> {
        self.logs
            .lock()
            .unwrap()
            .iter()
            .filter(|v| v.get("event").and_then(Value::as_str) == Some(name))
            .cloned()
            .collect()
    }

    /// Whether the process has exited.
    pub fn exited(&mut self) -> bool {
        self.child.try_wait().ok().flatten().is_some()
    }

    pub fn signal(&self, sig: &str) {
        let status = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(self.child.id().to_string())
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// Waits for the exit (at most `timeout`); returns the code and the
    /// summary JSON the worker printed on stdout, if any.
    pub fn wait(mut self, timeout: Duration) -> (Option<i32>, Option<Value>) {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                let mut out = String::new();
                if let Some(mut s) = self.stdout.take() {
                    use std::io::Read;
                    s.read_to_string(&mut out).unwrap();
                }
                let summary = out.lines().rev().find_map(|l| serde_json::from_str(l).ok());
                // The last log lines (the error it exited with) may still
                // be on their way into `logs`: the reader ends at the
                // pipe's end (within 5 s, in case a child holds it open).
                if let Some(reader) = self.reader.take() {
                    let until = Instant::now() + Duration::from_secs(5);
                    while !reader.is_finished() && Instant::now() < until {
                        std::thread::sleep(Duration::from_millis(10));
                    }
                    if reader.is_finished() {
                        let _ = reader.join();
                    }
                }
                return (status.code(), summary);
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let logs = self.logs.lock().unwrap();
                let tail: Vec<String> = logs.iter().rev().take(20).map(|v| v.to_string()).collect();
                panic!(
                    "worker did not exit within {timeout:?}; last logs:\n{}",
                    tail.join("\n")
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits for the exit, as [`Self::wait`]; also returns every log line.
    pub fn wait_logged(self, timeout: Duration) -> (Option<i32>, Option<Value>, String) {
        let logs = self.logs.clone();
        let (code, summary) = self.wait(timeout);
        (code, summary, joined(&logs))
    }

    pub fn dump_logs(&self) -> String {
        joined(&self.logs)
    }
}

/// Log lines, one per line.
fn joined(logs: &Mutex<Vec<Value>>) -> String {
    logs.lock()
        .unwrap()
        .iter()
        .map(|v| v.to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

impl Drop for Worker {
    /// A test that fails leaves no worker behind.
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
