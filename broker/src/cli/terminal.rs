//! What the CLI does to the operator's terminal: a hidden prompt that always gives the terminal
//! back as it found it, and text from files made safe to print.
//!
//! [`read_hidden`] turns echo off on the controlling terminal (`/dev/tty`) for one line and puts
//! the saved settings back on every way out: the line read, an error, a panic (a guard) and a
//! signal. Ctrl-C, Ctrl-\ and a hang-up reach the process as SIGINT, SIGQUIT and SIGHUP, and
//! `kill` sends SIGTERM; their default action would end the process with echo still off. A
//! watcher thread therefore takes them over before echo goes off, puts the settings back and
//! ends the process with status 128 + the signal's number, what a shell shows for a process the
//! signal killed. The kernel edits the line (erase, kill), so a typed secret is at most one
//! terminal line (4095 bytes on Linux); longer ones come in with `--secret-stdin`.
//!
//! [`printable`] replaces the characters a terminal takes as commands (C0 and C1 controls, DEL,
//! and the bidirectional-text controls that reorder what is shown) in a field read from a file;
//! [`json_for_terminal`] escapes those that a JSON encoder leaves raw. Neither ever sees a
//! secret: what they print are declarations.

use std::borrow::Cow;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::sync::{Mutex, OnceLock};

use rustix::termios::{LocalModes, OptionalActions, Termios, tcgetattr, tcsetattr};

pub use crate::approval::display::is_terminal_control;
use zeroize::Zeroizing;

/// Writes `prompt` to the controlling terminal and reads one line from it with echo off,
/// keeping at most `max_bytes` of it (the rest of a longer line is read and dropped), without
/// its line feed. End of input on an empty line (Ctrl-D) is [`io::ErrorKind::Interrupted`].
/// No controlling terminal is the error of opening `/dev/tty`.
pub fn read_hidden(prompt: &str, max_bytes: usize) -> io::Result<Zeroizing<Vec<u8>>> {
    let tty = OpenOptions::new().read(true).write(true).open("/dev/tty")?;
    // Before echo goes off: from here a signal cannot end the process with it off.
    watch_signals()?;
    let echo_off = EchoOff::new(&tty)?;
    (&tty).write_all(prompt.as_bytes())?;
    (&tty).flush()?;
    let mut line = Zeroizing::new(Vec::with_capacity(max_bytes.saturating_add(1)));
    let mut byte = Zeroizing::new([0u8; 1]);
    loop {
        match (&tty).read(&mut *byte) {
            Ok(0) if line.is_empty() => {
                drop(echo_off);
                return Err(io::Error::new(io::ErrorKind::Interrupted, "end of input"));
            }
            Ok(0) => break,
            Ok(_) if byte[0] == b'\n' => break,
            Ok(_) => {
                // One byte past the bound, so the caller sees that the value is too long.
                if line.len() <= max_bytes {
                    line.push(byte[0]);
                }
            }
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => return Err(error),
        }
    }
    drop(echo_off);
    if line.last() == Some(&b'\r') {
        line.pop();
    }
    Ok(line)
}

/// Appends `cell` to `line`, left-aligned in a column `width` characters wide, then the two
/// spaces that separate columns. A cell as wide as the column or wider is not cut. (Not
/// `format!("{cell:<width$}")`: a width past 65,535 panics there, and a field from a file, such
/// as an alias's host list, can be that long.)
pub fn push_padded(line: &mut String, cell: &str, width: usize) {
    line.push_str(cell);
    let pad = width.saturating_sub(cell.chars().count()) + 2;
    line.extend(std::iter::repeat_n(' ', pad));
}

/// `text` with every character a terminal could take as a command replaced by a space: the C0
/// controls (tab, line feed and escape included), DEL, the C1 controls, and the
/// bidirectional-text controls. Borrowed when there is none.
pub fn printable(text: &str) -> Cow<'_, str> {
    if text.chars().any(is_terminal_control) {
        Cow::Owned(
            text.chars()
                .map(|c| if is_terminal_control(c) { ' ' } else { c })
                .collect(),
        )
    } else {
        Cow::Borrowed(text)
    }
}

/// JSON text with the terminal controls its encoder writes raw (DEL, the C1 controls and the
/// bidirectional-text controls; in strings the C0 ones are always escaped) written as `\uXXXX`
/// escapes. Outside strings JSON holds only ASCII punctuation, digits, letters and whitespace,
/// so every such character sits in a string, where the escape means the same character.
pub fn json_for_terminal(json: String) -> String {
    let raw = |c: char| u32::from(c) >= 0x7f && is_terminal_control(c);
    if !json.chars().any(raw) {
        return json;
    }
    let mut out = String::with_capacity(json.len() + 16);
    for c in json.chars() {
        if raw(c) {
            out.push_str(&format!("\\u{:04x}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    out
}

/// The signals that end a process by default and can be caught.
const ENDING_SIGNALS: [i32; 13] = [
    libc::SIGINT,
    libc::SIGTERM,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
    libc::SIGALRM,
    libc::SIGVTALRM,
    libc::SIGPROF,
    libc::SIGIO,
    libc::SIGPWR,
    libc::SIGXCPU,
    libc::SIGXFSZ,
];

/// The terminal settings to put back should a signal end the process while echo is off.
static SAVED: Mutex<Option<Saved>> = Mutex::new(None);

#[derive(Debug)]
struct Saved {
    tty: File,
    termios: Termios,
}

/// Echo off on a terminal, and its settings as they were, put back when dropped.
#[derive(Debug)]
struct EchoOff<'a> {
    tty: &'a File,
    saved: Termios,
}

// === impl EchoOff ===

impl<'a> EchoOff<'a> {
    fn new(tty: &'a File) -> io::Result<EchoOff<'a>> {
        let saved = tcgetattr(tty)?;
        let keep = Saved {
            tty: tty.try_clone()?,
            termios: saved.clone(),
        };
        *SAVED
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(keep);
        let mut hidden = saved.clone();
        // No echo, but the line feed that ends the line still shows, so what follows starts on
        // a new line. Line editing and Ctrl-C stay as they were.
        hidden.local_modes.remove(LocalModes::ECHO);
        hidden.local_modes.insert(LocalModes::ECHONL);
        let echo_off = EchoOff { tty, saved };
        tcsetattr(tty, OptionalActions::Now, &hidden)?;
        Ok(echo_off)
    }
}

impl Drop for EchoOff<'_> {
    fn drop(&mut self) {
        // Put back first, then forget: a signal in between finds the settings and puts them back
        // once more, which changes nothing.
        let _ = tcsetattr(self.tty, OptionalActions::Now, &self.saved);
        *SAVED
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = None;
    }
}

/// Takes over every signal in [`ENDING_SIGNALS`] for the rest of the process (once): a thread
/// waits for the first of them, puts back saved terminal settings if echo is off, and ends the
/// process with status 128 + the signal's number. The handlers are in place when this returns.
fn watch_signals() -> io::Result<()> {
    static WATCHING: OnceLock<()> = OnceLock::new();
    if WATCHING.get().is_some() {
        return Ok(());
    }
    use tokio::signal::unix::{SignalKind, signal};
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()?;
    // Every signal whose default action ends the process and that a process may catch (SIGKILL
    // and SIGSTOP cannot be; the faults SIGSEGV, SIGBUS, SIGFPE, SIGILL are the program's own).
    let watched = {
        let _context = runtime.enter();
        ENDING_SIGNALS
            .iter()
            .map(|&number| Ok((number, signal(SignalKind::from_raw(number))?)))
            .collect::<io::Result<Vec<_>>>()?
    };
    std::thread::Builder::new()
        .name("mint-signals".to_owned())
        .spawn(move || {
            let number = runtime.block_on(async {
                let (first, mut caught) = tokio::sync::mpsc::unbounded_channel();
                for (number, mut signal) in watched {
                    let first = first.clone();
                    tokio::spawn(async move {
                        if signal.recv().await.is_some() {
                            let _ = first.send(number);
                        }
                    });
                }
                caught.recv().await.unwrap_or(libc::SIGTERM)
            });
            let saved = SAVED
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .take();
            if let Some(saved) = saved {
                let _ = tcsetattr(&saved.tty, OptionalActions::Now, &saved.termios);
                // The line feed the operator did not type, so the shell's prompt starts afresh.
                let _ = (&saved.tty).write_all(b"\n");
                let _ = writeln!(io::stderr(), "mint: cancelled; nothing was changed");
            }
            std::process::exit(128 + number);
        })?;
    let _ = WATCHING.set(());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn push_padded_aligns_and_takes_any_width() {
        let mut line = String::new();
        push_padded(&mut line, "ab", 4);
        push_padded(&mut line, "wider than its column", 3);
        assert_eq!(line, "ab    wider than its column  ");
        // `format!("{:<w$}")` panics past 65,535; a host list from a file can be longer.
        let long = "h".repeat(150_000);
        let mut line = String::new();
        push_padded(&mut line, "x", long.len());
        assert_eq!(line.len(), 150_002);
    }

    #[test]
    fn printable_replaces_every_terminal_control() {
        assert!(matches!(printable("GitHub token"), Cow::Borrowed(_)));
        assert_eq!(
            printable("a\u{1b}]52;c;SGVsbG8=\u{7}b\tc\nd\u{7f}e\u{9b}2Jf\u{202e}g"),
            "a ]52;c;SGVsbG8= b c d e 2Jf g"
        );
        assert_eq!(printable("café ✓"), "café ✓");
        // Line separators and invisible characters: a name that looks like another.
        assert_eq!(
            printable("git\u{200b}hub\u{2028}x\u{2029}y\u{2060}z\u{feff}"),
            "git hub x y z "
        );
    }

    #[test]
    fn json_for_terminal_escapes_what_serde_leaves_raw() {
        let value = serde_json::json!({"d": "a\u{1b}b\u{7f}c\u{9b}d\u{202e}e é\n"});
        let raw = serde_json::to_string_pretty(&value).unwrap();
        assert!(raw.contains('\u{9b}'));
        let safe = json_for_terminal(raw);
        assert_eq!(
            safe,
            "{\n  \"d\": \"a\\u001bb\\u007fc\\u009bd\\u202ee é\\n\"\n}"
        );
        let back: serde_json::Value = serde_json::from_str(&safe).unwrap();
        assert_eq!(back, value);
    }
}
