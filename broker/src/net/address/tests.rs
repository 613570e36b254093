//! Tests of `address`: the edges of every range, IPv6 spellings of IPv4 addresses, each rule of
//! `check`, `check_all`, and properties over random addresses.
//!
//! The expected classes are written out by hand, independently of the tables in `address.rs`, so
//! that removing or narrowing a range there makes a test here fail.

use proptest::prelude::*;

use super::*;

use AddressClass::{
    Broadcast, Embedded, LinkLocal, Loopback, Metadata, Multicast, Private, Public, Reserved,
    SharedCgnat, Unspecified,
};

const CLASSES: [AddressClass; 11] = [
    Public,
    Loopback,
    Private,
    LinkLocal,
    SharedCgnat,
    Metadata,
    Unspecified,
    Multicast,
    Broadcast,
    Reserved,
    Embedded,
];

const PUBLIC_ONLY: AddressRules = AddressRules {
    loopback_target: false,
    allow_private: false,
};
const PRIVATE: AddressRules = AddressRules {
    loopback_target: false,
    allow_private: true,
};
const LOOPBACK: AddressRules = AddressRules {
    loopback_target: true,
    allow_private: false,
};
const LOOPBACK_AND_PRIVATE: AddressRules = AddressRules {
    loopback_target: true,
    allow_private: true,
};
const ALL_RULES: [AddressRules; 4] = [PUBLIC_ONLY, PRIVATE, LOOPBACK, LOOPBACK_AND_PRIVATE];

/// The IPv4 metadata endpoints, written out again.
const METADATA_ENDPOINTS: [[u8; 4]; 4] = [
    [169, 254, 169, 254],
    [169, 254, 170, 2],
    [100, 100, 100, 200],
    [168, 63, 129, 16],
];

/// The first and last address of every IPv4 range, the addresses just outside it, and the
/// metadata endpoints with their neighbours.
const IPV4_TABLE: &[(&str, AddressClass)] = &[
    // 0.0.0.0/8
    ("0.0.0.0", Unspecified),
    ("0.0.0.1", Unspecified),
    ("0.255.255.255", Unspecified),
    ("1.0.0.0", Public),
    // 10.0.0.0/8
    ("9.255.255.255", Public),
    ("10.0.0.0", Private),
    ("10.255.255.255", Private),
    ("11.0.0.0", Public),
    // 100.64.0.0/10 and Alibaba's metadata endpoint inside it
    ("100.63.255.255", Public),
    ("100.64.0.0", SharedCgnat),
    ("100.127.255.255", SharedCgnat),
    ("100.128.0.0", Public),
    ("100.100.100.199", SharedCgnat),
    ("100.100.100.200", Metadata),
    ("100.100.100.201", SharedCgnat),
    // 127.0.0.0/8
    ("126.255.255.255", Public),
    ("127.0.0.0", Loopback),
    ("127.0.0.1", Loopback),
    ("127.255.255.255", Loopback),
    ("128.0.0.0", Public),
    // Azure WireServer
    ("168.63.129.15", Public),
    ("168.63.129.16", Metadata),
    ("168.63.129.17", Public),
    // 169.254.0.0/16 and the metadata endpoints inside it
    ("169.253.255.255", Public),
    ("169.254.0.0", LinkLocal),
    ("169.254.255.255", LinkLocal),
    ("169.255.0.0", Public),
    ("169.254.169.253", LinkLocal),
    ("169.254.169.254", Metadata),
    ("169.254.169.255", LinkLocal),
    ("169.254.170.1", LinkLocal),
    ("169.254.170.2", Metadata),
    ("169.254.170.3", LinkLocal),
    // 172.16.0.0/12
    ("172.15.255.255", Public),
    ("172.16.0.0", Private),
    ("172.31.255.255", Private),
    ("172.32.0.0", Public),
    // 192.0.0.0/24
    ("191.255.255.255", Public),
    ("192.0.0.0", Reserved),
    ("192.0.0.9", Reserved),
    ("192.0.0.255", Reserved),
    ("192.0.1.0", Public),
    // 192.0.2.0/24
    ("192.0.1.255", Public),
    ("192.0.2.0", Reserved),
    ("192.0.2.255", Reserved),
    ("192.0.3.0", Public),
    // 192.88.99.0/24
    ("192.88.98.255", Public),
    ("192.88.99.0", Reserved),
    ("192.88.99.255", Reserved),
    ("192.88.100.0", Public),
    // 192.168.0.0/16
    ("192.167.255.255", Public),
    ("192.168.0.0", Private),
    ("192.168.255.255", Private),
    ("192.169.0.0", Public),
    // 198.18.0.0/15
    ("198.17.255.255", Public),
    ("198.18.0.0", Reserved),
    ("198.19.255.255", Reserved),
    ("198.20.0.0", Public),
    // 198.51.100.0/24
    ("198.51.99.255", Public),
    ("198.51.100.0", Reserved),
    ("198.51.100.255", Reserved),
    ("198.51.101.0", Public),
    // 203.0.113.0/24
    ("203.0.112.255", Public),
    ("203.0.113.0", Reserved),
    ("203.0.113.255", Reserved),
    ("203.0.114.0", Public),
    // 224.0.0.0/4
    ("223.255.255.255", Public),
    ("224.0.0.0", Multicast),
    ("239.255.255.255", Multicast),
    // 240.0.0.0/4 and 255.255.255.255
    ("240.0.0.0", Reserved),
    ("255.255.255.254", Reserved),
    ("255.255.255.255", Broadcast),
    // Globally reachable special-purpose blocks stay public (AS112, AMT).
    ("192.31.196.1", Public),
    ("192.52.193.1", Public),
    ("192.175.48.1", Public),
    // Ordinary public addresses.
    ("1.1.1.1", Public),
    ("8.8.8.8", Public),
    ("140.82.112.3", Public),
];

/// The same for IPv6, with the IPv4-mapped, IPv4-compatible, NAT64, 6to4 and Teredo forms.
const IPV6_TABLE: &[(&str, AddressClass)] = &[
    // ::, ::1 and the IPv4-compatible ::/96 around them
    ("::", Unspecified),
    ("::1", Loopback),
    ("::2", Embedded),
    ("::127.0.0.1", Embedded),
    ("::10.0.0.1", Embedded),
    ("::8.8.8.8", Embedded),
    ("::255.255.255.255", Embedded),
    ("::169.254.169.254", Metadata),
    ("::1:0:0", Reserved),
    // IPv4-mapped ::ffff:0:0/96
    ("::fffe:ffff:ffff", Reserved),
    ("::ffff:0.0.0.0", Unspecified),
    ("::ffff:127.0.0.1", Loopback),
    ("::ffff:10.0.0.1", Private),
    ("::ffff:8.8.8.8", Public),
    ("::ffff:169.254.169.254", Metadata),
    ("::ffff:169.254.170.2", Metadata),
    ("::ffff:100.100.100.200", Metadata),
    ("::ffff:255.255.255.255", Broadcast),
    ("::1:0:0:0", Reserved),
    // IPv4-translated (RFC 2765), outside 2000::/3
    ("::ffff:0:8.8.8.8", Reserved),
    // Other ::/8 space
    ("ff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", Reserved),
    // NAT64 64:ff9b::/96
    ("64:ff9a:ffff:ffff:ffff:ffff:ffff:ffff", Reserved),
    ("64:ff9b::", Embedded),
    ("64:ff9b::8.8.8.8", Embedded),
    ("64:ff9b::10.0.0.1", Embedded),
    ("64:ff9b::ffff:ffff", Embedded),
    ("64:ff9b::169.254.169.254", Metadata),
    ("64:ff9b::169.254.170.2", Metadata),
    ("64:ff9b::1:0:0", Reserved),
    ("64:ff9b:0:ffff:ffff:ffff:ffff:ffff", Reserved),
    // Local-use NAT64 64:ff9b:1::/48, metadata at each possible position
    ("64:ff9b:1::", Embedded),
    ("64:ff9b:1::8.8.8.8", Embedded),
    ("64:ff9b:1:ffff:ffff:ffff:ffff:ffff", Embedded),
    ("64:ff9b:2::", Reserved),
    ("64:ff9b:1:a9fe:a9:fe00::", Metadata),
    ("64:ff9b:1:a9:fe:a9fe::", Metadata),
    ("64:ff9b:1:0:a9:fea9:fe00:0", Metadata),
    ("64:ff9b:1::169.254.169.254", Metadata),
    // 100::/64 discard-only and the space around it
    ("100::", Reserved),
    ("100::ffff:ffff:ffff:ffff", Reserved),
    ("100:0:0:1::", Reserved),
    // 2000::/3 global unicast
    ("1fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", Reserved),
    ("2000::", Public),
    ("3fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", Public),
    ("4000::", Reserved),
    ("5f00::1", Reserved),
    ("e000::", Reserved),
    // Teredo 2001::/32; metadata as server, and as (inverted) client
    ("2000:ffff:ffff:ffff:ffff:ffff:ffff:ffff", Public),
    ("2001::", Embedded),
    ("2001:0:4136:e378:8000:63bf:3fff:fdd2", Embedded),
    ("2001:0:ffff:ffff:ffff:ffff:ffff:ffff", Embedded),
    ("2001:0:a9fe:a9fe::", Metadata),
    ("2001:0:102:304::5601:5601", Metadata),
    // 2001::/23 IETF protocol assignments
    ("2001:1::", Reserved),
    ("2001:1::1", Reserved),
    ("2001:2::", Reserved),
    ("2001:20::", Reserved),
    ("2001:1ff:ffff:ffff:ffff:ffff:ffff:ffff", Reserved),
    ("2001:200::", Public),
    // 2001:db8::/32
    ("2001:db7:ffff:ffff:ffff:ffff:ffff:ffff", Public),
    ("2001:db8::", Reserved),
    ("2001:db8:ffff:ffff:ffff:ffff:ffff:ffff", Reserved),
    ("2001:db9::", Public),
    // 6to4 2002::/16
    ("2002::", Embedded),
    ("2002:808:808::", Embedded),
    ("2002:ffff:ffff:ffff:ffff:ffff:ffff:ffff", Embedded),
    ("2002:a9fe:a9fe::", Metadata),
    ("2002:a9fe:aa02:1::", Metadata),
    ("2002:6464:64c8::", Metadata),
    ("2002:a83f:8110::", Metadata),
    ("2001:ffff:ffff:ffff:ffff:ffff:ffff:ffff", Public),
    ("2003::", Public),
    // 3fff::/20
    ("3ffe:ffff:ffff:ffff:ffff:ffff:ffff:ffff", Public),
    ("3fff::", Reserved),
    ("3fff:fff:ffff:ffff:ffff:ffff:ffff:ffff", Reserved),
    ("3fff:1000::", Public),
    // fc00::/7, AWS metadata inside it
    ("fbff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", Reserved),
    ("fc00::", Private),
    ("fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", Private),
    ("fe00::", Reserved),
    ("fd00:ec2::253", Private),
    ("fd00:ec2::254", Metadata),
    ("fd00:ec2::255", Private),
    // fe80::/10
    ("fe7f:ffff:ffff:ffff:ffff:ffff:ffff:ffff", Reserved),
    ("fe80::", LinkLocal),
    ("fe80::1", LinkLocal),
    ("febf:ffff:ffff:ffff:ffff:ffff:ffff:ffff", LinkLocal),
    // fec0::/10
    ("fec0::", Private),
    ("feff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", Private),
    // ff00::/8
    ("ff00::", Multicast),
    ("ff02::1", Multicast),
    ("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", Multicast),
    // Ordinary public addresses.
    ("2606:4700:4700::1111", Public),
    ("2a00:1450:4001::1", Public),
    ("2620:4f:8000::1", Public),
];

#[track_caller]
fn ip(text: &str) -> IpAddr {
    text.parse().unwrap()
}

#[track_caller]
fn v4(text: &str) -> Ipv4Addr {
    text.parse().unwrap()
}

/// One address of each class.
fn sample(class: AddressClass) -> IpAddr {
    let text = match class {
        Public => "8.8.8.8",
        Loopback => "127.0.0.1",
        Private => "10.0.0.1",
        LinkLocal => "fe80::1",
        SharedCgnat => "100.64.0.1",
        Metadata => "169.254.169.254",
        Unspecified => "0.0.0.0",
        Multicast => "224.0.0.1",
        Broadcast => "255.255.255.255",
        Reserved => "192.0.2.1",
        Embedded => "64:ff9b::8.8.8.8",
    };
    ip(text)
}

/// Every IPv6 spelling of `v4` that a resolver could hand back.
fn ipv6_spellings(v4: Ipv4Addr) -> Vec<Ipv6Addr> {
    let [a, b, c, d] = v4.octets();
    let [hi, lo] = [u16::from_be_bytes([a, b]), u16::from_be_bytes([c, d])];
    vec![
        v4.to_ipv6_mapped(),
        v4.to_ipv6_compatible(),
        Ipv6Addr::new(0x64, 0xff9b, 0, 0, 0, 0, hi, lo),
        Ipv6Addr::new(0x64, 0xff9b, 1, 0, 0, 0, hi, lo),
        Ipv6Addr::new(0x64, 0xff9b, 1, hi, u16::from(c), u16::from(d) << 8, 0, 0),
        Ipv6Addr::new(0x2002, hi, lo, 0, 0, 0, 0, 1),
        Ipv6Addr::new(0x2001, 0, hi, lo, 0, 0, 0, 1),
        Ipv6Addr::new(0x2001, 0, 0x4136, 0xe378, 0x8000, 0x63bf, !hi, !lo),
    ]
}

#[test]
fn every_ipv4_range_edge_has_its_class() {
    for &(text, want) in IPV4_TABLE {
        assert_eq!(classify(ip(text)), want, "{text}");
    }
}

#[test]
fn every_ipv6_range_edge_has_its_class() {
    for &(text, want) in IPV6_TABLE {
        assert_eq!(classify(ip(text)), want, "{text}");
    }
}

#[test]
fn ipv4_mapped_addresses_classify_as_their_ipv4_address() {
    for &(text, want) in IPV4_TABLE {
        let mapped = IpAddr::V6(v4(text).to_ipv6_mapped());
        assert_eq!(classify(mapped), want, "{mapped}");
    }
}

#[test]
fn every_metadata_spelling_is_metadata_and_always_refused() {
    let mut spellings: Vec<IpAddr> = vec![ip("fd00:ec2::254")];
    for endpoint in METADATA_ENDPOINTS.map(Ipv4Addr::from) {
        spellings.push(IpAddr::V4(endpoint));
        spellings.extend(ipv6_spellings(endpoint).into_iter().map(IpAddr::V6));
    }
    for address in spellings {
        assert_eq!(classify(address), Metadata, "{address}");
        for rules in ALL_RULES {
            assert!(check(address, rules).is_err(), "{address} {rules:?}");
        }
    }
}

#[test]
fn public_only_rules_admit_only_public_addresses() {
    for class in CLASSES {
        let result = check(sample(class), PUBLIC_ONLY);
        if class == Public {
            assert_eq!(result, Ok(()));
        } else {
            assert_eq!(result, Err(AddressError::Refused(class)), "{class:?}");
        }
    }
}

#[test]
fn the_default_rules_are_public_only() {
    assert_eq!(AddressRules::default(), PUBLIC_ONLY);
}

#[test]
fn allow_private_unlocks_private_link_local_cgnat_and_embedded_only() {
    for class in CLASSES {
        let result = check(sample(class), PRIVATE);
        match class {
            Public | Private | LinkLocal | SharedCgnat | Embedded => {
                assert_eq!(result, Ok(()), "{class:?}");
            }
            Loopback | Metadata | Unspecified | Multicast | Broadcast | Reserved => {
                assert_eq!(result, Err(AddressError::Refused(class)), "{class:?}");
            }
        }
    }
}

#[test]
fn a_loopback_target_must_resolve_to_loopback_only() {
    for rules in [LOOPBACK, LOOPBACK_AND_PRIVATE] {
        for text in [
            "127.0.0.1",
            "127.1.2.3",
            "127.255.255.255",
            "::1",
            "::ffff:127.0.0.1",
        ] {
            assert_eq!(check(ip(text), rules), Ok(()), "{text}");
        }
        for class in CLASSES {
            if class != Loopback {
                let result = check(sample(class), rules);
                assert_eq!(result, Err(AddressError::NotLoopback(class)), "{class:?}");
            }
        }
    }
}

#[test]
fn loopback_without_a_loopback_target_is_refused_even_with_allow_private() {
    for rules in [PUBLIC_ONLY, PRIVATE] {
        for text in ["127.0.0.1", "::1", "::ffff:127.0.0.1"] {
            let result = check(ip(text), rules);
            assert_eq!(result, Err(AddressError::Refused(Loopback)), "{text}");
        }
    }
}

#[test]
fn allow_private_never_unlocks_reserved_or_special_addresses() {
    for text in [
        "0.0.0.0",
        "::",
        "224.0.0.1",
        "ff02::1",
        "255.255.255.255",
        "240.0.0.1",
        "192.0.2.1",
        "198.18.0.1",
        "2001:db8::1",
        "100::1",
        "::ffff:192.0.2.1",
    ] {
        assert!(check(ip(text), PRIVATE).is_err(), "{text}");
    }
}

#[test]
fn embedded_ipv4_needs_allow_private_whatever_it_embeds() {
    for text in [
        "64:ff9b::8.8.8.8",
        "2002:808:808::1",
        "::8.8.8.8",
        "::127.0.0.1",
    ] {
        assert_eq!(
            check(ip(text), PUBLIC_ONLY),
            Err(AddressError::Refused(Embedded))
        );
        assert_eq!(check(ip(text), PRIVATE), Ok(()), "{text}");
        assert!(check(ip(text), LOOPBACK).is_err(), "{text}");
    }
}

#[test]
fn check_all_refuses_an_empty_answer() {
    for rules in ALL_RULES {
        assert_eq!(check_all(&[], rules), Err(AddressError::NoAddress));
    }
}

#[test]
fn check_all_needs_every_address_to_pass() {
    let public = [ip("8.8.8.8"), ip("2606:4700:4700::1111")];
    assert_eq!(check_all(&public, PUBLIC_ONLY), Ok(()));

    let mixed = [ip("8.8.8.8"), ip("10.0.0.1")];
    assert_eq!(
        check_all(&mixed, PUBLIC_ONLY),
        Err(AddressError::Refused(Private))
    );
    assert_eq!(check_all(&mixed, PRIVATE), Ok(()));

    let rebinding = [ip("8.8.8.8"), ip("127.0.0.1")];
    assert_eq!(
        check_all(&rebinding, PRIVATE),
        Err(AddressError::Refused(Loopback))
    );

    let metadata = [ip("10.0.0.1"), ip("::ffff:169.254.169.254")];
    assert_eq!(
        check_all(&metadata, PRIVATE),
        Err(AddressError::Refused(Metadata))
    );
}

#[test]
fn check_all_reports_the_first_refused_address() {
    let answer = [ip("8.8.8.8"), ip("10.0.0.1"), ip("127.0.0.1")];
    assert_eq!(
        check_all(&answer, PUBLIC_ONLY),
        Err(AddressError::Refused(Private))
    );
}

#[test]
fn localhost_passes_only_when_it_resolves_to_loopback() {
    let localhost = [ip("127.0.0.1"), ip("::1")];
    assert_eq!(check_all(&localhost, LOOPBACK), Ok(()));
    assert_eq!(
        check_all(&localhost, PUBLIC_ONLY),
        Err(AddressError::Refused(Loopback))
    );

    let hijacked = [ip("127.0.0.1"), ip("93.184.215.14")];
    assert_eq!(
        check_all(&hijacked, LOOPBACK_AND_PRIVATE),
        Err(AddressError::NotLoopback(Public))
    );
    let private = [ip("::1"), ip("192.168.1.1")];
    assert_eq!(
        check_all(&private, LOOPBACK_AND_PRIVATE),
        Err(AddressError::NotLoopback(Private))
    );
}

#[test]
fn messages_name_the_class_and_never_the_address() {
    let refused = check(ip("10.1.2.3"), PUBLIC_ONLY).unwrap_err();
    assert_eq!(
        refused.to_string(),
        "the target resolves to a private address; an allow rule with `allow_private: true` that matches the request admits it"
    );
    assert_eq!(refused.class(), Some(Private));

    let metadata = check(ip("169.254.169.254"), PRIVATE).unwrap_err();
    assert_eq!(
        metadata.to_string(),
        "the target resolves to a cloud metadata address; cloud metadata addresses are never admitted"
    );

    let not_loopback = check(ip("8.8.8.8"), LOOPBACK).unwrap_err();
    assert_eq!(
        not_loopback.to_string(),
        "the target is a loopback host but resolves to a public address, which is not loopback"
    );
    assert_eq!(not_loopback.class(), Some(Public));

    let empty = check_all(&[], PUBLIC_ONLY).unwrap_err();
    assert_eq!(empty.to_string(), "the target resolves to no address");
    assert_eq!(empty.class(), None);

    for class in CLASSES {
        for error in [
            AddressError::Refused(class),
            AddressError::NotLoopback(class),
        ] {
            let message = error.to_string();
            assert!(message.starts_with("the target "), "{message}");
            assert!(!message.ends_with('.'), "{message}");
        }
    }
}

#[test]
fn class_names_are_distinct_and_snake_case() {
    let names: std::collections::HashSet<&str> = CLASSES.iter().map(|c| c.as_str()).collect();
    assert_eq!(names.len(), CLASSES.len());
    for name in names {
        assert!(
            name.chars().all(|c| c.is_ascii_lowercase() || c == '_'),
            "{name}"
        );
    }
}

/// Special IPv4 ranges, so that random addresses land in every class.
const SPECIAL_V4: &[([u8; 4], u32)] = &[
    ([0, 0, 0, 0], 8),
    ([10, 0, 0, 0], 8),
    ([100, 64, 0, 0], 10),
    ([127, 0, 0, 0], 8),
    ([169, 254, 0, 0], 16),
    ([169, 254, 169, 254], 31),
    ([172, 16, 0, 0], 12),
    ([192, 0, 0, 0], 22),
    ([192, 88, 99, 0], 24),
    ([192, 168, 0, 0], 16),
    ([198, 18, 0, 0], 15),
    ([198, 51, 100, 0], 24),
    ([203, 0, 113, 0], 24),
    ([224, 0, 0, 0], 3),
    ([255, 255, 255, 254], 31),
];

/// Special IPv6 prefixes, as the first two segments and a prefix length up to 32.
const SPECIAL_V6: &[([u16; 2], u32)] = &[
    ([0, 0], 32),
    ([0x64, 0xff9b], 32),
    ([0x100, 0], 16),
    ([0x2001, 0], 23),
    ([0x2001, 0xdb8], 32),
    ([0x2002, 0], 16),
    ([0x3fff, 0], 20),
    ([0xfc00, 0], 7),
    ([0xfd00, 0xec2], 32),
    ([0xfe80, 0], 9),
    ([0xff00, 0], 8),
];

fn any_ipv4() -> impl Strategy<Value = Ipv4Addr> {
    prop_oneof![
        any::<u32>().prop_map(Ipv4Addr::from_bits),
        (prop::sample::select(SPECIAL_V4), any::<u32>()).prop_map(|((net, len), bits)| {
            let mask = u32::MAX << (32 - len);
            Ipv4Addr::from_bits(u32::from_be_bytes(net) | (bits & !mask))
        }),
        prop::sample::select(METADATA_ENDPOINTS.to_vec()).prop_map(Ipv4Addr::from),
    ]
}

fn any_ipv6() -> impl Strategy<Value = Ipv6Addr> {
    prop_oneof![
        any::<u128>().prop_map(Ipv6Addr::from_bits),
        (prop::sample::select(SPECIAL_V6), any::<u128>()).prop_map(|(([a, b], len), bits)| {
            let net = (u128::from(a) << 112) | (u128::from(b) << 96);
            let mask = u128::MAX << (128 - len);
            Ipv6Addr::from_bits(net | (bits & !mask))
        }),
        // Short suffixes under a special prefix: ::1, ::ffff:a.b.c.d, fd00:ec2::254 and the like.
        (prop::sample::select(SPECIAL_V6), any::<u64>()).prop_map(|(([a, b], _), low)| {
            let net = (u128::from(a) << 112) | (u128::from(b) << 96);
            Ipv6Addr::from_bits(net | u128::from(low))
        }),
        any_ipv4().prop_flat_map(|v4| prop::sample::select(ipv6_spellings(v4))),
        Just(Ipv6Addr::LOCALHOST),
        Just(Ipv6Addr::UNSPECIFIED),
    ]
}

fn any_ip() -> impl Strategy<Value = IpAddr> {
    prop_oneof![
        any_ipv4().prop_map(IpAddr::V4),
        any_ipv6().prop_map(IpAddr::V6)
    ]
}

fn any_rules() -> impl Strategy<Value = AddressRules> {
    (any::<bool>(), any::<bool>()).prop_map(|(loopback_target, allow_private)| AddressRules {
        loopback_target,
        allow_private,
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    #[test]
    fn mapped_ipv4_classifies_as_the_ipv4_address(v4 in any_ipv4()) {
        let mapped = IpAddr::V6(v4.to_ipv6_mapped());
        prop_assert_eq!(classify(mapped), classify(IpAddr::V4(v4)));
    }

    #[test]
    fn public_only_rules_pass_exactly_public_addresses(ip in any_ip()) {
        prop_assert_eq!(check(ip, PUBLIC_ONLY).is_ok(), classify(ip) == Public);
    }

    #[test]
    fn allow_private_passes_exactly_the_unlockable_classes(ip in any_ip()) {
        let unlockable = matches!(
            classify(ip),
            Public | Private | LinkLocal | SharedCgnat | Embedded
        );
        prop_assert_eq!(check(ip, PRIVATE).is_ok(), unlockable);
    }

    #[test]
    fn a_loopback_target_passes_exactly_loopback_addresses(
        ip in any_ip(),
        allow_private in any::<bool>(),
    ) {
        let rules = AddressRules { loopback_target: true, allow_private };
        prop_assert_eq!(check(ip, rules).is_ok(), classify(ip) == Loopback);
    }

    #[test]
    fn nothing_ever_passes_metadata(ip in any_ip(), rules in any_rules()) {
        if classify(ip) == Metadata {
            prop_assert!(check(ip, rules).is_err());
        }
    }

    #[test]
    fn embedding_forms_are_embedded_or_metadata(v4 in any_ipv4()) {
        let is_metadata = classify(IpAddr::V4(v4)) == Metadata;
        // The spellings after the IPv4-mapped one all embed `v4` for a translation scheme.
        for v6 in ipv6_spellings(v4).into_iter().skip(1) {
            // ::0.0.0.0 and ::0.0.0.1 are `::` and `::1`.
            if v6.is_unspecified() || v6.is_loopback() {
                continue;
            }
            let class = classify(IpAddr::V6(v6));
            if is_metadata {
                prop_assert_eq!(class, Metadata, "{}", v6);
            } else {
                prop_assert!(class == Embedded || class == Metadata, "{} {:?}", v6, class);
            }
        }
    }

    #[test]
    fn refusals_carry_the_class_of_the_address(ip in any_ip(), rules in any_rules()) {
        if let Err(error) = check(ip, rules) {
            prop_assert_eq!(error.class(), Some(classify(ip)));
        }
    }

    #[test]
    fn check_all_passes_exactly_when_every_address_passes(
        ips in prop::collection::vec(any_ip(), 0..5),
        rules in any_rules(),
    ) {
        let each = !ips.is_empty() && ips.iter().all(|ip| check(*ip, rules).is_ok());
        prop_assert_eq!(check_all(&ips, rules).is_ok(), each);
    }
}
