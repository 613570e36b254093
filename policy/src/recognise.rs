//! Whether a file's bytes are recognisably a policy file or an alias file, before any finding
//! about them is shown to someone who may not read the file.
//!
//! `mint-mcp` answers an agent that names any path: the findings of a loader (an unknown field's
//! name, a duplicate key's, where the first non-UTF-8 byte sits, the size) would describe a file
//! that is not a declaration at all. It shows them only for a file these functions recognise:
//! one YAML document the loader accepts, whose top level is a mapping that holds the format's
//! required key and no key the format does not define. Like the loaders, this is pure and never
//! quotes the text.

use crate::yaml::{self, NodeKind};

/// Whether `bytes` are recognisably a policy file: a mapping with `version`, and only the policy's
/// top-level keys (`version`, `default`, `rules`, `call_limits`).
pub fn is_policy_file(bytes: &[u8]) -> bool {
    top_level_is(bytes, "version", crate::policy::TOP_FIELDS)
}

/// Whether `bytes` are recognisably an alias file: a mapping with `aliases` and nothing else.
pub fn is_alias_file(bytes: &[u8]) -> bool {
    top_level_is(bytes, "aliases", crate::aliases::TOP_FIELDS)
}

fn top_level_is(bytes: &[u8], required: &str, known: &[&str]) -> bool {
    let Ok(root) = yaml::load(bytes) else {
        return false;
    };
    let NodeKind::Map(entries) = &root.kind else {
        return false;
    };
    let mut has_required = false;
    for (key, _) in entries {
        let NodeKind::Scalar { text, .. } = &key.kind else {
            return false;
        };
        if !known.contains(&&**text) {
            return false;
        }
        has_required |= &**text == required;
    }
    has_required
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_are_recognised_by_their_top_level() {
        for text in [
            "version: 1\n",
            "version: 7\nrules: 5\n",
            "\u{feff}{version: 1, default: allow}\n",
            "\"version\": 1\ncall_limits: {}\n",
        ] {
            assert!(is_policy_file(text.as_bytes()), "{text}");
        }
        for text in [
            &b""[..],
            b"default: deny\n",
            b"version: 1\npassword: x\n",
            b"version: 1\nversion: 2\n",
            b"- version\n",
            b"version\n",
            b"version: 1\n---\nversion: 1\n",
            b"version: 1\n\xff\n",
            b"? [version]\n: 1\n",
            b"aliases: []\n",
        ] {
            assert!(!is_policy_file(text), "{}", String::from_utf8_lossy(text));
        }
        let mut big = b"version: 1\n".to_vec();
        big.resize(crate::MAX_FILE_BYTES + 1, b'#');
        assert!(!is_policy_file(&big));
    }

    #[test]
    fn alias_files_are_recognised_by_their_top_level() {
        assert!(is_alias_file(b"aliases: []\n"));
        assert!(is_alias_file(b"aliases:\n  - name: x\n    bogus: 1\n"));
        for text in [
            &b"aliases: []\nversion: 1\n"[..],
            b"version: 1\n",
            b"[aliases]\n",
            b"",
        ] {
            assert!(!is_alias_file(text), "{}", String::from_utf8_lossy(text));
        }
    }
}
