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
//! kernel's inotify is available) no writer is at work on it: inotify counts the descriptors
//! opened on the file and closed again, and a file that was modified while some were open waits
//! until all are closed, so an editor that writes in several pieces and pauses between them is
//! waited for, even when another program opens and closes the file meanwhile (`touch`); a
//! stamp that moves while descriptors are open is a write too (stores through `mmap` send no
//! `IN_MODIFY`). A change
//! made with no descriptor open that Mint saw opened (`truncate(2)` by path, a writer that opened
//! the file before Mint watched it) is left to the two-poll rule. The descriptor read from must
//! show the version seen at the poll, before and after reading. SIGHUP reloads whatever the files
//! hold, changed or not, under the same rule: while a file is being written, the reload waits for
//! it, and a wait longer than [`WAIT_WARNING`] (for a writer, or for a file that never stays
//! unchanged for two polls) is logged and audited once (`policy_reload_waiting`): the last good
//! version stays in force until the writer closes.

use std::mem::MaybeUninit;
use std::os::fd::OwnedFd;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::time::Duration;

use mint_policy::audit::ReasonCode;
use rustix::fs::inotify;

use crate::config::declarations::{Declarations, DeclarationsError};
use crate::config::secure_file::FileStamp;
use crate::proxy::AppState;
use crate::secrets::credential_store::CredentialSources;

/// How often the files are checked for changes.
pub const POLL_INTERVAL: Duration = Duration::from_millis(500);

/// How long a reload waits for a file being written before it says so.
pub const WAIT_WARNING: Duration = Duration::from_secs(10);

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
        // Since when a reload owed has waited for a writer, and whether that was reported.
        let mut waiting: Option<(tokio::time::Instant, bool)> = None;
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
            writers.drain();
            let now = stamps(&paths);
            // A change since the previous poll to a file that descriptors still hold open is a
            // write even without an IN_MODIFY event: stores through a shared mapping (`mmap`)
            // send none.
            writers.changed_while_open(polled, now);
            let being_written = writers.being_written();
            if now != loaded {
                owed = true;
            }
            // Still changing: since the previous poll, or a writer has not closed it yet.
            let still = now == polled && !being_written;
            polled = now;
            if !owed {
                waiting = None;
                continue;
            }
            if !still {
                // Whatever holds the reload back (a writer that keeps the file open, or changes
                // that never stop for two polls), a long wait is said once.
                let (since, reported) = waiting.get_or_insert((tokio::time::Instant::now(), false));
                if !*reported && since.elapsed() >= WAIT_WARNING {
                    *reported = true;
                    if being_written {
                        tracing::warn!(
                            policy.file = %self.policy.display(),
                            aliases.file = %self.aliases.display(),
                            waited_s = since.elapsed().as_secs(),
                            "Reload waits: a program still holds the policy or alias file open after changing it; the last good version stays in force until it closes the file"
                        );
                    } else {
                        tracing::warn!(
                            policy.file = %self.policy.display(),
                            aliases.file = %self.aliases.display(),
                            waited_s = since.elapsed().as_secs(),
                            "Reload waits: the policy or alias file keeps changing; the last good version stays in force until it stays unchanged for two polls"
                        );
                    }
                    audit_event(&state, "policy_reload_waiting");
                }
                continue;
            }
            waiting = None;
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

/// Which watched files are being written, from the kernel's inotify events: the descriptors
/// opened on each (`IN_OPEN`) and not closed since (`IN_CLOSE_WRITE`, `IN_CLOSE_NOWRITE`), and
/// whether it was modified (`IN_MODIFY`) while one was open. Events do not say which descriptor
/// wrote, so any open one counts as its writer's: a file modified while descriptors were open
/// is being written until all of them are closed. Without inotify (an old kernel, a file system
/// that does not report, a limit reached) it knows nothing and the two-poll rule alone applies.
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
    /// Descriptors seen opened and not closed since (a close of one opened before the watch
    /// counts for nothing).
    open: u32,
    /// Whether it was modified while `open` was above 0, since `open` was last 0.
    written: bool,
}

impl Watched {
    fn being_written(&self) -> bool {
        self.open > 0 && self.written
    }

    /// What was known is lost (events dropped): from here on, the two-poll rule.
    fn forget(&mut self) {
        self.open = 0;
        self.written = false;
    }
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
                ..Watched::default()
            };
            if inode.is_none() {
                continue;
            }
            match inotify::add_watch(
                fd,
                path.as_path(),
                inotify::WatchFlags::MODIFY
                    | inotify::WatchFlags::OPEN
                    | inotify::WatchFlags::CLOSE_WRITE
                    | inotify::WatchFlags::CLOSE_NOWRITE,
            ) {
                Ok(wd) => file.wd = Some(wd),
                Err(error) => {
                    tracing::debug!(error = %error, file = %path.display(), "Cannot watch the file for writers");
                }
            }
        }
    }

    /// Marks as being written each file whose stamp moved between `before` and `now` (the same
    /// inode) while descriptors are open on it: writes through a shared mapping change the
    /// file's times but send no IN_MODIFY. Call after [`Writers::drain`], with the
    /// descriptors open now.
    fn changed_while_open(&mut self, before: Stamps, now: Stamps) {
        for (file, (before, now)) in self
            .files
            .iter_mut()
            .zip([(before.0, now.0), (before.1, now.1)])
        {
            let (Some(before), Some(now)) = (before, now) else {
                continue;
            };
            if file.open > 0 && before != now && before.same_file(&now) {
                file.written = true;
            }
        }
    }

    /// Whether a file is being written, as far as the events drained tell.
    fn being_written(&self) -> bool {
        self.files.iter().any(Watched::being_written)
    }

    /// Reads the events queued since the last call.
    fn drain(&mut self) {
        let Some(fd) = &self.inotify else {
            return;
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
                            file.forget();
                        }
                        continue;
                    }
                    for file in self.files.iter_mut().filter(|f| f.wd == Some(event.wd())) {
                        // One event may carry several flags; an open comes before the writes
                        // and the close of its descriptor.
                        if events.contains(inotify::ReadFlags::OPEN) {
                            file.open = file.open.saturating_add(1);
                        }
                        if events.contains(inotify::ReadFlags::MODIFY) && file.open > 0 {
                            file.written = true;
                        }
                        if events.intersects(
                            inotify::ReadFlags::CLOSE_WRITE | inotify::ReadFlags::CLOSE_NOWRITE,
                        ) {
                            file.open = file.open.saturating_sub(1);
                            if file.open == 0 {
                                file.written = false;
                            }
                        }
                    }
                }
                Err(rustix::io::Errno::INTR) => {}
                // WOULDBLOCK: nothing more queued. Anything else: stop for this poll.
                Err(_) => break,
            }
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
