//! Issue 20: hostile HTTP/2 upstreams. Mint's upstream client offers `h2` by ALPN on every entry
//! (`broker/src/net/upstream.rs`: the route, the forward proxy and the requests of an
//! intercepted tunnel all go through one pooled hyper client), so an upstream that picks `h2`
//! speaks HTTP/2 to it whatever the agent speaks. Each upstream here writes raw frames over TLS
//! and misbehaves on purpose: a SETTINGS, PING or WINDOW_UPDATE flood, RST_STREAM on every
//! stream, a header list far over the limit, endless CONTINUATION frames (empty or full),
//! `MAX_CONCURRENT_STREAMS` 0, GOAWAY over and over (its debug data carrying the secret), a
//! PUSH_PROMISE (push is off), a window overflow. Each exchange ends within the request timeout
//! with a fixed code (`502 upstream_unknown` or `504 upstream_timeout`) in the answer and the
//! audit record, nothing of the secret or the capability goes out, Mint's memory stays bounded,
//! and the echo upstream is served while the floods run and after.

#![allow(clippy::unwrap_used, clippy::panic, reason = "tests")]

use std::io::{self, Read, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mint_tests::hostile::{
    CANARY, Entry, HOST, HostileCa, HostileLab, Tls, TlsServer, leaf_params,
};

/// How long a flood goes on at most (the request timeout is 4 s).
const FLOOD: Duration = Duration::from_secs(8);

const DATA: u8 = 0;
const HEADERS: u8 = 1;
const RST_STREAM: u8 = 3;
const SETTINGS: u8 = 4;
const PUSH_PROMISE: u8 = 5;
const PING: u8 = 6;
const GOAWAY: u8 = 7;
const WINDOW_UPDATE: u8 = 8;
const CONTINUATION: u8 = 9;

const END_STREAM: u8 = 0x1;
const ACK: u8 = 0x1;
const END_HEADERS: u8 = 0x4;

/// One HTTP/2 frame.
fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = u32::try_from(payload.len()).unwrap();
    assert!(
        len <= 1 << 14,
        "frames stay within the default maximum size"
    );
    let mut out = len.to_be_bytes()[1..].to_vec();
    out.extend([kind, flags]);
    out.extend((stream & 0x7fff_ffff).to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// An HPACK integer with an `prefix`-bit prefix, the first byte's other bits `first`.
fn hpack_int(out: &mut Vec<u8>, first: u8, prefix: u8, value: usize) {
    let max = (1usize << prefix) - 1;
    if value < max {
        out.push(first | u8::try_from(value).unwrap());
        return;
    }
    out.push(first | u8::try_from(max).unwrap());
    let mut rest = value - max;
    while rest >= 128 {
        out.push(u8::try_from(rest % 128).unwrap() | 0x80);
        rest /= 128;
    }
    out.push(u8::try_from(rest).unwrap());
}

/// An HPACK literal header field without indexing, new name, no Huffman coding.
fn literal(out: &mut Vec<u8>, name: &str, value: &str) {
    out.push(0);
    hpack_int(out, 0, 7, name.len());
    out.extend_from_slice(name.as_bytes());
    hpack_int(out, 0, 7, value.len());
    out.extend_from_slice(value.as_bytes());
}

/// `:status 200` (HPACK static index 8).
const STATUS_200: u8 = 0x88;

/// A header block of `size` bytes or more: `:status 200` then headers that carry the secret.
fn big_block(size: usize) -> Vec<u8> {
    let mut block = vec![STATUS_200];
    let mut i = 0;
    while block.len() < size {
        literal(
            &mut block,
            &format!("x-canary-{i}"),
            &format!("{CANARY} {i}"),
        );
        i += 1;
    }
    block
}

/// Reads one frame: kind, flags, stream, payload.
fn read_frame(tls: &mut Tls) -> io::Result<(u8, u8, u32, Vec<u8>)> {
    let mut head = [0u8; 9];
    tls.read_exact(&mut head)?;
    let len = usize::from(head[0]) << 16 | usize::from(head[1]) << 8 | usize::from(head[2]);
    let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
    let mut payload = vec![0u8; len];
    tls.read_exact(&mut payload)?;
    Ok((head[3], head[4], stream, payload))
}

/// Reads the client's preface and sends the server's SETTINGS (`settings`: id, value).
fn preface(tls: &mut Tls, settings: &[(u16, u32)]) -> io::Result<()> {
    let mut preface = [0u8; 24];
    tls.read_exact(&mut preface)?;
    if &preface != b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" {
        return Err(io::Error::other("not an HTTP/2 preface"));
    }
    let mut payload = Vec::new();
    for (id, value) in settings {
        payload.extend(id.to_be_bytes());
        payload.extend(value.to_be_bytes());
    }
    tls.write_all(&frame(SETTINGS, 0, 0, &payload))?;
    tls.flush()
}

/// Reads frames, acknowledging SETTINGS, until a request's HEADERS: returns its stream.
fn next_request(tls: &mut Tls) -> io::Result<u32> {
    loop {
        let (kind, flags, stream, _) = read_frame(tls)?;
        match kind {
            SETTINGS if flags & ACK == 0 => {
                tls.write_all(&frame(SETTINGS, ACK, 0, &[]))?;
                tls.flush()?;
            }
            HEADERS => return Ok(stream),
            _ => {}
        }
    }
}

/// Writes `batch` over and over until [`FLOOD`] has passed or Mint stops reading.
fn flood(tls: &mut Tls, batch: &[u8]) -> io::Result<()> {
    let deadline = Instant::now() + FLOOD;
    while Instant::now() < deadline {
        tls.write_all(batch)?;
        tls.flush()?;
    }
    Ok(())
}

/// `count` copies of `one`, written as one batch.
fn repeated(one: &[u8], count: usize) -> Vec<u8> {
    one.repeat(count)
}

/// Reads and drops whatever comes until the connection ends or [`FLOOD`] has passed.
fn drain(tls: &mut Tls) {
    let deadline = Instant::now() + FLOOD;
    while Instant::now() < deadline && read_frame(tls).is_ok() {}
}

type Behaviour = fn(&mut Tls) -> io::Result<()>;

fn settings_flood(tls: &mut Tls) -> io::Result<()> {
    preface(tls, &[])?;
    next_request(tls)?;
    // SETTINGS_HEADER_TABLE_SIZE and SETTINGS_INITIAL_WINDOW_SIZE, each needing an ACK.
    let one = frame(SETTINGS, 0, 0, &[0, 1, 0, 0, 16, 0, 0, 4, 0, 0, 255, 255]);
    flood(tls, &repeated(&one, 1000))
}

fn ping_flood(tls: &mut Tls) -> io::Result<()> {
    preface(tls, &[])?;
    next_request(tls)?;
    let one = frame(PING, 0, 0, &CANARY.as_bytes()[..8]);
    flood(tls, &repeated(&one, 1000))
}

fn window_update_flood(tls: &mut Tls) -> io::Result<()> {
    preface(tls, &[])?;
    let stream = next_request(tls)?;
    let mut batch = Vec::new();
    for _ in 0..500 {
        batch.extend(frame(WINDOW_UPDATE, 0, 0, &1u32.to_be_bytes()));
        batch.extend(frame(WINDOW_UPDATE, 0, stream, &1u32.to_be_bytes()));
    }
    flood(tls, &batch)
}

fn window_overflow(tls: &mut Tls) -> io::Result<()> {
    preface(tls, &[])?;
    next_request(tls)?;
    let one = frame(WINDOW_UPDATE, 0, 0, &0x7fff_ffffu32.to_be_bytes());
    tls.write_all(&repeated(&one, 2))?;
    tls.flush()?;
    drain(tls);
    Ok(())
}

fn reset_every_stream(reason: u32, tls: &mut Tls) -> io::Result<()> {
    preface(tls, &[])?;
    let deadline = Instant::now() + FLOOD;
    while Instant::now() < deadline {
        let stream = next_request(tls)?;
        tls.write_all(&frame(RST_STREAM, 0, stream, &reason.to_be_bytes()))?;
        tls.flush()?;
    }
    Ok(())
}

fn refused_every_stream(tls: &mut Tls) -> io::Result<()> {
    // REFUSED_STREAM: the code that says a request may be retried.
    reset_every_stream(7, tls)
}

fn internal_error_every_stream(tls: &mut Tls) -> io::Result<()> {
    reset_every_stream(2, tls)
}

fn huge_headers(tls: &mut Tls) -> io::Result<()> {
    preface(tls, &[])?;
    let stream = next_request(tls)?;
    // 256 KiB of header block, sixteen times the client's header list limit.
    let block = big_block(256 * 1024);
    let mut chunks = block.chunks(16 * 1024).peekable();
    let mut kind = HEADERS;
    while let Some(chunk) = chunks.next() {
        let flags = if chunks.peek().is_none() {
            END_HEADERS
        } else {
            0
        };
        tls.write_all(&frame(kind, flags, stream, chunk))?;
        kind = CONTINUATION;
    }
    tls.flush()?;
    drain(tls);
    Ok(())
}

fn endless_continuation(payload: &[u8], tls: &mut Tls) -> io::Result<()> {
    preface(tls, &[])?;
    let stream = next_request(tls)?;
    tls.write_all(&frame(HEADERS, 0, stream, &[STATUS_200]))?;
    let one = frame(CONTINUATION, 0, stream, payload);
    flood(tls, &repeated(&one, 64))
}

fn empty_continuation_flood(tls: &mut Tls) -> io::Result<()> {
    endless_continuation(&[], tls)
}

fn header_list_never_ends(tls: &mut Tls) -> io::Result<()> {
    endless_continuation(&big_block(15 * 1024), tls)
}

fn no_streams_allowed(tls: &mut Tls) -> io::Result<()> {
    // SETTINGS_MAX_CONCURRENT_STREAMS 0, before the request when the client waits for it; a
    // request that comes anyway is never answered.
    preface(tls, &[(3, 0)])?;
    drain(tls);
    Ok(())
}

fn goaway_loop(tls: &mut Tls) -> io::Result<()> {
    preface(tls, &[])?;
    next_request(tls)?;
    // Nothing processed; the debug data carries the secret.
    let mut payload = 0u32.to_be_bytes().to_vec();
    payload.extend(0u32.to_be_bytes());
    payload.extend(format!("{CANARY} go away").as_bytes());
    let one = frame(GOAWAY, 0, 0, &payload);
    flood(tls, &repeated(&one, 100))
}

fn goaway_then_silence(tls: &mut Tls) -> io::Result<()> {
    preface(tls, &[])?;
    let stream = next_request(tls)?;
    // The request is said to be processed (last stream id), then never answered.
    let mut payload = stream.to_be_bytes().to_vec();
    payload.extend(0u32.to_be_bytes());
    payload.extend(format!("{CANARY} shutting down").as_bytes());
    tls.write_all(&frame(GOAWAY, 0, 0, &payload))?;
    tls.flush()?;
    drain(tls);
    Ok(())
}

fn push_promise(tls: &mut Tls) -> io::Result<()> {
    preface(tls, &[])?;
    let stream = next_request(tls)?;
    // Promised stream 2: GET https /canary, `:authority` a literal carrying the secret.
    let mut payload = 2u32.to_be_bytes().to_vec();
    payload.extend([0x82, 0x87]);
    literal(&mut payload, ":path", &format!("/{CANARY}"));
    literal(&mut payload, ":authority", HOST);
    tls.write_all(&frame(PUSH_PROMISE, END_HEADERS, stream, &payload))?;
    tls.write_all(&frame(HEADERS, END_HEADERS, stream, &[STATUS_200]))?;
    tls.write_all(&frame(DATA, END_STREAM, stream, b"pushed"))?;
    tls.flush()?;
    drain(tls);
    Ok(())
}

/// One hostile upstream and how its exchange must end.
struct Case {
    name: &'static str,
    behaviour: Behaviour,
    status: u16,
    code: &'static str,
}

fn cases() -> Vec<Case> {
    let case = |name, behaviour, status, code| Case {
        name,
        behaviour,
        status,
        code,
    };
    let broke = (502, "upstream_unknown");
    let silent = (504, "upstream_timeout");
    vec![
        case(
            "a SETTINGS flood",
            settings_flood as Behaviour,
            silent.0,
            silent.1,
        ),
        case("a PING flood", ping_flood, silent.0, silent.1),
        case(
            "a WINDOW_UPDATE flood",
            window_update_flood,
            silent.0,
            silent.1,
        ),
        case("a window overflow", window_overflow, broke.0, broke.1),
        case(
            "REFUSED_STREAM on every stream",
            refused_every_stream,
            broke.0,
            broke.1,
        ),
        case(
            "INTERNAL_ERROR on every stream",
            internal_error_every_stream,
            broke.0,
            broke.1,
        ),
        case("a 256 KiB header list", huge_headers, broke.0, broke.1),
        case(
            "empty CONTINUATION frames forever",
            empty_continuation_flood,
            broke.0,
            broke.1,
        ),
        case(
            "a header list that never ends",
            header_list_never_ends,
            broke.0,
            broke.1,
        ),
        case(
            "MAX_CONCURRENT_STREAMS 0",
            no_streams_allowed,
            silent.0,
            silent.1,
        ),
        case("GOAWAY over and over", goaway_loop, broke.0, broke.1),
        case(
            "GOAWAY, then silence",
            goaway_then_silence,
            silent.0,
            silent.1,
        ),
        case("a PUSH_PROMISE", push_promise, broke.0, broke.1),
    ]
}

const ENTRIES: [Entry; 3] = [Entry::Route, Entry::Forward, Entry::TunnelHttp2];

#[test]
fn issue_20_hostile_http2_upstreams_are_bounded_and_mint_keeps_serving() {
    let ca = HostileCa::generate();
    let cases = cases();
    // One upstream per case and entry, so that no exchange meets a connection an earlier one
    // left in the pool.
    let mut lab = HostileLab::start(
        &ca,
        cases.len() * ENTRIES.len(),
        &["--connect-timeout", "1s", "--request-timeout", "4s"],
        // Every crate at debug: h2's own debug lines would quote every frame, GOAWAY debug data
        // included; a bare level leaves the protocol libraries at info (broker/src/cli/log.rs).
        "debug",
    );
    let config = ca.server_config(leaf_params(&[HOST], "hostile h2 upstream"), &[b"h2"]);
    let servers: Vec<Vec<TlsServer>> = ENTRIES
        .iter()
        .map(|_| {
            cases
                .iter()
                .map(|case| {
                    let behaviour = case.behaviour;
                    TlsServer::start(
                        lab.take_listener(),
                        Arc::clone(&config),
                        Arc::new(move |tls: &mut Tls| {
                            let _ = behaviour(tls);
                        }),
                    )
                })
                .collect()
        })
        .collect();
    // A first request, so that the baseline counts the runtime's and the pool's start.
    let mut seen = lab.assert_still_serving(Entry::Route).everything();
    let rss_before = lab.broker_rss_kib();
    let lab = &lab;
    for (entry, servers) in ENTRIES.into_iter().zip(&servers) {
        let (results, during) = std::thread::scope(|scope| {
            let running: Vec<_> = cases
                .iter()
                .zip(servers)
                .map(|(case, server)| {
                    scope.spawn(move || {
                        let started = Instant::now();
                        let response = lab.get(entry, HOST, server.port(), "/hostile");
                        (case, response, started.elapsed())
                    })
                })
                .collect();
            // While every flood runs, the echo upstream is served on each entry.
            std::thread::sleep(Duration::from_millis(500));
            let mut during = String::new();
            for other in ENTRIES {
                during.push_str(&lab.assert_still_serving(other).everything());
            }
            let results: Vec<_> = running.into_iter().map(|r| r.join().unwrap()).collect();
            (results, during)
        });
        seen.push_str(&during);
        for (case, response, took) in results {
            let what = format!("{} via {entry:?}", case.name);
            seen.push_str(&response.everything());
            assert_eq!(response.status, case.status, "{what}: {response:?}");
            assert_eq!(response.json()["error"]["code"], case.code, "{what}");
            // Bounded by the request timeout (4 s), with room for a loaded machine.
            assert!(took < Duration::from_secs(10), "{what} took {took:?}");
            let id = response.header("mint-request-id").unwrap().to_owned();
            let outcome = lab.broker.outcome_of(&id);
            assert_eq!(outcome["reason"], case.code, "{what}: {outcome}");
        }
        seen.push_str(&lab.assert_still_serving(entry).everything());
    }
    for (entry, servers) in ENTRIES.iter().zip(&servers) {
        for (case, server) in cases.iter().zip(servers) {
            // Every upstream spoke HTTP/2 (ALPN `h2` only), and none was tried again: one
            // connection for the one request.
            let what = format!("{} via {entry:?}", case.name);
            assert_eq!(server.handshakes(), 1, "{what}");
            assert_eq!(server.connections(), 1, "{what}");
        }
    }
    let rss_after = lab.broker_rss_kib();
    eprintln!("broker RSS: {rss_before} KiB before the floods, {rss_after} KiB after");
    assert!(
        rss_after < rss_before + 64 * 1024,
        "the broker grew from {rss_before} KiB to {rss_after} KiB"
    );
    lab.assert_clean(&seen, &[]);
    drop(servers);
}
