//! A real `mint serve` for one test: its own MINT_HOME in a temporary directory, files written
//! 0600, alias secrets from `file:` sources, a capability issued by the real `mint cap issue`, and
//! the broker process started on `127.0.0.1:0` with the upstream's CA. Dropping it sends SIGTERM
//! and waits for the process (SIGKILL after a bound), so no test leaves a broker behind.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
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
    /// With `--audit-stdout`: the file the broker's stdout (its audit lines) is copied to.
    pub stdout_path: Option<PathBuf>,
}

// === impl MintHome ===

impl MintHome {
    /// A home with `policy` and `aliases` written (0600) and secrets written to
    /// `<home>/secrets/<name>` (0600) for each `(name, value)`; the alias file refers to them as
    /// `source: file:$SECRETS/<name>` (`$SECRETS` is replaced by that directory).
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

    /// An empty home (the directory only, 0700) for a test that runs `mint init` itself, as an
    /// operator following the README does.
    #[track_caller]
    pub fn bare() -> MintHome {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        MintHome { dir }
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
        self.mint_env(&mut command);
        command
    }

    /// Gives `command` the environment of [`MintHome::mint`]: MINT_HOME set to this home, the
    /// keyutils keyring backend, and no other MINT_* variable inherited.
    pub fn mint_env(&self, command: &mut Command) {
        for (key, _) in std::env::vars() {
            if key.starts_with("MINT_") {
                command.env_remove(key);
            }
        }
        command.env("MINT_HOME", self.path());
        command.env("MINT_KEYRING_BACKEND", "keyutils");
    }

    /// Runs `mint cap revoke ID` for the capability `token` (its id is the part after
    /// `mint_cap_`, up to the next `_`).
    #[track_caller]
    pub fn revoke_capability(&self, token: &str) {
        let id = capability_id(token);
        let output = self.mint().args(["cap", "revoke", id]).output().unwrap();
        assert!(
            output.status.success(),
            "cap revoke failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
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
        let mut command = self.mint();
        command
            .args(["serve", "--listen", "127.0.0.1:0", "--upstream-ca"])
            .arg(upstream_ca)
            .args(extra)
            .stderr(stderr);
        self.start_broker(command, stderr_path)
    }

    /// Like [`MintHome::serve`], with `env` (name, value) added to the broker's environment
    /// (`RUST_LOG` among them replaces the harness's `mint_broker=debug`).
    #[track_caller]
    pub fn serve_with_env(
        &self,
        upstream_ca: &Path,
        extra: &[&str],
        env: &[(&str, &std::ffi::OsStr)],
    ) -> Broker {
        let stderr_path = self.path().join("mint-serve.stderr");
        let stderr = std::fs::File::create(&stderr_path).unwrap();
        let mut command = self.mint();
        command
            .args(["serve", "--listen", "127.0.0.1:0", "--upstream-ca"])
            .arg(upstream_ca)
            .args(extra)
            .envs(env.iter().copied())
            .stderr(stderr);
        self.start_broker(command, stderr_path)
    }

    /// Like [`MintHome::serve`], but runs `mint serve` through `wrapper` (a program and its
    /// arguments, which must end by running the command line it is given after them, such as
    /// `prlimit --fsize=N --`), with the MINT_* environment of [`MintHome::mint`]. Mint's stderr
    /// goes through a pipe that a thread copies to the file of [`Broker::stderr`], so a limit
    /// the wrapper sets on the broker's own files does not apply to its log.
    #[track_caller]
    pub fn serve_wrapped(&self, wrapper: &[&str], upstream_ca: &Path, extra: &[&str]) -> Broker {
        let stderr_path = self.path().join("mint-serve.stderr");
        let (program, wrapper_args) = wrapper.split_first().unwrap();
        let mut command = Command::new(program);
        self.mint_env(&mut command);
        command
            .args(wrapper_args)
            .arg(mint_bin())
            .args(["serve", "--listen", "127.0.0.1:0", "--upstream-ca"])
            .arg(upstream_ca)
            .args(extra)
            .stderr(Stdio::piped());
        self.start_broker(command, stderr_path)
    }

    /// Spawns `command` (a `mint serve`, possibly behind a wrapper, with its stderr going to
    /// `stderr_path` or piped) and waits until it listens.
    /// With `--audit-stdout` among its arguments, stdout carries audit lines: they are copied to
    /// `mint-serve.stdout` in the home ([`Broker::stdout_text`]), and the `listening on` line is
    /// read from stderr.
    #[track_caller]
    pub fn start_broker(&self, command: Command, stderr_path: PathBuf) -> Broker {
        let audit_stdout = command.get_args().any(|arg| arg == "--audit-stdout");
        self.start_broker_with(command, stderr_path, audit_stdout, false)
    }

    /// Starts `mint serve ... --audit-stdout [EXTRA...]` with a stdout nobody reads: the read end
    /// of its pipe is closed before the broker starts, so its first write fails (`EPIPE`).
    #[track_caller]
    pub fn serve_with_closed_stdout(&self, upstream_ca: &Path, extra: &[&str]) -> Broker {
        let stderr_path = self.path().join("mint-serve.stderr");
        let stderr = std::fs::File::create(&stderr_path).unwrap();
        let mut command = self.mint();
        command
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--audit-stdout",
                "--upstream-ca",
            ])
            .arg(upstream_ca)
            .args(extra)
            .stderr(stderr);
        self.start_broker_with(command, stderr_path, true, true)
    }

    #[track_caller]
    fn start_broker_with(
        &self,
        mut command: Command,
        stderr_path: PathBuf,
        audit_stdout: bool,
        closed_stdout: bool,
    ) -> Broker {
        let stdout = if closed_stdout {
            let (reader, writer) = std::io::pipe().unwrap();
            drop(reader);
            Stdio::from(writer)
        } else {
            Stdio::piped()
        };
        // Mint's own debug lines, unless the test chose a filter (`serve_with_env`).
        if !command.get_envs().any(|(name, _)| name == "RUST_LOG") {
            command.env("RUST_LOG", "mint_broker=debug");
        }
        let mut child = command.stdin(Stdio::null()).stdout(stdout).spawn().unwrap();
        if let Some(mut pipe) = child.stderr.take() {
            let mut file = std::fs::File::create(&stderr_path).unwrap();
            std::thread::spawn(move || {
                let mut buf = [0u8; 8192];
                while let Ok(n) = pipe.read(&mut buf) {
                    if n == 0 || file.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            });
        }
        if audit_stdout {
            let stdout_path = self.path().join("mint-serve.stdout");
            let mut file = std::fs::File::create(&stdout_path).unwrap();
            if let Some(mut pipe) = child.stdout.take() {
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut pipe, &mut file);
                });
            }
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
            let base = loop {
                let text = std::fs::read_to_string(&stderr_path).unwrap_or_default();
                if let Some(base) = text
                    .lines()
                    .find_map(|line| line.strip_prefix("listening on "))
                {
                    break base.to_owned();
                }
                if let Ok(Some(status)) = child.try_wait() {
                    panic!("mint serve exited ({status}) before listening: {text}");
                }
                assert!(
                    std::time::Instant::now() < deadline,
                    "mint serve did not listen: {text}"
                );
                std::thread::sleep(std::time::Duration::from_millis(20));
            };
            return Broker {
                child: Some(child),
                base,
                stderr_path,
                audit_log: self.path().join("audit.log"),
                stdout_path: Some(stdout_path),
            };
        }
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
            stdout_path: None,
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

    /// What the broker wrote on stdout so far (started with `--audit-stdout`).
    pub fn stdout_text(&self) -> String {
        self.stdout_path
            .as_ref()
            .map(|path| std::fs::read_to_string(path).unwrap_or_default())
            .unwrap_or_default()
    }

    /// The audit log's text.
    pub fn audit_text(&self) -> String {
        std::fs::read_to_string(&self.audit_log).unwrap_or_default()
    }

    /// The audit log's records, parsed as JSON: whole lines only, since the broker may be writing
    /// the last one as this reads.
    pub fn audit_records(&self) -> Vec<serde_json::Value> {
        let text = self.audit_text();
        let whole = text.rfind('\n').map_or("", |end| &text[..end]);
        whole
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect()
    }

    /// `127.0.0.1:PORT`: where to open a raw TCP connection to the broker.
    pub fn addr(&self) -> &str {
        self.base.strip_prefix("http://").unwrap_or(&self.base)
    }

    /// The broker's process id.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Sends the broker SIGHUP (a reload), without waiting for what it does.
    #[track_caller]
    pub fn hangup(&self) {
        let pid = self.pid().unwrap();
        let sent = Command::new("kill")
            .args(["-HUP", &pid.to_string()])
            .status()
            .unwrap();
        assert!(sent.success(), "kill -HUP {pid}");
    }

    /// Asserts that `secret` is in neither the audit log nor Mint's stderr.
    #[track_caller]
    pub fn assert_secret_absent(&self, secret: &str) {
        assert!(
            !self.audit_text().contains(secret),
            "the audit log holds the secret"
        );
        assert!(
            !self.stderr().contains(secret),
            "Mint's stderr holds the secret"
        );
    }

    /// No secret of `secrets` in `seen` (what the agent received, shown lossily as UTF-8), in
    /// the audit log or in Mint's stderr.
    #[track_caller]
    pub fn assert_clean(&self, seen: impl AsRef<[u8]>, secrets: &[&str]) {
        let seen = String::from_utf8_lossy(seen.as_ref());
        let audit = self.audit_text();
        let stderr = self.stderr();
        for secret in secrets {
            assert!(!seen.contains(secret), "the client saw a secret: {seen}");
            assert!(!audit.contains(secret), "the audit log holds a secret");
            assert!(!stderr.contains(secret), "Mint's stderr holds a secret");
        }
    }

    /// The audit records of `request_id`, in the log's order.
    pub fn records_of(&self, request_id: &str) -> Vec<serde_json::Value> {
        self.audit_records()
            .into_iter()
            .filter(|r| r["id"] == request_id)
            .collect()
    }

    /// The `decision` record of `request_id` (written before the answer, so no wait is needed).
    #[track_caller]
    pub fn decision_of(&self, request_id: &str) -> serde_json::Value {
        self.records_of(request_id)
            .into_iter()
            .find(|r| r["phase"] == "decision")
            .unwrap_or_else(|| panic!("no decision record for {request_id}"))
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

    /// Sends SIGKILL (no destructor, flush or fsync runs) and waits for the process to end.
    #[track_caller]
    pub fn kill(&mut self) {
        let mut child = self.child.take().unwrap();
        child.kill().unwrap();
        let status = child.wait().unwrap();
        assert!(!status.success(), "the broker exited before it was killed");
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
    let output = curl_command()
        .args(["-D", "-", "-o", "-"])
        .args(args)
        .output()
        .unwrap();
    parse_curl(&output)
}

/// A curl command with the options of [`curl`] except the output ones (`-sS`, `--http1.1`, no
/// proxy from the environment, 30 s bound): for a client the test spawns and reads as it goes.
pub fn curl_command() -> Command {
    let mut command = Command::new("curl");
    command
        .args(["-sS", "--http1.1", "--noproxy", "*", "--max-time", "30"])
        .env_remove("http_proxy")
        .env_remove("HTTP_PROXY")
        .env_remove("https_proxy")
        .env_remove("HTTPS_PROXY")
        .env_remove("all_proxy")
        .env_remove("ALL_PROXY");
    // The machine exports CA variables of its own: none of them may decide what curl trusts.
    for variable in CA_VARIABLES {
        command.env_remove(variable);
    }
    command
}

/// The environment variables through which clients pick up a CA bundle; every client a test
/// starts runs without them.
pub const CA_VARIABLES: [&str; 6] = [
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "CURL_CA_BUNDLE",
    "REQUESTS_CA_BUNDLE",
    "NODE_EXTRA_CA_CERTS",
    "GIT_SSL_CAINFO",
];

/// Parses a whole HTTP/1.1 answer as read from a raw socket (head and body as received; a
/// chunked body is left as it is).
pub fn parse_raw_answer(raw: &[u8]) -> CurlResponse {
    parse_curl(&Output {
        status: std::os::unix::process::ExitStatusExt::from_raw(0),
        stdout: raw.to_vec(),
        stderr: Vec::new(),
    })
}

/// Opens a raw TCP connection to `addr` (`127.0.0.1:PORT`), writes `request`, shuts the write
/// half when `close_write`, and reads until the peer closes (or 30 s pass, as a hang guard).
#[track_caller]
pub fn raw_exchange(addr: &str, request: &[u8], close_write: bool) -> Vec<u8> {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    stream.write_all(request).unwrap();
    if close_write {
        let _ = stream.shutdown(std::net::Shutdown::Write);
    }
    read_to_close(&mut stream)
}

/// Reads from `stream` until the peer closes it, a read fails or its read timeout passes.
pub fn read_to_close(stream: &mut TcpStream) -> Vec<u8> {
    let mut answer = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => return answer,
            Ok(n) => answer.extend_from_slice(&buf[..n]),
        }
    }
}

/// The capability id inside a `mint_cap_<id>_<secret>` token.
#[track_caller]
pub fn capability_id(token: &str) -> &str {
    token
        .strip_prefix("mint_cap_")
        .and_then(|rest| rest.split('_').next())
        .unwrap_or_else(|| panic!("not a capability token"))
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

/// What a raw HTTP/1.1 exchange returned (see [`raw_http`]).
#[derive(Debug)]
pub struct RawResponse {
    /// The status line as received, such as `HTTP/1.1 400 Bad Request` (empty when none came).
    pub status_line: String,
    /// The status code (0 when no status line came).
    pub status: u16,
    /// The headers as received (lowercase names).
    pub headers: Vec<(String, String)>,
    /// The body, with chunked framing removed.
    pub body: String,
}

// === impl RawResponse ===

impl RawResponse {
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

    /// Everything the client received, status line included, for canary checks.
    pub fn everything(&self) -> String {
        let mut all = self.status_line.clone();
        all.push('\n');
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

/// Sends `request` byte for byte over a new TCP connection to `base` (`http://HOST:PORT`) and
/// reads one answer: for what curl will not send (ambiguous framing, duplicate `Host`,
/// fragments, `CONNECT` by hand). Reading stops when the answer is complete by its
/// `Content-Length` or chunked framing, when the server closes the connection, or after 30 s.
#[track_caller]
pub fn raw_http(base: &str, request: &[u8]) -> RawResponse {
    use std::io::Write as _;

    let authority = base.strip_prefix("http://").unwrap_or(base);
    let mut stream = std::net::TcpStream::connect(authority).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    stream.write_all(request).unwrap();
    stream.flush().unwrap();
    let mut received = Vec::new();
    let mut buffer = [0u8; 16 * 1024];
    loop {
        match stream.read(&mut buffer) {
            Ok(0) | Err(_) => break,
            Ok(n) => received.extend_from_slice(&buffer[..n]),
        }
        if raw_answer_complete(&received) {
            break;
        }
    }
    parse_raw(&received)
}

/// Whether `received` holds a whole answer (interim `1xx` answers skipped).
fn raw_answer_complete(received: &[u8]) -> bool {
    let mut rest = received;
    loop {
        let Some(end) = find(rest, b"\r\n\r\n") else {
            return false;
        };
        let head = String::from_utf8_lossy(&rest[..end]).to_ascii_lowercase();
        let body = &rest[end + 4..];
        if head.starts_with("http/1.1 1") && !head.starts_with("http/1.1 101") {
            rest = body;
            continue;
        }
        let length = head
            .lines()
            .filter_map(|line| line.split_once(':'))
            .find(|(name, _)| name.trim() == "content-length")
            .and_then(|(_, value)| value.trim().parse::<usize>().ok());
        if let Some(length) = length {
            return body.len() >= length;
        }
        if head.contains("transfer-encoding: chunked") {
            return body.ends_with(b"0\r\n\r\n");
        }
        return false;
    }
}

fn parse_raw(received: &[u8]) -> RawResponse {
    let mut rest = received;
    loop {
        let Some(end) = find(rest, b"\r\n\r\n") else {
            return RawResponse {
                status_line: String::from_utf8_lossy(rest).into_owned(),
                status: 0,
                headers: Vec::new(),
                body: String::new(),
            };
        };
        let head = String::from_utf8_lossy(&rest[..end]).into_owned();
        let body = &rest[end + 4..];
        let mut lines = head.split("\r\n");
        let status_line = lines.next().unwrap_or_default().to_owned();
        let status: u16 = status_line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        if (100..200).contains(&status) && status != 101 {
            rest = body;
            continue;
        }
        let headers: Vec<(String, String)> = lines
            .filter_map(|line| line.split_once(':'))
            .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
            .collect();
        let chunked = headers
            .iter()
            .any(|(n, v)| n == "transfer-encoding" && v.eq_ignore_ascii_case("chunked"));
        let body = if chunked {
            dechunk(body)
        } else {
            body.to_vec()
        };
        return RawResponse {
            status_line,
            status,
            headers,
            body: String::from_utf8_lossy(&body).into_owned(),
        };
    }
}

/// Removes chunked framing; stops at the last chunk or at whatever is malformed.
fn dechunk(mut body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(line_end) = find(body, b"\r\n") {
        let size_text = String::from_utf8_lossy(&body[..line_end]);
        let size_text = size_text.split(';').next().unwrap_or_default().trim();
        let Ok(size) = usize::from_str_radix(size_text, 16) else {
            break;
        };
        let start = line_end + 2;
        if size == 0 || body.len() < start + size {
            break;
        }
        out.extend_from_slice(&body[start..start + size]);
        body = body.get(start + size + 2..).unwrap_or_default();
    }
    out
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}

/// `gzip` of `bytes` (one member, fast level), for answers a scripted upstream compresses.
#[track_caller]
pub fn gzip(bytes: &[u8]) -> Vec<u8> {
    use flate2::Compression;
    use flate2::write::GzEncoder;

    let mut encoder = GzEncoder::new(Vec::new(), Compression::fast());
    encoder.write_all(bytes).unwrap();
    encoder.finish().unwrap()
}

/// The value of header `name` (any case) in the raw request head `request`, trimmed: what a
/// scripted upstream received, such as the secret Mint put in `Authorization`.
pub fn request_header(request: &[u8], name: &str) -> Option<String> {
    String::from_utf8_lossy(request)
        .split("\r\n\r\n")
        .next()?
        .lines()
        .skip(1)
        .find_map(|line| {
            let (key, value) = line.split_once(':')?;
            key.trim()
                .eq_ignore_ascii_case(name)
                .then(|| value.trim().to_owned())
        })
}

/// The answer function of a [`ScriptedUpstream`]: given one request (head and body, as
/// received) and every request before it, the whole HTTP/1.1 answer to write.
pub type Script = dyn Fn(&[u8], &[Vec<u8>]) -> Vec<u8> + Send + 'static;

/// A plain-HTTP/1.1 upstream on `127.0.0.1:0` whose answers a test scripts byte for byte: the
/// stand-in for a hostile or stateful upstream that the echo server cannot play (one that
/// remembers a secret from an earlier request, or writes it into its status line). Mint may use
/// plain `http` toward loopback, so it needs no certificate. One request per connection; every
/// answer should say `Connection: close`. Dropping it stops the thread.
pub struct ScriptedUpstream {
    port: u16,
    seen: std::sync::Arc<std::sync::Mutex<Vec<Vec<u8>>>>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

// === impl ScriptedUpstream ===

impl ScriptedUpstream {
    /// Binds `127.0.0.1:0` and answers every request with `script`.
    #[track_caller]
    pub fn start(script: Box<Script>) -> ScriptedUpstream {
        use std::sync::atomic::Ordering;

        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let thread = {
            let seen = std::sync::Arc::clone(&seen);
            let stop = std::sync::Arc::clone(&stop);
            std::thread::spawn(move || {
                for stream in listener.incoming() {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(stream) = stream else { continue };
                    serve_scripted(stream, &seen, &script);
                }
            })
        };
        ScriptedUpstream {
            port,
            seen,
            stop,
            thread: Some(thread),
        }
    }

    /// An upstream that hands back, one per line, the `Authorization` of every request it was
    /// ever sent (this one last): a hostile upstream replaying the secrets it saw, which Mint
    /// must scrub from the answer, old values after a rotation included.
    #[track_caller]
    pub fn remembering_authorizations() -> ScriptedUpstream {
        ScriptedUpstream::start(Box::new(|request, earlier| {
            let authorization =
                |raw: &[u8]| request_header(raw, "authorization").unwrap_or_default();
            let mut body: Vec<String> = earlier.iter().map(|r| authorization(r)).collect();
            body.push(authorization(request));
            let body = body.join("\n");
            format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            )
            .into_bytes()
        }))
    }

    /// The bound port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Every request received so far (head and body, as received).
    pub fn requests(&self) -> Vec<Vec<u8>> {
        self.seen.lock().unwrap().clone()
    }
}

impl std::fmt::Debug for ScriptedUpstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScriptedUpstream")
            .field("port", &self.port)
            .finish_non_exhaustive()
    }
}

impl Drop for ScriptedUpstream {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        // Wakes the blocking accept so the thread sees the flag.
        let _ = std::net::TcpStream::connect(("127.0.0.1", self.port));
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn serve_scripted(
    mut stream: std::net::TcpStream,
    seen: &std::sync::Mutex<Vec<Vec<u8>>>,
    script: &Script,
) {
    use std::io::Write as _;

    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let mut request = Vec::new();
    let mut buffer = [0u8; 16 * 1024];
    let head_end = loop {
        if let Some(end) = find(&request, b"\r\n\r\n") {
            break end + 4;
        }
        match stream.read(&mut buffer) {
            Ok(0) | Err(_) => return,
            Ok(n) => request.extend_from_slice(&buffer[..n]),
        }
    };
    let head = String::from_utf8_lossy(&request[..head_end]).to_ascii_lowercase();
    let length = head
        .lines()
        .filter_map(|line| line.split_once(':'))
        .find(|(name, _)| name.trim() == "content-length")
        .and_then(|(_, value)| value.trim().parse::<usize>().ok())
        .unwrap_or(0);
    while request.len() < head_end + length {
        match stream.read(&mut buffer) {
            Ok(0) | Err(_) => break,
            Ok(n) => request.extend_from_slice(&buffer[..n]),
        }
    }
    let answer = {
        let mut seen = seen.lock().unwrap();
        let answer = script(&request, &seen);
        seen.push(request);
        answer
    };
    let _ = stream.write_all(&answer);
    let _ = stream.flush();
    let _ = stream.shutdown(std::net::Shutdown::Both);
}

/// Runs curl through `proxy` (`http://127.0.0.1:PORT`, forward-proxy mode: curl sends
/// absolute-form requests) with `args`, and parses the answer. Unlike [`curl`] it must not pass
/// `--noproxy`, which would override `-x`. `--http1.1`, 30 s bound.
#[track_caller]
pub fn curl_via_proxy(proxy: &str, args: &[&str]) -> CurlResponse {
    curl_via_proxy_as("--http1.1", proxy, args)
}

/// [`curl_via_proxy`] with curl's HTTP version option `version` (`--http1.1`, `--http2`): for an
/// `https://` URL curl opens a `CONNECT` tunnel through `proxy` (a proxy URL may carry
/// `agent:TOKEN@`), and trusts only the `--cacert` given in `args`.
#[track_caller]
pub fn curl_via_proxy_as(version: &str, proxy: &str, args: &[&str]) -> CurlResponse {
    let output = curl_via_proxy_command(version, proxy)
        .args(["-D", "-", "-o", "-"])
        .args(args)
        .output()
        .unwrap();
    parse_curl(&output)
}

/// The curl command of [`curl_via_proxy_as`] without its output options, for a test that reads
/// curl's exit code and stderr itself.
pub fn curl_via_proxy_command(version: &str, proxy: &str) -> Command {
    let mut command = Command::new("curl");
    for variable in CA_VARIABLES {
        command.env_remove(variable);
    }
    command
        .args([
            "-sS",
            version,
            "--suppress-connect-headers",
            "--max-time",
            "30",
            "-x",
            proxy,
        ])
        .env_remove("http_proxy")
        .env_remove("HTTP_PROXY")
        .env_remove("https_proxy")
        .env_remove("HTTPS_PROXY")
        .env_remove("all_proxy")
        .env_remove("ALL_PROXY")
        .env_remove("no_proxy")
        .env_remove("NO_PROXY");
    command
}
