#!/usr/bin/env python3
"""Writes the seed corpus under seeds/line_handler/ from the mint-mcp tests' own request lines.

Run from mcp/fuzz: `python3 make_seeds.py`. The files are small and committed; libFuzzer reads
them as a second corpus directory (see README.md).
"""
import hashlib
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parent
TESTS = ROOT.parent / "tests"
RAW = re.compile(r'r#"(.*?)"#', re.S)


def main():
    out = ROOT / "seeds" / "line_handler"
    out.mkdir(parents=True, exist_ok=True)
    seen = set()
    for path in sorted(TESTS.rglob("*.rs")) + sorted((ROOT.parent / "src").rglob("*.rs")):
        for m in RAW.finditer(path.read_text()):
            s = m.group(1)
            if '"jsonrpc"' in s or '"method"' in s:
                data = s.encode()
                if data not in seen:
                    seen.add(data)
                    (out / hashlib.sha1(data).hexdigest()[:16]).write_bytes(data)
    # Every tool once, with arguments that reach the files of the fuzz home.
    for name, args in [
        ("alias_list", "{}"),
        ("policy_check", "{}"),
        ("policy_check", '{"file":"policy.yaml"}'),
        ("audit_tail", '{"n":5}'),
        ("audit_tail", '{"n":3,"decision":"deny"}'),
        ("mint_usage", '{"alias":"github"}'),
    ]:
        line = f'{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"{name}","arguments":{args}}}}}'
        data = line.encode()
        (out / hashlib.sha1(data).hexdigest()[:16]).write_bytes(data)


main()
