//! `mint policy check` through the real binary: exit codes, human and JSON output, default file
//! resolution from the environment, unreadable files (FIFOs must not hang) and the promise that
//! no value from the file reaches stdout or stderr.

#![expect(clippy::unwrap_used, reason = "test helpers")]

use std::path::{Path, PathBuf};
use std::time::Duration;

use assert_cmd::Command;

const ENV_VARS: &[&str] = &[
    "MINT_HOME",
    "MINT_ALIASES_PATH",
    "MINT_POLICY_PATH",
    "MINT_AUDIT_LOG_PATH",
    "MINT_CAPABILITIES_PATH",
    "MINT_LISTEN",
];

const VALID: &str = "\
version: 1
default: deny
rules:
  - id: read
    effect: allow
    match:
      host: api.github.com
      method: GET
";

/// The `mint` binary with a clean Mint environment, a timeout, and the working directory `cwd`.
fn mint(cwd: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_mint"));
    for var in ENV_VARS {
        cmd.env_remove(var);
    }
    cmd.env_remove("RUST_LOG")
        .current_dir(cwd)
        .timeout(Duration::from_secs(30));
    cmd
}

fn repo_file(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(relative)
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

#[track_caller]
fn run(cmd: &mut Command) -> Run {
    let output = cmd.output().unwrap();
    Run {
        code: output.status.code(),
        stdout: String::from_utf8(output.stdout).unwrap(),
        stderr: String::from_utf8(output.stderr).unwrap(),
    }
}

/// Parses the final `N errors, M warnings` line.
#[track_caller]
fn counts(stdout: &str) -> (usize, usize) {
    let last = stdout.lines().last().unwrap();
    let (errors, warnings) = last.split_once(", ").unwrap();
    let n = |part: &str, noun: &str| {
        let (n, word) = part.split_once(' ').unwrap();
        assert!(word.starts_with(noun), "unexpected count line {last:?}");
        n.parse().unwrap()
    };
    (n(errors, "error"), n(warnings, "warning"))
}

#[test]
fn valid_example_exits_zero() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(mint(dir.path())
        .args(["policy", "check"])
        .arg(repo_file("examples/policy.yaml")));
    assert_eq!(out.code, Some(0), "{}{}", out.stdout, out.stderr);
    assert!(out.stdout.ends_with(" warnings\n") || out.stdout.ends_with(" warning\n"));
    let (errors, warnings) = counts(&out.stdout);
    assert_eq!(errors, 0, "{}", out.stdout);
    assert!(
        warnings >= 1,
        "the example uses legacy call_limits, which warns: {}",
        out.stdout
    );
    assert!(out.stdout.contains("warning[W002]"), "{}", out.stdout);
    assert!(out.stderr.is_empty(), "{}", out.stderr);
}

#[test]
fn invalid_fixture_exits_one_with_rustc_style_lines() {
    let dir = tempfile::tempdir().unwrap();
    let file = fixture("invalid_policy.yaml");
    let out = run(mint(dir.path()).args(["policy", "check"]).arg(&file));
    assert_eq!(out.code, Some(1), "{}{}", out.stdout, out.stderr);
    let prefix = format!("{}:", file.display());
    let error_lines: Vec<&str> = out
        .stdout
        .lines()
        .filter(|l| l.starts_with(&prefix) && l.contains(": error[E"))
        .collect();
    assert!(!error_lines.is_empty(), "{}", out.stdout);
    for line in &error_lines {
        // FILE:LINE:COL: error[E0xx]: ...
        let rest = &line[prefix.len()..];
        let mut parts = rest.splitn(3, ':');
        let line_no: usize = parts.next().unwrap().parse().unwrap();
        let col_no: usize = parts.next().unwrap().parse().unwrap();
        assert!(line_no >= 1 && col_no >= 1);
        let tail = parts.next().unwrap();
        assert!(tail.starts_with(" error[E0"), "{line}");
    }
    // The fixture's problems, each reported (not just the first).
    for code in ["E010", "E020", "E027", "E031"] {
        assert!(
            out.stdout.contains(&format!("error[{code}]")),
            "missing {code}: {}",
            out.stdout
        );
    }
    let (errors, _) = counts(&out.stdout);
    assert_eq!(errors, error_lines.len());
}

/// Approve rules: a timeout past 280 s (E060), an unknown key inside `approval` (E010) and
/// `approval` on an allow rule (E033), each at its position, in the human and the JSON report;
/// an approve rule a deny rule overrides is W003 in a valid file.
#[test]
fn approval_findings_have_codes_and_positions() {
    let dir = tempfile::tempdir().unwrap();
    let invalid = dir.path().join("approval.yaml");
    std::fs::write(
        &invalid,
        "version: 1\nrules:\n  - id: ask\n    effect: approve\n    match: { host: api.github.com, method: POST }\n    approval: { timeout: 300s }\n  - id: ask-typo\n    effect: approve\n    match: { host: api.github.com, method: PUT }\n    approval: { timout: 60s }\n  - id: read\n    effect: allow\n    match: { host: api.github.com, method: GET }\n    approval: { timeout: 60s }\n",
    )
    .unwrap();
    let out = run(mint(dir.path()).args(["policy", "check"]).arg(&invalid));
    assert_eq!(out.code, Some(1), "{}{}", out.stdout, out.stderr);
    let at = |pos: &str, code: &str| format!("{}:{pos}: error[{code}]", invalid.display());
    for line in [at("6:26", "E060"), at("10:17", "E010"), at("14:15", "E033")] {
        assert!(out.stdout.contains(&line), "missing {line}: {}", out.stdout);
    }
    assert!(
        out.stdout.contains("rule \"ask\": approval.timeout:"),
        "{}",
        out.stdout
    );
    assert_eq!(counts(&out.stdout), (3, 0));

    let json = run(mint(dir.path())
        .args(["policy", "check", "--json"])
        .arg(&invalid));
    assert_eq!(json.code, Some(1), "{}", json.stderr);
    let report: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
    let e060 = &report["errors"][0];
    assert_eq!(e060["code"], "E060", "{report}");
    assert_eq!(
        (e060["line"].as_u64(), e060["column"].as_u64()),
        (Some(6), Some(26))
    );
    assert_eq!(e060["rule_id"], "ask");
    assert_eq!(e060["path"], "approval.timeout");

    let valid = dir.path().join("shadowed.yaml");
    std::fs::write(
        &valid,
        "version: 1\nrules:\n  - id: ask-deletes\n    effect: approve\n    match: { host: api.github.com, method: DELETE }\n  - id: no-deletes\n    effect: deny\n    match: { method: DELETE }\n",
    )
    .unwrap();
    let out = run(mint(dir.path()).args(["policy", "check"]).arg(&valid));
    assert_eq!(out.code, Some(0), "{}{}", out.stdout, out.stderr);
    assert!(
        out.stdout
            .contains("3:7: warning[W003]: rule \"ask-deletes\": deny rule \"no-deletes\""),
        "{}",
        out.stdout
    );
}

#[test]
fn json_report_has_the_documented_shape() {
    let dir = tempfile::tempdir().unwrap();
    let file = fixture("invalid_policy.yaml");
    let out = run(mint(dir.path())
        .args(["policy", "check", "--json"])
        .arg(&file));
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    let keys = [
        "\"file\"",
        "\"valid\"",
        "\"rule_count\"",
        "\"legacy_call_limit_count\"",
        "\"default\"",
        "\"errors\"",
        "\"warnings\"",
    ];
    let positions: Vec<usize> = keys.iter().map(|k| out.stdout.find(k).unwrap()).collect();
    assert!(
        positions.windows(2).all(|w| w[0] < w[1]),
        "keys out of order: {}",
        out.stdout
    );

    let report: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let object = report.as_object().unwrap();
    assert_eq!(object.len(), keys.len());
    assert_eq!(report["file"], file.display().to_string());
    assert_eq!(report["valid"], false);
    assert_eq!(report["rule_count"], 3);
    assert_eq!(report["legacy_call_limit_count"], 0);
    assert_eq!(report["default"], "deny");
    let errors = report["errors"].as_array().unwrap();
    assert!(!errors.is_empty());
    let diagnostic_keys = [
        "\"code\"",
        "\"line\"",
        "\"column\"",
        "\"rule_id\"",
        "\"path\"",
        "\"message\"",
    ];
    for error in errors {
        let fields = error.as_object().unwrap();
        assert_eq!(fields.len(), diagnostic_keys.len(), "{error}");
        assert!(error["code"].as_str().unwrap().starts_with('E'));
        assert!(error["line"].as_u64().unwrap() >= 1);
        assert!(error["column"].as_u64().unwrap() >= 1);
        assert!(error["rule_id"].is_null() || error["rule_id"].is_string());
        assert!(error["path"].is_string());
        assert!(!error["message"].as_str().unwrap().is_empty());
    }
    let first_error = out.stdout.find("\"errors\"").unwrap();
    let positions: Vec<usize> = diagnostic_keys
        .iter()
        .map(|k| first_error + out.stdout[first_error..].find(k).unwrap())
        .collect();
    assert!(
        positions.windows(2).all(|w| w[0] < w[1]),
        "diagnostic keys out of order"
    );
    assert!(report["warnings"].is_array());
}

#[test]
fn json_report_of_the_example_is_valid() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(mint(dir.path())
        .args(["policy", "check", "--json"])
        .arg(repo_file("examples/policy.yaml")));
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let report: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(report["valid"], true);
    assert_eq!(report["errors"].as_array().unwrap().len(), 0);
    assert!(report["rule_count"].as_u64().unwrap() > 0);
    assert!(report["legacy_call_limit_count"].as_u64().unwrap() > 0);
}

#[test]
fn missing_file_exits_two_and_names_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("nope.yaml");
    for json in [false, true] {
        let mut cmd = mint(dir.path());
        cmd.args(["policy", "check"]).arg(&file);
        if json {
            cmd.arg("--json");
        }
        let out = run(&mut cmd);
        assert_eq!(out.code, Some(2));
        assert!(out.stdout.is_empty(), "nothing on stdout: {}", out.stdout);
        assert_eq!(
            out.stderr,
            format!(
                "mint: cannot read policy file `{}`: no such file or directory\n",
                file.display()
            )
        );
    }
}

#[test]
fn directory_exits_two() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(mint(dir.path()).args(["policy", "check"]).arg(dir.path()));
    assert_eq!(out.code, Some(2));
    assert!(out.stdout.is_empty());
    assert!(out.stderr.contains("is a directory"), "{}", out.stderr);
    assert!(out.stderr.contains(&dir.path().display().to_string()));
}

#[test]
fn fifo_exits_two_without_hanging() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("policy.yaml");
    let status = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(status.success());
    for json in [false, true] {
        let mut cmd = mint(dir.path());
        cmd.args(["policy", "check"])
            .arg(&fifo)
            .timeout(Duration::from_secs(10));
        if json {
            cmd.arg("--json");
        }
        let out = run(&mut cmd);
        assert_eq!(out.code, Some(2), "{}", out.stderr);
        assert!(out.stdout.is_empty());
        assert!(out.stderr.contains("not a regular file"), "{}", out.stderr);
    }
}

#[test]
fn oversized_file_is_reported_not_read_whole() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("big.yaml");
    let mut text = String::from("version: 1\nrules: []\n");
    text.push_str(&"# padding\n".repeat(mint_policy::MAX_FILE_BYTES / 10 + 1));
    std::fs::write(&file, text).unwrap();
    let out = run(mint(dir.path()).args(["policy", "check"]).arg(&file));
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    assert!(out.stdout.contains("error[E001]"), "{}", out.stdout);
}

#[test]
fn default_file_comes_from_mint_policy_path() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("custom.yaml");
    std::fs::write(&file, VALID).unwrap();
    // MINT_HOME points elsewhere: the file's own variable wins.
    let out = run(mint(dir.path())
        .args(["policy", "check"])
        .env("MINT_HOME", dir.path().join("home"))
        .env("MINT_POLICY_PATH", &file));
    assert_eq!(out.code, Some(0), "{}{}", out.stdout, out.stderr);
    // Issue 23: the report names the file it checked and what it holds.
    assert_eq!(
        out.stdout,
        format!(
            "{}: 1 rule, default deny\n0 errors, 0 warnings\n",
            file.display()
        )
    );

    let json = run(mint(dir.path())
        .args(["policy", "check", "--json"])
        .env("MINT_POLICY_PATH", &file));
    let report: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
    assert_eq!(report["file"], file.display().to_string());
}

#[test]
fn default_file_comes_from_mint_home() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("state");
    std::fs::create_dir(&home).unwrap();
    std::fs::write(home.join("policy.yaml"), VALID).unwrap();
    let out = run(mint(dir.path())
        .args(["policy", "check", "--json"])
        .env("MINT_HOME", &home));
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let report: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(
        report["file"],
        home.join("policy.yaml").display().to_string()
    );
}

#[test]
fn default_file_is_dot_mint_in_the_working_directory() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(mint(dir.path()).args(["policy", "check"]));
    assert_eq!(out.code, Some(2));
    assert!(out.stderr.contains("`.mint/policy.yaml`"), "{}", out.stderr);

    std::fs::create_dir(dir.path().join(".mint")).unwrap();
    std::fs::write(dir.path().join(".mint/policy.yaml"), VALID).unwrap();
    let out = run(mint(dir.path()).args(["policy", "check", "--json"]));
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let report: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(report["file"], ".mint/policy.yaml");
}

#[test]
fn argument_wins_over_the_environment() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("arg.yaml");
    std::fs::write(&file, VALID).unwrap();
    let out = run(mint(dir.path())
        .args(["policy", "check"])
        .arg(&file)
        .env("MINT_POLICY_PATH", dir.path().join("missing.yaml")));
    assert_eq!(out.code, Some(0), "{}", out.stderr);
}

#[test]
fn canary_values_never_reach_the_output() {
    const CANARY: &str = "mintcanary7f3a91c2";
    // Each document holds the canary where an operator might paste a token by mistake, and says
    // which finding proves it was looked at.
    let documents = [
        (
            format!(
                "version: 1\n\
                 rules:\n  \
                   - id: leaky\n    \
                     effect: allow\n    \
                     token: ghp_{CANARY}\n    \
                     match:\n      \
                       host: [\"{CANARY}!example.com\", \"api.github.com\"]\n      \
                       method: GET\n      \
                       sekret: \"Bearer {CANARY}\"\n\
                 extra_field: {CANARY}\n"
            ),
            ["E010", "E023"],
        ),
        (
            format!("version: 1\nrules: []\ndefault: \"{CANARY}\nx: 1\n"),
            ["E003", "E003"],
        ),
        (
            format!("version: 1\nrules: []\ndefault: {CANARY}\nx: &{CANARY} 1\n"),
            ["E004", "E004"],
        ),
    ];
    let dir = tempfile::tempdir().unwrap();
    for (index, (text, codes)) in documents.iter().enumerate() {
        let file = dir.path().join(format!("leaky{index}.yaml"));
        std::fs::write(&file, text).unwrap();
        for json in [false, true] {
            let mut cmd = mint(dir.path());
            cmd.args(["policy", "check"])
                .arg(&file)
                .env("RUST_LOG", "trace");
            if json {
                cmd.arg("--json");
            }
            let out = run(&mut cmd);
            assert_eq!(out.code, Some(1), "{}{}", out.stdout, out.stderr);
            for code in codes {
                assert!(out.stdout.contains(code), "{code} expected: {}", out.stdout);
            }
            assert!(
                !out.stdout.contains(CANARY),
                "canary on stdout: {}",
                out.stdout
            );
            assert!(
                !out.stderr.contains(CANARY),
                "canary on stderr: {}",
                out.stderr
            );
        }
    }
}

#[test]
fn usage_errors_exit_two() {
    let dir = tempfile::tempdir().unwrap();
    for args in [
        &[][..],
        &["policy"][..],
        &["policy", "check", "--bogus"][..],
        &["policy", "check", "a.yaml", "b.yaml"][..],
        &["frobnicate"][..],
    ] {
        let out = run(mint(dir.path()).args(args));
        assert_eq!(out.code, Some(2), "mint {args:?}: {}", out.stderr);
        assert!(out.stdout.is_empty(), "mint {args:?}: {}", out.stdout);
    }
}

#[test]
fn help_and_version_exit_zero() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(mint(dir.path()).args(["policy", "check", "--help"]));
    assert_eq!(out.code, Some(0));
    assert!(out.stdout.contains("--json"));
    let out = run(mint(dir.path()).arg("--version"));
    assert_eq!(out.code, Some(0));
    assert!(out.stdout.starts_with("mint "));
}

/// Issue 23: the human report starts with the file checked, its rule count and its default; a
/// file `mint serve` would refuse for its mode gets a note on stderr naming the fix, while the
/// report and the exit status stay the contents'.
#[test]
fn issue_23_the_report_names_the_file_and_rules_and_warns_on_a_refused_mode() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("draft.yaml");
    std::fs::write(&file, VALID).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o666)).unwrap();
    let out = run(mint(dir.path()).args(["policy", "check"]).arg(&file));
    assert_eq!(out.code, Some(0), "{}{}", out.stdout, out.stderr);
    assert_eq!(
        out.stdout.lines().next().unwrap(),
        format!("{}: 1 rule, default deny", file.display())
    );
    assert!(
        out.stderr.contains("writable by group or others"),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("chmod 600"), "{}", out.stderr);
    assert!(
        out.stderr.contains("`mint serve` would refuse this file"),
        "{}",
        out.stderr
    );
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let out = run(mint(dir.path()).args(["policy", "check"]).arg(&file));
    assert_eq!(out.code, Some(0));
    assert!(out.stderr.is_empty(), "{}", out.stderr);
}
