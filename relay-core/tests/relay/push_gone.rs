//! `Relay::handle_push_gone`: a target the push service reported gone is deleted durably,
//! idempotently and exactly; and test mode's `http://` endpoints.

use base64::Engine as _;
use relay_core::{Config, PushTarget};
use serde_json::{Value, json};
use wire::UserUuid;
use wire::http::paths;

use crate::world::{User, World, fast_config, pushes};

fn b64url(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

pub(crate) fn keys(fill: u8) -> (String, String) {
    let mut p256dh = vec![4u8];
    p256dh.extend([fill; 64]);
    (b64url(&p256dh), b64url(&[fill; 16]))
}

fn subscribe(w: &mut World, u: &User, endpoint: &str, fill: u8) -> u16 {
    let (p256dh, auth) = keys(fill);
    let body = json!({"endpoint": endpoint, "keys": {"p256dh": p256dh, "auth": auth}});
    w.post(paths::PUSH_SUBSCRIBE, body, Some(&u.token)).status
}

pub(crate) fn web(endpoint: &str, fill: u8) -> PushTarget {
    let (p256dh, auth) = keys(fill);
    PushTarget::WebPush {
        endpoint: endpoint.to_owned(),
        p256dh,
        auth,
    }
}

fn uuid(u: &User) -> UserUuid {
    u.uuid.parse().unwrap()
}

/// alice connected, bob offline, contacts; bob has a web subscription and an FCM token.
fn setup(w: &mut World) -> (User, User, String) {
    let mut a = w.user("alice");
    let b = w.user("bob");
    let conv = w.befriend(&a, &b);
    let ca = w.connect(&mut a);
    w.sync(ca);
    assert_eq!(subscribe(w, &b, "https://push.example/w/1", 7), 200);
    let r = w.post(
        paths::PUSH_REGISTER,
        json!({"token": "fcm-1", "platform": "android"}),
        Some(&b.token),
    );
    assert_eq!(r.status, 200);
    (a, b, conv)
}

fn targets_pushed(w: &mut World, a: &User, b: &User, conv: &str, id: &str) -> Vec<PushTarget> {
    w.advance(30_000); // past the per-recipient push interval
    pushes(&w.msg(a, b, conv, id))
        .into_iter()
        .map(|(_, t, _)| t)
        .collect()
}

#[test]
fn a_gone_target_is_deleted_durably_and_the_others_stay() {
    let mut w = World::new();
    let (a, b, conv) = setup(&mut w);
    assert_eq!(targets_pushed(&mut w, &a, &b, &conv, "m1").len(), 2);

    let commits = w.mem.commit_count();
    let now = w.now;
    w.relay
        .handle_push_gone(now, &uuid(&b), &web("https://push.example/w/1", 7));
    assert!(w.drain().is_empty());
    assert_eq!(
        w.mem.commit_count(),
        commits + 1,
        "the deletion is committed"
    );
    assert_eq!(
        targets_pushed(&mut w, &a, &b, &conv, "m2"),
        vec![PushTarget::Fcm {
            token: "fcm-1".into()
        }]
    );

    // Survives a restart: the deletion was committed, not just applied in memory.
    w.restart(Box::new(w.mem.clone()));
    let mut a = a;
    let ca = w.connect(&mut a);
    w.sync(ca);
    assert_eq!(
        targets_pushed(&mut w, &a, &b, &conv, "m3"),
        vec![PushTarget::Fcm {
            token: "fcm-1".into()
        }]
    );

    // The last target gone: no target, no push, and the row is deleted.
    let now = w.now;
    w.relay.handle_push_gone(
        now,
        &uuid(&b),
        &PushTarget::Fcm {
            token: "fcm-1".into(),
        },
    );
    assert!(targets_pushed(&mut w, &a, &b, &conv, "m4").is_empty());
}

#[test]
fn idempotent_exact_and_unknown_reports_change_nothing() {
    let mut w = World::new();
    let (a, b, conv) = setup(&mut w);
    let now = w.now;
    let gone = web("https://push.example/w/1", 7);
    w.relay.handle_push_gone(now, &uuid(&b), &gone);
    let commits = w.mem.commit_count();
    // The same report again, an unknown account, an unknown target: nothing to write.
    w.relay.handle_push_gone(now, &uuid(&b), &gone);
    w.relay.handle_push_gone(now, &uuid(&a), &gone);
    w.relay.handle_push_gone(
        now,
        &uuid(&b),
        &PushTarget::Apns {
            token: "00ff".into(),
        },
    );
    assert_eq!(w.mem.commit_count(), commits);

    // bob subscribes again at the same endpoint with new keys; a late report about the old
    // keys must not delete the new subscription.
    assert_eq!(subscribe(&mut w, &b, "https://push.example/w/1", 8), 200);
    let now = w.now;
    w.relay.handle_push_gone(now, &uuid(&b), &gone);
    let pushed = targets_pushed(&mut w, &a, &b, &conv, "m1");
    assert!(
        pushed.contains(&web("https://push.example/w/1", 8)),
        "{pushed:?}"
    );
}

#[test]
fn a_failed_store_refuses_the_input() {
    let mut w = World::new();
    let (a, b, conv) = setup(&mut w);
    w.mem.fail_commits(1);
    let now = w.now;
    w.relay
        .handle_push_gone(now, &uuid(&b), &web("https://push.example/w/1", 7));
    assert!(w.relay.is_failed(), "a failed commit stops the relay");
    // Rebuilt from the store, the target is still there (nothing was committed).
    w.restart(Box::new(w.mem.clone()));
    let mut a = a;
    let ca = w.connect(&mut a);
    w.sync(ca);
    assert_eq!(targets_pushed(&mut w, &a, &b, &conv, "m1").len(), 2);
}

#[test]
fn http_endpoints_only_when_the_config_allows_them() {
    let mut w = World::new();
    let u = w.user("carol");
    assert_eq!(subscribe(&mut w, &u, "http://127.0.0.1:9000/w/1", 7), 400);

    let mut w = World::with_config(Config {
        push_destinations: relay_core::destination::PushDestinations::permissive(),
        ..fast_config()
    });
    let u = w.user("carol");
    assert_eq!(subscribe(&mut w, &u, "http://127.0.0.1:9000/w/1", 7), 200);
    assert_eq!(subscribe(&mut w, &u, "https://push.example/w/2", 7), 200);
    for bad in ["ftp://x/y", "http://", "http:///x"] {
        assert_eq!(subscribe(&mut w, &u, bad, 7), 400, "{bad}");
    }
    let v: Value = w.get(paths::PUSH_VAPID_KEY, Some(&u.token)).body_json();
    assert_eq!(
        v["vapid_public_key"],
        relay_core::push::VAPID_KEY_PLACEHOLDER
    );
}
