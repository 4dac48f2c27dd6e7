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
//! padding. It expires 900 s after its signing time. `token` is pure:
//! credentials and time are passed in. `MskIamTokens` signs one every
//! 5 minutes on the worker's runtime, with credentials from aws-config's
//! chain, and hands the newest to each client's OAUTHBEARER refresh without
//! waiting.

use std::borrow::Cow;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_credential_types::provider::SharedCredentialsProvider;
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
    #[error("no MSK IAM token to offer: {0}")]
    Stale(String),
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

    /// Credentials that count the times asked, fail while `failing`, and
    /// expire at `expires` if set.
    #[derive(Debug, Default, Clone)]
    struct Counting {
        asked: Arc<std::sync::atomic::AtomicUsize>,
        failing: Arc<std::sync::atomic::AtomicBool>,
        expires: Option<SystemTime>,
    }

    impl aws_credential_types::provider::ProvideCredentials for Counting {
        fn provide_credentials<'a>(
            &'a self,
        ) -> aws_credential_types::provider::future::ProvideCredentials<'a>
        where
            Self: 'a,
        {
            use std::sync::atomic::Ordering::SeqCst;
            self.asked.fetch_add(1, SeqCst);
            aws_credential_types::provider::future::ProvideCredentials::ready(
                if self.failing.load(SeqCst) {
                    Err(
                        aws_credential_types::provider::error::CredentialsError::not_loaded(
                            "IMDS down",
                        ),
                    )
                } else {
                    Ok(Credentials::new(
                        "AKIDEXAMPLE",
                        "secret",
                        None,
                        self.expires,
                        "test",
                    ))
                },
            )
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_signer_signs_every_five_minutes_retries_every_ten_seconds_and_stops_when_dropped()
    {
        use std::sync::atomic::Ordering::SeqCst;
        let creds = Counting::default();
        let provider = SharedCredentialsProvider::new(creds.clone());
        let (wall, start) = (SystemTime::now(), tokio::time::Instant::now());
        let clock: Clock = Arc::new(move || wall + start.elapsed());
        let asked = || creds.asked.load(SeqCst);
        let signer = MskIamTokens::start_with_clock("eu-west-1".into(), provider, clock)
            .await
            .unwrap();
        assert_eq!(asked(), 1, "the first token is signed at start");
        let first = signer.oauth_token("test").unwrap();
        tokio::time::sleep(Duration::from_secs(299)).await;
        assert_eq!(asked(), 1);
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(asked(), 2, "again after five minutes");
        assert!(signer.oauth_token("test").unwrap().lifetime_ms > first.lifetime_ms);
        // The credentials fail: asked every 10 s, the last token offered
        // while it has 30 s left, then refused by name.
        creds.failing.store(true, SeqCst);
        tokio::time::sleep(Duration::from_secs(300)).await;
        assert_eq!(asked(), 3);
        tokio::time::sleep(Duration::from_secs(100)).await;
        assert_eq!(asked(), 13, "every 10 s while they fail");
        assert!(
            signer.oauth_token("test").is_ok(),
            "the last token still has 500 s"
        );
        tokio::time::sleep(Duration::from_secs(480)).await;
        let refused = signer
            .oauth_token("test")
            .err()
            .expect("refused")
            .to_string();
        assert!(
            refused.contains("no MSK IAM token to offer") && refused.contains("IMDS down"),
            "{refused}"
        );
        creds.failing.store(false, SeqCst);
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert!(
            signer.oauth_token("test").is_ok(),
            "signed again once they are back"
        );
        // Dropped: the task stops asking.
        drop(signer);
        let before = asked();
        tokio::time::sleep(Duration::from_secs(3_600)).await;
        assert_eq!(asked(), before, "no signing outlives the signer");
    }

    #[tokio::test(start_paused = true)]
    async fn a_token_signed_with_expiring_credentials_expires_with_them_and_is_signed_again_a_minute_before(
    ) {
        use std::sync::atomic::Ordering::SeqCst;
        let (wall, start) = (SystemTime::now(), tokio::time::Instant::now());
        let expires = wall + Duration::from_secs(120);
        let creds = Counting {
            expires: Some(expires),
            ..Counting::default()
        };
        let provider = SharedCredentialsProvider::new(creds.clone());
        let clock: Clock = Arc::new(move || wall + start.elapsed());
        let signer = MskIamTokens::start_with_clock("eu-west-1".into(), provider, clock)
            .await
            .unwrap();
        let expires_ms = expires.duration_since(UNIX_EPOCH).unwrap().as_millis() as i64;
        assert_eq!(
            signer.oauth_token("test").unwrap().lifetime_ms,
            expires_ms,
            "not the token's own 900 s"
        );
        tokio::time::sleep(Duration::from_secs(59)).await;
        assert_eq!(creds.asked.load(SeqCst), 1);
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(
            creds.asked.load(SeqCst),
            2,
            "signed again 60 s before the credentials expire"
        );
        // The chain hands out the same credentials again: signed every
        // 10 s, not in a busy loop.
        tokio::time::sleep(Duration::from_secs(14)).await;
        assert_eq!(creds.asked.load(SeqCst), 3);
    }

    #[test]
    fn a_token_expires_no_later_than_its_credentials_and_is_resigned_before() {
        let t0 = UNIX_EPOCH + Duration::from_secs(1_795_478_400);
        let mut slot = Slot::default();
        // Signed with credentials that expire 120 s later.
        let t = Token {
            value: "x".into(),
            expires_ms: (1_795_478_400 + 120) * 1000,
        };
        slot.signed(t.clone(), t0);
        assert_eq!(
            slot.next_signing(t0),
            Duration::from_secs(60),
            "a minute before it expires, not after five"
        );
        // Signed again 65 s later with the same credentials: not at once
        // and again, but after RETRY_AFTER.
        let later = t0 + Duration::from_secs(65);
        slot.signed(t, later);
        assert_eq!(slot.next_signing(later), RETRY_AFTER);
    }

    #[test]
    fn the_slot_resigns_after_five_minutes_retries_failures_and_serves_only_live_tokens() {
        let creds = Credentials::new("AKIDEXAMPLE", "secret", None, None, "test");
        let t0 = UNIX_EPOCH + Duration::from_secs(1_795_478_400);
        let s = |n: u64| t0 + Duration::from_secs(n);
        let mut slot = Slot::default();
        assert_eq!(
            slot.next_signing(t0),
            Duration::ZERO,
            "nothing yet: sign now"
        );
        assert!(slot.current(t0).unwrap_err().contains("none signed yet"));
        slot.signed(token(&creds, "eu-west-1", t0).unwrap(), t0);
        assert_eq!(slot.next_signing(s(100)), Duration::from_secs(200));
        assert_eq!(
            slot.next_signing(s(400)),
            Duration::ZERO,
            "overdue: at once"
        );
        // A failed signing keeps the last token while it has 30 s left.
        slot.failed("no credentials from IMDS".into(), s(300));
        assert_eq!(slot.next_signing(s(300)), RETRY_AFTER);
        assert!(slot.current(s(869)).is_ok());
        let stale = slot.current(s(871)).unwrap_err();
        assert!(
            stale.contains("expires within 30 s") && stale.contains("no credentials from IMDS"),
            "{stale}"
        );
        // A later success clears the failure.
        slot.signed(token(&creds, "eu-west-1", s(880)).unwrap(), s(880));
        assert_eq!(
            slot.current(s(881)).unwrap().expires_ms,
            (1_795_478_400 + 880 + 900) * 1000
        );
        assert_eq!(slot.next_signing(s(880)), RESIGN_AFTER);
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

/// Sign a new token once the current one is this old (a third of its life):
/// whatever librdkafka is handed still has at least 600 s to run.
pub const RESIGN_AFTER: Duration = Duration::from_secs(300);

/// After a failed signing (no credentials), try again this soon.
pub const RETRY_AFTER: Duration = Duration::from_secs(10);

/// A token with less than this left is not handed out.
pub const MIN_LEFT: Duration = Duration::from_secs(30);

/// A token expiring sooner than `RESIGN_AFTER` (signed with temporary
/// credentials that expire) is signed again this long before it expires.
pub const RESIGN_BEFORE_EXPIRY: Duration = Duration::from_secs(60);

/// The newest token and the newest failure, each with its time, and when to
/// sign next. Pure: time is passed in.
#[derive(Debug, Default)]
pub struct Slot {
    last: Option<(Token, SystemTime)>,
    failure: Option<(String, SystemTime)>,
}

impl Slot {
    /// A token signed at `at`.
    pub fn signed(&mut self, token: Token, at: SystemTime) {
        self.last = Some((token, at));
        self.failure = None;
    }

    /// A signing that failed at `at` (the last token is kept while valid).
    pub fn failed(&mut self, why: String, at: SystemTime) {
        self.failure = Some((why, at));
    }

    /// How long from `now` until the next signing: `RESIGN_AFTER` after
    /// the last, or sooner, `RESIGN_BEFORE_EXPIRY` before the token expires
    /// (one signed with temporary credentials expires with them), but not
    /// within `RETRY_AFTER` of the last; `RETRY_AFTER` after a failure.
    pub fn next_signing(&self, now: SystemTime) -> Duration {
        let due = match (&self.failure, &self.last) {
            (Some((_, failed_at)), _) => *failed_at + RETRY_AFTER,
            (None, Some((t, signed_at))) => {
                let expires = UNIX_EPOCH + Duration::from_millis(t.expires_ms.max(0) as u64);
                // Never sooner than RETRY_AFTER: credentials handed out
                // again and again within a minute of their expiry would
                // otherwise be signed in a busy loop.
                (*signed_at + RESIGN_AFTER)
                    .min(expires - RESIGN_BEFORE_EXPIRY)
                    .max(*signed_at + RETRY_AFTER)
            }
            (None, None) => now,
        };
        due.duration_since(now).unwrap_or_default()
    }

    /// The token to hand librdkafka at `now`: the newest, while it has at
    /// least `MIN_LEFT` to run; else why there is none.
    pub fn current(&self, now: SystemTime) -> Result<Token, String> {
        let now_ms = now
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis() as i64;
        let why = match &self.last {
            Some((t, _)) if t.expires_ms - now_ms >= MIN_LEFT.as_millis() as i64 => {
                return Ok(t.clone())
            }
            Some(_) => format!(
                "the last one expires within {} s and no new one could be signed",
                MIN_LEFT.as_secs()
            ),
            None => "none signed yet".to_string(),
        };
        Err(match &self.failure {
            Some((f, _)) => format!("{why}: {f}"),
            None => why,
        })
    }
}

/// The signing task's wall clock.
pub type Clock = Arc<dyn Fn() -> SystemTime + Send + Sync>;

/// Signs tokens for librdkafka's OAUTHBEARER refreshes. A task on the
/// worker's runtime fetches credentials from aws-config's chain
/// (environment, profile, web identity, ECS or EC2 role) and signs a token
/// every `RESIGN_AFTER` (every `RETRY_AFTER` while that fails) into a shared
/// slot; librdkafka's refresh, on the thread that polls its client, only
/// reads the slot, so a slow credentials source never holds a poll. The task
/// is aborted when the signer is dropped.
pub struct MskIamTokens {
    region: String,
    slot: Arc<Mutex<Slot>>,
    task: tokio::task::JoinHandle<()>,
    clock: Clock,
}

impl std::fmt::Debug for MskIamTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MskIamTokens")
            .field("region", &self.region)
            .finish_non_exhaustive()
    }
}

impl Drop for MskIamTokens {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Credentials from `provider` within `CREDENTIALS_TIMEOUT`, signed into a
/// token for `region` at `now`.
async fn sign_fresh(
    provider: &SharedCredentialsProvider,
    region: &str,
    now: &(dyn Fn() -> SystemTime + Send + Sync),
) -> Result<Token, MskIamError> {
    use aws_credential_types::provider::ProvideCredentials;
    let fetched = tokio::time::timeout(CREDENTIALS_TIMEOUT, provider.provide_credentials())
        .await
        .map_err(|_| MskIamError::NoCredentials(format!("none within {CREDENTIALS_TIMEOUT:?}")))?
        .map_err(|e| {
            MskIamError::NoCredentials(
                aws_smithy_types::error::display::DisplayErrorContext(e).to_string(),
            )
        })?;
    let mut t = token(&fetched, region, now())?;
    if let Some(until) = fetched.expiry() {
        let until_ms = until
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis() as i64;
        t.expires_ms = t.expires_ms.min(until_ms);
    }
    tracing::debug!(region, expires_ms = t.expires_ms, "MSK IAM token signed");
    Ok(t)
}

impl MskIamTokens {
    /// The signer for `region` (None: the AWS region chain), with its first
    /// token signed (so missing credentials stop the worker at start, named),
    /// and its signing task spawned on the current runtime.
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
        let provider = conf
            .credentials_provider()
            .ok_or_else(|| MskIamError::NoCredentials("no credentials provider".into()))?;
        Self::start(region, provider).await
    }

    /// The signer for `region` with credentials from `provider`: its first
    /// token signed, its signing task spawned on the current runtime.
    pub async fn start(
        region: String,
        provider: SharedCredentialsProvider,
    ) -> Result<Self, MskIamError> {
        Self::start_with_clock(region, provider, Arc::new(SystemTime::now)).await
    }

    /// As `start`, with the signing task's clock passed in (tests run it on
    /// tokio's paused time).
    pub async fn start_with_clock(
        region: String,
        provider: SharedCredentialsProvider,
        clock: Clock,
    ) -> Result<Self, MskIamError> {
        let first = sign_fresh(&provider, &region, clock.as_ref()).await?;
        let mut slot = Slot::default();
        slot.signed(first, clock());
        let slot = Arc::new(Mutex::new(slot));
        let task = tokio::spawn(keep_signing(
            slot.clone(),
            provider,
            region.clone(),
            clock.clone(),
        ));
        Ok(Self {
            region,
            slot,
            task,
            clock,
        })
    }

    /// The current token, as librdkafka takes it. Never waits: it reads what
    /// the signing task left. `client` names the asking client in the log.
    pub fn oauth_token(&self, client: &str) -> Result<rdkafka::client::OAuthToken, MskIamError> {
        let t = self
            .slot
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .current((self.clock)())
            .map_err(MskIamError::Stale)?;
        tracing::debug!(region = %self.region, client, expires_ms = t.expires_ms, "MSK IAM token served");
        Ok(rdkafka::client::OAuthToken {
            token: t.value,
            principal_name: "ingest".into(),
            lifetime_ms: t.expires_ms,
        })
    }
}

/// Signs into `slot` when it says, until the signer is dropped (which
/// aborts this task).
async fn keep_signing(
    slot: Arc<Mutex<Slot>>,
    provider: SharedCredentialsProvider,
    region: String,
    clock: Clock,
) {
    let lock = || slot.lock().unwrap_or_else(|p| p.into_inner());
    loop {
        let wait = lock().next_signing(clock());
        if !wait.is_zero() {
            // At most RETRY_AFTER at a time, against the wall clock: a
            // process frozen or suspended meanwhile signs when it wakes.
            tokio::time::sleep(wait.min(RETRY_AFTER)).await;
            continue;
        }
        match sign_fresh(&provider, &region, clock.as_ref()).await {
            Ok(t) => lock().signed(t, clock()),
            Err(e) => {
                tracing::warn!(
                    region = %region,
                    error = %e,
                    min_left_s = MIN_LEFT.as_secs(),
                    "MSK IAM token not signed; the last one is offered while it has min_left_s left"
                );
                lock().failed(e.to_string(), clock());
            }
        }
    }
}

/// librdkafka's answer for an OAUTHBEARER refresh: an MSK IAM token, or why
/// there is none.
pub fn refresh(
    tokens: Option<&MskIamTokens>,
    client: &str,
) -> Result<rdkafka::client::OAuthToken, Box<dyn std::error::Error>> {
    match tokens {
        Some(t) => Ok(t.oauth_token(client)?),
        None => Err("OAUTHBEARER tokens are signed only with kafka.auth = \"aws-msk-iam\"".into()),
    }
}

/// A client context answering OAUTHBEARER refreshes with MSK IAM tokens (the
/// dead-letter producer's and the backlog reader's).
#[derive(Debug, Clone, Default)]
pub struct AuthContext {
    pub tokens: Option<std::sync::Arc<MskIamTokens>>,
    /// Which client asks ("dead letters", "backlog"), for the log.
    pub client: &'static str,
}

impl rdkafka::ClientContext for AuthContext {
    const ENABLE_REFRESH_OAUTH_TOKEN: bool = true;

    fn generate_oauth_token(
        &self,
        _config: Option<&str>,
    ) -> Result<rdkafka::client::OAuthToken, Box<dyn std::error::Error>> {
        refresh(self.tokens.as_deref(), self.client)
    }
}

impl rdkafka::consumer::ConsumerContext for AuthContext {}
