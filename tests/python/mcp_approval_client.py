#!/usr/bin/env python3
"""An MCP client built with the official MCP Python SDK whose tool calls wait for a human.

The agent's side of tests/it/approvals_clients.rs: a `ClientSession` over the SDK's
`streamable_http_client`, with an `httpx2.AsyncClient` whose default headers are the capability
(`Mint-Capability`) and the MCP server's API key as a placeholder (`X-Api-Key: {{mint:mcpkey}}`),
pointed at `http://MINT/v1/proxy/http/127.0.0.1:PORT/mcp`. It never knows the key.

It runs the initialize handshake and tools/list (the endpoint's own traffic, which the policy
allows), then makes each `--call TOOL JSON-ARGUMENTS` in order, one at a time: Mint holds each
one until the operator decides, and the test (the operator) approves or denies it meanwhile. The
read timeout is long enough for a decision on a loaded machine.

Prints one JSON document on stdout: `calls`, one entry per call, either `{"text": ...}` (the
tool's answer) or `{"error": {"code", "message", "data"}}` (the JSON-RPC error the SDK raised),
and `responses`, every HTTP response the client received (status, headers, body as read), so
the Rust test can check the secret is nowhere in them.

Usage: MINT_CAPABILITY=... mcp_approval_client.py --url URL --call search '{"query": "x"}' ...
Exits 0 when the session ran to the end (whatever the calls' answers), 1 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from typing import Any

import httpx2

from mcp import ClientSession, MCPError
from mcp.client.streamable_http import streamable_http_client

PLACEHOLDER = "{{mint:mcpkey}}"


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
    """The default transport (no proxy from the environment), recording every response."""

    def __init__(self) -> None:
        self.inner = httpx2.AsyncHTTPTransport(trust_env=False)
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


async def run(url: str, capability: str, calls: list[tuple[str, dict[str, Any]]], transport: RecordingTransport) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = []
    headers = {"X-Api-Key": PLACEHOLDER, "Mint-Capability": capability}
    # A held call answers when the operator decides: allow minutes, not the usual seconds.
    timeout = httpx2.Timeout(30.0, read=240.0)
    async with httpx2.AsyncClient(transport=transport, headers=headers, timeout=timeout) as http:
        async with streamable_http_client(url, http_client=http) as (read, write):
            async with ClientSession(read, write, read_timeout_seconds=240) as session:
                await session.initialize()
                listed = await session.list_tools()
                names = sorted(tool.name for tool in listed.tools)
                if names != ["delete_everything", "leak", "search"]:
                    raise RuntimeError(f"tools are {names}")
                for tool, arguments in calls:
                    try:
                        result = await session.call_tool(tool, arguments)
                    except MCPError as error:
                        results.append(
                            {"error": {"code": error.code, "message": error.message, "data": error.data}}
                        )
                        continue
                    texts = [block.text for block in result.content if block.type == "text"]
                    results.append({"text": texts[0] if len(texts) == 1 else None, "is_error": result.is_error})
    return results


async def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--call", nargs=2, action="append", default=[], metavar=("TOOL", "JSON"))
    args = parser.parse_args()
    capability = os.environ.get("MINT_CAPABILITY")
    if capability is None:
        raise SystemExit("MINT_CAPABILITY is not set")
    calls = [(tool, json.loads(arguments)) for tool, arguments in args.call]
    transport = RecordingTransport()
    status = 0
    results: list[dict[str, Any]] = []
    try:
        results = await run(args.url, capability, calls, transport)
    except Exception as error:  # noqa: BLE001 - any failure is a failed test
        for leaf in leaves(error):
            print(f"FAILED: {type(leaf).__name__}: {leaf}", file=sys.stderr)
        status = 1
    json.dump({"calls": results, "responses": transport.responses}, sys.stdout)
    sys.stdout.write("\n")
    return status


def leaves(error: BaseException) -> list[BaseException]:
    """The exceptions inside (possibly nested) exception groups, which anyio task groups raise."""
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in leaves(inner)]
    return [error]


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
