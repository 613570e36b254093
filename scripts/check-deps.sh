#!/usr/bin/env bash
# Proves the dependency direction of STYLE.md §1 and DESIGN.md invariant 6 from Cargo's own
# resolution: mint-policy stays pure (no async runtime, network, TLS or secret store) and mint-mcp
# can never reach a secret store, an HTTP client or the broker. Only normal dependencies on any
# target count (dev-dependencies never ship). Exits 1 naming the crate and each forbidden
# dependency found.
#
# Usage: scripts/check-deps.sh    (from anywhere; needs cargo and an up-to-date Cargo.lock)
set -euo pipefail

cd "$(dirname "$0")/.."

# Secret stores and the crates that reach them.
secret_stores=(keyring secrecy secret-service linux-keyutils dbus zbus)
# HTTP clients and servers, TLS, and the async runtime they run on.
network=(tokio hyper hyper-util hyper-rustls h2 reqwest ureq isahc curl axum tower-http
  rustls tokio-rustls native-tls openssl)

forbidden_for_policy=("${secret_stores[@]}" "${network[@]}" mint-broker mint-mcp)
# mint-mcp is a plain line loop over stdin: no runtime needed either.
forbidden_for_mcp=("${secret_stores[@]}" "${network[@]}" mint-broker)

failed=0

# check CRATE REQUIRED FORBIDDEN...: REQUIRED must appear in the tree (so an empty or broken
# `cargo tree` output can never pass), and no FORBIDDEN name may.
check() {
  local crate=$1 required=$2
  shift 2
  local names
  names=$(cargo tree --locked -q -p "$crate" -e normal --target all --prefix none --format '{p}' \
    | awk '{ print $1 }' | sort -u)
  if ! grep -qxF "$required" <<<"$names"; then
    echo "check-deps: the tree of $crate does not list $required; is cargo tree broken?" >&2
    failed=1
    return
  fi
  local name
  for name in "$@"; do
    if grep -qxF "$name" <<<"$names"; then
      echo "check-deps: $crate depends on forbidden crate \`$name\`" \
        "(see: cargo tree -p $crate -e normal --target all -i $name)" >&2
      failed=1
    fi
  done
}

check mint-policy serde "${forbidden_for_policy[@]}"
check mint-mcp mint-policy "${forbidden_for_mcp[@]}"

if [[ $failed -ne 0 ]]; then
  echo "check-deps: FAILED: the dependency rules of STYLE.md §1 are broken" >&2
  exit 1
fi
echo "check-deps: ok (mint-policy is pure; mint-mcp reaches no secret store, network or broker)"
