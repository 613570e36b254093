//! Durations as operators write them: a positive whole number followed by `ms`, `s`, `m`, `h`,
//! `d` or `w`, at most 366 days. A use that needs whole seconds (a limit window, a capability's
//! lifetime) refuses less than a second itself, as an approval timeout refuses values outside
//! its range.
//!
//! The one duration grammar of Mint: limit windows (`per: 1h`) and approval timeouts here, and in
//! the broker every duration flag (`--ttl 24h`, `--connect-timeout 10s`, `mint approvals
//! --for 1w`), so a value accepted in one place is accepted in all.

use std::time::Duration;

/// The longest duration accepted: 366 days.
pub const MAX_DURATION: Duration = Duration::from_secs(366 * 86_400);

/// How the grammar is told to a user who wrote something else.
pub const DURATION_HINT: &str =
    "a whole number with a unit ms, s, m, h, d or w, up to 366d, such as `30s`, `1h` or `1w`";

/// Parses `500ms`, `30s`, `5m`, `1h`, `7d`, `2w`. Zero, fractions, other units, combinations
/// (`1h30m`) and values past 366 days are refused.
pub fn parse_duration(text: &str) -> Option<Duration> {
    let split = text.find(|c: char| !c.is_ascii_digit())?;
    let (digits, unit) = text.split_at(split);
    if digits.is_empty() || digits.len() > 12 {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    if unit == "ms" {
        let duration = Duration::from_millis(n);
        return (n > 0 && duration <= MAX_DURATION).then_some(duration);
    }
    let seconds = match unit {
        "s" => n,
        "m" => n.checked_mul(60)?,
        "h" => n.checked_mul(3_600)?,
        "d" => n.checked_mul(86_400)?,
        "w" => n.checked_mul(604_800)?,
        _ => return None,
    };
    let duration = Duration::from_secs(seconds);
    (seconds > 0 && duration <= MAX_DURATION).then_some(duration)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_units() {
        assert_eq!(parse_duration("30s"), Some(Duration::from_secs(30)));
        assert_eq!(parse_duration("5m"), Some(Duration::from_secs(300)));
        assert_eq!(parse_duration("1h"), Some(Duration::from_secs(3_600)));
        assert_eq!(parse_duration("7d"), Some(Duration::from_secs(604_800)));
        assert_eq!(parse_duration("1w"), parse_duration("7d"));
        assert_eq!(parse_duration("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(
            parse_duration("52w"),
            Some(Duration::from_secs(52 * 604_800))
        );
        for bad in [
            "",
            "h",
            "0s",
            "1",
            "1.5h",
            "-1h",
            "1H",
            "1 h",
            "53w",
            "0ms",
            "1.5ms",
            "10 s",
            "367d",
            "99999999999999d",
            "1h30m",
        ] {
            assert_eq!(parse_duration(bad), None, "{bad}");
        }
    }
}
