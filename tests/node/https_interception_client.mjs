// An unmodified Node HTTPS client through Mint's CONNECT interception, for
// tests/it/interception_clients.rs.
//
// `node https_interception_client.mjs URL` sends `GET URL` with the header
// `Authorization: Bearer {{mint:echo}}` through undici's `fetch()` after
// `setGlobalDispatcher(new EnvHttpProxyAgent())`: the proxy (and the capability, as the password
// of its URL) comes from HTTPS_PROXY, and the trust in Mint's CA from NODE_EXTRA_CA_CERTS, which
// Node adds to its default store. Nothing else configures it. Prints one JSON document
// `{"status", "headers", "body"}` on stdout and exits 0; on failure prints the error and its
// causes (their codes, such as UNABLE_TO_VERIFY_LEAF_SIGNATURE) on stderr and exits 1.
//
// The proxy and CA variables the test did not mean are removed by the test before this runs.

import { EnvHttpProxyAgent, fetch, setGlobalDispatcher } from "undici";

const url = process.argv[2];
if (!url) {
  process.stderr.write("usage: https_interception_client.mjs URL\n");
  process.exit(2);
}

setGlobalDispatcher(new EnvHttpProxyAgent());

try {
  const response = await fetch(url, {
    headers: { Authorization: "Bearer {{mint:echo}}" },
    signal: AbortSignal.timeout(20_000),
  });
  const body = await response.text();
  const headers = Object.fromEntries(response.headers.entries());
  process.stdout.write(JSON.stringify({ status: response.status, headers, body }) + "\n");
} catch (error) {
  for (let cause = error; cause; cause = cause.cause) {
    process.stderr.write(`${cause.name}: ${cause.code ?? ""} ${cause.message}\n`);
  }
  process.exit(1);
}
