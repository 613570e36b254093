//! The request checks of steps 2 to 4 of the proxy's pipeline that need neither the connection,
//! the capability nor the limiter: the target as written, the MCP tool calls, the placeholders
//! against the alias declarations, and the policy's evaluation of each call.
//!
//! `forward` (in `proxy.rs`) calls them in the pipeline's order, and so does `mint policy
//! explain`, which is how it refuses what the proxy refuses, in the same order and with the same
//! errors. Pure: no I/O and no state. Never sees a secret value, and no error names a header
//! value, a query value or a body.

use std::borrow::Cow;
use std::time::Duration;

use http::header::{self, HeaderMap};
use http::{Method, Uri};
use mint_policy::aliases::AliasFile;
use mint_policy::body::{BodyPlaces, form_decode};
use mint_policy::evaluate::{self, AliasUse, CompiledPolicy, Evaluation};
use mint_policy::limits::Charge;
use mint_policy::normalize::{Target, normalize_target};
use mint_policy::site::{Site, SiteSet};
use serde::de::{DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

use super::error::{Invalid, ProxyError, describe_part};
use super::single_header;
use crate::audit::facts::TargetFacts;
use crate::proxy::mcp_call;
use crate::secrets::placeholder::shaped::ShapedPlaceholders;
use crate::secrets::placeholder::{self, Place, Placeholders, RequestParts};

/// Scalars (strings, numbers, literals) are no JSON-RPC message: skipped.
macro_rules! scalars_are_no_message {
    () => {
        fn visit_str<E>(self, _: &str) -> Result<(), E> {
            Ok(())
        }
        fn visit_bool<E>(self, _: bool) -> Result<(), E> {
            Ok(())
        }
        fn visit_i64<E>(self, _: i64) -> Result<(), E> {
            Ok(())
        }
        fn visit_u64<E>(self, _: u64) -> Result<(), E> {
            Ok(())
        }
        fn visit_f64<E>(self, _: f64) -> Result<(), E> {
            Ok(())
        }
        fn visit_unit<E>(self) -> Result<(), E> {
            Ok(())
        }
    };
}

/// The target as the agent wrote it, before canonicalization. Its `Debug` leaves the query out:
/// a value there may be a token.
pub(crate) struct RawTarget {
    scheme: String,
    authority: String,
    path: String,
    query: Option<String>,
}

// === impl RawTarget ===

impl std::fmt::Debug for RawTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawTarget")
            .field("scheme", &self.scheme)
            .field("authority", &self.authority)
            .field("path", &self.path)
            .field("has_query", &self.query.is_some())
            .finish()
    }
}

impl RawTarget {
    /// `/v1/proxy/{scheme}/{authority}/{path...}?{query}`.
    pub(crate) fn from_route(uri: &Uri) -> Result<RawTarget, Invalid> {
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
    pub(crate) fn from_absolute(uri: &Uri, headers: &HeaderMap) -> Result<RawTarget, Invalid> {
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

    /// A request inside an intercepted `CONNECT` tunnel to `tunnel` (`host:port`, canonical):
    /// always `https` to the tunnel's authority, with the request's path and query. Its `Host`
    /// header and its URI's authority (HTTP/2's `:authority`, or an absolute-form HTTP/1.1
    /// target), when present, must name the tunnel's host and port, compared canonically; at
    /// least one must be present. Anything else is [`ProxyError::Misdirected`]: nothing is sent.
    pub(crate) fn from_tunnel(
        uri: &Uri,
        headers: &HeaderMap,
        tunnel: &Target,
    ) -> Result<RawTarget, ProxyError> {
        let misdirected = || ProxyError::Misdirected {
            tunnel: tunnel.authority(),
        };
        let names_tunnel = |text: &str| {
            mint_policy::normalize::parse_authority(text)
                .is_ok_and(|(host, port)| host == tunnel.host && port.unwrap_or(443) == tunnel.port)
        };
        let mut named = false;
        if let Some(authority) = uri.authority() {
            if uri.scheme_str().is_some_and(|scheme| scheme != "https")
                || !names_tunnel(authority.as_str())
            {
                return Err(misdirected());
            }
            named = true;
        }
        let mut hosts = headers.get_all(header::HOST).iter();
        match (hosts.next(), hosts.next()) {
            (None, _) => {}
            (Some(host), None) => {
                if !host.to_str().is_ok_and(names_tunnel) {
                    return Err(misdirected());
                }
                named = true;
            }
            (Some(_), Some(_)) => return Err(Invalid::Framing("several Host headers").into()),
        }
        if !named {
            return Err(misdirected());
        }
        Ok(RawTarget {
            scheme: "https".to_owned(),
            authority: tunnel.authority(),
            path: uri.path().to_owned(),
            query: uri.query().map(str::to_owned),
        })
    }

    /// `scheme://authority/path?query`, split the way [`RawTarget::from_route`] splits the
    /// route: the authority ends at the first `/`, and the query starts at the first `?`. A
    /// fragment stays in the path, so that canonicalization refuses it. For `mint policy
    /// explain`, which takes the target as a URL.
    pub(crate) fn from_url(url: &str) -> Result<RawTarget, Invalid> {
        let (scheme, rest) = url.split_once("://").ok_or(Invalid::Route)?;
        let (before_query, query) = match rest.split_once('?') {
            Some((before, query)) => (before, Some(query.to_owned())),
            None => (rest, None),
        };
        let (authority, path) = match before_query.find('/') {
            Some(at) => before_query.split_at(at),
            None => (before_query, "/"),
        };
        Ok(RawTarget {
            scheme: scheme.to_owned(),
            authority: authority.to_owned(),
            path: path.to_owned(),
            query,
        })
    }

    /// The canonical target (`normalize_target`) and its audit facts. A placeholder in the
    /// scheme or authority as written is refused (403) before the target is parsed: a name that
    /// fails to parse must still be answered as a placeholder where none may go.
    pub(crate) fn canonicalize(
        &self,
        shaped: &ShapedPlaceholders,
    ) -> Result<(Target, TargetFacts), ProxyError> {
        let empty = HeaderMap::new();
        let found = placeholder::scan(
            &RequestParts {
                scheme: &self.scheme,
                authority: &self.authority,
                path: "/",
                query: None,
                headers: &empty,
                body: &[],
            },
            &BodyPlaces::default(),
            shaped,
        )
        .map_err(ProxyError::Placeholder)?;
        if let Some(first) = found.found().first() {
            return Err(ProxyError::SiteNotAllowed {
                alias: first.alias.clone(),
                place: describe_part(&first.part),
            });
        }
        let target = normalize_target(&self.scheme, &self.authority, &self.path_and_query())
            .map_err(Invalid::Target)?;
        let facts =
            TargetFacts::from_target(&target).map_err(|e| Invalid::Unauditable(e.to_string()))?;
        Ok((target, facts))
    }

    /// Whether the target as written holds `token`, raw or percent-decoded (authority, path,
    /// query): checked before the target's facts are taken for the audit record, so a refusal
    /// never records it.
    pub(crate) fn carries(&self, token: &OutwardToken) -> bool {
        [
            Some(self.authority.as_str()),
            Some(self.path.as_str()),
            self.query.as_deref(),
        ]
        .into_iter()
        .flatten()
        .any(|part| {
            token.found_in(part.as_bytes())
                || token.found_in(&zeroize::Zeroizing::new(form_decode(part.as_bytes())))
        })
    }

    fn path_and_query(&self) -> String {
        match &self.query {
            Some(query) => format!("{}?{query}", self.path),
            None => self.path.clone(),
        }
    }
}

/// The capability token the request presented (issue 16, F6): Mint consumes it and must never
/// forward it to an upstream. Held zeroized; its `Debug` shows nothing of it.
pub(crate) struct OutwardToken {
    /// The only copy it keeps: a stored `memmem::Finder` would hold another, never wiped.
    token: zeroize::Zeroizing<Vec<u8>>,
}

impl OutwardToken {
    pub(crate) fn new(token: &str) -> OutwardToken {
        OutwardToken {
            token: zeroize::Zeroizing::new(token.as_bytes().to_vec()),
        }
    }

    /// The token's length: a chunked search keeps this many bytes less one of overlap.
    pub(crate) fn len(&self) -> usize {
        self.token.len()
    }

    /// Whether `haystack` holds the token as written.
    pub(crate) fn found_in(&self, haystack: &[u8]) -> bool {
        !self.token.is_empty() && memchr::memmem::find(haystack, &self.token).is_some()
    }

    /// The first header to be forwarded whose value holds the token, raw, percent-decoded or
    /// (after `Basic `) base64-decoded: a client given the proxy URL's credentials for a server.
    pub(crate) fn header_carrying<'h>(
        &self,
        headers: &'h HeaderMap,
    ) -> Option<&'h header::HeaderName> {
        headers.iter().find_map(|(name, value)| {
            let bytes = value.as_bytes();
            let basic = bytes
                .get(..6)
                .filter(|scheme| scheme.eq_ignore_ascii_case(b"basic "))
                .and_then(|_| {
                    use base64::Engine as _;
                    base64::engine::general_purpose::STANDARD
                        .decode(bytes.get(6..)?.trim_ascii())
                        .ok()
                        .map(zeroize::Zeroizing::new)
                });
            let carries = self.found_in(bytes)
                || self.found_in(&zeroize::Zeroizing::new(form_decode(bytes)))
                || basic.is_some_and(|decoded| self.found_in(&decoded));
            carries.then_some(name)
        })
    }
}

impl std::fmt::Debug for OutwardToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OutwardToken(..)")
    }
}

/// The ids of a JSON-RPC request or batch, for error answers.
#[derive(Debug)]
pub(crate) struct JsonRpcIds {
    batch: bool,
    /// Each id as the body wrote it (copied out: the body is forwarded on its own).
    ids: Vec<Box<RawValue>>,
    /// How many messages the body holds; `None` when it could not be counted.
    messages: Option<usize>,
}

// === impl JsonRpcIds ===

impl JsonRpcIds {
    /// The ids of the messages of `body` (the decoded body, already checked strictly by
    /// `mcp_call`): every top-level JSON text, arrays expanded (JSON Lines included). A body that
    /// does not parse here gives no ids and counts as holding other messages. Streaming and
    /// borrowed: every value but an `id` is skipped unread ([`IgnoredAny`]), so memory is the
    /// ids' own text, never a document proportional to the body.
    pub(crate) fn of(body: &[u8]) -> JsonRpcIds {
        let body = body.strip_prefix("\u{feff}".as_bytes()).unwrap_or(body);
        let mut found = TextIds::default();
        let mut texts = 0;
        let mut parsed = true;
        let mut stream = serde_json::Deserializer::from_slice(body);
        loop {
            if stream.end().is_ok() {
                break;
            }
            if (TextSeed { found: &mut found })
                .deserialize(&mut stream)
                .is_err()
            {
                parsed = false;
                break;
            }
            texts += 1;
        }
        JsonRpcIds {
            batch: texts != 1 || found.messages != 1,
            ids: found.ids,
            messages: parsed.then_some(found.messages),
        }
    }

    /// Whether the body holds messages besides its `calls` tool calls: the endpoint's own
    /// traffic, evaluated without a tool. A body that could not be counted does.
    pub(crate) fn holds_other_messages(&self, calls: usize) -> bool {
        self.messages.is_none_or(|count| count > calls)
    }

    /// A JSON-RPC error answer per request id (`-32001`, Mint's error object in `data`); each id
    /// is written back as the request wrote it.
    pub(crate) fn error_body(&self, error: &ProxyError, request_id: &str) -> String {
        #[derive(serde::Serialize)]
        struct Answer<'a> {
            jsonrpc: &'static str,
            id: &'a RawValue,
            error: &'a serde_json::Value,
        }
        let mut object = serde_json::json!({
            "code": JSONRPC_REFUSED,
            "message": format!("refused by Mint: {error}"),
            "data": {
                "code": error.code(),
                "rules": error.rules(),
                "request_id": request_id,
            },
        });
        if let Some(closest) = error.closest_json() {
            object["data"]["closest"] = closest;
        }
        fn one<'a>(id: &'a RawValue, error: &'a serde_json::Value) -> Answer<'a> {
            Answer {
                jsonrpc: "2.0",
                id,
                error,
            }
        }
        let written = if self.batch && !self.ids.is_empty() {
            let answers: Vec<Answer<'_>> = self.ids.iter().map(|id| one(id, &object)).collect();
            serde_json::to_string(&answers)
        } else {
            let id = self.ids.first().map_or(RawValue::NULL, |id| id);
            serde_json::to_string(&one(id, &object))
        };
        // Serializing strings, numbers and verbatim ids into a `String` cannot fail.
        written.unwrap_or_default()
    }
}

/// What the texts read so far hold.
#[derive(Default)]
struct TextIds {
    messages: usize,
    ids: Vec<Box<RawValue>>,
}

/// One top-level JSON text: an object is a message, an array a batch of elements.
struct TextSeed<'f> {
    found: &'f mut TextIds,
}

/// One element of a batch: an object is a message.
struct ElementSeed<'f> {
    found: &'f mut TextIds,
}

impl<'de> DeserializeSeed<'de> for TextSeed<'_> {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for TextSeed<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON-RPC message or batch")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq
            .next_element_seed(ElementSeed {
                found: &mut *self.found,
            })?
            .is_some()
        {}
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<(), A::Error> {
        message_ids(self.found, map)
    }

    scalars_are_no_message!();
}

impl<'de> DeserializeSeed<'de> for ElementSeed<'_> {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ElementSeed<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON-RPC message")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<(), A::Error> {
        message_ids(self.found, map)
    }

    scalars_are_no_message!();
}

/// A member name: whether it is `id`. Borrowed: never copied, even when escaped.
struct IsId;

impl<'de> DeserializeSeed<'de> for IsId {
    type Value = bool;

    fn deserialize<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<bool, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl Visitor<'_> for IsId {
    type Value = bool;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a member name")
    }

    fn visit_str<E>(self, name: &str) -> Result<bool, E> {
        Ok(name == "id")
    }
}

/// A message: counted, and its `id` (the first, as a map lookup finds it) kept verbatim.
fn message_ids<'de, A: MapAccess<'de>>(found: &mut TextIds, mut map: A) -> Result<(), A::Error> {
    found.messages += 1;
    let mut id = None;
    while let Some(is_id) = map.next_key_seed(IsId)? {
        if is_id && id.is_none() {
            let raw: &'de RawValue = map.next_value()?;
            id = Some(raw.to_owned());
        } else {
            map.next_value::<IgnoredAny>()?;
        }
    }
    found.ids.extend(id);
    Ok(())
}

/// Every policy evaluation of one request, in call order: one per MCP tool it calls, then one
/// without a tool when it calls none or also holds other messages.
#[derive(Debug)]
pub(crate) struct Evaluated {
    /// The tool of each call (`None`: the request itself, or a batch's other messages) and what
    /// the policy says about it.
    pub(crate) calls: Vec<(Option<String>, Evaluation)>,
}

// === impl Evaluated ===

impl Evaluated {
    /// The tool of the first denied call (or, when none is denied, of the first held for
    /// approval), when that call is a tool's: the audit record names the tool that was refused,
    /// not the batch's first.
    pub(crate) fn denied_tool(&self) -> Option<&str> {
        self.calls
            .iter()
            .find(|(_, evaluation)| matches!(evaluation, Evaluation::Deny(_)))
            .or_else(|| {
                self.calls
                    .iter()
                    .find(|(_, evaluation)| matches!(evaluation, Evaluation::Approve(_)))
            })
            .and_then(|(tool, _)| tool.as_deref())
    }

    /// What the request may do if every call is allowed or, held for approval, approved: refused
    /// at the first denied call (ahead of any call held for approval), and when it calls more
    /// than one tool. The held calls' grants are included: [`Evaluated::holds`] says which calls
    /// must be approved first.
    pub(crate) fn allowed(self) -> Result<Allowed, ProxyError> {
        if let Some(denial) = self.denial() {
            return Err(ProxyError::PolicyDenied {
                rules: denial.rules.clone(),
                reason: denial.reason,
                closest: None,
            });
        }
        self.one_tool()?;
        let mut allowed = Allowed {
            rules: Vec::new(),
            charges: Vec::new(),
            allow_private: true,
        };
        for (_, evaluation) in self.calls {
            match evaluation {
                Evaluation::Deny(denial) => {
                    return Err(ProxyError::PolicyDenied {
                        rules: denial.rules,
                        reason: denial.reason,
                        closest: None,
                    });
                }
                // Approved, a held call is allowed by its approve rules (and any allow rules).
                Evaluation::Approve(hold) => {
                    for rule in hold.rules {
                        if !allowed.rules.contains(&rule) {
                            allowed.rules.push(rule);
                        }
                    }
                    allowed.add(hold.grant);
                }
                Evaluation::Allow(grant) => allowed.add(grant),
            }
        }
        Ok(allowed)
    }

    /// Each call an approve rule holds, in call order, with the index of its tool call in the
    /// body (`None`: the request itself, or a batch's other messages). Each is decided on its
    /// own; the request is sent only when every one is approved.
    pub(crate) fn holds(&self) -> Vec<CallHold> {
        let mut tool_calls = 0;
        let mut holds = Vec::new();
        for (tool, evaluation) in &self.calls {
            let call = tool.as_ref().map(|_| {
                tool_calls += 1;
                tool_calls - 1
            });
            if let Evaluation::Approve(hold) = evaluation {
                holds.push(CallHold {
                    tool: tool.clone(),
                    call,
                    rules: hold.rules.clone(),
                    timeout: hold.timeout,
                });
            }
        }
        holds
    }

    /// What the request waits for when no call is denied and some call is held for approval:
    /// every call's approve rules, the shortest of their timeouts, and what applies once
    /// approved (each call's grant, the held calls' included). `None` when a call is denied or
    /// none is held.
    pub(crate) fn held(&self) -> Option<Held> {
        if self.denial().is_some() {
            return None;
        }
        let mut rules: Vec<String> = Vec::new();
        let mut timeout = None;
        let mut allowed = Allowed {
            rules: Vec::new(),
            charges: Vec::new(),
            allow_private: true,
        };
        for (_, evaluation) in &self.calls {
            match evaluation {
                Evaluation::Approve(hold) => {
                    for rule in &hold.rules {
                        if !rules.contains(rule) {
                            rules.push(rule.clone());
                        }
                    }
                    timeout = Some(timeout.map_or(hold.timeout, |t: Duration| t.min(hold.timeout)));
                    allowed.add(hold.grant.clone());
                }
                Evaluation::Allow(grant) => allowed.add(grant.clone()),
                Evaluation::Deny(_) => return None,
            }
        }
        Some(Held {
            rules,
            timeout: timeout?,
            allowed,
        })
    }

    /// The first denied call's denial.
    fn denial(&self) -> Option<&evaluate::Denial> {
        self.calls
            .iter()
            .find_map(|(_, evaluation)| match evaluation {
                Evaluation::Deny(denial) => Some(denial),
                Evaluation::Allow(_) | Evaluation::Approve(_) => None,
            })
    }

    /// The audit record names one tool: a batch that would run several different tools is
    /// refused (MCP clients send one call per request; batching left the protocol in
    /// 2025-06-18). A batch with a denied tool is refused first, naming that tool.
    pub(crate) fn one_tool(&self) -> Result<(), ProxyError> {
        let mut tools = self.calls.iter().filter_map(|(tool, _)| tool.as_deref());
        let several_tools = tools
            .next()
            .is_some_and(|first| tools.any(|tool| tool != first));
        if several_tools {
            return Err(Invalid::Mcp(
                "a batch may call one tool only; send each tool call in its own request".to_owned(),
            )
            .into());
        }
        Ok(())
    }
}

/// [`Evaluated::allowed`]; a request that no allow or approve rule admits is refused naming the
/// one that came closest and why it does not match ([`CompiledPolicy::near_miss`]).
pub(crate) fn allowed_or_closest(
    evaluated: Evaluated,
    policy: &CompiledPolicy,
    agent: &str,
    method: &Method,
    target: &Target,
    uses: &[AliasUse],
) -> Result<Allowed, ProxyError> {
    let tool = evaluated.denied_tool().map(str::to_owned);
    evaluated.allowed().map_err(|error| match error {
        ProxyError::PolicyDenied {
            rules,
            reason,
            closest: None,
        } if reason != evaluate::DenyReason::DenyRule => {
            let closest = policy
                .near_miss(&evaluate::Request {
                    agent,
                    method: method.as_str(),
                    target,
                    aliases: uses,
                    tool: tool.as_deref(),
                })
                .map(Box::new);
            ProxyError::PolicyDenied {
                rules,
                reason,
                closest,
            }
        }
        other => other,
    })
}

/// One call an approve rule holds.
#[derive(Clone, Debug)]
pub(crate) struct CallHold {
    /// Its MCP tool, for a `tools/call`.
    pub(crate) tool: Option<String>,
    /// Which tool call of the body it is (0-based), for a `tools/call`.
    pub(crate) call: Option<usize>,
    /// The approve rules that hold it, in file order.
    pub(crate) rules: Vec<String>,
    /// How long it waits for a decision.
    pub(crate) timeout: Duration,
}

/// What a request held for approval waits for, all calls together (`mint policy explain`).
#[derive(Debug)]
pub(crate) struct Held {
    /// The approve rules of every call, each once, in call order.
    pub(crate) rules: Vec<String>,
    /// The shortest timeout of those rules.
    pub(crate) timeout: Duration,
    /// What applies once approved: the calls' grants (allow rules, charges, private addresses).
    pub(crate) allowed: Allowed,
}

/// What the policy allowed, before limits.
#[derive(Debug)]
pub(crate) struct Allowed {
    /// The admitting allow rules of every call, each once, in call order.
    pub(crate) rules: Vec<String>,
    /// What each call consumes.
    pub(crate) charges: Vec<Vec<Charge>>,
    /// Whether every call lets the target resolve to a private address.
    pub(crate) allow_private: bool,
}

// === impl Allowed ===

impl Allowed {
    /// Adds one call's grant: its allow rules (each once), charges and private-address answer.
    fn add(&mut self, grant: evaluate::Grant) {
        for rule in grant.rules {
            if !self.rules.contains(&rule) {
                self.rules.push(rule);
            }
        }
        self.charges.push(grant.charges);
        self.allow_private &= grant.allow_private;
    }
}

/// The body as a receiver reads it ([`mcp_call::decoded_body`]): decoded from its content
/// coding, or refused when Mint cannot examine it whole (an unknown coding or a list of them:
/// 415; gzip that inflates past the limit: 413), never passed on as "not a call".
pub(crate) fn decoded_body<'a>(
    headers: &HeaderMap,
    body: &'a [u8],
) -> Result<Cow<'a, [u8]>, ProxyError> {
    mcp_call::decoded_body(headers, body).map_err(mcp_error)
}

/// Refuses a content-encoded body whose decoded text (`decoded`, [`decoded_body`]) holds a
/// placeholder at a place its alias names ([`placeholder::live_in_encoded_body`]): 415
/// `encoded_body_placeholder`. Mint forwards such a body as it came and substitutes nothing in
/// it, so the placeholder would reach the upstream as text where the operator meant the secret.
pub(crate) fn check_encoded_body(
    headers: &HeaderMap,
    decoded: &[u8],
    places: &BodyPlaces,
    shaped: &ShapedPlaceholders,
) -> Result<(), ProxyError> {
    match placeholder::live_in_encoded_body(headers, decoded, places, shaped) {
        Some(alias) => Err(ProxyError::EncodedBodyPlaceholder { alias }),
        None => Ok(()),
    }
}

/// The tool names of an MCP `tools/call` body (empty when the request is not one), read strictly
/// from the decoded body ([`decoded_body`]); a body whose calls cannot be named is refused, and
/// so is an `Mcp-Name` header that names another tool ([`check_mcp_name`]).
pub(crate) fn mcp_tools(headers: &HeaderMap, decoded: &[u8]) -> Result<Vec<String>, ProxyError> {
    let tools: Vec<String> = mcp_call::examine(decoded)
        .map_err(mcp_error)?
        .names()
        .iter()
        .map(|name| name.as_str().to_owned())
        .collect();
    check_mcp_name(headers, &tools)?;
    Ok(tools)
}

fn mcp_error(error: mcp_call::McpCallError) -> ProxyError {
    use mcp_call::McpCallError;
    match error {
        McpCallError::BodyTooLarge { limit, .. } => ProxyError::BodyTooLarge {
            limit: limit as u64,
        },
        McpCallError::DecodedBodyTooLarge { limit } => ProxyError::DecodedBodyTooLarge {
            limit: limit as u64,
        },
        McpCallError::UnsupportedContentEncoding => ProxyError::UnsupportedContentEncoding,
        other => Invalid::Mcp(other.to_string()).into(),
    }
}

/// Refuses, before its body is read, a request the policy denies whatever the body holds
/// ([`CompiledPolicy::denial_for_any_call`]): `uses` are the aliases of the parts read so far
/// (target and headers). A body can only add tool calls and alias uses, so no body could turn
/// this denial into an allow; reading and scanning it would only cost memory. The denial names
/// the deny rules that match without the body (a tool-specific deny rule is not named, and the
/// record has no `mcp_tool`).
pub(crate) fn refuse_whatever_the_body(
    policy: &CompiledPolicy,
    agent: &str,
    method: &Method,
    target: &Target,
    uses: &[AliasUse],
) -> Result<(), ProxyError> {
    let request = evaluate::Request {
        agent,
        method: method.as_str(),
        target,
        aliases: uses,
        tool: None,
    };
    match policy.denial_for_any_call(&request) {
        Some(denial) => Err(ProxyError::PolicyDenied {
            rules: denial.rules,
            reason: denial.reason,
            closest: None,
        }),
        None => Ok(()),
    }
}

/// A server may route by the `Mcp-Name` header instead of the body: it must name the tool the
/// body calls, or the policy would have judged another tool than the one that runs. `Mcp_Name`
/// counts too ([`headers::reads_as`]: a PHP or CGI server reads both as one variable).
pub(crate) fn check_mcp_name(headers: &HeaderMap, tools: &[String]) -> Result<(), ProxyError> {
    if !tools.is_empty()
        && headers
            .iter()
            .filter(|(name, _)| super::headers::reads_as(name.as_str(), "mcp-name"))
            .any(|(_, value)| tools.iter().any(|tool| tool.as_bytes() != value.as_bytes()))
    {
        return Err(Invalid::Mcp(
            "the `Mcp-Name` header must name the tool the body calls".to_owned(),
        )
        .into());
    }
    Ok(())
}

/// The placeholders of the request as written (scheme and authority included, so that one there
/// is found, not parsed away), in the headers that are forwarded and in the body (live only at
/// the places `places` names; inert elsewhere), `{{mint:NAME}}` and the value-shaped ones of
/// `shaped` alike.
pub(crate) fn find_placeholders(
    raw: &RawTarget,
    headers: &HeaderMap,
    body: &[u8],
    places: &BodyPlaces,
    shaped: &ShapedPlaceholders,
) -> Result<Placeholders, ProxyError> {
    placeholder::scan(
        &RequestParts {
            scheme: &raw.scheme,
            authority: &raw.authority,
            path: &raw.path,
            query: raw.query.as_deref(),
            headers,
            body,
        },
        places,
        shaped,
    )
    .map_err(ProxyError::Placeholder)
}

/// Refuses a placeholder naming an undeclared alias (400), then one in a place no secret may go
/// (403).
pub(crate) fn check_placeholders(
    found: &Placeholders,
    aliases: &AliasFile,
) -> Result<(), ProxyError> {
    for alias in found.aliases() {
        if aliases.find(alias).is_none() {
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
    Ok(())
}

/// [`check_binding`] for every alias the request uses.
pub(crate) fn check_bindings(
    aliases: &AliasFile,
    target: &Target,
    uses: &[AliasUse],
) -> Result<(), ProxyError> {
    uses.iter()
        .try_for_each(|alias_use| check_binding(aliases, target, alias_use))
}

/// Checks one alias use against its declaration: the alias is declared, bound to the target's
/// host, and used only in sites it allows. The capability's alias narrowing is the caller's.
pub(crate) fn check_binding(
    aliases: &AliasFile,
    target: &Target,
    alias_use: &AliasUse,
) -> Result<(), ProxyError> {
    let Some(alias) = aliases.find(&alias_use.alias) else {
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
    Ok(())
}

/// Evaluates the request once per MCP tool it calls, and once without a tool when it calls none
/// or also holds other messages (`other_messages`). Every call is evaluated, even after a
/// denial, so that each can be reported; [`Evaluated::allowed`] decides.
pub(crate) fn evaluate_calls(
    policy: &CompiledPolicy,
    agent: &str,
    method: &Method,
    target: &Target,
    uses: &[AliasUse],
    tools: &[String],
    other_messages: bool,
) -> Evaluated {
    let mut calls: Vec<Option<&str>> = tools.iter().map(|t| Some(t.as_str())).collect();
    if other_messages {
        calls.push(None);
    }
    let calls = calls
        .into_iter()
        .map(|tool| {
            let evaluation = policy.evaluate(&evaluate::Request {
                agent,
                method: method.as_str(),
                target,
                aliases: uses,
                tool,
            });
            (tool.map(str::to_owned), evaluation)
        })
        .collect();
    Evaluated { calls }
}

/// The sites of a set, comma-separated, for messages.
pub(crate) fn sites_text(sites: SiteSet) -> String {
    sites
        .iter()
        .map(Site::as_str)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The JSON-RPC error code of a call Mint refused (server-defined range).
pub const JSONRPC_REFUSED: i64 = -32001;

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;

    #[test]
    fn a_raw_target_debug_never_shows_a_query_value() {
        let uri: Uri = "/v1/proxy/https/api.example.com/x?token=canary-rawtarget-5Kp2"
            .parse()
            .unwrap();
        let shown = format!("{:?}", RawTarget::from_route(&uri).unwrap());
        assert!(!shown.contains("canary-rawtarget"), "{shown}");
        assert!(shown.contains("api.example.com"), "{shown}");
    }
}
