//! One suite of behaviour that every `CredentialStore` must show, run against each of them:
//! `MemoryStore`, `EnvStore`, `FileStore`, and the real keyring on both Linux backends (Secret
//! Service over D-Bus, and the kernel keyutils store). The keyring runs are named `keyring_*` so
//! `cargo test keyring` selects them; they skip with a note when the keyring is unreachable,
//! unless `MINT_REQUIRE_KEYRING=1`.

#![expect(clippy::unwrap_used, reason = "test code")]

#[path = "support/mint.rs"]
mod support;

use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;

use mint_broker::secrets::credential_store::{
    CredentialSources, CredentialStore, CredentialValue, EnvStore, FileStore, KeyringBackend,
    KeyringStore, MemoryStore, StoreError, ValueProblem,
};
use mint_policy::aliases::load_aliases;
use secrecy::ExposeSecret;

/// How the suite puts a value where a store will find it.
trait Fixture {
    /// The store under test.
    fn store(&self) -> Arc<dyn CredentialStore>;
    /// Makes `value` readable under a key derived from `name`; returns the key.
    fn plant(&mut self, name: &str, value: &[u8]) -> String;
    /// The key `name` would have, without planting anything.
    fn key(&self, name: &str) -> String;
    /// Whether the store takes writes (keyring, memory) or is filled by the operator.
    fn writable(&self) -> bool;
    /// Which `source:` an alias uses to reach this store, for `key`.
    fn source(&self, key: &str) -> String;
}

/// Stores filled through the store's own `write`.
struct Writable {
    store: Arc<dyn CredentialStore>,
    planted: Vec<String>,
}

impl Fixture for Writable {
    fn store(&self) -> Arc<dyn CredentialStore> {
        self.store.clone()
    }
    fn plant(&mut self, name: &str, value: &[u8]) -> String {
        let value = CredentialValue::new(std::str::from_utf8(value).unwrap()).unwrap();
        self.store.write(name, &value).unwrap();
        self.planted.push(name.to_owned());
        name.to_owned()
    }
    fn key(&self, name: &str) -> String {
        name.to_owned()
    }
    fn writable(&self) -> bool {
        true
    }
    fn source(&self, _key: &str) -> String {
        "keyring".to_owned()
    }
}

impl Drop for Writable {
    fn drop(&mut self) {
        // Leave nothing behind in a real keyring.
        for key in &self.planted {
            let _ = self.store.delete(key);
        }
    }
}

struct Env {
    vars: HashMap<String, Vec<u8>>,
}

impl Fixture for Env {
    fn store(&self) -> Arc<dyn CredentialStore> {
        Arc::new(EnvStore::from_vars(self.vars.clone()))
    }
    fn plant(&mut self, name: &str, value: &[u8]) -> String {
        let key = self.key(name);
        self.vars.insert(key.clone(), value.to_vec());
        key
    }
    fn key(&self, name: &str) -> String {
        format!("MINT_TEST_{}", name.to_uppercase().replace('-', "_"))
    }
    fn writable(&self) -> bool {
        false
    }
    fn source(&self, key: &str) -> String {
        format!("env:{key}")
    }
}

struct Files {
    dir: tempfile::TempDir,
}

impl Fixture for Files {
    fn store(&self) -> Arc<dyn CredentialStore> {
        Arc::new(FileStore::new())
    }
    fn plant(&mut self, name: &str, value: &[u8]) -> String {
        let key = self.key(name);
        std::fs::write(&key, value).unwrap();
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
        key
    }
    fn key(&self, name: &str) -> String {
        self.dir.path().join(name).to_str().unwrap().to_owned()
    }
    fn writable(&self) -> bool {
        false
    }
    fn source(&self, key: &str) -> String {
        format!("file:{key}")
    }
}

#[track_caller]
fn text_of(value: &CredentialValue) -> String {
    value.as_secret().expose_secret().to_owned()
}

/// The suite. `raw` says whether values the `CredentialValue` type refuses (empty) can be planted.
fn suite(fixture: &mut dyn Fixture) {
    let store = fixture.store();
    let name = store.name();

    // A value planted is read back exactly: ASCII, Unicode, tabs and inner newlines (a PEM key),
    // and a 4 KiB token.
    let long = "t".repeat(4096);
    let cases: [(&str, &str); 5] = [
        ("plain", "ghp_0123456789abcdefABCDEF"),
        ("unicode", "pässwörd ✓ 鍵"),
        ("tabbed", "a\tb"),
        ("multi-line", "-----BEGIN KEY-----\nAAAA\n-----END KEY-----"),
        ("long", &long),
    ];
    let mut keys = Vec::new();
    for (label, value) in cases {
        let key = fixture.plant(label, value.as_bytes());
        keys.push((key, value));
    }
    let store = fixture.store();
    for (key, value) in &keys {
        assert_eq!(&text_of(&store.read(key).unwrap()), value, "{name}: {key}");
    }

    // Nothing planted: `Missing`, the one answer for "not there".
    assert!(
        matches!(
            store.read(&fixture.key("never-planted")),
            Err(StoreError::Missing)
        ),
        "{name}"
    );

    if fixture.writable() {
        let key = fixture.key("rewritten");
        store
            .write(&key, &CredentialValue::new("first").unwrap())
            .unwrap();
        store
            .write(&key, &CredentialValue::new("second").unwrap())
            .unwrap();
        assert_eq!(text_of(&store.read(&key).unwrap()), "second", "{name}");
        store.delete(&key).unwrap();
        assert!(
            matches!(store.read(&key), Err(StoreError::Missing)),
            "{name}"
        );
        assert!(
            matches!(store.delete(&key), Err(StoreError::Missing)),
            "{name}"
        );

        // Concurrent use from several threads (the proxy loads on a blocking pool).
        std::thread::scope(|scope| {
            for i in 0..4 {
                let store = store.clone();
                let key = fixture.key(&format!("thread-{i}"));
                scope.spawn(move || {
                    let value = CredentialValue::new(&format!("value-{i}")).unwrap();
                    store.write(&key, &value).unwrap();
                    assert_eq!(text_of(&store.read(&key).unwrap()), format!("value-{i}"));
                    store.delete(&key).unwrap();
                });
            }
        });
    } else {
        let key = &keys[0].0;
        let value = CredentialValue::new("x").unwrap();
        assert!(
            matches!(store.write(key, &value), Err(StoreError::ReadOnly)),
            "{name}"
        );
        assert!(
            matches!(store.delete(key), Err(StoreError::ReadOnly)),
            "{name}"
        );
        // The operator's value is untouched.
        assert_eq!(text_of(&store.read(key).unwrap()), keys[0].1);

        // Values Mint cannot use are refused by kind, never shown.
        let empty = fixture.plant("empty", b"");
        let not_utf8 = fixture.plant("binary", b"\xff\xfe canary");
        let store = fixture.store();
        assert!(
            matches!(
                store.read(&empty),
                Err(StoreError::Value(ValueProblem::Empty))
            ),
            "{name}"
        );
        let err = store.read(&not_utf8).unwrap_err();
        assert!(
            matches!(err, StoreError::Value(ValueProblem::NotUtf8)),
            "{name}"
        );
        assert!(!format!("{err} {err:?}").contains("canary"));
    }

    // Through `CredentialSources`, as the broker loads: a good value loads; one with CR or LF is
    // refused for an alias that may sit in a header, naming the alias and not the value.
    let good = fixture.plant("good", b"good-value");
    let bad = fixture.plant("bad", b"canary-value\r\nX-Injected: 1");
    let aliases_text = format!(
        "aliases:\n  - name: good\n    hosts: [api.example.com]\n    source: \"{}\"\n  - name: \
         bad\n    hosts: [api.example.com]\n    source: \"{}\"\n",
        fixture.source(&good),
        fixture.source(&bad),
    );
    let aliases = load_aliases(aliases_text.as_bytes(), "aliases.yaml")
        .aliases
        .unwrap();
    let store = fixture.store();
    let sources = CredentialSources::new(store.clone(), store.clone(), store);
    assert_eq!(
        text_of(&sources.read(&aliases.aliases[0]).unwrap()),
        "good-value"
    );
    let err = sources.load_all(&aliases).unwrap_err();
    assert_eq!(err.failures.len(), 1, "{name}: {err}");
    let message = err.to_string();
    assert!(message.contains("alias `bad`"), "{name}: {message}");
    assert!(message.contains("control character"), "{name}: {message}");
    assert!(!message.contains("canary"), "{name}: {message}");
}

#[test]
fn memory_store_passes_the_suite() {
    suite(&mut Writable {
        store: Arc::new(MemoryStore::new()),
        planted: Vec::new(),
    });
}

#[test]
fn env_store_passes_the_suite() {
    suite(&mut Env {
        vars: HashMap::new(),
    });
}

#[test]
fn file_store_passes_the_suite() {
    suite(&mut Files {
        dir: tempfile::tempdir().unwrap(),
    });
}

fn keyring_suite(backend: KeyringBackend) {
    let Some(store) = support::reachable_keyring(backend) else {
        return;
    };
    suite(&mut Writable {
        store: Arc::new(store),
        planted: Vec::new(),
    });
}

#[test]
fn keyring_secret_service_passes_the_suite() {
    keyring_suite(KeyringBackend::SecretService);
}

#[test]
fn keyring_keyutils_passes_the_suite() {
    keyring_suite(KeyringBackend::Keyutils);
}

#[test]
fn keyring_backends_do_not_see_each_other() {
    let (Some(ss), Some(ku)) = (
        support::reachable_keyring(KeyringBackend::SecretService),
        support::reachable_keyring(KeyringBackend::Keyutils),
    ) else {
        return;
    };
    let ss_again = KeyringStore::new(ss.config());
    let ku_on_ss_service =
        KeyringStore::new(&mint_broker::secrets::credential_store::KeyringConfig {
            backend: KeyringBackend::Keyutils,
            service: ss.config().service.clone(),
        });
    ss.write("split", &CredentialValue::new("in-secret-service").unwrap())
        .unwrap();
    assert!(matches!(
        ku_on_ss_service.read("split"),
        Err(StoreError::Missing)
    ));
    assert_eq!(
        text_of(&ss_again.read("split").unwrap()),
        "in-secret-service"
    );
    ss.delete("split").unwrap();
    drop(ku);
}

#[test]
fn keyring_items_are_filed_under_their_service() {
    let Some(store) = support::reachable_keyring(KeyringBackend::Keyutils) else {
        return;
    };
    let other = KeyringStore::new(&mint_broker::secrets::credential_store::KeyringConfig {
        backend: KeyringBackend::Keyutils,
        service: support::unique_service(),
    });
    store
        .write("github", &CredentialValue::new("mine").unwrap())
        .unwrap();
    assert!(matches!(other.read("github"), Err(StoreError::Missing)));
    store.delete("github").unwrap();
}
