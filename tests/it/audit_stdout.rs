//! Issue 18: `mint serve --audit-stdout` copies every audit record, as the chained file holds
//! it, as one JSON line on stdout tagged with the broker's id; the file is still written first,
//! and a closed stdout neither fails nor holds up a request: what it lost is recorded in the
//! chain. Through the real binary, with a canary secret absent from both streams.

#![allow(clippy::unwrap_used, reason = "tests")]

use mint_tests::lab::{self, Lab, LabConfig};

const CANARY: &str = "canary-audit-stdout-Q7w2";

fn lab(serve_args: &'static [&'static str]) -> Lab {
    Lab::start(
        LabConfig {
            secrets: &[("echo", CANARY)],
            serve_args,
            ..LabConfig::default()
        },
        |port| lab::allow("echo-read", "echo", port, "GET", ""),
    )
}

fn requests(lab: &Lab) -> String {
    let mut seen = String::new();
    for (method, expected) in [("GET", 200), ("DELETE", 403), ("GET", 200)] {
        let response = lab.curl(&[
            "-X",
            method,
            "-H",
            "Authorization: Bearer {{mint:echo}}",
            &lab.echo_url("/echo/audit-stdout"),
        ]);
        assert_eq!(response.status, expected, "{}", response.everything());
        seen.push_str(&response.everything());
    }
    seen
}

#[test]
fn issue_18_audit_stdout_lines_are_the_files_records_tagged_with_the_broker() {
    let mut lab = lab(&["--audit-stdout", "--broker-id", "edge-1"]);
    let seen = requests(&lab);
    lab.broker.stop();
    let file = lab.broker.audit_text();
    let stdout = lab.broker.stdout_text();
    assert!(!file.is_empty());
    // stdout carries audit lines only (`listening on` went to stderr).
    let untagged: Vec<String> = stdout
        .lines()
        .map(|line| {
            let record: serde_json::Value = serde_json::from_str(line).unwrap();
            assert_eq!(record["broker"], "edge-1", "{line}");
            line.strip_prefix(r#"{"broker":"edge-1","#)
                .map(|rest| format!("{{{rest}"))
                .unwrap_or_else(|| panic!("the broker is not the first member: {line}"))
        })
        .collect();
    let lines: Vec<&str> = file.lines().collect();
    assert_eq!(untagged, lines, "stdout:\n{stdout}\nfile:\n{file}");
    // Decisions and outcomes of the three requests, each in the copy.
    assert!(
        stdout.matches(r#""phase":"decision""#).count() >= 3,
        "{stdout}"
    );
    assert!(lab.broker.stderr().contains("listening on http://"));
    lab.assert_clean(format!("{seen}{stdout}"));
    let verify = lab.home.mint().args(["audit", "verify"]).output().unwrap();
    assert!(verify.status.success(), "{verify:?}");
}

#[test]
fn issue_18_a_closed_stdout_fails_no_request_and_the_loss_is_in_the_chain() {
    // The lab's broker gives way to one whose stdout is a pipe nobody reads.
    let mut lab = lab(&[]);
    lab.broker.stop();
    lab.broker = lab.home.serve_with_closed_stdout(&lab.peer.ca_file, &[]);
    let seen = requests(&lab);
    let seen = seen + &requests(&lab);
    // Within a flusher tick, the chain says the copy stopped and how many records it lost.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let closed = loop {
        if let Some(record) = lab
            .broker
            .audit_records()
            .into_iter()
            .find(|r| r["reason"] == "audit_stdout_closed")
        {
            break record;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no audit_stdout_closed event: {}",
            lab.broker.audit_text()
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert_eq!(closed["phase"], "event");
    assert!(closed["dropped"].as_u64().unwrap() >= 1, "{closed}");
    assert_eq!(
        lab.broker
            .audit_records()
            .iter()
            .filter(|r| r["reason"] == "audit_stdout_closed")
            .count(),
        1
    );
    // Still serving.
    let more = requests(&lab);
    let stderr = lab.broker.stderr();
    assert!(stderr.contains("the copy stopped"), "{stderr}");
    lab.assert_clean(format!("{seen}{more}"));
    let verify = lab.home.mint().args(["audit", "verify"]).output().unwrap();
    assert!(verify.status.success(), "{verify:?}");
}
