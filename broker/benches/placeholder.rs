//! Placeholder scan and substitution on a realistic request: browser-like headers with an
//! `Authorization` placeholder, a query placeholder and a 2 KiB JSON body with one in a string
//! value; plus the same request without placeholders (the common case) and a 1 MiB JSON body.
//! The `*_shaped` cases run the same scans with two value-shaped placeholders loaded (the one
//! automaton over `{{mint:` and every value; every JSON string is then read), to compare with
//! the cases without in the same run.
//!
//! Run with `cargo bench -p mint-broker --bench placeholder`.

#![expect(
    clippy::unwrap_used,
    reason = "benchmark harness: a failed setup should stop the run"
)]

use std::hint::black_box;
use std::time::Duration;

use bytes::Bytes;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use http::{HeaderMap, HeaderName, HeaderValue};
use mint_broker::secrets::inject::{self, Secrets};
use mint_broker::secrets::placeholder::shaped::ShapedPlaceholders;
use mint_broker::secrets::placeholder::{self, RequestParts};
use mint_policy::aliases::load_aliases;
use mint_policy::body::BodyPlaces;
use mint_policy::normalize::normalize_target;
use mint_policy::site::{Site, SiteSet};
use secrecy::SecretString;

fn headers(with_placeholder: bool) -> HeaderMap {
    let auth = if with_placeholder {
        "Bearer {{mint:github}}"
    } else {
        "Bearer ghp_0123456789abcdefghijklmnopqrstuvwxyz"
    };
    let mut headers = HeaderMap::new();
    for (name, value) in [
        ("host", "api.github.com"),
        (
            "user-agent",
            "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0 Safari/537.36",
        ),
        ("accept", "application/vnd.github+json"),
        ("accept-language", "en-US,en;q=0.9,de;q=0.8"),
        ("authorization", auth),
        ("x-github-api-version", "2022-11-28"),
        ("content-type", "application/json"),
        (
            "cookie",
            "_octo=GH1.1.123456789.1700000000; logged_in=no; tz=Europe%2FBerlin; _gh_sess=abcdefghijklmnopqrstuvwxyz0123456789%2Bslash%3D%3D",
        ),
        (
            "referer",
            "https://github.com/octocat/hello-world/pulls?q=is%3Aopen",
        ),
        ("sec-fetch-mode", "cors"),
        ("sec-fetch-site", "same-origin"),
        ("x-request-id", "5f0c6b2e-8f5a-4d0e-9d55-1b7f3c2a9e41"),
        (
            "traceparent",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ),
        ("accept-encoding", "identity"),
    ] {
        headers.append(
            HeaderName::from_static(name),
            HeaderValue::from_str(value).unwrap(),
        );
    }
    headers
}

fn json_body(len: usize, with_placeholder: bool) -> Vec<u8> {
    let mut body = String::from("{\"title\":\"Fix the thing\",\"items\":[");
    let mut i = 0;
    while body.len() < len {
        body.push_str(&format!(
            "{{\"id\":{i},\"label\":\"bug\",\"note\":\"line {i}\\nwith \\\"escapes\\\" and 50% off\"}},"
        ));
        i += 1;
    }
    body.push_str("{\"id\":-1}],\"token\":\"");
    body.push_str(if with_placeholder {
        "{{mint:github}}"
    } else {
        "none"
    });
    body.push_str("\"}");
    body.into_bytes()
}

/// `github`, released for every site, and named for the body's `token` member.
fn body_places() -> BodyPlaces {
    let yaml = "aliases:\n  - name: github\n    hosts: [api.github.com]\n    sites: [header, query, {body: [/token]}]\n";
    BodyPlaces::new(
        &load_aliases(yaml.as_bytes(), "aliases.yaml")
            .aliases
            .unwrap(),
    )
}

/// Two aliases' value-shaped placeholders, as a home with shapes loads them.
fn shaped() -> ShapedPlaceholders {
    ShapedPlaceholders::from_values(vec![
        (
            "github".to_owned(),
            "ghp_Zq81LmXv0Tn5Rw2Kb7Yc4Hd9Jf3Gs6Pa1Qe".to_owned(),
        ),
        (
            "openai".to_owned(),
            "sk-Hq3vT8xL5pZ2mR7wK9nB4cJ6aE1sD0fG2hJ4kL6zX8cV".to_owned(),
        ),
    ])
    .unwrap()
}

fn bench(c: &mut Criterion) {
    let places = body_places();
    let none = ShapedPlaceholders::default();
    let shaped = shaped();
    let mut secrets = Secrets::new();
    secrets.insert(
        "github",
        SecretString::from("ghp_0123456789abcdefghijklmnopqrstuvwxyz"),
        SiteSet::of(Site::ALL),
    );
    let with = (headers(true), json_body(2048, true));
    let without = (headers(false), json_body(2048, false));
    let query_with = "per_page=100&access_token=%7B%7Bmint%3Agithub%7D%7D&state=open";
    let query_without = "per_page=100&state=open&sort=updated";
    let mut group = c.benchmark_group("placeholder");
    group
        .sample_size(30)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4));
    for (name, (headers, body), query, shapes) in [
        ("scan_request_with_3", &with, query_with, &none),
        ("scan_request_without", &without, query_without, &none),
        ("scan_request_with_3_shaped", &with, query_with, &shaped),
        (
            "scan_request_without_shaped",
            &without,
            query_without,
            &shaped,
        ),
    ] {
        group.bench_function(name, |b| {
            b.iter(|| {
                let parts = RequestParts {
                    scheme: "https",
                    authority: "api.github.com",
                    path: "/repos/octocat/hello-world/issues",
                    query: Some(query),
                    headers,
                    body,
                };
                black_box(placeholder::scan(black_box(&parts), &places, shapes).unwrap())
            });
        });
    }
    let target = normalize_target(
        "https",
        "api.github.com",
        &format!("/repos/octocat/hello-world/issues?{query_with}"),
    )
    .unwrap();
    let body = Bytes::from(with.1.clone());
    group.bench_function("substitute_headers_query_body", |b| {
        b.iter(|| {
            let mut headers = with.0.clone();
            let body = inject::body(&headers, body.clone(), &places, &secrets).unwrap();
            inject::headers(&mut headers, &secrets).unwrap();
            let uri = inject::uri(&target, &secrets).unwrap();
            black_box((headers, uri, body))
        });
    });
    let big = json_body(1 << 20, true);
    group.throughput(Throughput::Bytes(big.len() as u64));
    for (name, shapes) in [
        ("scan_json_body_1mib", &none),
        ("scan_json_body_1mib_shaped", &shaped),
    ] {
        group.bench_function(name, |b| {
            let headers = headers(true);
            b.iter(|| {
                let parts = RequestParts {
                    scheme: "https",
                    authority: "api.github.com",
                    path: "/",
                    query: None,
                    headers: &headers,
                    body: &big,
                };
                black_box(placeholder::scan(black_box(&parts), &places, shapes).unwrap())
            });
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
