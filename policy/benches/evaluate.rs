//! Benchmarks of the policy hot paths: one decision at 10 to 10,000 rules, and loading a
//! 1,000-rule file. Run with `cargo bench -p mint-policy --bench evaluate`.

#![expect(
    clippy::expect_used,
    reason = "benchmark setup: a broken fixture should stop the run"
)]

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use mint_policy::evaluate::{AliasUse, CompiledPolicy, Request, rule_matches};
use mint_policy::normalize::normalize_target;
use mint_policy::policy::load_policy;
use mint_policy::site::SiteSet;

/// A realistic policy of `n` rules: per-host allow rules with aliases, methods and paths, some
/// wildcard rules, a few global deny rules and a limit rule.
fn policy_text(n: usize) -> String {
    let mut out = String::from("version: 1\ndefault: deny\nrules:\n");
    out.push_str("  - { id: no-deletes, effect: deny, match: { method: DELETE } }\n");
    out.push_str("  - { id: no-admin, effect: deny, match: { path: '/admin/**' } }\n");
    out.push_str("  - { id: writes, effect: limit, match: { method: POST }, limits: [{ max: 1000000, per: 1h }] }\n");
    for i in 3..n {
        if i % 10 == 0 {
            out.push_str(&format!(
                "  - {{ id: wild-{i}, effect: allow, match: {{ host: '*.svc{i}.example.com', method: GET, path: '/v1/**' }} }}\n"
            ));
        } else {
            out.push_str(&format!(
                "  - {{ id: api-{i}, effect: allow, match: {{ agent: [mino, 'ci-*'], alias: [key{i}], host: api{i}.example.com, method: [GET, POST], path: ['/v1/**', /user] }}, limits: [{{ max: 1000000, per: 1h, by: [agent] }}] }}\n"
            ));
        }
    }
    out
}

fn evaluation(c: &mut Criterion) {
    let mut group = c.benchmark_group("evaluate");
    for n in [10usize, 100, 1_000, 10_000] {
        let load = load_policy(policy_text(n).as_bytes(), "bench.yaml");
        assert!(
            load.diagnostics
                .iter()
                .all(|d| !d.code.as_str().starts_with('E'))
        );
        let compiled = CompiledPolicy::new(load.policy.expect("valid policy"));
        let host = format!("api{}.example.com", n - 1);
        let target =
            normalize_target("https", &host, "/v1/repos/mint/issues").expect("valid target");
        let aliases = [AliasUse {
            alias: format!("key{}", n - 1),
            sites: SiteSet::HEADER,
        }];
        let request = Request {
            agent: "mino",
            method: "GET",
            target: &target,
            aliases: &aliases,
            tool: None,
        };
        group.bench_with_input(BenchmarkId::new("indexed", n), &request, |b, request| {
            b.iter(|| black_box(compiled.evaluate(black_box(request))));
        });
        // Baseline in the same run: try every rule, as a plain linear scan would.
        group.bench_with_input(
            BenchmarkId::new("linear_scan", n),
            &request,
            |b, request| {
                b.iter(|| {
                    let rules = &compiled.policy().rules;
                    black_box(
                        rules
                            .iter()
                            .filter(|r| rule_matches(r, black_box(request)))
                            .count(),
                    )
                });
            },
        );
    }
    group.finish();
}

fn loading(c: &mut Criterion) {
    let text = policy_text(1_000);
    c.bench_function("load_policy/1000", |b| {
        b.iter(|| black_box(load_policy(black_box(text.as_bytes()), "bench.yaml")));
    });
}

criterion_group!(benches, evaluation, loading);
criterion_main!(benches);
