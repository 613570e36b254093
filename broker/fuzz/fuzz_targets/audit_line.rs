//! Fuzzes reading audit logs: the broker's line reader (`audit/chain.rs`, what `mint audit tail`
//! and `mint audit verify` read files with), `mint_policy::audit::parse_record` behind it, and
//! the broker's own line writer (`audit::encode_line`).
//!
//! Input: one byte choosing the reader's buffer size, then the file's bytes.
//!
//! Beyond "never panics", it checks that the reader gives back the file line by line whatever its
//! buffer size (lengths, terminators, kept bytes and the hash of each whole line), and that every
//! line accepted as a record round-trips: it passes `check`, serde_json reads it as an object,
//! `to_line` writes a line that parses back to the same record and is a fixed point, the broker's
//! writer writes byte for byte that line, and its chain hash is the reader's line hash.

#![no_main]

use std::io::{BufReader, Cursor};

use libfuzzer_sys::fuzz_target;
use mint_broker::audit::chain::{LineHash, LineReader, parse_line};
use mint_broker::audit::encode_line;
use mint_policy::audit::{ChainHash, MAX_LINE_BYTES, parse_record};

fuzz_target!(|data: &[u8]| {
    let Some((&size, file)) = data.split_first() else {
        return;
    };
    let capacity = usize::from(size).max(1);
    let mut reader = LineReader::new(BufReader::with_capacity(capacity, Cursor::new(file)), 0);
    let mut rest = file;
    while let Some(line) = reader.next_line().unwrap() {
        let (whole, terminated) = match rest.iter().position(|&b| b == b'\n') {
            Some(at) => (&rest[..at], true),
            None => (rest, false),
        };
        rest = &rest[(whole.len() + usize::from(terminated)).min(rest.len())..];
        assert_eq!(line.len, whole.len() as u64);
        assert_eq!(line.terminated, terminated);
        assert_eq!(line.bytes, &whole[..whole.len().min(MAX_LINE_BYTES + 1)]);
        assert!(line.hash == LineHash::of(whole), "line hash");
        assert_eq!(reader.offset(), (file.len() - rest.len()) as u64);

        let parsed = parse_line(&line);
        let Ok(text) = std::str::from_utf8(whole) else {
            assert!(parsed.is_err());
            continue;
        };
        assert_eq!(
            parsed.is_ok(),
            whole.len() <= MAX_LINE_BYTES && parse_record(text).is_ok()
        );
        let Ok(record) = parsed else {
            continue;
        };
        record.check().unwrap();
        let value: serde_json::Value = serde_json::from_str(text).unwrap();
        assert!(value.is_object());
        let line_out = record.to_line();
        let again = parse_record(&line_out).unwrap();
        assert_eq!(again, record, "to_line does not round-trip");
        assert_eq!(again.to_line(), line_out, "to_line is not a fixed point");
        assert_eq!(
            encode_line(&record),
            line_out.as_bytes(),
            "the writer differs"
        );
        assert_eq!(
            LineHash::of(whole).to_chain_hash(),
            ChainHash::of_line(text),
            "chain hash"
        );
    }
    assert!(rest.is_empty(), "the reader stopped early");
});
