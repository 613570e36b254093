//! Property tests of form fields as body sites (issue 16): the decoding Mint reads a form body's
//! field names with is the WHATWG `application/x-www-form-urlencoded` one, whatever encoder wrote
//! the name; every declared field name is found again through any encoding of it, in the alias
//! file and in the compiled [`BodyPlaces`]; and nothing else is.

#![allow(
    clippy::unwrap_used,
    clippy::panic,
    reason = "test code: a failed setup step should fail the test"
)]

use mint_policy::aliases::load_aliases;
use mint_policy::body::{BodyPlaces, FormField, FormFieldError, MAX_FORM_FIELD_BYTES, form_decode};
use proptest::prelude::*;

/// Encodes as an HTML form does (`URLSearchParams`, Python's `urlencode`): space as `+`, every
/// byte outside `*-._` and ASCII alphanumerics as `%XX`.
fn form_encode(bytes: &[u8], upper: bool) -> String {
    let mut out = String::new();
    for &byte in bytes {
        match byte {
            b' ' => out.push('+'),
            b'*' | b'-' | b'.' | b'_' => out.push(char::from(byte)),
            _ if byte.is_ascii_alphanumeric() => out.push(char::from(byte)),
            _ if upper => out.push_str(&format!("%{byte:02X}")),
            _ => out.push_str(&format!("%{byte:02x}")),
        }
    }
    out
}

/// Encodes every byte as `%XX`.
fn encode_all(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("%{b:02X}")).collect()
}

fn field_name() -> impl Strategy<Value = String> {
    // Printable text: ASCII punctuation (`&`, `=`, `+`, `%`, space...), letters, and a few
    // characters outside ASCII.
    proptest::collection::vec(
        prop_oneof![
            (0x20u8..0x7f).prop_map(char::from),
            Just('é'),
            Just('名'),
            Just('\u{1F511}'),
        ],
        1..40,
    )
    .prop_map(|chars| chars.into_iter().collect())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn decoding_undoes_every_encoder(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
        prop_assert_eq!(form_decode(form_encode(&bytes, true).as_bytes()), bytes.clone());
        prop_assert_eq!(form_decode(form_encode(&bytes, false).as_bytes()), bytes.clone());
        prop_assert_eq!(form_decode(encode_all(&bytes).as_bytes()), bytes);
    }

    #[test]
    fn decoding_never_grows_and_keeps_plain_text(text in "[A-Za-z0-9_.~*-]{0,64}") {
        prop_assert_eq!(form_decode(text.as_bytes()), text.as_bytes().to_vec());
    }

    #[test]
    fn a_stray_percent_is_itself(prefix in "[a-z]{0,8}", suffix in "[g-z]{0,2}") {
        let raw = format!("{prefix}%{suffix}");
        prop_assert_eq!(form_decode(raw.as_bytes()), raw.as_bytes().to_vec());
    }

    #[test]
    fn every_printable_name_is_a_field_and_is_found_through_any_encoding(
        name in field_name(),
        other in field_name(),
    ) {
        let field = FormField::parse(&name).unwrap();
        prop_assert_eq!(field.as_str(), name.as_str());
        let yaml = format!(
            "aliases:\n  - name: oauth\n    hosts: [auth.example.com]\n    sites: [{{form: [{}]}}]\n",
            serde_json::Value::String(name.clone())
        );
        let file = load_aliases(yaml.as_bytes(), "a.yaml").aliases.unwrap();
        prop_assert_eq!(&file.aliases[0].form, &vec![field]);
        let places = BodyPlaces::new(&file);
        prop_assert!(places.has_form_fields());
        for encoded in [form_encode(name.as_bytes(), true), encode_all(name.as_bytes())] {
            let decoded = form_decode(encoded.as_bytes());
            prop_assert!(places.is_named_form_field(&decoded));
            prop_assert!(places.names_form_field(&decoded, "oauth"));
            prop_assert!(!places.names_form_field(&decoded, "other"));
        }
        if other != name {
            prop_assert!(!places.is_named_form_field(other.as_bytes()));
        }
        // Matching is byte for byte: another case is another field.
        let upper = name.to_uppercase();
        if upper != name {
            prop_assert!(!places.is_named_form_field(upper.as_bytes()));
        }
    }

    #[test]
    fn a_control_character_anywhere_is_refused(
        before in "[a-z]{0,8}",
        control in prop_oneof![(0u32..0x20), (0x7fu32..0xa0)],
        after in "[a-z]{0,8}",
    ) {
        let name = format!("{before}{}{after}", char::from_u32(control).unwrap());
        prop_assert_eq!(FormField::parse(&name), Err(FormFieldError::Control));
    }
}

#[test]
fn names_are_bounded() {
    assert_eq!(FormField::parse(""), Err(FormFieldError::Empty));
    let longest = "a".repeat(MAX_FORM_FIELD_BYTES);
    assert!(FormField::parse(&longest).is_ok());
    assert_eq!(
        FormField::parse(&format!("{longest}a")),
        Err(FormFieldError::TooLong)
    );
}

#[test]
fn no_form_field_means_no_lookup_succeeds() {
    let yaml = "aliases:\n  - name: gh\n    hosts: [api.github.com]\n    sites: [{body: [/client_secret]}]\n";
    let file = load_aliases(yaml.as_bytes(), "a.yaml").aliases.unwrap();
    let places = BodyPlaces::new(&file);
    assert!(!places.has_form_fields());
    assert!(!places.is_named_form_field(b"client_secret"));
    assert!(places.root().is_some());
}
