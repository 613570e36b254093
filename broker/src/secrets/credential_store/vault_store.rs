//! The `vault:MOUNT/PATH#KEY` source: one field of an OpenBao or HashiCorp Vault KV version 2
//! secret, read over HTTPS with the broker's own upstream client (hyper and rustls,
//! `net::upstream`), never on a request's path: at start, on reload, and in the background when
//! the value's cache time runs out (`config::refresh`).
//!
//! The server, namespace, authentication, CA, cache time and staleness bound are the broker's
//! settings ([`VaultConfig`], from `MINT_VAULT_*` variables). Authentication is a token file
//! (read again before every request, so an external agent may renew or replace it) or AppRole:
//! the role id and secret id are read from owner-only files, and the token the login returns is
//! renewed (`renew-self`) once two thirds of its lease have passed, or replaced by a new login
//! when it cannot be. A `403` from the server is one fresh login and one more try at most, then
//! a refusal ([`StoreError::Refused`]) that the refresher does not retry before the next reload.
//!
//! Tokens, the secret id and values exist only in `secrecy` types and wiped buffers on Mint's
//! side; a header carrying the token is marked sensitive. No error or log line holds a token, a
//! secret or a response body: errors name the server, the path and the HTTP status.
//! `expose_secret()` is called here to put the token in a header and the AppRole ids in the
//! login body, each commented.

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderValue, Method, Request, StatusCode, Uri};
use http_body_util::{BodyExt, Full, Limited};
use mint_policy::aliases::VaultRef;
use mint_policy::duration::{DURATION_HINT, parse_duration};
use mint_policy::host::Host;
use secrecy::{ExposeSecret, SecretString};
use zeroize::Zeroizing;

use super::{CredentialStore, CredentialValue, FileStore, Lifetime, StoreError};
use crate::config::env::{
    MINT_UPSTREAM_CA, MINT_VAULT_ADDR, MINT_VAULT_APPROLE_MOUNT, MINT_VAULT_CA_FILE,
    MINT_VAULT_CACHE, MINT_VAULT_MAX_STALE, MINT_VAULT_NAMESPACE, MINT_VAULT_ROLE_ID_FILE,
    MINT_VAULT_SECRET_ID_FILE, MINT_VAULT_TOKEN_FILE,
};
use crate::net::tls::{TlsConfigError, upstream_client_config};
use crate::net::upstream::UpstreamClient;

/// The default cache time of Vault values.
pub const DEFAULT_CACHE: Duration = Duration::from_secs(300);
/// The default staleness bound past the cache time.
pub const DEFAULT_MAX_STALE: Duration = Duration::from_secs(900);
/// How long one request to the server may take, connecting included.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest answer read from the server.
const MAX_ANSWER_BYTES: usize = 1 << 20;

/// The broker's Vault settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VaultConfig {
    /// `https://host:port` (plain `http` only to a loopback address).
    pub addr: String,
    /// The namespace (`X-Vault-Namespace`), if any.
    pub namespace: Option<String>,
    /// How Mint logs in.
    pub auth: VaultAuth,
    /// The CA certificates that verify the server (else the upstream trust: web roots plus
    /// `--upstream-ca`).
    pub ca_file: Option<PathBuf>,
    /// How long a value is used before it is read again.
    pub cache: Duration,
    /// How long past the cache time the last value serves while the server cannot be read.
    pub max_stale: Duration,
}

/// How Mint authenticates to Vault.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VaultAuth {
    /// A token in an owner-only file, read before every request.
    TokenFile(PathBuf),
    /// AppRole: the role id and secret id in owner-only files, the auth method at `mount`.
    AppRole {
        /// The role id's file.
        role_id_file: PathBuf,
        /// The secret id's file.
        secret_id_file: PathBuf,
        /// The AppRole auth method's mount, `approle` by default.
        mount: String,
    },
}

/// Why the Vault settings are unusable. Names the variable, never a value read through it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum VaultConfigError {
    /// The address is not `https://host[:port]` (or `http://` to loopback).
    #[error(
        "{MINT_VAULT_ADDR} must be `https://HOST[:PORT]` (plain `http://` only to a loopback address), with no path"
    )]
    Addr,
    /// Neither or both ways to log in.
    #[error(
        "set {MINT_VAULT_TOKEN_FILE}, or {MINT_VAULT_ROLE_ID_FILE} and {MINT_VAULT_SECRET_ID_FILE} (AppRole), not both"
    )]
    Auth,
    /// A path that is not absolute.
    #[error("{0} must be an absolute path")]
    RelativePath(&'static str),
    /// A namespace or AppRole mount outside `[A-Za-z0-9/_.-]`.
    #[error("{0} holds characters other than letters, digits, `/`, `_`, `.` and `-`")]
    Name(&'static str),
    /// A bad duration.
    #[error("{0} is {DURATION_HINT}")]
    Duration(&'static str),
    /// A `MINT_VAULT_*` variable is set while `MINT_VAULT_ADDR` is not.
    #[error("{0} is set but {MINT_VAULT_ADDR} is not; set the server's address")]
    NoAddr(&'static str),
    /// The CA file.
    #[error(transparent)]
    Tls(#[from] TlsConfigError),
    /// The runtime that drives the client.
    #[error("cannot start the Vault client's runtime")]
    Runtime(#[source] std::io::Error),
}

/// Reads KV v2 secrets from one server. Holds the current token (AppRole) between reads.
pub struct VaultStore {
    config: VaultConfig,
    client: UpstreamClient,
    /// Drives the client; shut down in the background on drop, since the store may be dropped on
    /// an async thread. `None` only while dropping.
    runtime: Option<tokio::runtime::Runtime>,
    files: FileStore,
    token: Mutex<Option<Token>>,
}

/// A token from an AppRole login, and when to renew it.
struct Token {
    value: SecretString,
    renew_at: Option<Instant>,
    renewable: bool,
}

/// The server's answer to one request.
enum Answer {
    /// A 2xx with its JSON body (in a wiped buffer).
    Ok(Zeroizing<Vec<u8>>),
    /// Another status.
    Status(StatusCode),
}

// === impl VaultConfig ===

impl VaultConfig {
    /// The settings from this process's environment; `None` when `MINT_VAULT_ADDR` is unset.
    pub fn from_env() -> Result<Option<VaultConfig>, VaultConfigError> {
        VaultConfig::resolve(|name| std::env::var_os(name))
    }

    /// The settings as `lookup` answers the variables (an empty value counts as unset).
    pub fn resolve(
        lookup: impl Fn(&str) -> Option<OsString>,
    ) -> Result<Option<VaultConfig>, VaultConfigError> {
        let var = |name: &str| {
            lookup(name)
                .filter(|v| !v.is_empty())
                .map(|v| v.to_string_lossy().into_owned())
        };
        let path = |name: &'static str| -> Result<Option<PathBuf>, VaultConfigError> {
            match var(name) {
                None => Ok(None),
                Some(p) if Path::new(&p).is_absolute() => Ok(Some(PathBuf::from(p))),
                Some(_) => Err(VaultConfigError::RelativePath(name)),
            }
        };
        let Some(addr) = var(MINT_VAULT_ADDR) else {
            for name in [
                MINT_VAULT_TOKEN_FILE,
                MINT_VAULT_ROLE_ID_FILE,
                MINT_VAULT_SECRET_ID_FILE,
                MINT_VAULT_NAMESPACE,
                MINT_VAULT_CA_FILE,
            ] {
                if var(name).is_some() {
                    return Err(VaultConfigError::NoAddr(name));
                }
            }
            return Ok(None);
        };
        let addr = check_addr(&addr).ok_or(VaultConfigError::Addr)?;
        let name_ok = |s: &str| {
            !s.is_empty()
                && s.len() <= 256
                && s.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'/' | b'_' | b'.' | b'-'))
        };
        let namespace = var(MINT_VAULT_NAMESPACE);
        if namespace.as_deref().is_some_and(|n| !name_ok(n)) {
            return Err(VaultConfigError::Name(MINT_VAULT_NAMESPACE));
        }
        let mount = var(MINT_VAULT_APPROLE_MOUNT).unwrap_or_else(|| "approle".to_owned());
        if !name_ok(&mount) {
            return Err(VaultConfigError::Name(MINT_VAULT_APPROLE_MOUNT));
        }
        let auth = match (
            path(MINT_VAULT_TOKEN_FILE)?,
            path(MINT_VAULT_ROLE_ID_FILE)?,
            path(MINT_VAULT_SECRET_ID_FILE)?,
        ) {
            (Some(token), None, None) => VaultAuth::TokenFile(token),
            (None, Some(role_id_file), Some(secret_id_file)) => VaultAuth::AppRole {
                role_id_file,
                secret_id_file,
                mount,
            },
            _ => return Err(VaultConfigError::Auth),
        };
        let duration = |name: &'static str, default: Duration| match var(name) {
            None => Ok(default),
            Some(text) => parse_duration(&text).ok_or(VaultConfigError::Duration(name)),
        };
        Ok(Some(VaultConfig {
            addr,
            namespace,
            auth,
            ca_file: path(MINT_VAULT_CA_FILE)?,
            cache: duration(MINT_VAULT_CACHE, DEFAULT_CACHE)?,
            max_stale: duration(MINT_VAULT_MAX_STALE, DEFAULT_MAX_STALE)?,
        }))
    }

    /// How long values are used.
    pub fn lifetime(&self) -> Lifetime {
        Lifetime {
            cache: self.cache,
            max_stale: self.max_stale,
        }
    }
}

/// `https://host[:port]` (or `http://` to loopback) without a path, normalised; `None` if not.
fn check_addr(text: &str) -> Option<String> {
    let uri: Uri = text.parse().ok()?;
    let scheme = uri.scheme_str()?;
    let authority = uri.authority()?;
    if authority.as_str().contains('@') || uri.query().is_some() {
        return None;
    }
    if !matches!(uri.path(), "" | "/") {
        return None;
    }
    let host = Host::parse_request(
        authority
            .host()
            .trim_start_matches('[')
            .trim_end_matches(']'),
    )
    .ok()?;
    match scheme {
        "https" => {}
        "http" if host.is_loopback() => {}
        _ => return None,
    }
    Some(format!("{scheme}://{authority}"))
}

// === impl VaultStore ===

impl VaultStore {
    /// A store for `config`, verifying the server with its CA file, else with the web roots and
    /// `upstream_ca` (the broker's `--upstream-ca`).
    pub fn new(
        config: VaultConfig,
        upstream_ca: Option<&Path>,
    ) -> Result<VaultStore, VaultConfigError> {
        let tls = match &config.ca_file {
            Some(file) => upstream_client_config(Some(file), None)?,
            None => upstream_client_config(upstream_ca, None)?,
        };
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("mint-vault")
            .enable_all()
            .build()
            .map_err(VaultConfigError::Runtime)?;
        let client = {
            let _entered = runtime.enter();
            UpstreamClient::new(tls, REQUEST_TIMEOUT)
        };
        Ok(VaultStore {
            config,
            client,
            runtime: Some(runtime),
            files: FileStore::new(),
            token: Mutex::new(None),
        })
    }

    /// The store from the environment (`MINT_VAULT_*`, and `MINT_UPSTREAM_CA` for the trust
    /// when no CA file is set): what the CLI's commands use.
    pub fn from_env() -> Result<Option<VaultStore>, VaultConfigError> {
        let upstream_ca = std::env::var_os(MINT_UPSTREAM_CA)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from);
        VaultConfig::from_env()?
            .map(|config| VaultStore::new(config, upstream_ca.as_deref()))
            .transpose()
    }

    /// The settings.
    pub fn config(&self) -> &VaultConfig {
        &self.config
    }

    /// Reads the field `reference` names. Blocking (up to [`REQUEST_TIMEOUT`] per request);
    /// call it off the async threads.
    pub fn read(&self, reference: &VaultRef) -> Result<CredentialValue, StoreError> {
        let mut token = self.token.lock().unwrap_or_else(PoisonError::into_inner);
        let first = self.read_with(&mut token, reference);
        match (&self.config.auth, first) {
            // The token may have been revoked or have expired early: one fresh login, one more
            // try, never a loop.
            (VaultAuth::AppRole { .. }, Err(StoreError::Refused { .. })) => {
                *token = None;
                self.read_with(&mut token, reference)
            }
            (_, result) => result,
        }
    }

    fn read_with(
        &self,
        token: &mut Option<Token>,
        reference: &VaultRef,
    ) -> Result<CredentialValue, StoreError> {
        let current = self.current_token(token)?;
        let mut path = format!(
            "/v1/{}/data/{}",
            reference.mount,
            reference.path.trim_matches('/')
        );
        if let Some(version) = reference.version {
            path.push_str(&format!("?version={version}"));
        }
        let what = format!("`{}/{}`", reference.mount, reference.path);
        match self.send(Method::GET, &path, Some(&current), None)? {
            Answer::Ok(body) => field_of(&body, reference),
            Answer::Status(StatusCode::FORBIDDEN) => Err(StoreError::Refused {
                reason: format!(
                    "{} answered 403: the token may not read {what} (check the policy of Mint's \
                     token or role)",
                    self.config.addr
                ),
            }),
            Answer::Status(StatusCode::NOT_FOUND) => Err(StoreError::Missing),
            Answer::Status(status) => Err(StoreError::Unavailable {
                reason: format!(
                    "{} answered HTTP {} reading {what}",
                    self.config.addr,
                    status.as_u16()
                ),
            }),
        }
    }

    /// The token to use now: the token file's content, or the AppRole token, logging in or
    /// renewing it first when due.
    fn current_token(&self, token: &mut Option<Token>) -> Result<SecretString, StoreError> {
        let (role_id_file, secret_id_file, mount) = match &self.config.auth {
            VaultAuth::TokenFile(file) => {
                let value = self.files.read(&file.to_string_lossy())?;
                return Ok(value.as_secret().clone());
            }
            VaultAuth::AppRole {
                role_id_file,
                secret_id_file,
                mount,
            } => (role_id_file, secret_id_file, mount),
        };
        if let Some(held) = token.as_mut()
            && let Some(renew_at) = held.renew_at
            && Instant::now() >= renew_at
        {
            let renewed = held.renewable && self.renew(held).is_ok();
            if !renewed {
                *token = None;
            }
        }
        if let Some(held) = token.as_ref() {
            return Ok(held.value.clone());
        }
        let role_id = self.files.read(&role_id_file.to_string_lossy())?;
        let secret_id = self.files.read(&secret_id_file.to_string_lossy())?;
        // EXPOSE: the ids go into the login body, a wiped buffer; serde_json escapes them.
        let body = login_body(
            role_id.as_secret().expose_secret(),
            secret_id.as_secret().expose_secret(),
        );
        let login = self.send(
            Method::POST,
            &format!("/v1/auth/{mount}/login"),
            None,
            Some(body),
        )?;
        let fresh = match login {
            Answer::Ok(answer) => token_of(&answer).ok_or_else(|| StoreError::Unavailable {
                reason: format!(
                    "{} answered the AppRole login without a token",
                    self.config.addr
                ),
            })?,
            Answer::Status(status @ (StatusCode::BAD_REQUEST | StatusCode::FORBIDDEN)) => {
                return Err(StoreError::Refused {
                    reason: format!(
                        "{} refused the AppRole login (HTTP {}): check the role id and secret id \
                         files and that the secret id has not expired or run out of uses",
                        self.config.addr,
                        status.as_u16()
                    ),
                });
            }
            Answer::Status(status) => {
                return Err(StoreError::Unavailable {
                    reason: format!(
                        "{} answered HTTP {} to the AppRole login",
                        self.config.addr,
                        status.as_u16()
                    ),
                });
            }
        };
        tracing::debug!(vault.addr = %self.config.addr, "Logged in to Vault with AppRole");
        let value = fresh.value.clone();
        *token = Some(fresh);
        Ok(value)
    }

    /// Renews `held` in place (`auth/token/renew-self`).
    fn renew(&self, held: &mut Token) -> Result<(), StoreError> {
        let body = Zeroizing::new(b"{}".to_vec());
        match self.send(
            Method::POST,
            "/v1/auth/token/renew-self",
            Some(&held.value),
            Some(body),
        )? {
            Answer::Ok(answer) => {
                let renewed = token_of(&answer).ok_or_else(|| StoreError::Unavailable {
                    reason: "the token renewal answer holds no lease".to_owned(),
                })?;
                held.renew_at = renewed.renew_at;
                held.renewable = renewed.renewable;
                tracing::debug!(vault.addr = %self.config.addr, "Renewed the Vault token");
                Ok(())
            }
            Answer::Status(status) => Err(StoreError::Unavailable {
                reason: format!("token renewal answered HTTP {}", status.as_u16()),
            }),
        }
    }

    /// Sends one request and reads the whole answer (bounded), within [`REQUEST_TIMEOUT`].
    fn send(
        &self,
        method: Method,
        path_and_query: &str,
        token: Option<&SecretString>,
        body: Option<Zeroizing<Vec<u8>>>,
    ) -> Result<Answer, StoreError> {
        let unreachable = |why: &str| StoreError::Unavailable {
            reason: format!("cannot reach {}: {why}", self.config.addr),
        };
        let uri: Uri = format!("{}{path_and_query}", self.config.addr)
            .parse()
            .map_err(|_| unreachable("the request path is not a valid URL"))?;
        let has_body = body.is_some();
        // The body (the AppRole ids) is wiped when hyper drops it.
        let mut request = Request::new(Full::new(
            body.map(|b| Bytes::from_owner(WipedBody(b)))
                .unwrap_or_default(),
        ));
        *request.method_mut() = method;
        *request.uri_mut() = uri;
        let headers = request.headers_mut();
        headers.insert("x-vault-request", HeaderValue::from_static("true"));
        if has_body {
            headers.insert(
                http::header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
        }
        if let Some(namespace) = &self.config.namespace
            && let Ok(value) = HeaderValue::from_str(namespace)
        {
            headers.insert("x-vault-namespace", value);
        }
        if let Some(token) = token {
            // EXPOSE: the token goes into its header, marked sensitive.
            let mut value = HeaderValue::from_str(token.expose_secret())
                .map_err(|_| unreachable("the token holds characters a header cannot carry"))?;
            value.set_sensitive(true);
            headers.insert("x-vault-token", value);
        }
        let Some(runtime) = &self.runtime else {
            return Err(unreachable("the client is shutting down"));
        };
        let client = &self.client;
        let answer = runtime.block_on(async {
            let exchange = async {
                let response = client
                    .send(request, true)
                    .await
                    .map_err(|e| unreachable(&client_error(&e)))?;
                let status = response.status();
                if !status.is_success() {
                    return Ok(Answer::Status(status));
                }
                let collected = Limited::new(response.into_body(), MAX_ANSWER_BYTES)
                    .collect()
                    .await
                    .map_err(|_| unreachable("the answer was cut off or is larger than 1 MiB"))?;
                Ok(Answer::Ok(Zeroizing::new(collected.to_bytes().to_vec())))
            };
            tokio::time::timeout(REQUEST_TIMEOUT, exchange)
                .await
                .unwrap_or_else(|_| Err(unreachable("no answer within 10 s")))
        });
        // The path names a secret or an auth method, never a value; the status, never a body.
        match &answer {
            Ok(Answer::Ok(_)) => {
                tracing::debug!(vault.path = %path_and_query, http.status = 200, "Vault answered");
            }
            Ok(Answer::Status(status)) => {
                tracing::debug!(vault.path = %path_and_query, http.status = status.as_u16(), "Vault answered");
            }
            Err(_) => tracing::debug!(vault.path = %path_and_query, "Vault did not answer"),
        }
        answer
    }
}

/// A request body that is wiped when the last `Bytes` pointing at it is dropped.
struct WipedBody(Zeroizing<Vec<u8>>);

impl AsRef<[u8]> for WipedBody {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl Drop for VaultStore {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl fmt::Debug for VaultStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VaultStore")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// What a client error says, without anything the server sent.
fn client_error(error: &hyper_util::client::legacy::Error) -> String {
    match crate::net::upstream::connect_error(error) {
        Some(connect) => connect.to_string(),
        None if error.is_connect() => "cannot connect".to_owned(),
        None => "the connection broke".to_owned(),
    }
}

/// The AppRole login body, `{"role_id":…,"secret_id":…}`, in a wiped buffer sized for the ids
/// escaped (at most six bytes a byte, `\u00XX`), so that it never grows and frees a copy.
/// Empty if serde_json refuses to write (it does not for strings).
fn login_body(role_id: &str, secret_id: &str) -> Zeroizing<Vec<u8>> {
    let escaped = role_id
        .len()
        .saturating_add(secret_id.len())
        .saturating_mul(6);
    let mut body = Zeroizing::new(Vec::with_capacity(escaped.saturating_add(32)));
    let written = (|| -> serde_json::Result<()> {
        body.extend_from_slice(b"{\"role_id\":");
        serde_json::to_writer(&mut *body, role_id)?;
        body.extend_from_slice(b",\"secret_id\":");
        serde_json::to_writer(&mut *body, secret_id)?;
        body.push(b'}');
        Ok(())
    })();
    if written.is_err() {
        body.clear();
    }
    body
}

/// The field of a KV v2 read answer: `data.data.KEY`, a non-empty string.
fn field_of(body: &[u8], reference: &VaultRef) -> Result<CredentialValue, StoreError> {
    let malformed = || StoreError::Unavailable {
        reason: "the server's answer is not a KV version 2 secret (is the mount KV v2?)".to_owned(),
    };
    let answer: serde_json::Value = serde_json::from_slice(body).map_err(|_| malformed())?;
    let data = answer
        .pointer("/data/data")
        .and_then(serde_json::Value::as_object)
        .ok_or_else(malformed)?;
    let result = match data.get(&reference.key) {
        None => Err(StoreError::Missing),
        Some(serde_json::Value::String(text)) => {
            CredentialValue::new(text).map_err(StoreError::Value)
        }
        Some(_) => Err(StoreError::Unavailable {
            reason: format!(
                "the field `{}` is not a string; store the secret as text",
                reference.key
            ),
        }),
    };
    // The parsed copy is wiped before it is freed.
    let mut answer = answer;
    wipe(&mut answer);
    result
}

/// Overwrites every string of a parsed answer before it is dropped.
fn wipe(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::String(text) => zeroize::Zeroize::zeroize(text),
        serde_json::Value::Array(items) => items.iter_mut().for_each(wipe),
        serde_json::Value::Object(map) => map.values_mut().for_each(wipe),
        _ => {}
    }
}

/// The token of a login or renewal answer (`auth.client_token`, `auth.lease_duration`,
/// `auth.renewable`), renewed once two thirds of its lease have passed.
fn token_of(body: &[u8]) -> Option<Token> {
    let mut answer: serde_json::Value = serde_json::from_slice(body).ok()?;
    let auth = answer.get("auth")?;
    let value = SecretString::from(auth.get("client_token")?.as_str()?);
    let lease = auth
        .get("lease_duration")
        .and_then(serde_json::Value::as_u64)
        .unwrap_or(0);
    let renewable = auth
        .get("renewable")
        .and_then(serde_json::Value::as_bool)
        .unwrap_or(false);
    // A lease of 0 never expires (a root or periodic token without a TTL).
    let renew_at = (lease > 0).then(|| Instant::now() + Duration::from_secs(lease * 2 / 3));
    wipe(&mut answer);
    Some(Token {
        value,
        renew_at,
        renewable,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_login_body_is_the_ids_as_json_and_never_outgrows_its_room() {
        for (role, secret) in [
            ("role-1", "s3cret"),
            ("", ""),
            ("quote\"back\\slash", "\u{1}\u{1f}\n\t ctl"),
            (&*"r".repeat(60), &*"\u{1}".repeat(300)),
            ("é€😀", "naïve"),
        ] {
            let body = login_body(role, secret);
            let parsed: serde_json::Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(
                parsed,
                serde_json::json!({"role_id": role, "secret_id": secret})
            );
            assert_eq!(
                body.capacity(),
                (role.len() + secret.len()) * 6 + 32,
                "the body grew while it held the ids"
            );
        }
    }

    fn resolve(vars: &[(&str, &str)]) -> Result<Option<VaultConfig>, VaultConfigError> {
        let vars: Vec<(String, OsString)> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), OsString::from(v)))
            .collect();
        VaultConfig::resolve(|name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()))
    }

    #[test]
    fn settings_come_from_the_environment() {
        assert_eq!(resolve(&[]).unwrap(), None);
        let config = resolve(&[
            (MINT_VAULT_ADDR, "https://bao.internal:8200/"),
            (MINT_VAULT_TOKEN_FILE, "/run/mint/vault-token"),
            (MINT_VAULT_NAMESPACE, "team/ci"),
            (MINT_VAULT_CACHE, "1m"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(config.addr, "https://bao.internal:8200");
        assert_eq!(config.namespace.as_deref(), Some("team/ci"));
        assert_eq!(
            config.auth,
            VaultAuth::TokenFile("/run/mint/vault-token".into())
        );
        assert_eq!(config.cache, Duration::from_secs(60));
        assert_eq!(config.max_stale, DEFAULT_MAX_STALE);
        let approle = resolve(&[
            (MINT_VAULT_ADDR, "http://127.0.0.1:8200"),
            (MINT_VAULT_ROLE_ID_FILE, "/r"),
            (MINT_VAULT_SECRET_ID_FILE, "/s"),
        ])
        .unwrap()
        .unwrap();
        assert!(matches!(approle.auth, VaultAuth::AppRole { ref mount, .. } if mount == "approle"));

        for (vars, expected) in [
            (
                vec![
                    (MINT_VAULT_ADDR, "http://bao.internal:8200"),
                    (MINT_VAULT_TOKEN_FILE, "/t"),
                ],
                "must be `https://",
            ),
            (
                vec![
                    (MINT_VAULT_ADDR, "https://bao/v1"),
                    (MINT_VAULT_TOKEN_FILE, "/t"),
                ],
                "with no path",
            ),
            (
                vec![(MINT_VAULT_ADDR, "https://bao")],
                "set MINT_VAULT_TOKEN_FILE",
            ),
            (
                vec![
                    (MINT_VAULT_ADDR, "https://bao"),
                    (MINT_VAULT_TOKEN_FILE, "/t"),
                    (MINT_VAULT_ROLE_ID_FILE, "/r"),
                    (MINT_VAULT_SECRET_ID_FILE, "/s"),
                ],
                "not both",
            ),
            (
                vec![
                    (MINT_VAULT_ADDR, "https://bao"),
                    (MINT_VAULT_TOKEN_FILE, "t"),
                ],
                "absolute path",
            ),
            (
                vec![
                    (MINT_VAULT_ADDR, "https://bao"),
                    (MINT_VAULT_TOKEN_FILE, "/t"),
                    (MINT_VAULT_MAX_STALE, "forever"),
                ],
                "MINT_VAULT_MAX_STALE is a whole number",
            ),
            (
                vec![(MINT_VAULT_TOKEN_FILE, "/t")],
                "MINT_VAULT_ADDR is not",
            ),
        ] {
            let message = resolve(&vars).unwrap_err().to_string();
            assert!(message.contains(expected), "{vars:?}: {message}");
        }
    }

    #[test]
    fn kv_answers_give_the_field_and_never_show_it() {
        const CANARY: &str = "canary-vault-1b7e";
        let reference = VaultRef::parse("secret/ci/gh#token").unwrap();
        let body =
            format!(r#"{{"data":{{"data":{{"token":"{CANARY}"}},"metadata":{{"version":2}}}}}}"#);
        let value = field_of(body.as_bytes(), &reference).unwrap();
        assert_eq!(value.as_secret().expose_secret(), CANARY);
        let other = VaultRef::parse("secret/ci/gh#nope").unwrap();
        assert!(matches!(
            field_of(body.as_bytes(), &other),
            Err(StoreError::Missing)
        ));
        let err = field_of(b"not json", &reference).unwrap_err();
        assert!(
            err.to_string().contains("not a KV version 2 secret"),
            "{err}"
        );
        let token = token_of(
            format!(
                r#"{{"auth":{{"client_token":"{CANARY}","lease_duration":60,"renewable":true}}}}"#
            )
            .as_bytes(),
        )
        .unwrap();
        assert!(token.renewable && token.renew_at.is_some());
    }
}
