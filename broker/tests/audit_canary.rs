//! No header value, query value, body or secret ever reaches the audit log or Mint's own logs.
//!
//! Builds the records of a request full of canaries the way the proxy does: the target goes
//! through `normalize_target`, only its auditable facts (query *names*) are taken, alias *names*
//! are found from the placeholders, the capability's *id* from its token; headers, body and the
//! secret are never handed to the audit code. Then writes them to a real log and checks every
//! byte of it, the `Debug` output of everything involved, and the tracing output of a refused
//! record and of a failed write.

#![expect(clippy::unwrap_used, reason = "test helpers")]

use std::io::Write;
use std::sync::{Arc, Mutex};

use mint_broker::audit::facts::{
    DecisionFacts, OutcomeFacts, RequestFacts, TargetFacts, decision_record, outcome_record,
};
use mint_broker::audit::{AuditConfig, AuditLog, AuditSink, Durability, MemorySink, now};
use mint_policy::audit::{
    AgentName, AliasName, AuditDecision, CapabilityId, HttpStatus, Method, Outcome, RequestId,
    RuleId, ToolName, parse_record,
};
use mint_policy::normalize::normalize_target;

const HEADER_VALUE: &str = "CANARYhdr1b7e";
const QUERY_VALUE: &str = "CANARYqv02c4";
const BODY_VALUE: &str = "CANARYbody5d9";
const SECRET: &str = "CANARYsecret8a1";
const CAPABILITY_SECRET: &str = "CANARYcapsecret3f";

const CANARIES: [&str; 5] = [
    HEADER_VALUE,
    QUERY_VALUE,
    BODY_VALUE,
    SECRET,
    CAPABILITY_SECRET,
];

/// A request as it reaches the proxy.
struct IncomingRequest {
    method: &'static str,
    scheme: &'static str,
    authority: &'static str,
    path_and_query: String,
    headers: Vec<(&'static str, String)>,
    body: String,
}

fn incoming() -> IncomingRequest {
    IncomingRequest {
        method: "POST",
        scheme: "https",
        authority: "api.github.com",
        path_and_query: format!(
            "/repos/acme/docs/issues?state={QUERY_VALUE}&token=%7B%7Bmint%3Agithub%7D%7D\
             &per_page={QUERY_VALUE}&flag"
        ),
        headers: vec![
            (
                "Mint-Capability",
                format!("mint_cap_c7f3a9d2_{CAPABILITY_SECRET}"),
            ),
            ("Authorization", "Bearer {{mint:github}}".to_owned()),
            ("X-Custom", HEADER_VALUE.to_owned()),
            ("Cookie", format!("session={HEADER_VALUE}")),
        ],
        body: format!(
            r#"{{"jsonrpc":"2.0","method":"tools/call","params":{{"name":"query-docs","arguments":{{"q":"{BODY_VALUE}","key":"{{{{mint:context7}}}}"}}}}}}"#
        ),
    }
}

/// The alias names whose placeholders appear anywhere in the request (names only).
fn alias_names(request: &IncomingRequest) -> Vec<AliasName> {
    let mut text = request
        .path_and_query
        .replace("%7B", "{")
        .replace("%7D", "}")
        .replace("%3A", ":");
    for (_, value) in &request.headers {
        text.push_str(value);
    }
    text.push_str(&request.body);
    let mut names: Vec<AliasName> = text
        .split("{{mint:")
        .skip(1)
        .filter_map(|rest| rest.split_once("}}"))
        .filter_map(|(name, _)| AliasName::new(name).ok())
        .collect();
    names.sort();
    names.dedup();
    names
}

/// The facts the proxy records: built from the request before any substitution.
fn facts(request: &IncomingRequest) -> RequestFacts {
    let target =
        normalize_target(request.scheme, request.authority, &request.path_and_query).unwrap();
    let token = &request
        .headers
        .iter()
        .find(|(name, _)| *name == "Mint-Capability")
        .unwrap()
        .1;
    let capability_id = token
        .strip_prefix("mint_cap_")
        .and_then(|rest| rest.split_once('_'))
        .map(|(id, _)| id)
        .unwrap();
    RequestFacts {
        id: RequestId::new("01JDZ4T6M2Q8W3E5R7Y9U1I3O5").unwrap(),
        agent: Some(AgentName::new("mino").unwrap()),
        capability: Some(CapabilityId::new(capability_id).unwrap()),
        method: Some(Method::new(request.method).unwrap()),
        target: Some(TargetFacts::from_target(&target).unwrap()),
        aliases: alias_names(request),
        skipped: Vec::new(),
        skipped_count: None,
        mcp_tool: Some(ToolName::new("query-docs").unwrap()),
    }
}

#[track_caller]
fn assert_clean(what: &str, text: &str) {
    for canary in CANARIES {
        assert!(
            !text.contains(canary),
            "{what} holds canary {canary}:\n{text}"
        );
    }
}

#[test]
fn no_canary_reaches_the_log() {
    let request = incoming();
    let facts = facts(&request);
    let decision = decision_record(
        now(),
        facts.clone(),
        DecisionFacts {
            decision: AuditDecision::Allow,
            rules: Some(vec![RuleId::new("github-read").unwrap()]),
            reason: None,
            approval: Vec::new(),
            approver: Vec::new(),
        },
    );
    // The secret is substituted only after the decision record is written; the outcome record
    // is built from the same facts, never from the substituted request.
    let _substituted = request.headers[1].1.replace("{{mint:github}}", SECRET);
    let outcome = outcome_record(
        now(),
        facts.clone(),
        OutcomeFacts {
            outcome: Outcome::Completed,
            status: Some(HttpStatus::new(201).unwrap()),
            bytes_up: Some(request.body.len() as u64),
            bytes_down: Some(512),
            duration_ms: Some(42),
            reason: None,
        },
    );

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.log");
    let log = AuditLog::open(
        &path,
        AuditConfig {
            durability: Durability::Always,
            rotate_bytes: None,
        },
    )
    .unwrap();
    log.record(&decision).unwrap();
    log.record(&outcome).unwrap();
    drop(log);
    let written = std::fs::read_to_string(&path).unwrap();
    assert_clean("the audit log", &written);
    assert_clean("the facts' Debug", &format!("{facts:?}"));
    assert_clean("the records' Debug", &format!("{decision:?} {outcome:?}"));

    // What is recorded: names, never values.
    let lines: Vec<&str> = written.lines().collect();
    let record = parse_record(lines[0]).unwrap();
    let keys: Vec<&str> = record.query_keys.iter().map(|k| k.as_str()).collect();
    assert_eq!(keys, ["state", "token", "per_page", "flag"]);
    let aliases: Vec<&str> = record.aliases.iter().map(|a| a.as_str()).collect();
    assert_eq!(aliases, ["context7", "github"]);
    assert_eq!(record.capability.unwrap().as_str(), "c7f3a9d2");
    assert_eq!(record.path.unwrap().as_str(), "/repos/acme/docs/issues");
    assert_eq!(record.mcp_tool.unwrap().as_str(), "query-docs");

    let memory = MemorySink::new();
    memory.record(&decision).unwrap();
    memory.record(&outcome).unwrap();
    assert_clean("the memory sink", &memory.lines().join("\n"));
}

/// Captures tracing output in memory.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn logs_name_the_problem_never_the_record() {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .finish();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.log");
    let request = incoming();
    let facts = facts(&request);
    tracing::subscriber::with_default(subscriber, || {
        let log = AuditLog::open(&path, AuditConfig::default()).unwrap();
        // A deny without a reason is refused (a caller bug): logged without content.
        let refused = decision_record(
            now(),
            facts.clone(),
            DecisionFacts {
                decision: AuditDecision::Deny,
                rules: Some(vec![]),
                reason: None,
                approval: Vec::new(),
                approver: Vec::new(),
            },
        );
        assert!(log.record(&refused).is_err());
        // A write failure: the file made read-only underneath the writer (root needs chattr).
        let record = decision_record(
            now(),
            facts.clone(),
            DecisionFacts {
                decision: AuditDecision::Allow,
                rules: None,
                reason: None,
                approval: Vec::new(),
                approver: Vec::new(),
            },
        );
        let immutable = std::process::Command::new("chattr")
            .args(["+i", path.to_str().unwrap()])
            .status()
            .is_ok_and(|s| s.success());
        if immutable {
            assert!(log.record(&record).is_err());
            std::process::Command::new("chattr")
                .args(["-i", path.to_str().unwrap()])
                .status()
                .unwrap();
        }
        drop(log);
    });
    let logs = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    assert!(logs.contains("Audit record refused"), "{logs}");
    assert_clean("tracing output", &logs);
    // Not even the recordable facts: only the log's path, the error and the request id.
    for fact in [
        "/repos/acme/docs/issues",
        "per_page",
        "query-docs",
        "c7f3a9d2",
    ] {
        assert!(
            !logs.contains(fact),
            "tracing output holds `{fact}`:\n{logs}"
        );
    }
    if logs.contains("Audit record not written") {
        assert!(logs.contains("01JDZ4T6M2Q8W3E5R7Y9U1I3O5"));
    }
}
