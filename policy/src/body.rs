//! Where in a request body each alias's secret may be substituted, compiled from the alias file
//! for the broker's body scan.
//!
//! A placeholder in a body is substituted only at a place its alias names; anywhere else in the
//! body it is inert text, forwarded unchanged (DESIGN.md). This module answers "is this place one
//! of this alias's body places" without seeing the body: the broker's tokenizer walks the body
//! and asks. It never holds a secret and never quotes the body.

use std::collections::HashMap;

use crate::aliases::AliasFile;
use crate::site::Site;

/// The body places of every declared alias.
#[derive(Clone, Debug, Default)]
pub struct BodyPlaces {
    /// Declared aliases, by name: whether the alias names every string value of a JSON body.
    aliases: HashMap<String, bool>,
}

// === impl BodyPlaces ===

impl BodyPlaces {
    /// The body places the aliases of `file` name.
    pub fn new(file: &AliasFile) -> BodyPlaces {
        BodyPlaces {
            aliases: file
                .aliases
                .iter()
                .map(|alias| (alias.name.clone(), alias.sites.contains(Site::Body)))
                .collect(),
        }
    }

    /// Whether `alias` is declared.
    pub fn is_declared(&self, alias: &str) -> bool {
        self.aliases.contains_key(alias)
    }

    /// Whether `alias` names a string value of a JSON body as a place for its secret.
    pub fn names_json_value(&self, alias: &str) -> bool {
        self.aliases.get(alias).copied().unwrap_or(false)
    }

    /// Whether any alias names a string value of a JSON body: a malformed placeholder there is
    /// refused rather than forwarded as text.
    pub fn any_json_value(&self) -> bool {
        self.aliases.values().any(|&named| named)
    }
}

/// Where in a body an inert placeholder sat: a place Mint never substitutes for its alias.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum InertPlace {
    /// A string value of a JSON body that is not one of the alias's body places.
    JsonValue,
    /// A member name of a JSON body.
    JsonKey,
    /// A body that is not JSON (by its `Content-Type` or because it does not parse), or one
    /// with a content coding.
    Text,
}

// === impl InertPlace ===

impl InertPlace {
    /// Every place, in order.
    pub const ALL: [InertPlace; 3] = [InertPlace::JsonValue, InertPlace::JsonKey, InertPlace::Text];

    /// The place's name in audit records: `json_value`, `json_key` or `text`.
    pub fn as_str(self) -> &'static str {
        match self {
            InertPlace::JsonValue => "json_value",
            InertPlace::JsonKey => "json_key",
            InertPlace::Text => "text",
        }
    }

    /// The place called `name`.
    pub fn from_name(name: &str) -> Option<InertPlace> {
        InertPlace::ALL
            .into_iter()
            .find(|place| place.as_str() == name)
    }
}

impl std::fmt::Display for InertPlace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
