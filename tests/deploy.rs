//! The deployment files agree with each other and with the worker: the
//! Kubernetes manifests in deploy/, docker-compose.yml, the Dockerfile and the
//! IAM policy. No cluster or Docker engine is needed (there is none here);
//! what can be checked without one is checked: every file parses, required
//! fields are present, the embedded config passes the worker's own
//! validation, and ports, paths, names and grace periods line up.

use std::collections::BTreeSet;
use std::path::Path;

use ingest::config::Settings;
use serde_yaml::Value;

fn read(path: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(path))
        .unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Every YAML document of a file.
fn docs(path: &str) -> Vec<Value> {
    use serde::Deserialize;
    let text = read(path);
    serde_yaml::Deserializer::from_str(&text)
        .map(|d| Value::deserialize(d).unwrap_or_else(|e| panic!("{path}: {e}")))
        .filter(|v| !v.is_null())
        .collect()
}

fn kind<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind}"))
}

fn s(v: &Value) -> &str {
    v.as_str().unwrap_or_else(|| panic!("not a string: {v:?}"))
}

fn config() -> Settings {
    let cm = docs("deploy/configmap.yaml");
    let text = s(&kind(&cm, "ConfigMap")["data"]["ingest.toml"]).to_string();
    Settings::from_toml(&text, "deploy/configmap.yaml", Vec::new())
        .unwrap_or_else(|e| panic!("the ConfigMap's config is invalid: {e}"))
}

fn the_container(pod_spec: &Value) -> &Value {
    let containers = pod_spec["containers"].as_sequence().expect("containers");
    assert_eq!(containers.len(), 1, "one container");
    &containers[0]
}

/// The checks shared by the Job's and the Deployment's pod templates.
fn check_pod(what: &str, pod: &Value, settings: &Settings) -> Vec<String> {
    let spec = &pod["spec"];
    let c = the_container(spec);
    let port = settings.ops.listen.expect("ops.listen is set").port();
    let ports = c["ports"].as_sequence().expect("ports");
    assert!(
        ports
            .iter()
            .any(|p| p["name"] == "metrics" && p["containerPort"].as_u64() == Some(port.into())),
        "{what}: the container port named metrics is ops.listen's port {port}"
    );
    assert_eq!(
        s(&c["livenessProbe"]["httpGet"]["path"]),
        "/healthz",
        "{what}"
    );
    assert_eq!(
        s(&c["readinessProbe"]["httpGet"]["path"]),
        "/readyz",
        "{what}"
    );
    for probe in ["livenessProbe", "readinessProbe"] {
        assert_eq!(c[probe]["httpGet"]["port"], "metrics", "{what} {probe}");
    }
    let annotations = &pod["metadata"]["annotations"];
    assert_eq!(s(&annotations["prometheus.io/port"]), port.to_string());
    assert_eq!(s(&annotations["prometheus.io/path"]), "/metrics");
    // Graceful termination outlasts the drain deadline.
    let grace = spec["terminationGracePeriodSeconds"]
        .as_u64()
        .expect("terminationGracePeriodSeconds");
    assert!(
        grace > settings.pipeline.drain_timeout.as_secs(),
        "{what}: grace {grace} s must exceed drain_timeout_s {}",
        settings.pipeline.drain_timeout.as_secs()
    );
    // Non-root, as the image's USER.
    assert_eq!(spec["securityContext"]["runAsNonRoot"], true, "{what}");
    assert_eq!(spec["securityContext"]["runAsUser"].as_u64(), Some(10001));
    assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false);
    // The config is mounted where the args read it.
    let args: Vec<String> = c["args"]
        .as_sequence()
        .expect("args")
        .iter()
        .map(|a| s(a).to_string())
        .collect();
    let config_path = &args[args.iter().position(|a| a == "--config").expect("--config") + 1];
    let mount = c["volumeMounts"][0]["mountPath"].as_str().expect("mount");
    assert!(
        config_path.starts_with(mount),
        "{what}: {config_path} is under the mount {mount}"
    );
    assert_eq!(
        spec["volumes"][0]["configMap"]["name"], "ingest-config",
        "{what}: mounts the ConfigMap"
    );
    assert_eq!(
        s(&spec["serviceAccountName"]),
        "ingest",
        "{what}: runs as the IRSA service account"
    );
    args
}

#[test]
fn every_manifest_parses_and_names_itself() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy");
    let mut n = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("yaml") {
            continue;
        }
        let rel = format!("deploy/{}", path.file_name().unwrap().to_str().unwrap());
        for d in docs(&rel) {
            n += 1;
            for field in ["apiVersion", "kind"] {
                assert!(d[field].is_string(), "{rel}: {field}");
            }
            assert!(d["metadata"]["name"].is_string(), "{rel}: metadata.name");
        }
    }
    assert!(
        n >= 6,
        "ConfigMap, ServiceAccount, Job, Deployment, Service, ScaledObject"
    );
}

#[test]
fn the_job_runs_until_caught_up_and_the_deployment_continuously() {
    let settings = config();
    let job = docs("deploy/job.yaml");
    let job = kind(&job, "Job");
    assert_eq!(s(&job["apiVersion"]), "batch/v1");
    assert!(job["spec"]["parallelism"].as_u64().unwrap() >= 1);
    assert!(
        job["spec"]["completions"].is_null(),
        "a work-queue Job: done when a pod succeeds and all stopped"
    );
    let restart = s(&job["spec"]["template"]["spec"]["restartPolicy"]);
    assert!(restart == "OnFailure" || restart == "Never");
    let args = check_pod("Job", &job["spec"]["template"], &settings);
    assert!(args.contains(&"--until-caught-up".to_string()));

    let dep = docs("deploy/deployment.yaml");
    let d = kind(&dep, "Deployment");
    assert_eq!(s(&d["apiVersion"]), "apps/v1");
    assert_eq!(
        d["spec"]["selector"]["matchLabels"], d["spec"]["template"]["metadata"]["labels"],
        "the selector matches the pod labels"
    );
    let args = check_pod("Deployment", &d["spec"]["template"], &settings);
    assert!(!args.contains(&"--until-caught-up".to_string()));

    let svc = kind(&dep, "Service");
    assert_eq!(svc["spec"]["ports"][0]["targetPort"], "metrics");
    for (k, v) in svc["spec"]["selector"].as_mapping().unwrap() {
        assert_eq!(
            &d["spec"]["template"]["metadata"]["labels"][k], v,
            "the Service selects the Deployment's pods"
        );
    }
}

#[test]
fn keda_scales_the_deployment_on_the_workers_group_and_topic() {
    let settings = config();
    let so = docs("deploy/keda-scaledobject.yaml");
    let so = kind(&so, "ScaledObject");
    assert_eq!(s(&so["apiVersion"]), "keda.sh/v1alpha1");
    assert_eq!(s(&so["spec"]["scaleTargetRef"]["name"]), "ingest");
    assert_eq!(s(&so["spec"]["scaleTargetRef"]["kind"]), "Deployment");
    let t = &so["spec"]["triggers"][0];
    assert_eq!(s(&t["type"]), "kafka");
    let m = &t["metadata"];
    assert_eq!(s(&m["consumerGroup"]), settings.kafka.group_id);
    assert_eq!(s(&m["topic"]), settings.routes[0].topic);
    assert_eq!(s(&m["bootstrapServers"]), settings.kafka.brokers);
    assert!(s(&m["lagThreshold"]).parse::<u64>().unwrap() > 0);
    let (min, max) = (
        so["spec"]["minReplicaCount"].as_u64().unwrap(),
        so["spec"]["maxReplicaCount"].as_u64().unwrap(),
    );
    assert!(1 <= min && min <= max);
}

#[test]
fn the_iam_policy_allows_exactly_the_calls_the_worker_makes() {
    let policy: serde_json::Value = serde_json::from_str(&read("deploy/iam-policy.json")).unwrap();
    let st = &policy["Statement"][0];
    assert_eq!(st["Effect"], "Allow");
    let allowed: BTreeSet<String> = st["Action"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect();
    // The worker's DynamoDB client: every operation it calls.
    let client = read("src/sink/dynamodb.rs");
    let ops = [
        ("batch_write_item", "BatchWriteItem"),
        ("describe_table", "DescribeTable"),
        ("put_item", "PutItem"),
        ("update_item", "UpdateItem"),
        ("delete_item", "DeleteItem"),
        ("get_item", "GetItem"),
        ("scan", "Scan"),
        ("query", "Query"),
        ("create_table", "CreateTable"),
        ("list_tables", "ListTables"),
    ];
    let used: BTreeSet<String> = ops
        .iter()
        .filter(|(m, _)| client.contains(&format!(".{m}()")))
        .map(|(_, a)| format!("dynamodb:{a}"))
        .collect();
    assert_eq!(allowed, used, "least privilege: exactly what is called");
    for r in st["Resource"].as_array().unwrap() {
        assert!(
            r.as_str().unwrap().contains(":table/"),
            "scoped to tables, not *"
        );
    }
}

#[test]
fn the_compose_file_wires_workers_to_kafka_and_localstack() {
    let d = docs("docker-compose.yml");
    let services = &d[0]["services"];
    for name in ["kafka", "localstack", "topics", "worker"] {
        assert!(services[name].is_mapping(), "service {name}");
    }
    let w = &services["worker"];
    let env = &w["environment"];
    assert_eq!(s(&env["INGEST__KAFKA__BROKERS"]), "kafka:9092");
    assert!(s(&env["INGEST__DYNAMODB__ENDPOINT_URL"]).starts_with("http://localstack:4566"));
    let listen: std::net::SocketAddr = s(&env["INGEST__OPS__LISTEN"]).parse().unwrap();
    assert_eq!(s(&w["expose"][0]), listen.port().to_string());
    assert_eq!(s(&w["command"][0]), "run");
    assert_eq!(s(&w["command"][2]), "/etc/ingest/ingest.toml");
    assert_eq!(
        w["depends_on"]["topics"]["condition"],
        "service_completed_successfully"
    );
    // The image's config, with the compose file's overrides, is valid.
    let overrides = env
        .as_mapping()
        .unwrap()
        .iter()
        .map(|(k, v)| (s(k).to_string(), s(v).to_string()));
    let settings = Settings::from_toml(&read("config/container.toml"), "container", overrides)
        .unwrap_or_else(|e| panic!("config/container.toml + compose env: {e}"));
    assert_eq!(settings.ops.listen, Some(listen));
    // The LocalStack init hook it mounts exists and creates the routed table.
    let hook = read("localstack/init/ready.d/10-create-tables.py");
    assert!(hook.contains(&format!("\"{}\"", settings.routes[0].table)));
    // Stop grace outlasts the drain.
    let grace: u64 = s(&w["stop_grace_period"])
        .trim_end_matches('s')
        .parse()
        .unwrap();
    assert!(grace > settings.pipeline.drain_timeout.as_secs());
}

#[test]
fn the_dockerfile_builds_in_one_stage_and_runs_as_non_root_in_another() {
    let text = read("Dockerfile");
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    let froms: Vec<&&str> = lines.iter().filter(|l| l.starts_with("FROM ")).collect();
    assert_eq!(froms.len(), 2, "multi-stage: build and runtime");
    assert!(froms[0].ends_with(" AS build"));
    let runtime_at = lines.iter().position(|l| l == froms[1]).unwrap();
    let runtime = &lines[runtime_at..];
    let user = runtime
        .iter()
        .find_map(|l| l.strip_prefix("USER "))
        .expect("USER in the runtime stage");
    let uid = user.split(':').next().unwrap();
    assert!(uid != "0" && uid != "root", "non-root, got {user}");
    assert!(
        uid.parse::<u32>().is_ok(),
        "numeric (runAsNonRoot can check it)"
    );
    assert!(runtime
        .iter()
        .any(|l| l.starts_with("COPY --from=build ") && l.ends_with(" /usr/local/bin/ingest")));
    assert!(runtime.contains(&r#"ENTRYPOINT ["/usr/local/bin/ingest"]"#));
    // Files it copies from the repository exist.
    for l in &lines {
        if let Some(rest) = l.strip_prefix("COPY ") {
            if rest.starts_with("--from") {
                continue;
            }
            let parts: Vec<&str> = rest.split_whitespace().collect();
            for src in &parts[..parts.len() - 1] {
                assert!(
                    Path::new(env!("CARGO_MANIFEST_DIR")).join(src).exists(),
                    "COPY source {src} exists"
                );
            }
        }
    }
    // The port it exposes is the one its config listens on.
    let settings = Settings::from_toml(&read("config/container.toml"), "container", Vec::new())
        .expect("config/container.toml is valid");
    let expose = runtime
        .iter()
        .find_map(|l| l.strip_prefix("EXPOSE "))
        .expect("EXPOSE");
    assert_eq!(expose, settings.ops.listen.unwrap().port().to_string());
    assert!(text.contains("COPY config/container.toml /etc/ingest/ingest.toml"));
}

#[test]
fn every_metric_is_documented_in_the_readme() {
    let readme = read("README.md");
    for (name, _, _, _) in ingest::ops::prom::METRICS {
        assert!(
            readme.contains(&format!("| `{name}` |")),
            "README's metrics reference lacks {name}"
        );
    }
}
