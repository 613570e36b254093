#!/usr/bin/env python3
"""Writes the seed corpora under seeds/<target>/ from the unit tests' own inputs.

Run from broker/fuzz: `python3 make_seeds.py`. The files are small and committed; libFuzzer reads
them as a second corpus directory (see README.md).
"""
import hashlib
import pathlib
import re
import ssl
import struct
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

    # placeholder_scan with the target's value-shaped placeholders (flags bit 3; SHAPED there).
    gh, slack, jwt = (b"ghp_R8fKq2ZxT4mWv9LpN3bYc7HsD1jGaE5uQ0Zt", b"xoxb-4711-Q9dWm2KfZ7rTLc",
                      b"eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJiIn0.Xq3Zk9PwV")
    for seed in [
        b"\x08https\0api.github.com\0/user\0\0Bearer " + gh + b"\0authorization\0",
        b"\x08https\0api.github.com\0/user\0v=" + jwt + b"&w={{mint:b}}\0\0\0",
        b"\x08https\0api.github.com\0/user\0v=" + jwt.replace(b".", b"%2E") + b"\0\0\0",
        b"\x08https\0api.github.com\0/" + gh + b"\0\0\0\0",
        b"\x09https\0api.github.com\0/user\0\0\0\0" + b'{"token":"' + gh + b'","nested":[{"x":"' + slack + b'"}]}',
        b"\x09https\0api.github.com\0/user\0\0\0\0" + b'{"token":"' + gh.replace(b"_", b"\\u005f") + b'"}',
        b"\x0ahttps\0auth.example.com\0/token\0\0\0\0client_secret=" + slack.replace(b"-", b"%2d"),
        b"\x0bhttps\0api.github.com\0/user\0\0\0\0" + gh + b" " + slack,
        b"\x0dhttps\0api.github.com\0/user\0\0\0\0" + b'{"token":"' + gh + b'"}',
        b"\x08https\0api.github.com\0/user\0\0Bearer " + slack + gh + b"{{mint:x\0x-api-key\0",
    ]:
        write("placeholder_scan", seed)

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

    # h2_watch: steps (high bit: written by the connection; low bits: length), then their bytes.
    def frame(kind, flags, stream, payload=b""):
        return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + payload

    def steps(*parts):
        out = b""
        for written, data in parts:
            while True:
                chunk, data = data[:127], data[127:]
                out += bytes([(0x80 if written else 0) | len(chunk)]) + chunk
                if not data:
                    break
        return out

    preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
    protocol, cancel = struct.pack(">I", 1), struct.pack(">I", 8)
    opened = frame(1, 0x4, 1, b"hpack")
    write("h2_watch", steps((False, preface + opened), (True, frame(3, 0, 1, protocol))))
    write("h2_watch", steps((False, preface + opened), (True, frame(3, 0, 1, cancel))))
    write("h2_watch", steps((False, preface + opened), (True, frame(1, 0x4, 1, b"x") + frame(3, 0, 1, protocol))))
    read = preface + opened + frame(1, 0x5, 3, b"h") + frame(1, 0x4, 5, b"h") + frame(1, 0x4, 7, b"h")
    goaway = frame(7, 0, 0, struct.pack(">I", 5) + protocol)
    write("h2_watch", steps((False, read[:30]), (False, read[30:]), (True, frame(1, 0x4, 5, b"x")), (True, goaway)))
    write("h2_watch", steps((False, preface + opened + frame(0, 0x1, 1, b"body")), (True, frame(7, 0, 0, struct.pack(">I", 1) + protocol))))

    # tunnel_start: flags, the CONNECT authority, NUL, then the agent's first bytes in the tunnel
    # (ClientHellos from Python's ssl module, which never sends an IP address as a server name).
    def client_hello(name):
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        tls = context.wrap_bio(incoming, outgoing, server_hostname=name)
        try:
            tls.do_handshake()
        except ssl.SSLWantReadError:
            pass
        return outgoing.read()

    for authority, name in [
        ("api.github.com:443", "api.github.com"),
        ("api.github.com:443", "API.GitHub.com."),
        ("api.github.com:443", "evil.example.com"),
        ("Api.GitHub.COM.:8443", "api.github.com"),
        ("127.0.0.1:443", None),
        ("[::1]:443", None),
        ("xn--bcher-kva.example:443", "xn--bcher-kva.example"),
        ("api.github.com", "api.github.com"),
    ]:
        write("tunnel_start", b"\x00" + authority.encode() + b"\0" + client_hello(name))
    write("tunnel_start", b"\x01127.0.0.1:443\0" + b"GET / HTTP/1.1\r\n\r\n")


main()
