//! The queue bounds one at a time (small limits so each is reached quickly), and push
//! endpoints given by name, checked against the addresses the shell resolved.

use relay_core::destination::PushDestinations;
use relay_core::{Config, HttpRequest, Method};
use serde_json::json;
use wire::ServerFrame;
use wire::http::paths;

use crate::world::{User, World, b64, fast_config, frames};

const BIG: usize = 3 * 1024;

/// Sends one message of `BIG` payload bytes; `Ok(seq)` when acked, `Err(code)` when refused.
fn send(w: &mut World, from: &User, to: &User, conv: &str, id: &str) -> Result<u64, String> {
    let conn = from.conn.unwrap();
    let outs = w.send(
        conn,
        json!({"type":"msg","id":id,"to":to.alias,"conv_id":conv,"crypto_v":1,"payload":b64(&vec![1u8; BIG])}),
    );
    for f in frames(&outs, conn) {
        match f {
            ServerFrame::Ack(a) => return Ok(a.seq.get()),
            ServerFrame::Error(e) => return Err(e.error.to_string()),
            _ => {}
        }
    }
    panic!("no answer to {id}")
}

fn charge() -> u64 {
    relay_core::limits::queued_message_bytes("m-00".len(), BIG.div_ceil(3) * 4)
}

fn config() -> Config {
    Config {
        msgs_per_min_per_user: 100_000,
        max_offline_queue_bytes_per_conversation: 10 * charge(),
        max_offline_queue_per_recipient: 1_000,
        max_offline_queue_bytes_per_recipient: 15 * charge(),
        max_offline_queue_bytes_per_sender: 25 * charge(),
        max_offline_queue_bytes_total: 40 * charge(),
        ..fast_config()
    }
}

#[test]
fn each_queue_bound_refuses_with_its_own_code_and_frees_up_on_delivery() {
    let mut w = World::with_config(config());
    let mut senders: Vec<User> = (0..4).map(|i| w.user(&format!("s{i}"))).collect();
    let mut recipients: Vec<User> = (0..4).map(|i| w.user(&format!("r{i}"))).collect();
    let mut convs = std::collections::BTreeMap::new();
    for (i, s) in senders.iter().enumerate() {
        for (j, r) in recipients.iter().enumerate() {
            convs.insert((i, j), w.befriend(s, r));
        }
    }
    for s in &mut senders {
        w.connect(s);
    }
    let mut n = 0;
    let mut id = || {
        n += 1;
        format!("m-{n:02}")
    };
    // The conversation's share: 10 messages.
    for _ in 0..10 {
        send(&mut w, &senders[0], &recipients[0], &convs[&(0, 0)], &id()).unwrap();
    }
    assert_eq!(
        send(&mut w, &senders[0], &recipients[0], &convs[&(0, 0)], &id()),
        Err("QUEUE_FULL".into())
    );
    // The recipient's whole backlog: 15 messages.
    for _ in 0..5 {
        send(&mut w, &senders[1], &recipients[0], &convs[&(1, 0)], &id()).unwrap();
    }
    assert_eq!(
        send(&mut w, &senders[1], &recipients[0], &convs[&(1, 0)], &id()),
        Err("RECIPIENT_QUEUE_FULL".into())
    );
    // The sender's bytes over all recipients: 25 messages (10 already to r0).
    for _ in 0..10 {
        send(&mut w, &senders[0], &recipients[1], &convs[&(0, 1)], &id()).unwrap();
    }
    for _ in 0..5 {
        send(&mut w, &senders[0], &recipients[2], &convs[&(0, 2)], &id()).unwrap();
    }
    assert_eq!(
        send(&mut w, &senders[0], &recipients[2], &convs[&(0, 2)], &id()),
        Err("SENDER_QUEUE_FULL".into())
    );
    // The relay's total: 40 messages (30 queued so far).
    for _ in 0..10 {
        send(&mut w, &senders[2], &recipients[3], &convs[&(2, 3)], &id()).unwrap();
    }
    assert_eq!(
        send(&mut w, &senders[3], &recipients[3], &convs[&(3, 3)], &id()),
        Err("RELAY_QUEUE_FULL".into())
    );
    assert_eq!(w.relay.queued_bytes(), 40 * charge());
    // Delivery frees the room: r3 receives and acknowledges everything.
    let conn = w.connect(&mut recipients[3]);
    let outs = w.sync(conn);
    let seqs: Vec<u64> = frames(&outs, conn)
        .iter()
        .filter_map(|f| match f {
            ServerFrame::Msg(m) => Some(m.seq.get()),
            _ => None,
        })
        .collect();
    assert_eq!(seqs.len(), 10, "the acked messages are all there");
    w.send(
        conn,
        json!({"type":"delivered","conv_id":convs[&(2, 3)],"seq":seqs[9],"to":senders[2].alias}),
    );
    assert_eq!(w.relay.queued_bytes(), 30 * charge());
    assert!(send(&mut w, &senders[3], &recipients[3], &convs[&(3, 3)], &id()).is_ok());
    // The counts are rebuilt from the store after a restart.
    w.restart(Box::new(w.mem.clone()));
    assert_eq!(w.relay.queued_bytes(), 31 * charge());
}

/// Push endpoints given by name: refused unless the shell resolved that very name and every
/// address is public (the relay never resolves names itself).
#[test]
fn a_named_push_endpoint_needs_public_resolved_addresses() {
    let mut w = World::new();
    let u = w.user("u");
    let keys = {
        use base64::Engine as _;
        let url = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let mut point = vec![4u8];
        point.extend([7u8; 64]);
        json!({"p256dh": url.encode(point), "auth": url.encode([3u8; 16])})
    };
    let endpoint = "https://Push.Example.net./wpush/abc";
    let req = |resolved: Option<(&str, Vec<std::net::IpAddr>)>| {
        let mut r = HttpRequest::new(Method::Post, paths::PUSH_SUBSCRIBE)
            .json(&json!({"endpoint": endpoint, "keys": keys}))
            .bearer(&u.token);
        if let Some((host, addrs)) = resolved {
            r = r.resolved(host, addrs);
        }
        r
    };
    let ip = |s: &str| s.parse::<std::net::IpAddr>().unwrap();
    let code = |r: relay_core::HttpResponse| (r.status, r.error_code());
    assert_eq!(
        code(w.http(req(None))),
        (400, Some("PUSH_ENDPOINT_UNRESOLVABLE".into()))
    );
    assert_eq!(
        code(w.http(req(Some(("push.example.net", vec![]))))),
        (400, Some("PUSH_ENDPOINT_UNRESOLVABLE".into()))
    );
    assert_eq!(
        code(w.http(req(Some(("other.example", vec![ip("93.184.216.34")]))))),
        (400, Some("PUSH_ENDPOINT_UNRESOLVABLE".into())),
        "a resolution of another name does not count"
    );
    for private in [
        "127.0.0.1",
        "10.0.0.7",
        "169.254.169.254",
        "::1",
        "::ffff:10.0.0.1",
    ] {
        assert_eq!(
            code(w.http(req(Some((
                "push.example.net",
                vec![ip("93.184.216.34"), ip(private)]
            ))))),
            (400, Some("PUSH_ENDPOINT_FORBIDDEN".into())),
            "{private}"
        );
    }
    let ok = w.http(req(Some(("PUSH.example.net", vec![ip("93.184.216.34")]))));
    assert_eq!(ok.status, 200, "{:?}", ok.body_json());
    // The operator's allowlist.
    let mut w = World::with_config(Config {
        push_destinations: PushDestinations {
            allowed_hosts: vec!["*.push.services.mozilla.com".into()],
            ..PushDestinations::default()
        },
        ..fast_config()
    });
    let u2 = w.user("u2");
    let r = w.http(
        HttpRequest::new(Method::Post, paths::PUSH_SUBSCRIBE)
            .json(&json!({"endpoint": endpoint, "keys": keys}))
            .bearer(&u2.token)
            .resolved("push.example.net", vec![ip("93.184.216.34")]),
    );
    assert_eq!(code(r), (400, Some("PUSH_ENDPOINT_FORBIDDEN".into())));
    let r = w.http(
        HttpRequest::new(Method::Post, paths::PUSH_SUBSCRIBE)
            .json(&json!({"endpoint": "https://updates.push.services.mozilla.com/wpush/v2/x", "keys": keys}))
            .bearer(&u2.token)
            .resolved("updates.push.services.mozilla.com", vec![ip("34.107.221.82")]),
    );
    assert_eq!(r.status, 200, "{:?}", r.body_json());
}
