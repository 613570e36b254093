//! The upstream of the comparison benchmark (`bench/run.sh`, docs/performance.md): one small,
//! cheap HTTP/1.1 server that every contender (direct, nginx, mitmproxy, Mint) forwards to, on
//! plain HTTP and on TLS, so that they all pay the same upstream.
//!
//! Usage: `bench_upstream --ca-out FILE [--require-auth VALUE] [--max-seconds N]`. It generates a
//! throwaway CA (the echo upstream's `TestCa`) and a leaf for `localhost`, `127.0.0.1` and `::1`, writes the
//! CA certificate to FILE, listens on two free loopback ports, prints `http PORT` and
//! `https PORT` on stdout, then serves until killed or for at most `--max-seconds` (default 3600),
//! so a benchmark that dies leaves nothing running for long.
//!
//! Routes: `GET /1k` and `GET /64k` answer 200 with 1,024 or 65,536 bytes (`text/plain`, from one
//! shared buffer: no allocation per answer besides hyper's own). With `--require-auth`, a request
//! whose `Authorization` is not exactly VALUE gets 401, so a contender that failed to add or
//! substitute the secret shows up as non-2xx answers in wrk's summary. Anything else is 404.
//!
//! Two more routes for the soak benchmark (`bench/soak.sh`), which needs answers that carry the
//! secret back, so that the proxy's scrubber works on every one of them:
//!
//! - `POST /echo`: 200 with the request body as sent (`application/json`; bodies over 64 KiB get
//!   413). The soak sends the secret's placeholder at a body site, so the echo holds the secret.
//! - `GET /sse?n=N&interval_ms=M`: `text/event-stream`, N events M ms apart (the first at once),
//!   each `data: {"i":K,"authorization":"VALUE"}` with the request's `Authorization` value, so
//!   every event holds the secret, each flushed on its own; then the stream ends.
//!
//! TLS offers ALPN `http/1.1` only, so every contender speaks the same protocol upstream.
//!
//! One thread (a current-thread runtime): the benchmark pins it to one core with `taskset`, and
//! its CPU time per request is the yardstick the benchmark divides the proxies' CPU by. Not part
//! of Mint; it never leaves loopback.

use std::convert::Infallible;
use std::io::Write as _;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use anyhow::{Context as _, bail};
use bytes::Bytes;
use http_body_util::{BodyExt as _, Either, Full, Limited};
use hyper::body::{Frame, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode, header};
use hyper_util::rt::TokioIo;
use mint_broker::demo::echo_upstream::TestCa;
use rustls::ServerConfig;
use tokio::net::{TcpListener, TcpStream};
use tokio::time::MissedTickBehavior;
use tokio_rustls::TlsAcceptor;

/// What every connection shares.
struct Answers {
    small: Bytes,
    large: Bytes,
    require_auth: Option<Bytes>,
}

fn main() -> anyhow::Result<()> {
    let mut ca_out: Option<PathBuf> = None;
    let mut require_auth: Option<String> = None;
    let mut max_seconds: u64 = 3600;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--ca-out" => ca_out = args.next().map(PathBuf::from),
            "--require-auth" => require_auth = args.next(),
            "--max-seconds" => {
                max_seconds = args
                    .next()
                    .context("--max-seconds needs a value")?
                    .parse()
                    .context("--max-seconds")?;
            }
            other => bail!(
                "unknown argument `{other}`; usage: bench_upstream --ca-out FILE [--require-auth VALUE] [--max-seconds N]"
            ),
        }
    }
    let ca_out = ca_out.context("--ca-out FILE is required")?;
    let (ca_pem, tls) = tls_config()?;
    std::fs::write(&ca_out, ca_pem)
        .with_context(|| format!("cannot write {}", ca_out.display()))?;
    let answers = Arc::new(Answers {
        small: Bytes::from(pattern(1024)),
        large: Bytes::from(pattern(64 * 1024)),
        require_auth: require_auth.map(Bytes::from),
    });
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let loopback = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
        let plain = TcpListener::bind(loopback).await?;
        let secure = TcpListener::bind(loopback).await?;
        let mut out = std::io::stdout().lock();
        writeln!(out, "http {}", plain.local_addr()?.port())?;
        writeln!(out, "https {}", secure.local_addr()?.port())?;
        out.flush()?;
        drop(out);
        let acceptor = TlsAcceptor::from(tls);
        tokio::spawn(accept(plain, None, Arc::clone(&answers)));
        tokio::spawn(accept(secure, Some(acceptor), answers));
        tokio::time::sleep(Duration::from_secs(max_seconds)).await;
        anyhow::Ok(())
    })
}

async fn accept(listener: TcpListener, tls: Option<TlsAcceptor>, answers: Arc<Answers>) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                tokio::spawn(serve(stream, tls.clone(), Arc::clone(&answers)));
            }
            // Out of file descriptors: back off instead of spinning.
            Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    }
}

async fn serve(stream: TcpStream, tls: Option<TlsAcceptor>, answers: Arc<Answers>) {
    let _ = stream.set_nodelay(true);
    let service = service_fn(move |request| {
        let answers = Arc::clone(&answers);
        async move { Ok::<_, Infallible>(respond(&answers, request).await) }
    });
    let builder = http1::Builder::new();
    let _ = match tls {
        None => {
            builder
                .serve_connection(TokioIo::new(stream), service)
                .await
        }
        Some(acceptor) => {
            let Ok(stream) = acceptor.accept(stream).await else {
                return;
            };
            builder
                .serve_connection(TokioIo::new(stream), service)
                .await
        }
    };
}

/// An answer: a whole body, or an event stream.
type Answer = Response<Either<Full<Bytes>, EventStream>>;

async fn respond(answers: &Answers, request: Request<Incoming>) -> Answer {
    if let Some(expected) = &answers.require_auth {
        let given = request.headers().get(header::AUTHORIZATION);
        if given.is_none_or(|value| value.as_bytes() != expected.as_ref()) {
            return status(StatusCode::UNAUTHORIZED);
        }
    }
    let body = match (request.method(), request.uri().path()) {
        (&Method::GET, "/1k") => answers.small.clone(),
        (&Method::GET, "/64k") => answers.large.clone(),
        (&Method::POST, "/echo") => {
            return match Limited::new(request.into_body(), MAX_ECHO).collect().await {
                Ok(body) => typed(body.to_bytes(), "application/json"),
                Err(_) => status(StatusCode::PAYLOAD_TOO_LARGE),
            };
        }
        (&Method::GET, "/sse") => return events(&request),
        _ => return status(StatusCode::NOT_FOUND),
    };
    typed(body, "text/plain")
}

/// `GET /sse?n=N&interval_ms=M`: N events M ms apart, each holding the `Authorization` value.
fn events<B>(request: &Request<B>) -> Answer {
    let mut count = 0u32;
    let mut interval_ms = 0u64;
    for pair in request.uri().query().unwrap_or("").split('&') {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        let parsed = match name {
            "n" => value.parse().map(|n| count = n).is_ok(),
            "interval_ms" => value.parse().map(|m| interval_ms = m).is_ok(),
            _ => true,
        };
        if !parsed {
            return status(StatusCode::BAD_REQUEST);
        }
    }
    let authorization = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .unwrap_or("");
    // The value goes into a JSON string: keep it printable ASCII without quotes or backslashes.
    if !authorization
        .bytes()
        .all(|b| (b.is_ascii_graphic() && b != b'"' && b != b'\\') || b == b' ')
    {
        return status(StatusCode::BAD_REQUEST);
    }
    let mut ticks = tokio::time::interval(Duration::from_millis(interval_ms.max(1)));
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let stream = EventStream {
        next: 0,
        count,
        authorization: authorization.to_owned(),
        ticks,
    };
    let mut response = Response::new(Either::Right(stream));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/event-stream"),
    );
    response.headers_mut().insert(
        header::CACHE_CONTROL,
        header::HeaderValue::from_static("no-cache"),
    );
    response
}

/// The body of `GET /sse`: one event per tick of `ticks`, `count` in all.
struct EventStream {
    next: u32,
    count: u32,
    authorization: String,
    ticks: tokio::time::Interval,
}

impl hyper::body::Body for EventStream {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = self.get_mut();
        if this.next >= this.count {
            return Poll::Ready(None);
        }
        if this.ticks.poll_tick(cx).is_pending() {
            return Poll::Pending;
        }
        let event = format!(
            "data: {{\"i\":{},\"authorization\":\"{}\"}}\n\n",
            this.next, this.authorization
        );
        this.next += 1;
        Poll::Ready(Some(Ok(Frame::data(Bytes::from(event)))))
    }

    fn is_end_stream(&self) -> bool {
        self.next >= self.count
    }
}

fn typed(body: Bytes, content_type: &'static str) -> Answer {
    let mut response = Response::new(Either::Left(Full::new(body)));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(content_type),
    );
    response
}

fn status(code: StatusCode) -> Answer {
    let mut response = Response::new(Either::Left(Full::new(Bytes::new())));
    *response.status_mut() = code;
    response
}

/// `len` bytes of printable text (lines of the alphabet), with no secret-like content.
fn pattern(len: usize) -> Vec<u8> {
    let line = b"abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ-_\n";
    line.iter().copied().cycle().take(len).collect()
}

/// A CA and a leaf it signs; returns the CA's PEM and the server configuration.
fn tls_config() -> anyhow::Result<(String, Arc<ServerConfig>)> {
    // The echo upstream's CA and leaf (localhost, 127.0.0.1, ::1); HTTP/1.1 only, as every
    // contender speaks to the upstream.
    let ca = TestCa::generate()?;
    let shared = ca.server_config(&[])?;
    let mut config = ServerConfig::clone(&shared);
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok((ca.cert_pem().to_owned(), Arc::new(config)))
}

/// The largest body `POST /echo` sends back.
const MAX_ECHO: usize = 64 * 1024;
