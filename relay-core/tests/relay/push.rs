//! Push (P1-P4) and the push output for offline recipients.

use base64::Engine as _;
use relay_core::{Config, PushTarget};
use serde_json::{Value, json};
use wire::http::paths;

use crate::world::online_and_offline as pair;
use crate::world::{User, World, fast_config, pushes};

fn b64url(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

fn subscription(endpoint: &str) -> Value {
    let mut p256dh = vec![4u8];
    p256dh.extend([9u8; 64]);
    json!({"endpoint": endpoint, "keys": {"p256dh": b64url(&p256dh), "auth": b64url(&[3u8; 16])}})
}

fn subscribe(w: &mut World, u: &User, endpoint: &str) -> relay_core::HttpResponse {
    w.post(
        paths::PUSH_SUBSCRIBE,
        subscription(endpoint),
        Some(&u.token),
    )
}

#[test]
fn an_offline_recipient_with_a_subscription_gets_exactly_one_push_per_burst() {
    let mut w = World::new();
    let (a, b, conv) = pair(&mut w);
    let r = subscribe(&mut w, &b, "https://push.example.net/wpush/abc");
    assert_eq!(r.status, 200, "{:?}", r.body_json());
    let outs = w.msg(&a, &b, &conv, "m1");
    let p = pushes(&outs);
    assert_eq!(p.len(), 1);
    assert_eq!(p[0].0, b.uuid);
    assert!(
        matches!(&p[0].1, PushTarget::WebPush { endpoint, .. } if endpoint == "https://push.example.net/wpush/abc")
    );
    assert_eq!(p[0].2, json!({"type": "new_msg"}));
    assert_eq!(
        serde_json::to_string(&p[0].2).unwrap(),
        r#"{"type":"new_msg"}"#
    );
    // The push follows the ack (released after the commit).
    let ack_at = outs
        .iter()
        .position(|o| matches!(o, relay_core::Output::Send { .. }));
    let push_at = outs
        .iter()
        .position(|o| matches!(o, relay_core::Output::Push { .. }));
    assert!(ack_at < push_at);
    // A burst makes one push.
    for i in 2..=5 {
        assert!(pushes(&w.msg(&a, &b, &conv, &format!("m{i}"))).is_empty());
    }
    // A duplicate (resend) never pushes.
    w.advance(30_000);
    assert!(pushes(&w.msg(&a, &b, &conv, "m1")).is_empty());
    // After the interval, the next message pushes again.
    assert_eq!(pushes(&w.msg(&a, &b, &conv, "m6")).len(), 1);
    // The secret parts never show in Debug.
    let dbg = format!("{:?}", p[0].1);
    assert!(!dbg.contains("example") && !dbg.contains("CQkJ"), "{dbg}");
}

#[test]
fn no_push_when_online_or_without_a_target() {
    let mut w = World::new();
    let (a, mut b, conv) = pair(&mut w);
    // Offline without any target.
    assert!(pushes(&w.msg(&a, &b, &conv, "m1")).is_empty());
    // Online (connected, even before sync) with a target.
    assert_eq!(
        subscribe(&mut w, &b, "https://push.example.net/x").status,
        200
    );
    let cb = w.connect(&mut b);
    assert!(pushes(&w.msg(&a, &b, &conv, "m2")).is_empty());
    w.sync(cb);
    assert!(pushes(&w.msg(&a, &b, &conv, "m3")).is_empty());
    // Offline again: pushed.
    w.relay.handle_disconnect(w.now, cb);
    assert_eq!(pushes(&w.msg(&a, &b, &conv, "m4")).len(), 1);
    // Refused messages never push.
    w.advance(30_000);
    let outs = w.send(
        a.conn.unwrap(),
        json!({"type":"msg","id":"x1","to":a.alias,"conv_id":conv,"crypto_v":1,"payload":"cA=="}),
    );
    assert!(pushes(&outs).is_empty());
    assert!(pushes(&w.log).len() == 1);
}

#[test]
fn native_tokens_dedup_and_disable() {
    let mut w = World::new();
    let (a, b, conv) = pair(&mut w);
    let t = Some(b.token.as_str());
    let android = json!({"token": "fcm-token-1", "platform": "android"});
    // Retries (0 s / 5 s / 30 s / 300 s) store one target.
    for _ in 0..3 {
        assert_eq!(w.post(paths::PUSH_REGISTER, android.clone(), t).status, 200);
    }
    let ios = json!({"device_token": "abcdef0123", "platform": "ios"});
    assert_eq!(w.post(paths::PUSH_REGISTER, ios, t).status, 200);
    let p = pushes(&w.msg(&a, &b, &conv, "m1"));
    assert_eq!(p.len(), 2);
    assert!(p.iter().any(|(_, t, _)| *t
        == PushTarget::Fcm {
            token: "fcm-token-1".into()
        }));
    assert!(p.iter().any(|(_, t, _)| *t
        == PushTarget::Apns {
            token: "abcdef0123".into()
        }));
    // Neither token: 400; bad token: 400; no JWT: 401.
    let r = w.post(paths::PUSH_REGISTER, json!({"platform": "android"}), t);
    assert_eq!(
        (r.status, r.error_code().unwrap().as_str()),
        (400, "INVALID_FIELD")
    );
    let r = w.post(
        paths::PUSH_REGISTER,
        json!({"token": " ", "platform": "android"}),
        t,
    );
    assert_eq!(r.status, 400);
    assert_eq!(
        w.post(
            paths::PUSH_REGISTER,
            json!({"token": "x", "platform": "android"}),
            None
        )
        .status,
        401
    );
    // Disable (any body, or none) forgets everything; idempotent.
    assert_eq!(w.post(paths::PUSH_DISABLE, json!({}), t).status, 200);
    let r = w.raw(relay_core::Method::Post, paths::PUSH_DISABLE, Vec::new(), t);
    assert_eq!(r.status, 200);
    w.advance(30_000);
    assert!(pushes(&w.msg(&a, &b, &conv, "m2")).is_empty());
}

#[test]
fn targets_are_bounded_per_user_and_endpoints_deduplicated() {
    let mut w = World::new();
    let (a, b, conv) = pair(&mut w);
    for i in 0..6 {
        assert_eq!(
            subscribe(&mut w, &b, &format!("https://push.example.net/{i}")).status,
            200
        );
    }
    // Same endpoint with new keys replaces, not adds.
    assert_eq!(
        subscribe(&mut w, &b, "https://push.example.net/5").status,
        200
    );
    let p = pushes(&w.msg(&a, &b, &conv, "m1"));
    assert_eq!(p.len(), relay_core::limits::MAX_PUSH_TARGETS_PER_USER);
    assert!(!p.iter().any(
        |(_, t, _)| matches!(t, PushTarget::WebPush { endpoint, .. } if endpoint.ends_with("/0"))
    ));
}

#[test]
fn subscriptions_are_validated() {
    let mut w = World::new();
    let u = w.user("alice");
    let t = Some(u.token.as_str());
    let r = w.post(
        paths::PUSH_SUBSCRIBE,
        subscription("http://push.example.net/x"),
        t,
    );
    assert_eq!(
        (r.status, r.error_code().unwrap().as_str()),
        (400, "PUSH_ENDPOINT_FORBIDDEN"),
        "http:// outside test mode"
    );
    for bad in ["https://", "push.example.net", "https://a b", "https://@x/"] {
        let r = w.post(paths::PUSH_SUBSCRIBE, subscription(bad), t);
        assert_eq!(
            (r.status, r.error_code().unwrap().as_str()),
            (400, "INVALID_FIELD"),
            "{bad}"
        );
    }
    let long = format!("https://push.example.net/{}", "a".repeat(3000));
    assert_eq!(
        w.post(paths::PUSH_SUBSCRIBE, subscription(&long), t).status,
        400
    );
    let bad_keys = json!({"endpoint": "https://p.example/x", "keys": {"p256dh": "AAAA", "auth": b64url(&[3u8; 16])}});
    assert_eq!(w.post(paths::PUSH_SUBSCRIBE, bad_keys, t).status, 400);
    let bad_auth = json!({"endpoint": "https://p.example/x", "keys": {"p256dh": b64url(&[4u8; 65]), "auth": "!!"}});
    assert_eq!(w.post(paths::PUSH_SUBSCRIBE, bad_auth, t).status, 400);
    let no_keys = json!({"endpoint": "https://p.example/x"});
    assert_eq!(w.post(paths::PUSH_SUBSCRIBE, no_keys, t).status, 400);
    assert_eq!(
        w.post(
            paths::PUSH_SUBSCRIBE,
            subscription("https://p.example/x"),
            None
        )
        .status,
        401
    );
}

#[test]
fn targets_survive_a_restart() {
    let mut w = World::new();
    let (mut a, b, conv) = pair(&mut w);
    assert_eq!(
        subscribe(&mut w, &b, "https://push.example.net/r").status,
        200
    );
    w.restart(Box::new(w.mem.clone()));
    let ca = w.connect(&mut a);
    w.sync(ca);
    assert_eq!(pushes(&w.msg(&a, &b, &conv, "m1")).len(), 1);
}

#[test]
fn vapid_key_placeholder_or_configured() {
    let mut w = World::new();
    let u = w.user("alice");
    let r = w.get(paths::PUSH_VAPID_KEY, Some(&u.token));
    assert_eq!(r.status, 200);
    assert_eq!(
        r.body_json()["vapid_public_key"],
        relay_core::push::VAPID_KEY_PLACEHOLDER
    );
    assert_eq!(w.get(paths::PUSH_VAPID_KEY, None).status, 401);
    let key = b64url(&[4u8; 65]);
    let mut w = World::with_config(Config {
        vapid_public_key: Some(key.clone()),
        ..fast_config()
    });
    let u = w.user("alice");
    let r = w.get(paths::PUSH_VAPID_KEY, Some(&u.token));
    assert_eq!(r.body_json(), json!({"vapid_public_key": key}));
}
