//! One agent connection's byte stream, watched on its way into hyper.
//!
//! [`ConnectionIo`] sits between the socket and hyper's HTTP/1.1 parser and does three things
//! hyper does not:
//!
//! - **Framing.** It follows every request head of the connection in the raw bytes
//!   ([`RequestStream`]: whatever the line endings, however the bytes were split between reads,
//!   pipelined or after keep-alive) and queues each head's framing verdict in
//!   [`ConnectionHeads`], for the request hyper parses from it; hyper settles Content-Length with
//!   Transfer-Encoding and repeated Content-Length headers silently, and the proxy refuses them.
//! - **Head deadline.** The first request head must be complete within the header read timeout
//!   of the connection's start, and every later head within it of its first byte, or of the end
//!   of the answer before it if that came later: the deadline never runs while a request is
//!   being handled or its answer is being written, so a long answer (an SSE stream) is never cut
//!   by it, whatever bytes the agent sends meanwhile. A client that started a head and did not
//!   finish it (slowloris) gets a JSON 408 and an audit record, then the connection is shut down
//!   (TLS `close_notify` inside a tunnel, then TCP FIN): the 408 is written out before hyper
//!   sees the end, bounded by the header read timeout again for a client that does not read, the
//!   same way on the listener and inside a tunnel. A connection that never sent a byte is closed
//!   silently. Either way hyper then reads end-of-file. A connection idle between
//!   keep-alive requests is closed by hyper's own header read timeout (set to twice this one).
//! - **hyper's own answers.** When hyper cannot parse a head (the first or any later one) it
//!   writes a bare `400`, `414` or `431`; that answer is replaced by Mint's JSON error with
//!   `Mint-Request-Id`, and audited. Only an answer written while none of Mint's answers is in
//!   progress (every answer the service started has ended and been flushed) is replaced, so an
//!   answer body that happens to look like a status line is never touched.
//! - **The interim `100 Continue`.** hyper writes a bare `HTTP/1.1 100 Continue` on its own when
//!   a request with `Expect: 100-continue` has its body read first, and offers no way to add a
//!   header. Written while the request it belongs to has no answer yet (and every earlier answer
//!   is out), it is replaced by the same interim answer with that request's `Mint-Request-Id`
//!   ([`RequestIdSlot`]), as every answer on the listener carries one.
//!
//! - **HTTP/2 streams reset by the library.** h2 answers an agent's request that breaks the
//!   protocol (a `content-length` that is not a number or disagrees with the DATA sent,
//!   `transfer-encoding` or another connection-specific header, a malformed head) with
//!   `RST_STREAM` (and a connection that breaks it with `GOAWAY`), often before hyper hands the
//!   request to Mint at all. [`H2Watch`] (`h2_watch.rs`) follows the frame headers both ways,
//!   and the connection audits each request so refused before any answer head: a `deny` and an
//!   `invalid` outcome with reason `malformed_http2` and no status, which is what the agent got.
//!   The pipeline records nothing for such a request (`proxy.rs`), so each has one pair.
//!
//! - **Switching protocols.** Once a WebSocket's `101` is written, the connection carries
//!   frames: nothing written is taken for hyper's answers any more.
//!
//! Before any of that, [`peer_has_closed`] lets the accept loop drop a connection whose agent has
//! already closed its end (one that waited in the listen backlog while its client gave up).
//!
//! It never sees a secret: the agent's requests carry placeholders, and answers are scrubbed
//! before hyper writes them.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use http::StatusCode;
use rustix::event::{PollFd, PollFlags, Timespec, poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::Sleep;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::framing::{ConnectionHeads, RequestStream};
use super::h2_watch::H2Watch;
use crate::proxy::{AppState, RequestIdSlot, audit_unread_refusal, error_body};

/// hyper's interim answer to `Expect: 100-continue`, byte for byte.
const CONTINUE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";

/// Whether the agent has already closed its end of `stream` (its FIN has arrived, or the
/// connection was reset), whether or not data it sent is still unread: `poll(2)` for
/// `POLLRDHUP` without waiting. A connection accepted from the listen backlog after its client
/// gave up (a timeout while it waited past `--max-connections`) is such a one: hyper would read
/// the request it had sent, and could decide and forward it before noticing the close, so the
/// agent's abandoned request would still be sent. A client that half-closes on purpose after
/// its request is not served either way: hyper, without half-close support, drops such a
/// request when it reads the end of the stream.
pub(super) fn peer_has_closed(stream: &TcpStream) -> bool {
    let mut fds = [PollFd::new(stream, PollFlags::RDHUP)];
    let now = Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    match poll(&mut fds, Some(&now)) {
        Ok(ready) if ready > 0 => fds.iter().any(|fd| {
            fd.revents()
                .intersects(PollFlags::RDHUP | PollFlags::HUP | PollFlags::ERR)
        }),
        _ => false,
    }
}

/// A connection's byte stream (see the module documentation): the agent's TCP connection, or the
/// TLS stream inside an intercepted `CONNECT` tunnel. Its `Debug` never shows the head being
/// read: it holds the agent's capability token.
pub(crate) struct ConnectionIo<S = TcpStream> {
    inner: S,
    state: AppState,
    stream: RequestStream,
    heads: Arc<ConnectionHeads>,
    /// The id of the request in progress, for the interim `100 Continue`.
    id_slot: RequestIdSlot,
    header_timeout: Duration,
    /// When the pending head must be complete.
    deadline: Option<Pin<Box<Sleep>>>,
    /// How many heads were read.
    heads_read: u64,
    /// How many answers had ended when hyper last flushed everything it had written: an answer
    /// is over once its body is dropped and its last bytes are out.
    answers_out: u64,
    /// Mint's answer replacing hyper's, while it is written.
    replacement: Option<Replacement>,
    /// The connection was ended here (deadline): reads give end-of-file, writes are dropped.
    ended: bool,
    /// The 408 being written before the connection is shut down.
    closing: Option<Closing>,
    /// Set once the head deadline has ended the connection (for a tunnel's record).
    expired: Arc<AtomicBool>,
    /// The frames of an HTTP/2 connection, followed for the library's refusals.
    h2: H2Watch,
    /// How many bytes were read from the agent.
    bytes_read: u64,
    /// The connection switched protocols (a WebSocket's `101` went out): what follows are
    /// frames, passed through untouched both ways.
    switched: bool,
}

impl<S> std::fmt::Debug for ConnectionIo<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectionIo")
            .field("stream", &self.stream)
            .field("heads_read", &self.heads_read)
            .field("answers_out", &self.answers_out)
            .field("ended", &self.ended)
            .finish_non_exhaustive()
    }
}

/// The last answer of a connection ended by the head deadline, written and flushed, then the
/// stream shut down, before hyper reads end-of-file; given up at `deadline`.
#[derive(Debug)]
struct Closing {
    bytes: Vec<u8>,
    written: usize,
    flushed: bool,
    deadline: Pin<Box<Sleep>>,
}

/// Mint's answer written in place of hyper's.
#[derive(Debug)]
struct Replacement {
    bytes: Vec<u8>,
    written: usize,
    /// How many bytes of hyper's answer to report as written once ours is out.
    claimed: usize,
    done: bool,
    /// An interim answer: once it is out, the connection goes on (a final error answer ends it,
    /// and nothing hyper writes after it is replaced).
    interim: bool,
}

// === impl ConnectionIo ===

impl<S: AsyncRead + AsyncWrite + Unpin> ConnectionIo<S> {
    /// Watches `stream` (the caller sets `TCP_NODELAY` on a socket).
    pub(crate) fn new(stream: S, state: &AppState) -> ConnectionIo<S> {
        let header_timeout = state.limits().header_read_timeout;
        ConnectionIo {
            inner: stream,
            state: state.clone(),
            stream: RequestStream::new(),
            heads: Arc::default(),
            id_slot: RequestIdSlot::default(),
            header_timeout,
            deadline: Some(Box::pin(tokio::time::sleep(header_timeout))),
            heads_read: 0,
            answers_out: 0,
            replacement: None,
            ended: false,
            closing: None,
            expired: Arc::default(),
            h2: H2Watch::default(),
            bytes_read: 0,
            switched: false,
        }
    }

    /// The framing verdicts of this connection's heads, for its requests.
    pub(crate) fn heads(&self) -> Arc<ConnectionHeads> {
        Arc::clone(&self.heads)
    }

    /// Set once the head deadline has ended the connection (a 408, or an idle connection
    /// closed).
    pub(crate) fn expired(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.expired)
    }

    /// Where this connection's requests leave their ids, for the interim `100 Continue`.
    pub(crate) fn id_slot(&self) -> RequestIdSlot {
        self.id_slot.clone()
    }

    /// Follows freshly read bytes: queues the verdict on each head they complete.
    fn sniff(&mut self, bytes: &[u8]) {
        let (heads, mut read, mut overflow) = (&self.heads, 0, false);
        self.stream.feed(bytes, &mut |verdict| {
            read += 1;
            overflow |= !heads.push(verdict);
        });
        self.heads_read += read;
        if self.stream.is_h2() {
            self.h2.read(bytes, self.bytes_read);
        }
        self.bytes_read = self.bytes_read.saturating_add(bytes.len() as u64);
        if overflow {
            // The requests past the queue's bound find no verdict and are refused.
            self.stream.stop();
        }
        if read > 0 || self.stream.is_h2() || self.stream.is_untracked() {
            // The head is complete (or the preface is; or hyper refuses the head): its deadline
            // is over. A head started after it gets its own once no request is in progress.
            self.deadline = None;
        }
    }

    /// Whether a request head has been read whose answer is not over yet.
    fn in_request(&self) -> bool {
        self.heads_read > self.answers_out || self.heads.answering(self.answers_out)
    }

    /// Starts the deadline of a head that has started while no request is in progress.
    fn arm_deadline(&mut self) {
        if self.deadline.is_none() && self.stream.head_started() && !self.in_request() {
            self.deadline = Some(Box::pin(tokio::time::sleep(self.header_timeout)));
        }
    }

    /// The head deadline passed: answer a started head with a JSON 408, then end the connection.
    fn expire(&mut self) {
        let started = self.stream.head_started();
        self.ended = true;
        self.expired.store(true, Ordering::Release);
        self.stream.stop();
        self.deadline = None;
        if !started {
            tracing::debug!("Idle connection closed");
            return;
        }
        let id = audit_unread_refusal(
            &self.state,
            "header_read_timeout",
            Some(StatusCode::REQUEST_TIMEOUT),
        );
        tracing::info!(request.id = %id, "Request head not completed in time");
        let answer = json_answer(
            408,
            "the request head was not received in time",
            id.as_str(),
        );
        // Written by `poll_closing` with the reader's context: a TLS stream (inside a tunnel)
        // takes it into its buffer, so it must be flushed, and `close_notify` sent, before the
        // connection ends; hyper, which reads an unfinished head, never shuts the stream down.
        self.closing = Some(Closing {
            bytes: answer,
            written: 0,
            flushed: false,
            deadline: Box::pin(tokio::time::sleep(self.header_timeout)),
        });
    }

    /// Writes the 408 of an expired head, flushes it and shuts the stream down; ready (for an
    /// end-of-file to hyper) when done, on an error, or when the client has not taken it in time.
    fn poll_closing(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let Some(closing) = self.closing.as_mut() else {
            return Poll::Ready(());
        };
        let done = loop {
            if closing.deadline.as_mut().poll(cx).is_ready() {
                tracing::debug!("The 408 was not taken in time; connection dropped");
                break true;
            }
            if let Some(rest) = closing
                .bytes
                .get(closing.written..)
                .filter(|r| !r.is_empty())
            {
                match Pin::new(&mut self.inner).poll_write(cx, rest) {
                    Poll::Ready(Ok(0) | Err(_)) => break true,
                    Poll::Ready(Ok(n)) => closing.written += n,
                    Poll::Pending => break false,
                }
            } else if !closing.flushed {
                match Pin::new(&mut self.inner).poll_flush(cx) {
                    Poll::Ready(Ok(())) => closing.flushed = true,
                    Poll::Ready(Err(_)) => break true,
                    Poll::Pending => break false,
                }
            } else {
                match Pin::new(&mut self.inner).poll_shutdown(cx) {
                    Poll::Ready(_) => break true,
                    Poll::Pending => break false,
                }
            }
        };
        if done {
            self.closing = None;
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }

    /// Starts replacing hyper's answer when `first` is one: a 4xx head without
    /// `mint-request-id`, written while none of Mint's answers is in progress (hyper writes its
    /// own only for a head that never reached the service).
    fn intercept(&mut self, first: &[u8], total: usize) {
        if self.replacement.is_some() || self.stream.is_h2() {
            return;
        }
        if first.starts_with(CONTINUE) && self.heads.awaiting_answer(self.answers_out) {
            if let Some(id) = self.id_slot.current() {
                let bytes =
                    format!("HTTP/1.1 100 Continue\r\nmint-request-id: {id}\r\n\r\n").into_bytes();
                self.replacement = Some(Replacement {
                    bytes,
                    written: 0,
                    claimed: CONTINUE.len(),
                    done: false,
                    interim: true,
                });
            }
            return;
        }
        if self.heads.answering(self.answers_out) {
            return;
        }
        let Some(status) = hyper_error_status(first) else {
            return;
        };
        let (reason, message) = match status {
            431 => ("header_too_large", "the request head is too large"),
            414 => ("uri_too_long", "the request target is too long"),
            _ => (
                "malformed_http",
                "the request is not valid HTTP/1.1 (request line, header syntax or framing)",
            ),
        };
        let id = audit_unread_refusal(
            &self.state,
            reason,
            Some(StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST)),
        );
        tracing::info!(request.id = %id, status, reason, "Request that cannot be parsed refused");
        self.replacement = Some(Replacement {
            bytes: json_answer(status, message, id.as_str()),
            written: 0,
            claimed: total,
            done: false,
            interim: false,
        });
    }

    /// Writes the replacement; `None` when none is in progress.
    fn poll_replacement(&mut self, cx: &mut Context<'_>) -> Option<Poll<io::Result<usize>>> {
        let replacement = self.replacement.as_mut().filter(|r| !r.done)?;
        while replacement.written < replacement.bytes.len() {
            let rest = replacement
                .bytes
                .get(replacement.written..)
                .unwrap_or_default();
            match Pin::new(&mut self.inner).poll_write(cx, rest) {
                Poll::Ready(Ok(0)) => return Some(Poll::Ready(Ok(0))),
                Poll::Ready(Ok(n)) => replacement.written += n,
                Poll::Ready(Err(error)) => return Some(Poll::Ready(Err(error))),
                Poll::Pending => return Some(Poll::Pending),
            }
        }
        replacement.done = true;
        let claimed = replacement.claimed;
        if replacement.interim {
            self.replacement = None;
        }
        Some(Poll::Ready(Ok(claimed)))
    }

    /// Follows the first `n` bytes of `bufs`, just written, on an HTTP/2 connection: audits each
    /// request the library refused for a protocol error before any answer head ([`H2Watch`]).
    fn after_write(&mut self, bufs: &[io::IoSlice<'_>], mut n: usize) {
        if !self.stream.is_h2() {
            return;
        }
        let state = &self.state;
        let mut refused = || {
            let id = audit_unread_refusal(state, "malformed_http2", None);
            tracing::info!(request.id = %id, "HTTP/2 request refused by the library for a protocol error");
        };
        for buf in bufs {
            if n == 0 {
                break;
            }
            let part = buf.get(..n.min(buf.len())).unwrap_or_default();
            n -= part.len();
            self.h2.written(part, &mut refused);
        }
    }

    /// What a write of `first` (of `total` bytes) does before reaching the socket: `Some` when
    /// it is answered here.
    fn before_write(
        &mut self,
        cx: &mut Context<'_>,
        first: &[u8],
        total: usize,
    ) -> Option<Poll<io::Result<usize>>> {
        if self.ended {
            return Some(Poll::Ready(Ok(total)));
        }
        if self.switched {
            return None;
        }
        // The `101` of a WebSocket's opening handshake (the last head followed): from here on
        // the bytes written are frames, which must never be taken for hyper's own answers.
        if self.stream.is_untracked() && !self.stream.is_h2() && first.starts_with(b"HTTP/1.1 101 ")
        {
            self.switched = true;
            return None;
        }
        self.intercept(first, total);
        self.poll_replacement(cx)
    }
}

/// A complete HTTP/1.1 answer with Mint's JSON error body; the connection closes after it.
fn json_answer(status: u16, message: &str, request_id: &str) -> Vec<u8> {
    let body = error_body("invalid_request", message, &[], request_id).to_string();
    let reason = StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
        .unwrap_or("Bad Request");
    format!(
        "HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nmint-request-id: {request_id}\r\nmint-outcome: invalid\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// The status of hyper's automatic error answer, when `bytes` start with one.
pub(crate) fn hyper_error_status(bytes: &[u8]) -> Option<u16> {
    let rest = bytes
        .strip_prefix(b"HTTP/1.1 ")
        .or_else(|| bytes.strip_prefix(b"HTTP/1.0 "))?;
    let code = std::str::from_utf8(rest.get(..3)?)
        .ok()?
        .parse::<u16>()
        .ok()?;
    if !(400..500).contains(&code) {
        return None;
    }
    let end = memchr::memmem::find(bytes, b"\r\n\r\n").unwrap_or(bytes.len());
    let head = bytes.get(..end)?.to_ascii_lowercase();
    (memchr::memmem::find(&head, b"\r\nmint-request-id:").is_none()).then_some(code)
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for ConnectionIo<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.ended {
            // End of file, once the 408 of an expired head (if any) is out.
            return this.poll_closing(cx).map(Ok);
        }
        let before = buf.filled().len();
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                this.sniff(buf.filled().get(before..).unwrap_or_default());
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(error)) => Poll::Ready(Err(error)),
            Poll::Pending => {
                this.arm_deadline();
                let expired = !this.in_request()
                    && this
                        .deadline
                        .as_mut()
                        .is_some_and(|deadline| deadline.as_mut().poll(cx).is_ready());
                if expired {
                    this.expire();
                    // End of file once the 408 is out: hyper stops reading and closes the
                    // connection.
                    return this.poll_closing(cx).map(Ok);
                }
                Poll::Pending
            }
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for ConnectionIo<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if let Some(poll) = this.before_write(cx, buf, buf.len()) {
            return poll;
        }
        let written = Pin::new(&mut this.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = written {
            this.after_write(&[io::IoSlice::new(buf)], n);
        }
        written
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        // hyper flushes its socket once everything it buffered is written: every answer whose
        // body it dropped before is out.
        let ended = this.heads.ended();
        let flushed = Pin::new(&mut this.inner).poll_flush(cx);
        if flushed.is_ready() {
            this.answers_out = ended;
        }
        flushed
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if let Some(first) = bufs.iter().find(|b| !b.is_empty()) {
            let total = bufs.iter().map(|b| b.len()).sum();
            if let Some(poll) = this.before_write(cx, first, total) {
                return poll;
            }
        }
        let written = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        if let Poll::Ready(Ok(n)) = written {
            this.after_write(bufs, n);
        }
        written
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;

    #[test]
    fn recognizes_hyper_error_heads_only() {
        assert_eq!(
            hyper_error_status(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n"),
            Some(400)
        );
        assert_eq!(
            hyper_error_status(b"HTTP/1.1 431 Request Header Fields Too Large\r\n\r\n"),
            Some(431)
        );
        assert_eq!(
            hyper_error_status(b"HTTP/1.1 403 Forbidden\r\nmint-request-id: x\r\n\r\n"),
            None
        );
        assert_eq!(hyper_error_status(b"HTTP/1.1 200 OK\r\n\r\n"), None);
        assert_eq!(hyper_error_status(b"{\"not\": \"a head\"}"), None);
    }

    #[test]
    fn json_answers_are_complete_and_carry_the_id() {
        let answer = String::from_utf8(json_answer(408, "late", "r-1")).unwrap();
        let (head, body) = answer.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 408 Request Timeout\r\n"));
        assert!(head.contains("mint-request-id: r-1"));
        assert!(head.contains(&format!("content-length: {}", body.len())));
        let json: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(json["error"]["request_id"], "r-1");
    }
}
