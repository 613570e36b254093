//! Agents that ask for `zstd` or `br` (`Accept-Encoding: zstd, br, gzip`) still get answers the
//! scrubber can read, through every entry: the route `/v1/proxy/`, the forward proxy (an
//! absolute-form `http://` request) and an intercepted `CONNECT` tunnel. Mint asks the upstream
//! for `identity` whatever the agent asked; an upstream that compresses anyway with gzip is
//! decoded and scrubbed (the agent gets it uncompressed), and one that answers in `br` or `zstd`,
//! which Mint cannot decode, is refused (502 `upstream_unknown`, outcome `unknown`) as on the
//! route before. The canary secret never reaches the agent, the audit log or Mint's stderr.

#![allow(clippy::unwrap_used, clippy::panic, reason = "tests")]

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;

use mint_tests::broker::{Broker, MintHome, gzip, request_header};
use mint_tests::echo_upstream::TestCa;
use mint_tests::interception::{TlsUpstream, client_command, everything};

/// The secret of the alias `echo`.
const CANARY: &str = "canary-AcceptEnc-Vq8Lm3Xz7Tn2Rw5K";
/// The upstream's name, pinned to `127.0.0.1`.
const HOST: &str = "api.encoding.test";
/// What the agent asks for.
const AGENT_ACCEPTS: &str = "Accept-Encoding: zstd, br, gzip";

/// The scripted upstream: `/plain` answers with the request head it got (the secret in it) as
/// text; `/gzip` the same gzip-compressed, whatever was asked; `/br` and `/zstd` a body in that
/// coding, which Mint cannot decode.
fn upstream_answer(head: &str) -> Vec<u8> {
    let path = head.split(' ').nth(1).unwrap_or("/");
    let (coding, body) = match path {
        "/gzip" => (Some("gzip"), gzip(head.as_bytes())),
        "/br" => (Some("br"), b"\x1b\x0b\x00\xf8\xa5\x40\x02\x1a".to_vec()),
        "/zstd" => (
            Some("zstd"),
            b"\x28\xb5\x2f\xfd\x00\x58\x11\x00\x00".to_vec(),
        ),
        _ => (None, head.as_bytes().to_vec()),
    };
    let mut answer = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    if let Some(coding) = coding {
        answer.push_str(&format!("Content-Encoding: {coding}\r\n"));
    }
    answer.push_str("\r\n");
    let mut answer = answer.into_bytes();
    answer.extend_from_slice(&body);
    answer
}

struct Lab {
    // Dropped in this order: the broker first, the directory last.
    broker: Broker,
    upstream: TlsUpstream,
    home: MintHome,
    cap: String,
    _dir: tempfile::TempDir,
}

impl Lab {
    fn start() -> Lab {
        let dir = tempfile::tempdir().unwrap();
        let upstream_ca = TestCa::generate().unwrap();
        let upstream_ca_file = dir.path().join("upstream-ca.pem");
        upstream_ca.write_pem(&upstream_ca_file).unwrap();
        let mut config = (*upstream_ca.server_config(&[HOST.to_owned()]).unwrap()).clone();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let upstream = TlsUpstream::scripted(Arc::new(config), Box::new(upstream_answer));
        let port = upstream.port();
        let home = MintHome::new(
            &format!(
                "version: 1\ndefault: deny\nrules:\n  - id: encoding\n    effect: allow\n    match:\n      alias: [echo]\n      host: [{HOST}]\n      port: [{port}]\n      method: [GET]\n"
            ),
            &format!(
                "aliases:\n  - name: echo\n    hosts: [{HOST}]\n    source: file:$SECRETS/echo\n"
            ),
            &[("echo", CANARY)],
        );
        let cap = home.issue_capability("mino", &[]);
        let pin = format!("{HOST}:{port}:127.0.0.1");
        let broker = home.serve(&upstream_ca_file, &["--resolve", &pin]);
        Lab {
            broker,
            upstream,
            home,
            cap,
            _dir: dir,
        }
    }

    fn ca(&self) -> PathBuf {
        self.home.path().join("ca.pem")
    }
}

/// How the agent reaches the upstream.
#[derive(Clone, Copy, Debug)]
enum Entry {
    Route,
    ForwardProxy,
    Connect,
}

const ENTRIES: [Entry; 3] = [Entry::Route, Entry::ForwardProxy, Entry::Connect];

/// What curl got: the answer's status, head (lowercase), body, and everything it printed.
struct Got {
    status: String,
    head: String,
    body: String,
    printed: String,
}

/// `curl -i` for `path` through `entry`, asking for `zstd, br, gzip` and sending the placeholder;
/// curl decodes nothing (no `--compressed`), so the bytes are Mint's.
fn fetch(lab: &Lab, entry: Entry, path: &str) -> Got {
    let port = lab.upstream.port();
    let mut command = client_command("curl", &[]);
    command.args([
        "-sS",
        "-i",
        "-H",
        AGENT_ACCEPTS,
        "-H",
        "Authorization: Bearer {{mint:echo}}",
    ]);
    let proxy = format!("http://agent:{}@{}", lab.cap, lab.broker.addr());
    match entry {
        Entry::Route => {
            command
                .args(["-H", &format!("Mint-Capability: {}", lab.cap)])
                .arg(format!(
                    "{}/v1/proxy/https/{HOST}:{port}{path}",
                    lab.broker.base
                ));
        }
        Entry::ForwardProxy => {
            command
                .args(["--proxy", &proxy])
                .arg(format!("http://{HOST}:{port}{path}"));
        }
        Entry::Connect => {
            command
                .args(["--proxy", &proxy, "--cacert"])
                .arg(lab.ca())
                .arg(format!("https://{HOST}:{port}{path}"));
        }
    }
    let output = command.stdin(Stdio::null()).output().unwrap();
    let printed = everything(&output);
    assert!(output.status.success(), "{entry:?} {path}: {printed}");
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    // A CONNECT answer starts with the proxy's own `200` head.
    let answer = match entry {
        Entry::Connect => text.split_once("\r\n\r\n").unwrap().1.to_owned(),
        _ => text,
    };
    let (head, body) = answer.split_once("\r\n\r\n").unwrap();
    // `HTTP/1.1 200 OK` or, inside a tunnel that ALPN took to HTTP/2, `HTTP/2 200`.
    let status = head.split(' ').nth(1).unwrap_or_default().to_owned();
    Got {
        status,
        head: head.to_ascii_lowercase(),
        body: body.to_owned(),
        printed,
    }
}

#[test]
fn agents_asking_for_zstd_or_br_get_scrubbed_identity_answers_through_every_entry() {
    let lab = Lab::start();
    for entry in ENTRIES {
        for path in ["/plain", "/gzip"] {
            let before = lab.upstream.requests().len();
            let got = fetch(&lab, entry, path);
            assert_eq!(got.status, "200", "{entry:?} {path}: {}", got.printed);
            assert!(
                !got.head.contains("content-encoding"),
                "{entry:?} {path}: {}",
                got.head
            );
            // The upstream was asked for identity only, once, whatever the agent asked.
            let requests = lab.upstream.requests();
            assert_eq!(requests.len(), before + 1);
            let seen = requests.last().unwrap();
            assert_eq!(
                request_header(seen.as_bytes(), "accept-encoding").as_deref(),
                Some("identity"),
                "{entry:?}: {seen}"
            );
            assert_eq!(
                seen.to_ascii_lowercase().matches("accept-encoding").count(),
                1,
                "{seen}"
            );
            assert_eq!(
                request_header(seen.as_bytes(), "authorization").as_deref(),
                Some(format!("Bearer {CANARY}").as_str())
            );
            // The echo of the head came back readable, with the secret scrubbed.
            assert!(
                got.body
                    .to_ascii_lowercase()
                    .contains("accept-encoding: identity"),
                "{entry:?} {path}: {}",
                got.body
            );
            assert!(got.body.contains("Bearer [mint:redacted]"), "{}", got.body);
            lab.broker.assert_clean(&got.printed, &[CANARY]);
        }
    }
}

#[test]
fn an_upstream_answering_in_br_or_zstd_anyway_is_refused_through_every_entry() {
    let lab = Lab::start();
    for entry in ENTRIES {
        for path in ["/br", "/zstd"] {
            let got = fetch(&lab, entry, path);
            assert_eq!(got.status, "502", "{entry:?} {path}: {}", got.printed);
            assert!(got.head.contains("mint-outcome: unknown"), "{}", got.head);
            assert!(!got.head.contains("content-encoding"), "{}", got.head);
            let error: serde_json::Value = serde_json::from_str(&got.body).unwrap();
            assert_eq!(error["error"]["code"], "upstream_unknown", "{error}");
            assert!(
                error["error"]["message"]
                    .as_str()
                    .unwrap()
                    .contains("cannot decode"),
                "{error}"
            );
            let id = error["error"]["request_id"].as_str().unwrap();
            let outcome = lab.broker.outcome_of(id);
            assert_eq!(outcome["outcome"], "unknown", "{outcome}");
            assert_eq!(outcome["status"], 502, "{outcome}");
            lab.broker.assert_clean(&got.printed, &[CANARY]);
        }
    }
}
