//! Fuzzes the policy loader with arbitrary bytes: it must report findings, never panic, and
//! never loop or allocate without bound.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = mint_policy::policy::load_policy(data, "fuzz.yaml");
});
