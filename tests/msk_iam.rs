//! The MSK IAM token against AWS's own signing: botocore's `SigV4QueryAuth`
//! (what aws-msk-iam-sasl-signer-python uses), run from the LocalStack venv
//! that `make test` installs, signs the same request with the same
//! credentials at the same moment; the URLs must match up to the
//! `User-Agent` each signer appends after signing.

mod common;

use std::process::Command;
use std::time::{Duration, UNIX_EPOCH};

use aws_credential_types::Credentials;
use base64::Engine;
use common::*;

fn venv_python() -> std::path::PathBuf {
    let py = cache_dir().join("localstack-venv/bin/python");
    assert!(
        py.exists(),
        "no LocalStack venv at {}: run `make test`",
        py.display()
    );
    py
}

/// botocore's presigned Connect URL (the Python signer's construction).
fn botocore_url(akid: &str, secret: &str, token: Option<&str>, region: &str, epoch: u64) -> String {
    let script = r#"
import sys, datetime
import botocore.auth as auth
from botocore.auth import SigV4QueryAuth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
akid, secret, token, region, epoch = sys.argv[1:6]
at = datetime.datetime.fromtimestamp(int(epoch), datetime.timezone.utc)
auth.get_current_datetime = lambda *a, **k: at
creds = Credentials(akid, secret, token or None)
req = AWSRequest(method="GET", url=f"https://kafka.{region}.amazonaws.com/",
                 params={"Action": "kafka-cluster:Connect"})
SigV4QueryAuth(creds, "kafka-cluster", region, expires=900).add_auth(req)
print(req.url)
"#;
    let out = run_ok(
        Command::new(venv_python()).args([
            "-c",
            script,
            akid,
            secret,
            token.unwrap_or(""),
            region,
            &epoch.to_string(),
        ]),
        "botocore in the venv",
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

fn ours(akid: &str, secret: &str, token: Option<&str>, region: &str, epoch: u64) -> String {
    let creds = Credentials::new(akid, secret, token.map(str::to_string), None, "test");
    let t =
        ingest::msk_iam::token(&creds, region, UNIX_EPOCH + Duration::from_secs(epoch)).unwrap();
    let url = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(t.value)
        .unwrap();
    let url = String::from_utf8(url).unwrap();
    let (signed, agent) = url.rsplit_once("&User-Agent=").expect("a User-Agent");
    assert!(agent.starts_with("ingest%2F"), "{agent}");
    signed.to_string()
}

#[test]
fn the_token_is_signed_as_botocore_signs_it() {
    let secret = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";
    for (token, region, epoch) in [
        (
            Some("FwoGZXIvYXdzEH//session+token=="),
            "us-east-1",
            1_795_478_400u64,
        ),
        (None, "eu-central-1", 1_800_000_123),
        (Some("plain"), "ap-southeast-2", 1_700_000_000),
    ] {
        let theirs = botocore_url("AKIDEXAMPLE", secret, token, region, epoch);
        let mine = ours("AKIDEXAMPLE", secret, token, region, epoch);
        assert_eq!(mine, theirs, "region {region}, session token {token:?}");
    }
}
