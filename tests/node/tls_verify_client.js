// Direct TLS connections with Node's `tls` module, for tests/it/interception.rs: does Node
// accept a server's leaf under a given CA alone (a name-constrained one, issue 15)?
//
// Usage: `node tls_verify_client.js CASES`, CASES being JSON: a list of {"cafile", "host",
// "port"}. Each case connects to 127.0.0.1:PORT with `ca:` set to CAFILE alone (Node's bundled
// roots are replaced), checks the leaf for HOST (as SNI for a name; an IP address is checked as
// an address), sends `GET /` and reads the answer. Prints a JSON list, one entry per case:
// {"host", "body"}, or {"host", "error"} with OpenSSL's verification message.
//
// The CA variables of the machine (NODE_EXTRA_CA_CERTS) are removed by the test before this runs.

"use strict";

const fs = require("fs");
const net = require("net");
const tls = require("tls");

function handshake({ cafile, host, port }) {
  return new Promise((resolve) => {
    const options = { host: "127.0.0.1", port, ca: fs.readFileSync(cafile) };
    if (net.isIP(host)) {
      // No SNI for an address; the identity check uses `host`.
      options.host = host;
    } else {
      options.servername = host;
    }
    let body = "";
    const socket = tls.connect(options, () => {
      socket.write(`GET / HTTP/1.1\r\nHost: ${host}\r\nConnection: close\r\n\r\n`);
    });
    socket.setTimeout(20000, () => socket.destroy(new Error("timeout")));
    socket.on("data", (chunk) => {
      body += chunk.toString("latin1");
    });
    socket.on("end", () => resolve({ host, body: body.split("\r\n\r\n").slice(1).join("\r\n\r\n") }));
    socket.on("error", (error) => resolve({ host, error: error.message }));
  });
}

(async () => {
  const cases = JSON.parse(process.argv[2]);
  const results = [];
  for (const c of cases) {
    results.push(await handshake(c));
  }
  process.stdout.write(JSON.stringify(results) + "\n");
})();
