//! The credentialed HTTP proxy: the routes, and the pipeline every proxied request goes through.
//!
//! Pipeline, in DESIGN.md's order; a refusal at any step is answered with a JSON error and
//! audited (a `decision` record if none was written yet, then an `outcome` record):
//!
//! 1. authenticate (`Mint-Capability`, or `Proxy-Authorization: Bearer` in forward-proxy mode);
//! 2. parse and canonicalize the target once (`mint_policy::normalize`), check the method,
//!    framing and headers, strip what is never forwarded, read the body within its limit;
//! 3. find placeholders and where they sit; unknown alias 400; a placeholder in a forbidden place
//!    403; alias not bound to the host 403; site the alias does not allow 403; capability
//!    narrowing 403;
//! 4. policy (deny overrides) 403, then call limits 429, checked and consumed atomically;
//! 5. write the `decision` record (fail closed: 503 when it cannot be written);
//! 6. substitute (`inject`), send through [`UpstreamClient`] (DNS and address checks, TLS), and
//!    stream the answer back scrubbed (`answer`); the `outcome` record is written when it ends.
//!
//! The upstream request is built from the canonical target only, never from the raw input: match
//! what is forwarded and forward what was matched.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant, SystemTime};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use axum::{Json, Router};
use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Method, Uri, Version};
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use mint_policy::audit::{
    AgentName, AliasName, AuditDecision, CapabilityId, Outcome, ReasonCode, RequestId, RuleId,
    ToolName,
};
use mint_policy::evaluate::{self, AliasUse, Evaluation};
use mint_policy::limits::{Charge, Limiter};
use mint_policy::normalize::{Target, normalize_target};
use mint_policy::site::Site;

use crate::audit::facts::{DecisionFacts, RequestFacts, TargetFacts, decision_record};
use crate::audit::{AuditLog, now};
use crate::capability::{CapabilityGrant, CapabilityStore};
use crate::declarations::Declarations;
use crate::inject::{self, InjectError};
use crate::mcp_call;
use crate::placeholder::{self, Place, RequestParts};
use crate::upstream::{ConnectError, UpstreamClient, connect_error};

mod answer;
mod error;
mod headers;

pub use error::{Fault, Invalid, OUTCOME_HEADER, ProxyError, REQUEST_ID_HEADER};
pub use headers::FramingWatch;

use answer::OutcomeWriter;
use error::describe_part;

/// The capability header of `/v1/proxy` requests.
pub const CAPABILITY_HEADER: &str = "mint-capability";

/// Limits and timeouts of the proxy (DESIGN.md, Limits).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProxyLimits {
    /// Resolving, connecting and the TLS handshake together.
    pub connect_timeout: Duration,
    /// The whole exchange up to the answer's head, connecting included, and the longest time to
    /// read the agent's body. Always longer than `connect_timeout` ([`ProxyLimits::check`]), so
    /// a connection that cannot be made ends as `failed` (nothing sent) before this fires.
    pub request_timeout: Duration,
    /// The longest silence inside an answer's body (an SSE stream idles between events).
    pub idle_timeout: Duration,
    /// The agent's request body.
    pub max_request_body: u64,
    /// The answer's body, after decoding.
    pub max_response_body: u64,
    /// Reading the agent's request head.
    pub header_read_timeout: Duration,
    /// How long in-flight requests may take to finish at shutdown.
    pub shutdown_grace: Duration,
}

/// A combination of limits that cannot work.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the request timeout must be longer than the connect timeout")]
pub struct LimitsError;

// === impl ProxyLimits ===

impl ProxyLimits {
    /// Refuses a request timeout that is not longer than the connect timeout: a connect that
    /// times out must be reported as `failed` (nothing was sent), never as an `unknown` 504.
    pub fn check(&self) -> Result<(), LimitsError> {
        if self.request_timeout <= self.connect_timeout {
            return Err(LimitsError);
        }
        Ok(())
    }
}

impl Default for ProxyLimits {
    fn default() -> Self {
        ProxyLimits {
            connect_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(300),
            max_request_body: 10 << 20,
            max_response_body: 64 << 20,
            header_read_timeout: Duration::from_secs(10),
            shutdown_grace: Duration::from_secs(10),
        }
    }
}

/// What every request handler shares. Cheap to clone.
#[derive(Clone, Debug)]
pub struct AppState {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    limits: ProxyLimits,
    declarations: RwLock<Arc<Declarations>>,
    capabilities: CapabilityStore,
    audit: AuditLog,
    limiter: Mutex<Limiter>,
    upstream: UpstreamClient,
    started: Instant,
    ids: RequestIds,
}

/// Request ids: a random prefix per broker run and a counter.
#[derive(Debug)]
struct RequestIds {
    prefix: String,
    next: AtomicU64,
}

/// The request id, in the request's extensions from the front door on.
#[derive(Clone, Debug)]
struct RequestIdExt(RequestId);

/// How the request reached the proxy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// `/v1/proxy/{scheme}/{authority}/{path}`.
    Route,
    /// An absolute-form request, as `HTTP_PROXY` clients send them.
    Forward,
}

// === impl AppState ===

impl AppState {
    /// The state of a broker.
    pub fn new(
        limits: ProxyLimits,
        declarations: Declarations,
        capabilities: CapabilityStore,
        audit: AuditLog,
        upstream: UpstreamClient,
    ) -> AppState {
        let mut random = [0u8; 6];
        // A prefix that repeats after a failed random read only makes ids less unique across
        // runs; the audit chain does not depend on them.
        let _ = getrandom::fill(&mut random);
        AppState {
            inner: Arc::new(Inner {
                limits,
                declarations: RwLock::new(Arc::new(declarations)),
                capabilities,
                audit,
                limiter: Mutex::new(Limiter::new()),
                upstream,
                started: Instant::now(),
                ids: RequestIds {
                    prefix: hex::encode(random),
                    next: AtomicU64::new(1),
                },
            }),
        }
    }

    /// The declarations in force.
    pub fn declarations(&self) -> Arc<Declarations> {
        Arc::clone(
            &self
                .inner
                .declarations
                .read()
                .unwrap_or_else(PoisonError::into_inner),
        )
    }

    /// Replaces the declarations (hot reload). Requests in flight keep the ones they started
    /// with.
    pub fn replace_declarations(&self, declarations: Declarations) {
        *self
            .inner
            .declarations
            .write()
            .unwrap_or_else(PoisonError::into_inner) = Arc::new(declarations);
    }

    /// The audit log.
    pub fn audit(&self) -> &AuditLog {
        &self.inner.audit
    }

    /// The limits and timeouts.
    pub fn limits(&self) -> &ProxyLimits {
        &self.inner.limits
    }

    /// Forgets call-limit history older than every window (called periodically).
    pub fn prune_limits(&self) {
        let now = self.inner.started.elapsed();
        self.limiter().prune(now);
    }

    fn limiter(&self) -> std::sync::MutexGuard<'_, Limiter> {
        self.inner
            .limiter
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// A fresh request id.
    pub(crate) fn next_request_id(&self) -> RequestId {
        let n = self.inner.ids.next.fetch_add(1, Ordering::Relaxed);
        let text = format!("{}-{n}", self.inner.ids.prefix);
        // INVARIANT: 12 hex digits, `-` and a decimal number match `[A-Za-z0-9_-]{1,64}`.
        RequestId::new(text).unwrap_or_else(|_| fallback_request_id())
    }

    fn authenticate(&self, token: Option<&str>, mode: Mode) -> Result<CapabilityGrant, ProxyError> {
        let invalid = ProxyError::CapabilityInvalid {
            forward: mode == Mode::Forward,
        };
        let Some(token) = token else {
            return Err(invalid);
        };
        self.inner
            .capabilities
            .verify(token, SystemTime::now())
            .map_err(|_| invalid)
    }
}

#[expect(
    clippy::expect_used,
    reason = "INVARIANT: a constant that matches the request id grammar"
)]
fn fallback_request_id() -> RequestId {
    RequestId::new("unnumbered").expect("valid request id")
}

/// The broker's routes. Pure: serve it with `serve::run`, or test it with `oneshot`.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/v1/aliases", get(list_aliases))
        .route("/v1/proxy/{*target}", any(proxy_route))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        // Runs before routing decides anything about the path: CONNECT and absolute-form
        // requests are answered here, whatever their path says.
        .layer(middleware::from_fn_with_state(state.clone(), front_door))
        .with_state(state)
}

/// Gives every request its id and `Mint-Request-Id`; answers CONNECT and forward-proxy requests.
async fn front_door(State(state): State<AppState>, mut request: Request, next: Next) -> Response {
    let id = state.next_request_id();
    request.extensions_mut().insert(RequestIdExt(id.clone()));
    let mut response = if request.method() == Method::CONNECT {
        let mut exchange = Exchange::new(&state, id.clone(), request.method());
        exchange.refuse(&state, ProxyError::ConnectUnsupported)
    } else if request.uri().scheme().is_some() && request.version() <= Version::HTTP_11 {
        // HTTP/1.x absolute-form is a forward-proxy request; HTTP/2 always carries a scheme and
        // authority (Mint's own), so it is routed by path like origin-form.
        proxy(&state, id.clone(), Mode::Forward, request).await
    } else {
        next.run(request).await
    };
    if !response.headers().contains_key(REQUEST_ID_HEADER)
        && let Ok(value) = HeaderValue::from_str(id.as_str())
    {
        response.headers_mut().insert(REQUEST_ID_HEADER, value);
    }
    response
}

async fn healthz() -> Response {
    Json(serde_json::json!({"status": "ok"})).into_response()
}

async fn not_found(request: Request) -> Response {
    ProxyError::NotFound.to_response(request_id_of(&request).as_str())
}

async fn method_not_allowed(request: Request) -> Response {
    ProxyError::MethodNotAllowed.to_response(request_id_of(&request).as_str())
}

fn request_id_of(request: &Request) -> RequestId {
    request
        .extensions()
        .get::<RequestIdExt>()
        .map_or_else(fallback_request_id, |ext| ext.0.clone())
}

/// `GET /v1/aliases`: the aliases this capability may use, with their hosts and sites.
async fn list_aliases(State(state): State<AppState>, request: Request) -> Response {
    let id = request_id_of(&request);
    let token = single_header(request.headers(), CAPABILITY_HEADER);
    let grant = match state.authenticate(token, Mode::Route) {
        Ok(grant) => grant,
        Err(error) => return error.to_response(id.as_str()),
    };
    let declarations = state.declarations();
    let aliases: Vec<serde_json::Value> = declarations
        .aliases()
        .aliases
        .iter()
        .filter(|alias| grant.allows_alias(&alias.name))
        .map(|alias| {
            serde_json::json!({
                "name": alias.name,
                "description": alias.description,
                "hosts": alias.hosts.iter().map(|h| h.as_text()).collect::<Vec<_>>(),
                "sites": alias.sites.iter().map(Site::as_str).collect::<Vec<_>>(),
                "placeholder": format!("{{{{mint:{}}}}}", alias.name),
            })
        })
        .collect();
    Json(serde_json::json!({"agent": grant.agent.as_str(), "aliases": aliases})).into_response()
}

async fn proxy_route(State(state): State<AppState>, request: Request) -> Response {
    let id = request_id_of(&request);
    proxy(&state, id, Mode::Route, request).await
}

/// One request through the pipeline; every refusal is audited and answered here.
async fn proxy(state: &AppState, id: RequestId, mode: Mode, request: Request) -> Response {
    let mut exchange = Exchange::new(state, id, request.method());
    match forward(state, &mut exchange, mode, request).await {
        Ok(response) => response,
        Err(error) => exchange.refuse(state, error),
    }
}

/// The audit facts of one request as they are learned, and whether its decision is recorded.
struct Exchange {
    audit: AuditLog,
    /// Whether the outcome record is written, or handed to the answer's body to write.
    outcome_written: bool,
    facts: RequestFacts,
    received: Instant,
    decided: bool,
    bytes_up: Option<u64>,
    /// The JSON-RPC ids of an MCP `tools/call` request, once recognized: its refusals are
    /// answered as JSON-RPC errors the MCP client can show.
    jsonrpc: Option<JsonRpcIds>,
}

/// The ids of a JSON-RPC request or batch, for error answers.
struct JsonRpcIds {
    batch: bool,
    ids: Vec<serde_json::Value>,
    /// How many messages the body holds; `None` when it could not be counted.
    messages: Option<usize>,
}

// === impl Exchange ===

impl Exchange {
    fn new(state: &AppState, id: RequestId, method: &Method) -> Exchange {
        Exchange {
            audit: state.audit().clone(),
            outcome_written: false,
            facts: RequestFacts {
                id,
                agent: None,
                capability: None,
                method: mint_policy::audit::Method::new(method.as_str()).ok(),
                target: None,
                aliases: Vec::new(),
                mcp_tool: None,
            },
            received: Instant::now(),
            decided: false,
            bytes_up: None,
            jsonrpc: None,
        }
    }

    /// Writes the decision record of a request that is refused here, then its outcome record,
    /// and answers with the error.
    fn refuse(&mut self, state: &AppState, error: ProxyError) -> Response {
        let id = self.facts.id.clone();
        match error.fault() {
            error::Fault::Client => {
                tracing::info!(request.id = %id, code = error.code(), "Request refused");
            }
            error::Fault::Upstream => {
                tracing::info!(request.id = %id, code = error.code(), error = %error, "Upstream exchange failed");
            }
            error::Fault::Internal => {
                tracing::error!(request.id = %id, code = error.code(), error = %error, "Request failed");
            }
        }
        if !self.decided {
            let decision = match error {
                ProxyError::Limited { .. } => AuditDecision::Limited,
                _ => AuditDecision::Deny,
            };
            let rules = match &error {
                ProxyError::PolicyDenied { rules, .. } | ProxyError::Limited { rules, .. } => {
                    Some(rule_ids(rules))
                }
                _ => None,
            };
            let facts = DecisionFacts {
                decision,
                rules,
                reason: ReasonCode::new(error.reason()).ok(),
            };
            let record = decision_record(now(), &self.facts, &facts);
            if let Err(audit_error) = state.audit().append(record) {
                tracing::error!(request.id = %id, error = %audit_error, "Decision record not written");
            }
            self.decided = true;
        }
        self.outcome_written = true;
        let outcome = OutcomeWriter {
            audit: state.audit().clone(),
            facts: self.facts.clone(),
            received: self.received,
            bytes_up: self.bytes_up.unwrap_or(0),
        };
        outcome.write(
            error.outcome(),
            Some(error.status()),
            Some(0),
            Some(error.reason()),
        );
        let mut response = error.to_response(id.as_str());
        if let Some(jsonrpc) = &self.jsonrpc {
            *response.body_mut() = Body::from(jsonrpc.error_body(&error, id.as_str()));
            response.headers_mut().remove(header::CONTENT_LENGTH);
        }
        response
    }

    /// Writes the `allow` decision record; the request goes nowhere if it cannot be written.
    async fn record_allow(&mut self, state: &AppState, rules: &[String]) -> Result<(), ProxyError> {
        let facts = DecisionFacts {
            decision: AuditDecision::Allow,
            rules: Some(rule_ids(rules)),
            reason: None,
        };
        let record = decision_record(now(), &self.facts, &facts);
        state.audit().record_async(record).await.map_err(|error| {
            tracing::error!(request.id = %self.facts.id, error = %error, "Decision record not written; refusing");
            ProxyError::AuditUnavailable
        })?;
        self.decided = true;
        Ok(())
    }
}

// === impl JsonRpcIds ===

impl JsonRpcIds {
    /// The ids of the messages of `body` (already checked strictly by `mcp_call`): every
    /// top-level JSON text, arrays expanded (JSON Lines included). A body that does not parse
    /// here (gzip, a byte order mark) gives no ids and counts as holding other messages.
    fn of(body: &[u8]) -> JsonRpcIds {
        let mut ids = Vec::new();
        let mut messages = 0;
        let mut texts = 0;
        let mut parsed = true;
        for value in serde_json::Deserializer::from_slice(body).into_iter::<serde_json::Value>() {
            let Ok(value) = value else {
                parsed = false;
                break;
            };
            texts += 1;
            let elements = match value {
                serde_json::Value::Array(elements) => elements,
                other => vec![other],
            };
            for element in elements {
                if element.is_object() {
                    messages += 1;
                }
                if let Some(id) = element.get("id") {
                    ids.push(id.clone());
                }
            }
        }
        JsonRpcIds {
            batch: texts != 1 || messages != 1,
            ids,
            messages: parsed.then_some(messages),
        }
    }

    /// A JSON-RPC error answer per request id (`-32001`, Mint's error object in `data`).
    fn error_body(&self, error: &ProxyError, request_id: &str) -> String {
        let one = |id: serde_json::Value| {
            serde_json::json!({
                "jsonrpc": "2.0",
                "id": id,
                "error": {
                    "code": JSONRPC_REFUSED,
                    "message": format!("refused by Mint: {error}"),
                    "data": {
                        "code": error.code(),
                        "rules": error.rules(),
                        "request_id": request_id,
                    },
                },
            })
        };
        let body = if self.batch && !self.ids.is_empty() {
            serde_json::Value::Array(self.ids.iter().cloned().map(one).collect())
        } else {
            one(self.ids.first().cloned().unwrap_or(serde_json::Value::Null))
        };
        body.to_string()
    }
}

/// The JSON-RPC error code of a call Mint refused (server-defined range).
pub const JSONRPC_REFUSED: i64 = -32001;

impl Drop for Exchange {
    /// The agent went away while the request was in Mint's hands (before the answer's head): an
    /// allowed request gets its outcome all the same. It may have been sent: `unknown`.
    fn drop(&mut self) {
        if !self.decided || self.outcome_written {
            return;
        }
        let outcome = OutcomeWriter {
            audit: self.audit.clone(),
            facts: self.facts.clone(),
            received: self.received,
            bytes_up: self.bytes_up.unwrap_or(0),
        };
        tracing::info!(request.id = %self.facts.id, "Agent went away before the answer");
        outcome.write(Outcome::Unknown, None, Some(0), Some("client_closed"));
    }
}

fn rule_ids(rules: &[String]) -> Vec<RuleId> {
    rules
        .iter()
        .filter_map(|r| RuleId::new(r.as_str()).ok())
        .collect()
}

/// The target as the agent wrote it.
struct RawTarget {
    scheme: String,
    authority: String,
    path: String,
    query: Option<String>,
}

// === impl RawTarget ===

impl RawTarget {
    /// `/v1/proxy/{scheme}/{authority}/{path...}?{query}`.
    fn from_route(uri: &Uri) -> Result<RawTarget, Invalid> {
        let rest = uri
            .path()
            .strip_prefix("/v1/proxy/")
            .ok_or(Invalid::Route)?;
        let (scheme, rest) = rest.split_once('/').ok_or(Invalid::Route)?;
        let (authority, path) = match rest.find('/') {
            Some(at) => rest.split_at(at),
            None => (rest, "/"),
        };
        if scheme.is_empty() || authority.is_empty() {
            return Err(Invalid::Route);
        }
        Ok(RawTarget {
            scheme: scheme.to_owned(),
            authority: authority.to_owned(),
            path: path.to_owned(),
            query: uri.query().map(str::to_owned),
        })
    }

    /// An absolute-form request: `GET http://host/path`. Plain `http` toward a host that is not
    /// loopback is sent as `https`; the policy matches the scheme Mint uses upstream.
    fn from_absolute(uri: &Uri, headers: &http::HeaderMap) -> Result<RawTarget, Invalid> {
        let scheme = uri.scheme_str().ok_or(Invalid::Route)?;
        let authority = uri.authority().ok_or(Invalid::Route)?.as_str();
        // The Host header must name the target: compared canonically (`h:80` is `h` for http).
        if let Some(host) = single_header(headers, header::HOST.as_str()) {
            let default_port = if scheme == "https" { 443 } else { 80 };
            let canonical = |text: &str| {
                mint_policy::normalize::parse_authority(text)
                    .map(|(host, port)| (host, port.unwrap_or(default_port)))
            };
            match (canonical(host), canonical(authority)) {
                (Ok(a), Ok(b)) if a == b => {}
                (_, Err(error)) => return Err(Invalid::Target(error)),
                _ => return Err(Invalid::HostMismatch),
            }
        } else if headers.contains_key(header::HOST) {
            return Err(Invalid::HostMismatch);
        }
        let scheme = match scheme {
            "http" => {
                let loopback = mint_policy::normalize::parse_authority(authority)
                    .map(|(host, _)| host.is_loopback())
                    .map_err(Invalid::Target)?;
                if loopback { "http" } else { "https" }
            }
            other => other,
        };
        Ok(RawTarget {
            scheme: scheme.to_owned(),
            authority: authority.to_owned(),
            path: uri.path().to_owned(),
            query: uri.query().map(str::to_owned),
        })
    }

    fn path_and_query(&self) -> String {
        match &self.query {
            Some(query) => format!("{}?{query}", self.path),
            None => self.path.clone(),
        }
    }
}

/// The one value of a header, or `None` when it is absent, repeated or not text.
fn single_header<'a>(headers: &'a http::HeaderMap, name: &str) -> Option<&'a str> {
    let mut values = headers.get_all(name).iter();
    match (values.next(), values.next()) {
        (Some(value), None) => value.to_str().ok(),
        _ => None,
    }
}

/// The capability token: `Mint-Capability` on the route; in forward-proxy mode
/// `Proxy-Authorization: Bearer <token>`, or `Basic` with the token as the password, which is what
/// clients send for a proxy URL `http://agent:<token>@127.0.0.1:8700` in `HTTP_PROXY` (the scheme
/// name in any case, RFC 9110 section 11.1).
fn capability_token(headers: &http::HeaderMap, mode: Mode) -> Option<String> {
    match mode {
        Mode::Route => single_header(headers, CAPABILITY_HEADER).map(str::to_owned),
        Mode::Forward => {
            let value = single_header(headers, header::PROXY_AUTHORIZATION.as_str())?;
            let (scheme, credentials) = value.split_once(' ')?;
            let credentials = credentials.trim();
            if scheme.eq_ignore_ascii_case("bearer") {
                Some(credentials.to_owned())
            } else if scheme.eq_ignore_ascii_case("basic") {
                use base64::Engine as _;
                let decoded = base64::engine::general_purpose::STANDARD
                    .decode(credentials)
                    .ok()?;
                let text = String::from_utf8(decoded).ok()?;
                text.split_once(':')
                    .map(|(_, password)| password.to_owned())
            } else {
                None
            }
        }
    }
}

/// The pipeline up to the answer's head.
async fn forward(
    state: &AppState,
    exchange: &mut Exchange,
    mode: Mode,
    request: Request,
) -> Result<Response, ProxyError> {
    let (parts, body) = request.into_parts();
    let method = parts.method;

    // 1. Authenticate.
    let token = capability_token(&parts.headers, mode);
    let grant = state.authenticate(token.as_deref(), mode)?;
    exchange.facts.agent = AgentName::new(grant.agent.as_str()).ok();
    exchange.facts.capability = CapabilityId::new(grant.id.as_str()).ok();

    // 2. The target, the method, framing and headers, the body.
    let raw = match mode {
        Mode::Route => RawTarget::from_route(&parts.uri)?,
        Mode::Forward => RawTarget::from_absolute(&parts.uri, &parts.headers)?,
    };
    refuse_placeholder_in_target(&raw)?;
    let target = normalize_target(&raw.scheme, &raw.authority, &raw.path_and_query())
        .map_err(Invalid::Target)?;
    exchange.facts.target =
        Some(TargetFacts::from_target(&target).map_err(|e| Invalid::Unauditable(e.to_string()))?);
    headers::check_method(&method)?;
    if let Some(framing) = parts.extensions.get::<FramingWatch>() {
        framing.take()?;
    }
    headers::check_request(&method, &parts.headers)?;
    let declared = headers::content_length(&parts.headers);
    let mut request_headers = parts.headers;
    headers::strip_request(&mut request_headers);
    let body = read_body(body, declared, state.limits()).await?;
    headers::check_override_params(&method, target.query.as_deref(), &request_headers, &body)?;

    // 3. Placeholders, aliases, bindings, sites, capability narrowing.
    let tools = mcp_tools(&method, &request_headers, &body)?;
    // A server may route by the `Mcp-Name` header instead of the body: it must name the tool the
    // body calls, or the policy would have judged another tool than the one that runs.
    if !tools.is_empty()
        && request_headers
            .get_all("mcp-name")
            .iter()
            .any(|value| tools.iter().any(|tool| tool.as_bytes() != value.as_bytes()))
    {
        return Err(Invalid::Mcp(
            "the `Mcp-Name` header must name the tool the body calls".to_owned(),
        )
        .into());
    }
    // A batch is allowed only if every element is: messages besides the tool calls are the
    // endpoint's own traffic, evaluated without a tool.
    let mut other_messages = tools.is_empty();
    if !tools.is_empty() {
        let ids = JsonRpcIds::of(&body);
        other_messages = ids.messages.is_none_or(|count| count > tools.len());
        exchange.jsonrpc = Some(ids);
    }
    exchange.facts.mcp_tool = tools
        .first()
        .and_then(|tool| ToolName::new(tool.as_str()).ok());
    let found = placeholder::scan(&RequestParts {
        scheme: &raw.scheme,
        authority: &raw.authority,
        path: &raw.path,
        query: raw.query.as_deref(),
        headers: &request_headers,
        body: &body,
    })
    .map_err(ProxyError::Placeholder)?;
    exchange.facts.aliases = found
        .aliases()
        .into_iter()
        .filter_map(|alias| AliasName::new(alias).ok())
        .collect();
    let declarations = state.declarations();
    for alias in found.aliases() {
        if declarations.alias(alias).is_none() {
            return Err(ProxyError::UnknownAlias {
                alias: alias.to_owned(),
            });
        }
    }
    if let Some(forbidden) = found.forbidden().next() {
        let place = match forbidden.place {
            Place::Forbidden(place) => format!("{place} ({})", describe_part(&forbidden.part)),
            Place::Site(site) => site.as_str().to_owned(),
        };
        return Err(ProxyError::SiteNotAllowed {
            alias: forbidden.alias.clone(),
            place,
        });
    }
    let uses = found.alias_uses();
    check_aliases(&declarations, &grant, &target, &uses)?;

    // 4. Policy and call limits.
    let admitted = decide(
        state,
        &declarations,
        &grant,
        &method,
        &target,
        &uses,
        &tools,
        other_messages,
        &mut exchange.facts.mcp_tool,
    )?;
    let charges = (admitted.charges.clone(), admitted.admitted_at);
    let outgoing = Outgoing {
        method,
        target,
        uses,
        headers: request_headers,
        body,
    };
    let sent = send(state, exchange, &declarations, admitted, outgoing).await;
    if let Err(error) = &sent
        && error.outcome() != Outcome::Unknown
    {
        // Never sent: it does not count against any limit.
        let calls: Vec<&[Charge]> = charges.0.iter().map(Vec::as_slice).collect();
        state.limiter().refund_each(&calls, charges.1);
    }
    sent
}

/// What is about to be sent, before substitution.
struct Outgoing {
    method: Method,
    target: Target,
    uses: Vec<AliasUse>,
    headers: http::HeaderMap,
    body: Bytes,
}

/// The pipeline from the decision record to the answer's head.
async fn send(
    state: &AppState,
    exchange: &mut Exchange,
    declarations: &Declarations,
    admitted: Admitted,
    outgoing: Outgoing,
) -> Result<Response, ProxyError> {
    let Outgoing {
        method,
        target,
        uses,
        headers: mut request_headers,
        body,
    } = outgoing;

    // 5. The decision record, before anything leaves.
    exchange.record_allow(state, &admitted.rules).await?;

    // 6. Substitute, send, answer.
    let secrets = declarations
        .secrets_for(&uses)
        .ok_or_else(|| ProxyError::Internal("an alias secret is not loaded".to_owned()))?;
    let body = inject::body(&request_headers, body, &secrets).map_err(inject_error)?;
    inject::headers(&mut request_headers, &secrets).map_err(inject_error)?;
    let uri = inject::uri(&target, &secrets).map_err(inject_error)?;
    drop(secrets);
    request_headers.insert(
        header::ACCEPT_ENCODING,
        HeaderValue::from_static("identity"),
    );
    exchange.bytes_up = Some(body.len() as u64);
    let mut upstream_request = http::Request::new(Full::new(body));
    *upstream_request.method_mut() = method;
    *upstream_request.uri_mut() = uri;
    *upstream_request.version_mut() = Version::HTTP_11;
    *upstream_request.headers_mut() = request_headers;

    let limits = *state.limits();
    let sent = tokio::time::timeout(
        limits.request_timeout,
        state
            .inner
            .upstream
            .send(upstream_request, admitted.allow_private),
    )
    .await;
    let response = match sent {
        Err(_) => return Err(ProxyError::UpstreamTimeout(limits.request_timeout)),
        Ok(Err(error)) => return Err(upstream_error(&error)),
        Ok(Ok(response)) => response,
    };
    tracing::debug!(request.id = %exchange.facts.id, status = response.status().as_u16(), "Upstream answered");
    exchange.outcome_written = true;
    let outcome = OutcomeWriter {
        audit: state.audit().clone(),
        facts: exchange.facts.clone(),
        received: exchange.received,
        bytes_up: exchange.bytes_up.unwrap_or(0),
    };
    let id = exchange.facts.id.clone();
    match answer::answer(
        response,
        declarations.scrubber(),
        id.as_str(),
        limits.max_response_body,
        limits.idle_timeout,
        outcome,
    ) {
        Ok(response) => Ok(response.map(Body::new)),
        Err(error) => Err(error),
    }
}

/// Refuses (403) a placeholder in the scheme or authority as written, before the target is
/// parsed: a name that fails to parse must still be answered as a placeholder where none may go.
fn refuse_placeholder_in_target(raw: &RawTarget) -> Result<(), ProxyError> {
    let empty = http::HeaderMap::new();
    let found = placeholder::scan(&RequestParts {
        scheme: &raw.scheme,
        authority: &raw.authority,
        path: "/",
        query: None,
        headers: &empty,
        body: &[],
    })
    .map_err(ProxyError::Placeholder)?;
    match found.found().first() {
        Some(first) => Err(ProxyError::SiteNotAllowed {
            alias: first.alias.clone(),
            place: describe_part(&first.part),
        }),
        None => Ok(()),
    }
}

/// The tool names of an MCP `tools/call` body (empty when the request is not one), read strictly
/// from the body as received; a body whose calls cannot be named is refused.
fn mcp_tools(
    method: &Method,
    headers: &http::HeaderMap,
    body: &Bytes,
) -> Result<Vec<String>, ProxyError> {
    match mcp_call::tool_calls(method, headers, body) {
        Ok(calls) => Ok(calls
            .names()
            .iter()
            .map(|name| name.as_str().to_owned())
            .collect()),
        Err(error) if error.code() == "body_too_large" => Err(ProxyError::BodyTooLarge {
            limit: mcp_call::MAX_MCP_MESSAGE_BYTES as u64,
        }),
        Err(error) => Err(Invalid::Mcp(error.to_string()).into()),
    }
}

/// Checks every alias the request uses against its declaration and the capability.
fn check_aliases(
    declarations: &Declarations,
    grant: &CapabilityGrant,
    target: &Target,
    uses: &[AliasUse],
) -> Result<(), ProxyError> {
    for alias_use in uses {
        let Some(alias) = declarations.alias(&alias_use.alias) else {
            return Err(ProxyError::UnknownAlias {
                alias: alias_use.alias.clone(),
            });
        };
        if !alias
            .hosts
            .iter()
            .any(|pattern| pattern.matches(&target.host))
        {
            return Err(ProxyError::AliasNotBound {
                alias: alias.name.clone(),
            });
        }
        if let Some(site) = alias_use.sites.iter().find(|s| !alias.sites.contains(*s)) {
            return Err(ProxyError::SiteNotAllowed {
                alias: alias.name.clone(),
                place: format!(
                    "the {site} site (the alias allows {})",
                    sites_text(alias.sites)
                ),
            });
        }
        if !grant.allows_alias(&alias.name) {
            return Err(ProxyError::CapabilityScope {
                alias: alias.name.clone(),
            });
        }
    }
    Ok(())
}

fn sites_text(sites: mint_policy::site::SiteSet) -> String {
    sites
        .iter()
        .map(Site::as_str)
        .collect::<Vec<_>>()
        .join(", ")
}

/// What the policy and the limits admitted.
struct Admitted {
    rules: Vec<String>,
    allow_private: bool,
    /// What each call consumed, and when: refunded if the request is never sent.
    charges: Vec<Vec<Charge>>,
    admitted_at: Duration,
}

/// Evaluates the request once per MCP tool it calls, and once without a tool when it calls none
/// or also holds other messages; every evaluation must allow, then all their limits are checked
/// and consumed together.
#[expect(
    clippy::too_many_arguments,
    reason = "one call site; the facts of one request"
)]
fn decide(
    state: &AppState,
    declarations: &Declarations,
    grant: &CapabilityGrant,
    method: &Method,
    target: &Target,
    uses: &[AliasUse],
    tools: &[String],
    other_messages: bool,
    denied_tool: &mut Option<ToolName>,
) -> Result<Admitted, ProxyError> {
    let policy = declarations.policy();
    let mut request = evaluate::Request {
        agent: grant.agent.as_str(),
        method: method.as_str(),
        target,
        aliases: uses,
        tool: None,
    };
    let mut rules: Vec<String> = Vec::new();
    let mut charges: Vec<Vec<Charge>> = Vec::new();
    let mut allow_private = true;
    let mut calls: Vec<Option<&str>> = tools.iter().map(|t| Some(t.as_str())).collect();
    if other_messages {
        calls.push(None);
    }
    for tool in calls {
        request.tool = tool;
        match policy.evaluate(&request) {
            Evaluation::Deny(denial) => {
                // The audit record names the tool that was refused, not the batch's first.
                if let Some(tool) = tool {
                    *denied_tool = ToolName::new(tool).ok();
                }
                return Err(ProxyError::PolicyDenied {
                    rules: denial.rules,
                    reason: denial.reason,
                });
            }
            Evaluation::Allow(grant) => {
                for rule in grant.rules {
                    if !rules.contains(&rule) {
                        rules.push(rule);
                    }
                }
                charges.push(grant.charges);
                allow_private &= grant.allow_private;
            }
        }
    }
    // The audit record names one tool: a batch that would run several different tools is
    // refused (MCP clients send one call per request; batching left the protocol in 2025-06-18).
    // A batch with a denied tool was refused above, naming that tool.
    if let Some(first) = tools.first()
        && tools.iter().any(|tool| tool != first)
    {
        return Err(Invalid::Mcp(
            "a batch may call one tool only; send each tool call in its own request".to_owned(),
        )
        .into());
    }
    let now = state.inner.started.elapsed();
    state
        .limiter()
        .admit_each(&charges.iter().map(Vec::as_slice).collect::<Vec<_>>(), now)
        .map_err(|limited| ProxyError::Limited {
            rules: limited.rules,
            retry_after: limited.retry_after,
        })?;
    Ok(Admitted {
        rules,
        allow_private,
        charges,
        admitted_at: now,
    })
}

/// Reads the agent's body within the size limit and the request timeout.
async fn read_body(
    body: Body,
    declared: Option<u64>,
    limits: &ProxyLimits,
) -> Result<Bytes, ProxyError> {
    let limit = limits.max_request_body;
    if declared.is_some_and(|length| length > limit) {
        return Err(ProxyError::BodyTooLarge { limit });
    }
    let limited = Limited::new(body, usize::try_from(limit).unwrap_or(usize::MAX));
    match tokio::time::timeout(limits.request_timeout, limited.collect()).await {
        Err(_) => Err(Invalid::Body.into()),
        Ok(Err(error)) if error.downcast_ref::<LengthLimitError>().is_some() => {
            Err(ProxyError::BodyTooLarge { limit })
        }
        Ok(Err(_)) => Err(Invalid::Body.into()),
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
    }
}

fn inject_error(error: InjectError) -> ProxyError {
    match error {
        InjectError::Placeholder(error) => ProxyError::Placeholder(error),
        InjectError::Forbidden { alias, part, place } => ProxyError::SiteNotAllowed {
            alias,
            place: format!("{place} ({})", describe_part(&part)),
        },
        InjectError::SiteNotAllowed { alias, site } => ProxyError::SiteNotAllowed {
            alias,
            place: format!("the {site} site"),
        },
        InjectError::Uri => Invalid::Route.into(),
        other => ProxyError::Internal(other.to_string()),
    }
}

/// Maps a client error to failed (nothing sent) or unknown (sent, then broken).
fn upstream_error(error: &hyper_util::client::legacy::Error) -> ProxyError {
    if let Some(connect) = connect_error(error) {
        return match connect {
            ConnectError::Refused(refused) => ProxyError::AddressRefused(*refused),
            other => ProxyError::UpstreamFailed(other.to_string()),
        };
    }
    if error.is_connect() {
        return ProxyError::UpstreamFailed("cannot connect to the upstream".to_owned());
    }
    ProxyError::UpstreamUnknown("the upstream connection broke before the answer's head".to_owned())
}
