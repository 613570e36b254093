"""A WebSocket client for tests/it/websocket.rs, on Python's `websockets` (pinned in
requirements.txt), offering `permessage-deflate` as it does by default.

    websocket_client.py URL STEPS [--header NAME:VALUE]... [--forward-proxy HOST:PORT]

STEPS is a JSON list of text messages: each is sent and one answer awaited (`close-leak`: the
upstream closes instead; `close`: the client closes with 1000; `hold:N`: nothing is sent, the
client waits up to N seconds for the socket to be closed by the other side, and prints
`"held": true` if it was not). Prints a JSON object: the
extensions negotiated, each answer (binary ones as `{"binary": hex}`), and the close code and
reason the client saw.

The connection goes as `websockets` makes it: to the URL (the `/v1/proxy/` route), or through
the proxy its environment names (`HTTPS_PROXY` for `wss://`: a `CONNECT` tunnel, which Mint
intercepts). `--forward-proxy` sends the opening handshake in absolute form to a plain-HTTP
proxy, as an `HTTP_PROXY` client sends any `http://` request: `websockets` itself tunnels with
`CONNECT` for every proxy, so its request line is rewritten here; the frames are its own.
"""

import argparse
import asyncio
import json
import socket
import sys

import websockets
from websockets.asyncio.client import connect
from websockets.client import ClientProtocol


async def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("steps")
    parser.add_argument("--header", action="append", default=[])
    parser.add_argument("--forward-proxy")
    args = parser.parse_args()
    headers = [tuple(h.split(":", 1)) for h in args.header]
    options = {"additional_headers": headers, "open_timeout": 20, "close_timeout": 5}
    if args.forward_proxy:
        original = ClientProtocol.connect

        def absolute_form(self):
            request = original(self)
            request.path = args.url.replace("ws://", "http://", 1)
            return request

        ClientProtocol.connect = absolute_form
        host, port = args.forward_proxy.rsplit(":", 1)
        options["sock"] = socket.create_connection((host, int(port)))
        options["proxy"] = None
    result = {"answers": []}
    try:
        async with connect(args.url, **options) as ws:
            result["extensions"] = [type(e).__name__ for e in ws.protocol.extensions]
            for step in json.loads(args.steps):
                if step == "close":
                    await ws.close(1000, "done")
                    break
                if step.startswith("hold:"):
                    try:
                        await asyncio.wait_for(ws.wait_closed(), float(step[len("hold:"):]))
                    except asyncio.TimeoutError:
                        result["held"] = True
                    break
                await ws.send(step)
                try:
                    answer = await ws.recv()
                except websockets.exceptions.ConnectionClosed:
                    break
                result["answers"].append(
                    answer if isinstance(answer, str) else {"binary": answer.hex()}
                )
    except websockets.exceptions.InvalidStatus as error:
        result["status"] = error.response.status_code
        result["body"] = error.response.body.decode(errors="replace")
    except websockets.exceptions.ConnectionClosed:
        pass
    if "status" not in result:
        close = ws.protocol.close_rcvd
        result["close"] = {"code": close.code, "reason": close.reason} if close else None
    print(json.dumps(result))


asyncio.run(main())
