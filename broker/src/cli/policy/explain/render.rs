//! The two forms of an explanation: the human report and one JSON object.
//!
//! Both print names, positions, rule ids, alias declarations and counts; never a header value, a
//! query value or the body (only the query's parameter names), since any of them may hold a
//! real token.

use std::time::Duration;

use mint_policy::body::{InertPlace, NamedPlace};
use mint_policy::evaluate::{DenyReason, Evaluation};
use mint_policy::normalize::Target;
use serde::Serialize;
use serde_json::Value;

use super::{BudgetSource, Explanation, LimitReport, Placement, ToolSource, Verdict};
use crate::proxy::ProxyError;
use crate::proxy::pipeline::sites_text;
use crate::secrets::placeholder::{Part, Place};

/// The human report: a headline, aligned `label  value` rows, then notes.
pub(crate) fn human(explanation: &Explanation, source: &BudgetSource) -> String {
    let x = explanation;
    let mut rows: Vec<(&str, Vec<String>)> = Vec::new();
    if let Verdict::Refused(error) = &x.verdict {
        let mut status = format!("{} {}", error.status().as_u16(), error.code());
        if let Some(retry_after) = error.retry_after() {
            status.push_str(&format!(", retry after {retry_after} s"));
        }
        rows.push(("status", vec![status]));
        rows.push(("reason", vec![error.to_string()]));
    }
    if let Verdict::Approve {
        rules,
        timeout,
        allow_rules,
        ..
    } = &x.verdict
    {
        let noun = if rules.len() == 1 { "rule" } else { "rules" };
        let mut lines = vec![format!(
            "waits up to {} s for the operator's decision (approve {noun}: {})",
            timeout.as_secs(),
            rules.join(", ")
        )];
        if !allow_rules.is_empty() {
            lines.push(format!("approved, also under {}", allow_rules.join(", ")));
        }
        rows.push(("approval", lines));
    }
    let rules = match &x.verdict {
        Verdict::Tunnel { rules } if rules.is_empty() => {
            "(none: each request inside the tunnel is decided on its own)".to_owned()
        }
        Verdict::Tunnel { rules } => format!(
            "{} could allow requests inside; each is decided on its own",
            rules.join(", ")
        ),
        _ => rules_text(x.verdict.rules()),
    };
    rows.push(("rules", vec![rules]));
    rows.push(("agent", vec![x.agent.clone()]));
    if let Some(target) = &x.target {
        let keys = target.query_keys();
        if !keys.is_empty() {
            rows.push((
                "query",
                vec![format!("{} (values not shown)", keys.join(", "))],
            ));
        }
    }
    match (x.tool_source, x.tools.as_slice()) {
        (None, _) => {}
        (Some(ToolSource::Flag), tools) => {
            rows.push(("tool", vec![format!("{} (from --tool)", tools.join(", "))]));
        }
        (Some(ToolSource::Body), []) => {
            rows.push(("tool", vec!["(none: not an MCP tools/call)".to_owned()]));
        }
        (Some(ToolSource::Body), tools) => {
            let noun = if tools.len() == 1 { "call" } else { "calls" };
            rows.push((
                "tool",
                vec![format!(
                    "{} ({} {noun} in the body)",
                    tools.join(", "),
                    tools.len()
                )],
            ));
        }
    }
    if x.evaluations.len() > 1 {
        let lines = x
            .evaluations
            .iter()
            .map(|call| {
                let subject = match &call.tool {
                    Some(tool) => format!("tool `{tool}`"),
                    None => "other messages".to_owned(),
                };
                format!("{subject}: {}", evaluation_text(&call.evaluation))
            })
            .collect();
        rows.push(("calls", lines));
    }
    if !x.aliases.is_empty() {
        let mut lines = Vec::new();
        for alias in &x.aliases {
            lines.push(alias.name.clone());
            for placement in &alias.places {
                lines.push(format!("  {}", placement_text(placement)));
            }
            lines.push(format!(
                "  {}",
                match &alias.declaration {
                    None => "not declared in the alias file".to_owned(),
                    Some(binding) => {
                        let bound = match binding.bound {
                            Some(true) => " (this host matches)",
                            Some(false) => " (this host does not match)",
                            None => "",
                        };
                        format!(
                            "bound to {}{bound}; sites: {}",
                            binding.hosts.join(", "),
                            sites_text(binding.sites)
                        )
                    }
                }
            ));
        }
        rows.push(("aliases", lines));
    }
    if !x.skipped.is_empty() {
        let mut lines: Vec<String> = x
            .skipped
            .listed()
            .iter()
            .map(|(alias, place)| format!("{alias} in {}", inert_text(*place)))
            .collect();
        let count = x.skipped.count();
        let noun = if count == 1 {
            "placeholder"
        } else {
            "placeholders"
        };
        lines.push(format!(
            "{count} {noun} in the body forwarded as text, never substituted"
        ));
        rows.push(("skipped", lines));
    }
    if !x.limits.is_empty() {
        rows.push(("limits", limit_table(&x.limits)));
    }

    let target = match &x.target {
        None => "(target refused before parsing)".to_owned(),
        Some(target) if x.method == "CONNECT" => target.host.authority(Some(target.port)),
        Some(target) => target_text(target),
    };
    let mut out = format!("{}: {} {target}\n", x.verdict.decision(), x.method);
    for (label, lines) in rows {
        for (n, line) in lines.iter().enumerate() {
            let label = if n == 0 { label } else { "" };
            out.push_str(format!("  {label:<8} {line}").trim_end());
            out.push('\n');
        }
    }
    for note in notes(x, source) {
        out.push_str(&format!("note: {note}\n"));
    }
    out
}

/// The explanation as one JSON object, fields in the order of [`Report`].
pub(crate) fn json(explanation: &Explanation, source: &BudgetSource) -> String {
    let x = explanation;
    let refusal = match &x.verdict {
        Verdict::Refused(error) => Some(error),
        Verdict::Allow { .. } | Verdict::Approve { .. } | Verdict::Tunnel { .. } => None,
    };
    let rules = x.verdict.rules();
    let report = Report {
        decision: x.verdict.decision(),
        tunnel: matches!(x.verdict, Verdict::Tunnel { .. }),
        status: refusal.map(|e| e.status().as_u16()),
        code: refusal.map(ProxyError::code),
        message: refusal.map(ToString::to_string),
        reason: refusal.map(ProxyError::reason),
        rules,
        by_default: rules.is_some_and(<[String]>::is_empty),
        retry_after: refusal.and_then(ProxyError::retry_after),
        closest: refusal.and_then(ProxyError::closest_json),
        approval: match &x.verdict {
            Verdict::Approve {
                rules,
                timeout,
                allow_rules,
                limited,
            } => Some(ApprovalJson {
                rules,
                timeout_seconds: timeout.as_secs(),
                allow_rules,
                limited_once_approved: limited,
            }),
            _ => None,
        },
        agent: &x.agent,
        method: &x.method,
        target: x.target.as_ref().map(|target| TargetReport {
            url: target_text(target),
            scheme: target.scheme.as_str(),
            host: target.host.as_text(),
            port: target.port,
            path: &target.path,
            query_keys: target.query_keys(),
        }),
        tools: &x.tools,
        tool_source: x.tool_source.map(|s| match s {
            ToolSource::Flag => "flag",
            ToolSource::Body => "body",
        }),
        evaluations: x
            .evaluations
            .iter()
            .map(|call| {
                let (decision, rules, reason) = match &call.evaluation {
                    Evaluation::Allow(grant) => ("allow", grant.rules.as_slice(), None),
                    Evaluation::Approve(hold) => ("approve", hold.rules.as_slice(), None),
                    Evaluation::Deny(denial) => (
                        "deny",
                        denial.rules.as_slice(),
                        Some(deny_code(denial.reason)),
                    ),
                };
                CallJson {
                    tool: call.tool.as_deref(),
                    decision,
                    rules,
                    reason,
                }
            })
            .collect(),
        aliases: x
            .aliases
            .iter()
            .map(|alias| AliasJson {
                name: &alias.name,
                declared: alias.declaration.is_some(),
                places: alias.places.iter().map(placement_json).collect(),
                hosts: alias.declaration.as_ref().map(|b| b.hosts.as_slice()),
                sites: alias
                    .declaration
                    .as_ref()
                    .map(|b| b.sites.iter().map(|s| s.as_str()).collect()),
                bound: alias.declaration.as_ref().and_then(|b| b.bound),
            })
            .collect(),
        skipped: SkippedJson {
            count: x.skipped.count(),
            places: x
                .skipped
                .listed()
                .iter()
                .map(|(alias, place)| SkippedPlaceJson {
                    alias,
                    place: place.as_str(),
                })
                .collect(),
        },
        limits: x
            .limits
            .iter()
            .map(|limit| LimitJson {
                rule: &limit.rule,
                by: limit
                    .by
                    .iter()
                    .map(|(key, value)| ((*key).to_owned(), Value::from(value.as_str())))
                    .collect(),
                max: limit.max,
                per: window_text(limit.per),
                per_seconds: limit.per.as_secs(),
                remaining: limit.remaining,
            })
            .collect(),
        budgets: budgets_json(source),
    };
    // INVARIANT: strings, numbers, booleans, options, sequences and string-keyed maps serialize.
    serde_json::to_string_pretty(&report).unwrap_or_default()
}

/// `mint policy explain --json`.
#[derive(Serialize)]
struct Report<'a> {
    decision: &'static str,
    tunnel: bool,
    status: Option<u16>,
    code: Option<&'static str>,
    message: Option<String>,
    reason: Option<&'static str>,
    rules: Option<&'a [String]>,
    by_default: bool,
    retry_after: Option<u64>,
    closest: Option<serde_json::Value>,
    agent: &'a str,
    method: &'a str,
    target: Option<TargetReport<'a>>,
    tools: &'a [String],
    tool_source: Option<&'static str>,
    approval: Option<ApprovalJson<'a>>,
    evaluations: Vec<CallJson<'a>>,
    aliases: Vec<AliasJson<'a>>,
    skipped: SkippedJson<'a>,
    limits: Vec<LimitJson<'a>>,
    budgets: BudgetsJson,
}

/// A request held for the operator's approval.
#[derive(Serialize)]
struct ApprovalJson<'a> {
    rules: &'a [String],
    timeout_seconds: u64,
    allow_rules: &'a [String],
    limited_once_approved: &'a [String],
}

#[derive(Serialize)]
struct TargetReport<'a> {
    url: String,
    scheme: &'static str,
    host: String,
    port: u16,
    path: &'a str,
    query_keys: Vec<String>,
}

#[derive(Serialize)]
struct CallJson<'a> {
    tool: Option<&'a str>,
    decision: &'static str,
    rules: &'a [String],
    reason: Option<&'static str>,
}

#[derive(Serialize)]
struct AliasJson<'a> {
    name: &'a str,
    declared: bool,
    places: Vec<PlaceJson<'a>>,
    hosts: Option<&'a [String]>,
    sites: Option<Vec<&'static str>>,
    bound: Option<bool>,
}

/// The placeholders the body quotes as text: each alias and kind of place once, and the count.
#[derive(Serialize)]
struct SkippedJson<'a> {
    count: u64,
    places: Vec<SkippedPlaceJson<'a>>,
}

#[derive(Serialize)]
struct SkippedPlaceJson<'a> {
    alias: &'a str,
    place: &'static str,
}

#[derive(Serialize)]
struct PlaceJson<'a> {
    part: &'static str,
    header: Option<&'a str>,
    offset: usize,
    site: Option<&'static str>,
    forbidden: Option<String>,
    /// The alias's JSON Pointer this body placeholder sits at.
    #[serde(skip_serializing_if = "Option::is_none")]
    pointer: Option<&'a str>,
    /// The alias's form field this body placeholder sits in.
    #[serde(skip_serializing_if = "Option::is_none")]
    form_field: Option<&'a str>,
}

#[derive(Serialize)]
struct LimitJson<'a> {
    rule: &'a str,
    by: serde_json::Map<String, Value>,
    max: u64,
    per: String,
    per_seconds: u64,
    remaining: u64,
}

#[derive(Serialize)]
struct BudgetsJson {
    source: &'static str,
    audit_log: Option<String>,
    files: Option<Vec<String>>,
    replayed: Option<usize>,
    /// The Redis read (`redis`, `redis_unavailable`).
    #[serde(skip_serializing_if = "Option::is_none")]
    redis: Option<String>,
    /// Why it could not be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

fn rules_text(rules: Option<&[String]>) -> String {
    match rules {
        None => "(policy not consulted)".to_owned(),
        Some([]) => "(default)".to_owned(),
        Some(rules) => rules.join(", "),
    }
}

fn evaluation_text(evaluation: &Evaluation) -> String {
    match evaluation {
        Evaluation::Allow(grant) => format!("allow by {}", rules_text(Some(&grant.rules))),
        Evaluation::Approve(hold) => format!(
            "approve by {} (waits up to {} s)",
            rules_text(Some(&hold.rules)),
            hold.timeout.as_secs()
        ),
        Evaluation::Deny(denial) => format!(
            "deny by {} ({})",
            rules_text(Some(&denial.rules)),
            deny_code(denial.reason)
        ),
    }
}

/// The audit reason of a denial, as `ProxyError::reason` spells it.
fn deny_code(reason: DenyReason) -> &'static str {
    match reason {
        DenyReason::DenyRule => "deny_rule",
        DenyReason::NoAllowRule => "no_allow_rule",
        DenyReason::DefaultAllowUsesAlias => "default_allow_uses_alias",
        DenyReason::DefaultAllowLoopback => "default_allow_loopback",
    }
}

/// The target without its query: `https://api.github.com/user`.
fn target_text(target: &Target) -> String {
    format!("{}://{}{}", target.scheme, target.authority(), target.path)
}

fn part_text(part: &Part) -> String {
    match part {
        Part::Scheme => "the scheme".to_owned(),
        Part::Authority => "the authority".to_owned(),
        Part::Path => "the path".to_owned(),
        Part::Query => "the query".to_owned(),
        Part::Header(name) => format!("header `{name}`"),
        Part::Body => "the body".to_owned(),
    }
}

fn inert_text(place: InertPlace) -> &'static str {
    match place {
        InertPlace::JsonValue => "a JSON string value it does not name",
        InertPlace::JsonKey => "a JSON member name",
        InertPlace::FormValue => "a form field value it does not name",
        InertPlace::FormKey => "a form field name",
        InertPlace::Text => "a body that is neither JSON nor a form, or is content-encoded",
    }
}

fn placement_text(placement: &Placement) -> String {
    let mut place = match placement.place {
        Place::Site(site) => format!("{site} site"),
        Place::Forbidden(forbidden) => format!("no secret may go here: {forbidden}"),
    };
    if let Some(matched) = &placement.matched {
        place.push_str(&format!(", at {matched}"));
    }
    format!(
        "{}, byte {}: {place}",
        part_text(&placement.part),
        placement.offset
    )
}

fn placement_json(placement: &Placement) -> PlaceJson<'_> {
    let (part, header) = match &placement.part {
        Part::Scheme => ("scheme", None),
        Part::Authority => ("authority", None),
        Part::Path => ("path", None),
        Part::Query => ("query", None),
        Part::Header(name) => ("header", Some(name.as_str())),
        Part::Body => ("body", None),
    };
    let (site, forbidden) = match placement.place {
        Place::Site(site) => (Some(site.as_str()), None),
        Place::Forbidden(forbidden) => (None, Some(forbidden.to_string())),
    };
    let (pointer, form_field) = match &placement.matched {
        Some(NamedPlace::Pointer(pointer)) => (Some(pointer.as_str()), None),
        Some(NamedPlace::FormField(field)) => (None, Some(field.as_str())),
        None => (None, None),
    };
    PlaceJson {
        part,
        header,
        offset: placement.offset,
        site,
        forbidden,
        pointer,
        form_field,
    }
}

/// One aligned row per counter: rule, what it counts per, the window, what is left.
fn limit_table(limits: &[LimitReport]) -> Vec<String> {
    let cells: Vec<[String; 4]> = limits
        .iter()
        .map(|limit| {
            let by = if limit.by.is_empty() {
                "one counter".to_owned()
            } else {
                let pairs: Vec<String> = limit.by.iter().map(|(k, v)| format!("{k}={v}")).collect();
                format!("per {}", pairs.join(", "))
            };
            [
                limit.rule.clone(),
                by,
                format!("{} per {}", limit.max, window_text(limit.per)),
                format!("{} left", limit.remaining),
            ]
        })
        .collect();
    let w0 = cells.iter().map(|[rule, ..]| rule.len()).max().unwrap_or(0);
    let w1 = cells.iter().map(|[_, by, ..]| by.len()).max().unwrap_or(0);
    let w2 = cells
        .iter()
        .map(|[_, _, rate, _]| rate.len())
        .max()
        .unwrap_or(0);
    cells
        .iter()
        .map(|[rule, by, rate, left]| format!("{rule:<w0$}  {by:<w1$}  {rate:<w2$}  {left}"))
        .collect()
}

/// `30s`, `10m`, `1h`, `1d`: the largest unit that divides the window.
fn window_text(per: Duration) -> String {
    let secs = per.as_secs();
    for (unit, size) in [("d", 86_400), ("h", 3_600), ("m", 60)] {
        if secs >= size && secs.is_multiple_of(size) {
            return format!("{}{unit}", secs / size);
        }
    }
    format!("{secs}s")
}

fn notes(x: &Explanation, source: &BudgetSource) -> Vec<String> {
    let mut notes = Vec::new();
    match source {
        BudgetSource::NotNeeded => {}
        BudgetSource::NoLog { path } => notes.push(format!(
            "budgets are full windows: the running broker counts calls in its memory, which \
             explain cannot see, and there is no audit log at `{}` to estimate them from",
            path.display()
        )),
        BudgetSource::Redis { server } => notes.push(format!(
            "budgets are the counters the brokers share in Redis `{server}`, read now"
        )),
        BudgetSource::RedisUnavailable { server, error } => notes.push(format!(
            "the brokers share their call limits in Redis `{server}`, which cannot be read \
             ({error}): a broker refuses such a request (503 limits_unavailable) until Redis \
             answers"
        )),
        BudgetSource::AuditLog { path, replayed, .. } => notes.push(format!(
            "budgets are estimated from {replayed} allowed request{} in the audit log `{}`: the \
             running broker counts calls in its memory, which explain cannot see \
             (docs/policy.md says what the estimate misses)",
            if *replayed == 1 { "" } else { "s" },
            path.display()
        )),
    }
    if let (Verdict::Tunnel { .. }, Some(target)) = (&x.verdict, &x.target) {
        notes.push(format!(
            "a tunnel would open: each request inside it is decided on its own, as on \
             /v1/proxy/; explain one with its method and URL, e.g. `--method GET --url \
             https://{}/PATH`",
            target.host.authority(Some(target.port))
        ));
        notes.push(
            "not checked here: the capability, and the addresses the host resolves to".to_owned(),
        );
    } else if let Verdict::Approve { limited, .. } = &x.verdict {
        notes.push(
            "nothing is sent, and no limit counted, until the operator approves; refused or \
             timed out, the request is not sent"
                .to_owned(),
        );
        if !limited.is_empty() {
            notes.push(format!(
                "approved now, it would be refused: the limits of {} are spent",
                limited.join(", ")
            ));
        }
        notes.push(
            "not checked here: the capability's alias narrowing, and the addresses the host \
             resolves to"
                .to_owned(),
        );
    } else if x.verdict.is_allow() {
        notes.push(
            "not checked here: the capability's alias narrowing, and the addresses the host \
             resolves to"
                .to_owned(),
        );
    }
    notes
}

fn budgets_json(source: &BudgetSource) -> BudgetsJson {
    let text = |path: &std::path::Path| path.display().to_string();
    let (kind, audit_log, files, replayed) = match source {
        BudgetSource::NotNeeded => ("not_needed", None, None, None),
        BudgetSource::Redis { .. } => ("redis", None, None, None),
        BudgetSource::RedisUnavailable { .. } => ("redis_unavailable", None, None, None),
        BudgetSource::NoLog { path } => ("full", Some(text(path)), None, None),
        BudgetSource::AuditLog {
            path,
            files,
            replayed,
        } => (
            "audit_log",
            Some(text(path)),
            Some(files.iter().map(|f| text(f)).collect()),
            Some(*replayed),
        ),
    };
    let (redis, error) = match source {
        BudgetSource::Redis { server } => (Some(server.clone()), None),
        BudgetSource::RedisUnavailable { server, error } => {
            (Some(server.clone()), Some(error.clone()))
        }
        _ => (None, None),
    };
    BudgetsJson {
        source: kind,
        audit_log,
        files,
        replayed,
        redis,
        error,
    }
}
