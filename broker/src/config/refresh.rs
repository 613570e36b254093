//! Background refresh of alias secrets that come from a command or a secret server: each such
//! value is cached for its source's `cache` time and read again when that runs out, never on a
//! request's path.
//!
//! A value read again replaces the old one through [`Declarations::with_credentials`]: answers
//! are scrubbed of the new value and of every earlier one (a rotated secret an upstream hands
//! back stays hidden). When a read fails, the cached value keeps serving until its staleness
//! bound (`cache` + `max_stale` after it was read); the failure is logged and audited once
//! (`secret_refresh_failed`), and reads are tried again every [`retry_interval`]. Past the
//! bound, requests that use that alias are refused with `503 secret_unavailable` (logged and
//! audited once, `secret_stale`) while every other alias keeps working; the first successful
//! read ends it (`secret_refreshed`). A source that refused Mint (an HTTP 403 from Vault: a
//! policy that no longer grants the path) is not tried again until the next reload, so a
//! revoked grant is never hammered in a loop. A reload (SIGHUP, a file change) reads every
//! source anew and starts over.
//!
//! Never logs a value, a token or anything a command printed: errors name the alias, its source
//! and what happened.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::config::declarations::Declarations;
use crate::config::reload::audit_event;
use crate::proxy::AppState;
use crate::secrets::credential_store::{CredentialSources, Lifetime, StoreError};

/// How often the cached values' deadlines are checked.
pub const TICK: Duration = Duration::from_millis(250);

/// Reads refreshed sources again when their cache time runs out.
#[derive(Clone, Debug)]
pub struct Refresher {
    /// Where alias secrets come from (the reloader's sources).
    pub sources: CredentialSources,
}

/// What the refresher remembers about an alias whose last read failed.
#[derive(Clone, Copy, Debug)]
struct Failing {
    /// When to try again; `None`: not before the next reload (the source refused Mint).
    next_try: Option<Instant>,
    /// Whether passing the staleness bound was reported.
    stale_reported: bool,
}

// === impl Refresher ===

impl Refresher {
    /// Refreshes until the task is aborted.
    pub async fn watch(self, state: AppState) {
        let mut failing: HashMap<String, Failing> = HashMap::new();
        let mut generation = state.declarations().loaded_at();
        let mut ticks = tokio::time::interval(TICK);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            let current = state.declarations();
            if current.loaded_at() != generation {
                // A reload read every source again: start over.
                generation = current.loaded_at();
                failing.clear();
            }
            self.report_stale(&state, &current, &mut failing);
            let now = Instant::now();
            let due: Vec<String> = current
                .credentials()
                .refreshed()
                .filter(|(name, fresh)| {
                    now >= fresh.refresh_at
                        && failing
                            .get(*name)
                            .is_none_or(|f| f.next_try.is_some_and(|at| now >= at))
                })
                .map(|(name, _)| name.to_owned())
                .collect();
            if due.is_empty() {
                continue;
            }
            self.refresh(&state, &current, due, &mut failing).await;
        }
    }

    /// Reads `due` again (each off the async threads, all at once) and swaps the values read in,
    /// unless a reload replaced the declarations meanwhile.
    async fn refresh(
        &self,
        state: &AppState,
        current: &Arc<Declarations>,
        due: Vec<String>,
        failing: &mut HashMap<String, Failing>,
    ) {
        let mut reads = tokio::task::JoinSet::new();
        for name in due {
            let Some(alias) = current.alias(&name).cloned() else {
                continue;
            };
            let sources = self.sources.clone();
            reads.spawn_blocking(move || {
                let result = sources.read(&alias);
                (alias, result)
            });
        }
        let mut credentials = current.credentials().clone();
        let mut changed = false;
        while let Some(joined) = reads.join_next().await {
            let Ok((alias, result)) = joined else {
                continue;
            };
            let name = alias.name.clone();
            let Some(lifetime) = self.sources.lifetime(&alias) else {
                continue;
            };
            match result {
                Ok(value) => {
                    credentials.replace(&name, value, lifetime.starting(Instant::now()));
                    changed = true;
                    if failing.remove(&name).is_some() {
                        tracing::info!(alias = %name, alias.source = %alias.source, "Alias secret read again; its source answers");
                        audit_event(state, "secret_refreshed");
                    } else {
                        tracing::debug!(alias = %name, "Alias secret read again");
                    }
                }
                Err(error) => {
                    let refused = matches!(error.problem, StoreError::Refused { .. });
                    let next_try = (!refused).then(|| Instant::now() + retry_interval(lifetime));
                    let first = !failing.contains_key(&name);
                    let stale_reported = failing.get(&name).is_some_and(|f| f.stale_reported);
                    failing.insert(
                        name.clone(),
                        Failing {
                            next_try,
                            stale_reported,
                        },
                    );
                    let left = credentials
                        .freshness(&name)
                        .map(|f| f.usable_until.saturating_duration_since(Instant::now()))
                        .unwrap_or_default();
                    if first {
                        if refused {
                            tracing::error!(alias = %name, error = %error, cached.serves_for_s = left.as_secs(), "Cannot read an alias secret again: its source refused Mint, which will not ask again before the next reload; the cached value serves until its staleness bound");
                        } else {
                            tracing::warn!(alias = %name, error = %error, cached.serves_for_s = left.as_secs(), "Cannot read an alias secret again; the cached value serves until its staleness bound");
                        }
                        audit_event(state, "secret_refresh_failed");
                    } else {
                        tracing::debug!(alias = %name, error = %error, "Alias secret still cannot be read again");
                    }
                }
            }
        }
        if !changed {
            return;
        }
        match current.with_credentials(credentials) {
            Ok(refreshed) => match state.replace_declarations_from(current, refreshed) {
                Ok(true) => {}
                Ok(false) => {
                    tracing::debug!(
                        "Declarations reloaded during a refresh; the reload's secrets stay"
                    );
                }
                Err(error) => {
                    tracing::error!(error = %error, "Refreshed alias secrets not swapped in");
                }
            },
            Err(error) => tracing::error!(error = %error, "Refreshed alias secrets not swapped in"),
        }
    }

    /// Logs and audits, once per failure, each alias that passed its staleness bound.
    fn report_stale(
        &self,
        state: &AppState,
        current: &Declarations,
        failing: &mut HashMap<String, Failing>,
    ) {
        let now = Instant::now();
        for (name, fresh) in current.credentials().refreshed() {
            if now <= fresh.usable_until {
                continue;
            }
            let entry = failing.entry(name.to_owned()).or_insert(Failing {
                next_try: Some(now),
                stale_reported: false,
            });
            if !entry.stale_reported {
                entry.stale_reported = true;
                tracing::error!(alias = %name, "Alias secret past its staleness bound: requests that use it are refused (503 secret_unavailable) until its source answers again");
                audit_event(state, "secret_stale");
            }
        }
    }
}

/// How long after a failed read the next one is tried: a tenth of the cache time, between one
/// and thirty seconds.
pub fn retry_interval(lifetime: Lifetime) -> Duration {
    (lifetime.cache / 10).clamp(Duration::from_secs(1), Duration::from_secs(30))
}
