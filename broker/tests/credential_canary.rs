//! The canary: plant a known secret everywhere a credential or capability token passes, then
//! prove it never shows up in `Debug` output, `Display` of errors and their source chains,
//! captured tracing logs (the `log` records of the keyring crates included), files Mint writes,
//! or the stdout and stderr of any `mint` command, failures included, at `RUST_LOG=trace`.

#![expect(clippy::unwrap_used, reason = "test code")]

#[path = "support/mint.rs"]
mod support;

use std::error::Error;
use std::fmt::Debug;
use std::io::{self, Write};
use std::os::unix::fs::PermissionsExt;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use mint_broker::capability::{CapabilityFile, CapabilityStore, IssueRequest};
use mint_broker::cli::alias::{AliasAddArgs, SecretInput};
use mint_broker::secrets::credential_store::{
    CredentialSources, CredentialStore, CredentialValue, EnvStore, FileStore, KeyringBackend,
    KeyringConfig, MemoryStore,
};
use mint_policy::aliases::load_aliases;
use mint_policy::audit::AgentName;
use secrecy::ExposeSecret;
use support::{mint, run};

const CANARY: &str = "mintcanary4b9d2e7f";

/// Everything the test looked at, to be searched for the canary at the end.
#[derive(Default)]
struct Seen {
    texts: Vec<(String, String)>,
}

impl Seen {
    fn debug(&mut self, what: &str, value: &dyn Debug) {
        self.texts
            .push((format!("Debug of {what}"), format!("{value:?} {value:#?}")));
    }

    fn error(&mut self, what: &str, error: &(dyn Error + 'static)) {
        let mut text = format!("{error} | {error:?}");
        let mut source = error.source();
        while let Some(inner) = source {
            text.push_str(&format!(" | {inner} | {inner:?}"));
            source = inner.source();
        }
        self.texts.push((format!("error chain of {what}"), text));
    }

    fn text(&mut self, what: &str, text: impl Into<String>) {
        self.texts.push((what.to_owned(), text.into()));
    }

    #[track_caller]
    fn assert_clean(&self, secrets: &[&str]) {
        for (what, text) in &self.texts {
            for secret in secrets {
                assert!(!text.contains(secret), "{what} shows a secret: {text}");
            }
        }
    }
}

#[derive(Clone)]
struct Buffer(Arc<Mutex<Vec<u8>>>);

impl Write for Buffer {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// A process-wide subscriber at TRACE writing to a buffer; `log` records are bridged into it.
fn logs() -> Arc<Mutex<Vec<u8>>> {
    static LOGS: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    LOGS.get_or_init(|| {
        let buffer = Arc::new(Mutex::new(Vec::new()));
        let writer = Buffer(buffer.clone());
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .try_init()
            .unwrap();
        buffer
    })
    .clone()
}

fn aliases(text: &str) -> mint_policy::aliases::AliasFile {
    load_aliases(text.as_bytes(), "aliases.yaml")
        .aliases
        .unwrap()
}

#[test]
fn canary_never_leaves_the_library() {
    let logs = logs();
    let mut seen = Seen::default();
    let dir = tempfile::tempdir().unwrap();

    // Values and the memory store.
    let value = CredentialValue::new(CANARY).unwrap();
    seen.debug("a value", &value);
    let memory = Arc::new(MemoryStore::new());
    memory.write("github", &value).unwrap();
    seen.debug("a memory store", &memory);

    // The environment and files, good and bad.
    let env = Arc::new(EnvStore::from_vars([
        ("GOOD", CANARY.to_owned()),
        ("BAD", format!("{CANARY}\r\nX-Evil: 1")),
        ("BINARY", format!("{CANARY}\u{0}")),
    ]));
    seen.debug("an env store", &env);
    let open_file = dir.path().join("open");
    std::fs::write(&open_file, CANARY).unwrap();
    std::fs::set_permissions(&open_file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let bad_file = dir.path().join("bad");
    std::fs::write(&bad_file, format!("{CANARY}\nsecond line\n")).unwrap();
    std::fs::set_permissions(&bad_file, std::fs::Permissions::from_mode(0o600)).unwrap();

    let sources = CredentialSources::new(memory.clone(), env, Arc::new(FileStore::new()));
    seen.debug("sources", &sources);
    let good = aliases(
        "aliases:\n  - name: github\n    hosts: [api.github.com]\n  - name: envy\n    hosts: \
         [a.example.com]\n    source: env:GOOD\n",
    );
    let set = sources.load_all(&good).unwrap();
    seen.debug("a loaded credential set", &set);
    assert_eq!(set.get("envy").unwrap().as_secret().expose_secret(), CANARY);

    let bad = aliases(&format!(
        "aliases:\n  - name: crlf\n    hosts: [a.example.com]\n    source: env:BAD\n  - name: \
         nul\n    hosts: [a.example.com]\n    source: env:BINARY\n  - name: open\n    hosts: \
         [a.example.com]\n    source: \"file:{}\"\n  - name: lines\n    hosts: \
         [a.example.com]\n    source: \"file:{}\"\n  - name: gone\n    hosts: [a.example.com]\n",
        open_file.display(),
        bad_file.display()
    ));
    let err = sources.load_all(&bad).unwrap_err();
    assert_eq!(err.failures.len(), 5, "{err}");
    seen.error("a failed load", &err);
    for failure in &err.failures {
        seen.error("one alias's failure", failure);
    }

    // The keyring, on every reachable backend.
    for backend in [KeyringBackend::SecretService, KeyringBackend::Keyutils] {
        let Some(store) = support::reachable_keyring(backend) else {
            continue;
        };
        store.write("github", &value).unwrap();
        seen.debug("a keyring store", &store);
        let read = store.read("github").unwrap();
        seen.debug("a value read from the keyring", &read);
        store.delete("github").unwrap();
        seen.error("a missing keyring item", &store.read("github").unwrap_err());
        let sources = CredentialSources::new(
            Arc::new(store.clone()),
            Arc::new(EnvStore::from_vars([("X", "y")])),
            Arc::new(FileStore::new()),
        );
        store
            .write(
                "crlf",
                &CredentialValue::new(&format!("{CANARY}\nX: 1")).unwrap(),
            )
            .unwrap();
        let crlf = aliases("aliases:\n  - name: crlf\n    hosts: [a.example.com]\n");
        seen.error(
            "a keyring value refused for headers",
            &sources.load_all(&crlf).unwrap_err(),
        );
        store.delete("crlf").unwrap();
    }

    // `mint alias add` as a library call, refusing the value.
    let file = dir.path().join("aliases.yaml");
    mint_broker::config::secure_file::write_atomic(&file, b"aliases: []\n").unwrap();
    let mut stdin = format!("{CANARY}\nmore").into_bytes();
    let mut reader: &[u8] = &stdin;
    let mut out = Vec::new();
    let err = mint_broker::cli::alias::add(
        &file,
        &dir.path().join("placeholder.key"),
        &sources,
        &KeyringConfig::default(),
        AliasAddArgs {
            name: "newline".to_owned(),
            hosts: vec!["api.example.com".to_owned()],
            sites: Vec::new(),
            body: Vec::new(),
            form: Vec::new(),
            source: None,
            command: Vec::new(),
            description: None,
            env: Vec::new(),
            placeholder: None,
            secret_stdin: true,
        },
        SecretInput::Stream(&mut reader),
        &mut out,
    )
    .unwrap_err();
    seen.error("a refused alias add", &err);
    seen.text("alias add output", String::from_utf8(out).unwrap());
    stdin.fill(0);

    // Capabilities: the token is a secret too.
    let mut capabilities = CapabilityFile::default();
    let (token, stored) = capabilities
        .issue(
            IssueRequest {
                agent: AgentName::new("mino").unwrap(),
                ttl: Duration::from_secs(60),
                aliases: Vec::new(),
            },
            SystemTime::now(),
        )
        .unwrap();
    seen.debug("an issued token", &token);
    seen.debug("a stored capability", stored);
    let token = token.as_secret().expose_secret().to_owned();
    let secret_part = token.rsplit('_').next().unwrap().to_owned();
    let caps_path = dir.path().join("capabilities.yaml");
    capabilities.save(&caps_path).unwrap();
    seen.text(
        "the capabilities file",
        std::fs::read_to_string(&caps_path).unwrap(),
    );
    seen.debug("a capability file", &capabilities);
    let store = CapabilityStore::open(&caps_path).unwrap();
    seen.debug("a capability store", &store);
    assert!(store.verify(&token, SystemTime::now()).is_ok());
    let tampered = format!("{token}x");
    let rejected = store.verify(&tampered, UNIX_EPOCH).unwrap_err();
    seen.error("a rejected token", &rejected);
    std::fs::write(&caps_path, format!("version: 1\ncapabilities: [{token}]\n")).unwrap();
    seen.error("a broken capabilities file", &store.refresh().unwrap_err());

    // The logs did capture events (so their silence means something), and hold no secret.
    let captured = String::from_utf8(logs.lock().unwrap().clone()).unwrap();
    assert!(
        captured.contains("Credentials loaded"),
        "capture works: {captured}"
    );
    seen.text("the captured logs", captured);
    seen.assert_clean(&[CANARY, &token, &secret_part]);
}

/// Runs `cmd` at `RUST_LOG=trace` and keeps its output for the final search.
fn mint_run(seen: &mut Seen, what: &str, cmd: &mut assert_cmd::Command) -> support::Run {
    let out = run(cmd.env("RUST_LOG", "trace"));
    seen.text(&format!("stdout of {what}"), out.stdout.clone());
    seen.text(&format!("stderr of {what}"), out.stderr.clone());
    out
}

#[test]
fn canary_never_reaches_cli_output() {
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path();
    let mut seen = Seen::default();
    mint_run(&mut seen, "init", mint(cwd).arg("init"));

    // env: the broker's environment holds the canary.
    mint_run(
        &mut seen,
        "alias add env",
        mint(cwd).args([
            "alias",
            "add",
            "envy",
            "--host",
            "a.example.com",
            "--source",
            "env:TOKEN",
        ]),
    );
    mint_run(
        &mut seen,
        "alias list",
        mint(cwd).args(["alias", "list"]).env("TOKEN", CANARY),
    );
    mint_run(
        &mut seen,
        "alias list --json",
        mint(cwd)
            .args(["alias", "list", "--json"])
            .env("TOKEN", CANARY),
    );
    mint_run(
        &mut seen,
        "alias list, bad env value",
        mint(cwd)
            .args(["alias", "list", "--json"])
            .env("TOKEN", format!("{CANARY}\nX: 1")),
    );

    // file: open to others, and a good one.
    let open = cwd.join("open-secret");
    std::fs::write(&open, CANARY).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = mint_run(
        &mut seen,
        "alias add file (open)",
        mint(cwd)
            .args(["alias", "add", "filey", "--host", "a.example.com"])
            .arg(format!("--source=file:{}", open.display())),
    );
    assert_eq!(out.code, Some(2));

    // Arguments that are not what they should be are never echoed.
    for args in [
        vec![
            "alias",
            "add",
            "x",
            "--host",
            "a.example.com",
            "--source",
            CANARY,
        ],
        vec!["alias", "add", "x", "--host", "mintcanary4b9d2e7f:443"],
        vec![
            "alias",
            "add",
            "MINTCANARY4b9d2e7f",
            "--host",
            "a.example.com",
        ],
        vec!["cap", "issue", "--agent", "mintcanary4b9d2e7f!"],
        vec!["cap", "revoke", "mintcanary4b9d2e7f!"],
    ] {
        let out = mint_run(&mut seen, "a refused argument", mint(cwd).args(&args));
        assert_eq!(out.code, Some(2), "{args:?}");
    }

    // The keyring, on every reachable backend.
    for backend in [KeyringBackend::Keyutils, KeyringBackend::SecretService] {
        let Some(store) = support::reachable_keyring(backend) else {
            continue;
        };
        let with = |cmd: &mut assert_cmd::Command| {
            cmd.env("MINT_KEYRING_BACKEND", backend.as_str())
                .env("MINT_KEYRING_SERVICE", support::service_of(&store));
        };
        let mut cmd = mint(cwd);
        with(&mut cmd);
        let out = mint_run(
            &mut seen,
            "alias add --secret-stdin",
            cmd.args([
                "alias",
                "add",
                "github",
                "--host",
                "api.github.com",
                "--secret-stdin",
            ])
            .write_stdin(format!("{CANARY}\n")),
        );
        assert_eq!(out.code, Some(0), "{}", out.stderr);
        for args in [&["alias", "list"][..], &["alias", "list", "--json"][..]] {
            let mut cmd = mint(cwd);
            with(&mut cmd);
            mint_run(
                &mut seen,
                "alias list with a keyring secret",
                cmd.args(args),
            );
        }
        let mut cmd = mint(cwd);
        with(&mut cmd);
        let out = mint_run(
            &mut seen,
            "alias add with a refused secret",
            cmd.args([
                "alias",
                "add",
                "crlf",
                "--host",
                "api.github.com",
                "--secret-stdin",
            ])
            .write_stdin(format!("{CANARY}\r\nX-Evil: 1")),
        );
        assert_eq!(out.code, Some(2));
        let mut cmd = mint(cwd);
        with(&mut cmd);
        mint_run(&mut seen, "alias rm", cmd.args(["alias", "rm", "github"]));
    }

    // Capabilities: the token is printed once on stdout and nowhere else.
    let out = mint_run(
        &mut seen,
        "cap issue",
        mint(cwd).args(["cap", "issue", "--agent", "mino"]),
    );
    let token = out.stdout.trim_end().to_owned();
    assert!(token.starts_with("mint_cap_"));
    seen.texts.retain(|(what, _)| what != "stdout of cap issue");
    let id = token["mint_cap_".len()..]
        .split_once('_')
        .unwrap()
        .0
        .to_owned();
    mint_run(&mut seen, "cap list", mint(cwd).args(["cap", "list"]));
    mint_run(
        &mut seen,
        "cap list --json",
        mint(cwd).args(["cap", "list", "--json"]),
    );
    mint_run(
        &mut seen,
        "cap revoke",
        mint(cwd).args(["cap", "revoke", &id]),
    );
    mint_run(
        &mut seen,
        "cap revoke with the token",
        mint(cwd).args(["cap", "revoke", &token]),
    );
    for file in ["aliases.yaml", "capabilities.yaml", "policy.yaml"] {
        seen.text(
            file,
            std::fs::read_to_string(cwd.join(".mint").join(file)).unwrap(),
        );
    }
    let secret_part = token.rsplit('_').next().unwrap().to_owned();
    seen.assert_clean(&[CANARY, &secret_part]);
}
