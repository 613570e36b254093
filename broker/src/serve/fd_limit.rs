//! The file descriptor budget of `mint serve`: at start the soft `RLIMIT_NOFILE` is raised to
//! the hard limit (the common soft limit, 1024, runs out near 500 open WebSockets), and
//! `--max-connections` is compared with what the limit allows.
//!
//! Each agent connection Mint serves holds about [`FDS_PER_CONNECTION`] descriptors (the
//! agent's socket and the upstream's: a WebSocket or a tunnel holds both for its whole life), and
//! the broker itself holds about [`FDS_RESERVED`] (the listener, the runtime, the audit log, the
//! file watches, idle pooled upstream connections). A cap the limit cannot meet is logged as a
//! warning with the figures and the fix, never refused: past the limit an `accept` fails with
//! `EMFILE`, which the accept loop survives (connections wait in the listen backlog).
//! Never lowers a limit.

use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};

/// File descriptors one agent connection may hold: its own socket and the upstream's.
pub(crate) const FDS_PER_CONNECTION: u64 = 2;

/// File descriptors the broker holds besides its connections.
pub(crate) const FDS_RESERVED: u64 = 64;

/// The soft limit to try when the hard limit is unlimited (Linux refuses an unlimited
/// `RLIMIT_NOFILE`; `fs.nr_open` defaults to this).
const UNLIMITED_FALLBACK: u64 = 1 << 20;

/// The open-file limit in force once raised.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FdLimit {
    /// The soft limit before Mint raised it.
    pub(crate) before: u64,
    /// The soft limit in force.
    pub(crate) soft: u64,
    /// The hard limit (`None`: unlimited).
    pub(crate) hard: Option<u64>,
}

// === impl FdLimit ===

impl FdLimit {
    /// How many agent connections this limit can serve at once.
    pub(crate) fn connections(self) -> u64 {
        self.soft.saturating_sub(FDS_RESERVED) / FDS_PER_CONNECTION
    }

    /// How many file descriptors `max_connections` connections need.
    pub(crate) fn needed(max_connections: usize) -> u64 {
        (max_connections as u64)
            .saturating_mul(FDS_PER_CONNECTION)
            .saturating_add(FDS_RESERVED)
    }
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit, and logs the limit in force; then warns
/// when `max_connections` needs more descriptors than it allows.
pub(crate) fn raise_and_check(max_connections: usize) -> FdLimit {
    let limit = raise();
    if limit.soft > limit.before {
        tracing::info!(
            fd.soft_before = limit.before,
            fd.soft = limit.soft,
            "Raised the open-file limit (RLIMIT_NOFILE) to its hard limit"
        );
    } else {
        tracing::info!(fd.soft = limit.soft, "Open-file limit (RLIMIT_NOFILE)");
    }
    let needed = FdLimit::needed(max_connections);
    if needed > limit.soft {
        tracing::warn!(
            fd.soft = limit.soft,
            fd.needed = needed,
            max_connections,
            connections = limit.connections(),
            "The open-file limit cannot serve --max-connections: past about `connections` open connections (WebSockets, tunnels) accepts fail with EMFILE and wait; raise the hard limit (LimitNOFILE= in a systemd unit, `ulimit -Hn`) or lower --max-connections"
        );
    }
    limit
}

/// The soft limit in force now, for a message.
pub(crate) fn current() -> u64 {
    getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX)
}

/// Raises the soft limit to the hard one (a fallback below it when the hard limit is
/// unlimited); the limit as it stands when that fails.
fn raise() -> FdLimit {
    let Rlimit { current, maximum } = getrlimit(Resource::Nofile);
    let before = current.unwrap_or(u64::MAX);
    let target = maximum.unwrap_or(UNLIMITED_FALLBACK);
    if target <= before {
        return FdLimit {
            before,
            soft: before,
            hard: maximum,
        };
    }
    let raised = setrlimit(
        Resource::Nofile,
        Rlimit {
            current: Some(target),
            maximum,
        },
    );
    if let Err(error) = raised {
        tracing::warn!(error = %error, fd.soft = before, "Could not raise the open-file limit");
    }
    let now = getrlimit(Resource::Nofile);
    FdLimit {
        before,
        soft: now.current.unwrap_or(u64::MAX),
        hard: now.maximum,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_counts_two_descriptors_a_connection_and_a_reserve() {
        assert_eq!(FdLimit::needed(1024), 2 * 1024 + FDS_RESERVED);
        let limit = FdLimit {
            before: 1024,
            soft: 1024,
            hard: Some(1024),
        };
        assert_eq!(limit.connections(), (1024 - FDS_RESERVED) / 2);
        let tiny = FdLimit {
            before: 10,
            soft: 10,
            hard: Some(10),
        };
        assert_eq!(tiny.connections(), 0);
        assert_eq!(FdLimit::needed(usize::MAX), u64::MAX);
    }
}
