#!/usr/bin/env python3
"""Unmodified Python HTTP clients using Mint as their forward proxy, for tests/it/proxy_mcp.rs.

The clients are `requests` and `httpx2`, configured only the way any program is: the proxy comes
from the HTTP_PROXY / http_proxy environment variables (`requests.Session`, `httpx2.Client` with
`trust_env=True`) or from httpx2's own `proxy=` setting; the capability is a
`Proxy-Authorization: Bearer` header and the secret is the placeholder `{{mint:echo}}`. They send
absolute-form requests (`GET http://127.0.0.1:PORT/echo HTTP/1.1`) to the plain-HTTP loopback
echo upstream of the Rust test, which sends back what it received. This script never knows the
secret: it checks the answers' shape and that the secret came back as `[mint:redacted]`, and
prints on stdout one JSON document with everything it received, so the Rust test can check that
no byte of the secret is in any of it.

For each client, on one connection-reusing session: a GET with a query, a POST with a JSON body,
an SSE stream read event by event, and a request without `Proxy-Authorization` (407 with
`Proxy-Authenticate`, Mint's JSON error).

Usage: MINT_CAPABILITY=... HTTP_PROXY=http://MINT forward_proxy_client.py --port UPSTREAM_PORT
Exits 0 when every check passed, 1 on the first failure (with the reason on stderr).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, Callable

import httpx2
import requests

REDACTED = "[mint:redacted]"
PLACEHOLDER = "{{mint:echo}}"


class CheckFailed(Exception):
    pass


def check(condition: bool, message: str) -> None:
    if not condition:
        raise CheckFailed(message)


class Recorder:
    def __init__(self) -> None:
        self.received: list[str] = []
        self.request_ids: list[str] = []
        self.checks: list[str] = []

    def keep(self, label: str, status: int, headers: Any, body: str) -> None:
        request_id = headers.get("mint-request-id")
        check(bool(request_id), f"{label}: no Mint-Request-Id")
        self.request_ids.append(request_id)
        self.received.append(f"{label}: {status}")
        self.received.extend(f"{name}: {value}" for name, value in headers.items())
        self.received.append(body)


def check_echo(label: str, status: int, body: str, method: str) -> None:
    check(status == 200, f"{label}: status {status}: {body}")
    echoed = json.loads(body)
    check(echoed["method"] == method, f"{label}: echoed method {echoed['method']}")
    names = [name for name, _ in echoed["headers"]]
    check(
        not any(name.startswith(("proxy-", "mint-")) for name in names),
        f"{label}: the upstream saw {names}",
    )
    authorization = [value for name, value in echoed["headers"] if name == "authorization"]
    check(authorization == [f"Bearer {REDACTED}"], f"{label}: authorization came back as {authorization}")


def exercise(
    label: str,
    request: Callable[..., Any],
    stream_lines: Callable[[str, dict[str, str]], tuple[int, Any, list[str]]],
    base: str,
    auth: dict[str, str],
    recorder: Recorder,
) -> None:
    """The four requests, through `request(method, url, headers=..., json=...)`."""
    response = request("GET", f"{base}/echo?x=1", headers=auth)
    recorder.keep(f"{label} GET", response.status_code, response.headers, response.text)
    check_echo(f"{label} GET", response.status_code, response.text, "GET")
    check(json.loads(response.text)["query"] == "x=1", f"{label}: query {response.text}")

    response = request("POST", f"{base}/echo", headers=auth, json={"note": "no secret here"})
    recorder.keep(f"{label} POST", response.status_code, response.headers, response.text)
    check_echo(f"{label} POST", response.status_code, response.text, "POST")
    check(
        json.loads(json.loads(response.text)["body"]) == {"note": "no secret here"},
        f"{label}: body {response.text}",
    )

    status, headers, lines = stream_lines(f"{base}/sse?n=3&interval_ms=20&echo=authorization", auth)
    recorder.keep(f"{label} SSE", status, headers, "\n".join(lines))
    check(status == 200, f"{label} SSE: status {status}")
    events = [json.loads(line[len("data: "):]) for line in lines if line.startswith("data: ")]
    check([event["n"] for event in events] == [0, 1, 2], f"{label} SSE events: {events}")
    check(all(event["header"] == f"Bearer {REDACTED}" for event in events), f"{label} SSE: {events}")

    no_capability = {k: v for k, v in auth.items() if k != "Proxy-Authorization"}
    response = request("GET", f"{base}/echo", headers=no_capability)
    recorder.keep(f"{label} 407", response.status_code, response.headers, response.text)
    check(response.status_code == 407, f"{label}: without a capability: {response.status_code}")
    check(
        response.headers.get("Proxy-Authenticate") == 'Basic realm="mint"',
        f"{label}: Proxy-Authenticate {response.headers.get('Proxy-Authenticate')}",
    )
    check(response.json()["error"]["code"] == "capability_invalid", response.text)
    recorder.checks.append(label)


def main() -> int:
    port = int(sys.argv[sys.argv.index("--port") + 1])
    capability = os.environ["MINT_CAPABILITY"]
    proxy = os.environ["HTTP_PROXY"]
    base = f"http://127.0.0.1:{port}"
    capability_header = {"Proxy-Authorization": f"Bearer {capability}"}
    auth = {**capability_header, "Authorization": f"Bearer {PLACEHOLDER}"}
    recorder = Recorder()

    # requests: the proxy from HTTP_PROXY (trust_env is requests' default).
    with requests.Session() as session:
        check(session.trust_env, "requests does not read the environment")

        def requests_stream(url: str, headers: dict[str, str]) -> tuple[int, Any, list[str]]:
            with session.get(url, headers=headers, stream=True, timeout=30) as response:
                lines = [line.decode() for line in response.iter_lines()]
                return response.status_code, response.headers, lines

        exercise(
            "requests (HTTP_PROXY)",
            lambda method, url, **kw: session.request(method, url, timeout=30, **kw),
            requests_stream,
            base,
            auth,
            recorder,
        )

    # httpx2: the proxy from HTTP_PROXY, then from its own `proxy=` setting with the capability
    # as a proxy header (not a header of each request).
    for label, client, headers in (
        ("httpx2 (HTTP_PROXY)", httpx2.Client(trust_env=True, timeout=30.0), auth),
        (
            "httpx2 (proxy=)",
            httpx2.Client(
                trust_env=False,
                timeout=30.0,
                proxy=httpx2.Proxy(proxy, headers=capability_header),
            ),
            {"Authorization": f"Bearer {PLACEHOLDER}"},
        ),
    ):
        with client:

            def httpx_stream(url: str, headers: dict[str, str]) -> tuple[int, Any, list[str]]:
                with client.stream("GET", url, headers=headers) as response:
                    return response.status_code, response.headers, list(response.iter_lines())

            if label == "httpx2 (proxy=)":
                # With the capability on the proxy itself, every request carries it: check the
                # first three, and the refusal with a client that has no proxy header.
                response = client.get(f"{base}/echo?x=1", headers=headers)
                recorder.keep(f"{label} GET", response.status_code, response.headers, response.text)
                check_echo(f"{label} GET", response.status_code, response.text, "GET")
                response = client.post(f"{base}/echo", headers=headers, json={"note": "no secret"})
                recorder.keep(f"{label} POST", response.status_code, response.headers, response.text)
                check_echo(f"{label} POST", response.status_code, response.text, "POST")
                status, received, lines = httpx_stream(
                    f"{base}/sse?n=3&interval_ms=20&echo=authorization", headers
                )
                recorder.keep(f"{label} SSE", status, received, "\n".join(lines))
                events = [json.loads(line[6:]) for line in lines if line.startswith("data: ")]
                check([event["n"] for event in events] == [0, 1, 2], f"{label} SSE events: {events}")
                check(
                    all(event["header"] == f"Bearer {REDACTED}" for event in events),
                    f"{label} SSE: {events}",
                )
                recorder.checks.append(label)
            else:
                exercise(label, client.request, httpx_stream, base, headers, recorder)

    json.dump(
        {"checks": recorder.checks, "request_ids": recorder.request_ids, "received": recorder.received},
        sys.stdout,
    )
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except CheckFailed as failure:
        sys.stderr.write(f"forward_proxy_client.py: {failure}\n")
        sys.exit(1)
