//! Fuzzes request normalization: the target builder, the path normalizer, the host reader and
//! the host pattern reader.
//!
//! Input is split at the first two NUL bytes into scheme, authority and path-and-query; the
//! whole input also goes to each reader on its own. Beyond "never panics", it checks that every
//! success is a fixed point: normalizing or parsing the canonical output gives the same value.

#![no_main]

use libfuzzer_sys::fuzz_target;
use mint_policy::host::{Host, HostPattern, HostPatternError};
use mint_policy::normalize::{normalize_path, normalize_target};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };

    let mut parts = text.splitn(3, '\0');
    let scheme = parts.next().unwrap_or_default();
    let authority = parts.next().unwrap_or_default();
    let rest = parts.next().unwrap_or_default();
    if let Ok(target) = normalize_target(scheme, authority, rest) {
        let mut path_and_query = target.path.clone();
        if let Some(query) = &target.query {
            path_and_query.push('?');
            path_and_query.push_str(query);
        }
        let again = normalize_target(target.scheme.as_str(), &target.authority(), &path_and_query);
        assert_eq!(again.as_ref(), Ok(&target), "target is not a fixed point");
        let url = target.url();
        assert!(!url.contains(|c: char| c.is_ascii_control() || c == ' ' || c == '#'));
        assert!(url.is_ascii());
    }

    if let Ok(path) = normalize_path(text) {
        assert_eq!(
            normalize_path(&path).as_ref(),
            Ok(&path),
            "path is not a fixed point"
        );
        for bad in [
            "//", "/./", "/../", ";", "%2F", "%2f", "%5C", "%5c", "\\", "#", "?",
        ] {
            assert!(!path.contains(bad), "normalized path holds {bad:?}");
        }
        assert!(!path.ends_with("/.") && !path.ends_with("/.."));
    }

    if let Ok(host) = Host::parse_request(text) {
        let canonical = host.as_text();
        assert_eq!(
            Host::parse_request(&canonical).as_ref(),
            Ok(&host),
            "host is not a fixed point"
        );
        assert_eq!(
            HostPattern::parse(&canonical),
            Ok(HostPattern::Exact(host.clone()))
        );
        assert!(canonical.is_ascii() && canonical.len() <= 253);
    }

    match HostPattern::parse(text) {
        Ok(pattern) => {
            assert_eq!(
                pattern.as_text(),
                text,
                "strict parse accepted a non-canonical text"
            );
            assert_eq!(
                HostPattern::parse(&pattern.as_text()).as_ref(),
                Ok(&pattern)
            );
            if let HostPattern::Wildcard { suffix } = &pattern {
                let host = Host::Name(format!("a.{suffix}"));
                assert!(pattern.matches(&host));
                assert!(!pattern.matches(&Host::Name(suffix.clone())));
            }
        }
        Err(HostPatternError::NotCanonical { canonical }) => {
            assert!(
                HostPattern::parse(&canonical).is_ok(),
                "suggested text does not parse"
            );
        }
        Err(_) => {}
    }
});
