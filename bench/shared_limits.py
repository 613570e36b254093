#!/usr/bin/env python3
"""The shared call-limits benchmark of docs/performance.md (run it with bench/shared_limits.sh).

Two questions, on loopback only, every process started here and stopped here:

1. What does counting a request in Redis cost? One `mint serve` in front of the benchmark upstream
   (tests/src/bin/bench_upstream.rs), a request that matches a limit it never reaches, measured
   with wrk three ways in the same run, alternating rounds: limits in memory (no flag), in Redis
   over its Unix socket, and in Redis over TCP on 127.0.0.1. Reported: requests/s at 16
   connections, latency at about 1,000 requests/s (p50, p99), and CPU per request of Mint and of
   redis-server (from /proc), each against the in-memory limiter.
2. Does counting stay exact at 1,000 requests/s across three brokers? Three `mint serve` on one
   Redis, a limit of `max` per hour, three wrk (one per broker) sending about 1,000 requests/s in
   all for longer than it takes to spend the limit: the brokers' audit logs must hold exactly
   `max` allow decisions, Redis exactly `max` entries, and no `503 limits_unavailable`.

Settings (environment): BENCH_DURATION (seconds per wrk run, 5), BENCH_ROUNDS (3),
BENCH_EXACT_SECONDS (10), BENCH_EXACT_MAX (5000), BENCH_MINT, BENCH_UPSTREAM (binaries),
BENCH_OUT (the results file, target/bench/shared-limits.md).
"""

import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SECRET = "mint_bench_7Qx9KpZ2wLr4Tf8VnB3cYh6Jd1Gs5Mq0Ue"
AGENT = "bench-agent"
CLK_TCK = os.sysconf("SC_CLK_TCK")
DURATION = int(os.environ.get("BENCH_DURATION", "5"))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))
EXACT_SECONDS = int(os.environ.get("BENCH_EXACT_SECONDS", "10"))
EXACT_MAX = int(os.environ.get("BENCH_EXACT_MAX", "5000"))
MINT = os.environ.get("BENCH_MINT", str(ROOT / "target/release/mint"))
UPSTREAM = os.environ.get("BENCH_UPSTREAM", str(ROOT / "target/release/bench_upstream"))
OUT = Path(os.environ.get("BENCH_OUT", str(ROOT / "target/bench/shared-limits.md")))
LOAD_CORE, SERVER_CORE = "0", "1"


class Procs:
    """Every process started, stopped in reverse order (SIGTERM, then SIGKILL)."""

    def __init__(self):
        self.procs = []

    def start(self, argv, log, **kwargs):
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stderr=open(log, "wb"), start_new_session=True, **kwargs
        )
        self.procs.append(proc)
        return proc

    def stop(self, proc):
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def stop_all(self):
        for proc in reversed(self.procs):
            self.stop(proc)


def cpu_seconds(pid):
    """User plus system CPU time of a process, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def pinned(argv, core):
    return ["taskset", "-c", core, *argv]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Bench:
    def __init__(self, work):
        self.work = work
        self.procs = Procs()
        self.ca = work / "upstream-ca.pem"
        up = self.procs.start(
            pinned([UPSTREAM, "--ca-out", str(self.ca), "--require-auth", f"Bearer {SECRET}",
                    "--max-seconds", "3600"], SERVER_CORE),
            work / "upstream.log", stdout=subprocess.PIPE, text=True,
        )
        self.up_http = int(up.stdout.readline().split()[1])
        up.stdout.readline()
        self.redis_dir = work / "redis"
        self.redis_dir.mkdir()
        self.redis_socket = self.redis_dir / "redis.sock"
        self.redis_port = free_port()
        self.redis = self.procs.start(
            pinned(["redis-server", "--port", str(self.redis_port), "--bind", "127.0.0.1",
                    "--unixsocket", str(self.redis_socket), "--unixsocketperm", "700",
                    "--save", "", "--appendonly", "no", "--dir", str(self.redis_dir)],
                   SERVER_CORE),
            work / "redis.log", stdout=subprocess.DEVNULL,
        )
        for _ in range(200):
            if self.redis_cli("PING") == "PONG":
                break
            time.sleep(0.05)
        else:
            raise RuntimeError("redis-server did not start")

    def redis_cli(self, *args):
        done = subprocess.run(["redis-cli", "-s", str(self.redis_socket), *args],
                              capture_output=True, text=True)
        return done.stdout.strip()

    def home(self, name, limit_max):
        home = self.work / name
        (home / "secrets").mkdir(parents=True)
        os.chmod(home, 0o700)
        os.chmod(home / "secrets", 0o700)

        def private(rel, text):
            (home / rel).write_text(text)
            os.chmod(home / rel, 0o600)

        private("secrets/bench", SECRET)
        private("aliases.yaml", "aliases:\n  - name: bench\n    hosts: [127.0.0.1]\n"
                f"    sites: [header]\n    source: file:{home / 'secrets' / 'bench'}\n")
        private("policy.yaml", "version: 1\ndefault: deny\nrules:\n"
                f"  - {{ id: bench-upstream, effect: allow, match: {{ agent: [{AGENT}], alias: [bench], "
                f"scheme: [http], host: ['127.0.0.1'], port: [{self.up_http}], method: [GET], path: [/1k] }}, "
                f"limits: [{{ max: {limit_max}, per: 1h }}] }}\n")
        private("capabilities.yaml", "version: 1\ncapabilities: []\n")
        return home

    def env(self, home):
        env = {k: v for k, v in os.environ.items() if not k.startswith("MINT_")}
        env.update(MINT_HOME=str(home), MINT_KEYRING_BACKEND="keyutils", RUST_LOG="mint_broker=warn")
        return env

    def token(self, home):
        issued = subprocess.run([MINT, "cap", "issue", "--agent", AGENT, "--ttl", "2h"],
                                env=self.env(home), capture_output=True, text=True, check=True)
        return next(w for w in issued.stdout.split() if w.startswith("mint_cap_"))

    def serve(self, home, limits_redis):
        argv = [MINT, "serve", "--listen", "127.0.0.1:0", "--upstream-ca", str(self.ca)]
        env = self.env(home)
        if limits_redis:
            env["MINT_LIMITS_REDIS"] = limits_redis
        proc = self.procs.start(pinned(argv, SERVER_CORE), home / "serve.log",
                                env=env, stdout=subprocess.PIPE, text=True)
        line = proc.stdout.readline().strip()
        if not line.startswith("listening on http://"):
            raise RuntimeError(f"mint serve did not start: {(home / 'serve.log').read_text()}")
        return proc, line.removeprefix("listening on ")

    def wrk(self, base, token, connections, seconds, delay_ms=0):
        env = dict(os.environ, BENCH_DELAY_MS=str(delay_ms))
        argv = pinned(["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "--timeout", "5s",
                       "-s", str(ROOT / "bench/report.lua"),
                       "-H", f"Mint-Capability: {token}",
                       "-H", "Authorization: Bearer {{mint:bench}}",
                       f"{base}/v1/proxy/http/127.0.0.1:{self.up_http}/1k"], LOAD_CORE)
        return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, text=True)

    @staticmethod
    def result(wrk):
        out, _ = wrk.communicate()
        line = next(l for l in out.splitlines() if l.startswith("BENCH "))
        return {k: float(v) for k, v in (f.split("=") for f in line.split()[1:])}

    # --- 1. the cost of an admission in Redis ---------------------------------------------

    def cost(self):
        contenders = {
            "memory": None,
            "redis-unix": f"redis+unix://{self.redis_socket}",
            "redis-tcp": f"redis://127.0.0.1:{self.redis_port}",
        }
        runs = {name: [] for name in contenders}
        for name, url in contenders.items():
            home = self.home(f"cost-{name}", 1_000_000)
            token = self.token(home)
            proc, base = self.serve(home, url)
            runs[name] = {"proc": proc, "base": base, "token": token, "c16": [], "rate": []}
            # Warm-up: connections, the script loaded, the allocator grown.
            self.result(self.wrk(base, token, 16, 1))
        for _ in range(ROUNDS):
            for name, run in runs.items():
                for scenario, connections, delay in (("c16", 16, 0), ("rate", 4, 4)):
                    mint0, redis0 = cpu_seconds(run["proc"].pid), cpu_seconds(self.redis.pid)
                    res = self.result(self.wrk(run["base"], run["token"], connections, DURATION, delay))
                    mint1, redis1 = cpu_seconds(run["proc"].pid), cpu_seconds(self.redis.pid)
                    # Non-2xx answers: with the default 50 ms wait, an admission that Redis (or
                    # a loaded machine) does not answer in time is a 503; counted and reported.
                    errors = res["status"] + res["connect"] + res["read"] + res["write"] + res["timeout"]
                    n = res["requests"]
                    run[scenario].append({
                        "rps": n / (res["duration_us"] / 1e6),
                        "p50": res["p50"], "p99": res["p99"],
                        "mint_cpu_us": (mint1 - mint0) * 1e6 / n,
                        "redis_cpu_us": (redis1 - redis0) * 1e6 / n,
                        "errors": errors,
                    })
        for run in runs.values():
            self.procs.stop(run["proc"])
        return {name: {s: run[s] for s in ("c16", "rate")} for name, run in runs.items()}

    # --- 2. exact counting at about 1,000 requests/s across three brokers ---------------------

    def exactness(self):
        self.redis_cli("FLUSHALL")
        url = f"redis+unix://{self.redis_socket}"
        homes = [self.home(f"exact-{i}", EXACT_MAX) for i in range(3)]
        token = self.token(homes[0])
        for home in homes[1:]:
            shutil.copy(homes[0] / "capabilities.yaml", home / "capabilities.yaml")
        brokers = [self.serve(home, url) for home in homes]
        # About 1,000 requests/s in all: three wrk, three connections each, 7 ms after each
        # answer (wrk2, which holds a rate exactly, is not packaged in Debian).
        wrks = [self.wrk(base, token, 3, EXACT_SECONDS, 7) for _, base in brokers]
        results = [self.result(w) for w in wrks]
        for proc, _ in brokers:
            self.procs.stop(proc)
        allowed, limited, unavailable = 0, 0, 0
        for home in homes:
            for line in (home / "audit.log").read_text().splitlines():
                record = json.loads(line)
                if record.get("phase") != "decision":
                    continue
                if record.get("decision") == "allow":
                    allowed += 1
                elif record.get("reason") == "limits_unavailable":
                    unavailable += 1
                elif record.get("decision") == "limited":
                    limited += 1
        keys = self.redis_cli("--raw", "KEYS", "mint:limits:*").split()
        entries = int(self.redis_cli("ZCARD", keys[0])) if keys else 0
        requests = sum(r["requests"] for r in results)
        seconds = max(r["duration_us"] for r in results) / 1e6
        return {
            "max": EXACT_MAX, "requests": int(requests), "rate": requests / seconds,
            "allowed": allowed, "limited": limited, "unavailable": unavailable,
            "redis_entries": entries, "non_2xx": int(sum(r["status"] for r in results)),
        }


def med(values):
    return statistics.median(values)


def report(cost, exact):
    lines = [
        f"Shared call limits, {ROUNDS} rounds of {DURATION} s per figure (medians; the wait is "
        f"the default 50 ms); "
        f"{os.cpu_count()} cores; Mint and redis-server on core {SERVER_CORE}, wrk on core {LOAD_CORE}.",
        "",
        "| limits | requests/s at c16 | vs memory | p50 / p99 at ~1,000/s (µs) | Mint CPU µs/request | redis-server CPU µs/request | total vs memory | not 2xx |",
        "|---|---|---|---|---|---|---|---|",
    ]
    base = cost["memory"]
    base_rps = med([r["rps"] for r in base["c16"]])
    base_cpu = med([r["mint_cpu_us"] for r in base["c16"]])
    for name, runs in cost.items():
        rps = med([r["rps"] for r in runs["c16"]])
        mint_cpu = med([r["mint_cpu_us"] for r in runs["c16"]])
        redis_cpu = med([r["redis_cpu_us"] for r in runs["c16"]]) if name != "memory" else 0.0
        p50 = med([r["p50"] for r in runs["rate"]])
        p99 = med([r["p99"] for r in runs["rate"]])
        lines.append(
            f"| {name} | {rps:,.0f} | {rps / base_rps:.2f}× | {p50:,.0f} / {p99:,.0f} | "
            f"{mint_cpu:.1f} | {redis_cpu:.1f} | +{mint_cpu + redis_cpu - base_cpu:.1f} µs | "
            f"{sum(r['errors'] for s in ('c16', 'rate') for r in runs[s]):.0f} |"
        )
    lines += [
        "",
        f"Exactness: three brokers on one Redis, `max: {exact['max']}, per: 1h`, "
        f"{exact['requests']:,} requests in {EXACT_SECONDS} s ({exact['rate']:,.0f} requests/s): "
        f"{exact['allowed']:,} allowed, {exact['limited']:,} limited (429), "
        f"{exact['unavailable']} refused 503, {exact['redis_entries']:,} entries in Redis.",
    ]
    return "\n".join(lines) + "\n"


def main():
    for tool in (MINT, UPSTREAM):
        if not Path(tool).is_file():
            sys.exit(f"{tool} is missing: build it with cargo build --release --locked")
    work = Path(tempfile.mkdtemp(prefix="mint-bench-limits-"))
    bench = None
    try:
        bench = Bench(work)
        cost = bench.cost()
        exact = bench.exactness()
    finally:
        if bench:
            bench.procs.stop_all()
        shutil.rmtree(work, ignore_errors=True)
    text = report(cost, exact)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(text)
    OUT.with_suffix(".json").write_text(json.dumps({"cost": cost, "exactness": exact}, indent=1))
    sys.stdout.write(text)
    ok = exact["allowed"] == exact["max"] == exact["redis_entries"] and exact["unavailable"] == 0
    if not ok:
        sys.exit("counting was not exact")


if __name__ == "__main__":
    main()
