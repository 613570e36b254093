//! HTTPS interception (issue 15) with more unmodified clients, each configured only by the
//! variables it reads for a proxy and a CA: Node's undici (`EnvHttpProxyAgent`, `HTTPS_PROXY`,
//! `NODE_EXTRA_CA_CERTS`) and git (`HTTPS_PROXY`, `GIT_SSL_CAINFO`, the credential as an
//! `http.extraHeader` placeholder), and Python's `ssl` with `VERIFY_X509_STRICT`, shown to refuse a
//! leaf without an Authority Key Identifier (so that its acceptance of Mint's leaves in
//! interception.rs means something). The MCP Python SDK through an intercepted tunnel is in
//! proxy_mcp.rs, with the rest of its harness.
//!
//! The clients come from `.ci/run`: node and `npm ci --prefix tests/node` (undici, pinned in
//! tests/node/package-lock.json), git, and the venv at `.venv`. A missing one fails the test.

#![allow(clippy::unwrap_used, clippy::panic, reason = "tests")]

use std::path::{Path, PathBuf};

use mint_tests::interception::{
    CANARY, GIT_CANARY, GIT_HOST, GIT_MAIN, GitLab, HOST, Setup, TlsUpstream, client_command,
    everything,
};
use mint_tests::repo_root;

/// `path`, which `.ci/run` installs; fails the test with the step to run when it is missing.
#[track_caller]
fn installed(path: PathBuf, step: &str) -> PathBuf {
    assert!(
        path.exists(),
        "{} is missing: run the {step} step of .ci/run",
        path.display()
    );
    path
}

/// Runs `tests/node/https_interception_client.mjs URL` with only `vars`; returns its JSON
/// (`null` when it failed) and everything it printed.
#[track_caller]
fn node_client(url: &str, vars: &[(&str, &str)]) -> (serde_json::Value, String) {
    let node = repo_root().join("tests/node");
    installed(
        node.join("node_modules/undici/package.json"),
        "setup_mcp_clients",
    );
    let output = client_command("node", vars)
        .arg(node.join("https_interception_client.mjs"))
        .arg(url)
        .output()
        .unwrap();
    let json = if output.status.success() {
        serde_json::from_slice(&output.stdout).unwrap()
    } else {
        serde_json::Value::Null
    };
    (json, everything(&output))
}

#[test]
fn issue_15_node_undici_env_http_proxy_agent_configured_by_its_environment_alone() {
    let setup = Setup::start();
    let ca = setup.ca();
    let proxy = setup.proxy();
    let url = setup.url("/echo?client=undici");

    // Without NODE_EXTRA_CA_CERTS Node trusts its own roots only: it refuses Mint's leaf and
    // sends nothing.
    let (json, printed) = node_client(&url, &[("HTTPS_PROXY", &proxy)]);
    assert!(json.is_null(), "{printed}");
    assert!(printed.contains("SELF_SIGNED_CERT_IN_CHAIN"), "{printed}");
    setup.wait_for_reason("tls_handshake_failed");
    assert!(setup.peer.server.requests().is_empty());
    setup.assert_no_canary(&printed);

    // With it, the same client goes through.
    let (json, printed) = node_client(
        &url,
        &[
            ("HTTPS_PROXY", &proxy),
            ("NODE_EXTRA_CA_CERTS", ca.to_str().unwrap()),
        ],
    );
    assert_eq!(json["status"], 200, "{printed}");
    let body: serde_json::Value = serde_json::from_str(json["body"].as_str().unwrap()).unwrap();
    assert_eq!(body["path"], "/echo", "{body}");
    assert!(
        body["headers"]
            .as_array()
            .unwrap()
            .iter()
            .any(|pair| pair[0] == "authorization" && pair[1] == "Bearer [mint:redacted]"),
        "{body}"
    );
    let upstream = setup.peer.server.requests();
    assert_eq!(upstream.len(), 1);
    let seen = upstream.last().unwrap();
    assert_eq!(
        seen.header("authorization"),
        Some(format!("Bearer {CANARY}").as_str())
    );
    assert!(seen.header_names_starting_with("proxy-").is_empty());
    assert!(!seen.contains(&setup.cap));
    let id = json["headers"]["mint-request-id"].as_str().unwrap();
    let decision = setup.broker.decision_of(id);
    assert_eq!(decision["decision"], "allow", "{decision}");
    assert_eq!(decision["agent"], "mino", "{decision}");
    assert_eq!(decision["host"], HOST, "{decision}");
    assert_eq!(setup.broker.outcome_of(id)["outcome"], "completed");
    assert_eq!(setup.records_with_reason("tunnel_opened").len(), 2);
    setup.assert_no_canary(&printed);
}

/// `git ls-remote URL` with the credential as a placeholder in `http.extraHeader`, no
/// configuration of the machine or the user (HOME is `home`), no prompt, and only `vars`.
fn git_ls_remote(home: &Path, url: &str, vars: &[(&str, &str)]) -> std::process::Output {
    let home = home.to_str().unwrap();
    let mut all = vec![
        ("HOME", home),
        ("XDG_CONFIG_HOME", home),
        ("GIT_CONFIG_NOSYSTEM", "1"),
        ("GIT_TERMINAL_PROMPT", "0"),
    ];
    all.extend_from_slice(vars);
    let mut command = client_command("git", &all);
    for inherited in ["GIT_ASKPASS", "SSH_ASKPASS", "GIT_CONFIG_GLOBAL", "GIT_DIR"] {
        command.env_remove(inherited);
    }
    command
        .args([
            "-c",
            "http.extraHeader=Authorization: Bearer {{mint:git}}",
            "ls-remote",
            url,
        ])
        .output()
        .unwrap()
}

#[test]
fn issue_15_git_ls_remote_through_an_intercepted_tunnel() {
    let lab = GitLab::start(true);
    let (broker, upstream, home) = (&lab.broker, &lab.upstream, &lab.home);
    let cap = lab.cap.clone().unwrap();
    let proxy = format!("http://agent:{cap}@{}", broker.addr());
    let ca = home.path().join("ca.pem");
    let git_home = lab.git_home();
    let url = lab.url();
    let clean = |printed: &str| {
        broker.assert_clean(printed, &[GIT_CANARY]);
        assert!(!broker.audit_text().contains(&cap));
        assert!(!broker.stderr().contains(&cap));
    };

    // Without GIT_SSL_CAINFO git trusts the system's roots, refuses Mint's leaf, sends nothing.
    let output = git_ls_remote(&git_home, &url, &[("HTTPS_PROXY", &proxy)]);
    let printed = everything(&output);
    assert!(!output.status.success(), "{printed}");
    // libcurl's words with OpenSSL, and with GnuTLS (Debian's git).
    assert!(
        printed.contains("SSL certificate problem")
            || printed.contains("server certificate verification failed"),
        "{printed}"
    );
    assert_eq!(upstream.handshakes(), 0);
    // The tunnel was opened (after curl's usual first try without credentials, a 407). libcurl
    // with GnuTLS checks the certificate once the handshake is over, so the tunnel then ends
    // without a request rather than with a failed handshake: no `tls_handshake_failed` record.
    let connects: Vec<serde_json::Value> = broker
        .audit_records()
        .into_iter()
        .filter(|r| r["phase"] == "outcome" && r["method"] == "CONNECT")
        .collect();
    let reasons: Vec<&str> = connects
        .iter()
        .filter_map(|r| r["reason"].as_str())
        .collect();
    assert!(reasons.contains(&"tunnel_opened"), "{connects:?}");
    clean(&printed);

    // With it, git lists the refs: Mint put the token into the header, the server saw it.
    let output = git_ls_remote(
        &git_home,
        &url,
        &[
            ("HTTPS_PROXY", &proxy),
            ("GIT_SSL_CAINFO", ca.to_str().unwrap()),
        ],
    );
    let printed = everything(&output);
    assert!(output.status.success(), "{printed}");
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        format!("{GIT_MAIN}\tHEAD\n{GIT_MAIN}\trefs/heads/main\n"),
        "{printed}"
    );
    let requests = upstream.requests();
    assert_eq!(requests.len(), 1, "{requests:?}");
    let request = &requests[0];
    assert_eq!(
        mint_tests::broker::request_header(request.as_bytes(), "authorization"),
        Some(format!("Bearer {GIT_CANARY}"))
    );
    assert!(
        mint_tests::broker::request_header(request.as_bytes(), "proxy-authorization").is_none()
    );
    // git asked for protocol v2 and got a v0 advertisement, which it reads as well.
    assert!(request.contains("git/"), "a git user agent: {request}");
    let decisions: Vec<serde_json::Value> = broker
        .audit_records()
        .into_iter()
        .filter(|r| r["phase"] == "decision" && r["method"] == "GET")
        .collect();
    assert_eq!(decisions.len(), 1, "{decisions:?}");
    assert_eq!(decisions[0]["decision"], "allow");
    assert_eq!(decisions[0]["host"], GIT_HOST);
    assert_eq!(decisions[0]["rule"], serde_json::json!(["git-read"]));
    let outcome = broker.outcome_of(decisions[0]["id"].as_str().unwrap());
    assert_eq!(outcome["outcome"], "completed", "{outcome}");
    clean(&printed);
}

/// Runs `openssl ARGS` and asserts it succeeded.
#[track_caller]
fn openssl(args: &[&str], dir: &Path) {
    let output = client_command("openssl", &[])
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "openssl {args:?}: {}",
        everything(&output)
    );
}

/// A TLS server presenting `cert` (PEM, leaf then CA) with `key`, HTTP/1.1.
#[track_caller]
fn tls_server(cert: &Path, key: &Path) -> TlsUpstream {
    use rustls::pki_types::pem::PemObject as _;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let key = PrivateKeyDer::from_pem_file(key).unwrap();
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .unwrap();
    TlsUpstream::start(std::sync::Arc::new(config))
}

/// interception.rs shows Python's `ssl` with `VERIFY_X509_STRICT` accepting Mint's leaves, which
/// carry an Authority Key Identifier. That only means something if the same check refuses a
/// leaf without one: two leaves of one CA, made by openssl alike but for that extension, served
/// in turn, verified by the client's own strict context (the OpenSSL Python links, 3.0 here,
/// enforces it: `Missing Authority Key Identifier`).
#[test]
fn issue_15_python_verify_x509_strict_refuses_a_leaf_without_an_authority_key_identifier() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path();
    let name = "strict.example.test";
    openssl(
        &[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-subj",
            "/CN=strict test CA",
            "-days",
            "2",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ],
        path,
    );
    openssl(
        &[
            "req",
            "-new",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-subj",
            &format!("/CN={name}"),
            "-keyout",
            "leaf.key",
            "-out",
            "leaf.csr",
        ],
        path,
    );
    let mut verdicts = Vec::new();
    for (label, aki) in [("with", "keyid:always"), ("without", "none")] {
        let extensions = format!(
            "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\nsubjectAltName=DNS:{name}\nsubjectKeyIdentifier=hash\nauthorityKeyIdentifier={aki}\n"
        );
        std::fs::write(path.join(format!("{label}.ext")), extensions).unwrap();
        let leaf = format!("{label}.pem");
        openssl(
            &[
                "x509",
                "-req",
                "-in",
                "leaf.csr",
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-days",
                "1",
                "-extfile",
                &format!("{label}.ext"),
                "-out",
                &leaf,
            ],
            path,
        );
        let text = client_command("openssl", &[])
            .args(["x509", "-noout", "-text", "-in"])
            .arg(path.join(&leaf))
            .output()
            .unwrap();
        let has_aki = String::from_utf8_lossy(&text.stdout).contains("Authority Key Identifier");
        assert_eq!(has_aki, label == "with", "{label}");
        let chain = path.join(format!("{label}-chain.pem"));
        std::fs::write(
            &chain,
            std::fs::read_to_string(path.join(&leaf)).unwrap()
                + &std::fs::read_to_string(path.join("ca.pem")).unwrap(),
        )
        .unwrap();
        let server = tls_server(&chain, &path.join("leaf.key"));
        let ca = path.join("ca.pem");
        let (json, printed) = mint_tests::interception::python_client(
            &[
                "direct",
                "--target",
                &format!("{name}:{}", server.port()),
                "--cafile",
                ca.to_str().unwrap(),
            ],
            &[],
        );
        verdicts.push((label, json["verified"].clone(), printed));
    }
    assert_eq!(verdicts[0].1, true, "{}", verdicts[0].2);
    assert_eq!(verdicts[1].1, false, "{}", verdicts[1].2);
    assert!(
        verdicts[1].2.contains("Missing Authority Key Identifier"),
        "{}",
        verdicts[1].2
    );
}
