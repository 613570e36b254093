//! Tests of `inject`: substitution in each site, fail-closed refusals that change nothing, and a
//! canary secret that never shows in an error, a `Debug` output or a scrubbed answer.

use http::header;
use mint_policy::normalize::normalize_target;

use super::*;

/// A secret with every character that needs care in some site.
const CANARY: &str = "canary-5ecret \"q\" \\b/s é+&=%";

#[track_caller]
fn secrets() -> Secrets {
    let mut secrets = Secrets::new();
    secrets.insert("github", SecretString::from(CANARY), SiteSet::of(Site::ALL));
    secrets.insert(
        "bodyonly",
        SecretString::from("body-only-secret-0123456789"),
        SiteSet::EMPTY.with(Site::Body),
    );
    secrets.insert(
        "bell",
        SecretString::from("bell-\u{7}-Injected"),
        SiteSet::of(Site::ALL),
    );
    secrets.insert(
        "crlf",
        SecretString::from("line\r\nInjected: yes"),
        SiteSet::of(Site::ALL),
    );
    secrets
}

/// The body places of the test aliases: `github` names `/a` and `/v`, `bodyonly` `/n/1/k`,
/// `unknown` (declared, but without a secret in [`secrets`]) `/a`; `headeronly` none.
fn places() -> BodyPlaces {
    let yaml = "aliases:
  - name: github
    hosts: [api.example.com]
    sites: [header, query, {body: [/a, /v]}]
  - name: bodyonly
    hosts: [api.example.com]
    sites: [{body: [/n/1/k]}]
  - name: bell
    hosts: [api.example.com]
  - name: crlf
    hosts: [api.example.com]
  - name: unknown
    hosts: [api.example.com]
    sites: [{body: [/a]}]
  - name: headeronly
    hosts: [api.example.com]
";
    let load = mint_policy::aliases::load_aliases(yaml.as_bytes(), "aliases.yaml");
    assert!(load.errors().next().is_none(), "{:?}", load.diagnostics);
    BodyPlaces::new(&load.aliases.unwrap())
}

fn json_headers() -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers
}

/// Every error and `Debug` text the tests saw, for the canary check.
fn assert_no_canary(texts: &[String]) {
    for text in texts {
        assert!(!text.contains("canary-5ecret"), "{text}");
        assert!(!text.contains("body-only-secret"), "{text}");
        assert!(!text.contains("Injected"), "{text}");
    }
}

#[test]
fn header_placeholders_become_sensitive_values() {
    let mut headers = HeaderMap::new();
    headers.insert(
        header::AUTHORIZATION,
        HeaderValue::from_static("Bearer {{mint:github}}"),
    );
    headers.append("x-two", HeaderValue::from_static("a"));
    headers.append(
        "x-two",
        HeaderValue::from_static("{{mint:github}}|{{mint:github}}"),
    );
    headers.insert(header::ACCEPT, HeaderValue::from_static("*/*"));
    super::headers(&mut headers, &secrets()).unwrap();
    let auth = &headers[header::AUTHORIZATION];
    assert_eq!(auth.as_bytes(), format!("Bearer {CANARY}").as_bytes());
    assert!(auth.is_sensitive());
    let two: Vec<_> = headers.get_all("x-two").iter().collect();
    assert_eq!(two[0], "a");
    assert!(!two[0].is_sensitive());
    assert_eq!(two[1].as_bytes(), format!("{CANARY}|{CANARY}").as_bytes());
    assert_eq!(headers[header::ACCEPT], "*/*");
}

#[test]
fn header_refusals_change_nothing() {
    let cases = [
        ("{{mint:crlf}}", "HeaderValue"),
        ("{{mint:bell}}", "HeaderValue"),
        ("%7B%7Bmint%3Agithub%7D%7D", "Forbidden"),
        ("{{mint:unknown}}", "MissingSecret"),
        ("{{mint:bodyonly}}", "SiteNotAllowed"),
        ("{{mint:GitHub}}", "Placeholder"),
    ];
    let mut texts = Vec::new();
    for (value, kind) in cases {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Bearer {{mint:github}}"),
        );
        headers.insert("x-bad", HeaderValue::from_str(value).unwrap());
        let before = headers.clone();
        let err = super::headers(&mut headers, &secrets()).unwrap_err();
        assert!(format!("{err:?}").starts_with(kind), "{err:?}");
        assert_eq!(headers, before, "nothing substituted");
        texts.push(format!("{err} {err:?}"));
    }
    assert_eq!(
        texts[0].split(" HeaderValue").next().unwrap(),
        "the secret of alias `crlf` holds a control character: not sent in `x-bad`"
    );
    assert_no_canary(&texts);
}

#[test]
fn query_placeholders_become_percent_encoded_secrets() {
    let target = normalize_target(
        "https",
        "api.example.com:8443",
        "/v1/x?a={{mint:github}}&b=%7B%7Bmint%3Agithub%7D%7D&c=1",
    )
    .unwrap();
    let uri = uri(&target, &secrets()).unwrap();
    let encoded = "canary-5ecret%20%22q%22%20%5Cb%2Fs%20%C3%A9%2B%26%3D%25";
    assert_eq!(
        uri.to_string(),
        format!("https://api.example.com:8443/v1/x?a={encoded}&b={encoded}&c=1")
    );
    // Without a query the target is unchanged.
    let plain = normalize_target("https", "api.example.com", "/v1/x").unwrap();
    assert_eq!(
        super::uri(&plain, &secrets()).unwrap().to_string(),
        "https://api.example.com/v1/x"
    );
}

#[test]
fn a_placeholder_in_the_path_is_refused() {
    let target = normalize_target("https", "h.example", "/a/%7B%7Bmint%3Agithub%7D%7D").unwrap();
    let err = uri(&target, &secrets()).unwrap_err();
    assert_eq!(
        err,
        InjectError::Forbidden {
            alias: "github".to_owned(),
            part: Part::Path,
            place: Forbidden::Target
        }
    );
    let only_header = {
        let mut s = Secrets::new();
        s.insert("github", SecretString::from(CANARY), SiteSet::HEADER);
        s
    };
    let target = normalize_target("https", "h.example", "/a?t={{mint:github}}").unwrap();
    assert!(matches!(
        uri(&target, &only_header),
        Err(InjectError::SiteNotAllowed {
            site: Site::Query,
            ..
        })
    ));
}

#[test]
fn json_body_placeholders_are_spliced_and_the_rest_is_byte_exact() {
    let raw = "{ \"a\" :\t\"x{{mint:github}}y\" ,\"n\":[1.50, {\"k\":\"{{mint:bodyonly}}\"}] }\n";
    let out = body(&json_headers(), Bytes::from(raw), &places(), &secrets()).unwrap();
    let value: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(value["a"], format!("x{CANARY}y"));
    assert_eq!(value["n"][1]["k"], "body-only-secret-0123456789");
    let expected = raw
        .replace(
            "{{mint:github}}",
            serde_json::to_string(CANARY).unwrap().trim_matches('"'),
        )
        .replace("{{mint:bodyonly}}", "body-only-secret-0123456789");
    assert_eq!(out, expected.as_bytes());
}

#[test]
fn a_body_without_placeholders_is_returned_as_is() {
    let raw = Bytes::from_static(b"{\"a\":\"no placeholder\"}");
    let out = body(&json_headers(), raw.clone(), &places(), &secrets()).unwrap();
    assert_eq!(out.as_ptr(), raw.as_ptr());
    let binary = Bytes::from_static(b"\x00\xff\x10 mint");
    assert_eq!(
        body(&HeaderMap::new(), binary.clone(), &places(), &secrets()).unwrap(),
        binary
    );
}

#[test]
fn body_refusals() {
    let cases = [
        (json_headers(), "{\"a\":\"\\u007b{mint:github}}\"}"),
        (json_headers(), "{\"a\":\"%7B%7Bmint%3Agithub%7D%7D\"}"),
        (json_headers(), "{\"a\":\"{{mint:unknown}}\"}"),
    ];
    let mut texts = Vec::new();
    for (headers, raw) in cases {
        let err = body(&headers, Bytes::from(raw), &places(), &secrets()).unwrap_err();
        texts.push(format!("{err} {err:?}"));
    }
    assert!(texts[0].contains("an escaped JSON string"), "{}", texts[0]);
    assert!(texts[1].contains("an escaped JSON string"), "{}", texts[1]);
    assert!(texts[2].starts_with("no secret was resolved for alias `unknown`"));
    assert_no_canary(&texts);
}

/// A placeholder where Mint never substitutes is forwarded as it came, byte for byte: a member
/// name, a body that is not JSON (by type, by parse, or by content coding), an undeclared alias,
/// an alias that names no body place, a malformed spelling.
#[test]
fn inert_body_quotes_are_left_as_they_are() {
    let mut gzip = json_headers();
    gzip.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
    let cases = [
        (json_headers(), "{\"{{mint:github}}\":1}"),
        (HeaderMap::new(), "{\"a\":\"{{mint:github}}\"}"),
        (json_headers(), "{\"a\":\"{{mint:github}}\",}"),
        (gzip, "{\"a\":\"{{mint:github}}\"}"),
        (
            json_headers(),
            "{\"a\":\"{{mint:undeclared}} {{mint:headeronly}}\"}",
        ),
        (HeaderMap::new(), "{{mint:Github}} {{mint:github"),
    ];
    for (headers, raw) in cases {
        let raw = Bytes::from(raw);
        let out = body(&headers, raw.clone(), &places(), &secrets()).unwrap();
        assert_eq!(out, raw);
    }
}

fn form_headers() -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/x-www-form-urlencoded"),
    );
    headers
}

/// Issue 16: an alias with `form: [client_secret]` is substituted in that field's value, in any
/// spelling, percent-encoded: the canary's space, `&`, `=`, `+`, `%`, quotes and `é` neither
/// split the form nor change another field. Every other byte is forwarded as it came.
#[test]
fn form_body_substitution_is_percent_encoded_in_the_named_field_only() {
    let yaml = "aliases:\n  - name: github\n    hosts: [api.example.com]\n    sites: [{form: [client_secret]}]\n";
    let load = mint_policy::aliases::load_aliases(yaml.as_bytes(), "aliases.yaml");
    let places = BodyPlaces::new(&load.aliases.unwrap());
    let encoded = "canary-5ecret%20%22q%22%20%5Cb%2Fs%20%C3%A9%2B%26%3D%25";
    for spelled in [
        "{{mint:github}}",
        "%7B%7Bmint%3Agithub%7D%7D",
        "%7b{mint:github%7d}",
    ] {
        let raw = format!(
            "grant_type=client_credentials&client_secret={spelled}&note={{{{mint:github}}}}&{{{{mint:github}}}}=1"
        );
        let out = body(
            &form_headers(),
            Bytes::from(raw.clone()),
            &places,
            &secrets(),
        )
        .unwrap();
        let expected = raw.replacen(spelled, encoded, 1);
        assert_eq!(out, expected.as_bytes(), "{spelled}");
        let fields: Vec<(Vec<u8>, Vec<u8>)> = out
            .split(|&b| b == b'&')
            .map(|field| {
                let at = field.iter().position(|&b| b == b'=').unwrap();
                (
                    mint_policy::body::form_decode(&field[..at]),
                    mint_policy::body::form_decode(&field[at + 1..]),
                )
            })
            .collect();
        assert_eq!(fields.len(), 4, "{spelled}");
        assert_eq!(fields[1].0, b"client_secret");
        assert_eq!(fields[1].1, CANARY.as_bytes(), "{spelled}");
        assert_eq!(fields[2].1, b"{{mint:github}}");
    }
    // A malformed placeholder in the named field is refused, and names no value.
    let err = body(
        &form_headers(),
        Bytes::from_static(b"client_secret={{mint:GitHub}}"),
        &places,
        &secrets(),
    )
    .unwrap_err();
    assert_no_canary(&[format!("{err} {err:?}")]);
    // The same form sent gzip-encoded, or as text: nothing is live.
    let mut gzip = form_headers();
    gzip.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
    for headers in [gzip, HeaderMap::new()] {
        let raw = Bytes::from_static(b"client_secret={{mint:github}}");
        assert_eq!(
            body(&headers, raw.clone(), &places, &secrets()).unwrap(),
            raw
        );
    }
}

/// Issue 16: an alias with `body: [/client_secret]` is substituted there and nowhere else: a
/// sibling field, a nested transcript and a member name keep the placeholder as text, and every
/// byte but the substituted ones is forwarded as it came.
#[test]
fn body_substitution_happens_only_at_the_named_pointer() {
    let yaml = "aliases:\n  - name: github\n    hosts: [api.example.com]\n    sites: [{body: [/client_secret]}]\n";
    let load = mint_policy::aliases::load_aliases(yaml.as_bytes(), "aliases.yaml");
    let places = BodyPlaces::new(&load.aliases.unwrap());
    let raw = concat!(
        "{\"grant_type\":\"client_credentials\",\"client_secret\":\"{{mint:github}}\",",
        "\"note\":\"{{mint:github}}\",",
        "\"messages\":[{\"role\":\"user\",\"content\":\"my key is {{mint:github}}\"}],",
        "\"{{mint:github}}\":0}"
    );
    let out = body(&json_headers(), Bytes::from(raw), &places, &secrets()).unwrap();
    let escaped = serde_json::to_string(CANARY).unwrap();
    let expected = raw.replacen("{{mint:github}}", escaped.trim_matches('"'), 1);
    assert_eq!(out, expected.as_bytes());
    let value: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(value["client_secret"], CANARY);
    assert_eq!(value["note"], "{{mint:github}}");
}

#[test]
fn the_scrubber_redacts_every_secret_released() {
    let secrets = secrets();
    let mut scrubber = secrets.scrubber().unwrap();
    let answer = format!(
        "{{\"echo\":{},\"h\":\"{}\"}}",
        serde_json::to_string(CANARY).unwrap(),
        hex::encode("body-only-secret-0123456789")
    );
    let mut out = scrubber.push_slice(answer.as_bytes());
    out.extend(scrubber.finish_vec());
    let out = String::from_utf8(out).unwrap();
    assert_eq!(
        out,
        "{\"echo\":\"[mint:redacted]\",\"h\":\"[mint:redacted]\"}"
    );
    assert!(Secrets::new().scrubber().unwrap().is_empty());
}

#[test]
fn canary_never_shows_in_debug_output() {
    let secrets = secrets();
    let texts = vec![
        format!("{secrets:?}"),
        format!("{:?}", secrets.scrubber().unwrap()),
        format!("{:?}", secrets.baseline().unwrap()),
    ];
    assert_eq!(
        texts[0],
        "Secrets { aliases: [\"bell\", \"bodyonly\", \"crlf\", \"github\"], .. }"
    );
    assert_no_canary(&texts);
}

#[test]
fn only_inject_reads_secret_values() {
    let call = ".expose_secret()";
    assert_eq!(include_str!("../inject.rs").matches(call).count(), 1);
    for source in [
        include_str!("../scrub.rs"),
        include_str!("../scrub/engine.rs"),
        include_str!("../scrub/patterns.rs"),
        include_str!("../placeholder.rs"),
        include_str!("../placeholder/spelling.rs"),
        include_str!("../placeholder/json.rs"),
    ] {
        assert!(!source.contains("expose_secret"));
    }
}

#[test]
fn canary_survives_no_path() {
    use crate::secrets::placeholder::{RequestParts, scan};

    let secrets = secrets();
    let mut texts = Vec::new();
    // Requests that scan fine, are malformed, hold too many placeholders, or sit in a forbidden
    // place.
    let many = "{{mint:github}}".repeat(17);
    let cases = [
        (
            "a={{mint:github}}",
            "Bearer {{mint:github}}",
            "{\"v\":\"{{mint:github}}\"}",
        ),
        ("a={{mint:Github}}", "x", "{}"),
        (many.as_str(), "x", "{}"),
        (
            "a=1",
            "%7B%7Bmint%3Agithub%7D%7D",
            "{\"{{mint:github}}\":1}",
        ),
    ];
    for (query, auth, body_text) in cases {
        let mut headers = json_headers();
        headers.insert(header::AUTHORIZATION, HeaderValue::from_str(auth).unwrap());
        let parts = RequestParts {
            scheme: "https",
            authority: "api.example.com",
            path: "/x",
            query: Some(query),
            headers: &headers,
            body: body_text.as_bytes(),
        };
        texts.push(format!("{parts:?}"));
        match scan(&parts, &places(), &ShapedPlaceholders::default()) {
            Ok(found) => texts.push(format!("{found:?} {:?}", found.alias_uses())),
            Err(err) => texts.push(format!("{err} {err:?}")),
        }
        let mut injected = headers.clone();
        match super::headers(&mut injected, &secrets) {
            // Headers with the secret are sensitive: their Debug hides the value.
            Ok(()) => texts.push(format!("{injected:?}")),
            Err(err) => texts.push(format!("{err} {err:?}")),
        }
        match body(&headers, Bytes::from(body_text), &places(), &secrets) {
            Ok(_) => {}
            Err(err) => texts.push(format!("{err} {err:?}")),
        }
        let target = normalize_target("https", "api.example.com", &format!("/x?{query}"));
        if let Ok(target) = target {
            match uri(&target, &secrets) {
                Ok(_) => {}
                Err(err) => texts.push(format!("{err} {err:?}")),
            }
        }
    }
    // The answer echoes the secret in several forms, split byte by byte.
    let mut scrubber = secrets.scrubber().unwrap();
    let echo = format!(
        "{} {} {}",
        CANARY,
        serde_json::to_string(CANARY).unwrap(),
        hex::encode(CANARY)
    );
    let mut out = Vec::new();
    for byte in echo.as_bytes() {
        out.extend(scrubber.push_slice(std::slice::from_ref(byte)));
        texts.push(format!("{scrubber:?}"));
    }
    out.extend(scrubber.finish_vec());
    texts.push(String::from_utf8_lossy(&out).into_owned());
    assert_no_canary(&texts);
}

#[test]
fn absorbed_secrets_are_scrubbed_once_and_never_substituted() {
    let mut current = Secrets::new();
    current.insert(
        "github",
        SecretString::from("new-token-value-1234"),
        SiteSet::HEADER,
    );
    let mut previous = Secrets::new();
    previous.insert(
        "github",
        SecretString::from("old-token-value-5678"),
        SiteSet::HEADER,
    );
    previous.insert(
        "same",
        SecretString::from("new-token-value-1234"),
        SiteSet::HEADER,
    );
    current.absorb(&previous);
    current.absorb(&previous);
    // The old value is kept once; the value already held is not added again.
    assert_eq!(current.len(), 2);
    let mut scrubber = current.scrubber().unwrap();
    let out = scrubber.push_slice(b"a old-token-value-5678 b new-token-value-1234 c");
    let mut out = out;
    out.extend(scrubber.finish_vec());
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "a [mint:redacted] b [mint:redacted] c"
    );
    // A retired secret is released for no site: no placeholder can bring it back.
    let mut headers = HeaderMap::new();
    headers.insert(
        header::AUTHORIZATION,
        HeaderValue::from_static("Bearer {{mint:github}}"),
    );
    super::headers(&mut headers, &current).unwrap();
    assert_eq!(
        headers[header::AUTHORIZATION],
        "Bearer new-token-value-1234"
    );
    assert!(format!("{current:?}").contains("retired:"));
    assert!(!format!("{current:?}").contains("old-token"));
}

#[test]
fn splicing_makes_room_once_so_no_moved_buffer_keeps_a_secret() {
    // A long secret that JSON-escapes to six bytes a byte, the most any site takes: a buffer
    // sized for the raw text would have grown (and freed a copy) while holding the first one.
    let long = "\u{1}".repeat(300);
    let mut secrets = Secrets::new();
    secrets.insert(
        "github",
        SecretString::from(long.clone()),
        SiteSet::of(Site::ALL),
    );
    let raw = br#"{"a":"{{mint:github}}","v":"{{mint:github}}"}"#;
    let mut sink = Sink::new(usize::MAX, &secrets.shaped);
    placeholder::scan_body(&json_headers(), raw, &places(), &mut sink).unwrap();
    let found = sink.into_found();
    assert_eq!(found.len(), 2);
    let mut out = Vec::new();
    splice(
        &mut out,
        raw,
        &found,
        (Site::Body, json_escaped_len),
        &secrets,
        |out, _, secret| {
            json_escape(out, secret);
            Ok(())
        },
    )
    .unwrap();
    let escaped = 6 * long.len();
    assert_eq!(
        out.len(),
        raw.len() - 2 * "{{mint:github}}".len() + 2 * escaped
    );
    assert_eq!(
        out.capacity(),
        raw.len() + 2 * escaped,
        "the buffer grew while it held a secret"
    );
}

#[test]
fn encoded_lengths_are_what_the_encoders_write() {
    // Every byte value, alone and in a run, and a pseudo-random mix.
    let mut inputs: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
    inputs.push((0..=255u8).collect());
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    inputs.push(
        (0..4096)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state as u8
            })
            .collect(),
    );
    for input in &inputs {
        let mut out = Vec::new();
        percent_encode(&mut out, input);
        assert_eq!(percent_encoded_len(input), out.len(), "{input:?}");
        let mut out = Vec::new();
        json_escape(&mut out, input);
        assert_eq!(json_escaped_len(input), out.len(), "{input:?}");
    }
}
