# Shared settings for the local-stack scripts (sourced, not run).
# Everything installed is cached outside the repository, under INGEST_CACHE.
INGEST_CACHE="${INGEST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ingest}"
# Runtime state (data directories, pid files, logs) of the local stack.
INGEST_RUN="${INGEST_RUN:-${TMPDIR:-/tmp}/ingest-stack}"
mkdir -p "$INGEST_CACHE" "$INGEST_RUN"

log() { printf '[%s] %s\n' "$(basename "$0")" "$*" >&2; }

# wait_http URL SECONDS: poll until URL answers 2xx or the deadline passes.
wait_http() {
  local url=$1 deadline=$((SECONDS + $2))
  until curl -fsS -o /dev/null "$url" 2>/dev/null; do
    if [ "$SECONDS" -ge "$deadline" ]; then return 1; fi
    sleep 0.2
  done
}

# wait_port PORT SECONDS: poll until 127.0.0.1:PORT accepts a connection.
wait_port() {
  local port=$1 deadline=$((SECONDS + $2))
  until (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do
    if [ "$SECONDS" -ge "$deadline" ]; then return 1; fi
    sleep 0.1
  done
}
