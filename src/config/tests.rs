//! Unit tests of config loading, overrides and validation.

use super::*;

const MINIMAL: &str = r#"
    [kafka]
    brokers = "127.0.0.1:9092"
    group_id = "g"
    dead_letter_topic = "dlq"
    [[route]]
    topic = "orders"
    table = "orders"
    partition_key = "id"
"#;

fn load(text: &str, env: &[(&str, &str)]) -> Result<Settings, ConfigError> {
    let env = env.iter().map(|(k, v)| (k.to_string(), v.to_string()));
    Settings::from_toml(text, "test.toml", env)
}

#[test]
fn minimal_config_gets_defaults() {
    let s = load(MINIMAL, &[]).unwrap();
    assert_eq!(s.kafka.commit_interval, Duration::from_secs(2));
    assert_eq!(s.routes[0].key_mode, KeyMode::Record);
    assert_eq!(s.routes[0].key.as_ref().unwrap().hash.kind, KeyType::S);
    assert_eq!(s.dynamodb.max_in_flight_batches, 8);
}

#[test]
fn shipped_configs_are_valid() {
    for file in ["config/local.toml", "config/example.toml"] {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(file);
        Settings::load(&path, Vec::new()).unwrap_or_else(|e| panic!("{file}: {e}"));
    }
}

#[test]
fn env_overrides_keep_types_and_reach_arrays_and_properties() {
    let s = load(
        MINIMAL,
        &[
            ("INGEST__KAFKA__GROUP_ID", "12345"),
            ("INGEST__KAFKA__COMMIT_INTERVAL_MS", "500"),
            ("INGEST__ROUTE__0__TABLE", "other"),
            ("INGEST__KAFKA__PROPERTIES__SECURITY_PROTOCOL", "ssl"),
            ("UNRELATED", "x"),
        ],
    )
    .unwrap();
    assert_eq!(s.kafka.group_id, "12345");
    assert_eq!(s.kafka.commit_interval, Duration::from_millis(500));
    assert_eq!(s.routes[0].table, "other");
    assert_eq!(s.kafka.properties["security.protocol"], "ssl");
}

#[test]
fn a_request_must_fit_in_the_drain() {
    let text = format!(
        "{MINIMAL}\n[dynamodb]\nrequest_timeout_ms = 30000\n[pipeline]\ndrain_timeout_s = 30\n"
    );
    let err = load(&text, &[]).unwrap_err().to_string();
    assert!(
        err.contains("dynamodb.request_timeout_ms") && err.contains("drain"),
        "{err}"
    );
}

#[test]
fn errors_name_key_value_and_rule() {
    let e = load(MINIMAL, &[("INGEST__KAFKA__COMMIT_INTERVAL_MS", "5")]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "config key `kafka.commit_interval_ms` = 5: must be between 100 and 600000"
    );
    let e = load(MINIMAL, &[("INGEST__KAFKA__COMMIT_INTERVAL_MS", "soon")]).unwrap_err();
    assert!(
        e.to_string().contains("INGEST__KAFKA__COMMIT_INTERVAL_MS"),
        "{e}"
    );
    let e = load(MINIMAL, &[("INGEST__ROUTE__3__TABLE", "x")]).unwrap_err();
    assert!(e.to_string().contains("index 3"), "{e}");
    let e = load(
        &MINIMAL.replace(
            "partition_key = \"id\"",
            "partition_key_type = \"X\"\npartition_key = \"id\"",
        ),
        &[],
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "config file test.toml is not valid: `route[0].partition_key_type`: unknown variant `X`, expected one of `S`, `N`, `B`"
    );
}

#[test]
fn secrets_never_show_in_the_printed_settings() {
    let canary = "CANARY-s3cr3t-1234";
    let text = MINIMAL.replace(
        "[[route]]",
        &format!(
            "[kafka.properties]\n\"sasl.password\" = \"{canary}\"\n\"ssl.key.password\" = \"{canary}\"\n\"sasl.oauthbearer.config\" = \"token={canary}\"\n\"security.protocol\" = \"sasl_ssl\"\n[[route]]"
        ),
    );
    let s = load(&text, &[]).unwrap();
    let shown = format!("{s:?} {s:#?}");
    assert!(!shown.contains(canary), "{shown}");
    assert!(shown.contains("<redacted>") && shown.contains("sasl_ssl"));
    assert!(is_secret("sasl.password") && !is_secret("security.protocol"));
    assert!(is_secret("sasl.username"), "an API key on some clouds");
}

#[test]
fn unknown_keys_and_reserved_properties_are_refused() {
    let e = load(&format!("{MINIMAL}\n[pipeline]\nlinger = 5"), &[]).unwrap_err();
    assert!(e.to_string().contains("unknown field `linger`"), "{e}");
    let e = load(
        MINIMAL,
        &[("INGEST__KAFKA__PROPERTIES__ENABLE_AUTO_COMMIT", "true")],
    )
    .unwrap_err();
    assert!(e.to_string().contains("enable.auto.commit"), "{e}");
}

#[test]
fn routes_must_be_distinct_and_not_the_dead_letter_topic() {
    let twice = format!("{MINIMAL}\n[[route]]\ntopic = \"orders\"\ntable = \"x\"");
    assert!(load(&twice, &[])
        .unwrap_err()
        .to_string()
        .contains("routed once"));
    let e = load(MINIMAL, &[("INGEST__KAFKA__DEAD_LETTER_TOPIC", "orders")]).unwrap_err();
    assert!(e.to_string().contains("dead_letter_topic"), "{e}");
}

#[test]
fn the_lessons_topic_defaults_on_may_be_off_and_must_be_a_topic_of_its_own() {
    let s = load(MINIMAL, &[]).unwrap();
    assert_eq!(s.throttle.lessons_topic, "ingest-lessons");
    let off = load(MINIMAL, &[("INGEST__THROTTLE__LESSONS_TOPIC", "")]).unwrap();
    assert_eq!(off.throttle.lessons_topic, "");
    for bad in ["has space", "a/b", "..", &"x".repeat(250)] {
        let e = load(MINIMAL, &[("INGEST__THROTTLE__LESSONS_TOPIC", bad)]).unwrap_err();
        assert!(
            e.to_string().contains("throttle.lessons_topic"),
            "{bad}: {e}"
        );
    }
    for taken in ["orders", "dlq"] {
        let e = load(MINIMAL, &[("INGEST__THROTTLE__LESSONS_TOPIC", taken)]).unwrap_err();
        assert!(e.to_string().contains("must differ"), "{taken}: {e}");
    }
}

#[test]
fn the_throttle_strategy_is_chosen_by_name_and_defaults_to_adaptive() {
    let s = load(MINIMAL, &[]).unwrap();
    assert_eq!(s.throttle.strategy.name(), "adaptive");
    assert_eq!(s.throttle.sdk_retry_mode, SdkRetryMode::Off);
    let s = load(
        &with_strategy("name = \"autosleeper\", randomization_factor = 0.1"),
        &[],
    )
    .unwrap();
    assert_eq!(s.throttle.strategy.name(), "autosleeper");
    let s = load(
        MINIMAL,
        &[("INGEST__THROTTLE__STRATEGY__NAME", "heroku-gradual")],
    )
    .unwrap();
    assert_eq!(s.throttle.strategy.name(), "heroku-gradual");
    // A setting out of its range is refused by name, with the rule.
    let refused = |inline: &str| load(&with_strategy(inline), &[]).unwrap_err().to_string();
    let e = refused("name = \"autosleeper\", up_multiplier = 0.5");
    assert!(
        e.contains("throttle.strategy") && e.contains("up_multiplier = 0.5: must be >= 1"),
        "{e}"
    );
    // A first cut that would not cut (or would stop).
    let e = refused("name = \"adaptive\", first_decrease = 1.0");
    assert!(
        e.contains("throttle.strategy") && e.contains("first_decrease = 1: must be in (0, 1)"),
        "{e}"
    );
}

/// The minimal config with `[throttle] strategy = { inline }`.
fn with_strategy(inline: &str) -> String {
    format!("{MINIMAL}\n[throttle]\nstrategy = {{ {inline} }}")
}

#[test]
fn kafka_key_mode_needs_a_string_partition_key() {
    let text = MINIMAL.replace(
        "partition_key = \"id\"",
        "partition_key = \"id\"\npartition_key_type = \"N\"\nkey_mode = \"kafka\"",
    );
    let e = load(&text, &[]).unwrap_err();
    assert!(e.to_string().contains("route[0].key_mode"), "{e}");
}

#[test]
fn the_ops_endpoints_are_off_unless_an_address_is_given() {
    let s = load(MINIMAL, &[]).unwrap();
    assert_eq!(s.ops.listen, None);
    assert_eq!(s.ops.progress, ProgressMode::Auto);
    assert_eq!(s.ops.stuck_after, Duration::from_secs(300));
    let s = load(MINIMAL, &[("INGEST__OPS__LISTEN", "0.0.0.0:9100")]).unwrap();
    assert_eq!(s.ops.listen, Some("0.0.0.0:9100".parse().unwrap()));
    let e = load(MINIMAL, &[("INGEST__OPS__LISTEN", "localhost")]).unwrap_err();
    assert!(e.to_string().contains("ops.listen"), "{e}");
    let e = load(MINIMAL, &[("INGEST__OPS__PROGRESS", "bar")]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "config file test.toml is not valid: `ops.progress`: unknown variant `bar`, expected one of `auto`, `log`, `off` (set by environment variable INGEST__OPS__PROGRESS)"
    );
    let e = load(MINIMAL, &[("INGEST__OPS__STUCK_AFTER_S", "1")]).unwrap_err();
    assert!(e.to_string().contains("ops.stuck_after_s"), "{e}");
    let s = load(MINIMAL, &[("INGEST__OPS__LAG_INTERVAL_MS", "0")]).unwrap();
    assert!(s.ops.lag_interval.is_zero());
}

#[test]
fn serde_errors_name_the_key_path() {
    let text = MINIMAL.replace("partition_key = \"id\"", "sort_key = \"at\"");
    let e = load(&text, &[]).unwrap_err().to_string();
    assert!(
        e.contains("`route[0]`") && e.contains("sort_key needs partition_key"),
        "{e}"
    );
    let e = load(MINIMAL, &[("INGEST__THROTTLE__PACING_BURST", "0")]).unwrap_err();
    assert!(
        e.to_string().contains("`throttle.pacing_burst`")
            && e.to_string().contains("INGEST__THROTTLE__PACING_BURST"),
        "{e}"
    );
    let e = load(&format!("{MINIMAL}\nkey_mod = \"kafka\""), &[]).unwrap_err();
    assert!(e.to_string().contains("unknown field `key_mod`"), "{e}");
}

#[test]
fn budgets_apply_per_table_and_the_lowest_wins() {
    let text = format!(
        "{MINIMAL}    budget_wcu = 80\n    [[route]]\n    topic = \"more\"\n    table = \"orders\"\n    budget_fraction = 0.4\n    [[route]]\n    topic = \"users\"\n    table = \"users\"\n"
    );
    let s = load(&text, &[("INGEST__THROTTLE__BUDGET_FRACTION", "0.5")]).unwrap();
    let orders = s.budget_for("orders");
    assert_eq!((orders.fraction, orders.wcu), (Some(0.4), Some(80.0)));
    let users = s.budget_for("users");
    assert_eq!((users.fraction, users.wcu), (Some(0.5), None));
    let e = load(MINIMAL, &[("INGEST__THROTTLE__BUDGET_FRACTION", "1.5")]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "config key `throttle.budget_fraction` = 1.5: must be in (0, 1]"
    );
    let e = load(&format!("{MINIMAL}    budget_wcu = -1\n"), &[]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "config key `route[0].budget_wcu` = -1.0: must be > 0 (WCU per second)"
    );
}

#[test]
fn msk_iam_auth_is_oauthbearer_over_tls_and_refuses_contradicting_properties() {
    let s = load(MINIMAL, &[("INGEST__KAFKA__AUTH", "aws-msk-iam")]).unwrap();
    assert_eq!(s.kafka.auth, KafkaAuth::AwsMskIam);
    let cfg = crate::source::consumer_config(&s.kafka);
    assert_eq!(cfg.get("sasl.mechanisms"), Some("OAUTHBEARER"));
    assert_eq!(cfg.get("security.protocol"), Some("SASL_SSL"));
    // Properties that would undo it, each refused naming the rule.
    for (key, value, named) in [
        ("SASL_MECHANISMS", "PLAIN", "contradicts kafka.auth"),
        ("SASL_OAUTHBEARER_METHOD", "oidc", "sasl.oauthbearer.method"),
        ("SECURITY_PROTOCOL", "SSL", "security.protocol"),
    ] {
        let property = format!("INGEST__KAFKA__PROPERTIES__{key}");
        let env = [
            ("INGEST__KAFKA__AUTH", "aws-msk-iam"),
            (property.as_str(), value),
        ];
        let e = load(MINIMAL, &env).unwrap_err();
        assert!(e.to_string().contains(named), "{key}: {e}");
    }
    let e = load(MINIMAL, &[("INGEST__KAFKA__AUTH", "kerberos")]).unwrap_err();
    assert!(e.to_string().contains("aws-msk-iam"), "{e}");
    let plain = load(MINIMAL, &[]).unwrap();
    assert_eq!(plain.kafka.auth, KafkaAuth::None);
    assert_eq!(
        crate::source::consumer_config(&plain.kafka).get("sasl.mechanisms"),
        None
    );
}
