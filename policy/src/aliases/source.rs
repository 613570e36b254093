//! Where an alias's value lives: the `source` field of an alias declaration.
//!
//! A source names a place, never a value: the OS keyring, an environment variable, a file, a
//! program the operator names (`command`), or a key of an OpenBao / Vault KV v2 secret
//! (`vault:`). Pure parsing: nothing here runs a program or opens a connection (the broker does,
//! `secrets::credential_store`). Messages never quote an argument of a command, since an operator
//! may have put something sensitive there; they name the field and the rule to follow.

use std::fmt;
use std::time::Duration;

use serde::{Serialize, Serializer};

use crate::diagnostic::Code;
use crate::duration::{DURATION_HINT, parse_duration};
use crate::fields::{MapReader, Sink, join, string};
use crate::yaml::{Node, NodeKind, Value};

/// Where the broker finds an alias's value. Names a place, never holds a value.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum SecretSource {
    /// The OS keyring: service `mint`, account = alias name.
    Keyring,
    /// An environment variable of the broker.
    Env(String),
    /// A file readable only by its owner (0600), such as a systemd credential.
    File(String),
    /// The standard output of a program the operator names.
    Command(Box<CommandSource>),
    /// One key of an OpenBao or HashiCorp Vault KV version 2 secret.
    Vault(Box<VaultRef>),
}

/// A program whose standard output is the value: `source: {command: [gh, auth, token]}`.
/// Executed directly (no shell), with a timeout and a minimal environment; its value is cached
/// for `cache` and read again when that runs out.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CommandSource {
    /// The program (an absolute path, or a name looked up in `PATH`) and its arguments, as the
    /// operator listed them: never split on spaces, never given to a shell.
    pub argv: Vec<String>,
    /// How long one run may take before it is killed.
    pub timeout: Duration,
    /// How long a value is used before the program runs again.
    pub cache: Duration,
    /// How long past `cache` the last value is still used while the program fails; after that,
    /// requests that use the alias are refused until it succeeds again.
    pub max_stale: Duration,
}

/// `vault:MOUNT/PATH#KEY`, optionally with `?version=N`: the field `KEY` of the KV v2 secret
/// `PATH` under the secrets engine mounted at `MOUNT`. The server, namespace, authentication,
/// cache and staleness bound are the broker's settings, not the alias's.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct VaultRef {
    /// The KV v2 mount (the first path segment), such as `secret` or `kv`.
    pub mount: String,
    /// The secret's path below the mount, such as `ci/github`.
    pub path: String,
    /// The field of the secret's data that holds the value.
    pub key: String,
    /// A pinned version; `None` reads the newest.
    pub version: Option<u64>,
}

/// The default of a command source's `timeout`.
pub const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest `timeout` a command source may have.
pub const MAX_COMMAND_TIMEOUT: Duration = Duration::from_secs(300);
/// The default of a command source's `cache`.
pub const DEFAULT_COMMAND_CACHE: Duration = Duration::from_secs(300);
/// The default of a command source's `max_stale`.
pub const DEFAULT_COMMAND_MAX_STALE: Duration = Duration::from_secs(300);
/// The most arguments (program included) a command source may list.
pub const MAX_COMMAND_ARGS: usize = 64;
/// The longest argument of a command source, in bytes.
pub const MAX_COMMAND_ARG_BYTES: usize = 4096;

const COMMAND_FIELDS: &[&str] = &["command", "timeout", "cache", "max_stale"];

/// What a source may be, for messages.
pub(crate) const SOURCE_FORMS: &str = "a source is `keyring`, `env:VARIABLE_NAME`, \
     `file:/absolute/path`, `vault:MOUNT/PATH#KEY` or `{command: [program, arg, ...]}`; the \
     secret itself never goes in this file";

// === impl SecretSource ===

impl SecretSource {
    /// Reads `keyring`, `env:VAR`, `file:/absolute/path` or `vault:MOUNT/PATH#KEY[?version=N]`
    /// (a command source is a mapping, read from the file only).
    pub fn parse(text: &str) -> Option<SecretSource> {
        if text == "keyring" {
            return Some(SecretSource::Keyring);
        }
        if let Some(var) = text.strip_prefix("env:") {
            let mut bytes = var.bytes();
            let first_ok = bytes
                .next()
                .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_');
            let rest_ok = bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_');
            return (first_ok && rest_ok && var.len() <= 128)
                .then(|| SecretSource::Env(var.to_owned()));
        }
        if let Some(path) = text.strip_prefix("file:") {
            let ok = path.starts_with('/')
                && path.len() <= 4096
                && !path.chars().any(char::is_control)
                && !path.split('/').any(|s| s == "..");
            return ok.then(|| SecretSource::File(path.to_owned()));
        }
        if let Some(reference) = text.strip_prefix("vault:") {
            return VaultRef::parse(reference).map(|r| SecretSource::Vault(Box::new(r)));
        }
        None
    }

    /// Whether the value is cached and read again in the background (command and Vault
    /// sources), rather than read once at start and on reload.
    pub fn is_refreshed(&self) -> bool {
        matches!(self, SecretSource::Command(_) | SecretSource::Vault(_))
    }

    /// The source as the alias file writes it: a plain string for every source but a command,
    /// which is a flow mapping. Strings are JSON strings, which YAML reads back unchanged.
    pub fn to_yaml(&self) -> String {
        let q = |s: &str| serde_json::Value::String(s.to_owned()).to_string();
        match self {
            SecretSource::Command(command) => {
                let argv: Vec<String> = command.argv.iter().map(|a| q(a)).collect();
                let mut out = format!("{{command: [{}]", argv.join(", "));
                if command.timeout != DEFAULT_COMMAND_TIMEOUT {
                    out.push_str(&format!(", timeout: {}", format_duration(command.timeout)));
                }
                if command.cache != DEFAULT_COMMAND_CACHE {
                    out.push_str(&format!(", cache: {}", format_duration(command.cache)));
                }
                if command.max_stale != DEFAULT_COMMAND_MAX_STALE {
                    out.push_str(&format!(
                        ", max_stale: {}",
                        format_duration(command.max_stale)
                    ));
                }
                out.push('}');
                out
            }
            other => q(&other.to_string()),
        }
    }
}

impl fmt::Display for SecretSource {
    /// A command shows its program only: its arguments stay in the operator's file.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SecretSource::Keyring => f.write_str("keyring"),
            SecretSource::Env(var) => write!(f, "env:{var}"),
            SecretSource::File(path) => write!(f, "file:{path}"),
            SecretSource::Command(command) => write!(f, "command:{}", command.program()),
            SecretSource::Vault(reference) => write!(f, "vault:{reference}"),
        }
    }
}

impl Serialize for SecretSource {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

// === impl CommandSource ===

impl CommandSource {
    /// The program, as listed.
    pub fn program(&self) -> &str {
        self.argv.first().map_or("", String::as_str)
    }
}

// === impl VaultRef ===

impl VaultRef {
    /// Reads `MOUNT/PATH#KEY`, with `?version=N` (N ≥ 1) before or after `#KEY`. Segments are
    /// `[A-Za-z0-9._-]`, never `.` or `..`; the key is `[A-Za-z0-9._-]`, 1-128 characters.
    pub fn parse(text: &str) -> Option<VaultRef> {
        let (text, version) = match text.split_once("?version=") {
            None => (text.to_owned(), None),
            Some((before, after)) => {
                // `?version=N#KEY` or `#KEY?version=N`.
                let (digits, rest) = match after.split_once('#') {
                    Some((digits, key)) => (digits, format!("#{key}")),
                    None => (after, String::new()),
                };
                let ok = !digits.is_empty()
                    && digits.len() <= 12
                    && digits.bytes().all(|b| b.is_ascii_digit());
                let n: u64 = if ok {
                    digits.parse().ok()?
                } else {
                    return None;
                };
                if n == 0 {
                    return None;
                }
                (format!("{before}{rest}"), Some(n))
            }
        };
        let (location, key) = text.split_once('#')?;
        let (mount, path) = location.split_once('/')?;
        let segment_ok = |s: &str| {
            !s.is_empty()
                && s != "."
                && s != ".."
                && s.len() <= 128
                && s.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        };
        let ok = segment_ok(mount)
            && location.len() <= 1024
            && path.split('/').all(segment_ok)
            && segment_ok(key);
        ok.then(|| VaultRef {
            mount: mount.to_owned(),
            path: path.to_owned(),
            key: key.to_owned(),
            version,
        })
    }
}

impl fmt::Display for VaultRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}#{}", self.mount, self.path, self.key)?;
        if let Some(version) = self.version {
            write!(f, "?version={version}")?;
        }
        Ok(())
    }
}

/// Reads an alias's `source` node: a string, or a `{command: [...]}` mapping. Records every
/// problem; `None` when there was one.
pub(crate) fn read_source(node: &Node, path: &str, sink: &mut Sink<'_>) -> Option<SecretSource> {
    match (&node.kind, node.value()) {
        (_, Some(Value::Str(text))) => {
            let source = SecretSource::parse(text);
            if source.is_none() {
                let message = if text.starts_with("vault:") {
                    "a Vault source is `vault:MOUNT/PATH#KEY`, optionally with `?version=N`: \
                     path segments and the key are letters, digits, `.`, `_` and `-`"
                } else if text.starts_with("command") {
                    "a command source lists the program and its arguments: \
                     `source: {command: [gh, auth, token]}`; it is never split on spaces"
                } else {
                    SOURCE_FORMS
                };
                sink.error(Code::InvalidSource, node, path, message);
            }
            source
        }
        (NodeKind::Map(_), _) => {
            read_command(node, path, sink).map(|c| SecretSource::Command(Box::new(c)))
        }
        _ => {
            sink.error(Code::InvalidSource, node, path, SOURCE_FORMS);
            None
        }
    }
}

fn read_command(node: &Node, path: &str, sink: &mut Sink<'_>) -> Option<CommandSource> {
    let mut map = MapReader::new(node, path, sink)?;
    let argv_path = join(path, "command");
    let argv = match map.take("command") {
        None => {
            sink.error(
                Code::MissingField,
                node,
                path,
                "missing `command`; list the program and its arguments, such as \
                 `command: [gh, auth, token]`",
            );
            None
        }
        Some(n) => read_argv(n, &argv_path, sink),
    };
    let mut duration = |key: &str, default: Duration, max: Duration| -> Option<Duration> {
        let Some(n) = map.take(key) else {
            return Some(default);
        };
        let field = join(path, key);
        let text = string(n, &field, sink)?;
        match parse_duration(text).filter(|d| *d <= max) {
            Some(d) => Some(d),
            None => {
                sink.error(
                    Code::InvalidDuration,
                    n,
                    &field,
                    format!(
                        "`{key}` is {DURATION_HINT}{}",
                        if max < crate::duration::MAX_DURATION {
                            format!(", at most {}", format_duration(max))
                        } else {
                            String::new()
                        }
                    ),
                );
                None
            }
        }
    };
    let timeout = duration("timeout", DEFAULT_COMMAND_TIMEOUT, MAX_COMMAND_TIMEOUT);
    let cache = duration(
        "cache",
        DEFAULT_COMMAND_CACHE,
        crate::duration::MAX_DURATION,
    );
    let max_stale = duration(
        "max_stale",
        DEFAULT_COMMAND_MAX_STALE,
        crate::duration::MAX_DURATION,
    );
    map.finish(COMMAND_FIELDS, sink);
    Some(CommandSource {
        argv: argv?,
        timeout: timeout?,
        cache: cache?,
        max_stale: max_stale?,
    })
}

fn read_argv(node: &Node, path: &str, sink: &mut Sink<'_>) -> Option<Vec<String>> {
    let NodeKind::Seq(items) = &node.kind else {
        sink.error(
            Code::InvalidSource,
            node,
            path,
            "`command` is a list: the program, then each argument as its own item, such as \
             `[gh, auth, token]`; it is never split on spaces nor given to a shell",
        );
        return None;
    };
    if items.is_empty() || items.len() > MAX_COMMAND_ARGS {
        sink.error(
            Code::InvalidSource,
            node,
            path,
            format!(
                "`command` lists the program and at most {} arguments",
                MAX_COMMAND_ARGS - 1
            ),
        );
        return None;
    }
    let mut argv = Vec::with_capacity(items.len());
    let mut ok = true;
    for (i, item) in items.iter().enumerate() {
        let item_path = format!("{path}[{i}]");
        // Numbers and booleans are arguments too (`--limit 5`): take the scalar's text.
        let text = match &item.kind {
            NodeKind::Scalar { text, .. } => &**text,
            _ => {
                sink.wrong_type(item, &item_path, "a string");
                ok = false;
                continue;
            }
        };
        if text.len() > MAX_COMMAND_ARG_BYTES || text.chars().any(|c| c == '\0') {
            sink.error(
                Code::InvalidSource,
                item,
                &item_path,
                format!("an argument is at most {MAX_COMMAND_ARG_BYTES} bytes and holds no NUL"),
            );
            ok = false;
            continue;
        }
        if i == 0 {
            let program_ok = !text.is_empty()
                && !text.chars().any(char::is_control)
                && (text.starts_with('/') || !text.contains('/'))
                && !text.split('/').any(|s| s == "..");
            if !program_ok {
                sink.error(
                    Code::InvalidSource,
                    item,
                    &item_path,
                    "the program is an absolute path (`/usr/bin/gh`) or a name looked up in \
                     `PATH` (`gh`); a relative path would depend on where Mint was started",
                );
                ok = false;
                continue;
            }
        }
        argv.push(text.to_owned());
    }
    ok.then_some(argv)
}

/// `500ms`, `30s`, `5m`, `2h`, `1d`: the largest whole unit of the duration grammar.
pub fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if !ms.is_multiple_of(1000) {
        return format!("{ms}ms");
    }
    let s = d.as_secs();
    for (unit, size) in [("d", 86_400), ("h", 3_600), ("m", 60)] {
        if s.is_multiple_of(size) {
            return format!("{}{unit}", s / size);
        }
    }
    format!("{s}s")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vault_references() {
        let r = VaultRef::parse("secret/ci/github#token").unwrap();
        assert_eq!(
            (r.mount.as_str(), r.path.as_str(), r.key.as_str(), r.version),
            ("secret", "ci/github", "token", None)
        );
        assert_eq!(r.to_string(), "secret/ci/github#token");
        let pinned = VaultRef::parse("kv/app#key?version=3").unwrap();
        assert_eq!(pinned.version, Some(3));
        assert_eq!(pinned.to_string(), "kv/app#key?version=3");
        assert_eq!(VaultRef::parse("kv/app?version=3#key"), Some(pinned));
        for bad in [
            "kv#key",
            "kv/app",
            "kv/app#",
            "/app#key",
            "kv//app#key",
            "kv/../app#key",
            "kv/app#key?version=0",
            "kv/app#key?version=x",
            "kv/app#key?version=",
            "kv/a b#key",
            "kv/app#k/ey",
        ] {
            assert_eq!(VaultRef::parse(bad), None, "{bad}");
        }
        assert!(matches!(
            SecretSource::parse("vault:secret/x#y"),
            Some(SecretSource::Vault(_))
        ));
    }

    fn load_source(source: &str) -> crate::aliases::AliasesLoad {
        let text =
            format!("aliases:\n  - name: gh\n    hosts: [api.github.com]\n    source: {source}\n");
        crate::aliases::load_aliases(text.as_bytes(), "aliases.yaml")
    }

    #[test]
    fn command_sources_are_lists_and_round_trip() {
        let load = load_source(
            "{command: [gh, auth, token, --hostname, 'a b', 5], timeout: 3s, cache: 1h}",
        );
        let file = load.aliases.expect("valid");
        let SecretSource::Command(command) = &file.aliases[0].source else {
            panic!("not a command");
        };
        assert_eq!(
            command.argv,
            ["gh", "auth", "token", "--hostname", "a b", "5"]
        );
        assert_eq!(command.timeout, Duration::from_secs(3));
        assert_eq!(command.cache, Duration::from_secs(3600));
        assert_eq!(command.max_stale, DEFAULT_COMMAND_MAX_STALE);
        assert_eq!(file.aliases[0].source.to_string(), "command:gh");
        let again = crate::aliases::load_aliases(file.to_yaml().as_bytes(), "aliases.yaml");
        assert_eq!(again.aliases.expect("round trip"), file);

        let block = load_source(
            "\n      command:\n        - /usr/bin/op\n        - read\n        - op://ci/gh/token",
        );
        assert!(block.aliases.is_some(), "{:?}", block.diagnostics);
    }

    #[test]
    fn command_sources_refuse_strings_and_relative_programs() {
        let cases = [
            ("\"command: gh auth token\"", "never split on spaces"),
            ("{command: \"gh auth token\"}", "is a list"),
            ("{command: []}", "at most 63 arguments"),
            ("{command: [./gh, auth]}", "absolute path"),
            ("{command: [bin/gh]}", "absolute path"),
            ("{command: [gh], timeout: 10m}", "at most 5m"),
            ("{command: [gh], cache: soon}", "`cache` is a whole number"),
            ("{command: [gh], shell: true}", "unknown field"),
            ("{timeout: 1s}", "missing `command`"),
        ];
        for (source, expected) in cases {
            let load = load_source(source);
            assert!(load.aliases.is_none(), "{source}");
            let messages: Vec<String> = load.diagnostics.iter().map(|d| d.render("a")).collect();
            assert!(
                messages.iter().any(|m| m.contains(expected)),
                "{source}: {messages:?}"
            );
        }
    }

    #[test]
    fn durations_format_in_the_grammar() {
        for (d, text) in [
            (Duration::from_millis(1500), "1500ms"),
            (Duration::from_secs(45), "45s"),
            (Duration::from_secs(300), "5m"),
            (Duration::from_secs(7200), "2h"),
            (Duration::from_secs(86_400), "1d"),
        ] {
            assert_eq!(format_duration(d), text);
            assert_eq!(parse_duration(text), Some(d));
        }
    }
}
