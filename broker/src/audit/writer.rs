//! The one owner of an audit log file: appends chained lines, rotates, and recovers a torn end.
//!
//! Every append happens under one mutex: the writer splices the previous line's hash into the
//! new line's `prev`, hashes the line, and appends it with one `write(2)` on a file opened
//! `O_APPEND`, so lines are never interleaved and a line is in the file (surviving a crash of
//! Mint) before the caller learns it was written. Serializing the record happens before the lock
//! is taken; only the splice, the hash and the write are inside it. An exclusive `flock` on
//! `<log>.lock` keeps any other process (or a second `AuditLog` in this one) from appending.
//!
//! A write that fails part-way (disk full, file size limit, I/O error) is undone at once: the
//! writer cuts the file back to the end of its last whole line, but only when the file ends
//! exactly with the bytes it just wrote (nothing else was appended since), so the refused record
//! leaves no trace and the file keeps whole lines only. A torn end that cannot be undone that
//! way (a crash in the middle of a write, or a failed undo) is never truncated: the writer ends
//! it with a newline, so the fragment becomes a line of its own that the chain covers, and then
//! writes an `audit_torn_line` event chained from the fragment. `mint audit verify` reports that
//! pattern as a recovered torn line, not as tampering.
//!
//! The log and its lock file are opened through `file`: never through a symbolic link, and only
//! regular files owned by Mint's user that group and others cannot write.
//!
//! Never logs a record's content: only the log's path, sequence numbers and request ids.

use std::fs::{self, File};
use std::io::{self, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use mint_policy::audit::{AuditRecord, ChainHash, ReasonCode};

use super::chain::{LineHash, read_last_line};
use super::durability::{Durability, SyncFile, SyncState, mark_failed, mark_synced};
use super::file;
use super::mirror::{Mirror, MirrorReport};
use super::rotation::{lock_path, rename_to_next, rotated_files, sync_dir, try_lock};
use super::{AuditConfig, AuditError, PreparedLine, now};

/// What the log handle, the flusher and the durable futures share.
pub(super) struct Shared {
    pub(super) path: PathBuf,
    pub(super) durability: Durability,
    /// Makes the current file durable: `fdatasync(2)`, or a failing stand-in in unit tests.
    pub(super) sync_file: SyncFile,
    writer: Mutex<Writer>,
    /// The sequence number of the last record written (0 before the first).
    written: AtomicU64,
    pub(super) sync: Mutex<SyncState>,
    /// Wakes the flusher: someone waits for an fsync, or the log is closing.
    pub(super) flush_wanted: Condvar,
    /// Wakes blocked waiters after an fsync.
    pub(super) durable: Condvar,
    events: AtomicU64,
    /// `--audit-stdout`: where each batch goes once it is in the file.
    pub(super) mirror: OnceLock<Arc<Mirror>>,
}

/// The file and the chain state. Only ever touched under `Shared::writer`.
struct Writer {
    file: Arc<File>,
    /// `(st_dev, st_ino)` of `file`, to notice when the path names another file.
    file_id: (u64, u64),
    size: u64,
    /// The hash of the last line: the next record's `prev`.
    last: LineHash,
    /// The same hash as hex digits, ready to splice.
    last_hex: [u8; 64],
    seq: u64,
    torn: Option<Torn>,
    /// Set by a failed fsync or a broken invariant: every later append is refused.
    poisoned: Option<io::ErrorKind>,
    rotate_bytes: Option<u64>,
    rotation_retry_at: Option<Instant>,
    /// A failure to start a new file at the path was logged; not again until one succeeds.
    switch_failure_logged: bool,
    /// Lines handed to [`Shared::defer`], not chained yet: they go to the file, in order and
    /// before it, with the next line written, or when the flusher calls
    /// [`Shared::write_pending`].
    pending: Vec<PreparedLine>,
    /// The bytes in `pending`, at most [`PENDING_MAX_BYTES`].
    pending_bytes: usize,
    /// The flusher's last attempt to write the queue alone failed (logged once until a write
    /// succeeds).
    queue_stalled: bool,
    /// Scratch space for one `write(2)`: the chained lines of a batch, end to end.
    batch: Vec<u8>,
    /// Where each line of `batch` ends, and its hash.
    ends: Vec<(usize, LineHash)>,
    /// Holds the exclusive `flock` on `<log>.lock` for as long as the writer lives.
    _lock: File,
}

/// The chain ends in a fragment that still needs repair before the next record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Torn {
    /// The fragment is at the end of the current file: end it with a newline first.
    InFile,
    /// The fragment is already a line (or is in a predecessor): write the torn-line event.
    NeedsEvent,
}

/// The directory that holds the log at `path` (`.` for a bare file name).
pub(super) fn log_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    }
}

// === impl Shared ===

impl Shared {
    /// Opens (or creates) the log at `path`, takes the writer lock and continues the chain.
    pub(super) fn open(
        path: &Path,
        config: &AuditConfig,
        sync_file: SyncFile,
    ) -> Result<Shared, AuditError> {
        let dir = log_dir(path);
        file::check_log_location(dir).map_err(|refused| match refused {
            file::LogDirRefused::Dir(source) => AuditError::open(dir, source),
            file::LogDirRefused::Walk(source) => AuditError::UnsafeDirectory(source),
        })?;
        let lock = take_lock(path)?;
        let file = file::open_log(path).map_err(|source| AuditError::open(path, source))?;
        let meta = file
            .metadata()
            .map_err(|source| AuditError::open(path, source))?;
        if meta.len() == 0 && config.durability != Durability::Never {
            // A new (or empty) log: make its directory entry durable too.
            sync_dir(path).map_err(|source| AuditError::open(path, source))?;
        }
        let (last, torn) = chain_tail(path, &file, meta.len())?;
        let mut writer = Writer {
            file: Arc::new(file),
            file_id: (meta.dev(), meta.ino()),
            size: meta.len(),
            last,
            last_hex: last.hex(),
            seq: 0,
            torn,
            poisoned: None,
            rotate_bytes: config.rotate_bytes.filter(|&bytes| bytes > 0),
            rotation_retry_at: None,
            switch_failure_logged: false,
            pending: Vec::new(),
            pending_bytes: 0,
            queue_stalled: false,
            batch: Vec::new(),
            ends: Vec::new(),
            _lock: lock,
        };
        let shared_events = AtomicU64::new(0);
        if writer.torn.is_some() {
            tracing::warn!(
                audit.path = %path.display(),
                "Audit log ends with an incomplete line; recovering it"
            );
            writer
                .repair(path, &shared_events)
                .map_err(|source| AuditError::Write {
                    path: path.to_path_buf(),
                    source,
                })?;
        }
        Ok(Shared {
            path: path.to_path_buf(),
            durability: config.durability,
            sync_file,
            written: AtomicU64::new(writer.seq),
            writer: Mutex::new(writer),
            sync: Mutex::new(SyncState::default()),
            flush_wanted: Condvar::new(),
            durable: Condvar::new(),
            events: shared_events,
            mirror: OnceLock::new(),
        })
    }

    /// Appends one prepared line, after any deferred ones, with one `write(2)`: the line is in
    /// the file when this returns. With [`Shared::defer`] and [`Shared::write_pending`], the
    /// only paths by which a record reaches the file.
    pub(super) fn append(&self, line: PreparedLine) -> Result<(u64, LineHash), AuditError> {
        let mut writer = self.writable(line.id())?;
        let written = writer.write_batch(self, Some(line));
        self.written.store(writer.seq, Ordering::Release);
        written
    }

    /// Queues one prepared line to be written (and chained) with the next line appended, or by
    /// the flusher within its tick, whichever comes first: no `write(2)` of its own. Written at
    /// once when the queue is full. An error means the line will never be written.
    pub(super) fn defer(&self, line: PreparedLine) -> Result<(), AuditError> {
        let mut writer = self.writable(line.id())?;
        if writer.pending_bytes + line.bytes.len() <= PENDING_MAX_BYTES {
            writer.pending_bytes += line.bytes.len();
            writer.pending.push(line);
            return Ok(());
        }
        let written = writer.write_batch(self, Some(line));
        self.written.store(writer.seq, Ordering::Release);
        written.map(drop)
    }

    /// Writes the deferred lines, if any. A failure is logged (once until a write succeeds)
    /// and returned; the lines stay queued for the next attempt, unless the log refuses every
    /// record for good (a failed fsync), when they are dropped and Mint's log says how many.
    pub(super) fn write_pending(&self) -> Result<(), AuditError> {
        let id = match self.lock_writer()?.pending.last() {
            Some(line) => line.id().to_owned(),
            None => return Ok(()),
        };
        let mut writer = match self.writable(&id) {
            Ok(writer) => writer,
            Err(error) => {
                if let (AuditError::Unavailable { .. }, Ok(mut writer)) =
                    (&error, self.lock_writer())
                {
                    writer.drop_pending(&self.path);
                }
                return Err(error);
            }
        };
        if writer.pending.is_empty() {
            return Ok(());
        }
        let result = writer.write_batch(self, None).map(drop);
        self.written.store(writer.seq, Ordering::Release);
        result
    }

    /// Records what the copy to stdout lost since the last time (an `audit_stdout_dropped` or
    /// `audit_stdout_closed` event with `dropped`), if anything; a report that cannot be written
    /// is kept for the next call. Called by the flusher each tick and at shutdown.
    pub(super) fn record_mirror_report(&self) {
        let Some(mirror) = self.mirror.get() else {
            return;
        };
        let Some(report) = mirror.take_report() else {
            return;
        };
        let (reason, dropped) = match report {
            MirrorReport::Dropped(n) => ("audit_stdout_dropped", n),
            MirrorReport::Closed(n) => ("audit_stdout_closed", n),
        };
        let written = ReasonCode::new(reason)
            .map_err(|_| AuditError::Internal)
            .and_then(|reason| {
                let id = super::event_id(self.next_event_number());
                let mut record = AuditRecord::event(now(), id, reason, ChainHash::genesis());
                record.dropped = Some(dropped);
                PreparedLine::new(&record)
            })
            .and_then(|line| self.append(line));
        if written.is_err() {
            mirror.restore(report);
        }
    }

    /// Drops whatever is still queued (the log is closing), saying how many records were lost.
    pub(super) fn abandon_pending(&self) {
        if let Ok(mut writer) = self.lock_writer() {
            writer.drop_pending(&self.path);
        }
    }

    /// The writer, ready for a line: refused after a failed fsync, and with a torn end
    /// repaired first. `id` names the record in Mint's log if the repair fails.
    fn writable(&self, id: &str) -> Result<MutexGuard<'_, Writer>, AuditError> {
        let mut writer = self.lock_writer()?;
        if let Some(kind) = writer.poisoned {
            return Err(AuditError::Unavailable {
                path: self.path.clone(),
                kind,
            });
        }
        if writer.torn.is_some() {
            writer.repair(&self.path, &self.events).map_err(|source| {
                log_write_failure(&self.path, id, 0, 0, 0, &source);
                AuditError::Write {
                    path: self.path.clone(),
                    source,
                }
            })?;
            self.written.store(writer.seq, Ordering::Release);
        }
        Ok(writer)
    }

    /// The sequence number of the last record written.
    pub(super) fn written(&self) -> u64 {
        self.written.load(Ordering::Acquire)
    }

    /// The current file and the sequence number of its last record, for an fsync.
    pub(super) fn current_file(&self) -> Option<(Arc<File>, u64)> {
        let writer = self.lock_writer().ok()?;
        Some((Arc::clone(&writer.file), writer.seq))
    }

    /// Refuses every later append after a failed fsync, and wakes every waiter with the
    /// failure. Mint's log says why once, for the first failure.
    pub(super) fn poison(&self, error: &io::Error) {
        if let Ok(mut writer) = self.lock_writer() {
            writer.poisoned.get_or_insert(error.kind());
        }
        if mark_failed(self, error.kind()) {
            log_sync_failure(&self.path, error);
        }
    }

    /// Notices that the log's path names another file, or none (`mint audit rotate`, or an
    /// operator moved it): makes the old file durable and starts a new one at the path,
    /// chained from the last line written.
    pub(super) fn check_path(&self) {
        let Ok(mut writer) = self.lock_writer() else {
            return;
        };
        // `symlink_metadata`: a symbolic link planted at the path is another file, which
        // `switch_file` then refuses to open.
        let now = match fs::symlink_metadata(&self.path) {
            Ok(meta) => Some((meta.dev(), meta.ino())),
            Err(error) if error.kind() == io::ErrorKind::NotFound => None,
            Err(_) => return,
        };
        if now == Some(writer.file_id) || writer.poisoned.is_some() {
            return;
        }
        if !writer.switch_failure_logged {
            tracing::info!(audit.path = %self.path.display(), "Audit log was moved; starting a new file");
        }
        if writer.finish_file(self).is_err() {
            // The log is poisoned now, and `finish_file` said so.
            return;
        }
        match writer.switch_file(self) {
            Ok(()) => writer.switch_failure_logged = false,
            Err(error) if !writer.switch_failure_logged => {
                writer.switch_failure_logged = true;
                tracing::warn!(
                    audit.path = %self.path.display(),
                    error = %AuditError::open(&self.path, error),
                    "Cannot start a new audit log file; still appending to the moved one"
                );
            }
            Err(_) => {}
        }
    }

    /// A number for the next broker event's id.
    pub(super) fn next_event_number(&self) -> u64 {
        self.events.fetch_add(1, Ordering::Relaxed)
    }

    fn lock_writer(&self) -> Result<MutexGuard<'_, Writer>, AuditError> {
        // A panic while holding the lock may have left the chain state half-updated: refuse
        // rather than risk a mis-chained line.
        self.writer.lock().map_err(|_| AuditError::Internal)
    }
}

// === impl Writer ===

impl Writer {
    /// Writes the deferred lines and then `line` (if any), chained in that order, with one
    /// `write(2)` (more only if the kernel writes part of it), after rotating if the file is
    /// due. Returns the last line's sequence number and hash. On failure every line of the
    /// batch is refused (and logged) and the file keeps whole lines only, or a torn end to
    /// repair before the next record.
    fn write_batch(
        &mut self,
        shared: &Shared,
        line: Option<PreparedLine>,
    ) -> Result<(u64, LineHash), AuditError> {
        let incoming = self.pending_bytes + line.as_ref().map_or(0, |l| l.bytes.len());
        self.rotate_if_due(shared, incoming);
        if let Some(kind) = self.poisoned {
            // The rotation's fsync failed just now: nothing will ever be written again.
            self.drop_pending(&shared.path);
            return Err(AuditError::Unavailable {
                path: shared.path.clone(),
                kind,
            });
        }
        let mut lines = std::mem::take(&mut self.pending);
        self.pending_bytes = 0;
        let deferred = lines.len();
        let own = line.is_some();
        lines.extend(line);
        let (size, seq) = (self.size, self.seq);
        let source = match self.write_lines(&mut lines) {
            Ok(done) => {
                if let Some(mirror) = shared.mirror.get() {
                    // The batch is in the file: only now may a copy go out.
                    mirror.offer(&self.batch);
                }
                self.queue_stalled = false;
                // Keep the queue's allocation for the next deferred lines.
                lines.clear();
                self.pending = lines;
                return Ok(done);
            }
            Err(source) => source,
        };
        let last_id = lines.last().map(|l| l.id().to_owned());
        let whole = usize::try_from(self.seq - seq).unwrap_or(usize::MAX);
        let kept = if self.size == size {
            // Nothing reached the file (the failed write was undone): the queued lines wait
            // for the next attempt, and are chained then. Only the caller's own line is refused.
            lines.truncate(deferred);
            self.pending_bytes = lines.iter().map(|l| l.bytes.len()).sum();
            self.pending = lines;
            deferred
        } else {
            0
        };
        // A caller's refused record is always logged; the flusher's retries of the queue alone
        // only once until a write succeeds.
        if let Some(id) = last_id.filter(|_| own || !self.queue_stalled) {
            log_write_failure(&shared.path, &id, deferred, whole, kept, &source);
        }
        self.queue_stalled |= !own;
        Err(AuditError::Write {
            path: shared.path.clone(),
            source,
        })
    }

    /// Chains `lines` from the last line written and writes them end to end: one `write(2)`,
    /// or more only if the kernel wrote part of it. A failure after part of it was written
    /// leaves the lines written whole, and a torn end to repair if it cannot be undone.
    fn write_lines(&mut self, lines: &mut [PreparedLine]) -> io::Result<(u64, LineHash)> {
        let mut batch = std::mem::take(&mut self.batch);
        let mut ends = std::mem::take(&mut self.ends);
        batch.clear();
        ends.clear();
        let mut prev = self.last_hex;
        for line in lines.iter_mut() {
            // INVARIANT: `PreparedLine` ends with `<64 hex digits>"}\n`, checked when built.
            let hash = splice(&mut line.bytes, &prev).ok_or(io::ErrorKind::InvalidData)?;
            batch.extend_from_slice(&line.bytes);
            ends.push((batch.len(), hash));
            prev = hash.hex();
        }
        let result = self.write_all(&batch, &ends);
        self.batch = batch;
        self.ends = ends;
        result
    }

    /// Writes `batch` (whole lines ending at `ends`) and advances the chain past it.
    fn write_all(
        &mut self,
        batch: &[u8],
        ends: &[(usize, LineHash)],
    ) -> io::Result<(u64, LineHash)> {
        let Some(&(_, last)) = ends.last() else {
            return Ok((self.seq, self.last));
        };
        let mut done = 0;
        while let Some(rest) = batch.get(done..).filter(|rest| !rest.is_empty()) {
            match (&*self.file).write(rest) {
                Ok(0) => {
                    return Err(self.torn_by(batch, ends, done, io::ErrorKind::WriteZero.into()));
                }
                Ok(n) => done += n,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(error) => return Err(self.torn_by(batch, ends, done, error)),
            }
        }
        self.size += batch.len() as u64;
        self.last = last;
        self.last_hex = last.hex();
        self.seq += ends.len() as u64;
        Ok((self.seq, last))
    }

    /// Records that the first `done` bytes of `batch` reached the file and the rest did not:
    /// undoes them if it safely can; else the lines written whole stay in the chain and a
    /// fragment of the next one is a torn end to repair before the next record.
    fn torn_by(
        &mut self,
        batch: &[u8],
        ends: &[(usize, LineHash)],
        done: usize,
        error: io::Error,
    ) -> io::Error {
        if done > 0 && !self.undo_partial_write(done) {
            let mut start = 0;
            for &(end, hash) in ends.iter().take_while(|(end, _)| *end <= done) {
                self.seq += 1;
                self.last = hash;
                start = end;
            }
            if done > start {
                // The fragment never holds its line's newline: that line is not whole.
                self.last = LineHash::of(batch.get(start..done).unwrap_or_default());
                self.torn = Some(Torn::InFile);
            }
            self.last_hex = self.last.hex();
            self.size += done as u64;
        }
        error
    }

    /// Forgets the deferred lines after a failure that refuses every record, saying so.
    fn drop_pending(&mut self, path: &Path) {
        if let Some(last) = self.pending.last() {
            tracing::error!(
                audit.path = %path.display(),
                request.id = %last.id(),
                records = self.pending.len(),
                "Deferred audit records not written and dropped"
            );
        }
        self.pending.clear();
        self.pending_bytes = 0;
    }

    /// Cuts the file back to where the failed line started, so it keeps whole lines only. Only
    /// when the file ends exactly with the `done` bytes just written: a file that grew otherwise
    /// (another process appended despite the lock) is never cut, and keeps a torn end instead.
    fn undo_partial_write(&mut self, done: usize) -> bool {
        let expected = self.size + done as u64;
        match self.file.metadata() {
            Ok(meta) if meta.len() == expected => self.file.set_len(self.size).is_ok(),
            _ => false,
        }
    }

    /// Ends a torn fragment with a newline and records an `audit_torn_line` event chained
    /// from it.
    fn repair(&mut self, path: &Path, events: &AtomicU64) -> io::Result<()> {
        if self.torn == Some(Torn::InFile) {
            loop {
                match (&*self.file).write(b"\n") {
                    Ok(1) => break,
                    Ok(_) => return Err(io::ErrorKind::WriteZero.into()),
                    Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                    Err(error) => return Err(error),
                }
            }
            self.size += 1;
            self.torn = Some(Torn::NeedsEvent);
        }
        let number = events.fetch_add(1, Ordering::Relaxed);
        let id = super::event_id(number);
        let record = match ReasonCode::new(TORN_LINE_REASON) {
            Ok(reason) => AuditRecord::event(now(), id, reason, ChainHash::genesis()),
            Err(_) => return Err(io::ErrorKind::InvalidData.into()),
        };
        let line = PreparedLine::new(&record).map_err(|_| io::ErrorKind::InvalidData)?;
        self.write_lines(&mut [line])?;
        self.torn = None;
        tracing::warn!(audit.path = %path.display(), "Recovered an incomplete audit line");
        Ok(())
    }

    /// Rotates before appending `incoming` more bytes would pass the size bound. Best effort:
    /// a failure is logged and retried later, and the record goes to the current file.
    fn rotate_if_due(&mut self, shared: &Shared, incoming: usize) {
        let Some(limit) = self.rotate_bytes else {
            return;
        };
        if self.size == 0 || self.size + incoming as u64 <= limit {
            return;
        }
        if self.rotation_retry_at.is_some_and(|at| Instant::now() < at) {
            return;
        }
        let result = self.finish_file(shared).and_then(|()| {
            match fs::symlink_metadata(&shared.path) {
                // Only rename the path while it still names this writer's file.
                Ok(meta) if (meta.dev(), meta.ino()) == self.file_id => {
                    rename_to_next(&shared.path).map(drop)
                }
                Ok(_) => Ok(()),
                Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(()),
                Err(error) => Err(error),
            }
            .and_then(|()| self.switch_file(shared))
        });
        match result {
            Ok(()) => self.rotation_retry_at = None,
            Err(error) => {
                tracing::warn!(
                    audit.path = %shared.path.display(),
                    error = %error,
                    "Audit log rotation failed; retrying later"
                );
                self.rotation_retry_at = Some(Instant::now() + ROTATION_RETRY);
            }
        }
    }

    /// Makes everything written to the current file durable before it stops being current
    /// (skipped in `never` mode). A failure poisons the log.
    fn finish_file(&mut self, shared: &Shared) -> io::Result<()> {
        if shared.durability == Durability::Never {
            return Ok(());
        }
        if let Err(error) = (shared.sync_file)(&self.file) {
            self.poisoned.get_or_insert(error.kind());
            if mark_failed(shared, error.kind()) {
                log_sync_failure(&shared.path, &error);
            }
            return Err(error);
        }
        mark_synced(shared, self.seq);
        Ok(())
    }

    /// Opens (or creates) the file now at the path and makes it current. An empty file
    /// continues this writer's chain; a file someone else filled continues from its last line.
    fn switch_file(&mut self, shared: &Shared) -> io::Result<()> {
        let file = file::open_log(&shared.path)?;
        let meta = file.metadata()?;
        if shared.durability != Durability::Never {
            sync_dir(&shared.path)?;
        }
        if meta.len() > 0 {
            tracing::warn!(
                audit.path = %shared.path.display(),
                "Audit log path holds a file this writer did not write; continuing its chain"
            );
            if let Some(last) = read_last_line(&file, meta.len())? {
                self.last = last.line.hash;
                self.last_hex = self.last.hex();
                if !last.line.terminated {
                    self.torn = Some(Torn::InFile);
                }
            }
        }
        self.file = Arc::new(file);
        self.file_id = (meta.dev(), meta.ino());
        self.size = meta.len();
        Ok(())
    }
}

/// Takes the exclusive lock on `<log>.lock`, waiting briefly for a `mint audit rotate` that
/// holds it for a moment.
fn take_lock(path: &Path) -> Result<File, AuditError> {
    let lock = lock_path(path);
    let deadline = Instant::now() + LOCK_WAIT;
    loop {
        match try_lock(&lock) {
            Ok(Some(file)) => return Ok(file),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(LOCK_RETRY),
            Ok(None) => {
                return Err(AuditError::Locked {
                    path: path.to_path_buf(),
                });
            }
            Err(source) => return Err(AuditError::open(&lock, source)),
        }
    }
}

/// Says in Mint's log that a batch ending with record `id` could not be written: it held
/// `deferred` queued records, of which `whole` reached the file anyway (a write that could not
/// be undone) and `kept` stay queued for the next attempt; the others are lost. Never a
/// record's content.
fn log_write_failure(
    path: &Path,
    id: &str,
    deferred: usize,
    whole: usize,
    kept: usize,
    error: &io::Error,
) {
    tracing::error!(
        audit.path = %path.display(),
        request.id = %id,
        deferred,
        written_whole = whole,
        still_queued = kept,
        error = %error,
        "Audit record not written"
    );
}

/// Sets the `prev` hex digits at the end of a prepared line to `prev_hex` and returns the
/// line's hash (of the line without its newline). `None` if the line is too short to be one.
fn splice(line: &mut [u8], prev_hex: &[u8; 64]) -> Option<LineHash> {
    let end = line.len();
    let start = end.checked_sub(PREV_FROM_END)?;
    line.get_mut(start..end - 3)?.copy_from_slice(prev_hex);
    Some(LineHash::of(line.get(..end - 1)?))
}

/// Says once, in Mint's log, why the log now refuses every record.
fn log_sync_failure(path: &Path, error: &io::Error) {
    tracing::error!(
        audit.path = %path.display(),
        error = %error,
        "Audit log fsync failed; refusing every further record until Mint restarts"
    );
}

/// Where the chain continues: the last line of the current file, else of the newest rotated
/// predecessor, else genesis. Also says whether that last line is torn.
fn chain_tail(path: &Path, file: &File, size: u64) -> Result<(LineHash, Option<Torn>), AuditError> {
    let read_error = |path: &Path| {
        let path = path.to_path_buf();
        move |source| AuditError::read_tail(&path, source)
    };
    if size > 0 {
        let last = read_last_line(file, size).map_err(read_error(path))?;
        return Ok(match last {
            Some(last) => {
                warn_if_not_record(path, &last.line);
                let torn = (!last.line.terminated).then_some(Torn::InFile);
                (last.line.hash, torn)
            }
            None => (LineHash::GENESIS, None),
        });
    }
    let predecessors = rotated_files(path).map_err(read_error(path))?;
    for previous in predecessors.iter().rev() {
        // A FIFO or a symbolic link planted at a rotated name is refused, never waited on.
        let file = file::open_read(previous).map_err(read_error(previous))?;
        let len = file.metadata().map_err(read_error(previous))?.len();
        if let Some(last) = read_last_line(&file, len).map_err(read_error(previous))? {
            warn_if_not_record(previous, &last.line);
            let torn = (!last.line.terminated).then_some(Torn::NeedsEvent);
            return Ok((last.line.hash, torn));
        }
    }
    Ok((LineHash::GENESIS, None))
}

fn warn_if_not_record(path: &Path, line: &super::chain::Line) {
    if line.terminated
        && let Err(defect) = super::chain::parse_line(line)
    {
        tracing::warn!(
            audit.path = %path.display(),
            defect = defect.code(),
            "Last audit line is not a record; continuing the chain from it"
        );
    }
}

/// The reason of the event written after a torn line is recovered.
pub const TORN_LINE_REASON: &str = "audit_torn_line";

/// Bytes from the end of a prepared line to the start of its `prev` hex digits:
/// 64 digits, then `"}` and the newline.
const PREV_FROM_END: usize = 64 + 3;
/// The most bytes of deferred lines held in memory: about a hundred outcome records. A line
/// that would pass it is written at once, with those before it.
pub(super) const PENDING_MAX_BYTES: usize = 64 * 1024;
const LOCK_WAIT: Duration = Duration::from_millis(500);
const LOCK_RETRY: Duration = Duration::from_millis(10);
const ROTATION_RETRY: Duration = Duration::from_secs(10);

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic, reason = "tests")]

    use mint_policy::audit::{AuditDecision, HttpStatus, Outcome, RequestId};

    use super::*;
    use crate::audit::verify::{VerifyOptions, verify_files};

    fn prepared(n: usize, decision: bool) -> PreparedLine {
        let id = RequestId::new(format!("req-{n}")).unwrap();
        let record = if decision {
            AuditRecord::decision(now(), id, AuditDecision::Allow, ChainHash::genesis())
        } else {
            let mut record =
                AuditRecord::outcome(now(), id, Outcome::Completed, ChainHash::genesis());
            record.status = Some(HttpStatus::new(200).unwrap());
            record
        };
        PreparedLine::new(&record).unwrap()
    }

    fn open(path: &Path) -> Shared {
        let config = AuditConfig {
            durability: Durability::Never,
            rotate_bytes: None,
        };
        Shared::open(path, &config, Arc::new(|file: &File| file.sync_data())).unwrap()
    }

    /// `lines` chained from the writer's last line as `write_lines` chains them: the batch's
    /// bytes and where each line ends.
    fn chained(writer: &Writer, lines: &mut [PreparedLine]) -> (Vec<u8>, Vec<(usize, LineHash)>) {
        let mut batch = Vec::new();
        let mut ends = Vec::new();
        let mut prev = writer.last_hex;
        for line in lines {
            let hash = splice(&mut line.bytes, &prev).unwrap();
            batch.extend_from_slice(&line.bytes);
            ends.push((batch.len(), hash));
            prev = hash.hex();
        }
        (batch, ends)
    }

    /// The queue holds at most `PENDING_MAX_BYTES`: the line that would pass the bound goes
    /// out at once, with everything queued before it. (No flusher runs here: nothing else
    /// drains the queue.)
    #[test]
    fn the_deferred_queue_is_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        let shared = open(&path);
        let line_len = prepared(0, false).bytes.len();
        let fit = PENDING_MAX_BYTES / line_len;
        // The same line every time, so every line has the same length.
        for _ in 0..fit {
            shared.defer(prepared(0, false)).unwrap();
            assert_eq!(fs::metadata(&path).unwrap().len(), 0, "queued, not written");
        }
        assert_eq!(shared.writer.lock().unwrap().pending_bytes, fit * line_len);
        shared.defer(prepared(0, false)).unwrap();
        let writer = shared.writer.lock().unwrap();
        assert_eq!((writer.pending.len(), writer.pending_bytes), (0, 0));
        assert_eq!(
            writer.seq,
            fit as u64 + 1,
            "every queued line and the new one"
        );
        drop(writer);
        assert_eq!(
            fs::metadata(&path).unwrap().len(),
            ((fit + 1) * line_len) as u64
        );
    }

    /// A failed write that reached nothing refuses only the caller's record: the queued
    /// outcomes wait for the next write, chained then, in order.
    #[test]
    fn a_failed_write_keeps_the_queued_lines_for_the_next_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        let shared = open(&path);
        shared.append(prepared(0, true)).unwrap();
        shared.defer(prepared(0, false)).unwrap();
        shared.defer(prepared(1, false)).unwrap();
        let before = fs::read(&path).unwrap();
        // Swap in a read-only descriptor of the same file: every write(2) fails (EBADF).
        let good = {
            let mut writer = shared.writer.lock().unwrap();
            let read_only = Arc::new(File::open(&path).unwrap());
            std::mem::replace(&mut writer.file, read_only)
        };
        assert!(matches!(
            shared.append(prepared(2, true)),
            Err(AuditError::Write { .. })
        ));
        assert!(
            shared.write_pending().is_err(),
            "the flusher's retry fails too"
        );
        assert_eq!(fs::read(&path).unwrap(), before, "nothing reached the file");
        assert_eq!(shared.writer.lock().unwrap().pending.len(), 2);
        shared.writer.lock().unwrap().file = good;
        shared.append(prepared(3, true)).unwrap();
        let text = fs::read_to_string(&path).unwrap();
        let ids: Vec<(String, String)> = text
            .lines()
            .map(|line| {
                let record = mint_policy::audit::parse_record(line).unwrap();
                (record.phase.as_str().to_owned(), record.id.to_string())
            })
            .collect();
        let expected: Vec<(String, String)> = [
            ("decision", "req-0"),
            ("outcome", "req-0"),
            ("outcome", "req-1"),
            ("decision", "req-3"),
        ]
        .iter()
        .map(|(p, i)| ((*p).to_owned(), (*i).to_owned()))
        .collect();
        assert_eq!(ids, expected);
        let report = verify_files(&[path], VerifyOptions::default()).unwrap();
        assert!(report.is_intact(), "{:?}", report.first_break);
    }

    /// A batch cut short by the kernel is undone whole: the file keeps only what it held.
    #[test]
    fn a_batch_written_in_part_is_undone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        let shared = open(&path);
        shared.append(prepared(0, true)).unwrap();
        let before = fs::read(&path).unwrap();
        let mut writer = shared.writer.lock().unwrap();
        let (seq, last) = (writer.seq, writer.last);
        let mut lines = [prepared(0, false), prepared(1, true)];
        // Chain the batch as `write_lines` does, then write it only part-way into line 2.
        let (batch, ends) = chained(&writer, &mut lines);
        let done = ends[0].0 + 10;
        (&*writer.file).write_all(&batch[..done]).unwrap();
        let error = writer.torn_by(&batch, &ends, done, io::ErrorKind::StorageFull.into());
        assert_eq!(error.kind(), io::ErrorKind::StorageFull);
        assert_eq!(fs::read(&path).unwrap(), before);
        assert_eq!((writer.seq, writer.last, writer.torn), (seq, last, None));
    }

    /// A batch that cannot be undone (the file grew otherwise meanwhile) keeps its whole lines
    /// in the chain, and the fragment after them becomes the torn end to repair.
    #[test]
    fn a_batch_that_cannot_be_undone_keeps_its_whole_lines_in_the_chain() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        let shared = open(&path);
        let mut writer = shared.writer.lock().unwrap();
        let mut lines = [prepared(0, false), prepared(1, false), prepared(2, true)];
        let (batch, ends) = chained(&writer, &mut lines);
        let done = ends[1].0 + 25;
        (&*writer.file).write_all(&batch[..done]).unwrap();
        // Another writer's byte: the file no longer ends with exactly this batch's bytes.
        fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(b"x")
            .unwrap();
        let _ = writer.torn_by(&batch, &ends, done, io::ErrorKind::StorageFull.into());
        assert_eq!(writer.seq, 2, "the two whole lines count");
        assert_eq!(writer.torn, Some(Torn::InFile));
        assert_eq!(
            writer.last,
            LineHash::of(&batch[ends[1].0..done]),
            "the chain continues from the fragment"
        );
        assert_eq!(writer.size, done as u64);
        // The whole lines are a valid chain on their own.
        let whole = dir.path().join("whole.log");
        fs::write(&whole, &batch[..ends[1].0]).unwrap();
        let report = verify_files(&[whole], VerifyOptions::default()).unwrap();
        assert!(report.is_intact(), "{:?}", report.first_break);
        assert_eq!(report.records, 2);
    }
}
