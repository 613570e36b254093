//! Call limits shared by several brokers through Redis (`mint serve --limits-redis URL`).
//!
//! Each counter is a sorted set named `PREFIX` + the first 128 bits of the SHA-256 of the
//! counter's key (rule, limit and `by` values: a tool name or host an agent chose never shows in
//! a key name), holding one member per admitted unit, scored with the admission's time in
//! microseconds of Redis' own clock. One Lua script per admission ([`ADMIT_SCRIPT`]) drops what
//! left each window, checks every counter of the request and adds its units to all of them or to
//! none, with `TIME` as the only clock: brokers whose clocks differ still count one window. The
//! request id is the member, so a refund removes exactly the request's own entries. Each key
//! expires one window after its last admission.
//!
//! The script is called by its SHA (`EVALSHA`); when Redis has forgotten it (a restart, `SCRIPT
//! FLUSH`, a failover) it is loaded again and called once more, which is safe since a `NOSCRIPT`
//! answer ran nothing. Every admission is bounded by one wait (default 50 ms) covering the
//! connection, a reconnection and the script: past it, or on any error, the request is refused
//! `503 limits_unavailable` (fail closed), and the request's members are removed in the background
//! in case the script still runs later (a paused Redis runs the queued call when it resumes).
//! redis-rs' connection manager reconnects on its own, so brokers recover without a restart once
//! Redis answers again; a connection that has answered nothing for a while is replaced, in case
//! it hangs on a peer that went away without a word.
//!
//! Single-node Redis (or a primary with replicas) only: a script's keys must be on one node, so
//! Redis Cluster is not supported (a prefix with a hash tag would put every key in one slot, but
//! this client does not follow cluster redirections).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use mint_policy::audit::RequestId;
use mint_policy::limits::{Charge, Limited, Limiter, units};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{ConnectionAddr, IntoConnectionInfo, Script};
use sha2::{Digest, Sha256};

use super::{Receipt, Refusal};

/// The admission script (its header says what it takes and returns).
pub const ADMIT_SCRIPT: &str = include_str!("admit.lua");

/// The key prefix when none is configured.
pub const DEFAULT_PREFIX: &str = "mint:limits:";

/// The wait for one admission when none is configured.
pub const DEFAULT_WAIT: Duration = Duration::from_millis(50);

/// The longest wait that may be configured: a request waits this long at most before a `503`.
pub const MAX_WAIT: Duration = Duration::from_secs(10);

/// One connection attempt (TCP or Unix socket, TLS, `HELLO`/`AUTH`), in the background: a
/// request waits at most its own wait for it.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// How long a background refund may take.
const REFUND_WAIT: Duration = Duration::from_secs(5);

/// A connection that has answered nothing for this long while admissions time out is replaced.
const STALE_AFTER: Duration = Duration::from_secs(2);

/// How long warming up (and `mint policy explain`) may wait for Redis.
const PATIENT_WAIT: Duration = Duration::from_secs(5);

/// Where the shared counters are, and how long an admission may wait for them.
#[derive(Clone)]
pub struct RedisLimitsConfig {
    client: redis::Client,
    prefix: String,
    wait: Duration,
    shown: String,
}

/// A Redis setting that cannot work.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RedisConfigError {
    /// Not a URL of one of the three schemes.
    #[error(
        "--limits-redis must be a redis://, rediss:// or redis+unix:// URL (got a URL with scheme `{0}`)"
    )]
    Scheme(String),
    /// The URL does not parse, or names no host or socket.
    #[error("--limits-redis is not a Redis URL Mint can use: {0}")]
    Url(String),
    /// `rediss://...#insecure`: TLS without checking the server.
    #[error(
        "--limits-redis: `#insecure` (TLS without checking Redis' certificate) is not supported; give Redis' CA with --limits-redis-ca"
    )]
    Insecure,
    /// A CA for a URL without TLS, or a CA that does not parse.
    #[error("--limits-redis-ca: {0}")]
    Ca(String),
    /// The CA file cannot be read.
    #[error("--limits-redis-ca: cannot read `{}`", path.display())]
    CaUnreadable {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// An empty key prefix.
    #[error(
        "--limits-redis-prefix must not be empty: Mint's keys need a namespace of their own (default `mint:limits:`)"
    )]
    Prefix,
    /// A wait of zero or over the bound.
    #[error("--limits-redis-wait must be more than 0 and at most 10s")]
    Wait,
}

impl std::fmt::Debug for RedisLimitsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The URL may hold a password: only its scheme and address are shown.
        f.debug_struct("RedisLimitsConfig")
            .field("redis", &self.shown)
            .field("prefix", &self.prefix)
            .field("wait", &self.wait)
            .finish_non_exhaustive()
    }
}

// === impl RedisLimitsConfig ===

impl RedisLimitsConfig {
    /// Counters in the Redis at `url` (`redis://[USER:PASSWORD@]HOST[:PORT][/DB]`, `rediss://`
    /// for TLS, `redis+unix:///PATH[?db=N&user=USER&pass=PASSWORD]`), under keys starting with
    /// `prefix`, each admission waiting at most `wait`. `ca_pem`: the CA certificates (PEM)
    /// that a `rediss://` server's certificate must chain to, instead of the system's.
    pub fn new(
        url: &str,
        prefix: &str,
        wait: Duration,
        ca_pem: Option<&[u8]>,
    ) -> Result<RedisLimitsConfig, RedisConfigError> {
        let scheme = url.split_once("://").map_or("", |(scheme, _)| scheme);
        if !matches!(scheme, "redis" | "rediss" | "redis+unix") {
            return Err(RedisConfigError::Scheme(
                scheme.chars().take(16).collect::<String>(),
            ));
        }
        if prefix.is_empty() {
            return Err(RedisConfigError::Prefix);
        }
        if wait.is_zero() || wait > MAX_WAIT {
            return Err(RedisConfigError::Wait);
        }
        let info = url
            .into_connection_info()
            .map_err(|error| RedisConfigError::Url(error.to_string()))?;
        let shown = match info.addr() {
            ConnectionAddr::TcpTls { insecure: true, .. } => {
                return Err(RedisConfigError::Insecure);
            }
            ConnectionAddr::Unix(path) => format!("{scheme}://{}", path.display()),
            addr => format!("{scheme}://{addr}"),
        };
        let client = match ca_pem {
            None => redis::Client::open(info)
                .map_err(|error| RedisConfigError::Url(error.to_string()))?,
            Some(_) if scheme != "rediss" => {
                return Err(RedisConfigError::Ca(
                    "a CA is for a rediss:// URL (TLS) only".to_owned(),
                ));
            }
            Some(pem) => {
                use rustls::pki_types::CertificateDer;
                use rustls::pki_types::pem::PemObject as _;
                let found = CertificateDer::pem_slice_iter(pem)
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|error| {
                        RedisConfigError::Ca(format!("not PEM certificates: {error}"))
                    })?;
                if found.is_empty() {
                    return Err(RedisConfigError::Ca(
                        "the file holds no PEM certificate".to_owned(),
                    ));
                }
                let certificates = redis::TlsCertificates {
                    client_tls: None,
                    root_cert: Some(pem.to_vec()),
                };
                redis::Client::build_with_tls(info, certificates)
                    .map_err(|error| RedisConfigError::Ca(error.to_string()))?
            }
        };
        Ok(RedisLimitsConfig {
            client,
            prefix: prefix.to_owned(),
            wait,
            shown,
        })
    }

    /// [`RedisLimitsConfig::new`] with the CA read from the file `ca` (PEM), if any.
    pub fn with_ca_file(
        url: &str,
        prefix: &str,
        wait: Duration,
        ca: Option<&std::path::Path>,
    ) -> Result<RedisLimitsConfig, RedisConfigError> {
        let pem = ca
            .map(|path| {
                std::fs::read(path).map_err(|source| RedisConfigError::CaUnreadable {
                    path: path.to_path_buf(),
                    source,
                })
            })
            .transpose()?;
        RedisLimitsConfig::new(url, prefix, wait, pem.as_deref())
    }

    /// The server, as the log shows it: scheme and address, never the credentials.
    pub fn shown(&self) -> &str {
        &self.shown
    }

    /// The key prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The longest an admission waits.
    pub fn wait(&self) -> Duration {
        self.wait
    }

    /// The Redis key of the counter `counter` (a [`Charge`]'s key).
    pub fn key_of(&self, counter: &str) -> String {
        let digest = Sha256::digest(counter.as_bytes());
        let mut key = String::with_capacity(self.prefix.len() + 32);
        key.push_str(&self.prefix);
        key.push_str(&hex::encode(digest.get(..16).unwrap_or_default()));
        key
    }
}

/// The shared counters of a serving broker.
#[derive(Debug)]
pub struct RedisLimits {
    config: RedisLimitsConfig,
    script: Script,
    /// The connection manager and when it was made; made on first use (inside the runtime).
    manager: Mutex<Option<(ConnectionManager, Instant)>>,
    /// Whether the last admission failed: the log says so once per outage, and once when Redis
    /// answers again.
    failing: AtomicBool,
    /// Since when admissions have been failing, if they are.
    outage_since: Mutex<Option<Instant>>,
}

/// Why an admission could not be counted.
enum Failure {
    /// No answer within the wait.
    Timeout,
    /// Redis or the connection said why.
    Error(redis::RedisError),
    /// The script found the request's member there already.
    Duplicate,
    /// An answer of another shape.
    Answer,
}

// === impl RedisLimits ===

impl RedisLimits {
    /// The counters `config` names, not connected yet.
    pub fn new(config: RedisLimitsConfig) -> RedisLimits {
        RedisLimits {
            config,
            script: Script::new(ADMIT_SCRIPT),
            manager: Mutex::new(None),
            failing: AtomicBool::new(false),
            outage_since: Mutex::new(None),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &RedisLimitsConfig {
        &self.config
    }

    /// The connection manager, made on first use. It reconnects by itself after an I/O error.
    fn connection(&self) -> Result<ConnectionManager, redis::RedisError> {
        let mut slot = self.manager.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((manager, _)) = slot.as_ref() {
            return Ok(manager.clone());
        }
        let settings = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(CONNECT_TIMEOUT))
            // Each call is bounded by the admission's own wait instead.
            .set_response_timeout(None)
            .set_number_of_retries(3)
            .set_min_delay(Duration::from_millis(50))
            .set_max_delay(Duration::from_millis(500));
        let manager =
            ConnectionManager::new_lazy_with_config(self.config.client.clone(), settings)?;
        *slot = Some((manager.clone(), Instant::now()));
        Ok(manager)
    }

    /// Admits `calls` (see [`super::CallLimits::admit`]) in one script call, within the wait.
    pub(super) async fn admit(
        &self,
        calls: &[&[Charge]],
        id: &RequestId,
    ) -> Result<Receipt, Refusal> {
        let needs = units(calls);
        let mut invocation = self.script.prepare_invoke();
        invocation.arg(id.as_str());
        for (charge, n) in &needs {
            let per_ms = u64::try_from(charge.per.as_millis()).unwrap_or(u64::MAX);
            invocation
                .key(self.config.key_of(&charge.key))
                .arg(charge.max)
                .arg(per_ms.max(1))
                .arg(*n);
        }
        let answer = async {
            let mut connection = self.connection().map_err(Failure::Error)?;
            invocation
                .invoke_async::<Vec<i64>>(&mut connection)
                .await
                .map_err(Failure::Error)
        };
        let answer = match tokio::time::timeout(self.config.wait, answer).await {
            Err(_) => Err(Failure::Timeout),
            Ok(answer) => answer,
        };
        let failure = match answer.as_deref() {
            Ok([1, _]) => {
                self.answered();
                return Ok(Receipt::Redis(id.clone()));
            }
            Ok([0, wait, spent @ ..]) if !spent.is_empty() => {
                self.answered();
                let rules = spent
                    .iter()
                    .filter_map(|&i| usize::try_from(i - 1).ok())
                    .filter_map(|i| needs.get(i))
                    .map(|(charge, _)| charge.rule.clone())
                    .collect();
                let wait = Duration::from_micros(u64::try_from(*wait).unwrap_or(0));
                return Err(Refusal::Limited(Limited::after(rules, wait)));
            }
            Ok([-1]) => Failure::Duplicate,
            Ok(_) => Failure::Answer,
            Err(_) => match answer {
                Err(failure) => failure,
                Ok(_) => Failure::Answer,
            },
        };
        // Nothing was admitted; but the script may still run (a late answer, a paused server),
        // or have run partly (an error mid-script): remove whatever this request added. Not for
        // a repeated id: the script added nothing, and the members there are another request's.
        if !matches!(failure, Failure::Duplicate) {
            self.refund(calls, id);
        }
        self.failed(&failure, id);
        Err(Refusal::Unavailable)
    }

    /// Removes the entries of request `id` from the counters of `calls`, in the background,
    /// after whatever this broker sent Redis before (the same connection keeps the order).
    pub(super) fn refund(&self, calls: &[&[Charge]], id: &RequestId) {
        let mut pipe = redis::pipe();
        for (charge, n) in units(calls) {
            let mut command = redis::cmd("ZREM");
            command
                .arg(self.config.key_of(&charge.key))
                .arg(id.as_str());
            for unit in 2..=n {
                command.arg(format!("{id}#{unit}", id = id.as_str()));
            }
            pipe.add_command(command).ignore();
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let Ok(mut connection) = self.connection() else {
            return;
        };
        let id = id.clone();
        runtime.spawn(async move {
            let removed =
                tokio::time::timeout(REFUND_WAIT, pipe.exec_async(&mut connection)).await;
            match removed {
                Ok(Ok(())) => tracing::debug!(request.id = %id, "Call-limit units given back in Redis"),
                Ok(Err(error)) => {
                    tracing::warn!(request.id = %id, error = %error, "Call-limit units not given back in Redis: they count until their window ends");
                }
                Err(_) => {
                    tracing::warn!(request.id = %id, "Call-limit units not given back in Redis in time: they count until their window ends");
                }
            }
        });
    }

    /// Redis answered an admission.
    fn answered(&self) {
        *self
            .outage_since
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = None;
        if self.failing.swap(false, Ordering::Relaxed) {
            tracing::info!(redis = %self.config.shown, "Shared call limits answer again: requests that match a limit are counted in Redis");
        }
    }

    /// An admission failed: logs the first failure of an outage as a warning (later ones at
    /// debug), and replaces a connection that has answered nothing for a while.
    fn failed(&self, failure: &Failure, id: &RequestId) {
        let why = match failure {
            Failure::Timeout => format!("no answer within {} ms", self.config.wait.as_millis()),
            Failure::Error(error) => error.to_string(),
            Failure::Duplicate => {
                // Request ids are a random 48-bit prefix per broker run and a counter: two
                // brokers drew the same prefix, or a broker's random source failed.
                tracing::error!(request.id = %id, "Request id already counted in Redis: another broker uses the same request ids; restart one of them");
                "request id already counted".to_owned()
            }
            Failure::Answer => "unexpected answer from the admission script".to_owned(),
        };
        if self.failing.swap(true, Ordering::Relaxed) {
            tracing::debug!(redis = %self.config.shown, error = %why, "Shared call limits still unavailable");
        } else {
            tracing::warn!(redis = %self.config.shown, error = %why, "Shared call limits unavailable: requests that match a limit are refused (503 limits_unavailable) until Redis answers");
        }
        let silent = self
            .outage_since
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get_or_insert_with(Instant::now)
            .elapsed();
        if matches!(failure, Failure::Timeout) && silent > STALE_AFTER {
            let mut slot = self.manager.lock().unwrap_or_else(PoisonError::into_inner);
            if slot
                .as_ref()
                .is_some_and(|(_, made)| made.elapsed() > STALE_AFTER)
            {
                tracing::debug!(redis = %self.config.shown, silent_ms = silent.as_millis(), "Replacing a Redis connection that answers nothing");
                *slot = None;
            }
        }
    }

    /// Connects and loads the script, patiently, and logs the result.
    pub(super) async fn warm_up(&self) {
        let loaded = async {
            let mut connection = self.connection()?;
            self.script
                .prepare_invoke()
                .load_async(&mut connection)
                .await
        };
        match tokio::time::timeout(PATIENT_WAIT, loaded).await {
            Ok(Ok(_)) => {
                tracing::info!(redis = %self.config.shown, prefix = %self.config.prefix, wait_ms = self.config.wait.as_millis(), "Call limits are shared through Redis");
            }
            Ok(Err(error)) => {
                self.failing.store(true, Ordering::Relaxed);
                tracing::warn!(redis = %self.config.shown, error = %error, "Call limits are shared through Redis, which cannot be used yet: requests that match a limit are refused (503 limits_unavailable) until it answers");
            }
            Err(_) => {
                self.failing.store(true, Ordering::Relaxed);
                tracing::warn!(redis = %self.config.shown, "Call limits are shared through Redis, which does not answer yet: requests that match a limit are refused (503 limits_unavailable) until it answers");
            }
        }
    }
}

/// Why the counters could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReadError {
    /// Redis or the connection said why.
    #[error(transparent)]
    Redis(#[from] redis::RedisError),
    /// No answer in time.
    #[error("no answer within {} s", .0.as_secs())]
    Timeout(Duration),
}

/// Reads the counters `charges` name from Redis, for `mint policy explain`: a [`Limiter`]
/// holding their admissions, and Redis' clock (time since the Unix epoch) to judge them at.
pub async fn read_counters(
    config: &RedisLimitsConfig,
    charges: &[Charge],
) -> Result<(Limiter, Duration), ReadError> {
    let read = async {
        let mut connection = config.client.get_multiplexed_async_connection().await?;
        let mut pipe = redis::pipe();
        pipe.cmd("TIME");
        let mut counters: Vec<&Charge> = Vec::new();
        for charge in charges {
            if counters.iter().all(|c| c.key != charge.key) {
                counters.push(charge);
                pipe.cmd("ZRANGE")
                    .arg(config.key_of(&charge.key))
                    .arg(0)
                    .arg(-1)
                    .arg("WITHSCORES");
            }
        }
        let answers: Vec<redis::Value> = pipe.query_async(&mut connection).await?;
        let mut answers = answers.into_iter();
        let (seconds, micros): (u64, u64) =
            redis::from_redis_value(answers.next().unwrap_or(redis::Value::Nil))
                .map_err(redis::RedisError::from)?;
        let now = Duration::from_secs(seconds) + Duration::from_micros(micros);
        let mut limiter = Limiter::new();
        for (charge, answer) in counters.iter().zip(answers) {
            let entries: Vec<(String, f64)> =
                redis::from_redis_value(answer).map_err(redis::RedisError::from)?;
            let times = entries
                .into_iter()
                .map(|(_, score)| Duration::from_micros(score.max(0.0) as u64));
            limiter.restore(&charge.key, charge.per, times);
        }
        Ok((limiter, now))
    };
    match tokio::time::timeout(PATIENT_WAIT, read).await {
        Ok(result) => result,
        Err(_) => Err(ReadError::Timeout(PATIENT_WAIT)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(url: &str) -> Result<RedisLimitsConfig, RedisConfigError> {
        RedisLimitsConfig::new(url, DEFAULT_PREFIX, DEFAULT_WAIT, None)
    }

    #[test]
    fn the_three_schemes_parse_and_show_no_credentials() {
        for (url, shown) in [
            (
                "redis://mint:s3cret-pw@127.0.0.1:6380/2",
                "redis://127.0.0.1:6380",
            ),
            (
                "rediss://mint:s3cret-pw@redis.example:6390",
                "rediss://redis.example:6390",
            ),
            ("redis://localhost", "redis://localhost:6379"),
            (
                "redis+unix:///run/redis/redis.sock?user=mint&pass=s3cret-pw",
                "redis+unix:///run/redis/redis.sock",
            ),
        ] {
            let parsed = config(url).unwrap_or_else(|e| panic!("{url}: {e}"));
            assert_eq!(parsed.shown(), shown);
            assert!(!format!("{parsed:?}").contains("s3cret"), "{parsed:?}");
        }
    }

    #[test]
    fn other_urls_and_settings_are_refused_without_echoing_the_url() {
        for url in [
            "http://127.0.0.1:6379",
            "unix:///run/redis.sock",
            "valkey://127.0.0.1",
            "127.0.0.1:6379",
            "redis://",
            "rediss://mint:s3cret-pw@127.0.0.1:6390/#insecure",
        ] {
            let error = config(url)
                .err()
                .unwrap_or_else(|| panic!("{url} accepted"));
            assert!(!error.to_string().contains("s3cret"), "{error}");
        }
        assert!(matches!(
            config("rediss://127.0.0.1/#insecure"),
            Err(RedisConfigError::Insecure)
        ));
        let url = "redis://127.0.0.1";
        assert!(matches!(
            RedisLimitsConfig::new(url, "", DEFAULT_WAIT, None),
            Err(RedisConfigError::Prefix)
        ));
        for wait in [Duration::ZERO, Duration::from_secs(11)] {
            assert!(matches!(
                RedisLimitsConfig::new(url, DEFAULT_PREFIX, wait, None),
                Err(RedisConfigError::Wait)
            ));
        }
        assert!(matches!(
            RedisLimitsConfig::new(url, DEFAULT_PREFIX, DEFAULT_WAIT, Some(b"pem")),
            Err(RedisConfigError::Ca(_))
        ));
        assert!(matches!(
            RedisLimitsConfig::new(
                "rediss://127.0.0.1",
                DEFAULT_PREFIX,
                DEFAULT_WAIT,
                Some(b"no pem")
            ),
            Err(RedisConfigError::Ca(_))
        ));
    }

    #[test]
    fn keys_are_the_prefix_and_a_hash_of_the_counter() {
        let c = config("redis://127.0.0.1").unwrap_or_else(|e| panic!("{e}"));
        let counter = "limited#0\u{1f}mino\u{1f}api.github.com";
        let key = c.key_of(counter);
        assert_eq!(key.len(), DEFAULT_PREFIX.len() + 32);
        assert!(key.starts_with(DEFAULT_PREFIX));
        assert!(!key.contains("mino") && !key.contains("github"), "{key}");
        assert_eq!(key, c.key_of(counter));
        assert_ne!(key, c.key_of("limited#0\u{1f}mino\u{1f}api.github.co"));
        let other = RedisLimitsConfig::new("redis://127.0.0.1", "team-b:", DEFAULT_WAIT, None)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            other.key_of(counter)["team-b:".len()..],
            key[DEFAULT_PREFIX.len()..]
        );
    }
}
