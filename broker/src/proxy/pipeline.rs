//! The request checks of steps 2 to 4 of the proxy's pipeline that need neither the connection,
//! the capability nor the limiter: the target as written, the MCP tool calls, the placeholders
//! against the alias declarations, and the policy's evaluation of each call.
//!
//! `forward` (in `proxy.rs`) calls them in the pipeline's order, and so does `mint policy
//! explain`, which is how it refuses what the proxy refuses, in the same order and with the same
//! errors. Pure: no I/O and no state. Never sees a secret value, and no error names a header
//! value, a query value or a body.

use http::header::{self, HeaderMap};
use http::{Method, Uri};
use mint_policy::aliases::AliasFile;
use mint_policy::evaluate::{self, AliasUse, CompiledPolicy, Evaluation};
use mint_policy::limits::Charge;
use mint_policy::normalize::{Target, normalize_target};
use mint_policy::site::{Site, SiteSet};

use super::error::{Invalid, ProxyError, describe_part};
use super::single_header;
use crate::audit::facts::TargetFacts;
use crate::mcp_call;
use crate::placeholder::{self, Place, Placeholders, RequestParts};

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
    pub(crate) fn canonicalize(&self) -> Result<(Target, TargetFacts), ProxyError> {
        let empty = HeaderMap::new();
        let found = placeholder::scan(&RequestParts {
            scheme: &self.scheme,
            authority: &self.authority,
            path: "/",
            query: None,
            headers: &empty,
            body: &[],
        })
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

    fn path_and_query(&self) -> String {
        match &self.query {
            Some(query) => format!("{}?{query}", self.path),
            None => self.path.clone(),
        }
    }
}

/// The ids of a JSON-RPC request or batch, for error answers.
#[derive(Debug)]
pub(crate) struct JsonRpcIds {
    batch: bool,
    ids: Vec<serde_json::Value>,
    /// How many messages the body holds; `None` when it could not be counted.
    messages: Option<usize>,
}

// === impl JsonRpcIds ===

impl JsonRpcIds {
    /// The ids of the messages of `body` (already checked strictly by `mcp_call`): every
    /// top-level JSON text, arrays expanded (JSON Lines included). A body that does not parse
    /// here (gzip, a byte order mark) gives no ids and counts as holding other messages.
    pub(crate) fn of(body: &[u8]) -> JsonRpcIds {
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

    /// Whether the body holds messages besides its `calls` tool calls: the endpoint's own
    /// traffic, evaluated without a tool. A body that could not be counted does.
    pub(crate) fn holds_other_messages(&self, calls: usize) -> bool {
        self.messages.is_none_or(|count| count > calls)
    }

    /// A JSON-RPC error answer per request id (`-32001`, Mint's error object in `data`).
    pub(crate) fn error_body(&self, error: &ProxyError, request_id: &str) -> String {
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
    /// The tool of the first denied call, when that call is a tool's: the audit record names the
    /// tool that was refused, not the batch's first.
    pub(crate) fn denied_tool(&self) -> Option<&str> {
        self.calls
            .iter()
            .find(|(_, evaluation)| matches!(evaluation, Evaluation::Deny(_)))
            .and_then(|(tool, _)| tool.as_deref())
    }

    /// The request is allowed only if every call is (the first denial is the refusal), and only
    /// if it calls one tool at most.
    pub(crate) fn allowed(self) -> Result<Allowed, ProxyError> {
        let mut tools = self.calls.iter().filter_map(|(tool, _)| tool.as_deref());
        let several_tools = tools
            .next()
            .is_some_and(|first| tools.any(|tool| tool != first));
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
                    });
                }
                Evaluation::Allow(grant) => {
                    for rule in grant.rules {
                        if !allowed.rules.contains(&rule) {
                            allowed.rules.push(rule);
                        }
                    }
                    allowed.charges.push(grant.charges);
                    allowed.allow_private &= grant.allow_private;
                }
            }
        }
        // The audit record names one tool: a batch that would run several different tools is
        // refused (MCP clients send one call per request; batching left the protocol in
        // 2025-06-18). A batch with a denied tool was refused above, naming that tool.
        if several_tools {
            return Err(Invalid::Mcp(
                "a batch may call one tool only; send each tool call in its own request".to_owned(),
            )
            .into());
        }
        Ok(allowed)
    }
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

/// The tool names of an MCP `tools/call` body (empty when the request is not one), read strictly
/// from the body as received; a body whose calls cannot be named is refused, and so is an
/// `Mcp-Name` header that names another tool ([`check_mcp_name`]).
pub(crate) fn mcp_tools(
    method: &Method,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Vec<String>, ProxyError> {
    let tools: Vec<String> = match mcp_call::tool_calls(method, headers, body) {
        Ok(calls) => calls
            .names()
            .iter()
            .map(|name| name.as_str().to_owned())
            .collect(),
        Err(error) if error.code() == "body_too_large" => {
            return Err(ProxyError::BodyTooLarge {
                limit: mcp_call::MAX_MCP_MESSAGE_BYTES as u64,
            });
        }
        Err(error) => return Err(Invalid::Mcp(error.to_string()).into()),
    };
    check_mcp_name(headers, &tools)?;
    Ok(tools)
}

/// A server may route by the `Mcp-Name` header instead of the body: it must name the tool the
/// body calls, or the policy would have judged another tool than the one that runs.
pub(crate) fn check_mcp_name(headers: &HeaderMap, tools: &[String]) -> Result<(), ProxyError> {
    if !tools.is_empty()
        && headers
            .get_all("mcp-name")
            .iter()
            .any(|value| tools.iter().any(|tool| tool.as_bytes() != value.as_bytes()))
    {
        return Err(Invalid::Mcp(
            "the `Mcp-Name` header must name the tool the body calls".to_owned(),
        )
        .into());
    }
    Ok(())
}

/// The placeholders of the request as written (scheme and authority included, so that one there
/// is found, not parsed away), in the headers that are forwarded and in the body.
pub(crate) fn find_placeholders(
    raw: &RawTarget,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Placeholders, ProxyError> {
    placeholder::scan(&RequestParts {
        scheme: &raw.scheme,
        authority: &raw.authority,
        path: &raw.path,
        query: raw.query.as_deref(),
        headers,
        body,
    })
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
