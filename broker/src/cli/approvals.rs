//! `mint approvals`: the operator's side of held requests, through the running broker's socket
//! (`$MINT_HOME/approvals.sock`, [`crate::approval::socket`]).
//!
//! `list`, `approve`, `deny` and `revoke` send one command each. `watch` shows each held request
//! on the controlling terminal (`/dev/tty`, never stdin: an agent's output piped into this command
//! must not be able to answer) and reads the operator's answer there: `y` approves once, `a`
//! approves with a grant for `--grant-for`, Enter or `n` denies. Every field shown comes from the
//! agent's request and is made inert for the terminal ([`crate::approval::display`]) twice: by the
//! broker, and here again before it is printed.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Subcommand;
use mint_policy::duration::format_duration;

use crate::approval::display::inert;
use crate::approval::protocol::{Command, Reply, SOCKET_NAME};
use crate::approval::socket::{OperatorClient, SocketError};
use crate::approval::{BookEvent, Closed, GrantView, MAX_GRANT, PendingView};
use crate::cli::ExitStatus;
use crate::cli::terminal::push_padded;
use crate::config::env::Paths;

/// `mint approvals ...`.
#[derive(Debug, Subcommand)]
pub enum ApprovalsCommand {
    /// List the requests waiting for approval, oldest first, and the live grants.
    List {
        /// One JSON object, as the broker gave it.
        #[arg(long)]
        json: bool,
    },
    /// Approve a waiting request: it is sent (limits permitting).
    Approve {
        /// The approval id (`ap-…`, from `list` or `watch`).
        id: String,
        /// Also approve later requests of the same call (agent, rule, method, scheme, host, port,
        /// path, MCP tool) without asking, for this long (at most 8h): a grant.
        #[arg(long = "for", value_name = "DURATION", value_parser = crate::cli::quantity::duration)]
        grant: Option<Duration>,
    },
    /// Deny a waiting request: it is refused (403 approval_denied) and nothing is sent.
    Deny {
        /// The approval id.
        id: String,
    },
    /// End a grant before its time.
    Revoke {
        /// The grant id (`gr-…`).
        grant: String,
    },
    /// Ask on this terminal about each request as it starts waiting: `y` approves once, `a`
    /// approves with a grant, Enter or `n` denies. Ctrl-C leaves without deciding.
    Watch {
        /// How long the grant that `a` gives lasts.
        #[arg(long, value_name = "DURATION", value_parser = crate::cli::quantity::duration, default_value = "10m")]
        grant_for: Duration,
    },
}

/// Why a `mint approvals` command failed.
#[derive(Debug, thiserror::Error)]
pub enum ApprovalsError {
    /// The socket.
    #[error(transparent)]
    Socket(#[from] SocketError),
    /// The broker refused the command.
    #[error("{0}")]
    Refused(String),
    /// A grant longer than 8 h (the duration grammar refuses zero).
    #[error("a grant of {} is too long: a grant lasts from 1s to 8h", format_duration(*.0))]
    GrantLength(Duration),
    /// `watch` needs a terminal.
    #[error("`mint approvals watch` reads answers from the controlling terminal (/dev/tty): {0}")]
    NoTerminal(#[source] std::io::Error),
    /// The runtime, the terminal or stdout.
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

// === impl ApprovalsError ===

impl ApprovalsError {
    /// 1 when the broker refused (no such approval or grant), 2 otherwise.
    pub fn exit_status(&self) -> ExitStatus {
        match self {
            ApprovalsError::Refused(_) => ExitStatus::Failure,
            _ => ExitStatus::UsageOrConfig,
        }
    }
}

/// Runs `mint approvals` against the broker of `paths.home`.
pub fn run(
    command: ApprovalsCommand,
    paths: &Paths,
    out: &mut dyn Write,
) -> Result<(), ApprovalsError> {
    let socket = paths.home.join(SOCKET_NAME);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        match command {
            ApprovalsCommand::List { json } => {
                let reply = ask(&socket, &Command::List).await?;
                if json {
                    let text = crate::cli::terminal::json_for_terminal(
                        serde_json::to_string_pretty(&reply).unwrap_or_default(),
                    );
                    writeln!(out, "{text}")?;
                } else {
                    out.write_all(
                        list_text(
                            reply.pending.as_deref().unwrap_or_default(),
                            reply.grants.as_deref().unwrap_or_default(),
                        )
                        .as_bytes(),
                    )?;
                }
                Ok(())
            }
            ApprovalsCommand::Approve { id, grant } => {
                let grant_seconds = match grant {
                    Some(length) if length.is_zero() || length > MAX_GRANT => {
                        return Err(ApprovalsError::GrantLength(length));
                    }
                    Some(length) => Some(length.as_secs().max(1)),
                    None => None,
                };
                let reply = ask(
                    &socket,
                    &Command::Approve {
                        id: id.clone(),
                        grant_seconds,
                    },
                )
                .await?;
                match reply.grant {
                    Some(grant) => writeln!(
                        out,
                        "approved {}; grant {} approves the same call for {}",
                        inert(&id, false),
                        inert(&grant, false),
                        humantime::format_duration(Duration::from_secs(grant_seconds.unwrap_or(0)))
                    )?,
                    None => writeln!(out, "approved {}", inert(&id, false))?,
                }
                Ok(())
            }
            ApprovalsCommand::Deny { id } => {
                ask(&socket, &Command::Deny { id: id.clone() }).await?;
                writeln!(out, "denied {}", inert(&id, false))?;
                Ok(())
            }
            ApprovalsCommand::Revoke { grant } => {
                ask(
                    &socket,
                    &Command::Revoke {
                        grant: grant.clone(),
                    },
                )
                .await?;
                writeln!(out, "revoked {}", inert(&grant, false))?;
                Ok(())
            }
            ApprovalsCommand::Watch { grant_for } => {
                if grant_for.is_zero() || grant_for > MAX_GRANT {
                    return Err(ApprovalsError::GrantLength(grant_for));
                }
                watch(&socket, grant_for).await
            }
        }
    })
}

/// Sends one command; a refusal is an error.
async fn ask(socket: &Path, command: &Command) -> Result<Reply, ApprovalsError> {
    let (reply, _) = OperatorClient::send(socket, command).await?;
    if reply.ok {
        Ok(reply)
    } else {
        Err(ApprovalsError::Refused(inert(
            reply.error.as_deref().unwrap_or("refused"),
            false,
        )))
    }
}

/// The table `list` prints.
fn list_text(pending: &[PendingView], grants: &[GrantView]) -> String {
    let mut text = String::new();
    if pending.is_empty() {
        text.push_str("no request is waiting for approval\n");
    } else {
        text.push_str("waiting for approval:\n");
        for view in pending {
            let s = &view.summary;
            let mut line = String::from("  ");
            push_padded(&mut line, &inert(&view.id, false), 11);
            push_padded(&mut line, &inert(&s.agent, false), 12);
            line.push_str(&inert(
                &format!("{} {}{}", s.method, s.destination(), s.path),
                false,
            ));
            if let Some(tool) = &s.tool {
                line.push_str(&format!("  tool {}", inert(tool, false)));
            }
            line.push_str(&format!(
                "  rule {}  {}s left\n",
                inert(&s.rules.join(","), false),
                view.seconds_left
            ));
            text.push_str(&line);
        }
    }
    if !grants.is_empty() {
        text.push_str("live grants:\n");
        for grant in grants {
            let s = &grant.summary;
            let mut line = String::from("  ");
            push_padded(&mut line, &inert(&grant.id, false), 11);
            push_padded(&mut line, &inert(&s.agent, false), 12);
            line.push_str(&inert(
                &format!("{} {}{}", s.method, s.destination(), s.path),
                false,
            ));
            if let Some(tool) = &s.tool {
                line.push_str(&format!("  tool {}", inert(tool, false)));
            }
            line.push_str(&format!(
                "  by {}  used {}  {}s left\n",
                inert(&grant.approver, false),
                grant.used,
                grant.seconds_left
            ));
            text.push_str(&line);
        }
    }
    text
}

/// What `watch` shows about one held request.
fn prompt_text(view: &PendingView, grant_for: Duration) -> String {
    let s = &view.summary;
    let mut text = format!(
        "\nApproval {} ({} s left)\n",
        inert(&view.id, false),
        view.seconds_left
    );
    let mut field = |name: &str, value: &str| {
        text.push_str(&format!("  {name:<12} {}\n", inert(value, false)));
    };
    field("Agent:", &s.agent);
    field("Destination:", &s.destination());
    field("Request:", &format!("{} {}", s.method, s.path));
    if !s.query_keys.is_empty() {
        field("Query keys:", &s.query_keys.join(", "));
    }
    if let Some(tool) = &s.tool {
        field("Tool:", tool);
    }
    if !s.aliases.is_empty() {
        field(
            "Secrets:",
            &format!("{} (substituted if approved)", s.aliases.join(", ")),
        );
    }
    field("Rule:", &s.rules.join(", "));
    if let Some(arguments) = &s.arguments {
        text.push_str("  Arguments:\n");
        for line in inert(arguments, true).lines() {
            text.push_str("    ");
            text.push_str(line);
            text.push('\n');
        }
    }
    text.push_str(&format!(
        "Approve? [y] once, [a] for {}, [N] deny: ",
        humantime::format_duration(grant_for)
    ));
    text
}

/// How long answers are ignored after the request on screen changed underneath the operator.
const SETTLE: Duration = Duration::from_secs(1);

/// What the operator typed.
enum Answer {
    Once,
    Grant,
    Deny,
}

fn parse_answer(line: &str) -> Option<Answer> {
    match line.trim().to_ascii_lowercase().as_str() {
        "y" | "yes" => Some(Answer::Once),
        "a" | "always" => Some(Answer::Grant),
        "" | "n" | "no" => Some(Answer::Deny),
        _ => None,
    }
}

/// `mint approvals watch`: one held request at a time, oldest first.
async fn watch(socket: &Path, grant_for: Duration) -> Result<(), ApprovalsError> {
    let tty = OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/tty")
        .map_err(ApprovalsError::NoTerminal)?;
    let mut screen = tty.try_clone()?;
    let lines = tty_lines(tty);
    let (first, mut client) = OperatorClient::send(socket, &Command::Watch).await?;
    if !first.ok {
        return Err(ApprovalsError::Refused(inert(
            first.error.as_deref().unwrap_or("refused"),
            false,
        )));
    }
    let mut queue: Vec<PendingView> = first.pending.unwrap_or_default();
    writeln!(
        screen,
        "Watching {} for requests waiting for approval (Ctrl-C leaves without deciding).",
        socket.display()
    )?;
    let mut lines = lines;
    // When each request's wait ends, as first seen: the prompt counts down from there.
    let mut deadlines: std::collections::HashMap<String, std::time::Instant> =
        std::collections::HashMap::new();
    // When the request on screen last changed underneath the operator (decided elsewhere,
    // withdrawn): a prompt shown within a second of it ignores answers until that second is
    // over, so a key meant for the old request does not decide the new one (an agent can
    // withdraw a request at the moment it chooses).
    let mut changed_at: Option<std::time::Instant> = None;
    loop {
        let now = std::time::Instant::now();
        for view in &queue {
            deadlines
                .entry(view.id.clone())
                .or_insert_with(|| now + Duration::from_secs(view.seconds_left));
        }
        deadlines.retain(|id, _| queue.iter().any(|view| &view.id == id));
        let Some(mut current) = queue.first().cloned() else {
            // Nothing to ask: wait for the broker.
            match next_event(&mut client).await? {
                Incoming::Event(event) => {
                    if let BookEvent::Pending(view) = *event {
                        queue.push(view);
                    }
                }
                Incoming::List(pending) => queue = pending,
                Incoming::Gone => {
                    writeln!(screen, "The broker closed the socket (it stopped).")?;
                    return Ok(());
                }
            }
            continue;
        };
        // An answer typed before this prompt was on the screen is not an answer to it: drop the
        // terminal's unread input and every line read before now.
        let _ = rustix::termios::tcflush(&screen, rustix::termios::QueueSelector::IFlush);
        if let Some(deadline) = deadlines.get(&current.id) {
            current.seconds_left = deadline.saturating_duration_since(now).as_secs();
        }
        screen.write_all(prompt_text(&current, grant_for).as_bytes())?;
        // Answers count from when the prompt is shown, or a moment after the previous request
        // changed underneath the operator if that was just now.
        let shown = std::time::Instant::now();
        let shown_at = changed_at
            .take()
            .map_or(shown, |changed| (changed + SETTLE).max(shown));
        if shown_at > shown {
            write!(
                screen,
                "(the request on screen just changed: answers typed in the next second are ignored) "
            )?;
        }
        screen.flush()?;
        // Ask until answered, or until the request stops waiting some other way.
        let answer = loop {
            tokio::select! {
                line = lines.recv() => match line {
                    // The terminal closed (Ctrl-D): leave without deciding.
                    None => return Ok(()),
                    // Typed before the prompt was shown (type-ahead), or while it settles: ignored.
                    Some((read_at, _)) if read_at < shown_at => {}
                    Some((_, line)) => match parse_answer(&line) {
                        Some(answer) => break Some(answer),
                        None => {
                            write!(screen, "Type y, a, n or Enter: ")?;
                            screen.flush()?;
                        }
                    },
                },
                incoming = next_event(&mut client) => match incoming? {
                    Incoming::Event(event) => match *event {
                        BookEvent::Pending(view) => queue.push(view),
                        BookEvent::Closed { id, how } => {
                            if id == current.id {
                                writeln!(screen, "\n{} is no longer waiting: {}", inert(&id, false), closed_text(how))?;
                                changed_at = Some(std::time::Instant::now());
                                break None;
                            }
                            queue.retain(|view| view.id != id);
                        }
                        BookEvent::Granted(_) | BookEvent::Revoked { .. } => {}
                    },
                    Incoming::List(pending) => {
                        let still = pending.iter().any(|view| view.id == current.id);
                        queue = pending;
                        if !still {
                            writeln!(screen, "\n{} is no longer waiting", inert(&current.id, false))?;
                            changed_at = Some(std::time::Instant::now());
                            break None;
                        }
                    }
                    Incoming::Gone => {
                        writeln!(screen, "\nThe broker closed the socket (it stopped).")?;
                        return Ok(());
                    }
                },
            }
        };
        queue.retain(|view| view.id != current.id);
        let Some(answer) = answer else { continue };
        let command = match answer {
            Answer::Once => Command::Approve {
                id: current.id.clone(),
                grant_seconds: None,
            },
            Answer::Grant => Command::Approve {
                id: current.id.clone(),
                grant_seconds: Some(grant_for.as_secs().max(1)),
            },
            Answer::Deny => Command::Deny {
                id: current.id.clone(),
            },
        };
        match ask(socket, &command).await {
            Ok(reply) => match (&command, reply.grant) {
                (Command::Deny { .. }, _) => {
                    writeln!(screen, "denied {}", inert(&current.id, false))?
                }
                (_, Some(grant)) => writeln!(
                    screen,
                    "approved {}; grant {} for {}",
                    inert(&current.id, false),
                    inert(&grant, false),
                    humantime::format_duration(grant_for)
                )?,
                _ => writeln!(screen, "approved {}", inert(&current.id, false))?,
            },
            Err(ApprovalsError::Refused(why)) => writeln!(screen, "not decided: {why}")?,
            Err(error) => return Err(error),
        }
    }
}

fn closed_text(how: Closed) -> &'static str {
    match how {
        Closed::Approved => "approved elsewhere",
        Closed::Denied => "denied elsewhere",
        Closed::TimedOut => "timed out (refused)",
        Closed::Withdrawn => "the agent went away",
        Closed::ShuttingDown => "the broker is shutting down",
    }
}

/// What the broker wrote next on a watch.
enum Incoming {
    Event(Box<BookEvent>),
    List(Vec<PendingView>),
    Gone,
}

async fn next_event(client: &mut OperatorClient) -> Result<Incoming, ApprovalsError> {
    loop {
        let Some(line) = client.next_line().await? else {
            return Ok(Incoming::Gone);
        };
        if let Ok(event) = serde_json::from_str::<BookEvent>(&line) {
            return Ok(Incoming::Event(Box::new(event)));
        }
        if let Ok(reply) = serde_json::from_str::<Reply>(&line) {
            return Ok(Incoming::List(reply.pending.unwrap_or_default()));
        }
        // A line of a newer broker this client does not know: skipped.
    }
}

/// The terminal's lines, read on a thread of their own (a blocking read), as a channel; each
/// with when it was read, so that a line typed before a prompt never answers it.
fn tty_lines(tty: File) -> tokio::sync::mpsc::UnboundedReceiver<(std::time::Instant, String)> {
    let (send, receive) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in BufReader::new(tty).lines() {
            let Ok(line) = line else { break };
            if send.send((std::time::Instant::now(), line)).is_err() {
                break;
            }
        }
    });
    receive
}

/// The socket `mint approvals` talks to for `paths`.
pub fn socket_path(paths: &Paths) -> PathBuf {
    paths.home.join(SOCKET_NAME)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::approval::Summary;

    fn view(path: &str, arguments: Option<&str>) -> PendingView {
        PendingView {
            id: "ap-abcdefgh".to_owned(),
            summary: Summary {
                request_id: "r-1".to_owned(),
                agent: "claude".to_owned(),
                rules: vec!["ask-writes".to_owned()],
                method: "POST".to_owned(),
                scheme: "https".to_owned(),
                host: "api.github.com".to_owned(),
                port: 443,
                path: path.to_owned(),
                query_keys: vec![],
                tool: Some("create_issue".to_owned()),
                arguments: arguments.map(str::to_owned),
                aliases: vec!["github".to_owned()],
            },
            seconds_left: 100,
        }
    }

    #[test]
    fn the_prompt_names_destination_tool_arguments_and_rule() {
        let text = prompt_text(
            &view("/repos/o/r/issues", Some("{\n  \"title\": \"x\"\n}")),
            Duration::from_secs(600),
        );
        for expected in [
            "ap-abcdefgh",
            "https://api.github.com:443",
            "POST /repos/o/r/issues",
            "create_issue",
            "\"title\": \"x\"",
            "ask-writes",
            "github (substituted if approved)",
            "[a] for 10m",
        ] {
            assert!(text.contains(expected), "{expected} missing from {text}");
        }
    }

    #[test]
    fn the_prompt_shows_escapes_inert_even_if_the_broker_did_not() {
        let text = prompt_text(
            &view("/x\u{1b}]52;c;cHduZWQ=\u{7}", Some("{\"t\": \"\u{9b}2J\"}")),
            Duration::from_secs(60),
        );
        assert!(
            !text.chars().any(|c| c.is_control() && c != '\n'),
            "{text:?}"
        );
        assert!(text.contains("\\u{1b}]52"), "{text}");
        assert!(text.contains("\\u{9b}2J"), "{text}");
    }

    #[test]
    fn enter_and_n_deny_y_approves_a_grants() {
        assert!(matches!(parse_answer(""), Some(Answer::Deny)));
        assert!(matches!(parse_answer("n\r"), Some(Answer::Deny)));
        assert!(matches!(parse_answer("Y"), Some(Answer::Once)));
        assert!(matches!(parse_answer("a"), Some(Answer::Grant)));
        assert!(parse_answer("maybe").is_none());
    }
}
