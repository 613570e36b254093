#!/usr/bin/env bash
# Proves the dependency direction of STYLE.md §1 and DESIGN.md invariant 6 from Cargo's own
# resolution, then the module rules of mint-broker's rooms with a grep: mint-policy stays pure (no async runtime, network, TLS or secret store) and mint-mcp
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

# Inside mint-broker, the rules of its rooms (broker/src/lib.rs) that a grep can check. Only the
# code before a file's `#[cfg(test)]` counts (tests come last in a file, STYLE.md §2), comment
# lines and test files (`tests.rs`) not at all.
library_code() {
  awk '/^#\[cfg\(test\)\]/ { exit } !/^[[:space:]]*\/\// { print FILENAME ":" FNR ": " $0 }' "$1"
}
broker_code() {
  local file
  while IFS= read -r file; do
    library_code "$file"
  done < <(find broker/src -name '*.rs' ! -name tests.rs | sort)
}
code=$(broker_code)
if [[ -z $code ]]; then
  echo "check-deps: found no code under broker/src; is the layout broken?" >&2
  failed=1
fi
# 1. A secret is revealed only in secrets/; the exceptions are capability tokens, never an alias
#    secret: the token the operator asked for (cli/cap.rs, printed once at issue), the demo's
#    throwaway token (demo.rs), and the token `mint run` and `mint env` issue for an agent
#    (cli/agent_env.rs: into the proxy URL of the child's environment or of the lines `mint env`
#    prints once, and into the probe that the broker accepts it).
revealed=$(grep -F 'expose_secret()' <<<"$code" | grep -Ev '^broker/src/(secrets/|cli/cap\.rs:|cli/agent_env\.rs:|demo\.rs:)' || true)
if [[ -n $revealed ]]; then
  echo "check-deps: expose_secret() outside broker/src/secrets/:" >&2
  echo "$revealed" >&2
  failed=1
fi
# 2. The engine rooms never reach into the command line or the demo.
upward=$(grep -E 'crate::(cli|demo)\b' <<<"$code" \
  | grep -E '^broker/src/(config|secrets|capability|proxy|net|audit|serve|approval|limits)[/.]' || true)
if [[ -n $upward ]]; then
  echo "check-deps: an engine module uses crate::cli or crate::demo:" >&2
  echo "$upward" >&2
  failed=1
fi

if [[ $failed -ne 0 ]]; then
  echo "check-deps: FAILED: the dependency rules of STYLE.md §1 or broker/src/lib.rs are broken" >&2
  exit 1
fi
echo "check-deps: ok (mint-policy is pure; mint-mcp reaches no secret store, network or broker;"\
  "secrets are revealed only in broker/src/secrets/; engine modules do not use cli/ or demo/)"
