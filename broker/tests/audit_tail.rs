//! `mint audit tail` through the real binary: the table pairs a decision with its outcome, a
//! decision without one reads as `unknown`, `--json` prints records as stored, lines that are
//! not records are reported by number and kind and never echoed, and `-f` follows appends across
//! a rotation (a real follower process, read with a timeout, then killed).

#![expect(clippy::unwrap_used, clippy::panic, reason = "test helpers")]

use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use assert_cmd::Command;
use mint_broker::audit::rotation::{self, RotateOutcome};
use mint_broker::audit::{AuditConfig, AuditLog, Durability, now};
use mint_policy::audit::{
    AgentName, AliasName, AuditDecision, AuditRecord, ChainHash, Host, HttpStatus, Method, Outcome,
    ReasonCode, RequestId, RuleId, Scheme, ToolName, UrlPath,
};

const ENV_VARS: &[&str] = &[
    "MINT_HOME",
    "MINT_ALIASES_PATH",
    "MINT_POLICY_PATH",
    "MINT_AUDIT_LOG_PATH",
    "MINT_CAPABILITIES_PATH",
    "MINT_LISTEN",
];

const CANARY: &str = "CANARY-tail-9c1e";

fn mint(log: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_mint"));
    for var in ENV_VARS {
        cmd.env_remove(var);
    }
    cmd.env_remove("RUST_LOG")
        .env("MINT_AUDIT_LOG_PATH", log)
        .current_dir(log.parent().unwrap())
        .timeout(Duration::from_secs(30));
    cmd
}

fn tail(log: &Path, args: &[&str]) -> (i32, String, String) {
    let output = mint(log)
        .args(["audit", "tail"])
        .args(args)
        .output()
        .unwrap();
    let stdout = String::from_utf8(output.stdout).unwrap();
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(!stdout.contains(CANARY) && !stderr.contains(CANARY));
    (output.status.code().unwrap(), stdout, stderr)
}

fn open(path: &Path) -> AuditLog {
    AuditLog::open(
        path,
        AuditConfig {
            durability: Durability::Interval,
            rotate_bytes: None,
        },
    )
    .unwrap()
}

fn decision(id: &str, decision: AuditDecision) -> AuditRecord {
    let mut record = AuditRecord::decision(
        now(),
        RequestId::new(id).unwrap(),
        decision,
        ChainHash::genesis(),
    );
    record.agent = Some(AgentName::new("mino").unwrap());
    record.method = Some(Method::new("GET").unwrap());
    record.scheme = Some(Scheme::new("https").unwrap());
    record.host = Some(Host::new("api.github.com").unwrap());
    record.port = std::num::NonZeroU16::new(443);
    record.path = Some(UrlPath::new(format!("/repos/{id}")).unwrap());
    record.aliases = vec![AliasName::new("github").unwrap()];
    if decision == AuditDecision::Allow {
        record.rule = Some(vec![RuleId::new("github-read").unwrap()]);
    } else {
        record.rule = Some(vec![]);
        record.reason = Some(ReasonCode::new("policy_denied").unwrap());
    }
    record
}

fn outcome(id: &str, outcome: Outcome, status: u16, ms: u64) -> AuditRecord {
    let mut record = AuditRecord::outcome(
        now(),
        RequestId::new(id).unwrap(),
        outcome,
        ChainHash::genesis(),
    );
    record.status = Some(HttpStatus::new(status).unwrap());
    record.duration_ms = Some(ms);
    if outcome != Outcome::Completed {
        record.reason = Some(ReasonCode::new("policy_denied").unwrap());
    }
    record
}

fn row_of<'a>(stdout: &'a str, id: &str) -> &'a str {
    stdout
        .lines()
        .find(|line| line.contains(&format!("/repos/{id} ")))
        .unwrap_or_else(|| panic!("no row for {id} in\n{stdout}"))
}

#[test]
fn the_table_pairs_decisions_with_outcomes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.log");
    let log = open(&path);
    log.record(&decision("ok", AuditDecision::Allow)).unwrap();
    log.record(&decision("no", AuditDecision::Deny)).unwrap();
    log.record(&outcome("no", Outcome::Denied, 403, 1)).unwrap();
    log.record(&decision("lost", AuditDecision::Allow)).unwrap();
    log.record(&outcome("ok", Outcome::Completed, 200, 188))
        .unwrap();
    log.event(ReasonCode::new("policy_reload_failed").unwrap())
        .unwrap();
    drop(log);

    let (code, stdout, stderr) = tail(&path, &[]);
    assert_eq!(code, 0, "{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 5, "{stdout}");
    for column in [
        "TIME", "AGENT", "METHOD", "HOST", "PATH", "TOOL", "ALIASES", "DECISION", "RULE",
        "OUTCOME", "STATUS", "DURATION", "ID",
    ] {
        assert!(lines[0].contains(column), "{}", lines[0]);
    }
    let words = |line: &str| {
        line.split_whitespace()
            .skip(1)
            .collect::<Vec<_>>()
            .join(" ")
    };
    assert_eq!(
        words(row_of(&stdout, "ok")),
        "mino GET api.github.com /repos/ok - github allow github-read completed 200 188ms ok"
    );
    assert_eq!(
        words(row_of(&stdout, "no")),
        "mino GET api.github.com /repos/no - github deny (default) denied 403 1ms no"
    );
    assert_eq!(
        words(row_of(&stdout, "lost")),
        "mino GET api.github.com /repos/lost - github allow github-read unknown - - lost"
    );
    assert!(lines[4].contains("event") && lines[4].contains("policy_reload_failed"));
    // Rows come in the order of their decisions.
    assert!(lines[1].contains("/repos/ok") && lines[3].contains("/repos/lost"));

    let (_, stdout, _) = tail(&path, &["-n", "2"]);
    assert_eq!(stdout.lines().count(), 3, "{stdout}");
    assert!(stdout.contains("/repos/lost") && stdout.contains("policy_reload_failed"));
}

#[test]
fn issue_14_the_table_names_the_mcp_tool_of_each_call() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.log");
    let log = open(&path);
    for (id, tool) in [("mcp-a", "query-docs"), ("mcp-b", "create_issue")] {
        let mut record = decision(id, AuditDecision::Allow);
        record.method = Some(Method::new("POST").unwrap());
        record.path = Some(UrlPath::new("/mcp").unwrap());
        record.mcp_tool = Some(ToolName::new(tool).unwrap());
        log.record(&record).unwrap();
        log.record(&outcome(id, Outcome::Completed, 200, 3))
            .unwrap();
    }
    drop(log);
    let (code, stdout, stderr) = tail(&path, &[]);
    assert_eq!(code, 0, "{stderr}");
    let rows: Vec<Vec<&str>> = stdout
        .lines()
        .skip(1)
        .map(|line| line.split_whitespace().skip(1).collect())
        .collect();
    assert_eq!(
        rows,
        [
            "mino POST api.github.com /mcp query-docs github allow github-read completed 200 3ms mcp-a",
            "mino POST api.github.com /mcp create_issue github allow github-read completed 200 3ms mcp-b",
        ]
        .map(|row| row.split(' ').collect::<Vec<_>>())
    );
}

#[test]
fn json_prints_records_as_stored() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.log");
    let log = open(&path);
    for n in 0..5 {
        log.record(&decision(&format!("r{n}"), AuditDecision::Allow))
            .unwrap();
    }
    drop(log);
    let stored: Vec<String> = fs::read_to_string(&path)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    let (code, stdout, _) = tail(&path, &["--json", "-n", "3"]);
    assert_eq!(code, 0);
    let printed: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        printed,
        stored[2..].iter().map(String::as_str).collect::<Vec<_>>()
    );
}

#[test]
fn lines_that_are_not_records_are_located_never_echoed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.log");
    let log = open(&path);
    log.record(&decision("a", AuditDecision::Allow)).unwrap();
    drop(log);
    let mut file = fs::OpenOptions::new().append(true).open(&path).unwrap();
    writeln!(file, "Authorization: Bearer {CANARY}").unwrap();
    writeln!(file, "{{\"v\":1,\"token\":\"{CANARY}\"}}").unwrap();
    drop(file);
    let log = open(&path);
    log.record(&decision("b", AuditDecision::Allow)).unwrap();
    drop(log);
    for args in [&[][..], &["--json"][..]] {
        let (code, stdout, stderr) = tail(&path, args);
        assert_eq!(code, 0);
        assert!(
            stdout.contains("/repos/a") && stdout.contains("/repos/b"),
            "{stdout}"
        );
        assert!(
            stderr.contains("skipped line 2 of") && stderr.contains("[not_json]"),
            "{stderr}"
        );
        assert!(
            stderr.contains("skipped line 3 of") && stderr.contains("[unknown_field]"),
            "{stderr}"
        );
    }
}

/// Issue 23: nothing recorded yet (a fresh home, or a log just rotated with no broker to start
/// the next file) is an empty table and exit 0, with a note on stderr; `--json` prints nothing.
#[test]
fn issue_23_a_missing_log_is_an_empty_table() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.log");
    let header = "TIME  AGENT  METHOD  HOST  PATH  TOOL  ALIASES  DECISION  RULE  OUTCOME  STATUS  DURATION  ID\n";
    let (code, stdout, stderr) = tail(&path, &[]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout, header);
    assert!(stderr.contains("no audit log at"), "{stderr}");
    let (code, stdout, _) = tail(&path, &["--json"]);
    assert_eq!((code, stdout.as_str()), (0, ""));

    let log = open(&path);
    log.record(&decision("gone", AuditDecision::Allow)).unwrap();
    drop(log);
    let rotated = mint(&path).args(["audit", "rotate"]).output().unwrap();
    assert!(rotated.status.success(), "{rotated:?}");
    assert!(!path.exists());
    let (code, stdout, stderr) = tail(&path, &[]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout, header);

    // Something at the path that is not a readable log is still an error.
    fs::create_dir(&path).unwrap();
    let (code, stdout, stderr) = tail(&path, &[]);
    assert_eq!(code, 2);
    assert!(stdout.is_empty());
    assert!(stderr.contains("cannot read audit log"), "{stderr}");
}

/// Issue 23: rows printed while following stay under the header printed first, even a row with
/// a host and a path wider than any before (cut with `…`; `--json` has them whole); the request
/// id is the last column.
#[test]
fn issue_23_follow_rows_stay_aligned_with_the_header() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.log");
    let follower = Follower::start(&path, &[]);
    let header = follower.wait_for("DURATION").pop().unwrap();
    let log = open(&path);
    let mut wide = decision("wide", AuditDecision::Allow);
    wide.host = Some(Host::new(format!("{}.example.com", "h".repeat(60))).unwrap());
    wide.path = Some(UrlPath::new(format!("/repos/wide/{}", "p".repeat(80))).unwrap());
    log.record(&wide).unwrap();
    log.record(&outcome("wide", Outcome::Completed, 200, 7))
        .unwrap();
    log.record(&decision("short", AuditDecision::Allow))
        .unwrap();
    log.record(&outcome("short", Outcome::Completed, 200, 1))
        .unwrap();
    let mut rows = follower.wait_for("/repos/wide");
    rows.extend(follower.wait_for("/repos/short"));
    let starts: Vec<usize> = header
        .char_indices()
        .filter(|&(at, c)| c != ' ' && (at == 0 || header[..at].ends_with(' ')))
        .map(|(at, _)| header[..at].chars().count())
        .collect();
    assert_eq!(starts.len(), 13, "{header}");
    for row in rows.iter().filter(|row| row.contains("/repos/")) {
        let chars: Vec<char> = row.chars().collect();
        for &start in &starts[1..] {
            assert!(
                chars.get(start - 1) == Some(&' ') && chars.get(start).is_some_and(|c| *c != ' '),
                "not under the header:\n{header}\n{row}"
            );
        }
        let id = row.split_whitespace().last().unwrap();
        assert!(id == "wide" || id == "short", "{row}");
    }
    assert!(rows.iter().any(|row| row.contains('…')), "{rows:?}");
    drop(log);
}

/// A `mint audit tail -f` process whose stdout lines arrive on a channel.
struct Follower {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Follower {
    fn start(log: &Path, args: &[&str]) -> Follower {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_mint"));
        for var in ENV_VARS {
            cmd.env_remove(var);
        }
        let mut child = cmd
            .env_remove("RUST_LOG")
            .env("MINT_AUDIT_LOG_PATH", log)
            .args(["audit", "tail", "-f"])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (send, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if send.send(line).is_err() {
                    return;
                }
            }
        });
        Follower { child, lines }
    }

    /// Waits (at most 10 s) for a line containing `needle`; returns every line seen until then.
    fn wait_for(&self, needle: &str) -> Vec<String> {
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut seen = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    let found = line.contains(needle);
                    seen.push(line);
                    if found {
                        return seen;
                    }
                }
                Err(_) => panic!("no line with {needle:?} within 10 s; saw {seen:?}"),
            }
        }
    }
}

impl Drop for Follower {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn follow_survives_rotation() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.log");
    let log = open(&path);
    log.record(&decision("before", AuditDecision::Allow))
        .unwrap();
    log.record(&outcome("before", Outcome::Completed, 200, 5))
        .unwrap();
    let follower = Follower::start(&path, &[]);
    follower.wait_for("/repos/before");

    // A request decided before the rotation and finished after it is still paired.
    log.record(&decision("spans", AuditDecision::Allow))
        .unwrap();
    log.record(&decision("old-file", AuditDecision::Deny))
        .unwrap();
    log.record(&outcome("old-file", Outcome::Denied, 403, 1))
        .unwrap();
    follower.wait_for("/repos/old-file");

    let outcome_of_rotation = rotation::rotate(&path, Duration::from_secs(5)).unwrap();
    assert!(
        matches!(outcome_of_rotation, RotateOutcome::RotatedLive { .. }),
        "{outcome_of_rotation:?}"
    );
    log.record(&outcome("spans", Outcome::Completed, 201, 70))
        .unwrap();
    log.record(&decision("new-file", AuditDecision::Allow))
        .unwrap();
    log.record(&outcome("new-file", Outcome::Completed, 200, 9))
        .unwrap();
    let seen = follower.wait_for("/repos/new-file");
    let spans = seen
        .iter()
        .find(|line| line.contains("/repos/spans"))
        .unwrap_or_else(|| panic!("{seen:?}"));
    assert!(
        spans.contains("completed") && spans.contains("201"),
        "{spans}"
    );
    assert!(dir.path().join("audit.log.1").exists());

    // Rotated again by the real command, while the follower runs.
    let status = mint(&path).args(["audit", "rotate"]).output().unwrap();
    assert!(status.status.success());
    log.record(&decision("third", AuditDecision::Allow))
        .unwrap();
    log.record(&outcome("third", Outcome::Completed, 200, 1))
        .unwrap();
    follower.wait_for("/repos/third");
    drop(log);
}

#[test]
fn follow_json_prints_each_record_as_it_arrives() {
    let dir = tempfile::tempdir().unwrap();
    let path: PathBuf = dir.path().join("audit.log");
    let log = open(&path);
    log.record(&decision("first", AuditDecision::Allow))
        .unwrap();
    let follower = Follower::start(&path, &["--json"]);
    follower.wait_for("\"id\":\"first\"");
    log.record(&decision("second", AuditDecision::Allow))
        .unwrap();
    let seen = follower.wait_for("\"id\":\"second\"");
    assert!(seen.iter().all(|line| line.starts_with("{\"v\":1,")));
    drop(log);
}
