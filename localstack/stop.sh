#!/usr/bin/env bash
# Stop what start.sh / tansu.sh / the dev broker started (if running).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/common.sh"
for name in localstack tansu tansu-bench dev-broker; do
  pidfile="$INGEST_RUN/$name.pid"
  if [ -f "$pidfile" ]; then
    pid=$(cat "$pidfile")
    if kill "$pid" 2>/dev/null; then
      for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -9 "$pid" 2>/dev/null || true
      log "stopped $name ($pid)"
    fi
    rm -f "$pidfile"
  fi
done
