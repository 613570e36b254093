//! WebSocket connections through Mint, once the opening handshake has been decided, recorded and
//! answered `101` by the upstream: frames relayed both ways until the socket closes, and the
//! request's `outcome` record written then.
//!
//! The opening handshake is an ordinary request of the pipeline (`proxy.rs`): HTTP/1.1 `GET`
//! with `Upgrade: websocket`, on the `/v1/proxy/` route, in forward-proxy mode or inside an
//! intercepted `CONNECT` tunnel; its capability, target, placeholders (headers and query,
//! substituted as for any request), policy (method `GET` and the handshake's path), limits and
//! decision record come before anything is sent. `Sec-WebSocket-Extensions` is removed from
//! what goes upstream, so no extension (`permessage-deflate`) is ever negotiated: an upstream
//! that answers with one anyway is refused (`502`), and a frame with a reserved bit set closes the
//! socket. HTTP/2 extended CONNECT (RFC 8441) is not served: agents speak HTTP/1.1 Upgrade.
//!
//! - **Agent to upstream**: each frame is read whole (bounded) and forwarded byte for byte,
//!   masked as the agent masked it; its head is read for the bounds and to see who closes, and
//!   its payload, unmasked on the side 16 KiB at a time, is searched for the capability token the handshake
//!   presented (with the end of the frame before it): a frame holding it is not forwarded and
//!   the socket closes with 1008 (`capability_token_outward`). A token cut across two frames is
//!   caught at the second, after the first went. Placeholders in frames are inert text:
//!   nothing is substituted in a frame.
//! - **Upstream to agent**: each data frame's payload is run through a
//!   [`Scrubber`](crate::secrets::scrub::Scrubber) as it arrives (bounded; only the scrubbed
//!   output is held), and written to the agent, after a head of its own, as a new frame with
//!   the scrubbed payload's own length; frames are never patched in place. A data message
//!   (text or binary, fragmented or not) is one scrubbing stream, so a secret split across
//!   fragments is caught; at its last fragment the scrubber flushes, so each message reaches the
//!   agent whole when it ends. A reload's new secrets are scrubbed from the next fragment on (the
//!   new declarations keep the old secrets), as in an answer's body. Control frames (ping, pong, close) are scrubbed on their own;
//!   one that would grow past 125 bytes carries the marker alone (a close keeps its code).
//! - **Chunking**: Mint emits one frame per upstream frame, holding the concatenated pieces the
//!   scrubber released for it (none when it released nothing), and ends the message with the
//!   frame that carries the flushed rest. How much the scrubber releases depends only on its
//!   fixed hold, the newline rule and where markers are (see `scrub.rs`), never on whether held
//!   bytes start a secret; so neither the frames' sizes nor their boundaries reveal a held-back
//!   partial match. A frame that is split mid-message (continuation frames) may split a UTF-8
//!   character of a text message, which RFC 6455 allows.
//!
//! Bounds: a frame or message larger than `max_websocket_message` (either way) closes the
//! socket with 1009; a socket with no frame either way for the idle timeout closes with 1001, and
//! so does one open for `max_websocket_lifetime`; the socket holds its agent connection's
//! `--max-connections` slot until it closes, and at shutdown closes with 1001. A peer that breaks
//! the protocol gets 1002. Mint's own close frames to the upstream are masked, as a client's must
//! be.
//!
//! Standing: every second (and once as it opens) the socket's capability is looked up again by
//! id (`CapabilityStore::status`, which re-reads a changed file): revoked, removed or expired,
//! the socket closes with 1008. After a reload of the declarations the handshake is decided again
//! (`proxy::handshake_still_allowed`): denied now, it closes with 1008.
//!
//! The outcome record: status 101, `bytes_up` and `bytes_down` the frame bytes relayed each way
//! (heads included), `duration_ms` to the close, `reason` for who or what closed it
//! (`websocket_closed_by_agent` or `websocket_closed_by_upstream`: a close frame, outcome
//! `completed`; `client_closed`: the agent went away without one, `completed`; and, outcome
//! `unknown`, `upstream_reset`, `websocket_idle_timeout`, `websocket_open_timeout`,
//! `websocket_lifetime`, `websocket_capability_{revoked,expired}`, `websocket_policy_denied`,
//! `websocket_shutdown`, `websocket_{agent,upstream}_{message_too_large,protocol_error}`,
//! `capability_token_outward`), and `ended`, the cause as a tunnel's record says it, which an
//! intercepted tunnel that carried the socket takes as its own ([`Relays`]).

use std::pin::pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::{Buf as _, BytesMut};
use http::Method;
use http::StatusCode;
use hyper::upgrade::{OnUpgrade, Upgraded};
use hyper_util::rt::TokioIo;
use mint_policy::audit::{Outcome, TunnelEnd};
use mint_policy::evaluate::AliasUse;
use mint_policy::normalize::Target;
use tokio::io::{AsyncReadExt, AsyncWriteExt, ReadHalf, WriteHalf};
use tokio::time::Instant;
use zeroize::Zeroizing;

use super::AppState;
use super::answer::OutcomeWriter;
use super::pipeline::OutwardToken;
use crate::capability::{CapabilityGrant, CapabilityStatus};
use crate::config::declarations::Declarations;
use crate::secrets::scrub::{REDACTED, Scrubber};
use crate::serve::ConnectionSlot;

pub(crate) mod frame;

use frame::{FrameError, Head, MAX_CONTROL, Opcode};

/// How long the other direction may take to end once one has (a close handshake finishing, or
/// the peer seeing the end of the stream Mint passed on), and how long Mint's own close frames
/// may take to go out.
const CLOSE_GRACE: Duration = Duration::from_secs(5);

/// How often an open socket's capability and policy standing is checked.
const STANDING_CHECK: Duration = Duration::from_secs(1);

/// How much is read at a time.
const READ_SIZE: usize = 16 << 10;

/// How much of an agent's frame is unmasked at a time to search it for the capability token:
/// a multiple of 4 (the masking key's length).
const WINDOW: usize = 16 << 10;
const _: () = assert!(WINDOW.is_multiple_of(4));

/// The longest frame head Mint writes (no mask).
const MAX_HEAD: usize = 10;

/// Close codes (RFC 6455 section 7.4.1).
const GOING_AWAY: u16 = 1001;
const PROTOCOL_ERROR: u16 = 1002;
const POLICY_VIOLATION: u16 = 1008;
const TOO_BIG: u16 = 1009;

/// What an intercepted tunnel keeps of the WebSocket its connection may carry: it waits for the
/// socket (hyper hands the connection over at the upgrade) before it writes its own
/// `tunnel_closed` record (`serve/tunnel.rs`), and takes the socket's ending as its own.
#[derive(Debug)]
pub(crate) struct Relays {
    alive: tokio::sync::watch::Sender<()>,
    ended: Arc<Mutex<Option<TunnelEnd>>>,
}

/// Held by a WebSocket relay for as long as it runs (in the extensions of a tunnel's requests);
/// the relay reports how its socket ended through it.
#[derive(Clone, Debug)]
pub(crate) struct RelayHold {
    _alive: tokio::sync::watch::Receiver<()>,
    ended: Arc<Mutex<Option<TunnelEnd>>>,
}

// === impl Relays ===

impl Relays {
    pub(crate) fn new() -> Relays {
        Relays {
            alive: tokio::sync::watch::channel(()).0,
            ended: Arc::new(Mutex::new(None)),
        }
    }

    /// A hold for one request of the tunnel.
    pub(crate) fn hold(&self) -> RelayHold {
        RelayHold {
            _alive: self.alive.subscribe(),
            ended: Arc::clone(&self.ended),
        }
    }

    /// Waits until no hold is left, then says how the last socket the tunnel carried ended
    /// (`None`: it carried none).
    pub(crate) async fn closed(&self) -> Option<TunnelEnd> {
        self.alive.closed().await;
        *self.ended.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

// === impl RelayHold ===

impl RelayHold {
    fn report(&self, ended: TunnelEnd) {
        *self.ended.lock().unwrap_or_else(PoisonError::into_inner) = Some(ended);
    }
}

/// The agent's side of an accepted opening handshake: its connection, once hyper has written
/// the `101`, and what the socket holds while it lives.
#[derive(Debug)]
pub(crate) struct AgentSide {
    pub(crate) on_upgrade: OnUpgrade,
    pub(crate) slot: Option<ConnectionSlot>,
    pub(crate) hold: Option<RelayHold>,
    /// The capability token the handshake presented, never to be forwarded in a frame.
    pub(crate) outward: Option<OutwardToken>,
    /// What that token granted: the socket ends when the capability is revoked or expires.
    pub(crate) grant: CapabilityGrant,
    /// The handshake as the policy decided it (set once it is decided): the socket ends when a
    /// reload no longer allows it.
    pub(crate) decided: Option<Decided>,
}

/// A WebSocket's opening handshake as the policy decided it, to decide it again after a reload.
#[derive(Debug)]
pub(crate) struct Decided {
    pub(crate) method: Method,
    pub(crate) target: Target,
    pub(crate) uses: Vec<AliasUse>,
}

/// Which end of the socket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Peer {
    Agent,
    Upstream,
}

/// How a socket ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ending {
    /// A close frame came first from this peer, and both directions ended.
    Closed(Peer),
    /// The agent's stream ended (or broke) without a close frame.
    AgentGone,
    /// The upstream's stream ended (or broke) without a close frame.
    UpstreamGone,
    Idle,
    Shutdown,
    TooLarge(Peer),
    Protocol(Peer),
    /// The agent wrote its capability token into a frame, which was not forwarded.
    TokenOutward,
    /// Open for `max_websocket_lifetime`.
    Lifetime,
    /// The capability the handshake presented was revoked (or removed from the file).
    CapabilityRevoked,
    /// It expired.
    CapabilityExpired,
    /// A reload no longer allows the handshake.
    PolicyDenied,
}

/// Why a direction stopped relaying.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stop {
    /// Its reader reached the end of its stream (or broke).
    End,
    /// Its peer sent a frame or message over the bound.
    TooLarge,
    /// Its peer broke the protocol.
    Protocol,
    /// The agent's frame held its capability token.
    TokenOutward,
}

/// What ended the relay's first wait.
enum First {
    Stopped(Peer, Stop),
    Idle,
    Shutdown,
    /// The socket's lifetime, capability or policy standing ended it.
    Standing(Ending),
}

/// One direction's writer and what it knows about the stream it writes.
struct Side {
    writer: WriteHalf<TokioIo<Upgraded>>,
    /// A frame is partly written: Mint cannot add a close frame of its own.
    mid_frame: bool,
    bytes: u64,
}

/// What both directions share.
struct Shared {
    to_agent: tokio::sync::Mutex<Side>,
    to_upstream: tokio::sync::Mutex<Side>,
    ledger: Mutex<Ledger>,
}

struct Ledger {
    first_close: Option<Peer>,
    last_activity: Instant,
}

/// A data message from the upstream, in progress.
struct Message {
    opcode: Opcode,
    scrubber: Scrubber,
    /// Whether a frame of it went to the agent (later ones are continuations).
    emitted: bool,
}

// === impl Message ===

impl Message {
    /// Scrubs one piece of an upstream data frame's payload (as it arrives: the frame is never
    /// held whole), adding what the scrubber releases to `scrubbed`. An empty piece is skipped:
    /// it releases nothing (a flood of empty fragments would cost a pass over the held bytes
    /// each).
    fn push(&mut self, piece: &[u8], scrubbed: &mut Vec<u8>) {
        if piece.is_empty() {
            return;
        }
        scrubbed.extend_from_slice(&self.scrubber.push_slice(piece));
    }

    /// Ends one upstream data frame of this message (`fin`: its last), whose payload went
    /// through [`Message::push`] into `scrubbed`: at the last frame the flushed rest is added.
    /// Returns the head of the frame that carries `scrubbed` to the agent, all of it in one
    /// frame; `None` when the scrubber released nothing and the message goes on: how much it
    /// releases never depends on whether held bytes start a secret, so neither do the frames.
    fn end_frame(&mut self, fin: bool, scrubbed: &mut Vec<u8>) -> Option<Vec<u8>> {
        if fin {
            scrubbed.extend_from_slice(&self.scrubber.finish_vec());
        }
        if scrubbed.is_empty() && !fin {
            return None;
        }
        let opcode = if self.emitted {
            Opcode::Continuation
        } else {
            self.opcode
        };
        let mut head = Vec::with_capacity(MAX_HEAD);
        frame::write_head(&mut head, fin, opcode, scrubbed.len(), None);
        self.emitted = true;
        Some(head)
    }
}

// === impl Ending ===

impl Ending {
    /// The outcome record's `outcome`, `reason` and `ended`.
    fn outcome(self) -> (Outcome, &'static str, TunnelEnd) {
        use Peer::{Agent, Upstream};
        match self {
            Ending::Closed(Agent) => (
                Outcome::Completed,
                "websocket_closed_by_agent",
                TunnelEnd::ClientClosed,
            ),
            Ending::Closed(Upstream) => (
                Outcome::Completed,
                "websocket_closed_by_upstream",
                TunnelEnd::UpstreamClosed,
            ),
            Ending::AgentGone => (Outcome::Completed, "client_closed", TunnelEnd::ClientClosed),
            Ending::UpstreamGone => (
                Outcome::Unknown,
                "upstream_reset",
                TunnelEnd::UpstreamClosed,
            ),
            Ending::Idle => (
                Outcome::Unknown,
                "websocket_idle_timeout",
                TunnelEnd::Timeout,
            ),
            Ending::Shutdown => (Outcome::Unknown, "websocket_shutdown", TunnelEnd::Shutdown),
            Ending::TooLarge(Agent) => (
                Outcome::Unknown,
                "websocket_agent_message_too_large",
                TunnelEnd::Error,
            ),
            Ending::TooLarge(Upstream) => (
                Outcome::Unknown,
                "websocket_upstream_message_too_large",
                TunnelEnd::Error,
            ),
            Ending::Protocol(Agent) => (
                Outcome::Unknown,
                "websocket_agent_protocol_error",
                TunnelEnd::Error,
            ),
            Ending::Protocol(Upstream) => (
                Outcome::Unknown,
                "websocket_upstream_protocol_error",
                TunnelEnd::Error,
            ),
            Ending::TokenOutward => (
                Outcome::Unknown,
                "capability_token_outward",
                TunnelEnd::Error,
            ),
            Ending::Lifetime => (Outcome::Unknown, "websocket_lifetime", TunnelEnd::Lifetime),
            Ending::CapabilityRevoked => (
                Outcome::Unknown,
                "websocket_capability_revoked",
                TunnelEnd::CapabilityRevoked,
            ),
            Ending::CapabilityExpired => (
                Outcome::Unknown,
                "websocket_capability_expired",
                TunnelEnd::CapabilityExpired,
            ),
            Ending::PolicyDenied => (
                Outcome::Unknown,
                "websocket_policy_denied",
                TunnelEnd::PolicyDenied,
            ),
        }
    }

    /// The close frame Mint sends both ends, when Mint ends the socket.
    fn close_frame(self) -> Option<(u16, &'static str)> {
        match self {
            Ending::Closed(_) | Ending::AgentGone | Ending::UpstreamGone => None,
            Ending::Idle => Some((GOING_AWAY, "idle timeout")),
            Ending::Shutdown => Some((GOING_AWAY, "proxy shutting down")),
            Ending::TooLarge(_) => Some((TOO_BIG, "message too large")),
            Ending::Protocol(_) => Some((PROTOCOL_ERROR, "protocol error")),
            Ending::TokenOutward => Some((POLICY_VIOLATION, "capability token in a frame")),
            Ending::Lifetime => Some((GOING_AWAY, "maximum lifetime reached")),
            Ending::CapabilityRevoked => Some((POLICY_VIOLATION, "capability revoked")),
            Ending::CapabilityExpired => Some((POLICY_VIOLATION, "capability expired")),
            Ending::PolicyDenied => Some((POLICY_VIOLATION, "policy no longer allows it")),
        }
    }
}

// === impl Shared ===

impl Shared {
    fn touch(&self) {
        self.ledger
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .last_activity = Instant::now();
    }

    fn saw_close(&self, peer: Peer) {
        self.ledger
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .first_close
            .get_or_insert(peer);
    }

    fn first_close(&self) -> Option<Peer> {
        self.ledger
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .first_close
    }

    /// Completes once neither direction has read anything for `idle`.
    async fn idle(&self, idle: Duration) {
        loop {
            let last = self
                .ledger
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .last_activity;
            let deadline = last + idle;
            if Instant::now() >= deadline {
                return;
            }
            tokio::time::sleep_until(deadline).await;
        }
    }
}

/// Relays the socket whose upstream answered `101` (`upstream`: its connection once taken
/// over) until it closes, then writes `outcome` (status 101). Runs on a task of its own.
pub(crate) async fn relay(
    state: AppState,
    agent: AgentSide,
    upstream: OnUpgrade,
    outcome: OutcomeWriter,
) {
    let AgentSide {
        on_upgrade,
        slot,
        hold,
        outward,
        grant,
        decided,
    } = agent;
    let limits = *state.limits();
    let id = outcome.facts.id.clone();
    let taken = tokio::time::timeout(limits.request_timeout, async {
        tokio::join!(on_upgrade, upstream)
    })
    .await;
    let (agent_io, upstream_io) = match taken {
        Ok((Ok(agent_io), Ok(upstream_io))) => (agent_io, upstream_io),
        Ok((Err(_), _)) => {
            tracing::info!(request.id = %id, "Agent went away before its WebSocket opened");
            not_opened(
                outcome,
                hold,
                Outcome::Completed,
                "client_closed",
                TunnelEnd::ClientClosed,
            );
            return;
        }
        Err(_) => {
            tracing::info!(request.id = %id, "WebSocket not taken over in time");
            not_opened(
                outcome,
                hold,
                Outcome::Unknown,
                "websocket_open_timeout",
                TunnelEnd::Timeout,
            );
            return;
        }
        Ok((Ok(_), Err(_))) => {
            tracing::info!(request.id = %id, "Upstream connection broke as its WebSocket opened");
            not_opened(
                outcome,
                hold,
                Outcome::Unknown,
                "upstream_reset",
                TunnelEnd::UpstreamClosed,
            );
            return;
        }
    };
    let (agent_reader, agent_writer) = tokio::io::split(TokioIo::new(agent_io));
    let (upstream_reader, upstream_writer) = tokio::io::split(TokioIo::new(upstream_io));
    let shared = Shared {
        to_agent: tokio::sync::Mutex::new(Side {
            writer: agent_writer,
            mid_frame: false,
            bytes: 0,
        }),
        to_upstream: tokio::sync::Mutex::new(Side {
            writer: upstream_writer,
            mid_frame: false,
            bytes: 0,
        }),
        ledger: Mutex::new(Ledger {
            first_close: None,
            last_activity: Instant::now(),
        }),
    };
    let max = limits.max_websocket_message;
    let mut drain = slot.as_ref().map(|slot| slot.drain.clone());
    tracing::debug!(request.id = %id, "WebSocket open");
    let ending = {
        let mut up = pin!(from_agent(&shared, agent_reader, max, outward.as_ref()));
        let mut down = pin!(from_upstream(&shared, upstream_reader, max, &state));
        let drained = async {
            match drain.as_mut() {
                Some(drain) => drain.started().await,
                None => std::future::pending().await,
            }
        };
        let standing = standing(
            &state,
            &grant,
            decided.as_ref(),
            Instant::now() + limits.max_websocket_lifetime,
        );
        let first = tokio::select! {
            stop = &mut up => First::Stopped(Peer::Agent, stop),
            stop = &mut down => First::Stopped(Peer::Upstream, stop),
            () = shared.idle(limits.idle_timeout) => First::Idle,
            () = drained => First::Shutdown,
            ending = standing => First::Standing(ending),
        };
        match first {
            First::Idle => Ending::Idle,
            First::Shutdown => Ending::Shutdown,
            First::Standing(ending) => ending,
            First::Stopped(peer, Stop::TooLarge) => Ending::TooLarge(peer),
            First::Stopped(peer, Stop::Protocol) => Ending::Protocol(peer),
            First::Stopped(_, Stop::TokenOutward) => Ending::TokenOutward,
            First::Stopped(peer, Stop::End) => {
                // The other direction gets a moment to finish the close handshake, or to see
                // the end of the stream Mint passed on.
                match peer {
                    Peer::Agent => {
                        let _ = tokio::time::timeout(CLOSE_GRACE, &mut down).await;
                    }
                    Peer::Upstream => {
                        let _ = tokio::time::timeout(CLOSE_GRACE, &mut up).await;
                    }
                }
                match (shared.first_close(), peer) {
                    (Some(closer), _) => Ending::Closed(closer),
                    (None, Peer::Agent) => Ending::AgentGone,
                    (None, Peer::Upstream) => Ending::UpstreamGone,
                }
            }
        }
    };
    if let Some((code, text)) = ending.close_frame() {
        let closing = async {
            close(&shared.to_agent, code, text, None).await;
            close(&shared.to_upstream, code, text, Some(mask_key())).await;
        };
        let _ = tokio::time::timeout(CLOSE_GRACE, closing).await;
    }
    let bytes_up = shared.to_upstream.lock().await.bytes;
    let bytes_down = shared.to_agent.lock().await.bytes;
    let (result, reason, ended) = ending.outcome();
    tracing::info!(request.id = %id, reason, ended = %ended, bytes_up, bytes_down, "WebSocket closed");
    let outcome = OutcomeWriter {
        bytes_up,
        ..outcome
    };
    outcome.write_ended(
        result,
        Some(StatusCode::SWITCHING_PROTOCOLS),
        Some(bytes_down),
        Some(reason),
        Some(ended),
    );
    if let Some(hold) = &hold {
        hold.report(ended);
    }
    // The slot and the hold go last: the record is queued before a shutdown's sync, and before
    // an intercepted tunnel writes its own.
    drop(drain);
    drop(slot);
    drop(hold);
}

/// Completes when the socket must end whatever its peers do: at `deadline` (its maximum
/// lifetime), or when a check every [`STANDING_CHECK`] (and one at once) finds its capability
/// revoked, expired or gone, or, after a reload, the handshake `decided` no longer allowed.
async fn standing(
    state: &AppState,
    grant: &CapabilityGrant,
    decided: Option<&Decided>,
    deadline: Instant,
) -> Ending {
    let mut checked: Option<Arc<Declarations>> = None;
    loop {
        if Instant::now() >= deadline {
            return Ending::Lifetime;
        }
        match state.capability_status(grant.id.as_str()) {
            Some(CapabilityStatus::Active) => {}
            Some(CapabilityStatus::Expired) => return Ending::CapabilityExpired,
            Some(CapabilityStatus::Revoked) | None => return Ending::CapabilityRevoked,
        }
        let declarations = state.declarations();
        let reloaded = checked
            .as_ref()
            .is_none_or(|checked| !Arc::ptr_eq(checked, &declarations));
        if reloaded {
            if let Some(decided) = decided
                && !super::handshake_still_allowed(&declarations, grant, decided)
            {
                return Ending::PolicyDenied;
            }
            checked = Some(declarations);
        }
        tokio::time::sleep_until(deadline.min(Instant::now() + STANDING_CHECK)).await;
    }
}

/// Writes the outcome of a socket that never opened, and reports how it ended to the tunnel.
fn not_opened(
    outcome: OutcomeWriter,
    hold: Option<RelayHold>,
    result: Outcome,
    reason: &'static str,
    ended: TunnelEnd,
) {
    if let Some(hold) = &hold {
        hold.report(ended);
    }
    outcome.write_ended(
        result,
        Some(StatusCode::SWITCHING_PROTOCOLS),
        Some(0),
        Some(reason),
        Some(ended),
    );
}

/// Writes Mint's close frame with `code` and `text` (masked with `mask` toward the upstream)
/// unless a frame is partly written, then ends the stream.
async fn close(side: &tokio::sync::Mutex<Side>, code: u16, text: &str, mask: Option<[u8; 4]>) {
    let mut side = side.lock().await;
    if !side.mid_frame {
        let mut out = Vec::new();
        frame::write(
            &mut out,
            true,
            Opcode::Close,
            &frame::close_payload(code, text),
            mask,
        );
        if side.writer.write_all(&out).await.is_ok() {
            side.bytes += out.len() as u64;
        }
    }
    let _ = side.writer.shutdown().await;
}

/// A masking key for Mint's own frames to the upstream.
fn mask_key() -> [u8; 4] {
    let mut key = [0u8; 4];
    // A key that stays zero after a failed random read only masks with zeros; nothing Mint
    // writes with it is secret.
    let _ = getrandom::fill(&mut key);
    key
}

/// Reads at least one more byte into `buf`; `false` at the end of the stream or on an error.
async fn read_more(reader: &mut ReadHalf<TokioIo<Upgraded>>, buf: &mut BytesMut) -> bool {
    buf.reserve(READ_SIZE);
    matches!(reader.read_buf(buf).await, Ok(n) if n > 0)
}

/// Writes the whole frames `bytes` to `side`; `false` when the stream is gone. Until they are
/// out, the side is marked mid-frame (a write cut short leaves it so).
async fn send(side: &tokio::sync::Mutex<Side>, bytes: &[u8]) -> bool {
    let mut side = side.lock().await;
    side.mid_frame = true;
    if side.writer.write_all(bytes).await.is_err() || side.writer.flush().await.is_err() {
        return false;
    }
    side.bytes += bytes.len() as u64;
    side.mid_frame = false;
    true
}

/// Writes one frame, its `head` then its `payload`, to `side` (no copy of the payload into a
/// frame buffer); `false` when the stream is gone. Marked mid-frame until both are out.
async fn send_frame(side: &tokio::sync::Mutex<Side>, head: &[u8], payload: &[u8]) -> bool {
    let mut side = side.lock().await;
    side.mid_frame = true;
    if side.writer.write_all(head).await.is_err()
        || side.writer.write_all(payload).await.is_err()
        || side.writer.flush().await.is_err()
    {
        return false;
    }
    side.bytes += (head.len() + payload.len()) as u64;
    side.mid_frame = false;
    true
}

/// Whether the capability token is in `carry` followed by `payload` unmasked with `key`. The
/// payload is unmasked [`WINDOW`] bytes at a time into `scratch` (after the carry), so no
/// unmasked copy of a whole frame is ever made; on return `carry` holds the last bytes unmasked,
/// the token's length less one, for a token split across frames.
fn holds_token(
    outward: &OutwardToken,
    carry: &mut Zeroizing<Vec<u8>>,
    payload: &[u8],
    key: [u8; 4],
    scratch: &mut Zeroizing<Vec<u8>>,
) -> bool {
    let keep = outward.len().saturating_sub(1);
    // `WINDOW` is a multiple of 4: each window starts at key byte 0.
    for chunk in payload.chunks(WINDOW) {
        scratch.clear();
        scratch.reserve_exact(carry.len() + chunk.len());
        scratch.extend_from_slice(carry);
        scratch.extend(chunk.iter().zip(key.iter().cycle()).map(|(b, k)| b ^ k));
        if outward.found_in(scratch) {
            return true;
        }
        let from = scratch.len().saturating_sub(keep);
        carry.clear();
        carry.extend_from_slice(scratch.get(from..).unwrap_or_default());
    }
    false
}

/// The agent's frames, each read whole (bounded) and forwarded byte for byte, masked as the
/// agent masked it. A frame whose payload (unmasked, with the end of the frame before it)
/// holds the capability token the handshake presented is not forwarded: the socket closes.
async fn from_agent(
    shared: &Shared,
    mut reader: ReadHalf<TokioIo<Upgraded>>,
    max: u64,
    outward: Option<&OutwardToken>,
) -> Stop {
    let mut buf = BytesMut::new();
    // The size so far of the data message in progress.
    let mut message: Option<u64> = None;
    // The last unmasked payload bytes of data frames, the token's length less one, for a
    // token split between two frames; a control frame's own; and one window unmasked.
    let mut tail: Zeroizing<Vec<u8>> = Zeroizing::new(Vec::new());
    let mut control_carry: Zeroizing<Vec<u8>> = Zeroizing::new(Vec::new());
    let mut scratch: Zeroizing<Vec<u8>> = Zeroizing::new(Vec::new());
    loop {
        let head = match Head::read(&buf) {
            Err(_) => return Stop::Protocol,
            Ok(Some(head)) if head.len > max => return Stop::TooLarge,
            Ok(Some(head)) if (buf.len() - head.size) as u64 >= head.len => head,
            Ok(_) => {
                if !read_more(&mut reader, &mut buf).await {
                    let mut side = shared.to_upstream.lock().await;
                    let _ = side.writer.shutdown().await;
                    return Stop::End;
                }
                shared.touch();
                continue;
            }
        };
        if let Some(stop) = check_frame(&head, &mut message, max) {
            return stop;
        }
        // INVARIANT: the whole frame is in `buf` (checked above), so its length fits a `usize`.
        let end = head.size + head.len as usize;
        if let Some(outward) = outward {
            let payload = buf.get(head.size..end).unwrap_or_default();
            // A control frame (which may sit between a message's fragments) is searched on its
            // own; the tail joins data frames only, as the upstream joins a message's fragments:
            // a ping between two halves of the token must not hide it.
            let carry = if head.opcode.is_control() {
                control_carry.clear();
                &mut control_carry
            } else {
                &mut tail
            };
            let key = head.mask.unwrap_or([0; 4]);
            if holds_token(outward, carry, payload, key, &mut scratch) {
                return Stop::TokenOutward;
            }
        }
        if head.opcode == Opcode::Close {
            shared.saw_close(Peer::Agent);
        }
        let frame = buf.split_to(end);
        if !send(&shared.to_upstream, &frame).await {
            return Stop::End;
        }
    }
}

/// Checks a frame's head against the message in progress and the bound; `Some` stops the
/// direction. Counts a data frame into `message`.
fn check_frame(head: &Head, message: &mut Option<u64>, max: u64) -> Option<Stop> {
    if head.len > max {
        return Some(Stop::TooLarge);
    }
    match head.opcode {
        Opcode::Text | Opcode::Binary if message.is_some() => return Some(Stop::Protocol),
        Opcode::Continuation if message.is_none() => return Some(Stop::Protocol),
        Opcode::Text | Opcode::Binary | Opcode::Continuation => {
            let size = message.unwrap_or(0).saturating_add(head.len);
            if size > max {
                return Some(Stop::TooLarge);
            }
            *message = (!head.fin).then_some(size);
        }
        Opcode::Close | Opcode::Ping | Opcode::Pong => {}
    }
    None
}

/// The upstream's frames, scrubbed and written to the agent anew: a data frame's payload goes
/// through the message's scrubber as it arrives (only the scrubbed output is held until the
/// frame ends, when its length is known for the new head); a control frame is read whole (125
/// bytes at most).
async fn from_upstream(
    shared: &Shared,
    mut reader: ReadHalf<TokioIo<Upgraded>>,
    max: u64,
    state: &AppState,
) -> Stop {
    let mut buf = BytesMut::new();
    let mut message: Option<Message> = None;
    // The declarations the message's scrubber was last built from or adopted.
    let mut built_from: Arc<Declarations> = state.declarations();
    let mut size: Option<u64> = None;
    loop {
        let head = match Head::read(&buf) {
            Err(FrameError::Reserved) => {
                // A compressed frame (`permessage-deflate` sets RSV1), though none was offered:
                // never relayed, scrubbed or not.
                tracing::info!("Upstream sent a WebSocket frame with a reserved bit set");
                return Stop::Protocol;
            }
            Err(_) => return Stop::Protocol,
            Ok(Some(head)) => head,
            Ok(None) => {
                if !read_more(&mut reader, &mut buf).await {
                    return upstream_ended(shared).await;
                }
                shared.touch();
                continue;
            }
        };
        // A server never masks its frames (RFC 6455 section 5.1).
        if head.mask.is_some() {
            return Stop::Protocol;
        }
        if let Some(stop) = check_frame(&head, &mut size, max) {
            return stop;
        }
        buf.advance(head.size);
        if head.opcode.is_control() {
            // INVARIANT: a control frame's length is at most 125 (`Head::read` checked it).
            let len = head.len as usize;
            while buf.len() < len {
                if !read_more(&mut reader, &mut buf).await {
                    return upstream_ended(shared).await;
                }
                shared.touch();
            }
            let payload = buf.split_to(len);
            if head.opcode == Opcode::Close {
                shared.saw_close(Peer::Upstream);
            }
            let mut scrubber = state.declarations().scrubber();
            let Some(control) = scrub_control(head.opcode, &payload, &mut scrubber) else {
                return Stop::Protocol;
            };
            let mut out = Vec::new();
            frame::write(&mut out, true, head.opcode, &control, None);
            if !send_frame(&shared.to_agent, &out, &[]).await {
                return Stop::End;
            }
            continue;
        }
        // The declarations in force now: a message still streaming when a reload brings a new
        // secret hides that one too from its next fragment on (the new declarations keep the
        // old secrets), as an answer's body does.
        let latest = state.declarations();
        let mut current = match message.take() {
            Some(mut current) => {
                if !Arc::ptr_eq(&latest, &built_from) {
                    current.scrubber.adopt(latest.scrubber());
                }
                current
            }
            None => Message {
                opcode: head.opcode,
                scrubber: latest.scrubber(),
                emitted: false,
            },
        };
        built_from = latest;
        // INVARIANT: `check_frame` bounded the length by `max`, which fits memory.
        let mut scrubbed = Vec::with_capacity(usize::try_from(head.len).unwrap_or(0));
        let mut remaining = head.len;
        loop {
            let take = usize::try_from(remaining).map_or(buf.len(), |left| left.min(buf.len()));
            if take > 0 {
                let piece = buf.split_to(take);
                current.push(&piece, &mut scrubbed);
                remaining -= take as u64;
            }
            if remaining == 0 {
                break;
            }
            if !read_more(&mut reader, &mut buf).await {
                return upstream_ended(shared).await;
            }
            shared.touch();
        }
        let frame_head = current.end_frame(head.fin, &mut scrubbed);
        if !head.fin {
            message = Some(current);
        }
        if let Some(frame_head) = frame_head
            && !send_frame(&shared.to_agent, &frame_head, &scrubbed).await
        {
            return Stop::End;
        }
    }
}

/// The upstream's stream ended (or broke): the agent's is ended too.
async fn upstream_ended(shared: &Shared) -> Stop {
    let mut side = shared.to_agent.lock().await;
    let _ = side.writer.shutdown().await;
    Stop::End
}

/// A control frame's payload, scrubbed on its own; one that would grow past 125 bytes carries
/// the marker alone (a close frame keeps its code). `None` for a close payload of one byte.
fn scrub_control(opcode: Opcode, payload: &[u8], scrubber: &mut Scrubber) -> Option<Vec<u8>> {
    let (code, text) = match opcode {
        Opcode::Close if payload.len() == 1 => return None,
        Opcode::Close if payload.len() >= 2 => payload.split_at(2),
        _ => (&[][..], payload),
    };
    let mut scrubbed = scrubber.push_slice(text);
    scrubbed.extend_from_slice(&scrubber.finish_vec());
    if code.len() + scrubbed.len() > MAX_CONTROL {
        scrubbed = REDACTED.as_bytes().to_vec();
    }
    let mut out = code.to_vec();
    out.extend_from_slice(&scrubbed);
    Some(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;

    const SECRET: &str = "canary-ws-unit-Hq3vT8xL5pZ2mR7wK9nB";

    fn scrubber() -> Scrubber {
        Scrubber::from_secrets([SECRET.as_bytes()]).unwrap()
    }

    /// Relays one message given as fragments, each arriving in pieces of 7 bytes as the relay
    /// reads them; returns each frame Mint writes: (first byte, payload).
    fn relay(fragments: &[&[u8]]) -> Vec<(u8, Vec<u8>)> {
        let mut message = Message {
            opcode: Opcode::Text,
            scrubber: scrubber(),
            emitted: false,
        };
        let mut out = Vec::new();
        for (i, fragment) in fragments.iter().enumerate() {
            let mut scrubbed = Vec::new();
            for piece in fragment.chunks(7) {
                message.push(piece, &mut scrubbed);
            }
            if let Some(head) = message.end_frame(i + 1 == fragments.len(), &mut scrubbed) {
                out.extend_from_slice(&head);
                out.extend_from_slice(&scrubbed);
            }
        }
        let mut frames = Vec::new();
        let mut rest = out.as_slice();
        while !rest.is_empty() {
            let head = Head::read(rest).unwrap().unwrap();
            let end = head.size + head.len as usize;
            frames.push((rest[0], rest[head.size..end].to_vec()));
            rest = &rest[end..];
        }
        frames
    }

    /// A secret cut across fragments anywhere is redacted, the message arrives whole, and it
    /// starts with its opcode and ends with FIN.
    #[test]
    fn a_secret_split_across_fragments_is_redacted() {
        let text = format!("{}{SECRET} and after", "x".repeat(40));
        let bytes = text.as_bytes();
        for cut in 0..=bytes.len() {
            let frames = relay(&[&bytes[..cut], &bytes[cut..]]);
            let joined: Vec<u8> = frames.iter().flat_map(|(_, p)| p.clone()).collect();
            let expected = format!("{}{REDACTED} and after", "x".repeat(40));
            assert_eq!(joined, expected.as_bytes(), "cut {cut}");
            assert_eq!(frames[0].0 & 0x0F, 0x1, "the first frame is text");
            assert!(frames[1..].iter().all(|(first, _)| first & 0x0F == 0));
            assert!(frames.last().unwrap().0 & 0x80 != 0, "FIN at the end");
        }
    }

    /// The chunking side channel: the frames Mint writes for a message whose held bytes start
    /// the secret have exactly the sizes and boundaries of those for a message with other bytes
    /// there, wherever the fragments are cut.
    #[test]
    fn frame_boundaries_never_show_a_held_back_prefix() {
        let filler = "y".repeat(700);
        for prefix in [1, 5, 12, SECRET.len() - 1] {
            let held = format!("{filler}{}", &SECRET[..prefix]);
            let other = format!("{filler}{}", "z".repeat(prefix));
            for cut in (0..held.len()).step_by(37) {
                let tail = "q".repeat(200);
                let shape = |text: &str| -> Vec<(u8, usize)> {
                    relay(&[
                        &text.as_bytes()[..cut],
                        &text.as_bytes()[cut..],
                        tail.as_bytes(),
                    ])
                    .into_iter()
                    .map(|(first, payload)| (first, payload.len()))
                    .collect()
                };
                assert_eq!(shape(&held), shape(&other), "prefix {prefix} cut {cut}");
            }
        }
    }

    /// The token is found wherever it sits in a masked frame, across the search's windows
    /// and split between two frames, and the carry never grows past the token's length less
    /// one.
    #[test]
    fn the_token_is_found_across_windows_and_frames_without_unmasking_a_whole_frame() {
        let token = "mint_cap_0123456789ab_canaryWindowTokenQx7Lm2Vt9Hd4";
        let outward = OutwardToken::new(token);
        let key = [0x5a, 0x13, 0xc4, 0x7e];
        let mask = |plain: &[u8]| -> Vec<u8> {
            plain
                .iter()
                .zip(key.iter().cycle())
                .map(|(b, k)| b ^ k)
                .collect()
        };
        let mut scratch = Zeroizing::new(Vec::new());
        for at in [
            0,
            1,
            WINDOW - 10,
            WINDOW - 1,
            WINDOW,
            2 * WINDOW - 3,
            40_000,
        ] {
            let mut plain = vec![b'.'; 50_000];
            plain[at..at + token.len()].copy_from_slice(token.as_bytes());
            let mut carry = Zeroizing::new(Vec::new());
            assert!(
                holds_token(&outward, &mut carry, &mask(&plain), key, &mut scratch),
                "at {at}"
            );
            // Cut in two frames anywhere around it: found at the second.
            for cut in [at + 1, at + token.len() / 2, at + token.len() - 1] {
                let mut carry = Zeroizing::new(Vec::new());
                let (first, second) = plain.split_at(cut);
                assert!(!holds_token(
                    &outward,
                    &mut carry,
                    &mask(first),
                    key,
                    &mut scratch
                ));
                assert!(carry.len() < token.len());
                assert!(
                    holds_token(&outward, &mut carry, &mask(second), key, &mut scratch),
                    "at {at} cut {cut}"
                );
            }
        }
        let mut carry = Zeroizing::new(Vec::new());
        assert!(!holds_token(
            &outward,
            &mut carry,
            &mask(&vec![b'.'; 50_000]),
            key,
            &mut scratch
        ));
        assert!(scratch.capacity() < WINDOW + 2 * token.len() + 64);
    }

    #[test]
    fn control_frames_are_scrubbed_and_stay_within_125_bytes() {
        let ping = scrub_control(
            Opcode::Ping,
            format!("p {SECRET}").as_bytes(),
            &mut scrubber(),
        );
        assert_eq!(ping.unwrap(), format!("p {REDACTED}").as_bytes());
        let mut close = 4000u16.to_be_bytes().to_vec();
        close.extend_from_slice(format!("bye {SECRET}").as_bytes());
        let scrubbed = scrub_control(Opcode::Close, &close, &mut scrubber()).unwrap();
        assert_eq!(&scrubbed[..2], &4000u16.to_be_bytes());
        assert_eq!(&scrubbed[2..], format!("bye {REDACTED}").as_bytes());
        // A short secret repeated: the marker is longer, so the payload would grow past 125.
        let mut short = Scrubber::from_secrets([b"k3y9".as_slice()]).unwrap();
        let mut close = 1000u16.to_be_bytes().to_vec();
        close.extend_from_slice("k3y9 ".repeat(24).as_bytes());
        let scrubbed = scrub_control(Opcode::Close, &close, &mut short).unwrap();
        assert_eq!(&scrubbed[..2], &1000u16.to_be_bytes());
        assert_eq!(&scrubbed[2..], REDACTED.as_bytes());
        assert!(scrub_control(Opcode::Close, &[3], &mut scrubber()).is_none());
    }

    #[test]
    fn data_frames_follow_the_message_in_progress_and_the_bound() {
        let head = |fin, opcode, len| Head {
            fin,
            opcode,
            mask: None,
            len,
            size: 2,
        };
        let mut message = None;
        assert_eq!(
            check_frame(&head(false, Opcode::Text, 10), &mut message, 25),
            None
        );
        assert_eq!(message, Some(10));
        assert_eq!(
            check_frame(&head(true, Opcode::Ping, 3), &mut message, 25),
            None
        );
        assert_eq!(
            check_frame(&head(true, Opcode::Binary, 1), &mut message, 25),
            Some(Stop::Protocol)
        );
        assert_eq!(
            check_frame(&head(true, Opcode::Continuation, 16), &mut message, 25),
            Some(Stop::TooLarge)
        );
        let mut message = Some(10);
        assert_eq!(
            check_frame(&head(true, Opcode::Continuation, 15), &mut message, 25),
            None
        );
        assert_eq!(message, None);
        assert_eq!(
            check_frame(&head(true, Opcode::Continuation, 1), &mut message, 25),
            Some(Stop::Protocol)
        );
        assert_eq!(
            check_frame(&head(true, Opcode::Text, 26), &mut None, 25),
            Some(Stop::TooLarge)
        );
    }
}
