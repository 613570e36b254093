//! `mint demo --once`, run as a user would: it must exit 0 and show the allowed, denied,
//! redirected, MCP and intercepted-HTTPS cases, the agent side behind `mint run` (curl, and
//! Python `requests` reading its key from the environment) and the audit trail — and never the
//! demo secret.

#![allow(clippy::unwrap_used, reason = "tests")]

use std::process::Command;

use mint_tests::broker::mint_bin;

#[test]
fn demo_once_shows_every_case_and_exits_zero() {
    let output = Command::new(mint_bin())
        .args(["demo", "--once"])
        .env_remove("MINT_HOME")
        .env_remove("MINT_LISTEN")
        .output()
        .unwrap();
    let stdout = String::from_utf8(output.stdout).unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "mint demo failed: {stdout}\n{stderr}"
    );
    for expected in [
        "1. GET /echo/hello",
        "-> 200 OK (rule demo-read)",
        "`Bearer [mint:redacted]`",
        "2. DELETE /echo/hello  -> 403 Forbidden policy_denied by rule no-deletes; nothing was sent",
        "3. GET /redirect  -> 302 Found with Location: https://example.com/elsewhere",
        "returned to the client, not followed",
        "MCP tools/call `search`  -> 200 OK",
        "MCP tools/call `delete_repo`  -> 403 Forbidden with a JSON-RPC error; never sent",
        "5. An unmodified HTTPS client: CONNECT api.demo.test:",
        "/echo/hello  -> 200 OK (rule demo-read)",
        "Mint signed a certificate for api.demo.test",
        "6. The agent side: `mint run --agent demo-agent -- CMD`",
        "   curl -H 'Authorization: Bearer {{mint:demo}}'\n     -> 200, the upstream got the secret",
        "os.environ['DEMO_API_KEY']})\n     -> 200, the upstream got the secret",
        "Audit trail (mint audit tail):",
    ] {
        assert!(
            stdout.contains(expected),
            "missing {expected:?} in:\n{stdout}"
        );
    }
    // The audit table has one row per request, with the deciding rule and the outcome.
    let rows: Vec<&str> = stdout
        .lines()
        .filter(|line| line.contains("demo-agent") && line.contains("127.0.0.1:"))
        .collect();
    assert_eq!(rows.len(), 5, "{stdout}");
    assert!(
        rows[1].contains("deny") && rows[1].contains("no-deletes") && rows[1].contains("denied")
    );
    assert!(rows[2].contains("302"));
    // The intercepted requests: each tunnel (admitted by the rules that could allow a request
    // inside) and the request inside it, decided by the same rule. A tunnel's closing record (a
    // second CONNECT row, without a decision) appears if it was written before the tail was
    // read; those are left out.
    let tunneled: Vec<&str> = stdout
        .lines()
        .filter(|line| line.contains("demo-agent") && line.contains("api.demo.test:"))
        .filter(|line| !line.contains("CONNECT") || line.contains("allow"))
        .collect();
    // Step 5's tunnel and request, then one of each for the two clients `mint run` ran.
    assert_eq!(tunneled.len(), 6, "{stdout}");
    assert!(
        tunneled[5].contains("/echo/agent") && tunneled[5].contains("demo-read"),
        "{stdout}"
    );
    assert!(
        tunneled[0].contains("CONNECT")
            && tunneled[0].contains("allow")
            && tunneled[0].contains("demo-read"),
        "{stdout}"
    );
    assert!(
        tunneled[1].contains("GET")
            && tunneled[1].contains("demo-read")
            && tunneled[1].contains("200"),
        "{stdout}"
    );
    // The secret is `demo-` and 32 hex digits: it appears nowhere, on stdout or stderr.
    for text in [stdout.as_str(), &stderr] {
        let leaked = text
            .split(|c: char| !c.is_ascii_alphanumeric() && c != '-')
            .any(|word| {
                word.strip_prefix("demo-").is_some_and(|rest| {
                    rest.len() == 32 && rest.bytes().all(|b| b.is_ascii_hexdigit())
                })
            });
        assert!(!leaked, "the demo secret was printed");
    }
    // The broker's log lines went to a file in the home, not between the report's steps.
    let log_line = stdout
        .lines()
        .find(|line| line.trim_start().starts_with("log:"))
        .unwrap_or_else(|| panic!("no log line in:\n{stdout}"));
    assert!(log_line.contains("/broker.log"), "{log_line}");
    assert!(
        !stderr.contains(" INFO ") && !stderr.contains("mint_broker"),
        "log lines on stderr:\n{stderr}"
    );
    // The temporary home is gone.
    let home = stdout
        .split("temporary MINT_HOME ")
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .unwrap();
    assert!(
        !std::path::Path::new(home).exists(),
        "{home} was left behind"
    );
}
