#!/usr/bin/env python3
"""The comparison benchmark of docs/performance.md: direct, nginx, mitmproxy and Mint in front of
the same upstream, on loopback, interleaved, repeated, medians of rounds, ratios.

Run it through `bash bench/run.sh`, which installs what it needs and builds the binaries; this
script only measures. It expects on PATH (or in the environment): wrk, nginx, taskset, and
BENCH_MINT, BENCH_UPSTREAM, BENCH_MITMDUMP pointing at the binaries.

What it does, in order:

1. Starts the upstream (`bench_upstream`, plain HTTP and TLS, requiring `Authorization: Bearer
   SECRET`) and every contender, each pinned with taskset to the server core; wrk runs pinned to
   the load core. Contenders: `direct` (wrk to the upstream, sending the secret itself), `nginx`
   (reverse proxy setting the header, upstream keepalive), `mitmproxy` (mitmdump in reverse mode
   with an addon replacing the placeholder), `mint-interval` and `mint-always` (`mint serve`
   with a 100-rule policy, `{{mint:bench}}` in the Authorization header, audit durability
   `interval` and `always`).
2. Memory: for each freshly started contender, RSS at start, after one request, and with
   BENCH_IDLE_CONNS (1,000) connections open and idle, each having made one request.
3. Load: for each round, for each scenario, every contender in turn (the order rotates between
   rounds), one wrk run of BENCH_DURATION seconds; CPU time of the contender's processes and of
   the upstream from /proc/PID/stat (utime + stime) before and after, and the contender's share
   of it in the kernel (stime) and context switches (voluntary and involuntary, summed over its
   threads from /proc/PID/task/*/status).
4. Medians over rounds; latency added over direct and CPU ratios are computed per round (same
   conditions) before taking the median. Prints the tables and writes them to BENCH_OUT.

Every process it starts is in a list and is stopped on exit, on an exception or on a signal.
"""

import argparse
import base64
import datetime
import http.client
import json
import os
import platform
import re
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
# Shaped like a real token (random characters): it must share no 8-byte window with the
# upstream's answers, or Mint's scrubber prefilter would send every byte through its automaton.
SECRET = "mint_bench_7Qx9KpZ2wLr4Tf8VnB3cYh6Jd1Gs5Mq0Ue"
PLACEHOLDER = "{{mint:bench}}"
AGENT = "bench-agent"
CLK_TCK = os.sysconf("SC_CLK_TCK")

ALL_CONTENDERS = ["direct", "nginx", "mitmproxy", "mint-interval", "mint-always"]

# name: (answer, upstream over TLS, connections, delay per connection in ms)
ALL_SCENARIOS = {
    "c1": ("1k", False, 1, 0),
    "c16": ("1k", False, 16, 0),
    "c256": ("1k", False, 256, 0),
    "c16-64k": ("64k", False, 16, 0),
    "c16-tls": ("1k", True, 16, 0),
    "c16-tls-64k": ("64k", True, 16, 0),
    # About 1,000 requests/s: 4 connections, each waiting 4 ms after every answer.
    "rate1000": ("1k", False, 4, 4),
    # HTTPS interception (bench_connect, not wrk): the client speaks TLS to the upstream's name
    # through the proxy's CONNECT; `direct` is the same client speaking TLS to the upstream itself.
    "connect-c16": ("1k", True, 16, 0),
    # A new connection per request: TCP, CONNECT, a full TLS handshake (no resumption), one
    # request. Against `direct`'s plain TLS handshake to the upstream.
    "connect-new": ("1k", True, 4, 0),
}

# The scenarios bench_connect drives: name -> a new connection per request.
CONNECT_SCENARIOS = {"connect-c16": False, "connect-new": True}

SCENARIO_TEXT = {
    "c1": "1 KiB, http upstream, 1 connection",
    "c16": "1 KiB, http upstream, 16 connections",
    "c256": "1 KiB, http upstream, 256 connections",
    "c16-64k": "64 KiB, http upstream, 16 connections",
    "c16-tls": "1 KiB, https upstream, 16 connections",
    "c16-tls-64k": "64 KiB, https upstream, 16 connections",
    "rate1000": "1 KiB, http upstream, ~1,000 requests/s (4 connections, 4 ms pause)",
    "connect-c16": "1 KiB, HTTPS through CONNECT (intercepted), 16 kept-alive connections",
    "connect-new": "1 KiB, HTTPS through CONNECT (intercepted), a new connection and full "
    "handshake per request, 4 at a time",
}


def env_int(name, default):
    value = os.environ.get(name, "")
    return int(value) if value.strip() else default


def env_float(name, default):
    value = os.environ.get(name, "")
    return float(value) if value.strip() else default


# --- processes -------------------------------------------------------------------------------


class Processes:
    """Every process started, stopped in reverse order by `stop_all`."""

    def __init__(self, pidfile):
        self.started = []
        self.pidfile = pidfile

    def start(self, name, argv, log, env=None, stdout=None):
        out = open(log, "ab")
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=stdout if stdout is not None else out,
            stderr=out,
            env=env,
            start_new_session=True,
        )
        self.started.append((name, proc))
        with open(self.pidfile, "a") as f:
            f.write(f"{proc.pid}\n")
        return proc

    def stop(self, proc, grace=5.0):
        if proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(timeout=grace)

    def stop_all(self):
        for _, proc in reversed(self.started):
            try:
                self.stop(proc)
            except Exception as error:  # keep stopping the others
                print(f"warning: could not stop {proc.pid}: {error}", file=sys.stderr)
        self.started = []


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, proc, what, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with status {proc.returncode} before listening")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{what} did not listen on port {port} within {timeout} s")


_pending = {}


def read_line(proc, what, timeout=60.0):
    """The next line of a child's stdout pipe, with a bound (unbuffered reads, so a line that
    arrived with the previous one is not lost in a buffer)."""
    import select

    fd = proc.stdout.fileno()
    buffer = _pending.get(fd, b"")
    deadline = time.monotonic() + timeout
    while b"\n" not in buffer:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} printed nothing within {timeout} s")
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            chunk = os.read(fd, 4096)
            if not chunk:
                raise RuntimeError(f"{what} closed its output (exit status {proc.poll()})")
            buffer += chunk
        elif proc.poll() is not None:
            raise RuntimeError(f"{what} exited with status {proc.returncode}")
    line, _, rest = buffer.partition(b"\n")
    _pending[fd] = rest
    return line.decode().strip()


def children(pid):
    found = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            text = Path(f"/proc/{pid}/task/{task}/children").read_text()
            found.extend(int(p) for p in text.split())
    except OSError:
        pass
    return found


def cpu_ticks(pids):
    total = 0
    for pid in pids:
        text = Path(f"/proc/{pid}/stat").read_text()
        fields = text[text.rindex(")") + 2 :].split()
        # Fields 14 and 15 of stat(5), counted after the command name: utime, stime.
        total += int(fields[11]) + int(fields[12])
    return total


def kernel_ticks(pids):
    """stime summed over `pids`: the CPU time spent in the kernel on their behalf."""
    total = 0
    for pid in pids:
        text = Path(f"/proc/{pid}/stat").read_text()
        total += int(text[text.rindex(")") + 2 :].split()[12])
    return total


def context_switches(pids):
    """(voluntary, involuntary) context switches summed over every thread of `pids`: a thread
    that blocks (epoll_wait with nothing ready, a lock) switches voluntarily; one the scheduler
    takes the core from (a woken process preempting it) involuntarily."""
    voluntary = involuntary = 0
    for pid in pids:
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                lines = Path(f"/proc/{pid}/task/{task}/status").read_text().splitlines()
            except OSError:
                continue  # a thread that ended between the listing and the read
            for line in lines:
                if line.startswith("voluntary_ctxt_switches:"):
                    voluntary += int(line.split()[1])
                elif line.startswith("nonvoluntary_ctxt_switches:"):
                    involuntary += int(line.split()[1])
    return voluntary, involuntary


def memory_kib(pids):
    """VmRSS and VmHWM summed over `pids`, in KiB."""
    rss = hwm = 0
    for pid in pids:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                rss += int(line.split()[1])
            elif line.startswith("VmHWM:"):
                hwm += int(line.split()[1])
    return rss, hwm


def anon_kib(pids):
    """RssAnon summed over `pids`: the process's own memory, without the mapped binary and
    libraries (file pages the kernel can drop and shares between processes), in KiB."""
    total = 0
    for pid in pids:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("RssAnon:"):
                total += int(line.split()[1])
    return total


def pss_kib(pids):
    """Proportional set size summed over `pids` (pages shared between nginx's master and worker
    counted once), in KiB."""
    total = 0
    for pid in pids:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                total += int(line.split()[1])
    return total


# --- the setup -------------------------------------------------------------------------------


def pin_argv(argv, core, nice):
    """`argv` pinned to `core` with taskset, under `nice -n NICE` when `nice` is set (not "0")."""
    pinned = ["taskset", "-c", core, *argv]
    if nice and nice != "0":
        pinned = ["nice", "-n", nice, *pinned]
    return pinned


def start_bench_upstream(procs, pin, binary, work, secret, max_seconds):
    """Starts tests/src/bin/bench_upstream.rs (through `pin`, which places it on a core),
    accepting only `Authorization: Bearer SECRET`, for at most `max_seconds`. Returns the
    process, the path of its CA certificate, and its HTTP and HTTPS ports (the two lines it
    prints when it listens)."""
    ca = work / "upstream-ca.pem"
    proc = procs.start(
        "upstream",
        pin(
            [
                binary,
                "--ca-out",
                str(ca),
                "--require-auth",
                f"Bearer {secret}",
                "--max-seconds",
                str(int(max_seconds)),
            ]
        ),
        work / "upstream.log",
        stdout=subprocess.PIPE,
    )
    http_port = int(read_line(proc, "bench_upstream").split()[1])
    https_port = int(read_line(proc, "bench_upstream").split()[1])
    return proc, ca, http_port, https_port


class Bench:
    def __init__(self, args):
        self.args = args
        self.work = Path(args.work)
        self.work.mkdir(parents=True, exist_ok=True)
        self.procs = Processes(self.work / "pids")
        self.mint = os.environ["BENCH_MINT"]
        self.upstream_bin = os.environ["BENCH_UPSTREAM"]
        self.connect_bin = os.environ.get("BENCH_CONNECT")
        self.mitmdump = os.environ.get("BENCH_MITMDUMP", "mitmdump")
        self.server_core = os.environ.get("BENCH_SERVER_CORE", "1")
        self.load_core = os.environ.get("BENCH_LOAD_CORE", "0")
        # Builds and tests of other people share these cores: as root, the benchmark's processes
        # run at a higher priority (nice -10) so that they get the CPU they ask for.
        default_nice = "-10" if os.geteuid() == 0 else "0"
        self.nice = os.environ.get("BENCH_NICE", default_nice)
        if self.nice == "0":
            self.nice = None
        self.contenders = {}
        self.versions = {}

    def pin(self, argv, core=None):
        """`argv` pinned to a core (the server core by default), at the benchmark's priority."""
        return pin_argv(argv, core or self.server_core, self.nice)

    # The upstream.

    def start_upstream(self):
        self.upstream, self.ca, self.up_http, self.up_https = start_bench_upstream(
            self.procs, self.pin, self.upstream_bin, self.work, SECRET, 3600
        )

    # The contenders: each has `urls` (scenario answer, tls) -> URL, `headers`, and `pids()`.

    def start_direct(self):
        def url(answer, tls):
            if tls:
                return f"https://127.0.0.1:{self.up_https}/{answer}"
            return f"http://127.0.0.1:{self.up_http}/{answer}"

        self.contenders["direct"] = Contender(
            "direct",
            url,
            [f"Authorization: Bearer {SECRET}"],
            lambda: [self.upstream.pid],
            # No proxy: TLS straight to the upstream, the baseline of the CONNECT scenarios.
            connect=Connect(None, None, f"127.0.0.1:{self.up_https}", self.ca),
        )

    def start_nginx(self):
        base = self.work / "nginx"
        for sub in ["", "temp"]:
            (base / sub).mkdir(parents=True, exist_ok=True)
        port = free_port()
        user = "user nobody nogroup;\n" if os.geteuid() == 0 else ""
        access_log = (
            f"access_log {base / 'access.log'};"
            if os.environ.get("BENCH_NGINX_ACCESS_LOG", "on") == "on"
            else "access_log off;"
        )
        temp = base / "temp"
        conf = f"""# Written by bench/compare.py.
{user}worker_processes 1;
daemon off;
pid {base / 'nginx.pid'};
error_log {base / 'error.log'} warn;
worker_rlimit_nofile 16384;
events {{ worker_connections 8192; }}
http {{
  {access_log}
  client_body_temp_path {temp}/body;
  proxy_temp_path {temp}/proxy;
  fastcgi_temp_path {temp}/fastcgi;
  uwsgi_temp_path {temp}/uwsgi;
  scgi_temp_path {temp}/scgi;
  upstream bench_http {{ server 127.0.0.1:{self.up_http}; keepalive 256; }}
  upstream bench_https {{ server 127.0.0.1:{self.up_https}; keepalive 256; }}
  proxy_http_version 1.1;
  proxy_set_header Connection "";
  proxy_set_header Authorization "Bearer {SECRET}";
  proxy_buffers 32 8k;
  proxy_max_temp_file_size 0;
  server {{
    listen 127.0.0.1:{port};
    location /http/ {{ proxy_pass http://bench_http/; }}
    location /https/ {{
      proxy_pass https://bench_https/;
      proxy_ssl_verify on;
      proxy_ssl_trusted_certificate {self.ca};
      proxy_ssl_name localhost;
      proxy_ssl_server_name on;
      proxy_ssl_session_reuse on;
    }}
  }}
}}
"""
        (base / "nginx.conf").write_text(conf)
        proc = self.procs.start(
            "nginx",
            self.pin(
                [
                    "nginx",
                    "-p",
                    str(base),
                    "-c",
                    str(base / "nginx.conf"),
                    "-e",
                    str(base / "error.log"),
                ]
            ),
            self.work / "nginx.log",
        )
        wait_port(port, proc, "nginx")

        def url(answer, tls):
            return f"http://127.0.0.1:{port}/{'https' if tls else 'http'}/{answer}"

        self.contenders["nginx"] = Contender(
            "nginx", url, [], lambda: [proc.pid, *children(proc.pid)]
        )

    def start_mitmproxy(self):
        conf = self.work / "mitmproxy"
        conf.mkdir(exist_ok=True)
        p_http, p_https, p_regular = free_port(), free_port(), free_port()
        env = dict(os.environ, BENCH_SECRET=SECRET)
        proc = self.procs.start(
            "mitmproxy",
            self.pin(
                [
                    self.mitmdump,
                    "--listen-host",
                    "127.0.0.1",
                    "--mode",
                    f"reverse:http://127.0.0.1:{self.up_http}@{p_http}",
                    "--mode",
                    f"reverse:https://127.0.0.1:{self.up_https}@{p_https}",
                    # An HTTP proxy intercepting CONNECT with its own CA (the CONNECT scenarios).
                    "--mode",
                    f"regular@{p_regular}",
                    "--set",
                    f"confdir={conf}",
                    "--set",
                    f"ssl_verify_upstream_trusted_ca={self.ca}",
                    "--set",
                    "flow_detail=0",
                    "--set",
                    "termlog_verbosity=warn",
                    "-s",
                    str(ROOT / "bench" / "mitm_addon.py"),
                ]
            ),
            self.work / "mitmproxy.log",
            env=env,
        )
        wait_port(p_http, proc, "mitmdump", timeout=60)
        wait_port(p_https, proc, "mitmdump", timeout=60)
        wait_port(p_regular, proc, "mitmdump", timeout=60)

        def url(answer, tls):
            return f"http://127.0.0.1:{p_https if tls else p_http}/{answer}"

        self.contenders["mitmproxy"] = Contender(
            "mitmproxy",
            url,
            [f"Authorization: Bearer {PLACEHOLDER}"],
            lambda: [proc.pid],
            # mitmproxy writes its CA into its confdir at first start.
            connect=Connect(
                f"127.0.0.1:{p_regular}",
                None,
                f"127.0.0.1:{self.up_https}",
                conf / "mitmproxy-ca-cert.pem",
            ),
        )

    def start_mint(self, durability, name=None, binary=None):
        """`mint serve` with `durability`; `name` and `binary` default to `mint-DURABILITY` and
        BENCH_MINT (`base-DURABILITY` runs BENCH_MINT_BASE, an older build measured beside it)."""
        name = name or f"mint-{durability}"
        mint = binary or self.mint
        home = self.work / name
        if home.exists():
            shutil.rmtree(home)
        (home / "secrets").mkdir(parents=True)
        os.chmod(home, 0o700)
        os.chmod(home / "secrets", 0o700)

        def private(rel, text):
            path = home / rel
            path.write_text(text)
            os.chmod(path, 0o600)

        private("secrets/bench", SECRET)
        private(
            "aliases.yaml",
            "aliases:\n"
            "  - name: bench\n"
            "    description: the benchmark upstream's token\n"
            "    hosts: [127.0.0.1]\n"
            "    sites: [header]\n"
            f"    source: file:{home / 'secrets' / 'bench'}\n",
        )
        private("policy.yaml", policy_text(self.up_http, self.up_https))
        private("capabilities.yaml", "version: 1\ncapabilities: []\n")
        env = {k: v for k, v in os.environ.items() if not k.startswith("MINT_")}
        env.update(
            MINT_HOME=str(home),
            MINT_KEYRING_BACKEND="keyutils",
            MINT_AUDIT_DURABILITY=durability,
        )
        check = subprocess.run(
            [mint, "policy", "check"], env=env, capture_output=True, text=True
        )
        if check.returncode != 0:
            raise RuntimeError(f"the benchmark policy does not check:\n{check.stdout}{check.stderr}")
        issued = subprocess.run(
            [mint, "cap", "issue", "--agent", AGENT, "--ttl", "2h"],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        token = next(w for w in issued.stdout.split() if w.startswith("mint_cap_"))
        serve = [mint, "serve", "--listen", "127.0.0.1:0", "--upstream-ca", str(self.ca)]
        if getattr(self.args, "callgrind", None) == name:
            # Instruction counts: instrumentation starts switched off and is switched on for
            # the measured run only (`callgrind_control -i on`).
            serve = [
                "valgrind",
                "--tool=callgrind",
                "--instr-atstart=no",
                f"--callgrind-out-file={Path(self.args.out) / f'callgrind-{name}.out'}",
                *serve,
            ]
        proc = self.procs.start(
            name,
            self.pin(serve),
            self.work / f"{name}.log",
            env=env,
            stdout=subprocess.PIPE,
        )
        line = read_line(proc, "mint serve")
        addr = line.removeprefix("listening on http://")

        def url(answer, tls):
            if tls:
                return f"http://{addr}/v1/proxy/https/127.0.0.1:{self.up_https}/{answer}"
            return f"http://{addr}/v1/proxy/http/127.0.0.1:{self.up_http}/{answer}"

        basic = base64.b64encode(f"{AGENT}:{token}".encode()).decode()
        self.contenders[name] = Contender(
            name,
            url,
            [f"Mint-Capability: {token}", f"Authorization: Bearer {PLACEHOLDER}"],
            lambda: [proc.pid],
            # `mint serve` made its CA at first start, in the home.
            connect=Connect(
                addr, f"Basic {basic}", f"127.0.0.1:{self.up_https}", home / "ca.pem"
            ),
            connect_headers=[f"Authorization: Bearer {PLACEHOLDER}"],
        )

    def start(self, names):
        self.start_upstream()
        for name in names:
            if name == "direct":
                self.start_direct()
            elif name == "nginx":
                self.start_nginx()
            elif name == "mitmproxy":
                self.start_mitmproxy()
            elif name.startswith("mint-"):
                self.start_mint(name.removeprefix("mint-"))
            elif name.startswith("base-"):
                base = os.environ.get("BENCH_MINT_BASE")
                if not base:
                    raise RuntimeError(f"`{name}` needs BENCH_MINT_BASE, the older mint binary")
                self.start_mint(name.removeprefix("base-"), name=name, binary=base)
            else:
                raise RuntimeError(f"unknown contender `{name}`")
        for contender in self.contenders.values():
            contender.rss_start = memory_kib(contender.pids())[0]
            status, _ = http_get(contender.url("1k", False), contender.headers)
            if status != 200:
                raise RuntimeError(f"{contender.name}: first request answered {status}, not 200")
            status, _ = http_get(contender.url("1k", True), contender.headers)
            if status != 200:
                raise RuntimeError(f"{contender.name}: first TLS request answered {status}")

    # Measurements.

    def wrk(self, contender, scenario, seconds):
        answer, tls, conns, delay = ALL_SCENARIOS[scenario]
        if scenario in CONNECT_SCENARIOS:
            return self.load(contender, scenario, seconds, self.bench_connect_argv(contender, scenario, seconds))
        argv = self.pin(
            [
            "wrk",
            "-t1",
            f"-c{conns}",
            f"-d{max(1, round(seconds))}s",
            "--timeout",
            "10s",
            "-s",
            str(ROOT / "bench" / "report.lua"),
            ],
            core=self.load_core,
        )
        for header in contender.headers:
            argv += ["-H", header]
        argv.append(contender.url(answer, tls))
        return self.load(contender, scenario, seconds, argv, dict(os.environ, BENCH_DELAY_MS=str(delay)))

    def bench_connect_argv(self, contender, scenario, seconds):
        """bench_connect's command line for a CONNECT scenario (see src/bin/bench_connect.rs)."""
        answer, _, conns, _ = ALL_SCENARIOS[scenario]
        c = contender.connect
        if c is None:
            raise RuntimeError(f"{contender.name} has no CONNECT path")
        if not self.connect_bin:
            raise RuntimeError("BENCH_CONNECT (the bench_connect binary) is not set")
        argv = [
            self.connect_bin,
            "--target",
            c.target,
            "--ca",
            str(c.ca),
            "--path",
            f"/{answer}",
            "--connections",
            str(conns),
            "--duration",
            str(max(1, round(seconds))),
        ]
        if c.proxy:
            argv += ["--proxy", c.proxy]
        if c.auth:
            argv += ["--proxy-auth", c.auth]
        if CONNECT_SCENARIOS[scenario]:
            argv.append("--new-connection-per-request")
        for header in contender.connect_headers:
            argv += ["-H", header]
        return self.pin(argv, core=self.load_core)

    def load(self, contender, scenario, seconds, argv, env=None):
        """One run of a load generator (wrk or bench_connect, both printing a `BENCH` line) with
        the CPU time of the contender and of the upstream around it."""
        pids = contender.pids()
        up_pids = [self.upstream.pid]
        cpu0, up0 = cpu_ticks(pids), cpu_ticks(up_pids)
        sys0, cs0 = kernel_ticks(pids), context_switches(pids)
        run = subprocess.run(
            argv, env=env, capture_output=True, text=True, timeout=seconds + 60
        )
        cpu1, up1 = cpu_ticks(pids), cpu_ticks(up_pids)
        sys1, cs1 = kernel_ticks(pids), context_switches(pids)
        match = re.search(r"^BENCH (.*)$", run.stdout, re.M)
        if run.returncode != 0 or not match:
            raise RuntimeError(
                f"{'bench_connect' if scenario in CONNECT_SCENARIOS else 'wrk'} failed for "
                f"{contender.name}/{scenario}: {run.stdout}{run.stderr}"
            )
        fields = {k: float(v) for k, v in (kv.split("=") for kv in match.group(1).split())}
        requests = fields["requests"]
        result = {
            "requests": requests,
            "rps": requests / (fields["duration_us"] / 1e6),
            "p50": fields["p50"],
            "p99": fields["p99"],
            "p999": fields["p999"],
            "errors": fields["connect"]
            + fields["read"]
            + fields["write"]
            + fields["status"]
            + fields["timeout"],
            "up_cpu": (up1 - up0) / CLK_TCK,
        }
        if contender.name != "direct":
            result["cpu"] = (cpu1 - cpu0) / CLK_TCK
            result["sys_cpu"] = (sys1 - sys0) / CLK_TCK
            result["switches"] = (cs1[0] - cs0[0], cs1[1] - cs0[1])
        return result

    def idle_connections(self, contender, count):
        """RSS with `count` connections open, each having made one request, then idle."""
        pids = contender.pids()
        before, _ = memory_kib(pids)
        pss_before = pss_kib(pids)
        anon_before = anon_kib(pids)
        url = contender.url("1k", False)
        host, port, path = split_url(url)
        headers = dict(h.split(": ", 1) for h in contender.headers)
        conns = []
        try:
            for _ in range(count):
                conn = http.client.HTTPConnection(host, port, timeout=30)
                conn.request("GET", path, headers=headers)
                response = conn.getresponse()
                response.read()
                if response.status != 200:
                    raise RuntimeError(f"{contender.name}: idle-connection request got {response.status}")
                conns.append(conn)
            time.sleep(1.0)
            rss, hwm = memory_kib(pids)
            pss = pss_kib(pids)
            anon = anon_kib(pids)
        finally:
            for conn in conns:
                conn.close()
        return {
            "rss_before": before,
            "pss_before": pss_before,
            "anon_before": anon_before,
            "rss": rss,
            "pss": pss,
            "anon": anon,
            "hwm": hwm,
        }


class Contender:
    def __init__(self, name, url, headers, pids, connect=None, connect_headers=None):
        self.name = name
        self.url = url
        self.headers = headers
        self.pids = pids
        self.rss_start = None
        # The CONNECT scenarios' client settings, None for a contender that cannot intercept.
        self.connect = connect
        # Headers of a request inside the tunnel (the proxy's own credential is in `connect`).
        self.connect_headers = connect_headers if connect_headers is not None else headers


class Connect:
    """How bench_connect reaches the upstream through a contender: its proxy address (None: the
    upstream itself), `Proxy-Authorization`, the CONNECT target and the CA the client trusts."""

    def __init__(self, proxy, auth, target, ca):
        self.proxy = proxy
        self.auth = auth
        self.target = target
        self.ca = ca


def http_get(url, headers):
    host, port, path = split_url(url)
    if url.startswith("https://"):
        import ssl

        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        conn = http.client.HTTPSConnection(host, port, timeout=30, context=context)
    else:
        conn = http.client.HTTPConnection(host, port, timeout=30)
    try:
        conn.request("GET", path, headers=dict(h.split(": ", 1) for h in headers))
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def split_url(url):
    match = re.match(r"https?://([^:/]+):(\d+)(/.*)$", url)
    return match.group(1), int(match.group(2)), match.group(3)


def policy_text(http_port, https_port):
    """100 rules: three global ones, 96 allow rules for other hosts, and the one that matches."""
    out = ["version: 1", "default: deny", "rules:"]
    out.append("  - { id: no-deletes, effect: deny, match: { method: DELETE } }")
    out.append("  - { id: no-admin, effect: deny, match: { path: '/admin/**' } }")
    out.append(
        "  - { id: writes, effect: limit, match: { method: POST }, limits: [{ max: 1000000, per: 1h }] }"
    )
    for i in range(3, 99):
        if i % 10 == 0:
            out.append(
                f"  - {{ id: wild-{i}, effect: allow, match: {{ host: '*.svc{i}.example.com', method: GET, path: '/v1/**' }} }}"
            )
        else:
            out.append(
                f"  - {{ id: api-{i}, effect: allow, match: {{ agent: [mino, 'ci-*'], alias: [bench], host: api{i}.example.com, method: [GET, POST], path: ['/v1/**', /user] }}, limits: [{{ max: 1000000, per: 1h, by: [agent] }}] }}"
            )
    out.append(
        f"  - {{ id: bench-upstream, effect: allow, match: {{ agent: [{AGENT}], alias: [bench], scheme: [http, https], host: ['127.0.0.1'], port: [{http_port}, {https_port}], method: [GET], path: [/1k, /64k] }} }}"
    )
    assert len(out) - 3 == 100
    return "\n".join(out) + "\n"


# --- reporting -------------------------------------------------------------------------------


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def fmt(value, digits=0, suffix=""):
    if value is None:
        return "–"
    if digits == 0:
        return f"{value:,.0f}{suffix}"
    return f"{value:,.{digits}f}{suffix}"


def ratio(a, b, digits=2):
    if a is None or b is None or b == 0:
        return "–"
    return f"{a / b:.{digits}f}×"


def percent(share):
    return "–" if share is None else f"{share * 100:.0f}%"


def switches(c):
    """Context switches per request, voluntary + involuntary."""
    if c.get("cs_vol") is None or c.get("cs_invol") is None:
        return "–"
    return f"{c['cs_vol'] + c['cs_invol']:.2f} ({c['cs_vol']:.2f} + {c['cs_invol']:.2f})"


def summarize(runs, contenders, scenarios):
    """Per scenario and contender: medians, and per-round differences to direct."""
    summary = {}
    for scenario in scenarios:
        summary[scenario] = {}
        rounds = runs[scenario]
        for name in contenders:
            mine = [r[name] for r in rounds if name in r]
            if not mine:
                continue
            direct = [r.get("direct") for r in rounds if name in r]
            s = {
                "rps": median([m["rps"] for m in mine]),
                "p50": median([m["p50"] for m in mine]),
                "p99": median([m["p99"] for m in mine]),
                "p999": median([m["p999"] for m in mine]),
                "errors": sum(m["errors"] for m in mine),
                "up_us": median([m["up_cpu"] / m["requests"] * 1e6 for m in mine if m["requests"]]),
            }
            if name != "direct":
                s["cpu_us"] = median([m["cpu"] / m["requests"] * 1e6 for m in mine if m["requests"]])
                s["cpu_ratio"] = median(
                    [
                        m["cpu"] / m["up_cpu"] if m["up_cpu"] > 0 else None
                        for m in mine
                    ]
                )
                s["sys_share"] = median(
                    [m["sys_cpu"] / m["cpu"] for m in mine if m.get("cpu") and "sys_cpu" in m]
                )
                for i, kind in enumerate(["vol", "invol"]):
                    s[f"cs_{kind}"] = median(
                        [m["switches"][i] / m["requests"] for m in mine if m["requests"] and "switches" in m]
                    )
                for p in ["p50", "p99", "p999"]:
                    s[f"added_{p}"] = median(
                        [m[p] - d[p] for m, d in zip(mine, direct) if d is not None]
                    )
            summary[scenario][name] = s
    return summary


def render(summary, memory, meta, contenders, scenarios):
    lines = []
    w = lines.append
    w(f"# Mint comparison benchmark — {meta['date']}")
    w("")
    w(
        f"Machine: {meta['machine']}; load core {meta['load_core']}, server core {meta['server_core']}; "
        f"load average {meta['load_before']} at start, {meta['load_after']} at end."
    )
    w(
        f"{meta['rounds']} rounds × {meta['duration']} s per run, contenders interleaved (order rotated each round); "
        f"figures are medians of rounds. Versions: {meta['versions']}."
    )
    w("")
    for scenario in scenarios:
        s = summary[scenario]
        direct = s.get("direct")
        nginx = s.get("nginx")
        w(f"## {scenario}: {SCENARIO_TEXT[scenario]}")
        w("")
        w(
            "| contender | req/s | ×direct | ×nginx | p50 µs | p99 µs | p99.9 µs | added p50 | added p99 | added p99.9 | added p50 ×nginx | errors |"
        )
        w("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for name in contenders:
            if name not in s:
                continue
            c = s[name]
            w(
                f"| {name} | {fmt(c['rps'])} | {ratio(c['rps'], direct and direct['rps'])} | "
                f"{ratio(c['rps'], nginx and nginx['rps'])} | {fmt(c['p50'])} | {fmt(c['p99'])} | {fmt(c['p999'])} | "
                f"{fmt(c.get('added_p50'))} | {fmt(c.get('added_p99'))} | {fmt(c.get('added_p999'))} | "
                f"{ratio(c.get('added_p50'), nginx and nginx.get('added_p50')) if name not in ('direct',) else '–'} | {fmt(c['errors'])} |"
            )
        w("")
        w(
            "| contender | proxy CPU s/10k req | upstream CPU s/10k req | proxy ÷ upstream | (proxy ÷ upstream) ×nginx "
            "| proxy's CPU in the kernel | proxy's context switches per req (voluntary + involuntary) |"
        )
        w("|---|---:|---:|---:|---:|---:|---:|")
        for name in contenders:
            if name not in s:
                continue
            c = s[name]
            w(
                f"| {name} | {fmt(c.get('cpu_us') and c['cpu_us'] / 100, 3)} | {fmt(c['up_us'] / 100, 3)} | "
                f"{fmt(c.get('cpu_ratio'), 2)} | {ratio(c.get('cpu_ratio'), nginx and nginx.get('cpu_ratio'))} | "
                f"{percent(c.get('sys_share'))} | {switches(c)} |"
            )
        w("")
    if memory:
        count = meta["idle_conns"]
        w(f"## Memory: {count:,} idle connections (each made one request), plain http upstream")
        w("")
        w(
            "| contender | RSS at start MiB | RSS after 1 request MiB | of it anonymous MiB | RSS with conns MiB | of it anonymous MiB | PSS with conns MiB | VmHWM MiB | KiB per conn | RSS ×direct | RSS ×nginx |"
        )
        w("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        dm = memory.get("direct")
        nm = memory.get("nginx")
        for name in contenders:
            m = memory.get(name)
            if not m:
                continue
            per = (m["rss"] - m["rss_before"]) / count
            w(
                f"| {name} | {fmt(m['rss_start'] / 1024, 1)} | {fmt(m['rss_before'] / 1024, 1)} | "
                f"{fmt(m['anon_before'] / 1024, 1)} | {fmt(m['rss'] / 1024, 1)} | {fmt(m['anon'] / 1024, 1)} | "
                f"{fmt(m['pss'] / 1024, 1)} | {fmt(m['hwm'] / 1024, 1)} | {fmt(per, 1)} | "
                f"{ratio(m['rss'], dm and dm['rss'])} | {ratio(m['rss'], nm and nm['rss'])} |"
            )
        w("")
        w(
            "RSS and VmHWM are summed over the contender's processes (nginx: master and worker; "
            "direct: the upstream alone); anonymous is RssAnon, the memory that is the process's own "
            "(RSS also counts the pages of the binary and libraries it has touched); PSS counts "
            "pages shared between processes once. KiB per connection = "
            "(RSS with the connections − RSS after one request) ÷ connections."
        )
        w("")
    single = single_request(summary)
    if single:
        w("## Single-request latency (c1): added over direct in the same rounds (issue 19)")
        w("")
        w(
            "| contender | direct p50 µs | direct p99 µs | added p50 µs | added p99 µs | added p50 ×nginx | added p99 ×nginx |"
        )
        w("|---|---:|---:|---:|---:|---:|---:|")
        for line in single:
            w(line)
        w("")
    w("## Targets of issue 8 (Mint with `interval` audit)")
    w("")
    for line in targets(summary, memory, meta):
        w(f"- {line}")
    w("")
    single_targets = issue_19_targets(summary)
    if single_targets:
        w("## Targets of issue 19 (Mint with `interval` audit)")
        w("")
        for line in single_targets:
            w(f"- {line}")
        w("")
    intercepted = interception_targets(summary)
    if intercepted:
        w("## Targets of issue 15: HTTPS interception (Mint with `interval` audit)")
        w("")
        for line in intercepted:
            w(f"- {line}")
        w("")
    return "\n".join(lines)


def single_request(summary):
    """The c1 rows of issue 19: each contender's added p50 and p99 over direct (per round, then
    the median), and as multiples of nginx's added latency."""
    c1 = summary.get("c1", {})
    direct, nginx = c1.get("direct"), c1.get("nginx")
    if not direct:
        return []
    out = []
    for name, c in c1.items():
        if name == "direct" or c.get("added_p50") is None:
            continue
        out.append(
            f"| {name} | {fmt(direct['p50'])} | {fmt(direct['p99'])} | {fmt(c['added_p50'])} | "
            f"{fmt(c['added_p99'])} | {ratio(c['added_p50'], nginx and nginx.get('added_p50'))} | "
            f"{ratio(c['added_p99'], nginx and nginx.get('added_p99'))} |"
        )
    return out


def issue_19_targets(summary):
    """Single-request latency at c=1 and CPU per request at c=16, against nginx in the same run."""
    out = []

    def verdict(ok):
        return "**met**" if ok else "**missed**"

    c1 = summary.get("c1", {})
    mint, nginx = c1.get("mint-interval"), c1.get("nginx")
    if mint and nginx and nginx.get("added_p50") and nginx.get("added_p99"):
        r50 = mint["added_p50"] / nginx["added_p50"]
        r99 = mint["added_p99"] / nginx["added_p99"]
        out.append(
            f"c=1 added p50 ≤ 2× nginx's: {mint['added_p50']:.0f} µs vs {nginx['added_p50']:.0f} µs = "
            f"{r50:.2f}× — {verdict(r50 <= 2)}"
        )
        out.append(
            f"c=1 added p99 ≤ 3× nginx's: {mint['added_p99']:.0f} µs vs {nginx['added_p99']:.0f} µs = "
            f"{r99:.2f}× — {verdict(r99 <= 3)}"
        )
    c16 = summary.get("c16", {})
    mint, nginx = c16.get("mint-interval"), c16.get("nginx")
    if mint and nginx and mint.get("cpu_ratio") and nginx.get("cpu_ratio"):
        r = mint["cpu_ratio"] / nginx["cpu_ratio"]
        out.append(
            f"c=16 CPU per request ≤ 1.5× nginx's, as multiples of the upstream's: "
            f"{mint['cpu_ratio']:.2f} vs {nginx['cpu_ratio']:.2f} = {r:.2f}× "
            f"({mint['cpu_us']:.0f} µs vs {nginx['cpu_us']:.0f} µs absolute) — {verdict(r <= 1.5)}"
        )
    return out


def targets(summary, memory, meta):
    out = []

    def verdict(ok):
        return "**met**" if ok else "**missed**"

    c16 = summary.get("c16", {})
    mint, nginx, mitm = c16.get("mint-interval"), c16.get("nginx"), c16.get("mitmproxy")
    if mint and nginx and mint.get("added_p50") is not None and nginx.get("added_p50"):
        r = mint["added_p50"] / nginx["added_p50"]
        out.append(
            f"added p50 at c=16 ≤ 1.2× nginx's: {mint['added_p50']:.0f} µs vs {nginx['added_p50']:.0f} µs = {r:.2f}× — {verdict(r <= 1.2)}"
        )
    if mint and nginx and mint.get("cpu_ratio") and nginx.get("cpu_ratio"):
        r = mint["cpu_ratio"] / nginx["cpu_ratio"]
        a = mint["cpu_us"] / nginx["cpu_us"]
        out.append(
            f"CPU per request ≤ 1.5× nginx's (stretch 1.2×): as multiples of the upstream's CPU "
            f"per request, {mint['cpu_ratio']:.2f} vs {nginx['cpu_ratio']:.2f} = {r:.2f}×; "
            f"absolute, {mint['cpu_us']:.0f} µs vs {nginx['cpu_us']:.0f} µs = {a:.2f}× — "
            f"{verdict(max(r, a) <= 1.5)}{' (stretch met)' if max(r, a) <= 1.2 else ' (stretch missed)'}"
        )
    rate = summary.get("rate1000", {})
    if rate.get("mint-interval", {}).get("cpu_us") and rate.get("nginx", {}).get("cpu_us"):
        m_, n_ = rate["mint-interval"], rate["nginx"]
        out.append(
            f"the same at ~1,000 requests/s, where both serve the same rate: "
            f"{m_['cpu_us']:.0f} µs vs {n_['cpu_us']:.0f} µs = {m_['cpu_us'] / n_['cpu_us']:.2f}× absolute, "
            f"{m_['cpu_ratio'] / n_['cpu_ratio']:.2f}× as multiples of the upstream's"
        )
    if mint and mitm and mint.get("cpu_ratio") and mitm.get("cpu_ratio"):
        r = mitm["cpu_ratio"] / mint["cpu_ratio"]
        a = mitm["cpu_us"] / mint["cpu_us"]
        out.append(
            f"≥ 30× cheaper per request than mitmproxy: {a:.1f}× absolute "
            f"({mitm['cpu_us']:.0f} µs vs {mint['cpu_us']:.0f} µs), {r:.1f}× as multiples of the "
            f"upstream's — {verdict(min(r, a) >= 30)}"
        )
    rate = summary.get("rate1000", {}).get("mint-interval")
    if rate and rate.get("added_p99") is not None:
        out.append(
            f"added p99 under 0.5 ms at ~1,000 requests/s ({rate['rps']:.0f} req/s reached): "
            f"{rate['added_p99']:.0f} µs — {verdict(rate['added_p99'] < 500)}"
        )
    m = memory.get("mint-interval") if memory else None
    if m:
        idle = m["rss_before"] / 1024
        per = (m["rss"] - m["rss_before"]) / meta["idle_conns"]
        out.append(
            f"idle RSS ≤ 10 MiB: {idle:.1f} MiB after one request ({m['rss_start'] / 1024:.1f} MiB at "
            f"start; {m['anon_before'] / 1024:.1f} MiB of it anonymous) — {verdict(idle <= 10)}"
        )
        out.append(f"≤ 48 KiB per open connection: {per:.1f} KiB — {verdict(per <= 48)}")
    out.append(
        "policy evaluation < 1 µs at 10,000 rules and scrub ≥ 2 GiB/s for 16 secrets: criterion "
        "benches, see docs/performance.md"
    )
    return out


def interception_targets(summary):
    """The CONNECT path's goals, each a ratio of figures measured in the same run."""
    out = []

    def verdict(ok):
        return "**met**" if ok else "**missed**"

    kept = summary.get("connect-c16", {})
    mint, mitm = kept.get("mint-interval"), kept.get("mitmproxy")
    if mint and mitm and mint.get("cpu_us") and mitm.get("cpu_us"):
        a = mitm["cpu_us"] / mint["cpu_us"]
        r = mitm["cpu_ratio"] / mint["cpu_ratio"] if mint.get("cpu_ratio") and mitm.get("cpu_ratio") else None
        out.append(
            f"kept-alive intercepted requests ≥ 30× cheaper than mitmproxy's: {a:.1f}× absolute "
            f"({mitm['cpu_us']:.0f} µs vs {mint['cpu_us']:.0f} µs of CPU per request)"
            + (f", {r:.1f}× as multiples of the upstream's" if r else "")
            + f" — {verdict(min(a, r or a) >= 30)}"
        )
    proxied = summary.get("c16-tls", {}).get("mint-interval")
    if mint and proxied and mint.get("cpu_us") and proxied.get("cpu_us"):
        r = mint["cpu_us"] / proxied["cpu_us"]
        out.append(
            f"a request inside an intercepted connection ≤ 1.3× the CPU of the same request on "
            f"`/v1/proxy/` (c16-tls): {mint['cpu_us']:.0f} µs vs {proxied['cpu_us']:.0f} µs = "
            f"{r:.2f}× — {verdict(r <= 1.3)} (the difference is mostly the agent-side TLS that "
            f"`/v1/proxy/` over plain loopback HTTP does not have)"
        )
    new = summary.get("connect-new", {})
    direct, mint_new, mitm_new = new.get("direct"), new.get("mint-interval"), new.get("mitmproxy")
    if direct and mint_new and direct.get("up_us") and mint_new.get("cpu_us"):
        line = (
            f"a new intercepted connection (TCP, CONNECT, full handshake with the cached leaf, one "
            f"request): {mint_new['cpu_us']:.0f} µs of Mint's CPU, {mint_new['cpu_us'] / direct['up_us']:.2f}× "
            f"the upstream's CPU for a plain TLS handshake and the same request "
            f"({direct['up_us']:.0f} µs)"
        )
        if mitm_new and mitm_new.get("cpu_us"):
            line += (
                f"; mitmproxy: {mitm_new['cpu_us']:.0f} µs "
                f"({mitm_new['cpu_us'] / mint_new['cpu_us']:.1f}× Mint's)"
            )
        out.append(line)
    return out


# --- main ------------------------------------------------------------------------------------


def runs_in(contender, scenario):
    """Whether a contender takes part in a scenario: the CONNECT ones need a CONNECT path (nginx
    has none: it does not intercept)."""
    return scenario not in CONNECT_SCENARIOS or contender.connect is not None


def load_average():
    return Path("/proc/loadavg").read_text().split()[0]


def versions(bench):
    def first_line(argv):
        try:
            run = subprocess.run(argv, capture_output=True, text=True, timeout=30)
            return (run.stdout + run.stderr).strip().splitlines()[0]
        except Exception:
            return "?"

    return ", ".join(
        [
            first_line(["nginx", "-v"]).replace("nginx version: ", ""),
            "mitmproxy " + first_line([bench.mitmdump, "--version"]).split()[-1],
            first_line(["wrk", "-v"]).split(" [")[0],
            first_line(["rustc", "--version"]),
            mint_version(bench),
        ]
        + ([f"base mint binary {os.environ['BENCH_MINT_BASE']}"] if os.environ.get("BENCH_MINT_BASE") else [])
    )


def mint_version(bench):
    """The commit of the tree when Mint is the one built here, else the binary's path."""
    if Path(bench.mint).resolve() == (ROOT / "target" / "release" / "mint").resolve():
        run = subprocess.run(
            ["git", "-C", str(ROOT), "describe", "--always", "--dirty"],
            capture_output=True,
            text=True,
        )
        return f"mint {run.stdout.strip() or '?'}"
    return f"mint binary {bench.mint}"


def measure(args):
    contenders = [c for c in args.contenders.split(",") if c]
    scenarios = [s for s in args.scenarios.split(",") if s]
    for s in scenarios:
        if s not in ALL_SCENARIOS:
            raise SystemExit(f"unknown scenario `{s}`; known: {', '.join(ALL_SCENARIOS)}")
    bench = Bench(args)
    started = time.monotonic()
    meta = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Linux {platform.release()}",
        "load_core": bench.load_core,
        "server_core": bench.server_core,
        "load_before": load_average(),
        "rounds": args.rounds,
        "duration": args.duration,
        "idle_conns": args.idle_conns,
    }
    try:
        bench.start(contenders)
        meta["versions"] = versions(bench)
        print(f"started {', '.join(contenders)} in {time.monotonic() - started:.0f} s", flush=True)

        memory = {}
        if args.idle_conns > 0:
            for name in contenders:
                c = bench.contenders[name]
                m = bench.idle_connections(c, args.idle_conns)
                m["rss_start"] = c.rss_start
                memory[name] = m
                print(
                    f"memory {name}: {m['rss_before'] / 1024:.1f} MiB idle, "
                    f"{m['rss'] / 1024:.1f} MiB with {args.idle_conns} connections",
                    flush=True,
                )

        # Warm-up: pools filled, caches warm (Mint's leaf for the CONNECT host signed), before
        # anything counts.
        for name in contenders:
            for scenario in ["c256", "c16-tls"] + [s for s in scenarios if s in CONNECT_SCENARIOS]:
                if runs_in(bench.contenders[name], scenario):
                    bench.wrk(bench.contenders[name], scenario, args.warmup)
        print(f"warmed up at {time.monotonic() - started:.0f} s", flush=True)

        runs = {s: [] for s in scenarios}
        for r in range(args.rounds):
            order = contenders[r % len(contenders) :] + contenders[: r % len(contenders)]
            for scenario in scenarios:
                results = {}
                for name in order:
                    if runs_in(bench.contenders[name], scenario):
                        results[name] = bench.wrk(bench.contenders[name], scenario, args.duration)
                runs[scenario].append(results)
                brief = " ".join(f"{n}={results[n]['rps']:.0f}" for n in contenders if n in results)
                print(
                    f"round {r + 1}/{args.rounds} {scenario}: req/s {brief} "
                    f"({time.monotonic() - started:.0f} s)",
                    flush=True,
                )
        meta["load_after"] = load_average()
        meta["elapsed"] = time.monotonic() - started
    finally:
        bench.procs.stop_all()

    summary = summarize(runs, contenders, scenarios)
    report = render(summary, memory, meta, contenders, scenarios)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    (out / f"results-{stamp}.md").write_text(report + "\n")
    (out / "results.md").write_text(report + "\n")
    (out / f"results-{stamp}.json").write_text(
        json.dumps({"meta": meta, "runs": runs, "memory": memory, "summary": summary}, indent=1)
    )
    print()
    print(report)
    print(f"written to {out / 'results.md'} and {out / f'results-{stamp}.json'}")


def callgrind(args):
    """Counts the instructions one Mint contender runs per request (valgrind's callgrind):
    start-up and a warm-up run uninstrumented, then one wrk run of the first scenario counted."""
    bench = Bench(args)
    name = args.callgrind
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    data = out / f"callgrind-{name}.out"
    scenario = args.scenarios.split(",")[0]
    try:
        bench.start([name])
        contender = bench.contenders[name]
        bench.wrk(contender, scenario, args.warmup)
        pid = str(contender.pids()[0])
        subprocess.run(["callgrind_control", "-i", "on", pid], check=True, capture_output=True)
        result = bench.wrk(contender, scenario, args.duration)
        subprocess.run(["callgrind_control", "-i", "off", pid], check=True, capture_output=True)
        subprocess.run(["callgrind_control", "-d", pid], check=True, capture_output=True)
    finally:
        bench.procs.stop_all()
    dumps = sorted(out.glob(f"callgrind-{name}.out*"), key=lambda p: p.stat().st_mtime)
    report = out / f"callgrind-{name}.txt"
    total = 0
    for dump in dumps:
        # `summary:` may be 0 in a dump triggered by `callgrind_control -d`; `totals:` is right.
        totals = re.findall(r"^totals: (\d+)", dump.read_text(errors="replace"), re.M)
        total += max((int(t) for t in totals), default=0)
    with open(report, "w") as f:
        for dump in dumps:
            subprocess.run(
                ["callgrind_annotate", "--inclusive=yes", "--threshold=99", str(dump)],
                stdout=f,
                stderr=subprocess.DEVNULL,
            )
    requests = max(result["requests"], 1)
    print(
        f"{name} ({scenario}): {requests} requests counted, {total:,} instructions, "
        f"{total / requests:,.0f} per request; annotated in {report}"
    )


def syscalls(args):
    """Counts the system calls each contender (and the upstream) makes per request, with
    `strace -c -f` attached to all of its threads during one wrk run of the first scenario (after
    an unobserved warm-up). strace slows every call, so the rate is not the benchmark's; the
    counts per request are what it is for: reads, writes, epoll waits and futex wake-ups."""
    bench = Bench(args)
    names = [c for c in args.strace.split(",") if c]
    scenario = args.scenarios.split(",")[0]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tables = {}
    try:
        bench.start(names)
        for name in names:
            contender = bench.contenders[name]
            bench.wrk(contender, scenario, args.warmup)
            traced = {"proxy": contender.pids()} if name != "direct" else {}
            traced["upstream"] = [bench.upstream.pid]
            files = {}
            tracers = []
            for who, pids in traced.items():
                files[who] = out / f"strace-{name}-{who}.txt"
                argv = ["strace", "-c", "-f", "-o", str(files[who])]
                for pid in pids:
                    argv += ["-p", str(pid)]
                tracers.append(
                    subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                )
            time.sleep(1.0)
            result = bench.wrk(contender, scenario, args.duration)
            for tracer in tracers:
                tracer.send_signal(signal.SIGINT)
                tracer.wait(timeout=30)
            requests = max(result["requests"], 1)
            tables[name] = {who: strace_counts(files[who], requests) for who in traced}
            tables[name]["requests"] = requests
    finally:
        bench.procs.stop_all()
    lines = [f"## System calls per request, {scenario} (strace -c -f, one wrk run each)", ""]
    shown = ["read", "recvfrom", "write", "writev", "sendto", "epoll_wait", "futex", "sched_yield"]
    lines.append("| contender | process | requests | total | " + " | ".join(shown) + " | others |")
    lines.append("|---|---|---:|---:|" + "---:|" * len(shown) + "---|")
    for name, table in tables.items():
        for who in ["proxy", "upstream"]:
            if who not in table:
                continue
            counts = table[who]
            others = ", ".join(
                f"{call} {n:.2f}" for call, n in sorted(counts.items(), key=lambda kv: -kv[1])
                if call not in shown and n >= 0.01
            )
            lines.append(
                f"| {name} | {who} | {table['requests']:.0f} | {sum(counts.values()):.2f} | "
                + " | ".join(f"{counts.get(call, 0):.2f}" for call in shown)
                + f" | {others or '–'} |"
            )
    report = "\n".join(lines)
    (out / f"strace-{scenario}.md").write_text(report + "\n")
    print(report)
    print(f"written to {out / f'strace-{scenario}.md'}")


def strace_counts(path, requests):
    """System call -> calls per request, from an `strace -c` summary."""
    counts = {}
    for line in Path(path).read_text(errors="replace").splitlines():
        fields = line.split()
        # % time, seconds, usecs/call, calls, [errors,] syscall
        if len(fields) >= 5 and fields[0].replace(".", "").isdigit() and fields[-1] != "total":
            counts[fields[-1]] = int(fields[3]) / requests
    return counts


def profile(args):
    """Runs wrk against one contender while `perf record` samples it (cpu-clock)."""
    bench = Bench(args)
    name = args.profile
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    try:
        bench.start([name])
        contender = bench.contenders[name]
        bench.wrk(contender, args.scenarios.split(",")[0], args.warmup)
        data = out / f"perf-{name}.data"
        pids = ",".join(str(p) for p in contender.pids())
        perf = subprocess.Popen(
            [
                "perf",
                "record",
                "-e",
                "cpu-clock",
                "-F",
                "4000",
                "-g",
                "-p",
                pids,
                "-o",
                str(data),
                "--",
                "sleep",
                str(args.duration),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        result = bench.wrk(contender, args.scenarios.split(",")[0], args.duration)
        perf.wait(timeout=args.duration + 60)
        print(
            f"{name}: {result['rps']:.0f} req/s, proxy {result.get('cpu', 0) / result['requests'] * 1e6:.1f} µs "
            f"and upstream {result['up_cpu'] / result['requests'] * 1e6:.1f} µs CPU per request"
        )
    finally:
        bench.procs.stop_all()
    report = out / f"perf-{name}.txt"
    with open(report, "w") as f:
        subprocess.run(
            [
                "perf",
                "report",
                "-i",
                str(data),
                "--stdio",
                "--no-children",
                "--sort",
                "dso,symbol",
                "--percent-limit",
                "0.3",
                "-g",
                "none",
            ],
            stdout=f,
            stderr=subprocess.DEVNULL,
        )
    print(f"profile written to {report}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", default=os.environ.get("BENCH_WORK") or tempfile.mkdtemp(prefix="mint-bench-"))
    parser.add_argument("--out", default=os.environ.get("BENCH_OUT", str(ROOT / "target" / "bench")))
    parser.add_argument("--duration", type=int, default=env_int("BENCH_DURATION", 3))
    parser.add_argument("--warmup", type=int, default=env_int("BENCH_WARMUP", 1))
    parser.add_argument("--rounds", type=int, default=env_int("BENCH_ROUNDS", 3))
    parser.add_argument("--idle-conns", type=int, default=env_int("BENCH_IDLE_CONNS", 1000))
    parser.add_argument(
        "--contenders", default=os.environ.get("BENCH_CONTENDERS", ",".join(ALL_CONTENDERS))
    )
    parser.add_argument(
        "--scenarios", default=os.environ.get("BENCH_SCENARIOS", ",".join(ALL_SCENARIOS))
    )
    parser.add_argument(
        "--profile",
        metavar="CONTENDER",
        help="profile one contender with perf under the first scenario instead of comparing",
    )
    parser.add_argument(
        "--strace",
        metavar="CONTENDERS",
        help="count the system calls per request of each contender (comma-separated) and of the "
        "upstream with strace -c -f under the first scenario instead of comparing",
    )
    parser.add_argument(
        "--callgrind",
        metavar="CONTENDER",
        help="count one Mint contender's instructions per request with valgrind's callgrind "
        "under the first scenario instead of comparing",
    )
    args = parser.parse_args()
    if (
        "direct" not in args.contenders.split(",")
        and not args.profile
        and not args.callgrind
        and not args.strace
    ):
        args.contenders = "direct," + args.contenders

    def on_signal(signum, _frame):
        raise SystemExit(f"stopped by signal {signum}")

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, on_signal)
    if args.callgrind:
        callgrind(args)
        return
    if args.strace:
        syscalls(args)
        return
    if args.profile:
        profile(args)
    else:
        measure(args)


if __name__ == "__main__":
    main()
