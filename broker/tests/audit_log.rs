//! The audit writer through its public API: the chain from genesis, continuing after a restart,
//! one writer per log, many concurrent producers (threads and tokio tasks) without torn or
//! interleaved lines, group commit in `always` mode, rotation at the size bound and by
//! `mint audit rotate` while writing, a moved log, torn-end recovery, refused records.

#![expect(clippy::unwrap_used, reason = "test helpers")]

use std::collections::HashMap;
use std::fs;
use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use mint_broker::audit::rotation::{self, RotateOutcome, log_set};
use mint_broker::audit::verify::{VerifyOptions, verify_files};
use mint_broker::audit::{
    AuditConfig, AuditError, AuditLog, AuditSink, Durability, LineHash, TORN_LINE_REASON, now,
};
use mint_policy::audit::{
    AgentName, AuditDecision, AuditRecord, ChainHash, GENESIS_PREV, HttpStatus, Method, Outcome,
    Phase, ReasonCode, RequestId, chain_hash, parse_record,
};

fn config(durability: Durability) -> AuditConfig {
    AuditConfig {
        durability,
        rotate_bytes: None,
    }
}

fn decision(id: &str) -> AuditRecord {
    let mut record = AuditRecord::decision(
        now(),
        RequestId::new(id).unwrap(),
        AuditDecision::Allow,
        ChainHash::genesis(),
    );
    record.agent = Some(AgentName::new("mino").unwrap());
    record.method = Some(Method::new("GET").unwrap());
    record
}

fn outcome(id: &str) -> AuditRecord {
    let mut record = AuditRecord::outcome(
        now(),
        RequestId::new(id).unwrap(),
        Outcome::Completed,
        ChainHash::genesis(),
    );
    record.status = Some(HttpStatus::new(200).unwrap());
    record.duration_ms = Some(3);
    record
}

#[track_caller]
fn lines(path: &Path) -> Vec<String> {
    let text = fs::read_to_string(path).unwrap();
    assert!(
        text.is_empty() || text.ends_with('\n'),
        "log does not end with a newline"
    );
    text.lines().map(str::to_owned).collect()
}

#[track_caller]
fn assert_intact(files: &[std::path::PathBuf]) -> u64 {
    let report = verify_files(files, VerifyOptions::default()).unwrap();
    assert!(report.is_intact(), "{:?}", report.first_break);
    assert!(report.starts_at_genesis);
    report.records
}

#[test]
fn first_line_chains_from_genesis_and_each_line_from_the_one_before() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.log");
    let log = AuditLog::open(&path, config(Durability::Interval)).unwrap();
    let first = log.record(&decision("r1")).unwrap();
    let second = log.record(&outcome("r1")).unwrap();
    assert_eq!((first.seq(), second.seq()), (1, 2));
    drop(log);
    let lines = lines(&path);
    assert_eq!(lines.len(), 2);
    let one = parse_record(&lines[0]).unwrap();
    let two = parse_record(&lines[1]).unwrap();
    assert_eq!(one.prev.as_str(), GENESIS_PREV);
    assert_eq!(two.prev.as_str(), chain_hash(&lines[0]));
    assert_eq!(first.hash(), LineHash::of(lines[0].as_bytes()));
    assert_eq!(second.hash(), LineHash::of(lines[1].as_bytes()));
    assert_eq!(one.phase, Phase::Decision);
    assert_eq!(two.outcome, Some(Outcome::Completed));
}

#[test]
fn log_file_is_private() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.log");
    let _log = AuditLog::open(&path, config(Durability::Never)).unwrap();
    let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
}

#[test]
fn reopening_continues_the_chain() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.log");
    for round in 0..3 {
        let log = AuditLog::open(&path, config(Durability::Always)).unwrap();
        log.record(&decision(&format!("r{round}"))).unwrap();
        log.record(&outcome(&format!("r{round}"))).unwrap();
    }
    assert_eq!(lines(&path).len(), 6);
    assert_eq!(assert_intact(&[path]), 6);
}

#[test]
fn only_one_writer_per_log() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.log");
    let log = AuditLog::open(&path, config(Durability::Never)).unwrap();
    match AuditLog::open(&path, config(Durability::Never)) {
        Err(AuditError::Locked { path: locked }) => assert_eq!(locked, path),
        other => panic!("second writer opened: {other:?}"),
    }
    drop(log);
    AuditLog::open(&path, config(Durability::Never)).unwrap();
}

#[test]
fn many_threads_write_100k_whole_chained_lines() {
    const THREADS: usize = 8;
    const PER_THREAD: usize = 12_500;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.log");
    let log = AuditLog::open(&path, config(Durability::Interval)).unwrap();
    std::thread::scope(|scope| {
        for thread in 0..THREADS {
            let log = log.clone();
            scope.spawn(move || {
                for n in 0..PER_THREAD {
                    log.record(&decision(&format!("t{thread}-{n}"))).unwrap();
                }
            });
        }
    });
    assert_eq!(log.stats().records, (THREADS * PER_THREAD) as u64);
    drop(log);
    let lines = lines(&path);
    assert_eq!(lines.len(), THREADS * PER_THREAD);
    // Each producer's records appear in its own order (`verify_files` below parses every line
    // and checks the chain; here a cheap look at the id is enough).
    let mut next: HashMap<String, usize> = HashMap::new();
    for line in &lines {
        let id = line.split("\"id\":\"").nth(1).unwrap();
        let id = &id[..id.find('"').unwrap()];
        let (thread, n) = id.split_once('-').unwrap();
        let expected = next.entry(thread.to_owned()).or_insert(0);
        assert_eq!(n.parse::<usize>().unwrap(), *expected);
        *expected += 1;
    }
    assert_eq!(next.len(), THREADS);
    assert_eq!(assert_intact(&[path]), (THREADS * PER_THREAD) as u64);
}

#[test]
fn always_mode_waits_for_a_shared_fsync() {
    const THREADS: usize = 16;
    const PER_THREAD: usize = 40;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.log");
    let log = AuditLog::open(&path, config(Durability::Always)).unwrap();
    std::thread::scope(|scope| {
        for thread in 0..THREADS {
            let log = log.clone();
            scope.spawn(move || {
                for n in 0..PER_THREAD {
                    log.record(&decision(&format!("t{thread}-{n}"))).unwrap();
                }
            });
        }
    });
    let stats = log.stats();
    assert_eq!(stats.records, (THREADS * PER_THREAD) as u64);
    // Every record waited for an fsync covering it; concurrent ones shared them.
    assert!(stats.syncs >= 1);
    assert!(
        stats.syncs < stats.records,
        "no group commit: {} fsyncs for {} records",
        stats.syncs,
        stats.records
    );
    drop(log);
    assert_intact(&[path]);
}

#[test]
fn tokio_tasks_record_concurrently() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.log");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    for durability in [Durability::Always, Durability::Interval, Durability::Never] {
        let log = AuditLog::open(&path, config(durability)).unwrap();
        let sink: Arc<dyn AuditSink> = Arc::new(log.clone());
        runtime.block_on(async {
            let mut tasks = Vec::new();
            for task in 0..500 {
                let sink = Arc::clone(&sink);
                tasks.push(tokio::spawn(async move {
                    let id = format!("{durability}-{task}");
                    sink.record_async(&decision(&id)).await.unwrap();
                    tokio::task::yield_now().await;
                    sink.record_async(&outcome(&id)).await.unwrap();
                }));
            }
            for task in tasks {
                task.await.unwrap();
            }
        });
        if durability == Durability::Always {
            assert!(log.stats().syncs < 1000);
        }
    }
    assert_eq!(assert_intact(&[path]), 3000);
}

#[test]
fn rotates_at_the_size_bound_and_chains_across_files() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.log");
    let bound = 2048;
    let log = AuditLog::open(
        &path,
        AuditConfig {
            durability: Durability::Interval,
            rotate_bytes: Some(bound),
        },
    )
    .unwrap();
    for n in 0..60 {
        log.record(&decision(&format!("r{n}"))).unwrap();
    }
    drop(log);
    let files = log_set(&path).unwrap();
    assert!(files.len() > 5, "{files:?}");
    assert_eq!(files.last().unwrap(), &path);
    for file in &files {
        assert!(fs::metadata(file).unwrap().len() <= bound, "{file:?}");
    }
    // Each file's first line chains from the previous file's last line.
    for pair in files.windows(2) {
        let before = lines(&pair[0]);
        let after = lines(&pair[1]);
        let first = parse_record(&after[0]).unwrap();
        assert_eq!(first.prev.as_str(), chain_hash(before.last().unwrap()));
    }
    assert_eq!(assert_intact(&files), 60);
    // A new writer continues from the current file.
    let log = AuditLog::open(&path, config(Durability::Never)).unwrap();
    log.record(&decision("after")).unwrap();
    drop(log);
    assert_eq!(assert_intact(&log_set(&path).unwrap()), 61);
}

#[test]
fn a_new_log_continues_from_the_newest_rotated_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.log");
    let log = AuditLog::open(&path, config(Durability::Never)).unwrap();
    log.record(&decision("r1")).unwrap();
    drop(log);
    // Rotated while no writer runs: the next writer chains from audit.log.1.
    assert!(matches!(
        rotation::rotate(&path, Duration::ZERO).unwrap(),
        RotateOutcome::Rotated { .. }
    ));
    assert!(!path.exists());
    let log = AuditLog::open(&path, config(Durability::Never)).unwrap();
    log.record(&decision("r2")).unwrap();
    drop(log);
    let files = log_set(&path).unwrap();
    assert_eq!(files.len(), 2);
    assert_eq!(assert_intact(&files), 2);
}

#[test]
fn rotation_by_command_while_writing_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.log");
    let log = AuditLog::open(&path, config(Durability::Interval)).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let written = Arc::new(AtomicU64::new(0));
    let writers: Vec<_> = (0..2)
        .map(|thread| {
            let (log, stop, written) = (log.clone(), Arc::clone(&stop), Arc::clone(&written));
            std::thread::spawn(move || {
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    log.record(&decision(&format!("t{thread}-{n}"))).unwrap();
                    written.fetch_add(1, Ordering::Relaxed);
                    n += 1;
                    if n % 64 == 0 {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                }
            })
        })
        .collect();
    let mut live = 0;
    for _ in 0..4 {
        std::thread::sleep(Duration::from_millis(60));
        // On a loaded machine the writers may not have written to the new file yet: a rotation
        // then (rightly) finds nothing to rotate. Wait for a record, however long that takes.
        let deadline = Instant::now() + Duration::from_secs(20);
        while fs::metadata(&path).map(|m| m.len()).unwrap_or(0) == 0 {
            assert!(
                Instant::now() < deadline,
                "the writers wrote nothing for 20 s"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        match rotation::rotate(&path, Duration::from_secs(2)).unwrap() {
            RotateOutcome::RotatedLive { .. } => live += 1,
            other => panic!("unexpected rotation outcome {other:?}"),
        }
    }
    std::thread::sleep(Duration::from_millis(60));
    stop.store(true, Ordering::Relaxed);
    for writer in writers {
        writer.join().unwrap();
    }
    drop(log);
    assert_eq!(live, 4);
    let files = log_set(&path).unwrap();
    assert_eq!(files.len(), 5, "{files:?}");
    assert_eq!(assert_intact(&files), written.load(Ordering::Relaxed));
}

#[test]
fn a_moved_log_is_noticed_and_the_chain_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.log");
    let moved = dir.path().join("elsewhere.log");
    let log = AuditLog::open(&path, config(Durability::Interval)).unwrap();
    log.record(&decision("before")).unwrap();
    fs::rename(&path, &moved).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while !path.exists() {
        assert!(Instant::now() < deadline, "writer did not start a new file");
        std::thread::sleep(Duration::from_millis(10));
    }
    log.record(&decision("after")).unwrap();
    drop(log);
    assert_eq!(lines(&moved).len(), 1);
    assert_eq!(lines(&path).len(), 1);
    assert_eq!(assert_intact(&[moved, path]), 2);
}

#[test]
fn a_torn_last_line_is_ended_and_recorded_never_truncated() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.log");
    let log = AuditLog::open(&path, config(Durability::Never)).unwrap();
    log.record(&decision("r1")).unwrap();
    drop(log);
    let fragment = r#"{"v":1,"ts":"2026-11-30T05:39:20.1"#;
    fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap()
        .write_all(fragment.as_bytes())
        .unwrap();
    // Before recovery, verify reports the cut line.
    let report = verify_files(std::slice::from_ref(&path), VerifyOptions::default()).unwrap();
    let first = report.first_break.unwrap();
    assert_eq!((first.at.line, first.kind.code()), (2, "truncated"));

    let log = AuditLog::open(&path, config(Durability::Never)).unwrap();
    log.record(&decision("r2")).unwrap();
    drop(log);
    let lines = lines(&path);
    assert_eq!(lines.len(), 4);
    assert_eq!(lines[1], fragment, "the fragment is kept as it was");
    let event = parse_record(&lines[2]).unwrap();
    assert_eq!(event.phase, Phase::Event);
    assert_eq!(event.reason.unwrap().as_str(), TORN_LINE_REASON);
    assert_eq!(event.prev.as_str(), chain_hash(fragment));
    let report = verify_files(std::slice::from_ref(&path), VerifyOptions::default()).unwrap();
    assert!(report.is_intact(), "{:?}", report.first_break);
    assert_eq!(report.recovered.len(), 1);
    assert_eq!(report.recovered[0].line, 2);
}

#[test]
fn records_that_do_not_fit_their_phase_are_refused_unwritten() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.log");
    let log = AuditLog::open(&path, config(Durability::Never)).unwrap();
    // A deny without a reason.
    let record = AuditRecord::decision(
        now(),
        RequestId::new("r1").unwrap(),
        AuditDecision::Deny,
        ChainHash::genesis(),
    );
    assert!(matches!(log.record(&record), Err(AuditError::Shape(_))));
    // An outcome field in a decision.
    let mut record = decision("r2");
    record.status = Some(HttpStatus::new(200).unwrap());
    assert!(matches!(log.record(&record), Err(AuditError::Shape(_))));
    drop(log);
    assert!(lines(&path).is_empty());
}

#[test]
fn events_and_a_caller_supplied_prev_is_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.log");
    let log = AuditLog::open(&path, config(Durability::Never)).unwrap();
    log.event(ReasonCode::new("policy_reload_failed").unwrap())
        .unwrap();
    let mut record = decision("r1");
    record.prev = ChainHash::of_line("a forged predecessor");
    log.record(&record).unwrap();
    log.sync().unwrap();
    drop(log);
    let lines = lines(&path);
    let event = parse_record(&lines[0]).unwrap();
    assert_eq!(event.phase, Phase::Event);
    assert!(event.id.as_str().starts_with("ev-"));
    assert_intact(&[path]);
}

#[test]
fn verify_reads_a_decision_without_outcome_as_unknown() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.log");
    let log = AuditLog::open(&path, config(Durability::Never)).unwrap();
    log.record(&decision("done")).unwrap();
    log.record(&decision("cut-off")).unwrap();
    log.record(&outcome("done")).unwrap();
    drop(log);
    let report = verify_files(&[path], VerifyOptions::default()).unwrap();
    assert!(report.is_intact());
    assert_eq!(report.pending_total, 1);
    assert_eq!(report.pending[0].1.as_str(), "cut-off");
    assert_eq!(report.pending[0].0.line, 2);
}
