//! The four read-only tools: their definitions for `tools/list`, argument checking, and dispatch
//! of `tools/call`.
//!
//! Each tool returns its payload as pretty-printed JSON, which `server` wraps in one text content
//! block. Tools read files only through `file_guard`, re-read them on every call, and return
//! parsed declarations and records only: an error names a kind, a line and a column, never a
//! value from a file, and only for a file recognisably of the tool's kind; every other file gets
//! the one answer of [`unreadable`]. None of them resolves, returns or forwards a credential.

use mint_policy::Diagnostic;
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

use crate::file_guard::FileError;
use crate::jsonrpc::{INTERNAL_ERROR, INVALID_PARAMS, RpcError};
use crate::paths::Config;

mod alias_list;
mod audit_tail;
mod mint_usage;
mod policy_check;

/// Calls the tool `name` with `arguments` (absent or `null` for none, else an object), returning
/// its payload as pretty-printed JSON. An unknown tool is `INTERNAL_ERROR` whatever the
/// arguments; arguments that are not an object are `INVALID_PARAMS`.
pub(crate) fn call(
    name: &str,
    arguments: Option<&Value>,
    config: &Config,
) -> Result<String, RpcError> {
    if !DEFINITIONS.iter().any(|(known, _, _)| *known == name) {
        return Err(RpcError::new(
            INTERNAL_ERROR,
            format!("unknown tool {}", quote(name)),
        ));
    }
    let empty = Map::new();
    let arguments = match arguments {
        None | Some(Value::Null) => &empty,
        Some(Value::Object(arguments)) => arguments,
        Some(_) => return Err(invalid("`arguments` must be an object".to_owned())),
    };
    match name {
        "alias_list" => alias_list::call(Arguments::new(arguments, &["path"])?, config),
        "policy_check" => policy_check::call(Arguments::new(arguments, &["file"])?, config),
        "audit_tail" => audit_tail::call(Arguments::new(arguments, &["n", "path"])?, config),
        "mint_usage" => mint_usage::call(Arguments::new(arguments, &[])?, config),
        other => Err(RpcError::new(
            INTERNAL_ERROR,
            format!("unknown tool {}", quote(other)),
        )),
    }
}

/// The `tools/list` result: exactly the four tools, with the reference's input schemas.
pub(crate) fn list() -> Result<Box<RawValue>, serde_json::Error> {
    #[derive(Serialize)]
    struct List {
        tools: Vec<Definition>,
    }
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Definition {
        name: &'static str,
        description: &'static str,
        input_schema: Box<RawValue>,
        annotations: Value,
    }
    let tools = DEFINITIONS
        .iter()
        .map(|(name, description, schema)| {
            Ok(Definition {
                name,
                description,
                input_schema: RawValue::from_string((*schema).to_owned())?,
                annotations: json!({
                    "readOnlyHint": true,
                    "destructiveHint": false,
                    "idempotentHint": true,
                    "openWorldHint": false,
                }),
            })
        })
        .collect::<Result<Vec<_>, serde_json::Error>>()?;
    serde_json::value::to_raw_value(&List { tools })
}

/// A `tools/call` result: one text block holding the payload.
pub(crate) fn content(text: &str) -> Result<Box<RawValue>, serde_json::Error> {
    #[derive(Serialize)]
    struct Content<'a> {
        content: [Text<'a>; 1],
    }
    #[derive(Serialize)]
    struct Text<'a> {
        r#type: &'static str,
        text: &'a str,
    }
    serde_json::value::to_raw_value(&Content {
        content: [Text {
            r#type: "text",
            text,
        }],
    })
}

/// A tool's arguments, checked against the names it takes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Arguments<'a> {
    map: &'a Map<String, Value>,
}

// === impl Arguments ===

impl<'a> Arguments<'a> {
    /// Refuses any argument not in `allowed`, so a misspelt `path` is an error rather than a
    /// silent read of the default file.
    fn new(map: &'a Map<String, Value>, allowed: &[&str]) -> Result<Arguments<'a>, RpcError> {
        if let Some(unknown) = map.keys().find(|key| !allowed.contains(&key.as_str())) {
            let takes = match allowed {
                [] => "no argument".to_owned(),
                names => names
                    .iter()
                    .map(|name| format!("`{name}`"))
                    .collect::<Vec<_>>()
                    .join(" and "),
            };
            return Err(invalid(format!(
                "unknown argument {}; this tool takes {takes}",
                quote(unknown)
            )));
        }
        Ok(Arguments { map })
    }

    /// An optional path: absent, or a non-empty string without NUL.
    fn path(&self, key: &str) -> Result<Option<&'a str>, RpcError> {
        match self.map.get(key) {
            None => Ok(None),
            Some(Value::String(text)) if !text.is_empty() && !text.contains('\0') => Ok(Some(text)),
            Some(_) => Err(invalid(format!(
                "`{key}` must be a non-empty string without NUL"
            ))),
        }
    }

    /// A required path: a non-empty string without NUL.
    fn required_path(&self, key: &str) -> Result<&'a str, RpcError> {
        self.path(key)?
            .ok_or_else(|| invalid(format!("`{key}` is required")))
    }

    /// An optional integer of at least 1. A number with no fractional part counts as an
    /// integer, as in JSON Schema; one beyond `u64` saturates.
    fn positive_integer(&self, key: &str) -> Result<Option<u64>, RpcError> {
        let Some(value) = self.map.get(key) else {
            return Ok(None);
        };
        let number = match value {
            Value::Number(number) => number.as_u64().or_else(|| {
                number
                    .as_f64()
                    .filter(|f| f.fract() == 0.0 && *f >= 1.0)
                    .map(
                        // Saturating: 1e300 is simply a very large count.
                        |f| f as u64,
                    )
            }),
            _ => None,
        };
        match number {
            Some(n) if n >= 1 => Ok(Some(n)),
            _ => Err(invalid(format!("`{key}` must be an integer of at least 1"))),
        }
    }
}

/// The one answer for every file a tool does not read — missing, not a regular file, not
/// readable, refused by the guard, outside the working directory and `MINT_HOME`, too large, or
/// not recognisably `a_what` — naming only the path as the call gave it. Message and `data` are
/// the same whatever the reason, so the answer tells the agent nothing about a file it may not
/// read itself (whether it exists, its type, size, lines or keys); the reason goes to the
/// server's log at debug level only.
pub(crate) fn unreadable(what: &str, a_what: &str, path: &str, error: FileError) -> RpcError {
    tracing::debug!(error.code = error.code(), "A {what} was not read");
    RpcError {
        code: INTERNAL_ERROR,
        message: format!(
            "cannot read {what} `{path}`: it is missing, refused, or not recognisably {a_what}"
        ),
        data: serde_json::value::to_raw_value(&json!({ "kind": UNREADABLE })).ok(),
    }
}

/// The `data.kind` of [`unreadable`].
pub(crate) const UNREADABLE: &str = "unreadable";

/// An error about a file that does not validate: a one-line summary, and every finding (errors
/// first, then warnings) in `data`, each as `{code, line, column, rule_id, path, message}`.
pub(crate) fn findings<'d>(
    summary: String,
    diagnostics: impl IntoIterator<Item = &'d Diagnostic>,
) -> RpcError {
    let data: Vec<&Diagnostic> = diagnostics.into_iter().collect();
    RpcError {
        code: INTERNAL_ERROR,
        message: summary,
        data: serde_json::value::to_raw_value(&data).ok(),
    }
}

/// Pretty-prints a payload.
fn pretty(payload: &impl Serialize) -> Result<String, RpcError> {
    serde_json::to_string_pretty(payload).map_err(|_| {
        tracing::error!("Cannot serialize a tool result");
        RpcError::new(INTERNAL_ERROR, "internal error")
    })
}

fn invalid(message: String) -> RpcError {
    RpcError::new(INVALID_PARAMS, message)
}

/// A client-supplied name for a message: in backticks when short and printable, else a
/// placeholder, so a message never grows with the input.
pub(crate) fn quote(name: &str) -> String {
    if name.len() <= 64 && !name.chars().any(char::is_control) {
        format!("`{name}`")
    } else {
        "(name not shown)".to_owned()
    }
}

/// Name, description and input schema (verbatim from the reference) of each tool.
const DEFINITIONS: [(&str, &str, &str); 4] = [
    (
        "alias_list",
        "List Mint's alias declarations: each alias's name, description, hosts and request \
         sites. Read-only; never returns or resolves a secret.",
        r#"{"type":"object","properties":{"path":{"type":"string"}}}"#,
    ),
    (
        "policy_check",
        "Parse and validate one Mint policy file. Returns its rule counts, default and warnings; \
         errors come back with line, column and a fix.",
        r#"{"type":"object","required":["file"],"properties":{"file":{"type":"string"}}}"#,
    ),
    (
        "audit_tail",
        "Read the most recent records of Mint's audit log (20 unless n says otherwise). Lines \
         that are not audit records are counted, never shown.",
        r#"{"type":"object","properties":{"n":{"type":"integer","minimum":1},"path":{"type":"string"}}}"#,
    ),
    (
        "mint_usage",
        "Explain how to make a credentialed HTTP request through the Mint proxy: route, \
         capability header, placeholder syntax and these read-only tools.",
        r#"{"type":"object","properties":{}}"#,
    ),
];

#[cfg(test)]
mod tests {
    use super::*;

    fn args(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            _ => panic!("not an object"),
        }
    }

    #[test]
    fn the_list_holds_exactly_the_four_tools_with_the_reference_schemas() {
        let raw = list().unwrap();
        let list: Value = serde_json::from_str(raw.get()).unwrap();
        let tools = list["tools"].as_array().unwrap();
        let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
        // The same four names, in the same order, as `mint_usage` (and `mint usage`) tell.
        assert_eq!(names, mint_policy::usage::usage("127.0.0.1:8700").tools);
        assert_eq!(
            tools[2]["inputSchema"],
            json!({"type":"object","properties":{"n":{"type":"integer","minimum":1},"path":{"type":"string"}}})
        );
        for tool in tools {
            assert_eq!(tool["annotations"]["readOnlyHint"], true);
            assert_eq!(tool["annotations"]["destructiveHint"], false);
            assert_eq!(tool["annotations"]["idempotentHint"], true);
            assert_eq!(tool["annotations"]["openWorldHint"], false);
        }
        // The schemas are kept byte for byte.
        assert!(raw.get().contains(DEFINITIONS[1].2));
    }

    #[test]
    fn arguments_are_checked() {
        let map = args(json!({"n": 5, "path": "x"}));
        let a = Arguments::new(&map, &["n", "path"]).unwrap();
        assert_eq!(a.positive_integer("n").unwrap(), Some(5));
        assert_eq!(a.path("path").unwrap(), Some("x"));
        assert_eq!(a.path("other").unwrap(), None);

        let err = Arguments::new(&map, &["path"]).unwrap_err();
        assert_eq!(err.code, INVALID_PARAMS);
        assert_eq!(err.message, "unknown argument `n`; this tool takes `path`");

        for bad in [
            json!(0),
            json!(-1),
            json!(1.5),
            json!("5"),
            json!(null),
            json!(true),
        ] {
            let map = args(json!({ "n": bad }));
            let err = Arguments::new(&map, &["n"]).unwrap().positive_integer("n");
            assert_eq!(err.unwrap_err().code, INVALID_PARAMS, "{bad}");
        }
        let map = args(json!({"n": 5.0, "m": 1e300}));
        let a = Arguments::new(&map, &["n", "m"]).unwrap();
        assert_eq!(a.positive_integer("n").unwrap(), Some(5));
        assert_eq!(a.positive_integer("m").unwrap(), Some(u64::MAX));

        for bad in [json!(""), json!(1), json!("a\u{0}b"), json!(null)] {
            let map = args(json!({ "file": bad }));
            let a = Arguments::new(&map, &["file"]).unwrap();
            assert_eq!(a.required_path("file").unwrap_err().code, INVALID_PARAMS);
        }
        let empty = Map::new();
        let err = Arguments::new(&empty, &["file"])
            .unwrap()
            .required_path("file");
        assert_eq!(err.unwrap_err().message, "`file` is required");
    }

    #[test]
    fn long_or_odd_names_are_not_echoed() {
        assert_eq!(quote("foo"), "`foo`");
        assert_eq!(quote(&"a".repeat(65)), "(name not shown)");
        assert_eq!(quote("a\nb"), "(name not shown)");
    }
}
