//! Issue 20: hostile upstreams. An upstream that sends a 10 GiB body (declared or streamed), a
//! header that never ends, a head or a body one byte at a time, chunked framing that breaks, or
//! a gzip bomb: each is bounded by Mint's limits, ends with a fixed code in the answer and the
//! audit record, lets nothing of the secret out, and leaves Mint serving the next request. Each
//! hostile upstream is a real socket on loopback (plain `http`, which Mint allows toward
//! loopback), and the broker runs with small limits so the bounds are reached quickly.

#![allow(clippy::unwrap_used, reason = "tests")]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use mint_tests::broker::gzip;
use mint_tests::lab::{self, Lab, LabConfig};

const CANARY: &str = "canary-hostile-upstream-8Rk2";

/// How a hostile upstream answers, once it has read a request head.
type Answer = fn(&mut TcpStream) -> std::io::Result<()>;

/// A plain-HTTP upstream on `127.0.0.1:0` that answers every request with `answer`, one thread
/// per connection; writes stop at the first error (Mint hung up) or after 60 s.
struct Hostile {
    port: u16,
    stop: Arc<AtomicBool>,
}

impl Hostile {
    fn start(answer: Answer) -> Hostile {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                if stopped.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(mut stream) = stream else { continue };
                std::thread::spawn(move || {
                    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
                    let _ = stream.set_write_timeout(Some(Duration::from_secs(60)));
                    let mut head = Vec::new();
                    let mut byte = [0u8; 1];
                    while !head.ends_with(b"\r\n\r\n") {
                        match stream.read(&mut byte) {
                            Ok(1) => head.push(byte[0]),
                            _ => return,
                        }
                    }
                    let _ = answer(&mut stream);
                });
            }
        });
        Hostile { port, stop }
    }
}

impl Drop for Hostile {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

/// Writes `chunk` over and over for at most 60 s, until Mint stops reading.
fn forever(stream: &mut TcpStream, chunk: &[u8]) -> std::io::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        stream.write_all(chunk)?;
    }
    Ok(())
}

fn declared_10_gib(stream: &mut TcpStream) -> std::io::Result<()> {
    stream.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 10737418240\r\n\r\n")?;
    forever(stream, &[b'x'; 64 * 1024])
}

fn streamed_10_gib(stream: &mut TcpStream) -> std::io::Result<()> {
    stream.write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")?;
    let mut chunk = format!("{:x}\r\n", 64 * 1024).into_bytes();
    chunk.extend_from_slice(&[b'x'; 64 * 1024]);
    chunk.extend_from_slice(b"\r\n");
    forever(stream, &chunk)
}

fn endless_header(stream: &mut TcpStream) -> std::io::Result<()> {
    stream.write_all(b"HTTP/1.1 200 OK\r\nX-Endless: ")?;
    forever(stream, &[b'a'; 16 * 1024])
}

fn endless_headers(stream: &mut TcpStream) -> std::io::Result<()> {
    stream.write_all(b"HTTP/1.1 200 OK\r\n")?;
    forever(stream, b"X-More: more\r\n")
}

fn dripping_head(stream: &mut TcpStream) -> std::io::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    for byte in b"HTTP/1.1 200 OK\r\nX-Slow: "
        .iter()
        .chain(std::iter::repeat(&b'z'))
    {
        if Instant::now() > deadline {
            break;
        }
        stream.write_all(&[*byte])?;
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(())
}

fn dripping_body(stream: &mut TcpStream) -> std::io::Result<()> {
    stream.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\nfirst bytes")?;
    // Longer than the broker's --idle-timeout, then one more byte.
    std::thread::sleep(Duration::from_secs(4));
    stream.write_all(b"y")?;
    std::thread::sleep(Duration::from_secs(4));
    Ok(())
}

fn broken_chunks(stream: &mut TcpStream) -> std::io::Result<()> {
    stream.write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\nZZZZ\r\nnot a chunk\r\n")?;
    std::thread::sleep(Duration::from_secs(2));
    Ok(())
}

/// 64 MiB of zeros in about 64 KiB: far over the broker's 256 KiB response limit once decoded.
/// Built once, before the broker starts (compressing 64 MiB takes a while in a debug build).
static BOMB: OnceLock<Vec<u8>> = OnceLock::new();

/// A gzip member of 1 KiB of text: the small first step of the late bomb.
static FIRST_MEMBER: OnceLock<Vec<u8>> = OnceLock::new();

fn build_bombs() {
    BOMB.get_or_init(|| gzip(&vec![0u8; 64 * 1024 * 1024]));
    FIRST_MEMBER.get_or_init(|| gzip(&[b'a'; 1024]));
}

fn gzip_bomb(stream: &mut TcpStream) -> std::io::Result<()> {
    let bomb = BOMB.get().unwrap();
    let head = format!(
        "HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: {}\r\n\r\n",
        bomb.len()
    );
    stream.write_all(head.as_bytes())?;
    stream.write_all(bomb)?;
    std::thread::sleep(Duration::from_secs(2));
    Ok(())
}

fn late_gzip_bomb(stream: &mut TcpStream) -> std::io::Result<()> {
    // A first gzip member that decodes small (so the head goes out), then a second member, the
    // bomb: cut off after the head (MultiGzDecoder reads every member, as Mint does).
    let (first, rest) = (FIRST_MEMBER.get().unwrap(), BOMB.get().unwrap());
    stream.write_all(
        b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n",
    )?;
    stream.write_all(format!("{:x}\r\n", first.len()).as_bytes())?;
    stream.write_all(first)?;
    stream.write_all(b"\r\n")?;
    std::thread::sleep(Duration::from_millis(300));
    stream.write_all(format!("{:x}\r\n", rest.len()).as_bytes())?;
    stream.write_all(rest)?;
    stream.write_all(b"\r\n0\r\n\r\n")?;
    std::thread::sleep(Duration::from_secs(2));
    Ok(())
}

/// What one hostile exchange must end as.
struct Case {
    name: &'static str,
    answer: Answer,
    /// The status the agent gets: Mint's own JSON error, or the upstream's head then a cut.
    status: u16,
    /// The code of Mint's JSON error, when it answers itself.
    code: Option<&'static str>,
    /// The audit outcome's reason.
    reason: &'static str,
}

#[test]
fn issue_20_hostile_upstreams_are_bounded_and_mint_keeps_serving() {
    let cases = [
        Case {
            name: "a declared 10 GiB body",
            answer: declared_10_gib,
            status: 502,
            code: Some("upstream_unknown"),
            reason: "upstream_unknown",
        },
        Case {
            name: "a streamed 10 GiB body",
            answer: streamed_10_gib,
            status: 200,
            code: None,
            reason: "response_too_large",
        },
        Case {
            name: "a header that never ends",
            answer: endless_header,
            status: 502,
            code: Some("upstream_unknown"),
            reason: "upstream_unknown",
        },
        Case {
            name: "headers that never end",
            answer: endless_headers,
            status: 502,
            code: Some("upstream_unknown"),
            reason: "upstream_unknown",
        },
        Case {
            name: "a head one byte at a time",
            answer: dripping_head,
            status: 504,
            code: Some("upstream_timeout"),
            reason: "upstream_timeout",
        },
        Case {
            name: "a body that goes silent",
            answer: dripping_body,
            status: 200,
            code: None,
            reason: "upstream_idle_timeout",
        },
        Case {
            name: "broken chunked framing",
            answer: broken_chunks,
            status: 200,
            code: None,
            reason: "upstream_reset",
        },
        Case {
            name: "a gzip bomb",
            answer: gzip_bomb,
            status: 502,
            code: Some("upstream_unknown"),
            reason: "upstream_unknown",
        },
        Case {
            name: "a gzip bomb after a small first step",
            answer: late_gzip_bomb,
            status: 200,
            code: None,
            reason: "response_too_large",
        },
    ];
    build_bombs();
    let hostiles: Vec<Hostile> = cases.iter().map(|c| Hostile::start(c.answer)).collect();
    let ports: Vec<u16> = hostiles.iter().map(|h| h.port).collect();
    let lab = Lab::start(
        LabConfig {
            secrets: &[("echo", CANARY)],
            serve_args: &[
                "--max-response-body",
                "256KiB",
                "--idle-timeout",
                "2s",
                "--connect-timeout",
                "1s",
                "--request-timeout",
                "3s",
            ],
            ..LabConfig::default()
        },
        |echo| {
            let mut rules = lab::allow("echo", "echo", echo, "GET", "");
            for (i, port) in ports.iter().enumerate() {
                rules.push_str(&lab::allow(
                    &format!("hostile-{i}"),
                    "echo",
                    *port,
                    "GET",
                    "      scheme: [http]\n",
                ));
            }
            rules
        },
    );
    let mut seen = String::new();
    for (case, port) in cases.iter().zip(&ports) {
        // Bounded: curl gives up after 30 s (and the status is then not the one expected), while
        // every limit of the broker is a few seconds.
        let response = lab.curl(&[
            "--max-time",
            "30",
            "-H",
            "Authorization: Bearer {{mint:echo}}",
            &lab.proxy_url("http", &format!("127.0.0.1:{port}"), "/hostile"),
        ]);
        seen.push_str(&response.everything());
        assert_eq!(
            response.status,
            case.status,
            "{}: {}",
            case.name,
            response.everything()
        );
        if let Some(code) = case.code {
            assert_eq!(response.json()["error"]["code"], code, "{}", case.name);
        }
        let id = response
            .header("mint-request-id")
            .unwrap_or_else(|| panic!("{}: no request id", case.name))
            .to_owned();
        let outcome = lab.broker.outcome_of(&id);
        assert_eq!(outcome["reason"], case.reason, "{}: {outcome}", case.name);
        // Mint still serves the next agent request.
        let next = lab.curl(&[
            "-H",
            "Authorization: Bearer {{mint:echo}}",
            &lab.echo_url("/echo/after"),
        ]);
        assert_eq!(
            next.status,
            200,
            "after {}: {}",
            case.name,
            next.everything()
        );
        seen.push_str(&next.everything());
    }
    lab.assert_clean(seen);
    drop(hostiles);
}
