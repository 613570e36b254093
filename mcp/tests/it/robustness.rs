//! Hostile input: each case must end in a clear error or a logged, unanswered line, never in a
//! hang, a crash or unbounded memory. Every wait has a deadline (`support::DEADLINE`), and the
//! server must still answer a `ping` afterwards.

use std::fs;
use std::process::Command;

use serde_json::json;

use crate::support::{Mcp, error, example_env, home_env, payload};

/// Peak memory the server may reach in these tests. It idles at about 6 MiB; holding the 10 MiB
/// line, or a block per mebibyte of a large file, would go well past this.
const MEMORY_CEILING_KIB: u64 = 12 * 1024;

#[track_caller]
fn still_answers(mcp: &mut Mcp) {
    let pong = mcp.request(json!({"jsonrpc":"2.0","id":"alive","method":"ping"}));
    assert_eq!(pong, json!({"jsonrpc":"2.0","id":"alive","result":{}}));
}

#[test]
fn a_ten_mib_line_is_skipped_without_being_buffered() {
    let mut mcp = Mcp::start(&example_env());
    let mut line = br#"{"jsonrpc":"2.0","id":1,"method":"ping","params":{"pad":""#.to_vec();
    line.resize(10 * 1024 * 1024, b'a');
    line.extend_from_slice(b"\"}}");
    assert!(
        mcp.exchange(&line).is_empty(),
        "an oversized line got an answer"
    );
    assert!(
        mcp.peak_memory_kib() < MEMORY_CEILING_KIB,
        "{} KiB",
        mcp.peak_memory_kib()
    );
    still_answers(&mut mcp);
    let finished = mcp.finish();
    assert!(finished.status.success());
    assert!(
        finished
            .stderr
            .contains("Ignored a line over the message limit"),
        "{}",
        finished.stderr
    );
}

#[test]
fn a_line_just_under_the_limit_is_answered() {
    let mut mcp = Mcp::start(&example_env());
    let mut line = br#"{"jsonrpc":"2.0","id":1,"method":"ping","params":{"pad":""#.to_vec();
    line.resize(mint_mcp::MAX_MESSAGE_BYTES - 3, b'a');
    line.extend_from_slice(b"\"}}");
    assert_eq!(line.len(), mint_mcp::MAX_MESSAGE_BYTES);
    let replies = mcp.exchange(&line);
    assert_eq!(replies, [json!({"jsonrpc":"2.0","id":1,"result":{}})]);
}

#[test]
fn an_oversized_last_line_then_end_of_input_exits_cleanly() {
    let mut mcp = Mcp::start(&example_env());
    mcp.send_raw(vec![b'{'; 3 * 1024 * 1024]);
    let finished = mcp.finish();
    assert!(finished.status.success(), "{}", finished.stderr);
    assert!(finished.stdout.is_empty());
}

#[test]
fn invalid_utf8_is_logged_and_not_answered() {
    let mut mcp = Mcp::start(&example_env());
    assert!(
        mcp.exchange(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"p\xffng\"}")
            .is_empty()
    );
    assert!(mcp.exchange(b"\xc3\x28\xa0\xa1").is_empty());
    still_answers(&mut mcp);
    let finished = mcp.finish();
    assert!(
        finished.stderr.contains("not valid UTF-8"),
        "{}",
        finished.stderr
    );
}

#[test]
fn deep_nesting_is_refused_without_a_crash() {
    let mut mcp = Mcp::start(&example_env());
    assert!(mcp.exchange("[".repeat(100_000).as_bytes()).is_empty());
    assert!(
        mcp.exchange("{\"a\":".repeat(100_000).as_bytes())
            .is_empty()
    );
    let deep_params = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"ping","params":{{"a":{}1{}}}}}"#,
        "[".repeat(500),
        "]".repeat(500)
    );
    assert!(mcp.exchange(deep_params.as_bytes()).is_empty());
    // Nesting within serde_json's limit is an ordinary request.
    let shallow = format!(
        r#"{{"jsonrpc":"2.0","id":2,"method":"ping","params":{{"a":{}1{}}}}}"#,
        "[".repeat(100),
        "]".repeat(100)
    );
    assert_eq!(mcp.exchange(shallow.as_bytes()).len(), 1);
    still_answers(&mut mcp);
    assert!(mcp.finish().status.success());
}

#[test]
fn a_huge_n_is_capped() {
    let mut mcp = Mcp::start(&example_env());
    for n in [json!(1_000_000_000_u64), json!(u64::MAX), json!(1e300)] {
        let tail = payload(&mcp.call("audit_tail", json!({ "n": n })));
        assert_eq!(tail["count"], 15, "{n}");
    }
    assert!(mcp.peak_memory_kib() < MEMORY_CEILING_KIB);
    // A number too large for any integer type is not JSON serde_json reads: no answer.
    assert!(mcp.exchange(br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"audit_tail","arguments":{"n":1e999}}}"#).is_empty());
    still_answers(&mut mcp);
}

#[test]
fn a_huge_audit_log_is_read_from_its_end_only() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("audit.log");
    let record = fs::read_to_string(crate::support::repo_root().join("examples/audit.log"))
        .unwrap()
        .lines()
        .next()
        .unwrap()
        .to_owned();
    // A record (so the file is recognisably a log), a sparse stretch of 64 GiB of zero bytes,
    // then one more record: only the first line and the end are read.
    fs::write(&log, format!("{record}\n")).unwrap();
    let file = fs::OpenOptions::new().write(true).open(&log).unwrap();
    file.set_len(64 << 30).unwrap();
    drop(file);
    let mut file = fs::OpenOptions::new().append(true).open(&log).unwrap();
    std::io::Write::write_all(&mut file, format!("\n{record}\n").as_bytes()).unwrap();
    drop(file);

    let mut mcp = Mcp::start(&home_env(dir.path()));
    let started = std::time::Instant::now();
    let tail = payload(&mcp.call("audit_tail", json!({"n": 5, "path": log})));
    assert_eq!(tail["count"], 1);
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
    assert!(mcp.peak_memory_kib() < MEMORY_CEILING_KIB);
}

#[test]
fn a_trailing_carriage_return_is_ignored() {
    let mut mcp = Mcp::start(&example_env());
    let replies = mcp.exchange(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\r");
    assert_eq!(replies, [json!({"jsonrpc":"2.0","id":1,"result":{}})]);
    assert!(mcp.exchange(b"\r").is_empty());
}

#[test]
fn directories_and_fifos_are_errors_not_hangs() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("pipe.yaml");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let mut mcp = Mcp::start(&home_env(dir.path()));
    for (tool, key) in [
        ("policy_check", "file"),
        ("alias_list", "path"),
        ("audit_tail", "path"),
    ] {
        let response = mcp.call(tool, json!({ key: fifo }));
        assert_eq!(error(&response, -32603)["data"]["kind"], "unreadable");
        let response = mcp.call(tool, json!({ key: dir.path() }));
        assert_eq!(error(&response, -32603)["data"]["kind"], "unreadable");
    }
    for device in ["/dev/zero", "/dev/stdin", "/dev/tty", "/dev/urandom"] {
        let response = mcp.call("audit_tail", json!({ "path": device }));
        error(&response, -32603);
    }
    still_answers(&mut mcp);
}

#[test]
fn a_batch_array_is_one_invalid_request_error() {
    let mut mcp = Mcp::start(&example_env());
    let replies = mcp.exchange(
        br#"[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":2,"method":"ping"}]"#,
    );
    assert_eq!(replies.len(), 1);
    assert_eq!(replies[0]["id"], serde_json::Value::Null);
    error(&replies[0], -32600);
    assert_eq!(mcp.exchange(b"[]").len(), 1);
}

#[test]
fn end_of_input_exits_zero() {
    let mcp = Mcp::start(&example_env());
    let finished = mcp.finish();
    assert_eq!(finished.status.code(), Some(0));
    assert!(finished.stdout.is_empty());

    // A last request without a line feed is still answered before the exit.
    let mut mcp = Mcp::start(&example_env());
    mcp.send_raw(br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#.to_vec());
    let finished = mcp.finish();
    assert_eq!(finished.status.code(), Some(0));
    assert_eq!(finished.stdout, [r#"{"jsonrpc":"2.0","id":1,"result":{}}"#]);
}

#[test]
fn arguments_on_the_command_line_are_refused() {
    for arguments in [
        &["--port", "1"][..],
        &["serve"],
        &["--help", "--version"],
        &["--HELP"],
    ] {
        let output = Command::new(env!("CARGO_BIN_EXE_mint-mcp"))
            .args(arguments)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(2), "{arguments:?}");
        assert!(output.stdout.is_empty(), "{arguments:?}");
        assert!(
            String::from_utf8_lossy(&output.stderr).contains("--help"),
            "{output:?}"
        );
    }
}

/// Issue 23: `--help` and `--version` print on stdout and exit 0 without serving (stdin is
/// never read).
#[test]
fn issue_23_help_and_version_print_and_exit_0() {
    for argument in ["--help", "-h"] {
        let output = Command::new(env!("CARGO_BIN_EXE_mint-mcp"))
            .arg(argument)
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(0), "{output:?}");
        let text = String::from_utf8(output.stdout).unwrap();
        assert!(text.starts_with("mint-mcp: "), "{text}");
        for needle in [
            "Usage: mint-mcp",
            "mint_usage",
            "MINT_AUDIT_LOG_PATH",
            "RUST_LOG",
        ] {
            assert!(text.contains(needle), "missing {needle} in {text}");
        }
    }
    for argument in ["--version", "-V"] {
        let output = Command::new(env!("CARGO_BIN_EXE_mint-mcp"))
            .arg(argument)
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(0), "{output:?}");
        assert_eq!(
            String::from_utf8(output.stdout).unwrap(),
            format!("mint-mcp {}\n", env!("CARGO_PKG_VERSION"))
        );
    }
}

#[test]
fn many_requests_in_one_write_are_answered_in_order() {
    let mut mcp = Mcp::start(&example_env());
    let mut input = String::new();
    for id in 0..500 {
        input.push_str(&format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"tools/list\"}}\n"
        ));
    }
    mcp.send_raw(input.into_bytes());
    for id in 0..500 {
        let reply = mcp.recv();
        assert_eq!(reply["id"], id);
        assert_eq!(reply["result"]["tools"].as_array().unwrap().len(), 4);
    }
}

#[test]
fn deeply_nested_yaml_files_are_findings_not_crashes() {
    let dir = tempfile::tempdir().unwrap();
    let flow = dir.path().join("flow.yaml");
    fs::write(
        &flow,
        format!("version: 1\nrules: {}\n", "[".repeat(200_000)),
    )
    .unwrap();
    let block = dir.path().join("block.yaml");
    let mut text = String::from("aliases:\n");
    for depth in 0..5_000 {
        text.push_str(&" ".repeat(depth * 2 + 2));
        text.push_str("- \n");
    }
    fs::write(&block, text).unwrap();
    let mut mcp = Mcp::start(&home_env(dir.path()));
    for (tool, key, path) in [
        ("policy_check", "file", &flow),
        ("alias_list", "path", &flow),
        ("policy_check", "file", &block),
        ("alias_list", "path", &block),
    ] {
        // Too deep to load, so not recognisably a declaration: the uniform answer.
        let response = mcp.call(tool, json!({ key: path }));
        assert_eq!(
            error(&response, -32603)["data"]["kind"],
            "unreadable",
            "{tool} {}: {response}",
            path.display()
        );
    }
    still_answers(&mut mcp);
}
