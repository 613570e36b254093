//! Entry points for the fuzz targets in `broker/fuzz`, onto internals the proxy keeps private.
//!
//! Exists only so `cargo fuzz` can reach these functions: each wraps an internal one without
//! changing what it does. Not part of the broker's interface; nothing else may call it.

/// One head's verdict: framing passes, the method, the number of header lines, and whether it
/// is the last request followed.
pub type HeadVerdict = (bool, Option<String>, usize, bool);

/// The verdicts on a connection's bytes read in these pieces, as the connection reader follows
/// them (`serve/framing.rs`): for each complete head (framing passes, method, number of header
/// lines, last followed), then whether the stream ended up untracked, and whether it is HTTP/2.
pub fn head_verdicts(pieces: &[&[u8]]) -> (Vec<HeadVerdict>, bool, bool) {
    crate::serve::follow_pieces(pieces)
}

/// The status of hyper's own error answer when `bytes` (the start of what the connection writes)
/// begin with one, as the connection recognises it to replace it (`serve/connection.rs`).
pub fn hyper_error_status(bytes: &[u8]) -> Option<u16> {
    crate::serve::hyper_error_status(bytes)
}

/// How many requests the HTTP/2 watch (`serve/h2_watch.rs`) reports refused after each step of a
/// connection: `(written, bytes)`, bytes the connection wrote when `written`, else bytes read from
/// the agent, its connection preface first.
pub fn h2_refusals(steps: &[(bool, &[u8])]) -> Vec<usize> {
    crate::serve::refusals_per_step(steps)
}

/// The target of a `CONNECT` naming `authority`, as the proxy reads it (`proxy/connect.rs`), or
/// `None` when it is refused.
pub fn connect_target(authority: &str) -> Option<mint_policy::normalize::Target> {
    crate::proxy::connect::connect_target(authority).ok()
}

/// Reads `tls` as the first bytes an agent sends into an intercepted tunnel, with rustls's
/// `Acceptor` as the tunnel does (`serve/tunnel.rs`). When a whole ClientHello is read: its server
/// name, and whether the tunnel takes it as naming `host` (an IP-address tunnel when
/// `ip_tunnel`). `None` when the bytes hold no whole ClientHello or rustls refuses them.
pub fn client_hello_names(
    tls: &[u8],
    ip_tunnel: bool,
    host: &str,
) -> Option<(Option<String>, bool)> {
    let mut acceptor = rustls::server::Acceptor::default();
    let mut rest = tls;
    while !rest.is_empty() {
        match acceptor.read_tls(&mut rest) {
            Ok(0) | Err(_) => return None,
            Ok(_) => {}
        }
        match acceptor.accept() {
            Ok(Some(accepted)) => {
                let hello = accepted.client_hello();
                let name = hello.server_name().map(str::to_owned);
                return Some((name, crate::serve::sni_names(hello, ip_tunnel, host)));
            }
            Ok(None) => {}
            Err(_) => return None,
        }
    }
    None
}
