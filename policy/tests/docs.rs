//! The documentation names every finding code, so a new check cannot ship undocumented.

#![allow(
    clippy::unwrap_used,
    clippy::panic,
    clippy::disallowed_methods,
    reason = "test code: a failed setup step should fail the test; tests may read fixtures"
)]

use mint_policy::Code;

#[test]
fn docs_policy_md_lists_every_code() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/policy.md");
    let docs = std::fs::read_to_string(path).unwrap();
    for code in Code::ALL {
        let row = format!("| {} |", code.as_str());
        assert!(
            docs.contains(&row),
            "docs/policy.md has no table row for {}",
            code.as_str()
        );
    }
}
