#!/usr/bin/env bash
# The soak benchmark of docs/performance.md ("Soak"), in one command:
#
#     bash bench/soak.sh                                  # one hour at 1,000 requests/s
#     bash bench/soak.sh --duration 90s --rate 200        # a short check, about two minutes
#     bash bench/soak.sh --svg docs/soak.svg              # also write the plot there
#
# Builds `mint` and the benchmark upstream with `cargo build --release --locked`, then runs
# bench/soak.py: `mint serve` in front of the upstream (tests/src/bin/bench_upstream.rs) under a
# constant rate of requests that carry a placeholder (GET, POST with a JSON body, some denied by
# policy), with idle keep-alive connections and server-sent event streams held open, a reload and
# an audit rotation every minute, and RSS, descriptors, threads and latency sampled every minute.
# It exits 1 when a check fails (growth after the warm-up, any unexpected answer, a broken audit
# chain, the canary secret found in an answer, an audit file or Mint's log). Results:
# target/soak/soak-<time>.{md,json,csv,svg} (BENCH_OUT). Loopback only; it stops everything it
# started.
#
# Flags (bench/soak.py --help): --duration (1h), --rate (1000), --interval (60s), --warmup (5m),
# --connections (32), --idle-conns (300), --idle-every (12s), --sse-streams (50), --sse-seconds
# (300), --rss-growth-pct (20), --rss-growth-mib (16), --table-every (10m), --out, --svg, --work.
# Environment: BENCH_SKIP_BUILD=1, BENCH_MINT, BENCH_UPSTREAM (other binaries), BENCH_LOAD_CORE
# (0: this script's load), BENCH_SERVER_CORE (1: Mint and the upstream), BENCH_NICE (-10 as
# root), BENCH_KEEP_WORK=1 (keep the home, the audit files and the logs).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

if ! command -v taskset >/dev/null; then
    echo "installing util-linux (taskset)" >&2
    sudo_cmd=()
    [[ $(id -u) == 0 ]] || sudo_cmd=(sudo)
    "${sudo_cmd[@]}" apt-get update -qq
    DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends util-linux >/dev/null
fi

if [[ ${BENCH_SKIP_BUILD:-0} != 1 ]]; then
    echo "building mint and bench_upstream (cargo build --release --locked)" >&2
    cargo build --release --locked -p mint-broker --bin mint -p mint-tests --bin bench_upstream
fi

# Hundreds of connections held open, on both ends.
ulimit -n 16384 2>/dev/null || ulimit -n "$(ulimit -Hn)"

export BENCH_MINT=${BENCH_MINT:-$ROOT/target/release/mint}
export BENCH_UPSTREAM=${BENCH_UPSTREAM:-$ROOT/target/release/bench_upstream}
exec python3 "$ROOT/bench/soak.py" "$@"
