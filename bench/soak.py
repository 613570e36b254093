#!/usr/bin/env python3
"""The soak benchmark of docs/performance.md ("Soak"): `mint serve` under a constant load for a
long time (one hour by default), reloaded and rotated every minute, sampled every minute; fails
on growth, on errors, on a broken audit chain or on a leaked secret.

Run it through `bash bench/soak.sh`, which builds the release binaries; this script only
measures. Loopback only; every process it starts is stopped on exit, on an error or on a signal.

What runs:

- The benchmark upstream (`tests/src/bin/bench_upstream.rs`), requiring `Authorization: Bearer
  CANARY`, where CANARY is a secret made up for this run. Its `POST /echo` sends the body back and
  its `GET /sse` streams events that carry the `Authorization` value: every answer of those two
  routes holds the secret, which Mint must scrub.
- `mint serve` with a home of its own: one alias `soak` (a `file:` secret, the canary; sites:
  header and the body pointer `/token`), a policy that allows GET `/1k` and `/sse` and POST
  `/echo` (with `inject: [header, body]`) and denies `/admin/**`, and a capability.
- The load, from this process (asyncio, raw HTTP/1.1 on keep-alive sockets, pinned to the load
  core): `--rate` requests per second at constant rate on a pool of `--connections` connections,
  scheduled open-loop (latency is counted from the moment a request was due, so a stall shows in
  the percentiles instead of slowing the load down), in a fixed mix of 7 `GET /1k` (placeholder
  in `Authorization`), 2 `POST /echo` (placeholder in the header and in the JSON body) and 1
  `GET /admin/soak` (denied by policy: a 403 is expected and counted apart, not an error) in
  every 10; `--sse-streams` event streams held open, each `--sse-seconds` long (one event a
  second) and opened again when it ends; `--idle-conns` keep-alive connections held open for the
  whole run, each sending one request every `--idle-every` seconds, under Mint's idle keep-alive
  bound (twice `--header-read-timeout`, 20 s by default), so that they stay open.
- Every `--interval` (60 s): a sample of Mint's process (VmRSS, RssAnon, threads, descriptors by
  kind, sockets towards agents and towards the upstream, CPU), of this process, and of the
  requests of that interval (count, errors, latency p50/p99/max); then a reload (policy and alias
  file rewritten with a new generation, by rename, then SIGHUP) and an audit rotation (`mint
  audit rotate`).
- At the end: Mint stopped with SIGTERM (it must exit 0), `mint audit verify` over every rotated
  file, the audit files counted (`policy_reloaded` events, decisions) and searched for the
  canary, as Mint's stderr is.

Pass or fail (each check is printed with its figures):

- no unexpected answer or connection error, and no answer holding the canary;
- after `--warmup`, VmRSS never above the sample at the end of the warm-up plus the larger of
  `--rss-growth-pct` (20 %) and `--rss-growth-mib` (16 MiB);
- descriptors that are not sockets towards agents or the upstream (log files, listeners,
  runtime) the same count at every sample after the warm-up;
- sockets towards agents never more than the connections this process holds open plus the pool
  (no connection left behind after its agent closed it);
- every reload applied (at least one `policy_reloaded` per reload, no `policy_reload_failed`),
  every rotation done, the chain intact across all files (`mint audit verify` exits 0);
- the canary nowhere in the audit files or in Mint's stderr; Mint exits 0 on SIGTERM.

Results: OUT/soak-<time>.json (every sample and check), .csv (the samples), .svg (RSS,
descriptors and latency over time, drawn by this script) and .md (a table per `--table-every`).
"""

import argparse
import array
import asyncio
import datetime
import gc
import json
import os
import platform
import re
import secrets
import shutil
import signal
import string
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

# Importing compare.py must not leave a __pycache__ in the source tree.
sys.dont_write_bytecode = True
sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare import (  # noqa: E402  (the comparison benchmark's helpers, shared)
    CLK_TCK,
    ROOT,
    Processes,
    anon_kib,
    cpu_ticks,
    load_average,
    memory_kib,
    mint_version,
    pin_argv,
    read_line,
    start_bench_upstream,
)

AGENT = "soak-agent"
ALIAS = "soak"
PLACEHOLDER = "{{mint:soak}}"
REDACTED = b"[mint:redacted]"
# The mix of every 10 scheduled requests.
MIX = ["get", "get", "post", "get", "denied", "get", "get", "post", "get", "get"]
# Requests that do not answer within this long count as errors.
REQUEST_TIMEOUT = 15.0
TCP_LISTEN = "0A"
# What a request on a socket can fail with (the answer is then counted as an error).
NETWORK_ERRORS = (
    OSError,
    EOFError,
    asyncio.IncompleteReadError,
    asyncio.LimitOverrunError,
    asyncio.TimeoutError,
    ValueError,
)
TCP_CLOSE_WAIT = "08"


def parse_duration(text):
    """`90`, `90s`, `15m`, `1h` -> seconds."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(s|m|h)?\s*", text)
    if not match:
        raise argparse.ArgumentTypeError(f"not a duration: `{text}` (use 90s, 15m, 1h)")
    value = float(match.group(1))
    return value * {"s": 1, "m": 60, "h": 3600, None: 1}[match.group(2)]


def make_canary():
    """A secret for this run only, shaped like a token: random characters sharing no 8-byte
    window with the upstream's fixed answers (so the scrubber's prefilter works as in
    production)."""
    alphabet = string.ascii_letters + string.digits
    return "mint_soak_canary_" + "".join(secrets.choice(alphabet) for _ in range(32))


def percentile(sorted_values, p):
    if not sorted_values:
        return None
    k = min(len(sorted_values) - 1, max(0, int(round(p / 100 * (len(sorted_values) - 1)))))
    return sorted_values[k]


# --- HTTP/1.1 on raw sockets -------------------------------------------------------------------


class HttpError(ValueError):
    """An answer that could not be read as HTTP/1.1."""


async def read_head(reader):
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    parts = lines[0].split(b" ", 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1."):
        raise HttpError(f"bad status line {lines[0][:80]!r}")
    headers = {}
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(b":")
            headers[name.strip().lower()] = value.strip()
    return int(parts[1]), head, headers


async def read_chunk(reader):
    """One chunk of a chunked body; b"" at its end (trailers read)."""
    size_line = await reader.readuntil(b"\r\n")
    size = int(size_line.split(b";")[0].strip(), 16)
    if size == 0:
        while (await reader.readuntil(b"\r\n")) != b"\r\n":
            pass
        return b""
    data = await reader.readexactly(size + 2)
    if data[-2:] != b"\r\n":
        raise HttpError("chunk not followed by CRLF")
    return data[:-2]


async def read_response(reader):
    """Status, head, body and whether the connection stays open."""
    status, head, headers = await read_head(reader)
    if b"content-length" in headers:
        body = await reader.readexactly(int(headers[b"content-length"]))
    elif headers.get(b"transfer-encoding", b"").lower() == b"chunked":
        parts = []
        while chunk := await read_chunk(reader):
            parts.append(chunk)
        body = b"".join(parts)
    elif status in (204, 304) or 100 <= status < 200:
        body = b""
    else:
        raise HttpError(f"answer {status} without length or chunking")
    keep = headers.get(b"connection", b"").lower() != b"close"
    return status, head, body, keep


class Connection:
    def __init__(self, reader, writer):
        self.reader = reader
        self.writer = writer

    def close(self):
        try:
            self.writer.close()
        except Exception:
            pass


# --- the run -----------------------------------------------------------------------------------


class Interval:
    """What the load saw during one sampling interval."""

    def __init__(self):
        self.latencies = array.array("d")
        self.counts = {}
        self.errors = {}
        self.lag = array.array("d")
        # The slowest request: its latency and when (wall clock) it was due, to find it again in
        # the audit log's timestamps and Mint's log.
        self.slowest = 0.0
        self.slowest_at = None

    def count(self, what, n=1):
        self.counts[what] = self.counts.get(what, 0) + n

    def error(self, what, detail=""):
        self.errors[what] = self.errors.get(what, 0) + 1
        if self.errors[what] <= 3:
            print(f"error {what}: {detail}", file=sys.stderr, flush=True)


class Soak:
    def __init__(self, args):
        self.args = args
        self.work = Path(args.work)
        self.work.mkdir(parents=True, exist_ok=True)
        self.procs = Processes(self.work / "pids")
        self.mint_bin = os.environ.get("BENCH_MINT", str(ROOT / "target/release/mint"))
        self.upstream_bin = os.environ.get(
            "BENCH_UPSTREAM", str(ROOT / "target/release/bench_upstream")
        )
        self.load_core = os.environ.get("BENCH_LOAD_CORE", "0")
        self.server_core = os.environ.get("BENCH_SERVER_CORE", "1")
        default_nice = "-10" if os.geteuid() == 0 else "0"
        self.nice = os.environ.get("BENCH_NICE", default_nice)
        self.canary = make_canary()
        self.canary_bytes = self.canary.encode()
        self.interval = Interval()
        self.intervals = []
        self.samples = []
        self.open_conns = {"pool": 0, "idle": 0, "sse": 0}
        self.generation = 0
        self.reloads = 0
        self.rotations = {"live": 0, "pending": 0, "failed": 0}
        self.stopping = False
        self.all_latencies = array.array("d")
        # The open connections of the idle and event-stream loops, closed when a loop ends.
        self.idle_conn = {}
        self.sse_conn = {}

    def pin(self, argv, core):
        return pin_argv(argv, core, self.nice)

    # Setup.

    def start_upstream(self):
        self.upstream, self.ca, self.up_http, self.up_https = start_bench_upstream(
            self.procs,
            lambda argv: self.pin(argv, self.server_core),
            self.upstream_bin,
            self.work,
            self.canary,
            self.args.duration + 1800,
        )

    def private(self, rel, text):
        """Writes a file of the home atomically (a new file renamed over the old one, as
        docs/operations.md advises), mode 0600."""
        path = self.home / rel
        tmp = path.with_name(path.name + ".new")
        tmp.write_text(text)
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)

    def aliases_text(self):
        return (
            "aliases:\n"
            f"  - name: {ALIAS}\n"
            f"    description: the soak upstream's token (generation {self.generation})\n"
            "    hosts: [127.0.0.1]\n"
            "    sites: [header, {body: [/token]}]\n"
            f"    source: file:{self.home / 'secrets' / ALIAS}\n"
        )

    def policy_text(self):
        up = self.up_http
        where = f"agent: [{AGENT}], alias: [{ALIAS}], scheme: [http], host: ['127.0.0.1'], port: [{up}]"
        lines = [
            "version: 1",
            "default: deny",
            "rules:",
            "  - { id: no-admin, effect: deny, match: { path: '/admin/**' } }",
            f"  - {{ id: soak-read, effect: allow, match: {{ {where}, method: [GET], path: [/1k, /sse] }} }}",
            # A limit it never reaches, so that every POST is counted. Its window is a minute: an
            # exact sliding window remembers each admission for the window's length (16 bytes
            # each, mint_policy::limits), so a window of an hour would grow by 16 bytes per POST
            # for the whole hour, by design, and hide a leak behind it; a minute's window is full
            # long before the warm-up ends, and from then on each admission expires an old one.
            f"  - {{ id: soak-write, effect: allow, match: {{ {where}, method: [POST], path: [/echo] }}, "
            "inject: [header, body], limits: [{ max: 1000000, per: 1m, by: [agent] }] }",
            # A rule that changes with every reload, so that each reload loads a new policy.
            f"  - {{ id: generation-{self.generation}, effect: allow, match: {{ host: gen{self.generation}.example.com, method: GET, path: '/v1/**' }} }}",
        ]
        # Rules for other hosts, as a real policy has: the matcher has more than one to look at.
        for i in range(40):
            lines.append(
                f"  - {{ id: api-{i}, effect: allow, match: {{ agent: ['ci-*'], host: api{i}.example.com, method: [GET, POST], path: ['/v1/**'] }} }}"
            )
        return "\n".join(lines) + "\n"

    def mint_env(self):
        env = {k: v for k, v in os.environ.items() if not k.startswith("MINT_")}
        env.update(MINT_HOME=str(self.home), MINT_KEYRING_BACKEND="keyutils")
        env.pop("RUST_LOG", None)
        return env

    def mint(self, *argv, check=True, timeout=120):
        run = subprocess.run(
            [self.mint_bin, *argv],
            env=self.mint_env(),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and run.returncode != 0:
            raise RuntimeError(f"mint {' '.join(argv)} exited {run.returncode}:\n{run.stdout}{run.stderr}")
        return run

    def start_mint(self):
        self.home = self.work / "home"
        (self.home / "secrets").mkdir(parents=True)
        os.chmod(self.home, 0o700)
        os.chmod(self.home / "secrets", 0o700)
        self.private(f"secrets/{ALIAS}", self.canary)
        self.private("aliases.yaml", self.aliases_text())
        self.private("policy.yaml", self.policy_text())
        self.private("capabilities.yaml", "version: 1\ncapabilities: []\n")
        self.mint("policy", "check")
        ttl = f"{int(self.args.duration // 3600) + 2}h"
        issued = self.mint("cap", "issue", "--agent", AGENT, "--ttl", ttl)
        self.token = next(w for w in issued.stdout.split() if w.startswith("mint_cap_"))
        self.mint_log = self.work / "mint.log"
        proc = self.procs.start(
            "mint",
            self.pin(
                [self.mint_bin, "serve", "--listen", "127.0.0.1:0", "--upstream-ca", str(self.ca)],
                self.server_core,
            ),
            self.mint_log,
            env=self.mint_env(),
            stdout=subprocess.PIPE,
        )
        self.mint_proc = proc
        addr = read_line(proc, "mint serve").removeprefix("listening on http://")
        self.mint_host, port = addr.rsplit(":", 1)
        self.mint_port = int(port)
        base = f"/v1/proxy/http/127.0.0.1:{self.up_http}"
        common = (
            f"Host: {addr}\r\nMint-Capability: {self.token}\r\n"
            f"Authorization: Bearer {PLACEHOLDER}\r\n"
        )
        self.requests = {
            "get": f"GET {base}/1k HTTP/1.1\r\n{common}\r\n".encode(),
            "denied": f"GET {base}/admin/soak HTTP/1.1\r\n{common}\r\n".encode(),
        }
        body = json.dumps({"token": PLACEHOLDER, "note": "soak", "pad": "x" * 200}).encode()
        self.requests["post"] = (
            f"POST {base}/echo HTTP/1.1\r\n{common}Content-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode() + body
        self.sse_request = (
            f"GET {base}/sse?n={self.args.sse_seconds}&interval_ms=1000 HTTP/1.1\r\n{common}"
            "Accept: text/event-stream\r\n\r\n"
        ).encode()

    # Load.

    async def connect(self, kind):
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(self.mint_host, self.mint_port), REQUEST_TIMEOUT
        )
        self.open_conns[kind] += 1
        return Connection(reader, writer)

    def disconnect(self, conn, kind):
        if conn is not None:
            conn.close()
            self.open_conns[kind] -= 1

    def check_answer(self, kind, status, head, body):
        """None when the answer is what `kind` should get, else what is wrong."""
        if self.canary_bytes in head or self.canary_bytes in body:
            return "canary_in_answer"
        if kind == "denied":
            return None if status == 403 else f"status_{status}"
        if status != 200:
            return f"status_{status}"
        if kind == "get" and len(body) != 1024:
            return "short_body"
        if kind == "post" and REDACTED not in body:
            # The echo holds the secret where the placeholder was: Mint must have scrubbed it.
            return "echo_not_scrubbed"
        return None

    async def exchange(self, conn, request, kind):
        conn.writer.write(request)
        status, head, body, keep = await asyncio.wait_for(
            read_response(conn.reader), REQUEST_TIMEOUT
        )
        return self.check_answer(kind, status, head, body), keep, status

    async def worker(self, queue):
        conn = None
        loop = asyncio.get_running_loop()
        while True:
            item = await queue.get()
            if item is None:
                break
            due, kind = item
            try:
                if conn is None:
                    conn = await self.connect("pool")
                problem, keep, _ = await self.exchange(conn, self.requests[kind], kind)
            except NETWORK_ERRORS as error:
                self.interval.error(f"{kind}_{type(error).__name__}", repr(error))
                self.disconnect(conn, "pool")
                conn = None
                continue
            now = loop.time()
            latency = now - due
            self.interval.latencies.append(latency)
            if latency > self.interval.slowest:
                self.interval.slowest = latency
                self.interval.slowest_at = time.time() - latency
            if problem:
                self.interval.error(f"{kind}_{problem}")
            else:
                self.interval.count("denied" if kind == "denied" else kind)
            if not keep:
                self.interval.count("closed_by_mint")
                self.disconnect(conn, "pool")
                conn = None
        self.disconnect(conn, "pool")

    async def ticker(self, queue, start, end):
        loop = asyncio.get_running_loop()
        rate = self.args.rate
        i = 0
        while not self.stopping:
            due = start + i / rate
            if due >= end:
                break
            now = loop.time()
            if due > now:
                await asyncio.sleep(due - now)
                continue
            queue.put_nowait((due, MIX[i % len(MIX)]))
            self.interval.count("scheduled")
            i += 1

    async def idle(self, n):
        """One long-lived keep-alive connection: one request every `--idle-every` seconds."""
        await asyncio.sleep(n * 0.02)
        try:
            await self.idle_loop(n, self.args.idle_every, True)
        finally:
            self.disconnect(self.idle_conn.pop(n, None), "idle")

    async def idle_loop(self, n, period, first):
        conn = None
        while not self.stopping:
            try:
                if conn is None:
                    if not first:
                        self.interval.error("idle_reconnect", f"idle connection {n} was closed")
                    conn = await self.connect("idle")
                    self.idle_conn[n] = conn
                    first = False
                problem, keep, _ = await self.exchange(conn, self.requests["get"], "get")
            except NETWORK_ERRORS as error:
                if self.stopping:
                    break
                self.interval.error(f"idle_{type(error).__name__}", repr(error))
                self.disconnect(self.idle_conn.pop(n, None), "idle")
                conn = None
                await asyncio.sleep(1)
                continue
            if problem:
                self.interval.error(f"idle_{problem}")
            else:
                self.interval.count("idle")
            if not keep:
                self.disconnect(self.idle_conn.pop(n, None), "idle")
                conn = None
                first = True
            # Spread over the period so that the idle connections do not all wake together.
            await asyncio.sleep(period * (0.9 + 0.1 * ((n * 7919) % 100) / 100))

    async def sse(self, n):
        """One event stream after another on one connection, each `--sse-seconds` long."""
        await asyncio.sleep(n * min(1.0, self.args.sse_seconds / max(1, self.args.sse_streams)))
        try:
            await self.sse_loop(n)
        finally:
            self.disconnect(self.sse_conn.pop(n, None), "sse")

    async def sse_loop(self, n):
        conn = None
        expected = self.args.sse_seconds
        while not self.stopping:
            events = 0
            try:
                if conn is None:
                    conn = await self.connect("sse")
                    self.sse_conn[n] = conn
                conn.writer.write(self.sse_request)
                status, head, headers = await asyncio.wait_for(
                    read_head(conn.reader), REQUEST_TIMEOUT
                )
                if self.canary_bytes in head:
                    self.interval.error("sse_canary_in_answer")
                if status != 200 or headers.get(b"transfer-encoding", b"").lower() != b"chunked":
                    self.interval.error(f"sse_status_{status}")
                    self.disconnect(self.sse_conn.pop(n, None), "sse")
                    conn = None
                    await asyncio.sleep(1)
                    continue
                buffer = b""
                while True:
                    chunk = await asyncio.wait_for(read_chunk(conn.reader), 5 + 2 * 1.0)
                    if not chunk:
                        break
                    buffer += chunk
                    while b"\n\n" in buffer:
                        event, buffer = buffer.split(b"\n\n", 1)
                        if self.canary_bytes in event:
                            self.interval.error("sse_canary_in_answer")
                        elif REDACTED not in event:
                            self.interval.error("sse_event_not_scrubbed", event[:120])
                        else:
                            self.interval.count("sse_events")
                        events += 1
                if self.canary_bytes in buffer:
                    self.interval.error("sse_canary_in_answer")
                if events != expected:
                    self.interval.error("sse_short_stream", f"{events} of {expected} events")
                else:
                    self.interval.count("sse_streams")
            except NETWORK_ERRORS as error:
                if self.stopping:
                    break
                self.interval.error(f"sse_{type(error).__name__}", f"after {events} events: {error!r}")
                self.disconnect(self.sse_conn.pop(n, None), "sse")
                conn = None
                await asyncio.sleep(1)

    async def lag_probe(self):
        """How late this process's event loop wakes up: the share of the latency that is the
        load generator's own."""
        loop = asyncio.get_running_loop()
        while not self.stopping:
            before = loop.time()
            await asyncio.sleep(0.01)
            self.interval.lag.append(loop.time() - before - 0.01)

    # Samples.

    def sockets(self, pid):
        """Mint's sockets by kind: inode -> (local port, remote port, state)."""
        table = {}
        for name in ("tcp", "tcp6"):
            try:
                lines = Path(f"/proc/{pid}/net/{name}").read_text().splitlines()[1:]
            except OSError:
                continue
            for line in lines:
                f = line.split()
                local, remote, state, inode = f[1], f[2], f[3], f[9]
                table[inode] = (int(local.rsplit(":", 1)[1], 16), int(remote.rsplit(":", 1)[1], 16), state)
        return table

    def descriptors(self, pid):
        fds = {"total": 0, "agent": 0, "upstream": 0, "listen": 0, "other_socket": 0, "file": 0,
               "anon": 0, "close_wait": 0}
        table = self.sockets(pid)
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            fds["total"] += 1
            if target.startswith("socket:["):
                entry = table.get(target[8:-1])
                if entry is None:
                    fds["other_socket"] += 1
                    continue
                local, remote, state = entry
                if state == TCP_LISTEN:
                    fds["listen"] += 1
                elif local == self.mint_port:
                    fds["agent"] += 1
                    fds["close_wait"] += state == TCP_CLOSE_WAIT
                elif remote in (self.up_http, self.up_https):
                    fds["upstream"] += 1
                else:
                    fds["other_socket"] += 1
            elif target.startswith("anon_inode:"):
                fds["anon"] += 1
            else:
                fds["file"] += 1
        # What is not a connection: must stay the same once warm.
        fds["steady"] = fds["total"] - fds["agent"] - fds["upstream"]
        return fds

    def threads(self, pid):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("Threads:"):
                return int(line.split()[1])
        return None

    async def sample(self, k, t, elapsed):
        pid = self.mint_proc.pid
        iv = self.interval
        self.interval = Interval()
        self.intervals.append(iv)
        fds = self.descriptors(pid)
        # A descriptor opened for a moment (a file read for a reload) is not a leak: look again
        # when the steady count moved, and keep the lower reading.
        if self.samples and fds["steady"] != self.samples[-1]["fds"]["steady"]:
            for _ in range(3):
                await asyncio.sleep(1)
                again = self.descriptors(pid)
                if again["steady"] < fds["steady"]:
                    fds = again
        rss, hwm = memory_kib([pid])
        cpu = cpu_ticks([pid]) / CLK_TCK
        own_cpu = cpu_ticks([os.getpid()]) / CLK_TCK
        lat = sorted(iv.latencies)
        self.all_latencies.extend(iv.latencies)
        lag = sorted(iv.lag)
        prev = self.samples[-1] if self.samples else None
        span = elapsed - (prev["elapsed"] if prev else 0.0)
        answered = sum(iv.counts.get(x, 0) for x in ("get", "post", "denied"))
        s = {
            "k": k,
            "minute": round(t / 60, 2),
            "elapsed": elapsed,
            "rss_kib": rss,
            "anon_kib": anon_kib([pid]),
            "hwm_kib": hwm,
            "threads": self.threads(pid),
            "fds": fds,
            "open_conns": dict(self.open_conns),
            "mint_cpu_s": cpu,
            "mint_cpu_pct": 100 * (cpu - (prev["mint_cpu_s"] if prev else 0)) / span,
            "load_cpu_pct": 100 * (own_cpu - (prev["load_cpu_s"] if prev else 0)) / span,
            "load_cpu_s": own_cpu,
            "counts": iv.counts,
            "errors": iv.errors,
            "requests": len(lat),
            "rps": answered / span,
            "p50_ms": 1000 * percentile(lat, 50) if lat else None,
            "p99_ms": 1000 * percentile(lat, 99) if lat else None,
            "max_ms": 1000 * lat[-1] if lat else None,
            "lag_p99_ms": 1000 * percentile(lag, 99) if lag else None,
            "lag_max_ms": 1000 * lag[-1] if lag else None,
            "slowest_due": datetime.datetime.fromtimestamp(iv.slowest_at, datetime.timezone.utc)
            .strftime("%H:%M:%S.%f")[:-3]
            if iv.slowest_at
            else None,
            "loadavg": load_average(),
            "reloads": self.reloads,
            "rotations": dict(self.rotations),
        }
        self.samples.append(s)
        print(
            f"[{s['minute']:6.1f} min] {s['rps']:6.0f} req/s  p50 {s['p50_ms'] or 0:6.2f} ms  "
            f"p99 {s['p99_ms'] or 0:7.2f} ms  max {s['max_ms'] or 0:8.1f} ms  errors {sum(iv.errors.values())}  "
            f"RSS {rss / 1024:6.1f} MiB  fds {fds['total']} (steady {fds['steady']}, agents {fds['agent']}, "
            f"upstream {fds['upstream']})  threads {s['threads']}  open {sum(self.open_conns.values())}  "
            f"mint CPU {s['mint_cpu_pct']:.0f}%  load CPU {s['load_cpu_pct']:.0f}%  "
            f"lag p99 {s['lag_p99_ms'] or 0:.1f} max {s['lag_max_ms'] or 0:.1f} ms  slowest due at "
            f"{s['slowest_due']} UTC  loadavg {s['loadavg']}",
            flush=True,
        )

    async def maintain(self):
        """A reload (both files rewritten, then SIGHUP) and an audit rotation."""
        self.generation += 1
        self.private("policy.yaml", self.policy_text())
        self.private("aliases.yaml", self.aliases_text())
        os.kill(self.mint_proc.pid, signal.SIGHUP)
        self.reloads += 1
        proc = await asyncio.create_subprocess_exec(
            self.mint_bin,
            "audit",
            "rotate",
            env=self.mint_env(),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await proc.communicate()
        text = (out + err).decode(errors="replace")
        if proc.returncode != 0:
            self.rotations["failed"] += 1
            self.interval.error("rotate_failed", text.strip())
        elif "the running broker started a new" in text:
            self.rotations["live"] += 1
        else:
            # Renamed, the broker had not started the next file within the command's 2 s: its
            # records keep going to the renamed file, in order; not an error, but counted.
            self.rotations["pending"] += 1
            print(f"rotation pending: {text.strip()}", flush=True)

    async def run_load(self):
        loop = asyncio.get_running_loop()
        args = self.args
        queue = asyncio.Queue()
        start = loop.time()
        end = start + args.duration
        tasks = [asyncio.create_task(self.worker(queue)) for _ in range(args.connections)]
        side = [asyncio.create_task(self.idle(n)) for n in range(args.idle_conns)]
        side += [asyncio.create_task(self.sse(n)) for n in range(args.sse_streams)]
        side.append(asyncio.create_task(self.lag_probe()))
        ticker = asyncio.create_task(self.ticker(queue, start, end))
        samples = int(round(args.duration / args.interval))
        for k in range(1, samples + 1):
            await asyncio.sleep(max(0.0, start + k * args.interval - loop.time()))
            if self.mint_proc.poll() is not None:
                raise RuntimeError(f"mint serve exited with status {self.mint_proc.returncode}")
            await self.sample(k, k * args.interval, loop.time() - start)
            if k < samples:
                await self.maintain()
        await ticker
        for _ in tasks:
            queue.put_nowait(None)
        # Requests still queued or in flight finish (and count) before the side loads stop.
        await asyncio.wait_for(asyncio.gather(*tasks), REQUEST_TIMEOUT * 2)
        self.stopping = True
        for task in side:
            task.cancel()
        await asyncio.gather(*side, return_exceptions=True)
        for conn_kind in self.open_conns:
            self.open_conns[conn_kind] = max(0, self.open_conns[conn_kind])
        leftover = self.interval
        if leftover.latencies or leftover.errors:
            # Answers that arrived after the last sample: counted in the totals.
            self.intervals.append(leftover)
            self.all_latencies.extend(leftover.latencies)

    # After the run.

    def stop_mint(self):
        proc = self.mint_proc
        os.kill(proc.pid, signal.SIGTERM)
        try:
            return proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            return None

    def scan_audit(self):
        files = sorted(
            self.home.glob("audit.log*"),
            key=lambda p: (p.name != "audit.log", int(p.suffix[1:]) if p.suffix[1:].isdigit() else 0),
        )
        files = [f for f in files if not f.name.endswith(".lock")]
        counts = {"files": len(files), "bytes": 0, "canary": 0, "policy_reloaded": 0,
                  "policy_reload_failed": 0, "decisions": 0, "lines": 0}
        needle = self.canary_bytes
        overlap = len(needle)
        for path in files:
            tail = b""
            with open(path, "rb") as f:
                while block := f.read(16 << 20):
                    counts["bytes"] += len(block)
                    counts["canary"] += (tail + block).count(needle) - tail.count(needle)
                    counts["policy_reloaded"] += block.count(b'"reason":"policy_reloaded"')
                    counts["policy_reload_failed"] += block.count(b'"reason":"policy_reload_failed"')
                    counts["decisions"] += block.count(b'"phase":"decision"')
                    counts["lines"] += block.count(b"\n")
                    tail = block[-overlap:]
        return counts

    def finish(self, exit_status):
        args = self.args
        checks = []

        def check(name, ok, detail):
            checks.append({"check": name, "ok": bool(ok), "detail": detail})
            print(f"{'PASS' if ok else 'FAIL'} {name}: {detail}", flush=True)

        warm = [s for s in self.samples if s["elapsed"] >= args.warmup - 1]
        totals = {}
        errors = {}
        for iv in self.intervals:
            for key, n in iv.counts.items():
                totals[key] = totals.get(key, 0) + n
            for key, n in iv.errors.items():
                errors[key] = errors.get(key, 0) + n
        check("no unexpected errors", not errors, f"{sum(errors.values())} errors {errors or ''}".strip())
        answered = totals.get("get", 0) + totals.get("post", 0) + totals.get("denied", 0)
        check(
            "the load was served",
            answered >= 0.99 * totals.get("scheduled", 1),
            f"{answered:,} of {totals.get('scheduled', 0):,} scheduled requests answered as "
            f"expected ({totals.get('denied', 0):,} of them denied by policy, 403 as expected); "
            f"{totals.get('idle', 0):,} on idle connections; {totals.get('sse_events', 0):,} "
            f"events in {totals.get('sse_streams', 0):,} finished streams",
        )
        if warm:
            base = warm[0]
            bound = base["rss_kib"] + max(base["rss_kib"] * args.rss_growth_pct / 100, args.rss_growth_mib * 1024)
            top = max(warm, key=lambda s: s["rss_kib"])
            slope = slope_kib_per_min(warm)
            req_per_min = statistics_mean([s["rps"] for s in warm]) * 60
            per_request = slope * 1024 / req_per_min if req_per_min else 0
            check(
                "RSS bounded after the warm-up",
                top["rss_kib"] <= bound,
                f"{base['rss_kib'] / 1024:.1f} MiB at {base['minute']:.1f} min, highest "
                f"{top['rss_kib'] / 1024:.1f} MiB at {top['minute']:.1f} min, last "
                f"{warm[-1]['rss_kib'] / 1024:.1f} MiB, bound {bound / 1024:.1f} MiB; trend "
                f"{slope:+.1f} KiB/min ({per_request:+.3f} bytes per request)",
            )
            steady = sorted({s["fds"]["steady"] for s in warm})
            check(
                "descriptors other than connections constant after the warm-up",
                len(steady) == 1,
                f"{steady} (total {min(s['fds']['total'] for s in warm)}–"
                f"{max(s['fds']['total'] for s in warm)}, the rest connections)",
            )
            slack = args.connections + 16
            over = [
                s for s in self.samples
                if s["fds"]["agent"] > sum(s["open_conns"].values()) + slack
            ]
            check(
                "no agent connection left behind",
                not over,
                f"Mint's sockets towards agents ≤ the load's open connections + {slack} at every "
                f"sample (largest excess "
                f"{max(s['fds']['agent'] - sum(s['open_conns'].values()) for s in self.samples)}; "
                f"CLOSE_WAIT at most {max(s['fds']['close_wait'] for s in self.samples)})",
            )
        else:
            check("a sample after the warm-up", False, "the run was shorter than the warm-up")
        check(
            "every rotation done",
            self.rotations["failed"] == 0,
            f"{self.rotations['live']} rotated live, {self.rotations['pending']} pending at 2 s, "
            f"{self.rotations['failed']} failed",
        )
        check("mint serve exits 0 on SIGTERM", exit_status == 0, f"exit status {exit_status}")
        verify = self.mint("audit", "verify", check=False, timeout=3600)
        last = [l for l in verify.stdout.splitlines() if l.startswith(("intact", "broken"))]
        check(
            "audit chain verifies across rotations",
            verify.returncode == 0,
            f"`mint audit verify` exit {verify.returncode}: {last[-1] if last else verify.stderr.strip()[:200]}",
        )
        audit = self.scan_audit()
        check(
            "every reload applied",
            audit["policy_reloaded"] >= self.reloads and audit["policy_reload_failed"] == 0,
            f"{self.reloads} reloads, {audit['policy_reloaded']} policy_reloaded events, "
            f"{audit['policy_reload_failed']} policy_reload_failed",
        )
        check(
            "rotated files",
            audit["files"] >= self.rotations["live"] + self.rotations["pending"] + 1,
            f"{audit['files']} files, {audit['bytes'] / 2**20:,.0f} MiB, {audit['lines']:,} lines, "
            f"{audit['decisions']:,} decisions",
        )
        log = self.mint_log.read_bytes()
        leaks = {
            "audit files": audit["canary"],
            "Mint's stderr": log.count(self.canary_bytes),
            "verify output": (verify.stdout + verify.stderr).count(self.canary),
        }
        check("canary absent", not any(leaks.values()), f"occurrences: {leaks}")
        return checks, totals, errors, audit

    def run(self):
        args = self.args
        meta = {
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": f"{platform.machine()}, {os.cpu_count()} cores, Linux {platform.release()}",
            "load_before": load_average(),
            "settings": {k: v for k, v in vars(args).items() if k != "work"},
        }
        try:
            os.sched_setaffinity(0, {int(self.load_core)})
        except OSError:
            pass
        if self.nice and self.nice != "0":
            try:
                os.setpriority(os.PRIO_PROCESS, 0, int(self.nice))
            except OSError:
                pass
        exit_status = None
        try:
            self.start_upstream()
            self.start_mint()
            meta["version"] = mint_version(types.SimpleNamespace(mint=self.mint_bin))
            print(
                f"soak: {args.duration / 60:.1f} min at {args.rate} req/s, {args.connections} "
                f"pool connections, {args.idle_conns} idle connections, {args.sse_streams} event "
                f"streams; sample, reload and rotate every {args.interval:.0f} s; warm-up "
                f"{args.warmup / 60:.1f} min; work in {self.work}",
                flush=True,
            )
            gc.freeze()
            asyncio.run(self.run_load())
            exit_status = self.stop_mint()
            meta["load_after"] = load_average()
            checks, totals, errors, audit = self.finish(exit_status)
        finally:
            self.procs.stop_all()
        lat = sorted(self.all_latencies)
        meta["overall"] = {
            "requests": len(lat),
            "p50_ms": 1000 * percentile(lat, 50) if lat else None,
            "p99_ms": 1000 * percentile(lat, 99) if lat else None,
            "p999_ms": 1000 * percentile(lat, 99.9) if lat else None,
            "max_ms": 1000 * lat[-1] if lat else None,
        }
        ok = all(c["ok"] for c in checks)
        self.write(meta, checks, totals, errors, audit, ok)
        return ok

    # Output.

    def write(self, meta, checks, totals, errors, audit, ok):
        out = Path(self.args.out)
        out.mkdir(parents=True, exist_ok=True)
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        base = out / f"soak-{stamp}"
        data = {"meta": meta, "checks": checks, "totals": totals, "errors": errors,
                "audit": audit, "samples": self.samples, "passed": ok}
        base.with_suffix(".json").write_text(json.dumps(data, indent=1))
        columns = ["minute", "rps", "requests", "p50_ms", "p99_ms", "max_ms", "slowest_due", "lag_p99_ms", "lag_max_ms", "rss_kib",
                   "anon_kib", "threads", "mint_cpu_pct", "load_cpu_pct", "loadavg"]
        fd_columns = ["total", "steady", "agent", "upstream", "listen", "file", "anon", "other_socket", "close_wait"]
        with open(base.with_suffix(".csv"), "w") as f:
            f.write(",".join(columns + [f"fds_{c}" for c in fd_columns] + ["open_conns", "errors"]) + "\n")
            for s in self.samples:
                row = [fmt_num(s[c]) for c in columns] + [str(s["fds"][c]) for c in fd_columns]
                row += [str(sum(s["open_conns"].values())), str(sum(s["errors"].values()))]
                f.write(",".join(row) + "\n")
        svg = base.with_suffix(".svg")
        svg.write_text(plot(self.samples, self.args))
        if self.args.svg:
            Path(self.args.svg).write_text(svg.read_text())
        report = self.report(meta, checks, totals, audit, ok)
        base.with_suffix(".md").write_text(report)
        print()
        print(report)
        print(f"written to {base}.{{json,csv,svg,md}}")

    def report(self, meta, checks, totals, audit, ok):
        args = self.args
        lines = [
            f"# Mint soak — {meta['date']}: {'PASSED' if ok else 'FAILED'}",
            "",
            f"{args.duration / 60:.0f} min at {args.rate:,} requests/s through `mint serve` "
            f"({meta.get('version', '?')}), {args.idle_conns} idle keep-alive connections, "
            f"{args.sse_streams} event streams, a reload and an audit rotation every "
            f"{args.interval:.0f} s. Machine: {meta['machine']}; load average "
            f"{meta['load_before']} at start, {meta.get('load_after', '?')} at end.",
            "",
            f"Overall latency (from the moment each request was due): p50 "
            f"{fmt_num(meta['overall']['p50_ms'])} ms, p99 {fmt_num(meta['overall']['p99_ms'])} ms, "
            f"p99.9 {fmt_num(meta['overall']['p999_ms'])} ms, max {fmt_num(meta['overall']['max_ms'])} ms "
            f"over {meta['overall']['requests']:,} requests.",
            "",
            "| minutes | req/s | p50 ms | p99 ms | max ms | errors | RSS MiB | RssAnon MiB | fds (steady + connections) | agent / upstream sockets | threads | Mint CPU % | load avg |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        every = max(1, int(round(args.table_every / args.interval)))
        for i in range(0, len(self.samples), every):
            group = self.samples[i : i + every]
            ivs = self.intervals[i : i + every]
            lat = sorted(x for iv in ivs for x in iv.latencies)
            last = group[-1]
            first_minute = round(group[0]["minute"] - args.interval / 60, 2)
            lines.append(
                f"| {first_minute:g}–{last['minute']:g} | "
                f"{sum(s['rps'] for s in group) / len(group):,.0f} | "
                f"{fmt_num(1000 * percentile(lat, 50) if lat else None)} | "
                f"{fmt_num(1000 * percentile(lat, 99) if lat else None)} | "
                f"{fmt_num(1000 * lat[-1] if lat else None)} | "
                f"{sum(sum(s['errors'].values()) for s in group)} | "
                f"{last['rss_kib'] / 1024:.1f} | {last['anon_kib'] / 1024:.1f} | "
                f"{last['fds']['total']} ({last['fds']['steady']} + {last['fds']['total'] - last['fds']['steady']}) | "
                f"{last['fds']['agent']} / {last['fds']['upstream']} | {last['threads']} | "
                f"{sum(s['mint_cpu_pct'] for s in group) / len(group):.0f} | {last['loadavg']} |"
            )
        lines += ["", "Checks:", ""]
        for c in checks:
            lines.append(f"- {'**pass**' if c['ok'] else '**FAIL**'} {c['check']}: {c['detail']}")
        return "\n".join(lines) + "\n"


def statistics_mean(values):
    return sum(values) / len(values) if values else 0.0


def slope_kib_per_min(samples):
    """Least-squares slope of VmRSS over time, KiB per minute."""
    if len(samples) < 2:
        return 0.0
    xs = [s["minute"] for s in samples]
    ys = [s["rss_kib"] for s in samples]
    mx, my = statistics_mean(xs), statistics_mean(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / den if den else 0.0


def fmt_num(value):
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.2f}" if abs(value) < 100 else f"{value:.0f}"
    return str(value)


def plot(samples, args):
    """An SVG of three panels over time: VmRSS (with the bound's baseline), descriptors (all,
    and those that are not connections) and latency p50/p99 per interval."""
    width, panel_h, left, right, top, gap = 760, 170, 70, 20, 56, 50
    height = top + 3 * panel_h + 2 * gap + 40
    end = max([s["minute"] for s in samples] + [args.duration / 60])
    x_of = lambda m: left + (width - left - right) * m / end  # noqa: E731
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="{left}" y="20" font-size="13">Mint soak: {args.rate:,} req/s, '
        f'{args.idle_conns} idle connections, {args.sse_streams} event streams, reload and '
        f'rotation every {args.interval:.0f} s</text>',
    ]
    panels = [
        ("VmRSS (MiB)", [("RSS", "#1f77b4", [s["rss_kib"] / 1024 for s in samples]),
                         ("RssAnon", "#aec7e8", [s["anon_kib"] / 1024 for s in samples])]),
        ("open descriptors", [("all", "#2ca02c", [s["fds"]["total"] for s in samples]),
                              ("not connections", "#98df8a", [s["fds"]["steady"] for s in samples])]),
        ("latency (ms)", [("p99", "#d62728", [s["p99_ms"] or 0 for s in samples]),
                          ("p50", "#ff9896", [s["p50_ms"] or 0 for s in samples])]),
    ]
    minutes = [s["minute"] for s in samples]
    # The RSS bound of the check, from the sample at the end of the warm-up.
    warm = [s for s in samples if s["elapsed"] >= args.warmup - 1]
    bound = None
    if warm:
        base = warm[0]["rss_kib"]
        bound = (base + max(base * args.rss_growth_pct / 100, args.rss_growth_mib * 1024)) / 1024
    for i, (title, series) in enumerate(panels):
        y0 = top + i * (panel_h + gap)
        extra = [bound] if i == 0 and bound else []
        top_value = max([v for _, _, values in series for v in values] + extra + [1]) * 1.1
        y_of = lambda v: y0 + panel_h - panel_h * v / top_value  # noqa: E731, B023
        out.append(f'<rect x="{left}" y="{y0}" width="{width - left - right}" height="{panel_h}" fill="none" stroke="#999"/>')
        warm_x = x_of(args.warmup / 60)
        out.append(f'<rect x="{left}" y="{y0}" width="{warm_x - left:.1f}" height="{panel_h}" fill="#eee"/>')
        out.append(f'<text x="{left + 4}" y="{y0 + 12}" fill="#777">warm-up</text>')
        out.append(f'<text x="{left}" y="{y0 - 6}" font-weight="bold">{title}</text>')
        for frac in (0, 0.5, 1):
            v = top_value * frac
            out.append(f'<text x="{left - 6}" y="{y_of(v) + 4:.1f}" text-anchor="end">{v:,.1f}</text>')
            out.append(f'<line x1="{left}" x2="{width - right}" y1="{y_of(v):.1f}" y2="{y_of(v):.1f}" stroke="#ddd"/>')
        legend_x = left + 170
        for j, (name, color, values) in enumerate(series):
            points = " ".join(f"{x_of(m):.1f},{y_of(v):.1f}" for m, v in zip(minutes, values))
            out.append(f'<polyline points="{points}" fill="none" stroke="{color}" stroke-width="1.8"/>')
            out.append(f'<text x="{legend_x + j * 130}" y="{y0 - 6}" fill="{color}">■ {name}</text>')
        if extra:
            y = y_of(bound)
            out.append(f'<line x1="{warm_x:.1f}" x2="{width - right}" y1="{y:.1f}" y2="{y:.1f}" stroke="#d62728" stroke-dasharray="5,4"/>')
            out.append(f'<text x="{legend_x + len(series) * 130}" y="{y0 - 6}" fill="#d62728">- - bound of the check</text>')
        axis_y = y0 + panel_h + 14
        ticks = max(1, int(end // 6)) if end >= 6 else end / 6
        m = 0.0
        while m <= end + 1e-9:
            out.append(f'<text x="{x_of(m):.1f}" y="{axis_y}" text-anchor="middle">{m:g}</text>')
            m += ticks
    out.append(f'<text x="{width / 2}" y="{height - 8}" text-anchor="middle">minutes</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=parse_duration, default=parse_duration(os.environ.get("SOAK_DURATION", "1h")))
    parser.add_argument("--rate", type=int, default=int(os.environ.get("SOAK_RATE", "1000")))
    parser.add_argument("--interval", type=parse_duration, default=None,
                        help="sample, reload and rotate this often (60s; a sixth of shorter runs)")
    parser.add_argument("--warmup", type=parse_duration, default=None,
                        help="growth is measured from the end of this (5m; a third of runs under 15 min)")
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--idle-conns", type=int, default=300)
    parser.add_argument("--idle-every", type=parse_duration, default=12.0)
    parser.add_argument("--sse-streams", type=int, default=50)
    parser.add_argument("--sse-seconds", type=int, default=None, help="events per stream, one a second (300)")
    parser.add_argument("--rss-growth-pct", type=float, default=20.0)
    parser.add_argument("--rss-growth-mib", type=float, default=16.0)
    parser.add_argument("--table-every", type=parse_duration, default=None, help="rows of the table (10m)")
    parser.add_argument("--out", default=os.environ.get("BENCH_OUT", str(ROOT / "target" / "soak")))
    parser.add_argument("--svg", help="also write the plot here (e.g. docs/soak.svg)")
    parser.add_argument("--work", default=None)
    parser.add_argument("--plot-from", metavar="JSON",
                        help="only draw the plot of an earlier run (its .json) to --svg")
    args = parser.parse_args()
    if args.plot_from:
        data = json.loads(Path(args.plot_from).read_text())
        settings = types.SimpleNamespace(**data["meta"]["settings"])
        svg = Path(args.svg or Path(args.plot_from).with_suffix(".svg"))
        svg.write_text(plot(data["samples"], settings))
        print(f"written to {svg}")
        return
    if args.interval is None:
        args.interval = 60.0 if args.duration >= 600 else max(5.0, args.duration / 6)
    if args.warmup is None:
        args.warmup = 300.0 if args.duration >= 900 else args.duration / 3
    if args.sse_seconds is None:
        args.sse_seconds = 300 if args.duration >= 900 else max(5, int(args.duration / 4))
    if args.table_every is None:
        args.table_every = 600.0 if args.duration >= 3600 else args.duration / 6
    keep = args.work is not None
    args.work = args.work or tempfile.mkdtemp(prefix="mint-soak-")

    def on_signal(signum, _frame):
        raise SystemExit(f"stopped by signal {signum}")

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, on_signal)
    soak = Soak(args)
    try:
        ok = soak.run()
    finally:
        if not keep and os.environ.get("BENCH_KEEP_WORK", "0") != "1":
            shutil.rmtree(args.work, ignore_errors=True)
        else:
            print(f"work directory kept: {args.work}", file=sys.stderr)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
