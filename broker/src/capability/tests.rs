//! Unit tests of capability issuing, the file format, verification and reloading.

use std::os::unix::fs::PermissionsExt;

use secrecy::ExposeSecret;

use super::*;

const T0: u64 = 1_750_000_000;

fn at(secs: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(secs)
}

fn request(agent: &str, ttl: u64, aliases: &[&str]) -> IssueRequest {
    IssueRequest {
        agent: AgentName::new(agent).unwrap(),
        ttl: Duration::from_secs(ttl),
        aliases: aliases.iter().map(|a| (*a).to_owned()).collect(),
    }
}

/// Issues one capability and returns the file and the token text.
fn issued(ttl: u64) -> (CapabilityFile, String) {
    let mut file = CapabilityFile::default();
    let (token, _) = file.issue(request("mino", ttl, &[]), at(T0)).unwrap();
    let text = token.as_secret().expose_secret().to_owned();
    (file, text)
}

#[test]
fn tokens_have_the_documented_shape() {
    let (file, token) = issued(3600);
    assert_eq!(token.len(), TOKEN_LEN);
    let rest = token.strip_prefix("mint_cap_").unwrap();
    let (id, secret) = rest.split_once('_').unwrap();
    assert_eq!(id.len(), 12);
    assert_eq!(secret.len(), 64);
    assert!(!secret.contains('_'));
    assert!(
        id.bytes()
            .chain(secret.bytes())
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    );
    // The id fits the audit record's grammar.
    assert!(CapabilityId::new(id).is_ok());
    let capability = &file.capabilities()[0];
    assert_eq!(capability.id.as_str(), id);
    assert_eq!(
        capability.token_sha256,
        <[u8; 32]>::from(Sha256::digest(token.as_bytes()))
    );
    assert_eq!(capability.created, at(T0));
    assert_eq!(capability.expires, at(T0 + 3600));
}

#[test]
fn tokens_and_ids_are_unique() {
    let mut file = CapabilityFile::default();
    let mut tokens = HashSet::new();
    for _ in 0..200 {
        let (token, _) = file.issue(request("mino", 60, &[]), at(T0)).unwrap();
        assert!(tokens.insert(token.as_secret().expose_secret().to_owned()));
    }
    let ids: HashSet<&str> = file.capabilities().iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids.len(), 200);
}

#[test]
fn the_right_token_verifies_with_its_grant() {
    let mut file = CapabilityFile::default();
    let (token, stored) = file
        .issue(request("ci-7", 600, &["npm", "github", "npm"]), at(T0 + 5))
        .unwrap();
    let id = stored.id.clone();
    let token = token.as_secret().expose_secret().to_owned();
    let grant = file.index().verify(&token, at(T0 + 6)).unwrap();
    assert_eq!(grant.id, id);
    assert_eq!(grant.agent.as_str(), "ci-7");
    assert_eq!(grant.aliases, ["github", "npm"]);
    assert!(grant.allows_alias("npm"));
    assert!(!grant.allows_alias("slack"));
    let unnarrowed = CapabilityGrant {
        aliases: Vec::new(),
        ..grant
    };
    assert!(unnarrowed.allows_alias("anything"));
}

#[test]
fn expiry_is_exact_to_the_second() {
    let (file, token) = issued(3600);
    let index = file.index();
    assert!(index.verify(&token, at(T0 + 3599)).is_ok());
    assert_eq!(index.verify(&token, at(T0 + 3600)), Err(CapabilityRejected));
    assert_eq!(index.verify(&token, at(T0 + 3601)), Err(CapabilityRejected));
    assert_eq!(
        file.capabilities()[0].status(at(T0 + 3601)),
        CapabilityStatus::Expired
    );
}

#[test]
fn revoked_tokens_fail() {
    let (mut file, token) = issued(3600);
    let id = file.capabilities()[0].id.as_str().to_owned();
    assert!(file.revoke(&id).unwrap());
    assert!(
        !file.revoke(&id).unwrap(),
        "second revoke reports no change"
    );
    assert_eq!(
        file.index().verify(&token, at(T0 + 1)),
        Err(CapabilityRejected)
    );
    assert_eq!(
        file.capabilities()[0].status(at(T0 + 1)),
        CapabilityStatus::Revoked
    );
    assert!(matches!(
        file.revoke("000000000000"),
        Err(CapabilityFileError::UnknownId { .. })
    ));
}

#[test]
fn every_forgery_fails_the_same_way() {
    let mut file = CapabilityFile::default();
    let (a, _) = file.issue(request("mino", 3600, &[]), at(T0)).unwrap();
    let (b, _) = file.issue(request("other", 3600, &[]), at(T0)).unwrap();
    let a = a.as_secret().expose_secret().to_owned();
    let b = b.as_secret().expose_secret().to_owned();
    let (a_id, a_secret) = a["mint_cap_".len()..].split_once('_').unwrap();
    let (b_id, b_secret) = b["mint_cap_".len()..].split_once('_').unwrap();
    let index = file.index();
    let now = at(T0 + 1);
    let mut flipped = a.clone().into_bytes();
    let last = flipped.len() - 1;
    flipped[last] = if flipped[last] == b'0' { b'1' } else { b'0' };
    let forgeries = [
        // Wrong id with the right secret, and the right id with a wrong secret.
        format!("mint_cap_{b_id}_{a_secret}"),
        format!("mint_cap_{a_id}_{b_secret}"),
        // An id nobody has, with a real secret.
        format!("mint_cap_ffffffffffff_{a_secret}"),
        // Truncated, extended, tampered.
        a[..a.len() - 1].to_owned(),
        a[..20].to_owned(),
        format!("{a}0"),
        format!("{a}_"),
        format!(" {a}"),
        String::from_utf8(flipped).unwrap(),
        a.to_uppercase(),
        a.replacen("mint_cap_", "mint_cap__", 1),
        a.replacen("mint_cap_", "", 1),
        // Not tokens at all.
        String::new(),
        "mint_cap_".to_owned(),
        "Bearer x".to_owned(),
        "x".repeat(10_000),
    ];
    for forgery in &forgeries {
        assert_eq!(
            index.verify(forgery, now),
            Err(CapabilityRejected),
            "{forgery:.40}"
        );
    }
    assert!(index.verify(&a, now).is_ok());
    assert!(index.verify(&b, now).is_ok());
}

#[test]
fn the_file_round_trips_and_holds_no_token() {
    let mut file = CapabilityFile::default();
    let (token, _) = file
        .issue(request("mino", 86_400, &["github"]), at(T0))
        .unwrap();
    let token = token.as_secret().expose_secret().to_owned();
    file.issue(request("ci.runner_1", 60, &[]), at(T0)).unwrap();
    let id = file.capabilities()[1].id.as_str().to_owned();
    file.revoke(&id).unwrap();
    let text = file.to_yaml();
    assert!(!text.contains(&token));
    let secret = token.rsplit('_').next().unwrap();
    assert!(!text.contains(secret));
    assert!(text.starts_with("# Mint capabilities"));
    assert!(text.contains("created: 2025-06-15T15:06:40Z"), "{text}");
    assert!(text.contains("expires: 2025-06-16T15:06:40Z"), "{text}");
    let parsed = CapabilityFile::parse(text.as_bytes(), "capabilities.yaml").unwrap();
    assert_eq!(parsed, file);
    assert!(parsed.index().verify(&token, at(T0 + 1)).is_ok());
    assert_eq!(
        CapabilityFile::default().to_yaml().lines().last(),
        Some("capabilities: []")
    );
}

#[test]
fn broken_files_are_refused_without_quoting_them() {
    let good = {
        let mut file = CapabilityFile::default();
        file.issue(request("mino", 60, &[]), at(T0)).unwrap();
        file.to_yaml()
    };
    let cases: [(String, &str); 8] = [
        (
            good.replace("revoked: false", "revoked: false\n  sekret: canaryvalue"),
            "unknown field",
        ),
        (
            good.replace("version: 1", "version: 2"),
            "unsupported `version`",
        ),
        (good.replace("  agent: mino\n", ""), "missing field `agent`"),
        (
            good.replace("agent: mino", "agent: canary value"),
            "`agent` is not",
        ),
        (
            good.replace("revoked: false", "revoked: canaryvalue"),
            "wrong type",
        ),
        (good.replace("Z\n", "canaryvalue\n"), "RFC 3339"),
        ("capabilities: [".to_owned(), "not a capabilities file"),
        (
            format!("{good}{}", good.split_once("capabilities:\n").unwrap().1),
            "same id",
        ),
    ];
    for (text, expected) in &cases {
        let err = CapabilityFile::parse(text.as_bytes(), "caps.yaml").unwrap_err();
        let message = err.to_string();
        assert!(message.contains(expected), "{expected}: {message}\n{text}");
        assert!(
            message.starts_with("capabilities file `caps.yaml`"),
            "{message}"
        );
        assert!(!message.contains("canary"), "{message}");
    }
}

#[test]
fn store_sees_new_and_revoked_capabilities() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("capabilities.yaml");
    let (mut file, token) = issued(3600);
    file.save(&path).unwrap();
    assert_eq!(
        std::fs::metadata(&path).unwrap().permissions().mode() & 0o7777,
        0o600
    );
    let store = CapabilityStore::open(&path)
        .unwrap()
        .with_check_interval(Duration::ZERO);
    assert!(store.verify(&token, at(T0 + 1)).is_ok());

    let (second, _) = file.issue(request("ci", 3600, &[]), at(T0)).unwrap();
    let second = second.as_secret().expose_secret().to_owned();
    assert_eq!(store.verify(&second, at(T0 + 1)), Err(CapabilityRejected));
    file.save(&path).unwrap();
    assert!(store.verify(&second, at(T0 + 1)).is_ok());

    let id = file.capabilities()[0].id.as_str().to_owned();
    file.revoke(&id).unwrap();
    file.save(&path).unwrap();
    assert_eq!(store.verify(&token, at(T0 + 1)), Err(CapabilityRejected));
    assert_eq!(store.refresh().unwrap(), Refresh::Unchanged);

    // A broken file keeps the last good set; a deleted one empties it.
    std::fs::write(&path, "capabilities: [").unwrap();
    assert!(store.refresh().is_err());
    assert!(store.verify(&second, at(T0 + 1)).is_ok());
    std::fs::remove_file(&path).unwrap();
    assert_eq!(store.refresh().unwrap(), Refresh::Emptied);
    assert_eq!(store.verify(&second, at(T0 + 1)), Err(CapabilityRejected));
}

/// An open WebSocket asks the store where its capability stands, by id: the store reloads the
/// file for it, as for a request, so a revocation, an expiry and a removal are seen.
#[test]
fn store_reports_a_capabilitys_standing_by_id() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("capabilities.yaml");
    let (mut file, _) = issued(3600);
    file.save(&path).unwrap();
    let store = CapabilityStore::open(&path)
        .unwrap()
        .with_check_interval(Duration::ZERO);
    let id = file.capabilities()[0].id.as_str().to_owned();
    assert_eq!(
        store.status(&id, at(T0 + 1)),
        Some(CapabilityStatus::Active)
    );
    assert_eq!(
        store.status(&id, at(T0 + 3600)),
        Some(CapabilityStatus::Expired)
    );
    assert_eq!(store.status("0123456789ab", at(T0 + 1)), None);
    file.revoke(&id).unwrap();
    file.save(&path).unwrap();
    assert_eq!(
        store.status(&id, at(T0 + 1)),
        Some(CapabilityStatus::Revoked)
    );
    std::fs::remove_file(&path).unwrap();
    assert_eq!(store.status(&id, at(T0 + 1)), None);
}

#[test]
fn store_respects_its_check_interval() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("capabilities.yaml");
    let (mut file, _) = issued(3600);
    file.save(&path).unwrap();
    let store = CapabilityStore::open(&path)
        .unwrap()
        .with_check_interval(Duration::from_secs(3600));
    let (token, _) = file.issue(request("ci", 3600, &[]), at(T0)).unwrap();
    let token = token.as_secret().expose_secret().to_owned();
    file.save(&path).unwrap();
    // Not looked at yet: the interval has not passed.
    assert_eq!(store.verify(&token, at(T0 + 1)), Err(CapabilityRejected));
    assert_eq!(store.refresh().unwrap(), Refresh::Reloaded);
    assert!(store.verify(&token, at(T0 + 1)).is_ok());
}

#[test]
fn store_refuses_a_file_others_may_write() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("capabilities.yaml");
    CapabilityFile::default().save(&path).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
    let err = CapabilityStore::open(&path).unwrap_err().to_string();
    assert!(
        err.contains(&format!("chmod 600 {}", path.display())),
        "{err}"
    );
}

#[test]
fn debug_output_holds_no_digest_or_token() {
    let (file, token) = issued(60);
    let secret = token.rsplit('_').next().unwrap();
    let digest = hex(&file.capabilities()[0].token_sha256);
    let mut issued_file = CapabilityFile::default();
    let (fresh, _) = issued_file.issue(request("mino", 60, &[]), at(T0)).unwrap();
    for text in [
        format!("{file:?}"),
        format!("{:?}", file.index()),
        format!("{fresh:?}"),
    ] {
        assert!(!text.contains(secret), "{text}");
        assert!(!text.contains(&digest), "{text}");
    }
    assert_eq!(format!("{fresh:?}"), "IssuedToken(<redacted>)");
}

#[test]
fn a_version_that_failed_to_load_is_tried_again() {
    // The revoked file cannot be loaded at first (its directory is open to others), then can:
    // the file itself did not change in between, and the revocation must still take effect.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("capabilities.yaml");
    let (mut file, token) = issued(3600);
    file.save(&path).unwrap();
    let store = CapabilityStore::open(&path)
        .unwrap()
        .with_check_interval(Duration::ZERO);
    assert!(store.verify(&token, at(T0 + 1)).is_ok());

    let id = file.capabilities()[0].id.as_str().to_owned();
    file.revoke(&id).unwrap();
    file.save(&path).unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    assert!(store.refresh().is_err());
    assert!(
        store.verify(&token, at(T0 + 1)).is_ok(),
        "the last good set stays"
    );

    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    assert_eq!(store.refresh().unwrap(), Refresh::Reloaded);
    assert_eq!(store.verify(&token, at(T0 + 1)), Err(CapabilityRejected));
}
