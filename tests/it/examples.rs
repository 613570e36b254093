//! Every file in `examples/` is valid: policy files check with no error, alias files load with no
//! error, and every line of an audit log is an audit record chained to the line before it. The
//! examples also agree with each other: the rules an example audit record cites exist in an
//! example policy.
//!
//! Files are discovered by listing the directory, so a new example is covered automatically; a
//! file of a kind this test does not know fails it, so that someone adds its validator.

#![expect(clippy::unwrap_used, clippy::panic, reason = "test helpers")]

use std::collections::BTreeSet;
use std::path::Path;

use mint_policy::aliases::load_aliases;
use mint_policy::audit::{GENESIS_PREV, chain_hash, parse_record};
use mint_policy::check::check_policy;
use mint_policy::policy::load_policy;
use mint_tests::{example_files, has_top_level_key, read_text};

#[test]
fn every_example_file_is_valid() {
    let mut seen = Seen::default();
    for path in example_files() {
        check_example(&path, &mut seen);
    }
    assert!(seen.policies > 0, "examples/ has no policy file");
    assert!(seen.alias_files > 0, "examples/ has no alias file");
    assert!(seen.audit_logs > 0, "examples/ has no audit log");
    let unknown: Vec<&String> = seen.cited_rules.difference(&seen.policy_rules).collect();
    assert!(
        unknown.is_empty(),
        "example audit records cite rules no example policy has: {unknown:?}"
    );
}

/// What the examples hold, for the checks across files.
#[derive(Default)]
struct Seen {
    policies: usize,
    alias_files: usize,
    audit_logs: usize,
    policy_rules: BTreeSet<String>,
    cited_rules: BTreeSet<String>,
}

#[track_caller]
fn check_example(path: &Path, seen: &mut Seen) {
    let name = path.file_name().unwrap().to_string_lossy().into_owned();
    let text = read_text(path);
    let extension = path
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or_default();
    match extension {
        "yaml" | "yml" if has_top_level_key(&text, "rules") => {
            let report = check_policy(text.as_bytes(), &name);
            assert!(
                report.valid,
                "{name} has errors:\n{}",
                report.render_human()
            );
            let policy = load_policy(text.as_bytes(), &name).policy.unwrap();
            seen.policy_rules
                .extend(policy.rules.into_iter().map(|rule| rule.id));
            seen.policies += 1;
        }
        "yaml" | "yml" if has_top_level_key(&text, "aliases") => {
            let load = load_aliases(text.as_bytes(), &name);
            let errors: Vec<String> = load.errors().map(|d| d.render(&name)).collect();
            assert!(
                errors.is_empty(),
                "{name} has errors:\n{}",
                errors.join("\n")
            );
            assert!(
                load.aliases.is_some_and(|file| !file.aliases.is_empty()),
                "{name}: no alias"
            );
            seen.alias_files += 1;
        }
        "log" => {
            check_audit_log(&name, &text, seen);
            seen.audit_logs += 1;
        }
        "json" => {
            // Agent configurations: at least well-formed JSON.
            let parsed: Result<serde_json::Value, _> = serde_json::from_str(&text);
            assert!(parsed.is_ok(), "{name} is not valid JSON");
        }
        _ => panic!(
            "examples/{name}: unknown kind of example; teach tests/it/examples.rs to validate it"
        ),
    }
}

#[track_caller]
fn check_audit_log(name: &str, text: &str, seen: &mut Seen) {
    assert!(
        text.ends_with('\n'),
        "{name}: the last line must end with a newline"
    );
    let mut prev = GENESIS_PREV.to_owned();
    let mut count = 0;
    for (index, line) in text.lines().enumerate() {
        let line_no = index + 1;
        let record = parse_record(line)
            .unwrap_or_else(|e| panic!("{name}:{line_no}: not an audit record: {e}"));
        assert_eq!(
            record.prev.as_str(),
            prev,
            "{name}:{line_no}: `prev` breaks the hash chain"
        );
        let cited = record
            .rule
            .iter()
            .flatten()
            .map(|id| id.as_str().to_owned());
        seen.cited_rules.extend(cited);
        prev = chain_hash(line);
        count += 1;
    }
    assert!(
        count > 0,
        "{name}: an example audit log needs at least one record"
    );
}
