//! Durations as operators write them: a positive whole number followed by `s`, `m`, `h` or `d`.
//!
//! Used by limit windows (`per: 1h`) and, in the broker, by capability lifetimes (`--ttl 24h`).

use std::time::Duration;

/// The longest duration accepted: 366 days.
pub const MAX_DURATION: Duration = Duration::from_secs(366 * 86_400);

/// Parses `30s`, `5m`, `1h`, `7d`. Zero, fractions, other units and values past a year are
/// refused.
pub fn parse_duration(text: &str) -> Option<Duration> {
    let split = text.find(|c: char| !c.is_ascii_digit())?;
    let (digits, unit) = text.split_at(split);
    if digits.is_empty() || digits.len() > 12 {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    let seconds = match unit {
        "s" => n,
        "m" => n.checked_mul(60)?,
        "h" => n.checked_mul(3_600)?,
        "d" => n.checked_mul(86_400)?,
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
        for bad in [
            "",
            "h",
            "0s",
            "1",
            "1.5h",
            "-1h",
            "1H",
            "1 h",
            "1w",
            "367d",
            "99999999999999d",
            "1h30m",
        ] {
            assert_eq!(parse_duration(bad), None, "{bad}");
        }
    }
}
