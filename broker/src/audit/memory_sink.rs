//! An in-memory [`AuditSink`] for tests of the code that produces records (router tests with
//! `oneshot`): keeps each record as the exact line the file would hold, chained the same way,
//! and can be told to fail so that tests can prove a request is refused when its decision
//! record cannot be written.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};

use mint_policy::audit::AuditRecord;

use super::chain::LineHash;
use super::{AuditError, AuditSink, BoxFuture, PreparedLine, Receipt};

/// Records lines in memory, chained from genesis.
#[derive(Default)]
pub struct MemorySink {
    lines: Mutex<Vec<String>>,
    failing: AtomicBool,
}

// === impl MemorySink ===

impl MemorySink {
    /// An empty sink.
    pub fn new() -> MemorySink {
        MemorySink::default()
    }

    /// The lines written so far, as the file would hold them (without newlines).
    pub fn lines(&self) -> Vec<String> {
        self.lines
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// From now on every record fails with a write error (`fail = true`), or succeeds again.
    pub fn set_failing(&self, fail: bool) {
        self.failing.store(fail, Ordering::SeqCst);
    }

    fn write(&self, record: &AuditRecord) -> Result<Receipt, AuditError> {
        let line = PreparedLine::new(record)?;
        if self.failing.load(Ordering::SeqCst) {
            return Err(AuditError::Write {
                path: "memory".into(),
                source: std::io::ErrorKind::StorageFull.into(),
            });
        }
        let mut lines = self.lines.lock().unwrap_or_else(PoisonError::into_inner);
        let prev = lines
            .last()
            .map_or(LineHash::GENESIS, |last| LineHash::of(last.as_bytes()));
        let mut bytes = line.bytes;
        bytes.pop();
        let end = bytes.len();
        let Some(hex) = end
            .checked_sub(66)
            .and_then(|start| bytes.get_mut(start..end - 2))
        else {
            return Err(AuditError::Internal);
        };
        hex.copy_from_slice(&prev.hex());
        let text = String::from_utf8(bytes).map_err(|_| AuditError::Internal)?;
        let hash = LineHash::of(text.as_bytes());
        lines.push(text);
        Ok(Receipt {
            seq: lines.len() as u64,
            hash,
        })
    }
}

impl fmt::Debug for MemorySink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemorySink").finish_non_exhaustive()
    }
}

impl AuditSink for MemorySink {
    fn record(&self, record: &AuditRecord) -> Result<Receipt, AuditError> {
        self.write(record)
    }

    fn record_async<'a>(
        &'a self,
        record: &'a AuditRecord,
    ) -> BoxFuture<'a, Result<Receipt, AuditError>> {
        Box::pin(std::future::ready(self.write(record)))
    }
}

#[cfg(test)]
mod tests {
    use mint_policy::audit::{ChainHash, GENESIS_PREV, ReasonCode, chain_hash, parse_record};

    use super::*;

    #[test]
    fn chains_like_the_file() {
        let sink = MemorySink::new();
        let event = || {
            AuditRecord::event(
                crate::audit::now(),
                crate::audit::event_id(1),
                ReasonCode::new("policy_reload_failed").unwrap(),
                ChainHash::genesis(),
            )
        };
        sink.record(&event()).unwrap();
        sink.record(&event()).unwrap();
        let lines = sink.lines();
        assert_eq!(parse_record(&lines[0]).unwrap().prev.as_str(), GENESIS_PREV);
        assert_eq!(
            parse_record(&lines[1]).unwrap().prev.as_str(),
            chain_hash(&lines[0])
        );
        sink.set_failing(true);
        assert!(matches!(
            sink.record(&event()),
            Err(AuditError::Write { .. })
        ));
        assert_eq!(sink.lines().len(), 2);
    }
}
