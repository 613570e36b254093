//! Durations and sizes given as command-line flags, read with the one grammar of each in
//! `mint-policy` ([`parse_duration`], [`parse_size`]), so `1w` or `10MiB` means the same in a
//! flag, a policy file (`per: 1w`) and an environment variable.

use std::time::Duration;

use mint_policy::duration::{DURATION_HINT, parse_duration};
use mint_policy::size::{SIZE_HINT, parse_size};

/// A flag value that is not a duration or a size. Shows at most 32 characters of the value.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum QuantityError {
    /// Not a duration.
    #[error("invalid duration `{0}`: write {DURATION_HINT}")]
    Duration(String),
    /// Not a size.
    #[error("invalid size `{0}`: write {SIZE_HINT}")]
    Size(String),
}

/// A duration flag's value parser (`value_parser = quantity::duration`).
pub fn duration(text: &str) -> Result<Duration, QuantityError> {
    parse_duration(text).ok_or_else(|| QuantityError::Duration(shown(text)))
}

/// A size flag's value parser (`value_parser = quantity::size`).
pub fn size(text: &str) -> Result<u64, QuantityError> {
    parse_size(text).ok_or_else(|| QuantityError::Size(shown(text)))
}

fn shown(text: &str) -> String {
    text.chars().take(32).collect()
}
