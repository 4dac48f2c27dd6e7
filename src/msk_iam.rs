//! AWS MSK IAM authentication's token: what a client sends as its
//! SASL/OAUTHBEARER token to an MSK cluster with IAM access control.
//!
//! The token is a SigV4-presigned URL of the `kafka-cluster:Connect` action,
//! built as AWS's own signers build it (aws-msk-iam-sasl-signer-python and
//! -go): `GET https://kafka.<region>.amazonaws.com/?Action=kafka-cluster%3AConnect`,
//! signed in the query string for the service `kafka-cluster` (only the
//! `host` header, the empty payload's hash, `X-Amz-Expires=900`, the session
//! token signed in when there is one), then a `User-Agent` parameter
//! appended after signing, and the whole URL base64url-encoded without
//! padding. It expires 900 s after its signing time. Pure: credentials and
//! time are passed in (the caller gets them from aws-config's chain and
//! refreshes the token before it expires).

use std::borrow::Cow;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_credential_types::Credentials;
use aws_sigv4::http_request::{
    sign, SignableBody, SignableRequest, SignatureLocation, SigningSettings,
};
use aws_sigv4::sign::v4;
use base64::Engine;

/// How long a token is valid after its signing time (AWS's signers: 900 s).
pub const TOKEN_LIFETIME: Duration = Duration::from_secs(900);

/// The longest wait for credentials at a token refresh.
const CREDENTIALS_TIMEOUT: Duration = Duration::from_secs(10);

/// The `User-Agent` parameter the token carries.
pub const USER_AGENT: &str = concat!("ingest/", env!("CARGO_PKG_VERSION"));

#[derive(Debug, thiserror::Error)]
pub enum MskIamError {
    #[error("MSK IAM token for region {region}: cannot sign: {cause}")]
    Sign { region: String, cause: String },
    #[error("MSK IAM: no AWS region (set kafka.aws_region or AWS_REGION)")]
    NoRegion,
    #[error("MSK IAM token: no AWS credentials: {0}")]
    NoCredentials(String),
}

/// A signed token and when it expires (milliseconds since the Unix epoch,
/// as librdkafka wants it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Token {
    pub value: String,
    pub expires_ms: i64,
}

/// The token for an MSK cluster in `region`, signed with `credentials` at
/// `now`.
pub fn token(
    credentials: &Credentials,
    region: &str,
    now: SystemTime,
) -> Result<Token, MskIamError> {
    let err = |cause: &dyn std::fmt::Display| MskIamError::Sign {
        region: region.to_string(),
        cause: cause.to_string(),
    };
    let host = format!("kafka.{region}.amazonaws.com");
    let url = format!("https://{host}/?Action=kafka-cluster%3AConnect");
    let mut settings = SigningSettings::default();
    settings.signature_location = SignatureLocation::QueryParams;
    settings.expires_in = Some(TOKEN_LIFETIME);
    let identity = credentials.clone().into();
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(region)
        .name("kafka-cluster")
        .time(now)
        .settings(settings)
        .build()
        .map_err(|e| err(&e))?
        .into();
    let request = SignableRequest::new(
        "GET",
        &url,
        std::iter::once(("host", host.as_str())),
        SignableBody::Bytes(&[]),
    )
    .map_err(|e| err(&e))?;
    let (instructions, _) = sign(request, &params).map_err(|e| err(&e))?.into_parts();
    // In the order AWS's signers write them: the signature last.
    let mut params: Vec<_> = instructions.params().to_vec();
    params.sort_by_key(|(name, _)| *name == "X-Amz-Signature");
    let mut signed = url;
    for (name, value) in &params {
        push_param(&mut signed, name, value);
    }
    push_param(&mut signed, "User-Agent", &Cow::Borrowed(USER_AGENT));
    let value = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(signed);
    let signed_at = now.duration_since(UNIX_EPOCH).unwrap_or_default();
    Ok(Token {
        value,
        expires_ms: (signed_at + TOKEN_LIFETIME).as_millis() as i64,
    })
}

/// Appends `&name=value`, the value percent-encoded as SigV4 encodes query
/// values (everything but `A-Z a-z 0-9 - _ . ~`).
fn push_param(url: &mut String, name: &str, value: &str) {
    url.push('&');
    url.push_str(name);
    url.push('=');
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            url.push(b as char);
        } else {
            url.push_str(&format!("%{b:02X}"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(t: &Token) -> String {
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(&t.value)
            .unwrap();
        String::from_utf8(bytes).unwrap()
    }

    #[test]
    fn a_token_is_a_presigned_connect_url_for_fifteen_minutes() {
        let creds = Credentials::new(
            "AKIDEXAMPLE",
            "secret/key+x",
            Some("tok/en".into()),
            None,
            "test",
        );
        let at = UNIX_EPOCH + Duration::from_secs(1_795_478_400); // 2026-11-24T00:00:00Z
        let t = token(&creds, "eu-west-1", at).unwrap();
        assert!(!t.value.contains('=') && !t.value.contains('+') && !t.value.contains('/'));
        assert_eq!(t.expires_ms, (1_795_478_400 + 900) * 1000);
        let url = decode(&t);
        assert!(
            url.starts_with(
                "https://kafka.eu-west-1.amazonaws.com/?Action=kafka-cluster%3AConnect&"
            ),
            "{url}"
        );
        for part in [
            "X-Amz-Algorithm=AWS4-HMAC-SHA256",
            "X-Amz-Credential=AKIDEXAMPLE%2F20261124%2Feu-west-1%2Fkafka-cluster%2Faws4_request",
            "X-Amz-Date=20261124T000000Z",
            "X-Amz-Expires=900",
            "X-Amz-SignedHeaders=host",
            "X-Amz-Security-Token=tok%2Fen",
            "X-Amz-Signature=",
        ] {
            assert!(url.contains(part), "{part} missing from {url}");
        }
        assert!(
            url.ends_with(&format!(
                "&User-Agent=ingest%2F{}",
                env!("CARGO_PKG_VERSION")
            )),
            "{url}"
        );
        assert!(
            !url.contains("secret"),
            "the secret key is never in the token"
        );
        // Another moment signs differently.
        let later = token(&creds, "eu-west-1", at + Duration::from_secs(1)).unwrap();
        assert_ne!(later.value, t.value);
    }
}

/// Sets what `kafka.auth = "aws-msk-iam"` implies on a client config:
/// OAUTHBEARER, over SASL_SSL unless the properties chose SASL_PLAINTEXT.
pub fn configure(cfg: &mut rdkafka::ClientConfig, kafka: &crate::config::KafkaSettings) {
    if kafka.auth != crate::config::KafkaAuth::AwsMskIam {
        return;
    }
    if !kafka.properties.contains_key("security.protocol") {
        cfg.set("security.protocol", "SASL_SSL");
    }
    cfg.set("sasl.mechanisms", "OAUTHBEARER");
}

/// Signs tokens for librdkafka's OAUTHBEARER refreshes: credentials from
/// aws-config's chain (environment, profile, web identity, ECS or EC2 role),
/// fetched at each refresh (librdkafka asks at 80% of a token's life).
#[derive(Debug)]
pub struct MskIamTokens {
    region: String,
    credentials: aws_credential_types::provider::SharedCredentialsProvider,
    runtime: tokio::runtime::Handle,
}

impl MskIamTokens {
    /// The signer for `region` (None: the AWS region chain), on the current
    /// runtime.
    pub async fn load(region: Option<String>) -> Result<Self, MskIamError> {
        let mut loader = aws_config::defaults(aws_config::BehaviorVersion::latest());
        if let Some(r) = region.filter(|r| !r.trim().is_empty()) {
            loader = loader.region(aws_config::Region::new(r));
        }
        let conf = loader.load().await;
        let region = conf
            .region()
            .map(|r| r.to_string())
            .filter(|r| !r.trim().is_empty())
            .ok_or(MskIamError::NoRegion)?;
        let credentials = conf
            .credentials_provider()
            .ok_or_else(|| MskIamError::NoCredentials("no credentials provider".into()))?;
        Ok(Self {
            region,
            credentials,
            runtime: tokio::runtime::Handle::current(),
        })
    }

    /// A fresh token, as librdkafka takes it. Blocks: librdkafka calls it
    /// from the thread that polls the client; the credentials are fetched on
    /// the worker's runtime (from a runtime worker, through
    /// `block_in_place`, so no worker is held).
    pub fn oauth_token(&self) -> Result<rdkafka::client::OAuthToken, MskIamError> {
        use aws_credential_types::provider::ProvideCredentials;
        use tokio::runtime::{Handle, RuntimeFlavor};
        // Bounded: a credentials source that hangs (an unreachable metadata
        // endpoint) must not hold the thread that polls the client.
        // (The timer is made inside the runtime: built outside, it panics.)
        let fetch = || {
            self.runtime.block_on(async {
                tokio::time::timeout(CREDENTIALS_TIMEOUT, self.credentials.provide_credentials())
                    .await
            })
        };
        let fetched = match Handle::try_current().map(|h| h.runtime_flavor()) {
            // librdkafka's own threads, the source's blocking thread.
            Err(_) => fetch(),
            // A runtime worker (say, a producer flushing as it is dropped).
            Ok(RuntimeFlavor::MultiThread) => tokio::task::block_in_place(fetch),
            Ok(_) => {
                return Err(MskIamError::NoCredentials(
                    "asked on a single-threaded runtime, which cannot wait for them".into(),
                ))
            }
        }
        .map_err(|_| MskIamError::NoCredentials(format!("none within {CREDENTIALS_TIMEOUT:?}")))?
        .map_err(|e| {
            MskIamError::NoCredentials(
                aws_smithy_types::error::display::DisplayErrorContext(e).to_string(),
            )
        })?;
        let t = token(&fetched, &self.region, SystemTime::now())?;
        tracing::debug!(region = %self.region, expires_ms = t.expires_ms, "MSK IAM token signed");
        Ok(rdkafka::client::OAuthToken {
            token: t.value,
            principal_name: "ingest".into(),
            lifetime_ms: t.expires_ms,
        })
    }
}

/// librdkafka's answer for an OAUTHBEARER refresh: an MSK IAM token, or why
/// there is none.
pub fn refresh(
    tokens: Option<&MskIamTokens>,
) -> Result<rdkafka::client::OAuthToken, Box<dyn std::error::Error>> {
    match tokens {
        Some(t) => Ok(t.oauth_token()?),
        None => Err("OAUTHBEARER tokens are signed only with kafka.auth = \"aws-msk-iam\"".into()),
    }
}

/// A client context answering OAUTHBEARER refreshes with MSK IAM tokens (the
/// dead-letter producer's and the backlog reader's).
#[derive(Debug, Clone, Default)]
pub struct AuthContext {
    pub tokens: Option<std::sync::Arc<MskIamTokens>>,
}

impl rdkafka::ClientContext for AuthContext {
    const ENABLE_REFRESH_OAUTH_TOKEN: bool = true;

    fn generate_oauth_token(
        &self,
        _config: Option<&str>,
    ) -> Result<rdkafka::client::OAuthToken, Box<dyn std::error::Error>> {
        refresh(self.tokens.as_deref())
    }
}

impl rdkafka::consumer::ConsumerContext for AuthContext {}
