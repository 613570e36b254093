//! The interception CA's two files: `ca.pem` (the certificate, 0644: clients are told to trust
//! it) and `ca.key` (its private key, 0600), in `MINT_HOME` unless `MINT_CA_CERT` and
//! `MINT_CA_KEY` (or `mint serve --ca-cert/--ca-key`) name others, such as one CA shared by
//! several brokers.
//!
//! `mint init` creates them ([`create`]), `mint serve` creates them on its first start in a home
//! that has neither ([`load_or_create`], so a home made before interception existed keeps
//! working) and otherwise refuses to start on a CA that is unsafe or cannot serve: a file another
//! user could change (the checks of `secure_file::open_trusted`), a key that group or others may
//! read, a certificate that is not a CA, outside its validity, or not the key's. `mint ca rotate`
//! replaces both ([`rotate`]), with name constraints when it is given some (`mint ca rotate
//! --name-constraints`). Errors name the file and the fix, never a byte of the key.

use std::io::{self, Read};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use zeroize::Zeroizing;

use super::env::Paths;
use super::secure_file::{
    DirLock, FILE_MODE, PUBLIC_FILE_MODE, SecureFileError, check_private_dir, create_new_mode,
    effective_uid, open_in_trusted_dirs, open_trusted, parent_dir, write_atomic_mode,
};
use crate::net::ca::name_constraints::NameConstraints;
use crate::net::ca::{CaError, CaPem, CertificateAuthority};

/// Why the CA files could not be read, checked or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CaFileError {
    /// One of the two files exists and the other does not.
    #[error(
        "`{}` exists but `{}` does not; restore it, or run `mint ca rotate` to make a new CA",
        present.display(),
        missing.display()
    )]
    Incomplete {
        /// The file that is there.
        present: PathBuf,
        /// The file that is not.
        missing: PathBuf,
    },
    /// Neither file exists (and this command does not create them).
    #[error("no CA at `{}`: run `mint init` or `mint ca rotate` to make one", path.display())]
    Missing {
        /// The certificate's path.
        path: PathBuf,
    },
    /// A file or a directory on its way that another user could change.
    #[error(transparent)]
    Insecure(SecureFileError),
    /// The key is owned by another user.
    #[error(
        "`{path}` is owned by uid {owner}, not by the user Mint runs as (uid {uid}); run \
         `chown {uid} {path}`",
        path = path.display()
    )]
    KeyForeignOwner {
        /// The key file.
        path: PathBuf,
        /// Its owner.
        owner: u32,
        /// Mint's effective uid.
        uid: u32,
    },
    /// Group or others have some permission on the key.
    #[error(
        "`{path}` is open to group or others (mode {mode:04o}); a CA key must be its owner's \
         alone: run `chmod 600 {path}`",
        path = path.display()
    )]
    KeyTooOpen {
        /// The key file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// A file that could not be read, or is too large to be a CA file.
    #[error("cannot read `{}`: {problem}", path.display())]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// Why.
        problem: String,
    },
    /// The files hold something that cannot serve as the CA. (What is wrong is part of the
    /// message, not a source: `main` prints the chain, which would say it twice.)
    #[error("`{}`: {problem}", path.display())]
    Unusable {
        /// The certificate's path.
        path: PathBuf,
        /// What is wrong.
        problem: CaError,
    },
}

/// Reads and checks the CA at `paths` at `now`.
pub fn load(paths: &Paths, now: SystemTime) -> Result<CertificateAuthority, CaFileError> {
    let (cert_path, key_path) = (&paths.ca_cert, &paths.ca_key);
    match (exists(cert_path), exists(key_path)) {
        (false, false) => {
            return Err(CaFileError::Missing {
                path: cert_path.clone(),
            });
        }
        (true, false) | (false, true) => {
            let (present, missing) = if exists(cert_path) {
                (cert_path, key_path)
            } else {
                (key_path, cert_path)
            };
            return Err(CaFileError::Incomplete {
                present: present.clone(),
                missing: missing.clone(),
            });
        }
        (true, true) => {}
    }
    let cert = read_cert(&paths.ca_cert)?;
    let key = read_key(&paths.ca_key)?;
    CertificateAuthority::from_pem(&cert, &key, now).map_err(|problem| CaFileError::Unusable {
        path: paths.ca_cert.clone(),
        problem,
    })
}

/// [`load`], after creating the CA if neither of its files exists. Returns whether it was
/// created.
pub fn load_or_create(
    paths: &Paths,
    now: SystemTime,
) -> Result<(CertificateAuthority, bool), CaFileError> {
    let created = match (exists(&paths.ca_cert), exists(&paths.ca_key)) {
        (false, false) => {
            create(paths, now)?;
            true
        }
        _ => false,
    };
    Ok((load(paths, now)?, created))
}

/// Makes a new CA and writes its files, which must not exist yet (key 0600 first, then the
/// certificate 0644; a failure removes what this call wrote).
pub fn create(paths: &Paths, now: SystemTime) -> Result<(), CaFileError> {
    let pem = generate(paths, now, None)?;
    create_new_mode(&paths.ca_key, pem.key.as_bytes(), FILE_MODE).map_err(CaFileError::Insecure)?;
    if let Err(error) = create_new_mode(&paths.ca_cert, pem.cert.as_bytes(), PUBLIC_FILE_MODE) {
        let _ = std::fs::remove_file(&paths.ca_key);
        return Err(CaFileError::Insecure(error));
    }
    Ok(())
}

/// Replaces the CA with a new one (or makes the first), name-constrained to `constraints` when
/// given (otherwise unconstrained, whatever the old one was). The key is replaced first, then the
/// certificate, each atomically; a crash between the two leaves a pair `mint serve` refuses
/// (the key is not the certificate's) until `mint ca rotate` runs again. Running brokers keep
/// the CA they started with until they restart.
pub fn rotate(
    paths: &Paths,
    now: SystemTime,
    constraints: Option<&NameConstraints>,
) -> Result<(), CaFileError> {
    let pem = generate(paths, now, constraints)?;
    let _lock = DirLock::for_file(&paths.ca_cert).map_err(CaFileError::Insecure)?;
    write_atomic_mode(&paths.ca_key, pem.key.as_bytes(), FILE_MODE)
        .map_err(CaFileError::Insecure)?;
    write_atomic_mode(&paths.ca_cert, pem.cert.as_bytes(), PUBLIC_FILE_MODE)
        .map_err(CaFileError::Insecure)
}

/// The CA certificate's PEM, read through the checks of [`load`] (the key is checked too: a
/// certificate whose key is gone is not worth trusting).
pub fn cert_pem(paths: &Paths, now: SystemTime) -> Result<String, CaFileError> {
    Ok(load(paths, now)?.cert_pem().to_owned())
}

/// A new CA's PEM, after checking the directories the files go in.
fn generate(
    paths: &Paths,
    now: SystemTime,
    constraints: Option<&NameConstraints>,
) -> Result<CaPem, CaFileError> {
    for path in [&paths.ca_cert, &paths.ca_key] {
        check_private_dir(parent_dir(path)).map_err(CaFileError::Insecure)?;
    }
    match constraints {
        Some(constraints) => CertificateAuthority::generate_name_constrained(now, constraints),
        None => CertificateAuthority::generate(now),
    }
    .map_err(|problem| CaFileError::Unusable {
        path: paths.ca_cert.clone(),
        problem,
    })
}

fn exists(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok()
}

/// The certificate: through `open_trusted` (owned by Mint's user or root, not writable by group
/// or others, every directory on the way checked).
fn read_cert(path: &Path) -> Result<String, CaFileError> {
    let trusted = open_trusted(path).map_err(CaFileError::Insecure)?;
    read_bounded(trusted.file, path).map(|text| text.to_string())
}

/// The key: directories checked as for the certificate, the file owned by Mint's user and closed
/// to group and others, judged on its descriptor.
fn read_key(path: &Path) -> Result<Zeroizing<String>, CaFileError> {
    let trusted = open_in_trusted_dirs(path).map_err(CaFileError::Insecure)?;
    let uid = effective_uid();
    let owner = trusted.metadata.uid();
    if owner != uid {
        return Err(CaFileError::KeyForeignOwner {
            path: path.to_path_buf(),
            owner,
            uid,
        });
    }
    let mode = trusted.metadata.mode() & 0o7777;
    if mode & 0o077 != 0 {
        return Err(CaFileError::KeyTooOpen {
            path: path.to_path_buf(),
            mode,
        });
    }
    read_bounded(trusted.file, path)
}

fn read_bounded(file: std::fs::File, path: &Path) -> Result<Zeroizing<String>, CaFileError> {
    let unreadable = |problem: String| CaFileError::Unreadable {
        path: path.to_path_buf(),
        problem,
    };
    // Room for the whole bounded read up front: a string that grew would free unwiped copies of
    // the key.
    let mut text = Zeroizing::new(String::with_capacity(MAX_CA_FILE as usize + 1));
    file.take(MAX_CA_FILE + 1)
        .read_to_string(&mut text)
        .map_err(|error| match error.kind() {
            io::ErrorKind::InvalidData => unreadable("not text".to_owned()),
            kind => unreadable(kind.to_string()),
        })?;
    if text.len() as u64 > MAX_CA_FILE {
        return Err(unreadable(format!(
            "larger than {MAX_CA_FILE} bytes, too large for a CA file"
        )));
    }
    Ok(text)
}

/// The largest CA file read.
const MAX_CA_FILE: u64 = 64 << 10;

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn paths(dir: &Path) -> Paths {
        Paths::resolve(|name| {
            (name == crate::config::env::MINT_HOME).then(|| dir.as_os_str().to_owned())
        })
    }

    fn home() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        dir
    }

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o7777
    }

    #[test]
    fn created_once_with_modes_and_loaded_back() {
        let dir = home();
        let paths = paths(dir.path());
        let now = SystemTime::now();
        let (ca, created) = load_or_create(&paths, now).unwrap();
        assert!(created);
        assert_eq!(mode(&paths.ca_cert), 0o644);
        assert_eq!(mode(&paths.ca_key), 0o600);
        let (again, created) = load_or_create(&paths, now).unwrap();
        assert!(!created);
        assert_eq!(ca.cert_der(), again.cert_der());
        assert_eq!(cert_pem(&paths, now).unwrap(), ca.cert_pem());
        assert!(matches!(
            create(&paths, now),
            Err(CaFileError::Insecure(SecureFileError::Exists { .. }))
        ));
        rotate(&paths, now, None).unwrap();
        let rotated = load(&paths, now).unwrap();
        assert_ne!(rotated.cert_der(), ca.cert_der());
        assert_eq!(mode(&paths.ca_cert), 0o644);
        assert_eq!(mode(&paths.ca_key), 0o600);
    }

    #[test]
    fn refuses_an_open_key_a_lone_file_and_an_open_certificate() {
        let dir = home();
        let paths = paths(dir.path());
        let now = SystemTime::now();
        assert!(matches!(
            cert_pem(&paths, now),
            Err(CaFileError::Missing { .. })
        ));
        create(&paths, now).unwrap();
        std::fs::set_permissions(&paths.ca_key, std::fs::Permissions::from_mode(0o640)).unwrap();
        let error = load(&paths, now).unwrap_err();
        assert!(matches!(error, CaFileError::KeyTooOpen { .. }), "{error}");
        assert!(error.to_string().contains("chmod 600"), "{error}");
        std::fs::set_permissions(&paths.ca_key, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::set_permissions(&paths.ca_cert, std::fs::Permissions::from_mode(0o666)).unwrap();
        let error = load(&paths, now).unwrap_err();
        assert!(
            matches!(
                error,
                CaFileError::Insecure(SecureFileError::WritableByOthers { .. })
            ),
            "{error}"
        );
        std::fs::set_permissions(&paths.ca_cert, std::fs::Permissions::from_mode(0o644)).unwrap();
        std::fs::remove_file(&paths.ca_key).unwrap();
        let error = load_or_create(&paths, now).unwrap_err();
        assert!(matches!(error, CaFileError::Incomplete { .. }), "{error}");
        // An expired CA stops the load, naming the fix.
        std::fs::remove_file(&paths.ca_cert).unwrap();
        create(
            &paths,
            now - std::time::Duration::from_secs(400 * 24 * 3600),
        )
        .unwrap();
        let error = load(&paths, now).unwrap_err();
        assert!(error.to_string().contains("expired"), "{error}");
        assert!(error.to_string().contains("mint ca rotate"), "{error}");
    }
}
