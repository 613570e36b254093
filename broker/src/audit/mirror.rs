//! `mint serve --audit-stdout`: every line written to the chained audit file, copied as one JSON
//! line to a stream (the broker's stdout) for a log pipeline (journald, Vector, Fluent Bit, an
//! OpenTelemetry collector), with the broker's id as its first member.
//!
//! The file stays the record of truth and is written first, exactly as without a copy: the copy
//! is offered only after a batch is in the file, under the writer's lock, and offering never
//! blocks or fails: the batch goes into a bounded queue, and a thread of its own writes it out.
//! A batch that does not fit (the stream is slower than the broker) is not copied, and its lines
//! are counted; the audit flusher records the count in the chain as an `audit_stdout_dropped`
//! event (`dropped`: lines lost since the last such event) within a tick. A stream that fails
//! (closed, `EPIPE`) is given up for good: one `audit_stdout_closed` event records what was lost
//! until then, and nothing is copied or counted after it (the event says the copy stopped).
//!
//! A copied line is the file's line with `"broker":ID,` put after its opening brace: remove that
//! member and the line hashes as in the file, so a consumer can check the chain from the stream.

use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Batches waiting for the stream; a batch is one `write(2)` of the file (usually one line).
pub const MIRROR_QUEUE_BATCHES: usize = 4096;

/// How long a shutdown waits for the queue to reach the stream.
const DRAIN_WAIT: Duration = Duration::from_secs(2);

/// A broker's id in copied lines: 1-64 characters of `A-Z a-z 0-9 . _ -`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BrokerId(String);

/// A `--broker-id` outside the grammar.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid broker id: use 1-64 characters of A-Z, a-z, 0-9, `.`, `_` and `-`, such as `mint-1`"
)]
pub struct BrokerIdError;

impl BrokerId {
    /// Checks `text` against the grammar.
    pub fn new(text: &str) -> Result<BrokerId, BrokerIdError> {
        let valid = (1..=64).contains(&text.len())
            && text
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
        if valid {
            Ok(BrokerId(text.to_owned()))
        } else {
            Err(BrokerIdError)
        }
    }

    /// The machine's host name when it fits the grammar (`/proc/sys/kernel/hostname`), else
    /// `mint`.
    pub fn from_host() -> BrokerId {
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .and_then(|name| BrokerId::new(name.trim()).ok())
            .unwrap_or_else(|| BrokerId("mint".to_owned()))
    }

    /// The id.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// What the flusher should record about the copy, taken once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum MirrorReport {
    /// `n` lines were not copied (the queue was full) since the last report.
    Dropped(u64),
    /// The stream failed; `n` lines were lost since the last report, that one included. Nothing
    /// is copied after this.
    Closed(u64),
}

/// The copy of the audit file to a stream. See the module documentation.
pub struct Mirror {
    queue: Mutex<Option<SyncSender<Vec<u8>>>>,
    /// Lines not copied since the last report.
    dropped: AtomicU64,
    /// The stream failed: nothing is offered any more.
    closed: AtomicBool,
    /// The failure was reported.
    closed_reported: AtomicBool,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for Mirror {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mirror")
            .field("dropped", &self.dropped.load(Ordering::Relaxed))
            .field("closed", &self.closed.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl Mirror {
    /// Starts the thread that writes copied lines to `out`, tagged with `broker`.
    pub fn start(
        out: impl Write + Send + 'static,
        broker: &BrokerId,
        capacity: usize,
    ) -> io::Result<Arc<Mirror>> {
        let (sender, receiver) = sync_channel(capacity.max(1));
        let mirror = Arc::new(Mirror {
            queue: Mutex::new(Some(sender)),
            dropped: AtomicU64::new(0),
            closed: AtomicBool::new(false),
            closed_reported: AtomicBool::new(false),
            thread: Mutex::new(None),
        });
        let prefix = format!("{{\"broker\":\"{}\",", broker.as_str()).into_bytes();
        let for_thread = Arc::clone(&mirror);
        let thread = std::thread::Builder::new()
            .name("mint-audit-stdout".to_owned())
            .spawn(move || for_thread.run(out, &prefix, &receiver))?;
        *mirror.thread.lock().unwrap_or_else(PoisonError::into_inner) = Some(thread);
        Ok(mirror)
    }

    /// Offers a batch of whole lines just written to the file; never blocks.
    pub(super) fn offer(&self, batch: &[u8]) {
        if batch.is_empty() || self.closed.load(Ordering::Acquire) {
            return;
        }
        let queue = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
        let sent = match queue.as_ref() {
            Some(sender) => match sender.try_send(batch.to_vec()) {
                Ok(()) => true,
                Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => false,
            },
            None => false,
        };
        if !sent {
            self.dropped.fetch_add(lines(batch), Ordering::AcqRel);
        }
    }

    /// What to record now, if anything: drops since the last report, or the stream's failure
    /// (once).
    pub(super) fn take_report(&self) -> Option<MirrorReport> {
        if self.closed.load(Ordering::Acquire) {
            if self.closed_reported.swap(true, Ordering::AcqRel) {
                return None;
            }
            return Some(MirrorReport::Closed(self.dropped.swap(0, Ordering::AcqRel)));
        }
        match self.dropped.swap(0, Ordering::AcqRel) {
            0 => None,
            n => Some(MirrorReport::Dropped(n)),
        }
    }

    /// Gives a report back after it could not be recorded, to be tried with the next one.
    pub(super) fn restore(&self, report: MirrorReport) {
        match report {
            MirrorReport::Dropped(n) => {
                self.dropped.fetch_add(n, Ordering::AcqRel);
            }
            MirrorReport::Closed(n) => {
                self.dropped.fetch_add(n, Ordering::AcqRel);
                self.closed_reported.store(false, Ordering::Release);
            }
        }
    }

    /// Closes the queue and waits a little for the copies still queued to reach the stream (a
    /// stream that does not take them does not hold a shutdown up).
    pub(super) fn finish(&self) {
        self.queue
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let Some(thread) = self
            .thread
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        else {
            return;
        };
        let deadline = Instant::now() + DRAIN_WAIT;
        while !thread.is_finished() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        if thread.is_finished() {
            let _ = thread.join();
        }
    }

    /// The writing thread: each batch, tagged line by line, in one write.
    fn run(&self, mut out: impl Write, prefix: &[u8], receiver: &Receiver<Vec<u8>>) {
        let mut tagged = Vec::new();
        while let Ok(batch) = receiver.recv() {
            tagged.clear();
            for line in batch.split_inclusive(|&b| b == b'\n') {
                // INVARIANT: every line the writer chains starts with `{`.
                let Some(rest) = line.strip_prefix(b"{") else {
                    continue;
                };
                tagged.extend_from_slice(prefix);
                tagged.extend_from_slice(rest);
            }
            if let Err(error) = out.write_all(&tagged).and_then(|()| out.flush()) {
                self.closed.store(true, Ordering::Release);
                self.dropped.fetch_add(lines(&batch), Ordering::AcqRel);
                tracing::error!(
                    error = %error,
                    "Cannot write audit records to stdout (--audit-stdout); the copy stopped, \
                     the audit file goes on, and an audit_stdout_closed event records how many \
                     records the copy lost"
                );
                // Count what is still queued, then stop.
                while let Ok(batch) = receiver.try_recv() {
                    self.dropped.fetch_add(lines(&batch), Ordering::AcqRel);
                }
                return;
            }
        }
    }
}

fn lines(batch: &[u8]) -> u64 {
    batch.iter().filter(|&&b| b == b'\n').count() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether the stream takes writes: unset (wait), `true` (take them) or `false` (fail).
    type Valve = Arc<(Mutex<Option<bool>>, std::sync::Condvar)>;

    /// A stream that takes nothing until told, then fails or accepts.
    struct Gate {
        open: Valve,
        seen: Arc<Mutex<Vec<u8>>>,
    }

    impl Write for Gate {
        fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
            let (lock, ready) = &*self.open;
            let mut state = lock.lock().unwrap();
            while state.is_none() {
                state = ready.wait(state).unwrap();
            }
            if *state == Some(false) {
                return Err(io::ErrorKind::BrokenPipe.into());
            }
            self.seen.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    fn gate() -> (Gate, Valve, Arc<Mutex<Vec<u8>>>) {
        let open = Arc::new((Mutex::new(None), std::sync::Condvar::new()));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let gate = Gate {
            open: Arc::clone(&open),
            seen: Arc::clone(&seen),
        };
        (gate, open, seen)
    }

    fn set(open: &Valve, value: bool) {
        *open.0.lock().unwrap() = Some(value);
        open.1.notify_all();
    }

    #[test]
    fn broker_ids_follow_the_grammar() {
        assert_eq!(
            BrokerId::new("mint-1.eu_west").unwrap().as_str(),
            "mint-1.eu_west"
        );
        for bad in ["", "a b", "a\"b", "é", &"x".repeat(65)] {
            assert_eq!(BrokerId::new(bad), Err(BrokerIdError), "{bad}");
        }
        assert!(BrokerId::new(BrokerId::from_host().as_str()).is_ok());
    }

    #[test]
    fn lines_are_tagged_and_a_full_queue_counts_what_it_drops() {
        let (out, open, seen) = gate();
        let mirror = Mirror::start(out, &BrokerId::new("b1").unwrap(), 2).unwrap();
        // The stream takes nothing yet: the thread holds one batch, the queue two more.
        for n in 0..6 {
            mirror.offer(format!("{{\"n\":{n}}}\n").as_bytes());
            std::thread::sleep(Duration::from_millis(20));
        }
        mirror.offer(b"{\"n\":6}\n{\"n\":7}\n");
        let Some(MirrorReport::Dropped(dropped)) = mirror.take_report() else {
            panic!("drops are reported");
        };
        assert!((3..=5).contains(&dropped), "{dropped}");
        assert_eq!(mirror.take_report(), None);
        set(&open, true);
        mirror.finish();
        let text = String::from_utf8(seen.lock().unwrap().clone()).unwrap();
        assert!(text.starts_with("{\"broker\":\"b1\",\"n\":0}\n"), "{text}");
        assert_eq!(text.lines().count() as u64 + dropped, 8, "{text}");
    }

    #[test]
    fn a_failed_stream_is_reported_once_and_nothing_is_offered_after() {
        let (out, open, _seen) = gate();
        let mirror = Mirror::start(out, &BrokerId::new("b1").unwrap(), 8).unwrap();
        mirror.offer(b"{\"n\":0}\n");
        mirror.offer(b"{\"n\":1}\n{\"n\":2}\n");
        set(&open, false);
        let deadline = Instant::now() + Duration::from_secs(10);
        while !mirror.closed.load(Ordering::Acquire) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(Duration::from_millis(50));
        mirror.offer(b"{\"n\":3}\n");
        assert_eq!(mirror.take_report(), Some(MirrorReport::Closed(3)));
        assert_eq!(mirror.take_report(), None);
        mirror.offer(b"{\"n\":4}\n");
        assert_eq!(mirror.take_report(), None);
        // A report that could not be recorded comes back.
        mirror.restore(MirrorReport::Closed(3));
        assert_eq!(mirror.take_report(), Some(MirrorReport::Closed(3)));
        mirror.finish();
    }
}
