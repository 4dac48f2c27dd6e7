#!/usr/bin/env bash
# Build tansu (a Kafka-protocol broker, SQLite storage) once and cache the binary
# outside the repository. Idempotent: skips the ~16 min build when the binary exists.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/common.sh"
TANSU_VERSION=0.6.0
root="$INGEST_CACHE/tansu-$TANSU_VERSION"
if [ -x "$root/bin/tansu" ]; then
  log "tansu $TANSU_VERSION cached at $root/bin/tansu"
  exit 0
fi
log "building tansu $TANSU_VERSION (about 16 minutes on 2 cores)"
tmp="$root.partial"
rm -rf "$tmp"
CARGO_TARGET_DIR="$INGEST_CACHE/tansu-target" \
  cargo install tansu --version "$TANSU_VERSION" --locked --features libsql --root "$tmp"
rm -rf "$INGEST_CACHE/tansu-target"
mv "$tmp" "$root"
log "tansu installed at $root/bin/tansu"
