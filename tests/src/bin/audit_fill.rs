//! Fill writer for the audit disk-full test (`tests/it/audit_disk_full.rs`): appends decision
//! records of equal length to an audit log, one at a time, until the writer refuses them, so the
//! test can run it under a file size limit (`prlimit --fsize`, with `SIGXFSZ` ignored so that
//! `write(2)` fails with `EFBIG`) and check what the writer did when the file could not grow.
//!
//! Usage: `audit_fill LOG DURABILITY REFUSALS [deferred]`. After the first refused record it
//! tries REFUSALS - 1 more and stops. With `deferred`, each decision written is followed by its
//! outcome record through `AuditLog::defer`, so the next decision's `write(2)` carries two
//! lines, as the proxy's do. Prints on stdout one `refused n=N phase=P errno=E kind=K` line per
//! refused record (with the error's message chain on stderr) and a last line
//! `done written=W refused=R first_refused=N` (W counts decisions, R every refused record,
//! N the first refused decision); exits 0 unless the log cannot be opened.
//! Stops by itself after [`MAX_RECORDS`]. Not part of Mint.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, bail};
use mint_broker::audit::{AuditConfig, AuditError, AuditLog, Durability, now};
use mint_policy::audit::{
    AgentName, AuditDecision, AuditRecord, ChainHash, HttpStatus, Outcome, RequestId, UrlPath,
};

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (log, durability, refusals, deferred) = match args.as_slice() {
        [log, durability, refusals] => (log, durability, refusals, false),
        [log, durability, refusals, mode] if mode == "deferred" => {
            (log, durability, refusals, true)
        }
        _ => bail!("usage: audit_fill LOG DURABILITY REFUSALS [deferred]"),
    };
    let durability: Durability = durability.parse()?;
    let refusals: u64 = refusals.parse()?;
    let log = AuditLog::open(
        &PathBuf::from(log),
        AuditConfig {
            durability,
            // One file: rotating would start a new file, which the size limit does not cover.
            rotate_bytes: None,
        },
    )
    .context("cannot open the audit log")?;
    let mut stdout = std::io::stdout().lock();
    let mut stderr = std::io::stderr().lock();
    let (mut written, mut refused, mut first_refused) = (0u64, 0u64, None);
    for n in 0..MAX_RECORDS {
        match log.record(&decision(n)?) {
            Ok(_) => {
                written += 1;
                // In `always` mode `defer` writes at once, so it can meet the limit too: a
                // refusal like any other (the next decision is refused as well).
                if deferred && let Err(error) = log.defer(&outcome(n)?) {
                    refused += 1;
                    report(&mut stdout, &mut stderr, n, "outcome", error)?;
                    if refused >= refusals {
                        break;
                    }
                }
            }
            Err(error) => {
                refused += 1;
                first_refused.get_or_insert(n);
                report(&mut stdout, &mut stderr, n, "decision", error)?;
                if refused >= refusals {
                    break;
                }
            }
        }
    }
    let first = first_refused.map_or_else(|| "none".to_owned(), |n| n.to_string());
    writeln!(
        stdout,
        "done written={written} refused={refused} first_refused={first}"
    )?;
    stdout.flush()?;
    Ok(())
}

/// Prints one `refused` line for the `phase` record of request `n`, and the error's chain on
/// stderr.
fn report(
    stdout: &mut impl Write,
    stderr: &mut impl Write,
    n: u64,
    phase: &str,
    error: AuditError,
) -> anyhow::Result<()> {
    let (errno, kind) = match &error {
        AuditError::Write { source, .. } => (
            source.raw_os_error().unwrap_or(0),
            format!("{:?}", source.kind()),
        ),
        other => (0, variant(other).to_owned()),
    };
    writeln!(
        stdout,
        "refused n={n} phase={phase} errno={errno} kind={kind}"
    )?;
    writeln!(
        stderr,
        "audit_fill: {phase} record {n}: {:#}",
        anyhow::Error::new(error)
    )?;
    Ok(())
}

/// The same decision for every `n`, so every line has the same length: once one does not fit
/// under the limit, none does.
fn decision(n: u64) -> anyhow::Result<AuditRecord> {
    let id = RequestId::new(format!("fill-{n:010}"))?;
    let mut record = AuditRecord::decision(now(), id, AuditDecision::Allow, ChainHash::genesis());
    record.agent = Some(AgentName::new("mino")?);
    record.path = Some(UrlPath::new("/repos/acme/docs/issues")?);
    Ok(record)
}

/// The outcome of decision `n`: also the same length for every `n`.
fn outcome(n: u64) -> anyhow::Result<AuditRecord> {
    let id = RequestId::new(format!("fill-{n:010}"))?;
    let mut record = AuditRecord::outcome(now(), id, Outcome::Completed, ChainHash::genesis());
    record.status = Some(HttpStatus::new(200)?);
    Ok(record)
}

fn variant(error: &AuditError) -> &'static str {
    match error {
        AuditError::Unavailable { .. } => "Unavailable",
        AuditError::NotDurable { .. } => "NotDurable",
        AuditError::Closed => "Closed",
        _ => "Other",
    }
}

/// The most records it tries if the limit never stops it.
const MAX_RECORDS: u64 = 1_000_000;
