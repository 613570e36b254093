//! Adversarial review of `mint-mcp`: an untrusted agent controls every byte on stdin and can
//! write files, symbolic links, hard links, FIFOs and huge files in its workspace. Each test is an
//! attack, named after it, against the real binary over stdio. The server must never show a byte
//! of a refused or foreign file (the capabilities file, `file:` secrets, kernel pseudo-files, raw
//! lines), never hang, never grow without bound, and follow the reference
//! (`shared/seeds/002_…txt`) on the wire.
//!
//! Every wait has a deadline (`DEADLINE`) that only detects hangs; nothing here measures time.

#![expect(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test harness: a failed step is a failed test"
)]

use std::ffi::OsString;
use std::fs::{self, File};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// Longest wait for any reply or exit: past it, the server is taken to hang.
const DEADLINE: Duration = Duration::from_secs(10);

/// How long a race test keeps trying to win its race before it concludes the guard held.
const RACE_BUDGET: Duration = Duration::from_millis(1500);

/// A secret-looking value planted in files the server must not reveal.
const CANARY: &str = "ADV-CANARY-5d8e2f917ab3c046";

/// Fragments of the canary that must not show up either.
const CANARY_PARTS: [&str; 3] = ["ADV-CANARY", "5d8e2f917ab3", "adv-canary"];

// --- Harness --------------------------------------------------------------------------------

/// A running `mint-mcp`, fed by a writer thread and read by reader threads, so that a hang fails
/// the test instead of stalling it. Killed on drop.
struct Mcp {
    child: Child,
    input: Option<Sender<Vec<u8>>>,
    writer: Option<JoinHandle<()>>,
    lines: Receiver<String>,
    stderr: Option<JoinHandle<Vec<u8>>>,
    /// Every stdout line received so far.
    seen: Vec<String>,
    syncs: u64,
}

struct Finished {
    status: ExitStatus,
    stdout: String,
    stderr: String,
}

impl Mcp {
    /// Starts the server in `cwd` with only `env`.
    fn start(cwd: &Path, env: &[(&str, OsString)]) -> Mcp {
        let mut command = Command::new(env!("CARGO_BIN_EXE_mint-mcp"));
        command
            .current_dir(cwd)
            .env_clear()
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (key, value) in env {
            command.env(key, value);
        }
        let mut child = command.spawn().expect("start mint-mcp");
        let mut stdin = child.stdin.take().unwrap();
        let (input, inputs) = mpsc::channel::<Vec<u8>>();
        let writer = thread::spawn(move || {
            for bytes in inputs {
                if stdin
                    .write_all(&bytes)
                    .and_then(|()| stdin.flush())
                    .is_err()
                {
                    return;
                }
            }
        });
        let (tx, lines) = mpsc::channel();
        let out = child.stdout.take().unwrap();
        thread::spawn(move || {
            let mut out = BufReader::new(out);
            loop {
                let mut line = Vec::new();
                match out.read_until(b'\n', &mut line) {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {
                        if tx
                            .send(String::from_utf8_lossy(&line).into_owned())
                            .is_err()
                        {
                            return;
                        }
                    }
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
            lines,
            stderr: Some(stderr),
            seen: Vec::new(),
            syncs: 0,
        }
    }

    fn send_raw(&mut self, bytes: Vec<u8>) {
        self.input.as_ref().unwrap().send(bytes).unwrap();
    }

    /// The next raw stdout line, line feed included.
    #[track_caller]
    fn recv_raw(&mut self) -> String {
        match self.lines.recv_timeout(DEADLINE) {
            Ok(line) => {
                self.seen.push(line.clone());
                line
            }
            Err(RecvTimeoutError::Timeout) => {
                let _ = self.child.kill();
                panic!("no response within {DEADLINE:?}: the server hangs");
            }
            Err(RecvTimeoutError::Disconnected) => panic!("the server closed stdout"),
        }
    }

    #[track_caller]
    fn recv(&mut self) -> Value {
        let line = self.recv_raw();
        assert!(
            line.ends_with('\n'),
            "a response line without its line feed"
        );
        assert!(
            line.len() <= 1024 * 1024 + 1,
            "a response line of {} bytes, over the 1 MiB message limit",
            line.len()
        );
        assert_eq!(line.matches('\n').count(), 1, "a response spans lines");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"))
    }

    #[track_caller]
    fn request(&mut self, request: Value) -> Value {
        self.send_raw(format!("{request}\n").into_bytes());
        self.recv()
    }

    #[track_caller]
    fn call(&mut self, tool: &str, arguments: Value) -> Value {
        self.request(json!({
            "jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": tool, "arguments": arguments},
        }))
    }

    /// Sends `bytes` as one line, then a ping; returns whatever came before the ping's answer.
    #[track_caller]
    fn exchange(&mut self, bytes: &[u8]) -> Vec<Value> {
        self.syncs += 1;
        let sync = format!("sync-{}", self.syncs);
        let mut input = bytes.to_vec();
        input.push(b'\n');
        input.extend_from_slice(
            json!({"jsonrpc":"2.0","id":sync,"method":"ping"})
                .to_string()
                .as_bytes(),
        );
        input.push(b'\n');
        self.send_raw(input);
        let mut replies = Vec::new();
        loop {
            let reply = self.recv();
            if reply["id"] == sync.as_str() {
                return replies;
            }
            replies.push(reply);
        }
    }

    /// Peak resident memory of the server, in KiB.
    fn peak_memory_kib(&self) -> u64 {
        let status = fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap()
    }

    /// Closes stdin and waits for the exit.
    #[track_caller]
    fn finish(mut self) -> Finished {
        drop(self.input.take());
        let _ = self.writer.take().unwrap().join();
        let started = Instant::now();
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            assert!(
                started.elapsed() < DEADLINE,
                "mint-mcp did not exit at the end of input"
            );
            thread::sleep(Duration::from_millis(5));
        };
        let stderr =
            String::from_utf8_lossy(&self.stderr.take().unwrap().join().unwrap()).into_owned();
        let mut stdout = self.seen.join("");
        while let Ok(line) = self.lines.recv_timeout(Duration::from_millis(200)) {
            stdout.push_str(&line);
        }
        Finished {
            status,
            stdout,
            stderr,
        }
    }
}

impl Drop for Mcp {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

#[track_caller]
fn error(response: &Value, code: i64) -> &Value {
    assert_eq!(response["error"]["code"], code, "{response}");
    assert!(response.get("result").is_none(), "{response}");
    &response["error"]
}

#[track_caller]
fn kind(response: &Value) -> &str {
    error(response, -32603)["data"]["kind"]
        .as_str()
        .unwrap_or_else(|| panic!("no kind: {response}"))
}

#[track_caller]
fn payload(response: &Value) -> Value {
    let content = response["result"]["content"]
        .as_array()
        .unwrap_or_else(|| panic!("{response}"));
    assert_eq!(content.len(), 1);
    assert_eq!(content[0]["type"], "text");
    serde_json::from_str(content[0]["text"].as_str().unwrap()).unwrap()
}

#[track_caller]
fn assert_no_canary(what: &str, text: &str) {
    for part in CANARY_PARTS {
        assert!(
            !text.contains(part),
            "the canary (`{part}`) leaked on {what}"
        );
    }
}

fn env(pairs: &[(&'static str, &Path)]) -> Vec<(&'static str, OsString)> {
    pairs
        .iter()
        .map(|(k, v)| (*k, v.as_os_str().to_owned()))
        .collect()
}

fn mkfifo(path: &Path) {
    assert!(Command::new("mkfifo").arg(path).status().unwrap().success());
}

const VALID_POLICY: &str = "version: 1\ndefault: deny\nrules:\n  - id: gh-read\n    effect: allow\n    match:\n      host: api.github.com\n      method: [GET]\n";

/// A Mint home with an aliases file naming `secret` as a `file:` source, and a capabilities file.
struct Home {
    dir: tempfile::TempDir,
    secret: PathBuf,
}

impl Home {
    fn new() -> Home {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        let secrets = dir.path().join("secrets");
        let ws = dir.path().join("ws");
        for d in [&home, &secrets, &ws] {
            fs::create_dir(d).unwrap();
        }
        let secret = secrets.join("slack-token");
        fs::write(&secret, format!("{CANARY}\n")).unwrap();
        fs::write(
            home.join("aliases.yaml"),
            format!(
                "aliases:\n  - name: slack\n    hosts: [slack.com]\n    source: file:{}\n  - name: github\n    hosts: [api.github.com]\n",
                secret.display()
            ),
        )
        .unwrap();
        fs::write(
            home.join("capabilities.yaml"),
            format!("version: 1\ncapabilities:\n  - id: c1\n    agent: mino\n    hash: {CANARY}\n"),
        )
        .unwrap();
        fs::write(ws.join("policy.yaml"), VALID_POLICY).unwrap();
        Home { dir, secret }
    }

    fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }

    /// The agent's workspace, where it may write anything.
    fn ws(&self, name: &str) -> PathBuf {
        self.dir.path().join("ws").join(name)
    }

    fn env(&self) -> Vec<(&'static str, OsString)> {
        env(&[("MINT_HOME", &self.home())])
    }

    fn start(&self) -> Mcp {
        Mcp::start(&self.ws(""), &self.env())
    }
}

const TOOLS: [(&str, &str); 3] = [
    ("policy_check", "file"),
    ("alias_list", "path"),
    ("audit_tail", "path"),
];

// --- Races: a name swapped between the guard's checks and the open ----------------------------

/// What one racing call came back as.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    /// The benign file was read.
    Benign,
    /// The guard refused, with this kind.
    Refused(String),
    /// Some file's contents were parsed and reported as findings: not the benign file.
    Parsed(String),
    Other(String),
}

/// Keeps swapping `victim` between a hard link of `benign` and `attack` (made by `make_attack`
/// at a temporary name, then renamed over the victim, so the name always exists), while
/// `policy_check` is called on `victim` in batches. Returns every outcome, stopping early at the
/// first `Parsed` one.
fn race(
    mcp: &mut Mcp,
    dir: &Path,
    benign: &Path,
    make_attack: impl Fn(&Path) + Send + 'static,
) -> Vec<Outcome> {
    let victim = dir.join("victim.yaml");
    let _ = fs::remove_file(&victim);
    fs::hard_link(benign, &victim).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let racer = {
        let (stop, dir, benign, victim) = (
            stop.clone(),
            dir.to_owned(),
            benign.to_owned(),
            victim.clone(),
        );
        thread::spawn(move || {
            let (tmp_benign, tmp_attack) = (dir.join(".tmp-benign"), dir.join(".tmp-attack"));
            while !stop.load(Ordering::Relaxed) {
                let _ = fs::remove_file(&tmp_benign);
                fs::hard_link(&benign, &tmp_benign).unwrap();
                fs::rename(&tmp_benign, &victim).unwrap();
                let _ = fs::remove_file(&tmp_attack);
                make_attack(&tmp_attack);
                fs::rename(&tmp_attack, &victim).unwrap();
            }
        })
    };
    let request = json!({"jsonrpc":"2.0","id":1,"method":"tools/call",
        "params":{"name":"policy_check","arguments":{"file": victim}}})
    .to_string();
    let batch = format!("{request}\n").repeat(64).into_bytes();
    let started = Instant::now();
    let mut outcomes = Vec::new();
    while started.elapsed() < RACE_BUDGET
        && !outcomes.iter().any(|o| matches!(o, Outcome::Parsed(_)))
    {
        mcp.send_raw(batch.clone());
        for _ in 0..64 {
            let response = mcp.recv();
            outcomes.push(if response.get("result").is_some() {
                assert_eq!(payload(&response)["rule_count"], 1, "{response}");
                Outcome::Benign
            } else if response["error"]["data"].is_array() {
                Outcome::Parsed(response["error"]["message"].to_string())
            } else if let Some(kind) = response["error"]["data"]["kind"].as_str() {
                Outcome::Refused(kind.to_owned())
            } else {
                Outcome::Other(response.to_string())
            });
        }
    }
    stop.store(true, Ordering::Relaxed);
    racer.join().unwrap();
    outcomes
}

fn summary(outcomes: &[Outcome]) -> String {
    let benign = outcomes.iter().filter(|o| **o == Outcome::Benign).count();
    let refused = outcomes
        .iter()
        .filter(|o| matches!(o, Outcome::Refused(_)))
        .count();
    let parsed: Vec<_> = outcomes
        .iter()
        .filter(|o| matches!(o, Outcome::Parsed(_)))
        .collect();
    format!(
        "{} calls: {benign} benign, {refused} refused, parsed: {parsed:?}",
        outcomes.len()
    )
}

/// Attack: `victim.yaml` in the workspace is a regular file when the guard canonicalizes it and
/// checks the name against /proc, /sys, /dev, then becomes a symlink to `/proc/self/environ`
/// before `open` follows the name again. Safe behaviour: the file actually opened is checked
/// (e.g. `O_NOFOLLOW` on the canonical path, or `fstatfs`/`/proc/self/fd` on the descriptor), so
/// every call returns the benign report or the uniform refusal, never findings about the
/// server's environment.
#[test]
fn toctou_symlink_swap_after_canonicalize_reads_proc_self_environ() {
    let home = Home::new();
    let mut mcp = home.start();
    let outcomes = race(&mut mcp, &home.ws(""), &home.ws("policy.yaml"), |at| {
        symlink("/proc/self/environ", at).unwrap();
    });
    assert!(
        !outcomes.iter().any(|o| matches!(o, Outcome::Parsed(_))),
        "the kernel pseudo-file guard was raced: /proc/self/environ was opened and parsed; {}",
        summary(&outcomes)
    );
    assert!(
        outcomes
            .iter()
            .all(|o| matches!(o, Outcome::Benign | Outcome::Refused(_))),
        "{}",
        summary(&outcomes)
    );
}

/// Attack: the same swap, towards a `capabilities.yaml` the server is not configured with (the
/// broker's, say, which the guard recognises only by its name). Safe behaviour: the name of the
/// file actually opened is checked, so every call is benign or the uniform refusal.
#[test]
fn toctou_symlink_swap_after_canonicalize_reads_an_unconfigured_capabilities_yaml() {
    let home = Home::new();
    let other = home.dir.path().join("broker-home");
    fs::create_dir(&other).unwrap();
    let caps = other.join("capabilities.yaml");
    fs::write(
        &caps,
        format!("version: 1\ncapabilities:\n  - id: c9\n    hash: {CANARY}\n"),
    )
    .unwrap();
    let mut mcp = home.start();
    let outcomes = race(&mut mcp, &home.ws(""), &home.ws("policy.yaml"), move |at| {
        symlink(&caps, at).unwrap();
    });
    let finished = mcp.finish();
    assert_no_canary("stdout", &finished.stdout);
    assert!(
        !outcomes.iter().any(|o| matches!(o, Outcome::Parsed(_))),
        "a capabilities.yaml was opened and parsed through a raced symlink; {}",
        summary(&outcomes)
    );
}

/// Attack: the same swap towards the configured `file:` secret, by symlink and by hard link.
/// Safe behaviour (held): the descriptor's device and inode are checked after the open, so every
/// call is benign or the uniform refusal, and the token never reaches the parser.
#[test]
fn toctou_swap_to_the_secret_file_is_caught_by_inode() {
    let home = Home::new();
    let mut mcp = home.start();
    let secret = home.secret.clone();
    let outcomes = race(&mut mcp, &home.ws(""), &home.ws("policy.yaml"), move |at| {
        symlink(&secret, at).unwrap();
    });
    assert!(
        outcomes
            .iter()
            .all(|o| matches!(o, Outcome::Benign | Outcome::Refused(_))),
        "{}",
        summary(&outcomes)
    );
    // Hard links of the secret in the workspace (same file system), swapped in by rename.
    let linked = home.ws("secret-link");
    if fs::hard_link(&home.secret, &linked).is_ok() {
        let outcomes = race(&mut mcp, &home.ws(""), &home.ws("policy.yaml"), move |at| {
            fs::hard_link(&linked, at).unwrap();
        });
        assert!(
            outcomes
                .iter()
                .all(|o| matches!(o, Outcome::Benign | Outcome::Refused(_))),
            "{}",
            summary(&outcomes)
        );
    }
    let finished = mcp.finish();
    assert_no_canary("stdout", &finished.stdout);
    assert_no_canary("stderr", &finished.stderr);
}

// --- Refused files by every name -------------------------------------------------------------

/// Attack: a hard link, under an innocent name, to a `capabilities.yaml` the server is not
/// configured with (DESIGN: any file named `capabilities.yaml` is refused, "every name of a
/// refused file is refused"). Safe behaviour: the uniform refusal. (Once only a symlink
/// was caught, by the canonical name; the hard link was read and its fields reported.)
#[test]
fn hard_link_to_an_unconfigured_capabilities_yaml_is_refused() {
    let home = Home::new();
    let other = home.dir.path().join("broker-home");
    fs::create_dir(&other).unwrap();
    let caps = other.join("capabilities.yaml");
    fs::write(
        &caps,
        format!("version: 1\ncapabilities:\n  - id: c9\n    hash: {CANARY}\n"),
    )
    .unwrap();
    fs::hard_link(&caps, home.ws("notes.txt")).unwrap();
    symlink(&caps, home.ws("link.yaml")).unwrap();
    let mut mcp = home.start();
    for (tool, key) in TOOLS {
        let response = mcp.call(tool, json!({ key: home.ws("link.yaml") }));
        assert_eq!(kind(&response), "unreadable");
        let response = mcp.call(tool, json!({ key: home.ws("notes.txt") }));
        assert_eq!(
            response["error"]["data"]["kind"], "unreadable",
            "{tool} read a hard link of a capabilities.yaml: {response}"
        );
    }
}

/// Attack: every spelling of the configured secret file and capabilities file — absolute,
/// relative to the server's working directory, `..` detours, doubled slashes, `/./`, a symlinked
/// directory, a chain of symlinks, a hard link — through every tool, with `RUST_LOG=trace`.
/// Safe behaviour (held): the matching `refused_*` kind each time, and the canary nowhere on
/// stdout or stderr.
#[test]
fn secret_and_capabilities_files_are_refused_by_every_name_and_never_echoed() {
    let home = Home::new();
    let secret = home.secret.clone();
    let secrets_dir = secret.parent().unwrap().to_owned();
    symlink(&secrets_dir, home.ws("dirlink")).unwrap();
    symlink(&secret, home.ws("l1")).unwrap();
    symlink(home.ws("l1"), home.ws("l2")).unwrap();
    fs::hard_link(&secret, home.ws("innocent.log")).unwrap();
    fs::hard_link(home.home().join("capabilities.yaml"), home.ws("caps.txt")).unwrap();
    let caps = home.home().join("capabilities.yaml");
    let s = secret.display().to_string();
    let secret_names: Vec<String> = vec![
        s.clone(),
        s.replacen('/', "//", 2),
        format!("{}/./slack-token", secrets_dir.display()),
        format!("{}/../secrets/slack-token", secrets_dir.display()),
        "../secrets/slack-token".into(),
        "./../ws/dirlink/slack-token".into(),
        "dirlink/../ws/dirlink/slack-token".into(),
        "l2".into(),
        "innocent.log".into(),
    ];
    let caps_names: Vec<String> = vec![
        caps.display().to_string(),
        "../home/capabilities.yaml".into(),
        "caps.txt".into(),
        format!("{}/../home/./capabilities.yaml", home.home().display()),
    ];
    let mut env = home.env();
    env.push(("RUST_LOG", "trace".into()));
    let mut mcp = Mcp::start(&home.ws(""), &env);
    for (tool, key) in TOOLS {
        for name in &secret_names {
            let response = mcp.call(tool, json!({ key: name }));
            assert_eq!(kind(&response), "unreadable", "{tool} {name}");
        }
        for name in &caps_names {
            let response = mcp.call(tool, json!({ key: name }));
            assert_eq!(kind(&response), "unreadable", "{tool} {name}");
        }
    }
    // The aliases file names the secret's location; no tool may repeat it.
    let aliases = home.home().join("aliases.yaml");
    mcp.call("alias_list", json!({}));
    mcp.call("policy_check", json!({ "file": aliases }));
    mcp.call("audit_tail", json!({ "path": aliases }));
    let finished = mcp.finish();
    assert!(finished.status.success());
    for (what, text) in [("stdout", &finished.stdout), ("stderr", &finished.stderr)] {
        assert_no_canary(what, text);
    }
    assert!(
        finished.stderr.contains("Request"),
        "trace logging was off: {}",
        finished.stderr
    );
    // The agent saw one answer for all; the log tells the operator which guard rule held.
    for reason in ["refused_secret_file", "refused_capabilities_file"] {
        assert!(finished.stderr.contains(reason), "{reason} not logged");
    }
}

/// Attack: the secret's location named in the aliases file is itself a canary (a directory
/// called after it): `policy_check`, `audit_tail` and `alias_list` on the aliases file must
/// not repeat a `source`. Safe behaviour (held): findings by position and field only.
#[test]
fn no_tool_reveals_the_file_source_of_an_alias() {
    let dir = tempfile::tempdir().unwrap();
    let secret_dir = dir.path().join(CANARY);
    fs::create_dir(&secret_dir).unwrap();
    fs::write(secret_dir.join("t"), "x\n").unwrap();
    let aliases = dir.path().join("aliases.yaml");
    fs::write(
        &aliases,
        format!(
            "aliases:\n  - name: a\n    hosts: [a.example]\n    source: file:{}/t\n",
            secret_dir.display()
        ),
    )
    .unwrap();
    let mut env = env(&[("MINT_HOME", dir.path())]);
    env.push(("RUST_LOG", "trace".into()));
    let mut mcp = Mcp::start(dir.path(), &env);
    assert_eq!(payload(&mcp.call("alias_list", json!({})))["count"], 1);
    error(
        &mcp.call("policy_check", json!({ "file": aliases })),
        -32603,
    );
    assert_eq!(
        kind(&mcp.call("audit_tail", json!({ "path": aliases }))),
        "unreadable"
    );
    let finished = mcp.finish();
    assert_no_canary("stdout", &finished.stdout);
    assert_no_canary("stderr", &finished.stderr);
}

/// Attack: no `MINT_*` variable at all, the server started in a directory whose `.mint/` holds
/// the aliases file (the reference's default). Safe behaviour (held): the `file:` secret it
/// declares is still refused.
#[test]
fn the_default_relative_home_still_protects_secret_files() {
    let home = Home::new();
    let cwd = home.dir.path().join("project");
    fs::create_dir_all(cwd.join(".mint")).unwrap();
    fs::copy(
        home.home().join("aliases.yaml"),
        cwd.join(".mint/aliases.yaml"),
    )
    .unwrap();
    let mut mcp = Mcp::start(&cwd, &[]);
    for (tool, key) in TOOLS {
        assert_eq!(
            kind(&mcp.call(tool, json!({ key: home.secret }))),
            "unreadable"
        );
    }
    assert_eq!(
        payload(&mcp.call("alias_list", json!({})))["path"],
        ".mint/aliases.yaml"
    );
}

/// Attack: the configured aliases file is a FIFO (or a directory): the secrets are unknown.
/// Safe behaviour (held): no hang when the guard loads it, and every other file is refused with
/// `refused_secrets_unknown`, the secret included.
#[test]
fn an_aliases_file_that_is_a_fifo_fails_closed_without_hanging() {
    let home = Home::new();
    let fifo = home.ws("aliases.fifo");
    mkfifo(&fifo);
    for aliases in [fifo, home.ws("")] {
        let mut env = home.env();
        env.push(("MINT_ALIASES_PATH", aliases.clone().into_os_string()));
        let mut mcp = Mcp::start(&home.ws(""), &env);
        for (tool, key) in TOOLS {
            for path in [&home.secret, &home.ws("policy.yaml")] {
                assert_eq!(
                    kind(&mcp.call(tool, json!({ key: path }))),
                    "unreadable",
                    "{tool}"
                );
            }
        }
    }
}

// --- Kernel pseudo-files and special files ---------------------------------------------------

/// Attack: the server's own (and its parent's) environment, file descriptors, stdin, devices and
/// sysfs, by direct names, relative `..` paths, doubled slashes, `/proc/self/root` and
/// `/proc/self/cwd` detours, and symlinks in the workspace. Safe behaviour (held):
/// the uniform refusal for each, no hang (`/dev/stdin` is the protocol channel), and the
/// environment's canary never shown.
#[test]
fn proc_sys_and_dev_are_refused_by_every_spelling() {
    let home = Home::new();
    symlink("/proc/self/environ", home.ws("env.yaml")).unwrap();
    symlink("/proc/self", home.ws("self")).unwrap();
    symlink("/dev/stdin", home.ws("stdin.log")).unwrap();
    let depth = home.ws("").components().count();
    let up = "../".repeat(depth + 2);
    let mut env = home.env();
    env.push(("ADV_SECRET", format!("x\nversion: 1\n{CANARY}: 1\n").into()));
    let mut mcp = Mcp::start(&home.ws(""), &env);
    let pid = std::process::id();
    let names = [
        "/proc/self/environ".to_owned(),
        "//proc/self/environ".to_owned(),
        "/./proc/self/environ".to_owned(),
        format!("{up}proc/self/environ"),
        format!("/proc/{pid}/environ"),
        "/proc/self/fd/0".to_owned(),
        "/proc/self/cmdline".to_owned(),
        "/proc/self/mem".to_owned(),
        format!("/proc/self/root{}", home.ws("policy.yaml").display()),
        "/proc/self/cwd/policy.yaml".to_owned(),
        "/dev/stdin".to_owned(),
        "/dev/fd/0".to_owned(),
        "/dev/zero".to_owned(),
        "/dev/shm".to_owned(),
        "/sys/kernel/mm/transparent_hugepage/enabled".to_owned(),
        "/sys/class".to_owned(),
        "env.yaml".to_owned(),
        "self/environ".to_owned(),
        "stdin.log".to_owned(),
    ];
    for (tool, key) in TOOLS {
        for name in &names {
            let response = mcp.call(tool, json!({ key: name }));
            let got = kind(&response);
            assert!(got == "unreadable", "{tool} {name}: {response}");
        }
    }
    let finished = mcp.finish();
    assert_no_canary("stdout", &finished.stdout);
    assert_no_canary("stderr", &finished.stderr);
}

/// Attack: a FIFO with no writer, a FIFO that a writer holds open, a Unix socket, a directory, a
/// symlink loop, a dangling symlink, a path through a regular file (`file/x`), a very long name.
/// Safe behaviour (held): an error with a kind for each, at once; the server goes on.
#[test]
fn special_files_are_errors_not_hangs() {
    let home = Home::new();
    let fifo = home.ws("pipe.yaml");
    mkfifo(&fifo);
    // A writer that holds the FIFO open and writes nothing.
    let holder = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&fifo)
        .unwrap();
    let _socket = std::os::unix::net::UnixListener::bind(home.ws("sock.yaml")).unwrap();
    symlink("loop-b", home.ws("loop-a")).unwrap();
    symlink("loop-a", home.ws("loop-b")).unwrap();
    symlink("missing", home.ws("dangling")).unwrap();
    let long = format!("{}/x", "a".repeat(5000));
    let mut mcp = home.start();
    for (tool, key) in TOOLS {
        for (name, expected) in [
            ("pipe.yaml", "unreadable"),
            ("sock.yaml", "unreadable"),
            (".", "unreadable"),
            ("loop-a", "unreadable"),
            ("dangling", "unreadable"),
            ("policy.yaml/x", "unreadable"),
            (long.as_str(), "unreadable"),
        ] {
            let response = mcp.call(tool, json!({ key: name }));
            assert_eq!(kind(&response), expected, "{tool} {name}: {response}");
        }
    }
    drop(holder);
    assert_eq!(
        mcp.request(json!({"jsonrpc":"2.0","id":"z","method":"ping"}))["result"],
        json!({})
    );
}

/// Attack: a 64 GiB sparse policy or aliases file, and files that keep growing while every tool
/// reads them. Safe behaviour (held): `policy_check` and `alias_list` read at most 4 MiB + 1 and
/// report E001; `audit_tail` reads up to the length it saw at open; no hang, small peak memory.
/// (`audit_tail` on a 64 GiB sparse log is `mcp/tests/it/robustness.rs`'s.)
#[test]
fn huge_sparse_and_growing_files_are_bounded() {
    let home = Home::new();
    let sparse = home.ws("sparse.yaml");
    File::create(&sparse).unwrap().set_len(64 << 30).unwrap();
    let growing = home.ws("growing.log");
    File::create(&growing).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let grower = {
        let (stop, growing) = (stop.clone(), growing.clone());
        thread::spawn(move || {
            let mut file = fs::OpenOptions::new().append(true).open(&growing).unwrap();
            let line = format!("{CANARY} {}\n", "y".repeat(4000));
            let mut written = 0usize;
            while !stop.load(Ordering::Relaxed) && written < 8 << 20 {
                file.write_all(line.as_bytes()).unwrap();
                written += line.len();
            }
        })
    };
    let mut mcp = home.start();
    for (tool, key) in TOOLS {
        if tool != "audit_tail" {
            let response = mcp.call(tool, json!({ key: sparse }));
            assert_eq!(kind(&response), "unreadable", "{response}");
        }
        for _ in 0..3 {
            let response = mcp.call(tool, json!({ key: growing }));
            assert!(response.get("result").is_some() || response.get("error").is_some());
        }
    }
    stop.store(true, Ordering::Relaxed);
    grower.join().unwrap();
    assert!(
        mcp.peak_memory_kib() < 96 * 1024,
        "{} KiB",
        mcp.peak_memory_kib()
    );
    let finished = mcp.finish();
    assert_no_canary("stdout", &finished.stdout);
    assert_no_canary("stderr", &finished.stderr);
}

// --- audit_tail never echoes a line that is not a record -------------------------------------

fn example_records() -> Vec<String> {
    let text =
        fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/audit.log"))
            .unwrap();
    text.lines().map(str::to_owned).collect()
}

/// Attack: an "audit log" whose non-record lines carry the canary in every shape a lax reader
/// might let through: raw text, JSON that is not a record, a record with an extra field, a
/// record with the canary in a typed field, a record followed by `\r`, by trailing garbage or
/// preceded by garbage on the same line, a record padded past 64 KiB, NUL bytes, invalid UTF-8,
/// two records on one line. Safe behaviour (held): only the clean records come back; the rest
/// are counted in `skipped`.
#[test]
fn audit_tail_never_echoes_a_line_that_is_not_a_record() {
    let home = Home::new();
    let records = example_records();
    let r = &records[0];
    let body = r.strip_suffix('}').unwrap();
    let bad: Vec<Vec<u8>> = vec![
        format!("Authorization: Bearer {CANARY}").into_bytes(),
        format!(r#"{{"token":"{CANARY}"}}"#).into_bytes(),
        format!(r#"{body},"token":"{CANARY}"}}"#).into_bytes(),
        format!(r#"{body},"agent":"{CANARY}"}}"#).into_bytes(),
        r.replace("\"mino\"", &format!("\"{CANARY} \""))
            .into_bytes(),
        format!("{r}\r").into_bytes(),
        format!("{r} {CANARY}").into_bytes(),
        format!("{CANARY}{r}").into_bytes(),
        format!("{r}{r}").into_bytes(),
        format!("{body},\"reason\":\"{}{CANARY}\"}}", "p".repeat(70 * 1024)).into_bytes(),
        format!("{body}\u{0}{CANARY}}}").into_bytes(),
        [CANARY.as_bytes(), b"\xff\xfe", r.as_bytes()].concat(),
        format!(r#"{body},"reason":"{CANARY}"}}"#).into_bytes(),
        format!(r#"{body},"path":"/{CANARY}\ud800"}}"#).into_bytes(),
    ];
    // A clean record first, so the file is recognisably a log and read at all.
    let mut log = format!("{}\n", records[0]).into_bytes();
    for (i, line) in bad.iter().enumerate() {
        log.extend_from_slice(line);
        log.push(b'\n');
        log.extend_from_slice(records[i % records.len()].as_bytes());
        log.push(b'\n');
    }
    fs::write(home.ws("audit.log"), &log).unwrap();
    let mut env = home.env();
    env.push(("RUST_LOG", "trace".into()));
    let mut mcp = Mcp::start(&home.ws(""), &env);
    let response = mcp.call("audit_tail", json!({ "path": "audit.log", "n": 1000 }));
    let tail = payload(&response);
    let finished = mcp.finish();
    assert_no_canary("stdout", &finished.stdout);
    assert_no_canary("stderr", &finished.stderr);
    assert_eq!(tail["count"], bad.len() + 1, "{tail}");
    // A record whose `reason` is a free word may be a record; everything else is skipped.
    assert!(
        tail["skipped"].as_u64().unwrap() >= bad.len() as u64 - 2,
        "{tail}"
    );
}

/// Attack: a line that straddles the 64 MiB scan window of a sparse audit log, so that the part
/// inside the window is a valid record while the whole line (with a canary before the window)
/// is not. Safe behaviour (held): the partial line is not returned, not even in part.
#[test]
fn audit_tail_does_not_return_the_inside_half_of_a_line_cut_by_the_scan_window() {
    const WINDOW: u64 = 64 * 1024 * 1024;
    let home = Home::new();
    let record = example_records()[0].clone();
    let path = home.ws("audit.log");
    let file = File::create(&path).unwrap();
    let len = 2 * WINDOW;
    let floor = len - WINDOW;
    let prefix = format!("\n{CANARY}");
    use std::os::unix::fs::FileExt;
    // A record first, so the file is recognisably a log; past the scan window, never shown.
    file.write_all_at(format!("{record}\n").as_bytes(), 0)
        .unwrap();
    file.write_all_at(prefix.as_bytes(), floor - prefix.len() as u64)
        .unwrap();
    file.write_all_at(format!("{record}\n").as_bytes(), floor)
        .unwrap();
    file.set_len(len).unwrap();
    let mut mcp = home.start();
    let tail = payload(&mcp.call("audit_tail", json!({ "path": path })));
    assert_eq!(
        tail["count"], 0,
        "a line cut by the scan window came back: {tail}"
    );
    drop(file);
}

// --- The wire: the reference, sentence by sentence -------------------------------------------

/// Attack: request ids a client may legally send that do not fit an `i64`/`u64`/`f64` exactly
/// (JSON-RPC: the response id MUST be the same value). Safe behaviour: the id is echoed byte
/// for byte, or the request is refused as invalid (-32600, null id) — never answered under a
/// different id, which leaves the client waiting forever for its own.
#[test]
fn an_id_beyond_u64_is_echoed_exactly_or_refused() {
    let home = Home::new();
    let mut mcp = home.start();
    for id in [
        "18446744073709551616",
        "123456789012345678901234567890",
        "-9223372036854775809",
    ] {
        mcp.send_raw(
            format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"ping\"}}\n").into_bytes(),
        );
        let line = mcp.recv_raw();
        let value: Value = serde_json::from_str(&line).unwrap();
        let echoed = line.contains(&format!("\"id\":{id},"));
        let refused = value["error"]["code"] == -32600 && value["id"].is_null();
        assert!(echoed || refused, "id {id} answered as {line}");
    }
}

/// Attack: `tools/call` of a tool that does not exist, with `arguments` that are not an object.
/// The reference: "An unknown tool returns the same error code" (-32603). Safe behaviour: the
/// unknown tool is reported as such, whatever the arguments, as it is with valid ones.
#[test]
fn an_unknown_tool_with_non_object_arguments_gets_32603() {
    let home = Home::new();
    let mut mcp = home.start();
    assert_eq!(
        error(&mcp.call("no_such_tool", json!({})), -32603)["code"],
        -32603
    );
    for arguments in [json!(5), json!("x"), json!([])] {
        let response = mcp.call("no_such_tool", arguments);
        error(&response, -32603);
    }
}

/// The reference, sentence by sentence: blank lines ignored; malformed JSON logged on stderr and
/// unanswered; notifications (any method, with or without `jsonrpc`) unanswered; each response
/// one line, flushed while stdin is still open; `ping` → `{}`; exactly four tools with the
/// reference's schemas byte for byte; unknown methods and tools → -32603; the requested
/// protocol version reported; `n` defaults to 20; `file` must be a non-empty string.
#[test]
fn the_wire_follows_the_reference() {
    let home = Home::new();
    let mut mcp = home.start();
    // Blank lines, malformed JSON, notifications: no response at all.
    for line in [
        &b""[..],
        b"   \t",
        b"\r",
        b"{",
        b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"",
        b"\xef\xbb\xbf{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}",
        b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"} {}",
        b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}",
        b"{\"jsonrpc\":\"2.0\",\"method\":\"tools/call\",\"params\":{\"name\":\"policy_check\",\"arguments\":{}}}",
        b"{\"jsonrpc\":\"2.0\",\"method\":\"no/such/method\"}",
        b"{\"method\":\"ping\"}",
        b"{\"jsonrpc\":\"1.0\",\"method\":5,\"params\":7}",
        b"{}",
    ] {
        assert_eq!(mcp.exchange(line), Vec::<Value>::new(), "{}", String::from_utf8_lossy(line));
    }
    // Flushed at once: the answer arrives while stdin stays open.
    let pong = mcp.request(json!({"jsonrpc":"2.0","id":"p","method":"ping"}));
    assert_eq!(pong, json!({"jsonrpc":"2.0","id":"p","result":{}}));
    // Unknown methods and tools.
    for method in [
        "resources/list",
        "",
        "PING",
        "tools/List",
        "notifications/initialized",
        "server/discover",
    ] {
        let response = mcp.request(json!({"jsonrpc":"2.0","id":2,"method":method}));
        error(&response, -32603);
        assert_eq!(response["id"], 2);
    }
    error(&mcp.call("Alias_List", json!({})), -32603);
    // Exactly four tools, schemas as in the reference.
    mcp.send_raw(b"{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/list\"}\n".to_vec());
    let raw = mcp.recv_raw();
    for schema in [
        r#"{"type":"object","properties":{"path":{"type":"string"}}}"#,
        r#"{"type":"object","required":["file"],"properties":{"file":{"type":"string"}}}"#,
        r#"{"type":"object","properties":{"n":{"type":"integer","minimum":1},"path":{"type":"string"}}}"#,
    ] {
        assert!(raw.contains(schema), "schema {schema} not in {raw}");
    }
    let list: Value = serde_json::from_str(&raw).unwrap();
    let names: Vec<&str> = list["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["alias_list", "policy_check", "audit_tail", "mint_usage"]
    );
    // The requested protocol version.
    for version in ["2024-11-05", "2025-03-26", "2025-06-18"] {
        let response = mcp.request(json!({"jsonrpc":"2.0","id":4,"method":"initialize",
            "params":{"protocolVersion":version,"capabilities":{},"clientInfo":{"name":"x","version":"1"}}}));
        assert_eq!(response["result"]["protocolVersion"], version);
        assert_eq!(response["result"]["capabilities"], json!({"tools":{}}));
        assert_eq!(response["result"]["serverInfo"]["name"], "mint-mcp");
    }
    // `file`: required, a non-empty string.
    for arguments in [
        json!({}),
        json!({"file": ""}),
        json!({"file": 1}),
        json!({"file": null}),
    ] {
        error(&mcp.call("policy_check", arguments), -32602);
    }
    // `n` defaults to 20.
    let mut log = String::new();
    for _ in 0..3 {
        for record in example_records() {
            log.push_str(&record);
            log.push('\n');
        }
    }
    let n_records = log.lines().count();
    fs::write(home.ws("audit.log"), &log).unwrap();
    let tail = payload(&mcp.call("audit_tail", json!({ "path": "audit.log" })));
    assert_eq!(tail["count"], n_records.min(20));
    for n in [json!(0), json!(-1), json!(1.5), json!("5"), json!(true)] {
        error(
            &mcp.call("audit_tail", json!({ "path": "audit.log", "n": n })),
            -32602,
        );
    }
    let finished = mcp.finish();
    assert!(finished.status.success());
    assert!(
        finished.stderr.contains("not JSON"),
        "malformed JSON was not logged: {}",
        finished.stderr
    );
}

/// Attack: stdin abuse — a 3 MiB line, 20,000 pipelined pings in one write, JSON nested 200 deep
/// (refused) and 120 deep (answered), a 2 KiB id, `n` as 1e308 and 2^64, a last request
/// without a line feed. Safe behaviour (held): only the valid lines are answered, in order, each
/// one line; memory stays small; end of input exits 0.
#[test]
fn stdin_abuse_neither_hangs_nor_grows() {
    let home = Home::new();
    let mut mcp = home.start();
    let mut long = br#"{"jsonrpc":"2.0","id":1,"method":"ping","params":{"pad":""#.to_vec();
    long.resize(3 << 20, b'a');
    long.extend_from_slice(b"\"}}");
    assert!(mcp.exchange(&long).is_empty());
    let deep = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"params\":{{\"a\":{}1{}}}}}",
        "[".repeat(200),
        "]".repeat(200)
    );
    assert!(mcp.exchange(deep.as_bytes()).is_empty());
    let ok = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"params\":{{\"a\":{}1{}}}}}",
        "[".repeat(120),
        "]".repeat(120)
    );
    assert_eq!(mcp.exchange(ok.as_bytes()).len(), 1);
    let big_id = json!({"jsonrpc":"2.0","id":"i".repeat(2048),"method":"ping"}).to_string();
    let replies = mcp.exchange(big_id.as_bytes());
    assert_eq!(replies.len(), 1);
    assert!(replies[0]["id"].is_null());
    error(&replies[0], -32600);
    for n in ["1e308", "18446744073709551616", "1000000000000"] {
        let line = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{{\"name\":\"audit_tail\",\"arguments\":{{\"n\":{n},\"path\":\"policy.yaml\"}}}}}}"
        );
        let replies = mcp.exchange(line.as_bytes());
        assert_eq!(kind(&replies[0]), "unreadable");
    }
    let mut many = Vec::new();
    for i in 0..20_000 {
        many.extend_from_slice(
            format!("{{\"jsonrpc\":\"2.0\",\"id\":{i},\"method\":\"ping\"}}\n").as_bytes(),
        );
    }
    mcp.send_raw(many);
    for i in 0..20_000 {
        assert_eq!(mcp.recv()["id"], i);
    }
    assert!(
        mcp.peak_memory_kib() < 64 * 1024,
        "{} KiB",
        mcp.peak_memory_kib()
    );
    mcp.send_raw(b"{\"jsonrpc\":\"2.0\",\"id\":\"last\",\"method\":\"ping\"}".to_vec());
    let finished = mcp.finish();
    assert!(finished.status.success());
    assert!(
        finished
            .stdout
            .ends_with("{\"jsonrpc\":\"2.0\",\"id\":\"last\",\"result\":{}}\n")
    );
}

/// Attack: a `file` argument made to grow on the way out — 300,000 `"` (escaped twice: in the
/// payload, then in the text block) or control characters — so the echoed name would push the
/// response over the 1 MiB message limit. Safe behaviour (held): every response line stays
/// within 1 MiB (checked by `recv`), as an error if need be.
#[test]
fn a_path_that_swells_when_escaped_keeps_responses_under_one_mib() {
    let home = Home::new();
    let mut mcp = home.start();
    for path in ["\"".repeat(300_000), "\u{1}".repeat(170_000)] {
        for (tool, key) in [("policy_check", "file"), ("audit_tail", "path")] {
            let response = mcp.call(tool, json!({ key: path }));
            error(&response, -32603);
        }
    }
    // A valid policy reached through a long name still fits (or becomes an error).
    let dir = "d/".repeat(1000);
    fs::create_dir_all(home.ws(&dir)).unwrap();
    fs::copy(home.ws("policy.yaml"), home.ws(&format!("{dir}p.yaml"))).unwrap();
    let response = mcp.call("policy_check", json!({ "file": format!("{dir}p.yaml") }));
    assert_eq!(payload(&response)["valid"], true);
}

/// Attack: the client closes its end of stdout, then keeps sending. Safe behaviour (held): the
/// server stops quietly with status 0 at its next write (no SIGPIPE death, no spin).
#[test]
fn a_client_that_closes_stdout_stops_the_server_quietly() {
    let home = Home::new();
    let mut child = Command::new(env!("CARGO_BIN_EXE_mint-mcp"))
        .current_dir(home.ws(""))
        .env_clear()
        .env("MINT_HOME", home.home())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let mut stdin = child.stdin.take().unwrap();
    let started = Instant::now();
    let status = loop {
        // Keep sending: a child another test forks at this moment briefly holds a copy of the
        // pipe's read end, so one write may still succeed; the next one after that cannot.
        let _ = stdin.write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n");
        let _ = stdin.flush();
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > DEADLINE {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the server did not stop after its client closed stdout");
        }
        thread::sleep(Duration::from_millis(5));
    };
    drop(stdin);
    assert!(status.success(), "{status:?}");
}

// --- Issue 24: no answer tells one unread file from another ---------------------------------

/// `tools/call` of `tool` with `{key: path}`, always under id 1: the raw response line.
#[track_caller]
fn raw_call(mcp: &mut Mcp, tool: &str, key: &str, path: &Path) -> String {
    let request = json!({"jsonrpc":"2.0","id":1,"method":"tools/call",
        "params":{"name":tool,"arguments":{key: path}}});
    mcp.send_raw(format!("{request}\n").into_bytes());
    mcp.recv_raw()
}

/// Removes whatever is at `path`: a file, a link, a FIFO, a socket or a directory tree.
fn clear(path: &Path) {
    if let Ok(meta) = fs::symlink_metadata(path) {
        if meta.is_dir() {
            fs::remove_dir_all(path).unwrap();
        } else {
            fs::remove_file(path).unwrap();
        }
    }
}

/// One way the file at the probed path may be.
type Setup<'a> = (&'a str, Box<dyn Fn(&Path) + 'a>);

fn file(content: impl AsRef<[u8]> + 'static) -> Box<dyn Fn(&Path)> {
    Box::new(move |path: &Path| fs::write(path, content.as_ref()).unwrap())
}

/// Makes the probed path each way in turn and calls `tool` on it: every answer must be the same
/// bytes (the id is the same), and an error whose `data` is the uniform `{"kind":"unreadable"}`.
/// The answer of the old code differed with the file (an existence, type, size, line, key or
/// byte-position oracle).
#[track_caller]
fn assert_one_answer(mcp: &mut Mcp, tool: &str, key: &str, path: &Path, setups: &[Setup<'_>]) {
    let mut answers: Vec<(&str, String)> = Vec::new();
    for (what, setup) in setups {
        clear(path);
        setup(path);
        answers.push((what, raw_call(mcp, tool, key, path)));
    }
    clear(path);
    let (first_what, first) = &answers[0];
    for (what, answer) in &answers[1..] {
        assert_eq!(
            answer, first,
            "{tool}: the answer for {what} differs from the one for {first_what}"
        );
    }
    let value: Value = serde_json::from_str(first).unwrap();
    assert_eq!(kind(&value), "unreadable", "{tool} {first_what}: {first}");
}

/// Where the probes sit: inside the working directory (the agent's workspace), and outside it
/// and `MINT_HOME`, where the reviewer's `/etc/shadow` sits.
fn probe_paths(home: &Home) -> [PathBuf; 2] {
    let outside = home.dir.path().join("elsewhere");
    fs::create_dir_all(&outside).unwrap();
    [home.ws("probe.yaml"), outside.join("probe.yaml")]
}

#[test]
fn issue_24_whether_a_file_exists_is_not_told() {
    let home = Home::new();
    let mut mcp = home.start();
    for path in probe_paths(&home) {
        for (tool, key) in TOOLS {
            let setups: Vec<Setup<'_>> = vec![
                ("nothing", Box::new(|_: &Path| {})),
                ("an empty file", file("")),
                (
                    "a text file",
                    file("root:$6$salt$hash:19000:0:99999:7:::\n"),
                ),
                (
                    "a dangling symlink",
                    Box::new(|p: &Path| symlink("nowhere", p).unwrap()),
                ),
                (
                    "a 0600 file",
                    Box::new(|p: &Path| {
                        use std::os::unix::fs::PermissionsExt;
                        fs::write(p, "secret: 1\n").unwrap();
                        fs::set_permissions(p, fs::Permissions::from_mode(0o600)).unwrap();
                    }),
                ),
            ];
            assert_one_answer(&mut mcp, tool, key, &path, &setups);
        }
    }
}

#[test]
fn issue_24_the_type_of_a_file_is_not_told() {
    let home = Home::new();
    let mut mcp = home.start();
    for path in probe_paths(&home) {
        for (tool, key) in TOOLS {
            let setups: Vec<Setup<'_>> = vec![
                ("a regular file", file("hello\n")),
                (
                    "a directory",
                    Box::new(|p: &Path| fs::create_dir(p).unwrap()),
                ),
                ("a FIFO", Box::new(|p: &Path| mkfifo(p))),
                (
                    "a socket",
                    Box::new(|p: &Path| {
                        // Bound and closed: the socket file stays.
                        drop(std::os::unix::net::UnixListener::bind(p).unwrap());
                    }),
                ),
                (
                    "a symlink to a directory",
                    Box::new(|p: &Path| symlink("/", p).unwrap()),
                ),
                (
                    "a symlink to a device",
                    Box::new(|p: &Path| symlink("/dev/null", p).unwrap()),
                ),
            ];
            assert_one_answer(&mut mcp, tool, key, &path, &setups);
        }
    }
}

/// The reviewer's example: `audit_tail` on `/etc/shadow` answered `count: 0` and `skipped`, the
/// file's number of lines (its number of accounts).
#[test]
fn issue_24_the_line_count_of_a_file_is_not_told() {
    let home = Home::new();
    let mut mcp = home.start();
    let account = "user:$6$salt$hash:19000:0:99999:7:::\n";
    for path in probe_paths(&home) {
        let setups: Vec<Setup<'_>> = vec![
            ("one line", file(account)),
            ("three lines", file(account.repeat(3))),
            ("a thousand lines", file(account.repeat(1000))),
            ("blank lines", file("\n".repeat(40))),
            // A record later in the file does not make it a log: the first line does.
            (
                "a record on line two",
                file(format!("{account}{}\n", example_records()[0])),
            ),
        ];
        assert_one_answer(&mut mcp, "audit_tail", "path", &path, &setups);
    }
}

/// A YAML file's lowercase top-level keys came back as unknown-field findings.
#[test]
fn issue_24_the_keys_of_a_file_are_not_told() {
    let home = Home::new();
    let mut mcp = home.start();
    for path in probe_paths(&home) {
        for (tool, key) in [("policy_check", "file"), ("alias_list", "path")] {
            let setups: Vec<Setup<'_>> = vec![
                ("keys password and user", file("password: x\nuser: y\n")),
                ("key token", file("token: 1\n")),
                ("version and another key", file("version: 1\npassword: x\n")),
                ("aliases and another key", file("aliases: []\napi_key: x\n")),
                ("a list", file("- password\n- user\n")),
                ("a scalar", file("just some text\n")),
                (
                    "a capabilities file",
                    file("version: 1\ncapabilities: []\n"),
                ),
            ];
            assert_one_answer(&mut mcp, tool, key, &path, &setups);
        }
    }
}

/// A duplicate key's name came back in an E005 finding.
#[test]
fn issue_24_duplicate_keys_are_not_told() {
    let home = Home::new();
    let mut mcp = home.start();
    for path in probe_paths(&home) {
        for (tool, key) in [("policy_check", "file"), ("alias_list", "path")] {
            let setups: Vec<Setup<'_>> = vec![
                ("duplicate a", file("a: 1\na: 2\n")),
                ("duplicate password", file("password: 1\npassword: 2\n")),
                ("duplicate version", file("version: 1\nversion: 1\n")),
                ("duplicate aliases", file("aliases: []\naliases: []\n")),
            ];
            assert_one_answer(&mut mcp, tool, key, &path, &setups);
        }
    }
}

/// The line and column of the first byte that is not UTF-8 came back in an E002 finding.
#[test]
fn issue_24_where_a_file_stops_being_utf8_is_not_told() {
    let home = Home::new();
    let mut mcp = home.start();
    for path in probe_paths(&home) {
        for (tool, key) in TOOLS {
            let setups: Vec<Setup<'_>> = vec![
                ("at 1:1", file(b"\xff\n")),
                ("at 2:1", file(b"x\n\xff\n")),
                ("at 4:9", file(b"a\n\n\nversion\xfe: 1\n")),
                ("in a policy", file(b"version: 1\nrules: \xff\n")),
                ("in a list of aliases", file(b"aliases:\n  - name: \xc3\n")),
            ];
            assert_one_answer(&mut mcp, tool, key, &path, &setups);
        }
    }
}

/// Whether a file is over the 4 MiB bound (and its exact size) came back in an E001 finding.
#[test]
fn issue_24_whether_a_file_is_over_4_mib_is_not_told() {
    let home = Home::new();
    let mut mcp = home.start();
    for path in probe_paths(&home) {
        for (tool, key) in TOOLS {
            let setups: Vec<Setup<'_>> = vec![
                ("a small file", file("hello\n")),
                ("4 MiB + 1 bytes", file(vec![b'#'; 4 * 1024 * 1024 + 1])),
                (
                    "a policy padded past 4 MiB",
                    file({
                        let mut text = b"version: 1\n".to_vec();
                        text.resize(4 * 1024 * 1024 + 100, b'#');
                        text
                    }),
                ),
                (
                    "a sparse 1 GiB file",
                    Box::new(|p: &Path| File::create(p).unwrap().set_len(1 << 30).unwrap()),
                ),
            ];
            assert_one_answer(&mut mcp, tool, key, &path, &setups);
        }
    }
}

#[test]
fn issue_24_a_planted_home_link_does_not_widen_what_is_read() {
    // Review finding: with MINT_HOME unset (the default `.mint` in the working directory) or
    // relative, an agent that can write its workspace planted `.mint` as a link to another
    // directory, which then became a root: its policy, alias file and audit log were read.
    let home = Home::new();
    let outside = home.dir.path().join("elsewhere");
    fs::create_dir(&outside).unwrap();
    let records = example_records().join("\n") + "\n";
    fs::write(outside.join("policy.yaml"), VALID_POLICY).unwrap();
    fs::write(outside.join("aliases.yaml"), "aliases: []\n").unwrap();
    fs::write(outside.join("audit.log"), &records).unwrap();
    symlink(&outside, home.ws(".mint")).unwrap();
    for env in [
        Vec::new(),
        vec![("MINT_HOME", OsString::from(".mint"))],
        vec![("MINT_AUDIT_LOG_PATH", OsString::from(".mint/audit.log"))],
    ] {
        let mut mcp = Mcp::start(&home.ws(""), &env);
        for (tool, key, name) in [
            ("policy_check", "file", "policy.yaml"),
            ("alias_list", "path", "aliases.yaml"),
            ("audit_tail", "path", "audit.log"),
        ] {
            for path in [
                outside.join(name).display().to_string(),
                format!(".mint/{name}"),
            ] {
                let response = mcp.call(tool, json!({ key: path }));
                assert_eq!(
                    kind(&response),
                    "unreadable",
                    "{env:?} {tool} {path}: {response}"
                );
            }
        }
        let tail = mcp.call("audit_tail", json!({}));
        assert_eq!(
            kind(&tail),
            "unreadable",
            "{env:?} default audit log: {tail}"
        );
        let aliases = mcp.call("alias_list", json!({}));
        assert_eq!(
            kind(&aliases),
            "unreadable",
            "{env:?} default aliases: {aliases}"
        );
    }
}

/// Files outside the working directory and `MINT_HOME` are never read, however they are named
/// (absolute, `..`, a symlink in the workspace, a symlinked directory), even when they are
/// valid; the same file inside the workspace is. The files the environment names are read
/// wherever they are.
#[test]
fn issue_24_files_outside_the_working_directory_and_home_are_refused() {
    let home = Home::new();
    let outside = home.dir.path().join("elsewhere");
    fs::create_dir(&outside).unwrap();
    let records = example_records().join("\n") + "\n";
    fs::write(outside.join("policy.yaml"), VALID_POLICY).unwrap();
    fs::write(outside.join("aliases.yaml"), "aliases: []\n").unwrap();
    fs::write(outside.join("audit.log"), &records).unwrap();
    symlink(&outside, home.ws("out")).unwrap();
    symlink(outside.join("policy.yaml"), home.ws("policy-link.yaml")).unwrap();
    let mut mcp = home.start();
    for (tool, key, name) in [
        ("policy_check", "file", "policy.yaml"),
        ("alias_list", "path", "aliases.yaml"),
        ("audit_tail", "path", "audit.log"),
    ] {
        for path in [
            outside.join(name).display().to_string(),
            format!("../elsewhere/{name}"),
            format!("out/{name}"),
            format!("./out/../out/{name}"),
        ] {
            let response = mcp.call(tool, json!({ key: path }));
            assert_eq!(kind(&response), "unreadable", "{tool} {path}: {response}");
        }
        fs::copy(outside.join(name), home.ws(name)).unwrap();
        let response = mcp.call(tool, json!({ key: name }));
        assert!(
            response.get("result").is_some(),
            "{tool} {name}: {response}"
        );
    }
    let response = mcp.call("policy_check", json!({ "file": "policy-link.yaml" }));
    assert_eq!(kind(&response), "unreadable", "{response}");
    drop(mcp);
    // Named by the environment, the same files outside are read.
    let mut env = home.env();
    env.push((
        "MINT_POLICY_PATH",
        outside.join("policy.yaml").into_os_string(),
    ));
    env.push((
        "MINT_ALIASES_PATH",
        outside.join("aliases.yaml").into_os_string(),
    ));
    env.push((
        "MINT_AUDIT_LOG_PATH",
        outside.join("audit.log").into_os_string(),
    ));
    let mut mcp = Mcp::start(&home.ws(""), &env);
    let policy = mcp.call(
        "policy_check",
        json!({ "file": outside.join("policy.yaml") }),
    );
    assert_eq!(payload(&policy)["valid"], true, "{policy}");
    assert_eq!(payload(&mcp.call("alias_list", json!({})))["count"], 0);
    let tail = payload(&mcp.call("audit_tail", json!({})));
    assert_eq!(tail["count"], example_records().len(), "{tail}");
}
