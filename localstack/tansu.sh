#!/usr/bin/env bash
# Start tansu (Kafka protocol, SQLite storage, durable) on 127.0.0.1:9092 unless
# it runs. Builds it once into the cache (install-tansu.sh). Data lives in
# $INGEST_RUN/tansu (survives restarts of the broker; `make clean-stack` wipes it,
# and `make test` starts it fresh).
#
# TANSU_NAME and TANSU_PORT start another instance beside it (data, log and pid
# file named after it); TANSU_FRESH=1 wipes that instance's data first (a
# benchmark's broker, whose SQLite file has not grown with every test run).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/common.sh"
"$here/install-tansu.sh"
bin="$INGEST_CACHE/tansu-0.6.0/bin/tansu"
name="${TANSU_NAME:-tansu}"
port="${TANSU_PORT:-9092}"
if [ "${TANSU_FRESH:-0}" = 1 ] && [ -f "$INGEST_RUN/$name.pid" ]; then
  # A fresh instance: stop the one left running (its data goes below).
  pid=$(cat "$INGEST_RUN/$name.pid")
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 50); do wait_port "$port" 0 || break; sleep 0.1; done
  if wait_port "$port" 0; then
    kill -9 "$pid" 2>/dev/null || true
    sleep 0.5
  fi
  if wait_port "$port" 0; then
    log "127.0.0.1:$port still listens after stopping $name (pid $pid): a fresh broker cannot start"
    exit 1
  fi
  rm -f "$INGEST_RUN/$name.pid"
fi
if wait_port "$port" 0; then
  log "a broker already listens on 127.0.0.1:$port"
  exit 0
fi
if [ "${TANSU_FRESH:-0}" = 1 ]; then rm -rf "${INGEST_RUN:?}/$name"; fi
mkdir -p "$INGEST_RUN/$name"
(
  cd "$INGEST_RUN/$name"
  nohup "$bin" broker --listener-url "tcp://127.0.0.1:$port" --advertised-listener-url "tcp://127.0.0.1:$port" \
    --storage-engine sqlite://tansu.db > "$INGEST_RUN/$name.log" 2>&1 &
  echo $! > "$INGEST_RUN/$name.pid"
)
if ! wait_port "$port" 20; then
  log "$name did not start; last log lines:"
  tail -n 30 "$INGEST_RUN/$name.log" >&2
  exit 1
fi
log "$name ready at 127.0.0.1:$port"
