//! Accepting and serving connections: the TLS handshake, HTTP/1.1 or HTTP/2 by ALPN, and the
//! per-connection control a route uses to reset its connection. Every task started here belongs
//! to the accept loop's task or to a connection, so stopping the accept loop stops them all.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::server::conn::{http1, http2};
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use rustls::ServerConfig;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, watch};
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;

use super::routes::{self, ServerState};

/// How long a client may take to finish the TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Lets a route end its connection abruptly.
#[derive(Debug, Default)]
pub(super) struct ConnControl {
    reset_requested: AtomicBool,
    notify: Notify,
}

impl ConnControl {
    /// Tears the connection down with a TCP RST (`SO_LINGER` 0) and without a TLS close_notify.
    pub(super) fn reset(&self) {
        self.reset_requested.store(true, Ordering::SeqCst);
        // notify_one keeps a permit when nobody waits yet, so the request is never lost.
        self.notify.notify_one();
    }

    fn reset_requested(&self) -> bool {
        self.reset_requested.load(Ordering::SeqCst)
    }
}

/// Accepts connections until the task running it is aborted; the connection tasks live in a
/// `JoinSet` so that abort also ends them.
pub(super) async fn accept_loop(
    listener: TcpListener,
    tls: Option<Arc<ServerConfig>>,
    state: Arc<ServerState>,
) {
    let acceptor = tls.map(TlsAcceptor::from);
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => {
                    connections.spawn(serve(stream, acceptor.clone(), Arc::clone(&state)));
                }
                // Out of file descriptors or similar: back off instead of spinning.
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

async fn serve(stream: TcpStream, acceptor: Option<TlsAcceptor>, state: Arc<ServerState>) {
    // Small writes (the 1–7 byte chunks, SSE events) must leave at once, not wait for an ACK.
    let _ = stream.set_nodelay(true);
    let control = Arc::new(ConnControl::default());
    let io = ResettableStream {
        stream,
        control: Arc::clone(&control),
    };
    let (alive, alive_rx) = watch::channel(());
    let executor = ConnExecutor { alive: alive_rx };
    let service_control = Arc::clone(&control);
    let service = service_fn(move |request| {
        let state = Arc::clone(&state);
        let control = Arc::clone(&service_control);
        async move { Ok::<_, Infallible>(routes::respond(request, &state, control).await) }
    });
    match acceptor {
        Some(acceptor) => {
            let Ok(Ok(tls)) = tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(io)).await
            else {
                return;
            };
            let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2".as_slice());
            let io = TokioIo::new(tls);
            if h2 {
                let connection = http2::Builder::new(executor)
                    .timer(TokioTimer::new())
                    .serve_connection(io, service);
                drive(connection, &control).await;
            } else {
                let connection = http1::Builder::new()
                    .timer(TokioTimer::new())
                    .serve_connection(io, service);
                drive(connection, &control).await;
            }
        }
        None => {
            let mut builder = auto::Builder::new(executor);
            builder.http1().timer(TokioTimer::new());
            builder.http2().timer(TokioTimer::new());
            let connection = builder.serve_connection(TokioIo::new(io), service);
            drive(connection, &control).await;
        }
    }
    // Ends the connection's HTTP/2 stream tasks (see ConnExecutor).
    drop(alive);
}

/// Runs a connection until it ends or a route asks for a reset; dropping it then drops the
/// socket, which `ResettableStream` turns into an RST.
async fn drive(connection: impl Future, control: &ConnControl) {
    tokio::select! {
        _ = connection => {}
        () = control.notify.notified() => {}
    }
}

/// Spawns hyper's HTTP/2 stream tasks so that they end with their connection: without this a
/// stalled handler would outlive the server by as long as it stalls.
#[derive(Debug, Clone)]
struct ConnExecutor {
    alive: watch::Receiver<()>,
}

impl<F> hyper::rt::Executor<F> for ConnExecutor
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    fn execute(&self, future: F) {
        let mut alive = self.alive.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = future => {}
                // Nothing is ever sent: this completes when the connection drops the sender.
                _ = alive.changed() => {}
            }
        });
    }
}

/// A TCP stream that closes with an RST instead of a FIN when its connection asked for a reset.
#[derive(Debug)]
struct ResettableStream {
    stream: TcpStream,
    control: Arc<ConnControl>,
}

impl Drop for ResettableStream {
    fn drop(&mut self) {
        if self.control.reset_requested() {
            // A zero linger makes close() send RST and discard unsent data; it never blocks.
            let _ = self.stream.set_zero_linger();
        }
    }
}

impl AsyncRead for ResettableStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for ResettableStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}
