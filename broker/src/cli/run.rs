//! `mint run [--agent NAME] [--alias A]... [--ttl D] [--proxy URL] -- CMD [ARGS...]`: runs an
//! unmodified agent behind Mint.
//!
//! Checks that a broker answers at the proxy URL, issues a capability for the child (the same
//! checks and file as `mint cap issue`), waits until the broker accepts it, then executes CMD
//! directly (no shell) with the environment of `agent_env`: proxy and CA variables overwritten,
//! each alias's `env` names set to its placeholder. The token reaches the child through its
//! environment only: never an argument, an output line or a log line of Mint's.
//!
//! `--user NAME` (root only) runs CMD as that user, with its groups, through `mint exec-as`
//! (see `run/user.rs`): the agent then cannot read Mint's home, its CA key or its keyring, nor
//! issue itself a capability. Run as root without it, `mint run` says on stderr that the agent
//! runs as root. Whoever it runs as, the child inherits no `MINT_*` variable.
//!
//! Every exit path that this process lives through revokes the capability: the child's exit,
//! its death by a signal, a failure to start it, and SIGINT, SIGTERM or SIGHUP sent to `mint run`
//! (forwarded to the child, whose exit is then awaited). A SIGKILL cannot be caught: the
//! capability's TTL bounds it. The CA files live in a private temporary directory removed at
//! exit. Mint's exit status is the child's (128+N for a death by signal N).

use std::ffi::OsString;
use std::io::{self, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use clap::Args;
use rustix::process::{Pid, Signal};
use tokio::signal::unix::{SignalKind, signal};

use crate::capability::IssuedToken;
use crate::cli::agent_env::{
    AgentEnvError, AgentVariables, DEFAULT_AGENT, ProxyTarget, write_bundle,
};
use crate::cli::alias::declared_aliases;
use crate::cli::cap::{CapIssueArgs, issue_capability, revoke_capability};
use crate::config::ca_files;
use crate::config::env::Paths;
use crate::config::placeholder_key::shaped_placeholders;
use crate::config::secure_file::{PUBLIC_FILE_MODE, create_private_dir, write_atomic_mode};

pub mod user;

use user::{AgentUser, UserError};

/// Arguments of `mint run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The agent's name in the capability (the principal policy rules match).
    #[arg(long, value_name = "NAME", default_value = DEFAULT_AGENT)]
    pub agent: String,
    /// Limit the capability to this alias (and set only its `env` variables). Repeat for more;
    /// without it, every alias the policy allows.
    #[arg(long = "alias", value_name = "ALIAS")]
    pub aliases: Vec<String>,
    /// How long the capability lives if `mint run` cannot revoke it (killed with SIGKILL): s, m,
    /// h or d. It is revoked when the command exits.
    #[arg(long, value_name = "TTL", default_value = DEFAULT_TTL)]
    pub ttl: String,
    /// The broker's address [default: MINT_PROXY_URL, else http://127.0.0.1:8700]. Loopback
    /// only, unless --remote-proxy.
    #[arg(long, value_name = "URL")]
    pub proxy: Option<String>,
    /// Allow a proxy URL that is not on this machine: the capability token then travels to it,
    /// in clear text over plain HTTP.
    #[arg(long)]
    pub remote_proxy: bool,
    /// Run the command as this user (a name or a uid), with its groups, HOME, USER and LOGNAME:
    /// it then cannot read Mint's home or keyring. Needs root.
    #[arg(long, value_name = "USER")]
    pub user: Option<String>,
    /// The command and its arguments, executed directly (no shell).
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "CMD",
        value_parser = clap::value_parser!(OsString)
    )]
    pub command: Vec<OsString>,
}

/// Why `mint run` could not run the command. Never holds a token.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// The broker, the capability, the CA or the alias file.
    #[error(transparent)]
    Setup(Box<AgentEnvError>),
    /// The command does not exist.
    #[error("cannot run `{}`: no such command", program.to_string_lossy())]
    NotFound {
        /// The program as given.
        program: OsString,
    },
    /// The command could not be executed.
    #[error("cannot run `{}`", program.to_string_lossy())]
    Spawn {
        /// The program as given.
        program: OsString,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The temporary directory for the CA files could not be made.
    #[error("cannot create the temporary directory `{}`", path.display())]
    TempDir {
        /// The directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: crate::config::secure_file::SecureFileError,
    },
    /// The signal handlers or the event loop could not be set up.
    #[error("cannot watch signals")]
    Signals(#[source] io::Error),
    /// Waiting for the child failed.
    #[error("cannot wait for the command")]
    Wait(#[source] io::Error),
    /// `--user` was refused, or the switch to that user failed.
    #[error(transparent)]
    User(#[from] UserError),
}

impl From<AgentEnvError> for RunError {
    fn from(error: AgentEnvError) -> Self {
        RunError::Setup(Box::new(error))
    }
}

// === impl RunError ===

impl RunError {
    /// The exit code for this error, as shells use them: 127 for a command that does not exist,
    /// 126 for one that cannot be executed; `None` for Mint's own errors (exit 2).
    pub fn exit_code(&self) -> Option<u8> {
        match self {
            RunError::NotFound { .. } => Some(127),
            RunError::Spawn { .. } => Some(126),
            RunError::Setup(_)
            | RunError::TempDir { .. }
            | RunError::Signals(_)
            | RunError::Wait(_)
            | RunError::User(_) => None,
        }
    }
}

/// Runs the command behind Mint; returns its exit code. `notes` (stderr) gets what a person must
/// know that is not an error: a capability that could not be revoked.
pub fn run(args: RunArgs, paths: &Paths, notes: &mut dyn Write) -> Result<u8, RunError> {
    // Who the agent runs as is settled first: a refused `--user` costs nothing.
    let agent_user = args.user.as_deref().map(AgentUser::resolve).transpose()?;
    let target = ProxyTarget::resolve(args.proxy.as_deref())?;
    target.require_local(args.remote_proxy)?;
    target.check_broker()?;

    // The CA files first: nothing is issued for a run that cannot trust Mint's CA.
    let cert = ca_files::cert_pem(paths, SystemTime::now()).map_err(AgentEnvError::from)?;
    let aliases = declared_aliases(&paths.aliases).map_err(AgentEnvError::from)?;
    let shaped =
        shaped_placeholders(&paths.placeholder_key, &aliases).map_err(AgentEnvError::from)?;
    let dir = PrivateDir::create()?;
    let bundle = dir.path.join("ca-bundle.pem");
    let ca = dir.path.join("ca.pem");
    write_bundle(&bundle, &cert)?;
    write_atomic_mode(&ca, cert.as_bytes(), PUBLIC_FILE_MODE).map_err(AgentEnvError::from)?;
    // Given away only once written: no process of that user could meddle with the files.
    if let Some(agent_user) = &agent_user {
        agent_user.take(&dir.path)?;
    }

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(RunError::Signals)?;
    // Signals are caught from here on: one arriving while the capability is issued is seen
    // below, before the command starts.
    let mut signals = runtime.block_on(async { Signals::new() })?;

    let issued = issue_capability(
        paths,
        CapIssueArgs {
            agent: args.agent.clone(),
            ttl: args.ttl,
            aliases: args.aliases.clone(),
        },
        SystemTime::now(),
    )
    .map_err(AgentEnvError::from)?;
    let live = LiveCapability {
        file: &paths.capabilities,
        id: issued.id.clone(),
        expires: issued.expires.clone(),
        revoked: false,
    };
    tracing::debug!(capability = %issued.id, agent = %issued.agent, "Capability issued for mint run");

    let outcome: Result<Outcome, RunError> = runtime.block_on(async {
        if let Some(signal) = wait_accepted(&target, &issued.token, &live, &mut signals).await? {
            return Ok(Outcome::Interrupted(signal));
        }
        let mut command = {
            let url = target.url_for(&issued.agent, &issued.token);
            let vars = AgentVariables::new(&url, &bundle, &ca, &aliases, &shaped, &args.aliases);
            child_command(&args.command, &vars, agent_user.as_ref())?
        };
        drop(issued);
        if let Some(signal) = signals.pending().await {
            return Ok(Outcome::Interrupted(signal));
        }
        if agent_user.is_none() && rustix::process::geteuid().is_root() {
            let _ = writeln!(
                notes,
                "mint: warning: the agent runs as root: it can read Mint's secrets, CA key and \
                 capabilities and issue itself any capability; run it as another user with \
                 --user NAME"
            );
        }
        let program = args.command.first().cloned().unwrap_or_default();
        let mut child = command.spawn().map_err(|source| {
            if source.kind() == io::ErrorKind::NotFound {
                RunError::NotFound { program }
            } else {
                RunError::Spawn { program, source }
            }
        })?;
        // The command's copy of the environment (the token) goes now.
        drop(command);
        loop {
            tokio::select! {
                status = child.wait() => return Ok(Outcome::Exited(status.map_err(RunError::Wait)?)),
                signal = signals.recv() => forward(&child, signal),
            }
        }
    });
    // Revoke on every way out: the child's exit, a signal before it started, an error.
    if let Err(error) = live.revoke() {
        let _ = writeln!(notes, "mint: {error}");
    }
    drop(dir);
    match outcome? {
        Outcome::Exited(status) => Ok(exit_code(status)),
        Outcome::Interrupted(signal) => Ok(signal_code(signal)),
    }
}

/// How long a capability of `mint run` lives when it cannot be revoked: a working day of an
/// agent session, and gone the same day after a SIGKILL.
pub const DEFAULT_TTL: &str = "12h";

/// How long `mint run` waits for the broker to accept the new capability (it looks at the
/// capabilities file every 250 ms).
const ACCEPT_WAIT: Duration = Duration::from_secs(3);

/// How the run ended.
enum Outcome {
    /// The child exited.
    Exited(std::process::ExitStatus),
    /// A signal came before the child was started: it never was.
    Interrupted(Signal),
}

/// The capability issued for the child, revoked exactly once: by [`LiveCapability::revoke`], or
/// on drop (a panic or an early return).
struct LiveCapability<'a> {
    file: &'a Path,
    id: String,
    expires: String,
    revoked: bool,
}

// === impl LiveCapability ===

impl LiveCapability<'_> {
    fn revoke(mut self) -> Result<(), String> {
        self.revoked = true;
        match revoke_capability(self.file, &self.id) {
            Ok(_) => {
                tracing::debug!(capability = %self.id, "Capability of mint run revoked");
                Ok(())
            }
            Err(error) => Err(format!(
                "capability `{}` was NOT revoked and is accepted until {}: {error}; revoke it \
                 with `mint cap revoke {}`",
                self.id, self.expires, self.id
            )),
        }
    }
}

impl Drop for LiveCapability<'_> {
    fn drop(&mut self) {
        if !self.revoked {
            let _ = revoke_capability(self.file, &self.id);
        }
    }
}

/// A directory only this user can enter (0700), removed with what it holds when dropped.
struct PrivateDir {
    path: PathBuf,
}

// === impl PrivateDir ===

impl PrivateDir {
    fn create() -> Result<PrivateDir, RunError> {
        let mut random = [0u8; 8];
        let path = std::env::temp_dir();
        let path = match getrandom::fill(&mut random) {
            Ok(()) => path.join(format!(
                "mint-run-{}-{}",
                std::process::id(),
                hex::encode(random)
            )),
            Err(_) => path.join(format!("mint-run-{}", std::process::id())),
        };
        create_private_dir(&path).map_err(|source| RunError::TempDir {
            path: path.clone(),
            source,
        })?;
        Ok(PrivateDir { path })
    }
}

impl Drop for PrivateDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// The signals forwarded to the child: every one whose default action would end `mint run`
/// without revoking (SIGKILL and SIGSTOP aside, which cannot be caught).
struct Signals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
    hangup: tokio::signal::unix::Signal,
    quit: tokio::signal::unix::Signal,
    user1: tokio::signal::unix::Signal,
    user2: tokio::signal::unix::Signal,
    alarm: tokio::signal::unix::Signal,
}

// === impl Signals ===

impl Signals {
    /// Catches SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2 and SIGALRM from now on (must
    /// run inside the runtime).
    fn new() -> Result<Signals, RunError> {
        let catch = |kind| signal(kind).map_err(RunError::Signals);
        Ok(Signals {
            interrupt: catch(SignalKind::interrupt())?,
            terminate: catch(SignalKind::terminate())?,
            hangup: catch(SignalKind::hangup())?,
            quit: catch(SignalKind::quit())?,
            user1: catch(SignalKind::user_defined1())?,
            user2: catch(SignalKind::user_defined2())?,
            alarm: catch(SignalKind::alarm())?,
        })
    }

    /// The next signal.
    async fn recv(&mut self) -> Signal {
        tokio::select! {
            _ = self.interrupt.recv() => Signal::INT,
            _ = self.terminate.recv() => Signal::TERM,
            _ = self.hangup.recv() => Signal::HUP,
            _ = self.quit.recv() => Signal::QUIT,
            _ = self.user1.recv() => Signal::USR1,
            _ = self.user2.recv() => Signal::USR2,
            _ = self.alarm.recv() => Signal::ALARM,
        }
    }

    /// A signal that has arrived already, without waiting.
    async fn pending(&mut self) -> Option<Signal> {
        tokio::select! {
            biased;
            signal = self.recv() => Some(signal),
            () = std::future::ready(()) => None,
        }
    }
}

/// Waits until the broker accepts `token`; a signal meanwhile ends the wait (`Some`).
async fn wait_accepted(
    target: &ProxyTarget,
    token: &IssuedToken,
    live: &LiveCapability<'_>,
    signals: &mut Signals,
) -> Result<Option<Signal>, RunError> {
    let deadline = Instant::now() + ACCEPT_WAIT;
    loop {
        if let Some(signal) = signals.pending().await {
            return Ok(Some(signal));
        }
        if target.accepts(token)? {
            return Ok(None);
        }
        if Instant::now() > deadline {
            return Err(AgentEnvError::NotAccepted {
                url: target.url.clone(),
                file: live.file.to_path_buf(),
            }
            .into());
        }
        tokio::select! {
            signal = signals.recv() => return Ok(Some(signal)),
            () = tokio::time::sleep(Duration::from_millis(100)) => {}
        }
    }
}

/// CMD ARGS with the agent's variables set over the inherited environment, and those it must
/// not inherit removed. An inherited variable spelled in another letter case than one of those
/// (`Https_Proxy`, `requests_ca_bundle`, `All_Proxy`) is removed too: some clients fold names
/// (Python's `urllib` reads proxies case-insensitively), and it would outvote or sidestep Mint.
/// Every `MINT_*` variable (any case) goes too: the agent has no business with Mint's home,
/// keyring backend or broker address. With `user`, CMD runs through `mint exec-as` as that
/// user, with its HOME, USER and LOGNAME, and without the operator's XDG base directories.
fn child_command(
    command: &[OsString],
    vars: &AgentVariables,
    user: Option<&AgentUser>,
) -> Result<tokio::process::Command, RunError> {
    let mut child = match user {
        Some(user) => {
            let (mint, args) = user.wrap(command)?;
            let mut child = tokio::process::Command::new(mint);
            child.args(args);
            child
        }
        None => {
            let (program, args) = command.split_first().map_or_else(
                || (OsString::new(), &[][..]),
                |(program, args)| (program.clone(), args),
            );
            let mut child = tokio::process::Command::new(program);
            child.args(args);
            child
        }
    };
    for name in vars.removed() {
        child.env_remove(name);
    }
    let mut managed: Vec<String> = vars
        .iter()
        .map(|(name, _)| name)
        .chain(vars.removed())
        .map(str::to_ascii_uppercase)
        .collect();
    if user.is_some() {
        managed.extend(OPERATOR_VARIABLES.iter().map(|name| (*name).to_owned()));
    }
    for (name, _) in std::env::vars_os() {
        let removed = name.to_str().is_some_and(|name| {
            let upper = name.to_ascii_uppercase();
            upper.starts_with(MINT_PREFIX) || managed.contains(&upper)
        });
        if removed {
            child.env_remove(&name);
        }
    }
    for (name, value) in vars.iter() {
        child.env(name, value);
    }
    if let Some(user) = user {
        child.env("HOME", &user.home);
        child.env("USER", &user.name);
        child.env("LOGNAME", &user.name);
    }
    Ok(child)
}

/// The prefix of Mint's own variables, none of which the child inherits.
const MINT_PREFIX: &str = "MINT_";

/// The operator's login variables a child of `--user` does not inherit: the ones set anew
/// (HOME, USER, LOGNAME) and the XDG base directories, which point into the operator's home.
const OPERATOR_VARIABLES: [&str; 8] = [
    "HOME",
    "USER",
    "LOGNAME",
    "XDG_CONFIG_HOME",
    "XDG_DATA_HOME",
    "XDG_CACHE_HOME",
    "XDG_STATE_HOME",
    "XDG_RUNTIME_DIR",
];

/// Sends `signal` on to the child, unless it is a SIGINT or SIGQUIT the terminal already sent
/// it: Ctrl-C and Ctrl-\\ reach the whole foreground process group, the child included, and a
/// second SIGINT would read as a second Ctrl-C (which makes some agents quit).
fn forward(child: &tokio::process::Child, signal: Signal) {
    if (signal == Signal::INT || signal == Signal::QUIT) && terminal_delivered() {
        return;
    }
    // `id()` is `None` once the child was reaped, so its pid cannot have been reused.
    if let Some(pid) = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .and_then(Pid::from_raw)
    {
        let _ = rustix::process::kill_process(pid, signal);
    }
}

/// Whether this process's group is the foreground group of the terminal on stdin.
fn terminal_delivered() -> bool {
    rustix::termios::tcgetpgrp(io::stdin()).is_ok_and(|group| group == rustix::process::getpgrp())
}

/// The child's exit code, or 128+N for a death by signal N.
fn exit_code(status: std::process::ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code & 0xff).unwrap_or(1),
        (None, Some(signal)) => u8::try_from((128 + signal) & 0xff).unwrap_or(1),
        (None, None) => 1,
    }
}

/// 128+N for signal N.
fn signal_code(signal: Signal) -> u8 {
    u8::try_from((128 + signal.as_raw()) & 0xff).unwrap_or(1)
}
