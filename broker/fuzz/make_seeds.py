#!/usr/bin/env python3
"""Writes the seed corpora under seeds/<target>/ from the unit tests' own inputs.

Run from broker/fuzz: `python3 make_seeds.py`. The files are small and committed; libFuzzer reads
them as a second corpus directory (see README.md).
"""
import hashlib
import pathlib
import re
import warnings

warnings.simplefilter("ignore", DeprecationWarning)

ROOT = pathlib.Path(__file__).resolve().parent
SRC = ROOT.parent / "src"
RAW = re.compile(r'r#"(.*?)"#', re.S)
PLAIN = re.compile(r'(?<![r#])b?"((?:[^"\\\n]|\\.)*)"')


def rust_strings(path):
    text = path.read_text()
    found = [m.group(1) for m in RAW.finditer(text)]
    for m in PLAIN.finditer(text):
        try:
            found.append(bytes(m.group(1), "utf-8").decode("unicode_escape").encode("latin-1").decode("utf-8"))
        except (UnicodeDecodeError, UnicodeEncodeError):
            pass
    return found


def write(target, data):
    out = ROOT / "seeds" / target
    out.mkdir(parents=True, exist_ok=True)
    (out / hashlib.sha1(data).hexdigest()[:16]).write_bytes(data)


def main():
    # placeholder_scan: flags, scheme, authority, path, query, header value, header name, body.
    strings = [s for s in rust_strings(SRC / "secrets/placeholder/tests.rs") if "mint" in s or "%7" in s.lower()]
    shapes = [
        lambda b: b"\x00https\0api.github.com\0/user\0" + b + b"\0\0\0",
        lambda b: b"\x00https\0api.github.com\0/user\0\0" + b + b"\0authorization\0",
        lambda b: b"\x01https\0api.github.com\0/user\0\0\0\0" + b,
        lambda b: b"\x02https\0auth.example.com\0/token\0\0\0\0" + b,
        lambda b: b"\x05https\0api.github.com\0/user\0\0\0\0" + b,
    ]
    for i, s in enumerate(strings):
        # Each test input in the part it suits best (JSON-looking ones as a JSON body), and in
        # one more part in turn.
        b = s.encode()
        first = 2 if s.lstrip().startswith(("{", "[")) else (3 if "=" in s else 0)
        write("placeholder_scan", shapes[first](b))
        write("placeholder_scan", shapes[(first + 1 + i) % len(shapes)](b))
    write("placeholder_scan", b"\x00https\0api.github.com\0/repos/{{mint:github}}\0a=1\0Bearer {{mint:github}}\0x-api-key\0")

    # mcp_call: flags (bit 0: gzip too), then the body.
    for s in rust_strings(SRC / "proxy/mcp_call/tests.rs"):
        if s.lstrip().startswith(("{", "[")) or "tools" in s:
            write("mcp_call", (b"\x01" if len(s) % 4 == 0 else b"\x00") + s.encode())

    # head_sniff: two split bytes, then the stream.
    for s in rust_strings(SRC / "serve/framing.rs") + rust_strings(SRC / "serve/connection.rs"):
        if "HTTP/" in s:
            write("head_sniff", b"\x05\x09" + s.encode())

    # audit_line: the reader's buffer size, then the log file.
    for log in [ROOT.parent.parent / "examples/audit.log", ROOT.parent.parent / "mcp/tests/fixtures/mixed-audit.log"]:
        for size in (b"\x00", b"\x07"):
            write("audit_line", size + log.read_bytes())
        for line in log.read_bytes().splitlines():
            write("audit_line", b"\x40" + line + b"\n")


main()
