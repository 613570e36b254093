//! Human approval: the requests an `approve` rule holds, the operator's decisions on them, and the
//! time-boxed grants that approve later requests of the same shape.
//!
//! The [`ApprovalBook`] is the broker's one list of held requests. The proxy puts a request in it
//! ([`ApprovalBook::hold`]) before anything is substituted or sent and waits on the [`Ticket`] it
//! gets; the operator decides through the Unix socket of [`socket`], never through the proxy port,
//! and no capability can make a decision. Whoever takes an entry out of the book decides its fate,
//! under one lock: an operator's decision, the waiting request's timeout, the agent going away
//! (the ticket is dropped), or the broker shutting down. So a request is never both approved and
//! timed out, and an approval that comes after the request gave up approves nothing.
//!
//! Bounded: at most `max_pending` held requests in all and `max_pending_per_agent` per agent; past
//! that a new one is refused at once, and an older one is never evicted (an agent could otherwise
//! flush a request it does not want decided by making many). Grants live in memory and end with
//! the broker. Nothing here ever sees a secret: a summary is built from the request before
//! substitution, and its fields are stripped of control characters ([`display`]).

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use serde::{Deserialize, Serialize};
use tokio::sync::{broadcast, oneshot};

pub mod display;
pub mod protocol;
pub mod socket;
pub mod webhook;

#[cfg(test)]
mod tests;

/// The most held requests in all, unless configured.
pub const DEFAULT_MAX_PENDING: usize = 32;

/// The most held requests of one agent, unless configured.
pub const DEFAULT_MAX_PENDING_PER_AGENT: usize = 8;

/// The longest grant an operator may give.
pub const MAX_GRANT: Duration = Duration::from_secs(8 * 3600);

/// How many events a slow watcher may fall behind before it is told to list again.
const EVENT_BACKLOG: usize = 256;

/// The bounds of the book.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ApprovalBounds {
    /// The most held requests in all.
    pub max_pending: usize,
    /// The most held requests of one agent.
    pub max_pending_per_agent: usize,
}

impl Default for ApprovalBounds {
    fn default() -> Self {
        ApprovalBounds {
            max_pending: DEFAULT_MAX_PENDING,
            max_pending_per_agent: DEFAULT_MAX_PENDING_PER_AGENT,
        }
    }
}

/// What a request looks like to the operator, and what a grant must match. Built from the
/// request before substitution; every text field is already stripped for display.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Summary {
    /// The request's id (the audit records' `id`).
    pub request_id: String,
    /// The capability's agent name.
    pub agent: String,
    /// The approve rules that hold it, in file order.
    pub rules: Vec<String>,
    /// The method.
    pub method: String,
    /// `https`, or `http` for a loopback upstream.
    pub scheme: String,
    /// The canonical host.
    pub host: String,
    /// The port.
    pub port: u16,
    /// The canonical path (never the query: a value there may be a token).
    pub path: String,
    /// The query's parameter names, when it has any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub query_keys: Vec<String>,
    /// The MCP tool, for a `tools/call`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// The tool's arguments, pretty JSON cut after [`display::MAX_ARGUMENTS`] bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<String>,
    /// The aliases whose secrets would be substituted once approved.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub aliases: Vec<String>,
}

// === impl Summary ===

impl Summary {
    /// `scheme://host:port`, where the request goes.
    pub fn destination(&self) -> String {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        format!("{}://{host}:{}", self.scheme, self.port)
    }

    /// Whether a grant given for `self` approves `other`: the same agent, rules, method, scheme,
    /// host, port, path, tool and aliases (a grant given on a request without a secret never
    /// approves one with a secret). The query and the arguments are not compared: a grant is
    /// for a kind of call, and says so when it is given.
    fn same_call(&self, other: &Summary) -> bool {
        self.agent == other.agent
            && self.aliases == other.aliases
            && self.rules == other.rules
            && self.method == other.method
            && self.scheme == other.scheme
            && self.host == other.host
            && self.port == other.port
            && self.path == other.path
            && self.tool == other.tool
    }
}

/// One held request, as listed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingView {
    /// The approval's id, what the operator decides on.
    pub id: String,
    /// The request.
    #[serde(flatten)]
    pub summary: Summary,
    /// Whole seconds left before it times out.
    pub seconds_left: u64,
}

/// One live grant, as listed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GrantView {
    /// The grant's id.
    pub id: String,
    /// The call it approves (its arguments are those of the request it was given on).
    #[serde(flatten)]
    pub summary: Summary,
    /// Who gave it.
    pub approver: String,
    /// Whole seconds left before it ends.
    pub seconds_left: u64,
    /// How many requests it has approved.
    pub used: u64,
}

/// How a held request was decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Send it. `grant` names the grant that approved it or that this approval opened.
    Approved {
        /// Who approved.
        approver: String,
        /// The grant that approved it without asking, or the grant this approval opened.
        grant: Option<String>,
    },
    /// Refuse it.
    Denied {
        /// Who denied.
        approver: String,
    },
    /// No decision came in time.
    TimedOut,
    /// The broker is shutting down.
    ShuttingDown,
}

/// Why a request could not be held.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HoldError {
    /// `max_pending` requests are held already.
    #[error("{limit} requests are already waiting for approval")]
    Full {
        /// The bound.
        limit: usize,
    },
    /// The agent has `max_pending_per_agent` requests held already.
    #[error("this agent already has {limit} requests waiting for approval")]
    AgentFull {
        /// The bound.
        limit: usize,
    },
    /// The broker is shutting down.
    #[error("the broker is shutting down")]
    ShuttingDown,
}

/// What an operator decides.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Approve this request, and with `grant`, later ones of the same call for that long.
    Approve {
        /// How long a grant lasts, if one is given.
        grant: Option<Duration>,
    },
    /// Deny it.
    Deny,
}

/// Why an operator's decision or revocation did nothing.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecideError {
    /// No request waits under this id: never held, or decided, timed out or abandoned already.
    #[error("no request is waiting under `{0}` (decided, timed out or withdrawn already?)")]
    NoSuchApproval(String),
    /// No live grant has this id.
    #[error("no live grant `{0}` (expired or revoked already?)")]
    NoSuchGrant(String),
    /// The grant asked for is zero or longer than [`MAX_GRANT`].
    #[error("a grant lasts from 1s to 8h")]
    GrantLength,
}

/// How a held request's entry left the book, for watchers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Closed {
    /// An operator approved it.
    Approved,
    /// An operator denied it.
    Denied,
    /// It timed out.
    TimedOut,
    /// The agent went away.
    Withdrawn,
    /// The broker shut down.
    ShuttingDown,
}

/// What watchers of the book are told.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum BookEvent {
    /// A request waits.
    Pending(PendingView),
    /// A request no longer waits.
    Closed {
        /// Its approval id.
        id: String,
        /// How.
        how: Closed,
    },
    /// A grant was given.
    Granted(GrantView),
    /// A grant was revoked.
    Revoked {
        /// The grant's id.
        id: String,
    },
}

/// The broker's held requests and live grants.
#[derive(Debug)]
pub struct ApprovalBook {
    bounds: ApprovalBounds,
    state: Mutex<BookState>,
    events: broadcast::Sender<BookEvent>,
}

#[derive(Debug, Default)]
struct BookState {
    shutting_down: bool,
    /// In the order they were held.
    pending: Vec<PendingEntry>,
    grants: Vec<GrantEntry>,
}

#[derive(Debug)]
struct PendingEntry {
    id: String,
    summary: Summary,
    deadline: Instant,
    respond: oneshot::Sender<Verdict>,
}

#[derive(Debug)]
struct GrantEntry {
    id: String,
    summary: Summary,
    approver: String,
    ends: Instant,
    used: u64,
}

/// The result of [`ApprovalBook::hold`].
#[derive(Debug)]
pub enum Held {
    /// A live grant approves the request without asking.
    Granted {
        /// The grant's id.
        grant: String,
        /// Who gave it.
        approver: String,
    },
    /// The request waits; `Ticket::wait` gives the verdict.
    Waiting(Ticket),
}

/// A held request's place in the book. Dropping it (the agent went away) takes the entry out.
#[derive(Debug)]
pub struct Ticket {
    id: String,
    deadline: Instant,
    book: Arc<ApprovalBook>,
    verdict: Option<oneshot::Receiver<Verdict>>,
}

// === impl ApprovalBook ===

impl ApprovalBook {
    /// An empty book with these bounds.
    pub fn new(bounds: ApprovalBounds) -> ApprovalBook {
        let (events, _) = broadcast::channel(EVENT_BACKLOG);
        ApprovalBook {
            bounds,
            state: Mutex::new(BookState::default()),
            events,
        }
    }

    /// Its bounds.
    pub fn bounds(&self) -> ApprovalBounds {
        self.bounds
    }

    fn state(&self) -> MutexGuard<'_, BookState> {
        // Every critical section leaves the state whole; a panic elsewhere cannot tear it.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Holds a request for `timeout`, or approves it at once when a live grant covers it.
    pub fn hold(self: &Arc<Self>, summary: Summary, timeout: Duration) -> Result<Held, HoldError> {
        let now = Instant::now();
        let mut state = self.state();
        if state.shutting_down {
            return Err(HoldError::ShuttingDown);
        }
        state.grants.retain(|grant| grant.ends > now);
        if let Some(grant) = state
            .grants
            .iter_mut()
            .find(|grant| grant.summary.same_call(&summary))
        {
            grant.used += 1;
            return Ok(Held::Granted {
                grant: grant.id.clone(),
                approver: grant.approver.clone(),
            });
        }
        if state.pending.len() >= self.bounds.max_pending {
            return Err(HoldError::Full {
                limit: self.bounds.max_pending,
            });
        }
        let of_agent = state
            .pending
            .iter()
            .filter(|entry| entry.summary.agent == summary.agent)
            .count();
        if of_agent >= self.bounds.max_pending_per_agent {
            return Err(HoldError::AgentFull {
                limit: self.bounds.max_pending_per_agent,
            });
        }
        let id = fresh_id("ap", |id| state.pending.iter().any(|entry| entry.id == id));
        let deadline = now + timeout;
        let (respond, verdict) = oneshot::channel();
        let view = PendingView {
            id: id.clone(),
            summary: summary.clone(),
            seconds_left: timeout.as_secs(),
        };
        state.pending.push(PendingEntry {
            id: id.clone(),
            summary,
            deadline,
            respond,
        });
        drop(state);
        let _ = self.events.send(BookEvent::Pending(view));
        Ok(Held::Waiting(Ticket {
            id,
            deadline,
            book: Arc::clone(self),
            verdict: Some(verdict),
        }))
    }

    /// An operator's decision on the held request `id`. Returns the grant it opened, if any.
    pub fn decide(
        &self,
        id: &str,
        decision: Decision,
        approver: &str,
    ) -> Result<Option<String>, DecideError> {
        if let Decision::Approve {
            grant: Some(length),
        } = &decision
            && (length.is_zero() || *length > MAX_GRANT)
        {
            return Err(DecideError::GrantLength);
        }
        let now = Instant::now();
        let mut state = self.state();
        let at = state
            .pending
            .iter()
            .position(|entry| entry.id == id && entry.deadline > now)
            .ok_or_else(|| DecideError::NoSuchApproval(id.to_owned()))?;
        let entry = state.pending.remove(at);
        let (verdict, grant, closed) = match decision {
            Decision::Deny => (
                Verdict::Denied {
                    approver: approver.to_owned(),
                },
                None,
                Closed::Denied,
            ),
            Decision::Approve { grant } => {
                let grant = grant.map(|length| {
                    let grant_id =
                        fresh_id("gr", |id| state.grants.iter().any(|grant| grant.id == id));
                    state.grants.push(GrantEntry {
                        id: grant_id.clone(),
                        summary: entry.summary.clone(),
                        approver: approver.to_owned(),
                        ends: now + length,
                        used: 0,
                    });
                    (grant_id, length)
                });
                (
                    Verdict::Approved {
                        approver: approver.to_owned(),
                        grant: grant.as_ref().map(|(id, _)| id.clone()),
                    },
                    grant,
                    Closed::Approved,
                )
            }
        };
        drop(state);
        // A request whose agent is leaving right now gets nothing: its ticket's drop audits it.
        let _ = entry.respond.send(verdict);
        let _ = self.events.send(BookEvent::Closed {
            id: entry.id,
            how: closed,
        });
        if let Some((grant_id, length)) = &grant {
            let _ = self.events.send(BookEvent::Granted(GrantView {
                id: grant_id.clone(),
                summary: entry.summary,
                approver: approver.to_owned(),
                seconds_left: length.as_secs(),
                used: 0,
            }));
        }
        Ok(grant.map(|(id, _)| id))
    }

    /// Ends the live grant `id`.
    pub fn revoke(&self, id: &str) -> Result<(), DecideError> {
        let now = Instant::now();
        let mut state = self.state();
        state.grants.retain(|grant| grant.ends > now);
        let at = state
            .grants
            .iter()
            .position(|grant| grant.id == id)
            .ok_or_else(|| DecideError::NoSuchGrant(id.to_owned()))?;
        state.grants.remove(at);
        drop(state);
        let _ = self.events.send(BookEvent::Revoked { id: id.to_owned() });
        Ok(())
    }

    /// The held requests, oldest first, and the live grants.
    pub fn list(&self) -> (Vec<PendingView>, Vec<GrantView>) {
        let now = Instant::now();
        let mut state = self.state();
        state.grants.retain(|grant| grant.ends > now);
        let pending = state
            .pending
            .iter()
            .filter(|entry| entry.deadline > now)
            .map(|entry| PendingView {
                id: entry.id.clone(),
                summary: entry.summary.clone(),
                seconds_left: seconds_left(entry.deadline, now),
            })
            .collect();
        let grants = state
            .grants
            .iter()
            .map(|grant| GrantView {
                id: grant.id.clone(),
                summary: grant.summary.clone(),
                approver: grant.approver.clone(),
                seconds_left: seconds_left(grant.ends, now),
                used: grant.used,
            })
            .collect();
        (pending, grants)
    }

    /// Whether the request held under `id` still waits.
    pub fn is_waiting(&self, id: &str) -> bool {
        let now = Instant::now();
        self.state()
            .pending
            .iter()
            .any(|entry| entry.id == id && entry.deadline > now)
    }

    /// The book's events from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<BookEvent> {
        self.events.subscribe()
    }

    /// The broker is shutting down: every held request is answered so, and none is held from now.
    pub fn shut_down(&self) {
        let mut state = self.state();
        state.shutting_down = true;
        let pending = std::mem::take(&mut state.pending);
        state.grants.clear();
        drop(state);
        for entry in pending {
            let _ = entry.respond.send(Verdict::ShuttingDown);
            let _ = self.events.send(BookEvent::Closed {
                id: entry.id,
                how: Closed::ShuttingDown,
            });
        }
    }

    /// Takes the entry `id` out if it is still there; `how` is told to watchers.
    fn withdraw(&self, id: &str, how: Closed) -> bool {
        let mut state = self.state();
        let Some(at) = state.pending.iter().position(|entry| entry.id == id) else {
            return false;
        };
        state.pending.remove(at);
        drop(state);
        let _ = self.events.send(BookEvent::Closed {
            id: id.to_owned(),
            how,
        });
        true
    }
}

// === impl Ticket ===

impl Ticket {
    /// The approval's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Waits for the verdict until the deadline. Exactly one of the operator, the deadline and
    /// the shutdown decides: the one that takes the entry out of the book.
    pub async fn wait(mut self) -> Verdict {
        let deadline = tokio::time::Instant::from_std(self.deadline);
        let Some(receiver) = self.verdict.as_mut() else {
            return Verdict::TimedOut;
        };
        // If this future is dropped while it waits (the agent went away), `self` is dropped with
        // the receiver still in it, and the drop takes the entry out.
        let verdict = match tokio::time::timeout_at(deadline, &mut *receiver).await {
            Ok(Ok(verdict)) => verdict,
            // The sender is only dropped with its entry, which `shut_down` answers first.
            Ok(Err(_)) => Verdict::ShuttingDown,
            Err(_) => {
                if self.book.withdraw(&self.id, Closed::TimedOut) {
                    Verdict::TimedOut
                } else {
                    // An operator took it out at the last moment: their verdict is on its way.
                    receiver.await.unwrap_or(Verdict::ShuttingDown)
                }
            }
        };
        self.verdict = None;
        verdict
    }
}

impl Drop for Ticket {
    /// The request stopped waiting before a verdict (the agent went away): its entry goes.
    fn drop(&mut self) {
        if self.verdict.is_some() {
            self.book.withdraw(&self.id, Closed::Withdrawn);
        }
    }
}

fn seconds_left(end: Instant, now: Instant) -> u64 {
    end.saturating_duration_since(now).as_secs()
}

/// `{prefix}-` and 8 random lowercase letters and digits, not yet `taken`. Not a secret: the
/// socket's peer check is what guards a decision. Random rather than counted so that an id from
/// before a restart never names a different request after it.
fn fresh_id(prefix: &str, taken: impl Fn(&str) -> bool) -> String {
    const ALPHABET: &[u8; 32] = b"abcdefghijkmnpqrstuvwxyz23456789";
    loop {
        let mut bytes = [0u8; 8];
        if getrandom::fill(&mut bytes).is_err() {
            // Without the OS's randomness, the clock still makes ids unlikely to repeat.
            let nanos = SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos());
            bytes = (nanos as u64).to_le_bytes();
        }
        let mut id = String::with_capacity(prefix.len() + 9);
        id.push_str(prefix);
        id.push('-');
        id.extend(
            bytes
                .iter()
                .map(|b| char::from(ALPHABET[usize::from(b & 31)])),
        );
        if !taken(&id) {
            return id;
        }
    }
}
