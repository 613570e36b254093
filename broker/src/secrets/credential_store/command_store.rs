//! The `command` source: the standard output of a program the operator names in the alias file
//! (`gh auth token`, `op read op://…`, `gcloud auth print-access-token`), so a credential that a
//! tool already manages reaches Mint without being copied anywhere.
//!
//! Only the operator's alias file names a command (it is owner-only and mode-checked like every
//! declaration file, `secure_file`); an agent cannot add one. The program runs directly, never
//! through a shell: its arguments are the YAML list as written. It runs with stdin from
//! `/dev/null`, `/` as its working directory, in a process group of its own that is killed when
//! its timeout runs out, and with a minimal environment ([`PASSED_VARIABLES`]). Its standard
//! error goes to `/dev/null`: tools print hints and sometimes tokens there, and Mint never logs
//! it. At most [`MAX_VALUE_BYTES`] of standard output are read (one trailing newline, `\n` or
//! `\r\n`, is dropped); more is refused and the program killed. Errors name the program and what
//! happened (exit status, timeout), never what it printed.

use std::ffi::OsString;
use std::io::{self, Read};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use mint_policy::aliases::CommandSource;
use zeroize::Zeroizing;

use super::{CredentialValue, MAX_VALUE_BYTES, StoreError, ValueProblem};

/// The variables of the broker's environment a command sees (when set); nothing else is passed.
/// `HOME` and the XDG directories let CLIs find their own login (`gh`, `gcloud`, `aws`); `PATH`
/// finds the program and the helpers it runs.
pub const PASSED_VARIABLES: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "LANG",
    "LC_ALL",
    "TZ",
    "TMPDIR",
    "XDG_CONFIG_HOME",
    "XDG_CACHE_HOME",
    "XDG_DATA_HOME",
    "XDG_RUNTIME_DIR",
];

/// `PATH` when the broker has none.
const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// How often a running command is checked for having exited, once its output is read.
const WAIT_POLL: Duration = Duration::from_millis(5);

/// Runs command sources.
#[derive(Clone, Debug)]
pub struct CommandStore {
    /// The environment every command gets: names and values of [`PASSED_VARIABLES`]. `Debug`
    /// shows it (paths and a user name, no secret: secrets are never passed this way).
    env: Vec<(String, OsString)>,
}

/// Why a command gave no value. Names the program, never its output.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CommandProblem {
    /// The program could not be started.
    #[error("cannot run `{program}`: {kind}")]
    Spawn {
        /// The program, as listed.
        program: String,
        /// Why, by kind (not found, permission denied).
        kind: io::ErrorKind,
    },
    /// The program ran longer than its timeout and was killed.
    #[error("`{program}` did not finish within {} and was killed", mint_policy::aliases::format_duration(*timeout))]
    Timeout {
        /// The program.
        program: String,
        /// The timeout.
        timeout: Duration,
    },
    /// The program exited with a non-zero status.
    #[error(
        "`{program}` exited with status {code}; run it yourself to see why (Mint never logs its output)"
    )]
    Exit {
        /// The program.
        program: String,
        /// Its exit status.
        code: i32,
    },
    /// The program was killed by a signal.
    #[error("`{program}` was killed by signal {signal}")]
    Signal {
        /// The program.
        program: String,
        /// The signal number.
        signal: i32,
    },
    /// Its standard output could not be read.
    #[error("cannot read the output of `{program}`: {kind}")]
    Output {
        /// The program.
        program: String,
        /// Why, by kind.
        kind: io::ErrorKind,
    },
}

// === impl CommandStore ===

impl CommandStore {
    /// Commands get [`PASSED_VARIABLES`] from this process's environment.
    pub fn process() -> CommandStore {
        CommandStore::from_lookup(|name| std::env::var_os(name))
    }

    /// Commands get [`PASSED_VARIABLES`] as `lookup` answers them (tests).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<OsString>) -> CommandStore {
        let mut env: Vec<(String, OsString)> = PASSED_VARIABLES
            .iter()
            .filter_map(|name| lookup(name).map(|value| ((*name).to_owned(), value)))
            .collect();
        if !env.iter().any(|(name, _)| name == "PATH") {
            env.push(("PATH".to_owned(), OsString::from(DEFAULT_PATH)));
        }
        CommandStore { env }
    }

    /// Runs `source` once and returns its output as the value. Blocking (up to the source's
    /// timeout); call it off the async threads.
    pub fn run(&self, source: &CommandSource) -> Result<CredentialValue, StoreError> {
        let program = source.program().to_owned();
        let Some((first, args)) = source.argv.split_first() else {
            return Err(StoreError::Command(CommandProblem::Spawn {
                program,
                kind: io::ErrorKind::InvalidInput,
            }));
        };
        let mut command = Command::new(first);
        command
            .args(args)
            .env_clear()
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .current_dir("/")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .process_group(0);
        let started = Instant::now();
        let deadline = started + source.timeout;
        let mut child = command.spawn().map_err(|e| CommandProblem::Spawn {
            program: program.clone(),
            kind: e.kind(),
        })?;
        let Some(mut stdout) = child.stdout.take() else {
            kill(&mut child);
            return Err(CommandProblem::Output {
                program,
                kind: io::ErrorKind::BrokenPipe,
            }
            .into());
        };
        // The output is read on a thread of its own so that a program that neither writes nor
        // exits is still killed at its deadline.
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(read_bounded(&mut stdout));
        });
        let read = match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(read) => read,
            Err(_) => {
                kill(&mut child);
                return Err(CommandProblem::Timeout {
                    program,
                    timeout: source.timeout,
                }
                .into());
            }
        };
        let output = match read {
            Ok(Some(output)) => output,
            Ok(None) => {
                kill(&mut child);
                return Err(StoreError::Value(ValueProblem::TooLarge));
            }
            Err(kind) => {
                kill(&mut child);
                return Err(CommandProblem::Output { program, kind }.into());
            }
        };
        // The output is complete (the program closed it); now its exit status, within the
        // same deadline.
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) if Instant::now() < deadline => std::thread::sleep(WAIT_POLL),
                Ok(None) => {
                    kill(&mut child);
                    return Err(CommandProblem::Timeout {
                        program,
                        timeout: source.timeout,
                    }
                    .into());
                }
                Err(e) => {
                    kill(&mut child);
                    return Err(CommandProblem::Output {
                        program,
                        kind: e.kind(),
                    }
                    .into());
                }
            }
        };
        if let Some(signal) = status.signal() {
            return Err(CommandProblem::Signal { program, signal }.into());
        }
        match status.code() {
            Some(0) => {}
            code => {
                return Err(CommandProblem::Exit {
                    program,
                    code: code.unwrap_or(-1),
                }
                .into());
            }
        }
        let mut end = output.len();
        if output.ends_with(b"\r\n") {
            end -= 2;
        } else if output.ends_with(b"\n") {
            end -= 1;
        }
        let value = Zeroizing::new(output.get(..end).unwrap_or_default().to_vec());
        Ok(CredentialValue::from_bytes(value)?)
    }
}

/// Reads `reader` to its end into one buffer allocated up front (never grown, so no stray copy
/// is left in freed memory); `None` when there is more than a value may hold.
fn read_bounded(reader: &mut impl Read) -> Result<Option<Zeroizing<Vec<u8>>>, io::ErrorKind> {
    // Room for the largest value, a trailing `\r\n`, and one byte more to see an overflow.
    let mut buffer = Zeroizing::new(vec![0u8; MAX_VALUE_BYTES + 3]);
    let mut filled = 0;
    loop {
        let Some(free) = buffer.get_mut(filled..) else {
            return Ok(None);
        };
        if free.is_empty() {
            return Ok(None);
        }
        match reader.read(free) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.kind()),
        }
    }
    buffer.truncate(filled);
    Ok(Some(buffer))
}

/// Kills the command's process group (the program and whatever it started) and reaps it.
fn kill(child: &mut Child) {
    if let Some(pid) = i32::try_from(child.id())
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    {
        let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
    }
    let _ = child.kill();
    let _ = child.wait();
}

#[cfg(test)]
mod tests {
    use mint_policy::aliases::{DEFAULT_COMMAND_CACHE, DEFAULT_COMMAND_MAX_STALE};
    use secrecy::ExposeSecret;

    use super::*;

    const CANARY: &str = "canary-cmd-7c41d2";

    fn source(argv: &[&str], timeout: Duration) -> CommandSource {
        CommandSource {
            argv: argv.iter().map(|s| (*s).to_owned()).collect(),
            timeout,
            cache: DEFAULT_COMMAND_CACHE,
            max_stale: DEFAULT_COMMAND_MAX_STALE,
        }
    }

    fn store() -> CommandStore {
        CommandStore::process()
    }

    fn run(argv: &[&str]) -> Result<CredentialValue, StoreError> {
        store().run(&source(argv, Duration::from_secs(20)))
    }

    #[test]
    fn output_is_the_value_without_one_trailing_newline() {
        let value = run(&["printf", "%s\\n", CANARY]).unwrap();
        assert_eq!(value.as_secret().expose_secret(), CANARY);
        let value = run(&["printf", "%s\\r\\n", CANARY]).unwrap();
        assert_eq!(value.as_secret().expose_secret(), CANARY);
        // Only one newline goes.
        let value = run(&["printf", "%s\\n\\n", CANARY]).unwrap();
        assert_eq!(value.as_secret().expose_secret(), format!("{CANARY}\n"));
    }

    #[test]
    fn arguments_reach_the_program_unchanged_and_no_shell_reads_them() {
        let value = run(&["printf", "%s|%s", "a b", "$HOME;`id`*"]).unwrap();
        assert_eq!(value.as_secret().expose_secret(), "a b|$HOME;`id`*");
    }

    #[test]
    fn the_environment_is_minimal() {
        let store = CommandStore::from_lookup(|name| match name {
            "HOME" => Some("/home/op".into()),
            "PATH" => std::env::var_os("PATH"),
            _ => None,
        });
        let value = store
            .run(&source(&["env"], Duration::from_secs(20)))
            .unwrap();
        let mut names: Vec<&str> = value
            .as_secret()
            .expose_secret()
            .lines()
            .filter_map(|l| l.split_once('=').map(|(k, _)| k))
            .collect();
        names.sort_unstable();
        assert_eq!(names, ["HOME", "PATH"]);
    }

    #[test]
    fn failures_name_the_program_never_the_output() {
        let err = run(&[
            "sh",
            "-c",
            &format!("echo {CANARY}; echo {CANARY} >&2; exit 3"),
        ])
        .unwrap_err();
        let message = err.to_string();
        assert!(message.contains("`sh` exited with status 3"), "{message}");
        assert!(!message.contains(CANARY) && !format!("{err:?}").contains(CANARY));

        let err = run(&["/nonexistent/mint-no-such-program"]).unwrap_err();
        assert!(err.to_string().contains("cannot run"), "{err}");

        let err = run(&["sh", "-c", "kill -9 $$"]).unwrap_err();
        assert!(err.to_string().contains("signal 9"), "{err}");

        let err = run(&["true"]).unwrap_err();
        assert!(
            matches!(err, StoreError::Value(ValueProblem::Empty)),
            "{err}"
        );
    }

    #[test]
    fn a_slow_program_is_killed_at_its_timeout_with_what_it_started() {
        let err = store()
            .run(&source(
                &["sh", "-c", "sleep 600 & sleep 600"],
                Duration::from_millis(300),
            ))
            .unwrap_err();
        assert!(
            matches!(err, StoreError::Command(CommandProblem::Timeout { .. })),
            "{err}"
        );
        assert!(
            err.to_string().contains("did not finish within 300ms"),
            "{err}"
        );
    }

    #[test]
    fn huge_output_is_refused_and_bounded() {
        // An endless writer: reading stops at the bound and the program is killed.
        let err = run(&["yes", CANARY]).unwrap_err();
        assert!(
            matches!(err, StoreError::Value(ValueProblem::TooLarge)),
            "{err}"
        );
        assert!(!err.to_string().contains(CANARY));
        // Exactly the largest value, with its newline, is fine.
        let script = format!("head -c {MAX_VALUE_BYTES} /dev/zero | tr '\\0' x; echo");
        let value = run(&["sh", "-c", &script]).unwrap();
        assert_eq!(value.as_secret().expose_secret().len(), MAX_VALUE_BYTES);
    }
}
