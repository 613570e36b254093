//! Hot reload of the policy and alias files (and with them, the alias secrets): on SIGHUP, and when
//! either file changes on disk.
//!
//! A reload loads everything into a new [`Declarations`] off the async threads and swaps it in
//! only when all of it loaded; requests in flight keep the policy and secrets they were decided
//! with, while every answer is scrubbed with the newest secrets as well as the old ones. A file
//! that fails to load keeps the last good version in force, and the failure is logged (with the
//! first error as `path:line:col`) and audited as a `policy_reload_failed` event;
//! `mint policy check` explains the policy's errors in full. A good reload is audited as
//! `policy_reloaded`. Call-limit counters survive reloads. A reload that failed only on
//! keyring secrets is tried again [`KEYRING_RETRIES`] times, [`KEYRING_RETRY_INTERVAL`] apart
//! (each failure logged and audited as well): a keyring daemon may catch up with a change made
//! from another session a moment after the alias file changed.
//!
//! Change detection polls each file's identity (device, inode, size, modification and change
//! times) every [`POLL_INTERVAL`]: editors that write in place and tools that rename a new file
//! over the old one are both seen. A file is never loaded while it is still changing: a change
//! is loaded only once the file's identity stayed the same across two polls and (where the
//! kernel's inotify is available) the file is not *dirty*. A change of content (`IN_MODIFY`,
//! or a stamp that moves with no event to explain it: stores through `mmap` send none) makes it
//! dirty; it is clean again when a descriptor opened for writing is closed after that change
//! (`IN_CLOSE_WRITE`), or when every descriptor Mint counted open on it is closed (a change by
//! path with nothing open: `truncate(2)`). Only a descriptor that can write can leave a file
//! half-written, and inotify tells its close from a read-only one (`IN_CLOSE_NOWRITE`): so
//! another user who may read the file (Mint refuses only write bits for others) can neither
//! release a writer's half-written file (by flooding opens until the queue overflows) nor hold
//! a finished one back (by keeping a descriptor open). A change of attributes only (`touch`)
//! after the content changed makes the next close for writing that program's: it releases
//! nothing, so `touch` while an editor writes does not load the editor's prefix. When inotify's
//! queue overflows, a dirty file stays dirty and the open count of that inode is no longer
//! trusted; since the writer's own close may have been lost, a dirty file that then stays
//! unchanged for [`LOST_EVENTS_SETTLE`] is loaded as it is (logged, audited as
//! `policy_reload_unconfirmed`). The descriptor read from must show the version seen at the
//! poll, before and after reading. SIGHUP reloads whatever the files hold, changed or not,
//! under the same rule: while a file is being written, the reload waits for it, and a wait
//! longer than [`WAIT_WARNING`] (for a writer, or for a file that never stays unchanged for two
//! polls) is logged and audited once (`policy_reload_waiting`). A SIGHUP sent after that report
//! is the operator's word: the files are loaded as they are once unchanged for two polls
//! (logged, audited as `policy_reload_unconfirmed`), the escape from a wait no writer will end
//! (a `truncate(2)` by path while another program holds the file open).

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

/// How long a file being written must stay unchanged, once inotify events were lost (the
/// queue overflowed), before it is loaded as it is: its writer's close may have been lost.
pub const LOST_EVENTS_SETTLE: Duration = Duration::from_secs(30);

/// How long after a reload that failed on a keyring secret it is tried again.
pub const KEYRING_RETRY_INTERVAL: Duration = Duration::from_secs(2);

/// How many times such a reload is tried again before the next change or SIGHUP.
pub const KEYRING_RETRIES: u32 = 5;

/// What a reload reads.
#[derive(Clone, Debug)]
pub struct Reloader {
    /// The policy file.
    pub policy: PathBuf,
    /// The alias file.
    pub aliases: PathBuf,
    /// Where alias secrets come from.
    pub sources: CredentialSources,
    /// The key value-shaped placeholders are derived from.
    pub placeholder_key: PathBuf,
}

// === impl Reloader ===

impl Reloader {
    /// Loads the declarations now.
    pub fn load(&self) -> Result<Declarations, DeclarationsError> {
        Declarations::load(
            &self.policy,
            &self.aliases,
            &self.sources,
            &self.placeholder_key,
        )
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
                crate::serve::warn_hosts_outside_ca(state);
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
        // When a file last changed (for the long stable spell after lost events), and whether
        // the operator's SIGHUP, sent after a wait was reported, loads the files as they are.
        let mut changed_at = tokio::time::Instant::now();
        let mut hangup_forces = false;
        // When a reload that failed on a keyring secret is tried again, and how often it was.
        let mut keyring_retry: Option<(tokio::time::Instant, u32)> = None;
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
                if waiting.is_some_and(|(_, reported)| reported) {
                    hangup_forces = true;
                }
            }
            writers.follow(&paths);
            writers.drain();
            let now = stamps(&paths);
            writers.settle(polled, now);
            let being_written = writers.being_written();
            if now != loaded {
                owed = true;
                keyring_retry = None;
            }
            if let Some((at, _)) = keyring_retry
                && tokio::time::Instant::now() >= at
            {
                owed = true;
            }
            let stable = now == polled;
            if !stable {
                changed_at = tokio::time::Instant::now();
            }
            polled = now;
            if !owed {
                waiting = None;
                hangup_forces = false;
                continue;
            }
            // A file still being written is loaded as it is only on the operator's word (a
            // SIGHUP after the wait was reported), or when events were lost and it has not
            // changed for a long time (its writer's close may have been among them).
            let unconfirmed = being_written
                && stable
                && (hangup_forces
                    || (writers.only_lost() && changed_at.elapsed() >= LOST_EVENTS_SETTLE));
            // Still changing: since the previous poll, or a writer has not closed it yet.
            let still = stable && (!being_written || unconfirmed);
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
                            "Reload waits: the policy or alias file was changed and the program that changed it has not closed it yet; the last good version stays in force until it does (or until a SIGHUP from now on loads the file as it is)"
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
            if unconfirmed {
                tracing::warn!(
                    policy.file = %self.policy.display(),
                    aliases.file = %self.aliases.display(),
                    on_sighup = hangup_forces,
                    "Reload of a file no writer was seen to finish: loading it as it is (SIGHUP after a reported wait, or inotify events lost and the file unchanged since)"
                );
                audit_event(&state, "policy_reload_unconfirmed");
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
                // Loaded, or failed (logged and audited inside): either way this version is done,
                // except that a keyring secret that could not be read is tried again a few times
                // (the keyring may catch up: a Secret Service daemon reloading files another
                // session's daemon changed).
                Ok(Ok(true) | Err(_)) | Err(_) => {
                    let keyring_failed = matches!(&done, Ok(Err(error)) if error.is_keyring());
                    keyring_retry = match keyring_retry {
                        Some((_, tries)) if keyring_failed && tries < KEYRING_RETRIES => Some((
                            tokio::time::Instant::now() + KEYRING_RETRY_INTERVAL,
                            tries + 1,
                        )),
                        None if keyring_failed => {
                            Some((tokio::time::Instant::now() + KEYRING_RETRY_INTERVAL, 1))
                        }
                        _ => None,
                    };
                    if keyring_retry.is_some() {
                        tracing::info!(
                            retry_in_s = KEYRING_RETRY_INTERVAL.as_secs(),
                            "A keyring secret could not be read; the reload is tried again"
                        );
                    }
                    owed = false;
                    hangup_forces = false;
                    loaded = now;
                    if unconfirmed {
                        writers.clean();
                    }
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

/// Which watched files are being written, from the kernel's inotify events and the files'
/// stamps. A file is *dirty* from a change of its content (`IN_MODIFY`, or a stamp that moved
/// with no event to explain it: stores through a shared mapping send none) until a writer
/// confirms it finished: a close of a descriptor opened for writing (`IN_CLOSE_WRITE`) after
/// that change, or every descriptor counted open on it closed. Read-only descriptors (another
/// user's, when the file is readable by others) therefore neither release a dirty file (their
/// close is `IN_CLOSE_NOWRITE`, and the open count is only trusted while no event was lost)
/// nor hold one (a writer's `IN_CLOSE_WRITE` releases it whatever else is open). A change of
/// attributes only (`IN_ATTRIB`: `touch`) after the content changed means the next close for
/// writing is that program's, not the content writer's, so it releases nothing. When the queue
/// overflows, what was lost is unknown: a dirty file stays dirty, the open count is no longer
/// trusted for this inode, and the caller may load it after a long stable spell
/// ([`LOST_EVENTS_SETTLE`]). Without inotify (an old kernel, a file system that does not
/// report, a limit reached) it knows nothing and the two-poll rule alone applies.
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
    /// Changed, and no writer has confirmed finishing since.
    dirty: bool,
    /// Whether the last change of a dirty file was to its content (not only its attributes):
    /// only then does a close for writing confirm the writer finished.
    content_last: bool,
    /// Events of this inode were lost (queue overflow): `open` is not to be trusted.
    lost: bool,
    /// Whether an event that moves the stamp (`IN_MODIFY`, `IN_ATTRIB`, `IN_CLOSE_WRITE`) was
    /// read since the last poll.
    explained: bool,
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
                    | inotify::WatchFlags::ATTRIB
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

    /// Completes a poll, after [`Writers::drain`]: a file whose stamp moved between `before`
    /// and `now` (the same inode) with no event read to explain it was changed through a
    /// shared mapping (no `IN_MODIFY`), and counts as changed after every event read so far; a
    /// dirty file with no descriptor open is done being written, while the count is trusted.
    fn settle(&mut self, before: Stamps, now: Stamps) {
        if self.inotify.is_none() {
            return;
        }
        for (file, (before, now)) in self
            .files
            .iter_mut()
            .zip([(before.0, now.0), (before.1, now.1)])
        {
            let explained = std::mem::take(&mut file.explained);
            if file.wd.is_none() {
                continue;
            }
            if let (Some(before), Some(now)) = (before, now)
                && before != now
                && before.same_file(&now)
                && !explained
            {
                file.dirty = true;
                file.content_last = true;
            }
            if file.open == 0 && !file.lost {
                file.dirty = false;
            }
        }
    }

    /// Whether a file is being written, as far as the events and stamps tell.
    fn being_written(&self) -> bool {
        self.files.iter().any(|f| f.dirty)
    }

    /// Whether every file being written lost events (so no writer's close may ever be seen).
    fn only_lost(&self) -> bool {
        self.files.iter().all(|f| !f.dirty || f.lost)
    }

    /// Forgets that the files are being written (they were loaded as they are).
    fn clean(&mut self) {
        for file in &mut self.files {
            file.dirty = false;
        }
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
                        // Events were lost, a writer's close among them perhaps, or a read-only
                        // opener's flood: a dirty file stays dirty, and the count of open
                        // descriptors is no longer known (it must not release anything).
                        // Changes lost show in the stamps at the next polls.
                        for file in &mut self.files {
                            file.lost = true;
                            file.open = 0;
                        }
                        tracing::debug!(
                            "inotify queue overflow: reload waits for a writer's close or a long stable spell"
                        );
                        continue;
                    }
                    for file in self.files.iter_mut().filter(|f| f.wd == Some(event.wd())) {
                        // One event may carry several flags; an open comes before the writes
                        // and the close of its descriptor.
                        if events.contains(inotify::ReadFlags::OPEN) {
                            file.open = file.open.saturating_add(1);
                        }
                        if events.contains(inotify::ReadFlags::MODIFY) {
                            file.dirty = true;
                            file.content_last = true;
                            file.explained = true;
                        }
                        if events.contains(inotify::ReadFlags::ATTRIB) {
                            // `touch` while an editor writes: its close confirms nothing.
                            file.content_last = false;
                            file.explained = true;
                        }
                        if events.contains(inotify::ReadFlags::CLOSE_WRITE) {
                            file.explained = true;
                            if file.dirty && file.content_last {
                                file.dirty = false;
                            }
                        }
                        if events.intersects(
                            inotify::ReadFlags::CLOSE_WRITE | inotify::ReadFlags::CLOSE_NOWRITE,
                        ) {
                            file.open = file.open.saturating_sub(1);
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

/// Audits an event of the declarations' life (a reload, a refresh of a secret) with `reason`.
pub(crate) fn audit_event(state: &AppState, reason: &str) {
    let Ok(reason) = ReasonCode::new(reason) else {
        return;
    };
    if let Err(error) = state.audit().event(reason) {
        tracing::error!(error = %error, "Declarations event not audited");
    }
}
