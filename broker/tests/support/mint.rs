//! Helpers shared by the credential, keyring and CLI tests: the `mint` binary with a clean
//! environment, file modes, and reachable keyrings (skipped with a note when none is reachable,
//! unless `MINT_REQUIRE_KEYRING=1`, as `.ci/run` sets, turns the skip into a failure).

#![allow(dead_code, reason = "each test binary uses a part of these helpers")]
#![allow(clippy::print_stderr, reason = "skip notes for the test log")]

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use assert_cmd::Command;
use mint_broker::secrets::credential_store::{
    CredentialStore, KeyringBackend, KeyringConfig, KeyringStore,
};

/// Every variable Mint reads: removed from each child so the developer's own settings never leak
/// into a test.
pub(crate) const ENV_VARS: &[&str] = &[
    "MINT_HOME",
    "MINT_ALIASES_PATH",
    "MINT_POLICY_PATH",
    "MINT_AUDIT_LOG_PATH",
    "MINT_CAPABILITIES_PATH",
    "MINT_LISTEN",
    "MINT_KEYRING_BACKEND",
    "MINT_KEYRING_SERVICE",
    "MINT_CA_CERT",
    "MINT_CA_KEY",
    "MINT_UPSTREAM_CA",
];

/// The variable that turns a skipped keyring test into a failure.
pub(crate) const REQUIRE_KEYRING: &str = "MINT_REQUIRE_KEYRING";

/// The `mint` binary with a clean Mint environment, a timeout, `MINT_HOME=<cwd>/.mint`, and no
/// standard input.
pub(crate) fn mint(cwd: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_mint"));
    for var in ENV_VARS {
        cmd.env_remove(var);
    }
    cmd.env_remove("RUST_LOG")
        .current_dir(cwd)
        .env("MINT_HOME", cwd.join(".mint"))
        .write_stdin(Vec::new())
        .timeout(Duration::from_secs(60));
    cmd
}

/// The result of one run.
#[derive(Debug)]
pub(crate) struct Run {
    /// The exit code.
    pub(crate) code: Option<i32>,
    /// Standard output.
    pub(crate) stdout: String,
    /// Standard error.
    pub(crate) stderr: String,
}

/// Runs `cmd` to the end.
#[track_caller]
pub(crate) fn run(cmd: &mut Command) -> Run {
    let output = cmd.output().unwrap();
    Run {
        code: output.status.code(),
        stdout: String::from_utf8(output.stdout).unwrap(),
        stderr: String::from_utf8(output.stderr).unwrap(),
    }
}

/// Runs `mint alias list [--json]` and asserts its exit code: 0 when every secret was read, 1
/// when one was not (the table or JSON is printed either way; the table then ends with the count).
#[track_caller]
pub(crate) fn listed(cmd: &mut Command) -> Run {
    let out = run(cmd);
    let unread = ["\"missing\"", "\"unavailable\"", "\"refused\""]
        .iter()
        .any(|status| out.stdout.contains(status))
        || out.stdout.contains("cannot be read here");
    assert_eq!(
        out.code,
        Some(if unread { 1 } else { 0 }),
        "stdout: {}\nstderr: {}",
        out.stdout,
        out.stderr
    );
    out
}

/// Runs `cmd` and asserts exit code 0.
#[track_caller]
pub(crate) fn ok(cmd: &mut Command) -> Run {
    let out = run(cmd);
    assert_eq!(
        out.code,
        Some(0),
        "stdout: {}\nstderr: {}",
        out.stdout,
        out.stderr
    );
    out
}

/// Runs `cmd` and asserts exit code 2, nothing on stdout and a `mint: ` line on stderr.
#[track_caller]
pub(crate) fn fails(cmd: &mut Command) -> Run {
    let out = run(cmd);
    assert_eq!(
        out.code,
        Some(2),
        "stdout: {}\nstderr: {}",
        out.stdout,
        out.stderr
    );
    assert!(out.stdout.is_empty(), "nothing on stdout: {}", out.stdout);
    assert!(out.stderr.starts_with("mint: "), "{}", out.stderr);
    assert_eq!(out.stderr.lines().count(), 1, "one line: {}", out.stderr);
    out
}

/// A file's permission bits.
#[track_caller]
pub(crate) fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o7777
}

/// Runs `mint init` in `cwd`.
#[track_caller]
pub(crate) fn init(cwd: &Path) {
    ok(mint(cwd).arg("init"));
}

/// A keyring service name no other test (or person) uses.
pub(crate) fn unique_service() -> String {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    format!(
        "mint-test-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// Whether a missing keyring must fail the test.
pub(crate) fn keyring_required() -> bool {
    std::env::var(REQUIRE_KEYRING).is_ok_and(|v| v == "1")
}

/// The name of a backend as `MINT_KEYRING_BACKEND` spells it.
pub(crate) fn backend_name(backend: KeyringBackend) -> &'static str {
    backend.as_str()
}

/// A keyring store on `backend` under a fresh service name, after a write-read-delete probe; or
/// `None` with a note when the backend cannot be reached (a panic when it is required).
pub(crate) fn reachable_keyring(backend: KeyringBackend) -> Option<KeyringStore> {
    let config = KeyringConfig {
        backend,
        service: unique_service(),
    };
    let store = KeyringStore::new(&config);
    // Probe under one fixed service name: where keys cannot be read back (a kernel session keyring
    // the process does not possess), the probe key cannot be removed either, and a fixed name
    // leaves at most one behind instead of one per test.
    let prober = KeyringStore::new(&KeyringConfig {
        backend,
        service: "mint-test-probe".to_owned(),
    });
    match prober.probe() {
        Ok(()) => Some(store),
        Err(problem) => {
            let note = format!(
                "keyring backend `{}` is not reachable here ({problem})",
                backend.as_str()
            );
            assert!(
                !keyring_required(),
                "{note}, and {REQUIRE_KEYRING}=1 requires it: run the tests inside \
                 `dbus-run-session` with an unlocked gnome-keyring (see .ci/run)"
            );
            eprintln!("note: skipping: {note}; set {REQUIRE_KEYRING}=1 to make this a failure");
            None
        }
    }
}

/// The service name a reachable store uses (for the CLI's `MINT_KEYRING_SERVICE`).
pub(crate) fn service_of(store: &KeyringStore) -> String {
    store.config().service.clone()
}
