#!/usr/bin/env bash
# Start tansu (Kafka protocol, SQLite storage, durable) on 127.0.0.1:9092 unless
# it runs. Builds it once into the cache (install-tansu.sh). Data lives in
# $INGEST_RUN/tansu (survives restarts of the broker; `make clean-stack` wipes it).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/common.sh"
"$here/install-tansu.sh"
bin="$INGEST_CACHE/tansu-0.6.0/bin/tansu"
if wait_port 9092 0; then
  log "a broker already listens on 127.0.0.1:9092"
  exit 0
fi
mkdir -p "$INGEST_RUN/tansu"
(
  cd "$INGEST_RUN/tansu"
  nohup "$bin" broker --listener-url tcp://127.0.0.1:9092 --advertised-listener-url tcp://127.0.0.1:9092 \
    --storage-engine sqlite://tansu.db > "$INGEST_RUN/tansu.log" 2>&1 &
  echo $! > "$INGEST_RUN/tansu.pid"
)
if ! wait_port 9092 20; then
  log "tansu did not start; last log lines:"
  tail -n 30 "$INGEST_RUN/tansu.log" >&2
  exit 1
fi
log "tansu ready at 127.0.0.1:9092"
