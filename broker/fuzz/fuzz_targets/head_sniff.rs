//! Fuzzes the connection's request-head sniffing (`serve/framing.rs` through
//! `mint_broker::fuzzing`): where each HTTP/1.1 head of a byte stream lies and what its framing
//! says, and the recognition of hyper's own error answers (`serve/connection.rs`).
//!
//! Input: two bytes choosing where to cut the stream in three reads, then the stream.
//!
//! Beyond "never panics", it checks that the verdicts do not depend on how the bytes were split
//! between reads (whole, in three pieces, byte by byte; nor, once the stream ends with a line
//! feed, whether the stream is still followed), that they stay bounded (no more heads
//! than line feeds, at most 100 header lines each, nothing after the last one followed, an HTTP/2
//! preface gives none), and that an error answer is only ever recognised with a 4xx status.

#![no_main]

use libfuzzer_sys::fuzz_target;
use mint_broker::fuzzing::{head_verdicts, hyper_error_status};

const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

fuzz_target!(|data: &[u8]| {
    let [a, b, stream @ ..] = data else {
        return;
    };
    let whole = head_verdicts(&[stream]);

    let (mut i, mut j) = (
        usize::from(*a) % (stream.len() + 1),
        usize::from(*b) * 7 % (stream.len() + 1),
    );
    if i > j {
        std::mem::swap(&mut i, &mut j);
    }
    // The follower parses a pending head again only when a read brings a line feed (a head can
    // only end on one), so a head hyper refuses for a byte after its last line feed is seen as
    // refused at the next line feed, not at once: "untracked" may differ between splits until
    // then (seeds/head_sniff/refused-after-last-line-feed). The verdicts never do.
    let settled = stream.last() == Some(&b'\n');
    let same = |(verdicts, untracked, h2): (Vec<_>, bool, bool)| {
        verdicts == whole.0 && h2 == whole.2 && (!settled || untracked == whole.1)
    };
    let pieces = [&stream[..i], &stream[i..j], &stream[j..]];
    let split = head_verdicts(&pieces);
    assert!(
        same(split.clone()),
        "split at {i} and {j}: {split:?} but whole {whole:?}"
    );
    let bytewise: Vec<&[u8]> = stream.chunks(1).collect();
    let bytewise = head_verdicts(&bytewise);
    assert!(
        same(bytewise.clone()),
        "byte by byte: {bytewise:?} but whole {whole:?}"
    );

    let (verdicts, untracked, h2) = &whole;
    let line_feeds = stream.iter().filter(|&&b| b == b'\n').count();
    assert!(verdicts.len() <= line_feeds, "{} heads", verdicts.len());
    for (at, (framing_ok, method, headers, last)) in verdicts.iter().enumerate() {
        assert!(*headers <= 100, "{headers} header lines");
        if *last {
            assert_eq!(at + 1, verdicts.len(), "a head followed after the last one");
            assert!(*untracked);
        }
        if !framing_ok {
            assert!(*last, "a refused framing is not the last followed");
        }
        if let Some(method) = method {
            let found = stream.windows(method.len()).any(|w| w == method.as_bytes());
            assert!(found, "method {method:?} not in the stream");
        }
    }
    if *h2 {
        assert!(stream.starts_with(H2_PREFACE));
        assert!(verdicts.is_empty() && *untracked);
    }

    if let Some(status) = hyper_error_status(stream) {
        assert!((400..500).contains(&status));
        assert!(stream.starts_with(b"HTTP/1."));
    }
});
