//! Exact sliding-window call limits: each counter remembers when it admitted each of its last
//! `max` requests, so "at most `max` in any window of `per`" holds without approximation.
//!
//! The evaluator says which counters a request would charge; `Limiter::admit` checks all of them
//! and then consumes all of them, or none. A broker on its own holds one `Limiter` behind a lock;
//! brokers that share their limits keep the same windows in Redis instead, counted by a script
//! that follows these rules exactly (mint-broker's `limits::redis`), with [`units`] and
//! [`Limited::after`] shared. Time is passed in (any monotonic origin), so tests control the clock.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

/// One counter a request would consume a unit of.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Charge {
    /// The rule id (or `call_limits:KEY` for a legacy entry) reported when the counter is spent.
    pub rule: String,
    /// The counter: rule, limit and the values of its `by` keys.
    pub key: String,
    /// Requests admitted per window.
    pub max: u64,
    /// Window length.
    pub per: Duration,
}

/// A request refused because a counter is spent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limited {
    /// The rules whose counters are spent, sorted.
    pub rules: Vec<String>,
    /// When the request would next be admitted, rounded up to whole seconds (at least 1).
    pub retry_after: Duration,
}

// === impl Limited ===

impl Limited {
    /// A refusal by `rules` (sorted and deduplicated here) that may be retried after `wait`,
    /// rounded up to whole seconds and at least 1.
    pub fn after(mut rules: Vec<String>, wait: Duration) -> Limited {
        rules.sort();
        rules.dedup();
        let seconds = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
        Limited {
            rules,
            retry_after: Duration::from_secs(seconds.max(1)),
        }
    }
}

/// What a counter has left, for `mint policy explain`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Budget {
    /// The rule the counter belongs to.
    pub rule: String,
    /// Requests admitted per window.
    pub max: u64,
    /// Window length.
    pub per: Duration,
    /// Requests still admitted in the current window.
    pub remaining: u64,
}

/// The state of every counter.
#[derive(Debug, Default)]
pub struct Limiter {
    windows: HashMap<String, Window>,
}

/// One counter: the admissions still inside its window, and the window's length.
#[derive(Debug, Default)]
struct Window {
    per: Duration,
    times: VecDeque<Duration>,
}

// === impl Limiter ===

impl Limiter {
    /// A limiter with every counter at zero.
    pub fn new() -> Self {
        Limiter::default()
    }

    /// Admits the request if every counter has room, consuming one unit of each; otherwise
    /// consumes nothing and says which rules refused it.
    pub fn admit(&mut self, charges: &[Charge], now: Duration) -> Result<(), Limited> {
        self.admit_each(&[charges], now)
    }

    /// Admits a request made of several calls (a JSON-RPC batch of `tools/call`s), each with the
    /// charges of its own evaluation: a counter named by `n` calls needs room for `n` units and
    /// consumes `n`. Within one call's charges a counter named twice counts once. All or nothing.
    pub fn admit_each(&mut self, calls: &[&[Charge]], now: Duration) -> Result<(), Limited> {
        let needs = units(calls);
        let mut spent: Vec<String> = Vec::new();
        let mut retry_after = Duration::ZERO;
        for (charge, n) in &needs {
            let window = self.window(&charge.key);
            window.per = charge.per;
            expire(&mut window.times, charge.per, now);
            let len = window.times.len() as u64;
            if len.saturating_add(*n) > charge.max {
                // Room for `n` appears when the admission `len + n - 1 - max` (from the oldest)
                // leaves the window; a reload that lowered `max` can leave more than `max` inside.
                // A need larger than `max` never fits: wait a whole window, and still be refused.
                let index =
                    usize::try_from((len + n).saturating_sub(charge.max + 1)).unwrap_or(usize::MAX);
                let leaves = window.times.get(index).copied().unwrap_or(now);
                let wait = (leaves + charge.per)
                    .saturating_sub(now)
                    .max(if *n > charge.max {
                        charge.per
                    } else {
                        Duration::ZERO
                    });
                retry_after = retry_after.max(wait);
                spent.push(charge.rule.clone());
            }
        }
        if !spent.is_empty() {
            return Err(Limited::after(spent, retry_after));
        }
        for (charge, n) in needs {
            let window = self.window(&charge.key);
            window.per = charge.per;
            for _ in 0..n {
                window.times.push_back(now);
            }
        }
        Ok(())
    }

    /// The window of counter `key`, created empty the first time: the key is copied only then,
    /// not on every request.
    #[expect(
        clippy::expect_used,
        reason = "INVARIANT: the key is inserted just above when it was missing"
    )]
    fn window(&mut self, key: &str) -> &mut Window {
        if !self.windows.contains_key(key) {
            self.windows.insert(key.to_owned(), Window::default());
        }
        self.windows
            .get_mut(key)
            .expect("the window was just inserted")
    }

    /// Gives back what [`Limiter::admit`] consumed for `charges` at `admitted_at`: for a request
    /// that was admitted but then never sent (its audit record could not be written, its target
    /// resolved to a refused address, the connection failed). Only allowed, forwarded requests
    /// count against a limit.
    pub fn refund(&mut self, charges: &[Charge], admitted_at: Duration) {
        self.refund_each(&[charges], admitted_at);
    }

    /// Gives back what [`Limiter::admit_each`] consumed for `calls` at `admitted_at`.
    pub fn refund_each(&mut self, calls: &[&[Charge]], admitted_at: Duration) {
        for (charge, n) in units(calls) {
            let Some(window) = self.windows.get_mut(&charge.key) else {
                continue;
            };
            for _ in 0..n {
                match window.times.iter().rposition(|t| *t == admitted_at) {
                    Some(at) => {
                        window.times.remove(at);
                    }
                    None => break,
                }
            }
        }
    }

    /// Sets counter `key` (window `per`) to hold the admissions at `times`, in any order: a copy
    /// of counters kept elsewhere (Redis), for `mint policy explain`.
    pub fn restore(&mut self, key: &str, per: Duration, times: impl IntoIterator<Item = Duration>) {
        let mut times: Vec<Duration> = times.into_iter().collect();
        times.sort();
        let window = self.window(key);
        window.per = per;
        window.times = times.into();
    }

    /// What each counter has left at `now`, without consuming anything.
    pub fn budgets(&self, charges: &[Charge], now: Duration) -> Vec<Budget> {
        charges
            .iter()
            .map(|c| {
                let used = self.windows.get(&c.key).map_or(0, |w| {
                    w.times
                        .iter()
                        .filter(|t| now.saturating_sub(**t) < c.per)
                        .count() as u64
                });
                Budget {
                    rule: c.rule.clone(),
                    max: c.max,
                    per: c.per,
                    remaining: c.max.saturating_sub(used),
                }
            })
            .collect()
    }

    /// Drops admissions that have left their counter's window, and counters left empty, bounding
    /// memory over time without changing any decision.
    pub fn prune(&mut self, now: Duration) {
        self.windows.retain(|_, w| {
            expire(&mut w.times, w.per, now);
            !w.times.is_empty()
        });
    }

    /// How many counters are held.
    pub fn len(&self) -> usize {
        self.windows.len()
    }

    /// Whether no counter is held.
    pub fn is_empty(&self) -> bool {
        self.windows.is_empty()
    }
}

/// The units each counter needs: one per call whose charges name it (named twice within one
/// call's charges, it counts once), in first-seen order.
pub fn units<'a>(calls: &[&'a [Charge]]) -> Vec<(&'a Charge, u64)> {
    let mut needs: Vec<(&Charge, u64)> = Vec::new();
    for charges in calls {
        let mut seen: Vec<&str> = Vec::with_capacity(charges.len());
        for charge in *charges {
            if seen.contains(&charge.key.as_str()) {
                continue;
            }
            seen.push(&charge.key);
            match needs.iter_mut().find(|(c, _)| c.key == charge.key) {
                Some((_, n)) => *n += 1,
                None => needs.push((charge, 1)),
            }
        }
    }
    needs
}

/// Drops admissions that left the window `(now - per, now]`.
fn expire(window: &mut VecDeque<Duration>, per: Duration, now: Duration) {
    while window
        .front()
        .is_some_and(|t| now.saturating_sub(*t) >= per)
    {
        window.pop_front();
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn retry_after_counts_from_the_admission_that_makes_room() {
        let mut l = Limiter::new();
        let wide = [charge("r", "k", 3, 60)];
        for t in [0, 10, 20] {
            assert!(l.admit(&wide, s(t)).is_ok());
        }
        // A reload lowered `max` to 1: two admissions must leave before there is room.
        let narrow = [charge("r", "k", 1, 60)];
        assert_eq!(l.admit(&narrow, s(30)).unwrap_err().retry_after, s(50));
        assert!(l.admit(&narrow, s(79)).is_err());
        assert!(l.admit(&narrow, s(80)).is_ok());
    }

    use super::*;

    fn charge(rule: &str, key: &str, max: u64, per_s: u64) -> Charge {
        Charge {
            rule: rule.into(),
            key: key.into(),
            max,
            per: Duration::from_secs(per_s),
        }
    }

    const fn s(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[test]
    fn refund_gives_back_exactly_the_refunded_admission() {
        let mut l = Limiter::new();
        let c = [charge("r", "r#0", 2, 60), charge("r", "r#0", 2, 60)];
        assert!(l.admit(&c, s(0)).is_ok());
        assert!(l.admit(&c, s(5)).is_ok());
        assert!(l.admit(&c, s(6)).is_err());
        // The admission at 5 s was never sent: it no longer counts, the one at 0 s still does.
        l.refund(&c, s(5));
        assert_eq!(l.budgets(&c[..1], s(6))[0].remaining, 1);
        assert!(l.admit(&c, s(6)).is_ok());
        assert!(l.admit(&c, s(7)).is_err());
        // Refunding what was never admitted changes nothing.
        l.refund(&c, s(99));
        l.refund(&[charge("x", "x#0", 1, 60)], s(0));
        assert!(l.admit(&c, s(7)).is_err());
        // At 60 s the admission at 0 s leaves; the one at 6 s stays.
        assert_eq!(l.budgets(&c[..1], s(60))[0].remaining, 1);
    }

    #[test]
    fn a_batch_consumes_one_unit_per_call_all_or_nothing() {
        let mut l = Limiter::new();
        let search = [charge("r", "r#0", 3, 60)];
        // Two calls of a batch need two units.
        assert!(l.admit_each(&[&search, &search], s(0)).is_ok());
        assert_eq!(l.budgets(&search, s(0))[0].remaining, 1);
        // Two more do not fit: nothing is consumed.
        let limited = l.admit_each(&[&search, &search], s(1)).unwrap_err();
        assert_eq!(limited.rules, vec!["r".to_owned()]);
        assert_eq!(limited.retry_after, s(59));
        assert_eq!(l.budgets(&search, s(1))[0].remaining, 1);
        // A batch larger than the limit never fits.
        let mut fresh = Limiter::new();
        let one: &[Charge] = &search;
        assert!(fresh.admit_each(&[one; 4], s(0)).is_err());
        assert_eq!(fresh.budgets(&search, s(0))[0].remaining, 3);
        // Refunding a batch gives back every unit it took.
        l.refund_each(&[&search, &search], s(0));
        assert_eq!(l.budgets(&search, s(1))[0].remaining, 3);
    }

    #[test]
    fn exact_sliding_window() {
        let mut l = Limiter::new();
        let c = [charge("r", "r#0", 3, 60)];
        assert!(l.admit(&c, s(0)).is_ok());
        assert!(l.admit(&c, s(10)).is_ok());
        assert!(l.admit(&c, s(20)).is_ok());
        let limited = l.admit(&c, s(30)).unwrap_err();
        assert_eq!(limited.rules, vec!["r".to_owned()]);
        assert_eq!(limited.retry_after, s(30));
        // The first admission leaves the window at exactly 60 s.
        assert!(l.admit(&c, s(59)).is_err());
        assert!(l.admit(&c, s(60)).is_ok());
        assert!(l.admit(&c, s(61)).is_err());
    }

    #[test]
    fn checks_all_then_consumes_all() {
        let mut l = Limiter::new();
        let a = charge("a", "a#0", 1, 60);
        let b = charge("b", "b#0", 2, 60);
        assert!(l.admit(&[a.clone(), b.clone()], s(0)).is_ok());
        // `a` is spent: the request is refused and `b` keeps its remaining unit.
        assert_eq!(
            l.admit(&[a.clone(), b.clone()], s(1)).unwrap_err().rules,
            vec!["a".to_owned()]
        );
        assert_eq!(l.budgets(std::slice::from_ref(&b), s(1))[0].remaining, 1);
        assert!(l.admit(std::slice::from_ref(&b), s(2)).is_ok());
        assert_eq!(
            l.admit(&[a, b], s(3)).unwrap_err().rules,
            vec!["a".to_owned(), "b".to_owned()]
        );
    }

    #[test]
    fn retry_after_rounds_up_and_is_never_zero() {
        let mut l = Limiter::new();
        let c = [Charge {
            rule: "r".into(),
            key: "k".into(),
            max: 1,
            per: Duration::from_millis(1500),
        }];
        assert!(l.admit(&c, Duration::ZERO).is_ok());
        assert_eq!(
            l.admit(&c, Duration::from_millis(100))
                .unwrap_err()
                .retry_after,
            s(2)
        );
        assert_eq!(
            l.admit(&c, Duration::from_millis(1499))
                .unwrap_err()
                .retry_after,
            s(1)
        );
    }

    #[test]
    fn a_restored_counter_decides_as_the_admissions_it_holds() {
        let c = [charge("r", "k", 2, 60)];
        for now in [s(11), s(64), s(65), s(70)] {
            let mut admitted = Limiter::new();
            assert!(admitted.admit(&c, s(5)).is_ok());
            assert!(admitted.admit(&c, s(10)).is_ok());
            let mut restored = Limiter::new();
            restored.restore("k", s(60), [s(10), s(5)]);
            assert_eq!(restored.budgets(&c, now), admitted.budgets(&c, now));
            assert_eq!(
                restored.admit(&c, now),
                admitted.admit(&c, now),
                "at {now:?}"
            );
        }
        let mut restored = Limiter::new();
        restored.restore("k", s(60), [s(10), s(5)]);
        assert_eq!(restored.admit(&c, s(11)).unwrap_err().retry_after, s(54));
    }

    #[test]
    fn limited_after_sorts_rules_and_rounds_up() {
        let l = Limited::after(vec!["b".into(), "a".into(), "b".into()], Duration::ZERO);
        assert_eq!(l.rules, ["a", "b"]);
        assert_eq!(l.retry_after, s(1));
        let l = Limited::after(vec![], Duration::from_micros(2_000_001));
        assert_eq!(l.retry_after, s(3));
    }

    #[test]
    fn duplicate_keys_consume_once_and_prune_forgets_only_expired_counters() {
        let mut l = Limiter::new();
        let c = charge("r", "k", 2, 60);
        assert!(l.admit(&[c.clone(), c.clone()], s(0)).is_ok());
        assert_eq!(l.budgets(std::slice::from_ref(&c), s(0))[0].remaining, 1);
        l.prune(s(59));
        assert_eq!(l.len(), 1, "a counter inside its window is kept");
        l.prune(s(60));
        assert!(l.is_empty());
    }
}
