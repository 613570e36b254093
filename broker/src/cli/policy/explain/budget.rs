//! Estimates the running broker's call-limit counters by replaying the audit log.
//!
//! The broker keeps its counters in memory, where no other process can read them. What it
//! counted is in the audit log, though: one `allow` decision record per admitted request, and an
//! outcome record saying whether it was sent. [`replay`] feeds those records to a fresh
//! [`Limiter`] so that `mint policy explain` can show what is left of each budget.
//!
//! # What is counted
//!
//! An `allow` decision record counts when all of these hold:
//!
//! - its timestamp is within the longest window of the limits that apply to the explained request;
//! - it belongs to the latest broker run in the log: the broker's request ids are
//!   `PREFIX-N` with a random 12-hex-digit prefix per run, and the prefix of the last decision
//!   record is the run kept (when that record's id has another shape, every record is kept);
//! - its request was not given back: the broker refunds a request it admitted but never sent, so
//!   a record whose outcome is `failed`, `denied`, `invalid` or `limited` is left out, while
//!   `completed`, `unknown` and a missing outcome (in flight, or a crash) count.
//!
//! Each one is evaluated again under the current policy from its recorded facts (agent, method,
//! target, aliases, MCP tool), and charges the counters of the allow rules its record names plus
//! the `limit` rules and legacy `call_limits` that match it now, at its timestamp.
//!
//! # What it approximates
//!
//! The result is the broker's counters as of the log's last line, with these differences:
//!
//! - a broker restarted since its last request starts from zero, yet its previous run is counted
//!   (the log marks no start), so the estimate can be lower than the real budget, never higher
//!   for that reason;
//! - record timestamps (wall clock, written just before sending) stand in for the broker's
//!   monotonic admission times;
//! - a batch's record names its first tool only: counters kept per tool for its other tools, and
//!   its tool-less evaluation, are not charged;
//! - the record does not say which site each alias sat in: sites only decide which allow rules
//!   match, and those are taken from the record instead;
//! - a request the current policy denies (the policy changed since) charges nothing, and limits
//!   whose `max` was lowered by a reload count only what fits under the new `max`;
//! - rotated log files last modified before the window are not read.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, UNIX_EPOCH};

use mint_policy::audit::{
    AuditDecision, AuditRecord, MAX_LINE_BYTES, Outcome, Phase, parse_record,
};
use mint_policy::evaluate::{self, AliasUse, CompiledPolicy, Evaluation};
use mint_policy::host::Host;
use mint_policy::limits::{Charge, Limiter};
use mint_policy::normalize::{Scheme, Target};
use mint_policy::policy::Effect;
use mint_policy::site::SiteSet;

use super::ExplainError;
use crate::audit::rotation::log_set;
use crate::config::declaration_file::ReadError;

/// Where the budgets shown come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BudgetSource {
    /// No limit applies to the request: the audit log was not read.
    NotNeeded,
    /// There is no audit log at the path: every budget is shown full.
    NoLog {
        /// The log looked for.
        path: PathBuf,
    },
    /// Read from the Redis the brokers share their limits through: the real counters.
    Redis {
        /// The server (scheme and address; never the credentials).
        server: String,
    },
    /// The brokers share their limits through a Redis that could not be read.
    RedisUnavailable {
        /// The server (scheme and address; never the credentials).
        server: String,
        /// Why (its message).
        error: String,
    },
    /// Replayed from the audit log.
    AuditLog {
        /// The log as named (its rotated predecessors are read too).
        path: PathBuf,
        /// The files read, oldest first.
        files: Vec<PathBuf>,
        /// The `allow` records replayed.
        replayed: usize,
    },
}

/// A limiter holding the replayed admissions, and where they came from.
#[derive(Debug)]
pub struct Replay {
    /// The counters, as of the replay.
    pub limiter: Limiter,
    /// What was read.
    pub source: BudgetSource,
}

/// One admitted request of the log, as far as limits are concerned.
#[derive(Debug)]
struct Admission {
    at: Duration,
    run: Option<String>,
    agent: String,
    method: String,
    target: Target,
    aliases: Vec<String>,
    tool: Option<String>,
    rules: Vec<String>,
    refunded: bool,
}

/// Replays the `allow` records of the audit log `log` (and its rotated predecessors) from the
/// last `window` before `now` (both since the Unix epoch) under `policy`; see the module
/// documentation for exactly what is counted.
pub fn replay(
    log: &Path,
    policy: &CompiledPolicy,
    window: Duration,
    now: Duration,
) -> Result<Replay, ExplainError> {
    let unreadable = |path: &Path, problem: ReadError| ExplainError::AuditLog {
        path: path.to_path_buf(),
        problem,
    };
    let files = log_set(log).map_err(|e| unreadable(log, e.into()))?;
    if files.is_empty() {
        return Ok(Replay {
            limiter: Limiter::new(),
            source: BudgetSource::NoLog {
                path: log.to_path_buf(),
            },
        });
    }
    let since = now.saturating_sub(window);
    let mut admissions: Vec<Admission> = Vec::new();
    let mut by_id: HashMap<String, usize> = HashMap::new();
    let mut latest_run: Option<Option<String>> = None;
    let mut read = Vec::new();
    let last = files.len().saturating_sub(1);
    for (index, path) in files.iter().enumerate() {
        let file = open(path).map_err(|e| unreadable(path, e))?;
        if index < last && modified_before(&file, since) {
            continue;
        }
        read.push(path.clone());
        each_line(file, |line| {
            let Some(record) = std::str::from_utf8(line)
                .ok()
                .and_then(|text| parse_record(text).ok())
            else {
                return;
            };
            match record.phase {
                Phase::Decision => {
                    latest_run = Some(run_of(record.id.as_str()).map(str::to_owned));
                    if record.decision == Some(AuditDecision::Allow)
                        && let Some(admission) = admission(&record)
                        && admission.at >= since
                    {
                        by_id.insert(record.id.as_str().to_owned(), admissions.len());
                        admissions.push(admission);
                    }
                }
                Phase::Outcome => {
                    let refunded = !matches!(
                        record.outcome,
                        Some(Outcome::Completed | Outcome::Unknown) | None
                    );
                    if refunded
                        && let Some(&at) = by_id.get(record.id.as_str())
                        && let Some(admission) = admissions.get_mut(at)
                    {
                        admission.refunded = true;
                    }
                }
                Phase::Event => {}
            }
        })
        .map_err(|e| unreadable(path, e.into()))?;
    }
    let run = latest_run.flatten();
    admissions.retain(|a| !a.refunded && (run.is_none() || a.run == run));
    admissions.sort_by_key(|a| a.at);
    let allow_rules: Vec<&str> = policy
        .policy()
        .rules
        .iter()
        .filter(|r| r.effect == Effect::Allow)
        .map(|r| r.id.as_str())
        .collect();
    let mut limiter = Limiter::new();
    for admission in &admissions {
        let charges = charges_of(policy, &allow_rules, admission);
        // A refusal here means a reload lowered a `max`: the broker, too, counts only what fits.
        let _ = limiter.admit(&charges, admission.at);
    }
    Ok(Replay {
        limiter,
        source: BudgetSource::AuditLog {
            path: log.to_path_buf(),
            files: read,
            replayed: admissions.len(),
        },
    })
}

/// Reads the counters `charges` name from the Redis of `config` (brokers sharing their limits):
/// a [`Limiter`] holding them, and Redis' clock to judge them at. Nothing is estimated.
pub fn from_redis(
    config: &crate::limits::RedisLimitsConfig,
    charges: &[Charge],
) -> Result<(Limiter, Duration), RedisReadError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(RedisReadError::Runtime)?;
    Ok(runtime.block_on(crate::limits::redis::read_counters(config, charges))?)
}

/// Why `mint policy explain` could not read the shared counters.
#[derive(Debug, thiserror::Error)]
pub enum RedisReadError {
    /// Redis did not answer, or answered an error.
    #[error(transparent)]
    Read(#[from] crate::limits::redis::ReadError),
    /// The runtime for the client could not start.
    #[error("cannot start the runtime")]
    Runtime(#[source] std::io::Error),
}

/// The counters a past admission charged, as far as the current policy can tell.
fn charges_of(policy: &CompiledPolicy, allow_rules: &[&str], admission: &Admission) -> Vec<Charge> {
    // The sites are not recorded; the empty set satisfies every `inject`, and the allow rules
    // that really admitted the request are taken from the record below.
    let uses: Vec<AliasUse> = admission
        .aliases
        .iter()
        .map(|alias| AliasUse {
            alias: alias.clone(),
            sites: SiteSet::EMPTY,
        })
        .collect();
    let request = evaluate::Request {
        agent: &admission.agent,
        method: &admission.method,
        target: &admission.target,
        aliases: &uses,
        tool: admission.tool.as_deref(),
    };
    match policy.evaluate(&request) {
        // A request held for approval and then sent charged its hold's grant.
        Evaluation::Allow(grant) | Evaluation::Approve(evaluate::Hold { grant, .. }) => grant
            .charges
            .into_iter()
            .filter(|c| {
                admission.rules.contains(&c.rule) || !allow_rules.contains(&c.rule.as_str())
            })
            .collect(),
        Evaluation::Deny(_) => Vec::new(),
    }
}

/// The facts of an `allow` decision record; `None` when one is missing or does not parse.
fn admission(record: &AuditRecord) -> Option<Admission> {
    let target = Target {
        scheme: Scheme::parse(record.scheme.as_ref()?.as_str()).ok()?,
        host: Host::parse_request(record.host.as_ref()?.as_str()).ok()?,
        port: record.port?.get(),
        path: record.path.as_ref()?.as_str().to_owned(),
        query: None,
    };
    Some(Admission {
        at: unix_time(record.ts.as_str())?,
        run: run_of(record.id.as_str()).map(str::to_owned),
        agent: record.agent.as_ref()?.as_str().to_owned(),
        method: record.method.as_ref()?.as_str().to_owned(),
        target,
        aliases: record
            .aliases
            .iter()
            .map(|a| a.as_str().to_owned())
            .collect(),
        tool: record.mcp_tool.as_ref().map(|t| t.as_str().to_owned()),
        rules: record
            .rule
            .iter()
            .flatten()
            .map(|r| r.as_str().to_owned())
            .collect(),
        refunded: false,
    })
}

/// The broker run of a request id `PREFIX-N` (12 lowercase hex digits, a dash, a number).
fn run_of(id: &str) -> Option<&str> {
    let (prefix, number) = id.split_once('-')?;
    let hex = prefix.len() == 12
        && prefix
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    let counter = !number.is_empty() && number.bytes().all(|b| b.is_ascii_digit());
    (hex && counter).then_some(prefix)
}

/// `YYYY-MM-DDTHH:MM:SS.mmmZ` (the record parser checked the shape) as time since the epoch.
pub(crate) fn unix_time(ts: &str) -> Option<Duration> {
    let n = |from: usize, to: usize| ts.get(from..to)?.parse::<i64>().ok();
    let (year, month, day) = (n(0, 4)?, n(5, 7)?, n(8, 10)?);
    let (hour, minute, second, milli) = (n(11, 13)?, n(14, 16)?, n(17, 19)?, n(20, 23)?);
    // Days since the epoch from a civil date (H. Hinnant's algorithm).
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let day_of_year = (153 * ((month + 9) % 12) + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    let days = era * 146_097 + day_of_era - 719_468;
    let millis = ((days * 24 + hour) * 60 + minute) * 60_000 + second * 1000 + milli;
    u64::try_from(millis).ok().map(Duration::from_millis)
}

/// Opens a log file for reading: never through a symbolic link, never waiting on a FIFO, and
/// only a regular file.
fn open(path: &Path) -> Result<File, ReadError> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW | libc::O_NOCTTY)
        .open(path)?;
    let metadata = file.metadata()?;
    if metadata.is_dir() {
        return Err(ReadError::IsADirectory);
    }
    if !metadata.is_file() {
        return Err(ReadError::NotRegularFile);
    }
    Ok(file)
}

/// Whether the file was last written before `since` (so every record in it is older).
fn modified_before(file: &File, since: Duration) -> bool {
    file.metadata()
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .is_some_and(|modified| modified < since)
}

/// Calls `each` with every line of `file` (without its newline) that is at most
/// `MAX_LINE_BYTES` long; longer lines are skipped without being held in memory.
fn each_line(file: File, mut each: impl FnMut(&[u8])) -> io::Result<()> {
    let mut reader = BufReader::with_capacity(64 * 1024, file);
    let mut line: Vec<u8> = Vec::new();
    let mut too_long = false;
    loop {
        let buffer = reader.fill_buf()?;
        if buffer.is_empty() {
            break;
        }
        let newline = memchr::memchr(b'\n', buffer);
        let chunk = buffer
            .get(..newline.unwrap_or(buffer.len()))
            .unwrap_or_default();
        if !too_long && line.len() + chunk.len() > MAX_LINE_BYTES {
            too_long = true;
            line.clear();
        }
        if !too_long {
            line.extend_from_slice(chunk);
        }
        let used = newline.map_or(buffer.len(), |at| at + 1);
        reader.consume(used);
        if newline.is_some() {
            if !too_long {
                each(&line);
            }
            line.clear();
            too_long = false;
        }
    }
    if !too_long && !line.is_empty() {
        each(&line);
    }
    Ok(())
}
