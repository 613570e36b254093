#!/usr/bin/env python3
"""An MCP client built with the official MCP Python SDK, talking Streamable HTTP through Mint.

The agent's side of tests/it/proxy_mcp.rs: `streamable_http_client` with an `httpx2.AsyncClient`
whose default headers are the capability (`Mint-Capability`) and the MCP server's API key as a
placeholder (`X-Api-Key: {{mint:mcpkey}}`), pointed at
`http://MINT/v1/proxy/{http|https}/127.0.0.1:PORT/mcp`. With `--proxy http://MINT` it uses Mint
as a forward proxy instead: the URL is the server's own (`http://127.0.0.1:PORT/mcp`), the
transport is httpx2's proxy transport, and the capability travels as the proxy's
`Proxy-Authorization: Bearer` header. With `--trust-env` it is configured by its environment
alone, as an agent run with `HTTPS_PROXY` is: the URL is the server's own `https://` one, httpx2
takes the proxy (the capability as the password of its URL) from HTTPS_PROXY and the CA from
SSL_CERT_FILE, so Mint intercepts the tunnel; responses are then recorded by a response hook, as
the transport is httpx2's own. It never knows the key.

Checks, first on a `ClientSession` (the initialize handshake, protocol 2025-11-25):
1. initialize and tools/list work (the endpoint's non-tool traffic);
2. `search` answers;
3. `leak`'s answer reaches the client with the key replaced by `[mint:redacted]`;
4. `delete_everything` is refused by Mint: the SDK surfaces a JSON-RPC error (code -32001,
   `data.code` `policy_denied`), which arrived on an HTTP 403;
5. with `--gate PATH` (SSE mode): `search("streamed")` reports progress, and the server only
   answers once PATH exists, which this client creates when the progress notification reaches
   it: the answer arriving proves the notification streamed through Mint before the response
   ended. The notification and the result must come in the same POST response, in that order.

Then checks 1 to 4 again on the SDK's high-level `Client` in its default `auto` mode, which
probes `server/discover` and speaks the modern protocol (2026-07-28: no handshake, the method
and the tool name also in `Mcp-Method` / `Mcp-Name` headers).

Every HTTP response the client received (status, headers, body bytes as read) is recorded by a
transport wrapper and printed on stdout in one JSON document (`responses`), with the checks
passed, so the Rust test can assert the secret is nowhere in it.

Usage: MINT_CAPABILITY=... mcp_http_client.py --url URL [--proxy http://MINT] [--gate PATH]
       HTTPS_PROXY=http://agent:CAP@MINT SSL_CERT_FILE=ca.pem mcp_http_client.py --url URL
                                                               --trust-env [--gate PATH]
Exits 0 when every check passed, 1 on the first failure (with the reason on stderr).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import httpx2

from mcp import Client, ClientSession, MCPError
from mcp.client.streamable_http import streamable_http_client
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

REDACTED = "[mint:redacted]"
PLACEHOLDER = "{{mint:mcpkey}}"
JSONRPC_REFUSED = -32001


class CheckFailed(Exception):
    """One expectation did not hold."""


def check(condition: bool, what: str) -> None:
    if not condition:
        raise CheckFailed(what)


class RecordingStream(httpx2.AsyncByteStream):
    """Passes a response body through and keeps a copy of every byte read."""

    def __init__(self, inner: httpx2.AsyncByteStream, record: dict[str, Any]) -> None:
        self.inner = inner
        self.record = record

    async def __aiter__(self):  # type: ignore[override]
        async for chunk in self.inner:
            self.record["body"] += chunk.decode("utf-8", errors="replace")
            yield chunk

    async def aclose(self) -> None:
        await self.inner.aclose()


class RecordingTransport(httpx2.AsyncBaseTransport):
    """The default transport (no proxy from the environment), or one through `proxy`, recording
    every response."""

    def __init__(self, proxy: httpx2.Proxy | None) -> None:
        self.inner = httpx2.AsyncHTTPTransport(trust_env=False, proxy=proxy)
        self.responses: list[dict[str, Any]] = []

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await self.inner.handle_async_request(request)
        record: dict[str, Any] = {
            "request": f"{request.method} {request.url.path}",
            "status": response.status_code,
            "headers": [[k.decode("latin-1"), v.decode("latin-1")] for k, v in response.headers.raw],
            "body": "",
        }
        self.responses.append(record)
        return httpx2.Response(
            status_code=response.status_code,
            headers=response.headers,
            stream=RecordingStream(response.stream, record),  # type: ignore[arg-type]
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self.inner.aclose()


class RecordingHook:
    """A response hook recording every response (and, as it is read, its body) of a client whose
    transports httpx2 builds itself from the environment."""

    def __init__(self) -> None:
        self.responses: list[dict[str, Any]] = []

    async def __call__(self, response: httpx2.Response) -> None:
        record: dict[str, Any] = {
            "request": f"{response.request.method} {response.request.url.path}",
            "status": response.status_code,
            "headers": [[k.decode("latin-1"), v.decode("latin-1")] for k, v in response.headers.raw],
            "body": "",
        }
        self.responses.append(record)
        response.stream = RecordingStream(response.stream, record)  # type: ignore[arg-type]


def text_of(result: Any) -> str:
    check(not result.is_error, f"tool result flagged as error: {result}")
    texts = [block.text for block in result.content if block.type == "text"]
    check(len(texts) == 1, f"expected one text block, got {result.content}")
    return texts[0]


async def run(
    url: str,
    forward: bool,
    capability: str | None,
    gate: Path | None,
    transport: RecordingTransport | RecordingHook,
) -> list[str]:
    checks: list[str] = []
    headers = {"X-Api-Key": PLACEHOLDER}
    if not forward and capability is not None:
        headers["Mint-Capability"] = capability
    timeout = httpx2.Timeout(30.0, read=60.0)
    if isinstance(transport, RecordingHook):
        client = httpx2.AsyncClient(
            headers=headers, timeout=timeout, trust_env=True, event_hooks={"response": [transport]}
        )
    else:
        client = httpx2.AsyncClient(transport=transport, headers=headers, timeout=timeout)
    async with client as http:
        async with streamable_http_client(url, http_client=http) as (read, write):
            async with ClientSession(read, write, read_timeout_seconds=60) as session:
                # 1. The handshake and the tool list: the endpoint rule, no tool.
                init = await session.initialize()
                check(init.server_info.name == "mint-test-mcp-server", f"server info {init.server_info}")
                listed = await session.list_tools()
                names = sorted(tool.name for tool in listed.tools)
                check(names == ["delete_everything", "leak", "search"], f"tools are {names}")
                checks.append("initialize and tools/list")

                await call_tools(session, transport, checks)

                # 5. Streaming: the progress notification must arrive before the response ends.
                if gate is not None:
                    progress: list[str] = []

                    async def on_progress(value: float, total: float | None, message: str | None) -> None:
                        progress.append(message or "")
                        gate.touch()

                    before = len(transport.responses)
                    answer = text_of(
                        await session.call_tool(
                            "search", {"query": "streamed"}, progress_callback=on_progress
                        )
                    )
                    check(progress == ["searching"], f"progress notifications: {progress}")
                    check(
                        answer == "streamed result after the gate opened",
                        f"streamed search answered {answer!r}",
                    )
                    streamed = [
                        r
                        for r in transport.responses[before:]
                        if r["request"].startswith("POST") and "notifications/progress" in r["body"]
                    ]
                    check(len(streamed) == 1, "the progress notification came on no POST response")
                    body = streamed[0]["body"]
                    content_type = dict(streamed[0]["headers"]).get("content-type", "")
                    check(content_type.startswith("text/event-stream"), f"content type {content_type}")
                    check(
                        body.index("notifications/progress") < body.index("after the gate opened"),
                        "the result came before the notification",
                    )
                    checks.append("progress streamed before the end of the SSE response")

        # The high-level client in its default mode: the modern protocol, no handshake.
        async with Client(streamable_http_client(url, http_client=http), read_timeout_seconds=60) as client:
            check(
                client.protocol_version in MODERN_PROTOCOL_VERSIONS,
                f"Client (auto) negotiated {client.protocol_version}",
            )
            listed = await client.list_tools()
            names = sorted(tool.name for tool in listed.tools)
            check(names == ["delete_everything", "leak", "search"], f"Client (auto): tools are {names}")
            await call_tools(client, transport, checks, label="Client (auto): ")
    return checks


async def call_tools(
    session: Any,
    transport: RecordingTransport | RecordingHook,
    checks: list[str],
    label: str = "",
) -> None:
    """Checks 2 to 4 on a connected `ClientSession` or `Client`."""
    # 2. An allowed tool.
    answer = text_of(await session.call_tool("search", {"query": "mint"}))
    check(answer == "3 results for mint", f"{label}search answered {answer!r}")
    checks.append(f"{label}search answered")

    # 3. A tool that echoes the key: it must come back redacted.
    answer = text_of(await session.call_tool("leak", {}))
    check(answer == f"the key I received is {REDACTED}", f"{label}leak answered {answer!r}")
    checks.append(f"{label}leaked key redacted")

    # 4. A denied tool: a JSON-RPC error the SDK surfaces, from an HTTP 403.
    before = len(transport.responses)
    try:
        result = await session.call_tool("delete_everything", {})
    except MCPError as error:
        check(error.code == JSONRPC_REFUSED, f"{label}refusal code {error.code}: {error}")
        data = error.data or {}
        check(data.get("code") == "policy_denied", f"{label}refusal data {data}")
        check("refused by Mint" in error.message, f"{label}refusal message {error.message!r}")
    else:
        raise CheckFailed(f"{label}delete_everything was not refused: {result}")
    refusals = [r for r in transport.responses[before:] if r["status"] == 403]
    check(len(refusals) == 1, f"{label}responses to the refused call: {transport.responses[before:]}")
    checks.append(f"{label}delete_everything refused with a JSON-RPC error on HTTP 403")


async def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--proxy")
    parser.add_argument("--gate")
    parser.add_argument("--trust-env", action="store_true")
    args = parser.parse_args()
    capability = os.environ.get("MINT_CAPABILITY")
    proxy = None
    transport: RecordingTransport | RecordingHook
    if args.trust_env:
        transport = RecordingHook()
    else:
        if capability is None:
            raise SystemExit("MINT_CAPABILITY is not set")
        if args.proxy:
            proxy = httpx2.Proxy(args.proxy, headers={"Proxy-Authorization": f"Bearer {capability}"})
        transport = RecordingTransport(proxy)
    status = 0
    checks: list[str] = []
    try:
        gate = Path(args.gate) if args.gate else None
        forward = proxy is not None or args.trust_env
        checks = await run(args.url, forward, capability, gate, transport)
    except Exception as error:  # noqa: BLE001 - any failure is a failed test
        for leaf in leaves(error):
            kind = "" if isinstance(leaf, CheckFailed) else f"{type(leaf).__name__}: "
            print(f"FAILED: {kind}{leaf}", file=sys.stderr)
        status = 1
    json.dump({"checks": checks, "responses": transport.responses}, sys.stdout)
    sys.stdout.write("\n")
    return status


def leaves(error: BaseException) -> list[BaseException]:
    """The exceptions inside (possibly nested) exception groups, which anyio task groups raise."""
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in leaves(inner)]
    return [error]


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
