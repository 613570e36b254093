//! Hot reload of the policy and alias files (and with them, the alias secrets): on SIGHUP, and when
//! either file changes on disk.
//!
//! A reload loads everything into a new [`Declarations`] off the async threads and swaps it in
//! only when all of it loaded; requests in flight keep the policy and secrets they were decided
//! with, while every answer is scrubbed with the newest secrets as well as the old ones. A file
//! that fails to load keeps the last good version in force, and the failure is logged (with the
//! first error as `path:line:col`) and audited as a `policy_reload_failed` event;
//! `mint policy check` explains the policy's errors in full. A good reload is audited as
//! `policy_reloaded`. Call-limit counters survive reloads.
//!
//! Change detection polls each file's identity (device, inode, size, modification and change
//! times) every [`POLL_INTERVAL`]: editors that write in place and tools that rename a new file
//! over the old one are both seen. SIGHUP reloads whatever the files hold, changed or not.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use mint_policy::audit::ReasonCode;

use crate::credential_store::CredentialSources;
use crate::declarations::{Declarations, DeclarationsError};
use crate::proxy::AppState;

/// How often the files are checked for changes.
pub const POLL_INTERVAL: Duration = Duration::from_millis(500);

/// What a reload reads.
#[derive(Clone, Debug)]
pub struct Reloader {
    /// The policy file.
    pub policy: PathBuf,
    /// The alias file.
    pub aliases: PathBuf,
    /// Where alias secrets come from.
    pub sources: CredentialSources,
}

/// The identity of a file's current content, as far as metadata tells.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Fingerprint {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

// === impl Reloader ===

impl Reloader {
    /// Loads the declarations now.
    pub fn load(&self) -> Result<Declarations, DeclarationsError> {
        Declarations::load(&self.policy, &self.aliases, &self.sources)
    }

    /// Reloads once: swaps the new declarations in, or keeps the old ones and reports why.
    /// Blocking (file reads, keyring); run it off the async threads.
    pub fn reload(&self, state: &AppState) -> Result<(), DeclarationsError> {
        match self
            .load()
            .and_then(|loaded| state.replace_declarations(loaded))
        {
            Ok(()) => {
                tracing::info!(
                    policy.file = %self.policy.display(),
                    aliases.file = %self.aliases.display(),
                    "Policy and aliases reloaded"
                );
                audit_event(state, "policy_reloaded");
                Ok(())
            }
            Err(error) => {
                tracing::error!(error = %error, "Reload failed; the last good policy and aliases stay in force");
                audit_event(state, "policy_reload_failed");
                Err(error)
            }
        }
    }

    /// Watches for SIGHUP and file changes until the task is aborted.
    pub async fn watch(self, state: AppState) {
        let mut hangup = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
        {
            Ok(signal) => Some(signal),
            Err(error) => {
                tracing::warn!(error = %error, "Cannot listen for SIGHUP; reloading on file changes only");
                None
            }
        };
        let mut seen = (fingerprint(&self.policy), fingerprint(&self.aliases));
        let mut ticks = tokio::time::interval(POLL_INTERVAL);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let forced = tokio::select! {
                _ = ticks.tick() => false,
                Some(()) = recv(&mut hangup) => true,
            };
            let now = (fingerprint(&self.policy), fingerprint(&self.aliases));
            if !forced && now == seen {
                continue;
            }
            seen = now;
            if forced {
                tracing::info!("SIGHUP: reloading policy and aliases");
            }
            let reloader = self.clone();
            let for_task = state.clone();
            // A failure is logged and audited inside; nothing more to do with it here.
            let _ = tokio::task::spawn_blocking(move || reloader.reload(&for_task)).await;
        }
    }
}

async fn recv(signal: &mut Option<tokio::signal::unix::Signal>) -> Option<()> {
    match signal {
        Some(signal) => signal.recv().await,
        None => std::future::pending().await,
    }
}

fn audit_event(state: &AppState, reason: &str) {
    let Ok(reason) = ReasonCode::new(reason) else {
        return;
    };
    if let Err(error) = state.audit().event(reason) {
        tracing::error!(error = %error, "Reload event not audited");
    }
}

/// The file's identity now; `None` when it cannot be read (a reload then reports why).
fn fingerprint(path: &Path) -> Option<Fingerprint> {
    let metadata = std::fs::metadata(path).ok()?;
    Some(Fingerprint {
        dev: metadata.dev(),
        ino: metadata.ino(),
        size: metadata.size(),
        mtime: (metadata.mtime(), metadata.mtime_nsec()),
        ctime: (metadata.ctime(), metadata.ctime_nsec()),
    })
}
