//! The echo upstream's routes: record the request, then answer as its path says (see the table
//! in the module above).

use std::io::Write as _;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use flate2::Compression;
use flate2::write::GzEncoder;
use http_body_util::{BodyExt as _, Limited};
use hyper::body::Incoming;
use hyper::header::{
    CACHE_CONTROL, CONTENT_ENCODING, CONTENT_LENGTH, CONTENT_TYPE, HeaderName, HeaderValue,
    LOCATION, SET_COOKIE,
};
use hyper::http::request::Parts;
use hyper::{Request, Response, StatusCode};
use serde_json::json;

use super::body::{ScriptedBody, Step};
use super::conn::ConnControl;
use super::encode::{forms_object, json_string, percent_decode};
use super::record::{RecordedRequest, RequestLog};

/// The longest `/stall` and `/stall-body` wait, and the longest SSE interval.
const MAX_WAIT_MS: u64 = 600_000;
/// The most SSE events one request may ask for.
const MAX_EVENTS: u64 = 10_000;
/// The largest `/big` answer (1 TiB: streamed, never held in memory).
const MAX_BIG: u64 = 1 << 40;
/// What `/reset-body` claims it will send, and what it sends before the reset.
const RESET_BODY_CLAIMED: u64 = 1 << 20;
const RESET_BODY_SENT: u64 = 4096;
/// The largest chunk of `/echo-encoded`; chunks cycle through 1..=this many bytes.
const MAX_ENCODED_CHUNK: usize = 7;

/// What every connection of one server shares.
#[derive(Debug)]
pub(super) struct ServerState {
    pub(super) requests: RequestLog,
    pub(super) require_header: Option<(String, String)>,
    pub(super) max_request_body: usize,
}

type Answer = Response<ScriptedBody>;

/// Reads and records the request, then answers it.
pub(super) async fn respond(
    request: Request<Incoming>,
    state: &ServerState,
    control: Arc<ConnControl>,
) -> Answer {
    let (parts, body) = request.into_parts();
    let (body, body_complete) = match Limited::new(body, state.max_request_body).collect().await {
        Ok(collected) => (collected.to_bytes(), true),
        Err(_) => (Bytes::new(), false),
    };
    let recorded = record(&parts, &body, body_complete);
    state.requests.push(recorded.clone());
    if !body_complete {
        return error(
            StatusCode::PAYLOAD_TOO_LARGE,
            "request body too large or unreadable",
        );
    }
    if let Some((name, value)) = &state.require_header {
        let present = parts
            .headers
            .get_all(name.as_str())
            .iter()
            .any(|v| v.as_bytes() == value.as_bytes());
        if !present {
            return error(StatusCode::UNAUTHORIZED, "missing or wrong API key header");
        }
    }
    route(&parts, &recorded, control)
        .await
        .unwrap_or_else(|refusal| error(refusal.status, &refusal.message))
}

fn record(parts: &Parts, body: &Bytes, body_complete: bool) -> RecordedRequest {
    let authority = parts.uri.authority().map(ToString::to_string).or_else(|| {
        parts
            .headers
            .get(hyper::header::HOST)
            .map(|h| String::from_utf8_lossy(h.as_bytes()).into_owned())
    });
    RecordedRequest {
        method: parts.method.to_string(),
        path: parts.uri.path().to_owned(),
        query: parts.uri.query().map(str::to_owned),
        version: format!("{:?}", parts.version),
        authority,
        headers: parts
            .headers
            .iter()
            .map(|(name, value)| {
                (
                    name.as_str().to_owned(),
                    String::from_utf8_lossy(value.as_bytes()).into_owned(),
                )
            })
            .collect(),
        body: body.to_vec(),
        body_complete,
    }
}

async fn route(
    parts: &Parts,
    recorded: &RecordedRequest,
    control: Arc<ConnControl>,
) -> Result<Answer, Refusal> {
    let path = recorded.path.as_str();
    let query = Query::parse(recorded.query.as_deref());
    let under = |prefix: &str| {
        path == prefix
            || path
                .strip_prefix(prefix)
                .is_some_and(|rest| rest.starts_with('/'))
    };
    if under("/echo") {
        return Ok(json_answer(StatusCode::OK, echo_object(recorded)));
    }
    if under("/echo-encoded") {
        return Ok(echo_encoded(parts, recorded, &query));
    }
    if let Some(code) = path.strip_prefix("/status/") {
        return status(code);
    }
    match path {
        "/echo-header" => echo_header(parts, &query),
        "/redirect" => redirect(&query),
        "/stall" => {
            let ms = query.number("ms", MAX_WAIT_MS)?;
            tokio::time::sleep(Duration::from_millis(ms)).await;
            Ok(json_answer(StatusCode::OK, json!({ "stalled_ms": ms })))
        }
        "/stall-body" => stall_body(&query),
        "/reset" => {
            control.reset();
            // The connection is torn down; this future is dropped with it.
            std::future::pending().await
        }
        "/reset-body" => Ok(reset_body(control)),
        "/sse" => sse(parts, &query),
        "/big" => big(&query),
        "/gzip" => gzip(recorded),
        _ => Err(refuse(StatusCode::NOT_FOUND, "no such echo route")),
    }
}

fn echo_object(recorded: &RecordedRequest) -> serde_json::Value {
    json!({
        "method": recorded.method,
        "path": recorded.path,
        "query": recorded.query,
        "version": recorded.version,
        "headers": recorded.headers,
        "body": recorded.body_text(),
    })
}

fn echo_encoded(parts: &Parts, recorded: &RecordedRequest, query: &Query) -> Answer {
    let mut forms = Vec::new();
    for (name, value) in &parts.headers {
        forms.push(forms_object("header", name.as_str(), value.as_bytes()));
    }
    for (name, value) in &query.pairs {
        forms.push(forms_object("query", &String::from_utf8_lossy(name), value));
    }
    if !recorded.body.is_empty() {
        forms.push(forms_object("body", "", &recorded.body));
    }
    // The echo object's text without its closing brace, then `forms`: serde_json cannot hold the
    // `json_unicode` escapes as written.
    let object = echo_object(recorded).to_string();
    let mut text = object
        .strip_suffix('}')
        .unwrap_or(object.as_str())
        .to_owned();
    text.push_str(",\"forms\":[");
    text.push_str(&forms.join(","));
    text.push_str("]}");

    let bytes = Bytes::from(text);
    let mut steps = Vec::with_capacity(bytes.len() / 2 + 2);
    let (mut at, mut size) = (0, 1);
    while at < bytes.len() {
        let end = (at + size).min(bytes.len());
        steps.push(Step::Data(bytes.slice(at..end)));
        steps.push(Step::Flush);
        at = end;
        size = size % MAX_ENCODED_CHUNK + 1;
    }
    let mut answer = Response::new(ScriptedBody::script(steps, None));
    set(&mut answer, CONTENT_TYPE, "application/json");
    answer
}

fn echo_header(parts: &Parts, query: &Query) -> Result<Answer, Refusal> {
    let name = query
        .text("header")
        .unwrap_or_else(|| "authorization".to_owned());
    let Some(value) = parts.headers.get(name.as_str()) else {
        return Err(refuse(
            StatusCode::BAD_REQUEST,
            "the header to echo is missing",
        ));
    };
    let mut answer = json_answer(StatusCode::OK, json!({ "echoed_header": name }));
    let headers = answer.headers_mut();
    headers.insert(LOCATION, value.clone());
    headers.insert(HeaderName::from_static("x-echo"), value.clone());
    let mut cookie = b"echo=".to_vec();
    cookie.extend_from_slice(value.as_bytes());
    if let Ok(cookie) = HeaderValue::from_bytes(&cookie) {
        headers.insert(SET_COOKIE, cookie);
    }
    Ok(answer)
}

fn redirect(query: &Query) -> Result<Answer, Refusal> {
    let status = query.number("status", 999)?;
    let status = match status {
        0 => StatusCode::FOUND,
        301 | 302 | 303 | 307 | 308 => u16::try_from(status)
            .ok()
            .and_then(|code| StatusCode::from_u16(code).ok())
            .unwrap_or(StatusCode::FOUND),
        _ => {
            return Err(refuse(
                StatusCode::BAD_REQUEST,
                "status must be 301, 302, 303, 307 or 308",
            ));
        }
    };
    let Some(to) = query.bytes("to") else {
        return Err(refuse(StatusCode::BAD_REQUEST, "missing `to`"));
    };
    let Ok(location) = HeaderValue::from_bytes(to) else {
        return Err(refuse(
            StatusCode::BAD_REQUEST,
            "`to` is not a valid header value",
        ));
    };
    let mut answer = Response::new(ScriptedBody::full("redirecting\n"));
    *answer.status_mut() = status;
    answer.headers_mut().insert(LOCATION, location);
    set(&mut answer, CONTENT_TYPE, "text/plain");
    Ok(answer)
}

fn stall_body(query: &Query) -> Result<Answer, Refusal> {
    let ms = query.number("ms", MAX_WAIT_MS)?;
    let first: &'static [u8] = b"first part of the body.\n";
    let rest: &'static [u8] = b"rest of the body.\n";
    let steps = vec![
        Step::Data(Bytes::from_static(first)),
        Step::Pause(Duration::from_millis(ms)),
        Step::Data(Bytes::from_static(rest)),
    ];
    let mut answer = Response::new(ScriptedBody::script(steps, None));
    set(&mut answer, CONTENT_TYPE, "text/plain");
    answer
        .headers_mut()
        .insert(CONTENT_LENGTH, HeaderValue::from(first.len() + rest.len()));
    Ok(answer)
}

fn reset_body(control: Arc<ConnControl>) -> Answer {
    let steps = vec![
        Step::Pattern(RESET_BODY_SENT),
        // Long enough for the part sent to reach the client before the RST discards the rest.
        Step::Pause(Duration::from_millis(50)),
        Step::Reset,
    ];
    let mut answer = Response::new(ScriptedBody::script(steps, Some(control)));
    set(&mut answer, CONTENT_TYPE, "application/octet-stream");
    answer
        .headers_mut()
        .insert(CONTENT_LENGTH, HeaderValue::from(RESET_BODY_CLAIMED));
    answer
}

fn sse(parts: &Parts, query: &Query) -> Result<Answer, Refusal> {
    let count = query.number("n", MAX_EVENTS)?;
    let interval = Duration::from_millis(query.number("interval_ms", MAX_WAIT_MS)?);
    let echoed = match query.text("echo") {
        Some(name) => parts
            .headers
            .get(name.as_str())
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned()),
        None => None,
    };
    let mut steps = Vec::new();
    for n in 0..count {
        if n > 0 {
            steps.push(if interval.is_zero() {
                Step::Flush
            } else {
                Step::Pause(interval)
            });
        }
        let data = json!({ "n": n, "header": echoed });
        steps.push(Step::Data(Bytes::from(format!(
            "id: {n}\nevent: tick\ndata: {data}\n\n"
        ))));
    }
    let mut answer = Response::new(ScriptedBody::script(steps, None));
    set(&mut answer, CONTENT_TYPE, "text/event-stream");
    set(&mut answer, CACHE_CONTROL, "no-cache");
    Ok(answer)
}

fn big(query: &Query) -> Result<Answer, Refusal> {
    if query.bytes("bytes").is_none() {
        return Err(refuse(StatusCode::BAD_REQUEST, "missing `bytes`"));
    }
    let size = query.number("bytes", MAX_BIG)?;
    let mut answer = Response::new(ScriptedBody::pattern(size));
    set(&mut answer, CONTENT_TYPE, "application/octet-stream");
    answer
        .headers_mut()
        .insert(CONTENT_LENGTH, HeaderValue::from(size));
    Ok(answer)
}

fn gzip(recorded: &RecordedRequest) -> Result<Answer, Refusal> {
    let text = echo_object(recorded).to_string();
    let mut encoder = GzEncoder::new(Vec::new(), Compression::default());
    let compressed = encoder
        .write_all(text.as_bytes())
        .and_then(|()| encoder.finish());
    let Ok(compressed) = compressed else {
        return Err(refuse(StatusCode::INTERNAL_SERVER_ERROR, "gzip failed"));
    };
    let mut answer = Response::new(ScriptedBody::full(compressed));
    set(&mut answer, CONTENT_TYPE, "application/json");
    set(&mut answer, CONTENT_ENCODING, "gzip");
    Ok(answer)
}

fn status(code: &str) -> Result<Answer, Refusal> {
    let status = code
        .parse::<u16>()
        .ok()
        .filter(|c| (200..=599).contains(c))
        .and_then(|c| StatusCode::from_u16(c).ok());
    let Some(status) = status else {
        return Err(refuse(
            StatusCode::BAD_REQUEST,
            "the status must be a number from 200 to 599",
        ));
    };
    if matches!(status.as_u16(), 204 | 205 | 304) {
        let mut answer = Response::new(ScriptedBody::empty());
        *answer.status_mut() = status;
        return Ok(answer);
    }
    Ok(json_answer(status, json!({ "status": status.as_u16() })))
}

/// A 4xx or 5xx answer a route gives instead of its own.
#[derive(Debug)]
struct Refusal {
    status: StatusCode,
    message: String,
}

fn refuse(status: StatusCode, message: impl Into<String>) -> Refusal {
    Refusal {
        status,
        message: message.into(),
    }
}

fn json_answer(status: StatusCode, value: serde_json::Value) -> Answer {
    let mut answer = Response::new(ScriptedBody::full(value.to_string()));
    *answer.status_mut() = status;
    set(&mut answer, CONTENT_TYPE, "application/json");
    answer
}

fn error(status: StatusCode, message: &str) -> Answer {
    let mut answer = Response::new(ScriptedBody::full(format!(
        "{{\"error\":{}}}",
        json_string(message)
    )));
    *answer.status_mut() = status;
    set(&mut answer, CONTENT_TYPE, "application/json");
    answer
}

fn set(answer: &mut Answer, name: HeaderName, value: &'static str) {
    answer
        .headers_mut()
        .insert(name, HeaderValue::from_static(value));
}

/// The query's `name=value` pairs, percent-decoded (`+` stays `+`).
#[derive(Debug, Default)]
struct Query {
    pairs: Vec<(Vec<u8>, Vec<u8>)>,
}

impl Query {
    fn parse(query: Option<&str>) -> Self {
        let pairs = query
            .unwrap_or_default()
            .split('&')
            .filter(|pair| !pair.is_empty())
            .map(|pair| {
                let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
                (percent_decode(name), percent_decode(value))
            })
            .collect();
        Self { pairs }
    }

    fn bytes(&self, name: &str) -> Option<&[u8]> {
        self.pairs
            .iter()
            .find(|(n, _)| n == name.as_bytes())
            .map(|(_, v)| v.as_slice())
    }

    fn text(&self, name: &str) -> Option<String> {
        self.bytes(name)
            .map(|v| String::from_utf8_lossy(v).into_owned())
    }

    /// The parameter as a number up to `max`; absent is 0; malformed or too large is a 400.
    fn number(&self, name: &str, max: u64) -> Result<u64, Refusal> {
        let Some(text) = self.text(name) else {
            return Ok(0);
        };
        match text.parse::<u64>() {
            Ok(n) if n <= max => Ok(n),
            _ => Err(refuse(
                StatusCode::BAD_REQUEST,
                format!("`{name}` must be a whole number up to {max}"),
            )),
        }
    }
}
