//! A log that cannot be written refuses the record, so the request is refused (503
//! `audit_unavailable`) and never forwarded: a full disk (a 64 KiB tmpfs mounted for the test)
//! and a read-only file (`chattr +i`, which stops root too, unlike `chmod 0400`). After the
//! problem is fixed, writing resumes and the chain is intact; a line the full disk cut short is
//! cut back by the writer that wrote it (docs/audit.md, "Crashes", "The disk fills up"), so the file holds whole
//! lines only.
//!
//! Both need root (mount, chattr) and a file system that supports them; where that is not the
//! case the test says so on stderr and passes without checking.

#![expect(clippy::unwrap_used, reason = "test helpers")]

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use mint_broker::audit::rotation::log_set;
use mint_broker::audit::verify::{VerifyOptions, verify_files};
use mint_broker::audit::{AuditConfig, AuditError, AuditLog, Durability, now};
use mint_policy::audit::{AgentName, AuditDecision, AuditRecord, ChainHash, RequestId, UrlPath};

fn decision(n: usize) -> AuditRecord {
    let mut record = AuditRecord::decision(
        now(),
        RequestId::new(format!("req-{n}")).unwrap(),
        AuditDecision::Allow,
        ChainHash::genesis(),
    );
    record.agent = Some(AgentName::new("mino").unwrap());
    record.path = Some(UrlPath::new(format!("/some/longer/path/to/fill/pages/{n}")).unwrap());
    record
}

/// What the proxy does with a request: record the decision, then forward; never forward
/// unrecorded. Returns the status answered.
fn handle(log: &AuditLog, n: usize, forwarded: &mut Vec<usize>) -> u16 {
    match log.record(&decision(n)) {
        Ok(_) => {
            forwarded.push(n);
            200
        }
        Err(_) => 503,
    }
}

fn skip(why: &str) {
    let _ = writeln!(std::io::stderr(), "skipped: {why}");
}

fn run(program: &str, args: &[&str]) -> bool {
    Command::new(program)
        .args(args)
        .output()
        .is_ok_and(|output| output.status.success())
}

/// A tmpfs mounted for the test, unmounted on drop (also when the test fails).
struct Tmpfs {
    dir: PathBuf,
}

impl Tmpfs {
    fn mount(dir: &Path, size: &str) -> Option<Tmpfs> {
        fs::create_dir_all(dir).unwrap();
        let options = format!("size={size},mode=0700");
        let path = dir.to_str().unwrap();
        run("mount", &["-t", "tmpfs", "-o", &options, "tmpfs", path]).then(|| Tmpfs {
            dir: dir.to_path_buf(),
        })
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let path = self.dir.to_str().unwrap();
        if !run("umount", &[path]) {
            run("umount", &["-l", path]);
        }
    }
}

#[test]
fn a_full_disk_refuses_requests_and_recovers() {
    let dir = tempfile::tempdir().unwrap();
    let Some(tmpfs) = Tmpfs::mount(&dir.path().join("mnt"), "64k") else {
        return skip("cannot mount a tmpfs here (not root, or no CAP_SYS_ADMIN)");
    };
    let path = tmpfs.dir.join("audit.log");
    let filler = tmpfs.dir.join("filler");
    fs::write(&filler, vec![0u8; 16 * 1024]).unwrap();
    let log = AuditLog::open(
        &path,
        AuditConfig {
            durability: Durability::Interval,
            rotate_bytes: None,
        },
    )
    .unwrap();
    let mut forwarded = Vec::new();
    let mut refused = None;
    for n in 0..10_000 {
        if handle(&log, n, &mut forwarded) == 503 {
            refused = Some(n);
            break;
        }
    }
    let refused = refused.expect("the disk never filled up");
    assert!(!forwarded.contains(&refused));
    match log.record(&decision(refused)) {
        Err(AuditError::Write { source, .. }) => {
            assert_eq!(source.kind(), std::io::ErrorKind::StorageFull);
        }
        other => panic!("expected a write error, got {other:?}"),
    }
    // Every refused request stays refused while the disk is full.
    for n in refused..refused + 20 {
        assert_eq!(handle(&log, n, &mut forwarded), 503);
    }
    // The file holds whole records, and possibly one line cut short by ENOSPC.
    let text = fs::read(&path).unwrap();
    let whole = text.iter().filter(|&&b| b == b'\n').count();
    assert_eq!(whole, forwarded.len());

    // Space comes back: requests are recorded and forwarded again, and the chain is intact.
    fs::remove_file(&filler).unwrap();
    assert_eq!(handle(&log, 50_000, &mut forwarded), 200);
    drop(log);
    let report = verify_files(&log_set(&path).unwrap(), VerifyOptions::default()).unwrap();
    assert!(report.is_intact(), "{:?}", report.first_break);
    assert!(report.recovered.len() <= 1);
    assert_eq!(
        report.records as usize,
        forwarded.len() + report.recovered.len(),
        "every forwarded request has its record (plus one torn-line event per recovery)"
    );

    // A log on a read-only file system cannot even be opened.
    assert!(run(
        "mount",
        &["-o", "remount,ro", tmpfs.dir.to_str().unwrap()]
    ));
    match AuditLog::open(&path, AuditConfig::default()) {
        Err(AuditError::Open { source, .. }) => {
            assert_eq!(source.kind(), std::io::ErrorKind::ReadOnlyFilesystem);
        }
        other => panic!("expected an open error, got {other:?}"),
    }
}

/// Sets the immutable attribute on a file; clears it on drop so the temporary directory can be
/// removed even when the test fails.
struct Immutable {
    path: PathBuf,
}

impl Immutable {
    fn set(path: &Path) -> Option<Immutable> {
        run("chattr", &["+i", path.to_str().unwrap()]).then(|| Immutable {
            path: path.to_path_buf(),
        })
    }
}

impl Drop for Immutable {
    fn drop(&mut self) {
        run("chattr", &["-i", self.path.to_str().unwrap()]);
    }
}

#[test]
fn a_read_only_file_refuses_requests() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.log");
    let log = AuditLog::open(
        &path,
        AuditConfig {
            durability: Durability::Always,
            rotate_bytes: None,
        },
    )
    .unwrap();
    let mut forwarded = Vec::new();
    assert_eq!(handle(&log, 1, &mut forwarded), 200);
    let Some(immutable) = Immutable::set(&path) else {
        return skip("chattr +i is not supported here (file system or privileges)");
    };
    assert_eq!(handle(&log, 2, &mut forwarded), 503);
    match log.record(&decision(3)) {
        Err(AuditError::Write { source, .. }) => {
            assert_eq!(source.kind(), std::io::ErrorKind::PermissionDenied);
        }
        other => panic!("expected a write error, got {other:?}"),
    }
    // A broker starting now cannot open it either.
    drop(log);
    assert!(matches!(
        AuditLog::open(&path, AuditConfig::default()),
        Err(AuditError::Open { .. })
    ));
    drop(immutable);
    let log = AuditLog::open(&path, AuditConfig::default()).unwrap();
    assert_eq!(handle(&log, 4, &mut forwarded), 200);
    drop(log);
    assert_eq!(forwarded, [1, 4]);
    let report = verify_files(&[path], VerifyOptions::default()).unwrap();
    assert!(report.is_intact(), "{:?}", report.first_break);
    assert_eq!(report.records, 2);
}
