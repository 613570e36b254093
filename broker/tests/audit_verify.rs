//! `mint audit verify` through the real binary: an intact log (and its rotated files) exits 0;
//! an edited, deleted, reordered, truncated or unparseable line exits 1 naming the line and the
//! kind; an unreadable file exits 2. No byte of a broken line is ever echoed.

#![expect(clippy::unwrap_used, reason = "test helpers")]

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use assert_cmd::Command;
use mint_broker::audit::{AuditConfig, AuditLog, Durability, now};
use mint_policy::audit::{
    AuditDecision, AuditRecord, ChainHash, HttpStatus, Outcome, RequestId, UrlPath,
};

const ENV_VARS: &[&str] = &[
    "MINT_HOME",
    "MINT_ALIASES_PATH",
    "MINT_POLICY_PATH",
    "MINT_AUDIT_LOG_PATH",
    "MINT_CAPABILITIES_PATH",
    "MINT_LISTEN",
];

/// A canary that must never be echoed.
const CANARY: &str = "CANARY-7f3a-never-echo";

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

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

fn run(mut cmd: Command) -> Run {
    let output = cmd.output().unwrap();
    Run {
        code: output.status.code().unwrap(),
        stdout: String::from_utf8(output.stdout).unwrap(),
        stderr: String::from_utf8(output.stderr).unwrap(),
    }
}

fn verify(log: &Path, files: &[&Path]) -> Run {
    let mut cmd = mint(log);
    cmd.args(["audit", "verify"]).args(files);
    let run = run(cmd);
    assert!(!run.stdout.contains(CANARY) && !run.stderr.contains(CANARY));
    run
}

/// Writes `requests` decision/outcome pairs, rotating at `rotate_bytes`.
fn write_log(dir: &Path, requests: usize, rotate_bytes: Option<u64>) -> PathBuf {
    let path = dir.join("audit.log");
    let log = AuditLog::open(
        &path,
        AuditConfig {
            durability: Durability::Never,
            rotate_bytes,
        },
    )
    .unwrap();
    for n in 0..requests {
        let id = RequestId::new(format!("req-{n}")).unwrap();
        let mut decision = AuditRecord::decision(
            now(),
            id.clone(),
            AuditDecision::Allow,
            ChainHash::genesis(),
        );
        decision.path = Some(UrlPath::new(format!("/items/{n}")).unwrap());
        log.record(&decision).unwrap();
        let mut outcome = AuditRecord::outcome(now(), id, Outcome::Completed, ChainHash::genesis());
        outcome.status = Some(HttpStatus::new(200).unwrap());
        log.record(&outcome).unwrap();
    }
    path
}

fn read_lines(path: &Path) -> Vec<String> {
    fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

fn write_lines(path: &Path, lines: &[String]) {
    let mut text = lines.join("\n");
    text.push('\n');
    fs::write(path, text).unwrap();
}

#[test]
fn an_intact_log_exits_0() {
    let dir = tempfile::tempdir().unwrap();
    let log = write_log(dir.path(), 5, None);
    let run = verify(&log, &[]);
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    // Issue 23: one file is `1 file`, not `1 files`.
    assert!(
        run.stdout
            .contains("intact: 10 lines, 10 records in 1 file;"),
        "{}",
        run.stdout
    );
    assert!(run.stdout.contains("starts at genesis"));
}

#[test]
fn rotated_files_are_verified_in_order_by_default() {
    let dir = tempfile::tempdir().unwrap();
    let log = write_log(dir.path(), 20, Some(1500));
    let rotated = dir.path().join("audit.log.1");
    assert!(rotated.exists());
    let run = verify(&log, &[]);
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    assert!(run.stdout.contains("audit.log.1: "), "{}", run.stdout);
    assert!(run.stdout.contains("intact: 40 lines"), "{}", run.stdout);

    // The current file alone starts mid-chain: only `--partial` accepts that.
    let run = verify(&log, &[&log]);
    assert_eq!(run.code, 1, "{}", run.stdout);
    assert!(
        run.stdout.contains("audit.log:1: missing_start"),
        "{}",
        run.stdout
    );
    let mut cmd = mint(&log);
    cmd.args(["audit", "verify", "--partial"]).arg(&log);
    let run = run_checked(cmd);
    assert_eq!(run.code, 0, "{}", run.stdout);
    assert!(run.stdout.contains("starts mid-chain"));

    // Deleting the last line of a rotated file breaks the next file's first link.
    let mut lines = read_lines(&rotated);
    lines.pop();
    write_lines(&rotated, &lines);
    let run = verify(&log, &[]);
    assert_eq!(run.code, 1);
    assert!(
        run.stdout.contains(&format!(
            "audit.log.2:1: edited_or_deleted: `prev` is not the hash of {}:{}",
            rotated.display(),
            lines.len()
        )),
        "{}",
        run.stdout
    );
}

fn run_checked(cmd: Command) -> Run {
    let run = run(cmd);
    assert!(!run.stdout.contains(CANARY) && !run.stderr.contains(CANARY));
    run
}

#[test]
fn an_edited_line_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let log = write_log(dir.path(), 5, None);
    let mut lines = read_lines(&log);
    // Line 5 still parses, but now says something else.
    lines[4] = lines[4].replace("/items/2", "/items/9");
    write_lines(&log, &lines);
    let run = verify(&log, &[]);
    assert_eq!(run.code, 1);
    assert!(
        run.stdout.contains(&format!(
            "broken: {path}:6: edited_or_deleted: `prev` is not the hash of {path}:5: that line \
             was edited",
            path = log.display()
        )),
        "{}",
        run.stdout
    );
}

#[test]
fn a_deleted_line_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let log = write_log(dir.path(), 5, None);
    let mut lines = read_lines(&log);
    lines.remove(3);
    write_lines(&log, &lines);
    let run = verify(&log, &[]);
    assert_eq!(run.code, 1);
    assert!(
        run.stdout.contains(&format!(
            "broken: {path}:4: edited_or_deleted: `prev` is not the hash of {path}:3",
            path = log.display()
        )),
        "{}",
        run.stdout
    );
    // Deleting the first line leaves a log that no longer starts at genesis.
    let mut lines = read_lines(&log);
    lines.remove(0);
    write_lines(&log, &lines);
    let run = verify(&log, &[]);
    assert_eq!(run.code, 1);
    assert!(
        run.stdout
            .contains(&format!("broken: {}:1: missing_start", log.display())),
        "{}",
        run.stdout
    );
}

#[test]
fn reordered_lines_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let log = write_log(dir.path(), 5, None);
    let mut lines = read_lines(&log);
    lines.swap(5, 6);
    write_lines(&log, &lines);
    let run = verify(&log, &[]);
    assert_eq!(run.code, 1);
    assert!(
        run.stdout.contains(&format!(
            "broken: {path}:6: reordered: `prev` is the hash of {path}:7",
            path = log.display()
        )),
        "{}",
        run.stdout
    );
}

#[test]
fn a_truncated_log_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let log = write_log(dir.path(), 3, None);
    let bytes = fs::read(&log).unwrap();
    fs::write(&log, &bytes[..bytes.len() - 40]).unwrap();
    let run = verify(&log, &[]);
    assert_eq!(run.code, 1);
    assert!(
        run.stdout
            .contains(&format!("broken: {}:6: truncated", log.display())),
        "{}",
        run.stdout
    );
}

#[test]
fn an_unparseable_line_is_named_never_echoed() {
    let dir = tempfile::tempdir().unwrap();
    let log = write_log(dir.path(), 3, None);
    let mut lines = read_lines(&log);
    lines.insert(2, format!("{{\"v\":1,\"secret\":\"{CANARY}\"}}"));
    let cut = lines[1].len() - 10;
    lines[1].truncate(cut);
    lines[1].push_str(CANARY);
    write_lines(&log, &lines);
    let run = verify(&log, &[]);
    assert_eq!(run.code, 1);
    assert!(
        run.stdout
            .contains(&format!("broken: {}:2: unparseable", log.display())),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains("3 broken lines in all"),
        "{}",
        run.stdout
    );
}

#[test]
fn unreadable_files_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("audit.log");
    let run = verify(&log, &[]);
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("no audit log at"), "{}", run.stderr);
    let run = verify(&log, &[&dir.path().join("missing.log")]);
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("cannot read"), "{}", run.stderr);
    let run = verify(&log, &[dir.path()]);
    assert_eq!(run.code, 2);
}

#[test]
fn decisions_without_outcome_read_as_unknown() {
    let dir = tempfile::tempdir().unwrap();
    let log = write_log(dir.path(), 2, None);
    let writer = AuditLog::open(
        &log,
        AuditConfig {
            durability: Durability::Never,
            rotate_bytes: None,
        },
    )
    .unwrap();
    writer
        .record(&AuditRecord::decision(
            now(),
            RequestId::new("in-flight").unwrap(),
            AuditDecision::Allow,
            ChainHash::genesis(),
        ))
        .unwrap();
    drop(writer);
    let run = verify(&log, &[]);
    assert_eq!(run.code, 0);
    assert!(
        run.stdout
            .contains("unknown: 1 decision without an outcome"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout
            .contains(&format!("{}:5 id in-flight", log.display())),
        "{}",
        run.stdout
    );
}

#[test]
fn rotate_command_renames_and_verify_follows() {
    let dir = tempfile::tempdir().unwrap();
    let log = write_log(dir.path(), 2, None);
    let mut cmd = mint(&log);
    cmd.args(["audit", "rotate"]);
    let run = run_checked(cmd);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stdout.contains("audit.log.1"), "{}", run.stdout);
    assert!(!log.exists());
    write_log(dir.path(), 1, None);
    let run = verify(&log, &[]);
    assert_eq!(run.code, 0, "{}", run.stdout);
    assert!(run.stdout.contains("intact: 6 lines, 6 records in 2 files"));
    let mut cmd = mint(&log);
    cmd.args(["audit", "rotate"]);
    assert!(run_checked(cmd).stdout.contains("audit.log.2"));
    let mut cmd = mint(&log);
    cmd.args(["audit", "rotate"]);
    assert!(run_checked(cmd).stdout.contains("nothing to rotate"));
}
