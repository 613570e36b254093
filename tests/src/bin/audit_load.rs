//! Load writer for the audit crash test (`tests/it/audit_crash.rs`): appends decision and
//! outcome records to an audit log from several threads as fast as it can, so that the test can
//! kill it with SIGKILL mid-write and check what the file holds afterwards.
//!
//! Usage: `audit_load LOG DURABILITY THREADS ROTATE_BYTES`. Prints `ready` on stdout once the
//! first records are in the file. Stops by itself after [`MAX_RUN`] or [`MAX_RECORDS`], so a
//! test that fails to kill it leaves nothing running for long. Not part of Mint.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use mint_broker::audit::{AuditConfig, AuditLog, Durability, now};
use mint_policy::audit::{
    AgentName, AliasName, AuditDecision, AuditRecord, ChainHash, HttpStatus, Method, Outcome,
    RequestId, UrlPath,
};

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [log, durability, threads, rotate_bytes] = args.as_slice() else {
        bail!("usage: audit_load LOG DURABILITY THREADS ROTATE_BYTES");
    };
    let durability: Durability = durability.parse()?;
    let threads: usize = threads.parse()?;
    let rotate_bytes: u64 = rotate_bytes.parse()?;
    let log = AuditLog::open(
        &PathBuf::from(log),
        AuditConfig {
            durability,
            rotate_bytes: (rotate_bytes > 0).then_some(rotate_bytes),
        },
    )
    .context("cannot open the audit log")?;
    let written = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let workers: Vec<_> = (0..threads)
        .map(|thread| {
            let (log, written) = (log.clone(), Arc::clone(&written));
            std::thread::spawn(move || -> anyhow::Result<()> {
                let mut n = 0u64;
                while started.elapsed() < MAX_RUN && written.load(Ordering::Relaxed) < MAX_RECORDS {
                    let id = RequestId::new(format!("t{thread}-{n}"))?;
                    log.record(&decision(id.clone())?)?;
                    // Some requests are left without an outcome, as a crash would leave them.
                    if n % 7 != 3 {
                        log.record(&outcome(id)?)?;
                    }
                    written.fetch_add(1, Ordering::Relaxed);
                    n += 1;
                }
                Ok(())
            })
        })
        .collect();
    while written.load(Ordering::Relaxed) < 100 {
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "ready")?;
    stdout.flush()?;
    for worker in workers {
        match worker.join() {
            Ok(result) => result?,
            Err(_) => bail!("a writer thread panicked"),
        }
    }
    Ok(())
}

fn decision(id: RequestId) -> anyhow::Result<AuditRecord> {
    let mut record = AuditRecord::decision(now(), id, AuditDecision::Allow, ChainHash::genesis());
    record.agent = Some(AgentName::new("mino")?);
    record.method = Some(Method::new("GET")?);
    record.path = Some(UrlPath::new("/repos/acme/docs/issues")?);
    record.aliases = vec![AliasName::new("github")?];
    Ok(record)
}

fn outcome(id: RequestId) -> anyhow::Result<AuditRecord> {
    let mut record = AuditRecord::outcome(now(), id, Outcome::Completed, ChainHash::genesis());
    record.status = Some(HttpStatus::new(200)?);
    record.duration_ms = Some(12);
    Ok(record)
}

/// The longest the writer runs if nobody kills it.
const MAX_RUN: Duration = Duration::from_secs(60);
/// The most requests it writes if nobody kills it.
const MAX_RECORDS: u64 = 5_000_000;
