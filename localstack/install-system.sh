#!/usr/bin/env bash
# System packages the build (and, with the argument `test`, the tests) need,
# installed once from Debian's repositories when missing (idempotent; a no-op
# when all are present):
#   libssl-dev, pkg-config  librdkafka is built with TLS against the system OpenSSL
#   stunnel4                (test) the Kafka TLS tests put it in front of a broker
#   openssl                 (test) the TLS tests make their CA and certificates with it
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/common.sh"
missing=()
pkg-config --exists openssl 2>/dev/null || missing+=(libssl-dev)
command -v pkg-config >/dev/null || missing+=(pkg-config)
if [ "${1:-build}" = test ]; then
  command -v stunnel4 >/dev/null || command -v stunnel >/dev/null || missing+=(stunnel4)
  command -v openssl >/dev/null || missing+=(openssl)
fi
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then sudo="sudo -n"; else
    # The build needs only libssl-dev and pkg-config; the TLS tests say
    # themselves what they miss.
    case " ${missing[*]} " in
      *" libssl-dev "*|*" pkg-config "*)
        log "missing ${missing[*]} and not root (no sudo): install them with apt-get"
        exit 1 ;;
      *)
        log "missing ${missing[*]} (the TLS tests need them); not root, not installed"
        exit 0 ;;
    esac
  fi
fi
log "installing ${missing[*]} (apt-get)"
export DEBIAN_FRONTEND=noninteractive
if ! $sudo apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null 2>&1; then
  $sudo apt-get update >/dev/null
  $sudo apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null
fi
log "installed ${missing[*]}"
