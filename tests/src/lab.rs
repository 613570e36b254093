//! One lab for the proxy's end-to-end tests: a local HTTPS echo upstream with its own CA, a Mint
//! home whose policy is written against that upstream's port, a capability issued by the real
//! `mint cap issue`, and the real `mint serve` in front of it all.
//!
//! Test files keep what is particular to them (their policy rules, aliases and canaries, and
//! helpers no other file needs) and start a [`Lab`] with a [`LabConfig`]; the rest — the set-up,
//! URLs, curl with the capability, what reached the upstream, the canary checks — lives here once.

use std::path::PathBuf;

use crate::broker::{Broker, CurlResponse, MintHome, curl};
use crate::echo_upstream::EchoConfig;
use crate::{EchoPeer, echo_peer};

/// Declares `struct NAME(Lab)`, which dereferences to the [`Lab`] (mutably too), for a test
/// file's own helpers on top of the shared ones:
/// `mint_tests::lab_newtype!(/** docs */ Lab);` then `impl Lab { fn start() -> Lab { .. } }`.
#[macro_export]
macro_rules! lab_newtype {
    ($(#[$meta:meta])* $name:ident) => {
        $(#[$meta])*
        struct $name($crate::lab::Lab);

        impl ::std::ops::Deref for $name {
            type Target = $crate::lab::Lab;

            fn deref(&self) -> &$crate::lab::Lab {
                &self.0
            }
        }

        impl ::std::ops::DerefMut for $name {
            fn deref_mut(&mut self) -> &mut $crate::lab::Lab {
                &mut self.0
            }
        }
    };
}

/// One alias `echo`, header site, bound to `127.0.0.1` (the echo upstream), its secret the
/// lab's `echo` secret.
pub const ECHO_ALIAS: &str = "aliases:\n  - name: echo\n    hosts: [127.0.0.1]\n    sites: [header]\n    source: file:$SECRETS/echo\n";

/// What a [`Lab`] is made of, besides its policy rules.
#[derive(Debug)]
pub struct LabConfig<'a> {
    /// The echo upstream's configuration.
    pub echo: EchoConfig,
    /// The alias file (`$SECRETS` stands for the home's secret directory).
    pub aliases: &'a str,
    /// The alias secrets, `(name, value)`, written to `$SECRETS/<name>`.
    pub secrets: &'a [(&'a str, &'a str)],
    /// The agent the capability is issued for.
    pub agent: &'a str,
    /// Extra `mint cap issue` arguments (`--alias`, `--ttl`).
    pub cap_args: &'a [&'a str],
    /// Extra `mint serve` arguments.
    pub serve_args: &'a [&'a str],
}

impl Default for LabConfig<'_> {
    /// The echo upstream as it comes, [`ECHO_ALIAS`] with no secret (set `secrets`), agent
    /// `mino`, nothing extra.
    fn default() -> Self {
        LabConfig {
            echo: EchoConfig::default(),
            aliases: ECHO_ALIAS,
            secrets: &[],
            agent: "mino",
            cap_args: &[],
            serve_args: &[],
        }
    }
}

/// A running broker in front of an echo upstream. Fields drop in order: the broker stops first,
/// then the upstream, then the home and the directory go.
#[derive(Debug)]
pub struct Lab {
    /// The running `mint serve`.
    pub broker: Broker,
    /// The echo upstream and its CA file.
    pub peer: EchoPeer,
    /// The broker's home.
    pub home: MintHome,
    /// The agent's capability token.
    pub cap: String,
    /// The alias secrets, for the canary checks.
    pub secrets: Vec<String>,
    /// A directory for the upstream's CA and any file a test writes ([`Lab::file`]).
    pub dir: tempfile::TempDir,
}

// === impl Lab ===

impl Lab {
    /// Starts the echo upstream, then a home whose policy is `version: 1`, `default: deny` and
    /// the rules `rules(port)` (see [`policy`]), the capability and the broker.
    #[track_caller]
    pub fn start(config: LabConfig<'_>, rules: impl FnOnce(u16) -> String) -> Lab {
        let dir = tempfile::tempdir().unwrap();
        let peer = echo_peer(dir.path(), config.echo);
        let home = MintHome::new(
            &policy(&rules(peer.server.port())),
            config.aliases,
            config.secrets,
        );
        let cap = home.issue_capability(config.agent, config.cap_args);
        let broker = home.serve(&peer.ca_file, config.serve_args);
        Lab {
            broker,
            peer,
            home,
            cap,
            secrets: config
                .secrets
                .iter()
                .map(|(_, value)| (*value).to_owned())
                .collect(),
            dir,
        }
    }

    /// The echo upstream's port.
    pub fn port(&self) -> u16 {
        self.peer.server.port()
    }

    /// `BASE/v1/proxy/{scheme}/{authority}{path_and_query}`, written as given.
    pub fn proxy_url(&self, scheme: &str, authority: &str, path_and_query: &str) -> String {
        format!(
            "{}/v1/proxy/{scheme}/{authority}{path_and_query}",
            self.broker.base
        )
    }

    /// The proxy URL of `path_and_query` on the echo upstream (`https://127.0.0.1:PORT`).
    pub fn echo_url(&self, path_and_query: &str) -> String {
        self.proxy_url(
            "https",
            &format!("127.0.0.1:{}", self.port()),
            path_and_query,
        )
    }

    /// The `Mint-Capability` header line of the lab's capability.
    pub fn cap_header(&self) -> String {
        format!("Mint-Capability: {}", self.cap)
    }

    /// curl with the capability, no URL globbing and no client-side path normalization, plus
    /// `args` (the URL among them).
    #[track_caller]
    pub fn curl(&self, args: &[&str]) -> CurlResponse {
        let cap = self.cap_header();
        let mut all = vec!["-g", "--path-as-is", "-H", cap.as_str()];
        all.extend_from_slice(args);
        curl(&all)
    }

    /// How many requests reached the echo upstream.
    pub fn forwarded(&self) -> usize {
        self.peer.server.requests().len()
    }

    /// The paths of the requests that reached the echo upstream, in order.
    pub fn forwarded_paths(&self) -> Vec<String> {
        self.peer
            .server
            .requests()
            .snapshot()
            .iter()
            .map(|r| r.path.clone())
            .collect()
    }

    /// Writes `bytes` to a file in the lab's directory (for `--data-binary @FILE`).
    #[track_caller]
    pub fn file(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        path
    }

    /// No alias secret and no capability token in `seen` (what the agent received), in the
    /// audit log or in Mint's stderr.
    #[track_caller]
    pub fn assert_clean(&self, seen: impl AsRef<[u8]>) {
        let secrets: Vec<&str> = self
            .secrets
            .iter()
            .map(String::as_str)
            .chain([self.cap.as_str()])
            .collect();
        self.broker.assert_clean(seen, &secrets);
    }
}

/// A policy file: `version: 1`, `default: deny`, and `rules` (YAML list items, indented by two
/// spaces), or no rule at all when `rules` is empty.
pub fn policy(rules: &str) -> String {
    if rules.is_empty() {
        "version: 1\ndefault: deny\nrules: []\n".to_owned()
    } else {
        format!("version: 1\ndefault: deny\nrules:\n{rules}")
    }
}

/// An allow rule `id` for alias `alias` toward the echo upstream on `port`, for `methods`
/// (`GET, POST`), with `more` (lines indented by four or six spaces) appended.
pub fn allow(id: &str, alias: &str, port: u16, methods: &str, more: &str) -> String {
    format!(
        "  - id: {id}\n    effect: allow\n    match:\n      alias: [{alias}]\n      host: [127.0.0.1]\n      port: [{port}]\n      method: [{methods}]\n{more}"
    )
}
