//! Unit tests of the audit log: configuration, prepared lines, the semantics of a failed fsync
//! (through the test-only sync seam), and the refusal of unsafe files by the writer, `tail` and
//! `verify`.

use std::io::Write;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use mint_policy::audit::{AuditDecision, Field, parse_record};
use tracing_subscriber::fmt::MakeWriter;

use super::file::testing::{make_fifo, without_hanging};
use super::verify::verify_files;
use super::*;

#[test]
fn config_from_the_environment() {
    let lookup = |vars: &'static [(&'static str, &'static str)]| {
        move |name: &str| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v).to_owned())
        }
    };
    assert_eq!(
        AuditConfig::from_lookup(lookup(&[])).unwrap(),
        AuditConfig::default()
    );
    let config = AuditConfig::from_lookup(lookup(&[
        ("MINT_AUDIT_DURABILITY", "always"),
        ("MINT_AUDIT_ROTATE_BYTES", "4096"),
    ]))
    .unwrap();
    assert_eq!(config.durability, Durability::Always);
    assert_eq!(config.rotate_bytes, Some(4096));
    let off = AuditConfig::from_lookup(lookup(&[("MINT_AUDIT_ROTATE_BYTES", "0")])).unwrap();
    assert_eq!(off.rotate_bytes, None);
    assert!(AuditConfig::from_lookup(lookup(&[("MINT_AUDIT_DURABILITY", "sometimes")])).is_err());
    // Issue 23: the size grammar of the flags (`--max-request-body 10MiB`).
    let sized = AuditConfig::from_lookup(lookup(&[("MINT_AUDIT_ROTATE_BYTES", "64MiB")])).unwrap();
    assert_eq!(sized.rotate_bytes, Some(64 << 20));
    assert!(AuditConfig::from_lookup(lookup(&[("MINT_AUDIT_ROTATE_BYTES", "64 MiB")])).is_err());
    assert!(AuditConfig::from_lookup(lookup(&[("MINT_AUDIT_ROTATE_BYTES", "1.5GiB")])).is_err());
}

#[test]
fn prepared_lines_end_with_a_genesis_prev_to_splice() {
    let record = AuditRecord::decision(
        now(),
        RequestId::new("r1").unwrap(),
        AuditDecision::Allow,
        ChainHash::of_line("anything the caller put here"),
    );
    let line = PreparedLine::new(&record).unwrap();
    let text = std::str::from_utf8(&line.bytes).unwrap();
    assert!(text.ends_with(&format!("\"prev\":\"{GENESIS_PREV}\"}}\n")));
    assert!(parse_record(text.trim_end()).is_ok());
    assert!(!ends_with_genesis_prev(b""));
    assert!(!ends_with_genesis_prev(b"{\"prev\":\"sha256:00\"}"));
}

#[test]
fn refuses_records_that_do_not_fit() {
    let record = AuditRecord::decision(
        now(),
        RequestId::new("r1").unwrap(),
        AuditDecision::Deny,
        ChainHash::genesis(),
    );
    match PreparedLine::new(&record) {
        Err(AuditError::Shape(error)) => assert_eq!(error.field(), Field::Reason),
        other => panic!("expected a shape error, got {:?}", other.map(|l| l.bytes)),
    }
}

#[test]
fn clock_and_event_ids_fit_their_grammar() {
    assert_eq!(now().as_str().len(), "2026-11-30T05:39:20.123Z".len());
    let id = event_id(u64::MAX);
    assert!(id.as_str().starts_with("ev-"));
}

fn decision(n: usize) -> AuditRecord {
    AuditRecord::decision(
        now(),
        RequestId::new(format!("req-{n}")).unwrap(),
        AuditDecision::Allow,
        ChainHash::genesis(),
    )
}

fn config(durability: Durability) -> AuditConfig {
    AuditConfig {
        durability,
        rotate_bytes: None,
    }
}

fn line_count(path: &Path) -> usize {
    std::fs::read(path)
        .unwrap()
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
}

/// An fsync that always fails with `EIO`, counting its calls.
fn failing_sync(
    calls: &Arc<AtomicUsize>,
) -> impl Fn(&File) -> io::Result<()> + Send + Sync + 'static {
    let calls = Arc::clone(calls);
    move |_: &File| {
        calls.fetch_add(1, Ordering::SeqCst);
        Err(io::Error::from_raw_os_error(libc::EIO))
    }
}

/// Waits until `done` holds, for at most a few seconds.
#[track_caller]
fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting: {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Mint's log as text: a `tracing` subscriber for one test, which the flusher thread inherits.
#[derive(Clone, Default)]
struct CapturedLog(Arc<Mutex<Vec<u8>>>);

impl CapturedLog {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }

    fn run<T>(&self, body: impl FnOnce() -> T) -> T {
        let subscriber = tracing_subscriber::fmt()
            .with_writer(self.clone())
            .with_ansi(false)
            .finish();
        tracing::subscriber::with_default(subscriber, body)
    }
}

impl Write for CapturedLog {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for CapturedLog {
    type Writer = CapturedLog;

    fn make_writer(&'a self) -> CapturedLog {
        self.clone()
    }
}

const SYNC_FAILED: &str = "Audit log fsync failed";

#[test]
fn always_mode_a_failed_fsync_fails_the_waiting_record_and_refuses_every_later_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.log");
    let calls = Arc::new(AtomicUsize::new(0));
    let captured = CapturedLog::default();
    captured.run(|| {
        let log =
            AuditLog::open_failing_sync(&path, config(Durability::Always), failing_sync(&calls))
                .unwrap();
        // The waiting record: written, but its fsync failed, so the request must be refused.
        match log.record(&decision(1)) {
            Err(AuditError::NotDurable { path: at, .. }) => assert_eq!(at, path),
            other => panic!("expected NotDurable, got {other:?}"),
        }
        assert_eq!(line_count(&path), 1);
        // Every later record is refused unwritten, in every way of writing one.
        for n in 2..5 {
            assert!(matches!(
                log.record(&decision(n)),
                Err(AuditError::Unavailable { .. })
            ));
        }
        assert!(matches!(
            log.append(&decision(5)),
            Err(AuditError::Unavailable { .. })
        ));
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        assert!(matches!(
            runtime.block_on(log.record_async(&decision(6))),
            Err(AuditError::Unavailable { .. })
        ));
        assert!(
            log.event(ReasonCode::new("broker_started").unwrap())
                .is_err()
        );
        assert!(log.sync().is_err());
        assert_eq!(line_count(&path), 1);
        // A retried fsync could succeed falsely: there is none, however long the log stays open.
        std::thread::sleep(ROTATION_POLL * 3);
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        drop(log);
    });
    let text = captured.text();
    assert_eq!(text.matches(SYNC_FAILED).count(), 1, "{text}");
    assert!(text.contains(&path.display().to_string()), "{text}");
}

#[test]
fn always_mode_async_waiters_get_the_failure_too() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.log");
    let calls = Arc::new(AtomicUsize::new(0));
    let log = AuditLog::open_failing_sync(&path, config(Durability::Always), failing_sync(&calls))
        .unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    let results: Vec<_> = runtime.block_on(async {
        let tasks: Vec<_> = (0..8)
            .map(|n| {
                let log = log.clone();
                tokio::spawn(async move { log.record_async(&decision(n)).await })
            })
            .collect();
        let mut results = Vec::new();
        for task in tasks {
            results.push(task.await.unwrap());
        }
        results
    });
    // Each record was either written and then failed by the fsync, or refused after it: none
    // is reported durable.
    for result in &results {
        assert!(
            matches!(
                result,
                Err(AuditError::NotDurable { .. } | AuditError::Unavailable { .. })
            ),
            "{result:?}"
        );
    }
    assert!(
        results
            .iter()
            .any(|r| matches!(r, Err(AuditError::NotDurable { .. })))
    );
}

#[test]
fn interval_mode_records_after_a_failed_fsync_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.log");
    let calls = Arc::new(AtomicUsize::new(0));
    let captured = CapturedLog::default();
    captured.run(|| {
        let log =
            AuditLog::open_failing_sync(&path, config(Durability::Interval), failing_sync(&calls))
                .unwrap();
        // `interval` does not wait for the fsync: the record is written and acknowledged.
        log.record(&decision(1)).unwrap();
        // The flusher's next fsync fails...
        wait_until("the flusher's fsync", || calls.load(Ordering::SeqCst) >= 1);
        // (A record written between the fsync's call and its failure is still acknowledged.)
        let mut written = 1;
        wait_until("the log to refuse records", || {
            match log.record(&decision(2)) {
                Ok(_) => {
                    written += 1;
                    false
                }
                Err(AuditError::Unavailable { .. }) => true,
                Err(other) => panic!("expected Unavailable, got {other:?}"),
            }
        });
        // ...and from then on every record is refused unwritten, with an error naming the log.
        for n in 3..10 {
            match log.record(&decision(n)) {
                Err(error @ AuditError::Unavailable { .. }) => {
                    let message = error.to_string();
                    assert!(
                        message.contains("unavailable after a failed fsync"),
                        "{message}"
                    );
                    assert!(message.contains(&path.display().to_string()), "{message}");
                }
                other => panic!("expected Unavailable, got {other:?}"),
            }
        }
        assert!(matches!(
            log.append(&decision(10)),
            Err(AuditError::Unavailable { .. })
        ));
        assert!(matches!(log.sync(), Err(AuditError::NotDurable { .. })));
        assert_eq!(line_count(&path), written);
        std::thread::sleep(FLUSH_INTERVAL * 5);
        assert_eq!(
            calls.load(Ordering::SeqCst),
            1,
            "a failed fsync is never retried"
        );
        drop(log);
    });
    let text = captured.text();
    assert_eq!(text.matches(SYNC_FAILED).count(), 1, "{text}");
}

#[test]
fn a_failed_fsync_before_a_rotation_in_interval_mode_refuses_the_record() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.log");
    let calls = Arc::new(AtomicUsize::new(0));
    let log = AuditLog::open_failing_sync(
        &path,
        AuditConfig {
            durability: Durability::Interval,
            rotate_bytes: Some(1024),
        },
        failing_sync(&calls),
    )
    .unwrap();
    let mut written = 0;
    let refused = loop {
        match log.record(&decision(written)) {
            Ok(_) => written += 1,
            Err(error) => break error,
        }
        assert!(written < 100, "no record was refused");
    };
    assert!(
        matches!(refused, AuditError::Unavailable { .. }),
        "{refused:?}"
    );
    // Nothing was renamed: a file that could not be made durable is not rotated.
    assert!(rotation::rotated_files(&path).unwrap().is_empty());
    assert_eq!(line_count(&path), written);
}

#[test]
fn the_writer_refuses_a_symbolic_link_at_the_log_or_lock_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.log");
    let elsewhere = dir.path().join("elsewhere");
    std::fs::write(&elsewhere, b"").unwrap();
    symlink(&elsewhere, &path).unwrap();
    match AuditLog::open(&path, AuditConfig::default()) {
        Err(AuditError::Unsafe { path: at, problem }) => {
            assert_eq!(at, path);
            assert_eq!(problem, UnsafeFile::Symlink);
        }
        other => panic!("expected Unsafe, got {other:?}"),
    }
    assert_eq!(std::fs::read(&elsewhere).unwrap(), b"");
    std::fs::remove_file(&path).unwrap();

    // The lock file was taken (and created) before the log was refused; plant a link there.
    let lock = rotation::lock_path(&path);
    std::fs::remove_file(&lock).unwrap();
    symlink(&elsewhere, &lock).unwrap();
    match AuditLog::open(&path, AuditConfig::default()) {
        Err(error @ AuditError::Unsafe { .. }) => {
            assert_eq!(
                error.to_string(),
                format!(
                    "refusing audit file `{}`: it is a symbolic link (audit files are never \
                     opened through one)",
                    lock.display()
                )
            );
        }
        other => panic!("expected Unsafe, got {other:?}"),
    }
}

#[test]
fn the_writer_refuses_a_fifo_directory_or_group_writable_log() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo.log");
    make_fifo(&fifo);
    let opened = without_hanging(move || AuditLog::open(&fifo, AuditConfig::default()));
    assert!(matches!(
        opened,
        Err(AuditError::Unsafe {
            problem: UnsafeFile::NotRegular {
                kind: FileKind::Fifo
            },
            ..
        })
    ));

    let directory = dir.path().join("dir.log");
    std::fs::create_dir(&directory).unwrap();
    assert!(matches!(
        AuditLog::open(&directory, AuditConfig::default()),
        Err(AuditError::Unsafe {
            problem: UnsafeFile::NotRegular {
                kind: FileKind::Directory
            },
            ..
        })
    ));

    let shared = dir.path().join("shared.log");
    std::fs::write(&shared, b"").unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o660)).unwrap();
    assert!(matches!(
        AuditLog::open(&shared, AuditConfig::default()),
        Err(AuditError::Unsafe {
            problem: UnsafeFile::WritableByOthers { mode: 0o660 },
            ..
        })
    ));
}

#[test]
fn continuing_the_chain_never_waits_on_a_fifo_at_a_rotated_name() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.log");
    let log = AuditLog::open(&path, config(Durability::Never)).unwrap();
    log.record(&decision(1)).unwrap();
    drop(log);
    rotation::rename_to_next(&path).unwrap();
    // The newest predecessor is a FIFO: reading its last line would wait for a writer forever.
    let planted = dir.path().join("audit.log.2");
    make_fifo(&planted);
    let opened = {
        let path = path.clone();
        without_hanging(move || AuditLog::open(&path, AuditConfig::default()))
    };
    match opened {
        Err(AuditError::Unsafe { path: at, problem }) => {
            assert_eq!(at, planted);
            assert_eq!(
                problem,
                UnsafeFile::NotRegular {
                    kind: FileKind::Fifo
                }
            );
        }
        other => panic!("expected Unsafe, got {other:?}"),
    }
    // A symbolic link there is refused too, rather than continuing some other file's chain.
    std::fs::remove_file(&planted).unwrap();
    symlink(dir.path().join("audit.log.1"), &planted).unwrap();
    assert!(matches!(
        AuditLog::open(&path, AuditConfig::default()),
        Err(AuditError::Unsafe {
            problem: UnsafeFile::Symlink,
            ..
        })
    ));
}

#[test]
fn verify_and_tail_refuse_a_fifo_or_symbolic_link_without_hanging() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.log");
    let log = AuditLog::open(&path, config(Durability::Never)).unwrap();
    log.record(&decision(1)).unwrap();
    drop(log);
    rotation::rename_to_next(&path).unwrap();
    make_fifo(&dir.path().join("audit.log.2"));
    let link_target = dir.path().join("audit.log.1");
    symlink(&link_target, &path).unwrap();

    // `mint audit verify` reads every file of the set: the FIFO is refused, not waited on.
    let files = rotation::log_set(&path).unwrap();
    assert_eq!(
        files.len(),
        3,
        "the link at the log's path is listed, to be refused"
    );
    let result = without_hanging(move || {
        verify::verify_files(&files, verify::VerifyOptions::default())
            .map(|_| ())
            .map_err(|error| (error.path.clone(), file::unsafe_file(&error.source)))
    });
    assert_eq!(
        result,
        Err((
            dir.path().join("audit.log.2"),
            Some(UnsafeFile::NotRegular {
                kind: FileKind::Fifo
            })
        ))
    );
    // The link at the log's path is refused by verify and by tail.
    let error = verify::verify_files(
        std::slice::from_ref(&path),
        verify::VerifyOptions::default(),
    )
    .unwrap_err();
    assert_eq!(file::unsafe_file(&error.source), Some(UnsafeFile::Symlink));
    let error = tail::read_tail(&path, 10, tail::TailMode::Rows).unwrap_err();
    assert_eq!(file::unsafe_file(&error), Some(UnsafeFile::Symlink));
    // A FIFO at the log's path: tail returns at once.
    std::fs::remove_file(&path).unwrap();
    make_fifo(&path);
    let tailed = {
        let path = path.clone();
        without_hanging(move || tail::read_tail(&path, 10, tail::TailMode::Rows).map(drop))
    };
    assert_eq!(
        file::unsafe_file(&tailed.unwrap_err()),
        Some(UnsafeFile::NotRegular {
            kind: FileKind::Fifo
        })
    );
    // Rotating refuses it too.
    assert!(matches!(
        rotation::rotate(&path, Duration::ZERO),
        Err(rotation::RotateError::Unsafe { .. })
    ));
}

#[test]
fn a_running_writer_never_follows_a_symbolic_link_planted_at_its_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.log");
    let elsewhere = dir.path().join("elsewhere");
    std::fs::write(&elsewhere, b"").unwrap();
    let log = AuditLog::open(&path, config(Durability::Interval)).unwrap();
    log.record(&decision(1)).unwrap();
    let moved = dir.path().join("moved.log");
    std::fs::rename(&path, &moved).unwrap();
    symlink(&elsewhere, &path).unwrap();
    // Give the flusher several ticks to notice the path changed (and refuse the link).
    std::thread::sleep(FLUSH_INTERVAL * 10);
    log.record(&decision(2)).unwrap();
    drop(log);
    assert_eq!(std::fs::read(&elsewhere).unwrap(), b"");
    assert_eq!(line_count(&moved), 2);
    let report = verify::verify_files(&[moved], verify::VerifyOptions::default()).unwrap();
    assert!(report.is_intact(), "{:?}", report.first_break);
}

fn outcome(n: usize) -> AuditRecord {
    let mut record = AuditRecord::outcome(
        now(),
        RequestId::new(format!("req-{n}")).unwrap(),
        mint_policy::audit::Outcome::Completed,
        ChainHash::genesis(),
    );
    record.status = Some(mint_policy::audit::HttpStatus::new(200).unwrap());
    record
}

/// The phase and id of every line of `path`, in order.
fn phases_and_ids(path: &Path) -> Vec<(String, String)> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|line| {
            let record = parse_record(line).unwrap();
            (record.phase.as_str().to_owned(), record.id.to_string())
        })
        .collect()
}

#[test]
fn deferred_records_go_out_before_the_next_record_and_chain_across_rotations() {
    for durability in [Durability::Interval, Durability::Never] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        let log = AuditLog::open(
            &path,
            AuditConfig {
                durability,
                rotate_bytes: Some(4096),
            },
        )
        .unwrap();
        for n in 0..40 {
            log.record(&decision(n)).unwrap();
            log.defer(&outcome(n)).unwrap();
        }
        log.sync().unwrap();
        let mut files = rotation::rotated_files(&path).unwrap();
        assert!(files.len() >= 3, "{durability}: {files:?}");
        files.push(path.clone());
        let report = verify_files(&files, verify::VerifyOptions::default()).unwrap();
        assert!(report.is_intact(), "{durability}: {:?}", report.first_break);
        assert_eq!(report.records, 80, "{durability}");
        // Each outcome follows its own decision: deferring never reorders a request's records.
        let lines: Vec<_> = files.iter().flat_map(|f| phases_and_ids(f)).collect();
        for (n, pair) in lines.chunks(2).enumerate() {
            let id = format!("req-{n}");
            assert_eq!(
                pair,
                [
                    ("decision".to_owned(), id.clone()),
                    ("outcome".to_owned(), id)
                ],
                "{durability}"
            );
        }
    }
}

#[test]
fn a_deferred_record_reaches_the_file_within_the_flusher_tick_without_another_record() {
    for durability in [Durability::Interval, Durability::Never] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        let log = AuditLog::open(&path, config(durability)).unwrap();
        log.defer(&outcome(1)).unwrap();
        wait_until("the flusher to write the deferred record", || {
            line_count(&path) == 1
        });
        assert_eq!(log.stats().records, 1);
    }
}

#[test]
fn sync_and_close_write_deferred_records_and_always_mode_writes_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sync.log");
    let log = AuditLog::open(&path, config(Durability::Never)).unwrap();
    log.defer(&outcome(1)).unwrap();
    log.sync().unwrap();
    assert_eq!(line_count(&path), 1, "sync writes the queue first");

    for durability in [Durability::Interval, Durability::Never] {
        let path = dir.path().join(format!("close-{durability}.log"));
        let log = AuditLog::open(&path, config(durability)).unwrap();
        for n in 0..5 {
            log.defer(&outcome(n)).unwrap();
        }
        drop(log);
        assert_eq!(
            line_count(&path),
            5,
            "{durability}: closing writes the queue"
        );
    }

    let path = dir.path().join("always.log");
    let log = AuditLog::open(&path, config(Durability::Always)).unwrap();
    log.defer(&outcome(1)).unwrap();
    assert_eq!(line_count(&path), 1, "`always` never defers");
}

#[test]
fn deferring_after_a_failed_fsync_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.log");
    let calls = Arc::new(AtomicUsize::new(0));
    let log =
        AuditLog::open_failing_sync(&path, config(Durability::Interval), failing_sync(&calls))
            .unwrap();
    log.record(&decision(1)).unwrap();
    wait_until("the log to refuse records", || {
        matches!(log.defer(&outcome(1)), Err(AuditError::Unavailable { .. }))
    });
    assert!(matches!(
        log.defer(&outcome(2)),
        Err(AuditError::Unavailable { .. })
    ));
}

#[test]
fn the_writer_refuses_a_log_directory_others_may_write_or_own() {
    let dir = tempfile::tempdir().unwrap();
    let open = |sub: &str, mode: u32| {
        let path = dir.path().join(sub);
        std::fs::create_dir(&path).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        (
            AuditLog::open(&path.join("audit.log"), AuditConfig::default()),
            path,
        )
    };
    let (opened, path) = open("shared", 0o770);
    match opened {
        Err(error @ AuditError::Unsafe { .. }) => {
            assert!(matches!(
                error,
                AuditError::Unsafe {
                    problem: UnsafeFile::DirectoryWritableByOthers { mode: 0o770 },
                    ..
                }
            ));
            let message = error.to_string();
            assert!(message.contains(&path.display().to_string()), "{message}");
            assert!(message.contains("chmod 700"), "{message}");
        }
        other => panic!("expected Unsafe, got {other:?}"),
    }
    assert!(!path.join("audit.log").exists(), "nothing created in it");
    // Even sticky (as /tmp): others could plant files at the lock's or rotated files' names.
    assert!(matches!(
        open("sticky", 0o1777).0,
        Err(AuditError::Unsafe {
            problem: UnsafeFile::DirectoryWritableByOthers { mode: 0o1777 },
            ..
        })
    ));
    assert!(open("private", 0o700).0.is_ok());
    // Owned by another user (only root can arrange that here).
    if rustix::process::geteuid().is_root() {
        let (_, path) = open("foreign", 0o700);
        std::os::unix::fs::chown(&path, Some(65534), None).unwrap();
        assert!(matches!(
            AuditLog::open(&path.join("audit.log"), AuditConfig::default()),
            Err(AuditError::Unsafe {
                problem: UnsafeFile::ForeignDirectory { owner: 65534, .. },
                ..
            })
        ));
    }
}

#[test]
fn check_writable_creates_and_writes_nothing_and_refuses_what_open_refuses() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let path = dir.path().join("audit.log");
    assert!(!AuditLog::check_writable(&path).unwrap(), "no log yet");
    assert!(!path.exists(), "nothing created");
    drop(AuditLog::open(&path, config(Durability::Never)).unwrap());
    let before = std::fs::read(&path).unwrap();
    assert!(AuditLog::check_writable(&path).unwrap());
    assert_eq!(std::fs::read(&path).unwrap(), before, "nothing written");

    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o622)).unwrap();
    assert!(matches!(
        AuditLog::check_writable(&path),
        Err(AuditError::Unsafe { .. })
    ));
    std::fs::remove_file(&path).unwrap();
    symlink(dir.path().join("elsewhere"), &path).unwrap();
    assert!(matches!(
        AuditLog::check_writable(&path),
        Err(AuditError::Unsafe {
            problem: UnsafeFile::Symlink,
            ..
        })
    ));
    std::fs::remove_file(&path).unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o770)).unwrap();
    assert!(
        AuditLog::check_writable(&path).is_err(),
        "an open directory"
    );
}
