//! Snapshots of the findings for a corpus of broken policy files (`tests/fixtures/broken/`), in
//! the human form and the JSON form of `mint policy check`. Review wording with
//! `cargo insta review`.

#![allow(
    clippy::unwrap_used,
    clippy::panic,
    clippy::disallowed_methods,
    reason = "test code: a failed setup step should fail the test; tests may read fixtures"
)]

use mint_policy::check::check_policy;

#[test]
fn broken_policy_diagnostics() {
    insta::glob!("fixtures/broken/*.yaml", |path| {
        let bytes = std::fs::read(path).unwrap();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let report = check_policy(&bytes, &name);
        insta::assert_snapshot!("human", report.render_human());
        insta::assert_json_snapshot!("json", report);
    });
}
