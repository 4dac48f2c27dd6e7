//! Kafka security, for real: a tansu of its own behind stunnel (TLS on one
//! port, the broker advertising that port), with a CA and a server
//! certificate the test makes with the openssl CLI, and, for SASL, tansu's
//! own SCRAM users (`tansu user create`, then `--authentication`). The worker
//! reads and dead-letters over TLS, and over SASL_SSL with SCRAM-SHA-512;
//! trusting another CA, or with a wrong password, it exits 1 naming the
//! brokers and why, and never prints the password.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::*;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{ClientConfig, Message};

/// A child process killed and reaped when dropped.
struct Owned(Child);

impl Drop for Owned {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A broker reachable only over TLS: tansu on a loopback port, advertising
/// stunnel's port in front of it; with a SCRAM user, it requires SASL.
struct TlsBroker {
    _tansu: Owned,
    _stunnel: Owned,
    addr: String,
    ca: PathBuf,
    other_ca: PathBuf,
    /// The SCRAM-SHA-512 user (name, password) it requires, if any.
    user: Option<(String, String)>,
    _dir: TempDir,
}

struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn openssl(dir: &Path, args: &[&str]) {
    run_ok(
        Command::new("openssl").args(args).current_dir(dir),
        &format!("openssl {args:?}"),
    );
}

/// A CA, a server certificate it signs for 127.0.0.1, and an unrelated CA.
fn certificates(dir: &Path) {
    let ca = |name: &str| {
        openssl(
            dir,
            &[
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-days",
                "2",
                "-subj",
                &format!("/CN={name}"),
                "-keyout",
                &format!("{name}.key"),
                "-out",
                &format!("{name}.pem"),
            ],
        )
    };
    ca("ca");
    ca("other-ca");
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            "/CN=127.0.0.1",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
        ],
    );
    std::fs::write(dir.join("san.cnf"), "subjectAltName=IP:127.0.0.1\n").unwrap();
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            "san.cnf",
            "-out",
            "server.pem",
        ],
    );
}

fn tansu_bin() -> PathBuf {
    let bin = cache_dir().join("tansu-0.6.0/bin/tansu");
    assert!(
        bin.exists(),
        "no tansu at {}: run `make test`",
        bin.display()
    );
    bin
}

fn stunnel_bin() -> &'static str {
    ["stunnel4", "stunnel"]
        .into_iter()
        .find(|b| Command::new(b).arg("-version").output().is_ok())
        .expect("stunnel is not installed: run `make test` (bash localstack/install-system.sh)")
}

fn wait_port(port: u16, what: &str) {
    for _ in 0..200 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("{what} did not listen on 127.0.0.1:{port}");
}

fn start_tansu(dir: &Path, plain: u16, tls: u16, authentication: bool) -> Owned {
    let mut cmd = Command::new(tansu_bin());
    cmd.args(["broker", "--listener-url"])
        .arg(format!("tcp://127.0.0.1:{plain}"))
        .arg("--advertised-listener-url")
        .arg(format!("tcp://127.0.0.1:{tls}"))
        .args(["--storage-engine", "sqlite://tansu.db"])
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    if authentication {
        cmd.arg("--authentication");
    }
    let child = Owned(cmd.spawn().expect("spawn tansu"));
    wait_port(plain, "tansu");
    child
}

impl TlsBroker {
    /// `user`: a SCRAM-SHA-512 user to create and require.
    fn start(user: Option<(&str, &str)>) -> TlsBroker {
        let dir = std::env::temp_dir().join(unique("ingest-tls"));
        std::fs::create_dir_all(&dir).unwrap();
        let dir = TempDir(dir);
        certificates(&dir.0);
        let (plain, tls) = (free_port(), free_port());
        let mut tansu = start_tansu(&dir.0, plain, tls, false);
        if let Some((name, password)) = user {
            // Users are created through an open broker, which then restarts
            // on the same data requiring them.
            run_ok(
                Command::new(tansu_bin())
                    .args(["user", "create", "--mechanism", "scram512", "--broker"])
                    .arg(format!("tcp://127.0.0.1:{plain}"))
                    .args([name, password]),
                "tansu user create",
            );
            drop(tansu);
            tansu = start_tansu(&dir.0, plain, tls, true);
        }
        let conf = format!(
            "foreground = yes\npid =\ndebug = warning\n[kafka]\naccept = 127.0.0.1:{tls}\nconnect = 127.0.0.1:{plain}\ncert = {d}/server.pem\nkey = {d}/server.key\n",
            d = dir.0.display()
        );
        std::fs::write(dir.0.join("stunnel.conf"), conf).unwrap();
        let stunnel = Owned(
            Command::new(stunnel_bin())
                .arg(dir.0.join("stunnel.conf"))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("spawn stunnel"),
        );
        wait_port(tls, "stunnel");
        TlsBroker {
            _tansu: tansu,
            _stunnel: stunnel,
            addr: format!("127.0.0.1:{tls}"),
            ca: dir.0.join("ca.pem"),
            other_ca: dir.0.join("other-ca.pem"),
            user: user.map(|(n, p)| (n.to_string(), p.to_string())),
            _dir: dir,
        }
    }

    /// A client config for this broker, trusting the test's CA (and its
    /// user's, if it requires one).
    fn client(&self) -> ClientConfig {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", &self.addr)
            .set("ssl.ca.location", self.ca.to_str().unwrap());
        match &self.user {
            None => c.set("security.protocol", "ssl"),
            Some((name, password)) => c
                .set("security.protocol", "sasl_ssl")
                .set("sasl.mechanisms", "SCRAM-SHA-512")
                .set("sasl.username", name)
                .set("sasl.password", password),
        };
        c
    }

    async fn create_topics(&self, topics: &[(&str, i32)]) {
        let admin: AdminClient<DefaultClientContext> = self.client().create().unwrap();
        let new: Vec<NewTopic> = topics
            .iter()
            .map(|(t, p)| NewTopic::new(t, *p, TopicReplication::Fixed(1)))
            .collect();
        let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(20)));
        for r in admin
            .create_topics(&new, &opts)
            .await
            .expect("create topics over TLS")
        {
            r.expect("topic created");
        }
    }

    async fn produce(&self, topic: &str, values: &[String]) {
        let producer: FutureProducer = self.client().create().unwrap();
        for (i, v) in values.iter().enumerate() {
            let key = format!("k{i}");
            producer
                .send(
                    FutureRecord::to(topic).key(&key).payload(v),
                    Duration::from_secs(20),
                )
                .await
                .map_err(|(e, _)| e)
                .expect("delivered over TLS");
        }
    }

    /// Every value of `topic` (one partition), read over TLS.
    fn read_all(&self, topic: &str, n: usize) -> Vec<String> {
        let c: BaseConsumer = self
            .client()
            .set("group.id", unique("tls-reader"))
            .set("auto.offset.reset", "earliest")
            .create()
            .unwrap();
        c.subscribe(&[topic]).unwrap();
        let mut out = Vec::new();
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while out.len() < n && std::time::Instant::now() < deadline {
            if let Some(Ok(m)) = c.poll(Duration::from_millis(500)) {
                out.push(String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned());
            }
        }
        out
    }
}

/// Points the setup's worker at the TLS broker: `kafka_keys` added to its
/// `[kafka]` section, `properties` to its `[kafka.properties]`.
fn point_at(s: &Setup, b: &TlsBroker, kafka_keys: &str, properties: &str) {
    s.set_line("brokers", &format!("\"{}\"\n{kafka_keys}", b.addr));
    let text = std::fs::read_to_string(&s.config).unwrap();
    let text = text.replacen(
        "[kafka.properties]\n",
        &format!("[kafka.properties]\n{properties}"),
        1,
    );
    std::fs::write(&s.config, text).unwrap();
}

/// Points the setup's worker at the TLS broker, trusting `ca`, as `user`
/// (its password given in the environment, as a user would).
fn use_tls(s: &Setup, b: &TlsBroker, ca: &Path, user: Option<&str>) {
    let mut props = format!(
        "\"security.protocol\" = \"{}\"\n\"ssl.ca.location\" = \"{}\"\n",
        if user.is_some() { "SASL_SSL" } else { "SSL" },
        ca.display()
    );
    if let Some(name) = user {
        props +=
            &format!("\"sasl.mechanisms\" = \"SCRAM-SHA-512\"\n\"sasl.username\" = \"{name}\"\n");
    }
    point_at(s, b, "", &props);
}

/// Records of the test: `n` good ones and one that is not JSON.
fn values(n: usize) -> Vec<String> {
    let mut v: Vec<String> = (0..n)
        .map(|i| format!(r#"{{"id":"tls-{i}","n":{i}}}"#))
        .collect();
    v.push("not json".into());
    v
}

/// Runs a worker to its exit; (exit code, summary, every log line).
fn run(s: &Setup, env: &[(&str, &str)]) -> (Option<i32>, Option<serde_json::Value>, String) {
    s.spawn_with_env(true, env)
        .wait_logged(Duration::from_secs(120))
}

/// The exit's own error line.
fn exit_error(text: &str) -> &str {
    text.lines()
        .find(|l| l.contains("worker failed"))
        .unwrap_or_else(|| panic!("no exit error: {text}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn the_worker_reads_and_dead_letters_over_tls() {
    let b = TlsBroker::start(None);
    let s = Setup::new(2, "").await;
    b.create_topics(&[(&s.topic, 2), (&s.dlq, 1)]).await;
    b.produce(&s.topic, &values(200)).await;
    use_tls(&s, &b, &b.ca, None);
    let (code, summary, text) = run(&s, &[]);
    assert_eq!(code, Some(0), "{text}");
    let summary = summary.expect("summary");
    assert_eq!(summary["items_written"], 200, "{summary}");
    assert_eq!(summary["dead_lettered"], 1, "{summary}");
    assert_eq!(count(&dynamo().await, &s.table).await, 200);
    let dead = b.read_all(&s.dlq, 1);
    assert_eq!(
        dead,
        vec!["not json".to_string()],
        "the dead letter, over TLS"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_broker_certificate_from_another_ca_is_refused_by_name() {
    let b = TlsBroker::start(None);
    let s = Setup::new(1, "").await;
    use_tls(&s, &b, &b.other_ca, None);
    let (code, _, text) = run(&s, &[FAIL_FAST]);
    assert_refused(code, &text, &b, "certificate verify failed");
}

const PASSWORD: &str = "s3cret-6f1d9a";

/// A broker that refuses the worker fails it within 3 s.
const FAIL_FAST: (&str, &str) = ("INGEST__KAFKA__METADATA_TIMEOUT_MS", "3000");

/// The worker exited 1, its error naming the broker it could not reach and
/// `why`.
fn assert_refused(code: Option<i32>, text: &str, b: &TlsBroker, why: &str) {
    assert_eq!(code, Some(1), "{text}");
    let told = exit_error(text);
    let at = format!("cannot reach Kafka at {}", b.addr);
    assert!(told.contains(&at), "no {at:?} in: {told}");
    assert!(told.contains(why), "no {why:?} in: {told}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_worker_authenticates_with_scram_over_tls_and_never_prints_the_password() {
    let b = TlsBroker::start(Some(("ingest", PASSWORD)));
    let s = Setup::new(2, "").await;
    b.create_topics(&[(&s.topic, 2), (&s.dlq, 1)]).await;
    b.produce(&s.topic, &values(50)).await;
    use_tls(&s, &b, &b.ca, Some("ingest"));
    let (code, summary, text) = run(
        &s,
        &[("INGEST__KAFKA__PROPERTIES__SASL_PASSWORD", PASSWORD)],
    );
    assert_eq!(code, Some(0), "{text}");
    let summary = summary.expect("summary");
    assert_eq!(summary["items_written"], 50, "{summary}");
    assert_eq!(summary["dead_lettered"], 1, "{summary}");
    assert_eq!(b.read_all(&s.dlq, 1), vec!["not json".to_string()]);
    assert!(!text.contains(PASSWORD), "the password was printed");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_wrong_scram_password_is_refused_by_name() {
    let b = TlsBroker::start(Some(("ingest", PASSWORD)));
    let s = Setup::new(1, "").await;
    use_tls(&s, &b, &b.ca, Some("ingest"));
    let wrong = "not-the-password-41c2";
    let (code, _, text) = run(
        &s,
        &[
            ("INGEST__KAFKA__PROPERTIES__SASL_PASSWORD", wrong),
            FAIL_FAST,
        ],
    );
    assert_refused(code, &text, &b, "SCRAM authentication failed");
    assert!(!text.contains(wrong), "the password was printed");
}

/// Points the setup's worker at the TLS broker with `kafka.auth =
/// "aws-msk-iam"` (OAUTHBEARER over SASL_SSL, tokens signed for eu-west-1).
fn use_msk_iam(s: &Setup, b: &TlsBroker) {
    point_at(
        s,
        b,
        "auth = \"aws-msk-iam\"\naws_region = \"eu-west-1\"",
        &format!("\"ssl.ca.location\" = \"{}\"\n", b.ca.display()),
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn msk_iam_auth_serves_a_token_from_the_aws_chain_to_each_client() {
    // tansu takes no OAUTHBEARER: the worker signs, offers, and is refused.
    let b = TlsBroker::start(Some(("ingest", PASSWORD)));
    let s = Setup::new(1, "").await;
    use_msk_iam(&s, &b);
    let (code, _, text) = run(&s, &[FAIL_FAST, ("INGEST__LOG__LEVEL", "debug")]);
    let signed = text
        .lines()
        .filter(|l| l.contains("MSK IAM token signed") && l.contains("eu-west-1"))
        .count();
    assert!(signed >= 1, "the worker signs a token at start: {text}");
    for client in ["consumer", "dead letters"] {
        assert!(
            text.lines().any(|l| l.contains("MSK IAM token served")
                && l.contains(&format!("\"client\":\"{client}\""))),
            "the {client} is handed the token: {text}"
        );
    }
    assert_refused(code, &text, &b, "SASL");
}

/// `kafka.auth = "aws-msk-iam"` on the tests' broker (the worker stops
/// before it connects).
fn msk_iam_on_the_tests_broker(s: &Setup, region: &str) {
    s.set_line(
        "brokers",
        &format!("\"{}\"\nauth = \"aws-msk-iam\"\n{region}", brokers()),
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn msk_iam_auth_without_a_region_says_so() {
    let s = Setup::new(1, "").await;
    msk_iam_on_the_tests_broker(&s, "");
    let (code, _, text) = run(
        &s,
        &[
            ("AWS_REGION", ""),
            ("AWS_DEFAULT_REGION", ""),
            ("AWS_CONFIG_FILE", "/nonexistent/aws-config"),
            ("AWS_EC2_METADATA_DISABLED", "true"),
        ],
    );
    assert_eq!(code, Some(1), "{text}");
    assert!(
        exit_error(&text).contains("MSK IAM: no AWS region (set kafka.aws_region or AWS_REGION)"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn msk_iam_auth_without_credentials_stops_at_start_saying_so() {
    let s = Setup::new(1, "").await;
    msk_iam_on_the_tests_broker(&s, "aws_region = \"eu-west-1\"");
    let worker = s.spawn_with_env_removed(
        true,
        &[
            ("AWS_CONFIG_FILE", "/nonexistent/aws-config"),
            (
                "AWS_SHARED_CREDENTIALS_FILE",
                "/nonexistent/aws-credentials",
            ),
            ("AWS_EC2_METADATA_DISABLED", "true"),
        ],
        &[
            "AWS_ACCESS_KEY_ID",
            "AWS_SECRET_ACCESS_KEY",
            "AWS_SESSION_TOKEN",
            "AWS_PROFILE",
            "AWS_WEB_IDENTITY_TOKEN_FILE",
            "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
            "AWS_CONTAINER_CREDENTIALS_FULL_URI",
        ],
    );
    let (code, _, text) = worker.wait_logged(Duration::from_secs(120));
    assert_eq!(code, Some(1), "{text}");
    assert!(
        exit_error(&text).contains("MSK IAM token: no AWS credentials"),
        "{text}"
    );
}
