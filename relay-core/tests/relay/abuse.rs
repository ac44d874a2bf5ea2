//! What a hostile account could do with the production defaults (`Config::default()` apart
//! from a cheap PoW), driven in memory under the virtual clock: aim push endpoints into the
//! relay's own network, park backlogs in its memory, enumerate aliases, spam friend
//! requests, and use nicknames that hide or reorder text.

use relay_core::{HttpRequest, Method};
use serde_json::json;
use wire::ServerFrame;
use wire::http::paths;

use crate::world::{T0, User, World, b64, fast_config, frames, pushes};

/// A P-256 public key (65 bytes) and an auth secret (16 bytes), base64url.
fn subscription_keys() -> serde_json::Value {
    use base64::Engine as _;
    let url = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let mut point = vec![4u8];
    point.extend([7u8; 64]);
    json!({"p256dh": url.encode(point), "auth": url.encode([3u8; 16])})
}

fn subscribe(w: &mut World, u: &User, endpoint: &str) -> relay_core::HttpResponse {
    w.post(
        paths::PUSH_SUBSCRIBE,
        json!({"endpoint": endpoint, "keys": subscription_keys()}),
        Some(&u.token),
    )
}

/// Every address form the relay was once made to connect to is refused at subscription with
/// a stable code, and nothing is stored: an offline recipient with such a "target" is never
/// pushed.
#[test]
fn push_endpoints_into_the_relays_own_network_are_refused() {
    let mut w = World::new();
    let mut a = w.user("a");
    let b = w.user("b");
    let conv = w.befriend(&a, &b);
    for host in [
        "127.0.0.1",
        "localhost",
        "[::1]",
        "[::ffff:127.0.0.1]",
        "127.1",
        "0x7f000001",
        "0.0.0.0",
        "[::]",
        "10.1.2.3",
        "192.168.0.10",
        "169.254.169.254",
        "2130706433",
        "0177.0.0.1",
        "[fd00::1]",
        "[fe80::1]",
        "100.64.0.1",
        "metadata.google.internal",
    ] {
        for port in ["", ":8443"] {
            let endpoint = format!("https://{host}{port}/wpush/v2/abc");
            let r = subscribe(&mut w, &b, &endpoint);
            assert_eq!(r.status, 400, "{endpoint}: {:?}", r.body_json());
            assert_eq!(
                r.error_code().as_deref(),
                Some("PUSH_ENDPOINT_FORBIDDEN"),
                "{endpoint}"
            );
            let message = r.body_json()["message"].as_str().unwrap().to_owned();
            assert!(!message.contains("wpush"), "the endpoint is never echoed");
        }
    }
    // http:// is refused in production whatever the host.
    let r = subscribe(&mut w, &b, "http://push.example.net/x");
    assert_eq!(r.error_code().as_deref(), Some("PUSH_ENDPOINT_FORBIDDEN"));
    // Nothing was stored: b offline, a message, no push.
    w.connect(&mut a);
    let outs = w.msg(&a, &b, &conv, "m1");
    assert!(pushes(&outs).is_empty(), "{:?}", pushes(&outs));
}

/// One sender cannot park more than its share in an offline recipient's queue, nor more than
/// its bound over all recipients; every refusal is an error frame with a stable code and no
/// ack, and what was acknowledged before stays and is delivered.
#[test]
fn one_sender_parks_a_bounded_backlog_and_keeps_what_was_acked() {
    let mut w = World::new();
    let mut attacker = w.user("attacker");
    let mut victims: Vec<(User, String)> = Vec::new();
    for i in 0..4 {
        let v = w.user(&format!("v{i}"));
        let conv = w.befriend(&attacker, &v);
        victims.push((v, conv));
    }
    let conn = w.connect(&mut attacker);
    // The largest payload a frame may carry.
    let payload = b64(&vec![0x5a; 36 * 1024]);
    let mut acked = Vec::new();
    let mut refusals = std::collections::BTreeMap::<String, usize>::new();
    let mut sent = 0u64;
    for (v, conv) in &victims {
        for n in 0..100 {
            // Stay under the message rate limit (120 per minute).
            sent += 1;
            if sent.is_multiple_of(100) {
                w.advance(60_000);
            }
            let id = format!("{}-{n}", v.alias);
            let outs = w.send(
                conn,
                json!({"type":"msg","id":id,"to":v.alias,"conv_id":conv,"crypto_v":1,"payload":payload}),
            );
            for f in frames(&outs, conn) {
                match f {
                    ServerFrame::Ack(a) => acked.push((v.clone(), conv.clone(), a.id.to_string())),
                    ServerFrame::Error(e) => {
                        assert_eq!(e.id.as_deref(), Some(id.as_str()));
                        *refusals.entry(e.error.to_string()).or_default() += 1;
                    }
                    _ => {}
                }
            }
        }
    }
    let parked: usize = acked.len() * (36 * 1024 * 4 / 3);
    assert!(
        parked <= 4 * 1024 * 1024 + 64 * 1024,
        "one account parked {parked} bytes ({} messages); refusals {refusals:?}",
        acked.len()
    );
    assert!(refusals.contains_key("QUEUE_FULL"), "{refusals:?}");
    assert!(refusals.contains_key("SENDER_QUEUE_FULL"), "{refusals:?}");
    // Nothing acknowledged was dropped: every victim gets every acked message.
    for (v, conv) in &mut victims {
        let mut v = v.clone();
        let vc = w.connect(&mut v);
        let mut got = Vec::new();
        let mut outs = w.sync(vc);
        loop {
            let fs = frames(&outs, vc);
            let ms: Vec<_> = fs
                .iter()
                .filter_map(|f| match f {
                    ServerFrame::Msg(m) => Some((m.id.to_string(), m.seq.get())),
                    _ => None,
                })
                .collect();
            if ms.is_empty() {
                break;
            }
            got.extend(ms.iter().map(|(id, _)| id.clone()));
            let last = ms.iter().map(|(_, s)| *s).max().unwrap();
            outs = w.send(
                vc,
                json!({"type":"delivered","conv_id":conv,"seq":last,"to":attacker.alias}),
            );
        }
        let want: Vec<String> = acked
            .iter()
            .filter(|(to, _, _)| to.uuid == v.uuid)
            .map(|(_, _, id)| id.clone())
            .collect();
        assert_eq!(got, want, "victim {} got every acked message", v.alias);
    }
}

/// `GET /users/{alias}` answers a burst, then 429 with `Retry-After` until the budget refills;
/// an unauthenticated lookup is still 401, never 429.
#[test]
fn user_lookups_are_rate_limited_per_account() {
    let mut w = World::new();
    let a = w.user("a");
    let mut answered = 0;
    let mut first_429 = None;
    for n in 0..200u32 {
        let r = w.get(
            &format!("/api/v1/users/u{:08}", 10_000_000 + n),
            Some(&a.token),
        );
        match r.status {
            404 => answered += 1,
            429 => {
                first_429 = Some(r);
                break;
            }
            s => panic!("unexpected {s}"),
        }
    }
    let r = first_429.expect("lookups are limited");
    assert!(answered <= 30, "{answered} lookups before the limit");
    assert_eq!(r.error_code().as_deref(), Some("RATE_LIMITED"));
    let wait = r.retry_after_s.expect("Retry-After");
    assert!((1..=60).contains(&wait), "{wait}");
    assert_eq!(w.get("/api/v1/users/u10000000", None).status, 401);
    w.advance(wait * 1000);
    assert_eq!(
        w.get("/api/v1/users/u10000000", Some(&a.token)).status,
        404,
        "one more after Retry-After"
    );
}

/// Friend requests: a burst, then 429 with `Retry-After`.
#[test]
fn friend_requests_are_rate_limited_per_account() {
    let mut w = World::new();
    let spammer = w.user("spammer");
    let mut targets = Vec::new();
    for i in 0..60 {
        targets.push(w.user(&format!("t{i}")));
    }
    let mut sent = 0;
    let mut limited = None;
    for t in &targets {
        let r = w.post(
            paths::FRIEND_REQUEST,
            json!({"to_alias_id": t.alias}),
            Some(&spammer.token),
        );
        match r.status {
            200 => sent += 1,
            429 => {
                limited = Some(r);
                break;
            }
            s => panic!("unexpected {s}: {:?}", r.body_json()),
        }
    }
    let r = limited.expect("friend requests are limited");
    assert!(sent <= 50, "{sent} requests in a row");
    assert!(r.retry_after_s.is_some());
}

/// Every other authenticated route shares a per-account budget: a flood of reads is answered
/// 429 with `Retry-After` once it is used up.
#[test]
fn a_flood_of_account_reads_is_rate_limited() {
    let mut w = World::new();
    let a = w.user("a");
    let mut ok = 0;
    let r = loop {
        let r = w.get(paths::FRIENDS, Some(&a.token));
        if r.status != 200 {
            break r;
        }
        ok += 1;
        assert!(ok < 5_000, "no limit");
    };
    assert_eq!(r.status, 429);
    assert!(r.retry_after_s.is_some());
    assert!(ok >= 100, "an honest client's bursts pass ({ok})");
}

/// Unauthenticated routes are limited per client address.
#[test]
fn a_flood_of_public_requests_is_rate_limited_per_address() {
    let mut w = World::new();
    let mut ok = 0;
    let r = loop {
        let r =
            w.http(HttpRequest::new(Method::Get, paths::VANITY_SEARCH).from_addr("203.0.113.9"));
        if r.status != 200 {
            break r;
        }
        ok += 1;
        assert!(ok < 5_000, "no limit");
    };
    assert_eq!(r.status, 429);
    assert!(r.retry_after_s.is_some());
    let other =
        w.http(HttpRequest::new(Method::Get, paths::VANITY_SEARCH).from_addr("203.0.113.10"));
    assert_eq!(other.status, 200, "another address is not limited");
}

/// Nicknames: no bidi controls, zero-width or other invisible characters; stored as NFC;
/// emoji sequences still work.
#[test]
fn nicknames_that_hide_or_reorder_text_are_refused() {
    let mut w = World::new();
    let mut n = 0u32;
    let mut register = |w: &mut World, nick: &str| {
        n += 1;
        let (sk, x) = w.fresh_keys();
        w.register_with(&sk, x, nick, &format!("192.0.2.{}", n % 200))
    };
    for nick in [
        "admin\u{202E}nimda",
        "\u{202D}x",
        "a\u{2066}b\u{2069}",
        "zero\u{200B}width",
        "a\u{200C}b",
        "a\u{200D}b",
        "\u{2060}x",
        "\u{FEFF}bom",
        "\u{3164}",
        "\u{2800}",
        "\u{115F}x",
        "x\u{00AD}y",
        "x\u{E0041}",
        "nb\u{00A0}sp",
        "line\u{2028}sep",
        "pua\u{E000}",
        "\u{0301}starts with a mark",
        "z\u{0301}\u{0302}\u{0303}\u{0304}\u{0305}\u{0306}\u{0307}",
    ] {
        let r = register(&mut w, nick);
        assert_eq!(r.status, 400, "{nick:?}: {:?}", r.body_json());
        assert_eq!(r.error_code().as_deref(), Some("INVALID_FIELD"), "{nick:?}");
    }
    // NFC: a decomposed é is stored composed, and the lookup shows it.
    let r = register(&mut w, "Ame\u{0301}lie");
    assert_eq!(r.status, 201, "{:?}", r.body_json());
    let alias = r.body_json()["alias_id"].as_str().unwrap().to_owned();
    let looker = w.user("looker");
    let profile = w.get(&paths::with(paths::USER, &alias), Some(&looker.token));
    assert_eq!(profile.body_json()["nickname"], "Am\u{00E9}lie");
    for nick in [
        "\u{1F468}\u{200D}\u{1F469}\u{200D}\u{1F467} family",
        "\u{2764}\u{FE0F} heart",
        "\u{1F44D}\u{1F3FD}",
        "\u{1F3F4}\u{E0067}\u{E0062}\u{E0065}\u{E006E}\u{E0067}\u{E007F}",
        "Zoë Ğül 王小明 محمد",
        "e\u{0301}\u{0302}",
    ] {
        let r = register(&mut w, nick);
        assert_eq!(r.status, 201, "{nick:?}: {:?}", r.body_json());
    }
}

/// The per-user message limit is the same after a restart: the windows are rebuilt from the
/// store.
#[test]
fn the_message_limit_survives_a_restart() {
    let mut w = World::with_config(fast_config());
    let mut a = w.user("a");
    let b = w.user("b");
    let conv = w.befriend(&a, &b);
    w.connect(&mut a);
    let limit = w.config.msgs_per_min_per_user;
    for n in 0..limit {
        let outs = w.msg(&a, &b, &conv, &format!("m{n}"));
        assert!(
            frames(&outs, a.conn.unwrap())
                .iter()
                .any(|f| matches!(f, ServerFrame::Ack(_))),
            "message {n}"
        );
    }
    let refused = |w: &mut World, a: &User, id: &str| {
        let outs = w.msg(a, &b, &conv, id);
        frames(&outs, a.conn.unwrap())
            .iter()
            .any(|f| matches!(f, ServerFrame::Error(e) if e.error.as_str() == "RATE_LIMITED"))
    };
    assert!(refused(&mut w, &a, "over"));
    w.restart(Box::new(w.mem.clone()));
    w.now = w.now.plus_ms(1_000);
    w.connect(&mut a);
    assert!(
        refused(&mut w, &a, "after-restart"),
        "the limit does not reset on restart"
    );
    // The window still ends when it would have.
    w.now = wire::UnixMs(T0).plus_ms(61_000);
    w.connect(&mut a);
    assert!(!refused(&mut w, &a, "next-minute"));
}

/// The SQLite store's database, WAL and shared-memory files are the owner's alone.
#[cfg(unix)]
#[test]
fn the_sqlite_store_files_are_private() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("relay.sqlite3");
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    let wal = dir.path().join("relay.sqlite3-wal");
    let shm = dir.path().join("relay.sqlite3-shm");
    {
        let store = relay_core::store::SqliteStore::open(&path).unwrap();
        let _relay = relay_core::Relay::new(fast_config(), Box::new(store), 1).unwrap();
        for p in [&path, &wal, &shm] {
            assert!(p.exists(), "{}", p.display());
            assert_eq!(mode(p), 0o600, "{}", p.display());
        }
    }
    // Files an older version left readable are narrowed when the store opens.
    for p in [&path, &wal, &shm] {
        if p.exists() {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o644)).unwrap();
        }
    }
    let _store = relay_core::store::SqliteStore::open(&path).unwrap();
    for p in [&path, &wal, &shm] {
        if p.exists() {
            assert_eq!(mode(p), 0o600, "{}", p.display());
        }
    }
}
