//! `mint ca export [--bundle]` and `mint ca rotate`: the interception CA agents trust for HTTPS
//! through Mint (docs/interception.md).
//!
//! `export` prints the CA certificate (PEM) on stdout, checked as `mint serve` checks it; with
//! `--bundle`, the system's CA bundle first and Mint's CA after it, for clients whose variable
//! replaces their default store (`SSL_CERT_FILE`, `REQUESTS_CA_BUNDLE`). `rotate` makes a new CA
//! in place of the old one; brokers pick it up when they restart. `rotate --name-constraints`
//! makes one whose critical `nameConstraints` permit only the hosts aliases are bound to, read
//! from the alias file now (plain `rotate` makes an unconstrained CA). Never prints the key.

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use clap::Subcommand;

use crate::config::ca_files::{self, CaFileError};
use crate::config::declarations::{DeclarationsError, load_alias_file};
use crate::config::env::Paths;
use crate::net::ca::name_constraints::NameConstraints;

/// `mint ca` subcommands.
#[derive(Debug, Subcommand)]
pub enum CaCommand {
    /// Print the interception CA certificate (PEM) on stdout, for agents to trust.
    Export {
        /// Print the system's CA bundle followed by Mint's CA: a file for `SSL_CERT_FILE` or
        /// `REQUESTS_CA_BUNDLE`, which replace a client's default roots.
        #[arg(long)]
        bundle: bool,
    },
    /// Replace the interception CA with a new one. Agents must trust the new certificate;
    /// running brokers keep the old CA until they restart.
    Rotate {
        /// Make a name-constrained CA: critical nameConstraints permitting only the hosts the
        /// aliases are bound to now (each DNS name with every name below it), so that its key
        /// cannot sign for any other site. Without it, the new CA is unconstrained.
        #[arg(long)]
        name_constraints: bool,
    },
}

/// Why a `mint ca` command failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CaCommandError {
    /// The CA files.
    #[error(transparent)]
    Files(#[from] CaFileError),
    /// The alias file, read for `--name-constraints`.
    #[error(transparent)]
    Aliases(#[from] DeclarationsError),
    /// `--name-constraints` with no alias bound to a host: the CA would permit nothing.
    #[error(
        "no alias in `{}` is bound to a host, so a name-constrained CA would permit no site; bind \
         aliases first (`mint alias add NAME --host HOST`), then run `mint ca rotate \
         --name-constraints`; the CA was not changed",
        path.display()
    )]
    NoBoundHost {
        /// The alias file.
        path: PathBuf,
    },
    /// No system CA bundle was found for `--bundle`.
    #[error(
        "no system CA bundle found (looked at {}); add Mint's CA (`mint ca export`) to the client's own store instead",
        SYSTEM_BUNDLES.join(", ")
    )]
    NoSystemBundle,
    /// The system bundle could not be read.
    #[error("cannot read the system CA bundle `{}`: {kind}", path.display())]
    SystemBundle {
        /// The bundle.
        path: PathBuf,
        /// Why.
        kind: io::ErrorKind,
    },
    /// Writing the output failed.
    #[error("cannot write the output")]
    Output(#[source] io::Error),
}

/// Runs a `mint ca` command.
pub fn run(command: CaCommand, paths: &Paths, out: &mut dyn Write) -> Result<(), CaCommandError> {
    let now = SystemTime::now();
    match command {
        CaCommand::Export { bundle } => {
            let cert = ca_files::cert_pem(paths, now)?;
            let mut text = String::new();
            if bundle {
                text = bundle_text(&cert)?;
            } else {
                text.push_str(&cert);
            }
            out.write_all(text.as_bytes())
                .and_then(|()| out.flush())
                .map_err(CaCommandError::Output)
        }
        CaCommand::Rotate { name_constraints } => {
            let constraints = if name_constraints {
                let (aliases, _) = load_alias_file(&paths.aliases)?;
                let hosts = aliases.aliases.iter().flat_map(|alias| &alias.hosts);
                Some(NameConstraints::for_hosts(hosts).ok_or_else(|| {
                    CaCommandError::NoBoundHost {
                        path: paths.aliases.clone(),
                    }
                })?)
            } else {
                None
            };
            ca_files::rotate(paths, now, constraints.as_ref())?;
            // Read back through the checks `mint serve` applies.
            ca_files::cert_pem(paths, now)?;
            let kind = if constraints.is_some() {
                "name-constrained interception CA"
            } else {
                "interception CA (not name-constrained)"
            };
            let mut text = format!(
                "New {kind} written to {} (key {}).\n",
                paths.ca_cert.display(),
                paths.ca_key.display()
            );
            if let Some(constraints) = &constraints {
                text.push_str(&format!(
                    "It signs only for names inside its constraints ({constraints}); a DNS name \
                     permits every name below it. After binding an alias to another host, run \
                     `mint ca rotate --name-constraints` again.\n"
                ));
            }
            text.push_str(
                "Restart `mint serve`, and have agents trust the new certificate (`mint ca export`); \
                 leaves signed by the old CA stop being accepted once they no longer trust it.\n",
            );
            out.write_all(text.as_bytes())
                .and_then(|()| out.flush())
                .map_err(CaCommandError::Output)
        }
    }
}

/// The system's CA bundle followed by `cert` (Mint's CA, PEM): what `mint ca export --bundle`
/// prints and `mint run` and `mint env` write for the variables that replace a client's roots.
pub fn bundle_text(cert: &str) -> Result<String, CaCommandError> {
    let path = system_bundle().ok_or(CaCommandError::NoSystemBundle)?;
    let mut text = std::fs::read_to_string(path).map_err(|e| CaCommandError::SystemBundle {
        path: path.to_path_buf(),
        kind: e.kind(),
    })?;
    if !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str("# Mint interception CA\n");
    text.push_str(cert);
    Ok(text)
}

/// The system's CA bundle: the first of the usual places (Debian, Fedora, openSUSE, Alpine, macOS)
/// that holds a file.
pub fn system_bundle() -> Option<&'static Path> {
    SYSTEM_BUNDLES
        .iter()
        .map(Path::new)
        .find(|path| path.is_file())
}

/// Where Linux distributions and macOS keep the system's CA bundle (Debian and Ubuntu, Fedora and
/// RHEL, openSUSE, Alpine and macOS).
const SYSTEM_BUNDLES: [&str; 4] = [
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/ca-bundle.pem",
    "/etc/ssl/cert.pem",
];
