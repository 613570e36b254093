//! Findings about a declaration file: a stable code, a position, the rule and field they concern,
//! and a message that says how to fix the problem.
//!
//! Shared by the policy file, the alias file and the loader beneath both. Messages may quote what
//! the operator wrote in a typed field (a host, a method, a field name) but never a free scalar that
//! could be a secret pasted into the wrong place.

use std::fmt;

use serde::{Serialize, Serializer};

/// How serious a finding is: errors make a file invalid, warnings do not.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// The file is refused.
    Error,
    /// The file loads, but probably does not say what its author meant.
    Warning,
}

macro_rules! codes {
    ($( $(#[$doc:meta])* $variant:ident = $code:literal, $title:literal; )*) => {
        /// Stable identifier of one kind of finding. The text (`E020`) never changes meaning.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[non_exhaustive]
        pub enum Code {
            $( $(#[$doc])* $variant, )*
        }

        impl Code {
            /// Every code, in numeric order.
            pub const ALL: &'static [Code] = &[$(Code::$variant,)*];

            /// The stable text of the code, such as `E020`.
            pub fn as_str(self) -> &'static str {
                match self { $(Code::$variant => $code,)* }
            }

            /// A short title for documentation and listings.
            pub fn title(self) -> &'static str {
                match self { $(Code::$variant => $title,)* }
            }
        }
    };
}

codes! {
    /// The file is larger than the loader accepts.
    FileTooLarge = "E001", "file too large";
    /// The file is not valid UTF-8.
    NotUtf8 = "E002", "not UTF-8";
    /// The YAML syntax is broken.
    YamlSyntax = "E003", "YAML syntax error";
    /// A YAML anchor (`&a`) or alias (`*a`) was used.
    YamlAnchor = "E004", "YAML anchors and aliases are not allowed";
    /// A mapping holds the same key twice.
    DuplicateKey = "E005", "duplicate key";
    /// The document nests deeper than the loader accepts.
    TooDeep = "E006", "nesting too deep";
    /// An explicit YAML tag (`!!str`, `!custom`) was used.
    YamlTag = "E007", "YAML tags are not allowed";
    /// The file is empty or holds more than one YAML document.
    NotSingleDocument = "E008", "not exactly one YAML document";
    /// More findings than are reported; the rest are summarized.
    TooManyFindings = "E009", "too many findings";
    /// A field the format does not define.
    UnknownField = "E010", "unknown field";
    /// A required field is missing.
    MissingField = "E011", "missing field";
    /// A field holds the wrong kind of value.
    WrongType = "E012", "wrong type";
    /// `version` is not a version this Mint understands.
    UnsupportedVersion = "E013", "unsupported version";
    /// `default` is neither `deny` nor `allow`.
    InvalidDefault = "E014", "invalid default";
    /// A list that must not be empty is empty.
    EmptyList = "E015", "empty list";
    /// A flow collection (`[...]`, `{...}`) too long for the loader to read in bounded memory.
    FlowTooLong = "E016", "flow collection too long";
    /// A host wildcard that is not a whole leading label.
    WildcardNotLeadingLabel = "E020", "wildcard must be a whole leading label";
    /// A host wildcard that would cover a whole top-level domain or everything.
    WildcardTooBroad = "E021", "wildcard too broad";
    /// A host that is valid but not written in its canonical form.
    HostNotCanonical = "E022", "host not canonical";
    /// A host that is not a valid host name or IP address.
    InvalidHost = "E023", "invalid host";
    /// `http` for a host that is not loopback.
    PlainHttpNonLoopback = "E024", "plain http to a non-loopback host";
    /// A scheme other than `https` or `http`.
    InvalidScheme = "E025", "invalid scheme";
    /// A port outside 1-65535.
    InvalidPort = "E026", "invalid port";
    /// A method that is not an uppercase HTTP token.
    InvalidMethod = "E027", "invalid method";
    /// A path glob that could never match a normalized path.
    InvalidPathGlob = "E028", "invalid path glob";
    /// An agent glob with characters outside the agent-name grammar.
    InvalidAgentGlob = "E029", "invalid agent glob";
    /// A rule id outside `^[a-z0-9][a-z0-9._-]{0,63}$`.
    InvalidRuleId = "E030", "invalid rule id";
    /// Two rules with the same id.
    DuplicateRuleId = "E031", "duplicate rule id";
    /// An effect other than `allow`, `deny`, `limit` or `approve`.
    InvalidEffect = "E032", "invalid effect";
    /// A field that this rule's effect does not accept.
    FieldNotAllowedForEffect = "E033", "field not allowed for this effect";
    /// An allow or approve rule without `match.host`.
    AllowWithoutHost = "E034", "allow or approve rule without host";
    /// A request site other than `header`, `query` or `body`.
    InvalidSite = "E035", "invalid site";
    /// An alias name outside `^[a-z0-9][a-z0-9_-]{0,63}$`.
    InvalidAliasName = "E036", "invalid alias name";
    /// A tool glob with characters that no MCP tool name holds.
    InvalidToolGlob = "E037", "invalid tool glob";
    /// A limit's `max` that is not a positive integer within bounds.
    InvalidLimitMax = "E038", "invalid limit max";
    /// A duration that is not a positive number followed by s, m, h or d.
    InvalidDuration = "E039", "invalid duration";
    /// A limit's `by` that names something other than agent, alias, host or tool.
    InvalidLimitBy = "E040", "invalid limit key";
    /// A `limit` rule without `limits`.
    LimitRuleWithoutLimits = "E041", "limit rule without limits";
    /// More rules than a policy may hold.
    TooManyRules = "E042", "too many rules";
    /// A legacy `call_limits` entry with a bad key or count.
    InvalidCallLimit = "E043", "invalid call limit";
    /// Two aliases with the same name.
    DuplicateAlias = "E050", "duplicate alias";
    /// A secret source other than `keyring`, `env:VAR` or `file:/absolute/path`.
    InvalidSource = "E051", "invalid secret source";
    /// A bare `body` site: the body site must name its JSON Pointers.
    BodySiteWithoutPointers = "E052", "body site without pointers";
    /// A `body` pointer that is not a JSON Pointer (RFC 6901), or too many of them.
    InvalidJsonPointer = "E053", "invalid JSON Pointer";
    /// An `env` name outside the variable grammar `[A-Za-z_][A-Za-z0-9_]*`.
    InvalidEnvName = "E055", "invalid environment variable name";
    /// An `env` name that `mint run` sets itself (a proxy or CA variable) or that configures Mint.
    ReservedEnvName = "E056", "reserved environment variable name";
    /// An `env` name declared twice, in one alias or in two.
    DuplicateEnvName = "E057", "duplicate environment variable name";
    /// A `form` field name that is empty, too long or holds a control character, or too many.
    InvalidFormField = "E058", "invalid form field";
    /// A bare `form` site: the form site must name its fields.
    FormSiteWithoutFields = "E059", "form site without fields";
    /// An approve rule's `approval.timeout` outside 1 s to 280 s.
    ApprovalTimeoutOutOfRange = "E060", "approval timeout out of range";
    /// A `placeholder` shape this version does not read (prefix grammar, length, alphabet).
    InvalidPlaceholderShape = "E061", "invalid placeholder shape";
    /// A `placeholder` shape whose random part carries fewer than 128 bits.
    WeakPlaceholderShape = "E062", "placeholder shape too guessable";
    /// A `placeholder` shape that reads as Mint's own syntax or tokens.
    ReservedPlaceholderShape = "E063", "placeholder shape collides with Mint's syntax";
    /// `default: allow`.
    DefaultAllow = "W001", "default allow";
    /// The legacy `call_limits` map.
    LegacyCallLimits = "W002", "legacy call_limits";
    /// An allow or approve rule that a deny rule always overrides.
    AllowShadowedByDeny = "W003", "allow or approve rule shadowed by a deny rule";
    /// A secret that may travel to a wildcard host.
    AliasWildcardHost = "W004", "alias on a wildcard host";
    /// Secrets allowed in the query or the body.
    InjectBeyondHeader = "W005", "inject beyond headers";
    /// `allow_private: true`.
    AllowPrivate = "W006", "private addresses allowed";
    /// A method that is not a registered HTTP method.
    UnknownMethod = "W007", "unknown method";
    /// The policy is too large for the shadowed-rule check to finish.
    ShadowCheckIncomplete = "W008", "shadow check incomplete";
}

// === impl Code ===

impl Code {
    /// Whether findings with this code make the file invalid.
    pub fn severity(self) -> Severity {
        if self.as_str().starts_with('W') {
            Severity::Warning
        } else {
            Severity::Error
        }
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Code {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

/// A position in a file, 1-based. Problems about the whole file sit at 1:1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Pos {
    /// Line, from 1.
    pub line: usize,
    /// Column in characters, from 1.
    pub column: usize,
}

// === impl Pos ===

impl Pos {
    /// The start of a file.
    pub const START: Pos = Pos { line: 1, column: 1 };
}

impl fmt::Display for Pos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.line, self.column)
    }
}

/// One finding. Serializes as `{code, line, column, rule_id, path, message}`, the shape that
/// `mint policy check --json` prints and `policy_check` returns.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Diagnostic {
    /// What kind of problem this is.
    pub code: Code,
    /// Line, from 1.
    pub line: usize,
    /// Column, from 1.
    pub column: usize,
    /// The id of the rule (policy) or name of the alias (aliases file) the finding sits in.
    pub rule_id: Option<String>,
    /// The field path, such as `rules[3].match.host[1]`; empty for the whole document.
    pub path: String,
    /// What is wrong and how to fix it.
    pub message: String,
}

// === impl Diagnostic ===

impl Diagnostic {
    /// A finding at `pos` about the field at `path`.
    pub fn new(code: Code, pos: Pos, path: impl Into<String>, message: impl Into<String>) -> Self {
        Diagnostic {
            code,
            line: pos.line,
            column: pos.column,
            rule_id: None,
            path: path.into(),
            message: message.into(),
        }
    }

    /// The same finding, attributed to a rule or alias.
    #[must_use]
    pub fn in_rule(mut self, rule_id: Option<&str>) -> Self {
        self.rule_id = rule_id.map(str::to_owned);
        self
    }

    /// Whether the finding makes the file invalid.
    pub fn severity(&self) -> Severity {
        self.code.severity()
    }

    /// The position of the finding.
    pub fn pos(&self) -> Pos {
        Pos {
            line: self.line,
            column: self.column,
        }
    }

    /// The finding without its file name: `14:11 E020 rule "x": match.host[1]: message`.
    pub fn short(&self) -> String {
        format!(
            "{} {} {}",
            self.pos(),
            self.code,
            self.subject_and_message()
        )
    }

    /// One rustc-style line: `policy.yaml:14:11: error[E020]: rule "x": match.host[1]: message`.
    pub fn render(&self, origin: &str) -> String {
        let severity = match self.severity() {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        format!(
            "{origin}:{}: {severity}[{}]: {}",
            self.pos(),
            self.code,
            self.subject_and_message()
        )
    }

    fn subject_and_message(&self) -> String {
        let mut out = String::new();
        if let Some(id) = &self.rule_id {
            out.push_str(&format!("rule \"{id}\": "));
        }
        if !self.path.is_empty() {
            out.push_str(&self.path);
            out.push_str(": ");
        }
        out.push_str(&self.message);
        out
    }
}

/// The most findings reported for one file; a file with more gets one E009 finding at the end.
pub const MAX_DIAGNOSTICS: usize = 1000;

/// Sorts findings by position, then code, so output is stable whatever order checks ran in, and
/// keeps at most `MAX_DIAGNOSTICS` of them.
pub fn sort(diagnostics: &mut Vec<Diagnostic>) {
    if diagnostics.len() > MAX_DIAGNOSTICS {
        // Keep the first findings in file order; a file this broken needs those fixed first.
        sort_in_place(diagnostics);
        let dropped = diagnostics.len() - MAX_DIAGNOSTICS;
        diagnostics.truncate(MAX_DIAGNOSTICS);
        let last = diagnostics.last().map_or(Pos::START, Diagnostic::pos);
        diagnostics.push(too_many(last, dropped));
        return;
    }
    sort_in_place(diagnostics);
}

/// Findings as a file is checked, holding at most a few times `MAX_DIAGNOSTICS` at once: a
/// generated file with a finding per key (700,000 in 4 MiB) costs neither the memory of them
/// all nor a sort of them all. Keeps exactly what `sort` over every finding would keep: whenever
/// the list grows past `COMPACT_AT`, only the first `MAX_DIAGNOSTICS` in report order can still
/// be reported, so the rest are counted and dropped.
#[derive(Debug, Default)]
pub(crate) struct Findings {
    kept: Vec<Diagnostic>,
    /// Findings dropped so far (none of them among the first `MAX_DIAGNOSTICS`).
    dropped: usize,
    /// Errors pushed, dropped ones included: validity never depends on what is shown.
    errors: usize,
    /// Once findings were dropped: the position of the last one kept. A later finding past it
    /// can never be shown, so its message need not even be written (see `shows`).
    cutoff: Option<Pos>,
}

/// When `Findings` sorts and drops: a multiple of `MAX_DIAGNOSTICS`, so the work per finding
/// stays a constant.
const COMPACT_AT: usize = 8 * MAX_DIAGNOSTICS;

// === impl Findings ===

impl Findings {
    pub(crate) fn push(&mut self, diagnostic: Diagnostic) {
        if !self.shows(diagnostic.pos()) {
            self.skip(diagnostic.code);
            return;
        }
        if diagnostic.severity() == Severity::Error {
            self.errors += 1;
        }
        self.kept.push(diagnostic);
        if self.kept.len() >= COMPACT_AT {
            sort_in_place(&mut self.kept);
            self.dropped += self.kept.len() - MAX_DIAGNOSTICS;
            self.kept.truncate(MAX_DIAGNOSTICS);
            self.cutoff = self.kept.last().map(Diagnostic::pos);
        }
    }

    /// Whether a finding at `pos` could still be shown. When it could not, a caller in a loop
    /// over a huge file calls `skip` instead of writing the finding's message.
    pub(crate) fn shows(&self, pos: Pos) -> bool {
        self.cutoff.is_none_or(|cutoff| pos <= cutoff)
    }

    /// Counts a finding that cannot be shown (`shows` said so) without keeping it.
    pub(crate) fn skip(&mut self, code: Code) {
        if code.severity() == Severity::Error {
            self.errors += 1;
        }
        self.dropped += 1;
    }

    /// Whether any error was pushed.
    pub(crate) fn has_errors(&self) -> bool {
        self.errors > 0
    }

    /// Whether nothing was pushed.
    pub(crate) fn is_empty(&self) -> bool {
        self.kept.is_empty() && self.dropped == 0
    }

    /// The findings in report order, at most `MAX_DIAGNOSTICS` and an E009 counting the rest.
    pub(crate) fn into_sorted(self) -> Vec<Diagnostic> {
        let mut kept = self.kept;
        sort_in_place(&mut kept);
        let dropped = self.dropped + kept.len().saturating_sub(MAX_DIAGNOSTICS);
        kept.truncate(MAX_DIAGNOSTICS);
        if dropped > 0 {
            let last = kept.last().map_or(Pos::START, Diagnostic::pos);
            kept.push(too_many(last, dropped));
        }
        kept
    }
}

fn too_many(last: Pos, dropped: usize) -> Diagnostic {
    Diagnostic::new(
        Code::TooManyFindings,
        last,
        "",
        format!("{dropped} more findings not shown; fix the ones above and check again"),
    )
}

fn sort_in_place(diagnostics: &mut [Diagnostic]) {
    diagnostics.sort_by(|a, b| {
        (a.line, a.column, a.code, &a.path).cmp(&(b.line, b.column, b.code, &b.path))
    });
}

/// `1 error`, `3 errors`, `0 warnings`.
pub fn count_noun(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("{n} {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_unique_and_well_formed() {
        let mut seen = std::collections::HashSet::new();
        for code in Code::ALL {
            let text = code.as_str();
            assert!(seen.insert(text), "duplicate code {text}");
            assert_eq!(text.len(), 4);
            assert!(text.starts_with('E') || text.starts_with('W'));
            assert!(text[1..].chars().all(|c| c.is_ascii_digit()));
            assert!(!code.title().is_empty());
        }
    }

    #[test]
    fn renders_like_rustc() {
        let d = Diagnostic::new(
            Code::WildcardNotLeadingLabel,
            Pos {
                line: 14,
                column: 11,
            },
            "match.host[1]",
            "'*' must be a whole leading label, e.g. \"*.github.com\"",
        )
        .in_rule(Some("gh-write"));
        assert_eq!(
            d.render("policy.yaml"),
            "policy.yaml:14:11: error[E020]: rule \"gh-write\": match.host[1]: '*' must be a whole \
             leading label, e.g. \"*.github.com\""
        );
        let json = serde_json::to_string(&d).unwrap();
        assert_eq!(
            json,
            r#"{"code":"E020","line":14,"column":11,"rule_id":"gh-write","path":"match.host[1]","message":"'*' must be a whole leading label, e.g. \"*.github.com\""}"#
        );
    }
}
