//! Harness for Mint's end-to-end tests (`tests/it/`): where the repository and its example files
//! are, and how to read them.
//!
//! Tests start the real binaries and real peers on loopback only; helpers here never touch the
//! network and never read anything outside the repository or a test's own temporary directory.

#![expect(clippy::unwrap_used, clippy::panic, reason = "test harness")]

use std::path::{Path, PathBuf};

pub mod approvals;
pub mod broker;
pub mod hostile;
pub mod interception;
pub mod lab;
pub mod openbao;
pub mod redis;

/// The root of the workspace.
pub fn repo_root() -> PathBuf {
    // INVARIANT: this crate lives one level below the workspace root.
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The `examples/` directory.
pub fn examples_dir() -> PathBuf {
    repo_root().join("examples")
}

/// Every regular file in `examples/`, sorted by name, so a new example is covered without
/// editing a list.
#[track_caller]
pub fn example_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(examples_dir())
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.is_file())
        .collect();
    files.sort();
    files
}

/// The contents of `path` as text.
#[track_caller]
pub fn read_text(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// Whether the YAML text has `key:` as a top-level key (a line starting with it, unindented).
pub fn has_top_level_key(text: &str, key: &str) -> bool {
    text.lines().any(|line| {
        line.strip_prefix(key)
            .is_some_and(|rest| rest.starts_with(':'))
    })
}

/// The local HTTPS echo upstream that the proxy's end-to-end tests forward to (see
/// `mint_broker::demo::echo_upstream` for its routes).
pub use mint_broker::demo::echo_upstream;

/// An echo upstream for one test, with its CA certificate written to a file.
#[derive(Debug)]
pub struct EchoPeer {
    /// The running server (its own thread and runtime); dropping the peer stops it.
    pub server: echo_upstream::BlockingEchoUpstream,
    /// The CA certificate as PEM: the proxy's `--upstream-ca`, and `curl --cacert`.
    pub ca_file: PathBuf,
}

/// Starts an echo upstream on loopback and writes its CA certificate to `dir/upstream-ca.pem`.
#[track_caller]
pub fn echo_peer(dir: &Path, config: echo_upstream::EchoConfig) -> EchoPeer {
    let server = echo_upstream::BlockingEchoUpstream::start(config).unwrap();
    let ca_file = dir.join("upstream-ca.pem");
    server.ca().write_pem(&ca_file).unwrap();
    EchoPeer { server, ca_file }
}
