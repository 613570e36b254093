//! `alias_list`: the alias declarations, as an agent may see them.
//!
//! Loads the file with `mint_policy::aliases::load_aliases` and returns each alias's name,
//! description, hosts and request sites, or its findings; a file that `mint_policy::recognise`
//! does not take for an alias file gets the uniform `tools::unreadable` answer. The `source` is left out: where a secret is kept (a
//! file path, an environment variable) tells the agent nothing it needs and would point a
//! prompt injection at the secret.

use std::path::PathBuf;

use mint_policy::Severity;
use mint_policy::aliases::{Alias, load_aliases};
use mint_policy::body::{FormField, JsonPointer};
use mint_policy::diagnostic::count_noun;
use mint_policy::recognise::is_alias_file;
use mint_policy::site::SiteSet;
use serde::Serialize;

use super::{Arguments, findings, pretty, unreadable};
use crate::file_guard::{FileError, Guard, OpenFile};
use crate::jsonrpc::RpcError;
use crate::paths::Config;

/// Lists the aliases of the file at `path`, or of the configured aliases file.
pub(super) fn call(args: Arguments<'_>, config: &Config) -> Result<String, RpcError> {
    let path = args
        .path("path")?
        .map_or_else(|| config.aliases.clone(), PathBuf::from);
    let name = path.display().to_string();
    let bytes = Guard::load(config)
        .open(&path)
        .and_then(OpenFile::read_declaration)
        .and_then(|bytes| {
            // Findings only for a file that is one: those of another would describe it.
            if is_alias_file(&bytes) {
                Ok(bytes)
            } else {
                Err(FileError::NotRecognised)
            }
        })
        .map_err(|error| unreadable("aliases file", "an alias file", &name, error))?;
    let load = load_aliases(&bytes, &name);
    let Some(file) = load.aliases else {
        let errors: Vec<_> = load.errors().collect();
        let summary = format!(
            "{} in {name}{}",
            count_noun(errors.len(), "error"),
            errors
                .first()
                .map(|first| format!("; first: {}", first.short()))
                .unwrap_or_default()
        );
        let warnings = load
            .diagnostics
            .iter()
            .filter(|d| d.severity() == Severity::Warning);
        return Err(findings(summary, errors.iter().copied().chain(warnings)));
    };
    pretty(&AliasList {
        path: &name,
        count: file.aliases.len(),
        aliases: file.aliases.iter().map(AliasView::from).collect(),
    })
}

#[derive(Serialize)]
struct AliasList<'a> {
    path: &'a str,
    count: usize,
    aliases: Vec<AliasView<'a>>,
}

/// What the agent sees of one alias.
#[derive(Serialize)]
struct AliasView<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<&'a str>,
    hosts: Vec<String>,
    sites: SiteSet,
    /// The JSON Pointers of the `body` site: the only places of a body where the secret goes.
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    body: &'a [JsonPointer],
    /// The form fields of the `body` site: the only fields of a form body whose values the
    /// secret goes in.
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    form: &'a [FormField],
}

impl<'a> From<&'a Alias> for AliasView<'a> {
    fn from(alias: &'a Alias) -> Self {
        AliasView {
            name: &alias.name,
            description: alias.description.as_deref(),
            hosts: alias.hosts.iter().map(|host| host.as_text()).collect(),
            sites: alias.sites,
            body: &alias.body,
            form: &alias.form,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;

    /// The body site's pointers and form fields are shown as the file names them; an alias
    /// without them shows neither key.
    #[test]
    fn pointers_and_form_fields_are_shown() {
        let yaml = "aliases:
  - name: oauth
    hosts: [auth.example.com]
    sites: [{body: [/client_secret]}, {form: [client_secret, client id]}]
  - name: github
    hosts: [api.github.com]
";
        let file = load_aliases(yaml.as_bytes(), "a.yaml").aliases.unwrap();
        let views: Vec<serde_json::Value> = file
            .aliases
            .iter()
            .map(|alias| serde_json::to_value(AliasView::from(alias)).unwrap())
            .collect();
        assert_eq!(views[0]["sites"], serde_json::json!(["body"]));
        assert_eq!(views[0]["body"], serde_json::json!(["/client_secret"]));
        assert_eq!(
            views[0]["form"],
            serde_json::json!(["client_secret", "client id"])
        );
        assert!(views[1].get("body").is_none() && views[1].get("form").is_none());
    }
}
