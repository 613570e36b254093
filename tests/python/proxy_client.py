#!/usr/bin/env python3
"""A Python HTTP client (httpx2) using Mint's proxy route, as an agent's code would.

Sends requests through `BASE/v1/proxy/https/127.0.0.1:PORT/...` with the capability from the
MINT_CAPABILITY environment variable and `{{mint:echo}}` placeholders in a header and in a JSON
body, to the echo upstream of tests/it/proxy_outcomes.rs, which sends whatever it received back
(raw, and base64 / hex / percent / JSON-escaped). This script never knows the secret: it checks
the answers' shape, that each came back with `[mint:redacted]`, and prints on stdout one JSON
document with everything it received (headers, bodies, parsed JSON re-serialized, and every
encoded form it could decode), so the Rust test can check that no byte of the secret is in any
of it.

Usage: MINT_CAPABILITY=... proxy_client.py --base http://127.0.0.1:PORT --port UPSTREAM_PORT
Exits 0 when every check passed, 1 on the first failure (with the reason on stderr).
"""

from __future__ import annotations

import argparse
import base64
import binascii
import json
import os
import sys
import urllib.parse
from typing import Any

import httpx2

REDACTED = "[mint:redacted]"
PLACEHOLDER = "{{mint:echo}}"


class CheckFailed(Exception):
    pass


def check(condition: bool, message: str) -> None:
    if not condition:
        raise CheckFailed(message)


def decoded_forms(forms: list[dict[str, Any]]) -> list[str]:
    """Every encoded form of the echo's `forms` that decodes, decoded to text."""
    out: list[str] = []
    for form in forms:
        for key, decode in (
            ("base64", base64.b64decode),
            ("base64_nopad", lambda v: base64.b64decode(v + "=" * (-len(v) % 4))),
            ("base64url", base64.urlsafe_b64decode),
            ("base64url_nopad", lambda v: base64.urlsafe_b64decode(v + "=" * (-len(v) % 4))),
            ("hex", bytes.fromhex),
            ("hex_upper", bytes.fromhex),
            ("percent", lambda v: urllib.parse.unquote_to_bytes(v)),
            ("percent_lower", lambda v: urllib.parse.unquote_to_bytes(v)),
        ):
            value = form.get(key)
            if not isinstance(value, str):
                continue
            try:
                out.append(decode(value).decode("utf-8", errors="replace"))
            except (binascii.Error, ValueError):
                # A redaction marker inside an encoded form leaves it undecodable: fine.
                pass
        for key in ("value", "json_unicode"):
            if isinstance(form.get(key), str):
                out.append(form[key])
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--base", required=True)
    parser.add_argument("--port", required=True, type=int)
    args = parser.parse_args()
    capability = os.environ["MINT_CAPABILITY"]
    route = f"{args.base}/v1/proxy/https/127.0.0.1:{args.port}"
    auth = {"Mint-Capability": capability, "Authorization": f"Bearer {PLACEHOLDER}"}
    received: list[str] = []
    request_ids: list[str] = []
    checks: list[str] = []

    def keep(response: httpx2.Response) -> None:
        request_id = response.headers.get("mint-request-id")
        check(bool(request_id), f"no Mint-Request-Id on {response.url}")
        request_ids.append(request_id)
        received.extend(f"{name}: {value}" for name, value in response.headers.items())

    # trust_env=False: no proxy settings from the environment; this is the route mode.
    with httpx2.Client(trust_env=False, timeout=30.0, follow_redirects=False) as client:
        # 1. The header secret echoed back raw and in every encoding.
        response = client.get(f"{route}/echo-encoded", params={"x": "1"}, headers=auth)
        keep(response)
        check(response.status_code == 200, f"echo-encoded: {response.status_code}")
        echoed = response.json()
        received.append(response.text)
        received.append(json.dumps(echoed))
        received.extend(decoded_forms(echoed.get("forms", [])))
        authorization = [v for n, v in echoed["headers"] if n == "authorization"]
        check(authorization == [f"Bearer {REDACTED}"], f"authorization came back as {authorization}")
        checks.append("header secret redacted in every encoding")

        # 2. A JSON body secret (the alias allows the body site).
        response = client.post(
            f"{route}/echo",
            headers=auth,
            json={"token": PLACEHOLDER, "note": "body site"},
        )
        keep(response)
        check(response.status_code == 200, f"echo POST: {response.status_code}")
        echoed = response.json()
        received.append(response.text)
        body = json.loads(echoed["body"])
        received.append(json.dumps(body))
        check(body["token"] == REDACTED, f"the body secret came back as {body['token']!r}")
        checks.append("json body secret redacted")

        # 3. The secret echoed into response headers, a redirect-style Location included.
        response = client.get(f"{route}/echo-header", headers=auth)
        keep(response)
        check(response.status_code == 200, f"echo-header: {response.status_code}")
        for name in ("location", "x-echo"):
            check(
                response.headers.get(name) == f"Bearer {REDACTED}",
                f"{name} came back as {response.headers.get(name)!r}",
            )
        check(REDACTED in response.headers.get("set-cookie", ""), "set-cookie not redacted")
        checks.append("response headers redacted")

        # 4. A streamed answer (SSE), read event by event.
        events: list[dict[str, Any]] = []
        with client.stream(
            "GET",
            f"{route}/sse",
            params={"n": "3", "interval_ms": "50", "echo": "authorization"},
            headers=auth,
        ) as stream:
            keep(stream)
            check(stream.status_code == 200, f"sse: {stream.status_code}")
            for line in stream.iter_lines():
                received.append(line)
                if line.startswith("data: "):
                    events.append(json.loads(line[len("data: "):]))
        check([e["n"] for e in events] == [0, 1, 2], f"events: {events}")
        check(
            all(e["header"] == f"Bearer {REDACTED}" for e in events),
            f"sse events: {events}",
        )
        checks.append("sse events redacted")

        # 5. A refusal: Mint's own JSON error, no secret anywhere.
        response = client.get(
            f"{route}/echo",
            headers={"Authorization": f"Bearer {PLACEHOLDER}"},
        )
        check(response.status_code == 401, f"without a capability: {response.status_code}")
        check(response.json()["error"]["code"] == "capability_invalid", response.text)
        check(response.headers.get("mint-outcome") == "denied", "no Mint-Outcome")
        received.append(response.text)
        checks.append("refusal is a json error")

    json.dump(
        {"checks": checks, "request_ids": request_ids, "received": received},
        sys.stdout,
    )
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except CheckFailed as failure:
        sys.stderr.write(f"proxy_client.py: {failure}\n")
        sys.exit(1)
