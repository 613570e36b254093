//! `mint init`: creates Mint's home directory (0700) with a default-deny policy, an empty alias
//! file and an empty capabilities file (all 0600) and the interception CA (`ca.pem` 0644,
//! `ca.key` 0600), and prints the next steps.
//!
//! Refuses a home that another user could change: the home, every directory above it and every
//! symbolic link on the way must be owned by root or Mint's user and closed to writing by group
//! and others (sticky directories such as `/tmp` excepted above the home), as `mint serve` checks
//! at every start and reload. Never overwrites: if any of the five files exists, nothing is
//! created. Each file appears whole or not at all (temp file, fsync, hard link), and a failure
//! part-way removes what this run created, so a failed `mint init` leaves the disk as it found it.
//!
//! `--ca-name-constraints` is refused before anything is created: a name-constrained CA permits
//! only the hosts aliases are bound to, and a new home has no alias yet (its alias file is one of
//! the files `mint init` creates, never one it reads). The refusal names the way there.

use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use clap::Args;
use mint_policy::aliases::AliasFile;

use crate::capability::CapabilityFile;
use crate::cli::alias::render_file;
use crate::config::ca_files::{self, CaFileError};
use crate::config::env::Paths;
use crate::config::secure_file::{
    DIR_MODE, SecureFileError, check_parent_dirs, check_private_dir, create_new,
    create_private_dir, parent_dir,
};

/// Arguments of `mint init`.
#[derive(Debug, Args)]
pub struct InitArgs {
    /// Name-constrain the interception CA: refused here, since a new home has no alias to
    /// constrain it to. Bind aliases after `mint init`, then run
    /// `mint ca rotate --name-constraints`.
    #[arg(long)]
    pub ca_name_constraints: bool,
}

/// Why `mint init` did nothing (or undid what it started).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InitError {
    /// A file Mint would create is already there.
    #[error(
        "`{}` already exists; `mint init` never overwrites a file (set MINT_HOME to a new \
         directory, or keep using this one)",
        path.display()
    )]
    Exists {
        /// The first existing file.
        path: PathBuf,
    },
    /// MINT_HOME exists but is not a directory.
    #[error("`{}` exists and is not a directory", path.display())]
    NotADirectory {
        /// MINT_HOME.
        path: PathBuf,
    },
    /// MINT_HOME exists and group or others have some access to it.
    #[error(
        "`{path}` is open to group or others (mode {mode:04o}); run `chmod 700 {path}` or choose \
         another MINT_HOME",
        path = path.display()
    )]
    HomeTooOpen {
        /// MINT_HOME.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// The directory that should hold MINT_HOME does not exist.
    #[error("cannot create `{}`: its parent directory does not exist", path.display())]
    NoParent {
        /// MINT_HOME.
        path: PathBuf,
    },
    /// `--ca-name-constraints`: a new home has no alias to constrain the CA to.
    #[error(
        "a new home has no alias to constrain the interception CA to, so `--ca-name-constraints` \
         cannot apply here; nothing was created. Run `mint init`, bind aliases (`mint alias add \
         NAME --host HOST`), then `mint ca rotate --name-constraints`"
    )]
    NameConstraintsWithoutAliases,
    /// Creating the directory or a file failed; what this run created was removed again.
    #[error("{0}; nothing was created")]
    File(#[source] SecureFileError),
    /// Creating the interception CA failed; what this run created was removed again.
    #[error("{0}; nothing was created")]
    Ca(#[source] CaFileError),
    /// The summary could not be written (the files were created).
    #[error("cannot write the output")]
    Output(#[source] io::Error),
}

/// Runs `mint init` with its arguments.
pub fn run(args: &InitArgs, paths: &Paths, out: &mut dyn Write) -> Result<(), InitError> {
    if args.ca_name_constraints {
        return Err(InitError::NameConstraintsWithoutAliases);
    }
    init(paths, out)
}

/// Creates the home directory and the three files, then writes what was done and what to do next
/// to `out`.
pub fn init(paths: &Paths, out: &mut dyn Write) -> Result<(), InitError> {
    let files: [(&Path, String, &str); 3] = [
        (
            &paths.policy,
            POLICY_TEMPLATE.to_owned(),
            "default-deny policy",
        ),
        (
            &paths.aliases,
            render_file(&AliasFile::default()),
            "alias declarations (none yet; never a secret)",
        ),
        (
            &paths.capabilities,
            CapabilityFile::default().to_yaml(),
            "capability hashes (none yet)",
        ),
    ];
    let ca_files = [paths.ca_cert.as_path(), paths.ca_key.as_path()];
    for path in files.iter().map(|(path, _, _)| *path).chain(ca_files) {
        if fs::symlink_metadata(path).is_ok() {
            return Err(InitError::Exists {
                path: path.to_path_buf(),
            });
        }
    }

    let home = paths.home.as_path();
    let created_home = match fs::metadata(home) {
        Ok(metadata) => {
            if !metadata.is_dir() {
                return Err(InitError::NotADirectory {
                    path: home.to_path_buf(),
                });
            }
            check_private_dir(home).map_err(InitError::File)?;
            let mode = metadata.mode() & 0o7777;
            if mode & 0o077 != 0 {
                return Err(InitError::HomeTooOpen {
                    path: home.to_path_buf(),
                    mode,
                });
            }
            false
        }
        Err(_) => {
            if !parent_dir(home).is_dir() {
                return Err(InitError::NoParent {
                    path: home.to_path_buf(),
                });
            }
            // Another user who may write a directory above the home could swap it (or the files
            // in it) for theirs later: refused now rather than at every start.
            check_parent_dirs(home).map_err(InitError::File)?;
            create_private_dir(home).map_err(InitError::File)?;
            true
        }
    };

    let mut created: Vec<&Path> = Vec::with_capacity(files.len());
    for (path, text, _) in &files {
        if let Err(error) = create_new(path, text.as_bytes()) {
            // Undo this run's work only; a file that appeared meanwhile is someone else's.
            for done in &created {
                let _ = fs::remove_file(done);
            }
            if created_home {
                let _ = fs::remove_dir(home);
            }
            return Err(match error {
                SecureFileError::Exists { path } => InitError::Exists { path },
                other => InitError::File(other),
            });
        }
        created.push(path);
    }
    if let Err(error) = ca_files::create(paths, SystemTime::now()) {
        for done in &created {
            let _ = fs::remove_file(done);
        }
        if created_home {
            let _ = fs::remove_dir(home);
        }
        return Err(match error {
            CaFileError::Insecure(SecureFileError::Exists { path }) => InitError::Exists { path },
            other => InitError::Ca(other),
        });
    }
    tracing::debug!(home = %home.display(), "Mint home initialized");

    let mut report = if created_home {
        format!(
            "Created {} (mode {:04o}) with:\n",
            home.display(),
            fs::metadata(home).map_or(DIR_MODE, |m| m.permissions().mode() & 0o7777)
        )
    } else {
        format!("Initialized {} with:\n", home.display())
    };
    let listed: Vec<(&Path, &str)> = files
        .iter()
        .map(|(path, _, what)| (*path, *what))
        .chain([
            (
                paths.ca_cert.as_path(),
                "interception CA certificate (for agents to trust: `mint ca export`)",
            ),
            (
                paths.ca_key.as_path(),
                "interception CA key (never give it to anyone)",
            ),
        ])
        .collect();
    let width = listed
        .iter()
        .map(|(p, _)| p.display().to_string().chars().count())
        .max()
        .unwrap_or(0);
    for (path, what) in &listed {
        report.push_str(&format!(
            "  {:<width$}  {what}\n",
            path.display().to_string()
        ));
    }
    report.push_str(&next_steps(paths));
    out.write_all(report.as_bytes())
        .and_then(|()| out.flush())
        .map_err(InitError::Output)
}

fn next_steps(paths: &Paths) -> String {
    format!(
        "\nNext steps:\n\
         \x20 1. Store a credential under an alias (the secret is read with echo off, or from \
         stdin with --secret-stdin):\n\
         \x20      mint alias add github --host api.github.com --description \"GitHub token\"\n\
         \x20 2. Allow requests in {policy}, then check it:\n\
         \x20      mint policy check\n\
         \x20 3. Issue a capability for your agent (the token is printed once):\n\
         \x20      mint cap issue --agent mino --ttl 24h\n\
         \x20 4. Start the broker, and let the agent trust Mint's CA for HTTPS through it:\n\
         \x20      mint ca rotate --name-constraints   # optional: a CA for the aliases' hosts only\n\
         \x20      mint serve\n\
         \x20      mint ca export > mint-ca.pem\n\
         \x20      HTTPS_PROXY=http://agent:$TOKEN@127.0.0.1:8700 curl --cacert mint-ca.pem https://...\n\
         \nKeep {home} outside every directory the agent can write, and run the agent as another \
         user: the OS keyring does not protect secrets from programs of the same user.\n",
        policy = paths.policy.display(),
        home = paths.home.display(),
    )
}

/// The policy `mint init` writes: deny everything, with a commented example rule.
pub const POLICY_TEMPLATE: &str = "\
# Mint policy: which requests agents may send through the proxy, and with which aliases.
#
# Mint denies by default: a request goes out only when an allow rule matches it and no deny rule
# does, and it may carry an alias's secret only when that rule lists the alias. Check this file
# with `mint policy check`; the format is described in docs/policy.md.
#
# An example allow rule: the agent `mino` may read its GitHub user and repositories, with the
# `github` alias in a header.
#
#   rules:
#     - id: github-read
#       effect: allow
#       match:
#         agent: mino
#         alias: github
#         host: api.github.com
#         method: [GET, HEAD]
#         path: [\"/user\", \"/repos/**\"]

version: 1
default: deny
rules: []
";

#[cfg(test)]
mod tests {
    use mint_policy::aliases::load_aliases;
    use mint_policy::check::check_policy;

    use super::*;

    #[test]
    fn templates_validate() {
        let report = check_policy(POLICY_TEMPLATE.as_bytes(), "policy.yaml");
        assert!(report.valid, "{}", report.render_human());
        assert_eq!(report.render_human(), "0 errors, 0 warnings\n");
        // The commented example is a valid rule too.
        let example: String = POLICY_TEMPLATE
            .lines()
            .filter_map(|l| l.strip_prefix("#   "))
            .map(|l| format!("{l}\n"))
            .collect();
        let report = check_policy(format!("version: 1\n{example}").as_bytes(), "example");
        assert!(report.valid, "{}", report.render_human());
        assert_eq!(report.rule_count, 1);
        let aliases = render_file(&AliasFile::default());
        assert!(
            load_aliases(aliases.as_bytes(), "aliases.yaml")
                .aliases
                .is_some()
        );
    }
}
