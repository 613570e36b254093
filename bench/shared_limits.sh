#!/usr/bin/env bash
# The shared call-limits benchmark of docs/performance.md ("Shared call limits in Redis"), in one
# command:
#
#     bash bench/shared_limits.sh
#     BENCH_DURATION=3 BENCH_ROUNDS=2 bash bench/shared_limits.sh
#
# Installs what is missing (Debian: wrk, redis-server, util-linux for taskset), builds `mint` and
# the benchmark upstream with `cargo build --release --locked`, then runs
# bench/shared_limits.py: the cost of counting in Redis (Unix socket and TCP on loopback) against
# the in-memory limiter, and exact counting at about 1,000 requests/s across three brokers. It
# starts its own redis-server on a private socket (persistence off) and stops everything it
# started. Results: target/bench/shared-limits.md (BENCH_OUT), raw figures beside it as JSON.
#
# Settings (environment): BENCH_DURATION (5), BENCH_ROUNDS (3), BENCH_EXACT_SECONDS (10),
# BENCH_EXACT_MAX (5000), BENCH_SKIP_INSTALL=1, BENCH_SKIP_BUILD=1.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

if [[ ${BENCH_SKIP_INSTALL:-0} != 1 ]]; then
    missing=()
    command -v wrk >/dev/null || missing+=(wrk)
    command -v redis-server >/dev/null || missing+=(redis-server)
    command -v taskset >/dev/null || missing+=(util-linux)
    if ((${#missing[@]})); then
        apt-get update -q
        apt-get install -y -q --no-install-recommends "${missing[@]}"
    fi
fi
if [[ ${BENCH_SKIP_BUILD:-0} != 1 ]]; then
    cargo build --release --locked -p mint-broker --bin mint -p mint-tests --bin bench_upstream
fi
exec python3 bench/shared_limits.py
