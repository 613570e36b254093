//! The upstream's answer on its way back to the agent: headers cleaned and scrubbed, the body
//! decoded when it came compressed, scrubbed chunk by chunk, bounded in size and in idle time, and
//! the request's `outcome` record written when it ends, however it ends.
//!
//! Streaming: each upstream chunk (each decoded step of a compressed one) is scrubbed and handed
//! on at once, each piece the scrubber returns as its own frame (HTTP/1.1 chunk, HTTP/2 DATA
//! frame). The scrubber holds back a fixed tail whatever its bytes, and its pieces are split only
//! at its carry and at markers, so neither the bytes sent nor their framing nor when they go
//! depends on whether held bytes start a secret; an event that ends with a newline goes out
//! whole (the newline rule in `scrub.rs`), so a server-sent event reaches the agent before the
//! upstream finishes. When the scrubber or the decoder can change the body's length,
//! `Content-Length` is dropped and the answer goes out chunked: a stale length would hang the
//! client.
//!
//! A compressed answer's head waits until its first decoded bytes are ready: an answer that does
//! not decode from its first step (or breaks, or goes silent, before any decoded byte) is refused
//! with Mint's `502 upstream_unknown` instead, so the agent never gets a `200` head with nothing
//! after it.
//!
//! After the head is sent, a failure (the upstream resets, goes silent for longer than the idle
//! timeout, sends more than the limit, or a compressed body stops decoding) cannot change the
//! status any more: the body ends with an error, which aborts the answer (the agent sees the head
//! and a truncated body, never a complete-looking one), and the outcome is `unknown` with the
//! answer's status and the reason. Before the error, hyper is given one turn to write out what
//! it holds (an error returned at once would make it drop the head it had not written yet).

use std::collections::VecDeque;
use std::io::{self, Write as _};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use flate2::write::{MultiGzDecoder, ZlibDecoder};
use http::StatusCode;
use http::header::{self, HeaderValue};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use mint_policy::audit::{HttpStatus, Outcome, ReasonCode, TunnelEnd};
use tokio::time::Sleep;

use super::error::{ProxyError, REQUEST_ID_HEADER};
use super::headers::strip_response;
use crate::audit::facts::{OutcomeFacts, RequestFacts, outcome_record};
use crate::audit::{AuditLog, now};
use crate::config::declarations::Declarations;
use crate::secrets::scrub::Scrubber;

/// Compressed bytes decoded per step.
const DECODE_STEP: usize = 4096;

/// Writes a request's `outcome` record, once.
#[derive(Debug)]
pub(crate) struct OutcomeWriter {
    pub(crate) audit: AuditLog,
    pub(crate) facts: RequestFacts,
    pub(crate) received: Instant,
    pub(crate) bytes_up: u64,
}

/// How the answer's body is encoded, as far as Mint must undo it. A gzip body may hold several
/// members one after the other (as `cat a.gz b.gz`, or a server compressing each write, makes
/// it): every member is decoded, as receivers and Mint's own request-body decoder do.
enum Decoder {
    Gzip(Box<MultiGzDecoder<Vec<u8>>>),
    Zlib(Box<ZlibDecoder<Vec<u8>>>),
}

/// The scrubbed answer body.
pub(crate) struct AnswerBody {
    incoming: Incoming,
    scrubber: Scrubber,
    /// Where the declarations in force are read, and the ones `scrubber` was built from: an
    /// answer still streaming when a reload brings a new secret must hide that secret too
    /// (a request made after the reload may have handed it to the same upstream).
    reloads: Reloads,
    decoder: Option<Decoder>,
    /// Compressed bytes not decoded yet: decoded one step at a time, each step only once the
    /// previous one's output has gone to the agent, so memory stays bounded.
    compressed: Bytes,
    saw_compressed: bool,
    queue: VecDeque<Bytes>,
    limit: u64,
    received: u64,
    sent: u64,
    idle: Duration,
    sleep: Pin<Box<Sleep>>,
    upstream_done: bool,
    status: StatusCode,
    outcome: Option<OutcomeWriter>,
    /// The answer failed for this reason (its outcome is written): the error is returned on the
    /// next poll, once hyper has had a turn to write out what it holds.
    failing: Option<&'static str>,
}

// === impl OutcomeWriter ===

impl OutcomeWriter {
    /// Writes the record. A failure is logged: the answer is already on its way.
    pub(crate) fn write(
        self,
        outcome: Outcome,
        status: Option<StatusCode>,
        bytes_down: Option<u64>,
        reason: Option<&'static str>,
    ) {
        self.write_ended(outcome, status, bytes_down, reason, None);
    }

    /// Writes the record of a WebSocket (status 101) with `ended`, how the socket ended.
    pub(crate) fn write_ended(
        self,
        outcome: Outcome,
        status: Option<StatusCode>,
        bytes_down: Option<u64>,
        reason: Option<&'static str>,
        ended: Option<TunnelEnd>,
    ) {
        let facts = OutcomeFacts {
            outcome,
            status: status.and_then(|s| HttpStatus::new(s.as_u16()).ok()),
            bytes_up: Some(self.bytes_up),
            bytes_down,
            duration_ms: Some(
                u64::try_from(self.received.elapsed().as_millis()).unwrap_or(u64::MAX),
            ),
            reason: reason.and_then(|r| ReasonCode::new(r).ok()),
        };
        let mut record = outcome_record(now(), self.facts, facts);
        record.ended = ended;
        if let Err(error) = self.audit.defer(&record) {
            tracing::error!(request.id = %record.id, error = %error, "Outcome record not written");
        }
    }
}

/// Turns the upstream's head into the agent's, and wraps the body. Refuses (before any byte goes
/// to the agent; the caller audits the refusal) an answer that switches protocols, one compressed
/// in a way Mint cannot decode, one whose declared length is over the limit, and a compressed one
/// that fails before its first decoded bytes are ready (see [`AnswerBody::prime`]).
pub(crate) async fn answer(
    response: http::Response<Incoming>,
    reloads: Reloads,
    request_id: &str,
    limit: u64,
    idle: Duration,
    outcome: impl FnOnce() -> OutcomeWriter,
) -> Result<http::Response<AnswerBody>, ProxyError> {
    // The declarations in force now, not the ones the request was decided under: after a
    // reload a later request may have carried a new secret to this upstream, which can echo it
    // in this head. The newest keep every earlier secret (`Reloader::reload` retains them).
    let reloads = Reloads {
        current: reloads.state.declarations(),
        state: reloads.state,
    };
    let scrubber = reloads.current.scrubber();
    let (mut parts, incoming) = response.into_parts();
    // hyper keeps an upstream's non-standard reason phrase as an extension and would write it
    // back to the agent as is: none of the upstream's extensions go on.
    parts.extensions = http::Extensions::new();
    if parts.status == StatusCode::SWITCHING_PROTOCOLS {
        return Err(ProxyError::UpstreamUnknown(
            "the upstream tried to switch protocols".to_owned(),
        ));
    }
    // A transfer coding other than `chunked` (`gzip, chunked`): hyper undoes only the chunking,
    // so the bytes would pass the scrubber still compressed.
    if !transfer_codings_are_chunked(&parts.headers) {
        return Err(unscrubbable());
    }
    // An answer without a body (HEAD, 204, 304, an empty body) has nothing to decode or bound;
    // labelled with a coding Mint decodes, it loses the label below as a decoded answer does
    // (the agent must not get an empty body labelled gzip, nor a HEAD answer that differs from
    // its GET).
    let bodiless = incoming.is_end_stream();
    let (decoder, unlabel) = if bodiless {
        (None, decoder_for(&parts.headers).is_ok_and(|d| d.is_some()))
    } else {
        let decoder = decoder_for(&parts.headers)?;
        let unlabel = decoder.is_some();
        (decoder, unlabel)
    };
    let declared = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if !bodiless && decoder.is_none() && declared.is_some_and(|length| length > limit) {
        return Err(ProxyError::UpstreamUnknown(format!(
            "the answer is larger than {limit} bytes"
        )));
    }
    strip_response(&mut parts.headers);
    scrubber.scrub_headers(&mut parts.headers);
    if unlabel {
        parts.headers.remove(header::CONTENT_ENCODING);
        parts.headers.remove(header::CONTENT_LENGTH);
    }
    if !scrubber.is_empty() {
        parts.headers.remove(header::CONTENT_LENGTH);
    }
    if let Ok(value) = HeaderValue::from_str(request_id) {
        parts.headers.insert(REQUEST_ID_HEADER, value);
    }
    let status = parts.status;
    let mut body = AnswerBody {
        incoming,
        scrubber,
        reloads,
        decoder,
        compressed: Bytes::new(),
        saw_compressed: false,
        queue: VecDeque::new(),
        limit,
        received: 0,
        sent: 0,
        idle,
        sleep: Box::pin(tokio::time::sleep(idle)),
        upstream_done: false,
        status,
        outcome: None,
        failing: None,
    };
    if body.decoder.is_some() {
        body.prime().await?;
    }
    // Only now does the body take over the outcome: a refusal above leaves it to the caller.
    body.outcome = Some(outcome());
    Ok(http::Response::from_parts(parts, body))
}

/// Whether every `Transfer-Encoding` coding is `chunked` (or there is none).
fn transfer_codings_are_chunked(headers: &http::HeaderMap) -> bool {
    headers
        .get_all(header::TRANSFER_ENCODING)
        .iter()
        .all(|value| {
            value.to_str().is_ok_and(|text| {
                text.split(',')
                    .map(str::trim)
                    .all(|coding| coding.is_empty() || coding.eq_ignore_ascii_case("chunked"))
            })
        })
}

fn decoder_for(headers: &http::HeaderMap) -> Result<Option<Decoder>, ProxyError> {
    let mut codings = Vec::new();
    for value in headers.get_all(header::CONTENT_ENCODING) {
        let text = value.to_str().map_err(|_| unscrubbable())?;
        for coding in text.split(',') {
            let coding = coding.trim().to_ascii_lowercase();
            if !coding.is_empty() && coding != "identity" {
                codings.push(coding);
            }
        }
    }
    match codings.as_slice() {
        [] => Ok(None),
        [one] if one == "gzip" || one == "x-gzip" => Ok(Some(Decoder::Gzip(Box::new(
            MultiGzDecoder::new(Vec::new()),
        )))),
        [one] if one == "deflate" => {
            Ok(Some(Decoder::Zlib(Box::new(ZlibDecoder::new(Vec::new())))))
        }
        _ => Err(unscrubbable()),
    }
}

fn unscrubbable() -> ProxyError {
    ProxyError::UpstreamUnknown(
        "the answer came compressed in an encoding Mint cannot decode to scrub it".to_owned(),
    )
}

// === impl Decoder ===

impl Decoder {
    /// Decodes one step of at most [`DECODE_STEP`] compressed bytes. Deflate expands at most
    /// about 1,032 times, so one step's output stays under about 4 MiB. Everything the step
    /// decodes is returned now: flate2's writers keep decoded bytes in a buffer of their own
    /// until the next write, so without the flush an answer's decoded bytes would come one step
    /// late (a compressed event stream's event only with the next one, and an answer's head only
    /// once a later step, perhaps a bomb's, had been decoded too).
    fn push(&mut self, step: &[u8]) -> Result<Vec<u8>, &'static str> {
        let written = match self {
            Decoder::Gzip(d) => d
                .write_all(step)
                .and_then(|()| d.flush())
                .map(|()| std::mem::take(d.get_mut())),
            Decoder::Zlib(d) => d
                .write_all(step)
                .and_then(|()| d.flush())
                .map(|()| std::mem::take(d.get_mut())),
        };
        written.map_err(|_| "undecodable_answer")
    }

    fn finish(&mut self) -> io::Result<Vec<u8>> {
        match self {
            Decoder::Gzip(d) => {
                d.try_finish()?;
                Ok(std::mem::take(d.get_mut()))
            }
            Decoder::Zlib(d) => {
                d.try_finish()?;
                Ok(std::mem::take(d.get_mut()))
            }
        }
    }
}

/// The broker's declarations as they change, and those an answer's scrubber was built from.
pub(crate) struct Reloads {
    pub(crate) state: super::AppState,
    pub(crate) current: Arc<Declarations>,
}

// === impl AnswerBody ===

impl AnswerBody {
    /// Before scrubbing more of the answer: if a reload replaced the declarations, scrub from
    /// now on with the new secrets' patterns as well (the new ones keep the old secrets, so
    /// what is held back stays covered). Bytes already sent were scrubbed while the old
    /// declarations were in force, when no request could have carried a new secret yet.
    /// (An answer sent with its `Content-Length` because no secret was loaded when it began
    /// cannot change length: if a new secret must be redacted, the answer breaks off short.)
    fn follow_reload(&mut self) {
        let latest = self.reloads.state.declarations();
        if !Arc::ptr_eq(&latest, &self.reloads.current) {
            self.scrubber.adopt(latest.scrubber());
            self.reloads.current = latest;
        }
    }

    /// Takes a decoded piece of the answer: counts it against the limit and scrubs it. With
    /// `last` (no byte can follow), the scrubber ends the answer with it in one pass.
    fn take(&mut self, bytes: Bytes, last: bool) -> Result<(), &'static str> {
        self.received += bytes.len() as u64;
        if self.received > self.limit {
            return Err("response_too_large");
        }
        self.follow_reload();
        let scrubbed = if last {
            self.scrubber.push_last(bytes)
        } else {
            self.scrubber.push(bytes)
        };
        for piece in scrubbed.into_pieces() {
            self.queue.push_back(piece);
        }
        Ok(())
    }

    fn on_data(&mut self, data: Bytes) -> Result<(), &'static str> {
        if self.decoder.is_none() {
            // The last bytes of a body of known length: nothing more can come (hyper ends such
            // a body there), so nothing needs holding back for a next chunk.
            let last = self.incoming.is_end_stream();
            return self.take(data, last);
        }
        self.compressed = data;
        self.decode_step()
    }

    /// Decodes the next step of the compressed bytes held, if any.
    fn decode_step(&mut self) -> Result<(), &'static str> {
        let Some(decoder) = &mut self.decoder else {
            return Ok(());
        };
        let step = self
            .compressed
            .split_to(DECODE_STEP.min(self.compressed.len()));
        if step.is_empty() {
            return Ok(());
        }
        self.saw_compressed = true;
        let decoded = decoder.push(&step)?;
        self.take(Bytes::from(decoded), false)
    }

    fn on_end(&mut self) -> Result<(), &'static str> {
        // An empty compressed body has no gzip header to finish: it decodes to nothing.
        if let Some(decoder) = self.decoder.as_mut().filter(|_| self.saw_compressed) {
            let rest = decoder.finish().map_err(|_| "undecodable_answer")?;
            self.take(Bytes::from(rest), false)?;
        }
        self.follow_reload();
        for piece in self.scrubber.finish().into_pieces() {
            self.queue.push_back(piece);
        }
        self.upstream_done = true;
        Ok(())
    }

    /// Before the head goes out: decodes until the first decoded bytes are ready (or the body
    /// ends). A compressed answer failing here has sent the agent nothing, so it is refused with
    /// Mint's own error; one failing later is cut off after its head. Memory stays bounded as
    /// in [`AnswerBody::decode_step`]: decoding stops at the first step with output.
    async fn prime(&mut self) -> Result<(), ProxyError> {
        let refused = |what: &str| {
            ProxyError::UpstreamUnknown(format!(
                "the compressed answer {what} before its first byte"
            ))
        };
        let failed = |reason: &'static str| match reason {
            "response_too_large" => refused("was larger than the limit"),
            _ => refused("did not decode"),
        };
        while self.queue.is_empty() && !self.upstream_done {
            if !self.compressed.is_empty() {
                self.decode_step().map_err(failed)?;
                continue;
            }
            let frame = tokio::time::timeout(
                self.idle,
                std::future::poll_fn(|cx| Pin::new(&mut self.incoming).poll_frame(cx)),
            )
            .await
            .map_err(|_| refused("went silent"))?;
            match frame {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        self.on_data(data).map_err(failed)?;
                    }
                }
                Some(Err(_)) => return Err(refused("broke off")),
                None => self.on_end().map_err(failed)?,
            }
        }
        self.sleep
            .as_mut()
            .reset(tokio::time::Instant::now() + self.idle);
        Ok(())
    }

    /// Ends the answer with an error: the agent sees the head and a truncated body; the outcome
    /// is `unknown`, with the answer's status. The error itself comes on the next poll: returned
    /// now, it would make hyper drop what it has not written yet (the head, the last pieces), so
    /// hyper first gets a turn to write it out.
    fn fail(
        &mut self,
        cx: &mut Context<'_>,
        reason: &'static str,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        self.queue.clear();
        if let Some(outcome) = self.outcome.take() {
            tracing::info!(request.id = %outcome.facts.id, reason, "Answer cut off");
            outcome.write(
                Outcome::Unknown,
                Some(self.status),
                Some(self.sent),
                Some(reason),
            );
        }
        self.failing = Some(reason);
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

impl Body for AnswerBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        let this = self.get_mut();
        if let Some(reason) = this.failing.take() {
            return Poll::Ready(Some(Err(io::Error::other(reason))));
        }
        loop {
            if let Some(piece) = this.queue.pop_front() {
                this.sent += piece.len() as u64;
                return Poll::Ready(Some(Ok(Frame::data(piece))));
            }
            if this.upstream_done {
                if let Some(outcome) = this.outcome.take() {
                    outcome.write(Outcome::Completed, Some(this.status), Some(this.sent), None);
                }
                return Poll::Ready(None);
            }
            if this.outcome.is_none() {
                // Failed before; nothing more comes.
                return Poll::Ready(None);
            }
            if !this.compressed.is_empty() {
                if let Err(reason) = this.decode_step() {
                    return this.fail(cx, reason);
                }
                continue;
            }
            match Pin::new(&mut this.incoming).poll_frame(cx) {
                Poll::Pending => {
                    if this.sleep.as_mut().poll(cx).is_ready() {
                        return this.fail(cx, "upstream_idle_timeout");
                    }
                    return Poll::Pending;
                }
                Poll::Ready(Some(Ok(frame))) => {
                    let deadline = tokio::time::Instant::now() + this.idle;
                    this.sleep.as_mut().reset(deadline);
                    // Trailers are dropped: they could carry anything, and few clients read them.
                    if let Ok(data) = frame.into_data()
                        && let Err(reason) = this.on_data(data)
                    {
                        return this.fail(cx, reason);
                    }
                }
                Poll::Ready(Some(Err(_))) => return this.fail(cx, "upstream_reset"),
                Poll::Ready(None) => {
                    if let Err(reason) = this.on_end() {
                        return this.fail(cx, reason);
                    }
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.upstream_done && self.queue.is_empty() && self.outcome.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

impl Drop for AnswerBody {
    fn drop(&mut self) {
        let Some(outcome) = self.outcome.take() else {
            return;
        };
        // Dropped before its end: a HEAD answer or one without a body (nothing to stream), or
        // an agent that went away mid-answer. Either way the upstream answered.
        let reason = if self.incoming.is_end_stream() && self.queue.is_empty() {
            None
        } else {
            Some("client_closed")
        };
        outcome.write(
            Outcome::Completed,
            Some(self.status),
            Some(self.sent),
            reason,
        );
    }
}

impl std::fmt::Debug for AnswerBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AnswerBody")
            .field("received", &self.received)
            .field("sent", &self.sent)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;

    use super::*;

    fn gzip(bytes: &[u8]) -> Vec<u8> {
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        encoder.write_all(bytes).unwrap_or_default();
        encoder.finish().unwrap_or_default()
    }

    /// A step's decoded bytes come out with that step, not with the next one (flate2's writers
    /// buffer them until the next write unless flushed).
    #[test]
    fn a_step_returns_everything_it_decodes() {
        for mut decoder in [
            Decoder::Gzip(Box::new(MultiGzDecoder::new(Vec::new()))),
            Decoder::Zlib(Box::new(ZlibDecoder::new(Vec::new()))),
        ] {
            let compressed = match decoder {
                Decoder::Gzip(_) => gzip(b"data: first event\n\n"),
                Decoder::Zlib(_) => {
                    let mut encoder =
                        flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
                    encoder
                        .write_all(b"data: first event\n\n")
                        .unwrap_or_default();
                    // A sync flush, as a server streaming events writes them: no end yet.
                    encoder.flush().unwrap_or_default();
                    encoder.get_ref().clone()
                }
            };
            assert_eq!(
                decoder.push(&compressed).as_deref(),
                Ok(&b"data: first event\n\n"[..])
            );
        }
    }
}
