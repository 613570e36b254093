//! A real `mint serve` for one test: its own MINT_HOME in a temporary directory, files written
//! 0600, alias secrets from `file:` sources, a capability issued by the real `mint cap issue`, and
//! the broker process started on `127.0.0.1:0` with the upstream's CA. Dropping it sends SIGTERM
//! and waits for the process (SIGKILL after a bound), so no test leaves a broker behind.

use std::io::{BufRead, BufReader, Read};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The `mint` binary built by `cargo test --workspace` (mint-broker's own integration tests make
/// cargo build it next to this test binary).
#[track_caller]
pub fn mint_bin() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    // target/debug/deps/it-<hash> → target/debug/mint
    let dir = exe.parent().and_then(Path::parent).unwrap();
    let bin = dir.join("mint");
    assert!(
        bin.is_file(),
        "{} is missing: run `cargo test --workspace` (or `cargo build --bin mint`) first",
        bin.display()
    );
    bin
}

/// A Mint home for one test.
#[derive(Debug)]
pub struct MintHome {
    /// The temporary directory holding everything (removed on drop).
    pub dir: tempfile::TempDir,
}

/// A running broker.
#[derive(Debug)]
pub struct Broker {
    child: Option<Child>,
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    /// The broker's stderr, captured to a file.
    pub stderr_path: PathBuf,
    /// The audit log.
    pub audit_log: PathBuf,
}

// === impl MintHome ===

impl MintHome {
    /// A home with `policy` and `aliases` written (0600) and secrets written to
    /// `<home>/secrets/<name>` (0600) for each `(name, value)`; refer to them in the alias file
    /// as `source: file:<home>/secrets/<name>` through [`MintHome::secret_source`].
    #[track_caller]
    pub fn new(policy: &str, aliases: &str, secrets: &[(&str, &str)]) -> MintHome {
        let dir = tempfile::tempdir().unwrap();
        let home = MintHome { dir };
        std::fs::set_permissions(home.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        let secret_dir = home.path().join("secrets");
        std::fs::create_dir(&secret_dir).unwrap();
        std::fs::set_permissions(&secret_dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        for (name, value) in secrets {
            home.write_private(&format!("secrets/{name}"), value);
        }
        home.write_private("policy.yaml", policy);
        home.write_private(
            "aliases.yaml",
            &aliases.replace("$SECRETS", &secret_dir.display().to_string()),
        );
        home.write_private("capabilities.yaml", "version: 1\ncapabilities: []\n");
        home
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Writes `rel` under the home, mode 0600.
    #[track_caller]
    pub fn write_private(&self, rel: &str, text: &str) {
        let path = self.path().join(rel);
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    }

    /// A `mint` command with MINT_HOME set to this home and nothing else of Mint's inherited.
    pub fn mint(&self) -> Command {
        let mut command = Command::new(mint_bin());
        for (key, _) in std::env::vars() {
            if key.starts_with("MINT_") {
                command.env_remove(key);
            }
        }
        command.env("MINT_HOME", self.path());
        command.env("MINT_KEYRING_BACKEND", "keyutils");
        command
    }

    /// Runs `mint cap issue --agent AGENT [ARGS...]` and returns the token.
    #[track_caller]
    pub fn issue_capability(&self, agent: &str, args: &[&str]) -> String {
        let output = self
            .mint()
            .args(["cap", "issue", "--agent", agent])
            .args(args)
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "cap issue failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let stdout = String::from_utf8(output.stdout).unwrap();
        stdout
            .split_whitespace()
            .find(|word| word.starts_with("mint_cap_"))
            .unwrap_or_else(|| panic!("no token in `mint cap issue` output"))
            .to_owned()
    }

    /// Starts `mint serve --listen 127.0.0.1:0 --upstream-ca CA [EXTRA...]` and waits until it
    /// listens.
    #[track_caller]
    pub fn serve(&self, upstream_ca: &Path, extra: &[&str]) -> Broker {
        let stderr_path = self.path().join("mint-serve.stderr");
        let stderr = std::fs::File::create(&stderr_path).unwrap();
        let mut child = self
            .mint()
            .args(["serve", "--listen", "127.0.0.1:0", "--upstream-ca"])
            .arg(upstream_ca)
            .args(extra)
            .env("RUST_LOG", "mint_broker=debug")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut line = String::new();
        let read = BufReader::new(stdout).read_line(&mut line).unwrap();
        if read == 0 {
            let _ = child.wait();
            panic!(
                "mint serve exited before listening: {}",
                std::fs::read_to_string(&stderr_path).unwrap_or_default()
            );
        }
        let base = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("unexpected first line from mint serve: {line:?}"))
            .to_owned();
        Broker {
            child: Some(child),
            base,
            stderr_path,
            audit_log: self.path().join("audit.log"),
        }
    }

    /// Runs `mint serve` expecting it to fail at start, and returns its output.
    #[track_caller]
    pub fn serve_fails(&self, upstream_ca: &Path) -> Output {
        self.mint()
            .args(["serve", "--listen", "127.0.0.1:0", "--upstream-ca"])
            .arg(upstream_ca)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }
}

// === impl Broker ===

impl Broker {
    /// `BASE/v1/proxy/https/127.0.0.1:PORT/PATH` for an upstream on `port`.
    pub fn proxy_url(&self, port: u16, path_and_query: &str) -> String {
        format!(
            "{}/v1/proxy/https/127.0.0.1:{port}{path_and_query}",
            self.base
        )
    }

    /// What the broker wrote on stderr so far.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }

    /// The audit log's text.
    pub fn audit_text(&self) -> String {
        std::fs::read_to_string(&self.audit_log).unwrap_or_default()
    }

    /// The audit log's records, parsed as JSON.
    pub fn audit_records(&self) -> Vec<serde_json::Value> {
        self.audit_text()
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect()
    }

    /// Waits (bounded) until the audit log holds an `outcome` record for `request_id`, and
    /// returns it. The outcome is written as the answer ends, which may be just after the client
    /// has read it.
    #[track_caller]
    pub fn outcome_of(&self, request_id: &str) -> serde_json::Value {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(record) = self
                .audit_records()
                .into_iter()
                .find(|r| r["id"] == request_id && r["phase"] == "outcome")
            {
                return record;
            }
            assert!(
                Instant::now() < deadline,
                "no outcome record for {request_id}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Sends SIGTERM and waits for the exit status.
    #[track_caller]
    pub fn stop(&mut self) -> std::process::ExitStatus {
        let mut child = self.child.take().unwrap();
        terminate(&mut child)
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = terminate(&mut child);
        }
    }
}

fn terminate(child: &mut Child) -> std::process::ExitStatus {
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            return child.wait().unwrap();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// What curl got.
#[derive(Debug)]
pub struct CurlResponse {
    /// The status code.
    pub status: u16,
    /// The response headers as received (lowercase names).
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: String,
    /// curl's exit code (0 unless the transfer failed).
    pub exit: i32,
}

// === impl CurlResponse ===

impl CurlResponse {
    /// The first value of header `name`.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The body as JSON.
    #[track_caller]
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("body is not JSON ({e}): {}", self.body))
    }

    /// Everything the client received, for canary checks.
    pub fn everything(&self) -> String {
        let mut all = String::new();
        for (name, value) in &self.headers {
            all.push_str(name);
            all.push_str(": ");
            all.push_str(value);
            all.push('\n');
        }
        all.push_str(&self.body);
        all
    }
}

/// Runs curl with `args` (add the URL and any `-H`, `-X`, `--data` yourself) and parses the
/// answer. `--http1.1`, no proxy from the environment, 30 s bound.
#[track_caller]
pub fn curl(args: &[&str]) -> CurlResponse {
    let output = Command::new("curl")
        .args([
            "-sS",
            "--http1.1",
            "--noproxy",
            "*",
            "--max-time",
            "30",
            "-D",
            "-",
            "-o",
            "-",
        ])
        .args(args)
        .env_remove("http_proxy")
        .env_remove("HTTP_PROXY")
        .env_remove("https_proxy")
        .env_remove("HTTPS_PROXY")
        .env_remove("all_proxy")
        .env_remove("ALL_PROXY")
        .output()
        .unwrap();
    parse_curl(&output)
}

fn parse_curl(output: &Output) -> CurlResponse {
    let mut text = Vec::new();
    let _ = (&output.stdout[..]).read_to_end(&mut text);
    let text = String::from_utf8_lossy(&text).into_owned();
    // Skip `100 Continue` heads.
    let mut rest = text.as_str();
    let mut status = 0;
    let mut headers = Vec::new();
    while let Some((head, body)) = rest.split_once("\r\n\r\n") {
        let mut lines = head.lines();
        let status_line = lines.next().unwrap_or_default();
        status = status_line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        headers = lines
            .filter_map(|line| line.split_once(':'))
            .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
            .collect();
        rest = body;
        if status != 100 {
            break;
        }
    }
    CurlResponse {
        status,
        headers,
        body: rest.to_owned(),
        exit: output.status.code().unwrap_or(-1),
    }
}
