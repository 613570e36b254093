//! Benchmarks of loading the worst files an agent could write for `policy_check`, `alias_list`
//! or a broker reload to read: 4 MiB (the loader's bound) of one mapping with ~330k keys, of
//! duplicate keys, of unknown fields, of rules that all compete in the shadowed-rule check, of
//! long host lists, of anchors and aliases, and of nesting. Each is measured next to the
//! baseline of the same run: yaml-rust2's parser alone on the same bytes (no tree, no checks).
//! Run with `cargo bench -p mint-policy --bench load`.

#![expect(
    clippy::expect_used,
    reason = "benchmark setup: a broken fixture should stop the run"
)]

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use mint_policy::MAX_FILE_BYTES;
use mint_policy::aliases::load_aliases;
use mint_policy::evaluate::{CompiledPolicy, Request};
use mint_policy::normalize::normalize_target;
use mint_policy::policy::{MAX_RULES, load_policy};
use yaml_rust2::parser::{Event, MarkedEventReceiver, Parser};
use yaml_rust2::scanner::Marker;

/// Appends `item(i)` for i = 0, 1, ... while the text stays within the loader's bound.
fn fill(mut head: String, tail: &str, mut item: impl FnMut(usize) -> String) -> String {
    let mut i = 0;
    loop {
        let next = item(i);
        if head.len() + next.len() + tail.len() > MAX_FILE_BYTES {
            break;
        }
        head.push_str(&next);
        i += 1;
    }
    head.push_str(tail);
    head
}

/// The worst cases, by name. Every one is at most `MAX_FILE_BYTES`.
fn files() -> Vec<(&'static str, String)> {
    let hosts = |prefix: &str, n: usize| {
        (0..n)
            .map(|i| format!("h{i}.{prefix}.example.com"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    // 5,000 allow and 5,000 deny rules on the same hosts with other methods: every deny rule is
    // a candidate for every allow rule and none shadows it.
    let rules_per_effect = MAX_RULES / 2;
    let host_list = hosts("x", 12);
    let mut competing = String::from("version: 1\nrules:\n");
    for i in 0..rules_per_effect {
        competing.push_str(&format!(
            "  - {{ id: a{i}, effect: allow, match: {{ host: [{host_list}], method: GET }} }}\n  - {{ id: d{i}, effect: deny, match: {{ host: [{host_list}], method: POST }} }}\n"
        ));
    }
    // One allow rule and one deny rule, each with half the file of hosts; the deny rule covers
    // them all (a shadowed rule found only after comparing every host). The rules are block
    // mappings: a flow list this long inside a flow mapping is refused (E016, below).
    let half = (MAX_FILE_BYTES / 2 - 200) / "h000000.x.example.com, ".len();
    let all = hosts("x", half);
    let long_lists = format!(
        "version: 1\nrules:\n  - id: a\n    effect: allow\n    match:\n      host: [{all}]\n  - id: d\n    effect: deny\n    match:\n      host: [{all}]\n"
    );
    let mut out = vec![
        (
            "keys_in_one_mapping",
            fill(
                "version: 1\nrules: []\ncall_limits:\n".to_owned(),
                "",
                |i| format!("  a{i}: 1\n"),
            ),
        ),
        (
            "duplicate_keys",
            fill(
                "version: 1\nrules: []\ncall_limits:\n".to_owned(),
                "",
                |_| "  a: 1\n".to_owned(),
            ),
        ),
        (
            "unknown_fields",
            fill("version: 1\nrules: []\n".to_owned(), "", |i| {
                format!("k{i}: 1\n")
            }),
        ),
        ("competing_rules", competing),
        ("long_host_lists", long_lists),
        (
            "anchors_and_aliases",
            fill(
                "version: 1\nrules: []\nx: &a [1]\ny: [".to_owned(),
                "]\n",
                |_| "*a, ".to_owned(),
            ),
        ),
        (
            // Refused at the flow lookahead bound (E016) after 16,384 entries.
            "flow_list_in_flow_mapping",
            fill(
                "version: 1\nrules:\n  - { id: a, effect: allow, match: { host: [".to_owned(),
                "a] } }\n",
                |_| "a,".to_owned(),
            ),
        ),
        (
            // Two million scalars: the most nodes a 4 MiB file holds.
            "scalars_in_one_list",
            fill("version: 1\nrules: []\nx: [".to_owned(), "1]\n", |_| {
                "1,".to_owned()
            }),
        ),
        (
            "deep_nesting",
            "[".repeat(MAX_FILE_BYTES / 2) + &"]".repeat(MAX_FILE_BYTES / 2),
        ),
        (
            "alias_hosts",
            fill(
                "aliases:\n  - name: gh\n    hosts: [".to_owned(),
                "api.github.com]\n",
                |i| format!("h{i}.example.com, "),
            ),
        ),
    ];
    for (_, text) in &mut out {
        assert!(text.len() <= MAX_FILE_BYTES);
    }
    out.sort_by_key(|(name, _)| *name);
    out
}

/// Receives the parser's events and drops them: what parsing alone costs.
struct Discard(usize);

impl MarkedEventReceiver for Discard {
    fn on_event(&mut self, _ev: Event, _mark: Marker) {
        self.0 += 1;
    }
}

fn parse_only(text: &str) -> usize {
    let mut sink = Discard(0);
    // A refused file (too deep for yaml-rust2's own bound) still costs what it parsed.
    let _ = Parser::new_from_str(text).load(&mut sink, true);
    sink.0
}

fn worst_cases(c: &mut Criterion) {
    let mut group = c.benchmark_group("load_4mib");
    group.sample_size(10);
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(4));
    for (name, text) in files() {
        let bytes = text.as_bytes();
        group.bench_with_input(BenchmarkId::new("mint", name), bytes, |b, bytes| {
            if name.starts_with("alias") {
                b.iter(|| black_box(load_aliases(black_box(bytes), "bench.yaml")));
            } else {
                b.iter(|| black_box(load_policy(black_box(bytes), "bench.yaml")));
            }
        });
        group.bench_with_input(
            BenchmarkId::new("yaml_rust2_parse", name),
            &text,
            |b, text| b.iter(|| black_box(parse_only(black_box(text)))),
        );
    }
    group.finish();
}

/// The broker's steps after a load (issue 24): compiling the policy (`CompiledPolicy::new`, the
/// host index) and deciding one request to a host of the largest rule, next to the load itself in
/// the same run. `duplicate_hosts` is one allow rule of 90,000 hosts followed by 90,000 copies of
/// the last: each copy used to be an index entry, so the request tested the rule 90,001 times and
/// each test scanned its hosts again (quadratic per request); now the copies share one entry.
fn after_load(c: &mut Criterion) {
    let mut group = c.benchmark_group("after_load_4mib");
    group.sample_size(10);
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(4));
    let distinct: String = (0..90_000)
        .map(|i| format!("h{i}.x.example.com, "))
        .collect();
    let duplicate_hosts = format!(
        "version: 1\nrules:\n  - id: a\n    effect: allow\n    match:\n      host: [{distinct}{}last.example.com]\n",
        "last.example.com, ".repeat(90_000)
    );
    let mut cases = vec![("duplicate_hosts", duplicate_hosts, "last.example.com")];
    for (name, text) in files() {
        if name == "competing_rules" || name == "long_host_lists" {
            cases.push((name, text, "h11.x.example.com"));
        }
    }
    for (name, text, host) in &cases {
        assert!(text.len() <= MAX_FILE_BYTES, "{name}");
        let bytes = text.as_bytes();
        group.bench_with_input(BenchmarkId::new("load", name), bytes, |b, bytes| {
            b.iter(|| black_box(load_policy(black_box(bytes), "bench.yaml")));
        });
        let policy = load_policy(bytes, "bench.yaml")
            .policy
            .expect("valid policy");
        group.bench_with_input(BenchmarkId::new("compile", name), &policy, |b, policy| {
            b.iter(|| black_box(CompiledPolicy::new(black_box(policy.clone()))));
        });
        let compiled = CompiledPolicy::new(policy);
        let target = normalize_target("https", host, "/").expect("valid target");
        let request = Request {
            agent: "mino",
            method: "GET",
            target: &target,
            aliases: &[],
            tool: None,
        };
        group.bench_with_input(
            BenchmarkId::new("evaluate", name),
            &request,
            |b, request| {
                b.iter(|| black_box(compiled.evaluate(black_box(request))));
            },
        );
    }
    group.finish();
}

criterion_group!(benches, worst_cases, after_load);
criterion_main!(benches);
