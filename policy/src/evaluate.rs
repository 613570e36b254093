//! Deny-overrides evaluation of a normalized request against a policy compiled into a host index.
//!
//! Runs after the broker has authenticated the capability, normalized the target and found the
//! placeholders; before any audit record or upstream byte. Infallible: every request gets a
//! decision, and anything the policy does not clearly allow is denied. Rule order never matters:
//! all matching rules are collected, then deny beats allow beats default.

use std::time::Duration;

use rustc_hash::FxHashMap;

use crate::glob::PathGlob;
use crate::host::{Host, HostPattern};
use crate::limits::{Budget, Charge, Limited, Limiter};
use crate::normalize::{Scheme, Target};
use crate::policy::{
    CallLimitKey, DefaultEffect, Effect, LEGACY_WINDOW, LimitKey, Match, Policy, Rule,
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

/// A policy compiled for evaluation: rules indexed by the hosts they name.
#[derive(Debug)]
pub struct CompiledPolicy {
    policy: Policy,
    index: HostIndex,
}

/// Rule indices by exact host, by wildcard suffix, and those without `host`. Keys come from the
/// operator's policy, never from requests, so a fast non-keyed hash is safe here.
#[derive(Debug, Default)]
struct HostIndex {
    exact: FxHashMap<Host, Vec<u32>>,
    wildcard: FxHashMap<String, Vec<u32>>,
    any: Vec<u32>,
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
                    for pattern in patterns {
                        match pattern {
                            HostPattern::Exact(host) => {
                                index.exact.entry(host.clone()).or_default().push(i)
                            }
                            HostPattern::Wildcard { suffix } => {
                                index.wildcard.entry(suffix.clone()).or_default().push(i);
                            }
                        }
                    }
                }
            }
        }
        CompiledPolicy { policy, index }
    }

    /// The policy this was compiled from.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// Evaluates the request with deny-overrides; limits are not consulted.
    pub fn evaluate(&self, request: &Request<'_>) -> Evaluation {
        let mut denies = Vec::new();
        let mut allows = Vec::new();
        let mut limits = Vec::new();
        for rule in self
            .matching(request)
            .iter()
            .filter_map(|&i| self.policy.rules.get(i as usize))
        {
            match rule.effect {
                Effect::Deny => denies.push(rule),
                Effect::Allow => allows.push(rule),
                Effect::Limit => limits.push(rule),
            }
        }
        if !denies.is_empty() {
            return Evaluation::Deny(Denial {
                rules: denies.iter().map(|r| r.id.clone()).collect(),
                reason: DenyReason::DenyRule,
            });
        }
        if allows.is_empty() {
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
        let mut charges = Vec::new();
        for rule in allows.iter().chain(&limits) {
            rule_charges(rule, request, &mut charges);
        }
        self.legacy_charges(request, &mut charges);
        Evaluation::Allow(Grant {
            rules: allows.iter().map(|r| r.id.clone()).collect(),
            allow_private: allows.iter().any(|r| r.allow_private),
            charges,
        })
    }

    /// Evaluates the request, then checks and consumes its limits.
    pub fn decide(&self, request: &Request<'_>, limiter: &mut Limiter, now: Duration) -> Decision {
        match self.evaluate(request) {
            Evaluation::Deny(denial) => Decision::Deny(denial),
            Evaluation::Allow(grant) => match limiter.admit(&grant.charges, now) {
                Ok(()) => Decision::Allow(grant),
                Err(limited) => Decision::Limited(limited),
            },
        }
    }

    /// What each limit that applies to the request has left, without consuming anything.
    pub fn budgets(&self, request: &Request<'_>, limiter: &Limiter, now: Duration) -> Vec<Budget> {
        match self.evaluate(request) {
            Evaluation::Allow(grant) => limiter.budgets(&grant.charges, now),
            Evaluation::Deny(_) => Vec::new(),
        }
    }

    /// Indices of the rules that match the request, in file order, each once. Only rules
    /// indexed under the request's host (exactly, by a wildcard suffix, or without `host`) are
    /// tried; a rule listed under several keys is tried more than once, which is harmless.
    fn matching(&self, request: &Request<'_>) -> Vec<u32> {
        let mut out: Vec<u32> = Vec::new();
        let mut try_rules = |indices: &[u32]| {
            for &i in indices {
                if self
                    .policy
                    .rules
                    .get(i as usize)
                    .is_some_and(|r| rule_matches(r, request))
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
            // Every proper suffix: `a.b.c` looks up `b.c` and `c`.
            let mut rest = name.as_str();
            while let Some(dot) = rest.find('.') {
                rest = rest.get(dot + 1..).unwrap_or_default();
                if let Some(rules) = self.index.wildcard.get(rest) {
                    try_rules(rules);
                }
            }
        }
        try_rules(&self.index.any);
        out.sort_unstable();
        out.dedup();
        out
    }

    fn legacy_charges(&self, request: &Request<'_>, out: &mut Vec<Charge>) {
        for limit in &self.policy.call_limits {
            let applies = match &limit.key {
                CallLimitKey::Alias(a) => request.aliases.iter().any(|u| &u.alias == a),
                CallLimitKey::Tool(t) => request.tool == Some(t.as_str()),
            };
            if applies {
                let rule = format!("call_limits:{}", limit.key);
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

/// Whether `rule` matches `request`, with the reading of omitted fields its effect calls for.
pub fn rule_matches(rule: &Rule, request: &Request<'_>) -> bool {
    let m: &Match = &rule.matcher;
    let target = request.target;
    let allow = rule.effect == Effect::Allow;

    // Cheapest tests first; each returns as soon as the rule cannot match.
    let tool = match (&m.tool, request.tool) {
        (Some(globs), Some(t)) => globs.iter().any(|g| g.matches(t)),
        (Some(_), None) => false,
        (None, Some(_)) => !allow,
        (None, None) => true,
    };
    if !tool {
        return false;
    }
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

/// Allow rules match the path as written; deny and limit rules also match it without one
/// trailing `/`, since many servers route `/a/` as `/a`.
fn path_matches(glob: &PathGlob, path: &str, allow: bool) -> bool {
    glob.matches(path)
        || (!allow && path.len() > 1 && path.strip_suffix('/').is_some_and(|p| glob.matches(p)))
}

/// The counters a matching allow or limit rule charges.
fn rule_charges(rule: &Rule, request: &Request<'_>, out: &mut Vec<Charge>) {
    for (n, limit) in rule.limits.iter().enumerate() {
        let mut keys = vec![format!("{}#{n}", rule.id)];
        for by in &limit.by {
            let mut extend = |value: &str| {
                for key in &mut keys {
                    key.push('\u{1f}');
                    key.push_str(value);
                }
            };
            match by {
                LimitKey::Agent => extend(request.agent),
                LimitKey::Host => extend(&request.target.host.as_text()),
                LimitKey::Tool => extend(request.tool.unwrap_or("")),
                LimitKey::Alias if request.aliases.len() <= 1 => {
                    extend(request.aliases.first().map_or("", |u| u.alias.as_str()));
                }
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
