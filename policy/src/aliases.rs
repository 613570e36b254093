//! The alias declaration file: each alias names one credential, the hosts it may travel to, the
//! request sites it may sit in, and where the broker finds its value.
//!
//! The file never holds a secret value, and neither do these types: `source` says where the value
//! lives (`keyring`, `env:VAR`, `file:/path`, `vault:MOUNT/PATH#KEY`, `{command: [...]}`). Loading reports every problem with a position and
//! never quotes a free scalar, since an operator may paste a token into the wrong field.

use std::collections::HashMap;

use serde::{Serialize, Serializer};

use crate::body::{FormField, JsonPointer, MAX_FORM_FIELDS, MAX_POINTERS};
use crate::diagnostic::{Code, Diagnostic, Findings, Pos, Severity};
use crate::fields::{EntryKey, MapReader, Sink, entry_key, item_path, join, list, string};
use crate::host::HostPattern;
use crate::placeholder_shape::{Alphabet, PlaceholderShape, ShapeError};
use crate::policy::{host_pattern_problem, is_alias_name};
use crate::site::{Site, SiteSet};
use crate::yaml::{self, Node, NodeKind, Value};

mod source;

pub use source::{
    CommandSource, DEFAULT_COMMAND_CACHE, DEFAULT_COMMAND_MAX_STALE, DEFAULT_COMMAND_TIMEOUT,
    MAX_COMMAND_ARG_BYTES, MAX_COMMAND_ARGS, MAX_COMMAND_TIMEOUT, SecretSource, VaultRef,
    format_duration,
};

/// One alias declaration.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Alias {
    /// `^[a-z0-9][a-z0-9_-]{0,63}$`.
    pub name: String,
    /// What the credential is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Hosts the secret may be sent to.
    #[serde(serialize_with = "serialize_patterns")]
    pub hosts: Vec<HostPattern>,
    /// Request sites the secret may sit in; holds `body` exactly when `body` names a pointer or
    /// `form` names a field.
    pub sites: SiteSet,
    /// The JSON Pointers of a JSON body where the secret may sit; a placeholder anywhere else in
    /// a body is inert.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub body: Vec<JsonPointer>,
    /// The fields of an `application/x-www-form-urlencoded` body whose values the secret may sit
    /// in (decoded names); a placeholder anywhere else in a form body is inert.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub form: Vec<FormField>,
    /// Where the broker reads the value.
    pub source: SecretSource,
    /// Environment variables `mint run` sets to this alias's placeholder, for SDKs and CLIs that
    /// read their key from the environment.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<String>,
    /// The shape of the value-shaped placeholder the broker derives for this alias and `mint
    /// run` puts in `env`, for clients that check a key's form; `None`: `{{mint:NAME}}` only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub placeholder: Option<PlaceholderShape>,
    /// Where the declaration starts in the file.
    #[serde(skip)]
    pub pos: Pos,
}

/// A valid alias file.
#[derive(Clone, Debug, PartialEq, Default, Serialize)]
pub struct AliasFile {
    /// The declarations, in file order.
    pub aliases: Vec<Alias>,
}

// === impl AliasFile ===

impl AliasFile {
    /// The alias called `name`.
    pub fn find(&self, name: &str) -> Option<&Alias> {
        self.aliases.iter().find(|a| a.name == name)
    }

    /// The file's text: what `mint alias add` and `mint alias rm` write. Strings are written as
    /// JSON strings, which YAML reads back unchanged.
    pub fn to_yaml(&self) -> String {
        let q = |s: &str| serde_json::Value::String(s.to_owned()).to_string();
        let mut out = String::from("aliases:");
        if self.aliases.is_empty() {
            out.push_str(" []\n");
            return out;
        }
        out.push('\n');
        for alias in &self.aliases {
            out.push_str(&format!("  - name: {}\n", q(&alias.name)));
            if let Some(description) = &alias.description {
                out.push_str(&format!("    description: {}\n", q(description)));
            }
            let hosts: Vec<String> = alias.hosts.iter().map(|h| q(&h.as_text())).collect();
            out.push_str(&format!("    hosts: [{}]\n", hosts.join(", ")));
            let sites: Vec<String> = alias
                .sites
                .iter()
                .flat_map(|site| match site {
                    Site::Body => {
                        let mut entries = Vec::new();
                        if !alias.body.is_empty() {
                            let pointers: Vec<String> =
                                alias.body.iter().map(|p| q(p.as_str())).collect();
                            entries.push(format!("{{body: [{}]}}", pointers.join(", ")));
                        }
                        if !alias.form.is_empty() {
                            let fields: Vec<String> =
                                alias.form.iter().map(|f| q(f.as_str())).collect();
                            entries.push(format!("{{form: [{}]}}", fields.join(", ")));
                        }
                        entries
                    }
                    other => vec![other.as_str().to_owned()],
                })
                .collect();
            out.push_str(&format!("    sites: [{}]\n", sites.join(", ")));
            out.push_str(&format!("    source: {}\n", alias.source.to_yaml()));
            if !alias.env.is_empty() {
                out.push_str(&format!("    env: [{}]\n", alias.env.join(", ")));
            }
            match &alias.placeholder {
                None => {}
                Some(PlaceholderShape::Jwt) => out.push_str("    placeholder: jwt\n"),
                Some(PlaceholderShape::Token {
                    prefix,
                    length,
                    alphabet,
                }) => out.push_str(&format!(
                    "    placeholder: {{prefix: {}, length: {length}, alphabet: {}}}\n",
                    q(prefix),
                    alphabet.as_str()
                )),
            }
        }
        out
    }
}

/// The result of loading an alias file.
#[derive(Clone, Debug)]
pub struct AliasesLoad {
    /// The name of the file, for messages.
    pub origin: String,
    /// The declarations, when the file has no error.
    pub aliases: Option<AliasFile>,
    /// Errors and warnings, sorted by position.
    pub diagnostics: Vec<Diagnostic>,
}

// === impl AliasesLoad ===

impl AliasesLoad {
    /// The errors only.
    pub fn errors(&self) -> impl Iterator<Item = &Diagnostic> {
        self.diagnostics
            .iter()
            .filter(|d| d.severity() == Severity::Error)
    }
}

pub(crate) const TOP_FIELDS: &[&str] = &["aliases"];
const ALIAS_FIELDS: &[&str] = &[
    "name",
    "description",
    "hosts",
    "sites",
    "source",
    "env",
    "placeholder",
];
const SHAPE_FIELDS: &[&str] = &["prefix", "length", "alphabet"];

/// The variables `mint run` sets itself (proxy and CA settings, in the order it sets them) and
/// removes (`ALL_PROXY`): an alias's `env` may not name them, in any case.
pub const RESERVED_ENV_NAMES: &[&str] = &[
    "HTTPS_PROXY",
    "https_proxy",
    "HTTP_PROXY",
    "http_proxy",
    "NO_PROXY",
    "no_proxy",
    "ALL_PROXY",
    "all_proxy",
    "SSL_CERT_FILE",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "GIT_SSL_CAINFO",
    "AWS_CA_BUNDLE",
    "PIP_CERT",
    "NODE_EXTRA_CA_CERTS",
    "DENO_CERT",
];

/// Whether `name` is an environment variable name an alias may declare: `[A-Za-z_][A-Za-z0-9_]*`,
/// at most 128 characters (what shells, systemd and container runtimes all accept).
pub fn is_env_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    let first_ok = bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_');
    first_ok && name.len() <= 128 && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// Whether `name` is reserved: a variable `mint run` sets or removes itself, whatever its case,
/// or a `MINT_` variable, which configures Mint.
pub fn is_reserved_env_name(name: &str) -> bool {
    RESERVED_ENV_NAMES
        .iter()
        .any(|reserved| reserved.eq_ignore_ascii_case(name))
        || name.to_ascii_uppercase().starts_with("MINT_")
}

/// Loads and validates an alias file. `origin` names the file in rendered messages.
pub fn load_aliases(bytes: &[u8], origin: &str) -> AliasesLoad {
    let mut load = AliasesLoad {
        origin: origin.to_owned(),
        aliases: None,
        diagnostics: Vec::new(),
    };
    let root = match yaml::load(bytes) {
        Ok(root) => root,
        Err(findings) => {
            load.diagnostics = findings.into_sorted();
            return load;
        }
    };
    let mut findings = Findings::default();
    let file = {
        let mut sink = Sink {
            diagnostics: &mut findings,
            subject: None,
        };
        read_file(&root, &mut sink)
    };
    if !findings.has_errors() {
        load.aliases = file;
    }
    load.diagnostics = findings.into_sorted();
    load
}

fn read_file(root: &Node, sink: &mut Sink<'_>) -> Option<AliasFile> {
    let mut map = MapReader::new(root, "", sink)?;
    let mut aliases = Vec::new();
    match map.take("aliases") {
        None => sink.error(
            Code::MissingField,
            root,
            "",
            "missing `aliases`; write `aliases: []` for a file with no alias yet",
        ),
        Some(node) => match &node.kind {
            NodeKind::Seq(items) => {
                let mut seen: HashMap<String, Pos> = HashMap::new();
                let mut env_seen = HashMap::new();
                for (i, item) in items.iter().enumerate() {
                    if let Some(alias) = read_alias(item, i, &mut seen, &mut env_seen, sink) {
                        aliases.push(alias);
                    }
                }
            }
            // `aliases:` with nothing after it is an empty list.
            _ if node.value() == Some(Value::Null) => {}
            _ => sink.wrong_type(node, "aliases", "a list of aliases"),
        },
    }
    map.finish(TOP_FIELDS, sink);
    Some(AliasFile { aliases })
}

const ALIAS_NAME: EntryKey = EntryKey {
    field: "name",
    is_valid: is_alias_name,
    missing: "missing `name`; give the alias a name such as `github`",
    invalid: (
        Code::InvalidAliasName,
        "an alias name is 1-64 characters of a-z, 0-9, `_` and `-`, starting with a letter or \
         digit, such as `github`",
    ),
    duplicate: (
        Code::DuplicateAlias,
        "alias already declared",
        "remove or rename one",
    ),
};

fn read_alias(
    node: &Node,
    index: usize,
    seen: &mut HashMap<String, Pos>,
    env_seen: &mut HashMap<String, String>,
    outer: &mut Sink<'_>,
) -> Option<Alias> {
    let base = format!("aliases[{index}]");
    let mut map = MapReader::new(node, &base, outer)?;

    let name = entry_key(&mut map, &ALIAS_NAME, seen, outer);

    let prefix = if name.is_some() {
        String::new()
    } else {
        base.clone()
    };
    map.rebase(&prefix);
    let mut sink = Sink {
        diagnostics: &mut *outer.diagnostics,
        subject: name.clone(),
    };
    let sink = &mut sink;

    let description = map.take("description").and_then(|n| {
        let path = join(&prefix, "description");
        let text = string(n, &path, sink)?;
        if text.chars().count() > 1024 {
            sink.error(
                Code::WrongType,
                n,
                &path,
                "a description is at most 1024 characters; shorten it",
            );
        }
        Some(text.to_owned())
    });

    let mut hosts = Vec::new();
    let hosts_path = join(&prefix, "hosts");
    match map.take("hosts") {
        None => sink.error(
            Code::MissingField,
            node,
            &prefix,
            "missing `hosts`; list where the secret may go, such as `hosts: [api.github.com]`",
        ),
        Some(n) => {
            let items: Vec<(usize, &Node)> = match &n.kind {
                NodeKind::Seq(items) => items.iter().enumerate().collect(),
                NodeKind::Scalar { .. } => vec![(0, n)],
                NodeKind::Map(_) => {
                    sink.wrong_type(n, &hosts_path, "a list of hosts");
                    Vec::new()
                }
            };
            if matches!(&n.kind, NodeKind::Seq(items) if items.is_empty()) {
                sink.error(
                    Code::EmptyList,
                    n,
                    &hosts_path,
                    "an alias with no host can never be used; list at least one host",
                );
            }
            for (i, item) in items {
                let path = if matches!(n.kind, NodeKind::Seq(_)) {
                    format!("{hosts_path}[{i}]")
                } else {
                    hosts_path.clone()
                };
                let Some(text) = string(item, &path, sink) else {
                    continue;
                };
                match HostPattern::parse(text) {
                    Ok(pattern) => {
                        if pattern.is_wildcard() {
                            sink.error(
                                Code::AliasWildcardHost,
                                item,
                                &path,
                                "the secret may go to every host under this wildcard; list the \
                                 exact hosts unless each one is trusted with it",
                            );
                        }
                        hosts.push(pattern);
                    }
                    Err(e) => {
                        let (code, message) = host_pattern_problem(text, &e);
                        sink.error(code, item, &path, message);
                    }
                }
            }
        }
    }

    let mut sites = SiteSet::HEADER;
    let mut body = Vec::new();
    let mut form = Vec::new();
    if let Some(n) = map.take("sites") {
        let path = join(&prefix, "sites");
        sites = SiteSet::EMPTY;
        let items: Vec<&Node> = match &n.kind {
            NodeKind::Seq(items) => items.iter().collect(),
            _ => vec![n],
        };
        if items.is_empty() {
            sink.error(
                Code::EmptyList,
                n,
                &path,
                "list at least one site, or remove `sites` for headers only",
            );
        }
        for item in items {
            match (&item.kind, item.value()) {
                (_, Some(Value::Str("body"))) => sink.error(
                    Code::BodySiteWithoutPointers,
                    item,
                    &path,
                    "`body` must name where in a JSON body the secret goes, as JSON Pointers: \
                     write `{body: [/client_secret]}`; a placeholder anywhere else in a body is \
                     forwarded as text",
                ),
                (_, Some(Value::Str("form"))) => sink.error(
                    Code::FormSiteWithoutFields,
                    item,
                    &path,
                    "`form` must name the fields of a form body the secret goes in: write \
                     `{form: [client_secret]}`; a placeholder anywhere else in a body is \
                     forwarded as text",
                ),
                (_, Some(Value::Str(text))) if Site::parse(text).is_some() => {
                    if let Some(site) = Site::parse(text) {
                        sites = sites.with(site);
                    }
                }
                (NodeKind::Map(entries), _) => {
                    if read_body_site(entries, item, &path, &mut body, &mut form, sink) {
                        sites = sites.with(Site::Body);
                    }
                }
                _ => sink.error(Code::InvalidSite, item, &path, SITE_FORMS),
            }
        }
        if !sites.is_subset(SiteSet::HEADER) {
            sink.error(
                Code::InjectBeyondHeader,
                n,
                &path,
                "secrets in the query or body are easier to leak (logs, echoes, caches); keep \
                 `sites: [header]` unless the API accepts nothing else",
            );
        }
    }

    let mut source = Some(SecretSource::Keyring);
    if let Some(n) = map.take("source") {
        source = source::read_source(n, &join(&prefix, "source"), sink);
    }

    let env = map
        .take("env")
        .map(|n| read_env(n, &join(&prefix, "env"), env_seen, sink))
        .unwrap_or_default();

    let placeholder = map
        .take("placeholder")
        .and_then(|n| read_placeholder(n, &join(&prefix, "placeholder"), sink));

    map.finish(ALIAS_FIELDS, sink);
    Some(Alias {
        name: name?,
        description,
        hosts,
        sites,
        body,
        form,
        source: source?,
        env,
        placeholder,
        pos: node.pos(),
    })
}

/// What a site may be, for messages.
const SITE_FORMS: &str =
    "a site is `header`, `query`, `{body: [/json/pointer, ...]}` or `{form: [field, ...]}`";

/// Reads `{body: [POINTER, ...]}` into `body` or `{form: [FIELD, ...]}` into `form`; whether
/// it named at least one valid pointer or field.
fn read_body_site(
    entries: &[(Node, Node)],
    item: &Node,
    path: &str,
    body: &mut Vec<JsonPointer>,
    form: &mut Vec<FormField>,
    sink: &mut Sink<'_>,
) -> bool {
    let [(key, value)] = entries else {
        sink.error(
            Code::InvalidSite,
            item,
            path,
            "a body site is one key, `body` with a list of JSON Pointers (`{body: \
             [/client_secret]}`) or `form` with a list of form fields (`{form: [client_secret]}`)",
        );
        return false;
    };
    let is_form = match key.value() {
        Some(Value::Str("body")) => false,
        Some(Value::Str("form")) => true,
        _ => {
            sink.error(Code::InvalidSite, key, path, SITE_FORMS);
            return false;
        }
    };
    let (field, code, what, example, max) = if is_form {
        (
            "form",
            Code::InvalidFormField,
            "form fields",
            "`client_secret`",
            MAX_FORM_FIELDS,
        )
    } else {
        (
            "body",
            Code::InvalidJsonPointer,
            "JSON Pointers",
            "`/client_secret`",
            MAX_POINTERS,
        )
    };
    let path = format!("{path}.{field}");
    let items: Vec<&Node> = match &value.kind {
        NodeKind::Seq(items) => items.iter().collect(),
        NodeKind::Scalar { .. } => vec![value],
        NodeKind::Map(_) => {
            sink.wrong_type(value, &path, &format!("a list of {what}"));
            return false;
        }
    };
    if items.is_empty() {
        let singular = what.trim_end_matches('s');
        sink.error(
            Code::EmptyList,
            value,
            &path,
            format!("name at least one {singular}, such as {example}, or remove the {field} site"),
        );
        return false;
    }
    if items.len() > max {
        sink.error(
            code,
            value,
            &path,
            format!("an alias names at most {max} {what}"),
        );
        return false;
    }
    let mut named = false;
    for (i, node) in items.into_iter().enumerate() {
        let item_path = format!("{path}[{i}]");
        let Some(text) = string(node, &item_path, sink) else {
            continue;
        };
        let problem = if is_form {
            FormField::parse(text)
                .map(|f| {
                    if !form.contains(&f) {
                        form.push(f);
                    }
                })
                .map_err(|e| e.to_string())
        } else {
            JsonPointer::parse(text)
                .map(|p| {
                    if !body.contains(&p) {
                        body.push(p);
                    }
                })
                .map_err(|e| e.to_string())
        };
        match problem {
            Ok(()) => named = true,
            Err(message) => sink.error(code, node, &item_path, message),
        }
    }
    named
}

/// Reads `env`: a name or a list of names, each in the variable grammar, not reserved, and not
/// declared before in this file (`seen` maps each name to its alias).
fn read_env(
    node: &Node,
    path: &str,
    seen: &mut HashMap<String, String>,
    sink: &mut Sink<'_>,
) -> Vec<String> {
    let mut names = Vec::new();
    let owner = sink.subject.clone().unwrap_or_default();
    for (i, item) in list(node) {
        let item_path = item_path(path, i, node);
        let Some(text) = string(item, &item_path, sink) else {
            continue;
        };
        if !is_env_name(text) {
            sink.error(
                Code::InvalidEnvName,
                item,
                &item_path,
                "an environment variable name is 1-128 characters of A-Z, a-z, 0-9 and `_`, not \
                 starting with a digit, such as `GITHUB_TOKEN`",
            );
        } else if is_reserved_env_name(text) {
            sink.error(
                Code::ReservedEnvName,
                item,
                &item_path,
                format!(
                    "`mint run` sets `{text}` itself (proxy, CA and `MINT_` variables are \
                     reserved); name the variable the client reads its key from instead"
                ),
            );
        } else if let Some(other) = seen.get(text) {
            let message = if *other == owner {
                format!("`{text}` is listed twice; remove one")
            } else {
                format!(
                    "`{text}` is already set for alias `{other}`; a variable can hold only one \
                     placeholder"
                )
            };
            sink.error(Code::DuplicateEnvName, item, &item_path, message);
        } else {
            seen.insert(text.to_owned(), owner.clone());
            names.push(text.to_owned());
        }
    }
    names
}

/// Reads `placeholder`: `jwt`, or `{prefix: PREFIX, length: N, alphabet: NAME}` (`prefix`
/// defaults to none and `alphabet` to `base62`). The prefix is never quoted in a message.
fn read_placeholder(node: &Node, path: &str, sink: &mut Sink<'_>) -> Option<PlaceholderShape> {
    let shape = match (&node.kind, node.value()) {
        (_, Some(Value::Str("jwt"))) => Ok(PlaceholderShape::Jwt),
        (NodeKind::Map(_), _) => {
            let mut map = MapReader::new(node, path, sink)?;
            let prefix = match map.take("prefix") {
                None => Some(""),
                Some(n) => string(n, &join(path, "prefix"), sink),
            };
            let length = match map.take("length").map(|n| (n, n.value())) {
                Some((_, Some(Value::Int(n)))) => Some(usize::try_from(n).unwrap_or(usize::MAX)),
                Some((n, _)) => {
                    sink.wrong_type(n, &join(path, "length"), "an integer");
                    None
                }
                None => {
                    sink.error(
                        Code::MissingField,
                        node,
                        path,
                        "missing `length`: the whole length of the placeholder, prefix included, \
                         such as `{prefix: sk-, length: 48}`",
                    );
                    None
                }
            };
            let alphabet = match map.take("alphabet") {
                None => Some(Alphabet::Base62),
                Some(n) => {
                    let parsed = n.value().and_then(|v| match v {
                        Value::Str(text) => Alphabet::parse(text),
                        _ => None,
                    });
                    if parsed.is_none() {
                        sink.error(
                            Code::InvalidPlaceholderShape,
                            n,
                            &join(path, "alphabet"),
                            "a placeholder alphabet is `base62` (the default), `lower`, `hex` or \
                             `base64url`",
                        );
                    }
                    parsed
                }
            };
            map.finish(SHAPE_FIELDS, sink);
            PlaceholderShape::token(prefix?, length?, alphabet?)
        }
        _ => Err(ShapeError::Invalid(
            "a placeholder shape is `jwt` or `{prefix: PREFIX, length: N, alphabet: base62}`",
        )),
    };
    match shape {
        Ok(shape) => Some(shape),
        Err(error) => {
            let code = match error {
                ShapeError::Weak { .. } => Code::WeakPlaceholderShape,
                ShapeError::Reserved => Code::ReservedPlaceholderShape,
                ShapeError::Invalid(_) => Code::InvalidPlaceholderShape,
            };
            sink.error(code, node, path, error.to_string());
            None
        }
    }
}

fn serialize_patterns<S: Serializer>(
    patterns: &[HostPattern],
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.collect_seq(patterns.iter().map(HostPattern::as_text))
}
