//! A real process whose audit log cannot grow (a file size limit, `prlimit --fsize`, with
//! `SIGXFSZ` ignored so that `write(2)` fails with `EFBIG` as on a full disk) refuses every record
//! from the first one that does not fit, in every durability mode; the line cut short by the
//! limit is undone, so the file holds whole lines only, also when one `write(2)` carries a
//! deferred outcome record with the next decision; and the real `mint audit verify` finds the
//! chain intact. The writer is `src/bin/audit_fill.rs`.
//!
//! Needs `prlimit` (util-linux) and `sh`; without `prlimit` the test says so on stderr and passes
//! without checking.

#![expect(clippy::unwrap_used, clippy::panic, reason = "test helpers")]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::SystemTime;

use mint_broker::audit::verify::{VerifyOptions, verify_files};
use mint_policy::audit::{Phase, parse_record};
use mint_tests::repo_root;

/// The size limit: not a multiple of the line length, so the record that crosses it is cut
/// short by the kernel (a partial `write(2)`, then `EFBIG`).
const LIMIT: u64 = 12_345;
/// Records the writer tries after the first refusal.
const REFUSALS: u64 = 25;
/// `EFBIG`: what `write(2)` returns past `RLIMIT_FSIZE` when `SIGXFSZ` is ignored.
const EFBIG: i32 = 27;

#[test]
fn issue_5_a_full_file_refuses_records_and_keeps_whole_lines() {
    if !Command::new("prlimit")
        .arg("--version")
        .output()
        .is_ok_and(|out| out.status.success())
    {
        // `.ci/run` runs where util-linux is installed: there a missing `prlimit` is a failure.
        assert!(
            !std::env::var_os("CI").is_some_and(|v| !v.is_empty() && v != "false" && v != "0"),
            "`prlimit` is not installed, and CI must run this test"
        );
        let _ = writeln!(std::io::stderr(), "skipped: `prlimit` is not installed");
        return;
    }
    for durability in ["interval", "always", "never"] {
        for deferred in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            fill_once(&dir.path().join("audit.log"), durability, deferred);
        }
    }
}

/// Runs the writer until the limit stops it and checks what it left. With `deferred`, every
/// decision written is followed by a deferred outcome record, so a refused `write(2)` carries
/// the previous outcome and the next decision (both refused, both undone), unless the flusher
/// wrote the outcome alone first.
fn fill_once(log: &Path, durability_name: &str, deferred: bool) {
    let durability = &format!(
        "{durability_name}{}",
        if deferred { " (deferred outcomes)" } else { "" }
    );
    // `trap '' XFSZ` sets SIGXFSZ to ignored, which survives both `exec`s: the writer sees
    // EFBIG instead of being killed.
    let output = Command::new("sh")
        .arg("-c")
        .arg(r#"trap '' XFSZ; l="$1"; shift; exec prlimit --fsize="$l" -- "$@""#)
        .arg("sh")
        .arg(LIMIT.to_string())
        .arg(env!("CARGO_BIN_EXE_audit_fill"))
        .arg(log)
        .arg(durability_name)
        .arg(REFUSALS.to_string())
        .args(deferred.then_some("deferred"))
        .output()
        .unwrap();
    let stdout = String::from_utf8(output.stdout).unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "{durability}: the writer failed ({}): {stderr}",
        output.status
    );

    // The writer refused every record from the first one that did not fit, each with EFBIG.
    let done = stdout
        .lines()
        .find_map(|line| line.strip_prefix("done "))
        .unwrap_or_else(|| panic!("{durability}: no summary in {stdout:?}"));
    let written: usize = field(done, "written").parse().unwrap();
    let refused: u64 = field(done, "refused").parse().unwrap();
    let first_refused: usize = field(done, "first_refused").parse().unwrap();
    assert!(written > 10, "{durability}: only {written} records written");
    assert_eq!(refused, REFUSALS, "{durability}");
    assert_eq!(
        first_refused, written,
        "{durability}: a record was refused, then one written"
    );
    let refusals: Vec<&str> = stdout
        .lines()
        .filter(|line| line.starts_with("refused "))
        .collect();
    assert_eq!(refusals.len() as u64, REFUSALS, "{durability}");
    for line in &refusals {
        assert_eq!(
            field(line, "errno"),
            EFBIG.to_string(),
            "{durability}: {line}"
        );
    }
    assert!(
        stderr.contains("cannot write to audit log"),
        "{durability}: {stderr}"
    );

    // Whole lines only: the line the limit cut short was undone, not left behind.
    let bytes = std::fs::read(log).unwrap();
    let size = bytes.len() as u64;
    assert!(
        size < LIMIT,
        "{durability}: {size} bytes: a cut-short line was left"
    );
    assert_eq!(bytes.last(), Some(&b'\n'), "{durability}");
    let text = String::from_utf8(bytes).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let records: Vec<_> = lines
        .iter()
        .map(|line| parse_record(line).unwrap())
        .collect();
    let decisions = records
        .iter()
        .filter(|r| r.phase == Phase::Decision)
        .count();
    assert_eq!(decisions, written, "{durability}");
    if deferred {
        // Each written decision's outcome follows it, except perhaps the last one's, which was
        // refused with the next decision unless the flusher wrote it alone first.
        assert!(
            lines.len() == 2 * written - 1 || lines.len() == 2 * written,
            "{durability}: {} lines for {written} decisions",
            lines.len()
        );
        for pair in records.chunks(2) {
            if let [decision, outcome] = pair {
                assert_eq!(outcome.phase, Phase::Outcome, "{durability}");
                assert_eq!(outcome.id, decision.id, "{durability}");
            }
        }
    } else {
        assert_eq!(lines.len(), written, "{durability}");
    }
    // The next write really did not fit: the file is within one write of the limit.
    let longest = lines
        .iter()
        .map(|line| line.len() as u64 + 1)
        .max()
        .unwrap();
    let per_write = if deferred { 2 * longest } else { longest };
    assert!(
        size + per_write > LIMIT,
        "{durability}: {size} + {per_write}"
    );

    // The chain is intact, by the library and by the real `mint audit verify`.
    let report = verify_files(&[log.to_path_buf()], VerifyOptions::default()).unwrap();
    assert!(report.is_intact(), "{durability}: {:?}", report.first_break);
    assert!(report.starts_at_genesis);
    assert!(
        report.recovered.is_empty(),
        "{durability}: a torn line was left"
    );
    assert_eq!(report.records as usize, lines.len());
    let verify = Command::new(mint_binary())
        .args(["audit", "verify"])
        .arg(log)
        .env("MINT_AUDIT_LOG_PATH", log)
        .output()
        .unwrap();
    let verify_out = String::from_utf8_lossy(&verify.stdout);
    assert_eq!(
        verify.status.code(),
        Some(0),
        "{durability}: mint audit verify: {verify_out} {}",
        String::from_utf8_lossy(&verify.stderr)
    );
    assert!(
        verify_out.contains(&format!("intact: {} lines", lines.len())),
        "{durability}: {verify_out}"
    );
}

/// The value of `key=value` in a line of the writer's output.
fn field<'a>(line: &'a str, key: &str) -> &'a str {
    line.split_whitespace()
        .find_map(|word| word.strip_prefix(key)?.strip_prefix('='))
        .unwrap_or_else(|| panic!("no `{key}` in {line:?}"))
}

/// The `mint` binary of this build. Cargo offers `CARGO_BIN_EXE_mint` only to mint-broker's own
/// tests, so it is found beside the directory of this test executable (`target/<profile>/mint`),
/// where `cargo test --workspace` (or `cargo build -p mint-broker --bin mint`) puts it. Refused
/// when older than the audit sources it would check with, so a stale binary cannot pass.
fn mint_binary() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    // INVARIANT: test executables live in `target/<profile>/deps/`.
    let mint = exe.parent().unwrap().parent().unwrap().join("mint");
    let built = std::fs::metadata(&mint)
        .and_then(|meta| meta.modified())
        .unwrap_or_else(|_| {
            panic!(
                "`{}` is not built: run `cargo build -p mint-broker --bin mint`",
                mint.display()
            )
        });
    let root = repo_root();
    let mut sources = vec![
        root.join("broker/src/audit.rs"),
        root.join("broker/src/cli/audit.rs"),
        root.join("policy/src/audit.rs"),
    ];
    sources.extend(
        std::fs::read_dir(root.join("broker/src/audit"))
            .unwrap()
            .map(|entry| entry.unwrap().path()),
    );
    let newest = sources
        .iter()
        .filter_map(|path| std::fs::metadata(path).and_then(|m| m.modified()).ok())
        .max()
        .unwrap_or(SystemTime::UNIX_EPOCH);
    assert!(
        built >= newest,
        "`{}` is older than the audit sources: run `cargo build -p mint-broker --bin mint`",
        mint.display()
    );
    mint
}
