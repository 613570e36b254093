//! Fuzzes mint-mcp's handling of one input line (`Server::handle_line`), with a Mint home holding
//! the example aliases, policy and audit log so that every tool has something to read.
//!
//! Input: the bytes read from stdin; the transport cuts them at line feeds and hands each line
//! to the server, so each piece between line feeds is one call here.
//!
//! Beyond "never panics" (a panic inside a request, which the server turns into an internal
//! error, still aborts here: libfuzzer's panic hook runs first), it checks that each line gets
//! no answer or exactly one: a single line (no CR or LF) of valid JSON, a JSON-RPC 2.0 object
//! with an `id` and a `result` or an `error`, shorter than the 1 MiB message limit.

#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use mint_mcp::{Config, MAX_MESSAGE_BYTES, MINT_HOME, Server};
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let server = server();
    for line in data.split(|&b| b == b'\n') {
        let Some(answer) = server.handle_line(line) else {
            continue;
        };
        assert!(answer.len() < MAX_MESSAGE_BYTES, "{} bytes", answer.len());
        assert!(!answer.contains(['\n', '\r']), "more than one line");
        let value: Value = serde_json::from_str(&answer).expect("an answer that is not JSON");
        let object = value.as_object().expect("an answer that is not an object");
        assert_eq!(object.get("jsonrpc"), Some(&Value::from("2.0")));
        assert!(object.contains_key("id"));
        assert!(object.contains_key("result") != object.contains_key("error"));
    }
});

/// One server for the whole run, on a Mint home made once in the temporary directory.
fn server() -> &'static Server {
    static SERVER: OnceLock<Server> = OnceLock::new();
    SERVER.get_or_init(|| {
        let home: PathBuf =
            std::env::temp_dir().join(format!("mint-mcp-fuzz-{}", std::process::id()));
        std::fs::create_dir_all(&home).unwrap();
        for (name, text) in [
            (
                "aliases.yaml",
                include_str!("../../../examples/aliases.yaml"),
            ),
            ("policy.yaml", include_str!("../../../examples/policy.yaml")),
            ("audit.log", include_str!("../../../examples/audit.log")),
        ] {
            std::fs::write(home.join(name), text).unwrap();
        }
        Server::new(Config::resolve(|name| {
            (name == MINT_HOME).then(|| home.clone().into_os_string())
        }))
    })
}
