//! Call limits shared by several brokers through a real Redis (`mint serve --limits-redis`):
//! Debian's `redis-server`, started by each test on a private Unix socket (and a loopback port
//! where the test needs TCP or TLS) with persistence off, and stopped with it.
//!
//! Three `mint serve` processes on one Redis forward exactly `max` of 300 concurrent requests;
//! windows slide; a request never sent gives back exactly its own entry; Redis killed, paused
//! past the wait or answering an error refuses the limited requests `503 limits_unavailable`
//! (audited) and forwards nothing past the limit, while requests that match no limit go on;
//! Redis back, the brokers count again without a restart; `SCRIPT FLUSH` mid-run keeps the count
//! exact; an ACL user limited to Mint's keys is enough; `rediss://` with a private CA works and
//! without it is refused; `mint policy explain` reads the budgets from Redis.

#![allow(clippy::unwrap_used, clippy::panic, reason = "tests")]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use mint_tests::broker::{Broker, MintHome, RawResponse, raw_http};
use mint_tests::echo_upstream::EchoConfig;
use mint_tests::lab::policy;
use mint_tests::redis::{RedisOptions, RedisServer, available};
use mint_tests::{EchoPeer, echo_peer};
use serde_json::{Value, json};

const CANARY: &str = "canary-shared-limits-Rd7kQ2xW9p";

const ALIASES: &str =
    "aliases:\n  - name: echo\n    hosts: [127.0.0.1]\n    source: file:$SECRETS/echo\n";

/// The wait the exactness tests give each admission: generous, so a debug build of three
/// brokers on a loaded two-core machine never turns an admission into a `503` (which would count
/// nothing and forward nothing, but make "exactly `max` forwarded" untestable). The default
/// (50 ms) is what the pause test checks.
const GENEROUS_WAIT: &str = "2s";

/// `limited` (GET `/echo/limited/**` on the echo upstream's port and on `extra_port`, with
/// `limits`), and `free` (GET `/echo/free/**`, no limit).
fn rules(port: u16, extra_port: u16, limits: &str) -> String {
    format!(
        "  - id: limited\n    effect: allow\n    match:\n      alias: [echo]\n      host: [127.0.0.1]\n      port: [{port}, {extra_port}]\n      method: [GET]\n      path: [\"/echo/limited/**\"]\n    limits:\n{limits}  - id: free\n    effect: allow\n    match:\n      alias: [echo]\n      host: [127.0.0.1]\n      port: [{port}]\n      method: [GET]\n      path: [\"/echo/free/**\"]\n"
    )
}

/// Brokers sharing one Redis, in front of one echo upstream, each with its own home (its own
/// audit log and approvals socket) holding the same policy, aliases and capabilities.
struct Fleet {
    brokers: Vec<Broker>,
    /// A port where nothing listens, which the `limited` rule matches too.
    closed: u16,
    /// The policy every home holds.
    policy: String,
    homes: Vec<MintHome>,
    peer: EchoPeer,
    cap: String,
    redis: RedisServer,
    _dir: tempfile::TempDir,
}

impl Fleet {
    /// `n` brokers on `redis` (its `redis+unix://` URL) with the limit `limit` (a YAML flow
    /// mapping such as `{ max: 100, per: 1h }`) and `extra` serve flags.
    fn start(redis: RedisServer, n: usize, limit: &str, extra: &[&str]) -> Fleet {
        let url = redis.unix_url();
        Fleet::start_with_url(redis, &url, n, limit, extra)
    }

    fn start_with_url(
        redis: RedisServer,
        url: &str,
        n: usize,
        limit: &str,
        extra: &[&str],
    ) -> Fleet {
        let dir = tempfile::tempdir().unwrap();
        let peer = echo_peer(dir.path(), EchoConfig::default());
        let closed = closed_port();
        let text = policy(&rules(
            peer.server.port(),
            closed,
            &format!("      - {limit}\n"),
        ));
        let homes: Vec<MintHome> = (0..n)
            .map(|_| MintHome::new(&text, ALIASES, &[("echo", CANARY)]))
            .collect();
        let cap = homes[0].issue_capability("mino", &[]);
        let capabilities =
            std::fs::read_to_string(homes[0].path().join("capabilities.yaml")).unwrap();
        for home in &homes[1..] {
            home.write_private("capabilities.yaml", &capabilities);
        }
        let mut args = vec!["--limits-redis", url];
        args.extend_from_slice(extra);
        let brokers = homes
            .iter()
            .map(|home| home.serve(&peer.ca_file, &args))
            .collect();
        Fleet {
            brokers,
            closed,
            policy: text,
            homes,
            peer,
            cap,
            redis,
            _dir: dir,
        }
    }

    /// One more home like the others (policy, aliases, capabilities), for a broker started by
    /// the test itself.
    fn another_home(&self) -> MintHome {
        let home = MintHome::new(&self.policy, ALIASES, &[("echo", CANARY)]);
        let capabilities =
            std::fs::read_to_string(self.homes[0].path().join("capabilities.yaml")).unwrap();
        home.write_private("capabilities.yaml", &capabilities);
        home
    }

    fn port(&self) -> u16 {
        self.peer.server.port()
    }

    /// GET `path` on the echo upstream through broker `i`, with the capability and the echo
    /// alias in `Authorization`.
    fn get(&self, i: usize, path: &str) -> RawResponse {
        get(&self.brokers[i].base, self.port(), &self.cap, path)
    }

    /// How many requests reached the echo upstream.
    fn forwarded(&self) -> usize {
        self.peer.server.requests().len()
    }

    /// Mint's keys in Redis.
    fn keys(&self) -> Vec<String> {
        self.redis.keys("mint:limits:*")
    }

    /// The one counter's key (the tests charge one counter).
    #[track_caller]
    fn key(&self) -> String {
        let keys = self.keys();
        assert_eq!(keys.len(), 1, "{keys:?}");
        keys[0].clone()
    }

    /// The canary reached no client answer given, no audit log and no stderr.
    #[track_caller]
    fn assert_clean(&self, seen: &str) {
        for broker in &self.brokers {
            broker.assert_clean(seen, &[CANARY, &self.cap]);
        }
    }
}

fn get(base: &str, port: u16, cap: &str, path: &str) -> RawResponse {
    let request = format!(
        "GET /v1/proxy/https/127.0.0.1:{port}{path} HTTP/1.1\r\nHost: mint\r\nMint-Capability: {cap}\r\nAuthorization: Bearer {{{{mint:echo}}}}\r\nConnection: close\r\n\r\n"
    );
    raw_http(base, request.as_bytes())
}

fn closed_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A `429 limited` with `Retry-After` in `1..=max_wait` seconds (also in the body).
#[track_caller]
fn assert_limited(response: &RawResponse, max_wait: u64) {
    assert_eq!(response.status, 429, "{}", response.everything());
    let error = &response.json()["error"];
    assert_eq!(error["code"], "limited", "{error}");
    assert_eq!(error["rules"], json!(["limited"]));
    let retry: u64 = response.header("retry-after").unwrap().parse().unwrap();
    assert!((1..=max_wait).contains(&retry), "Retry-After {retry}");
    assert_eq!(error["retry_after"], retry);
}

/// A `503 limits_unavailable` with `Retry-After: 2`, audited by `broker` as a `limited`
/// decision with reason `limits_unavailable` and the rule, and a `limited` outcome with 503.
#[track_caller]
fn assert_unavailable(broker: &Broker, response: &RawResponse) {
    assert_eq!(response.status, 503, "{}", response.everything());
    let error = &response.json()["error"];
    assert_eq!(error["code"], "limits_unavailable", "{error}");
    assert_eq!(error["rules"], json!(["limited"]));
    assert_eq!(response.header("retry-after"), Some("2"));
    assert_eq!(error["retry_after"], 2);
    assert_eq!(response.header("mint-outcome"), Some("limited"));
    let id = response.header("mint-request-id").unwrap();
    let decision = broker.decision_of(id);
    assert_eq!(decision["decision"], "limited", "{decision}");
    assert_eq!(decision["reason"], "limits_unavailable", "{decision}");
    assert_eq!(decision["rule"], json!(["limited"]), "{decision}");
    let outcome = broker.outcome_of(id);
    assert_eq!(outcome["outcome"], "limited", "{outcome}");
    assert_eq!(outcome["status"], 503, "{outcome}");
}

/// Waits (bounded) until `check` holds.
#[track_caller]
fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while !check() {
        assert!(Instant::now() < deadline, "never: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn three_brokers_on_one_redis_forward_exactly_the_limit_of_300_concurrent_requests() {
    if !available() {
        return;
    }
    let fleet = Arc::new(Fleet::start(
        RedisServer::start(),
        3,
        "{ max: 100, per: 1h }",
        &["--limits-redis-wait", GENEROUS_WAIT],
    ));
    let threads = 30;
    let barrier = Arc::new(Barrier::new(threads));
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let fleet = Arc::clone(&fleet);
            let barrier = Arc::clone(&barrier);
            std::thread::spawn(move || {
                barrier.wait();
                (0..10)
                    .map(|n| {
                        let response = fleet.get((t + n) % 3, "/echo/limited/x");
                        (response.status, response)
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let answers: Vec<(u16, RawResponse)> = handles
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect();
    assert_eq!(answers.len(), 300);
    let ok = answers.iter().filter(|(status, _)| *status == 200).count();
    for (status, response) in &answers {
        if *status != 200 {
            assert_limited(response, 3600);
        }
        fleet.assert_clean(&response.everything());
    }
    assert_eq!(
        ok, 100,
        "exactly the limit is allowed across the three brokers"
    );
    assert_eq!(fleet.forwarded(), 100, "exactly the limit is forwarded");
    // Each broker admitted some: the limit was shared, not met by one broker alone.
    let allowed: Vec<usize> = fleet
        .brokers
        .iter()
        .map(|b| {
            b.audit_records()
                .iter()
                .filter(|r| r["phase"] == "decision" && r["decision"] == "allow")
                .count()
        })
        .collect();
    assert_eq!(allowed.iter().sum::<usize>(), 100, "{allowed:?}");
    assert!(allowed.iter().all(|&n| n > 0), "{allowed:?}");
    // One counter, named by a hash under the prefix, holding exactly the admitted requests'
    // ids; it expires one window after its last admission.
    let key = fleet.key();
    let hash = key.strip_prefix("mint:limits:").unwrap();
    assert!(
        hash.len() == 32 && hash.bytes().all(|b| b.is_ascii_hexdigit()),
        "{key}"
    );
    assert_eq!(fleet.redis.zcard(&key), 100);
    let ttl: i64 = fleet.redis.cli(&["PTTL", &key]).parse().unwrap();
    assert!((3_500_000..=3_600_000).contains(&ttl), "PTTL {ttl}");
    let members = fleet.redis.cli(&["--raw", "ZRANGE", &key, "0", "-1"]);
    for (status, response) in &answers {
        let id = response.header("mint-request-id").unwrap();
        assert_eq!(
            members.lines().any(|m| m == id),
            *status == 200,
            "member {id} for a {status}"
        );
    }
}

#[test]
fn windows_slide_across_brokers_by_redis_clock() {
    if !available() {
        return;
    }
    let fleet = Fleet::start(
        RedisServer::start(),
        2,
        "{ max: 2, per: 4s }",
        &["--limits-redis-wait", GENEROUS_WAIT],
    );
    assert_eq!(fleet.get(0, "/echo/limited/1").status, 200);
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(fleet.get(1, "/echo/limited/2").status, 200);
    // Spent on both brokers, until the first admission leaves the window, 4 s after it was
    // made.
    assert_limited(&fleet.get(1, "/echo/limited/3"), 4);
    assert_limited(&fleet.get(0, "/echo/limited/3"), 4);
    // Once it left, exactly one more fits: the second admission still counts (for about two
    // more seconds).
    eventually("the first admission leaves the window", || {
        fleet.get(0, "/echo/limited/4").status == 200
    });
    assert_limited(&fleet.get(1, "/echo/limited/5"), 4);
    assert_eq!(fleet.forwarded(), 3);
    assert_eq!(fleet.redis.zcard(&fleet.key()), 2);
    // Requests that match no limit are never counted.
    assert_eq!(fleet.get(1, "/echo/free/x").status, 200);
    assert_eq!(fleet.keys().len(), 1);
}

#[test]
fn a_request_never_sent_gives_back_exactly_its_own_entry() {
    if !available() {
        return;
    }
    let fleet = Fleet::start(
        RedisServer::start(),
        2,
        "{ max: 2, per: 1h }",
        &["--limits-redis-wait", GENEROUS_WAIT],
    );
    let sent = fleet.get(0, "/echo/limited/a");
    assert_eq!(sent.status, 200);
    let key = fleet.key();
    // The `limited` rule also matches a port where nothing listens: admitted, counted, never
    // sent (502 upstream_failed), then given back.
    let failed = get(
        &fleet.brokers[1].base,
        fleet.closed,
        &fleet.cap,
        "/echo/limited/b",
    );
    assert_eq!(failed.status, 502, "{}", failed.everything());
    assert_eq!(failed.json()["error"]["code"], "upstream_failed");
    let failed_id = failed.header("mint-request-id").unwrap().to_owned();
    eventually("the refund removes the failed request's entry", || {
        fleet.redis.zcard(&key) == 1
    });
    let members = fleet.redis.cli(&["--raw", "ZRANGE", &key, "0", "-1"]);
    assert_eq!(members, sent.header("mint-request-id").unwrap());
    assert!(!members.contains(&failed_id));
    // The unit is back: one more fits, then the limit holds.
    assert_eq!(fleet.get(1, "/echo/limited/c").status, 200);
    assert_limited(&fleet.get(0, "/echo/limited/d"), 3600);
    assert_eq!(fleet.forwarded(), 2);
}

#[test]
fn redis_killed_refuses_limited_requests_and_brokers_recover_without_a_restart() {
    if !available() {
        return;
    }
    let mut fleet = Fleet::start(
        RedisServer::start(),
        2,
        "{ max: 5, per: 1h }",
        &["--limits-redis-wait", "200ms"],
    );
    for i in 0..3 {
        assert_eq!(fleet.get(i % 2, "/echo/limited/before").status, 200);
    }
    let pids: Vec<Option<u32>> = fleet.brokers.iter().map(Broker::pid).collect();
    fleet.redis.kill();
    for i in 0..6 {
        let response = fleet.get(i % 2, "/echo/limited/during");
        assert_unavailable(&fleet.brokers[i % 2], &response);
        fleet.assert_clean(&response.everything());
    }
    // Requests that match no limit are unaffected.
    assert_eq!(fleet.get(0, "/echo/free/during").status, 200);
    assert_eq!(fleet.get(1, "/echo/free/during").status, 200);
    assert_eq!(
        fleet.forwarded(),
        3 + 2,
        "nothing limited was forwarded during the outage"
    );
    assert!(
        fleet
            .brokers
            .iter()
            .any(|b| b.stderr().contains("Shared call limits unavailable")),
        "the outage is logged"
    );
    // Redis back (empty: persistence is off, so the windows start again): both brokers count
    // again, exactly, without a restart.
    fleet.redis.restart();
    eventually("broker 0 admits again", || {
        fleet.get(0, "/echo/limited/after").status == 200
    });
    eventually("broker 1 admits again", || {
        fleet.get(1, "/echo/limited/after").status == 200
    });
    let mut allowed = 2;
    loop {
        let response = fleet.get(allowed % 2, "/echo/limited/after");
        if response.status != 200 {
            assert_limited(&response, 3600);
            break;
        }
        allowed += 1;
    }
    assert_eq!(allowed, 5, "the restarted Redis counts the limit exactly");
    assert_eq!(fleet.redis.zcard(&fleet.key()), 5);
    assert_eq!(
        fleet.brokers.iter().map(Broker::pid).collect::<Vec<_>>(),
        pids
    );
    assert!(
        fleet
            .brokers
            .iter()
            .any(|b| b.stderr().contains("Shared call limits answer again")),
        "the recovery is logged"
    );
}

#[test]
fn redis_paused_past_the_wait_is_503_and_the_late_admission_is_given_back() {
    if !available() {
        return;
    }
    // The default wait: 50 ms.
    let fleet = Fleet::start(RedisServer::start(), 1, "{ max: 10, per: 1h }", &[]);
    // The first admission connects and loads the script; give it a moment after start.
    eventually("the broker admits", || {
        fleet.get(0, "/echo/limited/before").status == 200
    });
    let key = fleet.key();
    let before = fleet.redis.zcard(&key);
    // Paused longer than any wait: an admission that waited for Redis would be answered after
    // the pause, and admitted; a 503 is the bound at work.
    fleet.redis.cli(&["CLIENT", "PAUSE", "3000", "ALL"]);
    let response = fleet.get(0, "/echo/limited/paused");
    assert_unavailable(&fleet.brokers[0], &response);
    let paused_id = response.header("mint-request-id").unwrap().to_owned();
    assert_eq!(fleet.get(0, "/echo/free/paused").status, 200);
    // The pause ends: Redis runs the queued admission, then the queued refund removes it.
    eventually("the broker admits after the pause", || {
        fleet.get(0, "/echo/limited/after").status == 200
    });
    let admitted = fleet.brokers[0]
        .audit_records()
        .iter()
        .filter(|r| {
            r["phase"] == "decision" && r["decision"] == "allow" && r["rule"] == json!(["limited"])
        })
        .count();
    eventually("Redis counts exactly the forwarded requests", || {
        fleet.redis.zcard(&key) == admitted as u64
    });
    assert!(before >= 1);
    let score = fleet.redis.cli(&["ZSCORE", &key, &paused_id]);
    assert!(
        score.is_empty(),
        "the refused request still counts: {score}"
    );
    assert_eq!(fleet.forwarded(), admitted + 1);
}

#[test]
fn script_flush_mid_run_keeps_the_count_exact() {
    if !available() {
        return;
    }
    let fleet = Arc::new(Fleet::start(
        RedisServer::start(),
        2,
        "{ max: 40, per: 1h }",
        &["--limits-redis-wait", GENEROUS_WAIT],
    ));
    let stop = Arc::new(AtomicBool::new(false));
    let flusher = {
        let fleet = Arc::clone(&fleet);
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut flushes = 0;
            while !stop.load(Ordering::Relaxed) {
                assert_eq!(fleet.redis.cli(&["SCRIPT", "FLUSH"]), "OK");
                flushes += 1;
                std::thread::sleep(Duration::from_millis(5));
            }
            flushes
        })
    };
    let handles: Vec<_> = (0..10)
        .map(|t| {
            let fleet = Arc::clone(&fleet);
            std::thread::spawn(move || {
                (0..10)
                    .map(|n| fleet.get((t + n) % 2, "/echo/limited/x").status)
                    .collect::<Vec<u16>>()
            })
        })
        .collect();
    let statuses: Vec<u16> = handles
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect();
    stop.store(true, Ordering::Relaxed);
    let flushes = flusher.join().unwrap();
    assert!(flushes > 1, "{flushes}");
    assert_eq!(
        statuses.iter().filter(|&&s| s == 200).count(),
        40,
        "{statuses:?}"
    );
    // The rest are refused: spent (429), or, on a machine loaded enough that an admission and
    // its reload of the flushed script outlast the wait, refused closed (503). Never forwarded.
    assert_eq!(
        statuses.iter().filter(|&&s| s == 429 || s == 503).count(),
        60,
        "{statuses:?}"
    );
    assert_eq!(fleet.forwarded(), 40);
    assert_eq!(fleet.redis.zcard(&fleet.key()), 40);
}

#[test]
fn redis_over_tcp_with_an_acl_user_limited_to_mints_keys() {
    if !available() {
        return;
    }
    let redis = RedisServer::start_with(RedisOptions {
        tcp: true,
        tls: false,
    });
    // The user of docs/operations.md: Mint's keys and the commands its script and refunds use.
    let acl = [
        "ACL",
        "SETUSER",
        "mint",
        "reset",
        "on",
        ">mint-test-password",
        "~mint:limits:*",
        "resetchannels",
        "-@all",
        "+evalsha",
        "+script|load",
        "+zrem",
        "+ping",
        "+time",
        "+zrange",
        "+zremrangebyscore",
        "+zcard",
        "+zadd",
        "+pexpire",
    ];
    assert_eq!(redis.cli(&acl), "OK");
    assert_eq!(redis.cli(&["SET", "other:key", "x"]), "OK");
    let url = redis.tcp_url(Some(("mint", "mint-test-password")));
    let fleet = Fleet::start_with_url(
        redis,
        &url,
        1,
        "{ max: 2, per: 1h, by: [agent, host] }",
        &["--limits-redis-wait", GENEROUS_WAIT],
    );
    assert_eq!(fleet.get(0, "/echo/limited/a").status, 200);
    assert_eq!(fleet.get(0, "/echo/limited/b").status, 200);
    assert_limited(&fleet.get(0, "/echo/limited/c"), 3600);
    assert_eq!(fleet.forwarded(), 2);
    // Key names hold no agent, host or rule in the clear.
    let key = fleet.key();
    for word in ["mino", "127.0.0.1", "limited"] {
        assert!(!key.contains(word), "{key}");
    }
    // The user reaches nothing else.
    let port = fleet.redis.port.unwrap().to_string();
    let other = std::process::Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port, "--user", "mint", "--pass"])
        .args([
            "mint-test-password",
            "--no-auth-warning",
            "GET",
            "other:key",
        ])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&other.stdout);
    assert!(said.contains("NOPERM"), "{said}");
    // The password is never logged; the address is.
    let stderr = fleet.brokers[0].stderr();
    assert!(!stderr.contains("mint-test-password"));
    assert!(
        stderr.contains("Call limits are shared through Redis"),
        "{stderr}"
    );
}

#[test]
fn rediss_with_a_private_ca_counts_and_without_it_is_refused() {
    if !available() {
        return;
    }
    let redis = RedisServer::start_with(RedisOptions {
        tcp: true,
        tls: true,
    });
    let url = redis.tcp_url(None);
    let ca = redis.ca_file.clone().unwrap();
    let ca_arg = ca.display().to_string();
    let fleet = Fleet::start_with_url(
        redis,
        &url,
        1,
        "{ max: 1, per: 1h }",
        &[
            "--limits-redis-wait",
            GENEROUS_WAIT,
            "--limits-redis-ca",
            &ca_arg,
        ],
    );
    assert_eq!(fleet.get(0, "/echo/limited/a").status, 200);
    assert_limited(&fleet.get(0, "/echo/limited/b"), 3600);
    assert_eq!(fleet.redis.zcard(&fleet.key()), 1);
    // Without the CA, the server's certificate is not trusted: fail closed.
    let home = fleet.another_home();
    let untrusted = home.serve(
        &fleet.peer.ca_file,
        &["--limits-redis", &url, "--limits-redis-wait", "500ms"],
    );
    let response = get(&untrusted.base, fleet.port(), &fleet.cap, "/echo/limited/c");
    assert_unavailable(&untrusted, &response);
    assert_eq!(fleet.forwarded(), 1);
}

#[test]
fn policy_explain_reads_the_budgets_from_redis() {
    if !available() {
        return;
    }
    let mut fleet = Fleet::start(
        RedisServer::start(),
        2,
        "{ max: 5, per: 1h }",
        &["--limits-redis-wait", GENEROUS_WAIT],
    );
    assert_eq!(fleet.get(0, "/echo/limited/a").status, 200);
    assert_eq!(fleet.get(1, "/echo/limited/b").status, 200);
    let url = format!("https://127.0.0.1:{}/echo/limited/c", fleet.port());
    let explain = |fleet: &Fleet| -> Value {
        let output = fleet.homes[0]
            .mint()
            .args([
                "policy", "explain", "--agent", "mino", "--method", "GET", "--url", &url,
            ])
            .args(["--header", "Authorization: Bearer {{mint:echo}}", "--json"])
            .env("MINT_LIMITS_REDIS", fleet.redis.unix_url())
            .output()
            .unwrap();
        serde_json::from_slice(&output.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&output.stderr)))
    };
    let report = explain(&fleet);
    assert_eq!(report["decision"], "allow", "{report}");
    assert_eq!(report["budgets"]["source"], "redis", "{report}");
    assert_eq!(report["limits"][0]["remaining"], 3, "{report}");
    fleet.redis.kill();
    let report = explain(&fleet);
    assert_eq!(report["decision"], "limited", "{report}");
    assert_eq!(report["code"], "limits_unavailable", "{report}");
    assert_eq!(report["status"], 503, "{report}");
    assert_eq!(report["budgets"]["source"], "redis_unavailable", "{report}");
}
