//! Telling the operator that a request waits: `mint serve --approval-webhook URL` POSTs a short
//! summary of each newly held request to an HTTPS endpoint (an ntfy topic, a Slack incoming
//! webhook, anything that takes JSON).
//!
//! A notification only tells: decisions are taken on the operator socket alone, and a webhook
//! that fails, hangs or answers anything never approves or denies. It goes through the broker's
//! own upstream client, so it gets the same address checks (a webhook host that resolves to a
//! private, link-local, CGNAT or metadata address is refused unless `--resolve` pins it; loopback
//! is allowed, for a local relay), the same TLS trust and no
//! redirects. Its body holds what `mint approvals list` shows (never a secret: the request has not
//! been substituted), with the arguments cut as there. The URL itself is often a secret (Slack's
//! is): it is never logged, only its host.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{CONTENT_TYPE, HeaderValue};
use http_body_util::Full;
use tokio::sync::broadcast::error::RecvError;

use super::{BookEvent, PendingView};
use crate::net::upstream::UpstreamClient;

/// How long one notification may take, connecting included.
const NOTIFY_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a request must have waited before it is notified: one an agent withdraws at once
/// (a flood of held-and-dropped requests) is never sent.
const SETTLE: Duration = Duration::from_secs(1);

/// Notifications sent in a burst, and one more per [`REFILL`] after it (about what Slack's and
/// ntfy's rate limits allow); past that they are counted, and the next one says how many.
const BURST: u32 = 5;
const REFILL: Duration = Duration::from_secs(1);

/// Notifications in flight at once.
const CONCURRENT: usize = 4;

/// The shape of the notification body.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum WebhookFormat {
    /// `application/json`: `text` (what a Slack incoming webhook shows) and `approval`, the
    /// held request as `mint approvals list --json` shows it.
    Json,
    /// `text/plain` with a `Title` header: what an ntfy topic URL takes.
    Ntfy,
}

/// Where notifications go.
#[derive(Clone)]
pub struct Webhook {
    url: http::Uri,
    format: WebhookFormat,
}

/// Why a webhook URL is refused.
#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    /// Not a URL.
    #[error("--approval-webhook is not a URL")]
    NotUrl,
    /// Not `https://`.
    #[error(
        "--approval-webhook must be an https:// URL (the summary names your agents' destinations)"
    )]
    NotHttps,
    /// A user or password in the URL.
    #[error(
        "--approval-webhook may not carry a user or password; put a token in the path or query as the service expects"
    )]
    UserInfo,
}

// === impl Webhook ===

impl std::fmt::Debug for Webhook {
    /// The host only: the path and query of a webhook URL are often its secret.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Webhook")
            .field("host", &self.host())
            .field("format", &self.format)
            .finish()
    }
}

impl Webhook {
    /// Checks `url`: an absolute `https://` URL without a user part.
    pub fn parse(url: &str, format: WebhookFormat) -> Result<Webhook, WebhookError> {
        let uri: http::Uri = url.parse().map_err(|_| WebhookError::NotUrl)?;
        if uri.scheme_str() != Some("https") {
            return Err(WebhookError::NotHttps);
        }
        let authority = uri.authority().ok_or(WebhookError::NotUrl)?;
        if authority.as_str().contains('@') {
            return Err(WebhookError::UserInfo);
        }
        Ok(Webhook { url: uri, format })
    }

    /// The webhook's host, what logs name.
    pub fn host(&self) -> &str {
        self.url.host().unwrap_or("?")
    }

    /// Sends a notification for each request that starts waiting, until the task is aborted.
    /// Each notification is sent on a task of its own, so a slow endpoint delays none other.
    /// A request is notified once it has waited a second and still waits, five in a burst and
    /// then one a second, at most four at once.
    pub async fn notify(self, book: Arc<super::ApprovalBook>, upstream: UpstreamClient) {
        let webhook = Arc::new(self);
        let pace = Arc::new(std::sync::Mutex::new(Pace {
            tokens: BURST,
            refilled: tokio::time::Instant::now(),
            unsent: 0,
        }));
        let in_flight = Arc::new(tokio::sync::Semaphore::new(CONCURRENT));
        let mut events = book.subscribe();
        loop {
            match events.recv().await {
                Ok(BookEvent::Pending(view)) => {
                    let webhook = Arc::clone(&webhook);
                    let upstream = upstream.clone();
                    let book = Arc::clone(&book);
                    let pace = Arc::clone(&pace);
                    let in_flight = Arc::clone(&in_flight);
                    tokio::spawn(async move {
                        tokio::time::sleep(SETTLE).await;
                        if !book.is_waiting(&view.id) {
                            return;
                        }
                        let Some(unsent) = take_turn(&pace) else {
                            tracing::debug!(approval = %view.id, "Approval webhook: over its rate; counted for the next notification");
                            return;
                        };
                        let Ok(_permit) = in_flight.acquire().await else {
                            return;
                        };
                        webhook.send(&view, unsent, &upstream).await;
                    });
                }
                Ok(_) => {}
                Err(RecvError::Lagged(missed)) => {
                    tracing::warn!(webhook.host = %webhook.host(), missed, "Approval webhook: fell behind; some waiting requests were not notified");
                }
                Err(RecvError::Closed) => return,
            }
        }
    }

    async fn send(&self, view: &PendingView, unsent: u64, upstream: &UpstreamClient) {
        let (body, content_type) = self.body(view, unsent);
        let mut request = http::Request::new(Full::new(Bytes::from(body)));
        *request.method_mut() = http::Method::POST;
        *request.uri_mut() = self.url.clone();
        let headers = request.headers_mut();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
        if self.format == WebhookFormat::Ntfy
            && let Ok(title) = HeaderValue::from_str(&format!("Mint: approval {} waits", view.id))
        {
            headers.insert("title", title);
        }
        // The webhook's own address checks: private targets only through a `--resolve` pin.
        let sent = tokio::time::timeout(NOTIFY_TIMEOUT, upstream.send(request, false)).await;
        match sent {
            Ok(Ok(response)) if response.status().is_success() => {
                tracing::info!(approval = %view.id, webhook.host = %self.host(), "Approval webhook notified");
            }
            Ok(Ok(response)) => {
                tracing::warn!(approval = %view.id, webhook.host = %self.host(), status = response.status().as_u16(), "Approval webhook answered with an error; nothing was decided");
            }
            Ok(Err(error)) => {
                let why = crate::net::upstream::connect_error(&error)
                    .map_or_else(|| "the connection failed".to_owned(), ToString::to_string);
                tracing::warn!(approval = %view.id, webhook.host = %self.host(), error = %why, "Approval webhook not reached; nothing was decided");
            }
            Err(_) => {
                tracing::warn!(approval = %view.id, webhook.host = %self.host(), "Approval webhook did not answer in time; nothing was decided");
            }
        }
    }

    /// The notification's body and content type; `unsent` notifications were dropped for the
    /// rate before this one.
    fn body(&self, view: &PendingView, unsent: u64) -> (Vec<u8>, &'static str) {
        let mut text = summary_text(view);
        if unsent > 0 {
            text.push_str(&format!(
                "\n({unsent} more requests started waiting and were not notified: `mint approvals list`)"
            ));
        }
        match self.format {
            WebhookFormat::Ntfy => (text.into_bytes(), "text/plain; charset=utf-8"),
            WebhookFormat::Json => {
                // Slack reads `<…>` in `text` as links and mentions (`<!channel>`) and `&` as an
                // entity: the agent's fields are shown, never interpreted.
                let text = text
                    .replace('&', "&amp;")
                    .replace('<', "&lt;")
                    .replace('>', "&gt;");
                let body = serde_json::json!({ "text": text, "approval": view });
                (
                    serde_json::to_vec(&body).unwrap_or_default(),
                    "application/json",
                )
            }
        }
    }
}

/// The notification rate's state.
struct Pace {
    tokens: u32,
    refilled: tokio::time::Instant,
    /// Notifications dropped for the rate since the last one sent.
    unsent: u64,
}

/// A turn to send, with how many were dropped before it; `None` when over the rate.
fn take_turn(pace: &std::sync::Mutex<Pace>) -> Option<u64> {
    let mut pace = pace
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let now = tokio::time::Instant::now();
    let refills = now.saturating_duration_since(pace.refilled).as_secs() / REFILL.as_secs().max(1);
    if refills > 0 {
        pace.tokens = BURST.min(
            pace.tokens
                .saturating_add(u32::try_from(refills).unwrap_or(u32::MAX)),
        );
        pace.refilled = now;
    }
    if pace.tokens == 0 {
        pace.unsent += 1;
        return None;
    }
    pace.tokens -= 1;
    Some(std::mem::take(&mut pace.unsent))
}

/// One paragraph: who wants what, where, under which rule, how to decide.
fn summary_text(view: &PendingView) -> String {
    let s = &view.summary;
    let mut text = format!(
        "Mint: {} wants {} {}{}",
        s.agent,
        s.method,
        s.destination(),
        s.path
    );
    if let Some(tool) = &s.tool {
        text.push_str(&format!(" (MCP tool {tool})"));
    }
    if !s.aliases.is_empty() {
        text.push_str(&format!(" with {}", s.aliases.join(", ")));
    }
    text.push_str(&format!(
        ". Rule {}; {} s left. Approval {}: `mint approvals approve {}` or `mint approvals deny {}`.",
        s.rules.join(", "),
        view.seconds_left,
        view.id,
        view.id,
        view.id
    ));
    if let Some(arguments) = &s.arguments {
        text.push_str("\nArguments:\n");
        text.push_str(arguments);
    }
    text
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;
    use crate::approval::Summary;

    #[test]
    fn only_https_urls_without_a_user_part_are_taken() {
        assert!(Webhook::parse("https://ntfy.sh/mint-ops", WebhookFormat::Ntfy).is_ok());
        assert!(matches!(
            Webhook::parse("http://ntfy.sh/mint-ops", WebhookFormat::Ntfy),
            Err(WebhookError::NotHttps)
        ));
        assert!(matches!(
            Webhook::parse("https://u:p@hooks.example.com/x", WebhookFormat::Json),
            Err(WebhookError::UserInfo)
        ));
        assert!(matches!(
            Webhook::parse("/relative", WebhookFormat::Json),
            Err(WebhookError::NotHttps)
        ));
    }

    #[test]
    fn the_debug_of_a_webhook_never_shows_its_path() {
        let hook = Webhook::parse(
            "https://hooks.slack.com/services/T000/B000/canary-hook-secret",
            WebhookFormat::Json,
        )
        .unwrap();
        let shown = format!("{hook:?}");
        assert!(!shown.contains("canary-hook-secret"), "{shown}");
        assert!(shown.contains("hooks.slack.com"), "{shown}");
    }

    #[test]
    fn the_summary_says_who_what_where_and_how_to_decide() {
        let view = PendingView {
            id: "ap-abcdefgh".to_owned(),
            summary: Summary {
                request_id: "r-1".to_owned(),
                agent: "mino".to_owned(),
                rules: vec!["ask".to_owned()],
                method: "POST".to_owned(),
                scheme: "https".to_owned(),
                host: "api.github.com".to_owned(),
                port: 443,
                path: "/repos/o/r/issues".to_owned(),
                query_keys: vec![],
                tool: None,
                arguments: None,
                aliases: vec!["github".to_owned()],
            },
            seconds_left: 42,
        };
        let text = summary_text(&view);
        assert!(
            text.starts_with(
                "Mint: mino wants POST https://api.github.com:443/repos/o/r/issues with github."
            ),
            "{text}"
        );
        assert!(
            text.contains("mint approvals approve ap-abcdefgh"),
            "{text}"
        );
        let hook = Webhook::parse("https://x.example/h", WebhookFormat::Json).unwrap();
        let (body, kind) = hook.body(&view, 0);
        assert_eq!(kind, "application/json");
        let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(json["approval"]["id"], "ap-abcdefgh");
        assert_eq!(json["text"], text);
    }

    #[test]
    fn slack_markup_from_the_agent_is_escaped_in_the_json_text() {
        let view = PendingView {
            id: "ap-abcdefgh".to_owned(),
            summary: Summary {
                request_id: "r-1".to_owned(),
                agent: "mino".to_owned(),
                rules: vec!["ask".to_owned()],
                method: "POST".to_owned(),
                scheme: "https".to_owned(),
                host: "mcp.example.com".to_owned(),
                port: 443,
                path: "/mcp".to_owned(),
                query_keys: vec![],
                tool: Some("<!channel>".to_owned()),
                arguments: Some("<https://evil.example|approve safely> & more".to_owned()),
                aliases: vec![],
            },
            seconds_left: 42,
        };
        let hook = Webhook::parse("https://x.example/h", WebhookFormat::Json).unwrap();
        let (body, _) = hook.body(&view, 3);
        let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
        let text = json["text"].as_str().unwrap();
        assert!(!text.contains('<') && !text.contains('>'), "{text}");
        assert!(
            text.contains("&lt;!channel&gt;") && text.contains("&amp; more"),
            "{text}"
        );
        assert!(text.contains("(3 more requests started waiting"), "{text}");
    }

    #[test]
    fn past_the_burst_notifications_are_counted_not_sent() {
        let pace = std::sync::Mutex::new(Pace {
            tokens: BURST,
            refilled: tokio::time::Instant::now(),
            unsent: 0,
        });
        for _ in 0..BURST {
            assert_eq!(take_turn(&pace), Some(0));
        }
        assert_eq!(take_turn(&pace), None);
        assert_eq!(take_turn(&pace), None);
        pace.lock().unwrap().refilled -= REFILL;
        assert_eq!(take_turn(&pace), Some(2));
    }
}
