//! The flags that name the Redis keeping shared call limits, common to `mint serve` (which
//! counts there) and `mint policy explain` (which reads the budgets there).

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use crate::config::env::{MINT_LIMITS_REDIS, MINT_LIMITS_REDIS_CA, MINT_LIMITS_REDIS_PREFIX};
use crate::limits::redis::DEFAULT_PREFIX;
use crate::limits::{RedisConfigError, RedisLimitsConfig};

/// Where call limits shared by several brokers are kept.
#[derive(Debug, Args)]
pub struct LimitsRedisArgs {
    /// Keep call-limit counters in Redis at this URL, shared exactly by every broker that uses
    /// it: redis://USER:PASSWORD@HOST:PORT/DB, rediss:// for TLS, or
    /// redis+unix:///PATH?user=USER&pass=PASSWORD. Without it, each broker counts in its own
    /// memory. The URL is never logged, only its address; prefer the environment variable for a
    /// URL with a password: a command line is visible to every local user.
    #[arg(long, value_name = "URL", env = MINT_LIMITS_REDIS, hide_env_values = true)]
    pub limits_redis: Option<String>,

    /// The prefix of Mint's keys in that Redis (give Mint's ACL user only these keys).
    #[arg(long, value_name = "PREFIX", env = MINT_LIMITS_REDIS_PREFIX, default_value = DEFAULT_PREFIX)]
    pub limits_redis_prefix: String,

    /// The CA certificates (PEM) a rediss:// server's certificate must chain to, instead of the
    /// system's.
    #[arg(long, value_name = "FILE", env = MINT_LIMITS_REDIS_CA)]
    pub limits_redis_ca: Option<PathBuf>,
}

// === impl LimitsRedisArgs ===

impl LimitsRedisArgs {
    /// The Redis configuration, or `None` when no Redis is named (limits stay in memory).
    pub fn config(&self, wait: Duration) -> Result<Option<RedisLimitsConfig>, RedisConfigError> {
        let Some(url) = self.limits_redis.as_deref().filter(|url| !url.is_empty()) else {
            return Ok(None);
        };
        RedisLimitsConfig::with_ca_file(
            url,
            &self.limits_redis_prefix,
            wait,
            self.limits_redis_ca.as_deref(),
        )
        .map(Some)
    }
}
