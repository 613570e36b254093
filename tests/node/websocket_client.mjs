// A WebSocket client for tests/it/websocket.rs: Node's `ws` (pinned in package.json), offering
// permessage-deflate as it does by default, or with `--undici` undici's WebSocket through its
// EnvHttpProxyAgent (HTTPS_PROXY, NODE_EXTRA_CA_CERTS): a `CONNECT` tunnel Mint intercepts.
//
//     node websocket_client.mjs URL STEPS [--header NAME:VALUE]... [--undici]
//
// STEPS is a JSON list of text messages: each is sent and one answer awaited (`close-leak`: the
// upstream closes instead; `close`: the client closes with 1000). Prints a JSON object: the
// extensions negotiated, each answer (binary as {"binary": hex}), the close code and reason.

import WebSocket from 'ws';
import { EnvHttpProxyAgent, WebSocket as UndiciWebSocket } from 'undici';

const args = process.argv.slice(2);
const url = args[0];
const steps = JSON.parse(args[1]);
const headers = {};
let undici = false;
for (let i = 2; i < args.length; i++) {
  if (args[i] === '--header') {
    const [name, ...rest] = args[++i].split(':');
    headers[name] = rest.join(':');
  } else if (args[i] === '--undici') {
    undici = true;
  }
}

const result = { answers: [] };
const ws = undici
  ? new UndiciWebSocket(url, { dispatcher: new EnvHttpProxyAgent(), headers })
  : new WebSocket(url, { headers, perMessageDeflate: true });
ws.binaryType = 'arraybuffer';
const done = new Promise((resolve) => {
  let step = 0;
  const next = () => {
    if (step >= steps.length) {
      ws.close(1000, 'done');
      return;
    }
    const message = steps[step++];
    if (message === 'close') {
      ws.close(1000, 'done');
      return;
    }
    ws.send(message);
  };
  ws.onopen = () => {
    result.extensions = ws.extensions === '' || ws.extensions === undefined
      ? [] : [String(typeof ws.extensions === 'string' ? ws.extensions : Object.keys(ws.extensions))];
    if (result.extensions.length === 1 && result.extensions[0] === '') result.extensions = [];
    next();
  };
  ws.onmessage = (event) => {
    const data = event.data;
    result.answers.push(typeof data === 'string' ? data : { binary: Buffer.from(data).toString('hex') });
    next();
  };
  ws.onerror = (event) => {
    result.error = String(event.message || event.error || 'error');
  };
  ws.onclose = (event) => {
    result.close = { code: event.code, reason: event.reason };
    resolve();
  };
});
await done;
console.log(JSON.stringify(result));
process.exit(0);
