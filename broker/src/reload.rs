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
//! over the old one are both seen. A file is never loaded while it is still changing: a change
//! is loaded only once the file's identity stayed the same across two polls, and (where the
//! kernel's inotify is available) no writer has modified it since it last closed it, so an editor
//! that writes in several pieces and pauses between them is waited for; the descriptor read from
//! must show the version seen at the poll, before and after reading. SIGHUP reloads whatever the
//! files hold, changed or not, under the same rule: while a file is being written, the reload
//! waits for it.

use std::mem::MaybeUninit;
use std::os::fd::OwnedFd;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::time::Duration;

use mint_policy::audit::ReasonCode;
use rustix::fs::inotify;

use crate::credential_store::CredentialSources;
use crate::declarations::{Declarations, DeclarationsError};
use crate::proxy::AppState;
use crate::secure_file::FileStamp;

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

// === impl Reloader ===

impl Reloader {
    /// Loads the declarations now.
    pub fn load(&self) -> Result<Declarations, DeclarationsError> {
        Declarations::load(&self.policy, &self.aliases, &self.sources)
    }

    /// Reloads once: swaps the new declarations in, or keeps the old ones and reports why.
    /// Blocking (file reads, keyring); run it off the async threads.
    pub fn reload(&self, state: &AppState) -> Result<(), DeclarationsError> {
        self.reload_expecting(state, None).map(|_| ())
    }

    /// Reloads once if the files read are the versions `expected` (as the last poll saw them).
    /// Returns `Ok(false)`, swapping nothing and reporting nothing, when a file was caught
    /// changing: it is still being written, and the next poll tries again.
    fn reload_expecting(
        &self,
        state: &AppState,
        expected: Option<Stamps>,
    ) -> Result<bool, DeclarationsError> {
        let loaded = match self.load() {
            Err(error) if error.is_changing() => return Ok(false),
            Ok(loaded)
                if expected.is_some()
                    && loaded.stamps().map(|(p, a)| (Some(p), Some(a))) != expected =>
            {
                return Ok(false);
            }
            other => other,
        };
        match loaded.and_then(|loaded| state.replace_declarations(loaded)) {
            Ok(()) => {
                tracing::info!(
                    policy.file = %self.policy.display(),
                    aliases.file = %self.aliases.display(),
                    "Policy and aliases reloaded"
                );
                audit_event(state, "policy_reloaded");
                Ok(true)
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
        let paths = [self.policy.clone(), self.aliases.clone()];
        let mut writers = Writers::new();
        writers.follow(&paths);
        // What is in force (the versions the declarations were read from, so a change made
        // between the start-up load and now is not missed), what the previous poll saw, and
        // whether a reload is owed.
        let mut loaded = state
            .declarations()
            .stamps()
            .map_or_else(|| stamps(&paths), |(p, a)| (Some(p), Some(a)));
        let mut polled = loaded;
        let mut owed = false;
        let mut ticks = tokio::time::interval(POLL_INTERVAL);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let forced = tokio::select! {
                _ = ticks.tick() => false,
                Some(()) = recv(&mut hangup) => true,
            };
            if forced {
                tracing::info!("SIGHUP: reloading policy and aliases");
                owed = true;
            }
            writers.follow(&paths);
            let being_written = writers.drain();
            let now = stamps(&paths);
            if now != loaded {
                owed = true;
            }
            // Still changing: since the previous poll, or a writer has not closed it yet.
            let still = now == polled && !being_written;
            polled = now;
            if !owed || !still {
                continue;
            }
            let reloader = self.clone();
            let for_task = state.clone();
            let done = tokio::task::spawn_blocking(move || {
                reloader.reload_expecting(&for_task, Some(now))
            })
            .await;
            match done {
                // Caught changing: the next polls wait for it to settle.
                Ok(Ok(false)) => {}
                // Loaded, or failed (logged and audited inside): either way this version is done.
                Ok(Ok(true) | Err(_)) | Err(_) => {
                    owed = false;
                    loaded = now;
                }
            }
        }
    }
}

/// The versions of the policy and alias files (`None` for one that cannot be looked at).
type Stamps = (Option<FileStamp>, Option<FileStamp>);

fn stamps([policy, aliases]: &[PathBuf; 2]) -> Stamps {
    (FileStamp::at(policy).ok(), FileStamp::at(aliases).ok())
}

/// Which watched files a writer modified and has not closed since, from the kernel's inotify
/// events (`IN_MODIFY`, `IN_CLOSE_WRITE`). Without inotify (an old kernel, a file system that does
/// not report, a limit reached) it knows nothing and the two-poll rule alone applies.
struct Writers {
    inotify: Option<OwnedFd>,
    files: [Watched; 2],
}

/// One file's watch.
#[derive(Clone, Copy, Default)]
struct Watched {
    /// The inode the path named when the watch was added.
    inode: Option<(u64, u64)>,
    /// The watch descriptor on that inode.
    wd: Option<i32>,
    /// Whether a write to it was seen and its writer has not closed it since.
    open: bool,
}

// === impl Writers ===

impl Writers {
    fn new() -> Writers {
        let inotify = inotify::init(inotify::CreateFlags::CLOEXEC | inotify::CreateFlags::NONBLOCK)
            .map_err(|error| {
                tracing::warn!(error = %error, "No inotify: file changes are seen by polling only");
            })
            .ok();
        Writers {
            inotify,
            files: [Watched::default(); 2],
        }
    }

    /// Watches the file each path names now (a file renamed over the old one is a new inode).
    fn follow(&mut self, paths: &[PathBuf; 2]) {
        let Some(fd) = &self.inotify else {
            return;
        };
        for (file, path) in self.files.iter_mut().zip(paths) {
            let inode = std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()));
            if inode == file.inode {
                continue;
            }
            if let Some(old) = file.wd.take() {
                // The old inode's writers no longer matter. It may be gone already, or be the
                // other file's too (then adding that one's watch again below restores it).
                let _ = inotify::remove_watch(fd, old);
            }
            *file = Watched {
                inode,
                wd: None,
                open: false,
            };
            if inode.is_none() {
                continue;
            }
            match inotify::add_watch(
                fd,
                path.as_path(),
                inotify::WatchFlags::MODIFY | inotify::WatchFlags::CLOSE_WRITE,
            ) {
                Ok(wd) => file.wd = Some(wd),
                Err(error) => {
                    tracing::debug!(error = %error, file = %path.display(), "Cannot watch the file for writers");
                }
            }
        }
    }

    /// Reads the events queued since the last call; returns whether a file is being written.
    fn drain(&mut self) -> bool {
        let Some(fd) = &self.inotify else {
            return false;
        };
        let mut buffer = [MaybeUninit::<u8>::uninit(); 4096];
        let mut reader = inotify::Reader::new(fd, &mut buffer);
        loop {
            match reader.next() {
                Ok(event) => {
                    // Events of a watch on an inode the path no longer names are stale; an inode
                    // that is both files counts for both.
                    let events = event.events();
                    if events.contains(inotify::ReadFlags::QUEUE_OVERFLOW) {
                        // Events were lost, a close among them perhaps: forget what is known,
                        // and let the two-poll rule alone decide until the next write is seen.
                        for file in &mut self.files {
                            file.open = false;
                        }
                        continue;
                    }
                    for file in self.files.iter_mut().filter(|f| f.wd == Some(event.wd())) {
                        if events.contains(inotify::ReadFlags::CLOSE_WRITE) {
                            file.open = false;
                        } else if events.contains(inotify::ReadFlags::MODIFY) {
                            file.open = true;
                        }
                    }
                }
                Err(rustix::io::Errno::INTR) => {}
                // WOULDBLOCK: nothing more queued. Anything else: stop for this poll.
                Err(_) => break,
            }
        }
        self.files.iter().any(|f| f.open)
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
