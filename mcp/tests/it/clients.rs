//! Real third-party MCP clients against the real binary: the official Python SDK (PyPI `mcp`,
//! from the venv `.ci/run` creates at `.venv`) and the MCP Inspector's CLI mode
//! (`@modelcontextprotocol/inspector`, installed by `.ci/run` under `tests/node`).
//!
//! When a client is not installed the test is skipped with a note, unless `CI` is set or
//! `MINT_REQUIRE_MCP_CLIENTS=1`, where a missing client fails it.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::repo_root;

/// Whether a missing client fails the test rather than skipping it.
fn clients_required() -> bool {
    std::env::var_os("CI").is_some_and(|v| !v.is_empty() && v != "false" && v != "0")
        || std::env::var_os("MINT_REQUIRE_MCP_CLIENTS").is_some_and(|v| v == "1")
}

/// `path` when it exists; else `None` after a note, or a failure when clients are required.
#[track_caller]
#[expect(clippy::print_stderr, reason = "the one note a skipped test leaves")]
fn installed(path: PathBuf, what: &str) -> Option<PathBuf> {
    if path.exists() {
        return Some(path);
    }
    assert!(
        !clients_required(),
        "{what} is not installed at {} (run the setup_mcp_clients step of .ci/run)",
        path.display()
    );
    eprintln!(
        "note: skipping: {what} is not installed at {}; `bash .ci/run` installs it \
         (set MINT_REQUIRE_MCP_CLIENTS=1 to make this a failure)",
        path.display()
    );
    None
}

/// Runs `command` to completion, killing it after `limit`.
#[track_caller]
fn run(mut command: Command, limit: Duration) -> Output {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the client");
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > limit {
            let _ = child.kill();
            let output = child.wait_with_output().unwrap();
            panic!(
                "the client did not finish within {limit:?}; stderr:\n{}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

fn server() -> &'static str {
    env!("CARGO_BIN_EXE_mint-mcp")
}

#[test]
fn python_sdk_client() {
    let Some(python) = installed(
        repo_root().join(".venv/bin/python"),
        "the Python MCP SDK venv",
    ) else {
        return;
    };
    let mut command = Command::new(python);
    command
        .current_dir(repo_root())
        .arg(repo_root().join("tests/python/mcp_stdio_client.py"))
        .arg("--server")
        .arg(server())
        .arg("--repo")
        .arg(repo_root());
    let output = run(command, Duration::from_secs(120));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the Python client failed:\n{stderr}"
    );
    assert!(
        stderr.contains("python mcp client: all checks passed"),
        "{stderr}"
    );
}

/// Runs the Inspector CLI against the server with `args` and returns its JSON output.
#[track_caller]
fn inspector(bin: &Path, args: &[&str]) -> Value {
    let mut command = Command::new(bin);
    command
        .current_dir(repo_root())
        // The Inspector passes its own environment to the server, plus `-e` variables.
        .env_remove("MINT_HOME")
        .env_remove("MINT_CAPABILITIES_PATH")
        .args(["--cli", server()])
        .args([
            "-e",
            "MINT_HOME=mcp/tests/fixtures/home",
            "-e",
            "MINT_ALIASES_PATH=examples/aliases.yaml",
            "-e",
            "MINT_AUDIT_LOG_PATH=examples/audit.log",
        ])
        .args(args);
    let output = run(command, Duration::from_secs(120));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "the Inspector failed on {args:?}:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"))
}

#[test]
fn mcp_inspector_cli() {
    let Some(bin) = installed(
        repo_root().join("tests/node/node_modules/.bin/mcp-inspector"),
        "the MCP Inspector",
    ) else {
        return;
    };
    let listed = inspector(&bin, &["--method", "tools/list"]);
    let names: Vec<&str> = listed["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|tool| tool["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["alias_list", "policy_check", "audit_tail", "mint_usage"]
    );
    assert_eq!(listed["tools"][0]["annotations"]["readOnlyHint"], true);

    let checked = inspector(
        &bin,
        &[
            "--method",
            "tools/call",
            "--tool-name",
            "policy_check",
            "--tool-arg",
            "file=examples/policy.yaml",
        ],
    );
    let text = checked["content"][0]["text"].as_str().unwrap();
    let report: Value = serde_json::from_str(text).unwrap();
    assert_eq!(report["file"], "examples/policy.yaml");
    assert_eq!(report["valid"], true);
    assert_eq!(report["rule_count"], 10);

    let tail = inspector(
        &bin,
        &[
            "--method",
            "tools/call",
            "--tool-name",
            "audit_tail",
            "--tool-arg",
            "n=3",
        ],
    );
    let text = tail["content"][0]["text"].as_str().unwrap();
    let events: Value = serde_json::from_str(text).unwrap();
    assert_eq!(events["count"], 3);
}
