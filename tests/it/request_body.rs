//! How the proxy reads and examines request bodies and methods before it decides (issue 22),
//! end to end: the real `mint serve`, a real HTTPS echo upstream that records what it received,
//! and curl (or a raw TCP client) as the agent.
//!
//! - A body Mint cannot examine whole (gzip that inflates past the limit, a coding Mint does not
//!   decode, a list of codings, a transfer coding besides `chunked`) is refused before anything
//!   is sent, never treated as "not a call".
//! - Method-override spellings that PHP frameworks read (`.method`, ` _method`, `_method[]`,
//!   `X_HTTP_METHOD_OVERRIDE`, ...) are refused unless they repeat the method.
//! - Deny rules on `tool` match any ASCII case of the name; allow rules stay byte-exact.
//! - Memory per request is bounded: a request denied whatever its body holds is refused unread,
//!   and a body that must be examined is scanned without building a document (peak RSS of the
//!   real process under 8 parallel 10 MiB requests, from `/proc/PID/status`).
//!
//! Every request carries the canary secret's placeholder; each test asserts that the canary is
//! absent from what the agent received, from the audit log and from Mint's stderr, and that a
//! refused request reached no upstream.

#![allow(clippy::unwrap_used, clippy::panic, reason = "tests")]

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use mint_tests::broker::{CurlResponse, curl, curl_command, raw_http};
use mint_tests::lab::{self, LabConfig};

/// The secret of alias `echo` (header site), bound to `127.0.0.1`.
const CANARY: &str = "canary22-Bq7w/Xy3+Zr5=Td8";

mint_tests::lab_newtype!(
    /// The shared lab in front of an echo upstream, with a policy that allows `POST /echo` and MCP
    /// traffic to `/echo/mcp` (any tool but `drop*`), `query-docs` only on `/echo/docs`, and denies
    /// `DELETE`; with this file's curl (the canary's placeholder on every request) and refusal
    /// check.
    Lab
);

impl Lab {
    #[track_caller]
    fn start() -> Lab {
        let config = LabConfig {
            secrets: &[("echo", CANARY)],
            ..LabConfig::default()
        };
        Lab(lab::Lab::start(config, |port| {
            format!(
                "  - id: echo\n    effect: allow\n    match:\n      alias: [echo]\n      host: [127.0.0.1]\n      port: [{port}]\n      method: [GET, POST, DELETE]\n      path: [/echo, /echo/mcp, /echo/docs]\n  - id: mcp-tools\n    effect: allow\n    match:\n      alias: [echo]\n      host: [127.0.0.1]\n      port: [{port}]\n      method: [POST]\n      path: [/echo/mcp]\n      tool: [\"*\"]\n  - id: docs-tool\n    effect: allow\n    match:\n      alias: [echo]\n      host: [127.0.0.1]\n      port: [{port}]\n      method: [POST]\n      path: [/echo/docs]\n      tool: [query-docs]\n  - id: no-drop\n    effect: deny\n    match:\n      tool: [\"drop*\"]\n  - id: no-deletes\n    effect: deny\n    match:\n      method: [DELETE]\n"
            )
        }))
    }

    fn url(&self, path_and_query: &str) -> String {
        self.echo_url(path_and_query)
    }

    /// curl with the capability and the canary's placeholder, plus `args` (the URL among them).
    #[track_caller]
    fn curl(&self, args: &[&str]) -> CurlResponse {
        let cap = format!("Mint-Capability: {}", self.cap);
        let mut all = vec![
            "-g",
            "-H",
            cap.as_str(),
            "-H",
            "Authorization: Bearer {{mint:echo}}",
        ];
        all.extend_from_slice(args);
        curl(&all)
    }

    /// POSTs the file at `body` to `path` with extra `headers`.
    #[track_caller]
    fn post(&self, path: &str, headers: &[&str], body: &Path) -> CurlResponse {
        let data = format!("@{}", body.display());
        let url = self.url(path);
        let mut args = Vec::new();
        for header in headers {
            args.extend(["-H", header]);
        }
        args.extend(["--data-binary", data.as_str(), url.as_str()]);
        self.curl(&args)
    }

    /// Refused with `status` and `code`, audited as a `deny` with `reason` and `tool` (the
    /// decision record's `mcp_tool`), nothing sent upstream since `before`, nothing leaked.
    /// Returns the decision record.
    #[track_caller]
    fn assert_refused(
        &self,
        what: &str,
        response: &CurlResponse,
        expected: (u16, &str, &str),
        tool: Option<&str>,
        before: usize,
    ) -> serde_json::Value {
        let (status, code, reason) = expected;
        let json: serde_json::Value = serde_json::from_str(&response.body).unwrap_or_default();
        // Mint's error, or for a named tool call a JSON-RPC error with Mint's code in `data`.
        let error = &json["error"];
        let found = error["code"]
            .as_str()
            .or_else(|| error["data"]["code"].as_str());
        let shown: String = response.body.chars().take(400).collect();
        assert_eq!(
            (response.status, found),
            (status, Some(code)),
            "{what}: {shown}"
        );
        let id = response.header("mint-request-id").unwrap();
        let decision = self.broker.decision_of(id);
        assert_eq!(decision["decision"], "deny", "{what}: {decision}");
        assert_eq!(decision["reason"], reason, "{what}: {decision}");
        assert_eq!(decision["mcp_tool"].as_str(), tool, "{what}: {decision}");
        let outcome = self.broker.outcome_of(id);
        assert_eq!(outcome["status"], status, "{what}: {outcome}");
        assert_eq!(
            self.forwarded(),
            before,
            "{what}: a refused request reached the upstream"
        );
        self.assert_clean(response.everything());
        decision
    }
}

fn call(tool: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{{"name":"{tool}","arguments":{{}}}}}}"#
    )
}

/// `gzip -c -n` of `bytes`, through the real gzip program.
fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut child = Command::new("gzip")
        .args(["-c", "-n"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let input = bytes.to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&input).unwrap());
    let output = child.wait_with_output().unwrap();
    writer.join().unwrap();
    assert!(output.status.success());
    output.stdout
}

const JSON: &str = "Content-Type: application/json";

/// Finding 3: a denied tool call hidden in a body Mint cannot examine whole is refused before
/// anything is sent: a gzip body of about 10 KB that inflates to 10 MiB + 1 byte of spaces and
/// then a `tools/call` (was: inflated up to the limit, seen as "not a call", admitted by the
/// endpoint's rule and forwarded), codings Mint does not decode, and lists of codings. The
/// uncompressed variants are examined whole: a call after the 1 MiB MCP limit, after leading
/// whitespace or a byte order mark.
#[test]
fn issue_22_bodies_mint_cannot_examine_whole_are_refused_unsent() {
    let lab = Lab::start();
    let drop = call("drop_table");

    // Control: a small gzip call to an allowed tool is examined (decoded) and forwarded.
    let small = lab.file("small.gz", &gzip(call("search").as_bytes()));
    let response = lab.post("/echo/mcp", &[JSON, "Content-Encoding: gzip"], &small);
    assert_eq!(response.status, 200, "{}", response.body);
    let seen = lab.peer.server.requests().last().unwrap();
    assert_eq!(
        seen.header("authorization"),
        Some(format!("Bearer {CANARY}").as_str())
    );
    let id = response.header("mint-request-id").unwrap();
    assert_eq!(lab.broker.decision_of(id)["mcp_tool"], "search");
    lab.assert_clean(response.everything());

    // The reviewer's body: 10 MiB + 1 spaces, then the denied call, gzipped.
    let mut padded = vec![b' '; (10 << 20) + 1];
    padded.extend_from_slice(drop.as_bytes());
    let bomb = gzip(&padded);
    assert!(bomb.len() < 64 << 10, "{} bytes", bomb.len());
    let bomb = lab.file("bomb.gz", &bomb);
    let before = lab.forwarded();
    let response = lab.post("/echo/mcp", &[JSON, "Content-Encoding: gzip"], &bomb);
    lab.assert_refused(
        "gzip past the limit",
        &response,
        (413, "body_too_large", "decoded_body_too_large"),
        None,
        before,
    );

    // Codings Mint does not decode, and lists of codings, even with `identity` in them.
    let gz = lab.file("drop.gz", &gzip(drop.as_bytes()));
    for (what, headers) in [
        ("br", vec![JSON, "Content-Encoding: br"]),
        ("deflate", vec![JSON, "Content-Encoding: deflate"]),
        (
            "identity, gzip",
            vec![JSON, "Content-Encoding: identity, gzip"],
        ),
        ("gzip, gzip", vec![JSON, "Content-Encoding: gzip, gzip"]),
        (
            "two headers",
            vec![JSON, "Content-Encoding: gzip", "Content-Encoding: identity"],
        ),
    ] {
        let response = lab.post("/echo/mcp", &headers, &gz);
        lab.assert_refused(
            what,
            &response,
            (
                415,
                "unsupported_content_encoding",
                "unsupported_content_encoding",
            ),
            None,
            before,
        );
        assert_eq!(response.header("accept-encoding"), Some("gzip"), "{what}");
    }

    // Uncompressed: examined whole. A call after 1 MiB of whitespace is over the MCP limit.
    for tool in ["drop_table", "search"] {
        let mut late = vec![b' '; (1 << 20) + 1];
        late.extend_from_slice(call(tool).as_bytes());
        let late = lab.file("late.json", &late);
        let response = lab.post("/echo/mcp", &[JSON], &late);
        lab.assert_refused(
            "call after the MCP limit",
            &response,
            (413, "body_too_large", "body_too_large"),
            None,
            before,
        );
    }
    // Leading whitespace and a byte order mark do not hide a call: it is named and denied.
    for (what, prefix) in [
        ("whitespace", &b" \r\n\t "[..]),
        ("byte order mark", &b"\xef\xbb\xbf"[..]),
        ("mark and whitespace", &b"\xef\xbb\xbf\n  "[..]),
    ] {
        let body = lab.file("prefixed.json", &[prefix, drop.as_bytes()].concat());
        let response = lab.post("/echo/mcp", &[JSON], &body);
        let decision = lab.assert_refused(
            what,
            &response,
            (403, "policy_denied", "deny_rule"),
            Some("drop_table"),
            before,
        );
        assert_eq!(
            decision["rule"],
            serde_json::json!(["no-drop"]),
            "{decision}"
        );
    }
    // Something lenient parsers skip but strict JSON does not allow: refused, not "no call".
    for (what, prefix) in [
        ("two marks", &b"\xef\xbb\xbf\xef\xbb\xbf"[..]),
        ("no-break space", &b"\xc2\xa0"[..]),
        ("comment", &b"/* x */"[..]),
    ] {
        let body = lab.file("odd.json", &[prefix, drop.as_bytes()].concat());
        let response = lab.post("/echo/mcp", &[JSON], &body);
        lab.assert_refused(
            what,
            &response,
            (400, "invalid_request", "invalid_mcp_message"),
            None,
            before,
        );
    }

    // A transfer coding besides `chunked` is one Mint does not undo: refused whoever answers.
    let chunk = format!("{:x}\r\n{drop}\r\n0\r\n\r\n", drop.len());
    let raw = format!(
        "POST /v1/proxy/https/127.0.0.1:{}/echo/mcp HTTP/1.1\r\nHost: {}\r\nMint-Capability: {}\r\nAuthorization: Bearer {{{{mint:echo}}}}\r\nContent-Type: application/json\r\nTransfer-Encoding: gzip, chunked\r\n\r\n{chunk}",
        lab.peer.server.port(),
        lab.broker.addr(),
        lab.cap
    );
    let response = raw_http(&lab.broker.base, raw.as_bytes());
    assert_eq!(response.status, 400, "{}", response.body);
    assert_eq!(response.json()["error"]["code"], "invalid_request");
    assert_eq!(lab.forwarded(), before);
    lab.assert_clean(response.everything());
}

/// Finding 4: method-override spellings that PHP frameworks read are refused unless they repeat
/// the method (was: the upstream ran DELETE while Mint recorded POST): `.method` and ` _method`
/// in a form body or the query, a multipart part named `.method`, `_method[]`, a form body
/// without `Content-Type` (Rack reads it), and the header `X_HTTP_METHOD_OVERRIDE`.
#[test]
fn issue_22_method_override_spellings_php_reads_are_refused() {
    let lab = Lab::start();
    let form = "Content-Type: application/x-www-form-urlencoded";
    let before = lab.forwarded();
    let refused = |what: &str, response: &CurlResponse| {
        let decision = lab.assert_refused(
            what,
            response,
            (400, "invalid_request", "invalid_method"),
            None,
            before,
        );
        assert_eq!(decision["method"], "POST", "{what}");
    };
    for body in [
        ".method=DELETE",
        "+_method=DELETE",
        "a=1&%20%20_method=DELETE",
        "_method%5B%5D=DELETE",
        "_method[]=DELETE",
        "_METHOD=delete",
        "%5Fmethod=DELETE",
    ] {
        let file = lab.file("form", body.as_bytes());
        refused(&format!("form {body}"), &lab.post("/echo", &[form], &file));
    }
    // No Content-Type at all: a form to Rack.
    let file = lab.file("bare", b"_method=DELETE");
    refused(
        "form without Content-Type",
        &lab.post("/echo", &["Content-Type:"], &file),
    );
    // An empty Content-Type (curl's `Content-Type;`) is none to Rack, so a form as well.
    refused(
        "form with an empty Content-Type",
        &lab.post("/echo", &["Content-Type;"], &file),
    );
    // Part names in single quotes, which PHP's multipart parser reads like double ones.
    for name in ["'_method'", "'.method'", "' _method'"] {
        let body = format!(
            "--XX\r\nContent-Disposition: form-data; name={name}\r\n\r\nDELETE\r\n--XX--\r\n"
        );
        let file = lab.file("quoted", body.as_bytes());
        let response = lab.post(
            "/echo",
            &["Content-Type: multipart/form-data; boundary=XX"],
            &file,
        );
        refused(&format!("multipart name={name}"), &response);
    }
    for query in [
        "?.method=DELETE",
        "?%20_method=DELETE",
        "?x=1&_method[0]=DELETE",
    ] {
        let response = lab.curl(&["-X", "POST", &lab.url(&format!("/echo{query}"))]);
        refused(&format!("query {query}"), &response);
    }
    for name in [".method", " _method", "_method[]"] {
        let part = format!("{name}=DELETE");
        let response = lab.curl(&["-F", &part, &lab.url("/echo")]);
        refused(&format!("multipart {name}"), &response);
    }
    let json = lab.file("override.json", br#"{"x":1,"\u005fmethod":"DELETE"}"#);
    refused("JSON escaped", &lab.post("/echo", &[JSON], &json));
    for header in [
        "X_HTTP_METHOD_OVERRIDE: DELETE",
        "x_http_method: DELETE",
        "X-Method_Override: DELETE",
    ] {
        let response = lab.curl(&["-X", "POST", "-H", header, &lab.url("/echo")]);
        refused(header, &response);
    }

    // What repeats the method, or is not an override, is forwarded as it came.
    for body in ["_method=POST", "a.method=DELETE", "x=_method"] {
        let file = lab.file("fine", body.as_bytes());
        let response = lab.post("/echo", &[form], &file);
        assert_eq!(response.status, 200, "{body}: {}", response.body);
        let seen = lab.peer.server.requests().last().unwrap();
        assert_eq!(
            (seen.method.as_str(), seen.body.as_slice()),
            ("POST", body.as_bytes())
        );
        lab.assert_clean(response.everything());
    }
    let response = lab.curl(&[
        "-X",
        "POST",
        "-H",
        "X_HTTP_METHOD_OVERRIDE: POST",
        &lab.url("/echo"),
    ]);
    assert_eq!(response.status, 200, "{}", response.body);
    lab.assert_clean(response.everything());
}

/// Also check (tool names): a deny rule on `drop*` matches `DROP_TABLE` and `Drop_Table` (an MCP
/// server that looks tools up case-insensitively would run them; was: forwarded under the
/// `tool: ["*"]` rule), while the allow rule on `query-docs` admits that spelling only.
#[test]
fn issue_22_denied_tools_are_refused_in_any_case() {
    let lab = Lab::start();
    let before = lab.forwarded();
    for tool in ["DROP_TABLE", "Drop_Table", "dRoP"] {
        let body = lab.file("call.json", call(tool).as_bytes());
        let response = lab.post("/echo/mcp", &[JSON], &body);
        let decision = lab.assert_refused(
            tool,
            &response,
            (403, "policy_denied", "deny_rule"),
            Some(tool),
            before,
        );
        assert_eq!(
            decision["rule"],
            serde_json::json!(["no-drop"]),
            "{decision}"
        );
    }
    for tool in ["Query-Docs", "QUERY-DOCS"] {
        let body = lab.file("call.json", call(tool).as_bytes());
        let response = lab.post("/echo/docs", &[JSON], &body);
        lab.assert_refused(
            tool,
            &response,
            (403, "policy_denied", "no_allow_rule"),
            Some(tool),
            before,
        );
    }
    let body = lab.file("call.json", call("query-docs").as_bytes());
    let response = lab.post("/echo/docs", &[JSON], &body);
    assert_eq!(response.status, 200, "{}", response.body);
    assert_eq!(lab.forwarded(), before + 1);
    lab.assert_clean(response.everything());
}

/// `VmHWM` (peak resident set) of a process, in bytes.
fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status
        .lines()
        .find(|line| line.starts_with("VmHWM:"))
        .unwrap();
    let kib: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap();
    kib * 1024
}

/// Sends `count` copies of the file at `body` to `path` at once (one curl each, with
/// `Expect: 100-continue` so that a request refused unread is answered before its body is sent)
/// and returns each answer's status and error code.
fn parallel_posts(lab: &Lab, count: usize, path: &str, body: &Path) -> Vec<(u16, String)> {
    let cap = format!("Mint-Capability: {}", lab.cap);
    let data = format!("@{}", body.display());
    let url = lab.url(path);
    let children: Vec<_> = (0..count)
        .map(|_| {
            curl_command()
                .args([
                    "--max-time",
                    "300",
                    "-o",
                    "-",
                    "-w",
                    "\n%{http_code}",
                    "-H",
                    &cap,
                ])
                .args(["-H", "Authorization: Bearer {{mint:echo}}", "-H", JSON])
                .args(["-H", "Expect: 100-continue", "--data-binary", &data, &url])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    children
        .into_iter()
        .map(|child| {
            let output = child.wait_with_output().unwrap();
            let text = String::from_utf8_lossy(&output.stdout).into_owned();
            assert!(!text.contains(CANARY), "the agent saw the secret");
            let (body, status) = text.rsplit_once('\n').unwrap_or(("", &text));
            let json: serde_json::Value = serde_json::from_str(body).unwrap_or_default();
            (
                status.trim().parse().unwrap_or(0),
                json["error"]["code"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            )
        })
        .collect()
}

/// The most one request may add to Mint's peak memory while its body is examined: the body
/// (at most the 10 MiB limit, read into one buffer of its declared length), a transient copy of
/// at most that size while a buffer without a declared length grows, and the scanners' working
/// memory (a small stack of member-name sets, a few KiB here): docs/security.md derives it.
const PER_EXAMINED_REQUEST: u64 = 2 * (10 << 20) + (4 << 20);

/// What Mint may add for a request it refuses before reading its body: hyper's read buffer (at
/// most about 400 KiB) and the request's own bookkeeping.
const PER_UNREAD_REQUEST: u64 = 1 << 20;

/// Slack for the allocator's arenas (one per worker thread) and the audit writer.
const MARGIN: u64 = 16 << 20;

/// Finding 8: memory stays bounded per request. Eight parallel 10 MiB JSON bodies containing
/// `method`, to a target the policy denies whatever the body holds, are refused unread: Mint's
/// peak RSS grows by less than 8 × 1 MiB + margin (was: about 19× the body each, 463 MB for
/// eight, because the `_method` check built a whole `serde_json` value before the policy ran).
/// Then eight parallel 10 MiB bodies to an allowed target, which must be examined (the JSON
/// override scan, the MCP scan), grow it by less than 8 × (2 × 10 MiB + 4 MiB) + margin; they are
/// refused for their `_method` member, found after the padding. And the MCP scan's worst shape
/// (one object of a million names, a duplicate at the end) stays within the same bound per
/// request. Nothing is forwarded.
#[test]
fn issue_22_memory_stays_bounded_under_parallel_large_bodies() {
    let lab = Lab::start();
    let pid = lab.broker.pid().unwrap();
    // Warm up: one small request through the whole pipeline, so the baseline holds the
    // allocator's arenas, TLS and the upstream pool.
    let small = lab.file("small.json", br#"{"method":"ping"}"#);
    assert_eq!(lab.post("/echo", &[JSON], &small).status, 200);
    let baseline = peak_rss(pid);
    let before = lab.forwarded();

    let size = (10 << 20) - 4096;
    let mut body = Vec::with_capacity(size);
    body.extend_from_slice(br#"{"method":"#);
    body.push(b'[');
    while body.len() < size - 64 {
        body.extend_from_slice(br#""method","#);
    }
    body.extend_from_slice(br#""method"],"_method":"DELETE"}"#);
    let body = lab.file("big.json", &body);

    // Denied whatever the body holds: `/other` has no allow rule.
    let answers = parallel_posts(&lab, 8, "/other", &body);
    let unread = peak_rss(pid);
    let bound = baseline + 8 * PER_UNREAD_REQUEST + MARGIN;
    assert!(
        unread <= bound,
        "peak RSS {unread} after 8 refused-unread bodies, over {bound} (baseline {baseline})"
    );
    assert!(
        answers
            .iter()
            .all(|(status, code)| *status == 403 && code == "policy_denied"),
        "{answers:?}"
    );

    // Allowed target: every body is read and scanned, then refused for its `_method`.
    let answers = parallel_posts(&lab, 8, "/echo", &body);
    let examined = peak_rss(pid);
    let bound = baseline + 8 * PER_EXAMINED_REQUEST + MARGIN;
    assert!(
        examined <= bound,
        "peak RSS {examined} after 8 examined bodies, over {bound} (baseline {baseline})"
    );
    assert!(
        answers
            .iter()
            .all(|(status, code)| *status == 400 && code == "invalid_request"),
        "{answers:?}"
    );

    // The MCP scan's worst case: one object of about 1.2 million distinct four-letter names,
    // the first repeated at the end, which the scan refuses when the object closes. Two at
    // once (each costs seconds of CPU in a debug build); the bound per request is the same.
    let digits = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    let mut names = Vec::with_capacity(size);
    names.push(b'{');
    let mut n = 0usize;
    while names.len() < size - 32 {
        names.push(b'"');
        let mut i = n;
        for _ in 0..4 {
            names.push(digits[i % digits.len()]);
            i /= digits.len();
        }
        names.extend_from_slice(b"\":0,");
        n += 1;
    }
    names.extend_from_slice(b"\"aaaa\":1}");
    let names = lab.file("names.json", &names);
    let answers = parallel_posts(&lab, 2, "/echo", &names);
    assert!(
        answers
            .iter()
            .all(|(status, code)| *status == 400 && code == "invalid_request"),
        "{answers:?}"
    );
    let scanned = peak_rss(pid);
    assert!(
        scanned <= bound,
        "peak RSS {scanned} after 2 bodies of {n} names, over {bound} (baseline {baseline})"
    );
    eprintln!(
        "peak RSS: baseline {baseline}, unread {unread}, examined {examined}, names {scanned}"
    );

    assert_eq!(
        lab.forwarded(),
        before,
        "a refused request reached the upstream"
    );
    let records = lab.broker.audit_records();
    let decisions: Vec<_> = records
        .iter()
        .filter(|r| r["phase"] == "decision")
        .filter(|r| {
            ["no_allow_rule", "invalid_method", "invalid_mcp_message"]
                .contains(&r["reason"].as_str().unwrap_or_default())
        })
        .collect();
    assert_eq!(decisions.len(), 18, "{decisions:?}");
    assert!(
        decisions
            .iter()
            .all(|r| r["decision"] == "deny" && r["mcp_tool"].is_null())
    );
    lab.assert_clean("");
}
