//! What the echo upstream received: one [`RecordedRequest`] per request, in arrival order.

use std::borrow::Cow;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// One request as the echo upstream received it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedRequest {
    /// The method, such as `GET`.
    pub method: String,
    /// The path, still percent-encoded as it was sent.
    pub path: String,
    /// The raw query, without `?`.
    pub query: Option<String>,
    /// `HTTP/1.1` or `HTTP/2.0`.
    pub version: String,
    /// The target authority: HTTP/2's `:authority`, else the `Host` header.
    pub authority: Option<String>,
    /// Every header in arrival order: lowercase name, value (non-UTF-8 bytes replaced by U+FFFD).
    pub headers: Vec<(String, String)>,
    /// The body, as far as it was read.
    pub body: Vec<u8>,
    /// Whether the whole body was read (false: over the size limit, or the client failed).
    pub body_complete: bool,
}

impl RecordedRequest {
    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Every value of header `name` (case-insensitive).
    pub fn header_values<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.headers
            .iter()
            .filter(move |(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The names of the headers whose name starts with `prefix` (case-insensitive), such as
    /// `proxy-` or `mint-`.
    pub fn header_names_starting_with(&self, prefix: &str) -> Vec<&str> {
        self.headers
            .iter()
            .map(|(n, _)| n.as_str())
            .filter(|n| {
                n.len() >= prefix.len()
                    && n.is_char_boundary(prefix.len())
                    && n[..prefix.len()].eq_ignore_ascii_case(prefix)
            })
            .collect()
    }

    /// The body as text (invalid UTF-8 replaced).
    pub fn body_text(&self) -> Cow<'_, str> {
        String::from_utf8_lossy(&self.body)
    }

    /// Whether `needle` occurs in the path, the query, a header name or value, or the body.
    pub fn contains(&self, needle: &str) -> bool {
        let needle_bytes = needle.as_bytes();
        self.path.contains(needle)
            || self.query.as_deref().is_some_and(|q| q.contains(needle))
            || self
                .headers
                .iter()
                .any(|(n, v)| n.contains(needle) || v.contains(needle))
            || (!needle_bytes.is_empty()
                && self
                    .body
                    .windows(needle_bytes.len())
                    .any(|w| w == needle_bytes))
    }
}

/// The requests an echo upstream has received. Clones share one log.
#[derive(Debug, Clone, Default)]
pub struct RequestLog {
    inner: Arc<Mutex<Vec<RecordedRequest>>>,
}

impl RequestLog {
    fn lock(&self) -> MutexGuard<'_, Vec<RecordedRequest>> {
        // A panicking test thread cannot leave the vector half-written: pushes are atomic.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) fn push(&self, request: RecordedRequest) {
        self.lock().push(request);
    }

    /// A copy of every request so far, oldest first.
    pub fn snapshot(&self) -> Vec<RecordedRequest> {
        self.lock().clone()
    }

    /// The most recent request.
    pub fn last(&self) -> Option<RecordedRequest> {
        self.lock().last().cloned()
    }

    /// How many requests arrived.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether none arrived.
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    /// Forgets every request so far.
    pub fn clear(&self) {
        self.lock().clear();
    }

    /// Whether any request so far contains `needle` (see [`RecordedRequest::contains`]).
    pub fn any_contains(&self, needle: &str) -> bool {
        self.lock().iter().any(|r| r.contains(needle))
    }

    /// Blocks until at least `count` requests arrived or `timeout` passed; says whether they did.
    pub fn wait_for_count(&self, count: usize, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if self.len() >= count {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// [`wait_for_count`](Self::wait_for_count) for async code.
    pub async fn wait_for_count_async(&self, count: usize, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if self.len() >= count {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}
