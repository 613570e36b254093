//! Deny-overrides evaluation of a normalized request against a policy compiled into a host index.
//!
//! Runs after the broker has authenticated the capability, normalized the target and found the
//! placeholders; before any audit record or upstream byte. Infallible: every request gets a
//! decision, and anything the policy does not clearly allow is denied. Rule order never matters:
//! all matching rules are collected, then deny beats approve beats allow beats default. An
//! approve answer holds the request for the operator; nothing here waits or consumes a limit for
//! it (the broker admits the hold's charges once the request is approved and sent).

use std::borrow::Cow;
use std::time::Duration;

use rustc_hash::FxHashMap;

use crate::glob::PathGlob;
use crate::host::{Host, HostPattern};
use crate::limits::{Budget, Charge, Limited, Limiter};
use crate::normalize::{Scheme, Target};
use crate::policy::{
    CallLimit, CallLimitKey, DEFAULT_APPROVAL_TIMEOUT, DefaultEffect, Effect, LEGACY_WINDOW,
    LimitKey, Match, Policy, Rule,
};
use crate::site::SiteSet;

/// An alias a request uses, and the sites its placeholders sit in.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct AliasUse {
    /// The alias name.
    pub alias: String,
    /// Where its placeholders sit.
    pub sites: SiteSet,
}

/// The facts of one request that the policy matches on. The target can only come from
/// `normalize_target`, so matching always sees the canonical form that is forwarded.
#[derive(Clone, Copy, Debug)]
pub struct Request<'a> {
    /// The capability's agent name.
    pub agent: &'a str,
    /// The method, byte-exact.
    pub method: &'a str,
    /// The canonical target.
    pub target: &'a Target,
    /// The aliases the request uses.
    pub aliases: &'a [AliasUse],
    /// The MCP tool of a JSON-RPC `tools/call`, when the request is one.
    pub tool: Option<&'a str>,
}

/// What the policy says, before limits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Evaluation {
    /// Allowed, subject to the charges.
    Allow(Grant),
    /// Denied.
    Deny(Denial),
    /// Held until the operator decides; approved, it is allowed as the hold's grant says.
    Approve(Hold),
}

/// The outcome of evaluation and limits together.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Forward the request.
    Allow(Grant),
    /// Refuse it (403).
    Deny(Denial),
    /// Refuse it for now (429).
    Limited(Limited),
    /// Hold it for the operator's decision. No limit was checked or consumed: once approved,
    /// the caller admits `hold.grant.charges` (refusing with 429 if one is exhausted) and only
    /// then sends the request.
    Approve(Hold),
}

/// Why and how a request waits for the operator's decision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hold {
    /// The matching approve rules, in file order (ids).
    pub rules: Vec<String>,
    /// How long to wait for a decision: the shortest timeout of the matching approve rules.
    pub timeout: Duration,
    /// What applies once approved: charges of the approve rules' own limits, plus matching allow
    /// and limit rules' (same order rules as today), allow_private if any matching approve or
    /// allow rule says so, and `rules` = the matching allow rules' ids (may be empty).
    pub grant: Grant,
}

/// Why and how a request is allowed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grant {
    /// The allow rules that admit the request, in file order; empty when `default: allow`
    /// decided.
    pub rules: Vec<String>,
    /// Whether a matching allow rule lets the target resolve to a private address.
    pub allow_private: bool,
    /// The counters the request consumes when forwarded.
    pub charges: Vec<Charge>,
}

/// Why a request is denied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Denial {
    /// The deny rules that match, in file order; empty when no allow rule matched.
    pub rules: Vec<String>,
    /// The kind of denial.
    pub reason: DenyReason,
}

/// The kind of denial.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DenyReason {
    /// A deny rule matched.
    DenyRule,
    /// No allow rule matched and the default is deny.
    NoAllowRule,
    /// No allow rule matched; the default is allow, but the request uses an alias.
    DefaultAllowUsesAlias,
    /// No allow rule matched; the default is allow, but the target is loopback, which only a
    /// rule naming it may admit.
    DefaultAllowLoopback,
}

/// A policy compiled for evaluation: rules indexed by the hosts they name, and the names of
/// their counters built once, so evaluating a request only copies them.
#[derive(Debug)]
pub struct CompiledPolicy {
    policy: Policy,
    index: HostIndex,
    /// Per rule, per limit: the head of its counter key, `{rule id}#{limit index}`.
    limit_heads: Vec<Box<[String]>>,
    /// Per legacy call limit: its rule name and counter key, `call_limits:{key}`.
    legacy_names: Vec<String>,
}

/// Rule indices by exact host, by wildcard suffix, and those without `host`. Keys come from the
/// operator's policy, never from requests, so a fast non-keyed hash is safe here.
#[derive(Debug, Default)]
struct HostIndex {
    exact: FxHashMap<Host, Vec<u32>>,
    wildcard: FxHashMap<String, Vec<u32>>,
    /// The byte lengths of the keys of `wildcard`, ascending and each once: a request's suffix of
    /// any other length cannot be a key, so it is not looked up.
    wildcard_lengths: Vec<usize>,
    any: Vec<u32>,
}

/// The indices of the rules that match one request: on the stack up to `INLINE_MATCHES`, which
/// is the common case, and on the heap beyond.
struct Matches {
    inline: [u32; INLINE_MATCHES],
    len: usize,
    spill: Vec<u32>,
}

// === impl CompiledPolicy ===

impl CompiledPolicy {
    /// Compiles a loaded policy.
    pub fn new(policy: Policy) -> Self {
        let mut index = HostIndex::default();
        for (i, rule) in policy.rules.iter().enumerate() {
            // INVARIANT: a policy holds at most MAX_RULES (10,000) rules, far below u32::MAX.
            let i = u32::try_from(i).unwrap_or(u32::MAX);
            match &rule.matcher.host {
                None => index.any.push(i),
                Some(patterns) => {
                    // A host listed twice in one rule is indexed once: rules are indexed in
                    // order, so a repeat is the list's last entry. Every entry costs each request
                    // to that host a test of the rule (which scans the rule's hosts again), so a
                    // rule of 100,000 copies of one host made each such request quadratic.
                    let add = |rules: &mut Vec<u32>| {
                        if rules.last() != Some(&i) {
                            rules.push(i);
                        }
                    };
                    for pattern in patterns {
                        match pattern {
                            HostPattern::Exact(host) => {
                                add(index.exact.entry(host.clone()).or_default());
                            }
                            HostPattern::Wildcard { suffix } => {
                                add(index.wildcard.entry(suffix.clone()).or_default());
                            }
                        }
                    }
                }
            }
        }
        index.wildcard_lengths = index.wildcard.keys().map(String::len).collect();
        index.wildcard_lengths.sort_unstable();
        index.wildcard_lengths.dedup();
        let limit_heads = policy
            .rules
            .iter()
            .map(|rule| {
                (0..rule.limits.len())
                    .map(|n| limit_head(&rule.id, n))
                    .collect()
            })
            .collect();
        let legacy_names = policy.call_limits.iter().map(legacy_name).collect();
        CompiledPolicy {
            policy,
            index,
            limit_heads,
            legacy_names,
        }
    }

    /// The policy this was compiled from.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// Evaluates the request with deny-overrides; limits are not consulted.
    pub fn evaluate(&self, request: &Request<'_>) -> Evaluation {
        let mut matches = Matches::new();
        self.matching(request, &mut matches, rule_matches);
        let matched = matches.sorted();
        // The matching rules in file order, each once, with their indices.
        let rules = || {
            distinct(matched).filter_map(|i| {
                let i = i as usize;
                self.policy.rules.get(i).map(|rule| (i, rule))
            })
        };
        let (mut denies, mut approves, mut allows, mut limits) = (0, 0, 0, 0);
        for (_, rule) in rules() {
            match rule.effect {
                Effect::Deny => denies += 1,
                Effect::Approve => {
                    approves += 1;
                    limits += rule.limits.len();
                }
                Effect::Allow => {
                    allows += 1;
                    limits += rule.limits.len();
                }
                Effect::Limit => limits += rule.limits.len(),
            }
        }
        let ids = |effect: Effect, count: usize| {
            let mut ids = Vec::with_capacity(count);
            ids.extend(
                rules()
                    .filter(|(_, r)| r.effect == effect)
                    .map(|(_, r)| r.id.clone()),
            );
            ids
        };
        if denies > 0 {
            return Evaluation::Deny(Denial {
                rules: ids(Effect::Deny, denies),
                reason: DenyReason::DenyRule,
            });
        }
        if allows == 0 && approves == 0 {
            let reason = match self.policy.default {
                DefaultEffect::Deny => Some(DenyReason::NoAllowRule),
                DefaultEffect::Allow if !request.aliases.is_empty() => {
                    Some(DenyReason::DefaultAllowUsesAlias)
                }
                DefaultEffect::Allow if request.target.host.is_loopback() => {
                    Some(DenyReason::DefaultAllowLoopback)
                }
                DefaultEffect::Allow => None,
            };
            if let Some(reason) = reason {
                return Evaluation::Deny(Denial {
                    rules: Vec::new(),
                    reason,
                });
            }
        }
        // Approve rules' counters first (none without one), then allow rules', then limit
        // rules', each in file order.
        let mut charges = Vec::with_capacity(limits);
        for effect in [Effect::Approve, Effect::Allow, Effect::Limit] {
            for (i, rule) in rules().filter(|(_, r)| r.effect == effect) {
                let heads = self.limit_heads.get(i).map_or(&[][..], |h| &h[..]);
                rule_charges(rule, heads, request, &mut charges);
            }
        }
        self.legacy_charges(request, &mut charges);
        let grant = Grant {
            rules: ids(Effect::Allow, allows),
            allow_private: rules().any(|(_, r)| r.effect.admits() && r.allow_private),
            charges,
        };
        if approves == 0 {
            return Evaluation::Allow(grant);
        }
        let timeout = rules()
            .filter_map(|(_, r)| r.approval.map(|a| a.timeout))
            .min()
            .unwrap_or(DEFAULT_APPROVAL_TIMEOUT);
        Evaluation::Approve(Hold {
            rules: ids(Effect::Approve, approves),
            timeout,
            grant,
        })
    }

    /// Evaluates the request, then checks and consumes its limits. A request held for approval
    /// consumes nothing here: its limits are the caller's to admit once it is approved.
    pub fn decide(&self, request: &Request<'_>, limiter: &mut Limiter, now: Duration) -> Decision {
        match self.evaluate(request) {
            Evaluation::Deny(denial) => Decision::Deny(denial),
            Evaluation::Approve(hold) => Decision::Approve(hold),
            Evaluation::Allow(grant) => match limiter.admit(&grant.charges, now) {
                Ok(()) => Decision::Allow(grant),
                Err(limited) => Decision::Limited(limited),
            },
        }
    }

    /// Whether some request of `agent` over `https` to `host:port` could be allowed, whatever its
    /// method, path, aliases and tool: an allow or approve rule (approved, a held request is
    /// sent) whose agent, scheme, port and host could all match it, or `default: allow` for a
    /// host that is not loopback. What a `CONNECT` needs
    /// before a tunnel is opened: a `false` here means every request inside would be denied, so
    /// none is worth a TLS handshake. Deny rules are not consulted (one could always spare some
    /// path); each request inside the tunnel is evaluated in full.
    pub fn could_allow_host(&self, agent: &str, host: &Host, port: u16) -> bool {
        (self.policy.default == DefaultEffect::Allow && !host.is_loopback())
            || self
                .rules_that_could_allow_host(agent, host, port)
                .next()
                .is_some()
    }

    /// The ids of the allow and approve rules that [`CompiledPolicy::could_allow_host`] finds
    /// could match
    /// some request of `agent` over `https` to `host:port`, in the policy's order: what admits a
    /// tunnel, named in its decision record.
    pub fn rules_that_could_allow_host<'a>(
        &'a self,
        agent: &'a str,
        host: &'a Host,
        port: u16,
    ) -> impl Iterator<Item = &'a str> + 'a {
        self.policy.rules.iter().filter_map(move |rule| {
            let m = &rule.matcher;
            let fits = rule.effect.admits()
                && m.scheme
                    .as_ref()
                    .is_none_or(|schemes| schemes.contains(&Scheme::Https))
                && m.port
                    .as_ref()
                    .map_or(port == 443, |ports| ports.contains(&port))
                && m.agent
                    .as_ref()
                    .is_none_or(|globs| globs.iter().any(|g| g.matches(agent)))
                && m.host
                    .as_ref()
                    .is_none_or(|patterns| patterns.iter().any(|p| p.matches(host)));
            fits.then_some(rule.id.as_str())
        })
    }

    /// The denial every evaluation of `request` ends in, whatever MCP tool it calls, or none
    /// (`request.tool` is ignored), and whatever aliases (or sites of its aliases) are added to
    /// `request.aliases`; `None` when some call could be allowed. The broker asks before it reads
    /// a request body, which can only add tool calls and alias uses: a request that is denied
    /// whatever its body holds is refused unread. The denial is the one of the request without a
    /// tool: a deny rule that matches it has no `tool`, so it matches every call; the body could
    /// only add more matching deny rules.
    pub fn denial_for_any_call(&self, request: &Request<'_>) -> Option<Denial> {
        let request = Request {
            tool: None,
            ..*request
        };
        let Evaluation::Deny(denial) = self.evaluate(&request) else {
            return None;
        };
        if denial.reason == DenyReason::DenyRule {
            return Some(denial);
        }
        // No allow or approve rule matched without a tool; one with a `tool` might match some
        // call. More aliases never make such a rule match: it must list them all, and their
        // sites.
        let mut matches = Matches::new();
        self.matching(&request, &mut matches, rule_matches_some_tool);
        let allowed = matches.sorted().iter().any(|&i| {
            self.policy
                .rules
                .get(i as usize)
                .is_some_and(|rule| rule.effect.admits())
        });
        (!allowed).then_some(denial)
    }

    /// What each limit that applies to the request has left, without consuming anything; for a
    /// request held for approval, the limits it would consume once approved.
    pub fn budgets(&self, request: &Request<'_>, limiter: &Limiter, now: Duration) -> Vec<Budget> {
        match self.evaluate(request) {
            Evaluation::Allow(grant) => limiter.budgets(&grant.charges, now),
            Evaluation::Approve(hold) => limiter.budgets(&hold.grant.charges, now),
            Evaluation::Deny(_) => Vec::new(),
        }
    }

    /// Collects the indices of the rules that match the request. Only rules indexed under the
    /// request's host (exactly, by a wildcard suffix, or without `host`) are tried; a rule
    /// listed under several keys is collected more than once, which [`distinct`] undoes.
    fn matching(
        &self,
        request: &Request<'_>,
        out: &mut Matches,
        matches: fn(&Rule, &Request<'_>) -> bool,
    ) {
        let mut try_rules = |indices: &[u32]| {
            for &i in indices {
                if self
                    .policy
                    .rules
                    .get(i as usize)
                    .is_some_and(|r| matches(r, request))
                {
                    out.push(i);
                }
            }
        };
        let host = &request.target.host;
        if let Some(rules) = self.index.exact.get(host) {
            try_rules(rules);
        }
        if let Host::Name(name) = host {
            // Every proper suffix after a dot (`a.b.c`: `b.c` and `c`) that is as long as some
            // wildcard's suffix: checking the byte before each such length is cheaper than
            // scanning the name for dots, and no other suffix can be a key.
            let lengths = self.index.wildcard_lengths.iter();
            for &len in lengths.take_while(|&&len| len < name.len()) {
                let dot = name.len() - len - 1;
                if name.as_bytes().get(dot) == Some(&b'.')
                    && let Some(rules) =
                        name.get(dot + 1..).and_then(|s| self.index.wildcard.get(s))
                {
                    try_rules(rules);
                }
            }
        }
        try_rules(&self.index.any);
    }

    /// For a request no allow or approve rule admits: the allow or approve rule that came
    /// closest and why it does not match, each reason naming what the rule says — including what
    /// it leaves out (no `port` means only the scheme's default, no `alias` means no secret).
    /// The candidates are the rules the host index offers for the request's host (and those
    /// without `host`), as evaluation looks at them, so finding it costs what evaluating did.
    /// The closest is the one with the fewest reasons, the first in the file on a tie. `None`
    /// when no such rule is indexed for the host.
    pub fn near_miss(&self, request: &Request<'_>) -> Option<NearMiss> {
        let mut candidates = Matches::new();
        self.matching(request, &mut candidates, |rule, _| rule.effect.admits());
        let mut best: Option<NearMiss> = None;
        for i in distinct(candidates.sorted()) {
            let Some(rule) = self.policy.rules.get(i as usize) else {
                continue;
            };
            let reasons = misses(rule, request);
            if reasons.is_empty() {
                continue;
            }
            if best
                .as_ref()
                .is_none_or(|b| reasons.len() < b.reasons.len())
            {
                best = Some(NearMiss {
                    rule: rule.id.clone(),
                    reasons,
                });
            }
        }
        best
    }

    fn legacy_charges(&self, request: &Request<'_>, out: &mut Vec<Charge>) {
        for (n, limit) in self.policy.call_limits.iter().enumerate() {
            let applies = match &limit.key {
                CallLimitKey::Alias(a) => request.aliases.iter().any(|u| &u.alias == a),
                // As limit rules: any case of the tool name counts.
                CallLimitKey::Tool(t) => request
                    .tool
                    .is_some_and(|tool| tool.eq_ignore_ascii_case(t)),
            };
            if applies {
                let rule = match self.legacy_names.get(n) {
                    Some(name) => name.clone(),
                    None => legacy_name(limit),
                };
                out.push(Charge {
                    key: rule.clone(),
                    rule,
                    max: limit.max,
                    per: LEGACY_WINDOW,
                });
            }
        }
    }
}

// === impl Matches ===

impl Matches {
    fn new() -> Self {
        Matches {
            inline: [0; INLINE_MATCHES],
            len: 0,
            spill: Vec::new(),
        }
    }

    fn push(&mut self, i: u32) {
        match self.inline.get_mut(self.len) {
            Some(slot) => {
                *slot = i;
                self.len += 1;
            }
            None => self.spill.push(i),
        }
    }

    /// The indices in ascending order; one collected twice is there twice.
    fn sorted(&mut self) -> &[u32] {
        let inline = self.inline.get_mut(..self.len).unwrap_or_default();
        if self.spill.is_empty() {
            inline.sort_unstable();
            inline
        } else {
            self.spill.extend_from_slice(inline);
            self.spill.sort_unstable();
            &self.spill
        }
    }
}

/// The values of a sorted slice, each once.
fn distinct(sorted: &[u32]) -> impl Iterator<Item = u32> + '_ {
    sorted
        .iter()
        .enumerate()
        .filter(|&(k, i)| k == 0 || sorted.get(k - 1) != Some(i))
        .map(|(_, &i)| i)
}

/// The head of the counter key of a rule's limit `n`, which `broker::explain` reads back.
fn limit_head(rule_id: &str, n: usize) -> String {
    format!("{rule_id}#{n}")
}

/// The rule name and counter key of a legacy call limit.
fn legacy_name(limit: &CallLimit) -> String {
    format!("call_limits:{}", limit.key)
}

/// Whether `rule` matches `request`, with the reading of omitted fields its effect calls for.
pub fn rule_matches(rule: &Rule, request: &Request<'_>) -> bool {
    // Approve rules match as allow rules do: approved, the request proceeds as allowed.
    let allow = rule.effect.admits();
    // Cheapest tests first; each returns as soon as the rule cannot match. Allow rules match the
    // tool name byte-exact; deny and limit rules also catch other ASCII cases of it (`Drop` for
    // `drop`), which a server that looks tools up case-insensitively treats as the same tool.
    // Tool names are printable ASCII (the broker refuses others), so no other folding applies.
    let tool = match (&rule.matcher.tool, request.tool) {
        (Some(globs), Some(t)) if allow => globs.iter().any(|g| g.matches(t)),
        (Some(globs), Some(t)) => globs.iter().any(|g| g.matches_ignore_ascii_case(t)),
        (Some(_), None) => false,
        (None, Some(_)) => !allow,
        (None, None) => true,
    };
    tool && fields_match(rule, request)
}

/// Whether `rule` could match `request` with some tool call: [`rule_matches`] without the tool
/// test for a rule that names tools.
fn rule_matches_some_tool(rule: &Rule, request: &Request<'_>) -> bool {
    match rule.matcher.tool {
        Some(_) => fields_match(rule, request),
        None => rule_matches(rule, request),
    }
}

/// The tests of [`rule_matches`] besides the tool.
fn fields_match(rule: &Rule, request: &Request<'_>) -> bool {
    let m: &Match = &rule.matcher;
    let target = request.target;
    let allow = rule.effect.admits();
    let scheme = match &m.scheme {
        Some(s) => s.contains(&target.scheme),
        None => !allow || target.scheme == Scheme::Https,
    };
    let port = match &m.port {
        Some(p) => p.contains(&target.port),
        None => !allow || target.port == target.scheme.default_port(),
    };
    if !(scheme && port) {
        return false;
    }
    // Allow rules match the method byte-exact; deny and limit rules also catch other spellings
    // of it (`delete`), which some servers treat as the same method.
    let method =
        |x: &String| x == request.method || (!allow && x.eq_ignore_ascii_case(request.method));
    if !m.method.as_ref().is_none_or(|ms| ms.iter().any(method)) {
        return false;
    }
    let alias = match (&m.alias, allow) {
        // Allow: every alias the request uses is listed; no list, no alias.
        (Some(names), true) => request.aliases.iter().all(|u| names.contains(&u.alias)),
        (None, true) => request.aliases.is_empty(),
        // Deny and limit: any overlap.
        (Some(names), false) => request.aliases.iter().any(|u| names.contains(&u.alias)),
        (None, false) => true,
    };
    if !alias
        || (allow
            && !request
                .aliases
                .iter()
                .all(|u| u.sites.is_subset(rule.inject)))
    {
        return false;
    }
    m.agent
        .as_ref()
        .is_none_or(|g| g.iter().any(|g| g.matches(request.agent)))
        && m.host
            .as_ref()
            .is_none_or(|h| h.iter().any(|p| p.matches(&target.host)))
        && m.path
            .as_ref()
            .is_none_or(|g| g.iter().any(|g| path_matches(g, &target.path, allow)))
}

/// The allow or approve rule that came closest to admitting a request, and why it does not.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NearMiss {
    /// The rule's id.
    pub rule: String,
    /// Each field that does not match, in words (never a secret: the request's method, host,
    /// port, path, agent, alias and tool names, and what the rule says).
    pub reasons: Vec<String>,
}

/// Why `rule` (an allow or approve rule) does not match `request`, field by field, as
/// [`rule_matches`] decides for such a rule; empty when it matches.
fn misses(rule: &Rule, request: &Request<'_>) -> Vec<String> {
    let m = &rule.matcher;
    let target = request.target;
    let mut out = Vec::new();
    if let Some(globs) = &m.agent
        && !globs.iter().any(|g| g.matches(request.agent))
    {
        out.push(format!(
            "agent `{}` is not one of its agents",
            request.agent
        ));
    }
    match &m.scheme {
        Some(schemes) if !schemes.contains(&target.scheme) => out.push(format!(
            "scheme `{}` is not one of its schemes",
            target.scheme.as_str()
        )),
        None if target.scheme != Scheme::Https => out.push(format!(
            "it names no `scheme`, so only https (this request is {})",
            target.scheme.as_str()
        )),
        _ => {}
    }
    match &m.port {
        Some(ports) if !ports.contains(&target.port) => {
            out.push(format!("port {} is not one of its ports", target.port));
        }
        None if target.port != target.scheme.default_port() => out.push(format!(
            "it names no `port`, so only {} (the {} default; this request is to port {})",
            target.scheme.default_port(),
            target.scheme.as_str(),
            target.port
        )),
        _ => {}
    }
    if let Some(hosts) = &m.host
        && !hosts.iter().any(|h| h.matches(&target.host))
    {
        out.push(format!(
            "host `{}` matches none of its hosts",
            target.host.as_text()
        ));
    }
    if let Some(methods) = &m.method
        && !methods.iter().any(|x| x == request.method)
    {
        out.push(format!(
            "method `{}` is not one of its methods (methods are matched byte for byte)",
            request.method
        ));
    }
    if let Some(globs) = &m.path
        && !globs.iter().any(|g| path_matches(g, &target.path, true))
    {
        out.push(format!("path `{}` matches none of its paths", target.path));
    }
    for used in request.aliases {
        match &m.alias {
            None => out.push(format!(
                "it names no `alias`, so it admits no secret (this request uses `{}`)",
                used.alias
            )),
            Some(names) if !names.contains(&used.alias) => {
                out.push(format!("alias `{}` is not in its `alias` list", used.alias));
            }
            Some(_) => {}
        }
        if !used.sites.is_subset(rule.inject) {
            let outside: Vec<&str> = used
                .sites
                .iter()
                .filter(|site| !rule.inject.contains(*site))
                .map(|site| site.as_str())
                .collect();
            out.push(format!(
                "alias `{}` sits in the {} site, which its `inject` does not list",
                used.alias,
                outside.join(", ")
            ));
        }
    }
    match (&m.tool, request.tool) {
        (Some(globs), Some(tool)) if !globs.iter().any(|g| g.matches(tool)) => out.push(format!(
            "tool `{tool}` is not one of its tools (tool names are matched byte for byte)"
        )),
        (Some(_), None) => out.push("it names tools, and this request calls none".to_owned()),
        (None, Some(tool)) => out.push(format!(
            "it names no `tool`, so it admits no MCP tool call (this request calls `{tool}`)"
        )),
        _ => {}
    }
    out
}

/// Allow rules match the path as written; deny and limit rules also match it without one
/// trailing `/`, since many servers route `/a/` as `/a`.
fn path_matches(glob: &PathGlob, path: &str, allow: bool) -> bool {
    glob.matches(path)
        || (!allow && path.len() > 1 && path.strip_suffix('/').is_some_and(|p| glob.matches(p)))
}

/// The counters a matching allow or limit rule charges; `heads` holds the [`limit_head`] of each
/// of its limits.
fn rule_charges(rule: &Rule, heads: &[String], request: &Request<'_>, out: &mut Vec<Charge>) {
    for (n, limit) in rule.limits.iter().enumerate() {
        let head = match heads.get(n) {
            Some(head) => Cow::Borrowed(head.as_str()),
            None => Cow::Owned(limit_head(&rule.id, n)),
        };
        let host = match &request.target.host {
            _ if !limit.by.contains(&LimitKey::Host) => Cow::Borrowed(""),
            Host::Name(name) => Cow::Borrowed(name.as_str()),
            other => Cow::Owned(other.as_text()),
        };
        // One counter per tool whatever its case: limit rules match tools in any case, and a
        // server may run `Drop` as `drop`.
        let tool = match request.tool {
            _ if !limit.by.contains(&LimitKey::Tool) => Cow::Borrowed(""),
            Some(t) if t.bytes().any(|b| b.is_ascii_uppercase()) => {
                Cow::Owned(t.to_ascii_lowercase())
            }
            Some(t) => Cow::Borrowed(t),
            None => Cow::Borrowed(""),
        };
        let fans_out = request.aliases.len() > 1 && limit.by.contains(&LimitKey::Alias);
        if !fans_out {
            // One counter: the head, then each `by` value after a unit separator.
            let value = |by: &LimitKey| -> &str {
                match by {
                    LimitKey::Agent => request.agent,
                    LimitKey::Host => &host,
                    LimitKey::Tool => &tool,
                    LimitKey::Alias => request.aliases.first().map_or("", |u| u.alias.as_str()),
                }
            };
            let len = limit
                .by
                .iter()
                .fold(head.len(), |len, by| len + 1 + value(by).len());
            let mut key = String::with_capacity(len);
            key.push_str(&head);
            for by in &limit.by {
                key.push('\u{1f}');
                key.push_str(value(by));
            }
            out.push(Charge {
                rule: rule.id.clone(),
                key,
                max: limit.max,
                per: limit.per,
            });
            continue;
        }
        let mut keys = vec![head.into_owned()];
        for by in &limit.by {
            let mut extend = |value: &str| {
                for key in &mut keys {
                    key.push('\u{1f}');
                    key.push_str(value);
                }
            };
            match by {
                LimitKey::Agent => extend(request.agent),
                LimitKey::Host => extend(&host),
                LimitKey::Tool => extend(&tool),
                LimitKey::Alias => {
                    // One counter per alias the request uses.
                    keys = keys
                        .iter()
                        .flat_map(|k| {
                            request
                                .aliases
                                .iter()
                                .map(move |u| format!("{k}\u{1f}{}", u.alias))
                        })
                        .collect();
                }
            }
        }
        for key in keys {
            out.push(Charge {
                rule: rule.id.clone(),
                key,
                max: limit.max,
                per: limit.per,
            });
        }
    }
}

/// Matching rules held without allocating; a request rarely matches more.
const INLINE_MATCHES: usize = 16;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_listed_twice_in_a_rule_is_indexed_once() {
        let text = "version: 1\nrules:\n  - id: a\n    effect: allow\n    match:\n      host: [a.example.com, '*.example.com', a.example.com, '*.example.com']\n  - id: b\n    effect: deny\n    match:\n      host: [a.example.com]\n";
        let load = crate::policy::load_policy(text.as_bytes(), "t");
        let compiled = CompiledPolicy::new(load.policy.unwrap());
        let exact: Vec<&Vec<u32>> = compiled.index.exact.values().collect();
        assert_eq!(exact, [&vec![0, 1]]);
        let wildcard: Vec<&Vec<u32>> = compiled.index.wildcard.values().collect();
        assert_eq!(wildcard, [&vec![0]]);
    }
}
