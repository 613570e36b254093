//! The Redis admission script (`broker/src/limits/admit.lua`) against the in-memory limiter it
//! must agree with (`mint_policy::limits::Limiter`), through mint-broker's own `CallLimits`, on a
//! real `redis-server` (a private Unix socket, persistence off): the same admissions and
//! refusals, the same spent rules, the same `Retry-After`, all or none across counters, one unit
//! per call of a batch, refunds of exactly the request's own entries, and a repeated request id
//! refused without consuming anything.

#![allow(clippy::unwrap_used, clippy::panic, reason = "tests")]

use std::time::Duration;

use mint_broker::limits::redis::DEFAULT_PREFIX;
use mint_broker::limits::{CallLimits, Receipt, RedisLimitsConfig, Refusal};
use mint_policy::audit::RequestId;
use mint_policy::limits::Charge;
use mint_tests::redis::{RedisServer, available};

fn charge(rule: &str, max: u64) -> Charge {
    Charge {
        rule: rule.into(),
        key: format!("{rule}#0\u{1f}mino"),
        max,
        per: Duration::from_secs(3600),
    }
}

/// What an admission said, comparably: admitted, or the spent rules and `Retry-After`.
#[derive(Debug, PartialEq)]
enum Said {
    Admitted,
    Limited(Vec<String>, Duration),
    Unavailable,
}

async fn admit(limits: &CallLimits, calls: &[&[Charge]], id: &str) -> (Said, Option<Receipt>) {
    match limits.admit(calls, &RequestId::new(id).unwrap()).await {
        Ok(receipt) => (Said::Admitted, Some(receipt)),
        Err(Refusal::Limited(limited)) => (Said::Limited(limited.rules, limited.retry_after), None),
        Err(Refusal::Unavailable) => (Said::Unavailable, None),
    }
}

#[test]
fn the_redis_script_decides_as_the_in_memory_limiter() {
    if !available() {
        return;
    }
    let redis = RedisServer::start();
    let config = RedisLimitsConfig::new(
        &redis.unix_url(),
        DEFAULT_PREFIX,
        Duration::from_secs(2),
        None,
    )
    .unwrap();
    let key_a = config.key_of(&charge("a", 3).key);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let shared = CallLimits::redis(config);
        let memory = CallLimits::memory();
        let (a, b) = (charge("a", 3), charge("b", 2));
        let both = [a.clone(), b.clone()];
        let only_a = [a.clone()];
        let only_b = [b.clone()];
        // Requests: a batch of two calls charging `a` twice, one call charging both, then more
        // until both are spent, and a batch larger than `a`'s max.
        let steps: Vec<Vec<&[Charge]>> = vec![
            vec![&only_a, &only_a],
            vec![&both],
            vec![&both],
            vec![&only_b],
            vec![&only_b],
            vec![&only_a],
            vec![&only_a, &only_a, &only_a, &only_a],
        ];
        let mut receipts = Vec::new();
        for (n, calls) in steps.iter().enumerate() {
            let id = format!("0123456789ab-{n}");
            let (in_redis, receipt) = admit(&shared, calls, &id).await;
            let (in_memory, _) = admit(&memory, calls, &id).await;
            match (&in_redis, &in_memory) {
                (Said::Limited(r1, w1), Said::Limited(r2, w2)) => {
                    assert_eq!(r1, r2, "step {n}");
                    // Both round the same wait up to whole seconds; the clocks differ by the
                    // moments between the two calls.
                    assert!(
                        w1.abs_diff(*w2) <= Duration::from_secs(1),
                        "step {n}: {w1:?} {w2:?}"
                    );
                }
                _ => assert_eq!(in_redis, in_memory, "step {n}"),
            }
            receipts.push((calls.clone(), receipt));
        }
        // a: 2 (the batch) + 1, spent; b: 1 + 1, spent. The third request found `a` spent and
        // consumed `b` neither: all or none.
        assert_eq!(redis.zcard(&key_a), 3);
        // The batch of four never fits `a` (max 3): a whole window to wait, and still refused.
        let four: Vec<&[Charge]> = vec![&only_a; 4];
        let fresh = CallLimits::redis(
            RedisLimitsConfig::new(&redis.unix_url(), "fresh:", Duration::from_secs(2), None)
                .unwrap(),
        );
        let (said, _) = admit(&fresh, &four, "0123456789ab-x").await;
        assert_eq!(
            said,
            Said::Limited(vec!["a".into()], Duration::from_secs(3600))
        );
        // The batch's units are members `ID` and `ID#2`; a refund removes exactly them.
        let members = redis.cli(&["--raw", "ZRANGE", &key_a, "0", "-1"]);
        let mut members: Vec<&str> = members.lines().collect();
        members.sort_unstable();
        assert_eq!(
            members,
            ["0123456789ab-0", "0123456789ab-0#2", "0123456789ab-1"]
        );
        let (calls, receipt) = receipts.remove(0);
        shared.refund(&calls, receipt.unwrap());
        for _ in 0..100 {
            if redis.zcard(&key_a) == 1 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(
            redis.cli(&["--raw", "ZRANGE", &key_a, "0", "-1"]),
            "0123456789ab-1"
        );
        // A request id already counted (two brokers drawing one prefix) is refused, and its
        // other counters are left as they were: all or none.
        let before_b = redis.zcard(&config_key(&redis, &b));
        let (said, _) = admit(&shared, &[&both], "0123456789ab-1").await;
        assert_eq!(said, Said::Limited(vec!["b".into()], said_wait(&said)));
        let c = charge("c", 5);
        let a_and_c = [c.clone(), a.clone()];
        let (said, _) = admit(&shared, &[&a_and_c], "0123456789ab-1").await;
        assert_eq!(said, Said::Unavailable);
        // Nothing is given back either: the members there are the other request's. (A refund
        // would be sent in the background: give it time to arrive before looking.)
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(redis.zcard(&config_key(&redis, &c)), 0);
        assert_eq!(redis.zcard(&key_a), 1);
        assert_eq!(redis.zcard(&config_key(&redis, &b)), before_b);
    });
}

fn config_key(redis: &RedisServer, charge: &Charge) -> String {
    RedisLimitsConfig::new(
        &redis.unix_url(),
        DEFAULT_PREFIX,
        Duration::from_secs(1),
        None,
    )
    .unwrap()
    .key_of(&charge.key)
}

fn said_wait(said: &Said) -> Duration {
    match said {
        Said::Limited(_, wait) => *wait,
        other => panic!("{other:?}"),
    }
}
