//! The credentialed HTTP proxy: the routes, and the pipeline every proxied request goes through.
//!
//! Pipeline, in DESIGN.md's order; a refusal at any step is answered with a JSON error and
//! audited (a `decision` record if none was written yet, then an `outcome` record):
//!
//! 1. authenticate (`Mint-Capability`, or `Proxy-Authorization: Bearer` in forward-proxy mode);
//! 2. refuse a target that carries the presented capability token (before its facts are taken
//!    for the record); parse and canonicalize the target once (`mint_policy::normalize`), check
//!    the method, framing and headers, strip what is never forwarded, refuse forwarded headers
//!    that carry the token; for a request with a body, check the placeholders of the target and
//!    headers and refuse, unread, a request the policy denies whatever its body holds; read the
//!    body within its limit (refusing it as soon as the token shows in it), decode its content
//!    coding (a body Mint cannot examine whole is refused; a coded body with a placeholder at a
//!    named body place is refused, 415), check `_method` parameters;
//! 3. name the tools of an MCP `tools/call` body (`Mcp-Name` must agree); find placeholders
//!    and where they sit; unknown alias 400; a placeholder in a forbidden place 403; then alias
//!    by alias: not bound to the host 403, a site the alias does not allow 403, capability
//!    narrowing 403;
//! 4. policy, once per tool call (deny overrides) 403; a batch calling several different tools
//!    400; calls an `approve` rule holds wait for the operator (`approve`: a `pending` record,
//!    then 403 on a denial or timeout, 429 when too many wait, 503 at shutdown); then call limits
//!    429, checked and consumed atomically in the broker's store (`crate::limits`: memory, or
//!    Redis shared by several brokers, 503 `limits_unavailable` when it cannot answer in time);
//! 5. write the `decision` record (fail closed: 503 when it cannot be written);
//! 6. substitute (`inject`), send through [`UpstreamClient`] (DNS and address checks, TLS), and
//!    stream the answer back scrubbed (`answer`); the `outcome` record is written when it ends.
//!
//! The upstream request is built from the canonical target only, never from the raw input: match
//! what is forwarded and forward what was matched.
//!
//! The checks of steps 2 to 4 that need no connection, capability or limiter live in `headers`
//! and `pipeline`, which `mint policy explain` calls too: it decides a request with this code,
//! so a change there changes both.

use std::borrow::Cow;
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
use http::{Method, StatusCode, Version};
use http_body_util::{BodyExt, Full};
use mint_policy::audit::{
    AgentName, AliasName, ApprovalId, Approver, AuditDecision, CapabilityId, Outcome, ReasonCode,
    RequestId, RuleId, SkippedQuote, ToolName,
};
use mint_policy::duration::format_duration;
use mint_policy::evaluate::AliasUse;
use mint_policy::limits::Charge;
use mint_policy::normalize::Target;
use mint_policy::site::Site;
use zeroize::Zeroizing;

use crate::approval::webhook::Webhook;
use crate::approval::{ApprovalBook, ApprovalBounds};
use crate::audit::facts::{DecisionFacts, RequestFacts, decision_record};
use crate::audit::{AuditError, AuditLog, now};
use crate::capability::{CapabilityGrant, CapabilityStatus, CapabilityStore};
use crate::config::declarations::{Declarations, DeclarationsError, SecretsError};
use crate::limits::{CallLimits, Receipt, Refusal};
use crate::net::ca::LeafCache;
use crate::net::upstream::{ConnectError, UpstreamClient, connect_error};
use crate::secrets::inject::{self, InjectError};

mod answer;
mod approve;
pub(crate) mod connect;
mod error;
pub(crate) mod headers;
pub mod mcp_call;
pub(crate) mod pipeline;
pub(crate) mod websocket;

pub use error::{Fault, Invalid, OUTCOME_HEADER, ProxyError, REQUEST_ID_HEADER, TokenPlace};
pub use headers::FramingWatch;
pub use pipeline::JSONRPC_REFUSED;

use answer::OutcomeWriter;
use error::describe_part;
pub(crate) use error::error_body;
use pipeline::{Allowed, JsonRpcIds, OutwardToken, RawTarget};

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
    /// The most agent connections served at once.
    pub max_connections: usize,
    /// The largest WebSocket message (and so frame), either way, before any decoding.
    pub max_websocket_message: u64,
    /// The longest a WebSocket stays open, whatever goes through it.
    pub max_websocket_lifetime: Duration,
}

/// A combination of limits that cannot work; both values are shown.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "the request timeout ({}) must be longer than the connect timeout ({})",
    format_duration(*request_timeout),
    format_duration(*connect_timeout)
)]
pub struct LimitsError {
    /// The request timeout asked for.
    pub request_timeout: Duration,
    /// The connect timeout asked for.
    pub connect_timeout: Duration,
}

// === impl ProxyLimits ===

impl ProxyLimits {
    /// Refuses a request timeout that is not longer than the connect timeout: a connect that
    /// times out must be reported as `failed` (nothing was sent), never as an `unknown` 504.
    pub fn check(&self) -> Result<(), LimitsError> {
        if self.request_timeout <= self.connect_timeout {
            return Err(LimitsError {
                request_timeout: self.request_timeout,
                connect_timeout: self.connect_timeout,
            });
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
            max_connections: 1024,
            max_websocket_message: 16 << 20,
            max_websocket_lifetime: Duration::from_secs(24 * 3600),
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
    /// Where the call-limit counters live.
    call_limits: CallLimits,
    upstream: UpstreamClient,
    ids: RequestIds,
    /// The leaves of intercepted `CONNECT` tunnels; `None` when this broker has no CA.
    interception: Option<Arc<LeafCache>>,
    /// The requests `approve` rules hold, and the operators' grants.
    approvals: Arc<ApprovalBook>,
    /// Where each newly held request is notified, if anywhere.
    approval_webhook: Option<Webhook>,
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

/// Where the id of an HTTP/1.1 connection's request in progress is left for the connection
/// (`serve/connection.rs`), which writes it into the interim `100 Continue` that hyper sends on
/// its own when the body is first read. One per connection, in each request's extensions; hyper
/// serves a connection's requests one at a time, so it holds the id of the one being served.
#[derive(Clone, Debug, Default)]
pub(crate) struct RequestIdSlot(Arc<Mutex<Option<RequestId>>>);

// === impl RequestIdSlot ===

impl RequestIdSlot {
    /// Leaves `id` as the request in progress, when `request` carries a slot.
    fn fill<B>(request: &http::Request<B>, id: &RequestId) {
        if let Some(slot) = request.extensions().get::<RequestIdSlot>() {
            *slot.0.lock().unwrap_or_else(PoisonError::into_inner) = Some(id.clone());
        }
    }

    /// The id of the request in progress, if one was left.
    pub(crate) fn current(&self) -> Option<RequestId> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// How the request reached the proxy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    /// `/v1/proxy/{scheme}/{authority}/{path}`.
    Route,
    /// An absolute-form request, as `HTTP_PROXY` clients send them.
    Forward,
    /// A request inside an intercepted `CONNECT` tunnel (its [`connect::TunnelExt`] says which).
    Intercept,
}

// === impl Mode ===

impl Mode {
    /// Where this mode looks for the capability token.
    fn token_place(self) -> TokenPlace {
        match self {
            Mode::Route => TokenPlace::Route,
            Mode::Forward => TokenPlace::ProxyAuthorization,
            Mode::Intercept => TokenPlace::Tunnel,
        }
    }
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
                call_limits: CallLimits::memory(),
                upstream,
                ids: RequestIds {
                    prefix: hex::encode(random),
                    next: AtomicU64::new(1),
                },
                interception: None,
                approvals: Arc::new(ApprovalBook::new(ApprovalBounds::default())),
                approval_webhook: None,
            }),
        }
    }

    /// This state, keeping its call-limit counters in `call_limits` (Redis, shared with other
    /// brokers) instead of its memory. Call before the state is shared.
    pub fn with_call_limits(mut self, call_limits: CallLimits) -> AppState {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.call_limits = call_limits;
        }
        self
    }

    /// Where the call-limit counters live.
    pub fn call_limits(&self) -> &CallLimits {
        &self.inner.call_limits
    }

    /// This state, holding requests for approval within `bounds`. Call before the state is
    /// shared.
    pub fn with_approval_bounds(mut self, bounds: ApprovalBounds) -> AppState {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.approvals = Arc::new(ApprovalBook::new(bounds));
        }
        self
    }

    /// The requests held for approval.
    pub fn approvals(&self) -> &Arc<ApprovalBook> {
        &self.inner.approvals
    }

    /// This state, notifying `webhook` of each newly held request (once served). Call before
    /// the state is shared.
    pub fn with_approval_webhook(mut self, webhook: Option<Webhook>) -> AppState {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.approval_webhook = webhook;
        }
        self
    }

    /// The notifier of held requests, on a task, if a webhook is configured.
    pub(crate) fn spawn_approval_webhook(&self) -> Option<tokio::task::JoinHandle<()>> {
        let webhook = self.inner.approval_webhook.clone()?;
        tracing::info!(webhook.host = %webhook.host(), "Requests waiting for approval are notified to the approval webhook");
        Some(tokio::spawn(webhook.notify(
            Arc::clone(&self.inner.approvals),
            self.inner.upstream.clone(),
        )))
    }

    /// This state, intercepting `CONNECT` tunnels with leaves from `leaves`. Call before the
    /// state is shared.
    pub fn with_interception(mut self, leaves: Arc<LeafCache>) -> AppState {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.interception = Some(leaves);
        }
        self
    }

    /// The leaves of intercepted tunnels, when this broker has a CA.
    pub fn interception(&self) -> Option<&Arc<LeafCache>> {
        self.inner.interception.as_ref()
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

    /// Replaces the declarations (hot reload) with `loaded`, still scrubbing every secret the
    /// current ones scrub ([`Declarations::retaining`], under the lock, so no reload can drop
    /// one): a rotated secret an upstream hands back stays hidden, and answers still streaming,
    /// which switch to the newest declarations' scrubber, keep covering the old secrets. A
    /// request in flight keeps the policy and secrets it was decided with.
    pub fn replace_declarations(&self, loaded: Declarations) -> Result<(), DeclarationsError> {
        let mut current = self
            .inner
            .declarations
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        *current = Arc::new(loaded.retaining(&current)?);
        Ok(())
    }

    /// Replaces the declarations with `refreshed` (alias secrets read again, built from `base`
    /// by [`Declarations::with_credentials`], so it scrubs every secret `base` scrubs) if they
    /// are still `base`; `Ok(false)`, replacing nothing, when a reload came in between.
    pub fn replace_declarations_from(
        &self,
        base: &Arc<Declarations>,
        refreshed: Declarations,
    ) -> Result<bool, DeclarationsError> {
        let mut current = self
            .inner
            .declarations
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        if !Arc::ptr_eq(&current, base) {
            return Ok(false);
        }
        *current = Arc::new(refreshed);
        Ok(true)
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
        self.inner.call_limits.prune();
    }

    /// A fresh request id.
    pub(crate) fn next_request_id(&self) -> RequestId {
        use std::fmt::Write as _;
        let n = self.inner.ids.next.fetch_add(1, Ordering::Relaxed);
        let prefix = &self.inner.ids.prefix;
        let mut text = String::with_capacity(prefix.len() + 21);
        text.push_str(prefix);
        text.push('-');
        // Writing into a `String` cannot fail.
        let _ = write!(text, "{n}");
        // INVARIANT: 12 hex digits, `-` and a decimal number match `[A-Za-z0-9_-]{1,64}`.
        RequestId::new(text).unwrap_or_else(|_| fallback_request_id())
    }

    /// Where the capability `id` stands now (`None`: no longer in the file), for an open
    /// WebSocket.
    pub(crate) fn capability_status(&self, id: &str) -> Option<CapabilityStatus> {
        self.inner.capabilities.status(id, SystemTime::now())
    }

    fn authenticate(&self, token: Option<&str>, mode: Mode) -> Result<CapabilityGrant, ProxyError> {
        let invalid = ProxyError::CapabilityInvalid {
            place: mode.token_place(),
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
    RequestIdSlot::fill(&request, &id);
    request.extensions_mut().insert(RequestIdExt(id.clone()));
    let mut response = if request.method() == Method::CONNECT {
        connect::connect(&state, id.clone(), request).await
    } else if is_forward_proxy_request(&request) {
        proxy(&state, id.clone(), Mode::Forward, request).await
    } else {
        next.run(request).await
    };
    set_request_id(&mut response, &id);
    response
}

/// HTTP/1.x absolute-form is a forward-proxy request; HTTP/2 always carries a scheme and
/// authority (Mint's own), so it is routed by path like origin-form.
fn is_forward_proxy_request<B>(request: &http::Request<B>) -> bool {
    request.uri().scheme().is_some() && request.version() <= Version::HTTP_11
}

fn set_request_id(response: &mut Response, id: &RequestId) {
    if !response.headers().contains_key(REQUEST_ID_HEADER)
        && let Ok(value) = HeaderValue::from_str(id.as_str())
    {
        response.headers_mut().insert(REQUEST_ID_HEADER, value);
    }
}

/// The mode of a request that [`router`] would hand to the proxy, decided without it: a
/// forward-proxy request, or a path under `/v1/proxy/` with something after it (what the
/// `/v1/proxy/{*target}` route matches). `None` for CONNECT and every other request, which go
/// through the router. The shortcut saves the proxy's requests the router's matching and
/// middleware; it never changes where a request goes (`explain::tests::the_proxy_shortcut_agrees_with_the_router`).
pub(crate) fn proxy_mode<B>(request: &http::Request<B>) -> Option<Mode> {
    if request.method() == Method::CONNECT {
        return None;
    }
    if is_forward_proxy_request(request) {
        return Some(Mode::Forward);
    }
    let target = request.uri().path().strip_prefix("/v1/proxy/")?;
    (!target.is_empty()).then_some(Mode::Route)
}

/// Proxies a request from inside the intercepted tunnel `tunnel`: the pipeline of `/v1/proxy/`
/// ([`proxy_shortcut`], then `forward`), with the tunnel's target as the upstream authority.
pub(crate) async fn intercepted(
    state: &AppState,
    tunnel: &Arc<connect::Tunnel>,
    mut request: Request,
) -> Response {
    request
        .extensions_mut()
        .insert(connect::TunnelExt(Arc::clone(tunnel)));
    proxy_shortcut(state, Mode::Intercept, request).await
}

/// Proxies a request [`proxy_mode`] classified, as the router would: a fresh id, the pipeline,
/// `Mint-Request-Id` on the answer.
pub(crate) async fn proxy_shortcut(state: &AppState, mode: Mode, request: Request) -> Response {
    let id = state.next_request_id();
    RequestIdSlot::fill(&request, &id);
    let head = request.method() == Method::HEAD;
    let mut response = proxy(state, id.clone(), mode, request).await;
    set_request_id(&mut response, &id);
    // As the router does: `Content-Length` for a body of known length, and for HEAD no body
    // (hyper's HTTP/1 server drops it anyway; its HTTP/2 server would send it).
    use hyper::body::Body as _;
    if !response.headers().contains_key(header::CONTENT_LENGTH)
        && response.status() != StatusCode::SWITCHING_PROTOCOLS
        && let Some(length) = response.body().size_hint().exact()
    {
        response
            .headers_mut()
            .insert(header::CONTENT_LENGTH, HeaderValue::from(length));
    }
    if head {
        *response.body_mut() = Body::empty();
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
                "body": alias.body.iter().map(|p| p.as_str()).collect::<Vec<_>>(),
                "form": alias.form.iter().map(|f| f.as_str()).collect::<Vec<_>>(),
                // The value-shaped placeholder when the alias declares a shape (public, like
                // the template, which keeps working).
                "placeholder": declarations.shaped().value(&alias.name).map_or_else(
                    || format!("{{{{mint:{}}}}}", alias.name),
                    str::to_owned,
                ),
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
    let mut exchange = Exchange::new(state, id, Some(request.method()));
    match forward(state, &mut exchange, mode, request).await {
        Ok(response) => response,
        Err(ProxyError::Invalid(Invalid::StreamReset)) => {
            // The HTTP/2 library reset the agent's stream (or ended its connection) while Mint
            // read the body, before any decision: the agent gets RST_STREAM (or GOAWAY), never
            // an answer, and the connection audits that as it goes out (`serve/h2_watch.rs`). Recorded here too, the request
            // would have a refusal the agent never got besides.
            tracing::info!(request.id = %exchange.facts.id, "Agent's HTTP/2 stream reset while its body was read");
            Response::new(Body::empty())
        }
        Err(error) => exchange.refuse(error),
    }
}

/// Whether an HTTP/2 `RST_STREAM` error code is one the HTTP/2 library (h2) sends when an
/// agent's request breaks the protocol (`PROTOCOL_ERROR`: a `content-length` that is not a
/// number or disagrees with the DATA sent, a connection-specific header such as
/// `transfer-encoding`, a malformed head; `FLOW_CONTROL_ERROR`: more DATA than the window). Such a
/// reset is the agent's whole answer, and the connection audits it (`serve/connection.rs`).
/// Resets hyper sends (`INTERNAL_ERROR` for an answer cut off, `CANCEL`, `NO_ERROR`) and h2's
/// `REFUSED_STREAM` (a stream past the concurrency limit, never processed), `STREAM_CLOSED` and
/// `ENHANCE_YOUR_CALM` are not.
pub(crate) fn is_protocol_reset(code: u32) -> bool {
    let reason = h2::Reason::from(code);
    reason == h2::Reason::PROTOCOL_ERROR || reason == h2::Reason::FLOW_CONTROL_ERROR
}

/// Whether a request body error is the HTTP/2 library refusing the agent's stream for a protocol
/// error ([`is_protocol_reset`]), found anywhere in the error's source chain: a reset of the
/// stream, or a `GOAWAY` ending the connection (h2 reports both the same way to the body's
/// reader); the connection audits either (`serve/h2_watch.rs`).
pub(crate) fn is_protocol_reset_error(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(error);
    while let Some(error) = cause {
        if let Some(h2) = error.downcast_ref::<h2::Error>() {
            return h2.is_library() && h2.reason().is_some_and(|r| is_protocol_reset(r.into()));
        }
        cause = error.source();
    }
    false
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
    /// Set once the `pending` decision record of a request held for approval is written, with
    /// the approve rules that hold it; cleared by its second decision record. While it is set,
    /// an agent that goes away leaves a `deny` (`approval_withdrawn`) record behind.
    held: Option<Vec<String>>,
    /// The approvals the request waited for and the grants that approved it, for its decision
    /// records.
    approval: Vec<ApprovalId>,
    /// Who decided them.
    approver: Vec<Approver>,
}

// === impl Exchange ===

impl Exchange {
    fn new(state: &AppState, id: RequestId, method: Option<&Method>) -> Exchange {
        Exchange {
            audit: state.audit().clone(),
            outcome_written: false,
            facts: RequestFacts {
                id,
                agent: None,
                capability: None,
                method: method.and_then(|m| mint_policy::audit::Method::new(m.as_str()).ok()),
                target: None,
                aliases: Vec::new(),
                skipped: Vec::new(),
                skipped_count: None,
                mcp_tool: None,
            },
            received: Instant::now(),
            decided: false,
            bytes_up: None,
            jsonrpc: None,
            held: None,
            approval: Vec::new(),
            approver: Vec::new(),
        }
    }

    /// Writes the decision record of a request that is refused here, then its outcome record,
    /// and answers with the error.
    fn refuse(&mut self, error: ProxyError) -> Response {
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
            error::Fault::Unavailable => {
                // The store's client said why, once, when it started failing.
                tracing::info!(request.id = %id, code = error.code(), "Request refused: a shared store is unavailable");
            }
        }
        let decision = match error {
            ProxyError::Limited { .. }
            | ProxyError::LimitsUnavailable { .. }
            | ProxyError::ApprovalQueueFull { .. } => AuditDecision::Limited,
            _ => AuditDecision::Deny,
        };
        let rules = match &error {
            ProxyError::PolicyDenied { rules, .. }
            | ProxyError::ApprovalDenied { rules }
            | ProxyError::ApprovalTimeout { rules, .. }
            | ProxyError::ApprovalQueueFull { rules, .. }
            | ProxyError::ShuttingDown { rules }
            | ProxyError::Limited { rules, .. }
            | ProxyError::LimitsUnavailable { rules } => Some(rule_ids(rules)),
            _ => None,
        };
        self.record_refusal(
            decision,
            rules,
            error.reason(),
            error.outcome(),
            Some(error.status()),
        );
        let mut response = error.to_response(id.as_str());
        if let Some(jsonrpc) = &self.jsonrpc {
            *response.body_mut() = Body::from(jsonrpc.error_body(&error, id.as_str()));
            response.headers_mut().remove(header::CONTENT_LENGTH);
        }
        response
    }

    /// Writes the refusal's `decision` record (unless one is written already) and its `outcome`
    /// record, with the status the agent got (none for a reset HTTP/2 stream). A failure to
    /// write is logged: nothing is forwarded either way.
    fn record_refusal(
        &mut self,
        decision: AuditDecision,
        rules: Option<Vec<RuleId>>,
        reason: &'static str,
        outcome: Outcome,
        status: Option<StatusCode>,
    ) {
        if !self.decided {
            let facts = DecisionFacts {
                decision,
                rules,
                reason: ReasonCode::new(reason).ok(),
                approval: self.approval.clone(),
                approver: self.approver.clone(),
            };
            let record = decision_record(now(), self.facts.take(), facts);
            if let Err(audit_error) = self.audit.append(&record) {
                tracing::error!(request.id = %record.id, error = %audit_error, "Decision record not written");
            }
            self.facts = RequestFacts::from_record(record);
            self.decided = true;
            self.held = None;
        }
        self.outcome_written = true;
        let writer = OutcomeWriter {
            audit: self.audit.clone(),
            facts: self.facts.take(),
            received: self.received,
            bytes_up: self.bytes_up.unwrap_or(0),
        };
        writer.write(outcome, status, Some(0), Some(reason));
    }

    /// Writes the `pending` decision record of a request about to wait for approval (its
    /// approvals noted already); it does not wait if the record cannot be written. From here
    /// until its second decision record, an agent that goes away leaves an
    /// `approval_withdrawn` record.
    async fn record_pending(
        &mut self,
        state: &AppState,
        rules: &[String],
    ) -> Result<(), ProxyError> {
        let facts = DecisionFacts {
            decision: AuditDecision::Pending,
            rules: Some(rule_ids(rules)),
            reason: ReasonCode::new("approval_required").ok(),
            approval: self.approval.clone(),
            approver: Vec::new(),
        };
        let record = decision_record(now(), self.facts.take(), facts);
        let written = state.audit().write_now(&record);
        self.facts = RequestFacts::from_record(record);
        let refuse = |error: AuditError, id: &RequestId| {
            tracing::error!(request.id = %id, error = %error, "Pending record not written; refusing");
            ProxyError::AuditUnavailable
        };
        let written = written.map_err(|error| refuse(error, &self.facts.id))?;
        self.held = Some(rules.to_vec());
        written
            .durable()
            .await
            .map_err(|error| refuse(error, &self.facts.id))?;
        Ok(())
    }

    /// Writes the `allow` decision record; the request goes nowhere if it cannot be written.
    async fn record_allow(&mut self, state: &AppState, rules: &[String]) -> Result<(), ProxyError> {
        let facts = DecisionFacts {
            decision: AuditDecision::Allow,
            rules: Some(rule_ids(rules)),
            reason: None,
            approval: self.approval.clone(),
            approver: self.approver.clone(),
        };
        let record = decision_record(now(), self.facts.take(), facts);
        let written = state.audit().write_now(&record);
        self.facts = RequestFacts::from_record(record);
        // Written or not, the `pending` record now has its second decision (or the refusal
        // that follows writes one).
        if written.is_ok() {
            self.held = None;
        }
        let refuse = |error: AuditError, id: &RequestId| {
            tracing::error!(request.id = %id, error = %error, "Decision record not written; refusing");
            ProxyError::AuditUnavailable
        };
        let written = written.map_err(|error| refuse(error, &self.facts.id))?;
        // The decision is in the file, and the facts are back: from here the request gets an
        // outcome however it ends, even if the agent goes away while `always` mode awaits the
        // fsync (`Exchange`'s drop writes it then).
        self.decided = true;
        written
            .durable()
            .await
            .map_err(|error| refuse(error, &self.facts.id))?;
        Ok(())
    }
}

/// Audits a request refused before it could be read at all (a head that never completed, one
/// hyper could not parse, an HTTP/2 stream the HTTP/2 library reset): a `deny` decision and an
/// `invalid` outcome with the `status` the agent got (`None`: a stream reset, no status),
/// holding no fact of the request. Returns its id, for the answer.
pub(crate) fn audit_unread_refusal(
    state: &AppState,
    reason: &'static str,
    status: Option<StatusCode>,
) -> RequestId {
    let mut exchange = Exchange::new(state, state.next_request_id(), None);
    exchange.record_refusal(AuditDecision::Deny, None, reason, Outcome::Invalid, status);
    exchange.facts.id.clone()
}

impl Drop for Exchange {
    /// The agent went away while the request was in Mint's hands (before the answer's head): an
    /// allowed request gets its outcome all the same. It may have been sent: `unknown`.
    fn drop(&mut self) {
        if let Some(rules) = self.held.take() {
            // The agent went away while its request waited for approval: the waiting ended
            // (the ticket's drop took it out of the book) and nothing was sent.
            tracing::info!(request.id = %self.facts.id, "Agent went away while its request waited for approval");
            self.record_refusal(
                AuditDecision::Deny,
                Some(rule_ids(&rules)),
                "approval_withdrawn",
                Outcome::Denied,
                None,
            );
            return;
        }
        if !self.decided || self.outcome_written {
            return;
        }
        let outcome = OutcomeWriter {
            audit: self.audit.clone(),
            facts: self.facts.take(),
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
        // The tunnel's token, never a header of the request inside.
        Mode::Intercept => None,
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
    let (mut parts, body) = request.into_parts();
    let method = parts.method;

    // 1. Authenticate (inside a tunnel: the `CONNECT`'s capability, checked again now).
    let tunnel = match mode {
        Mode::Intercept => Some(
            parts
                .extensions
                .get::<connect::TunnelExt>()
                .map(|ext| Arc::clone(&ext.0))
                .ok_or_else(|| {
                    ProxyError::Internal("a tunnel request without its tunnel".to_owned())
                })?,
        ),
        Mode::Route | Mode::Forward => None,
    };
    // Zeroized: a request held for approval keeps it (for the check after approval) for as long
    // as the operator takes.
    let token: Option<Zeroizing<String>> = match &tunnel {
        Some(tunnel) => Some(Zeroizing::new(tunnel.token().to_owned())),
        None => capability_token(&parts.headers, mode).map(Zeroizing::new),
    };
    let grant = state.authenticate(token.as_deref().map(String::as_str), mode)?;
    // The presented token must not travel on to the upstream (F6): checked in the target, the
    // forwarded headers and, while it is read, the body.
    let outward = token.as_deref().map(|token| OutwardToken::new(token));
    exchange.facts.agent = AgentName::new(grant.agent.as_str()).ok();
    exchange.facts.capability = CapabilityId::new(grant.id.as_str()).ok();

    // 2. The target, the method, framing and headers, the body.
    let raw = match (mode, &tunnel) {
        (Mode::Intercept, Some(tunnel)) => {
            RawTarget::from_tunnel(&parts.uri, &parts.headers, &tunnel.target)?
        }
        (Mode::Route, _) => RawTarget::from_route(&parts.uri)?,
        (Mode::Forward | Mode::Intercept, _) => {
            RawTarget::from_absolute(&parts.uri, &parts.headers)?
        }
    };
    if let Some(outward) = &outward
        && raw.carries(outward)
    {
        // Refused before the target's facts are taken: the record never holds the token.
        return Err(ProxyError::CapabilityOutward {
            part: "the target".to_owned(),
        });
    }
    let (target, target_facts) = raw.canonicalize(state.declarations().shaped())?;
    exchange.facts.target = Some(target_facts);
    headers::check_method(&method)?;
    if let Some(framing) = parts.extensions.get::<FramingWatch>() {
        framing.take()?;
    }
    headers::check_request(&method, &parts.headers)?;
    // A WebSocket opening handshake (`check_request` refused every other upgrade): the agent's
    // connection is taken over once the upstream has answered `101` (`websocket.rs`).
    let websocket = if parts.headers.contains_key(header::UPGRADE) {
        let on_upgrade = parts
            .extensions
            .remove::<hyper::upgrade::OnUpgrade>()
            .filter(|_| parts.version == Version::HTTP_11)
            .ok_or(Invalid::Header(
                "a WebSocket opening handshake must be an HTTP/1.1 `Upgrade` (HTTP/2 extended CONNECT is not supported)",
            ))?;
        Some(websocket::AgentSide {
            on_upgrade,
            slot: parts
                .extensions
                .get::<crate::serve::ConnectionSlot>()
                .cloned(),
            hold: parts.extensions.get::<websocket::RelayHold>().cloned(),
            outward: token.as_deref().map(|token| OutwardToken::new(token)),
            grant: grant.clone(),
            decided: None,
        })
    } else {
        None
    };
    let declared = headers::content_length(&parts.headers);
    let mut request_headers = parts.headers;
    headers::strip_request(&mut request_headers);
    if websocket.is_some() {
        headers::restore_websocket_upgrade(&mut request_headers);
    }
    if let Some(name) = outward
        .as_ref()
        .and_then(|outward| outward.header_carrying(&request_headers))
    {
        return Err(ProxyError::CapabilityOutward {
            part: format!("header `{name}`"),
        });
    }
    let mut declarations = state.declarations();

    // 3a. Before the body is read: the placeholders of the target and the headers, and the
    // policy for whatever the body could hold. A request denied whatever its body says is
    // refused unread, so it costs no body-sized memory.
    use hyper::body::Body as _;
    if declared != Some(0) && !body.is_end_stream() {
        let found = pipeline::find_placeholders(
            &raw,
            &request_headers,
            &[],
            declarations.body_places(),
            declarations.shaped(),
        )?;
        exchange.facts.aliases = audit_aliases(&found);
        pipeline::check_placeholders(&found, declarations.aliases())?;
        let uses = found.alias_uses();
        check_alias_uses(&declarations, &target, &grant, &uses)?;
        pipeline::refuse_whatever_the_body(
            declarations.policy(),
            grant.agent.as_str(),
            &method,
            &target,
            &uses,
        )?;
    }
    let body = read_body(body, declared, state.limits(), outward.as_ref()).await?;

    // 3b. The body as a receiver decodes it: method overrides, then the MCP tools.
    let (tools, other_messages) = {
        let decoded = pipeline::decoded_body(&request_headers, &body)?;
        // A gzip body is searched for the token once more, decoded: what the upstream (and,
        // for a held call, the operator and the webhook) would read.
        if let (Some(outward), Cow::Owned(inflated)) = (&outward, &decoded)
            && outward.found_in(inflated)
        {
            return Err(ProxyError::CapabilityOutward {
                part: "the body (decoded from gzip)".to_owned(),
            });
        }
        pipeline::check_encoded_body(
            &request_headers,
            &decoded,
            declarations.body_places(),
            declarations.shaped(),
        )?;
        headers::check_override_params(
            &method,
            target.query.as_deref(),
            &request_headers,
            &decoded,
        )?;
        let tools = pipeline::mcp_tools(&request_headers, &decoded)?;
        // A batch is allowed only if every element is: messages besides the tool calls are the
        // endpoint's own traffic, evaluated without a tool.
        let mut other_messages = tools.is_empty();
        if !tools.is_empty() {
            let ids = JsonRpcIds::of(&decoded);
            other_messages = ids.holds_other_messages(tools.len());
            exchange.jsonrpc = Some(ids);
        }
        (tools, other_messages)
    };
    drop(outward);
    exchange.facts.mcp_tool = tools
        .first()
        .and_then(|tool| ToolName::new(tool.as_str()).ok());

    // 3c and 4. Placeholders, aliases, bindings, sites, capability narrowing; the policy.
    let checked = Checked {
        raw: &raw,
        method: &method,
        target: &target,
        headers: &request_headers,
        body: &body,
        tools: &tools,
        other_messages,
    };
    let (uses, evaluated) = checked.decide(exchange, &declarations, &grant)?;
    // 4a. Calls an approve rule holds wait for the operator (limits are admitted after).
    let holds = evaluated.holds();
    let mut allowed = pipeline::allowed_or_closest(
        evaluated,
        declarations.policy(),
        grant.agent.as_str(),
        &method,
        &target,
        &uses,
    )?;
    let mut uses = uses;
    if !holds.is_empty() {
        let decoded = pipeline::decoded_body(&request_headers, &body)?;
        let shown = approve::Shown {
            agent: grant.agent.as_str(),
            method: method.as_str(),
            target: &target,
            uses: &uses,
            body: &decoded,
        };
        approve::await_approval(state, exchange, &holds, &shown).await?;
        // While it waited, the capability may have been revoked and the declarations reloaded
        // (a deny rule added, an alias rebound, a secret replaced): it is checked again against
        // what is in force now, as a request arriving now would be, and sent with the secrets
        // in force now.
        let again = state.authenticate(token.as_deref().map(String::as_str), mode)?;
        if again.id != grant.id {
            return Err(ProxyError::CapabilityInvalid {
                place: mode.token_place(),
            });
        }
        declarations = state.declarations();
        let (now_uses, now_evaluated) = checked.decide(exchange, &declarations, &again)?;
        allowed = pipeline::allowed_or_closest(
            now_evaluated,
            declarations.policy(),
            again.agent.as_str(),
            &method,
            &target,
            &now_uses,
        )?;
        uses = now_uses;
    }
    drop(token);
    let admitted = admit(state, &exchange.facts.id, allowed).await?;
    let charges = (admitted.charges.clone(), admitted.receipt.clone());
    let outgoing = Outgoing {
        method,
        target,
        uses,
        headers: request_headers,
        body,
        websocket,
    };
    let sent = send(state, exchange, &declarations, admitted, outgoing).await;
    if let Err(error) = &sent
        && error.outcome() != Outcome::Unknown
    {
        // Never sent: it does not count against any limit.
        let calls: Vec<&[Charge]> = charges.0.iter().map(Vec::as_slice).collect();
        state.call_limits().refund(&calls, charges.1);
    }
    sent
}

/// The parts of a request that steps 3c and 4 check, read once.
struct Checked<'a> {
    raw: &'a RawTarget,
    method: &'a Method,
    target: &'a Target,
    headers: &'a http::HeaderMap,
    body: &'a Bytes,
    tools: &'a [String],
    other_messages: bool,
}

impl Checked<'_> {
    /// Steps 3c and 4 against `declarations`: placeholders, aliases, bindings, sites and the
    /// capability's narrowing (refusing), then the policy's evaluation of each call.
    fn decide(
        &self,
        exchange: &mut Exchange,
        declarations: &Declarations,
        grant: &CapabilityGrant,
    ) -> Result<(Vec<AliasUse>, pipeline::Evaluated), ProxyError> {
        let found = pipeline::find_placeholders(
            self.raw,
            self.headers,
            self.body,
            declarations.body_places(),
            declarations.shaped(),
        )?;
        exchange.facts.aliases = audit_aliases(&found);
        (exchange.facts.skipped, exchange.facts.skipped_count) = audit_skipped(&found);
        pipeline::check_placeholders(&found, declarations.aliases())?;
        let uses = found.alias_uses();
        check_alias_uses(declarations, self.target, grant, &uses)?;
        let evaluated = pipeline::evaluate_calls(
            declarations.policy(),
            grant.agent.as_str(),
            self.method,
            self.target,
            &uses,
            self.tools,
            self.other_messages,
        );
        if let Some(tool) = evaluated.denied_tool() {
            // The audit record names the tool that was refused, not the batch's first.
            exchange.facts.mcp_tool = ToolName::new(tool).ok();
        }
        Ok((uses, evaluated))
    }
}

/// The aliases the placeholders name, as the audit record holds them.
fn audit_aliases(found: &crate::secrets::placeholder::Placeholders) -> Vec<AliasName> {
    found
        .aliases()
        .into_iter()
        .filter_map(|alias| AliasName::new(alias).ok())
        .collect()
}

/// Where the body quoted placeholders as text, as the audit record holds them.
fn audit_skipped(
    found: &crate::secrets::placeholder::Placeholders,
) -> (Vec<SkippedQuote>, Option<u64>) {
    let skipped = found.skipped();
    let listed = skipped
        .listed()
        .iter()
        .filter_map(|(alias, place)| SkippedQuote::new(format!("{alias}@{place}")).ok())
        .collect();
    (listed, (!skipped.is_empty()).then(|| skipped.count()))
}

/// Alias by alias: its declaration (bound to the host, in sites it allows), then the
/// capability's narrowing.
fn check_alias_uses(
    declarations: &Declarations,
    target: &Target,
    grant: &CapabilityGrant,
    uses: &[AliasUse],
) -> Result<(), ProxyError> {
    for alias_use in uses {
        pipeline::check_binding(declarations.aliases(), target, alias_use)?;
        if !grant.allows_alias(&alias_use.alias) {
            return Err(ProxyError::CapabilityScope {
                alias: alias_use.alias.clone(),
            });
        }
    }
    Ok(())
}

/// Whether the declarations in force still allow a WebSocket's opening handshake `decided`
/// (the capability `grant` presented): every alias still bound to the target and within the
/// capability's narrowing, and no call denied by the policy. A call an approve rule now holds is
/// not denied: the socket was admitted, by a rule or an operator, when it opened.
pub(crate) fn handshake_still_allowed(
    declarations: &Declarations,
    grant: &CapabilityGrant,
    decided: &websocket::Decided,
) -> bool {
    let websocket::Decided {
        method,
        target,
        uses,
    } = decided;
    // Each alias still declared, bound to the target, in the sites it allows, and within the
    // capability's narrowing.
    if check_alias_uses(declarations, target, grant, uses).is_err() {
        return false;
    }
    pipeline::evaluate_calls(
        declarations.policy(),
        grant.agent.as_str(),
        method,
        target,
        uses,
        &[],
        true,
    )
    .allowed()
    .is_ok()
}

/// What is about to be sent, before substitution.
struct Outgoing {
    method: Method,
    target: Target,
    uses: Vec<AliasUse>,
    headers: http::HeaderMap,
    body: Bytes,
    /// The agent's side of a WebSocket opening handshake.
    websocket: Option<websocket::AgentSide>,
}

/// The pipeline from the decision record to the answer's head.
async fn send(
    state: &AppState,
    exchange: &mut Exchange,
    declarations: &Arc<Declarations>,
    admitted: Admitted,
    outgoing: Outgoing,
) -> Result<Response, ProxyError> {
    let Outgoing {
        method,
        target,
        uses,
        headers: mut request_headers,
        body,
        websocket,
    } = outgoing;

    // 5. The decision record, before anything leaves.
    exchange.record_allow(state, &admitted.rules).await?;

    // 6. Substitute, send, answer.
    let secrets = declarations
        .secrets_for(&uses)
        .map_err(|error| match error {
            SecretsError::Missing(_) => {
                ProxyError::Internal("an alias secret is not loaded".to_owned())
            }
            SecretsError::Stale(alias) => ProxyError::SecretUnavailable { alias },
        })?;
    let body = inject::body(&request_headers, body, declarations.body_places(), &secrets)
        .map_err(inject_error)?;
    inject::headers(&mut request_headers, &secrets).map_err(inject_error)?;
    let uri = inject::uri(&target, &secrets).map_err(inject_error)?;
    drop(secrets);
    if websocket.is_none() {
        request_headers.insert(
            header::ACCEPT_ENCODING,
            HeaderValue::from_static("identity"),
        );
    }
    exchange.bytes_up = Some(body.len() as u64);
    let mut upstream_request = http::Request::new(Full::new(body));
    *upstream_request.method_mut() = method;
    *upstream_request.uri_mut() = uri;
    *upstream_request.version_mut() = Version::HTTP_11;
    *upstream_request.headers_mut() = request_headers;

    let limits = *state.limits();
    if let Some(mut agent) = websocket {
        // What the socket's standing is checked against while it stays open.
        agent.decided = Some(websocket::Decided {
            method: upstream_request.method().clone(),
            target,
            uses,
        });
        return open_websocket(
            state,
            exchange,
            declarations,
            admitted.allow_private,
            upstream_request,
            agent,
        )
        .await;
    }
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
    answer_upstream(state, exchange, declarations, response).await
}

/// The upstream's answer on its way to the agent, scrubbed and streamed (`answer`); the body
/// writes the outcome record when it ends.
async fn answer_upstream(
    state: &AppState,
    exchange: &mut Exchange,
    declarations: &Arc<Declarations>,
    response: http::Response<hyper::body::Incoming>,
) -> Result<Response, ProxyError> {
    let limits = *state.limits();
    tracing::debug!(request.id = %exchange.facts.id, status = response.status().as_u16(), "Upstream answered");
    let id = exchange.facts.id.clone();
    // Only once the answer is accepted does the body take over the outcome, and with it the
    // facts (moved, not copied); a refused answer leaves both to `refuse`.
    let outcome = || {
        exchange.outcome_written = true;
        OutcomeWriter {
            audit: state.audit().clone(),
            facts: exchange.facts.take(),
            received: exchange.received,
            bytes_up: exchange.bytes_up.unwrap_or(0),
        }
    };
    let reloads = answer::Reloads {
        state: state.clone(),
        current: Arc::clone(declarations),
    };
    match answer::answer(
        response,
        reloads,
        id.as_str(),
        limits.max_response_body,
        limits.idle_timeout,
        outcome,
    )
    .await
    {
        Ok(response) => Ok(response.map(Body::new)),
        Err(error) => Err(error),
    }
}

/// Sends a WebSocket opening handshake upstream on a connection of its own. An answer other
/// than `101` goes back as any answer does; a `101` is checked (`Upgrade: websocket`, no
/// extension, since none was offered), its head cleaned and scrubbed, and the socket relayed on
/// a task of its own (`websocket::relay`), which writes the outcome record when it closes.
async fn open_websocket(
    state: &AppState,
    exchange: &mut Exchange,
    declarations: &Arc<Declarations>,
    allow_private: bool,
    request: http::Request<Full<Bytes>>,
    agent: websocket::AgentSide,
) -> Result<Response, ProxyError> {
    use crate::net::upstream::UpgradeError;
    let limits = *state.limits();
    let sent = tokio::time::timeout(
        limits.request_timeout,
        state.inner.upstream.open_upgrade(request, allow_private),
    )
    .await;
    let mut response = match sent {
        Err(_) => return Err(ProxyError::UpstreamTimeout(limits.request_timeout)),
        Ok(Err(UpgradeError::Connect(ConnectError::Refused(refused)))) => {
            return Err(ProxyError::AddressRefused(refused));
        }
        Ok(Err(UpgradeError::Connect(other))) => {
            return Err(ProxyError::UpstreamFailed(other.to_string()));
        }
        Ok(Err(UpgradeError::Broken(_))) => {
            return Err(ProxyError::UpstreamUnknown(
                "the upstream connection broke before the answer's head".to_owned(),
            ));
        }
        Ok(Ok(response)) => response,
    };
    if response.status() != StatusCode::SWITCHING_PROTOCOLS {
        return answer_upstream(state, exchange, declarations, response).await;
    }
    let answered = response.headers();
    let websocket = answered.get_all(header::UPGRADE).iter().count() == 1
        && answered
            .get(header::UPGRADE)
            .is_some_and(|v| v.as_bytes().trim_ascii().eq_ignore_ascii_case(b"websocket"));
    if !websocket {
        return Err(ProxyError::UpstreamUnknown(
            "the upstream switched to another protocol than WebSocket".to_owned(),
        ));
    }
    if answered
        .keys()
        .any(|name| headers::reads_as(name.as_str(), "sec-websocket-extensions"))
    {
        // Mint offered none: a compressed frame would pass the scrubber unread.
        return Err(ProxyError::UpstreamUnknown(
            "the upstream negotiated a WebSocket extension that Mint did not offer".to_owned(),
        ));
    }
    let upstream = hyper::upgrade::on(&mut response);
    let (mut parts, _) = response.into_parts();
    parts.extensions = http::Extensions::new();
    headers::strip_response(&mut parts.headers);
    // The declarations in force now, as for any answer's head.
    state
        .declarations()
        .scrubber()
        .scrub_headers(&mut parts.headers);
    parts
        .headers
        .insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    parts
        .headers
        .insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    if let Ok(value) = HeaderValue::from_str(exchange.facts.id.as_str()) {
        parts.headers.insert(REQUEST_ID_HEADER, value);
    }
    tracing::debug!(request.id = %exchange.facts.id, "Upstream accepted the WebSocket");
    exchange.outcome_written = true;
    let outcome = OutcomeWriter {
        audit: state.audit().clone(),
        facts: exchange.facts.take(),
        received: exchange.received,
        bytes_up: 0,
    };
    tokio::spawn(websocket::relay(state.clone(), agent, upstream, outcome));
    Ok(Response::from_parts(parts, Body::empty()))
}

/// What the policy and the limits admitted.
struct Admitted {
    rules: Vec<String>,
    allow_private: bool,
    /// What each call consumed, and the store's receipt: refunded if the request is never sent.
    charges: Vec<Vec<Charge>>,
    receipt: Receipt,
}

/// Checks and consumes the call limits of every call the policy allowed, together, in the
/// broker's store (memory or Redis); `id` is the request's id, the member it is counted under in
/// Redis.
async fn admit(state: &AppState, id: &RequestId, allowed: Allowed) -> Result<Admitted, ProxyError> {
    let Allowed {
        rules,
        charges,
        allow_private,
    } = allowed;
    let calls: Vec<&[Charge]> = charges.iter().map(Vec::as_slice).collect();
    let receipt = match state.call_limits().admit(&calls, id).await {
        Ok(receipt) => receipt,
        Err(Refusal::Limited(limited)) => {
            return Err(ProxyError::Limited {
                rules: limited.rules,
                retry_after: limited.retry_after,
            });
        }
        Err(Refusal::Unavailable) => {
            let mut rules: Vec<String> = calls
                .iter()
                .flat_map(|charges| charges.iter().map(|c| c.rule.clone()))
                .collect();
            rules.sort();
            rules.dedup();
            return Err(ProxyError::LimitsUnavailable { rules });
        }
    };
    Ok(Admitted {
        rules,
        allow_private,
        charges,
        receipt,
    })
}

/// Reads the agent's body within the size limit and the request timeout, into one buffer of
/// at most the limit: allocated once at the declared `Content-Length`, or grown by doubling (never
/// past the limit) for a body without one. Chunks are copied in and dropped as they come, so a
/// request holds its body once (plus, while the buffer grows, its previous copy). A body that
/// arrives in one chunk is kept as it came, without a copy.
///
/// As each chunk comes, the bytes it adds (with the token's length less one before them, for a
/// token split across chunks) are searched for `outward`, the capability token the request
/// presented: found, the request is refused (403 `capability_token_outward`). One search per
/// chunk over bytes just copied, so no second pass over the body; what it cannot see is an
/// encoded token (gzip, base64, JSON or percent escapes), which only an agent that means to
/// leak it writes, and such an agent holds the token anyway.
async fn read_body(
    body: Body,
    declared: Option<u64>,
    limits: &ProxyLimits,
    outward: Option<&OutwardToken>,
) -> Result<Bytes, ProxyError> {
    let limit = limits.max_request_body;
    if declared.is_some_and(|length| length > limit) {
        return Err(ProxyError::BodyTooLarge { limit });
    }
    let max = usize::try_from(limit).unwrap_or(usize::MAX);
    let read = async move {
        let mut body = body;
        let mut first: Option<Bytes> = None;
        let mut buffer: Vec<u8> = Vec::new();
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|error| {
                if is_protocol_reset_error(&error) {
                    Invalid::StreamReset
                } else {
                    Invalid::Body
                }
            })?;
            let Ok(data) = frame.into_data() else {
                // Trailers are not forwarded.
                continue;
            };
            let held = first.as_ref().map_or(buffer.len(), Bytes::len);
            if held.saturating_add(data.len()) > max {
                return Err(ProxyError::BodyTooLarge { limit });
            }
            if first.is_none() && buffer.is_empty() {
                first = Some(data);
                check_outward(first.as_deref().unwrap_or_default(), 0, outward)?;
                continue;
            }
            if let Some(chunk) = first.take() {
                let size = declared
                    .and_then(|length| usize::try_from(length).ok())
                    .filter(|&length| length >= chunk.len() + data.len())
                    .unwrap_or_else(|| (chunk.len() + data.len()).saturating_mul(2).min(max));
                buffer.reserve_exact(size);
                buffer.extend_from_slice(&chunk);
            }
            if buffer.capacity() - buffer.len() < data.len() {
                let size = buffer
                    .capacity()
                    .saturating_mul(2)
                    .max(buffer.len() + data.len())
                    .min(max);
                buffer.reserve_exact(size - buffer.len());
            }
            buffer.extend_from_slice(&data);
            check_outward(&buffer, held, outward)?;
        }
        Ok(first.unwrap_or_else(|| Bytes::from(buffer)))
    };
    match tokio::time::timeout(limits.request_timeout, read).await {
        Err(_) => Err(Invalid::Body.into()),
        Ok(result) => result,
    }
}

/// Searches the bytes of `held` from `from` on (and the token's length less one before them)
/// for the presented capability token.
fn check_outward(
    held: &[u8],
    from: usize,
    outward: Option<&OutwardToken>,
) -> Result<(), ProxyError> {
    let Some(outward) = outward else {
        return Ok(());
    };
    let start = from.saturating_sub(outward.len().saturating_sub(1));
    if outward.found_in(held.get(start..).unwrap_or_default()) {
        return Err(ProxyError::CapabilityOutward {
            part: "the body".to_owned(),
        });
    }
    Ok(())
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use std::collections::VecDeque;
    use std::pin::Pin;
    use std::task::{Context, Poll};

    use bytes::Bytes;
    use hyper::body::Frame;

    use super::*;

    /// A body that arrives in the given chunks.
    struct Chunks(VecDeque<Bytes>);

    impl hyper::body::Body for Chunks {
        type Data = Bytes;
        type Error = std::convert::Infallible;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
            Poll::Ready(self.0.pop_front().map(|chunk| Ok(Frame::data(chunk))))
        }
    }

    fn limits() -> ProxyLimits {
        ProxyLimits::default()
    }

    /// F6: the presented token is found in a body however the chunks split it, in the first
    /// chunk, in a later one, across two or three; a body without it, or with another token,
    /// is read whole and unchanged.
    #[tokio::test]
    async fn the_presented_token_is_found_in_the_body_across_chunk_boundaries() {
        let token = "mint_cap_0123456789abcdef_9f8e7d6c5b4a39281706f5e4d3c2b1a0";
        let outward = OutwardToken::new(token);
        let body = format!(
            "{{\"padding\":\"{}\",\"leak\":\"{token}\"}}",
            "x".repeat(300)
        );
        let at = body.find(token).unwrap();
        let mut splits: Vec<Vec<usize>> = (0..=body.len()).map(|cut| vec![cut]).collect();
        for offset in 1..token.len() {
            splits.push(vec![at + offset / 2, at + offset]);
        }
        for cuts in splits {
            let mut chunks = VecDeque::new();
            let mut from = 0;
            for &cut in &cuts {
                chunks.push_back(Bytes::copy_from_slice(&body.as_bytes()[from..cut]));
                from = cut;
            }
            chunks.push_back(Bytes::copy_from_slice(&body.as_bytes()[from..]));
            let read = read_body(Body::new(Chunks(chunks)), None, &limits(), Some(&outward)).await;
            let Err(error) = read else {
                panic!("not found with cuts {cuts:?}");
            };
            assert_eq!(error.code(), "capability_token_outward");
            assert_eq!(error.status(), StatusCode::FORBIDDEN);
            assert!(!error.to_string().contains(token), "{error}");
            assert!(!format!("{error:?} {outward:?}").contains(token));
        }
        let clean = body.replace(token, "mint_cap_0123456789abcdef_other");
        for cut in [0, 1, clean.len() / 2] {
            let chunks = VecDeque::from([
                Bytes::copy_from_slice(&clean.as_bytes()[..cut]),
                Bytes::copy_from_slice(&clean.as_bytes()[cut..]),
            ]);
            let read = read_body(Body::new(Chunks(chunks)), None, &limits(), Some(&outward))
                .await
                .unwrap();
            assert_eq!(read, clean.as_bytes());
        }
    }

    /// F6: the token in a header to be forwarded, raw, percent-encoded or inside `Basic`
    /// credentials; in the target, raw or percent-encoded. Another token is no match.
    #[test]
    fn the_presented_token_is_found_in_headers_and_the_target() {
        use base64::Engine as _;
        let token = "mint_cap_0123456789abcdef_9f8e7d6c5b4a39281706f5e4d3c2b1a0";
        let outward = OutwardToken::new(token);
        let basic = base64::engine::general_purpose::STANDARD.encode(format!("agent:{token}"));
        let encoded = token.replace('_', "%5F");
        for (name, value) in [
            ("x-token", token.to_owned()),
            ("authorization", format!("Bearer {token}")),
            ("authorization", format!("Basic {basic}")),
            ("cookie", format!("s={encoded}")),
        ] {
            let mut headers = http::HeaderMap::new();
            headers.insert("accept", HeaderValue::from_static("*/*"));
            headers.insert(
                http::HeaderName::from_static(name),
                HeaderValue::from_str(&value).unwrap(),
            );
            assert_eq!(
                outward.header_carrying(&headers).map(|n| n.as_str()),
                Some(name)
            );
        }
        let mut headers = http::HeaderMap::new();
        headers.insert(
            "authorization",
            HeaderValue::from_static("Bearer mint_cap_0123456789abcdef_other"),
        );
        assert!(outward.header_carrying(&headers).is_none());
        for url in [
            format!("https://api.example.com/x?key={token}"),
            format!("https://api.example.com/{token}/x"),
            format!("https://api.example.com/x?key={encoded}"),
        ] {
            assert!(
                RawTarget::from_url(&url).unwrap().carries(&outward),
                "{url}"
            );
        }
        assert!(
            !RawTarget::from_url("https://api.example.com/x?key=mint_cap_other")
                .unwrap()
                .carries(&outward)
        );
    }
}
