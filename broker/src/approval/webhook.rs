//! Telling the operator that a request waits: `mint serve --approval-webhook URL` POSTs a short
//! summary of each newly held request to an HTTPS endpoint (an ntfy topic, a Slack incoming
//! webhook, anything that takes JSON).
//!
//! A notification only tells: decisions are taken on the operator socket alone, and a webhook
//! that fails, hangs or answers anything never approves or denies. It goes through the broker's
//! own upstream client, so it gets the same address checks (a webhook host that resolves to a
//! private or metadata address is refused unless `--resolve` pins it), the same TLS trust and no
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
    pub async fn notify(self, book: Arc<super::ApprovalBook>, upstream: UpstreamClient) {
        let webhook = Arc::new(self);
        let mut events = book.subscribe();
        loop {
            match events.recv().await {
                Ok(BookEvent::Pending(view)) => {
                    let webhook = Arc::clone(&webhook);
                    let upstream = upstream.clone();
                    tokio::spawn(async move { webhook.send(&view, &upstream).await });
                }
                Ok(_) => {}
                Err(RecvError::Lagged(missed)) => {
                    tracing::warn!(webhook.host = %webhook.host(), missed, "Approval webhook: fell behind; some waiting requests were not notified");
                }
                Err(RecvError::Closed) => return,
            }
        }
    }

    async fn send(&self, view: &PendingView, upstream: &UpstreamClient) {
        let (body, content_type) = self.body(view);
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

    /// The notification's body and content type.
    fn body(&self, view: &PendingView) -> (Vec<u8>, &'static str) {
        let text = summary_text(view);
        match self.format {
            WebhookFormat::Ntfy => (text.into_bytes(), "text/plain; charset=utf-8"),
            WebhookFormat::Json => {
                let body = serde_json::json!({ "text": text, "approval": view });
                (
                    serde_json::to_vec(&body).unwrap_or_default(),
                    "application/json",
                )
            }
        }
    }
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
        let (body, kind) = hook.body(&view);
        assert_eq!(kind, "application/json");
        let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(json["approval"]["id"], "ap-abcdefgh");
        assert_eq!(json["text"], text);
    }
}
