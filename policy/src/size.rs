//! Sizes as operators write them: a whole number of bytes, or a whole number followed by a unit,
//! `KiB`, `MiB`, `GiB` (powers of 1024) or `kB`, `MB`, `GB` (powers of 1000), the unit's letters
//! in any case; `B` is bytes.
//!
//! The one size grammar of Mint: the broker's size flags (`--max-request-body 10MiB`) and
//! `MINT_AUDIT_ROTATE_BYTES` read it.

/// How the grammar is told to a user who wrote something else.
pub const SIZE_HINT: &str =
    "a whole number of bytes, or one with a unit B, KiB, MiB, GiB, kB, MB or GB, such as `10MiB`";

/// Parses `1048576`, `512KiB`, `10MiB`, `1GiB`, `100kB`, `5MB`. Fractions, negative numbers,
/// spaces, other units and values past `u64::MAX` bytes are refused.
pub fn parse_size(text: &str) -> Option<u64> {
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    if digits.is_empty() || digits.len() > 20 {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    let factor: u64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kib" => 1 << 10,
        "mib" => 1 << 20,
        "gib" => 1 << 30,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        _ => return None,
    };
    n.checked_mul(factor)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_bytes_and_units() {
        assert_eq!(parse_size("0"), Some(0));
        assert_eq!(parse_size("1048576"), Some(1 << 20));
        assert_eq!(parse_size("10MiB"), Some(10 << 20));
        assert_eq!(parse_size("10mib"), Some(10 << 20));
        assert_eq!(parse_size("512KiB"), Some(512 << 10));
        assert_eq!(parse_size("1GiB"), Some(1 << 30));
        assert_eq!(parse_size("100kB"), Some(100_000));
        assert_eq!(parse_size("5MB"), Some(5_000_000));
        assert_eq!(parse_size("7B"), Some(7));
        for bad in [
            "",
            "MiB",
            "1.5MiB",
            "-1",
            "10 MiB",
            "10M",
            "10Mi",
            "1TiB",
            "x",
            "99999999999GiB",
        ] {
            assert_eq!(parse_size(bad), None, "{bad}");
        }
    }
}
