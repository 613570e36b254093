//! `mint env [--agent NAME] [--alias A]... [--ttl D] [--proxy URL] [--shell sh|fish]`: prints the
//! settings of `mint run` as lines for a shell (`eval "$(mint env)"`), a container or a systemd
//! unit, with a capability it issues for them.
//!
//! The token appears once, inside the proxy URL of the printed lines, and nowhere else: what was
//! issued goes to stderr without it. Nothing revokes this capability when the shell ends: its TTL
//! does, or `mint cap revoke ID`. The bundle is written to `$MINT_HOME/ca-bundle.pem` (0644,
//! replaced atomically each time); the CA variables name the CA certificate itself. The broker
//! need not be running: these lines may be written before it starts. When one answers at the
//! proxy URL, `mint env` waits (at most 3 s) until it accepts the new capability, so the lines
//! work as soon as they are printed.
//!
//! A capability is issued only for an output that can be written (fd 1 open for writing), and
//! taken back when writing or flushing the lines fails (a closed pipe: Rust ignores SIGPIPE, so
//! the write fails with EPIPE): nobody holds a live capability that was never printed.
//!
//! `mint env` cannot change who the agent runs as: unlike `mint run --user`, the lines go to
//! whoever evaluates them, with the rights they have (see docs/agents.md, "Running the agent as
//! another user").

use std::io::Write;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use clap::{Args, ValueEnum};

use crate::cli::agent_env::{
    AgentEnvError, AgentVariables, DEFAULT_AGENT, ProxyTarget, write_bundle,
};
use crate::cli::alias::declared_aliases;
use crate::cli::cap::{CapIssueArgs, issue_capability};
use crate::config::ca_files;
use crate::config::env::Paths;
use crate::config::placeholder_key::shaped_placeholders;

/// Arguments of `mint env`.
#[derive(Debug, Args)]
pub struct EnvArgs {
    /// The agent's name in the capability (the principal policy rules match).
    #[arg(long, value_name = "NAME", default_value = DEFAULT_AGENT)]
    pub agent: String,
    /// Limit the capability to this alias (and print only its `env` variables). Repeat for more.
    #[arg(long = "alias", value_name = "ALIAS")]
    pub aliases: Vec<String>,
    /// How long the capability lives: s, m, h or d. Nothing revokes it earlier but `mint cap
    /// revoke`.
    #[arg(long, value_name = "TTL", default_value = "24h")]
    pub ttl: String,
    /// The broker's address [default: MINT_PROXY_URL, else http://127.0.0.1:8700]. Loopback
    /// only, unless --remote-proxy.
    #[arg(long, value_name = "URL")]
    pub proxy: Option<String>,
    /// Allow a proxy URL that is not on this machine: the capability token then travels to it,
    /// in clear text over plain HTTP.
    #[arg(long)]
    pub remote_proxy: bool,
    /// The syntax of the lines: `sh` (`export NAME='VALUE'`, also bash and zsh), `fish`, or
    /// `env` (`NAME=VALUE`, for `docker run --env-file` and systemd's `EnvironmentFile=`).
    #[arg(long, value_name = "SHELL", value_enum, default_value_t = Shell::Sh)]
    pub shell: Shell,
}

/// The syntax `mint env` prints.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Shell {
    /// POSIX shells: `export NAME='VALUE'`.
    Sh,
    /// fish: `set -gx NAME 'VALUE'`.
    Fish,
    /// Plain `NAME=VALUE` lines, unquoted.
    Env,
}

/// How long `mint env` waits for a running broker to accept the capability.
const ACCEPT_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

/// The file `mint env` writes the bundle to, in the Mint home.
pub const BUNDLE_FILE: &str = "ca-bundle.pem";

/// Why `mint env` printed nothing.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EnvError {
    /// The capability, the CA, the alias file or the bundle.
    #[error(transparent)]
    Setup(Box<AgentEnvError>),
    /// A path holds a character the chosen syntax cannot carry.
    #[error("the path `{}` holds a newline or a quote; it cannot be written as an `env` line", path.display())]
    Unprintable {
        /// The path.
        path: PathBuf,
    },
    /// Stdout is closed or not open for writing: nothing was issued.
    #[error(
        "stdout is {problem}: nothing was issued, as nobody could read the lines; run `mint \
         env` with its output going somewhere (`eval \"$(mint env)\"`, `> file`)"
    )]
    NoOutput {
        /// `closed`, `open for reading only`.
        problem: &'static str,
    },
    /// The lines could not be written (the capability was revoked again).
    #[error("cannot write the output (the capability issued for it was revoked)")]
    Output(#[source] std::io::Error),
    /// The lines could not be written, and the capability could not be revoked either.
    #[error(
        "cannot write the output ({output}), and the capability `{id}` issued for it was NOT \
         revoked: revoke it with `mint cap revoke {id}`"
    )]
    OutputNotRevoked {
        /// The capability's id.
        id: String,
        /// The write error, in words.
        output: std::io::Error,
        /// Why it was not revoked.
        #[source]
        source: Box<crate::cli::cap::CapCommandError>,
    },
}

/// Fails unless file descriptor 1 is open for writing to something other than `/dev/null`.
/// A program started with fd 1 closed (`mint env >&-`) finds `/dev/null` there: Rust's runtime
/// opens it over a closed standard descriptor before `main`, and would otherwise report every
/// write as done, exit 0 and leave a live capability nobody saw. Writing the token to
/// `/dev/null` on purpose is as useless, so both are refused.
pub fn require_writable_stdout() -> Result<(), EnvError> {
    let stdout = std::io::stdout();
    let fd = stdout.as_fd();
    if rustix::io::fcntl_getfd(fd).is_err() {
        return Err(EnvError::NoOutput { problem: "closed" });
    }
    let flags =
        rustix::fs::fcntl_getfl(fd).map_err(|_| EnvError::NoOutput { problem: "closed" })?;
    if (flags & rustix::fs::OFlags::RWMODE) == rustix::fs::OFlags::RDONLY {
        return Err(EnvError::NoOutput {
            problem: "open for reading only",
        });
    }
    let is_null = |stat: &rustix::fs::Stat| {
        rustix::fs::FileType::from_raw_mode(stat.st_mode) == rustix::fs::FileType::CharacterDevice
            && rustix::fs::stat("/dev/null").is_ok_and(|null| null.st_rdev == stat.st_rdev)
    };
    if rustix::fs::fstat(fd).is_ok_and(|stat| is_null(&stat)) {
        return Err(EnvError::NoOutput {
            problem: "closed or /dev/null",
        });
    }
    Ok(())
}

impl From<AgentEnvError> for EnvError {
    fn from(error: AgentEnvError) -> Self {
        EnvError::Setup(Box::new(error))
    }
}

/// Issues the capability and prints the lines to `out`; what was issued goes to `notes`.
pub fn run(
    args: EnvArgs,
    paths: &Paths,
    out: &mut dyn Write,
    notes: &mut dyn Write,
) -> Result<(), EnvError> {
    let target = ProxyTarget::resolve(args.proxy.as_deref())?;
    target.require_local(args.remote_proxy)?;
    let cert = ca_files::cert_pem(paths, SystemTime::now()).map_err(AgentEnvError::from)?;
    let aliases = declared_aliases(&paths.aliases).map_err(AgentEnvError::from)?;
    let shaped =
        shaped_placeholders(&paths.placeholder_key, &aliases).map_err(AgentEnvError::from)?;
    let bundle = absolute(&paths.home.join(BUNDLE_FILE));
    let ca = absolute(&paths.ca_cert);
    if args.shell == Shell::Env {
        for path in [&bundle, &ca] {
            if path.to_string_lossy().contains(['\n', '\r', '"', '\'']) {
                return Err(EnvError::Unprintable { path: path.clone() });
            }
        }
    }
    write_bundle(&bundle, &cert)?;

    let issued = issue_capability(
        paths,
        CapIssueArgs {
            agent: args.agent,
            ttl: args.ttl,
            aliases: args.aliases.clone(),
        },
        SystemTime::now(),
    )
    .map_err(AgentEnvError::from)?;
    // A broker that runs already gets to see the capability before the lines are used (it looks
    // at the file every 250 ms); none running is fine: the lines may be meant for later.
    let mut warning = None;
    if target.check_broker().is_ok() {
        let deadline = std::time::Instant::now() + ACCEPT_WAIT;
        while !target.accepts(&issued.token).unwrap_or(true) {
            if std::time::Instant::now() > deadline {
                warning = Some(format!(
                    "warning: the broker at {} does not accept this capability: it serves another \
                     MINT_HOME\n",
                    target.url
                ));
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }
    let url = target.url_for(&issued.agent, &issued.token);
    let vars = AgentVariables::new(&url, &bundle, &ca, &aliases, &shaped, &args.aliases);
    let mut text = zeroize::Zeroizing::new(String::with_capacity(2048));
    text.push_str(&format!(
        "# Mint: agent `{}`, capability {} (expires {}); revoke: mint cap revoke {}\n",
        issued.agent, issued.id, issued.expires, issued.id
    ));
    if args.shell != Shell::Env {
        for name in vars.removed() {
            text.push_str(&match args.shell {
                Shell::Fish => format!("set -e {name}\n"),
                Shell::Sh | Shell::Env => format!("unset {name}\n"),
            });
        }
    }
    for (name, value) in vars.iter() {
        text.push_str(&line(args.shell, name, value));
    }
    let written = out.write_all(text.as_bytes()).and_then(|()| out.flush());
    if let Err(error) = written {
        // Nobody got the token: take the capability back.
        return match crate::cli::cap::revoke_capability(&paths.capabilities, &issued.id) {
            Ok(_) => Err(EnvError::Output(error)),
            Err(source) => Err(EnvError::OutputNotRevoked {
                id: issued.id.clone(),
                output: error,
                source: Box::new(source),
            }),
        };
    }
    let note = format!(
        "Issued capability {} for agent `{}`, expires {}, aliases: {}. The token in the proxy \
         URL above is shown once; revoke it with `mint cap revoke {}`. Bundle: {}.\n",
        issued.id,
        issued.agent,
        issued.expires,
        issued.aliases,
        issued.id,
        bundle.display()
    );
    let _ = notes.write_all(note.as_bytes());
    if let Some(warning) = warning {
        let _ = notes.write_all(warning.as_bytes());
    }
    Ok(())
}

/// One assignment in `shell`'s syntax.
fn line(shell: Shell, name: &str, value: &str) -> String {
    match shell {
        Shell::Sh => format!("export {name}='{}'\n", value.replace('\'', "'\\''")),
        Shell::Fish => format!(
            "set -gx {name} '{}'\n",
            value.replace('\\', "\\\\").replace('\'', "\\'")
        ),
        Shell::Env => format!("{name}={value}\n"),
    }
}

/// `path` made absolute against the working directory, so the lines work from anywhere.
fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_quote_for_their_shell() {
        assert_eq!(line(Shell::Sh, "A", "it's"), "export A='it'\\''s'\n");
        assert_eq!(
            line(Shell::Fish, "A", "it's \\"),
            "set -gx A 'it\\'s \\\\'\n"
        );
        assert_eq!(line(Shell::Env, "A", "{{mint:x}}"), "A={{mint:x}}\n");
    }
}
