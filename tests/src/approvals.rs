//! The operator's side of the approvals tests: `mint approvals` run against a home's broker, as
//! the operator would run it from another shell.

use std::process::Output;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::broker::MintHome;

/// How long a wait for requests to be held may last before it is a failure: generous, since the
/// machine may be loaded; the wait polls and ends as soon as the condition holds.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// Runs `mint approvals ARGS` against `home`'s broker.
#[track_caller]
pub fn approvals(home: &MintHome, args: &[&str]) -> Output {
    home.mint().arg("approvals").args(args).output().unwrap()
}

/// Everything a command printed, stdout then stderr.
pub fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// `mint approvals ARGS`, which must succeed; returns what it printed.
#[track_caller]
pub fn decide(home: &MintHome, args: &[&str]) -> String {
    let output = approvals(home, args);
    assert!(output.status.success(), "{args:?}: {}", text(&output));
    text(&output)
}

/// `mint approvals list --json`.
#[track_caller]
pub fn listed(home: &MintHome) -> Value {
    let output = approvals(home, &["list", "--json"]);
    assert!(output.status.success(), "{}", text(&output));
    serde_json::from_slice(&output.stdout).unwrap()
}

/// Waits (bounded by [`PATIENCE`]) until `n` requests wait for approval, and returns them,
/// oldest first.
#[track_caller]
pub fn wait_pending(home: &MintHome, n: usize) -> Vec<Value> {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let pending = listed(home)["pending"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if pending.len() == n {
            return pending;
        }
        assert!(
            Instant::now() < deadline,
            "expected {n} waiting, have {}: {pending:?}",
            pending.len()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The `id` of a listed approval.
#[track_caller]
pub fn id_of(view: &Value) -> String {
    view["id"].as_str().unwrap().to_owned()
}
