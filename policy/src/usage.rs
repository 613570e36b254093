//! How an agent uses Mint: the one source of the text behind the `mint_usage` MCP tool (as JSON)
//! and `mint usage` (as plain text), so the two can never disagree.
//!
//! Built from the proxy's listen address only; it is a fixed description of the route, the
//! capability header, the placeholder syntax and the read-only tools. It must never hold
//! credential material: no secret, no capability token, not even one shaped like a real one.

use std::fmt::Write as _;

use serde::Serialize;

/// The proxy's default listen address, used when the given one is not a plain `host:port`.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8700";

/// What `mint_usage` returns and `mint usage` prints.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Usage {
    /// The proxy route and its base URL.
    pub proxy_route: ProxyRoute,
    /// The request header that carries the capability: `Mint-Capability`.
    pub capability_header: &'static str,
    /// How a client configured with `HTTP_PROXY` authenticates.
    pub forward_proxy: ForwardProxy,
    /// The placeholder an agent writes where a secret belongs.
    pub placeholder: Placeholder,
    /// Where in a request a placeholder may sit.
    pub sites: Vec<SiteUsage>,
    /// The read-only MCP tools, exactly `alias_list`, `policy_check`, `audit_tail`, `mint_usage`.
    pub tools: [&'static str; 4],
    /// A complete request through the proxy, with no credential material.
    pub example: String,
    /// Rules the agent can rely on.
    pub notes: [&'static str; 6],
}

/// The authenticated route of the proxy.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ProxyRoute {
    /// The route relative to the base URL: `/v1/proxy/{scheme}/{authority}/{path}`.
    pub template: &'static str,
    /// The proxy's base URL, such as `http://127.0.0.1:8700`.
    pub base_url: String,
    /// Which upstream schemes the route accepts.
    pub schemes: &'static str,
}

/// Forward-proxy mode (`http_proxy` and `HTTP_PROXY`, `https_proxy` and `HTTPS_PROXY`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ForwardProxy {
    /// The value to give the proxy variables.
    pub proxy_url: String,
    /// The variables to set, both spellings: curl reads only the lowercase `http_proxy`.
    pub variables: [&'static str; 2],
    /// Why both spellings: what happens to a client that reads only the other one.
    pub variables_note: &'static str,
    /// The header that carries the capability in this mode.
    pub header: &'static str,
    /// What Mint does with an absolute-form request and with a `CONNECT`.
    pub note: &'static str,
}

/// The placeholder syntax.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Placeholder {
    /// As written in headers and JSON bodies: `{{mint:ALIAS}}`.
    pub syntax: &'static str,
    /// As written in a query string: `%7B%7Bmint%3AALIAS%7D%7D` (a placeholder in a path is
    /// refused).
    pub percent_encoded: &'static str,
    /// Which aliases exist and where they may go.
    pub note: &'static str,
    /// Value-shaped placeholders: what an alias's environment variable may hold instead.
    pub value_shaped: &'static str,
}

/// One place in a request where a placeholder may sit, and when.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SiteUsage {
    /// `header`, `query` or `body`.
    pub site: &'static str,
    /// When Mint substitutes a placeholder there.
    pub when: &'static str,
}

/// The usage description for a proxy listening on `listen` (such as `127.0.0.1:8700`).
/// An address holding anything but `[A-Za-z0-9.:[]-]`, or longer than 64 bytes, is replaced by
/// `DEFAULT_LISTEN` so the text stays one clean line per item.
pub fn usage(listen: &str) -> Usage {
    let plain = !listen.is_empty()
        && listen.len() <= 64
        && listen
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b':' | b'[' | b']' | b'-'));
    let listen = if plain { listen } else { DEFAULT_LISTEN };
    let base_url = format!("http://{listen}");
    Usage {
        proxy_route: ProxyRoute {
            template: ROUTE,
            base_url: base_url.clone(),
            schemes: "https upstreams; http only to loopback hosts",
        },
        capability_header: CAPABILITY_HEADER,
        forward_proxy: ForwardProxy {
            proxy_url: base_url.clone(),
            variables: PROXY_VARIABLES,
            variables_note: "set both spellings to the same proxy URL: curl reads only the \
                             lowercase http_proxy, so with only HTTP_PROXY set it bypasses Mint \
                             and sends the literal placeholder upstream, with no secret in it",
            header: "Proxy-Authorization: Bearer <capability>, or the capability as the proxy \
                     URL's password (http://agent:<capability>@HOST:PORT)",
            note: "write http:// URLs and Mint sends them upstream over https (plain http only \
                   to loopback hosts); for https:// URLs also set https_proxy and HTTPS_PROXY \
                   to the proxy URL with the capability as its password and trust Mint's CA \
                   (the operator's `mint ca export`): Mint intercepts the CONNECT tunnel and \
                   checks each request inside it the same way",
        },
        placeholder: Placeholder {
            syntax: "{{mint:ALIAS}}",
            percent_encoded: "%7B%7Bmint%3AALIAS%7D%7D",
            note: "alias_list shows the aliases and the hosts each is bound to; \
                   Mint substitutes a placeholder only toward those hosts",
            value_shaped: "an alias's environment variable (set by `mint run`) may hold a \
                           value-shaped placeholder instead: a random value shaped like a real \
                           key (such as sk-... or a JWT) that passes a client's format check; \
                           send it unchanged where the key goes and Mint treats it exactly as \
                           {{mint:ALIAS}}; it is not a secret",
        },
        sites: vec![
            SiteUsage {
                site: "header",
                when: "default: a placeholder in a request header value, written as is \
                       (percent-encoded in a header, it is refused)",
            },
            SiteUsage {
                site: "query",
                when: "only when the alias and the policy rule allow query",
            },
            SiteUsage {
                site: "body",
                when: "only at the JSON Pointers the alias names, as a JSON string value written \
                       as is, in a body sent as application/json (or +json), when the policy rule \
                       allows body; anywhere else in a body a placeholder is sent as text",
            },
        ],
        tools: TOOLS,
        example: format!(
            "curl -H \"{CAPABILITY_HEADER}: $MINT_CAPABILITY\" \
             -H 'Authorization: Bearer {{{{mint:github}}}}' \
             {base_url}/v1/proxy/https/api.github.com/user"
        ),
        notes: [
            "secrets never reach the agent: Mint substitutes them only after the capability, \
             the alias binding and the policy allow the request",
            "answers are scrubbed: a substituted secret comes back as [mint:redacted]",
            "redirects are returned, never followed",
            "an `unknown` outcome (Mint-Outcome: unknown) may have reached the upstream: \
             do not retry it automatically",
            "every answer carries Mint-Request-Id; Mint's own errors are JSON with a stable code",
            "the MCP server is read-only: it never resolves, returns or forwards a credential",
        ],
    }
}

// === impl Usage ===

impl Usage {
    /// The description as plain text for `mint usage`, ending with a newline.
    pub fn render_text(&self) -> String {
        let mut out = String::new();
        // Writing into a `String` cannot fail, so the results are ignored.
        let _ = writeln!(out, "Mint proxy");
        let _ = writeln!(
            out,
            "  route:          {}{}",
            self.proxy_route.base_url, self.proxy_route.template
        );
        let _ = writeln!(out, "  schemes:        {}", self.proxy_route.schemes);
        let _ = writeln!(
            out,
            "  capability:     {}: <capability>",
            self.capability_header
        );
        let [lower, upper] = self.forward_proxy.variables;
        let _ = writeln!(
            out,
            "  forward proxy:  {lower}={url} and {upper}={url} with {}",
            self.forward_proxy.header,
            url = self.forward_proxy.proxy_url,
        );
        let _ = writeln!(
            out,
            "                  ({})",
            self.forward_proxy.variables_note
        );
        let _ = writeln!(out, "                  ({})", self.forward_proxy.note);
        let _ = writeln!(out);
        let _ = writeln!(out, "Placeholders");
        let _ = writeln!(out, "  syntax:         {}", self.placeholder.syntax);
        let _ = writeln!(
            out,
            "  in queries:     {}",
            self.placeholder.percent_encoded
        );
        let _ = writeln!(out, "  aliases:        {}", self.placeholder.note);
        let _ = writeln!(out, "  value-shaped:   {}", self.placeholder.value_shaped);
        for site in &self.sites {
            let _ = writeln!(out, "  {:<16}{}", format!("{}:", site.site), site.when);
        }
        let _ = writeln!(out);
        let _ = writeln!(out, "Example");
        let _ = writeln!(out, "  {}", self.example);
        let _ = writeln!(out);
        let _ = writeln!(out, "MCP tools (read-only)");
        let _ = writeln!(out, "  {}", self.tools.join(", "));
        let _ = writeln!(out);
        let _ = writeln!(out, "Notes");
        for note in &self.notes {
            let _ = writeln!(out, "  - {note}");
        }
        out
    }
}

const ROUTE: &str = "/v1/proxy/{scheme}/{authority}/{path}";

const CAPABILITY_HEADER: &str = "Mint-Capability";

const PROXY_VARIABLES: [&str; 2] = ["http_proxy", "HTTP_PROXY"];

const TOOLS: [&str; 4] = ["alias_list", "policy_check", "audit_tail", "mint_usage"];

#[cfg(test)]
mod tests {
    use super::*;

    fn json(usage: &Usage) -> serde_json::Value {
        serde_json::to_value(usage).unwrap()
    }

    #[test]
    fn every_field_is_present() {
        let value = json(&usage("127.0.0.1:8700"));
        let object = value.as_object().unwrap();
        let keys: Vec<&str> = object.keys().map(String::as_str).collect();
        for key in [
            "proxy_route",
            "capability_header",
            "forward_proxy",
            "placeholder",
            "sites",
            "tools",
            "example",
            "notes",
        ] {
            assert!(keys.contains(&key), "missing {key}");
        }
        assert_eq!(object.len(), 8);
        assert_eq!(value["capability_header"], "Mint-Capability");
        assert_eq!(
            value["proxy_route"]["template"],
            "/v1/proxy/{scheme}/{authority}/{path}"
        );
        assert_eq!(value["proxy_route"]["base_url"], "http://127.0.0.1:8700");
        assert_eq!(value["placeholder"]["syntax"], "{{mint:ALIAS}}");
        assert!(
            value["placeholder"]["value_shaped"]
                .as_str()
                .unwrap()
                .contains("environment variable")
        );
        assert_eq!(
            value["placeholder"]["percent_encoded"],
            "%7B%7Bmint%3AALIAS%7D%7D"
        );
        assert_eq!(
            value["forward_proxy"]["header"],
            "Proxy-Authorization: Bearer <capability>, or the capability as the proxy URL's \
             password (http://agent:<capability>@HOST:PORT)"
        );
        let sites: Vec<&str> = value["sites"]
            .as_array()
            .unwrap()
            .iter()
            .map(|site| site["site"].as_str().unwrap())
            .collect();
        assert_eq!(sites, ["header", "query", "body"]);
    }

    #[test]
    fn the_four_tools_are_exact() {
        let value = json(&usage(DEFAULT_LISTEN));
        assert_eq!(
            value["tools"],
            serde_json::json!(["alias_list", "policy_check", "audit_tail", "mint_usage"])
        );
        let text = usage(DEFAULT_LISTEN).render_text();
        assert!(text.contains("alias_list, policy_check, audit_tail, mint_usage"));
    }

    #[test]
    fn the_example_uses_the_route_and_placeholders_only() {
        let usage = usage("127.0.0.1:9000");
        assert_eq!(
            usage.example,
            "curl -H \"Mint-Capability: $MINT_CAPABILITY\" \
             -H 'Authorization: Bearer {{mint:github}}' \
             http://127.0.0.1:9000/v1/proxy/https/api.github.com/user"
        );
        assert!(usage.render_text().contains(&usage.example));
    }

    #[test]
    fn no_token_like_material() {
        for listen in [DEFAULT_LISTEN, "[::1]:8700", "localhost:1"] {
            let usage = usage(listen);
            let texts = [usage.render_text(), serde_json::to_string(&usage).unwrap()];
            for text in texts {
                for (at, _) in text.match_indices("mint_cap_") {
                    let rest = &text[at + "mint_cap_".len()..];
                    assert!(rest.starts_with('<'), "token-like text in {text}");
                }
                assert!(!text.contains("ghp_"), "{text}");
                assert!(!text.to_ascii_lowercase().contains("bearer ey"), "{text}");
                for word in text.split(|c: char| !c.is_ascii_alphanumeric() && c != '_') {
                    assert!(word.len() < 32, "long opaque word `{word}` in {text}");
                }
            }
        }
    }

    #[test]
    fn odd_listen_addresses_fall_back_to_the_default() {
        for odd in [
            "",
            "127.0.0.1:8700\nX-Injected: 1",
            "host name:1",
            &"a".repeat(65),
        ] {
            assert_eq!(
                usage(odd).proxy_route.base_url,
                "http://127.0.0.1:8700",
                "{odd}"
            );
        }
        assert_eq!(
            usage("[::1]:8700").proxy_route.base_url,
            "http://[::1]:8700"
        );
    }

    #[test]
    fn the_text_names_every_part() {
        let text = usage(DEFAULT_LISTEN).render_text();
        for needle in [
            "http://127.0.0.1:8700/v1/proxy/{scheme}/{authority}/{path}",
            "Mint-Capability: <capability>",
            "http_proxy=http://127.0.0.1:8700 and HTTP_PROXY=http://127.0.0.1:8700 with \
             Proxy-Authorization: Bearer <capability>, or",
            "curl reads only the lowercase http_proxy",
            "bypasses Mint and sends the literal placeholder upstream",
            "Mint intercepts the CONNECT tunnel",
            "mint ca export",
            "{{mint:ALIAS}}",
            "%7B%7Bmint%3AALIAS%7D%7D",
            "value-shaped placeholder",
            "header:",
            "query:",
            "body:",
            "redirects are returned, never followed",
            "do not retry it automatically",
            "read-only",
        ] {
            assert!(text.contains(needle), "missing {needle} in\n{text}");
        }
        assert!(text.ends_with('\n'));
        assert!(!text.contains('\r'));
        assert!(!text.contains("CONNECT is refused"), "{text}");
    }

    #[test]
    fn issue_23_both_proxy_variable_spellings_are_named() {
        let value = json(&usage(DEFAULT_LISTEN));
        assert_eq!(
            value["forward_proxy"]["variables"],
            serde_json::json!(["http_proxy", "HTTP_PROXY"])
        );
        let note = value["forward_proxy"]["variables_note"].as_str().unwrap();
        assert!(
            note.contains("curl reads only the lowercase http_proxy"),
            "{note}"
        );
    }
}
