//! `mint run --user NAME`: the user an agent runs as, and the switch to it.
//!
//! The parent (`mint run`, root) resolves the user from the user database (NSS: `/etc/passwd`,
//! LDAP...) with its groups, and starts the child as `mint exec-as --uid U --gid G --groups ...
//! -- CMD`: a fresh copy of this binary that sets the supplementary groups, then the real,
//! effective and saved group id, then the three user ids, checks that none of it can be undone,
//! checks the session keyring it would hand on, and only then executes CMD (same process, so
//! the pid `mint run` forwards signals to stays CMD's). The switch happens in a separate exec
//! because the workspace forbids `unsafe` (no `pre_exec`) and std's `CommandExt::groups` is
//! unstable: std's own `uid`/`gid` would drop every supplementary group instead of setting the
//! user's.
//!
//! Never touches a secret or a token: the environment (the token in the proxy URL) passes
//! through untouched.

use std::ffi::{CString, OsString};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

use clap::Args;
use linux_keyutils::{KeyRing, KeyRingIdentifier};
use nix::unistd::{Gid, Uid, User};

use crate::cli::run::RunError;

/// Arguments of the hidden `mint exec-as`, which `mint run --user` starts its child with.
#[derive(Debug, Args)]
pub struct ExecAsArgs {
    /// The user id to switch to (real, effective and saved).
    #[arg(long)]
    pub uid: u32,
    /// The group id to switch to (real, effective and saved).
    #[arg(long)]
    pub gid: u32,
    /// The supplementary groups, comma-separated (may be empty).
    #[arg(long, value_delimiter = ',')]
    pub groups: Vec<u32>,
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

/// Why `mint run --user` refused, or could not switch users.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum UserError {
    /// Only root can start a process as another user.
    #[error(
        "`--user {user}` needs root: mint run switches the agent to another user only when it \
         runs as root (it runs as uid {uid}); run it with sudo, or start it as that user yourself"
    )]
    NotRoot {
        /// The user as given.
        user: String,
        /// This process's effective uid.
        uid: u32,
    },
    /// The user database has no such user.
    #[error("no user `{user}` on this machine (`getent passwd {user}` finds none)")]
    Unknown {
        /// The user as given.
        user: String,
    },
    /// `--user root`: the agent would keep every privilege `--user` is meant to take away.
    #[error("`--user {user}` is root: name a user without access to Mint's home and keyring")]
    Root {
        /// The user as given.
        user: String,
    },
    /// The user database could not be read.
    #[error("cannot look up user `{user}`")]
    Lookup {
        /// The user as given.
        user: String,
        /// Why.
        #[source]
        source: nix::Error,
    },
    /// The temporary directory of the CA files cannot be entered by the user.
    #[error(
        "user `{user}` cannot enter `{}`, which holds the CA files of the agent; set TMPDIR to \
         a directory every user can traverse (such as /tmp)",
        path.display()
    )]
    Unreachable {
        /// The user.
        user: String,
        /// The directory without search permission for others.
        path: PathBuf,
    },
    /// The temporary directory could not be given to the user.
    #[error("cannot give `{}` to user `{user}`", path.display())]
    Chown {
        /// The user.
        user: String,
        /// The directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A step of the switch failed.
    #[error("cannot switch to uid {uid}: {step} failed")]
    Switch {
        /// The target uid.
        uid: u32,
        /// `setgroups`, `setresgid` or `setresuid`.
        step: &'static str,
        /// Why.
        #[source]
        source: nix::Error,
    },
    /// After the switch, some id is not the target's, or root could be regained.
    #[error("the switch to uid {uid} did not take: {what}")]
    NotDropped {
        /// The target uid.
        uid: u32,
        /// What is wrong.
        what: String,
    },
    /// The agent would inherit a session keyring of another user that holds keys: with the
    /// kernel keyring, a process possesses the keys of its session keyring whatever its uid.
    #[error(
        "the session keyring `mint run` would hand to the agent belongs to {owner} and may \
         hold keys, which the agent could read as their possessor (kernel keyring); start \
         mint run in a session keyring of its own: `keyctl session - mint run --user ...`"
    )]
    SessionKeyring {
        /// The keyring's owner, in words (`uid 0`).
        owner: String,
    },
}

/// The user an agent runs as: its ids, groups and the variables of its login.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentUser {
    /// The login name.
    pub name: String,
    /// The user id.
    pub uid: u32,
    /// The primary group id.
    pub gid: u32,
    /// Every group the user is a member of (the primary group included), as `initgroups` sets.
    pub groups: Vec<u32>,
    /// The home directory of its passwd entry.
    pub home: PathBuf,
}

// === impl AgentUser ===

impl AgentUser {
    /// The user `spec` names (a login name, or a numeric uid with a passwd entry). Refused
    /// unless this process runs as root, and for root itself.
    pub fn resolve(spec: &str) -> Result<AgentUser, UserError> {
        let euid = Uid::effective();
        if !euid.is_root() {
            return Err(UserError::NotRoot {
                user: spec.to_owned(),
                uid: euid.as_raw(),
            });
        }
        let lookup = |source| UserError::Lookup {
            user: spec.to_owned(),
            source,
        };
        let by_name = User::from_name(spec).map_err(lookup)?;
        let user = match (by_name, spec.parse::<u32>()) {
            (Some(user), _) => Some(user),
            (None, Ok(uid)) => User::from_uid(Uid::from_raw(uid)).map_err(lookup)?,
            (None, Err(_)) => None,
        };
        let user = user.ok_or_else(|| UserError::Unknown {
            user: spec.to_owned(),
        })?;
        if user.uid.is_root() {
            return Err(UserError::Root {
                user: spec.to_owned(),
            });
        }
        let name = CString::new(user.name.as_str()).map_err(|_| UserError::Unknown {
            user: spec.to_owned(),
        })?;
        let groups = nix::unistd::getgrouplist(&name, user.gid).map_err(lookup)?;
        let mut groups: Vec<u32> = groups.into_iter().map(Gid::as_raw).collect();
        groups.sort_unstable();
        groups.dedup();
        Ok(AgentUser {
            name: user.name,
            uid: user.uid.as_raw(),
            gid: user.gid.as_raw(),
            groups,
            home: user.dir,
        })
    }

    /// Gives `dir` (a directory only root can enter, holding the CA files) to this user, mode
    /// kept: it becomes readable by the user and no one else. Fails when the user could not
    /// reach it because a directory above has no search permission for others.
    pub fn take(&self, dir: &Path) -> Result<(), UserError> {
        let dir = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
        for ancestor in dir.ancestors().skip(1) {
            let traversable = std::fs::metadata(ancestor)
                .is_ok_and(|meta| meta.permissions().mode() & 0o001 != 0);
            if !traversable {
                return Err(UserError::Unreachable {
                    user: self.name.clone(),
                    path: ancestor.to_path_buf(),
                });
            }
        }
        std::os::unix::fs::chown(&dir, Some(self.uid), Some(self.gid)).map_err(|source| {
            UserError::Chown {
                user: self.name.clone(),
                path: dir.clone(),
                source,
            }
        })
    }

    /// The child's program and arguments: `mint exec-as --uid U --gid G --groups A,B -- CMD`.
    pub fn wrap(&self, command: &[OsString]) -> Result<(PathBuf, Vec<OsString>), RunError> {
        let mint = std::env::current_exe().map_err(|source| RunError::Spawn {
            program: OsString::from("mint"),
            source,
        })?;
        let groups: Vec<String> = self.groups.iter().map(u32::to_string).collect();
        let mut args: Vec<OsString> = vec![
            "exec-as".into(),
            "--uid".into(),
            self.uid.to_string().into(),
            "--gid".into(),
            self.gid.to_string().into(),
        ];
        if !groups.is_empty() {
            args.push(format!("--groups={}", groups.join(",")).into());
        }
        args.push("--".into());
        args.extend(command.iter().cloned());
        Ok((mint, args))
    }
}

/// `mint exec-as`: switches to the user and executes the command; returns only on failure.
pub fn exec_as(args: ExecAsArgs) -> RunError {
    match switch(&args) {
        Ok(()) => {}
        Err(error) => return error.into(),
    }
    let (program, rest) = match args.command.split_first() {
        Some((program, rest)) => (program.clone(), rest),
        None => (OsString::new(), &[][..]),
    };
    let source = std::process::Command::new(&program).args(rest).exec();
    if source.kind() == std::io::ErrorKind::NotFound {
        RunError::NotFound { program }
    } else {
        RunError::Spawn { program, source }
    }
}

/// Groups, then gid, then uid (after `setresuid` nothing else could be changed), then the
/// checks: the three ids of each kind are the target's, and neither root's uid nor gid can be
/// taken back; then the session keyring.
fn switch(args: &ExecAsArgs) -> Result<(), UserError> {
    let (uid, gid) = (Uid::from_raw(args.uid), Gid::from_raw(args.gid));
    let failed = |step| {
        move |source| UserError::Switch {
            uid: args.uid,
            step,
            source,
        }
    };
    let groups: Vec<Gid> = args.groups.iter().copied().map(Gid::from_raw).collect();
    // nix calls the C library's functions, which change the ids of every thread of the process
    // (glibc and musl broadcast them); `mint exec-as` starts no thread anyway.
    nix::unistd::setgroups(&groups).map_err(failed("setgroups"))?;
    nix::unistd::setresgid(gid, gid, gid).map_err(failed("setresgid"))?;
    nix::unistd::setresuid(uid, uid, uid).map_err(failed("setresuid"))?;

    let not_dropped = |what: String| UserError::NotDropped {
        uid: args.uid,
        what,
    };
    let ids = nix::unistd::getresuid().map_err(failed("getresuid"))?;
    let gids = nix::unistd::getresgid().map_err(failed("getresgid"))?;
    if [ids.real, ids.effective, ids.saved] != [uid; 3] {
        return Err(not_dropped(format!(
            "user ids are {}/{}/{}",
            ids.real, ids.effective, ids.saved
        )));
    }
    if [gids.real, gids.effective, gids.saved] != [gid; 3] {
        return Err(not_dropped(format!(
            "group ids are {}/{}/{}",
            gids.real, gids.effective, gids.saved
        )));
    }
    let mut now = nix::unistd::getgroups().map_err(failed("getgroups"))?;
    now.sort_unstable_by_key(|g| g.as_raw());
    let mut wanted = groups;
    wanted.sort_unstable_by_key(|g| g.as_raw());
    wanted.dedup();
    if now != wanted {
        return Err(not_dropped("the supplementary groups differ".to_owned()));
    }
    if nix::unistd::setuid(Uid::from_raw(0)).is_ok()
        || nix::unistd::setgid(Gid::from_raw(0)).is_ok()
    {
        return Err(not_dropped("root could be regained".to_owned()));
    }
    check_session_keyring(args.uid)
}

/// Refuses a session keyring of another user that holds anything: its keys would be the
/// agent's to read. A process without a session keyring of its own gets its user's (after the
/// switch: the agent user's), which is fine.
fn check_session_keyring(uid: u32) -> Result<(), UserError> {
    let Ok(ring) = KeyRing::from_special_id(KeyRingIdentifier::Session, false) else {
        return Ok(());
    };
    let owner = match ring.metadata() {
        Ok(meta) if meta.get_uid() == uid => return Ok(()),
        Ok(meta) => format!("uid {}", meta.get_uid()),
        Err(_) => "another user".to_owned(),
    };
    match ring.get_links(16) {
        Ok(links) if links.is_empty() => Ok(()),
        _ => Err(UserError::SessionKeyring { owner }),
    }
}
