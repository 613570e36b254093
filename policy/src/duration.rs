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

/// Writes `duration` in the grammar [`parse_duration`] reads, with the largest unit that divides
/// it exactly (`90s`, `2h`, `1w`, `1500ms`), so an error can show a value as the operator wrote it.
/// A duration with a part smaller than a millisecond (never parsed, only computed) is written in
/// milliseconds, rounded down, or as `0ms`.
pub fn format_duration(duration: Duration) -> String {
    let millis = duration.as_millis();
    if millis == 0 || !millis.is_multiple_of(1_000) {
        return format!("{millis}ms");
    }
    let seconds = millis / 1_000;
    for (unit, length) in [("w", 604_800), ("d", 86_400), ("h", 3_600), ("m", 60)] {
        if seconds.is_multiple_of(length) {
            return format!("{}{unit}", seconds / length);
        }
    }
    format!("{seconds}s")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_in_the_largest_exact_unit_and_reads_back() {
        for (duration, text) in [
            (Duration::from_millis(1), "1ms"),
            (Duration::from_millis(1_500), "1500ms"),
            (Duration::from_secs(1), "1s"),
            (Duration::from_secs(90), "90s"),
            (Duration::from_secs(120), "2m"),
            (Duration::from_secs(5_400), "90m"),
            (Duration::from_secs(7_200), "2h"),
            (Duration::from_secs(86_400), "1d"),
            (Duration::from_secs(604_800), "1w"),
            (Duration::from_secs(10 * 86_400), "10d"),
            (MAX_DURATION, "366d"),
        ] {
            assert_eq!(format_duration(duration), text);
            assert_eq!(parse_duration(text), Some(duration), "{text}");
        }
        assert_eq!(format_duration(Duration::ZERO), "0ms");
        assert_eq!(format_duration(Duration::from_micros(1_500)), "1ms");
    }

    proptest::proptest! {
        #[test]
        fn every_parsed_duration_formats_back_to_itself(millis in 1u64..=MAX_DURATION.as_millis() as u64) {
            let duration = Duration::from_millis(millis);
            proptest::prop_assert_eq!(parse_duration(&format_duration(duration)), Some(duration));
        }
    }

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
