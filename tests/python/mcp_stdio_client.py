#!/usr/bin/env python3
"""Drives the real `mint-mcp` binary with the official MCP Python SDK over stdio.

Two sessions: the SDK's high-level `Client` (its default "auto" mode first probes
`server/discover`, which mint-mcp answers with an error, then falls back to `initialize`),
and a plain `ClientSession` on `stdio_client` with the classic handshake. Each one lists the
tools and calls every tool with and without arguments, checking every result.

The SDK starts the server with only HOME, LOGNAME, PATH, SHELL, TERM and USER from this
process's environment, so the MINT_* variables are passed explicitly.

Usage: mcp_stdio_client.py --server PATH/TO/mint-mcp --repo WORKSPACE_ROOT
Exits 0 when every check passed, 1 on the first failure (with the reason on stderr).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import json
import sys
import warnings
from pathlib import Path
from typing import Any

from mcp import (
    Client,
    ClientSession,
    MCPDeprecationWarning,
    MCPError,
    StdioServerParameters,
    stdio_client,
)

EXPECTED_TOOLS = ["alias_list", "policy_check", "audit_tail", "mint_usage"]
EXPECTED_ANNOTATIONS = {
    "read_only_hint": True,
    "destructive_hint": False,
    "idempotent_hint": True,
    "open_world_hint": False,
}
INTERNAL_ERROR = -32603
INVALID_PARAMS = -32602


class CheckFailed(Exception):
    """One expectation did not hold."""


def check(condition: bool, what: str) -> None:
    if not condition:
        raise CheckFailed(what)


def payload(result: Any) -> dict[str, Any]:
    """The tool's payload: exactly one text block of pretty-printed JSON."""
    check(not result.is_error, f"tool result flagged as error: {result}")
    check(len(result.content) == 1, f"expected one content block, got {result.content}")
    block = result.content[0]
    check(block.type == "text", f"expected a text block, got {block.type}")
    value = json.loads(block.text)
    check(block.text == json.dumps(value, indent=2, ensure_ascii=False),
          "the text block is not pretty-printed JSON")
    return value


async def expect_error(call: Any, code: int, what: str) -> dict[str, Any]:
    """Awaits `call`, which must fail with a JSON-RPC error of `code`."""
    try:
        result = await call
    except MCPError as error:
        check(error.code == code, f"{what}: expected code {code}, got {error.code} ({error})")
        return {"message": error.error.message, "data": error.error.data}
    raise CheckFailed(f"{what}: expected error {code}, got a result: {result}")


async def exercise(session: Any, repo: Path, label: str) -> None:
    """Lists the tools and calls each one, on a connected `Client` or `ClientSession`."""
    listed = await session.list_tools()
    names = [tool.name for tool in listed.tools]
    check(names == EXPECTED_TOOLS, f"{label}: tools are {names}")
    for tool in listed.tools:
        check(tool.input_schema.get("type") == "object", f"{tool.name}: schema {tool.input_schema}")
        check(bool(tool.description), f"{tool.name}: no description")
        annotations = tool.annotations.model_dump() if tool.annotations else {}
        for key, value in EXPECTED_ANNOTATIONS.items():
            check(annotations.get(key) is value, f"{tool.name}: annotation {key} is {annotations.get(key)}")
    schemas = {tool.name: tool.input_schema for tool in listed.tools}
    check(schemas["policy_check"] == {
        "type": "object", "required": ["file"], "properties": {"file": {"type": "string"}},
    }, f"policy_check schema {schemas['policy_check']}")
    check(schemas["audit_tail"]["properties"]["n"] == {"type": "integer", "minimum": 1},
          f"audit_tail schema {schemas['audit_tail']}")

    # alias_list: without arguments (the configured file) and with a path.
    aliases = payload(await session.call_tool("alias_list", {}))
    check(aliases["path"] == "examples/aliases.yaml", f"alias_list path {aliases['path']}")
    check(aliases["count"] == 3, f"alias_list count {aliases['count']}")
    check([a["name"] for a in aliases["aliases"]] == ["github", "context7", "slack"],
          f"alias_list names {aliases['aliases']}")
    check(all("source" not in a for a in aliases["aliases"]), "alias_list shows a secret source")
    explicit = payload(await session.call_tool("alias_list", {"path": str(repo / "examples/aliases.yaml")}))
    check(explicit["aliases"] == aliases["aliases"], "alias_list with a path differs")
    await expect_error(session.call_tool("alias_list", {"path": str(repo / "mcp/tests/fixtures/broken-aliases.yaml")}),
                       INTERNAL_ERROR, "alias_list on a broken file")

    # policy_check: with its required file, without it, and on an invalid file.
    policy = payload(await session.call_tool("policy_check", {"file": "examples/policy.yaml"}))
    check(list(policy) == ["file", "valid", "rule_count", "legacy_call_limit_count", "default", "warnings"],
          f"policy_check fields {list(policy)}")
    check(policy["valid"] is True and policy["rule_count"] == 10 and policy["default"] == "deny",
          f"policy_check result {policy}")
    check(policy["legacy_call_limit_count"] == 2, f"policy_check legacy count {policy}")
    await expect_error(session.call_tool("policy_check", {}), INVALID_PARAMS, "policy_check without file")
    await expect_error(session.call_tool("policy_check", {"file": ""}), INVALID_PARAMS, "policy_check with ''")
    invalid = await expect_error(
        session.call_tool("policy_check", {"file": "mcp/tests/fixtures/broken-policy.yaml"}),
        INTERNAL_ERROR, "policy_check on a broken file")
    check(" errors in mcp/tests/fixtures/broken-policy.yaml; first: " in invalid["message"],
          f"policy_check summary {invalid['message']}")
    check(isinstance(invalid["data"], list) and invalid["data"]
          and set(invalid["data"][0]) == {"code", "line", "column", "rule_id", "path", "message"},
          f"policy_check data {invalid['data']}")
    refused = await expect_error(
        session.call_tool("policy_check", {"file": "mcp/tests/fixtures/home/capabilities.yaml"}),
        INTERNAL_ERROR, "policy_check on the capabilities file")
    check(refused["data"] == {"kind": "unreadable"}, f"refusal data {refused}")

    # audit_tail: the default 20 (the example has 15), a given n and path, and a bad n.
    tail = payload(await session.call_tool("audit_tail", {}))
    check(tail["count"] == 15 and len(tail["events"]) == 15 and tail["skipped"] == 0, f"audit_tail {tail['count']}")
    check(tail["path"] == "examples/audit.log", f"audit_tail path {tail['path']}")
    two = payload(await session.call_tool("audit_tail", {"n": 2, "path": "mcp/tests/fixtures/mixed-audit.log"}))
    check(two["count"] == 2 and two["skipped"] == 1, f"audit_tail mixed {two['count']} {two['skipped']}")
    check(two["events"][-1]["id"] == "01JDZ4VGB5N9M2L4K6J8H0G2F4", f"audit_tail newest {two['events'][-1]}")
    await expect_error(session.call_tool("audit_tail", {"n": 0}), INVALID_PARAMS, "audit_tail n=0")

    # mint_usage: no arguments at all, then an empty object.
    usage = payload(await session.call_tool("mint_usage"))
    check(usage["tools"] == EXPECTED_TOOLS, f"mint_usage tools {usage['tools']}")
    check(usage["capability_header"] == "Mint-Capability", f"mint_usage header {usage}")
    check(usage["placeholder"]["syntax"] == "{{mint:ALIAS}}", f"mint_usage placeholder {usage}")
    check(usage["proxy_route"]["base_url"] == "http://127.0.0.1:8799", f"mint_usage base {usage['proxy_route']}")
    check(payload(await session.call_tool("mint_usage", {})) == usage, "mint_usage differs with {}")

    # Unknown tool: the reference's -32603.
    await expect_error(session.call_tool("read_file", {"path": "/etc/passwd"}), INTERNAL_ERROR, "unknown tool")
    print(f"{label}: ok", file=sys.stderr)


def leaves(error: BaseException) -> list[BaseException]:
    """The exceptions inside (possibly nested) exception groups, which anyio task groups raise."""
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in leaves(inner)]
    return [error]


async def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", required=True, type=Path)
    parser.add_argument("--repo", required=True, type=Path)
    args = parser.parse_args()
    repo = args.repo.resolve()
    params = StdioServerParameters(
        command=str(args.server.resolve()),
        args=[],
        cwd=str(repo),
        env={
            "MINT_HOME": "mcp/tests/fixtures/home",
            "MINT_ALIASES_PATH": "examples/aliases.yaml",
            "MINT_AUDIT_LOG_PATH": "examples/audit.log",
            "MINT_LISTEN": "127.0.0.1:8799",
        },
    )
    print(f"mcp SDK {importlib.metadata.version('mcp')}", file=sys.stderr)
    try:
        # The high-level client, in its default "auto" mode.
        async with Client(params, read_timeout_seconds=20) as client:
            check(client.protocol_version == "2025-11-25", f"negotiated {client.protocol_version}")
            check(client.server_info is not None and client.server_info.name == "mint-mcp",
                  f"server info {client.server_info}")
            capabilities = client.server_capabilities
            check(capabilities is not None and capabilities.tools is not None, f"capabilities {capabilities}")
            with warnings.catch_warnings():
                # The SDK warns that `ping` is gone from the 2026 protocol; this is a 2025 session.
                warnings.simplefilter("ignore", MCPDeprecationWarning)
                await client.send_ping()
            await exercise(client, repo, "Client (auto)")
        # The classic session with the initialize handshake.
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write, read_timeout_seconds=20) as session:
                result = await session.initialize()
                check(result.protocol_version == "2025-11-25", f"negotiated {result.protocol_version}")
                check(result.server_info.name == "mint-mcp", f"server info {result.server_info}")
                await session.send_ping()
                await exercise(session, repo, "ClientSession")
    except Exception as error:  # noqa: BLE001 - any SDK error is a failed interoperability test
        for leaf in leaves(error):
            kind = "" if isinstance(leaf, CheckFailed) else f"{type(leaf).__name__}: "
            print(f"FAILED: {kind}{leaf}", file=sys.stderr)
        return 1
    print("python mcp client: all checks passed", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
