//! What the audit log costs a request, in each durability mode, against a plain `write(2)` of
//! the same bytes measured in the same run; and the two ways of serializing writers the issue
//! asked to compare: a lock around the file with the write done in place (what `AuditLog` does)
//! against handing each record to a writer thread over a channel (one by one, and in batches).
//!
//! Criterion measures latency per record (and throughput with 4 producer threads). After it, a
//! plain run measures CPU time per record from `/proc/self/stat` (all threads of the process,
//! the flusher included) and prints a table; docs/audit.md quotes both. Each row of the table is
//! the best of [`REPEATS`] runs, the baseline's too, so that other work on a shared machine
//! inflates the figures as little as possible; a request is a decision and an outcome record.
//!
//! `cargo bench -p mint-broker --bench audit -- no_criterion` (a filter no benchmark matches)
//! runs the CPU table alone; with `MINT_AUDIT_BENCH_QUICK=1` in the environment the table stops
//! before the `always` and channel rows (for comparing builds back to back), and with
//! `MINT_AUDIT_BENCH_ROWS=text|text…` only the baseline and the rows whose case contains one of
//! the texts run (for profiling one row: `perf record` the bench binary with it set).

#![expect(clippy::unwrap_used, reason = "benchmark")]

use std::cell::RefCell;
use std::fs::{File, OpenOptions};
use std::hint::black_box;
use std::io::Write;
use std::num::NonZeroU16;
use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput};
use mint_broker::audit::facts::{
    DecisionFacts, OutcomeFacts, RequestFacts, TargetFacts, decision_record, outcome_record,
};
use mint_broker::audit::{AuditConfig, AuditLog, Durability, LineHash, encode_line, now};
use mint_policy::audit::{
    AgentName, AliasName, AuditDecision, AuditRecord, CapabilityId, Host, HttpStatus, Method,
    Outcome, QueryKey, RequestId, RuleId, Scheme, Timestamp, UrlPath,
};

/// The facts of the request in the first lines of `examples/audit.log`.
fn sample_facts() -> RequestFacts {
    RequestFacts {
        id: RequestId::new("01JDZ4T6M2Q8W3E5R7Y9U1I3O5").unwrap(),
        agent: Some(AgentName::new("mino").unwrap()),
        capability: Some(CapabilityId::new("c7f3a9d2").unwrap()),
        method: Some(Method::new("GET").unwrap()),
        target: Some(TargetFacts {
            scheme: Scheme::new("https").unwrap(),
            host: Host::new("api.github.com").unwrap(),
            port: NonZeroU16::new(443).unwrap(),
            path: UrlPath::new("/repos/acme/docs/issues").unwrap(),
            query_keys: vec![
                QueryKey::new("state").unwrap(),
                QueryKey::new("per_page").unwrap(),
            ],
        }),
        aliases: vec![AliasName::new("github").unwrap()],
        skipped: Vec::new(),
        skipped_count: None,
        mcp_tool: None,
    }
}

fn allow() -> DecisionFacts {
    DecisionFacts {
        decision: AuditDecision::Allow,
        rules: Some(vec![RuleId::new("github-read").unwrap()]),
        reason: None,
        approval: Vec::new(),
        approver: Vec::new(),
    }
}

fn completed() -> OutcomeFacts {
    OutcomeFacts {
        outcome: Outcome::Completed,
        status: Some(HttpStatus::new(200).unwrap()),
        bytes_up: Some(0),
        bytes_down: Some(18_431),
        duration_ms: Some(188),
        reason: None,
    }
}

/// The first line of `examples/audit.log`, as a record.
fn sample() -> AuditRecord {
    let ts = Timestamp::from_unix_millis(1_795_995_560_123).unwrap();
    decision_record(ts, sample_facts(), allow())
}

thread_local! {
    /// The facts a thread's requests lend to their records, kept between iterations.
    static FACTS: RefCell<Option<RequestFacts>> = const { RefCell::new(None) };
}

/// A request's audit work as the proxy does it (`Exchange::record_allow`, then
/// `OutcomeWriter::write`), with `decision` and `outcome` standing for the log's calls: the
/// facts are lent to the decision record (only the id is copied, as `RequestFacts::take` leaves
/// it behind) and taken back, then moved into the outcome record; each record reads the clock,
/// as the proxy's do. The proxy drops the outcome's facts; this keeps them for the thread's next
/// request.
fn proxy_request(decision: impl Fn(&AuditRecord), outcome: impl Fn(&AuditRecord)) {
    FACTS.with_borrow_mut(|slot| {
        let mut facts = slot.take().unwrap_or_else(sample_facts);
        let record = decision_record(now(), facts.take(), allow());
        decision(&record);
        facts = RequestFacts::from_record(record);
        let record = outcome_record(now(), facts.take(), completed());
        outcome(&record);
        *slot = Some(RequestFacts::from_record(record));
    });
}

fn sample_line() -> Vec<u8> {
    let mut line = sample().to_line().into_bytes();
    line.push(b'\n');
    line
}

fn append_file(path: &Path) -> File {
    OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)
        .unwrap()
}

fn open_log(path: &Path, durability: Durability) -> AuditLog {
    AuditLog::open(
        path,
        AuditConfig {
            durability,
            rotate_bytes: None,
        },
    )
    .unwrap()
}

fn latency(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let mut group = c.benchmark_group("audit_latency");
    group.throughput(Throughput::Elements(1));

    let line = sample_line();
    let file = append_file(&dir.path().join("plain.log"));
    group.bench_function("baseline_write_same_bytes", |b| {
        b.iter(|| (&file).write_all(black_box(&line)).unwrap())
    });
    // The log takes records by reference: the proxy lends its facts to a record rather than
    // copying them, so no clone is timed.
    let record = sample();
    group.bench_function("serialize_serde_to_line", |b| {
        b.iter(|| black_box(&record).to_line())
    });
    group.bench_function("serialize_writer_encoder", |b| {
        b.iter(|| encode_line(black_box(&record)))
    });
    for durability in [Durability::Never, Durability::Interval] {
        let log = open_log(&dir.path().join(format!("{durability}.log")), durability);
        group.bench_function(BenchmarkId::new("record", durability), |b| {
            b.iter(|| log.record(black_box(&record)).unwrap())
        });
    }
    group.finish();

    // Each `always` record waits for an fsync: milliseconds, so fewer samples.
    let mut group = c.benchmark_group("audit_latency_always");
    group.throughput(Throughput::Elements(1));
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(5));
    let log = open_log(&dir.path().join("always.log"), Durability::Always);
    group.bench_function(BenchmarkId::new("record", Durability::Always), |b| {
        b.iter(|| log.record(black_box(&record)).unwrap())
    });
    group.bench_function("baseline_write_then_fdatasync", |b| {
        b.iter(|| {
            (&file).write_all(black_box(&line)).unwrap();
            file.sync_data().unwrap();
        })
    });
    group.finish();
}

/// Throughput with several producer threads: the lock in place against a writer thread.
fn concurrent(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let mut group = c.benchmark_group("audit_4_threads");
    group.throughput(Throughput::Elements(1));
    let record = sample();
    for durability in [Durability::Never, Durability::Interval, Durability::Always] {
        if durability == Durability::Always {
            group.sample_size(10);
        }
        let log = open_log(&dir.path().join(format!("c-{durability}.log")), durability);
        group.bench_function(BenchmarkId::new("record", durability), |b| {
            b.iter_custom(|iters| {
                run_threads(THREADS, iters, |_| {
                    log.record(black_box(&record)).unwrap();
                })
            })
        });
    }
    group.sample_size(100);
    for design in [Design::PerRecord, Design::Batched] {
        let writer = ChannelWriter::start(&dir.path().join(format!("{design:?}.log")), design);
        group.bench_function(BenchmarkId::new("channel", format!("{design:?}")), |b| {
            b.iter_custom(|iters| {
                run_threads(THREADS, iters, |_| {
                    writer.record(&record);
                })
            })
        });
    }
    group.finish();

    let mut group = c.benchmark_group("audit_latency_channel");
    group.throughput(Throughput::Elements(1));
    for design in [Design::PerRecord, Design::Batched] {
        let writer = ChannelWriter::start(&dir.path().join(format!("l-{design:?}.log")), design);
        group.bench_function(BenchmarkId::new("channel", format!("{design:?}")), |b| {
            b.iter(|| writer.record(black_box(&record)))
        });
    }
    group.finish();
}

/// Runs `iters` calls of `work` spread over `threads` threads; returns the wall time.
fn run_threads(threads: u64, iters: u64, work: impl Fn(u64) + Sync) -> Duration {
    let per_thread = iters.div_ceil(threads);
    let start = Instant::now();
    std::thread::scope(|scope| {
        for t in 0..threads {
            let work = &work;
            scope.spawn(move || {
                for i in 0..per_thread {
                    work(t * per_thread + i);
                }
            });
        }
    });
    start.elapsed()
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Design {
    /// The writer thread takes one record, writes it, answers; the next waits its turn.
    PerRecord,
    /// The writer thread drains everything queued, writes it all with one `write(2)`, answers.
    Batched,
}

/// The alternative the issue asked to measure: one thread owns the file and the chain, and
/// producers hand it serialized records over a channel, each waiting for its answer.
struct ChannelWriter {
    jobs: mpsc::Sender<(Vec<u8>, mpsc::SyncSender<()>)>,
}

impl ChannelWriter {
    fn start(path: &Path, design: Design) -> ChannelWriter {
        let file = append_file(path);
        let (jobs, queue) = mpsc::channel::<(Vec<u8>, mpsc::SyncSender<()>)>();
        std::thread::spawn(move || {
            let mut last = LineHash::GENESIS;
            let mut batch = Vec::new();
            let mut replies = Vec::new();
            while let Ok(first) = queue.recv() {
                let mut next = Some(first);
                while let Some((mut line, reply)) = next.take() {
                    splice(&mut line, &last);
                    last = LineHash::of(&line[..line.len() - 1]);
                    batch.extend_from_slice(&line);
                    replies.push(reply);
                    if design == Design::PerRecord || replies.len() >= 256 {
                        break;
                    }
                    next = queue.try_recv().ok();
                }
                (&file).write_all(&batch).unwrap();
                batch.clear();
                for reply in replies.drain(..) {
                    let _ = reply.send(());
                }
            }
        });
        ChannelWriter { jobs }
    }

    fn record(&self, record: &AuditRecord) {
        let mut line = encode_line(record);
        line.push(b'\n');
        let (reply, done) = mpsc::sync_channel(1);
        self.jobs.send((line, reply)).unwrap();
        done.recv().unwrap();
    }
}

fn splice(line: &mut [u8], prev: &LineHash) {
    let end = line.len();
    line[end - 67..end - 3].copy_from_slice(&prev.hex());
}

/// Process CPU time (user + system, all threads) from `/proc/self/stat`, in 10 ms ticks.
fn process_cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    let after_name = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = after_name.split(' ').collect();
    // Fields 14 and 15 of the whole line are the 12th and 13th after `(comm) `.
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    Duration::from_millis(ticks * 10)
}

/// Runs `records` records of `work` on `threads` threads, [`REPEATS`] times; returns the
/// (wall, process CPU) of the run that used the least CPU.
fn measure(threads: u64, records: u64, work: impl Fn(u64) + Sync) -> (Duration, Duration) {
    (0..REPEATS)
        .map(|_| {
            // Start from a clean page cache: other rows' dirty pages (and other programs') are
            // written back now, not by this run's fsyncs, whose CPU the run would be charged.
            rustix::fs::sync();
            let cpu = process_cpu();
            let wall = run_threads(threads, records, &work);
            (wall, process_cpu() - cpu)
        })
        .min_by_key(|&(_, cpu)| cpu)
        .unwrap()
}

/// Fsyncs `file` every [`FLUSH_INTERVAL`] on another thread while `body` runs, as the flusher
/// does in `interval` mode.
fn with_interval_fsync<T>(file: &File, body: impl FnOnce() -> T) -> T {
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|scope| {
        scope.spawn(|| {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                std::thread::sleep(mint_broker::audit::FLUSH_INTERVAL);
                file.sync_data().unwrap();
            }
        });
        let result = body();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        result
    })
}

/// CPU time and throughput per mode, outside criterion, printed as a table.
fn cpu_report() {
    let dir = tempfile::tempdir().unwrap();
    let record = sample();
    let line = sample_line();
    let mut outcome_line = outcome_record(record.ts.clone(), sample_facts(), completed())
        .to_line()
        .into_bytes();
    outcome_line.push(b'\n');
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "\naudit CPU report (process CPU time of all threads, flusher included, from USER_HZ \
         ticks; best of {REPEATS} runs per row; `record` rows write a ready record by reference; \
         a request is a decision and an outcome record built and written as the proxy does)\n\
         {:<44} {:>7} {:>9} {:>11} {:>12} {:>8}",
        "case", "threads", "items", "items/s", "CPU/item", "vs write"
    )
    .unwrap();
    let mut baseline = None;
    let only = std::env::var("MINT_AUDIT_BENCH_ROWS").ok();
    let mut row = |out: &mut dyn Write,
                   name: &str,
                   threads: u64,
                   items: u64,
                   run: &dyn Fn() -> (Duration, Duration)| {
        // The first row is the baseline every ratio divides by: it always runs.
        if baseline.is_some()
            && only
                .as_deref()
                .is_some_and(|only| !only.split('|').any(|o| name.contains(o)))
        {
            return;
        }
        let (wall, cpu) = run();
        // Each row writes hundreds of megabytes: free the space before the next row, so no
        // row pays for a fuller disk than the one before it (files still open are unlinked).
        for entry in std::fs::read_dir(dir.path()).unwrap() {
            std::fs::remove_file(entry.unwrap().path()).unwrap();
        }
        let per = cpu.as_secs_f64() * 1e6 / items as f64;
        let base = *baseline.get_or_insert(per);
        writeln!(
            out,
            "{name:<44} {threads:>7} {items:>9} {:>11.0} {:>10.2}us {:>7.2}x",
            items as f64 / wall.as_secs_f64(),
            per,
            per / base
        )
        .unwrap();
    };
    let file = append_file(&dir.path().join("plain.log"));
    row(
        &mut out,
        "baseline: write(2) of the same bytes",
        1,
        N,
        &|| measure(1, N, |_| (&file).write_all(&line).unwrap()),
    );
    let synced = append_file(&dir.path().join("plain-synced.log"));
    row(
        &mut out,
        "baseline: write(2), fdatasync every 20 ms",
        1,
        N,
        &|| {
            with_interval_fsync(&synced, || {
                measure(1, N, |_| (&synced).write_all(&line).unwrap())
            })
        },
    );
    row(&mut out, "serializing: serde_json (to_line)", 1, N, &|| {
        measure(1, N, |_| {
            black_box(black_box(&record).to_line());
        })
    });
    row(&mut out, "serializing: the writer's encoder", 1, N, &|| {
        measure(1, N, |_| {
            black_box(encode_line(black_box(&record)));
        })
    });
    row(&mut out, "hashing the line (SHA-256)", 1, N, &|| {
        measure(1, N, |_| {
            black_box(LineHash::of(black_box(&line[..line.len() - 1])));
        })
    });
    for durability in [Durability::Never, Durability::Interval] {
        for threads in [1, THREADS] {
            let log = open_log(
                &dir.path().join(format!("{durability}-{threads}.log")),
                durability,
            );
            row(
                &mut out,
                &format!("record, {durability}"),
                threads,
                N,
                &|| {
                    measure(threads, N, |_| {
                        log.record(black_box(&record)).unwrap();
                    })
                },
            );
        }
    }
    let requests = N / 2;
    let plain = append_file(&dir.path().join("plain-requests.log"));
    row(
        &mut out,
        "request baseline: 2 write(2), fdatasync/20 ms",
        1,
        requests,
        &|| {
            with_interval_fsync(&plain, || {
                measure(1, requests, |_| {
                    (&plain).write_all(&line).unwrap();
                    (&plain).write_all(&outcome_line).unwrap();
                })
            })
        },
    );
    let mut both_lines = line.clone();
    both_lines.extend_from_slice(&outcome_line);
    let joined = append_file(&dir.path().join("plain-joined.log"));
    row(
        &mut out,
        "request baseline: 1 write(2), fdatasync/20 ms",
        1,
        requests,
        &|| {
            with_interval_fsync(&joined, || {
                measure(1, requests, |_| (&joined).write_all(&both_lines).unwrap())
            })
        },
    );
    row(
        &mut out,
        "request: building both records only",
        1,
        requests,
        &|| {
            measure(1, requests, |_| {
                proxy_request(|r| _ = black_box(r), |r| _ = black_box(r));
            })
        },
    );
    // The writer's share alone: both records built once, written by reference.
    {
        let outcome = outcome_record(record.ts.clone(), sample_facts(), completed());
        let log = open_log(&dir.path().join("requests-ready.log"), Durability::Interval);
        row(
            &mut out,
            "request, records built once, interval",
            1,
            requests,
            &|| {
                measure(1, requests, |_| {
                    log.record(black_box(&record)).unwrap();
                    log.defer(black_box(&outcome)).unwrap();
                })
            },
        );
    }
    // As the proxy does: the decision written before forwarding, the outcome deferred to the
    // next write. The last rows write the outcome at once instead, for comparison.
    for durability in [Durability::Never, Durability::Interval] {
        for threads in [1, THREADS] {
            let log = open_log(
                &dir.path()
                    .join(format!("requests-{durability}-{threads}.log")),
                durability,
            );
            row(
                &mut out,
                &format!("request (decision + outcome), {durability}"),
                threads,
                requests,
                &|| {
                    measure(threads, requests, |_| {
                        proxy_request(|r| _ = log.record(r).unwrap(), |r| log.defer(r).unwrap());
                    })
                },
            );
        }
    }
    for threads in [1, THREADS] {
        let log = open_log(
            &dir.path().join(format!("requests-at-once-{threads}.log")),
            Durability::Interval,
        );
        row(
            &mut out,
            "request, outcome written at once, interval",
            threads,
            requests,
            &|| {
                measure(threads, requests, |_| {
                    proxy_request(
                        |r| _ = log.record(r).unwrap(),
                        |r| _ = log.append(r).unwrap(),
                    );
                })
            },
        );
    }
    if std::env::var_os("MINT_AUDIT_BENCH_QUICK").is_some() {
        return;
    }
    for threads in [1, 16, 64] {
        let log = open_log(
            &dir.path().join(format!("always-{threads}.log")),
            Durability::Always,
        );
        let records = N_ALWAYS * threads;
        row(&mut out, "record, always", threads, records, &|| {
            measure(threads, records, |_| {
                log.record(black_box(&record)).unwrap();
            })
        });
        let stats = log.stats();
        if stats.records == 0 {
            continue; // the row was left out
        }
        writeln!(
            out,
            "{:<44} {:>7} {:>9} fsyncs: {} ({:.1} records per fsync)",
            "",
            "",
            "",
            stats.syncs,
            stats.records as f64 / stats.syncs.max(1) as f64
        )
        .unwrap();
    }
    for design in [Design::PerRecord, Design::Batched] {
        for threads in [1, THREADS] {
            let writer = ChannelWriter::start(
                &dir.path().join(format!("cpu-{design:?}-{threads}.log")),
                design,
            );
            row(
                &mut out,
                &format!("channel to a writer thread, {design:?}"),
                threads,
                N,
                &|| measure(threads, N, |_| writer.record(&record)),
            );
        }
    }
}

fn main() {
    let mut criterion = Criterion::default().configure_from_args();
    latency(&mut criterion);
    concurrent(&mut criterion);
    criterion.final_summary();
    // `cargo bench -- --test` (and `--list`) only checks that the benchmarks run.
    if !std::env::args().any(|arg| arg == "--test" || arg == "--list") {
        cpu_report();
    }
}

const THREADS: u64 = 4;
/// Records per CPU measurement: long enough (seconds) for 10 ms ticks to be precise.
const N: u64 = 400_000;
const N_ALWAYS: u64 = 200;
/// Runs per row of the CPU table; the one that used the least CPU is reported.
const REPEATS: usize = 3;
