#!/usr/bin/env python3
"""Unmodified Python HTTPS clients through Mint's CONNECT interception, for
tests/it/interception.rs.

Subcommands, each printing one JSON document on stdout with what the client received:

- `requests URL`: `requests.Session().get(URL)` with the header
  `Authorization: Bearer {{mint:echo}}`. No `proxies=` and no `verify=`: the proxy comes from
  HTTPS_PROXY and the CA from REQUESTS_CA_BUNDLE, as for any program.
- `httpx URL`: the same with `httpx2.Client()` (`trust_env=True`): the proxy from HTTPS_PROXY,
  the CA from SSL_CERT_FILE.
- `tunnel --proxy HOST:PORT --target HOST:PORT --cafile CA STEPS`: one tunnel by hand with
  `http.client` (`set_tunnel`, the capability from MINT_CAPABILITY as `Proxy-Authorization:
  Basic`), TLS verified by an `ssl` context with `VERIFY_X509_STRICT` set (a leaf without an
  Authority Key Identifier fails it), and the requests of STEPS (JSON: a list of
  `{"path": ..., "headers": {...}, "sleep": seconds before}`) sent one after the other on that
  one kept-alive connection. Prints a list of `{"status", "headers", "body"}` (or `{"error"}`).
- `direct --target HOST:PORT --cafile CA`: a TLS handshake straight to `127.0.0.1:PORT` with the
  SNI and expected name HOST, verified by the same strict context as `tunnel`. Prints
  `{"verified": true}`, or `{"verified": false, "error": ...}` when verification failed.

The proxy and CA variables the test did not mean are removed by the test before this runs.
"""

from __future__ import annotations

import argparse
import base64
import http.client
import json
import os
import socket
import ssl
import sys
import time

PLACEHOLDER_HEADERS = {"Authorization": "Bearer {{mint:echo}}"}


def answer(status: int, headers: dict[str, str], body: str) -> dict[str, object]:
    return {"status": status, "headers": headers, "body": body}


def run_requests(url: str) -> dict[str, object]:
    import requests

    with requests.Session() as session:
        response = session.get(url, headers=PLACEHOLDER_HEADERS, timeout=20)
        return answer(response.status_code, dict(response.headers), response.text)


def run_httpx(url: str) -> dict[str, object]:
    import httpx2

    with httpx2.Client(timeout=20) as client:
        response = client.get(url, headers=PLACEHOLDER_HEADERS)
        return answer(response.status_code, dict(response.headers), response.text)


def strict_context(cafile: str) -> ssl.SSLContext:
    """The default context trusting `cafile` only, with `VERIFY_X509_STRICT` (Python 3.13's
    default): among other checks, a certificate without an Authority Key Identifier fails."""
    context = ssl.create_default_context(cafile=cafile)
    context.verify_flags |= ssl.VERIFY_X509_STRICT
    if not context.verify_flags & ssl.VERIFY_X509_STRICT:
        raise SystemExit("VERIFY_X509_STRICT is not set")
    return context


def run_direct(target: str, cafile: str) -> dict[str, object]:
    host, port = target.rsplit(":", 1)
    context = strict_context(cafile)
    try:
        with socket.create_connection(("127.0.0.1", int(port)), timeout=20) as raw:
            with context.wrap_socket(raw, server_hostname=host):
                return {"verified": True}
    except ssl.SSLCertVerificationError as error:
        return {"verified": False, "error": f"{error.verify_message} ({error.verify_code})"}


def run_tunnel(proxy: str, target: str, cafile: str, steps: list[dict]) -> list[dict]:
    context = strict_context(cafile)
    proxy_host, proxy_port = proxy.rsplit(":", 1)
    target_host, target_port = target.rsplit(":", 1)
    token = os.environ["MINT_CAPABILITY"]
    credentials = base64.b64encode(f"agent:{token}".encode()).decode()
    connection = http.client.HTTPSConnection(
        proxy_host, int(proxy_port), context=context, timeout=20
    )
    connection.set_tunnel(
        target_host,
        int(target_port),
        headers={"Proxy-Authorization": f"Basic {credentials}"},
    )
    results: list[dict] = []
    for step in steps:
        time.sleep(step.get("sleep", 0))
        try:
            # A `Host` in the headers replaces the one http.client would write.
            connection.request("GET", step["path"], headers=step.get("headers", {}))
            response = connection.getresponse()
            body = response.read().decode("utf-8", "replace")
            results.append(answer(response.status, dict(response.getheaders()), body))
        except (OSError, http.client.HTTPException) as error:
            results.append({"error": f"{type(error).__name__}: {error}"})
            break
    connection.close()
    return results


def main() -> int:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="client", required=True)
    for name in ("requests", "httpx"):
        sub.add_parser(name).add_argument("url")
    tunnel = sub.add_parser("tunnel")
    tunnel.add_argument("--proxy", required=True)
    tunnel.add_argument("--target", required=True)
    tunnel.add_argument("--cafile", required=True)
    tunnel.add_argument("steps")
    direct = sub.add_parser("direct")
    direct.add_argument("--target", required=True)
    direct.add_argument("--cafile", required=True)
    args = parser.parse_args()
    if args.client == "requests":
        result: object = run_requests(args.url)
    elif args.client == "httpx":
        result = run_httpx(args.url)
    elif args.client == "direct":
        result = run_direct(args.target, args.cafile)
    else:
        result = run_tunnel(args.proxy, args.target, args.cafile, json.loads(args.steps))
    json.dump(result, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
