//! The load generator of the comparison benchmark's interception scenarios (`bench/run.sh`,
//! docs/performance.md): what wrk cannot do, HTTPS through an HTTP proxy's `CONNECT`.
//!
//! Usage:
//!
//! ```text
//! bench_connect --target HOST:PORT --ca FILE [--proxy ADDR:PORT] [--proxy-auth VALUE]
//!               [-H 'Name: value']... [--path /1k] [--connections N] [--duration SECONDS]
//!               [--new-connection-per-request]
//! ```
//!
//! Each of `--connections` connections (default 16) opens a TCP connection to `--proxy` and sends
//! `CONNECT HOST:PORT` (with `Proxy-Authorization: VALUE` when given), or, without `--proxy`,
//! connects to HOST:PORT itself (HOST must then be an IP address: this is the plain-TLS
//! baseline). It then does a TLS handshake trusting only the certificates of `--ca` (server name
//! HOST, ALPN `http/1.1`, session resumption off, so every handshake is a full one) and sends
//! `GET PATH` with the `-H` headers over HTTP/1.1, again and again on the same connection, or once
//! per connection with `--new-connection-per-request` (the cost of a new connection: TCP,
//! `CONNECT`, handshake and one request). Latency is measured per request (per connection in the
//! second mode: from the TCP connect to the end of the answer).
//!
//! At the end it prints one line in the format of `bench/report.lua` (wrk's), so the benchmark
//! reads both alike: `BENCH requests=… duration_us=… connect=… read=… write=… status=… timeout=…
//! p50=… p90=… p99=… p999=… max=… mean=…`, latencies in microseconds. An answer that is not 200
//! counts under `status`, a failed `CONNECT` or handshake under `connect`. One thread (a
//! current-thread runtime) that the benchmark pins to the load core. Not part of Mint; it never
//! leaves loopback.

use std::io::Write as _;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use bytes::Bytes;
use http_body_util::{BodyExt as _, Empty};
use hyper::client::conn::http1;
use hyper::{Request, StatusCode};
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, RootCertStore};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

/// What every connection shares.
struct Plan {
    proxy: Option<SocketAddr>,
    proxy_auth: Option<String>,
    /// `HOST:PORT`, as sent in `CONNECT` and `Host`.
    target: String,
    /// The target's address, without a proxy.
    direct: Option<SocketAddr>,
    server_name: ServerName<'static>,
    tls: TlsConnector,
    headers: Vec<(String, String)>,
    path: String,
    new_connection_per_request: bool,
    deadline: Instant,
}

/// What one connection counted.
#[derive(Default)]
struct Tally {
    latencies_us: Vec<u32>,
    connect_errors: u64,
    read_errors: u64,
    status_errors: u64,
}

fn main() -> anyhow::Result<()> {
    let mut target = None;
    let mut ca = None;
    let mut proxy = None;
    let mut proxy_auth = None;
    let mut headers = Vec::new();
    let mut path = "/1k".to_owned();
    let mut connections = 16usize;
    let mut seconds = 3u64;
    let mut new_connection_per_request = false;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().with_context(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "--target" => target = Some(value()?),
            "--ca" => ca = Some(PathBuf::from(value()?)),
            "--proxy" => proxy = Some(value()?.parse::<SocketAddr>().context("--proxy")?),
            "--proxy-auth" => proxy_auth = Some(value()?),
            "-H" => {
                let header = value()?;
                let (name, val) = header
                    .split_once(':')
                    .with_context(|| format!("-H `{header}` is not `Name: value`"))?;
                headers.push((name.trim().to_owned(), val.trim().to_owned()));
            }
            "--path" => path = value()?,
            "--connections" => connections = value()?.parse().context("--connections")?,
            "--duration" => seconds = value()?.parse().context("--duration")?,
            "--new-connection-per-request" => new_connection_per_request = true,
            other => bail!("unknown argument `{other}`"),
        }
    }
    let target = target.context("--target HOST:PORT is required")?;
    let ca = ca.context("--ca FILE is required")?;
    if connections == 0 {
        bail!("--connections must be at least 1");
    }

    let (host, _) = target
        .rsplit_once(':')
        .with_context(|| format!("--target `{target}` is not HOST:PORT"))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let direct = match proxy {
        Some(_) => None,
        None => Some(
            target
                .parse::<SocketAddr>()
                .context("without --proxy, --target must be IP:PORT")?,
        ),
    };
    let server_name = match host.parse::<IpAddr>() {
        Ok(ip) => ServerName::IpAddress(ip.into()),
        Err(_) => ServerName::try_from(host.to_owned()).context("the target's host")?,
    };

    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(&ca).context("reading --ca")? {
        roots.add(cert.context("a certificate in --ca")?)?;
    }
    let mut config = ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    config.resumption = rustls::client::Resumption::disabled();

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let started = Instant::now();
    let plan = Arc::new(Plan {
        proxy,
        proxy_auth,
        target,
        direct,
        server_name,
        tls: TlsConnector::from(Arc::new(config)),
        headers,
        path,
        new_connection_per_request,
        deadline: started + Duration::from_secs(seconds),
    });
    let tallies = runtime.block_on(async {
        let tasks: Vec<_> = (0..connections)
            .map(|_| tokio::spawn(run(plan.clone())))
            .collect();
        let mut tallies = Vec::with_capacity(tasks.len());
        for task in tasks {
            tallies.push(task.await?);
        }
        anyhow::Ok(tallies)
    })?;
    let elapsed = started.elapsed();

    let mut all = Tally::default();
    for tally in tallies {
        all.latencies_us.extend(tally.latencies_us);
        all.connect_errors += tally.connect_errors;
        all.read_errors += tally.read_errors;
        all.status_errors += tally.status_errors;
    }
    all.latencies_us.sort_unstable();
    let pick = |p: f64| -> u32 {
        if all.latencies_us.is_empty() {
            return 0;
        }
        let rank = ((p / 100.0) * all.latencies_us.len() as f64).ceil() as usize;
        all.latencies_us[rank.clamp(1, all.latencies_us.len()) - 1]
    };
    let mean = if all.latencies_us.is_empty() {
        0.0
    } else {
        all.latencies_us.iter().map(|&l| f64::from(l)).sum::<f64>() / all.latencies_us.len() as f64
    };
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "BENCH requests={} duration_us={} connect={} read={} write=0 status={} timeout=0 \
         p50={} p90={} p99={} p999={} max={} mean={:.1}",
        all.latencies_us.len(),
        elapsed.as_micros(),
        all.connect_errors,
        all.read_errors,
        all.status_errors,
        pick(50.0),
        pick(90.0),
        pick(99.0),
        pick(99.9),
        all.latencies_us.last().copied().unwrap_or(0),
        mean,
    )?;
    Ok(())
}

/// One connection's loop until the deadline.
async fn run(plan: Arc<Plan>) -> Tally {
    let mut tally = Tally::default();
    while Instant::now() < plan.deadline {
        let opened = Instant::now();
        let mut sender = match open(&plan).await {
            Ok(sender) => sender,
            Err(_) => {
                tally.connect_errors += 1;
                // A refused connection must not spin: the next attempt after a short pause.
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        loop {
            let sent = Instant::now();
            match request(&plan, &mut sender).await {
                Ok(StatusCode::OK) => {
                    let since = if plan.new_connection_per_request {
                        opened
                    } else {
                        sent
                    };
                    let us = u32::try_from(since.elapsed().as_micros()).unwrap_or(u32::MAX);
                    tally.latencies_us.push(us);
                }
                Ok(_) => tally.status_errors += 1,
                Err(_) => {
                    tally.read_errors += 1;
                    break;
                }
            }
            if plan.new_connection_per_request || Instant::now() >= plan.deadline {
                break;
            }
        }
    }
    tally
}

type Sender = http1::SendRequest<Empty<Bytes>>;

/// A new connection, through `CONNECT` when there is a proxy, with TLS and HTTP/1.1 on top.
async fn open(plan: &Plan) -> anyhow::Result<Sender> {
    let mut tcp = match (plan.proxy, plan.direct) {
        (Some(proxy), _) => TcpStream::connect(proxy).await?,
        (None, Some(direct)) => TcpStream::connect(direct).await?,
        (None, None) => bail!("neither a proxy nor a target address"),
    };
    tcp.set_nodelay(true)?;
    if plan.proxy.is_some() {
        let mut head = format!(
            "CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n",
            target = plan.target
        );
        if let Some(auth) = &plan.proxy_auth {
            head.push_str(&format!("Proxy-Authorization: {auth}\r\n"));
        }
        head.push_str("\r\n");
        tcp.write_all(head.as_bytes()).await?;
        // The answer's head, byte by byte: nothing after it may be consumed (it is TLS).
        let mut answer = Vec::with_capacity(128);
        while !answer.ends_with(b"\r\n\r\n") {
            if answer.len() > 8192 {
                bail!("the CONNECT answer's head is too long");
            }
            let byte = tcp.read_u8().await?;
            answer.push(byte);
        }
        if !(answer.starts_with(b"HTTP/1.1 200") || answer.starts_with(b"HTTP/1.0 200")) {
            bail!(
                "CONNECT answered {}",
                String::from_utf8_lossy(&answer)
                    .lines()
                    .next()
                    .unwrap_or("")
            );
        }
    }
    let tls = plan.tls.connect(plan.server_name.clone(), tcp).await?;
    let (sender, connection) = http1::handshake(TokioIo::new(tls)).await?;
    tokio::spawn(connection);
    Ok(sender)
}

/// One `GET`, its answer read to the end.
async fn request(plan: &Plan, sender: &mut Sender) -> anyhow::Result<StatusCode> {
    sender.ready().await?;
    let mut builder = Request::get(plan.path.as_str()).header("host", plan.target.as_str());
    for (name, value) in &plan.headers {
        builder = builder.header(name.as_str(), value.as_str());
    }
    let response = sender.send_request(builder.body(Empty::new())?).await?;
    let status = response.status();
    response.into_body().collect().await?;
    Ok(status)
}
