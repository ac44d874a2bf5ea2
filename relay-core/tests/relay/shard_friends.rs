//! Friendships across two shards: a friend request, accept or reject of a user whose shard does
//! not own the pair is forwarded to the pair's owner (the lower member's shard), which decides
//! it, writes the friendship and its own member's row, and sends the other member's row to that
//! member's shard; the caller reads what it wrote, a lost answer is a 503 and nothing else, and
//! rows that arrive out of order never undo a later change.

use relay_core::handoff::{Crossing, FORWARD_TIMEOUT_MS};
use relay_core::store::Table;
use relay_core::{HttpRequest, HttpResponse, Method, Output};
use serde_json::{Value, json};
use wire::ServerFrame;
use wire::http::paths;

use crate::shards::{Fate, Two, across, answer_to};
use crate::world::{User, World, fast_config, frames, msgs};

/// `a` (whose shard owns the pair: the lower member) and `b` on two shards, registered and
/// not yet friends, each connected and synced to its shard.
fn strangers() -> (Two, User, User) {
    let mut setup = World::with_config(fast_config());
    let (mut a, mut b) = across(&mut setup);
    let mut two = Two::split(setup);
    for u in [&mut a, &mut b] {
        let i = two.of(u);
        let c = two.shards[i].connect(u);
        two.shards[i].sync(c);
    }
    (two, a, b)
}

fn ask_req(from: &User, to: &User) -> HttpRequest {
    HttpRequest::new(Method::Post, paths::FRIEND_REQUEST)
        .json(&json!({"to_alias_id": to.alias}))
        .bearer(&from.token)
}

fn accept_req(who: &User, id: u64) -> HttpRequest {
    HttpRequest::new(Method::Put, paths::with(paths::FRIEND_ACCEPT, id)).bearer(&who.token)
}

fn reject_req(who: &User, id: u64) -> HttpRequest {
    HttpRequest::new(Method::Post, paths::with(paths::FRIEND_REJECT, id))
        .json(&json!({}))
        .bearer(&who.token)
}

/// `u`'s request, everything delivered: its answer and the other outputs.
fn run(two: &mut Two, u: &User, req: HttpRequest) -> (HttpResponse, Vec<Output>) {
    let (answer, outs) = two.request(u, req, |_, _| Fate::Deliver);
    (answer.expect("answered"), outs)
}

/// `u`'s friends list at its shard.
fn friends(two: &mut Two, u: &User) -> Vec<Value> {
    let i = two.of(u);
    let r = two.shards[i].get(paths::FRIENDS, Some(&u.token));
    assert_eq!(r.status, 200, "{:?}", r.body_json());
    r.body_json().as_array().unwrap().clone()
}

fn friend_frames(outs: &[Output], u: &User) -> Vec<ServerFrame> {
    frames(outs, u.conn.unwrap())
        .into_iter()
        .filter(|f| {
            matches!(
                f,
                ServerFrame::FriendRequest(_) | ServerFrame::FriendAccepted(_)
            )
        })
        .collect()
}

#[test]
fn a_request_of_the_other_member_is_decided_at_the_owner_and_both_lists_agree() {
    let (mut two, a, b) = strangers();
    // `b`'s shard does not own the pair: its request is forwarded.
    let (r, outs) = run(&mut two, &b, ask_req(&b, &a));
    assert_eq!(r.status, 200, "{:?}", r.body_json());
    let id = r.body_json()["friendship_id"].as_u64().unwrap();
    let ib = two.of(&b);
    let ia = two.of(&a);
    assert_eq!(two.shards[ib].relay.stats().requests_forwarded, 1);
    // `a`, connected at the owner, is told at once.
    let got = friend_frames(&outs, &a);
    assert!(
        matches!(&got[..], [ServerFrame::FriendRequest(f)] if f.friendship_id.get() == id && f.from.as_str() == b.alias),
        "{got:?}"
    );
    // The caller reads what it wrote, and so does the other member.
    let mine = friends(&mut two, &b);
    assert_eq!(mine.len(), 1);
    assert_eq!(mine[0]["friendship_id"], id);
    assert_eq!(mine[0]["direction"], "sent");
    assert_eq!(mine[0]["status"], "pending");
    let theirs = friends(&mut two, &a);
    assert_eq!(theirs[0]["direction"], "received");
    // One record, one row per member, and the notice taken.
    assert_eq!(two.rows(Table::Friendships), 1);
    assert_eq!(two.rows(Table::Contacts), 2);
    assert_eq!(two.rows(Table::Notices), 0);
    // A second request either way is refused by the one owner.
    let (r, _) = run(&mut two, &a, ask_req(&a, &b));
    assert_eq!(r.status, 409, "{:?}", r.body_json());
    let (r, _) = run(&mut two, &b, ask_req(&b, &a));
    assert_eq!(r.status, 409, "{:?}", r.body_json());
    assert_eq!(two.shards[ia].relay.stats().requests_forwarded, 0);

    // `a` accepts at its own shard; `b` hears of it through the notice.
    let (r, outs) = run(&mut two, &a, accept_req(&a, id));
    assert_eq!(r.status, 200, "{:?}", r.body_json());
    let conv = r.body_json()["conversation_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let got = friend_frames(&outs, &b);
    assert!(
        matches!(&got[..], [ServerFrame::FriendAccepted(f)] if f.conversation_id.as_str() == conv && f.from.as_str() == a.alias),
        "{got:?}"
    );
    let mine = friends(&mut two, &b);
    assert_eq!(mine[0]["status"], "accepted");
    assert_eq!(mine[0]["conversation_id"], conv.as_str());
    // The conversation works both ways across the shards.
    let outs = two.shards[ib].msg(&b, &a, &conv, "m1");
    two.wire
        .extend(outs.into_iter().filter(|o| matches!(o, Output::Cross(_))));
    let outs = two.carry(|_, _| Fate::Deliver);
    assert_eq!(msgs(&frames(&outs, a.conn.unwrap())).len(), 1);
}

#[test]
fn an_accept_of_the_other_member_is_forwarded_and_answered_with_the_conversation() {
    let (mut two, a, b) = strangers();
    // `a` asks at its own shard (the owner): `b`'s row goes by notice, with the frame.
    let (r, outs) = run(&mut two, &a, ask_req(&a, &b));
    assert_eq!(r.status, 200, "{:?}", r.body_json());
    let id = r.body_json()["friendship_id"].as_u64().unwrap();
    assert_eq!(friend_frames(&outs, &b).len(), 1);
    assert_eq!(friends(&mut two, &b)[0]["direction"], "received");
    // `b` accepts: forwarded; `a` is told at once, `b` reads the conversation it got.
    let (r, outs) = run(&mut two, &b, accept_req(&b, id));
    assert_eq!(r.status, 200, "{:?}", r.body_json());
    let conv = r.body_json()["conversation_id"].clone();
    let got = friend_frames(&outs, &a);
    assert!(
        matches!(&got[..], [ServerFrame::FriendAccepted(_)]),
        "{got:?}"
    );
    assert_eq!(friends(&mut two, &b)[0]["conversation_id"], conv);
    assert_eq!(friends(&mut two, &a)[0]["conversation_id"], conv);
    // Accepting again is answered with the same conversation.
    let (r, _) = run(&mut two, &b, accept_req(&b, id));
    assert_eq!(r.body_json()["conversation_id"], conv);
    // Only the addressee accepts, wherever the requester's shard is.
    let (r, _) = run(&mut two, &a, accept_req(&a, id));
    assert_eq!(r.status, 200, "accepted already: the same answer");
    assert_eq!(two.rows(Table::Conversations), 1);
}

#[test]
fn a_reject_is_forwarded_and_the_pair_may_ask_again() {
    let (mut two, a, b) = strangers();
    let (r, _) = run(&mut two, &a, ask_req(&a, &b));
    let id = r.body_json()["friendship_id"].as_u64().unwrap();
    // The requester may not accept or reject its own request.
    let (r, _) = run(&mut two, &a, accept_req(&a, id));
    assert_eq!(r.status, 403, "{:?}", r.body_json());
    let (r, _) = run(&mut two, &b, reject_req(&b, id));
    assert_eq!(r.status, 200, "{:?}", r.body_json());
    assert_eq!(friends(&mut two, &b)[0]["status"], "rejected");
    assert_eq!(friends(&mut two, &a)[0]["status"], "rejected");
    // After a rejection either side may ask again: the same friendship, pending.
    let (r, _) = run(&mut two, &b, ask_req(&b, &a));
    assert_eq!(r.status, 200, "{:?}", r.body_json());
    assert_eq!(r.body_json()["friendship_id"], id);
    assert_eq!(friends(&mut two, &a)[0]["status"], "pending");
    assert_eq!(friends(&mut two, &a)[0]["direction"], "received");
    assert_eq!(friends(&mut two, &b)[0]["status"], "pending");
    assert_eq!(friends(&mut two, &b)[0]["direction"], "sent");
    assert_eq!(two.rows(Table::Friendships), 1);
}

#[test]
fn a_lost_answer_is_a_503_after_the_timeout_and_the_friendship_still_arrives() {
    let (mut two, a, b) = strangers();
    let (answer, _) = two.request(&b, ask_req(&b, &a), |_, o| match o {
        Output::Cross(Crossing::Answered(_)) => Fate::Lose,
        _ => Fate::Deliver,
    });
    assert!(answer.is_none(), "the answer was lost");
    // The owner wrote it: its notice brings `b`'s row, and the request times out.
    assert_eq!(friends(&mut two, &b).len(), 1);
    let ib = two.of(&b);
    let w = &mut two.shards[ib];
    w.now = w.now.plus_ms(FORWARD_TIMEOUT_MS);
    w.relay.handle_timeout(w.now);
    let outs = w.drain();
    let r = answer_to(&outs, relay_core::RequestId(1)).expect("answered when it timed out");
    assert_eq!(r.status, 503);
    assert_eq!(r.error_code().as_deref(), Some("STORAGE_UNAVAILABLE"));
    assert_eq!(w.relay.stats().forwards_timed_out, 1);
    // Asking again finds it.
    let (r, _) = run(&mut two, &b, ask_req(&b, &a));
    assert_eq!(r.status, 409, "{:?}", r.body_json());
}

#[test]
fn a_lost_forward_is_a_503_and_writes_nothing() {
    let (mut two, a, b) = strangers();
    let (answer, _) = two.request(&b, ask_req(&b, &a), |_, o| match o {
        Output::Cross(Crossing::Forward(_)) => Fate::Lose,
        _ => Fate::Deliver,
    });
    assert!(answer.is_none());
    two.advance(FORWARD_TIMEOUT_MS);
    assert_eq!(two.rows(Table::Friendships), 0);
    assert!(friends(&mut two, &a).is_empty());
    let (r, _) = run(&mut two, &b, ask_req(&b, &a));
    assert_eq!(r.status, 200, "asked again, decided once");
}

#[test]
fn an_older_row_arriving_late_never_undoes_a_newer_one() {
    let (mut two, a, b) = strangers();
    // `a` asks; the notice with `b`'s pending row is held back here.
    let mut held = Vec::new();
    let (r, _) = two.request(&a, ask_req(&a, &b), |_, o| match o {
        Output::Cross(Crossing::Notice(_)) => {
            held.push(o.clone());
            Fate::Lose
        }
        _ => Fate::Deliver,
    });
    let id = r.unwrap().body_json()["friendship_id"].as_u64().unwrap();
    assert_eq!(held.len(), 1);
    // It comes again: `b` accepts, forwarded; the accepted row reaches `b`'s shard.
    two.advance(relay_core::handoff::RESEND_MS);
    two.carry(|_, _| Fate::Deliver);
    let (r, _) = run(&mut two, &b, accept_req(&b, id));
    assert_eq!(r.status, 200);
    assert_eq!(friends(&mut two, &b)[0]["status"], "accepted");
    // The first copy of the pending row arrives last: it changes nothing.
    two.wire.extend(held);
    two.carry(|_, _| Fate::Deliver);
    assert_eq!(friends(&mut two, &b)[0]["status"], "accepted");
}

#[test]
fn a_request_that_cannot_wait_for_its_answer_is_a_503() {
    let (mut two, a, b) = strangers();
    let ib = two.of(&b);
    // `handle_http` answers at once: a forward cannot be waited for there.
    let w = &mut two.shards[ib];
    let r = w.relay.handle_http(w.now, &ask_req(&b, &a));
    assert_eq!(r.status, 503);
    assert_eq!(r.error_code().as_deref(), Some("STORAGE_UNAVAILABLE"));
    assert!(w.drain().iter().all(|o| !matches!(o, Output::Cross(_))));
    assert_eq!(two.rows(Table::Friendships), 0);
}

#[test]
fn the_answer_carries_the_callers_row_when_the_notice_is_late() {
    let (mut two, a, b) = strangers();
    let (r, _) = two.request(&b, ask_req(&b, &a), |_, o| match o {
        Output::Cross(Crossing::Notice(_)) => Fate::Lose,
        _ => Fate::Deliver,
    });
    assert_eq!(r.unwrap().status, 200);
    // The caller reads what it wrote before the notice comes.
    assert_eq!(friends(&mut two, &b).len(), 1);
    // The notice, sent again, is taken and its row goes.
    assert_eq!(two.rows(Table::Notices), 1);
    two.advance(relay_core::handoff::RESEND_MS);
    two.carry(|_, _| Fate::Deliver);
    assert_eq!(two.rows(Table::Notices), 0);
    assert_eq!(friends(&mut two, &b).len(), 1);
}

/// The addressee accepts before its shard holds the friendship (the notice that brings its
/// copy has not come): its shard asks the shard that gave the id, the pair's owner, which
/// decides from the friendship's record. An id no friendship has is still not found there.
#[test]
fn an_accept_that_overtakes_its_friendships_notice_is_decided_by_the_owner() {
    let (mut two, a, b) = strangers();
    let (answer, _) = two.request(&a, ask_req(&a, &b), |_, o| match o {
        Output::Cross(Crossing::Notice(_)) => Fate::Lose,
        _ => Fate::Deliver,
    });
    let r = answer.expect("answered");
    assert_eq!(r.status, 200, "{:?}", r.body_json());
    let id = r.body_json()["friendship_id"].as_u64().unwrap();
    assert!(friends(&mut two, &b).is_empty(), "the notice has not come");
    let ib = two.of(&b);
    let (r, _) = run(&mut two, &b, accept_req(&b, id + 2));
    assert_eq!(r.status, 404, "{:?}", r.body_json());
    assert_eq!(r.body_json()["error"], "FRIENDSHIP_NOT_FOUND");
    let (r, _) = run(&mut two, &b, accept_req(&b, id));
    assert_eq!(r.status, 200, "{:?}", r.body_json());
    assert!(r.body_json()["conversation_id"].is_string());
    assert_eq!(two.shards[ib].relay.stats().requests_forwarded, 2);
    let mine = friends(&mut two, &b);
    assert_eq!(mine.len(), 1);
    assert_eq!(mine[0]["status"], "accepted");
    // The lost notice comes again, late: it does not undo the accept.
    two.advance(relay_core::handoff::RESEND_MS);
    two.carry(|_, _| Fate::Deliver);
    assert_eq!(friends(&mut two, &b)[0]["status"], "accepted");
    assert_eq!(friends(&mut two, &a)[0]["status"], "accepted");
    assert_eq!(two.rows(Table::Notices), 0);
}
