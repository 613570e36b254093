//! The home's placeholder key (`$MINT_HOME/placeholder.key`): 32 random bytes, hex, mode 0600,
//! that every alias's value-shaped placeholder is derived from.
//!
//! Created by whichever of `mint alias add`, `mint alias list`, `mint run`, `mint env` or the
//! broker first needs it (only when an alias declares a `placeholder` shape), never overwritten:
//! a hard link puts it in place whole, so two processes racing to create it agree on one. Read
//! like every configuration file, refused when another user could change it. The key is not a
//! credential (the values it derives are public), but replacing it changes every shaped
//! placeholder, so it is kept like one.

use std::io::Read as _;
use std::path::{Path, PathBuf};

use mint_policy::aliases::AliasFile;
use zeroize::Zeroizing;

use crate::config::secure_file::{SecureFileError, create_new, open_trusted};
use crate::secrets::placeholder::shaped::{PlaceholderKey, ShapedError, ShapedPlaceholders};

/// Why the placeholder key could not be read or created.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PlaceholderKeyError {
    /// The file, or a directory on its way, is not trusted, or cannot be opened or written.
    #[error(transparent)]
    File(#[from] SecureFileError),
    /// The file does not hold a key.
    #[error(
        "`{}` does not hold a placeholder key (64 hex digits); remove it and Mint writes a new \
         one (every value-shaped placeholder then changes)",
        path.display()
    )]
    Malformed {
        /// The file.
        path: PathBuf,
    },
    /// The system gave no randomness.
    #[error("no randomness to create the placeholder key")]
    Random,
    /// The placeholders could not be built.
    #[error(transparent)]
    Shaped(#[from] ShapedError),
}

/// The key at `path`, created when there is none.
pub fn load_or_create(path: &Path) -> Result<PlaceholderKey, PlaceholderKeyError> {
    match read(path) {
        Err(PlaceholderKeyError::File(error)) if error.is_not_found() => {}
        other => return other,
    }
    let key = PlaceholderKey::random().ok_or(PlaceholderKeyError::Random)?;
    match create_new(path, key.to_text().as_bytes()) {
        Ok(()) => Ok(key),
        // Another process created it meanwhile: use that one.
        Err(SecureFileError::Exists { .. }) => read(path),
        Err(error) => Err(error.into()),
    }
}

/// The shaped placeholders of `aliases`, from the key at `path` (created when an alias declares a
/// shape and there is none); none, and no file touched, when no alias declares one.
pub fn shaped_placeholders(
    path: &Path,
    aliases: &AliasFile,
) -> Result<ShapedPlaceholders, PlaceholderKeyError> {
    if aliases.aliases.iter().all(|a| a.placeholder.is_none()) {
        return Ok(ShapedPlaceholders::default());
    }
    let key = load_or_create(path)?;
    Ok(ShapedPlaceholders::derive(&key, aliases)?)
}

/// [`shaped_placeholders`] for a reader that writes nothing (`mint policy explain`): without a
/// key file no shaped placeholder was ever handed out, so there is none to recognize.
pub fn existing_shaped_placeholders(
    path: &Path,
    aliases: &AliasFile,
) -> Result<ShapedPlaceholders, PlaceholderKeyError> {
    if aliases.aliases.iter().all(|a| a.placeholder.is_none()) {
        return Ok(ShapedPlaceholders::default());
    }
    match read(path) {
        Ok(key) => Ok(ShapedPlaceholders::derive(&key, aliases)?),
        Err(PlaceholderKeyError::File(error)) if error.is_not_found() => {
            Ok(ShapedPlaceholders::default())
        }
        Err(error) => Err(error),
    }
}

/// Reads the key at `path` as the broker would, creating nothing (`mint doctor`).
pub fn check_existing(path: &Path) -> Result<(), PlaceholderKeyError> {
    read(path).map(drop)
}

fn read(path: &Path) -> Result<PlaceholderKey, PlaceholderKeyError> {
    let mut trusted = open_trusted(path)?;
    // Room for the whole bounded read up front: a string that grew would free unwiped copies of
    // the key.
    let mut text = Zeroizing::new(String::with_capacity(MAX_KEY_FILE as usize));
    (&mut trusted.file)
        .take(MAX_KEY_FILE)
        .read_to_string(&mut text)
        .map_err(|_| PlaceholderKeyError::Malformed {
            path: path.to_path_buf(),
        })?;
    PlaceholderKey::from_text(&text).ok_or_else(|| PlaceholderKeyError::Malformed {
        path: path.to_path_buf(),
    })
}

/// The most of a placeholder key file read (the key is 64 hex digits and a newline).
const MAX_KEY_FILE: u64 = 1024;

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use mint_policy::placeholder_shape::PlaceholderShape;

    use super::*;

    #[test]
    fn created_once_0600_and_reused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        let path = dir.path().join("placeholder.key");
        let first = load_or_create(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let again = load_or_create(&path).unwrap();
        let shape = PlaceholderShape::parse("sk-:48").unwrap();
        assert_eq!(first.derive("a", &shape), again.derive("a", &shape));
        std::fs::write(&path, "not a key\n").unwrap();
        assert!(matches!(
            load_or_create(&path),
            Err(PlaceholderKeyError::Malformed { .. })
        ));
    }

    #[test]
    fn no_shape_touches_no_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("placeholder.key");
        let shaped = shaped_placeholders(&path, &AliasFile::default()).unwrap();
        assert!(shaped.is_empty());
        assert!(!path.exists());
    }
}
