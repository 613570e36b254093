//! The two glob languages of the policy: name globs (agents, MCP tools) where `*` matches any run
//! of characters, and path globs where `*` stays within one segment and `**` spans whole segments.
//!
//! Patterns are checked when the policy loads, so matching never meets a malformed pattern.
//! Matching is byte-exact and case-sensitive, except [`NameGlob::matches_ignore_ascii_case`] (deny
//! and limit rules on tools); it never allocates per request beyond a small table.

use std::fmt;

/// A glob over a name: `*` matches any run of characters, everything else matches itself.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct NameGlob {
    text: String,
}

// === impl NameGlob ===

impl NameGlob {
    /// Accepts a non-empty pattern whose characters all satisfy `allowed` (besides `*`).
    pub fn parse(text: &str, allowed: fn(u8) -> bool) -> Option<NameGlob> {
        let ok = !text.is_empty()
            && text.len() <= 128
            && text.bytes().all(|b| b == b'*' || allowed(b))
            && !text.contains("**");
        ok.then(|| NameGlob {
            text: text.to_owned(),
        })
    }

    /// Whether the pattern is a plain name without `*`.
    pub fn is_literal(&self) -> bool {
        !self.text.contains('*')
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether `name` matches the pattern.
    pub fn matches(&self, name: &str) -> bool {
        wildcard_match(self.text.as_bytes(), name.as_bytes(), false)
    }

    /// Whether `name` matches the pattern with ASCII letters compared case-insensitively: how
    /// deny and limit rules match MCP tool names, since a server may look tools up in any case.
    pub fn matches_ignore_ascii_case(&self, name: &str) -> bool {
        wildcard_match(self.text.as_bytes(), name.as_bytes(), true)
    }

    /// Whether every name this pattern matches is also matched by `other`.
    pub fn covered_by(&self, other: &NameGlob) -> bool {
        other.text == "*" || (self.is_literal() && other.matches(&self.text)) || self == other
    }
}

impl fmt::Display for NameGlob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// A glob over a normalized URL path.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PathGlob {
    text: String,
    segments: Vec<Segment>,
    shape: Shape,
}

/// Common globs matched without the general algorithm.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Shape {
    /// No `*` at all: string equality.
    Literal,
    /// `/prefix/**` with no other `*`: the prefix itself or anything below it.
    Subtree(String),
    /// Anything else.
    General,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Segment {
    /// `**`: zero or more whole segments.
    Any,
    /// A segment pattern where `*` matches within the segment.
    One(String),
}

/// Why a path glob was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PathGlobError {
    /// The glob does not start with `/`.
    #[error("a path glob starts with `/`")]
    NotAbsolute,
    /// A `.` or `..` segment.
    #[error("dot segments (`.`, `..`) never match: Mint refuses them in requests")]
    DotSegment,
    /// An empty segment (`//`).
    #[error("`//` never matches: Mint refuses empty segments in requests")]
    EmptySegment,
    /// `**` inside a segment, such as `a**`.
    #[error("`**` must be a whole segment, as in `/repos/**`")]
    PartialDoubleStar,
    /// A character that normalized paths never hold in a glob (`;`, `%`, `?`, `#`, `\`, space,
    /// control, non-ASCII), or one that other glob languages give a meaning this one does not
    /// have (`{`, `}`, `[`, `]`).
    #[error(
        "a path glob may not hold `;`, `%`, `?`, `#`, `\\`, `{{`, `}}`, `[`, `]`, spaces or control \
         characters; write one glob per alternative and match the decoded path without the query"
    )]
    ForbiddenCharacter,
}

// === impl PathGlob ===

impl PathGlob {
    /// Parses and checks a path glob.
    pub fn parse(text: &str) -> Result<PathGlob, PathGlobError> {
        let Some(rest) = text.strip_prefix('/') else {
            return Err(PathGlobError::NotAbsolute);
        };
        if text.bytes().any(|b| {
            matches!(
                b,
                b';' | b'%' | b'?' | b'#' | b'\\' | b' ' | b'{' | b'}' | b'[' | b']'
            ) || b.is_ascii_control()
                || !b.is_ascii()
        }) {
            return Err(PathGlobError::ForbiddenCharacter);
        }
        let parts: Vec<&str> = rest.split('/').collect();
        let last = parts.len().saturating_sub(1);
        let mut segments = Vec::with_capacity(parts.len());
        for (i, part) in parts.iter().enumerate() {
            match *part {
                "." | ".." => return Err(PathGlobError::DotSegment),
                // A trailing slash (`/repos/`) is a real, empty last segment.
                "" if i != last => return Err(PathGlobError::EmptySegment),
                "**" => segments.push(Segment::Any),
                p if p.contains("**") => return Err(PathGlobError::PartialDoubleStar),
                p => segments.push(Segment::One(p.to_owned())),
            }
        }
        let shape = if !text.contains('*') {
            Shape::Literal
        } else {
            match text.strip_suffix("/**") {
                Some(prefix) if !prefix.contains('*') && !prefix.is_empty() => {
                    Shape::Subtree(prefix.to_owned())
                }
                _ => Shape::General,
            }
        };
        Ok(PathGlob {
            text: text.to_owned(),
            segments,
            shape,
        })
    }

    /// The glob as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether the normalized `path` (without query) matches.
    pub fn matches(&self, path: &str) -> bool {
        match &self.shape {
            Shape::Literal => return path == self.text,
            Shape::Subtree(prefix) => {
                // `/a/**`: `/a` itself or anything below it.
                return path
                    .strip_prefix(prefix.as_str())
                    .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'));
            }
            Shape::General => {}
        }
        let Some(rest) = path.strip_prefix('/') else {
            return false;
        };
        let parts: Vec<&str> = rest.split('/').collect();
        // reachable[j]: the pattern prefix processed so far can consume exactly parts[..j].
        let mut reachable = vec![false; parts.len() + 1];
        if let Some(first) = reachable.first_mut() {
            *first = true;
        }
        for segment in &self.segments {
            let mut next = vec![false; parts.len() + 1];
            match segment {
                Segment::Any => {
                    let mut seen = false;
                    for (j, slot) in next.iter_mut().enumerate() {
                        seen |= reachable.get(j).copied().unwrap_or(false);
                        *slot = seen;
                    }
                }
                Segment::One(pattern) => {
                    for (j, part) in parts.iter().enumerate() {
                        // A lone `*` stands for one segment, never an empty one.
                        if reachable.get(j).copied().unwrap_or(false)
                            && !(part.is_empty() && pattern == "*")
                            && wildcard_match(pattern.as_bytes(), part.as_bytes(), false)
                            && let Some(slot) = next.get_mut(j + 1)
                        {
                            *slot = true;
                        }
                    }
                }
            }
            reachable = next;
        }
        reachable.last().copied().unwrap_or(false)
    }

    /// Whether every path this glob matches is also matched by `other` (a conservative answer:
    /// `false` when unsure).
    pub fn covered_by(&self, other: &PathGlob) -> bool {
        if self == other || other.text == "/**" {
            return true;
        }
        !self.text.contains('*') && other.matches(&self.text)
    }
}

impl fmt::Display for PathGlob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// Classic `*` wildcard matching with one backtrack point: O(pattern × text) at worst.
fn wildcard_match(pattern: &[u8], text: &[u8], fold: bool) -> bool {
    let same = |pc: Option<u8>, tc: Option<u8>| match (pc, tc) {
        (Some(a), Some(b)) if fold => a.eq_ignore_ascii_case(&b),
        (Some(a), Some(b)) => a == b,
        _ => false,
    };
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        let pc = pattern.get(p).copied();
        let tc = text.get(t).copied();
        if pc == Some(b'*') {
            star = Some((p, t));
            p += 1;
        } else if same(pc, tc) {
            p += 1;
            t += 1;
        } else if let Some((sp, st)) = star {
            p = sp + 1;
            t = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    pattern
        .get(p..)
        .is_some_and(|rest| rest.iter().all(|&b| b == b'*'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(s: &str) -> NameGlob {
        NameGlob::parse(s, |b| b.is_ascii_alphanumeric() || b == b'-').unwrap()
    }

    #[test]
    fn name_globs() {
        assert!(name("ci-*").matches("ci-runner"));
        assert!(name("ci-*").matches("ci-"));
        assert!(!name("ci-*").matches("xci-runner"));
        assert!(name("*").matches("anything"));
        assert!(name("a*b*c").matches("axxbyyc"));
        assert!(!name("a*b*c").matches("axxbyy"));
        assert!(!name("mino").matches("Mino"));
        assert!(NameGlob::parse("a**", |b| b.is_ascii_alphanumeric()).is_none());
        assert!(NameGlob::parse("", |b| b.is_ascii_alphanumeric()).is_none());
        assert!(name("ci-x").covered_by(&name("ci-*")));
        assert!(!name("ci-*").covered_by(&name("ci-x")));
    }

    #[test]
    fn path_globs_match_segments() {
        let cases = [
            ("/user", "/user", true),
            ("/user", "/user/", false),
            ("/user", "/users", false),
            ("/repos/**", "/repos", true),
            ("/repos/**", "/repos/", true),
            ("/repos/**", "/repos/a/b/c", true),
            ("/repos/**", "/reposx/a", false),
            ("/repos/*", "/repos/a", true),
            ("/repos/*", "/repos/a/b", false),
            ("/repos/*", "/repos/", false),
            ("/repos/a*", "/repos/a", true),
            ("/repos/*/issues", "/repos/a/issues", true),
            ("/repos/*/issues", "/repos/a/b/issues", false),
            ("/repos/**/issues", "/repos/a/b/issues", true),
            ("/repos/**/issues", "/repos/issues", true),
            ("/v1/*.json", "/v1/a.json", true),
            ("/v1/*.json", "/v1/a/b.json", false),
            ("/**", "/", true),
            ("/**", "/anything/at/all", true),
            ("/", "/", true),
            ("/", "/a", false),
            ("/A", "/a", false),
            ("/**/x/**/y", "/a/x/b/c/y", true),
        ];
        for (glob, path, expected) in cases {
            assert_eq!(
                PathGlob::parse(glob).unwrap().matches(path),
                expected,
                "{glob} vs {path}"
            );
        }
    }

    #[test]
    fn path_glob_errors() {
        use PathGlobError::*;
        let cases = [
            ("repos", NotAbsolute),
            ("/a/../b", DotSegment),
            ("/a/./b", DotSegment),
            ("/a//b", EmptySegment),
            ("/a;b", ForbiddenCharacter),
            ("/a%2Fb", ForbiddenCharacter),
            ("/a?b", ForbiddenCharacter),
            ("/a#b", ForbiddenCharacter),
            ("/a\\b", ForbiddenCharacter),
            ("/a b", ForbiddenCharacter),
            ("/a**", PartialDoubleStar),
        ];
        for (glob, error) in cases {
            assert_eq!(PathGlob::parse(glob), Err(error), "{glob}");
        }
    }

    #[test]
    fn many_double_stars_stay_fast() {
        let glob = PathGlob::parse(&"/**".repeat(50)).unwrap();
        let path = "/a".repeat(200) + "/b";
        assert!(glob.matches(&path));
    }
}
