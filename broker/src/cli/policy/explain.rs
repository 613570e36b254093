//! `mint policy explain`: decides one request the way the proxy would, without sending it.
//!
//! Takes a request described on the command line (agent, method, URL, headers, MCP tool, JSON
//! body) and runs the proxy's pipeline on it with the proxy's own checks (`proxy::headers` and
//! `proxy::pipeline`, which the proxy's `forward` calls), in the proxy's order and with the
//! proxy's errors: the target is split and canonicalized (`normalize_target`), the method and
//! headers checked, the MCP tools named, placeholders found (`placeholder::scan`) and checked
//! against the alias declarations, then the policy evaluated once per call (deny overrides) and
//! the call limits counted. It reports the decision, the deciding rules, every alias with where
//! it sits and where it may go, and each applicable limit's remaining budget. A `CONNECT`
//! (`--url host:port`) is decided as the broker decides it before its `200`
//! (`proxy::connect::connect_target` and `tunnel_may_open`): a tunnel would open or not; each
//! request inside is explained on its own, with its method and URL.
//!
//! Reads the policy and alias files exactly as `mint serve` does (through `read_config_file`, so
//! a file the broker would refuse is refused here too, never explained), the body file, and (only
//! when a limit applies) the audit log; never a secret, the capabilities or the network. Output names headers, query parameters,
//! positions and aliases, never a header value, a query value or the body: a value may be a real
//! token typed by mistake. What it cannot see: the capability (its alias narrowing is checked by
//! the broker only), DNS (address refusals happen at connect time), and the running broker's
//! call-limit counters, which live in its memory: [`budget`] approximates them from the audit log.

use std::fmt;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::Args;
use http::Method;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use mint_policy::aliases::{AliasFile, load_aliases};
use mint_policy::audit::{AgentName, ToolName};
use mint_policy::body::{BodyPlaces, NamedPlace};
use mint_policy::evaluate::{CompiledPolicy, Evaluation};
use mint_policy::limits::{Charge, Limiter};
use mint_policy::normalize::Target;
use mint_policy::policy::{LimitKey, load_policy};
use mint_policy::site::SiteSet;
use mint_policy::{Diagnostic, MAX_FILE_BYTES, Severity};

use crate::cli::ExitStatus;
use crate::cli::shared_limits::LimitsRedisArgs;
use crate::config::declaration_file::{
    ConfigFileError, ReadError, read_config_file, read_declaration_file,
};
use crate::config::env::Paths;
use crate::config::placeholder_key::existing_shaped_placeholders;
use crate::config::secure_file::SecureFileError;
use crate::proxy::connect;
use crate::proxy::pipeline::{self, JsonRpcIds, RawTarget};
use crate::proxy::{ProxyError, ProxyLimits, headers};
use crate::secrets::placeholder::shaped::ShapedPlaceholders;
use crate::secrets::placeholder::{Part, Place, Placeholders, Skipped};

pub mod budget;
mod render;

pub use budget::BudgetSource;

/// Arguments of `mint policy explain`.
#[derive(Args)]
pub struct ExplainArgs {
    /// The agent name, as the capability would carry it.
    #[arg(long, value_name = "AGENT")]
    pub agent: String,

    /// The HTTP method, uppercase as sent (`GET`).
    #[arg(long, value_name = "METHOD")]
    pub method: String,

    /// The target: `https://host[:port]/path?query` (`http` only toward loopback hosts); for
    /// `--method CONNECT`, authority-form `host:port`. Write `{{mint:ALIAS}}` where a secret
    /// would go; never a real token.
    #[arg(long, value_name = "URL")]
    pub url: String,

    /// A request header, `NAME: VALUE` (repeat for more). Values are never printed.
    #[arg(long = "header", short = 'H', value_name = "NAME: VALUE")]
    pub headers: Vec<String>,

    /// The MCP tool the request calls [default: the `tools/call` names in --body-json].
    #[arg(long, value_name = "TOOL")]
    pub tool: Option<String>,

    /// A file holding the request body, sent as `Content-Type: application/json` unless a
    /// --header sets the type.
    #[arg(long, value_name = "FILE")]
    pub body_json: Option<PathBuf>,

    /// The policy file [default: $MINT_POLICY_PATH, else $MINT_HOME/policy.yaml, else
    /// .mint/policy.yaml].
    #[arg(long, value_name = "FILE")]
    pub policy: Option<PathBuf>,

    /// The alias file [default: $MINT_ALIASES_PATH, else $MINT_HOME/aliases.yaml, else
    /// .mint/aliases.yaml].
    #[arg(long, value_name = "FILE")]
    pub aliases: Option<PathBuf>,

    /// The audit log replayed to estimate the remaining budgets [default: $MINT_AUDIT_LOG_PATH,
    /// else $MINT_HOME/audit.log, else .mint/audit.log].
    #[arg(long, value_name = "FILE")]
    pub audit_log: Option<PathBuf>,

    /// Print one JSON object instead of the report.
    #[arg(long)]
    pub json: bool,

    /// Where brokers keep shared call limits: with a Redis URL, the budgets are read there
    /// instead of estimated from the audit log.
    #[command(flatten)]
    pub shared_limits: LimitsRedisArgs,
}

impl std::fmt::Debug for ExplainArgs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The URL's query and the header values may hold a real token typed by mistake: only
        // their sizes are shown.
        f.debug_struct("ExplainArgs")
            .field("agent", &self.agent)
            .field("method", &self.method)
            .field("url_len", &self.url.len())
            .field("headers", &self.headers.len())
            .field("tool", &self.tool)
            .field("body_json", &self.body_json)
            .field("json", &self.json)
            .finish_non_exhaustive()
    }
}

/// The request to explain. `Debug` shows header names and sizes only.
#[derive(Clone)]
pub struct ExplainRequest {
    /// The capability's agent name.
    pub agent: String,
    /// The method.
    pub method: Method,
    /// The target URL as given (`scheme://authority/path?query`).
    pub url: String,
    /// The request headers, before the proxy strips anything.
    pub headers: HeaderMap,
    /// The MCP tool given directly; `None` reads the tools from the body.
    pub tool: Option<String>,
    /// The body.
    pub body: Vec<u8>,
}

/// Everything explain found out about one request.
#[derive(Debug)]
pub struct Explanation {
    /// The agent.
    pub agent: String,
    /// The method.
    pub method: String,
    /// The canonical target, once parsed.
    pub target: Option<Target>,
    /// The MCP tools the request calls, in body order.
    pub tools: Vec<String>,
    /// Where the tools came from; `None` before they were looked for.
    pub tool_source: Option<ToolSource>,
    /// Every alias named by a placeholder that would be substituted or refused, sorted by name.
    pub aliases: Vec<AliasReport>,
    /// The placeholders the body quotes where Mint never substitutes: forwarded as text.
    pub skipped: Skipped,
    /// One policy evaluation per call (a tool, or the request's other messages).
    pub evaluations: Vec<CallReport>,
    /// Each limit that applies, once per counter.
    pub limits: Vec<LimitReport>,
    /// The decision.
    pub verdict: Verdict,
    /// What an admission would consume.
    charges: Vec<Charge>,
}

/// Where the tool names came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ToolSource {
    /// `--tool`.
    Flag,
    /// The JSON-RPC body (none found is still this).
    Body,
}

/// One alias a placeholder names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AliasReport {
    /// The alias name.
    pub name: String,
    /// Where its placeholders sit.
    pub places: Vec<Placement>,
    /// Its declaration; `None` when the alias file does not declare it.
    pub declaration: Option<AliasBinding>,
}

/// Where one placeholder sits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    /// The part of the request.
    pub part: Part,
    /// The site, or why no secret may go there.
    pub place: Place,
    /// The byte offset of the placeholder in that part.
    pub offset: usize,
    /// In a body, the JSON Pointer or form field of the alias it sits at: where the secret
    /// would be substituted.
    pub matched: Option<NamedPlace>,
}

/// What an alias declares about where its secret may go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AliasBinding {
    /// The host patterns it is bound to.
    pub hosts: Vec<String>,
    /// The sites it allows.
    pub sites: SiteSet,
    /// Whether the target's host is one of them; `None` when the target did not parse.
    pub bound: Option<bool>,
}

/// One evaluation of the policy: for a tool, or (`tool: None`) for the request itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallReport {
    /// The tool evaluated; `None` for a request without tool calls or a batch's other messages.
    pub tool: Option<String>,
    /// What the policy says, before limits.
    pub evaluation: Evaluation,
}

/// One call-limit counter the request would consume.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LimitReport {
    /// The rule, or `call_limits:KEY` for a legacy entry.
    pub rule: String,
    /// What the counter is kept per (`agent` = `mino`), empty for one counter per rule.
    pub by: Vec<(&'static str, String)>,
    /// Requests admitted per window.
    pub max: u64,
    /// The window.
    pub per: Duration,
    /// Requests still admitted now, after the replayed ones.
    pub remaining: u64,
}

/// The decision: allowed, or refused with the proxy's error.
#[derive(Debug)]
pub enum Verdict {
    /// Forwarded, admitted by these allow rules (empty: the default).
    Allow {
        /// The admitting allow rules.
        rules: Vec<String>,
    },
    /// Refused as the proxy would answer: `PolicyDenied` and `Limited` are the policy's and
    /// the limits' refusals, every other variant a refusal before the policy.
    Refused(ProxyError),
    /// Held for the operator's approval: nothing is sent, and no limit counted, until the
    /// operator approves.
    Approve {
        /// The matching approve rules.
        rules: Vec<String>,
        /// How long the broker waits for the decision.
        timeout: Duration,
        /// The matching allow rules, which also apply once approved (often none).
        allow_rules: Vec<String>,
        /// The rules of the limits that are spent now: approved, the request would be limited.
        limited: Vec<String>,
    },
    /// A `CONNECT` whose tunnel would open: each request inside is decided on its own; `rules`
    /// are the allow and approve rules that could admit one (empty when an alias binding or `default: allow`
    /// alone admits the tunnel), as the tunnel's decision record names them.
    Tunnel {
        /// The ids of those rules, in the policy's order.
        rules: Vec<String>,
    },
}

/// Why explain could not explain. Usage problems and unreadable or invalid files exit 2.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExplainError {
    /// An argument that cannot describe a request.
    #[error("{0}")]
    Usage(String),
    /// A file that cannot be read.
    #[error("cannot read {what} `{}`: {problem}", path.display())]
    Unreadable {
        /// `policy file`, `alias file` or `body file`.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// What went wrong.
        problem: ReadError,
    },
    /// No `--aliases` was given and the default alias file cannot be read. A draft policy (given
    /// with `--policy`) is explained against the home's aliases, so without them there is nothing
    /// to bind placeholders to.
    #[error(
        "cannot read the alias file `{}` ({problem}); explain needs the aliases the broker would \
         load: pass `--aliases FILE`, or set MINT_HOME to a home made by `mint init`",
        path.display()
    )]
    AliasesNeeded {
        /// The default alias file.
        path: PathBuf,
        /// What went wrong.
        problem: ReadError,
    },
    /// A policy or alias file that `mint serve` would refuse whatever it holds: another user
    /// could change it, by its own owner or mode or through a directory or link on its way.
    /// Explain reads both files exactly as the broker does, so it never describes what the broker
    /// would not load.
    #[error("{refusal}; `mint serve` would refuse this {what}, so nothing was explained")]
    Untrusted {
        /// `policy file` or `alias file`.
        what: &'static str,
        /// Why the broker would refuse it (names the path and the fix).
        refusal: SecureFileError,
    },
    /// A policy or alias file with errors.
    #[error("{what} `{}` has {}; nothing was explained", path.display(), count_errors(diagnostics.len()))]
    Invalid {
        /// `policy file` or `alias file`.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// Its errors, in position order.
        diagnostics: Vec<Diagnostic>,
    },
    /// The audit log (or a rotated part of it) cannot be read.
    #[error("cannot read the audit log `{}`: {problem}", path.display())]
    AuditLog {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        problem: ReadError,
    },
    /// The Redis settings of shared call limits.
    #[error(transparent)]
    SharedLimits(#[from] crate::limits::RedisConfigError),
    /// Writing the report failed.
    #[error("cannot write the output")]
    Output(#[source] io::Error),
}

// === impl ExplainArgs ===

impl ExplainArgs {
    /// The request these arguments describe; reads the body file.
    pub fn request(&self, max_body: u64) -> Result<ExplainRequest, ExplainError> {
        AgentName::new(self.agent.as_str()).map_err(|_| {
            usage("--agent must be 1-64 letters, digits, `.`, `_` or `-`, as `mint cap issue` takes it")
        })?;
        let method = Method::from_bytes(self.method.as_bytes())
            .map_err(|_| usage("--method must be an HTTP method token, such as `GET`"))?;
        if method == Method::CONNECT {
            if self.url.contains("://") || self.url.contains('/') {
                return Err(usage(
                    "--url of a CONNECT must be authority-form `host:port`, as a client sends it",
                ));
            }
            if self.tool.is_some() || self.body_json.is_some() {
                return Err(usage(
                    "a CONNECT has no tool or body: explain each request inside the tunnel with its own method and URL",
                ));
            }
        } else if !self.url.contains("://") {
            return Err(usage(
                "--url must be an absolute URL: `https://host[:port]/path?query`",
            ));
        }
        if let Some(tool) = &self.tool {
            ToolName::new(tool.as_str()).map_err(|_| {
                usage("--tool must be 1-128 printable ASCII characters without spaces")
            })?;
        }
        let mut headers = HeaderMap::new();
        for (index, text) in self.headers.iter().enumerate() {
            let (name, value) = parse_header(text)
                .map_err(|problem| usage(format!("--header #{}: {problem}", index + 1)))?;
            headers.append(name, value);
        }
        let body = match &self.body_json {
            Some(path) => {
                let limit = usize::try_from(max_body).unwrap_or(usize::MAX);
                let body = read_declaration_file(path, limit).map_err(|problem| {
                    ExplainError::Unreadable {
                        what: "body file",
                        path: path.clone(),
                        problem,
                    }
                })?;
                if !headers.contains_key(header::CONTENT_TYPE) {
                    headers.insert(
                        header::CONTENT_TYPE,
                        HeaderValue::from_static("application/json"),
                    );
                }
                body
            }
            None => Vec::new(),
        };
        Ok(ExplainRequest {
            agent: self.agent.clone(),
            method,
            url: self.url.clone(),
            headers,
            tool: self.tool.clone(),
            body,
        })
    }
}

impl fmt::Debug for ExplainRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The URL's query, header values and the body may hold a token: names and sizes only.
        f.debug_struct("ExplainRequest")
            .field("agent", &self.agent)
            .field("method", &self.method)
            .field("url_len", &self.url.len())
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .field("tool", &self.tool)
            .field("body_len", &self.body.len())
            .finish()
    }
}

// === impl Explanation ===

impl Explanation {
    fn new(request: &ExplainRequest) -> Explanation {
        Explanation {
            agent: request.agent.clone(),
            method: request.method.as_str().to_owned(),
            target: None,
            tools: Vec::new(),
            tool_source: None,
            aliases: Vec::new(),
            skipped: Skipped::default(),
            evaluations: Vec::new(),
            limits: Vec::new(),
            verdict: Verdict::Allow { rules: Vec::new() },
            charges: Vec::new(),
        }
    }

    /// The counters an admission would consume (empty unless the policy allows).
    pub fn charges(&self) -> &[Charge] {
        &self.charges
    }

    /// The longest window among the counters: how far back the audit log matters.
    pub fn longest_window(&self) -> Option<Duration> {
        self.charges.iter().map(|c| c.per).max()
    }

    /// Reports each counter's budget in `limiter` at `now`, then admits the request there: a
    /// spent counter turns an allow into `limited`, as in the proxy. A request held for approval
    /// stays held (the broker counts its limits only once it is approved); the spent counters'
    /// rules are noted in the verdict, since an approved request would then be limited.
    pub fn count_limits(&mut self, policy: &CompiledPolicy, mut limiter: Limiter, now: Duration) {
        if !matches!(
            self.verdict,
            Verdict::Allow { .. } | Verdict::Approve { .. }
        ) {
            return;
        }
        let budgets = limiter.budgets(&self.charges, now);
        let mut seen: Vec<&str> = Vec::new();
        for (charge, budget) in self.charges.iter().zip(budgets) {
            // A counter named by several calls of a batch is consumed once.
            if seen.contains(&charge.key.as_str()) {
                continue;
            }
            seen.push(&charge.key);
            self.limits.push(LimitReport {
                rule: budget.rule,
                by: counter_by(policy, charge),
                max: budget.max,
                per: budget.per,
                remaining: budget.remaining,
            });
        }
        if let Err(limited) = limiter.admit(&self.charges, now) {
            // Explain checks room for one unit per counter; see the module documentation.
            match &mut self.verdict {
                Verdict::Approve { limited: spent, .. } => *spent = limited.rules,
                _ => {
                    self.verdict = Verdict::Refused(ProxyError::Limited {
                        rules: limited.rules,
                        retry_after: limited.retry_after,
                    });
                }
            }
        }
    }

    /// The counters could not be read (shared limits in a Redis that does not answer): an allowed
    /// request is refused `503 limits_unavailable`, as the broker would refuse it now.
    pub fn limits_unavailable(&mut self) {
        if !matches!(self.verdict, Verdict::Allow { .. }) {
            return;
        }
        let mut rules: Vec<String> = self.charges.iter().map(|c| c.rule.clone()).collect();
        rules.sort();
        rules.dedup();
        self.verdict = Verdict::Refused(ProxyError::LimitsUnavailable { rules });
    }
}

// === impl Verdict ===

impl Verdict {
    /// `allow`, `deny` or `limited`, as the audit record's `decision`; `approve` for a request
    /// that would wait for the operator's decision.
    pub fn decision(&self) -> &'static str {
        match self {
            Verdict::Allow { .. } | Verdict::Tunnel { .. } => "allow",
            Verdict::Approve { .. } => "approve",
            Verdict::Refused(ProxyError::Limited { .. } | ProxyError::LimitsUnavailable { .. }) => {
                "limited"
            }
            Verdict::Refused(_) => "deny",
        }
    }

    /// The deciding rules: the admitting allow rules, the matching approve rules, the matching
    /// deny rules or the spent limits; empty when the default decided; `None` when the policy
    /// was not consulted.
    pub fn rules(&self) -> Option<&[String]> {
        match self {
            Verdict::Allow { rules } | Verdict::Approve { rules, .. } => Some(rules),
            Verdict::Refused(
                error @ (ProxyError::PolicyDenied { .. }
                | ProxyError::Limited { .. }
                | ProxyError::LimitsUnavailable { .. }),
            ) => Some(error.rules()),
            Verdict::Tunnel { rules } => (!rules.is_empty()).then_some(rules.as_slice()),
            Verdict::Refused(_) => None,
        }
    }

    /// Whether the request is allowed without anyone's decision (for a `CONNECT`: the tunnel
    /// would open). A request held for approval is not: `mint policy explain` exits 1.
    pub fn is_allow(&self) -> bool {
        matches!(self, Verdict::Allow { .. } | Verdict::Tunnel { .. })
    }
}

/// `mint policy explain`: explains the request of `args` and prints the report to `out`. A
/// usage or file problem is written to `err` (file errors as `mint policy check` renders them)
/// and exits 2; only a failed write to `out` or `err` is an error.
pub fn run(
    args: &ExplainArgs,
    paths: &Paths,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> io::Result<ExitStatus> {
    match explain(args, paths, wall_clock(), out) {
        Ok(status) => Ok(status),
        Err(ExplainError::Output(error)) => Err(error),
        Err(error) => {
            if let ExplainError::Invalid {
                path, diagnostics, ..
            } = &error
            {
                let origin = path.display().to_string();
                for diagnostic in diagnostics {
                    writeln!(err, "{}", diagnostic.render(&origin))?;
                }
            }
            writeln!(err, "mint: {error}")?;
            err.flush()?;
            Ok(ExitStatus::UsageOrConfig)
        }
    }
}

/// Explains the request of `args` at wall-clock time `now` (since the Unix epoch) and writes the
/// report; exit status 0 when allowed, 1 when refused.
pub fn explain(
    args: &ExplainArgs,
    paths: &Paths,
    now: Duration,
    out: &mut dyn Write,
) -> Result<ExitStatus, ExplainError> {
    let max_body = ProxyLimits::default().max_request_body;
    let request = args.request(max_body)?;
    let policy = load_policy_at(&paths.policy_or(args.policy.as_deref()))?;
    let aliases = match &args.aliases {
        Some(path) => load_aliases_at(path)?,
        None => match load_aliases_at(&paths.aliases) {
            Err(ExplainError::Unreadable { path, problem, .. }) => {
                return Err(ExplainError::AliasesNeeded { path, problem });
            }
            other => other?,
        },
    };
    let shaped = existing_shaped_placeholders(&paths.placeholder_key, &aliases)
        .map_err(|error| ExplainError::Usage(error.to_string()))?;
    let mut explanation = examine_with(&policy, &aliases, &shaped, &request, max_body);
    let source = match explanation.longest_window() {
        None => BudgetSource::NotNeeded,
        Some(window) => match args
            .shared_limits
            .config(crate::limits::redis::DEFAULT_WAIT)?
        {
            Some(redis) => match budget::from_redis(&redis, explanation.charges()) {
                Ok((limiter, redis_now)) => {
                    explanation.count_limits(&policy, limiter, redis_now);
                    BudgetSource::Redis {
                        server: redis.shown().to_owned(),
                    }
                }
                Err(error) => {
                    explanation.limits_unavailable();
                    BudgetSource::RedisUnavailable {
                        server: redis.shown().to_owned(),
                        error: error.to_string(),
                    }
                }
            },
            None => {
                let log = args
                    .audit_log
                    .clone()
                    .unwrap_or_else(|| paths.audit_log.clone());
                let replay = budget::replay(&log, &policy, window, now)?;
                explanation.count_limits(&policy, replay.limiter, now);
                replay.source
            }
        },
    };
    tracing::debug!(
        decision = explanation.verdict.decision(),
        limits = explanation.limits.len(),
        "Request explained"
    );
    let text = if args.json {
        render::json(&explanation, &source) + "\n"
    } else {
        render::human(&explanation, &source)
    };
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(ExplainError::Output)?;
    Ok(if explanation.verdict.is_allow() {
        ExitStatus::Success
    } else {
        ExitStatus::Failure
    })
}

/// Runs the proxy's pipeline on `request`, up to the policy; limits are counted afterwards by
/// [`Explanation::count_limits`]. Infallible: a refusal is the explanation's verdict.
pub fn examine(
    policy: &CompiledPolicy,
    aliases: &AliasFile,
    request: &ExplainRequest,
    max_body: u64,
) -> Explanation {
    examine_with(
        policy,
        aliases,
        &ShapedPlaceholders::default(),
        request,
        max_body,
    )
}

/// [`examine`], reading the aliases' value-shaped placeholders `shaped` as the broker does.
pub fn examine_with(
    policy: &CompiledPolicy,
    aliases: &AliasFile,
    shaped: &ShapedPlaceholders,
    request: &ExplainRequest,
    max_body: u64,
) -> Explanation {
    let mut explanation = Explanation::new(request);
    if request.method == Method::CONNECT {
        explanation.verdict = match tunnel(&mut explanation, policy, aliases, request) {
            Ok(rules) => Verdict::Tunnel { rules },
            Err(error) => Verdict::Refused(error),
        };
        return explanation;
    }
    explanation.verdict =
        match pipeline(&mut explanation, policy, aliases, shaped, request, max_body) {
            Ok(verdict) => verdict,
            Err(error) => {
                explanation.charges.clear();
                Verdict::Refused(error)
            }
        };
    explanation
}

/// A `CONNECT`, decided by the broker's own checks before its `200` (`proxy::connect`), without
/// the capability and the addresses: the target, then whether a tunnel to it may open.
fn tunnel(
    explanation: &mut Explanation,
    policy: &CompiledPolicy,
    aliases: &AliasFile,
    request: &ExplainRequest,
) -> Result<Vec<String>, ProxyError> {
    let target = connect::connect_target(&request.url)?;
    let target = explanation.target.insert(target);
    connect::tunnel_may_open(policy, aliases, &request.agent, target)
}

/// The proxy's `forward`, steps 2 to 4, without the capability and the limits, through the
/// proxy's own checks (`proxy::headers`, `proxy::pipeline`): returns the verdict before limits,
/// an allow with its admitting rules or a hold for the operator's approval.
fn pipeline(
    explanation: &mut Explanation,
    policy: &CompiledPolicy,
    aliases: &AliasFile,
    shaped: &ShapedPlaceholders,
    request: &ExplainRequest,
    max_body: u64,
) -> Result<Verdict, ProxyError> {
    // 2. The target, the method, framing and headers, the body.
    let raw = RawTarget::from_url(&request.url)?;
    let (target, _) = raw.canonicalize(shaped)?;
    explanation.target = Some(target.clone());
    headers::check_method(&request.method)?;
    headers::check_request(&request.method, &request.headers)?;
    // What is never forwarded is never scanned either: a placeholder in `Mint-Capability` or a
    // hop-by-hop header is dropped, not refused.
    let mut forwarded = request.headers.clone();
    headers::strip_request(&mut forwarded);
    let places = BodyPlaces::new(aliases);

    // 3a. As the proxy does before it reads a body: the placeholders of the target and the
    // headers, and the policy for whatever the body could hold.
    if !request.body.is_empty() {
        let found = pipeline::find_placeholders(&raw, &forwarded, &[], &places, shaped)?;
        explanation.aliases = alias_reports(&found, aliases, &target);
        pipeline::check_placeholders(&found, aliases)?;
        let uses = found.alias_uses();
        pipeline::check_bindings(aliases, &target, &uses)?;
        pipeline::refuse_whatever_the_body(
            policy,
            &request.agent,
            &request.method,
            &target,
            &uses,
        )?;
    }
    if request.body.len() as u64 > max_body {
        return Err(ProxyError::BodyTooLarge { limit: max_body });
    }

    // 3b. The body as a receiver decodes it: method overrides, then the tools.
    let decoded = pipeline::decoded_body(&forwarded, &request.body)?;
    pipeline::check_encoded_body(&forwarded, &decoded, &places, shaped)?;
    headers::check_override_params(
        &request.method,
        target.query.as_deref(),
        &forwarded,
        &decoded,
    )?;
    let (tools, other_messages) = match &request.tool {
        Some(tool) => {
            explanation.tool_source = Some(ToolSource::Flag);
            let tools = vec![tool.clone()];
            pipeline::check_mcp_name(&forwarded, &tools)?;
            (tools, false)
        }
        None => {
            explanation.tool_source = Some(ToolSource::Body);
            let tools = pipeline::mcp_tools(&forwarded, &decoded)?;
            // A batch is allowed only if every element is: messages besides the tool calls are
            // the endpoint's own traffic, evaluated without a tool.
            let other =
                tools.is_empty() || JsonRpcIds::of(&decoded).holds_other_messages(tools.len());
            (tools, other)
        }
    };
    drop(decoded);
    explanation.tools.clone_from(&tools);
    let found = pipeline::find_placeholders(&raw, &forwarded, &request.body, &places, shaped)?;
    explanation.aliases = alias_reports(&found, aliases, &target);
    explanation.skipped = found.skipped().clone();
    pipeline::check_placeholders(&found, aliases)?;
    let uses = found.alias_uses();
    pipeline::check_bindings(aliases, &target, &uses)?;

    // 4. The policy, once per call; every call must be allowed. All calls are evaluated, so the
    // report shows each one; the refusal is the first denial (or a batch calling several tools),
    // as the proxy answers it.
    let evaluated = pipeline::evaluate_calls(
        policy,
        &request.agent,
        &request.method,
        &target,
        &uses,
        &tools,
        other_messages,
    );
    explanation.evaluations = evaluated
        .calls
        .iter()
        .map(|(tool, evaluation)| CallReport {
            tool: tool.clone(),
            evaluation: evaluation.clone(),
        })
        .collect();
    if let Some(held) = evaluated.held() {
        evaluated.one_tool()?;
        explanation.charges = held.allowed.charges.into_iter().flatten().collect();
        return Ok(Verdict::Approve {
            rules: held.rules,
            timeout: held.timeout,
            allow_rules: held.allowed.rules,
            limited: Vec::new(),
        });
    }
    let allowed = pipeline::allowed_or_closest(
        evaluated,
        policy,
        &request.agent,
        &request.method,
        &target,
        &uses,
    )?;
    explanation.charges = allowed.charges.into_iter().flatten().collect();
    Ok(Verdict::Allow {
        rules: allowed.rules,
    })
}

/// Every alias the placeholders name, with where each sits and what its declaration allows.
fn alias_reports(found: &Placeholders, aliases: &AliasFile, target: &Target) -> Vec<AliasReport> {
    found
        .aliases()
        .into_iter()
        .map(|name| AliasReport {
            name: name.to_owned(),
            places: found
                .found()
                .iter()
                .filter(|f| f.alias == name)
                .map(|f| Placement {
                    part: f.part.clone(),
                    place: f.place,
                    offset: f.span.start,
                    matched: f.matched.clone(),
                })
                .collect(),
            declaration: aliases.find(name).map(|alias| AliasBinding {
                hosts: alias.hosts.iter().map(|h| h.as_text()).collect(),
                sites: alias.sites,
                bound: Some(alias.hosts.iter().any(|p| p.matches(&target.host))),
            }),
        })
        .collect()
}

/// What a counter is kept per, read back from its key (`RULE#N`, then one value per `by` key of
/// limit N, separated by U+001F); empty for a legacy entry or a limit without `by`.
fn counter_by(policy: &CompiledPolicy, charge: &Charge) -> Vec<(&'static str, String)> {
    let mut parts = charge.key.split('\u{1f}');
    let Some(head) = parts.next() else {
        return Vec::new();
    };
    let limit = head
        .rsplit_once('#')
        .and_then(|(id, n)| Some((id, n.parse::<usize>().ok()?)))
        .and_then(|(id, n)| {
            let rule = policy.policy().rules.iter().find(|r| r.id == id)?;
            rule.limits.get(n)
        });
    let Some(limit) = limit else {
        return Vec::new();
    };
    limit
        .by
        .iter()
        .zip(parts)
        .map(|(key, value)| (limit_key_name(*key), value.to_owned()))
        .collect()
}

fn limit_key_name(key: LimitKey) -> &'static str {
    match key {
        LimitKey::Agent => "agent",
        LimitKey::Alias => "alias",
        LimitKey::Host => "host",
        LimitKey::Tool => "tool",
    }
}

/// Reads and compiles a policy file; every error is kept for the report.
fn load_policy_at(path: &Path) -> Result<CompiledPolicy, ExplainError> {
    let bytes = read_file(path, "policy file")?;
    let load = load_policy(&bytes, &path.display().to_string());
    match load.policy {
        Some(policy) if !has_errors(&load.diagnostics) => Ok(CompiledPolicy::new(policy)),
        _ => Err(invalid("policy file", path, load.diagnostics)),
    }
}

/// Reads and validates an alias file; every error is kept for the report.
fn load_aliases_at(path: &Path) -> Result<AliasFile, ExplainError> {
    let bytes = read_file(path, "alias file")?;
    let load = load_aliases(&bytes, &path.display().to_string());
    match load.aliases {
        Some(file) if !has_errors(&load.diagnostics) => Ok(file),
        _ => Err(invalid("alias file", path, load.diagnostics)),
    }
}

/// Reads a policy or alias file as `mint serve` reads it (`read_config_file`: one open through
/// `secure_file::open_trusted`, every directory and link on the way checked, the file judged on
/// its descriptor, refused when caught changing).
fn read_file(path: &Path, what: &'static str) -> Result<Vec<u8>, ExplainError> {
    match read_config_file(path, MAX_FILE_BYTES) {
        Ok(file) => Ok(file.bytes),
        Err(ConfigFileError::Insecure(refusal)) => Err(ExplainError::Untrusted { what, refusal }),
        Err(ConfigFileError::Unreadable(problem)) => Err(ExplainError::Unreadable {
            what,
            path: path.to_path_buf(),
            problem,
        }),
    }
}

fn has_errors(diagnostics: &[Diagnostic]) -> bool {
    diagnostics.iter().any(|d| d.severity() == Severity::Error)
}

fn invalid(what: &'static str, path: &Path, diagnostics: Vec<Diagnostic>) -> ExplainError {
    ExplainError::Invalid {
        what,
        path: path.to_path_buf(),
        diagnostics: diagnostics
            .into_iter()
            .filter(|d| d.severity() == Severity::Error)
            .collect(),
    }
}

fn count_errors(n: usize) -> String {
    mint_policy::diagnostic::count_noun(n.max(1), "error")
}

/// Reads `NAME: VALUE` as curl does: the name up to the first `:`, the value without the
/// whitespace around it. Problems never quote the text.
fn parse_header(text: &str) -> Result<(HeaderName, HeaderValue), &'static str> {
    let (name, value) = text
        .split_once(':')
        .ok_or("expected `NAME: VALUE`, with a `:` after the name")?;
    let name = HeaderName::from_bytes(name.trim().as_bytes())
        .map_err(|_| "the name is not a valid header name")?;
    let value = HeaderValue::from_str(value.trim())
        .map_err(|_| "the value holds a character a header value cannot hold")?;
    Ok((name, value))
}

fn usage(message: impl Into<String>) -> ExplainError {
    ExplainError::Usage(message.into())
}

/// Now, as a duration since the Unix epoch: the clock audit timestamps use.
fn wall_clock() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests;
