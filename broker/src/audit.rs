//! The audit trail: one hash-chained JSON Lines file, written before anything is forwarded.
//!
//! The proxy builds an [`AuditRecord`] (a `decision` before forwarding, an `outcome` after; see
//! [`facts`] for the only way request facts become a record). The decision of a request about to
//! be forwarded goes to [`AuditLog::record_async`] (or [`AuditLog::record`]), which returns only
//! once the line is in the file, and in `always` mode once an fsync covers it; any error means
//! the request must be refused with 503 `audit_unavailable` (DESIGN.md invariant 4: never
//! forwarded unrecorded). The decision of a refused request goes to [`AuditLog::append`] (in the
//! file at once, not waited on), and every outcome to [`AuditLog::defer`] (written with the next
//! record, or by the flusher within its tick). Broker events such as
//! `policy_reload_failed` go through [`AuditLog::event`].
//!
//! This is not tracing: records go through [`AuditSink`], which no `RUST_LOG` setting can
//! filter. Tracing only says why a record could not be written, naming the log's path and the
//! request id, never a record's content. No record can hold a header value, a query value, a
//! body or a secret: `mint_policy::audit` has no field for one.
//!
//! Layout: [`chain`] hashes and reads lines; `line` serializes a record; `writer` owns the file;
//! `durability` runs the flusher; `file` opens every audit file (no symbolic links, no FIFOs,
//! no files others may write); [`rotation`] names and finds rotated files; [`verify`] and
//! [`tail`] read logs back for `mint audit verify` and `mint audit tail`; [`facts`] turns request
//! facts into records; [`MemorySink`] stands in for the file in tests.

use std::fmt;
use std::fs::File;
use std::future::Future;
use std::io;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{SystemTime, UNIX_EPOCH};

use mint_policy::audit::{
    AuditRecord, ChainHash, GENESIS_PREV, MAX_LINE_BYTES, ReasonCode, RequestId, ShapeError,
    Timestamp,
};

pub mod chain;
mod durability;
pub mod facts;
mod file;
mod line;
mod memory_sink;
pub mod mirror;
pub mod rotation;
pub mod tail;
pub mod verify;
mod writer;

pub use chain::LineHash;
pub use durability::{Durability, FLUSH_INTERVAL, ROTATION_POLL, UnknownDurability};
pub use file::{FileKind, UnsafeFile};
pub use memory_sink::MemorySink;
pub use writer::TORN_LINE_REASON;

use durability::{Durable, SyncFailure, SyncFile, lock_sync, run_flusher, wait_durable};
use writer::Shared;

/// How an [`AuditLog`] writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AuditConfig {
    /// When records are fsynced.
    pub durability: Durability,
    /// Rotate before a record would grow the file past this many bytes; `None` never rotates by
    /// size (`mint audit rotate` still works).
    pub rotate_bytes: Option<u64>,
}

// === impl AuditConfig ===

impl AuditConfig {
    /// Reads [`MINT_AUDIT_DURABILITY`](crate::config::env::MINT_AUDIT_DURABILITY) and
    /// [`MINT_AUDIT_ROTATE_BYTES`](crate::config::env::MINT_AUDIT_ROTATE_BYTES) through `lookup`;
    /// unset or empty variables keep the defaults. `MINT_AUDIT_ROTATE_BYTES=0` turns size
    /// rotation off.
    pub fn from_lookup(
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<AuditConfig, AuditConfigError> {
        let var = |name: &str| lookup(name).filter(|v| !v.is_empty());
        let mut config = AuditConfig::default();
        if let Some(text) = var(crate::config::env::MINT_AUDIT_DURABILITY) {
            config.durability = text.parse().map_err(|_| AuditConfigError::Durability)?;
        }
        if let Some(text) = var(crate::config::env::MINT_AUDIT_ROTATE_BYTES) {
            let bytes =
                mint_policy::size::parse_size(&text).ok_or(AuditConfigError::RotateBytes)?;
            config.rotate_bytes = (bytes > 0).then_some(bytes);
        }
        Ok(config)
    }
}

impl Default for AuditConfig {
    /// `interval` durability, rotation at [`DEFAULT_ROTATE_BYTES`].
    fn default() -> Self {
        AuditConfig {
            durability: Durability::Interval,
            rotate_bytes: Some(DEFAULT_ROTATE_BYTES),
        }
    }
}

/// A bad audit setting in the environment.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AuditConfigError {
    /// `MINT_AUDIT_DURABILITY` is not `always`, `interval` or `never`.
    #[error("`MINT_AUDIT_DURABILITY` must be `always`, `interval` or `never`")]
    Durability,
    /// `MINT_AUDIT_ROTATE_BYTES` is not a size.
    #[error("`MINT_AUDIT_ROTATE_BYTES` must be {}", mint_policy::size::SIZE_HINT)]
    RotateBytes,
}

/// Why a record was not written, or a log could not be opened. Every error from
/// [`AuditLog::record`] means: refuse the request (503 `audit_unavailable`). Messages name the
/// log's path and the kind of problem, never a record's content.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AuditError {
    /// The log (or its lock file) could not be opened or created.
    #[error("cannot open audit log `{}`", path.display())]
    Open {
        /// The file.
        path: PathBuf,
        /// The operating system's reason.
        #[source]
        source: io::Error,
    },
    /// A file of the log (the log, its lock file or a rotated predecessor) is a symbolic link,
    /// not a regular file, another user's, or (log and lock file) writable by group or others:
    /// refused before anything was read from or written to it.
    #[error("refusing audit file `{}`: {problem}", path.display())]
    Unsafe {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        problem: UnsafeFile,
    },
    /// A directory above the log's, or a symbolic link on the way to it, could be changed by
    /// another user (who could then move the log into a directory of theirs).
    #[error(transparent)]
    UnsafeDirectory(#[from] crate::config::secure_file::SecureFileError),
    /// Another process (or another `AuditLog` in this one) is writing this log.
    #[error("audit log `{}` is in use by another process", path.display())]
    Locked {
        /// The log.
        path: PathBuf,
    },
    /// The end of the log could not be read, so the chain cannot be continued.
    #[error("cannot read the end of audit log `{}`", path.display())]
    ReadTail {
        /// The file.
        path: PathBuf,
        /// The operating system's reason.
        #[source]
        source: io::Error,
    },
    /// The record's fields do not fit its phase (a bug in the caller): refused, not written.
    #[error("audit record refused: {0}")]
    Shape(ShapeError),
    /// The record serializes to more than `MAX_LINE_BYTES`: refused, not written.
    #[error("audit record longer than {MAX_LINE_BYTES} bytes refused")]
    TooLong,
    /// The line could not be written (disk full, read-only, I/O error).
    #[error("cannot write to audit log `{}`", path.display())]
    Write {
        /// The log.
        path: PathBuf,
        /// The operating system's reason.
        #[source]
        source: io::Error,
    },
    /// An fsync failed earlier: the log refuses every record until it is opened again.
    #[error("audit log `{}` is unavailable after a failed fsync ({kind})", path.display())]
    Unavailable {
        /// The log.
        path: PathBuf,
        /// The kind of the fsync's error.
        kind: io::ErrorKind,
    },
    /// The record was written but the fsync covering it failed (`always` mode).
    #[error("audit record written to `{}` but not made durable ({kind})", path.display())]
    NotDurable {
        /// The log.
        path: PathBuf,
        /// The kind of the fsync's error.
        kind: io::ErrorKind,
    },
    /// The log was closed.
    #[error("audit log is closed")]
    Closed,
    /// An internal invariant failed; nothing was written.
    #[error("audit log internal error")]
    Internal,
}

// === impl AuditError ===

impl AuditError {
    /// `path` could not be opened (or created): refused as unsafe, or an I/O error.
    fn open(path: &Path, source: io::Error) -> AuditError {
        match file::unsafe_file(&source) {
            Some(problem) => AuditError::Unsafe {
                path: path.to_path_buf(),
                problem,
            },
            None => AuditError::Open {
                path: path.to_path_buf(),
                source,
            },
        }
    }

    /// The end of `path` could not be read: refused as unsafe, or an I/O error.
    fn read_tail(path: &Path, source: io::Error) -> AuditError {
        match file::unsafe_file(&source) {
            Some(problem) => AuditError::Unsafe {
                path: path.to_path_buf(),
                problem,
            },
            None => AuditError::ReadTail {
                path: path.to_path_buf(),
                source,
            },
        }
    }
}

/// Proof that a record is in the log: its sequence number in this process and its line hash
/// (the next line's `prev`). In `always` mode it also means an fsync covered it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Receipt {
    seq: u64,
    hash: LineHash,
}

// === impl Receipt ===

impl Receipt {
    /// The record's number among those written since the log was opened, from 1.
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// The hash of the written line.
    pub fn hash(&self) -> LineHash {
        self.hash
    }
}

/// Counters of an open log.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AuditStats {
    /// Records written since the log was opened (including recovery events).
    pub records: u64,
    /// Fsyncs the flusher has done.
    pub syncs: u64,
}

/// Where audit records go: the file ([`AuditLog`]), or memory in tests ([`MemorySink`]).
/// Any error means the request must be refused with 503 `audit_unavailable`.
pub trait AuditSink: Send + Sync + fmt::Debug {
    /// Writes `record`, chained by the sink (whatever `prev` the record holds), blocking until it
    /// is recorded.
    fn record(&self, record: &AuditRecord) -> Result<Receipt, AuditError>;

    /// Writes `record` like [`AuditSink::record`], awaiting durability without blocking a thread.
    fn record_async<'a>(
        &'a self,
        record: &'a AuditRecord,
    ) -> BoxFuture<'a, Result<Receipt, AuditError>>;
}

/// A boxed future, as [`AuditSink::record_async`] returns.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// An open audit log: cheap to clone and share between tasks and threads. The last clone to be
/// dropped stops the flusher (after a final fsync unless the mode is `never`) and releases the
/// writer lock.
#[derive(Clone)]
pub struct AuditLog {
    shared: Arc<Shared>,
    _flusher: Arc<Flusher>,
}

// === impl AuditLog ===

impl AuditLog {
    /// Opens the log at `path` (creating it 0600), takes the writer lock (`<path>.lock`) and
    /// continues the chain from the last line of the file, or of its newest rotated
    /// predecessor, or from genesis. A torn last line is recovered (see `writer`).
    ///
    /// The log and its lock file are opened without following a symbolic link and must be
    /// regular files owned by Mint's user that group and others cannot write; a rotated
    /// predecessor read to continue the chain must be a regular file. Anything else is refused
    /// with [`AuditError::Unsafe`].
    pub fn open(path: &Path, config: AuditConfig) -> Result<AuditLog, AuditError> {
        AuditLog::open_with_sync(path, config, Arc::new(|file: &File| file.sync_data()))
    }

    /// [`AuditLog::open`] with the function that makes the file durable replaced, so unit tests
    /// can make an fsync fail. Not reachable from any configuration: outside unit tests every
    /// log uses `fdatasync(2)`.
    #[cfg(test)]
    pub(crate) fn open_failing_sync(
        path: &Path,
        config: AuditConfig,
        sync: impl Fn(&File) -> io::Result<()> + Send + Sync + 'static,
    ) -> Result<AuditLog, AuditError> {
        AuditLog::open_with_sync(path, config, Arc::new(sync))
    }

    fn open_with_sync(
        path: &Path,
        config: AuditConfig,
        sync: SyncFile,
    ) -> Result<AuditLog, AuditError> {
        let shared = Arc::new(Shared::open(path, &config, sync)?);
        let for_thread = Arc::clone(&shared);
        // The flusher reports a failed fsync: it logs to whatever subscriber the opener uses.
        let dispatch = tracing::dispatcher::get_default(tracing::Dispatch::clone);
        let thread = std::thread::Builder::new()
            .name("mint-audit-flush".to_owned())
            .spawn(move || {
                tracing::dispatcher::with_default(&dispatch, || run_flusher(&for_thread));
            })
            .map_err(|source| AuditError::Open {
                path: path.to_path_buf(),
                source,
            })?;
        let flusher = Flusher {
            shared: Arc::clone(&shared),
            thread: Mutex::new(Some(thread)),
        };
        Ok(AuditLog {
            shared,
            _flusher: Arc::new(flusher),
        })
    }

    /// Copies every line written from now on to `mirror` (`--audit-stdout`); see [`mirror`].
    /// A log has at most one copy: a second call is ignored and returns `false`.
    pub fn mirror_to(&self, mirror: Arc<mirror::Mirror>) -> bool {
        self.shared.mirror.set(mirror).is_ok()
    }

    /// Records what the copy lost, then closes it and waits briefly for the copies still queued
    /// (a clean shutdown, after [`AuditLog::sync`]).
    pub fn finish_mirror(&self) {
        if let Some(mirror) = self.shared.mirror.get() {
            self.shared.record_mirror_report();
            let _ = self.shared.write_pending();
            mirror.finish();
        }
    }

    /// Checks, without creating or writing anything, that [`AuditLog::open`] could open the log
    /// at `path` for writing: its directory passes the same checks, and the log, when it exists,
    /// opens for appending and passes the same checks (or, when it does not, its directory is
    /// writable). Returns whether the log exists. For `mint doctor`; the writer lock is not
    /// taken, so a running broker is no obstacle.
    pub fn check_writable(path: &Path) -> Result<bool, AuditError> {
        let dir = writer::log_dir(path);
        file::check_log_location(dir).map_err(|refused| match refused {
            file::LogDirRefused::Dir(source) => AuditError::open(dir, source),
            file::LogDirRefused::Walk(source) => AuditError::UnsafeDirectory(source),
        })?;
        file::check_log_writable(path, dir).map_err(|source| AuditError::open(path, source))
    }

    /// Writes `record` with the hash of the log's last line as its `prev` (whatever the record
    /// holds; the record itself is not changed). Returns once
    /// the line is in the file, and in `always` mode once an fsync covers it. Blocks the calling
    /// thread for that; async callers use [`AuditLog::record_async`].
    pub fn record(&self, record: &AuditRecord) -> Result<Receipt, AuditError> {
        let receipt = self.write(record)?;
        if self.shared.durability == Durability::Always {
            wait_durable(&self.shared, receipt.seq).map_err(|f| self.sync_error(f))?;
        }
        Ok(receipt)
    }

    /// Like [`AuditLog::record`], but in `always` mode awaits the fsync instead of blocking.
    /// The write itself (a few microseconds) still happens on the calling thread.
    pub async fn record_async(&self, record: &AuditRecord) -> Result<Receipt, AuditError> {
        self.write_now(record)?.durable().await
    }

    /// The two halves of [`AuditLog::record_async`]: writes `record` now, on the calling
    /// thread, and returns the wait for its durability ([`Written::durable`], which resolves at
    /// once outside `always` mode). The record is not borrowed past the write, so a caller can
    /// take its fields back, and count the record as written, before it awaits the fsync.
    pub fn write_now(&self, record: &AuditRecord) -> Result<Written, AuditError> {
        let receipt = self.write(record)?;
        let durable = (self.shared.durability == Durability::Always).then(|| Durable {
            shared: Arc::clone(&self.shared),
            seq: receipt.seq,
        });
        Ok(Written { receipt, durable })
    }

    /// Writes `record` and returns once the line is in the file, without waiting for an fsync in
    /// any mode: the flusher covers it within its interval, and [`AuditLog::sync`] at shutdown.
    /// For records nothing waits on but that must survive a crash of Mint, such as the decision
    /// of a refused request; a `decision` record that lets a request through goes through
    /// [`AuditLog::record`] or [`AuditLog::record_async`].
    pub fn append(&self, record: &AuditRecord) -> Result<Receipt, AuditError> {
        self.write(record)
    }

    /// Queues `record` to be written with the next record, in the same `write(2)`, or by the
    /// flusher within [`FLUSH_INTERVAL`], whichever comes first; at once in `always` mode, and
    /// when the queue holds 64 KiB. For a request's `outcome`, written as its answer ends: it
    /// saves a request one of its two writes. A crash of Mint loses what is queued, as it would
    /// lose an outcome not yet written; such a request reads as `unknown` in `mint audit tail`
    /// and `verify`. An error means the record will never be written. [`AuditLog::sync`] and
    /// closing the log write the queue first.
    pub fn defer(&self, record: &AuditRecord) -> Result<(), AuditError> {
        let line = self.prepare(record)?;
        if self.shared.durability == Durability::Always {
            return self.shared.append(line).map(drop);
        }
        self.shared.defer(line)
    }

    /// Records a broker event (such as `policy_reload_failed`) with a fresh event id.
    pub fn event(&self, reason: ReasonCode) -> Result<Receipt, AuditError> {
        let id = event_id(self.shared.next_event_number());
        self.record(&AuditRecord::event(now(), id, reason, ChainHash::genesis()))
    }

    /// Fsyncs everything written so far, in any mode (for a clean shutdown).
    pub fn sync(&self) -> Result<(), AuditError> {
        self.shared.write_pending()?;
        let seq = self.shared.written();
        if seq == 0 {
            return Ok(());
        }
        wait_durable(&self.shared, seq).map_err(|f| self.sync_error(f))
    }

    /// The log's path.
    pub fn path(&self) -> &Path {
        &self.shared.path
    }

    /// Records written and fsyncs done since the log was opened.
    pub fn stats(&self) -> AuditStats {
        AuditStats {
            records: self.shared.written(),
            syncs: lock_sync(&self.shared).syncs,
        }
    }

    fn write(&self, record: &AuditRecord) -> Result<Receipt, AuditError> {
        let (seq, hash) = self.shared.append(self.prepare(record)?)?;
        Ok(Receipt { seq, hash })
    }

    fn prepare(&self, record: &AuditRecord) -> Result<PreparedLine, AuditError> {
        PreparedLine::new(record).inspect_err(|error| {
            tracing::error!(audit.path = %self.shared.path.display(), error = %error, "Audit record refused");
        })
    }

    fn sync_error(&self, failure: SyncFailure) -> AuditError {
        sync_error(&self.shared, failure)
    }
}

fn sync_error(shared: &Shared, failure: SyncFailure) -> AuditError {
    match failure {
        SyncFailure::Io(kind) => AuditError::NotDurable {
            path: shared.path.clone(),
            kind,
        },
        SyncFailure::Closed => AuditError::Closed,
    }
}

/// A record in the file, and what is left to wait for: see [`AuditLog::write_now`].
#[derive(Debug)]
#[must_use = "a record written in `always` mode is not durable until `durable` resolves"]
pub struct Written {
    receipt: Receipt,
    /// The fsync to await (`always` mode only).
    durable: Option<Durable>,
}

// === impl Written ===

impl Written {
    /// Resolves once the record is as durable as the mode promises before a request goes on:
    /// at once, except in `always` mode, where an fsync must cover it.
    pub async fn durable(self) -> Result<Receipt, AuditError> {
        if let Some(durable) = self.durable {
            let shared = Arc::clone(&durable.shared);
            durable
                .await
                .map_err(|failure| sync_error(&shared, failure))?;
        }
        Ok(self.receipt)
    }
}

impl fmt::Debug for AuditLog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AuditLog")
            .field("path", &self.shared.path)
            .field("durability", &self.shared.durability)
            .finish_non_exhaustive()
    }
}

impl AuditSink for AuditLog {
    fn record(&self, record: &AuditRecord) -> Result<Receipt, AuditError> {
        AuditLog::record(self, record)
    }

    fn record_async<'a>(
        &'a self,
        record: &'a AuditRecord,
    ) -> BoxFuture<'a, Result<Receipt, AuditError>> {
        Box::pin(AuditLog::record_async(self, record))
    }
}

/// Stops the flusher when the last [`AuditLog`] clone goes away.
struct Flusher {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Drop for Flusher {
    fn drop(&mut self) {
        lock_sync(&self.shared).shutdown = true;
        self.shared.flush_wanted.notify_all();
        let thread = self
            .thread
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(thread) = thread {
            // A panicked flusher has nothing left to flush; the log is closing either way.
            let _ = thread.join();
        }
    }
}

/// A record serialized with a placeholder `prev`, ready for the writer to splice the real one
/// into: the serialization happens outside the writer lock.
pub(crate) struct PreparedLine {
    /// Where the request id's text is in `bytes`, for error logs.
    id: Range<usize>,
    /// The line and its newline; ends with `"prev":"sha256:<64 hex digits>"}` and `\n`.
    pub(crate) bytes: Vec<u8>,
}

// === impl PreparedLine ===

impl PreparedLine {
    /// Checks `record` (fail closed) and serializes it with a genesis placeholder as `prev`
    /// (whatever `record.prev` holds), byte for byte as `AuditRecord::to_line` would.
    pub(crate) fn new(record: &AuditRecord) -> Result<PreparedLine, AuditError> {
        record.check().map_err(AuditError::Shape)?;
        let mut bytes = Vec::with_capacity(LINE_CAPACITY);
        let id = line::encode(record, GENESIS_PREV, &mut bytes);
        if bytes.len() > MAX_LINE_BYTES {
            return Err(AuditError::TooLong);
        }
        // `prev` is the last field written; a line that does not end with it is refused rather
        // than mis-chained.
        if !ends_with_genesis_prev(&bytes) {
            return Err(AuditError::Internal);
        }
        bytes.push(b'\n');
        Ok(PreparedLine { id, bytes })
    }

    /// The record's request id (as written in the line), for Mint's log.
    pub(crate) fn id(&self) -> &str {
        self.bytes
            .get(self.id.clone())
            .and_then(|id| std::str::from_utf8(id).ok())
            .unwrap_or_default()
    }
}

/// The record's line as the writer serializes it, without the newline and with the record's own
/// `prev`: byte for byte `AuditRecord::to_line`, without serde. Public for the benchmark, which
/// compares the two.
#[doc(hidden)]
pub fn encode_line(record: &AuditRecord) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(LINE_CAPACITY);
    line::encode(record, record.prev.as_str(), &mut bytes);
    bytes
}

/// The current time as a record timestamp (the clock is read here, never in `mint-policy`).
/// A clock before 1970 reads as the epoch; one past the year 9999 as its last millisecond.
#[expect(
    clippy::expect_used,
    reason = "INVARIANT: every value from 0 to MAX_TIMESTAMP_MILLIS is a valid timestamp"
)]
pub fn now() -> Timestamp {
    let millis = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| {
            u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX)
        });
    Timestamp::from_unix_millis(millis.min(MAX_TIMESTAMP_MILLIS)).expect("timestamp in range")
}

/// An id for a broker event: `ev-<unix ms>-<pid>-<n>`, unique across restarts of one host.
#[expect(
    clippy::expect_used,
    reason = "INVARIANT: `ev-`, three decimal numbers and dashes (at most 63 characters) fit \
              the request id grammar"
)]
pub(crate) fn event_id(number: u64) -> RequestId {
    let millis = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_millis())
        .min(u128::from(MAX_TIMESTAMP_MILLIS));
    let text = format!("ev-{millis}-{}-{number}", std::process::id());
    RequestId::new(text).expect("event id fits the grammar")
}

/// Whether a serialized line ends with `"prev":"` + `GENESIS_PREV` + `"}`.
fn ends_with_genesis_prev(line: &[u8]) -> bool {
    let Some(rest) = line.strip_suffix(b"\"}") else {
        return false;
    };
    let Some(rest) = rest.strip_suffix(GENESIS_PREV.as_bytes()) else {
        return false;
    };
    rest.ends_with(b"\"prev\":\"")
}

/// The line buffer allocated per record: a typical request's record fits without growing it.
const LINE_CAPACITY: usize = 1024;

/// The default size bound: 64 MiB.
pub const DEFAULT_ROTATE_BYTES: u64 = 64 * 1024 * 1024;

/// 9999-12-31T23:59:59.999Z, the last instant a record timestamp can hold.
const MAX_TIMESTAMP_MILLIS: u64 = 253_402_300_799_999;

#[cfg(test)]
mod tests;
