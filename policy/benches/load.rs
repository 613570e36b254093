//! Benchmarks of loading the worst files an agent could write for `policy_check`, `alias_list`
//! or a broker reload to read: 4 MiB (the loader's bound) of one mapping with ~330k keys, of
//! duplicate keys, of unknown fields, of rules that all compete in the shadowed-rule check, of
//! long host lists, of anchors and aliases, and of nesting. Each is measured next to the
//! baseline of the same run: yaml-rust2's parser alone on the same bytes (no tree, no checks).
//! Run with `cargo bench -p mint-policy --bench load`.

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use mint_policy::MAX_FILE_BYTES;
use mint_policy::aliases::load_aliases;
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

criterion_group!(benches, worst_cases);
criterion_main!(benches);
