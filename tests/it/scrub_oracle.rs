//! The scrubber seen from an attacking agent (issue 22): a real `mint serve`, a loopback upstream
//! that reflects the agent's guess, and an agent that cannot use the secret's placeholder. The
//! scrubber's hold-back must not tell the agent whether its guess is the start of a secret (in
//! any form): not in the bytes it gets before the upstream writes more, not in how the answer is
//! cut into HTTP/1.1 chunks or HTTP/2 DATA frames. And a secret in line-wrapped base64, HTML
//! character references or quoted-printable, written by Python's own encoders, comes back
//! redacted.

#![allow(clippy::unwrap_used, clippy::panic, reason = "tests")]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use mint_tests::broker::{Broker, MintHome};
use mint_tests::echo_peer;
use mint_tests::echo_upstream::EchoConfig;

/// The secret of alias `local` (bound to 127.0.0.1): never placed by the agent, only guessed.
const CANARY: &str = "oracle-canary-Kx7Qp2+Zr9/Lw4=Tb6\"<&";
/// The secret of alias `other`, the one the agent's capability is narrowed to.
const OTHER: &str = "other-canary-Vn3Jd8Hs1Fq5";
const MARKER: &str = "[mint:redacted]";
/// Filler before the reflected guess: more than any hold, so something is always released.
const FILLER: usize = 4096;
/// The upstream's second write.
const SECOND: &[u8] = b" and the rest of the answer.\n";

fn aliases() -> String {
    "aliases:\n  - name: local\n    hosts: [127.0.0.1]\n    source: file:$SECRETS/local\n  - name: other\n    hosts: [localhost]\n    source: file:$SECRETS/other\n".to_owned()
}

fn policy(port: u16) -> String {
    format!(
        "version: 1\ndefault: deny\nrules:\n  - id: reflect\n    effect: allow\n    match:\n      scheme: [http]\n      host: [127.0.0.1]\n      port: [{port}]\n      method: [GET]\n"
    )
}

/// A plain-HTTP upstream that answers every request in two writes: a chunk of filler ending in
/// the query parameter `g` (percent-decoded), flushed; then, once the test releases it, a
/// second chunk and the end. Node's `res.write` twice does the same.
struct Reflector {
    port: u16,
    release: mpsc::Sender<()>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Reflector {
    fn start() -> Reflector {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let (release, released) = mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let head = read_head(&mut stream);
                if head.is_empty() {
                    // The test's wake-up at the end.
                    return;
                }
                let guess = query_param(&head, "g");
                let mut first = b"x".repeat(FILLER);
                first.extend_from_slice(&guess);
                // The head and the first chunk in one write, so Mint reads them together.
                let mut write = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n".to_vec();
                write.extend_from_slice(format!("{:x}\r\n", first.len()).as_bytes());
                write.extend_from_slice(&first);
                write.extend_from_slice(b"\r\n");
                let _ = stream.write_all(&write);
                let _ = stream.flush();
                // Until the agent has read what Mint released of the first write.
                let _ = released.recv_timeout(Duration::from_secs(20));
                let second = SECOND;
                let mut write = format!("{:x}\r\n", second.len()).into_bytes();
                write.extend_from_slice(second);
                write.extend_from_slice(b"\r\n0\r\n\r\n");
                let _ = stream.write_all(&write);
                let _ = stream.flush();
                let mut rest = Vec::new();
                let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
                let _ = stream.read_to_end(&mut rest);
            }
        });
        Reflector {
            port,
            release,
            thread: Some(thread),
        }
    }
}

impl Drop for Reflector {
    fn drop(&mut self) {
        let _ = self.release.send(());
        if let Ok(mut wake) = TcpStream::connect(("127.0.0.1", self.port)) {
            let _ = wake.shutdown(std::net::Shutdown::Write);
            let _ = wake.read(&mut [0u8; 1]);
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn read_head(stream: &mut TcpStream) -> Vec<u8> {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match stream.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => break,
        }
    }
    head
}

fn query_param(head: &[u8], name: &str) -> Vec<u8> {
    let text = String::from_utf8_lossy(head);
    let target = text.split_whitespace().nth(1).unwrap_or_default();
    let query = target.split_once('?').map(|(_, q)| q).unwrap_or_default();
    query
        .split('&')
        .find_map(|pair| pair.strip_prefix(&format!("{name}=")))
        .map(percent_decode)
        .unwrap_or_default()
}

fn percent_decode(text: &str) -> Vec<u8> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 3 <= bytes.len()
            && let Ok(byte) = u8::from_str_radix(&text[i + 1..i + 3], 16)
        {
            out.push(byte);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    out
}

fn percent_encode(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|&b| {
            if b.is_ascii_alphanumeric() {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// What the agent observed of one answer.
#[derive(Debug, PartialEq, Eq)]
struct Observed {
    status: u16,
    /// Body bytes received before the upstream's second write was released.
    before_release: usize,
    /// The HTTP/1.1 chunk sizes, in order.
    chunks: Vec<usize>,
    /// The body, dechunked.
    body: Vec<u8>,
}

/// Sends a guess as the agent would (raw TCP: the chunk boundaries are the point) and records
/// what comes back. `expected` is how many body bytes a probe released before: reading stops as
/// soon as that many arrived (then a short wait for more), or after a longer wait for fewer.
fn probe(
    broker: &Broker,
    cap: &str,
    upstream: &Reflector,
    guess: &[u8],
    expected: Option<usize>,
) -> Observed {
    let addr = broker.base.trim_start_matches("http://");
    let mut stream = TcpStream::connect(addr).unwrap();
    let request = format!(
        "GET /v1/proxy/http/127.0.0.1:{}/reflect?g={} HTTP/1.1\r\nHost: {addr}\r\nMint-Capability: {cap}\r\nConnection: close\r\n\r\n",
        upstream.port,
        percent_encode(guess)
    );
    stream.write_all(request.as_bytes()).unwrap();
    let mut raw = Vec::new();
    let mut buffer = [0u8; 65536];
    // Phase 1: what Mint releases of the first write.
    let (quiet, patience) = match expected {
        Some(_) => (Duration::from_millis(60), Duration::from_millis(1500)),
        None => (Duration::from_millis(1500), Duration::from_millis(1500)),
    };
    loop {
        let body_so_far = parse(&raw).map_or(0, |(_, _, body)| body.len());
        let waiting_for_more = expected.is_some_and(|e| body_so_far < e);
        stream
            .set_read_timeout(Some(if waiting_for_more { patience } else { quiet }))
            .unwrap();
        match stream.read(&mut buffer) {
            Ok(0) => break,
            Ok(n) => raw.extend_from_slice(&buffer[..n]),
            Err(_) => break,
        }
    }
    let before_release = parse(&raw).map_or(0, |(_, _, body)| body.len());
    upstream.release.send(()).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    loop {
        match stream.read(&mut buffer) {
            Ok(0) | Err(_) => break,
            Ok(n) => raw.extend_from_slice(&buffer[..n]),
        }
    }
    let (status, chunks, body) = parse(&raw).unwrap();
    Observed {
        status,
        before_release,
        chunks,
        body,
    }
}

/// The status, chunk sizes and dechunked body of a (possibly partial) HTTP/1.1 chunked answer.
fn parse(raw: &[u8]) -> Option<(u16, Vec<usize>, Vec<u8>)> {
    let head_end = raw.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let head = String::from_utf8_lossy(&raw[..head_end]);
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    assert!(
        head.to_ascii_lowercase()
            .contains("transfer-encoding: chunked"),
        "{head}"
    );
    let mut rest = &raw[head_end..];
    let (mut chunks, mut body) = (Vec::new(), Vec::new());
    while let Some(line_end) = rest.windows(2).position(|w| w == b"\r\n") {
        let size_text = String::from_utf8_lossy(&rest[..line_end]);
        let Ok(size) = usize::from_str_radix(size_text.trim(), 16) else {
            break;
        };
        if size == 0 || rest.len() < line_end + 2 + size {
            break;
        }
        chunks.push(size);
        body.extend_from_slice(&rest[line_end + 2..line_end + 2 + size]);
        rest = rest.get(line_end + 4 + size..).unwrap_or_default();
    }
    Some((status, chunks, body))
}

/// Every form of `secret` the scrubber knows, written independently of Mint's code: raw, hex,
/// percent, JSON, base64 and its URL-safe alphabet at each alignment (the stable characters
/// only), wrapped base64, HTML references and quoted-printable.
fn forms(secret: &[u8]) -> Vec<(String, Vec<u8>)> {
    let text = std::str::from_utf8(secret).unwrap();
    let hex_lower: String = secret.iter().map(|b| format!("{b:02x}")).collect();
    let json = serde_json::to_string(text).unwrap();
    let mut forms = vec![
        ("raw".to_owned(), secret.to_vec()),
        ("hex".to_owned(), hex_lower.clone().into_bytes()),
        ("HEX".to_owned(), hex_lower.to_uppercase().into_bytes()),
        (
            "percent".to_owned(),
            secret
                .iter()
                .map(|&b| {
                    if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                        char::from(b).to_string()
                    } else {
                        format!("%{b:02X}")
                    }
                })
                .collect::<String>()
                .into_bytes(),
        ),
        (
            "json".to_owned(),
            json.as_bytes()[1..json.len() - 1].to_vec(),
        ),
        (
            "json-all".to_owned(),
            text.chars()
                .map(|c| format!("\\u{:04x}", u32::from(c)))
                .collect::<String>()
                .into_bytes(),
        ),
        (
            "html-go".to_owned(),
            text.replace('&', "&amp;")
                .replace('+', "&#43;")
                .replace('"', "&#34;")
                .replace('<', "&lt;")
                .into_bytes(),
        ),
        (
            "html-all".to_owned(),
            text.chars()
                .map(|c| format!("&#x{:X};", u32::from(c)))
                .collect::<String>()
                .into_bytes(),
        ),
        (
            "quoted-printable".to_owned(),
            secret
                .iter()
                .map(|&b| {
                    if b.is_ascii_graphic() && b != b'=' {
                        char::from(b).to_string()
                    } else {
                        format!("={b:02X}")
                    }
                })
                .collect::<String>()
                .into_bytes(),
        ),
    ];
    for alignment in 0..3 {
        for url_safe in [false, true] {
            let mut input = vec![0u8; alignment];
            input.extend_from_slice(secret);
            let encoded = base64(&input, url_safe);
            let first = [0, 2, 3][alignment];
            let last = 8 * input.len() / 6;
            let inner = encoded[first..last].to_owned();
            if !url_safe {
                let middle = inner.len() / 2;
                forms.push((
                    format!("base64-wrapped-{alignment}"),
                    format!("{}\r\n{}", &inner[..middle], &inner[middle..]).into_bytes(),
                ));
            }
            forms.push((format!("base64-{alignment}-{url_safe}"), inner.into_bytes()));
        }
    }
    forms
}

fn base64(bytes: &[u8], url_safe: bool) -> String {
    let alphabet: &[u8; 64] = if url_safe {
        b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    } else {
        b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    };
    let mut out = String::new();
    for group in bytes.chunks(3) {
        let b = [
            group[0],
            *group.get(1).unwrap_or(&0),
            *group.get(2).unwrap_or(&0),
        ];
        let n = u32::from(b[0]) << 16 | u32::from(b[1]) << 8 | u32::from(b[2]);
        for i in 0..=group.len() {
            out.push(char::from(alphabet[(n >> (18 - 6 * i) & 63) as usize]));
        }
        for _ in group.len()..3 {
            out.push('=');
        }
    }
    out
}

/// A string of `len` bytes drawn from the same kinds of characters as `like` (so the newline
/// rule, which looks at kinds of bytes only, sees the same), but not a prefix of anything.
fn random_like(like: &[u8], seed: u64) -> Vec<u8> {
    let mut state = seed | 1;
    like.iter()
        .map(|&b| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            if b.is_ascii_alphanumeric() {
                b"ghijkmnopqrstuvwyz"[(state % 18) as usize]
            } else {
                b
            }
        })
        .collect()
}

fn start() -> (MintHome, Broker, String, Reflector, tempfile::TempDir) {
    let upstream = Reflector::start();
    let dir = tempfile::tempdir().unwrap();
    let peer = echo_peer(dir.path(), EchoConfig::default());
    let home = MintHome::new(
        &policy(upstream.port),
        &aliases(),
        &[("local", CANARY), ("other", OTHER)],
    );
    let cap = home.issue_capability("mallory", &["--alias", "other"]);
    let broker = home.serve(&peer.ca_file, &[]);
    (home, broker, cap, upstream, dir)
}

fn assert_clean(broker: &Broker, seen: &[u8]) {
    let seen = String::from_utf8_lossy(seen);
    let stripped = seen.replace(MARKER, "");
    for secret in [CANARY, OTHER] {
        assert!(!stripped.contains(secret), "a secret reached the agent");
        assert!(
            !broker.audit_text().contains(secret),
            "a secret in the audit log"
        );
        assert!(!broker.stderr().contains(secret), "a secret on stderr");
    }
}

#[test]
fn issue_22_the_hold_back_tells_the_agent_nothing_about_its_guess() {
    let (_home, broker, cap, upstream, _dir) = start();
    // How much Mint keeps back of an answer that ends in an innocent word.
    let calibration = probe(&broker, &cap, &upstream, b"calibrate", None);
    assert_eq!(calibration.status, 200);
    let hold = FILLER + 9 - calibration.before_release;
    let expected = |len: usize| FILLER + len - hold;
    let mut seen = calibration.body.clone();
    for (name, form) in forms(CANARY.as_bytes()) {
        let lengths = [1, 4, form.len() / 2, form.len() - 1];
        for (i, &len) in lengths.iter().enumerate() {
            let guess = &form[..len];
            let decoy = random_like(guess, 7 + i as u64);
            let hit = probe(&broker, &cap, &upstream, guess, Some(expected(len)));
            let miss = probe(&broker, &cap, &upstream, &decoy, Some(expected(len)));
            assert_eq!(hit.status, 200, "{name}");
            // The same bytes released before the upstream wrote more, cut the same way.
            assert_eq!(
                (hit.before_release, &hit.chunks),
                (miss.before_release, &miss.chunks),
                "{name}: a prefix of {len} bytes is observable"
            );
            assert_eq!(hit.before_release, expected(len), "{name}: {len}");
            // The whole reflection arrives unchanged: a proper prefix is no secret.
            assert!(hit.body.ends_with(SECOND), "{name}");
            assert!(hit.body.windows(guess.len()).any(|w| w == guess), "{name}");
            seen.extend_from_slice(&hit.body);
            seen.extend_from_slice(&miss.body);
        }
    }
    // The attack that worked before the fix, on the base64 form: extend the guess one
    // character at a time, keeping a character when Mint holds back more than for the others.
    let target = forms(CANARY.as_bytes())
        .into_iter()
        .find(|(name, _)| name == "base64-1-false")
        .unwrap()
        .1;
    let alphabet: Vec<u8> = (b'!'..=b'~').collect();
    let mut recovered = Vec::new();
    'position: while recovered.len() < target.len() {
        for &candidate in &alphabet {
            let mut guess = recovered.clone();
            guess.push(candidate);
            let observed = probe(
                &broker,
                &cap,
                &upstream,
                &guess,
                Some(expected(guess.len())),
            );
            seen.extend_from_slice(&observed.body);
            if observed.before_release != expected(guess.len()) {
                recovered = guess;
                continue 'position;
            }
        }
        break;
    }
    assert!(
        recovered.is_empty(),
        "recovered {} characters of the secret's base64",
        recovered.len()
    );
    // A complete guess is still redacted (the residual docs/security.md names).
    let whole = probe(&broker, &cap, &upstream, CANARY.as_bytes(), None);
    assert!(
        whole
            .body
            .ends_with(format!("{MARKER}{}", String::from_utf8_lossy(SECOND)).as_bytes())
    );
    seen.extend_from_slice(&whole.body);
    assert_clean(&broker, &seen);
}

/// The upstream of the finding-2 test: Python's own encoders write the secret (from `SECRET`)
/// into one answer, with offsets that put a line break inside its encoding. Prints its port.
const ENCODING_UPSTREAM: &str = r#"
import base64, html, json, os, quopri, socket
s = os.environ["SECRET"].encode()
parts = []
for lead in range(0, 58, 1):
    blob = b"\xa5" * lead + s + b"\x3c" * 7
    mime = base64.encodebytes(blob)
    parts.append(("mime-lf", mime))
    parts.append(("mime-crlf", mime.replace(b"\n", b"\r\n")))
    flat = base64.b64encode(blob)
    parts.append(("pem", b"\n".join(flat[i:i + 64] for i in range(0, len(flat), 64)) + b"\n"))
    parts.append(("json", json.dumps({"data": mime.decode()}).encode()))
text = s.decode()
parts.append(("html", html.escape(text).encode()))
parts.append(("html", html.escape(text, quote=False).encode()))
parts.append(("html", "".join("&#%d;" % ord(c) for c in text).encode()))
parts.append(("html", "".join("&#x%X;" % ord(c) for c in text).encode()))
parts.append(("html", text.replace("&", "&amp;").replace("+", "&#43;").replace('"', "&#34;").replace("<", "&lt;").encode()))
for lead in range(40, 76, 1):
    parts.append(("qp", quopri.encodestring(b"." * lead + s)))
    parts.append(("qp", quopri.encodestring(b"." * lead + s).replace(b"=\n", b"=\r\n")))
body = b"".join(b"--" + name.encode() + b"--\n" + part + b"\n--end--\n" for name, part in parts)
listener = socket.socket()
listener.bind(("127.0.0.1", 0))
listener.listen(8)
print(listener.getsockname()[1], flush=True)
while True:
    connection, _ = listener.accept()
    request = b""
    while b"\r\n\r\n" not in request:
        more = connection.recv(65536)
        if not more:
            break
        request += more
    connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body)
    connection.close()
"#;

/// The agent's side: decodes every part of the answer (on stdin) as its encoding says, also
/// each stretch between two markers at every base64 alignment, and prints every part in which
/// 4 consecutive bytes of the secret (from `SECRET`) come back.
const AGENT_DECODER: &str = r#"
import base64, binascii, html, os, quopri, re, sys
s = os.environ["SECRET"].encode()
windows = {s[i:i + 4] for i in range(len(s) - 3)}
body = sys.stdin.buffer.read()
found = []
for m in re.finditer(rb"--([a-z-]+)--\n(.*?)\n--end--\n", body, re.S):
    name, part = m.group(1).decode(), m.group(2)
    decoded = [part]
    for stretch in part.split(b"[mint:redacted]") + [part.replace(b"[mint:redacted]", b"")]:
        if name == "html":
            decoded.append(html.unescape(stretch.decode("latin-1")).encode("latin-1", "replace"))
        elif name == "qp":
            decoded.append(quopri.decodestring(stretch))
        else:
            chars = re.sub(rb"[^A-Za-z0-9+/]", b"", stretch.replace(b"\\r", b"").replace(b"\\n", b""))
            for shift in range(4):
                usable = chars[shift:]
                usable = usable[:len(usable) // 4 * 4]
                try:
                    decoded.append(binascii.a2b_base64(usable))
                except binascii.Error:
                    pass
    if any(w in d for d in decoded for w in windows):
        found.append(name)
print(len(re.findall(rb"--end--", body)), " ".join(found))
"#;

/// A child process killed when dropped.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn issue_22_wrapped_base64_html_and_quoted_printable_come_back_redacted() {
    let mut upstream = Command::new("python3")
        .args(["-c", ENCODING_UPSTREAM])
        .env("SECRET", CANARY)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut port = String::new();
    {
        use std::io::BufRead as _;
        let stdout = upstream.stdout.take().unwrap();
        std::io::BufReader::new(stdout)
            .read_line(&mut port)
            .unwrap();
    }
    let _upstream = Killed(upstream);
    let port: u16 = port.trim().parse().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let peer = echo_peer(dir.path(), EchoConfig::default());
    let home = MintHome::new(
        &policy(port),
        &aliases(),
        &[("local", CANARY), ("other", OTHER)],
    );
    let cap = home.issue_capability("mallory", &["--alias", "other"]);
    let broker = home.serve(&peer.ca_file, &[]);
    let url = format!("{}/v1/proxy/http/127.0.0.1:{port}/encoded", broker.base);
    let answer = mint_tests::broker::curl(&["-H", &format!("Mint-Capability: {cap}"), &url]);
    assert_eq!(answer.status, 200, "{}", answer.body);
    let mut decoder = Command::new("python3")
        .args(["-c", AGENT_DECODER])
        .env("SECRET", CANARY)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    decoder
        .stdin
        .take()
        .unwrap()
        .write_all(answer.body.as_bytes())
        .unwrap();
    let output = decoder.wait_with_output().unwrap();
    assert!(output.status.success());
    let report = String::from_utf8(output.stdout).unwrap();
    let (parts, leaked) = report
        .trim_end()
        .split_once(' ')
        .unwrap_or((report.trim(), ""));
    // 58 offsets in 4 base64 layouts, 5 HTML spellings, 36 quoted-printable offsets twice.
    assert_eq!(parts, "309", "{report}");
    assert!(leaked.is_empty(), "secret bytes decoded from: {leaked}");
    assert!(
        answer.body.matches(MARKER).count() >= 309,
        "{}",
        answer.body
    );
    assert_clean(&broker, answer.everything().as_bytes());
}

/// [`probe`] over HTTP/2 (cleartext, prior knowledge): `chunks` are the DATA frames' sizes, as
/// hyper's client hands them over one by one.
fn probe_h2(
    broker: &Broker,
    cap: &str,
    upstream: &Reflector,
    guess: &[u8],
    expected: usize,
) -> Observed {
    use http_body_util::{BodyExt as _, Empty};
    use hyper_util::rt::{TokioExecutor, TokioIo};

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let addr = broker.base.trim_start_matches("http://").to_owned();
    let uri = format!(
        "http://{addr}/v1/proxy/http/127.0.0.1:{}/reflect?g={}",
        upstream.port,
        percent_encode(guess)
    );
    runtime.block_on(async move {
        let tcp = tokio::net::TcpStream::connect(&addr).await.unwrap();
        let (mut sender, connection) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
                .await
                .unwrap();
        tokio::spawn(connection);
        let request = hyper::Request::get(uri)
            .header("mint-capability", cap)
            .body(Empty::<bytes::Bytes>::new())
            .unwrap();
        let response = sender.send_request(request).await.unwrap();
        let status = response.status().as_u16();
        let mut body = response.into_body();
        let (mut chunks, mut bytes) = (Vec::new(), Vec::new());
        let mut released = false;
        let mut before_release = 0;
        loop {
            let wait = if released {
                Duration::from_secs(20)
            } else if bytes.len() < expected {
                Duration::from_millis(1500)
            } else {
                Duration::from_millis(60)
            };
            match tokio::time::timeout(wait, body.frame()).await {
                Ok(Some(Ok(frame))) => {
                    if let Ok(data) = frame.into_data() {
                        chunks.push(data.len());
                        bytes.extend_from_slice(&data);
                    }
                }
                Ok(_) => break,
                Err(_) if !released => {
                    before_release = bytes.len();
                    released = true;
                    upstream.release.send(()).unwrap();
                }
                Err(_) => break,
            }
        }
        Observed {
            status,
            before_release,
            chunks,
            body: bytes,
        }
    })
}

#[test]
fn issue_22_http2_frames_tell_the_agent_nothing_about_its_guess() {
    let (_home, broker, cap, upstream, _dir) = start();
    let calibration = probe_h2(&broker, &cap, &upstream, b"calibrate", FILLER);
    assert_eq!(calibration.status, 200);
    let hold = FILLER + 9 - calibration.before_release;
    assert!(hold > 0, "nothing held back");
    let expected = |len: usize| FILLER + len - hold;
    let mut seen = calibration.body.clone();
    for (name, form) in forms(CANARY.as_bytes()) {
        for (i, len) in [1, form.len() / 2, form.len() - 1].into_iter().enumerate() {
            let guess = &form[..len];
            let decoy = random_like(guess, 11 + i as u64);
            let hit = probe_h2(&broker, &cap, &upstream, guess, expected(len));
            let miss = probe_h2(&broker, &cap, &upstream, &decoy, expected(len));
            assert_eq!(hit.status, 200, "{name}");
            assert_eq!(
                (hit.before_release, &hit.chunks),
                (miss.before_release, &miss.chunks),
                "{name}: a prefix of {len} bytes is observable over HTTP/2"
            );
            assert_eq!(hit.before_release, expected(len), "{name}: {len}");
            assert!(hit.body.ends_with(SECOND), "{name}");
            seen.extend_from_slice(&hit.body);
            seen.extend_from_slice(&miss.body);
        }
    }
    assert_clean(&broker, &seen);
}
