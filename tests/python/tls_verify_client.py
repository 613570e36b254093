#!/usr/bin/env python3
"""Direct TLS connections with Python's `ssl` module, for tests/it/interception.rs: does Python
accept a server's leaf under a given CA alone (a name-constrained one, issue 15)?

Usage: `tls_verify_client.py CASES`, CASES being JSON: a list of `{"cafile", "host", "port"}`.
Each case connects to 127.0.0.1:PORT, verifies the leaf for HOST (SNI and hostname check; an IP
address is checked as an address) against CAFILE alone with `VERIFY_X509_STRICT`, sends
`GET /` and reads the answer. Prints a JSON list, one entry per case: `{"host", "body"}`, or
`{"host", "error"}` with OpenSSL's verification message.

The CA variables of the machine are removed by the test before this runs; the context is built
from CAFILE only.
"""

from __future__ import annotations

import json
import socket
import ssl
import sys


def handshake(cafile: str, host: str, port: int) -> dict[str, str]:
    context = ssl.create_default_context(cafile=cafile)
    context.verify_flags |= ssl.VERIFY_X509_STRICT
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=20) as raw:
            with context.wrap_socket(raw, server_hostname=host) as tls:
                tls.sendall(f"GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
                answer = b""
                while chunk := tls.recv(4096):
                    answer += chunk
                return {"host": host, "body": answer.decode("latin-1").split("\r\n\r\n", 1)[-1]}
    except ssl.SSLCertVerificationError as error:
        return {"host": host, "error": str(error.verify_message)}


def main() -> None:
    cases = json.loads(sys.argv[1])
    results = [handshake(c["cafile"], c["host"], int(c["port"])) for c in cases]
    print(json.dumps(results))


if __name__ == "__main__":
    main()
