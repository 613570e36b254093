//! Why the proxy refused or could not complete a request, and how each reason is answered.
//!
//! One exhaustive `match` per question (status, code, outcome, fault, audit reason): adding a
//! variant fails to compile until every answer is decided. Messages go to the agent, so they say
//! what was wrong and how to fix it, never a header value, a query value, a body or a secret.

use std::time::Duration;

use axum::response::{IntoResponse, Response};
use http::{HeaderValue, StatusCode};
use mint_policy::audit::Outcome;
use mint_policy::evaluate::{DenyReason, NearMiss};
use mint_policy::normalize::NormalizeError;

use crate::net::address::AddressError;
use crate::secrets::placeholder::{Part, PlaceholderError};

/// Who is at fault for a refusal: what operators look at first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The agent's request.
    Client,
    /// The upstream or the network toward it.
    Upstream,
    /// Mint itself (its audit log, its configuration).
    Internal,
    /// A store Mint shares with other brokers (Redis, for call limits) is unreachable, slow or
    /// failing; its client says why once, when it starts failing.
    Unavailable,
}

/// Where a request's capability token was looked for: it decides the hint and the status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenPlace {
    /// `Mint-Capability` on the `/v1/proxy/` route: 401.
    Route,
    /// `Proxy-Authorization` of a forward-proxy (absolute-form) request: 407 with
    /// `Proxy-Authenticate`, which is what HTTP clients' proxy logic expects.
    ProxyAuthorization,
    /// The `CONNECT` that opened an intercepted tunnel: 401, since a request inside the tunnel is
    /// one to the origin, where a 407 would mean nothing.
    Tunnel,
}

/// Why a request was refused or failed. Every variant is answered with a JSON error body.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// A malformed or ambiguous request.
    #[error("{0}")]
    Invalid(Invalid),
    /// A placeholder that is not `{{mint:NAME}}` with a valid name, or too many placeholders.
    #[error(transparent)]
    Placeholder(PlaceholderError),
    /// A placeholder naming an alias that is not declared.
    #[error("unknown alias `{alias}`: `mint alias list` shows the declared ones")]
    UnknownAlias {
        /// The alias named.
        alias: String,
    },
    /// No capability, or one that is unknown, tampered with, expired or revoked.
    #[error("{}", capability_message(*place))]
    CapabilityInvalid {
        /// Where the token was looked for.
        place: TokenPlace,
    },
    /// The alias is not bound to the target host.
    #[error("alias `{alias}` is not bound to this host")]
    AliasNotBound {
        /// The alias.
        alias: String,
    },
    /// A placeholder in a place no secret may go, or in a site its alias does not allow.
    #[error("alias `{alias}` may not be placed in {place}")]
    SiteNotAllowed {
        /// The alias.
        alias: String,
        /// Where it was (a description, never the text).
        place: String,
    },
    /// The request carries the capability token it presented toward the upstream (a header, the
    /// target, the body): Mint consumes that token and never forwards it.
    #[error(
        "the request carries its own capability token in {part}: Mint never forwards a capability token to an upstream; remove it (the token goes only in `Mint-Capability` or the proxy credentials)"
    )]
    CapabilityOutward {
        /// Where it was (a description, never the text).
        part: String,
    },
    /// The capability does not grant the alias.
    #[error("this capability does not grant alias `{alias}`")]
    CapabilityScope {
        /// The alias.
        alias: String,
    },
    /// The policy denies the request.
    #[error("{}", denied_text(*reason, closest.as_deref()))]
    PolicyDenied {
        /// The deny rules that matched (empty when no allow rule matched).
        rules: Vec<String>,
        /// The kind of denial.
        reason: DenyReason,
        /// When no allow rule matched: the allow or approve rule that came closest, and why it
        /// does not match.
        closest: Option<Box<NearMiss>>,
    },
    /// The operator denied the request an approve rule held.
    #[error("the operator denied this request; nothing was sent")]
    ApprovalDenied {
        /// The approve rules that held it.
        rules: Vec<String>,
    },
    /// No decision came within the approve rule's timeout.
    #[error("no decision from the operator within {} s; nothing was sent", .timeout.as_secs())]
    ApprovalTimeout {
        /// The approve rules that held it.
        rules: Vec<String>,
        /// How long it waited.
        timeout: Duration,
    },
    /// Too many requests wait for approval already: refused at once, nothing older dropped.
    #[error("{}", queue_full_message(*limit, *per_agent))]
    ApprovalQueueFull {
        /// The approve rules that would have held it.
        rules: Vec<String>,
        /// The bound that was reached.
        limit: usize,
        /// Whether it is this agent's bound (else the broker's).
        per_agent: bool,
    },
    /// The broker is shutting down: a held request is refused.
    #[error("Mint is shutting down; the request waited for approval and nothing was sent")]
    ShuttingDown {
        /// The approve rules that held it.
        rules: Vec<String>,
    },
    /// A call limit is exhausted.
    #[error("call limit reached; retry after {} s", retry_after_secs(*retry_after))]
    Limited {
        /// The exhausted limits' rules.
        rules: Vec<String>,
        /// When the oldest counted call leaves the window.
        retry_after: Duration,
    },
    /// The call limits the request is counted against are kept in Redis, which did not answer
    /// in time or answered an error: refused, since Mint never counts shared limits alone.
    #[error(
        "the shared call-limit counters are unavailable; the request was not forwarded: retry after {} s",
        crate::limits::UNAVAILABLE_RETRY_AFTER.as_secs()
    )]
    LimitsUnavailable {
        /// The rules of the limits that could not be counted.
        rules: Vec<String>,
    },
    /// The target resolved to an address Mint refuses.
    #[error("{0}")]
    AddressRefused(AddressError),
    /// `CONNECT` over HTTP/2, or to a broker without an interception CA.
    #[error(
        "CONNECT is served over HTTP/1.1 only: use the proxy URL http://agent:<token>@HOST:PORT in https_proxy"
    )]
    ConnectUnsupported,
    /// A `CONNECT` to a host outside the name constraints of Mint's interception CA: clients
    /// would refuse any leaf it signed for the host.
    #[error(
        "Mint's interception CA is name-constrained and does not cover this host, so no client would accept its certificate; bind an alias to the host, run `mint ca rotate --name-constraints`, then restart `mint serve` and trust the new CA (`mint ca export`)"
    )]
    OutsideCaNameConstraints,
    /// A `CONNECT` without a valid capability in `Proxy-Authorization`: 407, so clients retry
    /// with the credentials of their proxy URL.
    #[error(
        "missing or invalid capability: send `Proxy-Authorization: Basic` with the token as the password (the proxy URL http://agent:<token>@HOST:PORT), or `Bearer <token>`, with a token from `mint cap issue`"
    )]
    ProxyAuthRequired,
    /// A request inside an intercepted tunnel whose `Host` or `:authority` names another host
    /// than the tunnel's.
    #[error(
        "this connection is a tunnel to `{tunnel}`: a request inside it may only name that host"
    )]
    Misdirected {
        /// The tunnel's `host:port`.
        tunnel: String,
    },
    /// The request body is over the limit.
    #[error("request body is larger than {limit} bytes")]
    BodyTooLarge {
        /// The limit.
        limit: u64,
    },
    /// A gzip request body that inflates past the limit: Mint cannot examine it whole.
    #[error("the gzip request body inflates past {limit} bytes; Mint examines bodies whole")]
    DecodedBodyTooLarge {
        /// The limit.
        limit: u64,
    },
    /// A request body in a content coding Mint does not decode (or a list of codings): Mint
    /// cannot examine it.
    #[error(
        "unsupported `Content-Encoding` on the request body: send one `gzip` or none, so that Mint can examine the body"
    )]
    UnsupportedContentEncoding,
    /// A content-encoded body (gzip) whose decoded text holds a placeholder where its alias
    /// names a body place: Mint substitutes only in bodies sent without a content coding, and
    /// will not forward the placeholder as text where the operator meant a secret to go.
    #[error(
        "{} a body place its alias names, but the body has a `Content-Encoding`: Mint substitutes secrets only in bodies sent without one; send this body uncompressed",
        encoded_subject(alias.as_deref())
    )]
    EncodedBodyPlaceholder {
        /// The alias (`None`: a malformed placeholder).
        alias: Option<String>,
    },
    /// The decision record could not be written: nothing is forwarded unrecorded.
    #[error("the audit log is unavailable; the request was not forwarded")]
    AuditUnavailable,
    /// An alias's secret comes from a source read again in the background (a command, Vault)
    /// that has not answered since before its staleness bound: the request is refused, nothing
    /// was sent; other aliases keep working.
    #[error(
        "the secret of alias `{alias}` is unavailable: its source (a command or a secret server) could not be read again within its staleness bound; nothing was sent; requests with other aliases keep working, tell the operator"
    )]
    SecretUnavailable {
        /// The alias.
        alias: String,
    },
    /// Nothing was sent: DNS, connect or TLS failed.
    #[error("{0}; nothing was sent")]
    UpstreamFailed(String),
    /// The request was sent, then the exchange broke: the upstream may have acted on it.
    #[error("{0}; the request was sent and may have taken effect: do not retry blindly")]
    UpstreamUnknown(String),
    /// The request was sent and no answer came in time.
    #[error("no answer within {} s; the request was sent and may have taken effect: do not retry blindly", .0.as_secs())]
    UpstreamTimeout(Duration),
    /// No such route.
    #[error(
        "no such route: use /v1/proxy/{{scheme}}/{{authority}}/{{path}}, /v1/aliases or /healthz"
    )]
    NotFound,
    /// A route that exists, with a method it does not serve.
    #[error("method not allowed on this route")]
    MethodNotAllowed,
    /// Mint could not do its part (a secret a header cannot carry, a scrubber it cannot build).
    #[error("{0}")]
    Internal(String),
}

/// The ways a request can be malformed, each with its audit reason.
#[derive(Debug, thiserror::Error)]
pub enum Invalid {
    /// The target URL.
    #[error("invalid target: {0}")]
    Target(NormalizeError),
    /// The proxied URL is not `/v1/proxy/{scheme}/{authority}/{path}`.
    #[error("the proxied URL must be /v1/proxy/{{scheme}}/{{authority}}/{{path}}")]
    Route,
    /// Content-Length with Transfer-Encoding, several Content-Length or several Host headers.
    #[error("ambiguous framing: {0}")]
    Framing(&'static str),
    /// A method that is not an uppercase token, or a method-override header that differs.
    #[error("{0}")]
    Method(&'static str),
    /// A header Mint will not forward (an upgrade).
    #[error("{0}")]
    Header(&'static str),
    /// The body could not be read.
    #[error("the request body could not be read")]
    Body,
    /// The HTTP/2 library reset the agent's stream (a protocol error) while the body was read:
    /// the agent gets the reset, and the connection audits it (never answered or recorded by the
    /// pipeline).
    #[error("the HTTP/2 stream was reset for a protocol error")]
    StreamReset,
    /// A fact the audit record cannot hold (a path longer than 4096 characters).
    #[error("the request cannot be audited: {0}")]
    Unauditable(String),
    /// A `CONNECT` target that is not authority-form `host:port`.
    #[error("a CONNECT target must be host:port")]
    ConnectTarget,
    /// A forward-proxy request whose Host header is not the target's authority.
    #[error("the Host header must equal the target's authority")]
    HostMismatch,
    /// An MCP JSON-RPC body that cannot be checked.
    #[error("{0}")]
    Mcp(String),
}

// === impl ProxyError ===

impl ProxyError {
    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        match self {
            ProxyError::Invalid(_)
            | ProxyError::Placeholder(_)
            | ProxyError::UnknownAlias { .. } => StatusCode::BAD_REQUEST,
            ProxyError::CapabilityInvalid {
                place: TokenPlace::Route | TokenPlace::Tunnel,
            } => StatusCode::UNAUTHORIZED,
            ProxyError::CapabilityInvalid {
                place: TokenPlace::ProxyAuthorization,
            } => StatusCode::PROXY_AUTHENTICATION_REQUIRED,
            ProxyError::AliasNotBound { .. }
            | ProxyError::SiteNotAllowed { .. }
            | ProxyError::CapabilityScope { .. }
            | ProxyError::CapabilityOutward { .. }
            | ProxyError::PolicyDenied { .. }
            | ProxyError::ApprovalDenied { .. }
            | ProxyError::ApprovalTimeout { .. }
            | ProxyError::AddressRefused(_)
            | ProxyError::OutsideCaNameConstraints => StatusCode::FORBIDDEN,
            ProxyError::ApprovalQueueFull { .. } => StatusCode::TOO_MANY_REQUESTS,
            ProxyError::ShuttingDown { .. } => StatusCode::SERVICE_UNAVAILABLE,
            ProxyError::NotFound => StatusCode::NOT_FOUND,
            ProxyError::ConnectUnsupported | ProxyError::MethodNotAllowed => {
                StatusCode::METHOD_NOT_ALLOWED
            }
            ProxyError::ProxyAuthRequired => StatusCode::PROXY_AUTHENTICATION_REQUIRED,
            ProxyError::Misdirected { .. } => StatusCode::MISDIRECTED_REQUEST,
            ProxyError::BodyTooLarge { .. } | ProxyError::DecodedBodyTooLarge { .. } => {
                StatusCode::PAYLOAD_TOO_LARGE
            }
            ProxyError::UnsupportedContentEncoding | ProxyError::EncodedBodyPlaceholder { .. } => {
                StatusCode::UNSUPPORTED_MEDIA_TYPE
            }
            ProxyError::Limited { .. } => StatusCode::TOO_MANY_REQUESTS,
            ProxyError::LimitsUnavailable { .. } => StatusCode::SERVICE_UNAVAILABLE,
            ProxyError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            ProxyError::UpstreamFailed(_) | ProxyError::UpstreamUnknown(_) => {
                StatusCode::BAD_GATEWAY
            }
            ProxyError::AuditUnavailable | ProxyError::SecretUnavailable { .. } => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            ProxyError::UpstreamTimeout(_) => StatusCode::GATEWAY_TIMEOUT,
        }
    }

    /// The stable error code in the JSON body.
    pub fn code(&self) -> &'static str {
        match self {
            ProxyError::Invalid(_) => "invalid_request",
            ProxyError::Placeholder(error) => error.code(),
            ProxyError::UnknownAlias { .. } => "unknown_alias",
            ProxyError::CapabilityInvalid { .. } => "capability_invalid",
            ProxyError::AliasNotBound { .. } => "alias_not_bound",
            ProxyError::SiteNotAllowed { .. } => "site_not_allowed",
            ProxyError::CapabilityScope { .. } => "capability_scope",
            ProxyError::CapabilityOutward { .. } => "capability_token_outward",
            ProxyError::PolicyDenied { .. } => "policy_denied",
            ProxyError::ApprovalDenied { .. } => "approval_denied",
            ProxyError::ApprovalTimeout { .. } => "approval_timeout",
            ProxyError::ApprovalQueueFull { .. } => "approval_queue_full",
            ProxyError::ShuttingDown { .. } => "shutting_down",
            ProxyError::Limited { .. } => "limited",
            ProxyError::LimitsUnavailable { .. } => "limits_unavailable",
            ProxyError::AddressRefused(_) => "address_refused",
            ProxyError::ConnectUnsupported => "connect_unsupported",
            ProxyError::OutsideCaNameConstraints => "outside_ca_name_constraints",
            ProxyError::ProxyAuthRequired => "capability_invalid",
            ProxyError::Misdirected { .. } => "misdirected_request",
            ProxyError::BodyTooLarge { .. } | ProxyError::DecodedBodyTooLarge { .. } => {
                "body_too_large"
            }
            ProxyError::UnsupportedContentEncoding => "unsupported_content_encoding",
            ProxyError::EncodedBodyPlaceholder { .. } => "encoded_body_placeholder",
            ProxyError::AuditUnavailable => "audit_unavailable",
            ProxyError::SecretUnavailable { .. } => "secret_unavailable",
            ProxyError::UpstreamFailed(_) => "upstream_failed",
            ProxyError::UpstreamUnknown(_) => "upstream_unknown",
            ProxyError::UpstreamTimeout(_) => "upstream_timeout",
            ProxyError::NotFound => "not_found",
            ProxyError::MethodNotAllowed => "method_not_allowed",
            ProxyError::Internal(_) => "internal_error",
        }
    }

    /// The request's outcome (audit `outcome`, and the `Mint-Outcome` header).
    pub fn outcome(&self) -> Outcome {
        match self {
            ProxyError::Invalid(_)
            | ProxyError::Placeholder(_)
            | ProxyError::UnknownAlias { .. }
            | ProxyError::ConnectUnsupported
            | ProxyError::Misdirected { .. }
            | ProxyError::BodyTooLarge { .. }
            | ProxyError::DecodedBodyTooLarge { .. }
            | ProxyError::UnsupportedContentEncoding
            | ProxyError::EncodedBodyPlaceholder { .. }
            | ProxyError::NotFound
            | ProxyError::MethodNotAllowed => Outcome::Invalid,
            ProxyError::CapabilityInvalid { .. }
            | ProxyError::ProxyAuthRequired
            | ProxyError::AliasNotBound { .. }
            | ProxyError::SiteNotAllowed { .. }
            | ProxyError::CapabilityScope { .. }
            | ProxyError::CapabilityOutward { .. }
            | ProxyError::PolicyDenied { .. }
            | ProxyError::ApprovalDenied { .. }
            | ProxyError::ApprovalTimeout { .. }
            | ProxyError::ShuttingDown { .. }
            | ProxyError::AddressRefused(_)
            | ProxyError::OutsideCaNameConstraints => Outcome::Denied,
            ProxyError::Limited { .. }
            | ProxyError::LimitsUnavailable { .. }
            | ProxyError::ApprovalQueueFull { .. } => Outcome::Limited,
            ProxyError::AuditUnavailable
            | ProxyError::SecretUnavailable { .. }
            | ProxyError::UpstreamFailed(_)
            | ProxyError::Internal(_) => Outcome::Failed,
            ProxyError::UpstreamUnknown(_) | ProxyError::UpstreamTimeout(_) => Outcome::Unknown,
        }
    }

    /// Who is at fault.
    pub fn fault(&self) -> Fault {
        match self {
            ProxyError::Invalid(_)
            | ProxyError::Placeholder(_)
            | ProxyError::UnknownAlias { .. }
            | ProxyError::CapabilityInvalid { .. }
            | ProxyError::AliasNotBound { .. }
            | ProxyError::SiteNotAllowed { .. }
            | ProxyError::CapabilityScope { .. }
            | ProxyError::CapabilityOutward { .. }
            | ProxyError::PolicyDenied { .. }
            | ProxyError::ApprovalDenied { .. }
            | ProxyError::ApprovalTimeout { .. }
            | ProxyError::ApprovalQueueFull { .. }
            | ProxyError::ShuttingDown { .. }
            | ProxyError::Limited { .. }
            | ProxyError::AddressRefused(_)
            | ProxyError::OutsideCaNameConstraints
            | ProxyError::ConnectUnsupported
            | ProxyError::ProxyAuthRequired
            | ProxyError::Misdirected { .. }
            | ProxyError::BodyTooLarge { .. }
            | ProxyError::DecodedBodyTooLarge { .. }
            | ProxyError::UnsupportedContentEncoding
            | ProxyError::EncodedBodyPlaceholder { .. }
            | ProxyError::NotFound
            | ProxyError::MethodNotAllowed => Fault::Client,
            ProxyError::UpstreamFailed(_)
            | ProxyError::UpstreamUnknown(_)
            | ProxyError::UpstreamTimeout(_) => Fault::Upstream,
            ProxyError::AuditUnavailable
            | ProxyError::SecretUnavailable { .. }
            | ProxyError::Internal(_) => Fault::Internal,
            ProxyError::LimitsUnavailable { .. } => Fault::Unavailable,
        }
    }

    /// The audit record's `reason`: the code, or a finer one for malformed requests.
    pub fn reason(&self) -> &'static str {
        match self {
            ProxyError::Invalid(invalid) => match invalid {
                Invalid::Target(_) | Invalid::Route | Invalid::ConnectTarget => "invalid_target",
                Invalid::Framing(_) => "ambiguous_framing",
                Invalid::Method(_) => "invalid_method",
                Invalid::Header(_) => "invalid_header",
                Invalid::Body => "body_unreadable",
                Invalid::StreamReset => "malformed_http2",
                Invalid::Unauditable(_) => "unauditable_request",
                Invalid::HostMismatch => "host_mismatch",
                Invalid::Mcp(_) => "invalid_mcp_message",
            },
            ProxyError::PolicyDenied { reason, .. } => match reason {
                DenyReason::DenyRule => "deny_rule",
                DenyReason::NoAllowRule => "no_allow_rule",
                DenyReason::DefaultAllowUsesAlias => "default_allow_uses_alias",
                DenyReason::DefaultAllowLoopback => "default_allow_loopback",
            },
            ProxyError::DecodedBodyTooLarge { .. } => "decoded_body_too_large",
            ProxyError::ProxyAuthRequired => "proxy_auth_required",
            other => other.code(),
        }
    }

    /// The rule ids to report with the error.
    pub fn rules(&self) -> &[String] {
        match self {
            ProxyError::PolicyDenied { rules, .. }
            | ProxyError::ApprovalDenied { rules }
            | ProxyError::ApprovalTimeout { rules, .. }
            | ProxyError::ApprovalQueueFull { rules, .. }
            | ProxyError::ShuttingDown { rules }
            | ProxyError::Limited { rules, .. }
            | ProxyError::LimitsUnavailable { rules } => rules,
            _ => &[],
        }
    }

    /// For a request no allow rule admits: the rule that came closest and each field that kept
    /// it from matching, as `{"rule": ID, "reasons": [TEXT...]}` (the same words as the message).
    pub fn closest_json(&self) -> Option<serde_json::Value> {
        match self {
            ProxyError::PolicyDenied {
                closest: Some(near),
                ..
            } => Some(serde_json::json!({ "rule": near.rule, "reasons": near.reasons })),
            _ => None,
        }
    }

    /// When to retry: a spent limit's wait, or a short fixed wait when the shared limits are
    /// unavailable.
    pub fn retry_after(&self) -> Option<u64> {
        match self {
            ProxyError::Limited { retry_after, .. } => Some(retry_after_secs(*retry_after)),
            ProxyError::LimitsUnavailable { .. } => {
                Some(retry_after_secs(crate::limits::UNAVAILABLE_RETRY_AFTER))
            }
            _ => None,
        }
    }

    /// The JSON error answer, with `Mint-Request-Id`, `Mint-Outcome` and, for 429 and
    /// `503 limits_unavailable`, `Retry-After`.
    pub fn to_response(&self, request_id: &str) -> Response {
        let mut body = error_body(self.code(), &self.to_string(), self.rules(), request_id);
        if let (Some(retry_after), Some(error)) = (self.retry_after(), body.get_mut("error")) {
            error["retry_after"] = retry_after.into();
        }
        if let (Some(closest), Some(error)) = (self.closest_json(), body.get_mut("error")) {
            error["closest"] = closest;
        }
        let mut response = (self.status(), axum::Json(body)).into_response();
        let headers = response.headers_mut();
        if let Ok(value) = HeaderValue::from_str(request_id) {
            headers.insert(REQUEST_ID_HEADER, value);
        }
        headers.insert(
            OUTCOME_HEADER,
            HeaderValue::from_static(self.outcome().as_str()),
        );
        if let Some(retry_after) = self.retry_after() {
            headers.insert(http::header::RETRY_AFTER, HeaderValue::from(retry_after));
        }
        if self.status() == StatusCode::PROXY_AUTHENTICATION_REQUIRED {
            // RFC 9110 section 11.7.1: a 407 names the scheme to answer with.
            headers.insert(
                http::header::PROXY_AUTHENTICATE,
                HeaderValue::from_static("Basic realm=\"mint\""),
            );
        }
        if let ProxyError::UnsupportedContentEncoding = self {
            // RFC 9110 section 15.5.16: name the codings that would be accepted.
            headers.insert(
                http::header::ACCEPT_ENCODING,
                HeaderValue::from_static("gzip"),
            );
        }
        if let ProxyError::EncodedBodyPlaceholder { .. } = self {
            headers.insert(
                http::header::ACCEPT_ENCODING,
                HeaderValue::from_static("identity"),
            );
        }
        response
    }
}

impl From<Invalid> for ProxyError {
    fn from(invalid: Invalid) -> Self {
        ProxyError::Invalid(invalid)
    }
}

/// Mint's error body: `{"error":{"code","message","rules","request_id"}}`, the one shape of every
/// error Mint answers itself (see also `serve/connection.rs` for answers written before hyper
/// parsed a request).
pub(crate) fn error_body(
    code: &str,
    message: &str,
    rules: &[String],
    request_id: &str,
) -> serde_json::Value {
    serde_json::json!({
        "error": {
            "code": code,
            "message": message,
            "rules": rules,
            "request_id": request_id,
        }
    })
}

/// Describes a place of a request for a message.
pub(crate) fn describe_part(part: &Part) -> String {
    match part {
        Part::Scheme | Part::Authority | Part::Path => {
            "the target's scheme, host, port or path".to_owned()
        }
        Part::Query => "the query".to_owned(),
        Part::Header(name) => format!("header `{name}`"),
        Part::Body => "the body".to_owned(),
    }
}

fn queue_full_message(limit: usize, per_agent: bool) -> String {
    if per_agent {
        format!(
            "this agent already has {limit} requests waiting for the operator's approval; nothing was sent: retry once one is decided"
        )
    } else {
        format!(
            "{limit} requests already wait for the operator's approval; nothing was sent: retry once one is decided"
        )
    }
}

fn encoded_subject(alias: Option<&str>) -> String {
    match alias {
        Some(alias) => format!("a placeholder of alias `{alias}` sits at"),
        None => "a malformed placeholder sits at".to_owned(),
    }
}

fn capability_message(place: TokenPlace) -> &'static str {
    match place {
        TokenPlace::ProxyAuthorization | TokenPlace::Tunnel => {
            "missing or invalid capability: as a forward proxy, send `Proxy-Authorization: Bearer <token>` (or use the proxy URL http://agent:<token>@HOST:PORT) with a token from `mint cap issue`"
        }
        TokenPlace::Route => {
            "missing or invalid capability: send `Mint-Capability: <token>` with a token from `mint cap issue`"
        }
    }
}

/// The denial's message, and for a request no allow rule admits, the rule that came closest and
/// every field that kept it from matching.
fn denied_text(reason: DenyReason, closest: Option<&NearMiss>) -> String {
    let message = denied_message(reason);
    match closest {
        Some(near) if reason != DenyReason::DenyRule => format!(
            "{message}; the closest, `{}`, does not match because {}",
            near.rule,
            near.reasons.join("; and ")
        ),
        _ => message.to_owned(),
    }
}

fn denied_message(reason: DenyReason) -> &'static str {
    match reason {
        DenyReason::DenyRule => "denied by policy: a deny rule matches this request",
        DenyReason::NoAllowRule => "denied by policy: no allow rule matches this request",
        DenyReason::DefaultAllowUsesAlias => {
            "denied by policy: a request that uses an alias needs an allow rule naming it"
        }
        DenyReason::DefaultAllowLoopback => {
            "denied by policy: a loopback target needs an allow rule naming it"
        }
    }
}

/// Whole seconds to wait, rounded up, at least 1.
fn retry_after_secs(retry_after: Duration) -> u64 {
    let secs = retry_after.as_secs() + u64::from(retry_after.subsec_nanos() > 0);
    secs.max(1)
}

/// The request id header on every response.
pub const REQUEST_ID_HEADER: &str = "mint-request-id";

/// The outcome header on Mint's own errors.
pub const OUTCOME_HEADER: &str = "mint-outcome";
