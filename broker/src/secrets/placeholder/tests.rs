//! Tests of `placeholder`: every spelling in every part, the JSON tokenizer, malformed
//! placeholders, the limit, and the aggregates for the evaluator.

use http::HeaderValue;
use proptest::prelude::*;

use super::json::candidate_strings;
use super::*;

/// A request for tests: target parts, headers and body.
struct Req {
    scheme: &'static str,
    authority: &'static str,
    path: String,
    query: Option<String>,
    headers: HeaderMap,
    body: Vec<u8>,
}

impl Req {
    fn new() -> Req {
        Req {
            scheme: "https",
            authority: "api.github.com",
            path: "/user".to_owned(),
            query: None,
            headers: HeaderMap::new(),
            body: Vec::new(),
        }
    }

    fn query(mut self, query: &str) -> Req {
        self.query = Some(query.to_owned());
        self
    }

    fn path(mut self, path: &str) -> Req {
        self.path = path.to_owned();
        self
    }

    fn header(mut self, name: &'static str, value: &str) -> Req {
        self.headers.append(
            HeaderName::from_static(name),
            HeaderValue::from_str(value).unwrap(),
        );
        self
    }

    fn json(self, body: &str) -> Req {
        self.header("content-type", "application/json").body(body)
    }

    fn body(mut self, body: &str) -> Req {
        self.body = body.as_bytes().to_vec();
        self
    }

    fn scan(&self) -> Result<Placeholders, PlaceholderError> {
        scan(
            &RequestParts {
                scheme: self.scheme,
                authority: self.authority,
                path: &self.path,
                query: self.query.as_deref(),
                headers: &self.headers,
                body: &self.body,
            },
            &body_places(),
            &ShapedPlaceholders::default(),
        )
    }

    #[track_caller]
    fn skipped(&self) -> Skipped {
        self.scan().unwrap().skipped().clone()
    }

    #[track_caller]
    fn places(&self) -> Vec<(String, Place)> {
        self.scan()
            .unwrap()
            .found()
            .iter()
            .map(|f| (f.alias.clone(), f.place))
            .collect()
    }
}

/// The body places of the test aliases: `github` names `/token` and `/0`, `slack`
/// `/nested/0/x` and `/1`, `b` `/v`, `x` `/a`; `headeronly` names no body place.
fn body_places() -> BodyPlaces {
    let yaml = "aliases:
  - name: github
    hosts: [api.github.com]
    sites: [header, {body: [/token, /0]}]
  - name: slack
    hosts: [api.github.com]
    sites: [header, {body: [/nested/0/x, /1]}]
  - name: b
    hosts: [api.github.com]
    sites: [header, query, {body: [/v]}]
  - name: x
    hosts: [api.github.com]
    sites: [{body: [/a]}]
  - name: headeronly
    hosts: [api.github.com]
";
    let load = mint_policy::aliases::load_aliases(yaml.as_bytes(), "aliases.yaml");
    assert!(load.errors().next().is_none(), "{:?}", load.diagnostics);
    BodyPlaces::new(&load.aliases.unwrap())
}

fn listed(skipped: &Skipped) -> Vec<(&str, InertPlace)> {
    skipped
        .listed()
        .iter()
        .map(|(alias, place)| (alias.as_str(), *place))
        .collect()
}

fn site(alias: &str, site: Site) -> (String, Place) {
    (alias.to_owned(), Place::Site(site))
}

fn forbidden(alias: &str, place: Forbidden) -> (String, Place) {
    (alias.to_owned(), Place::Forbidden(place))
}

#[test]
fn a_request_without_placeholders_has_none() {
    let req = Req::new()
        .query("a=1&b=%7B")
        .header("authorization", "Bearer abc")
        .json(r#"{"a":"{not a placeholder}","b":"100%","c":"\u00e9"}"#);
    assert!(req.scan().unwrap().is_empty());
}

#[test]
fn every_spelling_in_the_query_is_recognised() {
    for query in [
        "t={{mint:github}}",
        "t=%7B%7Bmint%3Agithub%7D%7D",
        "t=%7b%7bmint%3agithub%7d%7d",
        "t={{mint%3Agithub}}",
        "t=%7b%7bmint:github%7d%7d",
        "t=%7B{mint:git%68ub}%7D",
        "t=%7B%7B%6D%69%6E%74%3A%67%69%74%68%75%62%7D%7D",
    ] {
        let req = Req::new().query(query);
        let found = req.scan().unwrap();
        assert_eq!(found.found().len(), 1, "{query}");
        let one = &found.found()[0];
        assert_eq!(one.alias, "github");
        assert_eq!(one.place, Place::Site(Site::Query));
        assert_eq!(one.span, 2..query.len(), "{query}");
    }
}

#[test]
fn headers_are_sites_only_when_spelled_raw() {
    let req = Req::new()
        .header("authorization", "Bearer {{mint:github}}")
        .header("x-encoded", "%7B%7Bmint%3Agithub%7D%7D");
    assert_eq!(
        req.places(),
        [
            site("github", Site::Header),
            forbidden("github", Forbidden::EncodedInHeader)
        ]
    );
}

#[test]
fn a_placeholder_in_a_header_name_is_forbidden() {
    let req = Req::new().header("x-%7b%7bmint%3agithub%7d%7d", "1");
    assert_eq!(req.places(), [forbidden("github", Forbidden::HeaderName)]);
}

#[test]
fn placeholders_in_the_target_are_forbidden() {
    let req = Req::new().path("/repos/%7B%7Bmint%3Agithub%7D%7D/x");
    assert_eq!(req.places(), [forbidden("github", Forbidden::Target)]);
    let mut req = Req::new().path("/{{mint:a}}");
    req.authority = "{{mint:b}}.example.com";
    req.scheme = "%7B%7Bmint:c}}";
    let found = req.scan().unwrap();
    let parts: Vec<_> = found.found().iter().map(|f| f.part.clone()).collect();
    assert_eq!(parts, [Part::Scheme, Part::Authority, Part::Path]);
    assert_eq!(found.forbidden().count(), 3);
    assert!(found.alias_uses().is_empty());
    assert_eq!(found.aliases(), ["a", "b", "c"]);
}

#[test]
fn json_string_values_are_body_sites() {
    let body = r#"{"token":"{{mint:github}}","nested":[{"x":"a {{mint:slack}} b"}]}"#;
    let req = Req::new().json(body);
    let found = req.scan().unwrap();
    assert_eq!(
        req.places(),
        [site("github", Site::Body), site("slack", Site::Body)]
    );
    let span = found.found()[0].span.clone();
    assert_eq!(&body[span], "{{mint:github}}");
}

#[test]
fn escapes_at_a_named_place_are_forbidden() {
    let escaped = Req::new().json(r#"["\u007b\u007Bmint:github}}","%7B%7Bmint:slack}}"]"#);
    assert_eq!(
        escaped.places(),
        [
            forbidden("github", Forbidden::EncodedInJson),
            forbidden("slack", Forbidden::EncodedInJson)
        ]
    );
}

#[test]
fn body_quotes_where_mint_never_substitutes_are_inert() {
    let cases: Vec<(Req, Vec<(&str, InertPlace)>)> = vec![
        (
            Req::new().json(r#"{"{{mint:github}}":1}"#),
            vec![("github", InertPlace::JsonKey)],
        ),
        (
            Req::new()
                .header("content-type", "application/x-www-form-urlencoded")
                .body("t=%7B%7Bmint%3Agithub%7D%7D"),
            vec![("github", InertPlace::FormValue)],
        ),
        (
            Req::new().body(r#"{"t":"{{mint:github}}"}"#),
            vec![("github", InertPlace::Text)],
        ),
        (
            Req::new().json(r#"{"t":"{{mint:github}}",}"#),
            vec![("github", InertPlace::Text)],
        ),
        (
            Req::new()
                .header("content-encoding", "gzip")
                .json(r#"{"t":"{{mint:github}}"}"#),
            vec![("github", InertPlace::Text)],
        ),
        (
            Req::new().json(r#"{"t":"{{mint:undeclared}} and {{mint:headeronly}}"}"#),
            vec![
                ("undeclared", InertPlace::JsonValue),
                ("headeronly", InertPlace::JsonValue),
            ],
        ),
        (Req::new().json(r#"{"{{mint:Oops":"x"}"#), vec![]),
        (Req::new().body("{{mint:Oops}} {{mint:"), vec![]),
    ];
    for (req, expected) in cases {
        let found = req.scan().unwrap();
        assert!(found.is_empty(), "{found:?}");
        assert_eq!(listed(found.skipped()), expected);
        assert!(found.skipped().count() >= 1);
    }
}

#[test]
fn inert_quotes_are_listed_once_bounded_and_never_count_toward_the_limit() {
    // 100,000 quotes: the list stays at most MAX_SKIPPED entries, each alias and place once.
    let mut text = String::new();
    for i in 0..100_000 {
        text.push_str(&format!("{{{{mint:q{}}}}} ", i % 40));
    }
    let body = serde_json::json!({ "messages": [{ "content": text }] }).to_string();
    let req = Req::new()
        .json(&body)
        .header("authorization", "{{mint:github}}");
    let found = req.scan().unwrap();
    assert_eq!(found.found().len(), 1);
    assert_eq!(found.skipped().count(), 100_000);
    assert_eq!(found.skipped().listed().len(), MAX_SKIPPED);
    let same = Req::new().json(r#"["{{mint:headeronly}}","{{mint:headeronly}}"]"#);
    assert_eq!(
        listed(&same.skipped()),
        [("headeronly", InertPlace::JsonValue)]
    );
    assert_eq!(same.skipped().count(), 2);
}

#[test]
fn alias_uses_aggregate_sites_per_alias() {
    let req = Req::new()
        .query("q={{mint:b}}")
        .header("authorization", "{{mint:b}}")
        .header("x-other", "{{mint:a}}")
        .json(r#"{"v":"{{mint:b}}"}"#);
    let uses = req.scan().unwrap().alias_uses();
    assert_eq!(
        uses,
        [
            AliasUse {
                alias: "a".to_owned(),
                sites: SiteSet::HEADER
            },
            AliasUse {
                alias: "b".to_owned(),
                sites: SiteSet::of(Site::ALL)
            },
        ]
    );
}

#[test]
fn malformed_placeholders_are_refused_with_their_place() {
    let cases: &[(Req, Part, usize, MalformedReason)] = &[
        (
            Req::new().query("a={{mint:github"),
            Part::Query,
            2,
            MalformedReason::Unclosed,
        ),
        (
            Req::new().query("a={{mint:GitHub}}"),
            Part::Query,
            2,
            MalformedReason::InvalidName,
        ),
        (
            Req::new().query("a={{mint:}}"),
            Part::Query,
            2,
            MalformedReason::InvalidName,
        ),
        (
            Req::new().query("a={{mint:_x}}"),
            Part::Query,
            2,
            MalformedReason::InvalidName,
        ),
        (
            Req::new().query(&format!("a={{{{mint:{}}}}}", "x".repeat(65))),
            Part::Query,
            2,
            MalformedReason::InvalidName,
        ),
        (
            Req::new().header("authorization", "Bearer {{mint:git hub}}"),
            Part::Header(http::header::AUTHORIZATION),
            7,
            MalformedReason::InvalidName,
        ),
        (
            Req::new().path("/%7B%7Bmint%3A"),
            Part::Path,
            1,
            MalformedReason::Unclosed,
        ),
        (
            Req::new().json(r#"{"a":"{{mint:x}"}"#),
            Part::Body,
            6,
            MalformedReason::Unclosed,
        ),
    ];
    for (req, part, offset, reason) in cases {
        assert_eq!(
            req.scan(),
            Err(PlaceholderError::Malformed {
                part: part.clone(),
                offset: *offset,
                reason: *reason
            })
        );
    }
    // 64 characters is the longest name.
    let longest = format!("a={{{{mint:{}}}}}", "x".repeat(64));
    assert_eq!(Req::new().query(&longest).places().len(), 1);
}

#[test]
fn more_than_sixteen_placeholders_are_refused() {
    let query = |n: usize| {
        (0..n)
            .map(|i| format!("p{i}={{{{mint:a{i}}}}}"))
            .collect::<Vec<_>>()
            .join("&")
    };
    assert_eq!(
        Req::new().query(&query(16)).scan().unwrap().found().len(),
        16
    );
    let err = Req::new().query(&query(17)).scan().unwrap_err();
    assert_eq!(err, PlaceholderError::TooMany { limit: 16 });
    assert_eq!(err.code(), "invalid_request");
    assert_eq!(err.to_string(), "more than 16 placeholders in one request");
    // Counted across parts.
    let req = Req::new()
        .query(&query(10))
        .header("a", &"{{mint:x}}".repeat(7));
    assert!(matches!(req.scan(), Err(PlaceholderError::TooMany { .. })));
}

#[test]
fn errors_name_the_place_never_the_text() {
    let req = Req::new().header("authorization", "Bearer s3cret-canary {{mint:Oops");
    let err = req.scan().unwrap_err();
    let shown = format!("{err} {err:?}");
    assert!(!shown.contains("s3cret-canary"), "{shown}");
    assert!(!shown.contains("Oops"), "{shown}");
    assert_eq!(
        err.to_string(),
        "malformed placeholder in the header `authorization` at byte 21: \
         `{{mint:` must be followed by an alias name and `}}`"
    );
    assert_eq!(err.code(), "malformed_placeholder");
    let parts = RequestParts {
        scheme: "https",
        authority: "h",
        path: "/",
        query: Some("token=s3cret-canary"),
        headers: &req.headers,
        body: b"s3cret-canary",
    };
    let debug = format!("{parts:?}");
    assert!(!debug.contains("s3cret-canary"), "{debug}");
}

#[test]
fn content_types_that_mean_json() {
    for (value, json) in [
        ("application/json", true),
        ("Application/JSON; charset=utf-8", true),
        ("application/vnd.api+json", true),
        ("application/+json", false),
        ("text/json", false),
        ("application/jsonx", false),
        ("text/plain", false),
    ] {
        let mut headers = HeaderMap::new();
        headers.insert(http::header::CONTENT_TYPE, HeaderValue::from_static(value));
        assert_eq!(body_is_json(&headers), json, "{value}");
    }
    assert!(!body_is_json(&HeaderMap::new()));
    let mut twice = HeaderMap::new();
    twice.append(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    twice.append(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    assert!(!body_is_json(&twice));
}

#[test]
fn the_tokenizer_is_strict() {
    for valid in [
        "1",
        " \"x\" ",
        "-0.5e+10",
        "[]",
        "{}",
        "[1,[2,{\"a\":null}],true,false]",
        "{\"a\":{\"b\":[\"\\ud83d\\ude00\",\"\\n\"]}}",
        // One byte order mark; several texts (JSON Lines), as the MCP check reads them.
        "\u{feff}{}",
        "[1] [2]",
        "{}{}",
        "1 2\n",
        "\"a\"\"b\"",
    ] {
        assert!(
            candidate_strings(valid.as_bytes(), &BodyPlaces::default()).is_some(),
            "{valid}"
        );
    }
    for invalid in [
        "",
        "[1,]",
        "{\"a\":1,}",
        "{a:1}",
        "01",
        "1.",
        ".5",
        "+1",
        "truenull",
        "1[2]",
        "\u{feff}\u{feff}{}",
        " \u{feff}{}",
        "{} x",
        "\"\\x\"",
        "\"\\ud83d\"",
        "\"\\ude00\"",
        "\"a\nb\"",
        "'a'",
        "nul",
        "[",
        "{\"a\" 1}",
        "// c\n1",
    ] {
        assert!(
            candidate_strings(invalid.as_bytes(), &BodyPlaces::default()).is_none(),
            "{invalid:?}"
        );
    }
    assert!(candidate_strings(b"\"\xff\"", &BodyPlaces::default()).is_none());
    let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
    assert!(candidate_strings(deep(127).as_bytes(), &BodyPlaces::default()).is_some());
    assert!(candidate_strings(deep(128).as_bytes(), &BodyPlaces::default()).is_none());
    assert!(candidate_strings(deep(100_000).as_bytes(), &BodyPlaces::default()).is_none());
}

/// serde_json's reading of a body by the JSON body rule (`json_start`): one optional byte order
/// mark, then one or more JSON texts, a top-level number or literal followed by whitespace or
/// the end (serde_json's stream also takes `1"a"`; neither Mint reader does).
fn serde_reads_json_texts(text: &str) -> bool {
    let body = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut stream = serde_json::Deserializer::from_str(body).into_iter::<serde_json::Value>();
    let mut any = false;
    loop {
        match stream.next() {
            None => return any,
            Some(Err(_)) => return false,
            Some(Ok(value)) => {
                any = true;
                let delimited = value.is_string() || value.is_array() || value.is_object();
                let next = body.as_bytes().get(stream.byte_offset());
                if !delimited && next.is_some_and(|b| !b" \t\n\r".contains(b)) {
                    return false;
                }
            }
        }
    }
}

/// Percent-encodes each byte of `text` when the matching flag says so, in the given hex case.
fn encode_some(text: &str, flags: &[(bool, bool)]) -> String {
    text.bytes()
        .zip(flags.iter().cycle())
        .map(|(b, &(encode, upper))| match (encode, upper) {
            (false, _) => char::from(b).to_string(),
            (true, true) => format!("%{b:02X}"),
            (true, false) => format!("%{b:02x}"),
        })
        .collect()
}

proptest! {
    /// Any mix of escapes spells the same placeholder in the query.
    #[test]
    fn any_percent_spelling_is_the_placeholder(
        alias in "[a-z0-9][a-z0-9_-]{0,63}",
        flags in prop::collection::vec((any::<bool>(), any::<bool>()), 1..20),
        before in "[a-z=&]{0,8}",
        after in "[a-z=&]{0,8}",
    ) {
        let placeholder = encode_some(&format!("{{{{mint:{alias}}}}}"), &flags);
        let query = format!("{before}{placeholder}{after}");
        let found = Req::new().query(&query).scan().unwrap();
        prop_assert_eq!(found.found().len(), 1);
        prop_assert_eq!(&found.found()[0].alias, &alias);
        prop_assert_eq!(found.found()[0].span.clone(), before.len()..before.len() + placeholder.len());
    }

    /// Whatever the bytes, scanning ends with a result, never a panic.
    #[test]
    fn arbitrary_input_never_panics(
        query in "[{}%7bBmint:a-z0-9]{0,60}",
        body in prop::collection::vec(prop_oneof![Just(b'{'), Just(b'}'), Just(b'"'), Just(b'\\'), Just(b'u'), Just(b'%'), any::<u8>()], 0..200),
    ) {
        let mut req = Req::new().query(&query);
        req.headers.insert(http::header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        req.body = body;
        let _ = req.scan();
    }

    /// What the tokenizer accepts, serde_json accepts too, and the other way round for the
    /// documents serde_json writes.
    #[test]
    fn the_tokenizer_agrees_with_serde_json(
        text in prop::collection::vec(prop_oneof![
            Just("{".to_owned()), Just("}".to_owned()), Just("[".to_owned()), Just("]".to_owned()),
            Just(",".to_owned()), Just(":".to_owned()), Just("\"a\"".to_owned()), Just("1".to_owned()),
            Just("-0.5".to_owned()), Just("true".to_owned()), Just(" ".to_owned()), Just("\"\\u00e9\"".to_owned()),
        ], 1..16),
        value in any::<Vec<(String, i32)>>(),
    ) {
        let text = text.concat();
        let ours = candidate_strings(text.as_bytes(), &BodyPlaces::default()).is_some();
        prop_assert_eq!(ours, serde_reads_json_texts(&text), "{}", text);
        let written = serde_json::to_string(&value).unwrap();
        prop_assert!(candidate_strings(written.as_bytes(), &BodyPlaces::default()).is_some());
    }
}

/// `client` names `/client_secret`, `/a~1b/0` (member `a/b`, element 0) and `/~0/1/x`.
fn pointer_places() -> BodyPlaces {
    let yaml = "aliases:
  - name: client
    hosts: [auth.example.com]
    sites: [{body: [/client_secret, /a~1b/0, /~0/1/x]}]
  - name: other
    hosts: [auth.example.com]
    sites: [{body: [/other]}]
";
    let load = mint_policy::aliases::load_aliases(yaml.as_bytes(), "aliases.yaml");
    assert!(load.errors().next().is_none(), "{:?}", load.diagnostics);
    BodyPlaces::new(&load.aliases.unwrap())
}

fn scan_json(body: &str, places: &BodyPlaces) -> Result<Placeholders, PlaceholderError> {
    let mut headers = HeaderMap::new();
    headers.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    scan(
        &RequestParts {
            scheme: "https",
            authority: "auth.example.com",
            path: "/token",
            query: None,
            headers: &headers,
            body: body.as_bytes(),
        },
        places,
        &ShapedPlaceholders::default(),
    )
}

#[test]
fn a_body_placeholder_is_live_only_at_a_pointer_its_alias_names() {
    let places = pointer_places();
    for (body, live, skipped) in [
        // At the pointer; an escaped member name is the same member.
        (r#"{"client_secret":"{{mint:client}}"}"#, 1, 0),
        (r#"{"client\u005fsecret":"{{mint:client}}"}"#, 1, 0),
        // Escaped tokens and array indexes.
        (r#"{"a/b":["{{mint:client}}","{{mint:client}}"]}"#, 1, 1),
        (
            r#"{"~":[0,{"x":"{{mint:client}}","y":"{{mint:client}}"}]}"#,
            1,
            1,
        ),
        // Duplicate members: each is the named place.
        (
            r#"{"client_secret":"{{mint:client}}","client_secret":"{{mint:client}}"}"#,
            2,
            0,
        ),
        // A sibling, a nested transcript, a deeper member of the same name.
        (
            r#"{"note":"{{mint:client}}","messages":[{"content":"{{mint:client}}"}],"x":{"client_secret":"{{mint:client}}"}}"#,
            0,
            3,
        ),
        // Another alias's pointer; an index with a leading zero is no index.
        (
            r#"{"other":"{{mint:client}}","client_secret":"{{mint:other}}"}"#,
            0,
            2,
        ),
        // A pointer to an object: the strings inside are not it.
        (r#"{"client_secret":{"v":"{{mint:client}}"}}"#, 0, 1),
    ] {
        let found = scan_json(body, &places).unwrap();
        assert_eq!(found.found().len(), live, "{body}");
        assert!(
            found
                .found()
                .iter()
                .all(|f| f.place == Place::Site(Site::Body)),
            "{body}"
        );
        assert_eq!(found.skipped().count(), skipped, "{body}");
    }
    // At a named pointer an escaped spelling is refused, and so is a malformed one.
    let escaped = scan_json(r#"{"client_secret":"\u007b{mint:client}}"}"#, &places).unwrap();
    assert_eq!(
        escaped.found()[0].place,
        Place::Forbidden(Forbidden::EncodedInJson)
    );
    assert!(matches!(
        scan_json(r#"{"client_secret":"{{mint:Client}}"}"#, &places),
        Err(PlaceholderError::Malformed { .. })
    ));
    // Elsewhere a malformed one is text.
    let text = scan_json(r#"{"note":"{{mint:Client}}"}"#, &places).unwrap();
    assert_eq!(text.skipped().count(), 1);
}

/// A JSON value for the property test: objects and arrays whose strings may hold a placeholder.
fn json_tree() -> impl Strategy<Value = serde_json::Value> {
    let leaf = prop_oneof![
        Just(serde_json::Value::from("{{mint:client}}")),
        Just(serde_json::Value::from("text")),
        Just(serde_json::Value::from(1)),
    ];
    leaf.prop_recursive(4, 32, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::Array),
            proptest::collection::btree_map(
                prop_oneof![
                    Just("client_secret".to_owned()),
                    Just("a/b".to_owned()),
                    Just("~".to_owned()),
                    Just("x".to_owned()),
                    Just("1".to_owned()),
                ],
                inner,
                0..4
            )
            .prop_map(|map| serde_json::Value::Object(map.into_iter().collect())),
        ]
    })
}

/// Every string leaf with its RFC 6901 pointer.
fn leaves(value: &serde_json::Value, pointer: String, out: &mut Vec<(String, String)>) {
    match value {
        serde_json::Value::String(text) => out.push((pointer, text.clone())),
        serde_json::Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                leaves(item, format!("{pointer}/{i}"), out);
            }
        }
        serde_json::Value::Object(map) => {
            for (key, item) in map {
                let token = key.replace('~', "~0").replace('/', "~1");
                leaves(item, format!("{pointer}/{token}"), out);
            }
        }
        _ => {}
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    /// A placeholder is live exactly when the pointer of its string is one its alias names;
    /// every other one is counted as skipped.
    #[test]
    fn live_placeholders_are_exactly_those_at_named_pointers(tree in json_tree()) {
        let named = ["/client_secret", "/a~1b/0", "/~0/1/x"];
        let mut all = Vec::new();
        leaves(&tree, String::new(), &mut all);
        let quoted: Vec<&String> = all
            .iter()
            .filter(|(_, text)| text == "{{mint:client}}")
            .map(|(pointer, _)| pointer)
            .collect();
        let live = quoted.iter().filter(|p| named.contains(&p.as_str())).count();
        prop_assume!(live <= MAX_PLACEHOLDERS);
        let found = scan_json(&tree.to_string(), &pointer_places()).unwrap();
        prop_assert_eq!(found.found().len(), live);
        prop_assert_eq!(found.skipped().count() as usize, quoted.len() - live);
    }
}

/// `client` names the form fields `client_secret` and `client secret`; `other` names `other`;
/// `json` names only the JSON Pointer `/client_secret`.
fn form_places() -> BodyPlaces {
    let yaml = "aliases:
  - name: client
    hosts: [auth.example.com]
    sites: [{form: [client_secret, client secret]}]
  - name: other
    hosts: [auth.example.com]
    sites: [{form: [other]}]
  - name: json
    hosts: [auth.example.com]
    sites: [{body: [/client_secret]}]
";
    let load = mint_policy::aliases::load_aliases(yaml.as_bytes(), "aliases.yaml");
    assert!(load.errors().next().is_none(), "{:?}", load.diagnostics);
    BodyPlaces::new(&load.aliases.unwrap())
}

fn scan_typed(
    content_type: &'static str,
    body: &str,
    places: &BodyPlaces,
) -> Result<Placeholders, PlaceholderError> {
    let mut headers = HeaderMap::new();
    headers.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static(content_type),
    );
    scan(
        &RequestParts {
            scheme: "https",
            authority: "auth.example.com",
            path: "/token",
            query: None,
            headers: &headers,
            body: body.as_bytes(),
        },
        places,
        &ShapedPlaceholders::default(),
    )
}

fn scan_form(body: &str, places: &BodyPlaces) -> Result<Placeholders, PlaceholderError> {
    scan_typed("application/x-www-form-urlencoded", body, places)
}

#[test]
fn content_types_that_mean_a_form() {
    let mut headers = HeaderMap::new();
    for (value, kind) in [
        ("application/x-www-form-urlencoded", BodyKind::Form),
        (
            "Application/X-WWW-Form-Urlencoded; charset=UTF-8",
            BodyKind::Form,
        ),
        ("application/json", BodyKind::Json),
        ("multipart/form-data; boundary=x", BodyKind::Text),
        ("text/plain", BodyKind::Text),
    ] {
        headers.insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_str(value).unwrap(),
        );
        assert_eq!(body_kind(&headers), kind, "{value}");
    }
    // Two Content-Types, or a content coding: no place in the body is live.
    headers.append(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/x-www-form-urlencoded"),
    );
    assert_eq!(body_kind(&headers), BodyKind::Text);
    let mut headers = HeaderMap::new();
    headers.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/x-www-form-urlencoded"),
    );
    headers.insert(
        http::header::CONTENT_ENCODING,
        HeaderValue::from_static("gzip"),
    );
    assert_eq!(body_kind(&headers), BodyKind::Text);
}

#[test]
fn a_form_placeholder_is_live_only_in_a_field_its_alias_names() {
    let places = form_places();
    for (body, live, skipped) in [
        // The OAuth token request: the named field, raw or percent-encoded in any way.
        (
            "grant_type=client_credentials&client_secret={{mint:client}}",
            1,
            0,
        ),
        ("client_secret=%7B%7Bmint%3Aclient%7D%7D", 1, 0),
        ("client_secret=%7b%7bmint:client%7d%7d", 1, 0),
        // The name decoded as the receiver decodes it.
        ("client%5Fsecret={{mint:client}}", 1, 0),
        ("client+secret={{mint:client}}", 1, 0),
        ("client%20secret={{mint:client}}", 1, 0),
        // Embedded in the value, as in a JSON string at a pointer.
        ("client_secret=Basic%20{{mint:client}}", 1, 0),
        // Repeated fields: each is the named field, whichever one a receiver keeps.
        (
            "client_secret={{mint:client}}&client_secret={{mint:client}}",
            2,
            0,
        ),
        // Another field, a field name, another case, another alias's field, a JSON alias.
        ("note={{mint:client}}", 0, 1),
        ("{{mint:client}}=x", 0, 1),
        ("client_secret%3D{{mint:client}}", 0, 1),
        ("Client_Secret={{mint:client}}", 0, 1),
        ("other={{mint:client}}&client_secret={{mint:other}}", 0, 2),
        ("client_secret={{mint:json}}", 0, 1),
        // After a raw `;`, which old parsers split at: inert.
        ("client_secret=a;redirect_uri={{mint:client}}", 0, 1),
        // An `=` inside the value is the value's; `&` ends the field.
        ("client_secret=a=b{{mint:client}}&x=1", 1, 0),
        ("client_secret=a&b{{mint:client}}", 0, 1),
        // No `=`: a name with an empty value.
        ("client_secret", 0, 0),
        ("&&client_secret=&{{mint:client}}", 0, 1),
    ] {
        let found = scan_form(body, &places).unwrap();
        assert_eq!(found.found().len(), live, "{body}");
        for one in found.found() {
            assert_eq!(one.place, Place::Site(Site::Body), "{body}");
            assert_eq!(one.part, Part::Body, "{body}");
            assert!(
                matches!(&one.matched, Some(NamedPlace::FormField(f)) if f.starts_with("client")),
                "{body}: {:?}",
                one.matched
            );
            // The span covers the placeholder as spelled, escapes included.
            let spelled = &body.as_bytes()[one.span.clone()];
            assert!(
                spelled.starts_with(b"{") || spelled.starts_with(b"%7"),
                "{body}"
            );
        }
        assert_eq!(found.skipped().count(), skipped, "{body}");
        if skipped > 0 {
            assert!(
                found
                    .skipped()
                    .listed()
                    .iter()
                    .all(|(_, p)| matches!(p, InertPlace::FormValue | InertPlace::FormKey)),
                "{body}"
            );
        }
    }
    let key = scan_form("{{mint:client}}=x", &places).unwrap();
    assert_eq!(
        listed(key.skipped()),
        [("client", InertPlace::FormKey)],
        "a field name"
    );
    let value = scan_form("note={{mint:client}}", &places).unwrap();
    assert_eq!(listed(value.skipped()), [("client", InertPlace::FormValue)]);

    // A malformed placeholder in a named field is refused with its offset in the body; elsewhere
    // it is text.
    let error = scan_form("a=1&client_secret={{mint:Client}}", &places).unwrap_err();
    assert!(
        matches!(
            error,
            PlaceholderError::Malformed {
                part: Part::Body,
                offset: 18,
                ..
            }
        ),
        "{error:?}"
    );
    assert!(scan_form("client_secret=%7B%7Bmint%3AClient%7D%7D", &places).is_err());
    let text = scan_form("note={{mint:Client}}", &places).unwrap();
    assert_eq!(text.skipped().count(), 1);
    assert!(text.found().is_empty());
}

#[test]
fn a_form_is_read_only_with_its_content_type() {
    let places = form_places();
    // The same bytes as JSON or text: the form field is no place.
    for content_type in ["application/json", "text/plain", "multipart/form-data"] {
        let found = scan_typed(content_type, "client_secret={{mint:client}}", &places).unwrap();
        assert!(found.found().is_empty(), "{content_type}");
        assert_eq!(found.skipped().count(), 1, "{content_type}");
        assert_eq!(
            found.skipped().listed()[0].1,
            InertPlace::Text,
            "{content_type}"
        );
    }
    // And a JSON body at a pointer says which pointer it matched.
    let found = scan_typed(
        "application/json",
        r#"{"client_secret":"{{mint:json}}"}"#,
        &places,
    )
    .unwrap();
    assert_eq!(
        found.found()[0].matched,
        Some(NamedPlace::Pointer("/client_secret".to_owned()))
    );
}

proptest! {
    /// Whatever other fields a form holds, and however the placeholder is percent-encoded, it is
    /// live in the named field exactly, and its span is its spelling.
    #[test]
    fn form_fields_around_a_named_one_change_nothing(
        before in proptest::collection::vec("[a-z_]{1,8}=[a-z0-9%+.]{0,8}", 0..4),
        after in proptest::collection::vec("[a-z_]{1,8}=[a-z0-9%+.]{0,8}", 0..4),
        flags in proptest::collection::vec((any::<bool>(), any::<bool>()), 15),
    ) {
        let spelled = encode_some("{{mint:client}}", &flags);
        let mut fields: Vec<String> = before
            .iter()
            .filter(|f| !f.starts_with("client_secret="))
            .cloned()
            .collect();
        fields.push(format!("client_secret={spelled}"));
        fields.extend(after.iter().filter(|f| !f.starts_with("client_secret=")).cloned());
        let body = fields.join("&");
        let found = scan_form(&body, &form_places()).unwrap();
        prop_assert_eq!(found.found().len(), 1);
        let one = &found.found()[0];
        prop_assert_eq!(&body.as_bytes()[one.span.clone()], spelled.as_bytes());
        prop_assert_eq!(found.skipped().count(), 0);
    }
}

/// Issue 16: a JSON body is read by one rule in both readers (`mint_policy::body::json_start`):
/// one optional UTF-8 byte order mark, then one or more JSON texts. A placeholder at a named
/// pointer after a byte order mark, and in each text of JSON Lines, is live, as the MCP check
/// reads those bodies as JSON too (it was inert text before, while the MCP check read JSON).
#[test]
fn a_byte_order_mark_and_json_lines_are_json_to_the_scan_as_to_the_mcp_check() {
    let places = pointer_places();
    for (body, live) in [
        ("\u{feff}{\"client_secret\":\"{{mint:client}}\"}", 1),
        (
            "{\"client_secret\":\"{{mint:client}}\"}\n{\"client_secret\":\"{{mint:client}}\"}\n",
            2,
        ),
        (
            "\u{feff}{\"note\":1}{\"client_secret\":\"{{mint:client}}\"} [\"{{mint:client}}\"]",
            1,
        ),
    ] {
        let found = scan_json(body, &places).unwrap();
        assert_eq!(found.found().len(), live, "{body:?}");
        assert!(
            crate::proxy::mcp_call::examine(body.as_bytes()).is_ok(),
            "{body:?}"
        );
    }
}

proptest! {
    /// Whatever mix of texts, separators, byte order marks and junk a body holds, the scan reads
    /// it as JSON exactly when the MCP check parses it as JSON (for bodies that start like JSON,
    /// the only ones the MCP check parses).
    #[test]
    fn the_scan_and_the_mcp_check_agree_on_what_is_json(
        bom in proptest::collection::vec(Just("\u{feff}"), 0..3),
        parts in proptest::collection::vec(
            prop_oneof![
                Just("{\"client_secret\":\"{{mint:client}}\"}"),
                Just("[1,{\"a\":\"{{mint:client}}\"}]"),
                Just("{}"),
                Just("[]"),
                Just("true"),
                Just("null"),
                Just("12"),
                Just("\"{{mint:client}}\""),
                Just(" "),
                Just("\n"),
                Just("\r\n"),
                Just("\t"),
                Just(","),
                Just("x"),
                Just("{"),
                Just("\u{a0}"),
            ],
            1..6,
        ),
    ) {
        let body = format!("{}{{}} {}", bom.concat(), parts.concat());
        let scan_reads_json = candidate_strings(body.as_bytes(), &pointer_places()).is_some();
        let mcp_reads_json = crate::proxy::mcp_call::examine(body.as_bytes()).is_ok();
        prop_assert_eq!(scan_reads_json, mcp_reads_json, "{:?}", body);
    }
}
