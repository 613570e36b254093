//! `mint demo`: the whole broker on loopback in one command, with nothing to set up.
//!
//! Builds a temporary MINT_HOME (0700, removed at the end) holding a default-deny policy, one
//! alias `demo` whose secret is a random value in a 0600 file, and one capability; starts a local
//! HTTPS echo upstream with its own CA (`echo_upstream`) and the real broker (`serve::run`, the
//! same code as `mint serve`) trusting that CA. Then it sends, through the broker as an agent
//! would: an allowed request carrying `{{mint:demo}}` (the upstream receives the secret, the client
//! sees `[mint:redacted]` where the echo returned it), a request a deny rule refuses, a redirect
//! that comes back unfollowed, two MCP `tools/call`s (one allowed tool, one refused), and the same
//! allowed request from an unmodified HTTPS client (`https_client`: `CONNECT` to the broker, TLS
//! to the upstream's real name `api.demo.test` with Mint's CA, which the broker made in the home
//! at start; `--resolve` pins that name to the upstream), and the agent side: `mint run -- curl
//! https://...` and a Python `requests` client reading its key from `DEMO_API_KEY`, the alias's
//! `env` (each skipped with a note where the client is missing). It checks each result, prints the audit
//! tail, and — unless `--once` — keeps serving and prints curl commands to try until Ctrl-C.
//!
//! The demo's secret is made for the run and printed nowhere; the echo upstream is the only peer
//! and listens on 127.0.0.1 only.

use std::fs::OpenOptions;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use mint_policy::audit::AgentName;
use tokio::net::TcpListener;

use crate::capability::{CapabilityFile, IssueRequest};
use crate::cli::audit::{AuditCommand, TailArgs};
use crate::config::env::Paths;
use crate::config::secure_file::{create_new, create_private_dir, write_atomic};
use crate::demo::echo_upstream::{EchoConfig, EchoUpstream};
use crate::secrets::scrub::REDACTED;
use crate::serve::{ServeConfig, load_state, run, shutdown_signal};

pub mod echo_upstream;
mod https_client;

/// The upstream's real-looking name in the interception step, pinned to the echo upstream.
pub const DEMO_HOST: &str = "api.demo.test";

/// The agent name of the demo's capability.
pub const DEMO_AGENT: &str = "demo-agent";

/// The broker's log file in the demo's home.
pub const BROKER_LOG: &str = "broker.log";

/// Why the demo could not run, or found the broker misbehaving.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DemoError {
    /// Setting up the temporary home, the upstream or the broker failed.
    #[error("demo set-up failed: {0}")]
    Setup(String),
    /// A demo request did not get the answer Mint promises.
    #[error("demo check failed: {0}")]
    Check(String),
    /// Writing the output failed.
    #[error("cannot write the demo output")]
    Output(#[source] io::Error),
}

/// Options of `mint demo`.
#[derive(Clone, Debug)]
pub struct DemoOptions {
    /// Where the broker listens (`127.0.0.1:0` picks a free port).
    pub listen: String,
    /// Stop after the scripted requests instead of serving until Ctrl-C.
    pub once: bool,
}

/// A temporary MINT_HOME, removed on drop.
struct TempHome {
    path: PathBuf,
}

impl Drop for TempHome {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// Runs the demo; output goes to `out`.
pub fn demo(options: &DemoOptions, out: &mut dyn Write) -> Result<(), DemoError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| DemoError::Setup(format!("runtime: {e}")))?;
    runtime.block_on(run_demo(options, out))
}

async fn run_demo(options: &DemoOptions, out: &mut dyn Write) -> Result<(), DemoError> {
    let home = make_home()?;
    // The broker's log lines go to a file in the home, not between the report's steps; if the
    // demo fails they are what explains it, so they are shown before the home goes.
    let log_path = home.path.join(BROKER_LOG);
    create_new(&log_path, b"").map_err(|e| DemoError::Setup(e.to_string()))?;
    let log = OpenOptions::new()
        .append(true)
        .open(&log_path)
        .map_err(|e| DemoError::Setup(format!("broker log: {e}")))?;
    crate::cli::log::redirect(log);
    let result = run_in(&home, options, out).await;
    if result.is_err()
        && let Ok(lines) = std::fs::read(&log_path)
    {
        let mut stderr = io::stderr().lock();
        let _ = writeln!(stderr, "The broker's log ({}):", log_path.display());
        let _ = stderr.write_all(&lines);
    }
    result
}

/// The demo inside its temporary `home`.
async fn run_in(
    home: &TempHome,
    options: &DemoOptions,
    out: &mut dyn Write,
) -> Result<(), DemoError> {
    let echo = EchoUpstream::start(EchoConfig {
        extra_names: vec![DEMO_HOST.to_owned()],
        ..EchoConfig::default()
    })
    .await
    .map_err(|e| DemoError::Setup(format!("echo upstream: {e}")))?;
    let port = echo.port();
    let ca_file = home.path.join("upstream-ca.pem");
    echo.ca()
        .write_pem(&ca_file)
        .map_err(|e| DemoError::Setup(format!("CA file: {e}")))?;
    let secret = random_hex(16).map(|hex| format!("demo-{hex}"))?;
    let token = write_declarations(&home.path, port, &secret)?;

    let paths = Paths::resolve(|name| {
        (name == crate::config::env::MINT_HOME).then(|| home.path.clone().into_os_string())
    });
    let mut resolve = crate::net::upstream::ResolvePins::default();
    resolve
        .add(&format!("{DEMO_HOST}:{port}:127.0.0.1"))
        .map_err(|e| DemoError::Setup(e.to_string()))?;
    let config = ServeConfig {
        upstream_ca: Some(ca_file),
        resolve,
        ..ServeConfig::default()
    };
    // Off the async threads: a keyring client may run a runtime of its own.
    let (state, reloader) = {
        let (paths, config) = (paths.clone(), config.clone());
        tokio::task::spawn_blocking(move || load_state(&paths, &config))
            .await
            .map_err(|e| DemoError::Setup(e.to_string()))?
            .map_err(|e| DemoError::Setup(e.to_string()))?
    };
    let listener = TcpListener::bind(&options.listen)
        .await
        .map_err(|e| DemoError::Setup(format!("cannot listen on `{}`: {e}", options.listen)))?;
    let addr = listener
        .local_addr()
        .map_err(|e| DemoError::Setup(e.to_string()))?;
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let broker = tokio::spawn(run(listener, state, Some(reloader), async move {
        let _ = stop_rx.await;
    }));

    let say = |out: &mut dyn Write, text: &str| -> Result<(), DemoError> {
        out.write_all(text.as_bytes()).map_err(DemoError::Output)?;
        out.flush().map_err(DemoError::Output)
    };
    say(
        out,
        &format!(
            "Mint demo\n  broker:   http://{addr} (temporary MINT_HOME {home})\n  log:      {home}/{BROKER_LOG} (the broker's log lines; the home is removed at the end)\n  upstream: https://127.0.0.1:{port} (a local HTTPS echo server with its own CA)\n  alias:    demo, bound to 127.0.0.1 and {DEMO_HOST} (pinned to 127.0.0.1), secret: a random value in a 0600 file\n  agent:    {DEMO_AGENT}, with a capability issued for this run\n\n",
            home = home.path.display()
        ),
    )?;

    let client: Client<HttpConnector, Full<Bytes>> =
        Client::builder(TokioExecutor::new()).build_http();
    let base = format!("http://{addr}/v1/proxy/https/127.0.0.1:{port}");
    let send = |method: Method, path: &str, body: Option<&str>| {
        let mut builder = Request::builder()
            .method(method)
            .uri(format!("{base}{path}"))
            .header("mint-capability", token.as_str())
            .header("authorization", "Bearer {{mint:demo}}");
        if body.is_some() {
            builder = builder.header("content-type", "application/json");
        }
        let request = builder.body(Full::new(Bytes::from(body.unwrap_or("").to_owned())));
        let client = client.clone();
        async move {
            let request = request.map_err(|e| DemoError::Setup(e.to_string()))?;
            let response = tokio::time::timeout(Duration::from_secs(30), client.request(request))
                .await
                .map_err(|_| DemoError::Check("no answer from the broker".to_owned()))?
                .map_err(|e| DemoError::Check(format!("broker unreachable: {e}")))?;
            let (parts, body) = response.into_parts();
            let body = body
                .collect()
                .await
                .map_err(|e| DemoError::Check(format!("answer cut off: {e}")))?
                .to_bytes();
            Ok::<_, DemoError>((parts, String::from_utf8_lossy(&body).into_owned()))
        }
    };

    // 1. Allowed, with the secret.
    let (head, body) = send(Method::GET, "/echo/hello", None).await?;
    let upstream_saw = last_carried_secret(&echo, &secret);
    check(
        head.status == StatusCode::OK,
        "the allowed request did not get 200",
    )?;
    check(upstream_saw, "the upstream did not receive the secret")?;
    check(
        body.contains(REDACTED),
        "the echoed secret was not redacted",
    )?;
    check(!body.contains(&secret), "the secret reached the client")?;
    say(
        out,
        &format!(
            "1. GET /echo/hello with `Authorization: Bearer {{{{mint:demo}}}}`  -> {} (rule demo-read)\n   the upstream received the real secret; the echo came back as `Bearer {REDACTED}`\n\n",
            head.status
        ),
    )?;

    // 2. Denied by a deny rule: nothing sent.
    let before = echo.requests().len();
    let (head, body) = send(Method::DELETE, "/echo/hello", None).await?;
    check(
        head.status == StatusCode::FORBIDDEN,
        "the DELETE was not refused",
    )?;
    check(
        body.contains("no-deletes"),
        "the refusal does not name the rule",
    )?;
    check(
        echo.requests().len() == before,
        "the refused request reached the upstream",
    )?;
    say(
        out,
        &format!(
            "2. DELETE /echo/hello  -> {} policy_denied by rule no-deletes; nothing was sent\n\n",
            head.status
        ),
    )?;

    // 3. A redirect comes back, unfollowed.
    let before = echo.requests().len();
    let (head, _) = send(
        Method::GET,
        "/redirect?to=https%3A%2F%2Fexample.com%2Felsewhere",
        None,
    )
    .await?;
    let location = head
        .headers
        .get("location")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    check(
        head.status == StatusCode::FOUND,
        "the redirect was not returned",
    )?;
    check(
        echo.requests().len() == before + 1,
        "the redirect was followed",
    )?;
    say(
        out,
        &format!(
            "3. GET /redirect  -> {} with Location: {location}\n   returned to the client, not followed\n\n",
            head.status
        ),
    )?;

    // 4. MCP tool calls: one allowed tool, one refused before it is sent.
    let call = |tool: &str| {
        format!(
            r#"{{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{{"name":"{tool}","arguments":{{"q":"mint"}}}}}}"#
        )
    };
    let (head, _) = send(Method::POST, "/echo/mcp", Some(&call("search"))).await?;
    check(
        head.status == StatusCode::OK,
        "the allowed MCP tool call failed",
    )?;
    let before = echo.requests().len();
    let (refused, body) = send(Method::POST, "/echo/mcp", Some(&call("delete_repo"))).await?;
    check(
        refused.status == StatusCode::FORBIDDEN,
        "the refused MCP tool was not refused",
    )?;
    check(
        body.contains("\"jsonrpc\""),
        "the refusal is not a JSON-RPC error",
    )?;
    check(
        echo.requests().len() == before,
        "the refused tool call reached the upstream",
    )?;
    say(
        out,
        &format!(
            "4. MCP tools/call `search`  -> {} (rule demo-mcp-search)\n   MCP tools/call `delete_repo`  -> {} with a JSON-RPC error; never sent\n\n",
            head.status, refused.status
        ),
    )?;

    // 5. An unmodified HTTPS client: CONNECT, TLS with Mint's CA, the real host name.
    let before = echo.requests().len();
    let (head, body) = https_client::get_through_connect(
        addr,
        DEMO_AGENT,
        &token,
        (DEMO_HOST, port),
        &paths.ca_cert,
        &[("authorization", "Bearer {{mint:demo}}")],
        "/echo/hello",
    )
    .await?;
    let upstream_saw = echo.requests().len() == before + 1 && last_carried_secret(&echo, &secret);
    check(
        head.status == StatusCode::OK,
        "the intercepted request did not get 200",
    )?;
    check(
        upstream_saw,
        "the upstream did not receive the secret through the tunnel",
    )?;
    check(
        body.contains(REDACTED) && !body.contains(&secret),
        "the echoed secret was not redacted inside the tunnel",
    )?;
    say(
        out,
        &format!(
            "5. An unmodified HTTPS client: CONNECT {DEMO_HOST}:{port}, TLS trusting Mint's CA alone,\n   GET https://{DEMO_HOST}:{port}/echo/hello  -> {} (rule demo-read)\n   Mint signed a certificate for {DEMO_HOST}, decided the request inside the tunnel like\n   the others, sent the secret and redacted its echo\n\n",
            head.status
        ),
    )?;

    // 6. The agent side: unmodified clients run by `mint run`, configured by its environment.
    agent_side(&paths, addr, port, &secret, out).await?;

    // The audit trail of all of it (the outcome of the last answer may lag a moment).
    tokio::time::sleep(Duration::from_millis(100)).await;
    say(out, "Audit trail (mint audit tail):\n")?;
    let mut err = io::sink();
    crate::cli::audit::run(
        AuditCommand::Tail(TailArgs {
            lines: 20,
            follow: false,
            json: false,
        }),
        &paths,
        out,
        &mut err,
    )
    .map_err(|e| DemoError::Setup(e.to_string()))?;

    if !options.once {
        say(
            out,
            &format!(
                "\nThe same as an agent runs it, behind `mint run` (in another terminal):\n\n  MINT_HOME={home} mint run --agent {DEMO_AGENT} --proxy http://{addr} -- \\\n       curl -H 'Authorization: Bearer {{{{mint:demo}}}}' https://{DEMO_HOST}:{port}/echo/try-me\n",
                home = home.path.display()
            ),
        )?;
        say(
            out,
            &format!(
                "\nThe broker keeps running; try it (Ctrl-C to stop):\n\n  curl -H 'Mint-Capability: {token}' \\\n       -H 'Authorization: Bearer {{{{mint:demo}}}}' \\\n       http://{addr}/v1/proxy/https/127.0.0.1:{port}/echo/try-me\n\nor as an unmodified HTTPS client, through CONNECT with Mint's CA:\n\n  curl --proxy 'http://{DEMO_AGENT}:{token}@{addr}' --cacert {ca} \\\n       -H 'Authorization: Bearer {{{{mint:demo}}}}' \\\n       https://{DEMO_HOST}:{port}/echo/try-me\n\n",
                ca = paths.ca_cert.display()
            ),
        )?;
        shutdown_signal().await;
    }
    let _ = stop_tx.send(());
    match broker.await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(DemoError::Setup(format!("broker: {e}"))),
        Err(e) => return Err(DemoError::Setup(format!("broker task: {e}"))),
    }
    echo.shutdown().await;
    Ok(())
}

/// Step 6: `mint run -- curl https://...` and a Python `requests` client that reads its key from
/// `DEMO_API_KEY` (the alias's `env`), each run by this same binary's `mint run` against the
/// demo's broker. A machine without curl, or without Python and `requests`, skips that client
/// with a note.
async fn agent_side(
    paths: &Paths,
    addr: std::net::SocketAddr,
    port: u16,
    secret: &str,
    out: &mut dyn Write,
) -> Result<(), DemoError> {
    let mint = std::env::current_exe().map_err(|e| DemoError::Setup(e.to_string()))?;
    let url = format!("https://{DEMO_HOST}:{port}/echo/agent");
    let python = format!(
        "import os, requests\nr = requests.get({url:?}, headers={{'Authorization': 'Bearer ' + os.environ['DEMO_API_KEY']}}, timeout=20)\nprint(r.status_code, r.text)"
    );
    let clients: [(&str, Vec<&str>, &str); 2] = [
        (
            "curl",
            vec![
                "curl",
                "-sS",
                "-H",
                "Authorization: Bearer {{mint:demo}}",
                &url,
            ],
            "curl -H 'Authorization: Bearer {{mint:demo}}'",
        ),
        (
            "python3",
            vec!["python3", "-c", &python],
            "python3: requests.get(..., headers={'Authorization': 'Bearer ' + os.environ['DEMO_API_KEY']})",
        ),
    ];
    let mut text = format!(
        "6. The agent side: `mint run --agent {DEMO_AGENT} -- CMD` gives CMD a capability of its own\n   (revoked when it exits), HTTPS_PROXY, a CA bundle trusting Mint, and DEMO_API_KEY={{{{mint:demo}}}}\n"
    );
    for (program, argv, label) in clients {
        let available = std::process::Command::new(program)
            .arg("--version")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|status| status.success());
        if !available {
            text.push_str(&format!(
                "   {label}  -> skipped: `{program}` is not installed\n"
            ));
            continue;
        }
        let output = tokio::process::Command::new(&mint)
            .env(crate::config::env::MINT_HOME, &paths.home)
            .env("RUST_LOG", "off")
            .args(["run", "--agent", DEMO_AGENT, "--proxy"])
            .arg(format!("http://{addr}"))
            .arg("--")
            .args(&argv)
            .stdin(std::process::Stdio::null())
            .output();
        let output = tokio::time::timeout(Duration::from_secs(60), output)
            .await
            .map_err(|_| DemoError::Check(format!("`mint run -- {program}` did not finish")))?
            .map_err(|e| DemoError::Setup(format!("mint run: {e}")))?;
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        check(
            !stdout.contains(secret) && !stderr.contains(secret),
            "the secret reached a client run by mint run",
        )?;
        if program == "python3" && stderr.contains("No module named 'requests'") {
            text.push_str(&format!(
                "   {label}  -> skipped: Python has no `requests`\n"
            ));
            continue;
        }
        check(
            output.status.success() && stdout.contains(REDACTED),
            &format!("`mint run -- {program}` did not get the redacted echo: {stderr}"),
        )?;
        text.push_str(&format!(
            "   {label}\n     -> 200, the upstream got the secret, the echo came back as `Bearer {REDACTED}`\n"
        ));
    }
    text.push('\n');
    out.write_all(text.as_bytes()).map_err(DemoError::Output)?;
    out.flush().map_err(DemoError::Output)
}

/// Whether the upstream's last request carried `Authorization: Bearer SECRET`.
fn last_carried_secret(echo: &EchoUpstream, secret: &str) -> bool {
    echo.requests()
        .last()
        .and_then(|r| {
            r.header("authorization")
                .map(|v| v == format!("Bearer {secret}"))
        })
        .unwrap_or(false)
}

fn check(ok: bool, what: &str) -> Result<(), DemoError> {
    if ok {
        Ok(())
    } else {
        Err(DemoError::Check(what.to_owned()))
    }
}

fn random_hex(bytes: usize) -> Result<String, DemoError> {
    let mut buf = vec![0u8; bytes];
    getrandom::fill(&mut buf).map_err(|e| DemoError::Setup(format!("random: {e}")))?;
    Ok(hex::encode(buf))
}

fn make_home() -> Result<TempHome, DemoError> {
    let path = std::env::temp_dir().join(format!("mint-demo-{}", random_hex(6)?));
    create_private_dir(&path).map_err(|e| DemoError::Setup(e.to_string()))?;
    let home = TempHome { path };
    create_private_dir(&home.path.join("secrets")).map_err(|e| DemoError::Setup(e.to_string()))?;
    Ok(home)
}

/// Writes the secret, the alias file, the policy and a capability; returns the token.
fn write_declarations(home: &Path, port: u16, secret: &str) -> Result<String, DemoError> {
    let setup = |e: &dyn std::fmt::Display| DemoError::Setup(e.to_string());
    let secret_file = home.join("secrets").join("demo");
    write_atomic(&secret_file, secret.as_bytes()).map_err(|e| setup(&e))?;
    let aliases = format!(
        "aliases:\n  - name: demo\n    description: API key of the demo upstream (random, made for this run)\n    hosts: [127.0.0.1, {DEMO_HOST}]\n    source: file:{}\n    env: [DEMO_API_KEY]\n",
        secret_file.display()
    );
    write_atomic(&home.join("aliases.yaml"), aliases.as_bytes()).map_err(|e| setup(&e))?;
    let scope = format!(
        "agent: [{DEMO_AGENT}]\n      alias: [demo]\n      host: [127.0.0.1, {DEMO_HOST}]\n      port: [{port}]"
    );
    let policy = format!(
        "version: 1\ndefault: deny\nrules:\n  - id: demo-read\n    description: read the echo upstream with the demo key\n    effect: allow\n    match:\n      {scope}\n      method: [GET]\n      path: [\"/echo/**\", \"/redirect\"]\n  - id: demo-mcp-endpoint\n    description: the MCP endpoint's own traffic (initialize, tools/list, notifications)\n    effect: allow\n    match:\n      {scope}\n      method: [POST]\n      path: [/echo/mcp]\n  - id: demo-mcp-search\n    description: one allowed MCP tool\n    effect: allow\n    match:\n      {scope}\n      method: [POST]\n      path: [/echo/mcp]\n      tool: [search]\n  - id: no-deletes\n    description: nothing is ever deleted through Mint\n    effect: deny\n    match:\n      method: [DELETE]\n"
    );
    write_atomic(&home.join("policy.yaml"), policy.as_bytes()).map_err(|e| setup(&e))?;
    let mut capabilities = CapabilityFile::default();
    let agent = AgentName::new(DEMO_AGENT).map_err(|e| setup(&e))?;
    let (token, _) = capabilities
        .issue(
            IssueRequest {
                agent,
                ttl: Duration::from_secs(24 * 3600),
                aliases: Vec::new(),
            },
            std::time::SystemTime::now(),
        )
        .map_err(|e| setup(&e))?;
    capabilities
        .save(&home.join("capabilities.yaml"))
        .map_err(|e| setup(&e))?;
    Ok(token_text(&token))
}

/// The token's text, for the demo's own requests and the printed curl command.
fn token_text(token: &crate::capability::IssuedToken) -> String {
    use secrecy::ExposeSecret;
    // EXPOSE: a capability for a throwaway home, printed so the operator can try the demo.
    token.as_secret().expose_secret().to_owned()
}
