//! Response bodies as scripts: data, pauses, flushes and connection resets, played in order by
//! the connection that sends them. Nothing is spawned, so a body ends with its connection.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use tokio::time::Sleep;

use super::conn::ConnControl;

/// The size of one piece of a large generated body.
const PIECE: usize = 64 << 10;

/// One step of a body's script.
#[derive(Debug)]
pub(super) enum Step {
    /// Send these bytes as one frame (one HTTP/1.1 chunk, one HTTP/2 DATA frame).
    Data(Bytes),
    /// Wait; the connection flushes what it has meanwhile.
    Pause(Duration),
    /// Give the connection one turn (it flushes) before the next step.
    Flush,
    /// Send this many bytes of a repeating pattern, one [`PIECE`] at a time.
    Pattern(u64),
    /// Reset the connection (TCP RST) instead of sending anything more.
    Reset,
}

/// A response body played from a script of [`Step`]s.
pub(super) struct ScriptedBody {
    steps: VecDeque<Step>,
    sleep: Option<Pin<Box<Sleep>>>,
    /// The exact length, when known up front.
    length: Option<u64>,
    /// Set once a `Reset` step ran: the body then never ends, and its connection is torn down.
    resetting: bool,
    conn: Option<Arc<ConnControl>>,
    pattern: Option<Bytes>,
}

impl std::fmt::Debug for ScriptedBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScriptedBody")
            .field("steps", &self.steps.len())
            .field("length", &self.length)
            .finish_non_exhaustive()
    }
}

impl ScriptedBody {
    /// A body of these bytes, sent at once, with a known length.
    pub(super) fn full(bytes: impl Into<Bytes>) -> Self {
        let bytes: Bytes = bytes.into();
        let length = Some(bytes.len() as u64);
        let mut body = Self::script(vec![Step::Data(bytes)], None);
        body.length = length;
        body
    }

    /// An empty body.
    pub(super) fn empty() -> Self {
        let mut body = Self::script(Vec::new(), None);
        body.length = Some(0);
        body
    }

    /// A body of `length` bytes of a repeating pattern, generated as it is sent.
    pub(super) fn pattern(length: u64) -> Self {
        let mut body = Self::script(vec![Step::Pattern(length)], None);
        body.length = Some(length);
        body
    }

    /// A body that plays `steps`; `conn` is needed only for a `Reset` step.
    pub(super) fn script(steps: Vec<Step>, conn: Option<Arc<ConnControl>>) -> Self {
        Self {
            steps: steps.into(),
            sleep: None,
            length: None,
            resetting: false,
            conn,
            pattern: None,
        }
    }

    fn pattern_piece(&mut self, len: usize) -> Bytes {
        let pattern = self.pattern.get_or_insert_with(|| {
            let alphabet = b"0123456789abcdefghijklmnopqrstuvwxyz\n";
            Bytes::from(
                alphabet
                    .iter()
                    .copied()
                    .cycle()
                    .take(PIECE)
                    .collect::<Vec<u8>>(),
            )
        });
        pattern.slice(..len.min(PIECE))
    }
}

impl Body for ScriptedBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = &mut *self;
        loop {
            if this.resetting {
                // The connection task drops this body with the connection; no wake-up needed.
                return Poll::Pending;
            }
            if let Some(sleep) = this.sleep.as_mut() {
                if sleep.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                this.sleep = None;
            }
            match this.steps.pop_front() {
                None => return Poll::Ready(None),
                Some(Step::Data(bytes)) => {
                    if let Some(length) = this.length.as_mut() {
                        *length = length.saturating_sub(bytes.len() as u64);
                    }
                    return Poll::Ready(Some(Ok(Frame::data(bytes))));
                }
                Some(Step::Pause(duration)) => {
                    this.sleep = Some(Box::pin(tokio::time::sleep(duration)));
                }
                Some(Step::Flush) => {
                    cx.waker().wake_by_ref();
                    return Poll::Pending;
                }
                Some(Step::Pattern(remaining)) => {
                    let len = usize::try_from(remaining).unwrap_or(PIECE).min(PIECE);
                    if remaining > len as u64 {
                        this.steps.push_front(Step::Pattern(remaining - len as u64));
                    }
                    if len == 0 {
                        continue;
                    }
                    let piece = this.pattern_piece(len);
                    if let Some(length) = this.length.as_mut() {
                        *length = length.saturating_sub(len as u64);
                    }
                    return Poll::Ready(Some(Ok(Frame::data(piece))));
                }
                Some(Step::Reset) => {
                    this.resetting = true;
                    if let Some(conn) = &this.conn {
                        conn.reset();
                    }
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        !self.resetting && self.sleep.is_none() && self.steps.is_empty()
    }

    fn size_hint(&self) -> SizeHint {
        match self.length {
            Some(length) => SizeHint::with_exact(length),
            None => SizeHint::default(),
        }
    }
}
