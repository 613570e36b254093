//! Harness: starts the real `mint-mcp` binary with a clean environment, feeds it raw lines from a
//! writer thread, and reads its stdout and stderr on threads of their own, so that every wait has
//! a deadline and a hang fails the test instead of stalling it.

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// How long any single wait may take before the test fails.
pub(crate) const DEADLINE: Duration = Duration::from_secs(20);

/// The workspace root, where the examples are; the server runs there.
pub(crate) fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The environment of the golden transcripts: examples as the configured files, and a home whose
/// `capabilities.yaml` must never be read. Paths are relative to the workspace root.
pub(crate) fn example_env() -> Vec<(&'static str, OsString)> {
    vec![
        ("MINT_HOME", "mcp/tests/fixtures/home".into()),
        ("MINT_ALIASES_PATH", "examples/aliases.yaml".into()),
        ("MINT_AUDIT_LOG_PATH", "examples/audit.log".into()),
    ]
}

/// [`example_env`] with `home` as `MINT_HOME`: the server reads only under its working
/// directory (the workspace root) and its home, so a test's temporary files go in its home.
pub(crate) fn home_env(home: &Path) -> Vec<(&'static str, OsString)> {
    let mut env = example_env();
    env.retain(|(key, _)| *key != "MINT_HOME");
    env.push(("MINT_HOME", home.as_os_str().to_owned()));
    env
}

/// A running `mint-mcp`.
pub(crate) struct Mcp {
    child: Child,
    input: Option<Sender<Vec<u8>>>,
    writer: Option<JoinHandle<()>>,
    stdout: Receiver<String>,
    stderr: Option<JoinHandle<Vec<u8>>>,
    syncs: u64,
}

/// What a finished server left behind.
pub(crate) struct Finished {
    pub(crate) status: ExitStatus,
    /// Stdout lines not read by the test before the end.
    pub(crate) stdout: Vec<String>,
    pub(crate) stderr: String,
}

impl Mcp {
    /// Starts the server in the workspace root with only `env` (and `RUST_LOG` when given).
    pub(crate) fn start(env: &[(&str, OsString)]) -> Mcp {
        let mut command = Command::new(env!("CARGO_BIN_EXE_mint-mcp"));
        command
            .current_dir(repo_root())
            .env_clear()
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (key, value) in env {
            command.env(key, value);
        }
        let mut child = command.spawn().expect("start mint-mcp");
        let stdin: ChildStdin = child.stdin.take().unwrap();
        let (input, inputs) = mpsc::channel::<Vec<u8>>();
        let writer = thread::spawn(move || {
            let mut stdin = stdin;
            for bytes in inputs {
                // The server may have exited on purpose (a test of EOF or a crash test): the
                // test looks at what came out, so a broken pipe is not an error here.
                if stdin
                    .write_all(&bytes)
                    .and_then(|()| stdin.flush())
                    .is_err()
                {
                    return;
                }
            }
        });
        let (lines, stdout) = mpsc::channel();
        let out = child.stdout.take().unwrap();
        thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { return };
                if lines.send(line).is_err() {
                    return;
                }
            }
        });
        let mut err = child.stderr.take().unwrap();
        let stderr = thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = err.read_to_end(&mut bytes);
            bytes
        });
        Mcp {
            child,
            input: Some(input),
            writer: Some(writer),
            stdout,
            stderr: Some(stderr),
            syncs: 0,
        }
    }

    /// The server's process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends bytes as they are (no line feed added).
    pub(crate) fn send_raw(&mut self, bytes: Vec<u8>) {
        self.input.as_ref().unwrap().send(bytes).unwrap();
    }

    /// `VmHWM` (peak resident set) of the server so far, in bytes, from `/proc/<pid>/status`.
    pub(crate) fn peak_rss(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
        let kib: u64 = status
            .lines()
            .find_map(|line| line.strip_prefix("VmHWM:"))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap();
        kib * 1024
    }

    /// Sends one line (a line feed is added).
    pub(crate) fn send(&mut self, line: &str) {
        self.send_raw(format!("{line}\n").into_bytes());
    }

    /// The next stdout line, parsed; fails after `DEADLINE`.
    #[track_caller]
    pub(crate) fn recv(&mut self) -> Value {
        self.recv_within(DEADLINE)
    }

    /// The next stdout line, parsed; fails after `deadline` (for a test whose one request is
    /// expected to take long in a debug build).
    #[track_caller]
    pub(crate) fn recv_within(&mut self, deadline: Duration) -> Value {
        let line = match self.stdout.recv_timeout(deadline) {
            Ok(line) => line,
            Err(RecvTimeoutError::Timeout) => {
                let _ = self.child.kill();
                panic!("no response within {deadline:?}");
            }
            Err(RecvTimeoutError::Disconnected) => panic!("the server closed stdout"),
        };
        parse_line(&line)
    }

    /// Sends a request and returns its response.
    #[track_caller]
    pub(crate) fn request(&mut self, request: Value) -> Value {
        self.send(&request.to_string());
        self.recv()
    }

    /// Calls a tool and returns the whole response.
    #[track_caller]
    pub(crate) fn call(&mut self, name: &str, arguments: Value) -> Value {
        self.request(json!({
            "jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": name, "arguments": arguments},
        }))
    }

    /// Sends `bytes` plus a line feed, then a `ping` whose answer marks the end of whatever the
    /// line produced: returns every response before it (none for a line that gets no answer).
    #[track_caller]
    pub(crate) fn exchange(&mut self, bytes: &[u8]) -> Vec<Value> {
        self.syncs += 1;
        let sync = format!("sync-{}", self.syncs);
        let mut input = bytes.to_vec();
        input.push(b'\n');
        input.extend_from_slice(
            json!({"jsonrpc": "2.0", "id": sync, "method": "ping"})
                .to_string()
                .as_bytes(),
        );
        input.push(b'\n');
        self.send_raw(input);
        let mut replies = Vec::new();
        loop {
            let reply = self.recv();
            if reply["id"] == sync.as_str() {
                assert_eq!(reply, json!({"jsonrpc": "2.0", "id": sync, "result": {}}));
                return replies;
            }
            replies.push(reply);
        }
    }

    /// Closes stdin and waits for the server to exit; fails after `DEADLINE`.
    #[track_caller]
    pub(crate) fn finish(mut self) -> Finished {
        drop(self.input.take());
        let _ = self.writer.take().unwrap().join();
        let started = Instant::now();
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            if started.elapsed() > DEADLINE {
                let _ = self.child.kill();
                panic!("mint-mcp did not exit within {DEADLINE:?} of the end of its input");
            }
            thread::sleep(Duration::from_millis(5));
        };
        let stderr = self.stderr.take().unwrap().join().unwrap();
        let stdout = self.stdout.try_iter().collect();
        Finished {
            status,
            stdout,
            stderr: String::from_utf8_lossy(&stderr).into_owned(),
        }
    }

    /// The peak resident memory of the server so far, in KiB (Linux `VmHWM`).
    pub(crate) fn peak_memory_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
        status
            .lines()
            .find_map(|line| line.strip_prefix("VmHWM:"))
            .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap()
    }
}

impl Drop for Mcp {
    fn drop(&mut self) {
        // A test that failed half-way must not leave a server behind.
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Checks that a stdout line is one compact JSON object and parses it.
#[track_caller]
pub(crate) fn parse_line(line: &str) -> Value {
    let value: Value = serde_json::from_str(line)
        .unwrap_or_else(|e| panic!("stdout line is not JSON ({e}): {line:.200}"));
    assert!(value.is_object(), "not an object: {line:.200}");
    assert_eq!(
        value.to_string().len(),
        line.len(),
        "not compact: {line:.200}"
    );
    assert_eq!(value["jsonrpc"], "2.0");
    value
}

/// The payload of a successful tool call: the single text block, parsed.
#[track_caller]
pub(crate) fn payload(response: &Value) -> Value {
    let content = response["result"]["content"]
        .as_array()
        .unwrap_or_else(|| panic!("not a tool result: {response}"));
    assert_eq!(content.len(), 1, "{response}");
    assert_eq!(content[0]["type"], "text");
    let text = content[0]["text"].as_str().unwrap();
    let value: Value = serde_json::from_str(text).unwrap();
    assert_eq!(
        serde_json::to_string_pretty(&value).unwrap().len(),
        text.len(),
        "the text is not pretty-printed JSON"
    );
    value
}

/// The error object of a failed call, checking its code.
#[track_caller]
pub(crate) fn error(response: &Value, code: i64) -> &Value {
    assert!(response.get("result").is_none(), "{response}");
    assert_eq!(response["error"]["code"], code, "{response}");
    &response["error"]
}
