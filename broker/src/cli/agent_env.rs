//! The environment an unmodified agent runs in behind Mint, shared by `mint run` and `mint env`:
//! the proxy variables (with a capability as the proxy password), the CA variables (a bundle of
//! the system roots plus Mint's CA, or the CA alone) and each alias's `env` names set to its
//! placeholder. Also the checks that a broker answers at the proxy URL, and that it accepts the
//! capability just issued.
//!
//! The one module of `cli/` besides `cap.rs` that reveals a capability token: into the proxy URL
//! of the variables it builds (which `mint run` passes to its child's environment only, and `mint
//! env` prints once) and into the `Mint-Capability` header of its acceptance probe to the broker.
//! It never logs one, and never puts one in an error or a process argument.

use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::time::Duration;

use mint_policy::aliases::{AliasFile, RESERVED_ENV_NAMES};
use secrecy::ExposeSecret;
use zeroize::Zeroizing;

use crate::capability::IssuedToken;
use crate::cli::alias::AliasCommandError;
use crate::cli::ca::CaCommandError;
use crate::cli::cap::CapCommandError;
use crate::config::ca_files::CaFileError;
use crate::config::env::{DEFAULT_LISTEN, MINT_PROXY_URL};
use crate::config::placeholder_key::PlaceholderKeyError;
use crate::config::secure_file::{PUBLIC_FILE_MODE, SecureFileError, write_atomic_mode};
use crate::secrets::placeholder::shaped::ShapedPlaceholders;

/// The proxy variables, all four spellings clients read.
pub const PROXY_VARIABLES: [&str; 4] = ["HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"];

/// The proxy exceptions: loopback only, so a client that talks to Mint's own routes or to a
/// local server goes there directly.
pub const NO_PROXY_VARIABLES: [&str; 2] = ["NO_PROXY", "no_proxy"];

/// What the proxy exceptions hold.
pub const NO_PROXY: &str = "localhost,127.0.0.1,::1";

/// Variables that *replace* a client's roots: they get the bundle (system roots plus Mint's CA).
pub const BUNDLE_VARIABLES: [&str; 6] = [
    "SSL_CERT_FILE",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "GIT_SSL_CAINFO",
    "AWS_CA_BUNDLE",
    "PIP_CERT",
];

/// Variables that *add* to a client's roots: they get Mint's CA alone.
pub const CA_VARIABLES: [&str; 2] = ["NODE_EXTRA_CA_CERTS", "DENO_CERT"];

/// Proxy variables `mint run` removes from its child's environment: a client that reads them
/// would route around the proxy Mint sets.
pub const REMOVED_VARIABLES: [&str; 2] = ["ALL_PROXY", "all_proxy"];

/// The agent name of a capability issued without `--agent`.
pub const DEFAULT_AGENT: &str = "agent";

/// How long a connection to the broker and each read may take at the start of `mint run`.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// The most of an answer the probes read.
const PROBE_MAX_BYTES: u64 = 64 * 1024;

/// Why the agent's environment could not be prepared. Never holds a token.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AgentEnvError {
    /// `--proxy` or `MINT_PROXY_URL` is not `http://HOST:PORT`.
    #[error(
        "invalid proxy URL `{url}`: write the broker's address as `http://HOST:PORT`, such as \
         `http://127.0.0.1:8700` (no user, path or query)"
    )]
    InvalidProxyUrl {
        /// The URL as given (an address, never a token: one with a user part is not repeated).
        url: String,
    },
    /// The proxy URL is not on this machine, and `--remote-proxy` was not given.
    #[error(
        "the proxy `{url}` is not on this machine: mint would send the capability token to it \
         (in clear text over plain HTTP); point --proxy or MINT_PROXY_URL at a broker on \
         loopback (127.0.0.1, ::1, localhost), or pass --remote-proxy to send it there anyway"
    )]
    RemoteProxy {
        /// The proxy URL.
        url: String,
    },
    /// Nothing answers at the proxy URL.
    #[error(
        "no Mint broker answers at {url} ({problem}); start one with `mint serve` (in another \
         terminal, or as a service), or point --proxy or MINT_PROXY_URL at a running broker"
    )]
    NoBroker {
        /// The proxy URL.
        url: String,
        /// What went wrong, in words.
        problem: String,
    },
    /// Something answers at the proxy URL, but not as Mint's `GET /healthz`.
    #[error(
        "the server at {url} is not a Mint broker (its `GET /healthz` is not Mint's answer); \
         point --proxy or MINT_PROXY_URL at `mint serve`"
    )]
    NotMint {
        /// The proxy URL.
        url: String,
    },
    /// The broker does not accept the capability just issued: it reads another capabilities
    /// file.
    #[error(
        "the broker at {url} refuses the capability just issued in `{}` (it was revoked \
         again): that broker serves another MINT_HOME; run this command with the broker's \
         MINT_HOME, or point --proxy at the broker of this one",
        file.display()
    )]
    NotAccepted {
        /// The proxy URL.
        url: String,
        /// The capabilities file the capability was written to.
        file: PathBuf,
    },
    /// The capability could not be issued.
    #[error(transparent)]
    Capability(#[from] CapCommandError),
    /// The alias file could not be read.
    #[error(transparent)]
    Aliases(#[from] AliasCommandError),
    /// Mint's CA could not be read.
    #[error(transparent)]
    Ca(#[from] CaFileError),
    /// The bundle could not be made (no system bundle).
    #[error(transparent)]
    Bundle(#[from] CaCommandError),
    /// The bundle or the CA could not be written.
    #[error(transparent)]
    Write(#[from] SecureFileError),
    /// The value-shaped placeholders could not be derived (the home's placeholder key).
    #[error(transparent)]
    PlaceholderKey(#[from] PlaceholderKeyError),
}

/// Where the broker listens, from `--proxy`, `MINT_PROXY_URL` or the default.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProxyTarget {
    /// `http://HOST:PORT`, as messages show it.
    pub url: String,
    /// `HOST:PORT` (an IPv6 address in brackets).
    pub authority: String,
    host: String,
    port: u16,
}

// === impl ProxyTarget ===

impl ProxyTarget {
    /// The target of `--proxy` when given, else of `MINT_PROXY_URL` (unless empty), else
    /// `http://127.0.0.1:8700`.
    pub fn resolve(arg: Option<&str>) -> Result<ProxyTarget, AgentEnvError> {
        let from_env = std::env::var(MINT_PROXY_URL).ok().filter(|v| !v.is_empty());
        match arg.map(str::to_owned).or(from_env) {
            Some(url) => ProxyTarget::parse(&url),
            None => ProxyTarget::parse(&format!("http://{DEFAULT_LISTEN}")),
        }
    }

    /// Parses `http://HOST[:PORT][/]`.
    pub fn parse(text: &str) -> Result<ProxyTarget, AgentEnvError> {
        let invalid = || AgentEnvError::InvalidProxyUrl {
            // A URL with a user part may carry a token: never repeat it.
            url: if text.contains('@') || text.len() > 256 {
                "…".to_owned()
            } else {
                text.to_owned()
            },
        };
        let uri: http::Uri = text.parse().map_err(|_| invalid())?;
        let authority = uri.authority().ok_or_else(invalid)?;
        let path_ok = matches!(uri.path(), "" | "/") && uri.query().is_none();
        if uri.scheme_str() != Some("http") || authority.as_str().contains('@') || !path_ok {
            return Err(invalid());
        }
        let host = authority.host();
        if host.is_empty() {
            return Err(invalid());
        }
        let port = authority.port_u16().unwrap_or(80);
        Ok(ProxyTarget {
            url: format!("http://{host}:{port}"),
            authority: format!("{host}:{port}"),
            host: host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_owned(),
            port,
        })
    }

    /// Whether the host is this machine: `localhost`, an address in 127.0.0.0/8, `::1`, or
    /// `::ffff:127.x.y.z`.
    pub fn is_loopback(&self) -> bool {
        if self.host.eq_ignore_ascii_case("localhost") {
            return true;
        }
        match self.host.parse::<std::net::IpAddr>() {
            Ok(std::net::IpAddr::V4(ip)) => ip.is_loopback(),
            Ok(std::net::IpAddr::V6(ip)) => {
                ip.is_loopback() || ip.to_ipv4_mapped().is_some_and(|ip| ip.is_loopback())
            }
            Err(_) => false,
        }
    }

    /// Refuses a broker off this machine unless `remote` (`--remote-proxy`): the probes and the
    /// agent would send the capability token there, and whatever answers `/healthz` like Mint
    /// there would get it.
    pub fn require_local(&self, remote: bool) -> Result<(), AgentEnvError> {
        if remote || self.is_loopback() {
            Ok(())
        } else {
            Err(AgentEnvError::RemoteProxy {
                url: self.url.clone(),
            })
        }
    }

    /// Checks that a Mint broker answers: `GET /healthz` (no capability needed) must be `200`
    /// with Mint's `{"status":"ok"}`.
    pub fn check_broker(&self) -> Result<(), AgentEnvError> {
        let (status, body) =
            self.get("/healthz", None)
                .map_err(|error| AgentEnvError::NoBroker {
                    url: self.url.clone(),
                    problem: describe(&error),
                })?;
        let is_mint = status == 200
            && serde_json::from_slice::<serde_json::Value>(&body)
                .is_ok_and(|json| json == serde_json::json!({"status": "ok"}));
        if is_mint {
            Ok(())
        } else {
            Err(AgentEnvError::NotMint {
                url: self.url.clone(),
            })
        }
    }

    /// Whether the broker accepts `token` now: `GET /v1/aliases` with it is `200` (no audit
    /// record, nothing forwarded). `Ok(false)` for its `401`: a broker sees a new capability
    /// within a second, so the caller asks again for a while.
    pub fn accepts(&self, token: &IssuedToken) -> Result<bool, AgentEnvError> {
        let mut header = Zeroizing::new(String::with_capacity(128));
        header.push_str("Mint-Capability: ");
        // EXPOSE: the capability goes to the broker that will check it, over the connection
        // the agent will use (loopback unless `--remote-proxy`); never logged.
        header.push_str(token.as_secret().expose_secret());
        let (status, _) =
            self.get("/v1/aliases", Some(&header))
                .map_err(|error| AgentEnvError::NoBroker {
                    url: self.url.clone(),
                    problem: describe(&error),
                })?;
        match status {
            200 => Ok(true),
            401 => Ok(false),
            _ => Err(AgentEnvError::NotMint {
                url: self.url.clone(),
            }),
        }
    }

    /// The proxy URL an agent's clients use: `http://AGENT:TOKEN@HOST:PORT` (the broker takes
    /// the token as the proxy password; the user name is only a label).
    pub fn url_for(&self, agent: &str, token: &IssuedToken) -> Zeroizing<String> {
        let mut url = Zeroizing::new(String::with_capacity(160));
        url.push_str("http://");
        url.push_str(agent);
        url.push(':');
        // EXPOSE: into the proxy variables of the agent this capability was issued for.
        url.push_str(token.as_secret().expose_secret());
        url.push('@');
        url.push_str(&self.authority);
        url
    }

    /// One `GET path` over a fresh connection: the status and the body (at most 64 KiB).
    fn get(&self, path: &str, header: Option<&str>) -> io::Result<(u16, Vec<u8>)> {
        let mut last = io::Error::new(io::ErrorKind::NotFound, "no address");
        let mut stream = None;
        for address in (self.host.as_str(), self.port).to_socket_addrs()? {
            match TcpStream::connect_timeout(&address, PROBE_TIMEOUT) {
                Ok(connected) => {
                    stream = Some(connected);
                    break;
                }
                Err(error) => last = error,
            }
        }
        let mut stream = stream.ok_or(last)?;
        stream.set_read_timeout(Some(PROBE_TIMEOUT))?;
        stream.set_write_timeout(Some(PROBE_TIMEOUT))?;
        let mut request = Zeroizing::new(format!(
            "GET {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n",
            self.authority
        ));
        if let Some(header) = header {
            request.push_str(header);
            request.push_str("\r\n");
        }
        request.push_str("\r\n");
        stream.write_all(request.as_bytes())?;
        let mut answer = Vec::new();
        stream.take(PROBE_MAX_BYTES).read_to_end(&mut answer)?;
        let head_end = answer
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "not HTTP"))?;
        let status = answer
            .strip_prefix(b"HTTP/1.1 ")
            .and_then(|rest| rest.get(..3))
            .and_then(|code| std::str::from_utf8(code).ok())
            .and_then(|code| code.parse().ok())
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "not HTTP"))?;
        Ok((status, answer.split_off(head_end + 4)))
    }
}

/// The variables an agent runs with, in the order they are set or printed. Values are zeroized
/// when dropped (the proxy URL holds the token).
#[derive(Default)]
pub struct AgentVariables {
    /// `(name, value)` pairs.
    pub vars: Vec<(&'static str, Zeroizing<String>)>,
    /// `(name, placeholder)` pairs of the aliases' `env` names.
    pub alias_vars: Vec<(String, String)>,
    /// The `env` names of aliases outside the capability's scope: removed, so that a key the
    /// operator's shell holds under that name never reaches the agent.
    pub removed: Vec<String>,
}

impl std::fmt::Debug for AgentVariables {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.vars.iter().map(|(name, _)| *name).collect();
        f.debug_struct("AgentVariables")
            .field("names", &names)
            .field("alias_vars", &self.alias_vars)
            .field("removed", &self.removed)
            .finish_non_exhaustive()
    }
}

// === impl AgentVariables ===

impl AgentVariables {
    /// The proxy variables set to `proxy_url`, the proxy exceptions, the bundle variables set to
    /// `bundle`, the CA variables set to `ca`, and for each alias in scope (`scope` empty: every
    /// alias) its `env` names set to its placeholder: its value-shaped one from `shaped` when it
    /// declares a shape, else `{{mint:NAME}}`.
    pub fn new(
        proxy_url: &Zeroizing<String>,
        bundle: &Path,
        ca: &Path,
        aliases: &AliasFile,
        shaped: &ShapedPlaceholders,
        scope: &[String],
    ) -> AgentVariables {
        let mut vars = Vec::new();
        for name in PROXY_VARIABLES {
            vars.push((name, proxy_url.clone()));
        }
        for name in NO_PROXY_VARIABLES {
            vars.push((name, Zeroizing::new(NO_PROXY.to_owned())));
        }
        for (names, path) in [(&BUNDLE_VARIABLES[..], bundle), (&CA_VARIABLES[..], ca)] {
            for name in names {
                vars.push((*name, Zeroizing::new(path.display().to_string())));
            }
        }
        let mut alias_vars = Vec::new();
        let mut removed = Vec::new();
        for alias in &aliases.aliases {
            let in_scope = scope.is_empty() || scope.contains(&alias.name);
            for name in &alias.env {
                if in_scope {
                    let placeholder = shaped
                        .value(&alias.name)
                        .map_or_else(|| format!("{{{{mint:{}}}}}", alias.name), str::to_owned);
                    alias_vars.push((name.clone(), placeholder));
                } else {
                    removed.push(name.clone());
                }
            }
        }
        AgentVariables {
            vars,
            alias_vars,
            removed,
        }
    }

    /// Every name to remove from an inherited environment: the proxy variables that would
    /// route around Mint, and the `env` names of aliases outside the scope.
    pub fn removed(&self) -> impl Iterator<Item = &str> {
        REMOVED_VARIABLES
            .iter()
            .copied()
            .chain(self.removed.iter().map(String::as_str))
    }

    /// Every `(name, value)`, the aliases' last.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.vars
            .iter()
            .map(|(name, value)| (*name, value.as_str()))
            .chain(
                self.alias_vars
                    .iter()
                    .map(|(name, value)| (name.as_str(), value.as_str())),
            )
    }
}

/// Writes the bundle Mint's clients trust to `path` (0644, atomically): the system roots, then
/// `cert` (Mint's CA, PEM). Fails when the machine has no system bundle.
pub fn write_bundle(path: &Path, cert: &str) -> Result<(), AgentEnvError> {
    let text = crate::cli::ca::bundle_text(cert)?;
    write_atomic_mode(path, text.as_bytes(), PUBLIC_FILE_MODE)?;
    Ok(())
}

/// Every variable name Mint sets itself (and removes) is reserved for aliases' `env`, so no
/// alias can ever override the proxy or a CA.
pub fn reserved_names_cover_mint_variables() -> bool {
    PROXY_VARIABLES
        .iter()
        .chain(&NO_PROXY_VARIABLES)
        .chain(&BUNDLE_VARIABLES)
        .chain(&CA_VARIABLES)
        .chain(&REMOVED_VARIABLES)
        .all(|name| RESERVED_ENV_NAMES.contains(name))
}

/// An I/O error in a few words for the one-line message.
fn describe(error: &io::Error) -> String {
    match error.kind() {
        io::ErrorKind::ConnectionRefused => "connection refused".to_owned(),
        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => "no answer in 2 s".to_owned(),
        io::ErrorKind::InvalidData => "the answer is not HTTP".to_owned(),
        _ => error.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proxy_urls() {
        let target = ProxyTarget::parse("http://127.0.0.1:8700").unwrap();
        assert_eq!(target.authority, "127.0.0.1:8700");
        assert_eq!(target.url, "http://127.0.0.1:8700");
        let target = ProxyTarget::parse("http://[::1]:9/").unwrap();
        assert_eq!(target.authority, "[::1]:9");
        assert_eq!(target.host, "::1");
        assert_eq!(ProxyTarget::parse("http://localhost").unwrap().port, 80);
        for bad in [
            "https://127.0.0.1:8700",
            "127.0.0.1:8700",
            "http://127.0.0.1:8700/v1",
            "http://127.0.0.1:8700/?a=b",
            "http://",
        ] {
            assert!(ProxyTarget::parse(bad).is_err(), "{bad}");
        }
        let secret = "mint_cap_0123_secretpart";
        let error = ProxyTarget::parse(&format!("http://a:{secret}@127.0.0.1:1")).unwrap_err();
        assert!(!error.to_string().contains(secret), "{error}");
    }

    #[test]
    fn only_loopback_brokers_get_the_token_without_remote_proxy() {
        for local in [
            "http://127.0.0.1:8700",
            "http://127.8.9.10:1",
            "http://[::1]:8700",
            "http://localhost:8700",
            "http://LocalHost:8700",
            "http://[::ffff:127.0.0.1]:8700",
        ] {
            let target = ProxyTarget::parse(local).unwrap();
            assert!(target.require_local(false).is_ok(), "{local}");
        }
        for remote in [
            "http://10.0.0.5:8700",
            "http://0.0.0.0:8700",
            "http://[::]:8700",
            "http://mint.example.test:8700",
            "http://localhost.example.test:8700",
            "http://[::ffff:10.0.0.1]:8700",
            "http://128.0.0.1:8700",
        ] {
            let target = ProxyTarget::parse(remote).unwrap();
            let error = target.require_local(false).unwrap_err().to_string();
            assert!(error.contains("--remote-proxy"), "{error}");
            assert!(error.contains(&target.url), "{error}");
            assert!(target.require_local(true).is_ok(), "{remote}");
        }
    }

    /// The proxy variables hold the capability token; no `{:?}` of the set may show it.
    #[test]
    fn debug_of_the_agent_variables_never_shows_the_token() {
        let canary = "mint_cap_0123456789ab_canaryAgentEnvTokenZq4Wx";
        let url = Zeroizing::new(format!("http://mino:{canary}@127.0.0.1:8700"));
        let aliases = AliasFile::default();
        let vars = AgentVariables::new(
            &url,
            Path::new("/tmp/bundle.pem"),
            Path::new("/tmp/ca.pem"),
            &aliases,
            &ShapedPlaceholders::default(),
            &[],
        );
        assert!(vars.iter().any(|(_, value)| value.contains(canary)));
        for shown in [format!("{vars:?}"), format!("{vars:#?}")] {
            assert!(!shown.contains("canaryAgentEnvToken"), "{shown}");
            assert!(shown.contains("HTTPS_PROXY"), "{shown}");
        }
    }

    #[test]
    fn every_variable_mint_sets_is_reserved_for_aliases() {
        assert!(reserved_names_cover_mint_variables());
        assert_eq!(
            RESERVED_ENV_NAMES.len(),
            PROXY_VARIABLES.len()
                + NO_PROXY_VARIABLES.len()
                + BUNDLE_VARIABLES.len()
                + CA_VARIABLES.len()
                + REMOVED_VARIABLES.len()
        );
    }
}
