//! The name constraints of a name-constrained interception CA (RFC 5280 section 4.2.1.10): the
//! subtrees of names its leaves may carry, so that a stolen CA key cannot impersonate any other
//! site to a client that enforces them (OpenSSL, and with it curl, Python and Node, does).
//!
//! [`NameConstraints::for_hosts`] maps the host patterns aliases are bound to onto subtrees:
//! `api.github.com` and `*.github.com` become the dNSName subtrees `api.github.com` and
//! `github.com` (in RFC 5280 a dNSName subtree is the name and every name below it, so both are
//! a little wider than their patterns); an IP address becomes an iPAddress subtree of that one
//! address (`/32`, `/128`). A family with no permitted subtree is closed with an excluded one
//! (`0.0.0.0/0`, `::/0`; dNSName-only constraints leave IP addresses free), and DNS names with
//! the permitted subtree `invalid` (RFC 6761: never a real name) when only addresses are bound.
//! [`NameConstraints::from_certificate`] reads them back from a CA certificate, and
//! [`NameConstraints::permits`] decides a host as a client would, before Mint answers a
//! `CONNECT`.
//!
//! Pure: never reads a file or resolves a name.

use std::collections::BTreeSet;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use mint_policy::aliases::{Alias, AliasFile};
use mint_policy::host::{Host, HostPattern};
use x509_parser::certificate::X509Certificate;
use x509_parser::extensions::{GeneralName, GeneralSubtree};

use super::CaError;

/// The dNSName subtree permitted when only IP addresses are bound: the reserved top-level domain
/// `invalid` (RFC 6761), so that a constrained CA never signs for a real DNS name it was not
/// given.
pub const NO_DNS_NAME: &str = "invalid";

/// A CA's name constraints, as Mint reads and decides them: the dNSName and iPAddress subtrees.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NameConstraints {
    permitted: Vec<Subtree>,
    excluded: Vec<Subtree>,
}

/// One subtree of names.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Subtree {
    /// A dNSName: this name and every name below it (a leading `.`, which some CAs write, means
    /// the names below only).
    Dns(String),
    /// An IPv4 iPAddress range.
    V4 {
        /// The network address.
        network: Ipv4Addr,
        /// The mask.
        mask: Ipv4Addr,
    },
    /// An IPv6 iPAddress range.
    V6 {
        /// The network address.
        network: Ipv6Addr,
        /// The mask.
        mask: Ipv6Addr,
    },
}

// === impl NameConstraints ===

impl NameConstraints {
    /// The constraints that permit exactly the subtrees of `hosts` (the host patterns aliases
    /// are bound to), each once; `None` when there is no host, since a CA that permits nothing
    /// is of no use.
    pub fn for_hosts<'a>(
        hosts: impl IntoIterator<Item = &'a HostPattern>,
    ) -> Option<NameConstraints> {
        let mut permitted = BTreeSet::new();
        for pattern in hosts {
            permitted.insert(match pattern {
                HostPattern::Exact(Host::Name(name)) => Subtree::Dns(name.clone()),
                // The suffix's subtree: `*.github.com` is `github.com` and every name below it.
                // The RFC form, read the same way by every client; the leading-dot form that
                // would leave out `github.com` itself is not.
                HostPattern::Wildcard { suffix } => Subtree::Dns(suffix.clone()),
                HostPattern::Exact(Host::V4(addr)) => Subtree::V4 {
                    network: *addr,
                    mask: Ipv4Addr::BROADCAST,
                },
                HostPattern::Exact(Host::V6(addr)) => Subtree::V6 {
                    network: *addr,
                    mask: Ipv6Addr::from(u128::MAX),
                },
            });
        }
        if permitted.is_empty() {
            return None;
        }
        let has = |wanted: fn(&Subtree) -> bool| permitted.iter().any(wanted);
        let mut excluded = Vec::new();
        if !has(|s| matches!(s, Subtree::V4 { .. })) {
            excluded.push(Subtree::V4 {
                network: Ipv4Addr::UNSPECIFIED,
                mask: Ipv4Addr::UNSPECIFIED,
            });
        }
        if !has(|s| matches!(s, Subtree::V6 { .. })) {
            excluded.push(Subtree::V6 {
                network: Ipv6Addr::UNSPECIFIED,
                mask: Ipv6Addr::UNSPECIFIED,
            });
        }
        if !has(|s| matches!(s, Subtree::Dns(_))) {
            permitted.insert(Subtree::Dns(NO_DNS_NAME.to_owned()));
        }
        Some(NameConstraints {
            permitted: permitted.into_iter().collect(),
            excluded,
        })
    }

    /// The name constraints of `cert`: `None` when it has none. Subtrees of other kinds of
    /// names (email, directory name, URI) are left out: Mint's leaves carry none of them.
    pub fn from_certificate(
        cert: &X509Certificate<'_>,
    ) -> Result<Option<NameConstraints>, CaError> {
        let Some(extension) = cert
            .name_constraints()
            .map_err(|_| CaError::BadNameConstraints)?
        else {
            return Ok(None);
        };
        let read = |subtrees: &Option<Vec<GeneralSubtree<'_>>>| {
            subtrees
                .iter()
                .flatten()
                .filter_map(|subtree| Subtree::from_general_name(&subtree.base).transpose())
                .collect::<Result<Vec<Subtree>, CaError>>()
        };
        Ok(Some(NameConstraints {
            permitted: read(&extension.value.permitted_subtrees)?,
            excluded: read(&extension.value.excluded_subtrees)?,
        }))
    }

    /// The permitted subtrees.
    pub fn permitted(&self) -> &[Subtree] {
        &self.permitted
    }

    /// The excluded subtrees.
    pub fn excluded(&self) -> &[Subtree] {
        &self.excluded
    }

    /// Whether a leaf naming `host` satisfies the constraints, as RFC 5280 (and OpenSSL) decide:
    /// in no excluded subtree, and in a permitted one when there are permitted subtrees of its
    /// kind (dNSName for a name, iPAddress for an address of either family).
    pub fn permits(&self, host: &Host) -> bool {
        let of_kind = |subtree: &&Subtree| match host {
            Host::Name(_) => matches!(subtree, Subtree::Dns(_)),
            Host::V4(_) | Host::V6(_) => matches!(subtree, Subtree::V4 { .. } | Subtree::V6 { .. }),
        };
        let mut permitted = self.permitted.iter().filter(of_kind).peekable();
        let inside = permitted.peek().is_none() || permitted.any(|s| s.contains(host));
        inside && !self.excluded.iter().any(|s| s.contains(host))
    }

    /// Each host an alias of `aliases` is bound to that these constraints leave out, with its
    /// alias, in file order: a `CONNECT` to it is refused. `mint serve` warns about them at start
    /// and after each reload, `mint doctor` reports them.
    pub fn hosts_left_out<'a>(
        &'a self,
        aliases: &'a AliasFile,
    ) -> impl Iterator<Item = (&'a Alias, &'a HostPattern)> + 'a {
        aliases.aliases.iter().flat_map(move |alias| {
            alias
                .hosts
                .iter()
                .filter(move |host| !self.permits_pattern(host))
                .map(move |host| (alias, host))
        })
    }

    /// Whether every host `pattern` covers is permitted (for a wildcard: every name below its
    /// suffix).
    pub fn permits_pattern(&self, pattern: &HostPattern) -> bool {
        match pattern {
            HostPattern::Exact(host) => self.permits(host),
            HostPattern::Wildcard { suffix } => {
                let dns = || self.permitted.iter().filter_map(Subtree::dns);
                let unconstrained = dns().next().is_none();
                let covered = dns().any(|c| {
                    dns_matches(c, suffix)
                        || c.strip_prefix('.')
                            .is_some_and(|c| c.eq_ignore_ascii_case(suffix))
                });
                let carved = self.excluded.iter().filter_map(Subtree::dns).any(|e| {
                    dns_matches(e, suffix)
                        || e.strip_prefix('.')
                            .is_some_and(|e| e.eq_ignore_ascii_case(suffix))
                        || dns_below(e.trim_start_matches('.'), suffix)
                });
                (unconstrained || covered) && !carved
            }
        }
    }
}

impl fmt::Display for NameConstraints {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list = |subtrees: &[Subtree]| {
            subtrees
                .iter()
                .map(Subtree::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        };
        write!(f, "permitted: {}", list(&self.permitted))?;
        if !self.excluded.is_empty() {
            write!(f, "; excluded: {}", list(&self.excluded))?;
        }
        Ok(())
    }
}

// === impl Subtree ===

impl Subtree {
    fn dns(&self) -> Option<&str> {
        match self {
            Subtree::Dns(name) => Some(name),
            Subtree::V4 { .. } | Subtree::V6 { .. } => None,
        }
    }

    /// The subtree as rcgen writes it.
    pub fn to_rcgen(&self) -> rcgen::GeneralSubtree {
        match self {
            Subtree::Dns(name) => rcgen::GeneralSubtree::DnsName(name.clone()),
            Subtree::V4 { network, mask } => rcgen::GeneralSubtree::IpAddress(
                rcgen::CidrSubnet::V4(network.octets(), mask.octets()),
            ),
            Subtree::V6 { network, mask } => rcgen::GeneralSubtree::IpAddress(
                rcgen::CidrSubnet::V6(network.octets(), mask.octets()),
            ),
        }
    }

    /// A dNSName or iPAddress subtree; `None` for the other kinds; an error for an address
    /// range that is neither 8 nor 32 bytes (network then mask).
    fn from_general_name(name: &GeneralName<'_>) -> Result<Option<Subtree>, CaError> {
        let bad = |_| CaError::BadNameConstraints;
        Ok(match name {
            GeneralName::DNSName(name) => Some(Subtree::Dns((*name).to_owned())),
            GeneralName::IPAddress(bytes) if bytes.len() == 8 => {
                let (network, mask) = bytes.split_at(4);
                Some(Subtree::V4 {
                    network: <[u8; 4]>::try_from(network).map_err(bad)?.into(),
                    mask: <[u8; 4]>::try_from(mask).map_err(bad)?.into(),
                })
            }
            GeneralName::IPAddress(bytes) if bytes.len() == 32 => {
                let (network, mask) = bytes.split_at(16);
                Some(Subtree::V6 {
                    network: <[u8; 16]>::try_from(network).map_err(bad)?.into(),
                    mask: <[u8; 16]>::try_from(mask).map_err(bad)?.into(),
                })
            }
            GeneralName::IPAddress(_) => return Err(CaError::BadNameConstraints),
            _ => None,
        })
    }

    /// Whether `host` is in this subtree.
    fn contains(&self, host: &Host) -> bool {
        match (self, host) {
            (Subtree::Dns(constraint), Host::Name(name)) => dns_matches(constraint, name),
            (Subtree::V4 { network, mask }, Host::V4(addr)) => {
                u32::from(*addr) & u32::from(*mask) == u32::from(*network) & u32::from(*mask)
            }
            (Subtree::V6 { network, mask }, Host::V6(addr)) => {
                u128::from(*addr) & u128::from(*mask) == u128::from(*network) & u128::from(*mask)
            }
            (Subtree::Dns(_), Host::V4(_) | Host::V6(_))
            | (Subtree::V4 { .. } | Subtree::V6 { .. }, _) => false,
        }
    }
}

impl fmt::Display for Subtree {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (network, mask, ones, bits): (IpAddr, IpAddr, u32, u32) = match self {
            Subtree::Dns(name) => return f.write_str(name),
            Subtree::V4 { network, mask } => (
                (*network).into(),
                (*mask).into(),
                u32::from(*mask).leading_ones(),
                u32::from(*mask).count_ones(),
            ),
            Subtree::V6 { network, mask } => (
                (*network).into(),
                (*mask).into(),
                u128::from(*mask).leading_ones(),
                u128::from(*mask).count_ones(),
            ),
        };
        // A mask that is not a prefix is legal, if odd: shown as itself.
        if ones == bits {
            write!(f, "{network}/{ones}")
        } else {
            write!(f, "{network}/{mask}")
        }
    }
}

/// RFC 5280's dNSName rule: `name` is `constraint` or below it; a constraint with a leading `.`
/// (not in the RFC, read this way by OpenSSL and Go) matches the names below only; an empty one
/// matches every name. Case-insensitive.
fn dns_matches(constraint: &str, name: &str) -> bool {
    if constraint.is_empty() {
        return true;
    }
    if constraint.starts_with('.') {
        return name.len() > constraint.len() && ends_with_ignore_case(name, constraint);
    }
    name.eq_ignore_ascii_case(constraint) || dns_below(name, constraint)
}

/// Whether `name` is strictly below `parent` (`a.b.example.com` below `example.com`).
fn dns_below(name: &str, parent: &str) -> bool {
    name.len() > parent.len() + 1
        && ends_with_ignore_case(name, parent)
        && name.as_bytes().get(name.len() - parent.len() - 1) == Some(&b'.')
}

fn ends_with_ignore_case(text: &str, suffix: &str) -> bool {
    text.len() >= suffix.len()
        && text
            .as_bytes()
            .get(text.len() - suffix.len()..)
            .is_some_and(|tail| tail.eq_ignore_ascii_case(suffix.as_bytes()))
}

#[cfg(test)]
mod tests;
