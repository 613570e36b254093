//! `mint ca export [--bundle]` and `mint ca rotate` through the real binary, with the CA's
//! properties read back by `openssl x509` (issue 15).

#![expect(clippy::unwrap_used, reason = "test code")]

#[path = "support/mint.rs"]
mod support;

use std::path::Path;
use std::process::Command;

use support::{fails, mint, mode, ok};

/// `openssl x509 -noout -text` of the PEM `cert`.
fn openssl_text(dir: &Path, cert: &str) -> String {
    let path = dir.join("under-test.pem");
    std::fs::write(&path, cert).unwrap();
    let output = Command::new("openssl")
        .args(["x509", "-noout", "-text", "-in"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

#[test]
fn issue_15_export_prints_a_p256_ca_certificate_and_never_the_key() {
    let dir = tempfile::tempdir().unwrap();
    ok(mint(dir.path()).arg("init"));
    let out = ok(mint(dir.path()).args(["ca", "export"]));
    assert!(
        out.stdout.starts_with("-----BEGIN CERTIFICATE-----\n"),
        "{}",
        out.stdout
    );
    assert_eq!(out.stdout.matches("BEGIN CERTIFICATE").count(), 1);
    assert!(!out.stdout.contains("PRIVATE"), "{}", out.stdout);
    assert_eq!(
        out.stdout,
        std::fs::read_to_string(dir.path().join(".mint/ca.pem")).unwrap()
    );
    let text = openssl_text(dir.path(), &out.stdout);
    assert!(
        text.contains("X509v3 Basic Constraints: critical"),
        "{text}"
    );
    assert!(text.contains("CA:TRUE, pathlen:0"), "{text}");
    assert!(text.contains("Certificate Sign, CRL Sign"), "{text}");
    assert!(text.contains("ASN1 OID: prime256v1"), "{text}");
    assert!(text.contains("ecdsa-with-SHA256"), "{text}");
    assert!(
        text.contains("Subject: O = Mint, CN = Mint interception CA"),
        "{text}"
    );
    // One year, checked by openssl's own reading of the dates.
    let checkend = |seconds: u64| {
        let path = dir.path().join("under-test.pem");
        Command::new("openssl")
            .args(["x509", "-noout", "-checkend", &seconds.to_string(), "-in"])
            .arg(&path)
            .status()
            .unwrap()
            .success()
    };
    assert!(checkend(364 * 24 * 3600), "valid for most of a year");
    assert!(!checkend(366 * 24 * 3600), "not past a year");
}

#[test]
fn issue_15_export_bundle_puts_the_system_roots_first() {
    let system = Path::new("/etc/ssl/certs/ca-certificates.crt");
    if !system.is_file() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    ok(mint(dir.path()).arg("init"));
    let ca = std::fs::read_to_string(dir.path().join(".mint/ca.pem")).unwrap();
    let out = ok(mint(dir.path()).args(["ca", "export", "--bundle"]));
    let roots = std::fs::read_to_string(system).unwrap();
    assert!(out.stdout.starts_with(&roots), "the system bundle first");
    assert!(out.stdout.ends_with(&ca), "Mint's CA last");
    assert!(!out.stdout.contains("PRIVATE"));
}

#[test]
fn issue_15_rotate_replaces_the_ca_and_keeps_the_modes() {
    let dir = tempfile::tempdir().unwrap();
    ok(mint(dir.path()).arg("init"));
    let home = dir.path().join(".mint");
    let before = std::fs::read_to_string(home.join("ca.pem")).unwrap();
    let key_before = std::fs::read(home.join("ca.key")).unwrap();
    let out = ok(mint(dir.path()).args(["ca", "rotate"]));
    assert!(
        out.stdout.contains("Restart `mint serve`"),
        "{}",
        out.stdout
    );
    let after = std::fs::read_to_string(home.join("ca.pem")).unwrap();
    assert_ne!(before, after);
    assert_ne!(key_before, std::fs::read(home.join("ca.key")).unwrap());
    assert_eq!(mode(&home.join("ca.pem")), 0o644);
    assert_eq!(mode(&home.join("ca.key")), 0o600);
    assert_eq!(ok(mint(dir.path()).args(["ca", "export"])).stdout, after);
}

#[test]
fn issue_15_export_refuses_a_missing_or_unsafe_ca() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let out = fails(mint(dir.path()).args(["ca", "export"]));
    assert!(out.stderr.contains("mint init"), "{}", out.stderr);
    ok(mint(dir.path()).arg("init"));
    let key = dir.path().join(".mint/ca.key");
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = fails(mint(dir.path()).args(["ca", "export"]));
    assert!(
        out.stderr.contains(&format!("chmod 600 {}", key.display())),
        "{}",
        out.stderr
    );
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::remove_file(&key).unwrap();
    let out = fails(mint(dir.path()).args(["ca", "export"]));
    assert!(out.stderr.contains("does not;"), "{}", out.stderr);
    assert!(out.stderr.contains("mint ca rotate"), "{}", out.stderr);
}

/// `mint serve` stops before it listens on a CA it must not use: a key others may read, a key
/// another user owns, a certificate without its key, a certificate that is not a CA. Each exits
/// 2 with one line naming the file, and no error shows a byte of the key.
#[test]
fn issue_15_serve_refuses_a_ca_it_must_not_use() {
    use std::os::unix::fs::PermissionsExt;
    let serve = |dir: &Path| {
        let mut cmd = mint(dir);
        cmd.args(["serve", "--listen", "127.0.0.1:0"]);
        fails(&mut cmd)
    };
    let dir = tempfile::tempdir().unwrap();
    ok(mint(dir.path()).arg("init"));
    let key = dir.path().join(".mint/ca.key");
    let cert = dir.path().join(".mint/ca.pem");
    let key_text = std::fs::read_to_string(&key).unwrap();
    let key_body: String = key_text
        .lines()
        .filter(|line| !line.starts_with("-----"))
        .collect();
    let leaked = |text: &str| {
        key_body
            .as_bytes()
            .chunks(16)
            .any(|piece| text.contains(std::str::from_utf8(piece).unwrap()))
    };

    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = serve(dir.path());
    assert!(
        out.stderr.contains(&key.display().to_string()),
        "{}",
        out.stderr
    );
    assert!(!leaked(&out.stderr), "the key was shown");
    // Said once: the message was also printed again as its own source.
    assert_eq!(out.stderr.matches("chmod 600").count(), 1, "{}", out.stderr);
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();

    std::os::unix::fs::chown(&key, Some(65_534), None).unwrap();
    let out = serve(dir.path());
    assert!(
        out.stderr.contains(&key.display().to_string()),
        "{}",
        out.stderr
    );
    assert!(!leaked(&out.stderr), "the key was shown");
    std::os::unix::fs::chown(&key, Some(0), None).unwrap();

    // A certificate that is not a CA, with its own key: not signed with.
    let made = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-subj",
            "/CN=not-a-ca",
            "-addext",
            "basicConstraints=critical,CA:FALSE",
            "-days",
            "2",
            "-keyout",
        ])
        .arg(dir.path().join("leaf.key"))
        .arg("-out")
        .arg(dir.path().join("leaf.crt"))
        .output()
        .unwrap();
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let original_cert = std::fs::read(&cert).unwrap();
    std::fs::write(&cert, std::fs::read(dir.path().join("leaf.crt")).unwrap()).unwrap();
    std::fs::write(&key, std::fs::read(dir.path().join("leaf.key")).unwrap()).unwrap();
    let out = serve(dir.path());
    assert!(
        out.stderr.contains(&cert.display().to_string()),
        "{}",
        out.stderr
    );
    assert_eq!(
        out.stderr.matches("not a certificate authority").count(),
        1,
        "{}",
        out.stderr
    );

    // The certificate alone: its key is gone.
    std::fs::write(&cert, original_cert).unwrap();
    std::fs::remove_file(&key).unwrap();
    let out = serve(dir.path());
    assert!(out.stderr.contains("mint ca rotate"), "{}", out.stderr);
    assert!(!leaked(&out.stderr), "the key was shown");
}

#[test]
fn issue_15_serve_refuses_an_expired_ca() {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose};
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    ok(mint(dir.path()).arg("init"));
    // A CA in every other way Mint's: P-256, CA:TRUE, keyCertSign; it ended a month ago.
    let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let mut params = CertificateParams::default();
    params
        .distinguished_name
        .push(DnType::CommonName, "expired test CA");
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now - time::Duration::days(400);
    params.not_after = now - time::Duration::days(30);
    let cert = params.self_signed(&key).unwrap();
    let key_path = dir.path().join(".mint/ca.key");
    let cert_path = dir.path().join(".mint/ca.pem");
    std::fs::write(&cert_path, cert.pem()).unwrap();
    std::fs::write(&key_path, key.serialize_pem()).unwrap();
    std::fs::set_permissions(&key_path, std::fs::Permissions::from_mode(0o600)).unwrap();
    // openssl agrees that it has expired.
    let checked = Command::new("openssl")
        .args(["x509", "-noout", "-checkend", "0", "-in"])
        .arg(&cert_path)
        .output()
        .unwrap();
    assert!(!checked.status.success(), "{checked:?}");

    let mut cmd = mint(dir.path());
    cmd.args(["serve", "--listen", "127.0.0.1:0"]);
    let out = fails(&mut cmd);
    assert!(out.stderr.contains("expired"), "{}", out.stderr);
    assert_eq!(
        out.stderr.matches("mint ca rotate").count(),
        1,
        "{}",
        out.stderr
    );
    let key_body: String = key
        .serialize_pem()
        .lines()
        .filter(|line| !line.starts_with("-----"))
        .collect();
    assert!(
        !key_body
            .as_bytes()
            .chunks(16)
            .any(|piece| out.stderr.contains(std::str::from_utf8(piece).unwrap())),
        "the key was shown"
    );
    // Nothing was replaced: the operator decides when to rotate.
    assert_eq!(std::fs::read_to_string(&cert_path).unwrap(), cert.pem());
}

/// The subtrees `openssl x509 -text` lists under `Permitted:` and `Excluded:` of a critical
/// `X509v3 Name Constraints` extension; `None` when the certificate has no such extension.
fn name_constraints(text: &str) -> Option<(Vec<String>, Vec<String>)> {
    let mut lines = text
        .lines()
        .skip_while(|line| !line.contains("X509v3 Name Constraints"));
    let header = lines.next()?;
    assert!(
        header.contains("X509v3 Name Constraints: critical"),
        "{text}"
    );
    let (mut permitted, mut excluded) = (Vec::new(), Vec::new());
    let mut list = None;
    for line in lines {
        match line.trim() {
            "Permitted:" => list = Some(&mut permitted),
            "Excluded:" => list = Some(&mut excluded),
            entry if entry.starts_with("DNS:") || entry.starts_with("IP:") => {
                list.as_mut().unwrap().push(entry.to_owned())
            }
            _ => break,
        }
    }
    Some((permitted, excluded))
}

/// Issue 15 item 6: `mint ca rotate --name-constraints` writes a CA whose critical
/// `nameConstraints` permit exactly the hosts the aliases are bound to (a wildcard as its
/// suffix), closes the address families no alias is bound in, and keeps every other property of
/// the CA; plain `rotate` makes an unconstrained CA again.
#[test]
fn issue_15_rotate_with_name_constraints_permits_exactly_the_bound_hosts() {
    let dir = tempfile::tempdir().unwrap();
    ok(mint(dir.path()).arg("init"));
    let home = dir.path().join(".mint");
    let aliases = |text: &str| std::fs::write(home.join("aliases.yaml"), text).unwrap();
    let cert = || std::fs::read_to_string(home.join("ca.pem")).unwrap();

    aliases(
        "aliases:\n  - name: github\n    hosts: [api.github.com, \"*.example.com\"]\n    source: env:GITHUB_TOKEN\n  - name: again\n    hosts: [api.github.com]\n    source: env:OTHER_TOKEN\n",
    );
    let out = ok(mint(dir.path()).args(["ca", "rotate", "--name-constraints"]));
    assert!(out.stdout.contains("name-constrained"), "{}", out.stdout);
    assert!(
        out.stdout
            .contains("permitted: api.github.com, example.com"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("Restart `mint serve`"),
        "{}",
        out.stdout
    );
    let text = openssl_text(dir.path(), &cert());
    let (permitted, excluded) = name_constraints(&text).unwrap();
    assert_eq!(
        permitted,
        ["DNS:api.github.com", "DNS:example.com"],
        "{text}"
    );
    assert_eq!(
        excluded,
        ["IP:0.0.0.0/0.0.0.0", "IP:0:0:0:0:0:0:0:0/0:0:0:0:0:0:0:0"],
        "{text}"
    );
    // Every other property of the CA stays.
    assert!(
        text.contains("X509v3 Basic Constraints: critical"),
        "{text}"
    );
    assert!(text.contains("CA:TRUE, pathlen:0"), "{text}");
    assert!(text.contains("Certificate Sign, CRL Sign"), "{text}");
    assert!(text.contains("ASN1 OID: prime256v1"), "{text}");
    assert!(
        text.contains("Subject: O = Mint, CN = Mint interception CA"),
        "{text}"
    );
    assert_eq!(mode(&home.join("ca.key")), 0o600);
    // `mint ca export` (which checks the CA as `mint serve` does) takes it.
    assert_eq!(ok(mint(dir.path()).args(["ca", "export"])).stdout, cert());

    // Addresses: each its own /32 or /128; DNS names closed with `invalid` when only addresses
    // are bound.
    aliases(
        "aliases:\n  - name: local\n    hosts: [10.1.2.3, \"2001:db8::1\"]\n    source: env:LOCAL_TOKEN\n",
    );
    ok(mint(dir.path()).args(["ca", "rotate", "--name-constraints"]));
    let text = openssl_text(dir.path(), &cert());
    let (permitted, excluded) = name_constraints(&text).unwrap();
    assert_eq!(
        permitted,
        [
            "DNS:invalid",
            "IP:10.1.2.3/255.255.255.255",
            "IP:2001:DB8:0:0:0:0:0:1/FFFF:FFFF:FFFF:FFFF:FFFF:FFFF:FFFF:FFFF"
        ],
        "{text}"
    );
    assert!(excluded.is_empty(), "{text}");

    // Plain `rotate`: unconstrained, whatever the previous CA was.
    let out = ok(mint(dir.path()).args(["ca", "rotate"]));
    assert!(
        out.stdout.contains("not name-constrained"),
        "{}",
        out.stdout
    );
    let text = openssl_text(dir.path(), &cert());
    assert!(name_constraints(&text).is_none(), "{text}");
}

/// A name-constrained CA needs a bound alias: `mint ca rotate --name-constraints` with none
/// refuses and leaves the CA as it was; `mint init --ca-name-constraints` (a new home has no
/// alias) refuses before creating anything. Both say what to do instead.
#[test]
fn issue_15_name_constraints_without_a_bound_alias_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let out = fails(mint(dir.path()).args(["init", "--ca-name-constraints"]));
    assert!(
        out.stderr.contains("a new home has no alias"),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("mint alias add"), "{}", out.stderr);
    assert!(
        out.stderr.contains("mint ca rotate --name-constraints"),
        "{}",
        out.stderr
    );
    assert!(!dir.path().join(".mint").exists(), "nothing was created");

    ok(mint(dir.path()).arg("init"));
    let ca = dir.path().join(".mint/ca.pem");
    let before = std::fs::read(&ca).unwrap();
    let out = fails(mint(dir.path()).args(["ca", "rotate", "--name-constraints"]));
    assert!(
        out.stderr.contains("no alias in") && out.stderr.contains("is bound to a host"),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("mint alias add"), "{}", out.stderr);
    assert!(
        out.stderr.contains("the CA was not changed"),
        "{}",
        out.stderr
    );
    assert_eq!(std::fs::read(&ca).unwrap(), before);
}
