//! Tests of shaped placeholders: derivation, and that every site treats a shaped value exactly as
//! it treats `{{mint:NAME}}` (same decision, same substitution).

use super::*;

fn key(byte: u8) -> PlaceholderKey {
    PlaceholderKey::from_bytes([byte; 32])
}

#[test]
fn token_values_fit_their_shape_and_are_stable() {
    let shape = PlaceholderShape::parse("sk-:48").unwrap();
    let value = key(1).derive("openai", &shape);
    assert_eq!(value.len(), 48);
    assert!(value.starts_with("sk-"));
    assert!(value[3..].bytes().all(|b| b.is_ascii_alphanumeric()));
    assert_eq!(value, key(1).derive("openai", &shape), "stable");
    assert_ne!(value, key(2).derive("openai", &shape), "per home");
    assert_ne!(value, key(1).derive("openai2", &shape), "per alias");
    let other = PlaceholderShape::parse("sk-:49").unwrap();
    assert_ne!(
        value[..48],
        key(1).derive("openai", &other)[..48],
        "per shape"
    );
    let hex = key(1).derive("x", &PlaceholderShape::parse(":40:hex").unwrap());
    assert!(
        hex.bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
    );
}

#[test]
fn jwt_values_parse_as_jwts_naming_the_alias() {
    let value = key(3).derive("codex", &PlaceholderShape::Jwt);
    let parts: Vec<&str> = value.split('.').collect();
    assert_eq!(parts.len(), 3);
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let header: serde_json::Value = serde_json::from_slice(&b64.decode(parts[0]).unwrap()).unwrap();
    assert_eq!(header["alg"], "HS256");
    let claims: serde_json::Value = serde_json::from_slice(&b64.decode(parts[1]).unwrap()).unwrap();
    assert_eq!(claims["mint"], "codex");
    assert_eq!(claims["jti"].as_str().unwrap().len(), 22);
    assert_eq!(b64.decode(parts[2]).unwrap().len(), 32);
}

#[test]
fn key_text_round_trips_and_debug_hides_it() {
    let k = key(7);
    let again = PlaceholderKey::from_text(&k.to_text()).unwrap();
    let shape = PlaceholderShape::Jwt;
    assert_eq!(k.derive("a", &shape), again.derive("a", &shape));
    assert!(PlaceholderKey::from_text("zz").is_none());
    assert!(!format!("{k:?}").contains("0707"));
}

#[test]
fn overlapping_values_are_refused() {
    let values = vec![
        ("a".to_owned(), "sk-abcdef".to_owned()),
        ("b".to_owned(), "xsk-abcdefx".to_owned()),
    ];
    assert!(matches!(
        ShapedPlaceholders::from_values(values),
        Err(ShapedError::Overlap { .. })
    ));
}

mod parity {
    //! Every site treats the shaped value of `gh` exactly as `{{mint:gh}}`: the scan finds the
    //! same alias in the same part and place (or skips it as the same inert quote), and the
    //! substitution writes the same bytes or refuses with the same error.

    use std::sync::Arc;

    use bytes::Bytes;
    use http::{HeaderMap, HeaderName, HeaderValue};
    use mint_policy::aliases::load_aliases;
    use mint_policy::body::BodyPlaces;
    use mint_policy::normalize::normalize_target;
    use mint_policy::site::{Site, SiteSet};
    use proptest::prelude::*;
    use secrecy::SecretString;

    use super::*;
    use crate::secrets::inject::{self, Secrets};
    use crate::secrets::placeholder::{RequestParts, Skipped, live_in_encoded_body, scan};

    const SECRET: &str = "CANARY-parity-secret-7f3a";

    const ALIASES: &str = "aliases:
  - name: gh
    hosts: [api.example.com]
    sites: [header, query, {body: [/token]}, {form: [secret]}]
    placeholder: {prefix: sk-, length: 48}
  - name: jw
    hosts: [api.example.com]
    placeholder: jwt
";

    struct Fixture {
        aliases: AliasFile,
        places: BodyPlaces,
        shaped: Arc<ShapedPlaceholders>,
    }

    fn fixture() -> Fixture {
        let load = load_aliases(ALIASES.as_bytes(), "aliases.yaml");
        assert!(load.errors().next().is_none(), "{:?}", load.diagnostics);
        let aliases = load.aliases.unwrap();
        let shaped = ShapedPlaceholders::derive(&key(9), &aliases).unwrap();
        Fixture {
            places: BodyPlaces::new(&aliases),
            shaped: Arc::new(shaped),
            aliases,
        }
    }

    /// A request with `{P}` where the placeholder goes, in one spelling.
    #[derive(Clone, Copy)]
    struct Case {
        name: &'static str,
        path: &'static str,
        query: Option<&'static str>,
        header: Option<(&'static str, &'static str)>,
        content_type: Option<&'static str>,
        body: &'static str,
        spelling: Spelling,
    }

    #[derive(Clone, Copy)]
    enum Spelling {
        Raw,
        /// Every byte as `%XX`.
        Percent,
        /// The first character as a JSON `\u00XX` escape.
        JsonEscape,
    }

    fn spell(text: &str, spelling: Spelling) -> String {
        match spelling {
            Spelling::Raw => text.to_owned(),
            Spelling::Percent => text.bytes().map(|b| format!("%{b:02X}")).collect(),
            Spelling::JsonEscape => {
                let (first, rest) = text.split_at(1);
                format!("\\u{:04x}{rest}", u32::from(first.as_bytes()[0]))
            }
        }
    }

    fn cases() -> Vec<Case> {
        let base = Case {
            name: "",
            path: "/v1/x",
            query: None,
            header: None,
            content_type: None,
            body: "",
            spelling: Spelling::Raw,
        };
        let json = Some("application/json");
        let form = Some("application/x-www-form-urlencoded");
        let mut cases = vec![
            Case {
                name: "header raw",
                header: Some(("authorization", "Bearer {P}")),
                ..base
            },
            Case {
                name: "header alone",
                header: Some(("x-api-key", "{P}")),
                ..base
            },
            Case {
                name: "header percent-encoded",
                header: Some(("authorization", "Bearer {P}")),
                spelling: Spelling::Percent,
                ..base
            },
            Case {
                name: "query raw",
                query: Some("a=1&key={P}"),
                ..base
            },
            Case {
                name: "query percent-encoded",
                query: Some("key={P}&b=2"),
                spelling: Spelling::Percent,
                ..base
            },
            Case {
                name: "path",
                path: "/v1/{P}/x",
                ..base
            },
            Case {
                name: "path percent-encoded",
                path: "/v1/{P}",
                spelling: Spelling::Percent,
                ..base
            },
            Case {
                name: "json at the named pointer",
                content_type: json,
                body: r#"{"token":"{P}","n":1}"#,
                ..base
            },
            Case {
                name: "json embedded at the named pointer",
                content_type: json,
                body: r#"{"token":"Basic {P}"}"#,
                ..base
            },
            Case {
                name: "json escaped at the named pointer",
                content_type: json,
                body: r#"{"token":"{P}"}"#,
                spelling: Spelling::JsonEscape,
                ..base
            },
            Case {
                name: "json percent-encoded at the named pointer",
                content_type: json,
                body: r#"{"token":"{P}"}"#,
                spelling: Spelling::Percent,
                ..base
            },
            Case {
                name: "json elsewhere (inert)",
                content_type: json,
                body: r#"{"messages":[{"content":"use {P} here"}]}"#,
                ..base
            },
            Case {
                name: "json member name (inert)",
                content_type: json,
                body: r#"{"{P}":1}"#,
                ..base
            },
            Case {
                name: "form named field raw",
                content_type: form,
                body: "grant_type=x&secret={P}",
                ..base
            },
            Case {
                name: "form named field percent-encoded",
                content_type: form,
                body: "secret={P}&a=1",
                spelling: Spelling::Percent,
                ..base
            },
            Case {
                name: "form other field (inert)",
                content_type: form,
                body: "note={P}&secret=1",
                ..base
            },
            Case {
                name: "form after a raw semicolon (inert)",
                content_type: form,
                body: "secret=a;{P}",
                ..base
            },
            Case {
                name: "form field name (inert)",
                content_type: form,
                body: "{P}=1",
                ..base
            },
            Case {
                name: "text body (inert)",
                content_type: Some("text/plain"),
                body: "quote: {P}",
                ..base
            },
            Case {
                name: "text body percent-encoded (inert)",
                body: "quote: {P}",
                spelling: Spelling::Percent,
                ..base
            },
        ];
        // Two in one request, across parts.
        cases.push(Case {
            name: "header and json",
            header: Some(("authorization", "Bearer {P}")),
            content_type: json,
            body: r#"{"token":"{P}"}"#,
            ..base
        });
        cases
    }

    /// One found placeholder: alias, place, part and matched body place, as text.
    type FoundRow = (String, String, String, Option<String>);

    /// What the scan and the substitution made of one request.
    #[derive(Debug, PartialEq)]
    struct Outcome {
        found: Result<Vec<FoundRow>, String>,
        skipped: Option<Skipped>,
        headers: Result<Vec<(String, Vec<u8>)>, String>,
        uri: Result<String, String>,
        body: Result<Vec<u8>, String>,
    }

    fn run(fixture: &Fixture, case: &Case, placeholder: &str) -> Outcome {
        let spelled = spell(placeholder, case.spelling);
        let fill = |text: &str| text.replace("{P}", &spelled);
        let path = fill(case.path);
        let query = case.query.map(fill);
        let body = fill(case.body);
        let mut headers = HeaderMap::new();
        if let Some((name, value)) = case.header {
            headers.insert(
                HeaderName::from_static(name),
                HeaderValue::from_str(&fill(value)).unwrap(),
            );
        }
        if let Some(content_type) = case.content_type {
            headers.insert(
                http::header::CONTENT_TYPE,
                HeaderValue::from_static(content_type),
            );
        }
        let parts = RequestParts {
            scheme: "https",
            authority: "api.example.com",
            path: &path,
            query: query.as_deref(),
            headers: &headers,
            body: body.as_bytes(),
        };
        let scanned = scan(&parts, &fixture.places, &fixture.shaped);
        let found = scanned
            .as_ref()
            .map(|found| {
                found
                    .found()
                    .iter()
                    .map(|f| {
                        (
                            f.alias.clone(),
                            format!("{:?}", f.place),
                            f.part.to_string(),
                            f.matched.as_ref().map(|m| format!("{m:?}")),
                        )
                    })
                    .collect()
            })
            .map_err(|e| e.to_string());
        let skipped = scanned.ok().map(|found| found.skipped().clone());

        let mut secrets = Secrets::new().with_shaped(Arc::clone(&fixture.shaped));
        secrets.insert("gh", SecretString::from(SECRET), SiteSet::of(Site::ALL));
        let mut injected = headers.clone();
        let headers_out = inject::headers(&mut injected, &secrets)
            .map(|()| {
                injected
                    .iter()
                    .map(|(n, v)| (n.to_string(), v.as_bytes().to_vec()))
                    .collect()
            })
            .map_err(|e| e.to_string());
        let target = query
            .as_deref()
            .map_or_else(|| path.clone(), |q| format!("{path}?{q}"));
        let uri = match normalize_target("https", "api.example.com", &target) {
            Ok(target) => inject::uri(&target, &secrets)
                .map(|uri| uri.to_string())
                .map_err(|e| e.to_string()),
            Err(e) => Err(format!("target: {e}")),
        };
        let body_out = inject::body(
            &headers,
            Bytes::from(body.clone()),
            &fixture.places,
            &secrets,
        )
        .map(|b| b.to_vec())
        .map_err(|e| e.to_string());
        Outcome {
            found,
            skipped,
            headers: headers_out,
            uri,
            body: body_out,
        }
    }

    /// The parts of an outcome that still hold the placeholder as text (inert quotes, refused
    /// requests) differ by the spelling itself: compare them with it replaced by a marker.
    fn normalized(outcome: Outcome, placeholder: &str, spelling: Spelling) -> Outcome {
        let spelled = spell(placeholder, spelling);
        let mark = |bytes: Vec<u8>| {
            String::from_utf8(bytes)
                .unwrap()
                .replace(&spelled, "<P>")
                .replace(placeholder, "<P>")
                .into_bytes()
        };
        Outcome {
            headers: outcome
                .headers
                .map(|h| h.into_iter().map(|(n, v)| (n, mark(v))).collect()),
            uri: outcome
                .uri
                .map(|u| String::from_utf8(mark(u.into_bytes())).unwrap()),
            body: outcome.body.map(mark),
            ..outcome
        }
    }

    #[test]
    fn every_site_treats_the_shaped_value_as_the_template() {
        let fixture = fixture();
        let shaped = fixture.shaped.value("gh").unwrap().to_owned();
        assert_eq!(shaped.len(), 48);
        for case in cases() {
            let template = run(&fixture, &case, "{{mint:gh}}");
            let value = run(&fixture, &case, &shaped);
            let template = normalized(template, "{{mint:gh}}", case.spelling);
            let value = normalized(value, &shaped, case.spelling);
            assert_eq!(template, value, "case `{}`", case.name);
            let text = format!("{value:?}");
            assert!(
                !text.contains("parity-secret") || case_substitutes(&value),
                "{text}"
            );
        }
    }

    /// Whether the secret is meant to be in the outcome (substituted somewhere).
    fn case_substitutes(outcome: &Outcome) -> bool {
        let has = |bytes: &[u8]| String::from_utf8_lossy(bytes).contains("parity-secret");
        outcome
            .headers
            .as_ref()
            .is_ok_and(|h| h.iter().any(|(_, v)| has(v)))
            || outcome.uri.as_ref().is_ok_and(|u| has(u.as_bytes()))
            || outcome.body.as_ref().is_ok_and(|b| has(b))
    }

    #[test]
    fn the_table_covers_every_decision() {
        // So the parity above is not vacuous: the cases substitute, refuse and skip.
        let fixture = fixture();
        let shaped = fixture.shaped.value("gh").unwrap().to_owned();
        let outcomes: Vec<Outcome> = cases()
            .iter()
            .map(|case| run(&fixture, case, &shaped))
            .collect();
        assert!(outcomes.iter().any(case_substitutes));
        assert!(outcomes.iter().any(|o| {
            o.found
                .as_ref()
                .is_ok_and(|f| f.iter().any(|(_, place, _, _)| place.contains("Forbidden")))
        }));
        assert!(
            outcomes
                .iter()
                .any(|o| o.skipped.as_ref().is_some_and(|s| !s.is_empty()))
        );
        // The raw header and the form field got the secret, as the template would.
        let header = run(&fixture, &cases()[0], &shaped);
        assert_eq!(
            header.headers.unwrap()[0].1,
            format!("Bearer {SECRET}").into_bytes()
        );
    }

    #[test]
    fn a_jwt_placeholder_is_substituted_in_a_header() {
        let fixture = fixture();
        let jwt = fixture.shaped.value("jw").unwrap().to_owned();
        let mut secrets = Secrets::new().with_shaped(Arc::clone(&fixture.shaped));
        secrets.insert("jw", SecretString::from(SECRET), SiteSet::HEADER);
        let mut headers = HeaderMap::new();
        headers.insert(
            http::header::AUTHORIZATION,
            HeaderValue::from_str(&format!("Bearer {jwt}")).unwrap(),
        );
        inject::headers(&mut headers, &secrets).unwrap();
        assert_eq!(
            headers[http::header::AUTHORIZATION].as_bytes(),
            format!("Bearer {SECRET}").as_bytes()
        );
    }

    #[test]
    fn encoded_bodies_are_refused_alike() {
        let fixture = fixture();
        let shaped = fixture.shaped.value("gh").unwrap().to_owned();
        let mut headers = HeaderMap::new();
        headers.insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        headers.insert(
            http::header::CONTENT_ENCODING,
            HeaderValue::from_static("gzip"),
        );
        for placeholder in ["{{mint:gh}}", shaped.as_str()] {
            let decoded = format!(r#"{{"token":"{placeholder}"}}"#);
            assert_eq!(
                live_in_encoded_body(
                    &headers,
                    decoded.as_bytes(),
                    &fixture.places,
                    &fixture.shaped
                ),
                Some(Some("gh".to_owned())),
                "{placeholder}"
            );
        }
    }

    #[test]
    fn values_of_other_homes_and_near_misses_are_plain_text() {
        let fixture = fixture();
        let shaped = fixture.shaped.value("gh").unwrap().to_owned();
        let other = key(10).derive(
            "gh",
            fixture
                .aliases
                .find("gh")
                .unwrap()
                .placeholder
                .as_ref()
                .unwrap(),
        );
        // One character short, one changed, another home's value: none is a placeholder.
        let mut changed = shaped.clone().into_bytes();
        changed[20] = if changed[20] == b'A' { b'B' } else { b'A' };
        let texts: [String; 3] = [
            String::from(&shaped[..47]),
            String::from_utf8(changed).unwrap(),
            other,
        ];
        for text in texts {
            let mut headers = HeaderMap::new();
            headers.insert(
                http::header::AUTHORIZATION,
                HeaderValue::from_str(&text).unwrap(),
            );
            let parts = RequestParts {
                scheme: "https",
                authority: "api.example.com",
                path: "/",
                query: None,
                headers: &headers,
                body: b"",
            };
            assert!(
                scan(&parts, &fixture.places, &fixture.shaped)
                    .unwrap()
                    .is_empty()
            );
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Around any text without braces or escapes, a shaped value in a header or the query
        /// is found exactly where the template is.
        #[test]
        fn surrounding_text_never_changes_the_decision(
            before in "[ -$&-z|~]{0,40}",
            after in "[ -$&-z|~]{0,40}",
        ) {
            let fixture = fixture();
            let shaped = fixture.shaped.value("gh").unwrap().to_owned();
            let case = Case {
                name: "generated",
                path: "/",
                query: None,
                header: None,
                content_type: None,
                body: "",
                spelling: Spelling::Raw,
            };
            let header_value = |p: &str| format!("{before}{p}{after}");
            let mut outcomes = Vec::new();
            for placeholder in ["{{mint:gh}}", shaped.as_str()] {
                let mut headers = HeaderMap::new();
                headers.insert(
                    http::header::AUTHORIZATION,
                    HeaderValue::from_str(&header_value(placeholder)).unwrap(),
                );
                let parts = RequestParts {
                    scheme: case.scheme(),
                    authority: "api.example.com",
                    path: case.path,
                    query: None,
                    headers: &headers,
                    body: b"",
                };
                let found = scan(&parts, &fixture.places, &fixture.shaped)
                    .map(|f| f.found().iter().map(|f| (f.alias.clone(), f.place)).collect::<Vec<_>>())
                    .map_err(|e| e.to_string());
                outcomes.push(found);
            }
            prop_assert_eq!(&outcomes[0], &outcomes[1]);
        }
    }

    impl Case {
        fn scheme(&self) -> &'static str {
            "https"
        }
    }
}

mod paths {
    //! The automaton's two walks agree: the byte search over a text without escapes and the
    //! unit-by-unit stepping (forced here by a trailing `%`, which is a unit of its own and
    //! changes no earlier event) report the same events.

    use proptest::prelude::*;

    use super::*;
    use crate::secrets::placeholder::spelling::{Event, Layer, events};

    fn shaped() -> ShapedPlaceholders {
        ShapedPlaceholders::from_values(vec![
            ("gh".to_owned(), "sk-AbC123xyz".to_owned()),
            ("jw".to_owned(), "eyJ0.e30.sig".to_owned()),
        ])
        .unwrap()
    }

    fn collect(text: &[u8], layer: Layer, shaped: &ShapedPlaceholders) -> Vec<Event> {
        let mut seen = Vec::new();
        events(text, layer, shaped, |event| {
            seen.push(event);
            Ok(())
        })
        .unwrap();
        seen
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn search_and_stepping_agree(
            pieces in proptest::collection::vec(
                prop_oneof![
                    Just("{{mint:gh}}".to_owned()),
                    Just("{{mint:".to_owned()),
                    Just("{{mint:GH}}".to_owned()),
                    Just("sk-AbC123xyz".to_owned()),
                    Just("sk-AbC123xy".to_owned()),
                    Just("eyJ0.e30.sig".to_owned()),
                    Just("}}".to_owned()),
                    "[a-zA-Z0-9{}:. -]{0,6}",
                ],
                0..12,
            ),
        ) {
            let shaped = shaped();
            let text = pieces.concat();
            for layer in [Layer::Percent, Layer::JsonPercent] {
                let searched = collect(text.as_bytes(), layer, &shaped);
                let stepped = collect(format!("{text}%").as_bytes(), layer, &shaped);
                prop_assert_eq!(&searched, &stepped, "{:?}", text);
                // Without shaped values, the template's own scanner reports the same events for
                // `{{mint:` as the automaton does.
                let braces: Vec<Event> = collect(text.as_bytes(), layer, &ShapedPlaceholders::default());
                let template_only: Vec<Event> = searched
                    .iter()
                    .filter(|e| !matches!(e, Event::Hit(h) if h.span.len() != "{{mint:".len() + h.alias.len() + 2))
                    .cloned()
                    .collect();
                prop_assert_eq!(&braces, &template_only, "{:?}", text);
            }
        }
    }
}
