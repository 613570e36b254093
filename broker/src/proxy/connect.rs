//! `CONNECT`: HTTPS interception. An agent that honours `HTTPS_PROXY` opens a tunnel to
//! `host:port` through Mint; Mint decides before it answers `200`, then terminates the agent's
//! TLS with a leaf of its own CA (`serve::tunnel`) and runs every request inside through the
//! same pipeline as `/v1/proxy/` ([`super::forward`], mode [`Mode::Intercept`]). Mint never opens
//! an opaque tunnel: no byte reaches an upstream that the pipeline did not decide.
//!
//! Before the `200`, in order: the capability (`Proxy-Authorization: Basic` with the token as the
//! password, or `Bearer`; otherwise `407` with `Proxy-Authenticate`); HTTP/1.1 (an HTTP/2
//! `CONNECT` is `405`); the target, authority-form `host:port` canonicalized by
//! `mint_policy::normalize` like every other target (`400` otherwise); a host some allow rule
//! could match or some alias is bound to (`403` otherwise); a host inside the name constraints of
//! Mint's CA when it has some (`403 outside_ca_name_constraints`: no leaf is signed that clients
//! would refuse); the addresses the host resolves to, checked as for a request (`403
//! address_refused`; a name that does not resolve is `502 upstream_failed`, audited like such a
//! request of `/v1/proxy/`: an `allow` decision and a `failed` outcome). Each refusal is audited;
//! an open tunnel
//! gets a `decision` (allow) and an `outcome` (`completed`, 200, reason `tunnel_opened`) record,
//! each request inside gets its own, and when the tunnel closes a second `outcome` of the
//! `CONNECT` (reason `tunnel_closed`) sums it up: duration, bytes each way, requests, how it
//! ended ([`audit_tunnel_closed`]).
//!
//! The tunnel keeps the capability token to authenticate each request inside again, so expiry
//! and revocation bite in a long-lived tunnel. It never leaves this process and never appears in
//! a `Debug` output.

use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::extract::Request;
use axum::response::Response;
use http::{Method, StatusCode, Version};
use mint_policy::aliases::AliasFile;
use mint_policy::audit::{
    AgentName, AuditDecision, CapabilityId, HttpStatus, Outcome, ReasonCode, RequestId, TunnelEnd,
};
use mint_policy::evaluate::{CompiledPolicy, DenyReason};
use mint_policy::host::Host;
use mint_policy::normalize::{Target, normalize_target, parse_authority};
use zeroize::Zeroizing;

use super::answer::OutcomeWriter;
use super::error::{Invalid, ProxyError};
use super::{AppState, Exchange, Mode, capability_token};
use crate::audit::facts::{OutcomeFacts, RequestFacts, TargetFacts, outcome_record};
use crate::net::upstream::ConnectError;

/// An open tunnel: its canonical target and whose it is.
pub(crate) struct Tunnel {
    /// `https://host:port/`, canonical: the upstream authority of every request inside.
    pub(crate) target: Target,
    /// The capability token of the `CONNECT`, checked again for every request inside.
    token: Zeroizing<String>,
    /// The id of the `CONNECT` request.
    pub(crate) connect_id: RequestId,
    agent: Option<AgentName>,
    capability: Option<CapabilityId>,
    facts: Option<TargetFacts>,
    /// When the `CONNECT` was received.
    received: Instant,
}

/// What a closed tunnel carried, for its `tunnel_closed` record.
#[derive(Clone, Copy, Debug)]
pub(crate) struct TunnelSummary {
    /// Bytes read from the agent after the `200` (TLS records, the handshake included).
    pub(crate) from_agent: u64,
    /// Bytes written to the agent after the `200`.
    pub(crate) to_agent: u64,
    /// Requests handed to the pipeline.
    pub(crate) requests: u64,
    /// How it ended.
    pub(crate) ended: TunnelEnd,
}

impl std::fmt::Debug for Tunnel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tunnel")
            .field("authority", &self.target.authority())
            .field("connect_id", &self.connect_id)
            .finish_non_exhaustive()
    }
}

// === impl Tunnel ===

impl Tunnel {
    /// The tunnel's host, as a certificate and SNI name it (an IPv6 address without brackets).
    pub(crate) fn host(&self) -> &Host {
        &self.target.host
    }

    /// The capability token, for the pipeline's authentication of a request inside.
    pub(crate) fn token(&self) -> &str {
        self.token.as_str()
    }
}

/// The tunnel of the requests inside it, in their extensions.
#[derive(Clone, Debug)]
pub(crate) struct TunnelExt(pub(crate) Arc<Tunnel>);

/// Answers a `CONNECT`: a refusal (audited), or `200` with the tunnel handed to
/// `serve::tunnel` once hyper gives up the connection.
pub(crate) async fn connect(state: &AppState, id: RequestId, request: Request) -> Response {
    let mut exchange = Exchange::new(state, id.clone(), Some(&Method::CONNECT));
    // The head only: a request (its body) is not `Sync`, so it is not held across an await.
    let (head, body) = request.into_parts();
    // The allow rules that admit the tunnel, named in its decision record.
    let mut admitting = Vec::new();
    let tunnel = match admit(state, &mut exchange, &head, &mut admitting).await {
        Ok(tunnel) => tunnel,
        // The host passed every check that decides, then could not be resolved (or its
        // addresses not checked): audited as `/v1/proxy/` audits such a request, an `allow`
        // decision and a `failed` outcome (502 `upstream_failed`); no tunnel.
        Err(error @ ProxyError::UpstreamFailed(_)) if state.interception().is_some() => {
            if let Err(audit) = exchange.record_allow(state, &admitting).await {
                return exchange.refuse(audit);
            }
            return exchange.refuse(error);
        }
        Err(error) => return exchange.refuse(error),
    };
    let Some(leaves) = state.interception().cloned() else {
        return exchange.refuse(ProxyError::ConnectUnsupported);
    };
    if let Err(error) = exchange.record_allow(state, &admitting).await {
        return exchange.refuse(error);
    }
    let tunnel = Arc::new(Tunnel {
        connect_id: id,
        agent: exchange.facts.agent.clone(),
        capability: exchange.facts.capability.clone(),
        facts: exchange.facts.target.clone(),
        received: exchange.received,
        ..tunnel
    });
    exchange.outcome_written = true;
    OutcomeWriter {
        audit: state.audit().clone(),
        facts: exchange.facts.take(),
        received: exchange.received,
        bytes_up: 0,
    }
    .write(
        Outcome::Completed,
        Some(StatusCode::OK),
        Some(0),
        Some("tunnel_opened"),
    );
    let slot = head
        .extensions
        .get::<crate::serve::ConnectionSlot>()
        .cloned();
    let mut request = Request::from_parts(head, body);
    let on_upgrade = hyper::upgrade::on(&mut request);
    tracing::debug!(request.id = %tunnel.connect_id, upstream.authority = %tunnel.target.authority(), "Tunnel opened");
    tokio::spawn(crate::serve::tunnel::serve(
        state.clone(),
        tunnel,
        leaves,
        on_upgrade,
        slot,
    ));
    let mut response = Response::new(Body::empty());
    *response.status_mut() = StatusCode::OK;
    response
}

/// The checks before the `200`; fills the exchange's facts as they are learned, and `admitting`
/// with the allow rules that could admit a request inside once the policy has been asked.
async fn admit(
    state: &AppState,
    exchange: &mut Exchange,
    request: &http::request::Parts,
    admitting: &mut Vec<String>,
) -> Result<Tunnel, ProxyError> {
    let token = capability_token(&request.headers, Mode::Forward);
    let grant = state
        .authenticate(token.as_deref(), Mode::Forward)
        .map_err(|_| ProxyError::ProxyAuthRequired)?;
    exchange.facts.agent = AgentName::new(grant.agent.as_str()).ok();
    exchange.facts.capability = CapabilityId::new(grant.id.as_str()).ok();
    if request.version > Version::HTTP_11 {
        return Err(ProxyError::ConnectUnsupported);
    }

    // The target: authority-form, with a port, canonical like every other target.
    let authority = request
        .uri
        .authority()
        .filter(|_| request.uri.scheme().is_none() && request.uri.path_and_query().is_none())
        .ok_or(Invalid::ConnectTarget)?
        .as_str();
    let target = connect_target(authority)?;
    exchange.facts.target =
        Some(TargetFacts::from_target(&target).map_err(|e| Invalid::Unauditable(e.to_string()))?);

    // A host no request could be allowed to, and no alias is bound to: no tunnel.
    let declarations = state.declarations();
    *admitting = tunnel_may_open(
        declarations.policy(),
        declarations.aliases(),
        grant.agent.as_str(),
        &target,
    )?;

    // A name-constrained CA cannot sign for a host outside its constraints.
    if let Some(leaves) = state.interception()
        && !leaves.ca().permits(&target.host)
    {
        return Err(ProxyError::OutsideCaNameConstraints);
    }

    // The addresses, as a request's would be checked (private ones are left to each request's
    // deciding rule).
    let limits = state.limits();
    state
        .inner
        .upstream
        .check_target(&target.host, target.port, true, limits.connect_timeout)
        .await
        .map_err(|error| match error {
            ConnectError::Refused(refused) => ProxyError::AddressRefused(refused),
            other => ProxyError::UpstreamFailed(other.to_string()),
        })?;

    Ok(Tunnel {
        target,
        token: Zeroizing::new(token.unwrap_or_default()),
        connect_id: exchange.facts.id.clone(),
        agent: None,
        capability: None,
        facts: None,
        received: Instant::now(),
    })
}

/// The target of a `CONNECT`: authority-form `host:port` (the port is required), canonicalized by
/// `mint_policy::normalize` like every other target, as `https://host:port/`. Shared with
/// `mint policy explain`.
pub(crate) fn connect_target(authority: &str) -> Result<Target, ProxyError> {
    let (_, port) = parse_authority(authority).map_err(Invalid::Target)?;
    if port.is_none() {
        return Err(Invalid::ConnectTarget.into());
    }
    Ok(normalize_target("https", authority, "/").map_err(Invalid::Target)?)
}

/// Whether a tunnel to `target` may open for `agent`: some allow or approve rule could match its
/// host (`CompiledPolicy::could_allow_host`: agent, scheme, port and host fit), or some alias is
/// bound to it; otherwise `403 policy_denied` (`no_allow_rule`). The one check the broker runs
/// before the `200` and `mint policy explain` runs for a `CONNECT`. Returns the allow and approve
/// rules that could admit a request inside, which the tunnel's decision record names (none when
/// only an alias binding or `default: allow` admits it). A request inside that an approve rule
/// holds goes through the pipeline like any other (until approvals land: refused, never sent).
pub(crate) fn tunnel_may_open(
    policy: &CompiledPolicy,
    aliases: &AliasFile,
    agent: &str,
    target: &Target,
) -> Result<Vec<String>, ProxyError> {
    let bound = aliases
        .aliases
        .iter()
        .any(|alias| alias.hosts.iter().any(|host| host.matches(&target.host)));
    if bound || policy.could_allow_host(agent, &target.host, target.port) {
        return Ok(policy
            .rules_that_could_allow_host(agent, &target.host, target.port)
            .map(str::to_owned)
            .collect());
    }
    Err(ProxyError::PolicyDenied {
        rules: Vec::new(),
        reason: DenyReason::NoAllowRule,
        closest: None,
    })
}

/// Audits a tunnel that ended before any request inside it: a TLS handshake that failed, timed
/// out, was not TLS, or named another host than the `CONNECT` (`reason`). A `deny` decision and
/// an `invalid` outcome with the tunnel's agent, capability and target.
pub(crate) fn audit_tunnel_refusal(
    state: &AppState,
    tunnel: &Tunnel,
    reason: &'static str,
    status: StatusCode,
) -> RequestId {
    let mut exchange = Exchange::new(state, state.next_request_id(), Some(&Method::CONNECT));
    exchange.facts.agent = tunnel.agent.clone();
    exchange.facts.capability = tunnel.capability.clone();
    exchange.facts.target = tunnel.facts.clone();
    exchange.record_refusal(
        AuditDecision::Deny,
        None,
        reason,
        Outcome::Invalid,
        Some(status),
    );
    exchange.facts.id.clone()
}

/// Audits a tunnel that has closed: a second `outcome` record of its `CONNECT` (same id, agent,
/// capability and target), `completed` with status 200 and reason `tunnel_closed`, with
/// `duration_ms` from the `CONNECT`'s receipt, `bytes_up` and `bytes_down` as the bytes from and
/// to the agent, `requests` and `ended`. Deferred like every outcome; a failure is logged.
pub(crate) fn audit_tunnel_closed(state: &AppState, tunnel: &Tunnel, summary: TunnelSummary) {
    let request = RequestFacts {
        id: tunnel.connect_id.clone(),
        agent: tunnel.agent.clone(),
        capability: tunnel.capability.clone(),
        method: mint_policy::audit::Method::new(Method::CONNECT.as_str()).ok(),
        target: tunnel.facts.clone(),
        aliases: Vec::new(),
        skipped: Vec::new(),
        skipped_count: None,
        mcp_tool: None,
    };
    let facts = OutcomeFacts {
        outcome: Outcome::Completed,
        status: HttpStatus::new(StatusCode::OK.as_u16()).ok(),
        bytes_up: Some(summary.from_agent),
        bytes_down: Some(summary.to_agent),
        duration_ms: Some(u64::try_from(tunnel.received.elapsed().as_millis()).unwrap_or(u64::MAX)),
        reason: ReasonCode::new("tunnel_closed").ok(),
    };
    let mut record = outcome_record(crate::audit::now(), request, facts);
    record.requests = Some(summary.requests);
    record.ended = Some(summary.ended);
    if let Err(error) = state.audit().defer(&record) {
        tracing::error!(request.id = %record.id, error = %error, "Tunnel record not written");
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;

    /// A tunnel keeps the capability token for the requests inside it; no `{:?}` of it (or of
    /// the extension the requests carry) may show the token.
    #[test]
    fn debug_of_a_tunnel_never_shows_its_token() {
        let canary = "mint_cap_0123456789ab_canaryTunnelTokenQx7Lm2Vt9";
        let tunnel = Tunnel {
            target: mint_policy::normalize::normalize_target("https", "api.example.test", "/")
                .unwrap(),
            token: Zeroizing::new(canary.to_owned()),
            connect_id: RequestId::new("tunnel-test-1").unwrap(),
            agent: None,
            capability: None,
            facts: None,
            received: std::time::Instant::now(),
        };
        assert_eq!(tunnel.token(), canary);
        let ext = TunnelExt(Arc::new(tunnel));
        for shown in [
            format!("{:?}", ext.0),
            format!("{ext:?}"),
            format!("{ext:#?}"),
        ] {
            assert!(!shown.contains("canaryTunnelToken"), "{shown}");
            assert!(shown.contains("api.example.test"), "{shown}");
        }
    }
}
