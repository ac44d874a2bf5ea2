use proptest::prelude::*;
use wire::{AliasId, ConvId, FriendshipId, MessageId, Seq, UnixMs, UserUuid};

use super::*;
use crate::handoff::{
    Announce, Answered, Applied, Contact, Fill, Forward, Forwarded, Handoff, Level, Levels,
    LevelsAsked, Message, Notice, NoticeKey, NoticeSent, NoticeTaken, PairOp, Reply, ShardId,
    Signal, Stamp, Stream, Submission, Submitted, Verdict,
};
use crate::http::{HttpRequest, HttpResponse, Method, Resolution};

fn user(n: u8) -> UserUuid {
    UserUuid::parse(&format!("00000000-0000-4000-8000-0000000000{n:02x}")).unwrap()
}

fn alias(name: &str) -> AliasId {
    AliasId::parse(name).unwrap()
}

fn conv() -> ConvId {
    ConvId::parse("c0ffee").unwrap()
}

fn stream() -> Stream {
    Stream {
        recipient: user(2),
        conv: conv(),
    }
}

fn msg_frame() -> wire::frames::MsgFrame {
    wire::frames::MsgFrame {
        id: MessageId::parse("m-1").unwrap(),
        to: alias("bob"),
        conv_id: conv(),
        crypto_v: Some(1),
        payload: "aGVsbG8=".into(),
    }
}

fn level() -> Level {
    Level {
        stream: Fill {
            msgs: 2,
            bytes: 300,
        },
        recipient: Fill {
            msgs: 5,
            bytes: 900,
        },
        stamp: Stamp { boot: 3, n: 17 },
    }
}

fn contact() -> Contact {
    Contact {
        id: FriendshipId(7),
        requester: user(1),
        addressee: user(2),
        status: wire::http::FriendStatus::Accepted,
        conversation_id: Some(conv()),
        created_at: UnixMs(1_700_000_000_000),
        rev: 2,
    }
}

fn request() -> HttpRequest {
    HttpRequest {
        method: Method::Post,
        path: "/api/v1/friends/request".into(),
        query: String::new(),
        authorization: Some("Bearer t".into()),
        remote_addr: "203.0.113.9".into(),
        body: b"{\"to_alias_id\":\"bob\"}\x00\xff".to_vec(),
        headers: vec![("x-payment-signature".into(), "sig".into())],
        resolved: Some(Resolution {
            host: "push.example".into(),
            addrs: vec![
                "198.51.100.7".parse().unwrap(),
                "2001:db8::1".parse().unwrap(),
            ],
        }),
    }
}

/// One crossing of every kind (and of every kind of what a kind carries).
// Long on purpose: a table of values, one entry per kind.
fn every_crossing() -> Vec<Crossing> {
    let (a, b) = (ShardId(0), ShardId(1));
    // Read from its name, as the envelope carries it.
    let code: wire::ErrorCode = serde_json::from_str("\"QUEUE_FULL\"").unwrap();
    let error = Reply::Error {
        code,
        words: "the recipient's queue is full".into(),
        ref_type: "msg".into(),
        id: Some("m-1".into()),
    };
    vec![
        Crossing::Handoff(Handoff {
            from: a,
            to: b,
            stream: stream(),
            seq: Seq(4),
            prev: Seq(2),
            item: Message {
                author: user(1),
                id: MessageId::parse("m-1").unwrap(),
                crypto_v: Some(1),
                payload: "aGVsbG8=".into(),
                at: UnixMs(1_700_000_000_123),
            },
        }),
        Crossing::Applied(Applied {
            from: b,
            to: a,
            stream: stream(),
            through: Seq(4),
            level: level(),
        }),
        Crossing::Submit(Submission {
            from: b,
            to: a,
            conn: 9,
            author: user(2),
            frame: Submitted::Msg(msg_frame()),
        }),
        Crossing::Submit(Submission {
            from: b,
            to: a,
            conn: 9,
            author: user(2),
            frame: Submitted::Retract(wire::frames::RetractFrame {
                id: MessageId::parse("m-1").unwrap(),
                to: alias("bob"),
                conv_id: conv(),
                crypto_v: None,
            }),
        }),
        Crossing::Verdict(Verdict {
            from: a,
            to: b,
            conn: 9,
            author: user(2),
            reply: Reply::Ack {
                id: MessageId::parse("m-1").unwrap(),
                seq: Seq(4),
                new: true,
            },
        }),
        Crossing::Verdict(Verdict {
            from: a,
            to: b,
            conn: 9,
            author: user(2),
            reply: error.clone(),
        }),
        Crossing::Verdict(Verdict {
            from: a,
            to: b,
            conn: 9,
            author: user(2),
            reply: Reply::Taken {
                id: MessageId::parse("m-1").unwrap(),
            },
        }),
        Crossing::Notice(NoticeSent {
            from: a,
            to: b,
            key: NoticeKey {
                user: user(2),
                what: "receipt/c0ffee/d".into(),
            },
            version: 3,
            item: Notice::Receipt {
                read: false,
                conv: conv(),
                seq: Seq(4),
                reader: user(2),
                author: user(1),
                from: Some(alias("bob")),
                to: None,
            },
        }),
        Crossing::Notice(NoticeSent {
            from: a,
            to: b,
            key: NoticeKey {
                user: user(2),
                what: "contact/7".into(),
            },
            version: 1,
            item: Notice::Contact {
                user: user(2),
                row: contact(),
                announce: Some(Announce::Request {
                    from: alias("alice"),
                    nickname: "Alice".into(),
                }),
            },
        }),
        Crossing::Taken(NoticeTaken {
            from: b,
            to: a,
            key: NoticeKey {
                user: user(2),
                what: "contact/7".into(),
            },
            version: 1,
        }),
        Crossing::Signal(Signal {
            from: a,
            to: b,
            user: user(2),
            frame: wire::ServerFrame::decode(
                r#"{"type":"goaway","reason":"server_shutdown","retry_after_ms":1000}"#,
            )
            .unwrap(),
            offline: Some((9, user(1), error)),
        }),
        Crossing::Forward(Forward {
            from: b,
            to: a,
            id: 12,
            op: Forwarded::Pair {
                user: user(2),
                op: PairOp::Accept {
                    id: FriendshipId(7),
                    other: None,
                    from: Some(alias("bob")),
                },
            },
        }),
        Crossing::Forward(Forward {
            from: b,
            to: a,
            id: 13,
            op: Forwarded::Storage {
                user: user(2),
                queued_bytes: 900,
                queued_msgs: 5,
            },
        }),
        Crossing::Forward(Forward {
            from: b,
            to: a,
            id: 14,
            op: Forwarded::Request {
                caller: Some((user(2), "jti-1".into())),
                req: request(),
            },
        }),
        Crossing::Answered(Answered {
            from: a,
            to: b,
            id: 12,
            response: HttpResponse::json(200, &serde_json::json!({"ok": true})),
            contact: Some((user(2), contact())),
        }),
        Crossing::LevelsAsked(LevelsAsked {
            from: a,
            to: b,
            stream: Some(stream()),
        }),
        Crossing::Levels(Levels {
            from: b,
            to: a,
            streams: vec![(stream(), Some(user(1)), level())],
            complete: true,
            stamp: Stamp { boot: 3, n: 18 },
        }),
    ]
}

#[test]
fn every_crossing_comes_back_as_it_went() {
    for c in every_crossing() {
        let text = encode(&c);
        assert_eq!(decode(&text), Ok(c), "{text}");
    }
}

/// The text between nodes is a contract between builds: a change here is a new version.
#[test]
fn the_envelopes_between_nodes_keep_their_shape() {
    let texts: Vec<String> = every_crossing().iter().map(encode).collect();
    insta::assert_snapshot!(texts.join("\n"));
}

#[test]
fn another_version_is_refused_by_its_number() {
    let text = encode(&every_crossing()[0]).replacen("\"v\":1", "\"v\":2", 1);
    assert_eq!(decode(&text), Err(EnvelopeError::Version { found: 2 }));
    // Also when the crossing itself is not one this build knows.
    let text = r#"{"v":7,"crossing":{"Teleport":{}}}"#;
    assert_eq!(decode(text), Err(EnvelopeError::Version { found: 7 }));
}

#[test]
fn malformed_and_oversized_envelopes_are_refused_without_quoting_them() {
    let secret = "Bearer eyJhbGciOi.secret";
    let text = format!(r#"{{"v":1,"crossing":{{"Forward":{{"from":"{secret}"}}}}}}"#);
    let err = decode(&text).unwrap_err();
    assert!(
        matches!(err, EnvelopeError::Malformed { kind: "data", .. }),
        "{err}"
    );
    assert!(!err.to_string().contains("secret"), "{err}");
    let big = " ".repeat(MAX_ENVELOPE_BYTES + 1);
    assert_eq!(
        decode(&big),
        Err(EnvelopeError::TooLarge {
            bytes: MAX_ENVELOPE_BYTES + 1
        })
    );
}

proptest! {
    /// No text makes decoding panic; every cut of a valid envelope is refused.
    #[test]
    fn decoding_never_panics(text in ".{0,300}", cut in 0usize..2_000) {
        let _ = decode(&text);
        let whole = encode(&every_crossing()[usize::from(text.len() % 17 == 0) * 13]);
        let cut = cut % whole.len();
        if whole.is_char_boundary(cut) {
            prop_assert!(decode(&whole[..cut]).is_err());
        }
    }
}
