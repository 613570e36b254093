//! The proxy's listen address: whether it keeps the broker on loopback.
//!
//! `mint serve` warns at start when the address it bound is not a loopback one, and `mint doctor`
//! judges the address `mint serve` would bind (`--listen`, `MINT_LISTEN` or the default). Neither
//! refuses it: a broker in a container may have to listen on its bridge address. Nothing here
//! binds or connects; [`resolve`] looks a host name up as binding would.

use std::io;
use std::net::{SocketAddr, ToSocketAddrs};

/// Why an address that is not loopback is a risk, as `mint serve` and `mint doctor` say it.
pub const NOT_LOOPBACK_RISK: &str = "other hosts can reach the broker, and agents' capability \
     tokens cross the network unencrypted";

/// What to do about it.
pub const NOT_LOOPBACK_FIX: &str =
    "keep `--listen` on 127.0.0.1 unless a firewall or a private network stands in front";

/// Whether `addr` can only be reached from this machine.
pub fn is_loopback(addr: SocketAddr) -> bool {
    addr.ip().is_loopback()
}

/// The addresses `listen` (`HOST:PORT`) stands for, looked up as `mint serve` binds it.
pub fn resolve(listen: &str) -> io::Result<Vec<SocketAddr>> {
    Ok(listen.to_socket_addrs()?.collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_addresses_are_loopback() {
        let loopback = |text: &str| resolve(text).unwrap().into_iter().all(is_loopback);
        assert!(loopback("127.0.0.1:8700"));
        assert!(loopback("[::1]:8700"));
        assert!(!loopback("0.0.0.0:8700"));
        assert!(!loopback("[::]:8700"));
        assert!(!loopback("192.0.2.1:8700"));
        assert!(resolve("no port").is_err());
    }
}
