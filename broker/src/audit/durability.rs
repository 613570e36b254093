//! When written audit lines reach the disk: the durability modes, the background flusher and
//! group commit.
//!
//! Every record is in the file (one `write(2)`) before `record` returns, in every mode: that
//! survives a crash of Mint. What the modes change is when `fdatasync(2)` makes it survive a
//! crash of the machine. One background thread per log, the flusher, does every fsync, so
//! writers never hold the file lock during one, and callers that wait share it: an fsync covers
//! every record written before it started (group commit).
//!
//! An fsync failure is permanent for the open log: after one, Linux may have dropped the dirty
//! pages and a retried fsync can falsely succeed (PostgreSQL's "fsyncgate"), so nothing is ever
//! reported durable again. Every caller waiting for that fsync gets an error
//! (`AuditError::NotDurable`), every later record is refused (`AuditError::Unavailable`, so the
//! proxy answers 503 `audit_unavailable`), and Mint's log says why once. Only opening the log
//! again (restarting Mint) ends it. Unit tests replace the fsync through a seam that exists only
//! under `cfg(test)`.

use std::fmt;
use std::fs::File;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::str::FromStr;
use std::sync::{Arc, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use super::writer::Shared;

/// How the log makes a file durable: `fdatasync(2)` (`File::sync_data`); unit tests put a
/// failing stand-in here.
pub(super) type SyncFile = Arc<dyn Fn(&File) -> io::Result<()> + Send + Sync>;

/// When `fdatasync(2)` runs. In every mode the record is written to the file before `record`
/// returns; the modes differ only in surviving a power loss or kernel crash.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Durability {
    /// `record` also waits for an fsync covering its record. Concurrent callers share one fsync.
    Always,
    /// The flusher fsyncs at most every [`FLUSH_INTERVAL`] (20 ms) when something was written;
    /// `record` does not wait for it. The default.
    #[default]
    Interval,
    /// No fsync: the OS writes the pages back when it decides.
    Never,
}

// === impl Durability ===

impl Durability {
    /// The spelling used in configuration: `always`, `interval` or `never`.
    pub fn as_str(self) -> &'static str {
        match self {
            Durability::Always => "always",
            Durability::Interval => "interval",
            Durability::Never => "never",
        }
    }
}

impl FromStr for Durability {
    type Err = UnknownDurability;

    fn from_str(text: &str) -> Result<Durability, UnknownDurability> {
        match text {
            "always" => Ok(Durability::Always),
            "interval" => Ok(Durability::Interval),
            "never" => Ok(Durability::Never),
            _ => Err(UnknownDurability),
        }
    }
}

impl fmt::Display for Durability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A durability name other than `always`, `interval` or `never`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown audit durability; expected `always`, `interval` or `never`")]
pub struct UnknownDurability;

/// How far the flusher has got, and who waits for it. Guarded by `Shared::sync`.
#[derive(Debug, Default)]
pub(super) struct SyncState {
    /// The highest record sequence number a waiter needs durable.
    pub(super) requested: u64,
    /// Every record up to this sequence number is durable.
    pub(super) synced: u64,
    /// Set once an fsync failed (or the log closed): every waiter gets it.
    pub(super) failure: Option<SyncFailure>,
    /// Async waiters to wake after the next fsync.
    pub(super) wakers: Vec<Waker>,
    /// The log is closing: the flusher does a last fsync and stops.
    pub(super) shutdown: bool,
    /// Fsyncs done so far (for statistics and tests).
    pub(super) syncs: u64,
}

/// Why durability can no longer be promised.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum SyncFailure {
    /// An fsync failed with this kind of error.
    Io(io::ErrorKind),
    /// The log was closed.
    Closed,
}

/// The flusher thread's body. Runs until the log closes.
pub(super) fn run_flusher(shared: &Shared) {
    // Deferred lines (`interval` and `never`) reach the file within a tick.
    let tick = match shared.durability {
        Durability::Interval | Durability::Never => FLUSH_INTERVAL,
        Durability::Always => ROTATION_POLL,
    };
    let mut state = lock_sync(shared);
    loop {
        if state.shutdown {
            drop(state);
            shared.record_mirror_report();
            // Nothing queued may be left behind: a line that cannot be written now is lost,
            // and Mint's log says how many.
            let _ = shared.write_pending();
            shared.abandon_pending();
            if shared.durability != Durability::Never {
                flush(shared);
            }
            let mut state = lock_sync(shared);
            if state.failure.is_none() {
                state.failure = Some(SyncFailure::Closed);
            }
            wake_all(&mut state, shared);
            return;
        }
        // After a failed fsync nothing is ever reported durable again, so a waiter's request
        // can never be met: wait for the tick (deferred lines, rotation) instead of spinning.
        if state.requested <= state.synced || state.failure.is_some() {
            let (next, _) = shared
                .flush_wanted
                .wait_timeout(state, tick)
                .unwrap_or_else(PoisonError::into_inner);
            state = next;
            if state.shutdown {
                continue;
            }
        }
        // Someone waits for an fsync: `always` mode, or an explicit `sync`.
        let wanted = state.requested > state.synced && state.failure.is_none();
        let synced = state.synced;
        drop(state);
        shared.record_mirror_report();
        // A failure is logged by the writer; the lines stay queued for the next attempt.
        let _ = shared.write_pending();
        shared.check_path();
        let dirty = shared.written() > synced;
        if dirty && (wanted || shared.durability != Durability::Never) {
            flush(shared);
        }
        state = lock_sync(shared);
    }
}

/// One fsync covering every record written so far, then wakes the waiters it covers.
fn flush(shared: &Shared) {
    // After a failed fsync a retry proves nothing: never report anything durable again.
    if lock_sync(shared).failure.is_some() {
        return;
    }
    let Some((file, seq)) = shared.current_file() else {
        return;
    };
    let result = (shared.sync_file)(&file);
    let mut state = lock_sync(shared);
    state.syncs += 1;
    match result {
        // A failure reported meanwhile (at a rotation) wins: nothing is durable after it.
        Ok(()) if state.failure.is_none() => state.synced = state.synced.max(seq),
        Ok(()) => {}
        Err(error) => {
            drop(state);
            shared.poison(&error);
            return;
        }
    }
    wake_all(&mut state, shared);
}

/// Records that an fsync failed: every waiter, now and later, gets the failure. Returns whether
/// this was the first failure (the one Mint's log reports).
pub(super) fn mark_failed(shared: &Shared, kind: io::ErrorKind) -> bool {
    let mut state = lock_sync(shared);
    let first = state.failure.is_none();
    state.failure.get_or_insert(SyncFailure::Io(kind));
    wake_all(&mut state, shared);
    first
}

/// Marks records up to `seq` durable (the writer fsynced them itself, at a rotation).
pub(super) fn mark_synced(shared: &Shared, seq: u64) {
    let mut state = lock_sync(shared);
    if state.failure.is_none() {
        state.synced = state.synced.max(seq);
    }
    wake_all(&mut state, shared);
}

fn wake_all(state: &mut SyncState, shared: &Shared) {
    for waker in state.wakers.drain(..) {
        waker.wake();
    }
    shared.durable.notify_all();
}

/// Blocks until record `seq` is durable.
pub(super) fn wait_durable(shared: &Shared, seq: u64) -> Result<(), SyncFailure> {
    let mut state = lock_sync(shared);
    if state.requested < seq {
        state.requested = seq;
        shared.flush_wanted.notify_one();
    }
    loop {
        if state.synced >= seq {
            return Ok(());
        }
        if let Some(failure) = state.failure {
            return Err(failure);
        }
        state = shared
            .durable
            .wait(state)
            .unwrap_or_else(PoisonError::into_inner);
    }
}

pub(super) fn lock_sync(shared: &Shared) -> MutexGuard<'_, SyncState> {
    // The guarded state is plain counters and wakers, consistent after any panic.
    shared.sync.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Resolves once record `seq` is durable: the async counterpart of [`wait_durable`], usable
/// from any executor (the flusher wakes it).
pub(super) struct Durable {
    pub(super) shared: Arc<Shared>,
    pub(super) seq: u64,
}

impl Future for Durable {
    type Output = Result<(), SyncFailure>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let shared = &self.shared;
        let mut state = lock_sync(shared);
        if state.synced >= self.seq {
            return Poll::Ready(Ok(()));
        }
        if let Some(failure) = state.failure {
            return Poll::Ready(Err(failure));
        }
        if state.requested < self.seq {
            state.requested = self.seq;
            shared.flush_wanted.notify_one();
        }
        if !state.wakers.iter().any(|w| w.will_wake(cx.waker())) {
            state.wakers.push(cx.waker().clone());
        }
        Poll::Pending
    }
}

impl fmt::Debug for Durable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Durable")
            .field("seq", &self.seq)
            .finish_non_exhaustive()
    }
}

/// How often the flusher fsyncs in `interval` mode, at most.
pub const FLUSH_INTERVAL: Duration = Duration::from_millis(20);

/// How often the flusher checks, in `always` mode, whether the log was renamed away (in the
/// other modes it checks every [`FLUSH_INTERVAL`]).
pub const ROTATION_POLL: Duration = Duration::from_millis(100);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durability_names() {
        for mode in [Durability::Always, Durability::Interval, Durability::Never] {
            assert_eq!(mode.as_str().parse::<Durability>(), Ok(mode));
            assert_eq!(mode.to_string(), mode.as_str());
        }
        assert_eq!("Always".parse::<Durability>(), Err(UnknownDurability));
        assert_eq!(Durability::default(), Durability::Interval);
    }
}
