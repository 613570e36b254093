//! Mint's credential broker: the library behind the `mint` binary.
//!
//! Parsing, validation and evaluation of the declaration files live in `mint-policy`; this crate
//! does everything around them that touches the world: files, secrets, the network, the audit
//! log. Nothing depends on this crate. Its rooms, and the rule each keeps:
//!
//! | module | what it holds | its rule |
//! |---|---|---|
//! | [`cli`] | one module per `mint` subcommand: flags, reading inputs, rendering output | decides nothing itself: policy decisions come from `mint-policy` and the proxy's own checks |
//! | [`config`] | paths and environment, declaration files, safe file I/O, hot reload | the only place that opens Mint's own files; refuses what another user could change |
//! | [`secrets`] | credential stores, placeholders, injection, scrubbing | the only room that reveals a secret (`expose_secret()`): to put it in a request, never to show it |
//! | [`capability`] | agent capabilities: issue, store hashes, verify | keeps hashes only; compares in constant time |
//! | [`proxy`] | the pipeline: authenticate, decide, record, send, answer; MCP tool calls | records the decision before anything is substituted or sent |
//! | [`net`] | upstream connections, the TLS client, address checks | never follows a redirect; never connects to an address the checks refuse |
//! | [`limits`] | where call-limit counters live: in memory, or in Redis shared by several brokers | counts exactly or refuses: a store that cannot answer in time refuses the request (503), never counts alone |
//! | [`approval`] | requests an `approve` rule holds, grants, the operator socket | decides only on the operator socket (peer uid checked), never on the proxy port; sees no secret |
//! | [`audit`] | the hash-chained audit log: writer, tail, verify, rotation | fails closed: a record that cannot be written refuses the request |
//! | [`serve`] | the listener, connections, framing, shutdown | hands every request to [`proxy`]; answers nothing on its own but framing errors |
//! | [`demo`] | `mint demo` and its local HTTPS echo upstream | loopback only, a throwaway home and secret |
//!
//! `scripts/check-deps.sh` checks the rules a grep can (which modules may call `expose_secret()`,
//! and that `cli/` does not reach into the proxy's internals); docs/ARCHITECTURE.md draws the map.

#![warn(missing_docs)]

pub mod approval;
pub mod audit;
pub mod capability;
pub mod cli;
pub mod config;
pub mod demo;
#[doc(hidden)]
pub mod fuzzing;
pub mod limits;
pub mod net;
pub mod proxy;
pub mod secrets;
pub mod serve;
