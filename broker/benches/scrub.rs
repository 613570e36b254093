//! Streaming scrub throughput for 16 secrets, and for one, with all their encodings, against one
//! plain Aho-Corasick `find_iter` pass (DFA, leftmost-longest) over the same patterns and bytes.
//!
//! Run with `cargo bench -p mint-broker --bench scrub`. Compare `scrub/aho_corasick_find_iter`
//! with the `scrub/stream_*` lines of the same run (and `scrub_1_secret/…` likewise): the ratio is the figure to watch, the absolute
//! numbers depend on the machine.
//!
//! `scrub_tiny_pushes/…` (issue 21): the same answer pushed in one piece against pushed one byte
//! at a time (what a stream of tiny chunks or WebSocket frames costs), for 16 secrets and for
//! one; the ratio of the two lines of a group is the figure (1-byte pushes / one push).

#![expect(
    clippy::unwrap_used,
    reason = "benchmark harness: a failed setup should stop the run"
)]

use std::hint::black_box;
use std::time::Duration;

use bytes::Bytes;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use mint_broker::secrets::inject::Secrets;
use mint_policy::site::SiteSet;
use secrecy::SecretString;

/// 16 secrets shaped like real tokens: prefixed alphanumerics, and base64-ish keys with `+/=`.
fn secrets() -> Vec<String> {
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let alnum = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let b64 = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    (0..16)
        .map(|i| {
            let (prefix, alphabet, len) = match i % 4 {
                0 => ("ghp_", &alnum[..], 36),
                1 => ("sk-live-", &alnum[..], 48),
                2 => ("", &b64[..], 40),
                _ => ("xoxb-", &alnum[..], 56),
            };
            let body: String = (0..len)
                .map(|_| char::from(alphabet[(next() % alphabet.len() as u64) as usize]))
                .collect();
            format!("{prefix}{body}")
        })
        .collect()
}

/// About `len` bytes of JSON API answers without any secret.
fn answer(len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 512);
    let mut i = 0u64;
    while out.len() < len {
        out.extend_from_slice(
            format!(
                "{{\"id\":{i},\"node_id\":\"MDEwOlJlcG9zaXRvcnk{i:08}\",\"name\":\"repo-{i}\",\
                 \"full_name\":\"octocat/repo-{i}\",\"private\":false,\"html_url\":\
                 \"https://github.com/octocat/repo-{i}\",\"description\":\"Some project number \
                 {i}, with text & symbols <b>\\\"quoted\\\"</b>\",\"stargazers_count\":{},\
                 \"updated_at\":\"2024-05-{:02}T12:34:56Z\",\"topics\":[\"rust\",\"http\"]}},\n",
                i * 7 % 1000,
                i % 28 + 1
            )
            .as_bytes(),
        );
        i += 1;
    }
    out.truncate(len);
    out
}

/// `secrets_text` loaded as header-site aliases.
fn loaded(secrets_text: &[String]) -> Secrets {
    let mut secrets = Secrets::new();
    for (i, secret) in secrets_text.iter().enumerate() {
        secrets.insert(
            format!("alias{i}"),
            SecretString::from(secret.as_str()),
            SiteSet::HEADER,
        );
    }
    secrets
}

/// `clean` with one of `secrets_text` (raw, hex or base64, in turn) every 64 KiB.
fn with_secrets(clean: &Bytes, secrets_text: &[String]) -> Bytes {
    let mut dirty = clean.to_vec();
    for (n, at) in (0..dirty.len() - 256).step_by(64 << 10).enumerate() {
        let secret = secrets_text[n % secrets_text.len()].as_bytes();
        let form = match n % 3 {
            0 => secret.to_vec(),
            1 => hex::encode(secret).into_bytes(),
            _ => {
                use base64::Engine as _;
                base64::engine::general_purpose::STANDARD
                    .encode(secret)
                    .into_bytes()
            }
        };
        dirty[at..at + form.len()].copy_from_slice(&form);
    }
    Bytes::from(dirty)
}

/// The streaming scrubber of `secrets_text` (every encoding of each) against one plain
/// Aho-Corasick pass over the same patterns and bytes, in group `name`.
fn throughput(c: &mut Criterion, name: &str, secrets_text: &[String], clean: &Bytes) {
    let secrets = loaded(secrets_text);
    let baseline = secrets.baseline().unwrap();
    let dirty = with_secrets(clean, secrets_text);
    let mut group = c.benchmark_group(name);
    group
        .throughput(Throughput::Bytes(clean.len() as u64))
        .sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(6));
    group.bench_function("aho_corasick_find_iter", |b| {
        b.iter(|| black_box(baseline.count(black_box(clean))));
    });
    for (name, data, chunk) in [
        ("stream_clean_16k", clean, 16 << 10),
        ("stream_clean_64k", clean, 64 << 10),
        ("stream_clean_4k", clean, 4 << 10),
        ("stream_dirty_16k", &dirty, 16 << 10),
    ] {
        group.bench_function(name, |b| {
            let mut scrubber = secrets.scrubber().unwrap();
            b.iter(|| {
                let mut total = 0;
                for start in (0..data.len()).step_by(chunk) {
                    let piece = data.slice(start..(start + chunk).min(data.len()));
                    total += scrubber.push(piece).len();
                }
                total += scrubber.finish().len();
                black_box(total)
            });
        });
    }
    group.bench_function("one_shot_clean", |b| {
        let scrubber = secrets.scrubber().unwrap();
        b.iter(|| black_box(scrubber.scrub(black_box(clean)).len()));
    });
    group.finish();
}

fn bench(c: &mut Criterion) {
    let secrets_text = secrets();
    let clean = Bytes::from(answer(4 << 20));
    // `scrub`: 16 secrets; `scrub_1_secret`: the first of them alone.
    throughput(c, "scrub", &secrets_text, &clean);
    throughput(c, "scrub_1_secret", &secrets_text[..1], &clean);

    let mut build = c.benchmark_group("scrub_build");
    build.sample_size(20);
    let secrets = loaded(&secrets_text);
    build.bench_function("scrubber_16_secrets", |b| {
        b.iter(|| black_box(secrets.scrubber().unwrap()));
    });
    let one = loaded(&secrets_text[..1]);
    build.bench_function("scrubber_1_secret", |b| {
        b.iter(|| black_box(one.scrubber().unwrap()));
    });
    build.finish();
}

/// `n` secrets of 40 characters, distinct, under the names `a0`, `a1`, ...; `salt` makes two sets
/// disjoint.
fn many(n: usize, salt: &str) -> Secrets {
    let mut secrets = Secrets::new();
    for i in 0..n {
        let value = format!("{salt}-{i:08}-{}", "x".repeat(28 - salt.len()));
        secrets.insert(format!("a{i}"), SecretString::from(value), SiteSet::HEADER);
    }
    secrets
}

/// What a reload does with the secrets it replaces (`Secrets::absorb`, issue 24): 2,000 secrets
/// against 2,000, and 20,000 against 20,000, none shared. Linear work makes the second row about
/// 10 times the first (plus the growth of the maps); the old pairwise comparison made it 100.
fn absorb(c: &mut Criterion) {
    let mut group = c.benchmark_group("reload_absorb");
    group.sample_size(10);
    for n in [2_000, 20_000] {
        let previous = many(n, "old");
        group.bench_function(format!("{n}_secrets"), |b| {
            b.iter_batched(
                || many(n, "new"),
                |mut current| {
                    current.absorb(black_box(&previous));
                    current.len()
                },
                criterion::BatchSize::LargeInput,
            );
        });
    }
    group.finish();
}

/// One push of an answer against the same answer pushed a byte at a time (`push` with slices of
/// one `Bytes`, and `push_slice` as the WebSocket relay does), each followed by `finish`.
fn tiny_pushes(c: &mut Criterion) {
    let secrets_text = secrets();
    let clean = Bytes::from(answer(4 << 10));
    for (name, secrets) in [
        ("scrub_tiny_pushes", loaded(&secrets_text)),
        ("scrub_tiny_pushes_1_secret", loaded(&secrets_text[..1])),
    ] {
        let mut group = c.benchmark_group(name);
        group
            .throughput(Throughput::Bytes(clean.len() as u64))
            .sample_size(20)
            .warm_up_time(Duration::from_secs(1))
            .measurement_time(Duration::from_secs(4));
        group.bench_function("one_push_4k", |b| {
            let mut scrubber = secrets.scrubber().unwrap();
            b.iter(|| {
                let total = scrubber.push(clean.clone()).len() + scrubber.finish().len();
                black_box(total)
            });
        });
        group.bench_function("byte_pushes_4k", |b| {
            let mut scrubber = secrets.scrubber().unwrap();
            b.iter(|| {
                let mut total = 0;
                for start in 0..clean.len() {
                    total += scrubber.push(clean.slice(start..start + 1)).len();
                }
                black_box(total + scrubber.finish().len())
            });
        });
        group.bench_function("byte_push_slices_4k", |b| {
            let mut scrubber = secrets.scrubber().unwrap();
            b.iter(|| {
                let mut total = 0;
                for byte in clean.chunks(1) {
                    total += scrubber.push_slice(byte).len();
                }
                black_box(total + scrubber.finish_vec().len())
            });
        });
        group.finish();
    }
}

criterion_group!(benches, bench, absorb, tiny_pushes);
criterion_main!(benches);
