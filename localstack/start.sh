#!/usr/bin/env bash
# Start LocalStack (DynamoDB only, in memory) on 127.0.0.1:4566 unless it runs;
# wait until its init scripts (tables of config/local.toml) are done.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/common.sh"
"$here/install.sh"

url=http://127.0.0.1:4566
if curl -fsS "$url/_localstack/init/ready" 2>/dev/null | grep -q '"completed": *true'; then
  log "LocalStack already running at $url"
  exit 0
fi
root="$INGEST_CACHE/localstack-root"
mkdir -p "$root/etc/localstack/init/ready.d"
cp "$here"/init/ready.d/* "$root/etc/localstack/init/ready.d/"
log "starting LocalStack at $url (log: $INGEST_RUN/localstack.log)"
(
  cd "$INGEST_RUN"
  FILESYSTEM_ROOT="$root" OVERRIDE_IN_DOCKER=0 GATEWAY_LISTEN=127.0.0.1:4566 SERVICES=dynamodb \
  DYNAMODB_IN_MEMORY=1 DNS_ADDRESS=0 SKIP_SSL_CERT_DOWNLOAD=1 DISABLE_EVENTS=1 \
  AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_DEFAULT_REGION=us-east-1 \
  nohup "$INGEST_CACHE/localstack-venv/bin/python" -m localstack.runtime.main \
    > "$INGEST_RUN/localstack.log" 2>&1 &
  echo $! > "$INGEST_RUN/localstack.pid"
)
deadline=$((SECONDS + 120))
until curl -fsS "$url/_localstack/init/ready" 2>/dev/null | grep -q '"completed": *true'; do
  if [ "$SECONDS" -ge "$deadline" ] || ! kill -0 "$(cat "$INGEST_RUN/localstack.pid")" 2>/dev/null; then
    log "LocalStack did not become ready; last log lines:"
    tail -n 30 "$INGEST_RUN/localstack.log" >&2
    exit 1
  fi
  sleep 0.5
done
log "LocalStack ready at $url"
