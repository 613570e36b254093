//! Tests of `scrub`: every form of a secret is redacted whatever the chunking, clean text passes
//! through byte for byte, and no secret shows in `Debug`.

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
use proptest::prelude::*;

use super::*;
use crate::secrets::scrub::patterns::is_base64_byte;

const CANARY: &str = "mint-canary-7f3a9c1e5b2d4068";

#[track_caller]
fn scrubber(secrets: &[&[u8]]) -> Scrubber {
    Scrubber::from_secrets(secrets.iter().copied()).unwrap()
}

/// All patterns of `secrets`, as the scrubber builds them.
fn patterns_of(secrets: &[&[u8]]) -> Vec<Vec<u8>> {
    all_patterns(secrets.iter().copied())
        .0
        .iter()
        .map(|p| p.bytes.to_vec())
        .collect()
}

/// Streams `input` through a fresh scrubber in chunks of the given sizes (cycled).
fn stream(secrets: &[&[u8]], input: &[u8], sizes: &[usize]) -> Vec<u8> {
    stream_framed(secrets, input, sizes).0
}

/// [`stream`], and the lengths of the pieces each push returned (what the proxy sends as one
/// HTTP/1.1 chunk or HTTP/2 DATA frame each), push by push, `finish` last.
fn stream_framed(secrets: &[&[u8]], input: &[u8], sizes: &[usize]) -> (Vec<u8>, Vec<Vec<usize>>) {
    stream_through(&scrubber(secrets), input, sizes)
}

/// [`stream_framed`] through a fresh copy of `template` (its patterns are built once).
fn stream_through(
    template: &Scrubber,
    input: &[u8],
    sizes: &[usize],
) -> (Vec<u8>, Vec<Vec<usize>>) {
    let mut s = template.fresh();
    let hold = s.engine.as_ref().map_or(0, |e| e.hold());
    let mut out = Vec::new();
    let mut frames = Vec::new();
    let mut pos = 0;
    let mut i = 0;
    while pos < input.len() {
        let size = sizes[i % sizes.len()].max(1).min(input.len() - pos);
        if i % 2 == 0 {
            let piece = s.push_slice(&input[pos..pos + size]);
            frames.push(vec![piece.len()]);
            out.extend(piece);
        } else {
            let chunk = Bytes::copy_from_slice(&input[pos..pos + size]);
            let pieces = s.push(chunk).into_pieces();
            frames.push(pieces.iter().map(Bytes::len).collect());
            for piece in pieces {
                out.extend_from_slice(&piece);
            }
        }
        pos += size;
        i += 1;
        // What is held back is bounded by the fixed hold.
        assert!(s.pending() <= hold, "{} held back", s.pending());
    }
    let rest = s.finish_vec();
    frames.push(vec![rest.len()]);
    out.extend(rest);
    assert_eq!(s.pending(), 0);
    (out, frames)
}

/// Asserts that no pattern occurs in `output` except across a marker.
#[track_caller]
fn assert_clean(patterns: &[Vec<u8>], output: &[u8]) {
    let marker = REDACTED.as_bytes();
    let mut segments = Vec::new();
    let mut rest = output;
    while let Some(at) = memchr::memmem::find(rest, marker) {
        segments.push(&rest[..at]);
        rest = &rest[at + marker.len()..];
    }
    segments.push(rest);
    for segment in segments {
        for pattern in patterns {
            assert!(
                memchr::memmem::find(segment, pattern).is_none(),
                "a pattern survived scrubbing"
            );
        }
    }
}

fn contains_any(patterns: &[Vec<u8>], data: &[u8]) -> bool {
    patterns
        .iter()
        .any(|p| memchr::memmem::find(data, p).is_some())
}

/// Every encoded form of `secret` the scrubber promises to catch, standing alone.
fn forms(secret: &[u8]) -> Vec<Vec<u8>> {
    let text = std::str::from_utf8(secret).unwrap();
    let mut forms = vec![
        secret.to_vec(),
        hex::encode(secret).into_bytes(),
        hex::encode_upper(secret).into_bytes(),
        STANDARD.encode(secret).into_bytes(),
        STANDARD_NO_PAD.encode(secret).into_bytes(),
        URL_SAFE.encode(secret).into_bytes(),
        URL_SAFE_NO_PAD.encode(secret).into_bytes(),
        STANDARD.encode(secret).replace('/', "\\/").into_bytes(),
    ];
    let json = serde_json::to_string(text).unwrap();
    forms.push(json.as_bytes()[1..json.len() - 1].to_vec());
    let (mut upper, mut lower) = (Vec::new(), Vec::new());
    for &b in secret {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            upper.push(b);
            lower.push(b);
        } else {
            upper.extend_from_slice(format!("%{b:02X}").as_bytes());
            lower.extend_from_slice(format!("%{b:02x}").as_bytes());
        }
    }
    forms.push(upper);
    forms.push(lower);
    forms.push(go_html(secret));
    forms.push(python_html(secret));
    forms.push(all_references(secret));
    forms.push(quoted_printable(secret, None));
    forms.push(quoted_printable(secret, Some(secret.len() / 2)));
    // Line-wrapped base64 with the break inside the encoding: the secret starts 40 characters
    // into a MIME line (a 30-byte prefix), and as PEM 20 characters before a break.
    for (lead, width, line_break) in [(30, 76, "\n"), (30, 76, "\r\n"), (33, 64, "\n")] {
        let mut blob = vec![0x42u8; lead];
        blob.extend_from_slice(secret);
        forms.push(wrap(&STANDARD.encode(&blob), width, 0, line_break).into_bytes());
    }
    forms
}

/// `encoded` cut into lines of `width` characters, the first `width - column` long (the blob
/// starts `column` characters into a line), joined by `line_break`.
fn wrap(encoded: &str, width: usize, column: usize, line_break: &str) -> String {
    let mut out = String::new();
    let mut at = column;
    for ch in encoded.chars() {
        if at == width {
            out.push_str(line_break);
            at = 0;
        }
        out.push(ch);
        at += 1;
    }
    out
}

/// As Go's `html/template` escapes text.
fn go_html(secret: &[u8]) -> Vec<u8> {
    let text = std::str::from_utf8(secret).unwrap();
    let mut out = String::new();
    for ch in text.chars() {
        match ch {
            '"' => out.push_str("&#34;"),
            '\'' => out.push_str("&#39;"),
            '&' => out.push_str("&amp;"),
            '+' => out.push_str("&#43;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            c => out.push(c),
        }
    }
    out.into_bytes()
}

/// As Python's `html.escape` writes it.
fn python_html(secret: &[u8]) -> Vec<u8> {
    let text = std::str::from_utf8(secret).unwrap();
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#x27;")
        .into_bytes()
}

/// Every character as a decimal character reference.
fn all_references(secret: &[u8]) -> Vec<u8> {
    let text = std::str::from_utf8(secret).unwrap();
    text.chars()
        .map(|c| format!("&#{};", u32::from(c)))
        .collect::<String>()
        .into_bytes()
}

/// Quoted-printable as RFC 2045 encoders write it, with a soft line break after `soft_after`
/// bytes of the secret.
fn quoted_printable(secret: &[u8], soft_after: Option<usize>) -> Vec<u8> {
    let mut out = Vec::new();
    for (i, &b) in secret.iter().enumerate() {
        if Some(i) == soft_after {
            out.extend_from_slice(b"=\r\n");
        }
        if b == b' ' || b == b'\t' || (b.is_ascii_graphic() && b != b'=') {
            out.push(b);
        } else {
            out.extend_from_slice(format!("={b:02X}").as_bytes());
        }
    }
    out
}

#[test]
fn every_form_is_redacted_in_one_piece_and_byte_by_byte() {
    let secret = b"tok_\"quote\\slash/ plus+ eq= \xc3\xa9nd".as_slice();
    let patterns = patterns_of(&[secret]);
    for form in forms(secret) {
        let mut input = b"{\"echo\":\"".to_vec();
        input.extend_from_slice(&form);
        input.extend_from_slice(b"\"}\n");
        for sizes in [&[usize::MAX][..], &[1], &[2, 3, 5], &[7, 1, 64]] {
            let out = stream(&[secret], &input, sizes);
            assert_clean(&patterns, &out);
            assert!(memchr::memmem::find(&out, b"[mint:redacted]").is_some());
            assert!(out.starts_with(b"{\"echo\":\""));
        }
    }
}

#[test]
fn base64_inside_a_larger_blob_loses_every_secret_character() {
    let secret = b"sk-live-0123456789abcdefABCDEF";
    for prefix_len in 0..6 {
        for suffix_len in 0..4 {
            for url_safe in [false, true] {
                let mut blob = vec![0xA5u8; prefix_len];
                blob.extend_from_slice(secret);
                blob.extend(std::iter::repeat_n(0x3Cu8, suffix_len));
                let engine = if url_safe { &URL_SAFE } else { &STANDARD };
                let encoded = engine.encode(&blob).into_bytes();
                let out = scrubber(&[secret]).scrub(&encoded).into_owned();
                assert_secret_characters_gone(&encoded, &out, prefix_len, secret.len());
            }
        }
    }
}

/// The characters of `encoded` carrying a bit of the secret at `offset..offset + len` of the
/// decoded blob are all gone from `out`: what is left is a prefix and a suffix of `encoded` around
/// one marker.
#[track_caller]
fn assert_secret_characters_gone(encoded: &[u8], out: &[u8], offset: usize, len: usize) {
    let marker = REDACTED.as_bytes();
    let at = memchr::memmem::find(out, marker).expect("a marker");
    let rest = &out[at + marker.len()..];
    assert!(memchr::memmem::find(rest, marker).is_none(), "one marker");
    assert_eq!(&out[..at], &encoded[..at]);
    assert!(encoded.ends_with(rest));
    let first_secret_char = 8 * offset / 6;
    let last_secret_char = (8 * (offset + len)).div_ceil(6);
    // Exactly the characters carrying a secret bit are gone: no more, no less.
    assert_eq!(at, first_secret_char, "leading edge");
    assert_eq!(
        encoded.len() - rest.len(),
        last_secret_char,
        "trailing edge"
    );
}

#[test]
fn a_json_escaped_slash_beside_base64_goes_with_the_match() {
    // 2 + 20 bytes leave 2 bits of the secret's last byte (`c`, ending in binary 11) in a
    // character whose other 4 bits come from 0xff: `/`, written `\/` by PHP's JSON encoder.
    let secret = b"0123456789abcdefghic";
    let mut blob = vec![0, 0];
    blob.extend_from_slice(secret);
    blob.extend_from_slice(&[0xff, 0xff, 0xff]);
    let encoded = STANDARD.encode(&blob);
    let shared = (8 * (2 + secret.len())).div_ceil(6) - 1;
    assert_eq!(encoded.as_bytes()[shared], b'/');
    let escaped = encoded.replace('/', "\\/");
    let escaped_at = encoded[..shared].replace('/', "\\/").len();
    assert_eq!(&escaped[escaped_at..escaped_at + 2], "\\/");
    let out = scrubber(&[secret]).scrub(escaped.as_bytes()).into_owned();
    // Everything after the escaped `/` stays; the `\/` itself goes with the match.
    let (before, after) = out.split_at(memchr::memmem::find(&out, b"]").unwrap() + 1);
    assert!(before.ends_with(REDACTED.as_bytes()));
    assert_eq!(after, &escaped.as_bytes()[escaped_at + 2..]);
}

#[test]
fn adjacent_secrets_in_one_blob_leave_nothing_between_them() {
    let (a, b) = (
        b"first-secret-aaaaaaaa".as_slice(),
        b"second-secret-bbbbbbbb".as_slice(),
    );
    for lead in 0..3 {
        let mut blob = vec![0x11u8; lead];
        blob.extend_from_slice(a);
        blob.extend_from_slice(b);
        blob.extend_from_slice(b"\x99tail");
        let encoded = STANDARD.encode(&blob).into_bytes();
        let out = scrubber(&[a, b]).scrub(&encoded).into_owned();
        let first = 8 * lead / 6;
        let last = (8 * (lead + a.len() + b.len())).div_ceil(6);
        let mut expected = encoded[..first].to_vec();
        expected.extend_from_slice(REDACTED.as_bytes());
        expected.extend_from_slice(REDACTED.as_bytes());
        expected.extend_from_slice(&encoded[last..]);
        assert_eq!(out, expected, "lead {lead}");
    }
}

#[test]
fn a_fresh_scrubber_shares_the_patterns_not_the_state() {
    let mut s = scrubber(&[CANARY.as_bytes()]);
    s.push_slice(b"held mint-canary");
    let mut fresh = s.fresh();
    assert_eq!(fresh.pending(), 0);
    let mut out = fresh.push_slice(b"mint-canary-7f3a9c1e5b2d4068.\n");
    assert_eq!(fresh.pending(), 0, "released by the newline rule");
    out.extend(fresh.finish_vec());
    assert_eq!(out, b"[mint:redacted].\n");
}

#[test]
fn clean_text_passes_through_unchanged_and_uncopied() {
    let mut s = scrubber(&[b"ghp_0123456789abcdefghijklmnopqrstuvwxyz"]);
    let text = Bytes::from(b"{\"login\":\"octocat\",\"id\":1}\n".repeat(1000));
    let out = s.push(text.clone());
    assert_eq!(out.pieces().len(), 1, "one slice of the input");
    assert_eq!(out.pieces()[0].as_ptr(), text.as_ptr(), "not copied");
    let mut all = out.into_bytes().to_vec();
    all.extend(s.finish_vec());
    assert_eq!(all, text);
}

#[test]
fn an_event_ending_in_a_newline_is_not_held_back() {
    let mut s = scrubber(&[CANARY.as_bytes()]);
    let event = b"event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\n";
    let out = s.push_slice(event);
    assert_eq!(out, event);
    assert_eq!(s.pending(), 0);
}

#[test]
fn a_secret_prefix_is_held_back_exactly_like_any_other_bytes() {
    let secret = CANARY.as_bytes();
    let hold = scrubber(&[secret]).engine.as_ref().unwrap().hold();
    assert!(hold.is_multiple_of(64));
    let filler = b"x".repeat(2 * hold);
    // The same stretch ending in a prefix of the secret, and in anything else of that length.
    for tail in [
        &b"mint-canary-7f3a"[..],
        b"mint-canary-7f3b",
        b"qwertyuiopasdfgh",
    ] {
        let mut s = scrubber(&[secret]);
        let mut first = filler.clone();
        first.extend_from_slice(tail);
        let out = s.push(Bytes::from(first.clone()));
        assert_eq!(
            out.len(),
            first.len() - hold,
            "the same hold whatever the tail"
        );
        assert_eq!(s.pending(), hold);
        let mut all = out.into_bytes().to_vec();
        let rest = s.push_slice(b"9c1e5b2d4068 done.\n");
        // The newline rule releases everything at once.
        assert_eq!(s.pending(), 0);
        all.extend(rest);
        let text = String::from_utf8(all).unwrap();
        if tail == b"mint-canary-7f3a" {
            assert!(text.ends_with("x[mint:redacted] done.\n"), "{text}");
        } else {
            assert!(text.ends_with("9c1e5b2d4068 done.\n"), "{text}");
        }
    }
}

#[test]
fn the_newline_rule_releases_events_and_lines_at_once() {
    let secret = CANARY.as_bytes();
    for event in [
        &b"data: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\n"[..],
        b"event: message\ndata: {\"x\":1}\n\n",
        b"data: [DONE]\n\n",
        b"{\"token\":\"hel\"}\n",
        b"{\"token\":\"lo\"}\r\n",
        b"data: tok\n\n",
        b"id: 7\r\ndata: abc\r\n\r\n",
    ] {
        let mut s = scrubber(&[secret]);
        // Behind a long stretch already held, and alone.
        let long = b"y".repeat(3000);
        assert_eq!(s.push_slice(&long).len(), 3000 - s.pending());
        let out = s.push_slice(event);
        assert!(out.ends_with(event), "{}", String::from_utf8_lossy(event));
        assert_eq!(s.pending(), 0);
        let mut s = scrubber(&[secret]);
        assert_eq!(s.push_slice(event), event);
        // The terminator alone, after the event's text, releases it too.
        let mut s = scrubber(&[secret]);
        let (body, last) = event.split_at(event.len() - 1);
        let mut out = s.push_slice(body);
        out.extend(s.push_slice(last));
        assert_eq!(out, event);
        assert_eq!(s.pending(), 0);
    }
    // A line that ends in a base64 character or `=` may continue a wrapped encoding or a soft
    // line break: it waits for more (or the end), whatever the secret.
    for line in [&b"data: abc\n"[..], b"QUJD\r\n", b"soft=\r\n", b"x=\n"] {
        let mut s = scrubber(&[secret]);
        assert!(s.push_slice(line).is_empty());
        assert_eq!(s.finish_vec(), line);
    }
    // With a secret that holds a line break the rule is off.
    let mut s = scrubber(&[b"multi-line\nsecret-value"]);
    assert!(s.push_slice(b"data: {}\n\n").is_empty());
    assert_eq!(s.finish_vec(), b"data: {}\n\n");
}

#[test]
fn a_secret_split_by_a_line_break_is_redacted_across_the_newline_rule() {
    // Python's `base64.encodebytes`: 76 characters a line, LF, the break inside the secret.
    let secret = CANARY.as_bytes();
    let template = scrubber(&[secret]);
    for lead in 0..60 {
        let mut blob = vec![0x11u8; lead];
        blob.extend_from_slice(secret);
        blob.extend_from_slice(b"\x00tail");
        let encoded = STANDARD.encode(&blob);
        for (width, line_break) in [(76, "\n"), (76, "\r\n"), (64, "\n"), (76, "\\n")] {
            let wrapped = format!("{}\n", wrap(&encoded, width, 0, line_break));
            for sizes in [&[usize::MAX][..], &[1], &[77, 3]] {
                let (out, _) = stream_through(&template, wrapped.as_bytes(), sizes);
                assert_wrapped_secret_gone(&encoded, &out, lead, secret.len());
            }
        }
    }
}

#[test]
fn a_line_ending_in_an_html_reference_is_not_a_cut() {
    // Review finding: base64 of the secret whose last `+` is written `&#43;` and whose
    // neighbour (carrying the secret's last two bits) follows a line break. The newline rule
    // used to cut after `&#43;\n` and release the neighbour `f` on its own.
    let secret = b"tok-abcdefghijk\xf9";
    let input = b"dG9rLWFiY2RlZmdoaWpr&#43;\nf7&#43;/g==\n";
    let template = scrubber(&[secret]);
    let whole = template.scrub(input).into_owned();
    assert!(
        whole.starts_with(REDACTED.as_bytes()),
        "{}",
        String::from_utf8_lossy(&whole)
    );
    assert!(
        !whole[REDACTED.len()..].starts_with(b"\nf"),
        "the neighbour goes with the match"
    );
    for sizes in [&[usize::MAX][..], &[1], &[25, 1], &[26]] {
        let (out, _) = stream_through(&template, input, sizes);
        assert_eq!(out, whole, "chunked as {sizes:?}");
    }
}

/// Like [`assert_secret_characters_gone`] for a wrapped encoding: with the line breaks taken
/// out, what is left around the one marker is the encoding without exactly the characters
/// that carry a bit of the secret.
#[track_caller]
fn assert_wrapped_secret_gone(encoded: &str, out: &[u8], offset: usize, len: usize) {
    let marker = REDACTED.as_bytes();
    let at = memchr::memmem::find(out, marker).expect("a marker");
    let rest = &out[at + marker.len()..];
    assert!(memchr::memmem::find(rest, marker).is_none(), "one marker");
    let strip = |bytes: &[u8]| {
        String::from_utf8_lossy(bytes)
            .replace("\\r\\n", "")
            .replace("\\n", "")
            .replace(['\r', '\n'], "")
    };
    let (before, after) = (strip(&out[..at]), strip(rest));
    let first_secret_char = 8 * offset / 6;
    let last_secret_char = (8 * (offset + len)).div_ceil(6);
    assert_eq!(before, encoded[..first_secret_char], "leading edge");
    assert_eq!(after, encoded[last_secret_char..], "trailing edge");
}

#[test]
fn leftmost_longest_prefers_the_longer_secret() {
    let short = b"abcdefghijkl".as_slice();
    let long = b"abcdefghijklmnop".as_slice();
    let s = scrubber(&[short, long]);
    assert_eq!(
        s.scrub(b"x abcdefghijklmnop y").as_ref(),
        b"x [mint:redacted] y"
    );
    assert_eq!(
        s.scrub(b"x abcdefghijklmn y").as_ref(),
        b"x [mint:redacted]mn y"
    );
}

#[test]
fn headers_are_scrubbed_and_a_secret_header_name_is_dropped() {
    let secret = b"tok3n-abcdefghijklmnopqrstuvwxyz";
    let s = scrubber(&[secret]);
    let mut headers = HeaderMap::new();
    headers.insert(
        http::header::LOCATION,
        HeaderValue::from_static("https://evil.example/?t=tok3n-abcdefghijklmnopqrstuvwxyz"),
    );
    headers.append(
        http::header::SET_COOKIE,
        HeaderValue::from_static("session=dG9rM24tYWJjZGVmZ2hpamtsbW5vcHFyc3R1dnd4eXo=; Secure"),
    );
    headers.append(
        http::header::SET_COOKIE,
        HeaderValue::from_static("plain=1"),
    );
    headers.insert(
        http::HeaderName::from_static("tok3n-abcdefghijklmnopqrstuvwxyz"),
        HeaderValue::from_static("1"),
    );
    headers.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain"),
    );
    s.scrub_headers(&mut headers);
    assert_eq!(
        headers[http::header::LOCATION],
        "https://evil.example/?t=[mint:redacted]"
    );
    let cookies: Vec<_> = headers.get_all(http::header::SET_COOKIE).iter().collect();
    assert_eq!(cookies, ["session=[mint:redacted]=; Secure", "plain=1"]);
    assert!(!headers.contains_key("tok3n-abcdefghijklmnopqrstuvwxyz"));
    assert_eq!(headers[http::header::CONTENT_TYPE], "text/plain");
}

#[test]
fn a_mixed_case_secret_in_a_header_name_is_dropped_lowercased() {
    // Header names arrive lowercased: `Tok3N-Mixed-Case-Secret` comes back as
    // `tok3n-mixed-case-secret`, which still gives the secret away but for its case.
    let s = scrubber(&[b"Tok3N-Mixed-Case-Secret"]);
    let mut headers = http::HeaderMap::new();
    headers.insert(
        http::HeaderName::from_static("x-tok3n-mixed-case-secret"),
        HeaderValue::from_static("1"),
    );
    headers.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain"),
    );
    s.scrub_headers(&mut headers);
    assert!(!headers.contains_key("x-tok3n-mixed-case-secret"));
    assert_eq!(headers.len(), 1);
}

#[test]
fn the_empty_scrubber_passes_everything() {
    let mut s = Scrubber::empty();
    assert!(s.is_empty());
    let chunk = Bytes::from_static(b"anything at all");
    assert_eq!(s.push(chunk.clone()).into_bytes(), chunk);
    assert!(s.finish().is_empty());
    // Empty secrets add no pattern.
    assert!(scrubber(&[b""]).is_empty());
}

#[test]
fn debug_output_shows_no_secret_and_no_pattern() {
    let secret = CANARY.as_bytes();
    let mut s = scrubber(&[secret]);
    s.push_slice(b"prefix mint-canary-7f3a9c");
    let debug = format!("{s:?} {:?}", s.push(Bytes::from_static(b"1e5b2d4068")));
    let patterns = patterns_of(&[secret]);
    assert!(!contains_any(&patterns, debug.as_bytes()), "{debug}");
    assert!(!debug.contains("mint-canary"), "{debug}");
    let baseline = Baseline::from_secrets([secret]).unwrap();
    assert_eq!(format!("{baseline:?}"), "Baseline { .. }");
    assert_eq!(baseline.count(b"xx mint-canary-7f3a9c1e5b2d4068 xx"), 1);
}

#[test]
fn short_secrets_are_still_redacted_raw() {
    // Too short for the sampling filter and for base64 patterns.
    let s = scrubber(&[b"ab1"]);
    assert_eq!(s.scrub(b"xab1yab").as_ref(), b"x[mint:redacted]yab");
}

#[test]
fn many_secrets_with_the_filter_and_without() {
    let long: Vec<Vec<u8>> = (0..16)
        .map(|i| format!("secret-{i:02}-{}", "x".repeat(20 + i)).into_bytes())
        .collect();
    let refs: Vec<&[u8]> = long.iter().map(Vec::as_slice).collect();
    let mut input = b"begin ".repeat(500);
    for secret in &refs {
        input.extend_from_slice(secret);
        input.extend_from_slice(&b" filler ".repeat(37));
        input.extend_from_slice(STANDARD.encode(secret).as_bytes());
    }
    let out = stream(&refs, &input, &[4096, 13, 1000]);
    assert_clean(&patterns_of(&refs), &out);
    assert_eq!(
        memchr::memmem::find_iter(&out, REDACTED.as_bytes()).count(),
        32
    );
}

/// A byte source that makes near-misses likely: the secret's own bytes and base64 characters.
fn noise() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(
        prop_oneof![
            Just(b'a'),
            Just(b'Z'),
            Just(b'0'),
            Just(b'/'),
            Just(b'\\'),
            Just(b'%'),
            Just(b'='),
            Just(b'\n'),
            any::<u8>(),
        ],
        0..200,
    )
}

fn secret_strategy() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(
        prop_oneof![
            4 => prop::char::range('a', 'z'),
            2 => prop::char::range('0', '9'),
            1 => prop::sample::select(vec!['/', '+', '"', '\\', ' ', '%', '-', '_', '=', '\n', 'é', '<']),
        ],
        4..40,
    )
    .prop_map(|chars| chars.into_iter().collect::<String>().into_bytes())
}

/// One embedded form: a raw form of `forms`, or base64 of the secret inside a random blob.
fn embed(secret: &[u8], choice: usize, blob_prefix: &[u8], blob_suffix: &[u8]) -> Vec<u8> {
    let forms = forms(secret);
    if choice < forms.len() {
        return forms[choice].clone();
    }
    let mut blob = blob_prefix.to_vec();
    blob.extend_from_slice(secret);
    blob.extend_from_slice(blob_suffix);
    let column = choice * 7 % 64;
    match choice % 8 {
        0 => STANDARD.encode(&blob),
        1 => URL_SAFE_NO_PAD.encode(&blob),
        2 => STANDARD.encode(&blob).replace('/', "\\/"),
        3 => URL_SAFE.encode(&blob),
        4 => wrap(&STANDARD.encode(&blob), 76, column, "\n"),
        5 => wrap(&STANDARD.encode(&blob), 76, column, "\r\n"),
        6 => wrap(&STANDARD.encode(&blob), 64, column, "\\n"),
        _ => STANDARD.encode(&blob).replace('+', "&#43;"),
    }
    .into_bytes()
}

proptest! {
    // Byte-by-byte chunking in a debug build is slow; 64 cases of each keep CI quick.
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Secrets embedded in every encoding at random offsets, split into random chunks: the
    /// output holds no pattern, and equals the one-shot result.
    #[test]
    fn embedded_secrets_never_survive_any_chunking(
        secrets in prop::collection::vec(secret_strategy(), 1..4),
        pieces in prop::collection::vec((noise(), 0usize..44, noise(), noise()), 1..6),
        sizes in prop::collection::vec(1usize..300, 1..8),
    ) {
        let refs: Vec<&[u8]> = secrets.iter().map(Vec::as_slice).collect();
        let mut input = Vec::new();
        for (i, (filler, choice, pre, post)) in pieces.iter().enumerate() {
            input.extend_from_slice(filler);
            let pre = &pre[..pre.len().min(5)];
            let post = &post[..post.len().min(5)];
            input.extend(embed(refs[i % refs.len()], *choice, pre, post));
        }
        let streamed = stream(&refs, &input, &sizes);
        assert_clean(&patterns_of(&refs), &streamed);
        let one_shot = scrubber(&refs).scrub(&input).into_owned();
        prop_assert_eq!(streamed, one_shot);
    }

    /// Issue 21: a push appended to the carry (shorter than the hold) emits exactly what the
    /// rescanning design emitted for it, push by push, and holds back as much; and whatever
    /// the split (one-byte pieces, pieces around the hold, lines and events), the output is the
    /// one-shot result of the whole answer.
    #[test]
    fn small_pushes_emit_what_rescanning_emitted_and_any_split_equals_the_whole(
        secrets in prop::collection::vec(secret_strategy(), 1..3),
        pieces in prop::collection::vec((noise(), 0usize..44, noise(), noise()), 1..5),
        sizes in prop::collection::vec(prop_oneof![3 => 1usize..8, 1 => 1usize..2000], 1..10),
        reload_at in prop::option::of(0usize..40),
    ) {
        let refs: Vec<&[u8]> = secrets.iter().map(Vec::as_slice).collect();
        let mut input = Vec::new();
        for (i, (filler, choice, pre, post)) in pieces.iter().enumerate() {
            input.extend_from_slice(filler);
            let pre = &pre[..pre.len().min(5)];
            let post = &post[..post.len().min(5)];
            input.extend(embed(refs[i % refs.len()], *choice, pre, post));
        }
        let template = scrubber(&refs[..1]);
        let newer = scrubber(&refs);
        let (mut small, mut rescanning) = (template.fresh(), template.fresh());
        let (mut out, mut pos, mut i) = (Vec::new(), 0, 0);
        while pos < input.len() {
            let size = sizes[i % sizes.len()].min(input.len() - pos);
            let chunk = &input[pos..pos + size];
            if reload_at == Some(i) {
                small.adopt(newer.fresh());
                rescanning.adopt(newer.fresh());
            }
            let expected = rescanning.push_rescanning(chunk);
            let got = if i % 2 == 0 {
                small.push_slice(chunk)
            } else {
                small.push(Bytes::copy_from_slice(chunk)).into_bytes().to_vec()
            };
            prop_assert_eq!(&got, &expected, "push {} of {} bytes", i, size);
            prop_assert_eq!(small.pending(), rescanning.pending());
            out.extend(got);
            pos += size;
            i += 1;
        }
        let rest = small.finish_vec();
        prop_assert_eq!(&rest, &rescanning.finish_vec());
        out.extend(rest);
        let whole = if reload_at.is_some_and(|at| at < i) { &newer } else { &template };
        // A reload after the first push leaves the old patterns on what went out before it.
        if reload_at.is_none_or(|at| at == 0 || at >= i) {
            prop_assert_eq!(out, whole.scrub(&input).into_owned());
        }
    }

    /// `push_last` (a body whose end comes with its last bytes) gives the bytes `push` then
    /// `finish` give, and leaves the scrubber ready for another answer.
    #[test]
    fn the_last_push_ends_the_answer_as_push_then_finish(
        secrets in prop::collection::vec(secret_strategy(), 1..3),
        pieces in prop::collection::vec((noise(), 0usize..44, noise(), noise()), 1..4),
        split in prop::collection::vec(0usize..2000, 0..3),
    ) {
        let refs: Vec<&[u8]> = secrets.iter().map(Vec::as_slice).collect();
        let mut input = Vec::new();
        for (i, (filler, choice, pre, post)) in pieces.iter().enumerate() {
            input.extend_from_slice(filler);
            input.extend(embed(refs[i % refs.len()], *choice, &pre[..pre.len().min(5)], &post[..post.len().min(5)]));
        }
        let mut cuts: Vec<usize> = split.iter().map(|&c| c.min(input.len())).collect();
        cuts.sort_unstable();
        let template = scrubber(&refs);
        let (mut one, mut two) = (template.fresh(), template.fresh());
        let (mut out_one, mut out_two) = (Vec::new(), Vec::new());
        let mut from = 0;
        for &cut in &cuts {
            out_one.extend(one.push_slice(&input[from..cut]));
            out_two.extend(two.push_slice(&input[from..cut]));
            from = cut;
        }
        let last = Bytes::copy_from_slice(&input[from..]);
        out_one.extend_from_slice(&one.push_last(last.clone()).into_bytes());
        out_two.extend_from_slice(&two.push(last).into_bytes());
        out_two.extend(two.finish_vec());
        prop_assert_eq!(&out_one, &out_two);
        prop_assert_eq!(out_one, template.scrub(&input).into_owned());
        prop_assert_eq!(one.pending(), 0);
        let mut next = one.push_slice(b"next answer");
        next.extend(one.finish_vec());
        prop_assert_eq!(next, b"next answer".to_vec());
    }

    /// Data without any pattern comes out byte for byte, however it is chunked.
    #[test]
    fn clean_data_is_untouched(
        secrets in prop::collection::vec(secret_strategy(), 1..4),
        data in prop::collection::vec(noise(), 1..10),
        sizes in prop::collection::vec(1usize..300, 1..8),
    ) {
        let refs: Vec<&[u8]> = secrets.iter().map(Vec::as_slice).collect();
        let data = data.concat();
        prop_assume!(!contains_any(&patterns_of(&refs), &data));
        prop_assert_eq!(stream(&refs, &data, &sizes), data);
    }

    /// A secret inside a base64 blob at any offset: every character that carries one of its
    /// bits is redacted, whatever the neighbours and the chunking.
    #[test]
    fn base64_neighbours_never_leak_secret_bits(
        secret in "[a-zA-Z0-9_+/=-]{6,40}",
        prefix in prop::collection::vec(any::<u8>(), 0..12),
        suffix in prop::collection::vec(any::<u8>(), 0..12),
        url_safe in any::<bool>(),
        sizes in prop::collection::vec(1usize..64, 1..4),
    ) {
        let secret = secret.as_bytes();
        let mut blob = prefix.clone();
        blob.extend_from_slice(secret);
        blob.extend_from_slice(&suffix);
        let engine = if url_safe { &URL_SAFE } else { &STANDARD };
        let encoded = engine.encode(&blob).into_bytes();
        // Skip the rare case where the neighbours spell another pattern.
        let patterns = patterns_of(&[secret]);
        let hits: usize = patterns.iter().map(|p| memchr::memmem::find_iter(&encoded, p).count()).sum();
        prop_assume!(hits == 1);
        let out = stream(&[secret], &encoded, &sizes);
        assert_secret_characters_gone(&encoded, &out, prefix.len(), secret.len());
    }

    /// The same for line-wrapped base64 (MIME and PEM lines, CRLF, LF, JSON-escaped), the
    /// blob starting anywhere in a line.
    #[test]
    fn wrapped_base64_neighbours_never_leak_secret_bits(
        secret in "[a-zA-Z0-9_+/=-]{6,40}",
        prefix in prop::collection::vec(any::<u8>(), 0..12),
        suffix in prop::collection::vec(any::<u8>(), 0..12),
        width in prop::sample::select(vec![76usize, 64]),
        column in 0usize..64,
        line_break in prop::sample::select(vec!["\n", "\r\n", "\\n", "\\r\\n"]),
        sizes in prop::collection::vec(1usize..64, 1..4),
    ) {
        let secret = secret.as_bytes();
        let mut blob = prefix.clone();
        blob.extend_from_slice(secret);
        blob.extend_from_slice(&suffix);
        let encoded = STANDARD.encode(&blob);
        let wrapped = wrap(&encoded, width, column, line_break);
        let marked = scrubber(&[secret]).scrub(wrapped.as_bytes()).into_owned();
        prop_assume!(memchr::memmem::find_iter(&marked, REDACTED.as_bytes()).count() == 1);
        let out = stream(&[secret], wrapped.as_bytes(), &sizes);
        assert_wrapped_secret_gone(&encoded, &out, prefix.len(), secret.len());
    }

    /// The oracle of finding 1: two answers that differ only in bytes that are, or are not, a
    /// prefix of some form of the secret (each byte replaced by another of the same class, so
    /// the newline rule sees the same), neither holding a whole form, come out cut into the
    /// same pieces at the same pushes.
    #[test]
    fn the_framing_never_depends_on_held_bytes_matching_a_secret(
        secret in secret_strategy(),
        lead in noise(),
        choice in 0usize..44,
        keep in 1usize..400,
        follow in noise(),
        sizes in prop::collection::vec(1usize..600, 1..6),
    ) {
        let form = embed(&secret, choice, b"\x01\x02", b"\x03");
        let keep = keep.min(form.len() - 1).max(1);
        let guess = &form[..keep];
        let other: Vec<u8> = guess.iter().map(|&b| same_class(b)).collect();
        let (mut a, mut b) = (lead.clone(), lead);
        a.extend_from_slice(guess);
        b.extend_from_slice(&other);
        a.extend_from_slice(&follow);
        b.extend_from_slice(&follow);
        let template = scrubber(&[secret.as_slice()]);
        for input in [&a, &b] {
            let out = template.scrub(input).into_owned();
            prop_assume!(memchr::memmem::find(&out, REDACTED.as_bytes()).is_none());
        }
        let (out_a, frames_a) = stream_through(&template, &a, &sizes);
        let (out_b, frames_b) = stream_through(&template, &b, &sizes);
        prop_assert_eq!(out_a, a);
        prop_assert_eq!(out_b, b);
        prop_assert_eq!(frames_a, frames_b);
    }
}

/// Another byte of the same class as the newline rule sees bytes (LF, CR, `=`, base64, other).
fn same_class(byte: u8) -> u8 {
    match byte {
        b'\n' | b'\r' | b'=' => byte,
        b if is_base64_byte(b) => {
            if b == b'Q' {
                b'R'
            } else {
                b'Q'
            }
        }
        b'!' => b'#',
        _ => b'!',
    }
}

#[test]
fn every_proper_prefix_of_every_form_is_held_like_random_bytes() {
    // A deterministic sweep of the oracle: for each form and each proper prefix of it, an answer
    // ending in that prefix, then more, against the same with the prefix's bytes replaced.
    let secret = b"s3cr3t+/Key=\"q\" <&> \xc3\xa9nd-0123456789".as_slice();
    let refs = [secret];
    let mut forms = forms(secret);
    for choice in 20..44 {
        forms.push(embed(secret, choice, b"\x01", b"\x02\x03"));
    }
    let template = scrubber(&refs);
    for form in &forms {
        for keep in 1..form.len() {
            let mut a = b"HTTP body: ".to_vec();
            let mut b = a.clone();
            a.extend_from_slice(&form[..keep]);
            b.extend(form[..keep].iter().map(|&x| same_class(x)));
            for input in [&mut a, &mut b] {
                input.extend_from_slice(b" and more.");
            }
            for sizes in [&[11 + keep, 1000][..], &[11 + keep, 3]] {
                let (out_a, frames_a) = stream_through(&template, &a, sizes);
                let (_, frames_b) = stream_through(&template, &b, sizes);
                if memchr::memmem::find(&out_a, REDACTED.as_bytes()).is_none() {
                    assert_eq!(frames_a, frames_b, "prefix of {keep} bytes");
                }
            }
        }
    }
}

#[test]
fn adopting_newer_patterns_keeps_what_was_held_back_and_finds_the_new_secret() {
    let old: &[u8] = b"old-secret-value-1234";
    let new: &[u8] = b"new-secret-value-5678";
    let mut s = scrubber(&[old]);
    let mut out = s.push_slice(b"before old-secret-value-1234 and ");
    // The old secret's prefix is held back, not yet sent, when the reload comes.
    out.extend(s.push_slice(b"old-secret-val"));
    s.adopt(scrubber(&[old, new]));
    out.extend(s.push_slice(b"ue-1234 then new-secret-value-5678 end"));
    out.extend(s.finish_vec());
    let text = String::from_utf8(out).unwrap();
    assert_eq!(
        text,
        "before [mint:redacted] and [mint:redacted] then [mint:redacted] end"
    );
}

/// What a fresh copy of `template` does on `body`, streamed in 16 KiB chunks: pairs evaluated,
/// buckets read, byte comparisons (see `scrub/engine.rs`).
fn work_on(template: &Scrubber, body: &[u8]) -> [u64; 3] {
    let before = engine::work::done();
    let mut scrubber = template.fresh();
    for chunk in body.chunks(16 << 10) {
        scrubber.push_slice(chunk);
    }
    scrubber.finish_vec();
    let after = engine::work::done();
    [0, 1, 2].map(|i| after[i] - before[i])
}

/// `guess` between quotes, over and over, to about 8 KiB: how an agent would have one guess
/// reflected many times to make its cost measurable.
fn reflected(guess: &[u8]) -> Vec<u8> {
    let mut body = Vec::with_capacity(9 << 10);
    while body.len() < 8 << 10 {
        body.extend_from_slice(b"{\"q\":\"");
        body.extend_from_slice(guess);
        body.extend_from_slice(b"\"}\n");
    }
    body
}

#[test]
fn issue_22_the_work_never_depends_on_how_close_a_guess_comes() {
    use engine::work::{BUCKETS, COMPARES, PAIRS};
    let secret = CANARY.as_bytes();
    let s = scrubber(&[secret]);
    // The outside review's attack: guess a form that spends several bytes on each secret byte
    // (`\u006d\u0069...`, hex, percent) one secret byte at a time, have each guess reflected
    // many times, and keep the guess that costs Mint more. Every form, every prefix length short
    // of the whole, the right prefix against one wrong in its last byte.
    let mut forms = forms(secret);
    forms.push(
        secret
            .iter()
            .flat_map(|b| format!("\\u{b:04x}").into_bytes())
            .collect(),
    );
    forms.push(
        secret
            .iter()
            .flat_map(|b| format!("&#{b};").into_bytes())
            .collect(),
    );
    let (mut right_buckets, mut wrong_buckets, mut compared) = (0, 0, 0);
    for form in &forms {
        for k in 1..form.len() {
            let right = &form[..k];
            // A prefix of one form can be another whole (the stable base64 of the secret is a
            // prefix of its padded base64): that is a match, and costs what a match costs.
            if contains_any(&patterns_of(&[secret]), right) {
                continue;
            }
            let mut wrong = right.to_vec();
            let last = wrong.len() - 1;
            wrong[last] = if wrong[last] == b'0' { b'1' } else { b'0' };
            let (a, b) = (
                work_on(&s, &reflected(right)),
                work_on(&s, &reflected(&wrong)),
            );
            assert_eq!(a[PAIRS], b[PAIRS], "prefix of {k} bytes");
            // No comparison without a complete match; any comparison would cost what only a
            // right guess costs.
            compared += a[COMPARES] + b[COMPARES];
            right_buckets += a[BUCKETS];
            wrong_buckets += b[BUCKETS];
        }
    }
    assert_eq!(compared, 0);
    // A bucket is read where a window's full hash finds its bit set: as often (about one pair
    // in 64) for a right prefix as for a wrong one, and as for any bytes. A design that read
    // buckets for partial matches would read many more for the right prefixes.
    assert!(wrong_buckets > 0, "the count works");
    assert!(
        right_buckets < wrong_buckets * 2 && wrong_buckets < right_buckets * 2,
        "{right_buckets} buckets for right prefixes, {wrong_buckets} for wrong ones"
    );
    // And the whole form does cost a comparison, and is redacted.
    let whole = work_on(&s, &reflected(&forms[0]));
    assert!(whole[COMPARES] > 0);
}

#[test]
fn every_window_costs_the_same_pairs_whatever_its_bytes() {
    use engine::work::{COMPARES, PAIRS};
    // Secrets whose patterns share windows a lot (a periodic one, one with many characters
    // that have HTML and percent forms) next to a plain one: the fullest slot sets the cost.
    let secrets: [&[u8]; 3] = [
        b"abababababababababababababab",
        b"+/=&<>\"'%+/=&<>\"'%+/=&<>",
        CANARY.as_bytes(),
    ];
    let s = scrubber(&secrets);
    let random: Vec<u8> = (0..20_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let base = work_on(&s, &random)[PAIRS];
    // Windows of the patterns over and over, never a whole one.
    let mut pieces = b"abababababababababababababa-".repeat(715);
    pieces.truncate(20_000);
    let mut escaped =
        b"%2B%2F%3D%26%3C%3E%22%27%25%2B%2F%3D%26%3C%3E%22%27%25%2B%2F%3D%26".repeat(400);
    escaped.truncate(20_000);
    for body in [vec![b'a'; 20_000], pieces, escaped, vec![0; 20_000]] {
        assert!(!contains_any(&patterns_of(&secrets), &body));
        assert_eq!(body.len(), random.len());
        let work = work_on(&s, &body);
        assert_eq!([work[PAIRS], work[COMPARES]], [base, 0]);
    }
}
