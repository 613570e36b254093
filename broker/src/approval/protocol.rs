//! The operator socket's protocol: one JSON object per line each way.
//!
//! The client writes one [`Command`]; the broker answers with one [`Reply`] line, and for `watch`
//! keeps writing: a [`Reply`] with the current list, then one [`crate::approval::BookEvent`] per
//! line (a watcher that fell behind gets a fresh list, `resync: true`). Both ends are Mint's own
//! (`mint serve` and `mint approvals`); the format is documented in docs/approvals.md for scripts.

use serde::{Deserialize, Serialize};

use super::{GrantView, PendingView};

/// The longest command line the broker reads.
pub const MAX_COMMAND_BYTES: usize = 4096;

/// The socket's file name in MINT_HOME.
pub const SOCKET_NAME: &str = "approvals.sock";

/// What an operator asks.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum Command {
    /// The held requests and live grants.
    List,
    /// Approve a held request; with `grant_seconds`, later ones of the same call too, that long.
    Approve {
        /// The approval id.
        id: String,
        /// How long the grant lasts, in seconds.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        grant_seconds: Option<u64>,
    },
    /// Deny a held request.
    Deny {
        /// The approval id.
        id: String,
    },
    /// End a grant.
    Revoke {
        /// The grant id.
        grant: String,
    },
    /// The list, then every event as it happens, until the client leaves.
    Watch,
}

/// The broker's answer to a command.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reply {
    /// Whether the command did what it asked.
    pub ok: bool,
    /// Why not, when it did not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// For `list` and `watch`: the held requests, oldest first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending: Option<Vec<PendingView>>,
    /// For `list` and `watch`: the live grants.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grants: Option<Vec<GrantView>>,
    /// For `approve` with a grant: its id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grant: Option<String>,
    /// Who the broker saw deciding (`approve`, `deny`, `revoke`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approver: Option<String>,
    /// For `watch`: this list replaces what the watcher knew (it fell behind).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub resync: bool,
}

// === impl Reply ===

impl Reply {
    /// A refusal saying why.
    pub fn refused(error: impl Into<String>) -> Reply {
        Reply {
            ok: false,
            error: Some(error.into()),
            ..Reply::default()
        }
    }
}
