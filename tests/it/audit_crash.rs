//! A crash (SIGKILL) of a process writing the audit log under load leaves whole lines only and
//! an intact chain, across the files it rotated; decisions whose outcome never came read as
//! `unknown`; and the next writer continues the chain. The load writer is a real process
//! (`src/bin/audit_load.rs`), killed mid-write in every durability mode.

#![expect(clippy::unwrap_used, reason = "test helpers")]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use mint_broker::audit::rotation::log_set;
use mint_broker::audit::verify::{BreakKind, VerifyOptions, verify_files};
use mint_broker::audit::{AuditConfig, AuditLog, TORN_LINE_REASON};
use mint_policy::audit::{ReasonCode, parse_record};

#[test]
fn issue_5_kill_9_leaves_whole_lines_and_an_intact_chain() {
    for (durability, threads, run_ms) in
        [("interval", 4, 400), ("never", 4, 300), ("always", 8, 400)]
    {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("audit.log");
        crash_once(&log, durability, threads, run_ms);
    }
}

fn crash_once(log: &Path, durability: &str, threads: usize, run_ms: u64) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_audit_load"))
        .arg(log)
        .args([durability, &threads.to_string(), "262144"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut ready = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut ready)
        .unwrap();
    assert_eq!(
        ready.trim(),
        "ready",
        "{durability}: the load writer did not start"
    );
    std::thread::sleep(Duration::from_millis(run_ms));
    // `Child::kill` sends SIGKILL: no destructor, no flush, no final fsync runs.
    child.kill().unwrap();
    let status = child.wait().unwrap();
    assert!(
        !status.success(),
        "{durability}: the writer ended before it was killed"
    );

    let files = log_set(log).unwrap();
    assert!(!files.is_empty());
    let report = verify_files(&files, VerifyOptions::default()).unwrap();
    assert!(
        report.records > 200,
        "{durability}: only {} records",
        report.records
    );
    match &report.first_break {
        None => {}
        // A write cut by SIGKILL between two pages of the file is the one way a line can be
        // torn: it can only be the very last line, and the next writer recovers it.
        Some(first) => {
            assert_eq!(first.kind, BreakKind::Truncated, "{durability}: {first}");
            assert_eq!(report.breaks, 1, "{durability}: {first}");
            assert_eq!(&first.at.file, files.last().unwrap());
        }
    }
    // Every line but a torn last one is a whole record.
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        let whole = text.rsplit_once('\n').map_or("", |(whole, _)| whole);
        for line in whole.lines() {
            parse_record(line).unwrap();
        }
    }
    // Some requests were cut off (and one in seven never gets an outcome): they read as unknown.
    assert!(report.pending_total > 0, "{durability}");

    // The next writer continues the chain (recovering a torn line if there was one).
    let writer = AuditLog::open(log, AuditConfig::default()).unwrap();
    writer
        .event(ReasonCode::new("broker_started").unwrap())
        .unwrap();
    drop(writer);
    let files = log_set(log).unwrap();
    let after = verify_files(&files, VerifyOptions::default()).unwrap();
    assert!(after.is_intact(), "{durability}: {:?}", after.first_break);
    assert!(after.starts_at_genesis);
    assert_eq!(
        after.recovered.len(),
        usize::from(report.first_break.is_some())
    );
    if report.first_break.is_some() {
        let text = std::fs::read_to_string(files.last().unwrap()).unwrap();
        assert!(text.contains(TORN_LINE_REASON));
    }
}
