//! The policy file: its model and its loader, which reports every problem with a stable code, a
//! position, the rule id, the field path and how to fix it.
//!
//! `load_policy` is the only way to build a `Policy`, so code past it sees only checked rules.
//! A file with any error yields no policy: a typo must never become a wider rule. Messages may
//! quote what a typed field holds (hosts, methods, field names) but never a free scalar.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::time::Duration;

use serde::Serialize;

use crate::diagnostic::{Code, Diagnostic, Findings, Pos};
use crate::duration::{DURATION_HINT, parse_duration};
use crate::fields::{
    EntryKey, MapReader, Sink, boolean, entry_key, integer, item_path, join, list, string,
};
use crate::glob::{NameGlob, PathGlob, PathGlobError};
use crate::host::{Host, HostPattern, HostPatternError};
use crate::normalize::Scheme;
use crate::site::{Site, SiteSet};
use crate::yaml::{self, Node, NodeKind, Value};

/// The most rules a policy may hold.
pub const MAX_RULES: usize = 10_000;

/// The largest `max` of a limit (and of a legacy call limit).
pub const MAX_LIMIT: u64 = 1_000_000;

/// The window of a legacy `call_limits` entry: 24 hours.
pub const LEGACY_WINDOW: Duration = Duration::from_secs(86_400);

/// How long an approve rule holds a request for a decision when it names no `approval.timeout`.
pub const DEFAULT_APPROVAL_TIMEOUT: Duration = Duration::from_secs(120);

/// The shortest `approval.timeout`.
pub const MIN_APPROVAL_TIMEOUT: Duration = Duration::from_secs(1);

/// The longest `approval.timeout`: below the request timeouts of common HTTP and MCP SDKs, so
/// a held request is decided before its client stops waiting.
pub const MAX_APPROVAL_TIMEOUT: Duration = Duration::from_secs(280);

/// A loaded, valid policy.
#[derive(Clone, Debug, PartialEq)]
pub struct Policy {
    /// What applies when no allow rule matches.
    pub default: DefaultEffect,
    /// The rules, in file order (order never changes a decision).
    pub rules: Vec<Rule>,
    /// Legacy per-alias and per-tool daily limits.
    pub call_limits: Vec<CallLimit>,
}

/// The policy's `default`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum DefaultEffect {
    /// Requests no allow rule admits are denied.
    #[default]
    Deny,
    /// Requests no allow rule admits are allowed, unless they use an alias.
    Allow,
}

// === impl DefaultEffect ===

impl DefaultEffect {
    /// `deny` or `allow`.
    pub fn as_str(self) -> &'static str {
        match self {
            DefaultEffect::Deny => "deny",
            DefaultEffect::Allow => "allow",
        }
    }
}

/// What a rule does when it matches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Effect {
    /// Admits the request (deny and approve rules override it).
    Allow,
    /// Refuses the request, whatever else matches.
    Deny,
    /// Counts the request against its limits without allowing anything.
    Limit,
    /// Holds the request until the operator approves or refuses it; approved, it proceeds as
    /// if allowed by this rule (deny rules override it).
    Approve,
}

// === impl Effect ===

impl Effect {
    /// `allow`, `deny`, `limit` or `approve`.
    pub fn as_str(self) -> &'static str {
        match self {
            Effect::Allow => "allow",
            Effect::Deny => "deny",
            Effect::Limit => "limit",
            Effect::Approve => "approve",
        }
    }

    /// Whether a matching rule lets the request through (`allow`, or `approve` once the operator
    /// agrees). Such rules read omitted fields narrowly: no `alias` is no secret, no `scheme` is
    /// https, no `tool` is no MCP call (POLICY.md), and they must name their hosts.
    pub fn admits(self) -> bool {
        match self {
            Effect::Allow | Effect::Approve => true,
            Effect::Deny | Effect::Limit => false,
        }
    }
}

/// One rule.
#[derive(Clone, Debug, PartialEq)]
pub struct Rule {
    /// Unique id, `^[a-z0-9][a-z0-9._-]{0,63}$`.
    pub id: String,
    /// What the rule is for.
    pub description: Option<String>,
    /// What the rule does.
    pub effect: Effect,
    /// Which requests it concerns.
    pub matcher: Match,
    /// Allow and approve rules: where secrets may be placed (header by default).
    pub inject: SiteSet,
    /// Allow and approve rules: whether the target may resolve to a private address.
    pub allow_private: bool,
    /// Allow, approve and limit rules: sliding-window limits.
    pub limits: Vec<Limit>,
    /// Approve rules (always, with the default timeout when the file names none); `None` for
    /// every other effect.
    pub approval: Option<Approval>,
    /// Where the rule starts in the file.
    pub pos: Pos,
}

/// How an approve rule holds a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Approval {
    /// How long to wait for the operator's decision, from `MIN_APPROVAL_TIMEOUT` to
    /// `MAX_APPROVAL_TIMEOUT`; past it the request is refused.
    pub timeout: Duration,
}

impl Default for Approval {
    fn default() -> Self {
        Approval {
            timeout: DEFAULT_APPROVAL_TIMEOUT,
        }
    }
}

/// The `match` block: AND across fields, OR within a list. `None` is an omitted field, whose
/// meaning depends on the effect (see POLICY.md).
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Match {
    /// Globs over the capability's agent name.
    pub agent: Option<Vec<NameGlob>>,
    /// Alias names.
    pub alias: Option<Vec<String>>,
    /// Schemes Mint uses upstream.
    pub scheme: Option<Vec<Scheme>>,
    /// Host patterns.
    pub host: Option<Vec<HostPattern>>,
    /// Ports.
    pub port: Option<Vec<u16>>,
    /// Methods, uppercase and byte-exact.
    pub method: Option<Vec<String>>,
    /// Globs over the normalized path.
    pub path: Option<Vec<PathGlob>>,
    /// Globs over the MCP tool name of a `tools/call`.
    pub tool: Option<Vec<NameGlob>>,
}

/// A sliding-window limit: at most `max` requests in any window of length `per`, counted per
/// distinct value of the `by` keys.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Limit {
    /// Requests admitted per window.
    pub max: u64,
    /// Window length.
    pub per: Duration,
    /// What the counter is kept per; empty is one counter for the rule.
    pub by: Vec<LimitKey>,
}

/// A dimension a limit counts per.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LimitKey {
    /// The capability's agent.
    Agent,
    /// Each alias the request uses.
    Alias,
    /// The target host.
    Host,
    /// The MCP tool.
    Tool,
}

// === impl LimitKey ===

impl LimitKey {
    fn parse(text: &str) -> Option<LimitKey> {
        match text {
            "agent" => Some(LimitKey::Agent),
            "alias" => Some(LimitKey::Alias),
            "host" => Some(LimitKey::Host),
            "tool" => Some(LimitKey::Tool),
            _ => None,
        }
    }
}

/// A legacy `call_limits` entry: `max` calls per 24 hours for an alias or an MCP tool.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CallLimit {
    /// What is counted.
    pub key: CallLimitKey,
    /// Calls per 24 hours.
    pub max: u64,
}

/// The subject of a legacy call limit.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum CallLimitKey {
    /// Requests that use this alias.
    Alias(String),
    /// MCP calls of this tool.
    Tool(String),
}

impl fmt::Display for CallLimitKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CallLimitKey::Alias(a) => f.write_str(a),
            CallLimitKey::Tool(t) => write!(f, "tool:{t}"),
        }
    }
}

/// The result of loading a policy file: the policy when there was no error, every finding, and
/// the counts `mint policy check` reports even for an invalid file.
#[derive(Clone, Debug)]
pub struct PolicyLoad {
    /// The name of the file, for messages.
    pub origin: String,
    /// The policy, when the file has no error.
    pub policy: Option<Policy>,
    /// Errors and warnings, sorted by position.
    pub diagnostics: Vec<Diagnostic>,
    /// Entries under `rules`.
    pub rule_count: usize,
    /// Entries under `call_limits`.
    pub legacy_call_limit_count: usize,
    /// The `default` as read (deny when missing or unreadable).
    pub default: DefaultEffect,
}

/// Whether `text` is a valid rule id.
pub fn is_rule_id(text: &str) -> bool {
    let bytes = text.as_bytes();
    matches!(bytes.first(), Some(b) if b.is_ascii_lowercase() || b.is_ascii_digit())
        && bytes.len() <= 64
        && bytes.iter().all(|b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'_' | b'-')
        })
}

/// Whether `text` is a valid alias name, `^[a-z0-9][a-z0-9_-]{0,63}$`.
pub fn is_alias_name(text: &str) -> bool {
    let bytes = text.as_bytes();
    matches!(bytes.first(), Some(b) if b.is_ascii_lowercase() || b.is_ascii_digit())
        && bytes.len() <= 64
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'_' | b'-'))
}

/// Characters an agent name (and so an agent glob) may hold besides `*`.
pub fn is_agent_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-')
}

/// Characters an MCP tool name (and so a tool glob) may hold besides `*`.
pub fn is_tool_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b'/')
}

/// Loads and validates a policy file. `origin` names the file in rendered messages.
pub fn load_policy(bytes: &[u8], origin: &str) -> PolicyLoad {
    let mut load = PolicyLoad {
        origin: origin.to_owned(),
        policy: None,
        diagnostics: Vec::new(),
        rule_count: 0,
        legacy_call_limit_count: 0,
        default: DefaultEffect::Deny,
    };
    let root = match yaml::load(bytes) {
        Ok(root) => root,
        Err(findings) => {
            load.diagnostics = findings.into_sorted();
            return load;
        }
    };
    let mut findings = Findings::default();
    let policy = {
        let mut sink = Sink {
            diagnostics: &mut findings,
            subject: None,
        };
        read_policy(
            &root,
            &mut sink,
            &mut load.rule_count,
            &mut load.legacy_call_limit_count,
        )
    };
    // The tree is read: free it before the warnings' indexes are built, so the two never add up.
    drop(root);
    if let Some(policy) = &policy {
        load.default = policy.default;
    }
    if let Some(policy) = policy
        && !findings.has_errors()
    {
        add_warnings(&policy, &mut findings);
        load.policy = Some(policy);
    }
    load.diagnostics = findings.into_sorted();
    load
}

pub(crate) const TOP_FIELDS: &[&str] = &["version", "default", "rules", "call_limits"];
const RULE_FIELDS: &[&str] = &[
    "id",
    "description",
    "effect",
    "match",
    "inject",
    "allow_private",
    "limits",
    "approval",
];
const MATCH_FIELDS: &[&str] = &[
    "agent", "alias", "scheme", "host", "port", "method", "path", "tool",
];
const LIMIT_FIELDS: &[&str] = &["max", "per", "by"];
const APPROVAL_FIELDS: &[&str] = &["timeout"];

/// Reads the whole document. Returns a policy whenever the top-level shape could be read, so the
/// caller can report counts; `diagnostics` decides validity.
fn read_policy(
    root: &Node,
    sink: &mut Sink<'_>,
    rule_count: &mut usize,
    call_limit_count: &mut usize,
) -> Option<Policy> {
    let mut map = MapReader::new(root, "", sink)?;

    match map.take("version") {
        None => sink.error(
            Code::MissingField,
            map.node(),
            "",
            "missing `version`; add `version: 1` at the top of the file",
        ),
        Some(node) => {
            if let Some(v) = integer(node, "version", sink)
                && v != 1
            {
                sink.error(
                    Code::UnsupportedVersion,
                    node,
                    "version",
                    "only version 1 exists; write `version: 1`",
                );
            }
        }
    }

    let default = match map.take("default") {
        None => DefaultEffect::Deny,
        Some(node) => match node.value() {
            Some(Value::Str("deny")) => DefaultEffect::Deny,
            Some(Value::Str("allow")) => {
                sink.error(
                    Code::DefaultAllow,
                    node,
                    "default",
                    "requests no rule allows are forwarded (without secrets); write \
                     `default: deny` and allow what the agent needs",
                );
                DefaultEffect::Allow
            }
            _ => {
                sink.error(
                    Code::InvalidDefault,
                    node,
                    "default",
                    "`default` is `deny` or `allow`; write `default: deny`",
                );
                DefaultEffect::Deny
            }
        },
    };

    let mut rules = Vec::new();
    match map.take("rules") {
        None => sink.error(
            Code::MissingField,
            map.node(),
            "",
            "missing `rules`; add `rules: []` for a policy that relies on its default",
        ),
        Some(node) => match &node.kind {
            NodeKind::Seq(items) => {
                *rule_count = items.len();
                if items.len() > MAX_RULES {
                    sink.error(
                        Code::TooManyRules,
                        node,
                        "rules",
                        format!(
                            "{} rules, more than the {MAX_RULES} a policy may hold; merge rules \
                             that differ only in one field into lists",
                            items.len()
                        ),
                    );
                }
                let mut seen: HashMap<String, Pos> = HashMap::new();
                // Past the bound the file is invalid already: reading more would only cost memory.
                for (i, item) in items.iter().enumerate().take(MAX_RULES) {
                    if let Some(rule) = read_rule(item, i, &mut seen, sink) {
                        rules.push(rule);
                    }
                }
            }
            _ => sink.wrong_type(node, "rules", "a list of rules"),
        },
    }

    let call_limits = match map.take("call_limits") {
        None => Vec::new(),
        Some(node) => {
            if let NodeKind::Map(entries) = &node.kind {
                *call_limit_count = entries.len();
            }
            read_call_limits(node, sink)
        }
    };

    map.finish(TOP_FIELDS, sink);
    Some(Policy {
        default,
        rules,
        call_limits,
    })
}

const RULE_ID: EntryKey = EntryKey {
    field: "id",
    is_valid: is_rule_id,
    missing: "missing `id`; give the rule a unique id such as `github-read`",
    invalid: (
        Code::InvalidRuleId,
        "a rule id is 1-64 characters of a-z, 0-9, `.`, `_` and `-`, starting with a letter or \
         digit, such as `github-read`",
    ),
    duplicate: (
        Code::DuplicateRuleId,
        "rule id already used",
        "rename one of the rules",
    ),
};

fn read_rule(
    node: &Node,
    index: usize,
    seen: &mut HashMap<String, Pos>,
    outer: &mut Sink<'_>,
) -> Option<Rule> {
    let base = format!("rules[{index}]");
    let mut map = MapReader::new(node, &base, outer)?;

    // The id comes first: every later finding is attributed to it.
    let id = entry_key(&mut map, &RULE_ID, seen, outer);

    // Paths are relative to the rule when it has an id, absolute otherwise.
    let prefix = if id.is_some() {
        String::new()
    } else {
        base.clone()
    };
    map.rebase(&prefix);
    let mut sink = Sink {
        diagnostics: &mut *outer.diagnostics,
        subject: id.clone(),
    };
    let sink = &mut sink;

    let description = map.take("description").and_then(|n| {
        let text = string(n, &join(&prefix, "description"), sink)?;
        if text.chars().count() > 1024 {
            sink.error(
                Code::WrongType,
                n,
                &join(&prefix, "description"),
                "a description is at most 1024 characters; shorten it",
            );
        }
        Some(text.to_owned())
    });

    let effect = match map.take("effect") {
        None => {
            sink.error(
                Code::MissingField,
                node,
                &prefix,
                "missing `effect`; write `effect: allow`, `effect: deny`, `effect: limit` or \
                 `effect: approve`",
            );
            None
        }
        Some(n) => match n.value() {
            Some(Value::Str("allow")) => Some(Effect::Allow),
            Some(Value::Str("deny")) => Some(Effect::Deny),
            Some(Value::Str("limit")) => Some(Effect::Limit),
            Some(Value::Str("approve")) => Some(Effect::Approve),
            _ => {
                sink.error(
                    Code::InvalidEffect,
                    n,
                    &join(&prefix, "effect"),
                    "`effect` is `allow`, `deny`, `limit` or `approve`",
                );
                None
            }
        },
    };

    let match_path = join(&prefix, "match");
    let matcher = match map.take("match") {
        None => Match::default(),
        Some(n) => read_match(n, &match_path, sink),
    };
    let admits = effect.is_some_and(Effect::admits);
    if admits {
        let uses_alias = matcher.alias.as_ref().is_some_and(|a| !a.is_empty());
        let wildcard = matcher.host.iter().flatten().any(HostPattern::is_wildcard);
        if uses_alias && wildcard {
            sink.error(
                Code::AliasWildcardHost,
                map.take("match").unwrap_or(node),
                &join(&match_path, "host"),
                "this rule lets a secret travel to any host under a wildcard; list the exact \
                 hosts unless every one of them is trusted with it",
            );
        }
    }

    let mut inject = SiteSet::HEADER;
    if let Some(n) = map.take("inject") {
        let path = join(&prefix, "inject");
        if admits {
            inject = SiteSet::EMPTY;
            for site in read_list(n, &path, sink, read_site) {
                inject = inject.with(site);
            }
            if !inject.is_subset(SiteSet::HEADER) {
                sink.error(
                    Code::InjectBeyondHeader,
                    n,
                    &path,
                    "secrets in the query or body are easier to leak (logs, echoes, caches); \
                     keep `inject: [header]` unless the API accepts nothing else",
                );
            }
        } else if let Some(effect) = effect {
            not_for_effect(sink, n, &path, "inject", effect);
        }
    }

    let mut allow_private = false;
    if let Some(n) = map.take("allow_private") {
        let path = join(&prefix, "allow_private");
        if admits {
            allow_private = boolean(n, &path, sink).unwrap_or(false);
            if allow_private {
                sink.error(
                    Code::AllowPrivate,
                    n,
                    &path,
                    "this rule may reach private, link-local and CGNAT addresses, where internal \
                     services live; keep it only for hosts you know resolve there",
                );
            }
        } else if let Some(effect) = effect {
            not_for_effect(sink, n, &path, "allow_private", effect);
        }
    }

    let mut limits = Vec::new();
    if let Some(n) = map.take("limits") {
        let path = join(&prefix, "limits");
        if effect == Some(Effect::Deny) {
            not_for_effect(sink, n, &path, "limits", Effect::Deny);
        } else {
            limits = read_limits(n, &path, sink);
        }
    } else if effect == Some(Effect::Limit) {
        sink.error(
            Code::LimitRuleWithoutLimits,
            node,
            &prefix,
            "a limit rule needs `limits`, such as `limits: [{ max: 100, per: 1h }]`",
        );
    }

    let approval = match (map.take("approval"), effect) {
        (Some(n), Some(Effect::Approve)) => {
            Some(read_approval(n, &join(&prefix, "approval"), sink))
        }
        (None, Some(Effect::Approve)) => Some(Approval::default()),
        (Some(n), Some(effect)) => {
            not_for_effect(sink, n, &join(&prefix, "approval"), "approval", effect);
            None
        }
        // No effect: already an error; a non-approve rule without `approval` has none.
        (_, None) | (None, Some(_)) => None,
    };

    if let Some(effect) = effect.filter(|e| e.admits()) {
        if matcher.host.is_none() {
            sink.error(
                Code::AllowWithoutHost,
                node,
                &prefix,
                format!(
                    "an {} rule must name its hosts: add `match: {{ host: [api.example.com] }}`",
                    effect.as_str()
                ),
            );
        }
        let scheme_node = map
            .take("match")
            .and_then(|m| child(m, "scheme"))
            .unwrap_or(node);
        check_plain_http(&matcher, scheme_node, &match_path, sink);
    }

    map.finish(RULE_FIELDS, sink);
    Some(Rule {
        id: id?,
        description,
        effect: effect?,
        matcher,
        inject,
        allow_private,
        limits,
        approval,
        pos: node.pos(),
    })
}

/// Reads an approve rule's `approval` block: `{ timeout: 120s }`, every field optional.
fn read_approval(node: &Node, path: &str, sink: &mut Sink<'_>) -> Approval {
    let mut approval = Approval::default();
    let Some(mut map) = MapReader::new(node, path, sink) else {
        return approval;
    };
    if let Some(n) = map.take("timeout") {
        let p = map.path_of("timeout");
        let parsed = match n.value() {
            Some(Value::Str(text)) => parse_duration(text),
            _ => None,
        };
        match parsed {
            None => sink.error(
                Code::InvalidDuration,
                n,
                &p,
                format!(
                    "an approval timeout is a whole number with a unit (ms, s, m, h, d or w), \
                     from {}s to {}s, such as `120s` or `2m`",
                    MIN_APPROVAL_TIMEOUT.as_secs(),
                    MAX_APPROVAL_TIMEOUT.as_secs()
                ),
            ),
            Some(timeout) if !(MIN_APPROVAL_TIMEOUT..=MAX_APPROVAL_TIMEOUT).contains(&timeout) => {
                sink.error(
                    Code::ApprovalTimeoutOutOfRange,
                    n,
                    &p,
                    format!(
                        "an approval timeout is at most {max}s, below the request timeouts of \
                         common HTTP and MCP clients, so that the agent is still waiting when the \
                         decision comes; write `{max}s` or less",
                        max = MAX_APPROVAL_TIMEOUT.as_secs()
                    ),
                );
            }
            Some(timeout) => approval.timeout = timeout,
        }
    }
    map.finish(APPROVAL_FIELDS, sink);
    approval
}

/// The value of `key` in a mapping node.
fn child<'n>(node: &'n Node, key: &str) -> Option<&'n Node> {
    match &node.kind {
        NodeKind::Map(entries) => entries
            .iter()
            .find(|(k, _)| matches!(&k.kind, NodeKind::Scalar { text, .. } if &**text == key))
            .map(|(_, v)| v),
        _ => None,
    }
}

fn not_for_effect(sink: &mut Sink<'_>, node: &Node, path: &str, field: &str, effect: Effect) {
    let allowed = match field {
        "limits" => "allow, approve and limit rules",
        "approval" => "approve rules",
        _ => "allow and approve rules",
    };
    sink.error(
        Code::FieldNotAllowedForEffect,
        node,
        path,
        format!(
            "`{field}` belongs to {allowed}, not to {} {} rule; remove it",
            match effect {
                Effect::Allow | Effect::Approve => "an",
                Effect::Deny | Effect::Limit => "a",
            },
            effect.as_str()
        ),
    );
}

/// `http` upstream is only for loopback targets, which an allow or approve rule names literally.
fn check_plain_http(matcher: &Match, node: &Node, path: &str, sink: &mut Sink<'_>) {
    let plain = matcher
        .scheme
        .as_ref()
        .is_some_and(|s| s.contains(&Scheme::Http));
    if !plain {
        return;
    }
    let hosts = matcher.host.as_deref().unwrap_or_default();
    // The host is named by its place in the list, not quoted: a valid host name can still be a
    // token pasted into the wrong field (a hex API key is a valid one-label name).
    let listed = hosts.len() > 1;
    for (i, host) in hosts.iter().enumerate() {
        let loopback = matches!(host, HostPattern::Exact(h) if h.is_loopback());
        if !loopback {
            let which = if listed {
                format!("host {} of `match.host`", i + 1)
            } else {
                "`match.host`".to_owned()
            };
            sink.error(
                Code::PlainHttpNonLoopback,
                node,
                &join(path, "scheme"),
                format!(
                    "`http` is only for loopback hosts (127.0.0.1, ::1, localhost), and {which} \
                     is not one; use `https`, or move the loopback hosts to their own rule"
                ),
            );
        }
    }
}

fn read_match(node: &Node, path: &str, sink: &mut Sink<'_>) -> Match {
    let Some(mut map) = MapReader::new(node, path, sink) else {
        return Match::default();
    };
    let mut m = Match::default();
    for key in MATCH_FIELDS {
        let Some(n) = map.take(key) else { continue };
        let p = map.path_of(key);
        match *key {
            "agent" => m.agent = Some(read_list(n, &p, sink, read_agent)),
            "alias" => m.alias = Some(read_list(n, &p, sink, read_alias_ref)),
            "scheme" => m.scheme = Some(read_list(n, &p, sink, read_scheme)),
            "host" => m.host = Some(read_list(n, &p, sink, read_host_pattern)),
            "port" => m.port = Some(read_list(n, &p, sink, read_port)),
            "method" => m.method = Some(read_list(n, &p, sink, read_method)),
            "path" => m.path = Some(read_list(n, &p, sink, read_path_glob)),
            _ => m.tool = Some(read_list(n, &p, sink, read_tool)),
        }
    }
    map.finish(MATCH_FIELDS, sink);
    m
}

/// Reads a list field (a scalar is a one-item list) item by item; an empty list is refused,
/// since it would match nothing in an allow rule and everything-or-nothing is unclear elsewhere.
fn read_list<T>(
    node: &Node,
    path: &str,
    sink: &mut Sink<'_>,
    mut item: impl FnMut(&Node, &str, &mut Sink<'_>) -> Option<T>,
) -> Vec<T> {
    if let NodeKind::Seq(items) = &node.kind
        && items.is_empty()
    {
        sink.error(
            Code::EmptyList,
            node,
            path,
            "an empty list matches nothing; list at least one value, or remove the field",
        );
    }
    if let NodeKind::Map(_) = node.kind {
        sink.wrong_type(node, path, "a value or a list of values");
        return Vec::new();
    }
    list(node)
        .into_iter()
        .filter_map(|(i, n)| {
            let p = item_path(path, i, node);
            if let NodeKind::Seq(_) | NodeKind::Map(_) = n.kind {
                sink.wrong_type(n, &p, "a single value");
                return None;
            }
            item(n, &p, sink)
        })
        .collect()
}

fn read_agent(node: &Node, path: &str, sink: &mut Sink<'_>) -> Option<NameGlob> {
    let text = string(node, path, sink)?;
    let glob = NameGlob::parse(text, is_agent_byte);
    if glob.is_none() {
        sink.error(
            Code::InvalidAgentGlob,
            node,
            path,
            "an agent glob is 1-128 characters of letters, digits, `.`, `_`, `-` and single `*`, \
             such as `ci-*`",
        );
    }
    glob
}

fn read_tool(node: &Node, path: &str, sink: &mut Sink<'_>) -> Option<NameGlob> {
    let text = string(node, path, sink)?;
    let glob = NameGlob::parse(text, is_tool_byte);
    if glob.is_none() {
        sink.error(
            Code::InvalidToolGlob,
            node,
            path,
            "a tool glob is 1-128 characters of letters, digits, `.`, `_`, `-`, `/` and single \
             `*`, such as `query-docs` or `*`",
        );
    }
    glob
}

fn read_alias_ref(node: &Node, path: &str, sink: &mut Sink<'_>) -> Option<String> {
    let text = string(node, path, sink)?;
    if is_alias_name(text) {
        Some(text.to_owned())
    } else {
        sink.error(
            Code::InvalidAliasName,
            node,
            path,
            "an alias name is 1-64 characters of a-z, 0-9, `_` and `-`, starting with a letter or \
             digit, as declared in aliases.yaml",
        );
        None
    }
}

fn read_scheme(node: &Node, path: &str, sink: &mut Sink<'_>) -> Option<Scheme> {
    match node.value() {
        Some(Value::Str("https")) => Some(Scheme::Https),
        Some(Value::Str("http")) => Some(Scheme::Http),
        _ => {
            sink.error(
                Code::InvalidScheme,
                node,
                path,
                "a scheme is `https`, or `http` for loopback hosts; write it in lowercase",
            );
            None
        }
    }
}

fn read_host_pattern(node: &Node, path: &str, sink: &mut Sink<'_>) -> Option<HostPattern> {
    let text = string(node, path, sink)?;
    match HostPattern::parse(text) {
        Ok(pattern) => Some(pattern),
        Err(e) => {
            let (code, message) = host_pattern_problem(text, &e);
            sink.error(code, node, path, message);
            None
        }
    }
}

/// The code and message for a refused host pattern; shared with the alias file.
pub(crate) fn host_pattern_problem(text: &str, e: &HostPatternError) -> (Code, String) {
    match e {
        HostPatternError::NotLeadingLabel => (
            Code::WildcardNotLeadingLabel,
            "'*' must be a whole leading label, e.g. \"*.github.com\"".to_owned(),
        ),
        HostPatternError::TooBroad => (
            Code::WildcardTooBroad,
            "a wildcard must keep at least two labels after `*.`, e.g. \"*.github.com\", never \
             \"*.com\" or \"*\""
                .to_owned(),
        ),
        // The canonical form is never quoted: it is the text itself, lowercased (a pasted
        // SendGrid key or JWT has dots and reads as a host name), so the message names what to
        // change instead.
        HostPatternError::NotCanonical { canonical } => (
            Code::HostNotCanonical,
            format!(
                "hosts are written in canonical form; {}",
                canonical_fix(text, canonical)
            ),
        ),
        HostPatternError::Invalid { reason } => (
            Code::InvalidHost,
            format!(
                "not a host name or IP address ({reason}); write a bare host such as \"api.github.com\", with the port under `port`"
            ),
        ),
    }
}

/// What to change so that `text` becomes its canonical form, without quoting either.
fn canonical_fix(text: &str, canonical: &str) -> String {
    let bare = canonical.strip_prefix("*.").unwrap_or(canonical);
    if let Ok(ip) = bare.parse::<std::net::IpAddr>() {
        return if text.starts_with('[') {
            "remove the brackets around the IPv6 address".to_owned()
        } else if ip.is_ipv4() && text.contains(':') {
            "write an IPv4-mapped IPv6 address as IPv4, in four decimal numbers".to_owned()
        } else if ip.is_ipv4() {
            "write an IPv4 address as four decimal numbers".to_owned()
        } else {
            "write an IPv6 address in its shortest lowercase form (RFC 5952)".to_owned()
        };
    }
    let mut fixes = Vec::new();
    if text.bytes().any(|b| b.is_ascii_uppercase()) {
        fixes.push("write it in lowercase");
    }
    if !text.is_ascii() {
        fixes.push("write internationalized labels in punycode (`xn--`)");
    }
    if text.ends_with('.') {
        fixes.push("remove the trailing dot");
    }
    if fixes.is_empty() {
        fixes.push("write it lowercase, in punycode, without a trailing dot");
    }
    fixes.join(", ")
}

fn read_port(node: &Node, path: &str, sink: &mut Sink<'_>) -> Option<u16> {
    let value = integer(node, path, sink)?;
    match u16::try_from(value) {
        Ok(port) if port > 0 => Some(port),
        _ => {
            sink.error(
                Code::InvalidPort,
                node,
                path,
                "a port is between 1 and 65535",
            );
            None
        }
    }
}

/// Methods registered with IANA that APIs use; others load with a warning (W007), since a typo
/// in a deny rule (`DELET`) would otherwise match nothing without a word.
const KNOWN_METHODS: &[&str] = &[
    "GET",
    "HEAD",
    "POST",
    "PUT",
    "DELETE",
    "CONNECT",
    "OPTIONS",
    "TRACE",
    "PATCH",
    "QUERY",
    "PROPFIND",
    "PROPPATCH",
    "MKCOL",
    "COPY",
    "MOVE",
    "LOCK",
    "UNLOCK",
    "SEARCH",
    "REPORT",
    "MKCALENDAR",
    "ACL",
    "BIND",
    "UNBIND",
    "REBIND",
    "LINK",
    "UNLINK",
    "MERGE",
    "CHECKOUT",
    "CHECKIN",
    "UPDATE",
    "LABEL",
    "MKACTIVITY",
    "MKWORKSPACE",
    "VERSION-CONTROL",
    "BASELINE-CONTROL",
    "ORDERPATCH",
    "MKREDIRECTREF",
    "UPDATEREDIRECTREF",
];

fn read_method(node: &Node, path: &str, sink: &mut Sink<'_>) -> Option<String> {
    let text = string(node, path, sink)?;
    let token = !text.is_empty()
        && text.len() <= 32
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    let starts_with_letter = text.bytes().next().is_some_and(|b| b.is_ascii_alphabetic());
    if token && starts_with_letter && text.bytes().all(|b| !b.is_ascii_lowercase()) {
        if !KNOWN_METHODS.contains(&text) {
            // Only a registered method is quoted back: the text itself could be anything.
            let hint = crate::fields::closest(text, KNOWN_METHODS)
                .map(|m| format!("; did you mean `{m}`?"))
                .unwrap_or_default();
            sink.error(
                Code::UnknownMethod,
                node,
                path,
                format!("not a registered HTTP method, so it may match no request{hint}"),
            );
        }
        return Some(text.to_owned());
    }
    let upper = text.to_ascii_uppercase();
    let message = if KNOWN_METHODS.contains(&upper.as_str()) {
        format!("methods match byte-exact and are uppercase: write `{upper}`")
    } else {
        "a method is an uppercase HTTP method such as `GET` or `POST`".to_owned()
    };
    sink.error(Code::InvalidMethod, node, path, message);
    None
}

fn read_path_glob(node: &Node, path: &str, sink: &mut Sink<'_>) -> Option<PathGlob> {
    let text = string(node, path, sink)?;
    match PathGlob::parse(text) {
        Ok(glob) => Some(glob),
        Err(e) => {
            let hint = match e {
                PathGlobError::NotAbsolute => "; write it as `/repos/**`",
                _ => "",
            };
            sink.error(Code::InvalidPathGlob, node, path, format!("{e}{hint}"));
            None
        }
    }
}

fn read_site(node: &Node, path: &str, sink: &mut Sink<'_>) -> Option<Site> {
    let site = match node.value() {
        Some(Value::Str(text)) => Site::parse(text),
        _ => None,
    };
    if site.is_none() {
        sink.error(
            Code::InvalidSite,
            node,
            path,
            "a site is `header`, `query` or `body`",
        );
    }
    site
}

fn read_limits(node: &Node, path: &str, sink: &mut Sink<'_>) -> Vec<Limit> {
    let NodeKind::Seq(items) = &node.kind else {
        sink.wrong_type(
            node,
            path,
            "a list of limits such as `[{ max: 100, per: 1h }]`",
        );
        return Vec::new();
    };
    if items.is_empty() {
        sink.error(
            Code::EmptyList,
            node,
            path,
            "an empty `limits` list limits nothing; add a limit or remove the field",
        );
    }
    let mut limits = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let item_path = format!("{path}[{i}]");
        let Some(mut map) = MapReader::new(item, &item_path, sink) else {
            continue;
        };
        let max = match map.take("max") {
            None => {
                sink.error(
                    Code::MissingField,
                    item,
                    &item_path,
                    "missing `max`; add `max: 100`",
                );
                None
            }
            Some(n) => {
                let p = map.path_of("max");
                integer(n, &p, sink).and_then(|v| match u64::try_from(v) {
                    Ok(v) if (1..=MAX_LIMIT).contains(&v) => Some(v),
                    _ => {
                        sink.error(
                            Code::InvalidLimitMax,
                            n,
                            &p,
                            format!("`max` is a whole number from 1 to {MAX_LIMIT}"),
                        );
                        None
                    }
                })
            }
        };
        let per = match map.take("per") {
            None => {
                sink.error(
                    Code::MissingField,
                    item,
                    &item_path,
                    "missing `per`; add `per: 1h`",
                );
                None
            }
            Some(n) => {
                let p = map.path_of("per");
                // A window is whole seconds: counters and `Retry-After` count in them.
                let parsed = match n.value() {
                    Some(Value::Str(text)) => parse_duration(text)
                        .filter(|per| per.subsec_nanos() == 0 && per.as_secs() > 0),
                    _ => None,
                };
                if parsed.is_none() {
                    sink.error(
                        Code::InvalidDuration,
                        n,
                        &p,
                        format!("a duration is {DURATION_HINT}, and a window at least `1s`"),
                    );
                }
                parsed
            }
        };
        let mut by = Vec::new();
        if let Some(n) = map.take("by") {
            let p = map.path_of("by");
            for key in read_list(n, &p, sink, read_limit_key) {
                if by.contains(&key) {
                    sink.error(Code::InvalidLimitBy, n, &p, "each key appears once in `by`");
                } else {
                    by.push(key);
                }
            }
            by.sort();
        }
        map.finish(LIMIT_FIELDS, sink);
        if let (Some(max), Some(per)) = (max, per) {
            limits.push(Limit { max, per, by });
        }
    }
    limits
}

fn read_limit_key(node: &Node, path: &str, sink: &mut Sink<'_>) -> Option<LimitKey> {
    let key = match node.value() {
        Some(Value::Str(text)) => LimitKey::parse(text),
        _ => None,
    };
    if key.is_none() {
        sink.error(
            Code::InvalidLimitBy,
            node,
            path,
            "`by` lists some of `agent`, `alias`, `host` and `tool`",
        );
    }
    key
}

fn read_call_limits(node: &Node, sink: &mut Sink<'_>) -> Vec<CallLimit> {
    let NodeKind::Map(entries) = &node.kind else {
        sink.wrong_type(
            node,
            "call_limits",
            "a mapping of alias or `tool:NAME` to a daily count",
        );
        return Vec::new();
    };
    let mut out = Vec::new();
    for (key_node, value) in entries {
        let text = match key_node.value() {
            Some(Value::Str(t)) => t,
            _ => "",
        };
        let key = match text.strip_prefix("tool:") {
            Some(tool)
                if !tool.is_empty() && tool.len() <= 128 && tool.bytes().all(is_tool_byte) =>
            {
                Some(CallLimitKey::Tool(tool.to_owned()))
            }
            None if is_alias_name(text) => Some(CallLimitKey::Alias(text.to_owned())),
            _ => None,
        };
        // The key is never put in the path or a message: an alias-shaped or `tool:` key can be
        // a token pasted into the wrong place (`tool:ghp_...`). The position says which entry.
        let path = "call_limits";
        if key.is_none() {
            sink.error(
                Code::InvalidCallLimit,
                key_node,
                path,
                "a `call_limits` key is an alias name or `tool:` and an MCP tool name",
            );
        }
        let max = match value.value() {
            Some(Value::Int(v)) => u64::try_from(v)
                .ok()
                .filter(|v| (1..=MAX_LIMIT).contains(v)),
            _ => None,
        };
        if max.is_none() {
            sink.error(
                Code::InvalidCallLimit,
                value,
                path,
                format!("a call limit is a whole number of calls per day, from 1 to {MAX_LIMIT}"),
            );
        }
        if let (Some(key), Some(max)) = (key, max) {
            if !sink.shows(key_node) {
                sink.skip(Code::LegacyCallLimits);
                out.push(CallLimit { key, max });
                continue;
            }
            let matcher = match &key {
                CallLimitKey::Alias(_) => "alias: [ALIAS]",
                CallLimitKey::Tool(_) => "tool: [TOOL]",
            };
            let subject = match &key {
                CallLimitKey::Alias(_) => "ALIAS is this entry's alias",
                CallLimitKey::Tool(_) => "TOOL is the tool name after `tool:`",
            };
            sink.error(
                Code::LegacyCallLimits,
                key_node,
                path,
                format!(
                    "`call_limits` is legacy; write the rule `{{ id: NAME-daily, effect: limit, \
                     match: {{ {matcher} }}, limits: [{{ max: COUNT, per: 1d }}] }}` instead, \
                     where {subject} and COUNT its daily count"
                ),
            );
            out.push(CallLimit { key, max });
        }
    }
    out
}

/// Warnings that need the whole policy: allow and approve rules that a deny rule always
/// overrides (both read omitted fields the same narrow way, so one check covers them).
///
/// Each allow rule is compared only with the deny rules that could cover its first host (found
/// through an index of the deny rules' host patterns, plus those without hosts), and each
/// comparison looks its items up in sets, so a policy of many rules or long lists costs about
/// its size. What is still pairwise (wildcard globs against names) counts against
/// `SHADOW_CHECK_BUDGET`; past it the check stops and says so (W008): a missing warning is
/// allowed by the check's contract, a wrong one is not.
fn add_warnings(policy: &Policy, out: &mut Findings) {
    let index = DenyIndex::new(&policy.rules);
    let mut budget = SHADOW_CHECK_BUDGET;
    let mut candidates = Vec::new();
    for allow in policy.rules.iter().filter(|r| r.effect.admits()) {
        let found = index
            .candidates(&allow.matcher, &mut candidates, &mut budget)
            .and_then(|()| {
                let mut found = None;
                for deny in candidates.iter().filter_map(|&i| index.denies.get(i)) {
                    if deny.shadows(&allow.matcher, &mut budget)? {
                        found = Some(deny.rule);
                        break;
                    }
                }
                Some(found)
            });
        match found {
            None => {
                out.push(
                    Diagnostic::new(
                        Code::ShadowCheckIncomplete,
                        allow.pos,
                        "",
                        "the policy is too large to check fully for allow and approve rules that \
                         a deny rule overrides; this rule and the ones after it were not checked",
                    )
                    .in_rule(Some(&allow.id)),
                );
                return;
            }
            Some(None) => {}
            Some(Some(deny)) => out.push(
                Diagnostic::new(
                    Code::AllowShadowedByDeny,
                    allow.pos,
                    "",
                    match allow.effect {
                        Effect::Approve => format!(
                            "deny rule \"{}\" (line {}) matches every request this rule holds for \
                             approval, so it never holds anything; narrow the deny rule or remove \
                             this one",
                            deny.id, deny.pos.line
                        ),
                        _ => format!(
                            "deny rule \"{}\" (line {}) matches every request this rule allows, so \
                             it never allows anything; narrow the deny rule or remove this one",
                            deny.id, deny.pos.line
                        ),
                    },
                )
                .in_rule(Some(&allow.id)),
            ),
        }
    }
}

/// Units of work the shadow check may spend: one per deny rule considered for an allow rule,
/// per host of the allow rule looked up, and per glob compared with a wildcard glob. About a
/// tenth of a second; far above what a written policy needs (10,000 allow rules against 100 deny
/// rules without hosts cost 1,000,000).
const SHADOW_CHECK_BUDGET: usize = 2_000_000;

/// Takes `units` from the budget, or `None` when it is spent.
fn spend(budget: &mut usize, units: usize) -> Option<()> {
    *budget = budget.checked_sub(units)?;
    Some(())
}

/// The deny rules that can shadow anything (those without `alias`), with their lists as sets.
struct DenyIndex<'p> {
    denies: Vec<DenyView<'p>>,
    /// Deny rules without `host`, by position in `denies`.
    hostless: Vec<usize>,
    /// Deny rules by each exact host they list.
    by_exact: HashMap<&'p Host, Vec<usize>>,
    /// Deny rules by the suffix of each wildcard they list.
    by_wildcard: HashMap<&'p str, Vec<usize>>,
}

// === impl DenyIndex ===

impl<'p> DenyIndex<'p> {
    fn new(rules: &'p [Rule]) -> Self {
        let mut index = DenyIndex {
            denies: Vec::new(),
            hostless: Vec::new(),
            by_exact: HashMap::new(),
            by_wildcard: HashMap::new(),
        };
        // A deny rule naming aliases does not match requests without one, which every allow
        // rule admits: it never shadows.
        for rule in rules
            .iter()
            .filter(|r| r.effect == Effect::Deny && r.matcher.alias.is_none())
        {
            let i = index.denies.len();
            match &rule.matcher.host {
                None => index.hostless.push(i),
                Some(hosts) => {
                    for host in hosts {
                        let bucket = match host {
                            HostPattern::Exact(h) => index.by_exact.entry(h).or_default(),
                            HostPattern::Wildcard { suffix } => {
                                index.by_wildcard.entry(suffix).or_default()
                            }
                        };
                        // A host listed twice in one rule files it once.
                        if bucket.last() != Some(&i) {
                            bucket.push(i);
                        }
                    }
                }
            }
            index.denies.push(DenyView::new(rule));
        }
        index
    }

    /// The deny rules that may shadow `allow`, in file order: a shadowing rule must cover the
    /// allow rule's first host, so it lists that host, a wildcard above it, or no host.
    fn candidates(&self, allow: &Match, out: &mut Vec<usize>, budget: &mut usize) -> Option<()> {
        out.clear();
        out.extend_from_slice(&self.hostless);
        if let Some(first) = allow.host.as_ref().and_then(|h| h.first()) {
            let name = match first {
                HostPattern::Exact(host) => {
                    if let Some(bucket) = self.by_exact.get(host) {
                        out.extend_from_slice(bucket);
                    }
                    match host {
                        Host::Name(name) => Some(name.as_str()),
                        Host::V4(_) | Host::V6(_) => None,
                    }
                }
                HostPattern::Wildcard { suffix } => {
                    if let Some(bucket) = self.by_wildcard.get(suffix.as_str()) {
                        out.extend_from_slice(bucket);
                    }
                    Some(suffix.as_str())
                }
            };
            for suffix in name.into_iter().flat_map(label_suffixes) {
                if let Some(bucket) = self.by_wildcard.get(suffix) {
                    out.extend_from_slice(bucket);
                }
            }
        }
        spend(budget, out.len())?;
        out.sort_unstable();
        out.dedup();
        Some(())
    }
}

/// Every proper suffix of `name` that starts after a dot: `a.b.c` gives `b.c` and `c`.
fn label_suffixes(name: &str) -> impl Iterator<Item = &str> {
    name.match_indices('.')
        .filter_map(move |(i, _)| name.get(i + 1..))
}

/// One deny rule with its lists as sets, for coverage checks that cost one lookup per item.
struct DenyView<'p> {
    rule: &'p Rule,
    agent: Option<GlobSet<'p, NameGlob>>,
    /// `None` when the rule has no `host`.
    hosts: Option<HostSet<'p>>,
    ports: Option<HashSet<u16>>,
    methods: Option<HashSet<&'p str>>,
    path: Option<GlobSet<'p, PathGlob>>,
    tool: Option<GlobSet<'p, NameGlob>>,
}

/// A deny rule's host patterns: exact hosts, and the suffixes of its wildcards.
struct HostSet<'p> {
    exact: HashSet<&'p Host>,
    wildcard: HashSet<&'p str>,
}

/// A list of globs: their texts as a set, and the ones with a wildcard for pairwise checks.
struct GlobSet<'p, G> {
    universal: bool,
    texts: HashSet<&'p str>,
    patterns: Vec<&'p G>,
}

// === impl DenyView ===

impl<'p> DenyView<'p> {
    fn new(rule: &'p Rule) -> Self {
        let m = &rule.matcher;
        DenyView {
            rule,
            agent: m
                .agent
                .as_deref()
                .map(|g| GlobSet::new(g, "*", NameGlob::as_str, NameGlob::is_literal)),
            hosts: m.host.as_ref().map(|hosts| {
                let mut set = HostSet {
                    exact: HashSet::new(),
                    wildcard: HashSet::new(),
                };
                for host in hosts {
                    match host {
                        HostPattern::Exact(h) => set.exact.insert(h),
                        HostPattern::Wildcard { suffix } => set.wildcard.insert(suffix.as_str()),
                    };
                }
                set
            }),
            ports: m.port.as_ref().map(|p| p.iter().copied().collect()),
            methods: m
                .method
                .as_ref()
                .map(|v| v.iter().map(String::as_str).collect()),
            path: m
                .path
                .as_deref()
                .map(|g| GlobSet::new(g, "/**", PathGlob::as_str, |g| !g.as_str().contains('*'))),
            tool: m
                .tool
                .as_deref()
                .map(|g| GlobSet::new(g, "*", NameGlob::as_str, NameGlob::is_literal)),
        }
    }

    /// Whether this deny rule matches every request `allow` admits, or `None` when the budget
    /// ran out first. Same rules as the pairwise check it replaced (kept in the tests as
    /// `reference_shadows`); cheap fields first, each answer as soon as one field fails.
    fn shadows(&self, allow: &Match, budget: &mut usize) -> Option<bool> {
        spend(budget, 1)?;
        let allow_schemes = allow.scheme.as_deref().unwrap_or(&[Scheme::Https]);
        let deny = &self.rule.matcher;
        let scheme = deny
            .scheme
            .as_ref()
            .is_none_or(|d| allow_schemes.iter().all(|s| d.contains(s)));
        let port = || match &self.ports {
            None => true,
            Some(d) => match &allow.port {
                Some(a) => a.iter().all(|p| d.contains(p)),
                None => allow_schemes.iter().all(|s| d.contains(&s.default_port())),
            },
        };
        let method = || match (&self.methods, &allow.method) {
            (None, _) => true,
            (Some(_), None) => false,
            (Some(d), Some(a)) => a.iter().all(|m| d.contains(m.as_str())),
        };
        if !(scheme && port() && method()) {
            return Some(false);
        }
        let host = match (&self.hosts, &allow.host) {
            (None, _) => true,
            (Some(_), None) => false,
            (Some(d), Some(a)) => {
                let mut all = true;
                for h in a {
                    spend(budget, 1)?;
                    if !d.covers(h) {
                        all = false;
                        break;
                    }
                }
                all
            }
        };
        if !host {
            return Some(false);
        }
        let agent = match (&self.agent, &allow.agent) {
            (None, _) => true,
            (Some(d), None) => d.universal,
            (Some(d), Some(a)) => d.covers_all(
                a,
                NameGlob::as_str,
                NameGlob::is_literal,
                |a, d| a.covered_by(d),
                budget,
            )?,
        };
        if !agent {
            return Some(false);
        }
        let path = match (&self.path, &allow.path) {
            (None, _) => true,
            (Some(d), None) => d.universal,
            (Some(d), Some(a)) => d.covers_all(
                a,
                PathGlob::as_str,
                |g| !g.as_str().contains('*'),
                |a, d| a.covered_by(d),
                budget,
            )?,
        };
        if !path {
            return Some(false);
        }
        let tool = match (&self.tool, &allow.tool) {
            (None, _) => true,
            (Some(_), None) => false,
            (Some(d), Some(a)) => d.covers_all(
                a,
                NameGlob::as_str,
                NameGlob::is_literal,
                |a, d| a.covered_by(d),
                budget,
            )?,
        };
        Some(tool)
    }
}

// === impl HostSet ===

impl HostSet<'_> {
    /// Whether `allow` is covered: the same pattern, or a wildcard over one of its suffixes.
    fn covers(&self, allow: &HostPattern) -> bool {
        let name = match allow {
            HostPattern::Exact(host) => {
                if self.exact.contains(host) {
                    return true;
                }
                match host {
                    Host::Name(name) => name.as_str(),
                    Host::V4(_) | Host::V6(_) => return false,
                }
            }
            HostPattern::Wildcard { suffix } => {
                if self.wildcard.contains(suffix.as_str()) {
                    return true;
                }
                suffix.as_str()
            }
        };
        label_suffixes(name).any(|suffix| self.wildcard.contains(suffix))
    }
}

// === impl GlobSet ===

impl<'p, G> GlobSet<'p, G> {
    fn new(globs: &'p [G], universal: &str, text: fn(&G) -> &str, literal: fn(&G) -> bool) -> Self {
        GlobSet {
            universal: globs.iter().any(|g| text(g) == universal),
            texts: globs.iter().map(text).collect(),
            patterns: globs.iter().filter(|g| !literal(g)).collect(),
        }
    }

    /// Whether every allow glob is covered by one of these: a glob is covered by the universal
    /// one, by itself, and (when literal) by a wildcard glob that matches it.
    fn covers_all(
        &self,
        allow: &[G],
        text: fn(&G) -> &str,
        literal: fn(&G) -> bool,
        covered: impl Fn(&G, &G) -> bool,
        budget: &mut usize,
    ) -> Option<bool> {
        if self.universal {
            return Some(true);
        }
        for a in allow {
            if self.texts.contains(text(a)) {
                continue;
            }
            if !literal(a) {
                return Some(false);
            }
            let mut hit = false;
            for d in &self.patterns {
                *budget = budget.checked_sub(1)?;
                if covered(a, d) {
                    hit = true;
                    break;
                }
            }
            if !hit {
                return Some(false);
            }
        }
        Some(true)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// The shadow check as it was: every allow rule against every deny rule, every item against
    /// every item. The indexed check must find the same warnings.
    fn reference_warnings(policy: &Policy) -> Vec<(String, String)> {
        let denies: Vec<&Rule> = policy
            .rules
            .iter()
            .filter(|r| r.effect == Effect::Deny)
            .collect();
        let mut out = Vec::new();
        for allow in policy.rules.iter().filter(|r| r.effect.admits()) {
            if let Some(deny) = denies
                .iter()
                .find(|d| reference_shadows(&d.matcher, &allow.matcher))
            {
                out.push((allow.id.clone(), deny.id.clone()));
            }
        }
        out
    }

    fn reference_shadows(deny: &Match, allow: &Match) -> bool {
        fn each<T, U>(allow: &[T], deny: &[U], covered: impl Fn(&T, &U) -> bool) -> bool {
            allow.iter().all(|a| deny.iter().any(|d| covered(a, d)))
        }
        let allow_schemes = allow.scheme.clone().unwrap_or_else(|| vec![Scheme::Https]);
        let agent = match (&deny.agent, &allow.agent) {
            (None, _) => true,
            (Some(d), None) => d.iter().any(|g| g.as_str() == "*"),
            (Some(d), Some(a)) => each(a, d, |a, d| a.covered_by(d)),
        };
        let alias = deny.alias.is_none();
        let scheme = deny
            .scheme
            .as_ref()
            .is_none_or(|d| allow_schemes.iter().all(|s| d.contains(s)));
        let host = match (&deny.host, &allow.host) {
            (None, _) => true,
            (Some(_), None) => false,
            (Some(d), Some(a)) => each(a, d, reference_host_covered),
        };
        let port = match &deny.port {
            None => true,
            Some(d) => match &allow.port {
                Some(a) => a.iter().all(|p| d.contains(p)),
                None => allow_schemes.iter().all(|s| d.contains(&s.default_port())),
            },
        };
        let method = match (&deny.method, &allow.method) {
            (None, _) => true,
            (Some(_), None) => false,
            (Some(d), Some(a)) => a.iter().all(|m| d.contains(m)),
        };
        let path = match (&deny.path, &allow.path) {
            (None, _) => true,
            (Some(d), None) => d.iter().any(|g| g.as_str() == "/**"),
            (Some(d), Some(a)) => each(a, d, |a, d| a.covered_by(d)),
        };
        let tool = match (&deny.tool, &allow.tool) {
            (None, _) => true,
            (Some(_), None) => false,
            (Some(d), Some(a)) => each(a, d, |a, d| a.covered_by(d)),
        };
        agent && alias && scheme && host && port && method && path && tool
    }

    fn reference_host_covered(allow: &HostPattern, deny: &HostPattern) -> bool {
        match (allow, deny) {
            (a, d) if a == d => true,
            (HostPattern::Exact(host), d @ HostPattern::Wildcard { .. }) => d.matches(host),
            (HostPattern::Wildcard { suffix: a }, HostPattern::Wildcard { suffix: d }) => a
                .strip_suffix(d.as_str())
                .is_some_and(|rest| rest.ends_with('.')),
            _ => false,
        }
    }

    fn indexed_warnings(policy: &Policy) -> Vec<(String, String)> {
        let mut out = Findings::default();
        add_warnings(policy, &mut out);
        out.into_sorted()
            .iter()
            .map(|d| {
                assert_eq!(d.code, Code::AllowShadowedByDeny);
                let deny = d.message.split('"').nth(1).unwrap_or_default().to_owned();
                (d.rule_id.clone().unwrap_or_default(), deny)
            })
            .collect()
    }

    /// One optional field as YAML: absent, or a flow list of some of `values`.
    fn field(name: &'static str, values: &'static [&'static str]) -> impl Strategy<Value = String> {
        prop::option::of(prop::sample::subsequence(values, 1..=values.len().min(3))).prop_map(
            move |v| match v {
                None => String::new(),
                Some(items) => format!("{name}: [{}], ", items.join(", ")),
            },
        )
    }

    fn rule() -> impl Strategy<Value = String> {
        (
            prop::sample::select(&["allow", "approve", "deny"][..]),
            field("agent", &["mino", "'ci-*'", "'*'", "ci-a"]),
            field("alias", &["gh"]),
            field("scheme", &["https", "http"]),
            field(
                "host",
                &[
                    "a.x.com",
                    "b.x.com",
                    "'*.x.com'",
                    "c.a.x.com",
                    "'*.a.x.com'",
                    "127.0.0.1",
                    "x.com",
                ],
            ),
            field("port", &["443", "80", "8443"]),
            field("method", &["GET", "POST", "DELETE"]),
            field("path", &["'/**'", "/a", "'/a/*'", "'/a/**'", "/b"]),
            field("tool", &["q", "'*'", "'q*'"]),
        )
            .prop_map(|(effect, agent, alias, scheme, host, port, method, path, tool)| {
                // Approve rules read omitted fields as allow rules do.
                let allow = effect != "deny";
                // Allow rules need a host and loopback-only http: give them one when missing.
                let host = if allow && (host.is_empty() || !scheme.is_empty()) {
                    "host: [127.0.0.1], ".to_owned()
                } else {
                    host
                };
                format!(
                    "{{ effect: {effect}, match: {{ {agent}{alias}{scheme}{host}{port}{method}{path}{tool} }} }}"
                )
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(400))]

        #[test]
        fn indexed_shadow_check_agrees_with_pairwise(rules in prop::collection::vec(rule(), 1..12)) {
            let mut yaml = String::from("version: 1\nrules:\n");
            for (i, r) in rules.iter().enumerate() {
                yaml.push_str(&format!("  - {{ id: r{i}, {}\n", &r[1..]));
            }
            let load = load_policy(yaml.as_bytes(), "t");
            let Some(policy) = load.policy else {
                // Some generated rules are invalid (an empty match list, say): nothing to compare.
                return Ok(());
            };
            prop_assert_eq!(indexed_warnings(&policy), reference_warnings(&policy), "{}", yaml);
        }
    }

    #[test]
    fn shadow_check_stops_at_its_budget_and_says_so() {
        // Every allow rule is a candidate of every deny rule (same host) and no deny rule
        // covers it (another method): pairs beyond the budget are not compared.
        let mut yaml = String::from("version: 1\nrules:\n");
        for i in 0..4_000 {
            yaml.push_str(&format!(
                "  - {{ id: a{i}, effect: allow, match: {{ host: x.com, method: GET }} }}\n  - {{ id: d{i}, effect: deny, match: {{ host: x.com, method: POST }} }}\n"
            ));
        }
        let load = load_policy(yaml.as_bytes(), "t");
        assert!(load.policy.is_some());
        let incomplete: Vec<_> = load
            .diagnostics
            .iter()
            .filter(|d| d.code == Code::ShadowCheckIncomplete)
            .collect();
        assert_eq!(incomplete.len(), 1, "{:?}", load.diagnostics.first());
        assert!(
            load.diagnostics
                .iter()
                .all(|d| d.code != Code::AllowShadowedByDeny)
        );
    }
}
