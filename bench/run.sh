#!/usr/bin/env bash
# The comparison benchmark of docs/performance.md, in one command:
#
#     bash bench/run.sh                   # everything: install, build, measure, print the table
#     BENCH_DURATION=5 BENCH_ROUNDS=5 bash bench/run.sh
#     bash bench/run.sh --profile mint-interval --scenarios c16 --duration 10   # perf profile
#     bash bench/run.sh --callgrind mint-interval --scenarios c16 --duration 20 # instructions/request
#     bash bench/run.sh --strace nginx,mint-interval --scenarios c1 --duration 5  # syscalls/request
#     BENCH_SCENARIOS=c1,c16 BENCH_CONTENDERS=direct,nginx,mint-interval bash bench/run.sh
#                                         # issue 19: c=1 added latency and c=16 CPU against nginx
#
# Installs what is missing (Debian: wrk, nginx-light, linux-perf for --profile; PyPI: mitmproxy
# into its own venv under target/bench-venv), builds `mint` and the benchmark upstream with
# `cargo build --release --locked`, then runs bench/compare.py, which starts every process pinned
# with taskset (load generator on BENCH_LOAD_CORE, upstream and proxies on BENCH_SERVER_CORE),
# drives the HTTP scenarios with wrk and the HTTPS-interception ones (connect-*) with
# bench_connect (tests/src/bin/bench_connect.rs: CONNECT, TLS with the proxy's CA, HTTP/1.1),
# measures on loopback only, and stops everything it started. The table is printed and written to
# target/bench/results.md (BENCH_OUT), with the raw figures beside it as JSON.
#
# Settings (environment; command-line flags of compare.py override them):
#   BENCH_DURATION    seconds per wrk run (3)          BENCH_ROUNDS       rounds (3)
#   BENCH_WARMUP      seconds per warm-up run (1)      BENCH_IDLE_CONNS   idle connections (1000)
#   BENCH_CONTENDERS  direct,nginx,mitmproxy,mint-interval,mint-always
#   BENCH_SCENARIOS   c1,c16,c256,c16-64k,c16-tls,c16-tls-64k,rate1000,connect-c16,connect-new
#   BENCH_LOAD_CORE   0                                BENCH_SERVER_CORE  1
#   BENCH_NICE        priority of every benchmark process (-10 as root, so that builds running
#                     beside it take less from the measurement; 0 turns it off)
#   BENCH_NGINX_ACCESS_LOG  on|off (on: nginx writes its default access log, as Mint its audit)
#   BENCH_SKIP_INSTALL=1, BENCH_SKIP_BUILD=1           use what is there
#   BENCH_MINT, BENCH_UPSTREAM  other binaries to measure (default: target/release/...)
#   BENCH_MINT_BASE   an older `mint` build: contenders base-interval and base-always run it,
#                     so before and after are measured in the same rounds
#   BENCH_KEEP_WORK=1  keep the temporary directory (homes, logs, nginx.conf)
#
# Defaults take about 7 minutes of measurement (43 load runs of 3 s per round, 3 rounds, plus
# start-up, warm-up and the memory phase), after a release build that is a one-off.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
VENV=${BENCH_VENV:-$ROOT/target/bench-venv}
MITMPROXY_VERSION=${BENCH_MITMPROXY_VERSION:-11.0.2}
WORK=$(mktemp -d -t mint-bench-XXXXXX)

cleanup() {
    local status=$?
    # compare.py stops its processes itself; this catches whatever a crash left behind.
    if [[ -f $WORK/pids ]]; then
        while read -r pid; do
            if kill -0 "$pid" 2>/dev/null; then
                kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
            fi
        done <"$WORK/pids"
        sleep 1
        while read -r pid; do
            kill -KILL -- "-$pid" 2>/dev/null || true
        done <"$WORK/pids"
    fi
    if [[ ${BENCH_KEEP_WORK:-0} != 1 ]]; then
        rm -rf "$WORK"
    else
        echo "work directory kept: $WORK" >&2
    fi
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

profiling=0
counting=0
tracing=0
for arg in "$@"; do
    [[ $arg == --strace ]] && tracing=1
    [[ $arg == --profile ]] && profiling=1
    [[ $arg == --callgrind ]] && counting=1
done

if [[ ${BENCH_SKIP_INSTALL:-0} != 1 ]]; then
    missing=()
    command -v wrk >/dev/null || missing+=(wrk)
    command -v nginx >/dev/null || [[ -x /usr/sbin/nginx ]] || missing+=(nginx-light)
    command -v taskset >/dev/null || missing+=(util-linux)
    if [[ $profiling == 1 ]]; then
        command -v perf >/dev/null || missing+=(linux-perf)
    fi
    if [[ $tracing == 1 ]]; then
        command -v strace >/dev/null || missing+=(strace)
    fi
    if [[ $counting == 1 ]]; then
        command -v valgrind >/dev/null || missing+=(valgrind)
    fi
    if ((${#missing[@]})); then
        echo "installing ${missing[*]} (apt-get)" >&2
        sudo_cmd=()
        [[ $(id -u) == 0 ]] || sudo_cmd=(sudo)
        "${sudo_cmd[@]}" apt-get update -qq
        DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    fi
    if [[ ! -x $VENV/bin/mitmdump ]] || ! "$VENV/bin/mitmdump" --version 2>/dev/null | grep -q "Mitmproxy: $MITMPROXY_VERSION"; then
        echo "installing mitmproxy $MITMPROXY_VERSION into $VENV (pip)" >&2
        python3 -m venv "$VENV"
        "$VENV/bin/pip" install -q --disable-pip-version-check "mitmproxy==$MITMPROXY_VERSION"
    fi
fi
export PATH=$PATH:/usr/sbin

if [[ ${BENCH_SKIP_BUILD:-0} != 1 ]]; then
    echo "building mint and bench_upstream (cargo build --release --locked)" >&2
    cargo build --release --locked -p mint-broker --bin mint -p mint-tests --bin bench_upstream \
        --bin bench_connect
fi

# 1,000 idle connections per contender, and the upstream's and proxies' own connections.
ulimit -n 16384 2>/dev/null || ulimit -n "$(ulimit -Hn)"

export BENCH_MINT=${BENCH_MINT:-$ROOT/target/release/mint}
export BENCH_UPSTREAM=${BENCH_UPSTREAM:-$ROOT/target/release/bench_upstream}
export BENCH_CONNECT=${BENCH_CONNECT:-$ROOT/target/release/bench_connect}
export BENCH_MITMDUMP=$VENV/bin/mitmdump
python3 "$ROOT/bench/compare.py" --work "$WORK" "$@"
