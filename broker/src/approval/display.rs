//! Text an operator reads: stripped of everything a terminal would act on.
//!
//! A path, a tool name or a tool's arguments come from the agent (and an agent is steered by what
//! it reads), so each could carry a terminal escape: an OSC 52 clipboard write, a cursor move that
//! paints a harmless destination over the real one, a bidirectional override that reverses what
//! is shown. Every such character is replaced by its visible `\u{…}` spelling before the text is
//! listed or shown, on the broker's side of the socket and again by the watching terminal.

/// C0, DEL and C1 controls, the bidirectional-text controls (marks, embeddings, overrides and
/// isolates), which can make a terminal show text in another order than it is stored, the line
/// and paragraph separators (U+2028, U+2029), which some terminals and viewers take as line
/// breaks, and the invisible characters (every format character of Unicode's `Cf` category —
/// zero-width space, joiners, invisible operators, soft hyphen, tags, the byte order mark — and
/// the blank fillers and selectors that render as nothing: Hangul fillers, braille blank,
/// variation selectors), which hide that two texts differ.
pub fn is_terminal_control(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            // Soft hyphen, combining grapheme joiner, Arabic letter mark.
            '\u{00ad}'
                | '\u{034f}'
                | '\u{061c}'
                // Hangul fillers, Khmer inherent vowels, Mongolian selectors and vowel separator.
                | '\u{115f}'
                | '\u{1160}'
                | '\u{17b4}'
                | '\u{17b5}'
                | '\u{180b}'..='\u{180f}'
                | '\u{200b}'..='\u{200f}'
                | '\u{2028}'..='\u{202e}'
                // Word joiner, invisible operators, the unassigned U+2065, isolates, deprecated
                // format controls.
                | '\u{205f}'..='\u{206f}'
                // Braille blank, Hangul filler, variation selectors, BOM, halfwidth filler,
                // interlinear annotation and other specials.
                | '\u{2800}'
                | '\u{3164}'
                | '\u{fe00}'..='\u{fe0f}'
                | '\u{feff}'
                | '\u{ffa0}'
                | '\u{fff0}'..='\u{fffb}'
                // Shorthand format controls, musical symbol formats, tags, variation selectors
                // supplement.
                | '\u{1bca0}'..='\u{1bca3}'
                | '\u{1d173}'..='\u{1d17a}'
                | '\u{e0000}'..='\u{e007f}'
                | '\u{e0100}'..='\u{e01ef}'
        )
}

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
