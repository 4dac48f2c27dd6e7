//! What of the configuration may be printed: secret Kafka properties never are.

use std::collections::BTreeMap;

use super::KafkaSettings;

/// Whether a Kafka property holds a secret (passwords, keys, tokens, JAAS
/// and OAUTHBEARER configs, and SASL usernames, which are API keys on some
/// clouds): its value is never printed.
pub fn is_secret(key: &str) -> bool {
    const MARKS: &[&str] = &[
        "password",
        "username",
        "secret",
        "token",
        "jaas",
        "credential",
        "private",
        ".key.pem",
        "oauthbearer.config",
        "ssl.key",
        "keystore",
        "truststore",
    ];
    let key = key.to_ascii_lowercase();
    MARKS.iter().any(|m| key.contains(m))
}

/// A property's value as it may be shown: `<redacted>` for secrets.
pub(super) fn shown<'a>(key: &str, value: &'a str) -> &'a str {
    if is_secret(key) {
        "<redacted>"
    } else {
        value
    }
}

/// The properties with every secret value replaced by `<redacted>`.
pub fn redacted(props: &BTreeMap<String, String>) -> BTreeMap<&str, &str> {
    props
        .iter()
        .map(|(k, v)| (k.as_str(), shown(k, v)))
        .collect()
}

/// Secret values never appear in output: `Debug` shows them redacted.
impl std::fmt::Debug for KafkaSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaSettings")
            .field("brokers", &self.brokers)
            .field("group_id", &self.group_id)
            .field("dead_letter_topic", &self.dead_letter_topic)
            .field("commit_interval", &self.commit_interval)
            .field("metadata_timeout", &self.metadata_timeout)
            .field("properties", &redacted(&self.properties))
            .field("auth", &self.auth)
            .field("aws_region", &self.aws_region)
            .finish()
    }
}
