//! Behaviour every [`ClientStore`] backend must show; run it with
//! [`client_store_tests!`](crate::client_store_tests).

#![allow(clippy::unwrap_used, missing_docs)]
use super::*;

/// A sample message.
pub fn msg(id: &str, conv: &str, time: u64) -> StoredMessage {
    StoredMessage {
        id: id.into(),
        conversation_id: conv.into(),
        text: format!("text {id}"),
        is_me: false,
        time,
        status: MessageStatus::Delivered,
        msg_type: None,
        media_url: None,
        caption: None,
        seq: Some(time),
        from_alias_id: Some("u2".into()),
        reply_to_id: None,
    }
}

/// A sample session.
pub fn session(conv: &str, alias: &str) -> SessionRecord {
    SessionRecord {
        conversation_id: conv.into(),
        their_alias_id: alias.into(),
        their_ecdh_public_key: "AAAA".into(),
        their_ed25519_public_key: None,
        session_key_base64: SecretString::new("c2VjcmV0".into()),
        trust_state: SessionTrust::Unverified,
        created_at: 1,
        pending_ecdh_public_key: None,
        former_alias_ids: Vec::new(),
    }
}

/// Identity save/load/replace/clear.
pub fn identity(s: &mut dyn ClientStore) {
    assert_eq!(s.load_identity().unwrap(), None);
    let mut id = StoredIdentity {
        uuid: "u-1".into(),
        alias_id: "u10000000".into(),
        nickname: "n".into(),
        mnemonic: SecretString::new("secret words".into()),
        signing_public_key: "S".into(),
        ecdh_public_key: "E".into(),
        x25519_path: X25519PathRecord::WebSdk,
    };
    s.save_identity(&id).unwrap();
    assert_eq!(s.load_identity().unwrap(), Some(id.clone()));
    id.uuid = "u-2".into();
    s.save_identity(&id).unwrap();
    assert_eq!(s.load_identity().unwrap(), Some(id));
    s.clear_identity().unwrap();
    assert_eq!(s.load_identity().unwrap(), None);
}

/// Sessions CRUD, lookup by alias, mark verified.
pub fn sessions(s: &mut dyn ClientStore) {
    s.save_session(&session("c2", "bob")).unwrap();
    s.save_session(&session("c1", "alice")).unwrap();
    assert_eq!(
        s.list_sessions()
            .unwrap()
            .iter()
            .map(|x| x.conversation_id.clone())
            .collect::<Vec<_>>(),
        vec!["c1", "c2"]
    );
    assert_eq!(
        s.load_session_by_alias("bob")
            .unwrap()
            .unwrap()
            .conversation_id,
        "c2"
    );
    assert_eq!(s.load_session_by_alias("carol").unwrap(), None);
    s.mark_session_verified("c1").unwrap();
    assert_eq!(
        s.load_session("c1").unwrap().unwrap().trust_state,
        SessionTrust::Verified
    );
    s.delete_session("c1").unwrap();
    assert_eq!(s.load_session("c1").unwrap(), None);
}

/// History ordering, limit/before, upsert, clear, export.
pub fn messages(s: &mut dyn ClientStore) {
    for (id, t) in [("b", 20), ("a", 10), ("c", 30), ("d", 30)] {
        s.put_message(&msg(id, "c1", t)).unwrap();
    }
    s.put_message(&msg("x", "c0", 5)).unwrap();
    let ids = |v: Vec<StoredMessage>| v.into_iter().map(|m| m.id).collect::<Vec<_>>();
    assert_eq!(
        ids(s.get_history("c1", None, None).unwrap()),
        ["a", "b", "c", "d"]
    );
    assert_eq!(ids(s.get_history("c1", Some(2), None).unwrap()), ["c", "d"]);
    assert_eq!(
        ids(s.get_history("c1", None, Some(30)).unwrap()),
        ["a", "b"]
    );
    assert_eq!(ids(s.get_history("c1", Some(1), Some(30)).unwrap()), ["b"]);
    assert_eq!(
        ids(s.get_history("c1", Some(0), None).unwrap()),
        Vec::<String>::new()
    );
    let mut m = msg("a", "c1", 10);
    m.status = MessageStatus::Read;
    s.put_message(&m).unwrap();
    assert_eq!(s.get_message("a").unwrap(), Some(m));
    assert_eq!(s.get_message("zz").unwrap(), None);
    let one = s.export_conversation(ExportScope::parse("c0")).unwrap();
    assert_eq!(
        one,
        "{\"id\":\"x\",\"conversationId\":\"c0\",\"text\":\"text x\",\"isMe\":false,\"time\":5,\"status\":\"delivered\",\"seq\":5,\"fromAliasId\":\"u2\"}\n"
    );
    let all = s.export_conversation(ExportScope::parse("all")).unwrap();
    assert_eq!(all.lines().count(), 5);
    assert!(all.starts_with(&one));
    for l in all.lines() {
        let _: StoredMessage = serde_json::from_str(l).unwrap();
    }
    assert_eq!(s.message_conversations().unwrap(), ["c0", "c1"]);
    s.clear_history("c1").unwrap();
    assert!(s.get_history("c1", None, None).unwrap().is_empty());
    assert_eq!(s.get_history("c0", None, None).unwrap().len(), 1);
    s.clear_all_history().unwrap();
    assert_eq!(s.export_conversation(ExportScope::All).unwrap(), "");
}

/// Outbox, offline inbox and trust records.
pub fn queues_and_trust(s: &mut dyn ClientStore) {
    let intent = |id: &str, at: u64| OutboxIntent {
        internal_id: id.into(),
        conversation_id: "c1".into(),
        to_alias_id: "bob".into(),
        text: "hi".into(),
        added_at: at,
        reply_to_id: None,
        attempts: 0,
    };
    s.put_outbox(&intent("m2", 2)).unwrap();
    s.put_outbox(&intent("m1", 1)).unwrap();
    let mut i = intent("m2", 2);
    i.attempts = 3;
    s.put_outbox(&i).unwrap();
    let l = s.list_outbox().unwrap();
    assert_eq!(l.len(), 2);
    assert_eq!(l[0].internal_id, "m1");
    assert_eq!(l[1].attempts, 3);
    s.delete_outbox("m1").unwrap();
    assert_eq!(s.list_outbox().unwrap().len(), 1);

    let off = |id: &str, at: u64| OfflineMessage {
        id: id.into(),
        conversation_id: "c9".into(),
        seq: 0,
        payload_encrypted: "p".into(),
        created_at: at,
        from_alias_id: "eve".into(),
    };
    s.put_offline(&off("o2", 5)).unwrap();
    s.put_offline(&off("o1", 5)).unwrap();
    s.put_offline(&off("o1", 5)).unwrap();
    assert_eq!(
        s.list_offline()
            .unwrap()
            .into_iter()
            .map(|o| o.id)
            .collect::<Vec<_>>(),
        ["o1", "o2"]
    );
    let mut other = off("o3", 6);
    other.conversation_id = "c8".into();
    s.put_offline(&other).unwrap();
    assert_eq!(s.count_offline(Some("c9")).unwrap(), 2);
    assert_eq!(s.count_offline(Some("c8")).unwrap(), 1);
    assert_eq!(s.count_offline(None).unwrap(), 3);
    assert!(s.has_offline("o3").unwrap());
    s.delete_offline("o3").unwrap();
    assert!(!s.has_offline("o3").unwrap());
    s.delete_offline("o1").unwrap();
    assert_eq!(s.list_offline().unwrap().len(), 1);

    let t = TrustRecord {
        contact_id: "bob".into(),
        status: "verified".into(),
        verified_at: 3,
        fingerprint_snapshot: "a1b2c3d4".into(),
    };
    s.put_trust(&t).unwrap();
    assert_eq!(s.list_trust().unwrap(), vec![t]);
    s.delete_trust("bob").unwrap();
    assert!(s.list_trust().unwrap().is_empty());
}

/// Pending actions: upsert by order, listed in order, delete.
pub fn pending_actions(s: &mut dyn ClientStore) {
    assert!(s.list_pending_actions().unwrap().is_empty());
    let a = |order: u64, kind: PendingActionKind| PendingAction {
        order,
        conversation_id: "c1".into(),
        to_alias_id: "bob".into(),
        added_at: 9,
        kind,
    };
    s.put_pending_action(&a(10, PendingActionKind::Read { seq: 4 }))
        .unwrap();
    s.put_pending_action(&a(
        2,
        PendingActionKind::Retract {
            message_id: "m1".into(),
        },
    ))
    .unwrap();
    s.put_pending_action(&a(10, PendingActionKind::Read { seq: 5 }))
        .unwrap();
    let l = s.list_pending_actions().unwrap();
    assert_eq!(l.iter().map(|x| x.order).collect::<Vec<_>>(), [2, 10]);
    assert_eq!(l[1].kind, PendingActionKind::Read { seq: 5 });
    s.delete_pending_action(2).unwrap();
    assert_eq!(s.list_pending_actions().unwrap().len(), 1);
}

/// Confirmed orders: idempotent insert, membership.
pub fn confirmed_orders(s: &mut dyn ClientStore) {
    assert!(!s.has_confirmed_order("o-1").unwrap());
    s.put_confirmed_order("o-1").unwrap();
    s.put_confirmed_order("o-1").unwrap();
    s.put_confirmed_order("o-2").unwrap();
    assert!(s.has_confirmed_order("o-1").unwrap());
    assert!(s.has_confirmed_order("o-2").unwrap());
    assert!(!s.has_confirmed_order("o-3").unwrap());
}

/// Receipt levels: upsert by conversation, listed by conversation id.
pub fn receipt_levels(s: &mut dyn ClientStore) {
    assert!(s.list_receipt_levels().unwrap().is_empty());
    let level = |c: &str, d: u64, r: u64| ReceiptLevel {
        conversation_id: c.into(),
        seqs: ReceiptLevelSeqs {
            delivered_seq: d,
            read_seq: r,
        },
    };
    s.put_receipt_level(&level("c2", 5, 0)).unwrap();
    s.put_receipt_level(&level("c1", 3, 1)).unwrap();
    s.put_receipt_level(&level("c2", 7, 7)).unwrap();
    assert_eq!(
        s.list_receipt_levels().unwrap(),
        vec![level("c1", 3, 1), level("c2", 7, 7)]
    );
}

/// Expands to one `#[test]` per conformance check for a store built by `$make` (an expression).
#[macro_export]
macro_rules! client_store_tests {
    ($modname:ident, $make:expr) => {
        mod $modname {
            #[allow(unused_imports)]
            use super::*;
            use $crate::store::conformance as c;
            #[test]
            fn identity() {
                let mut s = $make;
                c::identity(&mut s);
            }
            #[test]
            fn sessions() {
                let mut s = $make;
                c::sessions(&mut s);
            }
            #[test]
            fn messages() {
                let mut s = $make;
                c::messages(&mut s);
            }
            #[test]
            fn queues_and_trust() {
                let mut s = $make;
                c::queues_and_trust(&mut s);
            }
            #[test]
            fn pending_actions() {
                let mut s = $make;
                c::pending_actions(&mut s);
            }
            #[test]
            fn confirmed_orders() {
                let mut s = $make;
                c::confirmed_orders(&mut s);
            }
            #[test]
            fn receipt_levels() {
                let mut s = $make;
                c::receipt_levels(&mut s);
            }
        }
    };
}
