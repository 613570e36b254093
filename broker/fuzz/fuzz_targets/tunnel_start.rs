//! Fuzzes how an intercepted tunnel starts (through `mint_broker::fuzzing`): the `CONNECT`
//! target (`proxy/connect.rs`) and the ClientHello the agent then sends into the tunnel, read by
//! rustls's `Acceptor` and checked against the `CONNECT`'s host (`serve/tunnel.rs`).
//!
//! Input: a flags byte (bit 0: an IP-address tunnel, used when the authority is refused), the
//! `CONNECT` authority up to the first NUL byte, then the bytes sent into the tunnel.
//!
//! Beyond "never panics", it checks:
//! - the target is exactly what the policy crate's own readers give: accepted only when
//!   `parse_authority` finds a port and `normalize_target("https", authority, "/")` accepts it,
//!   and then `https`, that port, the path `/`, no query; and canonical: the target's own
//!   authority reads back to the same target;
//! - a ClientHello without a server name is accepted only by an IP-address tunnel;
//! - a server name the tunnel accepts as its host names the same host when the policy crate reads
//!   it (`Host::parse_request`, one trailing dot removed): the name the leaf certificate is made
//!   for and the host the policy decided on cannot differ.

#![no_main]

use std::net::IpAddr;

use libfuzzer_sys::fuzz_target;
use mint_broker::fuzzing::{client_hello_names, connect_target};
use mint_policy::host::Host;
use mint_policy::normalize::{Scheme, normalize_target, parse_authority};

fn authority_of(host: &Host, port: u16) -> String {
    match host.ip() {
        Some(IpAddr::V6(ip)) => format!("[{ip}]:{port}"),
        _ => format!("{}:{port}", host.as_text()),
    }
}

fuzz_target!(|data: &[u8]| {
    let [flags, rest @ ..] = data else {
        return;
    };
    let cut = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
    let Ok(authority) = std::str::from_utf8(&rest[..cut]) else {
        return;
    };
    let tls = rest.get(cut + 1..).unwrap_or_default();

    let target = connect_target(authority);
    let port = parse_authority(authority).ok().and_then(|(_, port)| port);
    let normalized = normalize_target("https", authority, "/").ok();
    match &target {
        Some(target) => {
            assert_eq!(
                port,
                Some(target.port),
                "accepted {authority:?} without its port"
            );
            assert_eq!(
                normalized.as_ref(),
                Some(target),
                "differs from normalize_target"
            );
            assert_eq!(target.scheme, Scheme::Https);
            assert_eq!(target.path, "/");
            assert_eq!(target.query, None);
            let canonical = authority_of(&target.host, target.port);
            assert_eq!(
                connect_target(&canonical).as_ref(),
                Some(target),
                "{authority:?} is {canonical:?}, which reads otherwise"
            );
        }
        None => assert!(
            port.is_none() || normalized.is_none(),
            "{authority:?} refused though it has a port and normalizes"
        ),
    }

    let (host, ip_tunnel) = match &target {
        Some(target) => (target.host.as_text(), target.host.ip().is_some()),
        None => (authority.to_owned(), flags & 1 != 0),
    };
    let Some((name, names_host)) = client_hello_names(tls, ip_tunnel, &host) else {
        return;
    };
    match name {
        None => assert_eq!(names_host, ip_tunnel, "no server name"),
        Some(name) => {
            let bare = name.strip_suffix('.').unwrap_or(&name);
            assert_eq!(
                names_host,
                bare.eq_ignore_ascii_case(&host),
                "{name:?} against {host:?}"
            );
            if names_host && let Some(target) = &target {
                assert_eq!(
                    Host::parse_request(bare).ok().as_ref(),
                    Some(&target.host),
                    "server name {name:?} accepted for {host:?} names another host"
                );
            }
        }
    }
});
