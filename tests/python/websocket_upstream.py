"""A WebSocket upstream for tests/it/websocket.rs, on Python's `websockets` (pinned in
requirements.txt): plain `ws` on 127.0.0.1:0, or `wss` with a certificate for `--tls-host` that
it makes itself, signed by a CA it writes to `--ca-out` (the broker's `--upstream-ca`).

Prints `{"port": N}` once listening. Appends one JSON line per opening handshake to `--log`:
what the broker forwarded, judged here so the log never holds the secret (`authorization_ok`,
the extension offer, whether a Mint or proxy header arrived) and every message it received.

Each text message from the client is a command: `echo:X` answers `X`; `leak-text`,
`leak-binary` and `leak-split` (one text message in three fragments, the secret cut across
them) answer with the secret the handshake carried; `big:N` answers N bytes; `close-leak`
closes with code 4000 and the secret in the reason.
"""

import argparse
import asyncio
import datetime
import json
import ssl
import sys

import websockets
from websockets.asyncio.server import serve


def make_tls(host, ca_out):
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID
    import tempfile, os

    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "websocket test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    leaf = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(host)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    with open(ca_out, "wb") as f:
        f.write(ca.public_bytes(serialization.Encoding.PEM))
    directory = tempfile.mkdtemp()
    cert_path = os.path.join(directory, "leaf.pem")
    key_path = os.path.join(directory, "leaf.key")
    with open(cert_path, "wb") as f:
        f.write(leaf.public_bytes(serialization.Encoding.PEM))
    with open(key_path, "wb") as f:
        f.write(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_path, key_path)
    context.set_alpn_protocols(["http/1.1"])
    return context


async def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--secret", required=True)
    parser.add_argument("--log", required=True)
    parser.add_argument("--tls-host", help="serve wss with a certificate for this host")
    parser.add_argument("--ca-out", help="where to write the CA of that certificate")
    args = parser.parse_args()
    secret = args.secret

    async def handler(ws):
        headers = ws.request.headers
        record = {
            "path": ws.request.path,
            "authorization_ok": headers.get("Authorization") == f"Bearer {secret}",
            "extensions": headers.get("Sec-WebSocket-Extensions"),
            "mint_or_proxy_headers": [
                name for name in headers.keys() if name.lower().startswith(("mint-", "proxy-"))
            ],
            "negotiated": [type(e).__name__ for e in ws.protocol.extensions],
            "received": [],
        }

        def log():
            with open(args.log, "a") as f:
                f.write(json.dumps(record) + "\n")

        try:
            async for message in ws:
                record["received"].append(
                    message if isinstance(message, str) else {"binary": message.hex()}
                )
                if not isinstance(message, str):
                    await ws.send(message)
                elif message.startswith("echo:"):
                    await ws.send(message[5:])
                elif message == "leak-text":
                    await ws.send(f"the key is {secret} ok")
                elif message == "leak-binary":
                    await ws.send(b"\x00\x01" + secret.encode() + b"\xff")
                elif message == "leak-split":
                    cut = len(secret) // 2
                    await ws.send(["the key is " + secret[:cut], secret[cut:], " ok"])
                elif message.startswith("big:"):
                    await ws.send("x" * int(message[4:]))
                elif message == "close-leak":
                    await ws.close(4000, f"bye {secret}")
                    break
        except websockets.exceptions.ConnectionClosed:
            # Mint closed the socket (a bound, an idle timeout): what the test looks at.
            pass
        finally:
            log()

    ssl_context = make_tls(args.tls_host or "localhost", args.ca_out) if args.ca_out else None
    if not args.tls_host:
        ssl_context = None
    async with serve(handler, "127.0.0.1", 0, ssl=ssl_context, compression="deflate") as server:
        port = server.sockets[0].getsockname()[1]
        print(json.dumps({"port": port}), flush=True)
        # Until the test closes stdin (or kills the process).
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)


asyncio.run(main())
