//! `mint serve`: its flags, turned into the broker's configuration; the broker itself is
//! [`crate::serve`].

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use crate::approval::ApprovalBounds;
use crate::approval::protocol::SOCKET_NAME;
use crate::approval::webhook::{Webhook, WebhookFormat};
use crate::audit::AuditConfig;
use crate::audit::mirror::{BrokerId, BrokerIdError};
use crate::cli::shared_limits::LimitsRedisArgs;
use crate::config::declaration_file::ReadError;
use crate::config::declarations::DeclarationsError;
use crate::config::env::MINT_LIMITS_REDIS_WAIT;
use crate::config::env::Paths;
use crate::proxy::ProxyLimits;
use crate::serve::{ServeConfig, ServeError, load_state, serve_blocking};

/// Arguments of `mint serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The address to listen on (keep it on loopback).
    #[arg(long, env = "MINT_LISTEN", default_value = crate::config::env::DEFAULT_LISTEN)]
    pub listen: String,

    /// A PEM file of CA certificates trusted for upstreams besides the built-in webpki roots
    /// (a private CA).
    #[arg(long, env = crate::config::env::MINT_UPSTREAM_CA)]
    pub upstream_ca: Option<PathBuf>,

    /// The interception CA's certificate (PEM); `$MINT_HOME/ca.pem` by default. Created, with
    /// its key, on the first start when neither file exists.
    #[arg(long)]
    pub ca_cert: Option<PathBuf>,

    /// The interception CA's private key (PEM, 0600); `$MINT_HOME/ca.key` by default.
    #[arg(long)]
    pub ca_key: Option<PathBuf>,

    /// Pin HOST:PORT to ADDRESS (curl's syntax; repeatable; ADDRESS may be a comma-separated
    /// list): for tests and split-horizon DNS. A pinned address may be loopback or private; it
    /// is used for that host and port only, and written to the start-up log.
    #[arg(long = "resolve", value_name = "HOST:PORT:ADDRESS")]
    pub resolve: Vec<String>,

    /// Resolving, connecting and the TLS handshake to an upstream, together.
    #[arg(long, value_parser = crate::cli::quantity::duration, default_value = "10s")]
    pub connect_timeout: Duration,

    /// The whole upstream exchange up to the answer's head, connecting included (must be longer
    /// than --connect-timeout); also the longest wait for the agent's request body.
    #[arg(long, value_parser = crate::cli::quantity::duration, default_value = "30s")]
    pub request_timeout: Duration,

    /// The longest silence inside an answer's body (a quiet SSE stream is cut after it).
    #[arg(long, value_parser = crate::cli::quantity::duration, default_value = "5m")]
    pub idle_timeout: Duration,

    /// Reading a request's head from the agent.
    #[arg(long, value_parser = crate::cli::quantity::duration, default_value = "10s")]
    pub header_read_timeout: Duration,

    /// The largest request body: bytes, or a size such as `10MiB`.
    #[arg(long, value_parser = crate::cli::quantity::size, default_value = "10MiB")]
    pub max_request_body: u64,

    /// The largest answer body (after decoding): bytes, or a size such as `64MiB`.
    #[arg(long, value_parser = crate::cli::quantity::size, default_value = "64MiB")]
    pub max_response_body: u64,

    /// The largest WebSocket message (or frame), either way: bytes, or a size such as `16MiB`.
    /// A larger one closes the socket (1009).
    #[arg(long, value_parser = crate::cli::quantity::size, default_value = "16MiB")]
    pub max_websocket_message: u64,

    /// The longest a WebSocket stays open, however busy: past it Mint closes it (1001). A
    /// revoked or expired capability, or a reload that no longer allows the handshake, closes
    /// it (1008) sooner.
    #[arg(long, value_parser = crate::cli::quantity::duration, default_value = "24h")]
    pub max_websocket_lifetime: Duration,

    /// The most agent connections served at once; more wait in the listen backlog.
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub max_connections: u32,

    /// How long requests in flight may take to finish at shutdown.
    #[arg(long, value_parser = crate::cli::quantity::duration, default_value = "10s")]
    pub shutdown_grace: Duration,

    /// The most requests waiting for approval at once; past it a new one is refused at once
    /// (`429 approval_queue_full`), never an older one dropped.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub max_pending_approvals: u32,

    /// POST a summary of each request that starts waiting for approval to this https:// URL (an
    /// ntfy topic, a Slack incoming webhook...). It only notifies: decisions are taken with
    /// `mint approvals`. The URL is never logged, only its host. Prefer the environment variable
    /// for a URL that is a secret (Slack's is): a command line is visible to every local user.
    #[arg(
        long,
        value_name = "URL",
        env = "MINT_APPROVAL_WEBHOOK",
        hide_env_values = true
    )]
    pub approval_webhook: Option<String>,

    /// The notification's shape: `json` (`text` and `approval`; Slack-compatible) or `ntfy`
    /// (plain text with a Title header).
    #[arg(long, value_enum, default_value = "json")]
    pub approval_webhook_format: WebhookFormat,

    /// Also write every audit record, as the audit file holds it, as one JSON line on stdout
    /// (for journald, Vector, Fluent Bit, an OpenTelemetry collector), tagged with
    /// `"broker":ID`. The file stays the record of truth and is written first; a slow or closed
    /// stdout never holds up or fails a request, and what it lost is counted in the audit log.
    /// The `listening on` line goes to stderr then.
    #[arg(long)]
    pub audit_stdout: bool,

    /// The `broker` member of the lines --audit-stdout writes: 1-64 of A-Z a-z 0-9 . _ -
    /// [default: the host name].
    #[arg(long, value_name = "ID", value_parser = broker_id, requires = "audit_stdout")]
    pub broker_id: Option<BrokerId>,

    /// The most requests of one agent waiting for approval at once.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub max_pending_approvals_per_agent: u32,

    /// Where call limits shared with other brokers are kept.
    #[command(flatten)]
    pub shared_limits: LimitsRedisArgs,

    /// With --limits-redis: the longest a request waits for Redis (connecting and the admission
    /// script together) before it is refused `503 limits_unavailable`.
    #[arg(long, value_name = "DURATION", value_parser = crate::cli::quantity::duration, env = MINT_LIMITS_REDIS_WAIT, default_value = "50ms")]
    pub limits_redis_wait: Duration,
}

/// Runs `mint serve` with `args` until a graceful shutdown.
pub fn run(args: ServeArgs, paths: &Paths, out: &mut dyn Write) -> Result<(), ServeError> {
    let audit =
        AuditConfig::from_lookup(|name| std::env::var(name).ok()).map_err(ServeError::from)?;
    let mut paths = paths.clone();
    if let Some(cert) = args.ca_cert {
        paths.ca_cert = cert;
    }
    if let Some(key) = args.ca_key {
        paths.ca_key = key;
    }
    let mut resolve = crate::net::upstream::ResolvePins::default();
    for pin in &args.resolve {
        resolve.add(pin).map_err(ServeError::Resolve)?;
    }
    let shared_limits = args.shared_limits.config(args.limits_redis_wait)?;
    let config = ServeConfig {
        resolve,
        upstream_ca: args.upstream_ca,
        leaf_cache: crate::net::ca::LEAF_CACHE_CAPACITY,
        limits: ProxyLimits {
            connect_timeout: args.connect_timeout,
            request_timeout: args.request_timeout,
            idle_timeout: args.idle_timeout,
            max_request_body: args.max_request_body,
            max_response_body: args.max_response_body,
            header_read_timeout: args.header_read_timeout,
            shutdown_grace: args.shutdown_grace,
            max_connections: usize::try_from(args.max_connections).unwrap_or(usize::MAX),
            max_websocket_message: args.max_websocket_message,
            max_websocket_lifetime: args.max_websocket_lifetime,
        },
        audit,
        approval_webhook: args
            .approval_webhook
            .as_deref()
            .map(|url| Webhook::parse(url, args.approval_webhook_format))
            .transpose()?,
        shared_limits,
        approvals: ApprovalBounds {
            max_pending: args.max_pending_approvals as usize,
            max_pending_per_agent: args
                .max_pending_approvals_per_agent
                .min(args.max_pending_approvals) as usize,
        },
        audit_stdout: args
            .audit_stdout
            .then(|| args.broker_id.clone().unwrap_or_else(BrokerId::from_host)),
    };
    let socket = paths.home.join(SOCKET_NAME);
    // With --audit-stdout, stdout carries audit lines only.
    let mut stderr = std::io::stderr();
    let out: &mut dyn Write = if args.audit_stdout { &mut stderr } else { out };
    serve_blocking(
        &args.listen,
        Some(&socket),
        || load_state(&paths, &config).map_err(|error| name_mint_init(error, &paths)),
        out,
    )
}

fn broker_id(text: &str) -> Result<BrokerId, BrokerIdError> {
    BrokerId::new(text)
}

/// A policy or alias file missing where the home keeps it becomes
/// [`ServeError::NotInitialised`], which names `mint init`; one missing elsewhere (a
/// `MINT_POLICY_PATH` of the operator's) keeps its plain message.
fn name_mint_init(error: ServeError, paths: &Paths) -> ServeError {
    match error {
        ServeError::Declarations(DeclarationsError::Unreadable {
            what,
            path,
            problem: ReadError::NotFound,
        }) if path.starts_with(&paths.home) => ServeError::NotInitialised { what, path },
        other => other,
    }
}
