//! Secrets from the moment Mint reads them to the moment they leave toward an upstream: where they
//! are stored ([`credential_store`]: keyring, environment, file, memory), where an agent asks for
//! one ([`placeholder`]), how one is put into a request ([`inject`]) and how every one is kept out
//! of an answer ([`scrub`]).
//!
//! The only room that calls `expose_secret()` (besides the one print of a new capability token in
//! `cli::cap` and `mint demo`'s throwaway token), each call commented. Nothing here decides whether
//! a secret may be used: the proxy calls [`inject`] only after the policy allowed the request and
//! its decision was recorded.

pub mod credential_store;
pub mod inject;
pub mod placeholder;
pub mod scrub;

use zeroize::Zeroize;

/// Makes room in `buf`, which holds secret-derived items, for `additional` more, so that
/// appending them does not reallocate: `Vec` frees the allocation it grows out of as it is, which
/// would leave a copy of the items in freed memory. When the buffer has to move, the items are
/// copied to a new allocation (at least twice the old capacity, so appending stays amortized
/// O(1)) and the old one is wiped before it is freed. `Zeroizing` only wipes the last allocation.
pub(crate) fn reserve_wiped<T: Zeroize + Copy>(buf: &mut Vec<T>, additional: usize) {
    let needed = buf.len().saturating_add(additional);
    if needed <= buf.capacity() {
        return;
    }
    let mut grown = Vec::with_capacity(needed.max(buf.capacity().saturating_mul(2)));
    grown.extend_from_slice(buf);
    // Wipes the items and the spare capacity; the old allocation is freed when replaced.
    buf.zeroize();
    *buf = grown;
}

/// Appends `item` to `buf` (secret-derived) through [`reserve_wiped`].
pub(crate) fn push_wiped<T: Zeroize + Copy>(buf: &mut Vec<T>, item: T) {
    reserve_wiped(buf, 1);
    buf.push(item);
}

/// Appends `items` to `buf` (secret-derived) through [`reserve_wiped`].
pub(crate) fn extend_wiped<T: Zeroize + Copy>(buf: &mut Vec<T>, items: &[T]) {
    reserve_wiped(buf, items.len());
    buf.extend_from_slice(items);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserve_wiped_keeps_the_items_and_appending_then_never_moves_the_buffer() {
        let mut buf: Vec<u8> = b"held".to_vec();
        reserve_wiped(&mut buf, 1000);
        assert_eq!(buf, b"held");
        assert!(buf.capacity() >= 1004);
        let at = buf.as_ptr();
        for byte in 0..1000u32 {
            buf.push(byte as u8);
        }
        assert_eq!(buf.as_ptr(), at, "appending within the reserve reallocated");
        // Room already there: nothing moves.
        let mut roomy: Vec<u64> = Vec::with_capacity(64);
        roomy.push(7);
        let at = roomy.as_ptr();
        reserve_wiped(&mut roomy, 63);
        assert_eq!(roomy.as_ptr(), at);
        assert_eq!(roomy, [7]);
        // Growing by one item at a time doubles, so it moves O(log n) times.
        let mut grown: Vec<u8> = Vec::new();
        let mut moves = 0;
        for byte in 0..4096u32 {
            let before = grown.as_ptr();
            extend_wiped(&mut grown, &[byte as u8]);
            moves += usize::from(grown.as_ptr() != before);
        }
        assert_eq!(grown.len(), 4096);
        assert!(grown.iter().enumerate().all(|(i, &b)| b == i as u8));
        assert!(moves <= 14, "{moves} moves");
    }
}
