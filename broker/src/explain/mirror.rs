//! Copies of the proxy's private request checks, so `mint policy explain` refuses what the proxy
//! refuses, in the same order and with the same errors.
//!
//! Each function mirrors one in `proxy.rs` or `proxy/headers.rs` that is private to the proxy
//! today; the copies go away once those are shared with the broker (`pub(crate)`, in a module
//! both can reach). Until then, a change to a check there must be made here too: the tests in
//! `explain/tests.rs` pin each copy's behaviour. Nothing here sees a secret, and no error names a
//! header value, a query value or a body.

use http::Method;
use http::header::{self, HeaderMap, HeaderName};
use mint_policy::aliases::AliasFile;
use mint_policy::evaluate::AliasUse;
use mint_policy::normalize::Target;
use mint_policy::site::{Site, SiteSet};

use crate::mcp_call;
use crate::placeholder::{self, Part, RequestParts};
use crate::proxy::{Invalid, ProxyError};

/// The target as written: scheme, authority, path and query, before canonicalization.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RawTarget {
    pub(crate) scheme: String,
    pub(crate) authority: String,
    pub(crate) path: String,
    pub(crate) query: Option<String>,
}

// === impl RawTarget ===

impl RawTarget {
    /// Splits `scheme://authority/path?query` the way the proxy's route splits
    /// `/v1/proxy/{scheme}/{authority}/{path}?{query}`: the authority ends at the first `/`, and
    /// the query starts at the first `?`. `None` when there is no `://`. A fragment stays in the
    /// path so that canonicalization refuses it.
    pub(crate) fn split(url: &str) -> Option<RawTarget> {
        let (scheme, rest) = url.split_once("://")?;
        let (before_query, query) = match rest.split_once('?') {
            Some((before, query)) => (before, Some(query.to_owned())),
            None => (rest, None),
        };
        let (authority, path) = match before_query.find('/') {
            Some(at) => before_query.split_at(at),
            None => (before_query, "/"),
        };
        Some(RawTarget {
            scheme: scheme.to_owned(),
            authority: authority.to_owned(),
            path: path.to_owned(),
            query,
        })
    }

    /// The path and query as `normalize_target` takes them.
    pub(crate) fn path_and_query(&self) -> String {
        match &self.query {
            Some(query) => format!("{}?{query}", self.path),
            None => self.path.clone(),
        }
    }
}

/// Mirrors `proxy::refuse_placeholder_in_target`: a placeholder in the scheme or authority as
/// written is refused (403) before the target is parsed.
pub(crate) fn refuse_placeholder_in_target(raw: &RawTarget) -> Result<(), ProxyError> {
    let empty = HeaderMap::new();
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

/// Mirrors `proxy::headers::check_method`.
pub(crate) fn check_method(method: &Method) -> Result<(), Invalid> {
    if method.as_str().bytes().any(|b| b.is_ascii_lowercase()) {
        return Err(Invalid::Method("the method must be uppercase, e.g. `GET`"));
    }
    Ok(())
}

/// Mirrors `proxy::headers::check_request`: ambiguous framing, upgrades, and method overrides
/// that differ from the method.
pub(crate) fn check_request(method: &Method, headers: &HeaderMap) -> Result<(), Invalid> {
    let lengths = headers.get_all(header::CONTENT_LENGTH).iter().count();
    if lengths > 1 {
        return Err(Invalid::Framing("several Content-Length headers"));
    }
    if lengths == 1 && headers.contains_key(header::TRANSFER_ENCODING) {
        return Err(Invalid::Framing(
            "Content-Length together with Transfer-Encoding",
        ));
    }
    if let Some(length) = headers.get(header::CONTENT_LENGTH)
        && (length.is_empty() || !length.as_bytes().iter().all(u8::is_ascii_digit))
    {
        return Err(Invalid::Framing(
            "Content-Length must be one decimal number",
        ));
    }
    if headers.get_all(header::HOST).iter().count() > 1 {
        return Err(Invalid::Framing("several Host headers"));
    }
    if headers.contains_key(header::UPGRADE) {
        return Err(Invalid::Header(
            "protocol upgrades (WebSocket, h2c) are not supported through Mint",
        ));
    }
    for name in METHOD_OVERRIDES {
        for value in headers.get_all(name) {
            if value.as_bytes() != method.as_str().as_bytes() {
                return Err(Invalid::Method(
                    "a method-override header must repeat the request's own method",
                ));
            }
        }
    }
    Ok(())
}

/// Mirrors `proxy::headers::check_override_params`: a `_method` parameter (in the query, or a
/// form body) that names another method than the request's is refused.
pub(crate) fn check_override_params(
    method: &Method,
    query: Option<&str>,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<(), Invalid> {
    let differs = |pairs: &[u8]| {
        pairs.split(|&b| b == b'&').any(|pair| {
            let mut halves = pair.splitn(2, |&b| b == b'=');
            let key = halves.next().unwrap_or_default();
            let value = halves.next().unwrap_or_default();
            let key = key.to_ascii_lowercase();
            (key == b"_method" || key == b"%5fmethod")
                && !value.eq_ignore_ascii_case(method.as_str().as_bytes())
        })
    };
    let form = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.trim_start()
                .to_ascii_lowercase()
                .starts_with("application/x-www-form-urlencoded")
        });
    if query.is_some_and(|q| differs(q.as_bytes())) || (form && differs(body)) {
        return Err(Invalid::Method(
            "a `_method` parameter must repeat the request's own method",
        ));
    }
    Ok(())
}

/// Mirrors `proxy::headers::strip_request`: what is never forwarded is never scanned either, so
/// a placeholder in `Mint-Capability` or a hop-by-hop header is dropped, not refused.
pub(crate) fn strip_request(headers: &mut HeaderMap) {
    let mut doomed: Vec<HeaderName> = Vec::new();
    for value in headers.get_all(header::CONNECTION) {
        let Ok(text) = value.to_str() else { continue };
        for token in text.split(',') {
            if let Ok(name) = HeaderName::from_bytes(token.trim().as_bytes()) {
                doomed.push(name);
            }
        }
    }
    for (name, _) in headers.iter() {
        let text = name.as_str();
        if text.starts_with("proxy-") || text.starts_with("mint-") || text == "keep-alive" {
            doomed.push(name.clone());
        }
    }
    doomed.extend(HOP_BY_HOP);
    doomed.extend([
        header::HOST,
        header::CONTENT_LENGTH,
        header::EXPECT,
        header::ACCEPT_ENCODING,
    ]);
    for name in doomed {
        headers.remove(name);
    }
}

/// Mirrors `proxy::mcp_tools`: the tool names of an MCP `tools/call` body, or the refusal.
pub(crate) fn mcp_tools(
    method: &Method,
    headers: &HeaderMap,
    body: &[u8],
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

/// Mirrors the `Mcp-Name` check of `proxy::forward`: a server may route by that header instead
/// of the body, so every `Mcp-Name` must name the tool the body calls.
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

/// Mirrors the message count of `proxy::JsonRpcIds::of`: the JSON-RPC messages of a body whose
/// calls `mcp_tools` named (every top-level JSON text, arrays expanded); `None` when the body
/// does not parse here, which counts as holding other messages.
pub(crate) fn message_count(body: &[u8]) -> Option<usize> {
    let mut messages = 0;
    for value in serde_json::Deserializer::from_slice(body).into_iter::<serde_json::Value>() {
        let value = value.ok()?;
        let elements = match value {
            serde_json::Value::Array(elements) => elements,
            other => vec![other],
        };
        messages += elements.iter().filter(|e| e.is_object()).count();
    }
    Some(messages)
}

/// Mirrors `proxy::check_aliases` without its last step (the capability's alias narrowing,
/// which explain cannot see): every alias used is declared, bound to the target's host, and in
/// sites it allows.
pub(crate) fn check_bindings(
    aliases: &AliasFile,
    target: &Target,
    uses: &[AliasUse],
) -> Result<(), ProxyError> {
    for alias_use in uses {
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
    }
    Ok(())
}

/// Mirrors `proxy::sites_text`.
pub(crate) fn sites_text(sites: SiteSet) -> String {
    sites
        .iter()
        .map(Site::as_str)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Mirrors `proxy::error::describe_part`.
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

/// Mirrors `proxy::headers::METHOD_OVERRIDES`.
const METHOD_OVERRIDES: [&str; 3] = [
    "x-http-method-override",
    "x-http-method",
    "x-method-override",
];

/// Mirrors `proxy::headers::HOP_BY_HOP`.
const HOP_BY_HOP: [HeaderName; 6] = [
    header::CONNECTION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
    header::PROXY_AUTHENTICATE,
];
