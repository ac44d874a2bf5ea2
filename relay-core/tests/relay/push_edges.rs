//! Push at its edges: which target a new subscription replaces, the endpoint and token bounds
//! byte for byte, `platform: ios`, a stored row over the cap, the push interval to the
//! millisecond (with and without a timer tick), and what `Debug` shows.

use relay_core::PushTarget;
use relay_core::limits::{
    MAX_PUSH_ENDPOINT_BYTES, MAX_PUSH_TARGETS_PER_USER, MAX_PUSH_TOKEN_BYTES,
};
use relay_core::store::{Mutation, Store as _, Table};
use serde_json::{Value, json};
use wire::http::paths;

use crate::push_gone::{keys, web};
use crate::world::online_and_offline as pair;
use crate::world::{User, World, pushes};

fn fcm(token: &str) -> PushTarget {
    PushTarget::Fcm {
        token: token.to_owned(),
    }
}

fn apns(token: &str) -> PushTarget {
    PushTarget::Apns {
        token: token.to_owned(),
    }
}

fn subscribe(w: &mut World, u: &User, endpoint: &str, fill: u8) -> relay_core::HttpResponse {
    let (p256dh, auth) = keys(fill);
    let body = json!({"endpoint": endpoint, "keys": {"p256dh": p256dh, "auth": auth}});
    w.post(paths::PUSH_SUBSCRIBE, body, Some(&u.token))
}

fn register(w: &mut World, u: &User, body: Value) -> relay_core::HttpResponse {
    w.post(paths::PUSH_REGISTER, body, Some(&u.token))
}

fn status_code(r: &relay_core::HttpResponse) -> (u16, String) {
    (r.status, r.error_code().unwrap_or_default())
}

/// The targets a message from `a` to offline `b` is pushed to, sorted; past the push interval
/// (a timer tick 30 s later) so every call pushes if `b` has targets.
fn targets(w: &mut World, a: &User, b: &User, conv: &str, id: &str) -> Vec<PushTarget> {
    w.advance(30_000);
    let mut t: Vec<PushTarget> = pushes(&w.msg(a, b, conv, id))
        .into_iter()
        .map(|(_, t, _)| t)
        .collect();
    t.sort();
    t
}

#[test]
fn a_new_subscription_to_the_same_endpoint_replaces_its_keys_and_distinct_tokens_add_up() {
    let mut w = World::new();
    let (a, b, conv) = pair(&mut w);
    assert_eq!(
        subscribe(&mut w, &b, "https://push.example/w/1", 7).status,
        200
    );
    assert_eq!(
        subscribe(&mut w, &b, "https://push.example/w/1", 8).status,
        200
    );
    // The browser's new keys replace the old subscription: one target, the new keys.
    assert_eq!(
        targets(&mut w, &a, &b, &conv, "m1"),
        vec![web("https://push.example/w/1", 8)]
    );
    // Two different FCM tokens and two different APNs tokens are four destinations.
    for body in [
        json!({"token": "fcm-a", "platform": "android"}),
        json!({"token": "fcm-b", "platform": "android"}),
        json!({"device_token": "apns-a", "platform": "ios"}),
        json!({"device_token": "apns-b", "platform": "ios"}),
    ] {
        assert_eq!(register(&mut w, &b, body).status, 200);
    }
    let mut expected = vec![fcm("fcm-a"), fcm("fcm-b"), apns("apns-a"), apns("apns-b")];
    expected.sort();
    assert_eq!(targets(&mut w, &a, &b, &conv, "m2"), expected);
}

#[test]
fn ios_with_a_plain_token_is_an_apns_target_in_any_case() {
    let mut w = World::new();
    let (a, b, conv) = pair(&mut w);
    for (token, platform) in [("tok-ios", "iOS"), ("tok-android", "android")] {
        let r = register(&mut w, &b, json!({"token": token, "platform": platform}));
        assert_eq!(r.status, 200);
    }
    let mut expected = vec![apns("tok-ios"), fcm("tok-android")];
    expected.sort();
    assert_eq!(targets(&mut w, &a, &b, &conv, "m1"), expected);
}

#[test]
fn an_endpoint_of_exactly_the_limit_is_accepted_and_one_byte_more_is_not() {
    let mut w = World::new();
    let (a, b, conv) = pair(&mut w);
    let head = "https://push.example/w/";
    let exact = format!("{head}{}", "e".repeat(MAX_PUSH_ENDPOINT_BYTES - head.len()));
    assert_eq!(exact.len(), MAX_PUSH_ENDPOINT_BYTES);
    let over = format!("{exact}f");
    let r = subscribe(&mut w, &b, &over, 7);
    assert_eq!(status_code(&r), (400, "INVALID_FIELD".to_owned()));
    let r = subscribe(&mut w, &b, &exact, 7);
    assert_eq!(r.status, 200, "{:?}", r.body_json());
    assert_eq!(targets(&mut w, &a, &b, &conv, "m1"), vec![web(&exact, 7)]);
}

#[test]
fn an_endpoint_path_with_a_space_a_quote_a_backslash_or_a_control_byte_is_refused() {
    let mut w = World::new();
    let (a, b, conv) = pair(&mut w);
    // The host is fine in each: only the byte check of the whole endpoint refuses them.
    for bad in [
        "https://push.example/w/a b",
        "https://push.example/w/a\"b",
        "https://push.example/w/a\\b",
        "https://push.example/w/a\tb",
        "https://push.example/w/a\u{7f}b",
    ] {
        let r = subscribe(&mut w, &b, bad, 7);
        assert_eq!(
            status_code(&r),
            (400, "INVALID_FIELD".to_owned()),
            "{bad:?}"
        );
    }
    assert!(targets(&mut w, &a, &b, &conv, "m1").is_empty());
    // Every other printable byte is allowed in a path.
    let fine = "https://push.example/w/a~b!c$d'e(f)g*h+i,j;k=l:m@n%20o";
    assert_eq!(subscribe(&mut w, &b, fine, 7).status, 200);
    assert_eq!(targets(&mut w, &a, &b, &conv, "m2"), vec![web(fine, 7)]);
}

#[test]
fn a_token_of_exactly_the_limit_is_accepted_and_inner_blanks_are_not() {
    let mut w = World::new();
    let (a, b, conv) = pair(&mut w);
    let exact = "t".repeat(MAX_PUSH_TOKEN_BYTES);
    let over = "t".repeat(MAX_PUSH_TOKEN_BYTES + 1);
    for bad in [
        over.as_str(),
        "fcm token",
        "fcm\ttoken",
        "fcm\u{1}token",
        "",
    ] {
        let r = register(&mut w, &b, json!({"token": bad, "platform": "android"}));
        assert_eq!(
            status_code(&r),
            (400, "INVALID_FIELD".to_owned()),
            "{} bytes",
            bad.len()
        );
        let r = register(&mut w, &b, json!({"device_token": bad, "platform": "ios"}));
        assert_eq!(status_code(&r), (400, "INVALID_FIELD".to_owned()));
    }
    assert!(targets(&mut w, &a, &b, &conv, "m1").is_empty());
    // Surrounding blanks are trimmed; what is left is stored as is.
    let r = register(&mut w, &b, json!({"token": exact, "platform": "android"}));
    assert_eq!(r.status, 200);
    let r = register(
        &mut w,
        &b,
        json!({"token": "  padded\t", "platform": "android"}),
    );
    assert_eq!(r.status, 200);
    let mut expected = vec![fcm(&exact), fcm("padded")];
    expected.sort();
    assert_eq!(targets(&mut w, &a, &b, &conv, "m2"), expected);
}

#[test]
fn a_stored_row_over_the_cap_is_trimmed_to_the_newest_at_the_next_subscription() {
    let mut w = World::new();
    let (a, b, conv) = pair(&mut w);
    assert_eq!(
        register(&mut w, &b, json!({"token": "t0", "platform": "android"})).status,
        200
    );
    // A row written with a higher cap (an older relay): seven targets.
    let snapshot = w.mem.clone().load().unwrap();
    let (key, raw) = snapshot[&Table::PushTargets].iter().next().unwrap();
    let mut row: Value = serde_json::from_slice(raw).unwrap();
    let seven: Vec<PushTarget> = (1..=7).map(|i| fcm(&format!("t{i}"))).collect();
    row["targets"] = serde_json::to_value(&seven).unwrap();
    w.mem
        .clone()
        .commit(
            &vec![Mutation::Put {
                table: Table::PushTargets,
                key: key.clone(),
                value: serde_json::to_vec(&row).unwrap(),
            }]
            .into(),
        )
        .unwrap();
    w.restart(Box::new(w.mem.clone()));
    let mut a = a;
    let ca = w.connect(&mut a);
    w.sync(ca);
    // Loaded as stored.
    assert_eq!(targets(&mut w, &a, &b, &conv, "m1").len(), 7);
    // The next new target keeps only the newest `MAX_PUSH_TARGETS_PER_USER`.
    assert_eq!(
        register(&mut w, &b, json!({"token": "t8", "platform": "android"})).status,
        200
    );
    let mut expected: Vec<PushTarget> = (9 - MAX_PUSH_TARGETS_PER_USER..=8)
        .map(|i| fcm(&format!("t{i}")))
        .collect();
    expected.sort();
    assert_eq!(targets(&mut w, &a, &b, &conv, "m2"), expected);
}

#[test]
fn the_push_interval_ends_exactly_30_s_after_the_last_push_with_or_without_a_tick() {
    let mut w = World::new();
    let (a, b, conv) = pair(&mut w);
    assert_eq!(
        subscribe(&mut w, &b, "https://push.example/w/1", 7).status,
        200
    );
    assert_eq!(pushes(&w.msg(&a, &b, &conv, "m1")).len(), 1);
    // The clock moves without a tick: only the interval check decides.
    w.now = w.now.plus_ms(29_999);
    assert!(pushes(&w.msg(&a, &b, &conv, "m2")).is_empty());
    w.now = w.now.plus_ms(1);
    assert_eq!(pushes(&w.msg(&a, &b, &conv, "m3")).len(), 1);
    // A timer tick inside the interval keeps it: no second push for the burst.
    w.advance(29_999);
    assert!(pushes(&w.msg(&a, &b, &conv, "m4")).is_empty());
    w.advance(1);
    assert_eq!(pushes(&w.msg(&a, &b, &conv, "m5")).len(), 1);
}

#[test]
fn debug_shows_the_kind_of_a_target_and_the_number_of_accounts_only() {
    for (target, kind) in [
        (web("https://push.example/secret-path", 7), "web_push"),
        (fcm("secret-fcm"), "fcm"),
        (apns("secret-apns"), "apns"),
    ] {
        assert_eq!(target.kind(), kind);
        assert_eq!(
            format!("{target:?}"),
            format!("PushTarget::{kind}(<redacted>)")
        );
    }
    let mut w = World::new();
    let (_, b, _) = pair(&mut w);
    let dbg = format!("{:?}", w.relay);
    assert!(dbg.contains("PushState { accounts: 0, .. }"), "{dbg}");
    assert_eq!(
        register(
            &mut w,
            &b,
            json!({"token": "secret-fcm", "platform": "android"})
        )
        .status,
        200
    );
    let dbg = format!("{:?}", w.relay);
    assert!(dbg.contains("PushState { accounts: 1, .. }"), "{dbg}");
    assert!(!dbg.contains("secret-fcm"), "{dbg}");
}
