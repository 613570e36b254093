//! Text an operator reads: stripped of everything a terminal would act on.
//!
//! A path, a tool name or a tool's arguments come from the agent (and an agent is steered by what
//! it reads), so each could carry a terminal escape: an OSC 52 clipboard write, a cursor move that
//! paints a harmless destination over the real one, a bidirectional override that reverses what
//! is shown. Every such character is replaced by its visible `\u{…}` spelling before the text is
//! listed or shown, on the broker's side of the socket and again by the watching terminal.

use crate::cli::terminal::is_terminal_control;

/// How much of a tool call's pretty-printed arguments is shown.
pub const MAX_ARGUMENTS: usize = 2048;

/// `text` with every character [`is_terminal_control`] names (controls, bidirectional and
/// invisible formatting characters; `\n` kept with `keep_newlines`) spelled out as `\u{…}`:
/// inert on any terminal, and the operator sees that something was there.
pub fn inert(text: &str, keep_newlines: bool) -> String {
    let mut shown = String::with_capacity(text.len());
    for c in text.chars() {
        if (keep_newlines && c == '\n') || !is_terminal_control(c) {
            shown.push(c);
        } else {
            shown.push_str(&format!("\\u{{{:x}}}", u32::from(c)));
        }
    }
    shown
}

/// A tool call's arguments as the operator sees them: pretty JSON, cut after
/// [`MAX_ARGUMENTS`] bytes (at a character boundary, saying how much was left out), inert.
pub fn arguments(value: &serde_json::Value) -> String {
    let pretty = serde_json::to_string_pretty(value).unwrap_or_default();
    let text = if pretty.len() > MAX_ARGUMENTS {
        let mut end = MAX_ARGUMENTS;
        while !pretty.is_char_boundary(end) {
            end -= 1;
        }
        format!(
            "{}\n… (cut: {} of {} bytes shown)",
            &pretty[..end],
            end,
            pretty.len()
        )
    } else {
        pretty
    };
    inert(&text, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_and_overrides_are_spelled_out() {
        let osc52 = "/x\u{1b}]52;c;ZWNobyBwd25lZA==\u{7}/y";
        let shown = inert(osc52, false);
        assert!(!shown.chars().any(char::is_control), "{shown:?}");
        assert!(shown.contains("\\u{1b}]52"), "{shown}");
        let csi = "/a\u{9b}2J\u{202e}gpj.exe";
        let shown = inert(csi, false);
        assert_eq!(shown, "/a\\u{9b}2J\\u{202e}gpj.exe");
        assert_eq!(inert("a\nb", false), "a\\u{a}b");
        assert_eq!(inert("a\nb", true), "a\nb");
    }

    #[test]
    fn arguments_are_pretty_cut_and_inert() {
        let value = serde_json::json!({"a_title": "hi\u{9b}31m", "body": "x".repeat(5000)});
        let shown = arguments(&value);
        assert!(shown.len() < MAX_ARGUMENTS + 100, "{}", shown.len());
        assert!(shown.contains("(cut: 2048 of"), "{shown}");
        assert!(shown.contains("\\u{9b}"), "{shown}");
        assert!(!shown.chars().any(|c| c.is_control() && c != '\n'));
        let small = arguments(&serde_json::json!({"a": 1}));
        assert_eq!(small, "{\n  \"a\": 1\n}");
    }

    #[test]
    fn a_cut_never_splits_a_character() {
        let value = serde_json::json!({"t": "é".repeat(3000)});
        let shown = arguments(&value);
        assert!(shown.contains("(cut:"), "{shown}");
    }
}
