//! Latency of the real `mint-mcp` binary over stdio, as a client sees it.
//!
//! Measures, and prints the median and 99th percentile of:
//! - process start to first response: spawn, send `initialize`, read the answer (200 runs);
//! - a `tools/list` round trip, 1,000 calls to one process;
//! - a `policy_check` of `examples/policy.yaml`, 1,000 calls to one process (the file and the
//!   aliases file are re-read on every call, as the reference requires);
//! - an `audit_tail` of `examples/audit.log` with the default `n`, 1,000 calls.
//!
//! Run with `cargo bench -p mint-mcp --bench roundtrip` (an optimized build). Not a timed test:
//! nothing here fails on a slow machine.

#![expect(
    clippy::print_stdout,
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a benchmark program that reports on stdout"
)]

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

const CALLS: usize = 1000;
const STARTS: usize = 200;

fn main() {
    // `cargo bench` passes `--bench`; there is nothing to filter.
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let initialize = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"bench","version":"0"}}}"#;

    let mut starts = Vec::with_capacity(STARTS);
    for _ in 0..STARTS {
        let started = Instant::now();
        let mut server = Server::start(root);
        let reply = server.round_trip(initialize);
        starts.push(started.elapsed());
        assert!(reply.contains("\"protocolVersion\""), "{reply}");
        server.stop();
    }
    report("start to first response", &mut starts);

    let mut server = Server::start(root);
    server.round_trip(initialize);
    for (name, request, expect) in [
        (
            "tools/list round trip",
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#,
            "\"audit_tail\"",
        ),
        (
            "policy_check examples/policy.yaml",
            r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"policy_check","arguments":{"file":"examples/policy.yaml"}}}"#,
            "\\\"valid\\\": true",
        ),
        (
            "audit_tail examples/audit.log (n = 20)",
            r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"audit_tail","arguments":{}}}"#,
            "\\\"count\\\": 15",
        ),
    ] {
        // Warm up the page cache and the allocator.
        for _ in 0..50 {
            server.round_trip(request);
        }
        let mut samples = Vec::with_capacity(CALLS);
        for _ in 0..CALLS {
            let started = Instant::now();
            let reply = server.round_trip(request);
            samples.push(started.elapsed());
            assert!(reply.contains(expect), "{reply}");
        }
        report(name, &mut samples);
    }
    server.stop();
}

struct Server {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    line: String,
}

impl Server {
    fn start(root: &Path) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_mint-mcp"))
            .current_dir(root)
            .env_clear()
            .env("MINT_HOME", "mcp/tests/fixtures/home")
            .env("MINT_ALIASES_PATH", "examples/aliases.yaml")
            .env("MINT_AUDIT_LOG_PATH", "examples/audit.log")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start mint-mcp");
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Server {
            child,
            stdin,
            stdout,
            line: String::new(),
        }
    }

    fn round_trip(&mut self, request: &str) -> &str {
        self.stdin.write_all(request.as_bytes()).unwrap();
        self.stdin.write_all(b"\n").unwrap();
        self.stdin.flush().unwrap();
        self.line.clear();
        self.stdout.read_line(&mut self.line).unwrap();
        &self.line
    }

    fn stop(self) {
        let Server {
            mut child, stdin, ..
        } = self;
        drop(stdin);
        let status = child.wait().unwrap();
        assert!(status.success());
    }
}

fn report(name: &str, samples: &mut [Duration]) {
    samples.sort_unstable();
    let at = |q: f64| samples[((samples.len() as f64 - 1.0) * q).round() as usize];
    println!(
        "{name:<42} n={:<5} median {:>9.1?}  p99 {:>9.1?}  max {:>9.1?}",
        samples.len(),
        at(0.5),
        at(0.99),
        at(1.0)
    );
}
