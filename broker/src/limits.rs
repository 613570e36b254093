//! Call limits: where a broker keeps its counters.
//!
//! The policy says which counters a request charges (`mint_policy::evaluate`) and how an exact
//! sliding window decides (`mint_policy::limits`); this room keeps the windows. A broker on its
//! own keeps them in memory ([`CallLimits::Memory`], a [`Limiter`] behind a lock, as always);
//! brokers that serve one team together keep them in Redis ([`CallLimits::Redis`]), where one
//! script per admission checks every window of the request and consumes all or none, with Redis'
//! clock the only clock. Either way the proxy sees the same three answers: admitted (with a
//! [`Receipt`] to give the units back if the request is never sent), limited (`429`), or, for
//! Redis only, unavailable (`503 limits_unavailable`: Mint fails closed, never counting alone).
//!
//! A request that charges no counter never reaches the store: when Redis is down, only requests
//! that match a limit are refused.

pub mod redis;

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use mint_policy::audit::RequestId;
use mint_policy::limits::{Charge, Limited, Limiter};

pub use self::redis::{RedisConfigError, RedisLimits, RedisLimitsConfig};

/// How long an agent refused with `503 limits_unavailable` is told to wait (`Retry-After`): a
/// short, fixed time, since Mint cannot know when the store answers again.
pub const UNAVAILABLE_RETRY_AFTER: Duration = Duration::from_secs(2);

/// Where a broker's call-limit counters live.
#[derive(Debug)]
pub enum CallLimits {
    /// In this broker's memory: exact for this broker alone.
    Memory(MemoryLimits),
    /// In Redis, shared exactly by every broker that uses the same Redis and key prefix.
    Redis(Box<RedisLimits>),
}

/// The in-memory counters, and the origin of their clock.
#[derive(Debug)]
pub struct MemoryLimits {
    limiter: Mutex<Limiter>,
    started: Instant,
}

/// What an admission consumed, to give back with [`CallLimits::refund`] if the request is never
/// sent.
#[derive(Clone, Debug)]
pub enum Receipt {
    /// Nothing: the request charges no counter.
    Nothing,
    /// Units added at this time (since the broker started) to the in-memory counters.
    Memory(Duration),
    /// Units added to the Redis counters under this request id (the sorted sets' member).
    Redis(RequestId),
}

/// Why a request was not admitted.
#[derive(Debug)]
pub enum Refusal {
    /// A counter is spent: `429 limited`.
    Limited(Limited),
    /// The counters could not be read and written in time (Redis unreachable, slow or answering
    /// an error): `503 limits_unavailable`. Its client already logged why.
    Unavailable,
}

// === impl CallLimits ===

impl CallLimits {
    /// In-memory counters, all at zero.
    pub fn memory() -> CallLimits {
        CallLimits::Memory(MemoryLimits {
            limiter: Mutex::new(Limiter::new()),
            started: Instant::now(),
        })
    }

    /// Counters in the Redis that `config` names (connected lazily, inside the runtime).
    pub fn redis(config: RedisLimitsConfig) -> CallLimits {
        CallLimits::Redis(Box::new(RedisLimits::new(config)))
    }

    /// Admits a request made of `calls` (each with the charges of its own evaluation; see
    /// [`Limiter::admit_each`]) if every counter it charges has room, consuming its units, all
    /// or none. `id` is the request's id: in Redis, the member its units are stored under.
    pub async fn admit(&self, calls: &[&[Charge]], id: &RequestId) -> Result<Receipt, Refusal> {
        if calls.iter().all(|charges| charges.is_empty()) {
            return Ok(Receipt::Nothing);
        }
        match self {
            CallLimits::Memory(memory) => {
                let now = memory.started.elapsed();
                memory
                    .lock()
                    .admit_each(calls, now)
                    .map_err(Refusal::Limited)?;
                Ok(Receipt::Memory(now))
            }
            CallLimits::Redis(redis) => redis.admit(calls, id).await,
        }
    }

    /// Gives back what the admission of `calls` that returned `receipt` consumed: for a request
    /// that was admitted and then never sent. In Redis, exactly the request's own entries are
    /// removed, in the background (within a bound; a refund that cannot be made leaves the
    /// units counted, which errs toward refusing).
    pub fn refund(&self, calls: &[&[Charge]], receipt: Receipt) {
        match (self, receipt) {
            (_, Receipt::Nothing) => {}
            (CallLimits::Memory(memory), Receipt::Memory(at)) => {
                memory.lock().refund_each(calls, at);
            }
            (CallLimits::Redis(redis), Receipt::Redis(id)) => redis.refund(calls, &id),
            // A receipt of another store (the store is fixed for a broker's life).
            (CallLimits::Memory(_), Receipt::Redis(_))
            | (CallLimits::Redis(_), Receipt::Memory(_)) => {}
        }
    }

    /// Forgets in-memory history older than every window (called periodically); Redis expires
    /// its own (each counter's key lives one window after its last admission).
    pub fn prune(&self) {
        if let CallLimits::Memory(memory) = self {
            let now = memory.started.elapsed();
            memory.lock().prune(now);
        }
    }

    /// For Redis: connects and loads the admission script ahead of the first request, and says
    /// in the log where the counters are (or why they cannot be reached yet). Nothing for
    /// in-memory counters.
    pub async fn warm_up(&self) {
        if let CallLimits::Redis(redis) = self {
            redis.warm_up().await;
        }
    }
}

// === impl MemoryLimits ===

impl MemoryLimits {
    fn lock(&self) -> std::sync::MutexGuard<'_, Limiter> {
        self.limiter.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
