#![allow(clippy::unwrap_used, reason = "tests")]

use super::*;

fn summary(agent: &str, path: &str) -> Summary {
    Summary {
        request_id: "r-1".to_owned(),
        agent: agent.to_owned(),
        rules: vec!["ask".to_owned()],
        method: "POST".to_owned(),
        scheme: "https".to_owned(),
        host: "api.example.com".to_owned(),
        port: 443,
        path: path.to_owned(),
        query_keys: vec![],
        tool: None,
        arguments: None,
        aliases: vec![],
    }
}

fn book(max_pending: usize, max_pending_per_agent: usize) -> Arc<ApprovalBook> {
    Arc::new(ApprovalBook::new(ApprovalBounds {
        max_pending,
        max_pending_per_agent,
    }))
}

fn waiting(held: Result<Held, HoldError>) -> Ticket {
    match held.unwrap() {
        Held::Waiting(ticket) => ticket,
        Held::Granted { .. } => panic!("granted without asking"),
    }
}

const LONG: Duration = Duration::from_secs(100);

#[tokio::test]
async fn an_approval_reaches_the_waiting_request_with_its_approver() {
    let book = book(4, 4);
    let ticket = waiting(book.hold(summary("a", "/x"), LONG));
    let id = ticket.id().to_owned();
    assert!(id.starts_with("ap-") && id.len() == 11, "{id}");
    assert!(mint_policy::audit::ApprovalId::new(id.clone()).is_ok());
    let waiter = tokio::spawn(ticket.wait());
    let grant = book
        .decide(
            &id,
            Decision::Approve { grant: None },
            "root (uid 0, pid 1)",
        )
        .unwrap();
    assert_eq!(grant, None);
    assert_eq!(
        waiter.await.unwrap(),
        Verdict::Approved {
            approver: "root (uid 0, pid 1)".to_owned(),
            grant: None
        }
    );
    assert!(book.list().0.is_empty());
    // Decided once: a second decision finds nothing.
    assert!(matches!(
        book.decide(&id, Decision::Deny, "x"),
        Err(DecideError::NoSuchApproval(_))
    ));
}

#[tokio::test]
async fn a_denial_reaches_the_waiting_request() {
    let book = book(4, 4);
    let ticket = waiting(book.hold(summary("a", "/x"), LONG));
    let id = ticket.id().to_owned();
    let waiter = tokio::spawn(ticket.wait());
    book.decide(&id, Decision::Deny, "op").unwrap();
    assert_eq!(
        waiter.await.unwrap(),
        Verdict::Denied {
            approver: "op".to_owned()
        }
    );
}

#[tokio::test]
async fn no_decision_in_time_is_a_timeout_and_a_late_approval_approves_nothing() {
    let book = book(4, 4);
    let ticket = waiting(book.hold(summary("a", "/x"), Duration::from_millis(50)));
    let id = ticket.id().to_owned();
    assert_eq!(ticket.wait().await, Verdict::TimedOut);
    assert!(book.list().0.is_empty());
    assert!(matches!(
        book.decide(&id, Decision::Approve { grant: None }, "op"),
        Err(DecideError::NoSuchApproval(_))
    ));
}

#[tokio::test]
async fn an_agent_that_goes_away_takes_its_entry_out() {
    let book = book(4, 4);
    let mut events = book.subscribe();
    let ticket = waiting(book.hold(summary("a", "/x"), LONG));
    let id = ticket.id().to_owned();
    // The request's future is dropped while it waits, as hyper drops it when the agent leaves.
    let waiter = tokio::spawn(ticket.wait());
    tokio::task::yield_now().await;
    waiter.abort();
    let _ = waiter.await;
    assert!(book.list().0.is_empty());
    assert!(matches!(
        events.recv().await.unwrap(),
        BookEvent::Pending(_)
    ));
    assert_eq!(
        events.recv().await.unwrap(),
        BookEvent::Closed {
            id: id.clone(),
            how: Closed::Withdrawn
        }
    );
    assert!(
        book.decide(&id, Decision::Approve { grant: None }, "op")
            .is_err()
    );
}

#[tokio::test]
async fn bounds_refuse_new_requests_and_never_evict_old_ones() {
    let book = book(3, 2);
    let first = waiting(book.hold(summary("a", "/1"), LONG));
    let _second = waiting(book.hold(summary("a", "/2"), LONG));
    assert_eq!(
        book.hold(summary("a", "/3"), LONG).unwrap_err(),
        HoldError::AgentFull { limit: 2 }
    );
    let _third = waiting(book.hold(summary("b", "/1"), LONG));
    assert_eq!(
        book.hold(summary("c", "/1"), LONG).unwrap_err(),
        HoldError::Full { limit: 3 }
    );
    // The oldest is still there and is decided normally.
    let id = first.id().to_owned();
    let waiter = tokio::spawn(first.wait());
    book.decide(&id, Decision::Approve { grant: None }, "op")
        .unwrap();
    assert!(matches!(waiter.await.unwrap(), Verdict::Approved { .. }));
    // Its place is free again.
    let _fourth = waiting(book.hold(summary("c", "/1"), LONG));
}

#[tokio::test]
async fn a_grant_approves_the_same_call_only_until_it_ends_or_is_revoked() {
    let book = book(8, 8);
    let ticket = waiting(book.hold(summary("a", "/x"), LONG));
    let id = ticket.id().to_owned();
    let waiter = tokio::spawn(ticket.wait());
    let grant = book
        .decide(
            &id,
            Decision::Approve {
                grant: Some(Duration::from_secs(60)),
            },
            "op",
        )
        .unwrap()
        .unwrap();
    assert!(grant.starts_with("gr-"));
    assert_eq!(
        waiter.await.unwrap(),
        Verdict::Approved {
            approver: "op".to_owned(),
            grant: Some(grant.clone())
        }
    );
    // The same call: approved without asking, naming the grant.
    match book.hold(summary("a", "/x"), LONG).unwrap() {
        Held::Granted { grant: g, approver } => {
            assert_eq!(g, grant);
            assert_eq!(approver, "op");
        }
        Held::Waiting(_) => panic!("the grant did not apply"),
    }
    // Another path, another agent: asked.
    let _other_path = waiting(book.hold(summary("a", "/y"), LONG));
    let _other_agent = waiting(book.hold(summary("b", "/x"), LONG));
    assert_eq!(book.list().1.len(), 1);
    assert_eq!(book.list().1[0].used, 1);
    // Revoked: asked again.
    book.revoke(&grant).unwrap();
    let _asked = waiting(book.hold(summary("a", "/x"), LONG));
    assert!(matches!(
        book.revoke(&grant),
        Err(DecideError::NoSuchGrant(_))
    ));
}

#[test]
fn a_grant_ends_when_its_time_is_up() {
    let book = book(8, 8);
    let Held::Waiting(ticket) = book.hold(summary("a", "/x"), LONG).unwrap() else {
        panic!()
    };
    let id = ticket.id().to_owned();
    book.decide(
        &id,
        Decision::Approve {
            grant: Some(Duration::from_millis(1)),
        },
        "op",
    )
    .unwrap();
    drop(ticket);
    std::thread::sleep(Duration::from_millis(20));
    assert!(matches!(
        book.hold(summary("a", "/x"), LONG).unwrap(),
        Held::Waiting(_)
    ));
    assert!(book.list().1.is_empty());
}

#[test]
fn grants_longer_than_eight_hours_or_empty_are_refused() {
    let book = book(8, 8);
    let Held::Waiting(ticket) = book.hold(summary("a", "/x"), LONG).unwrap() else {
        panic!()
    };
    for length in [Duration::ZERO, MAX_GRANT + Duration::from_secs(1)] {
        assert_eq!(
            book.decide(
                ticket.id(),
                Decision::Approve {
                    grant: Some(length)
                },
                "op"
            ),
            Err(DecideError::GrantLength)
        );
    }
    // Still waiting: a refused decision decides nothing.
    assert_eq!(book.list().0.len(), 1);
}

#[tokio::test]
async fn shutting_down_answers_every_waiting_request_and_holds_no_more() {
    let book = book(8, 8);
    let one = tokio::spawn(waiting(book.hold(summary("a", "/1"), LONG)).wait());
    let two = tokio::spawn(waiting(book.hold(summary("b", "/2"), LONG)).wait());
    tokio::task::yield_now().await;
    book.shut_down();
    assert_eq!(one.await.unwrap(), Verdict::ShuttingDown);
    assert_eq!(two.await.unwrap(), Verdict::ShuttingDown);
    assert_eq!(
        book.hold(summary("a", "/3"), LONG).unwrap_err(),
        HoldError::ShuttingDown
    );
}

#[tokio::test]
async fn exactly_one_of_the_operator_and_the_timeout_decides() {
    // Many requests whose deadlines fall at the moment an operator approves each: each ends
    // either approved (and the operator was told so) or timed out (and the operator was told
    // there was nothing to decide), never both.
    let book = book(64, 64);
    let mut waiters = Vec::new();
    for n in 0..50 {
        let ticket = waiting(book.hold(summary("a", &format!("/{n}")), Duration::from_millis(10)));
        let id = ticket.id().to_owned();
        waiters.push((id, tokio::spawn(ticket.wait())));
    }
    tokio::time::sleep(Duration::from_millis(10)).await;
    for (id, waiter) in waiters {
        let decided = book.decide(&id, Decision::Approve { grant: None }, "op");
        let verdict = waiter.await.unwrap();
        match decided {
            Ok(_) => assert!(matches!(verdict, Verdict::Approved { .. }), "{verdict:?}"),
            Err(_) => assert_eq!(verdict, Verdict::TimedOut),
        }
    }
}
