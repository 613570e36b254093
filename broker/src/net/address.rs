//! Decides which resolved IP addresses the proxy may connect to.
//!
//! Runs in the proxy after the decision audit record is written and after the proxy has resolved
//! the target host itself: every resolved address goes through [`check_all`] (or [`check`]), and
//! the proxy then connects to exactly the address it checked, never to a fresh resolution of the
//! name. The module is pure: it never resolves a name, opens a socket or reads configuration, and
//! its errors name a class of address, never the address itself.
//!
//! # Classes
//!
//! [`classify`] puts every address in one [`AddressClass`], looking at the address the kernel
//! will really connect to:
//!
//! - An IPv4-mapped IPv6 address (`::ffff:a.b.c.d`) is classified exactly as `a.b.c.d`, because a
//!   dual-stack socket connecting to it connects to that IPv4 address.
//! - The other IPv6 forms that embed an IPv4 address for a translation scheme (IPv4-compatible
//!   `::a.b.c.d`, NAT64 `64:ff9b::/96` and `64:ff9b:1::/48`, 6to4 `2002::/16`, Teredo
//!   `2001::/32`) are [`AddressClass::Embedded`], whatever they embed: the packet goes to a
//!   gateway or relay that may deliver it anywhere, private networks included. One exception:
//!   when the embedded IPv4 address (any of them, for schemes where its position is ambiguous) is
//!   a cloud metadata address, the class is [`AddressClass::Metadata`].
//! - Cloud metadata endpoints are their own class even though they sit inside link-local, CGNAT
//!   or unique-local ranges, so that no rule can ever unlock them.
//! - IPv6 addresses outside `2000::/3`, the only block IANA assigns global unicast addresses
//!   from, are [`AddressClass::Reserved`] unless a more specific class applies.
//!
//! # Rules
//!
//! [`check`] applies [`AddressRules`], built by the proxy from the target and the deciding policy
//! rule (POLICY.md, "Addresses"):
//!
//! | class | `loopback_target: false` | `loopback_target: true` |
//! |---|---|---|
//! | `Public` | allowed | refused |
//! | `Private`, `LinkLocal`, `SharedCgnat`, `Embedded` | allowed only with `allow_private` | refused |
//! | `Loopback` | refused (DNS rebinding) | allowed |
//! | `Metadata`, `Unspecified`, `Multicast`, `Broadcast`, `Reserved` | refused | refused |
//!
//! A loopback target (the host was literally `127.x.y.z`, `::1` or `localhost` and a rule named
//! it) must resolve to loopback addresses only: a `localhost` that resolves elsewhere is refused,
//! and `allow_private` changes nothing about it. A name that is not a loopback target and
//! resolves to loopback is a DNS rebinding attempt and is refused even with `allow_private`.
//! [`check_all`] requires every resolved address to pass, and refuses an empty answer.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// What kind of destination an IP address is, as far as the proxy is concerned.
///
/// The ranges are those of the IANA IPv4 and IPv6 Special-Purpose Address Registries
/// (RFC 6890) and of the IANA IPv6 Address Space registry; comments in this module's tables cite
/// the RFC behind each one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AddressClass {
    /// A globally routable unicast address: everything that no other class claims.
    Public,
    /// `127.0.0.0/8` and `::1` (and their IPv4-mapped forms).
    Loopback,
    /// `10.0.0.0/8`, `172.16.0.0/12`, `192.168.0.0/16` (RFC 1918), `fc00::/7` (unique local,
    /// RFC 4193) and `fec0::/10` (site-local, deprecated by RFC 3879).
    Private,
    /// `169.254.0.0/16` (RFC 3927) and `fe80::/10` (RFC 4291), metadata endpoints excepted.
    LinkLocal,
    /// `100.64.0.0/10`, the carrier-grade NAT shared address space (RFC 6598), metadata
    /// endpoints excepted.
    SharedCgnat,
    /// A cloud instance metadata endpoint: `169.254.169.254`, `169.254.170.2`,
    /// `100.100.100.200`, `168.63.129.16` and `fd00:ec2::254`, in any IPv4-mapped or embedding
    /// IPv6 form. Always refused.
    Metadata,
    /// `0.0.0.0/8` ("this network", RFC 791 and RFC 1122) and `::`. Connecting to them reaches
    /// the local host on many systems.
    Unspecified,
    /// `224.0.0.0/4` (RFC 5771) and `ff00::/8` (RFC 4291).
    Multicast,
    /// `255.255.255.255`, the limited broadcast address (RFC 919, RFC 8190).
    Broadcast,
    /// Special-purpose space that is no reachable unicast destination: documentation,
    /// benchmarking, protocol assignments, deprecated relays, discard-only and future-use
    /// blocks, and IPv6 space outside `2000::/3`.
    Reserved,
    /// An IPv6 address that embeds an IPv4 address for a translation scheme other than IPv4
    /// mapping: IPv4-compatible `::a.b.c.d` (RFC 4291, deprecated), NAT64 `64:ff9b::/96`
    /// (RFC 6052) and `64:ff9b:1::/48` (RFC 8215), 6to4 `2002::/16` (RFC 3056) and Teredo
    /// `2001::/32` (RFC 4380).
    Embedded,
}

/// What a target may resolve to, besides public addresses.
///
/// The default refuses everything but public addresses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AddressRules {
    /// The target host was literally a loopback address or `localhost`, and a policy rule named
    /// it. Then every resolved address must be loopback, and nothing else is accepted.
    pub loopback_target: bool,
    /// The deciding allow rule says `allow_private: true`: private, link-local, shared (CGNAT)
    /// and embedding IPv6 addresses are accepted. Never unlocks loopback, metadata or reserved
    /// addresses.
    pub allow_private: bool,
}

/// Why a resolved target may not be connected to. Names a class, never the address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AddressError {
    /// An address belongs to a class that the rules refuse.
    #[error("the target resolves to {}{}", .0.phrase(), .0.way_out())]
    Refused(AddressClass),
    /// The target is a loopback target, and an address is not loopback.
    #[error(
        "the target is a loopback host but resolves to {}, which is not loopback",
        .0.phrase()
    )]
    NotLoopback(AddressClass),
    /// Name resolution produced no address at all.
    #[error("the target resolves to no address")]
    NoAddress,
}

// === impl AddressClass ===

impl AddressClass {
    /// A stable lowercase name for logs and the audit `reason` (`"private"`, `"shared_cgnat"`).
    pub fn as_str(self) -> &'static str {
        match self {
            AddressClass::Public => "public",
            AddressClass::Loopback => "loopback",
            AddressClass::Private => "private",
            AddressClass::LinkLocal => "link_local",
            AddressClass::SharedCgnat => "shared_cgnat",
            AddressClass::Metadata => "metadata",
            AddressClass::Unspecified => "unspecified",
            AddressClass::Multicast => "multicast",
            AddressClass::Broadcast => "broadcast",
            AddressClass::Reserved => "reserved",
            AddressClass::Embedded => "embedded",
        }
    }

    /// The class as a noun phrase for error messages.
    /// What would admit an address of this class, for the refusal's message.
    fn way_out(self) -> &'static str {
        match self {
            AddressClass::Private
            | AddressClass::LinkLocal
            | AddressClass::SharedCgnat
            | AddressClass::Embedded => {
                "; an allow rule with `allow_private: true` that matches the request admits it"
            }
            AddressClass::Loopback => {
                "; a loopback target is admitted only by a rule naming it literally in `host` (127.0.0.1, ::1, localhost), with its `port`"
            }
            AddressClass::Metadata => "; cloud metadata addresses are never admitted",
            AddressClass::Public
            | AddressClass::Unspecified
            | AddressClass::Multicast
            | AddressClass::Broadcast
            | AddressClass::Reserved => "",
        }
    }

    fn phrase(self) -> &'static str {
        match self {
            AddressClass::Public => "a public address",
            AddressClass::Loopback => "a loopback address",
            AddressClass::Private => "a private address",
            AddressClass::LinkLocal => "a link-local address",
            AddressClass::SharedCgnat => "a shared (carrier-grade NAT) address",
            AddressClass::Metadata => "a cloud metadata address",
            AddressClass::Unspecified => "an unspecified address",
            AddressClass::Multicast => "a multicast address",
            AddressClass::Broadcast => "the broadcast address",
            AddressClass::Reserved => "a reserved address",
            AddressClass::Embedded => "an IPv6 address that embeds an IPv4 address",
        }
    }
}

// === impl AddressError ===

impl AddressError {
    /// The class of the refused address; `None` when there was no address.
    pub fn class(&self) -> Option<AddressClass> {
        match self {
            AddressError::Refused(class) | AddressError::NotLoopback(class) => Some(*class),
            AddressError::NoAddress => None,
        }
    }
}

/// The class of `ip`; see the module documentation for how IPv6 forms of IPv4 addresses count.
pub fn classify(ip: IpAddr) -> AddressClass {
    match ip {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => classify_v6(v6),
    }
}

/// Whether the proxy may connect to `ip` under `rules` (see the table in the module
/// documentation).
///
/// # Errors
///
/// [`AddressError::NotLoopback`] when `rules.loopback_target` is set and `ip` is not loopback;
/// otherwise [`AddressError::Refused`] when the class of `ip` is not allowed.
pub fn check(ip: IpAddr, rules: AddressRules) -> Result<(), AddressError> {
    let class = classify(ip);
    if rules.loopback_target {
        return match class {
            AddressClass::Loopback => Ok(()),
            other => Err(AddressError::NotLoopback(other)),
        };
    }
    let allowed = match class {
        AddressClass::Public => true,
        AddressClass::Private
        | AddressClass::LinkLocal
        | AddressClass::SharedCgnat
        | AddressClass::Embedded => rules.allow_private,
        AddressClass::Loopback
        | AddressClass::Metadata
        | AddressClass::Unspecified
        | AddressClass::Multicast
        | AddressClass::Broadcast
        | AddressClass::Reserved => false,
    };
    if allowed {
        Ok(())
    } else {
        Err(AddressError::Refused(class))
    }
}

/// Whether the proxy may connect to a target that resolved to `ips`: every address must pass
/// [`check`].
///
/// A mixed answer (one public and one private address, say) is refused whole: it is the shape of
/// a DNS rebinding attempt, and the outcome must not depend on which address is tried first.
///
/// # Errors
///
/// [`AddressError::NoAddress`] for an empty list; otherwise the error of the first address that
/// fails [`check`].
pub fn check_all(ips: &[IpAddr], rules: AddressRules) -> Result<(), AddressError> {
    if ips.is_empty() {
        return Err(AddressError::NoAddress);
    }
    ips.iter().try_for_each(|ip| check(*ip, rules))
}

fn classify_v4(ip: Ipv4Addr) -> AddressClass {
    if METADATA_V4.contains(&ip) {
        return AddressClass::Metadata;
    }
    IPV4_BLOCKS
        .iter()
        .find(|(net, len, _)| in_v4_prefix(ip, *net, *len))
        .map_or(AddressClass::Public, |(_, _, class)| *class)
}

fn classify_v6(ip: Ipv6Addr) -> AddressClass {
    if ip.is_unspecified() {
        return AddressClass::Unspecified;
    }
    if ip.is_loopback() {
        return AddressClass::Loopback;
    }
    // RFC 4291 §2.5.5.2: the kernel sends to the IPv4 address itself.
    if let Some(v4) = ip.to_ipv4_mapped() {
        return classify_v4(v4);
    }
    if METADATA_V6.contains(&ip) {
        return AddressClass::Metadata;
    }
    if let Some(candidates) = embedded_ipv4(ip) {
        return if candidates.iter().any(|v4| METADATA_V4.contains(v4)) {
            AddressClass::Metadata
        } else {
            AddressClass::Embedded
        };
    }
    if let Some((_, _, class)) = IPV6_BLOCKS
        .iter()
        .find(|(net, len, _)| in_v6_prefix(ip, *net, *len))
    {
        return *class;
    }
    // IANA IPv6 Address Space: every block outside 2000::/3 is reserved by the IETF (RFC 4291
    // §2.4). Besides what is handled above, this covers ::/8 (RFC 2765 IPv4-translated
    // addresses included), 100::/64 discard-only (RFC 6666), the rest of 64:ff9b::/16,
    // 5f00::/16 SRv6 segment identifiers (RFC 9602) and fe00::/9.
    if in_v6_prefix(ip, GLOBAL_UNICAST.0, GLOBAL_UNICAST.1) {
        AddressClass::Public
    } else {
        AddressClass::Reserved
    }
}

/// The IPv4 addresses `ip` embeds for a translation scheme other than IPv4 mapping, or `None`
/// when it uses none. Schemes that embed fewer than four candidates repeat them.
///
/// Call only after `::`, `::1` and IPv4-mapped addresses are handled.
fn embedded_ipv4(ip: Ipv6Addr) -> Option<[Ipv4Addr; 4]> {
    let [_, _, o2, o3, o4, o5, o6, o7, low @ ..] = ip.octets();
    let [_, o9, o10, o11, o12, o13, o14, o15] = low;
    let last = Ipv4Addr::new(o12, o13, o14, o15);
    match ip.segments() {
        // IPv4-compatible ::a.b.c.d (RFC 4291 §2.5.5.1, deprecated).
        [0, 0, 0, 0, 0, 0, _, _]
        // NAT64 well-known prefix 64:ff9b::/96 (RFC 6052 §2.1).
        | [0x64, 0xff9b, 0, 0, 0, 0, _, _] => Some([last; 4]),
        // Local-use NAT64 64:ff9b:1::/48 (RFC 8215). The network's prefix is /48, /56, /64 or
        // /96, which the address does not tell, so take the IPv4 address at each position
        // RFC 6052 §2.2 allows (octet 8 is the reserved "u" octet and is skipped).
        [0x64, 0xff9b, 1, _, _, _, _, _] => Some([
            Ipv4Addr::new(o6, o7, o9, o10),
            Ipv4Addr::new(o7, o9, o10, o11),
            Ipv4Addr::new(o9, o10, o11, o12),
            last,
        ]),
        // 6to4 2002:a.b.c.d::/48 (RFC 3056 §2).
        [0x2002, _, _, _, _, _, _, _] => Some([Ipv4Addr::new(o2, o3, o4, o5); 4]),
        // Teredo 2001::/32 (RFC 4380 §4): the server's address, then the client's with every
        // bit inverted.
        [0x2001, 0, _, _, _, _, _, _] => {
            let server = Ipv4Addr::new(o4, o5, o6, o7);
            let client = Ipv4Addr::new(!o12, !o13, !o14, !o15);
            Some([server, client, server, client])
        }
        _ => None,
    }
}

/// Whether `ip` lies in `net/len`. A `len` of 0 matches everything, and above 32 counts as 32.
fn in_v4_prefix(ip: Ipv4Addr, net: Ipv4Addr, len: u32) -> bool {
    let mask = u32::MAX
        .checked_shl(32_u32.saturating_sub(len))
        .unwrap_or(0);
    ip.to_bits() & mask == net.to_bits() & mask
}

/// Whether `ip` lies in `net/len`. A `len` of 0 matches everything, and above 128 counts as 128.
fn in_v6_prefix(ip: Ipv6Addr, net: Ipv6Addr, len: u32) -> bool {
    let mask = u128::MAX
        .checked_shl(128_u32.saturating_sub(len))
        .unwrap_or(0);
    ip.to_bits() & mask == net.to_bits() & mask
}

/// The IPv6 address whose first two segments are `s0` and `s1` and whose other bits are zero.
const fn ipv6_prefix(s0: u16, s1: u16) -> Ipv6Addr {
    Ipv6Addr::new(s0, s1, 0, 0, 0, 0, 0, 0)
}

/// Cloud instance metadata endpoints reachable over IPv4.
const METADATA_V4: [Ipv4Addr; 4] = [
    // AWS, GCP, Azure, OpenStack, Oracle, DigitalOcean and most others.
    Ipv4Addr::new(169, 254, 169, 254),
    // AWS ECS task metadata and credentials (v2).
    Ipv4Addr::new(169, 254, 170, 2),
    // Alibaba Cloud.
    Ipv4Addr::new(100, 100, 100, 200),
    // Azure WireServer: a public address that only the platform answers, and that serves VM
    // extension settings.
    Ipv4Addr::new(168, 63, 129, 16),
];

/// Cloud instance metadata endpoints reachable over IPv6.
const METADATA_V6: [Ipv6Addr; 1] = [
    // AWS IPv6 instance metadata (IMDS) on Nitro instances.
    Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254),
];

/// Special IPv4 blocks, as network, prefix length and class. The first block that contains an
/// address decides; an address in none is public. Metadata endpoints are checked before these.
const IPV4_BLOCKS: &[(Ipv4Addr, u32, AddressClass)] = &[
    // "This network" (RFC 791, RFC 1122 §3.2.1.3); 0.0.0.0 reaches the local host on Linux.
    (Ipv4Addr::new(0, 0, 0, 0), 8, AddressClass::Unspecified),
    // Private use (RFC 1918).
    (Ipv4Addr::new(10, 0, 0, 0), 8, AddressClass::Private),
    // Shared address space for carrier-grade NAT (RFC 6598).
    (Ipv4Addr::new(100, 64, 0, 0), 10, AddressClass::SharedCgnat),
    // Loopback (RFC 1122 §3.2.1.3).
    (Ipv4Addr::new(127, 0, 0, 0), 8, AddressClass::Loopback),
    // Link local (RFC 3927).
    (Ipv4Addr::new(169, 254, 0, 0), 16, AddressClass::LinkLocal),
    // Private use (RFC 1918).
    (Ipv4Addr::new(172, 16, 0, 0), 12, AddressClass::Private),
    // IETF protocol assignments (RFC 6890 §2.1): DS-Lite (RFC 7335), the dummy address
    // (RFC 7600), PCP and TURN anycast (RFC 7723, RFC 8155), NAT64 discovery (RFC 8880). None is
    // an HTTPS service, so the whole block is refused.
    (Ipv4Addr::new(192, 0, 0, 0), 24, AddressClass::Reserved),
    // Documentation, TEST-NET-1 (RFC 5737).
    (Ipv4Addr::new(192, 0, 2, 0), 24, AddressClass::Reserved),
    // Deprecated 6to4 relay anycast (RFC 7526).
    (Ipv4Addr::new(192, 88, 99, 0), 24, AddressClass::Reserved),
    // Private use (RFC 1918).
    (Ipv4Addr::new(192, 168, 0, 0), 16, AddressClass::Private),
    // Benchmarking (RFC 2544).
    (Ipv4Addr::new(198, 18, 0, 0), 15, AddressClass::Reserved),
    // Documentation, TEST-NET-2 (RFC 5737).
    (Ipv4Addr::new(198, 51, 100, 0), 24, AddressClass::Reserved),
    // Documentation, TEST-NET-3 (RFC 5737).
    (Ipv4Addr::new(203, 0, 113, 0), 24, AddressClass::Reserved),
    // Multicast (RFC 5771).
    (Ipv4Addr::new(224, 0, 0, 0), 4, AddressClass::Multicast),
    // Limited broadcast (RFC 919, RFC 8190); before 240.0.0.0/4, which contains it.
    (Ipv4Addr::BROADCAST, 32, AddressClass::Broadcast),
    // Reserved for future use (RFC 1112 §4).
    (Ipv4Addr::new(240, 0, 0, 0), 4, AddressClass::Reserved),
];

/// Special IPv6 blocks inside `2000::/3` or with a class other than reserved, as network, prefix
/// length and class. Checked after `::`, `::1`, IPv4-mapped, metadata and embedding addresses;
/// the first block that contains an address decides.
const IPV6_BLOCKS: &[(Ipv6Addr, u32, AddressClass)] = &[
    // IETF protocol assignments (RFC 2928, RFC 6890 §2.2.2), Teredo excepted (handled as
    // embedding above): benchmarking 2001:2::/48 (RFC 5180), ORCHID (RFC 4843, RFC 7343), DETs
    // (RFC 9374), and PCP, TURN, AMT and AS112 anycast services, none of which is an HTTPS
    // service, so the whole block is refused.
    (ipv6_prefix(0x2001, 0), 23, AddressClass::Reserved),
    // Documentation (RFC 3849).
    (ipv6_prefix(0x2001, 0xdb8), 32, AddressClass::Reserved),
    // Documentation (RFC 9637).
    (ipv6_prefix(0x3fff, 0), 20, AddressClass::Reserved),
    // Unique local (RFC 4193).
    (ipv6_prefix(0xfc00, 0), 7, AddressClass::Private),
    // Link-local unicast (RFC 4291 §2.5.6).
    (ipv6_prefix(0xfe80, 0), 10, AddressClass::LinkLocal),
    // Site-local unicast, deprecated (RFC 3879) but still routed inside some sites.
    (ipv6_prefix(0xfec0, 0), 10, AddressClass::Private),
    // Multicast (RFC 4291 §2.7).
    (ipv6_prefix(0xff00, 0), 8, AddressClass::Multicast),
];

/// Global unicast, the only IPv6 block IANA assigns from (RFC 4291 §2.4).
const GLOBAL_UNICAST: (Ipv6Addr, u32) = (ipv6_prefix(0x2000, 0), 3);

#[cfg(test)]
mod tests;
